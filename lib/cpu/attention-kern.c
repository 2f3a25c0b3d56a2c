/* The CPU attention microkernels (attention-isa.h), written once with GCC's
 * vector extensions and compiled per instruction set: lib/meson.build builds
 * this file with -DCV_ISA=generic -DCV_VW=4 (baseline: SSE2 on x86-64, NEON on
 * arm64), avx2 -DCV_VW=8 (-mavx2 -mfma -mf16c) and avx512 -DCV_VW=16
 * (-mavx512f ...), the vectors as wide as the level's registers, with
 * -ffp-contract=fast so that a * b + c becomes an FMA where the target has
 * one. Results differ between levels by rounding only (within SPEC 4's
 * tolerances); each level is deterministic.
 */
#include "cpu/attention-isa.h"

#include <math.h>
#include <string.h>

#include "core/cpu-vec.h"

#define CV_KERN CV_CAT(cv_attn_kern_, CV_ISA)

/* Micro-tiles: MR rows x NV vectors of accumulators (16 registers on AVX-512,
 * 8 of the 16 on AVX2 and SSE2, leaving room for the operands). */
#define MR 4
#define NV (VW == 16 ? 4 : 2)
#define NC (NV * VW)

typedef uint16_t vh __attribute__((vector_size(VW * 2)));

