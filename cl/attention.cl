/* Varlen attention (SPEC 1), portable OpenCL C 1.2.
 *
 * Built two ways by lib/attention/attention-cl.c:
 * -DCV_ATTN_AUX: the work-list builder and the merge kernel (dtype-free,
 *   compiled once per context);
 * otherwise: the flash-style forward kernel specialised by -D CV_DTYPE,
 *   HEAD_DIM, HEAD_DIM_V, BLOCK_M, BLOCK_N, WG_SIZE, TX.
 */

#ifdef CV_ATTN_AUX

/* Sequence s's tiles (none when its clamped bounds are empty). */
inline int wl_tiles(__global const int *cu, int s, int total_q, int row_mult, int block_m)
{
    const int a = clamp(cu[s], 0, total_q), b = clamp(cu[s + 1], 0, total_q);
    return b > a ? ((b - a) * row_mult + block_m - 1) / block_m : 0;
}

/* The work list: wl[0] = number of items, then items (sequence, first row of
 * the query tile) from wl[2]; a sequence of L queries has L * row_mult rows
 * (row_mult > 1: the query heads of a KV head packed into the tile's rows);
 * after the items, scratch for the per-sequence tile offsets. One
 * work-group of any power-of-two size. `order` (CV_WL_*): with
 * CV_WL_LONGEST_FIRST the sequences go by tile count, most first (ties by
 * index; only up to CV_ATTN_WORKLIST_SORT_MAX sequences, in index order
 * past that): heavy work-groups start early and the tail is short. Within
 * a sequence the last tile comes first (under causal masking the heaviest
 * query tile), or with CV_WL_FIRST_TILE_FIRST the first (the heaviest key
 * tile of the backward's dk/dv). The order changes no result. */
