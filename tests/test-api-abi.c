/* ABI growth (clvarlen.h): the *_init macros pass the caller's sizeof; the
 * library writes only that many bytes, reads only what the caller's struct
 * has (defaults for the rest), accepts larger structs from newer headers and
 * refuses sizes below the first released layout. Output structs (device
 * info, CP plan) are written only up to the caller's size.
 */
#include "test-api.h"

#include <stddef.h>
#include <string.h>

#include "config.h"
/* A build without OpenCL still exports the clvarlen-cl.h entry points (stubs):
 * where the OpenCL headers are installed, this test calls them. */
#if !CLVARLEN_HAVE_OPENCL && defined(__has_include)
#if __has_include(<CL/cl.h>)
#include <clvarlen/clvarlen-cl.h>
#define TEST_CL_STUBS 1
#endif
#endif

/* A struct of `size` bytes inside a larger buffer filled with 0xEE: init
 * must write exactly `size` bytes. */
START_TEST(abi_init_writes_only_size)
{
    unsigned char buf[sizeof(clvarlen_attention_params) + 64];
    const size_t sizes[3] = {CLVARLEN_ATTENTION_PARAMS_MIN_SIZE, sizeof(clvarlen_attention_params),
                             sizeof(clvarlen_attention_params) + 24};
    for (int i = 0; i < 3; i++) {
        memset(buf, 0xEE, sizeof buf);
        clvarlen_attention_params_init_sized((clvarlen_attention_params *)(void *)buf, sizes[i]);
        uint32_t ss;
        memcpy(&ss, buf, 4);
        ck_assert_uint_eq(ss, sizes[i]);
        for (size_t b = sizes[i]; b < sizeof buf; b++)
            ck_assert_msg(buf[b] == 0xEE, "size %zu: byte %zu written", sizes[i], b);
        for (size_t b = sizeof(clvarlen_attention_params); b < sizes[i]; b++)
            ck_assert_msg(buf[b] == 0, "size %zu: unknown tail byte %zu not zeroed", sizes[i],
                          b);
    }
    /* too small to hold struct_size: nothing written */
    memset(buf, 0xEE, sizeof buf);
    clvarlen_gdn_params_init_sized((clvarlen_gdn_params *)(void *)buf, 3);
    ck_assert(buf[0] == 0xEE && buf[3] == 0xEE);
    clvarlen_attention_params_init_sized(NULL, 64); /* no crash */
}
END_TEST

/* A caller built against the layout before dropout (struct_size at the first
 * released size) gets dropout off whatever lies past its struct; a newer
 * caller's larger struct is read as far as this library knows it. */
START_TEST(abi_attention_params_sizes)
{
    clvarlen_context *ctx = tu_cpu_context();
    const int32_t cu[2] = {0, 3};
    float q[3 * 16], k[3 * 16], v[3 * 16], o[3][3 * 16], lse[3][3];
    for (int i = 0; i < 48; i++)
        q[i] = k[i] = v[i] = (float)((i * 7) % 11) / 11.0f - 0.4f;
    struct {
        clvarlen_attention_params p;
        unsigned char tail[32];
    } big;
    clvarlen_attention_params_init_sized(&big.p, sizeof big);
    big.p.n_seqs = 1;
    big.p.total_q = big.p.total_k = 3;
    big.p.heads_q = big.p.heads_kv = 1;
    big.p.head_dim = 16;
    big.p.causal = 1;
    for (size_t i = 0; i < sizeof big.tail; i++)
        ck_assert(big.tail[i] == 0);
    check_ok(ctx, clvarlen_attention_forward(ctx, &big.p, q, k, v, cu, cu, NULL, o[0], lse[0]),
             "larger struct");
    /* the old layout, with garbage where dropout would be */
    clvarlen_attention_params old = big.p;
    old.struct_size = (uint32_t)CLVARLEN_ATTENTION_PARAMS_MIN_SIZE;
    old.dropout_p = 0.5f;
    check_ok(ctx, clvarlen_attention_forward(ctx, &old, q, k, v, cu, cu, NULL, o[1], lse[1]),
             "old layout");
    ck_assert(memcmp(o[0], o[1], sizeof o[0]) == 0); /* dropout read as off */
    /* the full layout does read it */
    old.struct_size = (uint32_t)sizeof old;
    check_ok(ctx, clvarlen_attention_forward(ctx, &old, q, k, v, cu, cu, NULL, o[2], lse[2]),
             "current layout with dropout");
    ck_assert(memcmp(o[0], o[2], sizeof o[0]) != 0);
    /* below the first released size: refused, nothing written */
    memset(o[1], 0x5A, sizeof o[1]);
    old.struct_size = (uint32_t)CLVARLEN_ATTENTION_PARAMS_MIN_SIZE - 4;
    check_err(ctx, clvarlen_attention_forward(ctx, &old, q, k, v, cu, cu, NULL, o[1], lse[1]),
              CLVARLEN_ERROR_INVALID_ARGUMENT, CLVARLEN_SUCCESS, "clvarlen_attention_forward",
              "struct_size below the first layout");
    for (size_t b = 0; b < sizeof o[1]; b++)
        ck_assert(((unsigned char *)o[1])[b] == 0x5A);
    clvarlen_context_destroy(ctx);
}
END_TEST

