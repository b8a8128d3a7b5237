/* Hugging Face tokenizer.json (BPE models): see include/trident/hf_tokenizer.h and
 * docs/tokenizer.md. The semantics are those of the Rust `tokenizers` library:
 *
 *   text -> added tokens whose "normalized" is false, split out whole (leftmost-longest)
 *        -> each remaining piece: normalizer, then added tokens whose "normalized" is true
 *        -> each remaining piece: pre-tokenizers in order, each cutting every piece further
 *        -> each word: BPE (ignore_merges, chars or bytes to symbols, byte fallback, unknown
 *           token, merges in (rank, position) order from one heap) -> ids
 *
 * Text is kept as raw bytes throughout. A ByteLevel pre-tokenizer (which must come last) only
 * changes how the model sees a word: as bytes, with the vocab and merges translated from
 * GPT-2's byte alphabet at load. The library's regexes run on Oniguruma; here they run on PCRE2
 * with \s, \p{L} and \p{N} rewritten to Oniguruma's classes (regex_rewrite). */
#include "trident/hf_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <cjson/cJSON.h>
#include <errno.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/check.h"

enum {
    MAX_ID = 1 << 24,       /* ids beyond this are refused: the tables are dense */
    MAX_STEPS = 32,         /* normalizers, pre-tokenizers or decoders in one file */
    CACHE_MAX_WORD = 128,   /* longer words are merged every time */
    CACHE_SLOTS = 1 << 16,  /* per worker; cleared when half full */
    JIT_STACK_MAX = 8 << 20,
    ARENA_BLOCK = 1 << 20,
};

/* ---- small helpers --------------------------------------------------------------------- */

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
    return h ^ (h >> 29);
}

static uint64_t hash_u64(uint64_t x)
{
    x *= 0x9e3779b97f4a7c15ull;
    return x ^ (x >> 31);
}

/* Length of the valid UTF-8 character at s (1-4), or 0 if the bytes there are not one. */
static size_t utf8_len(const unsigned char *s, size_t n, uint32_t *cp)
{
    unsigned c = s[0];
    size_t k;
    uint32_t v, min;
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    if (c >= 0xc2 && c <= 0xdf) k = 2, v = c & 0x1f, min = 0x80;
    else if (c >= 0xe0 && c <= 0xef) k = 3, v = c & 0x0f, min = 0x800;
    else if (c >= 0xf0 && c <= 0xf4) k = 4, v = c & 0x07, min = 0x10000;
    else return 0;
    if (k > n) return 0;
    for (size_t i = 1; i < k; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        v = v << 6 | (s[i] & 0x3f);
    }
    if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) return 0;
    *cp = v;
    return k;
}

/* Bytes of one "character" at s: a valid UTF-8 character, or one byte of invalid input. */
static size_t char_len(const char *s, size_t n)
{
    uint32_t cp;
    size_t k = utf8_len((const unsigned char *)s, n, &cp);
    return k ? k : 1;
}

/* Rust's char::is_whitespace (Unicode White_Space). */
static int is_space_cp(uint32_t c)
{
    return (c >= 9 && c <= 13) || c == 0x20 || c == 0x85 || c == 0xa0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200a) ||
           c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

/* GPT-2's byte alphabet: bytes 33-126, 161-172, 174-255 are themselves, the other 68 map in
 * order to U+0100.. . cp_to_byte has 324 entries (-1: not in the alphabet). */
static void byte_alphabet(int16_t cp_to_byte[324])
{
    int extra = 0;
    for (int i = 0; i < 324; i++) cp_to_byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        int self = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        cp_to_byte[self ? b : 256 + extra++] = (int16_t)b;
    }
}

/* Converts a string of the byte alphabet to its bytes in out (room for n). -1 if a character is
 * outside the alphabet. */
static long alphabet_to_bytes(const char *s, size_t n, const int16_t *cp_to_byte, char *out)
{
    long len = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t k = utf8_len((const unsigned char *)s + i, n - i, &cp);
        if (!k || cp >= 324 || cp_to_byte[cp] < 0) return -1;
        out[len++] = (char)cp_to_byte[cp];
        i += k;
    }
    return len;
}

/* Reads a whole file. NULL (errno kept) on failure. */
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
    int bad = ferror(f), saved = errno;
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

/* ---- string pool and string -> id map ------------------------------------------------- */

typedef struct {
    char *p;
    size_t n, cap;
} strpool;

static uint32_t pool_add(strpool *sp, const char *s, size_t n)
{
    if (!sp->p || sp->n + n > sp->cap) { /* allocated even for "": tokens point into it */
        while (!sp->cap || sp->n + n > sp->cap) sp->cap = sp->cap ? 2 * sp->cap : 1 << 16;
        sp->p = td_xrealloc(sp->p, sp->cap);
    }
    TD_CHECK(sp->n + n < UINT32_MAX, "the tokenizer file is too large", "string pool over 4 GB");
    memcpy(sp->p + sp->n, s, n);
    uint32_t off = (uint32_t)sp->n;
    sp->n += n;
    return off;
}

typedef struct {
    uint64_t hash; /* 0: empty */
    uint32_t off, len;
    int32_t id;
} smap_slot;

typedef struct {
    smap_slot *slot;
    size_t mask, used;
} smap;

static void smap_init(smap *m, size_t n)
{
    size_t cap = 16;
    while (cap < 2 * n) cap <<= 1;
    m->slot = td_xcalloc(cap, sizeof *m->slot);
    m->mask = cap - 1;
    m->used = 0;
}

static smap_slot *smap_slot_for(const smap *m, const strpool *sp, const char *s, size_t n, uint64_t h)
{
    for (size_t i = h & m->mask;; i = (i + 1) & m->mask) {
        smap_slot *x = &m->slot[i];
        if (x->hash == 0) return x;
        if (x->hash == h && x->len == n && memcmp(sp->p + x->off, s, n) == 0) return x;
    }
}

static int32_t smap_find(const smap *m, const strpool *sp, const char *s, size_t n)
{
    if (!m->slot) return -1;
    smap_slot *x = smap_slot_for(m, sp, s, n, hash_bytes(s, n) | 1);
    return x->hash ? x->id : -1;
}

/* Maps the pooled string (off, n) to id; a later put of the same string wins. */
static void smap_put(smap *m, const strpool *sp, uint32_t off, size_t n, int32_t id)
{
    if (2 * (m->used + 1) > m->mask + 1) {
        smap old = *m;
        smap_init(m, 2 * (old.mask + 1));
        for (size_t i = 0; i <= old.mask; i++) {
            smap_slot *o = &old.slot[i];
            if (o->hash) *smap_slot_for(m, sp, sp->p + o->off, o->len, o->hash) = *o, m->used++;
        }
        free(old.slot);
    }
    uint64_t h = hash_bytes(sp->p + off, n) | 1;
    smap_slot *x = smap_slot_for(m, sp, sp->p + off, n, h);
    if (!x->hash) m->used++;
    *x = (smap_slot){h, off, (uint32_t)n, id};
}

/* ---- the loaded tokenizer -------------------------------------------------------------- */

typedef struct {
    uint64_t key; /* (a << 32 | b) + 1; 0: empty */
    int32_t rank, id;
} pair_slot;

enum split_behavior { SB_REMOVED, SB_ISOLATED, SB_MERGED_PREV, SB_MERGED_NEXT, SB_CONTIGUOUS };
enum prepend_scheme { PS_NEVER, PS_FIRST, PS_ALWAYS };

typedef struct {
    pcre2_code *re; /* NULL: a literal pattern */
    char *lit;
    size_t nlit;
} pattern;

enum norm_kind { NORM_PREPEND, NORM_REPLACE };
typedef struct {
    enum norm_kind kind;
    char *a, *b; /* prepend: a; replace: a -> b */
    size_t na, nb;
} norm_step;

enum pre_kind { PRE_SPLIT, PRE_METASPACE, PRE_BYTELEVEL };
typedef struct {
    enum pre_kind kind;
    pattern pat; /* split; bytelevel with use_regex (GPT-2's regex) */
    int has_pat;
    enum split_behavior behavior;
    int invert;
    char rep[8]; /* metaspace replacement */
    size_t nrep;
    enum prepend_scheme prepend;
    int split;            /* metaspace */
    int add_prefix_space; /* bytelevel */
} pre_step;

enum dec_kind { DEC_BYTELEVEL, DEC_REPLACE, DEC_BYTEFALLBACK, DEC_FUSE, DEC_STRIP, DEC_METASPACE };
typedef struct {
    enum dec_kind kind;
    char *a, *b; /* replace a -> b; strip / metaspace: a is the character */
    size_t na, nb;
    int start, stop;
    enum prepend_scheme prepend;
} dec_step;

typedef struct {
    int32_t id;
    const char *s; /* the text to match (in the set's text) */
    size_t n;
    int lstrip, rstrip, single_word;
} added_tok;

/* Added tokens of one kind (matched on raw or on normalized text), sorted by first byte, then
 * longest first; bucket[b]..bucket[b+1] are those starting with byte b. */
typedef struct {
    added_tok *tok;
    int n;
    char *text;
    int bucket[257];
} added_set;

struct hf_tokenizer {
    char name[256];
    int n_vocab;             /* 1 + largest id */
    int32_t n_model;         /* entries in model.vocab */
    strpool pool;
    uint32_t *tok_off, *tok_len; /* per id: its string as the file spells it; len UINT32_MAX: none */
    smap vocab;              /* model vocab string -> id */
    smap keys;               /* what a word is looked up as (bytes for byte-level) -> id */
    int byte_level;          /* words are bytes: a ByteLevel pre-tokenizer is present */
    int32_t byte_id[256];    /* id of the one-byte key, or -1 */
    int32_t fallback_id[256];/* id of "<0xNN>", or -1 */
    pair_slot *pairs;
    size_t pair_mask;
    int byte_fallback, fuse_unk, ignore_merges;
    int32_t unk_id;          /* -1: no unknown token */
    norm_step norm[MAX_STEPS];
    int n_norm;
    pre_step pre[MAX_STEPS];
    int n_pre;
    dec_step dec[MAX_STEPS];
    int n_dec, has_decoder;
    added_set raw, normed;
    pcre2_code *word_re; /* \w, for single_word added tokens */
    int jit;
    int eod, bos;
};