__kernel void attn_worklist(__global const int *cu_base, ulong cu_off, int n_seqs, int total_q,
                            int row_mult, int block_m, int capacity, int order,
                            __global int *wl, __global const int *flag)
{
    __global const int *cu = CV_CPTR(int, cu_base, cu_off);
    __global int *tile_cu = wl + 2 + 2 * (long)capacity;
    __local int part[CV_ATTN_WORKLIST_MAX_WG];
    __local int len_l[CV_ATTN_WORKLIST_SORT_MAX], perm_l[CV_ATTN_WORKLIST_SORT_MAX];
    const int lid = get_local_id(0), nt = get_local_size(0);

    if (flag && *flag) { /* invalid cu_seqlens: launch nothing */
        if (lid == 0)
            wl[0] = 0;
        return;
    }
    /* Bounds are clamped (wl_tiles) so that invalid (unchecked) cu_seqlens
     * cannot make a tile address rows outside [0, total_q). Position p of the
     * order holds sequence SEQ_AT(p): its rank by tile count (the number of
     * sequences before it), computed by every work-item for its own sequences. */
    const bool sorted = (order & CV_WL_LONGEST_FIRST) && n_seqs <= CV_ATTN_WORKLIST_SORT_MAX;
    if (sorted) {
        for (int s = lid; s < n_seqs; s += nt)
            len_l[s] = wl_tiles(cu, s, total_q, row_mult, block_m);
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int s = lid; s < n_seqs; s += nt) {
            const int x = len_l[s];
            int rank = 0;
            for (int r = 0; r < n_seqs; r++)
                rank += len_l[r] > x || (len_l[r] == x && r < s);
            perm_l[rank] = s;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
#define SEQ_AT(p) (sorted ? perm_l[p] : (p))
    /* Each work-item counts the tiles of a contiguous range of positions. */
    const int per = (n_seqs + nt - 1) / nt;
    const int s0 = min(n_seqs, lid * per), s1 = min(n_seqs, s0 + per);
    int sum = 0;
    for (int s = s0; s < s1; s++)
        sum += wl_tiles(cu, SEQ_AT(s), total_q, row_mult, block_m);
    part[lid] = sum;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid == 0) { /* nt <= CV_ATTN_WORKLIST_MAX_WG partial sums: a serial scan is cheap */
        int acc = 0;
        for (int i = 0; i < nt; i++) {
            int x = part[i];
            part[i] = acc;
            acc += x;
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    int acc = part[lid];
    for (int s = s0; s < s1; s++) {
        tile_cu[s] = acc;
        acc += wl_tiles(cu, SEQ_AT(s), total_q, row_mult, block_m);
    }
    if (lid == nt - 1) /* the exclusive prefix of the last thread plus its own count */
        tile_cu[n_seqs] = acc;
    barrier(CLK_GLOBAL_MEM_FENCE);
    const int total = min(tile_cu[n_seqs], capacity);
    if (lid == 0)
        wl[0] = total;
    for (int g = lid; g < total; g += nt) {
        /* The position of tile g: the last p with tile_cu[p] <= g. */
        int lo = 0, hi = n_seqs;
        while (hi - lo > 1) {
            int mid = lo + ((hi - lo) >> 1);
            if (tile_cu[mid] <= g)
                lo = mid;
            else
                hi = mid;
        }
        const int tiles = tile_cu[lo + 1] - tile_cu[lo], j = g - tile_cu[lo];
        wl[2 + 2 * g] = SEQ_AT(lo);
        wl[3 + 2 * g] = ((order & CV_WL_FIRST_TILE_FIRST) ? j : tiles - 1 - j) * block_m;
    }
#undef SEQ_AT
}

/* +inf and NaN read as -inf: a partial that saw no key (SPEC 1). */
inline float cv_sane_lse(float x)
{
    return (x > -INFINITY && x < INFINITY) ? x : -INFINITY;
}

/* Merge of partial results: CV_ATTN_MERGE_LANES (16) lanes per (token, head)
 * row, 4 rows per CV_ATTN_MERGE_WG-wide (64) work-group. Part p of o is at
 * o_a + p * part_stride (elements) unless o_b is given (two-way: part 1 is o_b, lse_b). Parts are of dtype
 * part_dt (f32 partials of the paged kernel), o of dt, its tokens
 * o_tok_stride elements apart. Every read of a row's
 * lse happens before the barrier and every write after it, so the merge may
 * run in place (o == o_a, lse == lse_a). */
__kernel __attribute__((reqd_work_group_size(CV_ATTN_MERGE_WG, 1, 1)))
void attn_merge(long n_parts, long tokens, int heads, int dv, int dt, int part_dt,
                long o_tok_stride,
                __global const uchar *o_a, ulong o_a_off, __global const uchar *o_b,
                ulong o_b_off, long part_stride, __global const float *lse_a,
                ulong lse_a_off, __global const float *lse_b, ulong lse_b_off,
                long lse_part_stride, __global uchar *o, ulong o_off, __global float *lse,
                ulong lse_off, __global const int *flag)
{
    __local float wts[CV_ATTN_MERGE_WG / CV_ATTN_MERGE_LANES][CV_ATTN_MERGE_WMAX];
    /* A device check failed earlier in the chain: no row is active, so nothing
     * is read or written. Not an early return: after a return on a loaded
     * value the log below would sit in divergent control flow, where llvmpipe
     * warns about the pointer to its table (see CV_CONST_ONE). */
    const bool raised = flag && *flag;
    const int lane = get_local_id(0) % CV_ATTN_MERGE_LANES;
    const long row = (long)get_group_id(0) * (CV_ATTN_MERGE_WG / CV_ATTN_MERGE_LANES) +
                     (get_local_id(0) / CV_ATTN_MERGE_LANES);
    const bool active = !raised && row < tokens * heads;
    const long t = active ? row / heads : 0, h = active ? row % heads : 0;
    const long li = h * tokens + t;
    const size_t es = part_dt == CV_DT_F32 ? 4 : 2;
    __global const uchar *pa = o_a + o_a_off;
    __global const uchar *pb = o_b ? o_b + o_b_off : 0;
    __global const float *la = CV_CPTR(float, lse_a, lse_a_off);
    __global const float *lb = lse_b ? CV_CPTR(float, lse_b, lse_b_off) : 0;
    __global uchar *po = o + o_off;

    /* The row's lse over all parts (every lane of the row computes it), and
     * the weights of its first CV_ATTN_MERGE_WMAX parts in local memory, each
     * lane writing every CV_ATTN_MERGE_LANES-th (more are recomputed). Every
     * read of lse happens before the barrier that precedes the first write. */
    const int rl = get_local_id(0) / CV_ATTN_MERGE_LANES;
    float mx = -INFINITY, sum = 0.0f;
    if (active) {
        for (long p = 0; p < n_parts; p++) {
            float x = cv_sane_lse((p == 1 && lb) ? lb[li] : la[p * lse_part_stride + li]);
            mx = fmax(mx, x);
        }
        if (mx > -INFINITY) {
            for (long p = 0; p < n_parts; p++) {
                float x = cv_sane_lse((p == 1 && lb) ? lb[li] : la[p * lse_part_stride + li]);
                sum += x > -INFINITY ? exp(x - mx) : 0.0f;
            }
        }
    }
    /* log outside the select, for the same reason (log(0) = -inf is unused) */
    const float lsum = log(sum);
    const float total = mx > -INFINITY ? mx + lsum : -INFINITY;
    for (long p = lane; p < CV_ATTN_MERGE_WMAX; p += CV_ATTN_MERGE_LANES) {
        float x = -INFINITY;
        if (active && p < n_parts)
            x = cv_sane_lse((p == 1 && lb) ? lb[li] : la[p * lse_part_stride + li]);
        wts[rl][p] = (x > -INFINITY && total > -INFINITY) ? exp(x - total) : 0.0f;
    }
    barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);
    /* Rows past the end write nothing (guarded, not returned from: PoCL 5
     * let such work-items run on after the barrier and write row 0). */
    /* Columns in blocks of MCOLS per lane, parts MPARTS at a time: the loads
     * of a block are independent (in flight together), so a call of many
     * parts waits once per MPARTS parts, not once per part and column. */
#define MCOLS 8
#define MPARTS 4
    const size_t ebase = (size_t)row * (size_t)dv;
    for (int c0 = 0; active && c0 < dv; c0 += MCOLS * CV_ATTN_MERGE_LANES) {
        float acc[MCOLS];
        for (int k = 0; k < MCOLS; k++)
            acc[k] = 0.0f;
        for (long p0 = 0; p0 < n_parts; p0 += MPARTS) { /* MPARTS parts' loads at once */
            float wp[MPARTS];
            for (int u = 0; u < MPARTS; u++) {
                const long p = p0 + u;
                wp[u] = 0.0f;
                if (p < n_parts && p < CV_ATTN_MERGE_WMAX) {
                    wp[u] = wts[rl][p];
                } else if (p < n_parts) {
                    float x = cv_sane_lse(la[p * lse_part_stride + li]);
                    wp[u] = (x > -INFINITY && total > -INFINITY) ? exp(x - total) : 0.0f;
                }
            }
            float v[MPARTS][MCOLS];
            for (int u = 0; u < MPARTS; u++) {
                const long p = p0 + u;
                const size_t pi = (size_t)min(p, n_parts - 1); /* in range, read or not */
                __global const uchar *part =
                    (p == 1 && pb) ? pb : pa + pi * (size_t)part_stride * es;
                for (int k = 0; k < MCOLS; k++) {
                    const int c = c0 + lane + k * CV_ATTN_MERGE_LANES;
                    /* a part that saw no key (weight 0): its o is not read */
                    v[u][k] = wp[u] != 0.0f && c < dv ? cv_load_f(part, ebase + c, part_dt)
                                                      : 0.0f;
                }
            }
            for (int u = 0; u < MPARTS; u++)
                for (int k = 0; k < MCOLS; k++)
                    acc[k] += wp[u] * v[u][k];
        }
        for (int k = 0; k < MCOLS; k++) {
            const int c = c0 + lane + k * CV_ATTN_MERGE_LANES;
            if (c < dv)
                cv_store_f(po, (size_t)t * o_tok_stride + (size_t)h * dv + c, acc[k], dt);
        }
    }
#undef MCOLS
#undef MPARTS
    if (active && lane == 0 && lse)
        CV_PTR(float, lse, lse_off)[li] = total;
}

#else /* the forward kernel */

#ifndef CV_DTYPE
#define CV_DTYPE CV_DT_F32
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
/* Q and K are staged DCH dimensions at a time, V KCH keys at a time: small
 * chunks keep local memory low enough for 64x64 tiles in f32 on GPUs. */
#ifndef DCH
#define DCH 16
#endif
#ifndef KCH
#define KCH 16
#endif

/* Full unrolling keeps the small per-thread arrays in registers on GPUs; on
 * CPU devices (-DCV_NO_UNROLL) it only multiplies compile time. */
#ifdef CV_NO_UNROLL
#define CV_UNROLL
#else
#define CV_UNROLL _Pragma("unroll")
#endif

/* How far the loops over a staged chunk unroll (S_UNROLL: Q K^T's float4
 * steps, PV_UNROLL: P V's four-key steps); unset: fully with -DCV_CHUNK_UNROLL
 * (NVIDIA), else the compiler's choice. On the H100 (f32, D 128, 256
 * work-items) full unrolling kept 128 registers and ran 1.07x faster than
 * none; partial unrolling took 170-196 and lost. Other devices are not
 * measured, and PoCL compiles the unrolled loops slowly. */
#define CV_PRAGMA_(x) _Pragma(#x)
#define CV_UNROLL_N(n) CV_PRAGMA_(unroll n)
#if defined(S_UNROLL)
#define CV_UNROLL_S CV_UNROLL_N(S_UNROLL)
#elif defined(CV_CHUNK_UNROLL)
#define CV_UNROLL_S CV_UNROLL
#else
#define CV_UNROLL_S
#endif
#if defined(PV_UNROLL)
#define CV_UNROLL_PV CV_UNROLL_N(PV_UNROLL)
#elif defined(CV_CHUNK_UNROLL)
#define CV_UNROLL_PV CV_UNROLL
#else
#define CV_UNROLL_PV
#endif

/* Thread (tx, ty) owns query rows ty + TY*i (i < TM), key columns tx + TX*j
 * (j < TN) of a score tile and output columns OCOL(c) (c < TD, below):
 * interleaved, so a warp reads consecutive local-memory words, or one
 * broadcast word. */
#define TY (WG_SIZE / TX)
#define TM (BLOCK_M / TY)
#define TN (BLOCK_N / TX)
#define TD (HEAD_DIM_V / TX)
/* Local rows in float4 units, padded by one float4 against bank conflicts. */
#define QS4 (DCH / 4 + 1)
#define PS4 (BLOCK_N / 4 + 1)
/* V rows in float4 units, unpadded: a work-item reads whole float4s of
 * consecutive columns where each owns groups of four (CV_V4: output columns
 * 4 tx + 4 TX g + e), single columns otherwise (tx + TX c). */
#define V4 (HEAD_DIM_V / 4)
#if TD % 4 == 0
#define CV_V4 1
#define OCOL(c) (4 * tx + 4 * TX * ((c) / 4) + (c) % 4)
#else
#define CV_V4 0
#define OCOL(c) (tx + TX * (c))
#endif
/* The staging area holds a Q and a K chunk, or (in their place) a V chunk. */
#define QK_STAGE4 ((BLOCK_M + BLOCK_N) * QS4)
#define STAGE4 (QK_STAGE4 > KCH * V4 ? QK_STAGE4 : KCH * V4)
/* A work-item's float4s of a Q chunk, a K chunk and a V chunk: the next chunk
 * is loaded into registers (pf) while the products run on the current one. */
#define NQ4 ((BLOCK_M * (DCH / 4) + WG_SIZE - 1) / WG_SIZE)
#define NK4 ((BLOCK_N * (DCH / 4) + WG_SIZE - 1) / WG_SIZE)
#define NV4 ((KCH * V4 + WG_SIZE - 1) / WG_SIZE)
#define NPF (NQ4 + NK4 > NV4 ? NQ4 + NK4 : NV4)

#if CV_DTYPE == CV_DT_F16
#define LOAD_ACT(p, i) vload_half((i), (__global const half *)(p))
#define STORE_ACT(p, i, x) vstore_half_rte((x), (i), (__global half *)(p))
#define LOAD_ACT4(p, i) vload_half4(0, (__global const half *)(p) + (i))
#elif CV_DTYPE == CV_DT_BF16
#define LOAD_ACT(p, i) cv_bf16_to_float(((__global const ushort *)(p))[i])
#define STORE_ACT(p, i, x) (((__global ushort *)(p))[i] = cv_float_to_bf16(x))
#define LOAD_ACT4(p, i)                                                                        \
    ((float4)(LOAD_ACT(p, (i)), LOAD_ACT(p, (i) + 1), LOAD_ACT(p, (i) + 2), LOAD_ACT(p, (i) + 3)))
#else
#define LOAD_ACT(p, i) (((__global const float *)(p))[i])
#define STORE_ACT(p, i, x) (((__global float *)(p))[i] = (x))
#ifdef CV_ALIGNED4 /* the host saw Q, K and V rows 16-byte aligned */
#define LOAD_ACT4(p, i) (*(__global const float4 *)((__global const float *)(p) + (i)))
#else
#define LOAD_ACT4(p, i) vload4(0, (__global const float *)(p) + (i))
#endif
#endif

/* CV_ATTN_NEXP: the softmax's exponentials without a test per element (a
 * row's maximum taken as 0 while it is -inf), by cv_ex2 (cl/common.clh): native_exp2 (for
 * benchmarks: its accuracy is the device's) or, with -DCV_NV_EX2=1 on
 * NVIDIA (the default there), ex2.approx.ftz.f32 (2 ulp). 0 (elsewhere):
 * exp2, a row that has seen nothing tested. */
#ifndef CV_ATTN_NEXP
#define CV_ATTN_NEXP 0
#endif
/* CV_ATTN_FOLD (default on): without softcap the scores stay unscaled and
 * the scale folds into the exponent, p = exp2(s f - m f), one FMA. Otherwise
 * the scores are scaled after Q K^T. Q's chunks are never scaled as they are
 * staged: that multiply made each work-item wait for the chunk's loads before
 * the products that were to hide them (H200 f32 D 128: 3.5%). */
#ifndef CV_ATTN_FOLD
#define CV_ATTN_FOLD 1
#endif
/* CV_PF_OFF (default on for packed K/V, off for paged): see PF_OFFSETS. */
#ifndef CV_PF_OFF
#ifdef CV_PAGED
#define CV_PF_OFF 0
#else
#define CV_PF_OFF 1
#endif
#endif
#if CV_PF_OFF && defined(CV_PAGED)
#error "CV_PF_OFF needs packed K/V"
#endif

/* The staging steps of attn_fwd (they use its variables). FETCH_QK issues the
 * loads of Q's and K's dimensions [d, d + DCH) for the key tile at kt with nv
 * valid keys into pf, FETCH_V those of V's keys [kt + kc, + KCH); STORE_QK
 * and STORE_V put pf in local memory. Rows past the sequence read as 0. */
#if CV_PF_OFF
/* The load offsets (elements) of this work-item's pieces of a chunk are the
 * same for every chunk but for the chunk's start: PF_OFFSETS computes them
 * once, and a chunk's loads add the start (on NVIDIA the index arithmetic of
 * each load was about a fifth of a chunk's instructions). A piece past the
 * tile gets row INT_MAX, which every bound test fails. */
#define PF_OFFSETS()                                                                           \
    size_t qo_[NQ4], ko_[NK4], vo_[NV4];                                                       \
    int qr_[NQ4], kj_[NK4], vj_[NV4];                                                          \
    CV_UNROLL                                                                                  \
    for (int t_ = 0; t_ < NQ4; t_++) {                                                         \
        const int e_ = lid + t_ * WG_SIZE, r_ = e_ / (DCH / 4), c_ = e_ % (DCH / 4);            \
        qr_[t_] = e_ < BLOCK_M * (DCH / 4) ? r_ : INT_MAX;                                     \
        qo_[t_] = (size_t)(q0 + row0 + min(r_, rows - 1)) * q_stride + (size_t)h * HEAD_DIM +  \
                  4 * c_;                                                                      \
    }                                                                                          \
    CV_UNROLL                                                                                  \
    for (int t_ = 0; t_ < NK4; t_++) {                                                         \
        const int e_ = lid + t_ * WG_SIZE, j_ = e_ / (DCH / 4), c_ = e_ % (DCH / 4);            \
        kj_[t_] = e_ < BLOCK_N * (DCH / 4) ? j_ : INT_MAX;                                     \
        ko_[t_] = (size_t)(k0 + min(j_, BLOCK_N - 1)) * k_stride + (size_t)kvh * HEAD_DIM +    \
                  4 * c_;                                                                      \
    }                                                                                          \
    CV_UNROLL                                                                                  \
    for (int t_ = 0; t_ < NV4; t_++) {                                                         \
        const int e_ = lid + t_ * WG_SIZE, j_ = e_ / V4, c_ = e_ % V4;                         \
        vj_[t_] = e_ < KCH * V4 ? j_ : INT_MAX;                                                \
        vo_[t_] = (size_t)(k0 + min(j_, KCH - 1)) * v_stride + (size_t)kvh * HEAD_DIM_V +      \
                  4 * c_;                                                                      \
    }
#define FETCH_QK(d, kt, nv)                                                                    \
    do {                                                                                       \
        const size_t kt_ = (size_t)(kt) * k_stride + (d);                                      \
        CV_UNROLL                                                                              \
        for (int t_ = 0; t_ < NQ4; t_++) {                                                     \
            pf[t_] = (float4)(0.0f);                                                           \
            if (qr_[t_] < rows)                                                                \
                pf[t_] = LOAD_ACT4(qb, qo_[t_] + (d));                                         \
        }                                                                                      \
        CV_UNROLL                                                                              \
        for (int t_ = 0; t_ < NK4; t_++) {                                                     \
            pf[NQ4 + t_] = (float4)(0.0f);                                                     \
            if (kj_[t_] < (nv))                                                                \
                pf[NQ4 + t_] = LOAD_ACT4(kb_, ko_[t_] + kt_);                                  \
        }                                                                                      \
    } while (0)
#else
#define PF_OFFSETS()
#define FETCH_QK(d, kt, nv)                                                                    \
    do {                                                                                       \
        CV_UNROLL                                                                              \
        for (int t_ = 0; t_ < NQ4; t_++) {                                                     \
            const int e_ = lid + t_ * WG_SIZE, r_ = e_ / (DCH / 4), c_ = e_ % (DCH / 4);        \
            pf[t_] = (float4)(0.0f);                                                           \
            if (e_ < BLOCK_M * (DCH / 4) && r_ < rows)                                         \
                pf[t_] = LOAD_ACT4(qb, (size_t)(q0 + row0 + r_) * q_stride +                   \
                                           (size_t)h * HEAD_DIM + (d) + 4 * c_);              \
        }                                                                                      \
        CV_UNROLL                                                                              \
        for (int t_ = 0; t_ < NK4; t_++) {                                                     \
            const int e_ = lid + t_ * WG_SIZE, j_ = e_ / (DCH / 4), c_ = e_ % (DCH / 4);        \
            pf[NQ4 + t_] = (float4)(0.0f);                                                     \
            if (e_ < BLOCK_N * (DCH / 4) && j_ < (nv))                                         \
                pf[NQ4 + t_] = LOAD_ACT4(kb_, (size_t)KV_ROW((kt) + j_) * k_stride +           \
                                                  (size_t)kvh * HEAD_DIM + (d) + 4 * c_);      \
        }                                                                                      \
    } while (0)
#endif
#define STORE_QK()                                                                             \
    do {                                                                                       \
        CV_UNROLL                                                                              \
        for (int t_ = 0; t_ < NQ4; t_++) {                                                     \
            const int e_ = lid + t_ * WG_SIZE;                                                 \
            if (e_ < BLOCK_M * (DCH / 4))                                                      \
                Qc[e_ / (DCH / 4) * QS4 + e_ % (DCH / 4)] = pf[t_];                            \
        }                                                                                      \
        CV_UNROLL                                                                              \
        for (int t_ = 0; t_ < NK4; t_++) {                                                     \
            const int e_ = lid + t_ * WG_SIZE;                                                 \
            if (e_ < BLOCK_N * (DCH / 4))                                                      \
                Kc[e_ / (DCH / 4) * QS4 + e_ % (DCH / 4)] = pf[NQ4 + t_];                      \
        }                                                                                      \
    } while (0)
#if CV_PF_OFF
#define FETCH_V(kt, kc, nv)                                                                    \
    do {                                                                                       \
        const size_t kt_ = (size_t)((kt) + (kc)) * v_stride;                                   \
        CV_UNROLL                                                                              \
        for (int t_ = 0; t_ < NV4; t_++) {                                                     \
            pf[t_] = (float4)(0.0f);                                                           \
            if (vj_[t_] < (nv) - (kc))                                                         \
                pf[t_] = LOAD_ACT4(vb, vo_[t_] + kt_);                                         \
        }                                                                                      \
    } while (0)
#else
#define FETCH_V(kt, kc, nv)                                                                    \
    do {                                                                                       \
        CV_UNROLL                                                                              \
        for (int t_ = 0; t_ < NV4; t_++) {                                                     \
            const int e_ = lid + t_ * WG_SIZE, j_ = e_ / V4, c_ = e_ % V4;                     \
            pf[t_] = (float4)(0.0f);                                                           \
            if (e_ < KCH * V4 && (kc) + j_ < (nv))                                             \
                pf[t_] = LOAD_ACT4(vb, (size_t)KV_ROW((kt) + (kc) + j_) * v_stride +           \
                                           (size_t)kvh * HEAD_DIM_V + 4 * c_);                \
        }                                                                                      \
    } while (0)
#endif
#define STORE_V()                                                                              \
    do {                                                                                       \
        CV_UNROLL                                                                              \
        for (int t_ = 0; t_ < NV4; t_++) {                                                     \
            const int e_ = lid + t_ * WG_SIZE;                                                 \
            if (e_ < KCH * V4)                                                                 \
                Vc4[e_] = pf[t_];                                                              \
        }                                                                                      \
    } while (0)
/* acc += p . (v0, v1, v2, v3) for four consecutive keys */
#define PV_MAD(a, p, v0, v1, v2, v3)                                                           \
    do {                                                                                       \
        float t_ = mad((p).x, (v0), (a));                                                      \
        t_ = mad((p).y, (v1), t_);                                                             \
        t_ = mad((p).z, (v2), t_);                                                             \
        (a) = mad((p).w, (v3), t_);                                                            \
    } while (0)
/* acc_ = op(acc_, the TX partial values of row r in Red), in float4s where TX allows */
#define RED_ADD(a, b) ((a) + (b))
#if TX % 4 == 0
#define RED_ROW(acc_, r, op)                                                                   \
    do {                                                                                       \
        for (int t_ = 0; t_ < TX / 4; t_++) {                                                  \
            const float4 y_ = ((__local const float4 *)Red)[(r) * (TX / 4) + t_];              \
            acc_ = op(op(acc_, y_.x), op(y_.y, op(y_.z, y_.w)));                               \
        }                                                                                      \
    } while (0)
#else
#define RED_ROW(acc_, r, op)                                                                   \
    do {                                                                                       \
        for (int t_ = 0; t_ < TX; t_++)                                                        \
            acc_ = op(acc_, Red[(r) * TX + t_]);                                               \
    } while (0)
#endif

/* NVIDIA (-DCV_NV_SHFL): a row's TX work-items are adjacent lanes of one
 * warp, so butterfly shuffles (cv_nv_xor, common.clh) reduce the row maxima
 * and sums without local memory or a barrier. */
#if defined(CV_NV_SHFL) && TX > 1 && TX <= 32 && (TX & (TX - 1)) == 0
#define ATTN_SHFL 1
#define LANES_RED(x_, op)                                                                      \
    do {                                                                                       \
        for (int m_ = TX / 2; m_ >= 1; m_ >>= 1)                                               \
            x_ = op(x_, cv_nv_xor(x_, m_));                                                    \
    } while (0)
#else
#define ATTN_SHFL 0
#endif

/* One work-group per (work item, query head): BLOCK_M query rows of one
 * sequence against that sequence's keys, BLOCK_N at a time, with the online
 * softmax in base 2 (q is pre-scaled by scale * log2(e) when there is no
 * softcap). Only keys some row of the tile can see are visited. */
__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1)))
void attn_fwd(__global const uchar *q, ulong q_off, long q_stride,
              __global const uchar *k, ulong k_off, long k_stride,
              __global const uchar *v, ulong v_off, long v_stride,
              __global const int *cu_q_base, ulong cu_q_off,
              __global const int *cu_k_base, ulong cu_k_off,
              __global const int *q_pos_base, ulong q_pos_off,
              __global uchar *o, ulong o_off, long o_stride,
              __global float *lse, ulong lse_off,
              __global const int *wl, int heads_q, int group, int total_q, int total_k,
              float scale_log2, float scale, float softcap, int causal, int window_left,
              int window_right, __global const int *flag CV_PAGED_ARGS CV_DROP_ARGS)
{
    /* A Q chunk and a K chunk, or a V chunk in their place. */
    __local float4 Stage[STAGE4];
    __local float4 *const Qc = Stage, *const Kc = Stage + BLOCK_M * QS4, *const Vc4 = Stage;
    __local float4 Ps[BLOCK_M * PS4];
#if !ATTN_SHFL
    __local float Red[BLOCK_M * TX] __attribute__((aligned(16)));
#endif
    __local int range[2];

    /* ln 2 through constant memory, before any control flow: see CV_CONST_ONE */
    const float ln2 = M_LN2_F * CV_CONST_ONE(causal);
    if (flag && *flag)
        return;
    const int lid = get_local_id(0);
    const int tx = lid % TX, ty = lid / TX;
    const long grp = get_group_id(0);
    const int item = (int)(grp / heads_q), h = (int)(grp % heads_q);
    if (item >= wl[0])
        return;
    const int seq = wl[2 + 2 * item], row0 = wl[3 + 2 * item];
    __global const int *cu_q = CV_CPTR(int, cu_q_base, cu_q_off);
    __global const int *cu_k = CV_CPTR(int, cu_k_base, cu_k_off);
    const int q0 = clamp(cu_q[seq], 0, total_q), q1 = clamp(cu_q[seq + 1], q0, total_q);
#ifdef CV_PAGED
    /* cu_k holds cache_seqlens; total_k is the page table's capacity in tokens. */
    const int lk = clamp(cu_k[seq], 0, total_k), lq = q1 - q0;
    __global const int *pt_row = CV_CPTR(int, pt_base, pt_off) + (long)seq * pt_stride;
#else
    const int k0 = clamp(cu_k[seq], 0, total_k), k1 = clamp(cu_k[seq + 1], k0, total_k);
    const int lq = q1 - q0, lk = k1 - k0;
#endif
    const int rows = min(BLOCK_M, lq - row0);
    if (rows <= 0)
        return;
    const int kvh = h / group;
    __global const uchar *qb = q + q_off;
    __global const uchar *kb_ = k + k_off;
    __global const uchar *vb = v + v_off;
    const bool fold = CV_ATTN_FOLD && softcap == 0.0f && scale_log2 > 0.0f;
    const float qscale = fold ? 1.0f : softcap > 0.0f ? scale : scale_log2;
    const float f = fold ? scale_log2 : 1.0f;

    if (lid == 0) {
        range[0] = INT_MAX;
        range[1] = -1;
    }
    /* The keys each of this thread's rows sees: [lo, hi], empty when lo > hi. */
    int lo[TM], hi[TM];
    CV_UNROLL
    for (int i = 0; i < TM; i++) {
        int r = ty + TY * i;
        lo[i] = 1;
        hi[i] = 0;
        if (r < rows) {
            long pos = q_pos_base ? (long)CV_CPTR(int, q_pos_base, q_pos_off)[q0 + row0 + r]
                                  : (long)(row0 + r) + lk - lq;
            long a = 0, b = (long)lk - 1;
            if (window_left >= 0)
                a = max(a, pos - window_left);
            if (causal)
                b = min(b, pos);
            if (window_right >= 0)
                b = min(b, pos + window_right);
            lo[i] = (int)min(a, (long)lk);
            hi[i] = (int)max(b, -1L);
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

    float acc[TM][TD];
    float m[TM], l[TM];
    CV_UNROLL
    for (int i = 0; i < TM; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
        CV_UNROLL
        for (int c = 0; c < TD; c++)
            acc[i][c] = 0.0f;
    }

    /* Every chunk goes global memory -> pf -> local memory: the loads of the
     * next chunk (Q and K dimensions, then V keys, then the next tile's first
     * Q and K dimensions) are issued before the products of the current one,
     * so they arrive while those run. */
    float4 pf[NPF];
    PF_OFFSETS()
    /* This work-item's first Q and K rows in the staged chunk: the reads add
     * constants to these (NVIDIA's compiler formed each K address anew). */
    __local const float4 *const Qt = Qc + ty * QS4, *const Kt = Kc + tx * QS4;
    if (kmin <= kmax)
        FETCH_QK(0, kmin, min(BLOCK_N, kmax + 1 - kmin));

    for (int kb = kmin; kb <= kmax; kb += BLOCK_N) {
        const int nvalid = min(BLOCK_N, kmax + 1 - kb);

        /* S = Q K^T, DCH dimensions at a time. Q chunks are re-read from
         * global memory (cache-resident) instead of holding the Q tile. */
        float s[TM][TN];
        CV_UNROLL
        for (int i = 0; i < TM; i++)
            CV_UNROLL
            for (int j = 0; j < TN; j++)
                s[i][j] = 0.0f;
        for (int dc = 0; dc < HEAD_DIM; dc += DCH) {
            barrier(CLK_LOCAL_MEM_FENCE); /* the previous chunk is no longer read */
            STORE_QK();
            barrier(CLK_LOCAL_MEM_FENCE);
            if (dc + DCH < HEAD_DIM)
                FETCH_QK(dc + DCH, kb, nvalid);
            else
                FETCH_V(kb, 0, nvalid);
            CV_UNROLL_S
            for (int c4 = 0; c4 < DCH / 4; c4++) {
                float4 qv[TM], kv[TN];
                CV_UNROLL
                for (int i = 0; i < TM; i++)
                    qv[i] = Qt[TY * i * QS4 + c4];
                CV_UNROLL
                for (int j = 0; j < TN; j++)
                    kv[j] = Kt[TX * j * QS4 + c4];
                CV_UNROLL
                for (int i = 0; i < TM; i++)
                    CV_UNROLL
                    for (int j = 0; j < TN; j++) {
                        float t = mad(qv[i].x, kv[j].x, s[i][j]);
                        t = mad(qv[i].y, kv[j].y, t);
                        t = mad(qv[i].z, kv[j].z, t);
                        s[i][j] = mad(qv[i].w, kv[j].w, t);
                    }
            }
        }

        /* The scale unless it folds into the exponent, softcap (loops under
         * one test: a test per element kept the elements apart in NVIDIA's
         * code), masks and the row maxima (TX partial maxima per row). */
        if (!fold) {
            CV_UNROLL
            for (int i = 0; i < TM; i++)
                CV_UNROLL
                for (int j = 0; j < TN; j++)
                    s[i][j] *= qscale;
        }
        if (softcap > 0.0f) {
            CV_UNROLL
            for (int i = 0; i < TM; i++)
                CV_UNROLL
                for (int j = 0; j < TN; j++)
                    s[i][j] = softcap * tanh(s[i][j] / softcap) * M_LOG2E_F;
        }
        float pm[TM];
        CV_UNROLL
        for (int i = 0; i < TM; i++) {
            pm[i] = -INFINITY;
            CV_UNROLL
            for (int j = 0; j < TN; j++) {
                int key = kb + tx + TX * j;
                float x = s[i][j];
                if (key < lo[i] || key > hi[i])
                    x = -INFINITY;
                s[i][j] = x;
                pm[i] = fmax(pm[i], x);
            }
#if ATTN_SHFL
            LANES_RED(pm[i], fmax);
#else
            Red[(ty + TY * i) * TX + tx] = pm[i];
#endif
        }
#if !ATTN_SHFL
        barrier(CLK_LOCAL_MEM_FENCE);
#endif
        __local float *Pf = (__local float *)Ps;
        CV_UNROLL
        for (int i = 0; i < TM; i++) {
            const int r = ty + TY * i;
#if ATTN_SHFL
            const float mx = fmax(m[i], pm[i]);
#else
            float mx = m[i];
            RED_ROW(mx, r, fmax);
#endif
#if CV_ATTN_NEXP
            /* A row that has seen nothing yet subtracts 0: p = exp2(-inf) = 0,
             * alpha = 0 against an accumulator and a sum that are 0. */
            const float mu = mx == -INFINITY ? 0.0f : mx, nb = -mu * f;
            const float alpha = cv_ex2((m[i] - mu) * f);
#else
            /* A row that has seen nothing yet keeps p = 0 and alpha = 1. */
            const float alpha = mx == -INFINITY ? 1.0f : exp2((m[i] - mx) * f), nb = -mx * f;
#endif
            float ps = 0.0f;
            CV_UNROLL
            for (int j = 0; j < TN; j++) {
#if CV_ATTN_NEXP
                float p = cv_ex2(fma(s[i][j], f, nb));
#else
                float p = s[i][j] == -INFINITY ? 0.0f : exp2(fma(s[i][j], f, nb));
#endif
                ps += p;
#ifdef CV_DROPOUT /* l sums the undropped p (SPEC 1.2) */
                if (p != 0.0f)
                    p *= drop_scale * cv_dropout_keep(h, q0 + row0 + r, k0 + kb + tx + TX * j,
                                                      drop_k0, drop_k1, drop_c3, drop_thr);
#endif
                Pf[r * (PS4 * 4) + tx + TX * j] = p;
            }
            l[i] = l[i] * alpha + ps;
            CV_UNROLL
            for (int c = 0; c < TD; c++)
                acc[i][c] *= alpha;
            m[i] = mx;
        }

        /* O += P V, KCH keys at a time. */
        for (int kc = 0; kc < nvalid; kc += KCH) {
            barrier(CLK_LOCAL_MEM_FENCE); /* P written; the last Q/K or V chunk read */
            STORE_V();
            barrier(CLK_LOCAL_MEM_FENCE);
            if (kc + KCH < nvalid)
                FETCH_V(kb, kc + KCH, nvalid);
            else if (kb + BLOCK_N <= kmax)
                FETCH_QK(0, kb + BLOCK_N, min(BLOCK_N, kmax + 1 - (kb + BLOCK_N)));
            CV_UNROLL_PV
            for (int j4 = 0; j4 < KCH / 4; j4++) {
                float4 pv[TM];
                CV_UNROLL
                for (int i = 0; i < TM; i++)
                    pv[i] = Ps[(ty + TY * i) * PS4 + kc / 4 + j4];
#if CV_V4
                CV_UNROLL
                for (int g = 0; g < TD / 4; g++) {
                    const float4 v0 = Vc4[(4 * j4) * V4 + tx + TX * g];
                    const float4 v1 = Vc4[(4 * j4 + 1) * V4 + tx + TX * g];
                    const float4 v2 = Vc4[(4 * j4 + 2) * V4 + tx + TX * g];
                    const float4 v3 = Vc4[(4 * j4 + 3) * V4 + tx + TX * g];
                    CV_UNROLL
                    for (int i = 0; i < TM; i++) {
                        PV_MAD(acc[i][4 * g], pv[i], v0.x, v1.x, v2.x, v3.x);
                        PV_MAD(acc[i][4 * g + 1], pv[i], v0.y, v1.y, v2.y, v3.y);
                        PV_MAD(acc[i][4 * g + 2], pv[i], v0.z, v1.z, v2.z, v3.z);
                        PV_MAD(acc[i][4 * g + 3], pv[i], v0.w, v1.w, v2.w, v3.w);
                    }
                }
#else
                __local const float *Vc = (__local const float *)Vc4;
                CV_UNROLL
                for (int c = 0; c < TD; c++) {
                    const int col = tx + TX * c;
                    const float v0 = Vc[(4 * j4) * HEAD_DIM_V + col];
                    const float v1 = Vc[(4 * j4 + 1) * HEAD_DIM_V + col];
                    const float v2 = Vc[(4 * j4 + 2) * HEAD_DIM_V + col];
                    const float v3 = Vc[(4 * j4 + 3) * HEAD_DIM_V + col];
                    CV_UNROLL
                    for (int i = 0; i < TM; i++)
                        PV_MAD(acc[i][c], pv[i], v0, v1, v2, v3);
                }
#endif
            }
        }
    }

    /* Each thread summed p over its own columns: add the TX partial sums. */
#if ATTN_SHFL
    CV_UNROLL
    for (int i = 0; i < TM; i++)
        LANES_RED(l[i], RED_ADD); /* before the test on rows: every lane takes part */
#else
    barrier(CLK_LOCAL_MEM_FENCE);
    CV_UNROLL
    for (int i = 0; i < TM; i++)
        Red[(ty + TY * i) * TX + tx] = l[i];
    barrier(CLK_LOCAL_MEM_FENCE);
#endif
    __global uchar *ob = o + o_off;
    CV_UNROLL
    for (int i = 0; i < TM; i++) {
        const int r = ty + TY * i;
        if (r >= rows)
            continue;
#if ATTN_SHFL
        const float lt = l[i];
#else
        float lt = 0.0f;
        RED_ROW(lt, r, RED_ADD);
#endif
        const float inv = lt > 0.0f ? 1.0f / lt : 0.0f;
        const size_t tok = (size_t)(q0 + row0 + r);
        CV_UNROLL
        for (int c = 0; c < TD; c++)
            STORE_ACT(ob, tok * o_stride + (size_t)h * HEAD_DIM_V + OCOL(c), acc[i][c] * inv);
        if (tx == 0 && lse)
            CV_PTR(float, lse, lse_off)[(size_t)h * total_q + tok] =
                lt > 0.0f ? (m[i] * f + log2(lt)) * ln2 : -INFINITY;
    }
}

#endif
