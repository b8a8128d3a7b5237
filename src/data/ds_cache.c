/* The GPT dataset's index cache files (see src/data/ds_cache.h): a header (magic, key,
 * description length, array counts and element sizes, a checksum of the rest), the description
 * text, then the arrays, each padded to 8 bytes. The description names every input the arrays
 * depend on; it is compared byte for byte on load. */
#include "ds_cache.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "trident/check.h"

#define CACHE_MAGIC "TDIDXv01"

typedef struct {
    char magic[8];
    uint64_t key;
    uint64_t desc_len;
    uint64_t n_arrays;
    uint64_t count[DS_CACHE_MAX_ARRAYS];
    uint64_t elem[DS_CACHE_MAX_ARRAYS];
    uint64_t checksum; /* fnv1a_words over every byte after the header */
} cache_header;

static size_t pad8(size_t n) { return (n + 7) & ~(size_t)7; }

static size_t layout_size(const ds_cache_layout *L, size_t off[DS_CACHE_MAX_ARRAYS])
{
    size_t at = sizeof(cache_header) + pad8(strlen(L->desc));
    for (int i = 0; i < L->n_arrays; i++) {
        off[i] = at;
        at += pad8((size_t)(L->count[i] * L->elem[i]));
    }
    return at;
}

char *ds_cache_alloc(const ds_cache_layout *L, size_t *len, void *arr[DS_CACHE_MAX_ARRAYS])
{
    size_t off[DS_CACHE_MAX_ARRAYS];
    *len = layout_size(L, off);
    char *b = td_xcalloc(1, *len);
    cache_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, CACHE_MAGIC, 8);
    h.key = L->key;
    h.desc_len = strlen(L->desc);
    h.n_arrays = (uint64_t)L->n_arrays;
    for (int i = 0; i < L->n_arrays; i++) {
        h.count[i] = L->count[i];
        h.elem[i] = L->elem[i];
        arr[i] = b + off[i];
    }
    memcpy(b, &h, sizeof h);
    memcpy(b + sizeof h, L->desc, h.desc_len);
    return b;
}

static void blob_seal(char *b, size_t len)
{
    cache_header h;
    memcpy(&h, b, sizeof h);
    h.checksum = ds_fnv1a_words(DS_FNV_OFFSET, b + sizeof h, len - sizeof h);
    memcpy(b, &h, sizeof h);
}

/* Checks a cache file image against the layout expected; 0 (arr set) or -1 with `why`. */
static int blob_check(const char *b, size_t len, const ds_cache_layout *L, void *arr[DS_CACHE_MAX_ARRAYS], char *why,
                      size_t whylen)
{
    cache_header h;
    if (len < sizeof h) {
        snprintf(why, whylen, "%zu bytes, shorter than its header", len);
        return -1;
    }
    memcpy(&h, b, sizeof h);
    if (memcmp(h.magic, CACHE_MAGIC, 8) != 0) {
        snprintf(why, whylen, "bad magic (not a trident index cache, or written by another version)");
        return -1;
    }
    if (h.key != L->key) {
        snprintf(why, whylen, "key %016" PRIx64 ", expected %016" PRIx64, h.key, L->key);
        return -1;
    }
    size_t dlen = strlen(L->desc);
    if (h.desc_len != dlen || len < sizeof h + dlen || memcmp(b + sizeof h, L->desc, dlen) != 0) {
        snprintf(why, whylen, "its description of the inputs differs from this run's");
        return -1;
    }
    if (h.n_arrays != (uint64_t)L->n_arrays) {
        snprintf(why, whylen, "%" PRIu64 " arrays, expected %d", h.n_arrays, L->n_arrays);
        return -1;
    }
    for (int i = 0; i < L->n_arrays; i++)
        if (h.count[i] != L->count[i] || h.elem[i] != L->elem[i]) {
            snprintf(why, whylen, "array %d holds %" PRIu64 " x %" PRIu64 " bytes, expected %" PRIu64 " x %" PRIu64,
                     i, h.count[i], h.elem[i], L->count[i], L->elem[i]);
            return -1;
        }
    size_t off[DS_CACHE_MAX_ARRAYS];
    size_t want = layout_size(L, off);
    if (len != want) {
        snprintf(why, whylen, "%zu bytes, expected %zu (truncated or padded)", len, want);
        return -1;
    }
    uint64_t sum = ds_fnv1a_words(DS_FNV_OFFSET, b + sizeof h, len - sizeof h);
    if (sum != h.checksum) {
        snprintf(why, whylen, "checksum %016" PRIx64 ", expected %016" PRIx64 " (corrupt)", sum, h.checksum);
        return -1;
    }
    for (int i = 0; i < L->n_arrays; i++) arr[i] = (char *)b + off[i];
    return 0;
}

/* Maps a whole file read-only. -1 when it does not exist (*exists = 0) or cannot be mapped
 * (why set). */
static int map_whole(const char *path, ds_image *im, int *exists, char *why, size_t whylen)
{
    *exists = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno != ENOENT) {
            *exists = 1;
            snprintf(why, whylen, "open: %s", td_strerror(errno));
        }
        return -1;
    }
    *exists = 1;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        snprintf(why, whylen, "stat: %s", td_strerror(errno));
        close(fd);
        return -1;
    }
    if (st.st_size < (off_t)sizeof(cache_header)) {
        snprintf(why, whylen, "%lld bytes, shorter than its header", (long long)st.st_size);
        close(fd);
        return -1;
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        snprintf(why, whylen, "mmap: %s", td_strerror(errno));
        return -1;
    }
    *im = (ds_image){.p = p, .len = (size_t)st.st_size, .mapped = 1};
    return 0;
}

int ds_cache_load(const char *path, const ds_cache_layout *L, ds_content_check check, const void *ctx,
                      void *arr[DS_CACHE_MAX_ARRAYS], ds_image *im)
{
    char why[512] = "";
    int exists = 0;
    if (map_whole(path, im, &exists, why, sizeof why) != 0) {
        if (exists) td_warn("index cache %s cannot be read (%s); rebuilding it", path, why);
        return -1;
    }
    if (blob_check(im->p, im->len, L, arr, why, sizeof why) == 0 && check(ctx, arr, why, sizeof why) == 0) return 0;
    td_warn("index cache %s is unusable (%s); rebuilding it", path, why);
    ds_image_free(im);
    return -1;
}

void ds_cache_store(const char *path, char *b, size_t len)
{
    char why[512];
    blob_seal(b, len);
    if (path && ds_write_atomic(path, b, len, why, sizeof why) != 0)
        td_warn("cannot write index cache (%s); continuing with the indices in memory (point --data-cache-path "
                "at a writable folder to keep them)", why);
}
