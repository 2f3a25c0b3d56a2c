/* Varlen attention backward (SPEC 1.2): the public entry points on host
 * memory and on cl_mem buffers. Arguments are validated here; the work goes to
 * the CPU fallback (lib/cpu/attention-backward.c) or to the OpenCL launchers
 * (backward-cl.c).
 */
#include "attention/attention-cl.h"

#include <stdlib.h>
#include <string.h>

static void bwd_defaults(clvarlen_attention_bwd_params *b)
{
    memset(b, 0, sizeof *b);
    b->struct_size = (uint32_t)sizeof *b;
    b->deterministic = 1;
}

void clvarlen_attention_bwd_params_init_sized(clvarlen_attention_bwd_params *b, size_t size)
{
    clvarlen_attention_bwd_params d;
    bwd_defaults(&d);
    cv_struct_init(b, size, &d, sizeof d);
}

/* The tensors of a backward call, in this order (inputs, then outputs). */
enum { T_Q, T_K, T_V, T_O, T_DO, T_LSE, T_CUQ, T_CUK, T_QPOS, T_DQ, T_DK, T_DV, T_N };
static const char *const names[T_N] = {"q",     "k",            "v",            "o",
                                       "do",    "lse",          "cu_seqlens_q", "cu_seqlens_k",
                                       "q_pos", "dq",           "dk",           "dv"};

/* Shapes, options and the gradients' layout; fills *bd. */
static clvarlen_status bwd_validate(clvarlen_context *ctx, const char *fn,
                                    const clvarlen_attention_params *p,
                                    const clvarlen_attention_bwd_params *bwd, cv_bwd_desc *bd)
{
    clvarlen_attention_bwd_params full;
    bwd_defaults(&full);
    clvarlen_status st;
    if (bwd && (st = cv_struct_in(ctx, fn, "bwd", bwd, &full, sizeof full,
                                  CLVARLEN_ATTENTION_BWD_PARAMS_MIN_SIZE)) != CLVARLEN_SUCCESS)
        return st;
    bwd = &full;
    st = cv_attn_validate(ctx, fn, p, &bd->a);
    if (st != CLVARLEN_SUCCESS)
        return st;
    const cv_attn_desc *d = &bd->a;
    bd->grad_dtype = bwd->grad_f32 ? CLVARLEN_DTYPE_F32 : d->dtype;
    const int64_t qrow = (int64_t)d->heads_q * d->head_dim;
    const int64_t krow = (int64_t)d->heads_kv * d->head_dim;
    const int64_t vrow = (int64_t)d->heads_kv * d->head_dim_v;
    const int64_t orow = (int64_t)d->heads_q * d->head_dim_v;
    if ((st = cv_check_rows(ctx, fn, "do", d->dtype, orow, d->total_q, bwd->do_stride,
                            &bd->do_stride)) != CLVARLEN_SUCCESS ||
        (st = cv_check_rows(ctx, fn, "dq", bd->grad_dtype, qrow, d->total_q, bwd->dq_stride,
                            &bd->dq_stride)) != CLVARLEN_SUCCESS ||
        (st = cv_check_rows(ctx, fn, "dk", bd->grad_dtype, krow, d->total_k, bwd->dk_stride,
                            &bd->dk_stride)) != CLVARLEN_SUCCESS ||
        (st = cv_check_rows(ctx, fn, "dv", bd->grad_dtype, vrow, d->total_k, bwd->dv_stride,
                            &bd->dv_stride)) != CLVARLEN_SUCCESS)
        return st;
    return CLVARLEN_SUCCESS;
}

