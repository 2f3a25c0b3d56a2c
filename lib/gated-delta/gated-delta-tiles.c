/* The gated delta rule on OpenCL: which kernels and tiles a call runs on the
 * context's device (the device table, the kernels' local memory, the
 * CLVARLEN_GDN_TUNING knob), for the launchers of gated-delta-cl.c.
 */
#include "gated-delta/gated-delta-cl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if CLVARLEN_HAVE_OPENCL

enum { GDN_MIN_VT = 4 }; /* the token kernel's narrowest V tile (gdn_resolve_tiles) */

/* Whether the scan's wgmma form is the default on Hopper (gdn_resolve_mma):
 * H200 (H 16, HV 32, K = V = 128, bf16), the whole prefill 1.23-1.29x faster
 * than with the mma.sync scan in one command (docs/PERFORMANCE.md). */
#define GDN_WGMMA_DEFAULT 1
/* The first stage's value heads per work-group, where a key head's group of
 * value heads divides so: the k rows, K K^T, Q K^T and the norms are formed
 * once for them. H200 (H 16, HV 32, K = V = 128, bf16), the first stage
 * alone on the bench's four prefill batches: 289 / 177 / 529 / 1222 us in
 * pairs, 354 / 221 / 661 / 1594 one head per work-group (docs/PERFORMANCE.md;
 * measured before the q rows were staged in local memory). */
#define GDN_PREP_HEADS 2 /* at most GDN_PREP_MAX (cv-shared.h) */
/* The first stage's register cap on NVIDIA (0: none): 96 lets five of its
 * work-groups share an SM where the driver's 128 let four. */
#define GDN_PREP_NREG 0

/* Local memory of gdn_chunked_mma, as declared there: the k rows / A union,
 * the state and D tiles, six per-token arrays and, emulated, the lanes'
 * scratch. */
static size_t gdn_mma_local_bytes(int K, int mvt, int ptx)
{
    size_t x = (size_t)GDN_CHUNK * (K + 8) / 2, a = (size_t)GDN_CHUNK * (GDN_CHUNK + 1);
    size_t words = (x > a ? x : a) + (size_t)K * (mvt + 4) + (size_t)GDN_CHUNK * (mvt + 4) +
                   6 * GDN_CHUNK + (ptx ? 0 : 128 * 6);
    return words * 4;
}

/* The scratch the two-stage tensor-core path may use in one call (GDN_SCR_FLOATS
 * per chunk slot and head) before the launcher takes the heads in groups. */
#define GDN_SCR_CAP ((size_t)512 << 20)

/* Local memory of gdn_chunk_prep (the k rows / A union, the q rows / T
 * union, three per-row arrays per head of a run and two shared) and of
 * gdn_chunk_scan (k rows; T's fragments or q rows and P's fragments; the
 * rows' factors; the warps' exchange), with the emulation's lane scratch; the
 * larger of the two. */
static size_t gdn_scan_local_bytes(int K, int sw, int ptx)
{
    size_t x = (size_t)GDN_CHUNK * (K + 8) / 2, a = (size_t)GDN_CHUNK * (GDN_CHUNK + 1);
    size_t prep = ((x > a ? x : a) + (size_t)GDN_CHUNK * (GDN_CHUNK + 4) +
                   (3 * GDN_PREP_MAX + 2) * GDN_CHUNK +
                   (ptx ? 0 : 128 * 6)) * 4;
    size_t r2 = CV_MAX((size_t)GDN_CHUNK * (K + 8) * 2 + 8192, (size_t)16384);
    size_t scan = (size_t)GDN_CHUNK * (K + 8) * 2 + r2 + GDN_SCR_ROWS_N * 4 + (size_t)512 * sw +
                  (ptx ? 0 : (size_t)32 * sw * 6 * 4);
    return prep > scan ? prep : scan;
}

/* Local memory of gdn_chunk_scan's wgmma form (CV_GDN_WG): two sets of k, q, v rows,
 * T, P, factors; slack, mbarriers, exchange, emulated the lanes' scratch. Static arrays:
 * NVIDIA's OpenCL allows up to GDN_NV_STATIC_LOCAL on 9.x (docs/PERFORMANCE.md). */
#define GDN_NV_STATIC_LOCAL ((uint64_t)226 << 10)
static size_t gdn_scan_wg_local_bytes(int K, int sw, int ptx)
{
    const size_t tile = (size_t)GDN_CHUNK * GDN_CHUNK, rows = (size_t)GDN_CHUNK * K;
    const size_t vrows = (size_t)GDN_CHUNK * (16 * sw + 8); /* PP_VP */
    return (2 * (2 * rows + 3 * tile + vrows) + 448) * 2 + 2 * GDN_SCR_ROWS_N * 4 + 4 * 8 +
           (size_t)512 * sw + (ptx ? 0 : (size_t)32 * sw * 6 * 4);
}

