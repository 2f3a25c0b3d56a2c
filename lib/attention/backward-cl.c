/* Varlen attention backward on OpenCL (SPEC 1.2): the launchers of
 * cl/attention-bwd.cl and cl/attention-bwd-nv.cl. Three passes on one chain:
 * delta = dot(do, o) per row, then dk and dv per (key tile, KV head), then dq
 * per (query tile, query head). The wgmma form (Hopper) computes delta in
 * its dq kernel instead, so there dq runs first and dk/dv after it. The work
 * lists come from attn_worklist (cl/attention.cl) built on the device from
 * cu_seqlens_k or cu_seqlens_q, each just before its pass, in the same region
 * of the context's temporary buffer (the chain runs in order); delta follows
 * them.
 */
#include "attention/attention-cl.h"

#include <stdio.h>
#include <string.h>

#if CLVARLEN_HAVE_OPENCL

#define BWD_WG 64
#define BWD_TX 16
#define BWD_BM 32
#define BWD_BN 32
/* Tensor-core kernels (cl/attention-bwd-nv.cl): 4 warps, 64-key dk/dv tiles
 * over 32-row query blocks, single-buffered (on an H100, bf16, 16 x 16384
 * tokens: 4.6 ms, against 5.6 ms for 16-row blocks double-buffered), and
 * 64-row dq tiles over double-buffered 32-key tiles (3.3 ms; 16-key tiles
 * slower); 35 KiB of local memory each, 234-246 registers. */
#define MMA_WARPS 4
#define MMA_BM_KV 32
#define MMA_BN_Q 32

/* CLVARLEN_ATTN_BWD_TUNING="name=N,..." (benchmarks): bnq (the dq kernel's keys
 * per tile, 16 or 32), stage2 (1: the dk/dv kernel's 16-row double-buffered
 * form) and pass (a mask of the passes that run: 1 delta, 2 dk/dv,
 * 4 dq, which with a fused delta includes pass 1; anything but 7 gives wrong
 * gradients, for timing one pass); for the wgmma form (cl/attention-bwd-nv.cl
 * -DCV_WGMMA, the default on Hopper) wgmma (0: mma.sync; 1: wgmma), pair
 * (BWD_PAIR there), vreg (BWD_VREG), qbuf (BWD_QBUF_MAX, clamped to 1 .. 3),
 * fdelta (BWD_DQ_DELTA: delta in the dq kernel, default 1), dqnreg (the dq
 * kernel's register cap on NVIDIA, 0 none; default 128 at D 128), fstage
 * (BWD_FSTAGE: dk/dv's fixed-count staging, default 1); lpt (the work lists'
 * order, below).
 * (A maxreg knob passing -cl-nv-maxrregcount was removed: NVIDIA's driver
 * accepts the option and ignores it, docs/PERFORMANCE.md.) */
static int knob(const char *name, int fallback)
{
    return cv_attn_knob("CLVARLEN_ATTN_BWD_TUNING", name, fallback);
}

/* The kernels of a call: file, names, tile sizes, work-group size and options. */
typedef struct bwd_cfg {
    bool mma, wgmma;
    bool fused_delta; /* the wgmma dq kernel writes delta (BWD_DQ_DELTA); it runs first */
    int key_tile, query_tile, wg;
    char opts[352];
    char dq_opts[384]; /* the dq kernel's program: opts, and a register cap if asked */
} bwd_cfg;

/* The tensor-core kernels need f16/bf16, D = Dv <= 128, no dropout, 16-byte
 * aligned offsets and token strides of whole 16-byte chunks (cp.async), and
 * gradient rows that take element pairs. */
static bool bwd_mma_fits(const cv_bwd_desc *bd, const cv_bwd_mem *m)
{
    const cv_attn_desc *d = &bd->a;
    if (d->dtype == CLVARLEN_DTYPE_F32 || d->head_dim != d->head_dim_v || d->head_dim > 128 ||
        d->drop_p > 0.0f)
        return false;
    const size_t offs = m->f.q_off | m->f.k_off | m->f.v_off | m->do_off | m->dq_off |
                        m->dk_off | m->dv_off;
    if (offs % 16 != 0)
        return false;
    return (d->q_stride | d->k_stride | d->v_stride | bd->do_stride | bd->dq_stride |
            bd->dk_stride | bd->dv_stride) % 8 == 0;
}

