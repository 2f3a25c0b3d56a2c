/* clvarlen-test: paged KV cache (SPEC 1.1) checks.
 *
 * paged-attention checks random batches of three kinds on the device and on
 * the CPU fallback and compares o and lse: decode (len_q 1 per row),
 * speculative verify in the seqlens_expanded form (one row per draft token,
 * built with clvarlen_seqlens_expand from per-sequence page tables) and
 * chunked prefill (up to 64 queries on a cache holding earlier chunks); page
 * sizes 1, 16 and 7, f32/f16/bf16, GQA, causal or not, windows, softcap,
 * pages in random order, garbage in unused page-table entries, automatic and
 * forced splits, lse NULL, and errors on invalid input. The CPU result is also
 * compared with clvarlen_attention_forward on each sequence's cache gathered
 * into contiguous K/V (the SPEC's definition; for verify, the compact causal
 * form with len_q = drafts), so a fallback that misreads the layout cannot
 * pass by agreeing with the device. kv-append checks random slot mappings
 * (with -1) and cache dtype conversions bitwise against the CPU and against
 * the SPEC. On OpenCL devices odd cases go through the cl_mem entry points
 * (struct chk). The benchmarks are in paged-bench.c.
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
static const char *const mode_name[] = {"decode", "verify", "prefill"};
static const int32_t page_sizes[] = {1, 16, 7};
static const clvarlen_dtype dtypes[] = {CLVARLEN_DTYPE_F32, CLVARLEN_DTYPE_F16,
                                        CLVARLEN_DTYPE_BF16};

/* ================================================================ paged attention check */

typedef struct pcase {
    clvarlen_paged_params p;
    int mode;
    char desc[96];
    int64_t n_seqs;                 /* sequences (verify: before the expansion) */
    int32_t *seq_q, *seq_kv;        /* per sequence: new queries, cache tokens (new included) */
    int32_t *seq_pt;                /* [n_seqs, seq_pitch] */
    int64_t seq_pitch;
    int32_t draft;                  /* verify: queries per sequence */
    int32_t *cu_q, *pt, *cache_len; /* the call's: [n_rows + 1], [n_rows, pitch], [n_rows] */
    int64_t pt_pitch;
    void *q, *kc, *vc;
    size_t q_n, kc_n, vc_n, o_n, lse_n; /* elements */
} pcase;

/* Anything but the row's own next page: unused entries must never be read. */
static int32_t garbage_page(chk *c, int64_t num_pages)
{
    switch (chk_rnd(c, 0, 4)) {
    case 0: return -1;
    case 1: return INT32_MAX;
    case 2: return INT32_MIN;
    case 3: return (int32_t)(num_pages + chk_rnd(c, 0, 1000));
    default: return (int32_t)chk_rnd(c, 0, num_pages - 1); /* a page of another row */
    }
}

/* The sequences (lengths at and around page boundaries, no-op rows with len_q 0) and
 * their page tables: pages in random order over a cache with spare pages, garbage past
 * each row's used pages. */
