/* The device layer: enumerate OpenCL platforms and devices, classify vendor
 * and kind, record capabilities, and choose a device from a selection string
 * or the default order (discrete GPU, integrated GPU, accelerator, then the
 * built-in CPU fallback; OpenCL CPU devices such as PoCL and Mesa's llvmpipe
 * only when named, or through "opencl"). No OpenCL at all is not an error.
 */
#include "runtime/runtime.h"

#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#ifndef CL_PLATFORM_NOT_FOUND_KHR
#  define CL_PLATFORM_NOT_FOUND_KHR -1001 /* cl_khr_icd: the loader found no platform */
#endif
#ifndef CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV
#  define CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV 0x4000
#  define CL_DEVICE_COMPUTE_CAPABILITY_MINOR_NV 0x4001
#endif

void cv_device_describe_cpu(clvarlen_device_info *info)
{
    memset(info, 0, sizeof *info);
    info->index = -1;
    info->kind = CLVARLEN_DEVICE_CPU_FALLBACK;
    info->vendor = CLVARLEN_VENDOR_CPU;
    snprintf(info->platform_name, sizeof info->platform_name, "clvarlen");
    snprintf(info->platform_vendor, sizeof info->platform_vendor, "clvarlen");
    snprintf(info->device_name, sizeof info->device_name, "CPU fallback");
    snprintf(info->driver_version, sizeof info->driver_version, "%s", CLVARLEN_VERSION_STRING);
    snprintf(info->opencl_c_version, sizeof info->opencl_c_version, "none");
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    info->compute_units = cpus > 0 ? (uint32_t)cpus : 1;
    info->has_fp64 = 1;
    info->has_fp16 = 1; /* converted in software */
}

/* Lower is better in the default order. */
static int kind_rank(clvarlen_device_kind kind)
{
    switch (kind) {
    case CLVARLEN_DEVICE_DISCRETE_GPU: return 0;
    case CLVARLEN_DEVICE_INTEGRATED_GPU: return 1;
    case CLVARLEN_DEVICE_ACCELERATOR: return 2;
    case CLVARLEN_DEVICE_OPENCL_CPU: return 3;
    case CLVARLEN_DEVICE_CPU_FALLBACK: return 4;
    }
    return 5;
}

static const char *kind_name(clvarlen_device_kind kind)
{
    switch (kind) {
    case CLVARLEN_DEVICE_DISCRETE_GPU: return "discrete GPU";
    case CLVARLEN_DEVICE_INTEGRATED_GPU: return "integrated GPU";
    case CLVARLEN_DEVICE_ACCELERATOR: return "accelerator";
    case CLVARLEN_DEVICE_OPENCL_CPU: return "OpenCL CPU device";
    case CLVARLEN_DEVICE_CPU_FALLBACK: return "built-in CPU fallback";
    }
    return "device";
}

#if CLVARLEN_HAVE_OPENCL
static void get_str(cl_device_id d, cl_device_info what, char *out, size_t size)
{
    out[0] = '\0';
    if (clGetDeviceInfo(d, what, size - 1, out, NULL) != CL_SUCCESS)
        out[0] = '\0';
    out[size - 1] = '\0';
}

static void get_pstr(cl_platform_id p, cl_platform_info what, char *out, size_t size)
{
    out[0] = '\0';
    if (clGetPlatformInfo(p, what, size - 1, out, NULL) != CL_SUCCESS)
        out[0] = '\0';
    out[size - 1] = '\0';
}