/* The portable kernels stage rows KCH at a time, KCH the largest power of two
 * <= 2048 / max(D, Dv) (8 KiB of local memory). */
static void bwd_config(const clvarlen_context *ctx, const cv_bwd_desc *bd, const cv_bwd_mem *m,
                       bool allow_mma, bool wgmma, bwd_cfg *cfg)
{
    const cv_attn_desc *d = &bd->a;
    cfg->mma = allow_mma && cv_attn_mma_device(ctx) && bwd_mma_fits(bd, m);
    cfg->wgmma = cfg->mma && wgmma;
    if (cfg->mma) {
        const bool nv = ctx->device.vendor == CLVARLEN_VENDOR_NVIDIA;
        const bool stage2 = !cfg->wgmma && knob("stage2", 0);
        /* The wgmma form's options (BWD_PAIR, BWD_VREG, BWD_QBUF_MAX of
         * cl/attention-bwd-nv.cl) and their defaults, bf16, 16 x 16384:
         * pair: dk/dv's products paired except at D 96, where one at a time
         * measured 13% faster on an H100 (dk/dv and dq passes: 4.38 against
         * 5.05-5.11 ms; D 128 paired 4.69-4.72 against 4.85, D 64 the same),
         * dq's one at a time (H100, D 128: 2.31 ms against 2.62 paired);
         * qbuf: one buffer of Q and dO (H200, dk/dv alone, D 64: three 2.21
         * ms against 1.96); vreg: V in local memory (in registers: D 64 1.96,
         * the same; D 128 3.14 against 3.00, with two buffers 3.46; D 96
         * 3.52 against 3.38). */
        char pair[112] = "";
        const int nq = knob("qbuf", 1);
        /* fdelta: the dq kernel computes delta (it reads O with 16-byte loads,
         * so O's offset and row stride must be whole 16-byte chunks), which
         * saves the delta pass (H200, bf16 D 128, 16 x 16384, backward: 4.57-
         * 4.59 ms against 4.70-4.74; D 64 and 96 1-2%). */
        cfg->fused_delta = cfg->wgmma && knob("fdelta", 1) && m->f.o_off % 16 == 0 &&
                           d->o_stride % 8 == 0;
        if (cfg->wgmma)
            snprintf(pair, sizeof pair,
                     " -DCV_WGMMA=1 -DBWD_PAIR=%d -DBWD_VREG=%d -DBWD_QBUF_MAX=%d"
                     " -DBWD_DQ_DELTA=%d -DBWD_FSTAGE=%d",
                     knob("pair", d->head_dim == 96 ? 0 : 1) & 3, knob("vreg", 0) ? 1 : 0,
                     nq < 1 ? 1 : nq > 3 ? 3 : nq, cfg->fused_delta ? 1 : 0,
                     knob("fstage", 1) ? 1 : 0);
        cfg->key_tile = 16 * MMA_WARPS;
        cfg->query_tile = 16 * MMA_WARPS;
        cfg->wg = 32 * MMA_WARPS;
        snprintf(cfg->opts, sizeof cfg->opts,
                 "-DCV_DTYPE=%d -DHEAD_DIM=%d -DNWARPS=%d -DBM_KV=%d -DNSTAGE=%d -DBN_Q=%d%s%s%s%s%s",
                 cv_dtype_kernel_code(d->dtype), (int)d->head_dim, MMA_WARPS,
                 stage2 ? 16 : MMA_BM_KV, stage2 ? 2 : 1,
                 !cfg->wgmma && knob("bnq", MMA_BN_Q) == 16 ? 16 : MMA_BN_Q,
                 bd->grad_dtype == CLVARLEN_DTYPE_F32 ? " -DGRAD_F32=1" : "",
                 d->softcap > 0.0f ? " -DBWD_SOFTCAP=1" : "", pair,
                 nv ? (cfg->wgmma ? " -DCV_NV_PTX=1 " CV_SM90A_OPTION : " -DCV_NV_PTX=1") : "",
                 knob("ex2", 1) ? "" : " -DCV_NV_EX2=0");
        /* dqnreg=N: the wgmma dq kernel alone capped at N registers (the PTX
         * patch step's .maxnreg; its own program, since the cap applies to
         * every kernel of one). At D 128 the driver gives it 138, so three
         * work-groups fit an SM; at 128 (no spills) four do (H200, 16 x
         * 16384, the dq pass: 1.63-1.67 ms against 1.70-1.75). */
        const int cap = cfg->wgmma && nv ? knob("dqnreg", d->head_dim == 128 ? 128 : 0) : 0;
        if (cap > 0)
            snprintf(cfg->dq_opts, sizeof cfg->dq_opts, "%s %s%d", cfg->opts,
                     CV_PTX_MAXNREG_OPTION, cap < 16 ? 16 : cap > 255 ? 255 : cap);
        else
            snprintf(cfg->dq_opts, sizeof cfg->dq_opts, "%s", cfg->opts);
        return;
    }
    cfg->fused_delta = false;
    int maxd = d->head_dim > d->head_dim_v ? d->head_dim : d->head_dim_v;
    int kch = (int)cv_pow2_floor(2048 / maxd);
    if (kch > 32)
        kch = 32;
    cfg->key_tile = BWD_BN;
    cfg->query_tile = BWD_BM;
    cfg->wg = BWD_WG;
    snprintf(cfg->opts, sizeof cfg->opts,
             "-DCV_DTYPE=%d -DGRAD_DT=%d -DHEAD_DIM=%d -DHEAD_DIM_V=%d -DBLOCK_M=%d "
             "-DBLOCK_N=%d -DWG_SIZE=%d -DTX=%d -DDCH=16 -DKCH=%d%s%s",
             cv_dtype_kernel_code(d->dtype), cv_dtype_kernel_code(bd->grad_dtype),
             (int)d->head_dim, (int)d->head_dim_v, BWD_BM, BWD_BN, BWD_WG, BWD_TX, kch,
             ctx->device.kind == CLVARLEN_DEVICE_OPENCL_CPU ? " -DCV_NO_UNROLL" : "",
             d->drop_p > 0.0f ? " -DCV_DROPOUT=1" : "");
    snprintf(cfg->dq_opts, sizeof cfg->dq_opts, "%s", cfg->opts);
}

