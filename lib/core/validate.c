/* Host-side argument validation shared by every op family: cu_seqlens and
 * row geometry (shapes, strides and the bytes they span). */
#include "core/core.h"

#include <math.h>
#include <string.h>

clvarlen_status cv_check_cu_seqlens(clvarlen_context *ctx, const char *fn, const char *what,
                                    const int32_t *cu, int64_t n, int64_t total)
{
    if (n < 0)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: negative sequence count %lld",
                        fn, (long long)n);
    if (!cu)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: %s is NULL", fn, what);
    if (cu[0] != 0)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_CU_SEQLENS, "%s: %s[0] is %d, not 0", fn,
                        what, (int)cu[0]);
    for (int64_t s = 0; s < n; s++) {
        if (cu[s + 1] < cu[s])
            return cv_error(ctx, CLVARLEN_ERROR_INVALID_CU_SEQLENS,
                            "%s: %s decreases at %lld (%d -> %d)", fn, what, (long long)s,
                            (int)cu[s], (int)cu[s + 1]);
    }
    if (total >= 0 && (int64_t)cu[n] != total)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_CU_SEQLENS,
                        "%s: %s[%lld] is %d but the total is %lld", fn, what, (long long)n,
                        (int)cu[n], (long long)total);
    return CLVARLEN_SUCCESS;
}

clvarlen_status cv_check_rows(clvarlen_context *ctx, const char *fn, const char *what,
                              clvarlen_dtype dtype, int64_t row_elems, int64_t rows,
                              int64_t stride, int64_t *stride_out)
{
    size_t es = cv_dtype_size(dtype);
    if (es == 0)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: unknown dtype %d", fn,
                        (int)dtype);
    if (row_elems <= 0)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: row_elems must be positive, got %lld", fn, (long long)row_elems);
    if (rows < 0)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: %s has %lld rows", fn, what,
                        (long long)rows);
    if (stride == 0)
        stride = row_elems;
    if (stride < row_elems)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: %s stride %lld is smaller than the row (%lld elements)", fn, what,
                        (long long)stride, (long long)row_elems);
    /* rows * stride * es must fit in int64 (and size_t, which is 64-bit here). */
    if (rows > 0 && (stride > INT64_MAX / (int64_t)es / rows))
        return cv_error(ctx, CLVARLEN_ERROR_OVERFLOW, "%s: %s spans more than 2^63 bytes", fn,
                        what);
    if (stride_out)
        *stride_out = stride;
    return CLVARLEN_SUCCESS;
}

size_t cv_span_bytes(clvarlen_dtype dtype, int64_t row_elems, int64_t rows, int64_t stride)
{
    if (rows <= 0)
        return 0;
    if (stride == 0)
        stride = row_elems;
    return (size_t)((rows - 1) * stride + row_elems) * cv_dtype_size(dtype);
}
