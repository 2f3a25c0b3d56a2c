/* Varlen attention on the CPU fallback: the tiled online softmax of the
 * device kernels as blocked matrix products. A work item is (sequence, KV
 * head, the query heads of its group that are stacked together, a block of
 * query rows): K and V blocks are converted to f32 once per item and serve
 * every stacked row; S = Q K^T and O += P V run on the microkernels of
 * attention-isa.h (the best instruction set the CPU has, picked at run
 * time), the softmax between them a row at a time with a vector exp.
 */
#include "cpu/attention.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/attention-isa.h"

/* Stacked rows per item (query rows x query heads of one KV head). */
#define CPU_ROWS 64
/* Query heads stacked at most (the rest of a group goes to further items). */
#define CPU_MAX_STACK 4

typedef struct tile_item {
    int32_t seq;
    int32_t row0; /* first query row of the block within the sequence */
} tile_item;

typedef struct fwd_job {
    const cv_attn_desc *d;
    const cv_attn_kern *kern;
    const char *q, *k, *v;
    const int32_t *cu_q, *cu_k, *q_pos;
    char *o;
    float *lse;
    const tile_item *tiles;
    int32_t block_m, stack, chunks; /* query rows per item, heads stacked, chunks per group */
    /* One scratch block per pool thread; a running chunk claims a free one. */
    float **scratch;
    atomic_int *busy;
    int n_scratch;
} fwd_job;

/* The stacked rows of one item: row R is query row row0 + R % rows of head h0 + R / rows. */
typedef struct fwd_rows {
    int32_t n, rows, h0;
    int64_t q_begin, k_begin, row0;
    int64_t lo[CPU_ROWS], hi[CPU_ROWS];
    float m[CPU_ROWS], l[CPU_ROWS];
} fwd_rows;

static int claim_scratch(fwd_job *job)
{
    for (;;) {
        for (int i = 0; i < job->n_scratch; i++) {
            if (!atomic_exchange(&job->busy[i], 1))
                return i;
        }
    }
}

/* The normalised rows of a finished item into o and lse (rows that saw
 * nothing: o = 0, lse = -inf). */
static void store_rows(fwd_job *job, const fwd_rows *fr, const float *acc)
{
    const cv_attn_desc *d = job->d;
    const int32_t Dv = d->head_dim_v;
    for (int32_t R = 0; R < fr->n; R++) {
        int32_t h = fr->h0 + R / fr->rows;
        int64_t tok = fr->q_begin + fr->row0 + R % fr->rows;
        int64_t ooff = tok * d->o_stride + (int64_t)h * Dv;
        const float *ar = acc + (size_t)R * Dv;
        float inv = fr->l[R] > 0.0f ? 1.0f / fr->l[R] : 0.0f;
        for (int32_t c = 0; c < Dv; c++)
            cv_store_act(job->o, d->dtype, ooff + c, fr->l[R] > 0.0f ? ar[c] * inv : 0.0f);
        if (job->lse)
            job->lse[(int64_t)h * d->total_q + tok] =
                fr->l[R] > 0.0f ? fr->m[R] + logf(fr->l[R]) : -INFINITY;
    }
}

/* Scores of row R for keys [kb, kb + nb) -> probabilities (in place, 0 past nb
 * and where masked), the running max and sum updated; returns the factor acc
 * row R must be scaled by (1 when the block holds no key the row sees: its
 * probabilities are then all 0). */
static float softmax_row(const cv_attn_kern *kern, const cv_attn_desc *d, fwd_rows *fr,
                         int32_t R, int64_t kb, int32_t nb, float *x)
{
    int64_t lo = fr->lo[R], hi = fr->hi[R];
    if (lo > hi || kb > hi || kb + nb - 1 < lo) {
        memset(x, 0, sizeof(float) * CV_ATTN_BN);
        return 1.0f;
    }
    int32_t jlo = (int32_t)CV_MAX(lo - kb, (int64_t)0);
    int32_t jhi = (int32_t)CV_MIN(hi - kb, (int64_t)nb - 1);
    float bmax = kern->mask_max(x, d->scale, d->softcap, jlo, jhi);
    /* bmax is finite (the block meets the visible range) unless scores are NaN. */
    float m_new = fr->m[R] > bmax ? fr->m[R] : bmax;
    float alpha = expf(fr->m[R] - m_new); /* 0 when m was -inf */
    fr->m[R] = m_new;
    fr->l[R] = fr->l[R] * alpha + kern->exp_sum(x, m_new);
    return alpha;
}

