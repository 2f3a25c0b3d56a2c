/* The gated delta rule's chunked form (SPEC 3) on devices without a
 * hand-written tensor-core path: the chunk-parallel matrix products go to
 * CLBlast's strided batched SGEMM (lib/gated-delta/gated-delta-blas.c), these
 * kernels do the rest. Per head group, in order:
 *   gdn_blas_pack   per (chunk slot, head): normalised, gated rows -> KN, QS,
 *                   QE = e^G QS, KB = beta e^G KN, VE = beta v, G and beta
 *   SGEMM           KK = KN KN^T, QK = QS KN^T
 *   gdn_blas_solve  per (chunk slot, head): T = (I + A)^-1 with
 *                   A = strictly-lower(beta_i KK e^(G_i - G_m)) in place of KK,
 *                   P = lower(QK e^(G_i - G_m)) in place of QK
 *   SGEMM           W = T KB, U = T VE
 *   gdn_blas_scan   per (sequence, head, V tile), over the sequence's chunks in
 *                   order: H = S (the state at the chunk's start), VN = U - W S,
 *                   S <- e^(G_last) S + KN^T (e^(G_last - G) VN); the state
 *                   from and back to its pool slot
 *   SGEMM           O = QE H, O += P VN
 *   gdn_blas_out    per (chunk slot, head): O's rows to the output
 * All f32 (activations converted once in the pack). The scratch layout is
 * GDN_BL_* in cv-shared.h. Rows past a sequence's end are zero with g = 0
 * and beta = 0, so they change nothing; slots that hold no chunk (gaps,
 * sequences the token kernel runs, a failed device check) are zeroed by the
 * pack so that every product reads defined memory.
 *
 * -D: CV_K, CV_V, CV_DT, CV_ST_DT, CV_BVT (the scan's V tile).
 */

#ifndef CV_BVT
#define CV_BVT 16
#endif

#define BL_WG 64 /* work-items per group: one per chunk row */
#define BL_C GDN_CHUNK
#if GDN_CHUNK != 64
#error "one work-item per chunk row"
#endif
#define BL_NVT ((CV_V + CV_BVT - 1) / CV_BVT)
#define BL_AP (BL_C + 1) /* padded 64 x 64 rows */

