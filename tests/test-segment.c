/* Segment family (SPEC section 2) through the host-memory entry points,
 * against the float64/naive oracles of tests/ref/segment-ref.c.
 *
 * Built once per backend (tests/meson.build): the cases take their context
 * from a checked fixture, the CPU fallback in test-segment-cpu and the OpenCL
 * device in test-segment-cl, which also runs test-segment-clmem.c's cases.
 *
 * Copies are compared bitwise over whole output buffers, including the bytes
 * between strided rows (a strided view must not write outside itself), with
 * guard bands on both sides. Random data for copies is raw random bits
 * (NaN payloads, subnormals), so a copy that goes through float registers
 * shows. Seeds: CLVARLEN_TEST_SEED overrides the base; every failure message
 * prints the seed of its case.
 */
#include "test-segment.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

clvarlen_context *seg_ctx;

void seg_setup(void)
{
#if TEST_BACKEND_CL
    seg_ctx = seg_cl_context(0);
#else
    seg_ctx = tu_cpu_context();
#endif
}

void seg_teardown(void)
{
    clvarlen_context_destroy(seg_ctx);
    seg_ctx = NULL;
}

uint64_t seg_seed(uint64_t k)
{
    static uint64_t base = 0;
    if (!base) {
        const char *env = getenv("CLVARLEN_TEST_SEED");
        base = env && *env ? strtoull(env, NULL, 0) : 20240917u;
        if (!base)
            base = 1;
    }
    return base * 1000003u + k;
}

void random_bytes(tu_rng *r, void *p, size_t n)
{
    tu_fill_random(r, p, U8, n, 1.0);
}

int64_t random_stride(tu_rng *r, int64_t row_elems)
{
    int64_t extra = tu_int(r, 0, 3);
    if (extra == 0 && tu_int(r, 0, 1))
        return 0;
    return row_elems + extra;
}

size_t pitch_bytes(clvarlen_dtype dtype, int64_t row_elems, int64_t stride)
{
    return (size_t)(stride ? stride : row_elems) * clvarlen_dtype_size(dtype);
}

const rowcfg copy_rows[] = {
    {U8, 3},   {F16, 3},   {F32, 3},    {U8, 12},  {BF16, 8}, {F64, 5},
    {I32, 7},  {I64, 2},   {U8, 1},     {F16, 64}, {BF16, 130}, {F32, 1000},
};
const size_t n_copy_rows = sizeof copy_rows / sizeof copy_rows[0];

/* ------------------------------------------------------------ 2.1 lengths, cu_seqlens, maps */

START_TEST(seg_seed_example)
{
    /* The seeds' batch: cu_seqlens = [0, 5, 12, 18], lengths [5, 7, 6]. */
    clvarlen_context *ctx = seg_ctx;
    static const int32_t cu[4] = {0, 5, 12, 18}, lengths[3] = {5, 7, 6};
    static const int32_t seq_id_want[18] = {0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2};
    static const int32_t pos_want[18] = {0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 5, 6, 0, 1, 2, 3, 4, 5};
    static const int32_t offsets[3] = {10, 0, 3};
    static const int32_t pos_off_want[18] = {10, 11, 12, 13, 14, 0, 1, 2, 3,
                                             4,  5,  6,  3,  4,  5,  6, 7, 8};
    int32_t got_cu[4], got_len[3], seq_id[18], pos[18], ref_seq[18], ref_pos[18];

    SEG_OK(clvarlen_cu_seqlens_from_lengths(ctx, lengths, 3, got_cu), "cu from [5,7,6]");
    tu_assert_i32_eq(got_cu, cu, 4, "cu from [5,7,6]");
    SEG_OK(clvarlen_lengths_from_cu_seqlens(ctx, cu, 3, got_len), "lengths");
    tu_assert_i32_eq(got_len, lengths, 3, "lengths from [0,5,12,18]");

    SEG_OK(clvarlen_token_maps(ctx, cu, 3, 18, NULL, seq_id, pos), "maps");
    tu_assert_i32_eq(seq_id, seq_id_want, 18, "seq_id");
    tu_assert_i32_eq(pos, pos_want, 18, "pos");
    ref_token_maps(cu, 3, NULL, ref_seq, ref_pos);
    tu_assert_i32_eq(ref_seq, seq_id_want, 18, "oracle seq_id");
    tu_assert_i32_eq(ref_pos, pos_want, 18, "oracle pos");

    SEG_OK(clvarlen_token_maps(ctx, cu, 3, 18, offsets, seq_id, pos), "maps with offsets");
    tu_assert_i32_eq(seq_id, seq_id_want, 18, "seq_id with offsets");
    tu_assert_i32_eq(pos, pos_off_want, 18, "pos with offsets");

    /* Either map alone. */
    memset(seq_id, 0x7f, sizeof seq_id);
    SEG_OK(clvarlen_token_maps(ctx, cu, 3, 18, offsets, NULL, pos), "pos only");
    tu_assert_i32_eq(pos, pos_off_want, 18, "pos only");
    SEG_OK(clvarlen_token_maps(ctx, cu, 3, 18, NULL, seq_id, NULL), "seq_id only");
    tu_assert_i32_eq(seq_id, seq_id_want, 18, "seq_id only");

    /* Empty sequences are skipped: [0, 0, 5, 5, 5, 12] has tokens only in sequences 1 and 4. */
    static const int32_t cu_e[6] = {0, 0, 5, 5, 5, 12};
    int32_t sid[12], ps[12];
    SEG_OK(clvarlen_token_maps(ctx, cu_e, 5, 12, NULL, sid, ps), "maps with empties");
    for (int t = 0; t < 12; t++) {
        ck_assert_int_eq(sid[t], t < 5 ? 1 : 4);
        ck_assert_int_eq(ps[t], t < 5 ? t : t - 5);
    }
}
END_TEST

