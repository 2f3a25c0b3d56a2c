/* The gated delta rule's chunked form (SPEC 3), second stage, on NVIDIA
 * tensor cores (mma.sync m16n8k16 through cl/nv-mma.clh; emulated elsewhere,
 * which is how PoCL tests its fragment bookkeeping).
 *
 * The first stage, gdn_chunk_prep in cl/gated-delta-mma.cl, ran in parallel
 * over every (chunk, value head) and left in the scratch buffer, per chunk:
 * T = (I + A)^-1 and P[i][m] = rq_i rk_m (q_i . k_m) e^(G_i - G_m) (m <= i,
 * scale included) as ready B fragments (T's split, P's rounded), and the
 * rows' G, beta, rk and rq (f32). What is left depends on the state and runs
 * here, in order over a sequence's chunks, with the state transposed (S^T,
 * V x K) in registers: warp w of a work-group owns V rows v0 + 16 w .. + 15
 * and needs nothing from the other warps, so the only barriers are the ones
 * around staging the chunk's operands in local memory: the k rows, T's
 * fragments and the rows' values first, then (in T's place) the q rows and
 * P's fragments. With S^T as the A operand (its accumulator fragments are A
 * fragments, no shuffles), per chunk of 64 rows:
 *   X^T = S^T K^T                           (k rows raw: exact operands)
 *   Y^T = beta (V^T - e^G rk X^T)           (f32, in the accumulators)
 *   D^T = Y^T T^T                           (D = T B = U - W S of SPEC 3)
 *   O^T = e^G rq (S^T Q^T) + D^T P^T        stored
 *   S^T = e^(G_last) S^T + (D^T w) K,       w_i = rk_i e^(G_last - G_i)
 * Operands that feed the state (S in X^T, Y, D, T) are split into a rounded
 * part and its remainder (nv_split2), so those products keep close to f32
 * accuracy (CV_MMA_SPLIT=0 rounds them once); those that reach only the
 * output (S in S^T Q^T, P) are rounded once: the output is 16-bit anyway.
 *
 * -D: CV_K (multiple of 16, <= 128), CV_V, CV_DT = CV_DTYPE (CV_DT_BF16 or
 * CV_DT_F16), CV_ST_DT, CV_SW (warps per work-group: 1, 2, 4 or 8),
 * CV_NV_PTX (NVIDIA). Local memory at K = 128: 44 KiB (the most NVIDIA's
 * OpenCL gives a work-group is 48 KiB).
 */

#ifndef CV_DTYPE
#define CV_DTYPE CV_DT_BF16
#endif
#ifndef CV_SW
#define CV_SW 8
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
 * rows' G, beta, rk, rq. */
/* The second part of local memory: T^T's fragments (16 KiB), or the q rows and
 * P^T's fragments (8 KiB), in 16-bit units. */
#define SC_R2_SHORTS (GC * KP + 32 * 32 * 4 > 32 * 32 * 8 ? GC * KP + 32 * 32 * 4 : 32 * 32 * 8)

