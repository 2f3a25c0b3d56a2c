/* The gated delta rule's test cases and the bodies the CPU and OpenCL builds
 * of test-gated-delta.c share (test-gated-delta.h). */
#include "test-gated-delta.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t esize(clvarlen_dtype d)
{
    return d == CLVARLEN_DTYPE_F32 ? 4 : 2;
}

static int64_t or_default(int64_t stride, int64_t row)
{
    return stride ? stride : row;
}

/* ---------------------------------------------------------------- test cases */

gdn_case_cfg gdn_cfg_default(void)
{
    gdn_case_cfg c;
    memset(&c, 0, sizeof c);
    c.seed = 1;
    c.H = 2;
    c.HV = 4;
    c.K = 16;
    c.V = 24;
    c.dtype = CLVARLEN_DTYPE_F32;
    c.state_dtype = CLVARLEN_DTYPE_F32;
    c.bias_dtype = CLVARLEN_DTYPE_F32;
    c.layout = CLVARLEN_STATE_VK;
    c.algorithm = CLVARLEN_GDN_AUTO;
    return c;
}

static void *random_tensor(tu_rng *r, clvarlen_dtype dt, int64_t elems, double scale)
{
    void *p = tu_xcalloc((size_t)elems * esize(dt));
    tu_fill_random(r, p, dt, (size_t)elems, scale);
    return p;
}

/* A buffer with the kit's guard bands: `bytes` usable bytes after GDN_GUARD pattern bytes. */
static unsigned char *guarded(size_t bytes)
{
    unsigned char *p = tu_xcalloc(bytes + 2 * GDN_GUARD);
    tu_guard_write(p, bytes);
    return p;
}

static int guards_ok(const unsigned char *p, size_t bytes)
{
    return tu_guard_intact(p, bytes);
}

#define O_FILL 0xCD

void gdn_case_make(gdn_case *c, const gdn_case_cfg *cfg)
{
    memset(c, 0, sizeof *c);
    c->cfg = *cfg;
    tu_rng r = tu_rng_make(cfg->seed);
    clvarlen_gdn_params *p = &c->p;
    clvarlen_gdn_params_init(p);
    const int64_t N = cfg->n, H = cfg->H, HV = cfg->HV, K = cfg->K, V = cfg->V;
    p->dtype = cfg->dtype;
    p->state_dtype = cfg->state_dtype;
    p->dt_bias_dtype = cfg->bias_dtype;
    p->n_seqs = N;
    p->heads_qk = cfg->H;
    p->heads_v = cfg->HV;
    p->key_dim = cfg->K;
    p->value_dim = cfg->V;
    p->state_layout = cfg->layout;
    p->use_qk_l2norm = cfg->l2norm;
    p->scale = cfg->scale;
    p->disable_state_update = cfg->disable_update;
    p->algorithm = cfg->algorithm;

    c->lengths = tu_xcalloc((size_t)(N + 1) * sizeof(int32_t));
    int64_t T = 0;
    for (int64_t n = 0; n < N; n++) {
        c->lengths[n] = cfg->lengths[n];
        T += cfg->lengths[n];
    }
    p->total_tokens = T;
    if (cfg->fixed) {
        p->fixed_seqlen = N > 0 ? cfg->lengths[0] : 0;
        for (int64_t n = 0; n < N; n++)
            ck_assert_int_eq(cfg->lengths[n], p->fixed_seqlen);
    } else {
        c->cu = tu_xcalloc((size_t)(N + 1) * sizeof(int32_t));
        tu_cu_from_lengths(c->lengths, N, c->cu);
    }

    const int64_t pad = cfg->stride_pad;
    const int64_t qs = H * K + pad, vs = HV * V + pad, abs_ = HV + pad, os = HV * V + pad;
    if (pad) {
        p->q_stride = p->k_stride = qs;
        p->v_stride = vs;
        p->a_stride = p->b_stride = abs_;
        p->o_stride = os;
    }
    /* q and k of unit scale after normalisation keep the recurrence stable */
    const double qk_scale = cfg->l2norm ? 1.0 : 1.0 / sqrt((double)K);
    c->A_log = tu_xcalloc((size_t)HV * sizeof(float));
    for (int64_t h = 0; h < HV; h++)
        c->A_log[h] = (float)tu_uniform(&r, -3.0, 0.0);
    c->dt_bias = tu_xcalloc((size_t)HV * esize(cfg->bias_dtype));
    for (int64_t h = 0; h < HV; h++)
        tu_set(c->dt_bias, cfg->bias_dtype, (size_t)h, tu_uniform(&r, -1.0, 1.0));
    c->q = random_tensor(&r, cfg->dtype, T * qs, qk_scale);
    c->k = random_tensor(&r, cfg->dtype, T * qs, qk_scale);
    c->v = random_tensor(&r, cfg->dtype, T * vs, 1.0);
    c->a = random_tensor(&r, cfg->dtype, T * abs_, 1.0);
    c->b = random_tensor(&r, cfg->dtype, T * abs_, 1.5);

    c->o_bytes = (size_t)(T * os) * esize(cfg->dtype);
    c->o = guarded(c->o_bytes);
    memset(c->o + GDN_GUARD, O_FILL, c->o_bytes);

    const int64_t head = HV * K * V;
    if (cfg->use_pool) {
        p->state_slots = cfg->slots;
        p->state_slot_pitch = cfg->pitch_pad ? head + cfg->pitch_pad : 0;
        c->pool_elems = cfg->slots * (head + cfg->pitch_pad);
        c->pool_bytes = (size_t)c->pool_elems * esize(cfg->state_dtype);
        c->pool = guarded(c->pool_bytes);
        c->pool_init = random_tensor(&r, cfg->state_dtype, c->pool_elems, 0.5);
        memcpy(c->pool + GDN_GUARD, c->pool_init, c->pool_bytes);
        if (cfg->indices) {
            c->indices = tu_xcalloc((size_t)(N + 1) * sizeof(int32_t));
            memcpy(c->indices, cfg->indices, (size_t)N * sizeof(int32_t));
        }
    }
    if (cfg->inter) {
        p->cache_slots = cfg->cache_slots;
        p->cache_steps = cfg->cache_steps;
        c->inter_elems = cfg->cache_slots * cfg->cache_steps * head;
        c->inter_bytes = (size_t)c->inter_elems * esize(cfg->state_dtype);
        c->inter = guarded(c->inter_bytes);
        c->inter_init = random_tensor(&r, cfg->state_dtype, c->inter_elems, 0.5);
        memcpy(c->inter + GDN_GUARD, c->inter_init, c->inter_bytes);
        if (cfg->cache_idx) {
            c->cache_idx = tu_xcalloc((size_t)(N + 1) * sizeof(int32_t));
            memcpy(c->cache_idx, cfg->cache_idx, (size_t)N * sizeof(int32_t));
        }
    }
}

