/* clvarlen-test: devices: the list command, contexts, and the devices a command runs on.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <clvarlen/clvarlen.h>
#if CLVARLEN_HAVE_OPENCL
#  include <clvarlen/clvarlen-cl.h>
#endif

#include "ct-harness.h"

/* ================================================================ devices */

static const char *vendor_name(clvarlen_vendor v)
{
    switch (v) {
    case CLVARLEN_VENDOR_NVIDIA: return "nvidia";
    case CLVARLEN_VENDOR_AMD: return "amd";
    case CLVARLEN_VENDOR_INTEL: return "intel";
    case CLVARLEN_VENDOR_CPU: return "cpu";
    default: return "other";
    }
}

static const char *kind_name(clvarlen_device_kind k)
{
    switch (k) {
    case CLVARLEN_DEVICE_CPU_FALLBACK: return "cpu-fallback";
    case CLVARLEN_DEVICE_DISCRETE_GPU: return "discrete-gpu";
    case CLVARLEN_DEVICE_INTEGRATED_GPU: return "integrated-gpu";
    case CLVARLEN_DEVICE_OPENCL_CPU: return "opencl-cpu";
    case CLVARLEN_DEVICE_ACCELERATOR: return "accelerator";
    }
    return "unknown";
}

static void caps_string(const clvarlen_device_info *info, char *buf, size_t n)
{
    snprintf(buf, n, "%s%s%s", info->has_fp16 ? "fp16 " : "", info->has_fp64 ? "fp64 " : "",
             info->has_subgroups ? "subgroups " : "");
    if (info->cc_major > 0) {
        size_t len = strlen(buf);
        snprintf(buf + len, n - len, "cc %d.%d ", info->cc_major, info->cc_minor);
    }
    size_t len = strlen(buf);
    if (len == 0)
        snprintf(buf, n, "none");
    else
        buf[len - 1] = '\0';
}

/* "[0] pthread-skylake..." style labels for tables. */
static void device_label(int index, const char *name, char *buf, size_t n)
{
    if (index < 0)
        snprintf(buf, n, "cpu");
    else
        snprintf(buf, n, "%d:%.20s", index, name);
}

static void print_device_json(const clvarlen_device_info *d, int is_default)
{
    char caps[96];
    caps_string(d, caps, sizeof caps);
    fputs("{\"index\": ", stdout);
    if (d->index < 0)
        fputs("\"cpu\"", stdout);
    else
        printf("%d", d->index);
    fputs(", \"platform\": ", stdout);
    ct_json_str(d->platform_name);
    fputs(", \"platform_vendor\": ", stdout);
    ct_json_str(d->platform_vendor);
    fputs(", \"vendor_class\": ", stdout);
    ct_json_str(vendor_name(d->vendor));
    fputs(", \"kind\": ", stdout);
    ct_json_str(kind_name(d->kind));
    fputs(", \"name\": ", stdout);
    ct_json_str(d->device_name);
    fputs(", \"driver_version\": ", stdout);
    ct_json_str(d->driver_version);
    fputs(", \"opencl_c_version\": ", stdout);
    ct_json_str(d->opencl_c_version);
    printf(", \"compute_units\": %" PRIu32 ", \"max_clock_mhz\": %" PRIu32
           ", \"global_mem_bytes\": %" PRIu64 ", \"local_mem_bytes\": %" PRIu64
           ", \"max_work_group_size\": %" PRIu64,
           d->compute_units, d->max_clock_mhz, d->global_mem_bytes, d->local_mem_bytes,
           d->max_work_group_size);
    printf(", \"fp16\": %s, \"fp64\": %s, \"subgroups\": %s", d->has_fp16 ? "true" : "false",
           d->has_fp64 ? "true" : "false", d->has_subgroups ? "true" : "false");
    if (d->cc_major > 0)
        printf(", \"compute_capability\": \"%d.%d\"", d->cc_major, d->cc_minor);
    else
        fputs(", \"compute_capability\": null", stdout);
    fputs(", \"capabilities\": ", stdout);
    ct_json_str(caps);
    printf(", \"default\": %s}", is_default ? "true" : "false");
}

