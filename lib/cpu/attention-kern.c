/* The CPU attention microkernels (attention-isa.h), written once with GCC's
 * vector extensions and compiled per instruction set: lib/meson.build builds
 * this file with -DCV_ISA=generic (baseline), avx2 (-mavx2 -mfma -mf16c) and
 * avx512 (-mavx512f ...), with -ffp-contract=fast so that a * b + c becomes
 * an FMA where the target has one. Results differ between levels by rounding
 * only (within SPEC 4's tolerances); each level is deterministic.
 */
#include "cpu/attention-isa.h"

#include <math.h>
#include <string.h>

#define CV_CAT2(a, b) a##b
#define CV_CAT(a, b) CV_CAT2(a, b)
#define CV_KERN CV_CAT(cv_attn_kern_, CV_ISA)
#define CV_STR2(x) #x
#define CV_STR(x) CV_STR2(x)

typedef float v16 __attribute__((vector_size(64)));
typedef int32_t vi16 __attribute__((vector_size(64)));

static inline v16 ld(const float *p)
{
    v16 r;
    memcpy(&r, p, sizeof r);
    return r;
}

static inline void st(float *p, v16 x)
{
    memcpy(p, &x, sizeof x);
}

static inline v16 splat(float x)
{
    return (v16){0} + x;
}

/* 4 rows x 64 columns of q kt: 16 accumulators. */
static inline void scores4(const float *q, int32_t D, const float *kt, float *s)
{
    v16 a[4][4] = {{{0}}};
    for (int32_t c = 0; c < D; c++) {
        const float *kc = kt + (size_t)c * CV_ATTN_BN;
        v16 k0 = ld(kc), k1 = ld(kc + 16), k2 = ld(kc + 32), k3 = ld(kc + 48);
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            v16 qr = splat(q[(size_t)r * D + c]);
            a[r][0] += qr * k0;
            a[r][1] += qr * k1;
            a[r][2] += qr * k2;
            a[r][3] += qr * k3;
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++)
        for (int t = 0; t < 4; t++)
            st(s + (size_t)r * CV_ATTN_BN + 16 * t, a[r][t]);
}

static void scores(const float *q, int32_t rows, int32_t D, const float *kt, float *s)
{
    int32_t r = 0;
    for (; r + 4 <= rows; r += 4)
        scores4(q + (size_t)r * D, D, kt, s + (size_t)r * CV_ATTN_BN);
    for (; r < rows; r++) {
        v16 a[4] = {{0}};
        for (int32_t c = 0; c < D; c++) {
            v16 qr = splat(q[(size_t)r * D + c]);
            for (int t = 0; t < 4; t++)
                a[t] += qr * ld(kt + (size_t)c * CV_ATTN_BN + 16 * t);
        }
        for (int t = 0; t < 4; t++)
            st(s + (size_t)r * CV_ATTN_BN + 16 * t, a[t]);
    }
}

/* rows (<= 4) x 64 (or fewer: a multiple of 16) columns of
 * acc = acc * alpha[r] + p v. */
static inline void pv4(const float *p, int32_t nr, int32_t nb, const float *v, int32_t Dv,
                       float *acc, const float *alpha, int32_t width)
{
    v16 a[4][4];
    int32_t nt = width / 16;
    for (int r = 0; r < 4; r++)
        for (int t = 0; t < 4; t++)
            a[r][t] = r < nr && t < nt ? ld(acc + (size_t)r * Dv + 16 * t) * splat(alpha[r])
                                       : (v16){0};
    for (int32_t j = 0; j < nb; j++) {
        const float *vj = v + (size_t)j * Dv;
        v16 v0 = ld(vj), v1 = nt > 1 ? ld(vj + 16) : (v16){0};
        v16 v2 = nt > 2 ? ld(vj + 32) : (v16){0}, v3 = nt > 3 ? ld(vj + 48) : (v16){0};
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            v16 pr = splat(r < nr ? p[(size_t)r * CV_ATTN_BN + j] : 0.0f);
            a[r][0] += pr * v0;
            a[r][1] += pr * v1;
            a[r][2] += pr * v2;
            a[r][3] += pr * v3;
        }
    }
    for (int r = 0; r < nr; r++)
        for (int t = 0; t < nt; t++)
            st(acc + (size_t)r * Dv + 16 * t, a[r][t]);
}

