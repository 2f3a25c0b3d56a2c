/* The host-memory entry points at their limits, on the CPU fallback:
 * - hostile shapes: sizes whose byte counts overflow int64 give
 *   CLVARLEN_ERROR_OVERFLOW (or CLVARLEN_ERROR_INVALID_ARGUMENT) before any
 *   arithmetic that could overflow; the sanitizer build runs this under UBSan;
 * - aliasing: an output sharing bytes with an input or another output is
 *   CLVARLEN_ERROR_INVALID_ARGUMENT, with nothing written; the in-place forms
 *   the header allows (merge2: o = o_a or o_b, lse = lse_a or lse_b) work.
 *
 * This file makes no OpenCL call: every context is "cpu".
 */
#include "test-api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HOSTILE(ctx, expr, label)                                                              \
    do {                                                                                       \
        clvarlen_status st_ = (expr);                                                          \
        tu_check(st_ == CLVARLEN_ERROR_OVERFLOW || st_ == CLVARLEN_ERROR_INVALID_ARGUMENT,     \
                 "%s: got %s (%s)", (label), clvarlen_status_name(st_),                        \
                 clvarlen_last_error(ctx));                                                    \
    } while (0)

START_TEST(api_hostile_shapes)
{
    clvarlen_context *ctx = tu_cpu_context();
    static unsigned char buf[4096], keep[4096];
    memset(buf, SENTINEL, sizeof buf);
    memcpy(keep, buf, sizeof buf);
    const int64_t big = INT64_MAX, i32 = INT32_MAX;
    static const int32_t one[2] = {1, 1}, cu[2] = {0, 1};
    static const uint8_t mask[4] = {1, 1, 1, 1};
    int32_t *c32 = (int32_t *)(void *)(buf + 1024);
    int64_t *s64 = (int64_t *)(void *)(buf + 2048);
    HOSTILE(ctx, clvarlen_pack(ctx, CLVARLEN_DTYPE_F32, big, buf, 0, 1, 1, one, 1, buf, c32, NULL,
                               NULL),
            "pack row_elems INT64_MAX");
    HOSTILE(ctx, clvarlen_pack(ctx, CLVARLEN_DTYPE_F32, big / 2, buf, 0, 0, 1, one, 0, buf, c32,
                               NULL, NULL),
            "pack row of 2^64 bytes, no rows");
    HOSTILE(ctx, clvarlen_pack(ctx, CLVARLEN_DTYPE_F32, 4, buf, 0, i32 - 1, i32, one, big, buf,
                               c32, s64, NULL),
            "pack batch * max_seqlen * row beyond int64");
    HOSTILE(ctx, clvarlen_pack(ctx, CLVARLEN_DTYPE_U8, 1, buf, big, 2, 2, one, 4, buf, c32, NULL,
                               NULL),
            "pack stride INT64_MAX");
    HOSTILE(ctx, clvarlen_pack(ctx, CLVARLEN_DTYPE_U8, 1, buf, 0, big, 1, one, 4, buf, c32, NULL,
                               NULL),
            "pack batch INT64_MAX");
    HOSTILE(ctx, clvarlen_pack_masked(ctx, CLVARLEN_DTYPE_F64, big / 4, buf, 0, 2, 2, mask, 4,
                                      buf, c32, s64, NULL),
            "pack_masked row beyond int64");
    HOSTILE(ctx, clvarlen_unpack(ctx, CLVARLEN_DTYPE_F32, 4, buf, 0, 1, s64, i32 - 1, i32, NULL,
                                 buf, 0),
            "unpack padded beyond int64");
    HOSTILE(ctx, clvarlen_unpack(ctx, CLVARLEN_DTYPE_F32, big / 2, buf, 0, 0, s64, 1, 1, NULL, buf,
                                 0),
            "unpack row of 2^64 bytes");
    HOSTILE(ctx, clvarlen_unpack(ctx, CLVARLEN_DTYPE_F32, 1, buf, 0, big, s64, 1, 1, NULL, buf, 0),
            "unpack total_tokens INT64_MAX");
    HOSTILE(ctx, clvarlen_gather_rows(ctx, CLVARLEN_DTYPE_F32, 2, buf, big, 0, c32, 1, buf, 0),
            "gather src_rows INT64_MAX");
    HOSTILE(ctx, clvarlen_gather_rows(ctx, CLVARLEN_DTYPE_F32, 1, buf, 4, 0, c32, big, buf, 0),
            "gather n_index INT64_MAX");
    HOSTILE(ctx, clvarlen_gather_rows(ctx, CLVARLEN_DTYPE_F32, 1, buf, 0, 0, c32, 0, buf, big),
            "gather stride INT64_MAX, no rows");
    HOSTILE(ctx, clvarlen_scatter_rows(ctx, CLVARLEN_DTYPE_F64, 3, buf, 0, c32, 1, buf, big / 4, 0,
                                       CLVARLEN_SCATTER_OVERWRITE, 0),
            "scatter dst_rows beyond int64");
    HOSTILE(ctx, clvarlen_seqlens_expand(ctx, one, NULL, 1, 2, c32, 4, big, 0, 4, NULL, c32, 0,
                                         NULL),
            "seqlens_expand page_stride INT64_MAX");
    HOSTILE(ctx, clvarlen_seqlens_expand(ctx, one, NULL, 1, 2, c32, big, 0, 0, 4, NULL, c32, 0,
                                         NULL),
            "seqlens_expand page_cols INT64_MAX");
    HOSTILE(ctx, clvarlen_cp_gather(ctx, CLVARLEN_DTYPE_F32, big / 2, buf, 0, cu, 1, 1, 0, buf, 0,
                                    4),
            "cp_gather row beyond int64");
    HOSTILE(ctx, clvarlen_gen_seq_lens(ctx, 1, INT32_MAX, INT32_MAX, 10, c32),
            "gen_seq_lens world * n");
    HOSTILE(ctx, clvarlen_attention_merge(ctx, CLVARLEN_DTYPE_F32, big, big, INT32_MAX, 256, buf,
                                          (float *)(void *)buf, buf, NULL),
            "merge sizes INT64_MAX");
    HOSTILE(ctx, clvarlen_attention_merge(ctx, CLVARLEN_DTYPE_F32, big, 2, 1, 16, buf,
                                          (float *)(void *)buf, buf, NULL),
            "merge n_parts INT64_MAX");
    HOSTILE(ctx, clvarlen_attention_merge2(ctx, CLVARLEN_DTYPE_F32, big, INT32_MAX, INT32_MAX, buf,
                                           (float *)(void *)buf, buf, (float *)(void *)buf, buf,
                                           NULL),
            "merge2 sizes INT64_MAX");
    clvarlen_attention_params p;
    clvarlen_attention_params_init(&p);
    p.n_seqs = 1;
    p.total_q = p.total_k = INT32_MAX;
    p.heads_q = p.heads_kv = INT32_MAX;
    p.head_dim = 256;
    HOSTILE(ctx, clvarlen_attention_forward(ctx, &p, buf, buf, buf, c32, c32, NULL, buf, NULL),
            "attention heads * dim * tokens beyond int64");
    p.heads_q = p.heads_kv = 1;
    p.total_q = p.total_k = 1;
    p.q_stride = big;
    HOSTILE(ctx, clvarlen_attention_forward(ctx, &p, buf, buf, buf, c32, c32, NULL, buf, NULL),
            "attention q_stride INT64_MAX");
    tu_assert_bytes_eq(buf, keep, sizeof buf, "hostile shapes wrote memory");
    clvarlen_context_destroy(ctx);
}
END_TEST

