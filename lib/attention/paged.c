/* Paged KV cache (SPEC 1.1): the public entry points of the cache append
 * and the paged attention forward, on host memory and on cl_mem buffers.
 * Arguments are validated here; the work goes to the CPU fallback
 * (lib/cpu/attention-paged.c) or to the OpenCL launchers (paged-cl.c, and
 * attention-cl.c for the tiled kernels).
 */
#include "attention/attention-cl.h"

#include <stdlib.h>
#include <string.h>

static void append_defaults(clvarlen_kv_append_params *p)
{
    memset(p, 0, sizeof *p);
    p->struct_size = (uint32_t)sizeof *p;
    p->dtype = CLVARLEN_DTYPE_F32;
    p->cache_dtype = CLVARLEN_DTYPE_F32;
}

void clvarlen_kv_append_params_init_sized(clvarlen_kv_append_params *p, size_t size)
{
    clvarlen_kv_append_params d;
    append_defaults(&d);
    cv_struct_init(p, size, &d, sizeof d);
}

static void paged_defaults(clvarlen_paged_params *p)
{
    memset(p, 0, sizeof *p);
    p->struct_size = (uint32_t)sizeof *p;
    p->dtype = CLVARLEN_DTYPE_F32;
    p->window_left = -1;
    p->window_right = -1;
}

void clvarlen_paged_params_init_sized(clvarlen_paged_params *p, size_t size)
{
    clvarlen_paged_params d;
    paged_defaults(&d);
    cv_struct_init(p, size, &d, sizeof d);
}

/* ------------------------------------------------------------ validation */

static clvarlen_status check_float_dtype(clvarlen_context *ctx, const char *fn, const char *what,
                                         clvarlen_dtype dt)
{
    if (cv_dtype_size(dt) == 0)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: unknown %s %d", fn, what,
                        (int)dt);
    if (!cv_is_float_act(dt))
        return cv_error(ctx, CLVARLEN_ERROR_UNSUPPORTED,
                        "%s: %s %s is not supported (f32, f16 or bf16)", fn, what,
                        clvarlen_dtype_name(dt));
    return CLVARLEN_SUCCESS;
}

/* The cache's geometry: num_pages > 0, page_size >= 1, and the whole cache
 * addressable in bytes. */
static clvarlen_status check_cache(clvarlen_context *ctx, const char *fn, int64_t num_pages,
                                   int32_t page_size, uint64_t row_bytes)
{
    if (num_pages <= 0 || page_size <= 0)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: num_pages (%lld) and page_size (%d) must be positive", fn,
                        (long long)num_pages, (int)page_size);
    if ((uint64_t)num_pages > (uint64_t)INT64_MAX / (uint64_t)page_size / row_bytes)
        return cv_error(ctx, CLVARLEN_ERROR_OVERFLOW, "%s: the cache spans more than 2^63 bytes",
                        fn);
    return CLVARLEN_SUCCESS;
}

static clvarlen_status validate_append(clvarlen_context *ctx, const char *fn,
                                       const clvarlen_kv_append_params *caller, cv_append_desc *a)
{
    clvarlen_status st;
    if (!caller)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: params is NULL", fn);
    clvarlen_kv_append_params full;
    const clvarlen_kv_append_params *p = &full;
    append_defaults(&full);
    if ((st = cv_struct_in(ctx, fn, "params", caller, &full, sizeof full,
                           CLVARLEN_KV_APPEND_PARAMS_MIN_SIZE)) != CLVARLEN_SUCCESS)
        return st;
    if ((st = check_float_dtype(ctx, fn, "dtype", p->dtype)) != CLVARLEN_SUCCESS ||
        (st = check_float_dtype(ctx, fn, "cache_dtype", p->cache_dtype)) != CLVARLEN_SUCCESS)
        return st;
    int32_t dv = p->head_dim_v ? p->head_dim_v : p->head_dim;
    if (p->n_tokens < 0 || p->heads_kv <= 0 || p->head_dim <= 0 || dv <= 0)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: n_tokens (%lld) must be >= 0, heads_kv (%d), head_dim (%d) and "
                        "head_dim_v (%d) positive",
                        fn, (long long)p->n_tokens, (int)p->heads_kv, (int)p->head_dim, (int)dv);
    if (p->n_tokens > INT32_MAX || (int64_t)p->heads_kv * (p->head_dim + (int64_t)dv) > INT32_MAX)
        return cv_error(ctx, CLVARLEN_ERROR_OVERFLOW, "%s: n_tokens or the row width is too large",
                        fn);
    const int64_t kw = (int64_t)p->heads_kv * p->head_dim, vw = (int64_t)p->heads_kv * dv;
    const uint64_t row_b = (uint64_t)(kw > vw ? kw : vw) * 4;
    if ((st = check_cache(ctx, fn, p->num_pages, p->page_size, row_b)) != CLVARLEN_SUCCESS)
        return st;
    memset(a, 0, sizeof *a);
    a->dtype = p->dtype;
    a->cache_dtype = p->cache_dtype;
    a->n_tokens = p->n_tokens;
    a->num_pages = p->num_pages;
    a->page_size = p->page_size;
    a->heads_kv = p->heads_kv;
    a->head_dim = p->head_dim;
    a->head_dim_v = dv;
    if ((st = cv_check_rows(ctx, fn, "k", p->dtype, kw, p->n_tokens, p->k_stride,
                            &a->k_stride)) != CLVARLEN_SUCCESS ||
        (st = cv_check_rows(ctx, fn, "v", p->dtype, vw, p->n_tokens, p->v_stride,
                            &a->v_stride)) != CLVARLEN_SUCCESS)
        return st;
    return CLVARLEN_SUCCESS;
}

