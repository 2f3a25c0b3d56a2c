/* Varlen attention backward (SPEC 1.2), portable OpenCL C 1.2, built by
 * lib/attention/backward-cl.c with -D CV_DTYPE, GRAD_DT (the gradients' dtype
 * code), HEAD_DIM, HEAD_DIM_V, BLOCK_M, BLOCK_N, WG_SIZE, TX, DCH, KCH, and
 * CV_DROPOUT when dropout is on:
 *   attn_bwd_delta  delta = dot(do, o) per (query head, token);
 *   attn_bwd_dkdv   one work-group per (key tile, KV head): the tile's dk and
 *                   dv over the query heads of the group and the rows that
 *                   see the tile;
 *   attn_bwd_dq     one work-group per (query tile, query head): dq over the
 *                   key tiles its rows see, recomputing P.
 * Each output element is summed by one work-item in a fixed order: the result
 * does not depend on scheduling (deterministic, SPEC 1.2). Both passes get P
 * and dS from bwd_scores + bwd_p_ds, the same arithmetic.
 */

#ifndef CV_DTYPE
#define CV_DTYPE CV_DT_F32
#endif
#ifndef GRAD_DT
#define GRAD_DT CV_DTYPE
#endif
#ifndef HEAD_DIM
#define HEAD_DIM 64
#endif
#ifndef HEAD_DIM_V
#define HEAD_DIM_V HEAD_DIM
#endif
#ifndef BLOCK_M
#define BLOCK_M 32
#endif
#ifndef BLOCK_N
#define BLOCK_N 32
#endif
#ifndef WG_SIZE
#define WG_SIZE 64
#endif
#ifndef TX
#define TX 16
#endif
#ifndef DCH
#define DCH 16
#endif
#ifndef KCH
#define KCH 16
#endif

#ifdef CV_NO_UNROLL
#define CV_UNROLL
#else
#define CV_UNROLL _Pragma("unroll")
#endif

/* Score tiles: thread (tx, ty) owns rows ty + TY*i (i < TM) and keys tx + TX*j
 * (j < TN). dk/dv accumulators: keys ty + TY*a (a < TKA), columns tx + TX*c.
 * dq accumulators: rows ty + TY*i, columns tx + TX*c. */
#define TY (WG_SIZE / TX)
#define TM (BLOCK_M / TY)
#define TN (BLOCK_N / TX)
#define TKA (BLOCK_N / TY)
#define TD (HEAD_DIM / TX)
#define TDV (HEAD_DIM_V / TX)
#define QS4 (DCH / 4 + 1)  /* staged rows in float4, padded against bank conflicts */
#define PSP (BLOCK_N + 1)  /* row pitch of the P and dS tiles */
#define RMAX (HEAD_DIM > HEAD_DIM_V ? HEAD_DIM : HEAD_DIM_V)

#define LD(p, i) cv_load_f((p), (i), CV_DTYPE)
#if CV_DTYPE == CV_DT_F32
#define LD4(p, i) vload4(0, (__global const float *)(p) + (i))
#elif CV_DTYPE == CV_DT_F16
#define LD4(p, i) vload_half4(0, (__global const half *)(p) + (i))
#else
#define LD4(p, i) ((float4)(LD(p, (i)), LD(p, (i) + 1), LD(p, (i) + 2), LD(p, (i) + 3)))
#endif

/* The arguments every pass shares, and their unpacking. */
typedef struct bwd_args {
    float scale_log2, scale, softcap;
    int causal, window_left, window_right;
    uint drop_k0, drop_k1, drop_c3, drop_thr;
    float drop_scale;
} bwd_args;

#ifdef CV_DROPOUT
#define BWD_DROP_INIT drop_k0, drop_k1, drop_c3, drop_thr, drop_scale
#else
#define BWD_DROP_INIT 0u, 0u, 0u, 0u, 1.0f
#endif

