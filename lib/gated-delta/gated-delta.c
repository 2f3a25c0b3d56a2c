/* The gated delta rule (SPEC 3): argument validation, dispatch to the CPU
 * fallback, and the OpenCL launchers shared by the host-memory and the
 * cl_mem entry points (kernels in cl/gated-delta.cl). */
#include "runtime/runtime.h"

#include "cpu/gated-delta.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GDN_MAX_DIM 256
#define GDN_CHUNK 64

void clvarlen_gdn_params_init(clvarlen_gdn_params *params)
{
    if (!params)
        return;
    memset(params, 0, sizeof *params);
    params->struct_size = (uint32_t)sizeof *params;
    params->dtype = CLVARLEN_DTYPE_F32;
    params->dt_bias_dtype = CLVARLEN_DTYPE_F32;
    params->state_dtype = CLVARLEN_DTYPE_F32;
    params->state_layout = CLVARLEN_STATE_VK;
    params->scale = 0.0f;
    params->softplus_beta = 1.0f;
    params->softplus_threshold = 20.0f;
    params->algorithm = CLVARLEN_GDN_AUTO;
}

/* ------------------------------------------------------------------ validation */

/* Everything that does not need the contents of device or host arrays:
 * shapes, dtypes, strides, scalars and sizes. Fills p (pointers left NULL). */