START_TEST(seg_cu_lengths_random)
{
    clvarlen_context *ctx = seg_ctx;
    const uint64_t seed = seg_seed(11);
    tu_rng r = tu_rng_make(seed);
    for (int rep = 0; rep < 12; rep++) {
        int64_t max_n = rep == 0 ? 1 : rep < 4 ? 1500 : tu_int(&r, 1, 300);
        int32_t *lengths = tu_xmalloc((size_t)max_n * sizeof(int32_t));
        int64_t n = tu_random_lengths(&r, max_n, rep == 1 ? 0 : 200, 60000, lengths);
        char label[160];
        snprintf(label, sizeof label, "cu/lengths rep %d n %" PRId64 " seed %" PRIu64, rep, n,
                 seed);
        int32_t *want = tu_xmalloc((size_t)(n + 1) * sizeof(int32_t));
        ref_cu_from_lengths(lengths, n, want);
        tu_guarded cu = tu_guarded_alloc((size_t)(n + 1) * sizeof(int32_t), 0xEE);
        SEG_OK(clvarlen_cu_seqlens_from_lengths(ctx, lengths, n, cu.p), label);
        tu_assert_i32_eq(cu.p, want, n + 1, label);
        tu_assert_guard(&cu, label);

        tu_guarded back = tu_guarded_alloc((size_t)n * sizeof(int32_t), 0xEE);
        SEG_OK(clvarlen_lengths_from_cu_seqlens(ctx, want, n, back.p), label);
        tu_assert_i32_eq(back.p, lengths, n, label);
        tu_assert_guard(&back, label);
        tu_guarded_free(&cu);
        tu_guarded_free(&back);
        free(want);
        free(lengths);
    }
}
END_TEST

START_TEST(seg_token_maps_random)
{
    clvarlen_context *ctx = seg_ctx;
    const uint64_t seed = seg_seed(12);
    tu_rng r = tu_rng_make(seed);
    for (int rep = 0; rep < 10; rep++) {
        int64_t max_n = rep < 3 ? 1200 : tu_int(&r, 1, 200);
        int32_t *lengths = tu_xmalloc((size_t)max_n * sizeof(int32_t));
        int64_t n = tu_random_lengths(&r, max_n, rep == 4 ? 0 : 64, 40000, lengths);
        int32_t *cu = tu_xmalloc((size_t)(n + 1) * sizeof(int32_t));
        tu_cu_from_lengths(lengths, n, cu);
        int64_t total = cu[n];
        int32_t *offsets = NULL;
        if (rep % 2) {
            offsets = tu_xmalloc((size_t)(n ? n : 1) * sizeof(int32_t));
            for (int64_t s = 0; s < n; s++)
                offsets[s] = (int32_t)tu_int(&r, 0, 100000);
        }
        char label[160];
        snprintf(label, sizeof label, "token maps rep %d n %" PRId64 " T %" PRId64
                 " offsets %d seed %" PRIu64, rep, n, total, offsets != NULL, seed);
        int32_t *want_sid = tu_xmalloc((size_t)(total + 1) * sizeof(int32_t));
        int32_t *want_pos = tu_xmalloc((size_t)(total + 1) * sizeof(int32_t));
        ref_token_maps(cu, n, offsets, want_sid, want_pos);
        tu_guarded sid = tu_guarded_alloc((size_t)total * sizeof(int32_t), 0xEE);
        tu_guarded pos = tu_guarded_alloc((size_t)total * sizeof(int32_t), 0xEE);
        SEG_OK(clvarlen_token_maps(ctx, cu, n, total, offsets, sid.p, pos.p), label);
        tu_assert_i32_eq(sid.p, want_sid, total, label);
        tu_assert_i32_eq(pos.p, want_pos, total, label);
        tu_assert_guard(&sid, label);
        tu_assert_guard(&pos, label);
        tu_guarded_free(&sid);
        tu_guarded_free(&pos);
        free(want_sid);
        free(want_pos);
        free(offsets);
        free(cu);
        free(lengths);
    }
}
END_TEST

