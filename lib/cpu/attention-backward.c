/* Varlen attention backward on the CPU fallback (SPEC 1.2), deterministic by
 * construction: every element of dq, dk and dv is summed by one pool item in
 * a fixed order, whatever the thread count.
 *
 *   1. delta[h][t] = dot(do, o) per query row;
 *   2. dk, dv: one item per (sequence, key block, KV head), looping over the
 *      query heads of its group and the blocks of query rows that see it:
 *      S = Q K^T and dP = dO V^T, then dV += (P Z)^T dO and dK += dS^T Q;
 *   3. dq: one item per (sequence, query block, query head), looping over the
 *      key blocks its rows see: dQ += dS K.
 * The products run on the forward's microkernels (attention-isa.h, the best
 * instruction set the CPU has). Each score and dP element is one lane's sum
 * over the head dim in order, whatever block it falls in, so both passes get
 * the same P and dS bit for bit; delta is summed the same way (kern->dot), so
 * a row that sees one key gets dS = 0 exactly.
 */
#include "cpu/attention.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/attention-isa.h"

#define BWD_B CV_ATTN_BN /* query rows and keys per block */

typedef struct tile {
    int32_t seq, row0; /* row0: first query (dq pass) or key (dk/dv pass) of the tile */
} tile;

typedef struct bwd_job {
    const cv_bwd_desc *bd;
    const cv_attn_kern *kern;
    const char *q, *k, *v, *o, *dout;
    const float *lse;
    const int32_t *cu_q, *cu_k, *q_pos;
    char *dq, *dk, *dv;
    float *delta;          /* [heads_q, total_q] */
    const tile *tiles;
    float **scratch;       /* one block per pool thread, claimed by a running chunk */
    atomic_int *busy;
    int n_scratch;
} bwd_job;

static int claim(bwd_job *job)
{
    for (;;) {
        for (int i = 0; i < job->n_scratch; i++)
            if (!atomic_exchange(&job->busy[i], 1))
                return i;
    }
}

/* The f32 tiles of one item (all rows BWD_B long unless said). */
typedef struct scratch {
    float *kt, *vt;        /* [D][B], [Dv][B]: K and V transposed */
    float *krow;           /* [B][D] (dq pass) */
    float *qf, *dof;       /* [B][D], [B][Dv] */
    float *sc, *dp, *tr;   /* [B][B]: S then P Z, dP then dS, a transposed one */
    float *acc_a, *acc_b;  /* dk [B][D] and dv [B][Dv], or dq [B][D] */
    float *z;              /* [B]: one row's dropout factors */
} scratch;

static size_t scratch_floats(const cv_attn_desc *d)
{
    size_t D = (size_t)d->head_dim, Dv = (size_t)d->head_dim_v;
    return (size_t)BWD_B * (4 * D + 3 * Dv + 3 * BWD_B + 1);
}

static scratch carve(const cv_attn_desc *d, float *f)
{
    size_t D = (size_t)d->head_dim, Dv = (size_t)d->head_dim_v, B = BWD_B;
    scratch s;
    s.kt = f;
    s.vt = s.kt + D * B;
    s.krow = s.vt + Dv * B;
    s.qf = s.krow + B * D;
    s.dof = s.qf + B * D;
    s.sc = s.dof + B * Dv;
    s.dp = s.sc + B * B;
    s.tr = s.dp + B * B;
    s.acc_a = s.tr + B * B;
    s.acc_b = s.acc_a + B * D;
    s.z = s.acc_b + B * Dv;
    return s;
}

static const float ones[BWD_B] = {
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
};

/* Keys [kb, kb + nb) of a sequence starting at token k0, KV head kvh: kt and
 * vt transposed (zero past nb); krow as rows when wanted. */
static void load_keys(const bwd_job *job, int64_t k0, int64_t kb, int32_t nb, int32_t kvh,
                      scratch *s, bool rows)
{
    const cv_attn_desc *d = &job->bd->a;
    const int32_t D = d->head_dim, Dv = d->head_dim_v;
    const int64_t ko = (k0 + kb) * d->k_stride + (int64_t)kvh * D;
    const int64_t vo = (k0 + kb) * d->v_stride + (int64_t)kvh * Dv;
    job->kern->load_kt(job->k, d->dtype, ko, d->k_stride, nb, D, s->kt);
    job->kern->load_kt(job->v, d->dtype, vo, d->v_stride, nb, Dv, s->vt);
    if (rows)
        for (int32_t j = 0; j < nb; j++)
            job->kern->to_f32(job->k, d->dtype, ko + j * d->k_stride, D,
                              s->krow + (size_t)j * D);
}

