/* The segment family on the CPU (SPEC 2): the fallback that lib/op-segment.c
 * calls once every argument is validated. Row movement is memcpy of whole
 * rows (one memcpy per run when both sides are contiguous), spread over the
 * context's thread pool in chunks of rows sized to move about 64 KiB per
 * task. Accumulation sums in f32 (f16/bf16) or wrapping i32 in index order,
 * exactly as the OpenCL kernels do, so both paths agree bitwise; gen_seq_lens
 * uses the same f32 operations in the same order as its kernel.
 */
#include "segment.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Bytes a task should move before splitting further pays off. */
#define SEG_TASK_BYTES (64 * 1024)
/* f16/bf16 rows are accumulated in f32 blocks of this many columns. */
#define SEG_ACC_BLOCK 256

static int64_t rows_grain(size_t row_bytes)
{
    int64_t g = (int64_t)(SEG_TASK_BYTES / (row_bytes ? row_bytes : 1));
    return g > 0 ? g : 1;
}

static void copy_rows(void *dst, size_t dst_stride, const void *src, size_t src_stride,
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

static void zero_rows(void *dst, size_t dst_stride, int64_t rows, size_t row_bytes)
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
static void acc_row(clvarlen_dtype dtype, int64_t elems, void *dst, const char *src,
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

/* ------------------------------------------------------------ lengths, maps */

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
    maps_job j = {cu, n, offsets, seq_id, pos};
    cv_pool_for(cv_base(ctx)->pool, total, 1 << 14, maps_task, &j);
}

/* ------------------------------------------------------------ pack / unpack */

typedef struct pack_job {
    size_t row_bytes;
    const char *padded;
    size_t padded_stride;
    int64_t batch, max_seqlen;
    const int32_t *cu;
    const uint8_t *mask;
    char *packed;
    int64_t *src_index;       /* output (prefix form), may be NULL */
    const int64_t *gather;    /* mask form: source row of every packed row */
    int64_t *index_out;       /* mask form: where the index is built */
} pack_job;

/* Prefix form over packed rows [begin, end): runs of one batch row each. */
static void pack_prefix_task(void *arg, int64_t begin, int64_t end)
{
    pack_job *j = arg;
    int64_t b = cv_seq_of_token_host(j->cu, j->batch, begin);
    int64_t t = begin;
    while (t < end) {
        while (b + 1 < j->batch && j->cu[b + 1] <= t)
            b++;
        int64_t run_end = CV_MIN(end, (int64_t)j->cu[b + 1]);
        int64_t s0 = t - j->cu[b];
        int64_t src_row = b * j->max_seqlen + s0;
        copy_rows(j->packed + (size_t)t * j->row_bytes, j->row_bytes,
                  j->padded + (size_t)src_row * j->padded_stride, j->padded_stride, run_end - t,
                  j->row_bytes);
        if (j->src_index)
            for (int64_t k = t; k < run_end; k++)
                j->src_index[k] = src_row + (k - t);
        t = run_end;
    }
}

/* Mask form, first pass: the source row of every kept element, per batch row. */
static void mask_index_task(void *arg, int64_t begin, int64_t end)
{
    pack_job *j = arg;
    for (int64_t b = begin; b < end; b++) {
        const uint8_t *m = j->mask + (size_t)(b * j->max_seqlen);
        int64_t t = j->cu[b];
        for (int64_t s = 0; s < j->max_seqlen; s++)
            if (m[s])
                j->index_out[t++] = b * j->max_seqlen + s;
    }
}

/* Mask form, second pass: copy rows, merging runs of consecutive sources. */
static void gather64_task(void *arg, int64_t begin, int64_t end)
{
    pack_job *j = arg;
    int64_t t = begin;
    while (t < end) {
        int64_t run = 1;
        while (t + run < end && j->gather[t + run] == j->gather[t] + run)
            run++;
        copy_rows(j->packed + (size_t)t * j->row_bytes, j->row_bytes,
                  j->padded + (size_t)j->gather[t] * j->padded_stride, j->padded_stride, run,
                  j->row_bytes);
        t += run;
    }
}

clvarlen_status cv_cpu_pack(clvarlen_context *ctx, size_t row_bytes, const void *padded,
                            size_t padded_stride, int64_t batch, int64_t max_seqlen,
                            const int32_t *lens, const uint8_t *mask, void *packed, int32_t *cu,
                            int64_t *src_index)
{
    int64_t total = 0;
    for (int64_t b = 0; b < batch; b++)
        total += lens[b];
    int64_t *index = src_index;
    if (mask && total > 0 && !index) {
        index = calloc((size_t)total, sizeof *index);
        if (!index)
            return cv_error(ctx, CLVARLEN_ERROR_OUT_OF_MEMORY,
                            "clvarlen_pack_masked: cannot allocate %lld source indices",
                            (long long)total);
    }
    cv_cpu_cu_from_lengths(lens, batch, cu);
    pack_job j = {row_bytes, padded, padded_stride, batch, max_seqlen, cu, mask, packed,
                  src_index, index, index};
    if (total > 0) {
        if (mask) {
            cv_pool_for(cv_base(ctx)->pool, batch, 1, mask_index_task, &j);
            cv_pool_for(cv_base(ctx)->pool, total, rows_grain(row_bytes), gather64_task, &j);
        } else {
            cv_pool_for(cv_base(ctx)->pool, total, rows_grain(row_bytes), pack_prefix_task, &j);
        }
    }
    if (index != src_index)
        free(index);
    return CLVARLEN_SUCCESS;
}

typedef struct unpack_job {
    size_t row_bytes;
    const char *packed;
    size_t packed_stride;
    const int64_t *inverse;
    const char *pad_row; /* NULL: zero */
    char *padded;
    size_t padded_stride;
} unpack_job;

static void unpack_task(void *arg, int64_t begin, int64_t end)
{
    unpack_job *j = arg;
    int64_t r = begin;
    while (r < end) {
        int64_t t = j->inverse[r];
        int64_t run = 1;
        if (t >= 0) {
            while (r + run < end && j->inverse[r + run] == t + run)
                run++;
            copy_rows(j->padded + (size_t)r * j->padded_stride, j->padded_stride,
                      j->packed + (size_t)t * j->packed_stride, j->packed_stride, run,
                      j->row_bytes);
        } else {
            while (r + run < end && j->inverse[r + run] < 0)
                run++;
            if (j->pad_row)
                copy_rows(j->padded + (size_t)r * j->padded_stride, j->padded_stride, j->pad_row,
                          0, run, j->row_bytes);
            else
                zero_rows(j->padded + (size_t)r * j->padded_stride, j->padded_stride, run,
                          j->row_bytes);
        }
        r += run;
    }
}

clvarlen_status cv_cpu_unpack(clvarlen_context *ctx, size_t row_bytes, size_t elem_size,
                              const void *packed, size_t packed_stride, int64_t total,
                              const int64_t *src_index, int64_t padded_rows, const void *pad,
                              void *padded, size_t padded_stride)
{
    if (padded_rows <= 0)
        return CLVARLEN_SUCCESS;
    int64_t *inverse = calloc((size_t)padded_rows, sizeof *inverse);
    char *pad_row = NULL;
    bool pad_zero = true;
    if (pad)
        for (size_t i = 0; i < elem_size; i++)
            pad_zero = pad_zero && ((const unsigned char *)pad)[i] == 0;
    if (!pad_zero)
        pad_row = malloc(row_bytes);
    if (!inverse || (!pad_zero && !pad_row)) {
        free(inverse);
        free(pad_row);
        return cv_error(ctx, CLVARLEN_ERROR_OUT_OF_MEMORY,
                        "clvarlen_unpack: cannot allocate the row map (%lld rows)",
                        (long long)padded_rows);
    }
    if (pad_row)
        for (size_t o = 0; o < row_bytes; o += elem_size)
            memcpy(pad_row + o, pad, elem_size);
    for (int64_t r = 0; r < padded_rows; r++)
        inverse[r] = -1;
    for (int64_t t = 0; t < total; t++)
        inverse[src_index[t]] = t;
    unpack_job j = {row_bytes, packed, packed_stride, inverse, pad_row, padded, padded_stride};
    cv_pool_for(cv_base(ctx)->pool, padded_rows, rows_grain(row_bytes), unpack_task, &j);
    free(inverse);
    free(pad_row);
    return CLVARLEN_SUCCESS;
}

/* ------------------------------------------------------------ gather / scatter */

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

static void gather_task(void *arg, int64_t begin, int64_t end)
{
    rows_job *j = arg;
    for (int64_t m = begin; m < end; m++) {
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
    cv_pool_for(cv_base(ctx)->pool, n_index, rows_grain(row_bytes), gather_task, &j);
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
            acc_row(j->dtype, j->row_elems, d, j->src, j->src_stride, j->order + k0, k1 - k0);
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
    rows_job j = {dtype, row_elems, row_bytes, src, src_stride, index, dst, dst_stride,
                  NULL, NULL, NULL, zero_rest};
    if (mode == CLVARLEN_SCATTER_OVERWRITE && !zero_rest) {
        cv_pool_for(cv_base(ctx)->pool, n_index, rows_grain(row_bytes), scatter_direct_task, &j);
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
        cv_pool_for(cv_base(ctx)->pool, dst_rows, rows_grain(row_bytes), scatter_inverse_task, &j);
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
    int64_t grain = rows_grain(row_bytes);
    cv_pool_for(cv_base(ctx)->pool, dst_rows, grain, scatter_acc_task, &j);
    free(row_start);
    free(order);
    return CLVARLEN_SUCCESS;
}

/* ------------------------------------------------------------ seqlens_expand */

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
    expand_job j = {kv_len, q_len, uniform_q_len, row_off, page_table, page_stride, col_limit,
                    seqlens_expanded, page_table ? page_table_out : NULL, out_stride};
    cv_pool_for(cv_base(ctx)->pool, n, 64, expand_task, &j);
    free(row_off);
    return CLVARLEN_SUCCESS;
}

/* ------------------------------------------------------------ context parallel */

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
            zero_rows(j->global + (size_t)(j->cu[s] + cursor) * j->gstride, j->gstride,
                      lo - cursor, j->row_bytes);
        char *g = j->global + (size_t)(j->cu[s] + lo) * j->gstride;
        char *l = j->local + (size_t)(owned[h][2] + lo) * j->lstride;
        if (j->to_local) {
            copy_rows(l, j->lstride, g, j->gstride, hi - lo, j->row_bytes);
        } else if (j->accumulate) {
            static const int64_t zero = 0;
            for (int64_t k = 0; k < hi - lo; k++)
                acc_row(j->dtype, j->row_elems, g + (size_t)k * j->gstride,
                        l + (size_t)k * j->lstride, 0, &zero, 1);
        } else {
            copy_rows(g, j->gstride, l, j->lstride, hi - lo, j->row_bytes);
        }
        cursor = hi;
    }
    if (j->zero_rest && cursor < b)
        zero_rows(j->global + (size_t)(j->cu[s] + cursor) * j->gstride, j->gstride, b - cursor,
                  j->row_bytes);
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
    cv_pool_for(cv_base(ctx)->pool, total, rows_grain(j.row_bytes), cp_rows_task, &j);
    free(lcu);
    return CLVARLEN_SUCCESS;
}

/* ------------------------------------------------------------ gen_seq_lens */

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
