/* OpenCL plumbing shared by the op launchers: error names, buffers, reads and
 * writes, enqueueing, the temp buffer and argument checks of the cl_mem entry
 * points. Command chains are in cl-chain.c, device-side checks in device-check.c. */
#include "runtime/runtime.h"

#if CLVARLEN_HAVE_OPENCL

#include <stdio.h>

const char *cv_cl_error_name(cl_int err)
{
    switch (err) {
#define E(x) \
    case x: return #x
        E(CL_SUCCESS);
        E(CL_DEVICE_NOT_FOUND);
        E(CL_DEVICE_NOT_AVAILABLE);
        E(CL_COMPILER_NOT_AVAILABLE);
        E(CL_MEM_OBJECT_ALLOCATION_FAILURE);
        E(CL_OUT_OF_RESOURCES);
        E(CL_OUT_OF_HOST_MEMORY);
        E(CL_PROFILING_INFO_NOT_AVAILABLE);
        E(CL_MEM_COPY_OVERLAP);
        E(CL_IMAGE_FORMAT_MISMATCH);
        E(CL_IMAGE_FORMAT_NOT_SUPPORTED);
        E(CL_BUILD_PROGRAM_FAILURE);
        E(CL_MAP_FAILURE);
        E(CL_MISALIGNED_SUB_BUFFER_OFFSET);
        E(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST);
        E(CL_INVALID_VALUE);
        E(CL_INVALID_DEVICE_TYPE);
        E(CL_INVALID_PLATFORM);
        E(CL_INVALID_DEVICE);
        E(CL_INVALID_CONTEXT);
        E(CL_INVALID_QUEUE_PROPERTIES);
        E(CL_INVALID_COMMAND_QUEUE);
        E(CL_INVALID_HOST_PTR);
        E(CL_INVALID_MEM_OBJECT);
        E(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR);
        E(CL_INVALID_IMAGE_SIZE);
        E(CL_INVALID_SAMPLER);
        E(CL_INVALID_BINARY);
        E(CL_INVALID_BUILD_OPTIONS);
        E(CL_INVALID_PROGRAM);
        E(CL_INVALID_PROGRAM_EXECUTABLE);
        E(CL_INVALID_KERNEL_NAME);
        E(CL_INVALID_KERNEL_DEFINITION);
        E(CL_INVALID_KERNEL);
        E(CL_INVALID_ARG_INDEX);
        E(CL_INVALID_ARG_VALUE);
        E(CL_INVALID_ARG_SIZE);
        E(CL_INVALID_KERNEL_ARGS);
        E(CL_INVALID_WORK_DIMENSION);
        E(CL_INVALID_WORK_GROUP_SIZE);
        E(CL_INVALID_WORK_ITEM_SIZE);
        E(CL_INVALID_GLOBAL_OFFSET);
        E(CL_INVALID_EVENT_WAIT_LIST);
        E(CL_INVALID_EVENT);
        E(CL_INVALID_OPERATION);
        E(CL_INVALID_GL_OBJECT);
        E(CL_INVALID_BUFFER_SIZE);
        E(CL_INVALID_GLOBAL_WORK_SIZE);
        E(CL_INVALID_PROPERTY);
#undef E
    }
    return "CL_UNKNOWN_ERROR";
}

clvarlen_status cv_cl_check(clvarlen_context *ctx, cl_int err, const char *what)
{
    if (err == CL_SUCCESS)
        return CLVARLEN_SUCCESS;
    clvarlen_status st = CLVARLEN_ERROR_OPENCL;
    if (err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_HOST_MEMORY ||
        err == CL_INVALID_BUFFER_SIZE)
        st = CLVARLEN_ERROR_OUT_OF_MEMORY;
    return cv_error(ctx, st, "%s: %s (%d)", what, cv_cl_error_name(err), (int)err);
}

clvarlen_status cv_enqueue(clvarlen_context *ctx, cl_kernel kernel, const char *what, cl_uint dims,
                           const size_t *global, const size_t *local, cl_uint num_events,
                           const cl_event *wait_list, cl_event *event)
{
    size_t g[3];
    for (cl_uint i = 0; i < dims && i < 3; i++) {
        g[i] = global[i];
        if (local && local[i] > 0)
            g[i] = (g[i] + local[i] - 1) / local[i] * local[i];
        if (g[i] == 0)
            return cv_error(ctx, CLVARLEN_ERROR_INTERNAL, "%s: empty NDRange", what);
    }
    cl_int err = clEnqueueNDRangeKernel(ctx->queue, kernel, dims, NULL, g, local, num_events,
                                        num_events ? wait_list : NULL, event);
    return cv_cl_check(ctx, err, what);
}