int hf_vocab_size(const hf_tokenizer *t) { return t->n_vocab; }
int hf_eod_id(const hf_tokenizer *t) { return t->eod; }
int hf_bos_id(const hf_tokenizer *t) { return t->bos; }

const char *hf_token(const hf_tokenizer *t, int id, size_t *n)
{
    if (id < 0 || id >= t->n_vocab || t->tok_len[id] == UINT32_MAX) return NULL;
    *n = t->tok_len[id];
    return t->pool.p + t->tok_off[id];
}

static const pair_slot *pair_find(const hf_tokenizer *t, int32_t a, int32_t b)
{
    uint64_t key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
    for (size_t i = hash_u64(key) & t->pair_mask;; i = (i + 1) & t->pair_mask) {
        const pair_slot *s = &t->pairs[i];
        if (s->key == key) return s;
        if (s->key == 0) return NULL;
    }
}

/* A later merge of the same pair wins, as in the library (its map is built in order). */
static void pair_put(hf_tokenizer *t, int32_t a, int32_t b, int32_t rank, int32_t id)
{
    uint64_t key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
    for (size_t i = hash_u64(key) & t->pair_mask;; i = (i + 1) & t->pair_mask) {
        pair_slot *s = &t->pairs[i];
        if (s->key == 0 || s->key == key) {
            *s = (pair_slot){key, rank, id};
            return;
        }
    }
}

static void pattern_free(pattern *p)
{
    pcre2_code_free(p->re);
    free(p->lit);
}

void hf_free(hf_tokenizer *t)
{
    if (!t) return;
    free(t->pool.p);
    free(t->tok_off);
    free(t->tok_len);
    free(t->vocab.slot);
    if (t->keys.slot != t->vocab.slot) free(t->keys.slot);
    free(t->pairs);
    for (int i = 0; i < t->n_norm; i++) free(t->norm[i].a), free(t->norm[i].b);
    for (int i = 0; i < t->n_pre; i++) pattern_free(&t->pre[i].pat);
    for (int i = 0; i < t->n_dec; i++) free(t->dec[i].a), free(t->dec[i].b);
    free(t->raw.tok);
    free(t->raw.text);
    free(t->normed.tok);
    free(t->normed.text);
    pcre2_code_free(t->word_re);
    free(t);
}

/* ---- regexes: the file's Oniguruma pattern on PCRE2 ------------------------------------ */

/* Letters (L) and numbers (N) that the library's Oniguruma (Unicode 16.0) has and PCRE2 10.42
 * (Unicode 14.0) lacks; no character is in PCRE2's classes but not Oniguruma's. Found by running
 * every code point through the reference's Split pre-tokenizer (docs/tokenizer.md). */
static const uint32_t ONIG_EXTRA_L[][2] = {
    {0x1c89, 0x1c8a}, {0xa7cb, 0xa7cd}, {0xa7da, 0xa7dc}, {0x105c0, 0x105f3}, {0x10d4a, 0x10d65},
    {0x10d6f, 0x10d85}, {0x10ec2, 0x10ec4}, {0x1123f, 0x11240}, {0x11380, 0x11389}, {0x1138b, 0x1138b},
    {0x1138e, 0x1138e}, {0x11390, 0x113b5}, {0x113b7, 0x113b7}, {0x113d1, 0x113d1}, {0x113d3, 0x113d3},
    {0x11bc0, 0x11be0}, {0x11f02, 0x11f02}, {0x11f04, 0x11f10}, {0x11f12, 0x11f33}, {0x1342f, 0x1342f},
    {0x13441, 0x13446}, {0x13460, 0x143fa}, {0x16100, 0x1611d}, {0x16d40, 0x16d6c}, {0x18cff, 0x18cff},
    {0x1b132, 0x1b132}, {0x1b155, 0x1b155}, {0x1df25, 0x1df2a}, {0x1e030, 0x1e06d}, {0x1e4d0, 0x1e4eb},
    {0x1e5d0, 0x1e5ed}, {0x1e5f0, 0x1e5f0}, {0x2b739, 0x2b739}, {0x2ebf0, 0x2ee5d}, {0x31350, 0x323af},
};
static const uint32_t ONIG_EXTRA_N[][2] = {
    {0x10d40, 0x10d49}, {0x116d0, 0x116e3}, {0x11bf0, 0x11bf9}, {0x11f50, 0x11f59}, {0x16130, 0x16139},
    {0x16d70, 0x16d79}, {0x1ccf0, 0x1ccf9}, {0x1d2c0, 0x1d2d3}, {0x1e4f0, 0x1e4f9}, {0x1e5f1, 0x1e5fa},
};
/* Oniguruma's \s: White_Space without U+180E (which PCRE2's \s has). */
static const char ONIG_SPACE[] = "\\t\\n\\x{0b}\\f\\r\\x{20}\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}"
                                 "\\x{2029}\\x{202f}\\x{205f}\\x{3000}";

typedef struct {
    char *p;
    size_t n, cap;
} sbuf;

static void sb_add(sbuf *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        while (b->n + n + 1 > b->cap) b->cap = b->cap ? 2 * b->cap : 256;
        b->p = td_xrealloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void sb_str(sbuf *b, const char *s) { sb_add(b, s, strlen(s)); }

static void sb_ranges(sbuf *b, const uint32_t (*r)[2], size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char tmp[48];
        int k = snprintf(tmp, sizeof tmp, "\\x{%x}-\\x{%x}", r[i][0], r[i][1]);
        sb_add(b, tmp, (size_t)k);
    }
}

/* Rewrites \s, \S, \p{L}, \P{L}, \p{N}, \P{N} to Oniguruma's classes (inside a character class
 * only the positive forms are rewritten). Everything else is passed to PCRE2 as written. */
static char *regex_rewrite(const char *src, size_t n)
{
    sbuf b = {0};
    sb_add(&b, "", 0);
    int in_class = 0;
    for (size_t i = 0; i < n; i++) {
        char c = src[i];
        if (c == '\\' && i + 1 < n) {
            char d = src[i + 1];
            int prop = (d == 'p' || d == 'P') && i + 4 < n && src[i + 2] == '{' && src[i + 4] == '}' &&
                       (src[i + 3] == 'L' || src[i + 3] == 'N');
            int neg = d == 'S' || d == 'P';
            if ((d == 's' || d == 'S' || prop) && !(in_class && neg)) {
                if (!in_class) sb_str(&b, neg ? "[^" : "[");
                if (prop && src[i + 3] == 'L') {
                    sb_str(&b, "\\p{L}");
                    sb_ranges(&b, ONIG_EXTRA_L, sizeof ONIG_EXTRA_L / sizeof ONIG_EXTRA_L[0]);
                } else if (prop) {
                    sb_str(&b, "\\p{N}");
                    sb_ranges(&b, ONIG_EXTRA_N, sizeof ONIG_EXTRA_N / sizeof ONIG_EXTRA_N[0]);
                } else {
                    sb_str(&b, ONIG_SPACE);
                }
                if (!in_class) sb_str(&b, "]");
                i += prop ? 4 : 1;
                continue;
            }
            sb_add(&b, src + i, 2);
            i++;
            continue;
        }
        if (!in_class && c == '[') {
            in_class = 1;
            sb_add(&b, src + i, 1);
            if (i + 1 < n && src[i + 1] == '^') sb_add(&b, src + ++i, 1);
            if (i + 1 < n && src[i + 1] == ']') sb_add(&b, src + ++i, 1); /* a literal ] first */
            continue;
        }
        if (in_class && c == ']') in_class = 0;
        sb_add(&b, &c, 1);
    }
    return b.p;
}

static pcre2_code *regex_compile(const char *src, size_t n, int rewrite, int *jit, char *err, size_t errlen,
                                 const char *name, const char *where)
{
    char *pat = rewrite ? regex_rewrite(src, n) : NULL;
    int code;
    PCRE2_SIZE at;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)(pat ? pat : src), pat ? PCRE2_ZERO_TERMINATED : n,
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | PCRE2_MULTILINE, &code, &at,
                                   NULL);
    free(pat);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        td_seterr(err, errlen, "tokenizer file '%s': %s: the regex \"%.*s\" does not compile in PCRE2: %s", name,
                  where, (int)(n < 80 ? n : 80), src, (char *)msg);
        return NULL;
    }
    const char *no_jit = getenv("TD_BPE_NO_JIT");
    if (!(no_jit && strcmp(no_jit, "1") == 0) && pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) != 0) *jit = 0;
    return re;
}

/* ---- reading tokenizer.json ------------------------------------------------------------ */

typedef struct {
    hf_tokenizer *t;
    const char *name;
    char *err;
    size_t errlen;
} loader;

#define BAD(...)                                                                         \
    do {                                                                                 \
        td_seterr(L->err, L->errlen, __VA_ARGS__);                                       \
        return -1;                                                                       \
    } while (0)

static const char *type_of(const cJSON *o)
{
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(o, "type");
    return cJSON_IsString(ty) ? ty->valuestring : NULL;
}

/* A string field (*n set); NULL if missing or not a string. cJSON strings stop at a NUL. */
static const char *str_field(const cJSON *o, const char *key, size_t *n)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsString(v)) return NULL;
    *n = strlen(v->valuestring);
    return v->valuestring;
}

/* A boolean field: 1, 0, or def if missing or null; -1 if it is something else. */
static int bool_field(const cJSON *o, const char *key, int def)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) return def;
    if (!cJSON_IsBool(v)) return -1;
    return cJSON_IsTrue(v);
}

