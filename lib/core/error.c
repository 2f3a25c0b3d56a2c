/* Errors, the last-error message and logging. A context's message and log
 * settings live in the cv_ctx_base that begins struct clvarlen_context
 * (lib/runtime/runtime.h asserts it), so this file needs nothing above the
 * core; calls made without a context report through a thread-local slot.
 */
#include "core/core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static _Thread_local char orphan_error[1024];

static void emit_log(clvarlen_context *ctx, clvarlen_log_level level, const char *msg)
{
    if (!ctx)
        return;
    const cv_ctx_base *d = cv_base(ctx);
    if (d->log_fn && level <= d->log_level)
        d->log_fn(level, msg, d->log_user);
    if (d->log_stderr && level <= d->log_level)
        fprintf(stderr, "clvarlen: %s\n", msg);
}

clvarlen_status cv_verror(clvarlen_context *ctx, clvarlen_status st, const char *fmt, va_list ap)
{
    if (!ctx) {
        vsnprintf(orphan_error, sizeof orphan_error, fmt, ap);
        return st;
    }
    cv_ctx_base *d = cv_base(ctx);
    va_list ap2;
    va_copy(ap2, ap);
    int need = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (need < 0)
        need = 0;
    if ((size_t)need + 1 > d->error_cap) {
        char *grown = realloc(d->error, (size_t)need + 1);
        if (grown) {
            d->error = grown;
            d->error_cap = (size_t)need + 1;
        }
    }
    if (d->error && d->error_cap > 0)
        vsnprintf(d->error, d->error_cap, fmt, ap);
    emit_log(ctx, CLVARLEN_LOG_ERROR, d->error ? d->error : "");
    return st;
}

clvarlen_status cv_error(clvarlen_context *ctx, clvarlen_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    cv_verror(ctx, st, fmt, ap);
    va_end(ap);
    return st;
}

/* Clears the message a call will report through: the context's, or (NULL)
 * this thread's slot for calls without a context. */
void cv_clear_error(clvarlen_context *ctx)
{
    if (ctx) {
        cv_ctx_base *d = cv_base(ctx);
        if (d->error)
            d->error[0] = '\0';
    } else {
        orphan_error[0] = '\0';
    }
}

void cv_log(clvarlen_context *ctx, clvarlen_log_level level, const char *fmt, ...)
{
    if (!ctx)
        return;
    const cv_ctx_base *d = cv_base(ctx);
    if ((!d->log_fn && !d->log_stderr) || level > d->log_level)
        return;
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    emit_log(ctx, level, buf);
}

const char *clvarlen_last_error(const clvarlen_context *ctx)
{
    if (!ctx)
        return orphan_error;
    const cv_ctx_base *d = cv_base(ctx);
    return d->error ? d->error : "";
}

clvarlen_status cv_no_opencl(clvarlen_context *ctx, const char *fn)
{
    return cv_error(ctx, CLVARLEN_ERROR_NO_OPENCL,
                    "%s: this build of clvarlen has no OpenCL (configured with -Dopencl=disabled)",
                    fn);
}
