/* The paged KV cache on the OpenCL device only (linked into test-paged-cl,
 * which also runs every case of test-paged.c and test-paged-append.c through
 * the host-memory entry points): clvarlen_cl_paged_attention_forward and
 * clvarlen_cl_kv_cache_append on device buffers at byte offsets, against the
 * oracle; with device checks on, bad page-table entries, cache_seqlens and
 * slots are reported and nothing is written; with checks off, they give
 * unspecified values but no write outside the outputs. Exits 77 without an
 * OpenCL device.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test-paged.h"
#include "kit-cl.h"

static clvarlen_context *checked_ctx(void)
{
    clvarlen_options *opt = NULL;
    ck_assert_int_eq(clvarlen_options_create(&opt), CLVARLEN_SUCCESS);
    ck_assert_int_eq(clvarlen_options_set_device(opt, tu_cl_device_spec()), CLVARLEN_SUCCESS);
    ck_assert_int_eq(clvarlen_options_set_device_checks(opt, 1), CLVARLEN_SUCCESS);
    clvarlen_context *ctx = NULL;
    ck_assert_int_eq(clvarlen_context_create(opt, &ctx), CLVARLEN_SUCCESS);
    clvarlen_options_destroy(opt);
    return ctx;
}

/* The device copies of a batch, each at byte offset PAD. */
enum { PAD = 48 };
typedef struct pdev {
    tu_clbuf q, kc, vc, cu, pt, cs, o, lse;
    size_t ob, lb;
} pdev;

static pdev pdev_make(clvarlen_context *ctx, const pcase *c, const pbatch *b)
{
    pdev d;
    size_t es = clvarlen_dtype_size(c->dtype);
    d.ob = (size_t)(b->tq * b->os) * es;
    d.lb = (size_t)(b->tq * c->hq) * sizeof(float);
    d.q = tu_clbuf_make(ctx, (size_t)(b->tq * b->qs) * es, PAD, b->q);
    d.kc = tu_clbuf_make(ctx, paged_cache_elems(b, c, c->d) * es, PAD, b->k_cache);
    d.vc = tu_clbuf_make(ctx, paged_cache_elems(b, c, c->dv) * es, PAD, b->v_cache);
    d.cu = tu_clbuf_make(ctx, (size_t)(b->n + 1) * 4, PAD, b->cu_q);
    d.pt = tu_clbuf_make(ctx, (size_t)(b->n * b->pt_stride) * 4, PAD, b->page_table);
    d.cs = tu_clbuf_make(ctx, (size_t)b->n * 4, PAD, b->cache_seqlens);
    d.o = tu_clbuf_make(ctx, d.ob, PAD, NULL);
    d.lse = tu_clbuf_make(ctx, d.lb, PAD, NULL);
    return d;
}

static void pdev_free(pdev *d)
{
    tu_clbuf *all[] = {&d->q, &d->kc, &d->vc, &d->cu, &d->pt, &d->cs, &d->o, &d->lse};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        tu_clbuf_free(all[i]);
}

/* The forward on d's buffers, with pt/cs replaceable (bad copies) and an event. */
static clvarlen_status pdev_forward(clvarlen_context *ctx, const clvarlen_paged_params *p,
                                    pdev *d, cl_mem cu, cl_mem pt, cl_mem cs, int no_lse)
{
    cl_event ev = NULL;
    clvarlen_status st = clvarlen_cl_paged_attention_forward(
        ctx, p, d->q.mem, PAD, d->kc.mem, PAD, d->vc.mem, PAD, cu, PAD, pt, PAD, cs, PAD,
        d->o.mem, PAD, no_lse ? NULL : d->lse.mem, PAD, 0, NULL, &ev);
    if (st == CLVARLEN_SUCCESS)
        tu_cl_wait_release(&ev, "cl paged forward event");
    return st;
}

/* A random batch through the cl_mem entry point, compared with the oracle; the
 * bytes around the output regions and the inputs stay as they were. */
