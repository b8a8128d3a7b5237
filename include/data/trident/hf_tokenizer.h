/* Hugging Face tokenizer.json, BPE models only. Owns reading the file (vocab, merges, added
 * tokens, normalizer, pre-tokenizer, decoder, post-processor's BOS/EOS), the encode pipeline of
 * the `tokenizers` library (added tokens split out whole, normalize, pre-tokenize, BPE with its
 * merge order, byte fallback and unknown token) and decoding. Anything else is refused at load
 * with one line naming the component. See docs/tokenizer.md. */
#ifndef TRIDENT_HF_TOKENIZER_H
#define TRIDENT_HF_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "trident/bpe.h" /* bpe_ids */

typedef struct hf_tokenizer hf_tokenizer; /* immutable after load; share across threads */
typedef struct hf_worker hf_worker;       /* per-thread scratch: match data, buffers, word cache */
struct wp_tokenizer;                      /* trident/wordpiece.h */

/* Reads a tokenizer.json. On failure returns NULL and writes one line naming the file and the
 * component or field that is wrong (or unsupported) into err. */
hf_tokenizer *hf_load(const char *path, char *err, size_t errlen);
/* The same from memory: json[0..len) (need not be NUL-terminated); name is used in messages. */
hf_tokenizer *hf_load_json(const char *json, size_t len, const char *name, char *err, size_t errlen);
/* Reads a tokenizer.json of any model trident reads, parsing it once: a WordPiece model comes back
 * in *wp (and NULL), any other through the BPE reader (and *wp NULL). NULL and *wp NULL on failure,
 * with err as hf_load's. (Parsing Llama 3's 9 MB file twice, once to see its model's type, was half
 * of the 0.67 s its load took.) */
hf_tokenizer *hf_load_any(const char *path, struct wp_tokenizer **wp, char *err, size_t errlen);
void hf_free(hf_tokenizer *t);

int hf_vocab_size(const hf_tokenizer *t); /* 1 + the largest id of the vocab and added tokens */
int hf_eod_id(const hf_tokenizer *t);     /* EOS from the file, or -1 if it names none */
int hf_bos_id(const hf_tokenizer *t);     /* BOS from the file, or -1 */
/* The token of id as the file spells it (added-token content or vocab key); NULL for an id no
 * token has. *n is set to its length. */
const char *hf_token(const hf_tokenizer *t, int id, size_t *n);

hf_worker *hf_worker_new(const hf_tokenizer *t);
void hf_worker_free(hf_worker *w);

/* Appends the ids of text[0..len) to out, as the library's encode(text, add_special_tokens=False):
 * added and special tokens in the text are their ids; no BOS/EOS is added. Any bytes are
 * accepted (invalid UTF-8: see docs/tokenizer.md). */
void hf_encode(hf_worker *w, const char *text, size_t len, bpe_ids *out);

/* Writes the text of ids[0..n) through the file's decoder to out (grown with td_xrealloc;
 * *out_len set), bytes as they are (no U+FFFD replacement). Returns -1 naming a bad id in err. */
int hf_decode(const hf_tokenizer *t, const int32_t *ids, size_t n, char **out, size_t *out_len, char *err,
              size_t errlen);

#endif
