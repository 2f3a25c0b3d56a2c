/* Threads: many threads creating contexts at once, each with its own context,
 * and all sharing one, on the CPU fallback (TEST_BACKEND_CL=0) or the OpenCL
 * device (TEST_BACKEND_CL=1, with a cold and a warm program cache). Every
 * result must be bitwise the result of the same workload run alone (the
 * header's contract: a context may be shared, its calls are serialised).
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kit-check.h"
#include "test-workload.h"

#ifndef TEST_BACKEND_CL
#  define TEST_BACKEND_CL 0
#endif

#define THREADS 8
#define ROUNDS 3

typedef struct run_setup {
    const workload *w;
    const char *device;          /* spec of every context made */
    int pool_threads;            /* CPU threads per context */
    const char *cache_dir;       /* NULL: the test environment's */
    clvarlen_context *shared;    /* NULL: each thread makes its own */
    pthread_barrier_t start;
} run_setup;

typedef struct job {
    run_setup *setup;
    unsigned char *first;        /* this thread's first result */
    unsigned char *again;
    char failure[512];           /* empty when the thread saw nothing wrong */
} job;

static clvarlen_context *make_context(const run_setup *s, clvarlen_status *st)
{
    clvarlen_options *opt = NULL;
    clvarlen_context *ctx = NULL;
    *st = clvarlen_options_create(&opt);
    if (*st == CLVARLEN_SUCCESS)
        *st = clvarlen_options_set_device(opt, s->device);
    if (*st == CLVARLEN_SUCCESS)
        *st = clvarlen_options_set_threads(opt, s->pool_threads);
    if (*st == CLVARLEN_SUCCESS && s->cache_dir)
        *st = clvarlen_options_set_cache_dir(opt, s->cache_dir);
    if (*st == CLVARLEN_SUCCESS)
        *st = clvarlen_context_create(opt, &ctx);
    clvarlen_options_destroy(opt);
    return ctx;
}

static void run_rounds(job *j, clvarlen_context *ctx)
{
    const workload *w = j->setup->w;
    size_t bytes = workload_result_bytes(w);
    for (int round = 0; round < ROUNDS; round++) {
        unsigned char *out = round == 0 ? j->first : j->again;
        const char *what = "";
        clvarlen_status st = workload_run(ctx, w, out, &what);
        if (st != CLVARLEN_SUCCESS) {
            /* The message may be another thread's when the context is shared. */
            snprintf(j->failure, sizeof j->failure, "round %d, %s: %s", round, what,
                     clvarlen_status_name(st));
            return;
        }
        if (round > 0 && memcmp(out, j->first, bytes) != 0) {
            snprintf(j->failure, sizeof j->failure, "round %d differs from round 0", round);
            return;
        }
    }
}

static void *thread_main(void *arg)
{
    job *j = arg;
    run_setup *s = j->setup;
    pthread_barrier_wait(&s->start);
    clvarlen_context *ctx = s->shared;
    if (!ctx) {
        clvarlen_status st;
        ctx = make_context(s, &st);
        if (!ctx) {
            snprintf(j->failure, sizeof j->failure, "context_create: %s (%s)",
                     clvarlen_status_name(st), clvarlen_last_error(NULL));
            return NULL;
        }
    }
    run_rounds(j, ctx);
    if (!s->shared)
        clvarlen_context_destroy(ctx);
    return NULL;
}

/* THREADS threads run the workload; each one's first result goes to results[i]. */
static void run_threads(run_setup *s, unsigned char **results)
{
    size_t bytes = workload_result_bytes(s->w);
    job jobs[THREADS];
    pthread_t threads[THREADS];
    ck_assert_int_eq(pthread_barrier_init(&s->start, NULL, THREADS), 0);
    for (int i = 0; i < THREADS; i++) {
        jobs[i] = (job){.setup = s, .first = results[i], .again = tu_xmalloc(bytes)};
        ck_assert_int_eq(pthread_create(&threads[i], NULL, thread_main, &jobs[i]), 0);
    }
    for (int i = 0; i < THREADS; i++)
        ck_assert_int_eq(pthread_join(threads[i], NULL), 0);
    pthread_barrier_destroy(&s->start);
    for (int i = 0; i < THREADS; i++) {
        free(jobs[i].again);
        ck_assert_msg(jobs[i].failure[0] == '\0', "thread %d: %s", i, jobs[i].failure);
    }
}

