/* GPT-2 byte-level BPE tokenizer. Owns vocab.json + merges.txt loading, GPT-2's
 * pre-tokenization regex (PCRE2, Unicode properties), the byte<->unicode table, merges by
 * rank, and decoding. Produces exactly the ids of GPT-2's reference encoder. */
#ifndef TRIDENT_BPE_H
#define TRIDENT_BPE_H

#include <stddef.h>
#include <stdint.h>

typedef struct bpe_tokenizer bpe_tokenizer; /* immutable after load; share across threads */
typedef struct bpe_worker bpe_worker;       /* per-thread scratch: match data, merge cache */

/* Growable id vector; encode appends to it. */
typedef struct {
    int32_t *ids;
    size_t n, cap;
} bpe_ids;

/* Loads the vocabulary and merges. On failure returns NULL and writes one line naming the
 * file and what is wrong into err (errlen bytes). */
bpe_tokenizer *bpe_load(const char *vocab_json, const char *merges_txt, char *err, size_t errlen);
void bpe_free(bpe_tokenizer *t);

int bpe_vocab_size(const bpe_tokenizer *t); /* 50257 for GPT-2 */
int bpe_eod_id(const bpe_tokenizer *t);     /* id of <|endoftext|> (50256) */

bpe_worker *bpe_worker_new(const bpe_tokenizer *t);
void bpe_worker_free(bpe_worker *w);

/* Appends the ids of text[0..len) to out. Any bytes are accepted (see docs/tokenizer.md for
 * invalid UTF-8); "<|endoftext|>" in the text is encoded as ordinary text, not as the EOD id. */
void bpe_encode(bpe_worker *w, const char *text, size_t len, bpe_ids *out);

/* Writes the bytes of ids[0..n) to out (grown with td_xrealloc; *out_len set). Returns -1 if an
 * id is out of range (naming it in err), else 0. */
int bpe_decode(const bpe_tokenizer *t, const int32_t *ids, size_t n, char **out, size_t *out_len, char *err,
               size_t errlen);

void bpe_ids_push(bpe_ids *v, int32_t id);
void bpe_ids_free(bpe_ids *v);

#endif
