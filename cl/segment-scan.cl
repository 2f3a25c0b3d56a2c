/* segment-scan.cl: the segment family's single-work-group scans (SPEC 2),
 * joined after cv-shared.h and common.clh: lengths -> cu_seqlens with total
 * and capacity, mask counts and indices, the CP plan's offset arrays, each
 * validating in a first pass and writing in a second so a failed check
 * writes nothing; and seqlens_expanded with the page-table expansion in one
 * launch. Built per work-group size (-DCV_SCAN_WG).
 */
#pragma OPENCL FP_CONTRACT OFF

/*
 * cu[0..n] = exclusive scan of len (n + 1 entries). First pass: every length
 * in [0, max_len] (max_len < 0: no bound) and the total within int32, else
 * CV_CHECK_VALUE; the total goes to scratch[0] (-1 when invalid) and to
 * total_out (not with checks on when it is over capacity); a total over
 * capacity (>= 0) raises CV_CHECK_CAPACITY. cu is written only when
 * everything holds.
 */
__kernel __attribute__((reqd_work_group_size(CV_SCAN_WG, 1, 1))) void
segment_scan_lengths(__global const int *len, ulong len_off, int n, int max_len, long capacity,
                     __global int *cu, ulong cu_off, __global long *total_out, ulong total_off,
                     __global long *scratch, __global int *flag, int check)
{
    __local long tmp[CV_SCAN_WG];
    CV_SKIP_ON_FLAG(flag, check);
    uint lid = get_local_id(0);
    __global const int *l = CV_CPTR(int, len, len_off);
    long b0, b1;
    cv_lane_block(n, &b0, &b1);
    long sum = 0;
    for (long i = b0; i < b1; i++) {
        int v = l[i];
        if (v < 0 || (max_len >= 0 && v > max_len)) {
            sum = CV_BAD_SUM;
            break;
        }
        sum += v;
    }
    long total;
    long run = cv_wg_exclusive(sum, tmp, &total);
    if (total > INT_MAX) {
        if (lid == 0) {
            cv_flag(flag, CV_CHECK_VALUE);
            if (scratch)
                scratch[0] = -1;
        }
        return;
    }
    bool over = capacity >= 0 && total > capacity;
    if (lid == 0) {
        if (scratch)
            scratch[0] = total;
        /* unchecked, the total tells the caller the size needed; checked,
         * the call fails and writes no output */
        if (total_out && !(check && over))
            *CV_PTR(long, total_out, total_off) = total;
    }
    if (over) {
        if (lid == 0)
            cv_flag(flag, CV_CHECK_CAPACITY);
        return;
    }
    __global int *c = CV_PTR(int, cu, cu_off);
    for (long i = b0; i < b1; i++) {
        c[i] = (int)run;
        run += l[i];
    }
    if (lid == 0)
        c[n] = (int)total;
}

/*
 * CP plan offsets: per document, head = chunk rank, tail = chunk 2W-1-rank;
 * local_cu (required), head_cu and tail_cu (may be NULL) are their
 * exclusive scans. The local total goes to scratch[0] and total_out; a total
 * over capacity (>= 0) raises CV_CHECK_CAPACITY and writes nothing else.
 * Head and tail sums stay below 2^31, so both are scanned packed in a long.
 */
__kernel __attribute__((reqd_work_group_size(CV_SCAN_WG, 1, 1))) void
segment_cp_scan(__global const int *cu, ulong cu_off, int n, int world, int rank, long capacity,
                __global int *local_cu, ulong local_off, __global int *head_cu, ulong head_off,
                __global int *tail_cu, ulong tail_off, __global long *total_out, ulong total_off,
                __global long *scratch, __global int *flag, int check)
{
    __local long tmp[CV_SCAN_WG];
    CV_SKIP_ON_FLAG(flag, check);
    uint lid = get_local_id(0);
    int C = 2 * world;
    __global const int *g = CV_CPTR(int, cu, cu_off);
    long b0, b1;
    cv_lane_block(n, &b0, &b1);
    long sum = 0;
    for (long s = b0; s < b1; s++)
        sum += cv_cp_parts(g, (int)s, C, rank);
    long packed;
    long run = cv_wg_exclusive(sum, tmp, &packed);
    long total = (packed >> 32) + (packed & 0xffffffffL);
    bool over = capacity >= 0 && total > capacity;
    if (lid == 0) {
        if (scratch)
            scratch[0] = total;
        /* unchecked, the total tells the caller the size needed; checked,
         * the call fails and writes no output */
        if (total_out && !(check && over))
            *CV_PTR(long, total_out, total_off) = total;
    }
    if (over) {
        if (lid == 0)
            cv_flag(flag, CV_CHECK_CAPACITY);
        return;
    }
    __global int *lc = CV_PTR(int, local_cu, local_off);
    __global int *hc = head_cu ? CV_PTR(int, head_cu, head_off) : 0;
    __global int *tc = tail_cu ? CV_PTR(int, tail_cu, tail_off) : 0;
    /* entries b0..b1-1 from this lane's running sum, entry n by lane 0 */
    for (long s = b0; s <= b1; s++) {
        bool last = s == b1;
        if (last && !(lid == 0))
            break;
        long v = last ? packed : run;
        long e = last ? n : s;
        int h = (int)(v >> 32), t = (int)(v & 0xffffffffL);
        lc[e] = h + t;
        if (hc)
            hc[e] = h;
        if (tc)
            tc[e] = t;
        if (!last)
            run += cv_cp_parts(g, (int)s, C, rank);
    }
}

