/* Segment family on an OpenCL device (PoCL in CI), linked into test-segment-cl
 * only: the cl_mem entry points of clvarlen-cl.h on buffers made here (byte
 * offsets, guard bytes around every region, wait lists and events), the same
 * results as the CPU fallback, and device checks: invalid device-resident
 * cu_seqlens/indices give the error and leave every output untouched. The
 * host-memory cases run on the device too, from test-segment.c.
 *
 * The runner process makes no OpenCL call: the device probe runs in a forked
 * child, and contexts are made in checked fixtures (after Check forks).
 */
#include "test-segment.h"
#include "kit-cl.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <clvarlen/clvarlen-cl.h>

/* ------------------------------------------------------------ cl_mem entry points */

START_TEST(clm_cu_lengths_maps)
{
    clvarlen_context *ctx = seg_ctx;
    const uint64_t seed = seg_seed(101);
    tu_rng r = tu_rng_make(seed);
    int32_t lengths[1300];
    int64_t n = tu_random_lengths(&r, 1300, 50, 40000, lengths);
    int32_t *cu = tu_xmalloc((size_t)(n + 1) * sizeof(int32_t));
    ref_cu_from_lengths(lengths, n, cu);
    const int64_t total = cu[n];
    int32_t *offsets = tu_xmalloc((size_t)n * sizeof(int32_t));
    for (int64_t s = 0; s < n; s++)
        offsets[s] = (int32_t)tu_int(&r, 0, 5000);
    char label[120];
    snprintf(label, sizeof label, "cl cu/lengths/maps n %" PRId64 " T %" PRId64 " seed %" PRIu64,
             n, total, seed);

    tu_clbuf d_len = tu_clbuf_make(ctx, (size_t)n * 4, 48, lengths);
    tu_clbuf d_cu = tu_clbuf_make(ctx, (size_t)(n + 1) * 4, 16, NULL);
    tu_clbuf d_back = tu_clbuf_make(ctx, (size_t)n * 4, 4, NULL);
    tu_clbuf d_off = tu_clbuf_make(ctx, (size_t)n * 4, 32, offsets);
    tu_clbuf d_sid = tu_clbuf_make(ctx, (size_t)total * 4, 64, NULL);
    tu_clbuf d_pos = tu_clbuf_make(ctx, (size_t)total * 4, 8, NULL);

    /* A chain through wait lists: lengths -> cu -> (lengths, maps). */
    cl_event e1 = NULL, e2 = NULL, e3 = NULL;
    SEG_OK(clvarlen_cl_cu_seqlens_from_lengths(ctx, d_len.mem, d_len.off, n, d_cu.mem, d_cu.off,
                                               0, NULL, &e1),
           label);
    SEG_OK(clvarlen_cl_lengths_from_cu_seqlens(ctx, d_cu.mem, d_cu.off, n, d_back.mem,
                                               d_back.off, 1, &e1, &e2),
           label);
    SEG_OK(clvarlen_cl_token_maps(ctx, d_cu.mem, d_cu.off, n, total, d_off.mem, d_off.off,
                                  d_sid.mem, d_sid.off, d_pos.mem, d_pos.off, 1, &e1, &e3),
           label);
    tu_cl_wait_release(&e2, label);
    tu_cl_wait_release(&e3, label);
    tu_cl_wait_release(&e1, label);

    int32_t *want_sid = tu_xmalloc((size_t)(total + 1) * 4), *want_pos = tu_xmalloc((size_t)(total + 1) * 4);
    ref_token_maps(cu, n, offsets, want_sid, want_pos);
    tu_assert_i32_eq(tu_clbuf_fetch(ctx, &d_cu, label), cu, n + 1, label);
    tu_assert_i32_eq(tu_clbuf_fetch(ctx, &d_back, label), lengths, n, label);
    tu_assert_i32_eq(tu_clbuf_fetch(ctx, &d_sid, label), want_sid, total, label);
    tu_assert_i32_eq(tu_clbuf_fetch(ctx, &d_pos, label), want_pos, total, label);

    /* One map only, no offsets (NULL cl_mem), no event. */
    tu_clbuf d_pos2 = tu_clbuf_make(ctx, (size_t)total * 4, 0, NULL);
    SEG_OK(clvarlen_cl_token_maps(ctx, d_cu.mem, d_cu.off, n, total, NULL, 0, NULL, 0,
                                  d_pos2.mem, d_pos2.off, 0, NULL, NULL),
           label);
    ref_token_maps(cu, n, NULL, NULL, want_pos);
    tu_assert_i32_eq(tu_clbuf_fetch(ctx, &d_pos2, label), want_pos, total, label);

    tu_clbuf_free(&d_pos2);
    tu_clbuf_free(&d_len);
    tu_clbuf_free(&d_cu);
    tu_clbuf_free(&d_back);
    tu_clbuf_free(&d_off);
    tu_clbuf_free(&d_sid);
    tu_clbuf_free(&d_pos);
    free(want_sid);
    free(want_pos);
    free(offsets);
    free(cu);
}
END_TEST

