/* The segment family on the CPU: seqlens_expanded and the page-table
 * expansion (SPEC 2.4). */
#include "segment.h"

#include <stdlib.h>
#include <string.h>

typedef struct expand_job {
    const int32_t *kv_len, *q_len;
    int32_t uniform_q_len;
    const int64_t *row_off;
    const int32_t *page_table;
    int64_t page_stride, col_limit;
    int32_t *seqlens, *page_out;
    int64_t out_stride;
} expand_job;

static void expand_task(void *arg, int64_t begin, int64_t end)
{
    expand_job *j = arg;
    for (int64_t s = begin; s < end; s++) {
        int64_t q = j->q_len ? j->q_len[s] : j->uniform_q_len;
        int64_t row0 = j->row_off[s];
        int64_t first = (int64_t)j->kv_len[s] - q + 1;
        for (int64_t k = 0; k < q; k++) {
            if (j->seqlens) {
                int64_t v = first + k;
                j->seqlens[row0 + k] = (int32_t)(v > 0 ? v : 0);
            }
            if (j->page_out)
                memcpy(j->page_out + (size_t)((row0 + k) * j->out_stride),
                       j->page_table + (size_t)(s * j->page_stride),
                       (size_t)j->col_limit * sizeof(int32_t));
        }
    }
}

clvarlen_status cv_cpu_seqlens_expand(clvarlen_context *ctx, const int32_t *kv_len,
                                      const int32_t *q_len, int32_t uniform_q_len, int64_t n,
                                      const int32_t *page_table, int64_t page_stride,
                                      int64_t col_limit, int32_t *seqlens_expanded,
                                      int32_t *page_table_out, int64_t out_stride)
{
    if (n <= 0)
        return CLVARLEN_SUCCESS;
    int64_t *row_off = calloc((size_t)n, sizeof *row_off);
    if (!row_off)
        return cv_error(ctx, CLVARLEN_ERROR_OUT_OF_MEMORY,
                        "clvarlen_seqlens_expand: cannot allocate %lld offsets", (long long)n);
    int64_t acc = 0;
    for (int64_t s = 0; s < n; s++) {
        row_off[s] = acc;
        acc += q_len ? q_len[s] : uniform_q_len;
    }
    expand_job j = {
        .kv_len = kv_len,
        .q_len = q_len,
        .uniform_q_len = uniform_q_len,
        .row_off = row_off,
        .page_table = page_table,
        .page_stride = page_stride,
        .col_limit = col_limit,
        .seqlens = seqlens_expanded,
        .page_out = page_table ? page_table_out : NULL,
        .out_stride = out_stride,
    };
    cv_pool_for(cv_base(ctx)->pool, n, 64, expand_task, &j);
    free(row_off);
    return CLVARLEN_SUCCESS;
}
