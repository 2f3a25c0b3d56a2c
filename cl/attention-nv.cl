/* Varlen attention forward on NVIDIA tensor cores (compute capability >= 8.0),
 * from OpenCL C through inline PTX: mma.sync.m16n8k16 (f16/bf16 inputs, f32
 * accumulators), ldmatrix and cp.async. The algorithm is FlashAttention-2's:
 * each warp owns 16 query rows whose Q fragments stay in registers (or, with
 * Q_SMEM, are re-read from local memory per key tile); K and V tiles of BLOCK_N keys are staged in local memory by cp.async, the V load
 * overlapping S = Q K^T and the next K load overlapping O += P V; the online
 * softmax runs on the accumulator fragments, and P goes from the S
 * accumulators straight into the A operand of the second product.
 *
 * Local memory (kept within 48 KiB per work-group; NVIDIA's OpenCL gives a
 * static array up to 226 KiB, docs/PERFORMANCE.md): the Q tile is staged once,
 * moved into registers, and its space is then reused for K and V (Q_SMEM:
 * Q, K and V side by side). Rows are
 * padded by 8 elements (16 bytes) so that the 8 row addresses of an ldmatrix
 * fall in distinct bank groups.
 *
 * With -DCV_NV_PTX the warp-wide operations (cl/nv-mma.clh, shared with
 * cl/gated-delta-mma.cl) are inline PTX. Without it (any
 * other device; lib/attention/attention-cl.c does this on request) they are emulated
 * through local memory with work-group barriers, following the PTX ISA's
 * fragment layouts: the emulation runs the same indexing and softmax code, so
 * the fragment bookkeeping is tested on PoCL. Every call of a warp-wide
 * operation is therefore made in work-group-uniform control flow.
 *
 * -D: CV_DTYPE (CV_DT_F16 or CV_DT_BF16), HEAD_DIM (multiple of 16, <= 256),
 * BLOCK_M (a multiple of 16), BLOCK_N (a multiple of 16), Q_SMEM (optional).
 *
 * -DCV_WGMMA (with -DCV_SM90A=1 on the device: Hopper, built through the
 * loader's PTX patch step): the two products on wgmma (cl/nv-wgmma.clh)
 * instead of mma.sync, the same algorithm around them. BLOCK_M 64 (the
 * work-group is one warpgroup, warp w owning rows 16 w .., as above), BLOCK_N
 * 64 with HEAD_DIM 64, 96 or 128 (32 with 256, Q in registers); or BLOCK_M
 * 128 (two warpgroups, each the products of its 64 rows) with BLOCK_N 32,
 * Q in local memory, HEAD_DIM up to 128; packed K/V only; with CV_GQA_PACK
 * for prefill too (each K/V tile staged once for all query heads of its KV
 * head). K and V
 * tiles are staged by cp.async in the 128-byte swizzled layout (CV_WG_SW=1,
 * the default; 0: as unswizzled core matrices, 8 rows of 16 bytes) that the
 * tensor cores read by descriptor: S = Q K^T with K as the K-major operand,
 * O += P V with V as the N-major one and P's fragments as the register A
 * operand. Q's tile is the A operand of S = Q K^T: in local memory, swizzled
 * as K's (CV_WG_QS=1, the host's default), or as register fragments.
 * attn_wgmma_check runs the same staging and products on known data: the
 * host checks it once before the form is used (lib/attention/attention-cl.c).
 */

#ifndef CV_DTYPE
#define CV_DTYPE CV_DT_BF16
#endif
#ifndef HEAD_DIM
#define HEAD_DIM 128
#endif
#ifndef BLOCK_M
#define BLOCK_M 64
#endif
#ifndef BLOCK_N
#define BLOCK_N 64
#endif

/* Each warp owns WARP_MT m16 tiles (16 * WARP_MT query rows). The loops keep
 * the general form, but the kernel is built with one: within 48 KiB of local
 * memory, two tiles per warp (FlashAttention-2's layout at D = 128 needs 64
 * KiB) force 16- or 32-key tiles and measured slower on an H100. Q_SMEM
 * keeps the Q tile in local memory and re-reads its fragments per key tile
 * instead of holding them in registers (fewer registers; faster for short
 * sequences). */
#define WARP_MT 1
#define WARP_ROWS (16 * WARP_MT)
/* CV_ATTN_LAZY (default 1): the online softmax rescales O and l only when a
 * row's maximum grew by more than 8 in base 2 (see the softmax below); 0
 * rescales at every tile. */
#ifndef CV_ATTN_LAZY
#define CV_ATTN_LAZY 1
#endif
#define NWARPS (BLOCK_M / WARP_ROWS)
#define WG_SIZE (NWARPS * 32)
#define SROW (HEAD_DIM + 8)          /* padded local row, in 16-bit elements */
#define KSTEPS (HEAD_DIM / 16)       /* k16 steps of S = Q K^T */
#define NT_S (BLOCK_N / 8)           /* n8 tiles of S */
#define NT_O (HEAD_DIM / 8)          /* n8 tiles of O */
#define CPR (HEAD_DIM / 8)           /* 16-byte chunks per row */
#define Q_ELEMS (BLOCK_M * SROW)
#ifdef CV_WGMMA
#if defined(Q_SMEM) || defined(CV_PAGED) ||                                                  \
    !(BLOCK_M == 64 && BLOCK_N == 64 && (HEAD_DIM == 64 || HEAD_DIM == 96 || HEAD_DIM == 128) || \
      BLOCK_M == 64 && BLOCK_N == 32 && HEAD_DIM == 256 && !CV_WG_QS ||                         \
      BLOCK_M == 128 && BLOCK_N == 32 && HEAD_DIM <= 128 && CV_WG_QS)
#error "CV_WGMMA: BLOCK_M x BLOCK_N 64 x 64 (HEAD_DIM 64/96/128), 64 x 32 (256, not CV_WG_QS) or 128 x 32 (<= 128, CV_WG_QS); packed K/V"
#endif
/* CV_WG_SW: the K and V tiles in the 128-byte swizzled layout (default), 0
 * the unswizzled core matrices (see the staging macros below). */
#ifndef CV_WG_SW
#define CV_WG_SW 1
#endif
/* A tile row's elements in local memory: the swizzled layout takes whole
 * column blocks of 64 (SW_ROW_ELEMS of cl/nv-wgmma.clh; head dim 96: two,
 * the second half used), the core matrices the head dim itself. */
