/* BERT's WordPiece tokenizer (src/data/wordpiece.c): the basic tokenizer — Hugging Face's
 * BertNormalizer (drop control characters, whitespace to spaces, spaces around CJK ideographs,
 * accents stripped by NFD and dropping non-spacing marks, lower case) and BertPreTokenizer (split
 * on whitespace, each punctuation character a word) — then greedy longest-match WordPiece with
 * "##" continuations, a word it cannot cover (or over 100 characters) being [UNK]. Megatron's
 * BertWordPieceLowerCase and BertWordPieceCase over a vocab.txt, and tokenizer.json files whose
 * model is WordPiece. */
#ifndef TRIDENT_WORDPIECE_H
#define TRIDENT_WORDPIECE_H

#include <stddef.h>
#include <stdint.h>

#include "trident/bpe.h"

struct cJSON;
typedef struct wp_tokenizer wp_tokenizer;

typedef struct {
    int lowercase, strip_accents, chinese, clean;
    const char *unk; /* NULL: "[UNK]" */
} wp_options;

/* vocab.txt: one token a line, ids by line. NULL with err naming the file. */
wp_tokenizer *wp_load_vocab(const char *path, const wp_options *o, char *err, size_t errlen);
/* A tokenizer.json's WordPiece "model" object (its "vocab": {token: id}). */
wp_tokenizer *wp_from_json(const struct cJSON *model, const wp_options *o, char *err, size_t errlen, const char *src);
/* A Hugging Face tokenizer.json (parsed: root) whose model is WordPiece, with its BertNormalizer's
 * settings (or none); NULL with err empty when the file's model is another kind, NULL with err set
 * when it is WordPiece but cannot be read. path names the file in messages. hf_load_any reads the
 * file and gives its root to this or to the BPE reader. */
wp_tokenizer *wp_from_tokenizer_json(const struct cJSON *root, const char *path, char *err, size_t errlen);
/* Megatron's --tokenizer-type names of a WordPiece vocab.txt: 1 for BertWordPieceLowerCase
 * (lower case, accents stripped), 0 for BertWordPieceCase, -1 for any other (or NULL). */
int wp_type_lowercase(const char *type);
void wp_free(wp_tokenizer *t);
int wp_vocab_size(const wp_tokenizer *t);
int wp_sep_id(const wp_tokenizer *t);   /* [SEP], or -1 */
int wp_token_id(const wp_tokenizer *t, const char *token); /* -1 if absent */
const char *wp_token(const wp_tokenizer *t, int id);        /* NULL outside [0, vocab) */
/* Appends the ids of text[0..len) (UTF-8) to out. Thread-safe (no state). */
void wp_encode(const wp_tokenizer *t, const char *text, size_t len, bpe_ids *out);
/* Tokens joined by spaces, "##" pieces glued to the one before (Hugging Face's WordPiece decoder
 * without its cleanup of spaces before punctuation). */
int wp_decode(const wp_tokenizer *t, const int32_t *ids, size_t n, char **out, size_t *out_len, char *err,
              size_t errlen);

#endif