/* ------------------------------------------------------------ 2.2 pack / unpack */

START_TEST(seg_pack_unpack)
{
    clvarlen_context *ctx = seg_ctx;
    const uint64_t seed = seg_seed(21);
    tu_rng r = tu_rng_make(seed);
    for (size_t c = 0; c < N_COPY_ROWS; c++) {
        for (int masked = 0; masked < 2; masked++) {
            const rowcfg rc = copy_rows[c];
            const size_t es = clvarlen_dtype_size(rc.dtype), row_bytes = (size_t)rc.elems * es;
            const int big = rc.elems >= 100;
            int64_t batch = tu_int(&r, 1, big ? 4 : 24);
            int64_t max_seqlen = tu_int(&r, 0, big ? 9 : 40);
            int64_t pstride = random_stride(&r, rc.elems);
            size_t ppitch = pitch_bytes(rc.dtype, rc.elems, pstride);
            int64_t rows = batch * max_seqlen;
            char label[200];
            snprintf(label, sizeof label,
                     "%s %s x%" PRId64 " batch %" PRId64 " S %" PRId64 " stride %" PRId64
                     " seed %" PRIu64,
                     masked ? "pack_masked" : "pack", clvarlen_dtype_name(rc.dtype), rc.elems,
                     batch, max_seqlen, pstride, seed);

            unsigned char *padded = tu_xmalloc((size_t)rows * ppitch);
            random_bytes(&r, padded, (size_t)rows * ppitch);
            int32_t *valid = tu_xmalloc((size_t)batch * sizeof(int32_t));
            uint8_t *mask = tu_xmalloc((size_t)(rows ? rows : 1));
            for (int64_t b = 0; b < batch; b++) {
                int64_t k = tu_int(&r, 0, 3);
                valid[b] = (int32_t)(k == 0 ? 0 : k == 1 ? max_seqlen : tu_int(&r, 0, max_seqlen));
            }
            for (int64_t i = 0; i < rows; i++) /* any nonzero byte keeps: 255 + 255 must not wrap */
                mask[i] = tu_int(&r, 0, 2) ? (uint8_t)tu_int(&r, 1, 255) : 0;

            /* Oracle. */
            unsigned char *want_packed = tu_xmalloc((size_t)rows * row_bytes);
            int32_t *want_cu = tu_xmalloc((size_t)(batch + 1) * sizeof(int32_t));
            int64_t *want_src = tu_xmalloc((size_t)(rows ? rows : 1) * sizeof(int64_t));
            int64_t total = masked
                ? ref_pack_masked(row_bytes, padded, ppitch, batch, max_seqlen, mask, want_packed,
                                  want_cu, want_src)
                : ref_pack(row_bytes, padded, ppitch, batch, max_seqlen, valid, want_packed,
                           want_cu, want_src);

            tu_guarded packed = tu_guarded_alloc((size_t)total * row_bytes, 0xEE);
            tu_guarded cu = tu_guarded_alloc((size_t)(batch + 1) * sizeof(int32_t), 0xEE);
            tu_guarded src = tu_guarded_alloc((size_t)total * sizeof(int64_t), 0xEE);
            int64_t got_total = -1;
            if (masked)
                SEG_OK(clvarlen_pack_masked(ctx, rc.dtype, rc.elems, padded, pstride, batch,
                                            max_seqlen, mask, total, packed.p, cu.p, src.p,
                                            &got_total),
                       label);
            else
                SEG_OK(clvarlen_pack(ctx, rc.dtype, rc.elems, padded, pstride, batch, max_seqlen,
                                     valid, total, packed.p, cu.p, src.p, &got_total),
                       label);
            tu_check(got_total == total, "%s: total %" PRId64 ", want %" PRId64, label,
                     got_total, total);
            tu_assert_bytes_eq(packed.p, want_packed, (size_t)total * row_bytes, label);
            tu_assert_i32_eq(cu.p, want_cu, batch + 1, label);
            tu_assert_i64_eq(src.p, want_src, total, label);
            tu_assert_guard(&packed, label);
            tu_assert_guard(&cu, label);
            tu_assert_guard(&src, label);

            /* unpack into a strided padded tensor holding old data, with a pad value. */
            int64_t ustride = random_stride(&r, rc.elems);
            size_t upitch = pitch_bytes(rc.dtype, rc.elems, ustride);
            unsigned char pad[8];
            random_bytes(&r, pad, sizeof pad);
            const void *pad_value = tu_int(&r, 0, 1) ? pad : NULL;
            tu_guarded out = tu_guarded_alloc((size_t)rows * upitch, 0);
            random_bytes(&r, out.p, out.bytes);
            unsigned char *want_out = tu_xmalloc(out.bytes ? out.bytes : 1);
            memcpy(want_out, out.p, out.bytes);
            ref_unpack(row_bytes, es, packed.p, row_bytes, total, src.p, batch, max_seqlen,
                       pad_value, want_out, upitch);
            SEG_OK(clvarlen_unpack(ctx, rc.dtype, rc.elems, packed.p, 0, total, src.p, batch,
                                   max_seqlen, pad_value, out.p, ustride),
                   label);
            tu_assert_bytes_eq(out.p, want_out, out.bytes, label);
            tu_assert_guard(&out, label);
            /* Round trip: every kept row is back where it came from. */
            for (int64_t t = 0; t < total; t++)
                tu_assert_bytes_eq((unsigned char *)out.p + (size_t)want_src[t] * upitch,
                                padded + (size_t)want_src[t] * ppitch, row_bytes, label);

            tu_guarded_free(&out);
            tu_guarded_free(&packed);
            tu_guarded_free(&cu);
            tu_guarded_free(&src);
            free(want_out);
            free(want_packed);
            free(want_cu);
            free(want_src);
            free(mask);
            free(valid);
            free(padded);
        }
    }
}
END_TEST

