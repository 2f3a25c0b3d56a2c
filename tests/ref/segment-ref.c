/* Segment-family oracles (see segment-ref.h). Each function follows the
 * sentence of SPEC section 2 it implements, as plainly as possible. */
#include "segment-ref.h"

#include <math.h>
#include <string.h>

/* ------------------------------------------------------------ 2.1 */

void ref_cu_from_lengths(const int32_t *lengths, int64_t n, int32_t *cu)
{
    cu[0] = 0;
    for (int64_t s = 0; s < n; s++)
        cu[s + 1] = cu[s] + lengths[s];
}

void ref_lengths_from_cu(const int32_t *cu, int64_t n, int32_t *lengths)
{
    for (int64_t s = 0; s < n; s++)
        lengths[s] = cu[s + 1] - cu[s];
}

int64_t ref_seq_of_token(const int32_t *cu, int64_t n, int64_t t)
{
    int64_t found = 0;
    for (int64_t s = 0; s < n; s++)
        if (cu[s] <= t)
            found = s; /* the last one wins: empty sequences are skipped */
    return found;
}

void ref_token_maps(const int32_t *cu, int64_t n, const int32_t *offsets, int32_t *seq_id,
                    int32_t *pos)
{
    int64_t total = n > 0 ? cu[n] : 0;
    for (int64_t t = 0; t < total; t++) {
        int64_t s = ref_seq_of_token(cu, n, t);
        if (seq_id)
            seq_id[t] = (int32_t)s;
        if (pos)
            pos[t] = (int32_t)(t - cu[s] + (offsets ? offsets[s] : 0));
    }
}

/* ------------------------------------------------------------ 2.2 */

static const unsigned char *crow(const void *base, size_t pitch, int64_t r)
{
    return (const unsigned char *)base + (size_t)r * pitch;
}

static unsigned char *row(void *base, size_t pitch, int64_t r)
{
    return (unsigned char *)base + (size_t)r * pitch;
}

int64_t ref_pack(size_t row_bytes, const void *padded, size_t padded_pitch, int64_t batch,
                 int64_t max_seqlen, const int32_t *valid_lens, void *packed, int32_t *cu,
                 int64_t *src_index)
{
    int64_t t = 0;
    cu[0] = 0;
    for (int64_t b = 0; b < batch; b++) {
        for (int64_t s = 0; s < valid_lens[b]; s++) {
            memcpy(row(packed, row_bytes, t), crow(padded, padded_pitch, b * max_seqlen + s),
                   row_bytes);
            if (src_index)
                src_index[t] = b * max_seqlen + s;
            t++;
        }
        cu[b + 1] = (int32_t)t;
    }
    return t;
}

int64_t ref_pack_masked(size_t row_bytes, const void *padded, size_t padded_pitch, int64_t batch,
                        int64_t max_seqlen, const uint8_t *mask, void *packed, int32_t *cu,
                        int64_t *src_index)
{
    int64_t t = 0;
    cu[0] = 0;
    for (int64_t b = 0; b < batch; b++) {
        for (int64_t s = 0; s < max_seqlen; s++) {
            if (!mask[b * max_seqlen + s])
                continue;
            memcpy(row(packed, row_bytes, t), crow(padded, padded_pitch, b * max_seqlen + s),
                   row_bytes);
            if (src_index)
                src_index[t] = b * max_seqlen + s;
            t++;
        }
        cu[b + 1] = (int32_t)t;
    }
    return t;
}

void ref_unpack(size_t row_bytes, size_t elem_bytes, const void *packed, size_t packed_pitch,
                int64_t total, const int64_t *src_index, int64_t batch, int64_t max_seqlen,
                const void *pad_value, void *padded, size_t padded_pitch)
{
    for (int64_t r = 0; r < batch * max_seqlen; r++) {
        unsigned char *d = row(padded, padded_pitch, r);
        for (size_t off = 0; off < row_bytes; off += elem_bytes) {
            if (pad_value)
                memcpy(d + off, pad_value, elem_bytes);
            else
                memset(d + off, 0, elem_bytes);
        }
    }
    for (int64_t t = 0; t < total; t++)
        memcpy(row(padded, padded_pitch, src_index[t]), crow(packed, packed_pitch, t), row_bytes);
}

/* ------------------------------------------------------------ 2.3 */

void ref_gather(size_t row_bytes, const void *src, size_t src_pitch, const int32_t *index,
                int64_t n_index, void *dst, size_t dst_pitch)
{
    for (int64_t m = 0; m < n_index; m++) {
        if (index[m] == -1)
            memset(row(dst, dst_pitch, m), 0, row_bytes);
        else
            memcpy(row(dst, dst_pitch, m), crow(src, src_pitch, index[m]), row_bytes);
    }
}

