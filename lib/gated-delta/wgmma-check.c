/* The check of the gated delta scan's wgmma form (cl/gated-delta-scan.cl,
 * CV_GDN_WG): before the form first runs for a key dim and dtype on a context
 * (lib/gated-delta/gated-delta-cl.c, gdn_wgmma_ready), one sequence of 130
 * tokens (three chunks, the last one partial) with a random initial state runs
 * through the two-stage chunked path on the device, in the form, and through
 * the CPU fallback; the outputs and the final state must agree within SPEC 4's
 * tolerances for the chunked form. Its products read their operands through
 * descriptors whose layouts only the device can confirm (the emulated form
 * tests them on other devices), so a driver that builds the form but runs it
 * differently is caught here rather than in a caller's results.
 */
#include "gated-delta/gated-delta-cl.h"
#include "core/half.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if CLVARLEN_HAVE_OPENCL

enum { CHECK_LEN = 130 };

/* A value of the check's inputs: deterministic, in [-1, 1). */
static float check_value(uint32_t i)
{
    uint32_t h = i * 2654435761u;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    return (float)(h & 0xffffu) / 32768.0f - 1.0f;
}

static void put(void *buf, clvarlen_dtype dt, size_t i, float x)
{
    if (dt == CLVARLEN_DTYPE_F32)
        ((float *)buf)[i] = x;
    else
        ((uint16_t *)buf)[i] = dt == CLVARLEN_DTYPE_F16 ? cv_float_to_half(x) : cv_float_to_bf16(x);
}

static double get(const void *buf, clvarlen_dtype dt, size_t i)
{
    if (dt == CLVARLEN_DTYPE_F32)
        return ((const float *)buf)[i];
    const uint16_t h = ((const uint16_t *)buf)[i];
    return dt == CLVARLEN_DTYPE_F16 ? cv_half_to_float(h) : cv_bf16_to_float(h);
}

/* Relative L2 distance of n elements; NaN anywhere fails (returns infinity). */
static double rel_l2(const void *got, const void *want, clvarlen_dtype dt, size_t n)
{
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double g = get(got, dt, i), w = get(want, dt, i);
        if (!isfinite(g) || !isfinite(w))
            return INFINITY;
        num += (g - w) * (g - w);
        den += w * w;
    }
    return den > 0.0 ? sqrt(num / den) : sqrt(num);
}

/* Runs the check for the call's K, V, dtypes and state layout: *ok when the two
 * agree, else an error says by how much. fail: report a failure whatever the
 * results (tests of the fallback). */