#if CV_WG_SW
#define WG_DPAD SW_ROW_ELEMS
#else
#define WG_DPAD HEAD_DIM
#endif
#define KV_TILE (BLOCK_N * WG_DPAD) /* a K or V tile, in elements */
/* CV_WG_QS (with CV_WG_SW): Q's tile in local memory too, swizzled as K's,
 * and S = Q K^T with both operands read by descriptor (WG_SS of
 * cl/nv-wgmma.clh): no Q fragments in registers. Local memory Q + K + V is
 * 48 KiB at head dim 128. */
#ifndef CV_WG_QS
#define CV_WG_QS 0
#endif
#if CV_WG_QS && !CV_WG_SW
#error "CV_WG_QS needs CV_WG_SW"
#endif
#define WG_QLOCAL CV_WG_QS
#else
#define KV_TILE (BLOCK_N * SROW)
#define WG_QLOCAL 0
#endif
/* The kernels' local tile memory `smem` (SMEM_DECL), and `range` (4 ints,
 * RANGE_DECL). A swizzle atom (8 rows of 128 bytes) must start 1024-byte
 * aligned, as the swizzle works on address bits 4-9: the swizzled form rounds
 * the address up itself rather than trust that a compiler honours an
 * alignment attribute that large (PoCL does not), except with Q in local
 * memory too, whose tiles fill 48 KiB (an
 * unaligned array makes its check fail, and the mma.sync form runs); there
 * `range` lives in the V tile, which is not written before the range is read. */
#if WG_QLOCAL
#define SMEM_DECL __local ushort smem[SMEM_ELEMS] __attribute__((aligned(1024)))
#define RANGE_DECL __local int *range = (__local int *)(smem + KV_BASE + KV_TILE)
#elif defined(CV_WGMMA) && CV_WG_SW
#define SMEM_DECL                                                                              \
    __local ushort smem_raw_[SMEM_ELEMS + 448] __attribute__((aligned(128)));                  \
    __local ushort *smem = (__local ushort *)(((size_t)smem_raw_ + 1023) & ~(size_t)1023)
#define RANGE_DECL __local int range[4]
#else
#define SMEM_DECL __local ushort smem[SMEM_ELEMS] __attribute__((aligned(128)))
#define RANGE_DECL __local int range[4]
#endif
#define KV_ELEMS (2 * KV_TILE)
#if WG_QLOCAL
#define Q_IN_REGS 0
#define SMEM_ELEMS (BLOCK_M * WG_DPAD + KV_ELEMS)
#define KV_BASE (BLOCK_M * WG_DPAD)
#elif !defined(Q_SMEM)
#define Q_IN_REGS 1
#define SMEM_ELEMS (Q_ELEMS > KV_ELEMS ? Q_ELEMS : KV_ELEMS)
#define KV_BASE 0
#else
#define Q_IN_REGS 0
#define SMEM_ELEMS (Q_ELEMS + KV_ELEMS)
#define KV_BASE Q_ELEMS
#endif

/* The warp-wide operations (ldmatrix, mma.sync, cp.async, shuffles) and
 * their emulated form: cl/nv-mma.clh, spliced in here by the kernel loader. */
// clvarlen-include: nv-mma.clh
// clvarlen-include: nv-wgmma.clh
// clvarlen-include: nv-wgmma-async.clh
// clvarlen-include: nv-wgmma-once.clh
// clvarlen-include: attention-nv-tile.clh

/* Stages rows ROWEXPR(rr_) for rr_ = 0 .. nrows - 1 of a token-major tensor
 * (this head's HEAD_DIM elements at column offset col0) into `dst` rows
 * 0 .. ROWS-1; rows at or beyond nrows are zero-filled. */
#define STAGE_ROWS_OF(dst, ROWS, base, ELEXPR, nrows)                                           \
    do {                                                                                       \
        for (int e_ = lid; e_ < (ROWS) * CPR; e_ += WG_SIZE) {                                 \
            const int r_ = e_ / CPR, ch_ = e_ % CPR;                                           \
            const bool ok_ = r_ < (nrows);                                                     \
            const int rr_ = ok_ ? r_ : 0;                                                      \
            const size_t el_ = (size_t)(ELEXPR) + (size_t)ch_ * 8;                             \
            cp_async16((dst) + r_ * SROW + ch_ * 8, (base) + el_ * 2, ok_ ? 16 : 0);           \
        }                                                                                      \
    } while (0)
/* Query rows tok0 + r; keys j0 + r of this sequence (KV_ROW: packed or paged). */
#define STAGE_ROWS(dst, ROWS, base, tok0, nrows, stride, col0)                                  \
    STAGE_ROWS_OF(dst, ROWS, base, ((long)(tok0) + rr_) * (stride) + (col0), nrows)
#ifdef CV_PAGED
/* Paged keys: the cache rows of a tile's keys are looked up a tile ahead
 * (KEY_ROWS_LOAD into NKT registers per work-item, KEY_ROWS_STORE into
 * krow_l[buf] before a barrier; where in the loop depends on the form, see
 * there), and tiles are staged from local memory (STAGE_KEYS_LOCAL): a
 * cp.async never waits for a page-table load. Cache rows fit int (the host
 * checks num_pages * page_size). */
#define NKT ((BLOCK_N + WG_SIZE - 1) / WG_SIZE)
#define KEY_ROWS_LOAD(t, j0, nrows)                                                            \
    do {                                                                                       \
        for (int i_ = 0; i_ < NKT; i_++) {                                                     \
            const int r_ = lid + i_ * WG_SIZE;                                                 \
            (t)[i_] = r_ < BLOCK_N && r_ < (nrows) ? (int)KV_ROW((j0) + r_) : 0;               \
        }                                                                                      \
    } while (0)
#define KEY_ROWS_STORE(buf, t)                                                                 \
    do {                                                                                       \
        for (int i_ = 0; i_ < NKT; i_++)                                                       \
            if (lid + i_ * WG_SIZE < BLOCK_N)                                                  \
                krow_l[(buf) * BLOCK_N + lid + i_ * WG_SIZE] = (t)[i_];                        \
    } while (0)
#define STAGE_KEYS_LOCAL(dst, base, buf, nrows, stride, col0)                                   \
    STAGE_ROWS_OF(dst, BLOCK_N, base,                                                          \
                  (long)krow_l[(buf) * BLOCK_N + rr_] * (stride) + (col0), nrows)