static bool has_extension(cl_device_id d, const char *ext)
{
    size_t size = 0;
    if (clGetDeviceInfo(d, CL_DEVICE_EXTENSIONS, 0, NULL, &size) != CL_SUCCESS || size == 0)
        return false;
    char *s = malloc(size + 1);
    if (!s)
        return false;
    bool found = false;
    if (clGetDeviceInfo(d, CL_DEVICE_EXTENSIONS, size, s, NULL) == CL_SUCCESS) {
        s[size] = '\0';
        size_t n = strlen(ext);
        for (const char *p = s; (p = strstr(p, ext)) != NULL; p += n) {
            if ((p == s || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0')) {
                found = true;
                break;
            }
        }
    }
    free(s);
    return found;
}

void cv_device_describe(cl_platform_id platform, cl_device_id d, int index,
                        clvarlen_device_info *info)
{
    memset(info, 0, sizeof *info);
    info->index = index;
    get_pstr(platform, CL_PLATFORM_NAME, info->platform_name, sizeof info->platform_name);
    get_pstr(platform, CL_PLATFORM_VENDOR, info->platform_vendor, sizeof info->platform_vendor);
    get_str(d, CL_DEVICE_NAME, info->device_name, sizeof info->device_name);
    get_str(d, CL_DRIVER_VERSION, info->driver_version, sizeof info->driver_version);
    get_str(d, CL_DEVICE_OPENCL_C_VERSION, info->opencl_c_version,
            sizeof info->opencl_c_version);

    cl_uint u = 0;
    cl_ulong ul = 0;
    size_t sz = 0;
    cl_device_type type = 0;
    cl_bool unified = CL_FALSE;
    if (clGetDeviceInfo(d, CL_DEVICE_VENDOR_ID, sizeof u, &u, NULL) == CL_SUCCESS)
        info->vendor_id = u;
    if (clGetDeviceInfo(d, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof u, &u, NULL) == CL_SUCCESS)
        info->compute_units = u;
    if (clGetDeviceInfo(d, CL_DEVICE_MAX_CLOCK_FREQUENCY, sizeof u, &u, NULL) == CL_SUCCESS)
        info->max_clock_mhz = u;
    if (clGetDeviceInfo(d, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof ul, &ul, NULL) == CL_SUCCESS)
        info->global_mem_bytes = ul;
    if (clGetDeviceInfo(d, CL_DEVICE_LOCAL_MEM_SIZE, sizeof ul, &ul, NULL) == CL_SUCCESS)
        info->local_mem_bytes = ul;
    if (clGetDeviceInfo(d, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof sz, &sz, NULL) == CL_SUCCESS)
        info->max_work_group_size = sz;
    (void)clGetDeviceInfo(d, CL_DEVICE_TYPE, sizeof type, &type, NULL);
    (void)clGetDeviceInfo(d, CL_DEVICE_HOST_UNIFIED_MEMORY, sizeof unified, &unified, NULL);

    if (type & CL_DEVICE_TYPE_CPU)
        info->kind = CLVARLEN_DEVICE_OPENCL_CPU;
    else if (type & CL_DEVICE_TYPE_GPU)
        info->kind = unified ? CLVARLEN_DEVICE_INTEGRATED_GPU : CLVARLEN_DEVICE_DISCRETE_GPU;
    else
        info->kind = CLVARLEN_DEVICE_ACCELERATOR;

    /* The vendor from the PCI vendor id; a CPU device is classed CPU whoever makes it. */
    if (info->kind == CLVARLEN_DEVICE_OPENCL_CPU)
        info->vendor = CLVARLEN_VENDOR_CPU;
    else if (info->vendor_id == 0x10DE)
        info->vendor = CLVARLEN_VENDOR_NVIDIA;
    else if (info->vendor_id == 0x1002 || info->vendor_id == 0x1022)
        info->vendor = CLVARLEN_VENDOR_AMD;
    else if (info->vendor_id == 0x8086)
        info->vendor = CLVARLEN_VENDOR_INTEL;
    else
        info->vendor = CLVARLEN_VENDOR_OTHER;

    cl_device_fp_config fp64 = 0;
    (void)clGetDeviceInfo(d, CL_DEVICE_DOUBLE_FP_CONFIG, sizeof fp64, &fp64, NULL);
    info->has_fp64 = fp64 != 0 || has_extension(d, "cl_khr_fp64");
    info->has_fp16 = has_extension(d, "cl_khr_fp16");
    info->has_subgroups = has_extension(d, "cl_khr_subgroups") ||
                          has_extension(d, "cl_intel_subgroups");
    if (info->vendor == CLVARLEN_VENDOR_NVIDIA &&
        has_extension(d, "cl_nv_device_attribute_query")) {
        cl_uint major = 0, minor = 0;
        if (clGetDeviceInfo(d, CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV, sizeof major, &major,
                            NULL) == CL_SUCCESS &&
            clGetDeviceInfo(d, CL_DEVICE_COMPUTE_CAPABILITY_MINOR_NV, sizeof minor, &minor,
                            NULL) == CL_SUCCESS) {
            info->cc_major = (int)major;
            info->cc_minor = (int)minor;
        }
    }
}

/* The devices of one platform, appended to *out (n entries, grown with realloc).
 * 1: complete; 0: the driver failed (a transient error: the list is not kept);
 * -1: out of memory. */
static int append_platform(cl_platform_id platform, cv_device **out, size_t *n)
{
    cl_uint nd = 0;
    cl_int err = clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 0, NULL, &nd);
    if (err == CL_DEVICE_NOT_FOUND || (err == CL_SUCCESS && nd == 0))
        return 1;
    if (err != CL_SUCCESS)
        return 0;
    cl_device_id *devs = calloc(nd, sizeof *devs);
    if (!devs)
        return -1;
    if (clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, nd, devs, NULL) != CL_SUCCESS) {
        free(devs);
        return 0;
    }
    cv_device *grown = realloc(*out, (*n + nd) * sizeof **out);
    if (!grown) {
        free(devs);
        return -1;
    }
    *out = grown;
    for (cl_uint i = 0; i < nd; i++) {
        cl_bool avail = CL_FALSE, compiler = CL_FALSE;
        (void)clGetDeviceInfo(devs[i], CL_DEVICE_AVAILABLE, sizeof avail, &avail, NULL);
        (void)clGetDeviceInfo(devs[i], CL_DEVICE_COMPILER_AVAILABLE, sizeof compiler, &compiler,
                              NULL);
        if (!avail || !compiler)
            continue; /* kernels are compiled at run time */
        grown[*n].platform = platform;
        grown[*n].id = devs[i];
        cv_device_describe(platform, devs[i], (int)*n, &grown[*n].info);
        (*n)++;
    }
    free(devs);
    return 1;
}

