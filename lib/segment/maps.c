/* cu_seqlens <-> lengths and the per-token maps (SPEC 2.1, 2.2): a scan
 * (cl/segment-scan.cl) and element-wise kernels (cl/segment-maps.cl). */
#include "segment/segment.h"

#if CLVARLEN_HAVE_OPENCL

static clvarlen_status enq_cu_from_lengths(cv_chain *q, cl_mem lengths, size_t len_off, int64_t n,
                                           cl_mem cu, size_t cu_off)
{
    return cv_seg_enq_scan_lengths(q, lengths, len_off, n, -1, -1, cu, cu_off, NULL, 0, NULL);
}

static clvarlen_status enq_lengths_from_cu(cv_chain *q, cl_mem cu, size_t cu_off, int64_t n,
                                           cl_mem lengths, size_t len_off)
{
    cl_mem flag = q->flag;
    cl_int check = q->flag != NULL;
    if (check)
        SEG_TRY(cv_chain_check_cu_seqlens(q, cu, cu_off, n, -1));
    if (n <= 0)
        return CLVARLEN_SUCCESS;
    cl_kernel k;
    SEG_TRY(cv_seg_kernel(q->ctx, SEG_PROG_MAPS, 0, -1, "segment_lengths_from_cu", &k));
    cl_ulong co = cu_off, lo = len_off;
    cl_int nn = (cl_int)n;
    cv_args a = cv_args_begin(k);
    CV_ARG(a, cu);
    CV_ARG(a, co);
    CV_ARG(a, nn);
    CV_ARG(a, lengths);
    CV_ARG(a, lo);
    CV_ARG(a, flag);
    CV_ARG(a, check);
    if (a.err != CL_SUCCESS)
        return cv_cl_check(q->ctx, a.err, "segment_lengths_from_cu: clSetKernelArg");
    size_t global, local;
    cv_seg_elem_grid(q->ctx, n, &global, &local);
    return cv_seg_run(q, k, "segment_lengths_from_cu", global, local);
}

static clvarlen_status enq_token_maps(cv_chain *q, cl_mem cu, size_t cu_off, int64_t n,
                                      int64_t total, cl_mem offsets, size_t offsets_off,
                                      cl_mem seq_id, size_t seq_off, cl_mem pos, size_t pos_off)
{
    cl_mem flag = q->flag;
    cl_int check = q->flag != NULL;
    if (check)
        SEG_TRY(cv_chain_check_cu_seqlens(q, cu, cu_off, n, total));
    if (n <= 0 || total <= 0)
        return CLVARLEN_SUCCESS;
    cl_kernel k;
    SEG_TRY(cv_seg_kernel(q->ctx, SEG_PROG_MAPS, 0, -1, "segment_token_maps", &k));
    cl_ulong co = cu_off, oo = offsets_off, so = seq_off, po = pos_off;
    cl_int nn = (cl_int)n;
    cl_long tot = total;
    cv_args a = cv_args_begin(k);
    CV_ARG(a, cu);
    CV_ARG(a, co);
    CV_ARG(a, nn);
    CV_ARG(a, tot);
    CV_ARG(a, offsets);
    CV_ARG(a, oo);
    CV_ARG(a, seq_id);
    CV_ARG(a, so);
    CV_ARG(a, pos);
    CV_ARG(a, po);
    CV_ARG(a, flag);
    CV_ARG(a, check);
    if (a.err != CL_SUCCESS)
        return cv_cl_check(q->ctx, a.err, "segment_token_maps: clSetKernelArg");
    size_t global, local;
    cv_seg_elem_grid(q->ctx, total, &global, &local);
    return cv_seg_run(q, k, "segment_token_maps", global, local);
}

#endif /* CLVARLEN_HAVE_OPENCL */

/* ================================================================ host memory */

#if CLVARLEN_HAVE_OPENCL
static clvarlen_status cu_from_lengths_on_device(clvarlen_context *ctx, const int32_t *lengths,
                                                 int64_t n, int32_t *cu_seqlens)
{
    cv_chain q;
    cv_chain_begin(&q, ctx, 0, NULL, false, false);
    cl_mem d_len = NULL, d_cu = NULL;
    clvarlen_status st;
    SEG_TRY_OUT(cv_seg_upload(ctx, n > 0 ? lengths : NULL, (size_t)n * 4, &d_len));
    SEG_TRY_OUT(cv_buffer(ctx, (size_t)(n + 1) * 4, NULL, &d_cu));
    SEG_TRY_OUT(enq_cu_from_lengths(&q, d_len, 0, n, d_cu, 0));
    SEG_TRY_OUT(cv_seg_read_bytes(&q, d_cu, (size_t)(n + 1) * 4, cu_seqlens));
out:
    cv_chain_abort(&q);
    cv_release(&d_len);
    cv_release(&d_cu);
    return st;
}

