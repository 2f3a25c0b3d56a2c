/* oclgrind-cases: the paged KV cache (SPEC 1.1) on tiny shapes; see
 * oclgrind-cases.c for the harness. Three rows (a decode row, an empty row,
 * a row of two queries) over a cache of small pages in shuffled order, with
 * garbage in the page-table entries past each row's used pages, so a kernel
 * that reads an unused entry or a row of another page shows up as an
 * out-of-bounds access or a mismatch with the CPU fallback.
 * CLVARLEN_ATTENTION_KERNEL=mma runs the NVIDIA kernels (the packed
 * tensor-core kernel and attn_paged_nv) in their emulated forms;
 * CLVARLEN_PAGED_TUNING=gather=1 the gathered prefill (paged_gather_cu,
 * paged_gather, then the packed kernels).
 */
#include "oclgrind-cases.h"

#include <stdlib.h>
#include <string.h>

enum {
    PG_MMA = 1,     /* the NVIDIA kernels, emulated */
    PG_SPLIT = 2,   /* num_splits 4: partials (one of them empty) and attn_merge */
    PG_PREFILL = 4, /* max_seqlen_q unknown and longer rows: the tiled kernels */
    PG_CLMEM = 8,   /* the cl_mem entry point with device checks */
    PG_PS1 = 16,    /* page size 1 (else 3) */
    PG_MHA = 32,    /* heads_kv = heads_q (else GQA 2:1) */
    PG_GATHER = 64, /* rows gathered into packed K/V first (CLVARLEN_PAGED_TUNING gather=1) */
};

#define PG_ROWS 3
#define PG_PITCH 9 /* page-table columns: max_pages (at most 8) plus one */

typedef struct paged_bufs {
    clvarlen_paged_params p;
    int32_t lq[PG_ROWS], cs[PG_ROWS], *cuq, pt[PG_ROWS * PG_PITCH];
    void *q, *kc, *vc, *o[2];
    float *lse[2];
    size_t cache_elems, o_elems, lse_elems;
} paged_bufs;

static int paged_setup(oc_run *r, const oc_case *c, paged_bufs *b)
{
    const int f = c->c;
    const int32_t lq_dec[PG_ROWS] = {1, 0, 2}, lq_pre[PG_ROWS] = {5, 0, 3};
    const int32_t cs[PG_ROWS] = {5, 0, 7};
    clvarlen_paged_params *p = &b->p;
    clvarlen_paged_params_init(p);
    p->dtype = (clvarlen_dtype)c->a;
    p->n_rows = PG_ROWS;
    p->page_size = f & PG_PS1 ? 1 : 3;
    p->max_pages = f & PG_PS1 ? 8 : 3; /* capacity 8 or 9 tokens */
    p->page_table_stride = PG_PITCH;
    p->heads_q = 2;
    p->heads_kv = f & PG_MHA ? 2 : 1;
    p->head_dim = c->b;
    p->causal = 1;
    p->num_splits = f & PG_SPLIT ? 4 : 0;
    p->max_seqlen_q = f & PG_PREFILL ? 0 : 2;
    memcpy(b->lq, f & PG_PREFILL ? lq_pre : lq_dec, sizeof b->lq);
    memcpy(b->cs, cs, sizeof b->cs);
    b->cuq = oc_cu(b->lq, PG_ROWS);
    if (!b->cuq)
        return oc_fail(r, "out of memory");
    p->total_q = b->cuq[PG_ROWS];
    /* Pages in shuffled order (page i of row b: (5 b + 3 i + 1) mod num_pages);
     * unused entries hold garbage the kernels must never read. */
    p->num_pages = PG_ROWS * p->max_pages + 1;
    for (int row = 0; row < PG_ROWS; row++) {
        const int used = (b->cs[row] + p->page_size - 1) / p->page_size;
        for (int i = 0; i < PG_PITCH; i++)
            b->pt[row * PG_PITCH + i] =
                i < used ? (int32_t)((5 * row + 3 * i + 1) % p->num_pages) : (i % 2 ? -9 : 1 << 30);
    }
    const size_t dq = (size_t)p->head_dim, hk = (size_t)p->heads_kv;
    b->cache_elems = (size_t)p->num_pages * (size_t)p->page_size * hk * dq;
    b->q = oc_random(r, p->dtype, (size_t)p->total_q * 2 * dq);
    b->kc = oc_random(r, p->dtype, b->cache_elems);
    b->vc = oc_random(r, p->dtype, b->cache_elems);
    b->o_elems = (size_t)p->total_q * 2 * dq;
    b->lse_elems = (size_t)p->total_q * 2;
    b->o[0] = oc_alloc2(b->o_elems * clvarlen_dtype_size(p->dtype), &b->o[1]);
    void *l1;
    b->lse[0] = oc_alloc2(b->lse_elems * sizeof(float), &l1);
    b->lse[1] = l1;
    if (!b->q || !b->kc || !b->vc || !b->o[0] || !b->lse[0])
        return oc_fail(r, "out of memory");
    return 0;
}

