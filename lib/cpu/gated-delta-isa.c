/* The CPU gated delta microkernels for the instruction-set level of
 * cv_cpu_isa_level() (lib/core/cpu-isa.c). */
#include "cpu/gated-delta-isa.h"

const cv_gdn_kern *cv_cpu_gdn_kern(void)
{
#if CLVARLEN_HAVE_X86_KERNELS
    switch (cv_cpu_isa_level()) {
    case CV_CPU_ISA_AVX512:
        return &cv_gdn_kern_avx512;
    case CV_CPU_ISA_AVX2:
        return &cv_gdn_kern_avx2;
    default:
        break;
    }
#endif
    return &cv_gdn_kern_generic;
}
