/* clvarlen: variable-length (packed, cu_seqlens) kernels for LLM serving,
 * on any OpenCL device or the built-in CPU fallback.
 *
 * This header has no OpenCL types. Every entry point here takes host memory:
 * on a context bound to an OpenCL device the library uploads the inputs, runs
 * its kernels and reads the outputs back; on the CPU fallback it computes in
 * place. The cl_mem entry points are in <clvarlen/clvarlen-cl.h>.
 *
 * Conventions (SPEC.md section 0):
 * - every function returns a clvarlen_status; on any error nothing is
 *   written to the outputs, and clvarlen_last_error() holds a message. (One
 *   exception: when an OpenCL read-back itself fails after the kernels ran,
 *   CLVARLEN_ERROR_OPENCL, outputs read back before it may hold results.)
 * - errors every function may return besides those it lists:
 *   CLVARLEN_ERROR_INVALID_ARGUMENT (a NULL context or required pointer, a
 *   negative count or size, an unknown enum value, a stride smaller than a
 *   row), CLVARLEN_ERROR_UNSUPPORTED (a dtype the operation does not take),
 *   CLVARLEN_ERROR_INVALID_CU_SEQLENS (cu[0] != 0, decreasing, or a last
 *   entry that disagrees with a given total), CLVARLEN_ERROR_OVERFLOW (a size
 *   in bytes beyond int64, or more than INT32_MAX - 1 sequences or tokens
 *   where int32 indices address them), CLVARLEN_ERROR_OUT_OF_MEMORY, and on
 *   an OpenCL context CLVARLEN_ERROR_OPENCL, CLVARLEN_ERROR_KERNEL_NOT_FOUND
 *   and CLVARLEN_ERROR_KERNEL_BUILD (first use of a kernel);
 * - no output may share a byte with an input or with another output unless
 *   the function says so (in place is allowed only where documented, e.g.
 *   clvarlen_attention_merge2): CLVARLEN_ERROR_INVALID_ARGUMENT, nothing
 *   written. Strided views of one tensor whose rows interleave without
 *   sharing bytes (column slices at one stride) do not overlap;
 * - cu_seqlens are int32 [n + 1], cu[0] = 0, non-decreasing;
 * - token strides are in elements; 0 means "contiguous";
 * - threads: distinct contexts are independent (all state lives in the
 *   handle) and run in parallel. A context may also be shared by threads:
 *   each call holds the context's lock for its whole duration, so calls on
 *   one context run one at a time and give the results of the same calls
 *   made one after another (on OpenCL, the commands of one call stay
 *   together on the context's in-order queue). clvarlen_context_destroy must
 *   not run while another thread is inside a call on the same context. The
 *   message of a shared context may be another thread's: read
 *   clvarlen_last_error(context) only when no other thread is calling (or
 *   give each thread its own context). Log handlers run on the calling
 *   thread with the context locked. The device list is made once per
 *   process, by the first call that needs it (a failed attempt is not
 *   kept: the next call asks the driver again). Environment variables are
 *   read when contexts are created and devices selected: do not change them
 *   (setenv) from another thread meanwhile;
 * - fork(): in the child, a context made before the fork on the CPU
 *   fallback stays usable: its first call there starts new worker threads
 *   (as many as start; the calling thread alone if none does), even when
 *   another thread of the parent was inside a call on it at the fork (the
 *   outputs of that call are then unspecified in the child). A context on
 *   an OpenCL device is not: the driver's state stayed in the parent, so
 *   every call on it in the child fails with CLVARLEN_ERROR_INVALID_ARGUMENT
 *   (clvarlen_context_destroy is allowed and frees only host memory), and
 *   once a parent has loaded the OpenCL driver, clvarlen_context_create in
 *   its children fails with CLVARLEN_ERROR_OPENCL for an OpenCL device (the
 *   device "cpu" works). clvarlen_context_create_cl is the caller's
 *   business: the cl_context given must be the child's own;
 * - the library never prints (unless a log handler or CLVARLEN_LOG asks)
 *   and never aborts;
 * - ABI growth: every struct that crosses the API starts with
 *   uint32_t struct_size, and later versions only append fields. The names
 *   clvarlen_*_params_init, clvarlen_device_query, clvarlen_context_device
 *   and clvarlen_cp_plan are macros that pass the caller's compile-time
 *   sizeof of the struct to the *_sized function. The library reads only
 *   what the caller's struct has (fields past it take their defaults) and
 *   writes only that much: a program built against an older header keeps
 *   working with a newer library, and one built against a newer header with
 *   an older library (the fields it does not know are ignored). The smallest
 *   size accepted is the struct's first released layout, CLVARLEN_*_MIN_SIZE
 *   (smaller: CLVARLEN_ERROR_INVALID_ARGUMENT).
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef CLVARLEN_H
#define CLVARLEN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32) && !defined(CLVARLEN_STATIC)
#  ifdef CLVARLEN_BUILDING
#    define CLVARLEN_API __declspec(dllexport)
#  else
#    define CLVARLEN_API __declspec(dllimport)
#  endif
#elif defined(__GNUC__)
#  define CLVARLEN_API __attribute__((visibility("default")))
#else
#  define CLVARLEN_API
#endif

/* ---------------------------------------------------------------- version */

#define CLVARLEN_VERSION_MAJOR 0
#define CLVARLEN_VERSION_MINOR 1
#define CLVARLEN_VERSION_PATCH 0
#define CLVARLEN_VERSION_ENCODE(maj, min, pat) (((maj) * 10000) + ((min) * 100) + (pat))
#define CLVARLEN_VERSION \
    CLVARLEN_VERSION_ENCODE(CLVARLEN_VERSION_MAJOR, CLVARLEN_VERSION_MINOR, CLVARLEN_VERSION_PATCH)

/** The version of the library actually loaded, encoded as CLVARLEN_VERSION. */
CLVARLEN_API int clvarlen_version(void);
/** The same, as "MAJOR.MINOR.PATCH". */
CLVARLEN_API const char *clvarlen_version_string(void);

/* ---------------------------------------------------------------- status */

typedef enum clvarlen_status {
    CLVARLEN_SUCCESS = 0,
    /** A NULL pointer, a negative size, a shape mismatch, an unknown enum. */
    CLVARLEN_ERROR_INVALID_ARGUMENT = 1,
    /** cu_seqlens not starting at 0, decreasing, or not ending at the total. */
    CLVARLEN_ERROR_INVALID_CU_SEQLENS = 2,
    /** An index (row, state slot, page) outside the tensor it addresses. */
    CLVARLEN_ERROR_INDEX_OUT_OF_RANGE = 3,
    /** An output capacity smaller than what the operation produces. */
    CLVARLEN_ERROR_BUFFER_TOO_SMALL = 4,
    /** A valid request this build or device does not implement (dtype, head dim). */
    CLVARLEN_ERROR_UNSUPPORTED = 5,
    CLVARLEN_ERROR_OUT_OF_MEMORY = 6,
    /** No device matches the requested selection. */
    CLVARLEN_ERROR_DEVICE_NOT_FOUND = 7,
    /** An OpenCL call failed; the message names the call and the CL error. */
    CLVARLEN_ERROR_OPENCL = 8,
    /** A kernel file was not found on the kernel search path. */
    CLVARLEN_ERROR_KERNEL_NOT_FOUND = 9,
    /** A kernel failed to compile; the message holds the build log. */
    CLVARLEN_ERROR_KERNEL_BUILD = 10,
    /** A clvarlen-cl.h entry point called on a context without OpenCL (the CPU fallback),
     * or in a build configured without OpenCL. */
    CLVARLEN_ERROR_NO_OPENCL = 11,
    /** An integer size that does not fit the type the operation uses. */
    CLVARLEN_ERROR_OVERFLOW = 12,
    CLVARLEN_ERROR_INTERNAL = 13
} clvarlen_status;

/** A sentence describing the status ("invalid argument"); never NULL. */
CLVARLEN_API const char *clvarlen_status_str(clvarlen_status status);
/** The enumerator's name ("CLVARLEN_ERROR_INVALID_ARGUMENT"); never NULL. */
CLVARLEN_API const char *clvarlen_status_name(clvarlen_status status);

/* ---------------------------------------------------------------- dtypes */

