/* The ops of test-workload.h, small enough to run under valgrind and to
 * compile quickly on PoCL: every result byte must be the same whichever
 * thread, context or process computes it. */
#include "test-workload.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kit.h"

/* pack: padded [BATCH, MAX_LEN, ROW] f32 */
#define PACK_BATCH 6
#define PACK_MAX_LEN 20
#define PACK_ROW 24
#define PACK_CAP (PACK_BATCH * PACK_MAX_LEN)
/* gather: f16 rows */
#define GATHER_SRC_ROWS 64
#define GATHER_ROW 40
#define GATHER_N 50
/* attention: f32, 3 sequences */
#define ATT_N 3
#define ATT_HQ 4
#define ATT_HK 2
#define ATT_D 64
/* gated delta: f32 */
#define GDN_N 3
#define GDN_H 2
#define GDN_HV 4
#define GDN_K 32
#define GDN_V 32
#define GDN_SLOTS 4

static const int32_t att_q_len[ATT_N] = {5, 17, 1};
static const int32_t att_k_len[ATT_N] = {9, 17, 30};
static const int32_t gdn_len[GDN_N] = {4, 11, 0};
static const int32_t gdn_slot[GDN_N] = {2, 0, 3};

struct workload {
    float *padded;
    int32_t valid_lens[PACK_BATCH];
    uint16_t *gather_src;
    int32_t gather_index[GATHER_N];
    clvarlen_attention_params att;
    int32_t att_cu_q[ATT_N + 1], att_cu_k[ATT_N + 1];
    float *att_q, *att_k, *att_v;
    clvarlen_gdn_params gdn;
    int32_t gdn_cu[GDN_N + 1];
    float *gdn_q, *gdn_k, *gdn_v, *gdn_a, *gdn_b, *gdn_pool;
    float A_log[GDN_HV], dt_bias[GDN_HV];
    /* where each output starts in a result */
    size_t off_packed, off_pack_cu, off_src_index, off_gather, off_att_o, off_att_lse,
        off_gdn_o, off_gdn_pool, bytes;
};

static float *random_f32(tu_rng *r, size_t n, double scale)
{
    float *p = malloc(n * sizeof *p);
    if (p)
        tu_fill_random(r, p, CLVARLEN_DTYPE_F32, n, scale);
    return p;
}

static size_t take(size_t *at, size_t bytes)
{
    size_t here = *at;
    *at += (bytes + 63) / 64 * 64;
    return here;
}

static void att_setup(workload *w)
{
    clvarlen_attention_params *p = &w->att;
    clvarlen_attention_params_init(p);
    tu_cu_from_lengths(att_q_len, ATT_N, w->att_cu_q);
    tu_cu_from_lengths(att_k_len, ATT_N, w->att_cu_k);
    p->dtype = CLVARLEN_DTYPE_F32;
    p->n_seqs = ATT_N;
    p->total_q = w->att_cu_q[ATT_N];
    p->total_k = w->att_cu_k[ATT_N];
    p->heads_q = ATT_HQ;
    p->heads_kv = ATT_HK;
    p->head_dim = ATT_D;
    p->causal = 1;
}

static void gdn_setup(workload *w)
{
    clvarlen_gdn_params *p = &w->gdn;
    clvarlen_gdn_params_init(p);
    tu_cu_from_lengths(gdn_len, GDN_N, w->gdn_cu);
    p->n_seqs = GDN_N;
    p->total_tokens = w->gdn_cu[GDN_N];
    p->heads_qk = GDN_H;
    p->heads_v = GDN_HV;
    p->key_dim = GDN_K;
    p->value_dim = GDN_V;
    p->state_slots = GDN_SLOTS;
    p->use_qk_l2norm = 1;
}

static void layout(workload *w)
{
    size_t at = 0;
    w->off_packed = take(&at, (size_t)PACK_CAP * PACK_ROW * sizeof(float));
    w->off_pack_cu = take(&at, (PACK_BATCH + 1) * sizeof(int32_t));
    w->off_src_index = take(&at, (size_t)PACK_CAP * sizeof(int64_t));
    w->off_gather = take(&at, (size_t)GATHER_N * GATHER_ROW * sizeof(uint16_t));
    w->off_att_o = take(&at, (size_t)w->att.total_q * ATT_HQ * ATT_D * sizeof(float));
    w->off_att_lse = take(&at, (size_t)ATT_HQ * w->att.total_q * sizeof(float));
    w->off_gdn_o = take(&at, (size_t)w->gdn.total_tokens * GDN_HV * GDN_V * sizeof(float));
    w->off_gdn_pool = take(&at, (size_t)GDN_SLOTS * GDN_HV * GDN_V * GDN_K * sizeof(float));
    w->bytes = at;
}

