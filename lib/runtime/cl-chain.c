/* Command chains: the one way the op families enqueue work. Each command
 * runs after the previous one (the context's queue is in order: contexts
 * refuse out-of-order queues) and the first waits for the caller's wait list;
 * the chain owns its last event, made only when the caller wants it, and
 * cv_chain_end either hands it to the caller or releases it, so no launcher
 * handles events itself.
 */
#include "runtime/runtime.h"

#if CLVARLEN_HAVE_CLBLAST
#include <clblast_c.h>
#endif

#if CLVARLEN_HAVE_OPENCL

clvarlen_status cv_chain_begin(cv_chain *c, clvarlen_context *ctx, cl_uint num_events,
                               const cl_event *wait_list, bool want_event, bool checks)
{
    c->ctx = ctx;
    c->num_events = num_events;
    c->wait_list = num_events ? wait_list : NULL;
    c->last = NULL;
    c->flag = NULL;
    c->want_event = want_event;
    c->started = false;
    if (!checks)
        return CLVARLEN_SUCCESS;
    return cv_check_begin(ctx, &c->flag);
}

void cv_chain_wait_list(const cv_chain *c, cl_uint *num_events, const cl_event **wait_list)
{
    if (c->last) {
        *num_events = 1;
        *wait_list = &c->last;
    } else if (c->started) { /* the queue is in order */
        *num_events = 0;
        *wait_list = NULL;
    } else {
        *num_events = c->num_events;
        *wait_list = c->wait_list;
    }
}

void cv_chain_take(cv_chain *c, cl_event ev)
{
    if (c->last)
        clReleaseEvent(c->last);
    c->last = ev;
    c->started = true;
}

clvarlen_status cv_chain_run(cv_chain *c, cl_kernel kernel, const char *what, cl_uint dims,
                             const size_t *global, const size_t *local)
{
    cl_uint nw;
    const cl_event *wl;
    cv_chain_wait_list(c, &nw, &wl);
    cl_event ev = NULL;
    clvarlen_status st =
        cv_enqueue(c->ctx, kernel, what, dims, global, local, nw, wl, c->want_event ? &ev : NULL);
    if (st != CLVARLEN_SUCCESS)
        return st;
    cv_chain_take(c, ev);
    return CLVARLEN_SUCCESS;
}

clvarlen_status cv_chain_fill(cv_chain *c, cl_mem mem, const void *pattern, size_t pattern_size,
                              size_t offset, size_t bytes)
{
    if (bytes == 0)
        return CLVARLEN_SUCCESS;
    cl_uint nw;
    const cl_event *wl;
    cv_chain_wait_list(c, &nw, &wl);
    cl_event ev = NULL;
    cl_int err = clEnqueueFillBuffer(c->ctx->queue, mem, pattern, pattern_size, offset, bytes,
                                     nw, wl, c->want_event ? &ev : NULL);
    if (err != CL_SUCCESS)
        return cv_cl_check(c->ctx, err, "clEnqueueFillBuffer");
    cv_chain_take(c, ev);
    return CLVARLEN_SUCCESS;
}

clvarlen_status cv_chain_read(cv_chain *c, cl_mem mem, size_t offset, size_t bytes, void *host)
{
    cl_uint nw;
    const cl_event *wl;
    cv_chain_wait_list(c, &nw, &wl);
    return cv_read(c->ctx, mem, offset, bytes, host, nw, wl);
}

clvarlen_status cv_chain_read_rows(cv_chain *c, cl_mem mem, int64_t rows, size_t row_bytes,
                                   size_t dev_stride_b, void *host, size_t host_stride_b)
{
    cl_uint nw;
    const cl_event *wl;
    cv_chain_wait_list(c, &nw, &wl);
    return cv_read_rows(c->ctx, mem, rows, row_bytes, dev_stride_b, host, host_stride_b, nw, wl);
}

#if CLVARLEN_HAVE_CLBLAST
clvarlen_status cv_chain_sgemm_batched(cv_chain *c, bool trans_b, size_t m, size_t n, size_t k,
                                       float alpha, cl_mem a, size_t a_off, size_t lda,
                                       size_t a_stride, cl_mem b, size_t b_off, size_t ldb,
                                       size_t b_stride, float beta, cl_mem cm, size_t c_off,
                                       size_t ldc, size_t c_stride, size_t batch)
{
    if (batch == 0)
        return CLVARLEN_SUCCESS;
    /* CLBlast takes no wait list: a barrier orders it after the chain (on an
     * out-of-order queue too) */
    cl_uint nw;
    const cl_event *wl;
    cv_chain_wait_list(c, &nw, &wl);
    if (nw) {
        cl_int err = clEnqueueBarrierWithWaitList(c->ctx->queue, nw, wl, NULL);
        if (err != CL_SUCCESS)
            return cv_cl_check(c->ctx, err, "clEnqueueBarrierWithWaitList");
    }
    cl_event ev = NULL;
    CLBlastStatusCode s = CLBlastSgemmStridedBatched(
        CLBlastLayoutRowMajor, CLBlastTransposeNo,
        trans_b ? CLBlastTransposeYes : CLBlastTransposeNo, m, n, k, alpha, a, a_off, lda,
        a_stride, b, b_off, ldb, b_stride, beta, cm, c_off, ldc, c_stride, batch,
        &c->ctx->queue, &ev);
    if (s != CLBlastSuccess) {
        if (ev)
            clReleaseEvent(ev);
        return cv_error(c->ctx, CLVARLEN_ERROR_OPENCL,
                        "CLBlast strided batched SGEMM (%zu x %zu x %zu, batch %zu): status %d", m,
                        n, k, batch, (int)s);
    }
    if (!ev) /* no event came back: a marker stands for the GEMM */
        return cv_chain_marker(c);
    cv_chain_take(c, ev);
    return CLVARLEN_SUCCESS;
}
#endif

clvarlen_status cv_chain_marker(cv_chain *c)
{
    cl_uint nw;
    const cl_event *wl;
    cv_chain_wait_list(c, &nw, &wl);
    cl_event ev = NULL;
    cl_int err = clEnqueueMarkerWithWaitList(c->ctx->queue, nw, wl, &ev);
    if (err != CL_SUCCESS)
        return cv_cl_check(c->ctx, err, "clEnqueueMarkerWithWaitList");
    cv_chain_take(c, ev);
    return CLVARLEN_SUCCESS;
}

void cv_chain_abort(cv_chain *c)
{
    cv_chain_take(c, NULL);
}

clvarlen_status cv_chain_end(cv_chain *c, const char *fn, clvarlen_status st, cl_event *event)
{
    if (st == CLVARLEN_SUCCESS && c->flag)
        st = cv_check_end(c->ctx, fn, c->last);
    if (st != CLVARLEN_SUCCESS || !event) {
        cv_chain_abort(c);
        return st;
    }
    if (!c->last && (st = cv_chain_marker(c)) != CLVARLEN_SUCCESS)
        return st;
    *event = c->last;
    c->last = NULL;
    return CLVARLEN_SUCCESS;
}

#endif /* CLVARLEN_HAVE_OPENCL */
