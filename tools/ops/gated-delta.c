/* clvarlen-test: gated delta rule (SPEC 3) checks and benchmarks.
 *
 * Checks run random varlen batches (empty and length-1 sequences, K != V,
 * HV > H, random states, negative indices) on the device and on the CPU
 * fallback and compare outputs and states. Benchmarks time the shape
 * (H 16, HV 32, K = V = 128, bf16 activations, f32 states): decode, where the
 * state traffic 2 N HV K V 4 bytes is compared with the copy bandwidth, and
 * prefill on gen_seq_lens batches with each algorithm.
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct-util.h"
#include "ops.h"

#if CLVARLEN_HAVE_OPENCL
#  include <clvarlen/clvarlen-cl.h>
#endif

/* One call's host data (and its device copy for timing). */
typedef struct gdn_data {
    clvarlen_context *ctx;
    clvarlen_gdn_params p;
    float *A_log, *dt_bias;
    void *a, *b, *q, *k, *v, *o, *pool;
    int32_t *cu, *sidx;
    size_t a_bytes, q_bytes, v_bytes, o_bytes, pool_bytes;
#if CLVARLEN_HAVE_OPENCL
    cl_mem m[11];
#endif
} gdn_data;

enum { M_ALOG, M_BIAS, M_A, M_B, M_Q, M_K, M_V, M_CU, M_POOL, M_SIDX, M_O };

static void gdn_data_free(gdn_data *d)
{
    free(d->A_log);
    free(d->dt_bias);
    free(d->a);
    free(d->b);
    free(d->q);
    free(d->k);
    free(d->v);
    free(d->o);
    free(d->pool);
    free(d->cu);
    free(d->sidx);
#if CLVARLEN_HAVE_OPENCL
    for (int i = 0; i < 11; i++)
        if (d->m[i])
            clReleaseMemObject(d->m[i]);
#endif
    memset(d, 0, sizeof *d);
}

/* Random inputs for params (shapes set), lengths[n], a pool of `slots` slots
 * and state indices (NULL: none). Returns 0 on success. */
static int gdn_data_make(gdn_data *d, const clvarlen_gdn_params *p, const int32_t *lengths,
                         int64_t slots, const int32_t *indices, uint64_t seed)
{
    memset(d, 0, sizeof *d);
    d->p = *p;
    const int64_t N = p->n_seqs, H = p->heads_qk, HV = p->heads_v, K = p->key_dim,
                  V = p->value_dim;
    const size_t es = clvarlen_dtype_size(p->dtype), ses = clvarlen_dtype_size(p->state_dtype);
    int64_t T = 0;
    d->cu = malloc((size_t)(N + 1) * sizeof(int32_t));
    if (!d->cu)
        return -1;
    d->cu[0] = 0;
    for (int64_t n = 0; n < N; n++) {
        T += lengths[n];
        d->cu[n + 1] = (int32_t)T;
    }
    d->p.total_tokens = T;
    d->a_bytes = (size_t)(T * HV) * es;
    d->q_bytes = (size_t)(T * H * K) * es;
    d->v_bytes = (size_t)(T * HV * V) * es;
    d->o_bytes = d->v_bytes;
    d->pool_bytes = (size_t)(slots * HV * K * V) * ses;
    d->p.state_slots = slots;
    d->A_log = malloc((size_t)HV * sizeof(float));
    d->dt_bias = malloc((size_t)HV * sizeof(float));
    d->a = malloc(d->a_bytes + 1);
    d->b = malloc(d->a_bytes + 1);
    d->q = malloc(d->q_bytes + 1);
    d->k = malloc(d->q_bytes + 1);
    d->v = malloc(d->v_bytes + 1);
    d->o = calloc(d->o_bytes + 1, 1);
    d->pool = slots ? malloc(d->pool_bytes) : NULL;
    if (!d->A_log || !d->dt_bias || !d->a || !d->b || !d->q || !d->k || !d->v || !d->o ||
        (slots && !d->pool))
        return -1;
    if (indices) {
        d->sidx = malloc((size_t)(N + 1) * sizeof(int32_t));
        if (!d->sidx)
            return -1;
        memcpy(d->sidx, indices, (size_t)N * sizeof(int32_t));
    }
    uint64_t s = seed;
    for (int64_t h = 0; h < HV; h++) {
        d->A_log[h] = (float)(-3.0 * ct_rng_uniform(&s));
        d->dt_bias[h] = (float)(2.0 * ct_rng_uniform(&s) - 1.0);
    }
    const double qk = p->use_qk_l2norm ? 1.0 : 1.0 / sqrt((double)K);
    ct_fill(&s, d->a, p->dtype, (size_t)(T * HV), 1.0);
    ct_fill(&s, d->b, p->dtype, (size_t)(T * HV), 1.5);
    ct_fill(&s, d->q, p->dtype, (size_t)(T * H * K), qk);
    ct_fill(&s, d->k, p->dtype, (size_t)(T * H * K), qk);
    ct_fill(&s, d->v, p->dtype, (size_t)(T * HV * V), 1.0);
    if (slots) {
        /* large pools (decode benchmarks) repeat one random block: filling
         * gigabytes element by element would take longer than the benchmark */
        const size_t total = (size_t)(slots * HV * K * V), block = (size_t)1 << 20;
        ct_fill(&s, d->pool, p->state_dtype, total < block ? total : block, 0.5);
        for (size_t at = block; at < total; at += block)
            memcpy((char *)d->pool + at * ses, d->pool,
                   (total - at < block ? total - at : block) * ses);
    }
    return 0;
}