/* The extents of the append's tensors: k, v, slot_mapping, k_cache, v_cache. */
static void append_extents(const cv_append_desc *a, cv_extent e[5])
{
    const size_t ies = cv_dtype_size(a->dtype), ces = cv_dtype_size(a->cache_dtype);
    const uint64_t kw = (uint64_t)a->heads_kv * (uint64_t)a->head_dim;
    const uint64_t vw = (uint64_t)a->heads_kv * (uint64_t)a->head_dim_v;
    const uint64_t slots = (uint64_t)a->num_pages * (uint64_t)a->page_size;
    e[0] = cv_extent_rows(0, a->n_tokens, kw * ies, (uint64_t)a->k_stride * ies);
    e[1] = cv_extent_rows(0, a->n_tokens, vw * ies, (uint64_t)a->v_stride * ies);
    e[2] = cv_extent_bytes(0, (uint64_t)a->n_tokens * 8);
    e[3] = cv_extent_bytes(0, slots * kw * ces);
    e[4] = cv_extent_bytes(0, slots * vw * ces);
}

static const char *const append_names[5] = {"k", "v", "slot_mapping", "k_cache", "v_cache"};

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Slots in range (or -1) and no slot twice: a bitmap of the cache's slots, or
 * a sorted copy of the slots when the cache is far larger than the batch. */
static clvarlen_status check_slots(clvarlen_context *ctx, const char *fn, const cv_append_desc *a,
                                   const int64_t *slots)
{
    const int64_t n_slots = a->num_pages * a->page_size;
    for (int64_t t = 0; t < a->n_tokens; t++)
        if (slots[t] != -1 && (slots[t] < 0 || slots[t] >= n_slots))
            return cv_error(ctx, CLVARLEN_ERROR_INDEX_OUT_OF_RANGE,
                            "%s: slot_mapping[%lld] = %lld is outside [0, %lld) and not -1", fn,
                            (long long)t, (long long)slots[t], (long long)n_slots);
    /* Few tokens against a huge cache: a sorted copy is cheaper than the bitmap. */
    const bool sort = (uint64_t)n_slots / 8 > (uint64_t)a->n_tokens * 64;
    size_t words = sort ? (size_t)a->n_tokens : ((size_t)n_slots + 63) / 64;
    uint64_t *seen = calloc(words ? words : 1, sizeof *seen);
    if (!seen)
        return cv_error(ctx, CLVARLEN_ERROR_OUT_OF_MEMORY, "%s: out of memory", fn);
    int64_t dup = -1;
    if (sort) {
        size_t m = 0;
        for (int64_t t = 0; t < a->n_tokens; t++)
            if (slots[t] >= 0)
                seen[m++] = (uint64_t)slots[t];
        qsort(seen, m, sizeof *seen, cmp_u64);
        for (size_t i = 1; i < m && dup < 0; i++)
            if (seen[i] == seen[i - 1])
                dup = (int64_t)seen[i];
    } else {
        for (int64_t t = 0; t < a->n_tokens && dup < 0; t++) {
            if (slots[t] < 0)
                continue;
            uint64_t s = (uint64_t)slots[t], bit = 1ull << (s % 64);
            if (seen[s / 64] & bit)
                dup = slots[t];
            seen[s / 64] |= bit;
        }
    }
    free(seen);
    if (dup >= 0)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: two tokens are mapped to slot %lld", fn, (long long)dup);
    return CLVARLEN_SUCCESS;
}

