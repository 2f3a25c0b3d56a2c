/* The gated delta rule on an OpenCL device only (linked into test-gated-delta-cl):
 * sweep cases with the chunked algorithm, chunked against token-by-token,
 * per-sequence selection under AUTO, and the cl_mem entry point (offsets,
 * events, device checks). The host-memory cases of both backends are in
 * test-gated-delta.c. */
#include "config.h"

#include "test-gated-delta.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <clvarlen/clvarlen-cl.h>

#include "../cl/cv-shared.h" /* GDN_SCR_FLOATS */
#include "kit-cl.h"

#define ALG(i) ((i) ? CLVARLEN_GDN_CHUNKED : CLVARLEN_GDN_RECURRENT)

/* CLVARLEN_GDN_TUNING for the cases that follow; a tensor-core form forced
 * (mma=1) is built unoptimised where it runs emulated (tu_emulated_forms). */
static void gdn_tuning(const char *tuning)
{
    setenv("CLVARLEN_GDN_TUNING", tuning, 1);
    tu_emulated_forms(strstr(tuning, "mma=1") != NULL);
}

/* three sweep cases again, chunked: first-use compiles (about 10 s each on
 * PoCL) are the cost of this suite, so chunked variants are few */
START_TEST(sweep_chunked)
{
    gdn_t_sweep(gdn_ctx, 2 * _i + 1, CLVARLEN_GDN_CHUNKED);
}
END_TEST

/* Chunked and token by token agree with each other within SPEC 4, over
 * lengths that cross 64 and are not multiples of it. */
START_TEST(chunked_vs_recurrent)
{
    static const int32_t lengths[6] = {200, 64, 65, 1, 0, 127};
    static const int32_t idx[6] = {5, 0, -1, 2, 3, 1};
    const clvarlen_dtype dts[3] = {CLVARLEN_DTYPE_F32, CLVARLEN_DTYPE_BF16, CLVARLEN_DTYPE_F16};
    gdn_case_cfg cfg = gdn_cfg_default();
    cfg.seed = 81 + (uint64_t)_i;
    cfg.H = 2;
    cfg.HV = 8;
    cfg.K = 16; /* the seeds' head dims: programs compiled once serve both */
    cfg.V = 24;
    cfg.n = 6;
    cfg.lengths = lengths;
    cfg.use_pool = 1;
    cfg.slots = 6;
    cfg.indices = idx;
    cfg.l2norm = 1;
    cfg.dtype = dts[_i];
    cfg.layout = _i == 1 ? CLVARLEN_STATE_KV : CLVARLEN_STATE_VK;
    gdn_case rec, chk;
    cfg.algorithm = CLVARLEN_GDN_RECURRENT;
    gdn_case_make(&rec, &cfg);
    cfg.algorithm = CLVARLEN_GDN_CHUNKED;
    gdn_case_make(&chk, &cfg);
    gdn_run_and_check(gdn_ctx, &rec, "recurrent");
    gdn_run_and_check(gdn_ctx, &chk, "chunked");

    const clvarlen_gdn_params *p = &rec.p;
    const int64_t T = p->total_tokens, row = p->heads_v * p->value_dim;
    double num = 0.0, den = 0.0;
    for (int64_t t = 0; t < T; t++) {
        const void *a = gdn_case_o_row(&rec, t), *b = gdn_case_o_row(&chk, t);
        for (int64_t j = 0; j < row; j++) {
            double x = tu_get(a, p->dtype, (size_t)j), y = tu_get(b, p->dtype, (size_t)j);
            num += (x - y) * (x - y);
            den += x * x;
        }
    }
    const double rel = sqrt(num / den), tol = gdn_tolerance(p->dtype, 200);
    ck_assert_msg(rel <= tol, "%s: chunked vs token by token: rel_l2 %.3g > %.3g",
                  clvarlen_dtype_name(p->dtype), rel, tol);
    gdn_case_free(&rec);
    gdn_case_free(&chk);
}
END_TEST

/* The chunked kernel with the widest work-group the tuning allows (256):
 * PoCL miscompiled it wider than 64 (zero output), so there the library keeps
 * 64 (lib/gated-delta/gated-delta-tiles.c); other devices run 256. Runs in a
 * forked child, and the library reads the tuning per call. */
START_TEST(chunked_wide_group)
{
    gdn_tuning("cwg=256,blas=0");
    gdn_t_seed_state_indices(gdn_ctx, CLVARLEN_GDN_CHUNKED);
}
END_TEST

/* One CHUNKED case under a tuning string, against the oracle: 7 sequences of
 * lengths around the chunk (200, 64, 65, 1, 0, 63, 130), H 2, HV 4, initial
 * states from the pool, two negative slots. */
static void chunked_edge_case(const char *tuning, uint64_t seed, int K, int V, clvarlen_dtype dt,
                              int l2norm, clvarlen_state_layout layout, int disable_update,
                              int64_t stride_pad)
{
    gdn_tuning(tuning);
    static const int32_t lengths[7] = {200, 64, 65, 1, 0, 63, 130};
    static const int32_t idx[7] = {5, 0, -1, 2, 3, 1, -1};
    gdn_case_cfg cfg = gdn_cfg_default();
    cfg.seed = seed;
    cfg.H = 2;
    cfg.HV = 4;
    cfg.K = K;
    cfg.V = V;
    cfg.n = 7;
    cfg.lengths = lengths;
    cfg.use_pool = 1;
    cfg.slots = 7;
    cfg.indices = idx;
    cfg.l2norm = l2norm;
    cfg.dtype = dt;
    cfg.layout = layout;
    cfg.disable_update = disable_update;
    cfg.stride_pad = stride_pad;
    cfg.algorithm = CLVARLEN_GDN_CHUNKED;
    gdn_case c;
    gdn_case_make(&c, &cfg);
    gdn_run_and_check(gdn_ctx, &c, tuning);
    gdn_case_free(&c);
}

