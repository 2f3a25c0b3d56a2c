/* Varlen attention backward on NVIDIA tensor cores (SPEC 1.2; compute
 * capability >= 8.0): mma.sync.m16n8k16 with f16/bf16 operands and f32
 * accumulators, ldmatrix and cp.async through cl/nv-mma.clh, which emulates
 * them on other devices so that the fragment bookkeeping is tested on PoCL
 * (every warp-wide call sits in work-group-uniform control flow).
 *
 * Two kernels, as the portable ones (cl/attention-bwd.cl), each output element
 * summed by one lane in a fixed order (deterministic):
 *   attn_bwd_dkdv_mma  one work-group per (key tile of BN_KV = 16 * warps
 *       keys, KV head); warp w owns keys 16w .. 16w + 15, its K fragments in
 *       registers and V in local memory. Per block of BM_KV query rows (Q and
 *       dO staged by cp.async; with NSTAGE 2 the next block's load overlaps
 *       this one's products): S^T = K Q^T and dP^T = V dO^T, then P^T and dS^T on the
 *       accumulator fragments, then dV += P^T dO and dK += dS^T Q with the
 *       fragments going straight into the A operands.
 *   attn_bwd_dq_mma  one work-group per (query tile of 16 * warps rows, query
 *       head); Q and dO fragments in registers; per key tile of BN_Q keys
 *       (K and V double-buffered): S = Q K^T, dP = dO V^T, dS, dQ += dS K.
 * delta = dot(do, o) comes from attn_bwd_delta of the portable file.
 *
 * -D: CV_DTYPE (CV_DT_F16 or CV_DT_BF16), HEAD_DIM (multiple of 16, <= 128),
 * NWARPS, BM_KV and BN_Q (multiples of 16), NSTAGE (1 or 2), GRAD_F32 (optional: f32
 * outputs); CV_WGMMA (with CV_SM90A=1 on the device) the Hopper form,
 * cl/attention-bwd-wgmma.clh, spliced in at the end of this file (HEAD_DIM 64,
 * 96 or 128, NWARPS 4, BM_KV and BN_Q 32; BWD_PAIR and the options there),
 * whose dq kernel also computes delta (BWD_DQ_DELTA).
 * Dropout runs the portable kernels (the host's choice).
 */

#ifndef CV_DTYPE
#define CV_DTYPE CV_DT_BF16
#endif
#ifndef HEAD_DIM
#define HEAD_DIM 128
#endif
#ifndef NWARPS
#define NWARPS 4
#endif
#ifndef BM_KV
#define BM_KV 32
#endif
/* Buffers of Q/dO blocks in the dk/dv kernel: 2 overlaps the next block's
 * load with this one's products (BM_KV 16 fits 48 KiB), 1 does not (BM_KV 32;
 * measured faster on an H100: fewer, larger steps). */
#ifndef NSTAGE
#define NSTAGE 1
#endif
#ifndef BN_Q
#define BN_Q 32
#endif

#define WG_SIZE (NWARPS * 32)
#define BN_KV (16 * NWARPS)    /* keys per dk/dv work-group */
#define BM_Q (16 * NWARPS)     /* query rows per dq work-group */
#define SROW (HEAD_DIM + 8)    /* padded local row, 16-bit elements */
#define KSTEPS (HEAD_DIM / 16)
#define NT_D (HEAD_DIM / 8)    /* n8 tiles across the head dim */
#define CPR (HEAD_DIM / 8)     /* 16-byte chunks per row */
/* Local rows: dk/dv keeps V and two stages of Q and dO (K passes through the
 * stages first); dq stages Q and dO, then two stages of K and V in their place. */
#define KV_ROWS (BN_KV + 2 * NSTAGE * BM_KV)
#define Q_ROWS (2 * BM_Q)
#if BN_KV > 2 * NSTAGE * BM_KV || 4 * BN_Q > 2 * BM_Q
#error "attention-bwd-nv.cl: tiles do not fit the staging layout"
#endif

// clvarlen-include: nv-mma.clh
// clvarlen-include: nv-wgmma.clh
// clvarlen-include: nv-wgmma-pair.clh

/* Rows ROWEXPR(rr_) (rr_ < nrows) of this head's HEAD_DIM elements into dst
 * rows 0 .. ROWS - 1, rows at or past nrows zero-filled (asynchronous). */
