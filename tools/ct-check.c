/* clvarlen-test: the check command: every op with a check, on every chosen device,
 * against the CPU fallback; a table or one JSON document.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <clvarlen/clvarlen.h>
#if CLVARLEN_HAVE_OPENCL
#  include <clvarlen/clvarlen-cl.h>
#endif

#include "ct-harness.h"

typedef struct check_result {
    ct_row row;
    const char *family;
    const char *result; /* PASS, FAIL, ERROR */
    int device_index;
    char device[CLVARLEN_NAME_MAX];
    char label[32];
} check_result;

typedef struct result_list {
    check_result *v;
    size_t n, cap;
} result_list;

static check_result *result_push(result_list *l)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 32;
        check_result *v = realloc(l->v, cap * sizeof *v);
        if (!v)
            return NULL;
        l->v = v;
        l->cap = cap;
    }
    check_result *r = &l->v[l->n++];
    memset(r, 0, sizeof *r);
    return r;
}

static void print_check_row(const check_result *r)
{
    printf("%-24s %-22s %6d %11.3g %10.3g  %-5s  %s\n", r->row.op, r->label, r->row.cases,
           r->row.max_err, r->row.tolerance, r->result, r->row.note);
    fflush(stdout);
}

/* What a check run collects: the rows, the counts and the first errors. */
typedef struct check_run {
    const ct_options *opt;
    clvarlen_context *cpu;
    int cpu_threads;
    result_list results;
    size_t passed, failed, errored;
    char errors[8][400];
    size_t n_errors;
} check_run;

static void print_device_heading(const check_run *run, const ct_target *tg, clvarlen_context *dev)
{
    if (tg->cpu_self)
        printf("\ndevice %s: CPU fallback with %d thread%s vs CPU fallback with %d\n", tg->label,
               clvarlen_context_threads(dev), clvarlen_context_threads(dev) == 1 ? "" : "s",
               run->cpu_threads);
    else
        printf("\ndevice %s: %s vs CPU fallback (%d threads)\n", tg->label, tg->name,
               run->cpu_threads);
    printf("%-24s %-22s %6s %11s %10s  %-5s  %s\n", "op", "device", "cases", "max error",
           "tolerance", "result", "note");
}

static void print_result_json(const check_result *r);

/* Every matching op's check on one device; stops early when out of memory. */
static void check_device(check_run *run, const ct_target *tg, clvarlen_context *dev)
{
    const ct_options *opt = run->opt;
    size_t n_ops;
    const ct_op *ops = ct_ops(&n_ops);
    for (size_t i = 0; i < n_ops; i++) {
        const ct_op *op = &ops[i];
        if (!op->check || !ct_op_matches(opt->op, op))
            continue;
        check_result *r = result_push(&run->results);
        if (!r) {
            fprintf(stderr, "clvarlen-test: out of memory\n");
            run->errored++;
            return;
        }
        snprintf(r->row.op, sizeof r->row.op, "%s", op->name);
        r->family = op->family;
        r->device_index = tg->index;
        snprintf(r->device, sizeof r->device, "%s", tg->name);
        snprintf(r->label, sizeof r->label, "%s", tg->label);
        ct_progress(opt, "check %s on %s", op->name, tg->label);
        int frc = op->check(dev, run->cpu, opt, &r->row);
        if (frc != 0) {
            r->result = "ERROR";
            run->errored++;
        } else if (r->row.failed > 0) {
            r->result = "FAIL";
            run->failed++;
        } else {
            r->result = "PASS";
            run->passed++;
        }
        if (!opt->json)
            print_check_row(r);
        else if (opt->json == 2) {
            print_result_json(r);
            putchar('\n');
            fflush(stdout);
        }
    }
}

static void print_result_json(const check_result *r)
{
    fputs("{\"op\": ", stdout);
    ct_json_str(r->row.op);
    fputs(", \"family\": ", stdout);
    ct_json_str(r->family);
    fputs(", \"device\": ", stdout);
    ct_json_str(r->device);
    fputs(", \"device_index\": ", stdout);
    if (r->device_index < 0)
        fputs("\"cpu\"", stdout);
    else
        printf("%d", r->device_index);
    printf(", \"cases\": %d, \"failed_cases\": %d, \"max_err\": ", r->row.cases, r->row.failed);
    ct_json_num(r->row.max_err);
    fputs(", \"tolerance\": ", stdout);
    ct_json_num(r->row.tolerance);
    fputs(", \"result\": ", stdout);
    ct_json_str(r->result);
    fputs(", \"note\": ", stdout);
    ct_json_str(r->row.note);
    putchar('}');
}