static clvarlen_status gdn_check_params(clvarlen_context *ctx, const char *fn,
                                        const clvarlen_gdn_params *pa, int has_cu, int has_pool,
                                        int has_sidx, int has_inter, int has_cidx,
                                        cv_gdn_problem *p)
{
    if (!pa)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: params is NULL", fn);
    if (pa->struct_size < sizeof *pa)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: params->struct_size is %u, expected %zu (initialise params with "
                        "clvarlen_gdn_params_init)",
                        fn, (unsigned)pa->struct_size, sizeof *pa);
    memset(p, 0, sizeof *p);
    if (!cv_dtype_size(pa->dtype) || !cv_dtype_size(pa->dt_bias_dtype) ||
        !cv_dtype_size(pa->state_dtype))
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: unknown dtype (dtype %d, dt_bias_dtype %d, state_dtype %d)", fn,
                        (int)pa->dtype, (int)pa->dt_bias_dtype, (int)pa->state_dtype);
    if (!cv_is_float_act(pa->dtype))
        return cv_error(ctx, CLVARLEN_ERROR_UNSUPPORTED,
                        "%s: dtype %s is not supported (f32, f16 or bf16)", fn,
                        clvarlen_dtype_name(pa->dtype));
    if (!cv_is_float_act(pa->dt_bias_dtype))
        return cv_error(ctx, CLVARLEN_ERROR_UNSUPPORTED,
                        "%s: dt_bias_dtype %s is not supported (f32, f16 or bf16)", fn,
                        clvarlen_dtype_name(pa->dt_bias_dtype));
    if (!cv_is_float_act(pa->state_dtype))
        return cv_error(ctx, CLVARLEN_ERROR_UNSUPPORTED,
                        "%s: state_dtype %s is not supported (f32, f16 or bf16)", fn,
                        clvarlen_dtype_name(pa->state_dtype));
    if (pa->n_seqs < 0 || pa->n_seqs > INT32_MAX)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: n_seqs is %lld (0 .. 2^31 - 1)", fn, (long long)pa->n_seqs);
    if (pa->total_tokens < 0 || pa->total_tokens > INT32_MAX)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: total_tokens is %lld (0 .. 2^31 - 1: cu_seqlens are int32)", fn,
                        (long long)pa->total_tokens);
    if (!has_cu) {
        if (pa->fixed_seqlen < 0)
            return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                            "%s: fixed_seqlen is %d (cu_seqlens is NULL)", fn,
                            (int)pa->fixed_seqlen);
        if ((int64_t)pa->fixed_seqlen * pa->n_seqs != pa->total_tokens)
            return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                            "%s: without cu_seqlens total_tokens (%lld) must be n_seqs (%lld) * "
                            "fixed_seqlen (%d)",
                            fn, (long long)pa->total_tokens, (long long)pa->n_seqs,
                            (int)pa->fixed_seqlen);
    }
    if (pa->heads_qk <= 0 || pa->heads_v <= 0)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: heads_qk (%d) and heads_v (%d) must be positive", fn,
                        (int)pa->heads_qk, (int)pa->heads_v);
    if (pa->heads_v % pa->heads_qk != 0)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: heads_v (%d) is not a multiple of heads_qk (%d)", fn,
                        (int)pa->heads_v, (int)pa->heads_qk);
    if (pa->key_dim <= 0 || pa->value_dim <= 0)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: key_dim (%d) and value_dim (%d) must be positive", fn,
                        (int)pa->key_dim, (int)pa->value_dim);
    if (pa->key_dim > GDN_MAX_DIM || pa->value_dim > GDN_MAX_DIM)
        return cv_error(ctx, CLVARLEN_ERROR_UNSUPPORTED,
                        "%s: key_dim %d / value_dim %d: at most %d is supported", fn,
                        (int)pa->key_dim, (int)pa->value_dim, GDN_MAX_DIM);

    p->dtype = pa->dtype;
    p->bias_dtype = pa->dt_bias_dtype;
    p->state_dtype = pa->state_dtype;
    p->n_seqs = pa->n_seqs;
    p->total_tokens = pa->total_tokens;
    p->fixed_seqlen = has_cu ? 0 : pa->fixed_seqlen;
    p->H = pa->heads_qk;
    p->HV = pa->heads_v;
    p->K = pa->key_dim;
    p->V = pa->value_dim;
    const int64_t T = pa->total_tokens, H = p->H, HV = p->HV, K = p->K, V = p->V;

    /* every token-major tensor: heads and the last dimension contiguous */
    struct {
        const char *name;
        int64_t row, stride;
        int64_t *out;
    } rows[] = {
        {"q", H * K, pa->q_stride, &p->q_stride},  {"k", H * K, pa->k_stride, &p->k_stride},
        {"v", HV * V, pa->v_stride, &p->v_stride}, {"a", HV, pa->a_stride, &p->a_stride},
        {"b", HV, pa->b_stride, &p->b_stride},     {"o", HV * V, pa->o_stride, &p->o_stride},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        if (rows[i].stride < 0)
            return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: %s_stride is negative",
                            fn, rows[i].name);
        clvarlen_status st = cv_check_rows(ctx, fn, rows[i].name, pa->dtype, rows[i].row, T,
                                           rows[i].stride, rows[i].out);
        if (st != CLVARLEN_SUCCESS)
            return st;
    }

    if (pa->scale == 0.0f)
        p->scale = 1.0f / sqrtf((float)K);
    else if (!(pa->scale > 0.0f) || !isfinite(pa->scale))
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: scale must be positive and finite (0 for 1/sqrt(K)), got %g", fn,
                        (double)pa->scale);
    else
        p->scale = pa->scale;
    if (!(pa->softplus_beta > 0.0f) || !isfinite(pa->softplus_beta))
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: softplus_beta must be positive and finite, got %g", fn,
                        (double)pa->softplus_beta);
    if (isnan(pa->softplus_threshold))
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: softplus_threshold is NaN",
                        fn);
    p->sp_beta = pa->softplus_beta;
    p->sp_threshold = pa->softplus_threshold;
    p->l2norm = pa->use_qk_l2norm != 0;
    p->write_back = pa->disable_state_update == 0;

    if (pa->state_layout != CLVARLEN_STATE_VK && pa->state_layout != CLVARLEN_STATE_KV)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: unknown state_layout %d", fn,
                        (int)pa->state_layout);
    p->state_kv = pa->state_layout == CLVARLEN_STATE_KV;
    const int64_t head_state = HV * K * V; /* < 2^47: HV < 2^31, K and V <= 256 */
    const int64_t ses = (int64_t)cv_dtype_size(pa->state_dtype);
    if (has_pool) {
        if (pa->state_slots < 0)
            return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                            "%s: state_slots is negative (%lld)", fn, (long long)pa->state_slots);
        int64_t pitch = pa->state_slot_pitch ? pa->state_slot_pitch : head_state;
        if (pitch < head_state)
            return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                            "%s: state_slot_pitch %lld is smaller than a slot (HV*K*V = %lld)", fn,
                            (long long)pa->state_slot_pitch, (long long)head_state);
        if (pa->state_slots > 0 && pitch > INT64_MAX / ses / pa->state_slots)
            return cv_error(ctx, CLVARLEN_ERROR_OVERFLOW, "%s: the state pool spans more than "
                            "2^63 bytes", fn);
        if (!has_sidx && pa->state_slots < pa->n_seqs)
            return cv_error(ctx, CLVARLEN_ERROR_INDEX_OUT_OF_RANGE,
                            "%s: without state_indices sequence n uses slot n, but the pool has "
                            "%lld slots for %lld sequences",
                            fn, (long long)pa->state_slots, (long long)pa->n_seqs);
        p->slots = pa->state_slots;
        p->slot_pitch = pitch;
    }
    if (has_inter) {
        if (pa->cache_slots < 0 || pa->cache_steps <= 0)
            return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                            "%s: intermediate_states needs cache_slots >= 0 and cache_steps > 0 "
                            "(got %lld, %d)",
                            fn, (long long)pa->cache_slots, (int)pa->cache_steps);
        if (pa->cache_slots > 0 &&
            (int64_t)pa->cache_steps > INT64_MAX / ses / pa->cache_slots / head_state)
            return cv_error(ctx, CLVARLEN_ERROR_OVERFLOW,
                            "%s: intermediate_states spans more than 2^63 bytes", fn);
        if (!has_cidx && pa->cache_slots < pa->n_seqs)
            return cv_error(ctx, CLVARLEN_ERROR_INDEX_OUT_OF_RANGE,
                            "%s: without cache_indices sequence n uses cache slot n, but there "
                            "are %lld cache slots for %lld sequences",
                            fn, (long long)pa->cache_slots, (long long)pa->n_seqs);
        p->cache_slots = pa->cache_slots;
        p->cache_steps = pa->cache_steps;
    }
    if (pa->algorithm != CLVARLEN_GDN_AUTO && pa->algorithm != CLVARLEN_GDN_RECURRENT &&
        pa->algorithm != CLVARLEN_GDN_CHUNKED)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: unknown algorithm %d", fn,
                        (int)pa->algorithm);
    if (pa->algorithm == CLVARLEN_GDN_CHUNKED && has_inter)
        return cv_error(ctx, CLVARLEN_ERROR_UNSUPPORTED,
                        "%s: intermediate_states (target verify) needs every step's state: use "
                        "CLVARLEN_GDN_AUTO or CLVARLEN_GDN_RECURRENT",
                        fn);
    return CLVARLEN_SUCCESS;
}

