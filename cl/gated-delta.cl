/* The gated delta rule (SPEC 3): token-by-token and chunked kernels.
 *
 * Both kernels take one work-group per (sequence, value head, V tile), on a
 * 1-D NDRange (group id -> tile fastest, then head, then sequence), and keep
 * that tile's K x VT state slice on chip for the whole sequence. The host
 * selects which kernel owns a sequence by length (chunk_min), so a sequence's
 * result never depends on the rest of the batch. All arithmetic is f32.
 *
 * Specialisation (-D from lib/gated-delta/gated-delta-cl.c, defaults for a standalone
 * compile): CV_K, CV_V head dims; CV_DT activations and CV_ST_DT states
 * (CV_DT_*). The state layout, the L2 norm and dt_bias's dtype are runtime
 * flags: uniform branches cost nothing measurable, and fewer variants keep
 * first-use compiles (seconds each on CPU devices) few.
 * Without CV_GDN_CHUNKED the program holds the token kernel (CV_WG
 * work-items, CV_VT columns, CV_TK work-items per column; CV_GDN_VEC4 float4
 * state moves, CV_GDN_NO_PREFETCH no next-token prefetch) and the index
 * check; with it, the chunked kernel (CV_CWG work-items: 64, 128 or 256,
 * CV_CVT columns, CV_KS key columns staged at a time). The helpers and the
 * argument list both share with cl/gated-delta-mma.cl are in the family
 * prelude, cl/gated.clh.
 */

#ifndef CV_WG
#define CV_WG 128
#endif
#ifndef CV_VT
#define CV_VT 16
#endif
#ifndef CV_TK
#define CV_TK 8
#endif
#ifndef CV_CWG
#define CV_CWG 256
#endif
#ifndef CV_CVT
#define CV_CVT 16
#endif
#ifndef CV_KS
#define CV_KS 16
#endif

#ifndef CV_GDN_CHUNKED

/* ------------------------------------------------------------------ checks */

/* Device checks of the indices (and of target-verify lengths); cu_seqlens
 * itself is checked by the shared cu_seqlens kernel. */
__kernel void gdn_check(__global const uchar *cu, ulong cu_off, long fixed_len, long n_seqs,
                        long total, __global const uchar *sidx, ulong sidx_off, long slots,
                        __global const uchar *cidx, ulong cidx_off, long cache_slots,
                        int cache_steps, int flags, __global int *check)
{
    long n = get_global_id(0);
    if (n >= n_seqs)
        return;
    if ((flags & GDN_HAS_POOL) && (flags & GDN_HAS_SIDX)) {
        long s = CV_CPTR(int, sidx, sidx_off)[n];
        if (s >= slots)
            cv_flag(check, CV_CHECK_INDEX);
    }
    if (flags & GDN_HAS_INTER) {
        long c = (flags & GDN_HAS_CIDX) ? (long)CV_CPTR(int, cidx, cidx_off)[n] : n;
        if (c >= cache_slots)
            cv_flag(check, CV_CHECK_INDEX);
        long bos, eos;
        gdn_bounds(cu, cu_off, fixed_len, total, flags, n, &bos, &eos);
        if (c >= 0 && eos - bos > cache_steps)
            cv_flag(check, CV_CHECK_CAPACITY);
    }
}

/* ------------------------------------------------------------------ token by token */

#define GDN_NVG (CV_WG / CV_TK)               /* column groups */
#define GDN_VPT (CV_VT / GDN_NVG)             /* columns per work-item */
#define GDN_KPT ((CV_K + CV_TK - 1) / CV_TK)  /* rows of K per work-item */
#define GDN_NVT ((CV_V + CV_VT - 1) / CV_VT)  /* V tiles */
#define GDN_RED (2 * CV_VT + 3)               /* reduced values per token */
#define GDN_TKP (CV_TK + 1)                   /* padded: the reduction reads rows */
#ifndef CV_GDN_NO_PREFETCH
#define GDN_PREFETCH 1 /* the next token's inputs load during the reduction */
#else
#define GDN_PREFETCH 0
#endif