static int make_seqs(chk *c, pcase *pc)
{
    clvarlen_paged_params *p = &pc->p;
    const int quick = c->opt->quick;
    const int32_t ps = p->page_size;
    const int64_t max_ctx = quick ? 300 : 1500;
    static const int64_t max_n[2][3] = {{24, 16, 6}, {8, 6, 3}};
    const int64_t n = pc->n_seqs = chk_rnd(c, 1, max_n[quick ? 1 : 0][pc->mode]);
    pc->seq_q = chk_alloc(c, (size_t)n * 4);
    pc->seq_kv = chk_alloc(c, (size_t)n * 4);
    if (c->oom)
        return -1;
    const int32_t draft = pc->draft = (int32_t)chk_rnd(c, 1, 5);
    int64_t used_total = 0;
    int32_t max_used = 0;
    for (int64_t s = 0; s < n; s++) {
        int32_t q, kv;
        if (pc->mode == MODE_DECODE) {
            q = s > 0 && chk_unif(c) < 0.1 ? 0 : 1;
            const int64_t near[4] = {1, ps, ps + 1, 3 * ps - 1}, r = chk_rnd(c, 0, 4);
            kv = (int32_t)(r < 4 ? near[r] : chk_rnd(c, 1, max_ctx));
            if (q == 0 && chk_unif(c) < 0.5)
                kv = 0;
        } else if (pc->mode == MODE_VERIFY) {
            q = draft;
            kv = (int32_t)chk_rnd(c, draft, max_ctx);
        } else {
            q = s > 0 && chk_unif(c) < 0.1 ? 0 : (int32_t)chk_rnd(c, 1, 64);
            kv = q + (chk_unif(c) < 0.2 ? 0 : (int32_t)chk_rnd(c, 1, max_ctx)); /* first chunk */
        }
        pc->seq_q[s] = q;
        pc->seq_kv[s] = kv;
        int32_t used = (kv + ps - 1) / ps;
        used_total += used;
        max_used = used > max_used ? used : max_used;
    }

    p->max_pages = max_used + (int32_t)chk_rnd(c, 0, 2);
    if (p->max_pages < 1)
        p->max_pages = 1;
    p->num_pages = used_total + chk_rnd(c, 1, 5);
    pc->seq_pitch = p->max_pages + (chk_unif(c) < 0.3 ? chk_rnd(c, 1, 3) : 0);
    pc->seq_pt = chk_alloc(c, (size_t)(n * pc->seq_pitch) * 4);
    int32_t *perm = chk_alloc(c, (size_t)p->num_pages * 4);
    if (c->oom)
        return -1;
    for (int64_t j = 0; j < p->num_pages; j++)
        perm[j] = (int32_t)j;
    for (int64_t j = p->num_pages - 1; j > 0; j--) {
        int64_t k = chk_rnd(c, 0, j);
        int32_t t = perm[j];
        perm[j] = perm[k];
        perm[k] = t;
    }
    int64_t next = 0;
    for (int64_t s = 0; s < n; s++) {
        int32_t used = (pc->seq_kv[s] + ps - 1) / ps;
        for (int64_t j = 0; j < pc->seq_pitch; j++)
            pc->seq_pt[s * pc->seq_pitch + j] = j < used ? perm[next++]
                                                         : garbage_page(c, p->num_pages);
    }
    return 0;
}

