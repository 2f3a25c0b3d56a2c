/* Paged KV cache (SPEC 1.1), portable OpenCL C 1.2. Built two ways by
 * lib/attention/paged-cl.c:
 * -DCV_PAGED_AUX: the cache append and the device check of a paged call
 *   (dtype-free, compiled once per context);
 * otherwise: attn_paged, the kernel of rows with few queries (decode,
 *   speculative verify), specialised by -D CV_DTYPE, HEAD_DIM, HEAD_DIM_V,
 *   PR, RG, BN.
 * Longer rows (chunked prefill) run the tiled kernels of attention.cl and
 * attention-nv.cl built with -DCV_PAGED (the family prelude attention.clh).
 */

#ifdef CV_PAGED_AUX

/* Cache append: work-item (e, t) copies `vec` elements from element e * vec
 * of token t's k row (the first heads * dk / vec work-items) or v row (the
 * rest) to the token's slot, converting the dtype. vec is 8 when both row
 * widths are multiples of 8 and every row start is 16-byte aligned for the
 * dtypes involved (the host checks), else 1. A slot of -1 is skipped; so is
 * one outside [0, slots), which the host path refuses and the device check
 * reports before this runs. */
__kernel void kv_append(long n_tokens, int heads, int dk, int dv, int in_dt, int cache_dt,
                        int vec, __global const uchar *k, ulong k_off, long k_stride,
                        __global const uchar *v, ulong v_off, long v_stride,
                        __global const long *slot_base, ulong slot_off, long slots,
                        __global uchar *kc, ulong kc_off, __global uchar *vc, ulong vc_off,
                        __global const int *flag)
{
    /* The ids before the flag's return: get_global_id() reads an implicit
     * kernel argument (the offset), and llvmpipe (Mesa 22.3 rusticl) warns that
     * it may mis-read one read after a return on a loaded value. */
    const long t = get_global_id(1);
    const int e = (int)get_global_id(0) * vec;
    if (flag && *flag)
        return;
    const int kw = heads * dk, vw = heads * dv;
    if (t >= n_tokens || e >= kw + vw)
        return;
    const long slot = CV_CPTR(long, slot_base, slot_off)[t];
    if (slot < 0 || slot >= slots)
        return;
    const bool is_k = e < kw;
    __global const uchar *src = is_k ? k + k_off : v + v_off;
    __global uchar *dst = is_k ? kc + kc_off : vc + vc_off;
    const size_t si = (size_t)t * (is_k ? k_stride : v_stride) + (is_k ? e : e - kw);
    const size_t di = (size_t)slot * (is_k ? kw : vw) + (is_k ? e : e - kw);
    if (vec == 8 && in_dt == cache_dt) { /* a straight 16- or 32-byte copy */
        if (in_dt == CV_DT_F32) {
            __global const float4 *s4 = (__global const float4 *)(src + si * 4);
            __global float4 *d4 = (__global float4 *)(dst + di * 4);
            d4[0] = s4[0];
            d4[1] = s4[1];
        } else {
            *(__global uint4 *)(dst + di * 2) = *(__global const uint4 *)(src + si * 2);
        }
        return;
    }
    for (int i = 0; i < vec; i++)
        cv_store_f(dst, di + i, cv_load_f(src, si + i, in_dt), cache_dt);
}

/* The device check of a paged call: for each row b, len_q <= cache_seqlens[b]
 * <= capacity and len_q <= max_q when max_q > 0 (else CV_CHECK_VALUE), and
 * every used page-table entry in [0, num_pages) (else CV_CHECK_INDEX). One
 * work-group per row. Run after the cu_seqlens_q check; a bad cu_seqlens_q
 * is clamped here. */
