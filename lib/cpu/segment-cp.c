/* The segment family on the CPU: the context-parallel plan, gather and
 * scatter (SPEC 2.5). */
#include "segment.h"

#include <stdlib.h>

typedef struct cp_job {
    const int32_t *cu;
    int64_t n, C, r;
    const int32_t *local_cu;  /* plan: the plan's own array */
    const int64_t *lcu;       /* rows: local offsets per document */
    int32_t *global_index, *position;
    /* rows */
    clvarlen_dtype dtype;
    int64_t row_elems;
    size_t row_bytes;
    int to_local;
    char *global;
    size_t gstride;
    char *local;
    size_t lstride;
    int accumulate, zero_rest;
} cp_job;

static void cp_plan_task(void *arg, int64_t begin, int64_t end)
{
    cp_job *j = arg;
    for (int64_t s = begin; s < end; s++) {
        int64_t L = j->cu[s + 1] - j->cu[s];
        int64_t parts[2] = {j->r, j->C - 1 - j->r};
        int64_t i = j->local_cu[s];
        for (int h = 0; h < 2; h++) {
            int64_t start = cv_cp_chunk_start(L, j->C, parts[h]);
            int64_t len = cv_cp_chunk_len(L, j->C, parts[h]);
            for (int64_t k = 0; k < len; k++, i++) {
                if (j->global_index)
                    j->global_index[i] = (int32_t)(j->cu[s] + start + k);
                if (j->position)
                    j->position[i] = (int32_t)(start + k);
            }
        }
    }
}

void cv_cpu_cp_plan(clvarlen_context *ctx, const int32_t *cu, int64_t n, int32_t world,
                    int32_t rank, clvarlen_cp_plan_out *plan)
{
    int64_t C = 2 * (int64_t)world;
    int64_t lacc = 0, hacc = 0, tacc = 0, max_h = 0, max_t = 0;
    plan->local_cu_seqlens[0] = 0;
    if (plan->head_cu)
        plan->head_cu[0] = 0;
    if (plan->tail_cu)
        plan->tail_cu[0] = 0;
    for (int64_t s = 0; s < n; s++) {
        int64_t L = cu[s + 1] - cu[s];
        int64_t h = cv_cp_chunk_len(L, C, rank), t = cv_cp_chunk_len(L, C, C - 1 - rank);
        lacc += h + t;
        hacc += h;
        tacc += t;
        max_h = CV_MAX(max_h, h);
        max_t = CV_MAX(max_t, t);
        plan->local_cu_seqlens[s + 1] = (int32_t)lacc;
        if (plan->head_cu)
            plan->head_cu[s + 1] = (int32_t)hacc;
        if (plan->tail_cu)
            plan->tail_cu[s + 1] = (int32_t)tacc;
    }
    plan->local_tokens = lacc;
    plan->max_head = (int32_t)max_h;
    plan->max_tail = (int32_t)max_t;
    if (lacc > 0 && (plan->global_index || plan->position)) {
        cp_job j = {.cu = cu, .n = n, .C = C, .r = rank, .local_cu = plan->local_cu_seqlens,
                    .global_index = plan->global_index, .position = plan->position};
        cv_pool_for(cv_base(ctx)->pool, n, 16, cp_plan_task, &j);
    }
}

