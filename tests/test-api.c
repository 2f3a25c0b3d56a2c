/* The public API's contract on the CPU fallback: status strings, version,
 * dtypes, options, contexts, clvarlen_last_error; the helpers test-api.h
 * declares; and the suite, with the segment entry points' invalid arguments
 * from test-api-segment.c.
 *
 * This binary makes no OpenCL call of its own: every context is "cpu".
 */
#include "test-api.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ outputs under watch */

void *out_add(outs *o, size_t bytes)
{
    ck_assert(o->n < 8);
    o->g[o->n] = tu_guarded_alloc(bytes, SENTINEL);
    return o->g[o->n++].p;
}

void outs_fill(outs *o)
{
    for (int i = 0; i < o->n; i++)
        memset(o->g[i].p, SENTINEL, o->g[i].bytes);
}

void outs_untouched(const outs *o, const char *label)
{
    for (int i = 0; i < o->n; i++) {
        const unsigned char *p = o->g[i].p;
        tu_check(tu_guard_ok(&o->g[i]), "%s: guard band of output %d overwritten", label, i);
        for (size_t b = 0; b < o->g[i].bytes; b++)
            tu_check(p[b] == SENTINEL, "%s: output %d byte %zu written (0x%02x)", label, i,
                     b, p[b]);
    }
}

void outs_free(outs *o)
{
    for (int i = 0; i < o->n; i++)
        tu_guarded_free(&o->g[i]);
    o->n = 0;
}

void check_err(const clvarlen_context *ctx, clvarlen_status got, clvarlen_status want,
               clvarlen_status alt, const char *fn, const char *label)
{
    const char *msg = clvarlen_last_error(ctx);
    tu_check(got == want || (alt != CLVARLEN_SUCCESS && got == alt),
             "%s (%s): got %s, want %s%s%s; message: %s", fn, label,
             clvarlen_status_name(got), clvarlen_status_name(want),
             alt != CLVARLEN_SUCCESS ? " or " : "",
             alt != CLVARLEN_SUCCESS ? clvarlen_status_name(alt) : "", msg ? msg : "(NULL)");
    tu_check(msg != NULL && msg[0] != '\0', "%s (%s): empty error message", fn, label);
    tu_check(strstr(msg, fn) != NULL, "%s (%s): message does not name the function: %s", fn,
             label, msg);
}

void check_ok(const clvarlen_context *ctx, clvarlen_status got, const char *label)
{
    const char *msg = clvarlen_last_error(ctx);
    tu_check(got == CLVARLEN_SUCCESS, "%s: got %s: %s", label, clvarlen_status_name(got),
             msg ? msg : "(NULL)");
    tu_check(msg != NULL && msg[0] == '\0', "%s: message not cleared after success: %s", label,
             msg ? msg : "(NULL)");
}

/* ------------------------------------------------------------ status, version, dtypes */

START_TEST(api_status_strings)
{
    static const char *const names[] = {
        "CLVARLEN_SUCCESS", "CLVARLEN_ERROR_INVALID_ARGUMENT", "CLVARLEN_ERROR_INVALID_CU_SEQLENS",
        "CLVARLEN_ERROR_INDEX_OUT_OF_RANGE", "CLVARLEN_ERROR_BUFFER_TOO_SMALL",
        "CLVARLEN_ERROR_UNSUPPORTED", "CLVARLEN_ERROR_OUT_OF_MEMORY",
        "CLVARLEN_ERROR_DEVICE_NOT_FOUND", "CLVARLEN_ERROR_OPENCL",
        "CLVARLEN_ERROR_KERNEL_NOT_FOUND", "CLVARLEN_ERROR_KERNEL_BUILD",
        "CLVARLEN_ERROR_NO_OPENCL", "CLVARLEN_ERROR_OVERFLOW", "CLVARLEN_ERROR_INTERNAL"};
    const int n = (int)(sizeof names / sizeof names[0]);
    ck_assert_int_eq(CLVARLEN_ERROR_INTERNAL + 1, n);
    for (int s = 0; s < n; s++) {
        const char *str = clvarlen_status_str((clvarlen_status)s);
        const char *name = clvarlen_status_name((clvarlen_status)s);
        ck_assert_ptr_nonnull(str);
        ck_assert_ptr_nonnull(name);
        tu_check(str[0] != '\0', "status %d: empty string", s);
        ck_assert_str_eq(name, names[s]);
        for (int t = 0; t < s; t++)
            tu_check(strcmp(str, clvarlen_status_str((clvarlen_status)t)) != 0,
                     "statuses %d and %d share the string '%s'", s, t, str);
    }
    ck_assert_str_eq(clvarlen_status_str(CLVARLEN_SUCCESS), "success");
    /* Unknown values still get a string, never NULL. */
    const int unknown[] = {-1, n, 999};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        const char *str = clvarlen_status_str((clvarlen_status)unknown[i]);
        const char *name = clvarlen_status_name((clvarlen_status)unknown[i]);
        ck_assert_ptr_nonnull(str);
        ck_assert_ptr_nonnull(name);
        ck_assert(str[0] != '\0' && name[0] != '\0');
    }
}
END_TEST

