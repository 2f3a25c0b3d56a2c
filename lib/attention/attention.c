/* Varlen attention (SPEC 1): validation, dispatch to the CPU fallback or the
 * OpenCL kernels (cl/attention.cl, and cl/attention-nv.cl on NVIDIA tensor
 * cores), and the merge of partial results.
 *
 * On a device, the (sequence, query tile) work list is built by a kernel from
 * cu_seqlens_q, so a call never reads anything back before launching the
 * attention kernel; its grid is sized from the host-known totals
 * (an upper bound on the tile count), and surplus work-groups exit at once.
 */
#include "runtime/runtime.h"

#include "cpu/attention.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void clvarlen_attention_params_init(clvarlen_attention_params *p)
{
    if (!p)
        return;
    memset(p, 0, sizeof *p);
    p->struct_size = (uint32_t)sizeof *p;
    p->dtype = CLVARLEN_DTYPE_F32;
    p->window_left = -1;
    p->window_right = -1;
}

/* ------------------------------------------------------------ validation */

static clvarlen_status check_act_dtype(clvarlen_context *ctx, const char *fn, clvarlen_dtype dt)
{
    if (cv_dtype_size(dt) == 0)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: unknown dtype %d", fn, (int)dt);
    if (!cv_is_float_act(dt))
        return cv_error(ctx, CLVARLEN_ERROR_UNSUPPORTED,
                        "%s: dtype %s is not supported (f32, f16 or bf16)", fn,
                        clvarlen_dtype_name(dt));
    return CLVARLEN_SUCCESS;
}

static clvarlen_status check_head_dim(clvarlen_context *ctx, const char *fn, const char *what,
                                      int32_t dim)
{
    if (dim <= 0)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: %s must be positive, got %d",
                        fn, what, (int)dim);
    if (dim % 16 != 0 || dim > 256)
        return cv_error(ctx, CLVARLEN_ERROR_UNSUPPORTED,
                        "%s: %s %d is not supported (a multiple of 16 up to 256)", fn, what,
                        (int)dim);
    return CLVARLEN_SUCCESS;
}

/* Shapes and options, common to both entry points; fills *d. */
static clvarlen_status validate_params(clvarlen_context *ctx, const char *fn,
                                       const clvarlen_attention_params *p, cv_attn_desc *d)
{
    clvarlen_status st;
    if (!p)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: params is NULL", fn);
    if (p->struct_size < sizeof *p)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: params->struct_size is %u: initialise params with "
                        "clvarlen_attention_params_init",
                        fn, (unsigned)p->struct_size);
    if ((st = check_act_dtype(ctx, fn, p->dtype)) != CLVARLEN_SUCCESS)
        return st;
    if (p->n_seqs < 0 || p->total_q < 0 || p->total_k < 0)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: negative size (n_seqs %lld, total_q %lld, total_k %lld)", fn,
                        (long long)p->n_seqs, (long long)p->total_q, (long long)p->total_k);
    /* cu_seqlens are int32, and kernels index sequences with int. */
    if (p->n_seqs >= INT32_MAX || p->total_q > INT32_MAX || p->total_k > INT32_MAX)
        return cv_error(ctx, CLVARLEN_ERROR_OVERFLOW,
                        "%s: n_seqs, total_q and total_k must fit int32 cu_seqlens", fn);
    if (p->heads_q <= 0 || p->heads_kv <= 0)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: heads_q (%d) and heads_kv (%d) must be positive", fn,
                        (int)p->heads_q, (int)p->heads_kv);
    if (p->heads_q % p->heads_kv != 0)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: heads_q (%d) is not a multiple of heads_kv (%d)", fn,
                        (int)p->heads_q, (int)p->heads_kv);
    if ((st = check_head_dim(ctx, fn, "head_dim", p->head_dim)) != CLVARLEN_SUCCESS)
        return st;
    int32_t dv = p->head_dim_v ? p->head_dim_v : p->head_dim;
    if ((st = check_head_dim(ctx, fn, "head_dim_v", dv)) != CLVARLEN_SUCCESS)
        return st;
    if (p->max_seqlen_q < 0 || p->max_seqlen_k < 0)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: max_seqlen_q (%d) and max_seqlen_k (%d) must not be negative", fn,
                        (int)p->max_seqlen_q, (int)p->max_seqlen_k);
    if (!isfinite(p->scale))
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: scale is not finite", fn);
    if (!isfinite(p->softcap) || p->softcap < 0.0f)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: softcap must be finite and >= 0 (0 = off), got %g", fn,
                        (double)p->softcap);
    if (p->window_left < -1 || p->window_right < -1)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: window (%d, %d): each side is -1 (unbounded) or >= 0", fn,
                        (int)p->window_left, (int)p->window_right);

    memset(d, 0, sizeof *d);
    d->dtype = p->dtype;
    d->n_seqs = p->n_seqs;
    d->total_q = p->total_q;
    d->total_k = p->total_k;
    d->heads_q = p->heads_q;
    d->heads_kv = p->heads_kv;
    d->head_dim = p->head_dim;
    d->head_dim_v = dv;
    if ((st = cv_check_rows(ctx, fn, "q", p->dtype, (int64_t)p->heads_q * p->head_dim,
                            p->total_q, p->q_stride, &d->q_stride)) != CLVARLEN_SUCCESS ||
        (st = cv_check_rows(ctx, fn, "k", p->dtype, (int64_t)p->heads_kv * p->head_dim,
                            p->total_k, p->k_stride, &d->k_stride)) != CLVARLEN_SUCCESS ||
        (st = cv_check_rows(ctx, fn, "v", p->dtype, (int64_t)p->heads_kv * dv, p->total_k,
                            p->v_stride, &d->v_stride)) != CLVARLEN_SUCCESS ||
        (st = cv_check_rows(ctx, fn, "o", p->dtype, (int64_t)p->heads_q * dv, p->total_q,
                            p->o_stride, &d->o_stride)) != CLVARLEN_SUCCESS)
        return st;
    /* lse [Hq, Tq] f32 */
    if (p->total_q > 0 && (int64_t)p->heads_q > INT64_MAX / 4 / p->total_q)
        return cv_error(ctx, CLVARLEN_ERROR_OVERFLOW, "%s: lse spans more than 2^63 bytes", fn);
    d->max_seqlen_q = p->max_seqlen_q;
    d->max_seqlen_k = p->max_seqlen_k;
    d->scale = p->scale != 0.0f ? p->scale : 1.0f / sqrtf((float)p->head_dim);
    d->causal = p->causal != 0;
    d->window_left = p->window_left;
    d->window_right = p->window_right;
    d->softcap = p->softcap;
    return CLVARLEN_SUCCESS;
}

