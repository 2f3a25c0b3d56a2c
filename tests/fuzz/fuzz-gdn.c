/* The fuzz target's gated delta rule (SPEC 3): varlen or fixed-length batches,
 * every parameter hostile at times, state pools with a pitch and state
 * indices, intermediate states with cache indices. On success only the slots
 * a sequence names (and the steps it runs) may change. */
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

/* HV * K * V in 64 bits (saturated: hostile dims would overflow the product). */
static int64_t state_elems(int64_t hv, int32_t k, int32_t v)
{
    fz_i128 x = (fz_i128)hv * k * v;
    return x > INT64_MAX ? INT64_MAX : x < INT64_MIN ? INT64_MIN : (int64_t)x;
}

static int32_t small_dim(fz_reader *r)
{
    uint8_t b = fz_u8(r);
    static const int32_t odd[] = {0, -1, 257, 256, INT32_MAX, 1, 64, 33};
    return b < 232 ? 1 + b % 20 : odd[b % 8];
}

static void gdn_params(fz_reader *r, clvarlen_gdn_params *p)
{
    clvarlen_gdn_params_init(p);
    uint8_t b = fz_u8(r);
    p->struct_size = b < 248 ? p->struct_size : b % 2 ? 0 : p->struct_size - 4;
    p->dtype = fz_dtype(r, act_dtypes, 3);
    p->dt_bias_dtype = fz_dtype(r, act_dtypes, 3);
    p->state_dtype = fz_dtype(r, act_dtypes, 3);
    p->n_seqs = fz_count(r, 4);
    p->fixed_seqlen = fz_count32(r, 6);
    p->total_tokens = fz_count(r, 16);
    p->heads_qk = fz_u8(r) < 240 ? 1 + fz_u8(r) % 2 : fz_count32(r, 2);
    p->heads_v = fz_u8(r) < 240 ? (int32_t)(uint32_t)((int64_t)p->heads_qk * (1 + fz_u8(r) % 2))
                                : fz_count32(r, 4);
    p->key_dim = small_dim(r);
    p->value_dim = small_dim(r);
    int64_t qk = (int64_t)p->heads_qk * p->key_dim, hv = p->heads_v;
    p->q_stride = fz_stride(r, qk);
    p->k_stride = fz_stride(r, qk);
    p->v_stride = fz_stride(r, hv * p->value_dim);
    p->a_stride = fz_stride(r, hv);
    p->b_stride = fz_stride(r, hv);
    p->o_stride = fz_stride(r, hv * p->value_dim);
    b = fz_u8(r);
    p->state_layout = (clvarlen_state_layout)(b < 250 ? b % 2 : b % 2 ? -1 : 2);
    p->state_slots = fz_count(r, 6);
    p->state_slot_pitch = fz_u8(r) < 200 ? 0 : fz_stride(r, state_elems(hv, p->key_dim, p->value_dim));
    p->scale = fz_float(r, 0.0f);
    p->use_qk_l2norm = fz_u8(r) % 2;
    p->softplus_beta = fz_float(r, 1.0f);
    p->softplus_threshold = fz_float(r, 20.0f);
    p->disable_state_update = fz_u8(r) % 2;
    p->cache_slots = fz_count(r, 4);
    p->cache_steps = fz_count32(r, 8);
    b = fz_u8(r);
    p->algorithm = (clvarlen_gdn_algorithm)(b < 250 ? b % 3 : b % 2 ? -1 : 3);
}

static void gdn_must_fail(fz_call *c, const clvarlen_gdn_params *p)
{
    fz_must_fail(c, p->struct_size < sizeof *p, "struct_size below the struct");
    fz_bad_size(c, !is_act(p->dtype) || !is_act(p->dt_bias_dtype) || !is_act(p->state_dtype),
                 "dtype not taken");
    fz_bad_size(c, p->n_seqs < 0 || p->total_tokens < 0, "negative size");
    fz_must_fail(c, p->heads_qk <= 0 || p->heads_v <= 0 || p->heads_v % p->heads_qk != 0,
                 "bad head counts");
    fz_must_fail(c, p->key_dim < 1 || p->key_dim > 256 || p->value_dim < 1 ||
                    p->value_dim > 256, "K or V outside 1..256");
    fz_must_fail(c, p->state_layout != CLVARLEN_STATE_VK && p->state_layout != CLVARLEN_STATE_KV,
                 "unknown layout");
    fz_must_fail(c, p->algorithm < CLVARLEN_GDN_AUTO || p->algorithm > CLVARLEN_GDN_CHUNKED,
                 "unknown algorithm");
    fz_must_fail(c, !(p->scale == 0.0f || (isfinite(p->scale) && p->scale > 0)), "bad scale");
    fz_must_fail(c, !(isfinite(p->softplus_beta) && p->softplus_beta > 0), "bad softplus beta");
}

