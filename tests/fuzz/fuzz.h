/* The libFuzzer target over the public host-memory API (tests/fuzz/README.md).
 *
 * The fuzz bytes are decoded into one call: the first byte picks the entry
 * point, the rest is read as a stream of draws (a draw past the end reads 0).
 * Declared sizes may be hostile (negative, huge, overflowing); buffers are
 * allocated to the declared extent when it is small, and a call whose declared
 * extents are valid but larger than the harness allocates is skipped, so that
 * every memory access the library makes is one the contract allows or one it
 * must have refused to make.
 *
 * Every call is checked: a known status; a non-empty message on error and an
 * empty one on success; inputs never modified; on error no output byte
 * changed; on success no byte changed outside the rows the call may write
 * (guard bands around every buffer when no sanitizer or valgrind watches the
 * heap, gaps between strided rows, state pool slots no sequence names); a call
 * the contract says must fail (a negative size, an unknown enum or dtype, a
 * stride below its row, a size beyond int64 bytes, a required pointer NULL) did.
 */
#ifndef CLVARLEN_FUZZ_H
#define CLVARLEN_FUZZ_H

#include <stddef.h>
#include <stdint.h>

#include <clvarlen/clvarlen.h>

/* Byte extents are computed in 128 bits, so that no declared size wraps. */
__extension__ typedef __int128 fz_i128;

/* Largest buffer the harness allocates (bytes) and the element budget that
 * keeps one execution short; declared sizes may be anything. */
#define FZ_CAP_BYTES (16 * 1024)
#define FZ_CAP_ELEMS 4096

/* ---- the byte stream */
typedef struct fz_reader {
    const uint8_t *data;
    size_t size, pos;
} fz_reader;

uint8_t fz_u8(fz_reader *r);
uint32_t fz_u32(fz_reader *r);
uint64_t fz_u64(fz_reader *r);
/** 1 with probability about 1/n (n >= 1). */
int fz_one_in(fz_reader *r, unsigned n);
/** A count: mostly 0..small_max, sometimes hostile (negative, INT32/INT64 limits, 2^k). */
int64_t fz_count(fz_reader *r, int64_t small_max);
/** fz_count folded into int32 (hostile values wrap as a caller's cast would). */
int32_t fz_count32(fz_reader *r, int32_t small_max);
/** A token stride for rows of `row` elements: mostly 0 or row plus a small gap,
 * sometimes smaller than the row, negative or huge. */
int64_t fz_stride(fz_reader *r, int64_t row);
/** A dtype: mostly one of `valid` (n_valid entries), sometimes any or unknown. */
clvarlen_dtype fz_dtype(fz_reader *r, const clvarlen_dtype *valid, int n_valid);
/** A float parameter: mostly `usual`, sometimes 0, negative, NaN, +-inf, huge. */
float fz_float(fz_reader *r, float usual);

/* ---- buffers under watch */
typedef enum fz_role { FZ_IN, FZ_OUT, FZ_INOUT } fz_role;

typedef struct fz_buf {
    const char *name;
    fz_role role;
    unsigned char *p;       /* what the call gets: NULL, or the usable region */
    unsigned char *base;    /* the allocation (with guard bands when fz_guards) */
    size_t bytes;           /* usable bytes */
    unsigned char *before;  /* contents before the call */
    unsigned char *allowed; /* per byte: 1 = the successful call may change it */
} fz_buf;

#define FZ_MAX_BUFS 16

/** One decoded call: its buffers and what the contract says of it. */
typedef struct fz_call {
    const char *op;
    clvarlen_context *ctx;
    fz_reader *r;
    fz_buf bufs[FZ_MAX_BUFS];
    int n_bufs;
    int must_fail;          /* the contract says this call cannot succeed */
    int bad_size;           /* ... because a declared size is invalid in itself */
    const char *must_fail_why;
    int skip;               /* valid sizes too large for the harness: not called */
} fz_call;

/** Notes that the call must fail (first reason kept). */
void fz_must_fail(fz_call *c, int cond, const char *why);
/** The same for a declared size that is invalid in itself (negative, unknown dtype, a
 * stride below its row, beyond int64 bytes): the library must refuse it without
 * touching memory, so the harness allocates less than declared. Other must-fail
 * calls may still read their inputs; only their outputs are allocated short. */
void fz_bad_size(fz_call *c, int cond, const char *why);
/** Byte extent of `rows` rows of `row` elements `stride` apart (0: row), in 128 bits;
 * negative sizes give 0 (the call must fail anyway). */
fz_i128 fz_extent(fz_i128 rows, int64_t row, int64_t stride, size_t elem_size);
/** Declares a buffer of `extent` bytes. When the call is not known to fail, an extent
 * over FZ_CAP_BYTES marks it skipped; otherwise the allocation is clamped. NULL is
 * passed with probability about 1/null_one_in (0: never). Inputs are filled from the
 * stream, outputs with a pattern. Returns the pointer to pass (may be NULL). */
void *fz_buffer(fz_call *c, const char *name, fz_role role, fz_i128 extent,
                unsigned null_one_in);