clvarlen_status cv_buffer(clvarlen_context *ctx, size_t bytes, const void *init, cl_mem *mem)
{
    *mem = NULL;
    cl_int err = CL_SUCCESS;
    size_t alloc = bytes < 16 ? 16 : bytes;
    /* OpenCL refuses zero-size buffers, and a copy flag with fewer host bytes than the
     * allocation would over-read: pad, then write the real bytes. */
    cl_mem m = clCreateBuffer(ctx->cl_ctx, CL_MEM_READ_WRITE, alloc, NULL, &err);
    if (err != CL_SUCCESS)
        return cv_cl_check(ctx, err, "clCreateBuffer");
    if (init && bytes > 0) {
        err = clEnqueueWriteBuffer(ctx->queue, m, CL_TRUE, 0, bytes, init, 0, NULL, NULL);
        if (err != CL_SUCCESS) {
            clReleaseMemObject(m);
            return cv_cl_check(ctx, err, "clEnqueueWriteBuffer");
        }
    }
    *mem = m;
    return CLVARLEN_SUCCESS;
}

clvarlen_status cv_read(clvarlen_context *ctx, cl_mem mem, size_t offset, size_t bytes, void *host,
                        cl_uint num_events, const cl_event *wait_list)
{
    if (bytes == 0) {
        if (num_events)
            return cv_cl_check(ctx, clWaitForEvents(num_events, wait_list), "clWaitForEvents");
        return CLVARLEN_SUCCESS;
    }
    return cv_cl_check(ctx,
                       clEnqueueReadBuffer(ctx->queue, mem, CL_TRUE, offset, bytes, host,
                                           num_events, num_events ? wait_list : NULL, NULL),
                       "clEnqueueReadBuffer");
}

clvarlen_status cv_write(clvarlen_context *ctx, cl_mem mem, size_t offset, size_t bytes,
                         const void *host, cl_uint num_events, const cl_event *wait_list,
                         cl_event *event)
{
    if (event)
        *event = NULL;
    if (bytes == 0)
        return CLVARLEN_SUCCESS;
    return cv_cl_check(ctx,
                       clEnqueueWriteBuffer(ctx->queue, mem, CL_TRUE, offset, bytes, host,
                                            num_events, num_events ? wait_list : NULL, event),
                       "clEnqueueWriteBuffer");
}

clvarlen_status cv_read_rows(clvarlen_context *ctx, cl_mem mem, int64_t rows, size_t row_bytes,
                             size_t dev_stride_b, void *host, size_t host_stride_b,
                             cl_uint num_events, const cl_event *wait_list)
{
    if (rows <= 0 || row_bytes == 0)
        return CLVARLEN_SUCCESS;
    if (rows == 1 || (dev_stride_b == row_bytes && host_stride_b == row_bytes))
        return cv_read(ctx, mem, 0, (size_t)(rows - 1) * dev_stride_b + row_bytes, host,
                       num_events, wait_list);
    /* A rect spans whole pitches, so it stops one row short of the buffer's
     * end (NVIDIA refuses a rect past it); the last row is read plainly. */
    size_t origin[3] = {0, 0, 0};
    size_t region[3] = {row_bytes, (size_t)rows - 1, 1};
    cl_int err = clEnqueueReadBufferRect(ctx->queue, mem, CL_TRUE, origin, origin, region,
                                         dev_stride_b, 0, host_stride_b, 0, host, num_events,
                                         num_events ? wait_list : NULL, NULL);
    if (err != CL_SUCCESS)
        return cv_cl_check(ctx, err, "clEnqueueReadBufferRect");
    return cv_read(ctx, mem, (size_t)(rows - 1) * dev_stride_b, row_bytes,
                   (char *)host + (size_t)(rows - 1) * host_stride_b, 0, NULL);
}

clvarlen_status cv_temp(clvarlen_context *ctx, size_t bytes, cl_mem *mem)
{
    if (ctx->temp_user && ctx->temp_bytes < bytes)
        return cv_error(ctx, CLVARLEN_ERROR_BUFFER_TOO_SMALL,
                        "the scratch buffer of clvarlen_cl_context_set_scratch has %zu bytes; "
                        "this call needs %zu",
                        ctx->temp_bytes, bytes);
    if (!ctx->temp || ctx->temp_bytes < bytes) {
        size_t size = CV_MAX(bytes, 2 * ctx->temp_bytes);
        size = (size + 4095) & ~(size_t)4095;
        cl_mem m = NULL;
        clvarlen_status st = cv_buffer(ctx, size, NULL, &m);
        if (st != CLVARLEN_SUCCESS)
            return st;
        cv_release(&ctx->temp); /* commands still using it keep it alive */
        ctx->temp = m;
        ctx->temp_bytes = size;
    }
    *mem = ctx->temp;
    return CLVARLEN_SUCCESS;
}

