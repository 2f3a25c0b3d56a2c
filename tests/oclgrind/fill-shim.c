/* Preloaded ahead of Oclgrind's runtime by run-oclgrind.sh, for three faults of
 * Oclgrind 21.10's --uninitialized bookkeeping of global memory:
 *
 * - clEnqueueFillBuffer does not mark memory initialised (clEnqueueWriteBuffer
 *   and CL_MEM_COPY_HOST_PTR do), so every kernel reading a filled buffer
 *   (the library fills temporaries with -1 or 0 before kernels scatter into
 *   them) would be reported as reading uninitialised memory. Here a fill is a
 *   blocking write of the repeated pattern, which is what a fill means; the
 *   fill's own argument rules are checked here (a violation is reported on
 *   stderr in Oclgrind's words, which run-oclgrind.sh fails on).
 * - A host write replaces the buffer's shadow with an initialised one of the
 *   write's size, placed at the buffer's start (a write of 64 bytes at
 *   offset 64 leaves [64, 128) "uninitialised" and [0, 64) "initialised";
 *   a write of [0, 64) into a 4 KiB buffer leaves a 64-byte shadow, so
 *   every later kernel store past byte 64 is dropped and a load there is
 *   "uninitialised": segment-cp-unfused's search over cu in the context's
 *   temporary, after an earlier case filled part of it). Here a write that
 *   does not cover the whole buffer becomes a blocking read of the whole
 *   buffer and a blocking write of it back, the caller's bytes in place:
 *   the shadow keeps the buffer's size. The cost: once written from the
 *   host, a buffer counts as initialised everywhere, so Oclgrind misses a
 *   kernel reading bytes of it that nothing wrote.
 * - A released buffer's slot is reused, but not its shadow: Oclgrind keeps
 *   global memory in numbered slots and gives a freed slot to the next
 *   clCreateBuffer, while the --uninitialized plugin keeps the freed
 *   buffer's shadow (its size and its initialised bytes) for that slot and
 *   creates a fresh, all-uninitialised shadow only for a slot it has never
 *   seen. A new buffer larger than the old one then loses every kernel store
 *   past the old size (a later load there is "uninitialised": a false
 *   report), and one no larger reads the old buffer's initialised bytes as
 *   its own (a missed report). slot-reuse-repro.c shows it with no library
 *   code. Here, when a release frees a buffer (its last reference), a
 *   one-byte placeholder buffer takes the freed slot and is never released,
 *   so every buffer the library creates gets a slot of its own. A release
 *   that leaves references (a queued command still using the buffer, as
 *   when cv_temp grows the context's temporary) is not passed on: Oclgrind
 *   would free the slot later, out of the shim's sight, so the buffer is
 *   kept instead (a few temporaries in a test run).
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
    size_t whole = 0;
    clGetMemObjectInfo(buffer, CL_MEM_SIZE, sizeof whole, &whole, NULL);
    if (size == 0 || !ptr || (offset == 0 && size >= whole))
        return next(queue, buffer, blocking, offset, size, ptr, num_events, wait_list, event);
    unsigned char *host = malloc(whole);
    if (!host)
        return CL_OUT_OF_HOST_MEMORY;
    cl_int err = clEnqueueReadBuffer(queue, buffer, CL_TRUE, 0, whole, host, num_events,
                                     wait_list, NULL);
    if (err == CL_SUCCESS) {
        memcpy(host + offset, ptr, size);
        err = next(queue, buffer, CL_TRUE, 0, whole, host, 0, NULL, event);
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

typedef cl_int(CL_API_CALL *release_fn)(cl_mem);

CL_API_ENTRY cl_int CL_API_CALL clReleaseMemObject(cl_mem mem)
{
    static release_fn next;
    if (!next)
        *(void **)&next = dlsym(RTLD_NEXT, "clReleaseMemObject");
    if (!next)
        return CL_INVALID_OPERATION;
    /* a buffer (not a sub-buffer, not an image) losing its last reference */
    cl_uint refs = 0;
    cl_mem_object_type type = 0;
    cl_mem parent = NULL;
    cl_context ctx = NULL;
    int frees_slot =
        clGetMemObjectInfo(mem, CL_MEM_REFERENCE_COUNT, sizeof refs, &refs, NULL) == CL_SUCCESS &&
        clGetMemObjectInfo(mem, CL_MEM_TYPE, sizeof type, &type, NULL) == CL_SUCCESS &&
        clGetMemObjectInfo(mem, CL_MEM_ASSOCIATED_MEMOBJECT, sizeof parent, &parent, NULL) ==
            CL_SUCCESS &&
        clGetMemObjectInfo(mem, CL_MEM_CONTEXT, sizeof ctx, &ctx, NULL) == CL_SUCCESS &&
        refs == 1 && type == CL_MEM_OBJECT_BUFFER && !parent;
    if (frees_slot == 0 && refs > 1 && type == CL_MEM_OBJECT_BUFFER && !parent)
        return CL_SUCCESS; /* kept: see above */
    cl_int err = next(mem);
    if (err == CL_SUCCESS && frees_slot) {
        /* takes a freed slot (the oldest; this one unless an earlier free got none) for good */
        cl_int e2 = CL_SUCCESS;
        (void)clCreateBuffer(ctx, CL_MEM_READ_WRITE, 1, NULL, &e2);
    }
    return err;
}