/* Host-visible arrays: cu_seqlens, index ranges, target-verify lengths. */
static clvarlen_status gdn_check_host_arrays(clvarlen_context *ctx, const char *fn,
                                             const cv_gdn_problem *p)
{
    if (p->cu_seqlens) {
        clvarlen_status st =
            cv_check_cu_seqlens(ctx, fn, "cu_seqlens", p->cu_seqlens, p->n_seqs, p->total_tokens);
        if (st != CLVARLEN_SUCCESS)
            return st;
    }
    for (int64_t n = 0; n < p->n_seqs; n++) {
        if (p->state_pool && p->state_indices && p->state_indices[n] >= p->slots)
            return cv_error(ctx, CLVARLEN_ERROR_INDEX_OUT_OF_RANGE,
                            "%s: state_indices[%lld] = %d but the pool has %lld slots", fn,
                            (long long)n, (int)p->state_indices[n], (long long)p->slots);
        if (p->inter) {
            int64_t c = p->cache_indices ? p->cache_indices[n] : n;
            if (c >= p->cache_slots)
                return cv_error(ctx, CLVARLEN_ERROR_INDEX_OUT_OF_RANGE,
                                "%s: cache_indices[%lld] = %lld but there are %lld cache slots",
                                fn, (long long)n, (long long)c, (long long)p->cache_slots);
            int64_t bos, eos;
            cv_gdn_bounds(p, n, &bos, &eos);
            if (c >= 0 && eos - bos > p->cache_steps)
                return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                                "%s: sequence %lld has %lld tokens but the intermediate buffer "
                                "holds %d steps",
                                fn, (long long)n, (long long)(eos - bos), (int)p->cache_steps);
        }
    }
    return CLVARLEN_SUCCESS;
}

/* ------------------------------------------------------------------ OpenCL */

#if CLVARLEN_HAVE_OPENCL


typedef struct gdn_mem {
    cl_mem m;
    cl_ulong off;
} gdn_mem;

typedef struct gdn_bufs {
    gdn_mem A_log, dt_bias, a, b, q, k, v, cu, pool, sidx, inter, cidx, o;
} gdn_bufs;

typedef struct gdn_tiles {
    int wg, vt, tk;    /* token kernel */
    int cwg, cvt, ks;  /* chunked kernel; cvt == 0: not available on this device */
    int64_t chunk_min; /* AUTO: sequences at least this long run chunked */
} gdn_tiles;

/* Local memory of gdn_chunked, as declared there. */
static size_t gdn_chunk_local_bytes(int K, int cvt, int ks)
{
    size_t ua = 2 * GDN_CHUNK * (size_t)(ks + 1), ub = GDN_CHUNK * (GDN_CHUNK + 1);
    size_t floats = (size_t)K * cvt + (size_t)GDN_CHUNK * cvt + 16 * (size_t)cvt +
                    (ua > ub ? ua : ub) + 4 * 16 * 16 + 5 * GDN_CHUNK;
    return floats * sizeof(float);
}

/* A developer knob for tuning sweeps (clvarlen-test bench): CLVARLEN_GDN_TUNING=
 * "wg=128,vt=16,tk=8,cwg=256,cvt=16,min=128" overrides the device table. */
static void gdn_tuning_override(int *wg, int *vt, int *tk, int *cwg, int *cvt, int64_t *cmin)
{
    const char *env = getenv("CLVARLEN_GDN_TUNING");
    if (!env)
        return;
    char key[8];
    long long val;
    int used;
    while (sscanf(env, " %7[a-z] = %lld%n", key, &val, &used) == 2) {
        if (!strcmp(key, "wg"))
            *wg = (int)val;
        else if (!strcmp(key, "vt"))
            *vt = (int)val;
        else if (!strcmp(key, "tk"))
            *tk = (int)val;
        else if (!strcmp(key, "cwg"))
            *cwg = (int)val;
        else if (!strcmp(key, "cvt"))
            *cvt = (int)val;
        else if (!strcmp(key, "min"))
            *cmin = val;
        env += used;
        if (*env == ',')
            env++;
    }
}

static void gdn_resolve_tiles(const clvarlen_context *ctx, int K, int V, gdn_tiles *t)
{
    const cv_tuning *tu = &ctx->tuning;
    const bool cpu = ctx->device.vendor == CLVARLEN_VENDOR_CPU;
    int64_t maxwg = ctx->device.max_work_group_size ? (int64_t)ctx->device.max_work_group_size
                                                    : 256;
    /* defaults: the best H100 decode tiles measured (16 columns, 128 work-items,
     * 16 per column); CPU devices split no column (PoCL was fastest so) */
    int wg = tu->gdn_wg ? (int)tu->gdn_wg : 128;
    int vt = tu->gdn_v_tile ? (int)tu->gdn_v_tile : 16;
    int tk = tu->gdn_k_lanes ? (int)tu->gdn_k_lanes : (cpu ? 1 : 16);
    int cwg = tu->gdn_chunk_wg ? (int)tu->gdn_chunk_wg : (cpu ? 64 : 256);
    int cvt = tu->gdn_chunk_v_tile ? (int)tu->gdn_chunk_v_tile : (cpu ? 32 : 16);
    /* 0: AUTO stays token by token. The portable chunked kernel lost to the token
     * kernel wherever it was measured (H100: 19.9 vs 13.9 ms on 16 x 1k-token
     * prefill; PoCL: 2.3x), so no device enables it yet. */
    int64_t cmin = tu->gdn_chunk_min ? (int64_t)tu->gdn_chunk_min : 0;
    gdn_tuning_override(&wg, &vt, &tk, &cwg, &cvt, &cmin);

    tk = (int)cv_pow2_floor(CV_MAX(1, CV_MIN(tk, maxwg)));
    tk = CV_MIN(tk, (int)cv_pow2_ceil(K));
    vt = CV_MIN((int)cv_pow2_floor(CV_MAX(vt, 1)), (int)cv_pow2_ceil(V));
    wg = (int)cv_pow2_floor(CV_MAX(1, CV_MIN(wg, maxwg)));
    if (wg < tk)
        wg = tk;
    int nvg = CV_MIN(wg / tk, vt);
    t->wg = nvg * tk;
    t->vt = vt;
    t->tk = tk;

    /* the chunked kernel assumes 64 <= work-group <= 256 (rows are work-items) */
    cwg = (int)cv_pow2_floor(CV_MAX(64, CV_MIN(cwg, 256)));
    t->ks = 16;
    t->cwg = cwg;
    t->cvt = 0;
    if (cwg <= maxwg) {
        cvt = CV_MIN(CV_MIN((int)cv_pow2_floor(CV_MAX(cvt, 1)), (int)cv_pow2_ceil(V)), cwg);
        uint64_t local = ctx->device.local_mem_bytes ? ctx->device.local_mem_bytes : 32768;
        while (cvt >= 1 && gdn_chunk_local_bytes(K, cvt, t->ks) > local)
            cvt /= 2;
        t->cvt = cvt;
    }
    t->chunk_min = cmin < 0 ? 0 : cmin;
}