/* Row i of work-item kl's rows of K. With CV_GDN_VEC4 (the host's default; it
 * applies to f32 states with K a multiple of 4 TK) a work-item holds runs of four
 * adjacent rows, kl's run of each span of 4 TK, so [V, K] states move as
 * float4 (a warp's load instruction carries 4x the bytes); otherwise rows
 * kl, kl + TK, ... The reductions sum over all rows, so the assignment
 * changes nothing else. */
#if defined(CV_GDN_VEC4) && CV_ST_DT == CV_DT_F32 && CV_K % (4 * CV_TK) == 0
#define GDN_VEC4 1
#define GDN_KK(kl, i) ((((i) >> 2) * CV_TK + (kl)) * 4 + ((i) & 3))
#else
#define GDN_VEC4 0
#define GDN_KK(kl, i) ((kl) + CV_TK * (i))
#endif

/* NVIDIA: the TK work-items of a column are adjacent lanes of one warp (V-major
 * states), so butterfly shuffles (inline PTX; NVIDIA's OpenCL reports no
 * sub-groups) reduce without local memory or barriers. The host asks for it
 * only on NVIDIA with work-groups of whole warps, and falls back to the
 * local-memory reduction if the driver refuses the program. */
#if defined(CV_NV_SHFL) && CV_TK > 1 && CV_TK <= 32
#define GDN_SHFL 1
inline float gdn_lanes_sum(float x)
{
    for (int m = CV_TK / 2; m >= 1; m >>= 1)
        x += cv_nv_xor(x, m);
    return x;
}
#else
#define GDN_SHFL 0
#endif

/* One token's k and q rows of this work-item, its v columns, and a and b. */
inline void gdn_token_inputs(__global const uchar *kb, __global const uchar *qb,
                             __global const uchar *vb, __global const uchar *ab,
                             __global const uchar *bb, long k_stride, long q_stride,
                             long v_stride, long a_stride, long b_stride, long t, int hq, int h,
                             int kl, int vg, int v0, float *kv, float *qv, float *vx, float *ax,
                             float *bx)
{
    for (int i = 0; i < GDN_KPT; i++) {
        const int kk = GDN_KK(kl, i);
        kv[i] = kk < CV_K ? LOAD_ACT(kb, t * k_stride + (long)hq * CV_K + kk) : 0.0f;
        qv[i] = kk < CV_K ? LOAD_ACT(qb, t * q_stride + (long)hq * CV_K + kk) : 0.0f;
    }
    for (int j = 0; j < GDN_VPT; j++) {
        const int vv = v0 + vg + GDN_NVG * j;
        vx[j] = vv < CV_V ? LOAD_ACT(vb, t * v_stride + (long)h * CV_V + vv) : 0.0f;
    }
    *ax = LOAD_ACT(ab, t * a_stride + h);
    *bx = LOAD_ACT(bb, t * b_stride + h);
}

/* Work-item (kl, vg) holds rows kl + TK*i and columns vg + NVG*j of the tile.
 * Per token it forms partial S^T k and S^T q (and of |k|^2, |q|^2, k.q) over
 * its rows; one reduction over the TK work-items of a column (local memory, or
 * warp shuffles on NVIDIA) gives everything, because normalisation and the decay are scalar factors:
 * with S' = e^g S, u = beta (v - S'^T k), o = S'^T q + u (k.q). */
