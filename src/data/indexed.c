/* Megatron indexed dataset: see include/data/trident/indexed.h and docs/indexed-dataset.md.
 *
 * .idx layout (all little-endian):
 *   magic "MMIDIDX\0\0" (9) | version u64 = 1 | dtype u8 | sequence count u64 (S) |
 *   document-index entries u64 (D = documents + 1) | lengths i32[S] | pointers i64[S] |
 *   document index i64[D]
 * .bin: the tokens of every sequence, back to back, in the dtype. */
#include "trident/indexed.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "trident/check.h"
#include "trident/dataset_reader.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "indexed.c reads and writes the little-endian MMIDIDX format with plain loads: port it for big-endian hosts"
#endif

static const char IDX_MAGIC[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};
#define IDX_VERSION 1u
#define IDX_HEADER_BYTES 34u /* magic 9 + version 8 + dtype 1 + two counts 8 + 8 */

enum idx_dtype idx_dtype_for_vocab(int vocab_size) { return vocab_size < 65500 ? IDX_U16 : IDX_I32; }

size_t idx_dtype_size(enum idx_dtype t)
{
    switch (t) {
    case IDX_U8:
    case IDX_I8: return 1;
    case IDX_I16:
    case IDX_U16: return 2;
    case IDX_I32:
    case IDX_F32: return 4;
    case IDX_I64:
    case IDX_F64: return 8;
    }
    return 0;
}

const char *idx_dtype_name(int code)
{
    switch (code) {
    case IDX_U8: return "uint8";
    case IDX_I8: return "int8";
    case IDX_I16: return "int16";
    case IDX_I32: return "int32";
    case IDX_I64: return "int64";
    case IDX_F64: return "float64";
    case IDX_F32: return "float32";
    case IDX_U16: return "uint16";
    }
    return "unknown";
}

/* Token dtypes trident reads and writes: integers that widen to int32 without loss. */
static int dtype_is_token_type(int code)
{
    return code == IDX_U8 || code == IDX_I8 || code == IDX_I16 || code == IDX_U16 || code == IDX_I32;
}

/* Smallest and largest token id the dtype holds (ids are never negative). */
static int64_t dtype_max_token(enum idx_dtype t)
{
    switch (t) {
    case IDX_U8: return 255;
    case IDX_I8: return 127;
    case IDX_I16: return 32767;
    case IDX_U16: return 65535;
    default: return INT32_MAX;
    }
}

/* ---------------------------------------------------------------------------------------------
 * Writer
 * ------------------------------------------------------------------------------------------- */

struct idx_writer {
    enum idx_dtype dtype;
    char *bin_path, *idx_path; /* final names */
    char *bin_tmp, *idx_tmp;   /* PREFIX.bin.tmp-<pid>, PREFIX.idx.tmp-<pid> */
    int bin_fd;
    unsigned char *buf; /* pending .bin bytes */
    size_t buf_len, buf_cap;
    int64_t bin_bytes; /* bytes of .bin so far (flushed + pending) */
    int32_t *lens;     /* (S) */
    size_t nseq, cap;
    int64_t *docs; /* (ndocs) sequence count at the end of each document: the index after its 0 */
    size_t ndocs, doc_cap;
};

static char *path_join(const char *prefix, const char *suffix)
{
    size_t a = strlen(prefix), b = strlen(suffix);
    char *p = td_xmalloc(a + b + 1);
    memcpy(p, prefix, a);
    memcpy(p + a, suffix, b + 1);
    return p;
}

static void writer_free(idx_writer *w)
{
    free(w->bin_path);
    free(w->idx_path);
    free(w->bin_tmp);
    free(w->idx_tmp);
    free(w->buf);
    free(w->lens);
    free(w->docs);
    free(w);
}

/* Writes all n bytes; 0 or -1 with errno set. */
static int write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t k = write(fd, c, n);
        if (k < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        c += k;
        n -= (size_t)k;
    }
    return 0;
}