/* Local memory of gdn_chunked, as declared there: the state, B and R tiles,
 * the slab/A union, the diagonal-block inverses and five per-token arrays. */
size_t cv_gdn_chunk_local_bytes(int K, int cvt, int ks)
{
    size_t ua = 2 * GDN_CHUNK * (size_t)(ks + 1), ub = GDN_CHUNK * (GDN_CHUNK + 1);
    size_t floats = (size_t)K * cvt + (size_t)GDN_CHUNK * cvt + GDN_CHUNK_BLOCK * (size_t)cvt +
                    (ua > ub ? ua : ub) + GDN_CHUNK * GDN_CHUNK_BLOCK + 5 * GDN_CHUNK;
    return floats * sizeof(float);
}

/* A developer knob for tuning sweeps (clvarlen-test bench): CLVARLEN_GDN_TUNING=
 * "wg=128,vt=16,tk=8,cwg=256,cvt=16,min=128" overrides the device table; "mma=1" forces
 * the tensor-core chunked kernel (emulated where there is no inline PTX, how tests run
 * it on PoCL), "mma=0" keeps the portable one, "mvt=N" its V tile, "split=0" rounds its
 * computed operands once (faster, less accurate), "scan=0" runs it as one fused kernel
 * instead of two stages, "sw=N" the scan's warps per group, "only=1" / "only=2" launches
 * only that stage (for timing it: results are wrong, and the wgmma form's first-use
 * check does not run), "scr=N" caps the two stages' scratch at N KiB (heads go in
 * smaller groups), "wgmma=0/1" turns the scan's wgmma form off or on (on: emulated off
 * Hopper; 2: on but not forced, as the default on Hopper: a failed check falls back),
 * "wgpre=N" the scan's prefetch (4, default, NVIDIA: the next chunk's rows and scratch
 * into L2; 0 off),
 * "wgbad=1" fails the form's check (tests), "hper=N" the first stage's value heads per
 * group (of one key head; GDN_PREP_HEADS), "preg=N" caps its registers on NVIDIA (PTX
 * patch step; 0: none; default GDN_PREP_NREG), "vec=0" keeps the token kernel's scalar
 * state loads, "pre=0" drops its next-token prefetch, "blas=0" runs the portable chunked
 * path as one fused kernel instead of CLBlast's products and the kernels around them. */
static void gdn_tuning_override(int *wg, int *vt, int *tk, int *cwg, int *cvt, int64_t *cmin,
                                int *mma, int *mvt, int *split, int *scan, int *sw, int *only,
                                long long *scr_kib, int *vec4, int *pre, int *blas, int *wgmma,
                                int *wgpre, int *wgbad, int *hper, int *preg)
{
    const char *env = getenv("CLVARLEN_GDN_TUNING");
    if (!env)
        return;
    char key[8];
    long long val;
    int used;
    while (sscanf(env, " %7[a-z] = %lld%n", key, &val, &used) == 2) {
        if (!strcmp(key, "wg"))
            *wg = (int)val;
        else if (!strcmp(key, "vt"))
            *vt = (int)val;
        else if (!strcmp(key, "tk"))
            *tk = (int)val;
        else if (!strcmp(key, "cwg"))
            *cwg = (int)val;
        else if (!strcmp(key, "cvt"))
            *cvt = (int)val;
        else if (!strcmp(key, "min"))
            *cmin = val;
        else if (!strcmp(key, "mma"))
            *mma = (int)val;
        else if (!strcmp(key, "mvt"))
            *mvt = (int)val;
        else if (!strcmp(key, "split"))
            *split = val != 0;
        else if (!strcmp(key, "scan"))
            *scan = val != 0;
        else if (!strcmp(key, "sw"))
            *sw = (int)val;
        else if (!strcmp(key, "only"))
            *only = (int)val;
        else if (!strcmp(key, "scr"))
            *scr_kib = val;
        else if (!strcmp(key, "vec"))
            *vec4 = val != 0;
        else if (!strcmp(key, "pre"))
            *pre = val != 0;
        else if (!strcmp(key, "blas"))
            *blas = val != 0;
        else if (!strcmp(key, "wgmma"))
            *wgmma = (int)CV_MIN(CV_MAX(val, 0), 2);
        else if (!strcmp(key, "wgpre"))
            *wgpre = (int)val & 4;
        else if (!strcmp(key, "wgbad"))
            *wgbad = val != 0;
        else if (!strcmp(key, "hper"))
            *hper = (int)CV_MIN(CV_MAX(val, 1), GDN_PREP_MAX);
        else if (!strcmp(key, "preg"))
            *preg = val <= 0 ? 0 : (int)CV_MIN(CV_MAX(val, 16), 255);
        env += used;
        if (*env == ',')
            env++;
    }
}

