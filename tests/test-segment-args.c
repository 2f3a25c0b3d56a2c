/* The buffer arguments of every cl_mem entry point (test-segment-cl only):
 * each buffer one element smaller than the shapes need gives
 * CLVARLEN_ERROR_BUFFER_TOO_SMALL naming it, with every output buffer left
 * untouched (guard bands included); outputs sharing bytes with another
 * argument of the same buffer (or of its parent, for a sub-buffer) give
 * CLVARLEN_ERROR_INVALID_ARGUMENT; shapes whose byte counts overflow give
 * CLVARLEN_ERROR_OVERFLOW or CLVARLEN_ERROR_INVALID_ARGUMENT before any
 * arithmetic that could overflow (UBSan build). Covers the segment and
 * attention entry points and the gated delta rule's shared check.
 */
#include "test-segment.h"
#include "kit-cl.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <clvarlen/clvarlen-cl.h>

#define MAX_ARGS 8

/* One buffer argument: its bytes, element size, data (inputs) and role. */
typedef struct barg {
    const char *name;
    size_t bytes, es;
    const void *init;
    bool out;
} barg;

typedef clvarlen_status (*bcall)(clvarlen_context *ctx, const cl_mem *m, const size_t *off);

typedef struct bop {
    const char *name;
    barg a[MAX_ARGS];
    int n;
    bcall call;
} bop;

static const int32_t cu3[4] = {0, 5, 12, 18}, len3[3] = {5, 7, 6}, valid3[3] = {4, 4, 4};
static const int32_t idx4[4] = {0, 5, 17, -1}, kv2[2] = {9, 4}, q2[2] = {3, 4};
static const int32_t pt8[8] = {1, 2, 3, 4, 5, 6, 7, 8}, zeros3[3] = {0, 0, 0};
static const int32_t cu1[2] = {0, 4}, zeros4[4] = {0, 0, 0, 0};
static const int64_t si12[12] = {0, 1, 2, 3, 6, 7, 8, 9, 12, 13, 14, 15};
static const uint8_t mask18[18] = {1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 0, 0};
static float data[512];

