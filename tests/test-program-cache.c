/* The on-disk program-binary cache (OpenCL): a first context compiles and
 * writes <key>.bin entries under a fresh cache directory, a second loads
 * them, a truncated, corrupted or swapped entry is detected and rebuilt (with
 * correct results), "off" writes nothing, a directory another user could
 * write is not used, and entries appear whole. Observed through a DEBUG log
 * handler: the library logs lines containing "cache hit", "cache miss",
 * "cache write", "cache corrupt" and "not using".
 */
#include "kit-check.h"

#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A context on the test device with `cache` as its cache directory (NULL: not set, so
 * CLVARLEN_CACHE_DIR applies) and every log message collected in *log. */
static clvarlen_context *cache_context(const char *cache, tu_log *log)
{
    clvarlen_options *o = NULL;
    ck_assert_int_eq(clvarlen_options_create(&o), CLVARLEN_SUCCESS);
    ck_assert_int_eq(clvarlen_options_set_device(o, tu_cl_device_spec()), CLVARLEN_SUCCESS);
    if (cache)
        ck_assert_int_eq(clvarlen_options_set_cache_dir(o, cache), CLVARLEN_SUCCESS);
    ck_assert_int_eq(clvarlen_options_set_log(o, tu_log_fn, log, CLVARLEN_LOG_DEBUG),
                     CLVARLEN_SUCCESS);
    clvarlen_context *ctx = NULL;
    clvarlen_status st = clvarlen_context_create(o, &ctx);
    clvarlen_options_destroy(o);
    tu_check(st == CLVARLEN_SUCCESS, "context: %s", clvarlen_last_error(NULL));
    clvarlen_device_info info;
    clvarlen_context_device(ctx, &info);
    tu_check(info.kind != CLVARLEN_DEVICE_CPU_FALLBACK, "not an OpenCL context");
    return ctx;
}

/* One segment op with a known answer: a row gather (runs a kernel of segment.cl). */
static void run_gather(clvarlen_context *ctx, const char *label)
{
    enum { ROWS = 37, ELEMS = 5, N = 53 };
    float src[ROWS * ELEMS], dst[N * ELEMS];
    int32_t index[N];
    for (int i = 0; i < ROWS * ELEMS; i++)
        src[i] = (float)i * 0.25f - 3.0f;
    for (int m = 0; m < N; m++)
        index[m] = m % 7 == 3 ? -1 : (m * 11) % ROWS;
    memset(dst, 0x55, sizeof dst);
    clvarlen_status st = clvarlen_gather_rows(ctx, CLVARLEN_DTYPE_F32, ELEMS, src, ROWS, 0, index,
                                              N, dst, 0);
    tu_check(st == CLVARLEN_SUCCESS, "%s: gather: %s (%s)", label, clvarlen_status_name(st),
             clvarlen_last_error(ctx));
    for (int m = 0; m < N; m++)
        for (int e = 0; e < ELEMS; e++) {
            float want = index[m] < 0 ? 0.0f : src[index[m] * ELEMS + e];
            tu_check(memcmp(&dst[m * ELEMS + e], &want, sizeof want) == 0,
                     "%s: row %d element %d is %g, want %g", label, m, e,
                     (double)dst[m * ELEMS + e], (double)want);
        }
}

/* cu_seqlens from lengths: a second program (segment-scan.cl), so a cache holds entries of
 * different files. */
static void run_scan(clvarlen_context *ctx, const char *label)
{
    enum { N = 29 };
    int32_t lengths[N], cu[N + 1];
    int32_t want = 0;
    for (int i = 0; i < N; i++)
        lengths[i] = (i * 7) % 5;
    clvarlen_status st = clvarlen_cu_seqlens_from_lengths(ctx, lengths, N, cu);
    tu_check(st == CLVARLEN_SUCCESS, "%s: cu_seqlens: %s (%s)", label, clvarlen_status_name(st),
             clvarlen_last_error(ctx));
    for (int i = 0; i <= N; i++) {
        tu_check(cu[i] == want, "%s: cu_seqlens[%d] is %d, want %d", label, i, cu[i], want);
        want += i < N ? lengths[i] : 0;
    }
}

static void run_ops(clvarlen_context *ctx, const char *label)
{
    run_gather(ctx, label);
    run_scan(ctx, label);
}

/* The cache entries of a directory: names ending in .bin, not hidden temporaries. */
typedef struct entries {
    char paths[64][1024];
    int n;
} entries;

