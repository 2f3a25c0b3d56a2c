/* Device-side validation kernels (lib/runtime/device-check.c): each raises a
 * CV_CHECK_* bit of the context's flag word when its input is invalid, so a
 * checked command chain can refuse a call before anything is written.
 */

/* cu[0] == 0, non-decreasing, cu[n] == total when total >= 0. */
__kernel void check_cu_seqlens(__global const int *cu, ulong cu_off, int n, long total,
                               __global int *flag)
{
    __global const int *c = CV_CPTR(int, cu, cu_off);
    for (long i = get_global_id(0); i <= n; i += get_global_size(0)) {
        int v = c[i];
        if ((i == 0 && v != 0) || (i < n && c[i + 1] < v) ||
            (i == n && total >= 0 && (long)v != total))
            cv_flag(flag, CV_CHECK_CU_SEQLENS);
    }
}

/* Every value (int32 v32 or int64 v64, byte offset off) in [lo, hi), or -1
 * when allowed; else raise `bit`. */
__kernel void check_range(__global const int *v32, __global const long *v64, ulong off, long n,
                          long lo, long hi, int allow_minus1, int bit, __global int *flag)
{
    for (long i = get_global_id(0); i < n; i += get_global_size(0)) {
        long v = v64 ? CV_CPTR(long, v64, off)[i] : (long)CV_CPTR(int, v32, off)[i];
        if (!(allow_minus1 && v == -1) && (v < lo || v >= hi))
            cv_flag(flag, bit);
    }
}