typedef enum clvarlen_dtype {
    CLVARLEN_DTYPE_F32 = 0,
    CLVARLEN_DTYPE_F16 = 1,
    CLVARLEN_DTYPE_BF16 = 2,
    CLVARLEN_DTYPE_F64 = 3,
    CLVARLEN_DTYPE_I32 = 4,
    CLVARLEN_DTYPE_I64 = 5,
    /** Opaque bytes: rows of any size, copied bitwise. */
    CLVARLEN_DTYPE_U8 = 6
} clvarlen_dtype;

/** Bytes per element, or 0 for an unknown dtype. */
CLVARLEN_API size_t clvarlen_dtype_size(clvarlen_dtype dtype);
/** "f32", "f16", ...; "unknown" for an unknown dtype. */
CLVARLEN_API const char *clvarlen_dtype_name(clvarlen_dtype dtype);

/* ---------------------------------------------------------------- devices */

typedef enum clvarlen_vendor {
    CLVARLEN_VENDOR_OTHER = 0,
    CLVARLEN_VENDOR_NVIDIA = 1,
    CLVARLEN_VENDOR_AMD = 2,
    CLVARLEN_VENDOR_INTEL = 3,
    /** An OpenCL CPU device (PoCL, Intel CPU runtime), or the built-in fallback. */
    CLVARLEN_VENDOR_CPU = 4
} clvarlen_vendor;

typedef enum clvarlen_device_kind {
    CLVARLEN_DEVICE_CPU_FALLBACK = 0, /**< the built-in C implementation */
    CLVARLEN_DEVICE_DISCRETE_GPU = 1,
    CLVARLEN_DEVICE_INTEGRATED_GPU = 2,
    CLVARLEN_DEVICE_OPENCL_CPU = 3,
    CLVARLEN_DEVICE_ACCELERATOR = 4
} clvarlen_device_kind;

#define CLVARLEN_NAME_MAX 128

/** What the library knows about one device. Filled by clvarlen_device_query(). */
typedef struct clvarlen_device_info {
    uint32_t struct_size;   /**< written by the library: the bytes it filled */
    int index;              /**< position in the list; -1 for the CPU fallback; -2 for a
                                 device given to clvarlen_context_create_cl that the
                                 enumeration does not list */
    clvarlen_device_kind kind;
    clvarlen_vendor vendor;
    char platform_name[CLVARLEN_NAME_MAX];
    char platform_vendor[CLVARLEN_NAME_MAX];
    char device_name[CLVARLEN_NAME_MAX];
    char driver_version[CLVARLEN_NAME_MAX];
    char opencl_c_version[CLVARLEN_NAME_MAX]; /**< "OpenCL C 1.2 ..." */
    uint32_t vendor_id;     /**< CL_DEVICE_VENDOR_ID */
    uint32_t compute_units;
    uint32_t max_clock_mhz;
    uint64_t global_mem_bytes;
    uint64_t local_mem_bytes;
    uint64_t max_work_group_size;
    int has_fp16;           /**< cl_khr_fp16 reported (half loads work regardless) */
    int has_fp64;
    int has_subgroups;      /**< cl_khr_subgroups or cl_intel_subgroups */
    int cc_major, cc_minor; /**< NVIDIA compute capability, 0 when not reported */
} clvarlen_device_info;

/**
 * The number of OpenCL devices visible (0 without OpenCL or without any
 * platform: not an error). The driver is asked once per process; devices
 * that appear later are not seen. Errors: CLVARLEN_ERROR_INVALID_ARGUMENT
 * (count NULL), CLVARLEN_ERROR_OUT_OF_MEMORY, CLVARLEN_ERROR_OPENCL (in a
 * forked child whose parent loaded the driver but made no list); *count is
 * written only on success.
 */
CLVARLEN_API clvarlen_status clvarlen_device_count(size_t *count);
/**
 * Fills *info for device index (0 <= index < count); index -1 describes the
 * CPU fallback. Errors: CLVARLEN_ERROR_INVALID_ARGUMENT (info NULL, index
 * < -1), CLVARLEN_ERROR_DEVICE_NOT_FOUND (index >= count).
 */
CLVARLEN_API clvarlen_status clvarlen_device_query_sized(int index, clvarlen_device_info *info,
                                                        size_t info_size);
#define clvarlen_device_query(index, info)                                                     \
    clvarlen_device_query_sized((index), (info), sizeof(clvarlen_device_info))
/** The first released size of clvarlen_device_info (see ABI growth above). */
#define CLVARLEN_DEVICE_INFO_MIN_SIZE sizeof(clvarlen_device_info)
/**
 * The device a context would use for the selection string `spec` (NULL: the
 * CLVARLEN_DEVICE environment variable, else the default order: discrete GPU,
 * integrated GPU, accelerator, then the CPU fallback, which on a CPU is faster
 * than an OpenCL CPU device and compiles nothing; OpenCL CPU devices such as
 * PoCL serve only when named or through "opencl", Mesa's llvmpipe only when
 * named, as it silently cuts long loops short). *index is -1
 * for the CPU fallback. `reason` (may be NULL) receives a sentence saying why.
 * A spec that matches nothing is CLVARLEN_ERROR_DEVICE_NOT_FOUND.
 * spec: "cpu" (the built-in fallback), "opencl" (the best OpenCL device:
 * GPU, accelerator, then OpenCL CPU device; DEVICE_NOT_FOUND when there is
 * none), a decimal index from clvarlen-test list, or a case-insensitive substring of the platform name, platform vendor
 * or device name ("pocl", "nvidia", "amd", "intel").
 */
CLVARLEN_API clvarlen_status clvarlen_device_select(const char *spec, int *index, char *reason,
                                                     size_t reason_size);

/* ---------------------------------------------------------------- logging */

typedef enum clvarlen_log_level {
    CLVARLEN_LOG_ERROR = 0,
    CLVARLEN_LOG_INFO = 1,
    CLVARLEN_LOG_DEBUG = 2
} clvarlen_log_level;

typedef void (*clvarlen_log_fn)(clvarlen_log_level level, const char *message, void *user_data);

/* ---------------------------------------------------------------- options */

typedef struct clvarlen_options clvarlen_options;

CLVARLEN_API clvarlen_status clvarlen_options_create(clvarlen_options **options);
CLVARLEN_API void clvarlen_options_destroy(clvarlen_options *options);
/** Device selection string (see clvarlen_device_select); NULL restores the default. */
CLVARLEN_API clvarlen_status clvarlen_options_set_device(clvarlen_options *options, const char *spec);
/** Worker threads of the CPU pool, 0 to 256; 0 = one per physical core (the default).
 * Each pool binds its workers to cores (with hwloc); pools of different contexts start
 * at different cores, round robin over the machine. */
CLVARLEN_API clvarlen_status clvarlen_options_set_threads(clvarlen_options *options, int threads);
/** A range task of the library: work on [begin, end). */
typedef void (*clvarlen_task_fn)(void *task_arg, int64_t begin, int64_t end);
/**
 * A parallel-for the caller supplies (a runtime's own thread pool) for the CPU
 * work of contexts made with these options, instead of the library's pool:
 * fn(user, n, grain, task, task_arg) must call task(task_arg, begin, end) on
 * disjoint ranges covering [0, n), each at least grain long except the last,
 * on at most max_threads threads at once (the library sizes per-thread scratch
 * by it), and return once every range has finished. The library calls fn from
 * the thread of an API call, one call at a time per context; fn must not call
 * the library. fn NULL restores the library's pool (max_threads ignored).
 * Errors: CLVARLEN_ERROR_INVALID_ARGUMENT (options NULL, max_threads outside
 * 1..256 with fn set).
 */
typedef void (*clvarlen_parallel_for_fn)(void *user, int64_t n, int64_t grain,
                                         clvarlen_task_fn task, void *task_arg);
CLVARLEN_API clvarlen_status clvarlen_options_set_parallel_for(clvarlen_options *options,
                                                               clvarlen_parallel_for_fn fn,
                                                               void *user, int max_threads);
/** A colon-separated list of directories searched first for .cl files. */
CLVARLEN_API clvarlen_status clvarlen_options_set_kernel_path(clvarlen_options *options,
                                                              const char *path);
/** The program-binary cache directory; "off" disables the on-disk cache. */
CLVARLEN_API clvarlen_status clvarlen_options_set_cache_dir(clvarlen_options *options,
                                                            const char *dir);
