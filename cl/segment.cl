/* segment.cl: the segment family's row kernels (SPEC 2), joined after
 * cv-shared.h and common.clh. The other segment programs are
 * segment-maps.cl (element-wise maps), segment-scan.cl (single-work-group
 * scans, seqlens_expand) and segment-gen.cl (gen_seq_lens).
 *
 * - row copies in units of CV_UNIT bytes: the generic copy (map on the
 *   source or destination side, fill rows for index -1, an optional
 *   device-side row count), pack's prefix-form rows, the CP row kernel, and
 *   the fused forms of the last two (each work-group scans up to
 *   CV_FUSE_MAX sequences into local memory, then moves rows: one launch);
 * - with -DCV_ACC=1: the generic copy and the CP row kernels adding
 *   elements of CV_DTYPE (unique destinations, f32 or int accumulators),
 *   and the ordered accumulate for repeated destinations (index order).
 *
 * Rows are spread over work-groups with `lpr` lanes per row (a power of two
 * chosen by the host from the row size), several short rows per group, each
 * lane loading up to CV_UNROLL units before storing them, and a grid-stride
 * loop over row blocks so grids stay small. Byte offsets and strides are
 * ulong; every index is bounds-checked (out of range: flag and skip).
 * Kernels taking `check` return at once when checks are on and an earlier
 * kernel raised a flag, so invalid input writes nothing.
 */
#pragma OPENCL FP_CONTRACT OFF

#ifndef CV_UNIT
#define CV_UNIT 16 /* bytes moved per lane access by the row copies */
#endif
#ifndef CV_ACC
#define CV_ACC 0 /* 1: row kernels add elements of CV_DTYPE instead of copying units */
#endif
#ifndef CV_DTYPE
#define CV_DTYPE CV_DT_F32
#endif
#ifndef CV_COPY_WG
#define CV_COPY_WG 256 /* work-group size of the ordered accumulate */
#endif
#ifndef CV_ACC_ROWS
#define CV_ACC_ROWS 16 /* destination rows per work-group in the ordered accumulate (<= 32) */
#endif
/* Sequences a fused scan + row kernel keeps in local memory (the host picks
 * the fused kernels up to this many). */
#define CV_FUSE_MAX CV_SEG_FUSE_MAX
/* Units each lane loads before it stores (bytes in flight); the host sizes
 * lanes per row by it. */
#define CV_UNROLL CV_SEG_UNROLL

#if CV_UNIT == 16
typedef uint4 cv_unit_t;
#define CV_UNIT_FILL(f) (f)
#elif CV_UNIT == 8
typedef uint2 cv_unit_t;
#define CV_UNIT_FILL(f) ((f).xy)
#elif CV_UNIT == 4
typedef uint cv_unit_t;
#define CV_UNIT_FILL(f) ((f).x)
#elif CV_UNIT == 2
typedef ushort cv_unit_t;
#define CV_UNIT_FILL(f) ((ushort)(f).x)
#else
typedef uchar cv_unit_t;
#define CV_UNIT_FILL(f) ((uchar)(f).x)
#endif

/* Element arithmetic of accumulating kernels: f32 accumulators for float
 * rows (rounded once when stored), wrapping int for i32. */
#if CV_DTYPE == CV_DT_I32
typedef int cv_acc_t;
inline cv_acc_t cv_acc_load(__global const void *p, size_t i)
{
    return ((__global const int *)p)[i];
}
inline void cv_acc_store(__global void *p, size_t i, cv_acc_t v)
{
    ((__global int *)p)[i] = v;
}
inline cv_acc_t cv_acc_add(cv_acc_t a, cv_acc_t b)
{
    return as_int(as_uint(a) + as_uint(b));
}
#define CV_ACC_ZERO 0
#else
typedef float cv_acc_t;
inline cv_acc_t cv_acc_load(__global const void *p, size_t i)
{
    return cv_load_f(p, i, CV_DTYPE);
}
inline void cv_acc_store(__global void *p, size_t i, cv_acc_t v)
{
    cv_store_f(p, i, v, CV_DTYPE);
}
inline cv_acc_t cv_acc_add(cv_acc_t a, cv_acc_t b)
{
    return a + b;
}
#define CV_ACC_ZERO 0.0f
#endif

