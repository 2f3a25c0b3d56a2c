/* Varlen attention backward on the CPU fallback (SPEC 1.2), deterministic by
 * construction: every element of dq, dk and dv is summed by one pool item in
 * a fixed order, whatever the thread count.
 *
 *   1. delta[h][t] = dot(do, o) per query row;
 *   2. dk, dv: one item per (sequence, key tile, KV head), looping over the
 *      query heads of its group and the query rows that see the tile;
 *   3. dq: one item per (sequence, query tile, query head), looping over the
 *      key tiles its rows see.
 * Both passes get P and dS of a (row, key tile) pair from row_grad(), so they
 * agree bit for bit. K and V tiles are stored transposed, so the score loops
 * run over contiguous keys and vectorise without reassociating a sum.
 */
#include "cpu/attention.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define BWD_BM 16 /* query rows per tile */
#define BWD_BN 32 /* keys per tile */

typedef struct tile {
    int32_t seq, row0; /* row0: first query (dq pass) or key (dk/dv pass) of the tile */
} tile;

typedef struct bwd_job {
    const cv_bwd_desc *bd;
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

/* The scratch of one item: transposed K and V tiles, K rows, a Q and a dO
 * row block, the accumulators and two rows of scores. */
typedef struct scratch {
    float *kt, *vt, *krow; /* [D][BN], [Dv][BN], [BN][D] */
    float *qt, *dot_;      /* [BM][D], [BM][Dv] */
    float *acc_a, *acc_b;  /* dk [BN][D] and dv [BN][Dv], or dq [BM][D] */
    float *pz, *ds;        /* [BN] */
} scratch;

static size_t scratch_floats(const cv_attn_desc *d)
{
    size_t D = (size_t)d->head_dim, Dv = (size_t)d->head_dim_v;
    return (D + Dv + D) * BWD_BN + (size_t)BWD_BM * (D + Dv) + BWD_BN * (D + Dv) +
           (size_t)BWD_BM * D + 2 * BWD_BN;
}

static scratch carve(const cv_attn_desc *d, float *f)
{
    size_t D = (size_t)d->head_dim, Dv = (size_t)d->head_dim_v;
    scratch s;
    s.kt = f;
    s.vt = s.kt + D * BWD_BN;
    s.krow = s.vt + Dv * BWD_BN;
    s.qt = s.krow + BWD_BN * D;
    s.dot_ = s.qt + (size_t)BWD_BM * D;
    s.acc_a = s.dot_ + (size_t)BWD_BM * Dv;
    s.acc_b = s.acc_a + (size_t)(BWD_BN > BWD_BM ? BWD_BN : BWD_BM) * D;
    s.pz = s.acc_b + (size_t)BWD_BN * Dv;
    s.ds = s.pz + BWD_BN;
    return s;
}

/* Keys [kb, kb + nb) of a sequence starting at token k0, KV head kvh: kt and
 * vt transposed, zero-filled up to BN columns; krow as rows when wanted. */
static void load_keys(const bwd_job *job, int64_t k0, int64_t kb, int32_t nb, int32_t kvh,
                      scratch *s, bool rows)
{
    const cv_attn_desc *d = &job->bd->a;
    const int32_t D = d->head_dim, Dv = d->head_dim_v;
    for (int32_t j = 0; j < BWD_BN; j++) {
        const int64_t tok = k0 + kb + j;
        const int64_t ko = tok * d->k_stride + (int64_t)kvh * D;
        const int64_t vo = tok * d->v_stride + (int64_t)kvh * Dv;
        for (int32_t c = 0; c < D; c++) {
            float x = j < nb ? cv_load_act(job->k, d->dtype, ko + c) : 0.0f;
            s->kt[(size_t)c * BWD_BN + j] = x;
            if (rows)
                s->krow[(size_t)j * D + c] = x;
        }
        for (int32_t c = 0; c < Dv; c++)
            s->vt[(size_t)c * BWD_BN + j] = j < nb ? cv_load_act(job->v, d->dtype, vo + c) : 0.0f;
    }
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
        for (int32_t c = 0; c < D; c++)
            s->qt[(size_t)r * D + c] =
                cv_load_act(job->q, d->dtype, tok * d->q_stride + (int64_t)h * D + c);
        for (int32_t c = 0; c < Dv; c++)
            s->dot_[(size_t)r * Dv + c] =
                cv_load_act(job->dout, d->dtype, tok * bd->do_stride + (int64_t)h * Dv + c);
    }
}