__kernel __attribute__((reqd_work_group_size(CV_WG, 1, 1))) void gdn_recurrent(GDN_ARGS)
{
    __local float red[GDN_RED * GDN_TKP];
    __local float res[GDN_RED];

    /* 1.0f through constant memory, before any control flow: log1p (the
     * softplus) runs in loops and branches, see CV_CONST_ONE */
    const float one = CV_CONST_ONE(flags);
    const int lid = get_local_id(0);
    const int skv = (flags & GDN_STATE_KV) != 0;
    /* consecutive work-items take consecutive elements of the state's rows: along V
     * for [K, V] states, along K for [V, K] */
    const int vg = skv ? lid % GDN_NVG : lid / CV_TK;
    const int kl = skv ? lid / GDN_NVG : lid % CV_TK;
    const long grp = get_group_id(0);
    const int vt = (int)(grp % GDN_NVT);
    const long rest = grp / GDN_NVT;
    const int h = (int)(rest % HV);
    const long n = rest / HV;
    if (n >= n_seqs)
        return;
    /* The check flag, the bounds and the slots are independent loads: all are
     * issued before any of them is tested, so a decode step waits for one
     * round trip, not four, before its state loads can start. */
    const int failed = (flags & GDN_HAS_CHECK) ? check[0] : 0;
    long bos, eos;
    gdn_bounds(cu, cu_off, fixed_len, total, flags, n, &bos, &eos);
    const long slot = (flags & GDN_HAS_POOL)
                          ? gdn_slot(sidx, sidx_off, flags & GDN_HAS_SIDX, n, slots)
                          : -1;
    const long cslot = (flags & GDN_HAS_INTER)
                           ? gdn_slot(cidx, cidx_off, flags & GDN_HAS_CIDX, n, cache_slots)
                           : -1;
    if (failed != 0 || eos <= bos || (chunk_min > 0 && eos - bos >= chunk_min))
        return;

    const int hq = h / group;
    const int v0 = vt * CV_VT;
    const long head_off = (long)h * CV_K * CV_V;
    __global const uchar *qb = q + q_off, *kb = k + k_off, *vb = v + v_off;
    __global const uchar *ab = a + a_off, *bb = b + b_off;
#if GDN_VEC4
    /* float4 moves of [V, K] f32 states where the slot's start is 16-byte aligned */
    const int vec4 = !skv && slot >= 0 && (pool_off & 15) == 0 && (slot_pitch & 3) == 0;
    __global float4 *pool4 =
        (__global float4 *)(pool + pool_off) + (vec4 ? (slot * slot_pitch + head_off) / 4 : 0);
#endif

    float st[GDN_KPT][GDN_VPT];
#if GDN_VEC4
    if (vec4) {
        for (int j = 0; j < GDN_VPT; j++) {
            const int vv = v0 + vg + GDN_NVG * j;
            for (int i = 0; i < GDN_KPT; i += 4) {
                const float4 x = vv < CV_V ? pool4[(vv * CV_K + GDN_KK(kl, i)) / 4] : (float4)(0.0f);
                st[i][j] = x.x;
                st[i + 1][j] = x.y;
                st[i + 2][j] = x.z;
                st[i + 3][j] = x.w;
            }
        }
    } else
#endif
        for (int i = 0; i < GDN_KPT; i++)
            for (int j = 0; j < GDN_VPT; j++) {
                const int kk = GDN_KK(kl, i), vv = v0 + vg + GDN_NVG * j;
                float x = 0.0f;
                if (slot >= 0 && kk < CV_K && vv < CV_V)
                    x = LOAD_ST(pool + pool_off,
                                slot * slot_pitch + head_off + gdn_state_at(skv, kk, vv));
                st[i][j] = x;
            }

    const float A = exp(CV_CPTR(float, A_log, A_log_off)[h]);
    const float bias = gdn_bias(dt_bias, dt_bias_off, h, flags);
    const int l2 = (flags & GDN_L2NORM) != 0;

    /* this token's inputs; the next token's are loaded during the reduction */
    float kv[GDN_KPT], qv[GDN_KPT], vx[GDN_VPT], ax, bx;
    gdn_token_inputs(kb, qb, vb, ab, bb, k_stride, q_stride, v_stride, a_stride, b_stride, bos,
                     hq, h, kl, vg, v0, kv, qv, vx, &ax, &bx);

    for (long t = bos; t < eos; t++) {
        /* column sums of S^T k and S^T q, and |k|^2, |q|^2, k.q */
        float csk[GDN_VPT], csq[GDN_VPT], tkk = 0.0f, tqq = 0.0f, tkq = 0.0f;
        for (int j = 0; j < GDN_VPT; j++) {
            float sk = 0.0f, sq = 0.0f;
            for (int i = 0; i < GDN_KPT; i++) {
                sk += st[i][j] * kv[i];
                sq += st[i][j] * qv[i];
            }
            csk[j] = sk;
            csq[j] = sq;
        }
        for (int i = 0; i < GDN_KPT; i++) {
            tkk += kv[i] * kv[i];
            tqq += qv[i] * qv[i];
            tkq += kv[i] * qv[i];
        }
        float kn[GDN_KPT], qn[GDN_KPT], vn[GDN_VPT], an = 0.0f, bn = 0.0f;
#if GDN_SHFL
        if (!skv) {
            if (GDN_PREFETCH && t + 1 < eos)
                gdn_token_inputs(kb, qb, vb, ab, bb, k_stride, q_stride, v_stride, a_stride,
                                 b_stride, t + 1, hq, h, kl, vg, v0, kn, qn, vn, &an, &bn);
            for (int j = 0; j < GDN_VPT; j++) {
                csk[j] = gdn_lanes_sum(csk[j]);
                csq[j] = gdn_lanes_sum(csq[j]);
            }
            tkk = gdn_lanes_sum(tkk);
            tqq = gdn_lanes_sum(tqq);
            tkq = gdn_lanes_sum(tkq);
        } else
#endif
        {
            for (int j = 0; j < GDN_VPT; j++) {
                const int col = vg + GDN_NVG * j;
                red[(2 * col) * GDN_TKP + kl] = csk[j];
                red[(2 * col + 1) * GDN_TKP + kl] = csq[j];
            }
            if (vg == 0) {
                red[(2 * CV_VT) * GDN_TKP + kl] = tkk;
                red[(2 * CV_VT + 1) * GDN_TKP + kl] = tqq;
                red[(2 * CV_VT + 2) * GDN_TKP + kl] = tkq;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            if (GDN_PREFETCH && t + 1 < eos)
                gdn_token_inputs(kb, qb, vb, ab, bb, k_stride, q_stride, v_stride, a_stride,
                                 b_stride, t + 1, hq, h, kl, vg, v0, kn, qn, vn, &an, &bn);
            for (int r = lid; r < GDN_RED; r += CV_WG) {
                float s = 0.0f;
                for (int l = 0; l < CV_TK; l++)
                    s += red[r * GDN_TKP + l];
                res[r] = s;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int j = 0; j < GDN_VPT; j++) {
                const int col = vg + GDN_NVG * j;
                csk[j] = res[2 * col];
                csq[j] = res[2 * col + 1];
            }
            tkk = res[2 * CV_VT];
            tqq = res[2 * CV_VT + 1];
            tkq = res[2 * CV_VT + 2];
        }

        /* the gates, computed by every work-item from the same two numbers */
        const float eg = exp(-A * gdn_softplus(ax + bias, sp_beta, sp_threshold));
        const float beta = one / (one + exp(-bx));
        const float rk = l2 ? rsqrt(tkk + 1e-6f) : 1.0f;
        const float rq = (l2 ? rsqrt(tqq + 1e-6f) : 1.0f) * scale;
        const float kq = tkq * rk * rq;
        for (int j = 0; j < GDN_VPT; j++) {
            const int col = vg + GDN_NVG * j, vv = v0 + col;
            const float u = beta * (vx[j] - eg * csk[j] * rk);
            if (kl == 0 && vv < CV_V) {
                const float out = eg * csq[j] * rq + u * kq;
                cv_store_f(o + o_off, t * o_stride + (long)h * CV_V + vv, out, CV_DT);
            }
            for (int i = 0; i < GDN_KPT; i++)
                st[i][j] = eg * st[i][j] + (kv[i] * rk) * u;
        }
        if (cslot >= 0 && t - bos < cache_steps) {
            const long base = ((cslot * cache_steps + (t - bos)) * HV + h) * (long)CV_K * CV_V;
            for (int i = 0; i < GDN_KPT; i++)
                for (int j = 0; j < GDN_VPT; j++) {
                    const int kk = GDN_KK(kl, i), vv = v0 + vg + GDN_NVG * j;
                    if (kk < CV_K && vv < CV_V)
                        STORE_ST(inter + inter_off, base + gdn_state_at(skv, kk, vv), st[i][j]);
                }
        }
#if GDN_PREFETCH
        for (int i = 0; i < GDN_KPT; i++) {
            kv[i] = kn[i];
            qv[i] = qn[i];
        }
        for (int j = 0; j < GDN_VPT; j++)
            vx[j] = vn[j];
        ax = an;
        bx = bn;
#else
        if (t + 1 < eos)
            gdn_token_inputs(kb, qb, vb, ab, bb, k_stride, q_stride, v_stride, a_stride, b_stride,
                             t + 1, hq, h, kl, vg, v0, kv, qv, vx, &ax, &bx);
#endif
    }

    if (slot >= 0 && (flags & GDN_WRITE_BACK)) {
#if GDN_VEC4
        if (vec4) {
            for (int j = 0; j < GDN_VPT; j++) {
                const int vv = v0 + vg + GDN_NVG * j;
                if (vv < CV_V)
                    for (int i = 0; i < GDN_KPT; i += 4)
                        pool4[(vv * CV_K + GDN_KK(kl, i)) / 4] =
                            (float4)(st[i][j], st[i + 1][j], st[i + 2][j], st[i + 3][j]);
            }
        } else
#endif
            for (int i = 0; i < GDN_KPT; i++)
                for (int j = 0; j < GDN_VPT; j++) {
                    const int kk = GDN_KK(kl, i), vv = v0 + vg + GDN_NVG * j;
                    if (kk < CV_K && vv < CV_V)
                        STORE_ST(pool + pool_off,
                                 slot * slot_pitch + head_off + gdn_state_at(skv, kk, vv),
                                 st[i][j]);
                }
    }
    GDN_END_BARRIER();
}

#else /* CV_GDN_CHUNKED */

/* ------------------------------------------------------------------ chunked */

/* Per chunk of C = 64 tokens, with S the state at the chunk's start, q and k
 * normalised (q scaled), G the in-chunk cumulative sum of g and
 * A[i][m] = beta_i (k_i.k_m) e^(G_i - G_m) (m < i):
 *   D = (I + A)^-1 B,  B = beta (V - e^G (K S))            (the WY form: D = U - W S)
 *   O = e^G (Q S) + (mask_{m<=i} (Q K^T) e^(G_i - G_m)) D
 *   S <- e^(G_last) S + K^T (e^(G_last - G) D).
 * (I + A)^-1 D is solved blockwise: the four 16 x 16 diagonal blocks are
 * inverted by forward substitution (one column per work-item), then four
 * block steps D_r = T_rr (B_r - sum_{c<r} A_rc D_c).
 * Rows past the sequence's end have k = q = v = 0, beta = 0 and g = 0, so
 * they contribute nothing. The state tile lives in local memory. */

#define GDN_C GDN_CHUNK /* cl/cv-shared.h */
#define GDN_CNVT ((CV_V + CV_CVT - 1) / CV_CVT)
#define GDN_KSP (CV_KS + 1)   /* padded slab rows */
#define GDN_AP (GDN_C + 1)    /* padded 64 x 64 rows */
#define GDN_UA (2 * GDN_C * GDN_KSP)
#define GDN_UB (GDN_C * GDN_AP)
#define GDN_UNION (GDN_UA > GDN_UB ? GDN_UA : GDN_UB)
#define GDN_NQK (GDN_C * GDN_C / CV_CWG)                  /* 64x64 entries per work-item */
#define GDN_NKS ((GDN_C * CV_CVT + CV_CWG - 1) / CV_CWG)  /* 64xCVT entries per work-item */

__kernel __attribute__((reqd_work_group_size(CV_CWG, 1, 1))) void gdn_chunked(GDN_ARGS)
{
    __local float S_l[CV_K * CV_CVT];   /* state tile [k][v] */
    __local float B_l[GDN_C * CV_CVT];  /* B, overwritten by D */
    __local float R_l[GDN_CHUNK_BLOCK * CV_CVT];
    __local float U_l[GDN_UNION];       /* K/Q slabs, then A, then the masked Q K^T */
    __local float T_l[GDN_C * GDN_CHUNK_BLOCK]; /* inverses of the diagonal blocks */
    __local float G_l[GDN_C], beta_l[GDN_C], rk_l[GDN_C], rq_l[GDN_C], w_l[GDN_C];

    /* 1.0f through constant memory, before any control flow: log1p (the
     * softplus) runs in loops and branches, see CV_CONST_ONE */
    const float one = CV_CONST_ONE(flags);
    const int lid = get_local_id(0);
    const long grp = get_group_id(0);
    const int vt = (int)(grp % GDN_CNVT);
    const long rest = grp / GDN_CNVT;
    const int h = (int)(rest % HV);
    const long n = rest / HV;
    long bos, eos;
    if (!gdn_chunked_seq(cu, cu_off, fixed_len, total, flags, n, n_seqs, chunk_min, check, &bos,
                         &eos))
        return;

    const int hq = h / group;
    const int v0 = vt * CV_CVT;
    const long head_off = (long)h * CV_K * CV_V;
    const long slot = (flags & GDN_HAS_POOL)
                          ? gdn_slot(sidx, sidx_off, flags & GDN_HAS_SIDX, n, slots)
                          : -1;
    __global const uchar *qb = q + q_off, *kb = k + k_off, *vb = v + v_off;
    __global const uchar *ab = a + a_off, *bb = b + b_off;

    const int skv = (flags & GDN_STATE_KV) != 0;
    for (int e = lid; e < CV_K * CV_CVT; e += CV_CWG) {
        /* coalesced along the state's rows */
        const int vv = skv ? e % CV_CVT : e / CV_K, kk = skv ? e / CV_CVT : e % CV_K;
        float x = 0.0f;
        if (slot >= 0 && v0 + vv < CV_V)
            x = LOAD_ST(pool + pool_off,
                        slot * slot_pitch + head_off + gdn_state_at(skv, kk, v0 + vv));
        S_l[kk * CV_CVT + vv] = x;
    }

    const float A = exp(CV_CPTR(float, A_log, A_log_off)[h]);
    const float bias = gdn_bias(dt_bias, dt_bias_off, h, flags);
    const int l2 = (flags & GDN_L2NORM) != 0;

    /* fixed work-item coordinates of the 64 x 64 and 64 x CVT tiles */
    const int qk_m = lid % GDN_C, qk_i0 = lid / GDN_C;
    const int ks_v = lid % CV_CVT, ks_i0 = lid / CV_CVT;
    __local float *Ks = U_l, *Qs = U_l + GDN_C * GDN_KSP;
    __local float *A_l = U_l;

    for (long c0 = bos; c0 < eos; c0 += GDN_C) {
        const int nr = (int)min((long)GDN_C, eos - c0);
        if (lid < GDN_C) {
            float g = 0.0f, be = 0.0f;
            if (lid < nr) {
                const long t = c0 + lid;
                const float x = LOAD_ACT(ab, t * a_stride + h) + bias;
                g = -A * gdn_softplus(x, sp_beta, sp_threshold);
                be = one / (one + exp(-LOAD_ACT(bb, t * b_stride + h)));
            }
            G_l[lid] = g;
            beta_l[lid] = be;
        }

        float kk_acc[GDN_NQK], qk_acc[GDN_NQK], ks_acc[GDN_NKS], qs_acc[GDN_NKS];
        for (int r = 0; r < GDN_NQK; r++)
            kk_acc[r] = qk_acc[r] = 0.0f;
        for (int r = 0; r < GDN_NKS; r++)
            ks_acc[r] = qs_acc[r] = 0.0f;
        float nk = 0.0f, nq = 0.0f;

        for (int k0 = 0; k0 < CV_K; k0 += CV_KS) {
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int e = lid; e < GDN_C * CV_KS; e += CV_CWG) {
                const int row = e / CV_KS, col = e % CV_KS, kk = k0 + col;
                float kx = 0.0f, qx = 0.0f;
                if (row < nr && kk < CV_K) {
                    const long t = c0 + row;
                    kx = LOAD_ACT(kb, t * k_stride + (long)hq * CV_K + kk);
                    qx = LOAD_ACT(qb, t * q_stride + (long)hq * CV_K + kk);
                }
                Ks[row * GDN_KSP + col] = kx;
                Qs[row * GDN_KSP + col] = qx;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            if (lid < GDN_C)
                for (int c = 0; c < CV_KS; c++) {
                    const float kx = Ks[lid * GDN_KSP + c], qx = Qs[lid * GDN_KSP + c];
                    nk += kx * kx;
                    nq += qx * qx;
                }
            for (int c = 0; c < CV_KS; c++) {
                const float km = Ks[qk_m * GDN_KSP + c];
                for (int r = 0; r < GDN_NQK; r++) {
                    const int i = qk_i0 + (CV_CWG / GDN_C) * r;
                    kk_acc[r] += Ks[i * GDN_KSP + c] * km;
                    qk_acc[r] += Qs[i * GDN_KSP + c] * km;
                }
            }
            for (int c = 0; c < CV_KS && k0 + c < CV_K; c++) {
                const float s = S_l[(k0 + c) * CV_CVT + ks_v];
                for (int r = 0; r < GDN_NKS; r++) {
                    const int i = ks_i0 + (CV_CWG / CV_CVT) * r;
                    if (i < GDN_C) {
                        ks_acc[r] += Ks[i * GDN_KSP + c] * s;
                        qs_acc[r] += Qs[i * GDN_KSP + c] * s;
                    }
                }
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lid < GDN_C) {
            rk_l[lid] = l2 ? rsqrt(nk + 1e-6f) : 1.0f;
            rq_l[lid] = (l2 ? rsqrt(nq + 1e-6f) : 1.0f) * scale;
        }
        if (lid == 0) {
            float s = 0.0f;
            for (int i = 0; i < GDN_C; i++) {
                s += G_l[i];
                G_l[i] = s;
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        const float G_last = G_l[nr - 1];
        if (lid < GDN_C)
            w_l[lid] = rk_l[lid] * exp(G_last - G_l[lid]);
        for (int r = 0; r < GDN_NQK; r++) {
            const int i = qk_i0 + (CV_CWG / GDN_C) * r, m = qk_m;
            A_l[i * GDN_AP + m] = m < i ? beta_l[i] * kk_acc[r] * rk_l[i] * rk_l[m] *
                                              exp(G_l[i] - G_l[m])
                                        : 0.0f;
        }
        for (int r = 0; r < GDN_NKS; r++) {
            const int i = ks_i0 + (CV_CWG / CV_CVT) * r, vv = v0 + ks_v;
            if (i < GDN_C) {
                const float eG = exp(G_l[i]);
                const float vx = (i < nr && vv < CV_V)
                                     ? LOAD_ACT(vb, (c0 + i) * v_stride + (long)h * CV_V + vv)
                                     : 0.0f;
                B_l[i * CV_CVT + ks_v] = beta_l[i] * (vx - eG * rk_l[i] * ks_acc[r]);
                qs_acc[r] *= eG * rq_l[i];
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);

        if (lid < GDN_C) { /* column j of the inverse of diagonal block rb */
            const int rb = lid / 16, j = lid % 16;
            float x[16];
            for (int ii = 0; ii < 16; ii++) {
                float s = ii == j ? 1.0f : 0.0f;
                if (ii > j)
                    for (int mm = 0; mm < ii; mm++)
                        s -= A_l[(16 * rb + ii) * GDN_AP + 16 * rb + mm] * x[mm];
                x[ii] = s;
            }
            for (int ii = 0; ii < 16; ii++)
                T_l[(rb * 16 + ii) * 16 + j] = x[ii];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        const int nblocks = (nr + 15) / 16;
        for (int rb = 0; rb < nblocks; rb++) {
            for (int e = lid; e < 16 * CV_CVT; e += CV_CWG) {
                const int ii = e / CV_CVT, vv = e % CV_CVT, row = 16 * rb + ii;
                float s = B_l[row * CV_CVT + vv];
                for (int m = 0; m < 16 * rb; m++)
                    s -= A_l[row * GDN_AP + m] * B_l[m * CV_CVT + vv];
                R_l[e] = s;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int e = lid; e < 16 * CV_CVT; e += CV_CWG) {
                const int ii = e / CV_CVT, vv = e % CV_CVT;
                float s = 0.0f;
                for (int jj = 0; jj <= ii; jj++)
                    s += T_l[(rb * 16 + ii) * 16 + jj] * R_l[jj * CV_CVT + vv];
                B_l[(16 * rb + ii) * CV_CVT + vv] = s;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }

        /* A is done: the same local memory takes the masked, decayed Q K^T */
        for (int r = 0; r < GDN_NQK; r++) {
            const int i = qk_i0 + (CV_CWG / GDN_C) * r, m = qk_m;
            A_l[i * GDN_AP + m] =
                m <= i ? qk_acc[r] * rq_l[i] * rk_l[m] * exp(G_l[i] - G_l[m]) : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int r = 0; r < GDN_NKS; r++) {
            const int i = ks_i0 + (CV_CWG / CV_CVT) * r, vv = v0 + ks_v;
            if (i < nr && vv < CV_V) {
                float s = qs_acc[r];
                for (int m = 0; m <= i; m++)
                    s += A_l[i * GDN_AP + m] * B_l[m * CV_CVT + ks_v];
                cv_store_f(o + o_off, (c0 + i) * o_stride + (long)h * CV_V + vv, s, CV_DT);
            }
        }

        const float eGl = exp(G_last);
        for (int k0 = 0; k0 < CV_K; k0 += CV_KS) {
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int e = lid; e < GDN_C * CV_KS; e += CV_CWG) {
                const int row = e / CV_KS, col = e % CV_KS, kk = k0 + col;
                float kx = 0.0f;
                if (row < nr && kk < CV_K)
                    kx = LOAD_ACT(kb, (c0 + row) * k_stride + (long)hq * CV_K + kk);
                Ks[row * GDN_KSP + col] = kx * w_l[row];
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int e = lid; e < CV_KS * CV_CVT; e += CV_CWG) {
                const int col = e / CV_CVT, vv = e % CV_CVT, kk = k0 + col;
                if (kk < CV_K) {
                    float s = 0.0f;
                    for (int i = 0; i < nr; i++)
                        s += Ks[i * GDN_KSP + col] * B_l[i * CV_CVT + vv];
                    S_l[kk * CV_CVT + vv] = eGl * S_l[kk * CV_CVT + vv] + s;
                }
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }

    if (slot >= 0 && (flags & GDN_WRITE_BACK)) {
        for (int e = lid; e < CV_K * CV_CVT; e += CV_CWG) {
            const int vv = skv ? e % CV_CVT : e / CV_K, kk = skv ? e / CV_CVT : e % CV_K;
            if (v0 + vv < CV_V)
                STORE_ST(pool + pool_off,
                         slot * slot_pitch + head_off + gdn_state_at(skv, kk, v0 + vv),
                         S_l[kk * CV_CVT + vv]);
        }
    }
    GDN_END_BARRIER();
}

#endif /* CV_GDN_CHUNKED */