/* The token kernel and the index check share one program, the chunked kernel
 * has its own: a call compiles only what it runs. */
static clvarlen_status gdn_kernel(clvarlen_context *ctx, const cv_gdn_problem *p,
                                  const gdn_tiles *t, const char *name, cl_kernel *kernel)
{
    char opts[256];
    if (strcmp(name, "gdn_chunked") == 0)
        snprintf(opts, sizeof opts,
                 "-DCV_GDN_CHUNKED=1 -DCV_K=%d -DCV_V=%d -DCV_DT=%d -DCV_ST_DT=%d -DCV_CWG=%d "
                 "-DCV_CVT=%d -DCV_KS=%d",
                 (int)p->K, (int)p->V, (int)p->dtype, (int)p->state_dtype, t->cwg, t->cvt,
                 t->ks);
    else
        snprintf(opts, sizeof opts,
                 "-DCV_K=%d -DCV_V=%d -DCV_DT=%d -DCV_ST_DT=%d -DCV_WG=%d -DCV_VT=%d -DCV_TK=%d",
                 (int)p->K, (int)p->V, (int)p->dtype, (int)p->state_dtype, t->wg, t->vt, t->tk);
    /* NVIDIA: warp-shuffle reductions (inline PTX) in whole warps; should the
     * driver refuse them, the portable program serves this context from then on */
    const bool shfl = strcmp(name, "gdn_chunked") != 0 &&
                      ctx->device.vendor == CLVARLEN_VENDOR_NVIDIA && !ctx->gdn_shfl_refused &&
                      t->wg % 32 == 0 && t->tk >= 2 && t->tk <= 32;
    if (shfl) {
        char nv[300];
        snprintf(nv, sizeof nv, "%s -DCV_NV_SHFL=1", opts);
        clvarlen_status st = cv_get_kernel(ctx, "gated-delta.cl", nv, name, kernel);
        if (st != CLVARLEN_ERROR_KERNEL_BUILD)
            return st;
        ctx->gdn_shfl_refused = 1;
        cv_log(ctx, CLVARLEN_LOG_INFO, "gated delta: warp shuffles refused, using local memory");
        cv_clear_error(ctx);
    }
    return cv_get_kernel(ctx, "gated-delta.cl", opts, name, kernel);
}

static int gdn_flags(const gdn_bufs *d, const cv_gdn_problem *p, cl_mem check)
{
    int f = 0;
    if (d->cu.m)
        f |= GDN_HAS_CU;
    if (d->pool.m)
        f |= GDN_HAS_POOL;
    if (d->sidx.m)
        f |= GDN_HAS_SIDX;
    if (p->write_back)
        f |= GDN_WRITE_BACK;
    if (d->inter.m)
        f |= GDN_HAS_INTER;
    if (d->cidx.m)
        f |= GDN_HAS_CIDX;
    if (check)
        f |= GDN_HAS_CHECK;
    if (p->state_kv)
        f |= GDN_STATE_KV;
    if (p->l2norm)
        f |= GDN_L2NORM;
    if (p->bias_dtype == CLVARLEN_DTYPE_F16)
        f |= GDN_BIAS_F16;
    else if (p->bias_dtype == CLVARLEN_DTYPE_BF16)
        f |= GDN_BIAS_BF16;
    return f;
}

static void gdn_set_args(cv_args *ar, const cv_gdn_problem *p, const gdn_bufs *d, int flags,
                         cl_long chunk_min, cl_mem check)
{
#define GDN_MEM(x)                                                                             \
    do {                                                                                       \
        CV_ARG(*ar, d->x.m);                                                                   \
        CV_ARG(*ar, d->x.off);                                                                 \
    } while (0)
    cl_long a_stride = p->a_stride, b_stride = p->b_stride, q_stride = p->q_stride,
            k_stride = p->k_stride, v_stride = p->v_stride, o_stride = p->o_stride;
    cl_long fixed = p->fixed_seqlen, slots = p->slots, pitch = p->slot_pitch;
    cl_long cache_slots = p->cache_slots, n_seqs = p->n_seqs, total = p->total_tokens;
    cl_int cache_steps = p->cache_steps, HV = p->HV, group = p->HV / p->H, fl = flags;
    cl_float scale = p->scale, spb = p->sp_beta, spt = p->sp_threshold;
    GDN_MEM(A_log);
    GDN_MEM(dt_bias);
    GDN_MEM(a);
    CV_ARG(*ar, a_stride);
    GDN_MEM(b);
    CV_ARG(*ar, b_stride);
    GDN_MEM(q);
    CV_ARG(*ar, q_stride);
    GDN_MEM(k);
    CV_ARG(*ar, k_stride);
    GDN_MEM(v);
    CV_ARG(*ar, v_stride);
    GDN_MEM(cu);
    CV_ARG(*ar, fixed);
    GDN_MEM(pool);
    CV_ARG(*ar, slots);
    CV_ARG(*ar, pitch);
    GDN_MEM(sidx);
    GDN_MEM(inter);
    CV_ARG(*ar, cache_slots);
    CV_ARG(*ar, cache_steps);
    GDN_MEM(cidx);
    GDN_MEM(o);
    CV_ARG(*ar, o_stride);
    CV_ARG(*ar, n_seqs);
    CV_ARG(*ar, total);
    CV_ARG(*ar, HV);
    CV_ARG(*ar, group);
    CV_ARG(*ar, scale);
    CV_ARG(*ar, spb);
    CV_ARG(*ar, spt);
    CV_ARG(*ar, fl);
    CV_ARG(*ar, chunk_min);
    CV_ARG(*ar, check);
#undef GDN_MEM
}

