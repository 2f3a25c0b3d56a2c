/* The public API's contract for every segment entry point on the CPU fallback:
 * every invalid argument of SPEC section 0 gives the documented status, a
 * message naming the function, and outputs left exactly as they were.
 *
 * This file makes no OpenCL call of its own: every context is "cpu".
 */
#include "test-api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ segment entry points */

typedef struct cu_args {
    clvarlen_context *ctx;
    const int32_t *lengths;
    int64_t n;
    int32_t *cu;
} cu_args;

static clvarlen_status call_cu_from_lengths(const cu_args *a)
{
    return clvarlen_cu_seqlens_from_lengths(a->ctx, a->lengths, a->n, a->cu);
}

START_TEST(api_cu_seqlens_from_lengths)
{
    const char *fn = "clvarlen_cu_seqlens_from_lengths";
#define call call_cu_from_lengths
    clvarlen_context *ctx = tu_cpu_context();
    static const int32_t lengths[3] = {3, 0, 5}, negative[3] = {3, -1, 5},
                         huge[3] = {INT32_MAX, 1, 0}, big[3] = {INT32_MAX - 5, 5, 0};
    outs o = {.n = 0};
    int32_t *cu = out_add(&o, 4 * sizeof(int32_t));
    cu_args ok = {ctx, lengths, 3, cu}, a;
    check_ok(ctx, call(&ok), "valid");
    ck_assert(cu[0] == 0 && cu[1] == 3 && cu[2] == 3 && cu[3] == 8);

    BAD(fn, a.ctx = NULL, IA);
    BAD(fn, a.lengths = NULL, IA);
    BAD(fn, a.cu = NULL, IA);
    BAD(fn, a.n = -1, IA);
    BAD(fn, a.lengths = negative, IA);
    BAD(fn, a.lengths = huge, CLVARLEN_ERROR_OVERFLOW);

    a = ok;
    a.lengths = big; /* exactly INT32_MAX is fine */
    check_ok(ctx, call(&a), "sum INT32_MAX");
    ck_assert_int_eq(cu[3], INT32_MAX);

    /* Empty batch: cu = [0]. */
    outs_fill(&o);
    a = ok;
    a.n = 0;
    check_ok(ctx, call(&a), "n = 0");
    ck_assert_int_eq(cu[0], 0);
    for (size_t b = sizeof(int32_t); b < o.g[0].bytes; b++)
        ck_assert(((unsigned char *)cu)[b] == SENTINEL);
    outs_free(&o);
    clvarlen_context_destroy(ctx);
#undef call
}
END_TEST

typedef struct len_args {
    clvarlen_context *ctx;
    const int32_t *cu;
    int64_t n;
    int32_t *lengths;
} len_args;

static clvarlen_status call_lengths_from_cu(const len_args *a)
{
    return clvarlen_lengths_from_cu_seqlens(a->ctx, a->cu, a->n, a->lengths);
}

START_TEST(api_lengths_from_cu_seqlens)
{
    const char *fn = "clvarlen_lengths_from_cu_seqlens";
#define call call_lengths_from_cu
    clvarlen_context *ctx = tu_cpu_context();
    static const int32_t cu[4] = {0, 3, 3, 8}, not_zero[4] = {1, 3, 3, 8},
                         negative0[4] = {-2, 3, 3, 8}, decreasing[4] = {0, 3, 2, 8};
    outs o = {.n = 0};
    int32_t *lengths = out_add(&o, 3 * sizeof(int32_t));
    len_args ok = {ctx, cu, 3, lengths}, a;
    check_ok(ctx, call(&ok), "valid");
    ck_assert(lengths[0] == 3 && lengths[1] == 0 && lengths[2] == 5);

    BAD(fn, a.ctx = NULL, IA);
    BAD(fn, a.cu = NULL, IA);
    BAD(fn, a.lengths = NULL, IA);
    BAD(fn, a.n = -1, IA);
    BAD(fn, a.cu = not_zero, ICU);
    BAD(fn, a.cu = negative0, ICU);
    BAD(fn, a.cu = decreasing, ICU);

    outs_fill(&o);
    a = ok;
    a.n = 0;
    check_ok(ctx, call(&a), "n = 0");
    outs_untouched(&o, "n = 0");
    outs_free(&o);
    clvarlen_context_destroy(ctx);
#undef call
}
END_TEST

typedef struct maps_args {
    clvarlen_context *ctx;
    const int32_t *cu;
    int64_t n, total;
    const int32_t *offsets;
    int32_t *seq_id, *pos;
} maps_args;

static clvarlen_status call_token_maps(const maps_args *a)
{
    return clvarlen_token_maps(a->ctx, a->cu, a->n, a->total, a->offsets, a->seq_id, a->pos);
}

