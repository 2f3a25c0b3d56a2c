/* The fuzz target's segment entry points (SPEC 2): maps, pack/unpack, rows,
 * seqlens_expand, gen_seq_lens. The CP entry points are in fuzz-cp.c. Each op
 * decodes hostile arguments, notes what the contract says must fail, makes
 * the call, and on success marks the bytes it may write (tests/fuzz/fuzz.h). */
#include "fuzz.h"

#include <string.h>

static const clvarlen_dtype all_dtypes[] = {
    CLVARLEN_DTYPE_F32, CLVARLEN_DTYPE_F16, CLVARLEN_DTYPE_BF16, CLVARLEN_DTYPE_F64,
    CLVARLEN_DTYPE_I32, CLVARLEN_DTYPE_I64, CLVARLEN_DTYPE_U8,
};

#define DONE(c, st) (fz_after_call((c), (st)), (st))

/* Small non-negative int32 values, sometimes negative or huge. */
static void fill_small32(fz_reader *r, int32_t *v, int64_t n, int32_t max)
{
    if (!v)
        return;
    for (int64_t i = 0; i < n; i++) {
        uint8_t b = fz_u8(r);
        v[i] = b < 240 ? (int32_t)(max > 0 ? b % (max + 1) : 0) : fz_count32(r, max);
    }
}

/* cu_seqlens valid per SPEC 0 (total < 0: any last entry). */
static int cu_valid(const int32_t *cu, int64_t n, int64_t total)
{
    if (!cu || n < 0 || cu[0] != 0)
        return 0;
    for (int64_t s = 0; s < n; s++)
        if (cu[s + 1] < cu[s])
            return 0;
    return total < 0 || cu[n] == total;
}

static clvarlen_status op_cu_from_lengths(fz_call *c)
{
    int64_t n = fz_count(c->r, 40);
    fz_bad_size(c, n < 0, "negative n");
    int32_t *lengths = fz_buffer(c, "lengths", FZ_IN, (fz_i128)n * 4, 32);
    int32_t *cu = fz_buffer(c, "cu_seqlens", FZ_OUT, n >= 0 ? ((fz_i128)n + 1) * 4 : 0, 32);
    if (c->skip)
        return FZ_NOT_CALLED;
    fz_required(c, cu, 1, "NULL cu_seqlens");
    fz_required(c, lengths, n > 0, "NULL lengths");
    int64_t nl = fz_n(c, lengths, 4, n);
    fill_small32(c->r, lengths, nl, 30);
    int64_t sum = 0;
    for (int64_t i = 0; lengths && i < nl; i++) {
        fz_must_fail(c, lengths[i] < 0, "negative length");
        sum += lengths[i];
    }
    fz_must_fail(c, sum > INT32_MAX, "lengths sum beyond INT32_MAX");
    fz_before_call(c, 1);
    clvarlen_status st = clvarlen_cu_seqlens_from_lengths(c->ctx, lengths, n, cu);
    fz_allow(c, cu, 0, ((fz_i128)n + 1) * 4);
    return DONE(c, st);
}

static clvarlen_status op_lengths_from_cu(fz_call *c)
{
    int64_t n = fz_count(c->r, 40);
    fz_bad_size(c, n < 0, "negative n");
    int32_t *cu = fz_buffer(c, "cu_seqlens", FZ_IN, n >= 0 ? ((fz_i128)n + 1) * 4 : 0, 32);
    int32_t *lengths = fz_buffer(c, "lengths", FZ_OUT, (fz_i128)n * 4, 32);
    if (c->skip)
        return FZ_NOT_CALLED;
    fz_required(c, cu, 1, "NULL cu_seqlens");
    fz_required(c, lengths, n > 0, "NULL lengths");
    int64_t ncu = fz_n(c, cu, 4, (fz_i128)n + 1) - 1;
    fz_fill_cu(c->r, cu, ncu, fz_count(c->r, 100));
    fz_must_fail(c, cu && !cu_valid(cu, ncu, -1), "invalid cu_seqlens");
    fz_before_call(c, 1);
    clvarlen_status st = clvarlen_lengths_from_cu_seqlens(c->ctx, cu, n, lengths);
    fz_allow(c, lengths, 0, (fz_i128)n * 4);
    return DONE(c, st);
}

