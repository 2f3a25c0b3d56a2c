/* The gated delta rule's chunked form (SPEC 3), second stage, on NVIDIA
 * tensor cores (mma.sync m16n8k16 through cl/nv-mma.clh; emulated elsewhere,
 * which is how PoCL tests its fragment bookkeeping).
 *
 * The first stage, gdn_chunk_prep in cl/gated-delta-mma.cl, ran in parallel
 * over every (chunk, value head) and left in the scratch buffer, per chunk:
 * T = (I + A)^-1 and P[i][m] = rq_i rk_m (q_i . k_m) e^(G_i - G_m) (m <= i,
 * scale included) as ready B fragments (T's split, P's rounded), and the
 * rows' factors with their decays (f32: e^G rk, beta, w, e^G rq, e^G_last;
 * cv-shared.h), so that no exponential is left here. What is left depends on
 * the state and runs here, in order over a sequence's chunks, with the state
 * transposed (S^T, V x K) in registers: warp w of a work-group owns V rows
 * v0 + 16 w .. + 15 and needs nothing from the other warps, so the only
 * barriers are the ones around staging the chunk's operands in local memory:
 * the k rows, T's fragments and the rows' values first, then (in T's place)
 * the q rows and P's fragments. A warp's v and o values pass through its own
 * 512 bytes of local memory (sc_vload), so that global memory sees 16-byte
 * accesses. With S^T as the A operand (its accumulator fragments are A
 * fragments, no shuffles), per chunk of 64 rows:
 *   X^T = S^T K^T                           (k rows raw: exact operands)
 *   Y^T = beta (V^T - e^G rk X^T)           (f32, in the accumulators)
 *   D^T = Y^T T^T                           (D = T B = U - W S of SPEC 3)
 *   O^T = e^G rq (S^T Q^T) + D^T P^T        stored
 *   S^T = e^(G_last) S^T + (D^T w) K,       w_i = rk_i e^(G_last - G_i)
 * Operands that feed the state (S in X^T, Y, D, T) are split into a rounded
 * part and its remainder (nv_split2), so those products keep close to f32
 * accuracy (CV_MMA_SPLIT=0 rounds them once); those that reach only the
 * output (S in S^T Q^T, P, and D in D^T P^T unless CV_GDN_OSPLIT) are
 * rounded once: the output is 16-bit anyway.
 *
 * CV_GDN_WG (K 64 or 128, 8 warps): the same steps on Hopper's wgmma
 * (cl/nv-wgmma.clh; emulated elsewhere): each warpgroup's 64 V rows are the
 * A operand (from registers, the accumulators' fragments as above), every B
 * operand is read by descriptor from local memory in the 128-byte swizzled
 * layout: the k and q rows (K-major for X^T and S^T Q^T, the k rows N-major
 * for the update), T's rounded part and remainder and P as 64 x 64 tiles that
 * the first stage wrote already swizzled (built with CV_GDN_ROWS), copied as
 * they are. There are two sets of these operands and of the chunk's v rows,
 * and no work-group barrier in the loop: chunk c + 1's set is staged half-way
 * through chunk c, guarded by mbarriers, and the two warpgroups take turns on
 * the tensor cores (named barriers), so that one's splitting, scaling and
 * stores run beside the other's products (docs/PERFORMANCE.md, the section
 * "the scan's two warpgroups taking turns": the scan's time 10-17% lower than
 * with both running the same step at once).
 *
 * -D: CV_K (multiple of 16, <= 128), CV_V, CV_DT = CV_DTYPE (CV_DT_BF16 or
 * CV_DT_F16), CV_ST_DT, CV_SW (warps per work-group: 1, 2, 4 or 8),
 * CV_NV_PTX (NVIDIA), CV_GDN_WG (with CV_SM90A on NVIDIA). Local memory at
 * K = 128 and 8 warps: 47 KiB, 153 KiB with CV_GDN_WG (static arrays, which
 * NVIDIA's OpenCL allows up to 226 KiB, against 48 KiB for a `__local`
 * argument: docs/PERFORMANCE.md; the host checks the wgmma form's need
 * against that).
 */

#ifndef CV_DTYPE
#define CV_DTYPE CV_DT_BF16
#endif
#ifndef CV_SW
#define CV_SW 8
#endif
/* CV_GDN_L2PRE: the next chunk's k, q and v rows and its scratch asked into L2
 * (prefetch.global.L2, one per 128-byte line) as this chunk starts, so that
 * its staging waits for L2 rather than DRAM. */
#ifndef CV_GDN_L2PRE
#define CV_GDN_L2PRE 0
#endif
/* The wgmma form's staged v rows (the group's 16 CV_SW columns): their pitch,
 * so that sc_vload_set reads them without bank conflicts. */
#define PP_VP (16 * CV_SW + 8)
/* O's D^T P^T with D split (1) or rounded once (0; O is 16-bit, D P reaches
 * nothing else). */
#ifndef CV_GDN_OSPLIT
#define CV_GDN_OSPLIT 0
#endif
#ifndef CV_MMA_SPLIT
#define CV_MMA_SPLIT 1
#endif

#define WG_SIZE (32 * CV_SW)
#define GC 64
#if GDN_CHUNK != 64
#error "the scan takes chunks of 64 rows"
#endif
#define KSTEPS (CV_K / 16)    /* k16 steps over K */
#define NT_K (CV_K / 8)       /* n8 tiles of S^T's K columns */
#define NT_C (GC / 8)         /* n8 tiles over a chunk's rows */
#define KP (CV_K + 8)         /* staged row pitch (16-bit elements): ldmatrix rows in distinct banks */
/* The scratch of one (chunk, head) is GDN_SCR_FLOATS (cv-shared.h): T^T's B
 * fragments (uint4: rounded pairs, remainders; 32 tiles x 32 lanes), P^T's
 * (uint2, rounded only: P reaches the output alone, not the state), then the
 * rows' factors (GDN_SCR_ROWS_N floats: e^G rk, beta, w, e^G rq, e^G_last). */
