/* The gated delta rule (SPEC 3): the public entry points on host memory and
 * on cl_mem buffers. Arguments are validated here, at the boundary; the work
 * goes to the CPU fallback (lib/cpu/gated-delta.c) or to the OpenCL launchers
 * (gated-delta-cl.c).
 */
#include "gated-delta/gated-delta-cl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The largest key and value head dims accepted: a host policy (the kernels
 * take K and V as -D specialisations, so nothing in cl/ repeats it). */
#define GDN_MAX_DIM 256

static void gdn_defaults(clvarlen_gdn_params *params)
{
    memset(params, 0, sizeof *params);
    params->struct_size = (uint32_t)sizeof *params;
    params->dtype = CLVARLEN_DTYPE_F32;
    params->dt_bias_dtype = CLVARLEN_DTYPE_F32;
    params->state_dtype = CLVARLEN_DTYPE_F32;
    params->state_layout = CLVARLEN_STATE_VK;
    params->scale = 0.0f;
    params->softplus_beta = 1.0f;
    params->softplus_threshold = 20.0f;
    params->algorithm = CLVARLEN_GDN_AUTO;
}

void clvarlen_gdn_params_init_sized(clvarlen_gdn_params *params, size_t size)
{
    clvarlen_gdn_params d;
    gdn_defaults(&d);
    cv_struct_init(params, size, &d, sizeof d);
}

/* ------------------------------------------------------------------ validation */

/* Which optional arguments the call passed (NULL or not). */
typedef struct gdn_given {
    bool cu, pool, sidx, inter, cidx;
} gdn_given;

static clvarlen_status gdn_check_dtypes(clvarlen_context *ctx, const char *fn,
                                        const clvarlen_gdn_params *pa)
{
    if (!cv_dtype_size(pa->dtype) || !cv_dtype_size(pa->dt_bias_dtype) ||
        !cv_dtype_size(pa->state_dtype))
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: unknown dtype (dtype %d, dt_bias_dtype %d, state_dtype %d)", fn,
                        (int)pa->dtype, (int)pa->dt_bias_dtype, (int)pa->state_dtype);
    const struct {
        const char *name;
        clvarlen_dtype dtype;
    } dts[] = {{"dtype", pa->dtype}, {"dt_bias_dtype", pa->dt_bias_dtype},
               {"state_dtype", pa->state_dtype}};
    for (size_t i = 0; i < sizeof dts / sizeof dts[0]; i++)
        if (!cv_is_float_act(dts[i].dtype))
            return cv_error(ctx, CLVARLEN_ERROR_UNSUPPORTED,
                            "%s: %s %s is not supported (f32, f16 or bf16)", fn, dts[i].name,
                            clvarlen_dtype_name(dts[i].dtype));
    return CLVARLEN_SUCCESS;
}

/* Sequence counts, heads and head dims. */
static clvarlen_status gdn_check_sizes(clvarlen_context *ctx, const char *fn,
                                       const clvarlen_gdn_params *pa, bool has_cu)
{
    if (pa->n_seqs < 0 || pa->n_seqs > INT32_MAX)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: n_seqs is %lld (0 .. 2^31 - 1)", fn, (long long)pa->n_seqs);
    if (pa->total_tokens < 0 || pa->total_tokens > INT32_MAX)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: total_tokens is %lld (0 .. 2^31 - 1: cu_seqlens are int32)", fn,
                        (long long)pa->total_tokens);
    if (!has_cu && pa->fixed_seqlen < 0)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: fixed_seqlen is %d (cu_seqlens is NULL)", fn, (int)pa->fixed_seqlen);
    if (!has_cu && (int64_t)pa->fixed_seqlen * pa->n_seqs != pa->total_tokens)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: without cu_seqlens total_tokens (%lld) must be n_seqs (%lld) * "
                        "fixed_seqlen (%d)",
                        fn, (long long)pa->total_tokens, (long long)pa->n_seqs,
                        (int)pa->fixed_seqlen);
    if (pa->heads_qk <= 0 || pa->heads_v <= 0)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: heads_qk (%d) and heads_v (%d) must be positive", fn,
                        (int)pa->heads_qk, (int)pa->heads_v);
    if (pa->heads_v % pa->heads_qk != 0)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: heads_v (%d) is not a multiple of heads_qk (%d)", fn,
                        (int)pa->heads_v, (int)pa->heads_qk);
    if (pa->key_dim <= 0 || pa->value_dim <= 0)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: key_dim (%d) and value_dim (%d) must be positive", fn,
                        (int)pa->key_dim, (int)pa->value_dim);
    if (pa->key_dim > GDN_MAX_DIM || pa->value_dim > GDN_MAX_DIM)
        return cv_error(ctx, CLVARLEN_ERROR_UNSUPPORTED,
                        "%s: key_dim %d / value_dim %d: at most %d is supported", fn,
                        (int)pa->key_dim, (int)pa->value_dim, GDN_MAX_DIM);
    return CLVARLEN_SUCCESS;
}

