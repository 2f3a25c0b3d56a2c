/* Options and contexts. A context owns its CPU pool,
 * its OpenCL objects (when on a device), its compiled programs, its last
 * error and the lock its public calls hold (lib/core/process.c); nothing is
 * global except the message of calls made without one (per thread) and the
 * device list (lib/runtime/device.c, made once per process).
 */
#include "runtime/runtime.h"

#if CLVARLEN_HAVE_CLBLAST
#include <clblast_c.h>
#endif

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct clvarlen_options {
    char *device;
    int threads;
    char *kernel_path;
    char *cache_dir;
    clvarlen_log_fn log_fn;
    void *log_user;
    clvarlen_log_level log_level;
    int device_checks;
    clvarlen_parallel_for_fn parallel_for;
    void *parallel_for_user;
    int parallel_for_threads;
};

/* ------------------------------------------------------------ options */

static clvarlen_status set_string(char **dst, const char *value)
{
    char *copy = NULL;
    if (value) {
        copy = strdup(value);
        if (!copy)
            return CLVARLEN_ERROR_OUT_OF_MEMORY;
    }
    free(*dst);
    *dst = copy;
    return CLVARLEN_SUCCESS;
}

clvarlen_status clvarlen_options_create(clvarlen_options **options)
{
    cv_clear_error(NULL);
    if (!options)
        return cv_error(NULL, CLVARLEN_ERROR_INVALID_ARGUMENT, "clvarlen_options_create: options is NULL");
    clvarlen_options *o = calloc(1, sizeof *o);
    if (!o)
        return cv_error(NULL, CLVARLEN_ERROR_OUT_OF_MEMORY, "clvarlen_options_create: out of memory");
    o->log_level = CLVARLEN_LOG_ERROR;
    *options = o;
    return CLVARLEN_SUCCESS;
}

void clvarlen_options_destroy(clvarlen_options *o)
{
    if (!o)
        return;
    free(o->device);
    free(o->kernel_path);
    free(o->cache_dir);
    free(o);
}