/* One query row against the key tile [kb, kb + nb) (loaded in s): pz[j] =
 * P Z (the dropped, scaled probability) and ds[j] = scale dX (SPEC 1.2), 0
 * for keys the row does not see. The row sees [lo, hi]. */
static void row_grad(const bwd_job *job, const scratch *s, const float *qr, const float *dor,
                     float lse, float delta, int64_t kb, int32_t nb, int64_t lo, int64_t hi,
                     int32_t h, int64_t tok, int64_t k0, float *pz, float *ds)
{
    const cv_attn_desc *d = &job->bd->a;
    const int32_t D = d->head_dim, Dv = d->head_dim_v;
    float sc[BWD_BN] = {0}, dp[BWD_BN] = {0};
    for (int32_t c = 0; c < D; c++) {
        const float x = qr[c];
        const float *kc = s->kt + (size_t)c * BWD_BN;
        for (int32_t j = 0; j < BWD_BN; j++)
            sc[j] += x * kc[j];
    }
    for (int32_t c = 0; c < Dv; c++) {
        const float x = dor[c];
        const float *vc = s->vt + (size_t)c * BWD_BN;
        for (int32_t j = 0; j < BWD_BN; j++)
            dp[j] += x * vc[j];
    }
    for (int32_t j = 0; j < BWD_BN; j++) {
        const int64_t key = kb + j;
        if (j >= nb || key < lo || key > hi) {
            pz[j] = 0.0f;
            ds[j] = 0.0f;
            continue;
        }
        float x = sc[j] * d->scale, deriv = 1.0f;
        if (d->softcap > 0.0f) {
            float th = tanhf(x / d->softcap);
            x = d->softcap * th;
            deriv = 1.0f - th * th;
        }
        const float p = expf(x - lse);
        const float z = d->drop_p > 0.0f ? cv_dropout_factor(d, h, tok, k0 + key) : 1.0f;
        pz[j] = p * z;
        ds[j] = p * (z * dp[j] - delta) * deriv * d->scale;
    }
}

/* The visible keys of row i of a sequence (lq queries, lk keys; SPEC 1). */
static void row_range(const bwd_job *job, int64_t q0, int64_t i, int64_t lq, int64_t lk,
                      int64_t *lo, int64_t *hi)
{
    int64_t pos = job->q_pos ? (int64_t)job->q_pos[q0 + i] : i + lk - lq;
    cv_attn_visible(&job->bd->a, pos, lk, lo, hi);
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
    for (int64_t w = begin; w < end; w++) {
        const int64_t t = w / d->heads_q, h = w % d->heads_q;
        float acc = 0.0f;
        for (int32_t c = 0; c < Dv; c++)
            acc += cv_load_act(job->dout, d->dtype, t * bd->do_stride + h * Dv + c) *
                   cv_load_act(job->o, d->dtype, t * d->o_stride + h * Dv + c);
        job->delta[h * d->total_q + t] = acc;
    }
}

/* ------------------------------------------------------------ pass 2: dk, dv */

