/* The runtime layer: contexts, devices and tuning, kernel loading and the
 * program cache, and the OpenCL plumbing every op family shares (buffers,
 * command chains, device-side checks). It builds on lib/core/ only; the op
 * families (lib/segment/, lib/attention/, lib/gated-delta/) build on it and
 * never on each other.
 */
#ifndef CLVARLEN_RUNTIME_H
#define CLVARLEN_RUNTIME_H

#include "core/core.h"

#if CLVARLEN_HAVE_OPENCL
#  include <clvarlen/clvarlen-cl.h>
#endif

/* ------------------------------------------------------------ devices (device.c, device-db.c) */

#if CLVARLEN_HAVE_OPENCL
typedef struct cv_device {
    clvarlen_device_info info;
    cl_platform_id platform;
    cl_device_id id;
} cv_device;

/** All OpenCL devices, in platform then device order; *list is malloc'ed (NULL when n == 0).
 * The driver is asked once per process (thread-safe); OUT_OF_MEMORY, or OPENCL in a
 * forked child whose parent loaded the driver without keeping a list. */
clvarlen_status cv_devices_enumerate(cv_device **list, size_t *n);
/** True in a process forked after an ancestor loaded the OpenCL driver: it must not be used. */
bool cv_opencl_inherited(void);
/** Fills info from an OpenCL device (index set to `index`). */
void cv_device_describe(cl_platform_id platform, cl_device_id device, int index,
                        clvarlen_device_info *info);
#endif
/** Chooses a device index (-1: CPU fallback) for spec (NULL: CLVARLEN_DEVICE, then the
 * default order); reason gets a sentence. DEVICE_NOT_FOUND when spec matches nothing. */
clvarlen_status cv_device_choose(const char *spec, int *index, char *reason, size_t reason_size);
/** Describes the built-in CPU fallback. */
void cv_device_describe_cpu(clvarlen_device_info *info);

/** Per-device tuning, looked up vendor -> architecture -> device -> default. */
typedef struct cv_tuning {
    size_t copy_wg;        /* work-group size of row copies */
    size_t copy_rows_per_wg;
    size_t scan_wg;        /* work-group size of single-group scans */
    size_t expand_wg;      /* work-group size of seqlens_expand; 0: scan_wg */
    size_t gdn_v_tile;     /* gated delta: V columns per work-group */
    size_t gdn_wg;         /* gated delta: work-group size */
    size_t gdn_k_lanes;    /* gated delta: work-items sharing one V column (K split); 0: default */
    int gdn_no_prefetch;   /* gated delta token kernel: no next-token prefetch (fewer registers) */
    int gdn_chunk_blas;    /* gated delta chunked without tensor cores: CLBlast's products (built
                            * with CLBlast) rather than the fused portable kernel */
    size_t gdn_chunk_min;  /* gated delta: shortest sequence run chunked (AUTO); 0: never */
    size_t gdn_chunk_v_tile; /* gated delta chunked: V columns per work-group; 0: default */
    size_t gdn_chunk_wg;   /* gated delta chunked: work-group size (64, 128 or 256); 0: default */
    size_t gdn_chunk_wg_max; /* gated delta chunked: a cap no tuning override lifts; 0: none */
    size_t attn_block_m;   /* attention: query rows per work-group */
    size_t attn_block_n;   /* attention: keys per staged tile */
    size_t attn_wg;        /* attention: work-group size */
    size_t attn_dch;       /* attention: head-dim chunk of Q and K staged at a time (0: 16) */
    size_t attn_kch;       /* attention: keys of V staged at a time (0: 16) */
    int nvidia_mma;        /* inline-PTX mma.sync fast paths allowed (NVIDIA, cc >= 8.0) */
} cv_tuning;

void cv_tuning_for(const clvarlen_device_info *info, cv_tuning *tuning);
/** Mesa's llvmpipe, whose loop limiter silently ends a work-item's loops after
 * 65535 iterations in all (docs/PORTABILITY.md): the device table, the default
 * order and the context's log treat it apart. */
bool cv_device_is_llvmpipe(const clvarlen_device_info *info);
/** The developer knob CLVARLEN_DEVICE_PROFILE (device-db.c): 0 when unset; 1
 * when *info now describes the profile's device (note says so); -1 when it
 * names no profile (note says which exist). */
int cv_device_profile_apply(clvarlen_device_info *info, char *note, size_t note_size);