START_TEST(api_token_maps)
{
    const char *fn = "clvarlen_token_maps";
#define call call_token_maps
    clvarlen_context *ctx = tu_cpu_context();
    static const int32_t cu[4] = {0, 5, 12, 18}, offsets[3] = {0, 100, 7},
                         not_zero[4] = {2, 5, 12, 18}, decreasing[4] = {0, 12, 5, 18},
                         zeros[4] = {0, 0, 0, 0};
    outs o = {.n = 0};
    int32_t *seq_id = out_add(&o, 18 * sizeof(int32_t));
    int32_t *pos = out_add(&o, 18 * sizeof(int32_t));
    maps_args ok = {ctx, cu, 3, 18, offsets, seq_id, pos}, a;
    check_ok(ctx, call(&ok), "valid");

    BAD(fn, a.ctx = NULL, IA);
    BAD(fn, a.cu = NULL, IA);
    BAD(fn, (a.seq_id = NULL, a.pos = NULL), IA);
    BAD(fn, a.n = -1, IA);
    BAD(fn, a.total = -1, IA);
    BAD(fn, a.total = 17, ICU);
    BAD(fn, a.total = 19, ICU);
    BAD(fn, a.cu = not_zero, ICU);
    BAD(fn, a.cu = decreasing, ICU);

    outs_fill(&o);
    a = ok;
    a.n = 0;
    a.total = 0;
    check_ok(ctx, call(&a), "n = 0");
    outs_untouched(&o, "n = 0");
    a = ok;
    a.cu = zeros;
    a.total = 0;
    check_ok(ctx, call(&a), "three empty sequences");
    outs_untouched(&o, "three empty sequences");
    outs_free(&o);
    clvarlen_context_destroy(ctx);
#undef call
}
END_TEST

typedef struct pack_args {
    clvarlen_context *ctx;
    clvarlen_dtype dtype;
    int64_t row_elems;
    const void *padded;
    int64_t padded_stride, batch, max_seqlen;
    const int32_t *valid_lens;
    const uint8_t *mask;
    int64_t capacity;
    void *packed;
    int32_t *cu;
    int64_t *src_index, *total;
} pack_args;

static clvarlen_status call_pack(const pack_args *a)
{
    return clvarlen_pack(a->ctx, a->dtype, a->row_elems, a->padded, a->padded_stride, a->batch,
                         a->max_seqlen, a->valid_lens, a->capacity, a->packed, a->cu,
                         a->src_index, a->total);
}

static clvarlen_status call_pack_masked(const pack_args *a)
{
    return clvarlen_pack_masked(a->ctx, a->dtype, a->row_elems, a->padded, a->padded_stride,
                                a->batch, a->max_seqlen, a->mask, a->capacity, a->packed, a->cu,
                                a->src_index, a->total);
}

START_TEST(api_pack)
{
    const char *fn = "clvarlen_pack";
#define call call_pack
    clvarlen_context *ctx = tu_cpu_context();
    float padded[8 * 3];
    for (int i = 0; i < 24; i++)
        padded[i] = (float)i;
    static const int32_t valid[2] = {2, 4}, too_long[2] = {2, 5}, negative[2] = {-1, 4};
    outs o = {.n = 0};
    void *packed = out_add(&o, 6 * 3 * sizeof(float));
    int32_t *cu = out_add(&o, 3 * sizeof(int32_t));
    int64_t *src_index = out_add(&o, 6 * sizeof(int64_t));
    int64_t *total = out_add(&o, sizeof(int64_t));
    pack_args ok = {ctx, CLVARLEN_DTYPE_F32, 3, padded, 0, 2, 4, valid, NULL, 6,
                    packed, cu, src_index, total}, a;
    check_ok(ctx, call(&ok), "valid");
    ck_assert(*total == 6 && cu[0] == 0 && cu[1] == 2 && cu[2] == 6);

    BAD(fn, a.ctx = NULL, IA);
    BAD(fn, a.dtype = BAD_DTYPE, IA);
    BAD(fn, a.row_elems = 0, IA);
    BAD(fn, a.row_elems = -3, IA);
    BAD(fn, a.padded = NULL, IA);
    BAD(fn, a.padded_stride = 2, IA);
    BAD(fn, a.padded_stride = -3, IA);
    BAD(fn, a.batch = -1, IA);
    BAD(fn, a.max_seqlen = -1, IA);
    BAD(fn, a.valid_lens = NULL, IA);
    /* valid_lens must lie in [0, max_seqlen]: a size, so INVALID_ARGUMENT; the header does
     * not name the code, so INDEX_OUT_OF_RANGE is accepted too. */
    BAD2(fn, a.valid_lens = too_long, IA, IOR);
    BAD2(fn, a.valid_lens = negative, IA, IOR);
    BAD(fn, a.capacity = 5, BTS);
    BAD(fn, a.capacity = -1, IA);
    BAD(fn, a.packed = NULL, IA);
    BAD(fn, a.cu = NULL, IA);

    /* src_index and total may be NULL. */
    a = ok;
    a.src_index = NULL;
    a.total = NULL;
    check_ok(ctx, call(&a), "NULL src_index and total");
    a = ok;
    a.capacity = 100; /* more room than needed is fine */
    check_ok(ctx, call(&a), "capacity 100");

    outs_fill(&o);
    a = ok;
    a.batch = 0;
    check_ok(ctx, call(&a), "batch 0");
    ck_assert_int_eq(cu[0], 0);
    ck_assert_int_eq(*total, 0);
    outs_free(&o);
    clvarlen_context_destroy(ctx);
#undef call
}
END_TEST

