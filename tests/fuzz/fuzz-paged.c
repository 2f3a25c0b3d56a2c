/* The fuzz target's paged KV cache (SPEC 1.1): the cache append (slot
 * mappings mostly valid, sometimes -1, out of range or repeated; input and
 * cache dtypes drawn apart) and the paged forward (page tables with a pitch,
 * entries past a row's used pages filled with garbage that must never
 * matter, cache_seqlens, num_splits and max_seqlen_q sometimes out of range).
 * On success the append may change only the cache rows of the slots named,
 * the forward only o's rows and lse. Where the contract names the status of
 * the only error a call has (a slot or a used page-table entry out of range,
 * two tokens on one slot, a cache_seqlens outside its range), it is checked. */
#include "fuzz.h"

#include <math.h>
#include <string.h>

static const clvarlen_dtype act_dtypes[] = {
    CLVARLEN_DTYPE_F32, CLVARLEN_DTYPE_F16, CLVARLEN_DTYPE_BF16,
};

static int is_act(clvarlen_dtype dt)
{
    return dt == CLVARLEN_DTYPE_F32 || dt == CLVARLEN_DTYPE_F16 || dt == CLVARLEN_DTYPE_BF16;
}

static uint32_t struct_size(fz_reader *r, uint32_t init)
{
    uint8_t b = fz_u8(r);
    return b < 248 ? init : b % 2 ? 0 : init - 4;
}

/* A small positive count (1..n) mostly, sometimes fz_count's hostile values. */
static int64_t small_pos(fz_reader *r, int64_t n)
{
    uint8_t b = fz_u8(r);
    return b < 216 ? 1 + b % n : fz_count(r, n);
}

static void fill_acts(fz_call *c, void *p, clvarlen_dtype dt)
{
    fz_buf *b = fz_find(c, p);
    if (b && is_act(dt))
        fz_fill_floats(c->r, p, dt, b->bytes / clvarlen_dtype_size(dt));
}

/* A call whose only error is one the contract names the status of (and whose
 * strides are tame, so that no overflow may be reported first): the status must be
 * `want`, or an out-of-memory, which any call may meet. */
static void expect_status(fz_call *c, clvarlen_status st, int only, clvarlen_status want,
                          const char *why)
{
    if (!only || !c->ctx || st == CLVARLEN_SUCCESS)
        return;
    if (st != want && st != CLVARLEN_ERROR_OUT_OF_MEMORY)
        fz_fail(c, "%s: %s, expected %s (%s)", why, clvarlen_status_name(st),
                clvarlen_status_name(want), clvarlen_last_error(c->ctx));
}

static int tame(int64_t stride)
{
    return stride >= 0 && stride <= ((int64_t)1 << 32);
}

/* Notes a must-fail reason of the data and its bit in *seen. */
static void note(fz_call *c, unsigned *seen, int cond, const char *why, unsigned bit)
{
    fz_must_fail(c, cond, why);
    if (cond)
        *seen |= bit;
}

/* ------------------------------------------------------------ cache append */

static const char slot_range[] = "a slot outside [0, num_pages * page_size) and not -1";
static const char slot_twice[] = "two tokens mapped to one slot";

/* Slots: mostly distinct and in [0, n_slots) (or -1), sometimes repeated or out of range. */
static void fill_slots(fz_reader *r, int64_t *slots, int64_t n, int64_t n_slots)
{
    static const int64_t odd[] = {-2, INT64_MIN, INT64_MAX, (int64_t)1 << 32, INT32_MAX, -3};
    static unsigned char used[FZ_CAP_BYTES];
    int distinct = fz_u8(r) < 200 && n_slots <= FZ_CAP_BYTES;
    int64_t n_used = 0;
    if (distinct)
        memset(used, 0, (size_t)n_slots);
    for (int64_t t = 0; t < n; t++) {
        uint8_t b = fz_u8(r);
        if (b < 190 && n_slots > 0) {
            int64_t s = (int64_t)(fz_u8(r) + 256u * fz_u8(r)) % n_slots;
            while (distinct && n_used < n_slots && used[s])
                s = (s + 1) % n_slots;
            slots[t] = distinct && n_used == n_slots ? -1 : s;
        } else if (b < 225) {
            slots[t] = -1;
        } else if (b < 235 && t > 0) {
            slots[t] = slots[fz_u8(r) % t];
        } else if (b < 245) {
            slots[t] = n_slots;
        } else {
            slots[t] = odd[b % 6];
        }
        if (distinct && slots[t] >= 0 && slots[t] < n_slots && !used[slots[t]])
            used[slots[t]] = 1, n_used++;
    }
}