static void print_check_json(const check_run *run, const char *remark, int rc)
{
    const ct_options *opt = run->opt;
    ct_print_header_json("check");
    printf(", \"seed\": %" PRIu64 ", \"quick\": %s,\n  \"devices\": ", opt->seed,
           opt->quick ? "true" : "false");
    ct_json_str(remark);
    fputs(",\n  \"results\": [", stdout);
    for (size_t i = 0; i < run->results.n; i++) {
        fputs(i ? ",\n    " : "\n    ", stdout);
        print_result_json(&run->results.v[i]);
    }
    fputs("],\n  \"errors\": [", stdout);
    for (size_t i = 0; i < run->n_errors; i++) {
        if (i)
            fputs(", ", stdout);
        ct_json_str(run->errors[i]);
    }
    printf("],\n  \"passed\": %zu, \"failed\": %zu, \"errors_count\": %zu, \"exit_code\": %d}\n",
           run->passed, run->failed, run->errored, rc);
}

/* Checks every target against the CPU fallback context run->cpu. */
static void check_targets(check_run *run, const ct_target *targets, size_t n_targets)
{
    for (size_t ti = 0; ti < n_targets; ti++) {
        const ct_target *tg = &targets[ti];
        clvarlen_context *dev = NULL;
        int threads = tg->cpu_self ? (run->cpu_threads > 1 ? 1 : 2) : 0;
        clvarlen_status st = ct_make_context(tg->index, threads, &dev);
        if (st != CLVARLEN_SUCCESS) {
            if (run->n_errors < 8)
                snprintf(run->errors[run->n_errors++], sizeof run->errors[0],
                         "%s: cannot create a context: %s: %s", tg->label,
                         clvarlen_status_name(st), clvarlen_last_error(NULL));
            fprintf(stderr, "clvarlen-test: device %s: cannot create a context: %s: %s\n",
                    tg->label, clvarlen_status_name(st), clvarlen_last_error(NULL));
            run->errored++;
            continue;
        }
        if (!run->opt->json)
            print_device_heading(run, tg, dev);
        check_device(run, tg, dev); /* out of memory: on to the next device, as before */
        clvarlen_context_destroy(dev);
    }
}

int ct_cmd_check(const ct_options *opt)
{
    ct_progress_compiles = opt->progress;
    if (ct_count_ops(opt->op, 0) == 0) {
        fprintf(stderr, "clvarlen-test: no check matches --op %s\n", opt->op);
        return EXIT_USAGE;
    }
    ct_target *targets = NULL;
    size_t n_targets = 0;
    char remark[1024];
    int rc = ct_resolve_targets(opt, 0, &targets, &n_targets, remark, sizeof remark);
    if (rc != EXIT_PASS)
        return rc;

    check_run run;
    memset(&run, 0, sizeof run);
    run.opt = opt;
    if (!opt->json) {
        printf("clvarlen-test %s (library %s): check, seed %" PRIu64 "%s\n",
               CLVARLEN_VERSION_STRING, clvarlen_version_string(), opt->seed,
               opt->quick ? ", quick" : "");
        if (remark[0])
            printf("devices: %s\n", remark);
    }

    clvarlen_status st = ct_make_context(-1, 0, &run.cpu);
    if (st != CLVARLEN_SUCCESS) {
        fprintf(stderr, "clvarlen-test: cannot create the CPU fallback context: %s: %s\n",
                clvarlen_status_name(st), clvarlen_last_error(NULL));
        free(targets);
        return EXIT_DEVICE;
    }
    run.cpu_threads = clvarlen_context_threads(run.cpu);
    check_targets(&run, targets, n_targets);
    clvarlen_context_destroy(run.cpu);

    rc = run.failed ? EXIT_FAIL : run.errored ? EXIT_DEVICE : EXIT_PASS;
    if (opt->json == 2)
        printf("{\"passed\": %zu, \"failed\": %zu, \"errors\": %zu, \"exit_code\": %d}\n",
               run.passed, run.failed, run.errored, rc);
    else if (opt->json)
        print_check_json(&run, remark, rc);
    else
        printf("\n%zu passed, %zu failed, %zu error%s -> %s\n", run.passed, run.failed,
               run.errored, run.errored == 1 ? "" : "s",
               rc == EXIT_PASS ? "PASS" : rc == EXIT_FAIL ? "FAIL" : "ERROR");
    fflush(stdout);
    free(run.results.v);
    free(targets);
    return rc;
}