/* The paged call as an attention description (k/v strides of the cache rows,
 * total_k the page table's capacity). */
static clvarlen_status validate_paged(clvarlen_context *ctx, const char *fn,
                                      const clvarlen_paged_params *caller, cv_attn_desc *d)
{
    clvarlen_status st;
    if (!caller)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: params is NULL", fn);
    clvarlen_paged_params full;
    const clvarlen_paged_params *p = &full;
    paged_defaults(&full);
    if ((st = cv_struct_in(ctx, fn, "params", caller, &full, sizeof full,
                           CLVARLEN_PAGED_PARAMS_MIN_SIZE)) != CLVARLEN_SUCCESS)
        return st;
    clvarlen_attention_params ap;
    clvarlen_attention_params_init(&ap);
    ap.dtype = p->dtype;
    ap.n_seqs = p->n_rows;
    ap.total_q = p->total_q;
    ap.heads_q = p->heads_q;
    ap.heads_kv = p->heads_kv;
    ap.head_dim = p->head_dim;
    ap.head_dim_v = p->head_dim_v;
    ap.q_stride = p->q_stride;
    ap.o_stride = p->o_stride;
    ap.max_seqlen_q = p->max_seqlen_q;
    ap.scale = p->scale;
    ap.causal = p->causal;
    ap.window_left = p->window_left;
    ap.window_right = p->window_right;
    ap.softcap = p->softcap;
    if ((st = cv_attn_validate(ctx, fn, &ap, d)) != CLVARLEN_SUCCESS)
        return st;
    const uint64_t row_b = (uint64_t)p->heads_kv *
                           (uint64_t)(d->head_dim > d->head_dim_v ? d->head_dim : d->head_dim_v) *
                           cv_dtype_size(p->dtype);
    if ((st = check_cache(ctx, fn, p->num_pages, p->page_size, row_b)) != CLVARLEN_SUCCESS)
        return st;
    if (p->max_pages <= 0)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: max_pages must be positive",
                        fn);
    if (p->num_pages > INT32_MAX / p->page_size)
        return cv_error(ctx, CLVARLEN_ERROR_OVERFLOW,
                        "%s: num_pages * page_size (the cache's token slots) must fit int32", fn);
    if ((int64_t)p->max_pages * p->page_size > INT32_MAX)
        return cv_error(ctx, CLVARLEN_ERROR_OVERFLOW,
                        "%s: max_pages * page_size must fit int32 cache_seqlens", fn);
    int64_t pitch = p->page_table_stride ? p->page_table_stride : p->max_pages;
    if (pitch < p->max_pages)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: page_table_stride (%lld) is smaller than max_pages (%d)", fn,
                        (long long)pitch, (int)p->max_pages);
    if (p->n_rows > 0 && pitch > INT64_MAX / 4 / p->n_rows)
        return cv_error(ctx, CLVARLEN_ERROR_OVERFLOW, "%s: the page table spans too many bytes",
                        fn);
    if (p->num_splits < 0 || p->num_splits > CV_PAGED_MAX_SPLITS)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: num_splits (%d) must be 0 (automatic) to %d", fn,
                        (int)p->num_splits, CV_PAGED_MAX_SPLITS);
    d->page_size = p->page_size;
    d->max_pages = p->max_pages;
    d->num_pages = p->num_pages;
    d->pt_stride = pitch;
    d->num_splits = p->num_splits;
    d->total_k = (int64_t)p->max_pages * p->page_size;
    d->k_stride = (int64_t)p->heads_kv * d->head_dim;
    d->v_stride = (int64_t)p->heads_kv * d->head_dim_v;
    return CLVARLEN_SUCCESS;
}

/* The extents of the paged forward's tensors: q, k_cache, v_cache,
 * cu_seqlens_q, page_table, cache_seqlens, o, lse. */
