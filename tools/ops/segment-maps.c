/* clvarlen-test: segment family, the maps: cu_seqlens, token_maps and gen_seq_lens.
 * Integer outputs must match the CPU fallback bitwise and the oracles written
 * here from the SPEC.
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

/* ================================================================ checks */

int check_cu_seqlens(clvarlen_context *dev, clvarlen_context *cpu, const ct_options *opt,
                     ct_row *row)
{
    chk c;
    chk_begin(&c, dev, cpu, opt, row, "cu_seqlens");
    for (; c.case_i < chk_n_cases(&c) && !c.stop; c.case_i++) {
        if (!chk_case_begin(&c))
            continue;
        int64_t max_n = c.case_i == 0 ? 0 : (opt->quick ? 64 : 3000);
        int32_t *len = chk_alloc(&c, (size_t)(max_n + 1) * 4);
        int32_t *want = chk_alloc(&c, (size_t)(max_n + 1) * 4);
        if (c.oom)
            goto next;
        int64_t n = max_n ? ct_random_lengths(&c.rng, max_n, 5000, (int64_t)1 << 30, len) : 0;
        size_t cu_bytes = (size_t)(n + 1) * 4, len_bytes = (size_t)n * 4;
        int32_t *cu_d = chk_alloc(&c, cu_bytes), *cu_c = chk_alloc(&c, cu_bytes);
        int32_t *len_d = chk_alloc(&c, len_bytes), *len_c = chk_alloc(&c, len_bytes);
        if (c.oom)
            goto next;
        tu_cu_from_lengths(len, n, want);
        clvarlen_status sd;
#if CLVARLEN_HAVE_OPENCL
        if (c.cl_case) {
            size_t o_len, o_cu;
            cl_event ev = NULL;
            cl_mem m_len = chk_dev_in(&c, len, len_bytes, &o_len);
            cl_mem m_cu = chk_dev_out(&c, cu_d, cu_bytes, &o_cu);
            sd = c.dm_failed ? CLVARLEN_SUCCESS
                             : clvarlen_cl_cu_seqlens_from_lengths(dev, m_len, o_len, n, m_cu,
                                                                   o_cu, 0, NULL, &ev);
            sd = chk_dev_finish(&c, sd, ev);
        } else
#endif
            sd = clvarlen_cu_seqlens_from_lengths(dev, len, n, cu_d);
        if (!chk_call(&c, 0, sd) ||
            !chk_call(&c, 1, clvarlen_cu_seqlens_from_lengths(cpu, len, n, cu_c)))
            goto next;
        chk_same(&c, "cu_seqlens", cu_d, cu_c, CLVARLEN_DTYPE_I32, (size_t)n + 1);
        chk_same(&c, "cu_seqlens (cpu vs SPEC)", cu_c, want, CLVARLEN_DTYPE_I32, (size_t)n + 1);
#if CLVARLEN_HAVE_OPENCL
        if (c.cl_case) {
            size_t o_cu, o_len;
            cl_event ev = NULL;
            cl_mem m_cu = chk_dev_in(&c, want, cu_bytes, &o_cu);
            cl_mem m_len = chk_dev_out(&c, len_d, len_bytes, &o_len);
            sd = c.dm_failed ? CLVARLEN_SUCCESS
                             : clvarlen_cl_lengths_from_cu_seqlens(dev, m_cu, o_cu, n, m_len,
                                                                   o_len, 0, NULL, &ev);
            sd = chk_dev_finish(&c, sd, ev);
        } else
#endif
            sd = clvarlen_lengths_from_cu_seqlens(dev, want, n, len_d);
        if (!chk_call(&c, 0, sd) ||
            !chk_call(&c, 1, clvarlen_lengths_from_cu_seqlens(cpu, want, n, len_c)))
            goto next;
        chk_same(&c, "lengths", len_d, len_c, CLVARLEN_DTYPE_I32, (size_t)n);
        chk_same(&c, "lengths (cpu round trip)", len_c, len, CLVARLEN_DTYPE_I32, (size_t)n);
    next:
        chk_end_case(&c);
    }
    return chk_finish(&c);
}

