/* clvarlen-test: paged KV cache (SPEC 1.1) benchmarks.
 *
 * bf16, Hq 32, Hk 8, D 128 on GPUs (Hq 8, Hk 2 and smaller batches on CPUs),
 * every shape reading one shared cache whose pages the page tables visit in
 * random order (scattered, as in a serving engine's pool). Decode and verify
 * report the K/V bytes read (sum over rows of cache_seqlens Hk (D + Dv) 2
 * bytes; verify's rows each re-read their sequence's cache) against the copy
 * bandwidth; chunked prefill reports FLOP/s and its ratio to
 * clvarlen_attention_forward on the same shape with contiguous K/V (whose
 * output it must match). OpenCL devices are timed through the cl_mem entry
 * points, the CPU fallback through the host ones.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <clvarlen/clvarlen.h>
#if CLVARLEN_HAVE_OPENCL
#include <clvarlen/clvarlen-cl.h>
#endif

#include "ct-util.h"
#include "ops.h"

enum { MODE_DECODE, MODE_VERIFY, MODE_PREFILL };

enum { JOB_PAGED, JOB_ATTN, JOB_APPEND };

/* One timed call: its host buffers in the call's argument order, and their device copies. */
typedef struct bjob {
    int kind;
    clvarlen_context *ctx;
    clvarlen_paged_params pp;
    clvarlen_attention_params ap;
    clvarlen_kv_append_params kp;
    int n;
    void *h[8];
    size_t bytes[8];
#if CLVARLEN_HAVE_OPENCL
    cl_mem m[8];
    unsigned owned; /* m[i] created here (the shared caches are not) */
#endif
} bjob;

static int job_run_host(void *arg, void *event_out)
{
    bjob *j = arg;
    void **h = j->h;
    (void)event_out;
    clvarlen_status st;
    if (j->kind == JOB_PAGED)
        st = clvarlen_paged_attention_forward(j->ctx, &j->pp, h[0], h[1], h[2], h[3], h[4], h[5],
                                              h[6], h[7]);
    else if (j->kind == JOB_ATTN)
        st = clvarlen_attention_forward(j->ctx, &j->ap, h[0], h[1], h[2], h[3], h[4], NULL, h[5],
                                        h[6]);
    else
        st = clvarlen_kv_cache_append(j->ctx, &j->kp, h[0], h[1], h[2], h[3], h[4]);
    return st != CLVARLEN_SUCCESS;
}

#if CLVARLEN_HAVE_OPENCL
static int job_run_cl(void *arg, void *event_out)
{
    bjob *j = arg;
    cl_mem *m = j->m;
    cl_event *ev = event_out;
    clvarlen_status st;
    if (j->kind == JOB_PAGED)
        st = clvarlen_cl_paged_attention_forward(j->ctx, &j->pp, m[0], 0, m[1], 0, m[2], 0, m[3],
                                                 0, m[4], 0, m[5], 0, m[6], 0, m[7], 0, 0, NULL,
                                                 ev);
    else if (j->kind == JOB_ATTN)
        st = clvarlen_cl_attention_forward(j->ctx, &j->ap, m[0], 0, m[1], 0, m[2], 0, m[3], 0,
                                           m[4], 0, NULL, 0, m[5], 0, m[6], 0, 0, NULL, ev);
    else
        st = clvarlen_cl_kv_cache_append(j->ctx, &j->kp, m[0], 0, m[1], 0, m[2], 0, m[3], 0, m[4],
                                         0, 0, NULL, ev);
    return st != CLVARLEN_SUCCESS;
}

static cl_mem dev_copy(clvarlen_context *ctx, void *host, size_t bytes)
{
    cl_context clc;
    cl_device_id d;
    cl_command_queue q;
    cl_int e;
    if (clvarlen_context_get_cl(ctx, &clc, &d, &q) != CLVARLEN_SUCCESS)
        return NULL;
    cl_mem m = clCreateBuffer(clc, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes, host,
                              &e);
    return e == CL_SUCCESS ? m : NULL;
}

static void job_release(bjob *j)
{
    for (int i = 0; i < j->n; i++) {
        if ((j->owned >> i & 1u) && j->m[i])
            clReleaseMemObject(j->m[i]);
        if (j->owned >> i & 1u)
            j->m[i] = NULL;
    }
    j->owned = 0;
}
#endif

