/* The random cases of the attention tests (forward and backward): shapes,
 * lengths and inputs drawn deterministically from a seed.
 */
#include <stdlib.h>
#include <string.h>

#include "test-attention.h"

acase base_case(void)
{
    acase c;
    memset(&c, 0, sizeof c);
    c.dtype = CLVARLEN_DTYPE_F32;
    c.hq = 2;
    c.hk = 1;
    c.d = 64;
    c.dv = 64;
    c.wl = -1;
    c.wr = -1;
    c.max_n = 6;
    c.max_len = 45;
    c.max_total = 160;
    c.seed = 1;
    return c;
}

void make_batch(const acase *c, tu_rng *r, batch *b)
{
    const size_t cap = c->max_n > 0 ? (size_t)c->max_n : 1;
    int32_t *lq = malloc(cap * sizeof *lq), *lk = malloc(cap * sizeof *lk);
    ck_assert_ptr_nonnull(lq);
    ck_assert_ptr_nonnull(lk);
    b->n = tu_random_lengths(r, c->max_n, c->max_len, c->max_total, lk);
    for (int64_t s = 0; s < b->n; s++)
        lk[s] = lk[s] < c->min_len ? c->min_len : lk[s];
    for (int64_t s = 0; s < b->n; s++)
        lq[s] = c->lq_ne_lk ? (int32_t)tu_int(r, 0, c->max_len) : lk[s];
    if (c->lq_ne_lk && b->n > 0) {
        lq[0] = lk[0] + 3; /* more queries than keys: leading rows see nothing under causal */
        if (b->n > 1)
            lq[1] = 1;
    }
    b->cu_q = malloc(sizeof(int32_t) * (size_t)(b->n + 1));
    b->cu_k = malloc(sizeof(int32_t) * (size_t)(b->n + 1));
    tu_cu_from_lengths(lq, b->n, b->cu_q);
    tu_cu_from_lengths(lk, b->n, b->cu_k);
    free(lq);
    b->tq = b->cu_q[b->n];
    b->tk = b->cu_k[b->n];
    size_t es = clvarlen_dtype_size(c->dtype);
    b->qs = (int64_t)c->hq * c->d + c->q_pad;
    b->ks = (int64_t)c->hk * c->d + c->k_pad;
    b->vs = (int64_t)c->hk * c->dv + c->v_pad;
    b->os = (int64_t)c->hq * c->dv + c->o_pad;
    b->q = malloc(es * (size_t)(b->tq * b->qs) + 16);
    b->k = malloc(es * (size_t)(b->tk * b->ks) + 16);
    b->v = malloc(es * (size_t)(b->tk * b->vs) + 16);
    tu_fill_random(r, b->q, c->dtype, (size_t)(b->tq * b->qs), 1.0);
    tu_fill_random(r, b->k, c->dtype, (size_t)(b->tk * b->ks), 1.0);
    tu_fill_random(r, b->v, c->dtype, (size_t)(b->tk * b->vs), 1.0);
    b->q_pos = NULL;
    if (c->use_qpos) {
        b->q_pos = malloc(sizeof(int32_t) * (size_t)(b->tq + 1));
        for (int64_t s = 0; s < b->n; s++)
            for (int32_t t = b->cu_q[s]; t < b->cu_q[s + 1]; t++)
                b->q_pos[t] = (int32_t)tu_int(r, -2, lk[s] + 2);
    }
    free(lk);
}

void free_batch(batch *b)
{
    free(b->cu_q);
    free(b->cu_k);
    free(b->q_pos);
    free(b->q);
    free(b->k);
    free(b->v);
}

void fill_params(const acase *c, const batch *b, clvarlen_attention_params *p)
{
    clvarlen_attention_params_init(p);
    p->dtype = c->dtype;
    p->n_seqs = b->n;
    p->total_q = b->tq;
    p->total_k = b->tk;
    p->heads_q = c->hq;
    p->heads_kv = c->hk;
    p->head_dim = c->d;
    p->head_dim_v = c->dv == c->d ? 0 : c->dv;
    p->q_stride = c->q_pad ? b->qs : 0;
    p->k_stride = c->k_pad ? b->ks : 0;
    p->v_stride = c->v_pad ? b->vs : 0;
    p->o_stride = c->o_pad ? b->os : 0;
    p->scale = c->scale;
    p->causal = c->causal;
    p->window_left = c->wl;
    p->window_right = c->wr;
    p->softcap = c->softcap;
}

double lse_tolerance(clvarlen_dtype dt)
{
    return dt == CLVARLEN_DTYPE_F32 ? 1e-5 : 1e-4;
}

