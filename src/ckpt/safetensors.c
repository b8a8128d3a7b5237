/* safetensors files: see include/ckpt/trident/safetensors.h. */
#include "trident/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "trident/check.h"

static const struct {
    const char *name;
    size_t size;
} DTYPES[ST_NDTYPES] = {
    [ST_BOOL] = {"BOOL", 1},    [ST_U8] = {"U8", 1},     [ST_I8] = {"I8", 1},   [ST_F8_E5M2] = {"F8_E5M2", 1},
    [ST_F8_E4M3] = {"F8_E4M3", 1}, [ST_I16] = {"I16", 2}, [ST_U16] = {"U16", 2}, [ST_F16] = {"F16", 2},
    [ST_BF16] = {"BF16", 2},    [ST_I32] = {"I32", 4},   [ST_U32] = {"U32", 4}, [ST_F32] = {"F32", 4},
    [ST_F64] = {"F64", 8},      [ST_I64] = {"I64", 8},   [ST_U64] = {"U64", 8},
};

const char *st_dtype_name(st_dtype t) { return (unsigned)t < ST_NDTYPES ? DTYPES[t].name : "?"; }
size_t st_dtype_size(st_dtype t) { return (unsigned)t < ST_NDTYPES ? DTYPES[t].size : 0; }

int st_dtype_parse(const char *s)
{
    for (int i = 0; i < ST_NDTYPES; i++)
        if (strcmp(s, DTYPES[i].name) == 0) return i;
    return -1;
}

/* ---- CRC-32, slicing by 8 ---- */

static uint32_t g_crc[8][256];
static pthread_once_t g_crc_once = PTHREAD_ONCE_INIT;

static void crc_tables(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0xEDB88320u : c >> 1;
        g_crc[0][i] = c;
    }
    for (int t = 1; t < 8; t++)
        for (int i = 0; i < 256; i++) g_crc[t][i] = (g_crc[t - 1][i] >> 8) ^ g_crc[0][g_crc[t - 1][i] & 0xff];
}

static uint32_t crc_serial(uint32_t crc, const uint8_t *p, size_t n)
{
    uint32_t c = ~crc;
    while (n && ((uintptr_t)p & 7)) {
        c = g_crc[0][(c ^ *p++) & 0xff] ^ (c >> 8);
        n--;
    }
    for (; n >= 8; p += 8, n -= 8) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4); /* little-endian words: the format is little-endian throughout */
        memcpy(&hi, p + 4, 4);
        lo ^= c;
        c = g_crc[7][lo & 0xff] ^ g_crc[6][(lo >> 8) & 0xff] ^ g_crc[5][(lo >> 16) & 0xff] ^ g_crc[4][lo >> 24] ^
            g_crc[3][hi & 0xff] ^ g_crc[2][(hi >> 8) & 0xff] ^ g_crc[1][(hi >> 16) & 0xff] ^ g_crc[0][hi >> 24];
    }
    while (n--) c = g_crc[0][(c ^ *p++) & 0xff] ^ (c >> 8);
    return ~c;
}

/* CRC combination over GF(2): the CRC register after `len` zero bytes is a linear map of the
 * register before; square the one-zero-bit operator up to the bits of len. */
static uint32_t gf2_apply(const uint32_t *mat, uint32_t vec)
{
    uint32_t sum = 0;
    for (int i = 0; vec; vec >>= 1, i++)
        if (vec & 1) sum ^= mat[i];
    return sum;
}

static void gf2_square(uint32_t *out, const uint32_t *mat)
{
    for (int i = 0; i < 32; i++) out[i] = gf2_apply(mat, mat[i]);
}

/* CRC of A then B, from crc(A), crc(B) and the length of B. */
static uint32_t crc_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b)
{
    if (len_b == 0) return crc_a;
    uint32_t odd[32], even[32];
    odd[0] = 0xEDB88320u; /* one zero bit */
    for (int i = 1; i < 32; i++) odd[i] = 1u << (i - 1);
    gf2_square(even, odd); /* two zero bits */
    gf2_square(odd, even); /* four */
    for (;;) {             /* then 8, 16, ... bits: one byte, two, ... */
        gf2_square(even, odd);
        if (len_b & 1) crc_a = gf2_apply(even, crc_a);
        if (!(len_b >>= 1)) break;
        gf2_square(odd, even);
        if (len_b & 1) crc_a = gf2_apply(odd, crc_a);
        if (!(len_b >>= 1)) break;
    }
    return crc_a ^ crc_b;
}

