/* Varlen attention on OpenCL: kernel choice and tile sizes, and the launchers
 * of the forward and merge kernels (cl/attention.cl, and cl/attention-nv.cl on
 * NVIDIA tensor cores). Every launch goes through a cv_chain, so the cl_mem
 * and host-memory entry points share one event discipline.
 *
 * The (sequence, query tile) work list is built by a kernel from
 * cu_seqlens_q, so a call never reads anything back before launching the
 * attention kernel; its grid is sized from the host-known totals (an upper
 * bound on the tile count), and surplus work-groups exit at once.
 */
#include "attention/attention-cl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if CLVARLEN_HAVE_OPENCL

typedef struct attn_cfg {
    int mma;           /* the tensor-core kernel of attention-nv.cl */
    int block_m, block_n, wg;
    int row_mult;      /* tile rows per query: the group size when query heads are packed */
    char options[256];
} attn_cfg;

/* Appends an option to cfg->options (printf format). */
__attribute__((format(printf, 2, 3))) static void cfg_add(attn_cfg *cfg, const char *fmt, ...)
{
    const size_t len = strlen(cfg->options);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cfg->options + len, sizeof cfg->options - len, fmt, ap);
    va_end(ap);
}

/* CLVARLEN_ATTENTION_KERNEL=portable|mma|wgmma overrides the automatic choice
 * (for tests and comparisons): "mma" the tensor-core kernel with mma.sync,
 * "wgmma" its wgmma form wherever the shapes allow (on NVIDIA, Hopper only).
 * On a device that is not NVIDIA both run the emulated forms, which check
 * their fragment logic and (wgmma) the local-memory layouts. */
enum { FORCE_NONE = 0, FORCE_PORTABLE = 1, FORCE_MMA = 2, FORCE_WGMMA = 3 };

static int kernel_override(void)
{
    const char *e = getenv("CLVARLEN_ATTENTION_KERNEL");
    if (!e || !*e)
        return FORCE_NONE;
    if (strcmp(e, "portable") == 0)
        return FORCE_PORTABLE;
    if (strcmp(e, "mma") == 0)
        return FORCE_MMA;
    if (strcmp(e, "wgmma") == 0)
        return FORCE_WGMMA;
    return FORCE_NONE;
}

static bool is_nvidia_mma(const clvarlen_context *ctx)
{
    return ctx->device.vendor == CLVARLEN_VENDOR_NVIDIA && ctx->device.cc_major >= 8 &&
           ctx->tuning.nvidia_mma;
}

/* The tensor-core kernel (not dropout's) moves 16-byte rows with cp.async and
 * stores pairs of elements: tensors 16-byte aligned, rows a multiple of 8 elements. */
static bool mma_fits(const cv_attn_desc *d, const cv_attn_mem *m)
{
    if (d->dtype == CLVARLEN_DTYPE_F32 || d->head_dim != d->head_dim_v || d->head_dim > 256 ||
        d->drop_p > 0.0f)
        return false;
    if ((m->q_off | m->k_off | m->v_off | m->o_off) % 16 != 0)
        return false;
    return d->q_stride % 8 == 0 && d->k_stride % 8 == 0 && d->v_stride % 8 == 0 &&
           d->o_stride % 8 == 0;
}

int cv_attn_knob(const char *var, const char *name, int fallback)
{
    const char *e = getenv(var);
    size_t n = strlen(name);
    for (const char *p = e; p && *p;) {
        if (strncmp(p, name, n) == 0 && p[n] == '=')
            return atoi(p + n + 1);
        p = strchr(p, ',');
        p = p ? p + 1 : NULL;
    }
    return fallback;
}

bool cv_attn_mma_device(const clvarlen_context *ctx)
{
    int force = kernel_override();
    return force == FORCE_MMA || force == FORCE_WGMMA || (force == FORCE_NONE && is_nvidia_mma(ctx));
}

/* ------------------------------------------------------------ the wgmma form */

/* Whether the tensor-core forward's online softmax rescales O and l only when
 * a row's maximum grew by more than 8 in base 2 (CV_ATTN_LAZY of
 * cl/attention-nv.cl): up to 1.14x on an H200 above head dim 64, 0.91x at 64
 * (docs/PERFORMANCE.md). CLVARLEN_ATTENTION_TUNING lazy=0 or 1 overrides. */
static bool lazy_rescale(const cv_attn_desc *d)
{
    return cv_attn_knob("CLVARLEN_ATTENTION_TUNING", "lazy", d->head_dim > 64) != 0;
}

/* Whether the wgmma form keeps Q's tile in local memory: S = Q K^T from
 * descriptors only (no Q fragments in registers), 1.16-1.21x with it on an
 * H200 (docs/PERFORMANCE.md, "The attention forward on wgmma, swizzled").
 * CLVARLEN_ATTENTION_TUNING wgqs=0 keeps Q in registers, as D 256 always does
 * (Q does not fit beside K and V there); wgswz=0 (K and V tiles as unswizzled
 * core matrices, for benchmarks) implies it. */
static bool wgmma_qs(const cv_attn_desc *d)
{
    return cv_attn_knob("CLVARLEN_ATTENTION_TUNING", "wgswz", 1) != 0 && d->head_dim != 256 &&
           cv_attn_knob("CLVARLEN_ATTENTION_TUNING", "wgqs", 1) != 0;
}

/* The wgmma form's tiles: *bm query rows, *bn keys. 64 rows are one
 * warpgroup with 64-key tiles (32 at D 256); 128 rows (Q in local memory
 * only) two warpgroups sharing 32-key K and V tiles, so that each byte of K
 * and V read through L2 serves twice the rows (cl/attention-nv.cl): slower on
 * an H200 at every head dim (docs/PERFORMANCE.md), so 64 unless
 * CLVARLEN_ATTENTION_TUNING wgm=128. */
static void wgmma_tile(const cv_attn_desc *d, int *bm, int *bn)
{
    *bm = wgmma_qs(d) && cv_attn_knob("CLVARLEN_ATTENTION_TUNING", "wgm", 64) == 128 ? 128 : 64;
    *bn = d->head_dim == 256 || *bm == 128 ? 32 : 64;
}