idx_writer *idx_writer_open(const char *prefix, enum idx_dtype dtype, char *err, size_t errlen)
{
    if (!dtype_is_token_type((int)dtype)) {
        td_seterr(err, errlen, "indexed dataset %s: dtype code %d (%s) cannot hold token ids; use uint16 or int32",
               prefix, (int)dtype, idx_dtype_name((int)dtype));
        return NULL;
    }
    idx_writer *w = td_xcalloc(1, sizeof *w);
    w->dtype = dtype;
    w->bin_path = path_join(prefix, ".bin");
    w->idx_path = path_join(prefix, ".idx");
    char suffix[64];
    snprintf(suffix, sizeof suffix, ".bin.tmp-%ld", (long)getpid());
    w->bin_tmp = path_join(prefix, suffix);
    snprintf(suffix, sizeof suffix, ".idx.tmp-%ld", (long)getpid());
    w->idx_tmp = path_join(prefix, suffix);
    w->bin_fd = open(w->bin_tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w->bin_fd < 0) {
        td_seterr(err, errlen, "cannot create %s: %s (check that the folder of the output prefix exists and is writable)",
               w->bin_tmp, td_strerror(errno));
        writer_free(w);
        return NULL;
    }
    w->buf_cap = 1u << 20;
    w->buf = td_xmalloc(w->buf_cap);
    return w;
}

static int flush_bin(idx_writer *w, char *err, size_t errlen)
{
    if (w->buf_len && write_all(w->bin_fd, w->buf, w->buf_len) != 0) {
        td_seterr(err, errlen, "cannot write %s: %s (is the disk full?)", w->bin_tmp, td_strerror(errno));
        return -1;
    }
    w->buf_len = 0;
    return 0;
}

int idx_writer_add_sequence(idx_writer *w, const int32_t *ids, size_t n, char *err, size_t errlen)
{
    if (n > (size_t)INT32_MAX) {
        td_seterr(err, errlen, "%s: a sequence of %zu tokens does not fit the int32 length field; split it",
               w->bin_path, n);
        return -1;
    }
    size_t isz = idx_dtype_size(w->dtype);
    int64_t maxtok = dtype_max_token(w->dtype);
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] > maxtok) {
            td_seterr(err, errlen, "%s: token id %d (sequence %zu, position %zu) does not fit dtype %s [0, %lld]; "
                   "use a dtype for a larger vocabulary", w->bin_path, (int)ids[i], w->nseq, i,
                   idx_dtype_name((int)w->dtype), (long long)maxtok);
            return -1;
        }
    if (w->bin_bytes > INT64_MAX - (int64_t)(n * isz)) {
        td_seterr(err, errlen, "%s: the data file would exceed 2^63 bytes", w->bin_path);
        return -1;
    }
    if (w->nseq == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 1024;
        w->lens = td_xrealloc(w->lens, w->cap * sizeof *w->lens);
    }
    for (size_t i = 0; i < n;) {
        size_t room = (w->buf_cap - w->buf_len) / isz;
        if (room == 0) {
            if (flush_bin(w, err, errlen) != 0) return -1;
            continue;
        }
        size_t m = n - i < room ? n - i : room;
        unsigned char *p = w->buf + w->buf_len;
        const int32_t *src = ids + i;
        switch (isz) { /* little-endian items; ids were range-checked above */
        case 1:
            for (size_t k = 0; k < m; k++) p[k] = (unsigned char)src[k];
            break;
        case 2:
            for (size_t k = 0; k < m; k++) {
                p[2 * k] = (unsigned char)src[k];
                p[2 * k + 1] = (unsigned char)((uint32_t)src[k] >> 8);
            }
            break;
        default:
            memcpy(p, src, m * 4); /* the host is little-endian (checked at the top) */
            break;
        }
        w->buf_len += m * isz;
        i += m;
    }
    w->lens[w->nseq++] = (int32_t)n;
    w->bin_bytes += (int64_t)(n * isz);
    return 0;
}