static void paged_free(paged_bufs *b)
{
    free(b->cuq);
    free(b->q);
    free(b->kc);
    free(b->vc);
    for (int i = 0; i < 2; i++) {
        free(b->o[i]);
        free(b->lse[i]);
    }
}

/* The forward through the cl_mem entry point (device checks on: check_paged). */
static clvarlen_status paged_clmem(oc_run *r, paged_bufs *b)
{
    const clvarlen_paged_params *p = &b->p;
    const size_t es = clvarlen_dtype_size(p->dtype);
    cl_mem m[8] = {
        oc_buf(r, b->q, (size_t)p->total_q * 2 * (size_t)p->head_dim * es),
        oc_buf(r, b->kc, b->cache_elems * es),
        oc_buf(r, b->vc, b->cache_elems * es),
        oc_buf(r, b->cuq, (PG_ROWS + 1) * sizeof(int32_t)),
        oc_buf(r, b->pt, sizeof b->pt),
        oc_buf(r, b->cs, sizeof b->cs),
        oc_buf(r, b->o[0], b->o_elems * es),
        oc_buf(r, b->lse[0], b->lse_elems * sizeof(float)),
    };
    clvarlen_status st = clvarlen_cl_paged_attention_forward(
        r->dev, p, m[0], 0, m[1], 0, m[2], 0, m[3], 0, m[4], 0, m[5], 0, m[6], 0, m[7], 0, 0,
        NULL, NULL);
    if (st == CLVARLEN_SUCCESS && (oc_read(r, m[6], b->o[0], b->o_elems * es) ||
                                   oc_read(r, m[7], b->lse[0], b->lse_elems * sizeof(float))))
        st = CLVARLEN_ERROR_OPENCL;
    for (int i = 0; i < 8; i++)
        if (m[i])
            clReleaseMemObject(m[i]);
    return st;
}

/* paged_attention_forward: a = dtype, b = head_dim, c = PG_* flags. */
static int case_paged(oc_run *r, const oc_case *c)
{
    paged_bufs b;
    memset(&b, 0, sizeof b);
    int rc = 1;
    if (paged_setup(r, c, &b))
        goto out;
    if (c->c & PG_MMA)
        setenv("CLVARLEN_ATTENTION_KERNEL", "mma", 1);
    if (c->c & PG_GATHER)
        setenv("CLVARLEN_PAGED_TUNING", "gather=1", 1);
    clvarlen_status st[2];
    if (c->c & PG_CLMEM)
        st[0] = paged_clmem(r, &b);
    else
        st[0] = clvarlen_paged_attention_forward(r->dev, &b.p, b.q, b.kc, b.vc, b.cuq, b.pt,
                                                 b.cs, b.o[0], b.lse[0]);
    unsetenv("CLVARLEN_ATTENTION_KERNEL");
    unsetenv("CLVARLEN_PAGED_TUNING");
    st[1] = clvarlen_paged_attention_forward(r->cpu, &b.p, b.q, b.kc, b.vc, b.cuq, b.pt, b.cs,
                                             b.o[1], b.lse[1]);
    if (oc_status(r, "paged_attention_forward", st[0], st[1], CLVARLEN_SUCCESS))
        goto out;
    rc = oc_close(r, "o", b.o[0], b.o[1], b.p.dtype, b.o_elems) ||
         oc_close(r, "lse", b.lse[0], b.lse[1], CLVARLEN_DTYPE_F32, b.lse_elems);
out:
    paged_free(&b);
    return rc;
}

/* kv_cache_append through the cl_mem entry point (device checks on: the slot
 * range check), a = input dtype, b = cache dtype, c = head_dim: 4 tokens, one
 * skipped, into a cache of 3 pages of 3; the caches must equal the CPU
 * fallback's bit for bit. */