/* Whether a forward call takes the wgmma form of the tensor-core kernel: not
 * the decode packing, not paged, head dim 64, 96, 128 or 256 (wgmma_shape); on
 * compute capability 9.x (sm_90a) by default when the sequences average at
 * least 96 queries, from where mma.sync holds Q in registers too (bf16 D 128,
 * H100: 16 x 16384 323 against 212 TFLOP/s; H200: 128 x 8192, 64 queries on
 * average, 72.5 against 73.8; docs/PERFORMANCE.md). CLVARLEN_ATTENTION_TUNING
 * wgmma=0/1 turns it off or on for every length (NVIDIA Hopper only),
 * CLVARLEN_ATTENTION_KERNEL=wgmma forces it anywhere (emulated elsewhere); it
 * runs only after its check passed (wgmma_ready). */
static bool wgmma_shape(const cv_attn_desc *d, const cv_attn_pack *pack)
{
    int bm, bn;
    wgmma_tile(d, &bm, &bn);
    return (!pack || (pack->block_m == bm && pack->block_n == bn)) &&
           d->page_size == 0 &&
           (d->head_dim == 64 || d->head_dim == 96 || d->head_dim == 128 || d->head_dim == 256);
}

/* knob_var: the tuning variable whose wgmma=0/1 turns the form off or on;
 * min_avg: the average queries per sequence from which it is the default. */
static bool wgmma_wanted(const clvarlen_context *ctx, const cv_attn_desc *d, const char *knob_var,
                         int64_t min_avg)
{
    const int force = kernel_override();
    if (force == FORCE_WGMMA)
        return true;
    if (force != FORCE_NONE || !is_nvidia_mma(ctx) || ctx->device.cc_major != 9)
        return false;
    const int knob = cv_attn_knob(knob_var, "wgmma", -1);
    if (knob >= 0)
        return knob != 0;
    return d->n_seqs > 0 && d->total_q / d->n_seqs >= min_avg;
}

/* The wgmma form's state for this call's dtype and head dim: built and checked
 * on first use (once per context); a failure is logged and the mma.sync form
 * runs instead, unless the form was forced (then the error is returned). */
static clvarlen_status wgmma_ready(clvarlen_context *ctx, const char *fn, const cv_attn_desc *d,
                                   const char *options, bool *ok)
{
    int bm, bn;
    wgmma_tile(d, &bm, &bn);
    int *state = &ctx->attn_wgmma[d->dtype == CLVARLEN_DTYPE_F16 ? 0 : 1]
                                 [d->head_dim == 64    ? 0
                                  : d->head_dim == 96  ? 1
                                  : d->head_dim == 128 ? 2
                                                       : 3][bm == 128];
    if (*state == 0) {
        clvarlen_status st = cv_attn_wgmma_check(ctx, d, bm, bn, options);
        if (st == CLVARLEN_SUCCESS) {
            *state = 1;
            cv_log(ctx, CLVARLEN_LOG_INFO, "attention: the wgmma form passed its check [%s]",
                   options);
        } else {
            *state = -1;
            if (kernel_override() == FORCE_WGMMA)
                return st; /* the message says why */
            cv_log(ctx, CLVARLEN_LOG_INFO,
                   "%s: the wgmma form is not used on this device (%s); running mma.sync", fn,
                   clvarlen_last_error(ctx));
            cv_clear_error(ctx);
        }
    }
    if (*state < 0 && kernel_override() == FORCE_WGMMA)
        return cv_error(ctx, CLVARLEN_ERROR_UNSUPPORTED,
                        "%s: CLVARLEN_ATTENTION_KERNEL=wgmma, but the wgmma form failed its "
                        "check on this device earlier",
                        fn);
    *ok = *state > 0;
    return CLVARLEN_SUCCESS;
}

/* The options of the forward's wgmma form (packed with `pack`). */
static void wgmma_options(const clvarlen_context *ctx, const cv_attn_desc *d,
                          const cv_attn_pack *pack, char *options, size_t size)
{
    const bool nv = ctx->device.vendor == CLVARLEN_VENDOR_NVIDIA;
    /* wgswz=0: K and V as unswizzled core matrices (benchmarks) */
    const int swz = cv_attn_knob("CLVARLEN_ATTENTION_TUNING", "wgswz", 1) != 0;
    int bm, bn;
    wgmma_tile(d, &bm, &bn);
    /* pipe=1: the pipelined loop (CV_ATTN_PIPE of cl/attention-nv.cl) */
    const bool pipe = !pack && wgmma_qs(d) && bm == 64 && bn == 64 &&
                      cv_attn_knob("CLVARLEN_ATTENTION_TUNING", "pipe", 0) != 0;
    snprintf(options, size,
             "-DCV_DTYPE=%d -DHEAD_DIM=%d -DBLOCK_M=%d -DBLOCK_N=%d -DCV_WGMMA=1 -DCV_WG_SW=%d"
             "%s%s%s%s%s%s",
             cv_dtype_kernel_code(d->dtype), (int)d->head_dim, bm, bn, swz,
             wgmma_qs(d) ? " -DCV_WG_QS=1" : "",
             pack ? " -DCV_GQA_PACK=1" : "", nv ? " -DCV_NV_PTX=1 " CV_SM90A_OPTION : "",
             cv_attn_knob("CLVARLEN_ATTENTION_TUNING", "ex2", 1) ? "" : " -DCV_NV_EX2=0",
             lazy_rescale(d) ? "" : " -DCV_ATTN_LAZY=0",
             pipe ? " -DCV_ATTN_PIPE=1" : "");
}

bool cv_attn_wgmma_forced(void)
{
    return kernel_override() == FORCE_WGMMA;
}

bool cv_attn_bwd_wgmma_wanted(const clvarlen_context *ctx, const cv_attn_desc *d)
{
    return (d->head_dim == 64 || d->head_dim == 96 || d->head_dim == 128) &&
           wgmma_wanted(ctx, d, "CLVARLEN_ATTN_BWD_TUNING", 0);
}

clvarlen_status cv_attn_wgmma_checked(clvarlen_context *ctx, const char *fn,
                                      const cv_attn_desc *d, bool *ok)
{
    char options[256];
    wgmma_options(ctx, d, NULL, options, sizeof options);
    return wgmma_ready(ctx, fn, d, options, ok);
}

