/* segment-maps.cl: the segment family's element-wise kernels (SPEC 2),
 * joined after cv-shared.h and common.clh: lengths from cu_seqlens, token
 * maps, the row-map inversion behind unpack and scatter with ZERO_REST, and
 * the CP plan's per-token arrays. One work-item per element, grid-stride;
 * every index is bounds-checked (out of range: flag and skip). Kernels
 * taking `check` return at once when checks are on and an earlier kernel
 * raised a flag, so invalid input writes nothing. Each takes get_global_id()
 * before any return: it reads an implicit kernel argument (the offset), and
 * llvmpipe (Mesa 22.3 rusticl) warns that it may mis-read such a read after a
 * return on a loaded value ("load_kernel_arg in control flow").
 */
#pragma OPENCL FP_CONTRACT OFF

/* Global token of local token i of a rank (local_cu from segment_cp_scan). */
inline long cv_cp_global_of_local(__global const int *cu, __global const int *lcu, int n, int C,
                                  int rank, long i, int *doc)
{
    int s = cv_seq_of_token(lcu, n, (int)i);
    int L = cu[s + 1] - cu[s];
    int k = (int)(i - lcu[s]);
    int nh = cv_chunk_len(L, C, rank);
    int p = k < nh ? cv_chunk_start(L, C, rank) + k : cv_chunk_start(L, C, C - 1 - rank) + k - nh;
    *doc = s;
    return (long)cu[s] + p;
}


__kernel void segment_lengths_from_cu(__global const int *cu, ulong cu_off, int n,
                                      __global int *lengths, ulong len_off, __global int *flag,
                                      int check)
{
    const long gid = get_global_id(0);
    CV_SKIP_ON_FLAG(flag, check);
    __global const int *c = CV_CPTR(int, cu, cu_off);
    __global int *l = CV_PTR(int, lengths, len_off);
    for (long s = gid; s < n; s += get_global_size(0))
        l[s] = c[s + 1] - c[s];
}

__kernel void segment_token_maps(__global const int *cu, ulong cu_off, int n, long total,
                                 __global const int *offsets, ulong offsets_off,
                                 __global int *seq_id, ulong seq_off, __global int *pos,
                                 ulong pos_off, __global int *flag, int check)
{
    const long gid = get_global_id(0);
    CV_SKIP_ON_FLAG(flag, check);
    if (n <= 0)
        return;
    __global const int *c = CV_CPTR(int, cu, cu_off);
    for (long t = gid; t < total; t += get_global_size(0)) {
        int s = cv_seq_of_token(c, n, (int)t);
        if (seq_id)
            CV_PTR(int, seq_id, seq_off)[t] = s;
        if (pos) {
            long p = t - c[s] + (offsets ? CV_CPTR(int, offsets, offsets_off)[s] : 0);
            CV_PTR(int, pos, pos_off)[t] = (int)p;
        }
    }
}

/* inv[map[i]] = i for map entries in [0, limit); -1 entries are skipped. */
__kernel void segment_invert_map(__global const int *m32, __global const long *m64, ulong off,
                                 long n, long limit, __global int *inv, ulong inv_off,
                                 __global int *flag, int check)
{
    const long gid = get_global_id(0);
    CV_SKIP_ON_FLAG(flag, check);
    for (long i = gid; i < n; i += get_global_size(0)) {
        long m = cv_map_at(m32, m64, off, i);
        if (m == -1)
            continue;
        if (m < 0 || m >= limit) {
            cv_flag(flag, CV_CHECK_INDEX);
            continue;
        }
        CV_PTR(int, inv, inv_off)[m] = (int)i;
    }
}

/* The CP plan's per-token arrays: global_index and position (either may be NULL). */
__kernel void segment_cp_plan_tokens(__global const int *cu, ulong cu_off, int n, int world,
                                     int rank, __global const int *local_cu, ulong local_off,
                                     __global const long *scratch, long capacity,
                                     __global int *global_index, ulong gi_off,
                                     __global int *position, ulong pos_off, __global int *flag,
                                     int check)
{
    const long gid = get_global_id(0);
    CV_SKIP_ON_FLAG(flag, check);
    long total = scratch[0];
    if (total < 0 || total > capacity || n <= 0)
        return;
    __global const int *g = CV_CPTR(int, cu, cu_off);
    __global const int *lc = CV_CPTR(int, local_cu, local_off);
    int C = 2 * world;
    for (long i = gid; i < total; i += get_global_size(0)) {
        int s;
        long t = cv_cp_global_of_local(g, lc, n, C, rank, i, &s);
        if (global_index)
            CV_PTR(int, global_index, gi_off)[i] = (int)t;
        if (position)
            CV_PTR(int, position, pos_off)[i] = (int)(t - g[s]);
    }
}

