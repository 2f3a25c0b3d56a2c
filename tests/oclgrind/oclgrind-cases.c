/* oclgrind-cases: tiny cases of every kernel in cl/ on one OpenCL device,
 * each compared with the CPU fallback; run under Oclgrind by run-oclgrind.sh
 * (which fails on any error Oclgrind reports), fast enough for its
 * simulator: a handful of sequences of lengths 0, 1 and 5, head dims 16-64.
 *
 * Usage: oclgrind-cases [--list] [--device SPEC] [FILTER...]
 * A case runs when its name contains one of the filters (all without any).
 * The device: --device, else CLVARLEN_DEVICE, else "oclgrind". Exit status:
 * 0 every case passed, 1 a case failed, 77 no such device (meson's skip).
 * Each case's name goes to stderr before it runs, so that an error report
 * of Oclgrind's (also on stderr) can be traced to its case.
 *
 * This file: the harness and the segment family (SPEC 2) with the device
 * checks of cl/check.cl; attention and the gated delta rule are in
 * oclgrind-cases-nn.c.
 */
#include "oclgrind-cases.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---------------------------------------------------------------- helpers */

int oc_fail(oc_run *r, const char *fmt, ...)
{
    if (r->why[0])
        return 1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->why, sizeof r->why, fmt, ap);
    va_end(ap);
    return 1;
}

int oc_status(oc_run *r, const char *what, clvarlen_status dev, clvarlen_status cpu,
              clvarlen_status want)
{
    if (dev != want)
        return oc_fail(r, "%s: device returned %s, expected %s (%s)", what,
                       clvarlen_status_name(dev), clvarlen_status_name(want),
                       clvarlen_last_error(r->dev));
    if (cpu != want)
        return oc_fail(r, "%s: CPU fallback returned %s, expected %s (%s)", what,
                       clvarlen_status_name(cpu), clvarlen_status_name(want),
                       clvarlen_last_error(r->cpu));
    return 0;
}

int oc_same(oc_run *r, const char *what, const void *dev, const void *cpu, size_t bytes)
{
    const unsigned char *a = dev, *b = cpu;
    for (size_t i = 0; i < bytes; i++)
        if (a[i] != b[i])
            return oc_fail(r, "%s: byte %zu of %zu differs (device %u, CPU %u)", what, i, bytes,
                           a[i], b[i]);
    return 0;
}

int oc_close(oc_run *r, const char *what, const void *dev, const void *cpu, clvarlen_dtype dtype,
             size_t n)
{
    double e = tu_rel_err(dev, cpu, dtype, n);
    if (!(e <= tu_tolerance(dtype)))
        return oc_fail(r, "%s: relative L2 error %.3g > %.3g over %zu elements", what, e,
                       tu_tolerance(dtype), n);
    return 0;
}

void *oc_alloc2(size_t bytes, void **second)
{
    void *a = calloc(1, bytes ? bytes : 1), *b = calloc(1, bytes ? bytes : 1);
    if (!a || !b) {
        free(a);
        free(b);
        *second = NULL;
        return NULL;
    }
    *second = b;
    return a;
}

void *oc_random(oc_run *r, clvarlen_dtype dtype, size_t n)
{
    void *p = calloc(n ? n : 1, clvarlen_dtype_size(dtype));
    if (p)
        tu_fill_random(&r->rng, p, dtype, n, 1.0);
    return p;
}

int32_t *oc_cu(const int32_t *lengths, int64_t n)
{
    int32_t *cu = malloc((size_t)(n + 1) * sizeof *cu);
    if (cu)
        tu_cu_from_lengths(lengths, n, cu);
    return cu;
}

cl_mem oc_buf(oc_run *r, const void *host, size_t bytes)
{
    cl_context cl = NULL;
    if (!host || clvarlen_context_get_cl(r->dev, &cl, NULL, NULL) != CLVARLEN_SUCCESS)
        return NULL;
    cl_int err = CL_SUCCESS;
    cl_mem m = clCreateBuffer(cl, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes ? bytes : 4,
                              (void *)(uintptr_t)host, &err);
    return err == CL_SUCCESS ? m : NULL;
}