START_TEST(api_pack_masked)
{
    const char *fn = "clvarlen_pack_masked";
#define call call_pack_masked
    clvarlen_context *ctx = tu_cpu_context();
    uint16_t padded[8 * 5];
    for (int i = 0; i < 40; i++)
        padded[i] = (uint16_t)(i * 77);
    static const uint8_t mask[8] = {7, 0, 255, 0, 0, 1, 1, 2};
    outs o = {.n = 0};
    void *packed = out_add(&o, 5 * 5 * sizeof(uint16_t));
    int32_t *cu = out_add(&o, 3 * sizeof(int32_t));
    int64_t *src_index = out_add(&o, 5 * sizeof(int64_t));
    int64_t *total = out_add(&o, sizeof(int64_t));
    pack_args ok = {ctx, CLVARLEN_DTYPE_BF16, 5, padded, 0, 2, 4, NULL, mask, 5,
                    packed, cu, src_index, total}, a;
    check_ok(ctx, call(&ok), "valid");
    ck_assert(*total == 5 && cu[1] == 2 && cu[2] == 5);
    ck_assert(src_index[0] == 0 && src_index[1] == 2 && src_index[2] == 5 && src_index[4] == 7);

    BAD(fn, a.ctx = NULL, IA);
    BAD(fn, a.dtype = BAD_DTYPE, IA);
    BAD(fn, a.row_elems = 0, IA);
    BAD(fn, a.padded = NULL, IA);
    BAD(fn, a.padded_stride = 4, IA);
    BAD(fn, a.batch = -1, IA);
    BAD(fn, a.max_seqlen = -1, IA);
    BAD(fn, a.mask = NULL, IA);
    BAD(fn, a.capacity = 4, BTS);
    BAD(fn, a.capacity = -1, IA);
    BAD(fn, a.packed = NULL, IA);
    BAD(fn, a.cu = NULL, IA);

    outs_fill(&o);
    a = ok;
    a.batch = 0;
    check_ok(ctx, call(&a), "batch 0");
    ck_assert_int_eq(cu[0], 0);
    ck_assert_int_eq(*total, 0);
    outs_free(&o);
    clvarlen_context_destroy(ctx);
#undef call
}
END_TEST

typedef struct unpack_args {
    clvarlen_context *ctx;
    clvarlen_dtype dtype;
    int64_t row_elems;
    const void *packed;
    int64_t packed_stride, total;
    const int64_t *src_index;
    int64_t batch, max_seqlen;
    const void *pad_value;
    void *padded;
    int64_t padded_stride;
} unpack_args;

static clvarlen_status call_unpack(const unpack_args *a)
{
    return clvarlen_unpack(a->ctx, a->dtype, a->row_elems, a->packed, a->packed_stride, a->total,
                           a->src_index, a->batch, a->max_seqlen, a->pad_value, a->padded,
                           a->padded_stride);
}

START_TEST(api_unpack)
{
    const char *fn = "clvarlen_unpack";
#define call call_unpack
    clvarlen_context *ctx = tu_cpu_context();
    float packed[3 * 3];
    for (int i = 0; i < 9; i++)
        packed[i] = (float)(i + 1);
    static const int64_t src_index[3] = {0, 5, 2}, past_end[3] = {0, 8, 2},
                         negative[3] = {0, -1, 2}, repeated[3] = {0, 5, 0};
    const float pad = -1.5f;
    outs o = {.n = 0};
    float *padded = out_add(&o, 8 * 3 * sizeof(float));
    unpack_args ok = {ctx, CLVARLEN_DTYPE_F32, 3, packed, 0, 3, src_index, 2, 4, &pad,
                      padded, 0}, a;
    check_ok(ctx, call(&ok), "valid");
    ck_assert(padded[5 * 3 + 1] == 5.0f && padded[1 * 3] == -1.5f);

    BAD(fn, a.ctx = NULL, IA);
    BAD(fn, a.dtype = BAD_DTYPE, IA);
    BAD(fn, a.row_elems = 0, IA);
    BAD(fn, a.packed = NULL, IA);
    BAD(fn, a.packed_stride = 1, IA);
    BAD(fn, a.total = -1, IA);
    BAD(fn, a.src_index = NULL, IA);
    BAD(fn, a.src_index = past_end, IOR);
    BAD(fn, a.src_index = negative, IOR);
    BAD(fn, a.src_index = repeated, IA);
    BAD(fn, a.batch = -1, IA);
    BAD(fn, a.max_seqlen = -1, IA);
    BAD(fn, a.padded = NULL, IA);
    BAD(fn, a.padded_stride = 2, IA);

    outs_fill(&o);
    a = ok;
    a.batch = 0;
    a.total = 0;
    check_ok(ctx, call(&a), "batch 0");
    outs_untouched(&o, "batch 0");
    outs_free(&o);
    clvarlen_context_destroy(ctx);
#undef call
}
END_TEST