void gdn_case_free(gdn_case *c)
{
    void *all[] = {c->lengths, c->cu,   c->indices, c->cache_idx, c->A_log, c->dt_bias,
                   c->a,       c->b,    c->q,       c->k,         c->v,     c->o,
                   c->pool,    c->inter, c->pool_init, c->inter_init};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
    memset(c, 0, sizeof *c);
}

void gdn_case_reset(gdn_case *c)
{
    memset(c->o + GDN_GUARD, O_FILL, c->o_bytes);
    if (c->pool)
        memcpy(c->pool + GDN_GUARD, c->pool_init, c->pool_bytes);
    if (c->inter)
        memcpy(c->inter + GDN_GUARD, c->inter_init, c->inter_bytes);
}

clvarlen_status gdn_case_run(clvarlen_context *ctx, gdn_case *c)
{
    return clvarlen_gated_delta_rule(ctx, &c->p, c->A_log, c->dt_bias, c->a, c->b, c->q, c->k,
                                     c->v, c->cu, c->pool ? c->pool + GDN_GUARD : NULL,
                                     c->indices, c->inter ? c->inter + GDN_GUARD : NULL,
                                     c->cache_idx, c->o + GDN_GUARD);
}

size_t gdn_case_o_row_bytes(const gdn_case *c)
{
    return (size_t)(c->p.heads_v * c->p.value_dim) * esize(c->p.dtype);
}

const void *gdn_case_o_row(const gdn_case *c, int64_t t)
{
    int64_t os = or_default(c->p.o_stride, (int64_t)c->p.heads_v * c->p.value_dim);
    return c->o + GDN_GUARD + (size_t)(t * os) * esize(c->p.dtype);
}

typedef struct acc {
    double num, den, max;
} acc;

static void acc_add(acc *a, double out, double ref, int *nonfinite)
{
    if (!isfinite(out)) {
        /* as tu_compare: a NaN never passes, not even against a NaN */
        if (isfinite(ref) || isnan(out))
            (*nonfinite)++;
        return;
    }
    double d = out - ref;
    a->num += d * d;
    a->den += ref * ref;
    if (fabs(d) > a->max)
        a->max = fabs(d);
}

static double acc_rel(const acc *a)
{
    return a->den > 0.0 ? sqrt(a->num / a->den) : sqrt(a->num);
}

static void note(gdn_case_err *e, const char *what, long long at_)
{
    if (!e->guards_broken)
        snprintf(e->where, sizeof e->where, "%s (at %lld)", what, at_);
    e->guards_broken++;
}

