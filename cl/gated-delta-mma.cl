/* The gated delta rule's chunked form (SPEC 3) on NVIDIA tensor cores:
 * mma.sync.m16n8k16 through inline PTX (cl/nv-mma.clh), bf16/f16 operands,
 * f32 accumulators and an f32 state. Elsewhere the same kernel runs with the
 * warp-wide operations emulated (lib/gated-delta/gated-delta-tiles.c does so
 * on request), which is how its fragment bookkeeping is tested on PoCL.
 *
 * Two kernels: gdn_chunk_prep, the first of the two stages the library runs
 * by default (the second is cl/gated-delta-scan.cl; see the end of this file),
 * and gdn_chunked_mma, the whole chunked form in one kernel, which runs where
 * the two stages' scratch buffer cannot be had or on request (scan=0 in
 * CLVARLEN_GDN_TUNING). The description below is the fused kernel's; the
 * first stage shares its steps 1-4.
 *
 * One work-group of four warps per (sequence, value head, V tile of CV_MVT
 * columns) walks the sequence's chunks of 64 tokens in order; the tile's
 * K x MVT state stays in local memory (f32) for the whole sequence. Per
 * chunk, warp w owns rows 16w .. 16w + 15:
 *   1. k rows (raw) into local memory; gates g, beta per row;
 *   2. with tensor cores: K K^T and Q K^T (the warp's rows x 64), K S and
 *      Q S (rows x MVT); the rows' squared norms on the way;
 *   3. A = beta_i rk_i rk_m (K K^T) e^(G_i - G_m) (m < i) into local memory,
 *      B = beta (V - e^G rk (K S)), P = rq_i rk_m (Q K^T) e^(G_i - G_m)
 *      (m <= i, in registers), Q S scaled by e^G rq;
 *   4. D = (I + A)^-1 B in f32, blockwise: the diagonal blocks inverted,
 *      their inverses applied to B's and A's blocks, three block steps;
 *   5. O = e^G rq (Q S) + P D with tensor cores;
 *   6. S <- e^(G_last) S + K^T (rk e^(G_last - G) D) with tensor cores.
 * Operands that are inputs (raw q, k rows) are exact in the operand type;
 * computed ones (S, D, P) are split into a rounded part and its remainder
 * (nv_split2), two or three products each, so the result keeps close to f32
 * accuracy (CV_MMA_SPLIT=0 rounds them once: faster, about 1e-2 off).
 *
 * -D: CV_K (multiple of 16, <= 128), CV_V, CV_DT = CV_DTYPE (CV_DT_BF16 or
 * CV_DT_F16), CV_ST_DT, CV_MVT (8, 16, 32 or 64), CV_NV_PTX (NVIDIA).
 * Local memory at K = 128, MVT = 32: 45 KiB.
 */

#ifndef CV_DTYPE
#define CV_DTYPE CV_DT_BF16
#endif
#ifndef CV_MVT
#define CV_MVT 32
#endif
#ifndef CV_MMA_SPLIT
#define CV_MMA_SPLIT 1
#endif

#define WG_SIZE 128
#define NWARPS 4
#define GC GDN_CHUNK                      /* 64 rows: 16 per warp */
#if GDN_CHUNK != 64
#error "the kernel takes chunks of 64 rows (16 per warp, the scan of G as 32 lane pairs)"
#endif
#define KSTEPS (CV_K / 16)                /* k16 steps over K; also m16 tiles of S's rows */
#define KT_PER_WARP ((KSTEPS + NWARPS - 1) / NWARPS)
#define NT_V (CV_MVT / 8)                 /* n8 tiles of the V tile */
#define NT_C (GC / 8)                     /* n8 tiles over a chunk's rows */
#define KP (CV_K + 8)                     /* staged k row pitch (16-bit elements) */
#define AP (GC + 1)                       /* A pitch (floats) */
#define SP (CV_MVT + 4)                   /* state and D pitches: B fragments' reads fall */
#define DP (CV_MVT + 4)                   /* in distinct banks */
#define TP (GC + 4)                     /* T's pitch (gdn_chunk_prep) */
#define X_WORDS (GC * KP / 2 > GC * AP ? GC * KP / 2 : GC * AP)

// clvarlen-include: nv-mma.clh

// clvarlen-include: gated-mma.clh

/* A fragment (rows r0.., columns c0..) of a row-major 16-bit local matrix. */
inline uint4 gdn_afrag(__local const ushort *m, int r0, int c0)
{
    const int lane = get_local_id(0) & 31, g = lane >> 2, t = lane & 3;
    __local const uint *w = (__local const uint *)m;
    const int at = ((r0 + g) * KP + c0 + 2 * t) >> 1;
    return (uint4)(w[at], w[at + 4 * KP], w[at + 4], w[at + 4 * KP + 4]);
}

/* A fragment of the transpose: A[r][c] = m[c][r] (K^T from the staged rows). */
inline uint4 gdn_afrag_t(__local const ushort *m, int r0, int c0)
{
    const int lane = get_local_id(0) & 31, g = lane >> 2, t = lane & 3;
    uint r[4];
    for (int q = 0; q < 4; q++) {
        const int row = r0 + g + 8 * (q & 1), col = c0 + 2 * t + 8 * (q >> 1);
        r[q] = (uint)m[col * KP + row] | ((uint)m[(col + 1) * KP + row] << 16);
    }
    return (uint4)(r[0], r[1], r[2], r[3]);
}

