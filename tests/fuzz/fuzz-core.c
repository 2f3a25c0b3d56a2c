/* The fuzz target's core: the byte stream, buffers under watch, the checks
 * every call goes through, and LLVMFuzzerTestOneInput (tests/fuzz/fuzz.h). */
#include "fuzz.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SANITIZE_ADDRESS__)
#define FZ_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FZ_ASAN 1
#endif
#endif
#ifndef FZ_ASAN
#define FZ_ASAN 0
#endif
#ifdef FZ_HAVE_VALGRIND_H
#include <valgrind/valgrind.h>
#define FZ_ON_VALGRIND() RUNNING_ON_VALGRIND
#else
#define FZ_ON_VALGRIND() 0
#endif

/* Bytes on each side of a buffer when neither ASan nor valgrind watches the heap
 * (they catch an access one byte past an exact allocation; the bands catch writes). */
#define FZ_GUARD 64
#define FZ_GUARD_BYTE 0xE7
#define FZ_OUT_BYTE 0xA5

int fz_soft_failures;
static int soft_failed;

/* ------------------------------------------------------------ the byte stream */

uint8_t fz_u8(fz_reader *r)
{
    return r->pos < r->size ? r->data[r->pos++] : 0;
}

uint32_t fz_u32(fz_reader *r)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)fz_u8(r) << (8 * i);
    return v;
}

uint64_t fz_u64(fz_reader *r)
{
    uint64_t lo = fz_u32(r);
    return lo | (uint64_t)fz_u32(r) << 32;
}

int fz_one_in(fz_reader *r, unsigned n)
{
    return n <= 1 || fz_u8(r) % n == 0;
}

static const int64_t hostile[] = {
    -1, -2, INT32_MIN, INT32_MAX, INT32_MAX - 1, (int64_t)INT32_MAX + 1, (int64_t)UINT32_MAX,
    INT64_MAX, INT64_MIN, INT64_MAX / 2, INT64_MAX / 4 + 1, INT64_MAX / 8 + 1,
    (int64_t)1 << 31, (int64_t)1 << 32, (int64_t)1 << 40, (int64_t)1 << 48, (int64_t)1 << 56,
    (int64_t)1 << 60, (int64_t)1 << 62, -((int64_t)1 << 62), (int64_t)1 << 20, 1 << 24,
    (1 << 24) + 1, 65536, 4097, 257, -((int64_t)1 << 32), INT64_MIN + 1,
};
#define N_HOSTILE ((int)(sizeof hostile / sizeof hostile[0]))

int64_t fz_count(fz_reader *r, int64_t small_max)
{
    uint8_t b = fz_u8(r);
    if (b < 232)
        return small_max > 0 ? (int64_t)(b % (uint64_t)(small_max + 1)) : 0;
    if (b == 255)
        return small_max + 1;
    return hostile[(b - 232) % N_HOSTILE];
}

int32_t fz_count32(fz_reader *r, int32_t small_max)
{
    return (int32_t)(uint32_t)(uint64_t)fz_count(r, small_max);
}

int64_t fz_stride(fz_reader *r, int64_t row)
{
    uint8_t b = fz_u8(r);
    if (b < 150)
        return 0;
    if (b < 230)
        return row > INT64_MAX - 5 ? row : row + (b % 5);
    if (b < 240)
        return row > 0 ? row - 1 - (b % 2) : -1;
    return hostile[(b - 240) % N_HOSTILE];
}

clvarlen_dtype fz_dtype(fz_reader *r, const clvarlen_dtype *valid, int n_valid)
{
    uint8_t b = fz_u8(r);
    if (b < 200)
        return valid[b % n_valid];
    if (b < 240)
        return (clvarlen_dtype)(b % 7);
    static const int bad[] = {-1, 7, 8, 100, INT32_MIN, INT32_MAX};
    return (clvarlen_dtype)bad[b % 6];
}

float fz_float(fz_reader *r, float usual)
{
    uint8_t b = fz_u8(r);
    if (b < 200)
        return usual;
    static const float odd[] = {0.0f, -1.0f, 0.5f, 2.0f, 1e-30f, 1e30f, -0.0f, 50.0f};
    if (b < 248)
        return odd[b % 8];
    switch (b % 4) {
    case 0: return NAN;
    case 1: return INFINITY;
    case 2: return -INFINITY;
    default: return 3.4e38f;
    }
}

/* ------------------------------------------------------------ failures */

/* CLVARLEN_FUZZ_IGNORE: comma-separated substrings of failure messages to let pass
 * (while fuzzing past an open bug; never in CI). */