static clvarlen_status wgmma_verify(clvarlen_context *ctx, const cv_gdn_problem *call, bool fail,
                                    bool *ok)
{
    *ok = false;
    const int K = call->K, V = call->V;
    const clvarlen_dtype dt = call->dtype, sdt = call->state_dtype;
    const size_t es = cv_dtype_size(dt), ss = cv_dtype_size(sdt);
    const size_t nqk = (size_t)CHECK_LEN * K, nv = (size_t)CHECK_LEN * V, ns = (size_t)K * V;
    unsigned char *mem = calloc(1, 2 * nqk * es + 4 * nv * es + 2 * CHECK_LEN * es + 3 * ns * ss);
    if (!mem)
        return cv_error(ctx, CLVARLEN_ERROR_OUT_OF_MEMORY,
                        "gated delta wgmma check: out of memory");
    unsigned char *q = mem, *k = q + nqk * es, *v = k + nqk * es, *o = v + nv * es;
    unsigned char *o_ref = o + nv * es, *a = o_ref + nv * es, *b = a + CHECK_LEN * es;
    unsigned char *pool = b + CHECK_LEN * es, *pool_ref = pool + ns * ss;
    unsigned char *pool0 = pool_ref + ns * ss;
    uint32_t seed = 1;
    for (size_t i = 0; i < nqk; i++) {
        put(q, dt, i, check_value(seed++));
        put(k, dt, i, check_value(seed++));
    }
    for (size_t i = 0; i < nv; i++)
        put(v, dt, i, check_value(seed++));
    for (size_t i = 0; i < CHECK_LEN; i++) {
        put(a, dt, i, check_value(seed++));
        put(b, dt, i, 2.0f * check_value(seed++));
    }
    for (size_t i = 0; i < ns; i++)
        put(pool0, sdt, i, 0.5f * check_value(seed++));
    memcpy(pool, pool0, ns * ss);
    memcpy(pool_ref, pool0, ns * ss);

    const int32_t cu[2] = {0, CHECK_LEN};
    const float A_log = -0.5f, dt_bias = 0.25f;
    cv_gdn_problem p = {0};
    p.dtype = dt;
    p.bias_dtype = CLVARLEN_DTYPE_F32;
    p.state_dtype = sdt;
    p.n_seqs = 1;
    p.total_tokens = CHECK_LEN;
    p.cu_seqlens = cu;
    p.H = p.HV = 1;
    p.K = K;
    p.V = V;
    p.q_stride = p.k_stride = K;
    p.v_stride = p.o_stride = V;
    p.a_stride = p.b_stride = 1;
    p.state_kv = call->state_kv;
    p.slots = 1;
    p.slot_pitch = (int64_t)ns;
    p.scale = 1.0f / sqrtf((float)K);
    p.sp_beta = 1.0f;
    p.sp_threshold = 20.0f;
    p.l2norm = 1;
    p.write_back = 1;
    p.A_log = &A_log;
    p.dt_bias = &dt_bias;
    p.q = q;
    p.k = k;
    p.v = v;
    p.a = a;
    p.b = b;
    p.state_pool = pool;
    p.o = o;
    clvarlen_gdn_params pa;
    clvarlen_gdn_params_init_sized(&pa, sizeof pa);
    pa.algorithm = CLVARLEN_GDN_CHUNKED;
    clvarlen_status st = cv_gdn_cl_host(ctx, "gated delta wgmma check", &pa, &p);
    if (st == CLVARLEN_SUCCESS) {
        p.state_pool = pool_ref;
        p.o = o_ref;
        st = cv_cpu_gated_delta_rule(ctx->base.pool, &p);
    }
    if (st == CLVARLEN_SUCCESS) {
        /* SPEC 4: chunked outputs 1e-2 relative, f32 states 1e-4 (16-bit states
         * take their dtype's rounding: 1e-2) */
        const double eo = fail ? INFINITY : rel_l2(o, o_ref, dt, nv);
        const double es_ = rel_l2(pool, pool_ref, sdt, ns);
        const double so = sdt == CLVARLEN_DTYPE_F32 ? 1e-4 : 1e-2;
        *ok = eo <= 1e-2 && es_ <= so;
        cv_log(ctx, CLVARLEN_LOG_INFO,
               "gated delta: the scan's wgmma form against the CPU fallback, K %d V %d: output "
               "%.3g, state %.3g (relative L2)",
               K, V, eo, es_);
        if (!*ok)
            st = cv_error(ctx, CLVARLEN_ERROR_KERNEL_BUILD,
                          "gated delta wgmma check: K %d, V %d: output %.3g, state %.3g from "
                          "the CPU fallback (relative L2; tolerances 1e-2, %.0e)",
                          K, V, eo, es_, so);
    }
    free(mem);
    return st;
}

/* The scan's wgmma form runs for a key dim and dtype only after its check
 * (wgmma-check.c) passed on this context, once each. A failure is logged and
 * the mma.sync form runs instead (*wgmma cleared), unless the form was
 * forced: then the error is returned. Timing runs skip the check. */
clvarlen_status cv_gdn_wgmma_ready(clvarlen_context *ctx, const cv_gdn_problem *p, bool forced,
                                   bool fail, bool timing, int *wgmma)
{
    if (!*wgmma)
        return CLVARLEN_SUCCESS;
    int *state = &ctx->gdn_wgmma[p->K == 128][p->dtype == CLVARLEN_DTYPE_F16];
    if (*state == 0 && !timing) {
        *state = 2; /* the check's own run takes the form */
        bool ok = false;
        clvarlen_status st = wgmma_verify(ctx, p, fail, &ok);
        *state = ok ? 1 : -1;
        if (!ok) {
            if (forced)
                return st != CLVARLEN_SUCCESS
                           ? st
                           : cv_error(ctx, CLVARLEN_ERROR_KERNEL_BUILD,
                                      "gated delta: the scan's wgmma form failed its check");
            cv_log(ctx, CLVARLEN_LOG_INFO,
                   "gated delta: the scan's wgmma form is not used for K %d (%s); running "
                   "mma.sync",
                   (int)p->K, clvarlen_last_error(ctx));
            cv_clear_error(ctx);
        }
    }
    if (*state < 0) {
        if (forced)
            return cv_error(ctx, CLVARLEN_ERROR_UNSUPPORTED,
                            "gated delta: CLVARLEN_GDN_TUNING wgmma=1, but the scan's wgmma form "
                            "failed its check on this context earlier");
        *wgmma = 0;
    }
    return CLVARLEN_SUCCESS;
}

#endif /* CLVARLEN_HAVE_OPENCL */