/* Query rows [r0, r0 + nr) of head h (sequence at token q0): q and do as f32. */
static void load_rows(const bwd_job *job, int64_t q0, int32_t r0, int32_t nr, int32_t h,
                      scratch *s)
{
    const cv_bwd_desc *bd = job->bd;
    const cv_attn_desc *d = &bd->a;
    const int32_t D = d->head_dim, Dv = d->head_dim_v;
    for (int32_t r = 0; r < nr; r++) {
        const int64_t tok = q0 + r0 + r;
        job->kern->to_f32(job->q, d->dtype, tok * d->q_stride + (int64_t)h * D, D,
                          s->qf + (size_t)r * D);
        job->kern->to_f32(job->dout, d->dtype, tok * bd->do_stride + (int64_t)h * Dv, Dv,
                          s->dof + (size_t)r * Dv);
    }
}

/* The visible keys of row i of a sequence (lq queries, lk keys; SPEC 1), as
 * an empty range when its lse is not finite (the row saw nothing). */
static void row_range(const bwd_job *job, int32_t h, int64_t q0, int64_t i, int64_t lq,
                      int64_t lk, int64_t *lo, int64_t *hi)
{
    int64_t pos = job->q_pos ? (int64_t)job->q_pos[q0 + i] : i + lk - lq;
    cv_attn_visible(&job->bd->a, pos, lk, lo, hi);
    if (!isfinite(job->lse[(int64_t)h * job->bd->a.total_q + q0 + i]))
        *lo = 1, *hi = 0;
}

/* S and dP of query rows [r0, r0 + nr) (loaded in s) against the key block
 * [kb, kb + nb) (loaded in s), then P Z into s->sc and dS into s->dp; rows
 * and keys a row does not see give 0. lo/hi: the rows' visible ranges. */
static void block_grad(const bwd_job *job, scratch *s, int32_t h, int64_t q0, int64_t k0,
                       int64_t r0, int32_t nr, int64_t kb, int32_t nb, const int64_t *lo,
                       const int64_t *hi)
{
    const cv_attn_desc *d = &job->bd->a;
    const cv_attn_kern *kern = job->kern;
    kern->scores(s->qf, nr, d->head_dim, s->kt, s->sc);
    kern->scores(s->dof, nr, d->head_dim_v, s->vt, s->dp);
    for (int32_t r = 0; r < nr; r++) {
        float *sr = s->sc + (size_t)r * BWD_B, *dr = s->dp + (size_t)r * BWD_B;
        if (lo[r] > hi[r] || hi[r] < kb || lo[r] > kb + nb - 1) {
            memset(sr, 0, sizeof(float) * BWD_B);
            memset(dr, 0, sizeof(float) * BWD_B);
            continue;
        }
        const int32_t jlo = (int32_t)CV_MAX(lo[r] - kb, (int64_t)0);
        const int32_t jhi = (int32_t)CV_MIN(hi[r] - kb, (int64_t)nb - 1);
        const int64_t tok = q0 + r0 + r;
        const float *z = NULL;
        if (d->drop_p > 0.0f) {
            for (int32_t j = 0; j < BWD_B; j++)
                s->z[j] = j >= jlo && j <= jhi ? cv_dropout_factor(d, h, tok, k0 + kb + j) : 1.0f;
            z = s->z;
        }
        kern->bwd_row(sr, dr, z, d->scale, d->softcap, job->lse[(int64_t)h * d->total_q + tok],
                      job->delta[(int64_t)h * d->total_q + tok], jlo, jhi);
    }
}

static void store_rows(char *out, clvarlen_dtype dt, int64_t stride, int64_t tok0, int32_t head,
                       int32_t dim, const float *acc, int32_t rows)
{
    for (int32_t r = 0; r < rows; r++) {
        const int64_t off = (tok0 + r) * stride + (int64_t)head * dim;
        for (int32_t c = 0; c < dim; c++)
            cv_store_act(out, dt, off + c, acc[(size_t)r * dim + c]);
    }
}

/* ------------------------------------------------------------ pass 1: delta */

static void delta_range(void *arg, int64_t begin, int64_t end)
{
    bwd_job *job = arg;
    const cv_bwd_desc *bd = job->bd;
    const cv_attn_desc *d = &bd->a;
    const int32_t Dv = d->head_dim_v;
    float a[256], b[256]; /* Dv <= 256 (validated) */
    for (int64_t w = begin; w < end; w++) {
        const int64_t t = w / d->heads_q, h = w % d->heads_q;
        job->kern->to_f32(job->dout, d->dtype, t * bd->do_stride + h * Dv, Dv, a);
        job->kern->to_f32(job->o, d->dtype, t * d->o_stride + h * Dv, Dv, b);
        job->delta[h * d->total_q + t] = job->kern->dot(a, b, Dv);
    }
}