/* acc[i][j] = dot(a row ty + TY*i, b row tx + TX*j) over dim columns: rows
 * a_row0 + r (r < arows) of a at column a_col, rows b_row0 + j (j < brows) of
 * b at column b_col, staged DCH columns at a time (rows past the counts are 0). */
inline void bwd_dot_tile(__global const uchar *a, long a_stride, long a_row0, int a_col,
                         int arows, __global const uchar *b, long b_stride, long b_row0,
                         int b_col, int brows, int dim, __local float4 *Ac, __local float4 *Bc,
                         float acc[TM][TN])
{
    const int lid = get_local_id(0), tx = lid % TX, ty = lid / TX;
    CV_UNROLL
    for (int i = 0; i < TM; i++)
        CV_UNROLL
        for (int j = 0; j < TN; j++)
            acc[i][j] = 0.0f;
    for (int dc = 0; dc < dim; dc += DCH) {
        barrier(CLK_LOCAL_MEM_FENCE); /* the previous chunk (or tile) is no longer read */
        for (int e = lid; e < BLOCK_M * (DCH / 4); e += WG_SIZE) {
            const int r = e / (DCH / 4), c4 = e % (DCH / 4);
            Ac[r * QS4 + c4] = r < arows ? LD4(a, (size_t)(a_row0 + r) * a_stride + a_col + dc +
                                                      4 * c4)
                                         : (float4)(0.0f);
        }
        for (int e = lid; e < BLOCK_N * (DCH / 4); e += WG_SIZE) {
            const int j = e / (DCH / 4), c4 = e % (DCH / 4);
            Bc[j * QS4 + c4] = j < brows ? LD4(b, (size_t)(b_row0 + j) * b_stride + b_col + dc +
                                                      4 * c4)
                                         : (float4)(0.0f);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int c4 = 0; c4 < DCH / 4; c4++) {
            float4 av[TM], bv[TN];
            CV_UNROLL
            for (int i = 0; i < TM; i++)
                av[i] = Ac[(ty + TY * i) * QS4 + c4];
            CV_UNROLL
            for (int j = 0; j < TN; j++)
                bv[j] = Bc[(tx + TX * j) * QS4 + c4];
            CV_UNROLL
            for (int i = 0; i < TM; i++)
                CV_UNROLL
                for (int j = 0; j < TN; j++) {
                    float t = mad(av[i].x, bv[j].x, acc[i][j]);
                    t = mad(av[i].y, bv[j].y, t);
                    t = mad(av[i].z, bv[j].z, t);
                    acc[i][j] = mad(av[i].w, bv[j].w, t);
                }
        }
    }
}

/* P Z and dS (scale and softcap's derivative included) of the thread's
 * elements into the local tiles Ps and DSs, from the raw dot products s
 * (q . k) and dp (do . v). Row ty + TY*i sees keys [lo[i], hi[i]] (empty:
 * lo > hi), has lse2 = lse * log2(e) and delta dl; it is packed query
 * tok0 + ty + TY*i of head h; key j of the tile is packed key u0 + j, index
 * kb + j in its sequence. Ends with a barrier: the tiles are readable. */
