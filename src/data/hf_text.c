/* The text machinery of the Hugging Face tokenizer, used both by the reader of tokenizer.json
 * (hf_tokenizer.c) and by the encode pipeline (hf_encode.c): UTF-8 and GPT-2's byte alphabet,
 * the string pool with its string -> id map, growable buffers, the file's Oniguruma regexes run
 * on PCRE2, and the normalizers (prepend, replace, Unicode NFC/NFD/NFKC/NFKD through ICU). See
 * src/data/hf_impl.h and docs/tokenizer.md. */
#include "hf_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/check.h"
#include "icu.h"

/* ---- small helpers --------------------------------------------------------------------- */

uint64_t hf_hash_bytes(const char *s, size_t n)
{
    uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
    h ^= h >> 32; /* mix the high bits into the low ones the tables index by */
    h *= 0xd6e8feb86659fd93ull;
    return h ^ (h >> 32);
}

/* Length of the valid UTF-8 character at s (1-4), or 0 if the bytes there are not one. */
size_t hf_utf8_len(const unsigned char *s, size_t n, uint32_t *cp)
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
size_t hf_char_len(const char *s, size_t n)
{
    uint32_t cp;
    size_t k = hf_utf8_len((const unsigned char *)s, n, &cp);
    return k ? k : 1;
}

/* GPT-2's byte alphabet: bytes 33-126, 161-172, 174-255 are themselves, the other 68 map in
 * order to U+0100.. . cp_to_byte has 324 entries (-1: not in the alphabet). */
void hf_byte_alphabet(int16_t cp_to_byte[324])
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
long hf_alphabet_to_bytes(const char *s, size_t n, const int16_t *cp_to_byte, char *out)
{
    long len = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t k = hf_utf8_len((const unsigned char *)s + i, n - i, &cp);
        if (!k || cp >= 324 || cp_to_byte[cp] < 0) return -1;
        out[len++] = (char)cp_to_byte[cp];
        i += k;
    }
    return len;
}

/* ---- string pool and string -> id map ------------------------------------------------- */

uint32_t hf_pool_add(strpool *sp, const char *s, size_t n)
{
    if (!sp->p || sp->n + n > sp->cap) { /* allocated even for "": tokens point into it */
        while (!sp->cap || sp->n + n > sp->cap) sp->cap = sp->cap ? 2 * sp->cap : 1 << 16;
        sp->p = td_xrealloc(sp->p, sp->cap);
    }
    TD_CHECK(sp->n + n < UINT32_MAX, "the tokenizer file is too large", "string pool over 4 GB");
    if (n) memcpy(sp->p + sp->n, s, n);
    uint32_t off = (uint32_t)sp->n;
    sp->n += n;
    return off;
}

void hf_smap_init(smap *m, size_t n)
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

uint64_t hf_smap_hash(const char *s, size_t n) { return hf_hash_bytes(s, n) | 1ull << 63; }

int32_t hf_smap_find_hashed(const smap *m, const strpool *sp, const char *s, size_t n, uint64_t h)
{
    if (!m->slot) return -1;
    smap_slot *x = smap_slot_for(m, sp, s, n, h);
    return x->hash ? x->id : -1;
}

int32_t hf_smap_find(const smap *m, const strpool *sp, const char *s, size_t n)
{
    return hf_smap_find_hashed(m, sp, s, n, hf_smap_hash(s, n));
}

/* Maps the pooled string (off, n) to id; a later put of the same string wins. */
void hf_smap_put(smap *m, const strpool *sp, uint32_t off, size_t n, int32_t id)
{
    if (2 * (m->used + 1) > m->mask + 1) {
        smap old = *m;
        hf_smap_init(m, 2 * (old.mask + 1));
        for (size_t i = 0; i <= old.mask; i++) {
            smap_slot *o = &old.slot[i];
            if (o->hash) *smap_slot_for(m, sp, sp->p + o->off, o->len, o->hash) = *o, m->used++;
        }
        free(old.slot);
    }
    uint64_t h = hf_hash_bytes(sp->p + off, n) | 1ull << 63;
    smap_slot *x = smap_slot_for(m, sp, sp->p + off, n, h);
    if (!x->hash) m->used++;
    *x = (smap_slot){h, off, (uint32_t)n, id};
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

void hf_sb_add(sbuf *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        while (b->n + n + 1 > b->cap) b->cap = b->cap ? 2 * b->cap : 256;
        b->p = td_xrealloc(b->p, b->cap);
    }
    if (n && s) memcpy(b->p + b->n, s, n); /* s NULL: room only */
    b->n += n;
    b->p[b->n] = 0;
}

static void sb_str(sbuf *b, const char *s) { hf_sb_add(b, s, strlen(s)); }

static void sb_ranges(sbuf *b, const uint32_t (*r)[2], size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char tmp[48];
        int k = snprintf(tmp, sizeof tmp, "\\x{%x}-\\x{%x}", r[i][0], r[i][1]);
        hf_sb_add(b, tmp, (size_t)k);
    }
}

/* Rewrites \s, \S, \p{L}, \P{L}, \p{N}, \P{N} to Oniguruma's classes (inside a character class
 * only the positive forms are rewritten). Everything else is passed to PCRE2 as written. */
static char *regex_rewrite(const char *src, size_t n)
{
    sbuf b = {0};
    hf_sb_add(&b, "", 0);
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
            hf_sb_add(&b, src + i, 2);
            i++;
            continue;
        }
        if (!in_class && c == '[') {
            in_class = 1;
            hf_sb_add(&b, src + i, 1);
            if (i + 1 < n && src[i + 1] == '^') hf_sb_add(&b, src + ++i, 1);
            if (i + 1 < n && src[i + 1] == ']') hf_sb_add(&b, src + ++i, 1); /* a literal ] first */
            continue;
        }
        if (in_class && c == ']') in_class = 0;
        hf_sb_add(&b, &c, 1);
    }
    return b.p;
}