static void bwd_extents(const cv_bwd_desc *bd, cv_extent e[T_N])
{
    const cv_attn_desc *d = &bd->a;
    const uint64_t es = cv_dtype_size(d->dtype), gs = cv_dtype_size(bd->grad_dtype);
    const uint64_t hq = (uint64_t)d->heads_q, hk = (uint64_t)d->heads_kv;
    const uint64_t D = (uint64_t)d->head_dim, Dv = (uint64_t)d->head_dim_v;
    e[T_Q] = cv_extent_rows(0, d->total_q, hq * D * es, (uint64_t)d->q_stride * es);
    e[T_K] = cv_extent_rows(0, d->total_k, hk * D * es, (uint64_t)d->k_stride * es);
    e[T_V] = cv_extent_rows(0, d->total_k, hk * Dv * es, (uint64_t)d->v_stride * es);
    e[T_O] = cv_extent_rows(0, d->total_q, hq * Dv * es, (uint64_t)d->o_stride * es);
    e[T_DO] = cv_extent_rows(0, d->total_q, hq * Dv * es, (uint64_t)bd->do_stride * es);
    e[T_LSE] = cv_extent_bytes(0, hq * (uint64_t)d->total_q * 4);
    e[T_CUQ] = cv_extent_bytes(0, (uint64_t)(d->n_seqs + 1) * 4);
    e[T_CUK] = e[T_CUQ];
    e[T_QPOS] = cv_extent_bytes(0, (uint64_t)d->total_q * 4);
    e[T_DQ] = cv_extent_rows(0, d->total_q, hq * D * gs, (uint64_t)bd->dq_stride * gs);
    e[T_DK] = cv_extent_rows(0, d->total_k, hk * D * gs, (uint64_t)bd->dk_stride * gs);
    e[T_DV] = cv_extent_rows(0, d->total_k, hk * Dv * gs, (uint64_t)bd->dv_stride * gs);
}

/* The pointers every non-empty call needs. */
static clvarlen_status check_null(clvarlen_context *ctx, const char *fn, const cv_attn_desc *d,
                                  const void *const ptr[T_N])
{
    if (d->total_q > 0 &&
        (!ptr[T_Q] || !ptr[T_O] || !ptr[T_DO] || !ptr[T_LSE] || !ptr[T_DQ]))
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: q, o, do, lse and dq must not be NULL", fn);
    if (d->total_k > 0 && (!ptr[T_K] || !ptr[T_V] || !ptr[T_DK] || !ptr[T_DV]))
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: k, v, dk and dv must not be NULL", fn);
    return CLVARLEN_SUCCESS;
}

#if CLVARLEN_HAVE_OPENCL
static clvarlen_status cl_backward_host(clvarlen_context *ctx, const char *fn,
                                        const cv_bwd_desc *bd, const void *const ptr[T_N],
                                        void *const out[3]);
#endif

clvarlen_status clvarlen_attention_backward(clvarlen_context *ctx,
                                            const clvarlen_attention_params *params,
                                            const clvarlen_attention_bwd_params *bwd,
                                            const void *q, const void *k, const void *v,
                                            const void *o, const void *dout, const float *lse,
                                            const int32_t *cu_seqlens_q,
                                            const int32_t *cu_seqlens_k, const int32_t *q_pos,
                                            void *dq, void *dk, void *dv)
{
    static const char fn[] = "clvarlen_attention_backward";
    CV_ENTER(ctx);
    cv_bwd_desc bd;
    clvarlen_status st = bwd_validate(ctx, fn, params, bwd, &bd);
    if (st != CLVARLEN_SUCCESS)
        return st;
    const cv_attn_desc *d = &bd.a;
    const void *const ptr[T_N] = {q, k, v, o, dout, lse, cu_seqlens_q, cu_seqlens_k, q_pos,
                                  dq, dk, dv};
    if ((st = check_null(ctx, fn, d, ptr)) != CLVARLEN_SUCCESS)
        return st;
    if ((st = cv_check_cu_seqlens(ctx, fn, "cu_seqlens_q", cu_seqlens_q, d->n_seqs,
                                  d->total_q)) != CLVARLEN_SUCCESS ||
        (st = cv_check_cu_seqlens(ctx, fn, "cu_seqlens_k", cu_seqlens_k, d->n_seqs,
                                  d->total_k)) != CLVARLEN_SUCCESS ||
        (st = cv_attn_check_max_seqlen(ctx, fn, "max_seqlen_q", cu_seqlens_q, d->n_seqs,
                                       d->max_seqlen_q)) != CLVARLEN_SUCCESS ||
        (st = cv_attn_check_max_seqlen(ctx, fn, "max_seqlen_k", cu_seqlens_k, d->n_seqs,
                                       d->max_seqlen_k)) != CLVARLEN_SUCCESS)
        return st;
    if (d->total_q == 0 && d->total_k == 0)
        return CLVARLEN_SUCCESS;
    cv_extent e[T_N];
    bwd_extents(&bd, e);
    cv_region r[T_N];
    for (int i = 0; i < T_N; i++)
        r[i] = cv_host_region(names[i], ptr[i], e[i], i >= T_DQ);
    if ((st = cv_check_no_overlap(ctx, fn, r, T_N)) != CLVARLEN_SUCCESS)
        return st;
#if CLVARLEN_HAVE_OPENCL
    if (cv_use_cl(ctx)) {
        void *const out[3] = {dq, dk, dv};
        return cl_backward_host(ctx, fn, &bd, ptr, out);
    }
#endif
    return cv_cpu_attention_backward(ctx, &bd, q, k, v, o, dout, lse, cu_seqlens_q,
                                     cu_seqlens_k, q_pos, dq, dk, dv);
}