/* ------------------------------------------------------------ pass 2: dk, dv */

static void dkdv_item(bwd_job *job, const tile *it, int32_t kvh, scratch *s)
{
    const cv_bwd_desc *bd = job->bd;
    const cv_attn_desc *d = &bd->a;
    const cv_attn_kern *kern = job->kern;
    const int32_t D = d->head_dim, Dv = d->head_dim_v, group = d->heads_q / d->heads_kv;
    const int64_t q0 = job->cu_q[it->seq], k0 = job->cu_k[it->seq];
    const int64_t lq = job->cu_q[it->seq + 1] - q0, lk = job->cu_k[it->seq + 1] - k0;
    const int64_t kb = it->row0;
    const int32_t nb = (int32_t)CV_MIN((int64_t)BWD_B, lk - kb);
    memset(s->acc_a, 0, sizeof(float) * (size_t)BWD_B * D);
    memset(s->acc_b, 0, sizeof(float) * (size_t)BWD_B * Dv);
    load_keys(job, k0, kb, nb, kvh, s, false);
    for (int32_t hh = 0; hh < group; hh++) {
        const int32_t h = kvh * group + hh;
        for (int64_t r0 = 0; r0 < lq; r0 += BWD_B) {
            const int32_t nr = (int32_t)CV_MIN((int64_t)BWD_B, lq - r0);
            int64_t lo[BWD_B], hi[BWD_B];
            bool any = false;
            for (int32_t r = 0; r < nr; r++) {
                row_range(job, h, q0, r0 + r, lq, lk, &lo[r], &hi[r]);
                any |= lo[r] <= hi[r] && hi[r] >= kb && lo[r] <= kb + nb - 1;
            }
            if (!any)
                continue;
            load_rows(job, q0, (int32_t)r0, nr, h, s);
            block_grad(job, s, h, q0, k0, r0, nr, kb, nb, lo, hi);
            kern->transpose(s->sc, nr, s->tr); /* (P Z)^T */
            kern->pv(s->tr, nb, nr, s->dof, Dv, s->acc_b, ones);
            kern->transpose(s->dp, nr, s->tr); /* dS^T */
            kern->pv(s->tr, nb, nr, s->qf, D, s->acc_a, ones);
        }
    }
    store_rows(job->dk, bd->grad_dtype, bd->dk_stride, k0 + kb, kvh, D, s->acc_a, nb);
    store_rows(job->dv, bd->grad_dtype, bd->dv_stride, k0 + kb, kvh, Dv, s->acc_b, nb);
}

static void dkdv_range(void *arg, int64_t begin, int64_t end)
{
    bwd_job *job = arg;
    const int slot = claim(job);
    scratch s = carve(&job->bd->a, job->scratch[slot]);
    const int32_t hk = job->bd->a.heads_kv;
    for (int64_t w = begin; w < end; w++)
        dkdv_item(job, &job->tiles[w / hk], (int32_t)(w % hk), &s);
    atomic_store(&job->busy[slot], 0);
}

/* ------------------------------------------------------------ pass 3: dq */

static void dq_item(bwd_job *job, const tile *it, int32_t h, scratch *s)
{
    const cv_bwd_desc *bd = job->bd;
    const cv_attn_desc *d = &bd->a;
    const int32_t D = d->head_dim, kvh = h / (d->heads_q / d->heads_kv);
    const int64_t q0 = job->cu_q[it->seq], k0 = job->cu_k[it->seq];
    const int64_t lq = job->cu_q[it->seq + 1] - q0, lk = job->cu_k[it->seq + 1] - k0;
    const int32_t r0 = it->row0, nr = (int32_t)CV_MIN((int64_t)BWD_B, lq - r0);
    int64_t lo[BWD_B], hi[BWD_B], kmin = INT64_MAX, kmax = -1;
    for (int32_t r = 0; r < nr; r++) {
        row_range(job, h, q0, r0 + r, lq, lk, &lo[r], &hi[r]);
        if (lo[r] <= hi[r]) {
            kmin = CV_MIN(kmin, lo[r]);
            kmax = CV_MAX(kmax, hi[r]);
        }
    }
    memset(s->acc_a, 0, sizeof(float) * (size_t)BWD_B * D);
    if (kmax >= 0)
        load_rows(job, q0, r0, nr, h, s);
    for (int64_t kb = kmin; kb <= kmax; kb += BWD_B) {
        const int32_t nb = (int32_t)CV_MIN((int64_t)BWD_B, kmax + 1 - kb);
        load_keys(job, k0, kb, nb, kvh, s, true);
        block_grad(job, s, h, q0, k0, r0, nr, kb, nb, lo, hi);
        job->kern->pv(s->dp, nr, nb, s->krow, D, s->acc_a, ones);
    }
    store_rows(job->dq, bd->grad_dtype, bd->dq_stride, q0 + r0, h, D, s->acc_a, nr);
}