/* The tensor-core chunked kernel: bf16/f16 operands, K a multiple of 16 up to
 * 128, and its local memory within the device's. force: -1 auto, 0 off, 1 on
 * (emulated where there is no inline PTX). */
static void gdn_resolve_mma(const clvarlen_context *ctx, const cv_gdn_problem *p, int force,
                            int mvt, int scan, int sw, int wgmma, cv_gdn_tiles *t)
{
    const bool nv = ctx->device.vendor == CLVARLEN_VENDOR_NVIDIA &&
                    ctx->device.cc_major >= 8 && ctx->tuning.nvidia_mma &&
                    !ctx->gdn_mma_refused;
    t->ptx = nv;
    t->mvt = CV_MIN(CV_MAX((int)cv_pow2_floor(CV_MAX(mvt, 8)), 8), 64);
    t->sw = CV_MIN(CV_MAX((int)cv_pow2_floor(CV_MAX(sw, 1)), 1), 8);
    const uint64_t local = ctx->device.local_mem_bytes ? ctx->device.local_mem_bytes : 32768;
    const uint64_t maxwg = ctx->device.max_work_group_size ? ctx->device.max_work_group_size : 256;
    const bool fits = (p->dtype == CLVARLEN_DTYPE_BF16 || p->dtype == CLVARLEN_DTYPE_F16) &&
                      p->K % 16 == 0 && p->K <= 128 &&
                      gdn_mma_local_bytes((int)p->K, t->mvt, t->ptx) <= local;
    t->mma = fits && (force == 1 || (force < 0 && nv));
    t->scan = t->mma && scan && !ctx->gdn_scan_refused &&
              gdn_scan_local_bytes((int)p->K, t->sw, t->ptx) <= local &&
              (uint64_t)32 * t->sw <= maxwg;
    /* the scan on wgmma: Hopper (sm_90a through the loader's PTX patch), K 64 or
     * 128, two warpgroups; wgmma=1 forces it anywhere (emulated off NVIDIA) */
    const uint64_t wg_local = t->ptx && ctx->device.cc_major == 9 ? GDN_NV_STATIC_LOCAL : local;
    t->wgmma = t->scan && (p->K == 64 || p->K == 128) && t->sw == 8 &&
               gdn_scan_wg_local_bytes((int)p->K, t->sw, t->ptx) <= wg_local &&
               (wgmma > 0 || (wgmma < 0 && GDN_WGMMA_DEFAULT && t->ptx &&
                              ctx->device.cc_major == 9 && !ctx->gdn_wgmma_refused));
    if (wgmma > 0 && t->ptx && (ctx->device.cc_major != 9 || ctx->gdn_wgmma_refused))
        t->wgmma = 0; /* sm_90a only */
    t->wgforce = t->wgmma && wgmma == 1;
}