uint32_t st_crc32(uint32_t crc, const void *data, size_t n)
{
    pthread_once(&g_crc_once, crc_tables);
    const uint8_t *p = data;
    int nt = omp_get_max_threads();
    if (n < ((size_t)4 << 20) || nt < 2 || omp_in_parallel()) return crc_serial(crc, p, n);
    /* large buffers: pieces in parallel, combined in order */
    if (nt > 64) nt = 64;
    uint32_t part[64];
    size_t piece = (n / (size_t)nt + 63) & ~(size_t)63;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int t = 0; t < nt; t++) {
        size_t b = (size_t)t * piece, e = t == nt - 1 || b + piece > n ? n : b + piece; /* the last takes the rest */
        part[t] = b < n ? crc_serial(0, p + b, e - b) : 0;
    }
    uint32_t c = crc;
    for (int t = 0; t < nt; t++) {
        size_t b = (size_t)t * piece, e = t == nt - 1 || b + piece > n ? n : b + piece;
        if (b < n) c = crc_combine(c, part[t], e - b);
    }
    return c;
}

/* ---- parser ---- */

#define FAIL(...)                                                                        \
    do {                                                                                 \
        snprintf(err, errlen, __VA_ARGS__);                                              \
        goto fail;                                                                       \
    } while (0)

/* Length of the valid UTF-8 sequence at s[0..n), or 0. */
static size_t utf8_len(const uint8_t *s, size_t n)
{
    uint8_t c = s[0];
    if (c < 0x80) return 1;
    size_t len;
    uint32_t cp, min;
    if ((c & 0xe0) == 0xc0) len = 2, cp = c & 0x1f, min = 0x80;
    else if ((c & 0xf0) == 0xe0) len = 3, cp = c & 0x0f, min = 0x800;
    else if ((c & 0xf8) == 0xf0) len = 4, cp = c & 0x07, min = 0x10000;
    else return 0;
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    return len;
}

/* Offset of the first byte that is not valid UTF-8 JSON text (bad sequences, control
 * characters inside strings or other than tab, newline and carriage return outside), or n. */
static size_t bad_text_at(const uint8_t *s, size_t n)
{
    int in_string = 0, escape = 0;
    for (size_t i = 0; i < n;) {
        uint8_t c = s[i];
        if (c < 0x20 && (in_string || (c != '\t' && c != '\n' && c != '\r'))) return i;
        size_t k = utf8_len(s + i, n - i);
        if (!k) return i;
        if (escape) escape = 0;
        else if (in_string && c == '\\') escape = 1;
        else if (c == '"') in_string = !in_string;
        i += k;
    }
    return n;
}

/* A copy of s for messages: at most n - 1 bytes, control characters as '?'. */
static const char *printable(const char *s, char *buf, size_t n)
{
    size_t i = 0;
    for (; s[i] && i + 1 < n; i++) buf[i] = (unsigned char)s[i] < 0x20 ? '?' : s[i];
    buf[i] = 0;
    return buf;
}

/* A JSON number that is a non-negative integer below 2^53. */
static int json_uint(const cJSON *j, uint64_t *out)
{
    if (!cJSON_IsNumber(j)) return 0;
    double d = j->valuedouble;
    if (!(d >= 0) || d > 9007199254740992.0 || floor(d) != d) return 0;
    *out = (uint64_t)d;
    return 1;
}

static int by_offset(const void *a, const void *b)
{
    const st_tensor *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(((const st_tensor *)a)->name, ((const st_tensor *)b)->name);
}