#elif defined(CV_WGMMA) && CV_WG_SW
/* Keys j0 + r in the 128-byte swizzled layout (cl/nv-wgmma.clh, SW = 1), the
 * same for K and V: the tile's head dim in column blocks of 64 elements
 * (BLOCK_N * 128 bytes each), in each key r's 128-byte row at r * 128, its
 * 16-byte chunk c at (c ^ (r % 8)) * 16. Work-item lid takes chunk lid % 8 of
 * rows lid / 8 + SW_RPP i (SW_RPP = WG_SIZE / 8): each warp instruction
 * reads four whole 128-byte rows and writes 512 contiguous bytes, and its
 * local offsets and global addresses are fixed per work-item up to a
 * constant step. */
#define SW_RPP (WG_SIZE / 8) /* rows per pass: 16, or 32 with two warpgroups */
#define STAGE_SW(dst, base, j0, nrows, stride, col0)                                            \
    do {                                                                                       \
        const int c_ = lid & 7, r0_ = lid >> 3;                                                \
        __local ushort *d_ = (dst) + r0_ * 64 + ((c_ ^ (r0_ & 7)) << 3);                       \
        __global const uchar *p0_ =                                                            \
            (base) + ((size_t)(KV_ROW(j0) * (stride) + (col0)) + (size_t)(c_ * 8)) * 2;         \
        __global const uchar *pr_ = p0_ + (size_t)r0_ * (size_t)(stride) * 2;                  \
        UNROLL                                                                                 \
        for (int i_ = 0; i_ < BLOCK_N * WG_DPAD / 8 / WG_SIZE; i_++) {                         \
            const int m_ = i_ % (BLOCK_N / SW_RPP), h_ = i_ / (BLOCK_N / SW_RPP);              \
            const bool ok_ = r0_ + SW_RPP * m_ < (nrows);                                      \
            __global const uchar *src_ =                                                       \
                pr_ + (size_t)(SW_RPP * m_) * (size_t)(stride) * 2 + (size_t)h_ * 128;         \
            if (HEAD_DIM % 64 == 0 || h_ * 8 + c_ < CPR)                                       \
                cp_async16(d_ + h_ * (BLOCK_N * 64) + m_ * (SW_RPP * 64), ok_ ? src_ : p0_,   \
                           ok_ ? 16 : 0);                                                      \
        }                                                                                      \
    } while (0)
/* The Q tile of CV_WG_QS is staged once by STAGE_SW_ROWS (cl/nv-wgmma.clh). */
#define STAGE_K(dst, ROWS, base, j0, nrows, stride, col0) STAGE_SW(dst, base, j0, nrows, stride, col0)
#define STAGE_V(dst, ROWS, base, j0, nrows, stride, col0) STAGE_SW(dst, base, j0, nrows, stride, col0)
/* K as the K-major operand: 8-key groups 1024 bytes apart (sbo), a k16 step
 * 32 bytes along the row, every fourth into the next column block; V as the
 * N-major one: 8-key groups 1024 bytes apart (sbo), column blocks BLOCK_N *
 * 128 apart (lbo), a k16 step (16 keys) 2048 bytes. */
#define KV_SW 1
#define K_LBO 16
#define K_SBO 1024
#define K_STEP 32
#define K_STEP4 (BLOCK_N * 128)
#define V_LBO (BLOCK_N * 128)
#define V_SBO 1024
#define V_STEP 2048
#define V_STEP4 (4 * V_STEP)
#elif defined(CV_WGMMA)
/* Keys j0 + r as core matrices (8 rows of 16 bytes, 128 contiguous bytes),
 * arranged so that the core matrices one wgmma k16 step reads are one
 * contiguous block (the tensor cores then read local memory without bank
 * conflicts; with 8-row groups a whole row apart, 2 KiB, the first version
 * ran at 0.58x of the mma.sync kernel on an H100). Element offsets of row r,
 * 16-byte chunk ch (8 elements):
 *   K (S = Q K^T, K-major: k = head dim): k16 step ch / 2, BLOCK_N * 16
 *     elements each; within it the 8-key group r / 8 (256 bytes), the chunk's
 *     half ch % 2 (128 bytes), row r % 8 (16 bytes): lbo 128, sbo 256 bytes;
 *   V (O += P V, N-major: k = key): k16 step r / 16, HEAD_DIM * 16 elements
 *     each; within it the chunk ch (256 bytes), the 8-key half (r / 8) % 2
 *     (128 bytes), row r % 8: lbo 128 (along k), sbo 256 (along n) bytes.
 * Eight consecutive work-items take the eight rows of one chunk, so each
 * eight write 128 contiguous bytes. */
#define K_CM(r, ch) (((ch) >> 1) * (BLOCK_N * 16) + ((r) >> 3) * 128 + ((ch) & 1) * 64 + ((r) & 7) * 8)
#define V_CM(r, ch) (((r) >> 4) * (HEAD_DIM * 16) + (ch) * 128 + (((r) >> 3) & 1) * 64 + ((r) & 7) * 8)
#define STAGE_CM(dst, ROWS, base, j0, nrows, stride, col0, AT)                                 \
    do {                                                                                       \
        for (int e_ = lid; e_ < (ROWS) * CPR; e_ += WG_SIZE) {                                 \
            const int r_ = (e_ & 7) + ((e_ / (8 * CPR)) << 3), ch_ = (e_ >> 3) % CPR;          \
            const bool ok_ = r_ < (nrows);                                                     \
            const int rr_ = ok_ ? r_ : 0;                                                      \
            const size_t el_ = (size_t)(KV_ROW((j0) + rr_) * (stride) + (col0)) + (size_t)ch_ * 8; \
            cp_async16((dst) + AT(r_, ch_), (base) + el_ * 2, ok_ ? 16 : 0);                   \
        }                                                                                      \
    } while (0)
#define STAGE_K(dst, ROWS, base, j0, nrows, stride, col0)                                       \
    STAGE_CM(dst, ROWS, base, j0, nrows, stride, col0, K_CM)
#define STAGE_V(dst, ROWS, base, j0, nrows, stride, col0)                                       \
    STAGE_CM(dst, ROWS, base, j0, nrows, stride, col0, V_CM)
/* The wgmma operands' strides in bytes (lbo, sbo, k16 step), as above. */
#define K_LBO 128
#define K_SBO 256
#define K_STEP (BLOCK_N * 32)
#define V_LBO 128
#define V_SBO 256
#define V_STEP (HEAD_DIM * 32)
#define K_STEP4 (4 * K_STEP)
#define V_STEP4 (4 * V_STEP)
#define KV_SW 0
#else
#define STAGE_KEYS(dst, ROWS, base, j0, nrows, stride, col0)                                    \
    STAGE_ROWS_OF(dst, ROWS, base, KV_ROW((j0) + rr_) * (stride) + (col0), nrows)
