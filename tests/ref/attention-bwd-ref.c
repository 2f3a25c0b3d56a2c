/* float64 oracle for the attention backward and dropout (SPEC 1.2). Per
 * (sequence, query head, query row): the scores of every key, the softmax
 * written the textbook way, then the gradient terms of SPEC 1.2 one key at a
 * time. No tiling, no online softmax, no shared code with the library.
 */
#include "attention-bwd-ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kit.h"

void ref_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4])
{
    uint32_t c[4] = {ctr[0], ctr[1], ctr[2], ctr[3]};
    uint32_t k0 = key[0], k1 = key[1];
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c[0];
        uint64_t p1 = (uint64_t)0xCD9E8D57u * c[2];
        uint32_t n[4] = {(uint32_t)(p1 >> 32) ^ c[1] ^ k0, (uint32_t)p1,
                         (uint32_t)(p0 >> 32) ^ c[3] ^ k1, (uint32_t)p0};
        memcpy(c, n, sizeof c);
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    memcpy(out, c, sizeof c);
}

double ref_dropout_factor(const clvarlen_attention_params *p, int64_t h, int64_t t, int64_t u)
{
    if (p->dropout_p <= 0.0f)
        return 1.0;
    const uint32_t key[2] = {(uint32_t)p->dropout_seed,
                             (uint32_t)(p->dropout_seed >> 32) ^
                                 (uint32_t)(p->dropout_offset >> 32)};
    const uint32_t ctr[4] = {(uint32_t)(u >> 2), (uint32_t)t, (uint32_t)h,
                             (uint32_t)p->dropout_offset};
    uint32_t x[4];
    ref_philox4x32_10(ctr, key, x);
    double thr = floor((double)p->dropout_p * 4294967296.0);
    if ((double)x[u & 3] < thr)
        return 0.0;
    return (double)(float)(1.0 / (1.0 - (double)p->dropout_p));
}

double *ref_to_f64(const void *x, clvarlen_dtype dtype, int64_t tokens, int64_t heads,
                   int64_t dim, int64_t stride)
{
    const int64_t row = heads * dim;
    if (stride == 0)
        stride = row;
    double *out = malloc(sizeof(double) * (size_t)(tokens * row + 1));
    for (int64_t t = 0; t < tokens; t++)
        for (int64_t e = 0; e < row; e++)
            out[t * row + e] = tu_get(x, dtype, (size_t)(t * stride + e));
    return out;
}

/* The shapes of one call, resolved. */
typedef struct shape {
    int64_t hq, hk, d, dv, group;
    double scale, cap;
} shape;

static shape shape_of(const clvarlen_attention_params *p)
{
    shape s;
    s.hq = p->heads_q;
    s.hk = p->heads_kv;
    s.d = p->head_dim;
    s.dv = p->head_dim_v ? p->head_dim_v : p->head_dim;
    s.group = s.hq / s.hk;
    s.scale = p->scale != 0.0f ? (double)p->scale : 1.0 / sqrt((double)s.d);
    s.cap = p->softcap;
    return s;
}

static int visible(const clvarlen_attention_params *p, int64_t pos, int64_t j)
{
    if (p->causal && j > pos)
        return 0;
    if (p->window_left >= 0 && j < pos - p->window_left)
        return 0;
    if (p->window_right >= 0 && j > pos + p->window_right)
        return 0;
    return 1;
}

/* Scores of query row t, head h of sequence (q0, k0, lq, lk): sc[j] after
 * softcap (-inf where not visible), raw[j] = scale * dot before softcap.
 * Returns the maximum (-inf when nothing is visible). */
static double row_scores(const clvarlen_attention_params *p, const shape *s, const double *q,
                         const double *k, int64_t t, int64_t h, int64_t k0, int64_t lk,
                         int64_t pos, double *sc)
{
    const int64_t kh = h / s->group;
    double mx = -INFINITY;
    for (int64_t j = 0; j < lk; j++) {
        if (!visible(p, pos, j)) {
            sc[j] = -INFINITY;
            continue;
        }
        double dot = 0.0;
        for (int64_t c = 0; c < s->d; c++)
            dot += q[(t * s->hq + h) * s->d + c] * k[((k0 + j) * s->hk + kh) * s->d + c];
        double x = s->scale * dot;
        if (s->cap > 0.0)
            x = s->cap * tanh(x / s->cap);
        sc[j] = x;
        if (x > mx)
            mx = x;
    }
    return mx;
}

static int64_t max_len(const int32_t *cu, int64_t n)
{
    int64_t m = 1;
    for (int64_t i = 0; i < n; i++)
        if (cu[i + 1] - cu[i] > m)
            m = cu[i + 1] - cu[i];
    return m;
}

