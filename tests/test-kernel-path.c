/* Finding and building kernel sources (OpenCL): CLVARLEN_KERNEL_PATH and
 * clvarlen_options_set_kernel_path. The path is searched first: a directory
 * without the kernels falls through to the copies compiled into the library;
 * one with segment.cl but no common.clh gives CLVARLEN_ERROR_KERNEL_NOT_FOUND
 * naming the file; a directory with a broken segment.cl gives CLVARLEN_ERROR_KERNEL_BUILD with the build log in the
 * message; a directory with good copies is used. The program cache is off
 * here, so every context reads the sources.
 */
#include "kit-check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BROKEN_IDENTIFIER "clvarlen_test_undeclared_identifier"

/* The source tree's cl/ directory (meson sets CLVARLEN_SOURCE_DIR; else the first entry of
 * CLVARLEN_KERNEL_PATH). */
static void source_cl_dir(char *out, size_t size)
{
    const char *src = getenv("CLVARLEN_SOURCE_DIR");
    if (src && *src) {
        snprintf(out, size, "%s/cl", src);
        return;
    }
    const char *kp = getenv("CLVARLEN_KERNEL_PATH");
    tu_check(kp && *kp, "set CLVARLEN_SOURCE_DIR or CLVARLEN_KERNEL_PATH");
    snprintf(out, size, "%s", kp);
    char *colon = strchr(out, ':');
    if (colon)
        *colon = '\0';
}

static void copy_file(const char *from_dir, const char *to_dir, const char *name)
{
    char from[2048], to[2048];
    snprintf(from, sizeof from, "%s/%s", from_dir, name);
    snprintf(to, sizeof to, "%s/%s", to_dir, name);
    size_t size = 0;
    char *data = tu_read_file(from, &size);
    tu_check(data != NULL, "cannot read %s", from);
    ck_assert_int_eq(tu_write_file(to, data, size), 0);
    free(data);
}

/* A context with kernel_path (NULL: not set) and the cache off; the log is collected. */
static clvarlen_context *path_context(const char *kernel_path, tu_log *log)
{
    clvarlen_options *o = NULL;
    ck_assert_int_eq(clvarlen_options_create(&o), CLVARLEN_SUCCESS);
    ck_assert_int_eq(clvarlen_options_set_device(o, tu_cl_device_spec()), CLVARLEN_SUCCESS);
    ck_assert_int_eq(clvarlen_options_set_cache_dir(o, "off"), CLVARLEN_SUCCESS);
    if (kernel_path)
        ck_assert_int_eq(clvarlen_options_set_kernel_path(o, kernel_path), CLVARLEN_SUCCESS);
    if (log)
        ck_assert_int_eq(clvarlen_options_set_log(o, tu_log_fn, log, CLVARLEN_LOG_DEBUG),
                         CLVARLEN_SUCCESS);
    clvarlen_context *ctx = NULL;
    clvarlen_status st = clvarlen_context_create(o, &ctx);
    clvarlen_options_destroy(o);
    /* Kernels are found when first used, so creating the context succeeds. */
    tu_check(st == CLVARLEN_SUCCESS, "context: %s", clvarlen_last_error(NULL));
    return ctx;
}

/* A gather that needs segment.cl; returns its status. On success the rows are checked; on
 * failure the output must be untouched. */
static clvarlen_status try_gather(clvarlen_context *ctx)
{
    float src[4 * 3] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, dst[3 * 3];
    static const int32_t index[3] = {3, -1, 1};
    memset(dst, 0x77, sizeof dst);
    clvarlen_status st = clvarlen_gather_rows(ctx, CLVARLEN_DTYPE_F32, 3, src, 4, 0, index, 3,
                                              dst, 0);
    if (st == CLVARLEN_SUCCESS) {
        static const float want[9] = {10, 11, 12, 0, 0, 0, 4, 5, 6};
        tu_check(memcmp(dst, want, sizeof want) == 0, "gather gave wrong rows");
    } else {
        for (size_t i = 0; i < sizeof dst; i++)
            tu_check(((unsigned char *)dst)[i] == 0x77, "failed gather wrote its output");
    }
    return st;
}

/* Tests that set CLVARLEN_KERNEL_PATH put it back (for CK_FORK=no runs). */
static char *saved_kernel_path;

static void set_kernel_path_env(const char *value)
{
    const char *env = getenv("CLVARLEN_KERNEL_PATH");
    free(saved_kernel_path);
    saved_kernel_path = env ? strdup(env) : NULL;
    setenv("CLVARLEN_KERNEL_PATH", value, 1);
}