static clvarlen_status check_max_seqlen(clvarlen_context *ctx, const char *fn, const char *what,
                                        const int32_t *cu, int64_t n, int32_t bound)
{
    if (bound <= 0)
        return CLVARLEN_SUCCESS;
    for (int64_t s = 0; s < n; s++) {
        if (cu[s + 1] - cu[s] > bound)
            return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                            "%s: sequence %lld has %d tokens, more than %s = %d", fn,
                            (long long)s, (int)(cu[s + 1] - cu[s]), what, (int)bound);
    }
    return CLVARLEN_SUCCESS;
}

/* Merge shapes; *elems gets tokens * heads * dv. */
static clvarlen_status validate_merge(clvarlen_context *ctx, const char *fn, clvarlen_dtype dtype,
                                      int64_t n_parts, int64_t tokens, int32_t heads,
                                      int32_t dv, int64_t *elems)
{
    clvarlen_status st = check_act_dtype(ctx, fn, dtype);
    if (st != CLVARLEN_SUCCESS)
        return st;
    if (n_parts < 0 || tokens < 0 || heads <= 0 || dv <= 0)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: n_parts %lld and tokens %lld must be >= 0, heads %d and head_dim_v "
                        "%d positive",
                        fn, (long long)n_parts, (long long)tokens, (int)heads, (int)dv);
    int64_t row = (int64_t)heads * dv;
    if (tokens > 0 && row > INT64_MAX / 8 / tokens)
        return cv_error(ctx, CLVARLEN_ERROR_OVERFLOW, "%s: o spans more than 2^63 bytes", fn);
    int64_t e = tokens * row;
    if (n_parts > 0 && e > 0 && e > INT64_MAX / 8 / n_parts)
        return cv_error(ctx, CLVARLEN_ERROR_OVERFLOW, "%s: o_parts spans more than 2^63 bytes",
                        fn);
    *elems = e;
    return CLVARLEN_SUCCESS;
}

/* ------------------------------------------------------------ OpenCL */

#if CLVARLEN_HAVE_OPENCL

typedef struct attn_mem {
    cl_mem q, k, v, cu_q, cu_k, q_pos, o, lse;
    size_t q_off, k_off, v_off, cu_q_off, cu_k_off, q_pos_off, o_off, lse_off;
} attn_mem;

typedef struct attn_cfg {
    int mma;           /* the tensor-core kernel of attention-nv.cl */
    int block_m, block_n, wg;
    char options[256];
} attn_cfg;

/* CLVARLEN_ATTENTION_KERNEL=portable|mma overrides the automatic choice (for
 * tests and comparisons); "mma" on a device that is not NVIDIA runs the
 * tensor-core kernel's emulated form, which checks its fragment logic. */
static int kernel_override(void)
{
    const char *e = getenv("CLVARLEN_ATTENTION_KERNEL");
    if (!e || !*e)
        return 0;
    if (strcmp(e, "portable") == 0)
        return 1;
    if (strcmp(e, "mma") == 0)
        return 2;
    return 0;
}

static int dtype_code(clvarlen_dtype dt)
{
    return dt == CLVARLEN_DTYPE_F16 ? 1 : dt == CLVARLEN_DTYPE_BF16 ? 2 : 0;
}

static bool is_nvidia_mma(const clvarlen_context *ctx)
{
    return ctx->device.vendor == CLVARLEN_VENDOR_NVIDIA && ctx->device.cc_major >= 8 &&
           ctx->tuning.nvidia_mma;
}

/* The tensor-core kernel moves 16-byte rows with cp.async and stores pairs of
 * elements: tensors must be 16-byte aligned, rows a multiple of 8 elements. */
static bool mma_fits(const cv_attn_desc *d, const attn_mem *m)
{
    if (d->dtype == CLVARLEN_DTYPE_F32 || d->head_dim != d->head_dim_v || d->head_dim > 128)
        return false;
    if ((m->q_off | m->k_off | m->v_off | m->o_off) % 16 != 0)
        return false;
    return d->q_stride % 8 == 0 && d->k_stride % 8 == 0 && d->v_stride % 8 == 0 &&
           d->o_stride % 8 == 0;
}