__kernel void check_paged(__global const int *cu_base, ulong cu_off, long total_q, int max_q,
                          __global const int *cs_base, ulong cs_off,
                          __global const int *pt_base, ulong pt_off, long pt_stride,
                          int page_size, int num_pages, int capacity, __global int *flag)
{
    const long b = get_group_id(0);
    __global const int *cu = CV_CPTR(int, cu_base, cu_off);
    const long lq = clamp((long)cu[b + 1], 0L, total_q) - clamp((long)cu[b], 0L, total_q);
    const int cs = CV_CPTR(int, cs_base, cs_off)[b];
    if (cs < lq || cs > capacity || (max_q > 0 && lq > max_q)) {
        if (get_local_id(0) == 0)
            cv_flag(flag, CV_CHECK_VALUE);
        return;
    }
    __global const int *row = CV_CPTR(int, pt_base, pt_off) + b * pt_stride;
    const int used = (cs + page_size - 1) / page_size;
    for (int i = get_local_id(0); i < used; i += get_local_size(0)) {
        const int p = row[i];
        if (p < 0 || p >= num_pages)
            cv_flag(flag, CV_CHECK_INDEX);
    }
}

/* The gathered form of a chunked prefill (lib/attention/paged-cl.c): each
 * row's cache is copied into packed K/V, and the contiguous kernels run on
 * it. paged_gather_cu writes cu_k [n + 1], the prefix sums of the cache
 * lengths (each clamped to [0, capacity], as the paged kernels clamp them),
 * into the scratch at byte cu_off; one work-group of at most 64 items, each
 * summing a contiguous run of rows. */
__kernel void paged_gather_cu(__global const int *cs_base, ulong cs_off, long n, int capacity,
                              __global uchar *scratch, ulong cu_off)
{
    __local long part[64];
    const int lid = get_local_id(0), wg = get_local_size(0);
    __global const int *cs = CV_CPTR(int, cs_base, cs_off);
    __global int *cu = CV_PTR(int, scratch, cu_off);
    const long per = (n + wg - 1) / wg, lo = min(n, lid * per), hi = min(n, lo + per);
    long sum = 0;
    for (long i = lo; i < hi; i++)
        sum += clamp(cs[i], 0, capacity);
    part[lid] = sum;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid == 0) {
        long run = 0;
        for (int i = 0; i < wg; i++) {
            const long s = part[i];
            part[i] = run;
            run += s;
        }
        cu[0] = 0;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    long run = part[lid];
    for (long i = lo; i < hi; i++) {
        run += clamp(cs[i], 0, capacity);
        cu[i + 1] = (int)run;
    }
}

/* Work-item (e, j, b) copies `unit` bytes (16, 4 or 2) at byte e * unit of
 * key j's K row (the first k_units work-items) or V row (the rest, up to
 * units) of page-table row b to packed row cu_k[b] + j of the scratch (K rows
 * at byte k_off, V rows at v_off). Keys at or past the row's clamped cache
 * length are skipped; page entries are clamped to [0, num_pages) as the
 * paged kernels do (the device check reports them first when on). */
__kernel void paged_gather(int k_units, int units, int unit, int capacity,
                           __global const int *cs_base, ulong cs_off,
                           __global const int *pt_base, ulong pt_off, long pt_stride,
                           int page_size, int num_pages, __global const uchar *kc, ulong kc_off,
                           __global const uchar *vc, ulong vc_off, __global uchar *scratch,
                           ulong cu_off, ulong k_off, ulong v_off)
{
    const int e = get_global_id(0), j = get_global_id(1);
    const long b = get_global_id(2);
    if (e >= units || j >= clamp(CV_CPTR(int, cs_base, cs_off)[b], 0, capacity))
        return;
    __global const int *pt_row = CV_CPTR(int, pt_base, pt_off) + b * pt_stride;
    const int page = clamp(pt_row[j / page_size], 0, num_pages - 1);
    const long slot = (long)page * page_size + j % page_size;
    const long dst = (long)CV_CPTR(int, scratch, cu_off)[b] + j;
    const bool is_k = e < k_units;
    const long row = (long)(is_k ? k_units : units - k_units) * unit;
    const long at = (long)(is_k ? e : e - k_units) * unit;
    __global const uchar *s = (is_k ? kc + kc_off : vc + vc_off) + slot * row + at;
    __global uchar *d = scratch + (is_k ? k_off : v_off) + dst * row + at;
    if (unit == 16)
        *(__global uint4 *)d = *(__global const uint4 *)s;
    else if (unit == 4)
        *(__global uint *)d = *(__global const uint *)s;
    else
        *(__global ushort *)d = *(__global const ushort *)s;
}

#else /* attn_paged */