/* nr (<= MR) rows x NC columns of s = q kt, from column c0 of kt. */
static inline __attribute__((always_inline)) void scores_tile(const float *q, int32_t nr, int32_t D, const float *kt, float *s)
{
    vf a[MR][NV];
#pragma GCC unroll 4
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 4
        for (int t = 0; t < NV; t++)
            a[r][t] = (vf){0};
    for (int32_t c = 0; c < D; c++) {
        const float *kc = kt + (size_t)c * CV_ATTN_BN;
        vf k[NV];
#pragma GCC unroll 4
        for (int t = 0; t < NV; t++)
            k[t] = ld(kc + VW * t);
#pragma GCC unroll 4
        for (int r = 0; r < MR; r++) {
            vf qr = splat(r < nr ? q[(size_t)r * D + c] : 0.0f);
#pragma GCC unroll 4
            for (int t = 0; t < NV; t++)
                a[r][t] += qr * k[t];
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < nr; r++)
#pragma GCC unroll 4
        for (int t = 0; t < NV; t++)
            st(s + (size_t)r * CV_ATTN_BN + VW * t, a[r][t]);
}

static void scores(const float *q, int32_t rows, int32_t D, const float *kt, float *s)
{
    for (int32_t c0 = 0; c0 < CV_ATTN_BN; c0 += NC) {
        int32_t r = 0;
        for (; r + MR <= rows; r += MR)
            scores_tile(q + (size_t)r * D, MR, D, kt + c0, s + (size_t)r * CV_ATTN_BN + c0);
        if (r < rows)
            scores_tile(q + (size_t)r * D, rows - r, D, kt + c0,
                        s + (size_t)r * CV_ATTN_BN + c0);
    }
}

/* nr (<= MR) rows x nt (<= NV) vectors of columns: acc = acc * alpha[r] + p v. */
static inline __attribute__((always_inline)) void pv_tile(const float *p, int32_t nr, int32_t nb, const float *v, int32_t Dv,
                           float *acc, const float *alpha, int32_t nt)
{
    vf a[MR][NV];
#pragma GCC unroll 4
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 4
        for (int t = 0; t < NV; t++)
            a[r][t] = r < nr && t < nt ? ld(acc + (size_t)r * Dv + VW * t) * splat(alpha[r])
                                       : (vf){0};
    for (int32_t j = 0; j < nb; j++) {
        const float *vj = v + (size_t)j * Dv;
        vf w[NV];
#pragma GCC unroll 4
        for (int t = 0; t < NV; t++)
            w[t] = t < nt ? ld(vj + VW * t) : (vf){0};
#pragma GCC unroll 4
        for (int r = 0; r < MR; r++) {
            vf pr = splat(r < nr ? p[(size_t)r * CV_ATTN_BN + j] : 0.0f);
#pragma GCC unroll 4
            for (int t = 0; t < NV; t++)
                a[r][t] += pr * w[t];
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < nr; r++)
        for (int t = 0; t < nt; t++)
            st(acc + (size_t)r * Dv + VW * t, a[r][t]);
}

static void pv(const float *p, int32_t rows, int32_t nb, const float *v, int32_t Dv,
               float *acc, const float *alpha)
{
    for (int32_t c = 0; c < Dv; c += NC) {
        int32_t nt = Dv - c >= NC ? NV : (Dv - c) / VW;
        int32_t r = 0;
        for (; r + MR <= rows; r += MR)
            pv_tile(p + (size_t)r * CV_ATTN_BN, MR, nb, v + c, Dv, acc + (size_t)r * Dv + c,
                    alpha + r, nt);
        if (r < rows)
            pv_tile(p + (size_t)r * CV_ATTN_BN, rows - r, nb, v + c, Dv,
                    acc + (size_t)r * Dv + c, alpha + r, nt);
    }
}

static inline vf sel(vi m, vf a, vf b)
{
    return (vf)(((vi)a & m) | ((vi)b & ~m));
}

/* exp on a vector: x = n ln2 + r, |r| <= ln2 / 2, exp(r) by Cephes' degree-6
 * polynomial (relative error about 1e-7), 2^n added into the exponent bits.
 * Below -87.3 (and -inf): 0; NaN stays NaN. */
static inline vf vexp(vf x)
{
    const vf lo = splat(-87.3f), hi = splat(88.3f), magic = splat(12582912.0f);
    vi keep = x >= lo, nan = x != x;
    vf xc = sel(x > hi, hi, sel(keep, x, lo));
    vf t = xc * splat(1.44269504f) + magic; /* rounds to an integer in the last place */
    vf n = t - magic;
    vi ni = (vi)t - (vi)magic;
    vf r = xc - n * splat(0.693359375f);
    r = r - n * splat(-2.12194440e-4f);
    vf p = splat(1.9875691500e-4f);
    p = p * r + splat(1.3981999507e-3f);
    p = p * r + splat(8.3334519073e-3f);
    p = p * r + splat(4.1665795894e-2f);
    p = p * r + splat(1.6666665459e-1f);
    p = p * r + splat(5.0000001201e-1f);
    p = p * r * r + r + splat(1.0f);
    vf res = (vf)((vi)p + (ni << 23));
    return sel(nan, x, sel(keep, res, splat(0.0f)));
}

/* One score row of CV_ATTN_BN: scaled (then soft-capped), -inf outside
 * columns [jlo, jhi]; returns the row's maximum. */
static float mask_max(float *x, float scale, float softcap, int32_t jlo, int32_t jhi)
{
    if (softcap > 0.0f) /* tanh stays scalar: soft-capping is the rare case */
        for (int32_t j = 0; j < CV_ATTN_BN; j++)
            x[j] = softcap * tanhf(x[j] * scale / softcap);
    else
        for (int32_t j = 0; j < CV_ATTN_BN; j += VW)
            st(x + j, ld(x + j) * splat(scale));
    vi lane;
    for (int i = 0; i < VW; i++)
        lane[i] = i;
    vf m = splat(-INFINITY);
    for (int32_t j = 0; j < CV_ATTN_BN; j += VW) {
        vi col = lane + j;
        vf s = sel((col >= jlo) & (col <= jhi), ld(x + j), splat(-INFINITY));
        st(x + j, s);
        m = sel(s > m, s, m);
    }
    float mx = m[0];
    for (int i = 1; i < VW; i++)
        mx = m[i] > mx ? m[i] : mx;
    return mx;
}

/* x = exp(x - m) over one score row; returns the row's sum (lanes added in
 * a fixed order). */
static float exp_sum(float *x, float m)
{
    vf s = {0};
    for (int32_t j = 0; j < CV_ATTN_BN; j += VW) {
        vf e = vexp(ld(x + j) - splat(m));
        st(x + j, e);
        s += e;
    }
    float t = 0.0f;
    for (int i = 0; i < VW; i++)
        t += s[i];
    return t;
}

#if defined(__F16C__)
#include <immintrin.h> /* F16C: 8 (AVX-512: 16) halves per instruction */
#endif

/* VW consecutive elements of an f32/f16/bf16 tensor as f32. */
static inline vf cvt(const void *src, clvarlen_dtype dt, int64_t off)
{
    if (dt == CLVARLEN_DTYPE_F32)
        return ld((const float *)src + off);
    vh h;
    memcpy(&h, (const uint16_t *)src + off, sizeof h);
    if (dt == CLVARLEN_DTYPE_BF16)
        return (vf)(__builtin_convertvector(h, vi) << 16);
#if defined(__F16C__) && VW == 8
    __m128i x;
    memcpy(&x, &h, sizeof x);
    return (vf)_mm256_cvtph_ps(x);
#elif defined(__AVX512F__) && VW == 16
    __m256i x;
    memcpy(&x, &h, sizeof x);
    return (vf)_mm512_cvtph_ps(x);
#else
    vf r;
    for (int i = 0; i < VW; i++)
        r[i] = cv_half_to_float(h[i]);
    return r;
#endif
}

static void to_f32(const void *src, clvarlen_dtype dt, int64_t off, int32_t n, float *dst)
{
    int32_t i = 0;
    for (; i + VW <= n; i += VW)
        st(dst + i, cvt(src, dt, off + i));
    for (; i < n; i++)
        dst[i] = cv_load_act(src, dt, off + i);
}

/* Shuffle indices of one transpose round: 2 x 2 swaps of b-lane blocks
 * between rows i and i + b. LO(b, p) picks lane p of the new row i, HI(b, p)
 * of row i + b, from the two old rows concatenated (lanes VW.. are row
 * i + b's). __builtin_shufflevector (GCC 12, clang) takes them as constant
 * arguments. */
#define GB(b, p) ((p) & ~(2 * (b)-1))
#define GO(b, p) ((p) & (2 * (b)-1))
#define LO(b, p) (GO(b, p) < (b) ? GB(b, p) + GO(b, p) : VW + GB(b, p) + GO(b, p) - (b))
#define HI(b, p) (GO(b, p) < (b) ? GB(b, p) + (b) + GO(b, p) : VW + GB(b, p) + GO(b, p))
#define L4(F, b, o) F(b, o), F(b, o + 1), F(b, o + 2), F(b, o + 3)
#if VW == 16
#define LANES(F, b) L4(F, b, 0), L4(F, b, 4), L4(F, b, 8), L4(F, b, 12)
#elif VW == 8
#define LANES(F, b) L4(F, b, 0), L4(F, b, 4)
#else
#define LANES(F, b) L4(F, b, 0)
#endif

#define ROUND(a, b)                                                                        \
    for (int i = 0; i < VW; i++)                                                           \
        if (!(i & (b))) {                                                                  \
            vf x = (a)[i], y = (a)[i + (b)];                                               \
            (a)[i] = __builtin_shufflevector(x, y, LANES(LO, b));                          \
            (a)[i + (b)] = __builtin_shufflevector(x, y, LANES(HI, b));                    \
        }

/* a[i] = column i of the VW x VW block whose rows were a[0..VW). */
static inline void transpose(vf a[VW])
{
#if VW == 16
    ROUND(a, 8)
#endif
#if VW >= 8
    ROUND(a, 4)
#endif
    ROUND(a, 2)
    ROUND(a, 1)
}

static void load_kt(const void *k, clvarlen_dtype dt, int64_t off, int64_t stride, int32_t nb,
                    int32_t D, float *kt)
{
    for (int32_t j0 = 0; j0 < CV_ATTN_BN; j0 += VW)
        for (int32_t c0 = 0; c0 < D; c0 += VW) {
            vf a[VW];
            for (int32_t i = 0; i < VW; i++)
                a[i] = j0 + i < nb ? cvt(k, dt, off + (j0 + i) * stride + c0) : (vf){0};
            transpose(a);
            for (int32_t i = 0; i < VW; i++)
                st(kt + (size_t)(c0 + i) * CV_ATTN_BN + j0, a[i]);
        }
}

static void bwd_row(float *s, float *dp, const float *z, float scale, float softcap, float lse,
                    float delta, int32_t jlo, int32_t jhi)
{
    float deriv[CV_ATTN_BN];
    if (softcap > 0.0f) { /* tanh stays scalar: soft-capping is the rare case */
        for (int32_t j = 0; j < CV_ATTN_BN; j++) {
            float th = tanhf(s[j] * scale / softcap);
            s[j] = softcap * th;
            deriv[j] = (1.0f - th * th) * scale;
        }
    } else {
        for (int32_t j = 0; j < CV_ATTN_BN; j += VW) {
            st(s + j, ld(s + j) * splat(scale));
            st(deriv + j, splat(scale));
        }
    }
    vi lane;
    for (int i = 0; i < VW; i++)
        lane[i] = i;
    for (int32_t j = 0; j < CV_ATTN_BN; j += VW) {
        vi col = lane + j, in = (col >= jlo) & (col <= jhi);
        vf p = sel(in, vexp(ld(s + j) - splat(lse)), splat(0.0f));
        vf zz = z ? ld(z + j) : splat(1.0f);
        vf ds = p * (zz * ld(dp + j) - splat(delta)) * ld(deriv + j);
        st(s + j, p * zz);
        st(dp + j, sel(in, ds, splat(0.0f)));
    }
}

static void transpose_bn(const float *src, int32_t rows, float *dst)
{
    for (int32_t r0 = 0; r0 < CV_ATTN_BN; r0 += VW)
        for (int32_t j0 = 0; j0 < CV_ATTN_BN; j0 += VW) {
            vf a[VW];
            for (int32_t i = 0; i < VW; i++)
                a[i] = r0 + i < rows ? ld(src + (size_t)(r0 + i) * CV_ATTN_BN + j0) : (vf){0};
            transpose(a);
            for (int32_t i = 0; i < VW; i++)
                st(dst + (size_t)(j0 + i) * CV_ATTN_BN + r0, a[i]);
        }
}

static float dot(const float *a, const float *b, int32_t n)
{
    /* As one lane of scores_tile: acc += a b, in order (an FMA where the
     * level has one: -ffp-contract=fast). */
    float acc = 0.0f;
    for (int32_t c = 0; c < n; c++)
        acc += a[c] * b[c];
    return acc;
}

const cv_attn_kern CV_KERN = {
    .name = CV_STR(CV_ISA),
    .scores = scores,
    .pv = pv,
    .mask_max = mask_max,
    .exp_sum = exp_sum,
    .to_f32 = to_f32,
    .load_kt = load_kt,
    .bwd_row = bwd_row,
    .transpose = transpose_bn,
    .dot = dot,
};
