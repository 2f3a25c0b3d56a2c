/* The device choice of the standalone OpenCL benchmarks (bench-clblast-chunk,
 * bench-l2-stage): the first device whose name contains `want`, or without
 * it the first GPU; its name into name[name_size]. NULL if none.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef CLVARLEN_BENCH_CL_DEVICE_H
#define CLVARLEN_BENCH_CL_DEVICE_H

#include <CL/cl.h>

#include <string.h>

static cl_device_id pick_device(const char *want, char *name, size_t name_size)
{
    cl_platform_id plats[16];
    cl_uint np = 0;
    if (clGetPlatformIDs(16, plats, &np) != CL_SUCCESS)
        return NULL;
    for (cl_uint i = 0; i < np && i < 16; i++) {
        cl_device_id devs[16];
        cl_uint nd = 0;
        if (clGetDeviceIDs(plats[i], want ? CL_DEVICE_TYPE_ALL : CL_DEVICE_TYPE_GPU, 16, devs,
                           &nd) != CL_SUCCESS)
            continue;
        for (cl_uint j = 0; j < nd && j < 16; j++) {
            if (clGetDeviceInfo(devs[j], CL_DEVICE_NAME, name_size, name, NULL) != CL_SUCCESS)
                continue;
            if (!want || strstr(name, want))
                return devs[j];
        }
    }
    return NULL;
}

#endif