#define STAGE(dst, ROWS, base, ELEXPR, nrows)                                                 \
    do {                                                                                       \
        for (int e_ = lid; e_ < (ROWS) * CPR; e_ += WG_SIZE) {                                 \
            const int r_ = e_ / CPR, ch_ = e_ % CPR;                                           \
            const bool ok_ = r_ < (nrows);                                                     \
            const int rr_ = ok_ ? r_ : 0;                                                      \
            const size_t el_ = (size_t)(ELEXPR) + (size_t)ch_ * 8;                             \
            cp_async16((dst) + r_ * SROW + ch_ * 8, (base) + el_ * 2, ok_ ? 16 : 0);           \
        }                                                                                      \
    } while (0)

/* The arguments both kernels share (the portable kernels' BWD_COMMON_ARGS). */
#define BWD_MMA_ARGS                                                                           \
    __global const uchar *q, ulong q_off, long q_stride, __global const uchar *k, ulong k_off, \
        long k_stride, __global const uchar *v, ulong v_off, long v_stride,                     \
        __global const uchar *dout, ulong do_off, long do_stride, __global const int *cu_q_base,  \
        ulong cu_q_off, __global const int *cu_k_base, ulong cu_k_off,                          \
        __global const int *q_pos_base, ulong q_pos_off, __global const float *lse_base,        \
        ulong lse_off, __global const float *delta_base, ulong delta_off,                        \
        __global const int *wl, int heads_q, int heads_kv, int total_q, int total_k,            \
        float scale_log2, float scale, float softcap, int causal, int window_left,              \
        int window_right, __global const int *flag

/* The keys [x, y] row i (of lq rows, lk keys) sees; (1, 0) when its lse is
 * not finite (a row that saw nothing in the forward). */
inline int2 mma_row_range(__global const int *q_pos, int t, int i, int lq, int lk, float lse,
                          int causal, int window_left, int window_right)
{
    if (!isfinite(lse))
        return (int2)(1, 0);
    const long pos = q_pos ? (long)q_pos[t] : (long)i + lk - lq;
    long a = 0, b = (long)lk - 1;
    if (window_left >= 0)
        a = max(a, pos - window_left);
    if (causal)
        b = min(b, pos);
    if (window_right >= 0)
        b = min(b, pos + window_right);
    return (int2)((int)min(a, (long)lk), (int)max(b, -1L));
}

/* P and dS (scale and softcap's derivative in) of one score s and its dp.
 * Whether there is a softcap is a build option (BWD_SOFTCAP, set by the host
 * when softcap > 0): as a branch on the argument, NVIDIA's compiler kept one
 * branch per element and the elements' exponentials ran one after another
 * (on an H200 the dk/dv kernel at D 128 spent 1.9 of its 4.4 ms there). */
inline float2 mma_p_ds(float s, float dp, float lse2, float dl, bool vis, float scale_log2,
                       float scale, float softcap)
{
#ifdef BWD_SOFTCAP
    const float th = tanh(s * scale / softcap);
    const float p = cv_ex2(softcap * th * M_LOG2E_F - lse2), deriv = 1.0f - th * th;
    return vis ? (float2)(p, p * (dp - dl) * deriv * scale) : (float2)(0.0f);
#else
    const float p = cv_ex2(fma(s, scale_log2, -lse2));
    return vis ? (float2)(p, p * (dp - dl) * scale) : (float2)(0.0f);
#endif
}

/* P^T (or P) and dS^T (dS) of accumulator n8 tile n into the A fragments
 * pa, da of k16 step n / 2 (rows g and g + 8; k = the tile's columns). */
#define PACK_A(fr, n, lo_, hi_)                                                                \
    do {                                                                                       \
        if (((n) & 1) == 0) {                                                                  \
            fr[(n) >> 1].x = (lo_);                                                            \
            fr[(n) >> 1].y = (hi_);                                                            \
        } else {                                                                               \
            fr[(n) >> 1].z = (lo_);                                                            \
            fr[(n) >> 1].w = (hi_);                                                            \
        }                                                                                      \
    } while (0)

