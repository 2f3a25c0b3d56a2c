/* clvarlen-test: the one table of ops. Each row names an op, its family, its
 * check and its benchmark (either may be NULL); 'check' and 'bench' run the
 * rows in this order. Check rows keep the order they always had; an op whose
 * check is split into variants (scatter_*, seqlens_expand_*, attention-*) has
 * a bench-only row of its own, placed after its checks.
 *
 * SPDX-License-Identifier: MIT
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "ct-harness.h"
#include "ops/ops.h"

static const ct_op ops[] = {
    /* name                     family         check                      bench */
    {"cu_seqlens",              "segment",     check_cu_seqlens,          NULL},
    {"token_maps",              "segment",     check_token_maps,          NULL},
    {"pack",                    "segment",     check_pack,                bench_pack},
    {"pack_masked",             "segment",     check_pack_masked,         NULL},
    {"unpack",                  "segment",     check_unpack,              bench_unpack},
    {"gather",                  "segment",     check_gather,              bench_gather},
    {"scatter_overwrite",       "segment",     check_scatter_overwrite,   NULL},
    {"scatter_accumulate",      "segment",     check_scatter_accumulate,  NULL},
    {"scatter_zero_rest",       "segment",     check_scatter_zero_rest,   NULL},
    {"scatter",                 "segment",     NULL,                      bench_scatter},
    {"seqlens_expand_verify",   "segment",     check_expand_verify,       NULL},
    {"seqlens_expand_draft",    "segment",     check_expand_draft,        NULL},
    {"cp_plan",                 "segment",     check_cp_plan,             NULL},
    {"cp_gather",               "segment",     check_cp_gather,           bench_cp_gather},
    {"cp_scatter",              "segment",     check_cp_scatter,          bench_cp_scatter},
    {"seqlens_expand",          "segment",     NULL,                      bench_seqlens_expand},
    {"gen_seq_lens",            "segment",     check_gen_seq_lens,        NULL},
    {"attention-f32",           "attention",   check_fwd_f32,             NULL},
    {"attention-f16",           "attention",   check_fwd_f16,             NULL},
    {"attention-bf16",          "attention",   check_fwd_bf16,            NULL},
    {"attention-merge",         "attention",   check_merge,               NULL},
    {"attention",               "attention",   NULL,                      bench_attention},
    {"attention-bwd-f32",       "attention",   check_bwd_f32,             NULL},
    {"attention-bwd-bf16",      "attention",   check_bwd_bf16,            NULL},
    {"attention-bwd",           "attention",   NULL,                      bench_attention_bwd},
    {"paged-attention",         "attention",   check_paged_attention,     bench_paged_attention},
    {"kv-append",               "attention",   check_kv_append,           bench_kv_append},
    {"gated-delta",             "gated-delta", check_gdn,                 bench_gdn},
    {"gated-delta-recurrent",   "gated-delta", check_gdn_recurrent,       NULL},
    {"gated-delta-chunked",     "gated-delta", check_gdn_chunked,         NULL},
};

const ct_op *ct_ops(size_t *count)
{
    *count = sizeof ops / sizeof ops[0];
    return ops;
}

/* Short forms --op accepts for a family (--list-ops prints them). */
static const struct {
    const char *alias, *family;
} aliases[] = {
    {"seg", "segment"},
    {"attn", "attention"},
    {"gdn", "gated-delta"},
};

/* --op NAME: a prefix of the op's name, the family's name, or a family's short
 * form; --op =NAME: exactly that op. */
int ct_op_matches(const char *filter, const ct_op *op)
{
    if (!filter || !*filter)
        return 1;
    if (filter[0] == '=')
        return strcmp(op->name, filter + 1) == 0;
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (strcmp(filter, aliases[i].alias) == 0)
            filter = aliases[i].family;
    if (strncmp(op->name, filter, strlen(filter)) == 0)
        return 1;
    return strcmp(op->family, filter) == 0;
}

void ct_print_ops(FILE *out)
{
    size_t n;
    const ct_op *all = ct_ops(&n);
    fprintf(out, "%-24s %-12s %s\n", "op", "family", "commands");
    for (size_t i = 0; i < n; i++)
        fprintf(out, "%-24s %-12s %s%s%s\n", all[i].name, all[i].family,
                all[i].check ? "check" : "", all[i].check && all[i].bench ? ", " : "",
                all[i].bench ? "bench" : "");
    fprintf(out, "\n--op takes a prefix of an op's name, a family, or a family's short form:");
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        fprintf(out, " %s = %s%s", aliases[i].alias, aliases[i].family,
                i + 1 < sizeof aliases / sizeof aliases[0] ? "," : "\n");
}

size_t ct_count_ops(const char *filter, int for_bench)
{
    size_t n_ops, n = 0;
    const ct_op *all = ct_ops(&n_ops);
    for (size_t i = 0; i < n_ops; i++)
        if ((for_bench ? all[i].bench != NULL : all[i].check != NULL) &&
            ct_op_matches(filter, &all[i]))
            n++;
    return n;
}
