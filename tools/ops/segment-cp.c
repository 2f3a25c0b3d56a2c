/* clvarlen-test: segment family, context parallelism (SPEC 2.5): cp_plan, cp_gather
 * and cp_scatter, compared with the split of tests/ref's ref_cp_plan (the one CP
 * oracle, written from SPEC 2.5).
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

/* CP documents (at most 48): lengths below 2W, odd lengths, empty ones.
 * Case 1 (long rows) keeps to a few short documents. */
static int64_t cp_lengths(chk *c, int32_t world, int32_t *len)
{
    if (c->case_i == 0) {
        len[0] = 0;
        return 1;
    }
    int64_t n = chk_rnd(c, 1, c->case_i == 1 ? 4 : c->opt->quick ? 12 : 48);
    int64_t max_len = c->case_i == 1 ? 40 : c->opt->quick ? 300 : 1500;
    for (int64_t i = 0; i < n; i++) {
        double r = chk_unif(c);
        len[i] = (int32_t)(r < 0.1    ? 0
                           : r < 0.35 ? chk_rnd(c, 1, 2 * world)
                                      : chk_rnd(c, 1, max_len));
    }
    return n;
}

int check_cp_plan(clvarlen_context *dev, clvarlen_context *cpu, const ct_options *opt,
                  ct_row *row)
{
    chk c;
    chk_begin(&c, dev, cpu, opt, row, "cp_plan");
    for (; c.case_i < chk_n_cases(&c) && !c.stop; c.case_i++) {
        if (!chk_case_begin(&c))
            continue;
        int32_t world = (int32_t)chk_rnd(&c, 1, 8);
        int32_t rank = (int32_t)chk_rnd(&c, 0, world - 1);
        int32_t *len = chk_alloc(&c, 48 * 4), *cu = chk_alloc(&c, 49 * 4);
        if (c.oom)
            goto next;
        int64_t n = cp_lengths(&c, world, len);
        tu_cu_from_lengths(len, n, cu);
        int64_t total = cu[n];
        int64_t capacity = total + chk_rnd(&c, 0, 3);
        size_t cu_bytes = (size_t)(n + 1) * 4, cap_bytes = (size_t)capacity * 4;
        int halves = c.case_i % 3 != 1, maps = c.case_i % 3 != 2;
        clvarlen_cp_plan_out pd, pc, w; /* w: the oracle's plan */
        memset(&pd, 0, sizeof pd);
        memset(&pc, 0, sizeof pc);
        memset(&w, 0, sizeof w);
        pd.local_cu_seqlens = chk_alloc(&c, cu_bytes);
        pc.local_cu_seqlens = chk_alloc(&c, cu_bytes);
        w.local_cu_seqlens = chk_alloc(&c, cu_bytes);
        pd.head_cu = chk_alloc(&c, cu_bytes);
        pc.head_cu = chk_alloc(&c, cu_bytes);
        w.head_cu = chk_alloc(&c, cu_bytes);
        pd.tail_cu = chk_alloc(&c, cu_bytes);
        pc.tail_cu = chk_alloc(&c, cu_bytes);
        w.tail_cu = chk_alloc(&c, cu_bytes);
        pd.global_index = chk_alloc(&c, cap_bytes);
        pc.global_index = chk_alloc(&c, cap_bytes);
        w.global_index = chk_alloc(&c, cap_bytes);
        pd.position = chk_alloc(&c, cap_bytes);
        pc.position = chk_alloc(&c, cap_bytes);
        w.position = chk_alloc(&c, cap_bytes);
        if (c.oom)
            goto next;
        w.local_tokens = ref_cp_plan(cu, n, world, rank, w.local_cu_seqlens, w.head_cu,
                                     w.tail_cu, w.global_index, w.position, &w.max_head,
                                     &w.max_tail);
        if (!halves)
            pd.head_cu = pd.tail_cu = pc.head_cu = pc.tail_cu = NULL;
        if (!maps)
            pd.global_index = pd.position = pc.global_index = pc.position = NULL;
        pd.capacity = pc.capacity = capacity;
        clvarlen_status sd;
#if CLVARLEN_HAVE_OPENCL
        if (c.cl_case) {
            size_t o_cu, o_l, o_h, o_t, o_g, o_p, o_n;
            cl_event ev = NULL;
            int64_t *lt_d = chk_alloc(&c, 8);
            cl_mem m_cu = chk_dev_in(&c, cu, cu_bytes, &o_cu);
            cl_mem m_l = chk_dev_out(&c, pd.local_cu_seqlens, cu_bytes, &o_l);
            cl_mem m_h = chk_dev_out(&c, pd.head_cu, cu_bytes, &o_h);
            cl_mem m_t = chk_dev_out(&c, pd.tail_cu, cu_bytes, &o_t);
            cl_mem m_g = chk_dev_out(&c, pd.global_index, cap_bytes, &o_g);
            cl_mem m_p = chk_dev_out(&c, pd.position, cap_bytes, &o_p);
            cl_mem m_n = chk_dev_out(&c, lt_d, 8, &o_n);
            sd = c.dm_failed ? CLVARLEN_SUCCESS
                             : clvarlen_cl_cp_plan(dev, m_cu, o_cu, n, world, rank, m_l, o_l, m_h,
                                                   o_h, m_t, o_t, capacity, m_g, o_g, m_p, o_p,
                                                   m_n, o_n, 0, NULL, &ev);
            sd = chk_dev_finish(&c, sd, ev);
            if (lt_d)
                pd.local_tokens = *lt_d;
        } else
#endif
            sd = clvarlen_cp_plan(dev, cu, n, world, rank, &pd);
        if (!chk_call(&c, 0, sd) ||
            !chk_call(&c, 1, clvarlen_cp_plan(cpu, cu, n, world, rank, &pc)))
            goto next;
        chk_same(&c, "local_cu_seqlens", pd.local_cu_seqlens, pc.local_cu_seqlens,
                 CLVARLEN_DTYPE_I32, (size_t)n + 1);
        chk_same(&c, "local_cu_seqlens (cpu vs SPEC)", pc.local_cu_seqlens, w.local_cu_seqlens,
                 CLVARLEN_DTYPE_I32, (size_t)n + 1);
        if (halves) {
            chk_same(&c, "head_cu", pd.head_cu, pc.head_cu, CLVARLEN_DTYPE_I32, (size_t)n + 1);
            chk_same(&c, "tail_cu", pd.tail_cu, pc.tail_cu, CLVARLEN_DTYPE_I32, (size_t)n + 1);
            chk_same(&c, "head_cu (cpu vs SPEC)", pc.head_cu, w.head_cu, CLVARLEN_DTYPE_I32,
                     (size_t)n + 1);
            chk_same(&c, "tail_cu (cpu vs SPEC)", pc.tail_cu, w.tail_cu, CLVARLEN_DTYPE_I32,
                     (size_t)n + 1);
        }
        if (maps) {
            chk_same(&c, "global_index", pd.global_index, pc.global_index, CLVARLEN_DTYPE_I32,
                     (size_t)capacity);
            chk_same(&c, "position", pd.position, pc.position, CLVARLEN_DTYPE_I32,
                     (size_t)capacity);
            chk_same(&c, "global_index (cpu vs SPEC)", pc.global_index, w.global_index,
                     CLVARLEN_DTYPE_I32, (size_t)capacity);
            chk_same(&c, "position (cpu vs SPEC)", pc.position, w.position, CLVARLEN_DTYPE_I32,
                     (size_t)capacity);
        }
        if (c.cl_case) /* the device plan has no max_head / max_tail */
            pd.max_head = pc.max_head, pd.max_tail = pc.max_tail;
        if (pd.local_tokens != pc.local_tokens || pd.max_head != pc.max_head ||
            pd.max_tail != pc.max_tail)
            chk_fail(&c, "local_tokens/max_head/max_tail: device %lld/%d/%d, cpu %lld/%d/%d",
                     (long long)pd.local_tokens, pd.max_head, pd.max_tail,
                     (long long)pc.local_tokens, pc.max_head, pc.max_tail);
        if (pc.local_tokens != w.local_tokens || pc.max_head != w.max_head ||
            pc.max_tail != w.max_tail)
            chk_fail(&c, "local_tokens/max_head/max_tail: cpu %lld/%d/%d, SPEC %lld/%d/%d",
                     (long long)pc.local_tokens, pc.max_head, pc.max_tail,
                     (long long)w.local_tokens, w.max_head, w.max_tail);
    next:
        chk_end_case(&c);
    }
    return chk_finish(&c);
}

