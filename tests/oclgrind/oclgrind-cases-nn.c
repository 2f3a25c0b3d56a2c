/* oclgrind-cases: attention (SPEC 1) and the gated delta rule (SPEC 3) on
 * tiny shapes; see oclgrind-cases.c for the harness.
 *
 * The device's tuning comes from lib/runtime/device-db.c by vendor: Oclgrind
 * reports a CPU device, so these cases run the portable kernels with the CPU
 * entry's tiles. Where the library reads an override from the environment,
 * a case sets it for its own calls: CLVARLEN_ATTENTION_KERNEL=mma runs
 * attention-nv.cl's kernel in its emulated form (no inline PTX), and
 * CLVARLEN_GDN_TUNING the GPU entries' gated delta tiles (several work-items
 * per key column, 256-wide chunked groups) and the per-sequence AUTO split.
 */
#include "oclgrind-cases.h"

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- attention */

enum {
    AT_CAUSAL = 1,
    AT_GQA = 2,      /* heads_q 2, heads_kv 1 (else 2 and 2) */
    AT_WINDOW = 4,   /* window (2, 1) */
    AT_SOFTCAP = 8,  /* softcap 5 */
    AT_QPOS = 16,    /* explicit query positions */
    AT_DV16 = 32,    /* head_dim_v 16 */
    AT_MMA = 64,     /* attention-nv.cl, emulated */
    AT_LONGK = 128,  /* key lengths {0, 3, 7} (else as the queries) */
    AT_CLMEM = 256,  /* the cl_mem entry point with device checks */
    AT_WGMMA = 512,  /* attention-nv.cl's wgmma form, emulated (its check kernel first) */
};

typedef struct attn_bufs {
    clvarlen_attention_params p;
    int32_t lq[3], lk[3], *cuq, *cuk, qpos[8];
    void *q, *k, *v, *o[2];
    float *lse[2];
    size_t o_elems, lse_elems;
} attn_bufs;

static int attn_setup(oc_run *r, const oc_case *c, attn_bufs *b)
{
    static const int32_t lq[] = {0, 1, 5}, lk_long[] = {0, 3, 7};
    const int f = c->c;
    clvarlen_attention_params *p = &b->p;
    clvarlen_attention_params_init(p);
    p->dtype = (clvarlen_dtype)c->a;
    p->n_seqs = 3;
    memcpy(b->lq, lq, sizeof lq);
    memcpy(b->lk, f & AT_LONGK ? lk_long : lq, sizeof lq);
    b->cuq = oc_cu(b->lq, 3);
    b->cuk = oc_cu(b->lk, 3);
    if (!b->cuq || !b->cuk)
        return oc_fail(r, "out of memory");
    p->total_q = b->cuq[3];
    p->total_k = b->cuk[3];
    p->heads_q = 2;
    p->heads_kv = f & AT_GQA ? 1 : 2;
    p->head_dim = c->b;
    p->head_dim_v = f & AT_DV16 ? 16 : c->b;
    p->causal = (f & AT_CAUSAL) != 0;
    if (f & AT_WINDOW) {
        p->window_left = 2;
        p->window_right = 1;
    }
    if (f & AT_SOFTCAP)
        p->softcap = 5.0f;
    for (int s = 0, t = 0; s < 3; s++)
        for (int i = 0; i < b->lq[s]; i++, t++)
            b->qpos[t] = (i * 2 + s) % (b->lk[s] ? b->lk[s] : 1);
    const size_t dq = (size_t)p->head_dim, dv = (size_t)p->head_dim_v;
    b->q = oc_random(r, p->dtype, (size_t)p->total_q * 2 * dq);
    b->k = oc_random(r, p->dtype, (size_t)p->total_k * (size_t)p->heads_kv * dq);
    b->v = oc_random(r, p->dtype, (size_t)p->total_k * (size_t)p->heads_kv * dv);
    b->o_elems = (size_t)p->total_q * 2 * dv;
    b->lse_elems = (size_t)p->total_q * 2;
    b->o[0] = oc_alloc2(b->o_elems * clvarlen_dtype_size(p->dtype), &b->o[1]);
    void *l1;
    b->lse[0] = oc_alloc2(b->lse_elems * sizeof(float), &l1);
    b->lse[1] = l1;
    if (!b->q || !b->k || !b->v || !b->o[0] || !b->lse[0])
        return oc_fail(r, "out of memory");
    return 0;
}