static clvarlen_status gdn_data_run_host(clvarlen_context *ctx, gdn_data *d)
{
    return clvarlen_gated_delta_rule(ctx, &d->p, d->A_log, d->dt_bias, d->a, d->b, d->q, d->k,
                                     d->v, d->cu, d->pool, d->sidx, NULL, NULL, d->o);
}

/* ================================================================ checks */

/* Runs one batch on dev and cpu (same inputs, same initial pool) and folds
 * the errors into row. */
static int check_one(clvarlen_context *dev, clvarlen_context *cpu, const clvarlen_gdn_params *p,
                     const int32_t *lengths, int64_t slots, const int32_t *indices,
                     uint64_t seed, ct_row *row)
{
    gdn_data a, b;
    if (gdn_data_make(&a, p, lengths, slots, indices, seed) != 0 ||
        gdn_data_make(&b, p, lengths, slots, indices, seed) != 0) {
        gdn_data_free(&a);
        gdn_data_free(&b);
        snprintf(row->note, sizeof row->note, "out of memory");
        return -1;
    }
    clvarlen_status sa = gdn_data_run_host(dev, &a), sb = gdn_data_run_host(cpu, &b);
    int rc = 0;
    if (sa != CLVARLEN_SUCCESS || sb != CLVARLEN_SUCCESS) {
        snprintf(row->note, sizeof row->note, "%s", clvarlen_last_error(sa ? dev : cpu));
        rc = -1;
    } else {
        int64_t maxlen = 0;
        for (int64_t n = 0; n < p->n_seqs; n++)
            maxlen = lengths[n] > maxlen ? lengths[n] : maxlen;
        /* both sides round; SPEC 4's recurrence tolerance for f32 over long sequences */
        double to = p->dtype == CLVARLEN_DTYPE_F32 ? 1e-4 : tu_tolerance(p->dtype);
        double ts = p->state_dtype == CLVARLEN_DTYPE_F32 ? 1e-4 : tu_tolerance(p->state_dtype);
        size_t on = a.o_bytes / clvarlen_dtype_size(p->dtype);
        double eo = on ? tu_rel_err(a.o, b.o, p->dtype, on) : 0.0;
        double es = slots ? tu_rel_err(a.pool, b.pool, p->state_dtype,
                                       a.pool_bytes / clvarlen_dtype_size(p->state_dtype))
                          : 0.0;
        row->cases++;
        /* The row shows its worst case relative to that case's own tolerance
         * (cases mix dtypes: a bf16 error next to an f16 tolerance misleads). */
        const double worst = eo / to > es / ts ? eo : es, tol = eo / to > es / ts ? to : ts;
        if (row->cases == 1 || !(row->tolerance > 0.0) ||
            worst / tol > row->max_err / row->tolerance || isnan(worst)) {
            row->max_err = worst;
            row->tolerance = tol;
        }
        if (!(eo <= to) || !(es <= ts)) {
            if (!row->failed)
                snprintf(row->note, sizeof row->note,
                         "H %d HV %d K %d V %d %s/%s max len %lld: o err %.3g, state err %.3g",
                         p->heads_qk, p->heads_v, p->key_dim, p->value_dim,
                         clvarlen_dtype_name(p->dtype), clvarlen_dtype_name(p->state_dtype),
                         (long long)maxlen, eo, es);
            row->failed++;
        }
    }
    gdn_data_free(&a);
    gdn_data_free(&b);
    return rc;
}