/* ------------------------------------------------------------ aliasing */

#define ALIAS(ctx, expr, want, label)                                                          \
    do {                                                                                       \
        memcpy(arena, keep, sizeof arena);                                                     \
        clvarlen_status st_ = (expr);                                                          \
        tu_check(st_ == (want), "%s: got %s, want %s (%s)", (label), clvarlen_status_name(st_), \
                 clvarlen_status_name(want), clvarlen_last_error(ctx));                        \
        if ((want) != CLVARLEN_SUCCESS)                                                        \
            tu_assert_bytes_eq(arena, keep, sizeof arena, (label));                            \
    } while (0)
#define OK_ CLVARLEN_SUCCESS

/* The arena: floats at A(i), int32 at I(i) (from word 1024), int64 at L(i) (from word 2048). */
#define A(i) ((void *)(arena + (i)))
#define F(i) (arena + (i))
#define I(i) ((int32_t *)(void *)(arena + 1024 + (i)))
#define L(i) ((int64_t *)(void *)(arena + 2048 + 2 * (i)))

static float arena[4096], keep[4096];

static void arena_init(void)
{
    for (int i = 0; i < 4096; i++)
        keep[i] = 0.0f;
    for (int i = 0; i < 1024; i++)
        keep[i] = (float)(i % 9) * 0.5f;
    int32_t *ki = (int32_t *)(void *)(keep + 1024);
    static const int32_t head[8] = {0, 5, 12, 18, 4, 4, 4, 0}; /* cu at 0, valid_lens at 4 */
    memcpy(ki, head, sizeof head);
    for (int i = 0; i < 4; i++) /* a row index at 50 */
        ki[50 + i] = i;
    int64_t *kl = (int64_t *)(void *)(keep + 2048);
    for (int i = 0; i < 12; i++)
        kl[i] = i;
}