static entries list_entries(const char *dir)
{
    entries e;
    e.n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return e;
    struct dirent *de;
    while ((de = readdir(d)) != NULL && e.n < 64) {
        size_t len = strlen(de->d_name);
        if (de->d_name[0] == '.' || len < 5 || strcmp(de->d_name + len - 4, ".bin") != 0)
            continue;
        snprintf(e.paths[e.n++], sizeof e.paths[0], "%s/%s", dir, de->d_name);
    }
    closedir(d);
    return e;
}

static int count_hidden_temporaries(const char *dir)
{
    int n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        if (de->d_name[0] == '.' && strstr(de->d_name, ".tmp"))
            n++;
    closedir(d);
    return n;
}

#define LOG_HAS(log, s, label)                                                                 \
    tu_check(tu_log_count(&(log), (s)) > 0, "%s: no \"%s\" in the log:\n%s", (label), (s),     \
             (log).text ? (log).text : "")
#define LOG_HASNT(log, s, label)                                                               \
    tu_check(tu_log_count(&(log), (s)) == 0, "%s: unexpected \"%s\" in the log:\n%s",          \
             (label), (s), (log).text ? (log).text : "")

/* A first context fills a fresh cache; returns its entries. */
static entries populate(const char *dir, const char *label)
{
    tu_log log = {0};
    clvarlen_context *ctx = cache_context(dir, &log);
    run_ops(ctx, label);
    clvarlen_context_destroy(ctx);
    LOG_HAS(log, "cache miss", label);
    LOG_HAS(log, "cache write", label);
    LOG_HASNT(log, "cache hit", label);
    entries e = list_entries(dir);
    tu_check(e.n >= 2, "%s: fewer than two .bin entries written under %s", label, dir);
    ck_assert_int_eq(count_hidden_temporaries(dir), 0);
    tu_log_free(&log);
    return e;
}

/* A context on a cache whose entries are all valid: hits only. */
static void expect_hits(const char *dir, const char *label)
{
    tu_log log = {0};
    clvarlen_context *ctx = cache_context(dir, &log);
    run_ops(ctx, label);
    clvarlen_context_destroy(ctx);
    LOG_HAS(log, "cache hit", label);
    LOG_HASNT(log, "cache miss", label);
    LOG_HASNT(log, "cache write", label);
    LOG_HASNT(log, "cache corrupt", label);
    tu_log_free(&log);
}

/* A context on a damaged cache: detects it, rebuilds with correct results, rewrites. */
static void expect_corrupt_then_rebuilt(const char *dir, const char *label)
{
    tu_log log = {0};
    clvarlen_context *ctx = cache_context(dir, &log);
    run_ops(ctx, label);
    clvarlen_context_destroy(ctx);
    LOG_HAS(log, "cache corrupt", label);
    LOG_HAS(log, "cache write", label);
    tu_log_free(&log);
    expect_hits(dir, label);
}

START_TEST(cache_write_then_hit)
{
    char *dir = tu_make_temp_dir("cache");
    entries e = populate(dir, "first context");
    for (int i = 0; i < e.n; i++) {
        struct stat st;
        ck_assert_int_eq(stat(e.paths[i], &st), 0);
        tu_check(st.st_size > 0, "empty entry %s", e.paths[i]);
    }
    expect_hits(dir, "second context");
    /* Loading does not rewrite: the entries are the same files with the same bytes. */
    entries again = list_entries(dir);
    ck_assert_int_eq(again.n, e.n);
    tu_remove_tree(dir);
    free(dir);
}
END_TEST

START_TEST(cache_truncated)
{
    char *dir = tu_make_temp_dir("cache");
    entries e = populate(dir, "populate");
    for (int i = 0; i < e.n; i++) {
        size_t size = 0;
        char *data = tu_read_file(e.paths[i], &size);
        ck_assert_ptr_nonnull(data);
        ck_assert_int_eq(tu_write_file(e.paths[i], data, size / 2), 0);
        free(data);
    }
    expect_corrupt_then_rebuilt(dir, "truncated to half");

    e = list_entries(dir);
    for (int i = 0; i < e.n; i++) /* an empty file */
        ck_assert_int_eq(tu_write_file(e.paths[i], "", 0), 0);
    expect_corrupt_then_rebuilt(dir, "truncated to 0 bytes");
    tu_remove_tree(dir);
    free(dir);
}
END_TEST