static void attn_free(attn_bufs *b)
{
    free(b->cuq);
    free(b->cuk);
    free(b->q);
    free(b->k);
    free(b->v);
    for (int i = 0; i < 2; i++) {
        free(b->o[i]);
        free(b->lse[i]);
    }
}

/* The forward through the cl_mem entry point (device checks on: check_cu_seqlens). */
static clvarlen_status attn_clmem(oc_run *r, attn_bufs *b, const int32_t *qpos)
{
    const clvarlen_attention_params *p = &b->p;
    const size_t es = clvarlen_dtype_size(p->dtype);
    const size_t dq = (size_t)p->head_dim, dv = (size_t)p->head_dim_v;
    cl_mem m[8] = {
        oc_buf(r, b->q, (size_t)p->total_q * 2 * dq * es),
        oc_buf(r, b->k, (size_t)p->total_k * (size_t)p->heads_kv * dq * es),
        oc_buf(r, b->v, (size_t)p->total_k * (size_t)p->heads_kv * dv * es),
        oc_buf(r, b->cuq, 4 * sizeof(int32_t)),
        oc_buf(r, b->cuk, 4 * sizeof(int32_t)),
        oc_buf(r, qpos, sizeof b->qpos),
        oc_buf(r, b->o[0], b->o_elems * es),
        oc_buf(r, b->lse[0], b->lse_elems * sizeof(float)),
    };
    clvarlen_status st = clvarlen_cl_attention_forward(r->dev, p, m[0], 0, m[1], 0, m[2], 0, m[3],
                                                       0, m[4], 0, m[5], 0, m[6], 0, m[7], 0, 0,
                                                       NULL, NULL);
    if (st == CLVARLEN_SUCCESS && (oc_read(r, m[6], b->o[0], b->o_elems * es) ||
                                   oc_read(r, m[7], b->lse[0], b->lse_elems * sizeof(float))))
        st = CLVARLEN_ERROR_OPENCL;
    for (int i = 0; i < 8; i++)
        if (m[i])
            clReleaseMemObject(m[i]);
    return st;
}

/* attention_forward: a = dtype, b = head_dim, c = AT_* flags. */
static int case_attn(oc_run *r, const oc_case *c)
{
    attn_bufs b;
    memset(&b, 0, sizeof b);
    int rc = 1;
    if (attn_setup(r, c, &b))
        goto out;
    const int32_t *qpos = c->c & AT_QPOS ? b.qpos : NULL;
    if (c->c & (AT_MMA | AT_WGMMA))
        setenv("CLVARLEN_ATTENTION_KERNEL", c->c & AT_WGMMA ? "wgmma" : "mma", 1);
    clvarlen_status st[2];
    if (c->c & AT_CLMEM)
        st[0] = attn_clmem(r, &b, qpos);
    else
        st[0] = clvarlen_attention_forward(r->dev, &b.p, b.q, b.k, b.v, b.cuq, b.cuk, qpos,
                                           b.o[0], b.lse[0]);
    unsetenv("CLVARLEN_ATTENTION_KERNEL");
    st[1] = clvarlen_attention_forward(r->cpu, &b.p, b.q, b.k, b.v, b.cuq, b.cuk, qpos, b.o[1],
                                       b.lse[1]);
    if (oc_status(r, "attention_forward", st[0], st[1], CLVARLEN_SUCCESS))
        goto out;
    rc = oc_close(r, "o", b.o[0], b.o[1], b.p.dtype, b.o_elems) ||
         oc_close(r, "lse", b.lse[0], b.lse[1], CLVARLEN_DTYPE_F32, b.lse_elems);
out:
    attn_free(&b);
    return rc;
}