/** A log handler (NULL: silent unless CLVARLEN_LOG is set) and the most verbose level it gets. */
CLVARLEN_API clvarlen_status clvarlen_options_set_log(clvarlen_options *options,
                                                      clvarlen_log_fn fn, void *user_data,
                                                      clvarlen_log_level max_level);
/**
 * With device checks on, the cl_mem entry points validate device-resident
 * cu_seqlens and indices with a kernel before the operation, skip the
 * operation if they are invalid, and block to report the error. Off by
 * default (the host-memory entry points always check on the host).
 */
CLVARLEN_API clvarlen_status clvarlen_options_set_device_checks(clvarlen_options *options, int on);

/* ---------------------------------------------------------------- context */

typedef struct clvarlen_context clvarlen_context;

/**
 * Creates a context on the selected device (options may be NULL). Having no
 * OpenCL platform at all is not an error: the context uses the CPU fallback.
 * An explicit selection that matches nothing is CLVARLEN_ERROR_DEVICE_NOT_FOUND.
 * CLVARLEN_ERROR_OUT_OF_MEMORY when memory or one of the CPU pool's threads
 * cannot be had (nothing is left behind: the threads started are joined);
 * CLVARLEN_ERROR_OPENCL for an OpenCL device in a child forked after its
 * parent loaded the driver (see fork() above). *context is written only on
 * success.
 */
CLVARLEN_API clvarlen_status clvarlen_context_create(const clvarlen_options *options,
                                                     clvarlen_context **context);
CLVARLEN_API void clvarlen_context_destroy(clvarlen_context *context);
/**
 * The message of the last failed call on this context (or, for context ==
 * NULL, of the last failed call on this thread that had no context). Empty
 * after a success. Valid until the next call on the same context (from any
 * thread, when threads share it).
 */
CLVARLEN_API const char *clvarlen_last_error(const clvarlen_context *context);
/** Describes the context's device (index -1 for the CPU fallback). */
CLVARLEN_API clvarlen_status clvarlen_context_device_sized(clvarlen_context *context,
                                                           clvarlen_device_info *info,
                                                           size_t info_size);
#define clvarlen_context_device(context, info)                                                 \
    clvarlen_context_device_sized((context), (info), sizeof(clvarlen_device_info))
/** The number of CPU worker threads the context uses (the OpenCL path uses them for host work). */
CLVARLEN_API int clvarlen_context_threads(const clvarlen_context *context);

/* ---------------------------------------------------------------- kernels ahead of time */

/* Op groups of clvarlen_context_precompile and clvarlen_supports. */
#define CLVARLEN_PRECOMPILE_SEGMENT 0x1u            /**< the segment ops (shape-independent) */
#define CLVARLEN_PRECOMPILE_ATTENTION 0x2u          /**< varlen attention forward (and merge) */
#define CLVARLEN_PRECOMPILE_ATTENTION_BACKWARD 0x4u /**< attention forward and backward */
#define CLVARLEN_PRECOMPILE_PAGED 0x8u              /**< cache append, paged attention */
#define CLVARLEN_PRECOMPILE_GATED_DELTA 0x10u       /**< the gated delta rule, K = V = head_dim */

/** Progress of clvarlen_context_precompile: step `done` of `total` finished (`what` names it). */
typedef void (*clvarlen_progress_fn)(void *user, int done, int total, const char *what);

/** What clvarlen_context_precompile builds. Initialise with clvarlen_precompile_params_init. */
typedef struct clvarlen_precompile_params {
    uint32_t struct_size;      /**< set by init (ABI growth, above) */
    unsigned ops;              /**< CLVARLEN_PRECOMPILE_* bits; 0 = all */
    clvarlen_dtype dtypes[4];  /**< the activation dtypes the runtime uses */
    int32_t n_dtypes;          /**< 0..4; 0 = bf16 */
    int32_t head_dims[8];      /**< the head dims (gated delta: K = V) */
    int32_t n_head_dims;       /**< 0..8; 0 = 128 */
    /** The model's heads (the GQA group picks decode kernels); 0 = 32 and 8. */
    int32_t heads_q, heads_kv;
    int32_t page_size;         /**< the paged cache's page size; 0 = 16 */
    clvarlen_progress_fn progress; /**< may be NULL */
    void *progress_user;
} clvarlen_precompile_params;

/** Defaults: struct_size = size, everything else 0 (see the fields). */
CLVARLEN_API void clvarlen_precompile_params_init_sized(clvarlen_precompile_params *params,
                                                        size_t size);
#define clvarlen_precompile_params_init(params)                                                  \
    clvarlen_precompile_params_init_sized((params), sizeof(clvarlen_precompile_params))
/** The first released size of clvarlen_precompile_params (see ABI growth above). */
#define CLVARLEN_PRECOMPILE_PARAMS_MIN_SIZE sizeof(clvarlen_precompile_params)

/**
 * Builds, ahead of time (service start, package post-install), the kernels the
 * chosen ops use on the context's device for each dtype and head dim: every op
 * runs once on a tiny zero-filled batch in the shapes that select its kernel
 * variants (short and long sequences; decode, split and prefill rows), so the
 * programs built are those real calls of these shapes build, and they are kept
 * in the program cache for later processes. On the CPU fallback it only runs
 * the ops. params NULL: the defaults. Errors: CLVARLEN_ERROR_INVALID_ARGUMENT
 * (bad params), and the first op's error (UNSUPPORTED for a dtype or head dim
 * the op does not take, KERNEL_BUILD ...), its message naming the op, dtype and
 * head dim; the steps before it stay built.
 */
CLVARLEN_API clvarlen_status clvarlen_context_precompile(clvarlen_context *context,
                                                         const clvarlen_precompile_params *params);
/**
 * Whether `op` (one CLVARLEN_PRECOMPILE_* bit) takes dtype and head_dim with
 * these heads on the context's device: CLVARLEN_SUCCESS, or the error a call
 * would meet (CLVARLEN_ERROR_UNSUPPORTED for a dtype or head dim it does not
 * take, or a kernel that does not fit the device), with the reason in
 * clvarlen_last_error. It runs the op on a tiny batch, so it also builds (and
 * caches) the op's kernels for these shapes. The segment ops ignore dtype and
 * head_dim. Errors also: CLVARLEN_ERROR_INVALID_ARGUMENT (unknown op, heads
 * not positive).
 */
CLVARLEN_API clvarlen_status clvarlen_supports(clvarlen_context *context, unsigned op,
                                               clvarlen_dtype dtype, int32_t head_dim,
                                               int32_t heads_q, int32_t heads_kv);
/** Blocks until all work queued by the context has finished. */
CLVARLEN_API clvarlen_status clvarlen_context_finish(clvarlen_context *context);

/* ================================================================ segment family (SPEC 2) */

/** cu_seqlens[0..n] from lengths[0..n-1] (exclusive scan). Negative lengths or a sum over
 * INT32_MAX fail; cu_seqlens must not overlap lengths (not in place). */
CLVARLEN_API clvarlen_status clvarlen_cu_seqlens_from_lengths(clvarlen_context *context,
                                                              const int32_t *lengths, int64_t n,
                                                              int32_t *cu_seqlens);
/** lengths[0..n-1] from a valid cu_seqlens[0..n]; lengths must not overlap cu_seqlens. */
CLVARLEN_API clvarlen_status clvarlen_lengths_from_cu_seqlens(clvarlen_context *context,
                                                              const int32_t *cu_seqlens, int64_t n,
                                                              int32_t *lengths);
/**
 * Token maps for total_tokens = cu_seqlens[n] tokens: seq_id[t] (the last s
 * with cu[s] <= t, so empty sequences are skipped) and
 * pos[t] = t - cu[seq_id[t]] + offsets[seq_id[t]] (offsets may be NULL: 0).
 * seq_id or pos may be NULL (not computed), not both; they must not overlap
 * each other or the inputs.
 */
CLVARLEN_API clvarlen_status clvarlen_token_maps(clvarlen_context *context,
                                                 const int32_t *cu_seqlens, int64_t n,
                                                 int64_t total_tokens, const int32_t *offsets,
                                                 int32_t *seq_id, int32_t *pos);

