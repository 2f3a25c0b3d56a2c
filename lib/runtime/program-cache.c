/* The on-disk program-binary cache. An entry is <cache dir>/<key>.bin where
 * the key hashes every byte compiled, the build options, the platform, the
 * device, the driver version and the clvarlen version. Entries are written to
 * a temporary file and renamed, so readers never see half an entry; each
 * carries its payload size and hash, so a truncated or corrupted entry is
 * detected (and rebuilt by the caller).
 */
#include "runtime/runtime.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CACHE_MAGIC "CLVARLEN-BIN"
#define CACHE_FORMAT 1u

typedef struct cache_header {
    char magic[12];
    uint32_t format;
    uint64_t payload_size;
    char payload_hash[32];
} cache_header;

/* FNV-1a over 64 bits with two bases, each finished with a SplitMix64 mix: a
 * 128-bit key that separates parts by their lengths. Not cryptographic; it
 * only has to tell different sources apart. */
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
            if (mkdir(buf, 0755) != 0 && errno != EEXIST)
                return -1;
            buf[i] = c;
        }
    }
    return 0;
}

int cv_cache_load(clvarlen_context *ctx, const char *key, unsigned char **data, size_t *size)
{
    *data = NULL;
    *size = 0;
    if (!ctx->cache_dir)
        return 0;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.bin", ctx->cache_dir, key);
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    cache_header h;
    int result = -1;
    unsigned char *buf = NULL;
    if (fread(&h, sizeof h, 1, f) != 1 || memcmp(h.magic, CACHE_MAGIC, sizeof h.magic) != 0 ||
        h.format != CACHE_FORMAT || h.payload_size == 0 || h.payload_size > (1ull << 31))
        goto out;
    buf = malloc(h.payload_size);
    if (!buf || fread(buf, 1, h.payload_size, f) != h.payload_size || fgetc(f) != EOF)
        goto out;
    {
        char hex[33];
        const void *parts[] = {buf};
        size_t sizes[] = {h.payload_size};
        cv_hash_hex(parts, sizes, 1, hex);
        if (memcmp(hex, h.payload_hash, 32) != 0)
            goto out;
    }
    *data = buf;
    *size = h.payload_size;
    buf = NULL;
    result = 1;
out:
    free(buf);
    fclose(f);
    return result;
}

void cv_cache_store(clvarlen_context *ctx, const char *key, const unsigned char *data, size_t size)
{
    if (!ctx->cache_dir || size == 0)
        return;
    if (mkdir_p(ctx->cache_dir) != 0) {
        cv_log(ctx, CLVARLEN_LOG_INFO, "program cache: cannot create %s: %s", ctx->cache_dir,
               strerror(errno));
        return;
    }
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/%s.bin", ctx->cache_dir, key);
    snprintf(tmp, sizeof tmp, "%s/.%s.%ld.tmp", ctx->cache_dir, key, (long)getpid());
    cache_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, CACHE_MAGIC, sizeof h.magic);
    h.format = CACHE_FORMAT;
    h.payload_size = size;
    char hex[33];
    const void *parts[] = {data};
    size_t sizes[] = {size};
    cv_hash_hex(parts, sizes, 1, hex);
    memcpy(h.payload_hash, hex, 32);
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        cv_log(ctx, CLVARLEN_LOG_INFO, "program cache: cannot write %s: %s", tmp, strerror(errno));
        return;
    }
    int ok = fwrite(&h, sizeof h, 1, f) == 1 && fwrite(data, 1, size, f) == size;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        cv_log(ctx, CLVARLEN_LOG_INFO, "program cache: cannot store %s", path);
        unlink(tmp);
        return;
    }
    cv_log(ctx, CLVARLEN_LOG_DEBUG, "program cache write: %s (%zu bytes)", path, size);
}
