/* Device-side validation, shared by every op family: the check flag word
 * (zeroed at the start of a checked chain, read at its end) and the launchers
 * of the check kernels in cl/check.cl (cu_seqlens, index ranges). Op kernels
 * raise the same bits for what only they can see (capacities, values).
 */
#include "runtime/runtime.h"

#if CLVARLEN_HAVE_OPENCL

#define CHECK_FILE "check.cl"
/* Work-groups of the check kernels: a grid-stride loop covers the rest. */
#define CHECK_WG 64
#define CHECK_MAX_GROUPS 65536

clvarlen_status cv_check_begin(clvarlen_context *ctx, cl_mem *flag)
{
    *flag = NULL;
    if (!ctx->check_flag) {
        clvarlen_status st = cv_buffer(ctx, sizeof(cl_int), NULL, &ctx->check_flag);
        if (st != CLVARLEN_SUCCESS)
            return st;
    }
    cl_int zero = 0;
    cl_int err = clEnqueueFillBuffer(ctx->queue, ctx->check_flag, &zero, sizeof zero, 0,
                                     sizeof zero, 0, NULL, NULL);
    if (err != CL_SUCCESS)
        return cv_cl_check(ctx, err, "clEnqueueFillBuffer(check flag)");
    *flag = ctx->check_flag;
    return CLVARLEN_SUCCESS;
}

clvarlen_status cv_check_end(clvarlen_context *ctx, const char *fn, cl_event after)
{
    cl_int flag = 0;
    clvarlen_status st = cv_read(ctx, ctx->check_flag, 0, sizeof flag, &flag, after ? 1 : 0,
                                 after ? &after : NULL);
    if (st != CLVARLEN_SUCCESS)
        return st;
    if (flag & CV_CHECK_CU_SEQLENS)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_CU_SEQLENS,
                        "%s: device check: cu_seqlens does not start at 0, decreases, or does not "
                        "end at the total; nothing was written",
                        fn);
    if (flag & CV_CHECK_INDEX)
        return cv_error(ctx, CLVARLEN_ERROR_INDEX_OUT_OF_RANGE,
                        "%s: device check: an index is out of range; nothing was written", fn);
    if (flag & CV_CHECK_CAPACITY)
        return cv_error(ctx, CLVARLEN_ERROR_BUFFER_TOO_SMALL,
                        "%s: device check: the result does not fit the given capacity; nothing was "
                        "written",
                        fn);
    if (flag & CV_CHECK_VALUE)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: device check: an input value is invalid (e.g. a negative length); "
                        "nothing was written",
                        fn);
    return CLVARLEN_SUCCESS;
}

/* A 1-D grid-stride launch over n elements. */
static void check_grid(int64_t n, size_t *global, size_t *local)
{
    int64_t groups = (n + CHECK_WG - 1) / CHECK_WG;
    groups = CV_MAX(1, CV_MIN(groups, (int64_t)CHECK_MAX_GROUPS));
    *local = CHECK_WG;
    *global = (size_t)groups * CHECK_WG;
}

clvarlen_status cv_chain_check_cu_seqlens(cv_chain *c, cl_mem cu, size_t cu_offset, int64_t n,
                                          int64_t total)
{
    if (!c->flag)
        return cv_error(c->ctx, CLVARLEN_ERROR_INTERNAL,
                        "cv_chain_check_cu_seqlens: the chain has no check flag");
    cl_kernel k;
    clvarlen_status st = cv_get_kernel(c->ctx, CHECK_FILE, "", "check_cu_seqlens", &k);
    if (st != CLVARLEN_SUCCESS)
        return st;
    cl_ulong off = cu_offset;
    cl_int nn = (cl_int)n;
    cl_long tot = total;
    cv_args a = cv_args_begin(k);
    CV_ARG(a, cu);
    CV_ARG(a, off);
    CV_ARG(a, nn);
    CV_ARG(a, tot);
    CV_ARG(a, c->flag);
    if (a.err != CL_SUCCESS)
        return cv_cl_check(c->ctx, a.err, "check_cu_seqlens: clSetKernelArg");
    size_t global, local;
    check_grid(n + 1, &global, &local);
    return cv_chain_run(c, k, "check_cu_seqlens", 1, &global, &local);
}

clvarlen_status cv_chain_check_range(cv_chain *c, cl_mem v32, cl_mem v64, size_t offset,
                                     int64_t n, int64_t lo, int64_t hi, bool allow_minus1,
                                     int bit)
{
    if (n <= 0)
        return CLVARLEN_SUCCESS;
    if (!c->flag)
        return cv_error(c->ctx, CLVARLEN_ERROR_INTERNAL,
                        "cv_chain_check_range: the chain has no check flag");
    cl_kernel k;
    clvarlen_status st = cv_get_kernel(c->ctx, CHECK_FILE, "", "check_range", &k);
    if (st != CLVARLEN_SUCCESS)
        return st;
    cl_ulong o = offset;
    cl_long nn = n, l = lo, h = hi;
    cl_int allow = allow_minus1, b = bit;
    cv_args a = cv_args_begin(k);
    CV_ARG(a, v32);
    CV_ARG(a, v64);
    CV_ARG(a, o);
    CV_ARG(a, nn);
    CV_ARG(a, l);
    CV_ARG(a, h);
    CV_ARG(a, allow);
    CV_ARG(a, b);
    CV_ARG(a, c->flag);
    if (a.err != CL_SUCCESS)
        return cv_cl_check(c->ctx, a.err, "check_range: clSetKernelArg");
    size_t global, local;
    check_grid(n, &global, &local);
    return cv_chain_run(c, k, "check_range", 1, &global, &local);
}

#endif /* CLVARLEN_HAVE_OPENCL */