static void append_params(fz_reader *r, clvarlen_kv_append_params *p)
{
    clvarlen_kv_append_params_init(p);
    p->struct_size = struct_size(r, p->struct_size);
    p->dtype = fz_dtype(r, act_dtypes, 3);
    p->cache_dtype = fz_dtype(r, act_dtypes, 3);
    p->n_tokens = fz_count(r, 8);
    p->num_pages = small_pos(r, 4);
    p->page_size = (int32_t)small_pos(r, 4);
    p->heads_kv = (int32_t)small_pos(r, 2);
    uint8_t b = fz_u8(r);
    static const int32_t odd[] = {0, -1, -16, 256, INT32_MAX, 1, 3, 33};
    p->head_dim = b < 232 ? 1 + b % 20 : odd[b % 8];
    b = fz_u8(r);
    p->head_dim_v = b < 128 ? 0 : b < 240 ? 1 + b % 20 : odd[b % 8];
    int32_t dv = p->head_dim_v ? p->head_dim_v : p->head_dim;
    p->k_stride = fz_stride(r, (int64_t)p->heads_kv * p->head_dim);
    p->v_stride = fz_stride(r, (int64_t)p->heads_kv * dv);
}

static clvarlen_status op_kv_cache_append(fz_call *c)
{
    fz_reader *r = c->r;
    clvarlen_kv_append_params p;
    append_params(r, &p);
    int32_t dv = p.head_dim_v ? p.head_dim_v : p.head_dim;
    int64_t kw = (int64_t)p.heads_kv * p.head_dim, vw = (int64_t)p.heads_kv * dv;
    fz_i128 n_slots = (fz_i128)p.num_pages * p.page_size;
    fz_must_fail(c, p.struct_size < sizeof p, "struct_size below the struct");
    fz_bad_size(c, !is_act(p.dtype) || !is_act(p.cache_dtype), "dtype not f32, f16 or bf16");
    fz_bad_size(c, p.n_tokens < 0, "negative n_tokens");
    fz_must_fail(c, p.heads_kv <= 0 || p.head_dim <= 0 || p.head_dim_v < 0,
                 "heads_kv, head_dim or head_dim_v not positive");
    fz_must_fail(c, p.num_pages <= 0 || p.page_size <= 0, "num_pages or page_size not positive");
    void *k = fz_rows(c, "k", FZ_IN, p.dtype, kw, p.n_tokens, p.k_stride, 32);
    void *v = fz_rows(c, "v", FZ_IN, p.dtype, vw, p.n_tokens, p.v_stride, 32);
    int64_t *slots = fz_buffer(c, "slot_mapping", FZ_IN, (fz_i128)p.n_tokens * 8, 32);
    void *kc = fz_rows(c, "k_cache", FZ_INOUT, p.cache_dtype, kw, n_slots, 0, 32);
    void *vc = fz_rows(c, "v_cache", FZ_INOUT, p.cache_dtype, vw, n_slots, 0, 32);
    if (c->skip)
        return FZ_NOT_CALLED;
    int has_work = p.n_tokens > 0;
    fz_required(c, k, has_work, "NULL k");
    fz_required(c, v, has_work, "NULL v");
    fz_required(c, slots, has_work, "NULL slot_mapping");
    fz_required(c, kc, has_work, "NULL k_cache");
    fz_required(c, vc, has_work, "NULL v_cache");
    int64_t n = fz_n(c, slots, 8, p.n_tokens);
    int64_t ns = n_slots > INT64_MAX ? INT64_MAX : n_slots < 0 ? 0 : (int64_t)n_slots;
    fill_slots(r, slots, n, ns);
    /* The slot checks, on the whole slot_mapping only (a short buffer: must fail anyway). */
    int whole = !c->must_fail;
    unsigned seen = 0;
    for (int64_t t = 0; whole && t < n; t++)
        note(c, &seen, slots[t] != -1 && (slots[t] < 0 || slots[t] >= ns), slot_range, 1);
    for (int64_t t = 0; whole && t < n; t++)
        for (int64_t u = 0; u < t && slots[t] >= 0; u++)
            note(c, &seen, slots[u] == slots[t], slot_twice, 2);
    fill_acts(c, k, p.dtype);
    fill_acts(c, v, p.dtype);
    fill_acts(c, kc, p.cache_dtype);
    fill_acts(c, vc, p.cache_dtype);
    fz_before_call(c, 1);
    clvarlen_status st = clvarlen_kv_cache_append(c->ctx, &p, k, v, slots, kc, vc);
    for (int64_t t = 0; whole && !c->must_fail && t < n; t++) {
        fz_allow_tensor(c, kc, slots[t], 1, p.cache_dtype, kw, 0);
        fz_allow_tensor(c, vc, slots[t], 1, p.cache_dtype, vw, 0);
    }
    fz_after_call(c, st);
    if (whole && !c->must_fail && st == CLVARLEN_ERROR_INDEX_OUT_OF_RANGE)
        fz_fail(c, "INDEX_OUT_OF_RANGE with every slot in range or -1 (%s)",
                clvarlen_last_error(c->ctx));
    int only = whole && tame(p.k_stride) && tame(p.v_stride);
    expect_status(c, st, only && seen == 1, CLVARLEN_ERROR_INDEX_OUT_OF_RANGE, slot_range);
    expect_status(c, st, only && seen == 2, CLVARLEN_ERROR_INVALID_ARGUMENT, slot_twice);
    if (only && seen == 3 && st != CLVARLEN_ERROR_INDEX_OUT_OF_RANGE)
        expect_status(c, st, 1, CLVARLEN_ERROR_INVALID_ARGUMENT, slot_twice);
    return st;
}

