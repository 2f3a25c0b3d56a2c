/* The Check-dependent half of the test kit (kit-check.h). */
#include "kit-check.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

/* ------------------------------------------------------------ checked helpers */

void *tu_xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    tu_check(p != NULL, "out of memory (%zu bytes)", n);
    return p;
}

void *tu_xcalloc(size_t n)
{
    void *p = calloc(n ? n : 1, 1);
    ck_assert_msg(p != NULL, "out of memory (%zu bytes)", n);
    return p;
}

tu_guarded tu_guarded_alloc(size_t bytes, unsigned char fill)
{
    tu_guarded g;
    ck_assert_msg(tu_guarded_init(&g, bytes, fill) == 0,
                  "tu_guarded_alloc: out of memory (%zu bytes)", bytes);
    return g;
}

void tu_assert_guard(const tu_guarded *g, const char *label)
{
    tu_check(tu_guard_ok(g), "%s: write outside the output (guard band)", label);
}

void tu_assert_bytes_eq(const void *got, const void *want, size_t n, const char *label)
{
    const unsigned char *g = got, *w = want;
    for (size_t i = 0; i < n; i++)
        tu_check(g[i] == w[i], "%s: byte %zu is 0x%02x, want 0x%02x (of %zu)", label, i,
                 g[i], w[i], n);
}

void tu_assert_i32_eq(const int32_t *got, const int32_t *want, int64_t n, const char *label)
{
    for (int64_t i = 0; i < n; i++)
        tu_check(got[i] == want[i], "%s: [%" PRId64 "] is %d, want %d", label, i, got[i],
                 want[i]);
}

void tu_assert_i64_eq(const int64_t *got, const int64_t *want, int64_t n, const char *label)
{
    for (int64_t i = 0; i < n; i++)
        tu_check(got[i] == want[i], "%s: [%" PRId64 "] is %" PRId64 ", want %" PRId64, label,
                 i, got[i], want[i]);
}

/* ------------------------------------------------------------ OpenCL devices */

static int best_opencl_device(void);

