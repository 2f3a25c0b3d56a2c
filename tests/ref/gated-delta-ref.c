/* The float64 oracle of the gated delta rule (see gated-delta-ref.h). It
 * follows SPEC 3 line by line; it shares no code with lib/cpu. */
#include "gated-delta-ref.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kit.h"

static int64_t or_default(int64_t stride, int64_t row)
{
    return stride ? stride : row;
}

/* offset of (k, v) inside one head's K x V state */
static int64_t at(const clvarlen_gdn_params *p, int64_t k, int64_t v)
{
    return p->state_layout == CLVARLEN_STATE_KV ? k * p->value_dim + v : v * p->key_dim + k;
}

void gdn_ref(const clvarlen_gdn_params *p, const float *A_log, const void *dt_bias, const void *a,
             const void *b, const void *q, const void *k, const void *v, const int32_t *cu,
             const void *state_pool, const int32_t *state_indices,
             const void *intermediate_states, const int32_t *cache_indices, double *o_ref,
             double *pool_ref, double *inter_ref)
{
    const int64_t N = p->n_seqs, H = p->heads_qk, HV = p->heads_v, K = p->key_dim,
                  V = p->value_dim;
    const int64_t qs = or_default(p->q_stride, H * K), ks = or_default(p->k_stride, H * K),
                  vs = or_default(p->v_stride, HV * V), as = or_default(p->a_stride, HV),
                  bs = or_default(p->b_stride, HV);
    const int64_t head = HV * K * V, pitch = or_default(p->state_slot_pitch, head);
    const double scale = p->scale > 0.0f ? (double)p->scale : 1.0 / sqrt((double)K);
    const double spb = p->softplus_beta, spt = p->softplus_threshold;

    if (pool_ref)
        for (int64_t i = 0; i < p->state_slots * pitch; i++)
            pool_ref[i] = tu_get(state_pool, p->state_dtype, (size_t)i);
    if (inter_ref)
        for (int64_t i = 0; i < p->cache_slots * p->cache_steps * head; i++)
            inter_ref[i] = tu_get(intermediate_states, p->state_dtype, (size_t)i);

    double *S = malloc((size_t)(K * V) * sizeof *S);
    double *qv = malloc((size_t)K * sizeof *qv), *kv = malloc((size_t)K * sizeof *kv);
    double *u = malloc((size_t)V * sizeof *u);
    if (!S || !qv || !kv || !u)
        abort(); /* an oracle has no error path; the tests' inputs are small */

    for (int64_t n = 0; n < N; n++) {
        const int64_t bos = cu ? cu[n] : n * p->fixed_seqlen;
        const int64_t eos = cu ? cu[n + 1] : bos + p->fixed_seqlen;
        int64_t slot = -1, cslot = -1;
        if (state_pool)
            slot = state_indices ? state_indices[n] : n;
        if (intermediate_states)
            cslot = cache_indices ? cache_indices[n] : n;
        for (int64_t h = 0; h < HV; h++) {
            const int64_t hq = h / (HV / H);
            /* S[k][v] */
            for (int64_t kk = 0; kk < K; kk++)
                for (int64_t vv = 0; vv < V; vv++)
                    S[kk * V + vv] =
                        slot >= 0 ? tu_get(state_pool, p->state_dtype,
                                           (size_t)(slot * pitch + h * K * V + at(p, kk, vv)))
                                  : 0.0;
            for (int64_t t = bos; t < eos; t++) {
                /* 1. decay */
                double x = tu_get(a, p->dtype, (size_t)(t * as + h)) +
                           tu_get(dt_bias, p->dt_bias_dtype, (size_t)h);
                double sp = spb * x <= spt ? log1p(exp(spb * x)) / spb : x;
                double g = -exp((double)A_log[h]) * sp;
                /* 2. beta */
                double beta = 1.0 / (1.0 + exp(-tu_get(b, p->dtype, (size_t)(t * bs + h))));
                /* 3., 4. q and k */
                double nq = 0.0, nk = 0.0;
                for (int64_t i = 0; i < K; i++) {
                    qv[i] = tu_get(q, p->dtype, (size_t)(t * qs + hq * K + i));
                    kv[i] = tu_get(k, p->dtype, (size_t)(t * ks + hq * K + i));
                    nq += qv[i] * qv[i];
                    nk += kv[i] * kv[i];
                }
                for (int64_t i = 0; i < K; i++) {
                    if (p->use_qk_l2norm) {
                        qv[i] /= sqrt(nq + 1e-6);
                        kv[i] /= sqrt(nk + 1e-6);
                    }
                    qv[i] *= scale;
                }
                /* 5. S <- exp(g) S */
                for (int64_t i = 0; i < K * V; i++)
                    S[i] *= exp(g);
                /* 6. u = beta (v - S^T k) */
                for (int64_t vv = 0; vv < V; vv++) {
                    double s = 0.0;
                    for (int64_t kk = 0; kk < K; kk++)
                        s += S[kk * V + vv] * kv[kk];
                    u[vv] = beta * (tu_get(v, p->dtype, (size_t)(t * vs + h * V + vv)) - s);
                }
                /* 7. S <- S + k u^T */
                for (int64_t kk = 0; kk < K; kk++)
                    for (int64_t vv = 0; vv < V; vv++)
                        S[kk * V + vv] += kv[kk] * u[vv];
                /* 8. o = S^T q */
                for (int64_t vv = 0; vv < V; vv++) {
                    double s = 0.0;
                    for (int64_t kk = 0; kk < K; kk++)
                        s += S[kk * V + vv] * qv[kk];
                    o_ref[(t * HV + h) * V + vv] = s;
                }
                if (cslot >= 0 && t - bos < p->cache_steps && inter_ref)
                    for (int64_t kk = 0; kk < K; kk++)
                        for (int64_t vv = 0; vv < V; vv++)
                            inter_ref[((cslot * p->cache_steps + (t - bos)) * HV + h) * K * V +
                                      at(p, kk, vv)] = S[kk * V + vv];
            }
            if (slot >= 0 && eos > bos && !p->disable_state_update && pool_ref)
                for (int64_t kk = 0; kk < K; kk++)
                    for (int64_t vv = 0; vv < V; vv++)
                        pool_ref[slot * pitch + h * K * V + at(p, kk, vv)] = S[kk * V + vv];
        }
    }
    free(S);
    free(qv);
    free(kv);
    free(u);
}