/* The second part of local memory: T^T's fragments (16 KiB), or the q rows and
 * P^T's fragments (8 KiB), in 16-bit units. */
#define SC_R2_SHORTS (GC * KP + 32 * 32 * 4 > 32 * 32 * 8 ? GC * KP + 32 * 32 * 4 : 32 * 32 * 8)

// clvarlen-include: nv-mma.clh
// clvarlen-include: gated-mma.clh
// clvarlen-include: nv-wgmma.clh
// clvarlen-include: nv-wgmma-once.clh

/* Two accumulator tiles (columns 16 s ..) as the A fragment they form, split. */
inline void sc_afrag(float4 c0, float4 c1, uint4 *hi, uint4 *lo)
{
    uint h[4], l[4];
    nv_split2(c0.x, c0.y, &h[0], &l[0]);
    nv_split2(c0.z, c0.w, &h[1], &l[1]);
    nv_split2(c1.x, c1.y, &h[2], &l[2]);
    nv_split2(c1.z, c1.w, &h[3], &l[3]);
    *hi = (uint4)(h[0], h[1], h[2], h[3]);
    *lo = (uint4)(l[0], l[1], l[2], l[3]);
}

/* Whether k16 step kb of n8 tile i of a lower triangular 64 x 64 matrix can
 * be nonzero (the fragments' tiles right of the diagonal are never read). */
#define SC_TILE_USED(i, kb) ((kb) <= (i) / 2)

/* The v and o values of a warp's 16 V rows (vr0 ..) pass through its 512 bytes of
 * local memory xw, 16 chunk rows at a time (16 16-bit columns each, two 16-byte
 * units per row), so that global memory sees one 16-byte access per lane where
 * the fragments' layout would take eight 16-bit ones. vec: the rows' 8-value
 * runs are 16-byte aligned (base, stride, CV_V); else, and past CV_V, 16-bit.
 * Every lane of the warp calls these (warp_sync). */

/* Eight 16-bit values from src as one 16-byte unit: the first n (0 to 8) of
 * them, the rest 0; one 16-byte load where vec (src 16-byte aligned) and n is 8. */
inline uint4 sc_ld8(__global const ushort *src, int n, bool vec)
{
    if (vec && n == 8)
        return *(__global const uint4 *)src;
    uint w[4] = {0u, 0u, 0u, 0u};
    UNROLL
    for (int e = 0; e < 8; e++) /* constant bounds: w stays in registers */
        if (e < n)
            w[e >> 1] |= (uint)src[e] << (16 * (e & 1));
    return (uint4)(w[0], w[1], w[2], w[3]);
}

/* The chunk's v values at the lane's V rows vr0 + g, + g + 8 (16-bit, as they
 * are), two per word: vr[2 i + c] holds chunk rows 8 i + 2 t and + 1 of V row
 * vr0 + g + 8 c; rows past nr and V rows past CV_V are 0. */
inline void sc_vload(uint *vr, __local uint4 *xw, __global const uchar *vb, long v_stride,
                     long c0, int nr, int h, int vr0, bool vec)
{
    const int lane = get_local_id(0) & 31, g = lane >> 2, t = lane & 3;
    const int vv = vr0 + 8 * (lane & 1);
    __global const ushort *v16 = (__global const ushort *)vb + (long)h * CV_V + vv;
    __local const ushort *x16 = (__local const ushort *)xw;
    uint4 u[NT_C / 2]; /* all loads in flight before the first is used */
    UNROLL
    for (int p = 0; p < NT_C / 2; p++) {
        const int row = 16 * p + (lane >> 1);
        u[p] = sc_ld8(v16 + (c0 + row) * v_stride, row < nr ? clamp(CV_V - vv, 0, 8) : 0, vec);
    }
    UNROLL
    for (int p = 0; p < NT_C / 2; p++) {
        xw[lane] = u[p];
        warp_sync();
        UNROLL
        for (int ii = 0; ii < 2; ii++) {
            const int r = (8 * ii + 2 * t) * 16 + g;
            vr[4 * p + 2 * ii] = (uint)x16[r] | ((uint)x16[r + 16] << 16);
            vr[4 * p + 2 * ii + 1] = (uint)x16[r + 8] | ((uint)x16[r + 24] << 16);
        }
        warp_sync();
    }
}

#ifdef CV_GDN_WG
/* sc_vload's values from v rows staged in local memory (vd: rows PP_VP
 * apart; cb: the warp's first column in them). */
inline void sc_vload_set(uint *vr, __local const ushort *vd, int cb)
{
    const int lane = get_local_id(0) & 31, g = lane >> 2, t = lane & 3;
    UNROLL
    for (int i = 0; i < NT_C; i++) {
        __local const ushort *r = vd + (8 * i + 2 * t) * PP_VP + cb + g;
        vr[2 * i] = (uint)r[0] | ((uint)r[PP_VP] << 16);
        vr[2 * i + 1] = (uint)r[8] | ((uint)r[PP_VP + 8] << 16);
    }
}
#endif

/* Y^T = beta (V^T - e^G rk X^T) in place, v from sc_vload; the lane's chunk rows
 * are 8 i + 2 t, + 1. */
inline void sc_y(float4 *xt, __local const float *rows_l, const uint *vr)
{
    const int t = get_local_id(0) & 3;
    UNROLL
    for (int i = 0; i < NT_C; i++) {
        const int r0 = 8 * i + 2 * t;
        const float2 ek = vload2(0, rows_l + r0), be = vload2(0, rows_l + GC + r0);
        const float e0 = ek.x, e1 = ek.y;
        const uint a = vr[2 * i], b = vr[2 * i + 1];
        const float vx[4] = {nv_h2f((ushort)(a & 0xffffu)), nv_h2f((ushort)(a >> 16)),
                             nv_h2f((ushort)(b & 0xffffu)), nv_h2f((ushort)(b >> 16))};
        xt[i] = (float4)(be.x * (vx[0] - e0 * xt[i].x), be.y * (vx[1] - e1 * xt[i].y),
                         be.x * (vx[2] - e0 * xt[i].z), be.y * (vx[3] - e1 * xt[i].w));
    }
}