/* Median time of the job: device time through the cl_mem entry point on
 * OpenCL devices, wall time through the host one on the CPU fallback. */
static double time_job(bjob *j, const ct_options *opt)
{
#if CLVARLEN_HAVE_OPENCL
    if (ct_context_is_cl(j->ctx)) {
        for (int i = 0; i < j->n; i++) {
            if (j->m[i])
                continue;
            j->m[i] = dev_copy(j->ctx, j->h[i], j->bytes[i]);
            j->owned |= 1u << i;
            if (!j->m[i])
                return -1.0;
        }
        return ct_time_median(j->ctx, job_run_cl, j, ct_bench_iters(opt));
    }
#endif
    return ct_time_median(j->ctx, job_run_host, j, opt->quick ? 2 : 3);
}

/* Output i back in its host buffer (after time_job). */
static int job_read(bjob *j, int i)
{
#if CLVARLEN_HAVE_OPENCL
    if (j->m[i]) {
        cl_context clc;
        cl_device_id d;
        cl_command_queue q;
        if (clvarlen_context_get_cl(j->ctx, &clc, &d, &q) != CLVARLEN_SUCCESS)
            return -1;
        return clEnqueueReadBuffer(q, j->m[i], CL_TRUE, 0, j->bytes[i], j->h[i], 0, NULL, NULL) ==
                       CL_SUCCESS
                   ? 0
                   : -1;
    }
#endif
    (void)j;
    (void)i;
    return 0;
}

/* Bench data: uniform in [-1, 1); bf16 truncated from f32 (fast enough for the GiB caches). */
static void bench_fill(void *p, clvarlen_dtype dt, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++) {
        float x = (float)(ct_rng_next(&seed) >> 40) * 0x1.0p-23f - 1.0f;
        if (dt == CLVARLEN_DTYPE_BF16) {
            uint32_t b;
            memcpy(&b, &x, 4);
            ((uint16_t *)p)[i] = (uint16_t)(b >> 16);
        } else {
            tu_set(p, dt, i, x);
        }
    }
}

/* A random permutation of [0, n); the identity with CLVARLEN_BENCH_PAGES=ordered
 * (pages in cache order, to separate the cost of scattered pages from the rest). */
static int32_t *bench_perm(int64_t n, uint64_t seed)
{
    int32_t *perm = malloc((size_t)n * 4);
    if (!perm)
        return NULL;
    for (int64_t i = 0; i < n; i++)
        perm[i] = (int32_t)i;
    const char *order = getenv("CLVARLEN_BENCH_PAGES");
    if (order && strcmp(order, "ordered") == 0)
        return perm;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t k = ct_rng_int(&seed, 0, i);
        int32_t t = perm[i];
        perm[i] = perm[k];
        perm[k] = t;
    }
    return perm;
}

typedef struct pshape {
    const char *name;
    int mode;
    int32_t n_seqs, ctx, q_len; /* q_len: 1 (decode), drafts (verify), the chunk (prefill) */
    int32_t page_size;
} pshape;

/* The cache every shape reads: tokens [tokens, Hk, D] seen as [tokens / page, page, Hk, D]. */
typedef struct bcache {
    int32_t hq, hk, d;
    int64_t tokens;
    void *k, *v;
#if CLVARLEN_HAVE_OPENCL
    cl_mem mk, mv;
#endif
} bcache;

/* Prefill: the same shape through clvarlen_attention_forward on contiguous K/V (the
 * row's cache gathered, so that the outputs can be compared too). */
