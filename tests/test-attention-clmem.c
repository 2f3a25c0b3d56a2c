/* Varlen attention on the OpenCL device only (linked into test-attention-cl,
 * which also runs every case of test-attention.c through the host-memory
 * entry points): the cl_mem entry points with byte offsets and events, device
 * checks of cu_seqlens, the cl_mem merges, and the tensor-core kernel
 * (cl/attention-nv.cl): on NVIDIA it runs natively; elsewhere
 * CLVARLEN_ATTENTION_KERNEL=mma runs its emulated form, which executes the
 * same fragment bookkeeping with the warp-wide operations emulated in local
 * memory. Exits 77 without an OpenCL device.
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test-attention.h"
#include "kit-cl.h"

static clvarlen_context *checked_ctx(void)
{
    clvarlen_options *opt = NULL;
    ck_assert_int_eq(clvarlen_options_create(&opt), CLVARLEN_SUCCESS);
    ck_assert_int_eq(clvarlen_options_set_device(opt, tu_cl_device_spec()), CLVARLEN_SUCCESS);
    ck_assert_int_eq(clvarlen_options_set_device_checks(opt, 1), CLVARLEN_SUCCESS);
    clvarlen_context *ctx = NULL;
    ck_assert_int_eq(clvarlen_context_create(opt, &ctx), CLVARLEN_SUCCESS);
    clvarlen_options_destroy(opt);
    return ctx;
}

/* cl_mem entry point with byte offsets, compared with the oracle; the bytes
 * around the output regions must stay as they were. With device checks on,
 * invalid device cu_seqlens are reported and nothing is written. */
