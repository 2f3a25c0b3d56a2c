/* Kernel loading: find cl/<file> (CLVARLEN_KERNEL_PATH or the option, then
 * the copies compiled into the library, so that an installed library works
 * from any prefix and no build path is kept in the binary), join cl/cv-shared.h and cl/common.clh from the
 * same directory in front of it (and the headers it names, in place), and build it with the op's -D options. Programs are kept per
 * context (in memory) and as binaries on disk (program-cache.c). A failed allocation is
 * CLVARLEN_ERROR_OUT_OF_MEMORY, never "kernel not found".
 */
#include "runtime/runtime.h"
#include "runtime/ptx-patch.h"

#if CLVARLEN_HAVE_OPENCL

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct cv_kernel_entry {
    struct cv_kernel_entry *next;
    char *name;
    cl_kernel kernel;
} cv_kernel_entry;

struct cv_program {
    cv_program *next;
    char *file;
    char *options;
    cl_program program;
    cv_kernel_entry *kernels;
};

typedef enum file_result { FILE_READ, FILE_ABSENT, FILE_NO_MEMORY } file_result;

/* Reads a whole file, NUL-terminated, into *data (malloc'ed). FILE_ABSENT covers a file
 * that is not there or cannot be read (the search goes on); FILE_NO_MEMORY only a failed
 * allocation, which is an error of its own, never "not found". */
static file_result read_file(const char *path, char **data, size_t *size)
{
    *data = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return FILE_ABSENT;
    file_result r = FILE_ABSENT;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
        char *buf = malloc((size_t)n + 1);
        if (!buf)
            r = FILE_NO_MEMORY;
        else if (fread(buf, 1, (size_t)n, f) == (size_t)n) {
            buf[n] = '\0';
            *data = buf;
            *size = (size_t)n;
            r = FILE_READ;
        } else
            free(buf);
    }
    fclose(f);
    return r;
}

/* The pseudo-directory of the copies compiled into the library. */
static const char embedded_dir[] = "(built into the library)";

/* name from dir: a file there, or an embedded copy for embedded_dir. */
static file_result read_in(const char *dir, const char *name, char **data, size_t *size)
{
    if (dir == embedded_dir) {
        *data = NULL;
        for (size_t i = 0; i < cv_n_embedded_kernels; i++) {
            const cv_embedded_file *e = &cv_embedded_kernels[i];
            if (strcmp(e->name, name) != 0)
                continue;
            if (!(*data = malloc(e->size + 1)))
                return FILE_NO_MEMORY;
            memcpy(*data, e->data, e->size + 1);
            *size = e->size;
            return FILE_READ;
        }
        return FILE_ABSENT;
    }
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return read_file(path, data, size);
}

/* The preludes joined in front of every family file, in order: the constants
 * host and kernels share, then the common helpers; then, where the directory
 * has one, the family's own prelude <family>.clh (family: the file name up to
 * its first '-' or '.', so segment-scan.cl gets segment.clh). */
static const char *const preludes[] = {"cv-shared.h", "common.clh"};
#define N_PRELUDES (sizeof preludes / sizeof preludes[0])

/* Joins the preludes and the family file (each followed by a newline); NULL
 * when out of memory. */
static char *join_source(char *const parts[], const size_t sizes[], size_t n, size_t *size)
{
    size_t total = 1;
    for (size_t i = 0; i < n; i++)
        total += sizes[i] + 1;
    char *joined = malloc(total);
    if (!joined)
        return NULL;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(joined + at, parts[i], sizes[i]);
        at += sizes[i];
        joined[at++] = '\n';
    }
    joined[at] = '\0';
    *size = at;
    return joined;
}

/* A kernel file names a shared header (not a prelude: joined only where asked,
 * at that place) on a line of its own: `// clvarlen-include: NAME.clh`. The
 * loader replaces the line by the header's text, so the cache hash still
 * covers every byte compiled. One level: a header's own such lines stay
 * comments. */
#define INCLUDE_MARK "// clvarlen-include: "

/* Splices every header *text names (from dir) in place of its line. FILE_READ
 * (*text, *size replaced), FILE_ABSENT (*missing names the header, at most
 * missing_size bytes) or FILE_NO_MEMORY. */
