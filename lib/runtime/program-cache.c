/* The on-disk program-binary cache. An entry is <cache dir>/<key hash>.bin
 * and holds, after a header, the full key material (every byte compiled, the
 * build options, the platform, the device, the driver version and the
 * clvarlen version) and the binary with its size and checksum. Loading checks
 * all of it, so an entry renamed, swapped, truncated or damaged is rebuilt
 * instead of handed to the driver.
 *
 * The directory is trusted only when it is ours: owned by the effective user
 * and writable by nobody else (the library creates it, and parents it
 * creates, mode 0700). Otherwise another user could plant binaries that the
 * driver would run as ours; such a directory is logged once and the context
 * builds without the cache. Entries are written to a fresh temporary file
 * (O_EXCL) in the same directory and renamed over the entry, so readers never
 * see half an entry. There is no fsync: after a crash an entry may be empty or
 * short, which loading detects and rebuilds.
 */
#include "runtime/runtime.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CACHE_MAGIC "CLVARLEN-BIN"
#define CACHE_FORMAT 2u
#define CACHE_MAX_FILE (1ull << 31)

/* Followed by key_size bytes of key material (each part as a uint64 length and
 * its bytes) and payload_size bytes of binary; nothing after. */
typedef struct cache_header {
    char magic[12];
    uint32_t format;
    uint64_t key_size;
    uint64_t payload_size;
    char payload_hash[32];
} cache_header;

/* FNV-1a over 64 bits with two bases, each finished with a SplitMix64 mix: a
 * 128-bit key that separates parts by their lengths. Not cryptographic: it
 * names entries and catches damage; the key material stored in the entry is
 * what binds it to its program. */
static uint64_t mix64(uint64_t z)
{
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void fnv(uint64_t *h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        *h ^= p[i];
        *h *= 0x100000001B3ull;
    }
}

void cv_hash_hex(const void *const *parts, const size_t *sizes, size_t n_parts, char out[33])
{
    uint64_t a = 0xCBF29CE484222325ull, b = 0x84222325CBF29CE4ull;
    for (size_t i = 0; i < n_parts; i++) {
        uint64_t len = sizes[i];
        fnv(&a, &len, sizeof len);
        fnv(&b, &len, sizeof len);
        fnv(&a, parts[i], sizes[i]);
        b ^= mix64(a);
        fnv(&b, parts[i], sizes[i]);
    }
    snprintf(out, 33, "%016llx%016llx", (unsigned long long)mix64(a ^ 0x5555),
             (unsigned long long)mix64(b ^ a));
}

void cv_cache_key_init(cv_cache_key *key)
{
    cv_hash_hex(key->parts, key->sizes, key->n_parts, key->hex);
}

static uint64_t key_material_size(const cv_cache_key *key)
{
    uint64_t n = 0;
    for (size_t i = 0; i < key->n_parts; i++)
        n += sizeof(uint64_t) + key->sizes[i];
    return n;
}

/* 1 when the stored material (n bytes) is exactly the key's. */
static int key_material_matches(const cv_cache_key *key, const unsigned char *stored, uint64_t n)
{
    if (n != key_material_size(key))
        return 0;
    for (size_t i = 0; i < key->n_parts; i++) {
        uint64_t len;
        memcpy(&len, stored, sizeof len);
        stored += sizeof len;
        if (len != key->sizes[i] || memcmp(stored, key->parts[i], key->sizes[i]) != 0)
            return 0;
        stored += key->sizes[i];
    }
    return 1;
}

/* Creates dir and its missing parents, mode 0700 (existing ones are left as they are). */
static int mkdir_p(const char *dir)
{
    char buf[4096];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof buf)
        return -1;
    memcpy(buf, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] == '/' || buf[i] == '\0') {
            char c = buf[i];
            buf[i] = '\0';
            if (mkdir(buf, 0700) != 0 && errno != EEXIST)
                return -1;
            buf[i] = c;
        }
    }
    return 0;
}

/* Stops using the cache for this context, with one log line saying why. */
static void cache_disable(clvarlen_context *ctx, const char *why)
{
    cv_log(ctx, CLVARLEN_LOG_INFO, "program cache: not using %s: %s; building without the cache",
           ctx->cache_dir, why);
    free(ctx->cache_dir);
    ctx->cache_dir = NULL;
}