void cv_release(cl_mem *mem)
{
    if (mem && *mem) {
        clReleaseMemObject(*mem);
        *mem = NULL;
    }
}

clvarlen_status cv_cl_enter(clvarlen_context *ctx, const char *fn, cl_uint num_events,
                            const cl_event *wait_list)
{
    if (!ctx->has_cl)
        return cv_error(ctx, CLVARLEN_ERROR_NO_OPENCL,
                        "%s: the context runs on the CPU fallback; use the host-memory entry point",
                        fn);
    if ((num_events > 0) != (wait_list != NULL))
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: num_events is %u but wait_list is %s", fn, (unsigned)num_events,
                        wait_list ? "set" : "NULL");
    return CLVARLEN_SUCCESS;
}

clvarlen_status cv_check_offset(clvarlen_context *ctx, const char *fn, const char *what,
                                size_t offset, size_t align)
{
    if (align > 1 && offset % align != 0)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: %s offset %zu is not a multiple of its element size %zu", fn, what,
                        offset, align);
    return CLVARLEN_SUCCESS;
}

clvarlen_status cv_check_mem_arg(clvarlen_context *ctx, const char *fn, const cv_mem_arg *a)
{
    if (!a->mem)
        return a->needed ? cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: %s is NULL", fn,
                                    a->name)
                         : CLVARLEN_SUCCESS;
    clvarlen_status st = cv_check_offset(ctx, fn, a->name, a->offset, a->align);
    if (st != CLVARLEN_SUCCESS)
        return st;
    uint64_t bytes = cv_extent_span(&a->ext);
    if (bytes == 0)
        return CLVARLEN_SUCCESS;
    size_t size = 0;
    cl_int err = clGetMemObjectInfo(a->mem, CL_MEM_SIZE, sizeof size, &size, NULL);
    if (err != CL_SUCCESS)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: %s is not a valid buffer (%s)",
                        fn, a->name, cv_cl_error_name(err));
    if (a->offset > size || bytes > (uint64_t)(size - a->offset))
        return cv_error(ctx, CLVARLEN_ERROR_BUFFER_TOO_SMALL,
                        "%s: %s needs %llu bytes from offset %zu but the buffer has %zu bytes", fn,
                        a->name, (unsigned long long)bytes, a->offset, size);
    return CLVARLEN_SUCCESS;
}

/* The buffer a cl_mem's bytes live in, and its offset there (sub-buffers). */
static void mem_root(cl_mem m, const void **root, uint64_t *offset)
{
    cl_mem parent = NULL;
    size_t off = 0;
    *root = m;
    *offset = 0;
    if (clGetMemObjectInfo(m, CL_MEM_ASSOCIATED_MEMOBJECT, sizeof parent, &parent, NULL) !=
            CL_SUCCESS ||
        !parent)
        return;
    if (clGetMemObjectInfo(m, CL_MEM_OFFSET, sizeof off, &off, NULL) != CL_SUCCESS)
        return;
    *root = parent;
    *offset = off;
}

clvarlen_status cv_check_mem_args(clvarlen_context *ctx, const char *fn, const cv_mem_arg *a,
                                  size_t n)
{
    cv_region r[32];
    if (n > 32)
        return cv_error(ctx, CLVARLEN_ERROR_INTERNAL, "%s: too many buffer arguments", fn);
    bool any_output = false;
    for (size_t i = 0; i < n; i++) {
        clvarlen_status st = cv_check_mem_arg(ctx, fn, &a[i]);
        if (st != CLVARLEN_SUCCESS)
            return st;
        any_output = any_output || (a[i].mem && a[i].output);
    }
    if (!any_output)
        return CLVARLEN_SUCCESS;
    for (size_t i = 0; i < n; i++) {
        uint64_t base = 0;
        r[i] = (cv_region){.name = a[i].name, .ext = a[i].ext, .output = a[i].output,
                           .may_equal = a[i].may_equal};
        if (!a[i].mem) {
            r[i].ext.rows = 0;
            continue;
        }
        mem_root(a[i].mem, &r[i].space, &base);
        r[i].ext.start = base + a[i].offset;
    }
    return cv_check_no_overlap(ctx, fn, r, n);
}

#endif /* CLVARLEN_HAVE_OPENCL */