/* The portable chunked paths: CLBlast's products with the kernels of
 * cl/gated-delta-blas.cl (PoCL's default where CLBlast is built), with heads
 * in groups of one (a 1 KiB scratch cap), and the fused kernel (blas=0, the
 * default on GPUs without the tensor-core path); both layouts, V tiles cut
 * short (V = 40, 3), odd head dims (K = 5). */
START_TEST(portable_chunked)
{
    static const char *const tuning[4] = {"blas=1", "blas=1,scr=1", "blas=0", "blas=1"};
    static const int dims[4][2] = {{16, 24}, {32, 40}, {16, 24}, {5, 3}};
    static const clvarlen_dtype dts[4] = {CLVARLEN_DTYPE_F32, CLVARLEN_DTYPE_BF16,
                                          CLVARLEN_DTYPE_F16, CLVARLEN_DTYPE_F32};
    chunked_edge_case(tuning[_i], 301 + (uint64_t)_i, dims[_i][0], dims[_i][1], dts[_i], _i != 2,
                      _i & 1 ? CLVARLEN_STATE_KV : CLVARLEN_STATE_VK, 0, 0);
}
END_TEST

/* The tensor-core chunked kernel (cl/gated-delta-mma.cl), forced: emulated
 * on PoCL, natively on NVIDIA. Over the edge case's lengths, HV > H, both
 * layouts, bf16 and f16, V tiles cut short (V = 40 with 32- and 16-column
 * tiles), K = 16 and 32, with and without the L2 norm. */
START_TEST(mma_chunked)
{
    /* 0-3: the two-stage path (gdn_chunk_prep, gdn_chunk_scan) with 8 (the
     * default), 2, 1 and 4 warps per scan group; 4-7: the fused kernel
     * (gdn_chunked_mma). V 20 once: the scan's v and o exchange (sc_vload)
     * with rows of V not in whole 16-byte runs. */
    static const char *const tuning[8] = {
        "mma=1,scan=1",      "mma=1,scan=1,sw=2", "mma=1,scan=1,sw=1",   "mma=1,scan=1,sw=4",
        "mma=1,scan=0",      "mma=1,scan=0,mvt=16", "mma=1,scan=0",      "mma=1,scan=0,mvt=64"};
    chunked_edge_case(tuning[_i], 101 + (uint64_t)_i, _i & 1 ? 32 : 16,
                      _i & 1 ? 40 : (_i == 2 ? 20 : 24),
                      _i & 2 ? CLVARLEN_DTYPE_F16 : CLVARLEN_DTYPE_BF16, (_i & 3) != 3,
                      _i & 1 ? CLVARLEN_STATE_KV : CLVARLEN_STATE_VK, (_i & 3) == 2, 0);
}
END_TEST

/* The two-stage path with the scan on wgmma (CV_GDN_WG, emulated off Hopper;
 * two sets of operands, so sequences of several chunks stage the next while
 * one is worked on): K 64 and 128 (the form's head dims), V past the last
 * warpgroup's rows (40, 72), both dtypes and state layouts, the update
 * disabled once, token rows 3 elements apart from the packed layout once (the k,
 * q and v rows stored element by element, not copied 16 bytes at a time), V 20
 * (rows of V not in whole 16-byte runs). */
START_TEST(wgmma_scan)
{
    static const int dims[5][2] = {{64, 40}, {128, 72}, {64, 64}, {128, 24}, {64, 20}};
    chunked_edge_case("mma=1,scan=1,wgmma=1", 401 + (uint64_t)_i, dims[_i][0], dims[_i][1],
                      _i & 2 ? CLVARLEN_DTYPE_F16 : CLVARLEN_DTYPE_BF16, _i != 1,
                      _i & 1 ? CLVARLEN_STATE_KV : CLVARLEN_STATE_VK, _i == 2, _i == 2 ? 3 : 0);
}
END_TEST

/* The wgmma scan's check (lib/gated-delta/wgmma-check.c) made to fail
 * (wgbad=1), each on a context of its own (the verdict is the context's): with
 * the form forced (wgmma=1) the call fails and writes nothing, and so does a
 * later call; with it on as the default is on Hopper (wgmma=2) the call runs
 * the mma.sync form and is right. Where the form does not fit, both are right. */
START_TEST(wgmma_check_fails)
{
    clvarlen_context *ctx = tu_cl_context();
    static const int32_t lengths[3] = {130, 1, 70};
    gdn_case_cfg cfg = gdn_cfg_default();
    cfg.seed = 501 + (uint64_t)_i;
    cfg.K = 64;
    cfg.V = 24;
    cfg.n = 3;
    cfg.lengths = lengths;
    cfg.use_pool = 1;
    cfg.slots = 3;
    cfg.l2norm = 1;
    cfg.dtype = CLVARLEN_DTYPE_BF16;
    cfg.algorithm = CLVARLEN_GDN_CHUNKED;
    gdn_case c;
    gdn_case_make(&c, &cfg);
    /* the wgmma scan needs about 127 KiB of local memory here (two sets of
     * operands and the emulation's lane scratch): devices with less (rusticl's
     * llvmpipe: 32 KiB) run another chunked kernel, forced or not. NVIDIA's
     * Hopper reports 48 KiB but takes the form's static arrays (226 KiB). */
    clvarlen_device_info info;
    ck_assert_int_eq(clvarlen_context_device(ctx, &info), CLVARLEN_SUCCESS);
    const int fits = info.local_mem_bytes >= 128 * 1024 ||
                     (info.vendor == CLVARLEN_VENDOR_NVIDIA && info.cc_major == 9);
    if (_i == 0 && fits) {
        gdn_tuning("mma=1,scan=1,wgmma=1,wgbad=1");
        for (int call = 0; call < 2; call++) {
            const clvarlen_status st = gdn_case_run(ctx, &c);
            ck_assert_msg(st == (call ? CLVARLEN_ERROR_UNSUPPORTED : CLVARLEN_ERROR_KERNEL_BUILD),
                          "call %d: %s", call, clvarlen_status_str(st));
            ck_assert(strstr(clvarlen_last_error(ctx), "check") != NULL);
            ck_assert(gdn_case_untouched(&c));
        }
    } else {
        gdn_tuning(_i ? "mma=1,scan=1,wgmma=2,wgbad=1" : "mma=1,scan=1,wgmma=1,wgbad=1");
        gdn_run_and_check(ctx, &c, "wgmma check failed: mma.sync");
    }
    gdn_case_free(&c);
    clvarlen_context_destroy(ctx);
}
END_TEST