static file_result splice_includes(const char *dir, char **text, size_t *size, char *missing,
                                   size_t missing_size)
{
    const size_t mark_len = strlen(INCLUDE_MARK);
    size_t from = 0;
    for (;;) {
        char *line = strstr(*text + from, INCLUDE_MARK);
        if (!line)
            return FILE_READ;
        const size_t at = (size_t)(line - *text);
        if (at > 0 && (*text)[at - 1] != '\n') { /* not at a line's start */
            from = at + mark_len;
            continue;
        }
        const char *name = line + mark_len;
        const size_t name_len = strcspn(name, " \t\r\n");
        const size_t line_end = (size_t)(name + strcspn(name, "\n") - *text);
        char hdr_name[128];
        snprintf(hdr_name, sizeof hdr_name, "%.*s", (int)name_len, name);
        char *hdr = NULL;
        size_t hdr_size = 0;
        file_result r = name_len == 0 || name_len >= sizeof hdr_name ||
                                memchr(name, '/', name_len)
                            ? FILE_ABSENT
                            : read_in(dir, hdr_name, &hdr, &hdr_size);
        if (r != FILE_READ) {
            snprintf(missing, missing_size, "%.*s", (int)name_len, name);
            return r;
        }
        const size_t tail = *size - line_end;
        char *joined = malloc(at + hdr_size + tail + 1);
        if (!joined) {
            free(hdr);
            return FILE_NO_MEMORY;
        }
        memcpy(joined, *text, at);
        memcpy(joined + at, hdr, hdr_size);
        memcpy(joined + at + hdr_size, *text + line_end, tail);
        joined[at + hdr_size + tail] = '\0';
        free(hdr);
        free(*text);
        *text = joined;
        *size = at + hdr_size + tail;
        from = at + hdr_size;
    }
}

/* Reads file and its preludes from dir. SUCCESS (*source set); with *absent, dir has no
 * file (the caller tries the next directory); else an error recorded on ctx: a prelude or
 * a header the file names missing (KERNEL_NOT_FOUND) or no memory (OUT_OF_MEMORY). */
static clvarlen_status load_from_dir(clvarlen_context *ctx, const char *dir, const char *file,
                                     char **source, size_t *size, bool *absent)
{
    char name[256];
    /* parts: the preludes, the family prelude (may stay NULL), the file */
    char *parts[N_PRELUDES + 2] = {NULL};
    size_t sizes[N_PRELUDES + 2] = {0};
    file_result r = read_in(dir, file, &parts[N_PRELUDES + 1], &sizes[N_PRELUDES + 1]);
    *absent = r == FILE_ABSENT;
    if (*absent)
        return CLVARLEN_ERROR_KERNEL_NOT_FOUND;
    const char *missing = NULL;
    char missing_hdr[128] = "";
    if (r == FILE_READ) /* else FILE_NO_MEMORY, the file not read */
        r = splice_includes(dir, &parts[N_PRELUDES + 1], &sizes[N_PRELUDES + 1], missing_hdr,
                            sizeof missing_hdr);
    if (r == FILE_ABSENT)
        missing = missing_hdr;
    for (size_t j = 0; j < N_PRELUDES && r == FILE_READ; j++) {
        if ((r = read_in(dir, preludes[j], &parts[j], &sizes[j])) == FILE_ABSENT)
            missing = preludes[j];
    }
    if (r == FILE_READ) {
        int family_len = (int)strcspn(file, "-.");
        snprintf(name, sizeof name, "%.*s.clh", family_len, file);
        if ((r = read_in(dir, name, &parts[N_PRELUDES], &sizes[N_PRELUDES])) == FILE_ABSENT)
            r = FILE_READ; /* the family prelude is optional */
    }
    char *joined = NULL;
    if (r == FILE_READ) {
        /* join_source skips nothing: an absent family prelude joins as "" */
        char empty[1] = "";
        char *join[N_PRELUDES + 2];
        for (size_t j = 0; j < N_PRELUDES + 2; j++)
            join[j] = parts[j] ? parts[j] : empty;
        joined = join_source(join, sizes, N_PRELUDES + 2, size);
    }
    for (size_t j = 0; j < N_PRELUDES + 2; j++)
        free(parts[j]);
    if (missing)
        return cv_error(ctx, CLVARLEN_ERROR_KERNEL_NOT_FOUND,
                        "kernel %s found in %s but %s is missing there", file, dir, missing);
    if (!joined)
        return cv_error(ctx, CLVARLEN_ERROR_OUT_OF_MEMORY, "kernel %s: out of memory", file);
    *source = joined;
    return CLVARLEN_SUCCESS;
}