int oc_read(oc_run *r, cl_mem mem, void *host, size_t bytes)
{
    cl_command_queue q = NULL;
    if (clvarlen_context_get_cl(r->dev, NULL, NULL, &q) != CLVARLEN_SUCCESS)
        return oc_fail(r, "no OpenCL queue");
    cl_int err = clEnqueueReadBuffer(q, mem, CL_TRUE, 0, bytes, host, 0, NULL, NULL);
    return err == CL_SUCCESS ? 0 : oc_fail(r, "clEnqueueReadBuffer: %d", (int)err);
}

static void oc_release(cl_mem *m, int n)
{
    for (int i = 0; i < n; i++)
        if (m[i])
            clReleaseMemObject(m[i]);
}

/* The case's lengths: a = 0 gives {0, 1, 5}, a = 1 {5, 0, 1, 3}. */
static int64_t lengths_of(int set, int32_t *len)
{
    static const int32_t l0[] = {0, 1, 5}, l1[] = {5, 0, 1, 3};
    const int32_t *src = set ? l1 : l0;
    int64_t n = set ? 4 : 3;
    memcpy(len, src, (size_t)n * sizeof *len);
    return n;
}

/* ---------------------------------------------------------------- segment: maps */

/* cu_seqlens_from_lengths, lengths_from_cu_seqlens and token_maps (with offsets). */
static int case_maps(oc_run *r, const oc_case *c)
{
    int32_t len[8], cu[2][9], back[2][8], off[8], sid[2][16], pos[2][16];
    int64_t n = lengths_of(c->a, len);
    clvarlen_context *ctx[2] = {r->dev, r->cpu};
    clvarlen_status st[2];
    for (int i = 0; i < 2; i++)
        st[i] = clvarlen_cu_seqlens_from_lengths(ctx[i], len, n, cu[i]);
    if (oc_status(r, "cu_seqlens_from_lengths", st[0], st[1], CLVARLEN_SUCCESS) ||
        oc_same(r, "cu_seqlens", cu[0], cu[1], sizeof(int32_t) * (size_t)(n + 1)))
        return 1;
    for (int i = 0; i < 2; i++)
        st[i] = clvarlen_lengths_from_cu_seqlens(ctx[i], cu[1], n, back[i]);
    if (oc_status(r, "lengths_from_cu_seqlens", st[0], st[1], CLVARLEN_SUCCESS) ||
        oc_same(r, "lengths", back[0], back[1], sizeof(int32_t) * (size_t)n))
        return 1;
    for (int64_t s = 0; s < n; s++)
        off[s] = (int32_t)(3 * s);
    int64_t total = cu[1][n];
    for (int i = 0; i < 2; i++)
        st[i] = clvarlen_token_maps(ctx[i], cu[1], n, total, c->b ? off : NULL, sid[i], pos[i]);
    return oc_status(r, "token_maps", st[0], st[1], CLVARLEN_SUCCESS) ||
           oc_same(r, "seq_id", sid[0], sid[1], sizeof(int32_t) * (size_t)total) ||
           oc_same(r, "pos", pos[0], pos[1], sizeof(int32_t) * (size_t)total);
}

/* ---------------------------------------------------------------- segment: pack */

/* pack (a = 0) or pack_masked (a = 1) of batch b rows of c elements of dtype
 * (CLVARLEN_DTYPE_* in the high bits of c: c = elems + 100 * dtype), then
 * unpack of the result. Batch above CV_SEG_FUSE_MAX takes the two-launch
 * form. */