void idx_writer_end_document(idx_writer *w)
{
    if (w->ndocs == w->doc_cap) {
        w->doc_cap = w->doc_cap ? 2 * w->doc_cap : 1024;
        w->docs = td_xrealloc(w->docs, w->doc_cap * sizeof *w->docs);
    }
    w->docs[w->ndocs++] = (int64_t)w->nseq;
}

int idx_writer_add(idx_writer *w, const int32_t *ids, size_t n, char *err, size_t errlen)
{
    if (idx_writer_add_sequence(w, ids, n, err, errlen) != 0) return -1;
    idx_writer_end_document(w);
    return 0;
}

static void put_u64(unsigned char *p, uint64_t v)
{
    for (int b = 0; b < 8; b++) p[b] = (unsigned char)(v >> (8 * b));
}

/* Writes the .idx body to fd through a buffer. */
static int write_index(idx_writer *w, int fd)
{
    unsigned char head[IDX_HEADER_BYTES];
    memcpy(head, IDX_MAGIC, 9);
    put_u64(head + 9, IDX_VERSION);
    head[17] = (unsigned char)w->dtype;
    put_u64(head + 18, (uint64_t)w->nseq);
    put_u64(head + 26, (uint64_t)w->ndocs + 1); /* the leading 0, then each document's end */
    if (write_all(fd, head, sizeof head) != 0) return -1;

    enum { CHUNK = 8192 };
    unsigned char out[CHUNK * 8];
    size_t isz = idx_dtype_size(w->dtype);
    /* lengths */
    for (size_t i = 0; i < w->nseq; i += CHUNK) {
        size_t m = w->nseq - i < CHUNK ? w->nseq - i : CHUNK;
        for (size_t j = 0; j < m; j++) {
            uint32_t v = (uint32_t)w->lens[i + j];
            for (int b = 0; b < 4; b++) out[4 * j + b] = (unsigned char)(v >> (8 * b));
        }
        if (write_all(fd, out, 4 * m) != 0) return -1;
    }
    /* pointers: byte offset of each sequence in .bin */
    uint64_t ptr = 0;
    for (size_t i = 0; i < w->nseq; i += CHUNK) {
        size_t m = w->nseq - i < CHUNK ? w->nseq - i : CHUNK;
        for (size_t j = 0; j < m; j++) {
            put_u64(out + 8 * j, ptr);
            ptr += (uint64_t)w->lens[i + j] * isz;
        }
        if (write_all(fd, out, 8 * m) != 0) return -1;
    }
    /* document index: 0, then the end of each document */
    put_u64(out, 0);
    if (write_all(fd, out, 8) != 0) return -1;
    for (size_t i = 0; i < w->ndocs; i += CHUNK) {
        size_t m = w->ndocs - i < CHUNK ? w->ndocs - i : CHUNK;
        for (size_t j = 0; j < m; j++) put_u64(out + 8 * j, (uint64_t)w->docs[i + j]);
        if (write_all(fd, out, 8 * m) != 0) return -1;
    }
    return 0;
}

/* fsyncs the folder holding `path` so the renames survive a crash; errors are ignored (some
 * file systems refuse fsync on folders). */
static void sync_parent(const char *path)
{
    char *dir = td_xstrdup(path);
    char *slash = strrchr(dir, '/');
    if (slash == dir) slash[1] = '\0';
    else if (slash) *slash = '\0';
    else strcpy(dir, ".");
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
    free(dir);
}