bool cv_attn_use_mma(const clvarlen_context *ctx, const cv_attn_desc *d, const cv_attn_mem *m)
{
    return mma_fits(d, m) && cv_attn_mma_device(ctx);
}

static clvarlen_status mma_cfg(clvarlen_context *ctx, const char *fn, const cv_attn_desc *d,
                               const cv_attn_pack *pack, attn_cfg *cfg)
{
    cfg->mma = 1;
    /* Measured on an H100 (bf16, Hq 32, Hk 8): at D = 128, 64-row tiles
     * with Q in registers (168 registers, 3 work-groups per SM) beat
     * 128-row ones (205 registers, 1 per SM) on long sequences; on short
     * ones (average below 96 tokens) Q kept in local memory with 32-key
     * tiles is 7% faster. At D <= 64, 128-row tiles pay off when the
     * sequences fill them. At D = 256 Q stays in registers at every length:
     * in local memory it would leave room for 16-key tiles of 32 rows. */
    int64_t avg = d->n_seqs > 0 ? d->total_q / d->n_seqs : 0;
    int bm = d->head_dim <= 64 && avg >= 96 ? 128 : 64, bn = 64;
    int q_smem = d->head_dim > 64 && d->head_dim <= 128 && avg < 96;
    if (q_smem)
        bn = 32;
    if (pack) { /* a few packed rows per sequence: one warp, Q in registers */
        bm = pack->block_m;
        bn = pack->block_n;
        q_smem = 0;
    }
    if (wgmma_shape(d, pack) && wgmma_wanted(ctx, d, "CLVARLEN_ATTENTION_TUNING", 96)) {
        /* one warpgroup per 64 rows (wgmma_tile; cl/attention-nv.cl) */
        char options[sizeof cfg->options];
        wgmma_options(ctx, d, pack, options, sizeof options);
        bool ok = false;
        clvarlen_status st = wgmma_ready(ctx, fn, d, options, &ok);
        if (st != CLVARLEN_SUCCESS)
            return st;
        if (ok) {
            int wbm, wbn;
            wgmma_tile(d, &wbm, &wbn);
            cfg->block_m = wbm;
            cfg->block_n = wbn;
            cfg->wg = 2 * wbm;
            if (pack)
                cfg->row_mult = d->heads_q / d->heads_kv;
            memcpy(cfg->options, options, sizeof options);
            return CLVARLEN_SUCCESS;
        }
    }
    /* Local memory: the Q tile and the K and V tiles, rows padded by 8
     * elements; with Q in registers its space is reused for K and V. */
    uint64_t limit = ctx->device.local_mem_bytes ? ctx->device.local_mem_bytes : 49152;
    for (;;) {
        uint64_t row = (uint64_t)(d->head_dim + 8) * 2;
        uint64_t qb = (uint64_t)bm * row, kvb = 2 * (uint64_t)bn * row;
        uint64_t need = (q_smem ? qb + kvb : (qb > kvb ? qb : kvb)) + 64;
        if (need <= limit)
            break;
        if (bn > 16)
            bn /= 2;
        else if (bm > 16)
            bm /= 2;
        else
            return cv_error(ctx, CLVARLEN_ERROR_UNSUPPORTED,
                            "%s: the tensor-core kernel does not fit local memory", fn);
    }
    cfg->block_m = bm;
    cfg->block_n = bn;
    cfg->wg = bm / 16 * 32;
    snprintf(cfg->options, sizeof cfg->options,
             "-DCV_DTYPE=%d -DHEAD_DIM=%d -DBLOCK_M=%d -DBLOCK_N=%d%s%s",
             cv_dtype_kernel_code(d->dtype), (int)d->head_dim, bm, bn,
             q_smem ? " -DQ_SMEM=1" : "",
             ctx->device.vendor == CLVARLEN_VENDOR_NVIDIA ? " -DCV_NV_PTX=1" : "");
    if (pack) {
        cfg_add(cfg, " -DCV_GQA_PACK=1");
        cfg->row_mult = d->heads_q / d->heads_kv;
    }
    if (!cv_attn_knob("CLVARLEN_ATTENTION_TUNING", "ex2", 1)) /* for A/B runs */
        cfg_add(cfg, " -DCV_NV_EX2=0");
    if (!lazy_rescale(d))
        cfg_add(cfg, " -DCV_ATTN_LAZY=0");
    return CLVARLEN_SUCCESS;
}

/* CLVARLEN_ATTENTION_TUNING pwg, pbm, pbn, ptx, pdch, pkch override the
 * portable kernel's work-group size, tiles, threads across keys and staging
 * chunks (for benchmarks): `name`'s value if positive, else `fallback`,
 * rounded down to a power of two. */
static int portable_knob(const char *name, int fallback)
{
    const int v = cv_attn_knob("CLVARLEN_ATTENTION_TUNING", name, 0);
    return (int)cv_pow2_floor(v > 0 ? v : fallback);
}

/* Portable kernel: TX threads across a tile's keys (and output columns),
 * TY = wg / TX across its rows; all three sizes powers of two, key tiles of at
 * least 4 (float4 rows of P). The tiles shrink until local memory fits. */
