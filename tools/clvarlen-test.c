/* clvarlen-test: lists the devices the library sees, checks every implemented
 * op on a device against the CPU fallback, and benchmarks ops against the
 * device's own copy bandwidth.
 *
 * Exit codes: 0 all checks passed, 1 a check failed, 2 usage error, 3 device
 * or library error (a context that could not be created, an op that stopped
 * with an OpenCL or build error).
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <clvarlen/clvarlen.h>

#include "ct-harness.h"

/* ================================================================ command line */

static void print_help(void)
{
    printf(
        "Usage: clvarlen-test [COMMAND] [OPTIONS]\n"
        "\n"
        "Checks clvarlen's ops on an OpenCL device against the built-in CPU fallback,\n"
        "lists devices, and benchmarks ops against the device's copy bandwidth.\n"
        "\n"
        "Commands:\n"
        "  list               every OpenCL device, the CPU fallback and the default device\n"
        "  check              compare every implemented op with the CPU fallback (default)\n"
        "  bench              copy bandwidth, then GB/s of every benchmark\n"
        "  precompile         build every kernel for f32, f16, bf16 and head dims 64, 128\n"
        "                     ahead of time (the program cache keeps them); --op\n"
        "                     narrows it to families or ops, --heads sets the heads\n"
        "\n"
        "Options:\n"
        "  --device D         cpu, opencl, all, an index from 'list', or a substring of the\n"
        "                     platform, vendor or device name (default: CLVARLEN_DEVICE,\n"
        "                     else discrete GPU, integrated GPU, accelerator, CPU\n"
        "                     fallback; 'opencl': the best OpenCL device, OpenCL CPU\n"
        "                     devices such as PoCL included)\n"
        "  --op NAME          only ops whose name starts with NAME, or of family NAME\n"
        "                     (=NAME: only the op named NAME)\n"
        "                     (segment, attention, gated-delta; short: seg, attn, gdn)\n"
        "  --heads Q:KV       precompile: query and key/value heads (default 32:8)\n"
        "  --list-ops         the ops, their families and commands\n"
        "  --json             one JSON document on stdout\n"
        "  --jsonl            JSON lines on stdout, one per result as it arrives\n"
        "  --quick            check: fewer, smaller cases; bench: fewer timed runs\n"
        "  --case TEXT        bench: only cases whose name contains TEXT (several:\n"
        "                     TEXT,TEXT; =NAME: exactly NAME);\n"
        "                     check: only random case number TEXT of each op\n"
        "  --progress         progress lines on stderr (ops, kernel compiles); the\n"
        "                     default when stderr is a terminal\n"
        "  --seed S           random seed of the check data (default %u)\n"
        "  --min-mb M         bench: megabytes moved per measurement (default %.0f)\n"
        "  -h, --help         this text\n"
        "  -V, --version      the tool's and the library's version\n"
        "\n"
        "Exit status: 0 all passed, 1 a check failed, 2 usage error,\n"
        "3 device or library error.\n"
        "Environment: CLVARLEN_DEVICE, CLVARLEN_KERNEL_PATH, CLVARLEN_CACHE_DIR, CLVARLEN_LOG.\n"
        "See clvarlen-test(1).\n",
        CT_DEFAULT_SEED, DEFAULT_MIN_MB);
}

static int usage_error(const char *fmt, ...) CT_PRINTF(1, 2);

