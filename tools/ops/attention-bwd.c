/* clvarlen-test: attention backward checks and benchmarks (SPEC 1.2).
 *
 * Checks: the forward's random cases (attention.c), a third of them with
 * dropout; o and lse from the CPU fallback's forward feed the backward on the
 * device and on the CPU fallback, whose dq, dk and dv are compared (dq and dk
 * with their norms floored at a tenth of dv's RMS, check_one says why).
 * Benchmarks: the forward's shapes and inputs (plus do from the same
 * generator, tensor 4); the backward alone and forward + backward, FLOPs
 * counted as FlashAttention counts them (backward 2.5x the forward).
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <clvarlen/clvarlen.h>
#if CLVARLEN_HAVE_OPENCL
#include <clvarlen/clvarlen-cl.h>
#endif

#include "attention-case.h"
#include "ct-util.h"
#include "ops.h"

/* ================================================================ checks */

typedef struct grads {
    void *dq, *dk, *dv;
} grads;

static int alloc_grads(grads *g, size_t nq, size_t nk, size_t nv, size_t es)
{
    g->dq = calloc(nq * es + 16, 1);
    g->dk = calloc(nk * es + 16, 1);
    g->dv = calloc(nv * es + 16, 1);
    return g->dq && g->dk && g->dv ? 0 : -1;
}

static void free_grads(grads *g)
{
    free(g->dq);
    free(g->dk);
    free(g->dv);
}

/* One case: 0 when it ran (row updated), -1 when it stopped (note says why). */
static int check_one(clvarlen_context *dev, clvarlen_context *cpu, fwd_case *c, uint64_t *rs,
                     int drop, ct_row *row)
{
    clvarlen_attention_params *p = &c->p;
    if (drop) {
        p->dropout_p = 0.15f;
        p->dropout_seed = ct_rng_next(rs);
        p->dropout_offset = 3;
    }
    const int32_t dv = p->head_dim_v ? p->head_dim_v : p->head_dim;
    const size_t es = clvarlen_dtype_size(p->dtype);
    const size_t nq = (size_t)p->total_q * (size_t)p->heads_q * (size_t)p->head_dim;
    const size_t nk = (size_t)p->total_k * (size_t)p->heads_kv * (size_t)p->head_dim;
    const size_t nv = (size_t)p->total_k * (size_t)p->heads_kv * (size_t)dv;
    void *dout = malloc(c->o_elems * es + 16);
    grads gd = {0}, gc = {0};
    int rc = -1;
    if (!dout || alloc_grads(&gd, nq, nk, nv, es) || alloc_grads(&gc, nq, nk, nv, es)) {
        snprintf(row->note, sizeof row->note, "out of memory");
        goto out;
    }
    ct_fill(rs, dout, p->dtype, c->o_elems, 1.0);
    clvarlen_status st = clvarlen_attention_forward(cpu, p, c->q, c->k, c->v, c->cu_q, c->cu_k,
                                                    c->q_pos, c->o_cpu, c->lse_cpu);
    clvarlen_status sd = st, sc = st;
    if (st == CLVARLEN_SUCCESS) {
        sd = clvarlen_attention_backward(dev, p, NULL, c->q, c->k, c->v, c->o_cpu, dout,
                                         c->lse_cpu, c->cu_q, c->cu_k, c->q_pos, gd.dq, gd.dk,
                                         gd.dv);
        sc = clvarlen_attention_backward(cpu, p, NULL, c->q, c->k, c->v, c->o_cpu, dout,
                                         c->lse_cpu, c->cu_q, c->cu_k, c->q_pos, gc.dq, gc.dk,
                                         gc.dv);
    }
    row->cases++;
    if (sd != CLVARLEN_SUCCESS || sc != CLVARLEN_SUCCESS) {
        clvarlen_context *bad = st != CLVARLEN_SUCCESS || sc != CLVARLEN_SUCCESS ? cpu : dev;
        snprintf(row->note, sizeof row->note, "%s: %s",
                 clvarlen_status_name(sd != CLVARLEN_SUCCESS ? sd : sc),
                 clvarlen_last_error(bad));
        goto out;
    }
    /* dq and dk are sums of dS = P (dP - delta), which cancels to rounding
     * noise when a row sees a single key: exactly 0 in real arithmetic, but
     * with dropout (or an o rounded apart from dP) the f32 results of two
     * correct implementations are noise around 1e-8 of opposite signs, and
     * their relative distance is meaningless. Their norms are therefore
     * floored at a tenth of dv's RMS (dv = P^T do does not cancel; it sets the
     * scale of the gradients), so such noise counts against the gradients'
     * size, not against itself. */
    double dv2 = 0.0;
    for (size_t i = 0; i < nv; i++) {
        const double x = tu_get(gc.dv, p->dtype, i);
        if (isfinite(x))
            dv2 += x * x;
    }
    const double floor_rms = nv ? 0.1 * sqrt(dv2 / (double)nv) : 0.0;
    const double e[3] = {tu_rel_err_floor(gd.dq, gc.dq, p->dtype, nq, floor_rms),
                         tu_rel_err_floor(gd.dk, gc.dk, p->dtype, nk, floor_rms),
                         tu_rel_err(gd.dv, gc.dv, p->dtype, nv)};
    static const char *const what[3] = {"dq", "dk", "dv"};
    for (int i = 0; i < 3; i++) {
        if (e[i] > row->max_err || isnan(e[i]))
            row->max_err = e[i];
        if (!(e[i] <= row->tolerance)) {
            row->failed++;
            if (!row->note[0])
                snprintf(row->note, sizeof row->note,
                         "%s err %.3g: %lld seqs %lld q, H %d/%d D %d causal %d drop %g",
                         what[i], e[i], (long long)p->n_seqs, (long long)p->total_q,
                         (int)p->heads_q, (int)p->heads_kv, (int)p->head_dim, p->causal,
                         (double)p->dropout_p);
            break;
        }
    }
    rc = 0;
out:
    free(dout);
    free_grads(&gd);
    free_grads(&gc);
    return rc;
}

