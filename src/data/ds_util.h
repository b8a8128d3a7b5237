/* Private to src/data: what the datasets' index caches share (every dataset of src/data that
 * caches its indices; ds_cache.c holds the GPT dataset's file format): formatted strings,
 * folders, hashes of cache keys and contents, and files written atomically. */
#ifndef TRIDENT_DS_UTIL_H
#define TRIDENT_DS_UTIL_H

#include <stddef.h>
#include <stdint.h>

#define DS_FNV_OFFSET 0xcbf29ce484222325ull

/* A formatted string (td_xmalloc'ed). */
char *ds_aprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* mkdir -p; 0, or -1 with errno set (also when path exists and is not a folder). */
int ds_make_dirs(const char *path);
/* FNV-1a, 64-bit, byte by byte: cache keys (names). */
uint64_t ds_fnv1a(uint64_t h, const void *p, size_t n);
/* FNV-1a over 64-bit words (then the tail bytes): checksums of large arrays. Each step is a
 * bijection of the state, so any single changed word changes the result. */
uint64_t ds_fnv1a_words(uint64_t h, const void *p, size_t n);
/* Writes path atomically: a temporary name unique to this host and process, fsync, rename.
 * 0, or -1 with why (the temporary is removed). */
int ds_write_atomic(const char *path, const char *b, size_t len, char *why, size_t whylen);

/* A cache file's image: a read-only mapping of it (shared with every process that maps it), or
 * memory holding what was just built. */
typedef struct ds_image {
    char *p;
    size_t len;
    int mapped;
} ds_image;
/* Unmaps or frees the image and zeroes it; a zeroed image is a no-op. */
void ds_image_free(ds_image *im);

#endif
