/* bench-cpu-tile-gemm: the CPU attention's two tile products on one core, the
 * library's microkernels (lib/cpu/attention-kern.c, every instruction-set level
 * this CPU has) beside OpenBLAS's cblas_sgemm on one thread, the way issue 15
 * asks the two to be compared before one is kept (docs/PERFORMANCE.md). Built
 * by tools/meson.build where Debian's libopenblas-dev is installed; not
 * installed, no part of the library.
 *
 *   S[64][64]  = Q[64][D] K^T         (kern->scores; K stored transposed)
 *   O[64][Dv] += P[64][64] V[64][Dv]  (kern->pv with alpha = 1)
 *
 * Usage: bench-cpu-tile-gemm [D] (default 128; Dv = D). Prints GFLOP/s.
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "cpu/attention-isa.h"

void openblas_set_num_threads(int num_threads);
char *openblas_get_corename(void);

#define B CV_ATTN_BN

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef struct tiles {
    int D;
    float *q, *kt, *s, *p, *v, *o, *alpha;
} tiles;

static float *fill(size_t n, unsigned *seed)
{
    float *x = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
    if (!x)
        exit(1);
    for (size_t i = 0; i < n; i++) {
        *seed = *seed * 1664525u + 1013904223u;
        x[i] = (float)(*seed >> 8) * (1.0f / 16777216.0f) - 0.5f;
    }
    return x;
}

/* GFLOP/s of fn over `reps` calls (best of 5 runs). */
static double rate(void (*fn)(const tiles *, const cv_attn_kern *), const tiles *t,
                   const cv_attn_kern *k, double flops, int reps)
{
    double best = 1e30;
    for (int run = 0; run < 5; run++) {
        double t0 = now();
        for (int r = 0; r < reps; r++)
            fn(t, k);
        double dt = now() - t0;
        best = dt < best ? dt : best;
    }
    return flops * reps / best * 1e-9;
}

static void kern_scores(const tiles *t, const cv_attn_kern *k)
{
    k->scores(t->q, B, t->D, t->kt, t->s);
}

static void kern_pv(const tiles *t, const cv_attn_kern *k)
{
    k->pv(t->p, B, B, t->v, t->D, t->o, t->alpha);
}

static void blas_scores(const tiles *t, const cv_attn_kern *k)
{
    (void)k;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, B, t->D, 1.0f, t->q, t->D, t->kt,
                B, 0.0f, t->s, B);
}

static void blas_pv(const tiles *t, const cv_attn_kern *k)
{
    (void)k;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, t->D, B, 1.0f, t->p, B, t->v,
                t->D, 1.0f, t->o, t->D);
}

int main(int argc, char **argv)
{
    int D = argc > 1 ? atoi(argv[1]) : 128;
    if (D < 16 || D > 256 || D % 16) {
        fprintf(stderr, "bench-cpu-tile-gemm: D must be a multiple of 16 in [16, 256]\n");
        return 2;
    }
    openblas_set_num_threads(1);
    unsigned seed = 1;
    tiles t = {.D = D};
    t.q = fill((size_t)B * D, &seed);
    t.kt = fill((size_t)D * B, &seed);
    t.s = fill((size_t)B * B, &seed);
    t.p = fill((size_t)B * B, &seed);
    t.v = fill((size_t)B * D, &seed);
    t.o = fill((size_t)B * D, &seed);
    t.alpha = fill(B, &seed);
    for (int i = 0; i < B; i++)
        t.alpha[i] = 1.0f;
    const double flops = 2.0 * B * B * D;
    const int reps = 20000;
    printf("one thread, tiles 64 x 64, D = Dv = %d (GFLOP/s); OpenBLAS kernels: %s%s\n", D,
           openblas_get_corename(),
           getenv("OPENBLAS_CORETYPE") ? " (OPENBLAS_CORETYPE set)" : "");
    printf("%-22s %10s %10s\n", "", "S = Q K^T", "O += P V");
    printf("%-22s %10.1f %10.1f\n", "OpenBLAS cblas_sgemm", rate(blas_scores, &t, NULL, flops, reps),
           rate(blas_pv, &t, NULL, flops, reps));
    const cv_attn_kern *levels[3] = {&cv_attn_kern_generic, NULL, NULL};
#if CLVARLEN_HAVE_X86_KERNELS
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        levels[1] = &cv_attn_kern_avx2;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
        levels[2] = &cv_attn_kern_avx512;
#endif
    for (int l = 0; l < 3; l++)
        if (levels[l]) {
            char name[40];
            snprintf(name, sizeof name, "clvarlen %s", levels[l]->name);
            printf("%-22s %10.1f %10.1f\n", name, rate(kern_scores, &t, levels[l], flops, reps),
                   rate(kern_pv, &t, levels[l], flops, reps));
        }
    free(t.q);
    free(t.kt);
    free(t.s);
    free(t.p);
    free(t.v);
    free(t.o);
    free(t.alpha);
    return 0;
}
