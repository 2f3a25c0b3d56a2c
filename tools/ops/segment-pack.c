/* clvarlen-test: segment family, padded <-> packed: pack, pack_masked and unpack.
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

static int check_pack_common(clvarlen_context *dev, clvarlen_context *cpu, const ct_options *opt,
                             ct_row *row, int masked)
{
    chk c;
    chk_begin(&c, dev, cpu, opt, row, masked ? "pack_masked" : "pack");
    for (; c.case_i < chk_n_cases(&c) && !c.stop; c.case_i++) {
        if (!chk_case_begin(&c))
            continue;
        clvarlen_dtype dtype = pick_dtype(&c, 1);
        size_t es = clvarlen_dtype_size(dtype);
        int64_t row_elems = pick_row_elems(&c);
        int64_t batch = chk_rnd(&c, 1, c.case_i == 1 ? 3 : (opt->quick ? 8 : 24));
        int64_t max_seqlen = chk_rnd(&c, 1, c.case_i == 1 ? 20 : (opt->quick ? 64 : 200));
        int64_t pstride = pick_stride(&c, row_elems, 0);
        int64_t slots = batch * max_seqlen;
        void *padded = chk_alloc(&c, (size_t)(slots * eff(pstride, row_elems)) * es);
        int32_t *valid = chk_alloc(&c, (size_t)batch * 4);
        uint8_t *mask = chk_alloc(&c, (size_t)slots);
        if (c.oom)
            goto next;
        fill_data(&c, padded, dtype, (size_t)(slots * eff(pstride, row_elems)));
        int64_t total = 0;
        if (masked) {
            double density = 0.1 + 0.85 * chk_unif(&c);
            for (int64_t b = 0; b < batch; b++) {
                double r = chk_unif(&c);
                for (int64_t s = 0; s < max_seqlen; s++) {
                    /* Any nonzero byte keeps the row: values other than 1 catch
                     * indices computed from a sum of mask values. */
                    int keep = c.case_i == 0 ? 0 : r < 0.1 ? 0 : r < 0.2 ? 1 : chk_unif(&c) < density;
                    mask[b * max_seqlen + s] = keep ? (uint8_t)chk_rnd(&c, 1, 255) : 0;
                    total += keep;
                }
            }
        } else {
            for (int64_t b = 0; b < batch; b++) {
                double r = chk_unif(&c);
                valid[b] = c.case_i == 0 ? 0
                           : r < 0.15    ? 0
                           : r < 0.3     ? (int32_t)max_seqlen
                                         : (int32_t)chk_rnd(&c, 0, max_seqlen);
                total += valid[b];
            }
        }
        int too_small = c.case_i == chk_n_cases(&c) - 1 && total > 0;
        int64_t capacity = too_small ? total - 1 : total + chk_rnd(&c, 0, 3);
        size_t packed_bytes = (size_t)(capacity * row_elems) * es;
        void *pk_d = chk_alloc(&c, packed_bytes), *pk_c = chk_alloc(&c, packed_bytes);
        int32_t *cu_d = chk_alloc(&c, (size_t)(batch + 1) * 4), *cu_c = chk_alloc(&c, (size_t)(batch + 1) * 4);
        int64_t *si_d = chk_alloc(&c, (size_t)capacity * 8), *si_c = chk_alloc(&c, (size_t)capacity * 8);
        int64_t *tot_d = chk_alloc(&c, 8), *tot_c = chk_alloc(&c, 8);
        if (c.oom)
            goto next;
        int no_index = c.case_i % 4 == 2, no_total = c.case_i % 5 == 3;
        clvarlen_status sd = CLVARLEN_SUCCESS, sc;
        if (too_small)
            c.cl_case = 0; /* on device an overflow is reported through total_tokens only */
        if (c.cl_case) {
            no_index = no_total = 0;
#if CLVARLEN_HAVE_OPENCL
            size_t o_pd, o_v, o_m, o_pk, o_cu, o_si, o_t;
            cl_event ev = NULL;
            size_t padded_bytes = (size_t)(slots * eff(pstride, row_elems)) * es;
            cl_mem m_pd = chk_dev_in(&c, padded, padded_bytes, &o_pd);
            cl_mem m_v = chk_dev_in(&c, masked ? NULL : valid, (size_t)batch * 4, &o_v);
            cl_mem m_m = chk_dev_in(&c, masked ? mask : NULL, (size_t)slots, &o_m);
            cl_mem m_pk = chk_dev_out(&c, pk_d, packed_bytes, &o_pk);
            cl_mem m_cu = chk_dev_out(&c, cu_d, (size_t)(batch + 1) * 4, &o_cu);
            cl_mem m_si = chk_dev_out(&c, si_d, (size_t)capacity * 8, &o_si);
            cl_mem m_t = chk_dev_out(&c, tot_d, 8, &o_t);
            sd = c.dm_failed ? CLVARLEN_SUCCESS
                             : clvarlen_cl_pack(dev, dtype, row_elems, m_pd, o_pd, pstride, batch,
                                                max_seqlen, m_v, o_v, m_m, o_m, capacity, m_pk,
                                                o_pk, m_cu, o_cu, m_si, o_si, m_t, o_t, 0, NULL,
                                                &ev);
            sd = chk_dev_finish(&c, sd, ev);
#endif
        } else if (masked) {
            sd = clvarlen_pack_masked(dev, dtype, row_elems, padded, pstride, batch, max_seqlen,
                                      mask, capacity, pk_d, cu_d, no_index ? NULL : si_d,
                                      no_total ? NULL : tot_d);
        } else {
            sd = clvarlen_pack(dev, dtype, row_elems, padded, pstride, batch, max_seqlen, valid,
                               capacity, pk_d, cu_d, no_index ? NULL : si_d,
                               no_total ? NULL : tot_d);
        }
        if (masked)
            sc = clvarlen_pack_masked(cpu, dtype, row_elems, padded, pstride, batch, max_seqlen,
                                      mask, capacity, pk_c, cu_c, no_index ? NULL : si_c,
                                      no_total ? NULL : tot_c);
        else
            sc = clvarlen_pack(cpu, dtype, row_elems, padded, pstride, batch, max_seqlen, valid,
                               capacity, pk_c, cu_c, no_index ? NULL : si_c,
                               no_total ? NULL : tot_c);
        if (too_small) {
            chk_expect(&c, 0, sd, CLVARLEN_ERROR_BUFFER_TOO_SMALL);
            chk_expect(&c, 1, sc, CLVARLEN_ERROR_BUFFER_TOO_SMALL);
            chk_untouched(&c, "device packed", pk_d, packed_bytes);
            chk_untouched(&c, "device cu_seqlens", cu_d, (size_t)(batch + 1) * 4);
            chk_untouched(&c, "device src_index", si_d, (size_t)capacity * 8);
            chk_untouched(&c, "cpu packed", pk_c, packed_bytes);
            chk_untouched(&c, "cpu cu_seqlens", cu_c, (size_t)(batch + 1) * 4);
            goto next;
        }
        if (!chk_call(&c, 0, sd) || !chk_call(&c, 1, sc))
            goto next;
        chk_same(&c, "packed", pk_d, pk_c, CLVARLEN_DTYPE_U8, packed_bytes);
        chk_same(&c, "cu_seqlens", cu_d, cu_c, CLVARLEN_DTYPE_I32, (size_t)batch + 1);
        chk_same(&c, "src_index", si_d, si_c, CLVARLEN_DTYPE_I64, (size_t)capacity);
        chk_same(&c, "total", tot_d, tot_c, CLVARLEN_DTYPE_I64, 1);
        if (!no_total && *tot_c != total)
            chk_fail(&c, "cpu total %lld, expected %lld", (long long)*tot_c, (long long)total);
    next:
        chk_end_case(&c);
    }
    return chk_finish(&c);
}

