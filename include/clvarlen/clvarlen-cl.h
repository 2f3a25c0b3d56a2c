/* clvarlen OpenCL interop: contexts on the caller's OpenCL objects and
 * entry points on device-resident tensors.
 *
 * Tensors are a cl_mem plus a byte offset. Every entry point enqueues its
 * kernels on the context's queue after the caller's wait list and, when
 * `event` is not NULL, returns an event that completes with the operation
 * (release it with clReleaseEvent). Nothing blocks unless device checks are
 * on (clvarlen_options_set_device_checks), in which case the call waits to
 * report invalid device-resident cu_seqlens or indices. Sizes that the
 * host-memory entry points read from cu_seqlens are arguments here.
 *
 * Calling these on a context without OpenCL (the CPU fallback) returns
 * CLVARLEN_ERROR_NO_OPENCL. This header and its functions exist only in
 * builds with OpenCL (pkg-config's Requires.private names OpenCL then).
 *
 * Errors common to every entry point here: CLVARLEN_ERROR_INVALID_ARGUMENT for
 * a NULL required buffer, an offset not aligned to its element size, or a wait
 * list whose count and pointer disagree, or an output whose bytes overlap
 * another argument's in the same buffer (or the same parent buffer of
 * sub-buffers; the aliasing rules of clvarlen.h apply);
 * CLVARLEN_ERROR_BUFFER_TOO_SMALL for a buffer (input or output) smaller
 * than its offset plus the bytes the shapes and capacities say it spans
 * (CL_MEM_SIZE; the message names it), checked before anything is enqueued;
 * CLVARLEN_ERROR_OPENCL when an OpenCL
 * call fails; CLVARLEN_ERROR_KERNEL_NOT_FOUND / CLVARLEN_ERROR_KERNEL_BUILD on
 * the first use of a kernel. Sizes passed to kernels as 32-bit integers (row
 * counts, capacities) beyond INT32_MAX are CLVARLEN_ERROR_OVERFLOW.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef CLVARLEN_CL_H
#define CLVARLEN_CL_H

#include <clvarlen/clvarlen.h>

#ifndef CL_TARGET_OPENCL_VERSION
#  define CL_TARGET_OPENCL_VERSION 120
#endif
#ifdef __APPLE__
#  include <OpenCL/cl.h>
#else
#  include <CL/cl.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

/**
 * A context on the caller's OpenCL objects (retained; released by
 * clvarlen_context_destroy). queue may be NULL: the library creates one. A
 * given queue must belong to `device` (else CLVARLEN_ERROR_INVALID_ARGUMENT)
 * and be in-order (an out-of-order queue is CLVARLEN_ERROR_UNSUPPORTED). The
 * context's device index is the device's place in clvarlen_device_query's
 * list, or -2 when the enumeration does not list it.
 */
CLVARLEN_API clvarlen_status clvarlen_context_create_cl(cl_context cl_ctx, cl_device_id device,
                                                        cl_command_queue queue,
                                                        const clvarlen_options *options,
                                                        clvarlen_context **context);
/** The context's OpenCL objects (not retained); CLVARLEN_ERROR_NO_OPENCL on the CPU fallback. */
CLVARLEN_API clvarlen_status clvarlen_context_get_cl(clvarlen_context *context,
                                                     cl_context *cl_ctx, cl_device_id *device,
                                                     cl_command_queue *queue);

/* ---------------------------------------------------------------- segment family */

CLVARLEN_API clvarlen_status clvarlen_cl_cu_seqlens_from_lengths(
    clvarlen_context *context, cl_mem lengths, size_t lengths_offset, int64_t n, cl_mem cu_seqlens,
    size_t cu_offset, cl_uint num_events, const cl_event *wait_list, cl_event *event);

CLVARLEN_API clvarlen_status clvarlen_cl_lengths_from_cu_seqlens(
    clvarlen_context *context, cl_mem cu_seqlens, size_t cu_offset, int64_t n, cl_mem lengths,
    size_t lengths_offset, cl_uint num_events, const cl_event *wait_list, cl_event *event);

/** total_tokens must equal cu_seqlens[n] (checked on device with device checks on). */
CLVARLEN_API clvarlen_status clvarlen_cl_token_maps(clvarlen_context *context, cl_mem cu_seqlens,
                                                    size_t cu_offset, int64_t n,
                                                    int64_t total_tokens, cl_mem offsets,
                                                    size_t offsets_offset, cl_mem seq_id,
                                                    size_t seq_id_offset, cl_mem pos,
                                                    size_t pos_offset, cl_uint num_events,
                                                    const cl_event *wait_list, cl_event *event);