/* Asks the driver. 1: a complete list (kept for the process); 0: the driver
 * failed, the list may be short (returned, not kept); -1: out of memory. */
static int enumerate_now(cv_device **list, size_t *count)
{
    *list = NULL;
    *count = 0;
    cl_uint np = 0;
    cl_int err = clGetPlatformIDs(0, NULL, &np);
    /* No ICD, no platform: an empty list, never an error. */
    if (err == CL_PLATFORM_NOT_FOUND_KHR || (err == CL_SUCCESS && np == 0))
        return 1;
    if (err != CL_SUCCESS)
        return 0;
    cl_platform_id *plats = calloc(np, sizeof *plats);
    if (!plats)
        return -1;
    if (clGetPlatformIDs(np, plats, NULL) != CL_SUCCESS) {
        free(plats);
        return 0;
    }
    int complete = 1;
    for (cl_uint p = 0; p < np && complete >= 0; p++) {
        int r = append_platform(plats[p], list, count);
        complete = r < complete ? r : complete;
    }
    free(plats);
    if (complete < 0 || *count == 0) {
        free(*list);
        *list = NULL;
        *count = complete < 0 ? 0 : *count;
    }
    return complete;
}

/*
 * The enumeration is done once per process, under a lock: drivers (PoCL
 * through ocl-icd) crash or report no platform when several threads make
 * their first OpenCL calls at once. A complete list is kept; a failure (out
 * of memory, a driver error) is not, so a later call asks again. After fork()
 * the child keeps its parent's list but never asks the driver itself when the
 * parent had loaded it: the driver's threads stayed in the parent.
 */
static pthread_mutex_t enum_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t enum_once = PTHREAD_ONCE_INIT;
static cv_device *enum_list;           /* the kept list (NULL when empty) */
static size_t enum_count;
static bool enum_kept;                 /* enum_list is the process's list */
static bool driver_loaded;             /* clGetPlatformIDs was called */
static unsigned long driver_generation; /* cv_fork_generation() when it did */

static void enum_fork_child(void)
{
    pthread_mutex_init(&enum_lock, NULL); /* a parent thread may have held it */
}