static char *dup_bytes(const char *s, size_t n)
{
    char *p = td_xmalloc(n + 1);
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

/* {"String": "..."} or {"Regex": "..."} */
static int read_pattern(loader *L, const cJSON *o, const char *where, pattern *p, int regex_ok)
{
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(o, "pattern");
    size_t n;
    const char *s;
    if (cJSON_IsObject(pat) && (s = str_field(pat, "String", &n))) {
        p->lit = dup_bytes(s, n);
        p->nlit = n;
        return 0;
    }
    if (cJSON_IsObject(pat) && (s = str_field(pat, "Regex", &n))) {
        if (!regex_ok) BAD("tokenizer file '%s': %s with a Regex pattern is not supported (only String)", L->name, where);
        p->re = regex_compile(s, n, 1, &L->t->jit, L->err, L->errlen, L->name, where);
        return p->re ? 0 : -1;
    }
    BAD("tokenizer file '%s': %s needs \"pattern\": {\"String\": ...} or {\"Regex\": ...}", L->name, where);
}

static int read_normalizer(loader *L, const cJSON *o, int depth)
{
    hf_tokenizer *t = L->t;
    const char *ty = type_of(o);
    if (!ty) BAD("tokenizer file '%s': a normalizer without a \"type\"", L->name);
    if (strcmp(ty, "Sequence") == 0 && depth < 4) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(o, "normalizers");
        if (!cJSON_IsArray(list)) BAD("tokenizer file '%s': normalizer Sequence needs a \"normalizers\" list", L->name);
        const cJSON *it;
        cJSON_ArrayForEach(it, list) if (read_normalizer(L, it, depth + 1) != 0) return -1;
        return 0;
    }
    if (t->n_norm == MAX_STEPS) BAD("tokenizer file '%s': more than %d normalizers", L->name, MAX_STEPS);
    norm_step *s = &t->norm[t->n_norm];
    size_t n;
    const char *v;
    if (strcmp(ty, "Prepend") == 0) {
        if (!(v = str_field(o, "prepend", &n))) BAD("tokenizer file '%s': normalizer Prepend needs \"prepend\"", L->name);
        *s = (norm_step){NORM_PREPEND, dup_bytes(v, n), NULL, n, 0};
    } else if (strcmp(ty, "Replace") == 0) {
        pattern p = {0};
        if (read_pattern(L, o, "normalizer Replace", &p, 0) != 0) return -1;
        if (!(v = str_field(o, "content", &n)) || p.nlit == 0) {
            free(p.lit);
            BAD("tokenizer file '%s': normalizer Replace needs a non-empty pattern and a \"content\"", L->name);
        }
        *s = (norm_step){NORM_REPLACE, p.lit, dup_bytes(v, n), p.nlit, n};
    } else {
        BAD("tokenizer file '%s': normalizer %.40s is not supported (trident supports Prepend, Replace with a "
            "String pattern, and Sequence of them)", L->name, ty);
    }
    t->n_norm++;
    return 0;
}

static int read_prepend_scheme(loader *L, const cJSON *o, const char *where, enum prepend_scheme *ps)
{
    size_t n;
    const char *v = str_field(o, "prepend_scheme", &n);
    if (v) {
        if (strcmp(v, "always") == 0) *ps = PS_ALWAYS;
        else if (strcmp(v, "first") == 0) *ps = PS_FIRST;
        else if (strcmp(v, "never") == 0) *ps = PS_NEVER;
        else BAD("tokenizer file '%s': %s prepend_scheme \"%.20s\" is not always, first or never", L->name, where, v);
        return 0;
    }
    int aps = bool_field(o, "add_prefix_space", 1); /* files before prepend_scheme */
    if (aps < 0) BAD("tokenizer file '%s': %s add_prefix_space is not a boolean", L->name, where);
    *ps = aps ? PS_ALWAYS : PS_NEVER;
    return 0;
}

static int read_replacement(loader *L, const cJSON *o, const char *where, char rep[8], size_t *nrep)
{
    size_t n;
    const char *v = str_field(o, "replacement", &n);
    if (!v) v = "\xe2\x96\x81", n = 3; /* U+2581 */
    uint32_t cp;
    if (n == 0 || n >= 8 || utf8_len((const unsigned char *)v, n, &cp) != n)
        BAD("tokenizer file '%s': %s replacement must be one character", L->name, where);
    memcpy(rep, v, n);
    *nrep = n;
    return 0;
}

static const char GPT2_REGEX[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static int read_pre_tokenizer(loader *L, const cJSON *o, int depth)
{
    hf_tokenizer *t = L->t;
    const char *ty = type_of(o);
    if (!ty) BAD("tokenizer file '%s': a pre-tokenizer without a \"type\"", L->name);
    if (strcmp(ty, "Sequence") == 0 && depth < 4) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(o, "pretokenizers");
        if (!cJSON_IsArray(list)) BAD("tokenizer file '%s': pre-tokenizer Sequence needs \"pretokenizers\"", L->name);
        const cJSON *it;
        cJSON_ArrayForEach(it, list) if (read_pre_tokenizer(L, it, depth + 1) != 0) return -1;
        return 0;
    }
    if (t->byte_level) BAD("tokenizer file '%s': pre-tokenizer %.40s after ByteLevel is not supported (ByteLevel "
                           "must come last)", L->name, ty);
    if (t->n_pre == MAX_STEPS) BAD("tokenizer file '%s': more than %d pre-tokenizers", L->name, MAX_STEPS);
    pre_step *s = &t->pre[t->n_pre];
    memset(s, 0, sizeof *s);
    if (strcmp(ty, "Split") == 0) {
        s->kind = PRE_SPLIT;
        t->n_pre++; /* counted now so the pattern is freed on failure */
        if (read_pattern(L, o, "pre-tokenizer Split", &s->pat, 1) != 0) return -1;
        s->has_pat = 1;
        size_t n;
        const char *b = str_field(o, "behavior", &n);
        static const char *const NAMES[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext",
                                            "Contiguous"};
        int k = 0;
        while (b && k < 5 && strcmp(b, NAMES[k]) != 0) k++;
        if (!b || k == 5)
            BAD("tokenizer file '%s': pre-tokenizer Split behavior \"%.30s\" is not one of Removed, Isolated, "
                "MergedWithPrevious, MergedWithNext, Contiguous", L->name, b ? b : "(missing)");
        s->behavior = (enum split_behavior)k;
        if ((s->invert = bool_field(o, "invert", 0)) < 0)
            BAD("tokenizer file '%s': pre-tokenizer Split invert is not a boolean", L->name);
        return 0;
    }
    if (strcmp(ty, "Metaspace") == 0) {
        s->kind = PRE_METASPACE;
        if (read_replacement(L, o, "pre-tokenizer Metaspace", s->rep, &s->nrep) != 0) return -1;
        if (read_prepend_scheme(L, o, "pre-tokenizer Metaspace", &s->prepend) != 0) return -1;
        if ((s->split = bool_field(o, "split", 1)) < 0)
            BAD("tokenizer file '%s': pre-tokenizer Metaspace split is not a boolean", L->name);
        s->pat.lit = dup_bytes(s->rep, s->nrep);
        s->pat.nlit = s->nrep;
        t->n_pre++;
        return 0;
    }
    if (strcmp(ty, "ByteLevel") == 0) {
        s->kind = PRE_BYTELEVEL;
        int aps = bool_field(o, "add_prefix_space", 1), use_regex = bool_field(o, "use_regex", 1);
        if (aps < 0 || use_regex < 0)
            BAD("tokenizer file '%s': pre-tokenizer ByteLevel add_prefix_space and use_regex must be booleans", L->name);
        s->add_prefix_space = aps;
        t->n_pre++;
        if (use_regex) {
            s->pat.re = regex_compile(GPT2_REGEX, sizeof GPT2_REGEX - 1, 1, &t->jit, L->err, L->errlen, L->name,
                                      "pre-tokenizer ByteLevel");
            if (!s->pat.re) return -1;
            s->has_pat = 1;
            s->behavior = SB_ISOLATED;
        }
        t->byte_level = 1;
        return 0;
    }
    BAD("tokenizer file '%s': pre-tokenizer %.40s is not supported (trident supports Split, ByteLevel, Metaspace, "
        "and Sequence of them)", L->name, ty);
}

static int read_decoder(loader *L, const cJSON *o, int depth)
{
    hf_tokenizer *t = L->t;
    const char *ty = type_of(o);
    if (!ty) BAD("tokenizer file '%s': a decoder without a \"type\"", L->name);
    if (strcmp(ty, "Sequence") == 0 && depth < 4) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(o, "decoders");
        if (!cJSON_IsArray(list)) BAD("tokenizer file '%s': decoder Sequence needs a \"decoders\" list", L->name);
        const cJSON *it;
        cJSON_ArrayForEach(it, list) if (read_decoder(L, it, depth + 1) != 0) return -1;
        return 0;
    }
    if (t->n_dec == MAX_STEPS) BAD("tokenizer file '%s': more than %d decoders", L->name, MAX_STEPS);
    dec_step *s = &t->dec[t->n_dec];
    memset(s, 0, sizeof *s);
    size_t n;
    const char *v;
    if (strcmp(ty, "ByteLevel") == 0) {
        s->kind = DEC_BYTELEVEL;
    } else if (strcmp(ty, "ByteFallback") == 0) {
        s->kind = DEC_BYTEFALLBACK;
    } else if (strcmp(ty, "Fuse") == 0) {
        s->kind = DEC_FUSE;
    } else if (strcmp(ty, "Replace") == 0) {
        pattern p = {0};
        if (read_pattern(L, o, "decoder Replace", &p, 0) != 0) return -1;
        if (!(v = str_field(o, "content", &n)) || p.nlit == 0) {
            free(p.lit);
            BAD("tokenizer file '%s': decoder Replace needs a non-empty pattern and a \"content\"", L->name);
        }
        s->kind = DEC_REPLACE;
        s->a = p.lit, s->na = p.nlit, s->b = dup_bytes(v, n), s->nb = n;
    } else if (strcmp(ty, "Strip") == 0) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, "start"), *b = cJSON_GetObjectItemCaseSensitive(o, "stop");
        uint32_t cp;
        if (!(v = str_field(o, "content", &n)) || n == 0 || utf8_len((const unsigned char *)v, n, &cp) != n ||
            !cJSON_IsNumber(a) || !cJSON_IsNumber(b) || a->valuedouble < 0 || b->valuedouble < 0 ||
            a->valuedouble > 1e6 || b->valuedouble > 1e6)
            BAD("tokenizer file '%s': decoder Strip needs one \"content\" character and counts \"start\", \"stop\"",
                L->name);
        s->kind = DEC_STRIP;
        s->a = dup_bytes(v, n), s->na = n, s->start = (int)a->valuedouble, s->stop = (int)b->valuedouble;
    } else if (strcmp(ty, "Metaspace") == 0) {
        char rep[8];
        size_t nrep;
        if (read_replacement(L, o, "decoder Metaspace", rep, &nrep) != 0) return -1;
        if (read_prepend_scheme(L, o, "decoder Metaspace", &s->prepend) != 0) return -1;
        s->kind = DEC_METASPACE;
        s->a = dup_bytes(rep, nrep), s->na = nrep;
    } else {
        BAD("tokenizer file '%s': decoder %.40s is not supported (trident supports ByteLevel, Replace, "
            "ByteFallback, Fuse, Strip, Metaspace, and Sequence of them)", L->name, ty);
    }
    t->n_dec++;
    return 0;
}