static clvarlen_status run_worklist(cv_chain *c, cl_kernel kernel, cl_mem cu, size_t cu_off,
                                    const cv_attn_desc *d, int64_t total, int block,
                                    int64_t capacity, cl_int order, cl_mem wl)
{
    cl_int n_seqs = (cl_int)d->n_seqs, tot = (cl_int)total, row_mult = 1, bm = block;
    cl_int cap = (cl_int)capacity;
    cl_ulong off = cu_off;
    cv_args a = cv_args_begin(kernel);
    CV_ARG(a, cu);
    CV_ARG(a, off);
    CV_ARG(a, n_seqs);
    CV_ARG(a, tot);
    CV_ARG(a, row_mult);
    CV_ARG(a, bm);
    CV_ARG(a, cap);
    CV_ARG(a, order);
    CV_ARG(a, wl);
    CV_ARG(a, c->flag);
    if (a.err != CL_SUCCESS)
        return cv_cl_check(c->ctx, a.err, "clSetKernelArg(attn_worklist)");
    size_t wg = c->ctx->tuning.scan_wg ? c->ctx->tuning.scan_wg : 64;
    if (wg > CV_ATTN_WORKLIST_MAX_WG)
        wg = CV_ATTN_WORKLIST_MAX_WG;
    return cv_chain_run(c, kernel, "attn_worklist", 1, &wg, &wg);
}

static clvarlen_status run_delta(cv_chain *c, const cv_bwd_desc *bd, const cv_bwd_mem *m,
                                 cl_kernel kernel, cl_mem tmp, size_t delta_off)
{
    const cv_attn_desc *d = &bd->a;
    cl_ulong o_off = m->f.o_off, do_off = m->do_off, dl_off = delta_off;
    cl_long o_stride = d->o_stride, do_stride = bd->do_stride;
    cl_int hq = d->heads_q, tq = (cl_int)d->total_q;
    cv_args a = cv_args_begin(kernel);
    CV_ARG(a, m->f.o);
    CV_ARG(a, o_off);
    CV_ARG(a, o_stride);
    CV_ARG(a, m->dout);
    CV_ARG(a, do_off);
    CV_ARG(a, do_stride);
    CV_ARG(a, hq);
    CV_ARG(a, tq);
    CV_ARG(a, tmp);
    CV_ARG(a, dl_off);
    CV_ARG(a, c->flag);
    if (a.err != CL_SUCCESS)
        return cv_cl_check(c->ctx, a.err, "clSetKernelArg(attn_bwd_delta)");
    /* 8 rows per 256-item work-group (DELTA_* of cl/attention-bwd.cl). */
    const int64_t rows_per_wg = 8;
    size_t local = 256;
    size_t global = (size_t)((d->total_q * d->heads_q + rows_per_wg - 1) / rows_per_wg) * local;
    return cv_chain_run(c, kernel, "attn_bwd_delta", 1, &global, &local);
}

