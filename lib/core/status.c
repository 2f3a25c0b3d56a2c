/* Status codes and strings, and the library version. */
#include "core/core.h"

int clvarlen_version(void)
{
    return CLVARLEN_VERSION;
}

const char *clvarlen_version_string(void)
{
    return CLVARLEN_VERSION_STRING;
}

const char *clvarlen_status_str(clvarlen_status status)
{
    switch (status) {
    case CLVARLEN_SUCCESS: return "success";
    case CLVARLEN_ERROR_INVALID_ARGUMENT: return "invalid argument";
    case CLVARLEN_ERROR_INVALID_CU_SEQLENS: return "invalid cu_seqlens";
    case CLVARLEN_ERROR_INDEX_OUT_OF_RANGE: return "index out of range";
    case CLVARLEN_ERROR_BUFFER_TOO_SMALL: return "output buffer too small";
    case CLVARLEN_ERROR_UNSUPPORTED: return "unsupported";
    case CLVARLEN_ERROR_OUT_OF_MEMORY: return "out of memory";
    case CLVARLEN_ERROR_DEVICE_NOT_FOUND: return "device not found";
    case CLVARLEN_ERROR_OPENCL: return "OpenCL error";
    case CLVARLEN_ERROR_KERNEL_NOT_FOUND: return "kernel source not found";
    case CLVARLEN_ERROR_KERNEL_BUILD: return "kernel build failed";
    case CLVARLEN_ERROR_NO_OPENCL: return "OpenCL not available on this context";
    case CLVARLEN_ERROR_OVERFLOW: return "size overflow";
    case CLVARLEN_ERROR_INTERNAL: return "internal error";
    }
    return "unknown status";
}

const char *clvarlen_status_name(clvarlen_status status)
{
    switch (status) {
#define CASE(x) \
    case x: return #x
    CASE(CLVARLEN_SUCCESS);
    CASE(CLVARLEN_ERROR_INVALID_ARGUMENT);
    CASE(CLVARLEN_ERROR_INVALID_CU_SEQLENS);
    CASE(CLVARLEN_ERROR_INDEX_OUT_OF_RANGE);
    CASE(CLVARLEN_ERROR_BUFFER_TOO_SMALL);
    CASE(CLVARLEN_ERROR_UNSUPPORTED);
    CASE(CLVARLEN_ERROR_OUT_OF_MEMORY);
    CASE(CLVARLEN_ERROR_DEVICE_NOT_FOUND);
    CASE(CLVARLEN_ERROR_OPENCL);
    CASE(CLVARLEN_ERROR_KERNEL_NOT_FOUND);
    CASE(CLVARLEN_ERROR_KERNEL_BUILD);
    CASE(CLVARLEN_ERROR_NO_OPENCL);
    CASE(CLVARLEN_ERROR_OVERFLOW);
    CASE(CLVARLEN_ERROR_INTERNAL);
#undef CASE
    }
    return "CLVARLEN_STATUS_UNKNOWN";
}