START_TEST(api_version)
{
    ck_assert_int_eq(clvarlen_version(), CLVARLEN_VERSION);
    ck_assert_int_eq(CLVARLEN_VERSION, CLVARLEN_VERSION_ENCODE(CLVARLEN_VERSION_MAJOR,
                                                               CLVARLEN_VERSION_MINOR,
                                                               CLVARLEN_VERSION_PATCH));
    char expect[64];
    snprintf(expect, sizeof expect, "%d.%d.%d", CLVARLEN_VERSION_MAJOR, CLVARLEN_VERSION_MINOR,
             CLVARLEN_VERSION_PATCH);
    ck_assert_ptr_nonnull(clvarlen_version_string());
    ck_assert_str_eq(clvarlen_version_string(), expect);
}
END_TEST

START_TEST(api_dtypes)
{
    static const struct {
        clvarlen_dtype dtype;
        size_t size;
        const char *name;
    } table[] = {
        {CLVARLEN_DTYPE_F32, 4, "f32"}, {CLVARLEN_DTYPE_F16, 2, "f16"},
        {CLVARLEN_DTYPE_BF16, 2, "bf16"}, {CLVARLEN_DTYPE_F64, 8, "f64"},
        {CLVARLEN_DTYPE_I32, 4, "i32"}, {CLVARLEN_DTYPE_I64, 8, "i64"},
        {CLVARLEN_DTYPE_U8, 1, "u8"},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        ck_assert_uint_eq(clvarlen_dtype_size(table[i].dtype), table[i].size);
        ck_assert_str_eq(clvarlen_dtype_name(table[i].dtype), table[i].name);
    }
    ck_assert_uint_eq(clvarlen_dtype_size(BAD_DTYPE), 0);
    ck_assert_uint_eq(clvarlen_dtype_size((clvarlen_dtype)-1), 0);
    ck_assert_str_eq(clvarlen_dtype_name(BAD_DTYPE), "unknown");
}
END_TEST

/* ------------------------------------------------------------ options and contexts */

static void quiet_log(clvarlen_log_level level, const char *message, void *user)
{
    (void)level;
    (void)message;
    (void)user;
}