static void pv(const float *p, int32_t rows, int32_t nb, const float *v, int32_t Dv,
               float *acc, const float *alpha)
{
    for (int32_t r = 0; r < rows; r += 4) {
        int32_t nr = rows - r < 4 ? rows - r : 4;
        for (int32_t c = 0; c < Dv; c += 64)
            pv4(p + (size_t)r * CV_ATTN_BN, nr, nb, v + c, Dv, acc + (size_t)r * Dv + c,
                alpha + r, Dv - c >= 64 ? 64 : Dv - c);
    }
}

static inline v16 sel(vi16 m, v16 a, v16 b)
{
    return (v16)(((vi16)a & m) | ((vi16)b & ~m));
}

/* exp on 16 lanes: x = n ln2 + r, |r| <= ln2 / 2, exp(r) by Cephes' degree-6
 * polynomial (relative error about 1e-7), 2^n added into the exponent bits.
 * Below -87.3 (and -inf): 0; NaN stays NaN. */
static inline v16 vexp(v16 x)
{
    const v16 lo = splat(-87.3f), hi = splat(88.3f), magic = splat(12582912.0f);
    vi16 keep = x >= lo, nan = x != x;
    v16 xc = sel(x > hi, hi, sel(keep, x, lo));
    v16 t = xc * splat(1.44269504f) + magic; /* rounds to an integer in the last place */
    v16 n = t - magic;
    vi16 ni = (vi16)t - (vi16)magic;
    v16 r = xc - n * splat(0.693359375f);
    r = r - n * splat(-2.12194440e-4f);
    v16 p = splat(1.9875691500e-4f);
    p = p * r + splat(1.3981999507e-3f);
    p = p * r + splat(8.3334519073e-3f);
    p = p * r + splat(4.1665795894e-2f);
    p = p * r + splat(1.6666665459e-1f);
    p = p * r + splat(5.0000001201e-1f);
    p = p * r * r + r + splat(1.0f);
    v16 res = (v16)((vi16)p + (ni << 23));
    return sel(nan, x, sel(keep, res, splat(0.0f)));
}

static inline float hmax(v16 x)
{
    float m = x[0];
    for (int i = 1; i < 16; i++)
        m = x[i] > m ? x[i] : m;
    return m;
}

/* One score row of CV_ATTN_BN: scaled (then soft-capped), -inf outside
 * columns [jlo, jhi]; returns the row's maximum. */
static float mask_max(float *x, float scale, float softcap, int32_t jlo, int32_t jhi)
{
    if (softcap > 0.0f) /* tanh stays scalar: soft-capping is the rare case */
        for (int32_t j = 0; j < CV_ATTN_BN; j++)
            x[j] = softcap * tanhf(x[j] * scale / softcap);
    else
        for (int32_t j = 0; j < CV_ATTN_BN; j += 16)
            st(x + j, ld(x + j) * splat(scale));
    const vi16 lane = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    v16 m = splat(-INFINITY);
    for (int32_t j = 0; j < CV_ATTN_BN; j += 16) {
        vi16 col = lane + j;
        v16 s = sel((col >= jlo) & (col <= jhi), ld(x + j), splat(-INFINITY));
        st(x + j, s);
        m = sel(s > m, s, m);
    }
    return hmax(m);
}

/* x = exp(x - m) over one score row; returns the row's sum (lanes added in
 * a fixed order). */
