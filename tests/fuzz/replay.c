/* The fuzz target without libFuzzer: runs files (or every file of directories)
 * through LLVMFuzzerTestOneInput's checks, so the seed corpus is replayed by
 * `meson test` in every build (gcc, ASan, valgrind). A failed check aborts.
 *
 *   fuzz-replay PATH...                   replay; prints calls per op and status
 *   fuzz-replay --write-corpus DIR OPEN   writes the seed corpus to DIR: generated
 *       inputs that reach an (op, status) pair not yet covered; inputs that break
 *       a check go to OPEN instead (reproducers of open bugs), at most 3 per op.
 *       Each candidate runs in a child process (a memory error may kill it), so
 *       the parent never creates a context before forking.
 */
#include "fuzz.h"

#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_OPS 64
#define N_STATUS 15 /* 14 statuses and "not called" */

static long counts[MAX_OPS][N_STATUS];

static int status_slot(clvarlen_status st)
{
    return st == FZ_NOT_CALLED ? N_STATUS - 1 : (int)st;
}

static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "fuzz-replay: cannot open %s\n", path);
        return -1;
    }
    static uint8_t buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    uint8_t *copy = malloc(n ? n : 1); /* exact size: an overread of the input shows */
    if (!copy)
        return -1;
    memcpy(copy, buf, n);
    fz_result res;
    fz_run(copy, n, &res);
    free(copy);
    counts[res.op][status_slot(res.status)]++;
    return 0;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every regular file of dir, in name order. Returns the number run, -1 on error. */
static int replay_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return replay_file(dir) == 0 ? 1 : -1;
    char **names = NULL;
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        names = realloc(names, (n + 1) * sizeof *names);
        names[n] = malloc(strlen(dir) + strlen(e->d_name) + 2);
        sprintf(names[n++], "%s/%s", dir, e->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof *names, cmp_names);
    int run = 0;
    for (size_t i = 0; i < n; i++) {
        struct stat st;
        if (stat(names[i], &st) == 0 && S_ISREG(st.st_mode)) {
            if (replay_file(names[i]) < 0)
                run = -1;
            else if (run >= 0)
                run++;
        }
        free(names[i]);
    }
    free(names);
    return run;
}

static void print_counts(void)
{
    for (int op = 0; op < fz_op_count(); op++) {
        printf("%-26s", fz_op_name(op));
        for (int s = 0; s < N_STATUS; s++) {
            if (!counts[op][s])
                continue;
            printf(" %s=%ld", s == N_STATUS - 1 ? "not-called" :
                   clvarlen_status_name((clvarlen_status)s) + 9, counts[op][s]);
        }
        printf("\n");
    }
}

/* ------------------------------------------------------------ corpus writing */

static uint64_t mix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static void write_bytes(const char *dir, const char *name, const uint8_t *p, size_t n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n) {
        fprintf(stderr, "fuzz-replay: cannot write %s\n", path);
        exit(1);
    }
    fclose(f);
}

/* Candidate t of op: mostly tame bytes (sizes in range, valid enums), some wild. */
static size_t candidate(int op, uint64_t t, uint8_t *buf, size_t cap)
{
    uint64_t key = mix64(((uint64_t)op << 32) ^ t);
    size_t n = 24 + (size_t)(key % (cap - 24));
    int wild = (int)(t % 4); /* 0: tame, 1..3: a hostile byte every 1/32, 1/8, 1/2 */
    buf[0] = (uint8_t)op;
    buf[1] = (uint8_t)(t % 97 == 5 ? 0xFF : key >> 8); /* 0xFF: NULL context */
    for (size_t i = 2; i < n; i++) {
        uint64_t x = mix64(key + i);
        int hostile = wild && x % (wild == 1 ? 32 : wild == 2 ? 8 : 2) == 0;
        buf[i] = hostile ? (uint8_t)(x >> 8) : (uint8_t)((x >> 8) % 200);
    }
    return n;
}

/* Runs one input in a child: the status slot, or -1 when a check failed or it crashed. */
static int run_isolated(const uint8_t *buf, size_t n)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        fz_soft_failures = 1;
        fz_result res;
        fz_run(buf, n, &res);
        _exit(res.failed ? 1 : 16 + status_slot(res.status));
    }
    int ws = 0;
    if (pid < 0 || waitpid(pid, &ws, 0) < 0)
        return -1;
    return WIFEXITED(ws) && WEXITSTATUS(ws) >= 16 ? WEXITSTATUS(ws) - 16 : -1;
}

static int write_corpus(const char *dir, const char *open_dir)
{
    static uint8_t buf[768];
    int written = 0;
    for (int op = 0; op < fz_op_count(); op++) {
        int seen[N_STATUS] = {0}, open_saved = 0;
        for (uint64_t t = 0; t < 1500; t++) {
            size_t n = candidate(op, t, buf, sizeof buf);
            int slot = run_isolated(buf, n);
            char name[128];
            if (slot < 0) {
                if (open_saved < 3) {
                    snprintf(name, sizeof name, "%s-%d.bin", fz_op_name(op), open_saved++);
                    write_bytes(open_dir, name, buf, n);
                    printf("open: %s/%s\n", open_dir, name);
                }
                continue;
            }
            if (seen[slot] >= (slot == 0 ? 3 : 1))
                continue;
            snprintf(name, sizeof name, "%s-%s-%d.bin", fz_op_name(op),
                     slot == N_STATUS - 1 ? "none"
                                          : clvarlen_status_name((clvarlen_status)slot) + 9,
                     seen[slot]++);
            for (char *ch = name; *ch; ch++)
                *ch = (char)tolower((unsigned char)*ch);
            write_bytes(dir, name, buf, n);
            written++;
        }
    }
    printf("%d corpus files written to %s\n", written, dir);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--write-corpus") == 0)
        return write_corpus(argv[2], argv[3]);
    if (argc < 2) {
        fprintf(stderr, "usage: %s PATH... | --write-corpus DIR OPEN_DIR\n", argv[0]);
        return 2;
    }
    int total = 0;
    for (int i = 1; i < argc; i++) {
        int n = replay_dir(argv[i]);
        if (n <= 0) {
            fprintf(stderr, "fuzz-replay: nothing to run in %s\n", argv[i]);
            return 1;
        }
        total += n;
    }
    print_counts();
    printf("%d inputs replayed, every check held\n", total);
    return 0;
}