/* Which kernels run: the host decides from what it knows about the lengths. */
typedef struct gdn_plan {
    int recurrent;     /* launch the token kernel */
    int chunked;       /* launch the chunked kernel */
    int64_t chunk_min; /* sequences with at least this many tokens are the chunked kernel's */
} gdn_plan;

/* Enqueues the operation on device buffers (validated) on the chain. With a
 * check flag on the chain the index check runs first and every kernel skips
 * its writes if a check bit is set. */
static clvarlen_status gdn_enqueue(cv_chain *c, const cv_gdn_problem *p, const gdn_bufs *d,
                                   const gdn_tiles *t, const gdn_plan *plan)
{
    clvarlen_context *ctx = c->ctx;
    clvarlen_status st;
    cl_mem check = c->flag;
    const int flags = gdn_flags(d, p, check);

    if (check) {
        if (d->cu.m) {
            st = cv_chain_check_cu_seqlens(c, d->cu.m, (size_t)d->cu.off, p->n_seqs,
                                           p->total_tokens);
            if (st != CLVARLEN_SUCCESS)
                return st;
        }
        if (p->n_seqs > 0 && (d->sidx.m || d->inter.m)) {
            cl_kernel kc;
            st = gdn_kernel(ctx, p, t, "gdn_check", &kc);
            if (st != CLVARLEN_SUCCESS)
                return st;
            cv_args ar = cv_args_begin(kc);
            cl_long fixed = p->fixed_seqlen, n_seqs = p->n_seqs, total = p->total_tokens;
            cl_long slots = p->slots, cache_slots = p->cache_slots;
            cl_int cache_steps = p->cache_steps, fl = flags;
            CV_ARG(ar, d->cu.m);
            CV_ARG(ar, d->cu.off);
            CV_ARG(ar, fixed);
            CV_ARG(ar, n_seqs);
            CV_ARG(ar, total);
            CV_ARG(ar, d->sidx.m);
            CV_ARG(ar, d->sidx.off);
            CV_ARG(ar, slots);
            CV_ARG(ar, d->cidx.m);
            CV_ARG(ar, d->cidx.off);
            CV_ARG(ar, cache_slots);
            CV_ARG(ar, cache_steps);
            CV_ARG(ar, fl);
            CV_ARG(ar, check);
            if ((st = cv_cl_check(ctx, ar.err, "gdn_check: clSetKernelArg")) != CLVARLEN_SUCCESS)
                return st;
            size_t local = 64, global = (size_t)p->n_seqs;
            if ((st = cv_chain_run(c, kc, "gdn_check", 1, &global, &local)) != CLVARLEN_SUCCESS)
                return st;
        }
    }

    for (int pass = 0; pass < 2; pass++) {
        const int chunked = pass == 1;
        if (chunked ? !plan->chunked : !plan->recurrent)
            continue;
        cl_kernel kernel;
        st = gdn_kernel(ctx, p, t, chunked ? "gdn_chunked" : "gdn_recurrent", &kernel);
        if (st != CLVARLEN_SUCCESS)
            return st;
        cv_args ar = cv_args_begin(kernel);
        /* the token kernel leaves sequences of chunk_min tokens or more to the chunked one */
        gdn_set_args(&ar, p, d, flags, plan->chunked ? plan->chunk_min : 0, check);
        if ((st = cv_cl_check(ctx, ar.err, "gated delta: clSetKernelArg")) != CLVARLEN_SUCCESS)
            return st;
        const int tile = chunked ? t->cvt : t->vt;
        const size_t local = (size_t)(chunked ? t->cwg : t->wg);
        const size_t groups = (size_t)p->n_seqs * (size_t)p->HV * (size_t)((p->V + tile - 1) / tile);
        const size_t global = groups * local;
        st = cv_chain_run(c, kernel, chunked ? "gdn_chunked" : "gdn_recurrent", 1, &global,
                          &local);
        if (st != CLVARLEN_SUCCESS)
            return st;
    }
    return CLVARLEN_SUCCESS;
}

/* The chunked kernel's threshold and whether it is allowed at all. */
static clvarlen_status gdn_chunk_policy(clvarlen_context *ctx, const char *fn,
                                        const clvarlen_gdn_params *pa, const cv_gdn_problem *p,
                                        int has_inter, const gdn_tiles *t, int64_t *chunk_min)
{
    *chunk_min = 0; /* 0: never chunked */
    if (has_inter || pa->algorithm == CLVARLEN_GDN_RECURRENT)
        return CLVARLEN_SUCCESS;
    if (t->cvt == 0) {
        if (pa->algorithm == CLVARLEN_GDN_CHUNKED)
            return cv_error(ctx, CLVARLEN_ERROR_UNSUPPORTED,
                            "%s: the chunked algorithm needs %zu bytes of local memory for K = "
                            "%d; the device has %llu",
                            fn, gdn_chunk_local_bytes((int)p->K, 1, t->ks), (int)p->K,
                            (unsigned long long)ctx->device.local_mem_bytes);
        return CLVARLEN_SUCCESS;
    }
    *chunk_min = pa->algorithm == CLVARLEN_GDN_CHUNKED ? 1 : t->chunk_min; /* 0: never */
    return CLVARLEN_SUCCESS;
}