static clvarlen_status portable_cfg(clvarlen_context *ctx, const char *fn, const cv_attn_desc *d,
                                    attn_cfg *cfg)
{
    int wg = portable_knob("pwg", ctx->tuning.attn_wg ? (int)ctx->tuning.attn_wg : 64);
    int bm = portable_knob("pbm", ctx->tuning.attn_block_m ? (int)ctx->tuning.attn_block_m : 32);
    int bn = portable_knob("pbn", ctx->tuning.attn_block_n ? (int)ctx->tuning.attn_block_n : 32);
    const int wg_max = (int)cv_pow2_floor(
        ctx->device.max_work_group_size ? (int64_t)ctx->device.max_work_group_size : 256);
    if (wg > wg_max)
        wg = wg_max;
    int tx = portable_knob("ptx", 16);
    if (tx > 16) /* the range the tests and the device table use: 64 across keys with
                  * 1024 in a group corrupted the host heap on PoCL (not analysed) */
        tx = 16;
    if (tx > wg)
        tx = wg;
    while (d->head_dim_v % tx != 0) /* TD = head_dim_v / TX output columns per work-item */
        tx /= 2;
    const bool cpu_dev = ctx->device.kind == CLVARLEN_DEVICE_OPENCL_CPU;
    /* GPUs: at most 64 accumulators (TM rows x TD columns) per work-item, so
     * wide heads widen the group (128 at D 256 would spill on NVIDIA) */
    while (!cpu_dev && bm / (wg / tx) * (d->head_dim_v / tx) > 64 && wg * 2 <= wg_max)
        wg *= 2;
    int ty = wg / tx;
    /* Q and K DCH dimensions at a time (a divisor of the head dim), V KCH keys
     * (both whole float4s: at least 4) */
    int dch_def = ctx->tuning.attn_dch ? (int)ctx->tuning.attn_dch : 16;
    /* NVIDIA: wider Q/K chunks while a work-item's accumulators and its
     * prefetched chunk (floats) stay within 80 of its 255 registers (H200 f32:
     * D 64 and 256 at 32 dimensions 0.53x and 0.50x of the FMA rate against
     * 0.50x and 0.47x at 16; D 128 stays at 16, 0.55x against 0.52x at 32) */
    if (ctx->device.vendor == CLVARLEN_VENDOR_NVIDIA && !cpu_dev) {
        const int acc = bm / ty * (d->head_dim_v / tx);
        while (dch_def < 64 && d->head_dim % (2 * dch_def) == 0 &&
               acc + (bm + bn) * 2 * dch_def / wg <= 80)
            dch_def *= 2;
    }
    const int dch_want = portable_knob("pdch", dch_def);
    const int dch = dch_want >= 4 && d->head_dim % dch_want == 0 ? dch_want : 16;
    /* A table's V chunk (attn_kch keys) is sized for head dim 128: narrower
     * heads take more keys, the same floats (H100 f32 D 64: 16 keys 0.46x of
     * the FMA rate, 8 keys 0.42x) */
    int kch_def = ctx->tuning.attn_kch ? (int)ctx->tuning.attn_kch : 16;
    while (ctx->tuning.attn_kch && 2 * kch_def * d->head_dim_v <= 128 * (int)ctx->tuning.attn_kch)
        kch_def *= 2;
    int kch_max = portable_knob("pkch", kch_def);
    if (kch_max < 4)
        kch_max = 4;
    int bn_min = tx < 4 ? 4 : tx;
    if (bn < bn_min)
        bn = bn_min;
    if (bm < ty)
        bm = ty;
    /* Q and K are staged DCH dimensions at a time and V KCH keys at a time, so
     * local memory barely depends on the head dims (and every device runs the
     * configuration the tests run on PoCL). */
    uint64_t limit = ctx->device.local_mem_bytes ? ctx->device.local_mem_bytes : 32768;
    int kch = kch_max;
    for (;;) {
        kch = bn < kch_max ? bn : kch_max;
        /* a Q and a K chunk or (in their place) a V chunk; P; the row reductions */
        const uint64_t qk = 4 * (uint64_t)(bm + bn) * (dch / 4 + 1);
        const uint64_t vch = (uint64_t)kch * d->head_dim_v, stage = qk > vch ? qk : vch;
        uint64_t floats = stage + 4 * (uint64_t)bm * (bn / 4 + 1) + (uint64_t)bm * tx;
        if (floats * 4 + 64 <= limit)
            break;
        if (vch > qk && kch_max > 4)
            kch_max /= 2; /* the V chunk is what does not fit */
        else if (bn >= bm && bn > bn_min)
            bn /= 2;
        else if (bm > ty)
            bm /= 2;
        else if (bn > bn_min)
            bn /= 2;
        else
            return cv_error(ctx, CLVARLEN_ERROR_UNSUPPORTED,
                            "%s: head dims %d/%d need more local memory than the device has "
                            "(%llu bytes)",
                            fn, (int)d->head_dim, (int)d->head_dim_v, (unsigned long long)limit);
    }
    cfg->block_m = bm;
    cfg->block_n = bn;
    cfg->wg = wg;
    snprintf(cfg->options, sizeof cfg->options,
             "-DCV_DTYPE=%d -DHEAD_DIM=%d -DHEAD_DIM_V=%d -DBLOCK_M=%d -DBLOCK_N=%d "
             "-DWG_SIZE=%d -DTX=%d -DDCH=%d -DKCH=%d%s",
             cv_dtype_kernel_code(d->dtype), (int)d->head_dim, (int)d->head_dim_v, bm, bn, wg,
             tx, dch, kch, cpu_dev ? " -DCV_NO_UNROLL" : "");
    const int unroll[2] = {cv_attn_knob("CLVARLEN_ATTENTION_TUNING", "punr", 0),
                           cv_attn_knob("CLVARLEN_ATTENTION_TUNING", "ppvunr", 0)};
    if (ctx->device.vendor == CLVARLEN_VENDOR_NVIDIA) /* the chunk loops fully unrolled */
        cfg_add(cfg, " -DCV_CHUNK_UNROLL=1");
    /* NVIDIA: the row reductions by warp shuffles (whole warps), up to head
     * dim 128 (H100 f32: D 64 +7%, D 128 +1.5%, D 256 -7%); pshfl=0/1 forces */
    if (ctx->device.vendor == CLVARLEN_VENDOR_NVIDIA && wg % 32 == 0 &&
        cv_attn_knob("CLVARLEN_ATTENTION_TUNING", "pshfl", d->head_dim_v <= 128))
        cfg_add(cfg, " -DCV_NV_SHFL=1");
    if (!cv_attn_knob("CLVARLEN_ATTENTION_TUNING", "poff", 1)) /* for A/B runs */
        cfg_add(cfg, " -DCV_PF_OFF=0");
    if (!cv_attn_knob("CLVARLEN_ATTENTION_TUNING", "pfold", 1))
        cfg_add(cfg, " -DCV_ATTN_FOLD=0");
    const bool nv = ctx->device.vendor == CLVARLEN_VENDOR_NVIDIA;
    int nexp = cv_attn_knob("CLVARLEN_ATTENTION_TUNING", "pnexp", nv ? 2 : 0);
    if (nexp > 2 || (nexp == 2 && !nv))
        nexp = 1;
    if (nexp > 0)
        cfg_add(cfg, " -DCV_ATTN_NEXP=1%s", nexp == 2 ? " -DCV_NV_EX2=1" : "");
    if (unroll[0] > 0) /* the chunk loops' unrolling (for benchmarks) */
        cfg_add(cfg, " -DS_UNROLL=%d", unroll[0]);
    if (unroll[1] > 0)
        cfg_add(cfg, " -DPV_UNROLL=%d", unroll[1]);
    return CLVARLEN_SUCCESS;
}