static int ignored(const char *msg)
{
    const char *list = getenv("CLVARLEN_FUZZ_IGNORE");
    while (list && *list) {
        const char *end = strchr(list, ',');
        size_t len = end ? (size_t)(end - list) : strlen(list);
        char pat[256];
        if (len > 0 && len < sizeof pat) {
            memcpy(pat, list, len);
            pat[len] = '\0';
            if (strstr(msg, pat))
                return 1;
        }
        list = end ? end + 1 : NULL;
    }
    return 0;
}

void fz_fail(fz_call *c, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (ignored(msg))
        return;
    fprintf(stderr, "clvarlen fuzz: %s: %s\n", c->op, msg);
    if (fz_soft_failures) {
        soft_failed = 1;
        return;
    }
    abort();
}

void fz_must_fail(fz_call *c, int cond, const char *why)
{
    if (cond && !c->must_fail) {
        c->must_fail = 1;
        c->must_fail_why = why;
    }
}

void fz_bad_size(fz_call *c, int cond, const char *why)
{
    fz_must_fail(c, cond, why);
    c->bad_size |= cond;
}

/* ------------------------------------------------------------ buffers */

static int use_guards(void)
{
    static int v = -1;
    if (v < 0)
        v = !FZ_ASAN && !FZ_ON_VALGRIND();
    return v;
}

fz_i128 fz_extent(fz_i128 rows, int64_t row, int64_t stride, size_t elem_size)
{
    if (rows <= 0 || row <= 0)
        return 0;
    fz_i128 st = stride == 0 ? row : stride;
    if (st < row)
        st = row;
    /* Saturate far above INT64_MAX, so that the product cannot overflow 128 bits. */
    const fz_i128 limit = (fz_i128)1 << 100;
    if (rows - 1 > limit / st)
        return limit;
    return ((rows - 1) * st + row) * (fz_i128)elem_size;
}

int fz_pass_null(fz_call *c, unsigned null_one_in)
{
    return null_one_in > 0 && fz_one_in(c->r, null_one_in) && fz_one_in(c->r, 2);
}

void *fz_buffer(fz_call *c, const char *name, fz_role role, fz_i128 extent,
                unsigned null_one_in)
{
    if (fz_pass_null(c, null_one_in))
        return NULL;
    return fz_alloc(c, name, role, extent);
}

void *fz_alloc(fz_call *c, const char *name, fz_role role, fz_i128 extent)
{
    fz_reader *r = c->r;
    if (extent < 0)
        extent = 0;
    fz_bad_size(c, extent > INT64_MAX, "a buffer beyond INT64_MAX bytes");
    if (extent > FZ_CAP_BYTES) {
        /* A valid declaration may be read (and an output may be written, unless the call
         * must fail): too large for the harness, the call is skipped. */
        if (extent <= INT64_MAX && !c->bad_size && !(role == FZ_OUT && c->must_fail))
            c->skip = 1;
        extent = fz_u8(r) % 64; /* the call must not touch it */
    }
    if (c->skip || c->n_bufs == FZ_MAX_BUFS)
        return NULL;
    fz_buf *b = &c->bufs[c->n_bufs++];
    memset(b, 0, sizeof *b);
    b->name = name;
    b->role = role;
    b->bytes = (size_t)extent;
    size_t guard = use_guards() ? FZ_GUARD : 0;
    b->base = malloc(b->bytes + 2 * guard + 1);
    b->before = malloc(b->bytes + 1);
    b->allowed = calloc(b->bytes + 1, 1);
    if (!b->base || !b->before || !b->allowed) {
        fprintf(stderr, "clvarlen fuzz: out of memory\n");
        abort();
    }
    /* Exact size for ASan/valgrind: one byte past the end is outside the block. */
    if (!guard) {
        free(b->base);
        b->base = malloc(b->bytes ? b->bytes : 1);
        if (!b->base)
            abort();
    }
    b->p = b->base + guard;
    memset(b->base, FZ_GUARD_BYTE, guard);
    memset(b->p + b->bytes, FZ_GUARD_BYTE, guard);
    if (role == FZ_OUT) {
        memset(b->p, FZ_OUT_BYTE, b->bytes);
    } else {
        /* Inputs: a cheap pattern keyed by the stream; ops overwrite what they shape. */
        uint32_t x = fz_u32(r) | 1u;
        for (size_t i = 0; i < b->bytes; i++) {
            x ^= x << 13, x ^= x >> 17, x ^= x << 5;
            b->p[i] = (unsigned char)(x >> 11);
        }
    }
    return b->p;
}