#define STAGE_K STAGE_KEYS
#define STAGE_V STAGE_KEYS
#endif
#ifdef CV_WGMMA
/* The two products on the tiles Ks and Vs: S (this warp's 16 x BLOCK_N part)
 * += Q K^T, O += P V (64-row tiles: P's fragments, made for it, reach the
 * wgmma without copies, WG_RS1 of cl/nv-wgmma-once.clh). */
#if BLOCK_M == 128
/* Two warpgroups, each the A operand's 64 rows of Q's tile (warpgroup w's at
 * row 64 w of every column block), sharing 32-key K and V tiles: each K/V
 * byte staged from L2 serves 128 query rows, twice the 64-row form's. */
#define WG_QA (smem + (warp >> 2) * (64 * 64))
#if HEAD_DIM == 128
#define WG_PV(acc, a, z) WG_RS(128, 2, 1, KV_SW, acc, a, Vs, V_LBO, V_SBO, V_STEP, V_STEP4, z)
#define WG_QK(acc, a, z)                                                                       \
    WG_SS(32, 8, 0, 1, acc, WG_QA, K_LBO, K_SBO, K_STEP, BLOCK_M * 128, Ks, K_LBO, K_SBO, K_STEP, \
          K_STEP4)
#elif HEAD_DIM == 96
#define WG_PV(acc, a, z) WG_RS(96, 2, 1, KV_SW, acc, a, Vs, V_LBO, V_SBO, V_STEP, V_STEP4, z)
#define WG_QK(acc, a, z)                                                                       \
    WG_SS(32, 6, 0, 1, acc, WG_QA, K_LBO, K_SBO, K_STEP, BLOCK_M * 128, Ks, K_LBO, K_SBO, K_STEP, \
          K_STEP4)
#else /* HEAD_DIM 64 */
#define WG_PV(acc, a, z) WG_RS(64, 2, 1, KV_SW, acc, a, Vs, V_LBO, V_SBO, V_STEP, V_STEP4, z)
#define WG_QK(acc, a, z)                                                                       \
    WG_SS(32, 4, 0, 1, acc, WG_QA, K_LBO, K_SBO, K_STEP, BLOCK_M * 128, Ks, K_LBO, K_SBO, K_STEP, \
          K_STEP4)
#endif
#elif HEAD_DIM == 128
#define WG_PV(acc, a, z) WG_RS1(128, 4, 1, KV_SW, acc, a, Vs, V_LBO, V_SBO, V_STEP, V_STEP4)
#if WG_QLOCAL /* Q from local memory (its tile at smem, K's layout) */
#define WG_QK(acc, a, z)                                                                       \
    WG_SS(64, 8, 0, 1, acc, smem, K_LBO, K_SBO, K_STEP, BLOCK_M * 128, Ks, K_LBO, K_SBO, K_STEP, \
          K_STEP4)
#else
#define WG_QK(acc, a, z) WG_RS(64, 8, 0, KV_SW, acc, a, Ks, K_LBO, K_SBO, K_STEP, K_STEP4, z)
#endif
#elif HEAD_DIM == 256
/* 32-key tiles, Q's fragments in registers (64 per work-item: Q does not fit
 * beside K and V in 48 KiB). S = Q K^T in four statements of four k16 steps,
 * one column block of K each, so that a statement's copies of the A
 * fragments (see cl/nv-wgmma.clh) are 16 registers, not 64, beside O's 128. */
#define WG_PV(acc, a, z) WG_RS(256, 2, 1, KV_SW, acc, a, Vs, V_LBO, V_SBO, V_STEP, V_STEP4, z)
#define WG_QK(acc, a, z)                                                                       \
    do {                                                                                       \
        UNROLL                                                                                 \
        for (int qb_ = 0; qb_ < 4; qb_++)                                                      \
            WG_RS(32, 4, 0, KV_SW, acc, (a) + 4 * qb_, Ks + qb_ * (K_STEP4 / 2), K_LBO, K_SBO,  \
                  K_STEP, K_STEP4, z);                                                         \
    } while (0)
#elif HEAD_DIM == 96 /* the second column block half used (WG_DPAD) */
#define WG_PV(acc, a, z) WG_RS1(96, 4, 1, KV_SW, acc, a, Vs, V_LBO, V_SBO, V_STEP, V_STEP4)
#if WG_QLOCAL
#define WG_QK(acc, a, z)                                                                       \
    WG_SS(64, 6, 0, 1, acc, smem, K_LBO, K_SBO, K_STEP, BLOCK_M * 128, Ks, K_LBO, K_SBO, K_STEP, \
          K_STEP4)
#else
#define WG_QK(acc, a, z) WG_RS(64, 6, 0, KV_SW, acc, a, Ks, K_LBO, K_SBO, K_STEP, K_STEP4, z)
#endif
#else /* HEAD_DIM 64 */
#define WG_PV(acc, a, z) WG_RS1(64, 4, 1, KV_SW, acc, a, Vs, V_LBO, V_SBO, V_STEP, V_STEP4)
#if WG_QLOCAL
#define WG_QK(acc, a, z)                                                                       \
    WG_SS(64, 4, 0, 1, acc, smem, K_LBO, K_SBO, K_STEP, BLOCK_M * 128, Ks, K_LBO, K_SBO, K_STEP, \
          K_STEP4)
#else
#define WG_QK(acc, a, z) WG_RS(64, 4, 0, KV_SW, acc, a, Ks, K_LBO, K_SBO, K_STEP, K_STEP4, z)
#endif
#endif
#endif

/* -DCV_GQA_PACK: one work-group per (query tile, KV head, split), its rows
 * the pairs (query i, head of the group hh) in the order i * group + hh, so
 * K and V are read once for all query heads of a KV head (decode and
 * speculative verify, where a sequence has a few queries); with n_splits > 1
 * split sp sees only keys [sp * chunk, (sp + 1) * chunk) of the sequence and
 * writes f32 partials that attn_merge combines (part: o [n_splits, total_q,
 * heads_q, HEAD_DIM], then lse [n_splits, heads_q, total_q]). With
 * one_tile > 0 (= the number of sequences) each sequence is one tile and the
 * work list is not read. */