/* A gradient row pair (columns c, c + 1) in the output dtype. */
inline void mma_store2(__global uchar *base, size_t el, float a, float b)
{
#ifdef GRAD_F32
    vstore2((float2)(a, b), 0, (__global float *)base + el);
#else
    *(__global uint *)(base + el * 2) = pack2(a, b);
#endif
}

/* Stages query block `it` (head kvh * group + it / n_rb, rows r_begin + (it %
 * n_rb) * BM_KV ..) of the dk/dv kernel into buffer `buf`: Q and dO rows by
 * cp.async (committed by the caller), the rows' visible keys, lse and delta
 * by the first BM_KV work-items. */
#define STAGE_BLOCK(it, buf)                                                                   \
    do {                                                                                       \
        const int h_ = kvh * group + (it) / n_rb, r0_ = r_begin + ((it) % n_rb) * BM_KV;        \
        const int rows_ = min(BM_KV, lq - r0_);                                                \
        __local ushort *qs_ = stages + (buf) * 2 * BM_KV * SROW;                               \
        STAGE(qs_, BM_KV, qb, ((long)q0 + r0_ + rr_) * q_stride + (long)h_ * HEAD_DIM, rows_);  \
        STAGE(qs_ + BM_KV * SROW, BM_KV, db,                                                   \
              ((long)q0 + r0_ + rr_) * do_stride + (long)h_ * HEAD_DIM, rows_);                 \
        if (lid < BM_KV) {                                                                     \
            const int t_ = q0 + r0_ + lid;                                                     \
            const float l_ = lid < rows_ ? lse[(size_t)h_ * total_q + t_] : -INFINITY;         \
            const int2 rg_ = lid < rows_ ? mma_row_range(q_pos, t_, r0_ + lid, lq, lk, l_,     \
                                                         causal, window_left, window_right)    \
                                         : (int2)(1, 0);                                       \
            lo_s[buf][lid] = rg_.x;                                                            \
            hi_s[buf][lid] = rg_.y;                                                            \
            lse2_s[buf][lid] = isfinite(l_) ? l_ * M_LOG2E_F : 0.0f;                           \
            dl_s[buf][lid] = lid < rows_ ? delta[(size_t)h_ * total_q + t_] : 0.0f;            \
        }                                                                                      \
    } while (0)

/* The opening of every kernel here: nothing to do with an invalid flag; the
 * work item (sequence and first key or query row of the tile) from the work
 * list, past its end nothing; the sequence's bounds and the tensors'
 * addresses. dk/dv: one work-group per (key tile, KV head kvh), nvalid keys
 * from kb; dq: per (query tile, query head h), rows rows from row0. */
#define BWD_PROLOGUE(HEADS, HVAR, FIRST)                                                       \
    if (flag && *flag)                                                                         \
        return;                                                                                \
    const int lid = get_local_id(0), warp = lid >> 5, lane = lid & 31;                         \
    const int g = lane >> 2, t4 = lane & 3;                                                    \
    const long grp = get_group_id(0);                                                          \
    const int item = (int)(grp / (HEADS)), HVAR = (int)(grp % (HEADS));                        \
    if (item >= wl[0])                                                                         \
        return;                                                                                \
    const int seq = wl[2 + 2 * item], FIRST = wl[3 + 2 * item];                                \
    __global const int *cu_q = CV_CPTR(int, cu_q_base, cu_q_off);                              \
    __global const int *cu_k = CV_CPTR(int, cu_k_base, cu_k_off);                              \
    __global const int *q_pos = q_pos_base ? CV_CPTR(int, q_pos_base, q_pos_off) : 0;          \
    __global const float *lse = CV_CPTR(float, lse_base, lse_off);                             \
    __global const float *delta = CV_CPTR(float, delta_base, delta_off);                       \
    const int q0 = clamp(cu_q[seq], 0, total_q), q1 = clamp(cu_q[seq + 1], q0, total_q);       \
    const int k0 = clamp(cu_k[seq], 0, total_k), k1 = clamp(cu_k[seq + 1], k0, total_k);       \
    const int lq = q1 - q0, lk = k1 - k0;                                                      \
    __global const uchar *qb = q + q_off, *kb_ = k + k_off, *vb = v + v_off;                   \
    __global const uchar *db = dout + do_off