/* ------------------------------------------------------------ paged forward */

static const char bad_cu[] = "invalid cu_seqlens_q";
static const char bad_maxq[] = "max_seqlen_q below a row's query count";
static const char bad_cs[] = "cache_seqlens outside [len_q, max_pages * page_size]";
static const char bad_pt[] = "a used page-table entry outside [0, num_pages)";

static int32_t head_dim(fz_reader *r)
{
    uint8_t b = fz_u8(r);
    static const int32_t odd[] = {0, 8, 17, 24, 272, 256, -16, INT32_MAX};
    return b < 224 ? 16 << (b % 3) : odd[b % 8];
}

static int dim_ok(int32_t d)
{
    return d >= 16 && d <= 256 && d % 16 == 0;
}

/* max_seqlen_q is set once the rows are known: 0, exact, too small, or anything. */
enum { MAXQ_ZERO, MAXQ_EXACT, MAXQ_SMALL, MAXQ_ANY };

static void paged_params(fz_reader *r, clvarlen_paged_params *p, int *maxq_mode)
{
    clvarlen_paged_params_init(p);
    p->struct_size = struct_size(r, p->struct_size);
    p->dtype = fz_dtype(r, act_dtypes, 3);
    p->n_rows = fz_count(r, 4);
    p->total_q = fz_count(r, 8);
    p->num_pages = small_pos(r, 6);
    p->page_size = (int32_t)small_pos(r, 4);
    p->max_pages = (int32_t)small_pos(r, 4);
    uint8_t b = fz_u8(r);
    /* 0 or the columns plus a gap; sometimes below the columns (0 there means max_pages) */
    p->page_table_stride = b < 150 ? 0 : b < 230 ? (int64_t)p->max_pages + b % 3
                         : b < 245 ? (int64_t)p->max_pages - 1 - b % 2 : fz_count(r, 4);
    p->heads_kv = (int32_t)small_pos(r, 2);
    p->heads_q = fz_u8(r) < 240 ? (int32_t)(uint32_t)((int64_t)p->heads_kv * (1 + fz_u8(r) % 3))
                                : fz_count32(r, 3);
    p->head_dim = head_dim(r);
    p->head_dim_v = fz_u8(r) < 160 ? 0 : head_dim(r);
    int32_t dv = p->head_dim_v ? p->head_dim_v : p->head_dim;
    p->q_stride = fz_stride(r, (int64_t)p->heads_q * p->head_dim);
    p->o_stride = fz_stride(r, (int64_t)p->heads_q * dv);
    b = fz_u8(r);
    *maxq_mode = b < 100 ? MAXQ_ZERO : b < 200 ? MAXQ_EXACT : b < 240 ? MAXQ_SMALL : MAXQ_ANY;
    p->max_seqlen_q = *maxq_mode == MAXQ_ANY ? fz_count32(r, 8) : 0;
    p->scale = fz_float(r, 0.0f);
    p->causal = fz_u8(r) % 2;
    p->window_left = fz_u8(r) < 160 ? -1 : fz_count32(r, 6);
    p->window_right = fz_u8(r) < 160 ? -1 : fz_count32(r, 6);
    p->softcap = fz_u8(r) < 200 ? 0.0f : fz_float(r, 5.0f);
    b = fz_u8(r);
    static const int32_t odd[] = {-1, 257, 256, INT32_MAX, INT32_MIN, 1, 64, -2};
    p->num_splits = b < 224 ? b % 4 : odd[b % 8];
}