static int check_backward(clvarlen_context *dev, clvarlen_context *cpu, const ct_options *opt,
                          ct_row *row, clvarlen_dtype dtype, const char *op)
{
    const uint64_t base = ct_seed_for(opt, op);
    const int n_cases = opt->quick ? 4 : 12;
    row->tolerance = tu_tolerance(dtype);
    for (int i = 0; i < n_cases; i++) {
        uint64_t rs = ct_case_seed(base, i);
        if (!ct_check_case_runs(opt, i))
            continue;
        fwd_case c;
        if (ct_attn_make_case(&rs, dtype, i, opt, &c) != 0) {
            ct_attn_free_case(&c);
            snprintf(row->note, sizeof row->note, "out of memory");
            return -1;
        }
        int rc = check_one(dev, cpu, &c, &rs, i % 3 == 2, row);
        ct_attn_free_case(&c);
        if (rc)
            return rc;
    }
    return 0;
}

int check_bwd_f32(clvarlen_context *dev, clvarlen_context *cpu, const ct_options *opt,
                  ct_row *row)
{
    return check_backward(dev, cpu, opt, row, CLVARLEN_DTYPE_F32, "attention-bwd-f32");
}

int check_bwd_bf16(clvarlen_context *dev, clvarlen_context *cpu, const ct_options *opt,
                   ct_row *row)
{
    return check_backward(dev, cpu, opt, row, CLVARLEN_DTYPE_BF16, "attention-bwd-bf16");
}

/* ================================================================ benchmarks */

typedef struct bwd_bench {
    clvarlen_context *ctx;
    clvarlen_attention_params p;
    int fwd; /* 1: forward then backward */
    void *q, *k, *v, *o, *dout, *dq, *dk, *dv;
    int32_t *cu;
    float *lse;
#if CLVARLEN_HAVE_OPENCL
    cl_mem m[10]; /* q k v o do lse cu dq dk dv */
#endif
} bwd_bench;

static int run_host(void *arg, void *event_out)
{
    bwd_bench *b = arg;
    (void)event_out;
    if (b->fwd && clvarlen_attention_forward(b->ctx, &b->p, b->q, b->k, b->v, b->cu, b->cu, NULL,
                                             b->o, b->lse) != CLVARLEN_SUCCESS)
        return 1;
    return clvarlen_attention_backward(b->ctx, &b->p, NULL, b->q, b->k, b->v, b->o, b->dout,
                                       b->lse, b->cu, b->cu, NULL, b->dq, b->dk,
                                       b->dv) != CLVARLEN_SUCCESS;
}