static int case_append(oc_run *r, const oc_case *c)
{
    clvarlen_kv_append_params p;
    clvarlen_kv_append_params_init(&p);
    p.dtype = (clvarlen_dtype)c->a;
    p.cache_dtype = (clvarlen_dtype)c->b;
    p.n_tokens = 4;
    p.num_pages = 3;
    p.page_size = 3;
    p.heads_kv = 2;
    p.head_dim = c->c;
    const int64_t slots[4] = {4, -1, 0, 8};
    const size_t row = 2 * (size_t)c->c, cache_elems = 9 * row;
    const size_t ies = clvarlen_dtype_size(p.dtype), cb = cache_elems *
                                                          clvarlen_dtype_size(p.cache_dtype);
    void *k = oc_random(r, p.dtype, 4 * row), *v = oc_random(r, p.dtype, 4 * row);
    void *kc = oc_random(r, p.cache_dtype, cache_elems);
    void *vc = oc_random(r, p.cache_dtype, cache_elems);
    void *dev[2] = {malloc(cb), malloc(cb)}, *cpu[2] = {malloc(cb), malloc(cb)};
    cl_mem m[5] = {NULL, NULL, NULL, NULL, NULL};
    int rc = 1;
    if (!k || !v || !kc || !vc || !dev[0] || !dev[1] || !cpu[0] || !cpu[1]) {
        oc_fail(r, "out of memory");
        goto out;
    }
    m[0] = oc_buf(r, k, 4 * row * ies);
    m[1] = oc_buf(r, v, 4 * row * ies);
    m[2] = oc_buf(r, slots, sizeof slots);
    m[3] = oc_buf(r, kc, cb);
    m[4] = oc_buf(r, vc, cb);
    clvarlen_status st[2];
    st[0] = clvarlen_cl_kv_cache_append(r->dev, &p, m[0], 0, m[1], 0, m[2], 0, m[3], 0, m[4], 0,
                                        0, NULL, NULL);
    if (st[0] == CLVARLEN_SUCCESS && (oc_read(r, m[3], dev[0], cb) || oc_read(r, m[4], dev[1], cb)))
        st[0] = CLVARLEN_ERROR_OPENCL;
    memcpy(cpu[0], kc, cb);
    memcpy(cpu[1], vc, cb);
    st[1] = clvarlen_kv_cache_append(r->cpu, &p, k, v, slots, cpu[0], cpu[1]);
    if (oc_status(r, "kv_cache_append", st[0], st[1], CLVARLEN_SUCCESS))
        goto out;
    rc = oc_same(r, "k_cache", dev[0], cpu[0], cb) || oc_same(r, "v_cache", dev[1], cpu[1], cb);
out:
    for (int i = 0; i < 5; i++)
        if (m[i])
            clReleaseMemObject(m[i]);
    free(k);
    free(v);
    free(kc);
    free(vc);
    for (int i = 0; i < 2; i++) {
        free(dev[i]);
        free(cpu[i]);
    }
    return rc;
}

#define F32 CLVARLEN_DTYPE_F32
#define F16 CLVARLEN_DTYPE_F16
#define BF16 CLVARLEN_DTYPE_BF16

const oc_case oc_paged_cases[] = {
    {"paged-decode-f32-d16", case_paged, F32, 16, 0},
    {"paged-decode-f16-d16-split-clmem", case_paged, F16, 16, PG_SPLIT | PG_CLMEM},
    {"paged-decode-bf16-d32-ps1-mha", case_paged, BF16, 32, PG_PS1 | PG_MHA},
    {"paged-prefill-f32-d16", case_paged, F32, 16, PG_PREFILL},
    {"paged-mma-decode-bf16-d16-split", case_paged, BF16, 16, PG_MMA | PG_SPLIT},
    {"paged-mma-decode-f16-d16-mha-split-clmem", case_paged, F16, 16,
     PG_MMA | PG_MHA | PG_SPLIT | PG_CLMEM},
    {"paged-mma-prefill-bf16-d16-ps1", case_paged, BF16, 16, PG_MMA | PG_PREFILL | PG_PS1},
    {"paged-gather-prefill-f16-d16-clmem", case_paged, F16, 16, PG_GATHER | PG_PREFILL | PG_CLMEM},
    {"paged-mma-gather-prefill-bf16-d16", case_paged, BF16, 16, PG_MMA | PG_GATHER | PG_PREFILL},
    {"kv-append-f32-bf16", case_append, F32, BF16, 16},
    {"kv-append-bf16-bf16", case_append, BF16, BF16, 16},
    {"kv-append-f16-f32-d5", case_append, F16, F32, 5},
    {NULL, NULL, 0, 0, 0},
};
