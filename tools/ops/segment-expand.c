/* clvarlen-test: segment family, seqlens_expand for target verify and draft extend.
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

static int check_expand_common(clvarlen_context *dev, clvarlen_context *cpu,
                               const ct_options *opt, ct_row *row, int draft)
{
    chk c;
    chk_begin(&c, dev, cpu, opt, row, draft ? "seqlens_expand_draft" : "seqlens_expand_verify");
    for (; c.case_i < chk_n_cases(&c) && !c.stop; c.case_i++) {
        if (!chk_case_begin(&c))
            continue;
        int64_t n = c.case_i == 0 ? 1 : chk_rnd(&c, 1, opt->quick ? 64 : 300);
        int32_t uniform_q = draft ? 0 : (int32_t)chk_rnd(&c, 1, 8);
        int32_t *kv = chk_alloc(&c, (size_t)n * 4), *q = chk_alloc(&c, (size_t)n * 4);
        if (c.oom)
            goto next;
        int64_t total = 0;
        for (int64_t s = 0; s < n; s++) {
            q[s] = draft ? (int32_t)chk_rnd(&c, 0, 4) : uniform_q;
            /* Some KV lengths shorter than q exercise the clamp at 0. */
            kv[s] = (int32_t)(chk_unif(&c) < 0.1 ? chk_rnd(&c, 0, q[s]) : chk_rnd(&c, q[s], 20000));
            total += q[s];
        }
        int with_pages = c.case_i % 3 != 0;
        int64_t page_cols = with_pages ? chk_rnd(&c, 1, opt->quick ? 64 : 1100) : 0;
        int64_t page_stride = page_cols + (c.case_i % 2 ? chk_rnd(&c, 0, 9) : 0);
        int64_t col_limit = c.case_i % 4 == 1 ? 0 : chk_rnd(&c, 1, page_cols > 0 ? page_cols : 1);
        if (!with_pages)
            col_limit = 0;
        int64_t out_cols = col_limit ? col_limit : page_cols;
        int64_t out_stride = out_cols + (c.case_i % 2 ? chk_rnd(&c, 0, 5) : 0);
        int too_small = c.case_i == chk_n_cases(&c) - 1 && total > 0;
        int64_t capacity = too_small ? total - 1 : total + chk_rnd(&c, 0, 3);
        size_t page_out_bytes = (size_t)(capacity * out_stride) * 4;
        int32_t *pages = chk_alloc(&c, (size_t)(n * page_stride) * 4);
        int32_t *se_d = chk_alloc(&c, (size_t)capacity * 4), *se_c = chk_alloc(&c, (size_t)capacity * 4);
        int32_t *se_w = chk_alloc(&c, (size_t)capacity * 4);
        int32_t *po_d = chk_alloc(&c, page_out_bytes), *po_c = chk_alloc(&c, page_out_bytes);
        int32_t *po_w = chk_alloc(&c, page_out_bytes);
        int64_t *tot_d = chk_alloc(&c, 8), *tot_c = chk_alloc(&c, 8);
        if (c.oom)
            goto next;
        for (int64_t i = 0; i < n * page_stride; i++)
            pages[i] = (int32_t)chk_rnd(&c, 0, 1000000);
        const int32_t *q_arg = draft ? q : NULL;
        const int32_t *pt = with_pages ? pages : NULL;
        int no_total = c.case_i % 5 == 4;
        clvarlen_status sd = CLVARLEN_SUCCESS;
        if (too_small)
            c.cl_case = 0; /* on device an overflow is reported through the total only */
        if (c.cl_case) {
#if CLVARLEN_HAVE_OPENCL
            size_t o_kv, o_q, o_pt, o_se, o_po, o_t;
            cl_event ev = NULL;
            cl_mem m_kv = chk_dev_in(&c, kv, (size_t)n * 4, &o_kv);
            cl_mem m_q = chk_dev_in(&c, q_arg, (size_t)n * 4, &o_q);
            cl_mem m_pt = chk_dev_in(&c, pt, (size_t)(n * page_stride) * 4, &o_pt);
            cl_mem m_se = chk_dev_out(&c, se_d, (size_t)capacity * 4, &o_se);
            cl_mem m_po = chk_dev_out(&c, with_pages ? po_d : NULL, page_out_bytes, &o_po);
            cl_mem m_t = chk_dev_out(&c, no_total ? NULL : tot_d, 8, &o_t);
            sd = c.dm_failed ? CLVARLEN_SUCCESS
                             : clvarlen_cl_seqlens_expand(dev, m_kv, o_kv, m_q, o_q, uniform_q, n,
                                                          m_pt, o_pt, page_cols, page_stride,
                                                          col_limit, capacity, m_se, o_se, m_po,
                                                          o_po, out_stride, m_t, o_t, 0, NULL,
                                                          &ev);
            sd = chk_dev_finish(&c, sd, ev);
#endif
        } else {
            sd = clvarlen_seqlens_expand(dev, kv, q_arg, uniform_q, n, pt, page_cols, page_stride,
                                         col_limit, capacity, se_d, with_pages ? po_d : NULL,
                                         out_stride, no_total ? NULL : tot_d);
        }
        clvarlen_status sc = clvarlen_seqlens_expand(
            cpu, kv, q_arg, uniform_q, n, pt, page_cols, page_stride, col_limit, capacity, se_c,
            with_pages ? po_c : NULL, out_stride, no_total ? NULL : tot_c);
        if (too_small) {
            chk_expect(&c, 0, sd, CLVARLEN_ERROR_BUFFER_TOO_SMALL);
            chk_expect(&c, 1, sc, CLVARLEN_ERROR_BUFFER_TOO_SMALL);
            chk_untouched(&c, "device seqlens_expanded", se_d, (size_t)capacity * 4);
            chk_untouched(&c, "device page table", po_d, page_out_bytes);
            chk_untouched(&c, "cpu seqlens_expanded", se_c, (size_t)capacity * 4);
            goto next;
        }
        if (!chk_call(&c, 0, sd) || !chk_call(&c, 1, sc))
            goto next;
        /* SPEC 2.4 on the side: rows kept past the total and gaps stay unwritten. */
        int64_t r = 0;
        for (int64_t s = 0; s < n; s++) {
            for (int32_t j = 0; j < q[s]; j++, r++) {
                int64_t v = (int64_t)kv[s] - q[s] + 1 + j;
                se_w[r] = (int32_t)(v < 0 ? 0 : v);
                if (with_pages)
                    memcpy(po_w + r * out_stride, pages + s * page_stride, (size_t)out_cols * 4);
            }
        }
        chk_same(&c, "seqlens_expanded", se_d, se_c, CLVARLEN_DTYPE_I32, (size_t)capacity);
        chk_same(&c, "seqlens_expanded (cpu vs SPEC)", se_c, se_w, CLVARLEN_DTYPE_I32,
                 (size_t)capacity);
        if (with_pages) {
            chk_same(&c, "page table", po_d, po_c, CLVARLEN_DTYPE_I32, page_out_bytes / 4);
            chk_same(&c, "page table (cpu vs SPEC)", po_c, po_w, CLVARLEN_DTYPE_I32,
                     page_out_bytes / 4);
        }
        chk_same(&c, "total", tot_d, tot_c, CLVARLEN_DTYPE_I64, 1);
        if (!no_total && *tot_c != total)
            chk_fail(&c, "cpu total %lld, expected %lld", (long long)*tot_c, (long long)total);
    next:
        chk_end_case(&c);
    }
    return chk_finish(&c);
}

int check_expand_verify(clvarlen_context *dev, clvarlen_context *cpu,
                        const ct_options *opt, ct_row *row)
{
    return check_expand_common(dev, cpu, opt, row, 0);
}

int check_expand_draft(clvarlen_context *dev, clvarlen_context *cpu,
                       const ct_options *opt, ct_row *row)
{
    return check_expand_common(dev, cpu, opt, row, 1);
}
