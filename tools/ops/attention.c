/* clvarlen-test: attention checks and benchmarks.
 *
 * Checks run random varlen batches (GQA/MQA, causal, windows, softcap, q_pos,
 * strides, Lq != Lk, empty and length-1 sequences) on the device and on the
 * CPU fallback and compare o and lse; on OpenCL devices every other case goes
 * through the cl_mem entry point. Which kernel a device runs (the portable
 * one, or the tensor-core one on NVIDIA) is the library's choice, so the
 * check covers what users get.
 *
 * Benchmarks use batches from clvarlen_gen_seq_lens and inputs from a
 * documented generator that tools/bench-attention-torch.py reproduces
 * bit for bit:
 *   element i (row-major, contiguous) of tensor t (q = 1, k = 2, v = 3):
 *   x = (uint32)(4 i + t) ^ (uint32)(seed * 0x9E3779B9), then
 *   x ^= x >> 16; x *= 0x7feb352d; x ^= x >> 15; x *= 0x846ca68b; x ^= x >> 16
 *   (32-bit wrapping), value = 2 (x >> 8) 2^-24 - 1 in f32, rounded to the
 *   dtype (nearest even).
 * With CLVARLEN_BENCH_DUMP=<dir>, every bf16 case on an OpenCL device also
 * writes <dir>/<case>.cu (int32 cu_seqlens), <dir>/<case>.o (bf16 output) and
 * a line of <dir>/index.txt, for the side-by-side with PyTorch.
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <clvarlen/clvarlen.h>
#if CLVARLEN_HAVE_OPENCL
#include <clvarlen/clvarlen-cl.h>
#endif

#include "ct-util.h"
#include "ops.h"
#include "attention-case.h"

/* ================================================================ checks */


void ct_attn_free_case(fwd_case *c)
{
    free(c->cu_q);
    free(c->cu_k);
    free(c->q_pos);
    free(c->q);
    free(c->k);
    free(c->v);
    free(c->o_dev);
    free(c->o_cpu);
    free(c->lse_dev);
    free(c->lse_cpu);
    memset(c, 0, sizeof *c);
}