START_TEST(clm_pack_unpack)
{
    clvarlen_context *ctx = seg_ctx;
    const uint64_t seed = seg_seed(102);
    tu_rng r = tu_rng_make(seed);
    static const rowcfg rows[] = {{U8, 3}, {F16, 3}, {F32, 3}, {BF16, 64}};
    for (size_t c = 0; c < 4; c++) {
        for (int masked = 0; masked < 2; masked++) {
            const rowcfg rc = rows[c];
            const size_t es = clvarlen_dtype_size(rc.dtype), row_bytes = (size_t)rc.elems * es;
            int64_t batch = tu_int(&r, 1, 20), S = tu_int(&r, 1, 30), rows_ = batch * S;
            int64_t pstride = random_stride(&r, rc.elems);
            size_t ppitch = pitch_bytes(rc.dtype, rc.elems, pstride);
            char label[160];
            snprintf(label, sizeof label, "cl %s %s x%" PRId64 " batch %" PRId64 " S %" PRId64
                     " seed %" PRIu64, masked ? "pack_masked" : "pack",
                     clvarlen_dtype_name(rc.dtype), rc.elems, batch, S, seed);
            unsigned char *padded = tu_xmalloc((size_t)rows_ * ppitch);
            random_bytes(&r, padded, (size_t)rows_ * ppitch);
            int32_t *valid = tu_xmalloc((size_t)batch * 4);
            uint8_t *mask = tu_xmalloc((size_t)rows_);
            for (int64_t b = 0; b < batch; b++)
                valid[b] = (int32_t)tu_int(&r, 0, S);
            for (int64_t i = 0; i < rows_; i++)
                mask[i] = tu_int(&r, 0, 1) ? (uint8_t)tu_int(&r, 1, 255) : 0;
            unsigned char *want = tu_xmalloc((size_t)rows_ * row_bytes);
            int32_t *want_cu = tu_xmalloc((size_t)(batch + 1) * 4);
            int64_t *want_src = tu_xmalloc((size_t)rows_ * 8);
            int64_t total = masked ? ref_pack_masked(row_bytes, padded, ppitch, batch, S, mask,
                                                     want, want_cu, want_src)
                                   : ref_pack(row_bytes, padded, ppitch, batch, S, valid, want,
                                              want_cu, want_src);

            tu_clbuf d_pad = tu_clbuf_make(ctx, (size_t)rows_ * ppitch, 64, padded);
            tu_clbuf d_valid = tu_clbuf_make(ctx, (size_t)batch * 4, 16, valid);
            tu_clbuf d_mask = tu_clbuf_make(ctx, (size_t)rows_, 3, mask);
            tu_clbuf d_packed = tu_clbuf_make(ctx, (size_t)total * row_bytes, 32, NULL);
            tu_clbuf d_cu = tu_clbuf_make(ctx, (size_t)(batch + 1) * 4, 4, NULL);
            tu_clbuf d_src = tu_clbuf_make(ctx, (size_t)total * 8, 8, NULL);
            tu_clbuf d_total = tu_clbuf_make(ctx, 8, 8, NULL);
            cl_event ev = NULL;
            SEG_OK(clvarlen_cl_pack(ctx, rc.dtype, rc.elems, d_pad.mem, d_pad.off, pstride, batch,
                                    S, masked ? NULL : d_valid.mem, masked ? 0 : d_valid.off,
                                    masked ? d_mask.mem : NULL, masked ? d_mask.off : 0, total,
                                    d_packed.mem, d_packed.off, d_cu.mem, d_cu.off, d_src.mem,
                                    d_src.off, d_total.mem, d_total.off, 0, NULL, &ev),
                   label);
            tu_cl_wait_release(&ev, label);
            int64_t got_total;
            memcpy(&got_total, tu_clbuf_fetch(ctx, &d_total, label), 8);
            tu_check(got_total == total, "%s: total %" PRId64 " want %" PRId64, label,
                     got_total, total);
            tu_assert_bytes_eq(tu_clbuf_fetch(ctx, &d_packed, label), want, (size_t)total * row_bytes,
                            label);
            tu_assert_i32_eq(tu_clbuf_fetch(ctx, &d_cu, label), want_cu, batch + 1, label);
            tu_assert_i64_eq(tu_clbuf_fetch(ctx, &d_src, label), want_src, total, label);

            /* unpack back into a fresh strided tensor with a pad value */
            int64_t ustride = random_stride(&r, rc.elems);
            size_t upitch = pitch_bytes(rc.dtype, rc.elems, ustride);
            unsigned char pad[8];
            random_bytes(&r, pad, sizeof pad);
            tu_clbuf d_out = tu_clbuf_make(ctx, (size_t)rows_ * upitch, 16, NULL);
            unsigned char *want_out = tu_xmalloc(d_out.bytes);
            memcpy(want_out, d_out.host + d_out.off, d_out.bytes);
            ref_unpack(row_bytes, es, want, row_bytes, total, want_src, batch, S, pad, want_out,
                       upitch);
            SEG_OK(clvarlen_cl_unpack(ctx, rc.dtype, rc.elems, d_packed.mem, d_packed.off, 0,
                                      total, d_src.mem, d_src.off, batch, S, pad, d_out.mem,
                                      d_out.off, ustride, 0, NULL, NULL),
                   label);
            tu_assert_bytes_eq(tu_clbuf_fetch(ctx, &d_out, label), want_out, d_out.bytes, label);

            tu_clbuf_free(&d_out);
            tu_clbuf_free(&d_pad);
            tu_clbuf_free(&d_valid);
            tu_clbuf_free(&d_mask);
            tu_clbuf_free(&d_packed);
            tu_clbuf_free(&d_cu);
            tu_clbuf_free(&d_src);
            tu_clbuf_free(&d_total);
            free(want_out);
            free(want);
            free(want_cu);
            free(want_src);
            free(mask);
            free(valid);
            free(padded);
        }
    }
}
END_TEST

START_TEST(clm_gather_scatter)
{
    clvarlen_context *ctx = seg_ctx;
    const uint64_t seed = seg_seed(103);
    tu_rng r = tu_rng_make(seed);
    for (size_t c = 0; c < N_COPY_ROWS; c++) {
        const rowcfg rc = copy_rows[c];
        const size_t es = clvarlen_dtype_size(rc.dtype), row_bytes = (size_t)rc.elems * es;
        const int big = rc.elems >= 100;
        int64_t rows_ = tu_int(&r, 1, big ? 30 : 300);
        int64_t n_index = tu_int(&r, 1, big ? 40 : 600);
        int64_t sstride = random_stride(&r, rc.elems), dstride = random_stride(&r, rc.elems);
        size_t spitch = pitch_bytes(rc.dtype, rc.elems, sstride);
        size_t dpitch = pitch_bytes(rc.dtype, rc.elems, dstride);
        /* Offsets: whole elements, not necessarily 16-byte aligned. */
        size_t off_src = es * (size_t)tu_int(&r, 0, 5), off_dst = es * (size_t)tu_int(&r, 0, 5);
        char label[200];
        snprintf(label, sizeof label,
                 "cl gather/scatter %s x%" PRId64 " rows %" PRId64 " n %" PRId64
                 " offsets %zu/%zu seed %" PRIu64,
                 clvarlen_dtype_name(rc.dtype), rc.elems, rows_, n_index, off_src, off_dst, seed);
        unsigned char *src = tu_xmalloc((size_t)rows_ * spitch);
        random_bytes(&r, src, (size_t)rows_ * spitch);
        int32_t *index = tu_xmalloc((size_t)n_index * 4);
        for (int64_t m = 0; m < n_index; m++)
            index[m] = tu_int(&r, 0, 9) == 0 ? -1 : (int32_t)tu_int(&r, 0, rows_ - 1);

        /* gather */
        tu_clbuf d_src = tu_clbuf_make(ctx, (size_t)rows_ * spitch, off_src, src);
        tu_clbuf d_idx = tu_clbuf_make(ctx, (size_t)n_index * 4, 4 * (size_t)tu_int(&r, 0, 3), index);
        tu_clbuf d_dst = tu_clbuf_make(ctx, (size_t)n_index * dpitch, off_dst, NULL);
        unsigned char *want = tu_xmalloc(d_dst.bytes);
        memcpy(want, d_dst.host + d_dst.off, d_dst.bytes);
        ref_gather(row_bytes, src, spitch, index, n_index, want, dpitch);
        SEG_OK(clvarlen_cl_gather_rows(ctx, rc.dtype, rc.elems, d_src.mem, d_src.off, rows_,
                                       sstride, d_idx.mem, d_idx.off, n_index, d_dst.mem,
                                       d_dst.off, dstride, 0, NULL, NULL),
               label);
        tu_assert_bytes_eq(tu_clbuf_fetch(ctx, &d_dst, label), want, d_dst.bytes, label);

        /* scatter overwrite with distinct indices (and ZERO_REST every other dtype) */
        int32_t *uidx = tu_xmalloc((size_t)(2 * rows_ + 8) * 4);
        int64_t n_u = random_unique_index(&r, rows_, uidx, 2 * rows_ + 8);
        unsigned flags = CLVARLEN_SCATTER_UNIQUE_INDICES | (c % 2 ? CLVARLEN_SCATTER_ZERO_REST : 0);
        unsigned char *ssrc = tu_xmalloc((size_t)(n_u ? n_u : 1) * dpitch);
        random_bytes(&r, ssrc, (size_t)n_u * dpitch);
        tu_clbuf d_ssrc = tu_clbuf_make(ctx, (size_t)n_u * dpitch, off_dst, ssrc);
        tu_clbuf d_uidx = tu_clbuf_make(ctx, (size_t)n_u * 4, 12, uidx);
        tu_clbuf d_sdst = tu_clbuf_make(ctx, (size_t)rows_ * spitch, off_src, src);
        unsigned char *want_s = tu_xmalloc(d_sdst.bytes);
        memcpy(want_s, src, d_sdst.bytes);
        ref_scatter_overwrite(row_bytes, ssrc, dpitch, uidx, n_u, want_s, rows_, spitch,
                              (flags & CLVARLEN_SCATTER_ZERO_REST) != 0);
        SEG_OK(clvarlen_cl_scatter_rows(ctx, rc.dtype, rc.elems, d_ssrc.mem, d_ssrc.off, dstride,
                                        d_uidx.mem, d_uidx.off, n_u, d_sdst.mem, d_sdst.off,
                                        rows_, sstride, CLVARLEN_SCATTER_OVERWRITE, flags, 0,
                                        NULL, NULL),
               label);
        tu_assert_bytes_eq(tu_clbuf_fetch(ctx, &d_sdst, label), want_s, d_sdst.bytes, label);

        tu_clbuf_free(&d_src);
        tu_clbuf_free(&d_idx);
        tu_clbuf_free(&d_dst);
        tu_clbuf_free(&d_ssrc);
        tu_clbuf_free(&d_uidx);
        tu_clbuf_free(&d_sdst);
        free(want_s);
        free(ssrc);
        free(uidx);
        free(want);
        free(index);
        free(src);
    }
}
END_TEST

