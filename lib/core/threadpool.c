/* The CPU fallback's thread pool: one worker per physical core (hwloc; not
 * per hyperthread, since these kernels are bandwidth- or FMA-bound), each
 * bound to its core, falling back to sysconf without hwloc. cv_pool_for hands
 * out chunks of a range through an atomic counter; the caller participates.
 * One job at a time per pool: every call on a context holds its lock (CV_ENTER).
 * After fork() a child rebuilds the workers (cv_pool_adopt, lib/core/process.c).
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

/* The first core of the next pool: pools of different contexts spread over
 * the machine instead of all binding their first worker to core 1. */
static atomic_int next_core_base;

typedef struct cv_worker {
    pthread_t thread;
    cv_pool *pool;
    int index;
} cv_worker;

struct cv_pool {
    int size;            /* threads including the caller */
    int wanted;          /* the size asked for (a forked child rebuilds to it) */
    cv_worker *workers;  /* wanted - 1 of them; the first size - 1 are running */
    unsigned long fork_gen; /* cv_fork_generation() when the workers were started */
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_cond_t done;
    uint64_t generation; /* bumped for every job */
    int stopping;
    int busy_workers;    /* workers still inside the current job */
    int core_base;       /* worker i binds to core (core_base + i) mod cores */
    /* the caller's parallel-for (cv_pool_create_user): no workers of our own */
    clvarlen_parallel_for_fn user_for;
    void *user;

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
    const unsigned at = (unsigned)((p->core_base + index) % p->n_cores);
    hwloc_obj_t core = hwloc_get_obj_by_type(p->topo, HWLOC_OBJ_CORE, at);
    if (core && core->cpuset) {
        hwloc_bitmap_t set = hwloc_bitmap_dup(core->cpuset);
        if (!set)
            return;
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
    cv_worker *w = varg;
    cv_pool *p = w->pool;
    bind_to_core(p, w->index);
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

/* The lock and conditions; -1 (nothing left initialised) when one fails. */
static int sync_init(cv_pool *p)
{
    if (pthread_mutex_init(&p->lock, NULL) != 0)
        return -1;
    if (pthread_cond_init(&p->wake, NULL) != 0) {
        pthread_mutex_destroy(&p->lock);
        return -1;
    }
    if (pthread_cond_init(&p->done, NULL) != 0) {
        pthread_cond_destroy(&p->wake);
        pthread_mutex_destroy(&p->lock);
        return -1;
    }
    return 0;
}

/* Starts workers 1 .. wanted - 1; p->size counts the caller and those running,
 * so a failure leaves exactly the started ones for cv_pool_destroy to join. */
static void start_workers(cv_pool *p)
{
    p->size = 1;
    p->stopping = 0;
    p->generation = 0;
    p->busy_workers = 0;
    p->fork_gen = cv_fork_generation();
    for (int i = 1; i < p->wanted; i++) {
        cv_worker *w = &p->workers[i - 1];
        w->pool = p;
        w->index = i;
        if (pthread_create(&w->thread, NULL, worker_main, w) != 0)
            return;
        p->size = i + 1;
    }
}

static void free_pool(cv_pool *p)
{
    free(p->workers);
#if CLVARLEN_HAVE_HWLOC
    if (p->topo)
        hwloc_topology_destroy(p->topo);
#endif
    free(p);
}

cv_pool *cv_pool_create(int threads)
{
    cv_pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    int cores = count_cores(p);
    int size = threads > 0 ? threads : cores;
    p->wanted = size > CV_POOL_MAX_THREADS ? CV_POOL_MAX_THREADS : size;
    p->size = 1;
    p->core_base = atomic_fetch_add(&next_core_base, p->wanted);
    atomic_init(&p->next, 0);
    if (p->wanted > 1) {
        p->workers = calloc((size_t)p->wanted - 1, sizeof *p->workers);
        if (!p->workers) {
            free_pool(p);
            return NULL;
        }
    }
    if (sync_init(p) != 0) {
        free_pool(p);
        return NULL;
    }
    start_workers(p);
    /* All or nothing: a pool smaller than asked for would hide the failure. */
    if (p->size != p->wanted) {
        cv_pool_destroy(p);
        return NULL;
    }
    return p;
}

cv_pool *cv_pool_create_user(clvarlen_parallel_for_fn fn, void *user, int max_threads)
{
    cv_pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->user_for = fn;
    p->user = user;
    p->size = p->wanted = max_threads;
    p->fork_gen = cv_fork_generation();
    atomic_init(&p->next, 0);
    return p;
}

void cv_pool_adopt(cv_pool *p)
{
    if (!p || p->user_for || p->fork_gen == cv_fork_generation())
        return;
    /* The parent's workers do not exist here, and its lock may look held. */
    if (sync_init(p) != 0) {
        /* fork_gen stays the parent's: cv_pool_for runs on the caller alone and
         * cv_pool_destroy only frees, neither touching the inherited lock. */
        p->size = 1;
        return;
    }
    start_workers(p); /* as many as start: a child cannot report a failure better */
}

void cv_pool_destroy(cv_pool *p)
{
    if (!p)
        return;
    if (p->user_for || p->fork_gen != cv_fork_generation()) {
        /* the caller's pool, or a forked child's copy: no workers to join, no locks */
        free_pool(p);
        return;
    }
    pthread_mutex_lock(&p->lock);
    p->stopping = 1;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    for (int i = 1; i < p->size; i++)
        pthread_join(p->workers[i - 1].thread, NULL);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    free_pool(p);
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
    if (p && p->user_for) {
        p->user_for(p->user, n, chunk, fn, arg);
        return;
    }
    /* A pool seen in a forked child before adoption has no workers: run here. */
    if (!p || size == 1 || chunk >= n || p->fork_gen != cv_fork_generation()) {
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