/* ------------------------------------------------------------ context (context.c) */

#if CLVARLEN_HAVE_OPENCL
typedef struct cv_program cv_program; /* lib/kernel-source.c */

/* The kernel sources compiled into the library (kernels-embedded.c, generated
 * by gen-embedded-kernels.py from cl/ at build time): name, text (NUL-ended)
 * and size without the NUL. */
typedef struct cv_embedded_file {
    const char *name;
    const char *data;
    size_t size;
} cv_embedded_file;
extern const cv_embedded_file cv_embedded_kernels[];
extern const size_t cv_n_embedded_kernels;
#endif

struct clvarlen_context {
    cv_ctx_base base;          /* first: the core and CPU twins reach it through the handle */

    clvarlen_device_info device;
    cv_tuning tuning;
    int device_checks;
    char *kernel_path;         /* option or CLVARLEN_KERNEL_PATH; may be NULL */
    char *cache_dir;           /* resolved cache directory; NULL = disabled (also set by
                                * program-cache.c when it refuses the directory) */

#if CLVARLEN_HAVE_OPENCL
    int has_cl;
    cl_context cl_ctx;
    cl_device_id cl_dev;
    cl_platform_id cl_platform;
    cl_command_queue queue;
    cv_program *programs;      /* in-memory program cache, a list */
    cl_mem check_flag;         /* one int for device-side checks, made on first use */
    int gdn_shfl_refused;      /* the driver refused gated delta's warp shuffles */
    int gdn_mma_refused;       /* the driver refused gated delta's tensor-core kernel */
    int gdn_scan_refused;      /* ... or only its two-stage form (prep and scan kernels) */
    int gdn_wgmma_refused;     /* ... or only the scan's wgmma form (sm_90a) */
    /* The scan's wgmma form per [K 64, 128] x [bf16, f16]: 0 not checked, 1 its check
     * passed, 2 its check running, -1 failed (the mma.sync form runs) */
    int gdn_wgmma[2][2];
    int gdn_blas_refused;      /* CLBlast or the kernels around it failed for the portable
                                * chunked path: the fused portable kernel from then on */
    int exact_div;             /* f32 divide is correctly rounded (CL_DEVICE_SINGLE_FP_CONFIG) */
    /* The attention forward's wgmma form (sm_90a) per [f16, bf16] x [head dim 64, 96, 128,
     * 256] x [64-row, 128-row tiles]: 0 not tried, 1 built and its check passed, -1 refused
     * (the mma.sync form runs). */
    int attn_wgmma[2][4][2];
    int attn_bwd_wgmma_refused; /* the driver refused the backward's wgmma form */
    /* Work space of the ops' command chains (cv_temp): kept across calls
     * because releasing a buffer that queued kernels still use blocks on some
     * drivers; grown on demand, freed by clvarlen_context_destroy. */
    cl_mem temp;
    size_t temp_bytes;
    bool temp_user; /* temp is the caller's (clvarlen_cl_context_set_scratch): never grown */
#endif
};

_Static_assert(offsetof(struct clvarlen_context, base) == 0,
               "lib/core reaches cv_ctx_base through the context handle");

/** True when the context runs on OpenCL. */
static inline bool cv_use_cl(const clvarlen_context *ctx)
{
#if CLVARLEN_HAVE_OPENCL
    return ctx->has_cl != 0;
#else
    (void)ctx;
    return false;
#endif
}

/* ------------------------------------------------------------ OpenCL plumbing */

#if CLVARLEN_HAVE_OPENCL
const char *cv_cl_error_name(cl_int err);
/** CL_SUCCESS -> CLVARLEN_SUCCESS; else records "<what>: CL_... (code)" and returns CLVARLEN_ERROR_OPENCL. */
clvarlen_status cv_cl_check(clvarlen_context *ctx, cl_int err, const char *what);

/**
 * The kernel `name` of cl/<file> compiled with `options` (-D specialisations),
 * from the in-memory cache, else the on-disk binary cache, else the source
 * (lib/kernel-source.c). The kernel is owned by the context; it may be used
 * until the context is destroyed. Build failures return
 * CLVARLEN_ERROR_KERNEL_BUILD with the build log in the message. Options
 * containing CV_SM90A_OPTION build for sm_90a through the PTX patch step
 * (lib/runtime/ptx-patch.c): NVIDIA Hopper devices only. Options containing
 * CV_PTX_MAXNREG_OPTION N (N in 16 .. 255) have every kernel of the program
 * capped at N registers through the same step (cv_ptx_cap_registers): NVIDIA
 * devices only (their program binaries are PTX).
 */