/**
 * pack on device. mask == NULL: prefix form with valid_lens [batch]; else the
 * general mask form (valid_lens ignored, may be NULL). The total is computed
 * on device and written to total_tokens (one int64; total_tokens may be NULL,
 * src_index too); when it exceeds capacity_tokens nothing else is written
 * (with device checks on the call returns CLVARLEN_ERROR_BUFFER_TOO_SMALL and
 * writes nothing, total_tokens included).
 */
CLVARLEN_API clvarlen_status clvarlen_cl_pack(clvarlen_context *context, clvarlen_dtype dtype,
                                              int64_t row_elems, cl_mem padded,
                                              size_t padded_offset, int64_t padded_stride,
                                              int64_t batch, int64_t max_seqlen, cl_mem valid_lens,
                                              size_t valid_lens_offset, cl_mem mask,
                                              size_t mask_offset, int64_t capacity_tokens,
                                              cl_mem packed, size_t packed_offset,
                                              cl_mem cu_seqlens, size_t cu_offset,
                                              cl_mem src_index, size_t src_index_offset,
                                              cl_mem total_tokens, size_t total_offset,
                                              cl_uint num_events, const cl_event *wait_list,
                                              cl_event *event);

CLVARLEN_API clvarlen_status clvarlen_cl_unpack(clvarlen_context *context, clvarlen_dtype dtype,
                                                int64_t row_elems, cl_mem packed,
                                                size_t packed_offset, int64_t packed_stride,
                                                int64_t total_tokens, cl_mem src_index,
                                                size_t src_index_offset, int64_t batch,
                                                int64_t max_seqlen, const void *pad_value,
                                                cl_mem padded, size_t padded_offset,
                                                int64_t padded_stride, cl_uint num_events,
                                                const cl_event *wait_list, cl_event *event);

CLVARLEN_API clvarlen_status clvarlen_cl_gather_rows(clvarlen_context *context,
                                                     clvarlen_dtype dtype, int64_t row_elems,
                                                     cl_mem src, size_t src_offset,
                                                     int64_t src_rows, int64_t src_stride,
                                                     cl_mem index, size_t index_offset,
                                                     int64_t n_index, cl_mem dst,
                                                     size_t dst_offset, int64_t dst_stride,
                                                     cl_uint num_events, const cl_event *wait_list,
                                                     cl_event *event);

/**
 * Device indices out of range are skipped (reported with device checks on).
 * Overwrite with repeated indices leaves which row wins unspecified.
 */
CLVARLEN_API clvarlen_status clvarlen_cl_scatter_rows(
    clvarlen_context *context, clvarlen_dtype dtype, int64_t row_elems, cl_mem src,
    size_t src_offset, int64_t src_stride, cl_mem index, size_t index_offset, int64_t n_index,
    cl_mem dst, size_t dst_offset, int64_t dst_rows, int64_t dst_stride,
    clvarlen_scatter_mode mode, unsigned flags, cl_uint num_events, const cl_event *wait_list,
    cl_event *event);

/**
 * One kernel launch: seqlens_expanded and (page_table != NULL) the expanded
 * page table; q_len == NULL means uniform_q_len. The total is computed on
 * device and written to `total` (one int64, may be NULL); rows beyond
 * capacity are never written (with device checks on, an overflow returns
 * CLVARLEN_ERROR_BUFFER_TOO_SMALL and writes nothing, total included).
 */
CLVARLEN_API clvarlen_status clvarlen_cl_seqlens_expand(
    clvarlen_context *context, cl_mem kv_len, size_t kv_len_offset, cl_mem q_len,
    size_t q_len_offset, int32_t uniform_q_len, int64_t n, cl_mem page_table,
    size_t page_table_offset, int64_t page_cols, int64_t page_stride, int64_t col_limit,
    int64_t capacity, cl_mem seqlens_expanded, size_t seqlens_offset, cl_mem page_table_out,
    size_t page_out_offset, int64_t out_stride, cl_mem total, size_t total_offset,
    cl_uint num_events, const cl_event *wait_list, cl_event *event);

/**
 * CP plan on device: local_cu_seqlens [n+1] (required), head_cu/tail_cu
 * [n+1], global_index/position [capacity] (may be NULL); local token count
 * into `local_tokens` (one int64, may be NULL). A local count over capacity
 * writes no array; with device checks on it returns
 * CLVARLEN_ERROR_BUFFER_TOO_SMALL and writes nothing, local_tokens included.
 */
