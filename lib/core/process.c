/* Threads and processes: the per-context lock every public call holds
 * (CV_ENTER), and what happens to a context after fork(). A child process
 * inherits the context's memory but none of its threads: the CPU pool's
 * workers are gone and a lock some other thread held stays locked forever. So
 * a pthread_atfork child handler counts forks, and the first call on a context
 * in a child "adopts" it: a fresh lock and a rebuilt CPU pool. A context that
 * holds OpenCL objects cannot be adopted (the driver's threads and device
 * state stayed in the parent; using them hangs or crashes), so every call on
 * it in the child fails with a message instead.
 */
#include "core/core.h"

#include <stdio.h>
#include <unistd.h>

static atomic_ulong fork_count;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;
static bool fork_handler_ok;
/* Serialises adoptions in a child whose threads share an inherited context;
 * re-initialised in the child handler, since a parent thread may have held it. */
static pthread_mutex_t adopt_lock = PTHREAD_MUTEX_INITIALIZER;

static void on_fork_child(void)
{
    atomic_fetch_add(&fork_count, 1);
    pthread_mutex_init(&adopt_lock, NULL);
}

static void register_fork_handler(void)
{
    fork_handler_ok = pthread_atfork(NULL, NULL, on_fork_child) == 0;
}

unsigned long cv_fork_generation(void)
{
    /* The first caller, before any state it records can cross a fork, registers
     * the handler (the device list may be made before any context is). */
    pthread_once(&fork_once, register_fork_handler);
    return atomic_load_explicit(&fork_count, memory_order_acquire);
}

static int init_recursive_lock(pthread_mutex_t *lock)
{
    pthread_mutexattr_t attr;
    if (pthread_mutexattr_init(&attr) != 0)
        return -1;
    /* Recursive: a log handler may call back into the library on the same context. */
    int r = pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    if (r == 0)
        r = pthread_mutex_init(lock, &attr);
    pthread_mutexattr_destroy(&attr);
    return r == 0 ? 0 : -1;
}

clvarlen_status cv_base_init(cv_ctx_base *base)
{
    unsigned long generation = cv_fork_generation();
    if (!fork_handler_ok)
        return CLVARLEN_ERROR_OUT_OF_MEMORY; /* pthread_atfork's only failure is ENOMEM */
    if (init_recursive_lock(&base->lock) != 0)
        return CLVARLEN_ERROR_OUT_OF_MEMORY;
    atomic_init(&base->fork_gen, generation);
    base->orphaned = false;
    return CLVARLEN_SUCCESS;
}

bool cv_base_forked(const cv_ctx_base *base)
{
    return base->orphaned ||
           atomic_load_explicit(&base->fork_gen, memory_order_acquire) != cv_fork_generation();
}

void cv_base_fini(cv_ctx_base *base)
{
    /* In a child that never adopted the context the lock may look held: leave it. */
    if (!cv_base_forked(base))
        pthread_mutex_destroy(&base->lock);
}

/* The first call on an inherited context in a forked child. */
static void adopt(cv_ctx_base *base, unsigned long generation)
{
    pthread_mutex_lock(&adopt_lock);
    if (atomic_load_explicit(&base->fork_gen, memory_order_acquire) != generation) {
        /* The inherited lock's state is meaningless here (its owner may not exist). */
        if (init_recursive_lock(&base->lock) != 0)
            (void)pthread_mutex_init(&base->lock, NULL);
        if (base->process_bound)
            base->orphaned = true;
        else
            cv_pool_adopt(base->pool);
        atomic_store_explicit(&base->fork_gen, generation, memory_order_release);
    }
    pthread_mutex_unlock(&adopt_lock);
}

cv_entry cv_enter(clvarlen_context *ctx, const char *fn)
{
    cv_ctx_base *base = cv_base(ctx);
    cv_entry entry = {NULL, CLVARLEN_SUCCESS};
    unsigned long generation = cv_fork_generation();
    if (atomic_load_explicit(&base->fork_gen, memory_order_acquire) != generation)
        adopt(base, generation);
    pthread_mutex_lock(&base->lock);
    cv_clear_error(ctx);
    if (base->orphaned) {
        entry.status = cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                                "%s: the context was created before fork() and holds OpenCL "
                                "objects, which a child process cannot use (process %ld); "
                                "create a context in the child (device \"cpu\")",
                                fn, (long)getpid());
        pthread_mutex_unlock(&base->lock);
        return entry;
    }
    entry.locked = base;
    return entry;
}

void cv_leave(cv_entry *entry)
{
    if (entry->locked)
        pthread_mutex_unlock(&entry->locked->lock);
    entry->locked = NULL;
}