/* A fragment of q rows (raw, from global memory; rows at or past nr are 0),
 * and the squares of its elements added to the lane's two row sums. */
inline uint4 gdn_qfrag(__global const ushort *qh, long q_stride, int pairs, int r0, int nr,
                       int c0, float *n0, float *n1)
{
    const int lane = get_local_id(0) & 31, g = lane >> 2, t = lane & 3;
    uint r[4];
    for (int q = 0; q < 4; q++) {
        const int row = r0 + g + 8 * (q & 1), col = c0 + 2 * t + 8 * (q >> 1);
        ushort e0 = 0, e1 = 0;
        if (row < nr && pairs) { /* 4-byte aligned pairs: one load */
            const uint w = *(__global const uint *)(qh + row * q_stride + col);
            e0 = (ushort)(w & 0xffffu);
            e1 = (ushort)(w >> 16);
        } else if (row < nr) {
            e0 = qh[row * q_stride + col];
            e1 = qh[row * q_stride + col + 1];
        }
        const float f0 = nv_h2f(e0), f1 = nv_h2f(e1);
        if (q & 1)
            *n1 += f0 * f0 + f1 * f1;
        else
            *n0 += f0 * f0 + f1 * f1;
        r[q] = (uint)e0 | ((uint)e1 << 16);
    }
    return (uint4)(r[0], r[1], r[2], r[3]);
}

/* B fragment (16 x 8) whose column n is row n0 + n of a row-major 16-bit
 * local matrix: B = M^T (K K^T and Q K^T take k rows so). */
inline void gdn_bfrag_rows(__local const ushort *m, int n0, int k0, uint *b0, uint *b1)
{
    const int lane = get_local_id(0) & 31, g = lane >> 2, t = lane & 3;
    __local const uint *w = (__local const uint *)m;
    const int at = ((n0 + g) * KP + k0 + 2 * t) >> 1;
    *b0 = w[at];
    *b1 = w[at + 4];
}

/* B fragment (rows r0.., column c) of an f32 local matrix with pitch, rows
 * scaled by wt (NULL: 1), split into rounded parts and remainders. */
inline void gdn_bfrag_f32(__local const float *m, int pitch, int r0, int c,
                          __local const float *wt, uint *h0, uint *h1, uint *l0, uint *l1)
{
    const int t = get_local_id(0) & 3, r = r0 + 2 * t;
    float x0 = m[r * pitch + c], x1 = m[(r + 1) * pitch + c];
    float x2 = m[(r + 8) * pitch + c], x3 = m[(r + 9) * pitch + c];
    if (wt) {
        x0 *= wt[r];
        x1 *= wt[r + 1];
        x2 *= wt[r + 8];
        x3 *= wt[r + 9];
    }
    nv_split2(x0, x1, h0, l0);
    nv_split2(x2, x3, h1, l1);
}

/* The squares of an A fragment's elements added to the lane's two row sums. */
inline void gdn_frag_norms(uint4 f, float *n)
{
    const uint w[4] = {f.x, f.y, f.z, f.w};
    for (int q = 0; q < 4; q++) {
        const float f0 = nv_h2f((ushort)(w[q] & 0xffffu)), f1 = nv_h2f((ushort)(w[q] >> 16));
        n[q & 1] += f0 * f0 + f1 * f1;
    }
}

/* K K^T and Q K^T's k16 step s for the warp's rows (A fragments kf, qf). */
inline void gdn_kq_step(__local const ushort *Kc, int s, uint4 kf, uint4 qf, float4 *kk,
                        float4 *qk GDN_EMU_P)
{
    UNROLL
    for (int n = 0; n < NT_C; n++) {
        uint b0, b1;
        gdn_bfrag_rows(Kc, 8 * n, 16 * s, &b0, &b1);
        kk[n] = mma16816(kf, b0, b1, kk[n]);
        qk[n] = mma16816(qf, b0, b1, qk[n]);
    }
}

/* The chunk's tensor-core products for the warp's 16 rows (step 2), and the
 * rows' squared norms (lane sums, reduced by the caller). */
inline void gdn_products(__local const ushort *Kc, __local const float *S_l,
                         __global const ushort *qh, long q_stride, int nr, float4 *kk,
                         float4 *qk, float4 *ks, float4 *qs, float *nk, float *nq GDN_EMU_P)
{
    const int i0 = 16 * (get_local_id(0) >> 5), g = (get_local_id(0) & 31) >> 2;
    UNROLL
    for (int n = 0; n < NT_C; n++)
        kk[n] = qk[n] = (float4)(0.0f);
    for (int n = 0; n < NT_V; n++)
        ks[n] = qs[n] = (float4)(0.0f);
    for (int s = 0; s < KSTEPS; s++) {
        const int pairs = ((ulong)qh & 3) == 0 && (q_stride & 1) == 0;
        const uint4 qf = gdn_qfrag(qh, q_stride, pairs, i0, nr, 16 * s, &nq[0], &nq[1]);
        const uint4 kf = gdn_afrag(Kc, i0, 16 * s);
        gdn_frag_norms(kf, nk);
        gdn_kq_step(Kc, s, kf, qf, kk, qk GDN_EMU);
        UNROLL
        for (int n = 0; n < NT_V; n++) {
            uint h0, h1, l0, l1;
            gdn_bfrag_f32(S_l, SP, 16 * s, 8 * n + g, NULL, &h0, &h1, &l0, &l1);
            ks[n] = gdn_mma_x(kf, h0, h1, l0, l1, ks[n] GDN_EMU);
            qs[n] = gdn_mma_x(qf, h0, h1, l0, l1, qs[n] GDN_EMU);
        }
    }
}