int check_pack(clvarlen_context *dev, clvarlen_context *cpu, const ct_options *opt,
               ct_row *row)
{
    return check_pack_common(dev, cpu, opt, row, 0);
}

int check_pack_masked(clvarlen_context *dev, clvarlen_context *cpu, const ct_options *opt,
                      ct_row *row)
{
    return check_pack_common(dev, cpu, opt, row, 1);
}

int check_unpack(clvarlen_context *dev, clvarlen_context *cpu, const ct_options *opt,
                 ct_row *row)
{
    chk c;
    chk_begin(&c, dev, cpu, opt, row, "unpack");
    for (; c.case_i < chk_n_cases(&c) && !c.stop; c.case_i++) {
        if (!chk_case_begin(&c))
            continue;
        clvarlen_dtype dtype = pick_dtype(&c, 1);
        size_t es = clvarlen_dtype_size(dtype);
        int64_t row_elems = pick_row_elems(&c);
        int64_t batch = chk_rnd(&c, 1, c.case_i == 1 ? 3 : (opt->quick ? 8 : 24));
        int64_t max_seqlen = chk_rnd(&c, 1, c.case_i == 1 ? 20 : (opt->quick ? 64 : 200));
        int64_t slots = batch * max_seqlen;
        int64_t *src_index = chk_alloc(&c, (size_t)slots * 8);
        if (c.oom)
            goto next;
        /* Kept positions with holes; shuffled in some cases (entries need only be distinct). */
        double density = c.case_i == 0 ? 0.0 : 0.1 + 0.9 * chk_unif(&c);
        int64_t total = 0;
        for (int64_t p = 0; p < slots; p++)
            if (chk_unif(&c) < density)
                src_index[total++] = p;
        if (c.case_i % 4 == 3)
            for (int64_t i = total - 1; i > 0; i--) {
                int64_t j = chk_rnd(&c, 0, i), t = src_index[i];
                src_index[i] = src_index[j];
                src_index[j] = t;
            }
        int64_t kstride = pick_stride(&c, row_elems, 0), pstride = pick_stride(&c, row_elems, 1);
        size_t packed_elems = (size_t)(total * eff(kstride, row_elems));
        size_t padded_bytes = (size_t)(slots * eff(pstride, row_elems)) * es;
        void *packed = chk_alloc(&c, packed_elems * es);
        void *pad_value = chk_alloc(&c, es);
        void *pd_d = chk_alloc(&c, padded_bytes), *pd_c = chk_alloc(&c, padded_bytes);
        if (c.oom)
            goto next;
        fill_data(&c, packed, dtype, packed_elems);
        fill_data(&c, pad_value, dtype, 1);
        const void *pv = c.case_i % 2 ? pad_value : NULL;
        clvarlen_status sd;
#if CLVARLEN_HAVE_OPENCL
        if (c.cl_case) {
            size_t o_pk, o_si, o_pd;
            cl_event ev = NULL;
            cl_mem m_pk = chk_dev_in(&c, packed, packed_elems * es, &o_pk);
            cl_mem m_si = chk_dev_in(&c, src_index, (size_t)total * 8, &o_si);
            cl_mem m_pd = chk_dev_out(&c, pd_d, padded_bytes, &o_pd);
            sd = c.dm_failed ? CLVARLEN_SUCCESS
                             : clvarlen_cl_unpack(dev, dtype, row_elems, m_pk, o_pk, kstride,
                                                  total, m_si, o_si, batch, max_seqlen, pv, m_pd,
                                                  o_pd, pstride, 0, NULL, &ev);
            sd = chk_dev_finish(&c, sd, ev);
        } else
#endif
            sd = clvarlen_unpack(dev, dtype, row_elems, packed, kstride, total, src_index, batch,
                                 max_seqlen, pv, pd_d, pstride);
        if (!chk_call(&c, 0, sd) ||
            !chk_call(&c, 1,
                      clvarlen_unpack(cpu, dtype, row_elems, packed, kstride, total, src_index,
                                      batch, max_seqlen, pv, pd_c, pstride)))
            goto next;
        chk_same(&c, "padded", pd_d, pd_c, CLVARLEN_DTYPE_U8, padded_bytes);
    next:
        chk_end_case(&c);
    }
    return chk_finish(&c);
}