#if CLVARLEN_HAVE_OPENCL
static int run_cl(void *arg, void *event_out)
{
    bwd_bench *b = arg;
    cl_mem *m = b->m;
    if (b->fwd && clvarlen_cl_attention_forward(b->ctx, &b->p, m[0], 0, m[1], 0, m[2], 0, m[6], 0,
                                                m[6], 0, NULL, 0, m[3], 0, m[5], 0, 0, NULL,
                                                NULL) != CLVARLEN_SUCCESS)
        return 1;
    return clvarlen_cl_attention_backward(b->ctx, &b->p, NULL, m[0], 0, m[1], 0, m[2], 0, m[3], 0,
                                          m[4], 0, m[5], 0, m[6], 0, m[6], 0, NULL, 0, m[7], 0,
                                          m[8], 0, m[9], 0, 0, NULL,
                                          (cl_event *)event_out) != CLVARLEN_SUCCESS;
}

static int upload(bwd_bench *b, const size_t bytes[10])
{
    cl_context clc;
    cl_device_id dev;
    cl_command_queue q;
    if (clvarlen_context_get_cl(b->ctx, &clc, &dev, &q) != CLVARLEN_SUCCESS)
        return -1;
    void *host[10] = {b->q, b->k, b->v, NULL, b->dout, NULL, b->cu, NULL, NULL, NULL};
    for (int i = 0; i < 10; i++) {
        cl_int e;
        b->m[i] = clCreateBuffer(clc, CL_MEM_READ_WRITE | (host[i] ? CL_MEM_COPY_HOST_PTR : 0),
                                 bytes[i], host[i], &e);
        if (e != CL_SUCCESS)
            return -1;
    }
    /* o and lse of one forward, for the backward-only timing */
    return clvarlen_cl_attention_forward(b->ctx, &b->p, b->m[0], 0, b->m[1], 0, b->m[2], 0,
                                         b->m[6], 0, b->m[6], 0, NULL, 0, b->m[3], 0, b->m[5], 0,
                                         0, NULL, NULL) == CLVARLEN_SUCCESS
               ? 0
               : -1;
}
#endif

#if CLVARLEN_HAVE_OPENCL
/* CLVARLEN_BENCH_DUMP=<dir>: <case>.cu, <case>.dq/.dk/.dv (the gradients of
 * the last run, bf16) and a line of <dir>/bwd-index.txt, for
 * tools/bench-attention-bwd-torch.py. */
static void dump_grads(const char *name, const bwd_bench *b, const size_t bytes[3],
                       double t_bwd, double t_fb, double fwd_flops)
{
    const char *dir = getenv("CLVARLEN_BENCH_DUMP");
    if (!dir || !*dir)
        return;
    char path[1024];
    static const char *const ext[4] = {"cu", "dq", "dk", "dv"};
    const void *data[4] = {b->cu, b->dq, b->dk, b->dv};
    const size_t n[4] = {((size_t)b->p.n_seqs + 1) * 4, bytes[0], bytes[1], bytes[2]};
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/%s.%s", dir, name, ext[i]);
        FILE *f = ct_dump_open(path, "wb");
        if (f) {
            fwrite(data[i], 1, n[i], f);
            fclose(f);
        }
    }
    snprintf(path, sizeof path, "%s/bwd-index.txt", dir);
    FILE *f = ct_dump_open(path, "a");
    if (f) {
        fprintf(f, "%s %d %d %d %d %d %d 1 %.3f %.3f %.2f\n", name, (int)b->p.n_seqs,
                (int)b->p.total_q, (int)b->p.heads_q, (int)b->p.heads_kv, (int)b->p.head_dim,
                b->p.causal, t_bwd * 1e6, t_fb * 1e6, 3.5 * fwd_flops / t_fb * 1e-12);
        fclose(f);
    }
}
#endif

static double time_one(bwd_bench *b, const ct_options *opt, int on_cl)
{
#if CLVARLEN_HAVE_OPENCL
    if (on_cl)
        return ct_time_median(b->ctx, run_cl, b, ct_bench_iters(opt));
#endif
    (void)on_cl;
    return ct_time_median(b->ctx, run_host, b, opt->quick ? 2 : 3);
}

