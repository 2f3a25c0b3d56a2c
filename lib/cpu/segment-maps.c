/* The segment family on the CPU: cu_seqlens <-> lengths and the per-token
 * maps (SPEC 2.1, 2.2). */
#include "segment.h"

int64_t cv_seq_of_token_host(const int32_t *cu, int64_t n, int64_t t)
{
    int64_t lo = 0, hi = n; /* cu[lo] <= t; the answer is in [lo, hi) */
    while (hi - lo > 1) {
        int64_t mid = lo + ((hi - lo) >> 1);
        if (cu[mid] <= t)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

void cv_cpu_cu_from_lengths(const int32_t *lengths, int64_t n, int32_t *cu)
{
    int64_t acc = 0;
    cu[0] = 0;
    for (int64_t s = 0; s < n; s++) {
        acc += lengths[s];
        cu[s + 1] = (int32_t)acc;
    }
}

typedef struct lengths_job {
    const int32_t *cu;
    int32_t *lengths;
} lengths_job;

static void lengths_task(void *arg, int64_t begin, int64_t end)
{
    lengths_job *j = arg;
    for (int64_t s = begin; s < end; s++)
        j->lengths[s] = j->cu[s + 1] - j->cu[s];
}

void cv_cpu_lengths_from_cu(clvarlen_context *ctx, const int32_t *cu, int64_t n, int32_t *lengths)
{
    lengths_job j = {cu, lengths};
    cv_pool_for(cv_base(ctx)->pool, n, 1 << 14, lengths_task, &j);
}

typedef struct maps_job {
    const int32_t *cu;
    int64_t n;
    const int32_t *offsets;
    int32_t *seq_id, *pos;
} maps_job;

static void maps_task(void *arg, int64_t begin, int64_t end)
{
    maps_job *j = arg;
    int64_t s = cv_seq_of_token_host(j->cu, j->n, begin);
    for (int64_t t = begin; t < end; t++) {
        while (s + 1 < j->n && j->cu[s + 1] <= t)
            s++;
        if (j->seq_id)
            j->seq_id[t] = (int32_t)s;
        if (j->pos) {
            int64_t p = t - j->cu[s] + (j->offsets ? j->offsets[s] : 0);
            j->pos[t] = (int32_t)p;
        }
    }
}

void cv_cpu_token_maps(clvarlen_context *ctx, const int32_t *cu, int64_t n, int64_t total,
                       const int32_t *offsets, int32_t *seq_id, int32_t *pos)
{
    if (n <= 0 || total <= 0)
        return;
    maps_job j = {.cu = cu, .n = n, .offsets = offsets, .seq_id = seq_id, .pos = pos};
    cv_pool_for(cv_base(ctx)->pool, total, 1 << 14, maps_task, &j);
}
