/* Varlen attention on the CPU fallback (SPEC 1), and the resolved call
 * description that lib/attention/attention.c hands to both backends.
 */
#ifndef CLVARLEN_CPU_ATTENTION_H
#define CLVARLEN_CPU_ATTENTION_H

#include "core/core.h"

/* A validated forward call: defaults resolved (strides, scale, head_dim_v). */
typedef struct cv_attn_desc {
    clvarlen_dtype dtype;
    int64_t n_seqs, total_q, total_k;
    int32_t heads_q, heads_kv, head_dim, head_dim_v;
    int64_t q_stride, k_stride, v_stride, o_stride; /* elements, never 0 */
    int32_t max_seqlen_q, max_seqlen_k;             /* 0 = unknown */
    float scale;
    int causal;
    int32_t window_left, window_right;
    float softcap;
    /* Paged K/V (SPEC 1.1; page_size 0: packed K/V). Paged: k and v are the
     * caches [num_pages, page_size, heads_kv, dim] (k_stride = heads_kv *
     * head_dim, v_stride likewise), the cu_seqlens_k argument holds
     * cache_seqlens [n_seqs], total_k is the capacity max_pages * page_size,
     * and row s of the page table starts at element s * pt_stride. */
    int32_t page_size, max_pages;
    int64_t num_pages, pt_stride;
    int32_t num_splits; /* 0 = automatic (the paged decode kernel) */
    /* Dropout (SPEC 1.2; drop_p 0 = off): keep iff the Philox word >= drop_thr,
     * kept probabilities scaled by drop_scale. */
    float drop_p, drop_scale;
    uint32_t drop_thr;
    uint64_t drop_seed, drop_offset;
} cv_attn_desc;

/* A validated backward call: the forward's description plus the gradients'
 * layout (strides resolved, never 0). */
typedef struct cv_bwd_desc {
    cv_attn_desc a;
    int64_t do_stride, dq_stride, dk_stride, dv_stride;
    clvarlen_dtype grad_dtype; /* a.dtype, or f32 */
} cv_bwd_desc;

/* Philox4x32-10 (Salmon et al. 2011), the dropout generator of SPEC 1.2. */
static inline void cv_philox4x32_10(uint32_t c[4], uint32_t k0, uint32_t k1)
{
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c[0];
        uint64_t p1 = (uint64_t)0xCD9E8D57u * c[2];
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c[1] ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c[3] ^ k1;
        c[0] = n0;
        c[1] = (uint32_t)p1;
        c[2] = n2;
        c[3] = (uint32_t)p0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
}

/* The dropout factor of (query head h, packed query t, packed key u): 0 or
 * drop_scale (SPEC 1.2). Only called with d->drop_p > 0. */
static inline float cv_dropout_factor(const cv_attn_desc *d, int32_t h, int64_t t, int64_t u)
{
    uint32_t c[4] = {(uint32_t)(u >> 2), (uint32_t)t, (uint32_t)h, (uint32_t)d->drop_offset};
    cv_philox4x32_10(c, (uint32_t)d->drop_seed,
                     (uint32_t)(d->drop_seed >> 32) ^ (uint32_t)(d->drop_offset >> 32));
    return c[u & 3] >= d->drop_thr ? d->drop_scale : 0.0f;
}

/* The keys query position `pos` sees in a sequence of lk keys: [*lo, *hi]
 * (empty when *lo > *hi). 64-bit so that pos +- window cannot overflow. */
static inline void cv_attn_visible(const cv_attn_desc *desc, int64_t pos, int64_t lk, int64_t *lo,
                                   int64_t *hi)
{
    int64_t a = 0, b = lk - 1;
    if (desc->window_left >= 0)
        a = CV_MAX(a, pos - desc->window_left);
    if (desc->causal)
        b = CV_MIN(b, pos);
    if (desc->window_right >= 0)
        b = CV_MIN(b, pos + desc->window_right);
    *lo = a;
    *hi = b;
}

/* A validated cache append (SPEC 1.1): strides resolved (never 0). */
typedef struct cv_append_desc {
    clvarlen_dtype dtype, cache_dtype;
    int64_t n_tokens, num_pages;
    int32_t page_size, heads_kv, head_dim, head_dim_v;
    int64_t k_stride, v_stride;
} cv_append_desc;

/** Forward on host memory; inputs already validated (cu_seqlens included). */
clvarlen_status cv_cpu_attention_forward(clvarlen_context *ctx, const cv_attn_desc *desc,
                                         const void *q, const void *k, const void *v,
                                         const int32_t *cu_seqlens_q, const int32_t *cu_seqlens_k,
                                         const int32_t *q_pos, void *o, float *lse);

/** Backward on host memory (SPEC 1.2); inputs validated. Deterministic: a
 * key-tile-parallel pass for dk, dv and a query-tile-parallel pass for dq. */
clvarlen_status cv_cpu_attention_backward(clvarlen_context *ctx, const cv_bwd_desc *bd,
                                          const void *q, const void *k, const void *v,
                                          const void *o, const void *dout, const float *lse,
                                          const int32_t *cu_q, const int32_t *cu_k,
                                          const int32_t *q_pos, void *dq, void *dk, void *dv);

/**
 * Merge of n_parts partials given as pointer arrays (o_parts[p] [tokens,
 * heads, dv], lse_parts[p] [heads, tokens]). Each output element depends only
 * on the same element of the parts, so o may be one of o_parts[p] and lse one
 * of lse_parts[p] (in-place two-way merge).
 */
clvarlen_status cv_cpu_attention_merge(clvarlen_context *ctx, clvarlen_dtype dtype,
                                       int64_t n_parts, int64_t tokens, int32_t heads,
                                       int32_t head_dim_v, const void *const *o_parts,
                                       const float *const *lse_parts, void *o, float *lse);

/** Cache append on host memory; slots already validated (in range or -1, no duplicates). */
void cv_cpu_kv_append(const cv_append_desc *a, const void *k, const void *v,
                      const int64_t *slots, void *k_cache, void *v_cache);

/**
 * Paged forward on host memory (d->page_size > 0; inputs validated): each
 * batch of rows is gathered into contiguous K/V (bounded scratch) and run
 * through cv_cpu_attention_forward, so both paths share one attention
 * kernel. cache_seqlens and page_table as SPEC 1.1.
 */
clvarlen_status cv_cpu_paged_forward(clvarlen_context *ctx, const cv_attn_desc *d, const void *q,
                                     const void *k_cache, const void *v_cache,
                                     const int32_t *cu_seqlens_q, const int32_t *page_table,
                                     const int32_t *cache_seqlens, void *o, float *lse);

#endif