int ct_attn_make_case(uint64_t *rs, clvarlen_dtype dtype, int case_i, const ct_options *opt,
                     fwd_case *c)
{
    static const int dims[] = {64, 128, 96, 256, 128, 32, 80, 64};
    memset(c, 0, sizeof *c);
    clvarlen_attention_params *p = &c->p;
    clvarlen_attention_params_init(p);
    p->dtype = dtype;
    p->head_dim = dims[case_i % (opt->quick ? 5 : 8)];
    if (case_i % 7 == 6)
        p->head_dim_v = p->head_dim == 64 ? 32 : 64;
    int dv = p->head_dim_v ? p->head_dim_v : p->head_dim;
    static const int groups[] = {1, 4, 8, 2};
    p->heads_kv = (int32_t)ct_rng_int(rs, 1, 2);
    p->heads_q = p->heads_kv * groups[case_i % 4];
    p->causal = ct_rng_uniform(rs) < 0.6;
    if (ct_rng_uniform(rs) < 0.25) {
        p->window_left = (int32_t)ct_rng_int(rs, -1, 200);
        p->window_right = p->causal ? -1 : (int32_t)ct_rng_int(rs, -1, 50);
    }
    if (ct_rng_uniform(rs) < 0.15)
        p->softcap = 5.0f;
    int use_qpos = ct_rng_uniform(rs) < 0.15, lq_ne_lk = ct_rng_uniform(rs) < 0.3;
    int strided = ct_rng_uniform(rs) < 0.25;

    int64_t max_n = opt->quick ? 6 : 12, max_len = opt->quick ? 200 : 1100;
    int64_t max_total = opt->quick ? 500 : 3000;
    int32_t lk[64], lq[64];
    int64_t n = ct_random_lengths(rs, max_n, max_len, max_total, lk);
    for (int64_t s = 0; s < n; s++)
        lq[s] = lq_ne_lk ? (int32_t)ct_rng_int(rs, 0, lk[s] + 5) : lk[s];
    c->cu_q = malloc(sizeof(int32_t) * (size_t)(n + 1));
    c->cu_k = malloc(sizeof(int32_t) * (size_t)(n + 1));
    if (!c->cu_q || !c->cu_k)
        return -1;
    c->cu_q[0] = c->cu_k[0] = 0;
    for (int64_t s = 0; s < n; s++) {
        c->cu_q[s + 1] = c->cu_q[s] + lq[s];
        c->cu_k[s + 1] = c->cu_k[s] + lk[s];
    }
    p->n_seqs = n;
    p->total_q = c->cu_q[n];
    p->total_k = c->cu_k[n];
    /* strides that keep 16-byte rows half of the time (tensor-core eligible) */
    int pad = strided ? (ct_rng_uniform(rs) < 0.5 ? 8 : 3) : 0;
    p->q_stride = strided ? (int64_t)p->heads_q * p->head_dim + pad : 0;
    p->k_stride = strided ? (int64_t)p->heads_kv * p->head_dim + 2 * pad : 0;
    p->v_stride = strided ? (int64_t)p->heads_kv * dv + pad : 0;
    int64_t qs = p->q_stride ? p->q_stride : (int64_t)p->heads_q * p->head_dim;
    int64_t ks = p->k_stride ? p->k_stride : (int64_t)p->heads_kv * p->head_dim;
    int64_t vs = p->v_stride ? p->v_stride : (int64_t)p->heads_kv * dv;
    size_t es = clvarlen_dtype_size(dtype);
    c->q_elems = (size_t)(p->total_q * qs);
    c->k_elems = (size_t)(p->total_k * ks);
    c->v_elems = (size_t)(p->total_k * vs);
    c->o_elems = (size_t)p->total_q * (size_t)p->heads_q * (size_t)dv;
    c->lse_n = (size_t)p->total_q * (size_t)p->heads_q;
    c->q = malloc(c->q_elems * es + 16);
    c->k = malloc(c->k_elems * es + 16);
    c->v = malloc(c->v_elems * es + 16);
    c->o_dev = calloc(c->o_elems * es + 16, 1);
    c->o_cpu = calloc(c->o_elems * es + 16, 1);
    c->lse_dev = calloc(c->lse_n + 4, sizeof(float));
    c->lse_cpu = calloc(c->lse_n + 4, sizeof(float));
    if (!c->q || !c->k || !c->v || !c->o_dev || !c->o_cpu || !c->lse_dev || !c->lse_cpu)
        return -1;
    ct_fill(rs, c->q, dtype, c->q_elems, 1.0);
    ct_fill(rs, c->k, dtype, c->k_elems, 1.0);
    ct_fill(rs, c->v, dtype, c->v_elems, 1.0);
    if (use_qpos) {
        c->q_pos = malloc(sizeof(int32_t) * (size_t)(p->total_q + 1));
        if (!c->q_pos)
            return -1;
        for (int64_t s = 0; s < n; s++)
            for (int32_t t = c->cu_q[s]; t < c->cu_q[s + 1]; t++)
                c->q_pos[t] = (int32_t)ct_rng_int(rs, 0, lk[s]);
    }
    return 0;
}

#if CLVARLEN_HAVE_OPENCL
/* The device run through the cl_mem entry point. */
static clvarlen_status run_cl_mem(clvarlen_context *dev, fwd_case *c)
{
    cl_context clc;
    cl_device_id did;
    cl_command_queue q;
    clvarlen_status st = clvarlen_context_get_cl(dev, &clc, &did, &q);
    if (st != CLVARLEN_SUCCESS)
        return st;
    size_t es = clvarlen_dtype_size(c->p.dtype);
    size_t cub = (size_t)(c->p.n_seqs + 1) * 4;
    const void *src[6] = {c->q, c->k, c->v, c->cu_q, c->cu_k, c->q_pos};
    size_t bytes[8] = {c->q_elems * es, c->k_elems * es, c->v_elems * es, cub, cub,
                       (size_t)c->p.total_q * 4, c->o_elems * es, c->lse_n * 4};
    cl_mem m[8] = {0};
    cl_int err = CL_SUCCESS;
    for (int i = 0; i < 8 && err == CL_SUCCESS; i++) {
        if (i == 5 && !c->q_pos)
            continue;
        m[i] = clCreateBuffer(clc, CL_MEM_READ_WRITE, bytes[i] + 16, NULL, &err);
        if (err == CL_SUCCESS && i < 6 && bytes[i] > 0)
            err = clEnqueueWriteBuffer(q, m[i], CL_TRUE, 0, bytes[i], src[i], 0, NULL, NULL);
    }
    cl_event ev = NULL;
    if (err == CL_SUCCESS)
        st = clvarlen_cl_attention_forward(dev, &c->p, m[0], 0, m[1], 0, m[2], 0, m[3], 0, m[4],
                                           0, m[5], 0, m[6], 0, m[7], 0, 0, NULL, &ev);
    else
        st = CLVARLEN_ERROR_OPENCL;
    if (st == CLVARLEN_SUCCESS) {
        if (clEnqueueReadBuffer(q, m[6], CL_TRUE, 0, bytes[6], c->o_dev, 1, &ev, NULL) !=
                CL_SUCCESS ||
            clEnqueueReadBuffer(q, m[7], CL_TRUE, 0, bytes[7], c->lse_dev, 0, NULL, NULL) !=
                CL_SUCCESS)
            st = CLVARLEN_ERROR_OPENCL;
    }
    if (ev)
        clReleaseEvent(ev);
    for (int i = 0; i < 8; i++)
        if (m[i])
            clReleaseMemObject(m[i]);
    return st;
}
#endif