#if CLVARLEN_HAVE_OPENCL

/* Host memory on an OpenCL context: inputs uploaded, the gradients read back
 * into temporaries and copied out only once every read succeeded. */
static clvarlen_status cl_backward_host(clvarlen_context *ctx, const char *fn,
                                        const cv_bwd_desc *bd, const void *const ptr[T_N],
                                        void *const out[3])
{
    cv_extent e[T_N];
    bwd_extents(bd, e);
    cv_bwd_mem m;
    memset(&m, 0, sizeof m);
    cl_mem *mems[T_N] = {&m.f.q,    &m.f.k,    &m.f.v, &m.f.o, &m.dout, &m.f.lse,
                         &m.f.cu_q, &m.f.cu_k, &m.f.q_pos, &m.dq, &m.dk, &m.dv};
    /* The gradients come back dense (rows of row_bytes) before the copy out. */
    char *host_out[3] = {NULL, NULL, NULL};
    size_t dense_bytes[3];
    for (int i = 0; i < 3; i++)
        dense_bytes[i] = (size_t)e[T_DQ + i].row_bytes * (size_t)e[T_DQ + i].rows;
    cv_chain c;
    clvarlen_status st = cv_chain_begin(&c, ctx, 0, NULL, false, false);
    for (int i = 0; st == CLVARLEN_SUCCESS && i < T_N; i++) {
        const size_t bytes = (size_t)cv_extent_span(&e[i]);
        if (bytes > 0 && (i >= T_DQ || ptr[i])) /* empty tensors and no q_pos: NULL */
            st = cv_buffer(ctx, bytes, i < T_DQ ? ptr[i] : NULL, mems[i]);
    }
    for (int i = 0; st == CLVARLEN_SUCCESS && i < 3; i++)
        if (dense_bytes[i] > 0 && !(host_out[i] = malloc(dense_bytes[i])))
            st = cv_error(ctx, CLVARLEN_ERROR_OUT_OF_MEMORY, "%s: out of memory", fn);
    if (st == CLVARLEN_SUCCESS)
        st = cv_attn_cl_backward(&c, fn, bd, &m);
    for (int i = 0; st == CLVARLEN_SUCCESS && i < 3; i++)
        if (dense_bytes[i] > 0)
            st = cv_chain_read_rows(&c, *mems[T_DQ + i], e[T_DQ + i].rows,
                                    (size_t)e[T_DQ + i].row_bytes,
                                    (size_t)e[T_DQ + i].stride_b, host_out[i],
                                    (size_t)e[T_DQ + i].row_bytes);
    st = cv_chain_end(&c, fn, st, NULL);
    for (int i = 0; st == CLVARLEN_SUCCESS && i < 3; i++) {
        const cv_extent *x = &e[T_DQ + i];
        for (int64_t r = 0; r < x->rows; r++)
            memcpy((char *)out[i] + (size_t)r * x->stride_b,
                   host_out[i] + (size_t)r * x->row_bytes, (size_t)x->row_bytes);
    }
    for (int i = 0; i < 3; i++)
        free(host_out[i]);
    for (int i = 0; i < T_N; i++)
        cv_release(mems[i]);
    return st;
}