static int check_cp_rows(clvarlen_context *dev, clvarlen_context *cpu, const ct_options *opt,
                         ct_row *row, int scatter)
{
    chk c;
    chk_begin(&c, dev, cpu, opt, row, scatter ? "cp_scatter" : "cp_gather");
    for (; c.case_i < chk_n_cases(&c) && !c.stop; c.case_i++) {
        if (!chk_case_begin(&c))
            continue;
        int32_t world = (int32_t)chk_rnd(&c, 1, 8);
        int32_t rank = (int32_t)chk_rnd(&c, 0, world - 1);
        /* cp_scatter: 0 overwrite, 1 overwrite + zero rest, 2 accumulate, 3 accumulate + zero rest. */
        int variant = c.case_i % 4;
        int accumulate = scatter && variant >= 2;
        clvarlen_dtype dtype = pick_dtype(&c, !accumulate);
        size_t es = clvarlen_dtype_size(dtype);
        int64_t row_elems = pick_row_elems(&c);
        int32_t *len = chk_alloc(&c, 48 * 4), *cu = chk_alloc(&c, 49 * 4);
        if (c.oom)
            goto next;
        int64_t n = cp_lengths(&c, world, len);
        tu_cu_from_lengths(len, n, cu);
        int64_t total = cu[n];
        int64_t local = ref_cp_local_tokens(cu, n, world, rank);
        int64_t capacity = local + (scatter ? 0 : chk_rnd(&c, 0, 3));
        int64_t gstride = pick_stride(&c, row_elems, 0), lstride = pick_stride(&c, row_elems, 1);
        size_t g_elems = (size_t)(total * eff(gstride, row_elems));
        size_t l_elems = (size_t)(capacity * eff(lstride, row_elems));
        int32_t *gi = chk_alloc(&c, (size_t)local * 4);
        void *global = chk_alloc(&c, g_elems * es), *local_rows = chk_alloc(&c, l_elems * es);
        void *out_d = chk_alloc(&c, (scatter ? g_elems : l_elems) * es);
        void *out_c = chk_alloc(&c, (scatter ? g_elems : l_elems) * es);
        void *out_w = chk_alloc(&c, (scatter ? g_elems : l_elems) * es);
        if (c.oom)
            goto next;
        ref_cp_plan(cu, n, world, rank, NULL, NULL, NULL, gi, NULL, NULL, NULL);
        size_t row_bytes = (size_t)row_elems * es;
        if (!scatter) {
            fill_data(&c, global, dtype, g_elems);
            for (int64_t i = 0; i < local; i++)
                memcpy((char *)out_w + (size_t)(i * eff(lstride, row_elems)) * es,
                       (char *)global + (size_t)(gi[i] * eff(gstride, row_elems)) * es, row_bytes);
            clvarlen_status sd;
#if CLVARLEN_HAVE_OPENCL
            if (c.cl_case) {
                size_t o_g, o_cu, o_l;
                cl_event ev = NULL;
                cl_mem m_g = chk_dev_in(&c, global, g_elems * es, &o_g);
                cl_mem m_cu = chk_dev_in(&c, cu, (size_t)(n + 1) * 4, &o_cu);
                cl_mem m_l = chk_dev_out(&c, out_d, l_elems * es, &o_l);
                sd = c.dm_failed ? CLVARLEN_SUCCESS
                                 : clvarlen_cl_cp_gather(dev, dtype, row_elems, m_g, o_g, gstride,
                                                         total, m_cu, o_cu, n, world, rank, m_l,
                                                         o_l, lstride, capacity, 0, NULL, &ev);
                sd = chk_dev_finish(&c, sd, ev);
            } else
#endif
                sd = clvarlen_cp_gather(dev, dtype, row_elems, global, gstride, cu, n, world,
                                        rank, out_d, lstride, capacity);
            if (!chk_call(&c, 0, sd) ||
                !chk_call(&c, 1,
                          clvarlen_cp_gather(cpu, dtype, row_elems, global, gstride, cu, n, world,
                                             rank, out_c, lstride, capacity)))
                goto next;
            chk_same(&c, "local rows", out_d, out_c, CLVARLEN_DTYPE_U8, l_elems * es);
            chk_same(&c, "local rows (cpu vs SPEC)", out_c, out_w, CLVARLEN_DTYPE_U8,
                     l_elems * es);
        } else {
            fill_data(&c, local_rows, dtype, l_elems);
            fill_data(&c, out_d, dtype, g_elems);
            memcpy(out_c, out_d, g_elems * es);
            clvarlen_scatter_mode mode = accumulate ? CLVARLEN_SCATTER_ACCUMULATE
                                                    : CLVARLEN_SCATTER_OVERWRITE;
            unsigned flags = variant % 2 ? CLVARLEN_SCATTER_ZERO_REST : 0u;
            clvarlen_status sd;
#if CLVARLEN_HAVE_OPENCL
            if (c.cl_case) {
                size_t o_l, o_cu, o_g;
                cl_event ev = NULL;
                cl_mem m_l = chk_dev_in(&c, local_rows, l_elems * es, &o_l);
                cl_mem m_cu = chk_dev_in(&c, cu, (size_t)(n + 1) * 4, &o_cu);
                cl_mem m_g = chk_dev_out(&c, out_d, g_elems * es, &o_g);
                sd = c.dm_failed ? CLVARLEN_SUCCESS
                                 : clvarlen_cl_cp_scatter(dev, dtype, row_elems, m_l, o_l, lstride,
                                                          capacity, m_cu, o_cu, n, world, rank,
                                                          m_g, o_g, gstride, total, mode, flags, 0,
                                                          NULL, &ev);
                sd = chk_dev_finish(&c, sd, ev);
            } else
#endif
                sd = clvarlen_cp_scatter(dev, dtype, row_elems, local_rows, lstride, cu, n, world,
                                         rank, out_d, gstride, mode, flags);
            if (!chk_call(&c, 0, sd) ||
                !chk_call(&c, 1,
                          clvarlen_cp_scatter(cpu, dtype, row_elems, local_rows, lstride, cu, n,
                                              world, rank, out_c, gstride, mode, flags)))
                goto next;
            /* Each global row receives at most one local row: bitwise even when accumulating. */
            chk_same(&c, "global rows", out_d, out_c, dtype, g_elems);
            if (!accumulate) {
                memcpy(out_w, out_c, g_elems * es);
                for (int64_t i = 0; i < local; i++)
                    memcpy((char *)out_w + (size_t)(gi[i] * eff(gstride, row_elems)) * es,
                           (char *)local_rows + (size_t)(i * eff(lstride, row_elems)) * es,
                           row_bytes);
                chk_same(&c, "global rows (cpu vs SPEC)", out_c, out_w, CLVARLEN_DTYPE_U8,
                         g_elems * es);
            }
        }
    next:
        chk_end_case(&c);
    }
    return chk_finish(&c);
}

int check_cp_gather(clvarlen_context *dev, clvarlen_context *cpu, const ct_options *opt,
                    ct_row *row)
{
    return check_cp_rows(dev, cpu, opt, row, 0);
}

int check_cp_scatter(clvarlen_context *dev, clvarlen_context *cpu, const ct_options *opt,
                     ct_row *row)
{
    return check_cp_rows(dev, cpu, opt, row, 1);
}