static clvarlen_status lengths_from_cu_on_device(clvarlen_context *ctx, const int32_t *cu_seqlens,
                                                 int64_t n, int32_t *lengths)
{
    cv_chain q;
    cv_chain_begin(&q, ctx, 0, NULL, false, false);
    cl_mem d_cu = NULL, d_len = NULL;
    clvarlen_status st;
    SEG_TRY_OUT(cv_seg_upload(ctx, cu_seqlens, (size_t)(n + 1) * 4, &d_cu));
    SEG_TRY_OUT(cv_buffer(ctx, (size_t)n * 4, NULL, &d_len));
    SEG_TRY_OUT(enq_lengths_from_cu(&q, d_cu, 0, n, d_len, 0));
    SEG_TRY_OUT(cv_seg_read_bytes(&q, d_len, (size_t)n * 4, lengths));
out:
    cv_chain_abort(&q);
    cv_release(&d_cu);
    cv_release(&d_len);
    return st;
}

static clvarlen_status token_maps_on_device(clvarlen_context *ctx, const int32_t *cu_seqlens,
                                            int64_t n, int64_t total_tokens, const int32_t *offsets,
                                            int32_t *seq_id, int32_t *pos)
{
    cv_chain q;
    cv_chain_begin(&q, ctx, 0, NULL, false, false);
    size_t tb = (size_t)total_tokens * 4;
    cl_mem d_cu = NULL, d_off = NULL, d_seq = NULL, d_pos = NULL;
    clvarlen_status st;
    SEG_TRY_OUT(cv_seg_upload(ctx, cu_seqlens, (size_t)(n + 1) * 4, &d_cu));
    if (pos)
        SEG_TRY_OUT(cv_seg_upload(ctx, offsets, (size_t)n * 4, &d_off));
    if (seq_id)
        SEG_TRY_OUT(cv_buffer(ctx, tb, NULL, &d_seq));
    if (pos)
        SEG_TRY_OUT(cv_buffer(ctx, tb, NULL, &d_pos));
    SEG_TRY_OUT(enq_token_maps(&q, d_cu, 0, n, total_tokens, d_off, 0, d_seq, 0, d_pos, 0));
    if (seq_id)
        SEG_TRY_OUT(cv_seg_read_bytes(&q, d_seq, tb, seq_id));
    if (pos)
        SEG_TRY_OUT(cv_seg_read_bytes(&q, d_pos, tb, pos));
out:
    cv_chain_abort(&q);
    cv_release(&d_cu);
    cv_release(&d_off);
    cv_release(&d_seq);
    cv_release(&d_pos);
    return st;
}
#endif /* CLVARLEN_HAVE_OPENCL */

clvarlen_status clvarlen_cu_seqlens_from_lengths(clvarlen_context *ctx, const int32_t *lengths,
                                                 int64_t n, int32_t *cu_seqlens)
{
    const char *fn = __func__;
    CV_ENTER(ctx);
    SEG_TRY(cv_seg_check_count(ctx, fn, "n", n));
    SEG_TRY(cv_seg_need(ctx, fn, "lengths", lengths, n > 0));
    SEG_TRY(cv_seg_need(ctx, fn, "cu_seqlens", cu_seqlens, true));
    int64_t total = 0;
    for (int64_t s = 0; s < n; s++) {
        if (lengths[s] < 0)
            return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: lengths[%lld] is %d", fn,
                            (long long)s, (int)lengths[s]);
        total += lengths[s];
        if (total > INT32_MAX)
            return cv_error(ctx, CLVARLEN_ERROR_OVERFLOW,
                            "%s: the lengths sum to more than INT32_MAX", fn);
    }
    const cv_region regions[] = {
        cv_seg_host("lengths", lengths, (uint64_t)n * 4, false),
        cv_seg_host("cu_seqlens", cu_seqlens, (uint64_t)(n + 1) * 4, true),
    };
    SEG_TRY(SEG_CHECK_HOST(ctx, fn, regions));
    if (!cv_use_cl(ctx)) {
        cv_cpu_cu_from_lengths(lengths, n, cu_seqlens);
        return CLVARLEN_SUCCESS;
    }