static clvarlen_status choose_cfg(clvarlen_context *ctx, const char *fn, const cv_attn_desc *d,
                                  const attn_mem *m, attn_cfg *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    int force = kernel_override();
    bool nv = is_nvidia_mma(ctx);
    if (mma_fits(d, m) && (force == 2 || (force == 0 && nv))) {
        cfg->mma = 1;
        /* Measured on an H100 (bf16, Hq 32, Hk 8): at D = 128, 64-row tiles
         * with Q in registers (168 registers, 3 work-groups per SM) beat
         * 128-row ones (205 registers, 1 per SM) on long sequences; on short
         * ones (average below 96 tokens) Q kept in local memory with 32-key
         * tiles is 7% faster. At D <= 64, 128-row tiles pay off when the
         * sequences fill them. */
        int64_t avg = d->n_seqs > 0 ? d->total_q / d->n_seqs : 0;
        int bm = d->head_dim <= 64 && avg >= 96 ? 128 : 64, bn = 64;
        int q_smem = d->head_dim > 64 && avg < 96;
        if (q_smem)
            bn = 32;
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
                 dtype_code(d->dtype), (int)d->head_dim, bm, bn, q_smem ? " -DQ_SMEM=1" : "",
                 ctx->device.vendor == CLVARLEN_VENDOR_NVIDIA ? " -DCV_NV_PTX=1" : "");
        return CLVARLEN_SUCCESS;
    }

    /* Portable kernel: TX threads across a tile's keys (and output columns),
     * TY = wg / TX across its rows; all three sizes powers of two, key tiles
     * of at least 4 (float4 rows of P). Shrink the tiles until local memory
     * fits. */
    int wg = (int)cv_pow2_floor(ctx->tuning.attn_wg ? (int)ctx->tuning.attn_wg : 64);
    int bm = (int)cv_pow2_floor(ctx->tuning.attn_block_m ? (int)ctx->tuning.attn_block_m : 32);
    int bn = (int)cv_pow2_floor(ctx->tuning.attn_block_n ? (int)ctx->tuning.attn_block_n : 32);
    int tx = wg < 16 ? wg : 16;
    int ty = wg / tx;
    int bn_min = tx < 4 ? 4 : tx;
    if (bn < bn_min)
        bn = bn_min;
    if (bm < ty)
        bm = ty;
    /* Q and K are staged 16 dimensions at a time and V 16 keys at a time, so
     * local memory barely depends on the head dims (and every device runs the
     * configuration the tests run on PoCL). */
    bool cpu_dev = ctx->device.kind == CLVARLEN_DEVICE_OPENCL_CPU;
    uint64_t limit = ctx->device.local_mem_bytes ? ctx->device.local_mem_bytes : 32768;
    const int dch = 16;
    int kch = 16;
    for (;;) {
        kch = bn < 16 ? bn : 16;
        uint64_t floats = 4 * ((uint64_t)bm * (dch / 4 + 1) + (uint64_t)bn * (dch / 4 + 1) +
                               (uint64_t)bm * (bn / 4 + 1)) +
                          (uint64_t)kch * d->head_dim_v + (uint64_t)bm * tx;
        if (floats * 4 + 64 <= limit)
            break;
        if (bn >= bm && bn > bn_min)
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
             dtype_code(d->dtype), (int)d->head_dim, (int)d->head_dim_v, bm, bn, wg, tx, dch,
             kch, cpu_dev ? " -DCV_NO_UNROLL" : "");
    return CLVARLEN_SUCCESS;
}

/* Builds the work list and runs the attention kernel after wait_list; the
 * last kernel's event goes to *event (may be NULL). `flag` (may be NULL) is
 * the device-check word: kernels write nothing when it is set. */
