/* The float64 oracle of the gated delta rule (SPEC 3), written from the spec
 * and independent of lib/cpu. The test cases built on it are in
 * tests/test-gated-delta.h.
 */
#ifndef CLVARLEN_GATED_DELTA_REF_H
#define CLVARLEN_GATED_DELTA_REF_H

#include <stddef.h>
#include <stdint.h>

#include <clvarlen/clvarlen.h>

/**
 * The recurrence in float64, token by token, exactly as SPEC 3 states it.
 * Inputs are read with the dtypes, strides and layouts of params (as the
 * library reads them). Outputs, all float64:
 *   o_ref [T, HV, V] contiguous;
 *   pool_ref (NULL when state_pool is NULL): the whole pool after the call,
 *     state_slots * pitch elements, starting as a copy of state_pool;
 *   inter_ref (NULL when intermediate_states is NULL): the whole intermediate
 *     buffer after the call, starting as a copy of intermediate_states.
 * Repeated slots with write-back are resolved in sequence order.
 */
void gdn_ref(const clvarlen_gdn_params *params, const float *A_log, const void *dt_bias,
             const void *a, const void *b, const void *q, const void *k, const void *v,
             const int32_t *cu_seqlens, const void *state_pool, const int32_t *state_indices,
             const void *intermediate_states, const int32_t *cache_indices, double *o_ref,
             double *pool_ref, double *inter_ref);

#endif