START_TEST(api_options)
{
    clvarlen_options *o = NULL;
    check_err(NULL, clvarlen_options_create(NULL), IA, CLVARLEN_SUCCESS, "clvarlen_options_create",
              "NULL");
    ck_assert_int_eq(clvarlen_options_create(&o), CLVARLEN_SUCCESS);
    ck_assert_ptr_nonnull(o);

    check_err(NULL, clvarlen_options_set_device(NULL, "cpu"), IA, 0, "clvarlen_options_set_device",
              "NULL options");
    check_err(NULL, clvarlen_options_set_threads(NULL, 1), IA, 0, "clvarlen_options_set_threads",
              "NULL options");
    check_err(NULL, clvarlen_options_set_threads(o, -1), IA, 0, "clvarlen_options_set_threads",
              "threads -1");
    check_err(NULL, clvarlen_options_set_kernel_path(NULL, "/x"), IA, 0,
              "clvarlen_options_set_kernel_path", "NULL options");
    check_err(NULL, clvarlen_options_set_cache_dir(NULL, "off"), IA, 0,
              "clvarlen_options_set_cache_dir", "NULL options");
    check_err(NULL, clvarlen_options_set_log(NULL, quiet_log, NULL, CLVARLEN_LOG_ERROR), IA, 0,
              "clvarlen_options_set_log", "NULL options");
    check_err(NULL, clvarlen_options_set_log(o, quiet_log, NULL, (clvarlen_log_level)7), IA, 0,
              "clvarlen_options_set_log", "level 7");
    check_err(NULL, clvarlen_options_set_log(o, quiet_log, NULL, (clvarlen_log_level)-1), IA, 0,
              "clvarlen_options_set_log", "level -1");
    check_err(NULL, clvarlen_options_set_device_checks(NULL, 1), IA, 0,
              "clvarlen_options_set_device_checks", "NULL options");

    ck_assert_int_eq(clvarlen_options_set_device(o, NULL), CLVARLEN_SUCCESS);
    ck_assert_int_eq(clvarlen_options_set_device(o, "cpu"), CLVARLEN_SUCCESS);
    ck_assert_int_eq(clvarlen_options_set_threads(o, 0), CLVARLEN_SUCCESS);
    ck_assert_int_eq(clvarlen_options_set_threads(o, 2), CLVARLEN_SUCCESS);
    ck_assert_int_eq(clvarlen_options_set_kernel_path(o, "/nonexistent:/also-not"),
                     CLVARLEN_SUCCESS);
    ck_assert_int_eq(clvarlen_options_set_kernel_path(o, NULL), CLVARLEN_SUCCESS);
    ck_assert_int_eq(clvarlen_options_set_cache_dir(o, "off"), CLVARLEN_SUCCESS);
    ck_assert_int_eq(clvarlen_options_set_log(o, quiet_log, NULL, CLVARLEN_LOG_DEBUG),
                     CLVARLEN_SUCCESS);
    ck_assert_int_eq(clvarlen_options_set_log(o, NULL, NULL, CLVARLEN_LOG_ERROR), CLVARLEN_SUCCESS);
    ck_assert_int_eq(clvarlen_options_set_device_checks(o, 1), CLVARLEN_SUCCESS);
    ck_assert_int_eq(clvarlen_options_set_device_checks(o, 0), CLVARLEN_SUCCESS);

    /* The options are copied into the context: destroying them first is fine. */
    clvarlen_context *ctx = NULL;
    check_err(NULL, clvarlen_context_create(o, NULL), IA, 0, "clvarlen_context_create",
              "NULL out");
    ck_assert_int_eq(clvarlen_context_create(o, &ctx), CLVARLEN_SUCCESS);
    clvarlen_options_destroy(o);
    ck_assert_int_eq(clvarlen_context_threads(ctx), 2);
    clvarlen_context_destroy(ctx);

    clvarlen_options_destroy(NULL);
    clvarlen_context_destroy(NULL);
}
END_TEST

