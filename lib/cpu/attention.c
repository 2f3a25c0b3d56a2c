/* Varlen attention on the CPU fallback: the same tiled online softmax as the
 * device kernels, over work items (sequence, query head, query tile) spread
 * on the pool. Inputs are converted to f32 a tile at a time; K is stored
 * transposed so that the inner loops run over contiguous floats and
 * vectorise without reassociating any sum.
 */
#include "cpu/attention.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Rows per query tile and keys per key tile. Small tiles keep the scratch in
 * L1/L2 and give the pool enough items for short sequences. */
#define CPU_BLOCK_M 16
#define CPU_BLOCK_N 64
/* Width of the register-blocked inner loops; head dims are multiples of 16. */
#define CPU_VEC 16

typedef struct tile_item {
    int32_t seq;
    int32_t row0; /* first query row of the tile within the sequence */
} tile_item;

typedef struct fwd_job {
    const cv_attn_desc *d;
    const char *q, *k, *v;
    const int32_t *cu_q, *cu_k, *q_pos;
    char *o;
    float *lse;
    const tile_item *tiles;
    /* One scratch block per pool thread; a running chunk claims a free one. */
    float **scratch;
    atomic_int *busy;
    int n_scratch;
} fwd_job;

static int claim_scratch(fwd_job *job)
{
    for (;;) {
        for (int i = 0; i < job->n_scratch; i++) {
            if (!atomic_exchange(&job->busy[i], 1))
                return i;
        }
    }
}

static void load_row(const char *base, clvarlen_dtype dt, int64_t elem_off, int32_t n, float *out)
{
    for (int32_t i = 0; i < n; i++)
        out[i] = cv_load_act(base, dt, elem_off + i);
}

/* Dropout of one row's probabilities p[j] (packed query t, packed keys u0 +
 * j), after their sum went into l (SPEC 1.2: lse is the undropped softmax's). */
static void drop_row(const cv_attn_desc *d, int32_t h, int64_t t, int64_t u0, float *p, int32_t n)
{
    for (int32_t j = 0; j < n; j++)
        if (p[j] != 0.0f)
            p[j] *= cv_dropout_factor(d, h, t, u0 + j);
}

/* The normalised rows of a finished tile into o and lse (rows that saw
 * nothing: o = 0, lse = -inf). */
static void store_tile(fwd_job *job, int32_t h, int64_t tok0, int32_t rows, const float *acc,
                       const float *m, const float *l)
{
    const cv_attn_desc *d = job->d;
    const int32_t Dv = d->head_dim_v;
    for (int32_t r = 0; r < rows; r++) {
        int64_t tok = tok0 + r;
        int64_t ooff = tok * d->o_stride + (int64_t)h * Dv;
        const float *ar = acc + (size_t)r * Dv;
        if (l[r] > 0.0f) {
            float inv = 1.0f / l[r];
            for (int32_t c = 0; c < Dv; c++)
                cv_store_act(job->o, d->dtype, ooff + c, ar[c] * inv);
            if (job->lse)
                job->lse[(int64_t)h * d->total_q + tok] = m[r] + logf(l[r]);
        } else {
            for (int32_t c = 0; c < Dv; c++)
                cv_store_act(job->o, d->dtype, ooff + c, 0.0f);
            if (job->lse)
                job->lse[(int64_t)h * d->total_q + tok] = -INFINITY;
        }
    }
}