static int bench_contiguous(clvarlen_context *dev, const ct_options *opt, const bcache *bc,
                            const bjob *paged, double *t_out, double *err_out)
{
    const clvarlen_paged_params *pp = &paged->pp;
    const int32_t lk = ((const int32_t *)paged->h[5])[0], lq = (int32_t)pp->total_q;
    const int32_t *pt = paged->h[4], ps = pp->page_size;
    const size_t row = (size_t)bc->hk * (size_t)bc->d * 2;
    bjob j;
    memset(&j, 0, sizeof j);
    j.kind = JOB_ATTN;
    j.ctx = dev;
    j.n = 7;
    int32_t cu_q[2] = {0, lq}, cu_k[2] = {0, lk};
    size_t bytes[7] = {paged->bytes[0], (size_t)lk * row, (size_t)lk * row, 8, 8,
                       paged->bytes[6], paged->bytes[7]};
    for (int i = 0; i < 7; i++)
        j.bytes[i] = bytes[i];
    j.h[0] = paged->h[0];
    j.h[1] = malloc(j.bytes[1]);
    j.h[2] = malloc(j.bytes[2]);
    j.h[3] = cu_q;
    j.h[4] = cu_k;
    j.h[5] = malloc(j.bytes[5]);
    j.h[6] = malloc(j.bytes[6]);
    int rc = -1;
    if (!j.h[1] || !j.h[2] || !j.h[5] || !j.h[6])
        goto out;
    for (int32_t t = 0; t < lk; t++) {
        size_t slot = (size_t)pt[t / ps] * (size_t)ps + (size_t)(t % ps);
        memcpy((char *)j.h[1] + (size_t)t * row, (const char *)bc->k + slot * row, row);
        memcpy((char *)j.h[2] + (size_t)t * row, (const char *)bc->v + slot * row, row);
    }
    clvarlen_attention_params_init(&j.ap);
    j.ap.dtype = CLVARLEN_DTYPE_BF16;
    j.ap.n_seqs = 1;
    j.ap.total_q = lq;
    j.ap.total_k = lk;
    j.ap.heads_q = bc->hq;
    j.ap.heads_kv = bc->hk;
    j.ap.head_dim = bc->d;
    j.ap.causal = pp->causal;
    j.ap.max_seqlen_q = lq;
    j.ap.max_seqlen_k = lk;
    *t_out = time_job(&j, opt);
    if (*t_out > 0.0 && job_read(&j, 5) == 0) {
        *err_out = tu_rel_err(paged->h[6], j.h[5], CLVARLEN_DTYPE_BF16, paged->bytes[6] / 2);
        rc = 0;
    }
out:
#if CLVARLEN_HAVE_OPENCL
    job_release(&j);
#endif
    free(j.h[1]);
    free(j.h[2]);
    free(j.h[5]);
    free(j.h[6]);
    return rc;
}