void gdn_case_check(const gdn_case *c, gdn_case_err *e)
{
    memset(e, 0, sizeof *e);
    const clvarlen_gdn_params *p = &c->p;
    const int64_t T = p->total_tokens, HV = p->heads_v, K = p->key_dim, V = p->value_dim;
    const int64_t head = HV * K * V;
    double *o_ref = tu_xcalloc((size_t)(T * HV * V) * sizeof(double));
    double *pool_ref = c->pool ? tu_xcalloc((size_t)c->pool_elems * sizeof(double)) : NULL;
    double *inter_ref = c->inter ? tu_xcalloc((size_t)c->inter_elems * sizeof(double)) : NULL;
    gdn_ref(p, c->A_log, c->dt_bias, c->a, c->b, c->q, c->k, c->v, c->cu, c->pool_init,
            c->indices, c->inter_init, c->cache_idx, o_ref, pool_ref, inter_ref);

    acc ao = {0, 0, 0};
    const size_t es = esize(p->dtype), row = gdn_case_o_row_bytes(c);
    const int64_t os = or_default(p->o_stride, HV * V);
    for (int64_t t = 0; t < T; t++) {
        const unsigned char *r = gdn_case_o_row(c, t);
        for (int64_t i = 0; i < HV * V; i++)
            acc_add(&ao, tu_get(r, p->dtype, (size_t)i), o_ref[t * HV * V + i], &e->nonfinite);
        for (size_t g = row; g < (size_t)os * es; g++)
            if (r[g] != O_FILL) {
                note(e, "o: a byte between rows changed", (long long)t);
                break;
            }
    }
    if (!guards_ok(c->o, c->o_bytes))
        note(e, "o: guard band overwritten", 0);
    e->o_rel = acc_rel(&ao);
    e->o_max = ao.max;

    if (c->pool) {
        /* slots the call may write; everything else must keep its bytes */
        const int64_t pitch = or_default(p->state_slot_pitch, head);
        unsigned char *written = tu_xcalloc((size_t)p->state_slots + 1);
        for (int64_t n = 0; n < p->n_seqs; n++) {
            int64_t s = c->indices ? c->indices[n] : n;
            if (s >= 0 && c->lengths[n] > 0 && !p->disable_state_update)
                written[s] = 1;
        }
        acc ap = {0, 0, 0};
        const unsigned char *now = c->pool + GDN_GUARD, *init = c->pool_init;
        const size_t ses = esize(p->state_dtype);
        for (int64_t i = 0; i < c->pool_elems; i++) {
            const int64_t s = i / pitch, in = i % pitch;
            if (written[s] && in < head)
                acc_add(&ap, tu_get(now, p->state_dtype, (size_t)i), pool_ref[i], &e->nonfinite);
            else if (memcmp(now + (size_t)i * ses, init + (size_t)i * ses, ses) != 0) {
                note(e, "pool: an element outside the written slots changed", (long long)i);
                break;
            }
        }
        if (!guards_ok(c->pool, c->pool_bytes))
            note(e, "pool: guard band overwritten", 0);
        e->pool_rel = acc_rel(&ap);
        e->pool_max = ap.max;
        free(written);
    }
    if (c->inter) {
        const int64_t steps = p->cache_steps;
        unsigned char *written = tu_xcalloc((size_t)(p->cache_slots * steps) + 1);
        for (int64_t n = 0; n < p->n_seqs; n++) {
            int64_t s = c->cache_idx ? c->cache_idx[n] : n;
            for (int64_t j = 0; s >= 0 && j < c->lengths[n] && j < steps; j++)
                written[s * steps + j] = 1;
        }
        acc ai = {0, 0, 0};
        const unsigned char *now = c->inter + GDN_GUARD, *init = c->inter_init;
        const size_t ses = esize(p->state_dtype);
        for (int64_t i = 0; i < c->inter_elems; i++) {
            if (written[i / head])
                acc_add(&ai, tu_get(now, p->state_dtype, (size_t)i), inter_ref[i], &e->nonfinite);
            else if (memcmp(now + (size_t)i * ses, init + (size_t)i * ses, ses) != 0) {
                note(e, "intermediate: an unwritten step changed", (long long)i);
                break;
            }
        }
        if (!guards_ok(c->inter, c->inter_bytes))
            note(e, "intermediate: guard band overwritten", 0);
        e->inter_rel = acc_rel(&ai);
        e->inter_max = ai.max;
        free(written);
    }
    free(o_ref);
    free(pool_ref);
    free(inter_ref);
}

int gdn_case_untouched(const gdn_case *c)
{
    for (size_t i = 0; i < c->o_bytes; i++)
        if (c->o[GDN_GUARD + i] != O_FILL)
            return 0;
    if (!guards_ok(c->o, c->o_bytes))
        return 0;
    if (c->pool && (memcmp(c->pool + GDN_GUARD, c->pool_init, c->pool_bytes) != 0 ||
                    !guards_ok(c->pool, c->pool_bytes)))
        return 0;
    if (c->inter && (memcmp(c->inter + GDN_GUARD, c->inter_init, c->inter_bytes) != 0 ||
                     !guards_ok(c->inter, c->inter_bytes)))
        return 0;
    return 1;
}

/* ---------------------------------------------------------------- shared test bodies */

double gdn_tolerance(clvarlen_dtype dtype, int64_t max_len)
{
    if (dtype == CLVARLEN_DTYPE_F32)
        return max_len > 64 ? 1e-4 : 1e-5; /* SPEC 4: 1e-4 for the recurrence over long sequences */
    return tu_tolerance(dtype);
}

static int64_t max_length(const gdn_case *c)
{
    int64_t m = 0;
    for (int64_t n = 0; n < c->p.n_seqs; n++)
        if (c->lengths[n] > m)
            m = c->lengths[n];
    return m;
}

