/* Paged decode on NVIDIA GPUs (SPEC 1.1): rows of a few queries (decode,
 * speculative verify) with f16/bf16 caches, keys read straight into
 * registers, no local-memory staging in the key loop.
 *
 * A work-group of WG_SIZE work-items covers one (row, KV head, split) like
 * attn_paged (cl/attention-paged.cl), with its PR query rows (queries x query
 * heads of the KV head) in registers: G = HEAD_DIM / 8 work-items share a key,
 * each holding 8 of its dimensions (one 16-byte load of K and of V), so KPS =
 * WG_SIZE / G keys are in flight per step, UNR steps per iteration, loaded
 * one iteration ahead. The G partial dot products of a key are summed by
 * butterfly shuffles (cl/nv-mma.clh: shfl.sync with -DCV_NV_PTX, else its
 * emulation through local memory, which is how PoCL tests this kernel); each
 * work-item keeps an online softmax over its own keys, and the KPS partial
 * results are merged through local memory at the end.
 *
 * -D: CV_DTYPE (CV_DT_F16 or CV_DT_BF16), HEAD_DIM (= HEAD_DIM_V, 16 to 256,
 * a power of two), PR (rows per pass), UNR, WG_SIZE, CV_PAGED.
 */

#ifndef CV_DTYPE
#define CV_DTYPE CV_DT_BF16
#endif
#ifndef HEAD_DIM
#define HEAD_DIM 128
#endif
#ifndef PR
#define PR 4
#endif
#ifndef UNR
#define UNR 2
#endif
#ifndef WG_SIZE
#define WG_SIZE 128
#endif
#define G (HEAD_DIM / 8)     /* work-items per key */
#define KPS (WG_SIZE / G)    /* keys per step */
#define RED_ROW (HEAD_DIM + 2) /* a partial in local memory: o, then m and l */

// clvarlen-include: nv-mma.clh

/* 8 consecutive 16-bit elements (one 16-byte load), kept raw until used. */
inline uint4 load_raw8(__global const uchar *p, size_t elem)
{
    return vload4(0, (__global const uint *)(p + elem * 2));
}

inline float8 raw8_to_float(uint4 w)
{
#if CV_DTYPE == CV_DT_F16
    const uint4 t = w;
    return vload_half8(0, (const half *)&t);
#else
    const uint8 u = (uint8)(w.x << 16, w.x & 0xffff0000u, w.y << 16, w.y & 0xffff0000u,
                            w.z << 16, w.z & 0xffff0000u, w.w << 16, w.w & 0xffff0000u);
    return as_float8(u);
#endif
}

#if CV_DTYPE == CV_DT_F16
#define STORE_ACT(p, i, x) vstore_half_rte((x), (i), (__global half *)(p))
#else
#define STORE_ACT(p, i, x) (((__global ushort *)(p))[i] = cv_float_to_bf16(x))
#endif

