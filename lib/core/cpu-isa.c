/* The CPU's vector instruction set, as the CPU twins' microkernels use it:
 * the best level this CPU supports, lowered by CLVARLEN_CPU_ISA (generic,
 * avx2, avx512; a level above what the CPU has is not taken, an unknown name
 * is ignored). Read once per process. */
#include "core/core.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static cv_cpu_isa level = CV_CPU_ISA_GENERIC;
static pthread_once_t level_once = PTHREAD_ONCE_INIT;

static const char *const names[] = {"generic", "avx2", "avx512"};

#if CLVARLEN_HAVE_X86_KERNELS
#include <cpuid.h>
/* F16C (CPUID leaf 1, ECX bit 29): clang's __builtin_cpu_supports does not
 * know the name. */
static bool has_f16c(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1u);
}
#endif

static void detect(void)
{
    cv_cpu_isa want = CV_CPU_ISA_AVX512;
    const char *env = getenv("CLVARLEN_CPU_ISA");
    for (int i = 0; env && i <= CV_CPU_ISA_AVX512; i++)
        if (strcmp(env, names[i]) == 0)
            want = (cv_cpu_isa)i;
    cv_cpu_isa have = CV_CPU_ISA_GENERIC;
#if CLVARLEN_HAVE_X86_KERNELS
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c()) {
        have = CV_CPU_ISA_AVX2;
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
            have = CV_CPU_ISA_AVX512;
    }
#endif
    level = want < have ? want : have;
}

cv_cpu_isa cv_cpu_isa_level(void)
{
    pthread_once(&level_once, detect);
    return level;
}

const char *cv_cpu_isa_name(cv_cpu_isa isa)
{
    return (unsigned)isa <= CV_CPU_ISA_AVX512 ? names[isa] : "unknown";
}
