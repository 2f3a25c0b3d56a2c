/* The core layer: what every other part of the library builds on, and which
 * depends on nothing above it (only config.h, the public header, cl/cv-shared.h
 * and libc/hwloc). Errors and logging (error.c), the dtype table and f16/bf16
 * conversions (dtype.c), host-side argument checks (validate.c), status strings
 * (status.c) and the CPU thread pool (threadpool.c).
 *
 * Nothing here is exported: the library is built with hidden visibility and a
 * version script, and only CLVARLEN_API functions of the public headers are
 * visible.
 */
#ifndef CLVARLEN_CORE_H
#define CLVARLEN_CORE_H

#include "config.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <clvarlen/clvarlen.h>

#include "cv-shared.h"

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

/* ------------------------------------------------------------ errors and logging (error.c) */

/** The part of a context the core and the CPU twins use: its last-error
 * message, log settings and CPU pool. struct clvarlen_context
 * (lib/runtime/runtime.h) begins with one, so they reach it through the
 * opaque handle without depending on the runtime. */
typedef struct cv_pool cv_pool;
typedef struct cv_ctx_base {
    char *error;               /* last error message, "" after success */
    size_t error_cap;
    clvarlen_log_fn log_fn;
    void *log_user;
    clvarlen_log_level log_level;
    int log_stderr;            /* CLVARLEN_LOG asked for messages on stderr */
    cv_pool *pool;             /* the CPU fallback's threads (threadpool.c) */

    /* process.c: every public call on the context holds `lock` (recursive),
     * so threads may share a context; fork_gen is cv_fork_generation() when
     * the context was created or adopted by a forked child. */
    pthread_mutex_t lock;
    atomic_ulong fork_gen;
    bool process_bound;        /* holds OpenCL objects: unusable in a forked child */
    bool orphaned;             /* process_bound, seen in a forked child: every call fails */
} cv_ctx_base;

/** The base of a context: its first member (C11 6.7.2.1p15). */
static inline cv_ctx_base *cv_base(const clvarlen_context *ctx)
{
    return (cv_ctx_base *)(uintptr_t)(const void *)ctx;
}

/** Records a message, logs it at error level and returns st (for `return cv_error(...)`).
 * ctx NULL: the calling thread's slot (clvarlen_last_error(NULL)). */
clvarlen_status cv_error(clvarlen_context *ctx, clvarlen_status st, const char *fmt, ...)
    CV_PRINTF(3, 4);
/** CLVARLEN_ERROR_NO_OPENCL for a clvarlen-cl.h entry point of a build without
 * OpenCL (the generated stubs, lib/runtime/gen-cl-stubs.py). */
clvarlen_status cv_no_opencl(clvarlen_context *ctx, const char *fn);
clvarlen_status cv_verror(clvarlen_context *ctx, clvarlen_status st, const char *fmt, va_list ap);
/** Clears the last error; every public entry point calls it first. */
void cv_clear_error(clvarlen_context *ctx);
void cv_log(clvarlen_context *ctx, clvarlen_log_level level, const char *fmt, ...) CV_PRINTF(3, 4);

/* ------------------------------------------------------------ processes and threads (process.c) */

/** The number of fork()s between the first context of this process's lineage
 * and now, as seen by this process: a child's count is its parent's plus one. */
unsigned long cv_fork_generation(void);

/** Sets up the base's lock and fork generation (called by context creation
 * before anything else); OUT_OF_MEMORY (nothing to undo) when that fails. */
clvarlen_status cv_base_init(cv_ctx_base *base);
/** Destroys what cv_base_init made (not the error buffer or the pool). */
void cv_base_fini(cv_ctx_base *base);
/** True when the context was created before a fork() and is seen in the child. */
bool cv_base_forked(const cv_ctx_base *base);

/** What CV_ENTER holds for the rest of a public call: the locked context. */
typedef struct cv_entry {
    cv_ctx_base *locked;       /* NULL when cv_enter failed (nothing locked) */
    clvarlen_status status;
} cv_entry;
/** Locks ctx for one public call and clears its last error. In a forked child it
 * first adopts the context (a fresh lock, the CPU pool rebuilt) or, for an OpenCL
 * context, records the error and returns it without locking. */