static void paged_must_fail(fz_call *c, const clvarlen_paged_params *p)
{
    fz_must_fail(c, p->struct_size < sizeof *p, "struct_size below the struct");
    fz_bad_size(c, !is_act(p->dtype), "dtype not f32, f16 or bf16");
    fz_bad_size(c, p->n_rows < 0 || p->total_q < 0, "negative size");
    fz_must_fail(c, p->heads_q <= 0 || p->heads_kv <= 0 || p->heads_q % p->heads_kv != 0,
                 "bad head counts");
    fz_must_fail(c, !dim_ok(p->head_dim) || (p->head_dim_v != 0 && !dim_ok(p->head_dim_v)),
                 "unsupported head dim");
    fz_must_fail(c, p->num_pages <= 0 || p->page_size <= 0, "num_pages or page_size not positive");
    fz_must_fail(c, p->max_pages <= 0, "max_pages not positive");
    fz_bad_size(c, p->page_table_stride != 0 && p->page_table_stride < p->max_pages,
                "page_table_stride below max_pages");
    fz_must_fail(c, p->num_splits < 0 || p->num_splits > 256, "num_splits outside 0..256");
    fz_must_fail(c, !isfinite(p->scale), "scale not finite");
    fz_must_fail(c, p->window_left < -1 || p->window_right < -1, "window below -1");
    fz_must_fail(c, p->softcap < 0 || isnan(p->softcap), "negative or NaN softcap");
    fz_must_fail(c, p->max_seqlen_q < 0, "negative max_seqlen_q");
}

static int64_t rand16(fz_reader *r, int64_t n)
{
    return n > 0 ? (int64_t)(fz_u8(r) + 256u * fz_u8(r)) % n : 0;
}

/* cache_seqlens: mostly in [len_q, cap] (small values first), sometimes outside. */
static void fill_cache_seqlens(fz_reader *r, int32_t *cs, const int32_t *cu, int64_t n,
                               int64_t cap)
{
    for (int64_t b = 0; b < n; b++) {
        int64_t lq = (int64_t)cu[b + 1] - cu[b], x = fz_u8(r);
        if (x < 150 && cap >= lq)
            cs[b] = (int32_t)(lq + rand16(r, (cap - lq < 24 ? cap - lq : 24) + 1));
        else if (x < 220 && cap >= lq)
            cs[b] = (int32_t)(lq + rand16(r, cap - lq + 1));
        else if (x < 232)
            cs[b] = (int32_t)(lq - 1);
        else if (x < 244)
            cs[b] = (int32_t)(cap + 1);
        else
            cs[b] = x % 2 ? -1 : INT32_MAX;
    }
}

/* Page-table rows: used entries mostly in [0, num_pages), sometimes not; the rest of
 * each row and the gap up to the pitch are garbage the call must never read. */
static void fill_page_table(fz_reader *r, int32_t *pt, int64_t entries, int64_t pitch,
                            const int32_t *cs, int64_t n, const clvarlen_paged_params *p)
{
    static const int32_t junk[] = {-1, INT32_MIN, INT32_MAX, -7, 1 << 20, 0};
    for (int64_t i = 0; i < entries; i++) {
        int64_t b = i / pitch, col = i % pitch;
        int64_t used = b < n && cs[b] > 0 ? ((int64_t)cs[b] + p->page_size - 1) / p->page_size : 0;
        uint8_t x = fz_u8(r);
        if (col < used && x < 236)
            pt[i] = (int32_t)rand16(r, p->num_pages);
        else if (col < used)
            pt[i] = x % 3 == 0 ? -1 : x % 3 == 1 ? (int32_t)p->num_pages : INT32_MIN;
        else
            pt[i] = x < 128 ? (int32_t)(p->num_pages + x) : junk[x % 6];
    }
}