typedef struct gather_args {
    clvarlen_context *ctx;
    clvarlen_dtype dtype;
    int64_t row_elems;
    const void *src;
    int64_t src_rows, src_stride;
    const int32_t *index;
    int64_t n_index;
    void *dst;
    int64_t dst_stride;
} gather_args;

static clvarlen_status call_gather(const gather_args *a)
{
    return clvarlen_gather_rows(a->ctx, a->dtype, a->row_elems, a->src, a->src_rows,
                                a->src_stride, a->index, a->n_index, a->dst, a->dst_stride);
}

START_TEST(api_gather_rows)
{
    const char *fn = "clvarlen_gather_rows";
#define call call_gather
    clvarlen_context *ctx = tu_cpu_context();
    float src[4 * 3];
    for (int i = 0; i < 12; i++)
        src[i] = (float)(i + 1);
    static const int32_t index[3] = {2, -1, 0}, past_end[3] = {2, 4, 0},
                         below[3] = {2, -2, 0};
    outs o = {.n = 0};
    float *dst = out_add(&o, 3 * 3 * sizeof(float));
    gather_args ok = {ctx, CLVARLEN_DTYPE_F32, 3, src, 4, 0, index, 3, dst, 0}, a;
    check_ok(ctx, call(&ok), "valid");
    ck_assert(dst[0] == 7.0f && dst[3] == 0.0f && dst[6] == 1.0f);

    BAD(fn, a.ctx = NULL, IA);
    BAD(fn, a.dtype = BAD_DTYPE, IA);
    BAD(fn, a.row_elems = 0, IA);
    BAD(fn, a.row_elems = -1, IA);
    BAD(fn, a.src = NULL, IA);
    BAD(fn, a.src_rows = -1, IA);
    BAD(fn, a.src_stride = 2, IA);
    BAD(fn, a.src_stride = -3, IA);
    BAD(fn, a.index = NULL, IA);
    BAD(fn, a.n_index = -1, IA);
    BAD(fn, a.dst = NULL, IA);
    BAD(fn, a.dst_stride = 2, IA);
    BAD(fn, a.index = past_end, IOR);
    BAD(fn, a.index = below, IOR);
    BAD(fn, a.src_rows = 2, IOR); /* index 2 no longer exists */

    outs_fill(&o);
    a = ok;
    a.n_index = 0;
    check_ok(ctx, call(&a), "n_index 0");
    outs_untouched(&o, "n_index 0");
    outs_free(&o);
    clvarlen_context_destroy(ctx);
#undef call
}
END_TEST

typedef struct scatter_args {
    clvarlen_context *ctx;
    clvarlen_dtype dtype;
    int64_t row_elems;
    const void *src;
    int64_t src_stride;
    const int32_t *index;
    int64_t n_index;
    void *dst;
    int64_t dst_rows, dst_stride;
    clvarlen_scatter_mode mode;
    unsigned flags;
} scatter_args;

static clvarlen_status call_scatter(const scatter_args *a)
{
    return clvarlen_scatter_rows(a->ctx, a->dtype, a->row_elems, a->src, a->src_stride, a->index,
                                 a->n_index, a->dst, a->dst_rows, a->dst_stride, a->mode,
                                 a->flags);
}