START_TEST(api_overlap_segment)
{
    clvarlen_context *ctx = tu_cpu_context();
    arena_init();
    const clvarlen_dtype f32 = CLVARLEN_DTYPE_F32;
    /* cu_seqlens <-> lengths and token maps: I(0) cu [4], I(4) lengths [3] */
    ALIAS(ctx, clvarlen_cu_seqlens_from_lengths(ctx, I(4), 3, I(5)), IA, "cu over lengths");
    ALIAS(ctx, clvarlen_cu_seqlens_from_lengths(ctx, I(4), 3, I(16)), OK_, "cu apart");
    ALIAS(ctx, clvarlen_lengths_from_cu_seqlens(ctx, I(0), 3, I(2)), IA, "lengths over cu");
    ALIAS(ctx, clvarlen_token_maps(ctx, I(0), 3, 18, NULL, I(2), NULL), IA, "seq_id over cu");
    ALIAS(ctx, clvarlen_token_maps(ctx, I(0), 3, 18, NULL, I(16), I(30)), IA, "pos over seq_id");
    ALIAS(ctx, clvarlen_token_maps(ctx, I(0), 3, 18, NULL, I(16), I(34)), OK_, "maps apart");
    /* pack [3, 6, 3 floats] at F(0) with valid_lens I(4) */
    ALIAS(ctx, clvarlen_pack(ctx, f32, 3, A(0), 0, 3, 6, I(4), 12, A(20), I(16), NULL, NULL), IA,
          "packed over padded");
    ALIAS(ctx, clvarlen_pack(ctx, f32, 3, A(0), 0, 3, 6, I(4), 12, A(100), I(5), NULL, NULL), IA,
          "cu_seqlens over valid_lens");
    ALIAS(ctx, clvarlen_pack(ctx, f32, 3, A(0), 0, 3, 6, I(4), 12, A(100), I(16), L(0), NULL),
          OK_, "pack apart");
    ALIAS(ctx, clvarlen_pack(ctx, f32, 3, A(0), 0, 3, 6, I(4), 12, A(100), I(16), (int64_t *)A(110),
                             NULL),
          IA, "src_index over packed");
    ALIAS(ctx, clvarlen_pack(ctx, f32, 3, A(0), 0, 3, 6, I(4), 12, A(100), I(16), NULL,
                             (int64_t *)I(18)),
          IA, "total_tokens over cu_seqlens");
    uint8_t *mask = (uint8_t *)(void *)I(40);
    memset((uint8_t *)(void *)((int32_t *)(void *)(keep + 1024) + 40), 1, 18);
    ALIAS(ctx, clvarlen_pack_masked(ctx, f32, 3, A(0), 0, 3, 6, mask, 18, A(200), I(16),
                                    (int64_t *)(void *)I(42), NULL),
          IA, "src_index over mask");
    ALIAS(ctx, clvarlen_pack_masked(ctx, f32, 3, A(0), 0, 3, 6, mask, 18, A(200), I(16), L(0),
                                    NULL),
          OK_, "pack_masked apart");
    /* unpack 12 packed rows at F(0), src_index L(0) */
    ALIAS(ctx, clvarlen_unpack(ctx, f32, 3, A(0), 0, 12, L(0), 3, 6, NULL, A(30), 0), IA,
          "padded over packed");
    ALIAS(ctx, clvarlen_unpack(ctx, f32, 3, A(0), 0, 12, L(0), 3, 6, NULL, F(2040), 0), IA,
          "padded over src_index");
    ALIAS(ctx, clvarlen_unpack(ctx, f32, 3, A(0), 0, 12, L(0), 3, 6, F(210), A(200), 0), IA,
          "padded over pad_value");
    ALIAS(ctx, clvarlen_unpack(ctx, f32, 3, A(0), 0, 12, L(0), 3, 6, NULL, A(200), 0), OK_,
          "unpack apart");
    /* gather / scatter: in place, over the index, interleaved column views */
    ALIAS(ctx, clvarlen_gather_rows(ctx, f32, 3, A(0), 18, 0, I(50), 4, A(0), 0), IA,
          "gather in place");
    ALIAS(ctx, clvarlen_gather_rows(ctx, f32, 3, A(0), 18, 0, I(50), 4, F(1068), 0), IA,
          "gather dst over index");
    ALIAS(ctx, clvarlen_gather_rows(ctx, f32, 3, A(0), 3, 6, I(50), 3, A(3), 6), OK_,
          "gather between column views");
    ALIAS(ctx, clvarlen_gather_rows(ctx, f32, 3, A(0), 3, 6, I(50), 3, A(2), 6), IA,
          "gather between overlapping column views");
    ALIAS(ctx, clvarlen_scatter_rows(ctx, f32, 3, A(0), 0, I(50), 4, A(6), 18, 0,
                                     CLVARLEN_SCATTER_ACCUMULATE, 0),
          IA, "scatter dst over src");
    ALIAS(ctx, clvarlen_scatter_rows(ctx, f32, 3, A(200), 0, I(50), 4, A(0), 18, 0,
                                     CLVARLEN_SCATTER_OVERWRITE, 0),
          OK_, "scatter apart");
    /* seqlens_expand: kv I(4), q I(4) */
    ALIAS(ctx, clvarlen_seqlens_expand(ctx, I(4), I(4), 0, 2, NULL, 0, 0, 0, 8, I(5), NULL, 0,
                                       NULL),
          IA, "seqlens_expanded over kv_len");
    ALIAS(ctx, clvarlen_seqlens_expand(ctx, I(4), I(4), 0, 2, I(0), 4, 0, 0, 8, NULL, I(6), 0,
                                       NULL),
          IA, "page_table_out over page_table");
    /* CP: cu I(0) */
    int32_t *h = I(100);
    clvarlen_cp_plan_out plan = {.local_cu_seqlens = h, .head_cu = h + 8, .tail_cu = h + 8};
    ALIAS(ctx, clvarlen_cp_plan(ctx, I(0), 3, 2, 0, &plan), IA, "head_cu == tail_cu");
    plan = (clvarlen_cp_plan_out){.local_cu_seqlens = I(1)};
    ALIAS(ctx, clvarlen_cp_plan(ctx, I(0), 3, 2, 0, &plan), IA, "local_cu over cu");
    ALIAS(ctx, clvarlen_cp_gather(ctx, f32, 3, A(0), 0, I(0), 3, 2, 0, A(27), 0, 18), IA,
          "cp_gather local over global");
    ALIAS(ctx, clvarlen_cp_scatter(ctx, f32, 3, A(0), 0, I(0), 3, 2, 0, A(9), 0,
                                   CLVARLEN_SCATTER_OVERWRITE, 0),
          IA, "cp_scatter global over local");
    ALIAS(ctx, clvarlen_cp_gather(ctx, f32, 3, A(0), 0, I(0), 3, 2, 0, A(300), 0, 18), OK_,
          "cp_gather apart");
    clvarlen_context_destroy(ctx);
}
END_TEST

