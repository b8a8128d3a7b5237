/* BERT's WordPiece tokenizer: the basic tokenizer (Hugging Face's BertNormalizer and
 * BertPreTokenizer, after Google's BERT tokenization.py) and greedy longest-match WordPiece with
 * "##" continuations. See include/data/trident/wordpiece.h and docs/tokenizer.md. */
#include "trident/wordpiece.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unicode/utf8.h>

#include "trident/check.h"
#include "icu.h"

#define WP_MAX_WORD 100 /* max_input_chars_per_word: a longer word is [UNK] */

struct wp_tokenizer {
    char **tokens;   /* id -> token */
    int n;
    int *slots;      /* open addressing: token -> id + 1 (0 empty) */
    size_t nslots;
    int lowercase, strip_accents, chinese, clean;
    int unk, sep;
};

static uint64_t hash(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h;
}

static int lookup(const wp_tokenizer *t, const char *s, size_t n)
{
    for (size_t i = hash(s, n) & (t->nslots - 1);; i = (i + 1) & (t->nslots - 1)) {
        int v = t->slots[i];
        if (!v) return -1;
        const char *tok = t->tokens[v - 1];
        if (strlen(tok) == n && memcmp(tok, s, n) == 0) return v - 1;
    }
}

static wp_tokenizer *build(char **tokens, int n, const wp_options *o, char *err, size_t errlen, const char *src)
{
    wp_tokenizer *t = td_xcalloc(1, sizeof *t);
    t->tokens = tokens, t->n = n;
    t->nslots = 1;
    while (t->nslots < (size_t)n * 2 + 16) t->nslots <<= 1;
    t->slots = td_xcalloc(t->nslots, sizeof(int));
    for (int id = 0; id < n; id++) {
        if (!tokens[id]) {
            td_seterr(err, errlen, "%s: no token has id %d (the ids must run 0 .. %d)", src, id, n - 1);
            wp_free(t);
            return NULL;
        }
        size_t len = strlen(tokens[id]), i = hash(tokens[id], len) & (t->nslots - 1);
        while (t->slots[i]) {
            if (strcmp(t->tokens[t->slots[i] - 1], tokens[id]) == 0) break; /* a repeat keeps the first id */
            i = (i + 1) & (t->nslots - 1);
        }
        if (!t->slots[i]) t->slots[i] = id + 1;
    }
    t->lowercase = o->lowercase, t->strip_accents = o->strip_accents, t->chinese = o->chinese, t->clean = o->clean;
    t->unk = lookup(t, o->unk ? o->unk : "[UNK]", strlen(o->unk ? o->unk : "[UNK]"));
    t->sep = lookup(t, "[SEP]", 5);
    if (t->unk < 0) {
        td_seterr(err, errlen, "%s has no %s token (the unknown-word token WordPiece needs)", src,
                  o->unk ? o->unk : "[UNK]");
        wp_free(t);
        return NULL;
    }
    return t;
}

wp_tokenizer *wp_load_vocab(const char *path, const wp_options *o, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        td_seterr(err, errlen, "cannot open the WordPiece vocabulary %s: %s", path, td_strerror(errno));
        return NULL;
    }
    char *line = NULL, **tokens = NULL;
    size_t cap = 0;
    ssize_t len;
    int n = 0;
    while ((len = getline(&line, &cap, f)) >= 0) {
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        tokens = td_xrealloc(tokens, (size_t)(n + 1) * sizeof *tokens);
        tokens[n++] = td_xstrdup(line);
    }
    free(line);
    fclose(f);
    if (n == 0) {
        td_seterr(err, errlen, "%s is empty: a WordPiece vocab.txt holds one token a line", path);
        free(tokens);
        return NULL;
    }
    return build(tokens, n, o, err, errlen, path);
}