#define OPTIONS_ENTER(o)                                                                       \
    do {                                                                                       \
        cv_clear_error(NULL);                                                                  \
        if (!(o))                                                                              \
            return cv_error(NULL, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: options is NULL",     \
                            __func__);                                                         \
    } while (0)

clvarlen_status clvarlen_options_set_device(clvarlen_options *o, const char *spec)
{
    OPTIONS_ENTER(o);
    if (set_string(&o->device, spec && *spec ? spec : NULL) != CLVARLEN_SUCCESS)
        return cv_error(NULL, CLVARLEN_ERROR_OUT_OF_MEMORY, "%s: out of memory", __func__);
    return CLVARLEN_SUCCESS;
}

clvarlen_status clvarlen_options_set_threads(clvarlen_options *o, int threads)
{
    OPTIONS_ENTER(o);
    if (threads < 0 || threads > 256)
        return cv_error(NULL, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: threads must be 0 (one per core) to 256, got %d", __func__, threads);
    o->threads = threads;
    return CLVARLEN_SUCCESS;
}

clvarlen_status clvarlen_options_set_parallel_for(clvarlen_options *o, clvarlen_parallel_for_fn fn,
                                                  void *user, int max_threads)
{
    OPTIONS_ENTER(o);
    if (fn && (max_threads < 1 || max_threads > 256))
        return cv_error(NULL, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: max_threads must be 1 to 256, got %d", __func__, max_threads);
    o->parallel_for = fn;
    o->parallel_for_user = fn ? user : NULL;
    o->parallel_for_threads = fn ? max_threads : 0;
    return CLVARLEN_SUCCESS;
}

clvarlen_status clvarlen_options_set_kernel_path(clvarlen_options *o, const char *path)
{
    OPTIONS_ENTER(o);
    if (set_string(&o->kernel_path, path && *path ? path : NULL) != CLVARLEN_SUCCESS)
        return cv_error(NULL, CLVARLEN_ERROR_OUT_OF_MEMORY, "%s: out of memory", __func__);
    return CLVARLEN_SUCCESS;
}

clvarlen_status clvarlen_options_set_cache_dir(clvarlen_options *o, const char *dir)
{
    OPTIONS_ENTER(o);
    if (set_string(&o->cache_dir, dir && *dir ? dir : NULL) != CLVARLEN_SUCCESS)
        return cv_error(NULL, CLVARLEN_ERROR_OUT_OF_MEMORY, "%s: out of memory", __func__);
    return CLVARLEN_SUCCESS;
}

clvarlen_status clvarlen_options_set_log(clvarlen_options *o, clvarlen_log_fn fn, void *user,
                                         clvarlen_log_level max_level)
{
    OPTIONS_ENTER(o);
    if (max_level < CLVARLEN_LOG_ERROR || max_level > CLVARLEN_LOG_DEBUG)
        return cv_error(NULL, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: unknown log level %d",
                        __func__, (int)max_level);
    o->log_fn = fn;
    o->log_user = user;
    o->log_level = max_level;
    return CLVARLEN_SUCCESS;
}

clvarlen_status clvarlen_options_set_device_checks(clvarlen_options *o, int on)
{
    OPTIONS_ENTER(o);
    o->device_checks = on != 0;
    return CLVARLEN_SUCCESS;
}

/* ------------------------------------------------------------ context */

/* CLVARLEN_LOG: "error", "info", "debug" (or 1 = info) sends messages to stderr. */
static void log_from_env(clvarlen_context *ctx)
{
    const char *v = getenv("CLVARLEN_LOG");
    if (!v || !*v || strcmp(v, "0") == 0)
        return;
    clvarlen_log_level level = CLVARLEN_LOG_INFO;
    if (strcasecmp(v, "error") == 0)
        level = CLVARLEN_LOG_ERROR;
    else if (strcasecmp(v, "debug") == 0)
        level = CLVARLEN_LOG_DEBUG;
    ctx->base.log_stderr = 1;
    if (level > ctx->base.log_level)
        ctx->base.log_level = level;
}

/* The cache directory into *dir (NULL: no disk cache); -1 when out of memory. */
static int resolve_cache_dir(const clvarlen_options *o, char **dir)
{
    const char *v = o && o->cache_dir ? o->cache_dir : getenv("CLVARLEN_CACHE_DIR");
    char buf[4096];
    *dir = NULL;
    if (v && *v) {
        if (strcasecmp(v, "off") == 0)
            return 0;
        *dir = strdup(v);
    } else if (getenv("XDG_CACHE_HOME") && getenv("XDG_CACHE_HOME")[0] == '/') {
        snprintf(buf, sizeof buf, "%s/clvarlen", getenv("XDG_CACHE_HOME"));
        *dir = strdup(buf);
    } else if (getenv("HOME") && *getenv("HOME")) {
        snprintf(buf, sizeof buf, "%s/.cache/clvarlen", getenv("HOME"));
        *dir = strdup(buf);
    } else {
        return 0; /* nowhere sensible: no disk cache */
    }
    return *dir ? 0 : -1;
}

/* A context on the CPU fallback; NULL when out of memory (nothing left behind). */
static clvarlen_context *context_alloc(const clvarlen_options *o)
{
    clvarlen_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return NULL;
    if (cv_base_init(&ctx->base) != CLVARLEN_SUCCESS) {
        free(ctx);
        return NULL;
    }
    ctx->base.error_cap = 256;
    ctx->base.error = calloc(1, ctx->base.error_cap);
    ctx->base.log_level = CLVARLEN_LOG_ERROR;
    if (o) {
        ctx->base.log_fn = o->log_fn;
        ctx->base.log_user = o->log_user;
        ctx->base.log_level = o->log_level;
        ctx->device_checks = o->device_checks;
    }
    log_from_env(ctx);
    bool ok = ctx->base.error != NULL;
    const char *kp = o && o->kernel_path ? o->kernel_path : getenv("CLVARLEN_KERNEL_PATH");
    if (ok && kp && *kp) {
        ctx->kernel_path = strdup(kp);
        ok = ctx->kernel_path != NULL;
    }
    ok = ok && resolve_cache_dir(o, &ctx->cache_dir) == 0;
    if (ok) {
        ctx->base.pool = o && o->parallel_for
                             ? cv_pool_create_user(o->parallel_for, o->parallel_for_user,
                                                   o->parallel_for_threads)
                             : cv_pool_create(o ? o->threads : 0);
        ok = ctx->base.pool != NULL;
    }
    if (!ok) {
        clvarlen_context_destroy(ctx);
        return NULL;
    }
    return ctx;
}

#if CLVARLEN_HAVE_OPENCL
static clvarlen_status attach_device(clvarlen_context *ctx, cl_platform_id platform,
                                     cl_device_id dev, cl_context cl_ctx, cl_command_queue queue,
                                     int index)
{
    cl_int err = CL_SUCCESS;
    ctx->base.process_bound = true; /* from here on, a forked child must not use it */
    ctx->cl_platform = platform;
    ctx->cl_dev = dev;
    if (cl_ctx) {
        clRetainContext(cl_ctx);
        ctx->cl_ctx = cl_ctx;
    } else {
        cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)platform, 0};
        ctx->cl_ctx = clCreateContext(props, 1, &dev, NULL, NULL, &err);
        if (err != CL_SUCCESS)
            return cv_cl_check(ctx, err, "clCreateContext");
    }
    if (queue) {
        clRetainCommandQueue(queue);
        ctx->queue = queue;
    } else {
        /* Profiling on: benchmarks and callers time the returned events. */
        ctx->queue = clCreateCommandQueue(ctx->cl_ctx, dev, CL_QUEUE_PROFILING_ENABLE, &err);
        if (err != CL_SUCCESS)
            return cv_cl_check(ctx, err, "clCreateCommandQueue");
    }
    cv_device_describe(platform, dev, index, &ctx->device);
    char note[512];
    int profiled = cv_device_profile_apply(&ctx->device, note, sizeof note);
    if (profiled < 0)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s", note);
    if (profiled > 0)
        cv_log(ctx, CLVARLEN_LOG_INFO, "%s", note);
    if (cv_device_is_llvmpipe(&ctx->device))
        cv_log(ctx, CLVARLEN_LOG_INFO, "%s: Mesa ends a work-item's loops after 65535 "
               "iterations in all, without an error: long sequences can come out wrong "
               "(docs/PORTABILITY.md)", ctx->device.device_name);
    cv_tuning_for(&ctx->device, &ctx->tuning);
    cl_device_fp_config fp = 0;
    ctx->exact_div = clGetDeviceInfo(dev, CL_DEVICE_SINGLE_FP_CONFIG, sizeof fp, &fp, NULL) ==
                         CL_SUCCESS &&
                     (fp & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT) != 0;
    ctx->has_cl = 1;
    return CLVARLEN_SUCCESS;
}
#endif

clvarlen_status clvarlen_context_create(const clvarlen_options *o, clvarlen_context **out)
{
    cv_clear_error(NULL);
    if (!out)
        return cv_error(NULL, CLVARLEN_ERROR_INVALID_ARGUMENT, "clvarlen_context_create: context is NULL");
    char reason[512];
    int index = -1;
    clvarlen_status st = cv_device_choose(o ? o->device : NULL, &index, reason, sizeof reason);
    if (st != CLVARLEN_SUCCESS)
        return cv_error(NULL, st, "clvarlen_context_create: %s", reason);
    clvarlen_context *ctx = context_alloc(o);
    if (!ctx)
        return cv_error(NULL, CLVARLEN_ERROR_OUT_OF_MEMORY, "clvarlen_context_create: out of memory");
    cv_device_describe_cpu(&ctx->device);
    cv_tuning_for(&ctx->device, &ctx->tuning);
#if CLVARLEN_HAVE_OPENCL
    if (index >= 0 && cv_opencl_inherited()) {
        clvarlen_context_destroy(ctx);
        return cv_error(NULL, CLVARLEN_ERROR_OPENCL,
                        "clvarlen_context_create: %s, but this process was forked after its "
                        "parent loaded the OpenCL driver, which a child cannot use; select "
                        "device \"cpu\" here",
                        reason);
    }
    if (index >= 0) {
        cv_device *list = NULL;
        size_t n = 0;
        st = cv_devices_enumerate(&list, &n);
        if (st == CLVARLEN_SUCCESS && (size_t)index < n)
            st = attach_device(ctx, list[index].platform, list[index].id, NULL, NULL, index);
        else if (st == CLVARLEN_SUCCESS)
            st = cv_error(ctx, CLVARLEN_ERROR_DEVICE_NOT_FOUND, "device %d disappeared", index);
        free(list);
        if (st != CLVARLEN_SUCCESS) {
            cv_error(NULL, st, "clvarlen_context_create: %s", ctx->base.error);
            clvarlen_context_destroy(ctx);
            return st;
        }
    }
#endif
    cv_log(ctx, CLVARLEN_LOG_INFO, "context on %s (%s); %d CPU threads, CPU kernels %s",
           ctx->device.device_name, reason, cv_pool_size(ctx->base.pool),
           cv_cpu_isa_name(cv_cpu_isa_level()));
    *out = ctx;
    return CLVARLEN_SUCCESS;
}

void clvarlen_context_destroy(clvarlen_context *ctx)
{
    if (!ctx)
        return;
#if CLVARLEN_HAVE_OPENCL
    /* In a forked child the OpenCL objects are the parent's: calling the driver
     * could hang, so they are left alone (the child's copy of them leaks). */
    if (ctx->has_cl && cv_base_forked(&ctx->base))
        goto host_memory;
    if (ctx->queue)
        clFinish(ctx->queue);
#if CLVARLEN_HAVE_CLBLAST
    /* CLBlast keeps its programs in a process-wide cache, released at exit: by then
     * this OpenCL context may be gone (Oclgrind's runtime corrupted the heap so).
     * CLBlast's answer is to clear the cache before its context goes; other
     * contexts rebuild (or reload from the driver's cache) on their next call. */
    if (ctx->cl_ctx)
        CLBlastClearCache();
#endif
    cv_programs_release(ctx);
    cv_release(&ctx->check_flag);
    cv_release(&ctx->temp);
    if (ctx->queue)
        clReleaseCommandQueue(ctx->queue);
    if (ctx->cl_ctx)
        clReleaseContext(ctx->cl_ctx);
host_memory:
#endif
    cv_pool_destroy(ctx->base.pool);
    free(ctx->kernel_path);
    free(ctx->cache_dir);
    free(ctx->base.error);
    cv_base_fini(&ctx->base);
    free(ctx);
}

clvarlen_status clvarlen_context_device_sized(clvarlen_context *ctx, clvarlen_device_info *info,
                                              size_t info_size)
{
    CV_ENTER(ctx);
    if (!info)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "clvarlen_context_device: info is NULL");
    if (info_size < CLVARLEN_DEVICE_INFO_MIN_SIZE)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "clvarlen_context_device: info_size %zu is below %zu", info_size,
                        (size_t)CLVARLEN_DEVICE_INFO_MIN_SIZE);
    clvarlen_device_info full = ctx->device;
    cv_struct_out(info, info_size, &full, sizeof full);
    return CLVARLEN_SUCCESS;
}

