/* The gated delta rule (SPEC 3) on the CPU fallback, and the validated
 * problem description that lib/gated-delta/gated-delta.c hands to every backend. */
#ifndef CLVARLEN_CPU_GATED_DELTA_H
#define CLVARLEN_CPU_GATED_DELTA_H

#include "core/core.h"

/* Every field is validated and resolved (strides non-zero, scale set). */
typedef struct cv_gdn_problem {
    clvarlen_dtype dtype;       /* q, k, v, a, b, o */
    clvarlen_dtype bias_dtype;  /* dt_bias */
    clvarlen_dtype state_dtype; /* pool and intermediate states */
    int64_t n_seqs, total_tokens;
    const int32_t *cu_seqlens;  /* NULL: fixed-length sequences of fixed_seqlen tokens */
    int64_t fixed_seqlen;
    int32_t H, HV, K, V;
    int64_t q_stride, k_stride, v_stride, a_stride, b_stride, o_stride;
    int state_kv;               /* 1: [K, V] states, 0: [V, K] */
    int64_t slots, slot_pitch;
    float scale, sp_beta, sp_threshold;
    int l2norm;
    int write_back;             /* !disable_state_update */
    int64_t cache_slots;
    int32_t cache_steps;

    const float *A_log;
    const void *dt_bias, *a, *b, *q, *k, *v;
    void *state_pool;              /* NULL: zero initial states */
    const int32_t *state_indices;  /* NULL with a pool: slot n */
    void *inter;                   /* NULL: no intermediate states */
    const int32_t *cache_indices;  /* NULL with inter: slot n */
    void *o;
} cv_gdn_problem;

/** Tokens [*bos, *eos) of sequence n. */
static inline void cv_gdn_bounds(const cv_gdn_problem *p, int64_t n, int64_t *bos, int64_t *eos)
{
    if (p->cu_seqlens) {
        *bos = p->cu_seqlens[n];
        *eos = p->cu_seqlens[n + 1];
    } else {
        *bos = n * p->fixed_seqlen;
        *eos = *bos + p->fixed_seqlen;
    }
}

/** Runs the recurrence over (sequence, value head) pairs on the pool. Only fails
 * (CLVARLEN_ERROR_OUT_OF_MEMORY, before writing anything) if scratch cannot be allocated. */
clvarlen_status cv_cpu_gated_delta_rule(cv_pool *pool, const cv_gdn_problem *p);

#endif
