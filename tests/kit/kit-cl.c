/* The OpenCL part of the test kit (kit-cl.h). */
#include "kit-cl.h"

#include <stdlib.h>
#include <string.h>

unsigned char tu_clbuf_pattern(size_t i)
{
    return (unsigned char)(0x5Au ^ (i * 13u));
}

static cl_context cl_ctx_of(clvarlen_context *ctx, cl_command_queue *queue)
{
    cl_context c = NULL;
    cl_command_queue q = NULL;
    clvarlen_status st = clvarlen_context_get_cl(ctx, &c, NULL, &q);
    tu_check(st == CLVARLEN_SUCCESS, "clvarlen_context_get_cl: %s",
             clvarlen_last_error(ctx));
    if (queue)
        *queue = q;
    return c;
}

/* A buffer of off + bytes + TU_CLBUF_GUARD bytes: the region [off, off + bytes) holds `init`
 * (or the pattern when init is NULL), everything else the pattern. */
tu_clbuf tu_clbuf_make(clvarlen_context *ctx, size_t bytes, size_t off, const void *init)
{
    tu_clbuf d;
    cl_command_queue q;
    cl_context c = cl_ctx_of(ctx, &q);
    d.off = off;
    d.bytes = bytes;
    d.size = off + bytes + TU_CLBUF_GUARD;
    d.host = tu_xmalloc(d.size);
    for (size_t i = 0; i < d.size; i++)
        d.host[i] = tu_clbuf_pattern(i);
    if (init && bytes)
        memcpy(d.host + off, init, bytes);
    cl_int err = CL_SUCCESS;
    d.mem = clCreateBuffer(c, CL_MEM_READ_WRITE, d.size, NULL, &err);
    tu_check(err == CL_SUCCESS, "clCreateBuffer(%zu): %d", d.size, (int)err);
    err = clEnqueueWriteBuffer(q, d.mem, CL_TRUE, 0, d.size, d.host, 0, NULL, NULL);
    tu_check(err == CL_SUCCESS, "clEnqueueWriteBuffer: %d", (int)err);
    return d;
}

/* Reads the whole buffer back (after the queue drains) and checks the guard bytes. */
void *tu_clbuf_fetch(clvarlen_context *ctx, tu_clbuf *d, const char *label)
{
    cl_command_queue q;
    (void)cl_ctx_of(ctx, &q);
    cl_int err = clEnqueueReadBuffer(q, d->mem, CL_TRUE, 0, d->size, d->host, 0, NULL, NULL);
    tu_check(err == CL_SUCCESS, "%s: clEnqueueReadBuffer: %d", label, (int)err);
    for (size_t i = 0; i < d->off; i++)
        tu_check(d->host[i] == tu_clbuf_pattern(i), "%s: byte %zu before the region written",
                 label, i);
    for (size_t i = d->off + d->bytes; i < d->size; i++)
        tu_check(d->host[i] == tu_clbuf_pattern(i), "%s: byte %zu after the region written",
                 label, i - d->off - d->bytes);
    return d->host + d->off;
}

/* The region must still hold the pattern (nothing written at all). */
void tu_clbuf_untouched(clvarlen_context *ctx, tu_clbuf *d, const char *label)
{
    (void)tu_clbuf_fetch(ctx, d, label);
    for (size_t i = d->off; i < d->off + d->bytes; i++)
        tu_check(d->host[i] == tu_clbuf_pattern(i), "%s: region byte %zu written", label,
                 i - d->off);
}

void tu_clbuf_free(tu_clbuf *d)
{
    if (d->mem)
        clReleaseMemObject(d->mem);
    free(d->host);
    d->mem = NULL;
    d->host = NULL;
}

void tu_cl_wait_release(cl_event *ev, const char *label)
{
    tu_check(*ev != NULL, "%s: no event returned", label);
    cl_int err = clWaitForEvents(1, ev);
    tu_check(err == CL_SUCCESS, "%s: clWaitForEvents: %d", label, (int)err);
    cl_int status = 0;
    clGetEventInfo(*ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, NULL);
    tu_check(status == CL_COMPLETE, "%s: event status %d", label, (int)status);
    clReleaseEvent(*ev);
    *ev = NULL;
}