static clvarlen_status c_cu(clvarlen_context *c, const cl_mem *m, const size_t *o)
{
    return clvarlen_cl_cu_seqlens_from_lengths(c, m[0], o[0], 3, m[1], o[1], 0, NULL, NULL);
}
static clvarlen_status c_len(clvarlen_context *c, const cl_mem *m, const size_t *o)
{
    return clvarlen_cl_lengths_from_cu_seqlens(c, m[0], o[0], 3, m[1], o[1], 0, NULL, NULL);
}
static clvarlen_status c_maps(clvarlen_context *c, const cl_mem *m, const size_t *o)
{
    return clvarlen_cl_token_maps(c, m[0], o[0], 3, 18, m[1], o[1], m[2], o[2], m[3], o[3], 0,
                                  NULL, NULL);
}
static clvarlen_status c_pack(clvarlen_context *c, const cl_mem *m, const size_t *o)
{
    return clvarlen_cl_pack(c, F32, 3, m[0], o[0], 0, 3, 6, m[1], o[1], NULL, 0, 12, m[2], o[2],
                            m[3], o[3], m[4], o[4], m[5], o[5], 0, NULL, NULL);
}
static clvarlen_status c_pack_mask(clvarlen_context *c, const cl_mem *m, const size_t *o)
{
    return clvarlen_cl_pack(c, F32, 3, m[0], o[0], 0, 3, 6, NULL, 0, m[1], o[1], 12, m[2], o[2],
                            m[3], o[3], m[4], o[4], m[5], o[5], 0, NULL, NULL);
}
static clvarlen_status c_unpack(clvarlen_context *c, const cl_mem *m, const size_t *o)
{
    return clvarlen_cl_unpack(c, F32, 3, m[0], o[0], 0, 12, m[1], o[1], 3, 6, NULL, m[2], o[2],
                              0, 0, NULL, NULL);
}
static clvarlen_status c_gather(clvarlen_context *c, const cl_mem *m, const size_t *o)
{
    return clvarlen_cl_gather_rows(c, F32, 3, m[0], o[0], 18, 0, m[1], o[1], 4, m[2], o[2], 0, 0,
                                   NULL, NULL);
}
static clvarlen_status c_scatter(clvarlen_context *c, const cl_mem *m, const size_t *o)
{
    return clvarlen_cl_scatter_rows(c, F32, 3, m[0], o[0], 0, m[1], o[1], 4, m[2], o[2], 18, 0,
                                    CLVARLEN_SCATTER_OVERWRITE, 0, 0, NULL, NULL);
}
static clvarlen_status c_expand(clvarlen_context *c, const cl_mem *m, const size_t *o)
{
    return clvarlen_cl_seqlens_expand(c, m[0], o[0], m[1], o[1], 0, 2, m[2], o[2], 4, 0, 0, 7,
                                      m[3], o[3], m[4], o[4], 0, m[5], o[5], 0, NULL, NULL);
}
static clvarlen_status c_plan(clvarlen_context *c, const cl_mem *m, const size_t *o)
{
    return clvarlen_cl_cp_plan(c, m[0], o[0], 3, 2, 1, m[1], o[1], m[2], o[2], m[3], o[3], 18,
                               m[4], o[4], m[5], o[5], m[6], o[6], 0, NULL, NULL);
}
static clvarlen_status c_cp_gather(clvarlen_context *c, const cl_mem *m, const size_t *o)
{
    return clvarlen_cl_cp_gather(c, F32, 3, m[0], o[0], 0, 18, m[1], o[1], 3, 2, 0, m[2], o[2], 0,
                                 18, 0, NULL, NULL);
}
static clvarlen_status c_cp_scatter(clvarlen_context *c, const cl_mem *m, const size_t *o)
{
    return clvarlen_cl_cp_scatter(c, F32, 3, m[0], o[0], 0, 18, m[1], o[1], 3, 2, 0, m[2], o[2],
                                  0, 18, CLVARLEN_SCATTER_OVERWRITE, 0, 0, NULL, NULL);
}
static clvarlen_status c_gen(clvarlen_context *c, const cl_mem *m, const size_t *o)
{
    return clvarlen_cl_gen_seq_lens(c, 7, 2, 3, 100, m[0], o[0], 0, NULL, NULL);
}
static void fwd_params(clvarlen_attention_params *p)
{
    clvarlen_attention_params_init(p);
    p->n_seqs = 1;
    p->total_q = p->total_k = 4;
    p->heads_q = p->heads_kv = 1;
    p->head_dim = 16;
}
static clvarlen_status c_forward(clvarlen_context *c, const cl_mem *m, const size_t *o)
{
    clvarlen_attention_params p;
    fwd_params(&p);
    return clvarlen_cl_attention_forward(c, &p, m[0], o[0], m[1], o[1], m[2], o[2], m[3], o[3],
                                         m[4], o[4], m[5], o[5], m[6], o[6], m[7], o[7], 0, NULL,
                                         NULL);
}
static clvarlen_status c_merge(clvarlen_context *c, const cl_mem *m, const size_t *o)
{
    return clvarlen_cl_attention_merge(c, F32, 2, 2, 1, 16, m[0], o[0], m[1], o[1], m[2], o[2],
                                       m[3], o[3], 0, NULL, NULL);
}
static clvarlen_status c_merge2(clvarlen_context *c, const cl_mem *m, const size_t *o)
{
    return clvarlen_cl_attention_merge2(c, F32, 2, 1, 16, m[0], o[0], m[1], o[1], m[2], o[2],
                                        m[3], o[3], m[4], o[4], m[5], o[5], 0, NULL, NULL);
}

