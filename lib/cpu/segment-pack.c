/* The segment family on the CPU: pack, pack_masked and unpack (SPEC 2.3). */
#include "segment.h"

#include <stdlib.h>
#include <string.h>

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
        cv_cpu_copy_rows(j->packed + (size_t)t * j->row_bytes, j->row_bytes,
                         j->padded + (size_t)src_row * j->padded_stride, j->padded_stride,
                         run_end - t, j->row_bytes);
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
        cv_cpu_copy_rows(j->packed + (size_t)t * j->row_bytes, j->row_bytes,
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
    /* The mask form builds its row index first and copies rows from it: in
     * memory of its own, so no caller buffer is ever used as scratch (the
     * caller's src_index gets a copy once the rows are done). */
    int64_t *index = NULL;
    if (mask && total > 0) {
        index = calloc((size_t)total, sizeof *index);
        if (!index)
            return cv_error(ctx, CLVARLEN_ERROR_OUT_OF_MEMORY,
                            "clvarlen_pack_masked: cannot allocate %lld source indices",
                            (long long)total);
    }
    cv_cpu_cu_from_lengths(lens, batch, cu);
    pack_job j = {
        .row_bytes = row_bytes,
        .padded = padded,
        .padded_stride = padded_stride,
        .batch = batch,
        .max_seqlen = max_seqlen,
        .cu = cu,
        .mask = mask,
        .packed = packed,
        .src_index = src_index,
        .gather = index,
        .index_out = index,
    };
    if (total > 0) {
        if (mask) {
            cv_pool_for(cv_base(ctx)->pool, batch, 1, mask_index_task, &j);
            cv_pool_for(cv_base(ctx)->pool, total, cv_cpu_rows_grain(row_bytes), gather64_task, &j);
        } else {
            cv_pool_for(cv_base(ctx)->pool, total, cv_cpu_rows_grain(row_bytes), pack_prefix_task,
                        &j);
        }
    }
    if (index && src_index)
        memcpy(src_index, index, (size_t)total * sizeof *index);
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
            cv_cpu_copy_rows(j->padded + (size_t)r * j->padded_stride, j->padded_stride,
                             j->packed + (size_t)t * j->packed_stride, j->packed_stride, run,
                             j->row_bytes);
        } else {
            while (r + run < end && j->inverse[r + run] < 0)
                run++;
            if (j->pad_row)
                cv_cpu_copy_rows(j->padded + (size_t)r * j->padded_stride, j->padded_stride,
                                 j->pad_row, 0, run, j->row_bytes);
            else
                cv_cpu_zero_rows(j->padded + (size_t)r * j->padded_stride, j->padded_stride, run,
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
    unpack_job j = {
        .row_bytes = row_bytes,
        .packed = packed,
        .packed_stride = packed_stride,
        .inverse = inverse,
        .pad_row = pad_row,
        .padded = padded,
        .padded_stride = padded_stride,
    };
    cv_pool_for(cv_base(ctx)->pool, padded_rows, cv_cpu_rows_grain(row_bytes), unpack_task, &j);
    free(inverse);
    free(pad_row);
    return CLVARLEN_SUCCESS;
}
