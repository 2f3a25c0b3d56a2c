/* The gated delta rule (SPEC 3) on the CPU fallback, against the float64
 * oracle of tests/ref/gated-delta-ref.c: the seeds' two tests, a sweep over
 * shapes, dtypes, layouts and varlen batches, strides, target verify,
 * argument validation and empty batches. */
#include "config.h"

#include "test-util.h"
#include "gated-delta-ref.h"

#include <string.h>

#if CLVARLEN_HAVE_OPENCL
#  include <clvarlen/clvarlen-cl.h>
#endif

static clvarlen_context *ctx;

static void setup(void)
{
    ctx = tu_cpu_context();
}

static void teardown(void)
{
    clvarlen_context_destroy(ctx);
    ctx = NULL;
}

START_TEST(seed_varlen_vs_fixed)
{
    gdn_t_seed_varlen_vs_fixed(ctx, CLVARLEN_GDN_AUTO);
}
END_TEST

START_TEST(seed_state_indices)
{
    gdn_t_seed_state_indices(ctx, CLVARLEN_GDN_AUTO);
}
END_TEST

START_TEST(sweep)
{
    gdn_t_sweep(ctx, _i, CLVARLEN_GDN_AUTO);
}
END_TEST

START_TEST(strided_bitwise)
{
    gdn_t_strided_bitwise(ctx, CLVARLEN_GDN_AUTO);
}
END_TEST

START_TEST(target_verify)
{
    gdn_t_target_verify(ctx);
}
END_TEST

START_TEST(large_heads)
{
    gdn_t_large_heads(ctx, CLVARLEN_GDN_AUTO);
}
END_TEST

START_TEST(errors)
{
    gdn_t_errors(ctx);
}
END_TEST

START_TEST(empty)
{
    gdn_t_empty(ctx);
}
END_TEST

/* The algorithm is a hint the CPU fallback may ignore: every choice is the recurrence. */
START_TEST(algorithm_hint)
{
    gdn_t_seed_state_indices(ctx, CLVARLEN_GDN_CHUNKED);
    gdn_t_seed_state_indices(ctx, CLVARLEN_GDN_RECURRENT);
}
END_TEST

START_TEST(params_init)
{
    clvarlen_gdn_params p;
    memset(&p, 0xff, sizeof p);
    clvarlen_gdn_params_init(&p);
    ck_assert_uint_eq(p.struct_size, sizeof p);
    ck_assert_int_eq(p.dtype, CLVARLEN_DTYPE_F32);
    ck_assert_int_eq(p.state_dtype, CLVARLEN_DTYPE_F32);
    ck_assert_int_eq(p.dt_bias_dtype, CLVARLEN_DTYPE_F32);
    ck_assert_int_eq(p.state_layout, CLVARLEN_STATE_VK);
    ck_assert(p.scale == 0.0f && p.softplus_beta == 1.0f && p.softplus_threshold == 20.0f);
    ck_assert_int_eq(p.disable_state_update, 0);
    ck_assert_int_eq(p.algorithm, CLVARLEN_GDN_AUTO);
    ck_assert_int_eq(p.n_seqs, 0);
    clvarlen_gdn_params_init(NULL); /* no crash */
}
END_TEST

#if CLVARLEN_HAVE_OPENCL
START_TEST(cl_entry_on_cpu)
{
    clvarlen_gdn_params p;
    clvarlen_gdn_params_init(&p);
    clvarlen_status st = clvarlen_cl_gated_delta_rule(ctx, &p, NULL, 0, NULL, 0, NULL, 0, NULL, 0,
                                                      NULL, 0, NULL, 0, NULL, 0, NULL, 0, NULL, 0,
                                                      NULL, 0, NULL, 0, NULL, 0, NULL, 0, 0, NULL,
                                                      NULL);
    ck_assert_int_eq(st, CLVARLEN_ERROR_NO_OPENCL);
}
END_TEST
#endif

int main(void)
{
    Suite *s = suite_create("gated-delta-cpu");
    TCase *tc = tcase_create("seeds");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, seed_varlen_vs_fixed);
    tcase_add_test(tc, seed_state_indices);
    suite_add_tcase(s, tc);

    tc = tcase_create("oracle");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, sweep, 0, GDN_SWEEP_CASES);
    tcase_add_test(tc, strided_bitwise);
    tcase_add_test(tc, target_verify);
    tcase_add_test(tc, large_heads);
    tcase_add_test(tc, algorithm_hint);
    suite_add_tcase(s, tc);

    tc = tcase_create("api");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, errors);
    tcase_add_test(tc, empty);
    tcase_add_test(tc, params_init);
#if CLVARLEN_HAVE_OPENCL
    tcase_add_test(tc, cl_entry_on_cpu);
#endif
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