/* The tensor-core chunked kernel at K = V = 128 (bf16, HV/H 2; the f32 case
 * of the same test runs the portable chunked kernel). */
START_TEST(mma_large_heads)
{
    gdn_tuning("mma=1,scan=1");
    gdn_t_large_heads(gdn_ctx, CLVARLEN_GDN_CHUNKED);
}
END_TEST

/* The two-stage tensor-core path without cu_seqlens (3 sequences of 130
 * tokens: the first stage finds its sequence from the fixed length) and with
 * its scratch capped (10 chunk slots of GDN_SCR_FLOATS, about 25 KiB, per
 * head; the caps sit halfway between head counts) so that the value heads run
 * in groups: 0, 1: three value heads per key head (one per
 * first-stage work-group), whole or each in a group of its own; 2: two per key
 * head in groups of two (a pair per first-stage work-group, the second group
 * from head 2); 3: groups of three, then one (a pair split: one head per
 * first-stage work-group). */
START_TEST(mma_fixed_head_groups)
{
    static const char *const tuning[4] = {"mma=1,scan=1", "mma=1,scan=1,scr=1",
                                          "mma=1,scan=1,scr=625", "mma=1,scan=1,scr=875"};
    /* the host's hcount = cap / (n_slots * slot bytes), n_slots = 390 / 64 + 3 + 1 */
    const long per_head = 10L * GDN_SCR_FLOATS * (long)sizeof(float);
    ck_assert_int_eq(625L * 1024 / per_head, 2);
    ck_assert_int_eq(875L * 1024 / per_head, 3);
    gdn_tuning(tuning[_i]);
    static const int32_t lengths[3] = {130, 130, 130};
    static const int32_t idx[3] = {2, -1, 0};
    gdn_case_cfg cfg = gdn_cfg_default();
    cfg.seed = 131 + (uint64_t)_i;
    cfg.H = _i < 2 ? 1 : 2;
    cfg.HV = _i < 2 ? 3 : 4;
    cfg.K = 16;
    cfg.V = 24;
    cfg.n = 3;
    cfg.lengths = lengths;
    cfg.fixed = 1;
    cfg.use_pool = 1;
    cfg.slots = 3;
    cfg.indices = idx;
    cfg.l2norm = 1;
    cfg.dtype = CLVARLEN_DTYPE_BF16;
    cfg.algorithm = CLVARLEN_GDN_CHUNKED;
    gdn_case c;
    gdn_case_make(&c, &cfg);
    gdn_run_and_check(gdn_ctx, &c, tuning[_i]);
    gdn_case_free(&c);
}
END_TEST

/* A chunked prefill (the two-stage tensor-core path, emulated off NVIDIA)
 * followed by decode steps from the pool it wrote gives the states and
 * outputs of the same steps after a token-by-token prefill (issue 22): the
 * pool slots the chunked path writes are the recurrence's states. */