#ifndef CV_DTYPE
#define CV_DTYPE CV_DT_F32
#endif
#ifndef HEAD_DIM
#define HEAD_DIM 128
#endif
#ifndef HEAD_DIM_V
#define HEAD_DIM_V HEAD_DIM
#endif
#ifndef RG
#define RG 1 /* row groups: WG_SIZE = HEAD_DIM_V * RG work-items */
#endif
#ifndef PR
#define PR 8 /* query rows (query token x query head of the group) per pass, a multiple of RG */
#endif
#ifndef BN
#define BN 32 /* keys per tile */
#endif
#define WG_SIZE (HEAD_DIM_V * RG)
#define RPT (PR / RG)          /* rows per work-item in O += P V */
#define KS (HEAD_DIM + 1)      /* local K row, padded against bank conflicts */

/* 8 consecutive elements of a row, as floats. */
#if CV_DTYPE == CV_DT_F16
#define LOAD8(p, i) vload_half8(0, (__global const half *)(p) + (i))
#elif CV_DTYPE == CV_DT_BF16
inline float8 cv_load_bf16x8(__global const uchar *p, size_t i)
{
    const ushort8 u = vload8(0, (__global const ushort *)p + i);
    return as_float8(convert_uint8(u) << 16);
}
#define LOAD8(p, i) cv_load_bf16x8((p), (i))
#else
#define LOAD8(p, i) vload8(0, (__global const float *)(p) + (i))
#endif
#if CV_DTYPE == CV_DT_F16
#define STORE_ACT(p, i, x) vstore_half_rte((x), (i), (__global half *)(p))
#elif CV_DTYPE == CV_DT_BF16
#define STORE_ACT(p, i, x) (((__global ushort *)(p))[i] = cv_float_to_bf16(x))
#else
#define STORE_ACT(p, i, x) (((__global float *)(p))[i] = (x))
#endif

/* Chunks of 8 elements per work-item in a K and a V tile. */
#define NCK ((BN * (HEAD_DIM / 8) + WG_SIZE - 1) / WG_SIZE)
#define NCV ((BN * (HEAD_DIM_V / 8) + WG_SIZE - 1) / WG_SIZE)

/* Loads the K and V tile of keys [kb0, kb0 + BN) (zeros past kmax) into
 * pk, pv: chunk c of this work-item is element lid + c * WG_SIZE. */
#define LOAD_TILE(kb0)                                                                         \
    do {                                                                                       \
        const int n_ = min(BN, kmax + 1 - (kb0));                                              \
        for (int c_ = 0; c_ < NCK; c_++) {                                                     \
            const int e_ = lid + c_ * WG_SIZE, j_ = e_ / (HEAD_DIM / 8);                       \
            pk[c_] = (float8)(0.0f);                                                           \
            if (j_ < n_) {                                                                     \
                const long row_ = cv_paged_row(pt_row, page_size, num_pages, (kb0) + j_);      \
                pk[c_] = LOAD8(kc + kc_off, (size_t)(row_ * heads_kv + kvh) * HEAD_DIM +       \
                                                8 * (e_ % (HEAD_DIM / 8)));                    \
            }                                                                                  \
        }                                                                                      \
        for (int c_ = 0; c_ < NCV; c_++) {                                                     \
            const int e_ = lid + c_ * WG_SIZE, j_ = e_ / (HEAD_DIM_V / 8);                     \
            pv[c_] = (float8)(0.0f);                                                           \
            if (j_ < n_) {                                                                     \
                const long row_ = cv_paged_row(pt_row, page_size, num_pages, (kb0) + j_);      \
                pv[c_] = LOAD8(vc + vc_off, (size_t)(row_ * heads_kv + kvh) * HEAD_DIM_V +     \
                                                8 * (e_ % (HEAD_DIM_V / 8)));                  \
            }                                                                                  \
        }                                                                                      \
    } while (0)

inline void cv_store8(__local float *d, float8 x)
{
    d[0] = x.s0; d[1] = x.s1; d[2] = x.s2; d[3] = x.s3;
    d[4] = x.s4; d[5] = x.s5; d[6] = x.s6; d[7] = x.s7;
}