/* ---- normalizers ------------------------------------------------------------------------ */

/* Appends s[0..n) to b with every occurrence of pat replaced by rep (left to right). */
static void replace_into(sbuf *b, const char *s, size_t n, const char *pat, size_t np, const char *rep, size_t nr)
{
    size_t i = 0;
    while (i < n) {
        const char *hit = np <= n - i ? memmem(s + i, n - i, pat, np) : NULL;
        size_t end = hit ? (size_t)(hit - s) : n;
        sb_add(b, s + i, end - i);
        if (!hit) break;
        sb_add(b, rep, nr);
        i = end + np;
    }
}

/* Runs the normalizers over s[0..n); the result is s itself (no normalizer) or in one of bufs. */
static const char *normalize(const hf_tokenizer *t, const char *s, size_t n, sbuf bufs[2], size_t *out_n)
{
    const char *cur = s;
    size_t len = n;
    for (int i = 0; i < t->n_norm; i++) {
        const norm_step *st = &t->norm[i];
        sbuf *b = &bufs[i & 1];
        b->n = 0;
        sb_add(b, "", 0);
        if (st->kind == NORM_PREPEND) {
            if (len == 0) continue;
            sb_add(b, st->a, st->na);
            sb_add(b, cur, len);
        } else {
            replace_into(b, cur, len, st->a, st->na, st->b, st->nb);
        }
        cur = b->p, len = b->n;
    }
    *out_n = len;
    return cur;
}

/* ---- the model: vocab, merges, added tokens -------------------------------------------- */

static int id_value(const cJSON *v, int32_t *id)
{
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble >= MAX_ID || v->valuedouble != (double)(int)v->valuedouble)
        return -1;
    *id = (int32_t)v->valuedouble;
    return 0;
}

static int read_vocab(loader *L, const cJSON *vocab)
{
    hf_tokenizer *t = L->t;
    int32_t max_id = -1;
    const cJSON *it;
    size_t count = 0;
    cJSON_ArrayForEach(it, vocab) {
        int32_t id;
        if (id_value(it, &id) != 0)
            BAD("tokenizer file '%s': model.vocab: token \"%.40s\" has an id that is not an integer in 0..%d",
                L->name, it->string, MAX_ID - 1);
        if (id > max_id) max_id = id;
        count++;
    }
    t->n_vocab = max_id + 1;
    t->n_model = (int32_t)count;
    t->tok_off = td_xcalloc((size_t)t->n_vocab + 1, sizeof *t->tok_off);
    t->tok_len = td_xmalloc(((size_t)t->n_vocab + 1) * sizeof *t->tok_len);
    memset(t->tok_len, 0xff, ((size_t)t->n_vocab + 1) * sizeof *t->tok_len);
    smap_init(&t->vocab, count);
    cJSON_ArrayForEach(it, vocab) {
        int32_t id = (int32_t)it->valuedouble;
        size_t n = strlen(it->string);
        uint32_t off = pool_add(&t->pool, it->string, n);
        t->tok_off[id] = off, t->tok_len[id] = (uint32_t)n;
        smap_put(&t->vocab, &t->pool, off, n, id);
    }
    return 0;
}

static int32_t vocab_id(const hf_tokenizer *t, const char *s, size_t n) { return smap_find(&t->vocab, &t->pool, s, n); }

static int merge_parts(const cJSON *m, const char **a, size_t *na, const char **b, size_t *nb, int *skip)
{
    *skip = 0;
    if (cJSON_IsString(m)) {
        const char *s = m->valuestring, *sp = strchr(s, ' ');
        if (strncmp(s, "#version", 8) == 0) return *skip = 1, 0;
        if (!sp || strchr(sp + 1, ' ')) return -1;
        *a = s, *na = (size_t)(sp - s), *b = sp + 1, *nb = strlen(sp + 1);
        return 0;
    }
    if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(m->child) && cJSON_IsString(m->child->next)) {
        *a = m->child->valuestring, *na = strlen(*a);
        *b = m->child->next->valuestring, *nb = strlen(*b);
        return 0;
    }
    return -1;
}

static int read_merges(loader *L, const cJSON *merges)
{
    hf_tokenizer *t = L->t;
    size_t cap = 16, n = (size_t)cJSON_GetArraySize(merges);
    while (cap < 2 * n + 2) cap <<= 1;
    t->pairs = td_xcalloc(cap, sizeof *t->pairs);
    t->pair_mask = cap - 1;
    const cJSON *m;
    int32_t rank = 0;
    char *joined = NULL;
    size_t jcap = 0;
    int rc = 0;
    cJSON_ArrayForEach(m, merges) {
        const char *a, *b;
        size_t na, nb;
        int skip;
        if (merge_parts(m, &a, &na, &b, &nb, &skip) != 0) {
            td_seterr(L->err, L->errlen, "tokenizer file '%s': model.merges[%d] is neither \"a b\" nor [\"a\", \"b\"]",
                      L->name, rank);
            rc = -1;
            break;
        }
        if (skip) continue;
        if (!joined || na + nb > jcap) joined = td_xrealloc(joined, jcap = 2 * (na + nb) + 16);
        memcpy(joined, a, na);
        memcpy(joined + na, b, nb);
        int32_t ia = vocab_id(t, a, na), ib = vocab_id(t, b, nb), ic = vocab_id(t, joined, na + nb);
        if (ia < 0 || ib < 0 || ic < 0) {
            const char *what = ia < 0 ? a : ib < 0 ? b : joined;
            int wn = (int)(ia < 0 ? na : ib < 0 ? nb : na + nb);
            td_seterr(L->err, L->errlen, "tokenizer file '%s': model.merges[%d]: token \"%.*s\" is not in model.vocab",
                      L->name, rank, wn > 60 ? 60 : wn, what);
            rc = -1;
            break;
        }
        pair_put(t, ia, ib, rank++, ic);
    }
    free(joined);
    return rc;
}

/* The lookup table of words: vocab strings, or their bytes under a ByteLevel pre-tokenizer
 * (strings outside the byte alphabet can never be a word's symbols then, and are left out). */
static void build_keys(hf_tokenizer *t)
{
    if (!t->byte_level) {
        t->keys = t->vocab;
    } else {
        int16_t cp_to_byte[324];
        byte_alphabet(cp_to_byte);
        smap_init(&t->keys, t->vocab.used);
        char *buf = NULL;
        size_t cap = 0;
        for (size_t i = 0; i <= t->vocab.mask; i++) {
            const smap_slot *x = &t->vocab.slot[i];
            if (!x->hash) continue;
            if (x->len > cap) buf = td_xrealloc(buf, cap = 2 * x->len);
            long n = alphabet_to_bytes(t->pool.p + x->off, x->len, cp_to_byte, buf);
            if (n < 0) continue;
            uint32_t off = pool_add(&t->pool, buf, (size_t)n);
            smap_put(&t->keys, &t->pool, off, (size_t)n, x->id);
        }
        free(buf);
    }
    for (int b = 0; b < 256; b++) {
        char c = (char)b, fb[8];
        t->byte_id[b] = smap_find(&t->keys, &t->pool, &c, 1);
        snprintf(fb, sizeof fb, "<0x%02X>", b);
        t->fallback_id[b] = vocab_id(t, fb, 6);
    }
}

static int read_model(loader *L, const cJSON *model)
{
    hf_tokenizer *t = L->t;
    if (!cJSON_IsObject(model)) BAD("tokenizer file '%s' has no \"model\" object", L->name);
    const char *ty = type_of(model);
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    if (ty && strcmp(ty, "BPE") != 0)
        BAD("tokenizer file '%s': model %.40s is not supported (trident reads BPE models only)", L->name, ty);
    if (!ty && !merges) BAD("tokenizer file '%s': the model has no \"type\" and no merges; trident reads BPE models "
                            "only", L->name);
    if (!cJSON_IsObject(vocab)) BAD("tokenizer file '%s': model.vocab is not an object of token -> id", L->name);
    if (!cJSON_IsArray(merges)) BAD("tokenizer file '%s': model.merges is not a list", L->name);
    const cJSON *dropout = cJSON_GetObjectItemCaseSensitive(model, "dropout");
    if (dropout && !cJSON_IsNull(dropout) && !(cJSON_IsNumber(dropout) && dropout->valuedouble == 0))
        BAD("tokenizer file '%s': model.dropout is set; BPE dropout (random merges) is not supported", L->name);
    size_t n;
    const char *v;
    if (((v = str_field(model, "continuing_subword_prefix", &n)) && n) || ((v = str_field(model, "end_of_word_suffix", &n)) && n))
        BAD("tokenizer file '%s': model continuing_subword_prefix / end_of_word_suffix are not supported", L->name);
    t->byte_fallback = bool_field(model, "byte_fallback", 0);
    t->fuse_unk = bool_field(model, "fuse_unk", 0);
    t->ignore_merges = bool_field(model, "ignore_merges", 0);
    if (t->byte_fallback < 0 || t->fuse_unk < 0 || t->ignore_merges < 0)
        BAD("tokenizer file '%s': model byte_fallback, fuse_unk and ignore_merges must be booleans", L->name);
    if (read_vocab(L, vocab) != 0 || read_merges(L, merges) != 0) return -1;
    t->unk_id = -1;
    if ((v = str_field(model, "unk_token", &n)) && (t->unk_id = vocab_id(t, v, n)) < 0)
        BAD("tokenizer file '%s': model.unk_token \"%.40s\" is not in model.vocab", L->name, v);
    build_keys(t);
    return 0;
}