static int usage_error(const char *fmt, ...)
{
    va_list ap;
    fputs("clvarlen-test: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs("\nTry 'clvarlen-test --help'.\n", stderr);
    return EXIT_USAGE;
}

/* check --case N: one random case of each op. 0, or -1 when not a case number. */
static int parse_check_case(ct_options *opt)
{
    char *end;
    errno = 0;
    long n = strtol(opt->cases, &end, 10);
    if (errno || *end || n < 0 || n > 1000000)
        return -1;
    opt->check_case = (int)n;
    return 0;
}

/* --seed S (decimal, or hex with 0x); 0 or -1 (malformed). */
static int parse_seed(const char *value, uint64_t *seed)
{
    char *end;
    errno = 0;
    int hex = value[0] == '0' && (value[1] == 'x' || value[1] == 'X');
    unsigned long long s = strtoull(value, &end, hex ? 16 : 10);
    if (errno || *end || value[0] == '-')
        return -1;
    *seed = (uint64_t)s;
    return 0;
}

/* precompile --heads Q:KV; 0 or -1 (malformed). */
static int parse_heads(const char *value, ct_options *opt)
{
    char *end;
    errno = 0;
    if (!isdigit((unsigned char)value[0]))
        return -1;
    long q = strtol(value, &end, 10);
    if (errno || *end != ':' || !isdigit((unsigned char)end[1]))
        return -1;
    const char *k = end + 1;
    long kv = strtol(k, &end, 10);
    if (errno || *end || q < 1 || kv < 1 || q > 4096 || kv > q || q % kv)
        return -1;
    opt->heads_q = (int)q;
    opt->heads_kv = (int)kv;
    return 0;
}

int main(int argc, char **argv)
{
    ct_options opt;
    memset(&opt, 0, sizeof opt);
    opt.seed = CT_DEFAULT_SEED;
    opt.min_mbytes = DEFAULT_MIN_MB;
    opt.progress = isatty(STDERR_FILENO);
    opt.check_case = -1;
    const char *cmd = NULL;
    int seen_quick = 0, seen_seed = 0, seen_min_mb = 0, seen_device = 0, seen_op = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] != '-' || a[1] == '\0') {
            if (cmd)
                return usage_error("unexpected argument '%s'", a);
            if (strcmp(a, "list") && strcmp(a, "check") && strcmp(a, "bench") &&
                strcmp(a, "precompile"))
                return usage_error("unknown command '%s'", a);
            cmd = a;
            continue;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            print_help();
            return EXIT_PASS;
        }
        if (!strcmp(a, "--list-ops")) {
            ct_print_ops(stdout);
            return EXIT_PASS;
        }
        if (!strcmp(a, "-V") || !strcmp(a, "--version")) {
            printf("clvarlen-test %s (library %s)\n", CLVARLEN_VERSION_STRING,
                   clvarlen_version_string());
            return EXIT_PASS;
        }
        /* --name VALUE or --name=VALUE */
        char name[32];
        const char *eq = strchr(a, '=');
        size_t len = eq ? (size_t)(eq - a) : strlen(a);
        if (len >= sizeof name)
            return usage_error("unknown option '%s'", a);
        memcpy(name, a, len);
        name[len] = '\0';
        int takes_value = !strcmp(name, "--device") || !strcmp(name, "--op") ||
                          !strcmp(name, "--seed") || !strcmp(name, "--min-mb") ||
                          !strcmp(name, "--case") || !strcmp(name, "--heads");
        int is_flag = !strcmp(name, "--json") || !strcmp(name, "--quick") ||
                      !strcmp(name, "--progress") || !strcmp(name, "--jsonl");
        if (!takes_value && !is_flag)
            return usage_error("unknown option '%s'", a);
        if (is_flag && eq)
            return usage_error("option '%s' takes no value", name);
        const char *value = NULL;
        if (takes_value) {
            if (eq)
                value = eq + 1;
            else if (i + 1 < argc)
                value = argv[++i];
            else
                return usage_error("option '%s' needs a value", name);
            if (!*value)
                return usage_error("option '%s' needs a non-empty value", name);
        }
        if (!strcmp(name, "--json")) {
            opt.json = 1;
        } else if (!strcmp(name, "--jsonl")) {
            opt.json = 2;
        } else if (!strcmp(name, "--progress")) {
            opt.progress = 1;
        } else if (!strcmp(name, "--case")) {
            opt.cases = value;
        } else if (!strcmp(name, "--quick")) {
            opt.quick = 1;
            seen_quick = 1;
        } else if (!strcmp(name, "--device")) {
            opt.device = value;
            seen_device = 1;
        } else if (!strcmp(name, "--op")) {
            opt.op = value;
            seen_op = 1;
        } else if (!strcmp(name, "--heads")) {
            if (parse_heads(value, &opt) != 0)
                return usage_error("--heads: '%s' is not Q:KV with 1 <= KV <= Q <= 4096 and "
                                   "Q a multiple of KV", value);
        } else if (!strcmp(name, "--seed")) {
            if (parse_seed(value, &opt.seed) != 0)
                return usage_error("--seed: '%s' is not an unsigned integer", value);
            seen_seed = 1;
        } else { /* --min-mb */
            char *end;
            errno = 0;
            opt.min_mbytes = strtod(value, &end);
            if (errno || *end || !(opt.min_mbytes > 0.0) || opt.min_mbytes > 1e7)
                return usage_error("--min-mb: '%s' is not a positive number of megabytes",
                                   value);
            seen_min_mb = 1;
        }
    }
    if (!cmd)
        cmd = "check";
    if (opt.heads_q && strcmp(cmd, "precompile"))
        return usage_error("--heads applies to 'precompile' only");
    if (!strcmp(cmd, "list")) {
        if (seen_device || seen_op || seen_quick || seen_seed || seen_min_mb)
            return usage_error("'list' takes only --json");
        return ct_cmd_list(&opt);
    }
    if (!strcmp(cmd, "check")) {
        if (seen_min_mb)
            return usage_error("--min-mb applies to 'bench' only");
        if (opt.cases && parse_check_case(&opt) != 0)
            return usage_error("check --case: '%s' is not a case number", opt.cases);
        return ct_cmd_check(&opt);
    }
    if (!strcmp(cmd, "precompile")) {
        if (seen_seed || seen_min_mb || opt.cases)
            return usage_error("'precompile' takes --device, --op, --heads, --quick and "
                               "--progress");
        return ct_cmd_precompile(&opt);
    }
    return ct_cmd_bench(&opt);
}