static clvarlen_status op_token_maps(fz_call *c)
{
    fz_reader *r = c->r;
    int64_t n = fz_count(r, 20);
    int64_t total = fz_count(r, 80);
    fz_bad_size(c, n < 0 || total < 0, "negative size");
    fz_must_fail(c, total > INT32_MAX, "total beyond int32 cu_seqlens");
    int32_t *cu = fz_buffer(c, "cu_seqlens", FZ_IN, n >= 0 ? ((fz_i128)n + 1) * 4 : 0, 32);
    int32_t *offsets = fz_buffer(c, "offsets", FZ_IN, (fz_i128)n * 4, 3);
    int32_t *seq_id = fz_buffer(c, "seq_id", FZ_OUT, (fz_i128)total * 4, 4);
    int32_t *pos = fz_buffer(c, "pos", FZ_OUT, (fz_i128)total * 4, 4);
    if (c->skip)
        return FZ_NOT_CALLED;
    fz_required(c, cu, 1, "NULL cu_seqlens");
    fz_must_fail(c, !seq_id && !pos, "seq_id and pos both NULL");
    int64_t ncu = fz_n(c, cu, 4, (fz_i128)n + 1) - 1;
    fz_fill_cu(r, cu, ncu, total);
    fz_must_fail(c, cu && !cu_valid(cu, ncu, total), "invalid cu_seqlens");
    fill_small32(r, offsets, fz_n(c, offsets, 4, n), 1000);
    fz_before_call(c, 1);
    clvarlen_status st = clvarlen_token_maps(c->ctx, cu, n, total, offsets, seq_id, pos);
    fz_allow(c, seq_id, 0, (fz_i128)total * 4);
    fz_allow(c, pos, 0, (fz_i128)total * 4);
    return DONE(c, st);
}

/* pack and pack_masked share everything but the row selection. */
static clvarlen_status pack_common(fz_call *c, int masked)
{
    fz_reader *r = c->r;
    clvarlen_dtype dt = fz_dtype(r, all_dtypes, 7);
    int64_t row = fz_count(r, 6), stride = fz_stride(r, row);
    int64_t batch = fz_count(r, 6), max_seqlen = fz_count(r, 9);
    int64_t capacity = fz_count(r, 40);
    fz_i128 prows = (fz_i128)batch * max_seqlen;
    fz_bad_size(c, batch < 0 || max_seqlen < 0 || capacity < 0, "negative size");
    void *padded = fz_rows(c, "padded", FZ_IN, dt, row, prows, stride, 32);
    void *sel = fz_buffer(c, masked ? "mask" : "valid_lens", FZ_IN,
                          masked ? prows : (fz_i128)batch * 4, 32);
    /* capacity only bounds the output: the harness allocates what can be written. */
    fz_i128 cap_rows = capacity < prows ? capacity : prows;
    cap_rows = cap_rows > 0 ? cap_rows : 0;
    void *packed = fz_rows(c, "packed", FZ_OUT, dt, row, cap_rows, 0, 32);
    int32_t *cu = fz_buffer(c, "cu_seqlens", FZ_OUT, batch >= 0 ? ((fz_i128)batch + 1) * 4 : 0,
                            32);
    int64_t *src_index = fz_buffer(c, "src_index", FZ_OUT, cap_rows * 8, 4);
    int64_t *total = fz_buffer(c, "total_tokens", FZ_OUT, 8, 4);
    if (c->skip)
        return FZ_NOT_CALLED;
    fz_required(c, cu, 1, "NULL cu_seqlens");
    fz_required(c, sel, prows > 0, masked ? "NULL mask" : "NULL valid_lens");
    int64_t want = 0;
    if (sel && masked) {
        uint8_t *mask = sel;
        for (int64_t i = 0; i < fz_n(c, mask, 1, prows); i++) {
            mask[i] = fz_u8(r) < 96 ? 0 : fz_u8(r) | 1;
            want += mask[i] != 0;
        }
    } else if (sel) {
        int32_t *vl = sel;
        int64_t nb = fz_n(c, vl, 4, batch);
        fill_small32(r, vl, nb, (int32_t)(max_seqlen < 12 ? max_seqlen : 12));
        for (int64_t b = 0; b < nb; b++) {
            fz_must_fail(c, vl[b] < 0 || vl[b] > max_seqlen, "valid_lens outside [0, max_seqlen]");
            want += vl[b] > 0 ? vl[b] : 0;
        }
    }
    fz_required(c, padded, want > 0, "NULL padded");
    fz_required(c, packed, want > 0, "NULL packed");
    fz_must_fail(c, want > capacity, "total above capacity");
    fz_before_call(c, 1);
    clvarlen_status st =
        masked ? clvarlen_pack_masked(c->ctx, dt, row, padded, stride, batch, max_seqlen, sel,
                                      capacity, packed, cu, src_index, total)
               : clvarlen_pack(c->ctx, dt, row, padded, stride, batch, max_seqlen, sel, capacity,
                               packed, cu, src_index, total);
    fz_allow_tensor(c, packed, 0, want, dt, row, 0);
    fz_allow(c, cu, 0, ((fz_i128)batch + 1) * 4);
    fz_allow(c, src_index, 0, (fz_i128)want * 8);
    fz_allow(c, total, 0, 8);
    return DONE(c, st);
}