#define IN(nm, b, e, d) {nm, b, e, d, false}
#define OUT(nm, b, e) {nm, b, e, NULL, true}
static const bop ops[] = {
    {"cu_seqlens_from_lengths", {IN("lengths", 12, 4, len3), OUT("cu_seqlens", 16, 4)}, 2, c_cu},
    {"lengths_from_cu_seqlens", {IN("cu_seqlens", 16, 4, cu3), OUT("lengths", 12, 4)}, 2, c_len},
    {"token_maps",
     {IN("cu_seqlens", 16, 4, cu3), IN("offsets", 12, 4, zeros3), OUT("seq_id", 72, 4),
      OUT("pos", 72, 4)},
     4, c_maps},
    {"pack",
     {IN("padded", 216, 4, data), IN("valid_lens", 12, 4, valid3), OUT("packed", 144, 4),
      OUT("cu_seqlens", 16, 4), OUT("src_index", 96, 8), OUT("total_tokens", 8, 8)},
     6, c_pack},
    {"pack mask",
     {IN("padded", 216, 4, data), IN("mask", 18, 1, mask18), OUT("packed", 144, 4),
      OUT("cu_seqlens", 16, 4), OUT("src_index", 96, 8), OUT("total_tokens", 8, 8)},
     6, c_pack_mask},
    {"unpack",
     {IN("packed", 144, 4, data), IN("src_index", 96, 8, si12), OUT("padded", 216, 4)},
     3, c_unpack},
    {"gather_rows", {IN("src", 216, 4, data), IN("index", 16, 4, idx4), OUT("dst", 48, 4)}, 3,
     c_gather},
    {"scatter_rows", {IN("src", 48, 4, data), IN("index", 16, 4, idx4), OUT("dst", 216, 4)}, 3,
     c_scatter},
    {"seqlens_expand",
     {IN("kv_len", 8, 4, kv2), IN("q_len", 8, 4, q2), IN("page_table", 32, 4, pt8),
      OUT("seqlens_expanded", 28, 4), OUT("page_table_out", 112, 4), OUT("total", 8, 8)},
     6, c_expand},
    {"cp_plan",
     {IN("cu_seqlens", 16, 4, cu3), OUT("local_cu_seqlens", 16, 4), OUT("head_cu", 16, 4),
      OUT("tail_cu", 16, 4), OUT("global_index", 72, 4), OUT("position", 72, 4),
      OUT("local_tokens", 8, 8)},
     7, c_plan},
    {"cp_gather",
     {IN("global_rows", 216, 4, data), IN("cu_seqlens", 16, 4, cu3), OUT("local_rows", 216, 4)},
     3, c_cp_gather},
    {"cp_scatter",
     {IN("local_rows", 216, 4, data), IN("cu_seqlens", 16, 4, cu3), OUT("global_rows", 216, 4)},
     3, c_cp_scatter},
    {"gen_seq_lens", {OUT("out", 24, 4)}, 1, c_gen},
    {"attention_forward",
     {IN("q", 256, 4, data), IN("k", 256, 4, data), IN("v", 256, 4, data),
      IN("cu_seqlens_q", 8, 4, cu1), IN("cu_seqlens_k", 8, 4, cu1), IN("q_pos", 16, 4, zeros4),
      OUT("o", 256, 4), OUT("lse", 16, 4)},
     8, c_forward},
    {"attention_merge",
     {IN("o_a/o_parts", 256, 4, data), IN("lse_a/lse_parts", 16, 4, data), OUT("o", 128, 4),
      OUT("lse", 8, 4)},
     4, c_merge},
    {"attention_merge2",
     {IN("o_a/o_parts", 128, 4, data), IN("lse_a/lse_parts", 8, 4, data), IN("o_b", 128, 4, data),
      IN("lse_b", 8, 4, data), OUT("o", 128, 4), OUT("lse", 8, 4)},
     6, c_merge2},
};
#undef IN
#undef OUT

