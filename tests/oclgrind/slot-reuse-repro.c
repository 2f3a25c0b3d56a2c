/* Oclgrind 21.10 --uninitialized: a buffer in a reused slot inherits the freed
 * buffer's shadow (fill-shim.c says more). No library code: with "reuse", a
 * 16-byte buffer is written from the host and released, then a 256-byte
 * buffer (which takes its slot) is filled by one kernel and read by another.
 * Every element is written before it is read, yet Oclgrind reports
 * "Controlflow depends on uninitialized value" in `use` for elements 4..63
 * (past the old buffer's 16 bytes); with "fresh" (no released buffer) it
 * reports nothing, and with fill-shim.so preloaded nothing either. The
 * results are right in every mode. check-slot-reuse.sh runs the three. */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

#include <stdio.h>
#include <string.h>

static const char *src =
    "__kernel void fill(__global int *b) { size_t i = get_global_id(0); b[i] = (int)i; }\n"
    "__kernel void use(__global const int *b, __global int *out)\n"
    "{ size_t i = get_global_id(0); int r = 0; if (b[i] > 2) r = 1; out[i] = r; }\n";

int main(int argc, char **argv)
{
    const int reuse = argc > 1 && strcmp(argv[1], "reuse") == 0;
    enum { N = 64 };
    cl_platform_id p;
    cl_device_id d;
    cl_int e = clGetPlatformIDs(1, &p, NULL);
    if (e == CL_SUCCESS)
        e = clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 1, &d, NULL);
    if (e != CL_SUCCESS) {
        fprintf(stderr, "slot-reuse-repro: no OpenCL device (%d)\n", (int)e);
        return 77;
    }
    cl_context c = clCreateContext(NULL, 1, &d, NULL, NULL, &e);
    cl_command_queue q = clCreateCommandQueue(c, d, 0, &e);
    if (reuse) {
        const int small[4] = {0};
        cl_mem s = clCreateBuffer(c, CL_MEM_READ_WRITE, sizeof small, NULL, &e);
        clEnqueueWriteBuffer(q, s, CL_TRUE, 0, sizeof small, small, 0, NULL, NULL);
        clReleaseMemObject(s);
    }
    cl_mem b = clCreateBuffer(c, CL_MEM_READ_WRITE, N * sizeof(int), NULL, &e);
    cl_mem o = clCreateBuffer(c, CL_MEM_READ_WRITE, N * sizeof(int), NULL, &e);
    cl_program pr = clCreateProgramWithSource(c, 1, &src, NULL, &e);
    e = clBuildProgram(pr, 1, &d, "-cl-opt-disable", NULL, NULL);
    cl_kernel kf = clCreateKernel(pr, "fill", &e), ku = clCreateKernel(pr, "use", &e);
    clSetKernelArg(kf, 0, sizeof b, &b);
    clSetKernelArg(ku, 0, sizeof b, &b);
    clSetKernelArg(ku, 1, sizeof o, &o);
    const size_t g = N;
    clEnqueueNDRangeKernel(q, kf, 1, NULL, &g, NULL, 0, NULL, NULL);
    clEnqueueNDRangeKernel(q, ku, 1, NULL, &g, NULL, 0, NULL, NULL);
    int out[N];
    e = clEnqueueReadBuffer(q, o, CL_TRUE, 0, sizeof out, out, 0, NULL, NULL);
    int bad = e != CL_SUCCESS;
    for (int i = 0; i < N && !bad; i++)
        bad = out[i] != (i > 2);
    printf("slot-reuse-repro %s: results %s\n", reuse ? "reuse" : "fresh", bad ? "WRONG" : "right");
    clReleaseKernel(kf);
    clReleaseKernel(ku);
    clReleaseProgram(pr);
    clReleaseMemObject(b);
    clReleaseMemObject(o);
    clReleaseCommandQueue(q);
    clReleaseContext(c);
    return bad;
}
