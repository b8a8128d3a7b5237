/* The tokenizer seam: one handle over GPT-2's BPE (vocab.json + merges.txt, src/data/bpe.c),
 * Hugging Face tokenizer.json (src/data/hf_tokenizer.c) and WordPiece (vocab.txt or
 * tokenizer.json, src/data/wordpiece.c), chosen by --tokenizer-type, so the commands that
 * encode, decode or size a vocabulary never branch on the kind. */
#ifndef TRIDENT_TOKENIZER_H
#define TRIDENT_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "trident/bpe.h" /* bpe_ids, the id vector every tokenizer appends to */

struct wp_tokenizer;

typedef struct tok_tokenizer tok_tokenizer; /* immutable after open; share across threads */
typedef struct tok_worker tok_worker;       /* per-thread scratch */

/* What --tokenizer-type and its file flags name. */
typedef struct {
    const char *type;   /* "GPT2BPETokenizer", "HuggingFaceTokenizer" or a WordPiece type (wordpiece.h) */
    const char *vocab;  /* --vocab-file (GPT-2) */
    const char *merges; /* --merge-file (GPT-2) */
    const char *model;  /* --tokenizer-model (Hugging Face tokenizer.json) */
} tok_spec;

/* Checks that the flags the type needs are given (and no file flag of the other type). Returns
 * -1 with one line naming the flag in msg, else 0. Reads no file. */
int tok_check_spec(const tok_spec *s, char *msg, size_t msglen);
/* Flags of the files to read, for existence checks: fills up to 2 (flag, path) pairs. */
int tok_spec_files(const tok_spec *s, const char *flags[2], const char *paths[2]);

/* Loads the tokenizer; NULL with one line in err (naming the file and what is wrong). */
tok_tokenizer *tok_open(const tok_spec *s, char *err, size_t errlen);
void tok_free(tok_tokenizer *t);

int tok_vocab_size(const tok_tokenizer *t);
int tok_eod_id(const tok_tokenizer *t); /* the id --append-eod adds; -1 if the tokenizer has none */
int tok_bos_id(const tok_tokenizer *t); /* a tokenizer.json's beginning-of-text token; -1: none (GPT-2) */
const char *tok_kind(const tok_tokenizer *t); /* "GPT-2 BPE" or "tokenizer.json BPE", for messages */

/* The WordPiece model under t (for its special tokens and "##" pieces), or NULL when t is
 * another kind. */
const struct wp_tokenizer *tok_wordpiece(const tok_tokenizer *t);

tok_worker *tok_worker_new(const tok_tokenizer *t);
void tok_worker_free(tok_worker *w);
/* Appends the ids of text[0..len) to out. */
void tok_encode(tok_worker *w, const char *text, size_t len, bpe_ids *out);
/* As tok_encode, with the tokenizer's end-of-document text inside text read as that token (GPT-2's
 * "<|endoftext|>", as Hugging Face's tokenizers read a special token in a text). */
void tok_encode_special(const tok_tokenizer *t, tok_worker *w, const char *text, size_t len, bpe_ids *out);
/* Text of ids[0..n) into out (grown with td_xrealloc); -1 with err naming a bad id. */
int tok_decode(const tok_tokenizer *t, const int32_t *ids, size_t n, char **out, size_t *out_len, char *err,
               size_t errlen);

#endif