/* O^T's columns (chunk rows) scaled by e^G rq. */
inline void sc_oscale(float4 *ot, __local const float *rows_l)
{
    const int t = get_local_id(0) & 3;
    UNROLL
    for (int i = 0; i < NT_C; i++) {
        const int r0 = 8 * i + 2 * t;
        const float2 e = vload2(0, rows_l + 3 * GC + r0);
        ot[i] *= (float4)(e.x, e.y, e.x, e.y);
    }
}

/* O^T stored through xw (above): rows c0 + chunk row, columns (V rows) vr0 ... */
inline void sc_store_o(const float4 *ot, __local uint4 *xw, __global uchar *ob, long o_stride,
                       long c0, int nr, int h, int vr0, bool vec)
{
    const int lane = get_local_id(0) & 31, g = lane >> 2, t = lane & 3;
    const int vv = vr0 + 8 * (lane & 1);
    __global ushort *o16 = (__global ushort *)ob + (long)h * CV_V + vv;
    __local ushort *x16 = (__local ushort *)xw;
    UNROLL
    for (int p = 0; p < NT_C / 2; p++) {
        UNROLL
        for (int ii = 0; ii < 2; ii++) {
            /* (row r, V row g), (r + 1, g); (r, g + 8), (r + 1, g + 8) */
            const float4 y = ot[2 * p + ii];
            const uint a = pack2(y.x, y.y), b = pack2(y.z, y.w);
            const int r = (8 * ii + 2 * t) * 16 + g;
            x16[r] = (ushort)a;
            x16[r + 16] = (ushort)(a >> 16);
            x16[r + 8] = (ushort)b;
            x16[r + 24] = (ushort)(b >> 16);
        }
        warp_sync();
        const uint4 u = xw[lane];
        const int row = 16 * p + (lane >> 1);
        __global ushort *dst = o16 + (c0 + row) * o_stride;
        if (row < nr && vec && vv + 8 <= CV_V) {
            *(__global uint4 *)dst = u;
        } else if (row < nr) {
            const uint w[4] = {u.x, u.y, u.z, u.w};
            for (int e = 0; e < 8; e++)
                if (vv + e < CV_V)
                    dst[e] = (ushort)(w[e >> 1] >> (16 * (e & 1)));
        }
        warp_sync();
    }
}

/* D^T's k16 step kb (chunk rows 16 kb ..) times w_i = rk_i e^(G_last - G_i), as
 * the split A fragment of the state update. */
inline void sc_dw(float4 d0, float4 d1, int kb, __local const float *rows_l, uint4 *ah,
                  uint4 *al)
{
    const int r0 = 16 * kb + 2 * (get_local_id(0) & 3);
    const float2 w0 = vload2(0, rows_l + 2 * GC + r0), w1 = vload2(0, rows_l + 2 * GC + r0 + 8);
    sc_afrag(d0 * (float4)(w0.x, w0.y, w0.x, w0.y), d1 * (float4)(w1.x, w1.y, w1.x, w1.y), ah,
             al);
}

/* A 128-byte line of global memory into L2 (a hint: nothing elsewhere). */
inline void sc_l2(__global const void *p)
{
#ifdef CV_NV_PTX
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
#else
    (void)p;
#endif
}

/* The lines the scan stages for a chunk, spread over the work-group: rows c0 ..
 * c0 + nr - 1 from the k, q and v row pointers (a key head's K columns; the
 * group's `vcols` value columns), and the chunk's scratch sp. */
inline void sc_l2_chunk(__global const ushort *k, long k_stride, __global const ushort *q,
                        long q_stride, __global const ushort *v, long v_stride, int vcols,
                        long c0, int nr, __global const float *sp)
{
    const int lid = get_local_id(0);
    const int kl = (CV_K * 2 + 127) / 128, vl = (vcols * 2 + 127) / 128;
    for (int e = lid; e < nr * kl; e += WG_SIZE) {
        const long r = c0 + e / kl;
        const int col = (e % kl) * 64;
        sc_l2(k + r * k_stride + col);
        sc_l2(q + r * q_stride + col);
    }
    for (int e = lid; e < nr * vl; e += WG_SIZE)
        sc_l2(v + (c0 + e / vl) * v_stride + (e % vl) * 64);
    for (int e = lid; e < (GDN_SCR_FLOATS * 4 + 127) / 128; e += WG_SIZE)
        sc_l2(sp + 32 * e);
}

#ifdef CV_GDN_WG
#if CV_K != 64 && CV_K != 128
#error "the wgmma scan takes K 64 or 128"
#endif
#if CV_SW != 8
#error "the wgmma scan takes two warpgroups"
#endif
/* The wgmma operands in local memory (cl/nv-wgmma.clh, SW = 1): the k (or q)
 * rows in column blocks of 64 (GC * 128 bytes each), K-major for X^T and
 * S^T Q^T (a k16 step 32 bytes along a row, every fourth the next block),
 * N-major for the update (a k16 step 16 rows, 2048 bytes); T and P tiles of
 * 64 x 64, K-major. */
#define SC_BLK (GC * 128)
#if CV_K == 128
#define SC_XK(acc, a, b) WG_RS1(64, 8, 0, 1, acc, a, b, 16, 1024, 32, SC_BLK)
#define SC_UPD(acc, a) WG_RS1(128, 4, 1, 1, acc, a, Kc, SC_BLK, 1024, 2048, 4 * 2048)
#else
#define SC_XK(acc, a, b) WG_RS1(64, 4, 0, 1, acc, a, b, 16, 1024, 32, SC_BLK)
#define SC_UPD(acc, a) WG_RS1(64, 4, 1, 1, acc, a, Kc, SC_BLK, 1024, 2048, 4 * 2048)
#endif
/* Each A operand is read by one product and then dead (WG_RS1: no copies of it,
 * cl/nv-wgmma-once.clh), but for the D step's rounded Y, read twice: with copies
 * (SC_TTC) in the first of its products. */