static void enum_register(void)
{
    /* Without the handler a fork during an enumeration would leave the child's
     * lock held; that child would then block in its first device call. */
    (void)pthread_atfork(NULL, NULL, enum_fork_child);
}

/* Under enum_lock. */
static bool driver_inherited_locked(void)
{
    return driver_loaded && driver_generation != cv_fork_generation();
}

bool cv_opencl_inherited(void)
{
    pthread_once(&enum_once, enum_register);
    pthread_mutex_lock(&enum_lock);
    bool inherited = driver_inherited_locked();
    pthread_mutex_unlock(&enum_lock);
    return inherited;
}

/* The kept list, copied for the caller. */
static clvarlen_status copy_kept(cv_device **list, size_t *count)
{
    if (enum_count > 0) {
        *list = malloc(enum_count * sizeof **list);
        if (!*list)
            return CLVARLEN_ERROR_OUT_OF_MEMORY;
        memcpy(*list, enum_list, enum_count * sizeof **list);
    }
    *count = enum_count;
    return CLVARLEN_SUCCESS;
}

static clvarlen_status enumerate_locked(cv_device **list, size_t *count)
{
    if (enum_kept)
        return copy_kept(list, count);
    if (driver_inherited_locked())
        return CLVARLEN_ERROR_OPENCL; /* the parent loaded the driver but kept no list */
    /* Recorded before the driver is called: a fork while it loads (from another
     * thread) must not leave a child that thinks the driver is untouched. */
    if (!driver_loaded) {
        driver_generation = cv_fork_generation();
        driver_loaded = true;
    }
    cv_device *found = NULL;
    size_t n = 0;
    int r = enumerate_now(&found, &n);
    if (r < 0)
        return CLVARLEN_ERROR_OUT_OF_MEMORY;
    if (r == 0) { /* the driver failed: this caller gets what there is, no list is kept */
        *list = found;
        *count = n;
        return CLVARLEN_SUCCESS;
    }
    enum_list = found;
    enum_count = n;
    enum_kept = true;
    return copy_kept(list, count);
}

clvarlen_status cv_devices_enumerate(cv_device **list, size_t *count)
{
    *list = NULL;
    *count = 0;
    pthread_once(&enum_once, enum_register);
    pthread_mutex_lock(&enum_lock);
    clvarlen_status st = enumerate_locked(list, count);
    pthread_mutex_unlock(&enum_lock);
    return st;
}
#endif /* CLVARLEN_HAVE_OPENCL */

static bool contains_ci(const char *hay, const char *needle)
{
    size_t nl = strlen(needle);
    if (nl == 0)
        return false;
    for (; *hay; hay++) {
        size_t i = 0;
        while (i < nl && hay[i] &&
               tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i]))
            i++;
        if (i == nl)
            return true;
    }
    return false;
}

static bool all_digits(const char *s)
{
    if (!*s)
        return false;
    for (; *s; s++)
        if (!isdigit((unsigned char)*s))
            return false;
    return true;
}