static void cl_forward_case(clvarlen_context *ctx, const pcase *c, const char *label)
{
    tu_rng r = tu_rng_make(c->seed);
    pbatch b;
    make_pbatch(c, &r, &b);
    clvarlen_paged_params p;
    fill_paged_params(c, &b, &p);
    pdev d = pdev_make(ctx, c, &b);
    clvarlen_status st = pdev_forward(ctx, &p, &d, d.cu.mem, d.pt.mem, d.cs.mem, c->no_lse);
    ck_assert_msg(st == CLVARLEN_SUCCESS, "%s: %s (%s)", label, clvarlen_status_name(st),
                  clvarlen_last_error(ctx));
    const void *o = tu_clbuf_fetch(ctx, &d.o, label);
    const float *lse = tu_clbuf_fetch(ctx, &d.lse, label);
    void *dense = paged_dense_o(c, &b, o);
    paged_check_result(c, &b, dense, c->no_lse ? NULL : lse, label);
    if (c->no_lse)
        tu_clbuf_untouched(ctx, &d.lse, "lse written although NULL was passed");
    /* the inputs were not written either */
    ck_assert_int_eq(memcmp(tu_clbuf_fetch(ctx, &d.kc, label), b.k_cache, d.kc.bytes), 0);
    ck_assert_int_eq(memcmp(tu_clbuf_fetch(ctx, &d.pt, label), b.page_table, d.pt.bytes), 0);
    free(dense);
    pdev_free(&d);
    free_pbatch(&b);
}

START_TEST(test_cl_forward)
{
    clvarlen_context *ctx = tu_cl_context();
    pcase c = paged_base_case();
    c.causal = 1;
    c.seed = 101;
    cl_forward_case(ctx, &c, "cl decode f32 ps 16");
    c.page_size = 1;
    c.num_splits = 3;
    c.msq = MSQ_ZERO;
    c.seed = 102;
    cl_forward_case(ctx, &c, "cl decode f32 ps 1 splits 3 msq 0");
    c = paged_base_case();
    c.dtype = CLVARLEN_DTYPE_BF16;
    c.hk = 2;
    c.page_size = 7;
    c.mode = PM_MIXED;
    c.max_lq = 40;
    c.max_cache = 200;
    c.causal = 1;
    c.num_splits = 2;
    c.o_pad = 8;
    c.extra_cols = 2;
    c.seed = 103;
    cl_forward_case(ctx, &c, "cl mixed bf16 ps 7 splits 2 o stride");
    c.no_lse = 1;
    c.msq = MSQ_ZERO;
    c.seed = 104;
    cl_forward_case(ctx, &c, "cl mixed bf16 no lse msq 0");
    clvarlen_context_destroy(ctx);
    /* with device checks on, a valid batch passes them: garbage past the used pages, empty
     * rows whose every entry is garbage */
    ctx = checked_ctx();
    c = paged_base_case();
    c.mode = PM_MIXED;
    c.max_rows = 8;
    c.max_lq = 4;
    c.causal = 1;
    c.seed = 105;
    cl_forward_case(ctx, &c, "cl checked verify-like");
    clvarlen_context_destroy(ctx);
}
END_TEST

/* An append through the cl_mem entry point; `bad` >= 0 replaces token bad's
 * slot with one past the caches, which a checked context reports (nothing
 * written) and an unchecked one skips. */