/* The workload run alone, on a context of its own. */
static unsigned char *run_alone(run_setup *s)
{
    clvarlen_status st;
    clvarlen_context *ctx = make_context(s, &st);
    ck_assert_msg(ctx != NULL, "context_create: %s (%s)", clvarlen_status_name(st),
                  clvarlen_last_error(NULL));
    unsigned char *want = tu_xmalloc(workload_result_bytes(s->w));
    const char *what = "";
    st = workload_run(ctx, s->w, want, &what);
    ck_assert_msg(st == CLVARLEN_SUCCESS, "alone, %s: %s (%s)", what, clvarlen_status_name(st),
                  clvarlen_last_error(ctx));
    clvarlen_context_destroy(ctx);
    return want;
}

/* cold: the threads start on an empty program cache and the lone run comes
 * after them; warm: the lone run fills the cache first. */
static void check_threads(const char *device, int pool_threads, bool shared, bool cold)
{
    workload *w = workload_create();
    ck_assert_ptr_nonnull(w);
    size_t bytes = workload_result_bytes(w);
    run_setup s = {.w = w, .device = device, .pool_threads = pool_threads};
    char *dir = TEST_BACKEND_CL ? tu_make_temp_dir(cold ? "cache-cold" : "cache-warm") : NULL;
    s.cache_dir = dir;
    unsigned char *want = cold ? NULL : run_alone(&s);
    clvarlen_status st = CLVARLEN_SUCCESS;
    if (shared) {
        s.shared = make_context(&s, &st);
        ck_assert_msg(s.shared != NULL, "context_create: %s", clvarlen_status_name(st));
    }
    unsigned char *results[THREADS];
    for (int i = 0; i < THREADS; i++)
        results[i] = tu_xmalloc(bytes);
    run_threads(&s, results);
    clvarlen_context_destroy(s.shared);
    if (!want)
        want = run_alone(&s);
    for (int i = 0; i < THREADS; i++) {
        tu_assert_bytes_eq(results[i], want, bytes, shared ? "shared context" : "own context");
        free(results[i]);
    }
    free(want);
    if (dir) {
        tu_remove_tree(dir);
        free(dir);
    }
    workload_destroy(w);
}

#if TEST_BACKEND_CL
/* ------------------------------------------------------------ OpenCL */

#if defined(__SANITIZE_ADDRESS__)
/* PoCL's LLVM gives the thread that first loads it an alternate signal stack
 * from malloc; when that thread (one of ours here) exits, ASan (gcc 12) takes
 * the stack for its own and aborts on failing to munmap it. */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
    return "use_sigaltstack=0";
}
#endif

typedef struct first_create {
    pthread_barrier_t *start;
    clvarlen_status status;
    clvarlen_device_info info;
} first_create;

/* A context on the best OpenCL device ("opencl": the default takes the CPU
 * fallback over an OpenCL CPU device such as PoCL). */
static clvarlen_status create_opencl(clvarlen_context **ctx)
{
    clvarlen_options *o = NULL;
    clvarlen_status st = clvarlen_options_create(&o);
    if (st == CLVARLEN_SUCCESS)
        st = clvarlen_options_set_device(o, "opencl");
    if (st == CLVARLEN_SUCCESS)
        st = clvarlen_context_create(o, ctx);
    clvarlen_options_destroy(o);
    return st;
}

