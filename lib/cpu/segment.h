/* The segment family's CPU fallback (SPEC 2), called by lib/segment/
 * after it has validated every argument: cu_seqlens <-> lengths, token maps,
 * pack / pack_masked / unpack, row gather and scatter (overwrite or f32
 * accumulate, in index order), seqlens_expanded with the page-table
 * expansion, the per-document context-parallel plan, gather and scatter, and
 * gen_seq_lens. Row copies are whole-row memcpy over chunks of rows spread on
 * the context's thread pool; results are bitwise equal to the OpenCL kernels
 * in cl/segment.cl. Strides here are in bytes. The CP chunk arithmetic and
 * the gen_seq_lens hash are inline so the host launchers share them.
 */
#ifndef CLVARLEN_CPU_SEGMENT_H
#define CLVARLEN_CPU_SEGMENT_H

#include "core/core.h"

/* ---- SPEC 2.5: document of length L in C = 2W chunks; chunk c starts at
 * c*base + min(c, rem) and has base + (c < rem) tokens. */
static inline int64_t cv_cp_chunk_start(int64_t L, int64_t C, int64_t c)
{
    int64_t base = L / C, rem = L % C;
    return c * base + (c < rem ? c : rem);
}
static inline int64_t cv_cp_chunk_len(int64_t L, int64_t C, int64_t c)
{
    return L / C + (c < L % C ? 1 : 0);
}

/* ---- SPEC 2.6: SplitMix64's output function on x + golden gamma. */
static inline uint64_t cv_mix64(uint64_t x)
{
    uint64_t z = x + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
/* u in [0, 1): the top 24 bits of the hash, exact in f32. */
static inline float cv_gen_uniform(uint64_t seed, uint32_t row, uint32_t i)
{
    uint64_t h = cv_mix64(seed ^ cv_mix64(((uint64_t)row << 32) | i));
    return (float)(uint32_t)(h >> 40) * 0x1p-24f;
}

/* ---- Row helpers shared by the CPU operations (segment-rows.c). Strides
 * and row sizes in bytes. */

/** Rows per pool task: enough to move about 64 KiB. */
int64_t cv_cpu_rows_grain(size_t row_bytes);
void cv_cpu_copy_rows(void *dst, size_t dst_stride, const void *src, size_t src_stride,
                      int64_t rows, size_t row_bytes);
void cv_cpu_zero_rows(void *dst, size_t dst_stride, int64_t rows, size_t row_bytes);
/** dst row += the rows src + ms[k] * src_stride for k ascending, in the kernels' order. */
void cv_cpu_acc_row(clvarlen_dtype dtype, int64_t elems, void *dst, const char *src,
                    size_t src_stride, const int64_t *ms, int64_t count);

/** Upper-bound search: the last s in [0, n) with cu[s] <= t (n >= 1). */
int64_t cv_seq_of_token_host(const int32_t *cu, int64_t n, int64_t t);

void cv_cpu_cu_from_lengths(const int32_t *lengths, int64_t n, int32_t *cu);
void cv_cpu_lengths_from_cu(clvarlen_context *ctx, const int32_t *cu, int64_t n, int32_t *lengths);
/** seq_id and/or pos (either may be NULL) of total = cu[n] tokens. */
void cv_cpu_token_maps(clvarlen_context *ctx, const int32_t *cu, int64_t n, int64_t total,
                       const int32_t *offsets, int32_t *seq_id, int32_t *pos);

/**
 * pack: lens[b] kept rows of padded batch row b (the prefix valid_lens when
 * mask is NULL, else the mask's per-row counts) -> packed (contiguous rows),
 * cu[batch + 1], src_index (may be NULL). Allocation failures return before
 * any output is written.
 */
clvarlen_status cv_cpu_pack(clvarlen_context *ctx, size_t row_bytes, const void *padded,
                            size_t padded_stride, int64_t batch, int64_t max_seqlen,
                            const int32_t *lens, const uint8_t *mask, void *packed, int32_t *cu,
                            int64_t *src_index);
/** unpack: pad is one element of elem_size bytes (NULL: zero). */
clvarlen_status cv_cpu_unpack(clvarlen_context *ctx, size_t row_bytes, size_t elem_size,
                              const void *packed, size_t packed_stride, int64_t total,
                              const int64_t *src_index, int64_t padded_rows, const void *pad,
                              void *padded, size_t padded_stride);
void cv_cpu_gather(clvarlen_context *ctx, size_t row_bytes, const void *src, size_t src_stride,
                   const int32_t *index, int64_t n_index, void *dst, size_t dst_stride);
/** Indices are valid; overwrite has no duplicates (checked by the caller). */
clvarlen_status cv_cpu_scatter(clvarlen_context *ctx, clvarlen_dtype dtype, int64_t row_elems,
                               const void *src, size_t src_stride, const int32_t *index,
                               int64_t n_index, void *dst, int64_t dst_rows, size_t dst_stride,
                               clvarlen_scatter_mode mode, int zero_rest);

/** q_len NULL: uniform_q_len; page_table NULL: no expansion. Strides in elements. */
clvarlen_status cv_cpu_seqlens_expand(clvarlen_context *ctx, const int32_t *kv_len,
                                      const int32_t *q_len, int32_t uniform_q_len, int64_t n,
                                      const int32_t *page_table, int64_t page_stride,
                                      int64_t col_limit, int32_t *seqlens_expanded,
                                      int32_t *page_table_out, int64_t out_stride);

/** Fills every requested output of the plan (capacity already checked). */
void cv_cpu_cp_plan(clvarlen_context *ctx, const int32_t *cu, int64_t n, int32_t world,
                    int32_t rank, clvarlen_cp_plan_out *plan);
/**
 * CP rows: to_local = 1 gathers global -> local; 0 scatters local -> global
 * (overwrite or accumulate; zero_rest zeroes the global rows this rank does
 * not own).
 */
clvarlen_status cv_cpu_cp_rows(clvarlen_context *ctx, clvarlen_dtype dtype, int64_t row_elems,
                               const int32_t *cu, int64_t n, int32_t world, int32_t rank,
                               int to_local, void *global_rows, size_t global_stride,
                               void *local_rows, size_t local_stride, clvarlen_scatter_mode mode,
                               int zero_rest);

void cv_cpu_gen_seq_lens(clvarlen_context *ctx, uint64_t seed, int32_t world, int32_t n,
                         int64_t total, int32_t *out);

#endif /* CLVARLEN_CPU_SEGMENT_H */