static void cl_append_case(clvarlen_context *ctx, clvarlen_dtype dt, clvarlen_dtype cdt,
                           int checked, int64_t bad, uint64_t seed)
{
    const int32_t hk = 2, d = 64, ps = 16, pages = 6, n = 50, pad = 8;
    const int64_t slots = (int64_t)pages * ps, ks = hk * d + pad;
    tu_rng r = tu_rng_make(seed);
    clvarlen_kv_append_params p;
    clvarlen_kv_append_params_init(&p);
    p.dtype = dt;
    p.cache_dtype = cdt;
    p.n_tokens = n;
    p.num_pages = pages;
    p.page_size = ps;
    p.heads_kv = hk;
    p.head_dim = d;
    p.k_stride = ks;
    size_t es = clvarlen_dtype_size(dt), ces = clvarlen_dtype_size(cdt);
    void *k = tu_xmalloc(es * (size_t)(n * ks)), *v = tu_xmalloc(es * (size_t)(n * hk * d));
    tu_fill_random(&r, k, dt, (size_t)(n * ks), 1.0);
    tu_fill_random(&r, v, dt, (size_t)(n * hk * d), 1.0);
    int64_t *map = tu_xmalloc(sizeof(int64_t) * (size_t)n);
    for (int64_t t = 0; t < n; t++)
        map[t] = (t * 37 + 5) % slots; /* distinct: 37 is prime to 96 */
    map[3] = -1;
    if (bad >= 0)
        map[bad] = slots;
    size_t cb = (size_t)(slots * hk * d) * ces;
    tu_clbuf mk = tu_clbuf_make(ctx, es * (size_t)(n * ks), PAD, k);
    tu_clbuf mv = tu_clbuf_make(ctx, es * (size_t)(n * hk * d), PAD, v);
    tu_clbuf mm = tu_clbuf_make(ctx, sizeof(int64_t) * (size_t)n, PAD, map);
    tu_clbuf mkc = tu_clbuf_make(ctx, cb, PAD, NULL), mvc = tu_clbuf_make(ctx, cb, PAD, NULL);
    cl_event ev = NULL;
    clvarlen_status st = clvarlen_cl_kv_cache_append(ctx, &p, mk.mem, PAD, mv.mem, PAD, mm.mem,
                                                     PAD, mkc.mem, PAD, mvc.mem, PAD, 0, NULL,
                                                     &ev);
    if (checked && bad >= 0) {
        ck_assert_msg(st == CLVARLEN_ERROR_INDEX_OUT_OF_RANGE, "checked bad slot: %s (%s)",
                      clvarlen_status_name(st), clvarlen_last_error(ctx));
        tu_clbuf_untouched(ctx, &mkc, "k_cache written despite a bad slot");
        tu_clbuf_untouched(ctx, &mvc, "v_cache written despite a bad slot");
    } else {
        ck_assert_msg(st == CLVARLEN_SUCCESS, "cl append: %s", clvarlen_last_error(ctx));
        tu_cl_wait_release(&ev, "cl append event");
        /* the oracle over the caches' previous contents (the pattern), the bad token skipped */
        unsigned char *k_ref = tu_xmalloc(cb), *v_ref = tu_xmalloc(cb);
        for (size_t i = 0; i < cb; i++)
            k_ref[i] = v_ref[i] = tu_clbuf_pattern(PAD + i);
        if (bad >= 0)
            map[bad] = -1;
        kv_append_ref(&p, k, v, map, k_ref, v_ref);
        tu_assert_bytes_eq(tu_clbuf_fetch(ctx, &mkc, "cl k_cache"), k_ref, cb, "cl k_cache");
        tu_assert_bytes_eq(tu_clbuf_fetch(ctx, &mvc, "cl v_cache"), v_ref, cb, "cl v_cache");
        free(k_ref);
        free(v_ref);
    }
    tu_clbuf *all[] = {&mk, &mv, &mm, &mkc, &mvc};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        tu_clbuf_free(all[i]);
    free(k);
    free(v);
    free(map);
}

START_TEST(test_cl_append)
{
    clvarlen_context *ctx = tu_cl_context();
    cl_append_case(ctx, CLVARLEN_DTYPE_F32, CLVARLEN_DTYPE_BF16, 0, -1, 111);
    cl_append_case(ctx, CLVARLEN_DTYPE_BF16, CLVARLEN_DTYPE_F16, 0, -1, 112);
    cl_append_case(ctx, CLVARLEN_DTYPE_F16, CLVARLEN_DTYPE_F32, 0, 7, 113); /* skipped */
    clvarlen_context_destroy(ctx);
    ctx = checked_ctx();
    cl_append_case(ctx, CLVARLEN_DTYPE_F32, CLVARLEN_DTYPE_F32, 1, -1, 114);
    cl_append_case(ctx, CLVARLEN_DTYPE_F32, CLVARLEN_DTYPE_BF16, 1, 9, 115);
    clvarlen_context_destroy(ctx);
}
END_TEST