/* Reads the preludes + file from the first directory holding file. */
static clvarlen_status load_source(clvarlen_context *ctx, const char *file, char **source,
                                   size_t *size, char *found_dir, size_t found_size)
{
    char searched[2048] = "";
    const char *dirs[64];
    size_t n_dirs = 0;
    char *path_copy = NULL;
    if (ctx->kernel_path) {
        if (!(path_copy = strdup(ctx->kernel_path)))
            return cv_error(ctx, CLVARLEN_ERROR_OUT_OF_MEMORY, "kernel %s: out of memory", file);
        char *save = NULL;
        for (char *d = strtok_r(path_copy, ":", &save); d && n_dirs < 60;
             d = strtok_r(NULL, ":", &save))
            dirs[n_dirs++] = d;
    }
    dirs[n_dirs++] = embedded_dir;

    for (size_t i = 0; i < n_dirs; i++) {
        bool absent = false;
        clvarlen_status st = load_from_dir(ctx, dirs[i], file, source, size, &absent);
        size_t used = strlen(searched);
        snprintf(searched + used, sizeof searched - used, "%s%s", used ? ", " : "", dirs[i]);
        if (absent)
            continue;
        if (st == CLVARLEN_SUCCESS)
            snprintf(found_dir, found_size, "%s", dirs[i]);
        /* dirs[] point into path_copy: free it only after the last use. */
        free(path_copy);
        return st;
    }
    free(path_copy);
    return cv_error(ctx, CLVARLEN_ERROR_KERNEL_NOT_FOUND,
                    "kernel source %s not found (searched: %s)", file, searched);
}

static char *build_log(clvarlen_context *ctx, cl_program program)
{
    size_t n = 0;
    if (clGetProgramBuildInfo(program, ctx->cl_dev, CL_PROGRAM_BUILD_LOG, 0, NULL, &n) !=
            CL_SUCCESS ||
        n == 0)
        return strdup("(no build log)");
    char *log = malloc(n + 1);
    if (!log)
        return NULL;
    if (clGetProgramBuildInfo(program, ctx->cl_dev, CL_PROGRAM_BUILD_LOG, n, log, NULL) !=
        CL_SUCCESS)
        log[0] = '\0';
    log[n] = '\0';
    return log;
}

/* The cache key of a program and the platform strings it points to. */
typedef struct program_key {
    char platform[256], platform_version[256];
    cv_cache_key key;
} program_key;

static void program_key_init(clvarlen_context *ctx, const char *source, size_t size,
                             const char *options, program_key *pk)
{
    memset(pk, 0, sizeof *pk);
    (void)clGetPlatformInfo(ctx->cl_platform, CL_PLATFORM_NAME, sizeof pk->platform - 1,
                            pk->platform, NULL);
    (void)clGetPlatformInfo(ctx->cl_platform, CL_PLATFORM_VERSION,
                            sizeof pk->platform_version - 1, pk->platform_version, NULL);
    const char *version = CLVARLEN_VERSION_STRING;
    const char *strings[] = {options, pk->platform, pk->platform_version,
                             ctx->device.device_name, ctx->device.driver_version, version};
    cv_cache_key *k = &pk->key;
    k->parts[0] = source;
    k->sizes[0] = size;
    k->n_parts = 1;
    for (size_t i = 0; i < sizeof strings / sizeof strings[0]; i++) {
        k->parts[k->n_parts] = strings[i];
        k->sizes[k->n_parts++] = strlen(strings[i]);
    }
    cv_cache_key_init(k);
}

/* The program from its cache entry, or NULL (absent, damaged or refused by the driver:
 * the caller builds from source and rewrites the entry). */
