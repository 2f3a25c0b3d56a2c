/* The CPU's f32 FMA ceiling, the bench's ratio for the CPU fallback: a
 * register-blocked multiply-add loop (12 independent vector accumulators, no
 * memory traffic) on as many threads as the context has, at the instruction
 * set the library's CPU kernels use (the best this CPU has, or the lower level
 * CLVARLEN_CPU_ISA names; lib/core/cpu-isa.c has the same rule). */
#include "clvarlen-test.h"
#include "ct-harness.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>

/* F16C (CPUID leaf 1, ECX bit 29), as lib/core/cpu-isa.c reads it. */
static int has_f16c(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1u);
}
#endif

#define ACC 12

typedef struct fma_thread {
    int level; /* 0 generic, 1 avx2, 2 avx512 */
    long iters;
    float sink;
} fma_thread;

/* Each returns the sum of its accumulators so the loop is not removed. */
static float fma_generic(long iters)
{
    typedef float v4 __attribute__((vector_size(16)));
    v4 x[ACC], a = {0.999f, 0.999f, 0.999f, 0.999f}, b = {1e-3f, 1e-3f, 1e-3f, 1e-3f};
    for (int i = 0; i < ACC; i++)
        x[i] = (v4){(float)i, 1.0f, 2.0f, 3.0f};
    for (long n = 0; n < iters; n++)
#pragma GCC unroll 12
        for (int i = 0; i < ACC; i++)
            x[i] = x[i] * a + b; /* a multiply and an add (-ffp-contract=off) */
    float s = 0.0f;
    for (int i = 0; i < ACC; i++)
        s += x[i][0] + x[i][3];
    return s;
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) static float fma_avx2(long iters)
{
    __m256 x[ACC], a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(1e-3f);
    for (int i = 0; i < ACC; i++)
        x[i] = _mm256_set1_ps((float)i);
    for (long n = 0; n < iters; n++)
#pragma GCC unroll 12
        for (int i = 0; i < ACC; i++)
            x[i] = _mm256_fmadd_ps(x[i], a, b);
    float s = 0.0f;
    for (int i = 0; i < ACC; i++)
        s += _mm256_cvtss_f32(x[i]);
    return s;
}

__attribute__((target("avx512f,fma"))) static float fma_avx512(long iters)
{
    __m512 x[ACC], a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-3f);
    for (int i = 0; i < ACC; i++)
        x[i] = _mm512_set1_ps((float)i);
    for (long n = 0; n < iters; n++)
#pragma GCC unroll 12
        for (int i = 0; i < ACC; i++)
            x[i] = _mm512_fmadd_ps(x[i], a, b);
    float s = 0.0f;
    for (int i = 0; i < ACC; i++)
        s += _mm512_cvtss_f32(x[i]);
    return s;
}
#endif

static void *fma_worker(void *arg)
{
    fma_thread *t = arg;
#if defined(__x86_64__)
    if (t->level == 2) {
        t->sink = fma_avx512(t->iters);
        return NULL;
    }
    if (t->level == 1) {
        t->sink = fma_avx2(t->iters);
        return NULL;
    }
#endif
    t->sink = fma_generic(t->iters);
    return NULL;
}

/* FLOPs per loop iteration of one thread: ACC vectors of 2 FLOPs a lane. */
static double flops_per_iter(int level)
{
    return (double)ACC * 2.0 * (level == 2 ? 16 : level == 1 ? 8 : 4);
}

static int cpu_level(void)
{
    int want = 2, have = 0;
    const char *env = getenv("CLVARLEN_CPU_ISA");
    if (env && strcmp(env, "generic") == 0)
        want = 0;
    else if (env && strcmp(env, "avx2") == 0)
        want = 1;
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c()) {
        have = 1;
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
            have = 2;
    }
#endif
    return want < have ? want : have;
}

static double run_threads(int level, int n, long iters)
{
    fma_thread *t = calloc((size_t)n, sizeof *t);
    pthread_t *th = calloc((size_t)n, sizeof *th);
    double rate = 0.0;
    if (!t || !th)
        goto out;
    int started = 0;
    double t0 = ct_now_s();
    for (; started < n; started++) {
        t[started] = (fma_thread){.level = level, .iters = iters};
        if (pthread_create(&th[started], NULL, fma_worker, &t[started]) != 0)
            break;
    }
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    double dt = ct_now_s() - t0;
    if (started == n && dt > 0.0)
        rate = flops_per_iter(level) * (double)iters * n / dt;
out:
    free(t);
    free(th);
    return rate;
}

double ct_measure_cpu_fma(clvarlen_context *ctx, const char **level_name)
{
    static const char *const names[] = {"generic (mul + add)", "avx2 FMA", "avx512 FMA"};
    int level = cpu_level(), n = clvarlen_context_threads(ctx);
    if (n < 1)
        n = 1;
    *level_name = names[level];
    /* About 0.2 s a run at a few GFLOP/s per thread; the best of three. */
    long iters = 20000000L / (level == 2 ? 1 : level == 1 ? 2 : 4) * 4;
    double best = 0.0;
    for (int r = 0; r < 3; r++) {
        double x = run_threads(level, n, iters);
        best = x > best ? x : best;
    }
    return best;
}