/* Device-resident page table, cache_seqlens and cu_seqlens_q that are invalid:
 * with checks on, the documented status and nothing written; with checks off
 * (a bad page index only), the call completes and writes nothing outside o and lse. */
static void cl_bad_inputs(clvarlen_context *ctx, int checked)
{
    pcase c = paged_base_case();
    c.mode = PM_PREFILL;
    c.max_lq = 3;
    c.max_cache = 100;
    c.causal = 1;
    c.seed = 121;
    tu_rng r = tu_rng_make(c.seed);
    pbatch b;
    make_pbatch(&c, &r, &b);
    clvarlen_paged_params p;
    fill_paged_params(&c, &b, &p);
    pdev d = pdev_make(ctx, &c, &b);
    /* row 0 holds max_cache tokens, so its first page-table entry is used */
    int32_t *pt = tu_xmalloc((size_t)(b.n * b.pt_stride) * 4);
    memcpy(pt, b.page_table, (size_t)(b.n * b.pt_stride) * 4);
    pt[0] = (int32_t)b.num_pages;
    tu_clbuf bad_pt = tu_clbuf_make(ctx, (size_t)(b.n * b.pt_stride) * 4, PAD, pt);
    pt[0] = -3;
    tu_clbuf neg_pt = tu_clbuf_make(ctx, (size_t)(b.n * b.pt_stride) * 4, PAD, pt);
    int32_t *cs = tu_xmalloc((size_t)b.n * 4);
    memcpy(cs, b.cache_seqlens, (size_t)b.n * 4);
    cs[0] = b.max_pages * c.page_size + 1;
    tu_clbuf long_cs = tu_clbuf_make(ctx, (size_t)b.n * 4, PAD, cs);
    cs[0] = b.lq[0] - 1;
    tu_clbuf short_cs = tu_clbuf_make(ctx, (size_t)b.n * 4, PAD, cs);
    int32_t *cu = tu_xmalloc((size_t)(b.n + 1) * 4);
    memcpy(cu, b.cu_q, (size_t)(b.n + 1) * 4);
    cu[1] = (int32_t)b.tq + 1;
    tu_clbuf bad_cu = tu_clbuf_make(ctx, (size_t)(b.n + 1) * 4, PAD, cu);
    if (checked) {
        struct {
            cl_mem cu, pt, cs;
            clvarlen_status want;
            const char *what;
        } bad[] = {
            {d.cu.mem, bad_pt.mem, d.cs.mem, CLVARLEN_ERROR_INDEX_OUT_OF_RANGE, "page = num_pages"},
            {d.cu.mem, neg_pt.mem, d.cs.mem, CLVARLEN_ERROR_INDEX_OUT_OF_RANGE, "page -3"},
            {d.cu.mem, d.pt.mem, long_cs.mem, CLVARLEN_ERROR_INVALID_ARGUMENT, "cache too long"},
            {d.cu.mem, d.pt.mem, short_cs.mem, CLVARLEN_ERROR_INVALID_ARGUMENT, "cache < len_q"},
            {bad_cu.mem, d.pt.mem, d.cs.mem, CLVARLEN_ERROR_INVALID_CU_SEQLENS, "cu_seqlens_q"},
        };
        /* also with split-KV: its merge must not write either */
        for (int splits = 0; splits <= 2; splits += 2) {
            p.num_splits = splits;
            for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
                clvarlen_status st =
                    pdev_forward(ctx, &p, &d, bad[i].cu, bad[i].pt, bad[i].cs, 0);
                ck_assert_msg(st == bad[i].want, "checked %s (splits %d): got %s, want %s (%s)",
                              bad[i].what, splits, clvarlen_status_name(st),
                              clvarlen_status_name(bad[i].want), clvarlen_last_error(ctx));
                tu_clbuf_untouched(ctx, &d.o, bad[i].what);
                tu_clbuf_untouched(ctx, &d.lse, bad[i].what);
            }
        }
        p.num_splits = 0;
        /* a row longer than max_seqlen_q (the bound the kernel choice trusts) */
        int32_t max_lq = 0;
        for (int64_t i = 0; i < b.n; i++)
            max_lq = b.lq[i] > max_lq ? b.lq[i] : max_lq;
        if (max_lq > 1) {
            clvarlen_paged_params short_max = p;
            short_max.max_seqlen_q = max_lq - 1;
            clvarlen_status st = pdev_forward(ctx, &short_max, &d, d.cu.mem, d.pt.mem, d.cs.mem, 0);
            ck_assert_msg(st == CLVARLEN_ERROR_INVALID_ARGUMENT, "checked max_seqlen_q short: %s",
                          clvarlen_status_name(st));
            tu_clbuf_untouched(ctx, &d.o, "max_seqlen_q short");
            tu_clbuf_untouched(ctx, &d.lse, "max_seqlen_q short");
        }
    } else {
        /* unspecified values, but the call completes and stays inside o and lse */
        ck_assert_int_eq(pdev_forward(ctx, &p, &d, d.cu.mem, bad_pt.mem, d.cs.mem, 0),
                         CLVARLEN_SUCCESS);
        ck_assert_int_eq(pdev_forward(ctx, &p, &d, d.cu.mem, neg_pt.mem, d.cs.mem, 0),
                         CLVARLEN_SUCCESS);
        (void)tu_clbuf_fetch(ctx, &d.o, "unchecked bad page: o");
        (void)tu_clbuf_fetch(ctx, &d.lse, "unchecked bad page: lse");
        ck_assert_int_eq(memcmp(tu_clbuf_fetch(ctx, &d.kc, "k cache"), b.k_cache, d.kc.bytes), 0);
        ck_assert_int_eq(memcmp(tu_clbuf_fetch(ctx, &d.vc, "v cache"), b.v_cache, d.vc.bytes), 0);
        /* and the context still computes a valid batch correctly afterwards */
        ck_assert_int_eq(pdev_forward(ctx, &p, &d, d.cu.mem, d.pt.mem, d.cs.mem, 0),
                         CLVARLEN_SUCCESS);
        const void *o = tu_clbuf_fetch(ctx, &d.o, "after bad page");
        void *dense = paged_dense_o(&c, &b, o);
        paged_check_result(&c, &b, dense, tu_clbuf_fetch(ctx, &d.lse, "lse"), "after bad page");
        free(dense);
    }
    /* a k cache buffer one page short of num_pages: reported before anything runs */
    size_t es = clvarlen_dtype_size(c.dtype), page = (size_t)(c.page_size * c.hk * c.d) * es;
    tu_clbuf short_kc = tu_clbuf_make(ctx, d.kc.bytes - page, PAD, b.k_cache);
    clvarlen_status st = clvarlen_cl_paged_attention_forward(
        ctx, &p, d.q.mem, PAD, short_kc.mem, PAD, d.vc.mem, PAD, d.cu.mem, PAD,
        d.pt.mem, PAD, d.cs.mem, PAD, d.o.mem, PAD, d.lse.mem, PAD, 0, NULL, NULL);
    ck_assert_msg(st == CLVARLEN_ERROR_BUFFER_TOO_SMALL, "short k cache: %s",
                  clvarlen_status_name(st));
    tu_clbuf *all[] = {&bad_pt, &neg_pt, &long_cs, &short_cs, &bad_cu, &short_kc};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        tu_clbuf_free(all[i]);
    free(pt);
    free(cs);
    free(cu);
    pdev_free(&d);
    free_pbatch(&b);
}

