/* fork(): a context made before fork() and used in the child. A CPU context
 * must work there (its pool rebuilt, its lock fresh even when another thread
 * of the parent held it at the fork) and give the parent's results; an
 * OpenCL context must refuse every call with INVALID_ARGUMENT instead of
 * hanging, and a new OpenCL context in that child is CLVARLEN_ERROR_OPENCL.
 * Children run under a time limit, so a hang fails the test.
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kit-check.h"
#include "test-workload.h"

#ifndef TEST_BACKEND_CL
#  define TEST_BACKEND_CL 0
#endif

#define CHILD_SECONDS 30

/* Child exit codes. */
enum { CHILD_OK = 0, CHILD_RUN_FAILED = 10, CHILD_WRONG_RESULT, CHILD_WRONG_STATUS };

/* Forks, runs child(arg) in the child (its return value is the exit code) and
 * fails the test unless it exits CHILD_OK within CHILD_SECONDS. */
static void in_child(int (*child)(void *), void *arg, const char *label)
{
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_msg(pid >= 0, "fork failed");
    if (pid == 0) {
        alarm(CHILD_SECONDS); /* a hang ends in SIGALRM */
        _exit(child(arg));
    }
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(!WIFSIGNALED(status), "%s: the child died of signal %d%s", label,
                  WTERMSIG(status), WTERMSIG(status) == SIGALRM ? " (it hung)" : "");
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == CHILD_OK,
                  "%s: the child exited %d", label, WEXITSTATUS(status));
}

typedef struct fork_case {
    clvarlen_context *ctx;
    const workload *w;
    const unsigned char *want;
    const char *cl_spec;         /* the OpenCL device, found by the parent */
} fork_case;

static clvarlen_context *context_on(const char *spec, int threads)
{
    clvarlen_options *opt = NULL;
    ck_assert_int_eq(clvarlen_options_create(&opt), CLVARLEN_SUCCESS);
    ck_assert_int_eq(clvarlen_options_set_device(opt, spec), CLVARLEN_SUCCESS);
    ck_assert_int_eq(clvarlen_options_set_threads(opt, threads), CLVARLEN_SUCCESS);
    clvarlen_context *ctx = NULL;
    clvarlen_status st = clvarlen_context_create(opt, &ctx);
    clvarlen_options_destroy(opt);
    ck_assert_msg(st == CLVARLEN_SUCCESS, "context on '%s': %s", spec, clvarlen_last_error(NULL));
    return ctx;
}

static unsigned char *run_or_fail(clvarlen_context *ctx, const workload *w)
{
    unsigned char *out = tu_xmalloc(workload_result_bytes(w));
    const char *what = "";
    clvarlen_status st = workload_run(ctx, w, out, &what);
    ck_assert_msg(st == CLVARLEN_SUCCESS, "%s: %s", what, clvarlen_last_error(ctx));
    return out;
}

/* In the child: the inherited CPU context runs the workload twice and gets the
 * parent's result, then is destroyed (joining the child's own workers). */
static int child_uses_cpu_context(void *arg)
{
    fork_case *c = arg;
    size_t bytes = workload_result_bytes(c->w);
    unsigned char *out = malloc(bytes);
    const char *what = "";
    for (int round = 0; round < 2; round++) {
        if (!out || workload_run(c->ctx, c->w, out, &what) != CLVARLEN_SUCCESS)
            return CHILD_RUN_FAILED;
        if (memcmp(out, c->want, bytes) != 0)
            return CHILD_WRONG_RESULT;
    }
    if (clvarlen_context_threads(c->ctx) < 1)
        return CHILD_WRONG_RESULT;
    clvarlen_context_destroy(c->ctx);
    free(out);
    return CHILD_OK;
}

START_TEST(cpu_context_in_child)
{
    workload *w = workload_create();
    ck_assert_ptr_nonnull(w);
    clvarlen_context *ctx = context_on("cpu", 4);
    ck_assert_int_eq(clvarlen_context_threads(ctx), 4);
    unsigned char *want = run_or_fail(ctx, w); /* the workers have run a job */
    fork_case c = {.ctx = ctx, .w = w, .want = want};
    in_child(child_uses_cpu_context, &c, "CPU context after fork");
    /* The parent's context is untouched by the child. */
    unsigned char *again = run_or_fail(ctx, w);
    tu_assert_bytes_eq(again, want, workload_result_bytes(w), "parent after fork");
    free(again);
    free(want);
    clvarlen_context_destroy(ctx);
    workload_destroy(w);
}
END_TEST

#if !defined(__SANITIZE_ADDRESS__) /* see cpu_context_busy_at_fork */
typedef struct busy_thread {
    fork_case *c;
    atomic_int stop;
    atomic_int runs;
} busy_thread;

static void *keep_busy(void *arg)
{
    busy_thread *b = arg;
    unsigned char *out = malloc(workload_result_bytes(b->c->w));
    const char *what = "";
    while (out && !atomic_load(&b->stop)) {
        (void)workload_run(b->c->ctx, b->c->w, out, &what);
        atomic_fetch_add(&b->runs, 1);
    }
    free(out);
    return NULL;
}

/* Another thread runs ops on the context while the parent forks, so the
 * context's lock and its pool's are often held at the fork; the child still
 * must not hang. Not under ASan: gcc 12's ASan does not hold its allocator's
 * lock across fork(), so a child of a thread that was allocating hangs in
 * malloc, whatever the library does. */