START_TEST(clm_scatter_accumulate)
{
    clvarlen_context *ctx = seg_ctx;
    const uint64_t seed = seg_seed(104);
    tu_rng r = tu_rng_make(seed);
    for (size_t d = 0; d < 4; d++) {
        for (int variant = 0; variant < 3; variant++) {
            /* variant 0: duplicates; 1: duplicates + ZERO_REST; 2: distinct + UNIQUE_INDICES */
            const clvarlen_dtype dtype = accumulate_dtypes[d];
            const size_t es = clvarlen_dtype_size(dtype);
            const int64_t row_elems = variant == 2 ? 17 : 3;
            int64_t dst_rows = tu_int(&r, 1, 80);
            int32_t *index = tu_xmalloc((size_t)(2 * dst_rows + 400) * 4);
            int64_t n_index;
            if (variant == 2) {
                n_index = random_unique_index(&r, dst_rows, index, 2 * dst_rows + 8);
            } else {
                n_index = tu_int(&r, 1, 400);
                for (int64_t m = 0; m < n_index; m++)
                    index[m] = tu_int(&r, 0, 9) == 0 ? -1 : (int32_t)tu_int(&r, 0, dst_rows - 1);
            }
            unsigned flags = variant == 1 ? CLVARLEN_SCATTER_ZERO_REST
                             : variant == 2 ? CLVARLEN_SCATTER_UNIQUE_INDICES : 0u;
            int64_t sstride = random_stride(&r, row_elems), dstride = random_stride(&r, row_elems);
            size_t spitch = pitch_bytes(dtype, row_elems, sstride);
            size_t dpitch = pitch_bytes(dtype, row_elems, dstride);
            char label[200];
            snprintf(label, sizeof label,
                     "cl accumulate %s x%" PRId64 " rows %" PRId64 " n %" PRId64 " flags %u seed %"
                     PRIu64, clvarlen_dtype_name(dtype), row_elems, dst_rows, n_index, flags, seed);
            const double scale = dtype == I32 ? 1000.0 : 1.0;
            void *src = tu_xmalloc((size_t)(n_index ? n_index : 1) * spitch);
            tu_fill_random(&r, src, dtype, (size_t)n_index * spitch / es, scale);
            void *init = tu_xmalloc((size_t)dst_rows * dpitch);
            tu_fill_random(&r, init, dtype, (size_t)dst_rows * dpitch / es, scale);
            double *want = tu_xmalloc((size_t)(dst_rows * row_elems) * sizeof(double));
            ref_scatter_accumulate(dtype, row_elems, src, sstride, index, n_index, init, dst_rows,
                                   dstride, variant == 1, want);
            tu_clbuf d_src = tu_clbuf_make(ctx, (size_t)n_index * spitch, 16, src);
            tu_clbuf d_idx = tu_clbuf_make(ctx, (size_t)n_index * 4, 8, index);
            tu_clbuf d_dst = tu_clbuf_make(ctx, (size_t)dst_rows * dpitch, 32, init);
            SEG_OK(clvarlen_cl_scatter_rows(ctx, dtype, row_elems, d_src.mem, d_src.off, sstride,
                                            d_idx.mem, d_idx.off, n_index, d_dst.mem, d_dst.off,
                                            dst_rows, dstride, CLVARLEN_SCATTER_ACCUMULATE,
                                            flags, 0, NULL, NULL),
                   label);
            void *got = tu_clbuf_fetch(ctx, &d_dst, label);
            check_accumulated(got, dtype, dst_rows, row_elems, dstride, want, label);
            assert_gaps_kept(got, init, dst_rows, (size_t)row_elems * es, dpitch, label);
            tu_clbuf_free(&d_src);
            tu_clbuf_free(&d_idx);
            tu_clbuf_free(&d_dst);
            free(want);
            free(init);
            free(src);
            free(index);
        }
    }
}
END_TEST

START_TEST(clm_seqlens_expand)
{
    clvarlen_context *ctx = seg_ctx;
    const uint64_t seed = seg_seed(105);
    tu_rng r = tu_rng_make(seed);
    /* reps 6 and 7 have 16-byte aligned page rows (the int4 path), rep 6 with
     * rows longer than a work-group */
    for (int rep = 0; rep < 8; rep++) {
        const int uniform = rep % 2 == 0, with_pages = rep != 4;
        int64_t n = rep == 1 ? 1200 : tu_int(&r, 1, 200);
        int32_t uq = (int32_t)tu_int(&r, 1, 6);
        int32_t *kv = tu_xmalloc((size_t)n * 4), *q = tu_xmalloc((size_t)n * 4);
        for (int64_t s = 0; s < n; s++) {
            q[s] = (int32_t)tu_int(&r, 0, 7);
            kv[s] = (int32_t)(tu_int(&r, 0, 4) == 0 ? tu_int(&r, 0, 6) : tu_int(&r, 0, 3000));
        }
        int64_t cols = tu_int(&r, 1, 40), pstride = cols + tu_int(&r, 0, 3);
        int64_t limit = tu_int(&r, 1, cols), ostride = limit + tu_int(&r, 0, 3);
        if (rep >= 6) {
            cols = rep == 6 ? 4100 : 40;
            pstride = cols + (rep == 7 ? 4 : 0);
            limit = rep == 6 ? 4096 : 36;
            ostride = limit + (rep == 7 ? 8 : 0);
        }
        int32_t *pages = tu_xmalloc((size_t)(n * pstride) * 4);
        for (int64_t i = 0; i < n * pstride; i++)
            pages[i] = (int32_t)tu_int(&r, 0, 1 << 24);
        const int32_t *q_arg = uniform ? NULL : q;
        int64_t total = ref_seqlens_expand(kv, q_arg, uq, n, NULL, 0, 0, 0, NULL, NULL, 0);
        int64_t capacity = total + (rep % 3 == 0 ? 5 : 0);
        char label[200];
        snprintf(label, sizeof label, "cl seqlens_expand rep %d n %" PRId64 " total %" PRId64
                 " seed %" PRIu64, rep, n, total, seed);
        tu_clbuf d_kv = tu_clbuf_make(ctx, (size_t)n * 4, 4, kv);
        tu_clbuf d_q = tu_clbuf_make(ctx, (size_t)n * 4, 8, q);
        tu_clbuf d_pages = tu_clbuf_make(ctx, (size_t)(n * pstride) * 4, 16, pages);
        tu_clbuf d_sl = tu_clbuf_make(ctx, (size_t)capacity * 4, 20, NULL);
        tu_clbuf d_po = tu_clbuf_make(ctx, (size_t)(capacity * ostride) * 4, 0, NULL);
        tu_clbuf d_total = tu_clbuf_make(ctx, 8, 24, NULL);
        int32_t *want = tu_xmalloc((size_t)(total + 1) * 4);
        int32_t *want_po = tu_xmalloc(d_po.bytes + 4);
        memcpy(want_po, d_po.host + d_po.off, d_po.bytes);
        ref_seqlens_expand(kv, q_arg, uq, n, with_pages ? pages : NULL, cols, pstride, limit,
                           want, want_po, ostride);
        cl_event ev = NULL;
        SEG_OK(clvarlen_cl_seqlens_expand(ctx, d_kv.mem, d_kv.off, uniform ? NULL : d_q.mem,
                                          uniform ? 0 : d_q.off, uq, n,
                                          with_pages ? d_pages.mem : NULL, d_pages.off, cols,
                                          pstride, limit, capacity, d_sl.mem, d_sl.off,
                                          with_pages ? d_po.mem : NULL, d_po.off, ostride,
                                          d_total.mem, d_total.off, 0, NULL, &ev),
               label);
        tu_cl_wait_release(&ev, label);
        int64_t got_total;
        memcpy(&got_total, tu_clbuf_fetch(ctx, &d_total, label), 8);
        tu_check(got_total == total, "%s: total %" PRId64, label, got_total);
        tu_assert_i32_eq(tu_clbuf_fetch(ctx, &d_sl, label), want, total, label);
        tu_assert_bytes_eq(tu_clbuf_fetch(ctx, &d_po, label), want_po, (size_t)(total * ostride) * 4,
                        label);
        tu_clbuf_free(&d_kv);
        tu_clbuf_free(&d_q);
        tu_clbuf_free(&d_pages);
        tu_clbuf_free(&d_sl);
        tu_clbuf_free(&d_po);
        tu_clbuf_free(&d_total);
        free(want);
        free(want_po);
        free(pages);
        free(q);
        free(kv);
    }
}
END_TEST