/* Pack, mask form: kept elements per batch row (one work-group per row). */
__kernel __attribute__((reqd_work_group_size(CV_SCAN_WG, 1, 1))) void
segment_mask_count(__global const uchar *mask, ulong mask_off, int batch, long S,
                   __global int *counts, ulong counts_off)
{
    __local long tmp[CV_SCAN_WG];
    uint lid = get_local_id(0);
    long b0, b1;
    cv_lane_block(S, &b0, &b1);
    for (int b = get_group_id(0); b < batch; b += get_num_groups(0)) {
        __global const uchar *m = mask + mask_off + (ulong)b * (ulong)S;
        long k = 0;
        for (long s = b0; s < b1; s++)
            k += m[s] != 0;
        long total;
        (void)cv_wg_exclusive(k, tmp, &total);
        if (lid == 0)
            CV_PTR(int, counts, counts_off)[b] = (int)total;
    }
}

/* Pack, mask form: src_index[cu[b] + rank] = b * S + s for every kept s, in order. */
__kernel __attribute__((reqd_work_group_size(CV_SCAN_WG, 1, 1))) void
segment_mask_index(__global const uchar *mask, ulong mask_off, int batch, long S,
                   __global const int *cu, ulong cu_off, __global const long *scratch,
                   long capacity, __global long *src_index, ulong si_off, __global int *flag,
                   int check)
{
    __local long tmp[CV_SCAN_WG];
    CV_SKIP_ON_FLAG(flag, check);
    long total = scratch[0];
    if (total < 0 || total > capacity)
        return;
    __global const int *c = CV_CPTR(int, cu, cu_off);
    __global long *si = CV_PTR(long, src_index, si_off);
    long b0, b1;
    cv_lane_block(S, &b0, &b1);
    for (int b = get_group_id(0); b < batch; b += get_num_groups(0)) {
        __global const uchar *m = mask + mask_off + (ulong)b * (ulong)S;
        long k = 0;
        for (long s = b0; s < b1; s++)
            k += m[s] != 0;
        long row_total;
        long t = c[b] + cv_wg_exclusive(k, tmp, &row_total);
        for (long s = b0; s < b1; s++)
            if (m[s] != 0 && t < total)
                si[t++] = (long)b * S + s;
    }
}

/* A page-table row of `units` T copied by `lpr` lanes, each loading up to four
 * (lpr apart) before it stores them, so the loads are in flight together. */
#define CV_DEFINE_EXPAND_ROW(name, T)                                                      \
    inline void name(__global T *d, __global const T *s, int units, uint lane, uint lpr)   \
    {                                                                                      \
        for (int c0 = lane; c0 < units; c0 += 4 * lpr) {                                   \
            T v[4];                                                                        \
            _Pragma("unroll") for (int k = 0; k < 4; k++)                                  \
            {                                                                              \
                int c = c0 + k * (int)lpr;                                                 \
                if (c < units)                                                             \
                    v[k] = s[c];                                                           \
            }                                                                              \
            _Pragma("unroll") for (int k = 0; k < 4; k++)                                  \
            {                                                                              \
                int c = c0 + k * (int)lpr;                                                 \
                if (c < units)                                                             \
                    d[c] = v[k];                                                           \
            }                                                                              \
        }                                                                                  \
    }
CV_DEFINE_EXPAND_ROW(cv_expand_row, int)
CV_DEFINE_EXPAND_ROW(cv_expand_row4, int4)