/* The rows against the contract, first reason kept; the work in keys. */
static int64_t check_rows(fz_call *c, const clvarlen_paged_params *p, const int32_t *cu,
                          const int32_t *pt, const int32_t *cs, int64_t pitch, unsigned *seen)
{
    int64_t n = p->n_rows, cap = (int64_t)p->max_pages * p->page_size, work = 0;
    if (!cu || !pt || !cs)
        return 0;
    for (int64_t b = 0; b < n; b++) {
        int64_t lq = (int64_t)cu[b + 1] - cu[b];
        note(c, seen, cs[b] < lq || cs[b] > cap, bad_cs, 4);
        if (cs[b] < lq || cs[b] > cap)
            continue;
        int64_t used = ((int64_t)cs[b] + p->page_size - 1) / p->page_size;
        for (int64_t i = 0; i < used; i++)
            note(c, seen, pt[b * pitch + i] < 0 || pt[b * pitch + i] >= p->num_pages, bad_pt, 8);
        work += (lq + 1) * cs[b];
    }
    return work;
}

static int64_t longest(const int32_t *cu, int64_t n)
{
    int64_t m = 0;
    for (int64_t s = 0; cu && s < n; s++)
        if ((int64_t)cu[s + 1] - cu[s] > m)
            m = (int64_t)cu[s + 1] - cu[s];
    return m;
}

static int cu_ok(const int32_t *cu, int64_t n, int64_t total)
{
    if (!cu || n < 0 || cu[0] != 0)
        return 0;
    for (int64_t s = 0; s < n; s++)
        if (cu[s + 1] < cu[s])
            return 0;
    return cu[n] == total;
}

