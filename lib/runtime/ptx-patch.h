/* The loader's PTX patch step (ptx-patch.c): turns the PTX that NVIDIA's
 * OpenCL compiler produced for a Hopper device (.target sm_90) into PTX for
 * sm_90a, whose instructions (wgmma, setmaxnreg) that compiler cannot target.
 * Self-contained (no OpenCL, no context), so tests compile it on its own.
 */
#ifndef CLVARLEN_PTX_PATCH_H
#define CLVARLEN_PTX_PATCH_H

#include <stddef.h>

/* The marker a kernel writes in front of an sm_90a instruction inside an
 * inline-asm string: `// CVW wgmma.fence.sync.aligned;` is a comment to the
 * sm_90 build (the compiler still substitutes %N operands in it) and an
 * instruction once the marker is removed. */
#define CV_PTX_MARKER "// CVW "

/* Why a patch was refused (cv_ptx_patch_sm90a's return value). */
typedef enum cv_ptx_patch_result {
    CV_PTX_PATCHED = 0,
    CV_PTX_NO_TARGET,  /* no `.target sm_90` directive: not PTX for a Hopper device */
    CV_PTX_NO_MARKERS, /* no marker: nothing to turn on (the caller asked for it) */
    CV_PTX_NO_MEMORY,
    CV_PTX_NO_ENTRY,    /* no `.entry` directive: no kernel to cap */
    CV_PTX_HAS_MAXNREG, /* a `.maxnreg` directive is there already */
    CV_PTX_BAD_NREG,    /* the cap is outside 16 .. 255 */
} cv_ptx_patch_result;

/**
 * Copies the PTX text in[0 .. n) (a NUL inside ends it) into a new malloc'ed,
 * NUL-terminated *out (*out_n bytes without the NUL) with every
 * CV_PTX_MARKER removed and the `.target sm_90` directive's target made
 * sm_90a (the directive's other fields, e.g. `, texmode_independent`, kept).
 * A target that is already sm_90a is kept. On a refusal *out is NULL.
 */
cv_ptx_patch_result cv_ptx_patch_sm90a(const char *in, size_t n, char **out, size_t *out_n);

/**
 * Copies the PTX text in[0 .. n) (a NUL inside ends it) into a new malloc'ed,
 * NUL-terminated *out with a `.maxnreg nreg` directive after the parameter
 * list of every kernel (`.entry`, also `.visible .entry`), so that ptxas
 * keeps each kernel within nreg registers per thread (16 <= nreg <= 255).
 * NVIDIA's OpenCL compiler accepts -cl-nv-maxrregcount and ignores it
 * (docs/PERFORMANCE.md); a kernel whose occupancy its register count sets
 * gets the cap this way (kernel-source.c, CV_PTX_MAXNREG_OPTION). Text
 * with no kernel, or with a `.maxnreg` already, is refused; on a refusal *out
 * is NULL.
 */
cv_ptx_patch_result cv_ptx_cap_registers(const char *in, size_t n, int nreg, char **out,
                                         size_t *out_n);

/** A short description of a result, for error messages. */
const char *cv_ptx_patch_message(cv_ptx_patch_result r);

#endif /* CLVARLEN_PTX_PATCH_H */
