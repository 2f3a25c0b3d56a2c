/* The Oclgrind driver (tests/oclgrind/): tiny cases of every kernel in cl/,
 * each run once on the OpenCL device under test (Oclgrind's simulator, see
 * run-oclgrind.sh) and once on the CPU fallback, outputs compared. The
 * harness and the segment cases are in oclgrind-cases.c, the attention and
 * gated delta cases in oclgrind-cases-nn.c, the paged KV cache's in
 * oclgrind-cases-paged.c, the attention backward's in oclgrind-cases-bwd.c.
 */
#ifndef CLVARLEN_OCLGRIND_CASES_H
#define CLVARLEN_OCLGRIND_CASES_H

#include <stddef.h>
#include <stdint.h>

#include <clvarlen/clvarlen-cl.h>

#include "kit.h"

/* What every case sees: the device context (device checks on), the CPU
 * fallback context, a random stream, and the reason of the first failure. */
typedef struct oc_run {
    clvarlen_context *dev, *cpu;
    tu_rng rng;
    char why[320];
} oc_run;

/* One case: a name (matched by the command line's filters), the function and
 * up to three small integer parameters whose meaning is the function's. */
typedef struct oc_case oc_case;
typedef int (*oc_fn)(oc_run *r, const oc_case *c);
struct oc_case {
    const char *name;
    oc_fn fn;
    int a, b, c;
};

/* Failure helpers: record why (the first reason wins) and return 1. */
int oc_fail(oc_run *r, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Both statuses must be `want`; the device's last error is in the reason. */
int oc_status(oc_run *r, const char *what, clvarlen_status dev, clvarlen_status cpu,
              clvarlen_status want);
/* Bitwise equality of n bytes. */
int oc_same(oc_run *r, const char *what, const void *dev, const void *cpu, size_t bytes);
/* SPEC section 4's tolerance for dtype over n elements (NaN never passes). */
int oc_close(oc_run *r, const char *what, const void *dev, const void *cpu, clvarlen_dtype dtype,
             size_t n);
/* Two zero-filled allocations of `bytes` (at least 1 byte); NULL when out of memory. */
void *oc_alloc2(size_t bytes, void **second);
/* n random elements of dtype (N(0, 1)). */
void *oc_random(oc_run *r, clvarlen_dtype dtype, size_t n);
/* cu_seqlens[n + 1] of lengths (malloc'ed). */
int32_t *oc_cu(const int32_t *lengths, int64_t n);
/* A device buffer holding a copy of host (bytes > 0), or NULL for host NULL. */
cl_mem oc_buf(oc_run *r, const void *host, size_t bytes);
/* Reads bytes of mem back (blocking); 0 on success. */
int oc_read(oc_run *r, cl_mem mem, void *host, size_t bytes);

/* The case tables (NULL-name terminated). */
extern const oc_case oc_segment_cases[];
extern const oc_case oc_nn_cases[];
extern const oc_case oc_paged_cases[];
extern const oc_case oc_bwd_cases[];

#endif