static void paged_extents(const cv_attn_desc *d, cv_extent e[8])
{
    const size_t es = cv_dtype_size(d->dtype);
    const uint64_t hq = (uint64_t)d->heads_q, hk = (uint64_t)d->heads_kv;
    const uint64_t slots = (uint64_t)d->num_pages * (uint64_t)d->page_size;
    e[0] = cv_extent_rows(0, d->total_q, hq * (uint64_t)d->head_dim * es,
                          (uint64_t)d->q_stride * es);
    e[1] = cv_extent_bytes(0, slots * hk * (uint64_t)d->head_dim * es);
    e[2] = cv_extent_bytes(0, slots * hk * (uint64_t)d->head_dim_v * es);
    e[3] = cv_extent_bytes(0, (uint64_t)(d->n_seqs + 1) * 4);
    e[4] = cv_extent_rows(0, d->n_seqs, (uint64_t)d->max_pages * 4, (uint64_t)d->pt_stride * 4);
    e[5] = cv_extent_bytes(0, (uint64_t)d->n_seqs * 4);
    e[6] = cv_extent_rows(0, d->total_q, hq * (uint64_t)d->head_dim_v * es,
                          (uint64_t)d->o_stride * es);
    e[7] = cv_extent_bytes(0, hq * (uint64_t)d->total_q * 4);
}

static const char *const paged_names[8] = {"q",          "k_cache",       "v_cache", "cu_seqlens_q",
                                           "page_table", "cache_seqlens", "o",       "lse"};

/* cache_seqlens against the query counts and the capacity; used page-table
 * entries within the cache. */
static clvarlen_status check_rows(clvarlen_context *ctx, const char *fn, const cv_attn_desc *d,
                                  const int32_t *cu_q, const int32_t *pt, const int32_t *cs)
{
    for (int64_t b = 0; b < d->n_seqs; b++) {
        const int32_t lq = cu_q[b + 1] - cu_q[b];
        if (cs[b] < lq || cs[b] > d->total_k)
            return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                            "%s: cache_seqlens[%lld] = %d must be within [%d (the row's queries), "
                            "%lld (max_pages * page_size)]",
                            fn, (long long)b, (int)cs[b], (int)lq, (long long)d->total_k);
        const int32_t *row = pt + (size_t)b * (size_t)d->pt_stride;
        const int32_t used = (int32_t)(((int64_t)cs[b] + d->page_size - 1) / d->page_size);
        for (int32_t i = 0; i < used; i++)
            if (row[i] < 0 || row[i] >= d->num_pages)
                return cv_error(ctx, CLVARLEN_ERROR_INDEX_OUT_OF_RANGE,
                                "%s: page_table[%lld][%d] = %d is outside [0, %lld)", fn,
                                (long long)b, (int)i, (int)row[i], (long long)d->num_pages);
    }
    return CLVARLEN_SUCCESS;
}

/* ------------------------------------------------------------ host-memory entry points */

clvarlen_status clvarlen_kv_cache_append(clvarlen_context *ctx,
                                         const clvarlen_kv_append_params *params, const void *k,
                                         const void *v, const int64_t *slot_mapping,
                                         void *k_cache, void *v_cache)
{
    static const char fn[] = "clvarlen_kv_cache_append";
    CV_ENTER(ctx);
    cv_append_desc a;
    clvarlen_status st = validate_append(ctx, fn, params, &a);
    if (st != CLVARLEN_SUCCESS)
        return st;
    if (a.n_tokens == 0)
        return CLVARLEN_SUCCESS;
    if (!k || !v || !slot_mapping || !k_cache || !v_cache)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: k, v, slot_mapping, k_cache and v_cache must not be NULL", fn);
    cv_extent e[5];
    append_extents(&a, e);
    const void *ptr[5] = {k, v, slot_mapping, k_cache, v_cache};
    cv_region r[5];
    for (int i = 0; i < 5; i++)
        r[i] = cv_host_region(append_names[i], ptr[i], e[i], i >= 3);
    if ((st = cv_check_no_overlap(ctx, fn, r, 5)) != CLVARLEN_SUCCESS ||
        (st = check_slots(ctx, fn, &a, slot_mapping)) != CLVARLEN_SUCCESS)
        return st;
    /* Host memory in, host memory out: a copy, done here on every context. */
    cv_cpu_kv_append(&a, k, v, slot_mapping, k_cache, v_cache);
    return CLVARLEN_SUCCESS;
}