#define CV_SM90A_OPTION "-DCV_SM90A=1"
#define CV_PTX_MAXNREG_OPTION "-DCV_PTX_MAXNREG="
clvarlen_status cv_get_kernel(clvarlen_context *ctx, const char *file, const char *options,
                              const char *name, cl_kernel *kernel);

/** Releases every program and kernel of the context (kernel-source.c). */
void cv_programs_release(clvarlen_context *ctx);

/** Kernel argument setting that accumulates the first error. */
typedef struct cv_args {
    cl_kernel kernel;
    cl_uint index;
    cl_int err;
} cv_args;
static inline cv_args cv_args_begin(cl_kernel k)
{
    cv_args a = {k, 0, CL_SUCCESS};
    return a;
}
static inline void cv_arg_raw(cv_args *a, size_t size, const void *value)
{
    if (a->err == CL_SUCCESS)
        a->err = clSetKernelArg(a->kernel, a->index, size, value);
    a->index++;
}
#define CV_ARG(a, v) cv_arg_raw(&(a), sizeof(v), &(v))

/** clEnqueueNDRangeKernel with error reporting; global sizes are rounded up to local. */
clvarlen_status cv_enqueue(clvarlen_context *ctx, cl_kernel kernel, const char *what, cl_uint dims,
                           const size_t *global, const size_t *local, cl_uint num_events,
                           const cl_event *wait_list, cl_event *event);

/** A device buffer of max(bytes, 16); with `init` it is filled from host memory. */
clvarlen_status cv_buffer(clvarlen_context *ctx, size_t bytes, const void *init, cl_mem *mem);
/** Blocking read of bytes at offset into host memory (no-op for bytes == 0). */
clvarlen_status cv_read(clvarlen_context *ctx, cl_mem mem, size_t offset, size_t bytes, void *host,
                        cl_uint num_events, const cl_event *wait_list);
/** Blocking write from host memory after the wait list; *event (may be NULL) gets the
 * write's event (left NULL for bytes == 0, which enqueues nothing). */
clvarlen_status cv_write(clvarlen_context *ctx, cl_mem mem, size_t offset, size_t bytes,
                         const void *host, cl_uint num_events, const cl_event *wait_list,
                         cl_event *event);
/**
 * Blocking read of `rows` rows of row_bytes from mem (rows dev_stride_b apart,
 * from offset 0) into host (rows host_stride_b apart), after the wait list.
 * Only row bytes are written on the host, so bytes between rows stay as they are.
 */
clvarlen_status cv_read_rows(clvarlen_context *ctx, cl_mem mem, int64_t rows, size_t row_bytes,
                             size_t dev_stride_b, void *host, size_t host_stride_b,
                             cl_uint num_events, const cl_event *wait_list);
/**
 * The context's temp buffer, at least `bytes` long. One command chain uses it
 * at a time: chains follow each other on the context's in-order queue
 * (clvarlen_context_create_cl refuses out-of-order queues). Growing replaces
 * the buffer; commands still using the old one keep it alive.
 */
clvarlen_status cv_temp(clvarlen_context *ctx, size_t bytes, cl_mem *mem);
/** Releases a buffer if not NULL. */
void cv_release(cl_mem *mem);

/** cl_mem entry points start with this: OpenCL context present, wait list sane. */
clvarlen_status cv_cl_enter(clvarlen_context *ctx, const char *fn, cl_uint num_events,
                            const cl_event *wait_list);
/** A byte offset must be a multiple of `align`; names the argument in the message. */
clvarlen_status cv_check_offset(clvarlen_context *ctx, const char *fn, const char *what,
                                size_t offset, size_t align);

/* One cl_mem tensor argument of an entry point: the buffer and byte offset,
 * the element alignment the offset needs, and the bytes from the offset the
 * shapes say it spans (ext, its start ignored). */
typedef struct cv_mem_arg {
    const char *name;
    cl_mem mem;
    size_t offset, align;
    cv_extent ext;
    bool needed;        /* NULL is an error (else NULL means absent) */
    bool output;        /* written by the operation: must not overlap another argument */
    unsigned may_equal; /* bit j: may coincide exactly with argument j (in place) */
} cv_mem_arg;

