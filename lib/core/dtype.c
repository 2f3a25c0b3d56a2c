/* The dtype table (size, name, the kernels' code, float activation or not).
 * Every mapping from a clvarlen_dtype goes through this file; the host-side
 * f16/bf16 conversions are in half.c. */
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