/* An item's f32 tiles in its worker's scratch. */
typedef struct fwd_tiles {
    float *acc; /* [CPU_ROWS][Dv] */
    float *qf;  /* [CPU_ROWS][D] */
    float *kt;  /* [D][CV_ATTN_BN] */
    float *vf;  /* [CV_ATTN_BN][Dv] */
    float *sc;  /* [CPU_ROWS][CV_ATTN_BN] */
} fwd_tiles;

static void fwd_block(fwd_job *job, fwd_rows *fr, int64_t kb, int32_t nb, const fwd_tiles *tl)
{
    float *kt = tl->kt, *vf = tl->vf, *sc = tl->sc, *acc = tl->acc;
    const cv_attn_desc *d = job->d;
    const cv_attn_kern *kern = job->kern;
    const int32_t D = d->head_dim, Dv = d->head_dim_v, kvh = fr->h0 / (d->heads_q / d->heads_kv);
    kern->load_kt(job->k, d->dtype, (fr->k_begin + kb) * d->k_stride + (int64_t)kvh * D,
                  d->k_stride, nb, D, kt);
    for (int32_t j = 0; j < nb; j++)
        kern->to_f32(job->v, d->dtype, (fr->k_begin + kb + j) * d->v_stride + (int64_t)kvh * Dv,
                     Dv, vf + (size_t)j * Dv);
    kern->scores(tl->qf, fr->n, D, kt, sc);
    float alpha[CPU_ROWS];
    for (int32_t R = 0; R < fr->n; R++) {
        float *p = sc + (size_t)R * CV_ATTN_BN;
        alpha[R] = softmax_row(kern, d, fr, R, kb, nb, p);
        if (d->drop_p > 0.0f) { /* SPEC 1.2: l summed the undropped p */
            int32_t h = fr->h0 + R / fr->rows;
            int64_t t = fr->q_begin + fr->row0 + R % fr->rows;
            for (int32_t j = 0; j < nb; j++)
                if (p[j] != 0.0f)
                    p[j] *= cv_dropout_factor(d, h, t, fr->k_begin + kb + j);
        }
    }
    kern->pv(sc, fr->n, nb, vf, Dv, acc, alpha);
}

static void fwd_item(fwd_job *job, int64_t w, float *scratch)
{
    const cv_attn_desc *d = job->d;
    const int32_t D = d->head_dim, Dv = d->head_dim_v, group = d->heads_q / d->heads_kv;
    const int64_t per_tile = (int64_t)d->heads_kv * job->chunks;
    const tile_item *it = &job->tiles[w / per_tile];
    const int32_t kvh = (int32_t)(w % per_tile / job->chunks), hc = (int32_t)(w % job->chunks);
    fwd_rows fr;
    fr.q_begin = job->cu_q[it->seq];
    fr.k_begin = job->cu_k[it->seq];
    fr.row0 = it->row0;
    const int64_t lq = job->cu_q[it->seq + 1] - fr.q_begin, lk = job->cu_k[it->seq + 1] - fr.k_begin;
    fr.rows = (int32_t)CV_MIN((int64_t)job->block_m, lq - it->row0);
    fr.h0 = kvh * group + hc * job->stack;
    fr.n = fr.rows * CV_MIN(job->stack, group - hc * job->stack);

    fwd_tiles tl;
    tl.acc = scratch;
    tl.qf = tl.acc + (size_t)CPU_ROWS * Dv;
    tl.kt = tl.qf + (size_t)CPU_ROWS * D;
    tl.vf = tl.kt + (size_t)D * CV_ATTN_BN;
    tl.sc = tl.vf + (size_t)CV_ATTN_BN * Dv;
    int64_t kmin = INT64_MAX, kmax = -1;
    for (int32_t R = 0; R < fr.n; R++) {
        int64_t i = it->row0 + R % fr.rows;
        int64_t pos = job->q_pos ? (int64_t)job->q_pos[fr.q_begin + i] : i + lk - lq;
        cv_attn_visible(d, pos, lk, &fr.lo[R], &fr.hi[R]);
        if (fr.lo[R] <= fr.hi[R]) {
            kmin = CV_MIN(kmin, fr.lo[R]);
            kmax = CV_MAX(kmax, fr.hi[R]);
        }
        job->kern->to_f32(job->q, d->dtype,
                          (fr.q_begin + i) * d->q_stride + (int64_t)(fr.h0 + R / fr.rows) * D, D,
                          tl.qf + (size_t)R * D);
        fr.m[R] = -INFINITY;
        fr.l[R] = 0.0f;
    }
    memset(tl.acc, 0, sizeof(float) * (size_t)CPU_ROWS * Dv);
    for (int64_t kb = kmin; kb <= kmax; kb += CV_ATTN_BN)
        fwd_block(job, &fr, kb, (int32_t)CV_MIN((int64_t)CV_ATTN_BN, kmax + 1 - kb), &tl);
    store_rows(job, &fr, tl.acc);
}

