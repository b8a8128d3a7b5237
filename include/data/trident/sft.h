/* Supervised fine-tuning data, after Megatron-Bridge's SFT datasets. Owns reading the three JSONL
 * formats — prompt/response pairs joined by a prompt template, chat `messages` ({role, content})
 * rendered with the model's chat template, ShareGPT `conversations` ({from, value}) mapped to
 * roles and rendered so — into tokens with a per-token answer mask (1 where the token is the
 * assistant's answer), and writing them as two indexed datasets of the same lengths:
 * PREFIX_sft_document.{bin,idx} (the tokens) and PREFIX_sft_document_answer_mask.{bin,idx}
 * (uint8 0/1), atomically. The chat's answer spans are found by rendering the conversation prefix
 * by prefix (see sft_encode). */
#ifndef TRIDENT_SFT_H
#define TRIDENT_SFT_H

#include <stddef.h>
#include <stdint.h>

#include "trident/chat_template.h"
#include "trident/tokenizer.h"

typedef enum { SFT_PROMPT_RESPONSE, SFT_CHAT, SFT_SHAREGPT } sft_format;

/* "prompt-response", "chat", "sharegpt" into *f: 0, or -1 for another name. */
int sft_parse_format(const char *name, sft_format *f);

typedef struct {
    sft_format format;
    const ct_config *chat;       /* chat, sharegpt: the special tokens the template sees */
    const ct_template *tmpl;     /* chat, sharegpt: the compiled chat_template */
    const char *prompt_template; /* prompt-response: text with {key} placeholders of the line's string
                                    values; the last placeholder, at its very end, is the answer;
                                    \n, \t and \\ are escapes (as Megatron-Bridge's unicode_escape) */
} sft_config;

/* Checks c->prompt_template (prompt-response only): 0, or -1 with one line in err. */
int sft_check_prompt_template(const char *tmpl, char *err, size_t errlen);

/* One JSONL line (len bytes) of format c->format tokenized with w (t its tokenizer) into ids, the
 * answer mask (0/1, one per id) into mask. The chat's tokens are those of the whole
 * conversation rendered (no generation prompt), its special tokens read as such; the answer of
 * assistant message k is the tokens after the common prefix with render(messages[:k],
 * add_generation_prompt) up to the common prefix with render(messages[:k+1]): the template's
 * answer text and what ends it (ChatML's <|im_end|>\n). A prompt/response sample is the prompt's
 * tokens, the answer's, then the tokenizer's EOD (counted as answer) when it has one. Returns 0,
 * or -1 with one line in err saying what is wrong with the line (the caller adds file:line). */
int sft_encode(const sft_config *c, const tok_tokenizer *t, tok_worker *w, const char *line, size_t len, bpe_ids *ids,
               bpe_ids *mask, char *err, size_t errlen);

typedef struct {
    int64_t samples, tokens, answer_tokens, blank_lines;
} sft_prep_stats;

/* Every line of the inputs (plain, .gz, .zst) encoded and written to PREFIX_sft_document and its
 * _answer_mask sidecar, atomically (nothing under the final names unless all succeeds). Returns
 * 0, or -1 with one line in err naming file:line and what to do. */
int sft_prep_run(const sft_config *c, const tok_tokenizer *t, const char *const *inputs, int n_inputs,
                 const char *output_prefix, sft_prep_stats *st, char *err, size_t errlen);

/* One row of a sample of len tokens (toks, its answer mask am; the first min(len, seq + 1) read):
 * ids, targets and loss mask (seq each): the sample cut to seq + 1 tokens (cut at the right),
 * then pad; a target counts (mask 1) where it is a token of the sample and, with answer_only, the
 * answer's. Returns the counted targets. */
int sft_row(const int32_t *toks, const int32_t *am, int64_t len, int seq, int answer_only, int32_t pad, int32_t *ids,
            int32_t *targets, float *mask);

/* "DATA_answer_mask": the mask sidecar of the token dataset DATA (caller frees). */
char *sft_mask_prefix(const char *data_prefix);

#endif
