/* The tokenizer seam: see include/trident/tokenizer.h. Each kind fills one ops table. */
#include "trident/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/check.h"
#include "trident/hf_tokenizer.h"
#include "trident/wordpiece.h"

#include <cjson/cJSON.h>
#include <errno.h>

typedef struct {
    const char *kind;
    void (*free)(void *t);
    int (*vocab_size)(const void *t);
    int (*eod)(const void *t);
    void *(*worker_new)(const void *t);
    void (*worker_free)(void *w);
    void (*encode)(void *w, const char *text, size_t len, bpe_ids *out);
    int (*decode)(const void *t, const int32_t *ids, size_t n, char **out, size_t *out_len, char *err,
                  size_t errlen);
} tok_ops;

struct tok_tokenizer {
    const tok_ops *ops;
    void *impl;
};

struct tok_worker {
    const tok_tokenizer *t;
    void *impl;
};

/* GPT-2 BPE */
static void gpt2_free(void *t) { bpe_free(t); }
static int gpt2_vocab_size(const void *t) { return bpe_vocab_size(t); }
static int gpt2_eod(const void *t) { return bpe_eod_id(t); }
static void *gpt2_worker_new(const void *t) { return bpe_worker_new(t); }
static void gpt2_worker_free(void *w) { bpe_worker_free(w); }
static void gpt2_encode(void *w, const char *s, size_t n, bpe_ids *out) { bpe_encode(w, s, n, out); }
static int gpt2_decode(const void *t, const int32_t *ids, size_t n, char **out, size_t *len, char *err, size_t el)
{
    return bpe_decode(t, ids, n, out, len, err, el);
}
static const tok_ops GPT2_OPS = {"GPT-2 BPE", gpt2_free, gpt2_vocab_size, gpt2_eod, gpt2_worker_new,
                                 gpt2_worker_free, gpt2_encode, gpt2_decode};

/* Hugging Face tokenizer.json */
static void hf_free_(void *t) { hf_free(t); }
static int hf_vocab_size_(const void *t) { return hf_vocab_size(t); }
static int hf_eod_(const void *t) { return hf_eod_id(t); }
static void *hf_worker_new_(const void *t) { return hf_worker_new(t); }
static void hf_worker_free_(void *w) { hf_worker_free(w); }
static void hf_encode_(void *w, const char *s, size_t n, bpe_ids *out) { hf_encode(w, s, n, out); }
static int hf_decode_(const void *t, const int32_t *ids, size_t n, char **out, size_t *len, char *err, size_t el)
{
    return hf_decode(t, ids, n, out, len, err, el);
}
static const tok_ops HF_OPS = {"tokenizer.json BPE", hf_free_, hf_vocab_size_, hf_eod_, hf_worker_new_,
                               hf_worker_free_, hf_encode_, hf_decode_};

/* BERT WordPiece (vocab.txt, or a tokenizer.json whose model is WordPiece) */
static void wp_free_(void *t) { wp_free(t); }
static int wp_vocab_size_(const void *t) { return wp_vocab_size(t); }
static int wp_eod_(const void *t) { return wp_sep_id(t); }
static void *wp_worker_new_(const void *t) { return (void *)t; } /* stateless */
static void wp_worker_free_(void *w) { (void)w; }
static void wp_encode_(void *w, const char *s, size_t n, bpe_ids *out) { wp_encode(w, s, n, out); }
static int wp_decode_(const void *t, const int32_t *ids, size_t n, char **out, size_t *len, char *err, size_t el)
{
    return wp_decode(t, ids, n, out, len, err, el);
}
static const tok_ops WP_OPS = {"WordPiece", wp_free_, wp_vocab_size_, wp_eod_, wp_worker_new_, wp_worker_free_,
                               wp_encode_, wp_decode_};

static int is_hf(const tok_spec *s) { return s->type && strcmp(s->type, "HuggingFaceTokenizer") == 0; }
static int is_bert(const tok_spec *s)
{
    return s->type && (strcmp(s->type, "BertWordPieceLowerCase") == 0 || strcmp(s->type, "BertWordPieceCase") == 0);
}

/* A tokenizer.json whose model is WordPiece, with its BertNormalizer's settings; NULL (err empty)
 * when the model is another kind. */
static wp_tokenizer *hf_wordpiece(const char *path, char *err, size_t errlen)
{
    err[0] = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL; /* hf_load says why */
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = td_xmalloc((size_t)(n > 0 ? n : 0) + 1);
    size_t got = fread(buf, 1, (size_t)(n > 0 ? n : 0), f);
    buf[got] = 0;
    fclose(f);
    cJSON *j = cJSON_Parse(buf);
    free(buf);
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
                cJSON_Delete(j);
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
    cJSON_Delete(j);
    return t;
}