static void cl_mem_case(clvarlen_context *ctx, const acase *c, int device_checks)
{
    tu_rng r = tu_rng_make(c->seed);
    batch b;
    make_batch(c, &r, &b);
    clvarlen_attention_params p;
    fill_params(c, &b, &p);
    size_t es = clvarlen_dtype_size(c->dtype);
    const size_t pad = 48; /* a multiple of 16: keeps the tensor-core kernel eligible */
    size_t qb = (size_t)(b.tq * b.qs) * es, kb = (size_t)(b.tk * b.ks) * es;
    size_t vb = (size_t)(b.tk * b.vs) * es, ob = (size_t)(b.tq * b.os) * es;
    size_t lb = (size_t)(b.tq * c->hq) * sizeof(float), cub = (size_t)(b.n + 1) * 4;
    tu_clbuf mq = tu_clbuf_make(ctx, qb, pad, b.q), mk = tu_clbuf_make(ctx, kb, pad, b.k);
    tu_clbuf mv = tu_clbuf_make(ctx, vb, pad, b.v), mcq = tu_clbuf_make(ctx, cub, pad, b.cu_q);
    tu_clbuf mck = tu_clbuf_make(ctx, cub, pad, b.cu_k);
    tu_clbuf mqp = {NULL, 0, 0, 0, NULL};
    if (b.q_pos)
        mqp = tu_clbuf_make(ctx, (size_t)b.tq * 4, pad, b.q_pos);
    tu_clbuf mo = tu_clbuf_make(ctx, ob, pad, NULL), ml = tu_clbuf_make(ctx, lb, pad, NULL);
    cl_event ev = NULL;
    clvarlen_status st = clvarlen_cl_attention_forward(ctx, &p, mq.mem, pad, mk.mem, pad, mv.mem,
                                                       pad, mcq.mem, pad, mck.mem, pad, mqp.mem,
                                                       pad, mo.mem, pad, ml.mem, pad, 0, NULL,
                                                       &ev);
    ck_assert_msg(st == CLVARLEN_SUCCESS, "cl forward: %s", clvarlen_last_error(ctx));
    ck_assert(ev != NULL);
    tu_cl_wait_release(&ev, "cl forward event");
    /* the bytes around the output regions stay as they were (tu_clbuf_fetch checks them) */
    const unsigned char *o_reg = tu_clbuf_fetch(ctx, &mo, "cl_mem o");
    const unsigned char *l_reg = tu_clbuf_fetch(ctx, &ml, "cl_mem lse");
    size_t dense = (size_t)(b.tq * c->hq * c->dv);
    double *o_ref = malloc(sizeof(double) * (dense + 1));
    double *l_ref = malloc(sizeof(double) * (size_t)(b.tq * c->hq + 1));
    attention_ref_forward(&p, b.q, b.k, b.v, b.cu_q, b.cu_k, b.q_pos, o_ref, l_ref);
    void *o_dense = malloc(dense * es + 16);
    size_t row = (size_t)c->hq * (size_t)c->dv * es;
    for (int64_t t = 0; t < b.tq; t++)
        memcpy((char *)o_dense + (size_t)t * row, o_reg + (size_t)t * (size_t)b.os * es, row);
    tu_assert_close(tu_compare(o_dense, c->dtype, o_ref, dense), tu_tolerance(c->dtype),
                    "cl_mem o");
    tu_assert_close(tu_compare(l_reg, CLVARLEN_DTYPE_F32, l_ref, (size_t)(b.tq * c->hq)),
                    lse_tolerance(c->dtype), "cl_mem lse");

    if (!device_checks) {
        /* No event back: the call's commands make none, so the first must still
         * wait for the caller's wait list (a user event here) and the rest follow
         * in order; the result is the same bytes. */
        cl_context clc;
        cl_device_id dev;
        cl_command_queue q;
        ck_assert_int_eq(clvarlen_context_get_cl(ctx, &clc, &dev, &q), CLVARLEN_SUCCESS);
        cl_int err;
        cl_event ue = clCreateUserEvent(clc, &err), after = NULL;
        ck_assert_int_eq(err, CL_SUCCESS);
        tu_clbuf mo3 = tu_clbuf_make(ctx, ob, pad, NULL), ml3 = tu_clbuf_make(ctx, lb, pad, NULL);
        st = clvarlen_cl_attention_forward(ctx, &p, mq.mem, pad, mk.mem, pad, mv.mem, pad,
                                           mcq.mem, pad, mck.mem, pad, mqp.mem, pad, mo3.mem, pad,
                                           ml3.mem, pad, 1, &ue, NULL);
        ck_assert_msg(st == CLVARLEN_SUCCESS, "gated forward: %s", clvarlen_last_error(ctx));
        ck_assert_int_eq(clEnqueueMarkerWithWaitList(q, 0, NULL, &after), CL_SUCCESS);
        ck_assert_int_eq(clFlush(q), CL_SUCCESS);
        cl_int state = CL_COMPLETE;
        ck_assert_int_eq(clGetEventInfo(after, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof state,
                                        &state, NULL),
                         CL_SUCCESS);
        ck_assert_msg(state != CL_COMPLETE, "the call ran before its wait list");
        ck_assert_int_eq(clSetUserEventStatus(ue, CL_COMPLETE), CL_SUCCESS);
        tu_cl_wait_release(&after, "marker after the gated call");
        clReleaseEvent(ue);
        const unsigned char *o3 = tu_clbuf_fetch(ctx, &mo3, "gated o");
        ck_assert_msg(memcmp(o3, o_reg, ob) == 0, "gated call: another result");
        tu_clbuf_free(&mo3);
        tu_clbuf_free(&ml3);
    }
    if (device_checks && b.n >= 2 && b.tq > 0) {
        /* a decreasing cu_seqlens_q on the device: reported, nothing written */
        int32_t *bad = malloc(cub);
        memcpy(bad, b.cu_q, cub);
        bad[1] = b.cu_q[b.n] + 1;
        tu_clbuf mbad = tu_clbuf_make(ctx, cub, pad, bad);
        tu_clbuf mo2 = tu_clbuf_make(ctx, ob, pad, NULL), ml2 = tu_clbuf_make(ctx, lb, pad, NULL);
        st = clvarlen_cl_attention_forward(ctx, &p, mq.mem, pad, mk.mem, pad, mv.mem, pad,
                                           mbad.mem, pad, mck.mem, pad, mqp.mem, pad, mo2.mem,
                                           pad, ml2.mem, pad, 0, NULL, NULL);
        ck_assert_msg(st == CLVARLEN_ERROR_INVALID_CU_SEQLENS, "bad cu: %s (%s)",
                      clvarlen_status_name(st), clvarlen_last_error(ctx));
        tu_clbuf_untouched(ctx, &mo2, "o written despite invalid cu_seqlens");
        tu_clbuf_free(&mbad);
        tu_clbuf_free(&mo2);
        tu_clbuf_free(&ml2);
        free(bad);
    }
    /* offsets that are not a multiple of the element size */
    st = clvarlen_cl_attention_forward(ctx, &p, mq.mem, 1, mk.mem, pad, mv.mem, pad, mcq.mem, pad,
                                       mck.mem, pad, mqp.mem, pad, mo.mem, pad, ml.mem, pad, 0,
                                       NULL, NULL);
    ck_assert_int_eq(st, CLVARLEN_ERROR_INVALID_ARGUMENT);
    free(o_dense);
    free(o_ref);
    free(l_ref);
    tu_clbuf *all[] = {&mq, &mk, &mv, &mcq, &mck, &mqp, &mo, &ml};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        tu_clbuf_free(all[i]);
    free_batch(&b);
}