typedef struct {
    int32_t id;
    char *s, *s0; /* match text; content (s0 == s unless normalized) */
    size_t n, n0;
    int lstrip, rstrip, single_word, normalized;
} added_in;

static int cmp_added(const void *pa, const void *pb)
{
    const added_tok *a = pa, *b = pb;
    unsigned ca = (unsigned char)a->s[0], cb = (unsigned char)b->s[0];
    if (ca != cb) return ca < cb ? -1 : 1;
    if (a->n != b->n) return a->n > b->n ? -1 : 1;
    return memcmp(a->s, b->s, a->n);
}

static void build_set(added_set *set, const added_in *in, int n_in, int normalized)
{
    size_t total = 0;
    int n = 0;
    for (int i = 0; i < n_in; i++)
        if (in[i].normalized == normalized && in[i].n && in[i].id >= 0) total += in[i].n, n++;
    set->tok = td_xcalloc(n ? (size_t)n : 1, sizeof *set->tok);
    set->text = td_xmalloc(total ? total : 1);
    size_t off = 0;
    for (int i = 0; i < n_in; i++) {
        if (in[i].normalized != normalized || !in[i].n || in[i].id < 0) continue;
        memcpy(set->text + off, in[i].s, in[i].n);
        set->tok[set->n++] = (added_tok){in[i].id, set->text + off, in[i].n, in[i].lstrip, in[i].rstrip,
                                         in[i].single_word};
        off += in[i].n;
    }
    qsort(set->tok, (size_t)set->n, sizeof *set->tok, cmp_added);
    int k = 0;
    for (int b = 0; b <= 256; b++) {
        while (k < set->n && (unsigned char)set->tok[k].s[0] < b) k++;
        set->bucket[b] = k;
    }
}

/* Parses added_tokens into in[] (their ids are not used: see place_added). */
static int read_added(loader *L, const cJSON *list, added_in **out, int *n_out)
{
    *out = NULL;
    *n_out = 0;
    if (!list || cJSON_IsNull(list)) return 0;
    if (!cJSON_IsArray(list)) BAD("tokenizer file '%s': added_tokens is not a list", L->name);
    int n = cJSON_GetArraySize(list);
    added_in *in = td_xcalloc(n ? (size_t)n : 1, sizeof *in);
    *out = in;
    const cJSON *it;
    int i = 0;
    cJSON_ArrayForEach(it, list) {
        size_t len;
        const char *content = str_field(it, "content", &len);
        if (!content) BAD("tokenizer file '%s': added_tokens[%d] needs a \"content\" string", L->name, i);
        int special = bool_field(it, "special", 0);
        added_in *a = &in[i++];
        *n_out = i;
        a->s = dup_bytes(content, len);
        a->n = len;
        a->lstrip = bool_field(it, "lstrip", 0);
        a->rstrip = bool_field(it, "rstrip", 0);
        a->single_word = bool_field(it, "single_word", 0);
        a->normalized = bool_field(it, "normalized", !special);
        if (special < 0 || a->lstrip < 0 || a->rstrip < 0 || a->single_word < 0 || a->normalized < 0)
            BAD("tokenizer file '%s': added_tokens[%d]: special, lstrip, rstrip, single_word and normalized must be "
                "booleans", L->name, i - 1);
    }
    return 0;
}

/* Gives each added token its id as the library's add_tokens does (the file's "id" is not read):
 * an earlier added token's or the vocab's id for the same content, else the next free id after
 * the model's vocab and the tokens added so far. Then its spelling for decoding and its match
 * text (normalized, for normalized tokens). */
static void place_added(hf_tokenizer *t, added_in *in, int n)
{
    sbuf bufs[2] = {{0}, {0}};
    int need_word_re = 0;
    int32_t max_added = -1;
    for (int i = 0; i < n; i++) {
        added_in *a = &in[i];
        a->id = -1;
        for (int j = 0; j < i && a->id < 0; j++)
            if (in[j].id >= 0 && in[j].n0 == a->n && memcmp(in[j].s0, a->s, a->n) == 0) a->id = in[j].id;
        if (a->id < 0) a->id = vocab_id(t, a->s, a->n);
        if (a->id < 0 && a->n) {
            if (max_added < 0) a->id = t->n_model;
            else a->id = max_added >= t->n_model || t->n_model == 0 ? max_added + 1 : t->n_model;
        }
        a->s0 = a->s, a->n0 = a->n;
        if (a->id < 0) continue; /* empty content: the library skips it */
        if (a->id > max_added) max_added = a->id;
        if (a->id >= t->n_vocab) {
            size_t old = (size_t)t->n_vocab, nv = (size_t)a->id + 1;
            t->tok_off = td_xrealloc(t->tok_off, (nv + 1) * sizeof *t->tok_off);
            t->tok_len = td_xrealloc(t->tok_len, (nv + 1) * sizeof *t->tok_len);
            for (size_t k = old; k <= nv; k++) t->tok_len[k] = UINT32_MAX, t->tok_off[k] = 0;
            t->n_vocab = (int)nv;
        }
        uint32_t off = pool_add(&t->pool, a->s, a->n);
        t->tok_off[a->id] = off, t->tok_len[a->id] = (uint32_t)a->n;
        need_word_re |= a->single_word;
        if (a->normalized && t->n_norm) {
            size_t nn;
            const char *s = normalize(t, a->s, a->n, bufs, &nn);
            a->s = dup_bytes(s, nn), a->n = nn; /* the original stays in s0 */
        }
    }
    free(bufs[0].p);
    free(bufs[1].p);
    build_set(&t->raw, in, n, 0);
    build_set(&t->normed, in, n, 1);
    if (need_word_re) {
        int code;
        PCRE2_SIZE at;
        t->word_re = pcre2_compile((PCRE2_SPTR) "\\w", 2, PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &code, &at,
                                   NULL);
        TD_CHECK(t->word_re, "is libpcre2-8 built with Unicode support?", "compiling \\w");
    }
}

/* An id by the token's spelling: added tokens first, then the vocab. -1 if none. */
static int32_t id_of(const hf_tokenizer *t, const char *s)
{
    size_t n = strlen(s);
    for (int k = 0; k < 2; k++) {
        const added_set *set = k ? &t->normed : &t->raw;
        for (int i = 0; i < set->n; i++)
            if (set->tok[i].n == n && memcmp(set->tok[i].s, s, n) == 0) return set->tok[i].id;
    }
    return vocab_id(t, s, n);
}

/* BOS and EOS from a TemplateProcessing post-processor: its special tokens before and after
 * the sequence $A in "single". */
static void template_bos_eos(hf_tokenizer *t, const cJSON *pp, int depth)
{
    const char *ty = type_of(pp);
    if (!ty || depth > 4) return;
    if (strcmp(ty, "Sequence") == 0) {
        const cJSON *it;
        cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(pp, "processors")) template_bos_eos(t, it, depth + 1);
        return;
    }
    if (strcmp(ty, "TemplateProcessing") != 0) return;
    const cJSON *single = cJSON_GetObjectItemCaseSensitive(pp, "single"), *it;
    const cJSON *specials = cJSON_GetObjectItemCaseSensitive(pp, "special_tokens");
    int after = 0;
    cJSON_ArrayForEach(it, single) {
        if (cJSON_GetObjectItemCaseSensitive(it, "Sequence")) {
            after = 1;
            continue;
        }
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(it, "SpecialToken");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(sp, "id");
        if (!cJSON_IsString(name)) continue;
        const cJSON *ids = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(specials, name->valuestring), "ids");
        int32_t id = -1;
        if (cJSON_GetArraySize(ids) != 1 || id_value(ids->child, &id) != 0 || id >= t->n_vocab) id = id_of(t, name->valuestring);
        if (id < 0) continue;
        if (!after && t->bos < 0) t->bos = id;
        if (after) t->eod = id;
    }
}

static void find_bos_eos(hf_tokenizer *t, const cJSON *root)
{
    static const char *const EOS[] = {"<|end_of_text|>", "<|endoftext|>", "</s>", "<eos>", "<|eos|>"};
    static const char *const BOS[] = {"<|begin_of_text|>", "<s>", "<bos>", "<|startoftext|>"};
    t->eod = t->bos = -1;
    template_bos_eos(t, cJSON_GetObjectItemCaseSensitive(root, "post_processor"), 0);
    for (size_t i = 0; i < sizeof EOS / sizeof EOS[0] && t->eod < 0; i++) t->eod = id_of(t, EOS[i]);
    for (size_t i = 0; i < sizeof BOS / sizeof BOS[0] && t->bos < 0; i++) t->bos = id_of(t, BOS[i]);
}