static clvarlen_status gdn_mem_fits(clvarlen_context *ctx, const char *fn, const char *what,
                                    cl_mem m, size_t off, size_t bytes)
{
    size_t size = 0;
    cl_int err = clGetMemObjectInfo(m, CL_MEM_SIZE, sizeof size, &size, NULL);
    if (err != CL_SUCCESS)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: %s is not a valid buffer (%s)",
                        fn, what, cv_cl_error_name(err));
    if (off > size || bytes > size - off)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: %s needs %zu bytes from offset %zu but the buffer has %zu", fn, what,
                        bytes, off, size);
    return CLVARLEN_SUCCESS;
}

/* The host-memory entry point on an OpenCL context. Only the pool slots and
 * cache slots that the batch uses travel, packed one per sequence. */
static clvarlen_status gdn_host_cl(clvarlen_context *ctx, const char *fn,
                                   const clvarlen_gdn_params *pa, const cv_gdn_problem *p)
{
    const int64_t N = p->n_seqs, T = p->total_tokens, HV = p->HV, K = p->K, V = p->V;
    const size_t es = cv_dtype_size(p->dtype), ses = cv_dtype_size(p->state_dtype);
    const size_t slot_bytes = (size_t)(HV * K * V) * ses;
    clvarlen_status st = CLVARLEN_SUCCESS;
    gdn_bufs d;
    memset(&d, 0, sizeof d);
    int32_t *dsidx = NULL, *dcidx = NULL;
    cl_event done = NULL;

    gdn_tiles t;
    gdn_resolve_tiles(ctx, (int)K, (int)V, &t);
    gdn_plan plan = {0, 0, 0};
    if ((st = gdn_chunk_policy(ctx, fn, pa, p, p->inter != NULL, &t, &plan.chunk_min)) !=
        CLVARLEN_SUCCESS)
        return st;

    dsidx = malloc((size_t)N * sizeof *dsidx + 1);
    dcidx = malloc((size_t)N * sizeof *dcidx + 1);
    if (!dsidx || !dcidx) {
        st = cv_error(ctx, CLVARLEN_ERROR_OUT_OF_MEMORY, "%s: out of memory", fn);
        goto out;
    }
    int64_t n_pool = 0, n_cache = 0;
    for (int64_t n = 0; n < N; n++) {
        int64_t bos, eos;
        cv_gdn_bounds(p, n, &bos, &eos);
        const int64_t L = eos - bos;
        if (L > 0 && plan.chunk_min > 0 && L >= plan.chunk_min)
            plan.chunked = 1;
        else if (L > 0)
            plan.recurrent = 1;
        int64_t s = p->state_pool ? (p->state_indices ? p->state_indices[n] : n) : -1;
        dsidx[n] = (s >= 0 && L > 0) ? (int32_t)n_pool++ : -1;
        int64_t c = p->inter ? (p->cache_indices ? p->cache_indices[n] : n) : -1;
        dcidx[n] = (c >= 0 && L > 0) ? (int32_t)n_cache++ : -1;
    }
    if (!plan.chunked)
        plan.chunk_min = 0;

#define UPLOAD(field, bytes, host)                                                             \
    do {                                                                                       \
        if ((st = cv_buffer(ctx, (bytes), (host), &d.field.m)) != CLVARLEN_SUCCESS)            \
            goto out;                                                                          \
    } while (0)
    UPLOAD(A_log, (size_t)HV * sizeof(float), p->A_log);
    UPLOAD(dt_bias, (size_t)HV * cv_dtype_size(p->bias_dtype), p->dt_bias);
    UPLOAD(a, cv_span_bytes(p->dtype, HV, T, p->a_stride), p->a);
    UPLOAD(b, cv_span_bytes(p->dtype, HV, T, p->b_stride), p->b);
    UPLOAD(q, cv_span_bytes(p->dtype, p->H * K, T, p->q_stride), p->q);
    UPLOAD(k, cv_span_bytes(p->dtype, p->H * K, T, p->k_stride), p->k);
    UPLOAD(v, cv_span_bytes(p->dtype, HV * V, T, p->v_stride), p->v);
    if (p->cu_seqlens)
        UPLOAD(cu, (size_t)(N + 1) * sizeof(int32_t), p->cu_seqlens);
    if (n_pool > 0) {
        UPLOAD(pool, (size_t)n_pool * slot_bytes, NULL);
        UPLOAD(sidx, (size_t)N * sizeof(int32_t), dsidx);
        for (int64_t n = 0; n < N; n++) {
            if (dsidx[n] < 0)
                continue;
            int64_t s = p->state_indices ? p->state_indices[n] : n;
            const char *src = (const char *)p->state_pool + (size_t)(s * p->slot_pitch) * ses;
            cl_int err = clEnqueueWriteBuffer(ctx->queue, d.pool.m, CL_FALSE,
                                              (size_t)dsidx[n] * slot_bytes, slot_bytes, src, 0,
                                              NULL, NULL);
            if ((st = cv_cl_check(ctx, err, "clEnqueueWriteBuffer(state)")) != CLVARLEN_SUCCESS)
                goto out;
        }
    }
    if (n_cache > 0) {
        UPLOAD(inter, (size_t)n_cache * (size_t)p->cache_steps * slot_bytes, NULL);
        UPLOAD(cidx, (size_t)N * sizeof(int32_t), dcidx);
    }
    UPLOAD(o, (size_t)T * (size_t)(HV * V) * es, NULL);
#undef UPLOAD

    cv_gdn_problem dp = *p;
    dp.o_stride = HV * V;
    dp.slots = n_pool;
    dp.slot_pitch = HV * K * V;
    dp.cache_slots = n_cache;
    cv_chain chain;
    cv_chain_begin(&chain, ctx, 0, NULL, false);
    st = gdn_enqueue(&chain, &dp, &d, &t, &plan);
    if ((st = cv_chain_end(&chain, fn, st, &done)) != CLVARLEN_SUCCESS)
        goto out;
    /* outputs change only once the kernels succeeded: the read waits on them
     * and fails without writing if they failed */
    const size_t o_row_b = (size_t)(HV * V) * es;
    if ((st = cv_read_rows(ctx, d.o.m, T, o_row_b, o_row_b, p->o, (size_t)p->o_stride * es, 1,
                           &done)) != CLVARLEN_SUCCESS)
        goto out;
    for (int64_t n = 0; n < N; n++) {
        cl_int err = CL_SUCCESS;
        if (dsidx[n] >= 0 && p->write_back) {
            int64_t s = p->state_indices ? p->state_indices[n] : n;
            char *dst = (char *)p->state_pool + (size_t)(s * p->slot_pitch) * ses;
            err = clEnqueueReadBuffer(ctx->queue, d.pool.m, CL_FALSE,
                                      (size_t)dsidx[n] * slot_bytes, slot_bytes, dst, 0, NULL,
                                      NULL);
        }
        if (err == CL_SUCCESS && dcidx[n] >= 0) {
            int64_t c = p->cache_indices ? p->cache_indices[n] : n;
            int64_t bos, eos;
            cv_gdn_bounds(p, n, &bos, &eos);
            const size_t steps = (size_t)CV_MIN(eos - bos, (int64_t)p->cache_steps);
            const size_t cache_slot_bytes = (size_t)p->cache_steps * slot_bytes;
            err = clEnqueueReadBuffer(ctx->queue, d.inter.m, CL_FALSE,
                                      (size_t)dcidx[n] * cache_slot_bytes, steps * slot_bytes,
                                      (char *)p->inter + (size_t)c * cache_slot_bytes, 0, NULL,
                                      NULL);
        }
        if ((st = cv_cl_check(ctx, err, "clEnqueueReadBuffer(state)")) != CLVARLEN_SUCCESS)
            goto out;
    }
    st = cv_cl_check(ctx, clFinish(ctx->queue), "clFinish");

out:
    if (st != CLVARLEN_SUCCESS)
        clFinish(ctx->queue); /* no pending transfer may outlive the call */
    if (done)
        clReleaseEvent(done);
    cl_mem *all[] = {&d.A_log.m, &d.dt_bias.m, &d.a.m,    &d.b.m,    &d.q.m,
                     &d.k.m,     &d.v.m,       &d.cu.m,   &d.pool.m, &d.sidx.m,
                     &d.inter.m, &d.cidx.m,    &d.o.m};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        cv_release(all[i]);
    free(dsidx);
    free(dcidx);
    return st;
}

