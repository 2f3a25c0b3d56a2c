/* One bad input, one status, on every path (test-segment-cl only): each case
 * of the table runs the same invalid input through the host-memory entry
 * point on the CPU fallback, the host-memory entry point on the OpenCL device
 * and the cl_mem entry point with device checks on, and expects the same
 * documented status from all three, with every output left untouched: host
 * arrays, device buffers (guard bands included) and scalar outputs such as a
 * device-written total or local token count.
 */
#include "test-segment.h"
#include "kit-cl.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <clvarlen/clvarlen-cl.h>

#define PB_FILL 0xAB
#define PB_MAX 8

/* One tensor argument of a case: input data or an output of `bytes`. */
typedef struct pbuf {
    const void *init; /* inputs */
    size_t bytes;
    bool out;
    unsigned char *host;
    tu_clbuf d;
} pbuf;

typedef struct pbufs {
    pbuf b[PB_MAX];
    int n;
    bool cl;
} pbufs;

static void pb_make(clvarlen_context *ctx, pbufs *p)
{
    for (int i = 0; i < p->n; i++) {
        pbuf *b = &p->b[i];
        b->host = tu_xmalloc(b->bytes);
        if (b->init)
            memcpy(b->host, b->init, b->bytes);
        else
            memset(b->host, PB_FILL, b->bytes);
        if (p->cl)
            b->d = tu_clbuf_make(ctx, b->bytes, 8 * (size_t)(i + 1), b->init);
    }
}

/* Outputs untouched (and inputs too: nothing is written on error), then freed. */
static void pb_check_free(clvarlen_context *ctx, pbufs *p, const char *label)
{
    for (int i = 0; i < p->n; i++) {
        pbuf *b = &p->b[i];
        if (p->cl) {
            if (b->out)
                tu_clbuf_untouched(ctx, &b->d, label);
            else
                tu_clbuf_fetch(ctx, &b->d, label);
            tu_clbuf_free(&b->d);
        } else {
            for (size_t k = 0; k < b->bytes; k++)
                tu_check(b->init ? b->host[k] == ((const unsigned char *)b->init)[k]
                                 : b->host[k] == PB_FILL,
                         "%s: argument %d byte %zu written on error", label, i, k);
        }
        free(b->host);
    }
}

#define H(i) ((void *)p.b[i].host)
#define M(i) p.b[i].d.mem
#define O(i) p.b[i].d.off
#define PB_IN(data) {.init = (data), .bytes = sizeof(data)}
#define PB_OUT(n) {.bytes = (n), .out = true}

static const int32_t good_cu[4] = {0, 5, 12, 18}, dec_cu[4] = {0, 12, 5, 18},
                     nz_cu[4] = {3, 5, 12, 18};
static float rows18[18 * 3];

/* ------------------------------------------------------------ the runs of each op */

static clvarlen_status run_token_maps(clvarlen_context *ctx, bool cl, const int32_t *cu,
                                      int64_t total)
{
    int32_t cu_copy[4];
    memcpy(cu_copy, cu, sizeof cu_copy);
    pbufs p = {.b = {PB_IN(cu_copy), PB_OUT(18 * 4), PB_OUT(18 * 4)}, .n = 3, .cl = cl};
    pb_make(ctx, &p);
    clvarlen_status st =
        cl ? clvarlen_cl_token_maps(ctx, M(0), O(0), 3, total, NULL, 0, M(1), O(1), M(2), O(2),
                                    0, NULL, NULL)
           : clvarlen_token_maps(ctx, H(0), 3, total, NULL, H(1), H(2));
    pb_check_free(ctx, &p, "token_maps");
    return st;
}

static clvarlen_status run_lengths(clvarlen_context *ctx, bool cl, const int32_t *cu)
{
    int32_t cu_copy[4];
    memcpy(cu_copy, cu, sizeof cu_copy);
    pbufs p = {.b = {PB_IN(cu_copy), PB_OUT(12)}, .n = 2, .cl = cl};
    pb_make(ctx, &p);
    clvarlen_status st =
        cl ? clvarlen_cl_lengths_from_cu_seqlens(ctx, M(0), O(0), 3, M(1), O(1), 0, NULL, NULL)
           : clvarlen_lengths_from_cu_seqlens(ctx, H(0), 3, H(1));
    pb_check_free(ctx, &p, "lengths_from_cu_seqlens");
    return st;
}