START_TEST(api_overlap_attention)
{
    clvarlen_context *ctx = tu_cpu_context();
    arena_init();
    const clvarlen_dtype f32 = CLVARLEN_DTYPE_F32;
    /* merge: o_parts F(0) [2, 2, 1, 16], lse_parts F(128) [2, 1, 2] */
    ALIAS(ctx, clvarlen_attention_merge(ctx, f32, 2, 2, 1, 16, A(0), F(128), A(40), F(300)), IA,
          "merge o over o_parts");
    ALIAS(ctx, clvarlen_attention_merge(ctx, f32, 2, 2, 1, 16, A(0), F(128), A(200), F(130)), IA,
          "merge lse over lse_parts");
    ALIAS(ctx, clvarlen_attention_merge(ctx, f32, 2, 2, 1, 16, A(0), F(128), A(200), F(220)), IA,
          "merge lse over o");
    ALIAS(ctx, clvarlen_attention_merge(ctx, f32, 1, 2, 1, 16, A(0), F(128), A(0), F(128)), IA,
          "merge of one part in place");
    ALIAS(ctx, clvarlen_attention_merge(ctx, f32, 2, 2, 1, 16, A(0), F(128), A(200), F(300)), OK_,
          "merge apart");
    /* merge2: o_a F(0), lse_a F(128), o_b F(32), lse_b F(132), each [2, 1, 16] / [1, 2] */
    ALIAS(ctx, clvarlen_attention_merge2(ctx, f32, 2, 1, 16, A(0), F(128), A(32), F(132), A(0),
                                         F(132)),
          OK_, "merge2 o = o_a, lse = lse_b");
    ALIAS(ctx, clvarlen_attention_merge2(ctx, f32, 2, 1, 16, A(0), F(128), A(32), F(132), A(32),
                                         F(128)),
          OK_, "merge2 o = o_b, lse = lse_a");
    ALIAS(ctx, clvarlen_attention_merge2(ctx, f32, 2, 1, 16, A(0), F(128), A(32), F(132), A(1),
                                         F(200)),
          IA, "merge2 o partly over o_a");
    ALIAS(ctx, clvarlen_attention_merge2(ctx, f32, 2, 1, 16, A(0), F(128), A(32), F(132), A(200),
                                         F(129)),
          IA, "merge2 lse partly over lse_a");
    ALIAS(ctx, clvarlen_attention_merge2(ctx, f32, 2, 1, 16, A(0), F(128), A(32), F(132), A(200),
                                         F(210)),
          IA, "merge2 lse over o");
    /* forward: q, k, v [4, 1, 16] at F(0), F(64), F(128); cu I(8) = {0, 4} */
    int32_t *kcu = (int32_t *)(void *)(keep + 1024);
    kcu[8] = 0;
    kcu[9] = 4;
    clvarlen_attention_params p;
    clvarlen_attention_params_init(&p);
    p.n_seqs = 1;
    p.total_q = p.total_k = 4;
    p.heads_q = p.heads_kv = 1;
    p.head_dim = 16;
    ALIAS(ctx, clvarlen_attention_forward(ctx, &p, A(0), A(64), A(128), I(8), I(8), NULL, A(60),
                                          NULL),
          IA, "forward o over q and k");
    ALIAS(ctx, clvarlen_attention_forward(ctx, &p, A(0), A(64), A(128), I(8), I(8), NULL, A(200),
                                          F(190)),
          IA, "forward lse over v");
    ALIAS(ctx, clvarlen_attention_forward(ctx, &p, A(0), A(64), A(128), I(8), I(8), NULL, A(200),
                                          F(300)),
          OK_, "forward apart");
    clvarlen_context_destroy(ctx);
}
END_TEST