START_TEST(api_context_cpu)
{
    clvarlen_context *ctx = tu_cpu_context();
    clvarlen_device_info info;
    memset(&info, 0x5C, sizeof info);
    ck_assert_int_eq(clvarlen_context_device(ctx, &info), CLVARLEN_SUCCESS);
    ck_assert_int_eq(info.index, -1);
    ck_assert_int_eq(info.kind, CLVARLEN_DEVICE_CPU_FALLBACK);
    ck_assert_int_eq(info.vendor, CLVARLEN_VENDOR_CPU);
    tu_check(memchr(info.device_name, '\0', sizeof info.device_name) != NULL,
             "device_name not terminated");
    tu_check(info.device_name[0] != '\0', "empty device name");
    ck_assert_int_ge(clvarlen_context_threads(ctx), 1);
    ck_assert_int_eq(clvarlen_context_finish(ctx), CLVARLEN_SUCCESS);
    check_err(NULL, clvarlen_context_finish(NULL), IA, 0, "clvarlen_context_finish", "NULL");
    check_err(NULL, clvarlen_context_device(NULL, &info), IA, 0, "clvarlen_context_device", "NULL");
    check_err(ctx, clvarlen_context_device(ctx, NULL), IA, 0, "clvarlen_context_device",
              "NULL info");

    clvarlen_device_info cpu;
    ck_assert_int_eq(clvarlen_device_query(-1, &cpu), CLVARLEN_SUCCESS);
    ck_assert_int_eq(cpu.index, -1);
    ck_assert_int_eq(cpu.kind, CLVARLEN_DEVICE_CPU_FALLBACK);
    check_err(NULL, clvarlen_device_query(-1, NULL), IA, 0, "clvarlen_device_query", "NULL info");
    check_err(NULL, clvarlen_device_query(-2, &cpu), IA, 0, "clvarlen_device_query", "index -2");
    check_err(NULL, clvarlen_device_count(NULL), IA, 0, "clvarlen_device_count", "NULL");

    int index = 7;
    char reason[256] = "";
    ck_assert_int_eq(clvarlen_device_select("cpu", &index, reason, sizeof reason),
                     CLVARLEN_SUCCESS);
    ck_assert_int_eq(index, -1);
    tu_check(reason[0] != '\0', "device_select gave no reason");
    ck_assert_int_eq(clvarlen_device_select("CPU", &index, NULL, 0), CLVARLEN_SUCCESS);
    ck_assert_int_eq(index, -1);
    clvarlen_context_destroy(ctx);
}
END_TEST

START_TEST(api_device_env_cpu)
{
    /* CLVARLEN_DEVICE=cpu applies when neither the options nor the call name a device. */
    setenv("CLVARLEN_DEVICE", "cpu", 1);
    clvarlen_context *ctx = NULL;
    ck_assert_int_eq(clvarlen_context_create(NULL, &ctx), CLVARLEN_SUCCESS);
    clvarlen_device_info info;
    ck_assert_int_eq(clvarlen_context_device(ctx, &info), CLVARLEN_SUCCESS);
    ck_assert_int_eq(info.kind, CLVARLEN_DEVICE_CPU_FALLBACK);
    ck_assert_int_eq(info.index, -1);
    clvarlen_context_destroy(ctx);

    int index = 3;
    ck_assert_int_eq(clvarlen_device_select(NULL, &index, NULL, 0), CLVARLEN_SUCCESS);
    ck_assert_int_eq(index, -1);

    clvarlen_options *o = NULL;
    ck_assert_int_eq(clvarlen_options_create(&o), CLVARLEN_SUCCESS);
    ck_assert_int_eq(clvarlen_options_set_threads(o, 1), CLVARLEN_SUCCESS);
    ck_assert_int_eq(clvarlen_context_create(o, &ctx), CLVARLEN_SUCCESS);
    ck_assert_int_eq(clvarlen_context_device(ctx, &info), CLVARLEN_SUCCESS);
    ck_assert_int_eq(info.kind, CLVARLEN_DEVICE_CPU_FALLBACK);
    ck_assert_int_eq(clvarlen_context_threads(ctx), 1);
    clvarlen_context_destroy(ctx);
    clvarlen_options_destroy(o);
    unsetenv("CLVARLEN_DEVICE");
}
END_TEST

typedef struct log_capture {
    int calls;
    clvarlen_log_level level;
    char last[1024];
} log_capture;

static void capture_log(clvarlen_log_level level, const char *message, void *user)
{
    log_capture *c = user;
    c->calls++;
    c->level = level;
    snprintf(c->last, sizeof c->last, "%s", message);
}

static void *thread_last_error(void *arg)
{
    const char **out = arg;
    *out = clvarlen_last_error(NULL);
    return NULL;
}