/* One work-group per (row b, KV head, split): the row's queries times the
 * group's query heads are packed into passes of PR rows that share each K/V
 * tile read (GQA: a key is loaded once for all query heads of its KV head).
 * Split sp covers keys [sp * chunk, (sp + 1) * chunk) of the row's cache;
 * with n_splits > 1 the results are f32 partials in `part` (o [n_splits,
 * total_q, heads_q, HEAD_DIM_V], then lse [n_splits, heads_q, total_q]) that
 * attn_merge combines, else o and lse directly. Online softmax in base 2. */
__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1)))
void attn_paged(__global const uchar *q, ulong q_off, long q_stride,
                __global const uchar *kc, ulong kc_off, __global const uchar *vc, ulong vc_off,
                __global const int *cu_q_base, ulong cu_q_off,
                __global const int *cs_base, ulong cs_off,
                __global const int *pt_base, ulong pt_off, long pt_stride, int page_size,
                int num_pages, int capacity,
                __global uchar *o, ulong o_off, long o_stride, __global float *lse, ulong lse_off,
                __global float *part, int n_splits,
                int heads_q, int heads_kv, int total_q, float scale_log2, float scale,
                float softcap, int causal, int window_left, int window_right,
                __global const int *flag)
{
    __local float Qs[PR * HEAD_DIM];
    __local float Ks[BN * KS];
    __local float Vs[BN * HEAD_DIM_V];
    __local float Ss[PR * BN];
    __local float Alpha[PR], Lsum[PR], Mrow[PR];
    __local int Lo[PR], Hi[PR];

    /* ln 2 through constant memory, before any control flow: see CV_CONST_ONE */
    const float ln2 = M_LN2_F * CV_CONST_ONE(causal);
    if (flag && *flag)
        return;
    const int lid = get_local_id(0);
    const int col = lid % HEAD_DIM_V, rg = lid / HEAD_DIM_V;
    const cv_paged_item it =
        cv_paged_decode_item(get_group_id(0), n_splits, heads_kv, CV_CPTR(int, cu_q_base, cu_q_off),
                             total_q, CV_CPTR(int, cs_base, cs_off), capacity);
    const int sp = it.sp, kvh = it.kvh, q0 = it.q0, lq = it.lq, lk = it.lk;
    const int s0 = it.s0, s1 = it.s1, group = heads_q / heads_kv;
    __global const int *pt_row = CV_CPTR(int, pt_base, pt_off) + (long)it.b * pt_stride;
    const float qscale = softcap > 0.0f ? scale : scale_log2;
    const int nrows_all = lq * group;

    for (int rb = 0; rb < nrows_all; rb += PR) {
        const int nrows = min(PR, nrows_all - rb);
        barrier(CLK_LOCAL_MEM_FENCE); /* the previous pass no longer reads local memory */
        /* Q rows (pre-scaled) and each row's visible keys within the split. */
        for (int e = lid; e < PR * (HEAD_DIM / 8); e += WG_SIZE) {
            const int r = e / (HEAD_DIM / 8), c8 = e % (HEAD_DIM / 8);
            float8 x = (float8)(0.0f);
            if (r < nrows) {
                const int i = (rb + r) / group, h = kvh * group + (rb + r) % group;
                x = LOAD8(q + q_off, (size_t)(q0 + i) * q_stride + (size_t)h * HEAD_DIM + 8 * c8) *
                    qscale;
            }
            cv_store8(Qs + r * HEAD_DIM + 8 * c8, x);
        }
        /* Each row's visible keys within the split, and their union: worked
         * out by every work-item (PR rows of arithmetic), no local atomics. */
        int kmin = INT_MAX, kmax = -1;
        for (int r = 0; r < nrows; r++) {
            const int2 v = cv_paged_row_range((rb + r) / group, lq, lk, s0, s1, causal,
                                              window_left, window_right);
            if (v.x <= v.y) {
                kmin = min(kmin, v.x);
                kmax = max(kmax, v.y);
            }
        }
        if (lid < PR) {
            const int2 v = lid < nrows ? cv_paged_row_range((rb + lid) / group, lq, lk, s0, s1,
                                                            causal, window_left, window_right)
                                       : (int2)(1, 0);
            Lo[lid] = v.x;
            Hi[lid] = v.y;
            Mrow[lid] = -INFINITY;
            Lsum[lid] = 0.0f;
        }
        float acc[RPT];
        for (int i = 0; i < RPT; i++)
            acc[i] = 0.0f;

        /* Tiles are loaded into registers one tile ahead: the next tile's
         * loads are in flight while this one is computed. */
        float8 pk[NCK], pv[NCV];
        if (kmin <= kmax)
            LOAD_TILE(kmin);
        for (int kb = kmin; kb <= kmax; kb += BN) {
            const int nvalid = min(BN, kmax + 1 - kb);
            barrier(CLK_LOCAL_MEM_FENCE); /* the previous tile is no longer read */
            for (int c = 0; c < NCK; c++) {
                const int e = lid + c * WG_SIZE;
                if (e < BN * (HEAD_DIM / 8))
                    cv_store8(Ks + (e / (HEAD_DIM / 8)) * KS + 8 * (e % (HEAD_DIM / 8)), pk[c]);
            }
            for (int c = 0; c < NCV; c++) {
                const int e = lid + c * WG_SIZE;
                if (e < BN * (HEAD_DIM_V / 8))
                    cv_store8(Vs + (e / (HEAD_DIM_V / 8)) * HEAD_DIM_V + 8 * (e % (HEAD_DIM_V / 8)),
                              pv[c]);
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            if (kb + BN <= kmax)
                LOAD_TILE(kb + BN);
            /* S = Q K^T with the masks (and softcap), in base 2. */
            for (int e = lid; e < PR * BN; e += WG_SIZE) {
                const int r = e / BN, j = e % BN, key = kb + j;
                float s = -INFINITY;
                if (j < nvalid && key >= Lo[r] && key <= Hi[r]) {
                    float t = 0.0f;
                    for (int d = 0; d < HEAD_DIM; d++)
                        t = mad(Qs[r * HEAD_DIM + d], Ks[j * KS + d], t);
                    s = softcap > 0.0f ? softcap * tanh(t / softcap) * M_LOG2E_F : t;
                }
                Ss[e] = s;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            /* Online softmax, one work-item per row: P in place of S. */
            if (lid < PR) {
                float mx = Mrow[lid];
                for (int j = 0; j < BN; j++)
                    mx = fmax(mx, Ss[lid * BN + j]);
                const float alpha = mx == -INFINITY ? 1.0f : exp2(Mrow[lid] - mx);
                float ps = 0.0f;
                for (int j = 0; j < BN; j++) {
                    const float s = Ss[lid * BN + j];
                    const float p = s == -INFINITY ? 0.0f : exp2(s - mx);
                    Ss[lid * BN + j] = p;
                    ps += p;
                }
                Lsum[lid] = Lsum[lid] * alpha + ps;
                Mrow[lid] = mx;
                Alpha[lid] = alpha;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            /* O += P V: this work-item's column for rows rg + RG * i. */
            for (int i = 0; i < RPT; i++) {
                const int r = rg + RG * i;
                float t = acc[i] * Alpha[r];
                for (int j = 0; j < BN; j++)
                    t = mad(Ss[r * BN + j], Vs[j * HEAD_DIM_V + col], t);
                acc[i] = t;
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* Lsum and Mrow of the last tile */
        for (int i = 0; i < RPT; i++) {
            const int r = rg + RG * i;
            if (r >= nrows)
                continue;
            const int qi = (rb + r) / group, h = kvh * group + (rb + r) % group;
            const size_t tok = (size_t)(q0 + qi);
            const float lt = Lsum[r];
            const float res = lt > 0.0f ? acc[i] / lt : 0.0f;
            const float l = lt > 0.0f ? (Mrow[r] + log2(lt)) * ln2 : -INFINITY;
            if (n_splits == 1) {
                STORE_ACT(o + o_off, tok * o_stride + (size_t)h * HEAD_DIM_V + col, res);
                if (col == 0 && lse)
                    CV_PTR(float, lse, lse_off)[(size_t)h * total_q + tok] = l;
            } else {
                const size_t rows_all = (size_t)n_splits * total_q * heads_q;
                part[(((size_t)sp * total_q + tok) * heads_q + h) * HEAD_DIM_V + col] = res;
                if (col == 0)
                    part[rows_all * HEAD_DIM_V + ((size_t)sp * heads_q + h) * total_q + tok] = l;
            }
        }
    }
}

#endif
