/* GPT-2 byte-level BPE: see include/data/trident/bpe.h and docs/tokenizer.md.
 *
 * Encoding is three steps. (1) GPT-2's pre-tokenization regex cuts the text into chunks; bytes
 * the regex cannot match (invalid UTF-8) form chunks of their own. (2) Each byte of a chunk
 * becomes the token of its byte. (3) Adjacent tokens are merged by rank until no ranked pair is
 * left, with the exact semantics of GPT-2's encoder.py: take the lowest-ranked pair, merge all
 * its occurrences left to right, repeat. A heap keeps that O(n log n) on long chunks; a
 * per-worker cache maps short chunks straight to their ids. */
#include "trident/bpe.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <cjson/cJSON.h>
#include <errno.h>
#include <pcre2.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/bpe_merges.h"
#include "trident/check.h"

enum {
    N_BYTE_CHARS = 324,     /* the byte alphabet uses code points 0..323 */
    CACHE_MAX_CHUNK = 128,  /* longer chunks are merged every time */
    CACHE_SLOTS = 1 << 17,  /* per worker; cleared when half full */
    JIT_STACK_MAX = 8 << 20,
    SCRATCH_KEEP = 1 << 16, /* merge scratch (40 bytes per chunk byte) kept between chunks */
};

/* ---- the byte <-> unicode table of GPT-2 ---------------------------------------------- */

/* Bytes 33-126, 161-172 and 174-255 stand for themselves; the other 68 bytes map, in order, to
 * 256, 257, ... so every byte is a printable character. */
static void byte_tables(uint16_t byte_to_cp[256], int16_t cp_to_byte[N_BYTE_CHARS])
{
    int extra = 0;
    for (int i = 0; i < N_BYTE_CHARS; i++) cp_to_byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        int self = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        byte_to_cp[b] = (uint16_t)(self ? b : 256 + extra++);
        cp_to_byte[byte_to_cp[b]] = (int16_t)b;
    }
}

/* ---- Unicode classes of the pre-tokenization regex ------------------------------------ */

/* The reference runs the regex in JavaScript (Node's ICU, Unicode 17.0); PCRE2 10.42 knows
 * Unicode 14.0. These letters (L) and numbers (N) were added between the two; no character
 * left L or N. Listing them makes PCRE2 classify every code point as the reference does. */
static const uint32_t EXTRA_L[][2] = {
    {0x88f, 0x88f}, {0xc5c, 0xc5c}, {0xcdc, 0xcdc}, {0x1c89, 0x1c8a}, {0xa7cb, 0xa7cf},
    {0xa7d2, 0xa7d2}, {0xa7d4, 0xa7d4}, {0xa7da, 0xa7dc}, {0xa7f1, 0xa7f1}, {0x105c0, 0x105f3},
    {0x10940, 0x10959}, {0x10d4a, 0x10d65}, {0x10d6f, 0x10d85}, {0x10ec2, 0x10ec7}, {0x1123f, 0x11240},
    {0x11380, 0x11389}, {0x1138b, 0x1138b}, {0x1138e, 0x1138e}, {0x11390, 0x113b5}, {0x113b7, 0x113b7},
    {0x113d1, 0x113d1}, {0x113d3, 0x113d3}, {0x11bc0, 0x11be0}, {0x11db0, 0x11ddb}, {0x11f02, 0x11f02},
    {0x11f04, 0x11f10}, {0x11f12, 0x11f33}, {0x1342f, 0x1342f}, {0x13441, 0x13446}, {0x13460, 0x143fa},
    {0x16100, 0x1611d}, {0x16d40, 0x16d6c}, {0x16ea0, 0x16eb8}, {0x16ebb, 0x16ed3}, {0x16ff2, 0x16ff3},
    {0x187f8, 0x187ff}, {0x18cff, 0x18cff}, {0x18d09, 0x18d1e}, {0x18d80, 0x18df2}, {0x1b132, 0x1b132},
    {0x1b155, 0x1b155}, {0x1df25, 0x1df2a}, {0x1e030, 0x1e06d}, {0x1e4d0, 0x1e4eb}, {0x1e5d0, 0x1e5ed},
    {0x1e5f0, 0x1e5f0}, {0x1e6c0, 0x1e6de}, {0x1e6e0, 0x1e6e2}, {0x1e6e4, 0x1e6e5}, {0x1e6e7, 0x1e6ed},
    {0x1e6f0, 0x1e6f4}, {0x1e6fe, 0x1e6ff}, {0x2b739, 0x2b73f}, {0x2cea2, 0x2cead}, {0x2ebf0, 0x2ee5d},
    {0x31350, 0x33479},
};
static const uint32_t EXTRA_N[][2] = {
    {0x10d40, 0x10d49}, {0x116d0, 0x116e3}, {0x11bf0, 0x11bf9}, {0x11de0, 0x11de9}, {0x11f50, 0x11f59},
    {0x16130, 0x16139}, {0x16d70, 0x16d79}, {0x16ff4, 0x16ff6}, {0x1ccf0, 0x1ccf9}, {0x1d2c0, 0x1d2d3},
    {0x1e4f0, 0x1e4f9}, {0x1e5f1, 0x1e5fa},
};