START_TEST(cpu_context_busy_at_fork)
{
    /* Under valgrind the child's leak check counts the busy thread's buffers
     * (their pointers were on a stack the child does not have) as lost. */
    const char *preload = getenv("LD_PRELOAD");
    if (preload && strstr(preload, "vgpreload"))
        return;
    workload *w = workload_create();
    ck_assert_ptr_nonnull(w);
    clvarlen_context *ctx = context_on("cpu", 3);
    unsigned char *want = run_or_fail(ctx, w);
    fork_case c = {.ctx = ctx, .w = w, .want = want};
    busy_thread b = {.c = &c};
    pthread_t thread;
    ck_assert_int_eq(pthread_create(&thread, NULL, keep_busy, &b), 0);
    for (int i = 0; i < 8; i++) {
        while (atomic_load(&b.runs) <= i)
            nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
        in_child(child_uses_cpu_context, &c, "CPU context busy at fork");
    }
    atomic_store(&b.stop, 1);
    ck_assert_int_eq(pthread_join(thread, NULL), 0);
    free(want);
    clvarlen_context_destroy(ctx);
    workload_destroy(w);
}
END_TEST
#endif


#if TEST_BACKEND_CL
/* In the child: every call on the inherited OpenCL context fails with
 * INVALID_ARGUMENT and a message, no output written; a new OpenCL context is
 * refused; a CPU context works; destroying the inherited one returns. */
static int child_uses_cl_context(void *arg)
{
    fork_case *c = arg;
    size_t bytes = workload_result_bytes(c->w);
    unsigned char *out = malloc(bytes);
    const char *what = "";
    if (!out)
        return CHILD_RUN_FAILED;
    if (workload_run(c->ctx, c->w, out, &what) != CLVARLEN_ERROR_INVALID_ARGUMENT ||
        !strstr(clvarlen_last_error(c->ctx), "fork"))
        return CHILD_WRONG_STATUS;
    if (clvarlen_context_finish(c->ctx) != CLVARLEN_ERROR_INVALID_ARGUMENT)
        return CHILD_WRONG_STATUS;
    clvarlen_context *fresh = NULL;
    clvarlen_options *opt = NULL;
    if (clvarlen_options_create(&opt) != CLVARLEN_SUCCESS ||
        clvarlen_options_set_device(opt, c->cl_spec) != CLVARLEN_SUCCESS)
        return CHILD_RUN_FAILED;
    if (clvarlen_context_create(opt, &fresh) != CLVARLEN_ERROR_OPENCL || fresh ||
        !strstr(clvarlen_last_error(NULL), "fork"))
        return CHILD_WRONG_STATUS;
    if (clvarlen_options_set_device(opt, "cpu") != CLVARLEN_SUCCESS ||
        clvarlen_context_create(opt, &fresh) != CLVARLEN_SUCCESS)
        return CHILD_RUN_FAILED;
    clvarlen_options_destroy(opt);
    if (workload_run(fresh, c->w, out, &what) != CLVARLEN_SUCCESS)
        return CHILD_RUN_FAILED;
    clvarlen_context_destroy(fresh);
    clvarlen_context_destroy(c->ctx);
    free(out);
    return CHILD_OK;
}

/* In the child: making an OpenCL context is refused, a CPU one works. */
static int child_makes_contexts(void *arg)
{
    fork_case *c = arg;
    clvarlen_options *opt = NULL;
    clvarlen_context *ctx = NULL;
    if (clvarlen_options_create(&opt) != CLVARLEN_SUCCESS ||
        clvarlen_options_set_device(opt, c->cl_spec) != CLVARLEN_SUCCESS)
        return CHILD_RUN_FAILED;
    if (clvarlen_context_create(opt, &ctx) != CLVARLEN_ERROR_OPENCL || ctx)
        return CHILD_WRONG_STATUS;
    if (clvarlen_options_set_device(opt, "cpu") != CLVARLEN_SUCCESS ||
        clvarlen_context_create(opt, &ctx) != CLVARLEN_SUCCESS)
        return CHILD_RUN_FAILED;
    clvarlen_options_destroy(opt);
    clvarlen_context_destroy(ctx);
    return CHILD_OK;
}

/* The parent only lists the devices (that loads the driver) and makes no
 * context before it forks. */
START_TEST(cl_driver_loaded_in_parent)
{
    fork_case c = {.cl_spec = tu_cl_device_spec()};
    in_child(child_makes_contexts, &c, "OpenCL context made after fork");
}
END_TEST

START_TEST(cl_context_in_child)
{
    workload *w = workload_create();
    ck_assert_ptr_nonnull(w);
    clvarlen_context *ctx = tu_cl_context();
    unsigned char *want = run_or_fail(ctx, w);
    fork_case c = {.ctx = ctx, .w = w, .want = want, .cl_spec = tu_cl_device_spec()};
    in_child(child_uses_cl_context, &c, "OpenCL context after fork");
    unsigned char *again = run_or_fail(ctx, w);
    tu_assert_bytes_eq(again, want, workload_result_bytes(w), "parent after fork");
    free(again);
    free(want);
    clvarlen_context_destroy(ctx);
    workload_destroy(w);
}
END_TEST
#endif

static Suite *fork_suite(void)
{
    Suite *s = suite_create(TEST_BACKEND_CL ? "fork-cl" : "fork-cpu");
    TCase *tc = tcase_create("fork");
    tcase_set_timeout(tc, TEST_BACKEND_CL ? 300 : 60);
    tcase_add_test(tc, cpu_context_in_child);
#if !defined(__SANITIZE_ADDRESS__)
    tcase_add_test(tc, cpu_context_busy_at_fork);
#endif
#if TEST_BACKEND_CL
    tcase_add_test(tc, cl_driver_loaded_in_parent);
    tcase_add_test(tc, cl_context_in_child);
#endif
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
#if TEST_BACKEND_CL
    if (!tu_probe_opencl_device()) {
        printf("no OpenCL device: skipped\n");
        return TU_EXIT_SKIP;
    }
#endif
    return tu_run_suite(fork_suite());
}