/* Step 3 for the warp's rows: A into local memory, P in place of Q K^T, B
 * into D_l, Q S scaled. Rows past the chunk's end have beta = 0 and v = 0. */
inline void gdn_scale_ap(__local float *A_l, __local const float *G_l,
                         __local const float *beta_l, __local const float *rk_l,
                         __local const float *rq_l, float4 *kk, float4 *qk)
{
    const int lane = get_local_id(0) & 31, g = lane >> 2, t = lane & 3;
    const int i0 = 16 * (get_local_id(0) >> 5);
    UNROLL
    for (int n = 0; n < NT_C; n++) {
        float a[4] = {kk[n].x, kk[n].y, kk[n].z, kk[n].w};
        float p[4] = {qk[n].x, qk[n].y, qk[n].z, qk[n].w};
        UNROLL
        for (int e = 0; e < 4; e++) {
            const int i = i0 + g + 8 * (e >> 1), m = 8 * n + 2 * t + (e & 1);
            const float d = m <= i ? exp(G_l[i] - G_l[m]) : 0.0f;
            A_l[i * AP + m] = m < i ? beta_l[i] * rk_l[i] * rk_l[m] * a[e] * d : 0.0f;
            p[e] = rq_l[i] * rk_l[m] * p[e] * d;
        }
        qk[n] = (float4)(p[0], p[1], p[2], p[3]);
    }
}

inline void gdn_scale(__local float *A_l, __local float *D_l, __local const float *G_l,
                      __local const float *beta_l, __local const float *rk_l,
                      __local const float *rq_l, float4 *kk, float4 *qk, float4 *ks, float4 *qs,
                      __global const uchar *vb, long v_stride, long c0, int nr, int h, int v0)
{
    const int lane = get_local_id(0) & 31, g = lane >> 2, t = lane & 3;
    const int i0 = 16 * (get_local_id(0) >> 5);
    gdn_scale_ap(A_l, G_l, beta_l, rk_l, rq_l, kk, qk);
    for (int n = 0; n < NT_V; n++) {
        float x[4] = {ks[n].x, ks[n].y, ks[n].z, ks[n].w};
        float y[4] = {qs[n].x, qs[n].y, qs[n].z, qs[n].w};
        for (int e = 0; e < 4; e++) {
            const int i = i0 + g + 8 * (e >> 1), c = 8 * n + 2 * t + (e & 1), vv = v0 + c;
            const float eG = exp(G_l[i]);
            const float vx = (i < nr && vv < CV_V)
                                 ? LOAD_ACT(vb, (c0 + i) * v_stride + (long)h * CV_V + vv)
                                 : 0.0f;
            D_l[i * DP + c] = beta_l[i] * (vx - eG * rk_l[i] * x[e]);
            y[e] *= eG * rq_l[i];
        }
        qs[n] = (float4)(y[0], y[1], y[2], y[3]);
    }
}

/* Column j of (I + A_rr)^-1 for a 16 x 16 diagonal block Ab of A (pitch AP,
 * its strictly lower part read), by forward substitution, into x (zero above
 * row j). The loops' bounds are constants (every row from 0, the zeros
 * included), so x stays in registers. */
inline void gdn_diag_inverse_col(__local const float *Ab, int j, float *x)
{
    UNROLL
    for (int ii = 0; ii < 16; ii++) {
        float s = ii == j ? 1.0f : 0.0f;
        UNROLL
        for (int mm = 0; mm < ii; mm++)
            s -= Ab[ii * AP + mm] * x[mm];
        x[ii] = s;
    }
}

/* Step 4: D_l <- (I + A)^-1 D_l, blockwise over 16 x 16 blocks (r, c):
 *   1. T_rr = (I + A_rr)^-1 (column j of block r by work-item 16 r + j), its
 *      strictly lower part stored transposed in the (unused) strictly upper
 *      part of A_rr, so that the inversion reads and writes disjoint words;
 *   2. B_r <- T_rr B_r and A_rc <- T_rr A_rc (c < r) in place, one column of
 *      one block per work-item, bottom row first (T_rr is unit lower
 *      triangular: row i's result reads rows above it only);
 *   3. D_r = B_r - sum_{c<r} A_rc D_c for r = 1, 2, 3, in place (each element
 *      reads blocks already final).
 * Five barriers, the last of them before A's words are reused. */
