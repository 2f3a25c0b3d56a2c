/* The dtype table (size, name, the kernels' code, float activation or not)
 * and the host-side f16/bf16 conversions (round to nearest even, as the
 * kernels do). Every mapping from a clvarlen_dtype goes through this file. */
#include "core/core.h"

#include <string.h>

/* Indexed by clvarlen_dtype; kernel codes are cl/cv-shared.h's CV_DT_*. */
static const cv_dtype_info dtype_table[] = {
    [CLVARLEN_DTYPE_F32] = {.name = "f32", .size = 4, .kernel_code = CV_DT_F32, .float_act = true},
    [CLVARLEN_DTYPE_F16] = {.name = "f16", .size = 2, .kernel_code = CV_DT_F16, .float_act = true},
    [CLVARLEN_DTYPE_BF16] = {.name = "bf16", .size = 2, .kernel_code = CV_DT_BF16, .float_act = true},
    [CLVARLEN_DTYPE_F64] = {.name = "f64", .size = 8, .kernel_code = -1, .float_act = false},
    [CLVARLEN_DTYPE_I32] = {.name = "i32", .size = 4, .kernel_code = CV_DT_I32, .float_act = false},
    [CLVARLEN_DTYPE_I64] = {.name = "i64", .size = 8, .kernel_code = -1, .float_act = false},
    [CLVARLEN_DTYPE_U8] = {.name = "u8", .size = 1, .kernel_code = -1, .float_act = false},
};

const cv_dtype_info *cv_dtype(clvarlen_dtype dtype)
{
    if ((unsigned)dtype >= sizeof dtype_table / sizeof dtype_table[0] ||
        !dtype_table[dtype].name)
        return NULL;
    return &dtype_table[dtype];
}

size_t cv_dtype_size(clvarlen_dtype dtype)
{
    const cv_dtype_info *d = cv_dtype(dtype);
    return d ? d->size : 0;
}

bool cv_is_float_act(clvarlen_dtype dtype)
{
    const cv_dtype_info *d = cv_dtype(dtype);
    return d && d->float_act;
}

int cv_dtype_kernel_code(clvarlen_dtype dtype)
{
    const cv_dtype_info *d = cv_dtype(dtype);
    return d ? d->kernel_code : -1;
}

size_t clvarlen_dtype_size(clvarlen_dtype dtype)
{
    return cv_dtype_size(dtype);
}

const char *clvarlen_dtype_name(clvarlen_dtype dtype)
{
    const cv_dtype_info *d = cv_dtype(dtype);
    return d ? d->name : "unknown";
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