static clvarlen_status run_cu(clvarlen_context *ctx, bool cl, const int32_t *lengths)
{
    int32_t len_copy[3];
    memcpy(len_copy, lengths, sizeof len_copy);
    pbufs p = {.b = {PB_IN(len_copy), PB_OUT(16)}, .n = 2, .cl = cl};
    pb_make(ctx, &p);
    clvarlen_status st =
        cl ? clvarlen_cl_cu_seqlens_from_lengths(ctx, M(0), O(0), 3, M(1), O(1), 0, NULL, NULL)
           : clvarlen_cu_seqlens_from_lengths(ctx, H(0), 3, H(1));
    pb_check_free(ctx, &p, "cu_seqlens_from_lengths");
    return st;
}

/* pack [3, 6, 3 floats] with valid_lens (or a mask when masked), capacity rows. */
static clvarlen_status run_pack(clvarlen_context *ctx, bool cl, const int32_t *valid,
                                bool masked, int64_t capacity)
{
    int32_t v[3];
    memcpy(v, valid, sizeof v);
    uint8_t mask[18];
    for (int b = 0; b < 3; b++)
        for (int s = 0; s < 6; s++)
            mask[b * 6 + s] = s < v[b];
    pbufs p = {.b = {PB_IN(rows18), PB_IN(v), PB_IN(mask), PB_OUT(18 * 12), PB_OUT(16),
                     PB_OUT(18 * 8), PB_OUT(8)},
               .n = 7,
               .cl = cl};
    pb_make(ctx, &p);
    clvarlen_status st;
    if (cl)
        st = clvarlen_cl_pack(ctx, F32, 3, M(0), O(0), 0, 3, 6, masked ? NULL : M(1), O(1),
                              masked ? M(2) : NULL, O(2), capacity, M(3), O(3), M(4), O(4), M(5),
                              O(5), M(6), O(6), 0, NULL, NULL);
    else if (masked)
        st = clvarlen_pack_masked(ctx, F32, 3, H(0), 0, 3, 6, H(2), capacity, H(3), H(4), H(5),
                                  H(6));
    else
        st = clvarlen_pack(ctx, F32, 3, H(0), 0, 3, 6, H(1), capacity, H(3), H(4), H(5), H(6));
    pb_check_free(ctx, &p, masked ? "pack_masked" : "pack");
    return st;
}

static clvarlen_status run_unpack(clvarlen_context *ctx, bool cl, const int64_t *src_index)
{
    int64_t si[3];
    memcpy(si, src_index, sizeof si);
    pbufs p = {.b = {PB_IN(rows18), PB_IN(si), PB_OUT(18 * 12)}, .n = 3, .cl = cl};
    pb_make(ctx, &p);
    clvarlen_status st =
        cl ? clvarlen_cl_unpack(ctx, F32, 3, M(0), O(0), 0, 3, M(1), O(1), 3, 6, NULL, M(2), O(2),
                                0, 0, NULL, NULL)
           : clvarlen_unpack(ctx, F32, 3, H(0), 0, 3, H(1), 3, 6, NULL, H(2), 0);
    pb_check_free(ctx, &p, "unpack");
    return st;
}

static clvarlen_status run_gather(clvarlen_context *ctx, bool cl, const int32_t *index)
{
    int32_t idx[4];
    memcpy(idx, index, sizeof idx);
    pbufs p = {.b = {PB_IN(rows18), PB_IN(idx), PB_OUT(4 * 12)}, .n = 3, .cl = cl};
    pb_make(ctx, &p);
    clvarlen_status st =
        cl ? clvarlen_cl_gather_rows(ctx, F32, 3, M(0), O(0), 18, 0, M(1), O(1), 4, M(2), O(2), 0,
                                     0, NULL, NULL)
           : clvarlen_gather_rows(ctx, F32, 3, H(0), 18, 0, H(1), 4, H(2), 0);
    pb_check_free(ctx, &p, "gather_rows");
    return st;
}