START_TEST(test_cl_checks)
{
    clvarlen_context *ctx = checked_ctx();
    cl_bad_inputs(ctx, 1);
    clvarlen_context_destroy(ctx);
    ctx = tu_cl_context();
    cl_bad_inputs(ctx, 0);
    clvarlen_context_destroy(ctx);
}
END_TEST

/* The tiled kernels' tensor-core form built for the paged cache (native on
 * NVIDIA, its emulated form elsewhere), over rows too long for the decode kernel. */
START_TEST(test_cl_mma)
{
    setenv("CLVARLEN_ATTENTION_KERNEL", "mma", 1);
    tu_emulated_forms(1);
    clvarlen_context *ctx = tu_cl_context();
    pcase c = paged_base_case();
    c.dtype = CLVARLEN_DTYPE_BF16;
    c.hk = 2;
    c.page_size = 16;
    c.mode = PM_PREFILL;
    c.max_rows = 3;
    c.max_lq = 80;
    c.max_cache = 300;
    c.causal = 1;
    c.seed = 131;
    paged_run_seeds(ctx, c, 1, "mma bf16 prefill ps 16");
    c.dtype = CLVARLEN_DTYPE_F16;
    c.page_size = 7;
    c.mode = PM_MIXED;
    c.max_rows = 6;
    c.max_lq = 70;
    c.wl = 25;
    c.msq = MSQ_ZERO;
    c.seed = 132;
    paged_run_seeds(ctx, c, 1, "mma f16 mixed ps 7 window msq 0");
    clvarlen_context_destroy(ctx);
    unsetenv("CLVARLEN_ATTENTION_KERNEL");
    tu_emulated_forms(0);
}
END_TEST

