/* The per-context lock every public call holds from CV_ENTER to its return,
 * so that threads may share a context: its calls run one at a time.
 */
#include "core/core.h"

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
    if (init_recursive_lock(&base->lock) != 0)
        return CLVARLEN_ERROR_OUT_OF_MEMORY;
    return CLVARLEN_SUCCESS;
}

void cv_base_fini(cv_ctx_base *base)
{
    pthread_mutex_destroy(&base->lock);
}

cv_entry cv_enter(clvarlen_context *ctx, const char *fn)
{
    (void)fn;
    cv_ctx_base *base = cv_base(ctx);
    pthread_mutex_lock(&base->lock);
    cv_clear_error(ctx);
    cv_entry entry = {base, CLVARLEN_SUCCESS};
    return entry;
}

void cv_leave(cv_entry *entry)
{
    if (entry->locked)
        pthread_mutex_unlock(&entry->locked->lock);
    entry->locked = NULL;
}