static clvarlen_status attn_enqueue(clvarlen_context *ctx, const char *fn, const cv_attn_desc *d,
                                    const attn_mem *m, cl_mem flag, cl_uint num_events,
                                    const cl_event *wait_list, cl_event *event)
{
    attn_cfg cfg;
    clvarlen_status st = choose_cfg(ctx, fn, d, m, &cfg);
    if (st != CLVARLEN_SUCCESS)
        return st;

    /* Tiles: sum ceil(L_s / BM) <= (Tq + N (BM - 1)) / BM. */
    int64_t capacity = (d->total_q + d->n_seqs * (cfg.block_m - 1)) / cfg.block_m;
    int64_t wl_ints = 2 + 2 * capacity + d->n_seqs + 1;
    if (wl_ints > INT32_MAX || capacity * d->heads_q > ((int64_t)1 << 40))
        return cv_error(ctx, CLVARLEN_ERROR_OVERFLOW, "%s: %lld query tiles are too many", fn,
                        (long long)capacity);

    cl_kernel build = NULL, attn = NULL;
    if ((st = cv_get_kernel(ctx, "attention.cl", "-DCV_ATTN_AUX", "attn_worklist", &build)) !=
            CLVARLEN_SUCCESS ||
        (st = cv_get_kernel(ctx, cfg.mma ? "attention-nv.cl" : "attention.cl", cfg.options,
                            cfg.mma ? "attn_fwd_mma" : "attn_fwd", &attn)) != CLVARLEN_SUCCESS)
        return st;

    /* The work list lives in the context's temp buffer (no per-call allocation). */
    cl_mem wl = NULL;
    if ((st = cv_temp(ctx, (size_t)wl_ints * 4, &wl)) != CLVARLEN_SUCCESS)
        return st;

    cl_int n_seqs = (cl_int)d->n_seqs, total_q = (cl_int)d->total_q;
    cl_int total_k = (cl_int)d->total_k, block_m = cfg.block_m, cap = (cl_int)capacity;
    cl_ulong cu_q_off = m->cu_q_off, cu_k_off = m->cu_k_off;
    cv_args a = cv_args_begin(build);
    CV_ARG(a, m->cu_q);
    CV_ARG(a, cu_q_off);
    CV_ARG(a, n_seqs);
    CV_ARG(a, total_q);
    CV_ARG(a, block_m);
    CV_ARG(a, cap);
    CV_ARG(a, wl);
    CV_ARG(a, flag);
    if (a.err != CL_SUCCESS)
        return cv_cl_check(ctx, a.err, "clSetKernelArg(attn_worklist)");
    size_t bwg = ctx->tuning.scan_wg ? ctx->tuning.scan_wg : 64;
    if (bwg > 256)
        bwg = 256;
    cl_event built = NULL;
    st = cv_enqueue(ctx, build, "attn_worklist", 1, &bwg, &bwg, num_events, wait_list, &built);
    if (st != CLVARLEN_SUCCESS)
        return st;

    cl_ulong q_off = m->q_off, k_off = m->k_off, v_off = m->v_off, q_pos_off = m->q_pos_off;
    cl_ulong o_off = m->o_off, lse_off = m->lse_off;
    cl_long q_stride = d->q_stride, k_stride = d->k_stride, v_stride = d->v_stride;
    cl_long o_stride = d->o_stride;
    cl_int heads_q = d->heads_q, group = d->heads_q / d->heads_kv, causal = d->causal;
    cl_int wleft = d->window_left, wright = d->window_right;
    cl_float scale = d->scale, softcap = d->softcap;
    cl_float scale_log2 = (cl_float)((double)d->scale * 1.4426950408889634);
    a = cv_args_begin(attn);
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
    if (a.err != CL_SUCCESS) {
        clReleaseEvent(built);
        return cv_cl_check(ctx, a.err, "clSetKernelArg(attention)");
    }
    size_t local = (size_t)cfg.wg;
    size_t global = (size_t)capacity * (size_t)d->heads_q * local;
    st = cv_enqueue(ctx, attn, cfg.mma ? "attn_fwd_mma" : "attn_fwd", 1, &global, &local, 1,
                    &built, event);
    clReleaseEvent(built);
    return st;
}

static clvarlen_status cl_forward_host(clvarlen_context *ctx, const char *fn,
                                       const cv_attn_desc *d, const void *q, const void *k,
                                       const void *v, const int32_t *cu_q, const int32_t *cu_k,
                                       const int32_t *q_pos, void *o, float *lse)
{
    attn_mem m;
    memset(&m, 0, sizeof m);
    size_t q_bytes = cv_span_bytes(d->dtype, (int64_t)d->heads_q * d->head_dim, d->total_q,
                                   d->q_stride);
    size_t k_bytes = cv_span_bytes(d->dtype, (int64_t)d->heads_kv * d->head_dim, d->total_k,
                                   d->k_stride);
    size_t v_bytes = cv_span_bytes(d->dtype, (int64_t)d->heads_kv * d->head_dim_v, d->total_k,
                                   d->v_stride);
    int64_t o_row = (int64_t)d->heads_q * d->head_dim_v;
    size_t o_bytes = cv_span_bytes(d->dtype, o_row, d->total_q, d->o_stride);
    size_t lse_bytes = (size_t)d->heads_q * (size_t)d->total_q * sizeof(float);
    size_t cu_bytes = (size_t)(d->n_seqs + 1) * sizeof(int32_t);
    float *lse_tmp = NULL;
    cl_event done = NULL;
    clvarlen_status st;
    if ((st = cv_buffer(ctx, q_bytes, q, &m.q)) != CLVARLEN_SUCCESS ||
        (st = cv_buffer(ctx, k_bytes, k, &m.k)) != CLVARLEN_SUCCESS ||
        (st = cv_buffer(ctx, v_bytes, v, &m.v)) != CLVARLEN_SUCCESS ||
        (st = cv_buffer(ctx, cu_bytes, cu_q, &m.cu_q)) != CLVARLEN_SUCCESS ||
        (st = cv_buffer(ctx, cu_bytes, cu_k, &m.cu_k)) != CLVARLEN_SUCCESS ||
        (q_pos && (st = cv_buffer(ctx, (size_t)d->total_q * 4, q_pos, &m.q_pos)) !=
                      CLVARLEN_SUCCESS) ||
        (st = cv_buffer(ctx, o_bytes, NULL, &m.o)) != CLVARLEN_SUCCESS ||
        (lse && (st = cv_buffer(ctx, lse_bytes, NULL, &m.lse)) != CLVARLEN_SUCCESS))
        goto done;
    if (lse && !(lse_tmp = malloc(lse_bytes ? lse_bytes : 1))) {
        st = cv_error(ctx, CLVARLEN_ERROR_OUT_OF_MEMORY, "%s: out of memory", fn);
        goto done;
    }
    if ((st = attn_enqueue(ctx, fn, d, &m, NULL, 0, NULL, &done)) != CLVARLEN_SUCCESS)
        goto done;
    /* lse goes through a temporary so that a failed read leaves the outputs untouched. */
    if (lse && (st = cv_read(ctx, m.lse, 0, lse_bytes, lse_tmp, 1, &done)) != CLVARLEN_SUCCESS)
        goto done;
    /* Only row bytes come back: a strided o keeps the caller's bytes between rows. */
    size_t es = cv_dtype_size(d->dtype), o_stride_b = (size_t)d->o_stride * es;
    if ((st = cv_read_rows(ctx, m.o, d->total_q, (size_t)o_row * es, o_stride_b, o, o_stride_b,
                           1, &done)) != CLVARLEN_SUCCESS)
        goto done;
    if (lse)
        memcpy(lse, lse_tmp, lse_bytes);
done:
    if (done)
        clReleaseEvent(done);
    free(lse_tmp);
    cv_release(&m.q);
    cv_release(&m.k);
    cv_release(&m.v);
    cv_release(&m.cu_q);
    cv_release(&m.cu_k);
    cv_release(&m.q_pos);
    cv_release(&m.o);
    cv_release(&m.lse);
    return st;
}