static int load_root(loader *L, const cJSON *root)
{
    hf_tokenizer *t = L->t;
    const cJSON *c;
    if (!cJSON_IsObject(root)) BAD("tokenizer file '%s' is JSON but not an object (expected a Hugging Face "
                                   "tokenizer.json)", L->name);
    if ((c = cJSON_GetObjectItemCaseSensitive(root, "normalizer")) && !cJSON_IsNull(c) && read_normalizer(L, c, 0))
        return -1;
    if ((c = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer")) && !cJSON_IsNull(c) && read_pre_tokenizer(L, c, 0))
        return -1;
    if ((c = cJSON_GetObjectItemCaseSensitive(root, "decoder")) && !cJSON_IsNull(c)) {
        t->has_decoder = 1;
        if (read_decoder(L, c, 0)) return -1;
    }
    added_in *in;
    int n_in;
    int rc = read_added(L, cJSON_GetObjectItemCaseSensitive(root, "added_tokens"), &in, &n_in);
    if (rc == 0) rc = read_model(L, cJSON_GetObjectItemCaseSensitive(root, "model"));
    if (rc == 0) place_added(t, in, n_in);
    for (int i = 0; i < n_in; i++) {
        if (in[i].s0 && in[i].s0 != in[i].s) free(in[i].s0);
        free(in[i].s);
    }
    free(in);
    if (rc != 0) return -1;
    find_bos_eos(t, root);
    if (!t->jit) TD_DEBUG("hf_tokenizer: regexes run without PCRE2's JIT (slower)");
    return 0;
}

hf_tokenizer *hf_load_json(const char *json, size_t len, const char *name, char *err, size_t errlen)
{
    hf_tokenizer *t = td_xcalloc(1, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->jit = 1;
    td_seterr(err, errlen, "no error");
    loader L = {t, t->name, err, errlen};
    const char *at = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json, len, &at, 0);
    int rc = -1;
    if (!root) {
        size_t off = at && at >= json && at <= json + len ? (size_t)(at - json) : 0;
        td_seterr(err, errlen, "tokenizer file '%s' is not valid JSON (near byte %zu); expected a Hugging Face "
                  "tokenizer.json", name, off);
    } else {
        rc = load_root(&L, root);
    }
    cJSON_Delete(root);
    if (rc != 0) {
        /* names and strings quoted from the file stay on the one line */
        for (char *p = err; errlen && *p; p++)
            if ((unsigned char)*p < 0x20) *p = ' ';
        hf_free(t);
        return NULL;
    }
    return t;
}

hf_tokenizer *hf_load(const char *path, char *err, size_t errlen)
{
    size_t len;
    char *text = read_file(path, &len);
    if (!text) {
        td_seterr(err, errlen, "cannot read tokenizer file '%s': %s (expected a Hugging Face tokenizer.json)", path,
                  td_strerror(errno));
        return NULL;
    }
    hf_tokenizer *t = hf_load_json(text, len, path, err, errlen);
    free(text);
    return t;
}

/* ---- worker ----------------------------------------------------------------------------- */

/* Bump allocator for rewritten text: blocks are kept, so pointers into it stay valid until the
 * next reset. */
typedef struct block {
    struct block *next;
    size_t used, cap;
    char data[];
} block;

typedef struct {
    const char *s;
    size_t n;
    int first; /* starts at offset 0 of the original text (Metaspace prepend_scheme "first") */
} piece;

typedef struct {
    piece *p;
    size_t n, cap;
} plist;

typedef struct {
    size_t start, end;
    int match;
} span;

typedef struct {
    const char *s;
    size_t n;
    int32_t id; /* -1: text */
    int first;
} segment;

typedef struct {
    segment *v;
    size_t n, cap;
} seglist;

typedef struct {
    uint64_t hash; /* 0: empty */
    uint32_t key, val;
    uint16_t key_len, n_ids;
} cache_slot;

typedef struct {
    uint64_t key; /* rank << 32 | position */
    int32_t new_id;
} merge_entry;

struct hf_worker {
    const hf_tokenizer *t;
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *stack;
    block *head, *cur;
    plist pl[2];
    span *sp, *sp2;
    size_t sp_cap, sp2_cap;
    seglist seg[2];
    sbuf nbuf[2];
    /* merge scratch, one entry per symbol */
    int32_t *id, *prev, *next;
    merge_entry *heap;
    size_t scratch_cap, heap_cap;
    /* word -> ids cache */
    cache_slot *slots;
    size_t cache_used;
    char *keys;
    size_t keys_len, keys_cap;
    int32_t *vals;
    size_t vals_len, vals_cap;
};

hf_worker *hf_worker_new(const hf_tokenizer *t)
{
    hf_worker *w = td_xcalloc(1, sizeof *w);
    w->t = t;
    w->md = pcre2_match_data_create(32, NULL);
    w->mctx = pcre2_match_context_create(NULL);
    TD_CHECK(w->md && w->mctx, "reduce the number of workers", "allocating PCRE2 match data");
    if (t->jit) {
        w->stack = pcre2_jit_stack_create(32 << 10, JIT_STACK_MAX, NULL);
        TD_CHECK(w->stack, "reduce the number of workers", "allocating a PCRE2 JIT stack");
        pcre2_jit_stack_assign(w->mctx, NULL, w->stack);
    }
    w->slots = td_xcalloc(CACHE_SLOTS, sizeof *w->slots);
    return w;
}

void hf_worker_free(hf_worker *w)
{
    if (!w) return;
    pcre2_match_data_free(w->md);
    pcre2_match_context_free(w->mctx);
    pcre2_jit_stack_free(w->stack);
    for (block *b = w->head, *nx; b; b = nx) nx = b->next, free(b);
    free(w->pl[0].p), free(w->pl[1].p);
    free(w->sp), free(w->sp2);
    free(w->seg[0].v), free(w->seg[1].v);
    free(w->nbuf[0].p), free(w->nbuf[1].p);
    free(w->id), free(w->prev), free(w->next), free(w->heap);
    free(w->slots), free(w->keys), free(w->vals);
    free(w);
}

static char *ar_alloc(hf_worker *w, size_t n)
{
    for (;;) {
        if (w->cur && w->cur->cap - w->cur->used >= n) {
            char *p = w->cur->data + w->cur->used;
            w->cur->used += n;
            return p;
        }
        if (w->cur && w->cur->next) {
            w->cur = w->cur->next;
            w->cur->used = 0;
            continue;
        }
        size_t cap = n > ARENA_BLOCK ? n : ARENA_BLOCK;
        block *b = td_xmalloc(sizeof *b + cap);
        b->next = NULL, b->used = 0, b->cap = cap;
        if (w->cur) w->cur->next = b;
        else w->head = b;
        w->cur = b;
    }
}

static void ar_reset(hf_worker *w)
{
    w->cur = w->head;
    if (w->cur) w->cur->used = 0;
}

static void pl_push(plist *l, const char *s, size_t n, int first)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->p = td_xrealloc(l->p, l->cap * sizeof *l->p);
    }
    l->p[l->n++] = (piece){s, n, first};
}

static void seg_push(seglist *l, const char *s, size_t n, int32_t id, int first)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->v = td_xrealloc(l->v, l->cap * sizeof *l->v);
    }
    l->v[l->n++] = (segment){s, n, id, first};
}

static void span_push(span **v, size_t *n, size_t *cap, size_t start, size_t end, int match)
{
    if (*n == *cap) {
        *cap = *cap ? 2 * *cap : 64;
        *v = td_xrealloc(*v, *cap * sizeof **v);
    }
    (*v)[(*n)++] = (span){start, end, match};
}

/* ---- splitting on a pattern --------------------------------------------------------- */

/* Runs re on s[0..n) from pos: 1 with the match in [*ms, *me), 0 if none. */
static int re_next(hf_worker *w, const pcre2_code *re, const char *s, size_t n, size_t pos, size_t *ms, size_t *me)
{
    int rc = w->t->jit ? pcre2_jit_match(re, (PCRE2_SPTR)s, n, pos, 0, w->md, w->mctx)
                       : pcre2_match(re, (PCRE2_SPTR)s, n, pos, 0, w->md, w->mctx);
    if (rc == PCRE2_ERROR_NOMATCH) return 0;
    if (rc < 0) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof msg);
        td_die(__FILE__, __LINE__, "pcre2_match", "a tokenizer.json regex this costly cannot be used as it is",
               "matching a pre-tokenizer regex of '%s' at byte %zu: %s", w->t->name, pos, (char *)msg);
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(w->md);
    *ms = ov[0], *me = ov[1];
    TD_ASSERT(*ms >= pos && *me >= *ms && *me <= n);
    return 1;
}

/* The library's find_matches: spans tiling s[0..n), each a match or not. Regex matches follow
 * Oniguruma's find_iter: an empty match right where the previous match ended is skipped. */
static size_t find_spans(hf_worker *w, const pattern *p, const char *s, size_t n)
{
    size_t k = 0, prev = 0;
    if (n == 0) {
        span_push(&w->sp, &k, &w->sp_cap, 0, 0, 0);
        return k;
    }
    if (!p->re) {
        if (p->nlit == 0) {
            span_push(&w->sp, &k, &w->sp_cap, 0, n, 0);
            return k;
        }
        for (size_t i = 0; i + p->nlit <= n;) {
            const char *hit = memmem(s + i, n - i, p->lit, p->nlit);
            if (!hit) break;
            size_t at = (size_t)(hit - s);
            if (at > prev) span_push(&w->sp, &k, &w->sp_cap, prev, at, 0);
            span_push(&w->sp, &k, &w->sp_cap, at, at + p->nlit, 1);
            prev = i = at + p->nlit;
        }
    } else {
        size_t last_end = 0, last_match_end = 0;
        int have_last = 0;
        while (last_end <= n) {
            size_t ms, me;
            if (!re_next(w, p->re, s, n, last_end, &ms, &me)) break;
            if (me == ms && have_last && last_match_end == me) {
                if (last_end >= n) break;
                last_end += char_len(s + last_end, n - last_end);
                continue;
            }
            last_end = me, last_match_end = me, have_last = 1;
            if (ms != prev) span_push(&w->sp, &k, &w->sp_cap, prev, ms, 0);
            span_push(&w->sp, &k, &w->sp_cap, ms, me, 1);
            prev = me;
        }
    }
    if (prev != n) span_push(&w->sp, &k, &w->sp_cap, prev, n, 0);
    return k;
}

/* Cuts piece p by pattern with a split behaviour; pushes the non-empty parts to out. */
static void split_piece(hf_worker *w, const piece *p, const pattern *pat, enum split_behavior bh, int invert,
                        plist *out)
{
    size_t k = find_spans(w, pat, p->s, p->n), m = 0;
    span *sp = w->sp;
    if (invert)
        for (size_t i = 0; i < k; i++) sp[i].match = !sp[i].match;
    int prev_match = 0;
    switch (bh) {
    case SB_REMOVED:
    case SB_ISOLATED:
        for (size_t i = 0; i < k; i++)
            if (!(bh == SB_REMOVED && sp[i].match)) span_push(&w->sp2, &m, &w->sp2_cap, sp[i].start, sp[i].end, 0);
        break;
    case SB_MERGED_PREV:
        for (size_t i = 0; i < k; i++) {
            if (sp[i].match && !prev_match && m) w->sp2[m - 1].end = sp[i].end;
            else span_push(&w->sp2, &m, &w->sp2_cap, sp[i].start, sp[i].end, 0);
            prev_match = sp[i].match;
        }
        break;
    case SB_MERGED_NEXT: /* built from the end, then read backwards */
        for (size_t i = k; i-- > 0;) {
            if (sp[i].match && !prev_match && m) w->sp2[m - 1].start = sp[i].start;
            else span_push(&w->sp2, &m, &w->sp2_cap, sp[i].start, sp[i].end, 0);
            prev_match = sp[i].match;
        }
        for (size_t i = 0; i < m / 2; i++) {
            span tmp = w->sp2[i];
            w->sp2[i] = w->sp2[m - 1 - i];
            w->sp2[m - 1 - i] = tmp;
        }
        break;
    case SB_CONTIGUOUS:
        for (size_t i = 0; i < k; i++) {
            if (sp[i].match == prev_match && m) w->sp2[m - 1].end = sp[i].end;
            else span_push(&w->sp2, &m, &w->sp2_cap, sp[i].start, sp[i].end, 0);
            prev_match = sp[i].match;
        }
        break;
    }
    for (size_t i = 0; i < m; i++)
        if (w->sp2[i].end > w->sp2[i].start)
            pl_push(out, p->s + w->sp2[i].start, w->sp2[i].end - w->sp2[i].start, p->first && w->sp2[i].start == 0);
}