START_TEST(seg_pack_capacity)
{
    /* More capacity than needed: only `total` rows of packed are written. */
    clvarlen_context *ctx = seg_ctx;
    float padded[3 * 4 * 4];
    for (int i = 0; i < 48; i++)
        padded[i] = (float)i + 0.5f;
    static const int32_t valid[3] = {1, 0, 3};
    tu_guarded packed = tu_guarded_alloc(10 * 4 * sizeof(float), 0xEE);
    int32_t cu[4];
    int64_t total = -1, src[10];
    SEG_OK(clvarlen_pack(ctx, F32, 4, padded, 0, 3, 4, valid, 10, packed.p, cu, src, &total),
           "pack with spare capacity");
    ck_assert_int_eq(total, 4);
    ck_assert(cu[0] == 0 && cu[1] == 1 && cu[2] == 1 && cu[3] == 4);
    ck_assert(src[0] == 0 && src[1] == 8 && src[2] == 9 && src[3] == 10);
    const float *p = packed.p;
    for (int t = 0; t < 4; t++)
        for (int e = 0; e < 4; e++)
            ck_assert(p[t * 4 + e] == padded[src[t] * 4 + e]);
    for (size_t b = 4 * 4 * sizeof(float); b < packed.bytes; b++)
        tu_check(((unsigned char *)packed.p)[b] == 0xEE, "row past total written");
    tu_assert_guard(&packed, "pack with spare capacity");
    tu_guarded_free(&packed);
}
END_TEST

/* ------------------------------------------------------------ 2.3 gather / scatter */

START_TEST(seg_gather)
{
    clvarlen_context *ctx = seg_ctx;
    const uint64_t seed = seg_seed(31);
    tu_rng r = tu_rng_make(seed);
    for (size_t c = 0; c < N_COPY_ROWS; c++) {
        for (int rep = 0; rep < 2; rep++) {
            const rowcfg rc = copy_rows[c];
            const size_t row_bytes = (size_t)rc.elems * clvarlen_dtype_size(rc.dtype);
            const int big = rc.elems >= 100;
            int64_t src_rows = rep == 0 && c == 0 ? 0 : tu_int(&r, 1, big ? 40 : 400);
            int64_t n_index = tu_int(&r, 0, big ? 60 : 1200);
            int64_t sstride = random_stride(&r, rc.elems), dstride = random_stride(&r, rc.elems);
            size_t spitch = pitch_bytes(rc.dtype, rc.elems, sstride);
            size_t dpitch = pitch_bytes(rc.dtype, rc.elems, dstride);
            char label[200];
            snprintf(label, sizeof label,
                     "gather %s x%" PRId64 " src %" PRId64 " n %" PRId64 " strides %" PRId64
                     "/%" PRId64 " seed %" PRIu64,
                     clvarlen_dtype_name(rc.dtype), rc.elems, src_rows, n_index, sstride, dstride,
                     seed);
            unsigned char *src = tu_xmalloc((size_t)src_rows * spitch);
            random_bytes(&r, src, (size_t)src_rows * spitch);
            int32_t *index = tu_xmalloc((size_t)(n_index ? n_index : 1) * sizeof(int32_t));
            for (int64_t m = 0; m < n_index; m++) /* duplicates are common, -1 sometimes */
                index[m] = src_rows == 0 || tu_int(&r, 0, 9) == 0
                               ? -1
                               : (int32_t)tu_int(&r, 0, src_rows - 1);
            tu_guarded dst = tu_guarded_alloc((size_t)n_index * dpitch, 0);
            random_bytes(&r, dst.p, dst.bytes);
            unsigned char *want = tu_xmalloc(dst.bytes ? dst.bytes : 1);
            memcpy(want, dst.p, dst.bytes);
            ref_gather(row_bytes, src, spitch, index, n_index, want, dpitch);
            SEG_OK(clvarlen_gather_rows(ctx, rc.dtype, rc.elems, src, src_rows, sstride, index,
                                        n_index, dst.p, dstride),
                   label);
            tu_assert_bytes_eq(dst.p, want, dst.bytes, label);
            tu_assert_guard(&dst, label);
            tu_guarded_free(&dst);
            free(want);
            free(index);
            free(src);
        }
    }
}
END_TEST