void *fz_rows(fz_call *c, const char *name, fz_role role, clvarlen_dtype dtype, int64_t row,
              fz_i128 rows, int64_t stride, unsigned null_one_in)
{
    if (fz_pass_null(c, null_one_in))
        return NULL;
    size_t es = clvarlen_dtype_size(dtype);
    fz_bad_size(c, es == 0, "unknown dtype");
    fz_bad_size(c, row < 0, "negative row size");
    fz_bad_size(c, rows < 0, "negative row count");
    fz_bad_size(c, stride != 0 && stride < row, "stride smaller than the row");
    fz_i128 extent = fz_extent(rows, row, stride, es);
    fz_bad_size(c, extent > INT64_MAX, "a tensor beyond INT64_MAX bytes");
    if (extent > INT64_MAX && getenv("FZ_DEBUG"))
        fprintf(stderr, "%s: %s [%lld rows of %lld, stride %lld] beyond INT64_MAX bytes\n", c->op,
                name, (long long)rows, (long long)row, (long long)stride);
    return fz_alloc(c, name, role, extent);
}

void fz_allow_tensor(fz_call *c, const void *p, int64_t first, int64_t rows,
                     clvarlen_dtype dtype, int64_t row, int64_t stride)
{
    fz_buf *b = fz_find(c, p);
    int64_t es = (int64_t)clvarlen_dtype_size(dtype);
    if (!b || row <= 0 || es == 0 || first < 0 || rows <= 0)
        return;
    fz_i128 pitch = (fz_i128)(stride > row ? stride : row) * es;
    for (int64_t i = first; i - first < rows; i++) {
        fz_i128 off = pitch * i;
        if (off >= (fz_i128)b->bytes)
            break;
        fz_allow(c, p, off, (fz_i128)row * es);
    }
}

void fz_required(fz_call *c, const void *p, int has_data, const char *why)
{
    fz_must_fail(c, !p && has_data, why);
}

int64_t fz_n(fz_call *c, const void *p, size_t es, fz_i128 n)
{
    fz_buf *b = fz_find(c, p);
    if (!b || n <= 0 || es == 0)
        return 0;
    fz_i128 have = b->bytes / es;
    return (int64_t)(n < have ? n : have);
}

fz_buf *fz_find(fz_call *c, const void *p)
{
    if (!p)
        return NULL;
    for (int i = 0; i < c->n_bufs; i++)
        if (c->bufs[i].p == p)
            return &c->bufs[i];
    return NULL;
}

void fz_allow(fz_call *c, const void *p, fz_i128 off, fz_i128 len)
{
    fz_buf *b = fz_find(c, p);
    if (!b || len <= 0 || off >= (fz_i128)b->bytes)
        return;
    if (off < 0) {
        len += off;
        off = 0;
    }
    if (len > (fz_i128)b->bytes - off)
        len = (fz_i128)b->bytes - off;
    if (len > 0)
        memset(b->allowed + off, 1, (size_t)len);
}

void fz_allow_rows(fz_call *c, const void *p, int64_t first, int64_t rows, int64_t row_bytes,
                   int64_t pitch_bytes)
{
    fz_buf *b = fz_find(c, p);
    if (!b || rows <= 0 || row_bytes <= 0 || pitch_bytes <= 0 || first < 0)
        return;
    for (int64_t i = first; i - first < rows; i++) {
        if (i > (int64_t)b->bytes / pitch_bytes)
            break;
        fz_allow(c, p, i * pitch_bytes, row_bytes);
    }
}

static void free_bufs(fz_call *c)
{
    for (int i = 0; i < c->n_bufs; i++) {
        free(c->bufs[i].base);
        free(c->bufs[i].before);
        free(c->bufs[i].allowed);
    }
    c->n_bufs = 0;
}

/* ------------------------------------------------------------ shaped inputs */