/* Metaspace: spaces become the replacement, which is prepended per the scheme; then split
 * before each replacement (MergedWithNext). */
static void metaspace_piece(hf_worker *w, const pre_step *st, const piece *p, plist *out)
{
    size_t spaces = 0;
    for (size_t i = 0; i < p->n; i++) spaces += p->s[i] == ' ';
    char *buf = ar_alloc(w, p->n + spaces * st->nrep + st->nrep + 1), *q = buf;
    for (size_t i = 0; i < p->n; i++) {
        if (p->s[i] == ' ') memcpy(q, st->rep, st->nrep), q += st->nrep;
        else *q++ = p->s[i];
    }
    size_t n = (size_t)(q - buf);
    int starts = n >= st->nrep && memcmp(buf, st->rep, st->nrep) == 0;
    if (!starts && (st->prepend == PS_ALWAYS || (st->prepend == PS_FIRST && p->first))) {
        memmove(buf + st->nrep, buf, n);
        memcpy(buf, st->rep, st->nrep);
        n += st->nrep;
    }
    piece np = {buf, n, p->first};
    if (st->split) split_piece(w, &np, &st->pat, SB_MERGED_NEXT, 0, out);
    else if (n) pl_push(out, buf, n, p->first);
}

static void bytelevel_piece(hf_worker *w, const pre_step *st, const piece *p, plist *out)
{
    piece np = *p;
    if (st->add_prefix_space && !(p->n && p->s[0] == ' ')) {
        char *buf = ar_alloc(w, p->n + 1);
        buf[0] = ' ';
        memcpy(buf + 1, p->s, p->n);
        np.s = buf, np.n = p->n + 1;
    }
    if (st->has_pat) split_piece(w, &np, &st->pat, SB_ISOLATED, 0, out);
    else if (np.n) pl_push(out, np.s, np.n, np.first);
}

/* ---- BPE on one word -------------------------------------------------------------------- */

static void scratch_reserve(hf_worker *w, size_t n)
{
    if (n <= w->scratch_cap) return;
    size_t cap = w->scratch_cap ? w->scratch_cap : 64;
    while (cap < n) cap *= 2;
    w->id = td_xrealloc(w->id, cap * sizeof *w->id);
    w->prev = td_xrealloc(w->prev, cap * sizeof *w->prev);
    w->next = td_xrealloc(w->next, cap * sizeof *w->next);
    w->scratch_cap = cap;
}

static void heap_push(hf_worker *w, size_t *hn, uint64_t key, int32_t new_id)
{
    if (*hn == w->heap_cap) {
        w->heap_cap = w->heap_cap ? 2 * w->heap_cap : 256;
        w->heap = td_xrealloc(w->heap, w->heap_cap * sizeof *w->heap);
    }
    merge_entry *h = w->heap, v = {key, new_id};
    size_t i = (*hn)++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (h[parent].key <= key) break;
        h[i] = h[parent];
        i = parent;
    }
    h[i] = v;
}

static merge_entry heap_pop(hf_worker *w, size_t *hn)
{
    merge_entry *h = w->heap, top = h[0], last = h[--*hn];
    size_t i = 0, len = *hn;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= len) break;
        if (c + 1 < len && h[c + 1].key < h[c].key) c++;
        if (h[c].key >= last.key) break;
        h[i] = h[c];
        i = c;
    }
    if (len) h[i] = last;
    return top;
}

static void push_pair(hf_worker *w, size_t *hn, int32_t p)
{
    if (p < 0 || w->next[p] < 0) return;
    const pair_slot *s = pair_find(w->t, w->id[p], w->id[w->next[p]]);
    if (s) heap_push(w, hn, (uint64_t)(uint32_t)s->rank << 32 | (uint32_t)p, s->id);
}

/* The library's merge_word: a word's characters (its bytes, under ByteLevel) become symbols:
 * their token, else their bytes' <0xNN> tokens (byte_fallback), else the unknown token (runs
 * fused with fuse_unk). Returns the number of symbols in w->id. */
static size_t word_symbols(hf_worker *w, const char *s, size_t n)
{
    const hf_tokenizer *t = w->t;
    scratch_reserve(w, n + 1);
    size_t ns = 0;
    int unk = 0;
    for (size_t i = 0; i < n;) {
        size_t k = t->byte_level ? 1 : char_len(s + i, n - i);
        int32_t id = k == 1 ? t->byte_id[(unsigned char)s[i]] : smap_find(&t->keys, &t->pool, s + i, k);
        if (id >= 0) {
            if (unk) w->id[ns++] = t->unk_id, unk = 0;
            w->id[ns++] = id;
        } else {
            int all = t->byte_fallback;
            for (size_t j = 0; j < k && all; j++) all = t->fallback_id[(unsigned char)s[i + j]] >= 0;
            if (all) {
                for (size_t j = 0; j < k; j++) w->id[ns++] = t->fallback_id[(unsigned char)s[i + j]];
            } else if (t->unk_id >= 0) {
                if (unk && !t->fuse_unk) w->id[ns++] = t->unk_id; /* the previous one; this one waits */
                unk = 1;
            }
        }
        i += k;
    }
    if (unk) w->id[ns++] = t->unk_id;
    return ns;
}

/* Merges the symbols: the heap yields the lowest (rank, position); an entry is used if the pair
 * now at its position still merges into the same token; pairs a merge creates join at once. */
static void merge_symbols(hf_worker *w, size_t ns)
{
    int32_t *id = w->id, *prev = w->prev, *next = w->next;
    for (size_t i = 0; i < ns; i++) {
        prev[i] = (int32_t)i - 1;
        next[i] = i + 1 < ns ? (int32_t)i + 1 : -1;
    }
    size_t hn = 0;
    for (size_t i = 0; i + 1 < ns; i++) push_pair(w, &hn, (int32_t)i);
    while (hn) {
        merge_entry top = heap_pop(w, &hn);
        int32_t p = (int32_t)(uint32_t)top.key, q = next[p];
        if (id[p] < 0 || q < 0) continue;
        const pair_slot *pair = pair_find(w->t, id[p], id[q]);
        if (!pair || pair->id != top.new_id) continue;
        id[p] = top.new_id;
        id[q] = -1;
        next[p] = next[q];
        if (next[q] >= 0) prev[next[q]] = p;
        push_pair(w, &hn, prev[p]);
        push_pair(w, &hn, p);
    }
}

static void ids_push(bpe_ids *v, int32_t id) { bpe_ids_push(v, id); }

static void ids_append(bpe_ids *v, const int32_t *ids, size_t n)
{
    if (n == 0) return;
    if (v->n + n > v->cap) {
        while (v->n + n > v->cap) v->cap = v->cap ? 2 * v->cap : 256;
        v->ids = td_xrealloc(v->ids, v->cap * sizeof *v->ids);
    }
    memcpy(v->ids + v->n, ids, n * sizeof *ids);
    v->n += n;
}

static cache_slot *cache_find(hf_worker *w, const char *s, size_t n, uint64_t h)
{
    for (size_t i = h & (CACHE_SLOTS - 1);; i = (i + 1) & (CACHE_SLOTS - 1)) {
        cache_slot *c = &w->slots[i];
        if (c->hash == 0) return c;
        if (c->hash == h && c->key_len == n && memcmp(w->keys + c->key, s, n) == 0) return c;
    }
}

static void cache_store(hf_worker *w, const char *s, size_t n, uint64_t h, const int32_t *ids, size_t n_ids)
{
    if (2 * (w->cache_used + 1) > CACHE_SLOTS) {
        memset(w->slots, 0, CACHE_SLOTS * sizeof *w->slots);
        w->cache_used = w->keys_len = w->vals_len = 0;
    }
    if (n_ids > UINT16_MAX) return;
    cache_slot *c = cache_find(w, s, n, h);
    if (w->keys_len + n > w->keys_cap) w->keys = td_xrealloc(w->keys, w->keys_cap = 2 * (w->keys_cap + n) + 4096);
    if (w->vals_len + n_ids > w->vals_cap)
        w->vals = td_xrealloc(w->vals, (w->vals_cap = 2 * (w->vals_cap + n_ids) + 1024) * sizeof *w->vals);
    memcpy(w->keys + w->keys_len, s, n);
    if (n_ids) memcpy(w->vals + w->vals_len, ids, n_ids * sizeof *ids); /* none: unknown characters, no unk token */
    *c = (cache_slot){h, (uint32_t)w->keys_len, (uint32_t)w->vals_len, (uint16_t)n, (uint16_t)n_ids};
    w->keys_len += n, w->vals_len += n_ids;
    w->cache_used++;
}

/* The model's tokenize on one word. */
static void bpe_word(hf_worker *w, const char *s, size_t n, bpe_ids *out)
{
    const hf_tokenizer *t = w->t;
    if (n == 0) return;
    if (t->ignore_merges) {
        int32_t id = n == 1 ? t->byte_id[(unsigned char)s[0]] : smap_find(&t->keys, &t->pool, s, n);
        if (id >= 0) {
            ids_push(out, id);
            return;
        }
    }
    uint64_t h = 0;
    if (n <= CACHE_MAX_WORD) {
        h = hash_bytes(s, n) | 1;
        cache_slot *c = cache_find(w, s, n, h);
        if (c->hash) {
            if (c->n_ids) ids_append(out, w->vals + c->val, c->n_ids);
            return;
        }
    }
    size_t ns = word_symbols(w, s, n), first = out->n;
    merge_symbols(w, ns);
    for (size_t i = 0; i < ns; i++)
        if (w->id[i] >= 0) ids_push(out, w->id[i]);
    if (n <= CACHE_MAX_WORD) cache_store(w, s, n, h, out->n > first ? out->ids + first : NULL, out->n - first);
}

