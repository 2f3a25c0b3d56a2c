/* The segment family's host side (SPEC 2), private to lib/segment/.
 *
 * Every host-memory entry point validates everything first (host-visible
 * cu_seqlens and indices fully, duplicates included where they matter), then
 * runs its CPU twin (lib/cpu/segment*.c) on a CPU-fallback context, or on an
 * OpenCL context uploads its inputs, runs the same enqueue routine as the
 * cl_mem entry point and reads the outputs back only after success. The
 * cl_mem entry points validate what the host can see and, with device checks
 * on, validate device-resident cu_seqlens, indices and values with check
 * kernels whose flag makes the op kernels write nothing; they chain their
 * commands through a cv_chain and never block otherwise.
 *
 * One file per operation group (maps.c, pack.c, rows.c, expand.c, cp.c,
 * gen.c), each holding its enqueue routines, host-memory and cl_mem entry
 * points; launch.c holds what they share: argument checks, kernel loading,
 * launch geometry, temporaries and the generic row copy.
 */
#ifndef CLVARLEN_SEGMENT_SEGMENT_H
#define CLVARLEN_SEGMENT_SEGMENT_H

#include "runtime/runtime.h"

#include "cpu/segment.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Returns the status of expr when it is not CLVARLEN_SUCCESS: argument checks
 * and enqueue steps read as one list with early returns. */
#define SEG_TRY(expr)                                                                          \
    do {                                                                                       \
        clvarlen_status cv_seg_try_st_ = (expr);                                                  \
        if (cv_seg_try_st_ != CLVARLEN_SUCCESS)                                                   \
            return cv_seg_try_st_;                                                                \
    } while (0)

/* In a function with one cleanup block at `out:`: stores expr's status in
 * st and jumps there on failure (the device paths of host-memory entry
 * points, which release their buffers whatever happens). */
#define SEG_TRY_OUT(expr)                                                                      \
    do {                                                                                       \
        st = (expr);                                                                           \
        if (st != CLVARLEN_SUCCESS)                                                            \
            goto out;                                                                          \
    } while (0)

/* ------------------------------------------------------------ host-side validation (launch.c) */

/** INVALID_ARGUMENT "<fn>: <what> is NULL" when needed and p is NULL. */
clvarlen_status cv_seg_need(clvarlen_context *ctx, const char *fn, const char *what, const void *p,
                            bool needed);
/** A count of sequences: kernels index them with int, cu has n + 1 entries. */
clvarlen_status cv_seg_check_count(clvarlen_context *ctx, const char *fn, const char *what,
                                   int64_t n);

/* Row tensor geometry in bytes. */
typedef struct cv_seg_rows {
    size_t row_bytes, stride_b, span;
} cv_seg_rows;

/** cv_check_rows, ptr present when rows > 0, and the geometry in bytes. */
clvarlen_status cv_seg_rows_geom(clvarlen_context *ctx, const char *fn, const char *what,
                                 clvarlen_dtype dtype, int64_t row_elems, int64_t rows,
                                 int64_t stride, const void *ptr, cv_seg_rows *g);
/** A known scatter mode and flags; accumulate only on f32, f16, bf16 and i32 rows. */
clvarlen_status cv_seg_check_scatter_mode(clvarlen_context *ctx, const char *fn,
                                          clvarlen_dtype dtype, clvarlen_scatter_mode mode,
                                          unsigned flags);
/**
 * Host-visible indices (int32 or int64, one given): each in [0, limit), or -1
 * when allow_skip. With `distinct` set, *distinct says whether the entries
 * that name a row are pairwise different; with dup_is_error a repeat is
 * CLVARLEN_ERROR_INVALID_ARGUMENT.
 */
clvarlen_status cv_seg_check_indices(clvarlen_context *ctx, const char *fn, const char *what,
                                     const int32_t *i32, const int64_t *i64, int64_t n,
                                     int64_t limit, bool allow_skip, bool *distinct,
                                     bool dup_is_error);

/* Host tensors of an entry point for the aliasing check: outputs must not
 * share memory with inputs or other outputs (cv_check_no_overlap). */
static inline cv_region cv_seg_host(const char *name, const void *ptr, uint64_t bytes, bool output)
{
    return cv_host_region(name, ptr, cv_extent_bytes(0, bytes), output);
}
static inline cv_region cv_seg_host_rows(const char *name, const void *ptr, const cv_seg_rows *g,
                                         int64_t rows, bool output)
{
    return cv_host_region(name, ptr, cv_extent_rows(0, rows, g->row_bytes, g->stride_b), output);
}
#define SEG_CHECK_HOST(ctx, fn, regions)                                                       \
    cv_check_no_overlap((ctx), (fn), (regions), sizeof(regions) / sizeof((regions)[0]))

/* ------------------------------------------------------------ OpenCL launch helpers (launch.c) */

#if CLVARLEN_HAVE_OPENCL

/* Cap on work-groups of grid-stride kernels (keeps every NDRange dimension small). */
#define SEG_MAX_GROUPS 65536

/* Temporaries start here in the context's temp buffer; the scratch word
 * (a device-computed total) is at byte 0. */
#define SEG_TEMP_OFF 64

/* The family's kernel programs (cv_seg_kernel picks the file and -D options):
 * element-wise maps (cl/segment-maps.cl), single-work-group scans and
 * seqlens_expand (cl/segment-scan.cl, at two work-group sizes), row copies
 * and accumulating row kernels (cl/segment.cl), gen_seq_lens
 * (cl/segment-gen.cl). */
enum {
    SEG_PROG_MAPS,
    SEG_PROG_SCANS,
    SEG_PROG_EXPAND,
    SEG_PROG_COPY,
    SEG_PROG_ACC,
    SEG_PROG_GEN,
};

