/* float64 oracle for varlen attention (SPEC 1): the definition, computed
 * naively per (sequence, head, query) with no tiling and no online softmax,
 * independent of lib/cpu.
 */
#ifndef CLVARLEN_ATTENTION_REF_H
#define CLVARLEN_ATTENTION_REF_H

#include <stdint.h>

#include <clvarlen/clvarlen.h>

/**
 * o_ref [total_q, heads_q, dv] (contiguous) and lse_ref [heads_q, total_q]
 * from q, k, v laid out as params says (dtype, strides; 0 = contiguous).
 * Rows with no visible key get o = 0 and lse = -inf. lse_ref may be NULL.
 */
void attention_ref_forward(const clvarlen_attention_params *params, const void *q, const void *k,
                           const void *v, const int32_t *cu_seqlens_q,
                           const int32_t *cu_seqlens_k, const int32_t *q_pos, double *o_ref,
                           double *lse_ref);

/**
 * Merge of n_parts partials (o_parts[p] [tokens, heads, dv] in dtype,
 * lse_parts[p] [heads, tokens]) in float64: o_ref [tokens, heads, dv],
 * lse_ref [heads, tokens]. +inf/NaN read as -inf; all -inf gives (0, -inf).
 */
void attention_ref_merge(clvarlen_dtype dtype, int64_t n_parts, int64_t tokens, int32_t heads,
                         int32_t dv, const void *const *o_parts, const float *const *lse_parts,
                         double *o_ref, double *lse_ref);

#endif