START_TEST(cache_corrupted)
{
    char *dir = tu_make_temp_dir("cache");
    entries e = populate(dir, "populate");
    /* One byte flipped in the middle: the size is right, the content is not. */
    for (int i = 0; i < e.n; i++) {
        size_t size = 0;
        char *data = tu_read_file(e.paths[i], &size);
        ck_assert_ptr_nonnull(data);
        ck_assert(size > 2);
        data[size / 2] ^= 0x20;
        ck_assert_int_eq(tu_write_file(e.paths[i], data, size), 0);
        free(data);
    }
    expect_corrupt_then_rebuilt(dir, "one byte flipped");

    /* Garbage of the same size. */
    e = list_entries(dir);
    tu_rng r = tu_rng_make(7);
    for (int i = 0; i < e.n; i++) {
        size_t size = 0;
        char *data = tu_read_file(e.paths[i], &size);
        ck_assert_ptr_nonnull(data);
        tu_fill_random(&r, data, CLVARLEN_DTYPE_U8, size, 1.0);
        ck_assert_int_eq(tu_write_file(e.paths[i], data, size), 0);
        free(data);
    }
    expect_corrupt_then_rebuilt(dir, "random bytes");

    /* Trailing bytes after a valid entry. */
    e = list_entries(dir);
    for (int i = 0; i < e.n; i++) {
        size_t size = 0;
        char *data = tu_read_file(e.paths[i], &size);
        ck_assert_ptr_nonnull(data);
        char *longer = malloc(size + 16);
        ck_assert_ptr_nonnull(longer);
        memcpy(longer, data, size);
        memset(longer + size, 'x', 16);
        ck_assert_int_eq(tu_write_file(e.paths[i], longer, size + 16), 0);
        free(longer);
        free(data);
    }
    expect_corrupt_then_rebuilt(dir, "trailing bytes");
    tu_remove_tree(dir);
    free(dir);
}
END_TEST

START_TEST(cache_header_damaged)
{
    /* The magic and the format version are checked before anything else. */
    static const struct {
        size_t offset;
        const char *label;
    } damage[] = {{0, "magic"}, {12, "format version"}, {16, "key size"}, {24, "binary size"}};
    char *dir = tu_make_temp_dir("cache");
    populate(dir, "populate");
    for (size_t d = 0; d < sizeof damage / sizeof damage[0]; d++) {
        entries e = list_entries(dir);
        for (int i = 0; i < e.n; i++) {
            size_t size = 0;
            unsigned char *data = (unsigned char *)tu_read_file(e.paths[i], &size);
            ck_assert_ptr_nonnull(data);
            ck_assert(size > 64);
            data[damage[d].offset] ^= 0x01;
            ck_assert_int_eq(tu_write_file(e.paths[i], data, size), 0);
            free(data);
        }
        expect_corrupt_then_rebuilt(dir, damage[d].label);
    }
    tu_remove_tree(dir);
    free(dir);
}
END_TEST

START_TEST(cache_swapped)
{
    /* Entries moved to each other's names (each intact): every one is bound to its own key,
     * so each is refused and rebuilt, never handed to the driver as another program. */
    char *dir = tu_make_temp_dir("cache");
    entries e = populate(dir, "populate");
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s/swap", dir);
    ck_assert_int_eq(rename(e.paths[0], tmp), 0);
    for (int i = 1; i < e.n; i++)
        ck_assert_int_eq(rename(e.paths[i], e.paths[i - 1]), 0);
    ck_assert_int_eq(rename(tmp, e.paths[e.n - 1]), 0);
    tu_log log = {0};
    clvarlen_context *ctx = cache_context(dir, &log);
    run_ops(ctx, "swapped");
    clvarlen_context_destroy(ctx);
    LOG_HAS(log, "bound to another key", "swapped");
    LOG_HASNT(log, "cache hit", "swapped");
    tu_log_free(&log);
    expect_hits(dir, "after the rebuild");

    /* One entry copied over every other name likewise. */
    e = list_entries(dir);
    size_t size = 0;
    char *first = tu_read_file(e.paths[0], &size);
    ck_assert_ptr_nonnull(first);
    for (int i = 1; i < e.n; i++)
        ck_assert_int_eq(tu_write_file(e.paths[i], first, size), 0);
    free(first);
    expect_corrupt_then_rebuilt(dir, "one entry under every name");
    tu_remove_tree(dir);
    free(dir);
}
END_TEST

/* A context on a cache directory it must refuse: the ops work, the log says why, and
 * nothing is read from or written to the directory. */