/* Every token-major tensor: heads and the last dimension contiguous. */
static clvarlen_status gdn_check_strides(clvarlen_context *ctx, const char *fn,
                                         const clvarlen_gdn_params *pa, cv_gdn_problem *p)
{
    const int64_t T = pa->total_tokens, H = p->H, HV = p->HV, K = p->K, V = p->V;
    const struct {
        const char *name;
        int64_t row, stride;
        int64_t *out;
    } rows[] = {
        {"q", H * K, pa->q_stride, &p->q_stride},  {"k", H * K, pa->k_stride, &p->k_stride},
        {"v", HV * V, pa->v_stride, &p->v_stride}, {"a", HV, pa->a_stride, &p->a_stride},
        {"b", HV, pa->b_stride, &p->b_stride},     {"o", HV * V, pa->o_stride, &p->o_stride},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        if (rows[i].stride < 0)
            return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: %s_stride is negative",
                            fn, rows[i].name);
        clvarlen_status st = cv_check_rows(ctx, fn, rows[i].name, pa->dtype, rows[i].row, T,
                                           rows[i].stride, rows[i].out);
        if (st != CLVARLEN_SUCCESS)
            return st;
    }
    return CLVARLEN_SUCCESS;
}

/* scale, the softplus and the flags. */
static clvarlen_status gdn_check_scalars(clvarlen_context *ctx, const char *fn,
                                         const clvarlen_gdn_params *pa, cv_gdn_problem *p)
{
    if (pa->scale != 0.0f && (!(pa->scale > 0.0f) || !isfinite(pa->scale)))
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: scale must be positive and finite (0 for 1/sqrt(K)), got %g", fn,
                        (double)pa->scale);
    p->scale = pa->scale == 0.0f ? 1.0f / sqrtf((float)p->K) : pa->scale;
    if (!(pa->softplus_beta > 0.0f) || !isfinite(pa->softplus_beta))
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: softplus_beta must be positive and finite, got %g", fn,
                        (double)pa->softplus_beta);
    if (isnan(pa->softplus_threshold))
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: softplus_threshold is NaN",
                        fn);
    p->sp_beta = pa->softplus_beta;
    p->sp_threshold = pa->softplus_threshold;
    p->l2norm = pa->use_qk_l2norm != 0;
    p->write_back = pa->disable_state_update == 0;
    if (pa->state_layout != CLVARLEN_STATE_VK && pa->state_layout != CLVARLEN_STATE_KV)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: unknown state_layout %d", fn,
                        (int)pa->state_layout);
    p->state_kv = pa->state_layout == CLVARLEN_STATE_KV;
    return CLVARLEN_SUCCESS;
}