static void fwd_tile(fwd_job *job, const tile_item *it, int32_t h, float *scratch)
{
    const cv_attn_desc *d = job->d;
    const int32_t D = d->head_dim, Dv = d->head_dim_v;
    const int32_t group = d->heads_q / d->heads_kv;
    const int32_t kvh = h / group;
    const int64_t q_begin = job->cu_q[it->seq], k_begin = job->cu_k[it->seq];
    const int64_t lq = job->cu_q[it->seq + 1] - q_begin, lk = job->cu_k[it->seq + 1] - k_begin;
    const int32_t rows = (int32_t)CV_MIN((int64_t)CPU_BLOCK_M, lq - it->row0);

    float *qf = scratch;                          /* [BM][D] */
    float *kt = qf + CPU_BLOCK_M * D;             /* [D][BN], transposed */
    float *vf = kt + (size_t)D * CPU_BLOCK_N;     /* [BN][Dv] */
    float *srow = vf + (size_t)CPU_BLOCK_N * Dv;  /* [BN] */
    float *acc = srow + CPU_BLOCK_N;              /* [BM][Dv] */
    float *m = acc + (size_t)CPU_BLOCK_M * Dv;    /* [BM] */
    float *l = m + CPU_BLOCK_M;                   /* [BM] */
    int64_t lo[CPU_BLOCK_M], hi[CPU_BLOCK_M];

    int64_t kmin = INT64_MAX, kmax = -1;
    for (int32_t r = 0; r < rows; r++) {
        int64_t i = it->row0 + r;
        int64_t pos = job->q_pos ? (int64_t)job->q_pos[q_begin + i] : i + lk - lq;
        cv_attn_visible(d, pos, lk, &lo[r], &hi[r]);
        if (lo[r] <= hi[r]) {
            kmin = CV_MIN(kmin, lo[r]);
            kmax = CV_MAX(kmax, hi[r]);
        }
        load_row(job->q, d->dtype, (q_begin + i) * d->q_stride + (int64_t)h * D, D, qf + r * D);
        m[r] = -INFINITY;
        l[r] = 0.0f;
    }
    memset(acc, 0, sizeof(float) * (size_t)CPU_BLOCK_M * Dv);

    for (int64_t kb = kmin; kb <= kmax; kb += CPU_BLOCK_N) {
        int32_t nb = (int32_t)CV_MIN((int64_t)CPU_BLOCK_N, kmax + 1 - kb);
        /* Key columns up to a multiple of CPU_VEC, zero-filled past nb. */
        int32_t nbv = (nb + CPU_VEC - 1) / CPU_VEC * CPU_VEC;
        for (int32_t j = 0; j < nbv; j++) {
            if (j >= nb) {
                for (int32_t c = 0; c < D; c++)
                    kt[(size_t)c * CPU_BLOCK_N + j] = 0.0f;
                continue;
            }
            int64_t tok = k_begin + kb + j;
            int64_t koff = tok * d->k_stride + (int64_t)kvh * D;
            for (int32_t c = 0; c < D; c++)
                kt[(size_t)c * CPU_BLOCK_N + j] = cv_load_act(job->k, d->dtype, koff + c);
            load_row(job->v, d->dtype, tok * d->v_stride + (int64_t)kvh * Dv, Dv,
                     vf + (size_t)j * Dv);
        }
        for (int32_t r = 0; r < rows; r++) {
            if (lo[r] > hi[r] || kb > hi[r] || kb + nb - 1 < lo[r])
                continue;
            const float *qr = qf + r * D;
            /* CPU_VEC independent sums in a fixed-size array: the compiler keeps
             * them in vector registers (no reassociation of any one sum). */
            for (int32_t j0 = 0; j0 < nbv; j0 += CPU_VEC) {
                float a[CPU_VEC] = {0};
                for (int32_t c = 0; c < D; c++) {
                    const float qc = qr[c];
                    const float *kc = kt + (size_t)c * CPU_BLOCK_N + j0;
                    for (int jj = 0; jj < CPU_VEC; jj++)
                        a[jj] += qc * kc[jj];
                }
                memcpy(srow + j0, a, sizeof a);
            }
            float bmax = -INFINITY;
            for (int32_t j = 0; j < nb; j++) {
                float x = srow[j] * d->scale;
                if (d->softcap > 0.0f)
                    x = d->softcap * tanhf(x / d->softcap);
                if (kb + j < lo[r] || kb + j > hi[r])
                    x = -INFINITY;
                srow[j] = x;
                bmax = x > bmax ? x : bmax;
            }
            /* bmax is finite: the block intersects the row's visible range. */
            float m_new = m[r] > bmax ? m[r] : bmax;
            float alpha = expf(m[r] - m_new); /* 0 when m[r] is -inf */
            float *ar = acc + (size_t)r * Dv;
            l[r] *= alpha;
            for (int32_t j = 0; j < nb; j++) {
                float p = srow[j] == -INFINITY ? 0.0f : expf(srow[j] - m_new);
                l[r] += p;
                srow[j] = p;
            }
            if (d->drop_p > 0.0f) /* SPEC 1.2: l summed the undropped p */
                drop_row(d, h, q_begin + it->row0 + r, k_begin + kb, srow, nb);
            for (int32_t c0 = 0; c0 < Dv; c0 += CPU_VEC) {
                float a[CPU_VEC];
                for (int jj = 0; jj < CPU_VEC; jj++)
                    a[jj] = ar[c0 + jj] * alpha;
                for (int32_t j = 0; j < nb; j++) {
                    const float p = srow[j];
                    const float *vj = vf + (size_t)j * Dv + c0;
                    for (int jj = 0; jj < CPU_VEC; jj++)
                        a[jj] += p * vj[jj];
                }
                memcpy(ar + c0, a, sizeof a);
            }
            m[r] = m_new;
        }
    }

    store_tile(job, h, q_begin + it->row0, rows, acc, m, l);
}

