/* clvarlen-test: the bench command: the device copy bandwidth, then every op's
 * benchmark on every chosen device.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <clvarlen/clvarlen.h>
#if CLVARLEN_HAVE_OPENCL
#  include <clvarlen/clvarlen-cl.h>
#endif

#include "ct-harness.h"

/* The copy-bandwidth measurement moves at least this much (SPEC of the tool: >= 256 MB). */
#define COPY_MIN_BYTES ((size_t)256 << 20)

/* ================================================================ copy bandwidth */

typedef struct copy_bw {
    double gbps;          /* the better of the methods, bytes read + written per second / 1e9 */
    const char *method;   /* which one */
    double buffer_gbps;   /* clEnqueueCopyBuffer (0: not measured) */
    double kernel_gbps;   /* the tool's copy kernel (0: not measured) */
    double bytes;         /* bytes copied per run (read and write each) */
} copy_bw;

/* CPU: memcpy split over the context's threads. */
typedef struct cpu_copy {
    unsigned char *dst;
    const unsigned char *src;
    size_t bytes;
    int threads;
} cpu_copy;

typedef struct cpu_copy_part {
    const cpu_copy *c;
    int part;
} cpu_copy_part;

static void *cpu_copy_worker(void *arg)
{
    const cpu_copy_part *p = arg;
    size_t chunk = (p->c->bytes / (size_t)p->c->threads + 63) & ~(size_t)63;
    size_t begin = chunk * (size_t)p->part;
    size_t end = begin + chunk < p->c->bytes ? begin + chunk : p->c->bytes;
    if (begin < end)
        memcpy(p->c->dst + begin, p->c->src + begin, end - begin);
    return NULL;
}

static int run_cpu_copy(void *arg, void *event_out)
{
    (void)event_out;
    const cpu_copy *c = arg;
    pthread_t tid[64];
    cpu_copy_part part[64];
    int started = 0;
    for (int i = 1; i < c->threads && i < 64; i++) {
        part[i].c = c;
        part[i].part = i;
        if (pthread_create(&tid[i], NULL, cpu_copy_worker, &part[i]) != 0)
            break;
        started = i;
    }
    part[0].c = c;
    part[0].part = 0;
    cpu_copy_worker(&part[0]);
    for (int i = 1; i <= started; i++)
        pthread_join(tid[i], NULL);
    /* Threads that failed to start: copy their parts here. */
    for (int i = started + 1; i < c->threads && i < 64; i++) {
        part[i].c = c;
        part[i].part = i;
        cpu_copy_worker(&part[i]);
    }
    return 0;
}

static size_t copy_bytes_for(const ct_options *opt)
{
    double want = opt->min_mbytes * 1e6;
    size_t bytes = want > (double)COPY_MIN_BYTES ? (size_t)want : COPY_MIN_BYTES;
    return bytes & ~(size_t)63;
}

static int measure_copy_cpu(clvarlen_context *ctx, const ct_options *opt, copy_bw *bw)
{
    cpu_copy c;
    c.bytes = copy_bytes_for(opt);
    c.threads = clvarlen_context_threads(ctx);
    if (c.threads < 1)
        c.threads = 1;
    if (c.threads > 64)
        c.threads = 64;
    unsigned char *src = malloc(c.bytes), *dst = malloc(c.bytes);
    if (!src || !dst) {
        free(src);
        free(dst);
        return -1;
    }
    memset(src, 1, c.bytes); /* touch every page before timing */
    memset(dst, 0, c.bytes);
    c.src = src;
    c.dst = dst;
    double t = ct_time_median(ctx, run_cpu_copy, &c, ct_bench_iters(opt));
    free(src);
    free(dst);
    if (t <= 0.0)
        return -1;
    bw->bytes = (double)c.bytes;
    bw->buffer_gbps = 2.0 * (double)c.bytes / t * 1e-9;
    bw->gbps = bw->buffer_gbps;
    bw->method = "memcpy";
    return 0;
}

#if CLVARLEN_HAVE_OPENCL
typedef struct cl_copy {
    cl_command_queue queue;
    cl_kernel kernel; /* NULL: clEnqueueCopyBuffer */
    cl_mem src, dst;
    size_t bytes;
    size_t global, local;
} cl_copy;

