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
    /* One row stride in bytes must fit even without rows (callers size rows
     * and strides in bytes from it), and rows * stride * es must fit in int64
     * (and size_t, which is 64-bit here). */
    if (stride > INT64_MAX / (int64_t)es)
        return cv_error(ctx, CLVARLEN_ERROR_OVERFLOW, "%s: %s rows span more than 2^63 bytes",
                        fn, what);
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

uint64_t cv_extent_span(const cv_extent *e)
{
    if (e->rows <= 0 || e->row_bytes == 0)
        return 0;
    return (uint64_t)(e->rows - 1) * e->stride_b + e->row_bytes;
}

/* Rows of a repeat every `s` bytes from a->start; b fits between two of them
 * when its distance from a row start, modulo s, leaves room on both sides.
 * Extending a's rows periodically only adds bytes, so "fits" is exact. */
static bool fits_between_rows(const cv_extent *a, const cv_extent *b, uint64_t s)
{
    if (s == 0 || a->row_bytes > s || b->row_bytes > s)
        return false;
    uint64_t d = b->start >= a->start ? (b->start - a->start) % s
                                      : (s - (a->start - b->start) % s) % s;
    return d >= a->row_bytes && d + b->row_bytes <= s;
}

bool cv_extents_overlap(const cv_extent *a, const cv_extent *b)
{
    uint64_t sa = cv_extent_span(a), sb = cv_extent_span(b);
    if (sa == 0 || sb == 0)
        return false;
    if (a->start >= b->start + sb || b->start >= a->start + sa)
        return false;
    if (a->rows == 1 && b->rows == 1)
        return true;
    /* Interleaved views: one stride for both (a single row takes the other's). */
    uint64_t s = a->rows > 1 ? a->stride_b : b->stride_b;
    if ((a->rows > 1 && a->stride_b != s) || (b->rows > 1 && b->stride_b != s))
        return true;
    return !fits_between_rows(a, b, s);
}

static bool extents_equal(const cv_extent *a, const cv_extent *b)
{
    return a->start == b->start && cv_extent_span(a) == cv_extent_span(b) &&
           a->row_bytes == b->row_bytes && (a->rows <= 1 || a->stride_b == b->stride_b);
}

clvarlen_status cv_check_no_overlap(clvarlen_context *ctx, const char *fn, const cv_region *r,
                                    size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (!r[i].output)
            continue;
        for (size_t j = 0; j < n; j++) {
            if (j == i || (r[j].output && j < i) || r[i].space != r[j].space)
                continue;
            if (!cv_extents_overlap(&r[i].ext, &r[j].ext))
                continue;
            bool allowed = (j < 32 && (r[i].may_equal >> j) & 1u) ||
                           (r[j].output && i < 32 && (r[j].may_equal >> i) & 1u);
            if (allowed && extents_equal(&r[i].ext, &r[j].ext))
                continue;
            return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                            "%s: %s overlaps %s (outputs must not share memory with inputs or "
                            "other outputs%s)",
                            fn, r[i].name, r[j].name, allowed ? " unless exactly the same" : "");
        }
    }
    return CLVARLEN_SUCCESS;
}

/* ------------------------------------------------------------ ABI growth */

static void set_size(void *p, size_t size)
{
    uint32_t s32 = size > UINT32_MAX ? UINT32_MAX : (uint32_t)size;
    memcpy(p, &s32, sizeof s32);
}

void cv_struct_init(void *dst, size_t size, void *defaults, size_t full_size)
{
    if (!dst || size < sizeof(uint32_t))
        return;
    set_size(defaults, size);
    memcpy(dst, defaults, size < full_size ? size : full_size);
    if (size > full_size)
        memset((char *)dst + full_size, 0, size - full_size);
}

clvarlen_status cv_struct_in(clvarlen_context *ctx, const char *fn, const char *what,
                             const void *caller, void *full, size_t full_size, size_t min_size)
{
    uint32_t size;
    memcpy(&size, caller, sizeof size);
    if (size < min_size)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: %s->struct_size is %u, below %zu, its first released size: "
                        "initialise it with its _init macro",
                        fn, what, (unsigned)size, min_size);
    memcpy(full, caller, size < full_size ? size : full_size);
    set_size(full, full_size);
    return CLVARLEN_SUCCESS;
}

void cv_struct_out(void *dst, size_t size, void *full, size_t full_size)
{
    const size_t n = size < full_size ? size : full_size;
    set_size(full, n);
    memcpy(dst, full, n);
}