/* JavaScript's \s (WhiteSpace and LineTerminator). PCRE2's \s under UCP differs: it adds
 * U+0085 and U+180E and lacks U+FEFF, so the class is spelled out. */
static const char JS_SPACE[] = "\\t\\n\\x{0b}\\f\\r\\x{20}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}"
                               "\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}\\x{feff}";

static size_t append_ranges(char *p, size_t cap, const uint32_t (*r)[2], size_t n)
{
    size_t len = 0;
    for (size_t i = 0; i < n; i++)
        len += (size_t)snprintf(p + len, cap - len, "\\x{%x}-\\x{%x}", r[i][0], r[i][1]);
    return len;
}

/* Writes GPT-2's pattern 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * with \s, \p{L} and \p{N} spelled as the reference's classes. */
static void build_pattern(char *out, size_t cap)
{
    char letters[4096], numbers[1024];
    size_t nl = sizeof EXTRA_L / sizeof EXTRA_L[0], nn = sizeof EXTRA_N / sizeof EXTRA_N[0];
    size_t l = append_ranges(letters, sizeof letters, EXTRA_L, nl);
    size_t n = append_ranges(numbers, sizeof numbers, EXTRA_N, nn);
    TD_ASSERT(l < sizeof letters && n < sizeof numbers);
    int len = snprintf(out, cap,
                       "'s|'t|'re|'ve|'m|'ll|'d| ?[\\p{L}%s]+| ?[\\p{N}%s]+| ?[^%s\\p{L}\\p{N}%s%s]+"
                       "|[%s]+(?![^%s])|[%s]+",
                       letters, numbers, JS_SPACE, letters, numbers, JS_SPACE, JS_SPACE, JS_SPACE);
    TD_ASSERT(len > 0 && (size_t)len < cap);
}

/* ---- tokenizer ------------------------------------------------------------------------ */

struct bpe_tokenizer {
    int n_vocab;
    int eod;
    char *tok_bytes;   /* every token's bytes, concatenated in id order */
    size_t *tok_off;   /* (n_vocab + 1): token i is tok_bytes[tok_off[i] .. tok_off[i+1]) */
    int32_t byte_id[256];
    bpe_merges merges; /* (left, right) -> rank and merged id */
    pcre2_code *re;
    int jit;           /* 1 if the pattern was JIT-compiled */
};

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t v;
        memcpy(&v, s + i, 8);
        h = (h ^ v) * 0xff51afd7ed558ccdull;
        h ^= h >> 32;
    }
    uint64_t v = 0;
    memcpy(&v, s + i, n - i);
    h = (h ^ v) * 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 29);
}