/* Parses one tensor entry `j` (named j->string) into t. */
static int parse_tensor(const cJSON *j, st_tensor *t, char *err, size_t errlen)
{
    char nbuf[128], fbuf[64];
    const char *name = printable(j->string, nbuf, sizeof nbuf);
    if (!cJSON_IsObject(j)) FAIL("tensor '%s' is not a JSON object", name);
    const cJSON *dtype = NULL, *shape = NULL, *offs = NULL;
    for (const cJSON *f = j->child; f; f = f->next) {
        const cJSON **slot = strcmp(f->string, "dtype") == 0 ? &dtype
                             : strcmp(f->string, "shape") == 0 ? &shape
                             : strcmp(f->string, "data_offsets") == 0 ? &offs : NULL;
        if (!slot) FAIL("tensor '%s' has an unknown field '%s'", name, printable(f->string, fbuf, sizeof fbuf));
        if (*slot) FAIL("tensor '%s' has field '%s' twice", name, f->string);
        *slot = f;
    }
    if (!dtype || !shape || !offs) FAIL("tensor '%s' lacks %s", name, !dtype ? "dtype" : !shape ? "shape" : "data_offsets");
    int dt = cJSON_IsString(dtype) ? st_dtype_parse(dtype->valuestring) : -1;
    if (dt < 0) FAIL("tensor '%s' has an unknown dtype", name);
    t->dtype = (st_dtype)dt;
    if (!cJSON_IsArray(shape)) FAIL("tensor '%s': shape is not an array", name);
    int nd = cJSON_GetArraySize(shape);
    if (nd > ST_MAX_DIMS) FAIL("tensor '%s' has %d dimensions (at most %d)", name, nd, ST_MAX_DIMS);
    t->ndim = nd;
    uint64_t numel = 1;
    int k = 0;
    for (const cJSON *d = shape->child; d; d = d->next, k++) {
        uint64_t v;
        if (!json_uint(d, &v)) FAIL("tensor '%s': shape[%d] is not a non-negative integer", name, k);
        t->shape[k] = (int64_t)v;
        if (__builtin_mul_overflow(numel, v, &numel)) FAIL("tensor '%s': the shape overflows", name);
    }
    uint64_t bytes;
    if (__builtin_mul_overflow(numel, (uint64_t)st_dtype_size(t->dtype), &bytes))
        FAIL("tensor '%s': the shape overflows", name);
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 || !json_uint(offs->child, &t->begin) ||
        !json_uint(offs->child->next, &t->end))
        FAIL("tensor '%s': data_offsets is not [begin, end] of non-negative integers", name);
    if (t->end < t->begin) FAIL("tensor '%s': data_offsets [%llu, %llu] ends before it begins", name,
                                (unsigned long long)t->begin, (unsigned long long)t->end);
    if (t->end - t->begin != bytes)
        FAIL("tensor '%s': data_offsets [%llu, %llu] hold %llu bytes but shape and dtype need %llu", name,
             (unsigned long long)t->begin, (unsigned long long)t->end, (unsigned long long)(t->end - t->begin),
             (unsigned long long)bytes);
    return 0;
fail:
    return -1;
}