static void note_failure(ct_row *row, const char *what, const fwd_case *c, double err)
{
    if (row->note[0])
        return;
    snprintf(row->note, sizeof row->note,
             "%s err %.3g: %lld seqs %lld q, H %d/%d D %d causal %d win %d,%d cap %g", what, err,
             (long long)c->p.n_seqs,
             (long long)c->p.total_q, (int)c->p.heads_q, (int)c->p.heads_kv,
             (int)c->p.head_dim, c->p.causal, (int)c->p.window_left, (int)c->p.window_right,
             (double)c->p.softcap);
}

static int check_forward(clvarlen_context *dev, clvarlen_context *cpu, const ct_options *opt,
                         ct_row *row, clvarlen_dtype dtype, const char *op)
{
    const uint64_t base = ct_seed_for(opt, op);
    int n_cases = opt->quick ? 6 : 16;
    double tol = tu_tolerance(dtype);
    row->tolerance = tol;
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
        clvarlen_status sd;
#if CLVARLEN_HAVE_OPENCL
        if (ct_context_is_cl(dev) && i % 2 == 1)
            sd = run_cl_mem(dev, &c);
        else
#endif
            sd = clvarlen_attention_forward(dev, &c.p, c.q, c.k, c.v, c.cu_q, c.cu_k, c.q_pos,
                                            c.o_dev, c.lse_dev);
        clvarlen_status sc = clvarlen_attention_forward(cpu, &c.p, c.q, c.k, c.v, c.cu_q,
                                                        c.cu_k, c.q_pos, c.o_cpu, c.lse_cpu);
        row->cases++;
        if (sd != CLVARLEN_SUCCESS || sc != CLVARLEN_SUCCESS) {
            snprintf(row->note, sizeof row->note, "%s: %s",
                     clvarlen_status_name(sd != CLVARLEN_SUCCESS ? sd : sc),
                     clvarlen_last_error(sd != CLVARLEN_SUCCESS ? dev : cpu));
            ct_attn_free_case(&c);
            return -1;
        }
        double e = tu_rel_err(c.o_dev, c.o_cpu, dtype, c.o_elems);
        double el = tu_rel_err(c.lse_dev, c.lse_cpu, CLVARLEN_DTYPE_F32, c.lse_n);
        if (e > row->max_err)
            row->max_err = e;
        if (!(e <= tol)) {
            row->failed++;
            note_failure(row, "o", &c, e);
        } else if (!(el <= 1e-4)) {
            row->failed++;
            note_failure(row, "lse", &c, el);
        }
        ct_attn_free_case(&c);
    }
    return 0;
}

int check_fwd_f32(clvarlen_context *dev, clvarlen_context *cpu, const ct_options *opt,
                  ct_row *row)
{
    return check_forward(dev, cpu, opt, row, CLVARLEN_DTYPE_F32, "attention-f32");
}

int check_fwd_f16(clvarlen_context *dev, clvarlen_context *cpu, const ct_options *opt,
                  ct_row *row)
{
    return check_forward(dev, cpu, opt, row, CLVARLEN_DTYPE_F16, "attention-f16");
}

int check_fwd_bf16(clvarlen_context *dev, clvarlen_context *cpu, const ct_options *opt,
                   ct_row *row)
{
    return check_forward(dev, cpu, opt, row, CLVARLEN_DTYPE_BF16, "attention-bf16");
}

