/* Paged KV cache on the CPU fallback (SPEC 1.1): the cache append, and the
 * paged forward as "gather each row's cache into contiguous K/V, then the
 * packed forward" (SPEC 1.1 defines the result that way), in batches of rows
 * whose gathered K/V stay within a bounded scratch, so the CPU runs one
 * attention kernel for both layouts.
 */
#include "cpu/attention.h"

#include <stdlib.h>
#include <string.h>

/* Gathered K + V bytes per batch of rows (a longer row still goes alone). */
#define PAGED_SCRATCH_BYTES ((size_t)64 << 20)

void cv_cpu_kv_append(const cv_append_desc *a, const void *k, const void *v,
                      const int64_t *slots, void *k_cache, void *v_cache)
{
    const size_t ies = cv_dtype_size(a->dtype), ces = cv_dtype_size(a->cache_dtype);
    const int64_t kw = (int64_t)a->heads_kv * a->head_dim;
    const int64_t vw = (int64_t)a->heads_kv * a->head_dim_v;
    for (int64_t t = 0; t < a->n_tokens; t++) {
        const int64_t slot = slots[t];
        if (slot < 0)
            continue;
        const char *ks = (const char *)k + (size_t)t * (size_t)a->k_stride * ies;
        const char *vs = (const char *)v + (size_t)t * (size_t)a->v_stride * ies;
        char *kd = (char *)k_cache + (size_t)slot * (size_t)kw * ces;
        char *vd = (char *)v_cache + (size_t)slot * (size_t)vw * ces;
        if (a->dtype == a->cache_dtype) {
            memcpy(kd, ks, (size_t)kw * ies);
            memcpy(vd, vs, (size_t)vw * ies);
            continue;
        }
        for (int64_t e = 0; e < kw; e++)
            cv_store_act(kd, a->cache_dtype, e, cv_load_act(ks, a->dtype, e));
        for (int64_t e = 0; e < vw; e++)
            cv_store_act(vd, a->cache_dtype, e, cv_load_act(vs, a->dtype, e));
    }
}

/* Copies tokens [0, n) of row b's cache (row_bytes per token) to dst. */
static void gather_row(const cv_attn_desc *d, const char *cache, size_t row_bytes,
                       const int32_t *pt_row, int64_t n, char *dst)
{
    for (int64_t j = 0; j < n;) {
        const int64_t page = pt_row[j / d->page_size], off = j % d->page_size;
        const int64_t run = CV_MIN(n - j, d->page_size - off); /* the rest of this page */
        memcpy(dst + (size_t)j * row_bytes,
               cache + ((size_t)page * (size_t)d->page_size + (size_t)off) * row_bytes,
               (size_t)run * row_bytes);
        j += run;
    }
}