int idx_writer_finish(idx_writer *w, char *err, size_t errlen)
{
    if (w->nseq > (w->ndocs ? (size_t)w->docs[w->ndocs - 1] : 0)) idx_writer_end_document(w);
    if (flush_bin(w, err, errlen) != 0) goto fail;
    if (fsync(w->bin_fd) != 0) {
        td_seterr(err, errlen, "cannot fsync %s: %s (is the disk full?)", w->bin_tmp, td_strerror(errno));
        goto fail;
    }
    int fd = open(w->idx_tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        td_seterr(err, errlen, "cannot create %s: %s (check that the output folder is writable)", w->idx_tmp,
               td_strerror(errno));
        goto fail;
    }
    if (write_index(w, fd) != 0 || fsync(fd) != 0) {
        td_seterr(err, errlen, "cannot write %s: %s (is the disk full?)", w->idx_tmp, td_strerror(errno));
        close(fd);
        goto fail;
    }
    if (close(fd) != 0) {
        td_seterr(err, errlen, "cannot close %s: %s (is the disk full?)", w->idx_tmp, td_strerror(errno));
        goto fail;
    }
    int rc = close(w->bin_fd);
    w->bin_fd = -1;
    if (rc != 0) {
        td_seterr(err, errlen, "cannot close %s: %s (is the disk full?)", w->bin_tmp, td_strerror(errno));
        goto fail;
    }
    /* .bin first: a reader that finds the new .idx also finds the .bin it describes. */
    if (rename(w->bin_tmp, w->bin_path) != 0) {
        td_seterr(err, errlen, "cannot rename %s to %s: %s", w->bin_tmp, w->bin_path, td_strerror(errno));
        goto fail;
    }
    if (rename(w->idx_tmp, w->idx_path) != 0) {
        td_seterr(err, errlen, "cannot rename %s to %s: %s (%s was already replaced; rerun to rebuild both)",
               w->idx_tmp, w->idx_path, td_strerror(errno), w->bin_path);
        goto fail;
    }
    sync_parent(w->idx_path);
    writer_free(w);
    return 0;
fail:
    idx_writer_abort(w);
    return -1;
}

void idx_writer_abort(idx_writer *w)
{
    if (!w) return;
    if (w->bin_fd >= 0) close(w->bin_fd);
    unlink(w->bin_tmp);
    unlink(w->idx_tmp);
    writer_free(w);
}

/* ---------------------------------------------------------------------------------------------
 * Reader
 * ------------------------------------------------------------------------------------------- */

struct idx_dataset {
    enum idx_dtype dtype;
    size_t isz;
    int64_t nseq, ndoc_entries, ntokens;
    int32_t *lens;  /* (S) aligned copy of the lengths */
    int64_t *docs;  /* (D) aligned copy of the document index */
    int64_t *first; /* (S) token offset of each sequence in .bin (pointer / item size) */
    const unsigned char *bin; /* mapped .bin, or NULL when it is empty */
    size_t bin_size;
};

static uint64_t get_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int b = 7; b >= 0; b--) v = (v << 8) | p[b];
    return v;
}

static int32_t get_i32(const unsigned char *p)
{
    uint32_t v = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    int32_t s;
    memcpy(&s, &v, sizeof s);
    return s;
}

static int64_t get_i64(const unsigned char *p)
{
    uint64_t v = get_u64(p);
    int64_t s;
    memcpy(&s, &v, sizeof s);
    return s;
}

/* Maps a whole file read-only. *size set; *map NULL for an empty file. 0, or -1 with err. */
static int map_file(const char *path, const unsigned char **map, size_t *size, char *err, size_t errlen)
{
    *map = NULL;
    *size = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        td_seterr(err, errlen, "cannot open %s: %s (is the dataset prefix right? it names PREFIX.bin and PREFIX.idx)",
               path, td_strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        td_seterr(err, errlen, "%s is not a regular file; pass the prefix of a .bin/.idx pair", path);
        close(fd);
        return -1;
    }
    if (st.st_size > 0) {
        if ((uint64_t)st.st_size > SIZE_MAX) {
            td_seterr(err, errlen, "%s is too large to map on this machine", path);
            close(fd);
            return -1;
        }
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) {
            td_seterr(err, errlen, "cannot map %s: %s", path, td_strerror(errno));
            close(fd);
            return -1;
        }
        *map = p;
        *size = (size_t)st.st_size;
    }
    close(fd);
    return 0;
}

