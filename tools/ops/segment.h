/* clvarlen-test: what the segment family's files (SPEC section 2) share:
 * case generators over the check state of ct-util.h. The CP oracle is tests/ref's
 * ref_cp_plan (segment-ref.h).
 */
#ifndef CLVARLEN_TEST_SEGMENT_H
#define CLVARLEN_TEST_SEGMENT_H

#include "ct-util.h"
#include "segment-ref.h"

static inline clvarlen_dtype pick_dtype(chk *c, int copies)
{
    /* Copies take any element type; accumulation only f32, f16, bf16, i32. */
    static const clvarlen_dtype any[] = {CLVARLEN_DTYPE_F32, CLVARLEN_DTYPE_F16,
                                         CLVARLEN_DTYPE_BF16, CLVARLEN_DTYPE_U8,
                                         CLVARLEN_DTYPE_I32};
    static const clvarlen_dtype acc[] = {CLVARLEN_DTYPE_F32, CLVARLEN_DTYPE_F16,
                                         CLVARLEN_DTYPE_BF16, CLVARLEN_DTYPE_I32};
    return copies ? any[chk_rnd(c, 0, 4)] : acc[chk_rnd(c, 0, 3)];
}

static inline int is_float(clvarlen_dtype d)
{
    return d == CLVARLEN_DTYPE_F32 || d == CLVARLEN_DTYPE_F16 || d == CLVARLEN_DTYPE_BF16;
}

/* Row length: mostly short; case 1 is a long row (16 KiB of f16 and more) for
 * the kernels' row-tiling paths. Not a multiple of any tile. */
static inline int64_t pick_row_elems(chk *c)
{
    if (c->case_i == 1)
        return chk_rnd(c, 8192, 8192 + 37);
    return chk_rnd(c, 1, c->opt->quick ? 64 : 300);
}

/* A token stride: 0 (contiguous) or the row plus a gap. */
static inline int64_t pick_stride(chk *c, int64_t row_elems, int which)
{
    switch ((c->case_i + which) % 3) {
    case 0: return 0;
    case 1: return row_elems;
    default: return row_elems + chk_rnd(c, 1, 7);
    }
}

static inline int64_t eff(int64_t stride, int64_t row_elems)
{
    return stride ? stride : row_elems;
}

static inline void fill_data(chk *c, void *p, clvarlen_dtype dtype, size_t n)
{
    ct_fill(&c->rng, p, dtype, n, dtype == CLVARLEN_DTYPE_I32 ? 1000.0 : 1.0);
}

/* Lengths for a case: case 0 is an all-empty batch (T = 0). */
static inline int64_t case_lengths(chk *c, int64_t max_n, int64_t max_len, int32_t *len)
{
    if (c->case_i == 0) {
        int64_t n = chk_rnd(c, 1, max_n < 5 ? max_n : 5);
        for (int64_t i = 0; i < n; i++)
            len[i] = 0;
        return n;
    }
    return ct_random_lengths(&c->rng, max_n, max_len, (int64_t)1 << 28, len);
}

#endif