static void dkdv_item(bwd_job *job, const tile *it, int32_t kvh, scratch *s)
{
    const cv_bwd_desc *bd = job->bd;
    const cv_attn_desc *d = &bd->a;
    const int32_t D = d->head_dim, Dv = d->head_dim_v, group = d->heads_q / d->heads_kv;
    const int64_t q0 = job->cu_q[it->seq], k0 = job->cu_k[it->seq];
    const int64_t lq = job->cu_q[it->seq + 1] - q0, lk = job->cu_k[it->seq + 1] - k0;
    const int64_t kb = it->row0;
    const int32_t nb = (int32_t)CV_MIN((int64_t)BWD_BN, lk - kb);
    memset(s->acc_a, 0, sizeof(float) * (size_t)BWD_BN * D);
    memset(s->acc_b, 0, sizeof(float) * (size_t)BWD_BN * Dv);
    load_keys(job, k0, kb, nb, kvh, s, false);
    for (int32_t hh = 0; hh < group; hh++) {
        const int32_t h = kvh * group + hh;
        for (int64_t r0 = 0; r0 < lq; r0 += BWD_BM) {
            const int32_t nr = (int32_t)CV_MIN((int64_t)BWD_BM, lq - r0);
            int64_t lo[BWD_BM], hi[BWD_BM];
            bool any = false;
            for (int32_t r = 0; r < nr; r++) {
                row_range(job, q0, r0 + r, lq, lk, &lo[r], &hi[r]);
                float l = job->lse[(int64_t)h * d->total_q + q0 + r0 + r];
                if (!isfinite(l) || hi[r] < kb || lo[r] > kb + nb - 1 || lo[r] > hi[r])
                    lo[r] = 1, hi[r] = 0; /* sees nothing of the tile */
                else
                    any = true;
            }
            if (!any)
                continue;
            load_rows(job, q0, (int32_t)r0, nr, h, s);
            for (int32_t r = 0; r < nr; r++) {
                if (lo[r] > hi[r])
                    continue;
                const int64_t tok = q0 + r0 + r;
                const float *qr = s->qt + (size_t)r * D, *dor = s->dot_ + (size_t)r * Dv;
                row_grad(job, s, qr, dor, job->lse[(int64_t)h * d->total_q + tok],
                         job->delta[(int64_t)h * d->total_q + tok], kb, nb, lo[r], hi[r], h,
                         tok, k0, s->pz, s->ds);
                for (int32_t j = 0; j < nb; j++) {
                    const float pz = s->pz[j], ds = s->ds[j];
                    float *dvj = s->acc_b + (size_t)j * Dv, *dkj = s->acc_a + (size_t)j * D;
                    if (pz != 0.0f)
                        for (int32_t c = 0; c < Dv; c++)
                            dvj[c] += pz * dor[c];
                    if (ds != 0.0f)
                        for (int32_t c = 0; c < D; c++)
                            dkj[c] += ds * qr[c];
                }
            }
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
    const int32_t D = d->head_dim, Dv = d->head_dim_v, kvh = h / (d->heads_q / d->heads_kv);
    const int64_t q0 = job->cu_q[it->seq], k0 = job->cu_k[it->seq];
    const int64_t lq = job->cu_q[it->seq + 1] - q0, lk = job->cu_k[it->seq + 1] - k0;
    const int32_t r0 = it->row0, nr = (int32_t)CV_MIN((int64_t)BWD_BM, lq - r0);
    int64_t lo[BWD_BM], hi[BWD_BM], kmin = INT64_MAX, kmax = -1;
    for (int32_t r = 0; r < nr; r++) {
        row_range(job, q0, r0 + r, lq, lk, &lo[r], &hi[r]);
        if (!isfinite(job->lse[(int64_t)h * d->total_q + q0 + r0 + r]))
            lo[r] = 1, hi[r] = 0;
        if (lo[r] <= hi[r]) {
            kmin = CV_MIN(kmin, lo[r]);
            kmax = CV_MAX(kmax, hi[r]);
        }
    }
    memset(s->acc_a, 0, sizeof(float) * (size_t)BWD_BM * D);
    load_rows(job, q0, r0, nr, h, s);
    for (int64_t kb = kmin; kb <= kmax; kb += BWD_BN) {
        const int32_t nb = (int32_t)CV_MIN((int64_t)BWD_BN, kmax + 1 - kb);
        load_keys(job, k0, kb, nb, kvh, s, true);
        for (int32_t r = 0; r < nr; r++) {
            if (lo[r] > hi[r] || hi[r] < kb || lo[r] > kb + nb - 1)
                continue;
            const int64_t tok = q0 + r0 + r;
            row_grad(job, s, s->qt + (size_t)r * D, s->dot_ + (size_t)r * Dv,
                     job->lse[(int64_t)h * d->total_q + tok],
                     job->delta[(int64_t)h * d->total_q + tok], kb, nb, lo[r], hi[r], h, tok, k0,
                     s->pz, s->ds);
            float *dqr = s->acc_a + (size_t)r * D;
            for (int32_t j = 0; j < nb; j++) {
                const float ds = s->ds[j];
                if (ds == 0.0f)
                    continue;
                const float *kj = s->krow + (size_t)j * D;
                for (int32_t c = 0; c < D; c++)
                    dqr[c] += ds * kj[c];
            }
        }
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
    const int64_t nq = make_tiles(cu_q, d->n_seqs, BWD_BM, NULL);
    const int64_t nk = make_tiles(cu_k, d->n_seqs, BWD_BN, NULL);
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
        .bd = bd, .q = q, .k = k, .v = v, .o = o, .dout = dout, .lse = lse,
        .cu_q = cu_q, .cu_k = cu_k, .q_pos = q_pos, .dq = dq, .dk = dk, .dv = dv,
        .delta = delta, .tiles = tiles, .scratch = scr, .busy = busy, .n_scratch = n_scratch,
    };
    cv_pool_for(pool, d->total_q * d->heads_q, 256, delta_range, &job);
    make_tiles(cu_k, d->n_seqs, BWD_BN, tiles);
    cv_pool_for(pool, nk * d->heads_kv, 1, dkdv_range, &job);
    make_tiles(cu_q, d->n_seqs, BWD_BM, tiles);
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