inline void bwd_p_ds(float s[TM][TN], float dp[TM][TN], const int *lo, const int *hi,
                     const float *lse2, const float *dl, int kb, int tok0, int u0, int h,
                     const bwd_args *g, __local float *Ps, __local float *DSs)
{
    const int lid = get_local_id(0), tx = lid % TX, ty = lid / TX;
    CV_UNROLL
    for (int i = 0; i < TM; i++) {
        const int r = ty + TY * i;
        CV_UNROLL
        for (int j = 0; j < TN; j++) {
            const int c = tx + TX * j, key = kb + c;
            const bool vis = key >= lo[i] && key <= hi[i];
            float p, deriv = 1.0f;
            if (g->softcap > 0.0f) {
                const float th = tanh(s[i][j] * g->scale / g->softcap);
                p = exp2(g->softcap * th * M_LOG2E_F - lse2[i]);
                deriv = 1.0f - th * th;
            } else {
                p = exp2(s[i][j] * g->scale_log2 - lse2[i]);
            }
            float z = 1.0f;
#ifdef CV_DROPOUT
            if (vis)
                z = g->drop_scale * cv_dropout_keep(h, tok0 + r, u0 + c, g->drop_k0, g->drop_k1,
                                                    g->drop_c3, g->drop_thr);
#endif
            Ps[r * PSP + c] = vis ? p * z : 0.0f;
            DSs[r * PSP + c] = vis ? p * (z * dp[i][j] - dl[i]) * deriv * g->scale : 0.0f;
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
}

/* The keys row i (of lq rows, lk keys) sees: SPEC 1's rules at position
 * q_pos[t] or i + lk - lq; empty (1, 0) when its lse is not finite. */
inline int2 bwd_row_range(__global const int *q_pos, int t, int i, int lq, int lk, float lse,
                          const bwd_args *g)
{
    if (!isfinite(lse))
        return (int2)(1, 0);
    const long pos = q_pos ? (long)q_pos[t] : (long)i + lk - lq;
    long a = 0, b = (long)lk - 1;
    if (g->window_left >= 0)
        a = max(a, pos - g->window_left);
    if (g->causal)
        b = min(b, pos);
    if (g->window_right >= 0)
        b = min(b, pos + g->window_right);
    return (int2)((int)min(a, (long)lk), (int)max(b, -1L));
}

/* delta[h][t] = dot(do, o), DELTA_ROWS rows per work-group of DELTA_WG: the
 * rows' do and o are staged in local memory by adjacent loads, then one
 * work-item per row sums in the order and with the mad() of bwd_dot_tile's
 * dP = do . v. So where o equals v bitwise (a row that sees one key) delta
 * equals dP bitwise and dS is exactly 0, as in exact arithmetic. */
#define DELTA_ROWS 8
#define DELTA_WG 256
#define DELTA_LANES (DELTA_WG / DELTA_ROWS)

#ifdef DELTA_TREE
/* The tensor-core kernels' delta (-DDELTA_TREE): their dP comes from the
 * tensor cores, in no order a sum here could follow, so the row is summed in
 * a fixed tree instead: DELTA_LANES work-items each sum DELTA_CH adjacent
 * elements read straight from global memory, the first adds their partial
 * sums in lane order (deterministic; on an H100 at 16 x 16384, bf16, Hq 32,
 * D 128: 0.14 ms, against 0.59-0.67 ms for the serial form). */
#define DELTA_CH ((HEAD_DIM_V + DELTA_LANES - 1) / DELTA_LANES)
__kernel __attribute__((reqd_work_group_size(DELTA_WG, 1, 1)))
void attn_bwd_delta(__global const uchar *o, ulong o_off, long o_stride,
                    __global const uchar *dout, ulong do_off, long do_stride, int heads_q,
                    int total_q, __global float *delta_base, ulong delta_off,
                    __global const int *flag)
{
    __local float part[DELTA_ROWS][DELTA_LANES];
    if (flag && *flag)
        return;
    const int lid = get_local_id(0), r = lid / DELTA_LANES, lane = lid % DELTA_LANES;
    const long row = (long)get_group_id(0) * DELTA_ROWS + r;
    const bool active = row < (long)total_q * heads_q;
    const long t = active ? row / heads_q : 0, h = active ? row % heads_q : 0;
    __global const uchar *ob = o + o_off, *db = dout + do_off;
    const size_t oi = (size_t)t * o_stride + (size_t)h * HEAD_DIM_V;
    const size_t di = (size_t)t * do_stride + (size_t)h * HEAD_DIM_V;
    float acc = 0.0f;
    for (int j = 0; j < DELTA_CH; j++) {
        const int c = lane * DELTA_CH + j;
        if (active && c < HEAD_DIM_V)
            acc = mad(LD(db, di + c), LD(ob, oi + c), acc);
    }
    part[r][lane] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (active && lane == 0) {
        float sum = 0.0f;
        for (int i = 0; i < DELTA_LANES; i++)
            sum += part[r][i];
        CV_PTR(float, delta_base, delta_off)[h * total_q + t] = sum;
    }
}
#else

__kernel __attribute__((reqd_work_group_size(DELTA_WG, 1, 1)))
void attn_bwd_delta(__global const uchar *o, ulong o_off, long o_stride,
                    __global const uchar *dout, ulong do_off, long do_stride, int heads_q,
                    int total_q, __global float *delta_base, ulong delta_off,
                    __global const int *flag)
{
    __local float so[DELTA_ROWS][HEAD_DIM_V], sd[DELTA_ROWS][HEAD_DIM_V];
    if (flag && *flag)
        return;
    const int lid = get_local_id(0), r = lid / DELTA_LANES, lane = lid % DELTA_LANES;
    const long row = (long)get_group_id(0) * DELTA_ROWS + r;
    const bool active = row < (long)total_q * heads_q;
    const long t = active ? row / heads_q : 0, h = active ? row % heads_q : 0;
    __global const uchar *ob = o + o_off, *db = dout + do_off;
    for (int c = lane; c < HEAD_DIM_V; c += DELTA_LANES) {
        so[r][c] = active ? LD(ob, (size_t)t * o_stride + (size_t)h * HEAD_DIM_V + c) : 0.0f;
        sd[r][c] = active ? LD(db, (size_t)t * do_stride + (size_t)h * HEAD_DIM_V + c) : 0.0f;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (active && lane == 0) {
        float acc = 0.0f;
        for (int c = 0; c < HEAD_DIM_V; c++)
            acc = mad(sd[r][c], so[r][c], acc);
        CV_PTR(float, delta_base, delta_off)[h * total_q + t] = acc;
    }
}
#endif /* DELTA_TREE */

/* The common arguments of the two main kernels. */
#define BWD_COMMON_ARGS                                                                        \
    __global const uchar *q, ulong q_off, long q_stride, __global const uchar *k, ulong k_off, \
        long k_stride, __global const uchar *v, ulong v_off, long v_stride,                     \
        __global const uchar *dout, ulong do_off, long do_stride, __global const int *cu_q_base,  \
        ulong cu_q_off, __global const int *cu_k_base, ulong cu_k_off,                          \
        __global const int *q_pos_base, ulong q_pos_off, __global const float *lse_base,        \
        ulong lse_off, __global const float *delta_base, ulong delta_off,                        \
        __global const int *wl, int heads_q,                                                     \
        int heads_kv, int total_q, int total_k, float scale_log2, float scale, float softcap,   \
        int causal, int window_left, int window_right, __global const int *flag

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1)))
void attn_bwd_dkdv(BWD_COMMON_ARGS, __global uchar *dk, ulong dk_off, long dk_stride,
                   __global uchar *dv, ulong dv_off, long dv_stride CV_DROP_ARGS)
{
    __local float4 Ac[BLOCK_M * QS4];
    __local float4 Bc[BLOCK_N * QS4];
    __local float Ps[BLOCK_M * PSP];
    __local float DSs[BLOCK_M * PSP];
    __local float Rc[KCH * RMAX];

    if (flag && *flag)
        return;
    const int lid = get_local_id(0), tx = lid % TX, ty = lid / TX;
    const long grp = get_group_id(0);
    const int item = (int)(grp / heads_kv), kvh = (int)(grp % heads_kv);
    if (item >= wl[0])
        return;
    const int seq = wl[2 + 2 * item], kb = wl[3 + 2 * item];
    __global const int *cu_q = CV_CPTR(int, cu_q_base, cu_q_off);
    __global const int *cu_k = CV_CPTR(int, cu_k_base, cu_k_off);
    __global const int *q_pos = q_pos_base ? CV_CPTR(int, q_pos_base, q_pos_off) : 0;
    __global const float *lse = CV_CPTR(float, lse_base, lse_off);
    __global const float *delta = CV_CPTR(float, delta_base, delta_off);
    const int q0 = clamp(cu_q[seq], 0, total_q), q1 = clamp(cu_q[seq + 1], q0, total_q);
    const int k0 = clamp(cu_k[seq], 0, total_k), k1 = clamp(cu_k[seq + 1], k0, total_k);
    const int lq = q1 - q0, lk = k1 - k0;
    const int nvalid = min(BLOCK_N, lk - kb);
    if (nvalid <= 0)
        return;
    const bwd_args g = {scale_log2, scale, softcap, causal, window_left, window_right,
                        BWD_DROP_INIT};
    const int group = heads_q / heads_kv;
    __global const uchar *qb = q + q_off, *kb_ = k + k_off, *vb = v + v_off;
    __global const uchar *db = dout + do_off;

    /* The rows that can see keys [kb, kb + nvalid): all with q_pos, else those
     * the causal and window rules allow (the per-row masks stay exact). */
    int r_begin = 0, r_end = lq;
    if (!q_pos) {
        const long dd = (long)lk - lq;
        if (causal || window_right >= 0) {
            const long right = causal ? (window_right >= 0 ? min(0, window_right) : 0)
                                      : (long)window_right;
            r_begin = (int)clamp((long)kb - dd - right, 0L, (long)lq);
        }
        if (window_left >= 0)
            r_end = (int)clamp((long)kb + nvalid - dd + window_left, 0L, (long)lq);
    }

    float dka[TKA][TD], dva[TKA][TDV];
    CV_UNROLL
    for (int a = 0; a < TKA; a++) {
        CV_UNROLL
        for (int c = 0; c < TD; c++)
            dka[a][c] = 0.0f;
        CV_UNROLL
        for (int c = 0; c < TDV; c++)
            dva[a][c] = 0.0f;
    }

    for (int hh = 0; hh < group; hh++) {
        const int h = kvh * group + hh;
        for (int r0 = r_begin; r0 < r_end; r0 += BLOCK_M) {
            const int rows = min(BLOCK_M, lq - r0);
            int lo[TM], hi[TM];
            float lse2[TM], dl[TM];
            CV_UNROLL
            for (int i = 0; i < TM; i++) {
                const int r = ty + TY * i, t = q0 + r0 + r;
                lo[i] = 1;
                hi[i] = 0;
                lse2[i] = 0.0f;
                dl[i] = 0.0f;
                if (r < rows) {
                    const float l = lse[(size_t)h * total_q + t];
                    const int2 rg = bwd_row_range(q_pos, t, r0 + r, lq, lk, l, &g);
                    lo[i] = rg.x;
                    hi[i] = rg.y;
                    lse2[i] = isfinite(l) ? l * M_LOG2E_F : 0.0f;
                    dl[i] = delta[(size_t)h * total_q + t];
                }
            }
            float s[TM][TN], dp[TM][TN];
            bwd_dot_tile(qb, q_stride, q0 + r0, h * HEAD_DIM, rows, kb_, k_stride, k0 + kb,
                         kvh * HEAD_DIM, nvalid, HEAD_DIM, Ac, Bc, s);
            bwd_dot_tile(db, do_stride, q0 + r0, h * HEAD_DIM_V, rows, vb, v_stride, k0 + kb,
                         kvh * HEAD_DIM_V, nvalid, HEAD_DIM_V, Ac, Bc, dp);
            bwd_p_ds(s, dp, lo, hi, lse2, dl, kb, q0 + r0, k0 + kb, h, &g, Ps, DSs);

            /* dv += (P Z)^T do and dk += dS^T q, KCH rows at a time. */
            for (int rc = 0; rc < rows; rc += KCH) {
                barrier(CLK_LOCAL_MEM_FENCE);
                for (int e = lid; e < KCH * HEAD_DIM_V; e += WG_SIZE) {
                    const int rr = e / HEAD_DIM_V, c = e % HEAD_DIM_V;
                    Rc[rr * RMAX + c] =
                        rc + rr < rows
                            ? LD(db, (size_t)(q0 + r0 + rc + rr) * do_stride +
                                         (size_t)h * HEAD_DIM_V + c)
                            : 0.0f;
                }
                barrier(CLK_LOCAL_MEM_FENCE);
                for (int rr = 0; rr < KCH; rr++) {
                    CV_UNROLL
                    for (int a = 0; a < TKA; a++) {
                        const float pz = Ps[(rc + rr) * PSP + ty + TY * a];
                        CV_UNROLL
                        for (int c = 0; c < TDV; c++)
                            dva[a][c] = mad(pz, Rc[rr * RMAX + tx + TX * c], dva[a][c]);
                    }
                }
                barrier(CLK_LOCAL_MEM_FENCE);
                for (int e = lid; e < KCH * HEAD_DIM; e += WG_SIZE) {
                    const int rr = e / HEAD_DIM, c = e % HEAD_DIM;
                    Rc[rr * RMAX + c] =
                        rc + rr < rows
                            ? LD(qb, (size_t)(q0 + r0 + rc + rr) * q_stride + (size_t)h * HEAD_DIM +
                                         c)
                            : 0.0f;
                }
                barrier(CLK_LOCAL_MEM_FENCE);
                for (int rr = 0; rr < KCH; rr++) {
                    CV_UNROLL
                    for (int a = 0; a < TKA; a++) {
                        const float ds = DSs[(rc + rr) * PSP + ty + TY * a];
                        CV_UNROLL
                        for (int c = 0; c < TD; c++)
                            dka[a][c] = mad(ds, Rc[rr * RMAX + tx + TX * c], dka[a][c]);
                    }
                }
            }
        }
    }

    __global uchar *dkb = dk + dk_off, *dvb = dv + dv_off;
    CV_UNROLL
    for (int a = 0; a < TKA; a++) {
        const int j = ty + TY * a;
        if (j >= nvalid)
            continue;
        const size_t tok = (size_t)(k0 + kb + j);
        CV_UNROLL
        for (int c = 0; c < TD; c++)
            cv_store_f(dkb, tok * dk_stride + (size_t)kvh * HEAD_DIM + tx + TX * c, dka[a][c],
                       GRAD_DT);
        CV_UNROLL
        for (int c = 0; c < TDV; c++)
            cv_store_f(dvb, tok * dv_stride + (size_t)kvh * HEAD_DIM_V + tx + TX * c, dva[a][c],
                       GRAD_DT);
    }
}

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1)))
void attn_bwd_dq(BWD_COMMON_ARGS, __global uchar *dq, ulong dq_off, long dq_stride CV_DROP_ARGS)
{
    __local float4 Ac[BLOCK_M * QS4];
    __local float4 Bc[BLOCK_N * QS4];
    __local float Ps[BLOCK_M * PSP];
    __local float DSs[BLOCK_M * PSP];
    __local float Rc[KCH * RMAX];
    __local int range[2];

    if (flag && *flag)
        return;
    const int lid = get_local_id(0), tx = lid % TX, ty = lid / TX;
    const long grp = get_group_id(0);
    const int item = (int)(grp / heads_q), h = (int)(grp % heads_q);
    if (item >= wl[0])
        return;
    const int seq = wl[2 + 2 * item], row0 = wl[3 + 2 * item];
    __global const int *cu_q = CV_CPTR(int, cu_q_base, cu_q_off);
    __global const int *cu_k = CV_CPTR(int, cu_k_base, cu_k_off);
    __global const int *q_pos = q_pos_base ? CV_CPTR(int, q_pos_base, q_pos_off) : 0;
    __global const float *lse = CV_CPTR(float, lse_base, lse_off);
    __global const float *delta = CV_CPTR(float, delta_base, delta_off);
    const int q0 = clamp(cu_q[seq], 0, total_q), q1 = clamp(cu_q[seq + 1], q0, total_q);
    const int k0 = clamp(cu_k[seq], 0, total_k), k1 = clamp(cu_k[seq + 1], k0, total_k);
    const int lq = q1 - q0, lk = k1 - k0;
    const int rows = min(BLOCK_M, lq - row0);
    if (rows <= 0)
        return;
    const bwd_args g = {scale_log2, scale, softcap, causal, window_left, window_right,
                        BWD_DROP_INIT};
    const int kvh = h / (heads_q / heads_kv);
    __global const uchar *qb = q + q_off, *kb_ = k + k_off, *vb = v + v_off;
    __global const uchar *db = dout + do_off;

    if (lid == 0) {
        range[0] = INT_MAX;
        range[1] = -1;
    }
    int lo[TM], hi[TM];
    float lse2[TM], dl[TM];
    CV_UNROLL
    for (int i = 0; i < TM; i++) {
        const int r = ty + TY * i, t = q0 + row0 + r;
        lo[i] = 1;
        hi[i] = 0;
        lse2[i] = 0.0f;
        dl[i] = 0.0f;
        if (r < rows) {
            const float l = lse[(size_t)h * total_q + t];
            const int2 rg = bwd_row_range(q_pos, t, row0 + r, lq, lk, l, &g);
            lo[i] = rg.x;
            hi[i] = rg.y;
            lse2[i] = isfinite(l) ? l * M_LOG2E_F : 0.0f;
            dl[i] = delta[(size_t)h * total_q + t];
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (tx == 0) {
        CV_UNROLL
        for (int i = 0; i < TM; i++) {
            if (lo[i] <= hi[i]) {
                atomic_min(&range[0], lo[i]);
                atomic_max(&range[1], hi[i]);
            }
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const int kmin = range[0], kmax = range[1];

    float dqa[TM][TD];
    CV_UNROLL
    for (int i = 0; i < TM; i++)
        CV_UNROLL
        for (int c = 0; c < TD; c++)
            dqa[i][c] = 0.0f;

    for (int kb = kmin; kb <= kmax; kb += BLOCK_N) {
        const int nvalid = min(BLOCK_N, kmax + 1 - kb);
        float s[TM][TN], dp[TM][TN];
        bwd_dot_tile(qb, q_stride, q0 + row0, h * HEAD_DIM, rows, kb_, k_stride, k0 + kb,
                     kvh * HEAD_DIM, nvalid, HEAD_DIM, Ac, Bc, s);
        bwd_dot_tile(db, do_stride, q0 + row0, h * HEAD_DIM_V, rows, vb, v_stride, k0 + kb,
                     kvh * HEAD_DIM_V, nvalid, HEAD_DIM_V, Ac, Bc, dp);
        bwd_p_ds(s, dp, lo, hi, lse2, dl, kb, q0 + row0, k0 + kb, h, &g, Ps, DSs);
        /* dq += dS k, KCH keys at a time. */
        for (int kc = 0; kc < nvalid; kc += KCH) {
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int e = lid; e < KCH * HEAD_DIM; e += WG_SIZE) {
                const int jj = e / HEAD_DIM, c = e % HEAD_DIM;
                Rc[jj * RMAX + c] =
                    kc + jj < nvalid
                        ? LD(kb_, (size_t)(k0 + kb + kc + jj) * k_stride +
                                      (size_t)kvh * HEAD_DIM + c)
                        : 0.0f;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int jj = 0; jj < KCH; jj++) {
                CV_UNROLL
                for (int i = 0; i < TM; i++) {
                    const float ds = DSs[(ty + TY * i) * PSP + kc + jj];
                    CV_UNROLL
                    for (int c = 0; c < TD; c++)
                        dqa[i][c] = mad(ds, Rc[jj * RMAX + tx + TX * c], dqa[i][c]);
                }
            }
        }
    }

    __global uchar *dqb = dq + dq_off;
    CV_UNROLL
    for (int i = 0; i < TM; i++) {
        const int r = ty + TY * i;
        if (r >= rows)
            continue;
        const size_t tok = (size_t)(q0 + row0 + r);
        CV_UNROLL
        for (int c = 0; c < TD; c++)
            cv_store_f(dqb, tok * dq_stride + (size_t)h * HEAD_DIM + tx + TX * c, dqa[i][c],
                       GRAD_DT);
    }
}