static int bench_shape(clvarlen_context *dev, const ct_options *opt, double copy_gbps,
                       const bcache *bc, const pshape *s)
{
    const int32_t ps = s->page_size, max_pages = (s->ctx + ps - 1) / ps;
    const int64_t num_pages = bc->tokens / ps, n = s->n_seqs;
    const int64_t rows = s->mode == MODE_VERIFY ? n * s->q_len : n;
    const int64_t total_q = n * s->q_len;
    int32_t *perm = bench_perm(num_pages, ct_seed_for(opt, s->name));
    int32_t *seq_pt = malloc((size_t)(n * max_pages) * 4), *seq_kv = malloc((size_t)n * 4);
    int32_t *pt = malloc((size_t)(rows * max_pages) * 4), *cache_len = malloc((size_t)rows * 4);
    int32_t *cu_q = malloc((size_t)(rows + 1) * 4);
    bjob j;
    memset(&j, 0, sizeof j);
    int rc = -1;
    if (!perm || !seq_pt || !seq_kv || !pt || !cache_len || !cu_q)
        goto out;
    for (int64_t i = 0; i < n * max_pages; i++)
        seq_pt[i] = perm[i]; /* n ctx <= tokens: every row its own scattered pages */
    for (int64_t i = 0; i < n; i++)
        seq_kv[i] = s->ctx;
    if (s->mode == MODE_VERIFY) {
        if (clvarlen_seqlens_expand(dev, seq_kv, NULL, s->q_len, n, seq_pt, max_pages, max_pages,
                                    0, rows, cache_len, pt, max_pages, NULL) != CLVARLEN_SUCCESS) {
            ct_bench_note(opt, "%s: seqlens_expand: %s", s->name, clvarlen_last_error(dev));
            goto out;
        }
    } else {
        memcpy(pt, seq_pt, (size_t)(n * max_pages) * 4);
        memcpy(cache_len, seq_kv, (size_t)n * 4);
    }
    for (int64_t r = 0; r <= rows; r++)
        cu_q[r] = (int32_t)(r * (total_q / rows));
    j.kind = JOB_PAGED;
    j.ctx = dev;
    j.n = 8;
    clvarlen_paged_params *p = &j.pp;
    clvarlen_paged_params_init(p);
    p->dtype = CLVARLEN_DTYPE_BF16;
    p->n_rows = rows;
    p->total_q = total_q;
    p->num_pages = num_pages;
    p->page_size = ps;
    p->max_pages = max_pages;
    p->heads_q = bc->hq;
    p->heads_kv = bc->hk;
    p->head_dim = bc->d;
    p->max_seqlen_q = (int32_t)(total_q / rows);
    p->causal = 1;
    const size_t qb = (size_t)total_q * (size_t)bc->hq * (size_t)bc->d * 2;
    const size_t cb = (size_t)bc->tokens * (size_t)bc->hk * (size_t)bc->d * 2;
    size_t bytes[8] = {qb, cb, cb, (size_t)(rows + 1) * 4, (size_t)(rows * max_pages) * 4,
                       (size_t)rows * 4, qb, (size_t)total_q * (size_t)bc->hq * 4};
    void *h[8] = {malloc(qb), bc->k, bc->v, cu_q, pt, cache_len, malloc(qb),
                  malloc(bytes[7])};
    for (int i = 0; i < 8; i++) {
        j.bytes[i] = bytes[i];
        j.h[i] = h[i];
    }
#if CLVARLEN_HAVE_OPENCL
    j.m[1] = bc->mk; /* shared, not owned */
    j.m[2] = bc->mv;
#endif
    if (!j.h[0] || !j.h[6] || !j.h[7])
        goto out;
    bench_fill(j.h[0], CLVARLEN_DTYPE_BF16, qb / 2, ct_seed_for(opt, "paged-q"));
    double t = time_job(&j, opt);
    if (t <= 0.0) {
        ct_bench_note(opt, "%s failed: %s", s->name, clvarlen_last_error(dev));
        goto out;
    }
    char shape[160];
    if (s->mode != MODE_PREFILL) {
        double kv_bytes = 0.0; /* every row reads its cache (verify's rows re-read theirs) */
        for (int64_t r = 0; r < rows; r++)
            kv_bytes += (double)cache_len[r] * bc->hk * (2.0 * bc->d) * 2.0;
        if (s->mode == MODE_DECODE)
            snprintf(shape, sizeof shape, "bf16 B %d ctx %d page %d H %d/%d D %d", (int)n,
                     (int)s->ctx, (int)ps, (int)bc->hq, (int)bc->hk, (int)bc->d);
        else
            snprintf(shape, sizeof shape, "bf16 B %d x %d drafts (%lld rows) ctx %d page %d",
                     (int)n, (int)s->q_len, (long long)rows, (int)s->ctx, (int)ps);
        ct_bench_report(opt, s->name, shape, t, kv_bytes, 0.0,
                        copy_gbps > 0.0 ? kv_bytes / t * 1e-9 / copy_gbps : 0.0, "copy");
        rc = 0;
        goto out;
    }
    /* FLOPs as the attention bench counts them: 4 Lq Lk D Hq, halved when causal (the
     * visible pairs of a chunk at the end of a long cache are about twice that) */
    const double flops = 4.0 * (double)s->q_len * s->ctx * bc->d * bc->hq * 0.5;
    double tc = 0.0, err = 0.0;
    if (job_read(&j, 6) != 0 || bench_contiguous(dev, opt, bc, &j, &tc, &err) != 0 || tc <= 0.0) {
        ct_bench_note(opt, "%s: contiguous attention failed: %s", s->name,
                      clvarlen_last_error(dev));
        goto out;
    }
    snprintf(shape, sizeof shape, "bf16 chunk %d ctx %d page %d H %d/%d D %d causal",
             (int)s->q_len, (int)s->ctx, (int)ps, (int)bc->hq, (int)bc->hk, (int)bc->d);
    ct_bench_report(opt, s->name, shape, t, 0.0, flops, tc / t, "contiguous");
    ct_bench_report(opt, "paged-prefill-contig", shape, tc, 0.0, flops, 0.0, NULL);
    if (!(err <= tu_tolerance(CLVARLEN_DTYPE_BF16)))
        ct_bench_note(opt, "%s: paged and contiguous o differ: rel L2 %.3g", s->name, err);
    rc = 0;
out:
#if CLVARLEN_HAVE_OPENCL
    job_release(&j);
#endif
    free(j.h[0]);
    free(j.h[6]);
    free(j.h[7]);
    free(perm);
    free(seq_pt);
    free(seq_kv);
    free(pt);
    free(cache_len);
    free(cu_q);
    return rc;
}