wp_tokenizer *wp_from_json(const cJSON *model, const wp_options *o, char *err, size_t errlen, const char *src)
{
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    if (!cJSON_IsObject(vocab)) {
        td_seterr(err, errlen, "%s: the WordPiece model has no \"vocab\" object", src);
        return NULL;
    }
    int n = cJSON_GetArraySize(vocab);
    char **tokens = td_xcalloc((size_t)n, sizeof *tokens);
    for (const cJSON *e = vocab->child; e; e = e->next) {
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble >= n || tokens[e->valueint]) {
            td_seterr(err, errlen, "%s: vocab entry \"%s\" has a bad or repeated id", src, e->string);
            for (int i = 0; i < n; i++) free(tokens[i]);
            free(tokens);
            return NULL;
        }
        tokens[e->valueint] = td_xstrdup(e->string);
    }
    return build(tokens, n, o, err, errlen, src);
}

void wp_free(wp_tokenizer *t)
{
    if (!t) return;
    for (int i = 0; i < t->n; i++) free(t->tokens[i]);
    free(t->tokens);
    free(t->slots);
    free(t);
}

int wp_vocab_size(const wp_tokenizer *t) { return t->n; }
int wp_sep_id(const wp_tokenizer *t) { return t->sep; }
const char *wp_token(const wp_tokenizer *t, int id) { return id >= 0 && id < t->n ? t->tokens[id] : NULL; }

int wp_token_id(const wp_tokenizer *t, const char *token) { return lookup(t, token, strlen(token)); }

/* ---- the basic tokenizer ---- */

/* BERT's CJK ranges as the tokenizers library has them: its Extension E range starts at 0x2B920
 * (Google's tokenization.py: 0x2B820), so U+2B820..2B91F are not spaced out there, nor here. */
static int is_cjk(UChar32 c)
{
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
           (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}
/* Unicode's White_Space (Rust's char::is_whitespace, which Hugging Face uses). */
static int is_whitespace(UChar32 c) { return td_icu()->u_isUWhiteSpace(c); }
/* Hugging Face's is_control: the "other" categories Cc, Cf, Cs and Co, but tab and newlines (its
 * tables leave unassigned code points alone: they become [UNK]). */
/* The Unicode version of the tokenizers library's category tables (the unicode_categories and
 * unicode-normalization-alignments crates): characters assigned after Unicode 8 are letters to it —
 * not punctuation, controls or marks — so their words become [UNK]. The same cut gives its ids
 * (found against it: Bhaiksuki punctuation of 9.0 and a Malayalam mark of 10.0 are not split or
 * stripped there). */
static int known(UChar32 c)
{
    UVersionInfo age;
    td_icu()->u_charAge(c, age);
    return age[0] <= 8;
}

static int is_control(UChar32 c)
{
    if (c == '\t' || c == '\n' || c == '\r' || !known(c)) return 0;
    int8_t t = td_icu()->u_charType(c);
    return t == U_CONTROL_CHAR || t == U_FORMAT_CHAR || t == U_SURROGATE || t == U_PRIVATE_USE_CHAR;
}
static int is_punct(UChar32 c)
{
    if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126)) return 1;
    if (!known(c)) return 0;
    int8_t t = td_icu()->u_charType(c);
    return t == U_CONNECTOR_PUNCTUATION || t == U_DASH_PUNCTUATION || t == U_START_PUNCTUATION ||
           t == U_END_PUNCTUATION || t == U_INITIAL_PUNCTUATION || t == U_FINAL_PUNCTUATION ||
           t == U_OTHER_PUNCTUATION;
}

/* A mark accent stripping drops: a non-spacing mark (Mn) the tables know (see known()). */
static int is_stripped_mark(UChar32 c) { return td_icu()->u_charType(c) == U_NON_SPACING_MARK && known(c); }

/* A growable UTF-32 buffer. */
typedef struct {
    UChar32 *c;
    size_t n, cap;
} u32buf;
static void push(u32buf *b, UChar32 c)
{
    if (b->n == b->cap) b->c = td_xrealloc(b->c, (b->cap = b->cap ? 2 * b->cap : 256) * sizeof(UChar32));
    b->c[b->n++] = c;
}