workload *workload_create(void)
{
    workload *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    tu_rng r = tu_rng_make(0xc0ffee);
    att_setup(w);
    gdn_setup(w);
    layout(w);
    w->padded = random_f32(&r, (size_t)PACK_CAP * PACK_ROW, 1.0);
    for (int b = 0; b < PACK_BATCH; b++)
        w->valid_lens[b] = (int32_t)tu_int(&r, 0, PACK_MAX_LEN);
    w->gather_src = malloc((size_t)GATHER_SRC_ROWS * GATHER_ROW * sizeof(uint16_t));
    if (w->gather_src)
        tu_fill_random(&r, w->gather_src, CLVARLEN_DTYPE_F16,
                       (size_t)GATHER_SRC_ROWS * GATHER_ROW, 1.0);
    for (int i = 0; i < GATHER_N; i++)
        w->gather_index[i] = (int32_t)tu_int(&r, -1, GATHER_SRC_ROWS - 1);
    w->att_q = random_f32(&r, (size_t)w->att.total_q * ATT_HQ * ATT_D, 1.0);
    w->att_k = random_f32(&r, (size_t)w->att.total_k * ATT_HK * ATT_D, 1.0);
    w->att_v = random_f32(&r, (size_t)w->att.total_k * ATT_HK * ATT_D, 1.0);
    size_t T = (size_t)w->gdn.total_tokens;
    w->gdn_q = random_f32(&r, T * GDN_H * GDN_K, 1.0);
    w->gdn_k = random_f32(&r, T * GDN_H * GDN_K, 1.0);
    w->gdn_v = random_f32(&r, T * GDN_HV * GDN_V, 1.0);
    w->gdn_a = random_f32(&r, T * GDN_HV, 1.0);
    w->gdn_b = random_f32(&r, T * GDN_HV, 1.0);
    w->gdn_pool = random_f32(&r, (size_t)GDN_SLOTS * GDN_HV * GDN_V * GDN_K, 0.1);
    tu_fill_random(&r, w->A_log, CLVARLEN_DTYPE_F32, GDN_HV, 1.0);
    tu_fill_random(&r, w->dt_bias, CLVARLEN_DTYPE_F32, GDN_HV, 1.0);
    if (!w->padded || !w->gather_src || !w->att_q || !w->att_k || !w->att_v || !w->gdn_q ||
        !w->gdn_k || !w->gdn_v || !w->gdn_a || !w->gdn_b || !w->gdn_pool) {
        workload_destroy(w);
        return NULL;
    }
    return w;
}

void workload_destroy(workload *w)
{
    if (!w)
        return;
    free(w->padded);
    free(w->gather_src);
    free(w->att_q);
    free(w->att_k);
    free(w->att_v);
    free(w->gdn_q);
    free(w->gdn_k);
    free(w->gdn_v);
    free(w->gdn_a);
    free(w->gdn_b);
    free(w->gdn_pool);
    free(w);
}

size_t workload_result_bytes(const workload *w)
{
    return w->bytes;
}

clvarlen_status workload_run(clvarlen_context *ctx, const workload *w, unsigned char *result,
                             const char **what)
{
    memset(result, 0, w->bytes);
    int64_t total = 0;
    *what = "pack";
    clvarlen_status st = clvarlen_pack(
        ctx, CLVARLEN_DTYPE_F32, PACK_ROW, w->padded, 0, PACK_BATCH, PACK_MAX_LEN, w->valid_lens,
        PACK_CAP, result + w->off_packed, (int32_t *)(void *)(result + w->off_pack_cu),
        (int64_t *)(void *)(result + w->off_src_index), &total);
    if (st != CLVARLEN_SUCCESS)
        return st;
    *what = "gather_rows";
    st = clvarlen_gather_rows(ctx, CLVARLEN_DTYPE_F16, GATHER_ROW, w->gather_src, GATHER_SRC_ROWS,
                              0, w->gather_index, GATHER_N, result + w->off_gather, 0);
    if (st != CLVARLEN_SUCCESS)
        return st;
    *what = "attention_forward";
    st = clvarlen_attention_forward(ctx, &w->att, w->att_q, w->att_k, w->att_v, w->att_cu_q,
                                    w->att_cu_k, NULL, result + w->off_att_o,
                                    (float *)(void *)(result + w->off_att_lse));
    if (st != CLVARLEN_SUCCESS)
        return st;
    *what = "gated_delta_rule";
    void *pool = result + w->off_gdn_pool;
    memcpy(pool, w->gdn_pool, (size_t)GDN_SLOTS * GDN_HV * GDN_V * GDN_K * sizeof(float));
    return clvarlen_gated_delta_rule(ctx, &w->gdn, w->A_log, w->dt_bias, w->gdn_a, w->gdn_b,
                                     w->gdn_q, w->gdn_k, w->gdn_v, w->gdn_cu, pool, gdn_slot,
                                     NULL, NULL, result + w->off_gdn_o);
}