/* Merge kernel launch. Part p of the outputs is at o_a + p * part_stride
 * (N-way) unless o_b is set (two-way: part 1 is o_b). */
typedef struct merge_mem {
    cl_mem o_a, o_b, lse_a, lse_b, o, lse;
    size_t o_a_off, o_b_off, lse_a_off, lse_b_off, o_off, lse_off;
} merge_mem;

static clvarlen_status merge_enqueue(clvarlen_context *ctx, clvarlen_dtype dtype,
                                     int64_t n_parts, int64_t tokens, int32_t heads, int32_t dv,
                                     const merge_mem *m, cl_uint num_events,
                                     const cl_event *wait_list, cl_event *event)
{
    cl_kernel kernel = NULL;
    clvarlen_status st = cv_get_kernel(ctx, "attention.cl", "-DCV_ATTN_AUX", "attn_merge", &kernel);
    if (st != CLVARLEN_SUCCESS)
        return st;
    cl_long np = n_parts, tok = tokens;
    cl_int h = heads, dvi = dv, dt = dtype_code(dtype);
    cl_long part_stride = tokens * (int64_t)heads * dv, lse_part_stride = tokens * (int64_t)heads;
    cl_ulong o_a_off = m->o_a_off, o_b_off = m->o_b_off, lse_a_off = m->lse_a_off;
    cl_ulong lse_b_off = m->lse_b_off, o_off = m->o_off, lse_off = m->lse_off;
    cv_args a = cv_args_begin(kernel);
    CV_ARG(a, np);
    CV_ARG(a, tok);
    CV_ARG(a, h);
    CV_ARG(a, dvi);
    CV_ARG(a, dt);
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
    if (a.err != CL_SUCCESS)
        return cv_cl_check(ctx, a.err, "clSetKernelArg(attn_merge)");
    /* 16 lanes per row, 4 rows per 64-wide group (cl/attention.cl). */
    size_t local = 64;
    size_t global = (size_t)((tokens * heads + 3) / 4) * local;
    return cv_enqueue(ctx, kernel, "attn_merge", 1, &global, &local, num_events, wait_list,
                      event);
}

static clvarlen_status cl_merge_host(clvarlen_context *ctx, const char *fn, clvarlen_dtype dtype,
                                     int64_t n_parts, int64_t tokens, int32_t heads, int32_t dv,
                                     const void *o_a, const float *lse_a, const void *o_b,
                                     const float *lse_b, void *o, float *lse)
{
    merge_mem m;
    memset(&m, 0, sizeof m);
    size_t es = cv_dtype_size(dtype);
    size_t part_bytes = (size_t)tokens * (size_t)heads * (size_t)dv * es;
    size_t lse_part = (size_t)tokens * (size_t)heads * sizeof(float);
    size_t parts_a = o_b ? 1 : (size_t)n_parts;
    float *lse_tmp = NULL;
    cl_event done = NULL;
    clvarlen_status st;
    if ((st = cv_buffer(ctx, part_bytes * parts_a, o_a, &m.o_a)) != CLVARLEN_SUCCESS ||
        (st = cv_buffer(ctx, lse_part * parts_a, lse_a, &m.lse_a)) != CLVARLEN_SUCCESS ||
        (o_b && (st = cv_buffer(ctx, part_bytes, o_b, &m.o_b)) != CLVARLEN_SUCCESS) ||
        (o_b && (st = cv_buffer(ctx, lse_part, lse_b, &m.lse_b)) != CLVARLEN_SUCCESS) ||
        (st = cv_buffer(ctx, part_bytes, NULL, &m.o)) != CLVARLEN_SUCCESS ||
        (lse && (st = cv_buffer(ctx, lse_part, NULL, &m.lse)) != CLVARLEN_SUCCESS))
        goto done;
    if (lse && !(lse_tmp = malloc(lse_part ? lse_part : 1))) {
        st = cv_error(ctx, CLVARLEN_ERROR_OUT_OF_MEMORY, "%s: out of memory", fn);
        goto done;
    }
    if ((st = merge_enqueue(ctx, dtype, n_parts, tokens, heads, dv, &m, 0, NULL, &done)) !=
        CLVARLEN_SUCCESS)
        goto done;
    if (lse && (st = cv_read(ctx, m.lse, 0, lse_part, lse_tmp, 1, &done)) != CLVARLEN_SUCCESS)
        goto done;
    if ((st = cv_read(ctx, m.o, 0, part_bytes, o, 1, &done)) != CLVARLEN_SUCCESS)
        goto done;
    if (lse)
        memcpy(lse, lse_tmp, lse_part);
done:
    if (done)
        clReleaseEvent(done);
    free(lse_tmp);
    cv_release(&m.o_a);
    cv_release(&m.o_b);
    cv_release(&m.lse_a);
    cv_release(&m.lse_b);
    cv_release(&m.o);
    cv_release(&m.lse);
    return st;
}