/**
 * pack (flash-attn unpad_input): padded [batch, max_seqlen, row] with a valid
 * prefix of valid_lens[b] rows (0 <= valid_lens[b] <= max_seqlen) -> packed
 * [total, row], cu_seqlens [batch + 1], and src_index[t] = b * max_seqlen + s
 * (int64; may be NULL). `row` is row_elems elements of dtype; padded_stride is
 * the row stride of the padded tensor in elements (0: row_elems). A valid_lens
 * entry outside [0, max_seqlen] is CLVARLEN_ERROR_INVALID_ARGUMENT. total must
 * fit capacity_tokens (else CLVARLEN_ERROR_BUFFER_TOO_SMALL, nothing written);
 * *total_tokens (may be NULL) receives it. No output (packed, cu_seqlens,
 * src_index, *total_tokens) may overlap padded, valid_lens or another output.
 */
CLVARLEN_API clvarlen_status clvarlen_pack(clvarlen_context *context, clvarlen_dtype dtype,
                                           int64_t row_elems, const void *padded,
                                           int64_t padded_stride, int64_t batch,
                                           int64_t max_seqlen, const int32_t *valid_lens,
                                           int64_t capacity_tokens, void *packed,
                                           int32_t *cu_seqlens, int64_t *src_index,
                                           int64_t *total_tokens);
/**
 * pack with a general mask [batch, max_seqlen] (nonzero byte = keep; holes
 * allowed, order kept). Indices come from the mask's positions, never from a
 * sum of mask values. Outputs (and their aliasing rule) as clvarlen_pack; the
 * mask is never written and the caller's outputs are never used as scratch.
 */
CLVARLEN_API clvarlen_status clvarlen_pack_masked(clvarlen_context *context, clvarlen_dtype dtype,
                                                  int64_t row_elems, const void *padded,
                                                  int64_t padded_stride, int64_t batch,
                                                  int64_t max_seqlen, const uint8_t *mask,
                                                  int64_t capacity_tokens, void *packed,
                                                  int32_t *cu_seqlens, int64_t *src_index,
                                                  int64_t *total_tokens);
/**
 * unpack (flash-attn pad_input): packed [total_tokens, row] -> padded
 * [batch, max_seqlen, row]: row src_index[t] of padded gets packed row t;
 * every other padded row is filled with *pad_value (one element of dtype;
 * NULL: zero bytes). src_index entries must be in [0, batch*max_seqlen)
 * (else CLVARLEN_ERROR_INDEX_OUT_OF_RANGE) and distinct (a repeat is
 * CLVARLEN_ERROR_INVALID_ARGUMENT). padded must not overlap packed, src_index
 * or *pad_value.
 */
CLVARLEN_API clvarlen_status clvarlen_unpack(clvarlen_context *context, clvarlen_dtype dtype,
                                             int64_t row_elems, const void *packed,
                                             int64_t packed_stride, int64_t total_tokens,
                                             const int64_t *src_index, int64_t batch,
                                             int64_t max_seqlen, const void *pad_value,
                                             void *padded, int64_t padded_stride);

typedef enum clvarlen_scatter_mode {
    CLVARLEN_SCATTER_OVERWRITE = 0,
    /** dst += src; f16/bf16 rows are summed in f32 and rounded once. f32, f16, bf16 and i32
     * only: other dtypes are CLVARLEN_ERROR_UNSUPPORTED. */
    CLVARLEN_SCATTER_ACCUMULATE = 1
} clvarlen_scatter_mode;

/** Scatter flags. */
#define CLVARLEN_SCATTER_ZERO_REST 0x1u /**< rows of dst not named by index are zeroed */
/** The caller promises distinct indices (cl_mem entry points: enables a faster accumulate). */
#define CLVARLEN_SCATTER_UNIQUE_INDICES 0x2u

/**
 * gather: dst[m] = src[index[m]] for m < n_index; index -1 writes a zero row;
 * any other index outside [0, src_rows) is CLVARLEN_ERROR_INDEX_OUT_OF_RANGE.
 * dst must not overlap src or index (no in-place gather).
 */
CLVARLEN_API clvarlen_status clvarlen_gather_rows(clvarlen_context *context, clvarlen_dtype dtype,
                                                  int64_t row_elems, const void *src,
                                                  int64_t src_rows, int64_t src_stride,
                                                  const int32_t *index, int64_t n_index, void *dst,
                                                  int64_t dst_stride);
/**
 * scatter: dst[index[m]] = src[m] (or +=) for m < n_index; index -1 skips
 * row m; any other index outside [0, dst_rows) is
 * CLVARLEN_ERROR_INDEX_OUT_OF_RANGE. Overwrite with a repeated index is
 * CLVARLEN_ERROR_INVALID_ARGUMENT; accumulate sums repeated indices in index
 * order (m ascending). dst must not overlap src or index.
 */
CLVARLEN_API clvarlen_status clvarlen_scatter_rows(clvarlen_context *context, clvarlen_dtype dtype,
                                                   int64_t row_elems, const void *src,
                                                   int64_t src_stride, const int32_t *index,
                                                   int64_t n_index, void *dst, int64_t dst_rows,
                                                   int64_t dst_stride, clvarlen_scatter_mode mode,
                                                   unsigned flags);

/**
 * seqlens_expanded and page-table expansion for speculative decoding (SPEC 2.4).
 * kv_len[n]: KV length including the new tokens; q_len[n] new tokens per
 * sequence, or NULL for a uniform uniform_q_len (target verify).
 * seqlens_expanded[sum q] = concat_s [kv_s - q_s + 1 .. kv_s], each clamped at >= 0.
 * page_table [n, page_cols] with row stride page_stride (may be NULL: no
 * expansion) -> page_table_out [sum q, col_limit] with row stride out_stride,
 * row s repeated q_s times; col_limit <= page_cols (0: page_cols).
 * A negative kv_len or q_len is CLVARLEN_ERROR_INVALID_ARGUMENT, as is
 * col_limit > page_cols or a stride smaller than its row.
 * seqlens_expanded may be NULL (only the page table is expanded). Outputs must
 * hold capacity rows (sum q > capacity: CLVARLEN_ERROR_BUFFER_TOO_SMALL);
 * *total (may be NULL) receives sum q. The outputs must not overlap the
 * inputs or each other.
 */
CLVARLEN_API clvarlen_status clvarlen_seqlens_expand(clvarlen_context *context,
                                                     const int32_t *kv_len, const int32_t *q_len,
                                                     int32_t uniform_q_len, int64_t n,
                                                     const int32_t *page_table, int64_t page_cols,
                                                     int64_t page_stride, int64_t col_limit,
                                                     int64_t capacity, int32_t *seqlens_expanded,
                                                     int32_t *page_table_out, int64_t out_stride,
                                                     int64_t *total);

/** Per-document context-parallel shard plan (SPEC 2.5) for rank `rank` of `world`. */
typedef struct clvarlen_cp_plan_out {
    uint32_t struct_size;      /**< out: the bytes of the struct the library honoured */
    int32_t *local_cu_seqlens; /**< [n + 1], required: document s has head + tail tokens */
    int32_t *head_cu;          /**< [n + 1] or NULL: cumulative lengths of chunk `rank` */
    int32_t *tail_cu;          /**< [n + 1] or NULL: cumulative lengths of chunk 2W-1-rank */
    int32_t *global_index;     /**< [capacity] or NULL: global token of each local token */
    int32_t *position;         /**< [capacity] or NULL: position of each local token in its document */
    int64_t capacity;          /**< rows global_index and position can hold */
    int64_t local_tokens;      /**< out: local_cu_seqlens[n] */
    int32_t max_head;          /**< out: longest head half over the documents */
    int32_t max_tail;          /**< out: longest tail half */
} clvarlen_cp_plan_out;

/** The outputs (the plan's arrays and *plan) must not overlap cu_seqlens or
 * each other; on error nothing is written, the plan's counts included. */
CLVARLEN_API clvarlen_status clvarlen_cp_plan_sized(clvarlen_context *context,
                                                    const int32_t *cu_seqlens, int64_t n,
                                                    int32_t world, int32_t rank,
                                                    clvarlen_cp_plan_out *plan, size_t plan_size);