START_TEST(clm_cp)
{
    clvarlen_context *ctx = seg_ctx;
    const uint64_t seed = seg_seed(106);
    tu_rng r = tu_rng_make(seed);
    for (int32_t world = 1; world <= 8; world += (world < 4 ? 1 : 3)) {
        const rowcfg rc = world % 2 ? (rowcfg){F16, 3} : (rowcfg){U8, 12};
        const size_t row_bytes = (size_t)rc.elems * clvarlen_dtype_size(rc.dtype);
        int64_t n = tu_int(&r, 1, 40);
        int32_t *lengths = tu_xmalloc((size_t)n * 4);
        for (int64_t s = 0; s < n; s++)
            lengths[s] = (int32_t)(tu_int(&r, 0, 1) ? tu_int(&r, 0, 2 * world) : tu_int(&r, 0, 150));
        int32_t *cu = tu_xmalloc((size_t)(n + 1) * 4);
        tu_cu_from_lengths(lengths, n, cu);
        const int64_t total = cu[n];
        int64_t gstride = random_stride(&r, rc.elems), lstride = random_stride(&r, rc.elems);
        size_t gpitch = pitch_bytes(rc.dtype, rc.elems, gstride);
        size_t lpitch = pitch_bytes(rc.dtype, rc.elems, lstride);
        unsigned char *global = tu_xmalloc((size_t)total * gpitch + 1);
        random_bytes(&r, global, (size_t)total * gpitch);
        tu_clbuf d_cu = tu_clbuf_make(ctx, (size_t)(n + 1) * 4, 12, cu);
        tu_clbuf d_global = tu_clbuf_make(ctx, (size_t)total * gpitch, 16, global);
        tu_clbuf d_rebuilt = tu_clbuf_make(ctx, (size_t)total * gpitch, 0, NULL);
        for (int32_t rank = 0; rank < world; rank++) {
            char label[200];
            snprintf(label, sizeof label, "cl cp W %d rank %d n %" PRId64 " T %" PRId64
                     " seed %" PRIu64, world, rank, n, total, seed);
            plan_bufs w;
            w.local = ref_cp_local_tokens(cu, n, world, rank);
            w.local_cu = tu_xmalloc((size_t)(n + 1) * 4);
            w.head_cu = tu_xmalloc((size_t)(n + 1) * 4);
            w.tail_cu = tu_xmalloc((size_t)(n + 1) * 4);
            w.gidx = tu_xmalloc((size_t)(w.local + 1) * 4);
            w.pos = tu_xmalloc((size_t)(w.local + 1) * 4);
            ref_cp_plan(cu, n, world, rank, w.local_cu, w.head_cu, w.tail_cu, w.gidx, w.pos,
                        &w.max_head, &w.max_tail);
            tu_clbuf d_lcu = tu_clbuf_make(ctx, (size_t)(n + 1) * 4, 4, NULL);
            tu_clbuf d_hcu = tu_clbuf_make(ctx, (size_t)(n + 1) * 4, 8, NULL);
            tu_clbuf d_tcu = tu_clbuf_make(ctx, (size_t)(n + 1) * 4, 12, NULL);
            tu_clbuf d_gi = tu_clbuf_make(ctx, (size_t)w.local * 4, 16, NULL);
            tu_clbuf d_pos = tu_clbuf_make(ctx, (size_t)w.local * 4, 20, NULL);
            tu_clbuf d_lt = tu_clbuf_make(ctx, 8, 24, NULL);
            SEG_OK(clvarlen_cl_cp_plan(ctx, d_cu.mem, d_cu.off, n, world, rank, d_lcu.mem,
                                       d_lcu.off, d_hcu.mem, d_hcu.off, d_tcu.mem, d_tcu.off,
                                       w.local, d_gi.mem, d_gi.off, d_pos.mem, d_pos.off,
                                       d_lt.mem, d_lt.off, 0, NULL, NULL),
                   label);
            int64_t lt;
            memcpy(&lt, tu_clbuf_fetch(ctx, &d_lt, label), 8);
            tu_check(lt == w.local, "%s: local tokens %" PRId64, label, lt);
            tu_assert_i32_eq(tu_clbuf_fetch(ctx, &d_lcu, label), w.local_cu, n + 1, label);
            tu_assert_i32_eq(tu_clbuf_fetch(ctx, &d_hcu, label), w.head_cu, n + 1, label);
            tu_assert_i32_eq(tu_clbuf_fetch(ctx, &d_tcu, label), w.tail_cu, n + 1, label);
            tu_assert_i32_eq(tu_clbuf_fetch(ctx, &d_gi, label), w.gidx, w.local, label);
            tu_assert_i32_eq(tu_clbuf_fetch(ctx, &d_pos, label), w.pos, w.local, label);

            tu_clbuf d_local = tu_clbuf_make(ctx, (size_t)w.local * lpitch, 32, NULL);
            unsigned char *want = tu_xmalloc(d_local.bytes + 1);
            memcpy(want, d_local.host + d_local.off, d_local.bytes);
            ref_gather(row_bytes, global, gpitch, w.gidx, w.local, want, lpitch);
            cl_event ev = NULL;
            SEG_OK(clvarlen_cl_cp_gather(ctx, rc.dtype, rc.elems, d_global.mem, d_global.off,
                                         gstride, total, d_cu.mem, d_cu.off, n, world, rank,
                                         d_local.mem, d_local.off, lstride, w.local, 0, NULL,
                                         &ev),
                   label);
            /* The scatter waits for the gather through the wait list. */
            cl_event ev2 = NULL;
            SEG_OK(clvarlen_cl_cp_scatter(ctx, rc.dtype, rc.elems, d_local.mem, d_local.off,
                                          lstride, w.local, d_cu.mem, d_cu.off, n, world, rank,
                                          d_rebuilt.mem, d_rebuilt.off, gstride, total,
                                          CLVARLEN_SCATTER_OVERWRITE,
                                          rank == 0 ? CLVARLEN_SCATTER_ZERO_REST : 0u, 1, &ev,
                                          &ev2),
                   label);
            tu_cl_wait_release(&ev2, label);
            tu_cl_wait_release(&ev, label);
            tu_assert_bytes_eq(tu_clbuf_fetch(ctx, &d_local, label), want, d_local.bytes, label);
            tu_clbuf_free(&d_local);
            tu_clbuf_free(&d_lcu);
            tu_clbuf_free(&d_hcu);
            tu_clbuf_free(&d_tcu);
            tu_clbuf_free(&d_gi);
            tu_clbuf_free(&d_pos);
            tu_clbuf_free(&d_lt);
            free(want);
            free_plan(&w);
        }
        char label[100];
        snprintf(label, sizeof label, "cl cp rebuild W %d seed %" PRIu64, world, seed);
        const unsigned char *got = tu_clbuf_fetch(ctx, &d_rebuilt, label);
        for (int64_t t = 0; t < total; t++)
            tu_assert_bytes_eq(got + (size_t)t * gpitch, global + (size_t)t * gpitch, row_bytes,
                            label);
        tu_clbuf_free(&d_cu);
        tu_clbuf_free(&d_global);
        tu_clbuf_free(&d_rebuilt);
        free(global);
        free(cu);
        free(lengths);
    }
}
END_TEST