static int case_pack(oc_run *r, const oc_case *c)
{
    const clvarlen_dtype dt = (clvarlen_dtype)(c->c / 100);
    const int64_t elems = c->c % 100, batch = c->b, S = batch > 8 ? 2 : 5;
    const size_t es = clvarlen_dtype_size(dt), row = (size_t)elems * es;
    const int64_t rows = batch * S;
    int32_t *lens = calloc((size_t)batch, sizeof *lens);
    uint8_t *mask = calloc((size_t)rows, 1);
    void *padded = oc_random(r, dt, (size_t)(rows * elems));
    void *out[2], *cu[2], *idx[2], *back[2];
    out[0] = oc_alloc2((size_t)rows * row, &out[1]);
    cu[0] = oc_alloc2((size_t)(batch + 1) * 4, &cu[1]);
    idx[0] = oc_alloc2((size_t)rows * 8, &idx[1]);
    back[0] = oc_alloc2((size_t)rows * row, &back[1]);
    int rc = 1;
    if (!lens || !mask || !padded || !out[0] || !cu[0] || !idx[0] || !back[0]) {
        oc_fail(r, "out of memory");
        goto out;
    }
    for (int64_t b = 0; b < batch; b++)
        lens[b] = batch > 8 ? (int32_t)tu_int(&r->rng, 0, S) : (int32_t)((b * 5 + 4) % (S + 1));
    for (int64_t i = 0; i < rows; i++)
        mask[i] = (uint8_t)(tu_int(&r->rng, 0, 2) != 0);
    clvarlen_context *ctx[2] = {r->dev, r->cpu};
    clvarlen_status st[2];
    int64_t total[2] = {-1, -1};
    for (int i = 0; i < 2; i++)
        st[i] = c->a ? clvarlen_pack_masked(ctx[i], dt, elems, padded, 0, batch, S, mask, rows,
                                            out[i], cu[i], idx[i], &total[i])
                     : clvarlen_pack(ctx[i], dt, elems, padded, 0, batch, S, lens, rows, out[i],
                                     cu[i], idx[i], &total[i]);
    if (oc_status(r, "pack", st[0], st[1], CLVARLEN_SUCCESS))
        goto out;
    if (total[0] != total[1]) {
        oc_fail(r, "pack: total %lld vs %lld", (long long)total[0], (long long)total[1]);
        goto out;
    }
    if (oc_same(r, "packed", out[0], out[1], (size_t)rows * row) ||
        oc_same(r, "cu_seqlens", cu[0], cu[1], (size_t)(batch + 1) * 4) ||
        oc_same(r, "src_index", idx[0], idx[1], (size_t)total[1] * 8))
        goto out;
    const uint32_t pad = 0x3f803f80u; /* 1.0 in bf16 and a pattern in f16/f32 */
    for (int i = 0; i < 2; i++)
        st[i] = clvarlen_unpack(ctx[i], dt, elems, out[1], 0, total[1], idx[1], batch, S, &pad,
                                back[i], 0);
    rc = oc_status(r, "unpack", st[0], st[1], CLVARLEN_SUCCESS) ||
         oc_same(r, "unpacked", back[0], back[1], (size_t)rows * row);
out:
    for (int i = 0; i < 2; i++) {
        free(out[i]);
        free(cu[i]);
        free(idx[i]);
        free(back[i]);
    }
    free(lens);
    free(mask);
    free(padded);
    return rc;
}

/* ---------------------------------------------------------------- segment: rows */

/* gather_rows and scatter_rows of 6 indices into 5 rows of elems = c % 100
 * elements of dtype c / 100, rows b elements apart (b = 0: contiguous).
 * a: 0 gather, 1 scatter overwrite (unique indices), 2 scatter accumulate
 * (repeated indices), 3 scatter overwrite with ZERO_REST. */
static int case_rows(oc_run *r, const oc_case *c)
{
    const clvarlen_dtype dt = (clvarlen_dtype)(c->c / 100);
    const int64_t elems = c->c % 100, stride = c->b ? c->b : elems;
    const int64_t nrows = 5, n_index = c->a == 1 || c->a == 3 ? 4 : 6;
    const size_t es = clvarlen_dtype_size(dt);
    const size_t bytes = (size_t)(n_index > nrows ? n_index : nrows) * (size_t)stride * es;
    static const int32_t rep[] = {3, 0, 3, 4, 1, 3}, uniq[] = {2, 4, 0, 1};
    const int32_t *index = n_index == 6 ? rep : uniq;
    void *src = oc_random(r, dt, bytes / es), *init = oc_random(r, dt, bytes / es);
    void *dst[2];
    dst[0] = oc_alloc2(bytes, &dst[1]);
    int rc = 1;
    if (!src || !init || !dst[0]) {
        oc_fail(r, "out of memory");
        goto out;
    }
    clvarlen_context *ctx[2] = {r->dev, r->cpu};
    clvarlen_status st[2];
    for (int i = 0; i < 2; i++) {
        memcpy(dst[i], init, bytes);
        if (c->a == 0)
            st[i] = clvarlen_gather_rows(ctx[i], dt, elems, src, nrows, stride, index, n_index,
                                         dst[i], stride);
        else
            st[i] = clvarlen_scatter_rows(
                ctx[i], dt, elems, src, stride, index, n_index, dst[i], nrows, stride,
                c->a == 2 ? CLVARLEN_SCATTER_ACCUMULATE : CLVARLEN_SCATTER_OVERWRITE,
                c->a == 3 ? CLVARLEN_SCATTER_ZERO_REST : 0);
    }
    if (oc_status(r, c->a ? "scatter_rows" : "gather_rows", st[0], st[1], CLVARLEN_SUCCESS))
        goto out;
    rc = c->a == 2 ? oc_close(r, "dst", dst[0], dst[1], dt, bytes / es)
                   : oc_same(r, "dst", dst[0], dst[1], bytes);
out:
    free(src);
    free(init);
    free(dst[0]);
    free(dst[1]);
    return rc;
}