START_TEST(api_scatter_rows)
{
    const char *fn = "clvarlen_scatter_rows";
#define call call_scatter
    clvarlen_context *ctx = tu_cpu_context();
    float src[3 * 3 * 2]; /* room for the f64/i64 cases */
    for (int i = 0; i < 18; i++)
        src[i] = (float)(i + 1);
    static const int32_t index[3] = {2, -1, 0}, past_end[3] = {2, 4, 0},
                         below[3] = {2, -3, 0}, repeated[3] = {2, 2, 0};
    outs o = {.n = 0};
    void *dst = out_add(&o, 4 * 3 * sizeof(double));
    scatter_args ok = {ctx, CLVARLEN_DTYPE_F32, 3, src, 0, index, 3, dst, 4, 0,
                       CLVARLEN_SCATTER_OVERWRITE, 0}, a;
    check_ok(ctx, call(&ok), "valid");
    a = ok;
    a.flags = CLVARLEN_SCATTER_ZERO_REST;
    check_ok(ctx, call(&a), "valid, zero rest");
    a = ok;
    a.mode = CLVARLEN_SCATTER_ACCUMULATE;
    a.index = repeated;
    check_ok(ctx, call(&a), "accumulate with a repeated index");
    a = ok;
    a.flags = CLVARLEN_SCATTER_UNIQUE_INDICES;
    check_ok(ctx, call(&a), "unique indices");

    BAD(fn, a.ctx = NULL, IA);
    BAD(fn, a.dtype = BAD_DTYPE, IA);
    BAD(fn, a.row_elems = 0, IA);
    BAD(fn, a.src = NULL, IA);
    BAD(fn, a.src_stride = 2, IA);
    BAD(fn, a.index = NULL, IA);
    BAD(fn, a.n_index = -1, IA);
    BAD(fn, a.dst = NULL, IA);
    BAD(fn, a.dst_rows = -1, IA);
    BAD(fn, a.dst_stride = 2, IA);
    BAD(fn, a.index = past_end, IOR);
    BAD(fn, a.index = below, IOR);
    BAD(fn, a.dst_rows = 2, IOR);
    BAD(fn, (a.index = past_end, a.flags = CLVARLEN_SCATTER_ZERO_REST), IOR);
    BAD(fn, (a.index = past_end, a.mode = CLVARLEN_SCATTER_ACCUMULATE), IOR);
    BAD(fn, a.index = repeated, IA);
    BAD(fn, (a.index = repeated, a.flags = CLVARLEN_SCATTER_ZERO_REST), IA);
    BAD(fn, a.mode = (clvarlen_scatter_mode)5, IA);
    BAD(fn, a.mode = (clvarlen_scatter_mode)-1, IA);
    BAD(fn, a.flags = 0x100u, IA);
    /* Accumulate is f32, f16, bf16 and i32 only; the header leaves the code open between
     * an invalid request and an unsupported one. */
    BAD2(fn, (a.mode = CLVARLEN_SCATTER_ACCUMULATE, a.dtype = CLVARLEN_DTYPE_U8), IA, UNSUP);
    BAD2(fn, (a.mode = CLVARLEN_SCATTER_ACCUMULATE, a.dtype = CLVARLEN_DTYPE_F64), IA, UNSUP);
    BAD2(fn, (a.mode = CLVARLEN_SCATTER_ACCUMULATE, a.dtype = CLVARLEN_DTYPE_I64), IA, UNSUP);

    outs_fill(&o);
    a = ok;
    a.n_index = 0;
    check_ok(ctx, call(&a), "n_index 0");
    outs_untouched(&o, "n_index 0");
    outs_free(&o);
    clvarlen_context_destroy(ctx);
#undef call
}
END_TEST

typedef struct expand_args {
    clvarlen_context *ctx;
    const int32_t *kv_len, *q_len;
    int32_t uniform_q_len;
    int64_t n;
    const int32_t *page_table;
    int64_t page_cols, page_stride, col_limit, capacity;
    int32_t *seqlens, *page_out;
    int64_t out_stride;
    int64_t *total;
} expand_args;

static clvarlen_status call_expand(const expand_args *a)
{
    return clvarlen_seqlens_expand(a->ctx, a->kv_len, a->q_len, a->uniform_q_len, a->n,
                                   a->page_table, a->page_cols, a->page_stride, a->col_limit,
                                   a->capacity, a->seqlens, a->page_out, a->out_stride, a->total);
}

START_TEST(api_seqlens_expand)
{
    const char *fn = "clvarlen_seqlens_expand";
#define call call_expand
    clvarlen_context *ctx = tu_cpu_context();
    static const int32_t kv[3] = {5, 2, 9}, q[3] = {2, 0, 3}, q_negative[3] = {2, -1, 3},
                         kv_negative[3] = {5, -2, 9};
    int32_t page_table[3 * 4];
    for (int i = 0; i < 12; i++)
        page_table[i] = 100 + i;
    outs o = {.n = 0};
    int32_t *seqlens = out_add(&o, 6 * sizeof(int32_t));
    int32_t *page_out = out_add(&o, 6 * 3 * sizeof(int32_t));
    int64_t *total = out_add(&o, sizeof(int64_t));
    expand_args ok = {ctx, kv, q, 0, 3, page_table, 4, 0, 3, 5, seqlens, page_out, 0, total}, a;
    check_ok(ctx, call(&ok), "valid");
    ck_assert_int_eq(*total, 5);
    ck_assert(seqlens[0] == 4 && seqlens[1] == 5 && seqlens[2] == 7 && seqlens[4] == 9);
    ck_assert(page_out[0] == 100 && page_out[2] == 102 && page_out[3 * 2] == 108);

    BAD(fn, a.ctx = NULL, IA);
    BAD(fn, a.kv_len = NULL, IA);
    BAD(fn, a.n = -1, IA);
    BAD(fn, a.q_len = q_negative, IA);
    /* A negative KV length is a negative size (the clamp at 0 is for kv < q). */
    BAD(fn, a.kv_len = kv_negative, IA);
    BAD(fn, (a.q_len = NULL, a.uniform_q_len = -1), IA);
    BAD(fn, a.capacity = 4, BTS);
    BAD(fn, (a.q_len = NULL, a.uniform_q_len = 2), BTS); /* 6 rows > capacity 5 */
    BAD(fn, a.capacity = -1, IA);
    BAD(fn, a.page_out = NULL, IA);
    BAD(fn, a.page_cols = 0, IA);
    BAD(fn, a.page_cols = -4, IA);
    BAD(fn, a.col_limit = 5, IA);
    BAD(fn, a.col_limit = -1, IA);
    BAD(fn, a.page_stride = 3, IA);
    BAD(fn, a.out_stride = 2, IA);

    a = ok;
    a.page_table = NULL; /* no expansion: page arguments are not used */
    a.page_out = NULL;
    a.total = NULL;
    check_ok(ctx, call(&a), "no page table");
    a = ok;
    a.q_len = NULL;
    a.uniform_q_len = 2;
    a.capacity = 6;
    check_ok(ctx, call(&a), "uniform q");
    ck_assert_int_eq(*total, 6);

    outs_fill(&o);
    a = ok;
    a.n = 0;
    check_ok(ctx, call(&a), "n 0");
    ck_assert_int_eq(*total, 0);
    memset(total, SENTINEL, sizeof *total);
    outs_untouched(&o, "n 0");
    outs_free(&o);
    clvarlen_context_destroy(ctx);
#undef call
}
END_TEST

