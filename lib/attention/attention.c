/* Varlen attention (SPEC 1): the public entry points, forward and merge on
 * host memory and on cl_mem buffers. Arguments are validated here, at the
 * boundary; the work goes to the CPU fallback (lib/cpu/attention.c) or to the
 * OpenCL launchers (attention-cl.c).
 */
#include "attention/attention-cl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void attention_defaults(clvarlen_attention_params *p)
{
    memset(p, 0, sizeof *p);
    p->struct_size = (uint32_t)sizeof *p;
    p->dtype = CLVARLEN_DTYPE_F32;
    p->window_left = -1;
    p->window_right = -1;
}

void clvarlen_attention_params_init_sized(clvarlen_attention_params *p, size_t size)
{
    clvarlen_attention_params d;
    attention_defaults(&d);
    cv_struct_init(p, size, &d, sizeof d);
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

/* Shapes and options, common to both entry points (and to the paged forward,
 * lib/attention/paged.c); fills *d. */
clvarlen_status cv_attn_validate(clvarlen_context *ctx, const char *fn,
                                 const clvarlen_attention_params *caller, cv_attn_desc *d)
{
    clvarlen_status st;
    if (!caller)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: params is NULL", fn);
    /* The caller's fields over the defaults (ABI growth, clvarlen.h). */
    clvarlen_attention_params full;
    const clvarlen_attention_params *p = &full;
    attention_defaults(&full);
    if ((st = cv_struct_in(ctx, fn, "params", caller, &full, sizeof full,
                           CLVARLEN_ATTENTION_PARAMS_MIN_SIZE)) != CLVARLEN_SUCCESS)
        return st;
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
    if (!(p->dropout_p >= 0.0f && p->dropout_p < 1.0f))
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: dropout_p must be in [0, 1), got %g", fn, (double)p->dropout_p);

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
    if (p->dropout_p > 0.0f) {
        d->drop_p = p->dropout_p;
        d->drop_thr = (uint32_t)floor((double)p->dropout_p * 4294967296.0);
        d->drop_scale = (float)(1.0 / (1.0 - (double)p->dropout_p));
        d->drop_seed = p->dropout_seed;
        d->drop_offset = p->dropout_offset;
    }
    return CLVARLEN_SUCCESS;
}

clvarlen_status cv_attn_check_max_seqlen(clvarlen_context *ctx, const char *fn, const char *what,
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

/* The extents of the forward's tensors (starts 0), in the order q, k, v,
 * cu_seqlens_q, cu_seqlens_k, q_pos, o, lse. */
static void forward_extents(const cv_attn_desc *d, cv_extent e[8])
{
    size_t es = cv_dtype_size(d->dtype);
    uint64_t hq = (uint64_t)d->heads_q, hk = (uint64_t)d->heads_kv;
    e[0] = cv_extent_rows(0, d->total_q, hq * (uint64_t)d->head_dim * es,
                          (uint64_t)d->q_stride * es);
    e[1] = cv_extent_rows(0, d->total_k, hk * (uint64_t)d->head_dim * es,
                          (uint64_t)d->k_stride * es);
    e[2] = cv_extent_rows(0, d->total_k, hk * (uint64_t)d->head_dim_v * es,
                          (uint64_t)d->v_stride * es);
    e[3] = cv_extent_bytes(0, (uint64_t)(d->n_seqs + 1) * 4);
    e[4] = e[3];
    e[5] = cv_extent_bytes(0, (uint64_t)d->total_q * 4);
    e[6] = cv_extent_rows(0, d->total_q, hq * (uint64_t)d->head_dim_v * es,
                          (uint64_t)d->o_stride * es);
    e[7] = cv_extent_bytes(0, hq * (uint64_t)d->total_q * 4);
}

static const char *const forward_names[8] = {"q",     "k", "v",  "cu_seqlens_q", "cu_seqlens_k",
                                             "q_pos", "o", "lse"};

/* o and lse must not share memory with the inputs or each other. */
static clvarlen_status check_forward_overlap(clvarlen_context *ctx, const char *fn,
                                             const cv_attn_desc *d, const void *q, const void *k,
                                             const void *v, const int32_t *cu_q,
                                             const int32_t *cu_k, const int32_t *q_pos, void *o,
                                             float *lse)
{
    cv_extent e[8];
    forward_extents(d, e);
    const void *ptr[8] = {q, k, v, cu_q, cu_k, q_pos, o, lse};
    cv_region r[8];
    for (int i = 0; i < 8; i++)
        r[i] = cv_host_region(forward_names[i], ptr[i], e[i], i >= 6);
    return cv_check_no_overlap(ctx, fn, r, 8);
}

/* The merge's tensors in the order o_a (or o_parts), lse_a (or lse_parts),
 * o_b, lse_b, o, lse. two_way (merge2): one part each in o_a and o_b, and o
 * may be o_a or o_b exactly, lse lse_a or lse_b (in place); else n_parts in
 * o_parts and lse_parts. */
static void merge_regions(clvarlen_dtype dtype, bool two_way, int64_t n_parts, int64_t tokens,
                          int32_t heads, int32_t dv, cv_region r[6])
{
    int64_t parts = two_way ? 1 : n_parts;
    uint64_t rows = (uint64_t)tokens * (uint64_t)heads;
    uint64_t ob = rows * (uint64_t)dv * cv_dtype_size(dtype), lb = rows * 4;
    static const char *const names[6] = {"o_a/o_parts", "lse_a/lse_parts", "o_b", "lse_b", "o",
                                         "lse"};
    const uint64_t bytes[6] = {(uint64_t)parts * ob, (uint64_t)parts * lb, ob, lb, ob, lb};
    for (int i = 0; i < 6; i++)
        r[i] = (cv_region){.name = names[i], .ext = cv_extent_bytes(0, bytes[i]), .output = i >= 4};
    if (two_way) { /* o_a, o_b and lse_a, lse_b */
        r[4].may_equal = (1u << 0) | (1u << 2);
        r[5].may_equal = (1u << 1) | (1u << 3);
    }
}

static clvarlen_status check_merge_overlap(clvarlen_context *ctx, const char *fn,
                                           clvarlen_dtype dtype, bool two_way, int64_t n_parts,
                                           int64_t tokens, int32_t heads, int32_t dv,
                                           const void *const ptr[6])
{
    cv_region r[6];
    merge_regions(dtype, two_way, n_parts, tokens, heads, dv, r);
    for (int i = 0; i < 6; i++) {
        unsigned eq = r[i].may_equal;
        r[i] = cv_host_region(r[i].name, ptr[i], r[i].ext, r[i].output);
        r[i].may_equal = eq;
    }
    return cv_check_no_overlap(ctx, fn, r, 6);
}

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
    clvarlen_status st = cv_attn_validate(ctx, fn, params, &d);
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
        (st = cv_attn_check_max_seqlen(ctx, fn, "max_seqlen_q", cu_seqlens_q, d.n_seqs,
                               d.max_seqlen_q)) != CLVARLEN_SUCCESS ||
        (st = cv_attn_check_max_seqlen(ctx, fn, "max_seqlen_k", cu_seqlens_k, d.n_seqs,
                               d.max_seqlen_k)) != CLVARLEN_SUCCESS)
        return st;
    if (d.total_q == 0 || d.n_seqs == 0)
        return CLVARLEN_SUCCESS;
    if ((st = check_forward_overlap(ctx, fn, &d, q, k, v, cu_seqlens_q, cu_seqlens_k, q_pos, o,
                                    lse)) != CLVARLEN_SUCCESS)
        return st;
#if CLVARLEN_HAVE_OPENCL
    if (cv_use_cl(ctx))
        return cv_attn_cl_forward_host(ctx, fn, &d, q, k, v, cu_seqlens_q, cu_seqlens_k, q_pos,
                                       NULL, o, lse);
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
    const void *const ptrs[6] = {o_parts, lse_parts, NULL, NULL, o, lse};
    if ((st = check_merge_overlap(ctx, fn, dtype, false, n_parts, tokens, heads, head_dim_v,
                                  ptrs)) != CLVARLEN_SUCCESS)
        return st;
#if CLVARLEN_HAVE_OPENCL
    if (cv_use_cl(ctx) && n_parts > 0)
        return cv_attn_cl_merge_host(ctx, fn, dtype, n_parts, tokens, heads, head_dim_v,
                                     o_parts, lse_parts, NULL, NULL, o, lse);
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
    const void *const ptrs[6] = {o_a, lse_a, o_b, lse_b, o, lse};
    if ((st = check_merge_overlap(ctx, fn, dtype, true, 2, tokens, heads, head_dim_v, ptrs)) !=
        CLVARLEN_SUCCESS)
        return st;
#if CLVARLEN_HAVE_OPENCL
    if (cv_use_cl(ctx))
        return cv_attn_cl_merge_host(ctx, fn, dtype, 2, tokens, heads, head_dim_v, o_a, lse_a,
                                     o_b, lse_b, o, lse);
#endif
    const void *op[2] = {o_a, o_b};
    const float *lp[2] = {lse_a, lse_b};
    return cv_cpu_attention_merge(ctx, dtype, 2, tokens, heads, head_dim_v, op, lp, o, lse);
}