static void *create_at_once(void *arg)
{
    first_create *f = arg;
    pthread_barrier_wait(f->start);
    clvarlen_context *ctx = NULL;
    f->status = create_opencl(&ctx);
    if (f->status == CLVARLEN_SUCCESS)
        f->status = clvarlen_context_device(ctx, &f->info);
    clvarlen_context_destroy(ctx);
    return NULL;
}

/* The process's first OpenCL calls, from THREADS threads at once (this test
 * runs first, in a process that has made none): every context must get the
 * device a lone create gets. Before device enumeration was made once per
 * process, PoCL gave some threads the CPU fallback and sometimes crashed. */
START_TEST(first_contexts_at_once)
{
    pthread_barrier_t start;
    ck_assert_int_eq(pthread_barrier_init(&start, NULL, THREADS), 0);
    first_create f[THREADS];
    pthread_t threads[THREADS];
    for (int i = 0; i < THREADS; i++) {
        f[i] = (first_create){.start = &start};
        ck_assert_int_eq(pthread_create(&threads[i], NULL, create_at_once, &f[i]), 0);
    }
    for (int i = 0; i < THREADS; i++)
        ck_assert_int_eq(pthread_join(threads[i], NULL), 0);
    pthread_barrier_destroy(&start);
    clvarlen_context *ctx = NULL;
    ck_assert_int_eq(create_opencl(&ctx), CLVARLEN_SUCCESS);
    clvarlen_device_info alone;
    ck_assert_int_eq(clvarlen_context_device(ctx, &alone), CLVARLEN_SUCCESS);
    clvarlen_context_destroy(ctx);
    ck_assert_msg(alone.kind != CLVARLEN_DEVICE_CPU_FALLBACK, "a lone create got the CPU fallback");
    for (int i = 0; i < THREADS; i++) {
        ck_assert_msg(f[i].status == CLVARLEN_SUCCESS, "thread %d: %s", i,
                      clvarlen_status_name(f[i].status));
        ck_assert_msg(f[i].info.index == alone.index && f[i].info.kind == alone.kind &&
                          strcmp(f[i].info.device_name, alone.device_name) == 0,
                      "thread %d got device %d '%s', a lone create gets %d '%s'", i,
                      f[i].info.index, f[i].info.device_name, alone.index, alone.device_name);
    }
}
END_TEST

START_TEST(own_contexts_cold) { check_threads(tu_cl_device_spec(), 1, false, true); }
END_TEST
START_TEST(own_contexts_warm) { check_threads(tu_cl_device_spec(), 1, false, false); }
END_TEST
START_TEST(shared_context_cold) { check_threads(tu_cl_device_spec(), 1, true, true); }
END_TEST
START_TEST(shared_context_warm) { check_threads(tu_cl_device_spec(), 1, true, false); }
END_TEST

static Suite *concurrency_suite(void)
{
    Suite *s = suite_create("concurrency-cl");
    TCase *tc = tcase_create("opencl");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, first_contexts_at_once); /* first: no OpenCL call before it */
    tcase_add_test(tc, own_contexts_cold);
    tcase_add_test(tc, own_contexts_warm);
    tcase_add_test(tc, shared_context_cold);
    tcase_add_test(tc, shared_context_warm);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    if (!tu_probe_opencl_device()) {
        printf("no OpenCL device: skipped\n");
        return TU_EXIT_SKIP;
    }
    return tu_run_suite(concurrency_suite());
}

#else
/* ------------------------------------------------------------ CPU fallback */

START_TEST(own_contexts) { check_threads("cpu", 2, false, false); }
END_TEST
START_TEST(shared_context) { check_threads("cpu", 4, true, false); }
END_TEST

static Suite *concurrency_suite(void)
{
    Suite *s = suite_create("concurrency-cpu");
    TCase *tc = tcase_create("cpu");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, own_contexts);
    tcase_add_test(tc, shared_context);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run_suite(concurrency_suite());
}
#endif
