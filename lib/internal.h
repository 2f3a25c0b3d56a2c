/* Internal interfaces shared by the library's translation units. Nothing here
 * is exported: the library is built with hidden visibility and a version
 * script, and only CLVARLEN_API functions of the public headers are visible.
 */
#ifndef CLVARLEN_INTERNAL_H
#define CLVARLEN_INTERNAL_H

#include "config.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <clvarlen/clvarlen.h>
#if CLVARLEN_HAVE_OPENCL
#  include <clvarlen/clvarlen-cl.h>
#endif

#if defined(__GNUC__)
#  define CV_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#  define CV_PRINTF(f, a)
#endif

#define CV_MIN(a, b) ((a) < (b) ? (a) : (b))
#define CV_MAX(a, b) ((a) > (b) ? (a) : (b))

/** The largest power of two <= x (1 for x < 2). */
static inline int64_t cv_pow2_floor(int64_t x)
{
    int64_t p = 1;
    while (p <= x / 2)
        p *= 2;
    return p;
}

/** The smallest power of two >= x (1 for x < 2); x <= 2^62. */
static inline int64_t cv_pow2_ceil(int64_t x)
{
    int64_t p = 1;
    while (p < x)
        p *= 2;
    return p;
}

/* ------------------------------------------------------------ CPU thread pool (lib/cpu/threadpool.c) */

typedef struct cv_pool cv_pool;

/** threads <= 0: one worker per physical core (hwloc), else sysconf. NULL on failure. */
cv_pool *cv_pool_create(int threads);
void cv_pool_destroy(cv_pool *pool);
int cv_pool_size(const cv_pool *pool);

/** Runs fn(arg, begin, end) over [0, n) in chunks of at least `grain` items, on
 * every worker and the calling thread; returns when all chunks are done. Chunks
 * are disjoint; their assignment to threads is not deterministic, so fn must
 * not depend on which thread runs it. */
typedef void (*cv_range_fn)(void *arg, int64_t begin, int64_t end);
void cv_pool_for(cv_pool *pool, int64_t n, int64_t grain, cv_range_fn fn, void *arg);

/* ------------------------------------------------------------ devices (lib/device.c, lib/device-db.c) */

#if CLVARLEN_HAVE_OPENCL
typedef struct cv_device {
    clvarlen_device_info info;
    cl_platform_id platform;
    cl_device_id id;
} cv_device;

/** All OpenCL devices, in platform then device order; *list is malloc'ed (NULL when n == 0). */
clvarlen_status cv_devices_enumerate(cv_device **list, size_t *n);
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
    size_t gdn_chunk_min;  /* gated delta: shortest sequence run chunked (AUTO); 0: never */
    size_t gdn_chunk_v_tile; /* gated delta chunked: V columns per work-group; 0: default */
    size_t gdn_chunk_wg;   /* gated delta chunked: work-group size (64, 128 or 256); 0: default */
    size_t attn_block_m;   /* attention: query rows per work-group */
    size_t attn_block_n;   /* attention: keys per staged tile */
    size_t attn_wg;        /* attention: work-group size */
    int nvidia_mma;        /* inline-PTX mma.sync fast paths allowed (NVIDIA, cc >= 8.0) */
} cv_tuning;

void cv_tuning_for(const clvarlen_device_info *info, cv_tuning *tuning);

/* ------------------------------------------------------------ context (lib/context.c) */

#if CLVARLEN_HAVE_OPENCL
typedef struct cv_program cv_program; /* lib/kernel-source.c */
#endif

struct clvarlen_context {
    char *error;               /* last error message, "" after success */
    size_t error_cap;
    clvarlen_log_fn log_fn;
    void *log_user;
    clvarlen_log_level log_level;
    int log_stderr;            /* CLVARLEN_LOG asked for messages on stderr */

    cv_pool *pool;
    clvarlen_device_info device;
    cv_tuning tuning;
    int device_checks;
    char *kernel_path;         /* option or CLVARLEN_KERNEL_PATH; may be NULL */
    char *cache_dir;           /* resolved cache directory; NULL = disabled */

#if CLVARLEN_HAVE_OPENCL
    int has_cl;
    cl_context cl_ctx;
    cl_device_id cl_dev;
    cl_platform_id cl_platform;
    cl_command_queue queue;
    cv_program *programs;      /* in-memory program cache, a list */
    cl_mem check_flag;         /* one int for device-side checks, made on first use */
    int gdn_shfl_refused;      /* the driver refused gated delta's warp shuffles */
    int exact_div;             /* f32 divide is correctly rounded (CL_DEVICE_SINGLE_FP_CONFIG) */
    /* Work space of the ops' command chains (cv_temp): kept across calls
     * because releasing a buffer that queued kernels still use blocks on some
     * drivers; grown on demand, freed by clvarlen_context_destroy. */
    cl_mem temp;
    size_t temp_bytes;
#endif
};

/** Records a message, logs it at error level and returns st (for `return cv_error(...)`). */
clvarlen_status cv_error(clvarlen_context *ctx, clvarlen_status st, const char *fmt, ...)
    CV_PRINTF(3, 4);