START_TEST(clm_gen_seq_lens_same_as_cpu)
{
    clvarlen_context *ctx = seg_ctx, *cpu = tu_cpu_context();
    static const struct {
        uint64_t seed;
        int32_t world, n;
        int64_t total;
    } cases[] = {{1, 1, 1, 0}, {2, 8, 64, 1024}, {3, 3, 1000, 100000}, {4, 2, 7, 5},
                 {UINT64_MAX, 5, 300, 1 << 24}, {6, 8, 64, 1024}, {7, 1, 4096, 4096}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char label[120];
        snprintf(label, sizeof label, "cl gen_seq_lens seed %" PRIu64 " world %d n %d total %"
                 PRId64, cases[i].seed, cases[i].world, cases[i].n, cases[i].total);
        size_t count = (size_t)cases[i].world * (size_t)cases[i].n;
        int32_t *want = tu_xmalloc(count * 4), *host = tu_xmalloc(count * 4), *cpu_out = tu_xmalloc(count * 4);
        ref_gen_seq_lens(cases[i].seed, cases[i].world, cases[i].n, cases[i].total, want);
        SEG_OK(clvarlen_gen_seq_lens(cpu, cases[i].seed, cases[i].world, cases[i].n,
                                     cases[i].total, cpu_out),
               label);
        SEG_OK(clvarlen_gen_seq_lens(ctx, cases[i].seed, cases[i].world, cases[i].n,
                                     cases[i].total, host),
               label);
        tu_clbuf d = tu_clbuf_make(ctx, count * 4, 12, NULL);
        SEG_OK(clvarlen_cl_gen_seq_lens(ctx, cases[i].seed, cases[i].world, cases[i].n,
                                        cases[i].total, d.mem, d.off, 0, NULL, NULL),
               label);
        tu_assert_i32_eq(cpu_out, want, (int64_t)count, label);
        tu_assert_i32_eq(host, cpu_out, (int64_t)count, label);
        tu_assert_i32_eq(tu_clbuf_fetch(ctx, &d, label), cpu_out, (int64_t)count, label);
        tu_clbuf_free(&d);
        free(want);
        free(host);
        free(cpu_out);
    }
    clvarlen_context_destroy(cpu);
}
END_TEST

START_TEST(clm_no_opencl_and_offsets)
{
    clvarlen_context *ctx = seg_ctx, *cpu = tu_cpu_context();
    /* cl_mem entry points on the CPU fallback. */
    cl_context c = NULL;
    ck_assert_int_eq(clvarlen_context_get_cl(cpu, &c, NULL, NULL), CLVARLEN_ERROR_NO_OPENCL);
    ck_assert(clvarlen_last_error(cpu)[0] != '\0');
    ck_assert_int_eq(clvarlen_cl_gather_rows(cpu, F32, 3, NULL, 0, 1, 0, NULL, 0, 1, NULL, 0, 0,
                                             0, NULL, NULL),
                     CLVARLEN_ERROR_NO_OPENCL);
    tu_check(strstr(clvarlen_last_error(cpu), "clvarlen_cl_gather_rows") != NULL,
             "message: %s", clvarlen_last_error(cpu));
    ck_assert_int_eq(clvarlen_cl_gen_seq_lens(cpu, 1, 1, 1, 1, NULL, 0, 0, NULL, NULL),
                     CLVARLEN_ERROR_NO_OPENCL);
    clvarlen_context_destroy(cpu);

    /* A byte offset that splits an element is refused, nothing written. */
    static const int32_t index[2] = {1, 0};
    float src[2 * 3] = {1, 2, 3, 4, 5, 6};
    tu_clbuf d_src = tu_clbuf_make(ctx, sizeof src, 0, src);
    tu_clbuf d_idx = tu_clbuf_make(ctx, sizeof index, 0, index);
    tu_clbuf d_dst = tu_clbuf_make(ctx, sizeof src, 2, NULL);
    clvarlen_status st = clvarlen_cl_gather_rows(ctx, F32, 3, d_src.mem, 0, 2, 0, d_idx.mem, 0, 2,
                                                 d_dst.mem, 2, 0, 0, NULL, NULL);
    tu_check(st == CLVARLEN_ERROR_INVALID_ARGUMENT, "misaligned offset: %s (%s)",
             clvarlen_status_name(st), clvarlen_last_error(ctx));
    ck_assert(clvarlen_last_error(ctx)[0] != '\0');
    tu_clbuf_untouched(ctx, &d_dst, "misaligned offset");
    st = clvarlen_cl_gather_rows(ctx, F32, 3, d_src.mem, 0, 2, 0, d_idx.mem, 1, 2, d_dst.mem, 4,
                                 0, 0, NULL, NULL);
    tu_check(st == CLVARLEN_ERROR_INVALID_ARGUMENT, "misaligned index offset: %s",
             clvarlen_status_name(st));
    /* A wait list count without a list. */
    st = clvarlen_cl_gather_rows(ctx, F32, 3, d_src.mem, 0, 2, 0, d_idx.mem, 0, 2, d_dst.mem, 4,
                                 0, 1, NULL, NULL);
    tu_check(st == CLVARLEN_ERROR_INVALID_ARGUMENT, "wait list NULL with count 1: %s",
             clvarlen_status_name(st));
    tu_clbuf_free(&d_src);
    tu_clbuf_free(&d_idx);
    tu_clbuf_free(&d_dst);
}
END_TEST

/* ------------------------------------------------------------ device checks */

/* Device contexts of this suite run without the library's on-disk program cache
 * (test-program-cache covers it): on PoCL, storing an entry asks for the program
 * binary, which compiles every kernel of segment.cl for every -D variant (8 to 26 s
 * each, about 11 variants: minutes), where PoCL alone compiles only the kernels used
 * and keeps them in POCL_CACHE_DIR (about a minute cold, seconds warm). */
clvarlen_context *seg_cl_context(int device_checks)
{
    clvarlen_options *o = NULL;
    const char *spec = tu_cl_device_spec();
    ck_assert_int_eq(clvarlen_options_create(&o), CLVARLEN_SUCCESS);
    ck_assert_int_eq(clvarlen_options_set_device(o, spec), CLVARLEN_SUCCESS);
    ck_assert_int_eq(clvarlen_options_set_cache_dir(o, "off"), CLVARLEN_SUCCESS);
    ck_assert_int_eq(clvarlen_options_set_device_checks(o, device_checks), CLVARLEN_SUCCESS);
    clvarlen_context *ctx = NULL;
    clvarlen_status st = clvarlen_context_create(o, &ctx);
    clvarlen_options_destroy(o);
    tu_check(st == CLVARLEN_SUCCESS, "context on OpenCL device '%s': %s", spec,
             clvarlen_last_error(NULL));
    clvarlen_device_info info;
    ck_assert_int_eq(clvarlen_context_device(ctx, &info), CLVARLEN_SUCCESS);
    tu_check(info.kind != CLVARLEN_DEVICE_CPU_FALLBACK, "device '%s' is the CPU fallback", spec);
    return ctx;
}