int64_t random_unique_index(tu_rng *r, int64_t dst_rows, int32_t *index, int64_t max_n)
{
    int32_t *perm = tu_xmalloc((size_t)(dst_rows ? dst_rows : 1) * sizeof(int32_t));
    for (int64_t i = 0; i < dst_rows; i++)
        perm[i] = (int32_t)i;
    for (int64_t i = dst_rows - 1; i > 0; i--) {
        int64_t j = tu_int(r, 0, i);
        int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    int64_t take = tu_int(r, 0, dst_rows), n = 0, used = 0;
    while (n < max_n && (used < take || (n < 3 && tu_int(r, 0, 1)))) {
        if (used < take && tu_int(r, 0, 7) != 0)
            index[n++] = perm[used++];
        else
            index[n++] = -1;
    }
    free(perm);
    return n;
}

START_TEST(seg_scatter_overwrite)
{
    clvarlen_context *ctx = seg_ctx;
    const uint64_t seed = seg_seed(32);
    tu_rng r = tu_rng_make(seed);
    for (size_t c = 0; c < N_COPY_ROWS; c++) {
        for (int rep = 0; rep < 3; rep++) {
            const rowcfg rc = copy_rows[c];
            const size_t row_bytes = (size_t)rc.elems * clvarlen_dtype_size(rc.dtype);
            const int big = rc.elems >= 100;
            int64_t dst_rows = tu_int(&r, 0, big ? 40 : 500);
            int32_t *index = tu_xmalloc((size_t)(2 * dst_rows + 8) * sizeof(int32_t));
            int64_t n_index = random_unique_index(&r, dst_rows, index, 2 * dst_rows + 8);
            unsigned flags = (rep == 1 ? CLVARLEN_SCATTER_ZERO_REST : 0u) |
                             (tu_int(&r, 0, 1) ? CLVARLEN_SCATTER_UNIQUE_INDICES : 0u);
            int64_t sstride = random_stride(&r, rc.elems), dstride = random_stride(&r, rc.elems);
            size_t spitch = pitch_bytes(rc.dtype, rc.elems, sstride);
            size_t dpitch = pitch_bytes(rc.dtype, rc.elems, dstride);
            char label[220];
            snprintf(label, sizeof label,
                     "scatter %s x%" PRId64 " rows %" PRId64 " n %" PRId64 " flags %u strides %"
                     PRId64 "/%" PRId64 " seed %" PRIu64,
                     clvarlen_dtype_name(rc.dtype), rc.elems, dst_rows, n_index, flags, sstride,
                     dstride, seed);
            unsigned char *src = tu_xmalloc((size_t)n_index * spitch);
            random_bytes(&r, src, (size_t)n_index * spitch);
            tu_guarded dst = tu_guarded_alloc((size_t)dst_rows * dpitch, 0);
            random_bytes(&r, dst.p, dst.bytes);
            unsigned char *want = tu_xmalloc(dst.bytes ? dst.bytes : 1);
            memcpy(want, dst.p, dst.bytes);
            ref_scatter_overwrite(row_bytes, src, spitch, index, n_index, want, dst_rows, dpitch,
                                  (flags & CLVARLEN_SCATTER_ZERO_REST) != 0);
            SEG_OK(clvarlen_scatter_rows(ctx, rc.dtype, rc.elems, src, sstride, index, n_index,
                                         dst.p, dst_rows, dstride, CLVARLEN_SCATTER_OVERWRITE,
                                         flags),
                   label);
            tu_assert_bytes_eq(dst.p, want, dst.bytes, label);
            tu_assert_guard(&dst, label);
            tu_guarded_free(&dst);
            free(want);
            free(src);
            free(index);
        }
    }
}
END_TEST

void assert_gaps_kept(const void *got, const void *init, int64_t rows, size_t row_bytes,
                      size_t pitch, const char *label)
{
    for (int64_t i = 0; i < rows; i++)
        tu_assert_bytes_eq((const unsigned char *)got + (size_t)i * pitch + row_bytes,
                        (const unsigned char *)init + (size_t)i * pitch + row_bytes,
                        pitch - row_bytes, label);
}

/* Dense copy of a strided tensor's rows as double. */
static double *dense_rows(const void *p, clvarlen_dtype dtype, int64_t rows, int64_t row_elems,
                          int64_t stride)
{
    if (!stride)
        stride = row_elems;
    double *d = tu_xmalloc((size_t)(rows * row_elems) * sizeof(double));
    for (int64_t i = 0; i < rows; i++)
        for (int64_t e = 0; e < row_elems; e++)
            d[i * row_elems + e] = tu_get(p, dtype, (size_t)(i * stride + e));
    return d;
}

void check_accumulated(const void *got, clvarlen_dtype dtype, int64_t rows, int64_t row_elems,
                       int64_t stride, const double *want, const char *label)
{
    double *g = dense_rows(got, dtype, rows, row_elems, stride);
    size_t n = (size_t)(rows * row_elems);
    if (dtype == I32) {
        for (size_t i = 0; i < n; i++)
            tu_check(g[i] == want[i], "%s: element %zu is %.0f, want %.0f", label, i, g[i],
                     want[i]);
    } else {
        /* tu_compare reads its input in the dtype: compare as f64. */
        tu_err e = tu_compare(g, F64, want, n);
        tu_assert_close(e, tu_tolerance(dtype), label);
    }
    free(g);
}

const clvarlen_dtype accumulate_dtypes[4] = {F32, F16, BF16, I32};

START_TEST(seg_scatter_accumulate)
{
    clvarlen_context *ctx = seg_ctx;
    const uint64_t seed = seg_seed(33);
    tu_rng r = tu_rng_make(seed);
    static const int64_t elems[] = {1, 3, 17, 64};
    for (size_t d = 0; d < 4; d++) {
        for (size_t k = 0; k < 4; k++) {
            for (int zero_rest = 0; zero_rest < 2; zero_rest++) {
                const clvarlen_dtype dtype = accumulate_dtypes[d];
                const int64_t row_elems = elems[k];
                const size_t es = clvarlen_dtype_size(dtype), row_bytes = (size_t)row_elems * es;
                int64_t dst_rows = tu_int(&r, 1, 60);
                int64_t n_index = tu_int(&r, 0, 500);
                int64_t sstride = random_stride(&r, row_elems);
                int64_t dstride = random_stride(&r, row_elems);
                size_t spitch = pitch_bytes(dtype, row_elems, sstride);
                size_t dpitch = pitch_bytes(dtype, row_elems, dstride);
                char label[220];
                snprintf(label, sizeof label,
                         "accumulate %s x%" PRId64 " rows %" PRId64 " n %" PRId64
                         " zero_rest %d strides %" PRId64 "/%" PRId64 " seed %" PRIu64,
                         clvarlen_dtype_name(dtype), row_elems, dst_rows, n_index, zero_rest,
                         sstride, dstride, seed);
                int32_t *index = tu_xmalloc((size_t)(n_index ? n_index : 1) * sizeof(int32_t));
                /* Many repeats of few rows, some -1 (skipped), some rows never named. */
                int64_t hot = tu_int(&r, 1, dst_rows);
                for (int64_t m = 0; m < n_index; m++)
                    index[m] = tu_int(&r, 0, 11) == 0 ? -1 : (int32_t)tu_int(&r, 0, hot - 1);
                const double scale = dtype == I32 ? 1000.0 : 1.0;
                size_t src_elems = (size_t)n_index * (spitch / es);
                void *src = tu_xmalloc((size_t)n_index * spitch);
                tu_fill_random(&r, src, dtype, src_elems, scale);
                tu_guarded dst = tu_guarded_alloc((size_t)dst_rows * dpitch, 0);
                tu_fill_random(&r, dst.p, dtype, dst.bytes / es, scale);
                unsigned char *init = tu_xmalloc(dst.bytes);
                memcpy(init, dst.p, dst.bytes);
                double *want = tu_xmalloc((size_t)(dst_rows * row_elems) * sizeof(double));
                ref_scatter_accumulate(dtype, row_elems, src, sstride, index, n_index, init,
                                       dst_rows, dstride, zero_rest, want);
                SEG_OK(clvarlen_scatter_rows(ctx, dtype, row_elems, src, sstride, index, n_index,
                                             dst.p, dst_rows, dstride,
                                             CLVARLEN_SCATTER_ACCUMULATE,
                                             zero_rest ? CLVARLEN_SCATTER_ZERO_REST : 0u),
                       label);
                check_accumulated(dst.p, dtype, dst_rows, row_elems, dstride, want, label);
                assert_gaps_kept(dst.p, init, dst_rows, row_bytes, dpitch, label);
                tu_assert_guard(&dst, label);
                tu_guarded_free(&dst);
                free(want);
                free(init);
                free(src);
                free(index);
            }
        }
    }
}
END_TEST

START_TEST(seg_scatter_accumulate_small)
{
    /* dst [1, 2]; src [10], [20], [30] at index [1, 1, 0] -> [31, 32], exact in every dtype. */
    clvarlen_context *ctx = seg_ctx;
    static const int32_t index[3] = {1, 1, 0};
    for (size_t d = 0; d < 4; d++) {
        clvarlen_dtype dtype = accumulate_dtypes[d];
        unsigned char src[3 * 4], dst[2 * 4];
        tu_set(src, dtype, 0, 10);
        tu_set(src, dtype, 1, 20);
        tu_set(src, dtype, 2, 30);
        tu_set(dst, dtype, 0, 1);
        tu_set(dst, dtype, 1, 2);
        SEG_OK(clvarlen_scatter_rows(ctx, dtype, 1, src, 0, index, 3, dst, 2, 0,
                                     CLVARLEN_SCATTER_ACCUMULATE, 0),
               clvarlen_dtype_name(dtype));
        tu_check(tu_get(dst, dtype, 0) == 31.0 && tu_get(dst, dtype, 1) == 32.0,
                 "%s: got [%g, %g], want [31, 32]", clvarlen_dtype_name(dtype),
                 tu_get(dst, dtype, 0), tu_get(dst, dtype, 1));
    }
    /* bf16 rows are summed in f32 and rounded once: 256 + 1 + 1 is 258 (exact in bf16),
     * where rounding after each add would stay at 256. */
    unsigned char src[2 * 2], dst[2];
    static const int32_t twice[2] = {0, 0};
    tu_set(src, BF16, 0, 1.0);
    tu_set(src, BF16, 1, 1.0);
    tu_set(dst, BF16, 0, 256.0);
    SEG_OK(clvarlen_scatter_rows(ctx, BF16, 1, src, 0, twice, 2, dst, 1, 0,
                                 CLVARLEN_SCATTER_ACCUMULATE, 0),
           "bf16 once-rounded");
    tu_check(tu_get(dst, BF16, 0) == 258.0, "bf16 256 + 1 + 1 gave %g, want 258",
             tu_get(dst, BF16, 0));
}
END_TEST

/* ------------------------------------------------------------ 2.4 seqlens_expanded */

START_TEST(seg_seqlens_expand_example)
{
    clvarlen_context *ctx = seg_ctx;
    /* Target verify, q = 4: kv 10 -> 7..10; kv 2 < q -> -1, 0, 1, 2 clamped to 0, 0, 1, 2. */
    static const int32_t kv[2] = {10, 2}, want[8] = {7, 8, 9, 10, 0, 0, 1, 2};
    int32_t got[8];
    int64_t total = -1;
    SEG_OK(clvarlen_seqlens_expand(ctx, kv, NULL, 4, 2, NULL, 0, 0, 0, 8, got, NULL, 0, &total),
           "target verify");
    ck_assert_int_eq(total, 8);
    tu_assert_i32_eq(got, want, 8, "target verify [10, 2] q 4");

    /* Draft extend with an accept length of 0 in the middle, and a page table with a column
     * limit: rows repeat q_s times. */
    static const int32_t kv2[3] = {5, 7, 3}, q2[3] = {2, 0, 3};
    static const int32_t want2[5] = {4, 5, 1, 2, 3};
    static const int32_t pages[3 * 4] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    static const int32_t want_pages[5 * 2] = {1, 2, 1, 2, 9, 10, 9, 10, 9, 10};
    int32_t pout[5 * 2];
    SEG_OK(clvarlen_seqlens_expand(ctx, kv2, q2, 0, 3, pages, 4, 0, 2, 5, got, pout, 0, &total),
           "draft extend");
    ck_assert_int_eq(total, 5);
    tu_assert_i32_eq(got, want2, 5, "draft extend seqlens");
    tu_assert_i32_eq(pout, want_pages, 10, "draft extend pages");
}
END_TEST

START_TEST(seg_seqlens_expand_random)
{
    clvarlen_context *ctx = seg_ctx;
    const uint64_t seed = seg_seed(41);
    tu_rng r = tu_rng_make(seed);
    for (int rep = 0; rep < 16; rep++) {
        const int uniform = rep % 2 == 0;
        const int with_pages = rep % 4 < 2 ? 1 : rep % 4 == 2;
        int64_t n = rep == 3 ? 1500 : tu_int(&r, 1, 300);
        int32_t uq = (int32_t)tu_int(&r, 1, 8);
        int32_t *kv = tu_xmalloc((size_t)n * sizeof(int32_t));
        int32_t *q = tu_xmalloc((size_t)n * sizeof(int32_t));
        for (int64_t s = 0; s < n; s++) {
            q[s] = (int32_t)tu_int(&r, 0, 8); /* accept lengths include 0 */
            int64_t k = tu_int(&r, 0, 5);
            kv[s] = (int32_t)(k == 0 ? tu_int(&r, 0, 8) /* often kv < q: clamped */
                                     : tu_int(&r, 0, 5000));
        }
        int64_t page_cols = tu_int(&r, 1, 70);
        int64_t page_stride = tu_int(&r, 0, 1) ? 0 : page_cols + tu_int(&r, 0, 5);
        int64_t col_limit = tu_int(&r, 0, 2) == 0 ? 0 : tu_int(&r, 1, page_cols);
        int64_t used_cols = col_limit ? col_limit : page_cols;
        int64_t out_stride = tu_int(&r, 0, 1) ? 0 : used_cols + tu_int(&r, 0, 4);
        int64_t opitch = out_stride ? out_stride : used_cols;
        int32_t *pages = tu_xmalloc((size_t)(n * (page_stride ? page_stride : page_cols)) *
                                 sizeof(int32_t));
        for (int64_t i = 0; i < n * (page_stride ? page_stride : page_cols); i++)
            pages[i] = (int32_t)tu_int(&r, 0, 1 << 20);
        const int32_t *q_arg = uniform ? NULL : q;
        int64_t total = ref_seqlens_expand(kv, q_arg, uq, n, NULL, 0, 0, 0, NULL, NULL, 0);
        int64_t slack = rep % 3 == 0 ? tu_int(&r, 1, 9) : 0;
        int64_t capacity = total + slack;
        char label[220];
        snprintf(label, sizeof label,
                 "seqlens_expand rep %d %s n %" PRId64 " q %d pages %d cols %" PRId64 "/%" PRId64
                 " limit %" PRId64 " out stride %" PRId64 " capacity %" PRId64 " seed %" PRIu64,
                 rep, uniform ? "uniform" : "per-seq", n, uq, with_pages, page_cols, page_stride,
                 col_limit, out_stride, capacity, seed);
        int32_t *want = tu_xmalloc((size_t)(total + 1) * sizeof(int32_t));
        tu_guarded sl = tu_guarded_alloc((size_t)capacity * sizeof(int32_t), 0xEE);
        tu_guarded po = tu_guarded_alloc((size_t)(capacity * opitch) * sizeof(int32_t), 0);
        random_bytes(&r, po.p, po.bytes);
        int32_t *want_po = tu_xmalloc(po.bytes ? po.bytes : 1);
        memcpy(want_po, po.p, po.bytes);
        ref_seqlens_expand(kv, q_arg, uq, n, with_pages ? pages : NULL, page_cols, page_stride,
                           col_limit, want, want_po, out_stride);
        int64_t got_total = -1;
        SEG_OK(clvarlen_seqlens_expand(ctx, kv, q_arg, uq, n, with_pages ? pages : NULL,
                                       page_cols, page_stride, col_limit, capacity, sl.p,
                                       with_pages ? po.p : NULL, out_stride, &got_total),
               label);
        tu_check(got_total == total, "%s: total %" PRId64 ", want %" PRId64, label,
                 got_total, total);
        tu_assert_i32_eq(sl.p, want, total, label);
        /* Pages: the first `total` rows with their gaps; rows past total are not specified. */
        tu_assert_bytes_eq(po.p, want_po, (size_t)(total * opitch) * sizeof(int32_t), label);
        for (int64_t t = 0; t < total; t++)
            tu_check(((int32_t *)sl.p)[t] >= 0, "%s: negative at %" PRId64, label, t);
        tu_assert_guard(&sl, label);
        tu_assert_guard(&po, label);
        tu_guarded_free(&sl);
        tu_guarded_free(&po);
        free(want_po);
        free(want);
        free(pages);
        free(q);
        free(kv);
    }
}
END_TEST

/* ------------------------------------------------------------ suite */

static void seg_add_host_cases(Suite *s)
{
    TCase *tc = tcase_create("maps");
    tcase_add_checked_fixture(tc, seg_setup, seg_teardown);
    tcase_set_timeout(tc, SEG_TIMEOUT);
    tcase_add_test(tc, seg_seed_example);
    tcase_add_test(tc, seg_cu_lengths_random);
    tcase_add_test(tc, seg_token_maps_random);
    suite_add_tcase(s, tc);

    tc = tcase_create("pack");
    tcase_add_checked_fixture(tc, seg_setup, seg_teardown);
    tcase_set_timeout(tc, SEG_TIMEOUT);
    tcase_add_test(tc, seg_pack_unpack);
    tcase_add_test(tc, seg_pack_capacity);
    suite_add_tcase(s, tc);

    tc = tcase_create("rows");
    tcase_add_checked_fixture(tc, seg_setup, seg_teardown);
    tcase_set_timeout(tc, SEG_TIMEOUT);
    tcase_add_test(tc, seg_gather);
    tcase_add_test(tc, seg_scatter_overwrite);
    tcase_add_test(tc, seg_scatter_accumulate);
    tcase_add_test(tc, seg_scatter_accumulate_small);
    suite_add_tcase(s, tc);

    tc = tcase_create("seqlens-expand");
    tcase_add_checked_fixture(tc, seg_setup, seg_teardown);
    tcase_set_timeout(tc, SEG_TIMEOUT);
    tcase_add_test(tc, seg_seqlens_expand_example);
    tcase_add_test(tc, seg_seqlens_expand_random);
    suite_add_tcase(s, tc);

}

int main(void)
{
#if TEST_BACKEND_CL
    if (!tu_probe_opencl_device())
        return TU_EXIT_SKIP;
#endif
    Suite *s = suite_create(SEG_SUITE);
    seg_add_host_cases(s);
    seg_add_cp_cases(s);
#if TEST_BACKEND_CL
    seg_add_cl_cases(s);
    seg_add_paths_cases(s);
    seg_add_args_cases(s);
#endif
    return tu_run_suite(s);
}