int clvarlen_context_threads(const clvarlen_context *ctx)
{
    return ctx ? cv_pool_size(ctx->base.pool) : 0;
}

clvarlen_status clvarlen_context_finish(clvarlen_context *ctx)
{
    CV_ENTER(ctx);
#if CLVARLEN_HAVE_OPENCL
    if (ctx->has_cl)
        return cv_cl_check(ctx, clFinish(ctx->queue), "clFinish");
#endif
    return CLVARLEN_SUCCESS;
}

#if CLVARLEN_HAVE_OPENCL
clvarlen_status clvarlen_context_create_cl(cl_context cl_ctx, cl_device_id device,
                                           cl_command_queue queue, const clvarlen_options *o,
                                           clvarlen_context **out)
{
    cv_clear_error(NULL);
    if (!out || !cl_ctx || !device)
        return cv_error(NULL, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "clvarlen_context_create_cl: %s is NULL",
                        !out ? "context" : !cl_ctx ? "cl_ctx" : "device");
    cl_platform_id platform = NULL;
    cl_int err = clGetDeviceInfo(device, CL_DEVICE_PLATFORM, sizeof platform, &platform, NULL);
    if (err != CL_SUCCESS)
        return cv_error(NULL, CLVARLEN_ERROR_OPENCL,
                        "clvarlen_context_create_cl: clGetDeviceInfo(CL_DEVICE_PLATFORM): %s",
                        cv_cl_error_name(err));
    if (queue) {
        cl_device_id qdev = NULL;
        err = clGetCommandQueueInfo(queue, CL_QUEUE_DEVICE, sizeof qdev, &qdev, NULL);
        if (err != CL_SUCCESS || qdev != device)
            return cv_error(NULL, CLVARLEN_ERROR_INVALID_ARGUMENT,
                            "clvarlen_context_create_cl: the queue does not belong to the device");
        /* Chains of commands (a scan, then the kernel reading it) rely on
         * in-order execution. */
        cl_command_queue_properties props = 0;
        err = clGetCommandQueueInfo(queue, CL_QUEUE_PROPERTIES, sizeof props, &props, NULL);
        if (err != CL_SUCCESS)
            return cv_error(NULL, CLVARLEN_ERROR_OPENCL,
                            "clvarlen_context_create_cl: clGetCommandQueueInfo: %s",
                            cv_cl_error_name(err));
        if (props & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE)
            return cv_error(NULL, CLVARLEN_ERROR_UNSUPPORTED,
                            "clvarlen_context_create_cl: the queue is out-of-order; clvarlen "
                            "needs an in-order queue");
    }
    clvarlen_context *ctx = context_alloc(o);
    if (!ctx)
        return cv_error(NULL, CLVARLEN_ERROR_OUT_OF_MEMORY, "clvarlen_context_create_cl: out of memory");
    /* The index is the caller's device's place in our enumeration, when it has one. */
    int index = -2;
    cv_device *list = NULL;
    size_t n = 0;
    if (cv_devices_enumerate(&list, &n) == CLVARLEN_SUCCESS)
        for (size_t i = 0; i < n; i++)
            if (list[i].id == device)
                index = (int)i;
    free(list);
    clvarlen_status st = attach_device(ctx, platform, device, cl_ctx, queue, index);
    if (st != CLVARLEN_SUCCESS) {
        cv_error(NULL, st, "clvarlen_context_create_cl: %s", ctx->base.error);
        clvarlen_context_destroy(ctx);
        return st;
    }
    *out = ctx;
    return CLVARLEN_SUCCESS;
}

