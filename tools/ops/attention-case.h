/* clvarlen-test: what the attention forward (attention.c) shares with the
 * backward's check and bench (attention-bwd.c): the random check case, the
 * benchmark input generator and the device's measured f32 FMA rate.
 */
#ifndef CLVARLEN_TEST_ATTENTION_CASE_H
#define CLVARLEN_TEST_ATTENTION_CASE_H

#include <stdio.h>

#include "clvarlen-test.h"

/* A random forward case: params, lengths, inputs, and outputs of the device
 * and of the CPU fallback. */
typedef struct fwd_case {
    clvarlen_attention_params p;
    int32_t *cu_q, *cu_k, *q_pos;
    void *q, *k, *v, *o_dev, *o_cpu;
    float *lse_dev, *lse_cpu;
    size_t q_elems, k_elems, v_elems, o_elems, lse_n;
} fwd_case;

/** Case case_i of dtype (GQA/MQA, causal, windows, softcap, q_pos, strides,
 * Lq != Lk, empty and length-1 sequences); 0, or -1 when out of memory. */
int ct_attn_make_case(uint64_t *rs, clvarlen_dtype dtype, int case_i, const ct_options *opt,
                      fwd_case *c);
void ct_attn_free_case(fwd_case *c);

/** A benchmark shape of the attention forward and backward: lengths from
 * clvarlen_gen_seq_lens(seed 1, n_seqs, total). */
typedef struct bench_shape {
    const char *name;
    clvarlen_dtype dtype;
    int32_t n_seqs, total, hq, hk, d;
    int causal;
} bench_shape;

/** The benchmarks' documented input generator (attention.c's header comment). */
void ct_attn_bench_fill(void *p, clvarlen_dtype dt, size_t n, uint32_t tensor, uint64_t seed);

/** fopen for CLVARLEN_BENCH_DUMP, reporting a file that cannot be written. */
FILE *ct_dump_open(const char *path, const char *mode);

#if CLVARLEN_HAVE_OPENCL
/** FLOP/s of f32 FMA measured on an OpenCL context, 0 on failure. */
double ct_measure_fma(clvarlen_context *ctx, const ct_options *opt);
#endif

#endif
