/* The loader's PTX patch step (ptx-patch.h). NVIDIA's OpenCL program
 * binaries are PTX text; its compiler targets sm_90 on a Hopper device, where
 * ptxas rejects wgmma. A kernel therefore writes those instructions as
 * comments behind CV_PTX_MARKER, the sm_90 build succeeds, and this step
 * removes the markers and retargets the text to sm_90a; the driver then
 * builds the patched text with clCreateProgramWithBinary (kernel-source.c),
 * and the program cache stores the patched binary. Measured on an H100:
 * ../shared/gpu/README.md, "Hopper tensor cores (wgmma) from OpenCL".
 */
#include "runtime/ptx-patch.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool name_char(char c)
{
    return c == '_' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/* i past any blanks (spaces, tabs) at s[i ..]. */
static size_t skip_blanks(const char *s, size_t n, size_t i)
{
    while (i < n && (s[i] == ' ' || s[i] == '\t'))
        i++;
    return i;
}

/* Just past the directive dir (len bytes) when s[i ..], after blanks, begins
 * with it and no name character follows it; else 0. */
static size_t directive_at(const char *s, size_t n, size_t i, const char *dir, size_t len)
{
    i = skip_blanks(s, n, i);
    if (n - i < len || memcmp(s + i, dir, len) != 0)
        return 0;
    i += len;
    return i < n && name_char(s[i]) ? 0 : i; /* e.g. .targetx */
}

/* Where the target name of the first `.target` directive starts, or NULL
 * when there is none or it names neither sm_90 nor sm_90a (*already: it is
 * sm_90a). A directive begins a line, after blanks. */
static const char *find_target(const char *s, size_t n, bool *already)
{
    static const char dir[] = ".target";
    for (size_t i = 0; i < n; i++) {
        if (i > 0 && s[i - 1] != '\n')
            continue;
        size_t j = directive_at(s, n, i, dir, sizeof dir - 1);
        if (j == 0)
            continue;
        j = skip_blanks(s, n, j);
        size_t e = j;
        while (e < n && name_char(s[e]))
            e++;
        if (e - j == 5 && memcmp(s + j, "sm_90", 5) == 0) {
            *already = false;
            return s + j;
        }
        if (e - j == 6 && memcmp(s + j, "sm_90a", 6) == 0) {
            *already = true;
            return s + j;
        }
        return NULL;
    }
    return NULL;
}

cv_ptx_patch_result cv_ptx_patch_sm90a(const char *in, size_t n, char **out, size_t *out_n)
{
    *out = NULL;
    *out_n = 0;
    const char *nul = memchr(in, '\0', n);
    if (nul)
        n = (size_t)(nul - in);
    bool already = false;
    const char *target = find_target(in, n, &already);
    if (!target)
        return CV_PTX_NO_TARGET;
    const size_t mlen = sizeof CV_PTX_MARKER - 1;
    size_t markers = 0;
    for (const char *p = in; (size_t)(p - in) + mlen <= n;) {
        const char *hit = memchr(p, CV_PTX_MARKER[0], n - (size_t)(p - in));
        if (!hit || (size_t)(hit - in) + mlen > n)
            break;
        if (memcmp(hit, CV_PTX_MARKER, mlen) == 0) {
            markers++;
            p = hit + mlen;
        } else {
            p = hit + 1;
        }
    }
    if (markers == 0)
        return CV_PTX_NO_MARKERS;
    char *buf = malloc(n + 2); /* at most one byte longer ("a"), plus the NUL */
    if (!buf)
        return CV_PTX_NO_MEMORY;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        if (in + i == target && !already) {
            memcpy(buf + o, "sm_90a", 6);
            o += 6;
            i += 5;
            continue;
        }
        if (i + mlen <= n && memcmp(in + i, CV_PTX_MARKER, mlen) == 0) {
            i += mlen;
            continue;
        }
        buf[o++] = in[i++];
    }
    buf[o] = '\0';
    *out = buf;
    *out_n = o;
    return CV_PTX_PATCHED;
}

/* Where a kernel's parameter list ends (just past its `)`; past the name when
 * it has none) for the `.entry` directive that begins a line at or after
 * in + i (after blanks and an optional `.visible`), or NULL when no line
 * from there on is one. */
static const char *next_entry(const char *in, size_t n, size_t *i)
{
    static const char vis[] = ".visible", ent[] = ".entry";
    for (; *i < n; (*i)++) {
        if (*i > 0 && in[*i - 1] != '\n')
            continue;
        size_t j = directive_at(in, n, *i, vis, sizeof vis - 1);
        j = directive_at(in, n, j ? j : *i, ent, sizeof ent - 1);
        if (j == 0 || j >= n)
            continue;
        j = skip_blanks(in, n, j);
        while (j < n && (name_char(in[j]) || in[j] == '$' || in[j] == '.'))
            j++; /* the kernel's name */
        size_t k = j;
        while (k < n && (in[k] == ' ' || in[k] == '\t' || in[k] == '\n' || in[k] == '\r'))
            k++;
        if (k < n && in[k] == '(') {
            const char *close = memchr(in + k, ')', n - k);
            if (!close)
                return NULL; /* cut short: not PTX the driver wrote */
            j = (size_t)(close - in) + 1;
        }
        *i = j;
        return in + j;
    }
    return NULL;
}

cv_ptx_patch_result cv_ptx_cap_registers(const char *in, size_t n, int nreg, char **out,
                                         size_t *out_n)
{
    *out = NULL;
    *out_n = 0;
    if (nreg < 16 || nreg > 255)
        return CV_PTX_BAD_NREG;
    const char *nul = memchr(in, '\0', n);
    if (nul)
        n = (size_t)(nul - in);
    static const char maxn[] = ".maxnreg";
    for (size_t i = 0; i + sizeof maxn - 1 <= n; i++)
        if (memcmp(in + i, maxn, sizeof maxn - 1) == 0)
            return CV_PTX_HAS_MAXNREG;
    size_t entries = 0;
    for (size_t i = 0; next_entry(in, n, &i); entries++)
        ;
    if (entries == 0)
        return CV_PTX_NO_ENTRY;
    char dir[24];
    const int dn = snprintf(dir, sizeof dir, "\n.maxnreg %d", nreg);
    char *buf = malloc(n + entries * (size_t)dn + 1);
    if (!buf)
        return CV_PTX_NO_MEMORY;
    size_t o = 0, from = 0;
    for (size_t i = 0; next_entry(in, n, &i);) {
        memcpy(buf + o, in + from, i - from);
        o += i - from;
        memcpy(buf + o, dir, (size_t)dn);
        o += (size_t)dn;
        from = i;
    }
    memcpy(buf + o, in + from, n - from);
    o += n - from;
    buf[o] = '\0';
    *out = buf;
    *out_n = o;
    return CV_PTX_PATCHED;
}

const char *cv_ptx_patch_message(cv_ptx_patch_result r)
{
    switch (r) {
    case CV_PTX_PATCHED:
        return "patched";
    case CV_PTX_NO_TARGET:
        return "the program binary is not PTX for sm_90 (no `.target sm_90` directive)";
    case CV_PTX_NO_MARKERS:
        return "the PTX holds no `" CV_PTX_MARKER "` marker";
    case CV_PTX_NO_MEMORY:
        return "out of memory";
    case CV_PTX_NO_ENTRY:
        return "the PTX holds no kernel (`.entry`)";
    case CV_PTX_HAS_MAXNREG:
        return "the PTX has a `.maxnreg` directive already";
    case CV_PTX_BAD_NREG:
        return "the register cap is outside 16 .. 255";
    }
    return "unknown";
}