/* The selection over an enumerated list; shared by clvarlen_device_select and context creation. */
static clvarlen_status select_from(const clvarlen_device_info *infos, size_t n, const char *spec,
                                   int *index, char *reason, size_t reason_size)
{
    char dummy[8];
    if (!reason || reason_size == 0) {
        reason = dummy;
        reason_size = sizeof dummy;
    }
    const char *source = "argument";
    if (!spec || !*spec) {
        spec = getenv("CLVARLEN_DEVICE");
        source = "CLVARLEN_DEVICE";
    }
    /* "opencl": the best OpenCL device of any kind (OpenCL CPU devices included). */
    const bool any_cl = spec && strcasecmp(spec, "opencl") == 0;
    if (spec && *spec && !any_cl) {
        if (strcasecmp(spec, "cpu") == 0) {
            *index = -1;
            snprintf(reason, reason_size, "%s '%s' asks for the built-in CPU fallback", source,
                     spec);
            return CLVARLEN_SUCCESS;
        }
        if (all_digits(spec)) {
            unsigned long i = strtoul(spec, NULL, 10);
            if (i >= n) {
                snprintf(reason, reason_size, "%s '%s': no OpenCL device with that index (%zu found)",
                         source, spec, n);
                return CLVARLEN_ERROR_DEVICE_NOT_FOUND;
            }
            *index = (int)i;
            snprintf(reason, reason_size, "%s '%s' names device %lu", source, spec, i);
            return CLVARLEN_SUCCESS;
        }
        int best = -1;
        for (size_t i = 0; i < n; i++) {
            const clvarlen_device_info *d = &infos[i];
            if (contains_ci(d->platform_name, spec) || contains_ci(d->platform_vendor, spec) ||
                contains_ci(d->device_name, spec)) {
                if (best < 0 || kind_rank(d->kind) < kind_rank(infos[best].kind))
                    best = (int)i;
            }
        }
        if (best < 0) {
            snprintf(reason, reason_size,
                     "%s '%s' matches no platform name, platform vendor or device name (%zu "
                     "OpenCL devices)",
                     source, spec, n);
            return CLVARLEN_ERROR_DEVICE_NOT_FOUND;
        }
        *index = best;
        snprintf(reason, reason_size, "%s '%s' matches %s (%s)", source, spec,
                 infos[best].device_name, kind_name(infos[best].kind));
        return CLVARLEN_SUCCESS;
    }
    /* The default takes GPUs and accelerators only: on a CPU the built-in
     * fallback is several times faster than an OpenCL CPU device (PoCL) and
     * compiles nothing (docs/PERFORMANCE.md). Mesa's llvmpipe (rusticl) is
     * never chosen unless named: it silently ends a work-item's loops after
     * 65535 iterations in all (docs/PORTABILITY.md). */
    int best = -1, cpu_dev = -1;
    for (size_t i = 0; i < n; i++) {
        if (cv_device_is_llvmpipe(&infos[i]))
            continue;
        if (infos[i].kind == CLVARLEN_DEVICE_OPENCL_CPU && !any_cl) {
            if (cpu_dev < 0)
                cpu_dev = (int)i;
            continue;
        }
        if (best < 0 || kind_rank(infos[i].kind) < kind_rank(infos[best].kind))
            best = (int)i;
    }
    if (best < 0 && any_cl) {
        if (n)
            snprintf(reason, reason_size, "%s 'opencl': no OpenCL device but Mesa's llvmpipe, "
                     "which serves only when named", source);
        else
            snprintf(reason, reason_size, "%s 'opencl': no OpenCL device found", source);
        return CLVARLEN_ERROR_DEVICE_NOT_FOUND;
    }
    if (best < 0) {
        *index = -1;
        if (cpu_dev >= 0)
            snprintf(reason, reason_size,
                     "no GPU or accelerator: the built-in CPU fallback serves (faster on a CPU "
                     "than the OpenCL CPU device %s, which serves when named, e.g. "
                     "CLVARLEN_DEVICE=opencl or %d)",
                     infos[cpu_dev].device_name, cpu_dev);
        else
            snprintf(reason, reason_size, "%s: the built-in CPU fallback serves",
                     n ? "no OpenCL device but Mesa's llvmpipe, which serves only when named"
                       : "no OpenCL device found");
        return CLVARLEN_SUCCESS;
    }
    *index = best;
    if (any_cl)
        snprintf(reason, reason_size, "%s 'opencl': the best OpenCL device (GPU, accelerator, "
                 "then OpenCL CPU) is %s (%s)", source, infos[best].device_name,
                 kind_name(infos[best].kind));
    else
        snprintf(reason, reason_size, "default order (discrete GPU, integrated GPU, accelerator, "
                 "CPU fallback): first %s is %s", kind_name(infos[best].kind),
                 infos[best].device_name);
    return CLVARLEN_SUCCESS;
}