void ref_scatter_overwrite(size_t row_bytes, const void *src, size_t src_pitch,
                           const int32_t *index, int64_t n_index, void *dst, int64_t dst_rows,
                           size_t dst_pitch, int zero_rest)
{
    if (zero_rest)
        for (int64_t r = 0; r < dst_rows; r++) {
            int named = 0;
            for (int64_t m = 0; m < n_index; m++)
                if (index[m] == r)
                    named = 1;
            if (!named)
                memset(row(dst, dst_pitch, r), 0, row_bytes);
        }
    for (int64_t m = 0; m < n_index; m++)
        if (index[m] != -1)
            memcpy(row(dst, dst_pitch, index[m]), crow(src, src_pitch, m), row_bytes);
}

static double elem(const void *p, clvarlen_dtype dtype, int64_t i)
{
    switch (dtype) {
    case CLVARLEN_DTYPE_F32: return ((const float *)p)[i];
    case CLVARLEN_DTYPE_I32: return ((const int32_t *)p)[i];
    case CLVARLEN_DTYPE_F16: {
        uint16_t h = ((const uint16_t *)p)[i];
        int e = (h >> 10) & 31, m = h & 1023;
        double s = (h & 0x8000) ? -1.0 : 1.0;
        if (e == 31)
            return m ? NAN : s * INFINITY;
        return e ? s * ldexp(1024 + m, e - 25) : s * ldexp(m, -24);
    }
    case CLVARLEN_DTYPE_BF16: {
        uint32_t bits = (uint32_t)((const uint16_t *)p)[i] << 16;
        float f;
        memcpy(&f, &bits, sizeof f);
        return f;
    }
    default: return NAN;
    }
}

void ref_scatter_accumulate(clvarlen_dtype dtype, int64_t row_elems, const void *src,
                            int64_t src_stride, const int32_t *index, int64_t n_index,
                            const void *dst_init, int64_t dst_rows, int64_t dst_stride,
                            int zero_rest, double *out)
{
    if (!src_stride)
        src_stride = row_elems;
    if (!dst_stride)
        dst_stride = row_elems;
    for (int64_t r = 0; r < dst_rows; r++) {
        int named = 0;
        for (int64_t m = 0; m < n_index; m++)
            if (index[m] == r)
                named = 1;
        for (int64_t e = 0; e < row_elems; e++)
            out[r * row_elems + e] =
                (zero_rest && !named) ? 0.0 : elem(dst_init, dtype, r * dst_stride + e);
    }
    for (int64_t m = 0; m < n_index; m++) {
        if (index[m] == -1)
            continue;
        for (int64_t e = 0; e < row_elems; e++)
            out[(int64_t)index[m] * row_elems + e] += elem(src, dtype, m * src_stride + e);
    }
}

/* ------------------------------------------------------------ 2.4 */

int64_t ref_seqlens_expand(const int32_t *kv_len, const int32_t *q_len, int32_t uniform_q_len,
                           int64_t n, const int32_t *page_table, int64_t page_cols,
                           int64_t page_stride, int64_t col_limit, int32_t *seqlens_out,
                           int32_t *page_out, int64_t out_stride)
{
    if (!col_limit)
        col_limit = page_cols;
    if (!page_stride)
        page_stride = page_cols;
    if (!out_stride)
        out_stride = col_limit;
    int64_t t = 0;
    for (int64_t s = 0; s < n; s++) {
        int64_t q = q_len ? q_len[s] : uniform_q_len;
        for (int64_t j = 0; j < q; j++) {
            int64_t v = (int64_t)kv_len[s] - q + 1 + j;
            if (seqlens_out)
                seqlens_out[t] = (int32_t)(v < 0 ? 0 : v);
            if (page_table && page_out)
                for (int64_t c = 0; c < col_limit; c++)
                    page_out[t * out_stride + c] = page_table[s * page_stride + c];
            t++;
        }
    }
    return t;
}

/* ------------------------------------------------------------ 2.5 */

void ref_cp_chunk(int64_t L, int32_t world, int32_t c, int64_t *start, int64_t *len)
{
    int64_t C = 2 * (int64_t)world, base = L / C, rem = L % C;
    *start = c * base + (c < rem ? c : rem);
    *len = base + (c < rem ? 1 : 0);
}