START_TEST(chunked_then_decode)
{
    gdn_tuning("mma=1,scan=1");
    enum { N = 4, H = 2, HV = 4, K = 32, V = 24, STEPS = 3, SLOTS = 5 };
    static const int32_t lengths[N] = {200, 65, 0, 130};
    static const int32_t idx[N] = {2, 0, 3, 4};
    const clvarlen_dtype dt = CLVARLEN_DTYPE_BF16;
    const int64_t T = 200 + 65 + 0 + 130, DT = N * STEPS; /* prefill and decode tokens */
    int32_t cu[N + 1];
    tu_cu_from_lengths(lengths, N, cu);
    tu_rng r = tu_rng_make(4242);
    const size_t esz = 2, slot = (size_t)HV * K * V;
    void *q = tu_xmalloc((size_t)(T + DT) * H * K * esz), *k = tu_xmalloc((size_t)(T + DT) * H * K * esz);
    void *v = tu_xmalloc((size_t)(T + DT) * HV * V * esz), *a = tu_xmalloc((size_t)(T + DT) * HV * esz);
    void *b = tu_xmalloc((size_t)(T + DT) * HV * esz);
    float A_log[HV], dt_bias[HV];
    tu_fill_random(&r, q, dt, (size_t)(T + DT) * H * K, 1.0);
    tu_fill_random(&r, k, dt, (size_t)(T + DT) * H * K, 1.0);
    tu_fill_random(&r, v, dt, (size_t)(T + DT) * HV * V, 1.0);
    tu_fill_random(&r, a, dt, (size_t)(T + DT) * HV, 1.0);
    tu_fill_random(&r, b, dt, (size_t)(T + DT) * HV, 1.0);
    tu_fill_random(&r, A_log, CLVARLEN_DTYPE_F32, HV, 0.5);
    tu_fill_random(&r, dt_bias, CLVARLEN_DTYPE_F32, HV, 0.5);
    float *pool[2];
    void *o[2];
    pool[0] = tu_xmalloc(SLOTS * slot * sizeof(float));
    tu_fill_random(&r, pool[0], CLVARLEN_DTYPE_F32, SLOTS * slot, 0.5);
    pool[1] = tu_xmalloc(SLOTS * slot * sizeof(float));
    memcpy(pool[1], pool[0], SLOTS * slot * sizeof(float));
    float *init = tu_xmalloc(SLOTS * slot * sizeof(float));
    memcpy(init, pool[0], SLOTS * slot * sizeof(float));
    o[0] = tu_xmalloc((size_t)(T + DT) * HV * V * esz);
    o[1] = tu_xmalloc((size_t)(T + DT) * HV * V * esz);

    for (int run = 0; run < 2; run++) { /* 0: chunked prefill, 1: token by token */
        clvarlen_gdn_params p;
        clvarlen_gdn_params_init(&p);
        p.dtype = dt;
        p.n_seqs = N;
        p.total_tokens = T;
        p.heads_qk = H;
        p.heads_v = HV;
        p.key_dim = K;
        p.value_dim = V;
        p.state_slots = SLOTS;
        p.use_qk_l2norm = 1;
        p.algorithm = run == 0 ? CLVARLEN_GDN_CHUNKED : CLVARLEN_GDN_RECURRENT;
        ck_assert_int_eq(clvarlen_gated_delta_rule(gdn_ctx, &p, A_log, dt_bias, a, b, q, k, v, cu,
                                                   pool[run], idx, NULL, NULL, o[run]),
                         CLVARLEN_SUCCESS);
        for (int s = 0; s < STEPS; s++) { /* one token per sequence, fixed length 1 */
            const int64_t t0 = T + (int64_t)s * N;
            p.algorithm = CLVARLEN_GDN_AUTO;
            p.total_tokens = N;
            p.fixed_seqlen = 1;
            ck_assert_int_eq(
                clvarlen_gated_delta_rule(gdn_ctx, &p, A_log, dt_bias,
                                          (char *)a + t0 * HV * esz, (char *)b + t0 * HV * esz,
                                          (char *)q + t0 * H * K * esz, (char *)k + t0 * H * K * esz,
                                          (char *)v + t0 * HV * V * esz, NULL, pool[run], idx, NULL,
                                          NULL, (char *)o[run] + t0 * HV * V * esz),
                CLVARLEN_SUCCESS);
        }
    }
    const double tol = gdn_tolerance(dt, 200);
    const double es = tu_rel_err(pool[0], pool[1], CLVARLEN_DTYPE_F32, SLOTS * slot);
    const double eo = tu_rel_err((char *)o[0] + T * HV * V * esz, (char *)o[1] + T * HV * V * esz,
                                 dt, (size_t)DT * HV * V);
    const double ep = tu_rel_err(o[0], o[1], dt, (size_t)T * HV * V);
    ck_assert_msg(es <= tol && eo <= tol && ep <= tol,
                  "chunked then decode vs token by token: states %.3g, decode outputs %.3g, "
                  "prefill outputs %.3g (tolerance %.3g)",
                  es, eo, ep, tol);
    /* slot 1 is no sequence's: never written */
    for (int i = 0; i < 2; i++)
        tu_assert_bytes_eq(pool[i] + slot, init + slot, slot * sizeof(float), "slot 1");
    free(init);
    for (int i = 0; i < 2; i++) {
        free(pool[i]);
        free(o[i]);
    }
    free(q);
    free(k);
    free(v);
    free(a);
    free(b);
}
END_TEST

/* The device tables' AUTO threshold without tensor cores: on CPU OpenCL
 * devices (PoCL; not Mesa's llvmpipe) in a library with CLBlast, sequences of
 * 512 tokens or more run chunked (the CLBlast path), shorter ones token by
 * token; elsewhere, in f32, every sequence token by token. Each sequence's
 * output and state equal, bit for bit, those of the algorithm AUTO should have
 * picked for it, forced on the same batch. */
START_TEST(auto_table_threshold)
{
    unsetenv("CLVARLEN_GDN_TUNING");
    clvarlen_device_info info;
    ck_assert_int_eq(clvarlen_context_device(gdn_ctx, &info), CLVARLEN_SUCCESS);
    const int table = CLVARLEN_HAVE_CLBLAST && info.vendor == CLVARLEN_VENDOR_CPU &&
                      strstr(info.device_name, "llvmpipe") == NULL;
    static const int32_t lengths[4] = {3, 600, 0, 511};
    static const clvarlen_gdn_algorithm algs[3] = {CLVARLEN_GDN_AUTO, CLVARLEN_GDN_RECURRENT,
                                                   CLVARLEN_GDN_CHUNKED};
    gdn_case c[3];
    for (int i = 0; i < 3; i++) {
        gdn_case_cfg cfg = gdn_cfg_default();
        cfg.seed = 93;
        cfg.n = 4;
        cfg.lengths = lengths;
        cfg.use_pool = 1;
        cfg.slots = 4;
        cfg.l2norm = 1;
        cfg.algorithm = algs[i];
        gdn_case_make(&c[i], &cfg);
        gdn_run_and_check(gdn_ctx, &c[i], i == 0 ? "AUTO" : i == 1 ? "RECURRENT" : "CHUNKED");
    }
    const int64_t head = (int64_t)c[0].cfg.HV * c[0].cfg.K * c[0].cfg.V;
    for (int n = 1; n < 4; n += 2) { /* 600 tokens, 511 tokens */
        const gdn_case *want = &c[n == 1 && table ? 2 : 1];
        const int64_t bos = c[0].cu[n];
        ck_assert_msg(memcmp(gdn_case_o_row(&c[0], bos), gdn_case_o_row(want, bos),
                             (size_t)lengths[n] * gdn_case_o_row_bytes(&c[0])) == 0,
                      "AUTO's output of the %d-token sequence is not %s's (device %s)",
                      (int)lengths[n], want == &c[2] ? "CHUNKED" : "RECURRENT",
                      info.device_name);
        ck_assert_msg(memcmp((const float *)(c[0].pool + GDN_GUARD) + n * head,
                             (const float *)(want->pool + GDN_GUARD) + n * head,
                             (size_t)head * sizeof(float)) == 0,
                      "AUTO's state of the %d-token sequence is not %s's", (int)lengths[n],
                      want == &c[2] ? "CHUNKED" : "RECURRENT");
    }
    if (table) /* the two algorithms differ here, so the comparisons above tell them apart */
        ck_assert_msg(memcmp(gdn_case_o_row(&c[1], c[0].cu[1]), gdn_case_o_row(&c[2], c[0].cu[1]),
                             (size_t)lengths[1] * gdn_case_o_row_bytes(&c[0])) != 0,
                      "RECURRENT and CHUNKED gave the same bits");
    for (int i = 0; i < 3; i++)
        gdn_case_free(&c[i]);
}
END_TEST

