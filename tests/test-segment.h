/* Shared by the segment family's test sources (SPEC section 2), which the
 * build compiles once per backend (TEST_BACKEND_CL 0: CPU fallback, 1: the
 * OpenCL device): test-segment.c (2.1 to 2.4 and the suite), test-segment-cp.c
 * (2.5 context parallelism, 2.6 gen_seq_lens) and, in the OpenCL build only,
 * test-segment-clmem.c (the cl_mem entry points and device checks).
 */
#ifndef CLVARLEN_TEST_SEGMENT_H
#define CLVARLEN_TEST_SEGMENT_H

#include "kit-check.h"
#include "segment-ref.h"

#ifndef TEST_BACKEND_CL
#  error "TEST_BACKEND_CL must be 0 or 1 (tests/meson.build)"
#endif

#if TEST_BACKEND_CL
#  define SEG_SUITE "segment-cl"
#  define SEG_TIMEOUT 300
#else
#  define SEG_SUITE "segment-cpu"
#  define SEG_TIMEOUT 120
#endif

#define F32 CLVARLEN_DTYPE_F32
#define F16 CLVARLEN_DTYPE_F16
#define BF16 CLVARLEN_DTYPE_BF16
#define F64 CLVARLEN_DTYPE_F64
#define I32 CLVARLEN_DTYPE_I32
#define I64 CLVARLEN_DTYPE_I64
#define U8 CLVARLEN_DTYPE_U8

/* The context of the current test: a checked fixture (seg_setup/seg_teardown). */
extern clvarlen_context *seg_ctx;
void seg_setup(void);
void seg_teardown(void);
/** The seed of case k: CLVARLEN_TEST_SEED overrides the base. */
uint64_t seg_seed(uint64_t k);

/* The call must succeed; the label (with the seed) goes in the message. */
#define SEG_OK(expr, label)                                                                    \
    do {                                                                                       \
        clvarlen_status st_ = (expr);                                                          \
        tu_check(st_ == CLVARLEN_SUCCESS, "%s: %s: %s", (label),                               \
                 clvarlen_status_name(st_), clvarlen_last_error(seg_ctx));                     \
    } while (0)

void random_bytes(tu_rng *r, void *p, size_t n);
/* A random token stride: 0 (contiguous) or the row plus 0..3 elements of padding. */
int64_t random_stride(tu_rng *r, int64_t row_elems);
size_t pitch_bytes(clvarlen_dtype dtype, int64_t row_elems, int64_t stride);
/* A random injective index: a subset of [0, dst_rows) in random order, with -1 holes. */
int64_t random_unique_index(tu_rng *r, int64_t dst_rows, int32_t *index, int64_t max_n);
/* The bytes between strided rows must be what they were. */
void assert_gaps_kept(const void *got, const void *init, int64_t rows, size_t row_bytes,
                      size_t pitch, const char *label);
/* Accumulated rows against the float64 oracle: SPEC 4 tolerance for floats, exact for i32. */
void check_accumulated(const void *got, clvarlen_dtype dtype, int64_t rows, int64_t row_elems,
                       int64_t stride, const double *want, const char *label);

/* Row shapes for copies: sizes that are not multiples of 16 bytes, every dtype, a large row. */
typedef struct rowcfg {
    clvarlen_dtype dtype;
    int64_t elems;
} rowcfg;
extern const rowcfg copy_rows[];
extern const size_t n_copy_rows;
#define N_COPY_ROWS n_copy_rows
/* The dtypes scatter-accumulate supports, 4 of them. */
extern const clvarlen_dtype accumulate_dtypes[4];

/* ---- test-segment-cp.c */
typedef struct plan_bufs {
    int32_t *local_cu, *head_cu, *tail_cu, *gidx, *pos;
    int64_t local;
    int32_t max_head, max_tail;
} plan_bufs;
void free_plan(plan_bufs *b);
/** The context-parallel and gen_seq_lens cases. */
void seg_add_cp_cases(Suite *s);

#if TEST_BACKEND_CL
/* ---- test-segment-clmem.c */
/** A context on the test's OpenCL device without the on-disk program cache. */
clvarlen_context *seg_cl_context(int device_checks);
/** The cl_mem and device-check cases. */
void seg_add_cl_cases(Suite *s);
/** test-segment-paths.c: one status for one bad input on every path. */
void seg_add_paths_cases(Suite *s);
/** test-segment-args.c: cl_mem buffer sizes, aliasing and hostile shapes. */
void seg_add_args_cases(Suite *s);
#endif

#endif