gdn_case_err gdn_run_and_check(clvarlen_context *ctx, gdn_case *c, const char *label)
{
    clvarlen_status st = gdn_case_run(ctx, c);
    ck_assert_msg(st == CLVARLEN_SUCCESS, "%s: %s: %s", label, clvarlen_status_name(st),
                  clvarlen_last_error(ctx));
    gdn_case_err e;
    gdn_case_check(c, &e);
    const int64_t ml = max_length(c);
    const double to = gdn_tolerance(c->p.dtype, ml), ts = gdn_tolerance(c->p.state_dtype, ml);
    ck_assert_msg(e.guards_broken == 0, "%s: %s", label, e.where);
    ck_assert_msg(e.nonfinite == 0, "%s: %d non-finite values", label, e.nonfinite);
    ck_assert_msg(e.o_rel <= to, "%s: o rel_l2 %.3g > %.3g (max abs %.3g)", label, e.o_rel, to,
                  e.o_max);
    ck_assert_msg(e.pool_rel <= ts, "%s: state rel_l2 %.3g > %.3g (max abs %.3g)", label,
                  e.pool_rel, ts, e.pool_max);
    ck_assert_msg(e.inter_rel <= ts, "%s: intermediate rel_l2 %.3g > %.3g (max abs %.3g)", label,
                  e.inter_rel, ts, e.inter_max);
    return e;
}

void gdn_t_seed_varlen_vs_fixed(clvarlen_context *ctx, clvarlen_gdn_algorithm alg)
{
    static const int32_t lengths[3] = {5, 7, 6};
    for (int with_pool = 0; with_pool < 2; with_pool++) {
        gdn_case_cfg cfg = gdn_cfg_default();
        cfg.seed = 11 + (uint64_t)with_pool;
        cfg.n = 3;
        cfg.lengths = lengths;
        cfg.use_pool = with_pool;
        cfg.slots = 3;
        cfg.l2norm = 1;
        cfg.algorithm = alg;
        gdn_case c;
        gdn_case_make(&c, &cfg);
        gdn_run_and_check(ctx, &c, "varlen [5, 7, 6]");

        const int64_t HV = cfg.HV, K = cfg.K, V = cfg.V, head = HV * K * V;
        for (int64_t n = 0; n < 3; n++) {
            const int64_t bos = c.cu[n], L = lengths[n];
            clvarlen_gdn_params p = c.p;
            p.n_seqs = 1;
            p.total_tokens = L;
            p.fixed_seqlen = (int32_t)L;
            p.state_slots = 1;
            float *pool = NULL;
            if (with_pool) { /* slot n of the initial pool, alone */
                pool = malloc((size_t)head * sizeof(float));
                ck_assert(pool != NULL);
                memcpy(pool, (const float *)c.pool_init + n * head, (size_t)head * sizeof(float));
            }
            float *o = calloc((size_t)(L * HV * V), sizeof(float));
            ck_assert(o != NULL);
            const int64_t hk = cfg.H * K;
            clvarlen_status st = clvarlen_gated_delta_rule(
                ctx, &p, c.A_log, c.dt_bias, (const float *)c.a + bos * HV,
                (const float *)c.b + bos * HV, (const float *)c.q + bos * hk,
                (const float *)c.k + bos * hk, (const float *)c.v + bos * HV * V, NULL, pool,
                NULL, NULL, NULL, o);
            ck_assert_msg(st == CLVARLEN_SUCCESS, "fixed run %lld: %s", (long long)n,
                          clvarlen_last_error(ctx));
            ck_assert_msg(memcmp(o, gdn_case_o_row(&c, bos), (size_t)(L * HV * V) * sizeof(float)) == 0,
                          "sequence %lld: fixed-length output differs from varlen (pool %d)",
                          (long long)n, with_pool);
            if (with_pool)
                ck_assert_msg(memcmp(pool, (const float *)(c.pool + GDN_GUARD) + n * head,
                                     (size_t)head * sizeof(float)) == 0,
                              "sequence %lld: fixed-length final state differs from varlen",
                              (long long)n);
            free(o);
            free(pool);
        }
        gdn_case_free(&c);
    }

    /* a fixed-length batch [3, 6] is the varlen batch cu = [0, 6, 12, 18] */
    static const int32_t six[3] = {6, 6, 6};
    static const int32_t idx[3] = {2, -1, 0};
    gdn_case_cfg cfg = gdn_cfg_default();
    cfg.seed = 13;
    cfg.n = 3;
    cfg.lengths = six;
    cfg.use_pool = 1;
    cfg.slots = 4;
    cfg.indices = idx;
    cfg.algorithm = alg;
    gdn_case var, fix;
    gdn_case_make(&var, &cfg);
    cfg.fixed = 1;
    gdn_case_make(&fix, &cfg);
    gdn_run_and_check(ctx, &var, "varlen [6, 6, 6]");
    gdn_run_and_check(ctx, &fix, "fixed [3, 6]");
    ck_assert_msg(memcmp(var.o, fix.o, var.o_bytes + 2 * GDN_GUARD) == 0,
                  "fixed-length batch output differs from varlen");
    ck_assert_msg(memcmp(var.pool, fix.pool, var.pool_bytes + 2 * GDN_GUARD) == 0,
                  "fixed-length batch states differ from varlen");
    gdn_case_free(&var);
    gdn_case_free(&fix);
}

void gdn_t_seed_state_indices(clvarlen_context *ctx, clvarlen_gdn_algorithm alg)
{
    static const int32_t lengths[3] = {4, 6, 5};
    static const int32_t idx[3] = {0, 2, 1};
    gdn_case_cfg cfg = gdn_cfg_default();
    cfg.seed = 21;
    cfg.n = 3;
    cfg.lengths = lengths;
    cfg.use_pool = 1;
    cfg.slots = 5;
    cfg.indices = idx;
    cfg.l2norm = 1;
    cfg.algorithm = alg;
    gdn_case c;
    gdn_case_make(&c, &cfg);
    /* slots 3 and 4 are checked bitwise unchanged by gdn_case_check */
    gdn_run_and_check(ctx, &c, "state indices [0, 2, 1], pool of 5");
    gdn_case_free(&c);
}