static clvarlen_status op_paged_attention_forward(fz_call *c)
{
    fz_reader *r = c->r;
    clvarlen_paged_params p;
    int maxq_mode;
    paged_params(r, &p, &maxq_mode);
    paged_must_fail(c, &p);
    int32_t dv = p.head_dim_v ? p.head_dim_v : p.head_dim;
    int64_t qrow = (int64_t)p.heads_q * p.head_dim, orow = (int64_t)p.heads_q * dv;
    /* The strides of q and o are checked even when the tensor is NULL (no rows):
     * fz_rows sees them only for a tensor it passes (CI 2026-11-27 found one). */
    fz_bad_size(c, p.q_stride != 0 && p.q_stride < qrow, "q stride smaller than the row");
    fz_bad_size(c, p.o_stride != 0 && p.o_stride < orow, "o stride smaller than the row");
    int64_t pitch = p.page_table_stride ? p.page_table_stride : p.max_pages;
    fz_i128 n_slots = (fz_i128)p.num_pages * p.page_size;
    int32_t *cu = fz_buffer(c, "cu_seqlens_q", FZ_IN,
                            p.n_rows >= 0 ? ((fz_i128)p.n_rows + 1) * 4 : 0, 32);
    int32_t *pt = fz_rows(c, "page_table", FZ_IN, CLVARLEN_DTYPE_I32, p.max_pages, p.n_rows,
                          p.page_table_stride, 32);
    int32_t *cs = fz_buffer(c, "cache_seqlens", FZ_IN, (fz_i128)p.n_rows * 4, 32);
    void *kc = fz_rows(c, "k_cache", FZ_IN, p.dtype, (int64_t)p.heads_kv * p.head_dim, n_slots,
                       0, 32);
    void *vc = fz_rows(c, "v_cache", FZ_IN, p.dtype, (int64_t)p.heads_kv * dv, n_slots, 0, 32);
    void *q = fz_rows(c, "q", FZ_IN, p.dtype, qrow, p.total_q, p.q_stride, 32);
    void *o = fz_rows(c, "o", FZ_OUT, p.dtype, orow, p.total_q, p.o_stride, 32);
    float *lse = fz_buffer(c, "lse", FZ_OUT, (fz_i128)p.heads_q * p.total_q * 4, 4);
    if (c->skip)
        return FZ_NOT_CALLED;
    int rows = p.n_rows > 0, work = p.total_q > 0;
    fz_required(c, cu, rows, "NULL cu_seqlens_q");
    fz_required(c, pt, rows, "NULL page_table");
    fz_required(c, cs, rows, "NULL cache_seqlens");
    fz_required(c, q, work, "NULL q");
    fz_required(c, o, work, "NULL o");
    fz_required(c, kc, work, "NULL k_cache");
    fz_required(c, vc, work, "NULL v_cache");
    int64_t ncu = fz_n(c, cu, 4, (fz_i128)p.n_rows + 1) - 1;
    fz_fill_cu(r, cu, ncu, p.total_q);
    /* The rows are filled and checked only on a call whose buffers are whole. */
    int whole = !c->must_fail;
    unsigned seen = 0;
    note(c, &seen, whole && cu && !cu_ok(cu, p.n_rows, p.total_q), bad_cu, 1);
    whole = whole && !c->must_fail;
    int64_t lmax = longest(whole ? cu : NULL, p.n_rows);
    if (maxq_mode == MAXQ_EXACT)
        p.max_seqlen_q = (int32_t)lmax;
    else if (maxq_mode == MAXQ_SMALL)
        p.max_seqlen_q = (int32_t)(lmax > 1 ? lmax - 1 - fz_u8(r) % (lmax - 1) : 0);
    note(c, &seen, whole && p.max_seqlen_q > 0 && p.max_seqlen_q < lmax, bad_maxq, 2);
    int64_t keys = 0;
    if (whole && rows) {
        fill_cache_seqlens(r, cs, cu, p.n_rows, (int64_t)p.max_pages * p.page_size);
        fill_page_table(r, pt, (int64_t)(fz_find(c, pt)->bytes / 4), pitch, cs, p.n_rows, &p);
        keys = check_rows(c, &p, cu, pt, cs, pitch, &seen);
    }
    if (!c->must_fail && keys > FZ_CAP_ELEMS) { /* valid, but too long for one execution */
        c->skip = 1;
        return FZ_NOT_CALLED;
    }
    fill_acts(c, kc, p.dtype);
    fill_acts(c, vc, p.dtype);
    fill_acts(c, q, p.dtype);
    fz_before_call(c, 1);
    clvarlen_status st =
        clvarlen_paged_attention_forward(c->ctx, &p, q, kc, vc, cu, pt, cs, o, lse);
    fz_allow_tensor(c, o, 0, p.total_q, p.dtype, orow, p.o_stride);
    fz_allow(c, lse, 0, (fz_i128)p.heads_q * p.total_q * 4);
    fz_after_call(c, st);
    /* Entries past a row's used pages are never read: no out-of-range for them. */
    if (whole && !c->must_fail && st == CLVARLEN_ERROR_INDEX_OUT_OF_RANGE)
        fz_fail(c, "INDEX_OUT_OF_RANGE with every used page-table entry in range (%s)",
                clvarlen_last_error(c->ctx));
    /* Refusals the contract allows before the rows are looked at (an infinite softcap,
     * int32 overflows) leave the status of a row's error open. */
    int only = tame(p.q_stride) && tame(p.o_stride) && tame(p.page_table_stride) &&
               isfinite(p.softcap) && (int64_t)p.max_pages * p.page_size <= INT32_MAX &&
               n_slots <= INT32_MAX;
    expect_status(c, st, only && seen == 1, CLVARLEN_ERROR_INVALID_CU_SEQLENS, bad_cu);
    expect_status(c, st, only && seen == 2, CLVARLEN_ERROR_INVALID_ARGUMENT, bad_maxq);
    expect_status(c, st, only && seen == 4, CLVARLEN_ERROR_INVALID_ARGUMENT, bad_cs);
    expect_status(c, st, only && seen == 8, CLVARLEN_ERROR_INDEX_OUT_OF_RANGE, bad_pt);
    return st;
}

const fz_op fz_paged_ops[] = {
    {"kv_cache_append", op_kv_cache_append},
    {"paged_attention_forward", op_paged_attention_forward},
};
const int fz_n_paged_ops = (int)(sizeof fz_paged_ops / sizeof fz_paged_ops[0]);
