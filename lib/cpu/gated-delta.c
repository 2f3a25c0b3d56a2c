/* The gated delta rule (SPEC 3) on the CPU fallback: the token recurrence,
 * parallel over (sequence, value head) pairs. Each pair keeps its state in
 * f32 in a scratch block, in the pool's layout ([K][V] or [V][K]); the
 * per-token update is the microkernel of gated-delta-isa.h (the best
 * instruction set the CPU has, picked at run time). */
#include "cpu/gated-delta.h"

#include "cpu/gated-delta-isa.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct gdn_job {
    const cv_gdn_problem *p;
    const cv_gdn_kern *kern;
    float *scratch;      /* n_blocks blocks of block_floats */
    size_t block_floats;
    int64_t n_blocks;
    int64_t n_items;     /* n_seqs * HV */
} gdn_job;

/* The scratch state keeps the pool's element order ([K][V] or [V][K]), so
 * loads and stores are straight copies (conversions for f16/bf16). */
static void load_state(const cv_gdn_problem *p, const void *base, int64_t off, float *S)
{
    const int64_t n = (int64_t)p->K * p->V;
    if (p->state_dtype == CLVARLEN_DTYPE_F32) {
        memcpy(S, (const float *)base + off, (size_t)n * sizeof(float));
        return;
    }
    for (int64_t i = 0; i < n; i++)
        S[i] = cv_load_act(base, p->state_dtype, off + i);
}

static void store_state(const cv_gdn_problem *p, void *base, int64_t off, const float *S)
{
    const int64_t n = (int64_t)p->K * p->V;
    if (p->state_dtype == CLVARLEN_DTYPE_F32) {
        memcpy((float *)base + off, S, (size_t)n * sizeof(float));
        return;
    }
    for (int64_t i = 0; i < n; i++)
        cv_store_act(base, p->state_dtype, off + i, S[i]);
}

static float softplus(const cv_gdn_problem *p, float x)
{
    float bx = p->sp_beta * x;
    return bx <= p->sp_threshold ? log1pf(expf(bx)) / p->sp_beta : x;
}

/* One (sequence, value head) pair through all its tokens. */
static void run_item(const cv_gdn_problem *p, const cv_gdn_kern *kern, int64_t item,
                     float *block)
{
    const int64_t HV = p->HV, K = p->K, V = p->V;
    const int64_t n = item / HV, h = item % HV;
    const int64_t hq = h / (HV / p->H);
    int64_t bos, eos;
    cv_gdn_bounds(p, n, &bos, &eos);
    if (eos <= bos)
        return; /* an empty sequence leaves its slot as it was */

    float *S = block, *qv = S + K * V, *kv = qv + K, *vv = kv + K, *ov = vv + V;

    int64_t slot = -1;
    if (p->state_pool) {
        slot = p->state_indices ? p->state_indices[n] : n;
        if (slot < 0)
            slot = -1;
    }
    const int64_t head_off = h * K * V;
    if (slot >= 0)
        load_state(p, p->state_pool, slot * p->slot_pitch + head_off, S);
    else
        memset(S, 0, (size_t)(K * V) * sizeof(float));

    int64_t cslot = -1;
    if (p->inter) {
        cslot = p->cache_indices ? p->cache_indices[n] : n;
        if (cslot < 0)
            cslot = -1;
    }

    const float A = expf(p->A_log[h]);
    const float bias = cv_load_act(p->dt_bias, p->bias_dtype, h);

    for (int64_t t = bos; t < eos; t++) {
        for (int64_t i = 0; i < K; i++) {
            qv[i] = cv_load_act(p->q, p->dtype, t * p->q_stride + hq * K + i);
            kv[i] = cv_load_act(p->k, p->dtype, t * p->k_stride + hq * K + i);
        }
        for (int64_t j = 0; j < V; j++)
            vv[j] = cv_load_act(p->v, p->dtype, t * p->v_stride + h * V + j);
        const float x = cv_load_act(p->a, p->dtype, t * p->a_stride + h) + bias;
        const float g = -A * softplus(p, x);
        const float eg = expf(g);
        const float beta = 1.0f / (1.0f + expf(-cv_load_act(p->b, p->dtype, t * p->b_stride + h)));

        float rq = 1.0f, rk = 1.0f;
        if (p->l2norm) {
            float sq = 0.0f, sk = 0.0f;
            for (int64_t i = 0; i < K; i++) {
                sq += qv[i] * qv[i];
                sk += kv[i] * kv[i];
            }
            rq = 1.0f / sqrtf(sq + 1e-6f);
            rk = 1.0f / sqrtf(sk + 1e-6f);
        }
        rq *= p->scale;
        for (int64_t i = 0; i < K; i++) {
            qv[i] *= rq;
            kv[i] *= rk;
        }

        kern->token(S, kv, qv, vv, beta, eg, ov, K, V, p->state_kv);
        for (int64_t j = 0; j < V; j++)
            cv_store_act(p->o, p->dtype, t * p->o_stride + h * V + j, ov[j]);

        if (cslot >= 0 && t - bos < p->cache_steps)
            store_state(p, p->inter,
                        ((cslot * p->cache_steps + (t - bos)) * HV + h) * K * V, S);
    }

    if (slot >= 0 && p->write_back)
        store_state(p, p->state_pool, slot * p->slot_pitch + head_off, S);
}

/* Blocks take items b, b + n_blocks, ...: consecutive items belong to the same
 * sequence, so striding spreads long sequences over the blocks. */
static void run_blocks(void *arg, int64_t begin, int64_t end)
{
    const gdn_job *job = arg;
    for (int64_t b = begin; b < end; b++) {
        float *block = job->scratch + (size_t)b * job->block_floats;
        for (int64_t item = b; item < job->n_items; item += job->n_blocks)
            run_item(job->p, job->kern, item, block);
    }
}

clvarlen_status cv_cpu_gated_delta_rule(cv_pool *pool, const cv_gdn_problem *p)
{
    const int64_t n_items = p->n_seqs * p->HV;
    if (n_items == 0 || p->total_tokens == 0)
        return CLVARLEN_SUCCESS;
    int threads = pool ? cv_pool_size(pool) : 1;
    int64_t n_blocks = CV_MIN(n_items, (int64_t)threads * 4);
    gdn_job job;
    job.p = p;
    job.kern = cv_cpu_gdn_kern();
    job.n_items = n_items;
    job.n_blocks = n_blocks;
    /* state, then q, k, v, o vectors (one V spare); rounded to a cache line */
    job.block_floats = ((size_t)p->K * (size_t)p->V + 2 * (size_t)p->K + 3 * (size_t)p->V + 15) &
                       ~(size_t)15;
    /* All scratch is allocated before any output is written. */
    job.scratch = aligned_alloc(64, (size_t)n_blocks * job.block_floats * sizeof(float));
    if (!job.scratch)
        return CLVARLEN_ERROR_OUT_OF_MEMORY;
    if (pool)
        cv_pool_for(pool, n_blocks, 1, run_blocks, &job);
    else
        run_blocks(&job, 0, n_blocks);
    free(job.scratch);
    return CLVARLEN_SUCCESS;
}