int tu_probe_opencl_device(void)
{
    /* The child may load the OpenCL driver; the parent (the Check runner) never does. */
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        return 0;
    if (pid == 0) {
        size_t count = 0;
        if (clvarlen_device_count(&count) != CLVARLEN_SUCCESS || count == 0)
            _exit(1);
        const char *spec = getenv("CLVARLEN_TEST_DEVICE");
        int index = -1;
        if (spec && *spec) {
            if (clvarlen_device_select(spec, &index, NULL, 0) != CLVARLEN_SUCCESS || index < 0)
                _exit(1);
        } else if ((index = best_opencl_device()) < 0) {
            _exit(1);
        }
        /* The test's output names the OpenCL implementation it runs on. */
        clvarlen_device_info info;
        if (clvarlen_device_query(index, &info) == CLVARLEN_SUCCESS)
            printf("OpenCL device %d: %s (%s, driver %s)\n", index, info.device_name,
                   info.platform_name, info.driver_version);
        fflush(stdout);
        _exit(0);
    }
    int status = 0;
    if (waitpid(pid, &status, 0) != pid)
        return 0;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

static int kind_rank(clvarlen_device_kind kind)
{
    switch (kind) {
    case CLVARLEN_DEVICE_DISCRETE_GPU: return 0;
    case CLVARLEN_DEVICE_INTEGRATED_GPU: return 1;
    case CLVARLEN_DEVICE_OPENCL_CPU: return 2;
    case CLVARLEN_DEVICE_ACCELERATOR: return 3;
    default: return 4;
    }
}

/* The default order of clvarlen_device_select, but never the CPU fallback and
 * independent of CLVARLEN_DEVICE (which a test may have set to "cpu"); -1 when
 * there is no OpenCL device. No Check calls: the probe's child runs it too. */
static int best_opencl_device(void)
{
    size_t count = 0;
    if (clvarlen_device_count(&count) != CLVARLEN_SUCCESS)
        return -1;
    int best = -1, best_rank = 99;
    for (size_t i = 0; i < count; i++) {
        clvarlen_device_info info;
        if (clvarlen_device_query((int)i, &info) != CLVARLEN_SUCCESS)
            continue;
        int rank = kind_rank(info.kind);
        if (rank < best_rank) {
            best_rank = rank;
            best = (int)i;
        }
    }
    return best;
}

int tu_second_device(void)
{
    const char *env = getenv("CLVARLEN_TEST_DEVICE");
    return env && *env;
}

void tu_emulated_forms(int on)
{
    static const char opt[] = "-cl-opt-disable";
    const char *cur = getenv("CLVARLEN_BUILD_OPTIONS");
    if (!on) {
        if (cur && strcmp(cur, opt) == 0)
            unsetenv("CLVARLEN_BUILD_OPTIONS");
        return;
    }
    if (cur && *cur)
        return;
    /* the default device's (a second implementation never runs these tests) */
    int best = best_opencl_device();
    clvarlen_device_info info;
    if (!tu_second_device() && best >= 0 &&
        clvarlen_device_query(best, &info) == CLVARLEN_SUCCESS &&
        info.vendor != CLVARLEN_VENDOR_NVIDIA)
        setenv("CLVARLEN_BUILD_OPTIONS", opt, 1);
}

const char *tu_cl_device_spec(void)
{
    static char spec[32];
    const char *env = getenv("CLVARLEN_TEST_DEVICE");
    if (env && *env)
        return env;
    int best = best_opencl_device();
    ck_assert_msg(best >= 0, "no usable OpenCL device");
    snprintf(spec, sizeof spec, "%d", best);
    return spec;
}

clvarlen_context *tu_cl_context(void)
{
    const char *spec = tu_cl_device_spec();
    clvarlen_options *opt = NULL;
    ck_assert_int_eq(clvarlen_options_create(&opt), CLVARLEN_SUCCESS);
    ck_assert_int_eq(clvarlen_options_set_device(opt, spec), CLVARLEN_SUCCESS);
    clvarlen_context *ctx = NULL;
    clvarlen_status st = clvarlen_context_create(opt, &ctx);
    clvarlen_options_destroy(opt);
    ck_assert_msg(st == CLVARLEN_SUCCESS, "context on OpenCL device '%s': %s (%s)", spec,
                  clvarlen_status_name(st), clvarlen_last_error(NULL));
    clvarlen_device_info info;
    ck_assert_int_eq(clvarlen_context_device(ctx, &info), CLVARLEN_SUCCESS);
    ck_assert_msg(info.kind != CLVARLEN_DEVICE_CPU_FALLBACK,
                  "device '%s' gave the CPU fallback, not OpenCL", spec);
    return ctx;
}

clvarlen_context *tu_cpu_context(void)
{
    clvarlen_options *opt = NULL;
    ck_assert_int_eq(clvarlen_options_create(&opt), CLVARLEN_SUCCESS);
    ck_assert_int_eq(clvarlen_options_set_device(opt, "cpu"), CLVARLEN_SUCCESS);
    clvarlen_context *ctx = NULL;
    clvarlen_status st = clvarlen_context_create(opt, &ctx);
    clvarlen_options_destroy(opt);
    ck_assert_msg(st == CLVARLEN_SUCCESS, "CPU context: %s (%s)", clvarlen_status_name(st),
                  clvarlen_last_error(NULL));
    return ctx;
}

/* ------------------------------------------------------------ files */

char *tu_make_temp_dir(const char *tag)
{
    char base[4096];
    const char *cache = getenv("CLVARLEN_CACHE_DIR");
    const char *tmp = getenv("TMPDIR"), *test_tmp = getenv("CLVARLEN_TEST_TMPDIR");
    if (test_tmp && test_tmp[0] == '/') {
        snprintf(base, sizeof base, "%s", test_tmp);
    } else if (cache && cache[0] == '/') {
        /* The parent of the build tree's kernel cache: stays inside the build directory. */
        snprintf(base, sizeof base, "%s", cache);
        char *slash = strrchr(base, '/');
        if (slash && slash != base)
            *slash = '\0';
    } else {
        snprintf(base, sizeof base, "%s", tmp && *tmp ? tmp : "/tmp");
    }
    size_t need = strlen(base) + strlen(tag) + 32;
    char *path = malloc(need);
    ck_assert_ptr_nonnull(path);
    snprintf(path, need, "%s/clvarlen-%s-XXXXXX", base, tag);
    ck_assert_msg(mkdtemp(path) != NULL, "mkdtemp(%s) failed", path);
    return path;
}

/* ------------------------------------------------------------ running */

int tu_run_suite(Suite *s)
{
    SRunner *sr = srunner_create(s);
    /* CK_VERBOSITY, CK_FORK, CK_RUN_CASE ... come from the environment. */
    srunner_run_all(sr, CK_ENV);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