inline void gdn_solve(__local float *A_l, __local float *D_l)
{
    const int tasks = GC / 16 * CV_MVT + 6 * 16; /* columns of B's 4 blocks, of A's 6 */
    const int lid = get_local_id(0);
    if (lid < GC) {
        const int rb = lid / 16, j = lid % 16;
        __local float *Ab = A_l + 16 * rb * AP + 16 * rb;
        float x[16];
        gdn_diag_inverse_col(Ab, j, x);
        UNROLL
        for (int ii = 0; ii < 16; ii++)
            if (ii > j)
                Ab[j * AP + ii] = x[ii]; /* T[ii][j] */
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int e = lid; e < tasks; e += WG_SIZE) {
        int rb, stride, at;
        __local float *m;
        if (e < GC / 16 * CV_MVT) { /* column e % CV_MVT of B's block e / CV_MVT */
            rb = e / CV_MVT;
            m = D_l;
            stride = DP;
            at = 16 * rb * DP + e % CV_MVT;
        } else { /* column of A_rc: (r, c) = (1,0) (2,0) (2,1) (3,0) (3,1) (3,2) */
            const int f = e - GC / 16 * CV_MVT, p = f / 16;
            rb = p < 1 ? 1 : p < 3 ? 2 : 3;
            const int cb = p - (rb * (rb - 1)) / 2;
            m = A_l;
            stride = AP;
            at = 16 * rb * AP + 16 * cb + f % 16;
        }
        __local const float *T = A_l + 16 * rb * AP + 16 * rb; /* T[ii][jj] = T[jj * AP + ii] */
        float y[16];
        UNROLL
        for (int ii = 0; ii < 16; ii++)
            y[ii] = m[at + ii * stride];
        UNROLL
        for (int ii = 15; ii > 0; ii--) {
            float s = y[ii];
            UNROLL
            for (int jj = 0; jj < ii; jj++)
                s += T[jj * AP + ii] * y[jj];
            m[at + ii * stride] = s;
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int rb = 1; rb < GC / 16; rb++) {
        for (int e = lid; e < 16 * CV_MVT; e += WG_SIZE) {
            const int row = 16 * rb + e / CV_MVT, c = e % CV_MVT;
            float s = D_l[row * DP + c];
            for (int mm = 0; mm < 16 * rb; mm++)
                s -= A_l[row * AP + mm] * D_l[mm * DP + c];
            D_l[row * DP + c] = s;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}

/* A fragment (rows r0.., columns c0..) of an f32 local matrix with pitch,
 * split into rounded parts and remainders. */
inline void gdn_afrag_f32(__local const float *m, int pitch, int r0, int c0, uint4 *hi, uint4 *lo)
{
    const int lane = get_local_id(0) & 31, g = lane >> 2, t = lane & 3;
    __local const float *a = m + (r0 + g) * pitch + c0 + 2 * t, *b = a + 8 * pitch;
    uint h[4], l[4];
    nv_split2(a[0], a[1], &h[0], &l[0]);
    nv_split2(b[0], b[1], &h[1], &l[1]);
    nv_split2(a[8], a[9], &h[2], &l[2]);
    nv_split2(b[8], b[9], &h[3], &l[3]);
    *hi = (uint4)(h[0], h[1], h[2], h[3]);
    *lo = (uint4)(l[0], l[1], l[2], l[3]);
}

/* The A fragment of k16 step s from accumulators y[2 s], y[2 s + 1] (an
 * m16 x n16 result is the A operand of the next product), split. */
inline void gdn_acc_afrag(const float4 p0, const float4 p1, uint4 *hi, uint4 *lo)
{
    uint w[8];
    nv_split2(p0.x, p0.y, &w[0], &w[4]);
    nv_split2(p0.z, p0.w, &w[1], &w[5]);
    nv_split2(p1.x, p1.y, &w[2], &w[6]);
    nv_split2(p1.z, p1.w, &w[3], &w[7]);
    *hi = (uint4)(w[0], w[1], w[2], w[3]);
    *lo = (uint4)(w[4], w[5], w[6], w[7]);
}

/* The negated m16 x n8 accumulator c into rows r0.., columns c0.. of T_l. */
inline void gdn_store_neg(__local float *T_l, int r0, int c0, float4 c)
{
    const int lane = get_local_id(0) & 31, g = lane >> 2, t = lane & 3;
    __local float *a = T_l + (r0 + g) * TP + c0 + 2 * t;
    a[0] = -c.x;
    a[1] = -c.y;
    a[8 * TP] = -c.z;
    a[8 * TP + 1] = -c.w;
}

/* gdn_chunk_prep's step 4: T = (I + A)^-1 into T_l (pitch TP, zero on entry)
 * from A (strictly lower, f32, pitch AP), by blocks of the lower triangular
 * inverse, [[T11, 0], [-T22 A21 T11, T22]] for [[I + A11, 0], [A21, I + A22]]:
 *   1. the four 16 x 16 diagonal blocks by forward substitution in f32,
 *      column j of block r by work-item 16 r + j;
 *   2. the two 16 x 16 blocks below them, T_{r+1,r} = -T_{r+1,r+1} A_{r+1,r}
 *      T_{r,r} (r = 0, 2), with tensor cores: warp w does pair w / 2, n8
 *      tile w % 2 of the result (the first product, 16 x 16, twice);
 *   3. the 32 x 32 block below the halves, -T_hh A_hl T_ll, the same way:
 *      warp w does its rows 32 + 16 (w / 2), columns 16 (w % 2) ...
 * Operands are split (rounded part and remainder) as in the scan, so T keeps
 * close to f32 accuracy. Every warp runs every product (the emulation needs
 * that). Three barriers, the last before A's words are reused. */
inline void gdn_invert(__local const float *A_l, __local float *T_l GDN_EMU_P)
{
    const int lid = get_local_id(0), warp = lid >> 5, g = (lid & 31) >> 2;
    if (lid < GC) {
        const int rb = lid / 16, j = lid % 16;
        __local const float *Ab = A_l + 16 * rb * AP + 16 * rb;
        __local float *Tb = T_l + 16 * rb * TP + 16 * rb;
        float x[16];
        gdn_diag_inverse_col(Ab, j, x);
        UNROLL
        for (int ii = 0; ii < 16; ii++)
            Tb[ii * TP + j] = x[ii];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    {
        const int r = 16 * (2 * (warp >> 1) + 1), c = r - 16, nh = warp & 1;
        float4 y[2];
        uint4 ah, al;
        gdn_afrag_f32(T_l, TP, r, r, &ah, &al);
        UNROLL
        for (int n = 0; n < 2; n++) {
            uint h0, h1, l0, l1;
            gdn_bfrag_f32(A_l, AP, r, c + 8 * n + g, NULL, &h0, &h1, &l0, &l1);
            y[n] = gdn_mma_xx(ah, al, h0, h1, l0, l1, (float4)(0.0f) GDN_EMU);
        }
        uint h0, h1, l0, l1;
        gdn_acc_afrag(y[0], y[1], &ah, &al);
        gdn_bfrag_f32(T_l, TP, c, c + 8 * nh + g, NULL, &h0, &h1, &l0, &l1);
        gdn_store_neg(T_l, r, c + 8 * nh,
                      gdn_mma_xx(ah, al, h0, h1, l0, l1, (float4)(0.0f) GDN_EMU));
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    {
        const int r = 32 + 16 * (warp >> 1), nh = warp & 1;
        float4 y[4] = {(float4)(0.0f), (float4)(0.0f), (float4)(0.0f), (float4)(0.0f)};
        UNROLL
        for (int s = 0; s < 2; s++) {
            uint4 ah, al;
            gdn_afrag_f32(T_l, TP, r, 32 + 16 * s, &ah, &al);
            UNROLL
            for (int n = 0; n < 4; n++) {
                uint h0, h1, l0, l1;
                gdn_bfrag_f32(A_l, AP, 32 + 16 * s, 8 * n + g, NULL, &h0, &h1, &l0, &l1);
                y[n] = gdn_mma_xx(ah, al, h0, h1, l0, l1, y[n] GDN_EMU);
            }
        }
        float4 z[2] = {(float4)(0.0f), (float4)(0.0f)};
        UNROLL
        for (int s = 0; s < 2; s++) {
            uint4 ah, al;
            gdn_acc_afrag(y[2 * s], y[2 * s + 1], &ah, &al);
            UNROLL
            for (int n = 0; n < 2; n++) {
                uint h0, h1, l0, l1;
                gdn_bfrag_f32(T_l, TP, 16 * s, 16 * nh + 8 * n + g, NULL, &h0, &h1, &l0, &l1);
                z[n] = gdn_mma_xx(ah, al, h0, h1, l0, l1, z[n] GDN_EMU);
            }
        }
        for (int n = 0; n < 2; n++) /* a block no warp reads here */
            gdn_store_neg(T_l, r, 16 * nh + 8 * n, z[n]);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
}

/* Step 5: O = Q S (scaled, in o_acc) + P D for the warp's rows, stored. */
inline void gdn_output(__local const float *D_l, float4 *qk, float4 *o_acc, __global uchar *ob,
                       long o_stride, long c0, int nr, int h, int v0 GDN_EMU_P)
{
    const int lane = get_local_id(0) & 31, g = lane >> 2, t = lane & 3;
    const int warp = get_local_id(0) >> 5, i0 = 16 * warp;
    for (int kb = 0; kb < GC / 16; kb++) {
        if (PTX_ON && kb > warp) /* P is zero right of the diagonal block */
            continue;
        const float4 p0 = qk[2 * kb], p1 = qk[2 * kb + 1];
        uint4 ph, pl;
        uint w[8];
        nv_split2(p0.x, p0.y, &w[0], &w[4]);
        nv_split2(p0.z, p0.w, &w[1], &w[5]);
        nv_split2(p1.x, p1.y, &w[2], &w[6]);
        nv_split2(p1.z, p1.w, &w[3], &w[7]);
        ph = (uint4)(w[0], w[1], w[2], w[3]);
        pl = (uint4)(w[4], w[5], w[6], w[7]);
        UNROLL
        for (int n = 0; n < NT_V; n++) {
            uint h0, h1, l0, l1;
            gdn_bfrag_f32(D_l, DP, 16 * kb, 8 * n + g, NULL, &h0, &h1, &l0, &l1);
            o_acc[n] = gdn_mma_xx(ph, pl, h0, h1, l0, l1, o_acc[n] GDN_EMU);
        }
    }
    for (int n = 0; n < NT_V; n++) {
        const float y[4] = {o_acc[n].x, o_acc[n].y, o_acc[n].z, o_acc[n].w};
        for (int e = 0; e < 4; e++) {
            const int i = i0 + g + 8 * (e >> 1), vv = v0 + 8 * n + 2 * t + (e & 1);
            if (i < nr && vv < CV_V)
                cv_store_f(ob, (c0 + i) * o_stride + (long)h * CV_V + vv, y[e], CV_DT);
        }
    }
}

/* Step 6: the warp's m16 tiles of state rows (tile w, w + 4, ...):
 * S <- e^(G_last) S + K^T (w D), w_i = rk_i e^(G_last - G_i). The k16 steps
 * outside the tiles: each (w D) fragment is formed once for all the tiles. */
inline void gdn_state_update(__local float *S_l, __local const ushort *Kc,
                             __local const float *D_l, __local const float *w_l, float eGl
                             GDN_EMU_P)
{
    const int lane = get_local_id(0) & 31, g = lane >> 2, t = lane & 3;
    const int warp = get_local_id(0) >> 5;
    float4 acc[KT_PER_WARP][NT_V];
    UNROLL
    for (int j = 0; j < KT_PER_WARP; j++) {
        const int mt = warp + NWARPS * j;
        const bool mine = mt < KSTEPS; /* the emulation needs every warp in every mma */
        for (int n = 0; n < NT_V; n++) {
            float c[4];
            for (int e = 0; e < 4; e++) {
                const int row = 16 * mt + g + 8 * (e >> 1), col = 8 * n + 2 * t + (e & 1);
                c[e] = mine ? eGl * S_l[row * SP + col] : 0.0f;
            }
            acc[j][n] = (float4)(c[0], c[1], c[2], c[3]);
        }
    }
    for (int kb = 0; kb < GC / 16; kb++) {
        uint h0[NT_V], h1[NT_V], l0[NT_V], l1[NT_V];
        UNROLL
        for (int n = 0; n < NT_V; n++)
            gdn_bfrag_f32(D_l, DP, 16 * kb, 8 * n + g, w_l, &h0[n], &h1[n], &l0[n], &l1[n]);
        UNROLL
        for (int j = 0; j < KT_PER_WARP; j++) {
            const int mt = warp + NWARPS * j;
            const uint4 a = mt < KSTEPS ? gdn_afrag_t(Kc, 16 * mt, 16 * kb) : (uint4)(0u);
            UNROLL
            for (int n = 0; n < NT_V; n++)
                acc[j][n] = gdn_mma_x(a, h0[n], h1[n], l0[n], l1[n], acc[j][n] GDN_EMU);
        }
    }
    UNROLL
    for (int j = 0; j < KT_PER_WARP; j++) {
        const int mt = warp + NWARPS * j;
        if (mt < KSTEPS)
            for (int n = 0; n < NT_V; n++) {
                const float c[4] = {acc[j][n].x, acc[j][n].y, acc[j][n].z, acc[j][n].w};
                for (int e = 0; e < 4; e++) {
                    const int row = 16 * mt + g + 8 * (e >> 1), col = 8 * n + 2 * t + (e & 1);
                    S_l[row * SP + col] = c[e];
                }
            }
    }
}

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void gdn_chunked_mma(GDN_ARGS)
{
    __local uint X_l[X_WORDS] __attribute__((aligned(16))); /* k rows (16-bit), or A (f32) */
    __local float S_l[CV_K * SP];         /* state tile [k][v] */
    __local float D_l[GC * DP];           /* B, then D */
    __local float g_l[GC], G_l[GC], beta_l[GC], rk_l[GC], rq_l[GC], w_l[GC];
    EMU_DECL
#ifndef CV_NV_PTX
    __local uint *emu = emu_scratch;
#endif
    __local ushort *Kc = (__local ushort *)X_l;
    __local float *A_l = (__local float *)X_l;

    const int lid = get_local_id(0);
    const long grp = get_group_id(0);
    const int vt = (int)(grp % ((CV_V + CV_MVT - 1) / CV_MVT));
    const long rest = grp / ((CV_V + CV_MVT - 1) / CV_MVT);
    const int h = (int)(rest % HV);
    const long n = rest / HV;
    long bos, eos;
    if (!gdn_chunked_seq(cu, cu_off, fixed_len, total, flags, n, n_seqs, chunk_min, check, &bos,
                         &eos))
        return;

    const int hq = h / group, v0 = vt * CV_MVT;
    const long head_off = (long)h * CV_K * CV_V;
    const long slot = (flags & GDN_HAS_POOL)
                          ? gdn_slot(sidx, sidx_off, flags & GDN_HAS_SIDX, n, slots)
                          : -1;
    const int skv = (flags & GDN_STATE_KV) != 0, l2 = (flags & GDN_L2NORM) != 0;
    for (int e = lid; e < CV_K * CV_MVT; e += WG_SIZE) {
        const int vv = skv ? e % CV_MVT : e / CV_K, kk = skv ? e / CV_MVT : e % CV_K;
        float x = 0.0f;
        if (slot >= 0 && v0 + vv < CV_V)
            x = LOAD_ST(pool + pool_off,
                        slot * slot_pitch + head_off + gdn_state_at(skv, kk, v0 + vv));
        S_l[kk * SP + vv] = x;
    }
    const float A = exp(CV_CPTR(float, A_log, A_log_off)[h]);
    const float bias = gdn_bias(dt_bias, dt_bias_off, h, flags);
    __global const uchar *ab = a + a_off, *bb = b + b_off, *vb = v + v_off;

    for (long c0 = bos; c0 < eos; c0 += GC) {
        const int nr = (int)min((long)GC, eos - c0);
        __global const ushort *kh = CV_CPTR(ushort, k, k_off) + c0 * k_stride + (long)hq * CV_K;
        __global const ushort *qh = CV_CPTR(ushort, q, q_off) + c0 * q_stride + (long)hq * CV_K;
        barrier(CLK_LOCAL_MEM_FENCE); /* the last chunk's readers are done */
        gdn_stage_rows(Kc, kh, k_stride, nr);
        gdn_gates(g_l, beta_l, ab, a_stride, bb, b_stride, c0, nr, h, A, bias, sp_beta,
                  sp_threshold);
        barrier(CLK_LOCAL_MEM_FENCE);

        float4 kk[NT_C], qk[NT_C], ks[NT_V], qs[NT_V];
        float nk[2] = {0.0f, 0.0f}, nq[2] = {0.0f, 0.0f};
        gdn_products(Kc, S_l, qh, q_stride, nr, kk, qk, ks, qs, nk, nq GDN_EMU);
        gdn_norms_and_G(nk, nq, l2, scale, rk_l, rq_l, g_l, G_l GDN_EMU);
        barrier(CLK_LOCAL_MEM_FENCE); /* norms and G ready; Kc read for the last time */
        const float G_last = G_l[nr - 1];
        for (int r = lid; r < GC; r += WG_SIZE)
            w_l[r] = rk_l[r] * exp(G_last - G_l[r]);
        gdn_scale(A_l, D_l, G_l, beta_l, rk_l, rq_l, kk, qk, ks, qs, vb, v_stride, c0, nr, h, v0);
        barrier(CLK_LOCAL_MEM_FENCE);
        gdn_solve(A_l, D_l);
        gdn_stage_rows(Kc, kh, k_stride, nr); /* A is done: the k rows again, for K^T D */
        barrier(CLK_LOCAL_MEM_FENCE);
        gdn_output(D_l, qk, qs, o + o_off, o_stride, c0, nr, h, v0 GDN_EMU);
        gdn_state_update(S_l, Kc, D_l, w_l, exp(G_last) GDN_EMU);
    }

    barrier(CLK_LOCAL_MEM_FENCE);
    if (slot >= 0 && (flags & GDN_WRITE_BACK)) {
        for (int e = lid; e < CV_K * CV_MVT; e += WG_SIZE) {
            const int vv = skv ? e % CV_MVT : e / CV_K, kk = skv ? e / CV_MVT : e % CV_K;
            if (v0 + vv < CV_V)
                STORE_ST(pool + pool_off,
                         slot * slot_pitch + head_off + gdn_state_at(skv, kk, v0 + vv),
                         S_l[kk * SP + vv]);
        }
    }
    GDN_END_BARRIER();
}

/* ------------------------------------------------------------------------
 * gdn_chunk_prep: the first stage of the two-stage chunked path (the second,
 * gdn_chunk_scan, is cl/gated-delta-scan.cl). One work-group per (chunk slot,
 * run of hper <= GDN_PREP_MAX value heads from h0 + hper * j that share a key
 * head), all in parallel: steps 1-4 above without the state. The chunk's k
 * and q rows are staged in local memory (q in T's place, all loads in flight
 * at once), and K K^T, Q K^T and the rows' norms are formed once for the run;
 * each head's gates, G and P follow at once; then, head by head, A from K K^T
 * (kept in the upper triangle of A's own local memory) and T = (I + A)^-1
 * (gdn_invert). Decays e^(G_i - G_m) by gdn_decay. Writes to the (slot, head)
 * scratch (GDN_SCR_FLOATS, cv-shared.h): T and P (P[i][m] = rq_i rk_m
 * (q_i . k_m) e^(G_i - G_m) for m <= i, else 0; rq with the scale) as the
 * scan's B fragments (below; T's split, 16 KiB, P's rounded, 8 KiB), then the
 * rows' factors with their decays (e^G rk, beta, rk e^(G_last - G), e^G rq,
 * e^G_last; exp, as the fused kernel takes them). Sequence n's chunks take
 * slots bos_n / 64 + n + j, j = 0, 1, ...: disjoint for any lengths, all
 * below total / 64 + n_seqs + 1 (n_slots); a slot that is no sequence's chunk
 * writes nothing. Built with CV_GDN_ROWS, T and P are written as 64 x 64
 * tiles for the wgmma scan instead (below). The host keeps a run inside one
 * key head's group (hper divides the group size, h0 and hcount).

 */
// clvarlen-include: gated-prep.clh

#if GC * KP > 2 * GC * TP
#error "gdn_chunk_prep stages the q rows in T's local memory: K up to 128"
#endif
#if WG_SIZE != 2 * GC || 4 * 16 * 32 * 4 > GC * TP * 4
#error "gdn_chunk_prep: A's entries by row pairs over 128 work-items, P's rows staged in T's place"
#endif

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void
gdn_chunk_prep(GDN_ARGS, __global float *scr, long n_slots, int h0, int hcount, int hper)
{
    /* k rows (16-bit); then A (f32, strictly lower) with K K^T's strictly lower
     * part, transposed, in its upper triangle */
    __local uint X_l[X_WORDS] __attribute__((aligned(16)));
    __local float D_l[GC * TP] __attribute__((aligned(16))); /* the q rows, then T */
    __local float g_l[GDN_PREP_MAX * GC], G_l[GDN_PREP_MAX * GC], beta_l[GDN_PREP_MAX * GC];
    __local float rk_l[GC], rq_l[GC];
    EMU_DECL
#ifndef CV_NV_PTX
    __local uint *emu = emu_scratch;
#endif
    __local ushort *Kc = (__local ushort *)X_l, *Qc = (__local ushort *)D_l;
    __local float *A_l = (__local float *)X_l;

    const int lid = get_local_id(0), g = (lid & 31) >> 2, t = lid & 3;
    const int i0 = 16 * (lid >> 5);
    const long grp = get_group_id(0);
    const int runs = hcount / hper;
    const int hb = h0 + hper * (int)(grp % runs);
    const long x = grp / runs;
    long n, c0;
    int nr;
    if (x >= n_slots || hper > GDN_PREP_MAX ||
        !gdn_chunk_of_slot(cu, cu_off, fixed_len, total, flags, n_seqs, chunk_min, check, x, &n,
                           &c0, &nr))
        return;
    const int hq = hb / group, l2 = (flags & GDN_L2NORM) != 0;
    __global const uchar *ab = a + a_off, *bb = b + b_off;
    __global float *sp0 = scr + (x * hcount + (hb - h0)) * (long)GDN_SCR_FLOATS;

    gdn_stage_rows_async(Kc, CV_CPTR(ushort, k, k_off) + c0 * k_stride + (long)hq * CV_K,
                         k_stride, nr);
    gdn_stage_rows_async(Qc, CV_CPTR(ushort, q, q_off) + c0 * q_stride + (long)hq * CV_K,
                         q_stride, nr);
    for (int j = 0; j < hper; j++) {
        const int h = hb + j;
        const float A = exp(CV_CPTR(float, A_log, A_log_off)[h]);
        const float bias = gdn_bias(dt_bias, dt_bias_off, h, flags);
        gdn_gates(g_l + j * GC, beta_l + j * GC, ab, a_stride, bb, b_stride, c0, nr, h, A, bias,
                  sp_beta, sp_threshold);
    }
    cp_async_wait_all(); /* the k and q rows */
    barrier(CLK_LOCAL_MEM_FENCE);

    float4 kk[NT_C], qk[NT_C];
    float nk[2] = {0.0f, 0.0f}, nq[2] = {0.0f, 0.0f};
    UNROLL
    for (int m = 0; m < NT_C; m++)
        kk[m] = qk[m] = (float4)(0.0f);
    for (int s = 0; s < KSTEPS; s++) { /* K K^T, Q K^T and the rows' norms */
        const uint4 kf = gdn_afrag(Kc, i0, 16 * s), qf = gdn_afrag(Qc, i0, 16 * s);
        gdn_frag_norms(kf, nk);
        gdn_frag_norms(qf, nq);
        gdn_kq_step(Kc, s, kf, qf, kk, qk GDN_EMU);
    }
    for (int j = 0; j < hper; j++) {
        float nk2[2] = {nk[0], nk[1]}, nq2[2] = {nq[0], nq[1]};
        gdn_norms_and_G(nk2, nq2, l2, scale, rk_l, rq_l, g_l + j * GC, G_l + j * GC GDN_EMU);
    }
    barrier(CLK_LOCAL_MEM_FENCE); /* norms and G ready; the k and q rows read */
    UNROLL
    for (int nn = 0; nn < NT_C; nn++) { /* K K^T (i, m), m < i, at A_l[m][i] */
        const float c[4] = {kk[nn].x, kk[nn].y, kk[nn].z, kk[nn].w};
        UNROLL
        for (int e = 0; e < 4; e++) {
            const int i = i0 + g + 8 * (e >> 1), m = 8 * nn + 2 * t + (e & 1);
            if (m < i)
                A_l[m * AP + i] = c[e];
        }
    }
    for (int j = 0; j < hper; j++) /* P's rows staged in T's place (D_l) */
        gdn_prep_p(G_l + j * GC, rk_l, rq_l, qk, sp0 + j * (long)GDN_SCR_FLOATS + GDN_SCR_P,
                   (__local uint *)D_l);
    barrier(CLK_LOCAL_MEM_FENCE);
    /* T's blocks (0, 1) and (2, 3) zero (gdn_invert reads them; it writes neither) */
    for (int e = lid; e < 2 * 256; e += WG_SIZE) {
        const int r = 32 * (e >> 8) + ((e >> 4) & 15), c = r - ((e >> 4) & 15) + 16 + (e & 15);
        D_l[r * TP + c] = 0.0f;
    }
    gdn_prep_heads(A_l, D_l, G_l, beta_l, rk_l, rq_l, hper, nr, sp0 GDN_EMU);
    GDN_END_BARRIER();
}
