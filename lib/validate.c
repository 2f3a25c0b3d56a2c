/* Argument validation shared by every op family, and the host-side f16/bf16
 * conversions (round to nearest even, as the kernels do). */
#include "internal.h"

#include <math.h>
#include <string.h>

size_t cv_dtype_size(clvarlen_dtype dtype)
{
    switch (dtype) {
    case CLVARLEN_DTYPE_F32: return 4;
    case CLVARLEN_DTYPE_F16: return 2;
    case CLVARLEN_DTYPE_BF16: return 2;
    case CLVARLEN_DTYPE_F64: return 8;
    case CLVARLEN_DTYPE_I32: return 4;
    case CLVARLEN_DTYPE_I64: return 8;
    case CLVARLEN_DTYPE_U8: return 1;
    }
    return 0;
}

bool cv_is_float_act(clvarlen_dtype dtype)
{
    return dtype == CLVARLEN_DTYPE_F32 || dtype == CLVARLEN_DTYPE_F16 ||
           dtype == CLVARLEN_DTYPE_BF16;
}

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

float cv_half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0) {
        if (mant == 0) {
            bits = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do {
                e++;
                mant <<= 1;
            } while ((mant & 0x400u) == 0);
            mant &= 0x3ffu;
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | (mant << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (mant << 13) | (mant ? 0x400000u : 0);
    } else {
        bits = sign | ((exp + 112u) << 23) | (mant << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

uint16_t cv_float_to_half(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u)
        return (uint16_t)(sign | 0x7e00u); /* NaN */
    if (ax >= 0x477ff000u)                 /* rounds to >= 65520: inf */
        return (uint16_t)(sign | 0x7c00u);
    if (ax < 0x38800000u) { /* below the smallest normal half: subnormal or zero */
        if (ax < 0x33000000u)
            return sign; /* < 2^-25 rounds to zero (2^-25 exactly ties to even 0) */
        uint32_t mant = (ax & 0x7fffffu) | 0x800000u;
        int shift = 126 - (int)(ax >> 23); /* 14 + (127 - 15) - e ... */
        /* value = mant * 2^(e-150); half subnormal unit is 2^-24: q = mant >> (126 - e) */
        uint32_t q = mant >> shift;
        uint32_t rem = mant & ((1u << shift) - 1);
        uint32_t halfway = 1u << (shift - 1);
        if (rem > halfway || (rem == halfway && (q & 1u)))
            q++;
        return (uint16_t)(sign | q);
    }
    /* normal: rebias and round the 13 dropped bits to nearest even */
    uint32_t r = ax + 0xfffu + ((ax >> 13) & 1u);
    r -= 112u << 23;
    return (uint16_t)(sign | (r >> 13));
}

float cv_bf16_to_float(uint16_t b)
{
    uint32_t bits = (uint32_t)b << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

uint16_t cv_float_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