int tok_check_spec(const tok_spec *s, char *msg, size_t msglen)
{
    if (is_hf(s)) {
        if (!s->model) {
            td_seterr(msg, msglen, "--tokenizer-model is required with --tokenizer-type HuggingFaceTokenizer (a "
                      "Hugging Face tokenizer.json)");
            return -1;
        }
        if (s->vocab || s->merges) {
            td_seterr(msg, msglen, "%s applies to --tokenizer-type GPT2BPETokenizer; HuggingFaceTokenizer reads "
                      "only --tokenizer-model", s->vocab ? "--vocab-file" : "--merge-file");
            return -1;
        }
        return 0;
    }
    if (s->model) {
        td_seterr(msg, msglen, "--tokenizer-model needs --tokenizer-type HuggingFaceTokenizer (GPT2BPETokenizer "
                  "reads --vocab-file and --merge-file)");
        return -1;
    }
    if (is_bert(s)) {
        if (!s->vocab) {
            td_seterr(msg, msglen, "--vocab-file is required with --tokenizer-type %s (BERT's vocab.txt)", s->type);
            return -1;
        }
        if (s->merges) {
            td_seterr(msg, msglen, "--merge-file applies to GPT2BPETokenizer; %s reads only --vocab-file", s->type);
            return -1;
        }
        return 0;
    }
    if (!s->vocab) {
        td_seterr(msg, msglen, "--vocab-file is required (GPT-2's vocab.json, also called encoder.json; or "
                  "--tokenizer-type HuggingFaceTokenizer --tokenizer-model tokenizer.json)");
        return -1;
    }
    if (!s->merges) {
        td_seterr(msg, msglen, "--merge-file is required (GPT-2's merges.txt, also called vocab.bpe)");
        return -1;
    }
    return 0;
}

int tok_spec_files(const tok_spec *s, const char *flags[2], const char *paths[2])
{
    if (is_hf(s)) {
        flags[0] = "--tokenizer-model", paths[0] = s->model;
        return 1;
    }
    flags[0] = "--vocab-file", paths[0] = s->vocab;
    if (is_bert(s)) return 1;
    flags[1] = "--merge-file", paths[1] = s->merges;
    return 2;
}

tok_tokenizer *tok_open(const tok_spec *s, char *err, size_t errlen)
{
    if (tok_check_spec(s, err, errlen) != 0) return NULL;
    void *impl;
    const tok_ops *ops;
    if (is_hf(s)) {
        impl = hf_wordpiece(s->model, err, errlen);
        if (impl) ops = &WP_OPS;
        else if (err[0]) return NULL;
        else impl = hf_load(s->model, err, errlen), ops = &HF_OPS;
    } else if (is_bert(s)) {
        int lower = strcmp(s->type, "BertWordPieceLowerCase") == 0;
        wp_options o = {lower, lower, 1, 1, NULL};
        impl = wp_load_vocab(s->vocab, &o, err, errlen);
        ops = &WP_OPS;
    } else {
        impl = bpe_load(s->vocab, s->merges, err, errlen);
        ops = &GPT2_OPS;
    }
    if (!impl) return NULL;
    tok_tokenizer *t = td_xcalloc(1, sizeof *t);
    t->ops = ops;
    t->impl = impl;
    return t;
}

void tok_free(tok_tokenizer *t)
{
    if (!t) return;
    t->ops->free(t->impl);
    free(t);
}

int tok_vocab_size(const tok_tokenizer *t) { return t->ops->vocab_size(t->impl); }
int tok_eod_id(const tok_tokenizer *t) { return t->ops->eod(t->impl); }
const char *tok_kind(const tok_tokenizer *t) { return t->ops->kind; }

int tok_bert_vocab_get(const tok_tokenizer *t, tok_bert_vocab *out, char *msg, size_t msglen)
{
    if (t->ops != &WP_OPS) {
        snprintf(msg, msglen, "BERT needs a WordPiece tokenizer (--tokenizer-type BertWordPieceLowerCase or "
                              "BertWordPieceCase with --vocab-file vocab.txt), not %s", t->ops->kind);
        return -1;
    }
    const wp_tokenizer *wp = t->impl;
    static const char *const names[4] = {"[CLS]", "[SEP]", "[MASK]", "[PAD]"};
    int32_t *ids[4] = {&out->cls, &out->sep, &out->mask, &out->pad};
    for (int i = 0; i < 4; i++)
        if ((*ids[i] = wp_token_id(wp, names[i])) < 0) {
            snprintf(msg, msglen, "the WordPiece vocabulary has no %s token, which BERT needs; use a BERT vocab.txt",
                     names[i]);
            return -1;
        }
    int n = wp_vocab_size(wp);
    out->subword = td_xcalloc((size_t)n, 1);
    for (int i = 0; i < n; i++) {
        const char *s = wp_token(wp, i);
        out->subword[i] = s && strncmp(s, "##", 2) == 0 && s[2];
    }
    return 0;
}

tok_worker *tok_worker_new(const tok_tokenizer *t)
{
    tok_worker *w = td_xcalloc(1, sizeof *w);
    w->t = t;
    w->impl = t->ops->worker_new(t->impl);
    return w;
}

void tok_worker_free(tok_worker *w)
{
    if (!w) return;
    w->t->ops->worker_free(w->impl);
    free(w);
}

void tok_encode(tok_worker *w, const char *text, size_t len, bpe_ids *out)
{
    w->t->ops->encode(w->impl, text, len, out);
}

int tok_decode(const tok_tokenizer *t, const int32_t *ids, size_t n, char **out, size_t *out_len, char *err,
               size_t errlen)
{
    return t->ops->decode(t->impl, ids, n, out, out_len, err, errlen);
}
