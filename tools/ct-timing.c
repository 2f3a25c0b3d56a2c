/* clvarlen-test: timing: the median of OpenCL profiling events or of the wall clock.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <clvarlen/clvarlen.h>
#if CLVARLEN_HAVE_OPENCL
#  include <clvarlen/clvarlen-cl.h>
#endif

#include "ct-harness.h"

/* A benchmark's timed runs stop early once they have used this much time. */
#define BENCH_BUDGET_S 4.0
#define BENCH_MIN_ITERS 5

/* ================================================================ timing */

double ct_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int ct_context_is_cl(clvarlen_context *ctx)
{
#if CLVARLEN_HAVE_OPENCL
    cl_context c;
    cl_device_id d;
    cl_command_queue q;
    return ctx && clvarlen_context_get_cl(ctx, &c, &d, &q) == CLVARLEN_SUCCESS;
#else
    (void)ctx;
    return 0;
#endif
}

int ct_bench_iters(const ct_options *opt)
{
    return opt && opt->quick ? 5 : 25;
}

/* Calls timed back to back in one whole-call measurement (see time_one). */
#define BENCH_BURST 8

/* One timed run in seconds, < 0 on error. whole: `burst` calls enqueued
 * back to back, timed from a marker enqueued just before the first to the end
 * of the last call's event, divided by the burst: multi-kernel ops count
 * fully, and the launch gap a serving loop hides behind the previous call is
 * not charged to every call. !whole: the returned event alone (START to END).
 * whole 2: as 1, but the host's time to enqueue the burst, per call. */
static double time_one(clvarlen_context *dev, void *queue, ct_run_fn fn, void *arg, int whole,
                       int burst)
{
#if CLVARLEN_HAVE_OPENCL
    if (queue) {
        cl_command_queue q = (cl_command_queue)queue;
        cl_event marker = NULL, first = NULL, ev = NULL;
        int runs = whole && burst > 1 ? burst : 1;
        if (clFinish(q) != CL_SUCCESS)
            return -1.0;
        if (whole && clEnqueueMarkerWithWaitList(q, 0, NULL, &marker) != CL_SUCCESS)
            marker = NULL;
        double t0 = ct_now_s();
        for (int r = 0; r < runs; r++) {
            if (ev && r > 1)
                clReleaseEvent(ev);
            ev = NULL;
            /* events from the first and last calls only: a serving loop asks
             * for none, and on NVIDIA's driver an event doubles what a launch
             * costs the host */
            if (fn(arg, r == 0 || r == runs - 1 ? &ev : NULL) != 0) {
                if (marker)
                    clReleaseEvent(marker);
                if (first && first != ev)
                    clReleaseEvent(first);
                if (ev)
                    clReleaseEvent(ev);
                clFinish(q);
                return -1.0;
            }
            if (r == 0)
                first = ev;
        }
        const double enq = (ct_now_s() - t0) / runs;
        double t;
        if (whole == 2) { /* the host's enqueue time */
            clFinish(q);
            t = enq;
        } else if (!ev) { /* the run gave no event: wall clock to the end of the queue */
            clFinish(q);
            t = (ct_now_s() - t0) / runs;
        } else if (clWaitForEvents(1, &ev) != CL_SUCCESS) {
            t = -1.0;
        } else {
            double wall = ct_now_s() - t0;
            cl_ulong start = 0, end = 0, mend = 0;
            if (!first ||
                clGetEventProfilingInfo(first, CL_PROFILING_COMMAND_START, sizeof start, &start,
                                        NULL) != CL_SUCCESS ||
                clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, sizeof end, &end, NULL) !=
                    CL_SUCCESS ||
                end < start) {
                t = wall / runs; /* a queue without profiling (a caller's queue) */
            } else {
                t = (double)(end - start) * 1e-9 / runs;
                /* Use the marker only when its clock is consistent with the op's. */
                if (marker &&
                    clGetEventProfilingInfo(marker, CL_PROFILING_COMMAND_END, sizeof mend, &mend,
                                            NULL) == CL_SUCCESS &&
                    mend > 0 && mend <= start && (double)(end - mend) * 1e-9 <= wall * 1.5 + 1e-4)
                    t = (double)(end - mend) * 1e-9 / runs;
            }
        }
        if (first && first != ev)
            clReleaseEvent(first);
        if (ev)
            clReleaseEvent(ev);
        if (marker)
            clReleaseEvent(marker);
        return t;
    }
#else
    (void)queue;
    (void)whole;
    (void)burst;
#endif
    double t0 = ct_now_s();
    if (fn(arg, NULL) != 0)
        return -1.0;
    if (clvarlen_context_finish(dev) != CLVARLEN_SUCCESS)
        return -1.0;
    return ct_now_s() - t0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double time_median(clvarlen_context *dev, ct_run_fn fn, void *arg, int iters, int whole)
{
    void *queue = NULL;
#if CLVARLEN_HAVE_OPENCL
    cl_context c;
    cl_device_id d;
    cl_command_queue q;
    if (clvarlen_context_get_cl(dev, &c, &d, &q) == CLVARLEN_SUCCESS)
        queue = q;
#endif
    /* Two warm-up runs: the first may compile kernels; the second sizes the loop. */
    if (time_one(dev, queue, fn, arg, whole, 1) < 0.0)
        return -1.0;
    double est = time_one(dev, queue, fn, arg, whole, 1);
    if (est < 0.0)
        return -1.0;
    if (iters < 1)
        iters = 1;
    /* Bursts only where a run is short enough for them to matter. */
    int burst = est < 1e-3 ? BENCH_BURST : 1;
    est *= burst;
    if (est > 0.0 && est * iters > BENCH_BUDGET_S) {
        int fit = (int)(BENCH_BUDGET_S / est);
        iters = fit < BENCH_MIN_ITERS ? (iters < BENCH_MIN_ITERS ? iters : BENCH_MIN_ITERS) : fit;
    }
    double *t = malloc((size_t)iters * sizeof *t);
    if (!t)
        return -1.0;
    for (int i = 0; i < iters; i++) {
        t[i] = time_one(dev, queue, fn, arg, whole, burst);
        if (t[i] < 0.0) {
            free(t);
            return -1.0;
        }
    }
    qsort(t, (size_t)iters, sizeof *t, cmp_double);
    double m = iters % 2 ? t[iters / 2] : 0.5 * (t[iters / 2 - 1] + t[iters / 2]);
    free(t);
    return m;
}

double ct_time_median(clvarlen_context *dev, ct_run_fn fn, void *arg, int iters)
{
    /* CLVARLEN_BENCH_TIMING=kernel: the op's last kernel alone, START to END
     * (what the launches around it cost is then left out); =host: the host's
     * time to enqueue a call (wall clock, bursts without waiting) */
    const char *how = getenv("CLVARLEN_BENCH_TIMING");
    return time_median(dev, fn, arg, iters,
                       !how ? 1 : !strcmp(how, "kernel") ? 0 : !strcmp(how, "host") ? 2 : 1);
}

double ct_time_median_launch(clvarlen_context *dev, ct_run_fn fn, void *arg, int iters)
{
    return time_median(dev, fn, arg, iters, 0);
}