static clvarlen_context *checked_context(void)
{
    return seg_cl_context(1);
}

#define EXPECT_DEVICE_ERROR(ctx, expr, want, label)                                            \
    do {                                                                                       \
        clvarlen_status st_ = (expr);                                                          \
        tu_check(st_ == (want), "%s: got %s, want %s (%s)", (label),                           \
                 clvarlen_status_name(st_), clvarlen_status_name(want),                        \
                 clvarlen_last_error(ctx));                                                    \
        tu_check(clvarlen_last_error(ctx)[0] != '\0', "%s: empty message", (label));           \
    } while (0)

/* Buffers the device-check cases share: cu_seqlens good, decreasing and not starting at 0,
 * 18 rows of 3 floats, two int32 outputs and a large row output. */
typedef struct devchk_bufs {
    tu_clbuf good, dec, nz, rows, a, b, big;
} devchk_bufs;

static const int32_t devchk_good_cu[4] = {0, 5, 12, 18};

static void devchk_maps_lengths(clvarlen_context *ctx, devchk_bufs *d)
{
    /* token maps: decreasing, not starting at 0, not ending at the total */
    EXPECT_DEVICE_ERROR(ctx, clvarlen_cl_token_maps(ctx, d->dec.mem, d->dec.off, 3, 18, NULL, 0,
                                                    d->a.mem, d->a.off, d->b.mem, d->b.off, 0,
                                                    NULL, NULL),
                        CLVARLEN_ERROR_INVALID_CU_SEQLENS, "maps decreasing");
    tu_clbuf_untouched(ctx, &d->a, "maps decreasing seq_id");
    tu_clbuf_untouched(ctx, &d->b, "maps decreasing pos");
    EXPECT_DEVICE_ERROR(ctx, clvarlen_cl_token_maps(ctx, d->nz.mem, d->nz.off, 3, 18, NULL, 0,
                                                    d->a.mem, d->a.off, d->b.mem, d->b.off, 0,
                                                    NULL, NULL),
                        CLVARLEN_ERROR_INVALID_CU_SEQLENS, "maps cu[0] != 0");
    tu_clbuf_untouched(ctx, &d->a, "maps cu[0] seq_id");
    EXPECT_DEVICE_ERROR(ctx, clvarlen_cl_token_maps(ctx, d->good.mem, d->good.off, 3, 17, NULL, 0,
                                                    d->a.mem, d->a.off, d->b.mem, d->b.off, 0,
                                                    NULL, NULL),
                        CLVARLEN_ERROR_INVALID_CU_SEQLENS, "maps total 17");
    tu_clbuf_untouched(ctx, &d->a, "maps total seq_id");
    tu_clbuf_untouched(ctx, &d->b, "maps total pos");
    /* lengths from a bad cu */
    EXPECT_DEVICE_ERROR(ctx, clvarlen_cl_lengths_from_cu_seqlens(ctx, d->dec.mem, d->dec.off, 3,
                                                                 d->a.mem, d->a.off, 0, NULL, NULL),
                        CLVARLEN_ERROR_INVALID_CU_SEQLENS, "lengths decreasing");
    tu_clbuf_untouched(ctx, &d->a, "lengths decreasing");
    /* negative lengths */
    static const int32_t neg_lengths[3] = {5, -7, 6};
    tu_clbuf d_neg = tu_clbuf_make(ctx, sizeof neg_lengths, 0, neg_lengths);
    clvarlen_status st = clvarlen_cl_cu_seqlens_from_lengths(ctx, d_neg.mem, 0, 3, d->a.mem,
                                                             d->a.off, 0, NULL, NULL);
    tu_check(st != CLVARLEN_SUCCESS, "negative device length accepted with checks on");
    tu_clbuf_untouched(ctx, &d->a, "negative lengths");
    tu_clbuf_free(&d_neg);
}

static void devchk_gather_scatter(clvarlen_context *ctx, devchk_bufs *d)
{
    /* gather / scatter with an index out of range */
    static const int32_t bad_index[4] = {0, 17, 18, 2}, low_index[2] = {-2, 1};
    tu_clbuf d_bi = tu_clbuf_make(ctx, sizeof bad_index, 4, bad_index);
    tu_clbuf d_li = tu_clbuf_make(ctx, sizeof low_index, 4, low_index);
    EXPECT_DEVICE_ERROR(ctx, clvarlen_cl_gather_rows(ctx, F32, 3, d->rows.mem, 0, 18, 0, d_bi.mem,
                                                     d_bi.off, 4, d->big.mem, d->big.off, 0, 0,
                                                     NULL, NULL),
                        CLVARLEN_ERROR_INDEX_OUT_OF_RANGE, "gather index 18");
    tu_clbuf_untouched(ctx, &d->big, "gather index 18");
    EXPECT_DEVICE_ERROR(ctx, clvarlen_cl_gather_rows(ctx, F32, 3, d->rows.mem, 0, 18, 0, d_li.mem,
                                                     d_li.off, 2, d->big.mem, d->big.off, 0, 0,
                                                     NULL, NULL),
                        CLVARLEN_ERROR_INDEX_OUT_OF_RANGE, "gather index -2");
    tu_clbuf_untouched(ctx, &d->big, "gather index -2");
    for (int zero_rest = 0; zero_rest < 2; zero_rest++) {
        for (int mode = 0; mode < 2; mode++) {
            char label[80];
            snprintf(label, sizeof label, "scatter index 18 mode %d zero_rest %d", mode,
                     zero_rest);
            EXPECT_DEVICE_ERROR(ctx, clvarlen_cl_scatter_rows(
                                         ctx, F32, 3, d->rows.mem, 0, 0, d_bi.mem, d_bi.off, 4,
                                         d->big.mem, d->big.off, 18, 0,
                                         (clvarlen_scatter_mode)mode,
                                         zero_rest ? CLVARLEN_SCATTER_ZERO_REST : 0u, 0, NULL,
                                         NULL),
                                CLVARLEN_ERROR_INDEX_OUT_OF_RANGE, label);
            tu_clbuf_untouched(ctx, &d->big, label);
        }
    }
    tu_clbuf *mine[] = {&d_bi, &d_li};
    for (size_t i = 0; i < sizeof mine / sizeof mine[0]; i++)
        tu_clbuf_free(mine[i]);
}