/* Reads a whole file, NUL-terminated. NULL (with errno kept) on failure. */
static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = td_xmalloc(cap);
    for (;;) {
        if (cap - n < 2) buf = td_xrealloc(buf, cap *= 2);
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) break;
    }
    int bad = ferror(f);
    int saved = errno;
    fclose(f);
    if (bad) {
        free(buf);
        errno = saved ? saved : EIO;
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

/* Converts a token spelled in the byte alphabet (UTF-8) to its bytes. Returns the number of
 * bytes written to out (room for n), or -1 if a character is outside the alphabet. */
static long alphabet_to_bytes(const char *s, size_t n, const int16_t *cp_to_byte, char *out)
{
    const unsigned char *u = (const unsigned char *)s;
    long len = 0;
    for (size_t i = 0; i < n;) {
        unsigned cp;
        if (u[i] < 0x80) {
            cp = u[i++];
        } else if ((u[i] & 0xe0) == 0xc0 && i + 1 < n && (u[i + 1] & 0xc0) == 0x80) {
            cp = (unsigned)(u[i] & 0x1f) << 6 | (u[i + 1] & 0x3f);
            i += 2;
        } else {
            return -1; /* the alphabet is U+0000..U+0143: one or two UTF-8 bytes */
        }
        if (cp >= N_BYTE_CHARS || cp_to_byte[cp] < 0) return -1;
        out[len++] = (char)cp_to_byte[cp];
    }
    return len;
}

/* A temporary map from token bytes to id, for resolving merges while loading. */
typedef struct {
    const bpe_tokenizer *t;
    int32_t *slot; /* id, or -1 */
    size_t mask;
} tok_map;

static const char *tok_ptr(const bpe_tokenizer *t, int id, size_t *n)
{
    *n = t->tok_off[id + 1] - t->tok_off[id];
    return t->tok_bytes + t->tok_off[id];
}

/* Returns the id of the token with these bytes, or -1. With insert_id >= 0, inserts it instead
 * and returns the id already there (or -1 if none was). */
static int tok_map_find(tok_map *m, const char *s, size_t n, int insert_id)
{
    for (size_t i = hash_bytes(s, n) & m->mask;; i = (i + 1) & m->mask) {
        int32_t id = m->slot[i];
        if (id < 0) {
            if (insert_id >= 0) m->slot[i] = insert_id;
            return -1;
        }
        size_t len;
        const char *p = tok_ptr(m->t, id, &len);
        if (len == n && memcmp(p, s, n) == 0) return id;
    }
}

/* Fills ids and bytes of every token from the parsed vocab object. */
static int vocab_fill(bpe_tokenizer *t, const cJSON *root, const char *path, const int16_t *cp_to_byte,
                      char *err, size_t errlen)
{
    int n = cJSON_GetArraySize(root);
    t->n_vocab = n;
    t->tok_off = td_xcalloc((size_t)n + 1, sizeof *t->tok_off);
    char **bytes = td_xcalloc((size_t)n ? (size_t)n : 1, sizeof *bytes);
    size_t *lens = td_xcalloc((size_t)n ? (size_t)n : 1, sizeof *lens);
    size_t total = 0;
    int rc = -1;
    for (const cJSON *it = root->child; it; it = it->next) {
        const char *key = it->string;
        double v = cJSON_IsNumber(it) ? it->valuedouble : -1;
        if (!cJSON_IsNumber(it) || v < 0 || v >= n || v != (double)(int)v) {
            td_seterr(err, errlen, "vocab file '%s': token \"%.40s\" has id %s; ids must be the integers 0..%d "
                    "(expected GPT-2's vocab.json)", path, key, cJSON_IsNumber(it) ? "out of range" : "that is "
                    "not a number", n - 1);
            goto out;
        }
        int id = (int)v;
        if (bytes[id]) {
            td_seterr(err, errlen, "vocab file '%s': id %d is given to two tokens (\"%.40s\" and another); ids "
                    "must be unique", path, id, key);
            goto out;
        }
        size_t klen = strlen(key);
        bytes[id] = td_xmalloc(klen + 1);
        long blen = alphabet_to_bytes(key, klen, cp_to_byte, bytes[id]);
        if (blen < 0) {
            td_seterr(err, errlen, "vocab file '%s': token \"%.40s\" (id %d) has a character outside GPT-2's byte "
                    "alphabet; is this a byte-level BPE vocab?", path, key, id);
            goto out;
        }
        lens[id] = (size_t)blen;
        total += (size_t)blen;
    }
    t->tok_bytes = td_xmalloc(total ? total : 1);
    for (int i = 0; i < n; i++) {
        memcpy(t->tok_bytes + t->tok_off[i], bytes[i], lens[i]);
        t->tok_off[i + 1] = t->tok_off[i] + lens[i];
    }
    rc = 0;
out:
    for (int i = 0; i < n; i++) free(bytes[i]);
    free(bytes);
    free(lens);
    return rc;
}

/* Indexes the tokens by their bytes; checks they are unique and cover every byte. */
static int vocab_index(bpe_tokenizer *t, tok_map *m, const char *path, char *err, size_t errlen)
{
    size_t cap = 1;
    while (cap < 2 * (size_t)t->n_vocab) cap <<= 1;
    *m = (tok_map){t, td_xmalloc(cap * sizeof(int32_t)), cap - 1};
    memset(m->slot, 0xff, cap * sizeof(int32_t));
    for (int id = 0; id < t->n_vocab; id++) {
        size_t n;
        const char *s = tok_ptr(t, id, &n);
        int old = tok_map_find(m, s, n, id);
        if (old >= 0) {
            td_seterr(err, errlen, "vocab file '%s': ids %d and %d spell the same token; tokens must be unique",
                    path, old, id);
            return -1;
        }
    }
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        t->byte_id[b] = tok_map_find(m, &c, 1, -1);
        if (t->byte_id[b] < 0) {
            td_seterr(err, errlen, "vocab file '%s' has no token for byte 0x%02x; a byte-level BPE vocab has all "
                    "256 (expected GPT-2's vocab.json)", path, b);
            return -1;
        }
    }
    t->eod = tok_map_find(m, "<|endoftext|>", 13, -1);
    if (t->eod < 0) {
        td_seterr(err, errlen, "vocab file '%s' has no \"<|endoftext|>\" token (expected GPT-2's vocab.json)", path);
        return -1;
    }
    return 0;
}