static int run_cl_copy(void *arg, void *event_out)
{
    const cl_copy *c = arg;
    cl_event *ev = event_out;
    cl_int err;
    if (c->kernel)
        err = clEnqueueNDRangeKernel(c->queue, c->kernel, 1, NULL, &c->global, &c->local, 0, NULL,
                                     ev);
    else
        err = clEnqueueCopyBuffer(c->queue, c->src, c->dst, 0, 0, c->bytes, 0, NULL, ev);
    return err != CL_SUCCESS;
}

/* One uint4 per work-item: the plainest streaming copy, which vendors' compilers handle well. */
static const char copy_kernel_source[] =
    "__kernel void ct_copy(__global const uint4 *src, __global uint4 *dst, ulong n)\n"
    "{\n"
    "    size_t i = get_global_id(0);\n"
    "    if (i < n)\n"
    "        dst[i] = src[i];\n"
    "}\n";

static int measure_copy_cl(clvarlen_context *ctx, const ct_options *opt, copy_bw *bw, char *err,
                           size_t err_size)
{
    cl_context clc;
    cl_device_id dev;
    cl_command_queue q;
    if (clvarlen_context_get_cl(ctx, &clc, &dev, &q) != CLVARLEN_SUCCESS) {
        snprintf(err, err_size, "no OpenCL objects in the context");
        return -1;
    }
    cl_ulong max_alloc = 0, global_mem = 0;
    size_t max_wg = 256;
    clGetDeviceInfo(dev, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof max_alloc, &max_alloc, NULL);
    clGetDeviceInfo(dev, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof global_mem, &global_mem, NULL);
    clGetDeviceInfo(dev, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof max_wg, &max_wg, NULL);
    size_t bytes = copy_bytes_for(opt);
    if (max_alloc && bytes > max_alloc)
        bytes = (size_t)max_alloc & ~(size_t)63;
    if (global_mem && bytes > global_mem / 4)
        bytes = (size_t)(global_mem / 4) & ~(size_t)63;

    cl_copy c;
    memset(&c, 0, sizeof c);
    c.queue = q;
    c.bytes = bytes;
    cl_int e1 = CL_SUCCESS, e2 = CL_SUCCESS;
    c.src = clCreateBuffer(clc, CL_MEM_READ_WRITE, bytes, NULL, &e1);
    c.dst = clCreateBuffer(clc, CL_MEM_READ_WRITE, bytes, NULL, &e2);
    int rc = -1;
    cl_program prog = NULL;
    if (e1 != CL_SUCCESS || e2 != CL_SUCCESS) {
        snprintf(err, err_size, "clCreateBuffer of %zu bytes failed (%d, %d)", bytes, (int)e1,
                 (int)e2);
        goto out;
    }
    cl_uint pattern = 0x3c003c00u;
    if (clEnqueueFillBuffer(q, c.src, &pattern, sizeof pattern, 0, bytes, 0, NULL, NULL) !=
            CL_SUCCESS ||
        clEnqueueFillBuffer(q, c.dst, &pattern, sizeof pattern, 0, bytes, 0, NULL, NULL) !=
            CL_SUCCESS ||
        clFinish(q) != CL_SUCCESS) {
        snprintf(err, err_size, "clEnqueueFillBuffer failed");
        goto out;
    }
    bw->bytes = (double)bytes;
    int iters = ct_bench_iters(opt);
    double t = ct_time_median_launch(ctx, run_cl_copy, &c, iters);
    bw->buffer_gbps = t > 0.0 ? 2.0 * (double)bytes / t * 1e-9 : 0.0;

    const char *src = copy_kernel_source;
    cl_int e = CL_SUCCESS;
    prog = clCreateProgramWithSource(clc, 1, &src, NULL, &e);
    if (e == CL_SUCCESS)
        e = clBuildProgram(prog, 1, &dev, "", NULL, NULL);
    if (e == CL_SUCCESS)
        c.kernel = clCreateKernel(prog, "ct_copy", &e);
    cl_ulong n16 = bytes / 16;
    if (e == CL_SUCCESS) {
        e = clSetKernelArg(c.kernel, 0, sizeof c.src, &c.src);
        if (e == CL_SUCCESS)
            e = clSetKernelArg(c.kernel, 1, sizeof c.dst, &c.dst);
        if (e == CL_SUCCESS)
            e = clSetKernelArg(c.kernel, 2, sizeof n16, &n16);
    }
    if (e == CL_SUCCESS) {
        c.local = max_wg < 256 ? max_wg : 256;
        c.global = ((size_t)n16 + c.local - 1) / c.local * c.local;
        t = ct_time_median_launch(ctx, run_cl_copy, &c, iters);
        bw->kernel_gbps = t > 0.0 ? 2.0 * (double)bytes / t * 1e-9 : 0.0;
    }
    if (bw->kernel_gbps > bw->buffer_gbps) {
        bw->gbps = bw->kernel_gbps;
        bw->method = "copy kernel";
    } else {
        bw->gbps = bw->buffer_gbps;
        bw->method = "clEnqueueCopyBuffer";
    }
    if (bw->gbps > 0.0)
        rc = 0;
    else
        snprintf(err, err_size, "neither clEnqueueCopyBuffer nor the copy kernel could be timed");
out:
    if (c.kernel)
        clReleaseKernel(c.kernel);
    if (prog)
        clReleaseProgram(prog);
    if (c.src)
        clReleaseMemObject(c.src);
    if (c.dst)
        clReleaseMemObject(c.dst);
    return rc;
}
#endif