static clvarlen_status choose_cfg(clvarlen_context *ctx, const char *fn, const cv_attn_desc *d,
                                  const cv_attn_mem *m, const cv_attn_pack *pack,
                                  attn_cfg *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->row_mult = 1;
    clvarlen_status st = pack || cv_attn_use_mma(ctx, d, m) ? mma_cfg(ctx, fn, d, pack, cfg)
                                                            : portable_cfg(ctx, fn, d, cfg);
    if (st != CLVARLEN_SUCCESS)
        return st;
    if (d->drop_p > 0.0f)
        cfg_add(cfg, " -DCV_DROPOUT=1");
    /* f32 Q, K and V whose rows start 16-byte aligned: the portable kernel's
     * float4 loads are whole (NVIDIA splits an unaligned vload4 into four) */
    if (!cfg->mma && d->dtype == CLVARLEN_DTYPE_F32 && (m->q_off | m->k_off | m->v_off) % 16 == 0 &&
        (d->q_stride | d->k_stride | d->v_stride) % 4 == 0)
        cfg_add(cfg, " -DCV_ALIGNED4=1");
    if (d->page_size > 0) {
        cfg_add(cfg, " -DCV_PAGED=1");
        if ((d->page_size & (d->page_size - 1)) == 0) { /* shifts for power-of-two pages */
            int shift = 0;
            while ((1 << shift) < d->page_size)
                shift++;
            cfg_add(cfg, " -DCV_PAGE_SHIFT=%d", shift);
        }
    }
    return st;
}

static cl_int worklist_args(cl_kernel kernel, const cv_attn_desc *d, const cv_attn_mem *m,
                            const attn_cfg *cfg, int64_t capacity, cl_mem wl, cl_mem flag)
{
    cl_int n_seqs = (cl_int)d->n_seqs, total_q = (cl_int)d->total_q;
    cl_int bm = cfg->block_m, cap = (cl_int)capacity, row_mult = cfg->row_mult;
    /* Sequences in index order; lpt=1 (CLVARLEN_ATTENTION_TUNING) puts the
     * longest first, which the backward gains from but the forward did not
     * (H100, bf16 D 128: 16 x 16384 1047.0 against 1047.8 us, causal 592.6
     * against 597.1, 128 x 8192 147.8 against 149.9). */
    cl_int order = cv_attn_knob("CLVARLEN_ATTENTION_TUNING", "lpt", 0) ? CV_WL_LONGEST_FIRST : 0;
    cl_ulong cu_q_off = m->cu_q_off;
    cv_args a = cv_args_begin(kernel);
    CV_ARG(a, m->cu_q);
    CV_ARG(a, cu_q_off);
    CV_ARG(a, n_seqs);
    CV_ARG(a, total_q);
    CV_ARG(a, row_mult);
    CV_ARG(a, bm);
    CV_ARG(a, cap);
    CV_ARG(a, order);
    CV_ARG(a, wl);
    CV_ARG(a, flag);
    return a.err;
}

void cv_attn_drop_args(cv_args *a, const cv_attn_desc *d)
{
    cl_uint k0 = (cl_uint)d->drop_seed;
    cl_uint k1 = (cl_uint)(d->drop_seed >> 32) ^ (cl_uint)(d->drop_offset >> 32);
    cl_uint c3 = (cl_uint)d->drop_offset, thr = d->drop_thr;
    cl_float sc = d->drop_scale;
    CV_ARG(*a, k0);
    CV_ARG(*a, k1);
    CV_ARG(*a, c3);
    CV_ARG(*a, thr);
    CV_ARG(*a, sc);
}

static cl_int forward_args(cl_kernel kernel, const cv_attn_desc *d, const cv_attn_mem *m,
                           cl_mem wl, cl_mem flag, const cv_attn_pack *pack, size_t part_off)
{
    cl_ulong q_off = m->q_off, k_off = m->k_off, v_off = m->v_off, q_pos_off = m->q_pos_off;
    cl_ulong cu_q_off = m->cu_q_off, cu_k_off = m->cu_k_off, o_off = m->o_off;
    cl_ulong lse_off = m->lse_off;
    cl_long q_stride = d->q_stride, k_stride = d->k_stride, v_stride = d->v_stride;
    cl_long o_stride = d->o_stride;
    cl_int total_q = (cl_int)d->total_q, total_k = (cl_int)d->total_k;
    cl_int heads_q = d->heads_q, group = d->heads_q / d->heads_kv, causal = d->causal;
    cl_int wleft = d->window_left, wright = d->window_right;
    cl_float scale = d->scale, softcap = d->softcap;
    cl_float scale_log2 = (cl_float)((double)d->scale * 1.4426950408889634);
    cv_args a = cv_args_begin(kernel);
    CV_ARG(a, m->q);
    CV_ARG(a, q_off);
    CV_ARG(a, q_stride);
    CV_ARG(a, m->k);
    CV_ARG(a, k_off);
    CV_ARG(a, k_stride);
    CV_ARG(a, m->v);
    CV_ARG(a, v_off);
    CV_ARG(a, v_stride);
    CV_ARG(a, m->cu_q);
    CV_ARG(a, cu_q_off);
    CV_ARG(a, m->cu_k);
    CV_ARG(a, cu_k_off);
    CV_ARG(a, m->q_pos);
    CV_ARG(a, q_pos_off);
    CV_ARG(a, m->o);
    CV_ARG(a, o_off);
    CV_ARG(a, o_stride);
    CV_ARG(a, m->lse);
    CV_ARG(a, lse_off);
    CV_ARG(a, wl);
    CV_ARG(a, heads_q);
    CV_ARG(a, group);
    CV_ARG(a, total_q);
    CV_ARG(a, total_k);
    CV_ARG(a, scale_log2);
    CV_ARG(a, scale);
    CV_ARG(a, softcap);
    CV_ARG(a, causal);
    CV_ARG(a, wleft);
    CV_ARG(a, wright);
    CV_ARG(a, flag);
    if (d->page_size > 0) { /* CV_PAGED_ARGS of cl/attention.clh */
        cl_ulong pt_off = m->pt_off;
        cl_long pt_stride = d->pt_stride;
        cl_int page_size = d->page_size, num_pages = (cl_int)d->num_pages;
        CV_ARG(a, m->pt);
        CV_ARG(a, pt_off);
        CV_ARG(a, pt_stride);
        CV_ARG(a, page_size);
        CV_ARG(a, num_pages);
    }
    if (d->drop_p > 0.0f) /* CV_DROP_ARGS of cl/attention.clh */
        cv_attn_drop_args(&a, d);
    if (pack) { /* CV_PACK_ARGS of cl/attention-nv.cl: the partials follow the work list */
        cl_ulong poff = part_off;
        cl_int n_splits = pack->splits, one_tile = pack->one_tile ? (cl_int)d->n_seqs : 0;
        CV_ARG(a, wl);
        CV_ARG(a, poff);
        CV_ARG(a, n_splits);
        CV_ARG(a, one_tile);
    }
    return a.err;
}

