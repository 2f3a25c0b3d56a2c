/* gen_seq_lens (SPEC 2.6): bit-identical sequence lengths from a seed, on
 * the device (cl/segment-gen.cl) where f32 division is correctly rounded,
 * else computed on the host and written in order after the wait list. */
#include "segment/segment.h"

static clvarlen_status check_gen(clvarlen_context *ctx, const char *fn, int32_t world, int32_t n,
                                 int64_t total)
{
    if (world < 1 || n < 1)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: world (%d) and n (%d) must be at least 1", fn, (int)world, (int)n);
    if (total < 0 || total > (1 << 24))
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: total %lld is outside [0, 2^24]", fn, (long long)total);
    if ((uint64_t)world * (uint64_t)n > (uint64_t)(SIZE_MAX / sizeof(int32_t) / 2))
        return cv_error(ctx, CLVARLEN_ERROR_OVERFLOW, "%s: world * n is too large", fn);
    return CLVARLEN_SUCCESS;
}

#if CLVARLEN_HAVE_OPENCL

/*
 * gen_seq_lens must be bit-identical everywhere, and its two f32 divisions
 * are only correctly rounded on a device that reports
 * CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT, with the program built with
 * -cl-fp32-correctly-rounded-divide-sqrt (OpenCL otherwise allows 2.5 ulp).
 * Other devices get the rows computed on the host (the same code as the CPU
 * fallback) and written to `out` in order after the wait list.
 */
static clvarlen_status enq_gen(cv_chain *q, uint64_t seed, int32_t world, int32_t n, int64_t total,
                               cl_mem out, size_t out_off)
{
    clvarlen_context *ctx = q->ctx;
    if (!ctx->exact_div) {
        size_t bytes = (size_t)world * (size_t)n * sizeof(int32_t);
        int32_t *host = malloc(bytes);
        if (!host)
            return cv_error(ctx, CLVARLEN_ERROR_OUT_OF_MEMORY,
                            "clvarlen_gen_seq_lens: cannot allocate %zu bytes", bytes);
        cv_cpu_gen_seq_lens(ctx, seed, world, n, total, host);
        cl_uint nw;
        const cl_event *wl;
        cv_chain_wait_list(q, &nw, &wl);
        cl_event ev = NULL;
        clvarlen_status st = cv_write(ctx, out, out_off, bytes, host, nw, wl, &ev);
        free(host);
        if (st == CLVARLEN_SUCCESS)
            cv_chain_take(q, ev);
        return st;
    }
    cl_kernel k;
    SEG_TRY(cv_seg_kernel(ctx, SEG_PROG_GEN, 0, -1, "segment_gen_seq_lens", &k));
    cl_ulong sd = seed, oo = out_off;
    cl_int w = world, nn = n, tot = (cl_int)total;
    cv_args a = cv_args_begin(k);
    CV_ARG(a, sd);
    CV_ARG(a, w);
    CV_ARG(a, nn);
    CV_ARG(a, tot);
    CV_ARG(a, out);
    CV_ARG(a, oo);
    if (a.err != CL_SUCCESS)
        return cv_cl_check(ctx, a.err, "segment_gen_seq_lens: clSetKernelArg");
    size_t local = CV_MIN((size_t)64, cv_seg_copy_wg(ctx));
    return cv_seg_run(q, k, "segment_gen_seq_lens", (size_t)world, local);
}

static clvarlen_status gen_on_device(clvarlen_context *ctx, uint64_t seed, int32_t world, int32_t n,
                                     int64_t total, int32_t *out)
{
    cv_chain q;
    cv_chain_begin(&q, ctx, 0, NULL, false, false);
    size_t bytes = (size_t)world * (size_t)n * 4;
    cl_mem d_out = NULL;
    clvarlen_status st;
    SEG_TRY_OUT(cv_buffer(ctx, bytes, NULL, &d_out));
    SEG_TRY_OUT(enq_gen(&q, seed, world, n, total, d_out, 0));
    SEG_TRY_OUT(cv_seg_read_bytes(&q, d_out, bytes, out));
out:
    cv_chain_abort(&q);
    cv_release(&d_out);
    return st;
}

#endif /* CLVARLEN_HAVE_OPENCL */

/* ================================================================ entry points */

clvarlen_status clvarlen_gen_seq_lens(clvarlen_context *ctx, uint64_t seed, int32_t world,
                                      int32_t n, int64_t total, int32_t *out)
{
    const char *fn = __func__;
    CV_ENTER(ctx);
    SEG_TRY(check_gen(ctx, fn, world, n, total));
    SEG_TRY(cv_seg_need(ctx, fn, "out", out, true));
    if (!cv_use_cl(ctx)) {
        cv_cpu_gen_seq_lens(ctx, seed, world, n, total, out);
        return CLVARLEN_SUCCESS;
    }
#if CLVARLEN_HAVE_OPENCL
    return gen_on_device(ctx, seed, world, n, total, out);
#else
    return CLVARLEN_ERROR_INTERNAL;
#endif
}

#if CLVARLEN_HAVE_OPENCL

clvarlen_status clvarlen_cl_gen_seq_lens(clvarlen_context *ctx, uint64_t seed, int32_t world,
                                         int32_t n, int64_t total, cl_mem out, size_t out_offset,
                                         cl_uint num_events, const cl_event *wait_list,
                                         cl_event *event)
{
    const char *fn = __func__;
    CV_ENTER(ctx);
    SEG_TRY(cv_cl_enter(ctx, fn, num_events, wait_list));
    SEG_TRY(check_gen(ctx, fn, world, n, total));
    const cv_mem_arg args[] = {
        cv_seg_mem("out", out, out_offset, 4, (uint64_t)world * (uint64_t)n * 4, true, true),
    };
    SEG_TRY(SEG_CHECK_MEM(ctx, fn, args));
    cv_chain q;
    cv_chain_begin(&q, ctx, num_events, wait_list, event != NULL, false); /* no device checks: nothing to check */
    clvarlen_status st = enq_gen(&q, seed, world, n, total, out, out_offset);
    return cv_chain_end(&q, fn, st, event);
}

#endif /* CLVARLEN_HAVE_OPENCL */