START_TEST(test_cl_no_opencl)
{
    clvarlen_context *ctx = tu_cpu_context();
    clvarlen_paged_params p;
    clvarlen_paged_params_init(&p);
    clvarlen_kv_append_params a;
    clvarlen_kv_append_params_init(&a);
    ck_assert_int_eq(clvarlen_cl_paged_attention_forward(ctx, &p, NULL, 0, NULL, 0, NULL, 0, NULL,
                                                         0, NULL, 0, NULL, 0, NULL, 0, NULL, 0, 0,
                                                         NULL, NULL),
                     CLVARLEN_ERROR_NO_OPENCL);
    ck_assert_int_eq(clvarlen_cl_kv_cache_append(ctx, &a, NULL, 0, NULL, 0, NULL, 0, NULL, 0,
                                                 NULL, 0, 0, NULL, NULL),
                     CLVARLEN_ERROR_NO_OPENCL);
    clvarlen_context_destroy(ctx);
}
END_TEST

/* Long rows through packed K/V (CLVARLEN_PAGED_TUNING gather=1: every row
 * gathered, not only rows long enough for the automatic choice): the host and
 * cl_mem entry points, empty rows and rows with a cache but no queries, page
 * sizes 1, 7 and 16, strided o, no lse, the tensor-core kernel's emulated
 * form, the device checks (nothing written), unchecked bad pages (clamped,
 * inside the buffers), and a caller's scratch too small for the gathered rows
 * (the paged kernels run instead, same results). */
