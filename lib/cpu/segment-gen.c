/* The segment family on the CPU: gen_seq_lens (SPEC 2.6), with the same f32
 * operations in the same order as its kernel, so both agree bitwise. */
#include "segment.h"

#include <math.h>

typedef struct gen_job {
    uint64_t seed;
    int32_t n;
    int64_t total;
    int32_t *out;
} gen_job;

/* One row, in the f32 operations and order of segment_gen_seq_lens. */
static void gen_row(const gen_job *j, uint32_t row)
{
    int32_t n = j->n;
    int32_t *len = j->out + (size_t)row * (size_t)n;
    float floor_add = 0.25f / (float)n;
    float sum = 0.0f;
    for (int32_t i = 0; i < n; i++)
        sum = sum + (cv_gen_uniform(j->seed, row, (uint32_t)i) + floor_add);
    float total_f = (float)j->total;
    int64_t acc = 0;
    for (int32_t i = 0; i < n; i++) {
        float ratio = (cv_gen_uniform(j->seed, row, (uint32_t)i) + floor_add) / sum;
        float x = ratio * total_f;
        len[i] = (int32_t)rintf(x); /* default rounding mode: nearest even */
        acc += len[i];
    }
    int64_t last = (int64_t)len[n - 1] - (acc - j->total);
    if (last >= 0) {
        len[n - 1] = (int32_t)last;
        return;
    }
    len[n - 1] = 0;
    int64_t deficit = -last;
    for (int32_t i = n - 2; i >= 0 && deficit > 0; i--) {
        int64_t take = CV_MIN((int64_t)len[i], deficit);
        len[i] -= (int32_t)take;
        deficit -= take;
    }
}

static void gen_task(void *arg, int64_t begin, int64_t end)
{
    for (int64_t r = begin; r < end; r++)
        gen_row(arg, (uint32_t)r);
}

void cv_cpu_gen_seq_lens(clvarlen_context *ctx, uint64_t seed, int32_t world, int32_t n,
                         int64_t total, int32_t *out)
{
    gen_job j = {seed, n, total, out};
    int64_t grain = CV_MAX(1, 4096 / (int64_t)n);
    cv_pool_for(ctx ? cv_base(ctx)->pool : NULL, world, grain, gen_task, &j);
}