int st_parse(const uint8_t *buf, size_t len, uint64_t file_size, st_header *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    cJSON *root = NULL;
    if (file_size < 8 || len < 8)
        FAIL("%llu bytes: too short for the 8-byte header length", (unsigned long long)file_size);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | buf[i];
    if (n > ST_MAX_HEADER)
        FAIL("header length %llu is larger than the %u-byte limit: not a safetensors file", (unsigned long long)n,
             ST_MAX_HEADER);
    if (n < 2) FAIL("header length %llu is too short for a JSON object", (unsigned long long)n);
    if (8 + n > file_size)
        FAIL("header length %llu runs past the end of the %llu-byte file: truncated", (unsigned long long)n,
             (unsigned long long)file_size);
    if (8 + n > len) FAIL("header of %llu bytes was not read whole", (unsigned long long)n);
    const uint8_t *hdr = buf + 8;
    out->header_len = n;
    out->data_start = 8 + n;
    out->data_len = file_size - out->data_start;
    size_t bad = bad_text_at(hdr, (size_t)n);
    if (bad < n) FAIL("header byte %zu is not UTF-8 text", bad);
    if (hdr[0] != '{') FAIL("header does not start with '{'");

    const char *end = NULL;
    root = cJSON_ParseWithLengthOpts((const char *)hdr, (size_t)n, &end, 0);
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        size_t pos = at && at >= (const char *)hdr && at <= (const char *)hdr + n ? (size_t)(at - (const char *)hdr) : 0;
        FAIL("header is not valid JSON (near byte %zu)", pos);
    }
    for (const char *p = end; p < (const char *)hdr + n; p++)
        if (*p != ' ') FAIL("header has bytes after its JSON object (only space padding is allowed)");
    if (!cJSON_IsObject(root)) FAIL("header is not a JSON object");

    int count = 0, has_meta = 0;
    for (const cJSON *j = root->child; j; j = j->next) {
        if (strcmp(j->string, "__metadata__") == 0) {
            if (has_meta++) FAIL("header has __metadata__ twice");
            if (!cJSON_IsObject(j)) FAIL("__metadata__ is not a JSON object");
            for (const cJSON *m = j->child; m; m = m->next) {
                char kb[128];
                if (!cJSON_IsString(m))
                    FAIL("__metadata__ value '%s' is not a string", printable(m->string, kb, sizeof kb));
                out->nmeta++;
            }
        } else {
            count++;
        }
    }
    out->tensors = td_xcalloc((size_t)(count ? count : 1), sizeof *out->tensors);
    out->meta_keys = td_xcalloc((size_t)(out->nmeta ? out->nmeta : 1), sizeof(char *));
    out->meta_values = td_xcalloc((size_t)(out->nmeta ? out->nmeta : 1), sizeof(char *));
    int nm = 0;
    for (const cJSON *j = root->child; j; j = j->next) {
        if (strcmp(j->string, "__metadata__") == 0) {
            for (const cJSON *m = j->child; m; m = m->next, nm++) {
                out->meta_keys[nm] = td_xstrdup(m->string);
                out->meta_values[nm] = td_xstrdup(m->valuestring);
            }
            continue;
        }
        st_tensor *t = &out->tensors[out->ntensors];
        t->name = td_xstrdup(j->string);
        out->ntensors++;
        if (!t->name[0]) FAIL("a tensor has an empty name");
        if (parse_tensor(j, t, err, errlen)) goto fail;
    }
    char nb[128];
    for (int i = 1; i < nm; i++)
        for (int k = 0; k < i; k++)
            if (strcmp(out->meta_keys[i], out->meta_keys[k]) == 0)
                FAIL("__metadata__ has key '%s' twice", printable(out->meta_keys[i], nb, sizeof nb));

    if (out->ntensors > 1) {
        qsort(out->tensors, (size_t)out->ntensors, sizeof *out->tensors, by_name);
        for (int i = 1; i < out->ntensors; i++)
            if (strcmp(out->tensors[i].name, out->tensors[i - 1].name) == 0)
                FAIL("tensor '%s' appears twice", printable(out->tensors[i].name, nb, sizeof nb));
        qsort(out->tensors, (size_t)out->ntensors, sizeof *out->tensors, by_offset);
    }
    uint64_t at = 0;
    for (int i = 0; i < out->ntensors; i++) {
        const st_tensor *t = &out->tensors[i];
        if (t->begin != at) {
            if (t->begin < at)
                FAIL("tensor '%s' (bytes %llu..%llu) overlaps the tensor before it (ending at %llu)",
                     printable(t->name, nb, sizeof nb),
                     (unsigned long long)t->begin, (unsigned long long)t->end, (unsigned long long)at);
            FAIL("bytes %llu..%llu of the data belong to no tensor (before '%s')", (unsigned long long)at,
                 (unsigned long long)t->begin, printable(t->name, nb, sizeof nb));
        }
        at = t->end;
    }
    if (at != out->data_len) {
        if (at > out->data_len)
            FAIL("tensor data ends at byte %llu of the data section, but the file holds only %llu: truncated",
                 (unsigned long long)at, (unsigned long long)out->data_len);
        FAIL("the file has %llu bytes after the last tensor", (unsigned long long)(out->data_len - at));
    }
    cJSON_Delete(root);
    return 0;
fail:
    cJSON_Delete(root);
    st_header_free(out);
    return -1;
}