/* ================================================================ bench */

static int measure_copy(clvarlen_context *dev, int is_cl, const ct_options *opt, copy_bw *bw,
                        char *err, size_t err_size)
{
#if CLVARLEN_HAVE_OPENCL
    if (is_cl)
        return measure_copy_cl(dev, opt, bw, err, err_size);
#endif
    (void)is_cl;
    (void)err;
    (void)err_size;
    return measure_copy_cpu(dev, opt, bw);
}

static void print_bench_header(const ct_options *opt, const char *remark)
{
    if (opt->json == 2) { /* JSON lines: the first says what runs */
        ct_print_header_json("bench");
        fputs(", \"min_mb\": ", stdout);
        ct_json_num(opt->min_mbytes);
        fputs(", \"devices\": ", stdout);
        ct_json_str(remark);
        fputs("}\n", stdout);
        return;
    }
    if (opt->json) {
        ct_print_header_json("bench");
        fputs(", \"min_mb\": ", stdout);
        ct_json_num(opt->min_mbytes);
        fputs(", \"devices\": ", stdout);
        ct_json_str(remark);
        fputs(",\n  \"runs\": [", stdout);
        return;
    }
    printf("clvarlen-test %s (library %s): bench, >= %.0f MB moved per measurement%s\n",
           CLVARLEN_VERSION_STRING, clvarlen_version_string(), opt->min_mbytes,
           opt->quick ? ", quick" : "");
    if (remark[0])
        printf("devices: %s\n", remark);
    if (opt->min_mbytes < 64.0)
        printf("note: below 64 MB per measurement the data may stay in caches, so ratios "
               "to the copy bandwidth can exceed 1\n");
}

/* The device's heading: its copy bandwidth, then the column titles (text) or
 * the opening of its results array (JSON). */
static void print_device_heading(const ct_options *opt, const ct_target *tg, size_t ti,
                                 clvarlen_context *dev, int is_cl, const copy_bw *bw)
{
    if (opt->json) {
        if (opt->json == 1)
            fputs(ti ? ",\n    " : "\n    ", stdout);
        fputs("{\"device\": ", stdout);
        ct_json_str(tg->name);
        fputs(", \"device_index\": ", stdout);
        if (tg->index < 0)
            fputs("\"cpu\"", stdout);
        else
            printf("%d", tg->index);
        printf(", \"timing\": \"%s\"", is_cl ? "opencl-profiling" : "wall-clock");
        fputs(opt->json == 2 ? ", \"copy\": {\"gbps\": " : ",\n     \"copy\": {\"gbps\": ", stdout);
        ct_json_num(bw->gbps);
        fputs(", \"method\": ", stdout);
        ct_json_str(bw->method ? bw->method : "");
        fputs(", \"copy_buffer_gbps\": ", stdout);
        ct_json_num(bw->buffer_gbps);
        fputs(", \"copy_kernel_gbps\": ", stdout);
        ct_json_num(bw->kernel_gbps);
        fputs(", \"bytes\": ", stdout);
        ct_json_num(bw->bytes);
        fputs(opt->json == 2 ? "}}\n" : "},\n     \"results\": [", stdout);
        return;
    }
    printf("\ndevice %s: %s (%s)\n", tg->label, tg->name,
           is_cl ? "cl_mem entry points, device time from profiling events, median"
                 : "host-memory API, wall-clock time, median");
    if (bw->gbps > 0.0) {
        char size[32];
        ct_fmt_bytes(size, sizeof size, bw->bytes);
        if (is_cl)
            printf("copy bandwidth (read + write, %s buffers): clEnqueueCopyBuffer %.2f "
                   "GB/s, copy kernel %.2f GB/s -> %.2f GB/s (%s)\n",
                   size, bw->buffer_gbps, bw->kernel_gbps, bw->gbps, bw->method);
        else
            printf("copy bandwidth (read + write, %s buffers): memcpy on %d threads "
                   "%.2f GB/s\n",
                   size, clvarlen_context_threads(dev), bw->gbps);
    }
    printf("%-22s %-46s %15s %15s\n", "op", "shape", "time", "bandwidth");
}