static int check_family(clvarlen_context *dev, clvarlen_context *cpu, const ct_options *opt,
                        ct_row *row, clvarlen_gdn_algorithm alg, const char *op)
{
    static const int32_t dims[][4] = {
        {16, 32, 128, 128}, {2, 4, 64, 96}, {1, 4, 32, 16}, {2, 2, 24, 40}, {4, 8, 128, 64}};
    static const clvarlen_dtype dts[][2] = {{CLVARLEN_DTYPE_BF16, CLVARLEN_DTYPE_F32},
                                            {CLVARLEN_DTYPE_F32, CLVARLEN_DTYPE_F32},
                                            {CLVARLEN_DTYPE_F16, CLVARLEN_DTYPE_F16},
                                            {CLVARLEN_DTYPE_BF16, CLVARLEN_DTYPE_BF16}};
    const uint64_t base = ct_seed_for(opt, op);
    const int cases = opt->quick ? 3 : 8;
    memset(row, 0, sizeof *row);
    snprintf(row->op, sizeof row->op, "%s", op);
    for (int c = 0; c < cases; c++) {
        uint64_t s = ct_case_seed(base, c);
        if (!ct_check_case_runs(opt, c))
            continue;
        const int32_t *dm = dims[c % 5];
        int32_t lengths[16], idx[16];
        const int64_t max_len = alg == CLVARLEN_GDN_CHUNKED ? 300 : 90;
        /* the large head shape gets a small batch: the CPU side runs it too */
        int64_t n = ct_random_lengths(&s, dm[2] >= 128 ? 4 : 12, max_len,
                                      dm[2] >= 128 ? 400 : 1200, lengths);
        if (n == 0) {
            n = 1;
            lengths[0] = 1;
        }
        clvarlen_gdn_params p;
        clvarlen_gdn_params_init(&p);
        p.dtype = dts[c % 4][0];
        p.state_dtype = dts[c % 4][1];
        p.n_seqs = n;
        p.heads_qk = dm[0];
        p.heads_v = dm[1];
        p.key_dim = dm[2];
        p.value_dim = dm[3];
        p.use_qk_l2norm = c % 3 != 2;
        p.state_layout = c % 2 ? CLVARLEN_STATE_KV : CLVARLEN_STATE_VK;
        p.algorithm = alg;
        const int64_t slots = n + 2;
        for (int64_t i = 0; i < n; i++)
            idx[i] = (int32_t)((i + 3) % slots); /* distinct slots */
        if (n > 1)
            idx[ct_rng_int(&s, 0, n - 1)] = -1;
        if (check_one(dev, cpu, &p, lengths, slots, idx, ct_rng_next(&s), row) != 0)
            return -1;
    }
    return 0;
}

int check_gdn(clvarlen_context *dev, clvarlen_context *cpu, const ct_options *opt,
              ct_row *row)
{
    return check_family(dev, cpu, opt, row, CLVARLEN_GDN_AUTO, "gated-delta");
}

int check_gdn_recurrent(clvarlen_context *dev, clvarlen_context *cpu,
                        const ct_options *opt, ct_row *row)
{
    return check_family(dev, cpu, opt, row, CLVARLEN_GDN_RECURRENT, "gated-delta-recurrent");
}

int check_gdn_chunked(clvarlen_context *dev, clvarlen_context *cpu, const ct_options *opt,
                      ct_row *row)
{
    return check_family(dev, cpu, opt, row, CLVARLEN_GDN_CHUNKED, "gated-delta-chunked");
}

/* ================================================================ benchmarks */

static int run_host(void *arg, void *event_out)
{
    (void)event_out;
    gdn_data *d = arg;
    return gdn_data_run_host(d->ctx, d) == CLVARLEN_SUCCESS ? 0 : -1;
}