static int load_vocab(bpe_tokenizer *t, tok_map *m, const char *path, const int16_t *cp_to_byte, char *err,
                      size_t errlen)
{
    size_t len = 0;
    char *text = read_file(path, &len);
    if (!text) {
        td_seterr(err, errlen, "cannot read vocab file '%s': %s (expected GPT-2's vocab.json)", path,
                td_strerror(errno));
        return -1;
    }
    const char *at = NULL; /* where parsing stopped (cJSON_GetErrorPtr is a global) */
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &at, 0);
    int rc = -1;
    if (!root) {
        size_t off = at && at >= text && at <= text + len ? (size_t)(at - text) : 0;
        td_seterr(err, errlen, "vocab file '%s' is not valid JSON (near byte %zu); expected GPT-2's vocab.json, an "
                "object of token -> id", path, off);
    } else if (!cJSON_IsObject(root)) {
        td_seterr(err, errlen, "vocab file '%s' is JSON but not an object; expected GPT-2's vocab.json, an object "
                "of token -> id", path);
    } else if (vocab_fill(t, root, path, cp_to_byte, err, errlen) == 0) {
        rc = vocab_index(t, m, path, err, errlen);
    }
    cJSON_Delete(root);
    free(text);
    return rc;
}

/* Resolves one merge line "a b" into ids; returns -1 with err set if it is malformed. */
static int merge_line(tok_map *m, const int16_t *cp_to_byte, char *line, size_t n,
                      int32_t ids[3], const char *path, long lineno, char *err, size_t errlen)
{
    char *sp = memchr(line, ' ', n);
    char *a = line, *b = sp ? sp + 1 : NULL;
    size_t na = sp ? (size_t)(sp - line) : n, nb = sp ? n - na - 1 : 0;
    if (!sp || na == 0 || nb == 0 || memchr(b, ' ', nb)) {
        td_seterr(err, errlen, "merges file '%s' line %ld: expected two tokens separated by one space, got "
                "\"%.*s\" (expected GPT-2's merges.txt)", path, lineno, (int)(n < 60 ? n : 60), line);
        return -1;
    }
    char *buf = td_xmalloc(n);
    long ba = alphabet_to_bytes(a, na, cp_to_byte, buf);
    long bb = ba < 0 ? -1 : alphabet_to_bytes(b, nb, cp_to_byte, buf + ba);
    int rc = -1;
    if (ba < 0 || bb < 0) {
        td_seterr(err, errlen, "merges file '%s' line %ld: \"%.*s\" has a character outside GPT-2's byte alphabet",
                path, lineno, (int)(n < 60 ? n : 60), line);
    } else if ((ids[0] = tok_map_find(m, buf, (size_t)ba, -1)) < 0 ||
               (ids[1] = tok_map_find(m, buf + ba, (size_t)bb, -1)) < 0) {
        td_seterr(err, errlen, "merges file '%s' line %ld: token \"%.*s\" is not in the vocab file; are the vocab "
                "and merges files from the same tokenizer?", path, lineno,
                (int)(ids[0] < 0 ? na : nb), ids[0] < 0 ? a : b);
    } else if ((ids[2] = tok_map_find(m, buf, (size_t)(ba + bb), -1)) < 0) {
        td_seterr(err, errlen, "merges file '%s' line %ld: the merged token \"%.*s%.*s\" is not in the vocab file; "
                "are the vocab and merges files from the same tokenizer?", path, lineno, (int)na, a, (int)nb, b);
    } else {
        rc = 0;
    }
    free(buf);
    return rc;
}

