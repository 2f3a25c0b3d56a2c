/* bench-l2-stage: how fast a device's work-groups can stage tiles from the L2
 * cache (or device memory) into local memory, the way the tensor-core
 * attention forward stages its K and V tiles (32 KiB per key tile at head dim
 * 128), but with nothing else to do. On an H200 this loop levels off below
 * what the forward itself stages while it computes, so it is not that path's
 * ceiling (docs/PERFORMANCE.md, "Where the forward's time goes"). Not
 * installed.
 *
 *   bench-l2-stage [DEVICE-SUBSTRING]   (default: the first GPU)
 *
 * Each work-group of 128 work-items copies ITERS tiles from a buffer of SPAN
 * bytes into its local memory (on NVIDIA by cp.async.cg, 16 bytes per
 * work-item and instruction, as cl/nv-mma.clh's cp_async16; elsewhere by
 * plain loads and stores), with one or two tiles in flight: the next tile's
 * copy is issued before the work-group waits for the last. Tiles of 32 KiB (a
 * K and a V tile at head dim 128) and 16 KiB (one of them); spans of 8 and 32
 * MiB stay in an H100/H200's L2 (50 MiB), 512 MiB does not; 1 to 6
 * work-groups per compute unit. Prints bytes staged per second, the best of
 * RUNS timed launches after a warm-up.
 *
 * SPDX-License-Identifier: MIT
 */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

#include "bench-cl-device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ITERS 400
#define RUNS 5