/* Output structs: written up to the caller's size only. */
START_TEST(abi_outputs)
{
    clvarlen_context *ctx = tu_cpu_context();
    unsigned char buf[sizeof(clvarlen_device_info) + 32];
    memset(buf, 0xEE, sizeof buf);
    check_ok(ctx,
             clvarlen_context_device_sized(ctx, (clvarlen_device_info *)(void *)buf, sizeof buf),
             "device info, larger struct");
    clvarlen_device_info info;
    memcpy(&info, buf, sizeof info);
    ck_assert_uint_eq(info.struct_size, sizeof info);
    ck_assert_int_eq(info.index, -1);
    for (size_t b = sizeof info; b < sizeof buf; b++)
        ck_assert(buf[b] == 0xEE);
    check_err(ctx, clvarlen_context_device_sized(ctx, &info, 8), CLVARLEN_ERROR_INVALID_ARGUMENT,
              CLVARLEN_SUCCESS, "clvarlen_context_device", "size below the struct");
    check_err(NULL, clvarlen_device_query_sized(-1, &info, 8), CLVARLEN_ERROR_INVALID_ARGUMENT,
              CLVARLEN_SUCCESS, "clvarlen_device_query", "size below the struct");
    memset(&info, 0, sizeof info);
    check_ok(NULL, clvarlen_device_query(-1, &info), "device query");
    ck_assert_uint_eq(info.struct_size, sizeof info);

    /* the CP plan: a newer caller's extra bytes are left alone */
    const int32_t cu[3] = {0, 5, 9};
    int32_t lcu[3];
    struct {
        clvarlen_cp_plan_out p;
        unsigned char tail[16];
    } big;
    memset(&big, 0, sizeof big);
    memset(big.tail, 0xEE, sizeof big.tail);
    big.p.local_cu_seqlens = lcu;
    check_ok(ctx, clvarlen_cp_plan_sized(ctx, cu, 2, 2, 0, &big.p, sizeof big), "cp plan");
    ck_assert_uint_eq(big.p.struct_size, sizeof big.p);
    ck_assert_int_eq(big.p.local_tokens, lcu[2]);
    for (size_t b = 0; b < sizeof big.tail; b++)
        ck_assert(big.tail[b] == 0xEE);
    check_err(ctx, clvarlen_cp_plan_sized(ctx, cu, 2, 2, 0, &big.p, 12),
              CLVARLEN_ERROR_INVALID_ARGUMENT, CLVARLEN_SUCCESS, "clvarlen_cp_plan",
              "size below the struct");
    clvarlen_context_destroy(ctx);
}
END_TEST

#ifdef TEST_CL_STUBS
START_TEST(abi_cl_stubs)
{
    clvarlen_context *ctx = tu_cpu_context();
    clvarlen_attention_params p;
    clvarlen_attention_params_init(&p);
    cl_event ev = NULL;
    check_err(ctx,
              clvarlen_cl_attention_forward(ctx, &p, NULL, 0, NULL, 0, NULL, 0, NULL, 0, NULL, 0,
                                            NULL, 0, NULL, 0, NULL, 0, 0, NULL, &ev),
              CLVARLEN_ERROR_NO_OPENCL, CLVARLEN_SUCCESS, "clvarlen_cl_attention_forward",
              "no OpenCL in this build");
    ck_assert(ev == NULL);
    cl_context clc = NULL;
    check_err(ctx, clvarlen_context_get_cl(ctx, &clc, NULL, NULL), CLVARLEN_ERROR_NO_OPENCL,
              CLVARLEN_SUCCESS, "clvarlen_context_get_cl", "no OpenCL in this build");
    clvarlen_context *other = NULL;
    check_err(NULL, clvarlen_context_create_cl(NULL, NULL, NULL, NULL, &other),
              CLVARLEN_ERROR_NO_OPENCL, CLVARLEN_SUCCESS, "clvarlen_context_create_cl",
              "no OpenCL in this build");
    ck_assert(other == NULL);
    clvarlen_context_destroy(ctx);
}
END_TEST
#endif