/* A buffer of exactly `size` bytes holding the first bytes of init (if any). */
static cl_mem exact_buffer(clvarlen_context *ctx, size_t size, const void *init)
{
    cl_context c;
    cl_command_queue q;
    ck_assert_int_eq(clvarlen_context_get_cl(ctx, &c, NULL, &q), CLVARLEN_SUCCESS);
    cl_int err;
    cl_mem m = clCreateBuffer(c, CL_MEM_READ_WRITE, size, NULL, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    unsigned char *fill = tu_xmalloc(size);
    for (size_t i = 0; i < size; i++)
        fill[i] = tu_clbuf_pattern(i);
    if (init)
        memcpy(fill, init, size);
    ck_assert_int_eq(clEnqueueWriteBuffer(q, m, CL_TRUE, 0, size, fill, 0, NULL, NULL),
                     CL_SUCCESS);
    free(fill);
    return m;
}

/* short_arg < 0: every buffer right (the call must succeed); else that one
 * is an element short, and the call must fail with the outputs untouched. */
static void run_op(clvarlen_context *ctx, const bop *op, int short_arg)
{
    tu_clbuf b[MAX_ARGS];
    cl_mem m[MAX_ARGS];
    size_t off[MAX_ARGS];
    cl_mem exact = NULL;
    char label[160];
    snprintf(label, sizeof label, "%s, %s one element short", op->name,
             short_arg >= 0 ? op->a[short_arg].name : "none");
    for (int i = 0; i < op->n; i++) {
        const barg *a = &op->a[i];
        if (i == short_arg) {
            /* exactly the bytes needed, but from an offset of one element: one
             * element short (a buffer of one element cannot be made smaller) */
            exact = m[i] = exact_buffer(ctx, a->bytes, a->init);
            off[i] = a->es;
            continue;
        }
        b[i] = tu_clbuf_make(ctx, a->bytes, 16 * (size_t)(i + 1), a->init);
        m[i] = b[i].mem;
        off[i] = b[i].off;
    }
    clvarlen_status st = op->call(ctx, m, off);
    if (short_arg < 0) {
        tu_check(st == CLVARLEN_SUCCESS, "%s: %s (%s)", label, clvarlen_status_name(st),
                 clvarlen_last_error(ctx));
    } else {
        tu_check(st == CLVARLEN_ERROR_BUFFER_TOO_SMALL, "%s: got %s (%s)", label,
                 clvarlen_status_name(st), clvarlen_last_error(ctx));
        tu_check(strstr(clvarlen_last_error(ctx), op->a[short_arg].name) != NULL,
                 "%s: message does not name the buffer: %s", label, clvarlen_last_error(ctx));
    }
    ck_assert_int_eq(clvarlen_context_finish(ctx), CLVARLEN_SUCCESS);
    for (int i = 0; i < op->n; i++) {
        if (i == short_arg)
            continue;
        if (short_arg >= 0 && op->a[i].out)
            tu_clbuf_untouched(ctx, &b[i], label);
        else
            tu_clbuf_fetch(ctx, &b[i], label);
        tu_clbuf_free(&b[i]);
    }
    if (exact)
        clReleaseMemObject(exact);
}

START_TEST(args_buffer_too_small)
{
    for (int i = 0; i < 512; i++)
        data[i] = (float)(i % 7) * 0.25f;
    clvarlen_context *ctx = seg_ctx;
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
        run_op(ctx, &ops[k], -1);
        for (int i = 0; i < ops[k].n; i++)
            run_op(ctx, &ops[k], i);
    }
}
END_TEST

/* ------------------------------------------------------------ aliasing */

#define EXPECT(ctx, expr, want, label)                                                         \
    do {                                                                                       \
        clvarlen_status st_ = (expr);                                                          \
        tu_check(st_ == (want), "%s: got %s, want %s (%s)", (label), clvarlen_status_name(st_), \
                 clvarlen_status_name(want), clvarlen_last_error(ctx));                        \
    } while (0)
#define IA_ CLVARLEN_ERROR_INVALID_ARGUMENT
#define OK_ CLVARLEN_SUCCESS