/* The normalizer: clean, space out CJK, strip accents (NFD, drop Mn), lowercase. */
static void normalize(const wp_tokenizer *t, const char *text, size_t len, u32buf *out)
{
    u32buf a = {0};
    for (int32_t i = 0; i < (int32_t)len;) {
        UChar32 c;
        U8_NEXT(text, i, (int32_t)len, c);
        if (c < 0) c = 0xFFFD; /* invalid UTF-8: the replacement character, as a lossy decode gives */
        if (t->clean) {
            if (c == 0 || c == 0xFFFD || is_control(c)) continue;
            if (is_whitespace(c)) c = ' ';
        }
        if (t->chinese && is_cjk(c)) {
            push(&a, ' '), push(&a, c), push(&a, ' ');
        } else {
            push(&a, c);
        }
    }
    if (!t->strip_accents && !t->lowercase) {
        *out = a;
        return;
    }
    UErrorCode st = U_ZERO_ERROR;
    const UNormalizer2 *nfd = td_icu()->unorm2_getNFDInstance(&st);
    for (size_t i = 0; i < a.n; i++) {
        UChar src[4], dec[64], low[64];
        int32_t ns = 0, nd, nl;
        U16_APPEND_UNSAFE(src, ns, a.c[i]);
        const UChar *cur = src;
        int32_t ncur = ns;
        if (t->strip_accents) {
            st = U_ZERO_ERROR;
            nd = td_icu()->unorm2_normalize(nfd, src, ns, dec, 64, &st);
            if (U_SUCCESS(st)) cur = dec, ncur = nd;
        }
        UChar kept[64];
        int32_t nk = 0;
        for (int32_t j = 0; j < ncur;) {
            UChar32 c;
            U16_NEXT(cur, j, ncur, c);
            if (t->strip_accents && is_stripped_mark(c)) continue;
            U16_APPEND_UNSAFE(kept, nk, c);
        }
        cur = kept, ncur = nk;
        if (t->lowercase) {
            st = U_ZERO_ERROR;
            nl = td_icu()->u_strToLower(low, 64, kept, nk, "", &st);
            if (U_SUCCESS(st)) cur = low, ncur = nl;
        }
        for (int32_t j = 0; j < ncur;) {
            UChar32 c;
            U16_NEXT(cur, j, ncur, c);
            push(out, c);
        }
    }
    free(a.c);
}

/* WordPiece of one word (chars [0, n)): greedy longest match; the whole word [UNK] if a piece fails. */
static void wordpiece(const wp_tokenizer *t, const UChar32 *w, size_t n, char *scratch, bpe_ids *out)
{
    if (n > WP_MAX_WORD) {
        bpe_ids_push(out, t->unk);
        return;
    }
    size_t mark = out->n, start = 0;
    while (start < n) {
        int found = -1;
        size_t end = n;
        for (; end > start; end--) {
            size_t len = 0;
            if (start > 0) memcpy(scratch, "##", 2), len = 2;
            for (size_t k = start; k < end; k++) {
                int32_t o = (int32_t)len;
                U8_APPEND_UNSAFE(scratch, o, w[k]);
                len = (size_t)o;
            }
            found = lookup(t, scratch, len);
            if (found >= 0) break;
        }
        if (found < 0) {
            out->n = mark;
            bpe_ids_push(out, t->unk);
            return;
        }
        bpe_ids_push(out, found);
        start = end;
    }
}