#if CLVARLEN_HAVE_OPENCL
static int run_cl(void *arg, void *event_out)
{
    gdn_data *d = arg;
    return clvarlen_cl_gated_delta_rule(d->ctx, &d->p, d->m[M_ALOG], 0, d->m[M_BIAS], 0,
                                        d->m[M_A], 0, d->m[M_B], 0, d->m[M_Q], 0, d->m[M_K], 0,
                                        d->m[M_V], 0, d->m[M_CU], 0, d->m[M_POOL], 0,
                                        d->m[M_SIDX], 0, NULL, 0, NULL, 0, d->m[M_O], 0, 0, NULL,
                                        (cl_event *)event_out) == CLVARLEN_SUCCESS
               ? 0
               : -1;
}

static int upload(gdn_data *d)
{
    cl_context clc;
    cl_device_id dev;
    cl_command_queue q;
    if (clvarlen_context_get_cl(d->ctx, &clc, &dev, &q) != CLVARLEN_SUCCESS)
        return -1;
    const int64_t HV = d->p.heads_v, N = d->p.n_seqs;
    const struct {
        const void *host;
        size_t bytes;
    } t[11] = {{d->A_log, (size_t)HV * 4}, {d->dt_bias, (size_t)HV * 4}, {d->a, d->a_bytes},
               {d->b, d->a_bytes},         {d->q, d->q_bytes},          {d->k, d->q_bytes},
               {d->v, d->v_bytes},         {d->cu, (size_t)(N + 1) * 4}, {d->pool, d->pool_bytes},
               {d->sidx, (size_t)N * 4},   {NULL, d->o_bytes}};
    for (int i = 0; i < 11; i++) {
        if (i == M_SIDX && !d->sidx)
            continue;
        if (i == M_POOL && !d->pool)
            continue;
        cl_int err = CL_SUCCESS;
        d->m[i] = clCreateBuffer(clc, CL_MEM_READ_WRITE, t[i].bytes ? t[i].bytes : 16, NULL, &err);
        if (err != CL_SUCCESS)
            return -1;
        if (t[i].host && t[i].bytes &&
            clEnqueueWriteBuffer(q, d->m[i], CL_TRUE, 0, t[i].bytes, t[i].host, 0, NULL, NULL) !=
                CL_SUCCESS)
            return -1;
    }
    return 0;
}
#endif

/* Times one batch: device time through the cl_mem entry point on OpenCL,
 * wall time through the host entry point on the CPU fallback. */
static double time_batch(clvarlen_context *ctx, const ct_options *opt, gdn_data *d)
{
    d->ctx = ctx;
#if CLVARLEN_HAVE_OPENCL
    if (ct_context_is_cl(ctx)) {
        if (upload(d) != 0)
            return -1.0;
        return ct_time_median(ctx, run_cl, d, ct_bench_iters(opt));
    }
#endif
    return ct_time_median(ctx, run_host, d, opt->quick ? 2 : 3);
}

static void shape_params(clvarlen_gdn_params *p, int64_t n, int H, int HV, int K, int V)
{
    clvarlen_gdn_params_init(p);
    p->dtype = CLVARLEN_DTYPE_BF16;
    p->state_dtype = CLVARLEN_DTYPE_F32;
    p->n_seqs = n;
    p->heads_qk = H;
    p->heads_v = HV;
    p->key_dim = K;
    p->value_dim = V;
    p->use_qk_l2norm = 1;
}

static const char *tuning_note(void)
{
    const char *t = getenv("CLVARLEN_GDN_TUNING");
    return t && *t ? t : "device table";
}