clvarlen_status clvarlen_paged_attention_forward(clvarlen_context *ctx,
                                                 const clvarlen_paged_params *params,
                                                 const void *q, const void *k_cache,
                                                 const void *v_cache, const int32_t *cu_seqlens_q,
                                                 const int32_t *page_table,
                                                 const int32_t *cache_seqlens, void *o, float *lse)
{
    static const char fn[] = "clvarlen_paged_attention_forward";
    CV_ENTER(ctx);
    cv_attn_desc d;
    clvarlen_status st = validate_paged(ctx, fn, params, &d);
    if (st != CLVARLEN_SUCCESS)
        return st;
    if (d.n_seqs > 0 && (!cu_seqlens_q || !page_table || !cache_seqlens))
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: cu_seqlens_q, page_table and cache_seqlens must not be NULL", fn);
    if (d.total_q > 0 && (!q || !o || !k_cache || !v_cache))
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: q, k_cache, v_cache and o must not be NULL", fn);
    if ((st = cv_check_cu_seqlens(ctx, fn, "cu_seqlens_q", cu_seqlens_q, d.n_seqs, d.total_q)) !=
            CLVARLEN_SUCCESS ||
        (st = cv_attn_check_max_seqlen(ctx, fn, "max_seqlen_q", cu_seqlens_q, d.n_seqs,
                                       d.max_seqlen_q)) != CLVARLEN_SUCCESS ||
        (st = check_rows(ctx, fn, &d, cu_seqlens_q, page_table, cache_seqlens)) !=
            CLVARLEN_SUCCESS)
        return st;
    if (d.total_q == 0 || d.n_seqs == 0)
        return CLVARLEN_SUCCESS;
    cv_extent e[8];
    paged_extents(&d, e);
    const void *ptr[8] = {q, k_cache, v_cache, cu_seqlens_q, page_table, cache_seqlens, o, lse};
    cv_region r[8];
    for (int i = 0; i < 8; i++)
        r[i] = cv_host_region(paged_names[i], ptr[i], e[i], i >= 6);
    if ((st = cv_check_no_overlap(ctx, fn, r, 8)) != CLVARLEN_SUCCESS)
        return st;
#if CLVARLEN_HAVE_OPENCL
    if (cv_use_cl(ctx))
        return cv_attn_cl_forward_host(ctx, fn, &d, q, k_cache, v_cache, cu_seqlens_q,
                                       cache_seqlens, NULL, page_table, o, lse);
#endif
    return cv_cpu_paged_forward(ctx, &d, q, k_cache, v_cache, cu_seqlens_q, page_table,
                                cache_seqlens, o, lse);
}

/* ------------------------------------------------------------ cl_mem entry points */

#if CLVARLEN_HAVE_OPENCL

clvarlen_status clvarlen_cl_kv_cache_append(clvarlen_context *ctx,
                                            const clvarlen_kv_append_params *params, cl_mem k,
                                            size_t k_offset, cl_mem v, size_t v_offset,
                                            cl_mem slot_mapping, size_t slot_offset,
                                            cl_mem k_cache, size_t k_cache_offset, cl_mem v_cache,
                                            size_t v_cache_offset, cl_uint num_events,
                                            const cl_event *wait_list, cl_event *event)
{
    static const char fn[] = "clvarlen_cl_kv_cache_append";
    CV_ENTER(ctx);
    if (event)
        *event = NULL;
    clvarlen_status st = cv_cl_enter(ctx, fn, num_events, wait_list);
    if (st != CLVARLEN_SUCCESS)
        return st;
    cv_append_desc a;
    if ((st = validate_append(ctx, fn, params, &a)) != CLVARLEN_SUCCESS)
        return st;
    const bool work = a.n_tokens > 0;
    cv_extent e[5];
    append_extents(&a, e);
    const cl_mem mems[5] = {k, v, slot_mapping, k_cache, v_cache};
    const size_t offs[5] = {k_offset, v_offset, slot_offset, k_cache_offset, v_cache_offset};
    const size_t ies = cv_dtype_size(a.dtype), ces = cv_dtype_size(a.cache_dtype);
    const size_t align[5] = {ies, ies, 8, ces, ces};
    cv_mem_arg args[5];
    for (int i = 0; i < 5; i++)
        args[i] = (cv_mem_arg){.name = append_names[i], .mem = mems[i], .offset = offs[i],
                               .align = align[i], .ext = e[i], .needed = work,
                               .output = i >= 3};
    if ((st = cv_check_mem_args(ctx, fn, args, 5)) != CLVARLEN_SUCCESS)
        return st;
    const cv_append_mem m = {
        .k = k, .k_off = k_offset,
        .v = v, .v_off = v_offset,
        .slot = slot_mapping, .slot_off = slot_offset,
        .kc = k_cache, .kc_off = k_cache_offset,
        .vc = v_cache, .vc_off = v_cache_offset,
    };
    cv_chain c;
    st = cv_chain_begin(&c, ctx, num_events, wait_list, event != NULL, ctx->device_checks && work);
    if (st == CLVARLEN_SUCCESS && work && c.flag)
        st = cv_chain_check_range(&c, NULL, slot_mapping, slot_offset, a.n_tokens, 0,
                                  a.num_pages * a.page_size, true, CV_CHECK_INDEX);
    if (st == CLVARLEN_SUCCESS && work)
        st = cv_paged_cl_append(&c, &a, &m);
    return cv_chain_end(&c, fn, st, event);
}