static float exp_sum(float *x, float m)
{
    v16 s = {0};
    for (int32_t j = 0; j < CV_ATTN_BN; j += 16) {
        v16 e = vexp(ld(x + j) - splat(m));
        st(x + j, e);
        s += e;
    }
    float t = 0.0f;
    for (int i = 0; i < 16; i++)
        t += s[i];
    return t;
}

typedef uint16_t vh16 __attribute__((vector_size(32)));
#if defined(__F16C__)
/* F16C converts 8 halves per instruction (the avx2 and avx512 builds). */
__extension__ typedef _Float16 cv_f16;
typedef cv_f16 vf16x16 __attribute__((vector_size(32)));
#endif

/* 16 consecutive elements of an f32/f16/bf16 tensor as f32. */
static inline v16 cvt16(const void *src, clvarlen_dtype dt, int64_t off)
{
    if (dt == CLVARLEN_DTYPE_F32)
        return ld((const float *)src + off);
    vh16 h;
    memcpy(&h, (const uint16_t *)src + off, sizeof h);
    if (dt == CLVARLEN_DTYPE_BF16)
        return (v16)(__builtin_convertvector(h, vi16) << 16);
#if defined(__F16C__)
    vf16x16 f;
    memcpy(&f, &h, sizeof f);
    return __builtin_convertvector(f, v16);
#else
    v16 r;
    for (int i = 0; i < 16; i++)
        r[i] = cv_half_to_float(h[i]);
    return r;
#endif
}

static void to_f32(const void *src, clvarlen_dtype dt, int64_t off, int32_t n, float *dst)
{
    int32_t i = 0;
    for (; i + 16 <= n; i += 16)
        st(dst + i, cvt16(src, dt, off + i));
    for (; i < n; i++)
        dst[i] = cv_load_act(src, dt, off + i);
}

/* a[i] = column i of the 16 x 16 block whose rows were a[0..16): four rounds
 * of 2 x 2 block swaps (8, 4, 2, 1 lanes), each a two-input shuffle. */
static inline void transpose16(v16 a[16])
{
    static const vi16 lo8 = {0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23};
    static const vi16 hi8 = {8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31};
    static const vi16 lo4 = {0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27};
    static const vi16 hi4 = {4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31};
    static const vi16 lo2 = {0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29};
    static const vi16 hi2 = {2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31};
    static const vi16 lo1 = {0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30};
    static const vi16 hi1 = {1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31};
    const vi16 *lo[4] = {&lo8, &lo4, &lo2, &lo1}, *hi[4] = {&hi8, &hi4, &hi2, &hi1};
    for (int s = 0, b = 8; s < 4; s++, b >>= 1)
        for (int i = 0; i < 16; i++)
            if (!(i & b)) {
                v16 x = a[i], y = a[i + b];
                a[i] = __builtin_shuffle(x, y, *lo[s]);
                a[i + b] = __builtin_shuffle(x, y, *hi[s]);
            }
}

static void load_kt(const void *k, clvarlen_dtype dt, int64_t off, int64_t stride, int32_t nb,
                    int32_t D, float *kt)
{
    for (int32_t j0 = 0; j0 < CV_ATTN_BN; j0 += 16)
        for (int32_t c0 = 0; c0 < D; c0 += 16) {
            v16 a[16];
            for (int32_t i = 0; i < 16; i++)
                a[i] = j0 + i < nb ? cvt16(k, dt, off + (j0 + i) * stride + c0) : (v16){0};
            transpose16(a);
            for (int32_t i = 0; i < 16; i++)
                st(kt + (size_t)(c0 + i) * CV_ATTN_BN + j0, a[i]);
        }
}

const cv_attn_kern CV_KERN = {
    .name = CV_STR(CV_ISA),
    .scores = scores,
    .pv = pv,
    .mask_max = mask_max,
    .exp_sum = exp_sum,
    .to_f32 = to_f32,
    .load_kt = load_kt,
};