/* Decode: one token per sequence, every sequence its own slot. */
static int bench_decode(clvarlen_context *dev, const ct_options *opt, double copy_gbps,
                        int64_t n, clvarlen_dtype state_dtype)
{
    const int H = 16, HV = 32, K = 128, V = 128;
    clvarlen_gdn_params p;
    shape_params(&p, n, H, HV, K, V);
    p.state_dtype = state_dtype;
    int32_t *lengths = malloc((size_t)n * sizeof(int32_t));
    int32_t *idx = malloc((size_t)n * sizeof(int32_t));
    if (!lengths || !idx) {
        free(lengths);
        free(idx);
        return -1;
    }
    for (int64_t i = 0; i < n; i++) {
        lengths[i] = 1;
        idx[i] = (int32_t)i;
    }
    gdn_data d;
    int rc = -1;
    if (gdn_data_make(&d, &p, lengths, n, idx, 7) == 0) {
        double t = time_batch(dev, opt, &d);
        if (t > 0.0) {
            const double bytes =
                2.0 * (double)n * HV * K * V * (double)clvarlen_dtype_size(state_dtype);
            char shape[160];
            snprintf(shape, sizeof shape, "decode N %lld H %d HV %d K %d V %d bf16/%s %.0f tok/s",
                     (long long)n, H, HV, K, V, clvarlen_dtype_name(state_dtype),
                     (double)n / t);
            ct_bench_report(opt, "gated-delta-decode", shape, t, bytes, 0.0,
                            copy_gbps > 0.0 ? bytes / t * 1e-9 / copy_gbps : 0.0,
                            "copy bandwidth");
            rc = 0;
        } else {
            fprintf(stderr, "gated-delta decode N %lld failed: %s\n", (long long)n,
                    clvarlen_last_error(dev));
        }
    }
    gdn_data_free(&d);
    free(lengths);
    free(idx);
    return rc;
}

/* Prefill: a gen_seq_lens batch (fixed: n_seqs of total / n_seqs tokens each),
 * each sequence from its own slot. */
static int bench_prefill_batch(clvarlen_context *dev, const ct_options *opt, int32_t n_seqs,
                               int64_t total, int fixed, int H, int HV, int K, int V,
                               clvarlen_gdn_algorithm alg)
{
    int32_t *lengths = malloc((size_t)n_seqs * sizeof(int32_t));
    int32_t *idx = malloc((size_t)n_seqs * sizeof(int32_t));
    if (lengths && fixed)
        for (int32_t i = 0; i < n_seqs; i++)
            lengths[i] = (int32_t)(total / n_seqs);
    if (!lengths || !idx ||
        (!fixed && clvarlen_gen_seq_lens(dev, 1, 1, n_seqs, total, lengths) != 0)) {
        free(lengths);
        free(idx);
        return -1;
    }
    int32_t maxlen = 0;
    for (int32_t i = 0; i < n_seqs; i++) {
        idx[i] = i;
        maxlen = lengths[i] > maxlen ? lengths[i] : maxlen;
    }
    clvarlen_gdn_params p;
    shape_params(&p, n_seqs, H, HV, K, V);
    p.algorithm = alg;
    gdn_data d;
    int rc = -1;
    if (gdn_data_make(&d, &p, lengths, n_seqs, idx, 9) == 0) {
        double t = time_batch(dev, opt, &d);
        if (t > 0.0) {
            static const char *names[] = {"auto", "recurrent", "chunked"};
            char shape[200];
            snprintf(shape, sizeof shape,
                     "prefill %d seqs %lld tok (max %d) H %d HV %d K %d V %d %s %.0f tok/s",
                     (int)n_seqs, (long long)total, (int)maxlen, H, HV, K, V, names[alg],
                     (double)total / t);
            /* bytes: activations in and out plus the states read and written once */
            const double bytes = (double)(2 * d.q_bytes + 2 * d.v_bytes + 2 * d.a_bytes) +
                                 2.0 * n_seqs * HV * K * V * 4.0;
            ct_bench_report(opt, "gated-delta-prefill", shape, t, bytes, 0.0, 0.0, NULL);
            rc = 0;
        } else {
            fprintf(stderr, "gated-delta prefill failed: %s\n", clvarlen_last_error(dev));
        }
    }
    gdn_data_free(&d);
    free(lengths);
    free(idx);
    return rc;
}

static int bench_prefill(clvarlen_context *dev, const ct_options *opt, int32_t n_seqs,
                         int64_t total, int H, int HV, int K, int V, clvarlen_gdn_algorithm alg)
{
    return bench_prefill_batch(dev, opt, n_seqs, total, 0, H, HV, K, V, alg);
}