/* Item b of array X in the scratch (nb items per array). */
#define BL_ITEM(scr, X, nb, b, size) \
    ((scr) + (nb) * (long)GDN_BL_##X(CV_K, CV_V) + (b) * (long)(size))

__kernel __attribute__((reqd_work_group_size(BL_WG, 1, 1))) void
gdn_blas_pack(GDN_ARGS, __global float *scr, long n_slots, int h0, int hcount)
{
    __local float g_l[BL_C], eG_l[BL_C], beta_l[BL_C], rk_l[BL_C], rq_l[BL_C];
    /* 1.0f through constant memory, before any control flow: log1p (the
     * softplus) runs in a branch, see CV_CONST_ONE */
    const float one = CV_CONST_ONE(flags);
    const int lid = get_local_id(0);
    const long it = get_group_id(0); /* the item: slot * hcount + head in the group */
    const long x = it / hcount, nb = n_slots * hcount;
    const int h = h0 + (int)(it % hcount);
    if (x >= n_slots)
        return;
    long n, c0;
    int nr;
    const int ok = gdn_chunk_of_slot(cu, cu_off, fixed_len, total, flags, n_seqs, chunk_min,
                                     check, x, &n, &c0, &nr);
    if (!ok)
        nr = 0;
    const int hq = h / group, l2 = (flags & GDN_L2NORM) != 0;
    __global const uchar *kb = k + k_off, *qb = q + q_off, *vb = v + v_off;

    /* row lid's gates and norms */
    {
        float gv = 0.0f, be = 0.0f, nk = 0.0f, nq = 0.0f;
        if (lid < nr) {
            const long t = c0 + lid;
            const float A = exp(CV_CPTR(float, A_log, A_log_off)[h]);
            const float x_a = LOAD_ACT(a + a_off, t * a_stride + h) +
                              gdn_bias(dt_bias, dt_bias_off, h, flags);
            gv = -A * gdn_softplus(x_a, sp_beta, sp_threshold);
            be = one / (one + exp(-LOAD_ACT(b + b_off, t * b_stride + h)));
            for (int kk = 0; kk < CV_K; kk++) {
                const float kv = LOAD_ACT(kb, t * k_stride + (long)hq * CV_K + kk);
                const float qv = LOAD_ACT(qb, t * q_stride + (long)hq * CV_K + kk);
                nk += kv * kv;
                nq += qv * qv;
            }
        }
        g_l[lid] = gv;
        beta_l[lid] = be;
        rk_l[lid] = l2 ? rsqrt(nk + 1e-6f) : 1.0f;
        rq_l[lid] = (l2 ? rsqrt(nq + 1e-6f) : 1.0f) * scale;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    float G = 0.0f; /* the running sum of g through row lid */
    for (int m = 0; m <= lid; m++)
        G += g_l[m];
    eG_l[lid] = exp(G);
    __global float *grow = BL_ITEM(scr, GR, nb, it, 2 * BL_C);
    grow[lid] = G;
    grow[BL_C + lid] = beta_l[lid];
    barrier(CLK_LOCAL_MEM_FENCE);

    __global float *kn = BL_ITEM(scr, KN, nb, it, BL_C * CV_K);
    __global float *qs = BL_ITEM(scr, QS, nb, it, BL_C * CV_K);
    __global float *qe = BL_ITEM(scr, QE, nb, it, BL_C * CV_K);
    __global float *kbe = BL_ITEM(scr, KB, nb, it, BL_C * CV_K);
    for (int e = lid; e < BL_C * CV_K; e += BL_WG) {
        const int r = e / CV_K, kk = e % CV_K;
        float kv = 0.0f, qv = 0.0f;
        if (r < nr) {
            const long t = c0 + r;
            kv = LOAD_ACT(kb, t * k_stride + (long)hq * CV_K + kk) * rk_l[r];
            qv = LOAD_ACT(qb, t * q_stride + (long)hq * CV_K + kk) * rq_l[r];
        }
        kn[e] = kv;
        qs[e] = qv;
        qe[e] = qv * eG_l[r];
        kbe[e] = kv * beta_l[r] * eG_l[r];
    }
    __global float *ve = BL_ITEM(scr, VE, nb, it, BL_C * CV_V);
    for (int e = lid; e < BL_C * CV_V; e += BL_WG) {
        const int r = e / CV_V, vv = e % CV_V;
        ve[e] = r < nr ? beta_l[r] * LOAD_ACT(vb, (c0 + r) * v_stride + (long)h * CV_V + vv)
                       : 0.0f;
    }
    if (!ok) {
        /* no scan writes this slot's H and VN: zeros for the output products */
        __global float *hs = BL_ITEM(scr, H, nb, it, CV_K * CV_V);
        __global float *vn = BL_ITEM(scr, VN, nb, it, BL_C * CV_V);
        for (int e = lid; e < CV_K * CV_V; e += BL_WG)
            hs[e] = 0.0f;
        for (int e = lid; e < BL_C * CV_V; e += BL_WG)
            vn[e] = 0.0f;
    }
}

/* T = (I + A)^-1 by forward substitution, one column per work-item:
 * T[i][m] = delta_im - sum_{m <= j < i} A[i][j] T[j][m]; T is unit lower
 * triangular. A = strictly-lower(beta_i KK[i][j] e^(G_i - G_j)) first
 * replaces KK in global memory (row i is read by every work-item at step i),
 * T builds in local memory and then replaces A. P[i][m] = QK[i][m]
 * e^(G_i - G_m) for m <= i, in place. Local memory: T, G and beta, 17 KiB. */
__kernel __attribute__((reqd_work_group_size(BL_WG, 1, 1))) void
gdn_blas_solve(__global float *scr, long n_slots, int hcount)
{
    __local float T_l[BL_C * BL_AP];
    __local float G_l[BL_C], beta_l[BL_C];
    const int lid = get_local_id(0);
    const long it = get_group_id(0), nb = n_slots * hcount;
    if (it >= nb)
        return;
    __global float *kk = BL_ITEM(scr, KK, nb, it, BL_C * BL_C);
    __global float *qk = BL_ITEM(scr, QK, nb, it, BL_C * BL_C);
    __global const float *gr = BL_ITEM(scr, GR, nb, it, 2 * BL_C);
    G_l[lid] = gr[lid];
    beta_l[lid] = gr[BL_C + lid];
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int e = lid; e < BL_C * BL_C; e += BL_WG) {
        const int i = e / BL_C, m = e % BL_C;
        const float decay = m <= i ? exp(G_l[i] - G_l[m]) : 0.0f;
        kk[e] = m < i ? beta_l[i] * kk[e] * decay : 0.0f;
        qk[e] = qk[e] * decay;
    }
    barrier(CLK_GLOBAL_MEM_FENCE);
    const int m = lid;
    for (int i = 0; i < BL_C; i++) {
        float s = i == m ? 1.0f : 0.0f;
        for (int j = m; j < i; j++)
            s -= kk[i * BL_C + j] * T_l[j * BL_AP + m];
        T_l[i * BL_AP + m] = i < m ? 0.0f : s;
    }
    barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);
    for (int e = lid; e < BL_C * BL_C; e += BL_WG)
        kk[e] = T_l[(e / BL_C) * BL_AP + e % BL_C];
}