#endif /* CLVARLEN_HAVE_OPENCL */

/* ------------------------------------------------------------ host-memory entry points */

clvarlen_status clvarlen_attention_forward(clvarlen_context *ctx,
                                           const clvarlen_attention_params *params, const void *q,
                                           const void *k, const void *v,
                                           const int32_t *cu_seqlens_q,
                                           const int32_t *cu_seqlens_k, const int32_t *q_pos,
                                           void *o, float *lse)
{
    static const char fn[] = "clvarlen_attention_forward";
    CV_ENTER(ctx);
    cv_attn_desc d;
    clvarlen_status st = validate_params(ctx, fn, params, &d);
    if (st != CLVARLEN_SUCCESS)
        return st;
    if (d.total_q > 0 && (!q || !o))
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: q or o is NULL", fn);
    if (d.total_k > 0 && (!k || !v))
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: k or v is NULL", fn);
    if ((st = cv_check_cu_seqlens(ctx, fn, "cu_seqlens_q", cu_seqlens_q, d.n_seqs, d.total_q)) !=
            CLVARLEN_SUCCESS ||
        (st = cv_check_cu_seqlens(ctx, fn, "cu_seqlens_k", cu_seqlens_k, d.n_seqs, d.total_k)) !=
            CLVARLEN_SUCCESS ||
        (st = check_max_seqlen(ctx, fn, "max_seqlen_q", cu_seqlens_q, d.n_seqs,
                               d.max_seqlen_q)) != CLVARLEN_SUCCESS ||
        (st = check_max_seqlen(ctx, fn, "max_seqlen_k", cu_seqlens_k, d.n_seqs,
                               d.max_seqlen_k)) != CLVARLEN_SUCCESS)
        return st;
    if (d.total_q == 0 || d.n_seqs == 0)
        return CLVARLEN_SUCCESS;
#if CLVARLEN_HAVE_OPENCL
    if (cv_use_cl(ctx))
        return cl_forward_host(ctx, fn, &d, q, k, v, cu_seqlens_q, cu_seqlens_k, q_pos, o, lse);
#endif
    return cv_cpu_attention_forward(ctx, &d, q, k, v, cu_seqlens_q, cu_seqlens_k, q_pos, o, lse);
}

static clvarlen_status cpu_merge_parts(clvarlen_context *ctx, const char *fn, clvarlen_dtype dtype,
                                       int64_t n_parts, int64_t tokens, int32_t heads, int32_t dv,
                                       const void *o_parts, const float *lse_parts, void *o,
                                       float *lse)
{
    size_t n = n_parts > 0 ? (size_t)n_parts : 1;
    const void **op = malloc(n * sizeof *op);
    const float **lp = malloc(n * sizeof *lp);
    if (!op || !lp) {
        free(op);
        free(lp);
        return cv_error(ctx, CLVARLEN_ERROR_OUT_OF_MEMORY, "%s: out of memory", fn);
    }
    size_t part_bytes = (size_t)tokens * (size_t)heads * (size_t)dv * cv_dtype_size(dtype);
    for (int64_t p = 0; p < n_parts; p++) {
        op[p] = (const char *)o_parts + (size_t)p * part_bytes;
        lp[p] = lse_parts + (size_t)p * (size_t)tokens * (size_t)heads;
    }
    clvarlen_status st =
        cv_cpu_attention_merge(ctx, dtype, n_parts, tokens, heads, dv, op, lp, o, lse);
    free(op);
    free(lp);
    return st;
}

clvarlen_status clvarlen_attention_merge(clvarlen_context *ctx, clvarlen_dtype dtype,
                                         int64_t n_parts, int64_t tokens, int32_t heads,
                                         int32_t head_dim_v, const void *o_parts,
                                         const float *lse_parts, void *o, float *lse)
{
    static const char fn[] = "clvarlen_attention_merge";
    CV_ENTER(ctx);
    int64_t elems = 0;
    clvarlen_status st = validate_merge(ctx, fn, dtype, n_parts, tokens, heads, head_dim_v, &elems);
    if (st != CLVARLEN_SUCCESS)
        return st;
    if (elems > 0 && n_parts > 0 && (!o_parts || !lse_parts))
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: o_parts or lse_parts is NULL",
                        fn);
    if (elems > 0 && !o)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: o is NULL", fn);
    if (elems == 0)
        return CLVARLEN_SUCCESS;
#if CLVARLEN_HAVE_OPENCL
    if (cv_use_cl(ctx) && n_parts > 0)
        return cl_merge_host(ctx, fn, dtype, n_parts, tokens, heads, head_dim_v, o_parts,
                             lse_parts, NULL, NULL, o, lse);
#endif
    return cpu_merge_parts(ctx, fn, dtype, n_parts, tokens, heads, head_dim_v, o_parts, lse_parts,
                           o, lse);
}

