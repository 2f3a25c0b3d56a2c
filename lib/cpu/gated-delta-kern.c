/* The CPU gated delta rule's per-token update (gated-delta-isa.h), written
 * once with GCC's vector extensions and compiled per instruction set like
 * attention-kern.c: -DCV_VW=4 (generic), 8 (AVX2), 16 (AVX-512), with
 * -ffp-contract=fast on the x86 levels. Results differ between levels by
 * rounding only (SPEC 4); each level is deterministic.
 */
#include "cpu/gated-delta-isa.h"

#include <string.h>

#include "core/cpu-vec.h"

#define CV_KERN CV_CAT(cv_gdn_kern_, CV_ISA)


/* [K][V]: per block of VW value columns, the decay and S^T k down the block
 * (the block's K x VW floats then sit in L1), u, the update and S^T q. */
static void token_kv(float *restrict S, const float *restrict k, const float *restrict q,
                     const float *restrict v, float beta, float eg, float *restrict o, int64_t K,
                     int64_t V)
{
    int64_t j = 0;
    for (; j + VW <= V; j += VW) {
        vf a = {0};
        for (int64_t i = 0; i < K; i++) {
            vf r = ld(S + i * V + j) * splat(eg);
            st(S + i * V + j, r);
            a += r * splat(k[i]);
        }
        vf u = splat(beta) * (ld(v + j) - a), ov = {0};
        for (int64_t i = 0; i < K; i++) {
            vf r = ld(S + i * V + j) + splat(k[i]) * u;
            st(S + i * V + j, r);
            ov += r * splat(q[i]);
        }
        st(o + j, ov);
    }
    for (; j < V; j++) {
        float a = 0.0f;
        for (int64_t i = 0; i < K; i++) {
            float r = S[i * V + j] * eg;
            S[i * V + j] = r;
            a += r * k[i];
        }
        float u = beta * (v[j] - a), ov = 0.0f;
        for (int64_t i = 0; i < K; i++) {
            float r = S[i * V + j] + k[i] * u;
            S[i * V + j] = r;
            ov += r * q[i];
        }
        o[j] = ov;
    }
}

static inline float hsum(vf x)
{
    float s = 0.0f;
    for (int l = 0; l < VW; l++)
        s += x[l];
    return s;
}

/* [V][K]: per value row, the decay and the dot product with k, u, then the
 * update and the dot product with q while the row is in L1. */
static void token_vk(float *restrict S, const float *restrict k, const float *restrict q,
                     const float *restrict v, float beta, float eg, float *restrict o, int64_t K,
                     int64_t V)
{
    for (int64_t j = 0; j < V; j++) {
        float *restrict row = S + j * K;
        vf a8 = {0};
        int64_t i = 0;
        for (; i + VW <= K; i += VW) {
            vf r = ld(row + i) * splat(eg);
            st(row + i, r);
            a8 += r * ld(k + i);
        }
        float a = hsum(a8);
        for (; i < K; i++) {
            row[i] *= eg;
            a += row[i] * k[i];
        }
        const float u = beta * (v[j] - a);
        vf o8 = {0};
        for (i = 0; i + VW <= K; i += VW) {
            vf r = ld(row + i) + ld(k + i) * splat(u);
            st(row + i, r);
            o8 += r * ld(q + i);
        }
        float ov = hsum(o8);
        for (; i < K; i++) {
            row[i] += k[i] * u;
            ov += row[i] * q[i];
        }
        o[j] = ov;
    }
}

static void token(float *S, const float *k, const float *q, const float *v, float beta, float eg,
                  float *o, int64_t K, int64_t V, int kv)
{
    if (kv)
        token_kv(S, k, q, v, beta, eg, o, K, V);
    else
        token_vk(S, k, q, v, beta, eg, o, K, V);
}

const cv_gdn_kern CV_KERN = {
    .name = CV_STR(CV_ISA),
    .token = token,
};