CLVARLEN_API clvarlen_status clvarlen_cl_cp_plan(
    clvarlen_context *context, cl_mem cu_seqlens, size_t cu_offset, int64_t n, int32_t world,
    int32_t rank, cl_mem local_cu_seqlens, size_t local_cu_offset, cl_mem head_cu,
    size_t head_cu_offset, cl_mem tail_cu, size_t tail_cu_offset, int64_t capacity,
    cl_mem global_index, size_t global_index_offset, cl_mem position, size_t position_offset,
    cl_mem local_tokens, size_t local_tokens_offset, cl_uint num_events,
    const cl_event *wait_list, cl_event *event);

/** total_tokens = cu_seqlens[n]; local rows beyond local_capacity are never written. */
CLVARLEN_API clvarlen_status clvarlen_cl_cp_gather(
    clvarlen_context *context, clvarlen_dtype dtype, int64_t row_elems, cl_mem global_rows,
    size_t global_offset, int64_t global_stride, int64_t total_tokens, cl_mem cu_seqlens,
    size_t cu_offset, int64_t n, int32_t world, int32_t rank, cl_mem local_rows,
    size_t local_offset, int64_t local_stride, int64_t local_capacity, cl_uint num_events,
    const cl_event *wait_list, cl_event *event);

CLVARLEN_API clvarlen_status clvarlen_cl_cp_scatter(
    clvarlen_context *context, clvarlen_dtype dtype, int64_t row_elems, cl_mem local_rows,
    size_t local_offset, int64_t local_stride, int64_t local_capacity, cl_mem cu_seqlens,
    size_t cu_offset, int64_t n, int32_t world, int32_t rank, cl_mem global_rows,
    size_t global_offset, int64_t global_stride, int64_t total_tokens, clvarlen_scatter_mode mode,
    unsigned flags, cl_uint num_events, const cl_event *wait_list, cl_event *event);

CLVARLEN_API clvarlen_status clvarlen_cl_gen_seq_lens(clvarlen_context *context, uint64_t seed,
                                                      int32_t world, int32_t n, int64_t total,
                                                      cl_mem out, size_t out_offset,
                                                      cl_uint num_events,
                                                      const cl_event *wait_list, cl_event *event);

/* ---------------------------------------------------------------- scratch memory */

/**
 * The device scratch of the context's calls (work lists, partial results,
 * the backward's row sums, the chunked gated delta rule's intermediates) is
 * one buffer the context keeps across calls and grows to the largest need so
 * far. Upper bounds per call, in bytes, before rounding up to 4 KiB (Tq, Tk
 * tokens, N sequences, Hq and Hk query and KV heads, Dv the value head dim,
 * BM the query tile, 16 to 128 on GPUs and at least 1 anywhere):
 *   attention forward          8 Tq / BM + 12 N + 256
 *   attention backward         4 Hq Tq + max(Tq, Tk) / 2 + 12 N + 512
 *   paged attention            8 Tq (Hq / Hk) / BM + 12 N + 256, plus 4 s Tq Hq (Dv + 1)
 *                              with s key splits (num_splits, or the automatic
 *                              choice, at most 256); a chunked prefill whose rows
 *                              average 512 or more queries x query heads per KV
 *                              head gathers each row's cache into packed K/V:
 *                              the attention forward's bytes, 4 N + 4, and
 *                              e N C Hk (D + Dv) with C = max_pages page_size
 *                              tokens and e bytes per element, taken only when
 *                              that fits an eighth of the device's memory (or
 *                              the caller's buffer), else the paged kernels run
 *   gated delta rule, chunked  at most 512 MiB (larger batches run in head groups),
 *                              0 when the buffer cannot be had (the fused kernel runs)
 *   segment ops                64 + 4 rows of the output for unpack and scatter with
 *                              zero_rest; 64 + 8 batch (+ 8 batch max_seqlen without
 *                              src_index) for the masked pack; 64 + 4 (N + 1) for CP
 *   merges, appends, token-by-token gated delta: none.
 * clvarlen_cl_context_set_scratch gives the context the caller's buffer (of
 * its OpenCL context; retained until replaced or the context is destroyed)
 * instead: the library then allocates no scratch, and a call that needs more
 * than `bytes` returns CLVARLEN_ERROR_BUFFER_TOO_SMALL (the chunked gated delta
 * rule runs its fused kernel instead). scratch NULL returns to the library's
 * own buffer. The caller must not use the buffer while calls are in flight.
 * Errors: CLVARLEN_ERROR_NO_OPENCL (a CPU context), CLVARLEN_ERROR_INVALID_ARGUMENT
 * (not a buffer of the context's OpenCL context, bytes 0 or beyond its size).
 */