/* ------------------------------------------------------------ cl_mem entry points */

#if CLVARLEN_HAVE_OPENCL

/* The device-side cu_seqlens checks (with checks on), then the forward. */
static clvarlen_status forward_on_chain(cv_chain *c, const char *fn, const cv_attn_desc *d,
                                        const cv_attn_mem *m)
{
    clvarlen_status st;
    if (c->flag) {
        st = cv_chain_check_cu_seqlens(c, m->cu_q, m->cu_q_off, d->n_seqs, d->total_q);
        if (st != CLVARLEN_SUCCESS)
            return st;
        st = cv_chain_check_cu_seqlens(c, m->cu_k, m->cu_k_off, d->n_seqs, d->total_k);
        if (st != CLVARLEN_SUCCESS)
            return st;
    }
    return cv_attn_cl_forward(c, fn, d, m, NULL);
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
    if ((st = cv_attn_validate(ctx, fn, params, &d)) != CLVARLEN_SUCCESS)
        return st;
    size_t es = cv_dtype_size(d.dtype);
    if (!cu_seqlens_q || !cu_seqlens_k)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: cu_seqlens_q or cu_seqlens_k is NULL", fn);
    if (d.total_q > 0 && (!q || !o))
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: q or o is NULL", fn);
    if (d.total_k > 0 && (!k || !v))
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: k or v is NULL", fn);
    cv_extent e[8];
    forward_extents(&d, e);
    const cl_mem mems[8] = {q, k, v, cu_seqlens_q, cu_seqlens_k, q_pos, o, lse};
    const size_t offs[8] = {q_offset,    k_offset,     v_offset, cu_q_offset,
                            cu_k_offset, q_pos_offset, o_offset, lse_offset};
    cv_mem_arg args[8];
    for (int i = 0; i < 8; i++)
        args[i] = (cv_mem_arg){.name = forward_names[i], .mem = mems[i], .offset = offs[i],
                               .align = (i < 3 || i == 6) ? es : 4, .ext = e[i],
                               .output = i >= 6};
    if ((st = cv_check_mem_args(ctx, fn, args, 8)) != CLVARLEN_SUCCESS)
        return st;
    const bool work = d.total_q > 0 && d.n_seqs > 0;
    const cv_attn_mem m = {
        .q = q, .q_off = q_offset,
        .k = k, .k_off = k_offset,
        .v = v, .v_off = v_offset,
        .cu_q = cu_seqlens_q, .cu_q_off = cu_q_offset,
        .cu_k = cu_seqlens_k, .cu_k_off = cu_k_offset,
        .q_pos = q_pos, .q_pos_off = q_pos_offset,
        .o = o, .o_off = o_offset,
        .lse = lse, .lse_off = lse_offset,
    };
    /* With nothing to compute the chain still orders the caller's event
     * after the wait list. */
    cv_chain c;
    st = cv_chain_begin(&c, ctx, num_events, wait_list, event != NULL, ctx->device_checks && work);
    if (st == CLVARLEN_SUCCESS && work)
        st = forward_on_chain(&c, fn, &d, &m);
    return cv_chain_end(&c, fn, st, event);
}