clvarlen_status clvarlen_cl_attention_backward(
    clvarlen_context *ctx, const clvarlen_attention_params *params,
    const clvarlen_attention_bwd_params *bwd, cl_mem q, size_t q_offset, cl_mem k,
    size_t k_offset, cl_mem v, size_t v_offset, cl_mem o, size_t o_offset, cl_mem dout,
    size_t do_offset, cl_mem lse, size_t lse_offset, cl_mem cu_seqlens_q, size_t cu_q_offset,
    cl_mem cu_seqlens_k, size_t cu_k_offset, cl_mem q_pos, size_t q_pos_offset, cl_mem dq,
    size_t dq_offset, cl_mem dk, size_t dk_offset, cl_mem dv, size_t dv_offset,
    cl_uint num_events, const cl_event *wait_list, cl_event *event)
{
    static const char fn[] = "clvarlen_cl_attention_backward";
    CV_ENTER(ctx);
    if (event)
        *event = NULL;
    clvarlen_status st = cv_cl_enter(ctx, fn, num_events, wait_list);
    if (st != CLVARLEN_SUCCESS)
        return st;
    cv_bwd_desc bd;
    if ((st = bwd_validate(ctx, fn, params, bwd, &bd)) != CLVARLEN_SUCCESS)
        return st;
    const cv_attn_desc *d = &bd.a;
    const cl_mem mems[T_N] = {q, k, v, o, dout, lse, cu_seqlens_q, cu_seqlens_k, q_pos,
                              dq, dk, dv};
    const size_t offs[T_N] = {q_offset,    k_offset,    v_offset,     o_offset,
                              do_offset,   lse_offset,  cu_q_offset,  cu_k_offset,
                              q_pos_offset, dq_offset,  dk_offset,    dv_offset};
    const void *ptr[T_N];
    for (int i = 0; i < T_N; i++)
        ptr[i] = mems[i];
    if ((st = check_null(ctx, fn, d, ptr)) != CLVARLEN_SUCCESS)
        return st;
    if (!cu_seqlens_q || !cu_seqlens_k)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: cu_seqlens_q or cu_seqlens_k is NULL", fn);
    cv_extent e[T_N];
    bwd_extents(&bd, e);
    const size_t es = cv_dtype_size(d->dtype), gs = cv_dtype_size(bd.grad_dtype);
    cv_mem_arg args[T_N];
    for (int i = 0; i < T_N; i++)
        args[i] = (cv_mem_arg){.name = names[i], .mem = mems[i], .offset = offs[i],
                               .align = i <= T_DO ? es : i >= T_DQ ? gs : 4, .ext = e[i],
                               .output = i >= T_DQ};
    if ((st = cv_check_mem_args(ctx, fn, args, T_N)) != CLVARLEN_SUCCESS)
        return st;
    const bool work = d->n_seqs > 0 && (d->total_q > 0 || d->total_k > 0);
    cv_bwd_mem m = {
        .f = {.q = q, .q_off = q_offset, .k = k, .k_off = k_offset, .v = v, .v_off = v_offset,
              .cu_q = cu_seqlens_q, .cu_q_off = cu_q_offset, .cu_k = cu_seqlens_k,
              .cu_k_off = cu_k_offset, .q_pos = q_pos, .q_pos_off = q_pos_offset, .o = o,
              .o_off = o_offset, .lse = lse, .lse_off = lse_offset},
        .dout = dout, .do_off = do_offset, .dq = dq, .dq_off = dq_offset,
        .dk = dk, .dk_off = dk_offset, .dv = dv, .dv_off = dv_offset,
    };
    cv_chain c;
    st = cv_chain_begin(&c, ctx, num_events, wait_list, event != NULL, ctx->device_checks && work);
    if (st == CLVARLEN_SUCCESS && work && c.flag) {
        st = cv_chain_check_cu_seqlens(&c, cu_seqlens_q, cu_q_offset, d->n_seqs, d->total_q);
        if (st == CLVARLEN_SUCCESS)
            st = cv_chain_check_cu_seqlens(&c, cu_seqlens_k, cu_k_offset, d->n_seqs,
                                           d->total_k);
    }
    if (st == CLVARLEN_SUCCESS && work)
        st = cv_attn_cl_backward(&c, fn, &bd, &m);
    return cv_chain_end(&c, fn, st, event);
}

#endif /* CLVARLEN_HAVE_OPENCL */
