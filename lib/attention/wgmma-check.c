/* The capability check of the attention forward's wgmma form: before the
 * form runs on a device (once per context, lib/attention/attention-cl.c
 * wgmma_ready), its program's attn_wgmma_check kernel (cl/attention-nv.cl)
 * multiplies one tile of operands whose products and sums are exact in f32,
 * and every element is compared with the exact result.
 */
#include "attention/attention-cl.h"
#include "core/half.h"

#include <stdlib.h>

#if CLVARLEN_HAVE_OPENCL

/* A value of the check's operands: a small multiple of 1/8, so that every
 * product and sum is exact in f32 and each operand exact in f16 and bf16. */
static float check_value(uint32_t i)
{
    uint32_t h = i * 2654435761u;
    h ^= h >> 15;
    return (float)((int)(h % 9u) - 4) * 0.125f;
}

clvarlen_status cv_attn_wgmma_check(clvarlen_context *ctx, const cv_attn_desc *d, int block_m,
                                    int block_n, const char *options)
{
    cl_kernel k = NULL;
    clvarlen_status st = cv_get_kernel(ctx, "attention-nv.cl", options, "attn_wgmma_check", &k);
    if (st != CLVARLEN_SUCCESS)
        return st;
    /* Q [M][D], K and V [N][D], P [M][N] in; S [M][N] and O [M][D] out */
    const int D = d->head_dim, M = block_m, N = block_n;
    const size_t n_in = (size_t)(M + 2 * N) * D + (size_t)M * N,
                 n_out = (size_t)M * N + (size_t)M * D;
    uint16_t *in = malloc(n_in * sizeof *in);
    float *vals = malloc(n_in * sizeof *vals), *out = malloc(n_out * sizeof *out);
    cl_mem bin = NULL, bout = NULL;
    if (!in || !vals || !out) {
        st = cv_error(ctx, CLVARLEN_ERROR_OUT_OF_MEMORY, "wgmma check: out of memory");
        goto done;
    }
    for (size_t i = 0; i < n_in; i++) {
        vals[i] = check_value((uint32_t)i + 17u);
        in[i] = d->dtype == CLVARLEN_DTYPE_F16 ? cv_float_to_half(vals[i])
                                               : cv_float_to_bf16(vals[i]);
    }
    if ((st = cv_buffer(ctx, n_in * sizeof *in, in, &bin)) != CLVARLEN_SUCCESS ||
        (st = cv_buffer(ctx, n_out * sizeof *out, NULL, &bout)) != CLVARLEN_SUCCESS)
        goto done;
    cv_args a = cv_args_begin(k);
    CV_ARG(a, bin);
    CV_ARG(a, bout);
    if (a.err != CL_SUCCESS) {
        st = cv_cl_check(ctx, a.err, "clSetKernelArg(attn_wgmma_check)");
        goto done;
    }
    size_t wg = (size_t)M * 2; /* a warpgroup per 64 rows */
    cl_int err = clEnqueueNDRangeKernel(ctx->queue, k, 1, NULL, &wg, &wg, 0, NULL, NULL);
    if (err != CL_SUCCESS) {
        st = cv_cl_check(ctx, err, "clEnqueueNDRangeKernel(attn_wgmma_check)");
        goto done;
    }
    if ((st = cv_read(ctx, bout, 0, n_out * sizeof *out, out, 0, NULL)) != CLVARLEN_SUCCESS)
        goto done;
    const float *q = vals, *kk = vals + (size_t)M * D, *v = kk + (size_t)N * D;
    const float *p = v + (size_t)N * D;
    for (int r = 0; r < M && st == CLVARLEN_SUCCESS; r++) {
        for (int c = 0; c < N + D; c++) {
            double want = 0.0;
            if (c < N)
                for (int e = 0; e < D; e++)
                    want += (double)q[r * D + e] * kk[c * D + e];
            else
                for (int e = 0; e < N; e++)
                    want += (double)p[r * N + e] * v[e * D + (c - N)];
            const float got = c < N ? out[r * N + c] : out[(size_t)M * N + (size_t)r * D + (c - N)];
            if ((double)got != want) {
                st = cv_error(ctx, CLVARLEN_ERROR_KERNEL_BUILD,
                              "wgmma check: %s[%d][%d] = %.9g, want %.9g", c < N ? "S" : "O",
                              r, c < N ? c : c - N, (double)got, want);
                break;
            }
        }
    }
done:
    cv_release(&bin);
    cv_release(&bout);
    free(in);
    free(vals);
    free(out);
    return st;
}

#endif /* CLVARLEN_HAVE_OPENCL */