/* ------------------------------------------------------------ a caller's parallel-for */

typedef struct user_pool {
    int calls;
    int64_t covered;
    int bad;
} user_pool;

/* Runs the ranges in reverse order on the calling thread, checking them. */
static void user_for(void *user, int64_t n, int64_t grain, clvarlen_task_fn task, void *task_arg)
{
    user_pool *u = user;
    u->calls++;
    if (grain < 1)
        u->bad = 1;
    for (int64_t b = (n - 1) / grain * grain; b >= 0; b -= grain) {
        int64_t e = b + grain < n ? b + grain : n;
        task(task_arg, b, e);
        u->covered += e - b;
    }
}

START_TEST(abi_parallel_for)
{
    clvarlen_options *opt = NULL;
    ck_assert_int_eq(clvarlen_options_create(&opt), CLVARLEN_SUCCESS);
    check_err(NULL, clvarlen_options_set_parallel_for(opt, user_for, NULL, 0),
              CLVARLEN_ERROR_INVALID_ARGUMENT, CLVARLEN_SUCCESS,
              "clvarlen_options_set_parallel_for", "max_threads 0");
    user_pool u = {0, 0, 0};
    ck_assert_int_eq(clvarlen_options_set_parallel_for(opt, user_for, &u, 3), CLVARLEN_SUCCESS);
    ck_assert_int_eq(clvarlen_options_set_device(opt, "cpu"), CLVARLEN_SUCCESS);
    clvarlen_context *mine = NULL, *own = tu_cpu_context();
    ck_assert_int_eq(clvarlen_context_create(opt, &mine), CLVARLEN_SUCCESS);
    clvarlen_options_destroy(opt);
    ck_assert_int_eq(clvarlen_context_threads(mine), 3);
    /* attention forward and backward: bitwise the library pool's result */
    enum { T = 70, H = 2, D = 32 };
    static float q[T * H * D], k[T * D], v[T * D], o[2][T * H * D], lse[2][H * T];
    static float g[2][3][T * H * D];
    for (int i = 0; i < T * H * D; i++)
        q[i] = (float)((i * 37) % 101) / 101.0f - 0.5f;
    for (int i = 0; i < T * D; i++) {
        k[i] = (float)((i * 53) % 97) / 97.0f - 0.5f;
        v[i] = (float)((i * 29) % 89) / 89.0f - 0.5f;
    }
    const int32_t cu[3] = {0, 45, 70};
    clvarlen_attention_params p;
    clvarlen_attention_params_init(&p);
    p.n_seqs = 2;
    p.total_q = p.total_k = T;
    p.heads_q = H;
    p.heads_kv = 1;
    p.head_dim = D;
    p.causal = 1;
    clvarlen_context *ctx[2] = {own, mine};
    for (int c = 0; c < 2; c++) {
        check_ok(ctx[c], clvarlen_attention_forward(ctx[c], &p, q, k, v, cu, cu, NULL, o[c],
                                                    lse[c]),
                 "forward");
        check_ok(ctx[c], clvarlen_attention_backward(ctx[c], &p, NULL, q, k, v, o[c], q, lse[c],
                                                     cu, cu, NULL, g[c][0], g[c][1], g[c][2]),
                 "backward");
    }
    ck_assert(memcmp(o[0], o[1], sizeof o[0]) == 0);
    ck_assert(memcmp(g[0], g[1], sizeof g[0]) == 0);
    ck_assert_msg(u.calls > 0 && u.covered > 0 && !u.bad, "calls %d covered %lld", u.calls,
                  (long long)u.covered);
    clvarlen_context_destroy(mine);
    clvarlen_context_destroy(own);
}
END_TEST

TCase *api_abi_cases(void)
{
    TCase *tc = tcase_create("abi");
    tcase_add_test(tc, abi_init_writes_only_size);
    tcase_add_test(tc, abi_attention_params_sizes);
    tcase_add_test(tc, abi_outputs);
    tcase_add_test(tc, abi_parallel_for);
#ifdef TEST_CL_STUBS
    tcase_add_test(tc, abi_cl_stubs);
#endif
    return tc;
}