/* The state pool (has_pool) and the intermediate states (has_inter). */
static clvarlen_status gdn_check_states(clvarlen_context *ctx, const char *fn,
                                        const clvarlen_gdn_params *pa, const gdn_given *g,
                                        cv_gdn_problem *p)
{
    const int64_t head_state = (int64_t)p->HV * p->K * p->V; /* < 2^47: HV < 2^31, K, V <= 256 */
    const int64_t ses = (int64_t)cv_dtype_size(pa->state_dtype);
    const int64_t pitch = pa->state_slot_pitch ? pa->state_slot_pitch : head_state;
    if (g->pool && pa->state_slots < 0)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: state_slots is negative (%lld)", fn, (long long)pa->state_slots);
    if (g->pool && pitch < head_state)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: state_slot_pitch %lld is smaller than a slot (HV*K*V = %lld)", fn,
                        (long long)pa->state_slot_pitch, (long long)head_state);
    if (g->pool && pa->state_slots > 0 && pitch > INT64_MAX / ses / pa->state_slots)
        return cv_error(ctx, CLVARLEN_ERROR_OVERFLOW,
                        "%s: the state pool spans more than 2^63 bytes", fn);
    if (g->pool && !g->sidx && pa->state_slots < pa->n_seqs)
        return cv_error(ctx, CLVARLEN_ERROR_INDEX_OUT_OF_RANGE,
                        "%s: without state_indices sequence n uses slot n, but the pool has "
                        "%lld slots for %lld sequences",
                        fn, (long long)pa->state_slots, (long long)pa->n_seqs);
    if (g->pool) {
        p->slots = pa->state_slots;
        p->slot_pitch = pitch;
    }
    if (!g->inter)
        return CLVARLEN_SUCCESS;
    if (pa->cache_slots < 0 || pa->cache_steps <= 0)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: intermediate_states needs cache_slots >= 0 and cache_steps > 0 "
                        "(got %lld, %d)",
                        fn, (long long)pa->cache_slots, (int)pa->cache_steps);
    if (pa->cache_slots > 0 &&
        (int64_t)pa->cache_steps > INT64_MAX / ses / pa->cache_slots / head_state)
        return cv_error(ctx, CLVARLEN_ERROR_OVERFLOW,
                        "%s: intermediate_states spans more than 2^63 bytes", fn);
    if (!g->cidx && pa->cache_slots < pa->n_seqs)
        return cv_error(ctx, CLVARLEN_ERROR_INDEX_OUT_OF_RANGE,
                        "%s: without cache_indices sequence n uses cache slot n, but there "
                        "are %lld cache slots for %lld sequences",
                        fn, (long long)pa->cache_slots, (long long)pa->n_seqs);
    p->cache_slots = pa->cache_slots;
    p->cache_steps = pa->cache_steps;
    return CLVARLEN_SUCCESS;
}

/* Everything that does not need the contents of device or host arrays:
 * shapes, dtypes, strides, scalars and sizes. Fills p (pointers left NULL). */
static clvarlen_status gdn_check_params(clvarlen_context *ctx, const char *fn,
                                        const clvarlen_gdn_params *caller, const gdn_given *g,
                                        cv_gdn_problem *p)
{
    if (!caller)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: params is NULL", fn);
    clvarlen_gdn_params full;
    const clvarlen_gdn_params *pa = &full;
    gdn_defaults(&full);
    clvarlen_status st;
    if ((st = cv_struct_in(ctx, fn, "params", caller, &full, sizeof full,
                           CLVARLEN_GDN_PARAMS_MIN_SIZE)) != CLVARLEN_SUCCESS)
        return st;
    memset(p, 0, sizeof *p);
    if ((st = gdn_check_dtypes(ctx, fn, pa)) != CLVARLEN_SUCCESS ||
        (st = gdn_check_sizes(ctx, fn, pa, g->cu)) != CLVARLEN_SUCCESS)
        return st;
    p->dtype = pa->dtype;
    p->bias_dtype = pa->dt_bias_dtype;
    p->state_dtype = pa->state_dtype;
    p->n_seqs = pa->n_seqs;
    p->total_tokens = pa->total_tokens;
    p->fixed_seqlen = g->cu ? 0 : pa->fixed_seqlen;
    p->H = pa->heads_qk;
    p->HV = pa->heads_v;
    p->K = pa->key_dim;
    p->V = pa->value_dim;
    if ((st = gdn_check_strides(ctx, fn, pa, p)) != CLVARLEN_SUCCESS ||
        (st = gdn_check_scalars(ctx, fn, pa, p)) != CLVARLEN_SUCCESS ||
        (st = gdn_check_states(ctx, fn, pa, g, p)) != CLVARLEN_SUCCESS)
        return st;
    if (pa->algorithm != CLVARLEN_GDN_AUTO && pa->algorithm != CLVARLEN_GDN_RECURRENT &&
        pa->algorithm != CLVARLEN_GDN_CHUNKED)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: unknown algorithm %d", fn,
                        (int)pa->algorithm);
    if (pa->algorithm == CLVARLEN_GDN_CHUNKED && g->inter)
        return cv_error(ctx, CLVARLEN_ERROR_UNSUPPORTED,
                        "%s: intermediate_states (target verify) needs every step's state: use "
                        "CLVARLEN_GDN_AUTO or CLVARLEN_GDN_RECURRENT",
                        fn);
    return CLVARLEN_SUCCESS;
}