/* AUTO chooses per sequence: a batch with a long sequence (past the
 * threshold) and short ones runs both kernels, and each sequence's result
 * equals running it alone. */
START_TEST(auto_per_sequence)
{
    /* a threshold below the long sequence (of the device tables, only PoCL's sets
     * one, 512: auto_table_threshold); the library reads it per call, and this runs
     * in a forked child */
    gdn_tuning("min=100");
    static const int32_t lengths[4] = {3, 700, 0, 1};
    gdn_case_cfg cfg = gdn_cfg_default();
    cfg.seed = 91;
    cfg.n = 4;
    cfg.lengths = lengths;
    cfg.use_pool = 1;
    cfg.slots = 4;
    cfg.l2norm = 1;
    gdn_case c;
    gdn_case_make(&c, &cfg);
    gdn_run_and_check(gdn_ctx, &c, "AUTO, mixed lengths");
    /* the long sequence alone, same data */
    const int64_t bos = c.cu[1], L = lengths[1], HV = cfg.HV, V = cfg.V, hk = cfg.H * cfg.K;
    const int64_t head = HV * cfg.K * V;
    clvarlen_gdn_params p = c.p;
    p.n_seqs = 1;
    p.total_tokens = L;
    p.fixed_seqlen = (int32_t)L;
    p.state_slots = 1;
    float *pool = malloc((size_t)head * sizeof(float));
    float *o = calloc((size_t)(L * HV * V), sizeof(float));
    ck_assert(pool && o);
    memcpy(pool, (const float *)c.pool_init + head, (size_t)head * sizeof(float));
    clvarlen_status st = clvarlen_gated_delta_rule(
        gdn_ctx, &p, c.A_log, c.dt_bias, (const float *)c.a + bos * HV,
        (const float *)c.b + bos * HV,
        (const float *)c.q + bos * hk, (const float *)c.k + bos * hk,
        (const float *)c.v + bos * HV * V, NULL, pool, NULL, NULL, NULL, o);
    ck_assert_msg(st == CLVARLEN_SUCCESS, "%s", clvarlen_last_error(gdn_ctx));
    ck_assert_msg(memcmp(o, gdn_case_o_row(&c, bos), (size_t)(L * HV * V) * sizeof(float)) == 0,
                  "the long sequence alone differs from the mixed batch");
    ck_assert_msg(memcmp(pool, (const float *)(c.pool + GDN_GUARD) + head,
                         (size_t)head * sizeof(float)) == 0,
                  "the long sequence's state alone differs from the mixed batch");
    free(pool);
    free(o);
    gdn_case_free(&c);
}
END_TEST

/* ---------------------------------------------------------------- cl_mem entry point */

typedef struct dev_case {
    cl_context clc;
    cl_command_queue queue;
    cl_mem buf[13];
    size_t off;
} dev_case;

enum { D_ALOG, D_BIAS, D_A, D_B, D_Q, D_K, D_V, D_CU, D_POOL, D_SIDX, D_INTER, D_CIDX, D_O };

