/* clvarlen-test: the check and bench functions of every op, as listed in the
 * table of ct-ops.c. Adding an op: its file under tools/ops/ (and in
 * tools/meson.build), its functions here, one row in ct-ops.c.
 */
#ifndef CLVARLEN_TEST_OPS_H
#define CLVARLEN_TEST_OPS_H

#include "clvarlen-test.h"

#define CT_CHECK(name) \
    int name(clvarlen_context *dev, clvarlen_context *cpu, const ct_options *opt, ct_row *row)
#define CT_BENCH(name) int name(clvarlen_context *dev, const ct_options *opt, double copy_gbps)

/* segment-maps.c */
CT_CHECK(check_cu_seqlens);
CT_CHECK(check_token_maps);
CT_CHECK(check_gen_seq_lens);
/* segment-pack.c */
CT_CHECK(check_pack);
CT_CHECK(check_pack_masked);
CT_CHECK(check_unpack);
/* segment-rows.c */
CT_CHECK(check_gather);
CT_CHECK(check_scatter_overwrite);
CT_CHECK(check_scatter_accumulate);
CT_CHECK(check_scatter_zero_rest);
/* segment-expand.c */
CT_CHECK(check_expand_verify);
CT_CHECK(check_expand_draft);
/* segment-cp.c */
CT_CHECK(check_cp_plan);
CT_CHECK(check_cp_gather);
CT_CHECK(check_cp_scatter);
/* segment-bench.c */
CT_BENCH(bench_gather);
CT_BENCH(bench_scatter);
CT_BENCH(bench_pack);
CT_BENCH(bench_unpack);
CT_BENCH(bench_cp_gather);
CT_BENCH(bench_cp_scatter);
CT_BENCH(bench_seqlens_expand);
/* attention.c */
CT_CHECK(check_fwd_f32);
CT_CHECK(check_fwd_f16);
CT_CHECK(check_fwd_bf16);
CT_CHECK(check_merge);
CT_BENCH(bench_attention);
/* attention-bwd.c */
CT_CHECK(check_bwd_f32);
CT_CHECK(check_bwd_bf16);
CT_BENCH(bench_attention_bwd);
/* gated-delta.c */
CT_CHECK(check_gdn);
CT_CHECK(check_gdn_recurrent);
CT_CHECK(check_gdn_chunked);
CT_BENCH(bench_gdn);
/* paged.c */
CT_CHECK(check_paged_attention);
CT_CHECK(check_kv_append);
CT_BENCH(bench_paged_attention);
CT_BENCH(bench_kv_append);

#endif