/* Host-visible arrays: cu_seqlens, index ranges, target-verify lengths. */
static clvarlen_status gdn_check_host_arrays(clvarlen_context *ctx, const char *fn,
                                             const cv_gdn_problem *p)
{
    if (p->cu_seqlens) {
        clvarlen_status st =
            cv_check_cu_seqlens(ctx, fn, "cu_seqlens", p->cu_seqlens, p->n_seqs, p->total_tokens);
        if (st != CLVARLEN_SUCCESS)
            return st;
    }
    for (int64_t n = 0; n < p->n_seqs; n++) {
        if (p->state_pool && p->state_indices && p->state_indices[n] >= p->slots)
            return cv_error(ctx, CLVARLEN_ERROR_INDEX_OUT_OF_RANGE,
                            "%s: state_indices[%lld] = %d but the pool has %lld slots", fn,
                            (long long)n, (int)p->state_indices[n], (long long)p->slots);
        if (p->inter) {
            int64_t c = p->cache_indices ? p->cache_indices[n] : n;
            if (c >= p->cache_slots)
                return cv_error(ctx, CLVARLEN_ERROR_INDEX_OUT_OF_RANGE,
                                "%s: cache_indices[%lld] = %lld but there are %lld cache slots",
                                fn, (long long)n, (long long)c, (long long)p->cache_slots);
            int64_t bos, eos;
            cv_gdn_bounds(p, n, &bos, &eos);
            if (c >= 0 && eos - bos > p->cache_steps)
                return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                                "%s: sequence %lld has %lld tokens but the intermediate buffer "
                                "holds %d steps",
                                fn, (long long)n, (long long)(eos - bos), (int)p->cache_steps);
        }
    }
    return CLVARLEN_SUCCESS;
}

/* The call's tensors, in the order of gdn_names: the bytes each spans (from
 * 0; rows exact, so column slices of one fused tensor are told apart). */
enum { GDN_NARGS = 13 };
static const char *const gdn_names[GDN_NARGS] = {
    "A_log", "dt_bias",    "a",     "b",     "q", "k", "v", "cu_seqlens", "state_pool",
    "state_indices", "intermediate_states", "cache_indices", "o"};

static void gdn_extents(const cv_gdn_problem *p, cv_extent e[GDN_NARGS])
{
    const int64_t T = p->total_tokens, H = p->H, HV = p->HV, K = p->K, V = p->V;
    const uint64_t es = cv_dtype_size(p->dtype), ses = cv_dtype_size(p->state_dtype);
    const uint64_t slot = (uint64_t)(HV * K * V);
    e[0] = cv_extent_bytes(0, (uint64_t)HV * 4);
    e[1] = cv_extent_bytes(0, (uint64_t)HV * cv_dtype_size(p->bias_dtype));
    e[2] = cv_extent_rows(0, T, (uint64_t)HV * es, (uint64_t)p->a_stride * es);
    e[3] = cv_extent_rows(0, T, (uint64_t)HV * es, (uint64_t)p->b_stride * es);
    e[4] = cv_extent_rows(0, T, (uint64_t)(H * K) * es, (uint64_t)p->q_stride * es);
    e[5] = cv_extent_rows(0, T, (uint64_t)(H * K) * es, (uint64_t)p->k_stride * es);
    e[6] = cv_extent_rows(0, T, (uint64_t)(HV * V) * es, (uint64_t)p->v_stride * es);
    e[7] = cv_extent_bytes(0, (uint64_t)(p->n_seqs + 1) * 4);
    e[8] = cv_extent_rows(0, p->slots, slot * ses, (uint64_t)p->slot_pitch * ses);
    e[9] = cv_extent_bytes(0, (uint64_t)p->n_seqs * 4);
    e[10] = cv_extent_bytes(0, (uint64_t)p->cache_slots * (uint64_t)p->cache_steps * slot * ses);
    e[11] = e[9];
    e[12] = cv_extent_rows(0, T, (uint64_t)(HV * V) * es, (uint64_t)p->o_stride * es);
}