int check_token_maps(clvarlen_context *dev, clvarlen_context *cpu, const ct_options *opt,
                     ct_row *row)
{
    chk c;
    chk_begin(&c, dev, cpu, opt, row, "token_maps");
    int64_t max_n = opt->quick ? 40 : 300;
    for (; c.case_i < chk_n_cases(&c) && !c.stop; c.case_i++) {
        if (!chk_case_begin(&c))
            continue;
        int32_t *len = chk_alloc(&c, (size_t)max_n * 4);
        int32_t *cu = chk_alloc(&c, (size_t)(max_n + 1) * 4);
        int32_t *offsets = chk_alloc(&c, (size_t)max_n * 4);
        if (c.oom)
            goto next;
        int64_t n = case_lengths(&c, max_n, opt->quick ? 100 : 700, len);
        tu_cu_from_lengths(len, n, cu);
        int64_t total = cu[n];
        for (int64_t s = 0; s < n; s++)
            offsets[s] = (int32_t)chk_rnd(&c, 0, 5000);
        const int32_t *offs = c.case_i % 3 == 0 ? NULL : offsets;
        int mode = c.case_i % 4; /* 2: seq_id only, 3: pos only */
        size_t bytes = (size_t)total * 4;
        int32_t *sid_d = chk_alloc(&c, bytes), *sid_c = chk_alloc(&c, bytes), *sid_w = chk_alloc(&c, bytes);
        int32_t *pos_d = chk_alloc(&c, bytes), *pos_c = chk_alloc(&c, bytes), *pos_w = chk_alloc(&c, bytes);
        if (c.oom)
            goto next;
        for (int64_t s = 0; s < n; s++) {
            for (int64_t t = cu[s]; t < cu[s + 1]; t++) {
                sid_w[t] = (int32_t)s;
                pos_w[t] = (int32_t)(t - cu[s] + (offs ? offs[s] : 0));
            }
        }
        clvarlen_status sd;
#if CLVARLEN_HAVE_OPENCL
        if (c.cl_case) {
            size_t o_cu, o_off, o_sid, o_pos;
            cl_event ev = NULL;
            cl_mem m_cu = chk_dev_in(&c, cu, (size_t)(n + 1) * 4, &o_cu);
            cl_mem m_off = chk_dev_in(&c, offs, (size_t)n * 4, &o_off);
            cl_mem m_sid = chk_dev_out(&c, mode == 3 ? NULL : sid_d, bytes, &o_sid);
            cl_mem m_pos = chk_dev_out(&c, mode == 2 ? NULL : pos_d, bytes, &o_pos);
            sd = c.dm_failed ? CLVARLEN_SUCCESS
                             : clvarlen_cl_token_maps(dev, m_cu, o_cu, n, total, m_off, o_off,
                                                      m_sid, o_sid, m_pos, o_pos, 0, NULL, &ev);
            sd = chk_dev_finish(&c, sd, ev);
        } else
#endif
            sd = clvarlen_token_maps(dev, cu, n, total, offs, mode == 3 ? NULL : sid_d,
                                     mode == 2 ? NULL : pos_d);
        if (!chk_call(&c, 0, sd) ||
            !chk_call(&c, 1,
                      clvarlen_token_maps(cpu, cu, n, total, offs, mode == 3 ? NULL : sid_c,
                                          mode == 2 ? NULL : pos_c)))
            goto next;
        chk_same(&c, "seq_id", sid_d, sid_c, CLVARLEN_DTYPE_I32, (size_t)total);
        chk_same(&c, "pos", pos_d, pos_c, CLVARLEN_DTYPE_I32, (size_t)total);
        if (mode != 3)
            chk_same(&c, "seq_id (cpu vs SPEC)", sid_c, sid_w, CLVARLEN_DTYPE_I32, (size_t)total);
        if (mode != 2)
            chk_same(&c, "pos (cpu vs SPEC)", pos_c, pos_w, CLVARLEN_DTYPE_I32, (size_t)total);
    next:
        chk_end_case(&c);
    }
    return chk_finish(&c);
}

/* pack and pack_masked share everything but how the kept rows are chosen. */

int check_gen_seq_lens(clvarlen_context *dev, clvarlen_context *cpu,
                       const ct_options *opt, ct_row *row)
{
    chk c;
    chk_begin(&c, dev, cpu, opt, row, "gen_seq_lens");
    for (; c.case_i < chk_n_cases(&c) && !c.stop; c.case_i++) {
        if (!chk_case_begin(&c))
            continue;
        uint64_t seed = ct_rng_next(&c.rng);
        int32_t world = (int32_t)chk_rnd(&c, 1, opt->quick ? 4 : 8);
        int32_t n = (int32_t)chk_rnd(&c, 1, opt->quick ? 64 : 512);
        int64_t total;
        switch (c.case_i % 4) {
        case 0: total = chk_rnd(&c, 0, n / 2 + 1); break; /* total << n^2: the excess path */
        case 1: total = c.case_i == 1 ? 0 : chk_rnd(&c, 0, n); break;
        case 2: total = chk_rnd(&c, n, 200000); break;
        default: total = (int64_t)1 << 24; break;
        }
        size_t bytes = (size_t)world * (size_t)n * 4;
        int32_t *out_d = chk_alloc(&c, bytes), *out_c = chk_alloc(&c, bytes);
        if (c.oom)
            goto next;
        clvarlen_status sd;
#if CLVARLEN_HAVE_OPENCL
        if (c.cl_case) {
            size_t o_out;
            cl_event ev = NULL;
            cl_mem m_out = chk_dev_out(&c, out_d, bytes, &o_out);
            sd = c.dm_failed ? CLVARLEN_SUCCESS
                             : clvarlen_cl_gen_seq_lens(dev, seed, world, n, total, m_out, o_out,
                                                        0, NULL, &ev);
            sd = chk_dev_finish(&c, sd, ev);
        } else
#endif
            sd = clvarlen_gen_seq_lens(dev, seed, world, n, total, out_d);
        if (!chk_call(&c, 0, sd) ||
            !chk_call(&c, 1, clvarlen_gen_seq_lens(cpu, seed, world, n, total, out_c)))
            goto next;
        chk_same(&c, "lengths", out_d, out_c, CLVARLEN_DTYPE_I32, (size_t)world * (size_t)n);
        for (int32_t r = 0; r < world; r++) {
            int64_t sum = 0;
            int negative = 0;
            for (int32_t i = 0; i < n; i++) {
                sum += out_c[(size_t)r * (size_t)n + (size_t)i];
                negative |= out_c[(size_t)r * (size_t)n + (size_t)i] < 0;
            }
            if (sum != total || negative) {
                chk_fail(&c, "cpu row %d sums to %lld (want %lld)%s", r, (long long)sum,
                         (long long)total, negative ? ", negative length" : "");
                break;
            }
        }
    next:
        chk_end_case(&c);
    }
    return chk_finish(&c);
}