#define clvarlen_cp_plan(context, cu_seqlens, n, world, rank, plan)                            \
    clvarlen_cp_plan_sized((context), (cu_seqlens), (n), (world), (rank), (plan),              \
                           sizeof(clvarlen_cp_plan_out))
/** The first released size of clvarlen_cp_plan_out (see ABI growth above). */
#define CLVARLEN_CP_PLAN_OUT_MIN_SIZE sizeof(clvarlen_cp_plan_out)
/**
 * CP gather: this rank's local rows [local_tokens, row] from the global packed
 * rows [cu_seqlens[n], row], laid out [chunk rank | chunk 2W-1-rank] per
 * document. local_capacity bounds the output rows: fewer than this rank's
 * local tokens is CLVARLEN_ERROR_BUFFER_TOO_SMALL. Invalid world/rank
 * (world < 1, rank outside [0, world)) is CLVARLEN_ERROR_INVALID_ARGUMENT.
 * local_rows must not overlap global_rows or cu_seqlens.
 */
CLVARLEN_API clvarlen_status clvarlen_cp_gather(clvarlen_context *context, clvarlen_dtype dtype,
                                                int64_t row_elems, const void *global_rows,
                                                int64_t global_stride, const int32_t *cu_seqlens,
                                                int64_t n, int32_t world, int32_t rank,
                                                void *local_rows, int64_t local_stride,
                                                int64_t local_capacity);
/**
 * CP scatter (the backward of the gather): local rows -> global rows.
 * CLVARLEN_SCATTER_OVERWRITE with CLVARLEN_SCATTER_ZERO_REST gives zeros
 * elsewhere; CLVARLEN_SCATTER_ACCUMULATE adds into global_rows, which must
 * not overlap local_rows or cu_seqlens.
 */
CLVARLEN_API clvarlen_status clvarlen_cp_scatter(clvarlen_context *context, clvarlen_dtype dtype,
                                                 int64_t row_elems, const void *local_rows,
                                                 int64_t local_stride, const int32_t *cu_seqlens,
                                                 int64_t n, int32_t world, int32_t rank,
                                                 void *global_rows, int64_t global_stride,
                                                 clvarlen_scatter_mode mode, unsigned flags);

/**
 * gen_seq_lens (SPEC 2.6): out[world][n] int32, each row summing to total,
 * none negative, identical on every platform for the same seed. u_i is the
 * top 24 bits of mix64(seed ^ mix64((row << 32) | i)) scaled by 2^-24, where
 * mix64 is SplitMix64's finaliser applied to x + 0x9E3779B97F4A7C15.
 * In f32, in this order: w_i = u_i + 0.25/n; S = w_0 + w_1 + ... (left to
 * right); len_i = rint(w_i / S * total) (round half to even); the last length
 * absorbs the rounding difference, and if that would make it negative it
 * becomes 0 and the deficit is taken from the lengths before it, last first.
 * n >= 1, world >= 1, 0 <= total <= 2^24 (exact in f32).
 */
CLVARLEN_API clvarlen_status clvarlen_gen_seq_lens(clvarlen_context *context, uint64_t seed,
                                                   int32_t world, int32_t n, int64_t total,
                                                   int32_t *out);

/* ================================================================ varlen attention (SPEC 1) */

/**
 * Shapes and options of a varlen attention forward call. Initialise with
 * clvarlen_attention_params_init (which sets every default below), then set
 * the shapes.
 *
 * Tensors (token-major, heads and the last dimension contiguous):
 *   q [total_q, heads_q, head_dim], k [total_k, heads_kv, head_dim],
 *   v [total_k, heads_kv, head_dim_v], o [total_q, heads_q, head_dim_v],
 *   lse [heads_q, total_q] (f32, contiguous).
 */
typedef struct clvarlen_attention_params {
    uint32_t struct_size;  /**< set by init; lets later versions append fields */
    clvarlen_dtype dtype;  /**< q, k, v and o: f32, f16 or bf16 (arithmetic is f32) */
    int64_t n_seqs;        /**< N >= 0: cu_seqlens_q and cu_seqlens_k have N + 1 entries */
    int64_t total_q;       /**< Tq = cu_seqlens_q[N] */
    int64_t total_k;       /**< Tk = cu_seqlens_k[N] */
    int32_t heads_q;       /**< Hq > 0 */
    int32_t heads_kv;      /**< Hk > 0 with Hq % Hk == 0; query head h reads kv head h / (Hq / Hk) */
    int32_t head_dim;      /**< D of q and k: a multiple of 16 in [16, 256] (fastest: 64, 96, 128, 256) */
    int32_t head_dim_v;    /**< Dv of v and o, same rule (0: head_dim) */
    /** Token strides in elements (0 = contiguous: heads * dim). A stride may
     * exceed the row, for views into a fused qkv projection. */
    int64_t q_stride, k_stride, v_stride, o_stride;
    /** Host-known upper bounds of the per-sequence lengths (0 = unknown). The
     * host-memory entry point checks them; the cl_mem entry point trusts them
     * (they only bound work sizes). */
    int32_t max_seqlen_q, max_seqlen_k;
    float scale;           /**< score scale; 0 = 1/sqrt(head_dim); must be finite */
    /** Causal masking, aligned bottom-right: with Lq queries and Lk keys in a
     * sequence, query i sees key j iff j <= i + Lk - Lq. */
    int causal;
    /** Sliding window: query i sees key j iff i + d - window_left <= j <= i + d + window_right
     * (d = Lk - Lq); -1 = unbounded on that side. Combines with causal. */
    int32_t window_left, window_right;
    float softcap;         /**< > 0: scores become softcap * tanh(score / softcap); 0 = off */
    /** Attention dropout (training, SPEC 1.2): each probability is kept with
     * probability 1 - dropout_p and scaled by 1 / (1 - dropout_p), from a
     * counter-based generator (Philox4x32-10) keyed by dropout_seed and
     * dropout_offset, so the backward regenerates the forward's mask and every
     * device draws the same mask. 0 = off; must be in [0, 1). lse is the
     * undropped softmax's. */
    float dropout_p;
    uint64_t dropout_seed;   /**< the generator's key */
    uint64_t dropout_offset; /**< a stream number: use a new one per layer and step */
} clvarlen_attention_params;

/** Defaults: struct_size = size, f32, no sequences, scale 0 (1/sqrt(D)), not
 * causal, window (-1, -1), no softcap, no dropout, contiguous strides. Writes
 * `size` bytes (past the struct this library knows: zeros). */
CLVARLEN_API void clvarlen_attention_params_init_sized(clvarlen_attention_params *params,
                                                       size_t size);
#define clvarlen_attention_params_init(params)                                                     \
    clvarlen_attention_params_init_sized((params), sizeof(clvarlen_attention_params))
/** The first released size of clvarlen_attention_params (see ABI growth above):
 * the layout before the dropout fields. */
#define CLVARLEN_ATTENTION_PARAMS_MIN_SIZE offsetof(clvarlen_attention_params, dropout_p)

/**
 * Varlen attention forward (SPEC 1): for each sequence s, the queries
 * [cu_seqlens_q[s], cu_seqlens_q[s+1]) attend to the keys
 * [cu_seqlens_k[s], cu_seqlens_k[s+1]) of the same sequence.
 *
 * q, k, v: inputs as described by params (dtype). cu_seqlens_q/_k: int32
 * [N + 1], each starting at 0, non-decreasing, ending at total_q/total_k.
 * q_pos (may be NULL): int32 [total_q], each query's position within its
 * sequence's keys; it replaces i + Lk - Lq in the causal and window rules
 * (context-parallel shards attending to a sequence's full K/V).
 * o: output [total_q, heads_q, head_dim_v] in dtype (elements between rows of
 * a strided o are left as they are). lse (may be NULL): f32 [heads_q,
 * total_q], the natural log of each row's softmax denominator.
 * A row that sees no key gets o = 0 and lse = -inf. o and lse must not
 * overlap the inputs or each other (CLVARLEN_ERROR_INVALID_ARGUMENT). An
 * empty batch (N = 0 or total_q = 0) is a valid no-op.
 *
 * Errors: CLVARLEN_ERROR_INVALID_ARGUMENT (NULL, bad shape, stride, scale,
 * window, softcap or max_seqlen), CLVARLEN_ERROR_INVALID_CU_SEQLENS,
 * CLVARLEN_ERROR_UNSUPPORTED (dtype or head dim), CLVARLEN_ERROR_OVERFLOW,
 * and on an OpenCL context the errors of the device (OPENCL, OUT_OF_MEMORY,
 * KERNEL_NOT_FOUND, KERNEL_BUILD). Nothing is written on error.
 */