/* Sequence s's tokens [*start, *start + *len), from cu_seqlens or the fixed length. */
static void seq_span(const clvarlen_gdn_params *p, const int32_t *cu, int64_t s, int64_t *start,
                     int64_t *len)
{
    *start = cu ? cu[s] : s * p->fixed_seqlen;
    *len = cu ? (int64_t)cu[s + 1] - cu[s] : p->fixed_seqlen;
}

static void check_seqs(fz_call *c, const clvarlen_gdn_params *p, const int32_t *cu, int varlen)
{
    if (!varlen) {
        fz_must_fail(c, p->fixed_seqlen < 0, "negative fixed_seqlen");
        fz_must_fail(c, (fz_i128)p->n_seqs * p->fixed_seqlen != p->total_tokens,
                     "total_tokens is not n_seqs * fixed_seqlen");
        return;
    }
    if (!cu || c->must_fail)
        return;
    int ok = cu[0] == 0 && p->n_seqs >= 0;
    for (int64_t s = 0; ok && s < p->n_seqs; s++)
        ok = cu[s + 1] >= cu[s];
    fz_must_fail(c, !ok || cu[p->n_seqs] != p->total_tokens, "invalid cu_seqlens");
}

/* The slots and steps a successful call may write. */
static void allow_states(fz_call *c, const clvarlen_gdn_params *p, const int32_t *cu,
                         void *pool, const int32_t *sidx, void *inter, const int32_t *cidx)
{
    int64_t es = (int64_t)clvarlen_dtype_size(p->state_dtype);
    int64_t state = state_elems(p->heads_v, p->key_dim, p->value_dim);
    int64_t pitch = p->state_slot_pitch ? p->state_slot_pitch : state;
    if (es == 0 || state <= 0)
        return;
    for (int64_t s = 0; s < p->n_seqs && s < FZ_CAP_BYTES; s++) {
        int64_t start, len;
        seq_span(p, cu, s, &start, &len);
        int64_t slot = sidx ? sidx[s] : s;
        if (pool && !p->disable_state_update && len > 0 && slot >= 0)
            fz_allow(c, pool, (fz_i128)slot * pitch * es, (fz_i128)state * es);
        int64_t cs = cidx ? cidx[s] : s;
        if (inter && cs >= 0 && len > 0)
            fz_allow(c, inter, (fz_i128)cs * p->cache_steps * state * es,
                     (fz_i128)(len < p->cache_steps ? len : p->cache_steps) * state * es);
    }
}

static void fill_acts(fz_call *c, void *p, clvarlen_dtype dt)
{
    fz_buf *b = fz_find(c, p);
    if (b && is_act(dt))
        fz_fill_floats(c->r, p, dt, b->bytes / clvarlen_dtype_size(dt));
}