/*
 * One launch: every work-group derives the total (n * uniform_q, or the sum
 * of q_len over lane blocks with one scan, which also gives each lane the
 * first output row of its sequences) and maps blocks of blk_rows (<=
 * CV_SCAN_WG, fewer when page rows are long) output rows to (sequence, j)
 * in local memory. seqlens[row] = max(kv - q + 1 + j, 0);
 * page_out row <- page_table row s (col_limit columns, page_lpr lanes per
 * row; as int4 units when page_vec says rows and offsets are 16-byte
 * aligned). The total goes to total_out; a total over capacity raises
 * CV_CHECK_CAPACITY and writes no rows. Negative q raise CV_CHECK_VALUE and
 * count as 0.
 */
__kernel __attribute__((reqd_work_group_size(CV_SCAN_WG, 1, 1))) void
segment_seqlens_expand(__global const int *kv_len, ulong kv_off, __global const int *q_len,
                       ulong q_off, int uniform_q, int n, __global const int *page_table,
                       ulong pt_off, long pt_stride, int col_limit, int page_vec, int page_lpr,
                       int blk_rows,
                       long capacity,
                       __global int *seqlens, ulong se_off, __global int *page_out,
                       ulong po_off, long out_stride, __global long *total_out,
                       ulong total_off, __global int *flag, int check)
{
    __local long tmp[CV_SCAN_WG];
    __local int row_seq[CV_SCAN_WG];
    __local int row_j[CV_SCAN_WG];
    CV_SKIP_ON_FLAG(flag, check);
    uint lid = get_local_id(0);
    __global const int *kv = CV_CPTR(int, kv_len, kv_off);
    __global const int *q = q_len ? CV_CPTR(int, q_len, q_off) : 0;
    long b0 = 0, b1 = 0, first = 0, total;
    if (q) {
        cv_lane_block(n, &b0, &b1);
        long sum = 0;
        bool bad = false;
        for (long s = b0; s < b1; s++) {
            int v = q[s];
            bad = bad || v < 0;
            sum += max(v, 0);
        }
        if (bad && get_group_id(0) == 0)
            cv_flag(flag, CV_CHECK_VALUE);
        first = cv_wg_exclusive(sum, tmp, &total);
    } else {
        total = (long)n * (long)max(uniform_q, 0);
    }
    if (get_group_id(0) == 0 && lid == 0) {
        if (total_out && !(check && total > capacity)) /* as segment_scan_lengths */
            *CV_PTR(long, total_out, total_off) = total;
        if (total > capacity)
            cv_flag(flag, CV_CHECK_CAPACITY);
    }
    if (total > capacity)
        return;
    __global int *se = seqlens ? CV_PTR(int, seqlens, se_off) : 0;
    __global int *po = page_out ? CV_PTR(int, page_out, po_off) : 0;
    __global const int *pt = page_table ? CV_CPTR(int, page_table, pt_off) : 0;
    blk_rows = clamp(blk_rows, 1, CV_SCAN_WG);
    long nblk = (total + blk_rows - 1) / blk_rows;
    for (long blk = get_group_id(0); blk < nblk; blk += get_num_groups(0)) {
        long row0 = blk * blk_rows;
        int rows = (int)min((long)blk_rows, total - row0);
        if (q) {
            long start = first;
            for (long s = b0; s < b1 && start < row0 + rows; s++) {
                long v = max(q[s], 0);
                long lo = max(start, row0), hi = min(start + v, row0 + rows);
                for (long r = lo; r < hi; r++) {
                    row_seq[r - row0] = (int)s;
                    row_j[r - row0] = (int)(r - start);
                }
                start += v;
            }
        } else if ((int)lid < rows) {
            long r = row0 + lid;
            row_seq[lid] = (int)(r / uniform_q);
            row_j[lid] = (int)(r % uniform_q);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if ((int)lid < rows && se) {
            int s = row_seq[lid];
            long qs = q ? q[s] : uniform_q;
            long v = (long)kv[s] - qs + 1 + row_j[lid];
            se[row0 + lid] = (int)max(v, 0L);
        }
        if (po && pt) {
            uint rpg = CV_SCAN_WG / page_lpr;
            uint sub = lid / page_lpr, lane = lid % page_lpr;
            for (int k = sub; k < rows; k += rpg) {
                __global const int *src = pt + (long)row_seq[k] * pt_stride;
                __global int *d = po + (row0 + k) * out_stride;
                if (page_vec) /* 16-byte aligned rows of whole int4s */
                    cv_expand_row4((__global int4 *)d, (__global const int4 *)src,
                                   col_limit / 4, lane, page_lpr);
                else
                    cv_expand_row(d, src, col_limit, lane, page_lpr);
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}