/* The cache row of key `key` (64-bit: may run past int), or -1 past kmax. */
inline long key_row(__global const int *pt_row, int page_size, int num_pages, long key, int kmax)
{
    return key <= kmax ? cv_paged_row(pt_row, page_size, num_pages, (int)key) : -1;
}

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1)))
void attn_paged_nv(__global const uchar *q, ulong q_off, long q_stride,
                   __global const uchar *kc, ulong kc_off, __global const uchar *vc, ulong vc_off,
                   __global const int *cu_q_base, ulong cu_q_off,
                   __global const int *cs_base, ulong cs_off,
                   __global const int *pt_base, ulong pt_off, long pt_stride, int page_size,
                   int num_pages, int capacity,
                   __global uchar *o, ulong o_off, long o_stride, __global float *lse,
                   ulong lse_off, __global float *part, int n_splits,
                   int heads_q, int heads_kv, int total_q, float scale_log2, float scale,
                   float softcap, int causal, int window_left, int window_right,
                   __global const int *flag)
{
    __local float red[KPS * PR * RED_ROW];
    EMU_DECL
#ifndef CV_NV_PTX
    __local uint *emu = emu_scratch;
#endif

    if (flag && *flag)
        return;
    const int lid = get_local_id(0);
    const int ks = lid / G, dc = lid % G;
    const cv_paged_item it =
        cv_paged_decode_item(get_group_id(0), n_splits, heads_kv, CV_CPTR(int, cu_q_base, cu_q_off),
                             total_q, CV_CPTR(int, cs_base, cs_off), capacity);
    const int sp = it.sp, kvh = it.kvh, q0 = it.q0, lq = it.lq, lk = it.lk;
    const int s0 = it.s0, s1 = it.s1, group = heads_q / heads_kv;
    __global const int *pt_row = CV_CPTR(int, pt_base, pt_off) + (long)it.b * pt_stride;
    const float qscale = softcap > 0.0f ? scale : scale_log2;
    const int nrows_all = lq * group;
    /* This work-item's 8 dimensions of the KV head's rows. */
    __global const uchar *kbase = kc + kc_off + ((size_t)kvh * HEAD_DIM + 8 * dc) * 2;
    __global const uchar *vbase = vc + vc_off + ((size_t)kvh * HEAD_DIM + 8 * dc) * 2;
    const size_t row_elems = (size_t)heads_kv * HEAD_DIM;

    for (int rb = 0; rb < nrows_all; rb += PR) {
        const int nrows = min(PR, nrows_all - rb);
        float8 qr[PR], acc[PR];
        float m[PR], l[PR];
        int lo[PR], hi[PR];
        int kmin = INT_MAX, kmax = -1;
        UNROLL
        for (int r = 0; r < PR; r++) {
            int2 v = (int2)(1, 0);
            qr[r] = (float8)(0.0f);
            if (r < nrows) {
                const int i = (rb + r) / group, h = kvh * group + (rb + r) % group;
                v = cv_paged_row_range(i, lq, lk, s0, s1, causal, window_left, window_right);
                qr[r] = raw8_to_float(load_raw8(q + q_off, (size_t)(q0 + i) * q_stride +
                                                               (size_t)h * HEAD_DIM + 8 * dc)) *
                        qscale;
            }
            lo[r] = v.x;
            hi[r] = v.y;
            if (v.x <= v.y) {
                kmin = min(kmin, v.x);
                kmax = max(kmax, v.y);
            }
            m[r] = -INFINITY;
            l[r] = 0.0f;
            acc[r] = (float8)(0.0f);
        }

        /* Keys kb + u * KPS + ks, u < UNR, per iteration. A pipeline: K and V
         * rows are loaded one iteration ahead of their use, and the cache
         * rows (page-table entries) two iterations ahead, so neither load
         * waits for the other (page size 1 reads one entry per key). */
        uint4 kr[UNR], vr[UNR];
        long nxrow[UNR];
        UNROLL
        for (int u = 0; u < UNR; u++) {
            /* 64-bit: kmin is INT_MAX when no row of the pass sees a key. */
            const long row = key_row(pt_row, page_size, num_pages, (long)kmin + u * KPS + ks, kmax);
            kr[u] = vr[u] = (uint4)(0);
            if (row >= 0) {
                kr[u] = load_raw8(kbase, (size_t)row * row_elems);
                vr[u] = load_raw8(vbase, (size_t)row * row_elems);
            }
            nxrow[u] = key_row(pt_row, page_size, num_pages,
                               (long)kmin + UNR * KPS + u * KPS + ks, kmax);
        }
        for (int kb = kmin; kb <= kmax; kb += UNR * KPS) {
            uint4 kn[UNR], vn[UNR];
            UNROLL
            for (int u = 0; u < UNR; u++) {
                kn[u] = vn[u] = (uint4)(0);
                if (nxrow[u] >= 0) {
                    kn[u] = load_raw8(kbase, (size_t)nxrow[u] * row_elems);
                    vn[u] = load_raw8(vbase, (size_t)nxrow[u] * row_elems);
                }
                nxrow[u] = key_row(pt_row, page_size, num_pages,
                                   (long)kb + 2 * UNR * KPS + u * KPS + ks, kmax);
            }
            /* Scores of the iteration's UNR keys (masked, base 2), then one
             * online-softmax step per row for all of them: one rescale of
             * the row's accumulator per iteration, not per key. */
            float s[UNR][PR];
            UNROLL
            for (int u = 0; u < UNR; u++) {
                const float8 kf = raw8_to_float(kr[u]);
                UNROLL
                for (int r = 0; r < PR; r++) {
                    const float8 t = qr[r] * kf;
                    s[u][r] = ((t.s0 + t.s1) + (t.s2 + t.s3)) + ((t.s4 + t.s5) + (t.s6 + t.s7));
                }
            }
            /* Sum over each key's G work-items (adjacent lanes of one warp). */
            UNROLL
            for (int msk = G / 2; msk >= 1; msk >>= 1) {
                UNROLL
                for (int u = 0; u < UNR; u++)
                    UNROLL
                    for (int r = 0; r < PR; r++)
                        s[u][r] += shfl_xor(s[u][r], msk);
            }
            float8 vf[UNR];
            UNROLL
            for (int u = 0; u < UNR; u++)
                vf[u] = raw8_to_float(vr[u]);
            UNROLL
            for (int r = 0; r < PR; r++) {
                float mx = m[r];
                UNROLL
                for (int u = 0; u < UNR; u++) {
                    const int key = kb + u * KPS + ks;
                    float x = s[u][r];
                    if (softcap > 0.0f)
                        x = softcap * tanh(x / softcap) * M_LOG2E_F;
                    x = (key < lo[r] || key > hi[r]) ? -INFINITY : x;
                    s[u][r] = x;
                    mx = fmax(mx, x);
                }
                if (mx == -INFINITY)
                    continue; /* nothing seen yet: m, l and acc stay as they are */
                const float alpha = exp2(m[r] - mx);
                float8 a = acc[r] * alpha;
                float lsum = l[r] * alpha;
                UNROLL
                for (int u = 0; u < UNR; u++) {
                    const float p = exp2(s[u][r] - mx);
                    lsum += p;
                    a += p * vf[u];
                }
                acc[r] = a;
                l[r] = lsum;
                m[r] = mx;
            }
            UNROLL
            for (int u = 0; u < UNR; u++) {
                kr[u] = kn[u];
                vr[u] = vn[u];
            }
        }

        /* Merge the KPS partials of each row: (m, l, o) of key slot ks. */
        UNROLL
        for (int r = 0; r < PR; r++) {
            __local float *dst = red + (ks * PR + r) * RED_ROW;
            vstore8(acc[r], 0, dst + 8 * dc);
            if (dc == 0) {
                dst[HEAD_DIM] = m[r];
                dst[HEAD_DIM + 1] = l[r];
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int e = lid; e < PR * HEAD_DIM; e += WG_SIZE) {
            const int r = e / HEAD_DIM, d = e % HEAD_DIM;
            if (r >= nrows)
                continue;
            float mx = -INFINITY;
            for (int k = 0; k < KPS; k++)
                mx = fmax(mx, red[(k * PR + r) * RED_ROW + HEAD_DIM]);
            float lt = 0.0f, ot = 0.0f;
            if (mx > -INFINITY) {
                for (int k = 0; k < KPS; k++) {
                    __local const float *src = red + (k * PR + r) * RED_ROW;
                    const float w = src[HEAD_DIM] > -INFINITY ? exp2(src[HEAD_DIM] - mx) : 0.0f;
                    lt += w * src[HEAD_DIM + 1];
                    ot += w * src[d];
                }
            }
            const int qi = (rb + r) / group, h = kvh * group + (rb + r) % group;
            const size_t tok = (size_t)(q0 + qi);
            const float res = lt > 0.0f ? ot / lt : 0.0f;
            const float lv = lt > 0.0f ? (mx + log2(lt)) * M_LN2_F : -INFINITY;
            if (n_splits == 1) {
                STORE_ACT(o + o_off, tok * o_stride + (size_t)h * HEAD_DIM + d, res);
                if (d == 0 && lse)
                    CV_PTR(float, lse, lse_off)[(size_t)h * total_q + tok] = lv;
            } else {
                const size_t rows_all = (size_t)n_splits * total_q * heads_q;
                part[(((size_t)sp * total_q + tok) * heads_q + h) * HEAD_DIM + d] = res;
                if (d == 0)
                    part[rows_all * HEAD_DIM + ((size_t)sp * heads_q + h) * total_q + tok] = lv;
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* red is reused by the next pass */
    }
}