/* ---------------------------------------------------------------- segment: expand */

/* seqlens_expand of kv lengths {0, 1, 5} with q lengths {0, 1, 2} (a = 0)
 * or a uniform 2 (a = 1), page table of 4 columns cut at b (0: all). */
static int case_expand(oc_run *r, const oc_case *c)
{
    static const int32_t kv[] = {0, 1, 5}, ql[] = {0, 1, 2};
    const int64_t n = 3, cols = 4, cap = 8;
    int32_t pages[3 * 4], sx[2][8], po[2][8 * 4];
    int64_t total[2] = {-1, -1};
    for (int i = 0; i < 12; i++)
        pages[i] = 100 + i;
    memset(sx, 0x5a, sizeof sx);
    memset(po, 0x5a, sizeof po);
    clvarlen_context *ctx[2] = {r->dev, r->cpu};
    clvarlen_status st[2];
    for (int i = 0; i < 2; i++)
        st[i] = clvarlen_seqlens_expand(ctx[i], kv, c->a ? NULL : ql, 2, n, pages, cols, cols,
                                        c->b, cap, sx[i], po[i], cols, &total[i]);
    if (oc_status(r, "seqlens_expand", st[0], st[1], CLVARLEN_SUCCESS))
        return 1;
    if (total[0] != total[1])
        return oc_fail(r, "total %lld vs %lld", (long long)total[0], (long long)total[1]);
    return oc_same(r, "seqlens_expanded", sx[0], sx[1], sizeof sx[0]) ||
           oc_same(r, "page_table_out", po[0], po[1], sizeof po[0]);
}

/* ---------------------------------------------------------------- segment: CP */

/* The documents of a CP case: b = 0 the lengths {0, 1, 5, 9}, otherwise b
 * documents of 0 to 3 tokens (b > CV_SEG_FUSE_MAX: the unfused kernels). */
static int64_t cp_docs(oc_run *r, int b, int32_t **len)
{
    int64_t n = b ? b : 4;
    *len = calloc((size_t)n, sizeof **len);
    if (!*len)
        return -1;
    static const int32_t fixed[] = {0, 1, 5, 9};
    for (int64_t s = 0; s < n; s++)
        (*len)[s] = b ? (int32_t)tu_int(&r->rng, 0, 3) : fixed[s];
    return n;
}

/* cp_plan, cp_gather and cp_scatter (a: 0 overwrite, 1 accumulate with
 * ZERO_REST) for world 2, rank 1, rows of c % 100 elements of dtype c / 100. */