void cv_gdn_resolve_tiles(const clvarlen_context *ctx, const cv_gdn_problem *p, cv_gdn_tiles *t)
{
    const int K = (int)p->K, V = (int)p->V;
    const cv_tuning *tu = &ctx->tuning;
    const bool cpu = ctx->device.vendor == CLVARLEN_VENDOR_CPU;
    int64_t maxwg = ctx->device.max_work_group_size ? (int64_t)ctx->device.max_work_group_size
                                                    : 256;
    /* defaults: the device table's (H100: 32 columns, 128 work-items, 16 per
     * column); CPU devices split no column (PoCL was fastest so) */
    int wg = tu->gdn_wg ? (int)tu->gdn_wg : 128;
    int vt = tu->gdn_v_tile ? (int)tu->gdn_v_tile : 16;
    int tk = tu->gdn_k_lanes ? (int)tu->gdn_k_lanes : (cpu ? 1 : 16);
    int cwg = tu->gdn_chunk_wg ? (int)tu->gdn_chunk_wg : (cpu ? 64 : 256);
    int cvt = tu->gdn_chunk_v_tile ? (int)tu->gdn_chunk_v_tile : (cpu ? 32 : 16);
    /* AUTO's threshold: the device table's (below), unless "min=" sets one */
    int64_t cmin = INT64_MIN;
    /* the two stages with 8 warps per scan group: H100 (docs/PERFORMANCE.md) 1.37 /
     * 0.91 / 2.95 / 5.95 ms on the bench's four prefill batches, against 1.50 /
     * 0.95 / 3.31 / 6.29 with 4 warps and 2.43 / 1.70 / 4.87 / - fused */
    int mma = -1, mvt = 32, split = 1, scan = 1, sw = 8, only = 0;
    int wgmma = -1, wgpre = 4, wgbad = 0, hper = GDN_PREP_HEADS, preg = GDN_PREP_NREG;
    long long scr_kib = 0;
    int vec4 = 1, pre = !tu->gdn_no_prefetch, blas = tu->gdn_chunk_blas;
    gdn_tuning_override(&wg, &vt, &tk, &cwg, &cvt, &cmin, &mma, &mvt, &split, &scan, &sw, &only,
                        &scr_kib, &vec4, &pre, &blas, &wgmma, &wgpre, &wgbad, &hper, &preg);
    t->preg = preg;
    t->wgpre = wgpre;
    t->wgbad = wgbad;
    t->hper = hper;
    t->vec4 = vec4;
    t->prefetch = pre;
    t->only = only;
    t->scr_cap = scr_kib > 0 ? (size_t)scr_kib << 10 : GDN_SCR_CAP;
    t->scr_set = scr_kib > 0;
    t->split = split;
    gdn_resolve_mma(ctx, p, mma, mvt, scan, sw, wgmma, t);
    {
        const uint64_t local =
            ctx->device.local_mem_bytes ? ctx->device.local_mem_bytes : 32768;
        t->blas = CLVARLEN_HAVE_CLBLAST && blas && !t->mma && !ctx->gdn_blas_refused &&
                  cv_gdn_blas_local_bytes((int)p->K) <= local;
    }
    /* 0: AUTO stays token by token. Without tensor cores the table sets a
     * threshold only where the CLBlast path measured faster than the token kernel
     * for long sequences (PoCL, lib/runtime/device-db.c); the fused portable kernel
     * lost to the token kernel wherever it was measured (H100: 19.9 vs 13.9 ms on
     * 16 x 1k-token prefill; PoCL: 788 vs 578 ms), so where the CLBlast path does
     * not run, AUTO stays token by token */
    if (cmin == INT64_MIN)
        cmin = t->mma || t->blas ? (int64_t)tu->gdn_chunk_min : 0;
    if (t->mma && cmin == 0)
        cmin = GDN_MMA_CHUNK_MIN;

    tk = (int)cv_pow2_floor(CV_MAX(1, CV_MIN(tk, maxwg)));
    tk = CV_MIN(tk, (int)cv_pow2_ceil(K));
    /* at least GDN_MIN_VT columns, masked past V: PoCL (3.1) aborts the process in its
     * kernel compiler (ParallelRegion.cc, "exit != NULL") on the token kernel with one
     * column per work-item in groups of 1 or 2 (V <= 2 on CPU devices) */
    vt = CV_MIN((int)cv_pow2_floor(CV_MAX(vt, 1)), (int)cv_pow2_ceil(V));
    vt = CV_MAX(vt, GDN_MIN_VT);
    wg = (int)cv_pow2_floor(CV_MAX(1, CV_MIN(wg, maxwg)));
    if (wg < tk)
        wg = tk;
    int nvg = CV_MIN(wg / tk, vt);
    t->wg = nvg * tk;
    t->vt = vt;
    t->tk = tk;

    /* the chunked kernel assumes 64 <= work-group <= 256 (rows are work-items);
     * the device table's cap holds whatever the tuning says (PoCL: 64) */
    if (tu->gdn_chunk_wg_max)
        cwg = CV_MIN(cwg, (int)tu->gdn_chunk_wg_max);
    cwg = (int)cv_pow2_floor(CV_MAX(64, CV_MIN(cwg, 256)));
    t->ks = 16;
    t->cwg = cwg;
    t->cvt = 0;
    if (cwg <= maxwg) {
        cvt = CV_MIN(CV_MIN((int)cv_pow2_floor(CV_MAX(cvt, 1)), (int)cv_pow2_ceil(V)), cwg);
        /* tiles of 16 x CVT (the block solve) cover the work-group, masked past V: with
         * fewer elements than work-items PoCL (3.1) got K 128, V 2 wrong (rel. 0.16) */
        cvt = CV_MAX(cvt, cwg / GDN_CHUNK_BLOCK);
        uint64_t local = ctx->device.local_mem_bytes ? ctx->device.local_mem_bytes : 32768;
        while (cvt >= 1 && cv_gdn_chunk_local_bytes(K, cvt, t->ks) > local)
            cvt /= 2;
        t->cvt = cvt;
    }
    t->chunk_min = cmin < 0 ? 0 : cmin;
}

#endif /* CLVARLEN_HAVE_OPENCL */