#define BWD_DKDV_PROLOGUE                                                                      \
    BWD_PROLOGUE(heads_kv, kvh, kb);                                                           \
    const int nvalid = min(BN_KV, lk - kb);                                                    \
    if (nvalid <= 0)                                                                           \
        return;                                                                                \
    const int group = heads_q / heads_kv
#define BWD_DQ_PROLOGUE                                                                        \
    BWD_PROLOGUE(heads_q, h, row0);                                                            \
    const int rows = min(BM_Q, lq - row0);                                                     \
    if (rows <= 0)                                                                             \
        return;                                                                                \
    const int kvh = h / (heads_q / heads_kv)
/* dk/dv: the query rows that can see keys kb .. kb + nvalid - 1 (all of them
 * with q_pos), [r_begin, r_end) in n_rb blocks of BM_KV, for each query head
 * of the group: n_it blocks. */
#define BWD_ROW_SPAN                                                                           \
    int r_begin = 0, r_end = lq;                                                               \
    if (!q_pos) {                                                                              \
        const long dd = (long)lk - lq;                                                         \
        if (causal || window_right >= 0) {                                                     \
            const long right = causal ? (window_right >= 0 ? min(0, window_right) : 0)         \
                                      : (long)window_right;                                    \
            r_begin = (int)clamp((long)kb - dd - right, 0L, (long)lq);                         \
        }                                                                                      \
        if (window_left >= 0)                                                                  \
            r_end = (int)clamp((long)kb + nvalid - dd + window_left, 0L, (long)lq);            \
    }                                                                                          \
    const int n_rb = r_end > r_begin ? (r_end - r_begin + BM_KV - 1) / BM_KV : 0;              \
    const int n_it = group * n_rb
/* dq: this lane's rows warp * 16 + g and + 8 (index i): visible keys
 * [lo[i], hi[i]], lse in base 2, delta. */
#define BWD_DQ_ROWS                                                                            \
    int lo[2], hi[2];                                                                          \
    float lse2[2], dl[2];                                                                      \
    UNROLL                                                                                     \
    for (int i = 0; i < 2; i++) {                                                              \
        const int r = warp * 16 + g + 8 * i, t = q0 + row0 + r;                                \
        const float l = r < rows ? lse[(size_t)h * total_q + t] : -INFINITY;                   \
        const int2 rg = r < rows ? mma_row_range(q_pos, t, row0 + r, lq, lk, l, causal,        \
                                                 window_left, window_right)                    \
                                 : (int2)(1, 0);                                               \
        lo[i] = rg.x;                                                                          \
        hi[i] = rg.y;                                                                          \
        lse2[i] = isfinite(l) ? l * M_LOG2E_F : 0.0f;                                          \
        dl[i] = r < rows ? BWD_DQ_DL(i, t) : 0.0f;                                             \
    }