static cl_mem dev_buffer(dev_case *d, const void *host, size_t bytes)
{
    cl_int err = CL_SUCCESS;
    cl_mem m = clCreateBuffer(d->clc, CL_MEM_READ_WRITE, bytes + d->off + 64, NULL, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    if (host && bytes)
        ck_assert_int_eq(clEnqueueWriteBuffer(d->queue, m, CL_TRUE, d->off, bytes, host, 0, NULL,
                                              NULL),
                         CL_SUCCESS);
    return m;
}

static void dev_make(dev_case *d, clvarlen_context *context, const gdn_case *c, size_t off)
{
    memset(d, 0, sizeof *d);
    d->off = off;
    cl_device_id dev;
    ck_assert_int_eq(clvarlen_context_get_cl(context, &d->clc, &dev, &d->queue), CLVARLEN_SUCCESS);
    const clvarlen_gdn_params *p = &c->p;
    const size_t es = p->dtype == CLVARLEN_DTYPE_F32 ? 4 : 2;
    const int64_t T = p->total_tokens, N = p->n_seqs, HV = p->heads_v;
    const size_t qk = (size_t)(T * (p->q_stride ? p->q_stride : p->heads_qk * p->key_dim)) * es;
    d->buf[D_ALOG] = dev_buffer(d, c->A_log, (size_t)HV * 4);
    d->buf[D_BIAS] = dev_buffer(d, c->dt_bias, (size_t)HV * 4);
    d->buf[D_A] = dev_buffer(d, c->a, (size_t)(T * HV) * es);
    d->buf[D_B] = dev_buffer(d, c->b, (size_t)(T * HV) * es);
    d->buf[D_Q] = dev_buffer(d, c->q, qk);
    d->buf[D_K] = dev_buffer(d, c->k, qk);
    d->buf[D_V] = dev_buffer(d, c->v, (size_t)(T * HV * p->value_dim) * es);
    d->buf[D_CU] = dev_buffer(d, c->cu, (size_t)(N + 1) * 4);
    d->buf[D_POOL] = dev_buffer(d, c->pool_init, c->pool_bytes);
    d->buf[D_SIDX] = c->indices ? dev_buffer(d, c->indices, (size_t)N * 4) : NULL;
    d->buf[D_O] = dev_buffer(d, c->o + GDN_GUARD, c->o_bytes);
}

static clvarlen_status dev_run(clvarlen_context *context, dev_case *d, const gdn_case *c,
                               cl_event *event)
{
    size_t o = d->off;
    return clvarlen_cl_gated_delta_rule(
        context, &c->p, d->buf[D_ALOG], o, d->buf[D_BIAS], o, d->buf[D_A], o, d->buf[D_B], o,
        d->buf[D_Q], o, d->buf[D_K], o, d->buf[D_V], o, d->buf[D_CU], o, d->buf[D_POOL], o,
        d->buf[D_SIDX], o, NULL, 0, NULL, 0, d->buf[D_O], o, 0, NULL, event);
}

static void dev_read(dev_case *d, int which, void *host, size_t bytes)
{
    ck_assert_int_eq(clEnqueueReadBuffer(d->queue, d->buf[which], CL_TRUE, d->off, bytes, host, 0,
                                         NULL, NULL),
                     CL_SUCCESS);
}

/* The device outputs and states equal the host entry point's (c's), bitwise. */
static void dev_expect_host(dev_case *d, const gdn_case *c)
{
    unsigned char *o = malloc(c->o_bytes + 1), *pool = malloc(c->pool_bytes + 1);
    ck_assert(o && pool);
    dev_read(d, D_O, o, c->o_bytes);
    dev_read(d, D_POOL, pool, c->pool_bytes);
    ck_assert_msg(memcmp(o, c->o + GDN_GUARD, c->o_bytes) == 0, "cl_mem o differs from host path");
    ck_assert_msg(memcmp(pool, c->pool + GDN_GUARD, c->pool_bytes) == 0,
                  "cl_mem states differ from host path");
    free(o);
    free(pool);
}

static void dev_free(dev_case *d)
{
    for (int i = 0; i < 13; i++)
        if (d->buf[i])
            clReleaseMemObject(d->buf[i]);
}

/* The cl_mem entry point on c's data at byte offset off (c.p as it is now):
 * outputs and states equal, bitwise, those of the host entry point's run of c. */
static void dev_expect_same(const gdn_case *c, size_t off)
{
    dev_case d;
    dev_make(&d, gdn_ctx, c, off);
    clvarlen_status st = dev_run(gdn_ctx, &d, c, NULL);
    ck_assert_msg(st == CLVARLEN_SUCCESS, "%s", clvarlen_last_error(gdn_ctx));
    dev_expect_host(&d, c);
    dev_free(&d);
}

static gdn_case_cfg cl_mem_cfg(int32_t *lengths, int32_t *idx, clvarlen_gdn_algorithm alg)
{
    static const int32_t L[5] = {7, 0, 90, 1, 12};
    static const int32_t I[5] = {2, 0, -1, 4, 1};
    memcpy(lengths, L, sizeof L);
    memcpy(idx, I, sizeof I);
    gdn_case_cfg cfg = gdn_cfg_default();
    cfg.seed = 101;
    cfg.n = 5;
    cfg.lengths = lengths;
    cfg.use_pool = 1;
    cfg.slots = 5;
    cfg.indices = idx;
    cfg.l2norm = 1;
    cfg.algorithm = alg;
    return cfg;
}

/* Same results as the host-memory entry point, bitwise, at non-zero offsets;
 * the returned event completes the operation. */
START_TEST(cl_mem_matches_host)
{
    int32_t lengths[5], idx[5];
    gdn_case_cfg cfg = cl_mem_cfg(lengths, idx, ALG(_i));
    gdn_case c;
    gdn_case_make(&c, &cfg);
    gdn_run_and_check(gdn_ctx, &c, "host entry point");

    dev_case d;
    dev_make(&d, gdn_ctx, &c, 256);
    cl_event ev = NULL;
    clvarlen_status st = dev_run(gdn_ctx, &d, &c, &ev);
    ck_assert_msg(st == CLVARLEN_SUCCESS, "%s", clvarlen_last_error(gdn_ctx));
    ck_assert_ptr_nonnull(ev);
    ck_assert_int_eq(clWaitForEvents(1, &ev), CL_SUCCESS);
    clReleaseEvent(ev);
    dev_expect_host(&d, &c);

    /* misaligned offsets and short buffers are rejected before anything runs */
    st = clvarlen_cl_gated_delta_rule(gdn_ctx, &c.p, d.buf[D_ALOG], 2, d.buf[D_BIAS], 256, d.buf[D_A],
                                      256, d.buf[D_B], 256, d.buf[D_Q], 256, d.buf[D_K], 256,
                                      d.buf[D_V], 256, d.buf[D_CU], 256, d.buf[D_POOL], 256,
                                      d.buf[D_SIDX], 256, NULL, 0, NULL, 0, d.buf[D_O], 256, 0,
                                      NULL, NULL);
    ck_assert_int_eq(st, CLVARLEN_ERROR_INVALID_ARGUMENT);
    clvarlen_gdn_params big = c.p;
    big.state_slots = 1000;
    st = clvarlen_cl_gated_delta_rule(gdn_ctx, &big, d.buf[D_ALOG], 256, d.buf[D_BIAS], 256,
                                      d.buf[D_A], 256, d.buf[D_B], 256, d.buf[D_Q], 256,
                                      d.buf[D_K], 256, d.buf[D_V], 256, d.buf[D_CU], 256,
                                      d.buf[D_POOL], 256, d.buf[D_SIDX], 256, NULL, 0, NULL, 0,
                                      d.buf[D_O], 256, 0, NULL, NULL);
    ck_assert_int_eq(st, CLVARLEN_ERROR_BUFFER_TOO_SMALL);
    ck_assert_ptr_nonnull(strstr(clvarlen_last_error(gdn_ctx), "state_pool"));
    /* an output sharing bytes with an input (o over v, the pool over q) is rejected */
    st = clvarlen_cl_gated_delta_rule(gdn_ctx, &c.p, d.buf[D_ALOG], 256, d.buf[D_BIAS], 256,
                                      d.buf[D_A], 256, d.buf[D_B], 256, d.buf[D_Q], 256,
                                      d.buf[D_K], 256, d.buf[D_V], 256, d.buf[D_CU], 256,
                                      d.buf[D_POOL], 256, d.buf[D_SIDX], 256, NULL, 0, NULL, 0,
                                      d.buf[D_V], 256, 0, NULL, NULL);
    ck_assert_int_eq(st, CLVARLEN_ERROR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(clvarlen_last_error(gdn_ctx), "o"));
    st = clvarlen_cl_gated_delta_rule(gdn_ctx, &c.p, d.buf[D_ALOG], 256, d.buf[D_BIAS], 256,
                                      d.buf[D_A], 256, d.buf[D_B], 256, d.buf[D_Q], 256,
                                      d.buf[D_K], 256, d.buf[D_V], 256, d.buf[D_CU], 256,
                                      d.buf[D_Q], 256, d.buf[D_SIDX], 256, NULL, 0, NULL, 0,
                                      d.buf[D_O], 256, 0, NULL, NULL);
    ck_assert(st == CLVARLEN_ERROR_INVALID_ARGUMENT || st == CLVARLEN_ERROR_BUFFER_TOO_SMALL);
    dev_free(&d);
    gdn_case_free(&c);
}
END_TEST

/* The cl_mem entry point cannot see the lengths: without the tensor-core path
 * (f32 here) AUTO launches the chunked path only for batches averaging the
 * threshold or more (100 here). {7, 0, 120, 1, 12} averages 28: every
 * sequence token by token, equal bitwise to the host entry point's RECURRENT
 * run (whose AUTO would chunk the 120-token one); {7, 0, 490, 1, 12} averages
 * 102: the 490-token sequence chunked, as the host entry point's AUTO does. */
START_TEST(cl_mem_auto_average)
{
    gdn_tuning("min=100");
    int32_t lengths[5], idx[5];
    gdn_case_cfg cfg = cl_mem_cfg(lengths, idx, _i ? CLVARLEN_GDN_AUTO : CLVARLEN_GDN_RECURRENT);
    lengths[2] = _i ? 490 : 120;
    gdn_case c;
    gdn_case_make(&c, &cfg);
    gdn_run_and_check(gdn_ctx, &c, _i ? "host entry point, AUTO" : "host entry point, RECURRENT");
    c.p.algorithm = CLVARLEN_GDN_AUTO;
    dev_expect_same(&c, 256);
    gdn_case_free(&c);
}
END_TEST

/* The wgmma scan (emulated off Hopper) through the cl_mem entry point with
 * every buffer 4 bytes past an 8-byte boundary: the states' 8-byte accesses
 * (f32 [V, K] slots 8-byte aligned), the k, q and v rows' 16-byte loads and the
 * first stage's cp.async copies fall back to narrower ones; outputs and
 * states equal the host entry point's, whose buffers are aligned, bitwise. */
START_TEST(wgmma_scan_unaligned)
{
    gdn_tuning("mma=1,scan=1,wgmma=1");
    int32_t lengths[5], idx[5];
    gdn_case_cfg cfg = cl_mem_cfg(lengths, idx, CLVARLEN_GDN_CHUNKED);
    cfg.K = 64;
    cfg.V = 40;
    cfg.dtype = CLVARLEN_DTYPE_BF16;
    gdn_case c;
    gdn_case_make(&c, &cfg);
    gdn_run_and_check(gdn_ctx, &c, "host entry point");
    dev_expect_same(&c, 260);
    gdn_case_free(&c);
}
END_TEST

/* Issue 22: heads narrower than a work-group's tile. The pool is a guarded
 * device buffer ending at the last slot's last state, so a write past a tile
 * (on PoCL the chunked kernel's write-back wrote past the pool: host heap)
 * breaks the guard; the states must equal the host path's, bitwise. */
START_TEST(narrow_heads_pool_guard)
{
    static const int32_t dims[][2] = {{2, 16}, {4, 8}, {1, 1}, {3, 2}};
    int32_t lengths[5], idx[5];
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
        gdn_case_cfg cfg = cl_mem_cfg(lengths, idx, ALG(_i));
        cfg.seed = 111 + (uint64_t)i;
        cfg.H = 1;
        cfg.HV = 2;
        cfg.K = dims[i][0];
        cfg.V = dims[i][1];
        gdn_case c;
        gdn_case_make(&c, &cfg);
        char label[64];
        snprintf(label, sizeof label, "K %d V %d", (int)cfg.K, (int)cfg.V);
        gdn_run_and_check(gdn_ctx, &c, label);

        dev_case d;
        dev_make(&d, gdn_ctx, &c, 0);
        tu_clbuf pool = tu_clbuf_make(gdn_ctx, c.pool_bytes, 0, c.pool_init);
        clReleaseMemObject(d.buf[D_POOL]);
        d.buf[D_POOL] = pool.mem;
        clvarlen_status st = dev_run(gdn_ctx, &d, &c, NULL);
        ck_assert_msg(st == CLVARLEN_SUCCESS, "%s: %s", label, clvarlen_last_error(gdn_ctx));
        const unsigned char *states = tu_clbuf_fetch(gdn_ctx, &pool, label);
        ck_assert_msg(memcmp(states, c.pool + GDN_GUARD, c.pool_bytes) == 0,
                      "%s: cl_mem states differ from host path", label);
        d.buf[D_POOL] = NULL;
        tu_clbuf_free(&pool);
        dev_free(&d);
        gdn_case_free(&c);
    }
}
END_TEST