#if CLVARLEN_HAVE_OPENCL
    return cu_from_lengths_on_device(ctx, lengths, n, cu_seqlens);
#else
    return CLVARLEN_ERROR_INTERNAL;
#endif
}

clvarlen_status clvarlen_lengths_from_cu_seqlens(clvarlen_context *ctx, const int32_t *cu_seqlens,
                                                 int64_t n, int32_t *lengths)
{
    const char *fn = __func__;
    CV_ENTER(ctx);
    SEG_TRY(cv_seg_check_count(ctx, fn, "n", n));
    SEG_TRY(cv_check_cu_seqlens(ctx, fn, "cu_seqlens", cu_seqlens, n, -1));
    SEG_TRY(cv_seg_need(ctx, fn, "lengths", lengths, n > 0));
    if (n == 0)
        return CLVARLEN_SUCCESS;
    const cv_region regions[] = {
        cv_seg_host("cu_seqlens", cu_seqlens, (uint64_t)(n + 1) * 4, false),
        cv_seg_host("lengths", lengths, (uint64_t)n * 4, true),
    };
    SEG_TRY(SEG_CHECK_HOST(ctx, fn, regions));
    if (!cv_use_cl(ctx)) {
        cv_cpu_lengths_from_cu(ctx, cu_seqlens, n, lengths);
        return CLVARLEN_SUCCESS;
    }
#if CLVARLEN_HAVE_OPENCL
    return lengths_from_cu_on_device(ctx, cu_seqlens, n, lengths);
#else
    return CLVARLEN_ERROR_INTERNAL;
#endif
}

clvarlen_status clvarlen_token_maps(clvarlen_context *ctx, const int32_t *cu_seqlens, int64_t n,
                                    int64_t total_tokens, const int32_t *offsets, int32_t *seq_id,
                                    int32_t *pos)
{
    const char *fn = __func__;
    CV_ENTER(ctx);
    SEG_TRY(cv_seg_check_count(ctx, fn, "n", n));
    if (total_tokens < 0)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: total_tokens is negative", fn);
    SEG_TRY(cv_check_cu_seqlens(ctx, fn, "cu_seqlens", cu_seqlens, n, total_tokens));
    if (!seq_id && !pos)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: seq_id and pos are both NULL",
                        fn);
    if (offsets && pos)
        for (int64_t s = 0; s < n; s++) {
            int64_t L = cu_seqlens[s + 1] - cu_seqlens[s];
            if (L > 0 && (int64_t)offsets[s] + L - 1 > INT32_MAX)
                return cv_error(ctx, CLVARLEN_ERROR_OVERFLOW,
                                "%s: offsets[%lld] + length exceeds INT32_MAX", fn, (long long)s);
        }
    if (total_tokens == 0)
        return CLVARLEN_SUCCESS;
    const cv_region regions[] = {
        cv_seg_host("cu_seqlens", cu_seqlens, (uint64_t)(n + 1) * 4, false),
        cv_seg_host("offsets", pos ? offsets : NULL, (uint64_t)n * 4, false),
        cv_seg_host("seq_id", seq_id, (uint64_t)total_tokens * 4, true),
        cv_seg_host("pos", pos, (uint64_t)total_tokens * 4, true),
    };
    SEG_TRY(SEG_CHECK_HOST(ctx, fn, regions));
    if (!cv_use_cl(ctx)) {
        cv_cpu_token_maps(ctx, cu_seqlens, n, total_tokens, offsets, seq_id, pos);
        return CLVARLEN_SUCCESS;
    }
#if CLVARLEN_HAVE_OPENCL
    return token_maps_on_device(ctx, cu_seqlens, n, total_tokens, offsets, seq_id, pos);
#else
    return CLVARLEN_ERROR_INTERNAL;
#endif
}

/* ================================================================ cl_mem entry points */

#if CLVARLEN_HAVE_OPENCL