/* One work-group per (sequence, head in the group, V tile): the K x BVT state
 * slice in local memory across the sequence's chunks. Work-item (rg, j) =
 * (lid / 16, lid % 16) owns column j: rows rg + 4 r of VN, state rows
 * rg + 4 r; W and KN pass through local memory in tiles (coalesced loads).
 * Local memory at K = 128: 24 KiB. */
#if CV_BVT != 16
#error "the scan's work-items are 4 row groups x 16 columns"
#endif
#define BL_RG 4                       /* row groups */
#define BL_VR (BL_C / BL_RG)          /* VN rows per work-item */
#define BL_SR ((CV_K + BL_RG - 1) / BL_RG) /* state rows per work-item */
#define BL_WT 16                      /* W columns per tile */
#define BL_KT 8                       /* KN rows per tile */
#define BL_TILE (BL_C * (BL_WT + 1) > BL_KT * CV_K ? BL_C * (BL_WT + 1) : BL_KT * CV_K)

__kernel __attribute__((reqd_work_group_size(BL_WG, 1, 1))) void
gdn_blas_scan(GDN_ARGS, __global float *scr, long n_slots, int h0, int hcount)
{
    __local float S_l[CV_K * CV_BVT];
    __local float VN_l[BL_C * CV_BVT];
    __local float w_l[BL_C]; /* e^(G_last - G_i) */
    __local float X_l[BL_TILE];
    const int lid = get_local_id(0), j = lid % CV_BVT, rg = lid / CV_BVT;
    const long grp = get_group_id(0);
    const int vt = (int)(grp % BL_NVT);
    const long rest = grp / BL_NVT;
    const int hh = (int)(rest % hcount), h = h0 + hh;
    const long n = rest / hcount, nb = n_slots * hcount;
    long bos, eos;
    if (!gdn_chunked_seq(cu, cu_off, fixed_len, total, flags, n, n_seqs, chunk_min, check, &bos,
                         &eos))
        return;
    const int v0 = vt * CV_BVT, vj = v0 + j;
    const long head_off = (long)h * CV_K * CV_V;
    const int skv = (flags & GDN_STATE_KV) != 0;
    const long slot = (flags & GDN_HAS_POOL)
                          ? gdn_slot(sidx, sidx_off, flags & GDN_HAS_SIDX, n, slots)
                          : -1;
    for (int e = lid; e < CV_K * CV_BVT; e += BL_WG) {
        const int kk = e / CV_BVT, vv = v0 + e % CV_BVT;
        S_l[e] = (slot >= 0 && vv < CV_V)
                     ? LOAD_ST(pool + pool_off, slot * slot_pitch + head_off +
                                                    gdn_state_at(skv, kk, vv))
                     : 0.0f;
    }
    const long base = bos / BL_C + n; /* the sequence's first chunk slot */
    for (long c0 = bos, ci = 0; c0 < eos; c0 += BL_C, ci++) {
        const long bi = (base + ci) * hcount + hh;
        __global float *hs = BL_ITEM(scr, H, nb, bi, CV_K * CV_V);
        __global float *vn = BL_ITEM(scr, VN, nb, bi, BL_C * CV_V);
        __global const float *w = BL_ITEM(scr, W, nb, bi, BL_C * CV_K);
        __global const float *u = BL_ITEM(scr, U, nb, bi, BL_C * CV_V);
        __global const float *kn = BL_ITEM(scr, KN, nb, bi, BL_C * CV_K);
        __global const float *gr = BL_ITEM(scr, GR, nb, bi, 2 * BL_C);
        barrier(CLK_LOCAL_MEM_FENCE); /* the state update before (or the load) is done */
        /* padded rows have g = 0, so G at row 63 is G_last */
        w_l[lid] = exp(gr[BL_C - 1] - gr[lid]);
        if (vj < CV_V)
            for (int kk = rg; kk < CV_K; kk += BL_RG)
                hs[kk * CV_V + vj] = S_l[kk * CV_BVT + j];

        /* VN = U - W S, W through local memory BL_WT columns at a time */
        float acc[BL_VR];
        for (int r = 0; r < BL_VR; r++)
            acc[r] = 0.0f;
        for (int k0 = 0; k0 < CV_K; k0 += BL_WT) {
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int e = lid; e < BL_C * BL_WT; e += BL_WG) {
                const int row = e / BL_WT, col = e % BL_WT;
                X_l[row * (BL_WT + 1) + col] = k0 + col < CV_K ? w[row * CV_K + k0 + col] : 0.0f;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int kk = 0; kk < BL_WT && k0 + kk < CV_K; kk++) {
                const float sv = S_l[(k0 + kk) * CV_BVT + j];
                for (int r = 0; r < BL_VR; r++)
                    acc[r] += X_l[(rg + BL_RG * r) * (BL_WT + 1) + kk] * sv;
            }
        }
        for (int r = 0; r < BL_VR; r++) {
            const int i = rg + BL_RG * r;
            const float x = (vj < CV_V ? u[i * CV_V + vj] : 0.0f) - acc[r];
            VN_l[i * CV_BVT + j] = x;
            if (vj < CV_V)
                vn[i * CV_V + vj] = x;
        }

        /* S <- e^(G_last) S + KN^T (w VN), KN through local memory BL_KT rows at a time */
        float sa[BL_SR];
        for (int r = 0; r < BL_SR; r++)
            sa[r] = 0.0f;
        for (int i0 = 0; i0 < BL_C; i0 += BL_KT) {
            barrier(CLK_LOCAL_MEM_FENCE); /* VN_l and w_l written; X_l's readers done */
            for (int e = lid; e < BL_KT * CV_K; e += BL_WG)
                X_l[e] = kn[(long)i0 * CV_K + e];
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int i = 0; i < BL_KT; i++) {
                const float d = w_l[i0 + i] * VN_l[(i0 + i) * CV_BVT + j];
                for (int r = 0; r < BL_SR; r++) {
                    const int kk = rg + BL_RG * r;
                    if (kk < CV_K)
                        sa[r] += X_l[i * CV_K + kk] * d;
                }
            }
        }
        const float eGl = exp(gr[BL_C - 1]);
        for (int r = 0; r < BL_SR; r++) {
            const int kk = rg + BL_RG * r;
            if (kk < CV_K)
                S_l[kk * CV_BVT + j] = eGl * S_l[kk * CV_BVT + j] + sa[r];
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (slot >= 0 && (flags & GDN_WRITE_BACK)) {
        for (int e = lid; e < CV_K * CV_BVT; e += BL_WG) {
            const int kk = e / CV_BVT, vv = v0 + e % CV_BVT;
            if (vv < CV_V)
                STORE_ST(pool + pool_off, slot * slot_pitch + head_off + gdn_state_at(skv, kk, vv),
                         S_l[e]);
        }
    }
    GDN_END_BARRIER();
}

/* O's rows of the slot's chunk to the output. */
__kernel __attribute__((reqd_work_group_size(BL_WG, 1, 1))) void
gdn_blas_out(GDN_ARGS, __global float *scr, long n_slots, int h0, int hcount)
{
    const int lid = get_local_id(0);
    const long it = get_group_id(0);
    const long x = it / hcount, nb = n_slots * hcount;
    const int h = h0 + (int)(it % hcount);
    long n, c0;
    int nr;
    if (x >= n_slots || !gdn_chunk_of_slot(cu, cu_off, fixed_len, total, flags, n_seqs, chunk_min,
                                           check, x, &n, &c0, &nr))
        return;
    __global const float *ob = BL_ITEM(scr, O, nb, it, BL_C * CV_V);
    for (int e = lid; e < nr * CV_V; e += BL_WG) {
        const int r = e / CV_V, vv = e % CV_V;
        cv_store_f(o + o_off, (c0 + r) * o_stride + (long)h * CV_V + vv, ob[e], CV_DT);
    }
}