static int case_cp(oc_run *r, const oc_case *c)
{
    const clvarlen_dtype dt = (clvarlen_dtype)(c->c / 100);
    const int64_t elems = c->c % 100;
    const int32_t world = 2, rank = 1;
    int32_t *len = NULL, *cu = NULL;
    int64_t n = cp_docs(r, c->b, &len);
    if (n < 0 || !(cu = oc_cu(len, n))) {
        free(len);
        return oc_fail(r, "out of memory");
    }
    const int64_t total = cu[n];
    const size_t es = clvarlen_dtype_size(dt), row = (size_t)elems * es;
    void *lcu[2], *gi[2], *pos[2], *local[2], *global[2];
    lcu[0] = oc_alloc2((size_t)(n + 1) * 4, &lcu[1]);
    gi[0] = oc_alloc2((size_t)total * 4, &gi[1]);
    pos[0] = oc_alloc2((size_t)total * 4, &pos[1]);
    local[0] = oc_alloc2((size_t)total * row, &local[1]);
    global[0] = oc_alloc2((size_t)total * row, &global[1]);
    void *grows = oc_random(r, dt, (size_t)(total * elems));
    int rc = 1;
    if (!lcu[0] || !gi[0] || !pos[0] || !local[0] || !global[0] || !grows) {
        oc_fail(r, "out of memory");
        goto out;
    }
    clvarlen_context *ctx[2] = {r->dev, r->cpu};
    clvarlen_status st[2];
    clvarlen_cp_plan_out plan[2];
    for (int i = 0; i < 2; i++) {
        memset(&plan[i], 0, sizeof plan[i]);
        plan[i].local_cu_seqlens = lcu[i];
        plan[i].global_index = gi[i];
        plan[i].position = pos[i];
        plan[i].capacity = total;
        st[i] = clvarlen_cp_plan(ctx[i], cu, n, world, rank, &plan[i]);
    }
    if (oc_status(r, "cp_plan", st[0], st[1], CLVARLEN_SUCCESS))
        goto out;
    const int64_t lt = plan[1].local_tokens;
    if (plan[0].local_tokens != lt || plan[0].max_head != plan[1].max_head ||
        plan[0].max_tail != plan[1].max_tail) {
        oc_fail(r, "cp_plan: totals differ");
        goto out;
    }
    if (oc_same(r, "local_cu_seqlens", lcu[0], lcu[1], (size_t)(n + 1) * 4) ||
        oc_same(r, "global_index", gi[0], gi[1], (size_t)lt * 4) ||
        oc_same(r, "position", pos[0], pos[1], (size_t)lt * 4))
        goto out;
    for (int i = 0; i < 2; i++)
        st[i] = clvarlen_cp_gather(ctx[i], dt, elems, grows, 0, cu, n, world, rank, local[i], 0,
                                   total);
    if (oc_status(r, "cp_gather", st[0], st[1], CLVARLEN_SUCCESS) ||
        oc_same(r, "local rows", local[0], local[1], (size_t)lt * row))
        goto out;
    for (int i = 0; i < 2; i++) {
        memcpy(global[i], grows, (size_t)total * row);
        st[i] = clvarlen_cp_scatter(ctx[i], dt, elems, local[1], 0, cu, n, world, rank,
                                    global[i], 0,
                                    c->a ? CLVARLEN_SCATTER_ACCUMULATE : CLVARLEN_SCATTER_OVERWRITE,
                                    c->a ? CLVARLEN_SCATTER_ZERO_REST : 0);
    }
    if (oc_status(r, "cp_scatter", st[0], st[1], CLVARLEN_SUCCESS))
        goto out;
    rc = c->a ? oc_close(r, "global rows", global[0], global[1], dt, (size_t)(total * elems))
              : oc_same(r, "global rows", global[0], global[1], (size_t)total * row);
out:
    for (int i = 0; i < 2; i++) {
        free(lcu[i]);
        free(gi[i]);
        free(pos[i]);
        free(local[i]);
        free(global[i]);
    }
    free(grows);
    free(len);
    free(cu);
    return rc;
}

/* gen_seq_lens: world 2, 3 documents per rank, 10 tokens (bit-identical). */
static int case_gen(oc_run *r, const oc_case *c)
{
    (void)c;
    int32_t out[2][6];
    clvarlen_status st[2];
    st[0] = clvarlen_gen_seq_lens(r->dev, 7, 2, 3, 10, out[0]);
    st[1] = clvarlen_gen_seq_lens(r->cpu, 7, 2, 3, 10, out[1]);
    return oc_status(r, "gen_seq_lens", st[0], st[1], CLVARLEN_SUCCESS) ||
           oc_same(r, "lengths", out[0], out[1], sizeof out[0]);
}

/* ---------------------------------------------------------------- device checks */

/* cl/check.cl through the cl_mem entry points with device checks on:
 * check_cu_seqlens (lengths_from_cu_seqlens) and check_range (gather_rows),
 * on valid inputs (a = 0: the op's result compared) and invalid ones (a = 1:
 * the error status, nothing written). */