int32_t fz_fill_cu(fz_reader *r, int32_t *cu, int64_t n, int64_t total)
{
    if (!cu || n < 0)
        return 0;
    uint8_t mode = fz_u8(r);
    int64_t acc = 0;
    cu[0] = 0;
    for (int64_t s = 1; s <= n; s++) {
        uint8_t b = fz_u8(r);
        acc += b < 64 ? 0 : b % 9;
        cu[s] = (int32_t)acc;
    }
    if (mode < 200 && total >= 0 && total <= INT32_MAX && n > 0 && acc != total) {
        /* Rescale to end at total: cu[s] = floor(cu[s] * total / acc) keeps it monotonic. */
        for (int64_t s = 1; s <= n; s++)
            cu[s] = acc ? (int32_t)((fz_i128)cu[s] * total / acc) : (s == n ? (int32_t)total : 0);
        cu[n] = (int32_t)total;
    } else if (mode >= 200 && n >= 0) {
        int64_t at = fz_u8(r) % (n + 1);
        switch (mode % 5) {
        case 0: cu[at] = -1; break;
        case 1: cu[at] = INT32_MAX; break;
        case 2: cu[at] += 1; break;
        case 3: cu[at] = at > 0 ? cu[at - 1] - 1 : 1; break;
        default: cu[at] = INT32_MIN; break;
        }
    }
    return cu[n];
}

void fz_fill_index32(fz_reader *r, int32_t *idx, int64_t n, int64_t lo, int64_t hi)
{
    if (!idx)
        return;
    for (int64_t i = 0; i < n; i++) {
        uint8_t b = fz_u8(r);
        if (b < 220 && hi > lo)
            idx[i] = (int32_t)(lo + (fz_i128)(b + fz_u8(r) * 256u) % ((fz_i128)hi - lo));
        else if (b < 240)
            idx[i] = -1;
        else if (b < 244 && i > 0)
            idx[i] = idx[i - 1];
        else if (b < 248)
            idx[i] = (int32_t)hi;
        else if (b < 252)
            idx[i] = INT32_MAX;
        else
            idx[i] = b % 2 ? -2 : INT32_MIN;
    }
}

static void put_float(void *p, clvarlen_dtype dt, size_t i, float x)
{
    uint32_t bits;
    memcpy(&bits, &x, 4);
    if (dt == CLVARLEN_DTYPE_F32) {
        ((float *)p)[i] = x;
    } else if (dt == CLVARLEN_DTYPE_BF16) {
        ((uint16_t *)p)[i] = (uint16_t)(bits >> 16);
    } else if (dt == CLVARLEN_DTYPE_F16) {
        /* Small normal values only: sign, 5-bit exponent around 15, 10-bit mantissa. */
        uint16_t h = (uint16_t)(((bits >> 16) & 0x8000u) | ((13u + (bits & 3u)) << 10) |
                                ((bits >> 13) & 0x3ffu));
        if (isnan(x))
            h = 0x7e00;
        else if (isinf(x))
            h = x > 0 ? 0x7c00 : 0xfc00;
        ((uint16_t *)p)[i] = h;
    } else if (dt == CLVARLEN_DTYPE_F64) {
        ((double *)p)[i] = x;
    }
}

void fz_fill_floats(fz_reader *r, void *p, clvarlen_dtype dtype, size_t n)
{
    if (!p)
        return;
    uint32_t x = fz_u32(r) | 1u;
    uint8_t special = fz_u8(r);
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        float v = ((float)(x >> 8) / 16777216.0f - 0.5f) * 2.0f;
        if (special >= 240 && i == (size_t)(special % 16))
            v = special % 3 == 0 ? NAN : special % 3 == 1 ? INFINITY : -INFINITY;
        put_float(p, dtype, i, v);
    }
}

/* ------------------------------------------------------------ the checks */

static void snapshot(fz_call *c)
{
    for (int i = 0; i < c->n_bufs; i++)
        memcpy(c->bufs[i].before, c->bufs[i].p, c->bufs[i].bytes);
}

static int guards_intact(const fz_buf *b)
{
    if (!use_guards())
        return 1;
    for (size_t i = 0; i < FZ_GUARD; i++)
        if (b->base[i] != FZ_GUARD_BYTE || b->p[b->bytes + i] != FZ_GUARD_BYTE)
            return 0;
    return 1;
}

static void check_buffers(fz_call *c, clvarlen_status st)
{
    for (int i = 0; i < c->n_bufs; i++) {
        const fz_buf *b = &c->bufs[i];
        if (!guards_intact(b))
            fz_fail(c, "%s: guard band around %s overwritten", clvarlen_status_name(st),
                    b->name);
        for (size_t j = 0; j < b->bytes; j++) {
            if (b->p[j] == b->before[j])
                continue;
            if (b->role == FZ_IN) {
                fz_fail(c, "%s: input %s modified at byte %zu of %zu", clvarlen_status_name(st),
                        b->name, j, b->bytes);
                break;
            }
            if (st != CLVARLEN_SUCCESS) {
                fz_fail(c, "%s: output %s written at byte %zu of %zu on error (%s)",
                        clvarlen_status_name(st), b->name, j, b->bytes, clvarlen_last_error(c->ctx));
                break;
            }
            if (!b->allowed[j]) {
                fz_fail(c, "output %s written outside its rows at byte %zu of %zu", b->name, j,
                        b->bytes);
                break;
            }
        }
    }
}