START_TEST(api_last_error)
{
    clvarlen_context *ctx = tu_cpu_context();
    const char *msg = clvarlen_last_error(ctx);
    ck_assert_ptr_nonnull(msg);
    ck_assert_str_eq(msg, "");

    int32_t lengths[2] = {1, -1}, cu[3];
    ck_assert_int_eq(clvarlen_cu_seqlens_from_lengths(ctx, lengths, 2, cu), IA);
    msg = clvarlen_last_error(ctx);
    tu_check(msg[0] != '\0' && strstr(msg, "clvarlen_cu_seqlens_from_lengths"),
             "message: %s", msg);
    /* A success on the same context clears it. */
    lengths[1] = 2;
    ck_assert_int_eq(clvarlen_cu_seqlens_from_lengths(ctx, lengths, 2, cu), CLVARLEN_SUCCESS);
    ck_assert_str_eq(clvarlen_last_error(ctx), "");

    /* Calls without a context keep their message per thread. */
    ck_assert_int_eq(clvarlen_cu_seqlens_from_lengths(NULL, lengths, 2, cu), IA);
    msg = clvarlen_last_error(NULL);
    tu_check(msg[0] != '\0' && strstr(msg, "clvarlen_cu_seqlens_from_lengths"),
             "orphan message: %s", msg);
    const char *other = NULL;
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, thread_last_error, &other), 0);
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    ck_assert_ptr_nonnull(other);
    tu_check(other[0] == '\0', "another thread sees this thread's message: %s", other);
    tu_check(clvarlen_last_error(NULL)[0] != '\0', "message lost");
    /* A success on a context leaves the thread's message alone; a success
     * without a context clears it. */
    ck_assert_int_eq(clvarlen_cu_seqlens_from_lengths(ctx, lengths, 2, cu), CLVARLEN_SUCCESS);
    tu_check(clvarlen_last_error(NULL)[0] != '\0', "a call on a context cleared the thread's "
             "message");
    clvarlen_device_info cpu_info;
    ck_assert_int_eq(clvarlen_device_query(-1, &cpu_info), CLVARLEN_SUCCESS);
    ck_assert_str_eq(clvarlen_last_error(NULL), "");
    /* Errors on a context do not disturb another context. */
    clvarlen_context *ctx2 = tu_cpu_context();
    ck_assert_int_eq(clvarlen_cu_seqlens_from_lengths(ctx2, NULL, 2, cu), IA);
    ck_assert_str_eq(clvarlen_last_error(ctx), "");
    ck_assert(clvarlen_last_error(ctx2)[0] != '\0');
    clvarlen_context_destroy(ctx2);
    clvarlen_context_destroy(ctx);

    /* The error goes to the log handler too, at error level. */
    log_capture cap;
    memset(&cap, 0, sizeof cap);
    clvarlen_options *o = NULL;
    ck_assert_int_eq(clvarlen_options_create(&o), CLVARLEN_SUCCESS);
    ck_assert_int_eq(clvarlen_options_set_device(o, "cpu"), CLVARLEN_SUCCESS);
    ck_assert_int_eq(clvarlen_options_set_log(o, capture_log, &cap, CLVARLEN_LOG_ERROR),
                     CLVARLEN_SUCCESS);
    ck_assert_int_eq(clvarlen_context_create(o, &ctx), CLVARLEN_SUCCESS);
    clvarlen_options_destroy(o);
    cap.calls = 0;
    ck_assert_int_eq(clvarlen_cu_seqlens_from_lengths(ctx, lengths, -3, cu), IA);
    ck_assert_int_ge(cap.calls, 1);
    ck_assert_int_eq(cap.level, CLVARLEN_LOG_ERROR);
    ck_assert_str_eq(cap.last, clvarlen_last_error(ctx));
    clvarlen_context_destroy(ctx);
}
END_TEST

static Suite *api_suite(void)
{
    Suite *s = suite_create("api");
    TCase *tc = tcase_create("basics");
    tcase_add_test(tc, api_status_strings);
    tcase_add_test(tc, api_version);
    tcase_add_test(tc, api_dtypes);
    tcase_add_test(tc, api_options);
    tcase_add_test(tc, api_context_cpu);
    tcase_add_test(tc, api_device_env_cpu);
    tcase_add_test(tc, api_last_error);
    suite_add_tcase(s, tc);

    suite_add_tcase(s, api_segment_cases());
    suite_add_tcase(s, api_limits_cases());
    suite_add_tcase(s, api_abi_cases());
    return s;
}

int main(void)
{
    return tu_run_suite(api_suite());
}