clvarlen_status cv_device_choose(const char *spec, int *index, char *reason, size_t reason_size)
{
    clvarlen_device_info *infos = NULL;
    size_t n = 0;
    if (reason && reason_size > 0)
        reason[0] = '\0';
    /* "cpu" never needs OpenCL: answer it before touching the ICD loader. */
    const char *effective = spec && *spec ? spec : getenv("CLVARLEN_DEVICE");
    if (effective && strcasecmp(effective, "cpu") == 0)
        return select_from(NULL, 0, spec, index, reason, reason_size);
#if CLVARLEN_HAVE_OPENCL
    cv_device *list = NULL;
    clvarlen_status st = cv_devices_enumerate(&list, &n);
    if (st != CLVARLEN_SUCCESS) {
        if (reason && reason_size > 0)
            snprintf(reason, reason_size, "OpenCL device enumeration failed (%s)",
                     clvarlen_status_name(st));
        return st;
    }
    if (n > 0) {
        infos = calloc(n, sizeof *infos);
        if (!infos) {
            free(list);
            if (reason && reason_size > 0)
                snprintf(reason, reason_size, "out of memory listing %zu devices", n);
            return CLVARLEN_ERROR_OUT_OF_MEMORY;
        }
        for (size_t i = 0; i < n; i++)
            infos[i] = list[i].info;
    }
    free(list);
#endif
    clvarlen_status r = select_from(infos, n, spec, index, reason, reason_size);
    free(infos);
    return r;
}

clvarlen_status clvarlen_device_count(size_t *count)
{
    cv_clear_error(NULL);
    if (!count)
        return cv_error(NULL, CLVARLEN_ERROR_INVALID_ARGUMENT, "clvarlen_device_count: count is NULL");
    size_t n = 0;
#if CLVARLEN_HAVE_OPENCL
    cv_device *list = NULL;
    clvarlen_status st = cv_devices_enumerate(&list, &n);
    free(list);
    if (st != CLVARLEN_SUCCESS)
        return cv_error(NULL, st, "clvarlen_device_count: enumeration failed");
#endif
    *count = n;
    return CLVARLEN_SUCCESS;
}

clvarlen_status clvarlen_device_query_sized(int index, clvarlen_device_info *info,
                                            size_t info_size)
{
    cv_clear_error(NULL);
    if (!info)
        return cv_error(NULL, CLVARLEN_ERROR_INVALID_ARGUMENT, "clvarlen_device_query: info is NULL");
    if (info_size < CLVARLEN_DEVICE_INFO_MIN_SIZE)
        return cv_error(NULL, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "clvarlen_device_query: info_size %zu is below %zu", info_size,
                        (size_t)CLVARLEN_DEVICE_INFO_MIN_SIZE);
    clvarlen_device_info full;
    if (index == -1) {
        cv_device_describe_cpu(&full);
        cv_struct_out(info, info_size, &full, sizeof full);
        return CLVARLEN_SUCCESS;
    }
    if (index < -1)
        return cv_error(NULL, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "clvarlen_device_query: index %d is invalid (-1 is the CPU fallback)", index);
#if CLVARLEN_HAVE_OPENCL
    cv_device *list = NULL;
    size_t n = 0;
    clvarlen_status st = cv_devices_enumerate(&list, &n);
    if (st != CLVARLEN_SUCCESS)
        return cv_error(NULL, st, "clvarlen_device_query: enumeration failed");
    if ((size_t)index >= n) {
        free(list);
        return cv_error(NULL, CLVARLEN_ERROR_DEVICE_NOT_FOUND,
                        "clvarlen_device_query: no device %d (%zu OpenCL devices)", index, n);
    }
    full = list[index].info;
    free(list);
    cv_struct_out(info, info_size, &full, sizeof full);
    return CLVARLEN_SUCCESS;
#else
    return cv_error(NULL, CLVARLEN_ERROR_DEVICE_NOT_FOUND,
                    "clvarlen_device_query: no device %d (built without OpenCL)", index);
#endif
}

clvarlen_status clvarlen_device_select(const char *spec, int *index, char *reason,
                                       size_t reason_size)
{
    cv_clear_error(NULL);
    if (!index)
        return cv_error(NULL, CLVARLEN_ERROR_INVALID_ARGUMENT, "clvarlen_device_select: index is NULL");
    char buf[512];
    int chosen = -1;
    clvarlen_status st = cv_device_choose(spec, &chosen, buf, sizeof buf);
    if (st != CLVARLEN_SUCCESS)
        return cv_error(NULL, st, "clvarlen_device_select: %s", buf);
    *index = chosen;
    if (reason && reason_size > 0)
        snprintf(reason, reason_size, "%s", buf);
    return CLVARLEN_SUCCESS;
}