#define CORRUPT_HINT "rebuild the dataset with trident preprocess"

/* Validates the mapped .idx (size n) and fills d's counts and aligned copies. 0 or -1 + err. */
static int parse_index(idx_dataset *d, const char *prefix, const unsigned char *m, size_t n, char *err,
                       size_t errlen)
{
    if (n < IDX_HEADER_BYTES) {
        td_seterr(err, errlen, "%s.idx: file is %zu bytes, shorter than the %u-byte MMIDIDX header; the index is truncated, "
               CORRUPT_HINT, prefix, n, IDX_HEADER_BYTES);
        return -1;
    }
    if (memcmp(m, IDX_MAGIC, sizeof IDX_MAGIC) != 0) {
        td_seterr(err, errlen, "%s.idx: bad magic (not a Megatron MMIDIDX index); pass the prefix of a dataset written by "
               "trident preprocess or Megatron's preprocess_data.py", prefix);
        return -1;
    }
    uint64_t version = get_u64(m + 9);
    if (version != IDX_VERSION) {
        td_seterr(err, errlen, "%s.idx: MMIDIDX version %llu, but only version 1 is supported; " CORRUPT_HINT, prefix,
               (unsigned long long)version);
        return -1;
    }
    int code = m[17];
    if (!dtype_is_token_type(code)) {
        td_seterr(err, errlen, "%s.idx: dtype code %d (%s) is not a token type (uint8, int8, int16, uint16, int32); "
               CORRUPT_HINT, prefix, code, idx_dtype_name(code));
        return -1;
    }
    d->dtype = (enum idx_dtype)code;
    d->isz = idx_dtype_size(d->dtype);
    uint64_t nseq = get_u64(m + 18), ndoc = get_u64(m + 26);
    /* Overflow-safe: each sequence costs 12 bytes, each document entry 8. */
    uint64_t body = n - IDX_HEADER_BYTES;
    if (nseq > body / 12 || ndoc > (body - nseq * 12) / 8 || body != nseq * 12 + ndoc * 8) {
        td_seterr(err, errlen, "%s.idx: file is %zu bytes but its header promises %llu sequences and %llu document-index "
               "entries; the index is truncated or corrupt, " CORRUPT_HINT, prefix, n, (unsigned long long)nseq,
               (unsigned long long)ndoc);
        return -1;
    }
    if (ndoc < 1) {
        td_seterr(err, errlen, "%s.idx: the document index is empty (it must hold at least the leading 0); " CORRUPT_HINT,
               prefix);
        return -1;
    }
    d->nseq = (int64_t)nseq;
    d->ndoc_entries = (int64_t)ndoc;
    const unsigned char *lens = m + IDX_HEADER_BYTES, *ptrs = lens + 4 * nseq, *docs = ptrs + 8 * nseq;
    d->lens = td_xmalloc((nseq ? nseq : 1) * sizeof *d->lens);
    d->first = td_xmalloc((nseq ? nseq : 1) * sizeof *d->first);
    d->docs = td_xmalloc(ndoc * sizeof *d->docs);

    /* Lengths and pointers: sequence i starts where i-1 ends, and all lie inside .bin. */
    uint64_t bin_tokens = d->bin_size / d->isz, at = 0;
    if (d->bin_size % d->isz) {
        td_seterr(err, errlen, "%s.bin: size %zu is not a multiple of the %zu-byte %s dtype; the data file is truncated "
               "or corrupt, " CORRUPT_HINT, prefix, d->bin_size, d->isz, idx_dtype_name(code));
        return -1;
    }
    for (uint64_t i = 0; i < nseq; i++) {
        int32_t len = get_i32(lens + 4 * i);
        int64_t ptr = get_i64(ptrs + 8 * i);
        if (len < 0) {
            td_seterr(err, errlen, "%s.idx: sequence %llu has negative length %d; " CORRUPT_HINT, prefix,
                   (unsigned long long)i, (int)len);
            return -1;
        }
        if (ptr < 0 || (uint64_t)ptr != at * d->isz) {
            td_seterr(err, errlen, "%s.idx: sequence %llu points at byte %lld of the data file, but the sequences before it "
                   "end at byte %llu; " CORRUPT_HINT, prefix, (unsigned long long)i, (long long)ptr,
                   (unsigned long long)(at * d->isz));
            return -1;
        }
        if ((uint64_t)len > bin_tokens - at) {
            td_seterr(err, errlen, "%s.idx: sequence %llu (%d tokens at byte %lld) runs past the end of the %zu-byte data "
                   "file; the .bin is truncated or belongs to another index, " CORRUPT_HINT, prefix,
                   (unsigned long long)i, (int)len, (long long)ptr, d->bin_size);
            return -1;
        }
        d->lens[i] = len;
        d->first[i] = (int64_t)at;
        at += (uint64_t)len;
    }
    if (at != bin_tokens) {
        td_seterr(err, errlen, "%s.idx: the index describes %llu tokens but the data file holds %llu; the .bin does not "
               "belong to this index, " CORRUPT_HINT, prefix, (unsigned long long)at, (unsigned long long)bin_tokens);
        return -1;
    }
    d->ntokens = (int64_t)at;

    /* Document index: starts at 0, never decreases, ends at the sequence count. Equal neighbours
     * (a document of no sequences) are what Megatron writes for an empty document. */
    for (uint64_t j = 0; j < ndoc; j++) {
        int64_t v = get_i64(docs + 8 * j);
        int64_t prev = j ? d->docs[j - 1] : 0;
        if (j == 0 && v != 0) {
            td_seterr(err, errlen, "%s.idx: the document index starts at %lld, not 0; " CORRUPT_HINT, prefix, (long long)v);
            return -1;
        }
        if (v < prev || v > d->nseq) {
            td_seterr(err, errlen, "%s.idx: document-index entry %llu is %lld, outside [%lld, %lld] (entries must rise from "
                   "0 to the sequence count); " CORRUPT_HINT, prefix, (unsigned long long)j, (long long)v,
                   (long long)prev, (long long)d->nseq);
            return -1;
        }
        d->docs[j] = v;
    }
    if (d->docs[ndoc - 1] != d->nseq) {
        td_seterr(err, errlen, "%s.idx: the document index ends at %lld but there are %lld sequences; " CORRUPT_HINT, prefix,
               (long long)d->docs[ndoc - 1], (long long)d->nseq);
        return -1;
    }
    return 0;
}