static void print_device_text(const clvarlen_device_info *d, int is_default)
{
    char caps[96], mem[32], local[32];
    caps_string(d, caps, sizeof caps);
    ct_fmt_bytes(mem, sizeof mem, (double)d->global_mem_bytes);
    ct_fmt_bytes(local, sizeof local, (double)d->local_mem_bytes);
    if (d->index < 0)
        printf("[cpu] %s%s\n", d->device_name[0] ? d->device_name : "CPU fallback",
               is_default ? "   (default)" : "");
    else
        printf("[%d] %s%s\n", d->index, d->device_name, is_default ? "   (default)" : "");
    if (d->index >= 0)
        printf("    platform:      %s (%s)\n", d->platform_name, d->platform_vendor);
    printf("    class:         vendor %s, %s\n", vendor_name(d->vendor), kind_name(d->kind));
    printf("    compute units: %" PRIu32, d->compute_units);
    if (d->max_clock_mhz)
        printf(" @ %" PRIu32 " MHz", d->max_clock_mhz);
    if (d->max_work_group_size)
        printf(", max work-group %" PRIu64, d->max_work_group_size);
    putchar('\n');
    if (d->global_mem_bytes)
        printf("    memory:        %s global, %s local\n", mem, local);
    if (d->index >= 0) {
        printf("    OpenCL C:      %s; driver %s\n", d->opencl_c_version, d->driver_version);
        printf("    capabilities:  %s\n", caps);
    }
}

int ct_cmd_list(const ct_options *opt)
{
    size_t count = 0;
    clvarlen_status st = clvarlen_device_count(&count);
    if (st != CLVARLEN_SUCCESS) {
        fprintf(stderr, "clvarlen-test: cannot count devices: %s: %s\n",
                clvarlen_status_name(st), clvarlen_last_error(NULL));
        return EXIT_DEVICE;
    }
    int def = -2;
    char reason[512] = "";
    st = clvarlen_device_select(NULL, &def, reason, sizeof reason);
    if (st != CLVARLEN_SUCCESS) {
        def = -2; /* e.g. CLVARLEN_DEVICE names nothing: still list what exists */
        snprintf(reason, sizeof reason, "no default device: %s: %s", clvarlen_status_name(st),
                 clvarlen_last_error(NULL));
    }
    int rc = EXIT_PASS;
    clvarlen_device_info *infos = calloc(count + 1, sizeof *infos);
    if (!infos) {
        fprintf(stderr, "clvarlen-test: out of memory\n");
        return EXIT_DEVICE;
    }
    int *ok = calloc(count + 1, sizeof *ok);
    if (!ok) {
        free(infos);
        fprintf(stderr, "clvarlen-test: out of memory\n");
        return EXIT_DEVICE;
    }
    for (size_t i = 0; i <= count; i++) {
        int index = i < count ? (int)i : -1;
        st = clvarlen_device_query(index, &infos[i]);
        ok[i] = st == CLVARLEN_SUCCESS;
        if (!ok[i]) {
            fprintf(stderr, "clvarlen-test: cannot query device %d: %s: %s\n", index,
                    clvarlen_status_name(st), clvarlen_last_error(NULL));
            rc = EXIT_DEVICE;
        }
    }
    if (opt->json) {
        fputs("{\"tool\": \"clvarlen-test\", \"version\": ", stdout);
        ct_json_str(CLVARLEN_VERSION_STRING);
        fputs(", \"library\": ", stdout);
        ct_json_str(clvarlen_version_string());
        fputs(", \"command\": \"list\",\n  \"devices\": [", stdout);
        int first = 1;
        for (size_t i = 0; i < count; i++) {
            if (!ok[i])
                continue;
            fputs(first ? "\n    " : ",\n    ", stdout);
            first = 0;
            print_device_json(&infos[i], def == (int)i);
        }
        fputs("],\n  \"cpu_fallback\": ", stdout);
        if (ok[count])
            print_device_json(&infos[count], def == -1);
        else
            fputs("null", stdout);
        fputs(",\n  \"default\": {\"index\": ", stdout);
        if (def == -2)
            fputs("null", stdout);
        else if (def == -1)
            fputs("\"cpu\"", stdout);
        else
            printf("%d", def);
        fputs(", \"reason\": ", stdout);
        ct_json_str(reason);
        printf("},\n  \"exit_code\": %d}\n", rc);
    } else {
        printf("OpenCL devices: %zu%s\n", count,
               count ? "" : " (no OpenCL platform, or a build without OpenCL)");
        for (size_t i = 0; i < count; i++)
            if (ok[i])
                print_device_text(&infos[i], def == (int)i);
        if (ok[count])
            print_device_text(&infos[count], def == -1);
        if (def == -2)
            printf("default: none (%s)\n", reason);
        else if (def == -1)
            printf("default: [cpu] %s\n", reason);
        else
            printf("default: [%d] %s\n", def, reason);
    }
    free(ok);
    free(infos);
    return rc;
}

/* ================================================================ targets and contexts */

/* --progress: the library's "compiling ..." lines (first use of a kernel on a
 * device; minutes on CPU OpenCL devices) go to stderr. */
int ct_progress_compiles;