#ifdef CV_GQA_PACK
#define CV_PACK_ARGS , __global float *part_base, ulong part_off, int n_splits, int one_tile
#define QIDX(R) ((R) / group)                           /* the query of tile row R */
#define QHEAD(R) (kvh * group + (R) % group)            /* its query head */
#define ROWS_PER_Q group
#else
#define CV_PACK_ARGS
#define QIDX(R) (R)
#define QHEAD(R) h
#define ROWS_PER_Q 1
#endif

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1)))
void attn_fwd_mma(__global const uchar *q, ulong q_off, long q_stride,
                  __global const uchar *k, ulong k_off, long k_stride,
                  __global const uchar *v, ulong v_off, long v_stride,
                  __global const int *cu_q_base, ulong cu_q_off,
                  __global const int *cu_k_base, ulong cu_k_off,
                  __global const int *q_pos_base, ulong q_pos_off,
                  __global uchar *o, ulong o_off, long o_stride,
                  __global float *lse, ulong lse_off,
                  __global const int *wl, int heads_q, int group, int total_q, int total_k,
                  float scale_log2, float scale, float softcap, int causal, int window_left,
                  int window_right, __global const int *flag CV_PAGED_ARGS CV_PACK_ARGS)
{
    /* 128-byte aligned: wgmma descriptors drop the low 4 address bits, and an
     * unaligned array gave wrong sums on an H100 (../shared/gpu/README.md);
     * 1024 for the swizzled layout (SMEM_DECL) */
    SMEM_DECL;
    RANGE_DECL;
#ifdef CV_PAGED
    __local int krow_l[2 * BLOCK_N];
#endif
    EMU_DECL
#ifndef CV_NV_PTX
    __local uint *emu = emu_scratch;
#endif

    if (flag && *flag)
        return;
    const int lid = get_local_id(0);
    const int warp = lid >> 5, lane = lid & 31, g = lane >> 2, t4 = lane & 3;
    const long grp = get_group_id(0);
#ifdef CV_GQA_PACK
    const int heads_kv = heads_q / group, sp = (int)(grp % n_splits);
    const int item = (int)(grp / n_splits / heads_kv), kvh = (int)((grp / n_splits) % heads_kv);
    /* one_tile > 0: every sequence fits one tile (the host's bound on its
     * queries), item s is sequence s and no work list was built. */
    if (item >= (one_tile > 0 ? one_tile : wl[0]))
        return;
    const int seq = one_tile > 0 ? item : wl[2 + 2 * item];
    const int row0 = one_tile > 0 ? 0 : wl[3 + 2 * item];
#else
    const int item = (int)(grp / heads_q), h = (int)(grp % heads_q);
    if (item >= wl[0])
        return;
    const int seq = wl[2 + 2 * item], row0 = wl[3 + 2 * item];
#endif
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
    const int rows = min(BLOCK_M, lq * ROWS_PER_Q - row0);
    if (rows <= 0)
        return;
    __global const uchar *qb = q + q_off;
    __global const uchar *kb_ = k + k_off;
    __global const uchar *vb = v + v_off;
#ifdef CV_GQA_PACK
    __global float *part = CV_PTR(float, part_base, part_off);
    /* This split's keys. */
    const int chunk = (lk + n_splits - 1) / n_splits;
    const int s0 = sp * chunk, s1 = min(lk, s0 + chunk);

    /* Q tile -> local (async), while the visible key ranges are worked out. */
#if WG_QLOCAL
    STAGE_SW_ROWS(smem, BLOCK_M, qb,
                  (long)(q0 + QIDX(row0 + rr_)) * q_stride + (long)QHEAD(row0 + rr_) * HEAD_DIM,
                  rows);
#else
    STAGE_ROWS_OF(smem, BLOCK_M, qb,
                  (long)(q0 + QIDX(row0 + rr_)) * q_stride + (long)QHEAD(row0 + rr_) * HEAD_DIM,
                  rows);
#endif
#else
    const int kvh = h / group, s0 = 0, s1 = lk;

#if WG_QLOCAL
    STAGE_SW_ROWS(smem, BLOCK_M, qb, (long)(q0 + row0 + rr_) * q_stride + (long)h * HEAD_DIM, rows);
#else
    STAGE_ROWS(smem, BLOCK_M, qb, q0 + row0, rows, q_stride, h * HEAD_DIM);
#endif
#endif
    cp_async_commit();

    /* This lane's rows: warp * WARP_ROWS + 16 mt + g, and + 8 (index 2 mt + i). */
    int lo[2 * WARP_MT], hi[2 * WARP_MT];
    UNROLL
    for (int ri = 0; ri < 2 * WARP_MT; ri++) {
        const int r = warp * WARP_ROWS + (ri >> 1) * 16 + g + 8 * (ri & 1);
        lo[ri] = 1;
        hi[ri] = 0;
        if (r < rows) {
            const int qi = QIDX(row0 + r);
            long pos = q_pos_base ? (long)CV_CPTR(int, q_pos_base, q_pos_off)[q0 + qi]
                                  : (long)qi + lk - lq;
            long a = s0, b = (long)s1 - 1;
            if (window_left >= 0)
                a = max(a, pos - window_left);
            if (causal)
                b = min(b, pos);
            if (window_right >= 0)
                b = min(b, pos + window_right);
            lo[ri] = (int)min(a, (long)lk);
            hi[ri] = (int)max(b, -1L);
        }
    }
    if (lid == 0) {
        range[0] = INT_MAX; /* smallest visible key over the rows */
        range[1] = -1;      /* largest visible key */
        range[2] = -1;      /* largest lo over the valid rows */
        range[3] = INT_MAX; /* smallest hi over the valid rows */
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (t4 == 0) {
        for (int ri = 0; ri < 2 * WARP_MT; ri++) {
            if (warp * WARP_ROWS + (ri >> 1) * 16 + g + 8 * (ri & 1) >= rows)
                continue;
            if (lo[ri] <= hi[ri]) {
                atomic_min(&range[0], lo[ri]);
                atomic_max(&range[1], hi[ri]);
            }
            atomic_max(&range[2], lo[ri]);
            atomic_min(&range[3], hi[ri]);
        }
    }
    cp_async_wait_all();
    barrier(CLK_LOCAL_MEM_FENCE);
    const int kmin = range[0], kmax = range[1], max_lo = range[2], min_hi = range[3];

#if Q_IN_REGS
    /* Q fragments for the warp's 16 rows, all k16 steps, into registers. */
    uint4 qf[KSTEPS];
    UNROLL
    for (int ks = 0; ks < KSTEPS; ks++)
        qf[ks] = ldsm_x4(smem + (warp * 16 + (lane & 15)) * SROW + ks * 16 + (lane >> 4) * 8);
    barrier(CLK_LOCAL_MEM_FENCE); /* the Q space now takes K and V */
#endif

    __local ushort *Ks = smem + KV_BASE;
    __local ushort *Vs = Ks + KV_TILE;
    float4 oacc[WARP_MT][NT_O];
    float m[2 * WARP_MT], l[2 * WARP_MT];
    UNROLL
    for (int mt = 0; mt < WARP_MT; mt++)
        UNROLL
        for (int n = 0; n < NT_O; n++)
            oacc[mt][n] = (float4)(0.0f);
    UNROLL
    for (int ri = 0; ri < 2 * WARP_MT; ri++) {
        m[ri] = -INFINITY;
        l[ri] = 0.0f;
    }
    /* Without softcap (and with a positive scale) scores stay unscaled and the
     * scale folds into the exponent: p = exp2(s * f - m * f), one FMA. */
    const bool fold = softcap == 0.0f && scale_log2 > 0.0f;
    const float f = fold ? scale_log2 : 1.0f;
    const float sl2 = softcap > 0.0f ? scale : scale_log2;

    const int nblocks = kmin <= kmax ? (kmax - kmin) / BLOCK_N + 1 : 0;
#ifdef CV_WGMMA
    const uint qz = (uint)total_q >> 31; /* 0 (total_q >= 0), unknown to the compilers */
    (void)qz; /* for the forms whose A fragments are copied (WG_RS): Q in
                * registers, D 256, 128-row tiles, the pipelined loop */
#endif
#ifdef CV_PAGED
    int cur = 0; /* krow_l[cur]: the cache rows of this tile's keys; [cur ^ 1] the next's */
    if (nblocks > 0) {
        int t[NKT];
        KEY_ROWS_LOAD(t, kmin, min(BLOCK_N, kmax + 1 - kmin));
        KEY_ROWS_STORE(0, t);
        barrier(CLK_LOCAL_MEM_FENCE);
        STAGE_KEYS_LOCAL(Ks, kb_, 0, min(BLOCK_N, kmax + 1 - kmin), k_stride, kvh * HEAD_DIM);
        cp_async_commit();
    }
#else
    if (nblocks > 0) {
        STAGE_K(Ks, BLOCK_N, kb_, kmin, min(BLOCK_N, kmax + 1 - kmin), k_stride,
                   kvh * HEAD_DIM);
        cp_async_commit();
    }
#endif
#if CV_ATTN_PIPE
    /* The pipeline. Before iteration blk: P of tile blk in pa, m and l
     * through it, O through tile blk - 1; tile blk + 1's K and tile blk's V
     * staged (committed in that order). Iteration blk issues S = Q K^T of
     * tile blk + 1 and O += P V of tile blk without waiting; once S is done,
     * K's buffer takes tile blk + 2 while the softmax of tile blk + 1 runs
     * beside O's product; once that is done, O is rescaled if a row's max
     * moved and V's buffer takes tile blk + 1. The first tile's S is done
     * here, before the loop. */
    uint4 pa[1][BLOCK_N / 16];
    if (nblocks > 0) {
        float4 s0[NT_S];
        cp_async_wait_all();
        fence_proxy_async();
        barrier(CLK_LOCAL_MEM_FENCE); /* K of tile 0 */
        UNROLL
        for (int n = 0; n < NT_S; n++)
            s0[n] = (float4)(0.0f);
        WG_QK(s0, qf, qz);
        barrier(CLK_LOCAL_MEM_FENCE); /* everyone is done with K */
        if (nblocks > 1) {
            STAGE_K(Ks, BLOCK_N, kb_, kmin + BLOCK_N, min(BLOCK_N, kmax + 1 - kmin - BLOCK_N),
                    k_stride, kvh * HEAD_DIM);
            cp_async_commit();
        }
        STAGE_V(Vs, BLOCK_N, vb, kmin, min(BLOCK_N, kmax + 1 - kmin), v_stride, kvh * HEAD_DIM);
        cp_async_commit();
        float al[2];
        attn_tile_scores(s0, fold, sl2, softcap, kmin >= max_lo && kmin + BLOCK_N - 1 <= min_hi,
                         kmin, t4, lo[0], hi[0], lo[1], hi[1]);
        attn_tile_softmax(s0, pa[0], m, l, f, al, NULL EMU_ARG); /* O is 0: no rescale */
    }
    /* Every iteration has a next tile (the last tile's O += P V follows the
     * loop): products issued or waited for under a condition made ptxas
     * serialize them all. */
    for (int blk = 0; blk + 1 < nblocks; blk++) {
        const int kn = kmin + (blk + 1) * BLOCK_N; /* the next tile's first key */
        cp_async_wait1(); /* K of tile blk + 1 (V of tile blk may still be in flight) */
        fence_proxy_async();
        barrier(CLK_LOCAL_MEM_FENCE);
        float4 s[NT_S]; /* this iteration's own: nothing carried in wgmma registers */
        UNROLL
        for (int n = 0; n < NT_S; n++)
            s[n] = (float4)(0.0f);
        WG_QK_NW(s);
        cp_async_wait_all(); /* V of tile blk */
        fence_proxy_async();
        barrier(CLK_LOCAL_MEM_FENCE);
        WG_PV_NW(oacc[0], pa[0], qz);
        WG_WAIT(64, 1, s); /* S of tile blk + 1; O's product still in flight */
        barrier(CLK_LOCAL_MEM_FENCE); /* everyone is done with K */
        if (blk + 2 < nblocks) {
            STAGE_K(Ks, BLOCK_N, kb_, kn + BLOCK_N, min(BLOCK_N, kmax + 1 - kn - BLOCK_N),
                    k_stride, kvh * HEAD_DIM);
            cp_async_commit();
        }
        float al[2];
        attn_tile_scores(s, fold, sl2, softcap, kn >= max_lo && kn + BLOCK_N - 1 <= min_hi, kn, t4,
                         lo[0], hi[0], lo[1], hi[1]);
        const int rescale = attn_tile_softmax(s, pa[0], m, l, f, al, NULL EMU_ARG);
        WG_WAIT_O(oacc[0]);
        if (rescale)
            attn_tile_rescale(oacc[0], al);
        barrier(CLK_LOCAL_MEM_FENCE); /* everyone is done with V */
        STAGE_V(Vs, BLOCK_N, vb, kn, min(BLOCK_N, kmax + 1 - kn), v_stride, kvh * HEAD_DIM);
        cp_async_commit();
    }
    if (nblocks > 0) {
        cp_async_wait_all(); /* V of the last tile */
        fence_proxy_async();
        barrier(CLK_LOCAL_MEM_FENCE);
        WG_PV(oacc[0], pa[0], qz);
    }
#else
    for (int blk = 0; blk < nblocks; blk++) {
        const int kb = kmin + blk * BLOCK_N;
        const int nvalid = min(BLOCK_N, kmax + 1 - kb);
#if defined(CV_PAGED) && defined(CV_GQA_PACK)
        /* The next tile's cache rows, loaded and stored here: the page-table
         * load completes while this tile's K arrives (every read of
         * krow_l[cur ^ 1], the last tile's V staging, was before the last
         * barrier). 0.92 against 0.84 x copy for decode with pages of 1 on an
         * H100; the tiled prefill form keeps the load's value in a register
         * across the tile instead (below), as this placement takes it past
         * 170 registers, the bound for three work-groups per SM (0.72 against
         * 0.88 x contiguous). */
        if (blk + 1 < nblocks) {
            int knext[NKT];
            KEY_ROWS_LOAD(knext, kb + BLOCK_N, min(BLOCK_N, kmax + 1 - kb - BLOCK_N));
            KEY_ROWS_STORE(cur ^ 1, knext);
        }
#endif
        cp_async_wait_all();
        fence_proxy_async(); /* the tensor cores (wgmma) read what cp.async wrote */
        barrier(CLK_LOCAL_MEM_FENCE); /* K ready; everyone is done with the last V */
#ifdef CV_PAGED
        STAGE_KEYS_LOCAL(Vs, vb, cur, nvalid, v_stride, kvh * HEAD_DIM);
        cp_async_commit();
#ifndef CV_GQA_PACK
        int knext[NKT];
        if (blk + 1 < nblocks)
            KEY_ROWS_LOAD(knext, kb + BLOCK_N, min(BLOCK_N, kmax + 1 - kb - BLOCK_N));
#endif
#else
        STAGE_V(Vs, BLOCK_N, vb, kb, nvalid, v_stride, kvh * HEAD_DIM);
        cp_async_commit();
#endif

        float4 s[WARP_MT][NT_S];
        UNROLL
        for (int mt = 0; mt < WARP_MT; mt++)
            UNROLL
            for (int n = 0; n < NT_S; n++)
                s[mt][n] = (float4)(0.0f);
#ifdef CV_WGMMA
        /* K as the K-major operand (layout at STAGE_CM). qz: see
         * cl/nv-wgmma.clh (Q's fragments live across the loop). */
        WG_QK(s[0], qf, qz);
#else
        UNROLL
        for (int ks = 0; ks < KSTEPS; ks++) {
            uint4 a[WARP_MT];
#if Q_IN_REGS
            a[0] = qf[ks];
#else
            UNROLL
            for (int mt = 0; mt < WARP_MT; mt++)
                a[mt] = ldsm_x4(smem + (warp * WARP_ROWS + mt * 16 + (lane & 15)) * SROW +
                                ks * 16 + (lane >> 4) * 8);
#endif
            UNROLL
            for (int np = 0; np < NT_S / 2; np++) {
                uint4 b = ldsm_x4(Ks + (np * 16 + (lane & 7) + ((lane >> 4) << 3)) * SROW +
                                  ks * 16 + ((lane >> 3) & 1) * 8);
                UNROLL
                for (int mt = 0; mt < WARP_MT; mt++) {
                    s[mt][2 * np] = mma16816(a[mt], b.x, b.y, s[mt][2 * np]);
                    s[mt][2 * np + 1] = mma16816(a[mt], b.z, b.w, s[mt][2 * np + 1]);
                }
            }
        }
#endif

        /* Scores and the online softmax (cl/attention-nv-tile.clh); a block
         * that every row sees in full (the interior of a causal band) skips
         * the mask. */
        const bool full = kb >= max_lo && kb + BLOCK_N - 1 <= min_hi;
        uint4 pa[WARP_MT][BLOCK_N / 16];
        UNROLL
        for (int mt = 0; mt < WARP_MT; mt++) {
            float al[2];
            attn_tile_scores(s[mt], fold, sl2, softcap, full, kb, t4, lo[2 * mt], hi[2 * mt],
                             lo[2 * mt + 1], hi[2 * mt + 1]);
            attn_tile_softmax(s[mt], pa[mt], m + 2 * mt, l + 2 * mt, f, al, oacc[mt] EMU_ARG);
        }

#if defined(CV_PAGED) && !defined(CV_GQA_PACK)
        if (blk + 1 < nblocks)
            KEY_ROWS_STORE(cur ^ 1, knext);
#endif
        cp_async_wait_all();
        fence_proxy_async();
        barrier(CLK_LOCAL_MEM_FENCE); /* V ready; everyone is done with K */
        if (blk + 1 < nblocks) {
#ifdef CV_PAGED
            STAGE_KEYS_LOCAL(Ks, kb_, cur ^ 1, min(BLOCK_N, kmax + 1 - kb - BLOCK_N), k_stride,
                             kvh * HEAD_DIM);
#else
            STAGE_K(Ks, BLOCK_N, kb_, kb + BLOCK_N, min(BLOCK_N, kmax + 1 - kb - BLOCK_N),
                       k_stride, kvh * HEAD_DIM);
#endif
            cp_async_commit();
        }
#ifdef CV_WGMMA
        /* V as the N-major operand (layout at STAGE_CM) */
        WG_PV(oacc[0], pa[0], qz);
#else
        UNROLL
        for (int kk = 0; kk < BLOCK_N / 16; kk++) {
            UNROLL
            for (int dp = 0; dp < NT_O / 2; dp++) {
                uint4 b = ldsm_x4_trans(Vs + (kk * 16 + (lane & 15)) * SROW + dp * 16 +
                                        (lane >> 4) * 8);
                UNROLL
                for (int mt = 0; mt < WARP_MT; mt++) {
                    oacc[mt][2 * dp] = mma16816(pa[mt][kk], b.x, b.y, oacc[mt][2 * dp]);
                    oacc[mt][2 * dp + 1] = mma16816(pa[mt][kk], b.z, b.w, oacc[mt][2 * dp + 1]);
                }
            }
        }
#endif
#ifdef CV_PAGED
        cur ^= 1;
#endif
    }

#endif /* CV_ATTN_PIPE */

    /* Row sums over the quad, then o = acc / l and lse. */
    UNROLL
    for (int ri = 0; ri < 2 * WARP_MT; ri++) {
        l[ri] += shfl_xor(l[ri], 1);
        l[ri] += shfl_xor(l[ri], 2);
    }
    __global uchar *ob = o + o_off;
    UNROLL
    for (int ri = 0; ri < 2 * WARP_MT; ri++) {
        const int mt = ri >> 1, i = ri & 1;
        const int r = warp * WARP_ROWS + mt * 16 + g + 8 * i;
        if (r >= rows)
            continue;
        const float lt = l[ri], mt_max = m[ri];
        const float inv = lt > 0.0f ? 1.0f / lt : 0.0f;
        const size_t tok = (size_t)(q0 + QIDX(row0 + r)), hr = (size_t)QHEAD(row0 + r);
        const float lv = lt > 0.0f ? (mt_max * f + log2(lt)) * M_LN2_F : -INFINITY;
#ifdef CV_GQA_PACK
        if (n_splits > 1) { /* f32 partials for attn_merge */
            __global float *prow = part + (((size_t)sp * total_q + tok) * heads_q + hr) * HEAD_DIM;
            UNROLL
            for (int n = 0; n < NT_O; n++) {
                float a = i ? oacc[mt][n].z : oacc[mt][n].x;
                float b = i ? oacc[mt][n].w : oacc[mt][n].y;
                vstore2((float2)(a * inv, b * inv), 0, prow + n * 8 + 2 * t4);
            }
            if (t4 == 0)
                part[(size_t)n_splits * total_q * heads_q * HEAD_DIM +
                     ((size_t)sp * heads_q + hr) * total_q + tok] = lv;
            continue;
        }
#endif
        __global uint *orow =
            (__global uint *)(ob + (tok * (size_t)o_stride + hr * HEAD_DIM) * 2);
        UNROLL
        for (int n = 0; n < NT_O; n++) {
            float a = i ? oacc[mt][n].z : oacc[mt][n].x, b = i ? oacc[mt][n].w : oacc[mt][n].y;
            orow[n * 4 + t4] = pack2(a * inv, b * inv);
        }
        if (t4 == 0 && lse)
            CV_PTR(float, lse, lse_off)[hr * total_q + tok] = lv;
    }
}

#ifdef CV_WGMMA
/* The check of the wgmma form, run once before the form is used (see the
 * header): one work-group of WG_SIZE computes S = Q K^T (BLOCK_M x BLOCK_N)
 * and O = P V (BLOCK_M x HEAD_DIM) through attn_fwd_mma's staging and
 * products. in holds the 16-bit operands row-major: Q [BLOCK_M][HEAD_DIM], K,
 * V [BLOCK_N][HEAD_DIM], then P [BLOCK_M][BLOCK_N]; out receives S
 * [BLOCK_M][BLOCK_N] and then O [BLOCK_M][HEAD_DIM] as f32. */
__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1)))
void attn_wgmma_check(__global const uchar *in, __global float *out)
{
    SMEM_DECL;
    EMU_DECL
#ifndef CV_NV_PTX
    __local uint *emu = emu_scratch;
#endif
    const int lid = get_local_id(0);
    const int warp = lid >> 5, lane = lid & 31, g = lane >> 2, t4 = lane & 3;
    const int k0 = 0; /* KV_ROW */
    const size_t tile = (size_t)BLOCK_M * HEAD_DIM * 2, ktile = (size_t)BLOCK_N * HEAD_DIM * 2;
#if WG_QLOCAL
    STAGE_SW_ROWS(smem, BLOCK_M, in, (long)rr_ * HEAD_DIM, BLOCK_M);
#else
    STAGE_ROWS(smem, BLOCK_M, in, 0, BLOCK_M, HEAD_DIM, 0);
    cp_async_commit();
    cp_async_wait_all();
    barrier(CLK_LOCAL_MEM_FENCE);
    uint4 qf[KSTEPS];
    UNROLL
    for (int ks = 0; ks < KSTEPS; ks++)
        qf[ks] = ldsm_x4(smem + (warp * 16 + (lane & 15)) * SROW + ks * 16 + (lane >> 4) * 8);
    barrier(CLK_LOCAL_MEM_FENCE);
#endif
    __local ushort *Ks = smem + KV_BASE, *Vs = Ks + KV_TILE;
    STAGE_K(Ks, BLOCK_N, in + tile, 0, BLOCK_N, HEAD_DIM, 0);
    STAGE_V(Vs, BLOCK_N, in + tile + ktile, 0, BLOCK_N, HEAD_DIM, 0);
    cp_async_commit();
    cp_async_wait_all();
    fence_proxy_async();
    barrier(CLK_LOCAL_MEM_FENCE);

    float4 s[NT_S], oacc[NT_O];
    UNROLL
    for (int n = 0; n < NT_S; n++)
        s[n] = (float4)(0.0f);
    UNROLL
    for (int n = 0; n < NT_O; n++)
        oacc[n] = (float4)(0.0f);
    WG_QK(s, qf, 0u);
    /* P's A fragments straight from global memory (rows r0 and r0 + 8) */
    __global const uint *pw = (__global const uint *)(in + tile + 2 * ktile);
    const int r0 = warp * 16 + g;
    uint4 pa[BLOCK_N / 16];
    UNROLL
    for (int kk = 0; kk < BLOCK_N / 16; kk++)
        pa[kk] = (uint4)(pw[(r0 * BLOCK_N + kk * 16 + 2 * t4) / 2],
                         pw[((r0 + 8) * BLOCK_N + kk * 16 + 2 * t4) / 2],
                         pw[(r0 * BLOCK_N + kk * 16 + 8 + 2 * t4) / 2],
                         pw[((r0 + 8) * BLOCK_N + kk * 16 + 8 + 2 * t4) / 2]);
    WG_PV(oacc, pa, 0u);
    UNROLL
    for (int n = 0; n < NT_S; n++) {
        vstore2((float2)(s[n].x, s[n].y), 0, out + r0 * BLOCK_N + n * 8 + 2 * t4);
        vstore2((float2)(s[n].z, s[n].w), 0, out + (r0 + 8) * BLOCK_N + n * 8 + 2 * t4);
    }
    __global float *ob = out + BLOCK_M * BLOCK_N;
    UNROLL
    for (int n = 0; n < NT_O; n++) {
        vstore2((float2)(oacc[n].x, oacc[n].y), 0, ob + r0 * HEAD_DIM + n * 8 + 2 * t4);
        vstore2((float2)(oacc[n].z, oacc[n].w), 0, ob + (r0 + 8) * HEAD_DIM + n * 8 + 2 * t4);
    }
}
#endif /* CV_WGMMA */