/* Up to 8 errors of one device, for the JSON "errors" array or stderr. */
typedef struct bench_errors {
    char v[8][400];
    size_t n;
} bench_errors;

static void run_benches(const ct_options *opt, const ct_target *tg, clvarlen_context *dev,
                        double copy_gbps, bench_errors *errs)
{
    size_t n_ops;
    const ct_op *ops = ct_ops(&n_ops);
    for (size_t i = 0; i < n_ops; i++) {
        const ct_op *op = &ops[i];
        if (!op->bench || !ct_op_matches(opt->op, op))
            continue;
        ct_progress(opt, "bench %s on %s", op->name, tg->label);
        if (op->bench(dev, opt, copy_gbps) != 0) {
            if (errs->n < 8)
                snprintf(errs->v[errs->n++], sizeof errs->v[0], "bench %s failed", op->name);
            if (!opt->json)
                fprintf(stderr, "clvarlen-test: device %s: bench %s failed\n", tg->label,
                        op->name);
        }
    }
}

/* One device: copy bandwidth, then every matching benchmark. Returns its error count. */
static size_t bench_target(const ct_options *opt, const ct_target *tg, size_t ti)
{
    bench_errors errs;
    errs.n = 0;
    clvarlen_context *dev = NULL;
    clvarlen_status st = ct_make_context(tg->index, 0, &dev);
    int is_cl = st == CLVARLEN_SUCCESS && ct_context_is_cl(dev);
    copy_bw bw;
    memset(&bw, 0, sizeof bw);
    if (st != CLVARLEN_SUCCESS) {
        snprintf(errs.v[errs.n++], sizeof errs.v[0], "cannot create a context: %s: %s",
                 clvarlen_status_name(st), clvarlen_last_error(NULL));
    } else {
        char err[300] = "";
        if (measure_copy(dev, is_cl, opt, &bw, err, sizeof err) != 0)
            snprintf(errs.v[errs.n++], sizeof errs.v[0], "copy bandwidth: %s",
                     err[0] ? err : "measurement failed");
    }
    print_device_heading(opt, tg, ti, dev, is_cl, &bw);
    fflush(stdout);
    ct_bench_json_begin();
    if (st == CLVARLEN_SUCCESS)
        run_benches(opt, tg, dev, bw.gbps, &errs);
    if (opt->json) {
        fputs(opt->json == 2 ? "{\"device\": " : "],\n     \"errors\": [", stdout);
        if (opt->json == 2) {
            ct_json_str(tg->name);
            fputs(", \"errors\": [", stdout);
        }
        for (size_t i = 0; i < errs.n; i++) {
            if (i)
                fputs(", ", stdout);
            ct_json_str(errs.v[i]);
        }
        fputs(opt->json == 2 ? "]}\n" : "]}", stdout);
    } else {
        for (size_t i = 0; i < errs.n; i++)
            fprintf(stderr, "clvarlen-test: device %s: %s\n", tg->label, errs.v[i]);
    }
    clvarlen_context_destroy(dev);
    return errs.n;
}

int ct_cmd_bench(const ct_options *opt)
{
    ct_progress_compiles = opt->progress;
    if (ct_count_ops(opt->op, 1) == 0) {
        fprintf(stderr, "clvarlen-test: no benchmark matches --op %s\n", opt->op);
        return EXIT_USAGE;
    }
    ct_target *targets = NULL;
    size_t n_targets = 0;
    char remark[1024];
    int rc = ct_resolve_targets(opt, 1, &targets, &n_targets, remark, sizeof remark);
    if (rc != EXIT_PASS)
        return rc;
    print_bench_header(opt, remark);
    size_t errored = 0;
    for (size_t ti = 0; ti < n_targets; ti++)
        errored += bench_target(opt, &targets[ti], ti);
    rc = errored ? EXIT_DEVICE : EXIT_PASS;
    if (opt->json == 2)
        printf("{\"exit_code\": %d}\n", rc);
    else if (opt->json)
        printf("],\n  \"exit_code\": %d}\n", rc);
    fflush(stdout);
    free(targets);
    return rc;
}