static cl_program load_cached(clvarlen_context *ctx, const program_key *pk, const char *file,
                              const char *options)
{
    unsigned char *bin = NULL;
    size_t bin_size = 0;
    int cached = cv_cache_load(ctx, &pk->key, &bin, &bin_size);
    if (cached == 0)
        cv_log(ctx, CLVARLEN_LOG_DEBUG, "program cache miss: %s [%s] (%s)", file, options,
               pk->key.hex);
    if (cached != 1)
        return NULL; /* a damaged entry was logged by cv_cache_load */
    const unsigned char *bins[] = {bin};
    cl_int bin_status = CL_SUCCESS, err = CL_SUCCESS;
    cl_program p = clCreateProgramWithBinary(ctx->cl_ctx, 1, &ctx->cl_dev, &bin_size, bins,
                                             &bin_status, &err);
    free(bin);
    if (err == CL_SUCCESS && bin_status == CL_SUCCESS &&
        clBuildProgram(p, 1, &ctx->cl_dev, options, NULL, NULL) == CL_SUCCESS) {
        cv_log(ctx, CLVARLEN_LOG_DEBUG, "program cache hit: %s [%s] (%s)", file, options,
               pk->key.hex);
        return p;
    }
    if (p)
        clReleaseProgram(p);
    cv_log(ctx, CLVARLEN_LOG_INFO,
           "program cache corrupt: %s/%s.bin was refused by the driver; rebuilding",
           ctx->cache_dir ? ctx->cache_dir : "(cache)", pk->key.hex);
    return NULL;
}

/* Keeps the binary of a program built from source for the next start. */
static void store_binary(clvarlen_context *ctx, cl_program p, const program_key *pk)
{
    size_t bsize = 0;
    if (!ctx->cache_dir ||
        clGetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, sizeof bsize, &bsize, NULL) != CL_SUCCESS ||
        bsize == 0)
        return;
    unsigned char *b = malloc(bsize);
    unsigned char *bins[] = {b};
    if (!b)
        cv_log(ctx, CLVARLEN_LOG_INFO, "program cache: no memory for a %zu-byte binary; not "
               "stored", bsize);
    else if (clGetProgramInfo(p, CL_PROGRAM_BINARIES, sizeof bins, bins, NULL) == CL_SUCCESS)
        cv_cache_store(ctx, &pk->key, b, bsize);
    free(b);
}

/* Developer knob: CLVARLEN_SOURCE_DUMP=<directory> writes every program's
 * joined source there as <file>-<key>.cl, its build options on the first line
 * (tests/portability/check-targets.py compiles them for other targets). A
 * file that cannot be written is logged and skipped: it never fails a build. */
static void dump_source(clvarlen_context *ctx, const char *file, const char *options,
                        const char *source, size_t size, const program_key *pk)
{
    const char *dir = getenv("CLVARLEN_SOURCE_DUMP");
    if (!dir || !*dir)
        return;
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%.*s-%s.cl", dir, (int)strcspn(file, "."), file,
             pk->key.hex);
    FILE *f = fopen(path, "wb");
    bool ok = f && fprintf(f, "// clvarlen-build-options: %s\n", options) > 0 &&
              fwrite(source, 1, size, f) == size;
    if ((f && fclose(f) != 0) || !ok)
        cv_log(ctx, CLVARLEN_LOG_INFO, "CLVARLEN_SOURCE_DUMP: %s not written", path);
}

/* Programs built with CV_SM90A_OPTION or CV_PTX_MAXNREG_OPTION (runtime.h):
 * the PTX of the build goes through the patch step (ptx-patch.c: for sm_90a
 * its marked instructions turned on and the target made sm_90a; with a
 * register cap (maxnreg > 0) a .maxnreg directive for every kernel) and is
 * built again from that text; *p is replaced on success, released on
 * failure. The cache then stores the patched binary, so a later start loads
 * it as it is. */