static int load_merges(bpe_tokenizer *t, tok_map *m, const char *path, const int16_t *cp_to_byte, char *err,
                       size_t errlen)
{
    size_t len = 0;
    char *text = read_file(path, &len);
    if (!text) {
        td_seterr(err, errlen, "cannot read merges file '%s': %s (expected GPT-2's merges.txt)", path,
                td_strerror(errno));
        return -1;
    }
    size_t n_lines = 1;
    for (size_t i = 0; i < len; i++) n_lines += text[i] == '\n';
    bpe_merges_init(&t->merges, n_lines);
    int32_t rank = 0;
    long lineno = 0;
    int rc = 0;
    for (char *p = text; p < text + len && rc == 0;) {
        char *nl = memchr(p, '\n', (size_t)(text + len - p));
        char *end = nl ? nl : text + len;
        size_t n = (size_t)(end - p);
        lineno++;
        while (n && (p[n - 1] == '\r' || p[n - 1] == ' ' || p[n - 1] == '\t')) n--;
        int header = lineno == 1 && n >= 8 && memcmp(p, "#version", 8) == 0;
        if (n && !header) {
            int32_t ids[3];
            rc = merge_line(m, cp_to_byte, p, n, ids, path, lineno, err, errlen);
            if (rc == 0) bpe_merges_put(&t->merges, ids[0], ids[1], rank++, ids[2]); /* a later line wins, as in GPT-2 */
        }
        p = end + 1;
    }
    free(text);
    return rc;
}

/* Quotes token bytes for a message: printable ASCII as is, other bytes as \xNN. */
static void quote_token(char *out, size_t cap, const char *s, size_t n)
{
    size_t len = 0;
    for (size_t i = 0; i < n && len + 5 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') out[len++] = (char)c;
        else len += (size_t)snprintf(out + len, cap - len, "\\x%02x", c);
    }
    out[len] = 0;
}

/* In a byte-level BPE vocab every token is a byte, a special token, or the result of a merge
 * (training adds exactly those), so the vocab size is 256 + the distinct merge results + the
 * specials. A merges file cut short (or from another tokenizer) leaves tokens that no merge
 * makes: the first such token is named. */
static int check_coverage(const bpe_tokenizer *t, const char *vocab_path, const char *merges_path, char *err,
                          size_t errlen)
{
    char *made = td_xcalloc((size_t)t->n_vocab, 1);
    int n_made = 0, n_special = 0, first = -1;
    for (size_t i = 0; i <= t->merges.mask; i++) {
        const bpe_merge *s = &t->merges.slots[i];
        if (s->key && !made[s->id]) made[s->id] = 1, n_made++;
    }
    for (int id = 0; id < t->n_vocab; id++) {
        size_t n;
        const char *p = tok_ptr(t, id, &n);
        if (n == 1 || made[id]) continue;
        if (bpe_special_form(p, n)) n_special++;
        else if (first < 0) first = id;
    }
    free(made);
    if (first < 0) return 0;
    size_t n;
    const char *p = tok_ptr(t, first, &n);
    char q[128];
    quote_token(q, sizeof q, p, n < 40 ? n : 40);
    td_seterr(err, errlen, "vocab file '%s' and merges file '%s' disagree: token \"%s\" (id %d) is not a byte, not a "
            "special token and made by no merge (the merges make %d tokens: with 256 bytes and %d special the vocab "
            "would hold %d, it holds %d); is the merges file truncated? Use the vocab.json and merges.txt of one "
            "tokenizer", vocab_path, merges_path, q, first, n_made, n_special, 256 + n_made + n_special, t->n_vocab);
    return -1;
}

static int compile_regex(bpe_tokenizer *t, char *err, size_t errlen)
{
    char pattern[16384];
    build_pattern(pattern, sizeof pattern);
    int code;
    PCRE2_SIZE at;
    t->re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &code, &at, NULL);
    if (!t->re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        td_seterr(err, errlen, "compiling GPT-2's pre-tokenization regex failed at offset %zu: %s (is libpcre2-8 "
                "built with Unicode support?)", (size_t)at, (char *)msg);
        return -1;
    }
    /* TD_BPE_NO_JIT=1 forces the interpreter, so tests can hold it against the JIT */
    const char *no_jit = getenv("TD_BPE_NO_JIT");
    t->jit = !(no_jit && strcmp(no_jit, "1") == 0) && pcre2_jit_compile(t->re, PCRE2_JIT_COMPLETE) == 0;
    if (!t->jit) TD_DEBUG("bpe: the regex runs without PCRE2's JIT (slower)");
    return 0;
}

bpe_tokenizer *bpe_load(const char *vocab_json, const char *merges_txt, char *err, size_t errlen)
{
    uint16_t byte_to_cp[256];
    int16_t cp_to_byte[N_BYTE_CHARS];
    byte_tables(byte_to_cp, cp_to_byte);
    bpe_tokenizer *t = td_xcalloc(1, sizeof *t);
    tok_map m = {0};
    td_seterr(err, errlen, "no error");
    int rc = load_vocab(t, &m, vocab_json, cp_to_byte, err, errlen);
    if (rc == 0) rc = load_merges(t, &m, merges_txt, cp_to_byte, err, errlen);
    if (rc == 0) rc = check_coverage(t, vocab_json, merges_txt, err, errlen);
    if (rc == 0) rc = compile_regex(t, err, errlen);
    free(m.slot);
    if (rc != 0) {
        bpe_free(t);
        return NULL;
    }
    return t;
}