/* The outputs (the state pool, updated in place, the intermediate states and o)
 * share no byte with another argument. */
static bool gdn_is_output(int i)
{
    return i == 8 || i == 10 || i == 12;
}

static clvarlen_status gdn_check_host_overlap(clvarlen_context *ctx, const char *fn,
                                              const cv_gdn_problem *p)
{
    cv_extent e[GDN_NARGS];
    gdn_extents(p, e);
    const void *ptr[GDN_NARGS] = {p->A_log, p->dt_bias, p->a, p->b, p->q, p->k, p->v,
                                  p->cu_seqlens, p->state_pool, p->state_indices, p->inter,
                                  p->cache_indices, p->o};
    cv_region r[GDN_NARGS];
    for (int i = 0; i < GDN_NARGS; i++)
        r[i] = cv_host_region(gdn_names[i], ptr[i], e[i], gdn_is_output(i));
    return cv_check_no_overlap(ctx, fn, r, GDN_NARGS);
}

/* ------------------------------------------------------------------ entry points */

clvarlen_status clvarlen_gated_delta_rule(clvarlen_context *context,
                                          const clvarlen_gdn_params *params, const float *A_log,
                                          const void *dt_bias, const void *a, const void *b,
                                          const void *q, const void *k, const void *v,
                                          const int32_t *cu_seqlens, void *state_pool,
                                          const int32_t *state_indices,
                                          void *intermediate_states, const int32_t *cache_indices,
                                          void *o)
{
    static const char fn[] = "clvarlen_gated_delta_rule";
    CV_ENTER(context);
    const gdn_given given = {
        .cu = cu_seqlens != NULL,
        .pool = state_pool != NULL,
        .sidx = state_indices != NULL,
        .inter = intermediate_states != NULL,
        .cidx = cache_indices != NULL,
    };
    cv_gdn_problem p;
    clvarlen_status st = gdn_check_params(context, fn, params, &given, &p);
    if (st != CLVARLEN_SUCCESS)
        return st;
    p.cu_seqlens = cu_seqlens;
    p.A_log = A_log;
    p.dt_bias = dt_bias;
    p.a = a;
    p.b = b;
    p.q = q;
    p.k = k;
    p.v = v;
    p.o = o;
    p.state_pool = state_pool;
    p.state_indices = state_pool ? state_indices : NULL;
    p.inter = intermediate_states;
    p.cache_indices = intermediate_states ? cache_indices : NULL;
    if (p.total_tokens > 0) {
        const struct {
            const char *name;
            const void *ptr;
        } need[] = {{"A_log", A_log}, {"dt_bias", dt_bias}, {"a", a}, {"b", b},
                    {"q", q},         {"k", k},             {"v", v}, {"o", o}};
        for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
            if (!need[i].ptr)
                return cv_error(context, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: %s is NULL", fn,
                                need[i].name);
    }
    if ((st = gdn_check_host_arrays(context, fn, &p)) != CLVARLEN_SUCCESS)
        return st;
    if ((st = gdn_check_host_overlap(context, fn, &p)) != CLVARLEN_SUCCESS)
        return st;
    if (p.total_tokens == 0 || p.n_seqs == 0)
        return CLVARLEN_SUCCESS;

#if CLVARLEN_HAVE_OPENCL
    if (cv_use_cl(context))
        return cv_gdn_cl_host(context, fn, params, &p);
#endif
    st = cv_cpu_gated_delta_rule(context->base.pool, &p);
    if (st != CLVARLEN_SUCCESS)
        return cv_error(context, st, "%s: out of memory for the CPU scratch", fn);
    return CLVARLEN_SUCCESS;
}

