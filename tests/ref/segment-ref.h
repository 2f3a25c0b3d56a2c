/* Naive oracles for the segment family (SPEC section 2), written from the
 * spec and independent of lib/cpu: loops that are obviously right, slow is
 * fine. Copies work on bytes (rows of row_bytes at a pitch in bytes), so one
 * oracle serves every dtype; accumulation is summed in float64.
 */
#ifndef CLVARLEN_SEGMENT_REF_H
#define CLVARLEN_SEGMENT_REF_H

#include <stddef.h>
#include <stdint.h>

#include <clvarlen/clvarlen.h>

/* ---- 2.1 lengths, offsets, token maps */
void ref_cu_from_lengths(const int32_t *lengths, int64_t n, int32_t *cu);
void ref_lengths_from_cu(const int32_t *cu, int64_t n, int32_t *lengths);
/** The last s in [0, n) with cu[s] <= t (linear scan). */
int64_t ref_seq_of_token(const int32_t *cu, int64_t n, int64_t t);
/** seq_id/pos for every token of cu[n]; offsets may be NULL (0); outputs may be NULL. */
void ref_token_maps(const int32_t *cu, int64_t n, const int32_t *offsets, int32_t *seq_id,
                    int32_t *pos);

/* ---- 2.2 pack / unpack (pitches in bytes) */
/** Prefix form; returns the total. packed is contiguous; src_index may be NULL. */
int64_t ref_pack(size_t row_bytes, const void *padded, size_t padded_pitch, int64_t batch,
                 int64_t max_seqlen, const int32_t *valid_lens, void *packed, int32_t *cu,
                 int64_t *src_index);
/** Mask form (nonzero byte = keep, holes allowed, order kept); returns the total. */
int64_t ref_pack_masked(size_t row_bytes, const void *padded, size_t padded_pitch, int64_t batch,
                        int64_t max_seqlen, const uint8_t *mask, void *packed, int32_t *cu,
                        int64_t *src_index);
/** Rows src_index[t] of padded get packed row t, every other row is pad_value repeated
 * (pad_value is one element of elem_bytes; NULL: zero bytes). Bytes between rows are kept. */
void ref_unpack(size_t row_bytes, size_t elem_bytes, const void *packed, size_t packed_pitch,
                int64_t total, const int64_t *src_index, int64_t batch, int64_t max_seqlen,
                const void *pad_value, void *padded, size_t padded_pitch);

/* ---- 2.3 rows */
/** dst[m] = src[index[m]]; -1 writes zero bytes. */
void ref_gather(size_t row_bytes, const void *src, size_t src_pitch, const int32_t *index,
                int64_t n_index, void *dst, size_t dst_pitch);
/** dst[index[m]] = src[m]; -1 skips; zero_rest zeroes the rows not named. */
void ref_scatter_overwrite(size_t row_bytes, const void *src, size_t src_pitch,
                           const int32_t *index, int64_t n_index, void *dst, int64_t dst_rows,
                           size_t dst_pitch, int zero_rest);
/**
 * Accumulate in float64 (or exact int64 for i32): out[r * row_elems + e] =
 * (zero_rest and r not named ? 0 : dst_init) + sum of the src rows naming r.
 * Strides in elements (0: row_elems). out is dense [dst_rows, row_elems].
 */
void ref_scatter_accumulate(clvarlen_dtype dtype, int64_t row_elems, const void *src,
                            int64_t src_stride, const int32_t *index, int64_t n_index,
                            const void *dst_init, int64_t dst_rows, int64_t dst_stride,
                            int zero_rest, double *out);

/* ---- 2.4 speculative decoding */
/** Returns sum q. seqlens_out [sum q]; page_out [sum q] rows of col_limit (0: page_cols)
 * at out_stride (0: col_limit) when page_table != NULL; page_stride 0: page_cols. */
int64_t ref_seqlens_expand(const int32_t *kv_len, const int32_t *q_len, int32_t uniform_q_len,
                           int64_t n, const int32_t *page_table, int64_t page_cols,
                           int64_t page_stride, int64_t col_limit, int32_t *seqlens_out,
                           int32_t *page_out, int64_t out_stride);

/* ---- 2.5 per-document context parallelism */
/** Chunk c of 2*world for a document of length L. */
void ref_cp_chunk(int64_t L, int32_t world, int32_t c, int64_t *start, int64_t *len);
int64_t ref_cp_local_tokens(const int32_t *cu, int64_t n, int32_t world, int32_t rank);
/** Every output may be NULL; global_index/position hold ref_cp_local_tokens entries.
 * Returns the local token count. */
int64_t ref_cp_plan(const int32_t *cu, int64_t n, int32_t world, int32_t rank, int32_t *local_cu,
                    int32_t *head_cu, int32_t *tail_cu, int32_t *global_index, int32_t *position,
                    int32_t *max_head, int32_t *max_tail);

/* ---- 2.6 gen_seq_lens */
/** SplitMix64's finaliser applied to x + 0x9E3779B97F4A7C15 (clvarlen.h). */
uint64_t ref_mix64(uint64_t x);
/** u = top 24 bits of mix64(seed ^ mix64((row << 32) | i)) * 2^-24. */
float ref_gen_u(uint64_t seed, int32_t row, int32_t i);
/** The documented generator: sums to total, never negative. out [world * n]. */
void ref_gen_seq_lens(uint64_t seed, int32_t world, int32_t n, int64_t total, int32_t *out);
/** The seed document's algorithm as written (only the last absorbs the rounding
 * error), on the same u: may produce a negative last length. */
void ref_gen_seq_lens_seed_original(uint64_t seed, int32_t world, int32_t n, int64_t total,
                                    int32_t *out);

#endif