void ref_attention_forward64(const clvarlen_attention_params *p, const double *q, const double *k,
                             const double *v, const int32_t *cu_q, const int32_t *cu_k,
                             const int32_t *q_pos, double *o, double *lse)
{
    const shape s = shape_of(p);
    double *sc = malloc(sizeof(double) * (size_t)max_len(cu_k, p->n_seqs));
    memset(o, 0, sizeof(double) * (size_t)(p->total_q * s.hq * s.dv));
    for (int64_t n = 0; n < p->n_seqs; n++) {
        const int64_t q0 = cu_q[n], k0 = cu_k[n];
        const int64_t lq = cu_q[n + 1] - q0, lk = cu_k[n + 1] - k0;
        for (int64_t h = 0; h < s.hq; h++) {
            const int64_t kh = h / s.group;
            for (int64_t i = 0; i < lq; i++) {
                const int64_t t = q0 + i;
                const int64_t pos = q_pos ? (int64_t)q_pos[t] : i + lk - lq;
                double mx = row_scores(p, &s, q, k, t, h, k0, lk, pos, sc);
                if (mx == -INFINITY) {
                    if (lse)
                        lse[h * p->total_q + t] = -INFINITY;
                    continue;
                }
                double sum = 0.0;
                for (int64_t j = 0; j < lk; j++)
                    if (sc[j] != -INFINITY)
                        sum += exp(sc[j] - mx);
                const double l = mx + log(sum);
                for (int64_t j = 0; j < lk; j++) {
                    if (sc[j] == -INFINITY)
                        continue;
                    double w = exp(sc[j] - l) * ref_dropout_factor(p, h, t, k0 + j);
                    for (int64_t c = 0; c < s.dv; c++)
                        o[(t * s.hq + h) * s.dv + c] += w * v[((k0 + j) * s.hk + kh) * s.dv + c];
                }
                if (lse)
                    lse[h * p->total_q + t] = l;
            }
        }
    }
    free(sc);
}

void ref_attention_backward64(const clvarlen_attention_params *p, const double *q,
                              const double *k, const double *v, const double *dout,
                              const int32_t *cu_q, const int32_t *cu_k, const int32_t *q_pos,
                              double *dq, double *dk, double *dv)
{
    const shape s = shape_of(p);
    const int64_t tq = p->total_q, tk = p->total_k;
    double *o = malloc(sizeof(double) * (size_t)(tq * s.hq * s.dv + 1));
    double *lse = malloc(sizeof(double) * (size_t)(tq * s.hq + 1));
    double *sc = malloc(sizeof(double) * (size_t)max_len(cu_k, p->n_seqs));
    ref_attention_forward64(p, q, k, v, cu_q, cu_k, q_pos, o, lse);
    memset(dq, 0, sizeof(double) * (size_t)(tq * s.hq * s.d));
    memset(dk, 0, sizeof(double) * (size_t)(tk * s.hk * s.d));
    memset(dv, 0, sizeof(double) * (size_t)(tk * s.hk * s.dv));
    for (int64_t n = 0; n < p->n_seqs; n++) {
        const int64_t q0 = cu_q[n], k0 = cu_k[n];
        const int64_t lq = cu_q[n + 1] - q0, lk = cu_k[n + 1] - k0;
        for (int64_t h = 0; h < s.hq; h++) {
            const int64_t kh = h / s.group;
            for (int64_t i = 0; i < lq; i++) {
                const int64_t t = q0 + i;
                const int64_t pos = q_pos ? (int64_t)q_pos[t] : i + lk - lq;
                const double l = lse[h * tq + t];
                if (!isfinite(l))
                    continue;
                row_scores(p, &s, q, k, t, h, k0, lk, pos, sc);
                const double *dor = dout + (t * s.hq + h) * s.dv;
                const double *orow = o + (t * s.hq + h) * s.dv;
                double delta = 0.0;
                for (int64_t c = 0; c < s.dv; c++)
                    delta += dor[c] * orow[c];
                for (int64_t j = 0; j < lk; j++) {
                    if (sc[j] == -INFINITY)
                        continue;
                    const int64_t u = k0 + j;
                    const double pr = exp(sc[j] - l);
                    const double z = ref_dropout_factor(p, h, t, u);
                    const double *vj = v + (u * s.hk + kh) * s.dv;
                    double dpd = 0.0;
                    for (int64_t c = 0; c < s.dv; c++) {
                        dpd += dor[c] * vj[c];
                        dv[(u * s.hk + kh) * s.dv + c] += pr * z * dor[c];
                    }
                    double ds = pr * (z * dpd - delta);
                    if (s.cap > 0.0)
                        ds *= 1.0 - (sc[j] / s.cap) * (sc[j] / s.cap);
                    ds *= s.scale;
                    for (int64_t c = 0; c < s.d; c++) {
                        dq[(t * s.hq + h) * s.d + c] += ds * k[(u * s.hk + kh) * s.d + c];
                        dk[(u * s.hk + kh) * s.d + c] += ds * q[(t * s.hq + h) * s.d + c];
                    }
                }
            }
        }
    }
    free(o);
    free(lse);
    free(sc);
}