// clvarlen-include: nv-mma.clh
// clvarlen-include: gated-mma.clh

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

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void
gdn_chunk_scan(GDN_ARGS, __global const float *scr, long n_slots, int h0, int hcount)
{
    /* k rows; then T^T's fragments, and after D the q rows and P^T's fragments
     * in the same place (local memory holds no more on NVIDIA) */
    __local ushort smem[GC * KP + SC_R2_SHORTS] __attribute__((aligned(16)));
    __local float rows_l[4 * GC]; /* G, beta, rk, rq */
    EMU_DECL
#ifndef CV_NV_PTX
    __local uint *emu = emu_scratch;
#endif
    __local ushort *Kc = smem, *Qc = smem + GC * KP;
    __local uint4 *Tl = (__local uint4 *)(smem + GC * KP);
    __local uint2 *Pl = (__local uint2 *)(smem + 2 * GC * KP);
    __local const float *G_l = rows_l, *beta_l = rows_l + GC, *rk_l = rows_l + 2 * GC,
                        *rq_l = rows_l + 3 * GC;

    const int lid = get_local_id(0), lane = lid & 31, g = lane >> 2, t = lane & 3;
    const int warp = lid >> 5;
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

    float4 sc[NT_K]; /* S^T: rows va, vb8; columns 8 j + 2 t, + 1 */
    UNROLL
    for (int j = 0; j < NT_K; j++) {
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
    const long base = bos / GC + n; /* the sequence's first chunk slot (see the host) */

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
        for (int e = lid; e < 4 * GC; e += WG_SIZE)
            rows_l[e] = sp[GDN_SCR_ROWS + e];
        barrier(CLK_LOCAL_MEM_FENCE);

        /* X^T = S^T K^T: B[k][i] = K[i][k], ldmatrix rows i */
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

        /* Y^T = beta (V^T - e^G rk X^T) in place; the lane's chunk rows are 8 i + 2 t, + 1 */
        const float G_last = G_l[nr - 1];
        UNROLL
        for (int i = 0; i < NT_C; i++) {
            const int r0 = 8 * i + 2 * t;
            const float2 G = vload2(0, G_l + r0), be = vload2(0, beta_l + r0);
            const float2 rk = vload2(0, rk_l + r0);
            const float e0 = exp(G.x) * rk.x, e1 = exp(G.y) * rk.y;
            float vx[4];
            for (int e = 0; e < 4; e++) {
                const int row = r0 + (e & 1), vv = (e >> 1) ? vb8 : va;
                vx[e] = (row < nr && vv < CV_V)
                            ? LOAD_ACT(vb, (c0 + row) * v_stride + (long)h * CV_V + vv)
                            : 0.0f;
            }
            xt[i] = (float4)(be.x * (vx[0] - e0 * xt[i].x), be.y * (vx[1] - e1 * xt[i].y),
                             be.x * (vx[2] - e0 * xt[i].z), be.y * (vx[3] - e1 * xt[i].w));
        }

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
        UNROLL
        for (int i = 0; i < NT_C; i++) {
            const int r0 = 8 * i + 2 * t;
            const float2 G = vload2(0, G_l + r0), rq = vload2(0, rq_l + r0);
            const float e0 = exp(G.x) * rq.x, e1 = exp(G.y) * rq.y;
            ot[i] *= (float4)(e0, e1, e0, e1);
        }
        UNROLL
        for (int kb = 0; kb < GC / 16; kb++) {
            uint4 ah, al;
            sc_afrag(dt[2 * kb], dt[2 * kb + 1], &ah, &al);
            UNROLL
            for (int i = 2 * kb; i < NT_C; i++) {
                const uint2 f = Pl[(i * 4 + kb) * 32 + lane];
                ot[i] = gdn_mma_xa(ah, al, f.x, f.y, ot[i] GDN_EMU);
            }
        }
        UNROLL
        for (int i = 0; i < NT_C; i++) {
            const float y[4] = {ot[i].x, ot[i].y, ot[i].z, ot[i].w};
            for (int e = 0; e < 4; e++) {
                const int row = 8 * i + 2 * t + (e & 1), vv = (e >> 1) ? vb8 : va;
                if (row < nr && vv < CV_V)
                    cv_store_f(ob, (c0 + row) * o_stride + (long)h * CV_V + vv, y[e], CV_DT);
            }
        }

        /* S^T = e^(G_last) S^T + (D^T w) K: B[k = i][n = kk] = K[i][kk], ldmatrix.trans */
        const float eGl = exp(G_last);
        UNROLL
        for (int j = 0; j < NT_K; j++)
            sc[j] *= eGl;
        UNROLL
        for (int kb = 0; kb < GC / 16; kb++) {
            float4 d0 = dt[2 * kb], d1 = dt[2 * kb + 1];
            const int r0 = 16 * kb + 2 * t;
            const float2 G0 = vload2(0, G_l + r0), G1 = vload2(0, G_l + r0 + 8);
            const float2 k0 = vload2(0, rk_l + r0), k1 = vload2(0, rk_l + r0 + 8);
            const float w0 = k0.x * exp(G_last - G0.x), w1 = k0.y * exp(G_last - G0.y);
            const float w2 = k1.x * exp(G_last - G1.x), w3 = k1.y * exp(G_last - G1.y);
            d0 *= (float4)(w0, w1, w0, w1);
            d1 *= (float4)(w2, w3, w2, w3);
            uint4 ah, al;
            sc_afrag(d0, d1, &ah, &al);
            UNROLL
            for (int j = 0; j < NT_K; j += 2) {
                /* matrices: rows 16kb.. cols 8j.., rows 16kb+8.. cols 8j.., then j + 1 */
                const int m = lane >> 3, r = lane & 7;
                const int off = (16 * kb + 8 * (m & 1) + r) * KP + 8 * (j + (m >> 1));
                const uint4 kb4 = ldsm_x4_trans(Kc + off);
                sc[j] = gdn_mma_xa(ah, al, kb4.x, kb4.y, sc[j] GDN_EMU);
                sc[j + 1] = gdn_mma_xa(ah, al, kb4.z, kb4.w, sc[j + 1] GDN_EMU);
            }
        }
    }

    if (slot >= 0 && (flags & GDN_WRITE_BACK)) {
        UNROLL
        for (int j = 0; j < NT_K; j++) {
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