idx_dataset *idx_open(const char *prefix, char *err, size_t errlen)
{
    char *idx_path = path_join(prefix, ".idx"), *bin_path = path_join(prefix, ".bin");
    idx_dataset *d = td_xcalloc(1, sizeof *d);
    const unsigned char *im = NULL;
    size_t isize = 0;
    int ok = map_file(idx_path, &im, &isize, err, errlen) == 0 &&
             map_file(bin_path, &d->bin, &d->bin_size, err, errlen) == 0 &&
             parse_index(d, prefix, im, isize, err, errlen) == 0;
    if (im) munmap((void *)im, isize);
    free(idx_path);
    free(bin_path);
    if (!ok) {
        idx_close(d);
        return NULL;
    }
    return d;
}

void idx_close(idx_dataset *d)
{
    if (!d) return;
    if (d->bin) munmap((void *)d->bin, d->bin_size);
    free(d->lens);
    free(d->docs);
    free(d->first);
    free(d);
}

int64_t idx_num_sequences(const idx_dataset *d) { return d->nseq; }
int64_t idx_num_documents(const idx_dataset *d) { return d->ndoc_entries - 1; }
enum idx_dtype idx_dtype(const idx_dataset *d) { return d->dtype; }
const int32_t *idx_seq_lens(const idx_dataset *d) { return d->lens; }
const int64_t *idx_doc_index(const idx_dataset *d) { return d->docs; }
int64_t idx_num_tokens(const idx_dataset *d) { return d->ntokens; }