CLVARLEN_API clvarlen_status clvarlen_cl_context_set_scratch(clvarlen_context *context,
                                                             cl_mem scratch, size_t bytes);
/** The bytes of scratch the context holds now (0 before any call needed some). */
CLVARLEN_API clvarlen_status clvarlen_cl_context_scratch_bytes(clvarlen_context *context,
                                                               size_t *bytes);

/* ---------------------------------------------------------------- varlen attention */

/**
 * clvarlen_attention_forward on device buffers. Each tensor is a cl_mem and a
 * byte offset (a multiple of its element size). q_pos and lse may be NULL.
 * params->total_q/total_k and n_seqs size the work; the work list of
 * (sequence, head, query tile) is built on the device from cu_seqlens_q, so
 * nothing is read back. Without device checks, invalid cu_seqlens give
 * unspecified values but no access outside [0, total) rows. With device
 * checks on, cu_seqlens_q/_k are validated first and the call blocks to
 * report CLVARLEN_ERROR_INVALID_CU_SEQLENS (nothing written).
 * On NVIDIA devices of compute capability 8.0 or later, f16/bf16 with
 * head_dim == head_dim_v <= 256 (a multiple of 16), 16-byte aligned offsets
 * and token strides that are multiples of 8 elements run on tensor cores
 * (inline PTX mma.sync; on compute capability 9.x with head dim 64, 96, 128
 * or 256, wgmma once its check has passed on the context); every other case
 * runs the portable kernel.
 */
CLVARLEN_API clvarlen_status clvarlen_cl_attention_forward(
    clvarlen_context *context, const clvarlen_attention_params *params, cl_mem q, size_t q_offset,
    cl_mem k, size_t k_offset, cl_mem v, size_t v_offset, cl_mem cu_seqlens_q, size_t cu_q_offset,
    cl_mem cu_seqlens_k, size_t cu_k_offset, cl_mem q_pos, size_t q_pos_offset, cl_mem o,
    size_t o_offset, cl_mem lse, size_t lse_offset, cl_uint num_events, const cl_event *wait_list,
    cl_event *event);

/**
 * clvarlen_attention_backward on device buffers (q_pos may be NULL; bwd NULL
 * for the defaults). Work space (the rows' dot(do, o) and two work lists,
 * about 4 * heads_q * total_q bytes plus the tile counts) is the context's
 * temporary buffer, reused across calls. With device checks on, cu_seqlens_q/_k
 * are validated first (the call blocks; nothing written on error). Runs the
 * portable kernels on every device.
 */
CLVARLEN_API clvarlen_status clvarlen_cl_attention_backward(
    clvarlen_context *context, const clvarlen_attention_params *params,
    const clvarlen_attention_bwd_params *bwd, cl_mem q, size_t q_offset, cl_mem k,
    size_t k_offset, cl_mem v, size_t v_offset, cl_mem o, size_t o_offset, cl_mem dout,
    size_t do_offset, cl_mem lse, size_t lse_offset, cl_mem cu_seqlens_q, size_t cu_q_offset,
    cl_mem cu_seqlens_k, size_t cu_k_offset, cl_mem q_pos, size_t q_pos_offset, cl_mem dq,
    size_t dq_offset, cl_mem dk, size_t dk_offset, cl_mem dv, size_t dv_offset,
    cl_uint num_events, const cl_event *wait_list, cl_event *event);

/** clvarlen_attention_merge on device buffers (lse may be NULL). */
CLVARLEN_API clvarlen_status clvarlen_cl_attention_merge(
    clvarlen_context *context, clvarlen_dtype dtype, int64_t n_parts, int64_t tokens,
    int32_t heads, int32_t head_dim_v, cl_mem o_parts, size_t o_parts_offset, cl_mem lse_parts,
    size_t lse_parts_offset, cl_mem o, size_t o_offset, cl_mem lse, size_t lse_offset,
    cl_uint num_events, const cl_event *wait_list, cl_event *event);

/** clvarlen_attention_merge2 on device buffers (lse may be NULL; in place allowed). */
CLVARLEN_API clvarlen_status clvarlen_cl_attention_merge2(
    clvarlen_context *context, clvarlen_dtype dtype, int64_t tokens, int32_t heads,
    int32_t head_dim_v, cl_mem o_a, size_t o_a_offset, cl_mem lse_a, size_t lse_a_offset,
    cl_mem o_b, size_t o_b_offset, cl_mem lse_b, size_t lse_b_offset, cl_mem o, size_t o_offset,
    cl_mem lse, size_t lse_offset, cl_uint num_events, const cl_event *wait_list,
    cl_event *event);