static clvarlen_status rebuild_patched(clvarlen_context *ctx, const char *file,
                                       const char *options, bool sm90a, int maxnreg,
                                       cl_program *p)
{
    size_t bsize = 0;
    unsigned char *bin = NULL;
    cl_int err = clGetProgramInfo(*p, CL_PROGRAM_BINARY_SIZES, sizeof bsize, &bsize, NULL);
    if (err == CL_SUCCESS && bsize > 0 && (bin = malloc(bsize)) != NULL) {
        unsigned char *bins[] = {bin};
        err = clGetProgramInfo(*p, CL_PROGRAM_BINARIES, sizeof bins, bins, NULL);
    }
    clReleaseProgram(*p);
    *p = NULL;
    if (err != CL_SUCCESS || bsize == 0 || !bin) {
        free(bin);
        return err != CL_SUCCESS ? cv_cl_check(ctx, err, "clGetProgramInfo(binary)")
                                 : cv_error(ctx, CLVARLEN_ERROR_KERNEL_BUILD,
                                            "%s [%s]: no program binary to patch", file, options);
    }
    char *ptx = (char *)bin;
    size_t ptx_size = bsize;
    cv_ptx_patch_result r = CV_PTX_PATCHED;
    const char *step = "sm_90a";
    if (sm90a) {
        char *t = NULL;
        r = cv_ptx_patch_sm90a(ptx, ptx_size, &t, &ptx_size);
        free(ptx);
        ptx = t;
    }
    if (r == CV_PTX_PATCHED && maxnreg > 0) {
        char *t = NULL;
        step = "a register cap";
        r = cv_ptx_cap_registers(ptx, ptx_size, maxnreg, &t, &ptx_size);
        free(ptx);
        ptx = t;
    }
    if (r != CV_PTX_PATCHED)
        return cv_error(ctx, r == CV_PTX_NO_MEMORY ? CLVARLEN_ERROR_OUT_OF_MEMORY
                                                   : CLVARLEN_ERROR_KERNEL_BUILD,
                        "%s [%s]: PTX patch for %s: %s", file, options, step,
                        cv_ptx_patch_message(r));
    const unsigned char *bins[] = {(const unsigned char *)ptx};
    size_t len = ptx_size; /* as the route was measured (../shared/gpu/probes) */
    cl_int bin_status = CL_SUCCESS;
    cl_program q = clCreateProgramWithBinary(ctx->cl_ctx, 1, &ctx->cl_dev, &len, bins,
                                             &bin_status, &err);
    free(ptx);
    if (err == CL_SUCCESS && bin_status != CL_SUCCESS)
        err = bin_status;
    if (err == CL_SUCCESS)
        err = clBuildProgram(q, 1, &ctx->cl_dev, options, NULL, NULL);
    if (err != CL_SUCCESS) {
        char *log = q ? build_log(ctx, q) : NULL;
        if (q)
            clReleaseProgram(q);
        clvarlen_status st = cv_error(ctx, CLVARLEN_ERROR_KERNEL_BUILD,
                                      "%s [%s]: the build of the patched PTX failed "
                                      "(%s):\n%s",
                                      file, options, cv_cl_error_name(err),
                                      log ? log : "(no build log)");
        free(log);
        return st;
    }
    cv_log(ctx, CLVARLEN_LOG_INFO, "patched %s [%s]%s%s", file, options,
           sm90a ? " for sm_90a" : "", maxnreg > 0 ? " with a register cap" : "");
    *p = q;
    return CLVARLEN_SUCCESS;
}

static clvarlen_status build_program(clvarlen_context *ctx, const char *file, const char *options,
                                     cl_program *out)
{
    const bool sm90a = strstr(options, CV_SM90A_OPTION) != NULL;
    const char *cap = strstr(options, CV_PTX_MAXNREG_OPTION);
    const int maxnreg = cap ? atoi(cap + sizeof CV_PTX_MAXNREG_OPTION - 1) : 0;
    if (cap && (maxnreg < 16 || maxnreg > 255))
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s [%s]: register cap outside 16 .. 255", file, options);
    char *source = NULL;
    size_t size = 0;
    char dir[PATH_MAX];
    clvarlen_status st = load_source(ctx, file, &source, &size, dir, sizeof dir);
    if (st != CLVARLEN_SUCCESS)
        return st;
    program_key pk; /* points into source until the binary is stored */
    program_key_init(ctx, source, size, options, &pk);
    dump_source(ctx, file, options, source, size, &pk);
    if ((*out = load_cached(ctx, &pk, file, options)) != NULL) {
        free(source);
        return CLVARLEN_SUCCESS;
    }

    cl_int err = CL_SUCCESS;
    const char *src = source;
    cl_program p = clCreateProgramWithSource(ctx->cl_ctx, 1, &src, &size, &err);
    if (err != CL_SUCCESS) {
        free(source);
        return cv_cl_check(ctx, err, "clCreateProgramWithSource");
    }
    cv_log(ctx, CLVARLEN_LOG_INFO, "compiling %s [%s] (first use on this device and driver; "
           "cached afterwards)", file, options);
    err = clBuildProgram(p, 1, &ctx->cl_dev, options, NULL, NULL);
    if (err != CL_SUCCESS) {
        free(source);
        char *log = build_log(ctx, p);
        clReleaseProgram(p);
        st = cv_error(ctx, CLVARLEN_ERROR_KERNEL_BUILD,
                      "building %s/%s with options '%s' failed (%s):\n%s", dir, file, options,
                      cv_cl_error_name(err), log ? log : "(no memory for the build log)");
        free(log);
        return st;
    }
    cv_log(ctx, CLVARLEN_LOG_INFO, "compiled %s/%s [%s]", dir, file, options);
    if ((sm90a || maxnreg > 0) &&
        (st = rebuild_patched(ctx, file, options, sm90a, maxnreg, &p)) != CLVARLEN_SUCCESS) {
        free(source);
        return st;
    }
    if (ctx->base.log_level >= CLVARLEN_LOG_DEBUG) { /* e.g. register use, with -cl-nv-verbose */
        char *log = build_log(ctx, p);
        if (log && log[strspn(log, " \t\r\n")])
            cv_log(ctx, CLVARLEN_LOG_DEBUG, "build log of %s [%s]:\n%s", file, options, log);
        free(log);
    }
    store_binary(ctx, p, &pk);
    free(source);
    *out = p;
    return CLVARLEN_SUCCESS;
}