static void expect_refused(const char *dir, const char *label)
{
    tu_log log = {0};
    clvarlen_context *ctx = cache_context(dir, &log);
    run_ops(ctx, label);
    clvarlen_context_destroy(ctx);
    LOG_HAS(log, "not using", label);
    tu_check(tu_log_count(&log, "not using") == 1, "%s: more than one refusal line:\n%s",
             label, log.text);
    LOG_HASNT(log, "cache hit", label);
    LOG_HASNT(log, "cache write", label);
    tu_log_free(&log);
    ck_assert_int_eq(count_hidden_temporaries(dir), 0);
}

START_TEST(cache_dir_shared)
{
    /* Writable by others or by the group: not used, not even for entries already there
     * (another user could have planted them). */
    static const mode_t modes[] = {0777, 0770, 0722, 01777};
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
        char *dir = tu_make_temp_dir("cache");
        char label[64];
        snprintf(label, sizeof label, "mode %04o", (unsigned)modes[m]);
        ck_assert_int_eq(chmod(dir, modes[m]), 0);
        expect_refused(dir, label);
        ck_assert_int_eq(list_entries(dir).n, 0);
        /* Entries written while it was private are not read once it is shared. */
        ck_assert_int_eq(chmod(dir, 0700), 0);
        int n = populate(dir, label).n;
        ck_assert_int_eq(chmod(dir, modes[m]), 0);
        expect_refused(dir, label);
        ck_assert_int_eq(list_entries(dir).n, n);
        tu_remove_tree(dir);
        free(dir);
    }
}
END_TEST

START_TEST(cache_dir_other_owner)
{
    if (geteuid() != 0) {
        printf("cache_dir_other_owner: skipped (needs root to give a directory away)\n");
        return;
    }
    char *dir = tu_make_temp_dir("cache");
    populate(dir, "populate");
    ck_assert_int_eq(chmod(dir, 0755), 0);
    ck_assert_int_eq(chown(dir, 65534, 65534), 0);
    expect_refused(dir, "owned by uid 65534");
    tu_remove_tree(dir);
    free(dir);
}
END_TEST

START_TEST(cache_entry_symlink)
{
    /* An entry that is a symbolic link is not followed: rebuilt, and the link's target is
     * left as it was. */
    char *dir = tu_make_temp_dir("cache");
    char *outside = tu_make_temp_dir("outside");
    entries e = populate(dir, "populate");
    char target[1100];
    snprintf(target, sizeof target, "%s/target", outside);
    for (int i = 0; i < e.n; i++) {
        ck_assert_int_eq(tu_write_file(target, "keep", 4), 0);
        ck_assert_int_eq(unlink(e.paths[i]), 0);
        ck_assert_int_eq(symlink(target, e.paths[i]), 0);
    }
    expect_corrupt_then_rebuilt(dir, "symbolic links");
    size_t size = 0;
    char *kept = tu_read_file(target, &size);
    ck_assert_ptr_nonnull(kept);
    tu_check(size == 4 && memcmp(kept, "keep", 4) == 0, "the link's target was written");
    free(kept);
    e = list_entries(dir);
    for (int i = 0; i < e.n; i++) {
        struct stat st;
        ck_assert_int_eq(lstat(e.paths[i], &st), 0);
        tu_check(S_ISREG(st.st_mode), "%s is still a link", e.paths[i]);
    }
    tu_remove_tree(outside);
    free(outside);
    tu_remove_tree(dir);
    free(dir);
}
END_TEST

/* An entry as the library writes it: a 64-byte header (magic, format, key size, binary
 * size, checksum), then the key and the binary, nothing more; private to the user. */
static void assert_entry_whole(const char *path)
{
    size_t size = 0;
    char *data = tu_read_file(path, &size);
    ck_assert_ptr_nonnull(data);
    tu_check(size > 64 && memcmp(data, "CLVARLEN-BIN", 12) == 0, "%s: no header", path);
    uint64_t key_size, payload_size;
    memcpy(&key_size, data + 16, sizeof key_size);
    memcpy(&payload_size, data + 24, sizeof payload_size);
    tu_check(64 + key_size + payload_size == size && payload_size > 0,
             "%s: %zu bytes, header says 64 + %" PRIu64 " + %" PRIu64, path, size, key_size,
             payload_size);
    free(data);
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    tu_check((st.st_mode & 077) == 0, "%s: mode %04o", path, (unsigned)(st.st_mode & 07777));
}