int bench_paged_attention(clvarlen_context *dev, const ct_options *opt, double copy_gbps)
{
    /* decode 64 x 4096 (page 16, then sglang's page 1), 4 x 32768 (too few rows x
     * heads to fill a GPU: split-KV), verify 64 x 4 drafts, one chunk of 2048 (512,
     * 256, 128) tokens */
    static const pshape gpu[] = {
        {"paged-decode-p16", MODE_DECODE, 64, 4096, 1, 16},
        {"paged-decode-p1", MODE_DECODE, 64, 4096, 1, 1},
        {"paged-decode-split", MODE_DECODE, 4, 32768, 1, 16},
        {"paged-verify", MODE_VERIFY, 64, 4096, 4, 16},
        {"paged-prefill", MODE_PREFILL, 1, 16384, 2048, 16},
        /* shorter chunks, either side of the gathered form's threshold */
        {"paged-prefill-c512", MODE_PREFILL, 1, 16384, 512, 16},
        {"paged-prefill-c256", MODE_PREFILL, 1, 16384, 256, 16},
        {"paged-prefill-c128", MODE_PREFILL, 1, 16384, 128, 16},
    };
    static const pshape small[] = {
        {"paged-decode-p16", MODE_DECODE, 8, 1024, 1, 16},
        {"paged-decode-p1", MODE_DECODE, 8, 1024, 1, 1},
        {"paged-decode-split", MODE_DECODE, 2, 4096, 1, 16},
        {"paged-verify", MODE_VERIFY, 8, 1024, 4, 16},
        {"paged-prefill", MODE_PREFILL, 1, 2048, 256, 16},
    };
    static const pshape small_quick[] = {
        {"paged-decode-p16", MODE_DECODE, 4, 512, 1, 16},
        {"paged-verify", MODE_VERIFY, 4, 512, 4, 16},
        {"paged-prefill", MODE_PREFILL, 1, 1024, 128, 16},
    };
    const int gpu_dev = ct_gpu_like(dev);
    const pshape *list = gpu_dev ? gpu : opt->quick ? small_quick : small;
    size_t n = gpu_dev ? sizeof gpu / sizeof gpu[0]
                       : opt->quick ? sizeof small_quick / sizeof small_quick[0]
                                    : sizeof small / sizeof small[0];
    bcache bc;
    memset(&bc, 0, sizeof bc);
    bc.hq = gpu_dev ? 32 : 8;
    bc.hk = gpu_dev ? 8 : 2;
    bc.d = 128;
    for (size_t i = 0; i < n; i++) {
        int64_t t = (int64_t)list[i].n_seqs * list[i].ctx;
        bc.tokens = t > bc.tokens ? t : bc.tokens;
    }
    const size_t cb = (size_t)bc.tokens * (size_t)bc.hk * (size_t)bc.d * 2;
    bc.k = malloc(cb);
    bc.v = malloc(cb);
    int rc = -1;
    if (!bc.k || !bc.v) {
        ct_bench_note(opt, "paged-attention: out of host memory");
        goto out;
    }
    bench_fill(bc.k, CLVARLEN_DTYPE_BF16, cb / 2, ct_seed_for(opt, "paged-k"));
    bench_fill(bc.v, CLVARLEN_DTYPE_BF16, cb / 2, ct_seed_for(opt, "paged-v"));
#if CLVARLEN_HAVE_OPENCL
    if (ct_context_is_cl(dev)) {
        bc.mk = dev_copy(dev, bc.k, cb);
        bc.mv = dev_copy(dev, bc.v, cb);
        if (!bc.mk || !bc.mv) {
            ct_bench_note(opt, "paged-attention: device caches of %zu bytes failed", cb);
            goto out;
        }
    }
#endif
    rc = 0;
    for (size_t i = 0; i < n; i++)
        if (bench_shape(dev, opt, copy_gbps, &bc, &list[i]) != 0)
            rc = -1;
out:
#if CLVARLEN_HAVE_OPENCL
    if (bc.mk)
        clReleaseMemObject(bc.mk);
    if (bc.mv)
        clReleaseMemObject(bc.mv);
#endif
    free(bc.k);
    free(bc.v);
    return rc;
}