START_TEST(args_overlap)
{
    clvarlen_context *ctx = seg_ctx;
    for (int i = 0; i < 512; i++)
        data[i] = (float)(i % 5);
    /* One arena: rows at 0, an int32 index at 1024, other tensors after. */
    tu_clbuf arena = tu_clbuf_make(ctx, 2048, 0, data);
    cl_mem A = arena.mem;
    static const int32_t idx[4] = {0, 1, 2, 3};
    tu_clbuf d_idx = tu_clbuf_make(ctx, sizeof idx, 0, idx);
    /* gather in place / overlapping rows / overlapping its index */
    EXPECT(ctx, clvarlen_cl_gather_rows(ctx, F32, 3, A, 0, 18, 0, d_idx.mem, 0, 4, A, 0, 0, 0,
                                        NULL, NULL),
           IA_, "gather dst == src");
    EXPECT(ctx, clvarlen_cl_gather_rows(ctx, F32, 3, A, 0, 18, 0, d_idx.mem, 0, 4, A, 200, 0, 0,
                                        NULL, NULL),
           IA_, "gather dst overlaps the end of src");
    EXPECT(ctx, clvarlen_cl_gather_rows(ctx, F32, 3, A, 0, 18, 0, A, 1024, 4, A, 1016, 0, 0,
                                        NULL, NULL),
           IA_, "gather dst overlaps index");
    EXPECT(ctx, clvarlen_cl_gather_rows(ctx, F32, 3, A, 0, 18, 0, d_idx.mem, 0, 4, A, 216, 0, 0,
                                        NULL, NULL),
           OK_, "gather dst right after src");
    /* column views of one [rows, 6] tensor: src columns 0-2, dst columns 3-5 */
    EXPECT(ctx, clvarlen_cl_gather_rows(ctx, F32, 3, A, 0, 4, 6, d_idx.mem, 0, 4, A, 12, 6, 0,
                                        NULL, NULL),
           OK_, "gather between interleaved column views");
    EXPECT(ctx, clvarlen_cl_gather_rows(ctx, F32, 3, A, 0, 4, 6, d_idx.mem, 0, 4, A, 8, 6, 0,
                                        NULL, NULL),
           IA_, "gather between overlapping column views");
    /* a sub-buffer aliasing its parent */
    cl_buffer_region region = {256, 512};
    cl_int err;
    cl_mem sub = clCreateSubBuffer(A, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &region,
                                   &err);
    if (err == CL_SUCCESS) {
        EXPECT(ctx, clvarlen_cl_gather_rows(ctx, F32, 3, A, 256, 4, 0, d_idx.mem, 0, 4, sub, 0, 0,
                                            0, NULL, NULL),
               IA_, "gather dst sub-buffer over src");
        EXPECT(ctx, clvarlen_cl_gather_rows(ctx, F32, 3, A, 0, 4, 0, d_idx.mem, 0, 4, sub, 0, 0,
                                            0, NULL, NULL),
               OK_, "gather dst sub-buffer apart from src");
        clReleaseMemObject(sub);
    }
    /* scatter dst over src or index */
    EXPECT(ctx, clvarlen_cl_scatter_rows(ctx, F32, 3, A, 0, 0, d_idx.mem, 0, 4, A, 24, 18, 0,
                                         CLVARLEN_SCATTER_OVERWRITE, 0, 0, NULL, NULL),
           IA_, "scatter dst overlaps src");
    EXPECT(ctx, clvarlen_cl_scatter_rows(ctx, F32, 3, A, 0, 0, A, 1024, 4, A, 900, 18, 0,
                                         CLVARLEN_SCATTER_ACCUMULATE, 0, 0, NULL, NULL),
           IA_, "scatter dst overlaps index");
    /* pack: packed over padded, src_index over cu_seqlens */
    static const int32_t valid[3] = {4, 4, 4};
    tu_clbuf d_valid = tu_clbuf_make(ctx, sizeof valid, 0, valid);
    EXPECT(ctx, clvarlen_cl_pack(ctx, F32, 3, A, 0, 0, 3, 6, d_valid.mem, 0, NULL, 0, 12, A, 100,
                                 A, 1024, NULL, 0, NULL, 0, 0, NULL, NULL),
           IA_, "pack packed overlaps padded");
    EXPECT(ctx, clvarlen_cl_pack(ctx, F32, 3, A, 0, 0, 3, 6, d_valid.mem, 0, NULL, 0, 12, A, 216,
                                 A, 1024, A, 1032, NULL, 0, 0, NULL, NULL),
           IA_, "pack src_index overlaps cu_seqlens");
    EXPECT(ctx, clvarlen_cl_pack(ctx, F32, 3, A, 0, 0, 3, 6, A, 1024, NULL, 0, 12, A, 216, A,
                                 1028, NULL, 0, NULL, 0, 0, NULL, NULL),
           IA_, "pack cu_seqlens overlaps valid_lens");
    /* unpack padded over src_index; cp_plan head_cu == tail_cu */
    EXPECT(ctx, clvarlen_cl_unpack(ctx, F32, 3, A, 0, 0, 2, A, 1024, 3, 6, NULL, A, 1000, 0, 0,
                                   NULL, NULL),
           IA_, "unpack padded overlaps src_index");
    static const int32_t cu[4] = {0, 5, 12, 18};
    tu_clbuf d_cu = tu_clbuf_make(ctx, sizeof cu, 0, cu);
    EXPECT(ctx, clvarlen_cl_cp_plan(ctx, d_cu.mem, 0, 3, 2, 0, A, 1024, A, 1040, A, 1040, 0, NULL,
                                    0, NULL, 0, NULL, 0, 0, NULL, NULL),
           IA_, "cp_plan head_cu == tail_cu");
    EXPECT(ctx, clvarlen_cl_cp_gather(ctx, F32, 3, A, 0, 0, 18, d_cu.mem, 0, 3, 2, 0, A, 108, 0,
                                      18, 0, NULL, NULL),
           IA_, "cp_gather local over global");
    /* merge: outputs over inputs; merge2 in place exactly is allowed, partly is not */
    EXPECT(ctx, clvarlen_cl_attention_merge(ctx, F32, 2, 2, 1, 16, A, 0, A, 1024, A, 128, A,
                                            1100, 0, NULL, NULL),
           IA_, "merge o overlaps o_parts");
    EXPECT(ctx, clvarlen_cl_attention_merge(ctx, F32, 2, 2, 1, 16, A, 0, A, 1024, A, 512, A,
                                            1032, 0, NULL, NULL),
           IA_, "merge lse overlaps lse_parts");
    EXPECT(ctx, clvarlen_cl_attention_merge(ctx, F32, 2, 2, 1, 16, A, 0, A, 1024, A, 512, A,
                                            600, 0, NULL, NULL),
           IA_, "merge lse overlaps o");
    EXPECT(ctx, clvarlen_cl_attention_merge(ctx, F32, 1, 2, 1, 16, A, 0, A, 1024, A, 0, A, 1024,
                                            0, NULL, NULL),
           IA_, "merge of one part in place");
    EXPECT(ctx, clvarlen_cl_attention_merge2(ctx, F32, 2, 1, 16, A, 0, A, 1024, A, 256, A, 1040,
                                             A, 0, A, 1040, 0, NULL, NULL),
           OK_, "merge2 o = o_a, lse = lse_b");
    EXPECT(ctx, clvarlen_cl_attention_merge2(ctx, F32, 2, 1, 16, A, 0, A, 1024, A, 256, A, 1040,
                                             A, 4, A, 1060, 0, NULL, NULL),
           IA_, "merge2 o partly over o_a");
    EXPECT(ctx, clvarlen_cl_attention_merge2(ctx, F32, 2, 1, 16, A, 0, A, 1024, A, 256, A, 1040,
                                             A, 512, A, 1024 + 4, 0, NULL, NULL),
           IA_, "merge2 lse partly over lse_a");
    ck_assert_int_eq(clvarlen_context_finish(ctx), CLVARLEN_SUCCESS);
    tu_clbuf *all[] = {&arena, &d_idx, &d_valid, &d_cu};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        tu_clbuf_free(all[i]);
}
END_TEST