START_TEST(test_cl_mem)
{
    clvarlen_context *ctx = tu_cl_context();
    acase c = base_case();
    c.causal = 1;
    c.seed = 31;
    cl_mem_case(ctx, &c, 0);
    c.dtype = CLVARLEN_DTYPE_BF16;
    c.use_qpos = 1;
    c.o_pad = 8;
    c.seed = 32;
    cl_mem_case(ctx, &c, 0);
    clvarlen_context_destroy(ctx);

    ctx = checked_ctx();
    c = base_case();
    c.max_n = 8;
    c.causal = 1;
    c.lq_ne_lk = 1;
    c.seed = 33;
    cl_mem_case(ctx, &c, 1);
    clvarlen_context_destroy(ctx);
}
END_TEST

/* cl_mem merges: N-way, and the two-way merge in place. */
START_TEST(test_cl_merge)
{
    clvarlen_context *ctx = tu_cl_context();
    cl_context cl;
    cl_device_id dev;
    cl_command_queue queue;
    ck_assert_int_eq(clvarlen_context_get_cl(ctx, &cl, &dev, &queue), CLVARLEN_SUCCESS);
    const clvarlen_dtype dt = CLVARLEN_DTYPE_F16;
    const int64_t tokens = 9, parts = 3;
    const int32_t heads = 2, dv = 48;
    size_t on = (size_t)(tokens * heads * dv), ln = (size_t)(tokens * heads), es = 2;
    tu_rng r = tu_rng_make(5);
    char *op = malloc(on * es * (size_t)parts);
    float *lp = malloc(ln * sizeof(float) * (size_t)parts);
    tu_fill_random(&r, op, dt, on * (size_t)parts, 1.0);
    for (size_t i = 0; i < ln * (size_t)parts; i++)
        lp[i] = i % 7 == 0 ? -INFINITY : (float)tu_uniform(&r, -4, 4);
    const void *opp[3] = {op, op + on * es, op + 2 * on * es};
    const float *lpp[3] = {lp, lp + ln, lp + 2 * ln};
    double *o_ref = malloc(sizeof(double) * on), *l_ref = malloc(sizeof(double) * ln);
    const size_t pad = 32;
    tu_clbuf bop = tu_clbuf_make(ctx, on * es * (size_t)parts, pad, op);
    tu_clbuf blp = tu_clbuf_make(ctx, ln * sizeof(float) * (size_t)parts, pad, lp);
    tu_clbuf bo = tu_clbuf_make(ctx, on * es, pad, NULL), bl = tu_clbuf_make(ctx, ln * 4, pad, NULL);
    cl_mem mop = bop.mem, mlp = blp.mem, mo = bo.mem, ml = bl.mem;
    cl_event ev = NULL;
    ck_assert_int_eq(clvarlen_cl_attention_merge(ctx, dt, parts, tokens, heads, dv, mop, pad, mlp,
                                                 pad, mo, pad, ml, pad, 0, NULL, &ev),
                     CLVARLEN_SUCCESS);
    char *o = malloc(on * es);
    float *l = malloc(ln * sizeof(float));
    ck_assert_int_eq(clEnqueueReadBuffer(queue, mo, CL_TRUE, pad, on * es, o, 1, &ev, NULL),
                     CL_SUCCESS);
    ck_assert_int_eq(clEnqueueReadBuffer(queue, ml, CL_TRUE, pad, ln * 4, l, 0, NULL, NULL),
                     CL_SUCCESS);
    clReleaseEvent(ev);
    attention_ref_merge(dt, parts, tokens, heads, dv, opp, lpp, o_ref, l_ref);
    tu_assert_close(tu_compare(o, dt, o_ref, on), tu_tolerance(dt), "cl merge o");
    tu_assert_close(tu_compare(l, CLVARLEN_DTYPE_F32, l_ref, ln), 1e-6, "cl merge lse");
    /* two-way in place: parts 0 and 1 of the same buffers, into part 0 */
    ck_assert_int_eq(clvarlen_cl_attention_merge2(ctx, dt, tokens, heads, dv, mop, pad, mlp, pad,
                                                  mop, pad + on * es, mlp, pad + ln * 4, mop, pad,
                                                  mlp, pad, 0, NULL, NULL),
                     CLVARLEN_SUCCESS);
    ck_assert_int_eq(clEnqueueReadBuffer(queue, mop, CL_TRUE, pad, on * es, o, 0, NULL, NULL),
                     CL_SUCCESS);
    ck_assert_int_eq(clEnqueueReadBuffer(queue, mlp, CL_TRUE, pad, ln * 4, l, 0, NULL, NULL),
                     CL_SUCCESS);
    attention_ref_merge(dt, 2, tokens, heads, dv, opp, lpp, o_ref, l_ref);
    tu_assert_close(tu_compare(o, dt, o_ref, on), tu_tolerance(dt), "cl merge2 in place o");
    tu_assert_close(tu_compare(l, CLVARLEN_DTYPE_F32, l_ref, ln), 1e-6, "cl merge2 in place lse");
    tu_clbuf_free(&bop);
    tu_clbuf_free(&blp);
    tu_clbuf_free(&bo);
    tu_clbuf_free(&bl);
    free(o);
    free(l);
    free(op);
    free(lp);
    free(o_ref);
    free(l_ref);
    clvarlen_context_destroy(ctx);
}
END_TEST