#define SC_TT(acc, a, b) WG_RS1(64, 4, 0, 1, acc, a, b, 16, 1024, 32, SC_BLK)
#define SC_TTC(acc, a, b) WG_RS(64, 4, 0, 1, acc, a, b, 16, 1024, 32, SC_BLK, zero)
#define SC_TILE (GC * GC) /* a T or P tile, 16-bit elements */

#define SC_UNITS (GC * (CV_K / 8)) /* 16-byte units of a chunk's k (or q) rows */

/* Unit e of the rows: its row and first column, and its place in the swizzled
 * layout (16-bit elements from the start). */
inline int sc_sw_unit(int e, int *row, int *col)
{
    const int c = e & 7, blk = (e >> 3) / GC;
    *row = (e >> 3) % GC;
    *col = 64 * blk + 8 * c;
    return blk * (GC * 64) + *row * 64 + ((c ^ (*row & 7)) << 3);
}

/* Rows r < nr of a chunk's k (or q) rows into dst, swizzled as above; rows
 * from nr on zero. cp.async where the rows are 16-byte units, else plain
 * stores. */
inline void sc_stage_sw(__local ushort *dst, __global const ushort *src, long stride, int nr)
{
    const bool vec = ((ulong)src & 15) == 0 && (stride & 7) == 0;
    for (int e = get_local_id(0); e < SC_UNITS; e += WG_SIZE) {
        int row, col;
        __local ushort *d = dst + sc_sw_unit(e, &row, &col);
        const int ok = row < nr;
        if (vec)
            cp_async16(d, (__global const uchar *)(src + (ok ? row : 0) * stride + col),
                       ok ? 16 : 0);
        else
            for (int i = 0; i < 8; i++)
                d[i] = ok ? src[row * stride + col + i] : (ushort)0;
    }
}

/* n16 16-byte units of a chunk's scratch into local memory, as they are. */
inline void sc_copy(__local ushort *dst, __global const float *src, int n16)
{
    for (int e = get_local_id(0); e < n16; e += WG_SIZE)
        cp_async16(dst + 8 * e, (__global const uchar *)src + 16 * e, 16);
}

/* The wgmma form's loop (pp_: "ping-pong"): two sets of a chunk's operands
 * (k rows, q rows, T's two tiles, P, the rows' factors), so that chunk c + 1's
 * are staged while chunk c is worked on, guarded by mbarriers instead of
 * work-group barriers: set s's "full" completes when every work-item's copies
 * into it have landed, its "empty" when every work-item is done with it. The
 * two warpgroups then take turns on the tensor cores (named barriers 1 and
 * 2): warpgroup 0 issues a product, then warpgroup 1 its own while warpgroup
 * 0 works on the result (splitting, Y, the scaling, the stores), so the one's
 * arithmetic runs beside the other's products instead of both doing the same
 * step at once. */
#define PP_KQTP (2 * GC * CV_K + 3 * SC_TILE) /* k rows, q rows, T, P: 16-bit units */
#define PP_SET (PP_KQTP + GC * PP_VP)                /* and the v rows */
#if defined(CV_NV_PTX) && defined(CV_SM90A)
inline void pp_init(__local ulong *b, uint count)
{
    asm volatile("// CVW mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"((uint)(size_t)b),
                 "r"(count)
                 : "memory");
}
/* Arrives on b once this work-item's cp.async so far have landed. */
inline void pp_arrive_cp(__local ulong *b)
{
    asm volatile("// CVW cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(
                     (uint)(size_t)b)
                 : "memory");
}
inline void pp_arrive(__local ulong *b)
{
    asm volatile("{ .reg .b64 st;\n\t// CVW mbarrier.arrive.shared::cta.b64 st, [%0];\n\t}" ::"r"(
                     (uint)(size_t)b)
                 : "memory");
}
/* Returns once the phase of b with this parity has completed. */
inline void pp_wait(__local ulong *b, uint parity)
{
    uint done = 0;
    while (!done)
        asm volatile("{ .reg .pred p; setp.ne.u32 p, 0, 0;\n\t"
                     "// CVW mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                     "selp.u32 %0, 1, 0, p; }"
                     : "=r"(done)
                     : "r"((uint)(size_t)b), "r"(parity)
                     : "memory");
}
#define PP_WAIT_IF(cond, b, parity)                                                            \
    do {                                                                                       \
        if (cond)                                                                              \
            pp_wait(b, parity);                                                                \
    } while (0)
/* Named barriers 1 and 2 of 256 work-items (immediate ids, so that ptxas
 * counts them): the turn of warpgroup wgi, waited for; the other's, given. */
inline void pp_turn_begin(int wgi)
{
    if (wgi == 0)
        asm volatile("bar.sync 1, 256;" ::: "memory");
    else
        asm volatile("bar.sync 2, 256;" ::: "memory");
}
inline void pp_turn_end(int wgi)
{
    if (wgi == 0)
        asm volatile("bar.arrive 2, 256;" ::: "memory");
    else
        asm volatile("bar.arrive 1, 256;" ::: "memory");
}
#define PP_TURN_BEGIN(wgi) pp_turn_begin(wgi)
#define PP_TURN_END(wgi) pp_turn_end(wgi)
#define PP_START(wgi)                                                                          \
    do {                                                                                       \
        if ((wgi) == 1)                                                                        \
            pp_turn_end(1);                                                                    \
    } while (0)
#define PP_FINISH(wgi)                                                                         \
    do {                                                                                       \
        if ((wgi) == 0)                                                                        \
            pp_turn_begin(0);                                                                  \
    } while (0)
#else
/* Emulated: the copies have landed when they return and every work-item runs
 * the same steps, so each wait is a work-group barrier (unconditional: PoCL
 * mishandles barriers under conditions that vary between iterations), and
 * arrivals and turns do nothing. */
#define pp_init(b, count) ((void)(b), (void)(count))
#define pp_arrive_cp(b) ((void)(b))
#define pp_arrive(b) ((void)(b))
#define pp_wait(b, parity) ((void)(b), (void)(parity), barrier(CLK_LOCAL_MEM_FENCE))
#define PP_WAIT_IF(cond, b, parity) pp_wait(b, parity)
#define PP_TURN_BEGIN(wgi) ((void)(wgi))
#define PP_TURN_END(wgi) ((void)(wgi))
#define PP_START(wgi) ((void)(wgi))
#define PP_FINISH(wgi) ((void)(wgi))
#endif