void wp_encode(const wp_tokenizer *t, const char *text, size_t len, bpe_ids *out)
{
    u32buf s = {0};
    normalize(t, text, len, &s);
    char *scratch = td_xmalloc(4 * WP_MAX_WORD + 8);
    /* words: split on whitespace, and every punctuation character a word of its own */
    for (size_t i = 0; i < s.n;) {
        if (is_whitespace(s.c[i])) {
            i++;
            continue;
        }
        if (is_punct(s.c[i])) {
            wordpiece(t, &s.c[i], 1, scratch, out);
            i++;
            continue;
        }
        size_t j = i;
        while (j < s.n && !is_whitespace(s.c[j]) && !is_punct(s.c[j])) j++;
        wordpiece(t, &s.c[i], j - i, scratch, out);
        i = j;
    }
    free(scratch);
    free(s.c);
}

int wp_decode(const wp_tokenizer *t, const int32_t *ids, size_t n, char **out, size_t *out_len, char *err,
              size_t errlen)
{
    size_t cap = 64, len = 0;
    char *s = td_xmalloc(cap);
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->n) {
            td_seterr(err, errlen, "token id %d at position %zu is outside the vocabulary of %d", ids[i], i, t->n);
            free(s);
            return -1;
        }
        const char *tok = t->tokens[ids[i]];
        int cont = strncmp(tok, "##", 2) == 0;
        if (cont) tok += 2;
        size_t tl = strlen(tok);
        while (len + tl + 2 > cap) s = td_xrealloc(s, cap *= 2);
        if (i > 0 && !cont) s[len++] = ' ';
        memcpy(s + len, tok, tl);
        len += tl;
    }
    s[len] = 0;
    *out = s;
    *out_len = len;
    return 0;
}

/* ---- what names a WordPiece tokenizer: Megatron's --tokenizer-type values, tokenizer.json ---- */

int wp_type_lowercase(const char *type)
{
    if (!type) return -1;
    if (strcmp(type, "BertWordPieceLowerCase") == 0) return 1;
    if (strcmp(type, "BertWordPieceCase") == 0) return 0;
    return -1;
}

wp_tokenizer *wp_from_tokenizer_json(const cJSON *j, const char *path, char *err, size_t errlen)
{
    err[0] = 0;
    const cJSON *model = j ? cJSON_GetObjectItemCaseSensitive(j, "model") : NULL;
    const cJSON *type = model ? cJSON_GetObjectItemCaseSensitive(model, "type") : NULL;
    wp_tokenizer *t = NULL;
    if (cJSON_IsString(type) && strcmp(type->valuestring, "WordPiece") == 0) {
        const cJSON *nz = cJSON_GetObjectItemCaseSensitive(j, "normalizer");
        wp_options o = {0};
        if (nz && !cJSON_IsNull(nz)) {
            const cJSON *nt = cJSON_GetObjectItemCaseSensitive(nz, "type");
            if (!cJSON_IsString(nt) || strcmp(nt->valuestring, "BertNormalizer") != 0) {
                td_seterr(err, errlen, "%s: a WordPiece model with a %s normalizer; trident reads BertNormalizer (or "
                          "none)", path, cJSON_IsString(nt) ? nt->valuestring : "malformed");
                return NULL;
            }
            const cJSON *lc = cJSON_GetObjectItemCaseSensitive(nz, "lowercase");
            const cJSON *sa = cJSON_GetObjectItemCaseSensitive(nz, "strip_accents");
            o.lowercase = !lc || cJSON_IsTrue(lc);
            o.strip_accents = sa && !cJSON_IsNull(sa) ? cJSON_IsTrue(sa) : o.lowercase;
            const cJSON *ch = cJSON_GetObjectItemCaseSensitive(nz, "handle_chinese_chars");
            const cJSON *cl = cJSON_GetObjectItemCaseSensitive(nz, "clean_text");
            o.chinese = !ch || cJSON_IsTrue(ch);
            o.clean = !cl || cJSON_IsTrue(cl);
        }
        const cJSON *unk = cJSON_GetObjectItemCaseSensitive(model, "unk_token");
        o.unk = cJSON_IsString(unk) ? unk->valuestring : NULL;
        t = wp_from_json(model, &o, err, errlen, path);
    }
    return t;
}
