/* The tokenizer seam: see include/data/trident/tokenizer.h. Each kind fills one ops table. */
#include "trident/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/check.h"
#include "trident/hf_tokenizer.h"
#include "trident/wordpiece.h"

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

/* WordPiece (vocab.txt, or a tokenizer.json whose model is WordPiece) */
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
static int is_wordpiece(const tok_spec *s) { return wp_type_lowercase(s->type) >= 0; }

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
    if (is_wordpiece(s)) {
        if (!s->vocab) {
            td_seterr(msg, msglen, "--vocab-file is required with --tokenizer-type %s (a WordPiece vocab.txt)", s->type);
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
    if (is_wordpiece(s)) return 1;
    flags[1] = "--merge-file", paths[1] = s->merges;
    return 2;
}

tok_tokenizer *tok_open(const tok_spec *s, char *err, size_t errlen)
{
    if (tok_check_spec(s, err, errlen) != 0) return NULL;
    void *impl;
    const tok_ops *ops;
    if (is_hf(s)) {
        wp_tokenizer *wp;
        impl = hf_load_any(s->model, &wp, err, errlen), ops = &HF_OPS;
        if (wp) impl = wp, ops = &WP_OPS;
    } else if (is_wordpiece(s)) {
        int lower = wp_type_lowercase(s->type);
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
int tok_bos_id(const tok_tokenizer *t) { return t->ops == &HF_OPS ? hf_bos_id(t->impl) : -1; }
const char *tok_kind(const tok_tokenizer *t) { return t->ops->kind; }

const wp_tokenizer *tok_wordpiece(const tok_tokenizer *t) { return t->ops == &WP_OPS ? t->impl : NULL; }

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

/* The ids of text appended to out, the tokenizer's end-of-document text read as that token
 * (GPT-2's "<|endoftext|>"; a tokenizer.json reads its added tokens itself). */
void tok_encode_special(const tok_tokenizer *t, tok_worker *w, const char *text, size_t len, bpe_ids *out)
{
    int32_t eod = tok_eod_id(t);
    char *et = NULL;
    size_t el = 0;
    char err[64];
    if (eod >= 0 && tok_decode(t, &eod, 1, &et, &el, err, sizeof err) != 0) el = 0;
    const char *p = text, *end = text + len;
    while (el && p < end) {
        const char *hit = memmem(p, (size_t)(end - p), et, el);
        if (!hit) break;
        if (hit > p) tok_encode(w, p, (size_t)(hit - p), out);
        bpe_ids_push(out, eod);
        p = hit + el;
    }
    if (p < end) tok_encode(w, p, (size_t)(end - p), out);
    free(et);
}
