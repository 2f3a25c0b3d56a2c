/* The Check-free test kit (kit.h). Independent of the library's internals:
 * the f16/bf16 conversions here are written from the IEEE formats, so a bug
 * in lib/ cannot hide itself in the comparison. This is the only f16/bf16
 * conversion of the tests.
 */
#include "kit.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ftw.h>
#include <sys/stat.h>
#include <sys/types.h>

/* ------------------------------------------------------------ random numbers */

static uint64_t splitmix(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

tu_rng tu_rng_make(uint64_t seed)
{
    /* xorshift must not start at 0; SplitMix spreads nearby seeds apart. */
    uint64_t x = seed;
    tu_rng r;
    r.s = splitmix(&x);
    if (r.s == 0)
        r.s = 0x2545F4914F6CDD1Dull;
    return r;
}

uint64_t tu_next(tu_rng *r)
{
    /* xorshift64* */
    uint64_t x = r->s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    r->s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

int64_t tu_int(tu_rng *r, int64_t lo, int64_t hi)
{
    if (hi <= lo)
        return lo;
    uint64_t span = (uint64_t)hi - (uint64_t)lo + 1u;
    if (span == 0) /* the whole 64-bit range */
        return (int64_t)tu_next(r);
    /* The modulo bias is below span / 2^64: irrelevant for tests. */
    return (int64_t)((uint64_t)lo + tu_next(r) % span);
}

double tu_uniform(tu_rng *r, double lo, double hi)
{
    double u = (double)(tu_next(r) >> 11) * 0x1.0p-53;
    return lo + (hi - lo) * u;
}

double tu_normal(tu_rng *r)
{
    /* Box-Muller; 1 - u keeps the logarithm finite. */
    double u1 = 1.0 - tu_uniform(r, 0.0, 1.0);
    double u2 = tu_uniform(r, 0.0, 1.0);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

/* ------------------------------------------------------------ f16 / bf16 from the formats */

/* A binary format with `mant` stored mantissa bits and `ebits` exponent bits. */
static uint16_t small_float_encode(double x, int mant, int ebits)
{
    const int bias = (1 << (ebits - 1)) - 1;
    const int emin = 1 - bias;
    const uint32_t exp_all = (1u << ebits) - 1u;
    const uint16_t sign = signbit(x) ? (uint16_t)(1u << (mant + ebits)) : 0;
    if (isnan(x))
        return (uint16_t)(sign | (exp_all << mant) | (1u << (mant - 1)));
    double a = fabs(x);
    if (isinf(a))
        return (uint16_t)(sign | (exp_all << mant));
    if (a == 0.0)
        return sign;
    int e2;
    (void)frexp(a, &e2); /* a = m * 2^e2, m in [0.5, 1): the exponent is e2 - 1 */
    int e = e2 - 1;
    if (e < emin)
        e = emin;
    /* Round to a multiple of the quantum at this binade, ties to even (the default mode). */
    double quantum = ldexp(1.0, e - mant);
    double r = nearbyint(a / quantum) * quantum;
    double max_finite = ldexp(2.0 - ldexp(1.0, -mant), bias);
    if (r > max_finite)
        return (uint16_t)(sign | (exp_all << mant));
    if (r == 0.0) /* underflow to a signed zero */
        return sign;
    (void)frexp(r, &e2);
    e = e2 - 1;
    if (e < emin) /* subnormal */
        return (uint16_t)(sign | (uint32_t)(r / ldexp(1.0, emin - mant)));
    uint32_t m = (uint32_t)(r / ldexp(1.0, e - mant)) - (1u << mant);
    return (uint16_t)(sign | ((uint32_t)(e + bias) << mant) | m);
}

static double small_float_decode(uint16_t bits, int mant, int ebits)
{
    const int bias = (1 << (ebits - 1)) - 1;
    const uint32_t exp_all = (1u << ebits) - 1u;
    uint32_t e = (bits >> mant) & exp_all;
    uint32_t m = bits & ((1u << mant) - 1u);
    double s = (bits >> (mant + ebits)) & 1u ? -1.0 : 1.0;
    if (e == exp_all)
        return m ? NAN : s * INFINITY;
    if (e == 0)
        return s * ldexp((double)m, 1 - bias - mant);
    return s * ldexp((double)(m | (1u << mant)), (int)e - bias - mant);
}

/* ------------------------------------------------------------ element access */

double tu_get(const void *p, clvarlen_dtype dtype, size_t i)
{
    switch (dtype) {
    case CLVARLEN_DTYPE_F32: return ((const float *)p)[i];
    case CLVARLEN_DTYPE_F16: return small_float_decode(((const uint16_t *)p)[i], 10, 5);
    case CLVARLEN_DTYPE_BF16: return small_float_decode(((const uint16_t *)p)[i], 7, 8);
    case CLVARLEN_DTYPE_F64: return ((const double *)p)[i];
    case CLVARLEN_DTYPE_I32: return ((const int32_t *)p)[i];
    case CLVARLEN_DTYPE_I64: return (double)((const int64_t *)p)[i];
    case CLVARLEN_DTYPE_U8: return ((const uint8_t *)p)[i];
    }
    return NAN;
}

void tu_set(void *p, clvarlen_dtype dtype, size_t i, double x)
{
    switch (dtype) {
    case CLVARLEN_DTYPE_F32: ((float *)p)[i] = (float)x; break; /* C rounds to nearest even */
    case CLVARLEN_DTYPE_F16: ((uint16_t *)p)[i] = small_float_encode(x, 10, 5); break;
    case CLVARLEN_DTYPE_BF16: ((uint16_t *)p)[i] = small_float_encode(x, 7, 8); break;
    case CLVARLEN_DTYPE_F64: ((double *)p)[i] = x; break;
    case CLVARLEN_DTYPE_I32: ((int32_t *)p)[i] = (int32_t)nearbyint(x); break;
    case CLVARLEN_DTYPE_I64: ((int64_t *)p)[i] = (int64_t)nearbyint(x); break;
    case CLVARLEN_DTYPE_U8: ((uint8_t *)p)[i] = (uint8_t)((int64_t)nearbyint(x) & 0xff); break;
    }
}

void tu_fill_random(tu_rng *r, void *p, clvarlen_dtype dtype, size_t n, double scale)
{
    for (size_t i = 0; i < n; i++) {
        if (dtype == CLVARLEN_DTYPE_U8) {
            /* Opaque bytes: every bit pattern, so copies are checked bitwise. */
            ((uint8_t *)p)[i] = (uint8_t)(tu_next(r) >> 56);
            continue;
        }
        tu_set(p, dtype, i, tu_normal(r) * scale);
    }
}

/* ------------------------------------------------------------ varlen batches */

int64_t tu_random_lengths(tu_rng *r, int64_t max_n, int64_t max_len, int64_t max_total,
                          int32_t *lengths)
{
    if (max_n <= 0)
        return 0;
    if (max_len < 0)
        max_len = 0;
    int64_t n = tu_int(r, max_n > 1 ? (max_n + 1) / 2 : 1, max_n);
    int64_t budget = max_total > 0 ? max_total : 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t kind = tu_int(r, 0, 99), len;
        if (kind < 15)
            len = 0;                            /* empty sequences are legal everywhere */
        else if (kind < 30)
            len = max_len >= 1 ? 1 : 0;         /* decode-like */
        else if (kind < 38)
            len = max_len;                      /* a long one */
        else if (kind < 60)
            len = tu_int(r, 0, max_len / 2) * 2 + 1; /* odd: never a tile multiple */
        else
            len = tu_int(r, 0, max_len);
        if (len > max_len)
            len = max_len;
        if (len > budget)
            len = budget;
        budget -= len;
        lengths[i] = (int32_t)len;
    }
    return n;
}

void tu_cu_from_lengths(const int32_t *lengths, int64_t n, int32_t *cu)
{
    int64_t acc = 0;
    cu[0] = 0;
    for (int64_t i = 0; i < n; i++) {
        acc += lengths[i];
        cu[i + 1] = (int32_t)acc;
    }
}

/* ------------------------------------------------------------ guard bands */

static unsigned char guard_byte(size_t i, int tail)
{
    return (unsigned char)(0xA5u ^ (i * 37u) ^ (tail ? 0x5Au : 0u));
}

void tu_guard_write_lead(unsigned char *base, size_t lead, size_t bytes)
{
    for (size_t i = 0; i < lead; i++)
        base[i] = guard_byte(i, 0);
    for (size_t i = 0; i < TU_GUARD_BYTES; i++)
        base[lead + bytes + i] = guard_byte(i, 1);
}

int tu_guard_intact_lead(const unsigned char *base, size_t lead, size_t bytes)
{
    for (size_t i = 0; i < lead; i++)
        if (base[i] != guard_byte(i, 0))
            return 0;
    for (size_t i = 0; i < TU_GUARD_BYTES; i++)
        if (base[lead + bytes + i] != guard_byte(i, 1))
            return 0;
    return 1;
}

void tu_guard_write(unsigned char *base, size_t bytes)
{
    tu_guard_write_lead(base, TU_GUARD_BYTES, bytes);
}

int tu_guard_intact(const unsigned char *base, size_t bytes)
{
    return tu_guard_intact_lead(base, TU_GUARD_BYTES, bytes);
}

int tu_guarded_init(tu_guarded *g, size_t bytes, unsigned char fill)
{
    g->bytes = bytes;
    g->base = malloc(bytes + 2 * TU_GUARD_BYTES);
    g->p = NULL;
    if (!g->base)
        return -1;
    tu_guard_write(g->base, bytes);
    g->p = g->base + TU_GUARD_BYTES;
    memset(g->p, fill, bytes);
    return 0;
}

int tu_guard_ok(const tu_guarded *g)
{
    return tu_guard_intact(g->base, g->bytes);
}

void tu_guarded_free(tu_guarded *g)
{
    free(g->base);
    g->base = NULL;
    g->p = NULL;
    g->bytes = 0;
}

/* ------------------------------------------------------------ comparison */

tu_err tu_compare(const void *out, clvarlen_dtype dtype, const double *ref, size_t n)
{
    tu_err e = {0.0, 0.0, 0, 0};
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        double o = tu_get(out, dtype, i), r = ref[i];
        if (isnan(o)) {
            e.nonfinite++;
            continue;
        }
        if (isinf(r) || isinf(o)) {
            if (!(isinf(r) && isinf(o) && (r > 0) == (o > 0))) {
                e.mismatched_inf++;
                if (!isinf(r) && !isnan(r))
                    e.nonfinite++;
            }
            continue;
        }
        if (isnan(r))
            continue;
        double d = o - r;
        num += d * d;
        den += r * r;
        if (fabs(d) > e.max_abs)
            e.max_abs = fabs(d);
    }
    e.rel_l2 = den > 0.0 ? sqrt(num) / sqrt(den) : sqrt(num);
    return e;
}

double tu_tolerance(clvarlen_dtype dtype)
{
    switch (dtype) {
    case CLVARLEN_DTYPE_F32: return 1e-5;
    case CLVARLEN_DTYPE_F16: return 2e-3;
    case CLVARLEN_DTYPE_BF16: return 1e-2;
    case CLVARLEN_DTYPE_F64: return 1e-12;
    default: return 0.0; /* integers are exact */
    }
}

int tu_err_within(tu_err err, double tol)
{
    return err.nonfinite == 0 && err.mismatched_inf == 0 && err.rel_l2 <= tol;
}

/* The pair (x, y) for the two-array errors: 0 to accumulate, 1 to skip (equal
 * infinities), -1 to report +inf (a NaN anywhere, or an unmatched infinity). */
static int pair_kind(double x, double y)
{
    if (isnan(x) || isnan(y)) /* NaN never passes, not even against NaN */
        return -1;
    if (!isfinite(y))
        return x == y ? 1 : -1;
    return isfinite(x) ? 0 : -1;
}

double tu_rel_err_floor(const void *a, const void *b, clvarlen_dtype dtype, size_t n,
                        double floor_rms)
{
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        double x = tu_get(a, dtype, i), y = tu_get(b, dtype, i);
        int kind = pair_kind(x, y);
        if (kind < 0)
            return INFINITY;
        if (kind > 0)
            continue;
        num += (x - y) * (x - y);
        den += y * y;
    }
    if (num == 0.0)
        return 0.0;
    const double fl = (double)n * floor_rms * floor_rms;
    if (den < fl)
        den = fl;
    return den > 0.0 ? sqrt(num / den) : sqrt(num);
}