void bpe_free(bpe_tokenizer *t)
{
    if (!t) return;
    pcre2_code_free(t->re);
    free(t->tok_bytes);
    free(t->tok_off);
    bpe_merges_free(&t->merges);
    free(t);
}

int bpe_vocab_size(const bpe_tokenizer *t) { return t->n_vocab; }
int bpe_eod_id(const bpe_tokenizer *t) { return t->eod; }

/* ---- worker --------------------------------------------------------------------------- */

typedef struct {
    uint64_t hash;  /* 0: empty */
    uint32_t key;   /* offset of the chunk bytes in keys */
    uint32_t val;   /* offset of the ids in vals */
    uint16_t key_len;
    uint16_t n_ids;
} cache_slot;

struct bpe_worker {
    const bpe_tokenizer *t;
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *stack;
    /* merge scratch, one entry per byte of the chunk */
    int32_t *id, *prev, *next, *pending;
    uint64_t *heap; /* (rank << 32 | position), a min-heap */
    size_t scratch_cap;
    /* chunk -> ids cache */
    cache_slot *slots;
    size_t cache_used;
    char *keys;
    size_t keys_len, keys_cap;
    int32_t *vals;
    size_t vals_len, vals_cap;
};

static void scratch_release(bpe_worker *w);

bpe_worker *bpe_worker_new(const bpe_tokenizer *t)
{
    bpe_worker *w = td_xcalloc(1, sizeof *w);
    w->t = t;
    w->md = pcre2_match_data_create_from_pattern(t->re, NULL);
    w->mctx = pcre2_match_context_create(NULL);
    TD_CHECK(w->md && w->mctx, "reduce the number of workers", "allocating PCRE2 match data");
    pcre2_set_match_limit(w->mctx, UINT32_MAX);
    pcre2_set_depth_limit(w->mctx, UINT32_MAX);
    pcre2_set_heap_limit(w->mctx, UINT32_MAX);
    if (t->jit) {
        w->stack = pcre2_jit_stack_create(32 << 10, JIT_STACK_MAX, NULL);
        TD_CHECK(w->stack, "reduce the number of workers", "allocating a PCRE2 JIT stack");
        pcre2_jit_stack_assign(w->mctx, NULL, w->stack);
    }
    w->slots = td_xcalloc(CACHE_SLOTS, sizeof *w->slots);
    return w;
}

void bpe_worker_free(bpe_worker *w)
{
    if (!w) return;
    pcre2_match_data_free(w->md);
    pcre2_match_context_free(w->mctx);
    pcre2_jit_stack_free(w->stack);
    scratch_release(w);
    free(w->slots);
    free(w->keys);
    free(w->vals);
    free(w);
}

void bpe_ids_push(bpe_ids *v, int32_t id)
{
    if (v->n == v->cap) {
        v->cap = v->cap ? 2 * v->cap : 256;
        v->ids = td_xrealloc(v->ids, v->cap * sizeof *v->ids);
    }
    v->ids[v->n++] = id;
}

static void ids_append(bpe_ids *v, const int32_t *ids, size_t n)
{
    if (v->n + n > v->cap) {
        while (v->n + n > v->cap) v->cap = v->cap ? 2 * v->cap : 256;
        v->ids = td_xrealloc(v->ids, v->cap * sizeof *v->ids);
    }
    memcpy(v->ids + v->n, ids, n * sizeof *ids);
    v->n += n;
}

void bpe_ids_free(bpe_ids *v)
{
    free(v->ids);
    *v = (bpe_ids){0};
}

/* ---- merging -------------------------------------------------------------------------- */

static void scratch_release(bpe_worker *w)
{
    free(w->id);
    free(w->prev);
    free(w->next);
    free(w->pending);
    free(w->heap);
    w->id = w->prev = w->next = w->pending = NULL;
    w->heap = NULL;
    w->scratch_cap = 0;
}

static void scratch_reserve(bpe_worker *w, size_t n)
{
    if (n <= w->scratch_cap) return;
    size_t cap = w->scratch_cap ? w->scratch_cap : 64;
    while (cap < n) cap *= 2;
    w->id = td_xrealloc(w->id, cap * sizeof *w->id);
    w->prev = td_xrealloc(w->prev, cap * sizeof *w->prev);
    w->next = td_xrealloc(w->next, cap * sizeof *w->next);
    w->pending = td_xrealloc(w->pending, cap * sizeof *w->pending);
    w->heap = td_xrealloc(w->heap, 3 * cap * sizeof *w->heap); /* n-1 pairs, then 2 per merge */
    w->scratch_cap = cap;
}