START_TEST(test_cl_gather)
{
    setenv("CLVARLEN_PAGED_TUNING", "gather=1", 1);
    clvarlen_context *ctx = tu_cl_context();
    pcase c = paged_base_case();
    c.hk = 2;
    c.mode = PM_PREFILL;
    c.max_rows = 4;
    c.max_lq = 90;
    c.max_cache = 400;
    c.causal = 1;
    c.seed = 141;
    paged_run_seeds(ctx, c, 1, "gather prefill f32 ps 16 causal");
    cl_forward_case(ctx, &c, "cl gather prefill f32 ps 16 causal");
    /* the gathered rows went through the scratch (the paged kernels' work list
     * alone is under 4 KiB here; the rows' K and V at capacity, over 100 KiB) */
    size_t held = 0;
    ck_assert_int_eq(clvarlen_cl_context_scratch_bytes(ctx, &held), CLVARLEN_SUCCESS);
    ck_assert_msg(held > 100000, "gathered prefill: %zu bytes of scratch", held);
    c = paged_base_case();
    c.dtype = CLVARLEN_DTYPE_BF16;
    c.hk = 2;
    c.page_size = 7;
    c.mode = PM_MIXED;
    c.max_rows = 7;
    c.max_lq = 40;
    c.max_cache = 200;
    c.softcap = 2.5f;
    c.o_pad = 8;
    c.extra_cols = 2;
    c.msq = MSQ_ZERO;
    c.seed = 142;
    cl_forward_case(ctx, &c, "cl gather mixed bf16 ps 7 softcap o stride");
    c.no_lse = 1;
    c.seed = 143;
    paged_run_seeds(ctx, c, 1, "gather mixed bf16 ps 7 no lse");
    c = paged_base_case();
    c.dtype = CLVARLEN_DTYPE_F16;
    c.page_size = 1;
    c.mode = PM_PREFILL;
    c.max_rows = 3;
    c.max_lq = 50;
    c.max_cache = 260;
    c.causal = 1;
    c.wl = 13;
    c.wr = 4;
    c.seed = 144;
    cl_forward_case(ctx, &c, "cl gather prefill f16 ps 1 window (13, 4)");
    cl_bad_inputs(ctx, 0);

    /* a caller's scratch with room for the paged kernels' work list only */
    cl_context clc = NULL;
    ck_assert_int_eq(clvarlen_context_get_cl(ctx, &clc, NULL, NULL), CLVARLEN_SUCCESS);
    cl_int err = CL_SUCCESS;
    cl_mem small = clCreateBuffer(clc, CL_MEM_READ_WRITE, 4096, NULL, &err);
    ck_assert(small != NULL);
    ck_assert_int_eq(clvarlen_cl_context_set_scratch(ctx, small, 4096), CLVARLEN_SUCCESS);
    c = paged_base_case();
    c.hk = 2;
    c.mode = PM_PREFILL;
    c.max_rows = 3;
    c.max_lq = 60;
    c.max_cache = 300;
    c.causal = 1;
    c.seed = 145;
    cl_forward_case(ctx, &c, "cl gather, scratch too small: paged kernels");
    ck_assert_int_eq(clvarlen_cl_context_set_scratch(ctx, NULL, 0), CLVARLEN_SUCCESS);
    clReleaseMemObject(small);
    clvarlen_context_destroy(ctx);

    ctx = checked_ctx();
    cl_bad_inputs(ctx, 1);
    clvarlen_context_destroy(ctx);

    setenv("CLVARLEN_ATTENTION_KERNEL", "mma", 1);
    tu_emulated_forms(1);
    ctx = tu_cl_context();
    c = paged_base_case();
    c.dtype = CLVARLEN_DTYPE_BF16;
    c.hk = 2;
    c.page_size = 16;
    c.mode = PM_MIXED;
    c.max_rows = 5;
    c.max_lq = 80;
    c.max_cache = 300;
    c.causal = 1;
    c.seed = 146;
    cl_forward_case(ctx, &c, "cl gather mma bf16 mixed ps 16");
    clvarlen_context_destroy(ctx);
    unsetenv("CLVARLEN_ATTENTION_KERNEL");
    tu_emulated_forms(0);
    unsetenv("CLVARLEN_PAGED_TUNING");
}
END_TEST

void paged_add_cl_cases(Suite *s)
{
    TCase *tc = tcase_create("cl_mem");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_cl_forward);
    tcase_add_test(tc, test_cl_append);
    tcase_add_test(tc, test_cl_checks);
    tcase_add_test(tc, test_cl_no_opencl);
    suite_add_tcase(s, tc);
    if (!tu_second_device()) { /* the emulated forms: the default device's (kit-check.h) */
        tc = tcase_create("mma");
        tcase_set_timeout(tc, 600);
        tcase_add_test(tc, test_cl_mma);
        suite_add_tcase(s, tc);
    }
    tc = tcase_create("gather");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_cl_gather);
    suite_add_tcase(s, tc);
}