#endif /* CLVARLEN_HAVE_OPENCL */

/* ------------------------------------------------------------------ entry points */

clvarlen_status clvarlen_gated_delta_rule(clvarlen_context *context,
                                          const clvarlen_gdn_params *params, const float *A_log,
                                          const void *dt_bias, const void *a, const void *b,
                                          const void *q, const void *k, const void *v,
                                          const int32_t *cu_seqlens, void *state_pool,
                                          const int32_t *state_indices,
                                          void *intermediate_states, const int32_t *cache_indices,
                                          void *o)
{
    static const char fn[] = "clvarlen_gated_delta_rule";
    CV_ENTER(context);
    cv_gdn_problem p;
    clvarlen_status st =
        gdn_check_params(context, fn, params, cu_seqlens != NULL, state_pool != NULL,
                         state_indices != NULL, intermediate_states != NULL,
                         cache_indices != NULL, &p);
    if (st != CLVARLEN_SUCCESS)
        return st;
    p.cu_seqlens = cu_seqlens;
    p.A_log = A_log;
    p.dt_bias = dt_bias;
    p.a = a;
    p.b = b;
    p.q = q;
    p.k = k;
    p.v = v;
    p.o = o;
    p.state_pool = state_pool;
    p.state_indices = state_pool ? state_indices : NULL;
    p.inter = intermediate_states;
    p.cache_indices = intermediate_states ? cache_indices : NULL;
    if (p.total_tokens > 0) {
        const struct {
            const char *name;
            const void *ptr;
        } need[] = {{"A_log", A_log}, {"dt_bias", dt_bias}, {"a", a}, {"b", b},
                    {"q", q},         {"k", k},             {"v", v}, {"o", o}};
        for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
            if (!need[i].ptr)
                return cv_error(context, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: %s is NULL", fn,
                                need[i].name);
    }
    if ((st = gdn_check_host_arrays(context, fn, &p)) != CLVARLEN_SUCCESS)
        return st;
    if (p.total_tokens == 0 || p.n_seqs == 0)
        return CLVARLEN_SUCCESS;

#if CLVARLEN_HAVE_OPENCL
    if (cv_use_cl(context))
        return gdn_host_cl(context, fn, params, &p);
#endif
    st = cv_cpu_gated_delta_rule(context->base.pool, &p);
    if (st != CLVARLEN_SUCCESS)
        return cv_error(context, st, "%s: out of memory for the CPU scratch", fn);
    return CLVARLEN_SUCCESS;
}