clvarlen_status clvarlen_attention_merge2(clvarlen_context *ctx, clvarlen_dtype dtype,
                                          int64_t tokens, int32_t heads, int32_t head_dim_v,
                                          const void *o_a, const float *lse_a, const void *o_b,
                                          const float *lse_b, void *o, float *lse)
{
    static const char fn[] = "clvarlen_attention_merge2";
    CV_ENTER(ctx);
    int64_t elems = 0;
    clvarlen_status st = validate_merge(ctx, fn, dtype, 2, tokens, heads, head_dim_v, &elems);
    if (st != CLVARLEN_SUCCESS)
        return st;
    if (elems > 0 && (!o_a || !lse_a || !o_b || !lse_b || !o))
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: o_a, lse_a, o_b, lse_b and o must not be NULL", fn);
    if (elems == 0)
        return CLVARLEN_SUCCESS;
#if CLVARLEN_HAVE_OPENCL
    if (cv_use_cl(ctx))
        return cl_merge_host(ctx, fn, dtype, 2, tokens, heads, head_dim_v, o_a, lse_a, o_b, lse_b,
                             o, lse);
#endif
    const void *op[2] = {o_a, o_b};
    const float *lp[2] = {lse_a, lse_b};
    return cv_cpu_attention_merge(ctx, dtype, 2, tokens, heads, head_dim_v, op, lp, o, lse);
}

/* ------------------------------------------------------------ cl_mem entry points */

#if CLVARLEN_HAVE_OPENCL

/* Hands the operation's event to the caller, or releases it. */
static void give_event(cl_event ev, cl_event *event)
{
    if (event)
        *event = ev;
    else if (ev)
        clReleaseEvent(ev);
}

clvarlen_status clvarlen_cl_attention_forward(
    clvarlen_context *ctx, const clvarlen_attention_params *params, cl_mem q, size_t q_offset,
    cl_mem k, size_t k_offset, cl_mem v, size_t v_offset, cl_mem cu_seqlens_q, size_t cu_q_offset,
    cl_mem cu_seqlens_k, size_t cu_k_offset, cl_mem q_pos, size_t q_pos_offset, cl_mem o,
    size_t o_offset, cl_mem lse, size_t lse_offset, cl_uint num_events, const cl_event *wait_list,
    cl_event *event)
{
    static const char fn[] = "clvarlen_cl_attention_forward";
    CV_ENTER(ctx);
    if (event)
        *event = NULL;
    clvarlen_status st = cv_cl_enter(ctx, fn, num_events, wait_list);
    if (st != CLVARLEN_SUCCESS)
        return st;
    cv_attn_desc d;
    if ((st = validate_params(ctx, fn, params, &d)) != CLVARLEN_SUCCESS)
        return st;
    size_t es = cv_dtype_size(d.dtype);
    if (!cu_seqlens_q || !cu_seqlens_k)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: cu_seqlens_q or cu_seqlens_k is NULL", fn);
    if (d.total_q > 0 && (!q || !o))
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: q or o is NULL", fn);
    if (d.total_k > 0 && (!k || !v))
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: k or v is NULL", fn);
    if ((st = cv_check_offset(ctx, fn, "q_offset", q_offset, es)) != CLVARLEN_SUCCESS ||
        (st = cv_check_offset(ctx, fn, "k_offset", k_offset, es)) != CLVARLEN_SUCCESS ||
        (st = cv_check_offset(ctx, fn, "v_offset", v_offset, es)) != CLVARLEN_SUCCESS ||
        (st = cv_check_offset(ctx, fn, "o_offset", o_offset, es)) != CLVARLEN_SUCCESS ||
        (st = cv_check_offset(ctx, fn, "cu_q_offset", cu_q_offset, 4)) != CLVARLEN_SUCCESS ||
        (st = cv_check_offset(ctx, fn, "cu_k_offset", cu_k_offset, 4)) != CLVARLEN_SUCCESS ||
        (st = cv_check_offset(ctx, fn, "q_pos_offset", q_pos_offset, 4)) != CLVARLEN_SUCCESS ||
        (st = cv_check_offset(ctx, fn, "lse_offset", lse_offset, 4)) != CLVARLEN_SUCCESS)
        return st;
    /* With nothing to compute the chain still orders the caller's event
     * after the wait list. */
    cv_chain c;
    st = cv_chain_begin(&c, ctx, num_events, wait_list,
                        ctx->device_checks && d.total_q > 0 && d.n_seqs > 0);
    if (st != CLVARLEN_SUCCESS || d.total_q == 0 || d.n_seqs == 0)
        return cv_chain_end(&c, fn, st, event);
    attn_mem m = {q, k, v, cu_seqlens_q, cu_seqlens_k, q_pos, o, lse,
                  q_offset, k_offset, v_offset, cu_q_offset, cu_k_offset, q_pos_offset,
                  o_offset, lse_offset};
    if (c.flag) {
        st = cv_chain_check_cu_seqlens(&c, cu_seqlens_q, cu_q_offset, d.n_seqs, d.total_q);
        if (st == CLVARLEN_SUCCESS)
            st = cv_chain_check_cu_seqlens(&c, cu_seqlens_k, cu_k_offset, d.n_seqs, d.total_k);
    }
    if (st == CLVARLEN_SUCCESS) {
        cl_uint nw;
        const cl_event *wl;
        cl_event ev = NULL;
        cv_chain_wait_list(&c, &nw, &wl);
        st = attn_enqueue(ctx, fn, &d, &m, c.flag, nw, wl, &ev);
        if (st == CLVARLEN_SUCCESS)
            cv_chain_take(&c, ev);
    }
    return cv_chain_end(&c, fn, st, event);
}

