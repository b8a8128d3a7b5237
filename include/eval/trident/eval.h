/* Evaluation of a checkpoint (src/eval/). forward.c scores rows through the pipeline and counts
 * windows; strided.c owns strided (WikiText-style) perplexity: the tokens of a run of documents
 * concatenated in order, windows of S+1 tokens starting every K tokens, each token scored once
 * (the first window scores its S targets, each later one its last K), in any layout (tensor,
 * pipeline and data parallel); tasks.c the zero-shot tasks. Both build on forward.c alone.
 * See docs/eval.md. */
#ifndef TRIDENT_EVAL_H
#define TRIDENT_EVAL_H

#include <stdint.h>

#include "trident/sft.h"
#include "trident/gpt.h"
#include "trident/comm.h"
#include "trident/dataset_reader.h"
#include "trident/parallel_state.h"
#include "trident/tokenizer.h"

typedef struct ev_result {
    int64_t documents;   /* documents scored */
    int64_t doc_tokens;  /* tokens in them */
    int64_t windows;
    int64_t tokens;      /* targets scored: S + (windows - 1) K */
    double loss;         /* mean loss per scored token (nats) */
    double perplexity;   /* exp(loss) */
} ev_result;

/* (forward.c) Windows of S+1 tokens every K over n tokens: floor((n - S - 1) / K) + 1, or 0 when n <= S. */
int64_t ev_num_windows(int64_t n, int S, int K);

/* Scores documents [doc_begin, doc_end) of d with the model stage m of this rank (collective
 * over ps->world; m->cfg.seq is S, m built for micro-batches of `mbs`), stride K (1 <= K <= S).
 * Windows are dealt to data-parallel ranks mbs at a time; stages pass activations along the
 * pipeline group. Every rank gets the result. Dies (collectively) when there is no full window. */
void ev_score(gpt_model *m, const ps_state *ps, const dsr_reader *d, int64_t doc_begin, int64_t doc_end, int K,
              int mbs, ev_result *out);
/* The dataset ev_score reads: PREFIX `path` opened (dsr_open) with every token id checked
 * against [0, vocab) (gptds_check_token_ids, cache in cache_dir or beside the dataset): rank 0
 * of world first, so that it writes the check's cache, then the others, which load it.
 * vocab_source names the vocabulary in an error. Collective over world. Ends the job (exit 1)
 * on a dataset that cannot be read or holds an id outside the vocabulary. */
dsr_reader *ev_open_dataset(comm *world, const char *path, int vocab, const char *vocab_source,
                            const char *cache_dir);

/* (sft.c) The answer-only loss of SFT samples [doc_begin, doc_end) of d (PREFIX_sft_document) and
 * mask (its _answer_mask sidecar), one a row as train --sft reads them (sft_truncate by how to
 * S + 1 tokens, then sft_row: padded with pad): out->loss is the mean loss over the answer's targets (every target of the
 * samples with answer_only 0), out->tokens those targets, out->windows the samples cut.
 * Collective over ps->world, like ev_score. */
void ev_sft(gpt_model *m, const ps_state *ps, const dsr_reader *d, const dsr_reader *mask, int64_t doc_begin,
            int64_t doc_end, int mbs, int answer_only, sft_trunc how, int32_t pad, ev_result *out);

/* ---- zero-shot tasks (src/eval/tasks.c; trident eval --task) ----
 * Each is collective over ps->world and gives every rank the result. m is built for micro-batches
 * of m->mbs rows (HellaSwag needs 4) of m->cfg.seq tokens; a longer example keeps its last
 * seq + 1 tokens. */

/* ---- the rows both score (src/eval/forward.c) ---- */

/* Runs B <= m->mbs rows of m->cfg.seq tokens through the pipeline (dropout off): loss (B, seq)
 * = -log p(target) of every position, and (correct not NULL) correct (B, seq) = 1 where the
 * most likely token over the whole vocabulary (the lowest id on ties) is the target. */
void ev_forward(gpt_model *m, const ps_state *ps, const int32_t *ids, const int32_t *targets, int B, float *loss,
                uint8_t *correct);

/* Megatron's WikiText detokenizer (tasks/zeroshot_gpt/detokenizer.py), as a new string. */
char *ev_wikitext_detokenize(const char *text);
/* Python's len(text.strip().split(" ")): Megatron's count of WikiText's original tokens. */
int64_t ev_count_space_split(const char *text);

typedef struct {
    int64_t original_words;  /* the raw file's space-separated words */
    int64_t doc_tokens;      /* tokens of the detokenized text */
    int64_t windows, tokens; /* windows of seq + 1 every K; targets scored */
    double loss, perplexity; /* per token */
    double adjusted_perplexity; /* exp(loss x (tokens - 1) / (original words - 1)), Megatron's */
} ev_wikitext_result;
/* WIKITEXT103: the raw wiki.test.tokens at path, detokenized, tokenized whole, scored in
 * windows every K tokens as ev_score does. Returns 0, or -1 with err. */
int ev_wikitext(gpt_model *m, const ps_state *ps, const tok_tokenizer *tok, const char *path, int K,
                ev_wikitext_result *out, char *err, size_t errlen);

typedef struct {
    int64_t n, correct;
    double accuracy;
} ev_lambada_result;
/* LAMBADA: lambada_test.jsonl ({"text": ...} a line); an example is right when every target
 * token is the most likely one given the ones before (teacher forced): the last token, or with
 * strict the whole last word (Megatron's --strict-lambada). */
int ev_lambada(gpt_model *m, const ps_state *ps, const tok_tokenizer *tok, const char *path, int strict,
               ev_lambada_result *out, char *err, size_t errlen);

typedef struct {
    int64_t n, correct, correct_norm;
    double acc, acc_norm;
} ev_hellaswag_result;
/* HELLASWAG: hellaswag_val.jsonl ({"ctx", "label", "endings": [4]}); llm.c's scoring: each
 * ending (" " + ending) after the context, the sum of its tokens' losses (acc: the lowest) and
 * their mean (acc_norm: the lowest). */
int ev_hellaswag(gpt_model *m, const ps_state *ps, const tok_tokenizer *tok, const char *path,
                 ev_hellaswag_result *out, char *err, size_t errlen);

typedef struct {
    double loglikelihood; /* sum of log p(continuation token | the tokens before), nats */
    int is_greedy;        /* every continuation token the most likely one (the lowest id on ties) */
    int tokens;           /* continuation tokens scored */
} ev_ll_item;
/* LOGLIKELIHOOD: {"context": ..., "continuation": ...} a line, each a text or a list of token ids,
 * scored as lm-evaluation-harness's loglikelihood requests are: texts split its way (the
 * context's trailing spaces moved to the continuation, context + continuation tokenized whole,
 * the continuation being the ids past the context's own), an empty context being the
 * end-of-document token; an item longer than seq + 1 tokens keeps its last ones. *items (*n of
 * them, malloc'd) in file order. */
int ev_loglikelihood(gpt_model *m, const ps_state *ps, const tok_tokenizer *tok, const char *path, ev_ll_item **items,
                     int *n, char *err, size_t errlen);

#endif