double tu_rel_err(const void *a, const void *b, clvarlen_dtype dtype, size_t n)
{
    return tu_rel_err_floor(a, b, dtype, n, 0.0);
}

double tu_max_abs_err(const void *a, const void *b, clvarlen_dtype dtype, size_t n)
{
    double m = 0.0;
    for (size_t i = 0; i < n; i++) {
        double x = tu_get(a, dtype, i), y = tu_get(b, dtype, i);
        int kind = pair_kind(x, y);
        if (kind < 0)
            return INFINITY;
        if (kind == 0 && fabs(x - y) > m)
            m = fabs(x - y);
    }
    return m;
}

/* ------------------------------------------------------------ files and logs */

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

void tu_remove_tree(const char *path)
{
    if (path)
        nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

int tu_write_file(const char *path, const void *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    int ok = fwrite(data, 1, size, f) == size;
    ok = fclose(f) == 0 && ok;
    return ok ? 0 : -1;
}

char *tu_read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = (len + 4096 + 1) * 2;
            char *grown = realloc(buf, cap);
            if (!grown) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = grown;
        }
        size_t got = fread(buf + len, 1, 4096, f);
        len += got;
        if (got < 4096)
            break;
    }
    fclose(f);
    buf[len] = '\0';
    if (size)
        *size = len;
    return buf;
}

void tu_log_fn(clvarlen_log_level level, const char *message, void *user_data)
{
    (void)level;
    tu_log *log = user_data;
    size_t n = strlen(message);
    if (log->len + n + 2 > log->cap) {
        size_t cap = (log->len + n + 2) * 2;
        char *grown = realloc(log->text, cap);
        if (!grown)
            return;
        log->text = grown;
        log->cap = cap;
    }
    memcpy(log->text + log->len, message, n);
    log->len += n;
    log->text[log->len++] = '\n';
    log->text[log->len] = '\0';
    log->lines++;
}

int tu_log_count(const tu_log *log, const char *needle)
{
    int count = 0;
    if (!log->text || !*needle)
        return 0;
    for (const char *p = log->text; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        count++;
    return count;
}

void tu_log_clear(tu_log *log)
{
    log->len = 0;
    log->lines = 0;
    if (log->text)
        log->text[0] = '\0';
}

void tu_log_free(tu_log *log)
{
    free(log->text);
    memset(log, 0, sizeof *log);
}