clvarlen_status clvarlen_cl_context_set_scratch(clvarlen_context *ctx, cl_mem scratch,
                                                size_t bytes)
{
    static const char fn[] = "clvarlen_cl_context_set_scratch";
    CV_ENTER(ctx);
    if (!ctx->has_cl)
        return cv_error(ctx, CLVARLEN_ERROR_NO_OPENCL, "%s: the context runs on the CPU fallback",
                        fn);
    if (scratch) {
        size_t size = 0;
        cl_context owner = NULL;
        cl_int err = clGetMemObjectInfo(scratch, CL_MEM_SIZE, sizeof size, &size, NULL);
        if (err == CL_SUCCESS)
            err = clGetMemObjectInfo(scratch, CL_MEM_CONTEXT, sizeof owner, &owner, NULL);
        if (err != CL_SUCCESS)
            return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: scratch is not a buffer",
                            fn);
        if (owner != ctx->cl_ctx)
            return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                            "%s: scratch belongs to another OpenCL context", fn);
        if (bytes == 0 || bytes > size)
            return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                            "%s: bytes (%zu) must be positive and at most the buffer's %zu", fn,
                            bytes, size);
        if ((err = clRetainMemObject(scratch)) != CL_SUCCESS)
            return cv_cl_check(ctx, err, "clRetainMemObject");
    }
    /* Commands still using the old buffer keep it alive. */
    cv_release(&ctx->temp);
    ctx->temp = scratch;
    ctx->temp_bytes = scratch ? bytes : 0;
    ctx->temp_user = scratch != NULL;
    return CLVARLEN_SUCCESS;
}

clvarlen_status clvarlen_cl_context_scratch_bytes(clvarlen_context *ctx, size_t *bytes)
{
    CV_ENTER(ctx);
    if (!ctx->has_cl)
        return cv_error(ctx, CLVARLEN_ERROR_NO_OPENCL,
                        "clvarlen_cl_context_scratch_bytes: the context runs on the CPU fallback");
    if (!bytes)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "clvarlen_cl_context_scratch_bytes: bytes is NULL");
    *bytes = ctx->temp_bytes;
    return CLVARLEN_SUCCESS;
}

clvarlen_status clvarlen_context_get_cl(clvarlen_context *ctx, cl_context *cl_ctx,
                                        cl_device_id *device, cl_command_queue *queue)
{
    CV_ENTER(ctx);
    if (!ctx->has_cl)
        return cv_error(ctx, CLVARLEN_ERROR_NO_OPENCL,
                        "clvarlen_context_get_cl: the context runs on the CPU fallback");
    if (cl_ctx)
        *cl_ctx = ctx->cl_ctx;
    if (device)
        *device = ctx->cl_dev;
    if (queue)
        *queue = ctx->queue;
    return CLVARLEN_SUCCESS;
}
#endif
