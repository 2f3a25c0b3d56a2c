/* bench-clblast-chunk: CLBlast's strided batched SGEMM on the gated delta
 * rule's chunk shapes (chunk 64, K = V = 128, 32 value heads), the numbers
 * behind the choice of a fused chunk kernel over CLBlast (docs/PERFORMANCE.md).
 * Not installed; built when CLBlast is found.
 *
 *   bench-clblast-chunk [DEVICE-SUBSTRING]   (default: the first GPU)
 *
 * SPDX-License-Identifier: MIT
 */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <clblast_c.h>

#include "bench-cl-device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WARMUP 2
#define RUNS 10

/* Best device time (s) of C[b] = A[b] * B[b] (B transposed if transb), row-major; < 0 on error. */
static double time_gemm(cl_command_queue q, size_t m, size_t n, size_t k, size_t batch, cl_mem a,
                        cl_mem b, cl_mem c, int transb)
{
    double best = -1.0;
    for (int it = 0; it < WARMUP + RUNS; it++) {
        cl_event ev = NULL;
        CLBlastStatusCode s = CLBlastSgemmStridedBatched(
            CLBlastLayoutRowMajor, CLBlastTransposeNo,
            transb ? CLBlastTransposeYes : CLBlastTransposeNo, m, n, k, 1.0f, a, 0, k, m * k, b,
            0, transb ? k : n, k * n, 0.0f, c, 0, n, m * n, batch, &q, &ev);
        if (s != CLBlastSuccess) {
            fprintf(stderr, "bench-clblast-chunk: CLBlastSgemmStridedBatched: status %d\n",
                    (int)s);
            return -1.0;
        }
        cl_ulong t0 = 0, t1 = 0;
        cl_int e = clWaitForEvents(1, &ev);
        if (e == CL_SUCCESS)
            e = clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, sizeof t0, &t0, NULL);
        if (e == CL_SUCCESS)
            e = clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL);
        clReleaseEvent(ev);
        if (e != CL_SUCCESS || t1 < t0) {
            fprintf(stderr, "bench-clblast-chunk: profiling failed (%d)\n", (int)e);
            return -1.0;
        }
        double t = (double)(t1 - t0) * 1e-9;
        if (it >= WARMUP && (best < 0.0 || t < best))
            best = t;
    }
    return best;
}

int main(int argc, char **argv)
{
    char name[256] = "";
    cl_device_id dev = pick_device(argc > 1 ? argv[1] : NULL, name, sizeof name);
    if (!dev) {
        fprintf(stderr, "bench-clblast-chunk: no %s device\n", argc > 1 ? argv[1] : "GPU");
        return 3;
    }
    cl_int e = CL_SUCCESS;
    cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &e);
    cl_command_queue q =
        e == CL_SUCCESS ? clCreateCommandQueue(ctx, dev, CL_QUEUE_PROFILING_ENABLE, &e) : NULL;
    if (e != CL_SUCCESS) {
        fprintf(stderr, "bench-clblast-chunk: cannot create a context and queue (%d)\n", (int)e);
        return 3;
    }
    /* Chunks of 64 tokens (partial chunks counted whole) times 32 value heads. */
    static const struct {
        const char *batch;
        size_t chunks;
    } cases[] = {{"16 seqs / 16384 tokens", 272 * 32}, {"64 seqs / 8192 tokens", 192 * 32}};
    printf("device: %s\n", name);
    int rc = 0;
    for (size_t w = 0; w < sizeof cases / sizeof cases[0] && rc == 0; w++) {
        size_t B = cases[w].chunks, bytes = B * 64 * 128 * sizeof(float);
        cl_mem a = clCreateBuffer(ctx, CL_MEM_READ_WRITE, bytes, NULL, &e);
        cl_mem b = e == CL_SUCCESS ? clCreateBuffer(ctx, CL_MEM_READ_WRITE, bytes, NULL, &e) : NULL;
        cl_mem c = e == CL_SUCCESS ? clCreateBuffer(ctx, CL_MEM_READ_WRITE, bytes, NULL, &e) : NULL;
        const float zero = 0.0f;
        if (e == CL_SUCCESS)
            e = clEnqueueFillBuffer(q, a, &zero, sizeof zero, 0, bytes, 0, NULL, NULL);
        if (e == CL_SUCCESS)
            e = clEnqueueFillBuffer(q, b, &zero, sizeof zero, 0, bytes, 0, NULL, NULL);
        if (e == CL_SUCCESS)
            e = clFinish(q);
        double kkt = -1.0, wu = -1.0;
        if (e == CL_SUCCESS) {
            kkt = time_gemm(q, 64, 64, 128, B, a, b, c, 1); /* K K^T, Q K^T */
            wu = kkt > 0.0 ? time_gemm(q, 64, 128, 64, B, a, b, c, 0) : -1.0; /* W, U, P V */
        }
        if (kkt > 0.0 && wu > 0.0) {
            printf("%s, %zu chunks: [64x128][128x64]^T %.1f us (%.2f TFLOP/s), "
                   "[64x64][64x128] %.1f us (%.2f TFLOP/s); the five intra-chunk products "
                   "%.2f ms\n",
                   cases[w].batch, B, kkt * 1e6, 2.0 * 64 * 64 * 128 * (double)B / kkt * 1e-12,
                   wu * 1e6, 2.0 * 64 * 128 * 64 * (double)B / wu * 1e-12,
                   (2.0 * kkt + 3.0 * wu) * 1e3);
        } else {
            fprintf(stderr, "bench-clblast-chunk: %s failed (%d)\n", cases[w].batch, (int)e);
            rc = 1;
        }
        if (a)
            clReleaseMemObject(a);
        if (b)
            clReleaseMemObject(b);
        if (c)
            clReleaseMemObject(c);
    }
    clReleaseCommandQueue(q);
    clReleaseContext(ctx);
    return rc;
}
