/* clvarlen-test: the precompile command: builds every kernel the ops use on
 * each chosen device for f32, f16 and bf16 and head dims 64 and 128 (32 query
 * and 8 KV heads unless --heads says otherwise, pages of 16), through
 * clvarlen_context_precompile, so that later processes find them in the
 * program cache (a package post-install or a service start). --op narrows it
 * as it narrows check and bench. Prints each step as it finishes and the
 * total time.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>

#include "ct-harness.h"

/* The precompile steps under the names --op matches (as the check and bench
 * ops of the same kernels are named). */
static const struct {
    unsigned bit;
    ct_op as;
} steps[] = {
    {CLVARLEN_PRECOMPILE_SEGMENT, {"segment", "segment", NULL, NULL}},
    {CLVARLEN_PRECOMPILE_ATTENTION, {"attention", "attention", NULL, NULL}},
    {CLVARLEN_PRECOMPILE_ATTENTION_BACKWARD, {"attention-bwd", "attention", NULL, NULL}},
    {CLVARLEN_PRECOMPILE_PAGED, {"paged-attention", "attention", NULL, NULL}},
    {CLVARLEN_PRECOMPILE_GATED_DELTA, {"gated-delta", "gated-delta", NULL, NULL}},
};

static void on_step(void *user, int done, int total, const char *what)
{
    const double *t0 = user;
    printf("  [%d/%d] %-40s %8.1f s\n", done, total, what, ct_now_s() - *t0);
    fflush(stdout);
}

int ct_cmd_precompile(const ct_options *opt)
{
    ct_progress_compiles = opt->progress;
    unsigned ops = 0;
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++)
        if (ct_op_matches(opt->op, &steps[i].as))
            ops |= steps[i].bit;
    if (!ops) {
        fprintf(stderr, "clvarlen-test: --op '%s' matches no precompile step (segment, "
                        "attention, attention-bwd, paged-attention, gated-delta)\n", opt->op);
        return EXIT_USAGE;
    }
    ct_target *targets = NULL;
    size_t n_targets = 0;
    char remark[1024];
    int rc = ct_resolve_targets(opt, 1, &targets, &n_targets, remark, sizeof remark);
    if (rc != EXIT_PASS)
        return rc;
    printf("clvarlen-test %s (library %s): precompile\n", CLVARLEN_VERSION_STRING,
           clvarlen_version_string());
    if (remark[0])
        printf("devices: %s\n", remark);
    for (size_t i = 0; i < n_targets; i++) {
        clvarlen_context *ctx = NULL;
        clvarlen_status st = ct_make_context(targets[i].index, 0, &ctx);
        if (st != CLVARLEN_SUCCESS) {
            fprintf(stderr, "clvarlen-test: device %s: %s: %s\n", targets[i].label,
                    clvarlen_status_name(st), clvarlen_last_error(NULL));
            rc = EXIT_DEVICE;
            continue;
        }
        printf("device %s: %s\n", targets[i].label, targets[i].name);
        clvarlen_precompile_params p;
        clvarlen_precompile_params_init(&p);
        const clvarlen_dtype dts[3] = {CLVARLEN_DTYPE_BF16, CLVARLEN_DTYPE_F16,
                                       CLVARLEN_DTYPE_F32};
        for (int d = 0; d < 3; d++)
            p.dtypes[d] = dts[d];
        p.n_dtypes = opt->quick ? 1 : 3;
        p.head_dims[0] = 128;
        p.head_dims[1] = 64;
        p.n_head_dims = opt->quick ? 1 : 2;
        p.ops = ops;
        p.heads_q = opt->heads_q;
        p.heads_kv = opt->heads_kv;
        double t0 = ct_now_s();
        p.progress = on_step;
        p.progress_user = &t0;
        st = clvarlen_context_precompile(ctx, &p);
        if (st != CLVARLEN_SUCCESS) {
            fprintf(stderr, "clvarlen-test: device %s: %s\n", targets[i].label,
                    clvarlen_last_error(ctx));
            rc = EXIT_DEVICE;
        } else {
            printf("device %s: done in %.1f s\n", targets[i].label, ct_now_s() - t0);
        }
        clvarlen_context_destroy(ctx);
    }
    free(targets);
    return rc;
}