int64_t ref_cp_local_tokens(const int32_t *cu, int64_t n, int32_t world, int32_t rank)
{
    return ref_cp_plan(cu, n, world, rank, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
}

int64_t ref_cp_plan(const int32_t *cu, int64_t n, int32_t world, int32_t rank, int32_t *local_cu,
                    int32_t *head_cu, int32_t *tail_cu, int32_t *global_index, int32_t *position,
                    int32_t *max_head, int32_t *max_tail)
{
    int64_t t = 0, hsum = 0, tsum = 0, mh = 0, mt = 0;
    int32_t tail_chunk = 2 * world - 1 - rank;
    if (local_cu)
        local_cu[0] = 0;
    if (head_cu)
        head_cu[0] = 0;
    if (tail_cu)
        tail_cu[0] = 0;
    for (int64_t s = 0; s < n; s++) {
        int64_t L = cu[s + 1] - cu[s];
        int64_t hs, hl, ts, tl;
        ref_cp_chunk(L, world, rank, &hs, &hl);
        ref_cp_chunk(L, world, tail_chunk, &ts, &tl);
        for (int64_t i = 0; i < hl; i++, t++) {
            if (global_index)
                global_index[t] = (int32_t)(cu[s] + hs + i);
            if (position)
                position[t] = (int32_t)(hs + i);
        }
        for (int64_t i = 0; i < tl; i++, t++) {
            if (global_index)
                global_index[t] = (int32_t)(cu[s] + ts + i);
            if (position)
                position[t] = (int32_t)(ts + i);
        }
        hsum += hl;
        tsum += tl;
        if (hl > mh)
            mh = hl;
        if (tl > mt)
            mt = tl;
        if (local_cu)
            local_cu[s + 1] = (int32_t)t;
        if (head_cu)
            head_cu[s + 1] = (int32_t)hsum;
        if (tail_cu)
            tail_cu[s + 1] = (int32_t)tsum;
    }
    if (max_head)
        *max_head = (int32_t)mh;
    if (max_tail)
        *max_tail = (int32_t)mt;
    return t;
}

/* ------------------------------------------------------------ 2.6 */

uint64_t ref_mix64(uint64_t x)
{
    uint64_t z = x + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

float ref_gen_u(uint64_t seed, int32_t row_, int32_t i)
{
    uint64_t key = ((uint64_t)(uint32_t)row_ << 32) | (uint32_t)i;
    uint64_t bits = ref_mix64(seed ^ ref_mix64(key)) >> 40; /* top 24 bits */
    return (float)bits * 0x1.0p-24f;
}

/* The float steps both versions share: f32 throughout, the sum taken in index
 * order, then round half to even. */
static void rounded_lengths(uint64_t seed, int32_t r, int32_t n, int64_t total, int32_t *len)
{
    float floor_ratio = 0.25f / (float)n;
    float sum = 0.0f;
    for (int32_t i = 0; i < n; i++)
        sum += ref_gen_u(seed, r, i) + floor_ratio;
    for (int32_t i = 0; i < n; i++) {
        float ratio = (ref_gen_u(seed, r, i) + floor_ratio) / sum;
        len[i] = (int32_t)nearbyintf(ratio * (float)total);
    }
}

void ref_gen_seq_lens(uint64_t seed, int32_t world, int32_t n, int64_t total, int32_t *out)
{
    for (int32_t r = 0; r < world; r++) {
        int32_t *len = out + (int64_t)r * n;
        rounded_lengths(seed, r, n, total, len);
        int64_t sum = 0;
        for (int32_t i = 0; i < n; i++)
            sum += len[i];
        /* The last absorbs the error; what it cannot give is taken from the ones before it. */
        int64_t excess = sum - total;
        for (int32_t i = n - 1; i >= 0 && excess != 0; i--) {
            if (excess < 0) { /* short: the last one takes the rest */
                len[i] = (int32_t)(len[i] - excess);
                excess = 0;
                break;
            }
            int64_t take = excess < len[i] ? excess : len[i];
            len[i] = (int32_t)(len[i] - take);
            excess -= take;
        }
    }
}

void ref_gen_seq_lens_seed_original(uint64_t seed, int32_t world, int32_t n, int64_t total,
                                    int32_t *out)
{
    for (int32_t r = 0; r < world; r++) {
        int32_t *len = out + (int64_t)r * n;
        rounded_lengths(seed, r, n, total, len);
        int64_t sum = 0;
        for (int32_t i = 0; i < n; i++)
            sum += len[i];
        len[n - 1] = (int32_t)(len[n - 1] - (sum - total)); /* seq_len[:, -1] -= error */
    }
}