clvarlen_status cv_verror(clvarlen_context *ctx, clvarlen_status st, const char *fmt, va_list ap);
/** Clears the last error; every public entry point calls it first. */
void cv_clear_error(clvarlen_context *ctx);
void cv_log(clvarlen_context *ctx, clvarlen_log_level level, const char *fmt, ...) CV_PRINTF(3, 4);

/** Public entry points on a context start with CV_ENTER(ctx): NULL check and error reset. */
#define CV_ENTER_FN(ctx, fn)                                                                   \
    do {                                                                                       \
        if (!(ctx))                                                                            \
            return cv_error(NULL, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: context is NULL",     \
                            (fn));                                                             \
        cv_clear_error(ctx);                                                                   \
    } while (0)
#define CV_ENTER(ctx) CV_ENTER_FN(ctx, __func__)

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

/* ------------------------------------------------------------ validation (lib/validate.c) */

/** dtype known and its size; 0 if unknown. */
size_t cv_dtype_size(clvarlen_dtype dtype);
/** A float activation dtype (f32, f16, bf16). */
bool cv_is_float_act(clvarlen_dtype dtype);

/** Host-visible cu_seqlens [n+1]: cu[0] == 0, non-decreasing, and cu[n] == total
 * when total >= 0. `what` names the argument in the message. */
clvarlen_status cv_check_cu_seqlens(clvarlen_context *ctx, const char *fn, const char *what,
                                    const int32_t *cu, int64_t n, int64_t total);
/** Row geometry: row_elems > 0, stride 0 -> row_elems, stride >= row_elems;
 * rows * stride * size must fit in size_t (and int64). *stride_out gets the stride. */
clvarlen_status cv_check_rows(clvarlen_context *ctx, const char *fn, const char *what,
                              clvarlen_dtype dtype, int64_t row_elems, int64_t rows,
                              int64_t stride, int64_t *stride_out);
/** Bytes spanned by `rows` rows of row_elems at `stride` elements (0 when rows == 0). */
size_t cv_span_bytes(clvarlen_dtype dtype, int64_t row_elems, int64_t rows, int64_t stride);

/* ------------------------------------------------------------ f16 / bf16 on the host (lib/validate.c) */

float cv_half_to_float(uint16_t h);
uint16_t cv_float_to_half(float f);   /* round to nearest even */
float cv_bf16_to_float(uint16_t b);
uint16_t cv_float_to_bf16(float f);   /* round to nearest even, NaN kept quiet */
/** Element i of a float activation tensor as f32. */
static inline float cv_load_act(const void *p, clvarlen_dtype dtype, int64_t i)
{
    switch (dtype) {
    case CLVARLEN_DTYPE_F16: return cv_half_to_float(((const uint16_t *)p)[i]);
    case CLVARLEN_DTYPE_BF16: return cv_bf16_to_float(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}
static inline void cv_store_act(void *p, clvarlen_dtype dtype, int64_t i, float x)
{
    switch (dtype) {
    case CLVARLEN_DTYPE_F16: ((uint16_t *)p)[i] = cv_float_to_half(x); break;
    case CLVARLEN_DTYPE_BF16: ((uint16_t *)p)[i] = cv_float_to_bf16(x); break;
    default: ((float *)p)[i] = x; break;
    }
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
 * CLVARLEN_ERROR_KERNEL_BUILD with the build log in the message.
 */
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
/** Replaces the event in *slot by ev (the last command of a chain), releasing the old one. */
static inline void cv_event_replace(cl_event *slot, cl_event ev)
{
    if (*slot)
        clReleaseEvent(*slot);
    *slot = ev;
}
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

/* Device-side checks: a per-context flag word that check kernels and bounds
 * checks in op kernels set with atomic_or (codes in cl/common.clh). */
#define CV_CHECK_CU_SEQLENS 0x1
#define CV_CHECK_INDEX 0x2
#define CV_CHECK_CAPACITY 0x4
#define CV_CHECK_VALUE 0x8
/** Zeroes the flag (enqueued, non-blocking); *flag receives the buffer. */
clvarlen_status cv_check_begin(clvarlen_context *ctx, cl_mem *flag);
/** Waits for `after` (or the queue), reads the flag and turns a set bit into an error naming fn. */
clvarlen_status cv_check_end(clvarlen_context *ctx, const char *fn, cl_event after);
/** Enqueues the cu_seqlens validity kernel (lib/op-segment.c) writing into the check flag. */
clvarlen_status cv_check_cu_seqlens_device(clvarlen_context *ctx, cl_mem cu, size_t cu_offset,
                                           int64_t n, int64_t total, cl_uint num_events,
                                           const cl_event *wait_list, cl_event *event);
#endif /* CLVARLEN_HAVE_OPENCL */

/* ------------------------------------------------------------ program cache (lib/program-cache.c) */

/** 128-bit content hash as 32 hex characters + NUL. */
void cv_hash_hex(const void *const *parts, const size_t *sizes, size_t n_parts, char out[33]);
/** Loads entry `key`: 1 loaded (*data malloc'ed), 0 absent or cache off, -1 corrupt or truncated. */
int cv_cache_load(clvarlen_context *ctx, const char *key, unsigned char **data, size_t *size);
/** Stores entry `key` (temporary file + rename); failures are logged, never fatal. */
void cv_cache_store(clvarlen_context *ctx, const char *key, const unsigned char *data, size_t size);

#endif /* CLVARLEN_INTERNAL_H */