/* The tensor-core kernel (native on NVIDIA, emulated elsewhere). */
START_TEST(test_mma_kernel)
{
    setenv("CLVARLEN_ATTENTION_KERNEL", "mma", 1);
    tu_emulated_forms(1);
    clvarlen_context *ctx = tu_cl_context();
    acase c = base_case();
    c.dtype = CLVARLEN_DTYPE_BF16;
    c.causal = 1;
    c.hq = 4;
    c.hk = 2;
    run_seeds(ctx, c, 2, "mma bf16 d64 causal");
    c.dtype = CLVARLEN_DTYPE_F16;
    c.causal = 0;
    c.lq_ne_lk = 1;
    c.softcap = 3.0f;
    run_seeds(ctx, c, 1, "mma f16 d64 lq!=lk softcap");
    c = base_case();
    c.dtype = CLVARLEN_DTYPE_BF16;
    c.d = c.dv = 128;
    c.max_n = 2;
    c.max_len = 150;
    c.min_len = 100; /* long enough on average for 128-row tiles */
    c.max_total = 300;
    c.causal = 1;
    c.wl = 40;
    c.hq = 2;
    c.hk = 1;
    c.q_pad = 16;
    run_seeds(ctx, c, 1, "mma bf16 d128 window stride");
    c = base_case();
    c.dtype = CLVARLEN_DTYPE_F16;
    c.d = c.dv = 80;
    c.use_qpos = 1;
    c.causal = 1;
    run_seeds(ctx, c, 1, "mma f16 d80 q_pos");
    c.use_qpos = 0;
    c.max_len = 200;
    c.min_len = 100;
    c.max_total = 400;
    c.scale = 6.0f; /* row maxima that jump by more than 8 in base 2 between tiles */
    run_seeds(ctx, c, 1, "mma f16 d80 large scale");
    c = base_case();
    c.dtype = CLVARLEN_DTYPE_BF16;
    c.d = c.dv = 256;
    c.hq = 4;
    c.hk = 1;
    c.causal = 1;
    c.max_total = 160;
    run_seeds(ctx, c, 1, "mma bf16 d256 mqa causal");
    c.min_len = 100; /* Q in registers */
    c.max_len = 150;
    c.max_total = 300;
    c.causal = 0;
    c.softcap = 2.0f;
    run_seeds(ctx, c, 1, "mma bf16 d256 long softcap");
    c = base_case();
    c.dtype = CLVARLEN_DTYPE_F16;
    c.d = c.dv = 96;
    c.causal = 1;
    c.wl = 9;
    run_seeds(ctx, c, 1, "mma f16 d96 window");
    c = base_case();
    c.causal = 1;
    c.seed = 41;
    cl_mem_case(ctx, &c, 0); /* f32 falls back to the portable kernel */
    c.dtype = CLVARLEN_DTYPE_BF16;
    c.seed = 42;
    cl_mem_case(ctx, &c, 0);
    clvarlen_context_destroy(ctx);
    unsetenv("CLVARLEN_ATTENTION_KERNEL");
    tu_emulated_forms(0);
}
END_TEST

