/* oclgrind-cases: the attention backward (SPEC 1.2) on tiny shapes; see
 * oclgrind-cases.c for the harness. Three sequences (5, 0 and 3 queries over
 * 4, 2 and 6 keys; 4 query and 2 key/value heads, 2 and 1 for the
 * tensor-core forms), o and lse from the CPU fallback's forward, dq, dk and dv
 * of the device compared with the CPU fallback's. BW_MMA and BW_WGMMA run the
 * NVIDIA tensor-core kernels in their emulated forms (BW_WGMMA: the Hopper
 * form, whose dq kernel computes delta).
 */
#include "oclgrind-cases.h"

#include <stdlib.h>
#include <string.h>

enum {
    BW_MMA = 1,    /* CLVARLEN_ATTENTION_KERNEL=mma */
    BW_CAUSAL = 2,
    BW_DROP = 4,   /* dropout 0.25 (portable kernels) */
    BW_QPOS = 8,   /* q_pos */
    BW_CLMEM = 16, /* the cl_mem entry point (device checks on) */
    BW_F32G = 32,  /* f32 gradients */
    BW_WGMMA = 64, /* CLVARLEN_ATTENTION_KERNEL=wgmma (head dims 64, 96, 128) */
};

#define BW_N 3

typedef struct bwd_bufs {
    clvarlen_attention_params p;
    clvarlen_attention_bwd_params g;
    int32_t *cuq, *cuk, qpos[8];
    void *q, *k, *v, *o, *dout, *grad[2][3];
    float *lse;
    size_t n[3], gs;
} bwd_bufs;

static int bwd_setup(oc_run *r, const oc_case *c, bwd_bufs *b)
{
    const int32_t lq[BW_N] = {5, 0, 3}, lk[BW_N] = {4, 2, 6};
    clvarlen_attention_params *p = &b->p;
    clvarlen_attention_params_init(p);
    clvarlen_attention_bwd_params_init(&b->g);
    p->dtype = (clvarlen_dtype)c->a;
    p->n_seqs = BW_N;
    /* The tensor-core kernels' emulated forms are Oclgrind's slowest (a full
     * tile per work-group): half the heads, GQA 2:1 still (the mma case 142 s
     * to 64 s on 2 cores, 2026-11-30; the wgmma one hardly moved). */
    const int tc = (c->c & (BW_MMA | BW_WGMMA)) != 0;
    p->heads_q = tc ? 2 : 4;
    p->heads_kv = tc ? 1 : 2;
    p->head_dim = c->b;
    p->causal = (c->c & BW_CAUSAL) != 0;
    p->dropout_p = c->c & BW_DROP ? 0.25f : 0.0f;
    p->dropout_seed = 7;
    b->g.grad_f32 = (c->c & BW_F32G) != 0;
    b->cuq = oc_cu(lq, BW_N);
    b->cuk = oc_cu(lk, BW_N);
    if (!b->cuq || !b->cuk)
        return oc_fail(r, "out of memory");
    p->total_q = b->cuq[BW_N];
    p->total_k = b->cuk[BW_N];
    for (int s = 0; s < BW_N; s++)
        for (int i = 0; i < lq[s]; i++)
            b->qpos[b->cuq[s] + i] = (2 * i + s) % (lk[s] + 1);
    const size_t d = (size_t)c->b, es = clvarlen_dtype_size(p->dtype);
    b->n[0] = (size_t)p->total_q * (size_t)p->heads_q * d;
    b->n[1] = b->n[2] = (size_t)p->total_k * (size_t)p->heads_kv * d;
    b->gs = b->g.grad_f32 ? 4 : es;
    b->q = oc_random(r, p->dtype, b->n[0]);
    b->k = oc_random(r, p->dtype, b->n[1]);
    b->v = oc_random(r, p->dtype, b->n[2]);
    b->dout = oc_random(r, p->dtype, b->n[0]);
    b->o = malloc(b->n[0] * es);
    b->lse = malloc((size_t)p->total_q * (size_t)p->heads_q * sizeof(float));
    for (int i = 0; i < 3; i++) {
        b->grad[0][i] = oc_alloc2(b->n[i] * b->gs, &b->grad[1][i]);
        if (!b->grad[0][i])
            return oc_fail(r, "out of memory");
    }
    if (!b->q || !b->k || !b->v || !b->dout || !b->o || !b->lse)
        return oc_fail(r, "out of memory");
    const int32_t *qp = c->c & BW_QPOS ? b->qpos : NULL;
    return oc_status(r, "attention_forward (CPU)",
                     clvarlen_attention_forward(r->cpu, p, b->q, b->k, b->v, b->cuq, b->cuk, qp,
                                                b->o, b->lse),
                     CLVARLEN_SUCCESS, CLVARLEN_SUCCESS);
}

static void bwd_free(bwd_bufs *b)
{
    void *all[] = {b->cuq, b->cuk, b->q, b->k, b->v, b->o, b->dout, b->lse};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++)
            free(b->grad[i][j]);
}