/* ------------------------------------------------------------ hostile shapes */

/* Sizes whose byte counts overflow: rejected before anything is computed
 * from them (UBSan reports any signed overflow on the way). */
START_TEST(args_hostile_shapes)
{
    clvarlen_context *ctx = seg_ctx;
    tu_clbuf b = tu_clbuf_make(ctx, 4096, 0, NULL);
    cl_mem m = b.mem;
    const int64_t big = INT64_MAX, i32 = INT32_MAX;
    clvarlen_status st[16];
    int k = 0;
    st[k++] = clvarlen_cl_pack(ctx, F32, big, m, 0, 0, 1, 1, m, 0, NULL, 0, 1, m, 0, m, 0, NULL, 0,
                               NULL, 0, 0, NULL, NULL);
    st[k++] = clvarlen_cl_pack(ctx, F32, 4, m, 0, 0, i32 - 1, i32, m, 0, NULL, 0, big, m, 0, m, 0,
                               NULL, 0, NULL, 0, 0, NULL, NULL);
    st[k++] = clvarlen_cl_pack(ctx, U8, 1, m, 0, big, 2, 2, m, 0, NULL, 0, 4, m, 0, m, 0, NULL, 0,
                               NULL, 0, 0, NULL, NULL);
    st[k++] = clvarlen_cl_unpack(ctx, F32, 4, m, 0, 0, 1, m, 0, i32 - 1, i32, NULL, m, 0, 0, 0,
                                 NULL, NULL);
    st[k++] = clvarlen_cl_unpack(ctx, F32, big / 2, m, 0, 0, 0, m, 0, 1, 1, NULL, m, 0, 0, 0, NULL,
                                 NULL);
    st[k++] = clvarlen_cl_gather_rows(ctx, F32, 2, m, 0, big, 0, m, 0, 1, m, 0, 0, 0, NULL, NULL);
    st[k++] = clvarlen_cl_gather_rows(ctx, F32, 1, m, 0, 4, big, m, 0, 1, m, 0, 0, 0, NULL, NULL);
    st[k++] = clvarlen_cl_scatter_rows(ctx, F64, 3, m, 0, 0, m, 0, 1, m, 0, big / 4, 0,
                                       CLVARLEN_SCATTER_OVERWRITE, 0, 0, NULL, NULL);
    st[k++] = clvarlen_cl_seqlens_expand(ctx, m, 0, NULL, 0, 1, 2, m, 0, 4, big, 0, 4, NULL, 0,
                                         NULL, 0, 0, NULL, 0, 0, NULL, NULL);
    st[k++] = clvarlen_cl_cp_gather(ctx, F32, big / 2, m, 0, 0, i32, m, 0, 1, 1, 0, m, 0, 0, 1, 0,
                                    NULL, NULL);
    st[k++] = clvarlen_cl_attention_merge(ctx, F32, big, big, INT32_MAX, 256, m, 0, m, 0, m, 0,
                                          NULL, 0, 0, NULL, NULL);
    st[k++] = clvarlen_cl_attention_merge2(ctx, F32, big, INT32_MAX, INT32_MAX, m, 0, m, 0, m, 0,
                                           m, 0, m, 0, NULL, 0, 0, NULL, NULL);
    clvarlen_attention_params p;
    fwd_params(&p);
    p.q_stride = big;
    st[k++] = clvarlen_cl_attention_forward(ctx, &p, m, 0, m, 0, m, 0, m, 0, m, 0, NULL, 0, m, 0,
                                            NULL, 0, 0, NULL, NULL);
    fwd_params(&p);
    p.heads_q = p.heads_kv = INT32_MAX;
    p.head_dim = 256;
    p.total_q = p.total_k = INT32_MAX;
    st[k++] = clvarlen_cl_attention_forward(ctx, &p, m, 0, m, 0, m, 0, m, 0, m, 0, NULL, 0, m, 0,
                                            NULL, 0, 0, NULL, NULL);
    for (int i = 0; i < k; i++)
        tu_check(st[i] == CLVARLEN_ERROR_OVERFLOW || st[i] == CLVARLEN_ERROR_INVALID_ARGUMENT,
                 "hostile shape %d: got %s", i, clvarlen_status_name(st[i]));
    tu_clbuf_untouched(ctx, &b, "hostile shapes");
    tu_clbuf_free(&b);
}
END_TEST

void seg_add_args_cases(Suite *s)
{
    TCase *tc = tcase_create("cl-args");
    tcase_add_checked_fixture(tc, seg_setup, seg_teardown);
    tcase_set_timeout(tc, SEG_TIMEOUT);
    tcase_add_test(tc, args_buffer_too_small);
    tcase_add_test(tc, args_overlap);
    tcase_add_test(tc, args_hostile_shapes);
    suite_add_tcase(s, tc);
}