/* The query tiles of a call (capacity) and its bytes of the temp buffer: the
 * work list, then (split calls) the f32 partials o [splits, Tq, Hq, Dv] and
 * lse [splits, Hq, Tq] from byte part_off. */
typedef struct attn_temp {
    int64_t capacity, wl_ints;
    size_t part_off, bytes;
} attn_temp;

static clvarlen_status plan_temp(clvarlen_context *ctx, const char *fn, const cv_attn_desc *d,
                                 const attn_cfg *cfg, const cv_attn_pack *pack, attn_temp *t)
{
    const int splits = pack ? pack->splits : 1;
    const int64_t units = pack ? d->heads_kv : d->heads_q; /* work-groups per tile */
    /* Tiles: sum ceil(L_s R / BM) <= (Tq R + N (BM - 1)) / BM, R rows per query;
     * one per sequence when each fits a tile. */
    t->capacity = pack && pack->one_tile ? d->n_seqs
                                         : (d->total_q * cfg->row_mult +
                                            d->n_seqs * (cfg->block_m - 1)) /
                                               cfg->block_m;
    t->wl_ints = 2 + 2 * t->capacity + d->n_seqs + 1;
    if (t->wl_ints > INT32_MAX || t->capacity * units * splits > ((int64_t)1 << 40))
        return cv_error(ctx, CLVARLEN_ERROR_OVERFLOW, "%s: %lld query tiles are too many", fn,
                        (long long)t->capacity);
    t->part_off = ((size_t)t->wl_ints * 4 + 255) / 256 * 256;
    const uint64_t part_rows = (uint64_t)d->total_q * (uint64_t)d->heads_q * (uint64_t)splits;
    t->bytes = t->part_off +
               (size_t)(splits > 1 ? part_rows * ((uint64_t)d->head_dim_v + 1) * 4 : 0);
    return CLVARLEN_SUCCESS;
}

/* The wgmma form packs the query heads of a KV head into its tile rows for
 * prefill too (GQA, Hq > Hk): each K/V tile is staged once for the group's
 * heads instead of once per head (H100, 16 x 16384 bf16, with the unswizzled
 * layout of the time: 140.8 against 134.2 TFLOP/s). CLVARLEN_ATTENTION_TUNING
 * wgpack=0 keeps one head per tile.
 * Returns pack (the caller's) or *own. */
static const cv_attn_pack *wgmma_pack(const clvarlen_context *ctx, const cv_attn_desc *d,
                                      const cv_attn_mem *m, const cv_attn_pack *pack,
                                      cv_attn_pack *own)
{
    if (pack || d->heads_q == d->heads_kv || !wgmma_shape(d, NULL) ||
        !wgmma_wanted(ctx, d, "CLVARLEN_ATTENTION_TUNING", 96) || !cv_attn_use_mma(ctx, d, m) ||
        !cv_attn_knob("CLVARLEN_ATTENTION_TUNING", "wgpack", 1))
        return pack;
    int bm, bn;
    wgmma_tile(d, &bm, &bn);
    *own = (cv_attn_pack){.block_m = bm, .block_n = bn, .splits = 1, .one_tile = false};
    return own;
}

clvarlen_status cv_attn_cl_forward_temp(clvarlen_context *ctx, const char *fn,
                                        const cv_attn_desc *d, const cv_attn_mem *m,
                                        const cv_attn_pack *pack, size_t *bytes)
{
    attn_cfg cfg;
    attn_temp t;
    cv_attn_pack own;
    pack = wgmma_pack(ctx, d, m, pack, &own);
    clvarlen_status st = choose_cfg(ctx, fn, d, m, pack, &cfg);
    if (st == CLVARLEN_SUCCESS && (st = plan_temp(ctx, fn, d, &cfg, pack, &t)) == CLVARLEN_SUCCESS)
        *bytes = t.bytes;
    return st;
}