static void check_status(fz_call *c, clvarlen_status st)
{
    if ((int)st < CLVARLEN_SUCCESS || (int)st > CLVARLEN_ERROR_INTERNAL) {
        fz_fail(c, "unknown status %d", (int)st);
        return;
    }
    const char *msg = clvarlen_last_error(c->ctx);
    if (!msg)
        fz_fail(c, "clvarlen_last_error returned NULL");
    else if (st != CLVARLEN_SUCCESS && msg[0] == '\0')
        fz_fail(c, "%s with an empty error message", clvarlen_status_name(st));
    else if (st == CLVARLEN_SUCCESS && msg[0] != '\0')
        fz_fail(c, "success but the error message is \"%s\"", msg);
    if (st == CLVARLEN_SUCCESS && c->must_fail)
        fz_fail(c, "succeeded although it must fail: %s", c->must_fail_why);
    if (st == CLVARLEN_ERROR_INTERNAL)
        fz_fail(c, "CLVARLEN_ERROR_INTERNAL: %s", msg ? msg : "");
}

/* ------------------------------------------------------------ the driver */

static clvarlen_context *fuzz_context(void)
{
    static clvarlen_context *ctx;
    if (ctx)
        return ctx;
    clvarlen_options *opt = NULL;
    const char *threads = getenv("CLVARLEN_FUZZ_THREADS");
    if (clvarlen_options_create(&opt) != CLVARLEN_SUCCESS ||
        clvarlen_options_set_device(opt, "cpu") != CLVARLEN_SUCCESS ||
        clvarlen_options_set_threads(opt, threads ? atoi(threads) : 2) != CLVARLEN_SUCCESS ||
        clvarlen_context_create(opt, &ctx) != CLVARLEN_SUCCESS) {
        fprintf(stderr, "clvarlen fuzz: no CPU context: %s\n", clvarlen_last_error(NULL));
        abort();
    }
    clvarlen_options_destroy(opt);
    return ctx;
}

static const struct {
    const fz_op *ops;
    const int *n;
} op_tables[] = {
    {fz_segment_ops, &fz_n_segment_ops},
    {fz_cp_ops, &fz_n_cp_ops},
    {fz_compute_ops, &fz_n_compute_ops},
    {fz_gdn_ops, &fz_n_gdn_ops},
    {fz_paged_ops, &fz_n_paged_ops},
    {fz_bwd_ops, &fz_n_bwd_ops}, /* last: earlier inputs keep their op */
};

int fz_op_count(void)
{
    int n = 0;
    for (size_t t = 0; t < sizeof op_tables / sizeof op_tables[0]; t++)
        n += *op_tables[t].n;
    return n;
}

static const fz_op *op_at(int i)
{
    for (size_t t = 0; t < sizeof op_tables / sizeof op_tables[0]; t++) {
        if (i < *op_tables[t].n)
            return &op_tables[t].ops[i];
        i -= *op_tables[t].n;
    }
    return &fz_segment_ops[0];
}

const char *fz_op_name(int op)
{
    return op_at(op)->name;
}

void fz_run(const uint8_t *data, size_t size, fz_result *res)
{
    fz_reader r = {data, size, 0};
    int op = size ? data[0] % fz_op_count() : 0;
    r.pos = size ? 1 : 0;
    fz_call c;
    memset(&c, 0, sizeof c);
    c.op = op_at(op)->name;
    c.r = &r;
    c.ctx = fz_u8(&r) == 0xFF ? NULL : fuzz_context();
    soft_failed = 0;
    clvarlen_status st = op_at(op)->fn(&c);
    if (st != FZ_NOT_CALLED && !c.skip)
        check_buffers(&c, st);
    free_bufs(&c);
    res->op = op;
    res->op_name = c.op;
    res->status = c.skip ? FZ_NOT_CALLED : st;
    res->failed = soft_failed;
}

void fz_before_call(fz_call *c, int takes_ctx)
{
    if (takes_ctx)
        fz_must_fail(c, !c->ctx, "NULL context");
    snapshot(c);
}

void fz_after_call(fz_call *c, clvarlen_status st)
{
    check_status(c, st);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_result res;
    fz_run(data, size, &res);
    return 0;
}