CLVARLEN_API clvarlen_status clvarlen_attention_forward(clvarlen_context *context,
                                                        const clvarlen_attention_params *params,
                                                        const void *q, const void *k, const void *v,
                                                        const int32_t *cu_seqlens_q,
                                                        const int32_t *cu_seqlens_k,
                                                        const int32_t *q_pos, void *o, float *lse);
/**
 * Options of the attention backward that the forward does not have. NULL
 * stands for the defaults of clvarlen_attention_bwd_params_init.
 */
typedef struct clvarlen_attention_bwd_params {
    uint32_t struct_size; /**< set by init; lets later versions append fields */
    /** Token strides in elements of do [total_q, heads_q, head_dim_v] and of
     * the outputs dq [total_q, heads_q, head_dim], dk [total_k, heads_kv,
     * head_dim], dv [total_k, heads_kv, head_dim_v]; 0 = contiguous. */
    int64_t do_stride, dq_stride, dk_stride, dv_stride;
    /** Nonzero: dq, dk and dv are f32 (the caller accumulates them); 0: the
     * inputs' dtype, rounded once. */
    int grad_f32;
    /** Nonzero: dq, dk and dv bitwise identical across runs, thread counts and
     * work-group counts on one device. Every path is deterministic today (each
     * output element is summed by one thread in a fixed order, SPEC 1.2), so
     * this costs nothing; it stays a promise if a faster atomic path lands. */
    int deterministic;
} clvarlen_attention_bwd_params;

/** Defaults: struct_size set, contiguous strides, gradients in the input dtype,
 * deterministic. */
CLVARLEN_API void clvarlen_attention_bwd_params_init_sized(clvarlen_attention_bwd_params *bwd,
                                                           size_t size);
#define clvarlen_attention_bwd_params_init(bwd)                                                    \
    clvarlen_attention_bwd_params_init_sized((bwd), sizeof(clvarlen_attention_bwd_params))
/** The first released size of clvarlen_attention_bwd_params (see ABI growth above). */
#define CLVARLEN_ATTENTION_BWD_PARAMS_MIN_SIZE sizeof(clvarlen_attention_bwd_params)

/**
 * Varlen attention backward (SPEC 1.2, FlashAttention semantics): from the
 * forward's inputs q, k, v, its output o and lse (f32 [heads_q, total_q], as
 * clvarlen_attention_forward wrote them, same params including the dropout
 * seed and offset) and the output gradient do (params->dtype, layout of o with
 * bwd->do_stride), computes
 *   dq [total_q, heads_q, head_dim], dk [total_k, heads_kv, head_dim],
 *   dv [total_k, heads_kv, head_dim_v]
 * in params->dtype (f32 with bwd->grad_f32), accumulated in f32. For GQA/MQA
 * dk and dv sum over the query heads of each KV head. Every forward option
 * applies (causal, window, softcap, scale, q_pos, dropout). A row whose lse is
 * not finite (a row that saw no key) contributes nothing. Every element of dq,
 * dk and dv is written (rows of keys no query sees get 0); bytes between
 * strided rows are left as they are. dq, dk and dv must not overlap the inputs
 * or each other.
 *
 * Errors: those of clvarlen_attention_forward, plus
 * CLVARLEN_ERROR_INVALID_ARGUMENT for a NULL o, do or lse, a bad bwd (struct
 * size, stride) or overlapping outputs. Nothing is written on error.
 */
CLVARLEN_API clvarlen_status clvarlen_attention_backward(
    clvarlen_context *context, const clvarlen_attention_params *params,
    const clvarlen_attention_bwd_params *bwd, const void *q, const void *k, const void *v,
    const void *o, const void *dout, const float *lse, const int32_t *cu_seqlens_q,
    const int32_t *cu_seqlens_k, const int32_t *q_pos, void *dq, void *dk, void *dv);

/**
 * N-way merge of partial attention results of the same rows (split KV,
 * context/ring parallel): o_parts [n_parts, tokens, heads, head_dim_v]
 * (dtype, contiguous), lse_parts [n_parts, heads, tokens] f32 ->
 * o [tokens, heads, head_dim_v] (dtype) and lse [heads, tokens] (may be NULL):
 * lse = log(sum_p exp(lse_p)), o = sum_p exp(lse_p - lse) o_p, in f32.
 * +inf (and NaN) in lse_parts is read as -inf, and a part with lse -inf is
 * ignored (its o is not read); rows where every part is -inf (or n_parts = 0)
 * get o = 0, lse = -inf. n_parts >= 0, tokens >= 0, heads > 0, head_dim_v > 0;
 * dtype f32, f16 or bf16. The outputs must not overlap the inputs or each
 * other, not even exactly (o = o_parts with one part).
 * Errors: CLVARLEN_ERROR_INVALID_ARGUMENT (NULL, negative or zero sizes,
 * overlapping buffers), CLVARLEN_ERROR_UNSUPPORTED (another dtype),
 * CLVARLEN_ERROR_OVERFLOW (sizes beyond int64 bytes), and the common ones.
 */
CLVARLEN_API clvarlen_status clvarlen_attention_merge(clvarlen_context *context,
                                                      clvarlen_dtype dtype, int64_t n_parts,
                                                      int64_t tokens, int32_t heads,
                                                      int32_t head_dim_v, const void *o_parts,
                                                      const float *lse_parts, void *o, float *lse);
/**
 * Two-way merge with separate buffers, the step of ring attention:
 * (o_a, lse_a) and (o_b, lse_b), each o [tokens, heads, head_dim_v] (dtype)
 * and lse [heads, tokens] f32, -> (o, lse) with the rules of
 * clvarlen_attention_merge. lse may be NULL. In place is allowed: o may be
 * o_a or o_b and lse may be lse_a or lse_b (exactly, not partly overlapping:
 * that, or o overlapping lse, is CLVARLEN_ERROR_INVALID_ARGUMENT).
 * Errors as clvarlen_attention_merge.
 */
CLVARLEN_API clvarlen_status clvarlen_attention_merge2(clvarlen_context *context,
                                                       clvarlen_dtype dtype, int64_t tokens,
                                                       int32_t heads, int32_t head_dim_v,
                                                       const void *o_a, const float *lse_a,
                                                       const void *o_b, const float *lse_b,
                                                       void *o, float *lse);

/* ================================================================ paged KV cache (SPEC 1.1) */

/**
 * Shapes of a paged KV cache append (vLLM's reshape_and_cache). Initialise
 * with clvarlen_kv_append_params_init, then set the shapes.
 *
 * Tensors: k [n_tokens, heads_kv, head_dim], v [n_tokens, heads_kv,
 * head_dim_v] (token-major, strided along tokens), slot_mapping int64
 * [n_tokens], and the caches k_cache [num_pages, page_size, heads_kv,
 * head_dim], v_cache [num_pages, page_size, heads_kv, head_dim_v]
 * (contiguous).
 */
typedef struct clvarlen_kv_append_params {
    uint32_t struct_size;       /**< set by init; lets later versions append fields */
    clvarlen_dtype dtype;       /**< k and v: f32, f16 or bf16 */
    clvarlen_dtype cache_dtype; /**< the caches: f32, f16 or bf16 (rounded to nearest even) */
    int64_t n_tokens;           /**< new tokens, >= 0 */
    int64_t num_pages;          /**< pages in each cache, > 0 */
    int32_t page_size;          /**< tokens per page, >= 1 */
    int32_t heads_kv;           /**< > 0 */
    int32_t head_dim;           /**< > 0 */
    int32_t head_dim_v;         /**< > 0 (0: head_dim) */
    int64_t k_stride, v_stride; /**< token strides of k and v in elements (0 = contiguous) */
} clvarlen_kv_append_params;

/** Defaults: struct_size set, f32 inputs and cache, everything else 0. */
CLVARLEN_API void clvarlen_kv_append_params_init_sized(clvarlen_kv_append_params *params,
                                                       size_t size);
#define clvarlen_kv_append_params_init(params)                                                     \
    clvarlen_kv_append_params_init_sized((params), sizeof(clvarlen_kv_append_params))