void st_header_free(st_header *h)
{
    for (int i = 0; i < h->ntensors; i++) free(h->tensors[i].name);
    for (int i = 0; i < h->nmeta; i++) {
        if (h->meta_keys) free(h->meta_keys[i]);
        if (h->meta_values) free(h->meta_values[i]);
    }
    free(h->tensors);
    free(h->meta_keys);
    free(h->meta_values);
    memset(h, 0, sizeof *h);
}

const st_tensor *st_find(const st_header *h, const char *name)
{
    for (int i = 0; i < h->ntensors; i++)
        if (strcmp(h->tensors[i].name, name) == 0) return &h->tensors[i];
    return NULL;
}

const char *st_meta(const st_header *h, const char *key)
{
    for (int i = 0; i < h->nmeta; i++)
        if (strcmp(h->meta_keys[i], key) == 0) return h->meta_values[i];
    return NULL;
}

/* ---- files ---- */

st_file *st_open(const char *path, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "%s: %s", path, td_strerror(errno));
        return NULL;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        snprintf(err, errlen, "%s: not a regular file", path);
        close(fd);
        return NULL;
    }
    uint64_t size = (uint64_t)sb.st_size;
    const uint8_t *map = NULL;
    if (size > 0) {
        void *m = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            snprintf(err, errlen, "%s: cannot map %llu bytes: %s", path, (unsigned long long)size, td_strerror(errno));
            close(fd);
            return NULL;
        }
        map = m;
        madvise(m, (size_t)size, MADV_SEQUENTIAL); /* larger readahead; a hint, errors ignored */
    }
    st_file *f = td_xcalloc(1, sizeof *f);
    char why[512];
    if (st_parse(map ? map : (const uint8_t *)"", (size_t)size, size, &f->h, why, sizeof why)) {
        snprintf(err, errlen, "%s: %s", path, why);
        if (map) munmap((void *)map, (size_t)size);
        close(fd);
        free(f);
        return NULL;
    }
    f->fd = fd;
    f->path = td_xstrdup(path);
    f->size = size;
    f->map = map;
    return f;
}

void st_release(const st_file *f, const st_tensor *t)
{
    if (!f->map || t->end <= t->begin) return;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), a = (uintptr_t)st_data(f, t) & ~(page - 1);
    uintptr_t b = (uintptr_t)st_data(f, t) + (size_t)(t->end - t->begin);
    (void)madvise((void *)a, b - a, MADV_DONTNEED); /* a read-only private mapping: nothing is lost */
}

void st_close(st_file *f)
{
    if (!f) return;
    if (f->map) munmap((void *)f->map, (size_t)f->size);
    close(f->fd);
    st_header_free(&f->h);
    free(f->path);
    free(f);
}

/* ---- writer ---- */

typedef struct {
    char *p;
    size_t n, cap;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        b->cap = (b->n + n + 1) * 2;
        b->p = td_xrealloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...)
{
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    TD_ASSERT(k >= 0 && (size_t)k < sizeof tmp);
    sb_put(b, tmp, (size_t)k);
}

static void sb_json_string(sbuf *b, const char *s)
{
    sb_put(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') {
            char e[2] = {'\\', (char)*p};
            sb_put(b, e, 2);
        } else if (*p < 0x20) {
            sb_printf(b, "\\u%04x", *p);
        } else {
            sb_put(b, (const char *)p, 1);
        }
    }
    sb_put(b, "\"", 1);
}