/* An open descriptor of the cache directory when it may be used, else -1 (a
 * directory not there yet when !create, or one refused: then the cache is off
 * for the context). Checking the opened descriptor leaves no window between
 * the check and the use. */
static int cache_dir_open(clvarlen_context *ctx, bool create)
{
    if (!ctx->cache_dir)
        return -1;
    char why[160];
    if (create && mkdir_p(ctx->cache_dir) != 0) {
        snprintf(why, sizeof why, "cannot create it: %s", strerror(errno));
        cache_disable(ctx, why);
        return -1;
    }
    int dfd = open(ctx->cache_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) {
        if (create || errno != ENOENT) {
            snprintf(why, sizeof why, "cannot open it: %s", strerror(errno));
            cache_disable(ctx, why);
        }
        return -1;
    }
    struct stat st;
    why[0] = '\0';
    if (fstat(dfd, &st) != 0)
        snprintf(why, sizeof why, "cannot stat it: %s", strerror(errno));
    else if (st.st_uid != geteuid())
        snprintf(why, sizeof why, "owned by uid %ld, not by this user (uid %ld)",
                 (long)st.st_uid, (long)geteuid());
    else if (st.st_mode & (S_IWGRP | S_IWOTH))
        snprintf(why, sizeof why, "writable by group or others (mode %04o)",
                 (unsigned)(st.st_mode & 07777));
    if (why[0]) {
        close(dfd);
        cache_disable(ctx, why);
        return -1;
    }
    return dfd;
}

/* Reads the whole entry (a regular file of ours, at most CACHE_MAX_FILE bytes) into a
 * malloc'ed buffer. NULL with *why set on a bad file; NULL with *oom on no memory. */
static unsigned char *read_entry(int fd, size_t *size, const char **why, bool *oom)
{
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        *why = "not a regular file";
        return NULL;
    }
    if (st.st_uid != geteuid()) {
        *why = "owned by another user";
        return NULL;
    }
    if ((uint64_t)st.st_size < sizeof(cache_header) || (uint64_t)st.st_size > CACHE_MAX_FILE) {
        *why = (uint64_t)st.st_size < sizeof(cache_header) ? "shorter than its header"
                                                           : "too large";
        return NULL;
    }
    size_t n = (size_t)st.st_size;
    unsigned char *buf = malloc(n);
    if (!buf) {
        *oom = true;
        return NULL;
    }
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    char extra;
    if (got != n || read(fd, &extra, 1) != 0) {
        free(buf);
        *why = got != n ? "read error or truncated while reading" : "grew while reading";
        return NULL;
    }
    *size = n;
    return buf;
}

/* NULL when the entry (n bytes) is sound and bound to key, else what is wrong. */
static const char *check_entry(const cv_cache_key *key, const unsigned char *buf, size_t n)
{
    cache_header h;
    memcpy(&h, buf, sizeof h);
    if (memcmp(h.magic, CACHE_MAGIC, sizeof h.magic) != 0)
        return "bad magic";
    if (h.format != CACHE_FORMAT)
        return "another format version";
    if (h.payload_size == 0 || h.key_size > n || h.payload_size > n ||
        sizeof h + h.key_size + h.payload_size != n)
        return "sizes do not add up (truncated or extended)";
    if (!key_material_matches(key, buf + sizeof h, h.key_size))
        return "bound to another key";
    char hex[33];
    const void *parts[] = {buf + sizeof h + h.key_size};
    size_t sizes[] = {(size_t)h.payload_size};
    cv_hash_hex(parts, sizes, 1, hex);
    if (memcmp(hex, h.payload_hash, 32) != 0)
        return "binary checksum mismatch";
    return NULL;
}