static void heap_push(uint64_t *h, size_t *n, uint64_t v)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (h[parent] <= v) break;
        h[i] = h[parent];
        i = parent;
    }
    h[i] = v;
}

static uint64_t heap_pop(uint64_t *h, size_t *n)
{
    uint64_t top = h[0], last = h[--*n];
    size_t i = 0, len = *n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= len) break;
        if (c + 1 < len && h[c + 1] < h[c]) c++;
        if (h[c] >= last) break;
        h[i] = h[c];
        i = c;
    }
    if (len) h[i] = last;
    return top;
}

/* Pushes the pair starting at symbol p, if p has a right neighbour and the pair has a rank. */
static void push_pair(bpe_worker *w, size_t *hn, int32_t p)
{
    if (p < 0 || w->next[p] < 0) return;
    const bpe_merge *s = bpe_merges_find(&w->t->merges, w->id[p], w->id[w->next[p]]);
    if (s) heap_push(w->heap, hn, (uint64_t)(uint32_t)s->rank << 32 | (uint32_t)p);
}

/* Merges the bytes s[0..n) into tokens, written to w->id along the w->next list from 0.
 * Each round takes the lowest rank present and merges all its occurrences left to right
 * (the heap pops equal ranks by position); pairs the round creates join the heap after it. */
