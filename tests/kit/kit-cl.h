/* The OpenCL part of the test kit, for the test binaries' OpenCL builds: device
 * buffers with guard bands (the device-side counterpart of tu_guarded) and
 * event checks. Fails the current Check test on an OpenCL error; only call it
 * inside test bodies (after Check forks).
 */
#ifndef CLVARLEN_TEST_KIT_CL_H
#define CLVARLEN_TEST_KIT_CL_H

#include "kit-check.h"

#include <clvarlen/clvarlen-cl.h>

/* Guard bytes after each region (the region starts at `off`, which the bytes
 * before it guard too): as many as the host guard bands. */
#define TU_CLBUF_GUARD TU_GUARD_BYTES

/* A cl_mem of off + bytes + TU_CLBUF_GUARD bytes on the context's OpenCL context. */
typedef struct tu_clbuf {
    cl_mem mem;
    size_t off, bytes, size;
    unsigned char *host; /* the whole buffer as last written or read */
} tu_clbuf;

/** The byte pattern at byte i of every tu_clbuf outside what init wrote. */
unsigned char tu_clbuf_pattern(size_t i);
/** The region [off, off + bytes) holds `init` (or the pattern when init is NULL),
 * everything else the pattern; written through the context's queue. */
tu_clbuf tu_clbuf_make(clvarlen_context *ctx, size_t bytes, size_t off, const void *init);
/** Reads the whole buffer back (blocking, on the context's queue), fails the test if a
 * byte outside the region changed, and returns the region (inside d->host). */
void *tu_clbuf_fetch(clvarlen_context *ctx, tu_clbuf *d, const char *label);
/** tu_clbuf_fetch, and the region must still hold the pattern (nothing written at all). */
void tu_clbuf_untouched(clvarlen_context *ctx, tu_clbuf *d, const char *label);
void tu_clbuf_free(tu_clbuf *d);

/** Waits for *ev, checks it completed, releases it and sets it to NULL. */
void tu_cl_wait_release(cl_event *ev, const char *label);

#endif
