/* The CPU fallback's thread pool: one worker per physical core (hwloc; not
 * per hyperthread, since these kernels are bandwidth- or FMA-bound), each
 * bound to its core, falling back to sysconf without hwloc. cv_pool_for hands
 * out chunks of a range through an atomic counter; the caller participates.
 * One job at a time per pool (a context is used by one thread at a time).
 */
#include "core/core.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#if CLVARLEN_HAVE_HWLOC
#  include <hwloc.h>
#endif

#define CV_POOL_MAX_THREADS 256

struct cv_pool {
    int size; /* threads including the caller */
    pthread_t *threads;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_cond_t done;
    uint64_t generation; /* bumped for every job */
    int stopping;
    int busy_workers;    /* workers still inside the current job */

    /* the current job */
    cv_range_fn fn;
    void *arg;
    int64_t n, chunk;
    atomic_llong next;

#if CLVARLEN_HAVE_HWLOC
    hwloc_topology_t topo;
    int n_cores;
#endif
};

typedef struct worker_arg {
    cv_pool *pool;
    int index;
} worker_arg;

static void run_chunks(cv_pool *p)
{
    for (;;) {
        long long begin = atomic_fetch_add(&p->next, p->chunk);
        if (begin >= p->n)
            break;
        int64_t end = begin + p->chunk < p->n ? begin + p->chunk : p->n;
        p->fn(p->arg, begin, end);
    }
}

static void bind_to_core(cv_pool *p, int index)
{
#if CLVARLEN_HAVE_HWLOC
    if (!p->topo || p->n_cores <= 0)
        return;
    hwloc_obj_t core = hwloc_get_obj_by_type(p->topo, HWLOC_OBJ_CORE, (unsigned)(index % p->n_cores));
    if (core && core->cpuset) {
        hwloc_bitmap_t set = hwloc_bitmap_dup(core->cpuset);
        hwloc_bitmap_singlify(set);
        /* Binding is an optimisation: a refusal (containers, cgroups) is not an error. */
        (void)hwloc_set_cpubind(p->topo, set, HWLOC_CPUBIND_THREAD);
        hwloc_bitmap_free(set);
    }
#else
    (void)p;
    (void)index;
#endif
}

static void *worker_main(void *varg)
{
    worker_arg *wa = varg;
    cv_pool *p = wa->pool;
    int index = wa->index;
    free(wa);
    bind_to_core(p, index);
    uint64_t seen = 0;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (!p->stopping && p->generation == seen)
            pthread_cond_wait(&p->wake, &p->lock);
        if (p->stopping)
            break;
        seen = p->generation;
        pthread_mutex_unlock(&p->lock);
        run_chunks(p);
        pthread_mutex_lock(&p->lock);
        if (--p->busy_workers == 0)
            pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

static int count_cores(cv_pool *p)
{
    int n = 0;
#if CLVARLEN_HAVE_HWLOC
    if (hwloc_topology_init(&p->topo) == 0 && hwloc_topology_load(p->topo) == 0) {
        n = hwloc_get_nbobjs_by_type(p->topo, HWLOC_OBJ_CORE);
        p->n_cores = n;
    } else if (p->topo) {
        hwloc_topology_destroy(p->topo);
        p->topo = NULL;
    }
#else
    (void)p;
#endif
    if (n <= 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n = c > 0 ? (int)c : 1;
    }
    return n;
}

cv_pool *cv_pool_create(int threads)
{
    cv_pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    int cores = count_cores(p);
    int size = threads > 0 ? threads : cores;
    if (size > CV_POOL_MAX_THREADS)
        size = CV_POOL_MAX_THREADS;
    p->size = size;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    atomic_init(&p->next, 0);
    if (size > 1) {
        p->threads = calloc((size_t)size - 1, sizeof *p->threads);
        if (!p->threads) {
            p->size = 1; /* no workers to join (found by tests/test-fault.c) */
            cv_pool_destroy(p);
            return NULL;
        }
    }
    for (int i = 1; i < size; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (wa) {
            wa->pool = p;
            wa->index = i;
        }
        if (!wa || pthread_create(&p->threads[i - 1], NULL, worker_main, wa) != 0) {
            free(wa); /* the worker frees it, but this one never started */
            p->size = i; /* a smaller pool still works; destroy joins those started */
            break;
        }
    }
    return p;
}

void cv_pool_destroy(cv_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    p->stopping = 1;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    for (int i = 1; i < p->size; i++)
        pthread_join(p->threads[i - 1], NULL);
    free(p->threads);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
#if CLVARLEN_HAVE_HWLOC
    if (p->topo)
        hwloc_topology_destroy(p->topo);
#endif
    free(p);
}

int cv_pool_size(const cv_pool *p)
{
    return p ? p->size : 1;
}

void cv_pool_for(cv_pool *p, int64_t n, int64_t grain, cv_range_fn fn, void *arg)
{
    if (n <= 0)
        return;
    if (grain < 1)
        grain = 1;
    int size = p ? p->size : 1;
    /* About four chunks per thread balances uneven work without much overhead. */
    int64_t chunk = (n + (int64_t)size * 4 - 1) / ((int64_t)size * 4);
    if (chunk < grain)
        chunk = grain;
    if (!p || size == 1 || chunk >= n) {
        fn(arg, 0, n);
        return;
    }
    pthread_mutex_lock(&p->lock);
    p->fn = fn;
    p->arg = arg;
    p->n = n;
    p->chunk = chunk;
    atomic_store(&p->next, 0);
    p->busy_workers = p->size - 1;
    p->generation++;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);

    run_chunks(p);

    pthread_mutex_lock(&p->lock);
    while (p->busy_workers > 0)
        pthread_cond_wait(&p->done, &p->lock);
    pthread_mutex_unlock(&p->lock);
}