/* N-way and two-way merges of random partials with empty (-inf) parts. */
int check_merge(clvarlen_context *dev, clvarlen_context *cpu, const ct_options *opt,
                ct_row *row)
{
    const uint64_t base = ct_seed_for(opt, "attention-merge");
    static const clvarlen_dtype dts[] = {CLVARLEN_DTYPE_F32, CLVARLEN_DTYPE_BF16,
                                         CLVARLEN_DTYPE_F16};
    int n_cases = opt->quick ? 6 : 12;
    row->tolerance = 1e-5;
    for (int i = 0; i < n_cases; i++) {
        uint64_t rs = ct_case_seed(base, i);
        if (!ct_check_case_runs(opt, i))
            continue;
        clvarlen_dtype dt = dts[i % 3];
        int64_t parts = ct_rng_int(&rs, 1, 6), tokens = ct_rng_int(&rs, 0, opt->quick ? 300 : 3000);
        int32_t heads = (int32_t)ct_rng_int(&rs, 1, 8), dv = (int32_t)(16 * ct_rng_int(&rs, 1, 8));
        size_t es = clvarlen_dtype_size(dt), on = (size_t)(tokens * heads * dv);
        size_t ln = (size_t)(tokens * heads);
        void *op = malloc(on * es * (size_t)parts + 16), *od = malloc(on * es + 16);
        void *oc = malloc(on * es + 16);
        float *lp = malloc(ln * 4 * (size_t)parts + 16), *ld = malloc(ln * 4 + 16);
        float *lc = malloc(ln * 4 + 16);
        int rc = 0;
        if (!op || !od || !oc || !lp || !ld || !lc) {
            snprintf(row->note, sizeof row->note, "out of memory");
            rc = -1;
            goto next;
        }
        ct_fill(&rs, op, dt, on * (size_t)parts, 1.0);
        for (size_t j = 0; j < ln * (size_t)parts; j++)
            lp[j] = ct_rng_uniform(&rs) < 0.1 ? -INFINITY : (float)(ct_rng_uniform(&rs) * 20 - 10);
        clvarlen_status sd, sc;
        if (i % 2 == 0) {
            sd = clvarlen_attention_merge(dev, dt, parts, tokens, heads, dv, op, lp, od, ld);
            sc = clvarlen_attention_merge(cpu, dt, parts, tokens, heads, dv, op, lp, oc, lc);
        } else {
            const char *b = (const char *)op + (parts > 1 ? on * es : 0);
            const float *lb = lp + (parts > 1 ? ln : 0);
            sd = clvarlen_attention_merge2(dev, dt, tokens, heads, dv, op, lp, b, lb, od, ld);
            sc = clvarlen_attention_merge2(cpu, dt, tokens, heads, dv, op, lp, b, lb, oc, lc);
        }
        row->cases++;
        if (sd != CLVARLEN_SUCCESS || sc != CLVARLEN_SUCCESS) {
            snprintf(row->note, sizeof row->note, "%s: %s",
                     clvarlen_status_name(sd != CLVARLEN_SUCCESS ? sd : sc),
                     clvarlen_last_error(sd != CLVARLEN_SUCCESS ? dev : cpu));
            rc = -1;
            goto next;
        }
        /* o is rounded once to the dtype on both sides: compare relative to its tolerance */
        double e = tu_rel_err(od, oc, dt, on) / tu_tolerance(dt) * 1e-5;
        double el = tu_rel_err(ld, lc, CLVARLEN_DTYPE_F32, ln);
        double w = e > el ? e : el;
        if (w > row->max_err)
            row->max_err = w;
        if (!(w <= 1e-5)) {
            row->failed++;
            if (!row->note[0])
                snprintf(row->note, sizeof row->note, "%s %lld parts %lld tokens: o %.3g lse %.3g",
                         clvarlen_dtype_name(dt), (long long)parts, (long long)tokens, e, el);
        }
    next:
        free(op);
        free(od);
        free(oc);
        free(lp);
        free(ld);
        free(lc);
        if (rc)
            return rc;
    }
    if (!row->note[0])
        snprintf(row->note, sizeof row->note, "f16/bf16 o errors scaled to the f32 tolerance");
    return 0;
}

/* ================================================================ benchmarks */

