/* The segment family on the CPU: the row helpers every operation shares
 * (whole-row memcpy spread over the context's thread pool in chunks that move
 * about 64 KiB per task; f32/wrapping-i32 accumulation in index order, as the
 * kernels do), and row gather and scatter (SPEC 2.3). */
#include "segment.h"

#include <stdlib.h>
#include <string.h>


/* Bytes a task should move before splitting further pays off. */
#define SEG_TASK_BYTES (64 * 1024)
/* f16/bf16 rows are accumulated in f32 blocks of this many columns. */
#define SEG_ACC_BLOCK 256

int64_t cv_cpu_rows_grain(size_t row_bytes)
{
    int64_t g = (int64_t)(SEG_TASK_BYTES / (row_bytes ? row_bytes : 1));
    return g > 0 ? g : 1;
}

void cv_cpu_copy_rows(void *dst, size_t dst_stride, const void *src, size_t src_stride,
                      int64_t rows, size_t row_bytes)
{
    if (rows <= 0)
        return;
    if (dst_stride == row_bytes && src_stride == row_bytes) {
        memcpy(dst, src, (size_t)rows * row_bytes);
        return;
    }
    char *d = dst;
    const char *s = src;
    for (int64_t r = 0; r < rows; r++)
        memcpy(d + (size_t)r * dst_stride, s + (size_t)r * src_stride, row_bytes);
}

void cv_cpu_zero_rows(void *dst, size_t dst_stride, int64_t rows, size_t row_bytes)
{
    if (rows <= 0)
        return;
    if (dst_stride == row_bytes) {
        memset(dst, 0, (size_t)rows * row_bytes);
        return;
    }
    char *d = dst;
    for (int64_t r = 0; r < rows; r++)
        memset(d + (size_t)r * dst_stride, 0, row_bytes);
}

/* dst row += the rows src + ms[k] * src_stride for k ascending, in the order
 * the kernels use: f32 and i32 in place (the f32 chain ((d + s0) + s1) ...
 * equals an f32 accumulator), f16/bf16 through an f32 accumulator rounded
 * once. i32 wraps (unsigned arithmetic, as the kernel does). */
void cv_cpu_acc_row(clvarlen_dtype dtype, int64_t elems, void *dst, const char *src,
                    size_t src_stride, const int64_t *ms, int64_t count)
{
    switch (dtype) {
    case CLVARLEN_DTYPE_F32: {
        float *d = dst;
        for (int64_t k = 0; k < count; k++) {
            const float *s = (const float *)(src + (size_t)ms[k] * src_stride);
            for (int64_t j = 0; j < elems; j++)
                d[j] = d[j] + s[j];
        }
        break;
    }
    case CLVARLEN_DTYPE_I32: {
        uint32_t *d = dst;
        for (int64_t k = 0; k < count; k++) {
            const uint32_t *s = (const uint32_t *)(src + (size_t)ms[k] * src_stride);
            for (int64_t j = 0; j < elems; j++)
                d[j] = d[j] + s[j];
        }
        break;
    }
    default: { /* f16, bf16 */
        float acc[SEG_ACC_BLOCK];
        for (int64_t c0 = 0; c0 < elems; c0 += SEG_ACC_BLOCK) {
            int64_t cn = CV_MIN(SEG_ACC_BLOCK, elems - c0);
            for (int64_t j = 0; j < cn; j++)
                acc[j] = cv_load_act(dst, dtype, c0 + j);
            for (int64_t k = 0; k < count; k++) {
                const void *s = src + (size_t)ms[k] * src_stride;
                for (int64_t j = 0; j < cn; j++)
                    acc[j] = acc[j] + cv_load_act(s, dtype, c0 + j);
            }
            for (int64_t j = 0; j < cn; j++)
                cv_store_act(dst, dtype, c0 + j, acc[j]);
        }
        break;
    }
    }
}

typedef struct rows_job {
    clvarlen_dtype dtype;
    int64_t row_elems;
    size_t row_bytes;
    const char *src;
    size_t src_stride;
    const int32_t *index;
    char *dst;
    size_t dst_stride;
    const int64_t *inverse;  /* overwrite + zero_rest: dst row -> m, or -1 */
    const int64_t *row_start; /* accumulate: CSR of m by destination row */
    const int64_t *order;
    int zero_rest;
} rows_job;

/* Prefetches the first bytes of row m's source (up to 1 KiB): gathered rows
 * are scattered in memory, so the hardware prefetcher, which follows streams,
 * cannot start them early; from there on it follows each row. */
static inline void prefetch_row(const rows_job *j, int64_t m, int64_t end)
{
    if (m >= end || j->index[m] < 0)
        return;
    const char *s = j->src + (size_t)j->index[m] * j->src_stride;
    size_t n = j->row_bytes < 1024 ? j->row_bytes : 1024;
    for (size_t o = 0; o < n; o += 64)
        __builtin_prefetch(s + o);
}

static void gather_task(void *arg, int64_t begin, int64_t end)
{
    rows_job *j = arg;
    for (int64_t m = begin; m < end; m++) {
        prefetch_row(j, m + 2, end);
        char *d = j->dst + (size_t)m * j->dst_stride;
        int32_t r = j->index[m];
        if (r < 0)
            memset(d, 0, j->row_bytes);
        else
            memcpy(d, j->src + (size_t)r * j->src_stride, j->row_bytes);
    }
}