static clvarlen_status op_pack(fz_call *c)
{
    return pack_common(c, 0);
}

static clvarlen_status op_pack_masked(fz_call *c)
{
    return pack_common(c, 1);
}

/* Distinct flat indices mostly; sometimes out of range or repeated. Returns 1 if all
 * are in [0, rows) and distinct. */
static int fill_src_index(fz_reader *r, int64_t *idx, int64_t n, int64_t rows)
{
    if (!idx)
        return 1;
    int64_t start = fz_u8(r), step = 1 + fz_u8(r) % 3;
    int ok = 1;
    for (int64_t i = 0; i < n; i++) {
        uint8_t b = fz_u8(r);
        idx[i] = rows > 0 ? (start + i * step) % rows : 0;
        if (b >= 244)
            idx[i] = b % 4 == 0 ? -1 : b % 4 == 1 ? rows : b % 4 == 2 ? INT64_MAX : INT64_MIN;
        else if (b >= 236 && i > 0)
            idx[i] = idx[i - 1];
        if (idx[i] < 0 || idx[i] >= rows)
            ok = 0;
        for (int64_t j = 0; j < i && ok; j++)
            if (idx[j] == idx[i])
                ok = 0;
    }
    return ok;
}

static clvarlen_status op_unpack(fz_call *c)
{
    fz_reader *r = c->r;
    clvarlen_dtype dt = fz_dtype(r, all_dtypes, 7);
    int64_t row = fz_count(r, 6), pstride = fz_stride(r, row);
    int64_t total = fz_count(r, 30);
    int64_t batch = fz_count(r, 6), max_seqlen = fz_count(r, 9);
    int64_t ostride = fz_stride(r, row);
    fz_i128 prows = (fz_i128)batch * max_seqlen;
    fz_bad_size(c, total < 0 || batch < 0 || max_seqlen < 0, "negative size");
    void *packed = fz_rows(c, "packed", FZ_IN, dt, row, total, pstride, 32);
    int64_t *src_index = fz_buffer(c, "src_index", FZ_IN, (fz_i128)total * 8, 32);
    void *pad = fz_buffer(c, "pad_value", FZ_IN, clvarlen_dtype_size(dt), 3);
    void *padded = fz_rows(c, "padded", FZ_OUT, dt, row, prows, ostride, 32);
    if (c->skip)
        return FZ_NOT_CALLED;
    fz_required(c, packed, total > 0, "NULL packed");
    fz_required(c, src_index, total > 0, "NULL src_index");
    fz_required(c, padded, prows > 0, "NULL padded");
    int ok = fill_src_index(r, src_index, fz_n(c, src_index, 8, total),
                            prows > INT64_MAX ? INT64_MAX : (int64_t)prows);
    fz_must_fail(c, !ok, "src_index out of range or repeated");
    fz_before_call(c, 1);
    clvarlen_status st = clvarlen_unpack(c->ctx, dt, row, packed, pstride, total, src_index,
                                         batch, max_seqlen, pad, padded, ostride);
    fz_allow_tensor(c, padded, 0, (int64_t)prows, dt, row, ostride);
    return DONE(c, st);
}