clvarlen_status clvarlen_cl_paged_attention_forward(
    clvarlen_context *ctx, const clvarlen_paged_params *params, cl_mem q, size_t q_offset,
    cl_mem k_cache, size_t k_cache_offset, cl_mem v_cache, size_t v_cache_offset,
    cl_mem cu_seqlens_q, size_t cu_q_offset, cl_mem page_table, size_t page_table_offset,
    cl_mem cache_seqlens, size_t cache_seqlens_offset, cl_mem o, size_t o_offset, cl_mem lse,
    size_t lse_offset, cl_uint num_events, const cl_event *wait_list, cl_event *event)
{
    static const char fn[] = "clvarlen_cl_paged_attention_forward";
    CV_ENTER(ctx);
    if (event)
        *event = NULL;
    clvarlen_status st = cv_cl_enter(ctx, fn, num_events, wait_list);
    if (st != CLVARLEN_SUCCESS)
        return st;
    cv_attn_desc d;
    if ((st = validate_paged(ctx, fn, params, &d)) != CLVARLEN_SUCCESS)
        return st;
    const bool work = d.total_q > 0 && d.n_seqs > 0;
    cv_extent e[8];
    paged_extents(&d, e);
    const cl_mem mems[8] = {q, k_cache, v_cache, cu_seqlens_q, page_table, cache_seqlens, o, lse};
    const size_t offs[8] = {q_offset,          k_cache_offset,       v_cache_offset,
                            cu_q_offset,       page_table_offset,    cache_seqlens_offset,
                            o_offset,          lse_offset};
    const size_t es = cv_dtype_size(d.dtype);
    cv_mem_arg args[8];
    for (int i = 0; i < 8; i++)
        args[i] = (cv_mem_arg){.name = paged_names[i], .mem = mems[i], .offset = offs[i],
                               .align = (i < 3 || i == 6) ? es : 4, .ext = e[i],
                               .needed = work && i != 7, .output = i >= 6};
    if ((st = cv_check_mem_args(ctx, fn, args, 8)) != CLVARLEN_SUCCESS)
        return st;
    const cv_attn_mem m = {
        .q = q, .q_off = q_offset,
        .k = k_cache, .k_off = k_cache_offset,
        .v = v_cache, .v_off = v_cache_offset,
        .cu_q = cu_seqlens_q, .cu_q_off = cu_q_offset,
        .cu_k = cache_seqlens, .cu_k_off = cache_seqlens_offset,
        .pt = page_table, .pt_off = page_table_offset,
        .o = o, .o_off = o_offset,
        .lse = lse, .lse_off = lse_offset,
    };
    cv_chain c;
    st = cv_chain_begin(&c, ctx, num_events, wait_list, event != NULL, ctx->device_checks && work);
    if (st == CLVARLEN_SUCCESS && work && c.flag)
        st = cv_paged_cl_check(&c, &d, &m);
    if (st == CLVARLEN_SUCCESS && work)
        st = cv_paged_cl_forward(&c, fn, &d, &m);
    return cv_chain_end(&c, fn, st, event);
}

#endif /* CLVARLEN_HAVE_OPENCL */