static int case_checks(oc_run *r, const oc_case *c)
{
    int32_t cu[4] = {0, 1, 1, 6}, len[3] = {0}, want[3] = {1, 0, 5};
    int32_t index[3] = {2, 0, 1};
    float src[3 * 4], dst[3 * 4] = {0}, ref[3 * 4];
    for (int i = 0; i < 12; i++)
        src[i] = (float)i;
    if (c->a) {
        cu[2] = 7; /* decreasing at [3] */
        index[1] = 3; /* past src_rows */
    }
    for (int i = 0; i < 12; i++)
        ref[i] = c->a ? 0.0f : src[index[i / 4] * 4 + i % 4];
    cl_mem m[4] = {oc_buf(r, cu, sizeof cu), oc_buf(r, len, sizeof len),
                   oc_buf(r, index, sizeof index), NULL};
    cl_mem s = oc_buf(r, src, sizeof src), d = oc_buf(r, dst, sizeof dst);
    m[3] = s;
    int rc = 1;
    if (!m[0] || !m[1] || !m[2] || !s || !d) {
        oc_fail(r, "clCreateBuffer failed");
        goto out;
    }
    clvarlen_status want_cu = c->a ? CLVARLEN_ERROR_INVALID_CU_SEQLENS : CLVARLEN_SUCCESS;
    clvarlen_status want_ix = c->a ? CLVARLEN_ERROR_INDEX_OUT_OF_RANGE : CLVARLEN_SUCCESS;
    clvarlen_status st =
        clvarlen_cl_lengths_from_cu_seqlens(r->dev, m[0], 0, 3, m[1], 0, 0, NULL, NULL);
    if (oc_status(r, "cl_lengths_from_cu_seqlens", st, want_cu, want_cu) ||
        oc_read(r, m[1], len, sizeof len))
        goto out;
    if (!c->a && memcmp(len, want, sizeof len) != 0) {
        oc_fail(r, "lengths: got {%d, %d, %d}", len[0], len[1], len[2]);
        goto out;
    }
    if (c->a && (len[0] | len[1] | len[2])) {
        oc_fail(r, "lengths written on error");
        goto out;
    }
    st = clvarlen_cl_gather_rows(r->dev, CLVARLEN_DTYPE_F32, 4, s, 0, 3, 4, m[2], 0, 3, d, 0, 4,
                                 0, NULL, NULL);
    if (oc_status(r, "cl_gather_rows", st, want_ix, want_ix) || oc_read(r, d, dst, sizeof dst))
        goto out;
    rc = oc_same(r, "gathered", dst, ref, sizeof dst);
out:
    oc_release(m, 4);
    if (d)
        clReleaseMemObject(d);
    return rc;
}

/* ---------------------------------------------------------------- table */

#define F32 (100 * CLVARLEN_DTYPE_F32)
#define F16 (100 * CLVARLEN_DTYPE_F16)
#define BF16 (100 * CLVARLEN_DTYPE_BF16)
#define I32 (100 * CLVARLEN_DTYPE_I32)

const oc_case oc_segment_cases[] = {
    {"segment-maps", case_maps, 0, 0, 0},
    {"segment-maps-offsets", case_maps, 1, 1, 0},
    {"segment-pack-f16x3", case_pack, 0, 3, F16 + 3},
    {"segment-pack-f32x4", case_pack, 0, 4, F32 + 4},
    {"segment-pack-unfused", case_pack, 0, 2049, F32 + 1},
    {"segment-pack-masked-bf16x5", case_pack, 1, 3, BF16 + 5},
    {"segment-gather-f32x7", case_rows, 0, 0, F32 + 7},
    {"segment-gather-bf16x8-strided", case_rows, 0, 12, BF16 + 8},
    {"segment-scatter-f16x4", case_rows, 1, 0, F16 + 4},
    {"segment-scatter-acc-f32x5", case_rows, 2, 0, F32 + 5},
    {"segment-scatter-acc-f16x3", case_rows, 2, 0, F16 + 3},
    {"segment-scatter-acc-bf16x8", case_rows, 2, 0, BF16 + 8},
    {"segment-scatter-acc-i32x2", case_rows, 2, 0, I32 + 2},
    {"segment-scatter-zero-rest-f32x4", case_rows, 3, 0, F32 + 4},
    {"segment-expand", case_expand, 0, 0, 0},
    {"segment-expand-uniform-cut", case_expand, 1, 3, 0},
    {"segment-cp-f16x3", case_cp, 0, 0, F16 + 3},
    {"segment-cp-acc-f32x4", case_cp, 1, 0, F32 + 4},
    {"segment-cp-unfused", case_cp, 0, 2049, F32 + 1},
    {"segment-gen-seq-lens", case_gen, 0, 0, 0},
    {"check-valid", case_checks, 0, 0, 0},
    {"check-invalid", case_checks, 1, 0, 0},
    {NULL, NULL, 0, 0, 0},
};