/* The call's rows (the sequences themselves, or verify's expansion), strides and data. */
static int make_rows(chk *c, pcase *pc)
{
    clvarlen_paged_params *p = &pc->p;
    const int64_t n = pc->n_seqs;
    const int32_t draft = pc->draft, ps = p->page_size;
    const int32_t dv = p->head_dim_v ? p->head_dim_v : p->head_dim;
    int32_t max_q = 0;
    if (pc->mode == MODE_VERIFY) {
        const int64_t rows = n * draft;
        pc->pt_pitch = p->max_pages + (chk_unif(c) < 0.3 ? chk_rnd(c, 1, 3) : 0);
        pc->pt = chk_alloc(c, (size_t)(rows * pc->pt_pitch) * 4);
        pc->cache_len = chk_alloc(c, (size_t)rows * 4);
        pc->cu_q = chk_alloc(c, (size_t)(rows + 1) * 4);
        if (c->oom)
            return -1;
        int64_t got = -1;
        clvarlen_status st = clvarlen_seqlens_expand(
            c->cpu, pc->seq_kv, NULL, draft, n, pc->seq_pt, p->max_pages, pc->seq_pitch, 0,
            rows, pc->cache_len, pc->pt, pc->pt_pitch, &got);
        if (st != CLVARLEN_SUCCESS || got != rows) {
            chk_fail(c, "seqlens_expand for verify: %s (%lld rows)", clvarlen_status_name(st),
                     (long long)got);
            return -1;
        }
        for (int64_t r = 0; r <= rows; r++)
            pc->cu_q[r] = (int32_t)r;
        p->n_rows = rows;
        max_q = 1;
    } else {
        pc->pt = pc->seq_pt;
        pc->pt_pitch = pc->seq_pitch;
        pc->cache_len = pc->seq_kv;
        pc->cu_q = chk_alloc(c, (size_t)(n + 1) * 4);
        if (c->oom)
            return -1;
        pc->cu_q[0] = 0;
        for (int64_t s = 0; s < n; s++) {
            pc->cu_q[s + 1] = pc->cu_q[s] + pc->seq_q[s];
            max_q = pc->seq_q[s] > max_q ? pc->seq_q[s] : max_q;
        }
        p->n_rows = n;
    }
    p->total_q = pc->cu_q[p->n_rows];
    p->page_table_stride = pc->pt_pitch == p->max_pages && chk_unif(c) < 0.5 ? 0 : pc->pt_pitch;
    /* 0 (unknown) and a loose bound pick the device's general kernel; the exact one its
     * few-query kernel for decode and verify */
    double r = chk_unif(c);
    p->max_seqlen_q = r < 0.2 ? 0 : r < 0.35 ? max_q + 2 : max_q;
    if (chk_unif(c) < 0.25) {
        int pad = chk_unif(c) < 0.5 ? 8 : 3;
        p->q_stride = (int64_t)p->heads_q * p->head_dim + pad;
        p->o_stride = (int64_t)p->heads_q * dv + 2 * pad;
    }
    int64_t qs = p->q_stride ? p->q_stride : (int64_t)p->heads_q * p->head_dim;
    int64_t os = p->o_stride ? p->o_stride : (int64_t)p->heads_q * dv;
    size_t es = clvarlen_dtype_size(p->dtype);
    pc->q_n = (size_t)(p->total_q * qs);
    pc->o_n = (size_t)(p->total_q * os);
    pc->lse_n = (size_t)(p->total_q * p->heads_q);
    pc->kc_n = (size_t)(p->num_pages * ps * p->heads_kv * p->head_dim);
    pc->vc_n = (size_t)(p->num_pages * ps * p->heads_kv * dv);
    pc->q = chk_alloc(c, pc->q_n * es);
    pc->kc = chk_alloc(c, pc->kc_n * es);
    pc->vc = chk_alloc(c, pc->vc_n * es);
    if (c->oom)
        return -1;
    ct_fill(&c->rng, pc->q, p->dtype, pc->q_n, 1.0);
    ct_fill(&c->rng, pc->kc, p->dtype, pc->kc_n, 1.0);
    ct_fill(&c->rng, pc->vc, p->dtype, pc->vc_n, 1.0);
    snprintf(pc->desc, sizeof pc->desc, "%s p%d %s H%d/%d D%d/%d rows %lld c%d w%d sp%d",
             mode_name[pc->mode], (int)ps, clvarlen_dtype_name(p->dtype), (int)p->heads_q,
             (int)p->heads_kv, (int)p->head_dim, (int)dv, (long long)p->n_rows, p->causal,
             (int)p->window_left, (int)p->num_splits);
    return 0;
}

/* Case i: mode, page size and dtype walk a Latin square, so every 9 cases
 * cover each pair of them once. Returns -1 when out of memory or when the
 * verify expansion failed (the case is then marked). */
static int make_pcase(chk *c, int i, pcase *pc)
{
    static const int dims[] = {128, 64, 80, 32, 256, 96, 16};
    static const int groups[] = {1, 4, 8, 2};
    memset(pc, 0, sizeof *pc);
    clvarlen_paged_params *p = &pc->p;
    clvarlen_paged_params_init(p);
    pc->mode = i % 3;
    p->page_size = page_sizes[(i / 3) % 3];
    p->dtype = dtypes[(i + i / 3) % 3];
    p->head_dim = dims[i % 7];
    if (i % 5 == 4)
        p->head_dim_v = p->head_dim == 64 ? 32 : 64;
    p->heads_kv = (int32_t)chk_rnd(c, 1, 3);
    p->heads_q = p->heads_kv * groups[i % 4];
    p->causal = chk_unif(c) < (pc->mode == MODE_PREFILL ? 0.8 : 0.5);
    if (chk_unif(c) < 0.2) {
        p->window_left = (int32_t)chk_rnd(c, 0, 200);
        p->window_right = p->causal ? -1 : (int32_t)chk_rnd(c, -1, 50);
    }
    if (chk_unif(c) < 0.15)
        p->softcap = 5.0f;
    if (chk_unif(c) < 0.15)
        p->scale = 0.3f;
    p->num_splits = i % 4 == 3 ? (int32_t)chk_rnd(c, 2, 3) : i % 8 == 5 ? 1 : 0;
    return make_seqs(c, pc) || make_rows(c, pc) ? -1 : 0;
}

