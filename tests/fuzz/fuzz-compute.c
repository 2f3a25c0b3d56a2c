/* The fuzz target's attention (SPEC 1) and gated delta rule (SPEC 3) entry
 * points: every parameter hostile at times, GQA, windows, softcap, q_pos,
 * lse, merges with aliased outputs, state slots and intermediate states. */
#include "fuzz.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const clvarlen_dtype act_dtypes[] = {
    CLVARLEN_DTYPE_F32, CLVARLEN_DTYPE_F16, CLVARLEN_DTYPE_BF16,
};

#define DONE(c, st) (fz_after_call((c), (st)), (st))

static int is_act(clvarlen_dtype dt)
{
    return dt == CLVARLEN_DTYPE_F32 || dt == CLVARLEN_DTYPE_F16 || dt == CLVARLEN_DTYPE_BF16;
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

static int64_t longest(const int32_t *cu, int64_t n)
{
    int64_t m = 0;
    for (int64_t s = 0; cu && s < n; s++)
        if ((int64_t)cu[s + 1] - cu[s] > m)
            m = (int64_t)cu[s + 1] - cu[s];
    return m;
}

static int32_t head_dim(fz_reader *r)
{
    uint8_t b = fz_u8(r);
    static const int32_t odd[] = {0, 8, 17, 24, 272, 256, -16, INT32_MAX};
    return b < 224 ? 16 * (1 + b % 4) : odd[b % 8];
}

static uint32_t struct_size(fz_reader *r, uint32_t init)
{
    uint8_t b = fz_u8(r);
    return b < 248 ? init : b % 2 ? 0 : init - 4;
}

void fz_attn_params(fz_call *c, clvarlen_attention_params *p)
{
    fz_reader *r = c->r;
    clvarlen_attention_params_init(p);
    p->struct_size = struct_size(r, p->struct_size);
    p->dtype = fz_dtype(r, act_dtypes, 3);
    p->n_seqs = fz_count(r, 4);
    p->total_q = fz_count(r, 12);
    p->total_k = fz_u8(r) < 64 ? p->total_q : fz_count(r, 16);
    p->heads_kv = fz_count32(r, 2) ? fz_count32(r, 2) : 1;
    p->heads_q = fz_u8(r) < 240 ? (int32_t)(uint32_t)((int64_t)p->heads_kv * (1 + fz_u8(r) % 3))
                                : fz_count32(r, 3);
    p->head_dim = head_dim(r);
    p->head_dim_v = fz_u8(r) < 128 ? 0 : head_dim(r);
    int64_t qrow = (int64_t)p->heads_q * p->head_dim, krow = (int64_t)p->heads_kv * p->head_dim;
    int32_t dv = p->head_dim_v ? p->head_dim_v : p->head_dim;
    p->q_stride = fz_stride(r, qrow);
    p->k_stride = fz_stride(r, krow);
    p->v_stride = fz_stride(r, (int64_t)p->heads_kv * dv);
    p->o_stride = fz_stride(r, (int64_t)p->heads_q * dv);
    p->max_seqlen_q = fz_u8(r) < 200 ? 0 : fz_count32(r, 8);
    p->max_seqlen_k = fz_u8(r) < 200 ? 0 : fz_count32(r, 8);
    p->scale = fz_float(r, 0.0f);
    p->causal = fz_u8(r) % 2;
    p->window_left = fz_u8(r) < 160 ? -1 : fz_count32(r, 6);
    p->window_right = fz_u8(r) < 160 ? -1 : fz_count32(r, 6);
    p->softcap = fz_u8(r) < 200 ? 0.0f : fz_float(r, 5.0f);
    p->dropout_p = fz_u8(r) < 216 ? 0.0f : fz_float(r, 0.25f);
    p->dropout_seed = fz_u64(r);
    p->dropout_offset = fz_u64(r);
}

static int dim_ok(int32_t d)
{
    return d >= 16 && d <= 256 && d % 16 == 0;
}

void fz_attn_must_fail(fz_call *c, const clvarlen_attention_params *p)
{
    fz_must_fail(c, p->struct_size < CLVARLEN_ATTENTION_PARAMS_MIN_SIZE,
                 "struct_size below the first released layout");
    fz_bad_size(c, !is_act(p->dtype), "dtype not f32, f16 or bf16");
    fz_bad_size(c, p->n_seqs < 0 || p->total_q < 0 || p->total_k < 0, "negative size");
    fz_must_fail(c, p->heads_q <= 0 || p->heads_kv <= 0 || p->heads_q % p->heads_kv != 0,
                 "bad head counts");
    fz_must_fail(c, !dim_ok(p->head_dim) || (p->head_dim_v != 0 && !dim_ok(p->head_dim_v)),
                 "unsupported head dim");
    fz_must_fail(c, !isfinite(p->scale), "scale not finite");
    fz_must_fail(c, p->window_left < -1 || p->window_right < -1, "window below -1");
    fz_must_fail(c, p->softcap < 0 || isnan(p->softcap), "negative or NaN softcap");
    fz_must_fail(c, p->max_seqlen_q < 0 || p->max_seqlen_k < 0, "negative max_seqlen");
    fz_must_fail(c, !(p->dropout_p >= 0.0f && p->dropout_p < 1.0f), "dropout_p outside [0, 1)");
}

static clvarlen_status op_attention_forward(fz_call *c)
{
    fz_reader *r = c->r;
    clvarlen_attention_params p;
    fz_attn_params(c, &p);
    fz_attn_must_fail(c, &p);
    int32_t dv = p.head_dim_v ? p.head_dim_v : p.head_dim;
    int64_t qrow = (int64_t)p.heads_q * p.head_dim, krow = (int64_t)p.heads_kv * p.head_dim;
    int64_t vrow = (int64_t)p.heads_kv * dv, orow = (int64_t)p.heads_q * dv;
    fz_i128 cu_bytes = p.n_seqs >= 0 ? ((fz_i128)p.n_seqs + 1) * 4 : 0;
    int32_t *cuq = fz_buffer(c, "cu_seqlens_q", FZ_IN, cu_bytes, 32);
    int32_t *cuk = fz_buffer(c, "cu_seqlens_k", FZ_IN, cu_bytes, 32);
    void *q = fz_rows(c, "q", FZ_IN, p.dtype, qrow, p.total_q, p.q_stride, 32);
    void *k = fz_rows(c, "k", FZ_IN, p.dtype, krow, p.total_k, p.k_stride, 32);
    void *v = fz_rows(c, "v", FZ_IN, p.dtype, vrow, p.total_k, p.v_stride, 32);
    int32_t *q_pos = fz_buffer(c, "q_pos", FZ_IN, (fz_i128)p.total_q * 4, 2);
    void *o = fz_rows(c, "o", FZ_OUT, p.dtype, orow, p.total_q, p.o_stride, 32);
    float *lse = fz_buffer(c, "lse", FZ_OUT, (fz_i128)p.heads_q * p.total_q * 4, 2);
    if (c->skip)
        return FZ_NOT_CALLED;
    int64_t nq = fz_n(c, cuq, 4, (fz_i128)p.n_seqs + 1) - 1;
    int64_t nk = fz_n(c, cuk, 4, (fz_i128)p.n_seqs + 1) - 1;
    fz_fill_cu(r, cuq, nq, p.total_q);
    fz_fill_cu(r, cuk, nk, p.total_k);
    fz_must_fail(c, cuq && !cu_ok(cuq, nq, p.total_q), "invalid cu_seqlens_q");
    fz_must_fail(c, cuk && !cu_ok(cuk, nk, p.total_k), "invalid cu_seqlens_k");
    fz_must_fail(c, p.max_seqlen_q > 0 && p.max_seqlen_q < longest(cuq, nq),
                 "max_seqlen_q below a length");
    fz_must_fail(c, p.max_seqlen_k > 0 && p.max_seqlen_k < longest(cuk, nk),
                 "max_seqlen_k below a length");
    int has_work = p.n_seqs > 0 && p.total_q > 0;
    fz_required(c, cuq, has_work, "NULL cu_seqlens_q");
    fz_required(c, cuk, has_work, "NULL cu_seqlens_k");
    fz_required(c, q, has_work, "NULL q");
    fz_required(c, o, has_work, "NULL o");
    if (q && is_act(p.dtype))
        fz_fill_floats(r, q, p.dtype, fz_find(c, q)->bytes / clvarlen_dtype_size(p.dtype));
    if (k && is_act(p.dtype))
        fz_fill_floats(r, k, p.dtype, fz_find(c, k)->bytes / clvarlen_dtype_size(p.dtype));
    if (v && is_act(p.dtype))
        fz_fill_floats(r, v, p.dtype, fz_find(c, v)->bytes / clvarlen_dtype_size(p.dtype));
    fz_fill_index32(r, q_pos, fz_n(c, q_pos, 4, p.total_q), 0, 24);
    fz_before_call(c, 1);
    clvarlen_status st = clvarlen_attention_forward(c->ctx, &p, q, k, v, cuq, cuk, q_pos, o, lse);
    fz_allow_tensor(c, o, 0, p.total_q, p.dtype, orow, p.o_stride);
    fz_allow(c, lse, 0, (fz_i128)p.heads_q * p.total_q * 4);
    return DONE(c, st);
}

/* The backward: the forward's params plus do, lse and the gradients' layout
 * (bwd NULL at times, its struct size hostile at times). */
static clvarlen_status op_attention_backward(fz_call *c)
{
    fz_reader *r = c->r;
    clvarlen_attention_params p;
    fz_attn_params(c, &p);
    fz_attn_must_fail(c, &p);
    clvarlen_attention_bwd_params g;
    clvarlen_attention_bwd_params_init(&g);
    const int null_bwd = fz_u8(r) >= 224;
    g.struct_size = struct_size(r, g.struct_size);
    fz_must_fail(c, !null_bwd && g.struct_size < sizeof g, "bwd struct_size below the struct");
    g.grad_f32 = fz_u8(r) % 2;
    g.deterministic = fz_u8(r) % 2;
    const clvarlen_dtype gt = g.grad_f32 ? CLVARLEN_DTYPE_F32 : p.dtype;
    int32_t dv = p.head_dim_v ? p.head_dim_v : p.head_dim;
    int64_t qrow = (int64_t)p.heads_q * p.head_dim, krow = (int64_t)p.heads_kv * p.head_dim;
    int64_t vrow = (int64_t)p.heads_kv * dv, orow = (int64_t)p.heads_q * dv;
    g.do_stride = fz_stride(r, orow);
    g.dq_stride = fz_stride(r, qrow);
    g.dk_stride = fz_stride(r, krow);
    g.dv_stride = fz_stride(r, vrow);
    if (null_bwd)
        clvarlen_attention_bwd_params_init(&g);
    fz_i128 cu_bytes = p.n_seqs >= 0 ? ((fz_i128)p.n_seqs + 1) * 4 : 0;
    int32_t *cuq = fz_buffer(c, "cu_seqlens_q", FZ_IN, cu_bytes, 32);
    int32_t *cuk = fz_buffer(c, "cu_seqlens_k", FZ_IN, cu_bytes, 32);
    void *q = fz_rows(c, "q", FZ_IN, p.dtype, qrow, p.total_q, p.q_stride, 32);
    void *k = fz_rows(c, "k", FZ_IN, p.dtype, krow, p.total_k, p.k_stride, 32);
    void *v = fz_rows(c, "v", FZ_IN, p.dtype, vrow, p.total_k, p.v_stride, 32);
    void *o = fz_rows(c, "o", FZ_IN, p.dtype, orow, p.total_q, p.o_stride, 32);
    void *dout = fz_rows(c, "do", FZ_IN, p.dtype, orow, p.total_q, g.do_stride, 32);
    float *lse = fz_buffer(c, "lse", FZ_IN, (fz_i128)p.heads_q * p.total_q * 4, 32);
    int32_t *q_pos = fz_buffer(c, "q_pos", FZ_IN, (fz_i128)p.total_q * 4, 2);
    void *dq = fz_rows(c, "dq", FZ_OUT, gt, qrow, p.total_q, g.dq_stride, 32);
    void *dk = fz_rows(c, "dk", FZ_OUT, gt, krow, p.total_k, g.dk_stride, 32);
    void *dvv = fz_rows(c, "dv", FZ_OUT, gt, vrow, p.total_k, g.dv_stride, 32);
    if (c->skip)
        return FZ_NOT_CALLED;
    int64_t nq = fz_n(c, cuq, 4, (fz_i128)p.n_seqs + 1) - 1;
    int64_t nk = fz_n(c, cuk, 4, (fz_i128)p.n_seqs + 1) - 1;
    fz_fill_cu(r, cuq, nq, p.total_q);
    fz_fill_cu(r, cuk, nk, p.total_k);
    fz_must_fail(c, cuq && !cu_ok(cuq, nq, p.total_q), "invalid cu_seqlens_q");
    fz_must_fail(c, cuk && !cu_ok(cuk, nk, p.total_k), "invalid cu_seqlens_k");
    fz_must_fail(c, p.max_seqlen_q > 0 && p.max_seqlen_q < longest(cuq, nq),
                 "max_seqlen_q below a length");
    fz_must_fail(c, p.max_seqlen_k > 0 && p.max_seqlen_k < longest(cuk, nk),
                 "max_seqlen_k below a length");
    const int work = p.total_q > 0 || p.total_k > 0;
    fz_required(c, cuq, work || p.n_seqs >= 0, "NULL cu_seqlens_q");
    fz_required(c, cuk, work || p.n_seqs >= 0, "NULL cu_seqlens_k");
    const void *need_q[5] = {q, o, dout, lse, dq}, *need_k[4] = {k, v, dk, dvv};
    for (int i = 0; i < 5; i++)
        fz_required(c, need_q[i], p.total_q > 0, "NULL q, o, do, lse or dq");
    for (int i = 0; i < 4; i++)
        fz_required(c, need_k[i], p.total_k > 0, "NULL k, v, dk or dv");
    void *fill[5] = {q, k, v, o, dout};
    for (int i = 0; i < 5; i++)
        if (fill[i] && is_act(p.dtype))
            fz_fill_floats(r, fill[i], p.dtype,
                           fz_find(c, fill[i])->bytes / clvarlen_dtype_size(p.dtype));
    if (lse)
        fz_fill_floats(r, lse, CLVARLEN_DTYPE_F32, fz_find(c, lse)->bytes / 4);
    fz_fill_index32(r, q_pos, fz_n(c, q_pos, 4, p.total_q), 0, 24);
    fz_before_call(c, 1);
    clvarlen_status st = clvarlen_attention_backward(c->ctx, &p, null_bwd ? NULL : &g, q, k, v,
                                                     o, dout, lse, cuq, cuk, q_pos, dq, dk, dvv);
    fz_allow_tensor(c, dq, 0, p.total_q, gt, qrow, g.dq_stride);
    fz_allow_tensor(c, dk, 0, p.total_k, gt, krow, g.dk_stride);
    fz_allow_tensor(c, dvv, 0, p.total_k, gt, vrow, g.dv_stride);
    return DONE(c, st);
}

/* An output placed inside (or exactly on) an input's buffer: one INOUT allocation
 * holding both, so that neither can be reached outside it. */
static void *overlapping(fz_call *c, const char *name, fz_i128 in_bytes, fz_i128 out_bytes,
                         int64_t shift, void **out)
{
    fz_i128 need = in_bytes > shift + out_bytes ? in_bytes : shift + out_bytes;
    unsigned char *p = fz_alloc(c, name, FZ_INOUT, need);
    *out = p ? p + shift : NULL;
    return p;
}

static clvarlen_status op_attention_merge(fz_call *c)
{
    fz_reader *r = c->r;
    clvarlen_dtype dt = fz_dtype(r, act_dtypes, 3);
    int64_t n_parts = fz_count(r, 4), tokens = fz_count(r, 12);
    int32_t heads = fz_count32(r, 3), dv = fz_count32(r, 24);
    fz_bad_size(c, !is_act(dt), "dtype not f32, f16 or bf16");
    fz_must_fail(c, n_parts < 0 || tokens < 0 || heads <= 0 || dv <= 0, "bad size");
    size_t es = clvarlen_dtype_size(dt);
    int64_t row = (int64_t)heads * dv;
    fz_i128 ob = fz_extent(tokens, row, 0, es);
    fz_i128 obp = fz_extent((fz_i128)tokens * (n_parts > 0 ? n_parts : 0), row, 0, es);
    fz_i128 lb = (fz_i128)heads * tokens * 4;
    fz_bad_size(c, ob > INT64_MAX || obp > INT64_MAX, "beyond INT64_MAX bytes");
    uint8_t alias = fz_u8(r);
    void *o_parts, *o, *o_home; /* o_home: the harness buffer holding o, at o_off */
    int64_t o_off = 0;
    if (alias >= 240 && ob > 0 && obp <= FZ_CAP_BYTES && n_parts > 0) {
        int64_t shift = (int64_t)(es * (alias % 3) * (size_t)(ob / es / 2));
        /* one part with the shift at its end: o just past o_parts, not over it */
        fz_must_fail(c, shift < obp, "o overlaps o_parts");
        o_parts = o_home = overlapping(c, "o_parts+o", obp, ob, shift, &o);
        o_off = shift;
    } else {
        o_parts = fz_buffer(c, "o_parts", FZ_IN, obp, 32);
        o = o_home = fz_buffer(c, "o", FZ_OUT, ob, 32);
    }
    fz_i128 lbp = fz_extent((fz_i128)(n_parts > 0 ? n_parts : 0) * heads, tokens, 0, 4);
    float *lse_parts = fz_buffer(c, "lse_parts", FZ_IN, lbp, 32);
    float *lse = fz_buffer(c, "lse", FZ_OUT, lb, 4);
    if (c->skip)
        return FZ_NOT_CALLED;
    fz_required(c, o, ob > 0, "NULL o");
    fz_required(c, o_parts, ob > 0 && n_parts > 0, "NULL o_parts");
    fz_required(c, lse_parts, lb > 0 && n_parts > 0, "NULL lse_parts");
    if (o_parts && is_act(dt))
        fz_fill_floats(r, o_parts, dt, fz_find(c, o_parts)->bytes / es);
    if (lse_parts)
        fz_fill_floats(r, lse_parts, CLVARLEN_DTYPE_F32, fz_find(c, lse_parts)->bytes / 4);
    fz_before_call(c, 1);
    clvarlen_status st = clvarlen_attention_merge(c->ctx, dt, n_parts, tokens, heads, dv,
                                                  o_parts, lse_parts, o, lse);
    fz_allow(c, o_home, o_off, ob);
    fz_allow(c, lse, 0, lb);
    return DONE(c, st);
}

static clvarlen_status op_attention_merge2(fz_call *c)
{
    fz_reader *r = c->r;
    clvarlen_dtype dt = fz_dtype(r, act_dtypes, 3);
    int64_t tokens = fz_count(r, 12);
    int32_t heads = fz_count32(r, 3), dv = fz_count32(r, 24);
    fz_bad_size(c, !is_act(dt), "dtype not f32, f16 or bf16");
    fz_must_fail(c, tokens < 0 || heads <= 0 || dv <= 0, "bad size");
    size_t es = clvarlen_dtype_size(dt);
    fz_i128 ob = fz_extent(tokens, (int64_t)heads * dv, 0, es), lb = (fz_i128)heads * tokens * 4;
    fz_bad_size(c, ob > INT64_MAX, "beyond INT64_MAX bytes");
    uint8_t alias = fz_u8(r);
    void *o_a, *o_b, *o, *o_home; /* o_home: the harness buffer holding o, at o_off */
    int64_t o_off = 0;
    float *lse_a = fz_buffer(c, "lse_a", alias % 8 == 1 ? FZ_INOUT : FZ_IN, lb, 32);
    float *lse_b = fz_buffer(c, "lse_b", FZ_IN, lb, 32);
    float *lse = alias % 8 == 1 ? lse_a : fz_buffer(c, "lse", FZ_OUT, lb, 4);
    if (alias >= 240 && ob > 0 && ob <= FZ_CAP_BYTES) {
        /* Partial overlap of o with o_b: must be refused. */
        o_a = fz_buffer(c, "o_a", FZ_IN, ob, 32);
        int64_t shift = (int64_t)(es * (1 + alias % 3));
        fz_must_fail(c, shift < ob, "o partly overlaps o_b"); /* else o just past o_b */
        o_b = o_home = overlapping(c, "o_b+o", ob, ob, shift, &o);
        o_off = shift;
    } else if (alias % 4 == 2) { /* in place: o is o_a */
        o_a = o = o_home = fz_buffer(c, "o_a=o", FZ_INOUT, ob, 32);
        o_b = fz_buffer(c, "o_b", FZ_IN, ob, 32);
    } else {
        o_a = fz_buffer(c, "o_a", FZ_IN, ob, 32);
        o_b = fz_buffer(c, "o_b", FZ_IN, ob, 32);
        o = o_home = fz_buffer(c, "o", FZ_OUT, ob, 32);
    }
    if (c->skip)
        return FZ_NOT_CALLED;
    fz_required(c, o, ob > 0, "NULL o");
    fz_required(c, o_a, ob > 0, "NULL o_a");
    fz_required(c, o_b, ob > 0, "NULL o_b");
    fz_required(c, lse_a, lb > 0, "NULL lse_a");
    fz_required(c, lse_b, lb > 0, "NULL lse_b");
    if (o_a && is_act(dt))
        fz_fill_floats(r, o_a, dt, (size_t)fz_n(c, o_a, es, ob / es));
    if (o_b && is_act(dt))
        fz_fill_floats(r, o_b, dt, (size_t)fz_n(c, o_b, es, ob / es));
    fz_fill_floats(r, lse_a, CLVARLEN_DTYPE_F32, (size_t)fz_n(c, lse_a, 4, lb / 4));
    fz_fill_floats(r, lse_b, CLVARLEN_DTYPE_F32, (size_t)fz_n(c, lse_b, 4, lb / 4));
    fz_before_call(c, 1);
    clvarlen_status st =
        clvarlen_attention_merge2(c->ctx, dt, tokens, heads, dv, o_a, lse_a, o_b, lse_b, o, lse);
    fz_allow(c, o_home, o_off, ob);
    fz_allow(c, lse, 0, lb);
    return DONE(c, st);
}

/* The options, params-init, status, dtype and version functions, and the context
 * queries: several small calls, each checked on its own. */
static void plain_check(fz_call *c, clvarlen_context *ctx, clvarlen_status st, int must_fail,
                        const char *why)
{
    clvarlen_context *saved = c->ctx;
    c->ctx = ctx;
    c->must_fail = must_fail;
    c->must_fail_why = why;
    fz_after_call(c, st);
    c->ctx = saved;
}

static void check_names(fz_call *c, int v)
{
    const char *s = clvarlen_status_str((clvarlen_status)v);
    const char *n = clvarlen_status_name((clvarlen_status)v);
    if (!s || !s[0] || !n || !n[0])
        fz_fail(c, "status %d has an empty string or name", v);
    const char *d = clvarlen_dtype_name((clvarlen_dtype)v);
    if (!d || !d[0])
        fz_fail(c, "dtype %d has an empty name", v);
    size_t es = clvarlen_dtype_size((clvarlen_dtype)v);
    if ((v >= 0 && v <= 6) != (es != 0))
        fz_fail(c, "dtype %d has size %zu", v, es);
}

static clvarlen_status op_api(fz_call *c)
{
    fz_reader *r = c->r;
    check_names(c, (int)fz_u32(r));
    check_names(c, (int)(fz_u8(r) % 16) - 1);
    if (clvarlen_version() != CLVARLEN_VERSION || !clvarlen_version_string())
        fz_fail(c, "version mismatch");
    clvarlen_options *opt = NULL;
    int use_null = fz_u8(r) >= 240;
    clvarlen_status st = clvarlen_options_create(use_null ? NULL : &opt);
    plain_check(c, NULL, st, use_null, "NULL options pointer");
    int32_t threads = fz_count32(r, 8);
    st = clvarlen_options_set_threads(opt, threads);
    plain_check(c, NULL, st, !opt || threads < 0 || threads > 256, "threads outside 0..256");
    char text[24];
    for (size_t i = 0; i < sizeof text; i++)
        text[i] = (char)fz_u8(r);
    text[sizeof text - 1] = '\0';
    plain_check(c, NULL, clvarlen_options_set_device(opt, fz_u8(r) < 128 ? text : NULL), !opt,
                "NULL options");
    plain_check(c, NULL, clvarlen_options_set_kernel_path(opt, text), !opt, "NULL options");
    plain_check(c, NULL, clvarlen_options_set_cache_dir(opt, text), !opt, "NULL options");
    int level = (int)fz_u8(r) - 1;
    st = clvarlen_options_set_log(opt, NULL, NULL, (clvarlen_log_level)level);
    plain_check(c, NULL, st, !opt || level < 0 || level > 2, "unknown log level");
    plain_check(c, NULL, clvarlen_options_set_device_checks(opt, fz_u8(r)), !opt,
                "NULL options");
    clvarlen_options_destroy(opt);
    clvarlen_attention_params ap;
    memset(&ap, fz_u8(r), sizeof ap);
    clvarlen_attention_params_init(&ap);
    if (ap.struct_size != sizeof ap || ap.window_left != -1 || ap.window_right != -1 ||
        ap.dtype != CLVARLEN_DTYPE_F32 || ap.n_seqs != 0 || ap.scale != 0.0f)
        fz_fail(c, "attention params defaults");
    clvarlen_gdn_params gp;
    memset(&gp, fz_u8(r), sizeof gp);
    clvarlen_gdn_params_init(&gp);
    if (gp.struct_size != sizeof gp || gp.softplus_beta != 1.0f ||
        gp.softplus_threshold != 20.0f || gp.n_seqs != 0 || gp.algorithm != CLVARLEN_GDN_AUTO)
        fz_fail(c, "gated delta params defaults");
    clvarlen_device_info info;
    int null_info = fz_u8(r) >= 200;
    st = clvarlen_context_device(c->ctx, null_info ? NULL : &info);
    plain_check(c, c->ctx, st, !c->ctx || null_info, "NULL context or info");
    if (st == CLVARLEN_SUCCESS && info.index != -1)
        fz_fail(c, "the CPU context reports device index %d", info.index);
    int threads_now = clvarlen_context_threads(c->ctx);
    if (c->ctx && threads_now < 1)
        fz_fail(c, "context has %d threads", threads_now);
    plain_check(c, c->ctx, clvarlen_context_finish(c->ctx), !c->ctx, "NULL context");
    if (!clvarlen_last_error(NULL))
        fz_fail(c, "clvarlen_last_error(NULL) is NULL");
    return FZ_NOT_CALLED;
}

const fz_op fz_compute_ops[] = {
    {"attention_forward", op_attention_forward},
    {"attention_merge", op_attention_merge},
    {"attention_merge2", op_attention_merge2},
    {"api", op_api},
};
/* Ops added later go in tables after the paged ones, so that earlier inputs keep their op. */
const fz_op fz_bwd_ops[] = {
    {"attention_backward", op_attention_backward},
};
const int fz_n_bwd_ops = (int)(sizeof fz_bwd_ops / sizeof fz_bwd_ops[0]);
const int fz_n_compute_ops = (int)(sizeof fz_compute_ops / sizeof fz_compute_ops[0]);