static const char *src =
    "#ifdef NV\n"
    "#define CP16(d, s) asm volatile(\"cp.async.cg.shared.global [%0], [%1], 16;\" ::"
    " \"l\"((ulong)(d)), \"l\"(s) : \"memory\")\n"
    "#define COMMIT() asm volatile(\"cp.async.commit_group;\" ::: \"memory\")\n"
    "#if SLOTS == 1\n"
    "#define WAIT() asm volatile(\"cp.async.wait_group 0;\" ::: \"memory\")\n"
    "#elif SLOTS == 2\n"
    "#define WAIT() asm volatile(\"cp.async.wait_group 1;\" ::: \"memory\")\n"
    "#else\n"
    "#define WAIT() asm volatile(\"cp.async.wait_group 2;\" ::: \"memory\")\n"
    "#endif\n"
    "#else\n"
    "#define CP16(d, s) (*(d) = *(s))\n"
    "#define COMMIT()\n"
    "#define WAIT()\n"
    "#endif\n"
    "#define T16 (TILE / 16)\n"
    "__kernel __attribute__((reqd_work_group_size(128, 1, 1)))\n"
    "void stage(__global const uint4 *src, uint ntiles, uint iters, __local uint4 *buf,\n"
    "           __global uint *out)\n"
    "{\n"
    "    const uint lid = get_local_id(0), grp = get_group_id(0);\n"
    "    uint acc = 0;\n"
    "    for (uint i = 0; i < iters + SLOTS - 1; i++) {\n"
    "        if (i < iters) {\n"
    "            __global const uint4 *s = src + (size_t)((grp * 7u + i * 13u) % ntiles) * T16;\n"
    "            __local uint4 *d = buf + (i % SLOTS) * T16;\n"
    "            for (uint e = lid; e < T16; e += 128)\n"
    "                CP16(d + e, s + e);\n"
    "        }\n"
    "        COMMIT();\n"
    "        if (i + 1 >= SLOTS) {\n"
    "            WAIT();\n"
    "            barrier(CLK_LOCAL_MEM_FENCE);\n"
    "            acc += buf[((i + 1 - SLOTS) % SLOTS) * T16 + (lid * 17u + i) % T16].x;\n"
    "            barrier(CLK_LOCAL_MEM_FENCE);\n"
    "        }\n"
    "    }\n"
    "    out[get_global_id(0)] = acc;\n"
    "}\n";

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0); /* each figure as it comes */
    char name[256] = "", vendor[256] = "";
    cl_device_id dev = pick_device(argc > 1 ? argv[1] : NULL, name, sizeof name);
    if (!dev) {
        fprintf(stderr, "bench-l2-stage: no %s device\n", argc > 1 ? argv[1] : "GPU");
        return 2;
    }
    clGetDeviceInfo(dev, CL_DEVICE_VENDOR, sizeof vendor, vendor, NULL);
    const int nv = strstr(vendor, "NVIDIA") != NULL;
    printf("device: %s (%s)\n", name, vendor);
    cl_uint cus = 0;
    cl_ulong lmem = 0;
    clGetDeviceInfo(dev, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cus, &cus, NULL);
    clGetDeviceInfo(dev, CL_DEVICE_LOCAL_MEM_SIZE, sizeof lmem, &lmem, NULL);
    cl_int e;
    cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &e);
    if (e != CL_SUCCESS)
        return fprintf(stderr, "clCreateContext: %d\n", e), 1;
    cl_command_queue q = clCreateCommandQueue(ctx, dev, CL_QUEUE_PROFILING_ENABLE, &e);
    if (e != CL_SUCCESS)
        return fprintf(stderr, "clCreateCommandQueue: %d\n", e), 1;
    cl_program pr = clCreateProgramWithSource(ctx, 1, &src, NULL, &e);
    /* tile bytes and tiles in flight per work-group (local memory: their product) */
    static const struct { int tile, slots; } forms[] = {{32768, 1}, {16384, 1}, {16384, 2}};
    const size_t spans[] = {8u << 20, 32u << 20, 512u << 20};
    const int per_cu[] = {1, 2, 3, 4, 6};
    cl_mem out = clCreateBuffer(ctx, CL_MEM_READ_WRITE, (size_t)cus * 8 * 128 * 4, NULL, &e);
    for (size_t fi = 0; fi < sizeof forms / sizeof forms[0]; fi++) {
        const size_t local = (size_t)forms[fi].tile * forms[fi].slots;
        if (local > lmem)
            continue;
        char opts[128];
        snprintf(opts, sizeof opts, "%s -DTILE=%d -DSLOTS=%d", nv ? "-DNV" : "", forms[fi].tile,
                 forms[fi].slots);
        if (clBuildProgram(pr, 1, &dev, opts, NULL, NULL) != CL_SUCCESS) {
            char log[8192] = "";
            clGetProgramBuildInfo(pr, dev, CL_PROGRAM_BUILD_LOG, sizeof log, log, NULL);
            fprintf(stderr, "build failed (%s):\n%s\n", opts, log);
            return 1;
        }
        cl_kernel k = clCreateKernel(pr, "stage", &e);
        for (size_t si = 0; si < sizeof spans / sizeof spans[0]; si++) {
            cl_mem buf = clCreateBuffer(ctx, CL_MEM_READ_WRITE, spans[si], NULL, &e);
            if (e != CL_SUCCESS) {
                printf("span %zu MiB: no buffer (%d)\n", spans[si] >> 20, e);
                continue;
            }
            const cl_uint one = 0x01010101u;
            clEnqueueFillBuffer(q, buf, &one, sizeof one, 0, spans[si], 0, NULL, NULL);
            const cl_uint ntiles = (cl_uint)(spans[si] / forms[fi].tile), iters = ITERS;
            for (size_t pi = 0; pi < sizeof per_cu / sizeof per_cu[0]; pi++) {
                const size_t lws = 128, gws = (size_t)cus * per_cu[pi] * lws;
                clSetKernelArg(k, 0, sizeof buf, &buf);
                clSetKernelArg(k, 1, sizeof ntiles, &ntiles);
                clSetKernelArg(k, 2, sizeof iters, &iters);
                clSetKernelArg(k, 3, local, NULL);
                clSetKernelArg(k, 4, sizeof out, &out);
                double best = 0.0;
                for (int r = 0; r <= RUNS; r++) {
                    cl_event ev = NULL;
                    e = clEnqueueNDRangeKernel(q, k, 1, NULL, &gws, &lws, 0, NULL, &ev);
                    if (e != CL_SUCCESS || clWaitForEvents(1, &ev) != CL_SUCCESS) {
                        printf("enqueue failed: %d\n", e);
                        return 1;
                    }
                    cl_ulong t0 = 0, t1 = 0;
                    clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, sizeof t0, &t0, NULL);
                    clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL);
                    clReleaseEvent(ev);
                    const double gbs =
                        (double)gws / lws * iters * forms[fi].tile / (double)(t1 - t0);
                    if (r > 0 && gbs > best)
                        best = gbs;
                }
                printf("tile %2d KiB x %d in flight  span %4zu MiB  %d work-groups per CU: "
                       "%8.1f GB/s\n",
                       forms[fi].tile >> 10, forms[fi].slots, spans[si] >> 20, per_cu[pi], best);
            }
            clReleaseMemObject(buf);
        }
        clReleaseKernel(k);
    }
    clReleaseMemObject(out);
    clReleaseProgram(pr);
    clReleaseCommandQueue(q);
    clReleaseContext(ctx);
    return 0;
}