cv_entry cv_enter(clvarlen_context *ctx, const char *fn);
/** Unlocks what cv_enter locked (the cleanup of CV_ENTER's variable). */
void cv_leave(cv_entry *entry);

#if !defined(__GNUC__)
#  error "clvarlen needs __attribute__((cleanup)) (GCC or Clang) for CV_ENTER"
#endif
/**
 * Public entry points on a context start with CV_ENTER(ctx) as their first
 * statement, at function scope: NULL check, then the context's lock, held until
 * the function returns (a cleanup variable, so every return unlocks), and the
 * last error reset. One per function.
 */
#define CV_ENTER_FN(ctx, fn)                                                                   \
    if (!(ctx))                                                                                \
        return cv_error(NULL, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: context is NULL", (fn));  \
    cv_entry cv_entry_ __attribute__((cleanup(cv_leave))) = cv_enter((ctx), (fn));             \
    if (cv_entry_.status != CLVARLEN_SUCCESS)                                                  \
    return cv_entry_.status
#define CV_ENTER(ctx) CV_ENTER_FN(ctx, __func__)

/* ------------------------------------------------------------ dtypes (dtype.c) */

/** One row of the dtype table: the only mapping from clvarlen_dtype. */
typedef struct cv_dtype_info {
    const char *name;   /* "f32", ... (clvarlen_dtype_name) */
    size_t size;        /* bytes per element */
    int kernel_code;    /* CV_DT_* of cl/cv-shared.h, -1 where no kernel takes it */
    bool float_act;     /* a float activation dtype (f32, f16, bf16) */
} cv_dtype_info;

/** The table row of dtype; NULL if unknown. */
const cv_dtype_info *cv_dtype(clvarlen_dtype dtype);
/** dtype's size; 0 if unknown. */
size_t cv_dtype_size(clvarlen_dtype dtype);
/** A float activation dtype (f32, f16, bf16). */
bool cv_is_float_act(clvarlen_dtype dtype);
/** The kernels' code for dtype (CV_DT_*), -1 where none. */
int cv_dtype_kernel_code(clvarlen_dtype dtype);

#include "core/half.h"

/** Element i of a float activation tensor as f32 (the CPU path's load; an
 * inline switch, since it sits in the inner loops). */
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

/* ------------------------------------------------------------ ABI growth (validate.c) */

/* The caller's struct (its first 4 bytes are struct_size) of `full_size` bytes
 * in this library: init writes `size` bytes of `defaults` (zeros past
 * full_size) with struct_size = size; in copies the caller's struct_size
 * bytes (at least min_size, else INVALID_ARGUMENT naming `what`) over
 * `full`, which holds the defaults, and sets full's struct_size to
 * full_size; out writes min(size, full_size) bytes of `full` with
 * struct_size set to that count (a newer caller's further bytes are left as
 * they are). */
void cv_struct_init(void *dst, size_t size, void *defaults, size_t full_size);
clvarlen_status cv_struct_in(clvarlen_context *ctx, const char *fn, const char *what,
                             const void *caller, void *full, size_t full_size, size_t min_size);
void cv_struct_out(void *dst, size_t size, void *full, size_t full_size);

/* ------------------------------------------------------------ host-side checks (validate.c) */

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

/* The bytes a tensor covers: `rows` rows of row_bytes, stride_b apart, from
 * byte `start` (a host address, or a byte offset into one device buffer). */
typedef struct cv_extent {
    uint64_t start;
    uint64_t row_bytes, stride_b;
    int64_t rows;
} cv_extent;

/** `bytes` contiguous bytes from start (empty when bytes == 0). */
static inline cv_extent cv_extent_bytes(uint64_t start, uint64_t bytes)
{
    cv_extent e = {start, bytes, bytes, bytes > 0 ? 1 : 0};
    return e;
}
/** rows of row_bytes, stride_b apart, from start. */
static inline cv_extent cv_extent_rows(uint64_t start, int64_t rows, uint64_t row_bytes,
                                       uint64_t stride_b)
{
    cv_extent e = {start, row_bytes, stride_b, rows};
    return e;
}
/** Bytes from start to the end of the last row (0 when empty). */
uint64_t cv_extent_span(const cv_extent *e);
/** Whether two extents of one address space share a byte (exact for two views
 * with one row stride, such as column slices of one fused tensor; otherwise
 * overlapping byte ranges count). */
bool cv_extents_overlap(const cv_extent *a, const cv_extent *b);

/* One argument of an aliasing check: a tensor in an address space (`space`:
 * NULL for host memory, the root buffer for device memory). */
typedef struct cv_region {
    const char *name;
    const void *space;
    cv_extent ext;
    bool output;
    /* bit j: this output may coincide exactly with region j (in place) */
    unsigned may_equal;
} cv_region;

/** Every output must share no byte with any other region (input or output),
 * except an exact coincidence its may_equal allows: else
 * CLVARLEN_ERROR_INVALID_ARGUMENT naming both. At most 32 regions. */
clvarlen_status cv_check_no_overlap(clvarlen_context *ctx, const char *fn, const cv_region *r,
                                    size_t n);
/** A host region (ptr NULL: empty). */
static inline cv_region cv_host_region(const char *name, const void *ptr, cv_extent ext,
                                       bool output)
{
    cv_region r = {name, NULL, ext, output, 0};
    r.ext.start = (uint64_t)(uintptr_t)ptr;
    if (!ptr)
        r.ext.rows = 0;
    return r;
}

/* ------------------------------------------------------------ CPU thread pool (threadpool.c) */

/** threads <= 0: one worker per physical core (hwloc), else sysconf. All or nothing:
 * NULL when an allocation or a thread fails (threads already started are joined). */
cv_pool *cv_pool_create(int threads);
/** A pool that hands every job to the caller's parallel-for (clvarlen_options_set_parallel_for);
 * its size is max_threads. NULL when out of memory. */
cv_pool *cv_pool_create_user(clvarlen_parallel_for_fn fn, void *user, int max_threads);
/** Joins the workers and frees the pool; in a forked child that never adopted the
 * pool, frees it without joining (the workers were the parent's). */
void cv_pool_destroy(cv_pool *pool);
/** In a forked child: the parent's workers do not exist here; starts new ones (as
 * many as start; the pool shrinks, down to the calling thread alone, if some fail). */
void cv_pool_adopt(cv_pool *pool);
int cv_pool_size(const cv_pool *pool);

/** Runs fn(arg, begin, end) over [0, n) in chunks of at least `grain` items, on
 * every worker and the calling thread; returns when all chunks are done. Chunks
 * are disjoint; their assignment to threads is not deterministic, so fn must
 * not depend on which thread runs it. */
typedef void (*cv_range_fn)(void *arg, int64_t begin, int64_t end);
void cv_pool_for(cv_pool *pool, int64_t n, int64_t grain, cv_range_fn fn, void *arg);

/* ------------------------------------------------------------ CPU instruction set (cpu-isa.c) */

/** Vector levels of the CPU twins' microkernels (lib/cpu/attention-kern.c is
 * compiled once per level on x86-64; elsewhere only GENERIC exists). */
typedef enum cv_cpu_isa {
    CV_CPU_ISA_GENERIC = 0, /* portable C (GCC vector extensions, baseline target) */
    CV_CPU_ISA_AVX2 = 1,    /* AVX2 + FMA (+ F16C) */
    CV_CPU_ISA_AVX512 = 2,  /* AVX-512 F/BW/VL/DQ */
} cv_cpu_isa;

/** The best level this CPU has, or CLVARLEN_CPU_ISA's (generic, avx2, avx512)
 * when that is lower. Detected once per process. */
cv_cpu_isa cv_cpu_isa_level(void);
const char *cv_cpu_isa_name(cv_cpu_isa isa);

#endif /* CLVARLEN_CORE_H */