static clvarlen_status op_gather_rows(fz_call *c)
{
    fz_reader *r = c->r;
    clvarlen_dtype dt = fz_dtype(r, all_dtypes, 7);
    int64_t row = fz_count(r, 8), src_rows = fz_count(r, 40), sstride = fz_stride(r, row);
    int64_t n_index = fz_count(r, 40), dstride = fz_stride(r, row);
    fz_bad_size(c, n_index < 0, "negative n_index");
    void *src = fz_rows(c, "src", FZ_IN, dt, row, src_rows, sstride, 32);
    int32_t *index = fz_buffer(c, "index", FZ_IN, (fz_i128)n_index * 4, 32);
    void *dst = fz_rows(c, "dst", FZ_OUT, dt, row, n_index, dstride, 32);
    if (c->skip)
        return FZ_NOT_CALLED;
    fz_required(c, index, n_index > 0, "NULL index");
    fz_required(c, dst, n_index > 0 && row > 0, "NULL dst");
    int64_t ni = fz_n(c, index, 4, n_index);
    fz_fill_index32(r, index, ni, 0, src_rows);
    for (int64_t m = 0; index && m < ni; m++)
        fz_must_fail(c, index[m] < -1 || index[m] >= src_rows, "index out of range");
    fz_before_call(c, 1);
    clvarlen_status st = clvarlen_gather_rows(c->ctx, dt, row, src, src_rows, sstride, index,
                                              n_index, dst, dstride);
    fz_allow_tensor(c, dst, 0, n_index, dt, row, dstride);
    return DONE(c, st);
}

static clvarlen_status op_scatter_rows(fz_call *c)
{
    fz_reader *r = c->r;
    clvarlen_dtype dt = fz_dtype(r, all_dtypes, 7);
    int64_t row = fz_count(r, 8), sstride = fz_stride(r, row), n_index = fz_count(r, 40);
    int64_t dst_rows = fz_count(r, 40), dstride = fz_stride(r, row);
    uint8_t mb = fz_u8(r);
    clvarlen_scatter_mode mode = (clvarlen_scatter_mode)(mb < 250 ? mb % 2 : mb % 2 ? -1 : 2);
    unsigned flags = fz_u8(r);
    flags = flags < 250 ? flags % 4 : flags;
    fz_must_fail(c, mode != CLVARLEN_SCATTER_OVERWRITE && mode != CLVARLEN_SCATTER_ACCUMULATE,
                 "unknown mode");
    fz_must_fail(c, mode == CLVARLEN_SCATTER_ACCUMULATE && dt != CLVARLEN_DTYPE_F32 &&
                    dt != CLVARLEN_DTYPE_F16 && dt != CLVARLEN_DTYPE_BF16 &&
                    dt != CLVARLEN_DTYPE_I32, "accumulate of a dtype it does not take");
    fz_bad_size(c, n_index < 0, "negative n_index");
    void *src = fz_rows(c, "src", FZ_IN, dt, row, n_index, sstride, 32);
    int32_t *index = fz_buffer(c, "index", FZ_IN, (fz_i128)n_index * 4, 32);
    void *dst = fz_rows(c, "dst", FZ_INOUT, dt, row, dst_rows, dstride, 32);
    if (c->skip)
        return FZ_NOT_CALLED;
    fz_required(c, index, n_index > 0, "NULL index");
    int64_t ni = fz_n(c, index, 4, n_index);
    fz_fill_index32(r, index, ni, 0, dst_rows);
    for (int64_t m = 0; index && m < ni; m++) {
        fz_must_fail(c, index[m] < -1 || index[m] >= dst_rows, "index out of range");
        for (int64_t j = 0; j < m && mode == CLVARLEN_SCATTER_OVERWRITE; j++)
            fz_must_fail(c, index[m] >= 0 && index[j] == index[m], "repeated overwrite index");
    }
    fz_before_call(c, 1);
    clvarlen_status st = clvarlen_scatter_rows(c->ctx, dt, row, src, sstride, index, n_index, dst,
                                               dst_rows, dstride, mode, flags);
    if (flags & CLVARLEN_SCATTER_ZERO_REST)
        fz_allow_tensor(c, dst, 0, dst_rows, dt, row, dstride);
    for (int64_t m = 0; index && m < ni; m++)
        fz_allow_tensor(c, dst, index[m], 1, dt, row, dstride);
    return DONE(c, st);
}