static void restore_kernel_path_env(void)
{
    if (saved_kernel_path)
        setenv("CLVARLEN_KERNEL_PATH", saved_kernel_path, 1);
    else
        unsetenv("CLVARLEN_KERNEL_PATH");
    free(saved_kernel_path);
    saved_kernel_path = NULL;
}

#define EXPECT_STATUS(ctx, got, want)                                                          \
    tu_check((got) == (want), "got %s, want %s: %s", clvarlen_status_name(got),                \
             clvarlen_status_name(want), clvarlen_last_error(ctx))

/* The status and message of a gather on a context whose kernel path is `dir` (as the
 * option, or through CLVARLEN_KERNEL_PATH); the directory is removed before returning, so a
 * failing assertion leaves nothing behind. */
static clvarlen_status gather_with_path(char *dir, int via_env, char *msg, size_t msg_size)
{
    if (via_env)
        set_kernel_path_env(dir);
    clvarlen_context *ctx = path_context(via_env ? NULL : dir, NULL);
    clvarlen_status st = try_gather(ctx);
    snprintf(msg, msg_size, "%s", clvarlen_last_error(ctx));
    /* It fails the same way again (nothing half-built was kept). */
    clvarlen_status again = try_gather(ctx);
    clvarlen_context_destroy(ctx);
    if (via_env)
        restore_kernel_path_env();
    tu_remove_tree(dir);
    tu_check(again == st, "second call: %s, first: %s", clvarlen_status_name(again),
             clvarlen_status_name(st));
    return st;
}

/* The path is searched first, not alone: a directory without the kernel falls through to the
 * copies compiled into the library, as the README documents. */
START_TEST(kp_empty_option_falls_through)
{
    char *dir = tu_make_temp_dir("kernels-empty");
    char msg[4096];
    clvarlen_status st = gather_with_path(dir, 0, msg, sizeof msg);
    tu_check(st == CLVARLEN_SUCCESS, "kernel path %s without kernels: got %s, want the "
             "built-in kernels (%s)", dir, clvarlen_status_name(st), msg);
    free(dir);
}
END_TEST

START_TEST(kp_empty_env_falls_through)
{
    char *dir = tu_make_temp_dir("kernels-empty");
    char msg[4096];
    clvarlen_status st = gather_with_path(dir, 1, msg, sizeof msg);
    tu_check(st == CLVARLEN_SUCCESS, "CLVARLEN_KERNEL_PATH=%s without kernels: got %s, want the "
             "built-in kernels (%s)", dir, clvarlen_status_name(st), msg);
    free(dir);
}
END_TEST

START_TEST(kp_missing_common)
{
    /* segment.cl and cv-shared.h without common.clh next to them. */
    char src[2048];
    source_cl_dir(src, sizeof src);
    char *dir = tu_make_temp_dir("kernels-nocommon");
    copy_file(src, dir, "cv-shared.h");
    copy_file(src, dir, "segment.cl");
    clvarlen_context *ctx = path_context(dir, NULL);
    EXPECT_STATUS(ctx, try_gather(ctx), CLVARLEN_ERROR_KERNEL_NOT_FOUND);
    tu_check(strstr(clvarlen_last_error(ctx), "common.clh") != NULL, "message: %s",
             clvarlen_last_error(ctx));
    clvarlen_context_destroy(ctx);
    tu_remove_tree(dir);
    free(dir);
}
END_TEST

START_TEST(kp_broken_source)
{
    char src[2048], path[2048];
    source_cl_dir(src, sizeof src);
    char *dir = tu_make_temp_dir("kernels-broken");
    copy_file(src, dir, "cv-shared.h");
    copy_file(src, dir, "common.clh");
    static const char broken[] =
        "/* deliberately broken for test-kernel-path */\n"
        "__kernel void clvarlen_broken(__global int *out)\n"
        "{\n"
        "    out[get_global_id(0)] = " BROKEN_IDENTIFIER ";\n"
        "}\n";
    snprintf(path, sizeof path, "%s/segment.cl", dir);
    ck_assert_int_eq(tu_write_file(path, broken, sizeof broken - 1), 0);
    clvarlen_context *ctx = path_context(dir, NULL);
    EXPECT_STATUS(ctx, try_gather(ctx), CLVARLEN_ERROR_KERNEL_BUILD);
    const char *msg = clvarlen_last_error(ctx);
    tu_check(strstr(msg, BROKEN_IDENTIFIER) != NULL,
             "the message does not carry the build log: %s", msg);
    tu_check(strstr(msg, "segment.cl") != NULL, "message does not name the file: %s", msg);
    clvarlen_context_destroy(ctx);

    /* The same through CLVARLEN_KERNEL_PATH. */
    set_kernel_path_env(dir);
    ctx = path_context(NULL, NULL);
    EXPECT_STATUS(ctx, try_gather(ctx), CLVARLEN_ERROR_KERNEL_BUILD);
    clvarlen_context_destroy(ctx);
    restore_kernel_path_env();
    tu_remove_tree(dir);
    free(dir);
}
END_TEST

