/* Shared by preprocess's sources (private to src/data): the inputs (prep_input.c) that
 * preprocess.c reads and the byte strings of the JSON reader (prep_json.c). */
#ifndef TRIDENT_DATA_PREP_IMPL_H
#define TRIDENT_DATA_PREP_IMPL_H

#include <stddef.h>
#include <sys/types.h>
#include <zlib.h>
#include <zstd.h>

#include "trident/preprocess.h"

/* One input file, read as decompressed bytes. */
enum { SRC_PLAIN, SRC_GZ, SRC_ZST };

typedef struct {
    const char *path;
    int kind;
    int fd;
    gzFile gz;
    ZSTD_DCtx *zd;
    unsigned char *zin;
    size_t zin_cap, zin_len, zin_pos, zlast;
    int zeof;
} prep_src;

/* Opens path (".gz": gzip, ".zst": zstd, else plain): 0, or -1 with err naming the file. */
int prep_src_open(prep_src *s, const char *path, char *err, size_t errlen);
/* Reads up to cap decompressed bytes: >0 bytes, 0 at the end, -1 with err (a read error, or a
 * truncated or corrupt compressed file, named). */
ssize_t prep_src_read(prep_src *s, void *buf, size_t cap, char *err, size_t errlen);
/* Closes what prep_src_open opened (also after a failed read). */
void prep_src_close(prep_src *s);

/* Appends n bytes to s, growing it. */
void prep_str_put(prep_str *s, const char *p, size_t n);

#endif