static void fwd_range(void *arg, int64_t begin, int64_t end)
{
    fwd_job *job = arg;
    int slot = claim_scratch(job);
    for (int64_t w = begin; w < end; w++)
        fwd_item(job, w, job->scratch[slot]);
    atomic_store(&job->busy[slot], 0);
}

/* The blocks (sequence, first query row), last block first, then the pool
 * over (block, KV head, head chunk) items with one scratch area per worker. */
static clvarlen_status fwd_run(clvarlen_context *ctx, fwd_job *job, int64_t n_tiles)
{
    static const char fn[] = "clvarlen_attention_forward";
    const cv_attn_desc *d = job->d;
    int n_scratch = cv_pool_size(cv_base(ctx)->pool);
    if (n_scratch < 1)
        n_scratch = 1;
    size_t floats = (size_t)CPU_ROWS * d->head_dim_v + (size_t)CPU_ROWS * d->head_dim +
                    (size_t)d->head_dim * CV_ATTN_BN + (size_t)CV_ATTN_BN * d->head_dim_v +
                    (size_t)CPU_ROWS * CV_ATTN_BN;
    tile_item *tiles = malloc(sizeof *tiles * (size_t)n_tiles);
    float **scratch = calloc((size_t)n_scratch, sizeof *scratch);
    atomic_int *busy = calloc((size_t)n_scratch, sizeof *busy);
    bool ok = tiles && scratch && busy;
    for (int i = 0; ok && i < n_scratch; i++) {
        scratch[i] = malloc(floats * sizeof(float));
        ok = scratch[i] != NULL;
    }
    clvarlen_status st = CLVARLEN_SUCCESS;
    if (!ok) {
        st = cv_error(ctx, CLVARLEN_ERROR_OUT_OF_MEMORY, "%s: out of memory for %lld tiles", fn,
                      (long long)n_tiles);
        goto done;
    }
    int64_t t = 0;
    for (int64_t s = 0; s < d->n_seqs; s++) {
        int64_t lq = (int64_t)job->cu_q[s + 1] - job->cu_q[s], bm = job->block_m;
        /* Last block first: under causal masking it sees the most keys, and
         * starting long items early balances the pool. */
        for (int64_t r0 = ((lq + bm - 1) / bm - 1) * bm; r0 >= 0; r0 -= bm) {
            tiles[t].seq = (int32_t)s;
            tiles[t].row0 = (int32_t)r0;
            t++;
        }
    }
    for (int i = 0; i < n_scratch; i++)
        atomic_init(&busy[i], 0);
    job->tiles = tiles;
    job->scratch = scratch;
    job->busy = busy;
    job->n_scratch = n_scratch;
    cv_pool_for(cv_base(ctx)->pool, n_tiles * d->heads_kv * job->chunks, 1, fwd_range, job);

done:
    if (scratch) {
        for (int i = 0; i < n_scratch; i++)
            free(scratch[i]);
    }
    free(scratch);
    free(busy);
    free(tiles);
    return st;
}