static void dq_range(void *arg, int64_t begin, int64_t end)
{
    bwd_job *job = arg;
    const int slot = claim(job);
    scratch s = carve(&job->bd->a, job->scratch[slot]);
    const int32_t hq = job->bd->a.heads_q;
    for (int64_t w = begin; w < end; w++)
        dq_item(job, &job->tiles[w / hq], (int32_t)(w % hq), &s);
    atomic_store(&job->busy[slot], 0);
}

/* ------------------------------------------------------------ driver */

/* The tiles of cu (block rows each), last tile of a sequence first (the
 * heaviest under causal masking, started early). Returns the count. */
static int64_t make_tiles(const int32_t *cu, int64_t n, int64_t block, tile *out)
{
    int64_t t = 0;
    for (int64_t s = 0; s < n; s++) {
        const int64_t len = (int64_t)cu[s + 1] - cu[s];
        for (int64_t r0 = (len + block - 1) / block * block - block; r0 >= 0; r0 -= block) {
            if (out) {
                out[t].seq = (int32_t)s;
                out[t].row0 = (int32_t)r0;
            }
            t++;
        }
    }
    return t;
}

clvarlen_status cv_cpu_attention_backward(clvarlen_context *ctx, const cv_bwd_desc *bd,
                                          const void *q, const void *k, const void *v,
                                          const void *o, const void *dout, const float *lse,
                                          const int32_t *cu_q, const int32_t *cu_k,
                                          const int32_t *q_pos, void *dq, void *dk, void *dv)
{
    static const char fn[] = "clvarlen_attention_backward";
    const cv_attn_desc *d = &bd->a;
    cv_pool *pool = cv_base(ctx)->pool;
    const int64_t nq = make_tiles(cu_q, d->n_seqs, BWD_B, NULL);
    const int64_t nk = make_tiles(cu_k, d->n_seqs, BWD_B, NULL);
    int n_scratch = cv_pool_size(pool);
    if (n_scratch < 1)
        n_scratch = 1;
    const size_t nt = (size_t)CV_MAX(nq, nk) + 1;
    tile *tiles = malloc(sizeof *tiles * nt);
    float *delta = malloc(sizeof(float) * ((size_t)d->heads_q * (size_t)d->total_q + 1));
    float **scr = calloc((size_t)n_scratch, sizeof *scr);
    atomic_int *busy = calloc((size_t)n_scratch, sizeof *busy);
    bool ok = tiles && delta && scr && busy;
    for (int i = 0; ok && i < n_scratch; i++)
        ok = (scr[i] = malloc(sizeof(float) * scratch_floats(d))) != NULL;
    clvarlen_status st = CLVARLEN_SUCCESS;
    if (!ok) {
        st = cv_error(ctx, CLVARLEN_ERROR_OUT_OF_MEMORY, "%s: out of memory", fn);
        goto done;
    }
    for (int i = 0; i < n_scratch; i++)
        atomic_init(&busy[i], 0);
    bwd_job job = {
        .bd = bd, .kern = cv_cpu_attn_kern(), .q = q, .k = k, .v = v, .o = o, .dout = dout, .lse = lse,
        .cu_q = cu_q, .cu_k = cu_k, .q_pos = q_pos, .dq = dq, .dk = dk, .dv = dv,
        .delta = delta, .tiles = tiles, .scratch = scr, .busy = busy, .n_scratch = n_scratch,
    };
    cv_pool_for(pool, d->total_q * d->heads_q, 256, delta_range, &job);
    make_tiles(cu_k, d->n_seqs, BWD_B, tiles);
    cv_pool_for(pool, nk * d->heads_kv, 1, dkdv_range, &job);
    make_tiles(cu_q, d->n_seqs, BWD_B, tiles);
    cv_pool_for(pool, nq * d->heads_q, 1, dq_range, &job);
done:
    if (scr)
        for (int i = 0; i < n_scratch; i++)
            free(scr[i]);
    free(scr);
    free(busy);
    free(delta);
    free(tiles);
    return st;
}
