/* Private to src/data: the index cache files of the GPT dataset (src/data/ds_cache.c), used by
 * src/data/gpt_dataset.c for its document, sample and shuffle indices, its blends and its scans
 * of token ids. A cache is a few arrays, a description of every input they depend on and a
 * checksum; a file that does not match is rebuilt, with a warning. */
#ifndef TRIDENT_DS_CACHE_H
#define TRIDENT_DS_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "ds_util.h"

#define DS_CACHE_MAX_ARRAYS 3

/* What a cache holds: its description (the inputs, compared byte for byte), key (in the file
 * name), and n_arrays arrays of count[i] elements of elem[i] bytes. */
typedef struct {
    char *desc;
    uint64_t key;
    int n_arrays;
    uint64_t count[DS_CACHE_MAX_ARRAYS], elem[DS_CACHE_MAX_ARRAYS];
} ds_cache_layout;

/* Checks the arrays of a cache whose layout matched: 0, or -1 with why. */
typedef int (*ds_content_check)(const void *ctx, void *arr[DS_CACHE_MAX_ARRAYS], char *why, size_t whylen);

/* A new cache image for layout L (len bytes, zeroed, header and description written): arr[i]
 * points at array i, to be filled before ds_cache_store. */
char *ds_cache_alloc(const ds_cache_layout *L, size_t *len, void *arr[DS_CACHE_MAX_ARRAYS]);
/* Maps the cache file at path when it matches L and passes check (0, arr and im set), or
 * returns -1; a file that exists but is unusable gets a warning (it will be rebuilt). */
int ds_cache_load(const char *path, const ds_cache_layout *L, ds_content_check check, const void *ctx,
                  void *arr[DS_CACHE_MAX_ARRAYS], ds_image *im);
/* Seals the image b (its checksum) and writes it to path atomically (path NULL: seals only); a
 * failed write is a warning: the run goes on with the indices in memory. */
void ds_cache_store(const char *path, char *b, size_t len);

#endif