#ifndef CV_WGMMA
#define BWD_DQ_DL(i, t) delta[(size_t)h * total_q + (t)]

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1)))
void attn_bwd_dkdv_mma(BWD_MMA_ARGS, __global uchar *dk, ulong dk_off, long dk_stride,
                       __global uchar *dv, ulong dv_off, long dv_stride)
{
    __local ushort smem[KV_ROWS * SROW] __attribute__((aligned(16)));
    __local float lse2_s[NSTAGE][BM_KV], dl_s[NSTAGE][BM_KV];
    __local int lo_s[NSTAGE][BM_KV], hi_s[NSTAGE][BM_KV];
    EMU_DECL
#ifndef CV_NV_PTX
    __local uint *emu = emu_scratch;
#endif
    BWD_DKDV_PROLOGUE;
    __local ushort *Vs = smem, *stages = smem + BN_KV * SROW;

    /* K through the stages into registers; V stays. */
    STAGE(stages, BN_KV, kb_, ((long)k0 + kb + rr_) * k_stride + (long)kvh * HEAD_DIM, nvalid);
    STAGE(Vs, BN_KV, vb, ((long)k0 + kb + rr_) * v_stride + (long)kvh * HEAD_DIM, nvalid);
    cp_async_commit();
    cp_async_wait_all();
    barrier(CLK_LOCAL_MEM_FENCE);
    uint4 kf[KSTEPS];
    UNROLL
    for (int ks = 0; ks < KSTEPS; ks++)
        kf[ks] = ldsm_x4(stages + (warp * 16 + (lane & 15)) * SROW + ks * 16 + (lane >> 4) * 8);

    BWD_ROW_SPAN;

    float4 dka[NT_D], dva[NT_D];
    UNROLL
    for (int n = 0; n < NT_D; n++)
        dka[n] = dva[n] = (float4)(0.0f);
    /* This lane's keys (rows of S^T): kb + warp * 16 + g and + 8. */
    const int key0 = kb + warp * 16 + g;

#if NSTAGE == 2
    barrier(CLK_LOCAL_MEM_FENCE); /* every warp holds its K fragments */
    if (n_it > 0) {
        STAGE_BLOCK(0, 0);
        cp_async_commit();
    }
#endif
    for (int it = 0; it < n_it; it++) {
#if NSTAGE == 2
        const int buf = it & 1;
        cp_async_wait_all();
        barrier(CLK_LOCAL_MEM_FENCE); /* block it staged; block it - 1 read by everyone */
        if (it + 1 < n_it) {
            STAGE_BLOCK(it + 1, buf ^ 1);
            cp_async_commit();
        }
#else
        const int buf = 0;
        barrier(CLK_LOCAL_MEM_FENCE); /* K fragments held; block it - 1 read by everyone */
        STAGE_BLOCK(it, 0);
        cp_async_commit();
        cp_async_wait_all();
        barrier(CLK_LOCAL_MEM_FENCE);
#endif
        __local ushort *Qs = stages + buf * 2 * BM_KV * SROW, *Ds = Qs + BM_KV * SROW;

        /* S^T = K Q^T and dP^T = V dO^T: 16 keys x BM_KV queries per warp. */
        float4 st[BM_KV / 8], dpt[BM_KV / 8];
        UNROLL
        for (int n = 0; n < BM_KV / 8; n++)
            st[n] = dpt[n] = (float4)(0.0f);
        UNROLL
        for (int ks = 0; ks < KSTEPS; ks++) {
            const uint4 va =
                ldsm_x4(Vs + (warp * 16 + (lane & 15)) * SROW + ks * 16 + (lane >> 4) * 8);
            UNROLL
            for (int np = 0; np < BM_KV / 16; np++) {
                const int off = (np * 16 + (lane & 7) + ((lane >> 4) << 3)) * SROW + ks * 16 +
                                ((lane >> 3) & 1) * 8;
                const uint4 bq = ldsm_x4(Qs + off), bd = ldsm_x4(Ds + off);
                st[2 * np] = mma16816(kf[ks], bq.x, bq.y, st[2 * np]);
                st[2 * np + 1] = mma16816(kf[ks], bq.z, bq.w, st[2 * np + 1]);
                dpt[2 * np] = mma16816(va, bd.x, bd.y, dpt[2 * np]);
                dpt[2 * np + 1] = mma16816(va, bd.z, bd.w, dpt[2 * np + 1]);
            }
        }

        /* P^T and dS^T as A fragments (k = the block's queries). */
        uint4 pa[BM_KV / 16], da[BM_KV / 16];
        UNROLL
        for (int n = 0; n < BM_KV / 8; n++) {
            float x[4] = {st[n].x, st[n].y, st[n].z, st[n].w};
            float y[4] = {dpt[n].x, dpt[n].y, dpt[n].z, dpt[n].w};
            float pp[4], dd[4];
            UNROLL
            for (int e = 0; e < 4; e++) {
                const int col = n * 8 + 2 * t4 + (e & 1), key = key0 + 8 * (e >> 1);
                const bool vis = key >= lo_s[buf][col] && key <= hi_s[buf][col];
                const float2 r = mma_p_ds(x[e], y[e], lse2_s[buf][col], dl_s[buf][col], vis,
                                          scale_log2, scale, softcap);
                pp[e] = r.x;
                dd[e] = r.y;
            }
            PACK_A(pa, n, pack2(pp[0], pp[1]), pack2(pp[2], pp[3]));
            PACK_A(da, n, pack2(dd[0], dd[1]), pack2(dd[2], dd[3]));
        }

        /* dV += P^T dO, dK += dS^T Q (B: the staged rows, transposed). */
        UNROLL
        for (int kk = 0; kk < BM_KV / 16; kk++) {
            UNROLL
            for (int dp = 0; dp < NT_D / 2; dp++) {
                const int off = (kk * 16 + (lane & 15)) * SROW + dp * 16 + (lane >> 4) * 8;
                const uint4 bd = ldsm_x4_trans(Ds + off), bq = ldsm_x4_trans(Qs + off);
                dva[2 * dp] = mma16816(pa[kk], bd.x, bd.y, dva[2 * dp]);
                dva[2 * dp + 1] = mma16816(pa[kk], bd.z, bd.w, dva[2 * dp + 1]);
                dka[2 * dp] = mma16816(da[kk], bq.x, bq.y, dka[2 * dp]);
                dka[2 * dp + 1] = mma16816(da[kk], bq.z, bq.w, dka[2 * dp + 1]);
            }
        }
    }

    __global uchar *dkb = dk + dk_off, *dvb = dv + dv_off;
    UNROLL
    for (int i = 0; i < 2; i++) {
        const int j = warp * 16 + g + 8 * i;
        if (j >= nvalid)
            continue;
        const size_t tok = (size_t)(k0 + kb + j);
        UNROLL
        for (int n = 0; n < NT_D; n++) {
            const size_t c = (size_t)kvh * HEAD_DIM + n * 8 + 2 * t4;
            mma_store2(dkb, tok * dk_stride + c, i ? dka[n].z : dka[n].x, i ? dka[n].w : dka[n].y);
            mma_store2(dvb, tok * dv_stride + c, i ? dva[n].z : dva[n].x, i ? dva[n].w : dva[n].y);
        }
    }
}

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1)))
void attn_bwd_dq_mma(BWD_MMA_ARGS, __global uchar *dq, ulong dq_off, long dq_stride)
{
    /* Q and dO [BM_Q] first (into registers), then K and V [BN_Q], two stages. */
    __local ushort smem[Q_ROWS * SROW] __attribute__((aligned(16)));
    __local int range[2];
    EMU_DECL
#ifndef CV_NV_PTX
    __local uint *emu = emu_scratch;
#endif
    BWD_DQ_PROLOGUE;

    STAGE(smem, BM_Q, qb, ((long)q0 + row0 + rr_) * q_stride + (long)h * HEAD_DIM, rows);
    STAGE(smem + BM_Q * SROW, BM_Q, db, ((long)q0 + row0 + rr_) * do_stride + (long)h * HEAD_DIM,
          rows);
    cp_async_commit();
    BWD_DQ_ROWS;
    if (lid == 0) {
        range[0] = INT_MAX;
        range[1] = -1;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (t4 == 0) {
        UNROLL
        for (int i = 0; i < 2; i++) {
            if (lo[i] <= hi[i]) {
                atomic_min(&range[0], lo[i]);
                atomic_max(&range[1], hi[i]);
            }
        }
    }
    cp_async_wait_all();
    barrier(CLK_LOCAL_MEM_FENCE);
    const int kmin = range[0], kmax = range[1];
    uint4 qf[KSTEPS], df[KSTEPS];
    UNROLL
    for (int ks = 0; ks < KSTEPS; ks++) {
        const int off = (warp * 16 + (lane & 15)) * SROW + ks * 16 + (lane >> 4) * 8;
        qf[ks] = ldsm_x4(smem + off);
        df[ks] = ldsm_x4(smem + BM_Q * SROW + off);
    }

    float4 dqa[NT_D];
    UNROLL
    for (int n = 0; n < NT_D; n++)
        dqa[n] = (float4)(0.0f);
    const int nblocks = kmin <= kmax ? (kmax - kmin) / BN_Q + 1 : 0;
    barrier(CLK_LOCAL_MEM_FENCE); /* every warp holds its Q and dO fragments */
    if (nblocks > 0) {
        const int nv0 = min(BN_Q, kmax + 1 - kmin);
        STAGE(smem, BN_Q, kb_, ((long)k0 + kmin + rr_) * k_stride + (long)kvh * HEAD_DIM, nv0);
        STAGE(smem + BN_Q * SROW, BN_Q, vb,
              ((long)k0 + kmin + rr_) * v_stride + (long)kvh * HEAD_DIM, nv0);
        cp_async_commit();
    }
    for (int blk = 0; blk < nblocks; blk++) {
        const int kb = kmin + blk * BN_Q;
        __local ushort *Ks = smem + (blk & 1) * 2 * BN_Q * SROW, *Vs = Ks + BN_Q * SROW;
        cp_async_wait_all();
        barrier(CLK_LOCAL_MEM_FENCE); /* tile blk staged; tile blk - 1 read by everyone */
        if (blk + 1 < nblocks) { /* the next tile loads while this one computes */
            const int kn = kb + BN_Q, nvn = min(BN_Q, kmax + 1 - kn);
            __local ushort *Kn = smem + ((blk + 1) & 1) * 2 * BN_Q * SROW;
            STAGE(Kn, BN_Q, kb_, ((long)k0 + kn + rr_) * k_stride + (long)kvh * HEAD_DIM, nvn);
            STAGE(Kn + BN_Q * SROW, BN_Q, vb,
                  ((long)k0 + kn + rr_) * v_stride + (long)kvh * HEAD_DIM, nvn);
            cp_async_commit();
        }
        float4 s[BN_Q / 8], dp[BN_Q / 8];
        UNROLL
        for (int n = 0; n < BN_Q / 8; n++)
            s[n] = dp[n] = (float4)(0.0f);
        UNROLL
        for (int ks = 0; ks < KSTEPS; ks++) {
            UNROLL
            for (int np = 0; np < BN_Q / 16; np++) {
                const int off = (np * 16 + (lane & 7) + ((lane >> 4) << 3)) * SROW + ks * 16 +
                                ((lane >> 3) & 1) * 8;
                const uint4 bk = ldsm_x4(Ks + off), bv = ldsm_x4(Vs + off);
                s[2 * np] = mma16816(qf[ks], bk.x, bk.y, s[2 * np]);
                s[2 * np + 1] = mma16816(qf[ks], bk.z, bk.w, s[2 * np + 1]);
                dp[2 * np] = mma16816(df[ks], bv.x, bv.y, dp[2 * np]);
                dp[2 * np + 1] = mma16816(df[ks], bv.z, bv.w, dp[2 * np + 1]);
            }
        }
        uint4 da[BN_Q / 16];
        UNROLL
        for (int n = 0; n < BN_Q / 8; n++) {
            float x[4] = {s[n].x, s[n].y, s[n].z, s[n].w};
            float y[4] = {dp[n].x, dp[n].y, dp[n].z, dp[n].w};
            float dd[4];
            UNROLL
            for (int e = 0; e < 4; e++) {
                const int key = kb + n * 8 + 2 * t4 + (e & 1), i = e >> 1;
                const bool vis = key >= lo[i] && key <= hi[i];
                dd[e] = mma_p_ds(x[e], y[e], lse2[i], dl[i], vis, scale_log2, scale, softcap).y;
            }
            PACK_A(da, n, pack2(dd[0], dd[1]), pack2(dd[2], dd[3]));
        }
        /* dQ += dS K (B: the K rows, transposed). */
        UNROLL
        for (int kk = 0; kk < BN_Q / 16; kk++) {
            UNROLL
            for (int dp2 = 0; dp2 < NT_D / 2; dp2++) {
                const uint4 b =
                    ldsm_x4_trans(Ks + (kk * 16 + (lane & 15)) * SROW + dp2 * 16 + (lane >> 4) * 8);
                dqa[2 * dp2] = mma16816(da[kk], b.x, b.y, dqa[2 * dp2]);
                dqa[2 * dp2 + 1] = mma16816(da[kk], b.z, b.w, dqa[2 * dp2 + 1]);
            }
        }
    }

    __global uchar *dqb = dq + dq_off;
    UNROLL
    for (int i = 0; i < 2; i++) {
        const int r = warp * 16 + g + 8 * i;
        if (r >= rows)
            continue;
        const size_t tok = (size_t)(q0 + row0 + r);
        UNROLL
        for (int n = 0; n < NT_D; n++)
            mma_store2(dqb, tok * dq_stride + (size_t)h * HEAD_DIM + n * 8 + 2 * t4,
                       i ? dqa[n].z : dqa[n].x, i ? dqa[n].w : dqa[n].y);
    }
}

#else /* CV_WGMMA */
// clvarlen-include: attention-bwd-wgmma.clh
#endif /* CV_WGMMA */