/* ---- added tokens ------------------------------------------------------------------------ */

static int is_word_char(const hf_tokenizer *t, hf_worker *w, const char *s, size_t n)
{
    return pcre2_match(t->word_re, (PCRE2_SPTR)s, n, 0, PCRE2_ANCHORED, w->md, NULL) >= 0;
}

/* Start of the last character of s[0..n). */
static size_t last_char(const char *s, size_t n)
{
    size_t i = n - 1;
    while (i > 0 && n - i < 4 && ((unsigned char)s[i] & 0xc0) == 0x80) i--;
    return char_len(s + i, n - i) == n - i ? i : n - 1;
}

static int space_at(const char *s, size_t n)
{
    uint32_t cp;
    return utf8_len((const unsigned char *)s, n, &cp) && is_space_cp(cp);
}

/* The library's AddedVocabulary split: leftmost-longest matches of the set's tokens, honouring
 * single_word, lstrip and rstrip; pushes text and token segments of s[0..n) to out. */
static void split_added(hf_worker *w, const added_set *set, const char *s, size_t n, int first, seglist *out)
{
    size_t start_offset = 0, pos = 0;
    while (set->n && pos < n) {
        unsigned char c = (unsigned char)s[pos];
        const added_tok *hit = NULL;
        for (int k = set->bucket[c]; k < set->bucket[c + 1] && !hit; k++)
            if (set->tok[k].n <= n - pos && memcmp(set->tok[k].s, s + pos, set->tok[k].n) == 0) hit = &set->tok[k];
        if (!hit) {
            pos++;
            continue;
        }
        size_t start = pos, stop = pos + hit->n;
        pos = stop;
        if (hit->single_word) {
            int before = start > 0 && is_word_char(w->t, w, s + last_char(s, start), start - last_char(s, start));
            int after = stop < n && is_word_char(w->t, w, s + stop, char_len(s + stop, n - stop));
            if (before || after) continue;
        }
        if (hit->lstrip) {
            size_t ns = start;
            while (ns > 0) {
                size_t lc = last_char(s, ns);
                if (!space_at(s + lc, ns - lc)) break;
                ns = lc;
            }
            start = ns > start_offset ? ns : start_offset;
        }
        if (hit->rstrip)
            while (stop < n && space_at(s + stop, n - stop)) stop += char_len(s + stop, n - stop);
        if (start < start_offset) continue;
        if (start > start_offset) seg_push(out, s + start_offset, start - start_offset, -1, first && start_offset == 0);
        seg_push(out, s + start, stop - start, hit->id, 0);
        start_offset = stop;
        if (pos < stop) pos = stop;
    }
    if (start_offset < n || n == 0) seg_push(out, s + start_offset, n - start_offset, -1, first && start_offset == 0);
}

/* ---- encode ------------------------------------------------------------------------------ */

/* Pre-tokenizes one normalized text without added tokens and runs the model on each word. */
static void encode_words(hf_worker *w, const char *s, size_t n, int first, bpe_ids *out)
{
    const hf_tokenizer *t = w->t;
    if (n == 0) return; /* the library gives no ids for an empty text, whatever its pre-tokenizers */
    ar_reset(w);
    plist *a = &w->pl[0], *b = &w->pl[1];
    a->n = 0;
    pl_push(a, s, n, first);
    for (int k = 0; k < t->n_pre; k++) {
        const pre_step *st = &t->pre[k];
        b->n = 0;
        for (size_t i = 0; i < a->n; i++) {
            if (st->kind == PRE_SPLIT) split_piece(w, &a->p[i], &st->pat, st->behavior, st->invert, b);
            else if (st->kind == PRE_METASPACE) metaspace_piece(w, st, &a->p[i], b);
            else bytelevel_piece(w, st, &a->p[i], b);
        }
        plist *tmp = a;
        a = b, b = tmp;
    }
    for (size_t i = 0; i < a->n; i++) bpe_word(w, a->p[i].s, a->p[i].n, out);
}

void hf_encode(hf_worker *w, const char *text, size_t len, bpe_ids *out)
{
    const hf_tokenizer *t = w->t;
    seglist *raw = &w->seg[0], *nrm = &w->seg[1];
    raw->n = 0;
    split_added(w, &t->raw, text, len, 1, raw);
    for (size_t i = 0; i < raw->n; i++) {
        const segment g = raw->v[i];
        if (g.id >= 0) {
            ids_push(out, g.id);
            continue;
        }
        size_t nn;
        const char *s = normalize(t, g.s, g.n, w->nbuf, &nn);
        nrm->n = 0;
        split_added(w, &t->normed, s, nn, g.first, nrm);
        for (size_t j = 0; j < nrm->n; j++) {
            if (nrm->v[j].id >= 0) ids_push(out, nrm->v[j].id);
            else encode_words(w, nrm->v[j].s, nrm->v[j].n, nrm->v[j].first, out);
        }
    }
}

/* ---- decode ------------------------------------------------------------------------------ */

typedef struct {
    sbuf text;   /* all token strings, back to back */
    size_t *off; /* token i is text[off[i] .. off[i + 1]) */
    size_t n, cap;
} toklist;

static void tl_begin(toklist *l)
{
    l->n = 0;
    l->text.n = 0;
    sb_add(&l->text, "", 0);
    if (!l->cap) l->off = td_xmalloc((l->cap = 64) * sizeof *l->off);
    l->off[0] = 0;
}

/* Ends the token being written (its bytes were added to text). */
static void tl_end(toklist *l)
{
    if (l->n + 2 > l->cap) l->off = td_xrealloc(l->off, (l->cap *= 2) * sizeof *l->off);
    l->off[++l->n] = l->text.n;
}

static void tl_push(toklist *l, const char *s, size_t n)
{
    sb_add(&l->text, s, n);
    tl_end(l);
}

static int byte_token(const char *s, size_t n)
{
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* Applies one decoder to the tokens of in, writing out. */
static void decode_step(const dec_step *st, const toklist *in, toklist *out, const int16_t *cp_to_byte)
{
    tl_begin(out);
    const char *base = in->text.p;
    int pending = 0; /* ByteFallback: bytes written to out's open token */
    for (size_t i = 0; i < in->n; i++) {
        const char *s = base + in->off[i];
        size_t n = in->off[i + 1] - in->off[i];
        switch (st->kind) {
        case DEC_BYTELEVEL: { /* all tokens into one string */
            size_t at = out->text.n;
            sb_add(&out->text, s, n);
            long k = alphabet_to_bytes(s, n, cp_to_byte, out->text.p + at);
            if (k >= 0) out->text.n = at + (size_t)k;
            else memcpy(out->text.p + at, s, n); /* not byte-level: the token's own bytes */
            break;
        }
        case DEC_FUSE:
            sb_add(&out->text, s, n);
            break;
        case DEC_REPLACE:
            replace_into(&out->text, s, n, st->a, st->na, st->b, st->nb);
            tl_end(out);
            break;
        case DEC_BYTEFALLBACK: {
            int b = byte_token(s, n);
            if (b >= 0) {
                char c = (char)b;
                sb_add(&out->text, &c, 1);
                pending = 1;
                break;
            }
            if (pending) tl_end(out), pending = 0;
            tl_push(out, s, n);
            break;
        }
        case DEC_STRIP: {
            size_t a = 0, e = n;
            for (int k = 0; k < st->start && e - a >= st->na && memcmp(s + a, st->a, st->na) == 0; k++) a += st->na;
            for (int k = 0; k < st->stop && e - a >= st->na && memcmp(s + e - st->na, st->a, st->na) == 0; k++) e -= st->na;
            tl_push(out, s + a, e - a);
            break;
        }
        case DEC_METASPACE:
            for (size_t j = 0; j < n;) {
                if (n - j >= st->na && memcmp(s + j, st->a, st->na) == 0) {
                    if (!(i == 0 && st->prepend != PS_NEVER)) sb_add(&out->text, " ", 1);
                    j += st->na;
                } else {
                    sb_add(&out->text, s + j, 1);
                    j++;
                }
            }
            tl_end(out);
            break;
        }
    }
    if (st->kind == DEC_BYTELEVEL || st->kind == DEC_FUSE || pending) tl_end(out);
}

int hf_decode(const hf_tokenizer *t, const int32_t *ids, size_t n, char **out, size_t *out_len, char *err,
              size_t errlen)
{
    toklist l[2] = {{{0}, 0, 0, 0}, {{0}, 0, 0, 0}};
    tl_begin(&l[0]);
    for (size_t i = 0; i < n; i++) {
        size_t k;
        const char *s = hf_token(t, ids[i], &k);
        if (!s) {
            td_seterr(err, errlen, "token id %d (position %zu) is not in the vocab (ids 0..%d%s)", ids[i], i,
                      t->n_vocab - 1, ids[i] >= 0 && ids[i] < t->n_vocab ? ", with gaps" : "");
            free(l[0].text.p), free(l[0].off);
            return -1;
        }
        if (!t->has_decoder && i) sb_add(&l[0].text, " ", 1); /* no decoder: tokens joined by spaces */
        tl_push(&l[0], s, k);
    }
    int16_t cp_to_byte[324];
    byte_alphabet(cp_to_byte);
    int cur = 0;
    for (int k = 0; k < t->n_dec; k++, cur ^= 1) decode_step(&t->dec[k], &l[cur], &l[cur ^ 1], cp_to_byte);
    size_t len = l[cur].text.n;
    char *buf = td_xrealloc(*out, len ? len : 1);
    memcpy(buf, l[cur].text.p, len);
    *out = buf;
    *out_len = len;
    for (int k = 0; k < 2; k++) free(l[k].text.p), free(l[k].off);
    return 0;
}
