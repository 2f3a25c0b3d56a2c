/* float64 oracle for the paged KV cache: softmax written the textbook way (max,
 * exponentials, sum) over the keys each query sees, each key fetched from its
 * page (page_table[b][j / page_size], offset j % page_size). */
#include "paged-ref.h"

#include <math.h>
#include <stdlib.h>

#include "kit.h"

/* Element c of head kh of token j of row b in a cache of `width` elements per token and head. */
static size_t cache_index(const clvarlen_paged_params *p, const int32_t *row_pages, int64_t j,
                          int64_t kh, int64_t width, int64_t c)
{
    const int64_t page = row_pages[j / p->page_size], off = j % p->page_size;
    return (size_t)(((page * p->page_size + off) * p->heads_kv + kh) * width + c);
}

void paged_ref_forward(const clvarlen_paged_params *p, const void *q, const void *k_cache,
                       const void *v_cache, const int32_t *cu_q, const int32_t *page_table,
                       const int32_t *cache_seqlens, double *o_ref, double *lse_ref)
{
    const int64_t hq = p->heads_q, hk = p->heads_kv, d = p->head_dim;
    const int64_t dv = p->head_dim_v ? p->head_dim_v : p->head_dim;
    const int64_t qs = p->q_stride ? p->q_stride : hq * d;
    const int64_t pts = p->page_table_stride ? p->page_table_stride : p->max_pages;
    const double scale = p->scale != 0.0f ? (double)p->scale : 1.0 / sqrt((double)d);
    const double cap = p->softcap;
    int64_t max_lk = 1;
    for (int64_t b = 0; b < p->n_rows; b++)
        if (cache_seqlens[b] > max_lk)
            max_lk = cache_seqlens[b];
    double *sc = malloc(sizeof(double) * (size_t)max_lk);
    for (int64_t b = 0; b < p->n_rows; b++) {
        const int64_t q0 = cu_q[b], lq = cu_q[b + 1] - q0, lk = cache_seqlens[b];
        const int32_t *pages = page_table + b * pts;
        for (int64_t h = 0; h < hq; h++) {
            const int64_t kh = h / (hq / hk);
            for (int64_t i = 0; i < lq; i++) {
                const int64_t t = q0 + i, pos = lk - lq + i;
                double mx = -INFINITY;
                for (int64_t j = 0; j < lk; j++) {
                    int visible = 1;
                    if (p->causal && j > pos)
                        visible = 0;
                    if (p->window_left >= 0 && j < pos - p->window_left)
                        visible = 0;
                    if (p->window_right >= 0 && j > pos + p->window_right)
                        visible = 0;
                    if (!visible) {
                        sc[j] = -INFINITY;
                        continue;
                    }
                    double dot = 0.0;
                    for (int64_t c = 0; c < d; c++)
                        dot += tu_get(q, p->dtype, (size_t)(t * qs + h * d + c)) *
                               tu_get(k_cache, p->dtype, cache_index(p, pages, j, kh, d, c));
                    double x = scale * dot;
                    if (cap > 0.0)
                        x = cap * tanh(x / cap);
                    sc[j] = x;
                    if (x > mx)
                        mx = x;
                }
                double *orow = o_ref + (t * hq + h) * dv;
                for (int64_t c = 0; c < dv; c++)
                    orow[c] = 0.0;
                if (mx == -INFINITY) {
                    if (lse_ref)
                        lse_ref[h * p->total_q + t] = -INFINITY;
                    continue;
                }
                double sum = 0.0;
                for (int64_t j = 0; j < lk; j++)
                    if (sc[j] != -INFINITY)
                        sum += exp(sc[j] - mx);
                for (int64_t j = 0; j < lk; j++) {
                    if (sc[j] == -INFINITY)
                        continue;
                    double w = exp(sc[j] - mx) / sum;
                    for (int64_t c = 0; c < dv; c++)
                        orow[c] +=
                            w * tu_get(v_cache, p->dtype, cache_index(p, pages, j, kh, dv, c));
                }
                if (lse_ref)
                    lse_ref[h * p->total_q + t] = mx + log(sum);
            }
        }
    }
    free(sc);
}

void kv_append_ref(const clvarlen_kv_append_params *p, const void *k, const void *v,
                   const int64_t *slot_mapping, void *k_cache, void *v_cache)
{
    const int64_t hk = p->heads_kv, d = p->head_dim;
    const int64_t dv = p->head_dim_v ? p->head_dim_v : p->head_dim;
    const int64_t ks = p->k_stride ? p->k_stride : hk * d;
    const int64_t vs = p->v_stride ? p->v_stride : hk * dv;
    for (int64_t t = 0; t < p->n_tokens; t++) {
        const int64_t slot = slot_mapping[t];
        if (slot < 0)
            continue;
        /* slot = page * page_size + offset: the cache's token index, [num_pages * page_size) */
        for (int64_t e = 0; e < hk * d; e++)
            tu_set(k_cache, p->cache_dtype, (size_t)(slot * hk * d + e),
                   tu_get(k, p->dtype, (size_t)(t * ks + e)));
        for (int64_t e = 0; e < hk * dv; e++)
            tu_set(v_cache, p->cache_dtype, (size_t)(slot * hk * dv + e),
                   tu_get(v, p->dtype, (size_t)(t * vs + e)));
    }
}
