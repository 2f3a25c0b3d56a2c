/* float64 oracle for varlen attention: softmax written the textbook way
 * (max, exponentials, sum) over the keys each query sees. */
#include "attention-ref.h"

#include <math.h>
#include <stdlib.h>

#include "kit.h"

void attention_ref_forward(const clvarlen_attention_params *p, const void *q, const void *k,
                           const void *v, const int32_t *cu_q, const int32_t *cu_k,
                           const int32_t *q_pos, double *o_ref, double *lse_ref)
{
    const int64_t hq = p->heads_q, hk = p->heads_kv, d = p->head_dim;
    const int64_t dv = p->head_dim_v ? p->head_dim_v : p->head_dim;
    const int64_t qs = p->q_stride ? p->q_stride : hq * d;
    const int64_t ks = p->k_stride ? p->k_stride : hk * d;
    const int64_t vs = p->v_stride ? p->v_stride : hk * dv;
    const double scale = p->scale != 0.0f ? (double)p->scale : 1.0 / sqrt((double)d);
    const double cap = p->softcap;
    int64_t max_lk = 0;
    for (int64_t s = 0; s < p->n_seqs; s++)
        if (cu_k[s + 1] - cu_k[s] > max_lk)
            max_lk = cu_k[s + 1] - cu_k[s];
    double *sc = malloc(sizeof(double) * (size_t)(max_lk > 0 ? max_lk : 1));
    for (int64_t s = 0; s < p->n_seqs; s++) {
        const int64_t q0 = cu_q[s], k0 = cu_k[s];
        const int64_t lq = cu_q[s + 1] - q0, lk = cu_k[s + 1] - k0;
        for (int64_t h = 0; h < hq; h++) {
            const int64_t kh = h / (hq / hk);
            for (int64_t i = 0; i < lq; i++) {
                const int64_t t = q0 + i;
                const int64_t pos = q_pos ? (int64_t)q_pos[t] : i + lk - lq;
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
                               tu_get(k, p->dtype, (size_t)((k0 + j) * ks + kh * d + c));
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
                        orow[c] += w * tu_get(v, p->dtype, (size_t)((k0 + j) * vs + kh * dv + c));
                }
                if (lse_ref)
                    lse_ref[h * p->total_q + t] = mx + log(sum);
            }
        }
    }
    free(sc);
}

static double sane(float x)
{
    return (x > -INFINITY && x < INFINITY) ? (double)x : -INFINITY;
}

void attention_ref_merge(clvarlen_dtype dtype, int64_t n_parts, int64_t tokens, int32_t heads,
                         int32_t dv, const void *const *o_parts, const float *const *lse_parts,
                         double *o_ref, double *lse_ref)
{
    for (int64_t t = 0; t < tokens; t++) {
        for (int64_t h = 0; h < heads; h++) {
            const int64_t li = h * tokens + t;
            double mx = -INFINITY;
            for (int64_t p = 0; p < n_parts; p++)
                if (sane(lse_parts[p][li]) > mx)
                    mx = sane(lse_parts[p][li]);
            double *orow = o_ref + (t * heads + h) * dv;
            for (int64_t c = 0; c < dv; c++)
                orow[c] = 0.0;
            if (mx == -INFINITY) {
                if (lse_ref)
                    lse_ref[li] = -INFINITY;
                continue;
            }
            double sum = 0.0;
            for (int64_t p = 0; p < n_parts; p++)
                if (sane(lse_parts[p][li]) != -INFINITY)
                    sum += exp(sane(lse_parts[p][li]) - mx);
            const double total = mx + log(sum);
            for (int64_t p = 0; p < n_parts; p++) {
                double x = sane(lse_parts[p][li]);
                if (x == -INFINITY)
                    continue;
                double w = exp(x - total);
                for (int64_t c = 0; c < dv; c++)
                    orow[c] += w * tu_get(o_parts[p], dtype, (size_t)((t * heads + h) * dv + c));
            }
            if (lse_ref)
                lse_ref[li] = total;
        }
    }
}