/* cv_seq_of_token on a local-memory copy of cu_seqlens. */
inline int cv_seq_of_token_local(__local const int *cu, int n, int t)
{
    int lo = 0, hi = n;
    while (hi - lo > 1) {
        int mid = lo + ((hi - lo) >> 1);
        if (cu[mid] <= t)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* CP row `it` -> (local row *i, global row *t): over local rows, or over
 * global rows (*i = -1 where this rank owns nothing). lcu in global or
 * local memory, hence the two instances. */
#define CV_DEFINE_CP_MAP(NAME, AS, SEQ_OF)                                                   \
    inline void NAME(__global const int *g, AS const int *lcu, int n, int C, int rank,      \
                     int over_global, long it, long *i, long *t)                            \
    {                                                                                        \
        if (over_global) {                                                                   \
            int s = cv_seq_of_token(g, n, (int)it);                                          \
            int L = g[s + 1] - g[s], p = (int)(it - g[s]);                                   \
            int hs = cv_chunk_start(L, C, rank), hn = cv_chunk_len(L, C, rank);              \
            int ts = cv_chunk_start(L, C, C - 1 - rank);                                     \
            int tn = cv_chunk_len(L, C, C - 1 - rank);                                       \
            *t = it;                                                                         \
            if (p >= hs && p < hs + hn)                                                      \
                *i = (long)lcu[s] + (p - hs);                                                \
            else if (p >= ts && p < ts + tn)                                                 \
                *i = (long)lcu[s] + hn + (p - ts);                                           \
            else                                                                             \
                *i = -1;                                                                     \
        } else {                                                                             \
            int s = SEQ_OF(lcu, n, (int)it);                                                 \
            int L = g[s + 1] - g[s], k = (int)(it - lcu[s]);                                 \
            int nh = cv_chunk_len(L, C, rank);                                               \
            int p = k < nh ? cv_chunk_start(L, C, rank) + k                                  \
                           : cv_chunk_start(L, C, C - 1 - rank) + k - nh;                    \
            *i = it;                                                                         \
            *t = (long)g[s] + p;                                                             \
        }                                                                                    \
    }
CV_DEFINE_CP_MAP(cv_cp_map_global, __global, cv_seq_of_token)
CV_DEFINE_CP_MAP(cv_cp_map_local, __local, cv_seq_of_token_local)

/* Row copy by `lpr` lanes: each lane loads up to CV_UNROLL units, lpr apart,
 * then stores them, so several loads are in flight per lane. */
inline void cv_copy_row(__global uchar *dst, __global const uchar *src, int units, uint lane,
                        uint lpr)
{
    __global cv_unit_t *d = (__global cv_unit_t *)dst;
    __global const cv_unit_t *s = (__global const cv_unit_t *)src;
    for (int u0 = lane; u0 < units; u0 += lpr * CV_UNROLL) {
        cv_unit_t v[CV_UNROLL];
#pragma unroll
        for (int k = 0; k < CV_UNROLL; k++) {
            int u = u0 + k * (int)lpr;
            if (u < units)
                v[k] = s[u];
        }
#pragma unroll
        for (int k = 0; k < CV_UNROLL; k++) {
            int u = u0 + k * (int)lpr;
            if (u < units)
                d[u] = v[k];
        }
    }
}

/* dst += src element-wise (CV_ACC), or a plain copy. */
inline void cv_move_row(__global uchar *dst, __global const uchar *src, int units, uint lane,
                        uint lpr)
{
#if CV_ACC
    for (int u = lane; u < units; u += lpr)
        cv_acc_store(dst, u, cv_acc_add(cv_acc_load(dst, u), cv_acc_load(src, u)));
#else
    cv_copy_row(dst, src, units, lane, lpr);
#endif
}

/* Fills a row with the 16-byte pattern (zero with CV_ACC). */
inline void cv_fill_row(__global uchar *dst, uint4 fill, int units, uint lane, uint lpr)
{
#if CV_ACC
    for (int u = lane; u < units; u += lpr)
        cv_acc_store(dst, u, CV_ACC_ZERO);
#else
    cv_unit_t f = CV_UNIT_FILL(fill);
    for (int u = lane; u < units; u += lpr)
        ((__global cv_unit_t *)dst)[u] = f;
#endif
}

/*
 * Row i of n_rows: with map_dst == 0, dst row i <- src row map[i]; with
 * map_dst == 1, dst row map[i] <- src row i (no map: both i). A map entry -1
 * fills dst row i with `fill` (fill_mode 1, source-side map) or skips the
 * row; other entries outside the addressed tensor raise CV_CHECK_INDEX and
 * are skipped. count (may be NULL)
 * is a device-side row count: rows >= *count are skipped, and nothing is
 * done when *count is negative or over count_cap. row_units counts CV_UNIT
 * bytes, or elements of CV_DTYPE with CV_ACC (dst += src, zero fill).
 */
__kernel void segment_copy_rows(__global const uchar *src, ulong src_off, ulong src_stride,
                                long src_rows, __global uchar *dst, ulong dst_off,
                                ulong dst_stride, long dst_rows, long n_rows, int row_units,
                                __global const int *map32, __global const long *map64,
                                ulong map_off, int map_dst, int fill_mode, uint4 fill,
                                __global const long *count, long count_cap, int lpr,
                                __global int *flag, int check)
{
    CV_SKIP_ON_FLAG(flag, check);
    long n = n_rows;
    if (count) {
        long c = count[0];
        if (c < 0 || c > count_cap)
            return;
        n = min(n, c);
    }
    bool has_map = map32 || map64;
    uint lid = get_local_id(0);
    uint rpg = get_local_size(0) / lpr;
    uint sub = lid / lpr, lane = lid % lpr;
    long nblk = (n + rpg - 1) / rpg;
    for (long blk = get_group_id(0); blk < nblk; blk += get_num_groups(0)) {
        long i = blk * rpg + sub;
        if (i >= n)
            continue;
        long m = has_map ? cv_map_at(map32, map64, map_off, i) : i;
        long s = map_dst ? i : m, d = map_dst ? m : i;
        if (has_map && m == -1) {
            if (!map_dst && fill_mode)
                cv_fill_row(dst + dst_off + (ulong)d * dst_stride, fill, row_units, lane, lpr);
            continue;
        }
        if (m < 0 || m >= (map_dst ? dst_rows : src_rows)) {
            if (lane == 0)
                cv_flag(flag, CV_CHECK_INDEX);
            continue;
        }
        cv_move_row(dst + dst_off + (ulong)d * dst_stride, src + src_off + (ulong)s * src_stride,
                    row_units, lane, lpr);
    }
}

#if !CV_ACC
/*
 * Pack, prefix form: packed row t < the scanned total (scratch[0], nothing
 * when it is negative or over capacity) <- padded row b * S + (t - cu[b])
 * with b found by upper-bound search in cu; src_index[t] (may be NULL) gets
 * that row.
 */
__kernel void segment_pack_rows(__global const int *cu, ulong cu_off, int batch, long S,
                                __global const long *scratch, long capacity, long n_rows,
                                __global const uchar *src, ulong src_off, ulong src_stride,
                                __global uchar *dst, ulong dst_off, ulong dst_stride,
                                int row_units, int lpr, __global long *src_index, ulong si_off,
                                __global int *flag, int check)
{
    CV_SKIP_ON_FLAG(flag, check);
    long total = scratch[0];
    if (total < 0 || total > capacity || batch <= 0)
        return;
    long n = min(n_rows, total);
    __global const int *c = CV_CPTR(int, cu, cu_off);
    uint lid = get_local_id(0);
    uint rpg = get_local_size(0) / lpr;
    uint sub = lid / lpr, lane = lid % lpr;
    long nblk = (n + rpg - 1) / rpg;
    for (long blk = get_group_id(0); blk < nblk; blk += get_num_groups(0)) {
        long t = blk * rpg + sub;
        if (t >= n)
            continue;
        int b = cv_seq_of_token(c, batch, (int)t);
        long s = t - c[b];
        if (s < 0 || s >= S) {
            if (lane == 0)
                cv_flag(flag, CV_CHECK_INDEX);
            continue;
        }
        long row = (long)b * S + s;
        if (src_index && lane == 0)
            CV_PTR(long, src_index, si_off)[t] = row;
        cv_copy_row(dst + dst_off + (ulong)t * dst_stride, src + src_off + (ulong)row * src_stride,
                    row_units, lane, lpr);
    }
}
#endif

/* Moves CP row pair (local i, global t); i < 0 zeroes global row t. */
inline void cv_cp_move(long i, long t, long local_total, long global_rows, int to_local,
                       __global uchar *glob, ulong g_off, ulong g_stride, __global uchar *loc,
                       ulong l_off, ulong l_stride, int row_units, uint lane, uint lpr,
                       __global int *flag)
{
    if (t < 0 || t >= global_rows || i >= local_total) {
        if (lane == 0)
            cv_flag(flag, CV_CHECK_INDEX);
        return;
    }
    __global uchar *gr = glob + g_off + (ulong)t * g_stride;
    if (i < 0) { /* not owned: zero_rest */
        cv_fill_row(gr, (uint4)(0), row_units, lane, lpr);
        return;
    }
    __global uchar *lr = loc + l_off + (ulong)i * l_stride;
    if (to_local)
        cv_move_row(lr, gr, row_units, lane, lpr);
    else
        cv_move_row(gr, lr, row_units, lane, lpr);
}

/*
 * CP rows. over_global == 0: iterate local rows i < local total (from
 * scratch) and move global <-> local (to_local: gather; else scatter,
 * adding with CV_ACC). over_global == 1 (scatter with zero_rest): iterate
 * global rows t < global_rows; rows this rank does not own are zeroed.
 * Nothing happens when the local total exceeds local_cap.
 */
__kernel void segment_cp_rows(__global const int *cu, ulong cu_off, int n, int world, int rank,
                              __global const int *local_cu, ulong lcu_off,
                              __global const long *scratch,
                              long local_cap, long global_rows, int over_global, int to_local,
                              __global uchar *glob, ulong g_off, ulong g_stride,
                              __global uchar *loc, ulong l_off, ulong l_stride, int row_units,
                              int lpr, __global int *flag, int check)
{
    CV_SKIP_ON_FLAG(flag, check);
    long local_total = scratch[0];
    if (local_total < 0 || local_total > local_cap || n <= 0)
        return;
    __global const int *g = CV_CPTR(int, cu, cu_off);
    __global const int *lcu = CV_CPTR(int, local_cu, lcu_off);
    int C = 2 * world;
    long n_iter = over_global ? global_rows : local_total;
    uint lid = get_local_id(0);
    uint rpg = get_local_size(0) / lpr;
    uint sub = lid / lpr, lane = lid % lpr;
    long nblk = (n_iter + rpg - 1) / rpg;
    for (long blk = get_group_id(0); blk < nblk; blk += get_num_groups(0)) {
        long it = blk * rpg + sub;
        if (it >= n_iter)
            continue;
        long i, t;
        cv_cp_map_global(g, lcu, n, C, rank, over_global, it, &i, &t);
        cv_cp_move(i, t, local_total, global_rows, to_local, glob, g_off, g_stride, loc, l_off,
                   l_stride, row_units, lane, lpr, flag);
    }
}

/*
 * CP rows in one launch for n <= CV_FUSE_MAX: every work-group scans the
 * documents' local lengths into local memory (one work-group scan), then
 * moves rows as segment_cp_rows does, searching documents in local memory.
 * A local total over local_cap raises CV_CHECK_CAPACITY and moves nothing.
 */
__kernel __attribute__((reqd_work_group_size(CV_SCAN_WG, 1, 1))) void
segment_cp_rows_fused(__global const int *cu, ulong cu_off, int n, int world, int rank,
                      long local_cap, long global_rows, int over_global, int to_local,
                      __global uchar *glob, ulong g_off, ulong g_stride, __global uchar *loc,
                      ulong l_off, ulong l_stride, int row_units, int lpr, __global int *flag,
                      int check)
{
    __local int lcu[CV_FUSE_MAX + 1];
    __local long tmp[CV_SCAN_WG];
    CV_SKIP_ON_FLAG(flag, check);
    if (n <= 0 || n > CV_FUSE_MAX)
        return;
    __global const int *g = CV_CPTR(int, cu, cu_off);
    int C = 2 * world;
    uint lid = get_local_id(0);
    long b0, b1;
    cv_lane_block(n, &b0, &b1);
    long sum = 0;
    for (long s = b0; s < b1; s++)
        sum += cv_cp_parts(g, (int)s, C, rank);
    long packed;
    long run = cv_wg_exclusive(sum, tmp, &packed);
    for (long s = b0; s < b1; s++) {
        lcu[s] = (int)((run >> 32) + (run & 0xffffffffL));
        run += cv_cp_parts(g, (int)s, C, rank);
    }
    long local_total = (packed >> 32) + (packed & 0xffffffffL);
    if (lid == 0)
        lcu[n] = (int)local_total;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (local_total > local_cap) {
        if (lid == 0 && get_group_id(0) == 0)
            cv_flag(flag, CV_CHECK_CAPACITY);
        return;
    }
    long n_iter = over_global ? global_rows : local_total;
    uint rpg = CV_SCAN_WG / lpr;
    uint sub = lid / lpr, lane = lid % lpr;
    long nblk = (n_iter + rpg - 1) / rpg;
    for (long blk = get_group_id(0); blk < nblk; blk += get_num_groups(0)) {
        long it = blk * rpg + sub;
        if (it >= n_iter)
            continue;
        long i, t;
        cv_cp_map_local(g, lcu, n, C, rank, over_global, it, &i, &t);
        cv_cp_move(i, t, local_total, global_rows, to_local, glob, g_off, g_stride, loc, l_off,
                   l_stride, row_units, lane, lpr, flag);
    }
}

#if !CV_ACC
/*
 * Pack, prefix form, in one launch for batch <= CV_FUSE_MAX: every
 * work-group scans valid_lens into local memory (validating them: each in
 * [0, S], total within int32, else CV_CHECK_VALUE and nothing written),
 * group 0 writes total_out (also when it exceeds capacity, which raises
 * CV_CHECK_CAPACITY and writes nothing else, unless checks are on) and cu,
 * and all groups copy
 * packed rows t < total from padded row b * S + (t - cu[b]).
 */
__kernel __attribute__((reqd_work_group_size(CV_SCAN_WG, 1, 1))) void
segment_pack_fused(__global const int *lens, ulong lens_off, int batch, long S, long capacity,
                   __global int *cu, ulong cu_off, __global long *total_out, ulong total_off,
                   long n_rows, __global const uchar *src, ulong src_off, ulong src_stride,
                   __global uchar *dst, ulong dst_off, ulong dst_stride, int row_units, int lpr,
                   __global long *src_index, ulong si_off, __global int *flag, int check)
{
    __local int lc[CV_FUSE_MAX + 1];
    __local long tmp[CV_SCAN_WG];
    CV_SKIP_ON_FLAG(flag, check);
    if (batch < 0 || batch > CV_FUSE_MAX)
        return;
    uint lid = get_local_id(0);
    bool first = get_group_id(0) == 0;
    __global const int *l = CV_CPTR(int, lens, lens_off);
    long b0, b1;
    cv_lane_block(batch, &b0, &b1);
    long sum = 0;
    for (long b = b0; b < b1; b++) {
        int v = l[b];
        if (v < 0 || v > S) {
            sum = CV_BAD_SUM;
            break;
        }
        sum += v;
    }
    long total;
    long run = cv_wg_exclusive(sum, tmp, &total);
    if (total > INT_MAX) {
        if (first && lid == 0)
            cv_flag(flag, CV_CHECK_VALUE);
        return;
    }
    if (first && lid == 0 && total_out && !(check && total > capacity))
        *CV_PTR(long, total_out, total_off) = total;
    if (total > capacity) {
        if (first && lid == 0)
            cv_flag(flag, CV_CHECK_CAPACITY);
        return;
    }
    for (long b = b0; b < b1; b++) {
        lc[b] = (int)run;
        run += l[b];
    }
    if (lid == 0)
        lc[batch] = (int)total;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (first) {
        __global int *c = CV_PTR(int, cu, cu_off);
        for (int b = lid; b <= batch; b += CV_SCAN_WG)
            c[b] = lc[b];
    }
    long n = min(n_rows, total);
    uint rpg = CV_SCAN_WG / lpr;
    uint sub = lid / lpr, lane = lid % lpr;
    long nblk = (n + rpg - 1) / rpg;
    for (long blk = get_group_id(0); blk < nblk; blk += get_num_groups(0)) {
        long t = blk * rpg + sub;
        if (t >= n)
            continue;
        int b = cv_seq_of_token_local(lc, batch, (int)t);
        long row = (long)b * S + (t - lc[b]);
        if (src_index && lane == 0)
            CV_PTR(long, src_index, si_off)[t] = row;
        cv_copy_row(dst + dst_off + (ulong)t * dst_stride, src + src_off + (ulong)row * src_stride,
                    row_units, lane, lpr);
    }
}
#endif



#if CV_ACC
/*
 * Accumulate with repeated destinations, deterministic: a work-group owns
 * CV_ACC_ROWS destination rows by CV_COPY_WG columns and walks all indices
 * in ascending m (uniform loads, no barriers), adding into f32 (or int)
 * accumulators in local memory that start from dst at a row's first hit;
 * rows hit are stored (rounded once) at the end, rows never hit are zeroed
 * with zero_rest. This is the CPU's order exactly. Out-of-range indices are
 * skipped.
 */
__kernel __attribute__((reqd_work_group_size(CV_COPY_WG, 1, 1))) void
segment_scatter_add_ordered(__global const uchar *src, ulong src_off, ulong src_stride,
                            __global const int *index, ulong index_off, long n_index,
                            __global uchar *dst, ulong dst_off, ulong dst_stride, long dst_rows,
                            int row_elems, int zero_rest, __global int *flag, int check)
{
    __local cv_acc_t acc[CV_ACC_ROWS * CV_COPY_WG];
    CV_SKIP_ON_FLAG(flag, check);
    uint lid = get_local_id(0);
    __global const int *ix = CV_CPTR(int, index, index_off);
    long row_blocks = (dst_rows + CV_ACC_ROWS - 1) / CV_ACC_ROWS;
    long col_tiles = ((long)row_elems + CV_COPY_WG - 1) / CV_COPY_WG;
    __local cv_acc_t *mine = acc + lid;
    for (long blk = get_group_id(0); blk < row_blocks * col_tiles; blk += get_num_groups(0)) {
        long r0 = (blk / col_tiles) * CV_ACC_ROWS;
        int col = (int)(blk % col_tiles) * CV_COPY_WG + (int)lid;
        if (col >= row_elems)
            continue;
        uint touched = 0;
        for (long m = 0; m < n_index; m++) {
            long r = ix[m];
            if (r < r0 || r >= r0 + CV_ACC_ROWS || r >= dst_rows)
                continue;
            int kk = (int)(r - r0);
            cv_acc_t x = cv_acc_load(src + src_off + (ulong)m * src_stride, col);
            if (!(touched & (1u << kk))) {
                x = cv_acc_add(cv_acc_load(dst + dst_off + (ulong)r * dst_stride, col), x);
                touched |= 1u << kk;
            } else {
                x = cv_acc_add(mine[kk * CV_COPY_WG], x);
            }
            mine[kk * CV_COPY_WG] = x;
        }
        for (int kk = 0; kk < CV_ACC_ROWS && r0 + kk < dst_rows; kk++) {
            __global uchar *dr = dst + dst_off + (ulong)(r0 + kk) * dst_stride;
            if (touched & (1u << kk))
                cv_acc_store(dr, col, mine[kk * CV_COPY_WG]);
            else if (zero_rest)
                cv_acc_store(dr, col, CV_ACC_ZERO);
        }
    }
}
#endif /* CV_ACC */
