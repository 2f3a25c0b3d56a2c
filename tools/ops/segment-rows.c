/* clvarlen-test: segment family, rows by index: gather and scatter (overwrite,
 * accumulate, zero the rest).
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <clvarlen/clvarlen.h>
#if CLVARLEN_HAVE_OPENCL
#  include <clvarlen/clvarlen-cl.h>
#endif

#include "ops.h"
#include "segment.h"

int check_gather(clvarlen_context *dev, clvarlen_context *cpu, const ct_options *opt,
                 ct_row *row)
{
    chk c;
    chk_begin(&c, dev, cpu, opt, row, "gather");
    for (; c.case_i < chk_n_cases(&c) && !c.stop; c.case_i++) {
        if (!chk_case_begin(&c))
            continue;
        clvarlen_dtype dtype = pick_dtype(&c, 1);
        size_t es = clvarlen_dtype_size(dtype);
        int64_t row_elems = pick_row_elems(&c);
        int64_t src_rows = chk_rnd(&c, 1, c.case_i == 1 ? 60 : (opt->quick ? 200 : 3000));
        int64_t n_index = c.case_i == 0 ? 0 : chk_rnd(&c, 1, c.case_i == 1 ? 80 : (opt->quick ? 300 : 4000));
        int64_t sstride = pick_stride(&c, row_elems, 0), dstride = pick_stride(&c, row_elems, 1);
        size_t src_elems = (size_t)(src_rows * eff(sstride, row_elems));
        size_t dst_bytes = (size_t)(n_index * eff(dstride, row_elems)) * es;
        void *src = chk_alloc(&c, src_elems * es);
        int32_t *index = chk_alloc(&c, (size_t)n_index * 4);
        void *dst_d = chk_alloc(&c, dst_bytes), *dst_c = chk_alloc(&c, dst_bytes);
        if (c.oom)
            goto next;
        fill_data(&c, src, dtype, src_elems);
        for (int64_t m = 0; m < n_index; m++)
            index[m] = chk_unif(&c) < 0.05 ? -1 : (int32_t)chk_rnd(&c, 0, src_rows - 1);
        clvarlen_status sd;
#if CLVARLEN_HAVE_OPENCL
        if (c.cl_case) {
            size_t o_src, o_idx, o_dst;
            cl_event ev = NULL;
            cl_mem m_src = chk_dev_in(&c, src, src_elems * es, &o_src);
            cl_mem m_idx = chk_dev_in(&c, index, (size_t)n_index * 4, &o_idx);
            cl_mem m_dst = chk_dev_out(&c, dst_d, dst_bytes, &o_dst);
            sd = c.dm_failed ? CLVARLEN_SUCCESS
                             : clvarlen_cl_gather_rows(dev, dtype, row_elems, m_src, o_src,
                                                       src_rows, sstride, m_idx, o_idx, n_index,
                                                       m_dst, o_dst, dstride, 0, NULL, &ev);
            sd = chk_dev_finish(&c, sd, ev);
        } else
#endif
            sd = clvarlen_gather_rows(dev, dtype, row_elems, src, src_rows, sstride, index,
                                      n_index, dst_d, dstride);
        if (!chk_call(&c, 0, sd) ||
            !chk_call(&c, 1,
                      clvarlen_gather_rows(cpu, dtype, row_elems, src, src_rows, sstride, index,
                                           n_index, dst_c, dstride)))
            goto next;
        chk_same(&c, "dst", dst_d, dst_c, CLVARLEN_DTYPE_U8, dst_bytes);
    next:
        chk_end_case(&c);
    }
    return chk_finish(&c);
}

/* The three scatter rows: 0 overwrite, 1 accumulate, 2 zero-rest. */
enum { SC_OVERWRITE, SC_ACCUMULATE, SC_ZERO_REST };

