/* Shared by test-api.c (status, version, dtypes, options, contexts, errors)
 * and test-api-segment.c (every invalid argument of every segment entry point):
 * outputs under watch and the expected-error checks.
 */
#ifndef CLVARLEN_TEST_API_H
#define CLVARLEN_TEST_API_H

#include "kit-check.h"

#define SENTINEL 0xAB

/* ---- outputs under watch: guard bands plus SENTINEL bytes that must survive */
typedef struct outs {
    tu_guarded g[8];
    int n;
} outs;
void *out_add(outs *o, size_t bytes);
void outs_fill(outs *o);
void outs_untouched(const outs *o, const char *label);
void outs_free(outs *o);

/* The status must be `want` (or `alt` when not CLVARLEN_SUCCESS, where the header leaves the
 * choice open), with a message on the context (or the thread, for a NULL context) that names
 * the function. */
void check_err(const clvarlen_context *ctx, clvarlen_status got, clvarlen_status want,
               clvarlen_status alt, const char *fn, const char *label);
void check_ok(const clvarlen_context *ctx, clvarlen_status got, const char *label);

/* One invalid argument: start from the valid call `ok`, apply `mut`, expect `want`. */
#define BAD2(fn, mut, want, alt)                                                               \
    do {                                                                                       \
        a = ok;                                                                                \
        mut;                                                                                   \
        outs_fill(&o);                                                                         \
        clvarlen_status st_ = call(&a);                                                        \
        check_err(a.ctx, st_, (want), (alt), (fn), #mut);                                      \
        outs_untouched(&o, #mut);                                                              \
    } while (0)
#define BAD(fn, mut, want) BAD2(fn, mut, want, CLVARLEN_SUCCESS)

#define IA CLVARLEN_ERROR_INVALID_ARGUMENT
#define ICU CLVARLEN_ERROR_INVALID_CU_SEQLENS
#define IOR CLVARLEN_ERROR_INDEX_OUT_OF_RANGE
#define BTS CLVARLEN_ERROR_BUFFER_TOO_SMALL
#define UNSUP CLVARLEN_ERROR_UNSUPPORTED
#define BAD_DTYPE ((clvarlen_dtype)99)

/** The segment-arguments cases (test-api-segment.c). */
TCase *api_segment_cases(void);
/** test-api-limits.c: hostile shapes and aliasing on the host entry points. */
TCase *api_limits_cases(void);
/** ABI growth: sized inits, old and new struct sizes (test-api-abi.c). */
TCase *api_abi_cases(void);

#endif
