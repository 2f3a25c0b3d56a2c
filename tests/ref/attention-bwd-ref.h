/* float64 oracle for the attention backward and dropout (SPEC 1.2): the
 * forward and the gradients computed naively per (sequence, head, query) on
 * float64 tensors, with the dropout mask drawn from a Philox4x32-10 written
 * here from the paper (checked against Random123's known-answer vectors),
 * independent of lib/cpu and cl/.
 */
#ifndef CLVARLEN_ATTENTION_BWD_REF_H
#define CLVARLEN_ATTENTION_BWD_REF_H

#include <stdint.h>

#include <clvarlen/clvarlen.h>

/** Philox4x32-10: out = philox(ctr, key). */
void ref_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

/** The dropout factor Z of (query head h, packed query t, packed key u) under
 * params (SPEC 1.2): 0 (dropped) or the f32 value of 1 / (1 - p); 1 without dropout. */
double ref_dropout_factor(const clvarlen_attention_params *p, int64_t h, int64_t t, int64_t u);

/** Tensor of dtype with token stride `stride` (0 = heads * dim) -> contiguous float64
 * [tokens, heads, dim] (malloc'd; the caller frees). */
double *ref_to_f64(const void *x, clvarlen_dtype dtype, int64_t tokens, int64_t heads,
                   int64_t dim, int64_t stride);

/**
 * Forward on contiguous float64 tensors (q [Tq, Hq, D], k [Tk, Hk, D],
 * v [Tk, Hk, Dv]) with every option of params, dropout included (params'
 * strides and dtype are ignored): o [Tq, Hq, Dv], lse [Hq, Tq] (may be NULL).
 */
void ref_attention_forward64(const clvarlen_attention_params *p, const double *q, const double *k,
                             const double *v, const int32_t *cu_q, const int32_t *cu_k,
                             const int32_t *q_pos, double *o, double *lse);

/**
 * Backward on contiguous float64 tensors: from q, k, v and do [Tq, Hq, Dv]
 * (o and lse recomputed exactly), dq [Tq, Hq, D], dk [Tk, Hk, D], dv [Tk, Hk, Dv].
 */
void ref_attention_backward64(const clvarlen_attention_params *p, const double *q,
                              const double *k, const double *v, const double *dout,
                              const int32_t *cu_q, const int32_t *cu_k, const int32_t *q_pos,
                              double *dq, double *dk, double *dv);

#endif