clvarlen_status clvarlen_cl_cu_seqlens_from_lengths(clvarlen_context *ctx, cl_mem lengths,
                                                    size_t lengths_offset, int64_t n,
                                                    cl_mem cu_seqlens, size_t cu_offset,
                                                    cl_uint num_events, const cl_event *wait_list,
                                                    cl_event *event)
{
    const char *fn = __func__;
    CV_ENTER(ctx);
    SEG_TRY(cv_cl_enter(ctx, fn, num_events, wait_list));
    SEG_TRY(cv_seg_check_count(ctx, fn, "n", n));
    const cv_mem_arg args[] = {
        cv_seg_mem("lengths", lengths, lengths_offset, 4, (uint64_t)n * 4, n > 0, false),
        cv_seg_mem("cu_seqlens", cu_seqlens, cu_offset, 4, (uint64_t)(n + 1) * 4, true, true),
    };
    SEG_TRY(SEG_CHECK_MEM(ctx, fn, args));
    cv_chain q;
    clvarlen_status st = cv_chain_begin(&q, ctx, num_events, wait_list, event != NULL, ctx->device_checks != 0);
    if (st == CLVARLEN_SUCCESS)
        st = enq_cu_from_lengths(&q, lengths, lengths_offset, n, cu_seqlens, cu_offset);
    return cv_chain_end(&q, fn, st, event);
}

clvarlen_status clvarlen_cl_lengths_from_cu_seqlens(clvarlen_context *ctx, cl_mem cu_seqlens,
                                                    size_t cu_offset, int64_t n, cl_mem lengths,
                                                    size_t lengths_offset, cl_uint num_events,
                                                    const cl_event *wait_list, cl_event *event)
{
    const char *fn = __func__;
    CV_ENTER(ctx);
    SEG_TRY(cv_cl_enter(ctx, fn, num_events, wait_list));
    SEG_TRY(cv_seg_check_count(ctx, fn, "n", n));
    const cv_mem_arg args[] = {
        cv_seg_mem("cu_seqlens", cu_seqlens, cu_offset, 4, (uint64_t)(n + 1) * 4, true, false),
        cv_seg_mem("lengths", lengths, lengths_offset, 4, (uint64_t)n * 4, n > 0, true),
    };
    SEG_TRY(SEG_CHECK_MEM(ctx, fn, args));
    cv_chain q;
    clvarlen_status st = cv_chain_begin(&q, ctx, num_events, wait_list, event != NULL, ctx->device_checks != 0);
    if (st == CLVARLEN_SUCCESS)
        st = enq_lengths_from_cu(&q, cu_seqlens, cu_offset, n, lengths, lengths_offset);
    return cv_chain_end(&q, fn, st, event);
}

clvarlen_status clvarlen_cl_token_maps(clvarlen_context *ctx, cl_mem cu_seqlens, size_t cu_offset,
                                       int64_t n, int64_t total_tokens, cl_mem offsets,
                                       size_t offsets_offset, cl_mem seq_id, size_t seq_id_offset,
                                       cl_mem pos, size_t pos_offset, cl_uint num_events,
                                       const cl_event *wait_list, cl_event *event)
{
    const char *fn = __func__;
    CV_ENTER(ctx);
    SEG_TRY(cv_cl_enter(ctx, fn, num_events, wait_list));
    SEG_TRY(cv_seg_check_count(ctx, fn, "n", n));
    if (total_tokens < 0 || total_tokens > INT32_MAX)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: total_tokens %lld is outside [0, INT32_MAX]", fn,
                        (long long)total_tokens);
    if (!seq_id && !pos)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: seq_id and pos are both NULL",
                        fn);
    const cv_mem_arg args[] = {
        cv_seg_mem("cu_seqlens", cu_seqlens, cu_offset, 4, (uint64_t)(n + 1) * 4, true, false),
        cv_seg_mem("offsets", pos ? offsets : NULL, offsets_offset, 4, (uint64_t)n * 4, false,
                   false),
        cv_seg_mem("seq_id", seq_id, seq_id_offset, 4, (uint64_t)total_tokens * 4, false, true),
        cv_seg_mem("pos", pos, pos_offset, 4, (uint64_t)total_tokens * 4, false, true),
    };
    SEG_TRY(SEG_CHECK_MEM(ctx, fn, args));
    cv_chain q;
    clvarlen_status st = cv_chain_begin(&q, ctx, num_events, wait_list, event != NULL, ctx->device_checks != 0);
    if (st == CLVARLEN_SUCCESS)
        st = enq_token_maps(&q, cu_seqlens, cu_offset, n, total_tokens, pos ? offsets : NULL,
                            offsets_offset, seq_id, seq_id_offset, pos, pos_offset);
    return cv_chain_end(&q, fn, st, event);
}

#endif /* CLVARLEN_HAVE_OPENCL */