/**
 * One argument: NULL when needed is CLVARLEN_ERROR_INVALID_ARGUMENT, as is an
 * offset not a multiple of align; a buffer smaller than offset + the extent's
 * span (CL_MEM_SIZE) is CLVARLEN_ERROR_BUFFER_TOO_SMALL. Messages name it.
 */
clvarlen_status cv_check_mem_arg(clvarlen_context *ctx, const char *fn, const cv_mem_arg *a);
/**
 * cv_check_mem_arg on each of n (at most 32) arguments, then aliasing: an
 * output sharing bytes with another argument in the same buffer (sub-buffers
 * resolved to their parent) is CLVARLEN_ERROR_INVALID_ARGUMENT
 * (cv_check_no_overlap).
 */
clvarlen_status cv_check_mem_args(clvarlen_context *ctx, const char *fn, const cv_mem_arg *a,
                                  size_t n);

/* ------------------------------------------------------------ command chains (cl-chain.c) */

/**
 * A chain of commands on the context's queue: each runs after the previous
 * one (the queue is in order; the caller's wait list holds the first), and
 * the last event goes to the caller. Every family's cl_mem and host paths
 * enqueue through a chain, so event ownership lives here: on any error
 * cv_chain_end (or cv_chain_abort) releases what the chain holds. Commands
 * create events only when the caller wants one back (want_event): on
 * NVIDIA's driver a launch that returns an event costs the host about twice
 * one that does not (H100: 15.7-30.9 against 7.6-13.6 us). With device checks
 * on, cv_chain_begin zeroes the context's check flag and cv_chain_end turns a
 * raised bit into a status.
 *
 *     cv_chain c;
 *     clvarlen_status st = cv_chain_begin(&c, ctx, num_events, wait_list, event != NULL,
 *                                         checks);
 *     if (st == CLVARLEN_SUCCESS)
 *         st = cv_chain_run(&c, kernel, "name", 1, &global, &local);
 *     return cv_chain_end(&c, fn, st, event);
 */
typedef struct cv_chain {
    clvarlen_context *ctx;
    cl_uint num_events;        /* the caller's wait list, for the first command */
    const cl_event *wait_list;
    cl_event last;             /* the last command's event (when it made one), owned here */
    cl_mem flag;               /* the device-check flag, NULL when checks are off */
    bool want_event;           /* the caller takes the last event: commands make events */
    bool started;              /* a command was enqueued: the wait list has been honoured */
} cv_chain;

/** Starts a chain; with `checks`, the device-check flag is zeroed (c->flag set).
 * want_event: cv_chain_end will be given an event pointer. */
clvarlen_status cv_chain_begin(cv_chain *c, clvarlen_context *ctx, cl_uint num_events,
                               const cl_event *wait_list, bool want_event, bool checks);
/** The wait list of the chain's next command. */
void cv_chain_wait_list(const cv_chain *c, cl_uint *num_events, const cl_event **wait_list);
/** Takes ownership of ev as the chain's last command. */
void cv_chain_take(cv_chain *c, cl_event ev);
/** Enqueues a kernel after the chain (cv_enqueue: global rounded up to local). */
clvarlen_status cv_chain_run(cv_chain *c, cl_kernel kernel, const char *what, cl_uint dims,
                             const size_t *global, const size_t *local);
/** Fills bytes of mem at offset with a pattern after the chain (no-op for 0 bytes). */
clvarlen_status cv_chain_fill(cv_chain *c, cl_mem mem, const void *pattern, size_t pattern_size,
                              size_t offset, size_t bytes);
/** Blocking read after the chain. */
clvarlen_status cv_chain_read(cv_chain *c, cl_mem mem, size_t offset, size_t bytes, void *host);
/** Blocking strided read of rows after the chain (cv_read_rows). */
clvarlen_status cv_chain_read_rows(cv_chain *c, cl_mem mem, int64_t rows, size_t row_bytes,
                                   size_t dev_stride_b, void *host, size_t host_stride_b);
/**
 * Ends the chain. st != SUCCESS: releases everything and returns st. Else,
 * with checks, waits and turns a raised check bit into an error naming fn;
 * then hands the last event to *event (a marker after the wait list when the
 * chain enqueued nothing; the only clEnqueueMarkerWithWaitList of the
 * library), or releases it when event is NULL.
 */