/** The first released size of clvarlen_kv_append_params (see ABI growth above). */
#define CLVARLEN_KV_APPEND_PARAMS_MIN_SIZE sizeof(clvarlen_kv_append_params)

/**
 * Cache append (SPEC 1.1): token t's k and v rows go to slot
 * slot_mapping[t] = page * page_size + offset of k_cache and v_cache; -1
 * skips the token. Errors: CLVARLEN_ERROR_INDEX_OUT_OF_RANGE (a slot outside
 * [0, num_pages * page_size) other than -1), CLVARLEN_ERROR_INVALID_ARGUMENT
 * (NULL, bad shape or stride, two tokens mapped to one slot, caches
 * overlapping the inputs or each other), CLVARLEN_ERROR_UNSUPPORTED (dtype),
 * CLVARLEN_ERROR_OVERFLOW, and the common ones. Nothing is written on error.
 * n_tokens = 0 is a valid no-op. Host memory in and out: the copy runs on
 * the host on every context (clvarlen_cl_kv_cache_append runs on the device).
 */
CLVARLEN_API clvarlen_status clvarlen_kv_cache_append(clvarlen_context *context,
                                                      const clvarlen_kv_append_params *params,
                                                      const void *k, const void *v,
                                                      const int64_t *slot_mapping, void *k_cache,
                                                      void *v_cache);

/**
 * Shapes and options of a paged attention forward call (decode, speculative
 * verify, chunked prefill). Initialise with clvarlen_paged_params_init, then
 * set the shapes.
 *
 * Tensors: q [total_q, heads_q, head_dim] (token stride q_stride), the caches
 * k_cache [num_pages, page_size, heads_kv, head_dim] and v_cache [num_pages,
 * page_size, heads_kv, head_dim_v] (contiguous, dtype; the [num_pages,
 * heads_kv, page_size, D] layout is not accepted), page_table int32
 * [n_rows, page_table_stride] (the first max_pages columns used),
 * cache_seqlens int32 [n_rows], cu_seqlens_q int32 [n_rows + 1],
 * o [total_q, heads_q, head_dim_v] (token stride o_stride),
 * lse [heads_q, total_q] f32.
 */
typedef struct clvarlen_paged_params {
    uint32_t struct_size;      /**< set by init; lets later versions append fields */
    clvarlen_dtype dtype;      /**< q, o and both caches: f32, f16 or bf16 */
    int64_t n_rows;            /**< B >= 0: page-table rows; cu_seqlens_q has B + 1 entries */
    int64_t total_q;           /**< cu_seqlens_q[B] */
    int64_t num_pages;         /**< pages in each cache, > 0 */
    int32_t page_size;         /**< tokens per page, >= 1 (1 is sglang's page_table_1) */
    int32_t max_pages;         /**< page-table columns > 0; cache_seqlens <= max_pages * page_size */
    int64_t page_table_stride; /**< elements between page-table rows (0 = max_pages) */
    int32_t heads_q;           /**< Hq > 0 */
    int32_t heads_kv;          /**< Hk > 0 with Hq % Hk == 0 */
    int32_t head_dim;          /**< D of q and k: a multiple of 16 in [16, 256] */
    int32_t head_dim_v;        /**< Dv of v and o, same rule (0: head_dim) */
    int64_t q_stride, o_stride; /**< token strides in elements (0 = contiguous) */
    /** Host-known upper bound of the per-row query counts (0 = unknown). The
     * host-memory entry point checks it, as the cl_mem one does with device
     * checks on (without them a longer row gives unspecified values); on
     * the device it picks the kernel: rows of at most a few queries (decode,
     * verify) run a kernel that reads each key once for all query heads of a
     * KV head. */
    int32_t max_seqlen_q;
    float scale;               /**< score scale; 0 = 1/sqrt(head_dim); must be finite */
    int causal;                /**< causal, bottom-right: query i at cache_seqlens - len_q + i */
    /** Sliding window as in clvarlen_attention_params (-1 = unbounded). */
    int32_t window_left, window_right;
    float softcap;             /**< > 0: softcap * tanh(score / softcap); 0 = off */
    /** Key ranges per row (split-KV, flash-decoding), combined by the LSE
     * merge: 0 = automatic (split when rows x KV heads cannot fill the
     * device), n >= 1 forces n (at most 256). */
    int32_t num_splits;
} clvarlen_paged_params;

/** Defaults: struct_size set, f32, no rows, scale 0 (1/sqrt(D)), not causal,
 * window (-1, -1), no softcap, contiguous strides, automatic splits. */
CLVARLEN_API void clvarlen_paged_params_init_sized(clvarlen_paged_params *params,
                                                   size_t size);
#define clvarlen_paged_params_init(params)                                                         \
    clvarlen_paged_params_init_sized((params), sizeof(clvarlen_paged_params))
/** The first released size of clvarlen_paged_params (see ABI growth above). */
#define CLVARLEN_PAGED_PARAMS_MIN_SIZE sizeof(clvarlen_paged_params)

/**
 * Paged attention forward (SPEC 1.1): the queries [cu_seqlens_q[b],
 * cu_seqlens_q[b+1]) of row b attend to the first cache_seqlens[b] tokens of
 * the cache through page-table row b (token j at page page_table[b][j /
 * page_size], offset j % page_size); query i sits at position
 * cache_seqlens[b] - len_q[b] + i. The result equals clvarlen_attention_forward
 * on each row's cache gathered into contiguous K/V (up to rounding); lse may
 * be NULL; a row with no visible key gets o = 0, lse = -inf. Page-table
 * entries past a row's used pages are never read. n_rows = 0 or total_q = 0
 * is a valid no-op.
 *
 * Errors: CLVARLEN_ERROR_INVALID_ARGUMENT (NULL, bad shape, stride, scale,
 * window, softcap, num_splits or max_seqlen_q, cache_seqlens[b] < len_q[b] or
 * > max_pages * page_size, outputs overlapping the inputs),
 * CLVARLEN_ERROR_INDEX_OUT_OF_RANGE (a used page-table entry outside
 * [0, num_pages)), CLVARLEN_ERROR_INVALID_CU_SEQLENS,
 * CLVARLEN_ERROR_UNSUPPORTED (dtype or head dim), CLVARLEN_ERROR_OVERFLOW, and
 * the common ones. Nothing is written on error.
 */
CLVARLEN_API clvarlen_status clvarlen_paged_attention_forward(
    clvarlen_context *context, const clvarlen_paged_params *params, const void *q,
    const void *k_cache, const void *v_cache, const int32_t *cu_seqlens_q,
    const int32_t *page_table, const int32_t *cache_seqlens, void *o, float *lse);

/* ================================================================ gated delta rule (SPEC 3) */

/** Layout of a state (and of an intermediate state) within its slot. */
typedef enum clvarlen_state_layout {
    CLVARLEN_STATE_VK = 0, /**< [HV, V, K]: pool [slots, HV, V, K] (default, current runtimes) */
    CLVARLEN_STATE_KV = 1  /**< [HV, K, V]: pool [slots, HV, K, V] */
} clvarlen_state_layout;