static uint32_t bench_hash(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

void ct_attn_bench_fill(void *p, clvarlen_dtype dt, size_t n, uint32_t tensor, uint64_t seed)
{
    uint32_t s = (uint32_t)seed * 0x9E3779B9u;
    for (size_t i = 0; i < n; i++) {
        uint32_t h = bench_hash(((uint32_t)i * 4u + tensor) ^ s);
        float u = (float)(h >> 8) * 0x1.0p-24f;
        tu_set(p, dt, i, (double)(2.0f * u - 1.0f));
    }
}

typedef struct bench_run {
    clvarlen_context *ctx;
    clvarlen_attention_params p;
    void *q, *k, *v;
    int32_t *cu;
    void *o;
    float *lse;
#if CLVARLEN_HAVE_OPENCL
    cl_mem mq, mk, mv, mcu, mo, mlse;
#endif
} bench_run;

static int run_host(void *arg, void *event_out)
{
    bench_run *r = arg;
    (void)event_out;
    return clvarlen_attention_forward(r->ctx, &r->p, r->q, r->k, r->v, r->cu, r->cu, NULL, r->o,
                                      r->lse) != CLVARLEN_SUCCESS;
}

#if CLVARLEN_HAVE_OPENCL
static int run_cl(void *arg, void *event_out)
{
    bench_run *r = arg;
    return clvarlen_cl_attention_forward(r->ctx, &r->p, r->mq, 0, r->mk, 0, r->mv, 0, r->mcu, 0,
                                         r->mcu, 0, NULL, 0, r->mo, 0, r->mlse, 0, 0, NULL,
                                         (cl_event *)event_out) != CLVARLEN_SUCCESS;
}

/* The device's f32 FMA rate: 8 independent chains per work-item. */
static const char fma_source[] =
    "__kernel void ct_fma(__global float *out, float a, float b)\n"
    "{\n"
    "    float x0 = get_global_id(0) * 1e-9f, x1 = x0 + 1e-3f, x2 = x0 + 2e-3f, x3 = x0 + 3e-3f;\n"
    "    float x4 = x0 + 4e-3f, x5 = x0 + 5e-3f, x6 = x0 + 6e-3f, x7 = x0 + 7e-3f;\n"
    "    for (int i = 0; i < 1024; i++) {\n"
    "        x0 = fma(x0, a, b); x1 = fma(x1, a, b); x2 = fma(x2, a, b); x3 = fma(x3, a, b);\n"
    "        x4 = fma(x4, a, b); x5 = fma(x5, a, b); x6 = fma(x6, a, b); x7 = fma(x7, a, b);\n"
    "    }\n"
    "    out[get_global_id(0)] = x0 + x1 + x2 + x3 + x4 + x5 + x6 + x7;\n"
    "}\n";

typedef struct fma_run {
    cl_command_queue q;
    cl_kernel k;
    size_t global, local;
} fma_run;

static int run_fma(void *arg, void *event_out)
{
    fma_run *f = arg;
    return clEnqueueNDRangeKernel(f->q, f->k, 1, NULL, &f->global, &f->local, 0, NULL,
                                  (cl_event *)event_out) != CL_SUCCESS;
}

double ct_measure_fma(clvarlen_context *ctx, const ct_options *opt)
{
    cl_context clc;
    cl_device_id dev;
    cl_command_queue q;
    if (clvarlen_context_get_cl(ctx, &clc, &dev, &q) != CLVARLEN_SUCCESS)
        return 0.0;
    cl_uint cus = 1;
    clGetDeviceInfo(dev, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cus, &cus, NULL);
    const char *src = fma_source;
    cl_int e = CL_SUCCESS;
    cl_program prog = clCreateProgramWithSource(clc, 1, &src, NULL, &e);
    if (e == CL_SUCCESS)
        e = clBuildProgram(prog, 1, &dev, "", NULL, NULL);
    fma_run f = {q, NULL, (size_t)cus * 8192, 256};
    cl_mem out = NULL;
    double rate = 0.0;
    if (e == CL_SUCCESS)
        f.k = clCreateKernel(prog, "ct_fma", &e);
    if (e == CL_SUCCESS)
        out = clCreateBuffer(clc, CL_MEM_WRITE_ONLY, f.global * 4, NULL, &e);
    float a = 0.999f, b = 1e-4f;
    if (e == CL_SUCCESS)
        e = clSetKernelArg(f.k, 0, sizeof out, &out);
    if (e == CL_SUCCESS)
        e = clSetKernelArg(f.k, 1, sizeof a, &a);
    if (e == CL_SUCCESS)
        e = clSetKernelArg(f.k, 2, sizeof b, &b);
    if (e == CL_SUCCESS) {
        double t = ct_time_median_launch(ctx, run_fma, &f, ct_bench_iters(opt));
        if (t > 0.0)
            rate = (double)f.global * 8.0 * 1024.0 * 2.0 / t;
    }
    if (out)
        clReleaseMemObject(out);
    if (f.k)
        clReleaseKernel(f.k);
    if (prog)
        clReleaseProgram(prog);
    return rate;
}

static int upload_run(bench_run *r, size_t qb, size_t kb, size_t ob, size_t lb)
{
    cl_context clc;
    cl_device_id dev;
    cl_command_queue q;
    if (clvarlen_context_get_cl(r->ctx, &clc, &dev, &q) != CLVARLEN_SUCCESS)
        return -1;
    cl_int e1, e2, e3, e4, e5, e6;
    size_t cub = (size_t)(r->p.n_seqs + 1) * 4;
    r->mq = clCreateBuffer(clc, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, qb, r->q, &e1);
    r->mk = clCreateBuffer(clc, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, kb, r->k, &e2);
    r->mv = clCreateBuffer(clc, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, kb, r->v, &e3);
    r->mcu = clCreateBuffer(clc, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, cub, r->cu, &e4);
    r->mo = clCreateBuffer(clc, CL_MEM_READ_WRITE, ob, NULL, &e5);
    r->mlse = clCreateBuffer(clc, CL_MEM_READ_WRITE, lb, NULL, &e6);
    return (e1 | e2 | e3 | e4 | e5 | e6) == CL_SUCCESS ? 0 : -1;
}

static void release_run(bench_run *r)
{
    cl_mem *ms[6] = {&r->mq, &r->mk, &r->mv, &r->mcu, &r->mo, &r->mlse};
    for (int i = 0; i < 6; i++) {
        if (*ms[i])
            clReleaseMemObject(*ms[i]);
        *ms[i] = NULL;
    }
}
#endif

/* fopen for CLVARLEN_BENCH_DUMP; a file that cannot be written is reported
 * (a missing directory would otherwise leave the dump silently empty). */
FILE *ct_dump_open(const char *path, const char *mode)
{
    FILE *f = fopen(path, mode);
    if (!f)
        fprintf(stderr, "clvarlen-test: CLVARLEN_BENCH_DUMP: cannot write %s: %s\n", path,
                strerror(errno));
    return f;
}

static void dump_case(const bench_shape *s, const bench_run *r, const int32_t *cu, size_t ob,
                      uint64_t seed, double seconds, double tflops)
{
    const char *dir = getenv("CLVARLEN_BENCH_DUMP");
    if (!dir || !*dir)
        return;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.cu", dir, s->name);
    FILE *f = ct_dump_open(path, "wb");
    if (f) {
        fwrite(cu, 4, (size_t)s->n_seqs + 1, f);
        fclose(f);
    }
    snprintf(path, sizeof path, "%s/%s.o", dir, s->name);
    f = ct_dump_open(path, "wb");
    if (f) {
        fwrite(r->o, 1, ob, f);
        fclose(f);
    }
    snprintf(path, sizeof path, "%s/index.txt", dir);
    f = ct_dump_open(path, "a");
    if (f) {
        fprintf(f, "%s %d %d %d %d %d %d %llu %.3f %.2f\n", s->name, (int)s->n_seqs,
                (int)s->total, (int)s->hq, (int)s->hk, (int)s->d, s->causal,
                (unsigned long long)seed, seconds * 1e6, tflops);
        fclose(f);
    }
}

static int bench_one(clvarlen_context *ctx, const ct_options *opt, const bench_shape *s,
                     double fma_rate)
{
    const uint64_t seed = 1;
    int32_t *lens = malloc(sizeof(int32_t) * (size_t)s->n_seqs);
    int32_t *cu = malloc(sizeof(int32_t) * ((size_t)s->n_seqs + 1));
    if (!lens || !cu) {
        free(lens);
        free(cu);
        return -1;
    }
    clvarlen_status st = clvarlen_gen_seq_lens(ctx, seed, 1, s->n_seqs, s->total, lens);
    if (st != CLVARLEN_SUCCESS) {
        fprintf(stderr, "attention bench: gen_seq_lens: %s\n", clvarlen_last_error(ctx));
        free(lens);
        free(cu);
        return -1;
    }
    double pairs = 0.0;
    int32_t maxlen = 0;
    cu[0] = 0;
    for (int32_t i = 0; i < s->n_seqs; i++) {
        cu[i + 1] = cu[i] + lens[i];
        pairs += (double)lens[i] * (double)lens[i];
        maxlen = lens[i] > maxlen ? lens[i] : maxlen;
    }
    size_t es = clvarlen_dtype_size(s->dtype);
    size_t qn = (size_t)s->total * (size_t)s->hq * (size_t)s->d;
    size_t kn = (size_t)s->total * (size_t)s->hk * (size_t)s->d;
    size_t ln = (size_t)s->total * (size_t)s->hq;
    bench_run r;
    memset(&r, 0, sizeof r);
    r.ctx = ctx;
    void *q = malloc(qn * es), *k = malloc(kn * es), *v = malloc(kn * es), *o = malloc(qn * es);
    float *lse = malloc(ln * 4);
    int rc = -1, on_cl = ct_context_is_cl(ctx);
    if (!q || !k || !v || !o || !lse)
        goto out;
    ct_attn_bench_fill(q, s->dtype, qn, 1, seed);
    ct_attn_bench_fill(k, s->dtype, kn, 2, seed);
    ct_attn_bench_fill(v, s->dtype, kn, 3, seed);
    clvarlen_attention_params_init(&r.p);
    r.p.dtype = s->dtype;
    r.p.n_seqs = s->n_seqs;
    r.p.total_q = r.p.total_k = s->total;
    r.p.heads_q = s->hq;
    r.p.heads_kv = s->hk;
    r.p.head_dim = s->d;
    r.p.causal = s->causal;
    r.p.max_seqlen_q = r.p.max_seqlen_k = maxlen;
    r.q = q;
    r.k = k;
    r.v = v;
    r.cu = cu;
    r.o = o;
    r.lse = lse;
    double t;
#if CLVARLEN_HAVE_OPENCL
    if (on_cl) {
        if (upload_run(&r, qn * es, kn * es, qn * es, ln * 4) != 0) {
            fprintf(stderr, "attention bench: buffers of %s failed\n", s->name);
            goto out;
        }
        t = ct_time_median(ctx, run_cl, &r, ct_bench_iters(opt));
        if (t > 0.0) {
            cl_context clc;
            cl_device_id dev;
            cl_command_queue cq;
            clvarlen_context_get_cl(ctx, &clc, &dev, &cq);
            if (clEnqueueReadBuffer(cq, r.mo, CL_TRUE, 0, qn * es, o, 0, NULL, NULL) != CL_SUCCESS)
                t = -1.0;
        }
    } else
#endif
        t = ct_time_median(ctx, run_host, &r, opt->quick ? 2 : 3);
    if (t <= 0.0) {
        fprintf(stderr, "attention bench: %s failed: %s\n", s->name, clvarlen_last_error(ctx));
        goto out;
    }
    /* FLOPs as FlashAttention counts them: 4 sum(Lq Lk) D Hq, halved when causal. */
    double flops = 4.0 * pairs * s->d * s->hq * (s->causal ? 0.5 : 1.0);
    double bytes = (double)(2 * qn + 2 * kn) * (double)es + (double)ln * 4.0;
    char shape[160];
    snprintf(shape, sizeof shape, "%s %d seqs %d tok H %d/%d D %d%s %.0f tok/s", 
             clvarlen_dtype_name(s->dtype), (int)s->n_seqs, (int)s->total, (int)s->hq,
             (int)s->hk, (int)s->d, s->causal ? " causal" : "", (double)s->total / t);
    double ratio = 0.0;
    const char *ceiling = NULL;
    /* The CPU fallback computes every dtype in f32: its ratio is to the f32 rate. */
    if ((s->dtype == CLVARLEN_DTYPE_F32 || !on_cl) && fma_rate > 0.0) {
        ratio = flops / t / fma_rate;
        ceiling = "f32 FMA rate";
    }
    ct_bench_report(opt, s->name, shape, t, bytes, flops, ratio, ceiling);
    if (on_cl && s->dtype == CLVARLEN_DTYPE_BF16)
        dump_case(s, &r, cu, qn * es, seed, t, flops / t * 1e-12);
    rc = 0;
out:
#if CLVARLEN_HAVE_OPENCL
    if (on_cl)
        release_run(&r);
#endif
    free(q);
    free(k);
    free(v);
    free(o);
    free(lse);
    free(lens);
    free(cu);
    return rc;
}

int bench_attention(clvarlen_context *dev, const ct_options *opt, double copy_gbps)
{
    (void)copy_gbps;
    /* The shapes (bf16, D 128, Hq 32, Hk 8) on GPUs; small ones on CPUs. */
    static const bench_shape gpu[] = {
        {"attn-16x16k", CLVARLEN_DTYPE_BF16, 16, 16384, 32, 8, 128, 0},
        {"attn-16x16k-causal", CLVARLEN_DTYPE_BF16, 16, 16384, 32, 8, 128, 1},
        {"attn-64x64k", CLVARLEN_DTYPE_BF16, 64, 65536, 32, 8, 128, 0},
        {"attn-64x64k-causal", CLVARLEN_DTYPE_BF16, 64, 65536, 32, 8, 128, 1},
        {"attn-128x8k", CLVARLEN_DTYPE_BF16, 128, 8192, 32, 8, 128, 0},
        {"attn-128x8k-causal", CLVARLEN_DTYPE_BF16, 128, 8192, 32, 8, 128, 1},
        {"attn-f32-16x16k", CLVARLEN_DTYPE_F32, 16, 16384, 32, 8, 128, 0},
        {"attn-f32-16x16k-causal", CLVARLEN_DTYPE_F32, 16, 16384, 32, 8, 128, 1},
        /* the portable kernel at the head dims whose tiles differ (issue 23) */
        {"attn-f32-d64-16x16k", CLVARLEN_DTYPE_F32, 16, 16384, 32, 8, 64, 0},
        {"attn-f32-d256-16x16k", CLVARLEN_DTYPE_F32, 16, 16384, 32, 8, 256, 0},
        {"attn-f16-d64-16x16k", CLVARLEN_DTYPE_F16, 16, 16384, 32, 8, 64, 0},
        /* the other head dims of the tensor-core path (issue 23) */
        {"attn-d64-16x16k", CLVARLEN_DTYPE_BF16, 16, 16384, 32, 8, 64, 0},
        {"attn-d64-16x16k-causal", CLVARLEN_DTYPE_BF16, 16, 16384, 32, 8, 64, 1},
        {"attn-d96-16x16k", CLVARLEN_DTYPE_BF16, 16, 16384, 32, 8, 96, 0},
        {"attn-d96-16x16k-causal", CLVARLEN_DTYPE_BF16, 16, 16384, 32, 8, 96, 1},
        {"attn-d256-16x16k", CLVARLEN_DTYPE_BF16, 16, 16384, 32, 8, 256, 0},
        {"attn-d256-16x16k-causal", CLVARLEN_DTYPE_BF16, 16, 16384, 32, 8, 256, 1},
    };
    static const bench_shape small[] = {
        {"attn-8x2k", CLVARLEN_DTYPE_BF16, 8, 2048, 8, 2, 128, 0},
        {"attn-8x2k-causal", CLVARLEN_DTYPE_BF16, 8, 2048, 8, 2, 128, 1},
        {"attn-f32-8x2k", CLVARLEN_DTYPE_F32, 8, 2048, 8, 2, 128, 0},
        {"attn-f32-8x2k-causal", CLVARLEN_DTYPE_F32, 8, 2048, 8, 2, 128, 1},
        {"attn-f32-64x2k-d64", CLVARLEN_DTYPE_F32, 64, 2048, 8, 2, 64, 1},
    };
    const int gpu_like = ct_gpu_like(dev);
    double fma_rate = 0.0;
#if CLVARLEN_HAVE_OPENCL
    if (ct_context_is_cl(dev)) {
        fma_rate = ct_measure_fma(dev, opt);
        if (fma_rate > 0.0)
            ct_bench_note(opt, "f32 FMA rate measured on the device: %.1f GFLOP/s",
                          fma_rate * 1e-9);
    }
#endif
    if (!ct_context_is_cl(dev)) {
        const char *level = "";
        fma_rate = ct_measure_cpu_fma(dev, &level);
        if (fma_rate > 0.0)
            ct_bench_note(opt, "f32 %s rate measured on %d CPU threads: %.1f GFLOP/s", level,
                          clvarlen_context_threads(dev), fma_rate * 1e-9);
    }
    const bench_shape *list = gpu_like ? gpu : small;
    size_t n = gpu_like ? sizeof gpu / sizeof gpu[0] : sizeof small / sizeof small[0];
    if (opt->quick && !gpu_like)
        n = 2;
    int rc = 0;
    for (size_t i = 0; i < n; i++)
        if (ct_case_wanted(opt, list[i].name) && bench_one(dev, opt, &list[i], fma_rate) != 0)
            rc = -1;
    return rc;
}