START_TEST(kp_good_copy_is_used)
{
    /* An empty directory first in the list, then good copies: the copies are used. */
    char src[2048], list[4096];
    source_cl_dir(src, sizeof src);
    char *empty = tu_make_temp_dir("kernels-empty");
    char *good = tu_make_temp_dir("kernels-good");
    copy_file(src, good, "cv-shared.h");
    copy_file(src, good, "common.clh");
    copy_file(src, good, "segment.cl");
    copy_file(src, good, "segment.clh");
    snprintf(list, sizeof list, "%s:%s", empty, good);
    tu_log log = {0};
    clvarlen_context *ctx = path_context(list, &log);
    EXPECT_STATUS(ctx, try_gather(ctx), CLVARLEN_SUCCESS);
    tu_check(tu_log_count(&log, good) > 0, "the log does not show %s was used:\n%s", good,
             log.text ? log.text : "");
    clvarlen_context_destroy(ctx);
    tu_log_free(&log);
    tu_remove_tree(empty);
    tu_remove_tree(good);
    free(empty);
    free(good);
}
END_TEST

/* CLVARLEN_BUILD_OPTIONS (a developer knob) is appended to every program's
 * options: the build log line names it; one too long for the options buffer
 * is refused with INVALID_ARGUMENT, not cut. */
START_TEST(kp_build_options)
{
    tu_log log = {0};
    setenv("CLVARLEN_BUILD_OPTIONS", "-DCLVARLEN_TEST_EXTRA_OPTION=1", 1);
    clvarlen_context *ctx = path_context(NULL, &log);
    EXPECT_STATUS(ctx, try_gather(ctx), CLVARLEN_SUCCESS);
    tu_check(tu_log_count(&log, "-DCLVARLEN_TEST_EXTRA_OPTION=1") > 0,
             "the build log does not show the extra option:\n%s", log.text ? log.text : "");
    clvarlen_context_destroy(ctx);
    tu_log_free(&log);

    char *longopt = tu_xmalloc(2001);
    memset(longopt, 'x', 2000);
    memcpy(longopt, "-D", 2);
    longopt[2000] = '\0';
    setenv("CLVARLEN_BUILD_OPTIONS", longopt, 1);
    free(longopt);
    ctx = path_context(NULL, NULL);
    EXPECT_STATUS(ctx, try_gather(ctx), CLVARLEN_ERROR_INVALID_ARGUMENT);
    tu_check(strstr(clvarlen_last_error(ctx), "CLVARLEN_BUILD_OPTIONS") != NULL,
             "the message does not name the variable: %s", clvarlen_last_error(ctx));
    clvarlen_context_destroy(ctx);
    unsetenv("CLVARLEN_BUILD_OPTIONS");
}
END_TEST

START_TEST(kp_device_not_found)
{
    clvarlen_options *o = NULL;
    ck_assert_int_eq(clvarlen_options_create(&o), CLVARLEN_SUCCESS);
    ck_assert_int_eq(clvarlen_options_set_device(o, "no-such-device-for-clvarlen-tests"),
                     CLVARLEN_SUCCESS);
    clvarlen_context *ctx = NULL;
    clvarlen_status st = clvarlen_context_create(o, &ctx);
    clvarlen_options_destroy(o);
    tu_check(st == CLVARLEN_ERROR_DEVICE_NOT_FOUND, "got %s", clvarlen_status_name(st));
    ck_assert(clvarlen_last_error(NULL)[0] != '\0');
    int index = 5;
    st = clvarlen_device_select("99999", &index, NULL, 0);
    tu_check(st == CLVARLEN_ERROR_DEVICE_NOT_FOUND, "index 99999: got %s",
             clvarlen_status_name(st));
}
END_TEST

int main(void)
{
    if (!tu_probe_opencl_device())
        return TU_EXIT_SKIP;
    Suite *s = suite_create("kernel-path");
    TCase *tc = tcase_create("kernel-path");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, kp_empty_option_falls_through);
    tcase_add_test(tc, kp_empty_env_falls_through);
    tcase_add_test(tc, kp_missing_common);
    tcase_add_test(tc, kp_broken_source);
    tcase_add_test(tc, kp_good_copy_is_used);
    tcase_add_test(tc, kp_device_not_found);
    tcase_add_test(tc, kp_build_options);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