void gdn_t_sweep(clvarlen_context *ctx, int i, clvarlen_gdn_algorithm alg)
{
    static const int32_t dims[][4] = {{1, 2, 16, 24}, {2, 8, 24, 16}, {1, 4, 32, 8},
                                      {3, 6, 8, 40},  {2, 2, 20, 12}, {2, 4, 16, 24}};
    static const clvarlen_dtype dts[][3] = {
        {CLVARLEN_DTYPE_F32, CLVARLEN_DTYPE_F32, CLVARLEN_DTYPE_F32},
        {CLVARLEN_DTYPE_BF16, CLVARLEN_DTYPE_BF16, CLVARLEN_DTYPE_F32},
        {CLVARLEN_DTYPE_F16, CLVARLEN_DTYPE_F16, CLVARLEN_DTYPE_BF16},
        {CLVARLEN_DTYPE_BF16, CLVARLEN_DTYPE_F32, CLVARLEN_DTYPE_BF16},
        {CLVARLEN_DTYPE_F16, CLVARLEN_DTYPE_BF16, CLVARLEN_DTYPE_F16},
        {CLVARLEN_DTYPE_F32, CLVARLEN_DTYPE_F16, CLVARLEN_DTYPE_F32},
    };
    tu_rng r = tu_rng_make(1000 + (uint64_t)i);
    int32_t lengths[8], idx[8];
    int64_t n = tu_random_lengths(&r, 6, 90, 260, lengths);
    gdn_case_cfg cfg = gdn_cfg_default();
    cfg.seed = 100 + (uint64_t)i;
    cfg.H = dims[i % 6][0];
    cfg.HV = dims[i % 6][1];
    cfg.K = dims[i % 6][2];
    cfg.V = dims[i % 6][3];
    cfg.dtype = dts[(i / 2) % 6][0];
    cfg.state_dtype = dts[(i / 2) % 6][1];
    cfg.bias_dtype = dts[(i / 2) % 6][2];
    cfg.layout = (i % 2) ? CLVARLEN_STATE_KV : CLVARLEN_STATE_VK;
    cfg.l2norm = (i / 3) % 2;
    cfg.scale = (i % 3 == 0) ? 0.37f : 0.0f;
    cfg.stride_pad = (i % 4 == 1) ? 3 : 0;
    cfg.pitch_pad = (i % 5 == 2) ? 7 : 0;
    cfg.n = n;
    cfg.lengths = lengths;
    cfg.algorithm = alg;
    if (i % 6 != 5) {
        cfg.use_pool = 1;
        cfg.slots = n + 2;
        /* a permutation of the slots, a quarter of them negative */
        for (int64_t s = 0; s < n; s++)
            idx[s] = (int32_t)s;
        for (int64_t s = n - 1; s > 0; s--) {
            int64_t j = tu_int(&r, 0, s);
            int32_t tmp = idx[s];
            idx[s] = idx[j];
            idx[j] = tmp;
        }
        for (int64_t s = 0; s < n; s++)
            if (tu_int(&r, 0, 3) == 0)
                idx[s] = -1 - (int32_t)tu_int(&r, 0, 5);
        cfg.indices = (i % 8 == 7) ? NULL : idx;
        cfg.disable_update = (i % 7 == 3);
    }
    gdn_case c;
    gdn_case_make(&c, &cfg);
    char label[160];
    snprintf(label, sizeof label,
             "sweep %d: H %d HV %d K %d V %d %s/%s/%s %s l2 %d scale %g pad %lld n %lld", i,
             cfg.H, cfg.HV, cfg.K, cfg.V, clvarlen_dtype_name(cfg.dtype),
             clvarlen_dtype_name(cfg.state_dtype), clvarlen_dtype_name(cfg.bias_dtype),
             cfg.layout == CLVARLEN_STATE_KV ? "KV" : "VK", cfg.l2norm, (double)cfg.scale,
             (long long)cfg.stride_pad, (long long)n);
    gdn_run_and_check(ctx, &c, label);
    gdn_case_free(&c);
}

