/* clvarlen-test: the harness's own declarations (command line, devices,
 * output), shared by ct-*.c and clvarlen-test.c; ops do not need them.
 */
#ifndef CLVARLEN_TEST_HARNESS_H
#define CLVARLEN_TEST_HARNESS_H

#include <stdio.h>
#include <stddef.h>

#include <clvarlen/clvarlen.h>

#include "clvarlen-test.h"

enum { EXIT_PASS = 0, EXIT_FAIL = 1, EXIT_USAGE = 2, EXIT_DEVICE = 3 };

#define DEFAULT_MIN_MB 256.0

/* The op table (ct-ops.c). */
const ct_op *ct_ops(size_t *count);
int ct_op_matches(const char *filter, const ct_op *op);
/** The op table as --list-ops prints it (names, families, commands, --op's short forms). */
void ct_print_ops(FILE *out);
/* Ops that match filter and have a check (for_bench 0) or a bench (1). */
size_t ct_count_ops(const char *filter, int for_bench);

/* Commands. */
int ct_cmd_list(const ct_options *opt);
int ct_cmd_check(const ct_options *opt);
int ct_cmd_bench(const ct_options *opt);
int ct_cmd_precompile(const ct_options *opt);

/* Devices a command runs on (ct-devices.c). */
typedef struct ct_target {
    int index;      /* OpenCL device index, -1 for the CPU fallback */
    int cpu_self;   /* check: the CPU fallback against itself with another thread count */
    char name[CLVARLEN_NAME_MAX];
    char label[32];
} ct_target;

clvarlen_status ct_make_context(int index, int threads, clvarlen_context **ctx);
/* Set by check and bench from --progress: contexts report kernel compiles on stderr. */
extern int ct_progress_compiles;
int ct_resolve_targets(const ct_options *opt, int for_bench, ct_target **out, size_t *n_out,
                       char *remark, size_t remark_size);

/* Output (ct-report.c). */
void ct_json_str(const char *s);
void ct_json_num(double x);
void ct_fmt_bytes(char *buf, size_t n, double bytes);
int ct_ci_equal(const char *a, const char *b);
void ct_print_header_json(const char *command);
/* Starts a JSON array of benchmark results (ct_bench_report, ct_bench_note). */
void ct_bench_json_begin(void);

/* Wall clock, seconds (ct-timing.c). */
double ct_now_s(void);

#endif