static int bench_one(clvarlen_context *ctx, const ct_options *opt, const bench_shape *s,
                     double fma_rate)
{
    const uint64_t seed = 1;
    bwd_bench b;
    memset(&b, 0, sizeof b);
    b.ctx = ctx;
    int32_t *lens = malloc(sizeof(int32_t) * (size_t)s->n_seqs);
    b.cu = malloc(sizeof(int32_t) * ((size_t)s->n_seqs + 1));
    const size_t es = clvarlen_dtype_size(s->dtype);
    const size_t qn = (size_t)s->total * (size_t)s->hq * (size_t)s->d;
    const size_t kn = (size_t)s->total * (size_t)s->hk * (size_t)s->d;
    const size_t ln = (size_t)s->total * (size_t)s->hq;
    void **bufs[8] = {&b.q, &b.k, &b.v, &b.o, &b.dout, &b.dq, &b.dk, &b.dv};
    const size_t sizes[8] = {qn, kn, kn, qn, qn, qn, kn, kn};
    int rc = -1, ok = lens && b.cu, on_cl = ct_context_is_cl(ctx);
    for (int i = 0; i < 8 && ok; i++)
        ok = (*bufs[i] = malloc(sizes[i] * es)) != NULL;
    b.lse = ok ? malloc(ln * 4) : NULL;
    if (!b.lse ||
        clvarlen_gen_seq_lens(ctx, seed, 1, s->n_seqs, s->total, lens) != CLVARLEN_SUCCESS)
        goto out;
    double pairs = 0.0;
    int32_t maxlen = 0;
    b.cu[0] = 0;
    for (int32_t i = 0; i < s->n_seqs; i++) {
        b.cu[i + 1] = b.cu[i] + lens[i];
        pairs += (double)lens[i] * (double)lens[i];
        maxlen = lens[i] > maxlen ? lens[i] : maxlen;
    }
    ct_attn_bench_fill(b.q, s->dtype, qn, 1, seed);
    ct_attn_bench_fill(b.k, s->dtype, kn, 2, seed);
    ct_attn_bench_fill(b.v, s->dtype, kn, 3, seed);
    ct_attn_bench_fill(b.dout, s->dtype, qn, 4, seed);
    clvarlen_attention_params_init(&b.p);
    b.p.dtype = s->dtype;
    b.p.n_seqs = s->n_seqs;
    b.p.total_q = b.p.total_k = s->total;
    b.p.heads_q = s->hq;
    b.p.heads_kv = s->hk;
    b.p.head_dim = s->d;
    b.p.causal = s->causal;
    b.p.max_seqlen_q = b.p.max_seqlen_k = maxlen;
#if CLVARLEN_HAVE_OPENCL
    if (on_cl) {
        const size_t bytes[10] = {qn * es, kn * es, kn * es, qn * es, qn * es, ln * 4,
                                  ((size_t)s->n_seqs + 1) * 4, qn * es, kn * es, kn * es};
        if (upload(&b, bytes) != 0) {
            fprintf(stderr, "attention-bwd bench: buffers of %s failed\n", s->name);
            goto out;
        }
    } else
#endif
        if (clvarlen_attention_forward(ctx, &b.p, b.q, b.k, b.v, b.cu, b.cu, NULL, b.o, b.lse) !=
            CLVARLEN_SUCCESS)
        goto out;
    b.fwd = 0;
    const double tb = time_one(&b, opt, on_cl);
    b.fwd = 1;
    const double tfb = time_one(&b, opt, on_cl);
    if (tb <= 0.0 || tfb <= 0.0) {
        fprintf(stderr, "attention-bwd bench: %s failed: %s\n", s->name,
                clvarlen_last_error(ctx));
        goto out;
    }
    /* FlashAttention's count: forward 4 sum(L^2) D Hq (halved when causal), backward 2.5x. */
    const double fwd_flops = 4.0 * pairs * s->d * s->hq * (s->causal ? 0.5 : 1.0);
    const double bytes = (double)(4 * qn + 2 * kn) * (double)es + (double)(qn + 2 * kn) * es;
    char shape[160], name[96];
    /* The CPU fallback computes every dtype in f32: its ratio is to the f32 rate. */
    const char *ceiling =
        (s->dtype == CLVARLEN_DTYPE_F32 || !on_cl) && fma_rate > 0.0 ? "f32 FMA rate" : NULL;
    snprintf(shape, sizeof shape, "%s %d seqs %d tok H %d/%d D %d%s", clvarlen_dtype_name(s->dtype),
             (int)s->n_seqs, (int)s->total, (int)s->hq, (int)s->hk, (int)s->d,
             s->causal ? " causal" : "");
    snprintf(name, sizeof name, "%s-bwd", s->name);
    ct_bench_report(opt, name, shape, tb, bytes, 2.5 * fwd_flops,
                    ceiling ? 2.5 * fwd_flops / tb / fma_rate : 0.0, ceiling);
    snprintf(name, sizeof name, "%s-fwd+bwd", s->name);
    ct_bench_report(opt, name, shape, tfb, bytes, 3.5 * fwd_flops,
                    ceiling ? 3.5 * fwd_flops / tfb / fma_rate : 0.0, ceiling);
#if CLVARLEN_HAVE_OPENCL
    if (on_cl && s->dtype == CLVARLEN_DTYPE_BF16 && getenv("CLVARLEN_BENCH_DUMP")) {
        cl_context clc;
        cl_device_id did;
        cl_command_queue cq;
        const size_t gb[3] = {qn * es, kn * es, kn * es};
        void *dst[3] = {b.dq, b.dk, b.dv};
        int read_ok = clvarlen_context_get_cl(ctx, &clc, &did, &cq) == CLVARLEN_SUCCESS;
        for (int i = 0; i < 3 && read_ok; i++)
            read_ok = clEnqueueReadBuffer(cq, b.m[7 + i], CL_TRUE, 0, gb[i], dst[i], 0, NULL,
                                          NULL) == CL_SUCCESS;
        if (read_ok)
            dump_grads(s->name, &b, gb, tb, tfb, fwd_flops);
    }
#endif
    rc = 0;
out:
#if CLVARLEN_HAVE_OPENCL
    for (int i = 0; i < 10; i++)
        if (b.m[i])
            clReleaseMemObject(b.m[i]);
#endif
    for (int i = 0; i < 8; i++)
        free(*bufs[i]);
    free(b.lse);
    free(b.cu);
    free(lens);
    return rc;
}

