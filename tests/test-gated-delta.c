/* The gated delta rule (SPEC 3) against the float64 oracle of
 * tests/ref/gated-delta-ref.c: the seeds' two tests, a sweep over shapes,
 * dtypes, layouts and varlen batches, strides, target verify, argument
 * validation and empty batches.
 *
 * Built once per backend (tests/meson.build): TEST_BACKEND_CL=0 runs the
 * cases on the CPU fallback (the algorithm is a hint it may ignore: AUTO),
 * TEST_BACKEND_CL=1 on the OpenCL device with the token-by-token and the
 * chunked algorithms, plus the device-only cases of test-gated-delta-clmem.c.
 * The runner makes no OpenCL call: the device probe runs in a child, and
 * contexts are made inside the (forked) tests.
 */
#include "config.h"

#include "test-gated-delta.h"

#include <string.h>

#if CLVARLEN_HAVE_OPENCL
#  include <clvarlen/clvarlen-cl.h>
#endif

#ifndef TEST_BACKEND_CL
#  error "TEST_BACKEND_CL must be 0 or 1 (tests/meson.build)"
#endif

#if TEST_BACKEND_CL
#  define GDN_SUITE "gated-delta-cl"
#  define GDN_ALGS 2 /* every shared case with each algorithm */
#  define ALG(i) ((i) ? CLVARLEN_GDN_CHUNKED : CLVARLEN_GDN_RECURRENT)
#  define SWEEP_ALG CLVARLEN_GDN_RECURRENT
#  define GDN_TIMEOUT_CASES 300
#  define GDN_TIMEOUT_API 300
#else
#  define GDN_SUITE "gated-delta-cpu"
#  define GDN_ALGS 1
#  define ALG(i) ((void)(i), CLVARLEN_GDN_AUTO)
#  define SWEEP_ALG CLVARLEN_GDN_AUTO
#  define GDN_TIMEOUT_CASES 120
#  define GDN_TIMEOUT_API 60
#endif

clvarlen_context *gdn_ctx;

static void setup(void)
{
#if TEST_BACKEND_CL
    gdn_ctx = tu_cl_context();
#else
    gdn_ctx = tu_cpu_context();
#endif
}

static void teardown(void)
{
    clvarlen_context_destroy(gdn_ctx);
    gdn_ctx = NULL;
}

START_TEST(seed_varlen_vs_fixed)
{
    gdn_t_seed_varlen_vs_fixed(gdn_ctx, ALG(_i));
}
END_TEST

START_TEST(seed_state_indices)
{
    gdn_t_seed_state_indices(gdn_ctx, ALG(_i));
}
END_TEST

START_TEST(sweep)
{
    gdn_t_sweep(gdn_ctx, _i, SWEEP_ALG);
}
END_TEST

START_TEST(strided_bitwise)
{
    gdn_t_strided_bitwise(gdn_ctx, ALG(_i));
}
END_TEST

START_TEST(target_verify)
{
    gdn_t_target_verify(gdn_ctx);
}
END_TEST

/* Every algorithm on every backend (on the CPU fallback the algorithm is a hint). */
START_TEST(small_heads)
{
    static const clvarlen_gdn_algorithm algs[3] = {CLVARLEN_GDN_RECURRENT, CLVARLEN_GDN_CHUNKED,
                                                   CLVARLEN_GDN_AUTO};
    gdn_t_small_heads(gdn_ctx, algs[_i]);
}
END_TEST

START_TEST(large_heads)
{
    gdn_t_large_heads(gdn_ctx, ALG(_i));
}
END_TEST

START_TEST(errors)
{
    gdn_t_errors(gdn_ctx);
}
END_TEST

START_TEST(empty)
{
    gdn_t_empty(gdn_ctx);
}
END_TEST

#if !TEST_BACKEND_CL
/* The algorithm is a hint the CPU fallback may ignore: every choice is the recurrence. */
START_TEST(algorithm_hint)
{
    gdn_t_seed_state_indices(gdn_ctx, CLVARLEN_GDN_CHUNKED);
    gdn_t_seed_state_indices(gdn_ctx, CLVARLEN_GDN_RECURRENT);
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

#  if CLVARLEN_HAVE_OPENCL
START_TEST(cl_entry_on_cpu)
{
    clvarlen_gdn_params p;
    clvarlen_gdn_params_init(&p);
    clvarlen_status st = clvarlen_cl_gated_delta_rule(gdn_ctx, &p, NULL, 0, NULL, 0, NULL, 0,
                                                      NULL, 0, NULL, 0, NULL, 0, NULL, 0, NULL, 0,
                                                      NULL, 0, NULL, 0, NULL, 0, NULL, 0, NULL, 0,
                                                      0, NULL, NULL);
    ck_assert_int_eq(st, CLVARLEN_ERROR_NO_OPENCL);
}
END_TEST
#  endif
#endif

int main(void)
{
#if TEST_BACKEND_CL
    if (!tu_probe_opencl_device())
        return TU_EXIT_SKIP;
#endif
    Suite *s = suite_create(GDN_SUITE);
    TCase *tc = tcase_create("seeds");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, GDN_TIMEOUT_CASES);
    tcase_add_loop_test(tc, seed_varlen_vs_fixed, 0, GDN_ALGS);
    tcase_add_loop_test(tc, seed_state_indices, 0, GDN_ALGS);
    suite_add_tcase(s, tc);

    TCase *oracle = tcase_create("oracle");
    tcase_add_checked_fixture(oracle, setup, teardown);
    tcase_set_timeout(oracle, GDN_TIMEOUT_CASES);
    tcase_add_loop_test(oracle, sweep, 0, GDN_SWEEP_CASES);
    tcase_add_loop_test(oracle, strided_bitwise, 0, GDN_ALGS);
    tcase_add_test(oracle, target_verify);
    tcase_add_loop_test(oracle, large_heads, 0, GDN_ALGS);
    tcase_add_loop_test(oracle, small_heads, 0, 3);
    suite_add_tcase(s, oracle);

    TCase *api = tcase_create("api");
    tcase_add_checked_fixture(api, setup, teardown);
    tcase_set_timeout(api, GDN_TIMEOUT_API);
    tcase_add_test(api, errors);
    tcase_add_test(api, empty);
    suite_add_tcase(s, api);
#if TEST_BACKEND_CL
    gdn_add_cl_cases(oracle, api);
#else
    tcase_add_test(oracle, algorithm_hint);
    tcase_add_test(api, params_init);
#  if CLVARLEN_HAVE_OPENCL
    tcase_add_test(api, cl_entry_on_cpu);
#  endif
#endif
    return tu_run_suite(s);
}