int32_t idx_seq_len(const idx_dataset *d, int64_t i)
{
    TD_ASSERT(i >= 0 && i < d->nseq);
    return d->lens[i];
}

void idx_read(const idx_dataset *d, int64_t i, int64_t offset, int64_t n, int32_t *out)
{
    TD_ASSERT(i >= 0 && i < d->nseq);
    TD_ASSERT(offset >= 0 && n >= 0 && offset <= d->lens[i] && n <= d->lens[i] - offset);
    if (n == 0) return;
    const unsigned char *p = d->bin + (size_t)(d->first[i] + offset) * d->isz;
    switch (d->dtype) {
    case IDX_U8:
        for (int64_t k = 0; k < n; k++) out[k] = p[k];
        break;
    case IDX_I8:
        for (int64_t k = 0; k < n; k++) out[k] = (int8_t)p[k];
        break;
    case IDX_U16:
        for (int64_t k = 0; k < n; k++) out[k] = (int32_t)((uint32_t)p[2 * k] | (uint32_t)p[2 * k + 1] << 8);
        break;
    case IDX_I16:
        for (int64_t k = 0; k < n; k++) out[k] = (int16_t)((uint32_t)p[2 * k] | (uint32_t)p[2 * k + 1] << 8);
        break;
    default:
        for (int64_t k = 0; k < n; k++) out[k] = get_i32(p + 4 * k);
        break;
    }
}

/* Largest and smallest id of n tokens at p (in the dtype), vectorized. */
static void seq_range(enum idx_dtype t, const unsigned char *p, int64_t n, int64_t *lo, int64_t *hi)
{
    int64_t mn = 0, mx = 0;
    switch (t) {
    case IDX_U8: {
        unsigned char m = 0;
#pragma omp simd reduction(max : m)
        for (int64_t k = 0; k < n; k++) m = p[k] > m ? p[k] : m;
        mx = m;
        break;
    }
    case IDX_U16: {
        const uint16_t *q = (const uint16_t *)(const void *)p; /* 2-aligned: pointers are multiples of 2 */
        uint16_t m = 0;
#pragma omp simd reduction(max : m)
        for (int64_t k = 0; k < n; k++) m = q[k] > m ? q[k] : m;
        mx = m;
        break;
    }
    case IDX_I8: {
        const int8_t *q = (const int8_t *)(const void *)p;
        int8_t a = 0, b = 0;
#pragma omp simd reduction(min : a) reduction(max : b)
        for (int64_t k = 0; k < n; k++) {
            a = q[k] < a ? q[k] : a;
            b = q[k] > b ? q[k] : b;
        }
        mn = a, mx = b;
        break;
    }
    case IDX_I16: {
        const int16_t *q = (const int16_t *)(const void *)p;
        int16_t a = 0, b = 0;
#pragma omp simd reduction(min : a) reduction(max : b)
        for (int64_t k = 0; k < n; k++) {
            a = q[k] < a ? q[k] : a;
            b = q[k] > b ? q[k] : b;
        }
        mn = a, mx = b;
        break;
    }
    default: {
        const int32_t *q = (const int32_t *)(const void *)p;
        int32_t a = 0, b = 0;
#pragma omp simd reduction(min : a) reduction(max : b)
        for (int64_t k = 0; k < n; k++) {
            a = q[k] < a ? q[k] : a;
            b = q[k] > b ? q[k] : b;
        }
        mn = a, mx = b;
        break;
    }
    }
    *lo = mn;
    *hi = mx;
}