clvarlen_status cv_chain_end(cv_chain *c, const char *fn, clvarlen_status st, cl_event *event);
/** A marker after the chain's last command becomes its last event. */
clvarlen_status cv_chain_marker(cv_chain *c);
#if CLVARLEN_HAVE_CLBLAST
/** CLBlast's strided batched SGEMM (row-major, C = alpha A B(^T) + beta C, offsets and strides
 * in floats) on the chain: it waits for the chain's last event and becomes it. A failure
 * (CLBLAST's status in the message) is CLVARLEN_ERROR_OPENCL. */
clvarlen_status cv_chain_sgemm_batched(cv_chain *c, bool trans_b, size_t m, size_t n, size_t k,
                                       float alpha, cl_mem a, size_t a_off, size_t lda,
                                       size_t a_stride, cl_mem b, size_t b_off, size_t ldb,
                                       size_t b_stride, float beta, cl_mem cm, size_t c_off,
                                       size_t ldc, size_t c_stride, size_t batch);
#endif
/** Releases what the chain holds (error paths that do not reach cv_chain_end). */
void cv_chain_abort(cv_chain *c);

/* ------------------------------------------------------------ device-side validation (device-check.c, cl/check.cl) */

/* A per-context flag word that check kernels and bounds checks in op kernels
 * raise with atomic_or (bits CV_CHECK_* in cl/cv-shared.h); cv_chain_begin
 * zeroes it and cv_chain_end reads it. */

/** Zeroes the flag (enqueued, non-blocking); *flag receives the buffer. */
clvarlen_status cv_check_begin(clvarlen_context *ctx, cl_mem *flag);
/** Waits for `after` (or the queue), reads the flag and turns a set bit into an error naming fn. */
clvarlen_status cv_check_end(clvarlen_context *ctx, const char *fn, cl_event after);
/** Enqueues the cu_seqlens check (cu[0] == 0, non-decreasing, cu[n] == total when
 * total >= 0) on the chain; raises CV_CHECK_CU_SEQLENS. Needs c->flag. */
clvarlen_status cv_chain_check_cu_seqlens(cv_chain *c, cl_mem cu, size_t cu_offset, int64_t n,
                                          int64_t total);
/** Enqueues the range check of n int32 (v32) or int64 (v64) values at byte offset:
 * each in [lo, hi), or -1 when allow_minus1; else raises `bit`. Needs c->flag. */
clvarlen_status cv_chain_check_range(cv_chain *c, cl_mem v32, cl_mem v64, size_t offset,
                                     int64_t n, int64_t lo, int64_t hi, bool allow_minus1,
                                     int bit);
#endif /* CLVARLEN_HAVE_OPENCL */

/* ------------------------------------------------------------ program cache (program-cache.c) */

/** 128-bit content hash as 32 hex characters + NUL. */
void cv_hash_hex(const void *const *parts, const size_t *sizes, size_t n_parts, char out[33]);

/** What a cache entry is bound to: the parts of the key (every byte compiled, the build
 * options, platform, device, driver and clvarlen version), stored in the entry and
 * compared byte for byte on load, and their hash, which names the entry's file. */
#define CV_CACHE_KEY_MAX_PARTS 8
typedef struct cv_cache_key {
    const void *parts[CV_CACHE_KEY_MAX_PARTS];
    size_t sizes[CV_CACHE_KEY_MAX_PARTS];
    size_t n_parts;
    char hex[33];
} cv_cache_key;
/** Sets key->hex from the parts. */
void cv_cache_key_init(cv_cache_key *key);
/**
 * Loads the entry of key: 1 loaded (*data malloc'ed), 0 absent, cache off, directory
 * refused or no memory to load it, -1 damaged or bound to another key (logged once:
 * "program cache corrupt: ..."). A cache directory not owned by the user or writable by
 * group or others is refused with one log line, and ctx->cache_dir is set to NULL.
 */
int cv_cache_load(clvarlen_context *ctx, const cv_cache_key *key, unsigned char **data,
                  size_t *size);
/** Stores the entry of key (exclusive temporary file + rename, in a directory created mode
 * 0700); failures are logged, never fatal. */
void cv_cache_store(clvarlen_context *ctx, const cv_cache_key *key, const unsigned char *data,
                    size_t size);

#endif /* CLVARLEN_RUNTIME_H */
