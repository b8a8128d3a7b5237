/* Hugging Face tokenizer.json (BPE models): see include/data/trident/hf_tokenizer.h and
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
 * with \s, \p{L} and \p{N} rewritten to Oniguruma's classes (regex_rewrite).
 *
 * This file reads the file into struct hf_tokenizer (src/data/hf_impl.h); src/data/hf_encode.c
 * runs the pipeline; src/data/hf_text.c holds what both use (UTF-8 and the byte alphabet, the
 * string pool and map, the regexes on PCRE2, the normalizers). */
#include "hf_impl.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/check.h"
#include "trident/wordpiece.h"
#include "icu.h"

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

/* ---- the loaded tokenizer -------------------------------------------------------------- */

int hf_vocab_size(const hf_tokenizer *t) { return t->n_vocab; }
int hf_eod_id(const hf_tokenizer *t) { return t->eod; }
int hf_bos_id(const hf_tokenizer *t) { return t->bos; }

const char *hf_token(const hf_tokenizer *t, int id, size_t *n)
{
    if (id < 0 || id >= t->n_vocab || t->tok_len[id] == UINT32_MAX) return NULL;
    *n = t->tok_len[id];
    return t->pool.p + t->tok_off[id];
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
    bpe_merges_free(&t->merges);
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
        p->re = hf_regex_compile(s, n, 1, &L->t->jit, L->err, L->errlen, L->name, where);
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
        *s = (norm_step){NORM_PREPEND, dup_bytes(v, n), NULL, n, 0, NULL};
    } else if (strcmp(ty, "Replace") == 0) {
        pattern p = {0};
        if (read_pattern(L, o, "normalizer Replace", &p, 0) != 0) return -1;
        if (!(v = str_field(o, "content", &n)) || p.nlit == 0) {
            free(p.lit);
            BAD("tokenizer file '%s': normalizer Replace needs a non-empty pattern and a \"content\"", L->name);
        }
        *s = (norm_step){NORM_REPLACE, p.lit, dup_bytes(v, n), p.nlit, n, NULL};
    } else if (strcmp(ty, "NFC") == 0 || strcmp(ty, "NFD") == 0 || strcmp(ty, "NFKC") == 0 || strcmp(ty, "NFKD") == 0) {
        UErrorCode st = U_ZERO_ERROR;
        const UNormalizer2 *nz = strcmp(ty, "NFC") == 0 ? td_icu()->unorm2_getNFCInstance(&st)
                                 : strcmp(ty, "NFD") == 0 ? td_icu()->unorm2_getNFDInstance(&st)
                                 : strcmp(ty, "NFKC") == 0 ? td_icu()->unorm2_getNFKCInstance(&st)
                                                           : td_icu()->unorm2_getNFKDInstance(&st);
        if (!U_SUCCESS(st) || !nz)
            BAD("tokenizer file '%s': normalizer %s: ICU has no such normalizer here (%s)", L->name, ty,
                td_icu()->u_errorName(st));
        *s = (norm_step){NORM_UNICODE, NULL, NULL, 0, 0, nz};
    } else {
        BAD("tokenizer file '%s': normalizer %.40s is not supported (trident supports NFC, NFD, NFKC, NFKD, "
            "Prepend, Replace with a String pattern, and Sequence of them)", L->name, ty);
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
    if (n == 0 || n >= 8 || hf_utf8_len((const unsigned char *)v, n, &cp) != n)
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
            s->pat.re = hf_regex_compile(GPT2_REGEX, sizeof GPT2_REGEX - 1, 1, &t->jit, L->err, L->errlen, L->name,
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
        if (!(v = str_field(o, "content", &n)) || n == 0 || hf_utf8_len((const unsigned char *)v, n, &cp) != n ||
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
    hf_smap_init(&t->vocab, count);
    cJSON_ArrayForEach(it, vocab) {
        int32_t id = (int32_t)it->valuedouble;
        size_t n = strlen(it->string);
        uint32_t off = hf_pool_add(&t->pool, it->string, n);
        t->tok_off[id] = off, t->tok_len[id] = (uint32_t)n;
        hf_smap_put(&t->vocab, &t->pool, off, n, id);
    }
    return 0;
}

static int32_t vocab_id(const hf_tokenizer *t, const char *s, size_t n) { return hf_smap_find(&t->vocab, &t->pool, s, n); }

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

/* The merges in batches: every string's hash first and the cache asked for each slot and key the
 * batch will read, then the lookups and the puts in order. One at a time, each of a merge's three
 * vocabulary lookups and its put waited for its own cache misses: Llama 3's 280,000 merges spent
 * most of the file's load there. */
enum { MERGE_BATCH = 32 };
typedef struct {
    const char *a, *b;
    size_t na, nb, joff; /* the joined string at joff in the batch's buffer */
    uint64_t h[3];       /* hashes of a, b, a + b */
    int32_t id[3];
} pending_merge;

static int read_merges(loader *L, const cJSON *merges)
{
    hf_tokenizer *t = L->t;
    size_t n = (size_t)cJSON_GetArraySize(merges);
    bpe_merges_init(&t->merges, n);
    pending_merge q[MERGE_BATCH];
    char *jbuf = NULL;
    size_t jcap = 0;
    int32_t rank = 0;
    int rc = 0;
    const cJSON *m = merges->child;
    while (m && rc == 0) {
        int nq = 0, bad_parts = 0;
        size_t jn = 0;
        for (; m && nq < MERGE_BATCH; m = m->next) {
            pending_merge *e = &q[nq];
            int skip;
            if (merge_parts(m, &e->a, &e->na, &e->b, &e->nb, &skip) != 0) {
                bad_parts = 1;
                break;
            }
            if (skip) continue;
            if (!jbuf || jn + e->na + e->nb > jcap) jbuf = td_xrealloc(jbuf, jcap = 2 * (jn + e->na + e->nb) + 256);
            memcpy(jbuf + jn, e->a, e->na);
            memcpy(jbuf + jn + e->na, e->b, e->nb);
            e->joff = jn;
            jn += e->na + e->nb;
            nq++;
        }
        for (int i = 0; i < nq; i++) {
            pending_merge *e = &q[i];
            e->h[0] = hf_smap_hash(e->a, e->na);
            e->h[1] = hf_smap_hash(e->b, e->nb);
            e->h[2] = hf_smap_hash(jbuf + e->joff, e->na + e->nb);
            for (int k = 0; k < 3; k++) hf_smap_prefetch_slot(&t->vocab, e->h[k]);
        }
        for (int i = 0; i < nq; i++)
            for (int k = 0; k < 3; k++) hf_smap_prefetch_key(&t->vocab, &t->pool, q[i].h[k]);
        for (int i = 0; i < nq && rc == 0; i++) {
            pending_merge *e = &q[i];
            const char *s[3] = {e->a, e->b, jbuf + e->joff};
            size_t sn[3] = {e->na, e->nb, e->na + e->nb};
            for (int k = 0; k < 3 && rc == 0; k++) {
                e->id[k] = hf_smap_find_hashed(&t->vocab, &t->pool, s[k], sn[k], e->h[k]);
                if (e->id[k] < 0) {
                    int wn = (int)sn[k];
                    td_seterr(L->err, L->errlen, "tokenizer file '%s': model.merges[%d]: token \"%.*s\" is not in model.vocab",
                              L->name, rank + i, wn > 60 ? 60 : wn, s[k]);
                    rc = -1;
                }
            }
            if (rc == 0) bpe_merges_prefetch(&t->merges, e->id[0], e->id[1]);
        }
        if (rc != 0) break;
        for (int i = 0; i < nq; i++) /* a later merge wins, as in the library */
            bpe_merges_put(&t->merges, q[i].id[0], q[i].id[1], rank++, q[i].id[2]);
        if (bad_parts) {
            td_seterr(L->err, L->errlen, "tokenizer file '%s': model.merges[%d] is neither \"a b\" nor [\"a\", \"b\"]",
                      L->name, rank);
            rc = -1;
        }
    }
    t->n_merges = rank;
    free(jbuf);
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
        hf_byte_alphabet(cp_to_byte);
        hf_smap_init(&t->keys, t->vocab.used);
        char *buf = NULL;
        size_t cap = 0;
        for (size_t i = 0; i <= t->vocab.mask; i++) {
            const smap_slot *x = &t->vocab.slot[i];
            if (!x->hash) continue;
            if (x->len > cap) buf = td_xrealloc(buf, cap = 2 * x->len);
            long n = hf_alphabet_to_bytes(t->pool.p + x->off, x->len, cp_to_byte, buf);
            if (n < 0) continue;
            uint32_t off = hf_pool_add(&t->pool, buf, (size_t)n);
            hf_smap_put(&t->keys, &t->pool, off, (size_t)n, x->id);
        }
        free(buf);
    }
    for (int b = 0; b < 256; b++) {
        char c = (char)b, fb[8];
        t->byte_id[b] = hf_smap_find(&t->keys, &t->pool, &c, 1);
        snprintf(fb, sizeof fb, "<0x%02X>", b);
        t->fallback_id[b] = vocab_id(t, fb, 6);
    }
}

/* Which characters precede U+2581 inside vocab tokens (see marker_split in hf_impl.h). */
static void find_marker_split(hf_tokenizer *t)
{
    static const char M[] = "\xe2\x96\x81";
    t->marker_split = !t->byte_level && hf_smap_find(&t->keys, &t->pool, M, 3) >= 0;
    for (size_t i = 0; i <= t->vocab.mask && t->marker_split; i++) {
        const smap_slot *x = &t->vocab.slot[i];
        const char *s = t->pool.p + x->off;
        for (size_t j = 1; x->hash && j + 3 <= x->len && t->marker_split; j++) {
            if (memcmp(s + j, M, 3) != 0) continue;
            size_t k = j - 1; /* start of the character before */
            while (k > 0 && j - k < 4 && ((unsigned char)s[k] & 0xc0) == 0x80) k--;
            int known = 0;
            for (int m = 0; m < t->n_marker_prev && !known; m++)
                known = strlen(t->marker_prev[m]) == j - k && memcmp(t->marker_prev[m], s + k, j - k) == 0;
            if (known) continue;
            if (t->n_marker_prev == 16 || j - k > 4) t->marker_split = 0; /* too many: not worth it */
            else memcpy(t->marker_prev[t->n_marker_prev++], s + k, j - k);
        }
    }
}

static int read_model(loader *L, const cJSON *model)
{
    hf_tokenizer *t = L->t;
    if (!cJSON_IsObject(model)) BAD("tokenizer file '%s' has no \"model\" object", L->name);
    const char *ty = type_of(model);
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    if (ty && strcmp(ty, "WordPiece") == 0) /* hf_load_any gives it to wp_from_tokenizer_json */
        BAD("tokenizer file '%s': model WordPiece is read by the WordPiece tokenizer (hf_load_any), not the BPE reader",
            L->name);
    if (ty && strcmp(ty, "BPE") != 0)
        BAD("tokenizer file '%s': model %.40s is not supported (trident reads tokenizer.json models of type BPE and "
            "WordPiece)", L->name, ty);
    if (!ty && !merges) BAD("tokenizer file '%s': the model has no \"type\" and no merges; trident reads tokenizer.json "
                            "models of type BPE and WordPiece", L->name);
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
    find_marker_split(t);
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
        uint32_t off = hf_pool_add(&t->pool, a->s, a->n);
        t->tok_off[a->id] = off, t->tok_len[a->id] = (uint32_t)a->n;
        need_word_re |= a->single_word;
        if (a->normalized && t->n_norm) {
            size_t nn;
            const char *s = hf_normalize(t, a->s, a->n, bufs, &nn);
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

/* Every model.vocab entry of a trained BPE model is one character of its alphabet, a special
 * or added token (the unknown token, byte fallbacks "<0x0A>", "<s>"), or the result of a merge:
 * that is all training adds. Merges cut short, or from another tokenizer, leave entries no merge
 * makes; the first (lowest id) is named. */
static int check_coverage(loader *L, int32_t n_merges)
{
    hf_tokenizer *t = L->t;
    char *made = td_xcalloc((size_t)t->n_vocab + 1, 1);
    int32_t n_made = 0, first = -1;
    for (size_t i = 0; i <= t->merges.mask; i++) {
        const bpe_merge *s = &t->merges.slots[i];
        if (s->key && !made[s->id]) made[s->id] = 1, n_made++;
    }
    for (int k = 0; k < 2; k++) {
        const added_set *set = k ? &t->normed : &t->raw;
        for (int i = 0; i < set->n; i++) made[set->tok[i].id] = 1;
    }
    for (size_t i = 0; i <= t->vocab.mask; i++) {
        const smap_slot *x = &t->vocab.slot[i];
        const char *str = t->pool.p + x->off;
        if (!x->hash || !x->len || made[x->id] || x->id == t->unk_id || hf_char_len(str, x->len) == x->len ||
            bpe_special_form(str, x->len))
            continue;
        if (first < 0 || x->id < first) first = x->id;
    }
    free(made);
    if (first < 0) return 0;
    BAD("tokenizer file '%s': model.vocab and model.merges disagree: token \"%.*s\" (id %d) is not one character, "
        "not a special or added token and made by none of the %d merges (they make %d of the vocab's %d tokens); "
        "are the merges truncated? Use a tokenizer.json whose vocab and merges come from one tokenizer",
        L->name, (int)(t->tok_len[first] > 40 ? 40 : t->tok_len[first]), t->pool.p + t->tok_off[first], first,
        n_merges, n_made, t->n_model);
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
    if (rc == 0) rc = check_coverage(L, t->n_merges);
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

static int hex4(const char *s, const char *end)
{
    int v = 0;
    for (int i = 0; i < 4; i++) {
        if (s + i >= end) return -1;
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* Why cJSON stopped at byte off of json (its text before off is valid JSON): an array or object
 * there deeper than its nesting limit, or a UTF-16 surrogate escape there that is not half of a
 * pair (which has no character); why gets "" for any other error. */
static void json_error_why(const char *json, size_t len, size_t off, char *why, size_t n)
{
    why[0] = '\0';
    if (off >= len) return;
    int depth = 0, in_str = 0;
    for (size_t i = 0; i < off; i++) {
        char c = json[i];
        if (in_str) {
            if (c == '\\') i++;
            else if (c == '"') in_str = 0;
        } else if (c == '"') in_str = 1;
        else if (c == '[' || c == '{') depth++;
        else if (c == ']' || c == '}') depth--;
    }
    if ((json[off] == '[' || json[off] == '{') && depth >= CJSON_NESTING_LIMIT) {
        snprintf(why, n, ": nesting deeper than %d levels (the JSON reader's limit) at byte %zu", CJSON_NESTING_LIMIT, off);
        return;
    }
    /* a bad \u escape: cJSON stops at it */
    const char *p = json + off, *end = json + len;
    if (p + 1 >= end || p[0] != '\\' || p[1] != 'u') return;
    int u = hex4(p + 2, end);
    if (u < 0xd800 || u > 0xdfff) return;
    int low = u <= 0xdbff && p + 7 < end && p[6] == '\\' && p[7] == 'u' ? hex4(p + 8, end) : -1;
    if (low >= 0xdc00 && low <= 0xdfff) return;
    snprintf(why, n, ": a lone UTF-16 surrogate \\u%04x at byte %zu, which is no character (%s)", u, off,
             u <= 0xdbff ? "a high surrogate \\uD800-\\uDBFF must be followed by a low one \\uDC00-\\uDFFF"
                         : "a low surrogate \\uDC00-\\uDFFF must follow a high one");
}

/* json[0..len) read as a tokenizer.json: a WordPiece model into *wp (NULL on entry) when wp is
 * given, any other through the BPE reader. */
static hf_tokenizer *load_text(const char *json, size_t len, const char *name, struct wp_tokenizer **wp, char *err,
                               size_t errlen)
{
    hf_tokenizer *t = td_xcalloc(1, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->jit = 1;
    td_seterr(err, errlen, "no error");
    loader L = {t, t->name, err, errlen};
    const char *at = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json, len, &at, 0);
    int rc = -1;
    if (root && wp) {
        *wp = wp_from_tokenizer_json(root, name, err, errlen);
        if (*wp || err[0]) { /* WordPiece: read, or refused with err */
            cJSON_Delete(root);
            hf_free(t);
            return NULL;
        }
        td_seterr(err, errlen, "no error");
    }
    if (!root) {
        size_t off = at && at >= json && at <= json + len ? (size_t)(at - json) : 0;
        char why[320];
        json_error_why(json, len, off, why, sizeof why);
        if (why[0])
            td_seterr(err, errlen, "tokenizer file '%s' is not valid JSON%s; expected a Hugging Face tokenizer.json", name,
                      why);
        else
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

hf_tokenizer *hf_load_json(const char *json, size_t len, const char *name, char *err, size_t errlen)
{
    return load_text(json, len, name, NULL, err, errlen);
}

hf_tokenizer *hf_load_any(const char *path, struct wp_tokenizer **wp, char *err, size_t errlen)
{
    if (wp) *wp = NULL;
    size_t len;
    char *text = read_file(path, &len);
    if (!text) {
        td_seterr(err, errlen, "cannot read tokenizer file '%s': %s (expected a Hugging Face tokenizer.json)", path,
                  td_strerror(errno));
        return NULL;
    }
    hf_tokenizer *t = load_text(text, len, path, wp, err, errlen);
    free(text);
    return t;
}

hf_tokenizer *hf_load(const char *path, char *err, size_t errlen) { return hf_load_any(path, NULL, err, errlen); }