static void fwd_range(void *arg, int64_t begin, int64_t end)
{
    fwd_job *job = arg;
    int slot = claim_scratch(job);
    const int32_t hq = job->d->heads_q;
    for (int64_t w = begin; w < end; w++)
        fwd_tile(job, &job->tiles[w / hq], (int32_t)(w % hq), job->scratch[slot]);
    atomic_store(&job->busy[slot], 0);
}

/* The tiles (sequence, first query row), last tile first, then the pool over
 * (tile, head) items with one scratch area per worker. */
static clvarlen_status fwd_run(clvarlen_context *ctx, const cv_attn_desc *d, const void *q,
                               const void *k, const void *v, const int32_t *cu_q,
                               const int32_t *cu_k, const int32_t *q_pos, void *o, float *lse,
                               int64_t n_tiles)
{
    static const char fn[] = "clvarlen_attention_forward";
    int n_scratch = cv_pool_size(cv_base(ctx)->pool);
    if (n_scratch < 1)
        n_scratch = 1;
    size_t floats = (size_t)CPU_BLOCK_M * d->head_dim + (size_t)d->head_dim * CPU_BLOCK_N +
                    (size_t)CPU_BLOCK_N * d->head_dim_v + CPU_BLOCK_N +
                    (size_t)CPU_BLOCK_M * d->head_dim_v + 2 * CPU_BLOCK_M;
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
        int64_t lq = (int64_t)cu_q[s + 1] - cu_q[s];
        /* Last tile first: under causal masking it sees the most keys, and
         * starting long items early balances the pool. */
        for (int64_t r0 = ((lq + CPU_BLOCK_M - 1) / CPU_BLOCK_M - 1) * CPU_BLOCK_M; r0 >= 0;
             r0 -= CPU_BLOCK_M) {
            tiles[t].seq = (int32_t)s;
            tiles[t].row0 = (int32_t)r0;
            t++;
        }
    }
    for (int i = 0; i < n_scratch; i++)
        atomic_init(&busy[i], 0);

    fwd_job job = {
        .d = d, .q = q, .k = k, .v = v, .cu_q = cu_q, .cu_k = cu_k, .q_pos = q_pos,
        .o = o, .lse = lse, .tiles = tiles, .scratch = scratch, .busy = busy,
        .n_scratch = n_scratch,
    };
    cv_pool_for(cv_base(ctx)->pool, n_tiles * d->heads_q, 1, fwd_range, &job);

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
    int64_t n_tiles = 0;
    for (int64_t s = 0; s < d->n_seqs; s++)
        n_tiles += ((int64_t)cu_q[s + 1] - cu_q[s] + CPU_BLOCK_M - 1) / CPU_BLOCK_M;
    if (n_tiles == 0)
        return CLVARLEN_SUCCESS;
    return fwd_run(ctx, d, q, k, v, cu_q, cu_k, q_pos, o, lse, n_tiles);
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
