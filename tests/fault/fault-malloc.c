/* Allocation-failure injection (fault-malloc.h). Each entry point asks
 * __builtin_return_address(0) who called it: only calls made from inside
 * libclvarlen's mapped image are counted, so allocations of libc itself (the
 * malloc behind strdup, fopen's FILE), of the OpenCL driver and of the test go
 * through untouched. The real functions are found with dlsym(RTLD_NEXT): libc's,
 * or AddressSanitizer's in a sanitizer build, so its bookkeeping stays whole.
 * dlsym may allocate before it has answered; those few calls are served from a
 * static arena whose blocks free() recognises.
 */
#include "fault-malloc.h"

#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <link.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <clvarlen/clvarlen.h>

static void *(*real_malloc)(size_t);
static void *(*real_calloc)(size_t, size_t);
static void *(*real_realloc)(void *, size_t);
static void (*real_free)(void *);
static void *(*real_aligned_alloc)(size_t, size_t);
static int (*real_posix_memalign)(void **, size_t, size_t);

/* ---- the arena for allocations made while dlsym resolves the real functions */
static _Alignas(max_align_t) unsigned char arena[8192];
static size_t arena_used;
static int resolving;

static void *arena_alloc(size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (n > sizeof arena - arena_used)
        return NULL;
    void *p = arena + arena_used;
    arena_used += n;
    return p;
}

static int in_arena(const void *p)
{
    return (const unsigned char *)p >= arena && (const unsigned char *)p < arena + sizeof arena;
}

/* dlsym's object pointer into a function pointer, without the cast ISO C forbids. */
#define NEXT(fn, name)                                                                         \
    do {                                                                                       \
        void *sym__ = dlsym(RTLD_NEXT, name);                                                  \
        memcpy(&(fn), &sym__, sizeof sym__);                                                   \
    } while (0)

static void resolve(void)
{
    if (real_malloc || resolving)
        return;
    resolving = 1;
    NEXT(real_calloc, "calloc");
    NEXT(real_realloc, "realloc");
    NEXT(real_free, "free");
    NEXT(real_aligned_alloc, "aligned_alloc");
    NEXT(real_posix_memalign, "posix_memalign");
    NEXT(real_malloc, "malloc");
    resolving = 0;
}

/* ---- the library's image and the armed counter */
static uintptr_t lib_lo, lib_hi;
static atomic_long armed_at; /* 0: disarmed */
static atomic_long counted;
static atomic_int fired;

/* 1 when this call, made from `caller`, is the one to fail. */
static int should_fail(const void *caller)
{
    if (atomic_load_explicit(&armed_at, memory_order_relaxed) == 0)
        return 0;
    uintptr_t a = (uintptr_t)caller;
    if (a < lib_lo || a >= lib_hi)
        return 0;
    if (atomic_fetch_add(&counted, 1) + 1 != atomic_load(&armed_at))
        return 0;
    atomic_store(&fired, 1);
    if (getenv("FAULT_TRACE")) { /* where the injected failure happens, to stderr */
        void *frames[16];
        backtrace_symbols_fd(frames, backtrace(frames, 16), 2);
    }
    return 1;
}

struct image_query {
    uintptr_t base;
    uintptr_t lo, hi;
};

static int find_image(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    struct image_query *q = data;
    if (info->dlpi_addr != q->base)
        return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD)
            continue;
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
        if (q->lo == 0 || lo < q->lo)
            q->lo = lo;
        if (hi > q->hi)
            q->hi = hi;
    }
    return 1;
}

int fault_init(void)
{
    Dl_info lib, exe;
    if (!dladdr((void *)(uintptr_t)clvarlen_version, &lib) ||
        !dladdr((void *)(uintptr_t)fault_init, &exe) || lib.dli_fbase == exe.dli_fbase)
        return 0;
    struct image_query q = {(uintptr_t)lib.dli_fbase, 0, 0};
    dl_iterate_phdr(find_image, &q);
    if (q.hi == 0) /* dlpi_addr is a library's load base, the same as dli_fbase */
        return 0;
    lib_lo = q.lo;
    lib_hi = q.hi;
    resolve();
    return 1;
}

void fault_arm(long n)
{
    atomic_store(&counted, 0);
    atomic_store(&fired, 0);
    atomic_store(&armed_at, n);
}

long fault_disarm(void)
{
    atomic_store(&armed_at, 0);
    return atomic_load(&counted);
}

int fault_fired(void)
{
    return atomic_load(&fired);
}

/* ---- the interposed functions */
void *malloc(size_t n)
{
    resolve();
    if (!real_malloc)
        return arena_alloc(n);
    if (should_fail(__builtin_return_address(0))) {
        errno = ENOMEM;
        return NULL;
    }
    return real_malloc(n);
}

void *calloc(size_t count, size_t n)
{
    resolve();
    if (!real_calloc) {
        void *p = count && n > SIZE_MAX / count ? NULL : arena_alloc(count * n);
        return p ? memset(p, 0, count * n) : NULL; /* the arena may be reused: zero it */
    }
    if (should_fail(__builtin_return_address(0))) {
        errno = ENOMEM;
        return NULL;
    }
    return real_calloc(count, n);
}

void *realloc(void *p, size_t n)
{
    resolve();
    if (in_arena(p) || !real_realloc) {
        void *q = malloc(n);
        if (q && p) {
            size_t left = (size_t)(arena + sizeof arena - (unsigned char *)p);
            memcpy(q, p, n < left ? n : left); /* an arena block ends before the arena does */
        }
        return q;
    }
    if (should_fail(__builtin_return_address(0))) {
        errno = ENOMEM;
        return NULL;
    }
    return real_realloc(p, n);
}

void free(void *p)
{
    if (!p || in_arena(p))
        return;
    resolve();
    if (real_free)
        real_free(p);
}

void *aligned_alloc(size_t align, size_t n)
{
    resolve();
    if (should_fail(__builtin_return_address(0))) {
        errno = ENOMEM;
        return NULL;
    }
    return real_aligned_alloc ? real_aligned_alloc(align, n) : NULL;
}

int posix_memalign(void **out, size_t align, size_t n)
{
    resolve();
    if (should_fail(__builtin_return_address(0)))
        return ENOMEM;
    return real_posix_memalign ? real_posix_memalign(out, align, n) : ENOMEM;
}

char *strdup(const char *s)
{
    resolve();
    if (should_fail(__builtin_return_address(0))) {
        errno = ENOMEM;
        return NULL;
    }
    size_t n = strlen(s) + 1;
    char *p = real_malloc ? real_malloc(n) : arena_alloc(n);
    return p ? memcpy(p, s, n) : NULL;
}

char *strndup(const char *s, size_t max)
{
    resolve();
    if (should_fail(__builtin_return_address(0))) {
        errno = ENOMEM;
        return NULL;
    }
    size_t n = strnlen(s, max);
    char *p = real_malloc ? real_malloc(n + 1) : arena_alloc(n + 1);
    if (!p)
        return NULL;
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}
