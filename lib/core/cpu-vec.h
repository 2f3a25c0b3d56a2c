/* GCC/clang vector helpers of the CPU microkernels (lib/cpu/attention-kern.c
 * and gated-delta-kern.c), which lib/meson.build compiles once per
 * instruction-set level with -DCV_ISA=level and -DCV_VW=lanes (4 generic, 8
 * AVX2, 16 AVX-512): vector types as wide as that level's registers,
 * unaligned loads and stores, a broadcast, and name pasting for a level's
 * function table. */
#ifndef CLVARLEN_CORE_CPU_VEC_H
#define CLVARLEN_CORE_CPU_VEC_H

#include <stdint.h>
#include <string.h>

#define CV_CAT2(a, b) a##b
#define CV_CAT(a, b) CV_CAT2(a, b)
#define CV_STR2(x) #x
#define CV_STR(x) CV_STR2(x)

#ifndef CV_VW
#define CV_VW 4
#endif
#define VW CV_VW

typedef float vf __attribute__((vector_size(VW * 4)));
typedef int32_t vi __attribute__((vector_size(VW * 4)));

static inline vf ld(const float *p)
{
    vf r;
    memcpy(&r, p, sizeof r);
    return r;
}

static inline void st(float *p, vf x)
{
    memcpy(p, &x, sizeof x);
}

static inline vf splat(float x)
{
    return (vf){0} + x;
}

#endif