#if CLVARLEN_HAVE_OPENCL

clvarlen_status clvarlen_cl_gated_delta_rule(
    clvarlen_context *context, const clvarlen_gdn_params *params, cl_mem A_log,
    size_t A_log_offset, cl_mem dt_bias, size_t dt_bias_offset, cl_mem a, size_t a_offset,
    cl_mem b, size_t b_offset, cl_mem q, size_t q_offset, cl_mem k, size_t k_offset, cl_mem v,
    size_t v_offset, cl_mem cu_seqlens, size_t cu_offset, cl_mem state_pool,
    size_t state_offset, cl_mem state_indices, size_t state_indices_offset,
    cl_mem intermediate_states, size_t intermediate_offset, cl_mem cache_indices,
    size_t cache_indices_offset, cl_mem o, size_t o_offset, cl_uint num_events,
    const cl_event *wait_list, cl_event *event)
{
    static const char fn[] = "clvarlen_cl_gated_delta_rule";
    CV_ENTER(context);
    if (event)
        *event = NULL;
    clvarlen_status st = cv_cl_enter(context, fn, num_events, wait_list);
    if (st != CLVARLEN_SUCCESS)
        return st;
    const gdn_given given = {
        .cu = cu_seqlens != NULL,
        .pool = state_pool != NULL,
        .sidx = state_indices != NULL,
        .inter = intermediate_states != NULL,
        .cidx = cache_indices != NULL,
    };
    cv_gdn_problem p;
    if ((st = gdn_check_params(context, fn, params, &given, &p)) != CLVARLEN_SUCCESS)
        return st;

    const int64_t T = p.total_tokens;
    const size_t es = cv_dtype_size(p.dtype), ses = cv_dtype_size(p.state_dtype);
    const size_t bes = cv_dtype_size(p.bias_dtype);
    cv_gdn_bufs d;
    memset(&d, 0, sizeof d);
    /* In the order of gdn_names: the buffer, offset, alignment, whether it must
     * be given, and its slot in the launcher's buffers. */
    const struct {
        cl_mem mem;
        size_t off, align;
        bool needed;
        cv_gdn_mem *dst;
    } in[GDN_NARGS] = {
        {A_log, A_log_offset, 4, T > 0, &d.A_log},
        {dt_bias, dt_bias_offset, bes, T > 0, &d.dt_bias},
        {a, a_offset, es, T > 0, &d.a},
        {b, b_offset, es, T > 0, &d.b},
        {q, q_offset, es, T > 0, &d.q},
        {k, k_offset, es, T > 0, &d.k},
        {v, v_offset, es, T > 0, &d.v},
        {cu_seqlens, cu_offset, 4, false, &d.cu},
        {state_pool, state_offset, ses, false, &d.pool},
        {state_pool ? state_indices : NULL, state_indices_offset, 4, false, &d.sidx},
        {intermediate_states, intermediate_offset, ses, false, &d.inter},
        {intermediate_states ? cache_indices : NULL, cache_indices_offset, 4, false, &d.cidx},
        {o, o_offset, es, T > 0, &d.o},
    };
    cv_extent e[GDN_NARGS];
    gdn_extents(&p, e);
    cv_mem_arg args[GDN_NARGS];
    for (int i = 0; i < GDN_NARGS; i++)
        args[i] = (cv_mem_arg){.name = gdn_names[i], .mem = in[i].mem, .offset = in[i].off,
                               .align = in[i].align, .ext = e[i], .needed = in[i].needed,
                               .output = gdn_is_output(i)};
    if ((st = cv_check_mem_args(context, fn, args, GDN_NARGS)) != CLVARLEN_SUCCESS)
        return st;
    for (int i = 0; i < GDN_NARGS; i++) {
        if (in[i].mem) {
            in[i].dst->m = in[i].mem;
            in[i].dst->off = in[i].off;
        }
    }
    return cv_gdn_cl_run(context, fn, params, &p, &d, num_events, wait_list, event);
}

#endif /* CLVARLEN_HAVE_OPENCL */