int cv_cache_load(clvarlen_context *ctx, const cv_cache_key *key, unsigned char **data,
                  size_t *size)
{
    *data = NULL;
    *size = 0;
    int dfd = cache_dir_open(ctx, false);
    if (dfd < 0)
        return 0;
    char name[40];
    snprintf(name, sizeof name, "%s.bin", key->hex);
    int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    int open_errno = errno;
    close(dfd);
    const char *why = NULL;
    if (fd < 0) {
        if (open_errno == ENOENT)
            return 0;
        why = open_errno == ELOOP ? "a symbolic link" : strerror(open_errno);
    }
    bool oom = false;
    size_t n = 0;
    unsigned char *buf = fd >= 0 ? read_entry(fd, &n, &why, &oom) : NULL;
    if (fd >= 0)
        close(fd);
    if (oom) {
        cv_log(ctx, CLVARLEN_LOG_INFO,
               "program cache: no memory to load %s/%s; building from source", ctx->cache_dir,
               name);
        return 0;
    }
    if (buf && !(why = check_entry(key, buf, n))) {
        cache_header h;
        memcpy(&h, buf, sizeof h);
        memmove(buf, buf + sizeof h + h.key_size, (size_t)h.payload_size);
        *data = buf;
        *size = (size_t)h.payload_size;
        return 1;
    }
    free(buf);
    cv_log(ctx, CLVARLEN_LOG_INFO, "program cache corrupt: %s/%s (%s); rebuilding",
           ctx->cache_dir, name, why);
    return -1;
}

static int write_all(int fd, const void *data, size_t n)
{
    const unsigned char *p = data;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int write_entry(int fd, const cv_cache_key *key, const unsigned char *data, size_t size)
{
    cache_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, CACHE_MAGIC, sizeof h.magic);
    h.format = CACHE_FORMAT;
    h.key_size = key_material_size(key);
    h.payload_size = size;
    char hex[33];
    const void *parts[] = {data};
    size_t sizes[] = {size};
    cv_hash_hex(parts, sizes, 1, hex);
    memcpy(h.payload_hash, hex, 32);
    if (write_all(fd, &h, sizeof h) != 0)
        return -1;
    for (size_t i = 0; i < key->n_parts; i++) {
        uint64_t len = key->sizes[i];
        if (write_all(fd, &len, sizeof len) != 0 ||
            write_all(fd, key->parts[i], key->sizes[i]) != 0)
            return -1;
    }
    return write_all(fd, data, size);
}

/* A new temporary file in the directory, created exclusively (never an existing file or
 * link); its name goes to tmp. */
static int open_temp(int dfd, const char *hex, char *tmp, size_t tmp_size)
{
    static atomic_uint counter;
    for (int attempt = 0; attempt < 16; attempt++) {
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        snprintf(tmp, tmp_size, ".%s.%ld.%u.%ld.tmp", hex, (long)getpid(),
                 atomic_fetch_add(&counter, 1u), (long)now.tv_nsec);
        int fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd >= 0 || errno != EEXIST)
            return fd;
    }
    return -1;
}

void cv_cache_store(clvarlen_context *ctx, const cv_cache_key *key, const unsigned char *data,
                    size_t size)
{
    if (size == 0 || sizeof(cache_header) + key_material_size(key) + size > CACHE_MAX_FILE)
        return;
    int dfd = cache_dir_open(ctx, true);
    if (dfd < 0)
        return;
    char name[40], tmp[128];
    snprintf(name, sizeof name, "%s.bin", key->hex);
    int fd = open_temp(dfd, key->hex, tmp, sizeof tmp);
    if (fd < 0) {
        cv_log(ctx, CLVARLEN_LOG_INFO, "program cache: cannot write in %s: %s", ctx->cache_dir,
               strerror(errno));
        close(dfd);
        return;
    }
    int ok = write_entry(fd, key, data, size) == 0;
    ok = close(fd) == 0 && ok;
    if (!ok || renameat(dfd, tmp, dfd, name) != 0) {
        cv_log(ctx, CLVARLEN_LOG_INFO, "program cache: cannot store %s/%s: %s", ctx->cache_dir,
               name, strerror(errno));
        unlinkat(dfd, tmp, 0);
        close(dfd);
        return;
    }
    close(dfd);
    cv_log(ctx, CLVARLEN_LOG_DEBUG, "program cache write: %s/%s (%zu bytes)", ctx->cache_dir,
           name, size);
}