static void devchk_cp(clvarlen_context *ctx, devchk_bufs *d)
{
    /* CP with a bad cu */
    tu_clbuf d_lcu = tu_clbuf_make(ctx, 4 * 4, 0, NULL);
    EXPECT_DEVICE_ERROR(ctx, clvarlen_cl_cp_plan(ctx, d->dec.mem, d->dec.off, 3, 2, 1, d_lcu.mem,
                                                 d_lcu.off, NULL, 0, NULL, 0, 18, d->a.mem,
                                                 d->a.off, NULL, 0, NULL, 0, 0, NULL, NULL),
                        CLVARLEN_ERROR_INVALID_CU_SEQLENS, "cp_plan decreasing");
    tu_clbuf_untouched(ctx, &d_lcu, "cp_plan local cu");
    tu_clbuf_untouched(ctx, &d->a, "cp_plan global index");
    EXPECT_DEVICE_ERROR(ctx, clvarlen_cl_cp_gather(ctx, F32, 3, d->rows.mem, 0, 0, 18, d->dec.mem,
                                                   d->dec.off, 3, 2, 0, d->big.mem, d->big.off, 0,
                                                   18, 0, NULL, NULL),
                        CLVARLEN_ERROR_INVALID_CU_SEQLENS, "cp_gather decreasing");
    tu_clbuf_untouched(ctx, &d->big, "cp_gather");
    EXPECT_DEVICE_ERROR(ctx, clvarlen_cl_cp_scatter(ctx, F32, 3, d->rows.mem, 0, 0, 18, d->nz.mem,
                                                    d->nz.off, 3, 2, 0, d->big.mem, d->big.off, 0,
                                                    18, CLVARLEN_SCATTER_OVERWRITE,
                                                    CLVARLEN_SCATTER_ZERO_REST, 0, NULL, NULL),
                        CLVARLEN_ERROR_INVALID_CU_SEQLENS, "cp_scatter cu[0] != 0");
    tu_clbuf_untouched(ctx, &d->big, "cp_scatter");
    EXPECT_DEVICE_ERROR(ctx, clvarlen_cl_cp_gather(ctx, F32, 3, d->rows.mem, 0, 0, 17, d->good.mem,
                                                   d->good.off, 3, 2, 0, d->big.mem, d->big.off, 0,
                                                   18, 0, NULL, NULL),
                        CLVARLEN_ERROR_INVALID_CU_SEQLENS, "cp_gather total 17");
    tu_clbuf_untouched(ctx, &d->big, "cp_gather total");
    tu_clbuf_free(&d_lcu);
}

static void devchk_capacity(clvarlen_context *ctx, devchk_bufs *d)
{
    /* capacity: seqlens_expand and pack */
    static const int32_t kv[2] = {9, 4}, q[2] = {3, 4};
    tu_clbuf d_kv = tu_clbuf_make(ctx, sizeof kv, 0, kv);
    tu_clbuf d_q = tu_clbuf_make(ctx, sizeof q, 0, q);
    tu_clbuf d_sl = tu_clbuf_make(ctx, 6 * 4, 4, NULL);
    tu_clbuf d_total = tu_clbuf_make(ctx, 8, 8, NULL);
    EXPECT_DEVICE_ERROR(ctx, clvarlen_cl_seqlens_expand(ctx, d_kv.mem, 0, d_q.mem, 0, 0, 2, NULL,
                                                        0, 0, 0, 0, 6, d_sl.mem, d_sl.off, NULL,
                                                        0, 0, d_total.mem, d_total.off, 0, NULL,
                                                        NULL),
                        CLVARLEN_ERROR_BUFFER_TOO_SMALL, "seqlens_expand 7 > 6");
    tu_clbuf_untouched(ctx, &d_sl, "seqlens_expand capacity");
    static const int32_t neg_q[2] = {3, -1};
    tu_clbuf d_nq = tu_clbuf_make(ctx, sizeof neg_q, 0, neg_q);
    clvarlen_status st = clvarlen_cl_seqlens_expand(ctx, d_kv.mem, 0, d_nq.mem, 0, 0, 2, NULL, 0,
                                                    0, 0, 0, 6, d_sl.mem, d_sl.off, NULL, 0, 0,
                                                    NULL, 0, 0, NULL, NULL);
    tu_check(st != CLVARLEN_SUCCESS, "negative device q_len accepted with checks on");
    tu_clbuf_untouched(ctx, &d_sl, "seqlens_expand negative q");

    static const int32_t valid[3] = {4, 4, 4};
    tu_clbuf d_valid = tu_clbuf_make(ctx, sizeof valid, 0, valid);
    tu_clbuf d_packed = tu_clbuf_make(ctx, 11 * 3 * 4, 16, NULL);
    tu_clbuf d_pcu = tu_clbuf_make(ctx, 4 * 4, 4, NULL);
    EXPECT_DEVICE_ERROR(ctx, clvarlen_cl_pack(ctx, F32, 3, d->rows.mem, 0, 0, 3, 6, d_valid.mem, 0,
                                              NULL, 0, 11, d_packed.mem, d_packed.off, d_pcu.mem,
                                              d_pcu.off, NULL, 0, d_total.mem, d_total.off, 0,
                                              NULL, NULL),
                        CLVARLEN_ERROR_BUFFER_TOO_SMALL, "pack 12 > 11");
    tu_clbuf_untouched(ctx, &d_packed, "pack capacity");
    static const int32_t too_long[3] = {4, 7, 4};
    tu_clbuf d_tl = tu_clbuf_make(ctx, sizeof too_long, 0, too_long);
    st = clvarlen_cl_pack(ctx, F32, 3, d->rows.mem, 0, 0, 3, 6, d_tl.mem, 0, NULL, 0, 18,
                          d_packed.mem, d_packed.off, d_pcu.mem, d_pcu.off, NULL, 0, d_total.mem,
                          d_total.off, 0, NULL, NULL);
    tu_check(st != CLVARLEN_SUCCESS, "valid_lens > max_seqlen accepted with checks on");
    tu_clbuf_untouched(ctx, &d_packed, "pack valid_lens");

    /* unpack with src_index out of range */
    static const int64_t bad_src[2] = {0, 18};
    tu_clbuf d_bs = tu_clbuf_make(ctx, sizeof bad_src, 8, bad_src);
    EXPECT_DEVICE_ERROR(ctx, clvarlen_cl_unpack(ctx, F32, 3, d->rows.mem, 0, 0, 2, d_bs.mem,
                                                d_bs.off, 3, 6, NULL, d->big.mem, d->big.off, 0, 0,
                                                NULL, NULL),
                        CLVARLEN_ERROR_INDEX_OUT_OF_RANGE, "unpack src_index 18");
    tu_clbuf_untouched(ctx, &d->big, "unpack");
    tu_clbuf *mine[] = {&d_kv, &d_q, &d_sl, &d_total, &d_nq, &d_valid, &d_packed, &d_pcu, &d_tl, &d_bs};
    for (size_t i = 0; i < sizeof mine / sizeof mine[0]; i++)
        tu_clbuf_free(mine[i]);
}

static void devchk_still_works(clvarlen_context *ctx, devchk_bufs *d)
{
    static const int32_t lengths[3] = {5, 7, 6};
    /* The context still works after the errors: the flag was reset. */
    SEG_OK(clvarlen_cl_token_maps(ctx, d->good.mem, d->good.off, 3, 18, NULL, 0, d->a.mem, d->a.off,
                                  d->b.mem, d->b.off, 0, NULL, NULL),
           "maps after errors");
    int32_t want_sid[18], want_pos[18];
    ref_token_maps(devchk_good_cu, 3, NULL, want_sid, want_pos);
    tu_assert_i32_eq(tu_clbuf_fetch(ctx, &d->a, "maps after errors"), want_sid, 18,
                     "seq_id after errors");
    tu_clbuf d_cu2 = tu_clbuf_make(ctx, 4 * 4, 0, NULL);
    tu_clbuf d_len = tu_clbuf_make(ctx, sizeof lengths, 0, lengths);
    SEG_OK(clvarlen_cl_cu_seqlens_from_lengths(ctx, d_len.mem, 0, 3, d_cu2.mem, 0, 0, NULL, NULL),
           "cu after errors");
    tu_assert_i32_eq(tu_clbuf_fetch(ctx, &d_cu2, "cu after errors"), devchk_good_cu, 4,
                     "cu after errors");
    tu_clbuf *mine[] = {&d_cu2, &d_len};
    for (size_t i = 0; i < sizeof mine / sizeof mine[0]; i++)
        tu_clbuf_free(mine[i]);
}