clvarlen_status cv_get_kernel(clvarlen_context *ctx, const char *file, const char *options,
                              const char *name, cl_kernel *kernel)
{
    if (!options)
        options = "";
    /* developer knob: CLVARLEN_BUILD_OPTIONS is appended to every program's
     * options (e.g. -cl-nv-verbose, whose report CLVARLEN_LOG=debug prints) */
    const char *extra = getenv("CLVARLEN_BUILD_OPTIONS");
    char joined[1024];
    if (extra && *extra) {
        if ((size_t)snprintf(joined, sizeof joined, "%s %s", options, extra) >= sizeof joined)
            return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                            "CLVARLEN_BUILD_OPTIONS: too long (%zu bytes)", strlen(extra));
        options = joined;
    }
    cv_program *prog = NULL;
    for (cv_program *p = ctx->programs; p; p = p->next)
        if (strcmp(p->file, file) == 0 && strcmp(p->options, options) == 0) {
            prog = p;
            break;
        }
    if (!prog) {
        prog = calloc(1, sizeof *prog);
        if (!prog)
            return cv_error(ctx, CLVARLEN_ERROR_OUT_OF_MEMORY, "kernel %s: out of memory", name);
        prog->file = strdup(file);
        prog->options = strdup(options);
        if (!prog->file || !prog->options) {
            free(prog->file);
            free(prog->options);
            free(prog);
            return cv_error(ctx, CLVARLEN_ERROR_OUT_OF_MEMORY, "kernel %s: out of memory", name);
        }
        clvarlen_status st = build_program(ctx, file, options, &prog->program);
        if (st != CLVARLEN_SUCCESS) {
            free(prog->file);
            free(prog->options);
            free(prog);
            return st;
        }
        prog->next = ctx->programs;
        ctx->programs = prog;
    }
    for (cv_kernel_entry *k = prog->kernels; k; k = k->next)
        if (strcmp(k->name, name) == 0) {
            *kernel = k->kernel;
            return CLVARLEN_SUCCESS;
        }
    cl_int err = CL_SUCCESS;
    cl_kernel k = clCreateKernel(prog->program, name, &err);
    if (err != CL_SUCCESS)
        return cv_error(ctx, CLVARLEN_ERROR_KERNEL_BUILD, "clCreateKernel(%s) from %s: %s (%d)",
                        name, file, cv_cl_error_name(err), (int)err);
    cv_kernel_entry *e = calloc(1, sizeof *e);
    if (!e || !(e->name = strdup(name))) {
        free(e);
        clReleaseKernel(k);
        return cv_error(ctx, CLVARLEN_ERROR_OUT_OF_MEMORY, "kernel %s: out of memory", name);
    }
    e->kernel = k;
    e->next = prog->kernels;
    prog->kernels = e;
    *kernel = k;
    return CLVARLEN_SUCCESS;
}

void cv_programs_release(clvarlen_context *ctx)
{
    cv_program *p = ctx->programs;
    while (p) {
        cv_program *next = p->next;
        cv_kernel_entry *k = p->kernels;
        while (k) {
            cv_kernel_entry *kn = k->next;
            clReleaseKernel(k->kernel);
            free(k->name);
            free(k);
            k = kn;
        }
        clReleaseProgram(p->program);
        free(p->file);
        free(p->options);
        free(p);
        p = next;
    }
    ctx->programs = NULL;
}

#endif /* CLVARLEN_HAVE_OPENCL */