#if CLVARLEN_HAVE_OPENCL
clvarlen_status clvarlen_cl_gated_delta_rule(
    clvarlen_context *context, const clvarlen_gdn_params *params, cl_mem A_log,
    size_t A_log_offset, cl_mem dt_bias, size_t dt_bias_offset, cl_mem a, size_t a_offset,
    cl_mem b, size_t b_offset, cl_mem q, size_t q_offset, cl_mem k, size_t k_offset, cl_mem v,
    size_t v_offset, cl_mem cu_seqlens, size_t cu_offset, cl_mem state_pool,
    size_t state_offset, cl_mem state_indices, size_t state_indices_offset,
    cl_mem intermediate_states, size_t intermediate_offset, cl_mem cache_indices,
    size_t cache_indices_offset, cl_mem o, size_t o_offset, cl_uint num_events,
    const cl_event *wait_list, cl_event *event)
{
    static const char fn[] = "clvarlen_cl_gated_delta_rule";
    CV_ENTER(context);
    if (event)
        *event = NULL;
    clvarlen_status st = cv_cl_enter(context, fn, num_events, wait_list);
    if (st != CLVARLEN_SUCCESS)
        return st;
    cv_gdn_problem p;
    st = gdn_check_params(context, fn, params, cu_seqlens != NULL, state_pool != NULL,
                          state_indices != NULL, intermediate_states != NULL,
                          cache_indices != NULL, &p);
    if (st != CLVARLEN_SUCCESS)
        return st;

    const int64_t N = p.n_seqs, T = p.total_tokens, H = p.H, HV = p.HV, K = p.K, V = p.V;
    const size_t es = cv_dtype_size(p.dtype), ses = cv_dtype_size(p.state_dtype);
    const size_t bes = cv_dtype_size(p.bias_dtype);
    gdn_bufs d;
    memset(&d, 0, sizeof d);
    const struct {
        const char *name;
        cl_mem m;
        size_t off, align, bytes;
        gdn_mem *dst;
        int needed;
    } mems[] = {
        {"A_log", A_log, A_log_offset, 4, (size_t)HV * 4, &d.A_log, T > 0},
        {"dt_bias", dt_bias, dt_bias_offset, bes, (size_t)HV * bes, &d.dt_bias, T > 0},
        {"a", a, a_offset, es, cv_span_bytes(p.dtype, HV, T, p.a_stride), &d.a, T > 0},
        {"b", b, b_offset, es, cv_span_bytes(p.dtype, HV, T, p.b_stride), &d.b, T > 0},
        {"q", q, q_offset, es, cv_span_bytes(p.dtype, H * K, T, p.q_stride), &d.q, T > 0},
        {"k", k, k_offset, es, cv_span_bytes(p.dtype, H * K, T, p.k_stride), &d.k, T > 0},
        {"v", v, v_offset, es, cv_span_bytes(p.dtype, HV * V, T, p.v_stride), &d.v, T > 0},
        {"cu_seqlens", cu_seqlens, cu_offset, 4, (size_t)(N + 1) * 4, &d.cu, 0},
        {"state_pool", state_pool, state_offset, ses,
         p.slots > 0 ? (size_t)((p.slots - 1) * p.slot_pitch + HV * K * V) * ses : 0, &d.pool,
         0},
        {"state_indices", state_pool ? state_indices : NULL, state_indices_offset, 4,
         (size_t)N * 4, &d.sidx, 0},
        {"intermediate_states", intermediate_states, intermediate_offset, ses,
         (size_t)p.cache_slots * (size_t)p.cache_steps * (size_t)(HV * K * V) * ses, &d.inter,
         0},
        {"cache_indices", intermediate_states ? cache_indices : NULL, cache_indices_offset, 4,
         (size_t)N * 4, &d.cidx, 0},
        {"o", o, o_offset, es, cv_span_bytes(p.dtype, HV * V, T, p.o_stride), &d.o, T > 0},
    };
    for (size_t i = 0; i < sizeof mems / sizeof mems[0]; i++) {
        if (!mems[i].m) {
            if (mems[i].needed)
                return cv_error(context, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: %s is NULL", fn,
                                mems[i].name);
            continue;
        }
        if ((st = cv_check_offset(context, fn, mems[i].name, mems[i].off, mems[i].align)) !=
            CLVARLEN_SUCCESS)
            return st;
        if ((st = gdn_mem_fits(context, fn, mems[i].name, mems[i].m, mems[i].off,
                               mems[i].bytes)) != CLVARLEN_SUCCESS)
            return st;
        mems[i].dst->m = mems[i].m;
        mems[i].dst->off = mems[i].off;
    }

    gdn_tiles t;
    gdn_resolve_tiles(context, (int)K, (int)V, &t);
    gdn_plan plan = {0, 0, 0};
    if ((st = gdn_chunk_policy(context, fn, params, &p, intermediate_states != NULL, &t,
                               &plan.chunk_min)) != CLVARLEN_SUCCESS)
        return st;
    if (T > 0 && N > 0) {
        if (!cu_seqlens) { /* fixed length: every sequence takes the same kernel */
            plan.chunked = plan.chunk_min > 0 && p.fixed_seqlen >= plan.chunk_min;
            plan.recurrent = !plan.chunked;
        } else {
            plan.chunked = plan.chunk_min > 0 && T >= plan.chunk_min;
            plan.recurrent = !(plan.chunk_min == 1);
        }
    }
    if (!plan.chunked)
        plan.chunk_min = 0;

    const bool checks = context->device_checks && N > 0 && (d.cu.m || d.sidx.m || d.inter.m);
    cv_chain chain;
    st = cv_chain_begin(&chain, context, num_events, wait_list, checks);
    if (st == CLVARLEN_SUCCESS)
        st = gdn_enqueue(&chain, &p, &d, &t, &plan);
    return cv_chain_end(&chain, fn, st, event);
}
#endif