static clvarlen_status op_seqlens_expand(fz_call *c)
{
    fz_reader *r = c->r;
    int64_t n = fz_count(r, 12), page_cols = fz_count(r, 6), col_limit = fz_count(r, 6);
    int64_t pstride = fz_stride(r, page_cols), capacity = fz_count(r, 60);
    int32_t uniform = fz_count32(r, 5);
    int64_t cols = col_limit ? col_limit : page_cols, ostride = fz_stride(r, cols);
    fz_bad_size(c, n < 0 || capacity < 0, "negative size");
    int32_t *kv = fz_buffer(c, "kv_len", FZ_IN, (fz_i128)n * 4, 32);
    int32_t *q = fz_buffer(c, "q_len", FZ_IN, (fz_i128)n * 4, 3);
    int32_t *pt = fz_rows(c, "page_table", FZ_IN, CLVARLEN_DTYPE_I32, page_cols, n, pstride, 3);
    fz_required(c, kv, n > 0, "NULL kv_len");
    int64_t nk = fz_n(c, kv, 4, n), nq = fz_n(c, q, 4, n);
    fill_small32(r, kv, nk, 12);
    fill_small32(r, q, nq, 5);
    int64_t want = 0;
    for (int64_t s = 0; s < nk && (!q || s < nq); s++) {
        int64_t qs = q ? q[s] : uniform;
        fz_must_fail(c, kv[s] < 0 || qs < 0, "negative kv_len or q_len");
        want += qs > 0 ? qs : 0;
    }
    fz_must_fail(c, want > capacity, "sum q above capacity");
    /* capacity only bounds the outputs: the harness allocates what can be written. */
    int64_t cap_rows = capacity < want ? capacity : want;
    int32_t *se = fz_buffer(c, "seqlens_expanded", FZ_OUT, (fz_i128)cap_rows * 4, 4);
    int32_t *pto = NULL;
    if (pt) {
        fz_bad_size(c, page_cols < 0, "negative page_cols");
        fz_must_fail(c, col_limit < 0 || col_limit > page_cols, "col_limit outside [0, cols]");
        pto = fz_rows(c, "page_table_out", FZ_OUT, CLVARLEN_DTYPE_I32, cols, cap_rows, ostride,
                      16);
    }
    int64_t *total = fz_buffer(c, "total", FZ_OUT, 8, 4);
    if (c->skip)
        return FZ_NOT_CALLED;
    fz_before_call(c, 1);
    clvarlen_status st = clvarlen_seqlens_expand(c->ctx, kv, q, uniform, n, pt, page_cols, pstride,
                                                 col_limit, capacity, se, pto, ostride, total);
    fz_allow(c, se, 0, (fz_i128)want * 4);
    fz_allow_tensor(c, pto, 0, want, CLVARLEN_DTYPE_I32, cols, ostride);
    fz_allow(c, total, 0, 8);
    return DONE(c, st);
}

static clvarlen_status op_gen_seq_lens(fz_call *c)
{
    fz_reader *r = c->r;
    uint64_t seed = fz_u64(r);
    int32_t world = fz_count32(r, 4), n = fz_count32(r, 16);
    int64_t total = fz_count(r, 200);
    total = fz_u8(r) < 200 && total >= 0 && total < (1 << 24) ? total * (1 + fz_u8(r)) : total;
    fz_must_fail(c, world < 1 || n < 1, "world or n below 1");
    fz_must_fail(c, total < 0 || total > (1 << 24), "total outside [0, 2^24]");
    int32_t *out = fz_buffer(c, "out", FZ_OUT, (fz_i128)world * n * 4, 32);
    if (c->skip)
        return FZ_NOT_CALLED;
    fz_required(c, out, world > 0 && n > 0, "NULL out");
    fz_before_call(c, 1);
    clvarlen_status st = clvarlen_gen_seq_lens(c->ctx, seed, world, n, total, out);
    fz_allow(c, out, 0, (fz_i128)world * n * 4);
    if (st == CLVARLEN_SUCCESS && out && fz_n(c, out, 4, (fz_i128)world * n) == (int64_t)world * n) {
        for (int32_t w = 0; w < world; w++) {
            int64_t sum = 0;
            for (int32_t i = 0; i < n; i++) {
                if (out[(int64_t)w * n + i] < 0)
                    fz_fail(c, "negative length %d", out[(int64_t)w * n + i]);
                sum += out[(int64_t)w * n + i];
            }
            if (sum != total)
                fz_fail(c, "row %d sums to %lld, not %lld", w, (long long)sum, (long long)total);
        }
    }
    return DONE(c, st);
}

const fz_op fz_segment_ops[] = {
    {"cu_seqlens_from_lengths", op_cu_from_lengths},
    {"lengths_from_cu_seqlens", op_lengths_from_cu},
    {"token_maps", op_token_maps},
    {"pack", op_pack},
    {"pack_masked", op_pack_masked},
    {"unpack", op_unpack},
    {"gather_rows", op_gather_rows},
    {"scatter_rows", op_scatter_rows},
    {"seqlens_expand", op_seqlens_expand},
    {"gen_seq_lens", op_gen_seq_lens},
};
const int fz_n_segment_ops = (int)(sizeof fz_segment_ops / sizeof fz_segment_ops[0]);