/* A prefill's tokens into fresh pages (in random order), and a decode step's one token
 * per sequence at random slots; bytes: k and v read in, the cache rows written, the slots. */
int bench_kv_append(clvarlen_context *dev, const ct_options *opt, double copy_gbps)
{
    const int gpu_dev = ct_gpu_like(dev);
    const int32_t hk = gpu_dev ? 8 : 2, d = 128, ps = 16;
    const int64_t sizes[2] = {gpu_dev ? 16384 : opt->quick ? 512 : 2048, gpu_dev ? 64 : 8};
    static const char *const names[2] = {"kv-append-prefill", "kv-append-decode"};
    int rc = 0;
    for (int c = 0; c < 2; c++) {
        /* the prefill fills half the cache; each decode token gets a page of its own */
        const int64_t n = sizes[c], num_pages = c == 0 ? 2 * ((n + ps - 1) / ps) + 1 : 2 * n;
        const size_t rb = (size_t)hk * (size_t)d * 2;
        uint64_t rng = ct_seed_for(opt, names[c]);
        int32_t *perm = bench_perm(num_pages, rng);
        bjob j;
        memset(&j, 0, sizeof j);
        j.kind = JOB_APPEND;
        j.ctx = dev;
        j.n = 5;
        size_t bytes[5] = {(size_t)n * rb, (size_t)n * rb, (size_t)n * 8,
                           (size_t)(num_pages * ps) * rb, (size_t)(num_pages * ps) * rb};
        for (int i = 0; i < 5; i++) {
            j.bytes[i] = bytes[i];
            j.h[i] = malloc(bytes[i]);
        }
        int ok = perm && j.h[0] && j.h[1] && j.h[2] && j.h[3] && j.h[4];
        if (ok) {
            int64_t *slot = j.h[2];
            for (int64_t t = 0; t < n; t++)
                slot[t] = c == 0 ? (int64_t)perm[t / ps] * ps + t % ps
                                 : (int64_t)perm[t] * ps + ct_rng_int(&rng, 0, ps - 1);
            for (int i = 0; i < 5; i++)
                if (i != 2)
                    bench_fill(j.h[i], CLVARLEN_DTYPE_BF16, bytes[i] / 2, rng + (uint64_t)i);
            clvarlen_kv_append_params_init(&j.kp);
            j.kp.dtype = j.kp.cache_dtype = CLVARLEN_DTYPE_BF16;
            j.kp.n_tokens = n;
            j.kp.num_pages = num_pages;
            j.kp.page_size = ps;
            j.kp.heads_kv = hk;
            j.kp.head_dim = d;
            double t = time_job(&j, opt);
            if (t > 0.0) {
                double moved = (double)n * (4.0 * (double)rb + 8.0);
                char shape[128];
                snprintf(shape, sizeof shape, "bf16 %lld tokens Hk %d D %d page %d",
                         (long long)n, (int)hk, (int)d, (int)ps);
                ct_bench_report(opt, names[c], shape, t, moved, 0.0,
                                copy_gbps > 0.0 ? moved / t * 1e-9 / copy_gbps : 0.0, "copy");
            } else {
                ct_bench_note(opt, "%s failed: %s", names[c], clvarlen_last_error(dev));
                ok = 0;
            }
        } else {
            ct_bench_note(opt, "%s: out of host memory", names[c]);
        }
#if CLVARLEN_HAVE_OPENCL
        job_release(&j);
#endif
        for (int i = 0; i < 5; i++)
            free(j.h[i]);
        free(perm);
        if (!ok)
            rc = -1;
    }
    return rc;
}