/* ---------------------------------------------------------------- paged KV cache */

/**
 * clvarlen_kv_cache_append on device buffers (each a cl_mem and a byte
 * offset, a multiple of its element size). One launch. With device checks
 * on, the slots are range-checked first and the call blocks to report
 * CLVARLEN_ERROR_INDEX_OUT_OF_RANGE (nothing written); two tokens mapped to
 * one slot are reported only by the host-memory entry point. Without checks,
 * an out-of-range slot is skipped (never written out of bounds).
 */
CLVARLEN_API clvarlen_status clvarlen_cl_kv_cache_append(
    clvarlen_context *context, const clvarlen_kv_append_params *params, cl_mem k, size_t k_offset,
    cl_mem v, size_t v_offset, cl_mem slot_mapping, size_t slot_offset, cl_mem k_cache,
    size_t k_cache_offset, cl_mem v_cache, size_t v_cache_offset, cl_uint num_events,
    const cl_event *wait_list, cl_event *event);

/**
 * clvarlen_paged_attention_forward on device buffers. Nothing is read back:
 * without device checks, invalid cu_seqlens_q, cache_seqlens or page-table
 * entries give unspecified values but no access outside the buffers (entries
 * are clamped); with checks on, they are validated first and the call blocks
 * to report the error (nothing written). params->max_seqlen_q picks the
 * kernel (see clvarlen_paged_params); a split-KV call uses the context's
 * temporary buffer for the partial results. On NVIDIA devices of compute
 * capability 8.0 or later, f16/bf16 with head_dim == head_dim_v <= 128,
 * 16-byte aligned offsets and strides that are multiples of 8 elements run
 * on tensor cores (rows of a few queries with the query heads of a KV head
 * packed into one tile, so each key is read once per KV head); other NVIDIA
 * f16/bf16 decode calls run a register kernel with shuffles, and every other
 * case the portable kernels. Long rows (chunked prefill; see the scratch
 * above) are gathered into packed K/V in the scratch first and run the
 * packed attention kernels, on every device.
 */
CLVARLEN_API clvarlen_status clvarlen_cl_paged_attention_forward(
    clvarlen_context *context, const clvarlen_paged_params *params, cl_mem q, size_t q_offset,
    cl_mem k_cache, size_t k_cache_offset, cl_mem v_cache, size_t v_cache_offset,
    cl_mem cu_seqlens_q, size_t cu_q_offset, cl_mem page_table, size_t page_table_offset,
    cl_mem cache_seqlens, size_t cache_seqlens_offset, cl_mem o, size_t o_offset, cl_mem lse,
    size_t lse_offset, cl_uint num_events, const cl_event *wait_list, cl_event *event);

/* ---------------------------------------------------------------- gated delta rule */

/**
 * clvarlen_gated_delta_rule on device buffers: the same tensors and
 * semantics, each a cl_mem plus a byte offset (a multiple of its element
 * size). cu_seqlens, state_pool, state_indices, intermediate_states and
 * cache_indices may be NULL with the meanings given there; the others are
 * required when total_tokens > 0. params->total_tokens must equal
 * cu_seqlens[n_seqs]. Device-resident indices outside their buffer never
 * cause an out-of-bounds access: a state index >= state_slots is treated as
 * negative, a cache index >= cache_slots and steps beyond cache_steps are
 * skipped; with device checks on, they (and an invalid cu_seqlens) make the
 * call write nothing and return the error. Under CLVARLEN_GDN_AUTO the
 * algorithm is chosen per sequence on the device.
 */
CLVARLEN_API clvarlen_status clvarlen_cl_gated_delta_rule(
    clvarlen_context *context, const clvarlen_gdn_params *params, cl_mem A_log,
    size_t A_log_offset, cl_mem dt_bias, size_t dt_bias_offset, cl_mem a, size_t a_offset,
    cl_mem b, size_t b_offset, cl_mem q, size_t q_offset, cl_mem k, size_t k_offset, cl_mem v,
    size_t v_offset, cl_mem cu_seqlens, size_t cu_offset, cl_mem state_pool,
    size_t state_offset, cl_mem state_indices, size_t state_indices_offset,
    cl_mem intermediate_states, size_t intermediate_offset, cl_mem cache_indices,
    size_t cache_indices_offset, cl_mem o, size_t o_offset, cl_uint num_events,
    const cl_event *wait_list, cl_event *event);

#ifdef __cplusplus
}
#endif

#endif /* CLVARLEN_CL_H */