/* With device checks on, a device-resident index past the pool or a broken
 * cu_seqlens returns the error and writes nothing. */
START_TEST(cl_mem_device_checks)
{
    clvarlen_options *opt = NULL;
    ck_assert_int_eq(clvarlen_options_create(&opt), CLVARLEN_SUCCESS);
    ck_assert_int_eq(clvarlen_options_set_device(opt, tu_cl_device_spec()), CLVARLEN_SUCCESS);
    ck_assert_int_eq(clvarlen_options_set_device_checks(opt, 1), CLVARLEN_SUCCESS);
    clvarlen_context *cctx = NULL;
    ck_assert_int_eq(clvarlen_context_create(opt, &cctx), CLVARLEN_SUCCESS);
    clvarlen_options_destroy(opt);

    int32_t lengths[5], idx[5];
    gdn_case_cfg cfg = cl_mem_cfg(lengths, idx, ALG(_i));
    gdn_case c;
    gdn_case_make(&c, &cfg);
    unsigned char *o = malloc(c.o_bytes + 1), *pool = malloc(c.pool_bytes + 1);
    ck_assert(o && pool);

    /* each of cu_seqlens' three conditions once */
    for (int bad = 0; bad < 5; bad++) {
        gdn_case_reset(&c);
        if (bad == 0)
            c.indices[3] = 5; /* past the pool */
        else if (bad == 1)
            c.cu[2] = c.cu[1] - 1; /* decreasing */
        else if (bad == 2)
            c.cu[0] = 1; /* cu[0] != 0 (still non-decreasing: cu[1] >= 1) */
        else if (bad == 3)
            c.cu[c.p.n_seqs] += 1; /* cu[N] != the total */
        dev_case d;
        dev_make(&d, cctx, &c, 64);
        clvarlen_status st = dev_run(cctx, &d, &c, NULL);
        const clvarlen_status want[5] = {
            CLVARLEN_ERROR_INDEX_OUT_OF_RANGE, CLVARLEN_ERROR_INVALID_CU_SEQLENS,
            CLVARLEN_ERROR_INVALID_CU_SEQLENS, CLVARLEN_ERROR_INVALID_CU_SEQLENS, CLVARLEN_SUCCESS};
        ck_assert_msg(st == want[bad], "case %d: %s (%s)", bad, clvarlen_status_name(st),
                      clvarlen_last_error(cctx));
        ck_assert_int_eq(clFinish(d.queue), CL_SUCCESS);
        dev_read(&d, D_O, o, c.o_bytes);
        dev_read(&d, D_POOL, pool, c.pool_bytes);
        const int same = memcmp(o, c.o + GDN_GUARD, c.o_bytes) == 0 &&
                         memcmp(pool, c.pool_init, c.pool_bytes) == 0;
        ck_assert_msg(bad == 4 ? !same : same, "case %d: outputs %s", bad,
                      bad == 4 ? "not written" : "written despite the error");
        dev_free(&d);
        c.indices[3] = idx[3];
        tu_cu_from_lengths(c.lengths, c.p.n_seqs, c.cu);
    }
    free(o);
    free(pool);
    gdn_case_free(&c);
    clvarlen_context_destroy(cctx);
}
END_TEST