/* BWD_COMMON_ARGS of cl/attention-bwd.cl. */
static cv_args common_args(cl_kernel kernel, const cv_bwd_desc *bd, const cv_bwd_mem *m,
                           cl_mem tmp, size_t delta_off, cl_mem flag)
{
    const cv_attn_desc *d = &bd->a;
    const cv_attn_mem *f = &m->f;
    cl_ulong q_off = f->q_off, k_off = f->k_off, v_off = f->v_off, do_off = m->do_off;
    cl_ulong cu_q_off = f->cu_q_off, cu_k_off = f->cu_k_off, q_pos_off = f->q_pos_off;
    cl_ulong lse_off = f->lse_off, dl_off = delta_off;
    cl_long q_stride = d->q_stride, k_stride = d->k_stride, v_stride = d->v_stride;
    cl_long do_stride = bd->do_stride;
    cl_int hq = d->heads_q, hk = d->heads_kv, tq = (cl_int)d->total_q, tk = (cl_int)d->total_k;
    cl_float scale_log2 = (cl_float)((double)d->scale * 1.4426950408889634);
    cl_float scale = d->scale, softcap = d->softcap;
    cl_int causal = d->causal, wleft = d->window_left, wright = d->window_right;
    cv_args a = cv_args_begin(kernel);
    CV_ARG(a, f->q);
    CV_ARG(a, q_off);
    CV_ARG(a, q_stride);
    CV_ARG(a, f->k);
    CV_ARG(a, k_off);
    CV_ARG(a, k_stride);
    CV_ARG(a, f->v);
    CV_ARG(a, v_off);
    CV_ARG(a, v_stride);
    CV_ARG(a, m->dout);
    CV_ARG(a, do_off);
    CV_ARG(a, do_stride);
    CV_ARG(a, f->cu_q);
    CV_ARG(a, cu_q_off);
    CV_ARG(a, f->cu_k);
    CV_ARG(a, cu_k_off);
    CV_ARG(a, f->q_pos);
    CV_ARG(a, q_pos_off);
    CV_ARG(a, f->lse);
    CV_ARG(a, lse_off);
    CV_ARG(a, tmp);
    CV_ARG(a, dl_off);
    CV_ARG(a, tmp); /* the work list at offset 0 */
    CV_ARG(a, hq);
    CV_ARG(a, hk);
    CV_ARG(a, tq);
    CV_ARG(a, tk);
    CV_ARG(a, scale_log2);
    CV_ARG(a, scale);
    CV_ARG(a, softcap);
    CV_ARG(a, causal);
    CV_ARG(a, wleft);
    CV_ARG(a, wright);
    CV_ARG(a, flag);
    return a;
}