static clvarlen_status op_gated_delta(fz_call *c)
{
    fz_reader *r = c->r;
    clvarlen_gdn_params p;
    gdn_params(r, &p);
    gdn_must_fail(c, &p);
    clvarlen_dtype dt = p.dtype;
    int64_t T = p.total_tokens, hv = p.heads_v, qk = (int64_t)p.heads_qk * p.key_dim;
    int64_t state = state_elems(hv, p.key_dim, p.value_dim);
    int varlen = fz_u8(r) < 200;
    int32_t *cu = varlen ? fz_buffer(c, "cu_seqlens", FZ_IN,
                                     p.n_seqs >= 0 ? ((fz_i128)p.n_seqs + 1) * 4 : 0, 0)
                         : NULL;
    float *A_log = fz_buffer(c, "A_log", FZ_IN, (fz_i128)hv * 4, 32);
    void *dt_bias = fz_rows(c, "dt_bias", FZ_IN, p.dt_bias_dtype, hv, 1, 0, 32);
    void *a = fz_rows(c, "a", FZ_IN, dt, hv, T, p.a_stride, 32);
    void *b = fz_rows(c, "b", FZ_IN, dt, hv, T, p.b_stride, 32);
    void *q = fz_rows(c, "q", FZ_IN, dt, qk, T, p.q_stride, 32);
    void *k = fz_rows(c, "k", FZ_IN, dt, qk, T, p.k_stride, 32);
    void *v = fz_rows(c, "v", FZ_IN, dt, hv * p.value_dim, T, p.v_stride, 32);
    void *pool = fz_rows(c, "state_pool", FZ_INOUT, p.state_dtype, state, p.state_slots,
                         p.state_slot_pitch, 4);
    int32_t *sidx = fz_buffer(c, "state_indices", FZ_IN, (fz_i128)p.n_seqs * 4, 4);
    void *inter = fz_u8(r) < 64 ? fz_rows(c, "intermediate_states", FZ_OUT, p.state_dtype, state,
                                          (fz_i128)p.cache_slots * p.cache_steps, 0, 0)
                                : NULL;
    int32_t *cidx = fz_buffer(c, "cache_indices", FZ_IN, (fz_i128)p.n_seqs * 4, 4);
    void *o = fz_rows(c, "o", FZ_OUT, dt, hv * p.value_dim, T, p.o_stride, 32);
    if (c->skip)
        return FZ_NOT_CALLED;
    fz_fill_cu(r, cu, fz_n(c, cu, 4, (fz_i128)p.n_seqs + 1) - 1, T);
    check_seqs(c, &p, cu, varlen);
    fz_fill_index32(r, sidx, fz_n(c, sidx, 4, p.n_seqs), -1, p.state_slots);
    fz_fill_index32(r, cidx, fz_n(c, cidx, 4, p.n_seqs), -1, p.cache_slots);
    for (int64_t s = 0; s < p.n_seqs && !c->must_fail; s++) {
        int64_t start, len;
        seq_span(&p, cu, s, &start, &len);
        int64_t slot = sidx ? sidx[s] : s, cs = cidx ? cidx[s] : s;
        fz_must_fail(c, pool && slot >= p.state_slots, "state index beyond the pool");
        fz_must_fail(c, inter && cs >= p.cache_slots, "cache index beyond the buffer");
        fz_must_fail(c, inter && cs >= 0 && len > p.cache_steps,
                     "a sequence longer than cache_steps");
    }
    fz_must_fail(c, inter && p.algorithm == CLVARLEN_GDN_CHUNKED, "CHUNKED with intermediates");
    fz_bad_size(c, pool && p.state_slots < 0, "negative state_slots");
    fz_bad_size(c, inter && (p.cache_slots < 0 || p.cache_steps < 0), "negative cache size");
    int has_work = T > 0;
    fz_required(c, q, has_work, "NULL q");
    fz_required(c, o, has_work, "NULL o");
    fz_required(c, A_log, has_work, "NULL A_log");
    fill_acts(c, a, dt);
    fill_acts(c, b, dt);
    fill_acts(c, q, dt);
    fill_acts(c, k, dt);
    fill_acts(c, v, dt);
    fill_acts(c, dt_bias, p.dt_bias_dtype);
    fill_acts(c, pool, p.state_dtype);
    fz_fill_floats(r, A_log, CLVARLEN_DTYPE_F32, (size_t)fz_n(c, A_log, 4, hv));
    fz_before_call(c, 1);
    clvarlen_status st = clvarlen_gated_delta_rule(c->ctx, &p, A_log, dt_bias, a, b, q, k, v, cu,
                                                   pool, sidx, inter, cidx, o);
    fz_allow_tensor(c, o, 0, T, dt, hv * p.value_dim, p.o_stride);
    if (!c->must_fail)
        allow_states(c, &p, cu, pool, sidx, inter, cidx);
    fz_after_call(c, st);
    return st;
}

const fz_op fz_gdn_ops[] = {
    {"gated_delta_rule", op_gated_delta},
};
const int fz_n_gdn_ops = (int)(sizeof fz_gdn_ops / sizeof fz_gdn_ops[0]);