/* The o rows of a strided buffer, packed; the gaps between them must be unwritten. */
static const void *dense_o(chk *c, const pcase *pc, const void *o, const char *who)
{
    const clvarlen_paged_params *p = &pc->p;
    int64_t w = (int64_t)p->heads_q * (p->head_dim_v ? p->head_dim_v : p->head_dim);
    if (!p->o_stride || p->o_stride == w)
        return o;
    size_t es = clvarlen_dtype_size(p->dtype);
    unsigned char *d = chk_alloc(c, (size_t)(p->total_q * w) * es);
    if (!d)
        return NULL;
    const unsigned char *src = o;
    for (int64_t t = 0; t < p->total_q; t++) {
        memcpy(d + (size_t)(t * w) * es, src + (size_t)(t * p->o_stride) * es, (size_t)w * es);
        chk_untouched(c, who, src + (size_t)(t * p->o_stride + w) * es,
                      (size_t)(p->o_stride - w) * es);
    }
    return d;
}

/* The SPEC's definition: attention over each sequence's cache gathered into contiguous K/V. */
static void check_gathered(chk *c, const pcase *pc, const void *o_cpu, const float *lse_cpu)
{
    const clvarlen_paged_params *p = &pc->p;
    const int32_t dv = p->head_dim_v ? p->head_dim_v : p->head_dim, ps = p->page_size;
    const size_t es = clvarlen_dtype_size(p->dtype);
    const size_t kr = (size_t)p->heads_kv * (size_t)p->head_dim * es;
    const size_t vr = (size_t)p->heads_kv * (size_t)dv * es;
    const int64_t n = pc->n_seqs;
    int32_t *cu_q = chk_alloc(c, (size_t)(n + 1) * 4), *cu_k = chk_alloc(c, (size_t)(n + 1) * 4);
    if (c->oom)
        return;
    cu_q[0] = cu_k[0] = 0;
    for (int64_t s = 0; s < n; s++) {
        cu_q[s + 1] = cu_q[s] + pc->seq_q[s];
        cu_k[s + 1] = cu_k[s] + pc->seq_kv[s];
    }
    unsigned char *kg = chk_alloc(c, (size_t)cu_k[n] * kr + 1);
    unsigned char *vg = chk_alloc(c, (size_t)cu_k[n] * vr + 1);
    void *o_ref = chk_alloc(c, (size_t)(p->total_q * p->heads_q * dv) * es);
    float *lse_ref = chk_alloc(c, pc->lse_n * 4);
    if (c->oom)
        return;
    for (int64_t s = 0; s < n; s++) {
        for (int32_t j = 0; j < pc->seq_kv[s]; j++) {
            size_t page = (size_t)pc->seq_pt[s * pc->seq_pitch + j / ps];
            size_t slot = page * (size_t)ps + (size_t)(j % ps);
            memcpy(kg + (size_t)(cu_k[s] + j) * kr, (const unsigned char *)pc->kc + slot * kr, kr);
            memcpy(vg + (size_t)(cu_k[s] + j) * vr, (const unsigned char *)pc->vc + slot * vr, vr);
        }
    }
    clvarlen_attention_params a;
    clvarlen_attention_params_init(&a);
    a.dtype = p->dtype;
    a.n_seqs = n;
    a.total_q = p->total_q;
    a.total_k = cu_k[n];
    a.heads_q = p->heads_q;
    a.heads_kv = p->heads_kv;
    a.head_dim = p->head_dim;
    a.head_dim_v = p->head_dim_v;
    a.q_stride = p->q_stride;
    a.scale = p->scale;
    a.causal = pc->mode == MODE_VERIFY ? 1 : p->causal; /* the drafts see their prefixes */
    a.window_left = p->window_left;
    a.window_right = p->window_right;
    a.softcap = p->softcap;
    clvarlen_status st = clvarlen_attention_forward(c->cpu, &a, pc->q, kg, vg, cu_q, cu_k, NULL,
                                                    o_ref, lse_ref);
    if (!chk_call(c, 1, st))
        return;
    char what[140];
    snprintf(what, sizeof what, "cpu o vs gathered attention [%s]", pc->desc);
    chk_close(c, what, o_cpu, o_ref, p->dtype, (size_t)(p->total_q * p->heads_q * dv),
              tu_tolerance(p->dtype));
    snprintf(what, sizeof what, "cpu lse vs gathered attention [%s]", pc->desc);
    chk_close(c, what, lse_cpu, lse_ref, CLVARLEN_DTYPE_F32, pc->lse_n, 1e-4);
}