static clvarlen_status run_main(cv_chain *c, const cv_bwd_desc *bd, const cv_bwd_mem *m,
                                cl_kernel kernel, const char *name, bool dq, cl_mem tmp,
                                size_t delta_off, int64_t tiles, const bwd_cfg *cfg)
{
    const cv_attn_desc *d = &bd->a;
    cv_args a = common_args(kernel, bd, m, tmp, delta_off, c->flag);
    cl_ulong o1 = dq ? m->dq_off : m->dk_off, o2 = m->dv_off;
    cl_long s1 = dq ? bd->dq_stride : bd->dk_stride, s2 = bd->dv_stride;
    CV_ARG(a, *(dq ? &m->dq : &m->dk));
    CV_ARG(a, o1);
    CV_ARG(a, s1);
    if (!dq) {
        CV_ARG(a, m->dv);
        CV_ARG(a, o2);
        CV_ARG(a, s2);
    } else if (cfg->wgmma) { /* O and delta's place, for BWD_DQ_DELTA */
        cl_ulong oo = m->f.o_off, dl_off = delta_off;
        cl_long os = d->o_stride;
        CV_ARG(a, m->f.o);
        CV_ARG(a, oo);
        CV_ARG(a, os);
        CV_ARG(a, tmp);
        CV_ARG(a, dl_off);
    }
    if (d->drop_p > 0.0f) /* the portable kernels only (bwd_mma_fits) */
        cv_attn_drop_args(&a, d);
    if (a.err != CL_SUCCESS)
        return cv_cl_check(c->ctx, a.err, "clSetKernelArg(attention backward)");
    size_t local = (size_t)cfg->wg;
    size_t global = (size_t)tiles * (size_t)(dq ? d->heads_q : d->heads_kv) * local;
    return cv_chain_run(c, kernel, name, 1, &global, &local);
}

/* The dq pass: its work list (over cu_seqlens_q), then the kernel. */
static clvarlen_status run_dq(cv_chain *c, const cv_bwd_desc *bd, const cv_bwd_mem *m,
                              cl_kernel wlk, cl_kernel kq, const char *name, cl_mem tmp,
                              size_t delta_off, int64_t q_tiles, int64_t cap, cl_int q_order,
                              const bwd_cfg *cfg)
{
    const cv_attn_desc *d = &bd->a;
    clvarlen_status st = run_worklist(c, wlk, m->f.cu_q, m->f.cu_q_off, d, d->total_q,
                                      cfg->query_tile, cap, q_order, tmp);
    if (st != CLVARLEN_SUCCESS)
        return st;
    return run_main(c, bd, m, kq, name, true, tmp, delta_off, q_tiles, cfg);
}

