/* The CPU gated delta rule's per-token state update, compiled once per
 * instruction set (lib/cpu/gated-delta-kern.c with -DCV_ISA=level) and picked
 * at run time (cv_cpu_gdn_kern, by cv_cpu_isa_level()): the library itself
 * stays built for baseline x86-64.
 */
#ifndef CLVARLEN_CPU_GATED_DELTA_ISA_H
#define CLVARLEN_CPU_GATED_DELTA_ISA_H

#include "core/core.h"

typedef struct cv_gdn_kern {
    const char *name; /* "generic", "avx2", "avx512" */
    /** One token on an f32 state S (SPEC 3), [K][V] (kv = 1) or [V][K] (kv = 0):
     * S <- e^g S; u = beta (v - S^T k); S <- S + k u^T; o = S^T q. One pass over
     * each block of value columns does all of it while the block is in L1. */
    void (*token)(float *S, const float *k, const float *q, const float *v, float beta,
                  float eg, float *o, int64_t K, int64_t V, int kv);
} cv_gdn_kern;

/** The kernels for cv_cpu_isa_level(). */
const cv_gdn_kern *cv_cpu_gdn_kern(void);

extern const cv_gdn_kern cv_gdn_kern_generic;
#if CLVARLEN_HAVE_X86_KERNELS
extern const cv_gdn_kern cv_gdn_kern_avx2;
extern const cv_gdn_kern cv_gdn_kern_avx512;
#endif

#endif