static void compile_log(clvarlen_log_level level, const char *message, void *user)
{
    (void)user;
    (void)level;
    if (strncmp(message, "compiling ", 10) == 0)
        fprintf(stderr, "clvarlen-test: %s\n", message);
}

clvarlen_status ct_make_context(int index, int threads, clvarlen_context **ctx)
{
    clvarlen_options *o = NULL;
    clvarlen_status st = clvarlen_options_create(&o);
    if (st != CLVARLEN_SUCCESS)
        return st;
    if (ct_progress_compiles && !getenv("CLVARLEN_LOG"))
        st = clvarlen_options_set_log(o, compile_log, NULL, CLVARLEN_LOG_INFO);
    char spec[32];
    if (index < 0)
        snprintf(spec, sizeof spec, "cpu");
    else
        snprintf(spec, sizeof spec, "%d", index);
    if (st == CLVARLEN_SUCCESS)
        st = clvarlen_options_set_device(o, spec);
    if (st == CLVARLEN_SUCCESS && threads > 0)
        st = clvarlen_options_set_threads(o, threads);
    if (st == CLVARLEN_SUCCESS)
        st = clvarlen_context_create(o, ctx);
    clvarlen_options_destroy(o);
    return st;
}

static void target_fill(ct_target *t, int index, int cpu_self)
{
    clvarlen_device_info info;
    memset(&info, 0, sizeof info);
    t->index = index;
    t->cpu_self = cpu_self;
    if (clvarlen_device_query(index, &info) == CLVARLEN_SUCCESS)
        snprintf(t->name, sizeof t->name, "%s", info.device_name);
    else
        snprintf(t->name, sizeof t->name, "%s", index < 0 ? "CPU fallback" : "?");
    device_label(index, t->name, t->label, sizeof t->label);
}

/* The devices a command runs on. for_bench: a CPU-fallback default is
 * benchmarked as it is; for check it is replaced by the OpenCL devices (or a
 * CPU self-consistency run). Returns an exit code; *remark says what was chosen. */
int ct_resolve_targets(const ct_options *opt, int for_bench, ct_target **out, size_t *n_out,
                       char *remark, size_t remark_size)
{
    size_t count = 0;
    clvarlen_status st = clvarlen_device_count(&count);
    if (st != CLVARLEN_SUCCESS) {
        fprintf(stderr, "clvarlen-test: cannot count devices: %s: %s\n",
                clvarlen_status_name(st), clvarlen_last_error(NULL));
        return EXIT_DEVICE;
    }
    ct_target *t = calloc(count + 1, sizeof *t);
    if (!t) {
        fprintf(stderr, "clvarlen-test: out of memory\n");
        return EXIT_DEVICE;
    }
    size_t n = 0;
    remark[0] = '\0';
    int want_all = opt->device && ct_ci_equal(opt->device, "all");
    int index = -1;
    char reason[400] = "";
    if (want_all) {
        if (count == 0) {
            fprintf(stderr, "clvarlen-test: --device all: no OpenCL device found\n");
            free(t);
            return EXIT_DEVICE;
        }
        snprintf(remark, remark_size, "every OpenCL device (%zu)", count);
    } else {
        st = clvarlen_device_select(opt->device, &index, reason, sizeof reason);
        if (st != CLVARLEN_SUCCESS) {
            fprintf(stderr, "clvarlen-test: %s%s: %s: %s\n",
                    opt->device ? "--device " : "default device",
                    opt->device ? opt->device : "", clvarlen_status_name(st),
                    clvarlen_last_error(NULL));
            free(t);
            return EXIT_DEVICE;
        }
        if (index >= 0 || for_bench) {
            target_fill(&t[n++], index, 0);
            snprintf(remark, remark_size, "%s", reason);
            if (index < 0)
                snprintf(remark + strlen(remark), remark_size - strlen(remark),
                         "%sthe CPU fallback runs through the host-memory API, timed with the "
                         "wall clock",
                         remark[0] ? "; " : "");
        } else if (!opt->device && count > 0) {
            snprintf(remark, remark_size,
                     "the default device is the CPU fallback (%s); comparing it with itself is "
                     "pointless, so every OpenCL device (%zu) is checked against it instead",
                     reason, count);
            want_all = 1;
        } else {
            target_fill(&t[n++], -1, 1);
            snprintf(remark, remark_size,
                     "%s, so the CPU fallback is checked against itself with a different thread "
                     "count (a consistency check; only the integer oracles are independent)",
                     opt->device ? "the CPU fallback was selected" : "no OpenCL device");
        }
    }
    if (want_all)
        for (size_t i = 0; i < count; i++)
            target_fill(&t[n++], (int)i, 0);
    *out = t;
    *n_out = n;
    return EXIT_PASS;
}