/* The header (JSON, space-padded so the data starts 8-byte aligned) of entries e in order. */
static void build_header(sbuf *h, const st_entry *e, int n, const char *const *meta_keys,
                         const char *const *meta_values, int nmeta)
{
    h->n = 0;
    sb_put(h, "{", 1);
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        uint64_t numel = 1;
        for (int k = 0; k < e[i].ndim; k++) numel *= (uint64_t)e[i].shape[k];
        TD_ASSERT(numel * st_dtype_size(e[i].dtype) == e[i].bytes);
        if (i) sb_put(h, ",", 1);
        sb_json_string(h, e[i].name);
        sb_printf(h, ":{\"dtype\":\"%s\",\"shape\":[", st_dtype_name(e[i].dtype));
        for (int k = 0; k < e[i].ndim; k++) sb_printf(h, "%s%lld", k ? "," : "", (long long)e[i].shape[k]);
        sb_printf(h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                  (unsigned long long)(off + e[i].bytes));
        off += e[i].bytes;
    }
    if (nmeta) {
        sb_put(h, n ? ",\"__metadata__\":{" : "\"__metadata__\":{", n ? 17 : 16);
        for (int i = 0; i < nmeta; i++) {
            if (i) sb_put(h, ",", 1);
            sb_json_string(h, meta_keys[i]);
            sb_put(h, ":", 1);
            sb_json_string(h, meta_values[i]);
        }
        sb_put(h, "}", 1);
    }
    sb_put(h, "}", 1);
    while ((8 + h->n) % 8) sb_put(h, " ", 1);
}

static int pwrite_all(int fd, const void *data, size_t n, off_t at)
{
    const char *p = data;
    while (n) {
        size_t chunk = n < ((size_t)1 << 30) ? n : ((size_t)1 << 30);
        ssize_t w = pwrite(fd, p, chunk, at);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
        at += w;
    }
    return 0;
}

static int write_prefix(int fd, const sbuf *h)
{
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)h->n >> (8 * i));
    return pwrite_all(fd, len8, 8, 0) || pwrite_all(fd, h->p, h->n, 8) ? -1 : 0;
}

static int finish_file(int fd, int do_fsync, const char **what)
{
    *what = "fsync";
    if (do_fsync && fsync(fd) != 0) {
        close(fd);
        return -1;
    }
    *what = "close";
    return close(fd);
}

int st_write(const char *path, const st_entry *e, int n, const char *const *meta_keys,
             const char *const *meta_values, int nmeta, int do_fsync, char *err, size_t errlen)
{
    sbuf h = {0};
    build_header(&h, e, n, meta_keys, meta_values, nmeta);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int rc = -1;
    const char *what = "create";
    if (fd < 0) goto done;
    what = "write";
    if (write_prefix(fd, &h)) goto fail;
    off_t at = (off_t)(8 + h.n);
    for (int i = 0; i < n; i++) {
        if (e[i].bytes && pwrite_all(fd, e[i].data, e[i].bytes, at)) goto fail;
        at += (off_t)e[i].bytes;
    }
    rc = finish_file(fd, do_fsync, &what);
    goto done;
fail: {
    int e = errno; /* the write's reason, not close's */
    close(fd);
    errno = e;
}
done:
    if (rc) snprintf(err, errlen, "cannot %s %s: %s", what, path, td_strerror(errno));
    free(h.p);
    return rc;
}

int st_write_stream(const char *path, const st_entry *e, int n, const char *const *meta_keys,
                    const char *const *meta_values, int nmeta, const st_source *src, int do_fsync, char *err,
                    size_t errlen)
{
    enum { CHUNK = 8 << 20 };
    sbuf h = {0};
    build_header(&h, e, n, meta_keys, meta_values, nmeta);
    size_t hlen = h.n;
    char *buf = td_xmalloc(CHUNK);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int rc = -1;
    const char *what = "create";
    if (fd < 0) goto done;
    what = "write";
    off_t at = (off_t)(8 + hlen);
    for (int i = 0; i < n; i++)
        for (size_t off = 0; off < e[i].bytes; off += CHUNK) {
            size_t k = e[i].bytes - off < CHUNK ? e[i].bytes - off : CHUNK;
            src->read(src->user, i, off, buf, k);
            if (pwrite_all(fd, buf, k, at)) goto fail;
            at += (off_t)k;
        }
    if (src->done) src->done(src->user);
    build_header(&h, e, n, meta_keys, meta_values, nmeta); /* with the values done() set */
    TD_ASSERT(h.n == hlen);
    if (write_prefix(fd, &h)) goto fail;
    rc = finish_file(fd, do_fsync, &what);
    goto done;
fail: {
    int e = errno; /* the write's reason, not close's */
    close(fd);
    errno = e;
}
done:
    if (rc) snprintf(err, errlen, "cannot %s %s: %s", what, path, td_strerror(errno));
    free(buf);
    free(h.p);
    return rc;
}