/* attention_merge of b parts (a = dtype; c = 1: merge2 of two parts), 3
 * tokens, 2 heads, head_dim_v 16; some parts' lse are -inf. */
static int case_merge(oc_run *r, const oc_case *c)
{
    const clvarlen_dtype dt = (clvarlen_dtype)c->a;
    const int64_t parts = c->c ? 2 : c->b, tokens = 3;
    const int32_t heads = 2, dv = 16;
    const size_t per = (size_t)(tokens * heads * dv), lper = (size_t)(tokens * heads);
    void *op = oc_random(r, dt, per * (size_t)parts), *o[2];
    float *lp = malloc(lper * (size_t)parts * sizeof *lp), *lse[2];
    o[0] = oc_alloc2(per * clvarlen_dtype_size(dt), &o[1]);
    void *l1;
    lse[0] = oc_alloc2(lper * sizeof(float), &l1);
    lse[1] = l1;
    int rc = 1;
    if (!op || !lp || !o[0] || !lse[0]) {
        oc_fail(r, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < lper * (size_t)parts; i++)
        lp[i] = i % 5 == 1 ? -__builtin_inff() : (float)tu_uniform(&r->rng, -3.0, 3.0);
    const size_t pb = per * clvarlen_dtype_size(dt);
    clvarlen_context *ctx[2] = {r->dev, r->cpu};
    clvarlen_status st[2];
    for (int i = 0; i < 2; i++)
        st[i] = c->c ? clvarlen_attention_merge2(ctx[i], dt, tokens, heads, dv, op, lp,
                                                 (char *)op + pb, lp + lper, o[i], lse[i])
                     : clvarlen_attention_merge(ctx[i], dt, parts, tokens, heads, dv, op, lp,
                                                o[i], lse[i]);
    if (oc_status(r, "attention_merge", st[0], st[1], CLVARLEN_SUCCESS))
        goto out;
    rc = oc_close(r, "o", o[0], o[1], dt, per) ||
         oc_close(r, "lse", lse[0], lse[1], CLVARLEN_DTYPE_F32, lper);
out:
    free(op);
    free(lp);
    for (int i = 0; i < 2; i++) {
        free(o[i]);
        free(lse[i]);
    }
    return rc;
}

/* ---------------------------------------------------------------- gated delta rule */

enum {
    GD_CHUNKED = 1,   /* CLVARLEN_GDN_CHUNKED */
    GD_KV = 2,        /* [K, V] state layout */
    GD_INTER = 4,     /* intermediate states (target verify) */
    GD_L2NORM = 8,    /* use_qk_l2norm */
    GD_GPU_TILES = 16,/* the GPU entries' tiles (CLVARLEN_GDN_TUNING), chunked as the fused
                         portable kernel (gdn_chunked); without it, chunked cases run the
                         CLBlast path, the CPU devices' default */
    GD_AUTO = 32,     /* AUTO with a chunk threshold of 4 tokens: both kernels in one call */
    GD_FIXED = 64,    /* no cu_seqlens: 3 sequences of 2 tokens */
    GD_CLMEM = 128,   /* the cl_mem entry point with device checks (gdn_check) */
    GD_ST_BF16 = 256, /* bf16 states, f16 dt_bias */
    GD_LONG = 512,    /* lengths {0, 1, 66}: two chunks */
    GD_MMA = 1024,    /* the tensor-core chunked path, emulated (CLVARLEN_GDN_TUNING mma=1):
                         two stages, gdn_chunk_prep and gdn_chunk_scan */
    GD_FUSED = 2048,  /* ... as the one fused kernel, gdn_chunked_mma (scan=0) */
};

typedef struct gdn_bufs {
    clvarlen_gdn_params p;
    int32_t len[3], *cu, sidx[3], cidx[3];
    float A_log[4];
    void *dt_bias, *a, *b, *q, *k, *v, *pool[2], *inter[2], *o[2];
    size_t pool_bytes, inter_bytes, o_elems;
} gdn_bufs;

static int gdn_setup(oc_run *r, const oc_case *c, gdn_bufs *g)
{
    const int f = c->c;
    clvarlen_gdn_params *p = &g->p;
    clvarlen_gdn_params_init(p);
    p->dtype = (clvarlen_dtype)c->a;
    p->state_dtype = f & GD_ST_BF16 ? CLVARLEN_DTYPE_BF16 : CLVARLEN_DTYPE_F32;
    p->dt_bias_dtype = f & GD_ST_BF16 ? CLVARLEN_DTYPE_F16 : CLVARLEN_DTYPE_F32;
    p->n_seqs = 3;
    static const int32_t l0[] = {0, 1, 5}, l1[] = {0, 1, 66}, l2[] = {1, 5, 2};
    memcpy(g->len, f & GD_LONG ? l1 : f & GD_AUTO ? l2 : l0, sizeof l0);
    if (f & GD_FIXED) {
        p->fixed_seqlen = 2;
        p->total_tokens = 6;
    } else {
        if (!(g->cu = oc_cu(g->len, 3)))
            return oc_fail(r, "out of memory");
        p->total_tokens = g->cu[3];
    }
    p->heads_qk = 1;
    p->heads_v = 2;
    p->key_dim = c->b;
    p->value_dim = 16;
    p->state_layout = f & GD_KV ? CLVARLEN_STATE_KV : CLVARLEN_STATE_VK;
    p->state_slots = 4;
    p->use_qk_l2norm = (f & GD_L2NORM) != 0;
    p->algorithm = f & GD_CHUNKED ? CLVARLEN_GDN_CHUNKED : f & GD_AUTO ? CLVARLEN_GDN_AUTO
                                                                       : CLVARLEN_GDN_RECURRENT;
    if (f & GD_INTER) {
        p->cache_slots = 3;
        p->cache_steps = 5;
    }
    static const int32_t sidx[] = {2, -1, 0}, cidx[] = {1, 2, -1};
    memcpy(g->sidx, sidx, sizeof sidx);
    memcpy(g->cidx, cidx, sizeof cidx);
    const size_t T = (size_t)p->total_tokens, K = (size_t)c->b, V = 16, HV = 2;
    for (int h = 0; h < 4; h++)
        g->A_log[h] = (float)tu_uniform(&r->rng, -1.0, 0.5);
    g->dt_bias = oc_random(r, p->dt_bias_dtype, HV);
    g->a = oc_random(r, p->dtype, T * HV);
    g->b = oc_random(r, p->dtype, T * HV);
    g->q = oc_random(r, p->dtype, T * K);
    g->k = oc_random(r, p->dtype, T * K);
    g->v = oc_random(r, p->dtype, T * HV * V);
    const size_t se = clvarlen_dtype_size(p->state_dtype);
    g->pool_bytes = 4 * HV * K * V * se;
    g->inter_bytes = f & GD_INTER ? 3 * 5 * HV * K * V * se : 0;
    g->o_elems = T * HV * V;
    void *init = oc_random(r, p->state_dtype, 4 * HV * K * V);
    g->pool[0] = oc_alloc2(g->pool_bytes, &g->pool[1]);
    g->inter[0] = oc_alloc2(g->inter_bytes, &g->inter[1]);
    g->o[0] = oc_alloc2(g->o_elems * clvarlen_dtype_size(p->dtype), &g->o[1]);
    if (!init || !g->dt_bias || !g->a || !g->b || !g->q || !g->k || !g->v || !g->pool[0] ||
        !g->inter[0] || !g->o[0]) {
        free(init);
        return oc_fail(r, "out of memory");
    }
    memcpy(g->pool[0], init, g->pool_bytes);
    memcpy(g->pool[1], init, g->pool_bytes);
    free(init);
    return 0;
}

static void gdn_free(gdn_bufs *g)
{
    void *v[] = {g->cu, g->dt_bias, g->a, g->b, g->q, g->k, g->v, g->pool[0], g->pool[1],
                 g->inter[0], g->inter[1], g->o[0], g->o[1]};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        free(v[i]);
}

static clvarlen_status gdn_host(clvarlen_context *ctx, gdn_bufs *g, int i)
{
    return clvarlen_gated_delta_rule(ctx, &g->p, g->A_log, g->dt_bias, g->a, g->b, g->q, g->k,
                                     g->v, g->cu, g->pool[i], g->sidx,
                                     g->inter_bytes ? g->inter[i] : NULL,
                                     g->inter_bytes ? g->cidx : NULL, g->o[i]);
}

/* The device run through the cl_mem entry point (device checks: gdn_check,
 * check_cu_seqlens); results read back into g->*[0]. */
static clvarlen_status gdn_clmem(oc_run *r, gdn_bufs *g)
{
    const clvarlen_gdn_params *p = &g->p;
    const size_t T = (size_t)p->total_tokens, K = (size_t)p->key_dim, es = clvarlen_dtype_size(p->dtype);
    cl_mem m[13] = {
        oc_buf(r, g->A_log, 2 * sizeof(float)),
        oc_buf(r, g->dt_bias, 2 * clvarlen_dtype_size(p->dt_bias_dtype)),
        oc_buf(r, g->a, T * 2 * es),
        oc_buf(r, g->b, T * 2 * es),
        oc_buf(r, g->q, T * K * es),
        oc_buf(r, g->k, T * K * es),
        oc_buf(r, g->v, T * 2 * 16 * es),
        oc_buf(r, g->cu, 4 * sizeof(int32_t)),
        oc_buf(r, g->pool[0], g->pool_bytes),
        oc_buf(r, g->sidx, sizeof g->sidx),
        g->inter_bytes ? oc_buf(r, g->inter[0], g->inter_bytes) : NULL,
        g->inter_bytes ? oc_buf(r, g->cidx, sizeof g->cidx) : NULL,
        oc_buf(r, g->o[0], g->o_elems * es),
    };
    clvarlen_status st = clvarlen_cl_gated_delta_rule(
        r->dev, p, m[0], 0, m[1], 0, m[2], 0, m[3], 0, m[4], 0, m[5], 0, m[6], 0, m[7], 0, m[8], 0,
        m[9], 0, m[10], 0, m[11], 0, m[12], 0, 0, NULL, NULL);
    if (st == CLVARLEN_SUCCESS &&
        (oc_read(r, m[8], g->pool[0], g->pool_bytes) ||
         oc_read(r, m[12], g->o[0], g->o_elems * es) ||
         (g->inter_bytes && oc_read(r, m[10], g->inter[0], g->inter_bytes))))
        st = CLVARLEN_ERROR_OPENCL;
    for (int i = 0; i < 13; i++)
        if (m[i])
            clReleaseMemObject(m[i]);
    return st;
}

/* gated_delta_rule: a = dtype, b = key_dim, c = GD_* flags. */
static int case_gdn(oc_run *r, const oc_case *c)
{
    gdn_bufs g;
    memset(&g, 0, sizeof g);
    int rc = 1;
    if (gdn_setup(r, c, &g))
        goto out;
    if (c->c & GD_GPU_TILES)
        setenv("CLVARLEN_GDN_TUNING", "wg=128,vt=16,tk=16,cwg=256,cvt=16,blas=0", 1);
    else if (c->c & GD_AUTO)
        setenv("CLVARLEN_GDN_TUNING", "min=4", 1);
    else if (c->c & GD_MMA)
        setenv("CLVARLEN_GDN_TUNING", c->c & GD_FUSED ? "mma=1,scan=0" : "mma=1", 1);
    clvarlen_status st[2];
    st[0] = c->c & GD_CLMEM ? gdn_clmem(r, &g) : gdn_host(r->dev, &g, 0);
    unsetenv("CLVARLEN_GDN_TUNING");
    st[1] = gdn_host(r->cpu, &g, 1);
    if (oc_status(r, "gated_delta_rule", st[0], st[1], CLVARLEN_SUCCESS))
        goto out;
    const size_t se = clvarlen_dtype_size(g.p.state_dtype);
    rc = oc_close(r, "o", g.o[0], g.o[1], g.p.dtype, g.o_elems) ||
         oc_close(r, "state pool", g.pool[0], g.pool[1], g.p.state_dtype, g.pool_bytes / se) ||
         (g.inter_bytes && oc_close(r, "intermediate states", g.inter[0], g.inter[1],
                                    g.p.state_dtype, g.inter_bytes / se));
out:
    gdn_free(&g);
    return rc;
}

/* ---------------------------------------------------------------- table */

#define F32 CLVARLEN_DTYPE_F32
#define F16 CLVARLEN_DTYPE_F16
#define BF16 CLVARLEN_DTYPE_BF16

const oc_case oc_nn_cases[] = {
    {"attention-f32-d16-gqa", case_attn, F32, 16, AT_GQA | AT_LONGK},
    {"attention-f32-d16-causal-qpos", case_attn, F32, 16, AT_CAUSAL | AT_QPOS | AT_LONGK},
    {"attention-f16-d32-causal", case_attn, F16, 32, AT_CAUSAL},
    {"attention-bf16-d64-window-softcap", case_attn, BF16, 64,
     AT_CAUSAL | AT_WINDOW | AT_SOFTCAP | AT_GQA | AT_LONGK},
    {"attention-f16-d32-dv16", case_attn, F16, 32, AT_DV16 | AT_LONGK},
    {"attention-f32-d16-clmem", case_attn, F32, 16, AT_CLMEM | AT_CAUSAL | AT_LONGK},
    {"attention-mma-f16-d16", case_attn, F16, 16, AT_MMA | AT_GQA | AT_LONGK},
    {"attention-mma-bf16-d32-causal", case_attn, BF16, 32, AT_MMA | AT_CAUSAL | AT_WINDOW},
    {"attention-wgmma-bf16-d64-gqa-causal", case_attn, BF16, 64,
     AT_WGMMA | AT_GQA | AT_CAUSAL | AT_LONGK},
    {"attention-merge-f32", case_merge, F32, 3, 0},
    {"attention-merge-bf16", case_merge, BF16, 2, 0},
    {"attention-merge2-f16", case_merge, F16, 2, 1},
    {"gdn-recurrent-f32-k16", case_gdn, F32, 16, GD_L2NORM},
    {"gdn-recurrent-bf16-kv-inter", case_gdn, BF16, 16, GD_KV | GD_INTER | GD_ST_BF16},
    {"gdn-recurrent-f16-gpu-tiles", case_gdn, F16, 32, GD_GPU_TILES | GD_INTER},
    {"gdn-recurrent-f32-fixed", case_gdn, F32, 16, GD_FIXED},
    {"gdn-recurrent-f32-clmem", case_gdn, F32, 16, GD_CLMEM | GD_INTER},
    {"gdn-chunked-f32-k16", case_gdn, F32, 16, GD_CHUNKED | GD_L2NORM},
    {"gdn-chunked-bf16-kv-long", case_gdn, BF16, 16, GD_CHUNKED | GD_KV | GD_LONG | GD_ST_BF16},
    {"gdn-chunked-f16-gpu-tiles", case_gdn, F16, 32, GD_CHUNKED | GD_GPU_TILES},
    {"gdn-auto-f32-mixed", case_gdn, F32, 16, GD_AUTO | GD_CLMEM},
    {"gdn-chunked-mma-bf16", case_gdn, BF16, 16, GD_CHUNKED | GD_MMA},
    {"gdn-chunked-mma-bf16-kv-long-clmem", case_gdn, BF16, 16,
     GD_CHUNKED | GD_MMA | GD_KV | GD_LONG | GD_CLMEM},
    {"gdn-chunked-mma-fused-f16", case_gdn, F16, 16, GD_CHUNKED | GD_MMA | GD_FUSED},
    {NULL, NULL, 0, 0, 0},
};