clvarlen_status cv_attn_cl_forward(cv_chain *c, const char *fn, const cv_attn_desc *d,
                                   const cv_attn_mem *m, const cv_attn_pack *pack)
{
    clvarlen_context *ctx = c->ctx;
    attn_cfg cfg;
    attn_temp t;
    cv_attn_pack own;
    pack = wgmma_pack(ctx, d, m, pack, &own);
    clvarlen_status st = choose_cfg(ctx, fn, d, m, pack, &cfg);
    if (st != CLVARLEN_SUCCESS || (st = plan_temp(ctx, fn, d, &cfg, pack, &t)) != CLVARLEN_SUCCESS)
        return st;
    const int splits = pack ? pack->splits : 1;
    const int64_t units = pack ? d->heads_kv : d->heads_q; /* work-groups per tile */
    const bool one_tile = pack && pack->one_tile;
    const int64_t capacity = t.capacity;

    const char *name = cfg.mma ? "attn_fwd_mma" : "attn_fwd";
    cl_kernel build = NULL, attn = NULL;
    if ((st = cv_get_kernel(ctx, "attention.cl", "-DCV_ATTN_AUX", "attn_worklist", &build)) !=
            CLVARLEN_SUCCESS ||
        (st = cv_get_kernel(ctx, cfg.mma ? "attention-nv.cl" : "attention.cl", cfg.options, name,
                            &attn)) != CLVARLEN_SUCCESS)
        return st;

    /* The work list and the partials in the context's temp buffer (no
     * per-call allocation). */
    const size_t part_off = t.part_off;
    cl_mem wl = NULL;
    if ((st = cv_temp(ctx, t.bytes, &wl)) != CLVARLEN_SUCCESS)
        return st;

    cl_int err = CL_SUCCESS;
    if (!one_tile) {
        if ((err = worklist_args(build, d, m, &cfg, capacity, wl, c->flag)) != CL_SUCCESS)
            return cv_cl_check(ctx, err, "clSetKernelArg(attn_worklist)");
        size_t bwg = ctx->tuning.scan_wg ? ctx->tuning.scan_wg : 64;
        if (bwg > CV_ATTN_WORKLIST_MAX_WG)
            bwg = CV_ATTN_WORKLIST_MAX_WG;
        if ((st = cv_chain_run(c, build, "attn_worklist", 1, &bwg, &bwg)) != CLVARLEN_SUCCESS)
            return st;
    }

    if ((err = forward_args(attn, d, m, wl, c->flag, pack, part_off)) != CL_SUCCESS)
        return cv_cl_check(ctx, err, "clSetKernelArg(attention)");
    size_t local = (size_t)cfg.wg;
    size_t global = (size_t)capacity * (size_t)units * (size_t)splits * local;
    if ((st = cv_chain_run(c, attn, name, 1, &global, &local)) != CLVARLEN_SUCCESS || splits == 1)
        return st;
    return cv_attn_cl_merge_splits(c, d, m, wl, part_off, splits);
}

clvarlen_status cv_attn_cl_merge_splits(cv_chain *c, const cv_attn_desc *d, const cv_attn_mem *m,
                                        cl_mem part, size_t part_off, int splits)
{
    const uint64_t rows = (uint64_t)d->total_q * (uint64_t)d->heads_q * (uint64_t)splits;
    const cv_attn_merge_mem mm = {
        .o_a = part, .o_a_off = part_off,
        .lse_a = part, .lse_a_off = part_off + (size_t)(rows * (uint64_t)d->head_dim_v * 4),
        .o = m->o, .o_off = m->o_off,
        .lse = m->lse, .lse_off = m->lse_off,
    };
    return cv_attn_cl_merge(c, d->dtype, CLVARLEN_DTYPE_F32, d->o_stride, splits, d->total_q,
                            d->heads_q, d->head_dim_v, &mm);
}

/* A device buffer the host path creates: filled from host when host != NULL,
 * skipped unless want. */
typedef struct attn_upload {
    cl_mem *mem;
    size_t bytes;
    const void *host;
    bool want;
} attn_upload;

static clvarlen_status upload_all(clvarlen_context *ctx, const attn_upload *up, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (!up[i].want)
            continue;
        clvarlen_status st = cv_buffer(ctx, up[i].bytes, up[i].host, up[i].mem);
        if (st != CLVARLEN_SUCCESS)
            return st;
    }
    return CLVARLEN_SUCCESS;
}

static void release_all(const attn_upload *up, size_t n)
{
    for (size_t i = 0; i < n; i++)
        cv_release(up[i].mem);
}

clvarlen_status cv_attn_cl_forward_host(clvarlen_context *ctx, const char *fn,
                                        const cv_attn_desc *d, const void *q, const void *k,
                                        const void *v, const int32_t *cu_q, const int32_t *cu_k,
                                        const int32_t *q_pos, const int32_t *page_table, void *o,
                                        float *lse)
{
    cv_attn_mem m = {0};
    const bool paged = d->page_size > 0;
    const size_t es = cv_dtype_size(d->dtype);
    const int64_t o_row = (int64_t)d->heads_q * d->head_dim_v;
    const size_t o_stride_b = (size_t)d->o_stride * es;
    const size_t lse_bytes = (size_t)d->heads_q * (size_t)d->total_q * sizeof(float);
    const size_t cu_bytes = (size_t)(d->n_seqs + 1) * sizeof(int32_t);
    /* Paged: the whole caches, cache_seqlens [n] and the page table's used columns. */
    const int64_t kv_rows = paged ? d->num_pages * d->page_size : d->total_k;
    const size_t pt_bytes =
        paged ? ((size_t)(d->n_seqs - 1) * (size_t)d->pt_stride + (size_t)d->max_pages) * 4 : 0;
    const attn_upload up[] = {
        {&m.q, cv_span_bytes(d->dtype, (int64_t)d->heads_q * d->head_dim, d->total_q,
                             d->q_stride), q, true},
        {&m.k, cv_span_bytes(d->dtype, (int64_t)d->heads_kv * d->head_dim, kv_rows,
                             d->k_stride), k, true},
        {&m.v, cv_span_bytes(d->dtype, (int64_t)d->heads_kv * d->head_dim_v, kv_rows,
                             d->v_stride), v, true},
        {&m.cu_q, cu_bytes, cu_q, true},
        {&m.cu_k, paged ? cu_bytes - 4 : cu_bytes, cu_k, true},
        {&m.q_pos, (size_t)d->total_q * 4, q_pos, q_pos != NULL},
        {&m.pt, pt_bytes, page_table, paged},
        {&m.o, cv_span_bytes(d->dtype, o_row, d->total_q, d->o_stride), NULL, true},
        {&m.lse, lse_bytes, NULL, lse != NULL},
    };
    const size_t n_up = sizeof up / sizeof up[0];
    float *lse_tmp = NULL;
    cv_chain c;
    clvarlen_status st = cv_chain_begin(&c, ctx, 0, NULL, false, false);
    if (st != CLVARLEN_SUCCESS)
        goto out;
    if ((st = upload_all(ctx, up, n_up)) != CLVARLEN_SUCCESS)
        goto out;
    if (lse && !(lse_tmp = malloc(lse_bytes ? lse_bytes : 1))) {
        st = cv_error(ctx, CLVARLEN_ERROR_OUT_OF_MEMORY, "%s: out of memory", fn);
        goto out;
    }
    if ((st = paged ? cv_paged_cl_forward(&c, fn, d, &m)
                    : cv_attn_cl_forward(&c, fn, d, &m, NULL)) != CLVARLEN_SUCCESS)
        goto out;
    /* lse goes through a temporary so that a failed read leaves the outputs untouched. */
    if (lse && (st = cv_chain_read(&c, m.lse, 0, lse_bytes, lse_tmp)) != CLVARLEN_SUCCESS)
        goto out;
    /* Only row bytes come back: a strided o keeps the caller's bytes between rows. */
    if ((st = cv_chain_read_rows(&c, m.o, d->total_q, (size_t)o_row * es, o_stride_b, o,
                                 o_stride_b)) != CLVARLEN_SUCCESS)
        goto out;
    if (lse)
        memcpy(lse, lse_tmp, lse_bytes);
out:
    st = cv_chain_end(&c, fn, st, NULL);
    free(lse_tmp);
    release_all(up, n_up);
    return st;
}