void gdn_t_strided_bitwise(clvarlen_context *ctx, clvarlen_gdn_algorithm alg)
{
    static const int32_t lengths[5] = {9, 0, 1, 70, 33};
    static const int32_t idx[5] = {3, 0, -1, 1, 4};
    for (int dt = 0; dt < 2; dt++) {
        gdn_case_cfg cfg = gdn_cfg_default();
        cfg.seed = 31;
        cfg.n = 5;
        cfg.lengths = lengths;
        cfg.use_pool = 1;
        cfg.slots = 5;
        cfg.indices = idx;
        cfg.l2norm = 1;
        cfg.dtype = dt ? CLVARLEN_DTYPE_BF16 : CLVARLEN_DTYPE_F32;
        cfg.algorithm = alg;
        gdn_case flat, strided;
        gdn_case_make(&flat, &cfg);
        gdn_run_and_check(ctx, &flat, "contiguous");

        /* the same values at token strides of a fused projection */
        cfg.stride_pad = 13;
        gdn_case_make(&strided, &cfg);
        const clvarlen_gdn_params *p = &flat.p;
        const size_t es = dt ? 2 : 4;
        const int64_t T = p->total_tokens, HK = p->heads_qk * p->key_dim,
                      HVV = p->heads_v * p->value_dim, HV = p->heads_v;
        struct {
            void *dst;
            const void *src;
            int64_t row, stride;
        } m[] = {{strided.q, flat.q, HK, HK + 13},   {strided.k, flat.k, HK, HK + 13},
                 {strided.v, flat.v, HVV, HVV + 13}, {strided.a, flat.a, HV, HV + 13},
                 {strided.b, flat.b, HV, HV + 13}};
        for (size_t j = 0; j < sizeof m / sizeof m[0]; j++)
            for (int64_t t = 0; t < T; t++)
                memcpy((char *)m[j].dst + (size_t)(t * m[j].stride) * es,
                       (const char *)m[j].src + (size_t)(t * m[j].row) * es, (size_t)m[j].row * es);
        memcpy(strided.A_log, flat.A_log, (size_t)HV * sizeof(float));
        memcpy(strided.dt_bias, flat.dt_bias, (size_t)HV * sizeof(float));
        memcpy(strided.pool_init, flat.pool_init, flat.pool_bytes);
        gdn_case_reset(&strided);
        gdn_run_and_check(ctx, &strided, "token-strided");
        for (int64_t t = 0; t < T; t++)
            ck_assert_msg(memcmp(gdn_case_o_row(&flat, t), gdn_case_o_row(&strided, t),
                                 gdn_case_o_row_bytes(&flat)) == 0,
                          "token %lld: strided output differs from contiguous", (long long)t);
        ck_assert_msg(memcmp(flat.pool + GDN_GUARD, strided.pool + GDN_GUARD, flat.pool_bytes) == 0,
                      "strided states differ from contiguous");
        gdn_case_free(&flat);
        gdn_case_free(&strided);
    }
}

void gdn_t_target_verify(clvarlen_context *ctx)
{
    static const int32_t lengths[4] = {3, 4, 0, 2};
    static const int32_t idx[4] = {1, 0, 2, -1};
    static const int32_t cidx[4] = {1, -1, 0, 2};
    for (int layout = 0; layout < 2; layout++) {
        gdn_case_cfg cfg = gdn_cfg_default();
        cfg.seed = 41 + (uint64_t)layout;
        cfg.n = 4;
        cfg.lengths = lengths;
        cfg.use_pool = 1;
        cfg.slots = 3;
        cfg.indices = idx;
        cfg.disable_update = 1;
        cfg.inter = 1;
        cfg.cache_slots = 3;
        cfg.cache_steps = 4;
        cfg.cache_idx = cidx;
        cfg.l2norm = 1;
        cfg.layout = layout ? CLVARLEN_STATE_KV : CLVARLEN_STATE_VK;
        cfg.state_dtype = layout ? CLVARLEN_DTYPE_BF16 : CLVARLEN_DTYPE_F32;
        gdn_case c;
        gdn_case_make(&c, &cfg);
        gdn_run_and_check(ctx, &c, "target verify");
        ck_assert_msg(memcmp(c.pool + GDN_GUARD, c.pool_init, c.pool_bytes) == 0,
                      "target verify wrote the pool with state update disabled");
        gdn_case_free(&c);

        /* with update on and no cache indices (slot n), both outputs are written */
        cfg.disable_update = 0;
        cfg.cache_idx = NULL;
        cfg.cache_slots = 4;
        gdn_case_make(&c, &cfg);
        gdn_run_and_check(ctx, &c, "intermediate states with state update");
        gdn_case_free(&c);
    }
}

void gdn_t_large_heads(clvarlen_context *ctx, clvarlen_gdn_algorithm alg)
{
    static const int32_t lengths[5] = {130, 1, 0, 64, 77};
    static const int32_t idx[5] = {4, 0, 1, -1, 2};
    for (int v = 0; v < 2; v++) {
        gdn_case_cfg cfg = gdn_cfg_default();
        cfg.seed = 51 + (uint64_t)v;
        cfg.H = v ? 1 : 2;
        cfg.HV = 4;
        cfg.K = 128;
        cfg.V = v ? 96 : 128;
        cfg.n = 5;
        cfg.lengths = lengths;
        cfg.use_pool = 1;
        cfg.slots = 5;
        cfg.indices = idx;
        cfg.l2norm = 1;
        cfg.layout = v ? CLVARLEN_STATE_KV : CLVARLEN_STATE_VK;
        cfg.dtype = v ? CLVARLEN_DTYPE_F32 : CLVARLEN_DTYPE_BF16;
        cfg.algorithm = alg;
        gdn_case c;
        gdn_case_make(&c, &cfg);
        gdn_run_and_check(ctx, &c, v ? "K 128 V 96 HV/H 4 KV f32" : "K = V = 128 HV/H 2 VK bf16");
        gdn_case_free(&c);
    }
}

/* Issue 22: key_dim and value_dim 1..5 and 128. Each K in {1..5, 128} meets
 * some V and each V some K, plus crosses with K != V; the chunked kernel's tile
 * (K x CVT) is then narrower than its work-group, and the token kernel's V tile
 * narrower than 4 columns (PoCL's compiler aborted on it). Lengths cross 64. */
