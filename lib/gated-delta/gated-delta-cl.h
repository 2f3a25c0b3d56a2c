/* The gated delta rule on OpenCL: the launchers of gated-delta-cl.c, called
 * by the validated entry points of gated-delta.c, and the kernels and tiles
 * they run (gated-delta-tiles.c). Private to lib/gated-delta/.
 */
#ifndef CLVARLEN_GATED_DELTA_CL_H
#define CLVARLEN_GATED_DELTA_CL_H

#include "runtime/runtime.h"

#include "cpu/gated-delta.h"

#if CLVARLEN_HAVE_OPENCL

/* A buffer and its byte offset; m == NULL: absent. */
typedef struct cv_gdn_mem {
    cl_mem m;
    cl_ulong off;
} cv_gdn_mem;

/* The operation's buffers, in kernel argument order. */
typedef struct cv_gdn_bufs {
    cv_gdn_mem A_log, dt_bias, a, b, q, k, v, cu, pool, sidx, inter, cidx, o;
} cv_gdn_bufs;

/* gated-delta-tiles.c: the kernels and tiles of a call on the context's device. */
typedef struct cv_gdn_tiles {
    int wg, vt, tk;    /* token kernel */
    int vec4;          /* ... f32 states moved as float4 where aligned (CV_GDN_VEC4) */
    int prefetch;      /* ... the next token's inputs loaded during the reduction */
    int cwg, cvt, ks;  /* chunked kernel; cvt == 0: not available on this device */
    int mma, mvt;      /* chunked: the tensor-core kernel (gated-delta-mma.cl), its V tile */
    int ptx;           /* ... with inline PTX (else its emulated form) */
    int split;         /* ... computed operands as rounded part + remainder (0: rounded) */
    int scan, sw;      /* ... as two stages (gdn_chunk_prep, gdn_chunk_scan; 0: the fused
                        * gdn_chunked_mma), the scan's warps per group */
    int wgmma;         /* ... the scan on wgmma (CV_GDN_WG; sm_90a, else emulated) */
    int wgpre;         /* ... its prefetch: bit 4 CV_GDN_L2PRE (NVIDIA) */
    int wgforce;       /* ... forced by the tuning (wgmma=1) */
    int wgbad;         /* ... its check made to fail (tests of the fallback) */
    int hper;          /* ... the first stage's value heads per work-group (at most) */
    int only;          /* tuning sweeps: launch only stage 1 or 2 (wrong results; 0: both) */
    int preg;          /* NVIDIA: the first stage's register cap (0: none; PTX patch step) */
    int blas;          /* chunked without tensor cores: CLBlast products + own kernels
                        * (cl/gated-delta-blas.cl; 0: the fused portable kernel) */
    size_t scr_cap;    /* the two stages' scratch per call before heads go in groups */
    int scr_set;       /* ... set by the tuning knob (else the CLBlast path sizes its own) */
    int64_t chunk_min; /* AUTO: sequences at least this long run chunked */
} cv_gdn_tiles;

/* AUTO on a device with the tensor-core chunked kernel: sequences at least
 * this long run chunked, unless the device table or the tuning says otherwise.
 * H100 (H 16, HV 32, K = V = 128, bf16): 64 sequences / 8192 tokens (longest
 * 243) took 2.5 ms chunked against 6.2 ms token by token; 16 / 16384 3.8 ms
 * against 12.9 ms. Shorter than a chunk was not measured. */
#define GDN_MMA_CHUNK_MIN 64

/** Resolves the tiles for problem p on ctx's device (device table, local
 * memory, CLVARLEN_GDN_TUNING). */
void cv_gdn_resolve_tiles(const clvarlen_context *ctx, const cv_gdn_problem *p, cv_gdn_tiles *t);
/** Local memory of the portable chunked kernel gdn_chunked for key dim K. */
size_t cv_gdn_chunk_local_bytes(int K, int cvt, int ks);

/** Runs the operation on validated device buffers after the wait list (the
 * cl_mem entry point); with device checks on, the checks run first and a
 * raised bit becomes the status. */
clvarlen_status cv_gdn_cl_run(clvarlen_context *ctx, const char *fn, const clvarlen_gdn_params *pa,
                              const cv_gdn_problem *p, const cv_gdn_bufs *d, cl_uint num_events,
                              const cl_event *wait_list, cl_event *event);

/** The host-memory entry point on an OpenCL context (inputs validated, n_seqs
 * and total_tokens > 0); outputs and states are written only on success. */
clvarlen_status cv_gdn_cl_host(clvarlen_context *ctx, const char *fn, const clvarlen_gdn_params *pa,
                               const cv_gdn_problem *p);

/* gated-delta-cl.c: sets the arguments every kernel with GDN_ARGS takes first
 * (cl/gated.clh). */
void cv_gdn_set_args(cv_args *ar, const cv_gdn_problem *p, const cv_gdn_bufs *d, int flags,
                     cl_long chunk_min, cl_mem check);

/* wgmma-check.c: before the scan's wgmma form (*wgmma set) first runs for a
 * key dim and dtype on ctx, one sequence of 130 tokens with the call's K, V,
 * dtypes and state layout runs through it and through the CPU fallback. If
 * they differ by more than SPEC 4's chunked tolerances (or the run fails), the
 * failure is logged and *wgmma cleared for this and later calls, unless the
 * form was forced: then the error is returned. fail: fail the check whatever
 * the results (tests of the fallback). timing: the call runs one stage alone
 * for a tuning sweep (CLVARLEN_GDN_TUNING only=N; its results are wrong), so
 * no check runs, but a failed one still holds. */
clvarlen_status cv_gdn_wgmma_ready(clvarlen_context *ctx, const cv_gdn_problem *p, bool forced,
                                   bool fail, bool timing, int *wgmma);

/* gated-delta-blas.c, the portable chunked path: the V tile of its scan, the
 * local memory its kernels need for key_dim K, and its launcher. The launcher
 * takes heads in groups whose scratch fits scr_cap (scr_set: as given; else
 * up to an eighth of the device's memory); *fell_back: nothing but scratch was
 * written and the caller runs the fused kernel (no scratch, a kernel that
 * would not build, or CLBlast failed before any scan ran; after a CLBlast
 * failure the context keeps to the fused kernel). */
#define CV_GDN_BLAS_VT 16
size_t cv_gdn_blas_local_bytes(int K);
#if CLVARLEN_HAVE_CLBLAST
clvarlen_status cv_gdn_enqueue_blas(cv_chain *c, const cv_gdn_problem *p, const cv_gdn_bufs *d,
                                    size_t scr_cap, bool scr_set, int64_t chunk_min, int flags,
                                    int *fell_back);
#endif

#endif /* CLVARLEN_HAVE_OPENCL */

#endif /* CLVARLEN_GATED_DELTA_CL_H */
