/* clvarlen-test: output: JSON and text helpers, benchmark result lines.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <clvarlen/clvarlen.h>
#if CLVARLEN_HAVE_OPENCL
#  include <clvarlen/clvarlen-cl.h>
#endif

#include "ct-harness.h"

/* ================================================================ JSON and text helpers */

void ct_json_str(const char *s)
{
    putchar('"');
    for (const unsigned char *c = (const unsigned char *)(s ? s : ""); *c; c++) {
        switch (*c) {
        case '"': fputs("\\\"", stdout); break;
        case '\\': fputs("\\\\", stdout); break;
        case '\n': fputs("\\n", stdout); break;
        case '\r': fputs("\\r", stdout); break;
        case '\t': fputs("\\t", stdout); break;
        default:
            if (*c < 0x20)
                printf("\\u%04x", *c);
            else
                putchar(*c);
        }
    }
    putchar('"');
}

/* JSON has no infinities: non-finite numbers become null. */
void ct_json_num(double x)
{
    if (isfinite(x) && x == floor(x) && fabs(x) < 1e15)
        printf("%.0f", x); /* byte counts stay exact */
    else if (isfinite(x))
        printf("%.6g", x);
    else
        fputs("null", stdout);
}

void ct_fmt_bytes(char *buf, size_t n, double bytes)
{
    const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024.0 && u < 4) {
        bytes /= 1024.0;
        u++;
    }
    snprintf(buf, n, u ? "%.1f %s" : "%.0f %s", bytes, unit[u]);
}

int ct_ci_equal(const char *a, const char *b)
{
    for (; *a && *b; a++, b++)
        if (tolower((unsigned char)*a) != tolower((unsigned char)*b))
            return 0;
    return *a == *b;
}

void ct_print_header_json(const char *command)
{
    fputs("{\"tool\": \"clvarlen-test\", \"version\": ", stdout);
    ct_json_str(CLVARLEN_VERSION_STRING);
    fputs(", \"library\": ", stdout);
    ct_json_str(clvarlen_version_string());
    fputs(", \"command\": ", stdout);
    ct_json_str(command);
}

/* ================================================================ benchmark output */

static int bench_json_count; /* results printed in the current JSON array */

void ct_bench_json_begin(void)
{
    bench_json_count = 0;
}

static void bench_json_sep(void)
{
    if (bench_json_count++)
        putchar(',');
    fputs("\n      ", stdout);
}

void ct_bench_report(const ct_options *opt, const char *op, const char *shape, double seconds,
                     double bytes, double flops, double ceiling_ratio, const char *ceiling_name)
{
    double gbps = seconds > 0.0 && bytes > 0.0 ? bytes / seconds * 1e-9 : 0.0;
    double gflops = seconds > 0.0 && flops > 0.0 ? flops / seconds * 1e-9 : 0.0;
    if (opt->json) {
        if (opt->json == 1)
            bench_json_sep();
        fputs("{\"op\": ", stdout);
        ct_json_str(op);
        fputs(", \"shape\": ", stdout);
        ct_json_str(shape);
        fputs(", \"us\": ", stdout);
        ct_json_num(seconds * 1e6);
        fputs(", \"bytes\": ", stdout);
        ct_json_num(bytes);
        fputs(", \"gbps\": ", stdout);
        ct_json_num(gbps);
        if (flops > 0.0) {
            fputs(", \"gflops\": ", stdout);
            ct_json_num(gflops);
        }
        if (ceiling_ratio > 0.0) {
            fputs(", \"ratio\": ", stdout);
            ct_json_num(ceiling_ratio);
            fputs(", \"ceiling\": ", stdout);
            ct_json_str(ceiling_name ? ceiling_name : "ceiling");
        }
        putchar('}');
        if (opt->json == 2)
            putchar('\n');
    } else {
        printf("%-22s %-46s %12.1f us", op, shape, seconds * 1e6);
        if (bytes > 0.0)
            printf(" %10.2f GB/s", gbps);
        if (flops > 0.0)
            printf(" %10.1f GFLOP/s", gflops);
        if (ceiling_ratio > 0.0)
            printf("  %5.2f x %s", ceiling_ratio, ceiling_name ? ceiling_name : "ceiling");
        putchar('\n');
    }
    fflush(stdout);
}

void ct_bench_note(const ct_options *opt, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (opt->json) {
        if (opt->json == 1)
            bench_json_sep();
        fputs("{\"note\": ", stdout);
        ct_json_str(msg);
        fputs(opt->json == 2 ? "}\n" : "}", stdout);
    } else {
        printf("# %s\n", msg);
    }
    fflush(stdout);
}