static int check_scatter_common(clvarlen_context *dev, clvarlen_context *cpu,
                                const ct_options *opt, ct_row *row, int variant)
{
    static const char *const names[] = {"scatter_overwrite", "scatter_accumulate",
                                         "scatter_zero_rest"};
    chk c;
    chk_begin(&c, dev, cpu, opt, row, names[variant]);
    for (; c.case_i < chk_n_cases(&c) && !c.stop; c.case_i++) {
        if (!chk_case_begin(&c))
            continue;
        int accumulate = variant == SC_ACCUMULATE || (variant == SC_ZERO_REST && c.case_i % 2);
        /* Accumulate with distinct indices is one add per element: bitwise.
         * Repeated indices may be summed in another order: SPEC 4 tolerance. */
        int unique = !accumulate || c.case_i % 3 == 0;
        clvarlen_dtype dtype = pick_dtype(&c, !accumulate);
        size_t es = clvarlen_dtype_size(dtype);
        int64_t row_elems = pick_row_elems(&c);
        int64_t dst_rows = chk_rnd(&c, 1, c.case_i == 1 ? 60 : (opt->quick ? 200 : 3000));
        int64_t n_index;
        if (c.case_i == 0)
            n_index = 0;
        else if (unique)
            n_index = chk_rnd(&c, 1, dst_rows);
        else
            n_index = chk_rnd(&c, 1, c.case_i == 1 ? 120 : (opt->quick ? 400 : 5000));
        int64_t sstride = pick_stride(&c, row_elems, 0), dstride = pick_stride(&c, row_elems, 1);
        size_t src_elems = (size_t)(n_index * eff(sstride, row_elems));
        size_t dst_elems = (size_t)(dst_rows * eff(dstride, row_elems));
        void *src = chk_alloc(&c, src_elems * es);
        int32_t *index = chk_alloc(&c, (size_t)n_index * 4);
        int32_t *perm = chk_alloc(&c, (size_t)dst_rows * 4);
        void *dst_d = chk_alloc(&c, dst_elems * es), *dst_c = chk_alloc(&c, dst_elems * es);
        if (c.oom)
            goto next;
        fill_data(&c, src, dtype, src_elems);
        fill_data(&c, dst_d, dtype, dst_elems);
        memcpy(dst_c, dst_d, dst_elems * es);
        if (unique) {
            for (int64_t i = 0; i < dst_rows; i++)
                perm[i] = (int32_t)i;
            for (int64_t i = dst_rows - 1; i > 0; i--) {
                int64_t j = chk_rnd(&c, 0, i);
                int32_t t = perm[i];
                perm[i] = perm[j];
                perm[j] = t;
            }
            for (int64_t m = 0; m < n_index; m++)
                index[m] = chk_unif(&c) < 0.05 ? -1 : perm[m];
        } else {
            for (int64_t m = 0; m < n_index; m++)
                index[m] = chk_unif(&c) < 0.05 ? -1 : (int32_t)chk_rnd(&c, 0, dst_rows - 1);
        }
        clvarlen_scatter_mode mode = accumulate ? CLVARLEN_SCATTER_ACCUMULATE
                                                : CLVARLEN_SCATTER_OVERWRITE;
        unsigned flags = variant == SC_ZERO_REST ? CLVARLEN_SCATTER_ZERO_REST : 0u;
        if (unique && c.case_i % 2 == 0)
            flags |= CLVARLEN_SCATTER_UNIQUE_INDICES;
        clvarlen_status sd;
#if CLVARLEN_HAVE_OPENCL
        if (c.cl_case) {
            size_t o_src, o_idx, o_dst;
            cl_event ev = NULL;
            cl_mem m_src = chk_dev_in(&c, src, src_elems * es, &o_src);
            cl_mem m_idx = chk_dev_in(&c, index, (size_t)n_index * 4, &o_idx);
            cl_mem m_dst = chk_dev_out(&c, dst_d, dst_elems * es, &o_dst);
            sd = c.dm_failed ? CLVARLEN_SUCCESS
                             : clvarlen_cl_scatter_rows(dev, dtype, row_elems, m_src, o_src,
                                                        sstride, m_idx, o_idx, n_index, m_dst,
                                                        o_dst, dst_rows, dstride, mode, flags, 0,
                                                        NULL, &ev);
            sd = chk_dev_finish(&c, sd, ev);
        } else
#endif
            sd = clvarlen_scatter_rows(dev, dtype, row_elems, src, sstride, index, n_index, dst_d,
                                       dst_rows, dstride, mode, flags);
        if (!chk_call(&c, 0, sd) ||
            !chk_call(&c, 1,
                      clvarlen_scatter_rows(cpu, dtype, row_elems, src, sstride, index, n_index,
                                            dst_c, dst_rows, dstride, mode, flags)))
            goto next;
        if (unique || !is_float(dtype))
            chk_same(&c, "dst", dst_d, dst_c, dtype, dst_elems);
        else
            chk_close(&c, "dst", dst_d, dst_c, dtype, dst_elems, tu_tolerance(dtype));
    next:
        chk_end_case(&c);
    }
    return chk_finish(&c);
}

int check_scatter_overwrite(clvarlen_context *dev, clvarlen_context *cpu,
                            const ct_options *opt, ct_row *row)
{
    return check_scatter_common(dev, cpu, opt, row, SC_OVERWRITE);
}

int check_scatter_accumulate(clvarlen_context *dev, clvarlen_context *cpu,
                             const ct_options *opt, ct_row *row)
{
    return check_scatter_common(dev, cpu, opt, row, SC_ACCUMULATE);
}

int check_scatter_zero_rest(clvarlen_context *dev, clvarlen_context *cpu,
                            const ct_options *opt, ct_row *row)
{
    return check_scatter_common(dev, cpu, opt, row, SC_ZERO_REST);
}

/* seqlens_expand: draft = per-sequence q in [0, 4], else a uniform q (target verify). */