START_TEST(api_overlap_gated_delta)
{
    clvarlen_context *ctx = tu_cpu_context();
    arena_init();
    /* N 1, T 2, H = HV = 1, K = V = 4: A_log F(0), dt_bias F(1), a F(2), b F(4),
     * q F(8), k F(16), v F(24); cu I(8) = {0, 2}; pool of 2 slots F(64); o F(100) */
    int32_t *kcu = (int32_t *)(void *)(keep + 1024);
    kcu[8] = 0;
    kcu[9] = 2;
    clvarlen_gdn_params p;
    clvarlen_gdn_params_init(&p);
    p.n_seqs = 1;
    p.total_tokens = 2;
    p.heads_qk = p.heads_v = 1;
    p.key_dim = p.value_dim = 4;
    p.state_slots = 2;
#define GDN(pool, o) clvarlen_gated_delta_rule(ctx, &p, F(0), A(1), A(2), A(4), A(8), A(16), \
                                               A(24), I(8), (pool), NULL, NULL, NULL, (o))
    ALIAS(ctx, GDN(F(64), A(20)), IA, "gated delta o over k and v");
    ALIAS(ctx, GDN(F(64), A(70)), IA, "gated delta o over the state pool");
    ALIAS(ctx, GDN(F(30), A(100)), IA, "gated delta state pool over v");
    ALIAS(ctx, GDN(A(1024 + 8), A(100)), IA, "gated delta state pool over cu_seqlens");
    ALIAS(ctx, GDN(F(64), A(100)), OK_, "gated delta apart");
#undef GDN
    /* o a column slice beside v in one fused row [v | o] of 8: apart, exactly */
    p.v_stride = p.o_stride = 8;
    ALIAS(ctx, clvarlen_gated_delta_rule(ctx, &p, F(0), A(1), A(2), A(4), A(8), A(16), A(200),
                                         I(8), F(64), NULL, NULL, NULL, A(204)),
          OK_, "gated delta o interleaved with v");
    clvarlen_context_destroy(ctx);
}
END_TEST

TCase *api_limits_cases(void)
{
    TCase *tc = tcase_create("limits");
    tcase_add_test(tc, api_hostile_shapes);
    tcase_add_test(tc, api_overlap_segment);
    tcase_add_test(tc, api_overlap_attention);
    tcase_add_test(tc, api_overlap_gated_delta);
    return tc;
}