clvarlen_status cv_attn_cl_merge(cv_chain *c, clvarlen_dtype dtype, clvarlen_dtype part_dtype,
                                 int64_t o_tok_stride, int64_t n_parts, int64_t tokens,
                                 int32_t heads, int32_t dv, const cv_attn_merge_mem *m)
{
    clvarlen_context *ctx = c->ctx;
    cl_kernel kernel = NULL;
    clvarlen_status st = cv_get_kernel(ctx, "attention.cl", "-DCV_ATTN_AUX", "attn_merge", &kernel);
    if (st != CLVARLEN_SUCCESS)
        return st;
    cl_long np = n_parts, tok = tokens, o_tok = o_tok_stride;
    cl_int h = heads, dvi = dv, dt = cv_dtype_kernel_code(dtype);
    cl_int part_dt = cv_dtype_kernel_code(part_dtype);
    cl_long part_stride = tokens * (int64_t)heads * dv, lse_part_stride = tokens * (int64_t)heads;
    cl_ulong o_a_off = m->o_a_off, o_b_off = m->o_b_off, lse_a_off = m->lse_a_off;
    cl_ulong lse_b_off = m->lse_b_off, o_off = m->o_off, lse_off = m->lse_off;
    cv_args a = cv_args_begin(kernel);
    CV_ARG(a, np);
    CV_ARG(a, tok);
    CV_ARG(a, h);
    CV_ARG(a, dvi);
    CV_ARG(a, dt);
    CV_ARG(a, part_dt);
    CV_ARG(a, o_tok);
    CV_ARG(a, m->o_a);
    CV_ARG(a, o_a_off);
    CV_ARG(a, m->o_b);
    CV_ARG(a, o_b_off);
    CV_ARG(a, part_stride);
    CV_ARG(a, m->lse_a);
    CV_ARG(a, lse_a_off);
    CV_ARG(a, m->lse_b);
    CV_ARG(a, lse_b_off);
    CV_ARG(a, lse_part_stride);
    CV_ARG(a, m->o);
    CV_ARG(a, o_off);
    CV_ARG(a, m->lse);
    CV_ARG(a, lse_off);
    CV_ARG(a, c->flag);
    if (a.err != CL_SUCCESS)
        return cv_cl_check(ctx, a.err, "clSetKernelArg(attn_merge)");
    /* CV_ATTN_MERGE_LANES work-items per (token, head) row (cl/attention.cl). */
    const int64_t rows_per_wg = CV_ATTN_MERGE_WG / CV_ATTN_MERGE_LANES;
    size_t local = CV_ATTN_MERGE_WG;
    size_t global = (size_t)((tokens * heads + rows_per_wg - 1) / rows_per_wg) * local;
    return cv_chain_run(c, kernel, "attn_merge", 1, &global, &local);
}

clvarlen_status cv_attn_cl_merge_host(clvarlen_context *ctx, const char *fn, clvarlen_dtype dtype,
                                      int64_t n_parts, int64_t tokens, int32_t heads, int32_t dv,
                                      const void *o_a, const float *lse_a, const void *o_b,
                                      const float *lse_b, void *o, float *lse)
{
    cv_attn_merge_mem m = {0};
    const size_t part_bytes = (size_t)tokens * (size_t)heads * (size_t)dv * cv_dtype_size(dtype);
    const size_t lse_part = (size_t)tokens * (size_t)heads * sizeof(float);
    const size_t parts_a = o_b ? 1 : (size_t)n_parts;
    const attn_upload up[] = {
        {&m.o_a, part_bytes * parts_a, o_a, true},
        {&m.lse_a, lse_part * parts_a, lse_a, true},
        {&m.o_b, part_bytes, o_b, o_b != NULL},
        {&m.lse_b, lse_part, lse_b, o_b != NULL},
        {&m.o, part_bytes, NULL, true},
        {&m.lse, lse_part, NULL, lse != NULL},
    };
    const size_t n_up = sizeof up / sizeof up[0];
    float *lse_tmp = NULL;
    cv_chain c;
    clvarlen_status st = cv_chain_begin(&c, ctx, 0, NULL, false, false);
    if (st != CLVARLEN_SUCCESS)
        goto out;
    if ((st = upload_all(ctx, up, n_up)) != CLVARLEN_SUCCESS)
        goto out;
    if (lse && !(lse_tmp = malloc(lse_part ? lse_part : 1))) {
        st = cv_error(ctx, CLVARLEN_ERROR_OUT_OF_MEMORY, "%s: out of memory", fn);
        goto out;
    }
    if ((st = cv_attn_cl_merge(&c, dtype, dtype, (int64_t)heads * dv, n_parts, tokens, heads, dv,
                               &m)) != CLVARLEN_SUCCESS)
        goto out;
    if (lse && (st = cv_chain_read(&c, m.lse, 0, lse_part, lse_tmp)) != CLVARLEN_SUCCESS)
        goto out;
    if ((st = cv_chain_read(&c, m.o, 0, part_bytes, o)) != CLVARLEN_SUCCESS)
        goto out;
    if (lse)
        memcpy(lse, lse_tmp, lse_part);
out:
    st = cv_chain_end(&c, fn, st, NULL);
    free(lse_tmp);
    release_all(up, n_up);
    return st;
}

#endif /* CLVARLEN_HAVE_OPENCL */