void gdn_t_small_heads(clvarlen_context *ctx, clvarlen_gdn_algorithm alg)
{
    static const int32_t dims[][2] = {{1, 1}, {2, 2}, {3, 3}, {4, 4}, {5, 5},
                                      {128, 2}, {2, 128}, {1, 5}, {5, 1}};
    static const int32_t lengths[5] = {0, 1, 63, 64, 65};
    static const int32_t idx[5] = {0, 3, -1, 1, 2};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
        gdn_case_cfg cfg = gdn_cfg_default();
        cfg.seed = 71 + (uint64_t)i;
        cfg.H = 1;
        cfg.HV = 2;
        cfg.K = dims[i][0];
        cfg.V = dims[i][1];
        cfg.n = 5;
        cfg.lengths = lengths;
        cfg.use_pool = 1;
        cfg.slots = 4;
        cfg.indices = idx;
        cfg.l2norm = (int)(i % 2 == 0);
        cfg.layout = i % 3 == 1 ? CLVARLEN_STATE_KV : CLVARLEN_STATE_VK;
        cfg.algorithm = alg;
        gdn_case c;
        gdn_case_make(&c, &cfg);
        char label[64];
        snprintf(label, sizeof label, "K %d V %d", (int)cfg.K, (int)cfg.V);
        gdn_run_and_check(ctx, &c, label);
        gdn_case_free(&c);
    }
}

/* One invalid call: the expected status, and nothing written. */
static void expect_error(clvarlen_context *ctx, gdn_case *c, const clvarlen_gdn_params *p,
                         const void *q, clvarlen_status want, const char *label)
{
    gdn_case_reset(c);
    clvarlen_status st = clvarlen_gated_delta_rule(
        ctx, p, c->A_log, c->dt_bias, c->a, c->b, q, c->k, c->v, c->cu,
        c->pool ? c->pool + GDN_GUARD : NULL, c->indices, c->inter ? c->inter + GDN_GUARD : NULL,
        c->cache_idx, c->o + GDN_GUARD);
    ck_assert_msg(st == want, "%s: got %s, want %s (%s)", label, clvarlen_status_name(st),
                  clvarlen_status_name(want), clvarlen_last_error(ctx));
    ck_assert_msg(strlen(clvarlen_last_error(ctx)) > 0, "%s: no message", label);
    ck_assert_msg(gdn_case_untouched(c), "%s: an output was written", label);
}