/* Buffers checked, then the merge on a chain after the wait list (only a
 * marker when there are no tokens). */
static clvarlen_status cl_merge_common(clvarlen_context *ctx, const char *fn, clvarlen_dtype dtype,
                                       bool two_way, int64_t n_parts, int64_t tokens,
                                       int32_t heads, int32_t dv,
                                       const cv_attn_merge_mem *m, cl_uint num_events,
                                       const cl_event *wait_list, cl_event *event)
{
    size_t es = cv_dtype_size(dtype);
    cv_region r[6];
    merge_regions(dtype, two_way, n_parts, tokens, heads, dv, r);
    const cl_mem mems[6] = {m->o_a, m->lse_a, m->o_b, m->lse_b, m->o, m->lse};
    const size_t offs[6] = {m->o_a_off, m->lse_a_off, m->o_b_off, m->lse_b_off, m->o_off,
                            m->lse_off};
    cv_mem_arg args[6];
    for (int i = 0; i < 6; i++)
        args[i] = (cv_mem_arg){.name = r[i].name, .mem = mems[i], .offset = offs[i],
                               .align = i % 2 ? 4 : es, .ext = r[i].ext, .output = r[i].output,
                               .may_equal = r[i].may_equal};
    clvarlen_status st = cv_check_mem_args(ctx, fn, args, 6);
    if (st != CLVARLEN_SUCCESS)
        return st;
    cv_chain c;
    st = cv_chain_begin(&c, ctx, num_events, wait_list, event != NULL, false);
    if (st == CLVARLEN_SUCCESS && tokens > 0)
        st = cv_attn_cl_merge(&c, dtype, dtype, (int64_t)heads * dv, n_parts, tokens, heads, dv,
                              m);
    return cv_chain_end(&c, fn, st, event);
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
    const cv_attn_merge_mem m = {
        .o_a = o_parts, .o_a_off = o_parts_offset,
        .lse_a = lse_parts, .lse_a_off = lse_parts_offset,
        .o = o, .o_off = o_offset,
        .lse = lse, .lse_off = lse_offset,
    };
    return cl_merge_common(ctx, fn, dtype, false, n_parts, tokens, heads, head_dim_v, &m,
                           num_events, wait_list, event);
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
    const cv_attn_merge_mem m = {
        .o_a = o_a, .o_a_off = o_a_offset,
        .o_b = o_b, .o_b_off = o_b_offset,
        .lse_a = lse_a, .lse_a_off = lse_a_offset,
        .lse_b = lse_b, .lse_b_off = lse_b_offset,
        .o = o, .o_off = o_offset,
        .lse = lse, .lse_off = lse_offset,
    };
    return cl_merge_common(ctx, fn, dtype, true, 2, tokens, heads, head_dim_v, &m, num_events,
                           wait_list, event);
}

#endif /* CLVARLEN_HAVE_OPENCL */