/** How sequences are computed. Every choice gives the SPEC 3 result within SPEC 4's tolerances. */
typedef enum clvarlen_gdn_algorithm {
    /** Chunked for sequences at least as long as the device's threshold, token by token for
     * the others (and for every sequence on devices whose tuning sets no threshold). The choice
     * is made per sequence, so a sequence's result never depends on the rest of the batch,
     * with two exceptions, both within SPEC 4's tolerances of either result: the cl_mem entry
     * point, which cannot see the lengths, runs every sequence token by token when the batch
     * averages fewer than 16 tokens per sequence (decode batches; without the tensor-core path,
     * fewer than the threshold); and on devices with the
     * tensor-core chunked path (NVIDIA, compute capability 8 or later, bf16/f16, key_dim a
     * multiple of 16 up to 128; threshold 64 tokens), a batch averaging 64 tokens per sequence
     * or more runs every sequence chunked (one launch instead of two: measured faster on an
     * H100, docs/PERFORMANCE.md). On CPU OpenCL devices (PoCL) in a library built with
     * CLBlast the threshold is 512 tokens, and those sequences run on the CLBlast path (see
     * CHUNKED; measured 3-14% faster than token by token there from 512 tokens on); Mesa's
     * llvmpipe and the other devices without the tensor-core path set none. */
    CLVARLEN_GDN_AUTO = 0,
    /** Token by token for every sequence. */
    CLVARLEN_GDN_RECURRENT = 1,
    /** Chunked (64-token chunks, WY representation) for every sequence; an OpenCL device
     * without the local memory it needs returns CLVARLEN_ERROR_UNSUPPORTED. On NVIDIA devices
     * with tensor cores (see AUTO) it runs in two stages with a device work buffer of about
     * 25 KiB per 64-token chunk (plus one per sequence) and value head, at most 512 MiB per
     * call where the heads allow (they are then taken in groups); the context keeps that
     * buffer for later calls until clvarlen_context_destroy. Where it cannot be allocated the
     * call runs a fused kernel that needs none (slower, same result within SPEC 4). On
     * compute capability 9.x (Hopper), with key_dim 64 or 128, the second stage runs on
     * wgmma (same work buffer; measured 1.23-1.29x faster on an H200). Its first use per
     * key_dim and dtype on a context runs one 130-token sequence through it and through the
     * CPU fallback; if they disagree, or the driver refuses its build, the mma.sync form
     * runs from then on (logged at CLVARLEN_LOG_INFO). On CPU
     * OpenCL devices (PoCL), in a library built with CLBlast, the chunk-parallel products run
     * on CLBlast's batched SGEMM instead of the fused kernel (measured faster there), with a
     * work buffer of about 385 KiB per 64-token chunk (plus one per sequence) and value head
     * at key_dim = value_dim = 128, up to an eighth of the device's memory per call, kept by
     * the context likewise; should it or CLBlast fail, the fused kernel runs. */
    CLVARLEN_GDN_CHUNKED = 2
} clvarlen_gdn_algorithm;

/**
 * Shapes and options of a gated delta rule call; initialise with
 * clvarlen_gdn_params_init, then set the shapes. Tensors (all token-major,
 * heads and the last dimension contiguous):
 *   q, k [T, H, K]; v [T, HV, V]; a, b [T, HV]; o [T, HV, V];
 *   A_log [HV] f32; dt_bias [HV] (dt_bias_dtype);
 *   state pool [state_slots, HV, V, K] (or [.., K, V]), slots state_slot_pitch elements apart;
 *   intermediate states [cache_slots, cache_steps, HV, V, K] (or [.., K, V]), contiguous.
 */
typedef struct clvarlen_gdn_params {
    uint32_t struct_size;          /**< set by init; lets later versions append fields */
    clvarlen_dtype dtype;          /**< q, k, v, a, b and o: f32, f16 or bf16 (f32 default) */
    clvarlen_dtype dt_bias_dtype;  /**< dt_bias: f32 (default), f16 or bf16 */
    clvarlen_dtype state_dtype;    /**< state pool and intermediate states: f32 (default), f16, bf16 */
    int64_t n_seqs;                /**< N sequences (cu_seqlens has N + 1 entries) */
    int64_t total_tokens;          /**< T: cu_seqlens[N], or N * fixed_seqlen */
    int32_t fixed_seqlen;          /**< without cu_seqlens: sequence n is tokens [n L, (n+1) L) */
    int32_t heads_qk, heads_v;     /**< H and HV; HV % H == 0, value head h reads q/k head h / (HV/H) */
    int32_t key_dim, value_dim;    /**< K and V, each 1 .. 256 */
    /** Token strides in elements; 0 = contiguous (H*K, H*K, HV*V, HV, HV, HV*V). Views of one
     * fused projection pass its row width here. */
    int64_t q_stride, k_stride, v_stride, a_stride, b_stride, o_stride;
    clvarlen_state_layout state_layout; /**< of the pool and of the intermediate states */
    int64_t state_slots;           /**< slots in the pool; state indices must be below it */
    int64_t state_slot_pitch;      /**< elements from one slot to the next; 0 = HV*K*V */
    float scale;                   /**< q scale; 0 = 1/sqrt(K); otherwise finite and > 0 */
    int use_qk_l2norm;             /**< q, k <- x * rsqrt(sum x^2 + 1e-6) per head and token */
    float softplus_beta;           /**< 1.0 by default; finite and > 0 */
    float softplus_threshold;      /**< 20.0 by default: softplus(x) = x when beta*x > threshold */
    int disable_state_update;      /**< read initial states from the pool but never write it */
    int64_t cache_slots;           /**< target verify: slots of the intermediate-state buffer */
    int32_t cache_steps;           /**< target verify: steps per slot (>= every sequence's length) */
    clvarlen_gdn_algorithm algorithm; /**< CLVARLEN_GDN_AUTO by default */
} clvarlen_gdn_params;

/** Defaults: f32 everywhere, V-major states, scale 0 (1/sqrt(K)), softplus beta 1 and
 * threshold 20, state update on, AUTO; every shape 0. */
CLVARLEN_API void clvarlen_gdn_params_init_sized(clvarlen_gdn_params *params,
                                                 size_t size);
#define clvarlen_gdn_params_init(params)                                                           \
    clvarlen_gdn_params_init_sized((params), sizeof(clvarlen_gdn_params))
/** The first released size of clvarlen_gdn_params (see ABI growth above). */
#define CLVARLEN_GDN_PARAMS_MIN_SIZE sizeof(clvarlen_gdn_params)

/**
 * The fused sigmoid-gating delta-rule update (SPEC 3): for each sequence n
 * and value head h, the K x V state starts from the pool slot
 * state_indices[n] (zeros if the index is negative or state_pool is NULL),
 * each token updates it and emits o, and the final state is written back to
 * the same slot in the pool's dtype unless the index is negative,
 * disable_state_update is set or the sequence is empty.
 *
 * cu_seqlens [N + 1] (NULL: fixed-length batches of params->fixed_seqlen).
 * state_pool (may be NULL: zero initial states, nothing written back);
 * state_indices [N] (NULL with a pool: sequence n uses slot n); an index >=
 * state_slots is CLVARLEN_ERROR_INDEX_OUT_OF_RANGE. Two sequences naming the
 * same slot with write-back on leave that slot's contents unspecified.
 * intermediate_states (may be NULL; target verify): after token j of sequence
 * n the state is also written to [cache_indices[n], j] (cache_indices NULL:
 * slot n; negative: skipped); every sequence must have at most cache_steps
 * tokens. It is independent of disable_state_update and forces the
 * token-by-token algorithm (CLVARLEN_GDN_CHUNKED with it is
 * CLVARLEN_ERROR_UNSUPPORTED).
 * o [T, HV, V] in params->dtype, at o_stride.
 * The outputs (o, the state pool, updated in place, and intermediate_states)
 * must not share a byte with another argument or each other (column slices of
 * one fused row at one stride do not overlap): CLVARLEN_ERROR_INVALID_ARGUMENT.
 * With T == 0 the call validates its arguments and does nothing; data
 * pointers may then be NULL.
 *
 * Errors: CLVARLEN_ERROR_INVALID_ARGUMENT (NULL, head counts not positive or
 * heads_v not a multiple of heads_qk, strides, unknown layout or algorithm,
 * overlapping outputs,
 * a sequence longer than cache_steps, cache_slots/cache_steps invalid),
 * CLVARLEN_ERROR_INVALID_CU_SEQLENS, CLVARLEN_ERROR_INDEX_OUT_OF_RANGE (a
 * state or cache index beyond its pool), CLVARLEN_ERROR_UNSUPPORTED (K or V
 * above 256, a dtype not taken, CHUNKED with intermediate states),
 * CLVARLEN_ERROR_OVERFLOW (a pool or buffer beyond int64 bytes), and the
 * common ones.
 */
CLVARLEN_API clvarlen_status clvarlen_gated_delta_rule(clvarlen_context *context,
                                                       const clvarlen_gdn_params *params,
                                                       const float *A_log, const void *dt_bias,
                                                       const void *a, const void *b, const void *q,
                                                       const void *k, const void *v,
                                                       const int32_t *cu_seqlens, void *state_pool,
                                                       const int32_t *state_indices,
                                                       void *intermediate_states,
                                                       const int32_t *cache_indices, void *o);

#ifdef __cplusplus
}
#endif

#endif /* CLVARLEN_H */