static clvarlen_status bwd_clmem(oc_run *r, bwd_bufs *b, const int32_t *qp)
{
    const clvarlen_attention_params *p = &b->p;
    const size_t es = clvarlen_dtype_size(p->dtype), cu = (BW_N + 1) * sizeof(int32_t);
    cl_mem m[12] = {
        oc_buf(r, b->q, b->n[0] * es), oc_buf(r, b->k, b->n[1] * es),
        oc_buf(r, b->v, b->n[2] * es), oc_buf(r, b->o, b->n[0] * es),
        oc_buf(r, b->dout, b->n[0] * es),
        oc_buf(r, b->lse, (size_t)p->total_q * (size_t)p->heads_q * sizeof(float)),
        oc_buf(r, b->cuq, cu), oc_buf(r, b->cuk, cu),
        qp ? oc_buf(r, qp, (size_t)p->total_q * 4) : NULL,
        oc_buf(r, b->grad[0][0], b->n[0] * b->gs), oc_buf(r, b->grad[0][1], b->n[1] * b->gs),
        oc_buf(r, b->grad[0][2], b->n[2] * b->gs),
    };
    clvarlen_status st = clvarlen_cl_attention_backward(
        r->dev, p, &b->g, m[0], 0, m[1], 0, m[2], 0, m[3], 0, m[4], 0, m[5], 0, m[6], 0, m[7], 0,
        m[8], 0, m[9], 0, m[10], 0, m[11], 0, 0, NULL, NULL);
    for (int i = 0; i < 3 && st == CLVARLEN_SUCCESS; i++)
        if (oc_read(r, m[9 + i], b->grad[0][i], b->n[i] * b->gs))
            st = CLVARLEN_ERROR_OPENCL;
    for (int i = 0; i < 12; i++)
        if (m[i])
            clReleaseMemObject(m[i]);
    return st;
}

/* attention_backward: a = dtype, b = head_dim, c = BW_* flags. */
static int case_bwd(oc_run *r, const oc_case *c)
{
    bwd_bufs b;
    memset(&b, 0, sizeof b);
    int rc = 1;
    if (bwd_setup(r, c, &b))
        goto out;
    const int32_t *qp = c->c & BW_QPOS ? b.qpos : NULL;
    if (c->c & (BW_MMA | BW_WGMMA))
        setenv("CLVARLEN_ATTENTION_KERNEL", c->c & BW_WGMMA ? "wgmma" : "mma", 1);
    clvarlen_status st[2];
    if (c->c & BW_CLMEM)
        st[0] = bwd_clmem(r, &b, qp);
    else
        st[0] = clvarlen_attention_backward(r->dev, &b.p, &b.g, b.q, b.k, b.v, b.o, b.dout,
                                            b.lse, b.cuq, b.cuk, qp, b.grad[0][0], b.grad[0][1],
                                            b.grad[0][2]);
    unsetenv("CLVARLEN_ATTENTION_KERNEL");
    st[1] = clvarlen_attention_backward(r->cpu, &b.p, &b.g, b.q, b.k, b.v, b.o, b.dout, b.lse,
                                        b.cuq, b.cuk, qp, b.grad[1][0], b.grad[1][1],
                                        b.grad[1][2]);
    if (oc_status(r, "attention_backward", st[0], st[1], CLVARLEN_SUCCESS))
        goto out;
    /* The tensor-core kernels round P and dS to the operand dtype, as their
     * forward does P: well within the dtype's tolerance at these sizes. */
    const clvarlen_dtype gt = b.g.grad_f32 ? CLVARLEN_DTYPE_F32 : b.p.dtype;
    static const char *const what[3] = {"dq", "dk", "dv"};
    rc = 0;
    for (int i = 0; i < 3 && !rc; i++)
        rc = oc_close(r, what[i], b.grad[0][i], b.grad[1][i], gt, b.n[i]);
out:
    bwd_free(&b);
    return rc;
}

#define F32 CLVARLEN_DTYPE_F32
#define F16 CLVARLEN_DTYPE_F16
#define BF16 CLVARLEN_DTYPE_BF16

const oc_case oc_bwd_cases[] = {
    {"attn-bwd-f32-d16-causal", case_bwd, F32, 16, BW_CAUSAL},
    {"attn-bwd-bf16-d16-drop-qpos-clmem", case_bwd, BF16, 16, BW_DROP | BW_QPOS | BW_CLMEM},
    {"attn-bwd-f16-d32-f32grad", case_bwd, F16, 32, BW_F32G},
    {"attn-bwd-mma-bf16-d16-causal", case_bwd, BF16, 16, BW_MMA | BW_CAUSAL},
    {"attn-bwd-mma-f16-d16-qpos-clmem", case_bwd, F16, 16, BW_MMA | BW_QPOS | BW_CLMEM},
    {"attn-bwd-wgmma-bf16-d64-causal", case_bwd, BF16, 64, BW_WGMMA | BW_CAUSAL},
    {NULL, NULL, 0, 0, 0},
};