/* Invalid input on the host entry points: an error, and nothing written. */
static void check_errors(chk *c, pcase *pc)
{
    clvarlen_paged_params *p = &pc->p;
    size_t ob = pc->o_n * clvarlen_dtype_size(p->dtype);
    for (int what = 0; what < 3; what++) {
        clvarlen_paged_params e = *p;
        int32_t save_pt = pc->pt[0], save_len = pc->cache_len[0];
        clvarlen_status want = CLVARLEN_ERROR_INVALID_ARGUMENT;
        if (what == 0) { /* row 0 has a query, so its first entry is used */
            pc->pt[0] = (int32_t)p->num_pages;
            want = CLVARLEN_ERROR_INDEX_OUT_OF_RANGE;
        } else if (what == 1) {
            pc->cache_len[0] = pc->cu_q[1] - pc->cu_q[0] - 1; /* fewer keys than queries */
        } else {
            int32_t max_q = 0;
            for (int64_t r = 0; r < p->n_rows; r++)
                max_q = pc->cu_q[r + 1] - pc->cu_q[r] > max_q ? pc->cu_q[r + 1] - pc->cu_q[r]
                                                              : max_q;
            if (max_q < 2)
                break;
            e.max_seqlen_q = max_q - 1; /* a bound the host entry point can see is wrong */
        }
        for (int on_cpu = 0; on_cpu < 2; on_cpu++) {
            void *o = chk_alloc(c, ob);
            float *lse = chk_alloc(c, pc->lse_n * 4);
            if (c->oom)
                break;
            clvarlen_status st = clvarlen_paged_attention_forward(
                on_cpu ? c->cpu : c->dev, &e, pc->q, pc->kc, pc->vc, pc->cu_q, pc->pt,
                pc->cache_len, o, lse);
            chk_expect(c, on_cpu, st, want);
            chk_untouched(c, on_cpu ? "cpu o (error)" : "device o (error)", o, ob);
            chk_untouched(c, on_cpu ? "cpu lse (error)" : "device lse (error)", lse,
                          pc->lse_n * 4);
        }
        pc->pt[0] = save_pt;
        pc->cache_len[0] = save_len;
    }
}