void cv_cpu_gather(clvarlen_context *ctx, size_t row_bytes, const void *src, size_t src_stride,
                   const int32_t *index, int64_t n_index, void *dst, size_t dst_stride)
{
    rows_job j = {.row_bytes = row_bytes, .src = src, .src_stride = src_stride, .index = index,
                  .dst = dst, .dst_stride = dst_stride};
    cv_pool_for(cv_base(ctx)->pool, n_index, cv_cpu_rows_grain(row_bytes), gather_task, &j);
}

static void scatter_direct_task(void *arg, int64_t begin, int64_t end)
{
    rows_job *j = arg;
    for (int64_t m = begin; m < end; m++) {
        int32_t r = j->index[m];
        if (r >= 0)
            memcpy(j->dst + (size_t)r * j->dst_stride, j->src + (size_t)m * j->src_stride,
                   j->row_bytes);
    }
}

static void scatter_inverse_task(void *arg, int64_t begin, int64_t end)
{
    rows_job *j = arg;
    for (int64_t r = begin; r < end; r++) {
        char *d = j->dst + (size_t)r * j->dst_stride;
        int64_t m = j->inverse[r];
        if (m >= 0)
            memcpy(d, j->src + (size_t)m * j->src_stride, j->row_bytes);
        else
            memset(d, 0, j->row_bytes);
    }
}

static void scatter_acc_task(void *arg, int64_t begin, int64_t end)
{
    rows_job *j = arg;
    for (int64_t r = begin; r < end; r++) {
        char *d = j->dst + (size_t)r * j->dst_stride;
        int64_t k0 = j->row_start[r], k1 = j->row_start[r + 1];
        if (k1 > k0)
            cv_cpu_acc_row(j->dtype, j->row_elems, d, j->src, j->src_stride, j->order + k0,
                           k1 - k0);
        else if (j->zero_rest)
            memset(d, 0, j->row_bytes);
    }
}

clvarlen_status cv_cpu_scatter(clvarlen_context *ctx, clvarlen_dtype dtype, int64_t row_elems,
                               const void *src, size_t src_stride, const int32_t *index,
                               int64_t n_index, void *dst, int64_t dst_rows, size_t dst_stride,
                               clvarlen_scatter_mode mode, int zero_rest)
{
    size_t row_bytes = (size_t)row_elems * cv_dtype_size(dtype);
    rows_job j = {
        .dtype = dtype,
        .row_elems = row_elems,
        .row_bytes = row_bytes,
        .src = src,
        .src_stride = src_stride,
        .index = index,
        .dst = dst,
        .dst_stride = dst_stride,
        .zero_rest = zero_rest,
    };
    if (mode == CLVARLEN_SCATTER_OVERWRITE && !zero_rest) {
        cv_pool_for(cv_base(ctx)->pool, n_index, cv_cpu_rows_grain(row_bytes),
                    scatter_direct_task, &j);
        return CLVARLEN_SUCCESS;
    }
    if (dst_rows <= 0)
        return CLVARLEN_SUCCESS;
    if (mode == CLVARLEN_SCATTER_OVERWRITE) {
        int64_t *inverse = calloc((size_t)dst_rows, sizeof *inverse);
        if (!inverse)
            return cv_error(ctx, CLVARLEN_ERROR_OUT_OF_MEMORY,
                            "clvarlen_scatter_rows: cannot allocate the row map (%lld rows)",
                            (long long)dst_rows);
        for (int64_t r = 0; r < dst_rows; r++)
            inverse[r] = -1;
        for (int64_t m = 0; m < n_index; m++)
            if (index[m] >= 0)
                inverse[index[m]] = m;
        j.inverse = inverse;
        cv_pool_for(cv_base(ctx)->pool, dst_rows, cv_cpu_rows_grain(row_bytes),
                    scatter_inverse_task, &j);
        free(inverse);
        return CLVARLEN_SUCCESS;
    }
    /* Accumulate: a stable counting sort of m by destination row keeps index
     * order within each row, the order the device kernel sums in. */
    int64_t *row_start = calloc((size_t)dst_rows + 1, sizeof *row_start);
    int64_t *order = malloc((size_t)(n_index > 0 ? n_index : 1) * sizeof *order);
    if (!row_start || !order) {
        free(row_start);
        free(order);
        return cv_error(ctx, CLVARLEN_ERROR_OUT_OF_MEMORY,
                        "clvarlen_scatter_rows: cannot allocate the accumulation order");
    }
    for (int64_t m = 0; m < n_index; m++)
        if (index[m] >= 0)
            row_start[index[m] + 1]++;
    for (int64_t r = 0; r < dst_rows; r++)
        row_start[r + 1] += row_start[r];
    /* fill with a moving cursor per row; row_start[r] is restored afterwards */
    for (int64_t m = 0; m < n_index; m++)
        if (index[m] >= 0)
            order[row_start[index[m]]++] = m;
    for (int64_t r = dst_rows; r > 0; r--)
        row_start[r] = row_start[r - 1];
    row_start[0] = 0;
    j.row_start = row_start;
    j.order = order;
    int64_t grain = cv_cpu_rows_grain(row_bytes);
    cv_pool_for(cv_base(ctx)->pool, dst_rows, grain, scatter_acc_task, &j);
    free(row_start);
    free(order);
    return CLVARLEN_SUCCESS;
}