static clvarlen_status cl_merge_common(clvarlen_context *ctx, const char *fn, clvarlen_dtype dtype,
                                       int64_t n_parts, int64_t tokens, int32_t heads, int32_t dv,
                                       const merge_mem *m, cl_uint num_events,
                                       const cl_event *wait_list, cl_event *event)
{
    clvarlen_status st;
    size_t es = cv_dtype_size(dtype);
    if ((st = cv_check_offset(ctx, fn, "o_a/o_parts offset", m->o_a_off, es)) != CLVARLEN_SUCCESS ||
        (st = cv_check_offset(ctx, fn, "o_b offset", m->o_b_off, es)) != CLVARLEN_SUCCESS ||
        (st = cv_check_offset(ctx, fn, "o_offset", m->o_off, es)) != CLVARLEN_SUCCESS ||
        (st = cv_check_offset(ctx, fn, "lse_a/lse_parts offset", m->lse_a_off, 4)) !=
            CLVARLEN_SUCCESS ||
        (st = cv_check_offset(ctx, fn, "lse_b offset", m->lse_b_off, 4)) != CLVARLEN_SUCCESS ||
        (st = cv_check_offset(ctx, fn, "lse_offset", m->lse_off, 4)) != CLVARLEN_SUCCESS)
        return st;
    if (tokens == 0) {
        if (event)
            return cv_cl_check(ctx,
                               clEnqueueMarkerWithWaitList(ctx->queue, num_events,
                                                           num_events ? wait_list : NULL, event),
                               "clEnqueueMarkerWithWaitList");
        return CLVARLEN_SUCCESS;
    }
    cl_event ev = NULL;
    st = merge_enqueue(ctx, dtype, n_parts, tokens, heads, dv, m, num_events, wait_list,
                       event ? &ev : NULL);
    if (st == CLVARLEN_SUCCESS)
        give_event(ev, event);
    return st;
}

clvarlen_status clvarlen_cl_attention_merge(clvarlen_context *ctx, clvarlen_dtype dtype,
                                            int64_t n_parts, int64_t tokens, int32_t heads,
                                            int32_t head_dim_v, cl_mem o_parts,
                                            size_t o_parts_offset, cl_mem lse_parts,
                                            size_t lse_parts_offset, cl_mem o, size_t o_offset,
                                            cl_mem lse, size_t lse_offset, cl_uint num_events,
                                            const cl_event *wait_list, cl_event *event)
{
    static const char fn[] = "clvarlen_cl_attention_merge";
    CV_ENTER(ctx);
    if (event)
        *event = NULL;
    clvarlen_status st = cv_cl_enter(ctx, fn, num_events, wait_list);
    if (st != CLVARLEN_SUCCESS)
        return st;
    int64_t elems = 0;
    if ((st = validate_merge(ctx, fn, dtype, n_parts, tokens, heads, head_dim_v, &elems)) !=
        CLVARLEN_SUCCESS)
        return st;
    if (elems > 0 && n_parts > 0 && (!o_parts || !lse_parts))
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: o_parts or lse_parts is NULL",
                        fn);
    if (elems > 0 && !o)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: o is NULL", fn);
    merge_mem m = {o_parts, NULL, lse_parts, NULL, o, lse,
                   o_parts_offset, 0, lse_parts_offset, 0, o_offset, lse_offset};
    return cl_merge_common(ctx, fn, dtype, n_parts, tokens, heads, head_dim_v, &m, num_events,
                           wait_list, event);
}

clvarlen_status clvarlen_cl_attention_merge2(clvarlen_context *ctx, clvarlen_dtype dtype,
                                             int64_t tokens, int32_t heads, int32_t head_dim_v,
                                             cl_mem o_a, size_t o_a_offset, cl_mem lse_a,
                                             size_t lse_a_offset, cl_mem o_b, size_t o_b_offset,
                                             cl_mem lse_b, size_t lse_b_offset, cl_mem o,
                                             size_t o_offset, cl_mem lse, size_t lse_offset,
                                             cl_uint num_events, const cl_event *wait_list,
                                             cl_event *event)
{
    static const char fn[] = "clvarlen_cl_attention_merge2";
    CV_ENTER(ctx);
    if (event)
        *event = NULL;
    clvarlen_status st = cv_cl_enter(ctx, fn, num_events, wait_list);
    if (st != CLVARLEN_SUCCESS)
        return st;
    int64_t elems = 0;
    if ((st = validate_merge(ctx, fn, dtype, 2, tokens, heads, head_dim_v, &elems)) !=
        CLVARLEN_SUCCESS)
        return st;
    if (elems > 0 && (!o_a || !lse_a || !o_b || !lse_b || !o))
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: o_a, lse_a, o_b, lse_b and o must not be NULL", fn);
    merge_mem m = {o_a, o_b, lse_a, lse_b, o, lse,
                   o_a_offset, o_b_offset, lse_a_offset, lse_b_offset, o_offset, lse_offset};
    return cl_merge_common(ctx, fn, dtype, 2, tokens, heads, head_dim_v, &m, num_events,
                           wait_list, event);
}

#endif /* CLVARLEN_HAVE_OPENCL */