static void run_pcase(chk *c, pcase *pc)
{
    const clvarlen_paged_params *p = &pc->p;
    const size_t es = clvarlen_dtype_size(p->dtype);
    const int32_t dv = p->head_dim_v ? p->head_dim_v : p->head_dim;
    void *o_dev = chk_alloc(c, pc->o_n * es), *o_cpu = chk_alloc(c, pc->o_n * es);
    float *lse_dev = chk_alloc(c, pc->lse_n * 4), *lse_cpu = chk_alloc(c, pc->lse_n * 4);
    if (c->oom)
        return;
    /* lse may be NULL (host entry point; a cl_mem call always gets one) */
    const int no_lse = !c->cl_case && c->case_i % 6 == 4;
    clvarlen_status sd = CLVARLEN_SUCCESS;
    if (c->cl_case) {
#if CLVARLEN_HAVE_OPENCL
        size_t oq, ok, ov, ocu, opt, ocl, oo, ol;
        cl_event ev = NULL;
        cl_mem mq = chk_dev_in(c, pc->q, pc->q_n * es, &oq);
        cl_mem mk = chk_dev_in(c, pc->kc, pc->kc_n * es, &ok);
        cl_mem mv = chk_dev_in(c, pc->vc, pc->vc_n * es, &ov);
        cl_mem mcu = chk_dev_in(c, pc->cu_q, (size_t)(p->n_rows + 1) * 4, &ocu);
        cl_mem mpt = chk_dev_in(c, pc->pt, (size_t)(p->n_rows * pc->pt_pitch) * 4, &opt);
        cl_mem mcl = chk_dev_in(c, pc->cache_len, (size_t)p->n_rows * 4, &ocl);
        cl_mem mo = chk_dev_out(c, o_dev, pc->o_n * es, &oo);
        cl_mem ml = chk_dev_out(c, lse_dev, pc->lse_n * 4, &ol);
        sd = c->dm_failed ? CLVARLEN_SUCCESS
                          : clvarlen_cl_paged_attention_forward(c->dev, p, mq, oq, mk, ok, mv, ov,
                                                                mcu, ocu, mpt, opt, mcl, ocl, mo,
                                                                oo, ml, ol, 0, NULL, &ev);
        sd = chk_dev_finish(c, sd, ev);
#endif
    } else {
        sd = clvarlen_paged_attention_forward(c->dev, p, pc->q, pc->kc, pc->vc, pc->cu_q, pc->pt,
                                              pc->cache_len, o_dev, no_lse ? NULL : lse_dev);
    }
    clvarlen_status sc = clvarlen_paged_attention_forward(c->cpu, p, pc->q, pc->kc, pc->vc,
                                                          pc->cu_q, pc->pt, pc->cache_len, o_cpu,
                                                          lse_cpu);
    if (!chk_call(c, 0, sd) || !chk_call(c, 1, sc))
        return;
    const void *od = dense_o(c, pc, o_dev, "device o gap");
    const void *oc = dense_o(c, pc, o_cpu, "cpu o gap");
    if (!od || !oc)
        return;
    char what[140];
    snprintf(what, sizeof what, "o [%s]", pc->desc);
    chk_close(c, what, od, oc, p->dtype, (size_t)(p->total_q * p->heads_q * dv),
              tu_tolerance(p->dtype));
    if (no_lse) {
        chk_untouched(c, "device lse (NULL given)", lse_dev, pc->lse_n * 4);
    } else {
        snprintf(what, sizeof what, "lse [%s]", pc->desc);
        chk_close(c, what, lse_dev, lse_cpu, CLVARLEN_DTYPE_F32, pc->lse_n, 1e-4);
    }
    check_gathered(c, pc, oc, lse_cpu);
    if (!c->cl_case && c->case_i % 4 == 2)
        check_errors(c, pc);
}

int check_paged_attention(clvarlen_context *dev, clvarlen_context *cpu, const ct_options *opt,
                          ct_row *row)
{
    chk c;
    chk_begin(&c, dev, cpu, opt, row, "paged-attention");
    const int n_cases = opt->quick ? 9 : 27;
    for (; c.case_i < n_cases && !c.stop; c.case_i++) {
        if (!chk_case_begin(&c))
            continue;
        pcase pc;
        if (make_pcase(&c, c.case_i, &pc) == 0)
            run_pcase(&c, &pc);
        chk_end_case(&c);
    }
    return chk_finish(&c);
}

/* ================================================================ cache append check */