static clvarlen_status run_scatter(clvarlen_context *ctx, bool cl, const int32_t *index,
                                   clvarlen_scatter_mode mode, unsigned flags)
{
    int32_t idx[4];
    memcpy(idx, index, sizeof idx);
    /* dst is read too (overwrite without ZERO_REST keeps rows): an input's pattern */
    pbufs p = {.b = {PB_IN(rows18), PB_IN(idx), PB_OUT(18 * 12)}, .n = 3, .cl = cl};
    pb_make(ctx, &p);
    clvarlen_status st =
        cl ? clvarlen_cl_scatter_rows(ctx, F32, 3, M(0), O(0), 0, M(1), O(1), 4, M(2), O(2), 18, 0,
                                      mode, flags, 0, NULL, NULL)
           : clvarlen_scatter_rows(ctx, F32, 3, H(0), 0, H(1), 4, H(2), 18, 0, mode, flags);
    pb_check_free(ctx, &p, "scatter_rows");
    return st;
}

static clvarlen_status run_expand(clvarlen_context *ctx, bool cl, const int32_t *kv,
                                  const int32_t *q, int64_t capacity)
{
    int32_t kvc[2], qc[2], pt[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    memcpy(kvc, kv, sizeof kvc);
    memcpy(qc, q, sizeof qc);
    pbufs p = {.b = {PB_IN(kvc), PB_IN(qc), PB_IN(pt), PB_OUT(8 * 4), PB_OUT(8 * 16), PB_OUT(8)},
               .n = 6,
               .cl = cl};
    pb_make(ctx, &p);
    clvarlen_status st =
        cl ? clvarlen_cl_seqlens_expand(ctx, M(0), O(0), M(1), O(1), 0, 2, M(2), O(2), 4, 0, 0,
                                        capacity, M(3), O(3), M(4), O(4), 0, M(5), O(5), 0, NULL,
                                        NULL)
           : clvarlen_seqlens_expand(ctx, H(0), H(1), 0, 2, H(2), 4, 0, 0, capacity, H(3), H(4),
                                     0, H(5));
    pb_check_free(ctx, &p, "seqlens_expand");
    return st;
}

static clvarlen_status run_cp_plan(clvarlen_context *ctx, bool cl, const int32_t *cu,
                                   int64_t capacity)
{
    int32_t cu_copy[4];
    memcpy(cu_copy, cu, sizeof cu_copy);
    pbufs p = {.b = {PB_IN(cu_copy), PB_OUT(16), PB_OUT(16), PB_OUT(16), PB_OUT(18 * 4),
                     PB_OUT(18 * 4), PB_OUT(8)},
               .n = 7,
               .cl = cl};
    pb_make(ctx, &p);
    clvarlen_status st;
    if (cl) {
        st = clvarlen_cl_cp_plan(ctx, M(0), O(0), 3, 2, 1, M(1), O(1), M(2), O(2), M(3), O(3),
                                 capacity, M(4), O(4), M(5), O(5), M(6), O(6), 0, NULL, NULL);
    } else {
        clvarlen_cp_plan_out plan = {
            .local_cu_seqlens = H(1),
            .head_cu = H(2),
            .tail_cu = H(3),
            .global_index = H(4),
            .position = H(5),
            .capacity = capacity,
            .local_tokens = -7,
            .max_head = -7,
            .max_tail = -7,
        };
        st = clvarlen_cp_plan(ctx, H(0), 3, 2, 1, &plan);
        tu_check(plan.local_tokens == -7 && plan.max_head == -7 && plan.max_tail == -7,
                 "cp_plan: plan counts written on error");
    }
    pb_check_free(ctx, &p, "cp_plan");
    return st;
}

static clvarlen_status run_cp_rows(clvarlen_context *ctx, bool cl, const int32_t *cu,
                                   int to_local, int64_t local_capacity)
{
    int32_t cu_copy[4];
    memcpy(cu_copy, cu, sizeof cu_copy);
    /* 0: the input rows, 1: cu, 2: the output rows */
    pbufs p = {.b = {PB_IN(rows18), PB_IN(cu_copy), PB_OUT(18 * 12)}, .n = 3, .cl = cl};
    pb_make(ctx, &p);
    clvarlen_status st;
    if (to_local)
        st = cl ? clvarlen_cl_cp_gather(ctx, F32, 3, M(0), O(0), 0, 18, M(1), O(1), 3, 2, 0,
                                        M(2), O(2), 0, local_capacity, 0, NULL, NULL)
                : clvarlen_cp_gather(ctx, F32, 3, H(0), 0, H(1), 3, 2, 0, H(2), 0,
                                     local_capacity);
    else
        st = cl ? clvarlen_cl_cp_scatter(ctx, F32, 3, M(0), O(0), 0, 18, M(1), O(1), 3, 2, 0,
                                         M(2), O(2), 0, 18, CLVARLEN_SCATTER_OVERWRITE,
                                         CLVARLEN_SCATTER_ZERO_REST, 0, NULL, NULL)
                : clvarlen_cp_scatter(ctx, F32, 3, H(0), 0, H(1), 3, 2, 0, H(2), 0,
                                      CLVARLEN_SCATTER_OVERWRITE, CLVARLEN_SCATTER_ZERO_REST);
    pb_check_free(ctx, &p, to_local ? "cp_gather" : "cp_scatter");
    return st;
}

/* Attention forward: 3 sequences, 1 head of 16, q and k rows from cu_q / cu_k. */
static clvarlen_status run_forward(clvarlen_context *ctx, bool cl, const int32_t *cu_q,
                                   const int32_t *cu_k)
{
    static float qkv[18 * 16];
    int32_t cq[4], ck[4];
    memcpy(cq, cu_q, sizeof cq);
    memcpy(ck, cu_k, sizeof ck);
    pbufs p = {.b = {PB_IN(qkv), PB_IN(qkv), PB_IN(qkv), PB_IN(cq), PB_IN(ck),
                     PB_OUT(18 * 16 * 4), PB_OUT(18 * 4)},
               .n = 7,
               .cl = cl};
    pb_make(ctx, &p);
    clvarlen_attention_params prm;
    clvarlen_attention_params_init(&prm);
    prm.n_seqs = 3;
    prm.total_q = 18;
    prm.total_k = 18;
    prm.heads_q = prm.heads_kv = 1;
    prm.head_dim = 16;
    clvarlen_status st =
        cl ? clvarlen_cl_attention_forward(ctx, &prm, M(0), O(0), M(1), O(1), M(2), O(2), M(3),
                                           O(3), M(4), O(4), NULL, 0, M(5), O(5), M(6), O(6), 0,
                                           NULL, NULL)
           : clvarlen_attention_forward(ctx, &prm, H(0), H(1), H(2), H(3), H(4), NULL, H(5),
                                        H(6));
    pb_check_free(ctx, &p, "attention_forward");
    return st;
}

/* ------------------------------------------------------------ the table */

static const int32_t neg_lengths[3] = {5, -7, 6}, valid4[3] = {4, 4, 4},
                     too_long[3] = {4, 7, 4}, neg_valid[3] = {4, -1, 4};
static const int64_t si_high[3] = {0, 1, 18}, si_neg[3] = {0, -1, 2};
static const int32_t idx_high[4] = {0, 5, 18, 2}, idx_neg[4] = {0, -2, 1, 2};
static const int32_t kv2[2] = {9, 4}, q2[2] = {3, 4}, q_neg[2] = {3, -1}, kv_neg[2] = {-1, 4};

#define CASE(name, call) \
    static clvarlen_status name(clvarlen_context *ctx, bool cl) { return call; }
CASE(maps_decreasing, run_token_maps(ctx, cl, dec_cu, 18))
CASE(maps_not_zero, run_token_maps(ctx, cl, nz_cu, 18))
CASE(maps_total, run_token_maps(ctx, cl, good_cu, 17))
CASE(lengths_decreasing, run_lengths(ctx, cl, dec_cu))
CASE(cu_negative, run_cu(ctx, cl, neg_lengths))
CASE(pack_capacity, run_pack(ctx, cl, valid4, false, 11))
CASE(pack_masked_capacity, run_pack(ctx, cl, valid4, true, 11))
CASE(pack_too_long, run_pack(ctx, cl, too_long, false, 18))
CASE(pack_negative, run_pack(ctx, cl, neg_valid, false, 18))
CASE(unpack_high, run_unpack(ctx, cl, si_high))
CASE(unpack_negative, run_unpack(ctx, cl, si_neg))
CASE(gather_high, run_gather(ctx, cl, idx_high))
CASE(gather_negative, run_gather(ctx, cl, idx_neg))
CASE(scatter_high, run_scatter(ctx, cl, idx_high, CLVARLEN_SCATTER_OVERWRITE, 0))
CASE(scatter_high_zero,
     run_scatter(ctx, cl, idx_high, CLVARLEN_SCATTER_OVERWRITE, CLVARLEN_SCATTER_ZERO_REST))
CASE(scatter_acc_negative, run_scatter(ctx, cl, idx_neg, CLVARLEN_SCATTER_ACCUMULATE, 0))
CASE(expand_capacity, run_expand(ctx, cl, kv2, q2, 6))
CASE(expand_negative_q, run_expand(ctx, cl, kv2, q_neg, 8))
CASE(expand_negative_kv, run_expand(ctx, cl, kv_neg, q2, 8))
CASE(cp_plan_decreasing, run_cp_plan(ctx, cl, dec_cu, 18))
CASE(cp_plan_capacity, run_cp_plan(ctx, cl, good_cu, 8))
CASE(cp_gather_not_zero, run_cp_rows(ctx, cl, nz_cu, 1, 18))
CASE(cp_gather_capacity, run_cp_rows(ctx, cl, good_cu, 1, 8))
CASE(cp_scatter_decreasing, run_cp_rows(ctx, cl, dec_cu, 0, 18))
CASE(forward_cu_q, run_forward(ctx, cl, dec_cu, good_cu))
CASE(forward_cu_k, run_forward(ctx, cl, good_cu, nz_cu))
#undef CASE

#define ICU_ CLVARLEN_ERROR_INVALID_CU_SEQLENS
#define IA_ CLVARLEN_ERROR_INVALID_ARGUMENT
#define IOR_ CLVARLEN_ERROR_INDEX_OUT_OF_RANGE
#define BTS_ CLVARLEN_ERROR_BUFFER_TOO_SMALL

static const struct path_case {
    const char *name;
    clvarlen_status (*run)(clvarlen_context *ctx, bool cl);
    clvarlen_status want;
} path_cases[] = {
#define ROW(name, want) {#name, name, want}
    ROW(maps_decreasing, ICU_),     ROW(maps_not_zero, ICU_),
    ROW(maps_total, ICU_),          ROW(lengths_decreasing, ICU_),
    ROW(cu_negative, IA_),          ROW(pack_capacity, BTS_),
    ROW(pack_masked_capacity, BTS_), ROW(pack_too_long, IA_),
    ROW(pack_negative, IA_),        ROW(unpack_high, IOR_),
    ROW(unpack_negative, IOR_),     ROW(gather_high, IOR_),
    ROW(gather_negative, IOR_),     ROW(scatter_high, IOR_),
    ROW(scatter_high_zero, IOR_),   ROW(scatter_acc_negative, IOR_),
    ROW(expand_capacity, BTS_),     ROW(expand_negative_q, IA_),
    ROW(expand_negative_kv, IA_),   ROW(cp_plan_decreasing, ICU_),
    ROW(cp_plan_capacity, BTS_),    ROW(cp_gather_not_zero, ICU_),
    ROW(cp_gather_capacity, BTS_),  ROW(cp_scatter_decreasing, ICU_),
    ROW(forward_cu_q, ICU_),        ROW(forward_cu_k, ICU_),
#undef ROW
};

START_TEST(paths_same_status)
{
    for (int i = 0; i < 18 * 3; i++)
        rows18[i] = (float)i;
    clvarlen_context *cpu = tu_cpu_context();
    clvarlen_context *dev = seg_cl_context(0);
    clvarlen_context *checked = seg_cl_context(1);
    int failures = 0;
    char report[4096] = "";
    for (size_t c = 0; c < sizeof path_cases / sizeof path_cases[0]; c++) {
        const struct path_case *pc = &path_cases[c];
        clvarlen_status got[3] = {pc->run(cpu, false), pc->run(dev, false),
                                  pc->run(checked, true)};
        if (got[0] == pc->want && got[1] == pc->want && got[2] == pc->want)
            continue;
        failures++;
        size_t len = strlen(report);
        snprintf(report + len, sizeof report - len, "\n  %s: want %s; cpu %s, device %s, cl_mem %s",
                 pc->name, clvarlen_status_name(pc->want), clvarlen_status_name(got[0]),
                 clvarlen_status_name(got[1]), clvarlen_status_name(got[2]));
    }
    clvarlen_context_destroy(checked);
    clvarlen_context_destroy(dev);
    clvarlen_context_destroy(cpu);
    tu_check(failures == 0, "%d cases disagree:%s", failures, report);
}
END_TEST

void seg_add_paths_cases(Suite *s)
{
    TCase *tc = tcase_create("paths");
    tcase_set_timeout(tc, SEG_TIMEOUT);
    tcase_add_test(tc, paths_same_status);
    suite_add_tcase(s, tc);
}