/* ---------------------------------------------------------------- main */

static int matches(const char *name, int argc, char **argv, int first)
{
    if (first >= argc)
        return 1;
    for (int i = first; i < argc; i++)
        if (strstr(name, argv[i]))
            return 1;
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static clvarlen_status make_ctx(const char *spec, int checks, clvarlen_context **ctx)
{
    clvarlen_options *o = NULL;
    clvarlen_status st = clvarlen_options_create(&o);
    if (st == CLVARLEN_SUCCESS)
        st = clvarlen_options_set_device(o, spec);
    if (st == CLVARLEN_SUCCESS)
        st = clvarlen_options_set_device_checks(o, checks);
    if (st == CLVARLEN_SUCCESS)
        st = clvarlen_context_create(o, ctx);
    clvarlen_options_destroy(o);
    return st;
}

/* Runs the matching cases of one table; returns the failures. */
static int run_table(oc_run *r, const oc_case *t, int argc, char **argv, int first, int *ran)
{
    int failed = 0;
    for (; t->name; t++) {
        if (!matches(t->name, argc, argv, first))
            continue;
        fprintf(stderr, "oclgrind-cases: case %s\n", t->name);
        r->rng = tu_rng_make(0x5eed0000u + (uint64_t)(*ran)++);
        r->why[0] = '\0';
        double t0 = now_s();
        int rc = t->fn(r, t);
        printf("%-36s %s (%.1f s)%s%s\n", t->name, rc ? "FAIL" : "PASS", now_s() - t0,
               rc ? ": " : "", rc ? r->why : "");
        fflush(stdout);
        failed += rc != 0;
    }
    return failed;
}

int main(int argc, char **argv)
{
    const char *spec = getenv("CLVARLEN_DEVICE");
    int first = 1, list = 0;
    for (; first < argc && argv[first][0] == '-'; first++) {
        if (!strcmp(argv[first], "--list"))
            list = 1;
        else if (!strcmp(argv[first], "--device") && first + 1 < argc)
            spec = argv[++first];
        else {
            fprintf(stderr, "usage: oclgrind-cases [--list] [--device SPEC] [FILTER...]\n");
            return 2;
        }
    }
    if (list) {
        const oc_case *tables[] = {oc_segment_cases, oc_nn_cases, oc_paged_cases, oc_bwd_cases};
        for (int k = 0; k < 4; k++)
            for (const oc_case *t = tables[k]; t->name; t++)
                if (matches(t->name, argc, argv, first))
                    printf("%s\n", t->name);
        return 0;
    }
    if (!spec || !*spec)
        spec = "oclgrind";
    oc_run r;
    memset(&r, 0, sizeof r);
    clvarlen_status st = make_ctx(spec, 1, &r.dev);
    if (st != CLVARLEN_SUCCESS ||
        clvarlen_context_get_cl(r.dev, NULL, NULL, NULL) != CLVARLEN_SUCCESS) {
        fprintf(stderr, "oclgrind-cases: no OpenCL device '%s' (%s): skipped\n", spec,
                clvarlen_last_error(NULL));
        clvarlen_context_destroy(r.dev);
        return 77;
    }
    if (make_ctx("cpu", 0, &r.cpu) != CLVARLEN_SUCCESS) {
        fprintf(stderr, "oclgrind-cases: no CPU fallback context\n");
        clvarlen_context_destroy(r.dev);
        return 1;
    }
    clvarlen_device_info info;
    if (clvarlen_context_device(r.dev, &info) == CLVARLEN_SUCCESS)
        printf("device: %s (%s)\n", info.device_name, info.platform_name);
    int ran = 0;
    int failed = run_table(&r, oc_segment_cases, argc, argv, first, &ran);
    failed += run_table(&r, oc_nn_cases, argc, argv, first, &ran);
    failed += run_table(&r, oc_paged_cases, argc, argv, first, &ran);
    failed += run_table(&r, oc_bwd_cases, argc, argv, first, &ran);
    printf("%d cases, %d failed\n", ran, failed);
    clvarlen_context_destroy(r.dev);
    clvarlen_context_destroy(r.cpu);
    return failed ? 1 : ran ? 0 : 2;
}