/* The SPEC's append, element by element with the kit's round-to-nearest-even. */
static void append_ref(const clvarlen_kv_append_params *p, const void *x, int64_t xs, int32_t dim,
                       const int64_t *slot, void *cache)
{
    for (int64_t t = 0; t < p->n_tokens; t++) {
        if (slot[t] < 0)
            continue;
        for (int64_t e = 0; e < (int64_t)p->heads_kv * dim; e++)
            tu_set(cache, p->cache_dtype, (size_t)(slot[t] * p->heads_kv * dim + e),
                   tu_get(x, p->dtype, (size_t)(t * xs + e)));
    }
}

int check_kv_append(clvarlen_context *dev, clvarlen_context *cpu, const ct_options *opt,
                    ct_row *row)
{
    static const int dims[] = {128, 64, 80, 5, 256, 32};
    chk c;
    chk_begin(&c, dev, cpu, opt, row, "kv-append");
    const int n_cases = opt->quick ? 6 : 12;
    for (; c.case_i < n_cases && !c.stop; c.case_i++) {
        if (!chk_case_begin(&c))
            continue;
        const int i = c.case_i;
        clvarlen_kv_append_params p;
        clvarlen_kv_append_params_init(&p);
        p.dtype = dtypes[i % 3];
        p.cache_dtype = dtypes[(i + i / 3) % 3];
        p.page_size = page_sizes[(i / 2) % 3];
        p.heads_kv = (int32_t)chk_rnd(&c, 1, 4);
        p.head_dim = dims[i % 6];
        if (i % 4 == 3)
            p.head_dim_v = p.head_dim == 64 ? 48 : 64;
        const int32_t dv = p.head_dim_v ? p.head_dim_v : p.head_dim;
        p.num_pages = chk_rnd(&c, 1, opt->quick ? 40 : 200);
        const int64_t slots = p.num_pages * p.page_size;
        p.n_tokens = i == 4 ? 0 : chk_rnd(&c, 1, slots < 3000 ? slots : 3000);
        if (chk_unif(&c) < 0.3) {
            p.k_stride = (int64_t)p.heads_kv * p.head_dim + chk_rnd(&c, 1, 9);
            p.v_stride = (int64_t)p.heads_kv * dv + chk_rnd(&c, 1, 9);
        }
        const int64_t ks = p.k_stride ? p.k_stride : (int64_t)p.heads_kv * p.head_dim;
        const int64_t vs = p.v_stride ? p.v_stride : (int64_t)p.heads_kv * dv;
        const size_t es = clvarlen_dtype_size(p.dtype), ces = clvarlen_dtype_size(p.cache_dtype);
        const size_t kb = (size_t)(p.n_tokens * ks) * es + 8;
        const size_t vb = (size_t)(p.n_tokens * vs) * es + 8;
        const size_t kcn = (size_t)(slots * p.heads_kv * p.head_dim);
        const size_t vcn = (size_t)(slots * p.heads_kv * dv);
        void *k = chk_alloc(&c, kb), *v = chk_alloc(&c, vb);
        int64_t *slot = chk_alloc(&c, (size_t)p.n_tokens * 8 + 8);
        int64_t *perm = chk_alloc(&c, (size_t)slots * 8);
        void *kc[4], *vc[4]; /* initial, device, cpu, SPEC */
        for (int j = 0; j < 4; j++) {
            kc[j] = chk_alloc(&c, kcn * ces);
            vc[j] = chk_alloc(&c, vcn * ces);
        }
        if (c.oom)
            goto next;
        ct_fill(&c.rng, k, p.dtype, (size_t)(p.n_tokens * ks), 1.0);
        ct_fill(&c.rng, v, p.dtype, (size_t)(p.n_tokens * vs), 1.0);
        ct_fill(&c.rng, kc[0], p.cache_dtype, kcn, 1.0);
        ct_fill(&c.rng, vc[0], p.cache_dtype, vcn, 1.0);
        for (int j = 1; j < 4; j++) {
            memcpy(kc[j], kc[0], kcn * ces);
            memcpy(vc[j], vc[0], vcn * ces);
        }
        /* distinct random slots (a partial shuffle), some tokens skipped */
        for (int64_t j = 0; j < slots; j++)
            perm[j] = j;
        for (int64_t t = 0; t < p.n_tokens; t++) {
            int64_t j = chk_rnd(&c, t, slots - 1), s = perm[j];
            perm[j] = perm[t];
            perm[t] = s;
            slot[t] = chk_unif(&c) < 0.15 ? -1 : s;
        }
        clvarlen_status sd = CLVARLEN_SUCCESS;
        if (c.cl_case) {
#if CLVARLEN_HAVE_OPENCL
            size_t ok, ov, os, okc, ovc;
            cl_event ev = NULL;
            cl_mem mk = chk_dev_in(&c, k, kb, &ok), mv = chk_dev_in(&c, v, vb, &ov);
            cl_mem ms = chk_dev_in(&c, slot, (size_t)p.n_tokens * 8 + 8, &os);
            cl_mem mkc = chk_dev_out(&c, kc[1], kcn * ces, &okc);
            cl_mem mvc = chk_dev_out(&c, vc[1], vcn * ces, &ovc);
            sd = c.dm_failed ? CLVARLEN_SUCCESS
                             : clvarlen_cl_kv_cache_append(dev, &p, mk, ok, mv, ov, ms, os, mkc,
                                                           okc, mvc, ovc, 0, NULL, &ev);
            sd = chk_dev_finish(&c, sd, ev);
#endif
        } else {
            sd = clvarlen_kv_cache_append(dev, &p, k, v, slot, kc[1], vc[1]);
        }
        clvarlen_status sc = clvarlen_kv_cache_append(cpu, &p, k, v, slot, kc[2], vc[2]);
        if (!chk_call(&c, 0, sd) || !chk_call(&c, 1, sc))
            goto next;
        append_ref(&p, k, ks, p.head_dim, slot, kc[3]);
        append_ref(&p, v, vs, dv, slot, vc[3]);
        chk_same(&c, "k_cache", kc[1], kc[2], p.cache_dtype, kcn);
        chk_same(&c, "v_cache", vc[1], vc[2], p.cache_dtype, vcn);
        chk_same(&c, "k_cache (cpu vs SPEC)", kc[2], kc[3], p.cache_dtype, kcn);
        chk_same(&c, "v_cache (cpu vs SPEC)", vc[2], vc[3], p.cache_dtype, vcn);
        /* Errors on the host entry points (the cl_mem one reports duplicates only with
         * checks on): a slot out of range, then two tokens on one slot; nothing written. */
        for (int what = 0; what < 2 && !c.cl_case && p.n_tokens >= 2; what++) {
            int64_t s0 = slot[0], s1 = slot[1];
            if (what == 0)
                slot[1] = i % 2 ? -2 : slots;
            else
                slot[0] = slot[1] = perm[0];
            clvarlen_status want = what == 0 ? CLVARLEN_ERROR_INDEX_OUT_OF_RANGE
                                             : CLVARLEN_ERROR_INVALID_ARGUMENT;
            for (int on_cpu = 0; on_cpu < 2; on_cpu++) {
                memcpy(kc[1], kc[0], kcn * ces);
                memcpy(vc[1], vc[0], vcn * ces);
                chk_expect(&c, on_cpu,
                           clvarlen_kv_cache_append(on_cpu ? cpu : dev, &p, k, v, slot, kc[1],
                                                    vc[1]),
                           want);
                chk_same(&c, what ? "k_cache after a duplicate slot" : "k_cache after a bad slot",
                         kc[1], kc[0], p.cache_dtype, kcn);
                chk_same(&c, what ? "v_cache after a duplicate slot" : "v_cache after a bad slot",
                         vc[1], vc[0], p.cache_dtype, vcn);
            }
            slot[0] = s0;
            slot[1] = s1;
        }
    next:
        chk_end_case(&c);
    }
    return chk_finish(&c);
}