START_TEST(test_no_opencl)
{
    clvarlen_context *ctx = tu_cpu_context();
    clvarlen_attention_params p;
    clvarlen_attention_params_init(&p);
    ck_assert_int_eq(clvarlen_cl_attention_forward(ctx, &p, NULL, 0, NULL, 0, NULL, 0, NULL, 0,
                                                   NULL, 0, NULL, 0, NULL, 0, NULL, 0, 0, NULL,
                                                   NULL),
                     CLVARLEN_ERROR_NO_OPENCL);
    ck_assert_int_eq(clvarlen_cl_attention_merge(ctx, CLVARLEN_DTYPE_F32, 1, 1, 1, 16, NULL, 0,
                                                 NULL, 0, NULL, 0, NULL, 0, 0, NULL, NULL),
                     CLVARLEN_ERROR_NO_OPENCL);
    clvarlen_context_destroy(ctx);
}
END_TEST

/* The tensor-core kernel's wgmma form (native on an NVIDIA Hopper device,
 * emulated elsewhere: there it checks the K/V layouts, 128-byte swizzled and
 * (wgswz=0) not, Q's tile in local memory and (wgqs=0) in registers, and the
 * descriptors' strides against the same rules the hardware applies, and its
 * capability check, attn_wgmma_check, runs first and must pass): head dims 64,
 * 96, 128 and 256 (32-key tiles), sequences of several key tiles,
 * GQA with the query heads of a KV head packed into the tile rows and
 * (wgpack=0) without, MHA, causal, window, softcap, lq != lk, q_pos, strided
 * q, scores large enough that row maxima jump between tiles, the cl_mem entry
 * point; and at head dim 128 only, (wgm=128) 128-row tiles on two warpgroups,
 * (lpt=1) the work list longest sequences first, (lazy=0) the softmax
 * rescaling at every tile and (pipe=1) the pipelined loop. */
START_TEST(test_wgmma_kernel)
{
    static const char *const variants[] = {NULL,    "wgpack=0", "wgqs=0", "wgswz=0",
                                           "wgm=128", "lpt=1",    "lazy=0", "pipe=1"};
    const size_t n_full = 4; /* the variants from here on run the head dim 128 cases only */
    setenv("CLVARLEN_ATTENTION_KERNEL", "wgmma", 1);
    tu_emulated_forms(1);
    for (size_t vi = 0; vi < sizeof variants / sizeof variants[0]; vi++) {
        if (variants[vi])
            setenv("CLVARLEN_ATTENTION_TUNING", variants[vi], 1);
        clvarlen_context *ctx = tu_cl_context();
        acase c = base_case();
        if (vi >= n_full)
            goto d128;
        c.dtype = CLVARLEN_DTYPE_BF16;
        c.hq = 4;
        c.hk = 2;
        c.max_n = 3;
        c.max_len = 200;
        c.max_total = 400;
        c.causal = 1;
        c.seed = 51;
        run_seeds(ctx, c, 1, "wgmma bf16 d64 gqa causal");
        c.dtype = CLVARLEN_DTYPE_F16;
        c.causal = 0;
        c.lq_ne_lk = 1;
        c.softcap = 3.0f;
        c.seed = 52;
        run_seeds(ctx, c, 1, "wgmma f16 d64 lq!=lk softcap");
    d128:
        c = base_case();
        c.dtype = CLVARLEN_DTYPE_BF16;
        c.d = c.dv = 128;
        c.hq = 2;
        c.hk = 2;
        c.max_n = 2;
        c.max_len = 180;
        c.min_len = 70;
        c.max_total = 300;
        c.causal = 1;
        c.wl = 70;
        c.q_pad = 16;
        c.seed = 53;
        run_seeds(ctx, c, 1, "wgmma bf16 d128 mha window stride");
        c.hq = 4;
        c.hk = 1;
        c.wl = -1;
        c.use_qpos = 1;
        c.seed = 54;
        run_seeds(ctx, c, 1, "wgmma bf16 d128 mqa q_pos");
        c.use_qpos = 0;
        c.seed = 55;
        cl_mem_case(ctx, &c, 0);
        c.causal = 0;
        c.scale = 6.0f; /* row maxima that jump by more than 8 in base 2 between tiles */
        c.seed = 59;
        run_seeds(ctx, c, 1, "wgmma bf16 d128 mqa large scale");
        if (vi >= n_full) {
            clvarlen_context_destroy(ctx);
            continue;
        }
        c = base_case(); /* head dim 96: the second column block half used */
        c.dtype = CLVARLEN_DTYPE_BF16;
        c.d = c.dv = 96;
        c.hq = 4;
        c.hk = 2;
        c.max_n = 2;
        c.max_len = 160;
        c.min_len = 70;
        c.max_total = 260;
        c.causal = 1;
        c.seed = 56;
        run_seeds(ctx, c, 1, "wgmma bf16 d96 gqa causal");
        c.dtype = CLVARLEN_DTYPE_F16;
        c.causal = 0;
        c.lq_ne_lk = 1;
        c.seed = 57;
        run_seeds(ctx, c, 1, "wgmma f16 d96 lq!=lk");
        c = base_case(); /* head dim 256: 32-key tiles, Q in registers */
        c.dtype = CLVARLEN_DTYPE_BF16;
        c.d = c.dv = 256;
        c.hq = 2;
        c.hk = 1;
        c.max_n = 2;
        c.max_len = 120;
        c.min_len = 40;
        c.max_total = 200;
        c.causal = 1;
        c.wl = 50;
        c.seed = 58;
        run_seeds(ctx, c, 1, "wgmma bf16 d256 gqa causal window");
        clvarlen_context_destroy(ctx);
    }
    unsetenv("CLVARLEN_ATTENTION_TUNING");
    unsetenv("CLVARLEN_ATTENTION_KERNEL");
    tu_emulated_forms(0);
}
END_TEST

