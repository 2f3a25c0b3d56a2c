/* The CPU attention microkernels, compiled once per instruction set
 * (lib/cpu/attention-kern.c with -DCV_ISA=level) and picked at run time
 * (cv_cpu_attn_kern): the library itself stays built for baseline x86-64.
 *
 * Tiles are f32 in scratch: q [rows][D], kt [D][CV_ATTN_BN] (K transposed,
 * zero past the block's keys), v [CV_ATTN_BN][Dv], s and p [rows][CV_ATTN_BN],
 * acc [rows][Dv]. D and Dv are multiples of 16.
 */
#ifndef CLVARLEN_CPU_ATTENTION_ISA_H
#define CLVARLEN_CPU_ATTENTION_ISA_H

#include "core/core.h"

/* Keys per block: the score tile's row length. */
#define CV_ATTN_BN 64

typedef struct cv_attn_kern {
    const char *name; /* "generic", "avx2", "avx512" */
    /** s[r][0..64) = sum_c q[r][c] kt[c][0..64), for r < rows. */
    void (*scores)(const float *q, int32_t rows, int32_t D, const float *kt, float *s);
    /** acc[r][c] = acc[r][c] alpha[r] + sum_{j < nb} p[r][j] v[j][c], for r < rows, c < Dv. */
    void (*pv)(const float *p, int32_t rows, int32_t nb, const float *v, int32_t Dv, float *acc,
               const float *alpha);
    /** One score row x[0..CV_ATTN_BN): x = x * scale (then softcap tanh(x / softcap) when
     * softcap > 0), -inf outside columns [jlo, jhi]; returns the row's maximum. */
    float (*mask_max)(float *x, float scale, float softcap, int32_t jlo, int32_t jhi);
    /** x[j] = exp(x[j] - m) for j < CV_ATTN_BN (-inf and anything 87.3 below m give 0, so
     * masked scores vanish exactly); returns their sum, added in a fixed order. */
    float (*exp_sum)(float *x, float m);
    /** dst[i] = element off + i of an f32/f16/bf16 tensor, for i < n. */
    void (*to_f32)(const void *src, clvarlen_dtype dt, int64_t off, int32_t n, float *dst);
    /** kt[c][j] = key row j's element c (rows at k + (off + j * stride) elements), j < nb;
     * zero for nb <= j < CV_ATTN_BN. */
    void (*load_kt)(const void *k, clvarlen_dtype dt, int64_t off, int64_t stride, int32_t nb,
                    int32_t D, float *kt);
    /** The backward's row (SPEC 1.2) over CV_ATTN_BN columns: s holds raw scores q.k, dp
     * holds dO.v; columns outside [jlo, jhi] give 0 in both. With x = s scale (soft-capped
     * when softcap > 0, deriv its derivative), p = exp(x - lse) and z = z[j] (1 when z is
     * NULL): s = p z and dp = p (z dp - delta) deriv scale. */
    void (*bwd_row)(float *s, float *dp, const float *z, float scale, float softcap, float lse,
                    float delta, int32_t jlo, int32_t jhi);
    /** dst[j][r] = src[r][j] for j < CV_ATTN_BN and r < CV_ATTN_BN (rows of src from `rows`
     * on read as 0); both with rows of CV_ATTN_BN floats. */
    void (*transpose)(const float *src, int32_t rows, float *dst);
    /** sum_c a[c] b[c], c in order, each step rounded as the scores' lanes are (so that
     * a row's delta equals its dP for a key whose v is the row's o). */
    float (*dot)(const float *a, const float *b, int32_t n);
} cv_attn_kern;

/** The kernels for cv_cpu_isa_level(): the best instruction set this CPU has,
 * or the lower level CLVARLEN_CPU_ISA (generic, avx2, avx512) asks for. */
const cv_attn_kern *cv_cpu_attn_kern(void);

extern const cv_attn_kern cv_attn_kern_generic;
#if CLVARLEN_HAVE_X86_KERNELS
extern const cv_attn_kern cv_attn_kern_avx2;
extern const cv_attn_kern cv_attn_kern_avx512;
#endif

#endif