START_TEST(cache_entries_whole)
{
    /* Stale temporaries of a writer that died are neither read nor in the way. */
    char *dir = tu_make_temp_dir("cache");
    char stale[1100];
    snprintf(stale, sizeof stale, "%s/.0123456789abcdef0123456789abcdef.1.0.0.tmp", dir);
    ck_assert_int_eq(tu_write_file(stale, "half", 4), 0);
    entries e = list_entries(dir);
    ck_assert_int_eq(e.n, 0);
    tu_log log = {0};
    clvarlen_context *ctx = cache_context(dir, &log);
    run_ops(ctx, "populate");
    clvarlen_context_destroy(ctx);
    tu_log_free(&log);
    ck_assert_int_eq(count_hidden_temporaries(dir), 1); /* the stale one only */
    ck_assert_int_eq(unlink(stale), 0);
    e = list_entries(dir);
    tu_check(e.n >= 2, "entries missing");
    for (int i = 0; i < e.n; i++)
        assert_entry_whole(e.paths[i]);
    tu_remove_tree(dir);
    free(dir);
}
END_TEST

START_TEST(cache_off)
{
    /* The option "off" wins over CLVARLEN_CACHE_DIR: nothing is written there. */
    char *dir = tu_make_temp_dir("cache");
    const char *env = getenv("CLVARLEN_CACHE_DIR");
    char *saved = env ? strdup(env) : NULL; /* restored for CK_FORK=no runs */
    setenv("CLVARLEN_CACHE_DIR", dir, 1);
    tu_log log = {0};
    clvarlen_context *ctx = cache_context("off", &log);
    run_gather(ctx, "option off");
    clvarlen_context_destroy(ctx);
    LOG_HASNT(log, "cache write", "option off");
    LOG_HASNT(log, "cache hit", "option off");
    ck_assert_int_eq(list_entries(dir).n, 0);

    /* CLVARLEN_CACHE_DIR=off (any case) likewise. */
    setenv("CLVARLEN_CACHE_DIR", "OFF", 1);
    tu_log_clear(&log);
    ctx = cache_context(NULL, &log);
    run_gather(ctx, "env off");
    clvarlen_context_destroy(ctx);
    LOG_HASNT(log, "cache write", "env off");
    LOG_HASNT(log, "cache hit", "env off");

    /* And without the option, CLVARLEN_CACHE_DIR names the directory. */
    setenv("CLVARLEN_CACHE_DIR", dir, 1);
    tu_log_clear(&log);
    ctx = cache_context(NULL, &log);
    run_gather(ctx, "env dir");
    clvarlen_context_destroy(ctx);
    LOG_HAS(log, "cache write", "env dir");
    tu_check(list_entries(dir).n >= 1, "CLVARLEN_CACHE_DIR not used");
    if (saved)
        setenv("CLVARLEN_CACHE_DIR", saved, 1);
    else
        unsetenv("CLVARLEN_CACHE_DIR");
    free(saved);
    tu_log_free(&log);
    tu_remove_tree(dir);
    free(dir);
}
END_TEST

START_TEST(cache_dir_created)
{
    /* A cache directory that does not exist yet (nested) is created on first write. */
    char *base = tu_make_temp_dir("cache");
    char nested[2048];
    snprintf(nested, sizeof nested, "%s/a/b/c", base);
    populate(nested, "nested directory");
    expect_hits(nested, "nested directory, second context");
    /* The directories the library made are private. */
    for (const char *sub = nested + strlen(base); *sub; sub++) {
        if (sub[1] != '/' && sub[1] != '\0')
            continue;
        char path[2048];
        snprintf(path, sizeof path, "%.*s", (int)(sub + 1 - nested), nested);
        struct stat st;
        ck_assert_int_eq(stat(path, &st), 0);
        tu_check((st.st_mode & 0777) == 0700, "%s: mode %04o, want 0700", path,
                 (unsigned)(st.st_mode & 0777));
    }
    tu_remove_tree(base);
    free(base);
}
END_TEST

int main(void)
{
    if (!tu_probe_opencl_device())
        return TU_EXIT_SKIP;
    Suite *s = suite_create("program-cache");
    TCase *tc = tcase_create("cache");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, cache_write_then_hit);
    tcase_add_test(tc, cache_truncated);
    tcase_add_test(tc, cache_corrupted);
    tcase_add_test(tc, cache_header_damaged);
    tcase_add_test(tc, cache_swapped);
    tcase_add_test(tc, cache_dir_shared);
    tcase_add_test(tc, cache_dir_other_owner);
    tcase_add_test(tc, cache_entry_symlink);
    tcase_add_test(tc, cache_entries_whole);
    tcase_add_test(tc, cache_off);
    tcase_add_test(tc, cache_dir_created);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
