/* Constants that cross the host/kernel boundary, written once. The library's
 * host code #includes this file; the kernel loader puts it in front of every
 * program source (before common.clh), so kernels see the same values. Only
 * preprocessor definitions belong here: it is read as C11 and OpenCL C 1.2.
 */
#ifndef CV_SHARED_H
#define CV_SHARED_H

/* Element-type codes of kernel specialisations (-DCV_DTYPE=<code> and
 * friends); lib/core/dtype.c maps clvarlen_dtype onto them. */
#define CV_DT_F32 0
#define CV_DT_F16 1
#define CV_DT_BF16 2
#define CV_DT_I32 3

/* Bits of the device-check flag word: check kernels and the bounds checks in
 * op kernels raise them with atomic_or; the host turns them into statuses
 * (lib/runtime/device-check.c). */
#define CV_CHECK_CU_SEQLENS 0x1
#define CV_CHECK_INDEX 0x2
#define CV_CHECK_CAPACITY 0x4
#define CV_CHECK_VALUE 0x8

/* Segment family (cl/segment.cl, lib/segment/): sequences up to which pack
 * and CP rows fuse their scan into the row kernel (one launch; cu in local
 * memory, 8 KiB), and units each lane of a row copy loads before it stores
 * (the host sizes lanes per row by it; 4 beat 1 by up to 5% on an H100 for
 * 256 B - 4 KiB rows). */
#define CV_SEG_FUSE_MAX 2048
#define CV_SEG_UNROLL 4

/* Gated delta rule: the flags word of its kernels (cl/gated-delta.cl). */
#define GDN_HAS_CU 0x1
#define GDN_HAS_POOL 0x2
#define GDN_HAS_SIDX 0x4
#define GDN_WRITE_BACK 0x8
#define GDN_HAS_INTER 0x10
#define GDN_HAS_CIDX 0x20
#define GDN_HAS_CHECK 0x40
#define GDN_STATE_KV 0x80
#define GDN_L2NORM 0x100
#define GDN_BIAS_F16 0x200
#define GDN_BIAS_BF16 0x400

/* Gated delta rule: the chunked kernel's geometry (gdn_chunked); the host
 * sizes its local memory from the same numbers. */
#define GDN_CHUNK 64       /* tokens per chunk */
#define GDN_CHUNK_BLOCK 16 /* diagonal blocks of (I + A), inverted one at a time */
#define GDN_PREP_MAX 2     /* gdn_chunk_prep: value heads per work-group, at most */
/* The two-stage tensor-core path's scratch per (chunk slot, value head), in
 * floats: gdn_chunk_prep writes T^T's B fragments (16 KiB), P^T's (8 KiB from
 * GDN_SCR_P), then from GDN_SCR_ROWS the rows' decayed factors, so that the
 * scan takes no exponential: e^G_i rk_i, beta_i, rk_i e^(G_last - G_i),
 * e^G_i rq_i (GDN_CHUNK each), e^G_last and three floats of padding
 * (GDN_SCR_ROWS_N in all); gdn_chunk_scan reads them. */
#define GDN_SCR_P (GDN_CHUNK * GDN_CHUNK)
#define GDN_SCR_ROWS (GDN_CHUNK * GDN_CHUNK * 3 / 2)
#define GDN_SCR_ROWS_N (4 * GDN_CHUNK + 4)
#define GDN_SCR_FLOATS (GDN_SCR_ROWS + GDN_SCR_ROWS_N)

/* The portable chunked path (cl/gated-delta-blas.cl, CLBlast for the
 * chunk-parallel products): its scratch holds, for nb = chunk slots x heads
 * of a head group, arrays of nb items each; array X's item b starts at float
 * nb * GDN_BL_X(K, V) + b * (its item size), so the host and the kernels
 * derive every offset from K, V and nb. Items are row-major f32:
 * KN, QS, QE, KB: 64 x K (normalised k; normalised, scaled q; QS e^G;
 * beta e^G KN), VE 64 x V (beta v), GR 2 x 64 (G, beta), KK 64 x 64 (K K^T,
 * then T = (I + A)^-1 in place), QK 64 x 64 (QS KN^T, then P in place),
 * W 64 x K (T KB), U 64 x V (T VE), H K x V (the state at the chunk's start),
 * VN 64 x V (U - W H), O 64 x V (QE H + P VN). */
#define GDN_BL_KN(K, V) 0
#define GDN_BL_QS(K, V) (64 * (K))
#define GDN_BL_QE(K, V) (128 * (K))
#define GDN_BL_KB(K, V) (192 * (K))
#define GDN_BL_VE(K, V) (256 * (K))
#define GDN_BL_GR(K, V) (GDN_BL_VE(K, V) + 64 * (V))
#define GDN_BL_KK(K, V) (GDN_BL_GR(K, V) + 128)
#define GDN_BL_QK(K, V) (GDN_BL_KK(K, V) + 4096)
#define GDN_BL_W(K, V) (GDN_BL_QK(K, V) + 4096)
#define GDN_BL_U(K, V) (GDN_BL_W(K, V) + 64 * (K))
#define GDN_BL_H(K, V) (GDN_BL_U(K, V) + 64 * (V))
#define GDN_BL_VN(K, V) (GDN_BL_H(K, V) + (K) * (V))
#define GDN_BL_O(K, V) (GDN_BL_VN(K, V) + 64 * (V))
#define GDN_BL_FLOATS(K, V) (GDN_BL_O(K, V) + 64 * (V))

/* Attention: the auxiliary kernels of cl/attention.cl (-DCV_ATTN_AUX). */
#define CV_ATTN_WORKLIST_MAX_WG 256 /* attn_worklist keeps one partial sum per work-item */
#define CV_ATTN_WORKLIST_SORT_MAX 256 /* attn_worklist orders up to this many sequences */
#define CV_WL_LONGEST_FIRST 1         /* attn_worklist's order: sequences longest first */
#define CV_WL_FIRST_TILE_FIRST 2      /* ... and a sequence's first tile first */
#define CV_ATTN_MERGE_WG 64         /* attn_merge's required work-group size */
#define CV_ATTN_MERGE_LANES 16      /* attn_merge: work-items per (token, head) row */
#define CV_ATTN_MERGE_WMAX 64       /* attn_merge: parts whose weights stay in local memory */

#endif /* CV_SHARED_H */