size_t cv_seg_copy_wg(const clvarlen_context *ctx);
size_t cv_seg_scan_wg(const clvarlen_context *ctx);
size_t cv_seg_expand_wg(const clvarlen_context *ctx);
/** Destination rows per group of the ordered accumulate. */
size_t cv_seg_acc_rows(const clvarlen_context *ctx);

/** Kernel `name` of `program` (SEG_PROG_*), with the row unit (copies) or
 * the accumulation dtype code (acc, CV_DT_*) as -D options. */
clvarlen_status cv_seg_kernel(clvarlen_context *ctx, int program, int unit, int acc,
                              const char *name, cl_kernel *kernel);
/** The widest unit dividing the row and every byte offset and stride. */
int cv_seg_pick_unit(size_t row_bytes, const size_t *v, int nv);

/* Rows laid over work-groups: lpr lanes per row, several short rows per group. */
typedef struct cv_seg_geo {
    cl_int row_units, lpr;
    size_t global, local;
} cv_seg_geo;

void cv_seg_row_geo(const clvarlen_context *ctx, int64_t units, int64_t rows, cv_seg_geo *g);
/** Fused kernels: about as many work-groups as fit on the device at once. */
void cv_seg_fused_geo(const clvarlen_context *ctx, int64_t units, int64_t rows, cv_seg_geo *g);
/** A 1-D grid of one work-item per element, grid-stride beyond the cap. */
void cv_seg_elem_grid(const clvarlen_context *ctx, int64_t n, size_t *global, size_t *local);

/** A 1-D launch on the chain. */
clvarlen_status cv_seg_run(cv_chain *q, cl_kernel k, const char *what, size_t global, size_t local);
size_t cv_seg_align8(size_t x);
/** The context's temp buffer with `bytes` of work space at SEG_TEMP_OFF (one call per chain). */
clvarlen_status cv_seg_temp(cv_chain *q, size_t bytes, cl_mem *mem);
/** Blocking read of rows (only the row bytes of a strided tensor) after the chain. */
clvarlen_status cv_seg_read_rows(cv_chain *q, cl_mem mem, int64_t rows, size_t row_bytes,
                                 size_t stride_b, void *host);
clvarlen_status cv_seg_read_bytes(cv_chain *q, cl_mem mem, size_t bytes, void *host);
/** An input buffer (NULL host pointer: no buffer). */
clvarlen_status cv_seg_upload(clvarlen_context *ctx, const void *host, size_t bytes, cl_mem *mem);

/** Kernels address a row in int units and tokens with int. */
clvarlen_status cv_seg_check_cl_limits(clvarlen_context *ctx, const char *fn, size_t row_bytes,
                                       int64_t rows);
/* The buffer arguments of a cl_mem entry point, checked together by
 * SEG_CHECK_MEM (cv_check_mem_args: present when needed, offset aligned, the
 * buffer large enough for what the shapes say, outputs not overlapping any
 * other argument). */
static inline cv_mem_arg cv_seg_mem(const char *name, cl_mem mem, size_t offset, size_t align,
                                    uint64_t bytes, bool needed, bool output)
{
    cv_mem_arg a = {name, mem, offset, align, cv_extent_bytes(0, bytes), needed, output, 0};
    return a;
}
/** A row tensor of geometry g (cv_seg_rows_geom) with `rows` rows. */
static inline cv_mem_arg cv_seg_mem_rows(const char *name, cl_mem mem, size_t offset, size_t align,
                                         const cv_seg_rows *g, int64_t rows, bool output)
{
    cv_mem_arg a = {.name = name, .mem = mem, .offset = offset, .align = align,
                    .ext = cv_extent_rows(0, rows, g->row_bytes, g->stride_b),
                    .needed = rows > 0, .output = output};
    return a;
}
#define SEG_CHECK_MEM(ctx, fn, args)                                                           \
    cv_check_mem_args((ctx), (fn), (args), sizeof(args) / sizeof((args)[0]))

/* ---------------------------------------------------------- shared enqueue routines (launch.c) */

/* The routines take the device-check flag from the chain (q->flag) and pass
 * it to their kernels, with check = (q->flag != NULL). */

/** lengths -> cu (and total, capacity check) in one work-group scan. */
clvarlen_status cv_seg_enq_scan_lengths(cv_chain *q, cl_mem len, size_t len_off, int64_t n,
                                        int64_t max_len, int64_t capacity, cl_mem cu, size_t cu_off,
                                        cl_mem total_out, size_t total_off, cl_mem scratch);
/** inv[0..rows) = -1 (at byte inv_off), then inv[map[i]] = i. */
clvarlen_status cv_seg_enq_invert(cv_chain *q, cl_mem m32, cl_mem m64, size_t map_off, int64_t n,
                                  int64_t rows, cl_mem inv, size_t inv_off);

/* Arguments of segment_copy_rows. */
typedef struct copy_args {
    clvarlen_dtype dtype;
    int64_t row_elems;
    cl_mem src;
    size_t src_off, src_stride_b;
    int64_t src_rows;
    cl_mem dst;
    size_t dst_off, dst_stride_b;
    int64_t dst_rows;
    int64_t n_rows;
    cl_mem map32, map64;
    size_t map_off;
    int map_dst, fill_mode;
    unsigned char fill[16];
    cl_mem count;
    int64_t count_cap;
    int accumulate;
} copy_args;

clvarlen_status cv_seg_enq_copy(cv_chain *q, const copy_args *c);
/** The 16-byte fill pattern: one element repeated (NULL: zeros). */
void cv_seg_fill_pattern(unsigned char out[16], const void *elem, size_t es);

#endif /* CLVARLEN_HAVE_OPENCL */

#endif /* CLVARLEN_SEGMENT_SEGMENT_H */