/* The portable kernel with tiles the device tables do not pick on PoCL: two
 * work-items across a tile's keys (row reductions and V's columns one float at
 * a time), V staged four keys at a time (several V chunks per key tile); and
 * NVIDIA's tiles (64 x 64, 256 work-items, Q and K 32 dimensions at a time)
 * with the chunk loops partly unrolled, at head dims 128 (V read in float4s)
 * and 96 (one float at a time); and the forms the defaults do not take on
 * PoCL: load offsets computed per load (poff=0), the scale applied to the
 * scores rather than folded into the exponent (pfold=0), and exponentials by
 * native_exp2 without a test per element (pnexp=1). Each against the oracle,
 * causal with GQA and non-causal with lq != lk, sequences of several key
 * tiles. */
START_TEST(test_portable_tiles)
{
    static const char *const variants[] = {
        "ptx=2,pwg=16,pkch=4",
        "pwg=256,pbm=64,pbn=64,pdch=32,pkch=16,punr=2,ppvunr=2",
        "pwg=128,pbm=64,pbn=64,pkch=16,poff=0,pfold=0,pnexp=1",
    };
    unsetenv("CLVARLEN_ATTENTION_KERNEL");
    for (size_t vi = 0; vi < sizeof variants / sizeof variants[0]; vi++) {
        setenv("CLVARLEN_ATTENTION_TUNING", variants[vi], 1);
        clvarlen_context *ctx = tu_cl_context();
        acase c = base_case();
        c.d = c.dv = vi == 0 ? 64 : 128;
        c.hq = 4;
        c.hk = 2;
        c.max_n = 3;
        c.max_len = 150;
        c.min_len = 40;
        c.max_total = 260;
        c.causal = 1;
        c.seed = 61 + 10 * (uint64_t)vi;
        run_seeds(ctx, c, 1, variants[vi]);
        c.causal = 0;
        c.lq_ne_lk = 1;
        c.d = c.dv = 96;
        c.seed++;
        run_seeds(ctx, c, 1, variants[vi]);
        clvarlen_context_destroy(ctx);
    }
    unsetenv("CLVARLEN_ATTENTION_TUNING");
}
END_TEST

void attn_add_cl_cases(Suite *s)
{
    TCase *tc = tcase_create("cl_mem");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_cl_mem);
    tcase_add_test(tc, test_cl_merge);
    tcase_add_test(tc, test_no_opencl);
    tcase_add_test(tc, test_portable_tiles);
    suite_add_tcase(s, tc);
    if (tu_second_device()) /* the emulated forms: the default device's (kit-check.h) */
        return;
    tc = tcase_create("mma");
    tcase_set_timeout(tc, 1200); /* the emulated kernels compile slowly on 2 cores */
    tcase_add_test(tc, test_mma_kernel);
    tcase_add_test(tc, test_wgmma_kernel);
    suite_add_tcase(s, tc);
}