/* The document positions [a, b) of document s, global rows base + a .. (one run). */
static void cp_run(cp_job *j, int64_t s, int64_t a, int64_t b)
{
    if (a >= b)
        return;
    int64_t L = j->cu[s + 1] - j->cu[s];
    int64_t hs = cv_cp_chunk_start(L, j->C, j->r), hn = cv_cp_chunk_len(L, j->C, j->r);
    int64_t ts = cv_cp_chunk_start(L, j->C, j->C - 1 - j->r);
    int64_t tn = cv_cp_chunk_len(L, j->C, j->C - 1 - j->r);
    /* owned parts, head before tail: [hs, hs+hn) -> local lcu[s] + .., [ts, ts+tn) -> + hn */
    int64_t owned[2][3] = {{hs, hs + hn, j->lcu[s] - hs}, {ts, ts + tn, j->lcu[s] + hn - ts}};
    int64_t cursor = a;
    for (int h = 0; h < 2; h++) {
        int64_t lo = CV_MAX(a, owned[h][0]), hi = CV_MIN(b, owned[h][1]);
        if (lo >= hi)
            continue;
        if (j->zero_rest && cursor < lo)
            cv_cpu_zero_rows(j->global + (size_t)(j->cu[s] + cursor) * j->gstride, j->gstride,
                             lo - cursor, j->row_bytes);
        char *g = j->global + (size_t)(j->cu[s] + lo) * j->gstride;
        char *l = j->local + (size_t)(owned[h][2] + lo) * j->lstride;
        if (j->to_local) {
            cv_cpu_copy_rows(l, j->lstride, g, j->gstride, hi - lo, j->row_bytes);
        } else if (j->accumulate) {
            static const int64_t zero = 0;
            for (int64_t k = 0; k < hi - lo; k++)
                cv_cpu_acc_row(j->dtype, j->row_elems, g + (size_t)k * j->gstride,
                               l + (size_t)k * j->lstride, 0, &zero, 1);
        } else {
            cv_cpu_copy_rows(g, j->gstride, l, j->lstride, hi - lo, j->row_bytes);
        }
        cursor = hi;
    }
    if (j->zero_rest && cursor < b)
        cv_cpu_zero_rows(j->global + (size_t)(j->cu[s] + cursor) * j->gstride, j->gstride,
                         b - cursor, j->row_bytes);
}

static void cp_rows_task(void *arg, int64_t begin, int64_t end)
{
    cp_job *j = arg;
    int64_t s = cv_seq_of_token_host(j->cu, j->n, begin);
    int64_t t = begin;
    while (t < end) {
        while (s + 1 < j->n && j->cu[s + 1] <= t)
            s++;
        int64_t doc_end = CV_MIN(end, (int64_t)j->cu[s + 1]);
        cp_run(j, s, t - j->cu[s], doc_end - j->cu[s]);
        t = doc_end;
    }
}

clvarlen_status cv_cpu_cp_rows(clvarlen_context *ctx, clvarlen_dtype dtype, int64_t row_elems,
                               const int32_t *cu, int64_t n, int32_t world, int32_t rank,
                               int to_local, void *global_rows, size_t global_stride,
                               void *local_rows, size_t local_stride, clvarlen_scatter_mode mode,
                               int zero_rest)
{
    int64_t total = n > 0 ? cu[n] : 0;
    if (total <= 0)
        return CLVARLEN_SUCCESS;
    int64_t *lcu = malloc((size_t)(n + 1) * sizeof *lcu);
    if (!lcu)
        return cv_error(ctx, CLVARLEN_ERROR_OUT_OF_MEMORY,
                        "%s: cannot allocate %lld local offsets",
                        to_local ? "clvarlen_cp_gather" : "clvarlen_cp_scatter", (long long)n);
    int64_t C = 2 * (int64_t)world;
    lcu[0] = 0;
    for (int64_t s = 0; s < n; s++) {
        int64_t L = cu[s + 1] - cu[s];
        lcu[s + 1] = lcu[s] + cv_cp_chunk_len(L, C, rank) + cv_cp_chunk_len(L, C, C - 1 - rank);
    }
    cp_job j = {.cu = cu, .n = n, .C = C, .r = rank, .lcu = lcu, .dtype = dtype,
                .row_elems = row_elems, .row_bytes = (size_t)row_elems * cv_dtype_size(dtype),
                .to_local = to_local, .global = global_rows, .gstride = global_stride,
                .local = local_rows, .lstride = local_stride,
                .accumulate = !to_local && mode == CLVARLEN_SCATTER_ACCUMULATE,
                .zero_rest = !to_local && zero_rest};
    cv_pool_for(cv_base(ctx)->pool, total, cv_cpu_rows_grain(j.row_bytes), cp_rows_task, &j);
    free(lcu);
    return CLVARLEN_SUCCESS;
}