int64_t idx_find_id_outside(const idx_dataset *d, int64_t limit, int64_t *offset, int32_t *id)
{
    int64_t first_bad = INT64_MAX;
#pragma omp parallel for schedule(dynamic, 256) reduction(min : first_bad)
    for (int64_t i = 0; i < d->nseq; i++) {
        if (i > first_bad || d->lens[i] == 0) continue; /* a later bad one changes nothing */
        int64_t lo, hi;
        seq_range(d->dtype, d->bin + (size_t)d->first[i] * d->isz, d->lens[i], &lo, &hi);
        if (lo < 0 || hi >= limit) first_bad = i;
    }
    if (first_bad == INT64_MAX) return -1;
    /* the first token of that sequence that is out of range */
    int32_t buf[4096];
    int64_t len = d->lens[first_bad];
    for (int64_t at = 0; at < len; at += 4096) {
        int64_t n = len - at < 4096 ? len - at : 4096;
        idx_read(d, first_bad, at, n, buf);
        for (int64_t k = 0; k < n; k++)
            if (buf[k] < 0 || buf[k] >= limit) {
                *offset = at + k;
                *id = buf[k];
                return first_bad;
            }
    }
    TD_ASSERT(!"seq_range and idx_read disagree");
    return -1;
}

int64_t idx_token_byte_offset(const idx_dataset *d, int64_t i, int64_t offset)
{
    TD_ASSERT(i >= 0 && i < d->nseq);
    return (d->first[i] + offset) * (int64_t)d->isz;
}

/* ---- the indexed format as a dataset reader (the first row of dataset_reader.c's registry) ---- */

static int ops_probe(const char *prefix, char *file, size_t filelen)
{
    char *p = path_join(prefix, ".idx");
    int why = access(p, R_OK) == 0 ? 0 : errno ? errno : EACCES;
    if (filelen) snprintf(file, filelen, "%s", p);
    free(p);
    return why;
}

static void *ops_open(const char *prefix, char *err, size_t errlen) { return idx_open(prefix, err, errlen); }
static void ops_close(void *h) { idx_close(h); }
static int64_t ops_num_sequences(const void *h) { return idx_num_sequences(h); }
static int64_t ops_num_documents(const void *h) { return idx_num_documents(h); }
static const int32_t *ops_seq_lens(const void *h) { return idx_seq_lens(h); }
static const int64_t *ops_doc_index(const void *h) { return idx_doc_index(h); }
static int64_t ops_num_tokens(const void *h) { return idx_num_tokens(h); }
static void ops_read(const void *h, int64_t i, int64_t offset, int64_t n, int32_t *out)
{
    idx_read(h, i, offset, n, out);
}
static int64_t ops_find_id_outside(const void *h, int64_t limit, int64_t *offset, int32_t *id)
{
    return idx_find_id_outside(h, limit, offset, id);
}
static char *ops_token_file(const char *prefix) { return path_join(prefix, ".bin"); }
static int64_t ops_token_byte_offset(const void *h, int64_t i, int64_t offset)
{
    return idx_token_byte_offset(h, i, offset);
}
static const char *ops_token_type(const void *h) { return idx_dtype_name(idx_dtype(h)); }

const dsr_ops dsr_indexed_ops = {
    .name = "indexed",
    .probe = ops_probe,
    .open = ops_open,
    .close = ops_close,
    .num_sequences = ops_num_sequences,
    .num_documents = ops_num_documents,
    .seq_lens = ops_seq_lens,
    .doc_index = ops_doc_index,
    .num_tokens = ops_num_tokens,
    .read = ops_read,
    .find_id_outside = ops_find_id_outside,
    .token_file = ops_token_file,
    .token_byte_offset = ops_token_byte_offset,
    .token_type = ops_token_type,
};