typedef struct plan_args {
    clvarlen_context *ctx;
    const int32_t *cu;
    int64_t n;
    int32_t world, rank;
    clvarlen_cp_plan_out *plan;
} plan_args;

static clvarlen_status call_plan(const plan_args *a)
{
    return clvarlen_cp_plan(a->ctx, a->cu, a->n, a->world, a->rank, a->plan);
}

START_TEST(api_cp_plan)
{
    const char *fn = "clvarlen_cp_plan";
#define call call_plan
    clvarlen_context *ctx = tu_cpu_context();
    static const int32_t cu[4] = {0, 5, 5, 12}, decreasing[4] = {0, 5, 4, 12},
                         not_zero[4] = {3, 5, 5, 12};
    outs o = {.n = 0};
    /* world 2, rank 1: chunks 1 and 2 of 4; L = 5 -> 1 + 1, L = 0 -> 0, L = 7 -> 2 + 2. */
    const int64_t local = 6;
    clvarlen_cp_plan_out plan, *p = out_add(&o, sizeof plan);
    memset(&plan, 0, sizeof plan);
    plan.local_cu_seqlens = out_add(&o, 4 * sizeof(int32_t));
    plan.head_cu = out_add(&o, 4 * sizeof(int32_t));
    plan.tail_cu = out_add(&o, 4 * sizeof(int32_t));
    plan.global_index = out_add(&o, local * sizeof(int32_t));
    plan.position = out_add(&o, local * sizeof(int32_t));
    plan.capacity = local;
    /* The struct itself holds outputs (local_tokens, max_head, max_tail): it is watched too,
     * so each case copies `plan` into the watched bytes first. */
    plan_args ok = {ctx, cu, 3, 2, 1, p}, a;
    memcpy(p, &plan, sizeof plan);
    check_ok(ctx, call(&ok), "valid");
    ck_assert_int_eq(p->local_tokens, local);
    ck_assert_int_eq(p->max_head, 2);
    ck_assert_int_eq(p->max_tail, 2);

#undef BAD
#define BAD(fn_, mut, want)                                                                    \
    do {                                                                                       \
        a = ok;                                                                                \
        outs_fill(&o);                                                                         \
        clvarlen_cp_plan_out pl_ = plan;                                                       \
        pl_.local_tokens = -777;                                                               \
        pl_.max_head = pl_.max_tail = -777;                                                    \
        mut;                                                                                   \
        memcpy(p, &pl_, sizeof pl_);                                                           \
        clvarlen_status st_ = call(&a);                                                        \
        check_err(a.ctx, st_, (want), CLVARLEN_SUCCESS, (fn_), #mut);                          \
        tu_check(memcmp(p, &pl_, sizeof pl_) == 0, "%s: plan struct written", #mut);           \
        memset(p, SENTINEL, sizeof pl_);                                                       \
        outs_untouched(&o, #mut);                                                              \
    } while (0)

    BAD(fn, a.ctx = NULL, IA);
    BAD(fn, a.cu = NULL, IA);
    BAD(fn, a.n = -1, IA);
    BAD(fn, a.world = 0, IA);
    BAD(fn, a.world = -2, IA);
    BAD(fn, a.rank = -1, IA);
    BAD(fn, a.rank = 2, IA);
    BAD(fn, (a.world = 1, a.rank = 1), IA);
    BAD(fn, a.cu = decreasing, ICU);
    BAD(fn, a.cu = not_zero, ICU);
    BAD(fn, pl_.local_cu_seqlens = NULL, IA);
    BAD(fn, pl_.capacity = local - 1, BTS);
    BAD(fn, pl_.capacity = -1, IA);
    BAD(fn, (pl_.global_index = NULL, pl_.capacity = local - 1), BTS); /* position still needs room */
    a = ok;
    clvarlen_cp_plan_out pl = plan;
    pl.global_index = NULL;
    pl.position = NULL;
    pl.capacity = 0;
    memcpy(p, &pl, sizeof pl);
    check_ok(ctx, call(&a), "no per-token outputs");
    ck_assert_int_eq(p->local_tokens, local);
    check_err(ctx, clvarlen_cp_plan(ctx, cu, 3, 2, 1, NULL), IA, 0, fn, "NULL plan");

    /* Empty batch. */
    outs_fill(&o);
    memcpy(p, &plan, sizeof plan);
    a = ok;
    a.n = 0;
    check_ok(ctx, call(&a), "n 0");
    ck_assert_int_eq(p->local_tokens, 0);
    ck_assert_int_eq(plan.local_cu_seqlens[0], 0);
    outs_free(&o);
    clvarlen_context_destroy(ctx);
#undef call
#undef BAD
#define BAD(fn, mut, want) BAD2(fn, mut, want, CLVARLEN_SUCCESS)
}
END_TEST

typedef struct cpg_args {
    clvarlen_context *ctx;
    clvarlen_dtype dtype;
    int64_t row_elems;
    const void *global;
    int64_t global_stride;
    const int32_t *cu;
    int64_t n;
    int32_t world, rank;
    void *local;
    int64_t local_stride, local_capacity;
} cpg_args;

static clvarlen_status call_cp_gather(const cpg_args *a)
{
    return clvarlen_cp_gather(a->ctx, a->dtype, a->row_elems, a->global, a->global_stride, a->cu,
                              a->n, a->world, a->rank, a->local, a->local_stride,
                              a->local_capacity);
}

START_TEST(api_cp_gather)
{
    const char *fn = "clvarlen_cp_gather";
#define call call_cp_gather
    clvarlen_context *ctx = tu_cpu_context();
    static const int32_t cu[4] = {0, 5, 5, 12}, decreasing[4] = {0, 5, 4, 12},
                         not_zero[4] = {1, 5, 5, 12};
    float global[12 * 3];
    for (int i = 0; i < 36; i++)
        global[i] = (float)i;
    /* world 2, rank 0: chunks 0 and 3; L = 5 -> 2 + 1, L = 7 -> 2 + 1. */
    const int64_t local = 6;
    outs o = {.n = 0};
    void *dst = out_add(&o, local * 3 * sizeof(float));
    cpg_args ok = {ctx, CLVARLEN_DTYPE_F32, 3, global, 0, cu, 3, 2, 0, dst, 0, local}, a;
    check_ok(ctx, call(&ok), "valid");

    BAD(fn, a.ctx = NULL, IA);
    BAD(fn, a.dtype = BAD_DTYPE, IA);
    BAD(fn, a.row_elems = 0, IA);
    BAD(fn, a.global = NULL, IA);
    BAD(fn, a.global_stride = 2, IA);
    BAD(fn, a.cu = NULL, IA);
    BAD(fn, a.n = -1, IA);
    BAD(fn, a.world = 0, IA);
    BAD(fn, a.rank = 2, IA);
    BAD(fn, a.rank = -1, IA);
    BAD(fn, a.cu = decreasing, ICU);
    BAD(fn, a.cu = not_zero, ICU);
    BAD(fn, a.local = NULL, IA);
    BAD(fn, a.local_stride = 1, IA);
    BAD(fn, a.local_capacity = local - 1, BTS);
    BAD(fn, a.local_capacity = -1, IA);

    outs_fill(&o);
    a = ok;
    a.n = 0;
    check_ok(ctx, call(&a), "n 0");
    outs_untouched(&o, "n 0");
    outs_free(&o);
    clvarlen_context_destroy(ctx);
#undef call
}
END_TEST

typedef struct cps_args {
    clvarlen_context *ctx;
    clvarlen_dtype dtype;
    int64_t row_elems;
    const void *local;
    int64_t local_stride;
    const int32_t *cu;
    int64_t n;
    int32_t world, rank;
    void *global;
    int64_t global_stride;
    clvarlen_scatter_mode mode;
    unsigned flags;
} cps_args;

static clvarlen_status call_cp_scatter(const cps_args *a)
{
    return clvarlen_cp_scatter(a->ctx, a->dtype, a->row_elems, a->local, a->local_stride, a->cu,
                               a->n, a->world, a->rank, a->global, a->global_stride, a->mode,
                               a->flags);
}

START_TEST(api_cp_scatter)
{
    const char *fn = "clvarlen_cp_scatter";
#define call call_cp_scatter
    clvarlen_context *ctx = tu_cpu_context();
    static const int32_t cu[4] = {0, 5, 5, 12}, decreasing[4] = {0, 5, 4, 12},
                         not_zero[4] = {1, 5, 5, 12};
    float local[6 * 3];
    for (int i = 0; i < 18; i++)
        local[i] = (float)i;
    outs o = {.n = 0};
    void *global = out_add(&o, 12 * 3 * sizeof(float));
    cps_args ok = {ctx, CLVARLEN_DTYPE_F32, 3, local, 0, cu, 3, 2, 0, global, 0,
                   CLVARLEN_SCATTER_OVERWRITE, CLVARLEN_SCATTER_ZERO_REST}, a;
    check_ok(ctx, call(&ok), "valid");
    a = ok;
    a.mode = CLVARLEN_SCATTER_ACCUMULATE;
    a.flags = 0;
    check_ok(ctx, call(&a), "accumulate");

    BAD(fn, a.ctx = NULL, IA);
    BAD(fn, a.dtype = BAD_DTYPE, IA);
    BAD(fn, a.row_elems = 0, IA);
    BAD(fn, a.local = NULL, IA);
    BAD(fn, a.local_stride = 2, IA);
    BAD(fn, a.cu = NULL, IA);
    BAD(fn, a.n = -1, IA);
    BAD(fn, a.world = 0, IA);
    BAD(fn, a.rank = 2, IA);
    BAD(fn, a.rank = -1, IA);
    BAD(fn, a.cu = decreasing, ICU);
    BAD(fn, a.cu = not_zero, ICU);
    BAD(fn, a.global = NULL, IA);
    BAD(fn, a.global_stride = 2, IA);
    BAD(fn, a.mode = (clvarlen_scatter_mode)9, IA);
    BAD(fn, a.flags = 0x100u, IA);
    BAD2(fn, (a.mode = CLVARLEN_SCATTER_ACCUMULATE, a.dtype = CLVARLEN_DTYPE_U8), IA, UNSUP);

    outs_fill(&o);
    a = ok;
    a.n = 0;
    a.flags = 0;
    check_ok(ctx, call(&a), "n 0");
    outs_untouched(&o, "n 0");
    outs_free(&o);
    clvarlen_context_destroy(ctx);
#undef call
}
END_TEST

typedef struct gen_args {
    clvarlen_context *ctx;
    uint64_t seed;
    int32_t world, n;
    int64_t total;
    int32_t *out;
} gen_args;

static clvarlen_status call_gen(const gen_args *a)
{
    return clvarlen_gen_seq_lens(a->ctx, a->seed, a->world, a->n, a->total, a->out);
}

START_TEST(api_gen_seq_lens)
{
    const char *fn = "clvarlen_gen_seq_lens";
#define call call_gen
    clvarlen_context *ctx = tu_cpu_context();
    outs o = {.n = 0};
    int32_t *out = out_add(&o, 2 * 4 * sizeof(int32_t));
    gen_args ok = {ctx, 1, 2, 4, 100, out}, a;
    check_ok(ctx, call(&ok), "valid");
    ck_assert_int_eq(out[0] + out[1] + out[2] + out[3], 100);

    BAD(fn, a.ctx = NULL, IA);
    BAD(fn, a.out = NULL, IA);
    BAD(fn, a.world = 0, IA);
    BAD(fn, a.world = -1, IA);
    BAD(fn, a.n = 0, IA);
    BAD(fn, a.n = -4, IA);
    BAD(fn, a.total = -1, IA);
    /* total must be exact in f32; past 2^24 is out of the documented domain. */
    BAD2(fn, a.total = (1 << 24) + 1, IA, CLVARLEN_ERROR_OVERFLOW);

    a = ok;
    a.total = 1 << 24;
    a.world = 1;
    check_ok(ctx, call(&a), "total 2^24");
    a = ok;
    a.total = 0;
    check_ok(ctx, call(&a), "total 0");
    for (int i = 0; i < 8; i++)
        ck_assert_int_eq(out[i], 0);
    outs_free(&o);
    clvarlen_context_destroy(ctx);
#undef call
}
END_TEST

TCase *api_segment_cases(void)
{
    TCase *tc = tcase_create("segment-arguments");
    tcase_add_test(tc, api_cu_seqlens_from_lengths);
    tcase_add_test(tc, api_lengths_from_cu_seqlens);
    tcase_add_test(tc, api_token_maps);
    tcase_add_test(tc, api_pack);
    tcase_add_test(tc, api_pack_masked);
    tcase_add_test(tc, api_unpack);
    tcase_add_test(tc, api_gather_rows);
    tcase_add_test(tc, api_scatter_rows);
    tcase_add_test(tc, api_seqlens_expand);
    tcase_add_test(tc, api_cp_plan);
    tcase_add_test(tc, api_cp_gather);
    tcase_add_test(tc, api_cp_scatter);
    tcase_add_test(tc, api_gen_seq_lens);
    return tc;
}