void gdn_add_cl_cases(TCase *oracle, TCase *api)
{
    tcase_add_loop_test(oracle, sweep_chunked, 0, 3);
    tcase_add_loop_test(oracle, chunked_vs_recurrent, 0, 3);
    tcase_add_test(oracle, auto_per_sequence);
    tcase_add_test(oracle, auto_table_threshold);
    tcase_add_test(oracle, chunked_wide_group);
    tcase_add_loop_test(oracle, portable_chunked, 0, 4);
    tcase_add_loop_test(api, cl_mem_matches_host, 0, 2);
    tcase_add_loop_test(api, cl_mem_device_checks, 0, 2);
    tcase_add_loop_test(api, cl_mem_auto_average, 0, 2);
    tcase_add_loop_test(oracle, narrow_heads_pool_guard, 0, 2);
    if (tu_second_device()) /* the emulated forms: the default device's (kit-check.h) */
        return;
    tcase_add_loop_test(oracle, mma_chunked, 0, 8);
    tcase_add_loop_test(oracle, wgmma_scan, 0, 5);
    tcase_add_loop_test(oracle, wgmma_check_fails, 0, 2);
    tcase_add_test(oracle, mma_large_heads);
    tcase_add_test(oracle, chunked_then_decode);
    tcase_add_loop_test(oracle, mma_fixed_head_groups, 0, 4);
    tcase_add_test(api, wgmma_scan_unaligned);
}
