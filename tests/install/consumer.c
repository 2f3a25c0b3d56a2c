/* A program built against an installed clvarlen through pkg-config (the CI's
 * install check, check-install.sh): a context on the best OpenCL device (else
 * the default), then two ops whose kernels the library must find without any
 * kernel directory (its prefix has been moved), checked against known answers.
 *
 * SPDX-License-Identifier: MIT
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <clvarlen/clvarlen.h>

static int fail(const clvarlen_context *ctx, const char *what)
{
    fprintf(stderr, "consumer: %s: %s\n", what, clvarlen_last_error(ctx));
    return 1;
}

int main(void)
{
    /* An OpenCL device where there is one (the kernels compiled into the
     * library must serve it: PoCL in CI, which the default order leaves to the
     * CPU fallback), else the default. */
    clvarlen_context *ctx = NULL;
    clvarlen_options *opts = NULL;
    if (clvarlen_options_create(&opts) != CLVARLEN_SUCCESS ||
        clvarlen_options_set_device(opts, "opencl") != CLVARLEN_SUCCESS)
        return fail(NULL, "options");
    clvarlen_status st = clvarlen_context_create(opts, &ctx);
    clvarlen_options_destroy(opts);
    if (st == CLVARLEN_ERROR_DEVICE_NOT_FOUND)
        st = clvarlen_context_create(NULL, &ctx);
    if (st != CLVARLEN_SUCCESS)
        return fail(NULL, "context");
    clvarlen_device_info info;
    if (clvarlen_context_device(ctx, &info) != CLVARLEN_SUCCESS)
        return fail(ctx, "device");
    printf("consumer: clvarlen %s on %s\n", clvarlen_version_string(), info.device_name);
    const int32_t lengths[3] = {3, 0, 5};
    int32_t cu[4];
    if (clvarlen_cu_seqlens_from_lengths(ctx, lengths, 3, cu) != CLVARLEN_SUCCESS)
        return fail(ctx, "cu_seqlens_from_lengths");
    if (cu[0] != 0 || cu[1] != 3 || cu[2] != 3 || cu[3] != 8) {
        fprintf(stderr, "consumer: cu_seqlens %d %d %d %d\n", cu[0], cu[1], cu[2], cu[3]);
        return 1;
    }
    /* One query over two keys with equal scores: o is the mean of the values. */
    clvarlen_attention_params p;
    clvarlen_attention_params_init(&p);
    p.n_seqs = 1;
    p.total_q = 1;
    p.total_k = 2;
    p.heads_q = p.heads_kv = 1;
    p.head_dim = 16;
    const int32_t cu_q[2] = {0, 1}, cu_k[2] = {0, 2};
    float q[16] = {0}, k[32] = {0}, v[32], o[16], lse;
    for (int i = 0; i < 32; i++)
        v[i] = (float)i;
    if (clvarlen_attention_forward(ctx, &p, q, k, v, cu_q, cu_k, NULL, o, &lse) !=
        CLVARLEN_SUCCESS)
        return fail(ctx, "attention_forward");
    for (int c = 0; c < 16; c++)
        if (fabsf(o[c] - (float)(c + 8)) > 1e-5f) {
            fprintf(stderr, "consumer: o[%d] = %g, want %d\n", c, (double)o[c], c + 8);
            return 1;
        }
    clvarlen_context_destroy(ctx);
    printf("consumer: ok\n");
    return 0;
}
