/* Preloaded ahead of Oclgrind's runtime by run-oclgrind.sh, for two faults of
 * Oclgrind 21.10's --uninitialized bookkeeping of host writes:
 *
 * - clEnqueueFillBuffer does not mark memory initialised (clEnqueueWriteBuffer
 *   and CL_MEM_COPY_HOST_PTR do), so every kernel reading a filled buffer
 *   (the library fills temporaries with -1 or 0 before kernels scatter into
 *   them) would be reported as reading uninitialised memory. Here a fill is a
 *   blocking write of the repeated pattern, which is what a fill means; the
 *   fill's own argument rules are checked here (a violation is reported on
 *   stderr in Oclgrind's words, which run-oclgrind.sh fails on).
 * - clEnqueueWriteBuffer at a non-zero offset marks the bytes at the start of
 *   the buffer instead of those written (a write of 64 bytes at offset 64
 *   leaves [64, 128) "uninitialised" and [0, 64) "initialised"). Here such a
 *   write becomes a blocking read of [0, offset) followed by a blocking write
 *   of [0, offset + size) at offset 0: the right bytes are marked, and
 *   [0, offset) too, which Oclgrind's own fault marks anyway.
 *
 * Everything else goes to Oclgrind unchanged, and --check-api checks it.
 */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef cl_int(CL_API_CALL *write_fn)(cl_command_queue, cl_mem, cl_bool, size_t, size_t,
                                       const void *, cl_uint, const cl_event *, cl_event *);

CL_API_ENTRY cl_int CL_API_CALL clEnqueueWriteBuffer(cl_command_queue queue, cl_mem buffer,
                                                     cl_bool blocking, size_t offset, size_t size,
                                                     const void *ptr, cl_uint num_events,
                                                     const cl_event *wait_list, cl_event *event)
{
    static write_fn next;
    if (!next) /* POSIX: a function pointer read through a void * (ISO C has no such cast) */
        *(void **)&next = dlsym(RTLD_NEXT, "clEnqueueWriteBuffer");
    if (!next)
        return CL_INVALID_OPERATION;
    if (offset == 0 || size == 0 || !ptr)
        return next(queue, buffer, blocking, offset, size, ptr, num_events, wait_list, event);
    unsigned char *host = malloc(offset + size);
    if (!host)
        return CL_OUT_OF_HOST_MEMORY;
    cl_int err = clEnqueueReadBuffer(queue, buffer, CL_TRUE, 0, offset, host, num_events,
                                     wait_list, NULL);
    if (err == CL_SUCCESS) {
        memcpy(host + offset, ptr, size);
        err = next(queue, buffer, CL_TRUE, 0, offset + size, host, 0, NULL, event);
    }
    free(host);
    return err;
}

CL_API_ENTRY cl_int CL_API_CALL clEnqueueFillBuffer(cl_command_queue queue, cl_mem buffer,
                                                    const void *pattern, size_t pattern_size,
                                                    size_t offset, size_t size,
                                                    cl_uint num_events,
                                                    const cl_event *wait_list, cl_event *event)
{
    static const size_t sizes[] = {1, 2, 4, 8, 16, 32, 64, 128};
    int ok_size = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        ok_size |= pattern_size == sizes[i];
    if (!pattern || !ok_size || offset % pattern_size || size % pattern_size) {
        fprintf(stderr,
                "Oclgrind - OpenCL runtime error detected\n"
                "\tFunction: clEnqueueFillBuffer (fill-shim)\n"
                "\tError:    CL_INVALID_VALUE\n"
                "\tpattern %p of %zu bytes, offset %zu, size %zu\n",
                pattern, pattern_size, offset, size);
        return CL_INVALID_VALUE;
    }
    unsigned char *host = malloc(size ? size : 1);
    if (!host)
        return CL_OUT_OF_HOST_MEMORY;
    for (size_t o = 0; o < size; o += pattern_size)
        memcpy(host + o, pattern, pattern_size);
    cl_int err = clEnqueueWriteBuffer(queue, buffer, CL_TRUE, offset, size, host, num_events,
                                      wait_list, event);
    free(host);
    return err;
}