/* A chunk's operands into a set (every work-item its share), then each
 * work-item's arrival on the set's full mbarrier: rows r < nr of k (kh) and q
 * (qh), swizzled; T's two tiles, P and the rows' factors from the scratch sp;
 * rows r < nr of v (vh: the group's first column; vcols of its columns within
 * V; PP_VP apart), the rest zero, so that no global load is left between X^T
 * and Y (2-3% faster than loading them there: docs/PERFORMANCE.md). */
inline void pp_stage(__local ushort *set, __local float *rows, __global const ushort *kh,
                     long k_stride, __global const ushort *qh, long q_stride,
                     __global const ushort *vh, long v_stride, int vcols, int nr,
                     __global const float *sp, __local ulong *full)
{
    sc_stage_sw(set, kh, k_stride, nr);
    sc_stage_sw(set + GC * CV_K, qh, q_stride, nr);
    sc_copy(set + 2 * GC * CV_K, sp, 3 * SC_TILE / 8); /* T's parts, then P (GDN_SCR_P) */
    sc_copy((__local ushort *)rows, sp + GDN_SCR_ROWS, GDN_SCR_ROWS_N * 4 / 16);
    bool vec = ((ulong)kh & 15) == 0 && (k_stride & 7) == 0 && ((ulong)qh & 15) == 0 &&
               (q_stride & 7) == 0;
    const bool vv = CV_V % 8 == 0 && ((ulong)vh & 15) == 0 && (v_stride & 7) == 0;
    for (int e = get_local_id(0); e < GC * 2 * CV_SW; e += WG_SIZE) {
        const int row = e / (2 * CV_SW), col = 8 * (e % (2 * CV_SW));
        const int n = row < nr ? clamp(vcols - col, 0, 8) : 0; /* 0 or 8 where vv */
        __local ushort *d = set + PP_KQTP + row * PP_VP + col;
        if (vv)
            cp_async16(d, (__global const uchar *)(vh + (n ? row * v_stride + col : 0)), n ? 16 : 0);
        else
            *(__local uint4 *)d = sc_ld8(vh + row * v_stride + col, n, false);
    }
    vec = vec && vv;
    if (vec) {
        pp_arrive_cp(full);
    } else { /* rows stored as they are: their stores before the arrival */
        cp_async_wait_all();
        fence_proxy_async();
        pp_arrive(full);
    }
}
#endif

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void
gdn_chunk_scan(GDN_ARGS, __global const float *scr, long n_slots, int h0, int hcount)
{
    /* k rows; then T^T's fragments (wgmma: T's tiles), and after D the q rows and
     * P^T's fragments (P's tile) in the same place (local memory holds no more on
     * NVIDIA) */
#ifdef CV_GDN_WG
    /* two sets of the chunk's operands (PP_SET), the rows' factors and the sets'
     * mbarriers; swizzle atoms start 1024-byte aligned: the address is rounded up
     * here rather than trusting a compiler with so large an alignment (PoCL) */
    __local ushort smem_raw[2 * PP_SET + 448] __attribute__((aligned(128)));
    __local float pp_rows[2][GDN_SCR_ROWS_N] __attribute__((aligned(16)));
    __local ulong pp_bar[4];
    __local ushort *smem = (__local ushort *)(((size_t)smem_raw + 1023) & ~(size_t)1023);
#else
    __local ushort smem[GC * KP + SC_R2_SHORTS] __attribute__((aligned(16)));
    __local ushort *Kc = smem, *Qc = smem + GC * KP;
    __local uint4 *Tl = (__local uint4 *)(smem + GC * KP);
    __local uint2 *Pl = (__local uint2 *)(smem + 2 * GC * KP);
#endif
#ifndef CV_GDN_WG
    __local float rows_l[GDN_SCR_ROWS_N]; /* e^G rk, beta, w, e^G rq, e^G_last */
#endif
    __local uint4 xch[32 * CV_SW];        /* the warps' v and o exchange (sc_vload) */
    EMU_DECL
#ifndef CV_NV_PTX
    __local uint *emu = emu_scratch;
#endif

    const int lid = get_local_id(0), lane = lid & 31, g = lane >> 2, t = lane & 3;
    const int warp = lid >> 5;
#ifdef CV_GDN_WG
    const uint zero = (uint)((ulong)n_slots >> 63); /* 0, unknown to the compilers (nv-wgmma.clh) */
    (void)zero; /* for SC_TTC alone */
#endif
    const int vtiles = (CV_V + 16 * CV_SW - 1) / (16 * CV_SW);
    const long grp = get_group_id(0);
    const int vt = (int)(grp % vtiles);
    const long rest = grp / vtiles;
    const int h = h0 + (int)(rest % hcount);
    const long n = rest / hcount;
    long bos, eos;
    if (!gdn_chunked_seq(cu, cu_off, fixed_len, total, flags, n, n_seqs, chunk_min, check, &bos,
                         &eos))
        return;

    const int hq = h / group, vr0 = vt * 16 * CV_SW + 16 * warp; /* the warp's first V row */
    const long head_off = (long)h * CV_K * CV_V;
    const long slot = (flags & GDN_HAS_POOL)
                          ? gdn_slot(sidx, sidx_off, flags & GDN_HAS_SIDX, n, slots)
                          : -1;
    const int skv = (flags & GDN_STATE_KV) != 0;
    /* the lane's V rows: r = 0 -> vr0 + g, r = 1 -> vr0 + g + 8 */
    const int va = vr0 + g, vb8 = vr0 + g + 8;

    /* f32 [V, K] states whose slot starts 8 bytes aligned: a lane's two adjacent
     * K columns of a row in one 8-byte access, half the accesses of 4-byte ones
     * (the wgmma form; the mma.sync form, at 255 registers, spilled with it by
     * tools/nv-ptxas.py) */
#if defined(CV_GDN_WG) && CV_ST_DT == CV_DT_F32 && CV_K % 2 == 0
    const int st2 =
        !skv && slot >= 0 && (pool_off & 7) == 0 && ((slot * slot_pitch + head_off) & 1) == 0;
#else
    const int st2 = 0;
#endif
    __global float2 *pool2 =
        (__global float2 *)(pool + pool_off) + (st2 ? (slot * slot_pitch + head_off) / 2 : 0);

    float4 sc[NT_K]; /* S^T: rows va, vb8; columns 8 j + 2 t, + 1 */
    UNROLL
    for (int j = 0; j < NT_K; j++) {
        if (st2) {
            const float2 a = va < CV_V ? pool2[(va * CV_K + 8 * j + 2 * t) / 2] : (float2)(0.0f);
            const float2 b = vb8 < CV_V ? pool2[(vb8 * CV_K + 8 * j + 2 * t) / 2] : (float2)(0.0f);
            sc[j] = (float4)(a.x, a.y, b.x, b.y);
            continue;
        }
        float x[4];
        for (int e = 0; e < 4; e++) {
            const int vv = (e >> 1) ? vb8 : va, kk = 8 * j + 2 * t + (e & 1);
            x[e] = (slot >= 0 && vv < CV_V)
                       ? LOAD_ST(pool + pool_off,
                                 slot * slot_pitch + head_off + gdn_state_at(skv, kk, vv))
                       : 0.0f;
        }
        sc[j] = (float4)(x[0], x[1], x[2], x[3]);
    }
    __global const uchar *vb = v + v_off;
    __global uchar *ob = o + o_off;
    __local uint4 *xw = xch + 32 * warp;
#if CV_V % 8 == 0
    const bool vec_v = ((ulong)vb & 15) == 0 && (v_stride & 7) == 0; /* sc_vload */
    const bool vec_o = ((ulong)ob & 15) == 0 && (o_stride & 7) == 0;
#else
    const bool vec_v = false, vec_o = false; /* a head's rows are not 16-byte runs */
#endif
#ifdef CV_GDN_WG
    (void)vec_v; /* the wgmma form stages its v rows (pp_stage) */
#endif
    const long base = bos / GC + n; /* the sequence's first chunk slot (see the host) */

#ifdef CV_GDN_WG
    /* Chunk ci's operands in set ci & 1 (CV_GDN_WG above): staged by every
     * work-item half-way through chunk ci - 1 (chunk 0's before the loop),
     * into the set chunk ci - 2 used once everyone is done with it. */
    const int wgi = warp >> 2, v0g = vt * 16 * CV_SW, vcols = min(16 * CV_SW, CV_V - v0g);
    /* the head's (and group's) first columns of the k, q and v rows, its scratch */
    __global const ushort *kp = CV_CPTR(ushort, k, k_off) + (long)hq * CV_K;
    __global const ushort *qp = CV_CPTR(ushort, q, q_off) + (long)hq * CV_K;
    __global const ushort *vp = (__global const ushort *)vb + (long)h * CV_V + v0g;
    __global const float *sh = scr + (h - h0) * (long)GDN_SCR_FLOATS;
    const long sstep = hcount * (long)GDN_SCR_FLOATS; /* from one chunk slot to the next */
    if (lid == 0)
        for (int i = 0; i < 4; i++)
            pp_init(&pp_bar[i], WG_SIZE); /* full 0, 1; empty 0, 1 */
    barrier(CLK_LOCAL_MEM_FENCE);
    if (bos < eos) {
        const long at0 = base < n_slots ? base : 0;
        pp_stage(smem, pp_rows[0], kp + bos * k_stride, k_stride, qp + bos * q_stride, q_stride,
                 vp + bos * v_stride, v_stride, vcols, (int)min((long)GC, eos - bos),
                 sh + at0 * sstep, &pp_bar[0]);
    }
    PP_START(wgi);
    for (long c0 = bos, ci = 0; c0 < eos; c0 += GC, ci++) {
        const int nr = (int)min((long)GC, eos - c0), s = (int)(ci & 1);
        const long at = base + ci;
        __local ushort *Kc = smem + s * PP_SET, *Qs = Kc + GC * CV_K, *Ts = Qs + GC * CV_K;
        __local ushort *Ps = Ts + 2 * SC_TILE;
        __local const float *rows_l = pp_rows[s];
#if CV_GDN_L2PRE
        if (c0 + GC < eos) {
            const long an = at + 1 < n_slots ? at + 1 : 0;
            sc_l2_chunk(kp + c0 * k_stride, k_stride, qp + c0 * q_stride, q_stride,
                        vp + c0 * v_stride, v_stride, vcols, GC,
                        (int)min((long)GC, eos - c0 - GC), sh + an * sstep);
        }
#endif
        pp_wait(&pp_bar[s], (uint)(ci >> 1) & 1u); /* this chunk's operands have landed */
        fence_proxy_async();

        /* X^T = S^T K^T, then Y^T = beta (V^T - e^G rk X^T) */
        float4 xt[NT_C];
        UNROLL
        for (int i = 0; i < NT_C; i++)
            xt[i] = (float4)(0.0f);
        {
            uint4 ah[KSTEPS], al[KSTEPS];
            UNROLL
            for (int j = 0; j < KSTEPS; j++)
                sc_afrag(sc[2 * j], sc[2 * j + 1], &ah[j], &al[j]);
            PP_TURN_BEGIN(wgi);
            SC_XK(xt, ah, Kc);
#if CV_MMA_SPLIT
            SC_XK(xt, al, Kc);
#endif
            PP_TURN_END(wgi);
        }
        uint vr[2 * NT_C];
        sc_vload_set(vr, Kc + PP_KQTP, vr0 - v0g);
        sc_y(xt, rows_l, vr);

        /* D^T = Y^T T^T */
        float4 dt[NT_C];
        UNROLL
        for (int i = 0; i < NT_C; i++)
            dt[i] = (float4)(0.0f);
        {
            uint4 ah[GC / 16], al[GC / 16];
            UNROLL
            for (int kb = 0; kb < GC / 16; kb++)
                sc_afrag(xt[2 * kb], xt[2 * kb + 1], &ah[kb], &al[kb]);
            PP_TURN_BEGIN(wgi);
#if CV_MMA_SPLIT
            SC_TTC(dt, ah, Ts);
            SC_TT(dt, ah, Ts + SC_TILE);
            SC_TT(dt, al, Ts);
#else
            SC_TT(dt, ah, Ts);
#endif
            PP_TURN_END(wgi);
        }

        /* the next chunk's operands into the other set, once chunk ci - 1 is
         * done with it */
        PP_WAIT_IF(ci > 0, &pp_bar[2 + (s ^ 1)], (uint)((ci - 1) >> 1) & 1u);
        if (c0 + GC < eos) {
            const long an = at + 1 < n_slots ? at + 1 : 0;
            pp_stage(smem + (s ^ 1) * PP_SET, pp_rows[s ^ 1], kp + (c0 + GC) * k_stride,
                     k_stride, qp + (c0 + GC) * q_stride, q_stride, vp + (c0 + GC) * v_stride,
                     v_stride, vcols, (int)min((long)GC, eos - c0 - GC), sh + an * sstep,
                     &pp_bar[s ^ 1]);
        }

        /* O^T = e^G rq (S^T Q^T) + D^T P^T, stored */
        float4 ot[NT_C];
        UNROLL
        for (int i = 0; i < NT_C; i++)
            ot[i] = (float4)(0.0f);
        {
            uint4 as[KSTEPS];
            UNROLL
            for (int j = 0; j < KSTEPS; j++) {
                const float4 s0 = sc[2 * j], s1 = sc[2 * j + 1];
                as[j] = (uint4)(pack2(s0.x, s0.y), pack2(s0.z, s0.w), pack2(s1.x, s1.y),
                                pack2(s1.z, s1.w));
            }
            PP_TURN_BEGIN(wgi);
            SC_XK(ot, as, Qs);
            PP_TURN_END(wgi);
        }
        sc_oscale(ot, rows_l);
        {
            uint4 ah[GC / 16], al[GC / 16];
            UNROLL
            for (int kb = 0; kb < GC / 16; kb++)
                sc_afrag(dt[2 * kb], dt[2 * kb + 1], &ah[kb], &al[kb]);
            PP_TURN_BEGIN(wgi);
            SC_TT(ot, ah, Ps);
#if CV_MMA_SPLIT && CV_GDN_OSPLIT
            SC_TT(ot, al, Ps);
#endif
            PP_TURN_END(wgi);
        }
        sc_store_o(ot, xw, ob, o_stride, c0, nr, h, vr0, vec_o);

        /* S^T = e^(G_last) S^T + (D^T w) K */
        const float eGl = rows_l[4 * GC];
        UNROLL
        for (int j = 0; j < NT_K; j++)
            sc[j] *= eGl;
        {
            uint4 ah[GC / 16], al[GC / 16];
            UNROLL
            for (int kb = 0; kb < GC / 16; kb++)
                sc_dw(dt[2 * kb], dt[2 * kb + 1], kb, rows_l, &ah[kb], &al[kb]);
            PP_TURN_BEGIN(wgi);
            SC_UPD(sc, ah);
#if CV_MMA_SPLIT
            SC_UPD(sc, al);
#endif
            PP_TURN_END(wgi);
        }
        pp_arrive(&pp_bar[2 + s]); /* this work-item is done with the set */
    }
    PP_FINISH(wgi);
#else
    for (long c0 = bos, ci = 0; c0 < eos; c0 += GC, ci++) {
        const int nr = (int)min((long)GC, eos - c0);
        const long at = base + ci;
        __global const float *sp =
            scr + ((at < n_slots ? at : 0) * hcount + (h - h0)) * (long)GDN_SCR_FLOATS;
        __global const ushort *kh = CV_CPTR(ushort, k, k_off) + c0 * k_stride + (long)hq * CV_K;
        __global const ushort *qh = CV_CPTR(ushort, q, q_off) + c0 * q_stride + (long)hq * CV_K;
        barrier(CLK_LOCAL_MEM_FENCE); /* the last chunk's readers are done */
        gdn_stage_rows(Kc, kh, k_stride, nr);
        for (int e = lid; e < 32 * 32; e += WG_SIZE)
            if (SC_TILE_USED(e >> 7, (e >> 5) & 3))
                Tl[e] = ((__global const uint4 *)sp)[e];
#if CV_GDN_L2PRE
        if (c0 + GC < eos) {
            const long an = at + 1 < n_slots ? at + 1 : 0;
            const int v0 = vt * 16 * CV_SW;
            sc_l2_chunk(kh, k_stride, qh, q_stride,
                        (__global const ushort *)vb + c0 * v_stride + (long)h * CV_V + v0, v_stride,
                        min(16 * CV_SW, CV_V - v0), GC, (int)min((long)GC, eos - c0 - GC),
                        scr + (an * hcount + (h - h0)) * (long)GDN_SCR_FLOATS);
        }
#endif
        for (int e = lid; e < GDN_SCR_ROWS_N; e += WG_SIZE)
            rows_l[e] = sp[GDN_SCR_ROWS + e];
        barrier(CLK_LOCAL_MEM_FENCE);

        uint vr[2 * NT_C]; /* the chunk's v (sc_vload) */
        /* X^T = S^T K^T: B[k][i] = K[i][k] */
        float4 xt[NT_C];
        UNROLL
        for (int i = 0; i < NT_C; i++)
            xt[i] = (float4)(0.0f);
        UNROLL
        for (int s = 0; s < KSTEPS; s++) {
            uint4 ah, al;
            sc_afrag(sc[2 * s], sc[2 * s + 1], &ah, &al);
            UNROLL
            for (int i = 0; i < NT_C; i += 2) {
                /* matrices: rows 8i.. cols 16s.., rows 8i.. cols 16s+8.., then i + 1 */
                const int m = lane >> 3, r = lane & 7;
                const uint4 kb = ldsm_x4(Kc + (8 * (i + (m >> 1)) + r) * KP + 16 * s + 8 * (m & 1));
                xt[i] = gdn_mma_xa(ah, al, kb.x, kb.y, xt[i] GDN_EMU);
                xt[i + 1] = gdn_mma_xa(ah, al, kb.z, kb.w, xt[i + 1] GDN_EMU);
            }
        }
        sc_vload(vr, xw, vb, v_stride, c0, nr, h, vr0, vec_v);
        sc_y(xt, rows_l, vr);

        /* D^T = Y^T T^T (T lower triangular: k-steps right of the diagonal skipped) */
        float4 dt[NT_C];
        UNROLL
        for (int i = 0; i < NT_C; i++)
            dt[i] = (float4)(0.0f);
        UNROLL
        for (int kb = 0; kb < GC / 16; kb++) {
            uint4 ah, al;
            sc_afrag(xt[2 * kb], xt[2 * kb + 1], &ah, &al);
            UNROLL
            for (int i = 2 * kb; i < NT_C; i++) {
                const uint4 f = Tl[(i * 4 + kb) * 32 + lane];
                dt[i] = gdn_mma_xx(ah, al, f.x, f.y, f.z, f.w, dt[i] GDN_EMU);
            }
        }

        /* T read by every warp: the q rows and P^T's fragments in its place */
        barrier(CLK_LOCAL_MEM_FENCE);
        gdn_stage_rows(Qc, qh, q_stride, nr);
        for (int e = lid; e < 32 * 32; e += WG_SIZE)
            if (SC_TILE_USED(e >> 7, (e >> 5) & 3))
                Pl[e] = ((__global const uint2 *)(sp + GDN_SCR_P))[e];
        barrier(CLK_LOCAL_MEM_FENCE);

        /* O^T = e^G rq (S^T Q^T) + D^T P^T, stored (after X^T: fewer live registers).
         * S rounded once here: the output is rounded to 16 bits anyway, and the
         * state's own accuracy is carried by X^T and the update */
        float4 ot[NT_C];
        UNROLL
        for (int i = 0; i < NT_C; i++)
            ot[i] = (float4)(0.0f);
        UNROLL
        for (int s = 0; s < KSTEPS; s++) {
            const float4 s0 = sc[2 * s], s1 = sc[2 * s + 1];
            const uint4 ah = (uint4)(pack2(s0.x, s0.y), pack2(s0.z, s0.w), pack2(s1.x, s1.y),
                                     pack2(s1.z, s1.w));
            UNROLL
            for (int i = 0; i < NT_C; i += 2) {
                const int m = lane >> 3, r = lane & 7;
                const uint4 qb = ldsm_x4(Qc + (8 * (i + (m >> 1)) + r) * KP + 16 * s + 8 * (m & 1));
                ot[i] = mma16816(ah, qb.x, qb.y, ot[i]);
                ot[i + 1] = mma16816(ah, qb.z, qb.w, ot[i + 1]);
            }
        }
        sc_oscale(ot, rows_l);
        UNROLL
        for (int kb = 0; kb < GC / 16; kb++) {
            uint4 ah, al;
            sc_afrag(dt[2 * kb], dt[2 * kb + 1], &ah, &al);
            UNROLL
            for (int i = 2 * kb; i < NT_C; i++) {
                const uint2 f = Pl[(i * 4 + kb) * 32 + lane];
#if CV_GDN_OSPLIT
                ot[i] = gdn_mma_xa(ah, al, f.x, f.y, ot[i] GDN_EMU);
#else
                ot[i] = mma16816(ah, f.x, f.y, ot[i]);
#endif
            }
        }
        sc_store_o(ot, xw, ob, o_stride, c0, nr, h, vr0, vec_o);

        /* S^T = e^(G_last) S^T + (D^T w) K: B[k = i][n = kk] = K[i][kk] */
        const float eGl = rows_l[4 * GC];
        UNROLL
        for (int j = 0; j < NT_K; j++)
            sc[j] *= eGl;
        UNROLL
        for (int kb = 0; kb < GC / 16; kb++) {
            uint4 ah, al;
            sc_dw(dt[2 * kb], dt[2 * kb + 1], kb, rows_l, &ah, &al);
            UNROLL
            for (int j = 0; j < NT_K; j += 2) {
                /* matrices: rows 16kb.. cols 8j.., rows 16kb+8.. cols 8j.., then j + 1;
                 * ldmatrix.trans */
                const int m = lane >> 3, r = lane & 7;
                const int off = (16 * kb + 8 * (m & 1) + r) * KP + 8 * (j + (m >> 1));
                const uint4 kb4 = ldsm_x4_trans(Kc + off);
                sc[j] = gdn_mma_xa(ah, al, kb4.x, kb4.y, sc[j] GDN_EMU);
                sc[j + 1] = gdn_mma_xa(ah, al, kb4.z, kb4.w, sc[j + 1] GDN_EMU);
            }
        }
    }
#endif /* CV_GDN_WG */

    if (slot >= 0 && (flags & GDN_WRITE_BACK)) {
        UNROLL
        for (int j = 0; j < NT_K; j++) {
            if (st2) {
                if (va < CV_V)
                    pool2[(va * CV_K + 8 * j + 2 * t) / 2] = (float2)(sc[j].x, sc[j].y);
                if (vb8 < CV_V)
                    pool2[(vb8 * CV_K + 8 * j + 2 * t) / 2] = (float2)(sc[j].z, sc[j].w);
                continue;
            }
            const float x[4] = {sc[j].x, sc[j].y, sc[j].z, sc[j].w};
            for (int e = 0; e < 4; e++) {
                const int vv = (e >> 1) ? vb8 : va, kk = 8 * j + 2 * t + (e & 1);
                if (vv < CV_V)
                    STORE_ST(pool + pool_off,
                             slot * slot_pitch + head_off + gdn_state_at(skv, kk, vv), x[e]);
            }
        }
    }
    GDN_END_BARRIER();
}