int bench_gdn(clvarlen_context *dev, const ct_options *opt, double copy_gbps)
{
    clvarlen_device_info info;
    int gpu_like = 0;
    if (clvarlen_context_device(dev, &info) == CLVARLEN_SUCCESS)
        gpu_like = info.kind == CLVARLEN_DEVICE_DISCRETE_GPU ||
                   info.kind == CLVARLEN_DEVICE_INTEGRATED_GPU ||
                   info.kind == CLVARLEN_DEVICE_ACCELERATOR;
    ct_bench_note(opt, "gated delta tuning: %s", tuning_note());
    /* a developer knob for A/B sweeps: CLVARLEN_BENCH_GDN=decode or =prefill
     * runs that part alone, =recurrent the token kernel's prefill batches;
     * =prefill:MASK the prefill batches whose bits are set (1: 16 / 16384,
     * 2: 64 / 8192, 4: 4 / 32768, 8: 256 / 65536); =crossover two sequences of
     * 256, 512, 1024 and 2048 tokens each, AUTO, token by token and chunked (AUTO's
     * thresholds: lib/runtime/device-db.c) */
    const char *part = getenv("CLVARLEN_BENCH_GDN");
    const int decode = !part || !strcmp(part, "decode");
    const int prefill = !part || !strcmp(part, "prefill") || !strncmp(part, "prefill:", 8);
    long cases = 15;
    if (part && !strncmp(part, "prefill:", 8)) {
        char *end;
        cases = strtol(part + 8, &end, 0);
        if (end == part + 8 || *end || cases < 1 || cases > 15) {
            fprintf(stderr, "CLVARLEN_BENCH_GDN=%s: the mask is 1 to 15\n", part);
            return -1;
        }
    }
    int rc = 0;
    if (part && !strcmp(part, "crossover")) {
        for (int32_t L = 256; L <= 2048; L *= 2)
            for (int alg = 0; alg < 3; alg++)
                rc |= bench_prefill_batch(dev, opt, 2, 2 * (int64_t)L, 1, 16, 32, 128, 128, alg);
    } else if (gpu_like && part && !strcmp(part, "recurrent")) {
        rc |= bench_prefill(dev, opt, 256, 1024, 16, 32, 128, 128, CLVARLEN_GDN_RECURRENT);
        rc |= bench_prefill(dev, opt, 64, 8192, 16, 32, 128, 128, CLVARLEN_GDN_RECURRENT);
        rc |= bench_prefill(dev, opt, 16, 16384, 16, 32, 128, 128, CLVARLEN_GDN_RECURRENT);
    } else if (gpu_like) {
        static const int64_t decode_n[] = {1, 32, 256, 1024};
        for (size_t i = 0; decode && i < sizeof decode_n / sizeof decode_n[0]; i++)
            rc |= bench_decode(dev, opt, copy_gbps, decode_n[i], CLVARLEN_DTYPE_F32);
        if (decode && !opt->quick)
            rc |= bench_decode(dev, opt, copy_gbps, 256, CLVARLEN_DTYPE_BF16);
        for (int alg = 0; prefill && alg < 3; alg++) {
            if (opt->quick && alg != CLVARLEN_GDN_AUTO)
                continue;
            if (cases & 1)
                rc |= bench_prefill(dev, opt, 16, 16384, 16, 32, 128, 128, alg);
            if (cases & 2)
                rc |= bench_prefill(dev, opt, 64, 8192, 16, 32, 128, 128, alg);
            if (alg == CLVARLEN_GDN_RECURRENT)
                continue; /* the long cases: the tensor-core path and AUTO only */
            if (cases & 4)
                rc |= bench_prefill(dev, opt, 4, 32768, 16, 32, 128, 128, alg);
            if (cases & 8)
                rc |= bench_prefill(dev, opt, 256, 65536, 16, 32, 128, 128, alg);
        }
    } else {
        /* the same head shape, batches a 2-core machine finishes in seconds */
        rc |= bench_decode(dev, opt, copy_gbps, opt->quick ? 8 : 32, CLVARLEN_DTYPE_F32);
        rc |= bench_prefill(dev, opt, 4, opt->quick ? 256 : 1024, 16, 32, 128, 128,
                            CLVARLEN_GDN_AUTO);
        if (!opt->quick && ct_context_is_cl(dev))
            rc |= bench_prefill(dev, opt, 4, 1024, 16, 32, 128, 128, CLVARLEN_GDN_CHUNKED);
    }
    return rc;
}