static void merge_chunk(bpe_worker *w, const unsigned char *s, size_t n)
{
    scratch_reserve(w, n);
    int32_t *id = w->id, *prev = w->prev, *next = w->next;
    for (size_t i = 0; i < n; i++) {
        id[i] = w->t->byte_id[s[i]];
        prev[i] = (int32_t)i - 1;
        next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    size_t hn = 0;
    for (size_t i = 0; i + 1 < n; i++) push_pair(w, &hn, (int32_t)i);
    while (hn) {
        uint32_t rank = (uint32_t)(w->heap[0] >> 32);
        size_t n_pending = 0;
        while (hn && (uint32_t)(w->heap[0] >> 32) == rank) {
            int32_t p = (int32_t)(uint32_t)heap_pop(w->heap, &hn);
            int32_t q = next[p];
            if (id[p] < 0 || q < 0) continue; /* p was merged away, or is last now */
            const bpe_merge *pair = bpe_merges_find(&w->t->merges, id[p], id[q]);
            if (!pair || (uint32_t)pair->rank != rank) continue; /* stale entry */
            id[p] = pair->id;
            id[q] = -1;
            next[p] = next[q];
            if (next[q] >= 0) prev[next[q]] = p;
            w->pending[n_pending++] = p;
        }
        for (size_t i = 0; i < n_pending; i++) {
            int32_t p = w->pending[i];
            push_pair(w, &hn, prev[p]);
            push_pair(w, &hn, p);
        }
    }
}

/* ---- the chunk cache ------------------------------------------------------------------ */

static void cache_clear(bpe_worker *w)
{
    memset(w->slots, 0, CACHE_SLOTS * sizeof *w->slots);
    w->cache_used = w->keys_len = w->vals_len = 0;
}

static cache_slot *cache_find(bpe_worker *w, const char *s, size_t n, uint64_t hash)
{
    for (size_t i = hash & (CACHE_SLOTS - 1);; i = (i + 1) & (CACHE_SLOTS - 1)) {
        cache_slot *c = &w->slots[i];
        if (c->hash == 0) return c;
        if (c->hash == hash && c->key_len == n && memcmp(w->keys + c->key, s, n) == 0) return c;
    }
}

static void cache_store(bpe_worker *w, cache_slot *c, uint64_t hash, const char *s, size_t n,
                        const int32_t *ids, size_t n_ids)
{
    if (w->keys_len + n > w->keys_cap) {
        w->keys_cap = w->keys_cap ? 2 * w->keys_cap : 1 << 20;
        w->keys = td_xrealloc(w->keys, w->keys_cap);
    }
    if (w->vals_len + n_ids > w->vals_cap) {
        w->vals_cap = w->vals_cap ? 2 * w->vals_cap : 1 << 18;
        w->vals = td_xrealloc(w->vals, w->vals_cap * sizeof *w->vals);
    }
    memcpy(w->keys + w->keys_len, s, n);
    memcpy(w->vals + w->vals_len, ids, n_ids * sizeof *ids);
    *c = (cache_slot){hash, (uint32_t)w->keys_len, (uint32_t)w->vals_len, (uint16_t)n, (uint16_t)n_ids};
    w->keys_len += n;
    w->vals_len += n_ids;
    w->cache_used++;
}

/* Appends the ids of one chunk. */
static void encode_chunk(bpe_worker *w, const char *s, size_t n, bpe_ids *out)
{
    if (n == 1) {
        bpe_ids_push(out, w->t->byte_id[(unsigned char)s[0]]);
        return;
    }
    cache_slot *c = NULL;
    uint64_t hash = 0;
    if (n <= CACHE_MAX_CHUNK) {
        hash = hash_bytes(s, n) | 1;
        c = cache_find(w, s, n, hash);
        if (c->hash) {
            ids_append(out, w->vals + c->val, c->n_ids);
            return;
        }
    }
    merge_chunk(w, (const unsigned char *)s, n);
    size_t first = out->n;
    for (int32_t p = 0; p >= 0; p = w->next[p]) bpe_ids_push(out, w->id[p]);
    if (!c) {
        if (w->scratch_cap > SCRATCH_KEEP) scratch_release(w); /* a huge chunk: do not hold 40 B/byte */
        return;
    }
    if (2 * (w->cache_used + 1) > CACHE_SLOTS) {
        cache_clear(w);
        c = cache_find(w, s, n, hash);
    }
    cache_store(w, c, hash, s, n, out->ids + first, out->n - first);
}

/* ---- encode and decode ---------------------------------------------------------------- */

/* Runs the regex on text[0..end) from pos; returns pcre2's result code. */
static int match_in(bpe_worker *w, const char *text, size_t end, size_t pos)
{
    if (w->t->jit) return pcre2_jit_match(w->t->re, (PCRE2_SPTR)text, end, pos, 0, w->md, w->mctx);
    return pcre2_match(w->t->re, (PCRE2_SPTR)text, end, pos, 0, w->md, w->mctx);
}

/* Finds the next regex match at or after pos: 1 with [*s, *e) set, or 0 if there is none.
 * Without JIT, pcre2_match checks the UTF-8 of the whole subject on every call (quadratic over
 * a long text), so it gets a window from pos that doubles until the result cannot depend on
 * what lies past it: a match that ends 4 or more bytes before the window's end has seen its
 * one character of lookahead whole, and any alternative that would run past the window reaches
 * within 4 bytes of its end (its greedy repeats stop only at a character boundary there). */
static int next_match(bpe_worker *w, const char *text, size_t len, size_t pos, size_t *s, size_t *e)
{
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(w->md);
    int rc;
    if (w->t->jit) {
        rc = match_in(w, text, len, pos);
    } else {
        for (size_t window = 256;; window *= 2) {
            size_t end = len - pos > window ? pos + window : len;
            rc = match_in(w, text, end, pos);
            if (end == len || (rc >= 0 && ov[1] + 4 <= end)) break;
        }
    }
    if (rc == PCRE2_ERROR_NOMATCH) return 0;
    if (rc < 0) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof msg);
        td_die(__FILE__, __LINE__, "pcre2_match", "this is a bug in trident; please report it with the input",
               "matching GPT-2's pre-tokenization regex at byte %zu: %s", pos, (char *)msg);
    }
    *s = ov[0];
    *e = ov[1];
    TD_ASSERT(*s >= pos && *e > *s && *e <= len);
    return 1;
}

void bpe_encode(bpe_worker *w, const char *text, size_t len, bpe_ids *out)
{
    size_t pos = 0, s, e;
    while (pos < len) {
        if (!next_match(w, text, len, pos, &s, &e)) s = e = len;
        if (s > pos) encode_chunk(w, text + pos, s - pos, out); /* bytes no match covers */
        if (e > s) encode_chunk(w, text + s, e - s, out);
        pos = e;
    }
}

int bpe_decode(const bpe_tokenizer *t, const int32_t *ids, size_t n, char **out, size_t *out_len, char *err,
               size_t errlen)
{
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_vocab) {
            td_seterr(err, errlen, "token id %d (position %zu) is out of range: the vocab has ids 0..%d", ids[i], i,
                    t->n_vocab - 1);
            return -1;
        }
        total += t->tok_off[ids[i] + 1] - t->tok_off[ids[i]];
    }
    char *buf = td_xrealloc(*out, total ? total : 1);
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        size_t k;
        const char *p = tok_ptr(t, ids[i], &k);
        memcpy(buf + len, p, k);
        len += k;
    }
    *out = buf;
    *out_len = len;
    return 0;
}