START_TEST(clm_device_checks)
{
    clvarlen_context *ctx = checked_context();
    static const int32_t decreasing[4] = {0, 12, 5, 18}, not_zero[4] = {3, 5, 12, 18};
    float rows[18 * 3];
    for (int i = 0; i < 54; i++)
        rows[i] = (float)i;
    devchk_bufs d;
    d.good = tu_clbuf_make(ctx, sizeof devchk_good_cu, 4, devchk_good_cu);
    d.dec = tu_clbuf_make(ctx, sizeof decreasing, 4, decreasing);
    d.nz = tu_clbuf_make(ctx, sizeof not_zero, 4, not_zero);
    d.rows = tu_clbuf_make(ctx, sizeof rows, 0, rows);
    d.a = tu_clbuf_make(ctx, 18 * 4, 8, NULL);
    d.b = tu_clbuf_make(ctx, 18 * 4, 8, NULL);
    d.big = tu_clbuf_make(ctx, sizeof rows, 16, NULL);

    devchk_maps_lengths(ctx, &d);
    devchk_gather_scatter(ctx, &d);
    devchk_cp(ctx, &d);
    devchk_capacity(ctx, &d);
    devchk_still_works(ctx, &d);

    tu_clbuf *all[] = {&d.good, &d.dec, &d.nz, &d.rows, &d.a, &d.b, &d.big};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        tu_clbuf_free(all[i]);
    clvarlen_context_destroy(ctx);
}
END_TEST

/* clvarlen_context_create_cl takes in-order queues only; a queue must belong to the device. */
START_TEST(clm_create_cl_queues)
{
    clvarlen_context *ctx = seg_ctx;
    cl_context c = NULL;
    cl_device_id dev = NULL;
    ck_assert_int_eq(clvarlen_context_get_cl(ctx, &c, &dev, NULL), CLVARLEN_SUCCESS);
    cl_int err = CL_SUCCESS;
    cl_command_queue ooo =
        clCreateCommandQueue(c, dev, CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE, &err);
    clvarlen_context *made = (clvarlen_context *)0x1;
    if (err == CL_SUCCESS) {
        clvarlen_status st = clvarlen_context_create_cl(c, dev, ooo, NULL, &made);
        tu_check(st == CLVARLEN_ERROR_UNSUPPORTED, "out-of-order queue: got %s",
                 clvarlen_status_name(st));
        tu_check(strstr(clvarlen_last_error(NULL), "in-order") != NULL, "message: %s",
                 clvarlen_last_error(NULL));
        tu_check(made == (clvarlen_context *)0x1, "context written on error");
        clReleaseCommandQueue(ooo);
    } /* else the device has no out-of-order queues: nothing to reject */
    cl_command_queue inq = clCreateCommandQueue(c, dev, 0, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    clvarlen_context *ok = NULL;
    ck_assert_int_eq(clvarlen_context_create_cl(c, dev, inq, NULL, &ok), CLVARLEN_SUCCESS);
    int32_t lengths[3] = {5, 7, 6}, cu[4];
    ck_assert_int_eq(clvarlen_cu_seqlens_from_lengths(ok, lengths, 3, cu), CLVARLEN_SUCCESS);
    ck_assert_int_eq(cu[3], 18);
    clvarlen_context_destroy(ok);
    clReleaseCommandQueue(inq);
}
END_TEST

START_TEST(clm_capacity_without_checks)
{
    /* Device checks off: an output too small is never overrun, the call does not block or
     * fail, and the device-side total tells the caller the size it needs. */
    clvarlen_context *ctx = seg_ctx;
    static const int32_t kv[2] = {9, 4}, q[2] = {3, 4}, valid[3] = {4, 4, 4};
    float rows[18 * 3];
    for (int i = 0; i < 54; i++)
        rows[i] = (float)i;
    tu_clbuf d_kv = tu_clbuf_make(ctx, sizeof kv, 0, kv);
    tu_clbuf d_q = tu_clbuf_make(ctx, sizeof q, 0, q);
    tu_clbuf d_sl = tu_clbuf_make(ctx, 6 * 4, 4, NULL);
    tu_clbuf d_total = tu_clbuf_make(ctx, 8, 8, NULL);
    SEG_OK(clvarlen_cl_seqlens_expand(ctx, d_kv.mem, 0, d_q.mem, 0, 0, 2, NULL, 0, 0, 0, 0, 6,
                                      d_sl.mem, d_sl.off, NULL, 0, 0, d_total.mem, d_total.off, 0,
                                      NULL, NULL),
           "seqlens_expand over capacity, unchecked");
    int64_t total;
    memcpy(&total, tu_clbuf_fetch(ctx, &d_total, "expand total"), 8);
    ck_assert_int_eq(total, 7);
    /* The guard bytes after the 6 rows are intact (tu_clbuf_fetch checks them); the rows within
     * capacity are either all written, or all left as they were. */
    const unsigned char *sl = tu_clbuf_fetch(ctx, &d_sl, "expand rows beyond capacity");
    static const int32_t want[6] = {7, 8, 9, 1, 2, 3};
    int written = memcmp(sl, want, sizeof want) == 0, untouched = 1;
    for (size_t i = d_sl.off; i < d_sl.off + d_sl.bytes; i++)
        untouched &= d_sl.host[i] == tu_clbuf_pattern(i);
    tu_check(written || untouched, "seqlens_expand over capacity: rows partly written");

    tu_clbuf d_rows = tu_clbuf_make(ctx, sizeof rows, 0, rows);
    tu_clbuf d_valid = tu_clbuf_make(ctx, sizeof valid, 0, valid);
    tu_clbuf d_packed = tu_clbuf_make(ctx, 11 * 3 * 4, 16, NULL);
    tu_clbuf d_pcu = tu_clbuf_make(ctx, 4 * 4, 4, NULL);
    SEG_OK(clvarlen_cl_pack(ctx, F32, 3, d_rows.mem, 0, 0, 3, 6, d_valid.mem, 0, NULL, 0, 11,
                            d_packed.mem, d_packed.off, d_pcu.mem, d_pcu.off, NULL, 0,
                            d_total.mem, d_total.off, 0, NULL, NULL),
           "pack over capacity, unchecked");
    memcpy(&total, tu_clbuf_fetch(ctx, &d_total, "pack total"), 8);
    ck_assert_int_eq(total, 12);
    tu_clbuf_untouched(ctx, &d_packed, "pack over capacity writes no rows");
    tu_clbuf_untouched(ctx, &d_pcu, "pack over capacity writes no cu_seqlens");
    tu_clbuf *all[] = {&d_kv, &d_q, &d_sl, &d_total, &d_rows, &d_valid, &d_packed, &d_pcu};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        tu_clbuf_free(all[i]);
}
END_TEST

void seg_add_cl_cases(Suite *s)
{
    TCase *tc = tcase_create("cl-mem");
    tcase_add_checked_fixture(tc, seg_setup, seg_teardown);
    tcase_set_timeout(tc, SEG_TIMEOUT);
    tcase_add_test(tc, clm_cu_lengths_maps);
    tcase_add_test(tc, clm_pack_unpack);
    tcase_add_test(tc, clm_gather_scatter);
    tcase_add_test(tc, clm_scatter_accumulate);
    tcase_add_test(tc, clm_seqlens_expand);
    tcase_add_test(tc, clm_cp);
    tcase_add_test(tc, clm_gen_seq_lens_same_as_cpu);
    tcase_add_test(tc, clm_no_opencl_and_offsets);
    tcase_add_test(tc, clm_capacity_without_checks);
    tcase_add_test(tc, clm_create_cl_queues);
    suite_add_tcase(s, tc);

    tc = tcase_create("device-checks");
    tcase_set_timeout(tc, SEG_TIMEOUT);
    tcase_add_test(tc, clm_device_checks);
    suite_add_tcase(s, tc);
}
