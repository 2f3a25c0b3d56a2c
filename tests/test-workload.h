/* A fixed mix of ops (segment pack and gather, attention forward, the gated
 * delta rule) with fixed inputs, run on any context into one result buffer:
 * the concurrency and fork tests run it from many threads or processes and
 * compare the bytes with a run made alone. Check-free.
 */
#ifndef CLVARLEN_TEST_WORKLOAD_H
#define CLVARLEN_TEST_WORKLOAD_H

#include <stddef.h>

#include <clvarlen/clvarlen.h>

typedef struct workload workload;

/** The inputs (deterministic: the same on every call); NULL when out of memory. */
workload *workload_create(void);
void workload_destroy(workload *w);
/** Bytes of a result. */
size_t workload_result_bytes(const workload *w);
/**
 * Runs every op of w on ctx and writes their outputs to result
 * (workload_result_bytes); w is only read, so threads may share it. On error
 * returns the status and names the op in *what.
 */
clvarlen_status workload_run(clvarlen_context *ctx, const workload *w, unsigned char *result,
                             const char **what);

#endif /* CLVARLEN_TEST_WORKLOAD_H */
