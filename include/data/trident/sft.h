/* Supervised fine-tuning data, after Megatron-Bridge's SFT datasets. Owns reading the three JSONL
 * formats — prompt/response pairs joined by a prompt template, chat `messages` ({role, content})
 * rendered with the model's chat template, ShareGPT `conversations` ({from, value}) mapped to
 * roles and rendered so — into tokens with a per-token answer mask (1 where the token is the
 * assistant's answer), and writing them as two indexed datasets of the same lengths:
 * PREFIX_sft_document.{bin,idx} (the tokens) and PREFIX_sft_document_answer_mask.{bin,idx}
 * (uint8: SFT_MASK_ANSWER on the answer's tokens, SFT_MASK_FIELD or SFT_MASK_FIELD + 1 on a
 * truncation field's, 0 on the rest of the prompt), atomically. The chat's answer spans are found by rendering the conversation prefix
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

/* The answer mask's values: 0 the prompt's other tokens, 1 the answer's, 2 and 3 the tokens of a
 * truncation field's value (alternating, so that two fields side by side stay apart). */
enum { SFT_MASK_PROMPT = 0, SFT_MASK_ANSWER = 1, SFT_MASK_FIELD = 2 };

/* Megatron-Bridge's truncation_method: which end of a truncated field (and then of the sample)
 * goes: right keeps the beginning, left keeps the end. */
typedef enum { SFT_TRUNC_RIGHT, SFT_TRUNC_LEFT } sft_trunc;

/* "right", "left" into *t: 0, or -1 for another name. */
int sft_parse_truncation(const char *name, sft_trunc *t);

typedef struct {
    sft_format format;
    const ct_config *chat;       /* chat, sharegpt: the special tokens the template sees */
    const ct_template *tmpl;     /* chat, sharegpt: the compiled chat_template */
    const char *prompt_template; /* prompt-response: text with {key} placeholders of the line's string
                                    values; the last placeholder, at its very end, is the answer;
                                    \n, \t and \\ are escapes (as Megatron-Bridge's unicode_escape) */
    const char *truncation_field; /* prompt-response: comma-separated keys of the template whose tokens are
                                     truncated first (Bridge's truncation_field), encoded apart and marked
                                     SFT_MASK_FIELD; NULL or "" for none */
    int workers;                  /* sft_prep_run: threads encoding lines (1 when < 2); the output is the same */
} sft_config;

/* Checks c->prompt_template (prompt-response only): 0, or -1 with one line in err. */
int sft_check_prompt_template(const char *tmpl, char *err, size_t errlen);

/* Checks the comma-separated truncation fields against tmpl (each a placeholder key of it, not the
 * answer's, none twice): 0, or -1 with one line in err. */
int sft_check_truncation_field(const char *tmpl, const char *fields, char *err, size_t errlen);

/* Bridge's default truncation field, "input", when tmpl has a prompt {input} placeholder; else ""
 * (the sample is then cut at its ends only). */
const char *sft_default_truncation_field(const char *tmpl);

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

/* Every line of the inputs (plain, .gz, .zst) encoded (by c->workers threads, batches of lines
 * shared out in order) and written in the inputs' order to PREFIX_sft_document and its
 * _answer_mask sidecar, the same bytes whatever the workers, atomically (nothing under the final names unless all succeeds). Returns
 * 0, or -1 with one line in err naming file:line and what to do. */
int sft_prep_run(const sft_config *c, const tok_tokenizer *t, const char *const *inputs, int n_inputs,
                 const char *output_prefix, sft_prep_stats *st, char *err, size_t errlen);

/* Truncates a sample of len tokens (toks and its answer mask am, in place) to at most budget
 * tokens as Megatron-Bridge's GPTSFTDataset does: the excess is shared out among the truncation
 * fields' values (mask SFT_MASK_FIELD runs, in order, the first ones taking one more when it does
 * not divide), each cut at its end `how` names; what a field is too short to give, and all of it
 * when there is no field (chat), is then cut from the whole sample: its end (right) or its start
 * (left). Returns the new length (len when it fits). */
int64_t sft_truncate(int32_t *toks, int32_t *am, int64_t len, int64_t budget, sft_trunc how);

/* One row of a sample of len tokens (toks, its answer mask am; the first min(len, seq + 1) read,
 * so a sample is first truncated with sft_truncate to seq + 1): ids, targets and loss mask (seq
 * each): the sample's tokens, then pad; a target counts (mask 1) where it is a token of the sample
 * and, with answer_only, the answer's (SFT_MASK_ANSWER). Returns the counted targets. */
int sft_row(const int32_t *toks, const int32_t *am, int64_t len, int seq, int answer_only, int32_t pad, int32_t *ids,
            int32_t *targets, float *mask);

/* "DATA_answer_mask": the mask sidecar of the token dataset DATA (caller frees). */
char *sft_mask_prefix(const char *data_prefix);

#endif
