/* Kernels ahead of time (clvarlen_context_precompile) and the supports query
 * (clvarlen_supports), on the CPU fallback and, in the OpenCL build, on the
 * device: a precompiled context's later calls build nothing (the debug log
 * reports no "compiling"), progress is reported step by step, unsupported
 * dtypes and head dims are named, bad params refused.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kit-check.h"

typedef struct progress_log {
    int calls, last_done, total;
    char last[96];
} progress_log;

static void on_progress(void *user, int done, int total, const char *what)
{
    progress_log *l = user;
    ck_assert_int_eq(done, l->last_done + 1);
    l->calls++;
    l->last_done = done;
    l->total = total;
    snprintf(l->last, sizeof l->last, "%s", what);
}

static int compiles;

static void count_compiles(clvarlen_log_level level, const char *message, void *user)
{
    (void)level;
    (void)user;
    if (strncmp(message, "compiling ", 10) == 0)
        compiles++;
}

static clvarlen_context *make_ctx(int log_compiles)
{
    clvarlen_options *opt = NULL;
    ck_assert_int_eq(clvarlen_options_create(&opt), CLVARLEN_SUCCESS);
#if TEST_BACKEND_CL
    ck_assert_int_eq(clvarlen_options_set_device(opt, tu_cl_device_spec()), CLVARLEN_SUCCESS);
#else
    ck_assert_int_eq(clvarlen_options_set_device(opt, "cpu"), CLVARLEN_SUCCESS);
#endif
    if (log_compiles)
        ck_assert_int_eq(clvarlen_options_set_log(opt, count_compiles, NULL, CLVARLEN_LOG_INFO),
                         CLVARLEN_SUCCESS);
    clvarlen_context *ctx = NULL;
    ck_assert_int_eq(clvarlen_context_create(opt, &ctx), CLVARLEN_SUCCESS);
    clvarlen_options_destroy(opt);
    return ctx;
}

START_TEST(precompile_then_nothing_compiles)
{
    clvarlen_context *ctx = make_ctx(1);
    clvarlen_precompile_params p;
    clvarlen_precompile_params_init(&p);
    p.dtypes[0] = CLVARLEN_DTYPE_BF16;
    p.n_dtypes = 1;
    p.head_dims[0] = 64;
    p.n_head_dims = 1;
    p.heads_q = 4;
    p.heads_kv = 2;
    progress_log log = {0, 0, 0, ""};
    p.progress = on_progress;
    p.progress_user = &log;
    clvarlen_status st = clvarlen_context_precompile(ctx, &p);
    ck_assert_msg(st == CLVARLEN_SUCCESS, "precompile: %s", clvarlen_last_error(ctx));
    ck_assert_int_eq(log.total, 1 + 4);
    ck_assert_int_eq(log.calls, log.total);
    ck_assert_str_eq(log.last, "gated delta rule bf16 D 64");
    /* The same shapes again: every kernel is already there. */
    compiles = 0;
    ck_assert_int_eq(clvarlen_supports(ctx, CLVARLEN_PRECOMPILE_ATTENTION_BACKWARD,
                                       CLVARLEN_DTYPE_BF16, 64, 4, 2),
                     CLVARLEN_SUCCESS);
    ck_assert_int_eq(clvarlen_supports(ctx, CLVARLEN_PRECOMPILE_PAGED, CLVARLEN_DTYPE_BF16, 64,
                                       4, 2),
                     CLVARLEN_SUCCESS);
    ck_assert_msg(compiles == 0, "%d kernels compiled after precompile", compiles);
    clvarlen_context_destroy(ctx);
}
END_TEST

START_TEST(supports_and_errors)
{
    clvarlen_context *ctx = make_ctx(0);
    clvarlen_status st = clvarlen_supports(ctx, CLVARLEN_PRECOMPILE_ATTENTION,
                                           CLVARLEN_DTYPE_F16, 24, 2, 1);
    ck_assert_int_eq(st, CLVARLEN_ERROR_UNSUPPORTED);
    ck_assert_msg(strstr(clvarlen_last_error(ctx), "clvarlen_supports") &&
                      strstr(clvarlen_last_error(ctx), "head_dim"),
                  "message: %s", clvarlen_last_error(ctx));
    ck_assert_int_eq(clvarlen_supports(ctx, CLVARLEN_PRECOMPILE_ATTENTION, CLVARLEN_DTYPE_I32,
                                       64, 2, 1),
                     CLVARLEN_ERROR_UNSUPPORTED);
    ck_assert_int_eq(clvarlen_supports(ctx, CLVARLEN_PRECOMPILE_SEGMENT, CLVARLEN_DTYPE_I32, 0,
                                       1, 1),
                     CLVARLEN_SUCCESS);
    ck_assert_int_eq(clvarlen_supports(ctx, 0x3, CLVARLEN_DTYPE_F32, 64, 2, 1),
                     CLVARLEN_ERROR_INVALID_ARGUMENT);
    ck_assert_int_eq(clvarlen_supports(ctx, CLVARLEN_PRECOMPILE_ATTENTION, CLVARLEN_DTYPE_F32,
                                       64, 3, 2),
                     CLVARLEN_ERROR_INVALID_ARGUMENT); /* heads_q % heads_kv */
    ck_assert_int_eq(clvarlen_supports(NULL, CLVARLEN_PRECOMPILE_SEGMENT, CLVARLEN_DTYPE_F32,
                                       64, 1, 1),
                     CLVARLEN_ERROR_INVALID_ARGUMENT);
    clvarlen_precompile_params p;
    clvarlen_precompile_params_init(&p);
    p.n_dtypes = 5;
    ck_assert_int_eq(clvarlen_context_precompile(ctx, &p), CLVARLEN_ERROR_INVALID_ARGUMENT);
    clvarlen_precompile_params_init(&p);
    p.ops = 0x100;
    ck_assert_int_eq(clvarlen_context_precompile(ctx, &p), CLVARLEN_ERROR_INVALID_ARGUMENT);
    clvarlen_precompile_params_init(&p);
    p.heads_q = 4;
    ck_assert_int_eq(clvarlen_context_precompile(ctx, &p), CLVARLEN_ERROR_INVALID_ARGUMENT);
    clvarlen_precompile_params_init(&p);
    p.ops = CLVARLEN_PRECOMPILE_ATTENTION;
    p.head_dims[0] = 20;
    p.n_head_dims = 1;
    st = clvarlen_context_precompile(ctx, &p);
    ck_assert_int_eq(st, CLVARLEN_ERROR_UNSUPPORTED);
    ck_assert_msg(strstr(clvarlen_last_error(ctx), "attention forward bf16 D 20"), "message: %s",
                  clvarlen_last_error(ctx));
    p.struct_size = 8;
    ck_assert_int_eq(clvarlen_context_precompile(ctx, &p), CLVARLEN_ERROR_INVALID_ARGUMENT);
    ck_assert_int_eq(clvarlen_context_precompile(NULL, NULL), CLVARLEN_ERROR_INVALID_ARGUMENT);
    clvarlen_context_destroy(ctx);
}
END_TEST

int main(void)
{
#if TEST_BACKEND_CL
    if (!tu_probe_opencl_device())
        return TU_EXIT_SKIP;
#endif
    Suite *s = suite_create(TEST_BACKEND_CL ? "precompile-cl" : "precompile-cpu");
    TCase *tc = tcase_create("precompile");
    tcase_set_timeout(tc, TEST_BACKEND_CL ? 900 : 120);
    tcase_add_test(tc, precompile_then_nothing_compiles);
    tcase_add_test(tc, supports_and_errors);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