pcre2_code *hf_regex_compile(const char *src, size_t n, int rewrite, int *jit, char *err, size_t errlen,
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

/* ---- normalizers ------------------------------------------------------------------------ */

/* Appends s[0..n) to b with every occurrence of pat replaced by rep (left to right). */
void hf_replace_into(sbuf *b, const char *s, size_t n, const char *pat, size_t np, const char *rep, size_t nr)
{
    size_t i = 0;
    while (i < n) {
        const char *hit = np <= n - i ? memmem(s + i, n - i, pat, np) : NULL;
        size_t end = hit ? (size_t)(hit - s) : n;
        hf_sb_add(b, s + i, end - i);
        if (!hit) break;
        hf_sb_add(b, rep, nr);
        i = end + np;
    }
}

/* Runs the normalizers over s[0..n); the result is s itself (no normalizer) or in one of bufs. */
/* Appends the Unicode normalization of the valid UTF-8 s[0..n) to b (ICU; UTF-16 in between). */
static void unicode_run(sbuf *b, const char *s, size_t n, const UNormalizer2 *nz)
{
    TD_CHECK(n < INT32_MAX / 4, "split the text", "normalizing a text of %zu bytes (at most 512 MB)", n);
    UErrorCode st = U_ZERO_ERROR;
    UChar *src = td_xmalloc((n + 1) * sizeof *src);
    int32_t n16 = 0, n_out, n8 = 0;
    td_icu()->u_strFromUTF8(src, (int32_t)n + 1, &n16, s, (int32_t)n, &st);
    TD_CHECK(U_SUCCESS(st), "this is a bug in trident", "u_strFromUTF8: %s", td_icu()->u_errorName(st));
    st = U_ZERO_ERROR;
    n_out = td_icu()->unorm2_normalize(nz, src, n16, NULL, 0, &st); /* preflight: the length */
    UChar *dst = td_xmalloc(((size_t)n_out + 1) * sizeof *dst);
    st = U_ZERO_ERROR;
    td_icu()->unorm2_normalize(nz, src, n16, dst, n_out + 1, &st);
    TD_CHECK(U_SUCCESS(st), "this is a bug in trident", "unorm2_normalize: %s", td_icu()->u_errorName(st));
    st = U_ZERO_ERROR;
    td_icu()->u_strToUTF8(NULL, 0, &n8, dst, n_out, &st);
    size_t at = b->n;
    hf_sb_add(b, NULL, (size_t)n8); /* room */
    st = U_ZERO_ERROR;
    td_icu()->u_strToUTF8(b->p + at, n8 + 1, &n8, dst, n_out, &st);
    TD_CHECK(U_SUCCESS(st), "this is a bug in trident", "u_strToUTF8: %s", td_icu()->u_errorName(st));
    free(src);
    free(dst);
}

/* Whether the library's normalizer knows cp. Its tables (the unicode-normalization-alignments
 * crate) are Unicode 9.0: found by running every code point through the reference's NFKD and
 * NFD (characters of 9.0 decompose and reorder; of 10.0 and later do not). To it a later
 * character is a starter without decomposition that composes with nothing. */
static int known_to_library(uint32_t cp)
{
    UVersionInfo age;
    td_icu()->u_charAge((UChar32)cp, age);
    return age[0] > 0 && (age[0] < 9 || (age[0] == 9 && age[1] == 0));
}

/* NFC and friends over any bytes as the library computes them: each maximal run of valid UTF-8
 * of characters it knows is normalized (runs of ASCII alone are already normal); characters it
 * does not know, which block reordering and composition there, and invalid bytes are kept as
 * they are. */
static void unicode_into(sbuf *b, const char *s, size_t n, const UNormalizer2 *nz)
{
    for (size_t i = 0; i < n;) {
        size_t j = i, k = 0;
        int ascii = 1;
        uint32_t cp = 0;
        for (; j < n && (k = hf_utf8_len((const unsigned char *)s + j, n - j, &cp)) > 0; j += k) {
            if (cp >= 0x80 && !known_to_library(cp)) break;
            ascii &= cp < 0x80;
        }
        if (j > i && ascii) hf_sb_add(b, s + i, j - i);
        else if (j > i) unicode_run(b, s + i, j - i, nz);
        if (j == n) break;
        size_t skip = k ? k : 1; /* a later character, or an invalid byte */
        hf_sb_add(b, s + j, skip);
        i = j + skip;
    }
}

const char *hf_normalize(const hf_tokenizer *t, const char *s, size_t n, sbuf bufs[2], size_t *out_n)
{
    const char *cur = s;
    size_t len = n;
    for (int i = 0; i < t->n_norm; i++) {
        const norm_step *st = &t->norm[i];
        if (st->kind == NORM_PREPEND && len == 0) continue;
        sbuf *b = cur == bufs[0].p ? &bufs[1] : &bufs[0]; /* never the one cur is in */
        b->n = 0;
        hf_sb_add(b, "", 0);
        if (st->kind == NORM_PREPEND) {
            hf_sb_add(b, st->a, st->na);
            hf_sb_add(b, cur, len);
        } else if (st->kind == NORM_REPLACE) {
            hf_replace_into(b, cur, len, st->a, st->na, st->b, st->nb);
        } else {
            unicode_into(b, cur, len, st->unorm);
        }
        cur = b->p, len = b->n;
    }
    *out_n = len;
    return cur;
}