clvarlen_status cv_cpu_attention_forward(clvarlen_context *ctx, const cv_attn_desc *d,
                                         const void *q, const void *k, const void *v,
                                         const int32_t *cu_q, const int32_t *cu_k,
                                         const int32_t *q_pos, void *o, float *lse)
{
    const int32_t group = d->heads_q / d->heads_kv;
    fwd_job job = {
        .d = d, .kern = cv_cpu_attn_kern(), .q = q, .k = k, .v = v, .cu_q = cu_q, .cu_k = cu_k,
        .q_pos = q_pos, .o = o, .lse = lse,
    };
    job.stack = CV_MIN(group, CPU_MAX_STACK);
    job.block_m = CPU_ROWS / job.stack;
    job.chunks = (group + job.stack - 1) / job.stack;
    int64_t n_tiles = 0;
    for (int64_t s = 0; s < d->n_seqs; s++)
        n_tiles += ((int64_t)cu_q[s + 1] - cu_q[s] + job.block_m - 1) / job.block_m;
    if (n_tiles == 0)
        return CLVARLEN_SUCCESS;
    return fwd_run(ctx, &job, n_tiles);
}

/* ------------------------------------------------------------ merge */

typedef struct merge_job {
    clvarlen_dtype dtype;
    int64_t n_parts, tokens;
    int32_t heads, dv;
    const void *const *o_parts;
    const float *const *lse_parts;
    void *o;
    float *lse;
} merge_job;

/* +inf and NaN read as -inf (SPEC 1: a part that saw nothing). */
static inline float sane_lse(float x)
{
    return (x > -INFINITY && x < INFINITY) ? x : -INFINITY;
}

static void merge_range(void *arg, int64_t begin, int64_t end)
{
    merge_job *job = arg;
    float w_stack[16];
    for (int64_t row = begin; row < end; row++) { /* row = token * heads + head */
        int64_t t = row / job->heads, h = row % job->heads;
        int64_t li = h * job->tokens + t;
        float mx = -INFINITY;
        for (int64_t p = 0; p < job->n_parts; p++) {
            float x = sane_lse(job->lse_parts[p][li]);
            mx = x > mx ? x : mx;
        }
        int64_t ebase = row * job->dv;
        if (mx == -INFINITY) {
            for (int32_t c = 0; c < job->dv; c++)
                cv_store_act(job->o, job->dtype, ebase + c, 0.0f);
            if (job->lse)
                job->lse[li] = -INFINITY;
            continue;
        }
        float sum = 0.0f;
        for (int64_t p = 0; p < job->n_parts; p++) {
            float x = sane_lse(job->lse_parts[p][li]);
            sum += x == -INFINITY ? 0.0f : expf(x - mx);
        }
        float total = mx + logf(sum);
        for (int32_t c = 0; c < job->dv; c++) {
            float acc = 0.0f;
            for (int64_t p = 0; p < job->n_parts; p++) {
                /* Weights are recomputed per element beyond 16 parts; the
                 * first 16 are cached for the common small merges. */
                float w;
                if (p < 16 && c > 0) {
                    w = w_stack[p];
                } else {
                    float x = sane_lse(job->lse_parts[p][li]);
                    w = x == -INFINITY ? 0.0f : expf(x - total);
                    if (p < 16)
                        w_stack[p] = w;
                }
                if (w != 0.0f)
                    acc += w * cv_load_act(job->o_parts[p], job->dtype, ebase + c);
            }
            cv_store_act(job->o, job->dtype, ebase + c, acc);
        }
        if (job->lse)
            job->lse[li] = total;
    }
}

clvarlen_status cv_cpu_attention_merge(clvarlen_context *ctx, clvarlen_dtype dtype,
                                       int64_t n_parts, int64_t tokens, int32_t heads,
                                       int32_t head_dim_v, const void *const *o_parts,
                                       const float *const *lse_parts, void *o, float *lse)
{
    merge_job job = {
        .dtype = dtype, .n_parts = n_parts, .tokens = tokens, .heads = heads,
        .dv = head_dim_v, .o_parts = o_parts, .lse_parts = lse_parts, .o = o, .lse = lse,
    };
    int64_t rows = tokens * heads;
    if (rows > 0)
        cv_pool_for(cv_base(ctx)->pool, rows, 64, merge_range, &job);
    return CLVARLEN_SUCCESS;
}
