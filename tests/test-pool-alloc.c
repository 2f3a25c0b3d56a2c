/* Failures while a context's CPU thread pool is built: this executable
 * defines calloc and pthread_create itself (the executable comes first in
 * symbol lookup, so libclvarlen's calls reach these), and makes the k-th call
 * that libclvarlen makes from the test's thread fail. Every failure must give
 * CLVARLEN_ERROR_OUT_OF_MEMORY, no context, no thread left running and (under
 * ASan or valgrind) no leak. Before the pool checked them, a failed calloc of
 * the worker list was dereferenced.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kit-check.h"

/* ------------------------------------------------------------ the interposed calls */

/* Armed on one thread only: calls from the pool's workers or the library's
 * other threads are never failed, so the k-th call is the same on every run. */
static _Thread_local int calloc_countdown = -1;  /* -1: off; 0: fail the next */
static _Thread_local int create_countdown = -1;
static _Thread_local bool failed_one;

static void *(*real_calloc)(size_t, size_t);
static int (*real_pthread_create)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);

/* dlsym may allocate while it resolves calloc: those few bytes come from here. */
static unsigned char bootstrap[1024];
static atomic_size_t bootstrap_used;

static bool called_from_clvarlen(const void *caller)
{
    Dl_info info;
    return dladdr(caller, &info) != 0 && info.dli_fname &&
           strstr(info.dli_fname, "libclvarlen") != NULL;
}

static bool fail_now(int *countdown, const void *caller)
{
    if (*countdown < 0 || !called_from_clvarlen(caller))
        return false;
    if ((*countdown)-- > 0)
        return false;
    failed_one = true;
    return true;
}

void *calloc(size_t n, size_t size)
{
    static _Thread_local bool resolving;
    if (!real_calloc) {
        if (resolving) {
            size_t at = atomic_fetch_add(&bootstrap_used, 64);
            return at + 64 <= sizeof bootstrap && n * size <= 64 ? bootstrap + at : NULL;
        }
        resolving = true;
        *(void **)&real_calloc = dlsym(RTLD_NEXT, "calloc");
        resolving = false;
    }
    if (fail_now(&calloc_countdown, __builtin_return_address(0)))
        return NULL;
    return real_calloc(n, size);
}

int pthread_create(pthread_t *thread, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
    if (!real_pthread_create)
        *(void **)&real_pthread_create = dlsym(RTLD_NEXT, "pthread_create");
    if (fail_now(&create_countdown, __builtin_return_address(0)))
        return 11; /* EAGAIN, as with RLIMIT_NPROC */
    return real_pthread_create(thread, attr, fn, arg);
}

/* ------------------------------------------------------------ tests */

static int threads_in_process(void)
{
    DIR *dir = opendir("/proc/self/task");
    ck_assert_ptr_nonnull(dir);
    int n = 0;
    for (struct dirent *e; (e = readdir(dir)) != NULL;)
        n += e->d_name[0] != '.';
    closedir(dir);
    return n;
}

/* A CPU context of `threads`, with the k-th call behind *countdown failing. */
static clvarlen_status create_cpu_context(int threads, int *countdown, int k,
                                          clvarlen_context **ctx)
{
    clvarlen_options *opt = NULL;
    ck_assert_int_eq(clvarlen_options_create(&opt), CLVARLEN_SUCCESS);
    ck_assert_int_eq(clvarlen_options_set_device(opt, "cpu"), CLVARLEN_SUCCESS);
    ck_assert_int_eq(clvarlen_options_set_threads(opt, threads), CLVARLEN_SUCCESS);
    *ctx = NULL;
    failed_one = false;
    *countdown = k;
    clvarlen_status st = clvarlen_context_create(opt, ctx);
    *countdown = -1;
    clvarlen_options_destroy(opt);
    return st;
}

/* Fails the k-th calloc (or pthread_create) for k = 0, 1, ... until a create
 * succeeds with no failure injected; returns how many failures were checked. */
static int sweep(int *countdown, const char *what)
{
    int baseline = threads_in_process();
    int k = 0;
    for (;; k++) {
        ck_assert_msg(k < 1000, "%s: still failing after %d injections", what, k);
        clvarlen_context *ctx = NULL;
        clvarlen_status st = create_cpu_context(4, countdown, k, &ctx);
        if (!failed_one) {
            ck_assert_msg(st == CLVARLEN_SUCCESS, "%s: %s without a failure", what,
                          clvarlen_status_name(st));
            ck_assert_int_eq(clvarlen_context_threads(ctx), 4);
            clvarlen_context_destroy(ctx);
            break;
        }
        ck_assert_msg(st == CLVARLEN_ERROR_OUT_OF_MEMORY, "%s %d failed: got %s (%s)", what, k,
                      clvarlen_status_name(st), clvarlen_last_error(NULL));
        ck_assert_msg(ctx == NULL, "%s %d failed: a context was returned", what, k);
        ck_assert_msg(strstr(clvarlen_last_error(NULL), "out of memory") != NULL,
                      "%s %d failed: message '%s'", what, k, clvarlen_last_error(NULL));
        ck_assert_msg(threads_in_process() == baseline, "%s %d failed: %d threads, %d before",
                      what, k, threads_in_process(), baseline);
    }
    return k;
}

START_TEST(calloc_fails)
{
    /* valgrind puts its own calloc in front of this one: nothing to inject. */
    const char *preload = getenv("LD_PRELOAD");
    if (preload && strstr(preload, "vgpreload"))
        return;
    int injected = sweep(&calloc_countdown, "calloc");
    /* context, its error buffer, the pool, its worker list at least */
    ck_assert_msg(injected >= 4, "only %d callocs reached", injected);
}
END_TEST

START_TEST(pthread_create_fails)
{
    int injected = sweep(&create_countdown, "pthread_create");
    ck_assert_int_eq(injected, 3); /* 4 threads: the caller and 3 workers */
}
END_TEST

static Suite *pool_alloc_suite(void)
{
    Suite *s = suite_create("pool-alloc");
    TCase *tc = tcase_create("pool");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, calloc_fails);
    tcase_add_test(tc, pthread_create_fails);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run_suite(pool_alloc_suite());
}
