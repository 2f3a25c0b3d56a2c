/* float64 oracle for the paged KV cache (SPEC 1.1): attention computed naively
 * per (row, head, query), reading every key through the page table itself
 * (no gather into contiguous K/V, nothing from lib/), and the cache append as
 * a plain loop over tokens.
 */
#ifndef CLVARLEN_PAGED_REF_H
#define CLVARLEN_PAGED_REF_H

#include <stdint.h>

#include <clvarlen/clvarlen.h>

/**
 * o_ref [total_q, heads_q, dv] (contiguous) and lse_ref [heads_q, total_q]
 * (may be NULL) from q (params' dtype and q_stride), the caches and the page
 * table as params describes. Only the first ceil(cache_seqlens[b] / page_size)
 * entries of page-table row b are read; the inputs must be valid (the oracle
 * checks nothing). Rows with no visible key get o = 0 and lse = -inf.
 */
void paged_ref_forward(const clvarlen_paged_params *params, const void *q, const void *k_cache,
                       const void *v_cache, const int32_t *cu_seqlens_q,
                       const int32_t *page_table, const int32_t *cache_seqlens, double *o_ref,
                       double *lse_ref);

/**
 * The append into caches of params->cache_dtype: token t's k and v rows
 * (params->dtype, strided) go to slot slot_mapping[t], each element rounded
 * once to nearest even; -1 skips the token. Slots must be valid and distinct.
 * Every other byte of the caches is left as it is.
 */
void kv_append_ref(const clvarlen_kv_append_params *params, const void *k, const void *v,
                   const int64_t *slot_mapping, void *k_cache, void *v_cache);

#endif
