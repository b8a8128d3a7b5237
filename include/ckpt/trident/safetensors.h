/* Hugging Face safetensors files. Owns the byte format: an 8-byte little-endian header length,
 * a UTF-8 JSON header naming each tensor's dtype, shape and byte range (plus an optional
 * __metadata__ map of strings), then the raw little-endian data. A strict parser that checks
 * every field and every byte range before anything is read, a writer, and the CRC32 that
 * trident's checkpoints store for each tensor. */
#ifndef TRIDENT_SAFETENSORS_H
#define TRIDENT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

/* Largest header accepted (the reference implementation's limit). */
#define ST_MAX_HEADER (100u * 1000u * 1000u)
#define ST_MAX_DIMS 8

typedef enum {
    ST_BOOL, ST_U8, ST_I8, ST_F8_E5M2, ST_F8_E4M3, ST_I16, ST_U16, ST_F16, ST_BF16,
    ST_I32, ST_U32, ST_F32, ST_F64, ST_I64, ST_U64, ST_NDTYPES
} st_dtype;

const char *st_dtype_name(st_dtype t); /* "F32" */
size_t st_dtype_size(st_dtype t);      /* bytes per element */
/* The dtype named `s`, or -1. */
int st_dtype_parse(const char *s);

typedef struct st_tensor {
    char *name;
    st_dtype dtype;
    int ndim;                    /* 0 (a scalar) .. ST_MAX_DIMS */
    int64_t shape[ST_MAX_DIMS];
    uint64_t begin, end;         /* byte range within the data section */
} st_tensor;

typedef struct st_header {
    uint64_t header_len;         /* the JSON's length (the first 8 bytes) */
    uint64_t data_start;         /* 8 + header_len: where the data section begins in the file */
    uint64_t data_len;           /* bytes of the data section */
    int ntensors;
    st_tensor *tensors;          /* in data order (ascending offsets) */
    int nmeta;
    char **meta_keys, **meta_values; /* __metadata__, in header order */
} st_header;

/* Parses the header at the start of a file of `file_size` bytes; `buf` holds its first `len`
 * bytes (at least 8 + header length, or the whole file). Strict: the header must be a JSON
 * object in valid UTF-8 (trailing spaces allowed) whose entries are __metadata__ (strings only)
 * and tensors with exactly dtype, shape and data_offsets; shapes of non-negative integers whose
 * element count times the dtype size is the byte range; ranges that tile the data section
 * exactly, in order from 0 to its end (no gap, overlap, or trailing bytes); unique names.
 * Returns 0, or -1 with one line in err. Free with st_header_free. */
int st_parse(const uint8_t *buf, size_t len, uint64_t file_size, st_header *out, char *err, size_t errlen);
void st_header_free(st_header *h);
/* The tensor called `name`, or NULL. */
const st_tensor *st_find(const st_header *h, const char *name);
/* The __metadata__ value of `key`, or NULL. */
const char *st_meta(const st_header *h, const char *key);

/* An open file: its header parsed and its data mapped read-only. */
typedef struct st_file {
    char *path;
    st_header h;
    uint64_t size;
    const uint8_t *map;          /* the whole file */
    int fd;                      /* open for reading (pread) until st_close */
} st_file;

/* Opens and validates `path` (st_parse). NULL with one line in err naming the file. */
st_file *st_open(const char *path, char *err, size_t errlen);
void st_close(st_file *f);
/* The bytes of tensor t of f. */
static inline const void *st_data(const st_file *f, const st_tensor *t)
{
    return f->map + f->h.data_start + t->begin;
}
/* Drops this process's mapped pages of t's bytes (they stay in the page cache; a later st_data read
 * maps them again): a reader that copies tensor by tensor then holds one tensor's pages at a time,
 * not the whole file's, in its resident memory. */
void st_release(const st_file *f, const st_tensor *t);

/* One tensor to write: its data, `bytes` long (= element count x dtype size). */
typedef struct st_entry {
    const char *name;
    st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    const void *data;
    size_t bytes;
} st_entry;

/* Writes a safetensors file at `path` (created or truncated): the header (tensors in the given
 * order, then __metadata__ from the nmeta key/value pairs, padded with spaces so the data starts
 * 8-byte aligned) and the data. With do_fsync the file is fsynced before it is closed. The caller
 * writes to a temporary name and renames for atomicity. Returns 0, or -1 with err naming the
 * file and the reason. */
int st_write(const char *path, const st_entry *e, int n, const char *const *meta_keys,
             const char *const *meta_values, int nmeta, int do_fsync, char *err, size_t errlen);

/* Where st_write_stream gets the data: read() copies bytes [off, off + n) of entry i into buf
 * (called in file order, in pieces of at most 8 MiB); done(), if set, is called once all data
 * is written and may then rewrite the metadata values in place, keeping their lengths (e.g. to
 * fill in checksums of the data just produced). */
typedef struct st_source {
    void (*read)(void *user, int i, size_t off, void *buf, size_t n);
    void (*done)(void *user);
    void *user;
} st_source;

/* st_write with the data produced piecewise through a small buffer (the e[i].data are unused):
 * the data is written after room for the header, then the header, built from the metadata as
 * done() left it. */
int st_write_stream(const char *path, const st_entry *e, int n, const char *const *meta_keys,
                    const char *const *meta_values, int nmeta, const st_source *src, int do_fsync, char *err,
                    size_t errlen);

/* CRC-32 (ISO-HDLC, zlib's: reflected polynomial 0xEDB88320), continued from `crc` (0 to start). */
uint32_t st_crc32(uint32_t crc, const void *data, size_t n);

#endif