clvarlen_status cv_attn_cl_backward(cv_chain *c, const char *fn, const cv_bwd_desc *bd,
                                    const cv_bwd_mem *m)
{
    clvarlen_context *ctx = c->ctx;
    const cv_attn_desc *d = &bd->a;
    bwd_cfg cfg, pcfg;
    bool wg = false;
    clvarlen_status st;
    /* The wgmma form runs where the forward's does, once the forward's form
     * passed its check on this device (the same PTX patch step builds both). */
    if (!ctx->attn_bwd_wgmma_refused && cv_attn_bwd_wgmma_wanted(ctx, d) &&
        (st = cv_attn_wgmma_checked(ctx, fn, d, &wg)) != CLVARLEN_SUCCESS)
        return st;
    bwd_config(ctx, bd, m, true, wg, &cfg);
    bwd_config(ctx, bd, m, false, false, &pcfg); /* delta: the portable file in both forms */
    /* Tiles: sum ceil(L_s / B) <= (T + N (B - 1)) / B, over queries and over keys. */
    const int64_t q_tiles = (d->total_q + d->n_seqs * (cfg.query_tile - 1)) / cfg.query_tile;
    const int64_t k_tiles = (d->total_k + d->n_seqs * (cfg.key_tile - 1)) / cfg.key_tile;
    const int64_t cap = q_tiles > k_tiles ? q_tiles : k_tiles;
    const int64_t wl_ints = 2 + 2 * cap + d->n_seqs + 1;
    if (wl_ints > INT32_MAX || cap * d->heads_q > ((int64_t)1 << 40))
        return cv_error(ctx, CLVARLEN_ERROR_OVERFLOW, "%s: %lld tiles are too many", fn,
                        (long long)cap);
    const char *file = cfg.mma ? "attention-bwd-nv.cl" : "attention-bwd.cl";
    const char *n_kv = cfg.mma ? "attn_bwd_dkdv_mma" : "attn_bwd_dkdv";
    const char *n_q = cfg.mma ? "attn_bwd_dq_mma" : "attn_bwd_dq";
    cl_kernel wlk = NULL, kd = NULL, kkv = NULL, kq = NULL;
    if (cfg.wgmma && ((st = cv_get_kernel(ctx, file, cfg.opts, n_kv, &kkv)) != CLVARLEN_SUCCESS ||
                      (st = cv_get_kernel(ctx, file, cfg.dq_opts, n_q, &kq)) != CLVARLEN_SUCCESS)) {
        /* A wgmma program the driver does not build: the mma.sync form
         * answers (the error stands when the form is forced). */
        if (cv_attn_wgmma_forced())
            return st;
        ctx->attn_bwd_wgmma_refused = 1;
        cv_log(ctx, CLVARLEN_LOG_INFO, "%s: the backward's wgmma form did not build (%s); "
               "running mma.sync", fn, clvarlen_last_error(ctx));
        cv_clear_error(ctx);
        bwd_config(ctx, bd, m, true, false, &cfg);
        kkv = kq = NULL;
    }
    /* delta: summed in the order of the portable kernels' dP, or, for the
     * tensor-core kernels, in a fixed tree (DELTA_TREE of cl/attention-bwd.cl) */
    char dopts[sizeof pcfg.opts + 16];
    snprintf(dopts, sizeof dopts, "%s%s", pcfg.opts, cfg.mma ? " -DDELTA_TREE=1" : "");
    if ((st = cv_get_kernel(ctx, "attention.cl", "-DCV_ATTN_AUX", "attn_worklist", &wlk)) !=
            CLVARLEN_SUCCESS ||
        (!cfg.fused_delta &&
         (st = cv_get_kernel(ctx, "attention-bwd.cl", dopts, "attn_bwd_delta", &kd)) !=
             CLVARLEN_SUCCESS) ||
        (!kkv && (st = cv_get_kernel(ctx, file, cfg.opts, n_kv, &kkv)) != CLVARLEN_SUCCESS) ||
        (!kq && (st = cv_get_kernel(ctx, file, cfg.dq_opts, n_q, &kq)) != CLVARLEN_SUCCESS))
        return st;
    const size_t delta_off = ((size_t)wl_ints * 4 + 255) / 256 * 256;
    const size_t delta_bytes = (size_t)d->heads_q * (size_t)d->total_q * 4;
    cl_mem tmp = NULL;
    if ((st = cv_temp(ctx, delta_off + delta_bytes + 4, &tmp)) != CLVARLEN_SUCCESS)
        return st;
    const int passes = knob("pass", 7);
    /* The work lists' order (attn_worklist): lpt, a mask, 1 the sequences
     * longest first, 2 dk/dv's first key tile of a sequence first (the
     * heaviest under causal masking); default 3, which shortens the tail
     * (H100, bf16 D 128, backward: 16 x 16384 4.85 -> 4.79 ms, causal 2.84
     * -> 2.66, 64 x 65536 causal 10.33 -> 9.87). */
    const int lpt = knob("lpt", 3);
    const cl_int q_order = (lpt & 1) ? CV_WL_LONGEST_FIRST : 0;
    const cl_int k_order = q_order | ((lpt & 2) ? CV_WL_FIRST_TILE_FIRST : 0);
    /* With the delta fused into the dq kernel, dq runs first (pass 1 is then
     * part of pass 4). */
    if (cfg.fused_delta && d->total_q > 0 && (passes & 4) &&
        (st = run_dq(c, bd, m, wlk, kq, n_q, tmp, delta_off, q_tiles, cap, q_order, &cfg)) !=
            CLVARLEN_SUCCESS)
        return st;
    if (!cfg.fused_delta && d->total_q > 0 && (passes & 1) &&
        (st = run_delta(c, bd, m, kd, tmp, delta_off)) != CLVARLEN_SUCCESS)
        return st;
    if (d->total_k > 0 && (passes & 2)) {
        if ((st = run_worklist(c, wlk, m->f.cu_k, m->f.cu_k_off, d, d->total_k, cfg.key_tile,
                               cap, k_order, tmp)) != CLVARLEN_SUCCESS ||
            (st = run_main(c, bd, m, kkv, n_kv, false, tmp, delta_off, k_tiles, &cfg)) !=
                CLVARLEN_SUCCESS)
            return st;
    }
    if (!cfg.fused_delta && d->total_q > 0 && (passes & 4) &&
        (st = run_dq(c, bd, m, wlk, kq, n_q, tmp, delta_off, q_tiles, cap, q_order, &cfg)) !=
            CLVARLEN_SUCCESS)
        return st;
    return CLVARLEN_SUCCESS;
}

#endif /* CLVARLEN_HAVE_OPENCL */