clvarlen_status cv_cpu_paged_forward(clvarlen_context *ctx, const cv_attn_desc *d, const void *q,
                                     const void *k_cache, const void *v_cache,
                                     const int32_t *cu_q, const int32_t *page_table,
                                     const int32_t *cache_seqlens, void *o, float *lse)
{
    static const char fn[] = "clvarlen_paged_attention_forward";
    const size_t es = cv_dtype_size(d->dtype);
    const size_t k_row = (size_t)d->heads_kv * (size_t)d->head_dim * es;
    const size_t v_row = (size_t)d->heads_kv * (size_t)d->head_dim_v * es;
    const int64_t n = d->n_seqs;
    /* Scratch: the batch's K and V, cu_seqlens (q and k), and the results
     * (o contiguous, lse [Hq, batch tokens]): o and lse are written only once
     * every batch has succeeded. */
    int64_t max_keys = 0, sum_keys = 0;
    for (int64_t b = 0; b < n; b++) {
        max_keys = CV_MAX(max_keys, (int64_t)cache_seqlens[b]);
        sum_keys += cache_seqlens[b];
    }
    const int64_t budget_keys =
        CV_MAX(max_keys, (int64_t)(PAGED_SCRATCH_BYTES / (k_row + v_row)));
    const int64_t keys_cap = CV_MIN(budget_keys, sum_keys);
    const size_t o_row = (size_t)d->heads_q * (size_t)d->head_dim_v * es;
    char *kbuf = malloc((size_t)CV_MAX(keys_cap, 1) * k_row);
    char *vbuf = malloc((size_t)CV_MAX(keys_cap, 1) * v_row);
    int32_t *cu = malloc((size_t)(n + 1) * 2 * sizeof *cu);
    char *obuf = malloc((size_t)d->total_q * o_row);
    float *lse_b = malloc((size_t)d->heads_q * (size_t)d->total_q * 4);
    float *lse_all = lse ? malloc((size_t)d->heads_q * (size_t)d->total_q * 4) : NULL;
    clvarlen_status st = CLVARLEN_SUCCESS;
    if (!kbuf || !vbuf || !cu || !obuf || !lse_b || (lse && !lse_all)) {
        st = cv_error(ctx, CLVARLEN_ERROR_OUT_OF_MEMORY, "%s: out of memory", fn);
        goto out;
    }
    for (int64_t b0 = 0; b0 < n && st == CLVARLEN_SUCCESS;) {
        /* Rows [b0, b1) whose caches fit the scratch. */
        int32_t *cq = cu, *ck = cu + (n + 1);
        int64_t b1 = b0, keys = 0;
        cq[0] = ck[0] = 0;
        while (b1 < n && (b1 == b0 || keys + cache_seqlens[b1] <= keys_cap)) {
            const int64_t lk = cache_seqlens[b1];
            const int32_t *pt_row = page_table + (size_t)b1 * (size_t)d->pt_stride;
            gather_row(d, k_cache, k_row, pt_row, lk, kbuf + (size_t)keys * k_row);
            gather_row(d, v_cache, v_row, pt_row, lk, vbuf + (size_t)keys * v_row);
            keys += lk;
            cq[b1 - b0 + 1] = cu_q[b1 + 1] - cu_q[b0];
            ck[b1 - b0 + 1] = (int32_t)keys;
            b1++;
        }
        cv_attn_desc sub = *d;
        sub.page_size = 0;
        sub.n_seqs = b1 - b0;
        sub.total_q = cq[b1 - b0];
        sub.total_k = keys;
        sub.k_stride = (int64_t)d->heads_kv * d->head_dim;
        sub.v_stride = (int64_t)d->heads_kv * d->head_dim_v;
        sub.o_stride = (int64_t)d->heads_q * d->head_dim_v;
        sub.max_seqlen_q = 0;
        sub.max_seqlen_k = 0;
        const size_t t0 = (size_t)cu_q[b0];
        const char *qb = (const char *)q + t0 * (size_t)d->q_stride * es;
        if (sub.total_q > 0)
            st = cv_cpu_attention_forward(ctx, &sub, qb, kbuf, vbuf, cq, ck, NULL,
                                          obuf + t0 * o_row, lse_b);
        /* lse of the batch is [Hq, its tokens]: into the call's [Hq, total_q]. */
        if (st == CLVARLEN_SUCCESS && lse && sub.total_q > 0)
            for (int32_t h = 0; h < d->heads_q; h++)
                memcpy(lse_all + (size_t)h * (size_t)d->total_q + t0,
                       lse_b + (size_t)h * (size_t)sub.total_q, (size_t)sub.total_q * 4);
        b0 = b1;
    }
    if (st == CLVARLEN_SUCCESS) {
        for (int64_t t = 0; t < d->total_q; t++)
            memcpy((char *)o + (size_t)t * (size_t)d->o_stride * es, obuf + (size_t)t * o_row,
                   o_row);
        if (lse)
            memcpy(lse, lse_all, (size_t)d->heads_q * (size_t)d->total_q * 4);
    }
out:
    free(kbuf);
    free(vbuf);
    free(cu);
    free(obuf);
    free(lse_b);
    free(lse_all);
    return st;
}