int bench_attention_bwd(clvarlen_context *dev, const ct_options *opt, double copy_gbps)
{
    (void)copy_gbps;
    static const bench_shape gpu[] = {
        {"attn-16x16k", CLVARLEN_DTYPE_BF16, 16, 16384, 32, 8, 128, 0},
        {"attn-16x16k-causal", CLVARLEN_DTYPE_BF16, 16, 16384, 32, 8, 128, 1},
        {"attn-64x64k", CLVARLEN_DTYPE_BF16, 64, 65536, 32, 8, 128, 0},
        {"attn-64x64k-causal", CLVARLEN_DTYPE_BF16, 64, 65536, 32, 8, 128, 1},
        {"attn-128x8k", CLVARLEN_DTYPE_BF16, 128, 8192, 32, 8, 128, 0},
        {"attn-128x8k-causal", CLVARLEN_DTYPE_BF16, 128, 8192, 32, 8, 128, 1},
        {"attn-f32-16x16k", CLVARLEN_DTYPE_F32, 16, 16384, 32, 8, 128, 0},
        {"attn-d64-16x16k", CLVARLEN_DTYPE_BF16, 16, 16384, 32, 8, 64, 0},
        {"attn-d96-16x16k", CLVARLEN_DTYPE_BF16, 16, 16384, 32, 8, 96, 0},
        {"attn-d96-16x16k-causal", CLVARLEN_DTYPE_BF16, 16, 16384, 32, 8, 96, 1},
    };
    static const bench_shape small[] = {
        {"attn-8x2k", CLVARLEN_DTYPE_BF16, 8, 2048, 8, 2, 128, 0},
        {"attn-8x2k-causal", CLVARLEN_DTYPE_BF16, 8, 2048, 8, 2, 128, 1},
        {"attn-f32-8x2k", CLVARLEN_DTYPE_F32, 8, 2048, 8, 2, 128, 0},
    };
    const int gpu_like = ct_gpu_like(dev);
    double fma_rate = 0.0;
#if CLVARLEN_HAVE_OPENCL
    if (ct_context_is_cl(dev))
        fma_rate = ct_measure_fma(dev, opt);
#endif
    if (!ct_context_is_cl(dev)) {
        const char *level = "";
        fma_rate = ct_measure_cpu_fma(dev, &level);
    }
    const bench_shape *list = gpu_like ? gpu : small;
    size_t n = gpu_like ? sizeof gpu / sizeof gpu[0] : sizeof small / sizeof small[0];
    if (opt->quick && !gpu_like)
        n = 1;
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        if (!ct_case_wanted(opt, list[i].name))
            continue;
        if (bench_one(dev, opt, &list[i], fma_rate) != 0)
            rc = -1;
    }
    return rc;
}