/** A row tensor [rows, row] of dtype at `stride` (0: row): notes the contract's
 * must-fail cases (unknown dtype, negative row or rows, a nonzero stride below the row,
 * more than INT64_MAX bytes) and declares the buffer. When NULL is chosen nothing is
 * noted: the op decides whether the tensor was required. */
void *fz_rows(fz_call *c, const char *name, fz_role role, clvarlen_dtype dtype, int64_t row,
              fz_i128 rows, int64_t stride, unsigned null_one_in);
/** Marks rows [first, first + rows) of a row tensor as writable (the row, not the gap). */
void fz_allow_tensor(fz_call *c, const void *p, int64_t first, int64_t rows,
                     clvarlen_dtype dtype, int64_t row, int64_t stride);
/** Notes that a required pointer passed as NULL (with something to address) must fail. */
void fz_required(fz_call *c, const void *p, int has_data, const char *why);
/** Before the call: a NULL context must fail (when the op takes one); snapshots buffers. */
void fz_before_call(fz_call *c, int takes_ctx);
/** After the call: status, message and must-fail checks. */
void fz_after_call(fz_call *c, clvarlen_status st);

/** Whether to pass NULL for an optional or required pointer (about 1 in 2*null_one_in). */
int fz_pass_null(fz_call *c, unsigned null_one_in);
/** fz_buffer without the NULL choice. */
void *fz_alloc(fz_call *c, const char *name, fz_role role, fz_i128 extent);
/** min(n, elements of es bytes buffer p holds); 0 for NULL. A buffer holds fewer than
 * its declared count only when the call must fail: loops over its data use this. */
int64_t fz_n(fz_call *c, const void *p, size_t es, fz_i128 n);
/** The buffer record of a pointer fz_buffer returned (NULL for NULL). */
fz_buf *fz_find(fz_call *c, const void *p);
/** Marks [off, off + len) of buffer p as writable on success (clamped to the buffer). */
void fz_allow(fz_call *c, const void *p, fz_i128 off, fz_i128 len);
/** Marks `rows` rows of `row_bytes` bytes, `pitch_bytes` apart, from row `first`. */
void fz_allow_rows(fz_call *c, const void *p, int64_t first, int64_t rows, int64_t row_bytes,
                   int64_t pitch_bytes);

/** Fills an int32 array with cu_seqlens: mostly valid (ending at `total` when
 * total >= 0), sometimes broken. Returns the last entry written. */
int32_t fz_fill_cu(fz_reader *r, int32_t *cu, int64_t n, int64_t total);
/** Fills int32 indices: mostly in [lo, hi), sometimes -1, out of range or repeated. */
void fz_fill_index32(fz_reader *r, int32_t *idx, int64_t n, int64_t lo, int64_t hi);
/** Fills a float tensor of dtype with small values from a stream-chosen seed
 * (NaN and infinities sometimes). */
void fz_fill_floats(fz_reader *r, void *p, clvarlen_dtype dtype, size_t n);

/** Reports a broken check and aborts (or counts it, in corpus-writing mode). */
void fz_fail(fz_call *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- the ops: each decodes its arguments, declares its buffers, makes the call
 * (unless skipped) and, on success, marks what it may write. */
typedef clvarlen_status (*fz_op_fn)(fz_call *c);
typedef struct fz_op {
    const char *name;
    fz_op_fn fn;
} fz_op;

extern const fz_op fz_segment_ops[];
extern const int fz_n_segment_ops;
extern const fz_op fz_cp_ops[];
extern const int fz_n_cp_ops;
extern const fz_op fz_compute_ops[];
extern const int fz_n_compute_ops;
extern const fz_op fz_gdn_ops[];
extern const int fz_n_gdn_ops;
extern const fz_op fz_bwd_ops[];
extern const int fz_n_bwd_ops;
/** The attention params of a forward or backward call, and their must-fail rules
 * (fuzz-compute.c). */
void fz_attn_params(fz_call *c, clvarlen_attention_params *p);
void fz_attn_must_fail(fz_call *c, const clvarlen_attention_params *p);
extern const fz_op fz_paged_ops[];
extern const int fz_n_paged_ops;

/** Sentinel status an op returns when it made no call (skipped or not applicable). */
#define FZ_NOT_CALLED ((clvarlen_status)-1)

/* ---- driver interface */
typedef struct fz_result {
    int op;                   /* index into the op table */
    const char *op_name;
    clvarlen_status status;   /* FZ_NOT_CALLED when skipped */
    int failed;               /* a check failed (corpus-writing mode only; else abort) */
} fz_result;

/** Number of ops in the table (the first byte of an input is taken modulo it). */
int fz_op_count(void);
const char *fz_op_name(int op);
/** Runs one input; checks abort unless fz_soft_failures is set. */
void fz_run(const uint8_t *data, size_t size, fz_result *res);
/** Corpus-writing mode: a failed check is counted in fz_result instead of aborting. */
extern int fz_soft_failures;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif /* CLVARLEN_FUZZ_H */