void gdn_t_errors(clvarlen_context *ctx)
{
    static const int32_t lengths[3] = {3, 0, 2};
    static const int32_t idx[3] = {1, 0, -1};
    static const int32_t cidx[3] = {0, 1, -1};
    gdn_case_cfg cfg = gdn_cfg_default();
    cfg.seed = 61;
    cfg.n = 3;
    cfg.lengths = lengths;
    cfg.use_pool = 1;
    cfg.slots = 2;
    cfg.indices = idx;
    cfg.inter = 1;
    cfg.cache_slots = 2;
    cfg.cache_steps = 3;
    cfg.cache_idx = cidx;
    gdn_case c;
    gdn_case_make(&c, &cfg);
    const clvarlen_gdn_params base = c.p;
    clvarlen_gdn_params p;

#define MUT(stmt, want, label)                                                                 \
    do {                                                                                       \
        p = base;                                                                              \
        stmt;                                                                                  \
        expect_error(ctx, &c, &p, c.q, want, label);                                           \
    } while (0)
    MUT(p.struct_size = 8, CLVARLEN_ERROR_INVALID_ARGUMENT, "struct_size");
    MUT(p.dtype = CLVARLEN_DTYPE_I32, CLVARLEN_ERROR_UNSUPPORTED, "dtype i32");
    MUT(p.state_dtype = CLVARLEN_DTYPE_F64, CLVARLEN_ERROR_UNSUPPORTED, "state dtype f64");
    MUT(p.dt_bias_dtype = (clvarlen_dtype)99, CLVARLEN_ERROR_INVALID_ARGUMENT, "dt_bias dtype 99");
    MUT(p.heads_v = 3, CLVARLEN_ERROR_INVALID_ARGUMENT, "HV % H");
    MUT(p.heads_qk = 0, CLVARLEN_ERROR_INVALID_ARGUMENT, "H = 0");
    MUT(p.key_dim = 0, CLVARLEN_ERROR_INVALID_ARGUMENT, "K = 0");
    MUT(p.value_dim = 300, CLVARLEN_ERROR_UNSUPPORTED, "V = 300");
    MUT(p.n_seqs = -1, CLVARLEN_ERROR_INVALID_ARGUMENT, "n_seqs < 0");
    MUT(p.total_tokens = 4, CLVARLEN_ERROR_INVALID_CU_SEQLENS, "total != cu[N]");
    MUT(p.q_stride = p.heads_qk * p.key_dim - 1, CLVARLEN_ERROR_INVALID_ARGUMENT, "q stride");
    MUT(p.o_stride = 5, CLVARLEN_ERROR_INVALID_ARGUMENT, "o stride");
    MUT(p.a_stride = -2, CLVARLEN_ERROR_INVALID_ARGUMENT, "a stride < 0");
    MUT(p.scale = -1.0f, CLVARLEN_ERROR_INVALID_ARGUMENT, "scale < 0");
    MUT(p.scale = NAN, CLVARLEN_ERROR_INVALID_ARGUMENT, "scale NaN");
    MUT(p.softplus_beta = 0.0f, CLVARLEN_ERROR_INVALID_ARGUMENT, "softplus beta 0");
    MUT(p.softplus_threshold = NAN, CLVARLEN_ERROR_INVALID_ARGUMENT, "softplus threshold NaN");
    MUT(p.state_layout = (clvarlen_state_layout)2, CLVARLEN_ERROR_INVALID_ARGUMENT, "layout");
    MUT(p.state_slots = 1, CLVARLEN_ERROR_INDEX_OUT_OF_RANGE, "state index >= slots");
    MUT(p.state_slot_pitch = 5, CLVARLEN_ERROR_INVALID_ARGUMENT, "slot pitch");
    MUT(p.cache_slots = 1, CLVARLEN_ERROR_INDEX_OUT_OF_RANGE, "cache index >= cache slots");
    MUT(p.cache_steps = 2, CLVARLEN_ERROR_INVALID_ARGUMENT, "sequence longer than cache");
    MUT(p.cache_steps = 0, CLVARLEN_ERROR_INVALID_ARGUMENT, "cache_steps 0");
    MUT(p.algorithm = CLVARLEN_GDN_CHUNKED, CLVARLEN_ERROR_UNSUPPORTED, "chunked + verify");
    MUT(p.algorithm = (clvarlen_gdn_algorithm)7, CLVARLEN_ERROR_INVALID_ARGUMENT, "algorithm");
    p = base;
    expect_error(ctx, &c, &p, NULL, CLVARLEN_ERROR_INVALID_ARGUMENT, "q NULL");
    expect_error(ctx, &c, NULL, c.q, CLVARLEN_ERROR_INVALID_ARGUMENT, "params NULL");

    /* host-visible arrays */
    c.cu[1] = 4; /* cu = [0, 4, 3, 5]: decreasing */
    expect_error(ctx, &c, &base, c.q, CLVARLEN_ERROR_INVALID_CU_SEQLENS, "cu decreasing");
    c.cu[1] = 3;
    c.cu[0] = 1;
    expect_error(ctx, &c, &base, c.q, CLVARLEN_ERROR_INVALID_CU_SEQLENS, "cu[0] != 0");
    c.cu[0] = 0;
    c.indices[0] = 2;
    expect_error(ctx, &c, &base, c.q, CLVARLEN_ERROR_INDEX_OUT_OF_RANGE, "state_indices[0] = 2");
    c.indices[0] = 1;
    c.cache_idx[1] = 5;
    expect_error(ctx, &c, &base, c.q, CLVARLEN_ERROR_INDEX_OUT_OF_RANGE, "cache_indices[1] = 5");
    c.cache_idx[1] = 1;

    /* fixed length: total must be n * fixed_seqlen */
    p = base;
    p.fixed_seqlen = 2;
    gdn_case_reset(&c);
    clvarlen_status st = clvarlen_gated_delta_rule(ctx, &p, c.A_log, c.dt_bias, c.a, c.b, c.q,
                                                   c.k, c.v, NULL, NULL, NULL, NULL, NULL,
                                                   c.o + GDN_GUARD);
    ck_assert_int_eq(st, CLVARLEN_ERROR_INVALID_ARGUMENT);
    ck_assert(gdn_case_untouched(&c));

    st = clvarlen_gated_delta_rule(NULL, &base, c.A_log, c.dt_bias, c.a, c.b, c.q, c.k, c.v, c.cu,
                                   NULL, NULL, NULL, NULL, c.o + GDN_GUARD);
    ck_assert_int_eq(st, CLVARLEN_ERROR_INVALID_ARGUMENT);
#undef MUT
    /* and the valid call still works afterwards */
    gdn_case_reset(&c);
    gdn_run_and_check(ctx, &c, "valid after errors");
    gdn_case_free(&c);
}

void gdn_t_empty(clvarlen_context *ctx)
{
    static const int32_t zeros[3] = {0, 0, 0};
    gdn_case_cfg cfg = gdn_cfg_default();
    cfg.seed = 71;
    cfg.n = 3;
    cfg.lengths = zeros;
    cfg.use_pool = 1;
    cfg.slots = 3;
    gdn_case c;
    gdn_case_make(&c, &cfg);
    clvarlen_status st = gdn_case_run(ctx, &c);
    ck_assert_msg(st == CLVARLEN_SUCCESS, "%s", clvarlen_last_error(ctx));
    ck_assert_msg(gdn_case_untouched(&c), "all-empty batch wrote something");
    gdn_case_free(&c);

    cfg.n = 0;
    gdn_case_make(&c, &cfg);
    st = gdn_case_run(ctx, &c);
    ck_assert_msg(st == CLVARLEN_SUCCESS, "%s", clvarlen_last_error(ctx));
    ck_assert(gdn_case_untouched(&c));
    /* data pointers may be NULL when there are no tokens */
    st = clvarlen_gated_delta_rule(ctx, &c.p, NULL, NULL, NULL, NULL, NULL, NULL, NULL, c.cu, NULL,
                                   NULL, NULL, NULL, NULL);
    ck_assert_msg(st == CLVARLEN_SUCCESS, "%s", clvarlen_last_error(ctx));
    gdn_case_free(&c);
}
