/* Evaluation of a checkpoint. Owns strided (WikiText-style) perplexity: the tokens of a run of
 * documents concatenated in order, windows of S+1 tokens starting every K tokens, each token
 * scored once (the first window scores its S targets, each later one its last K), in any
 * layout (tensor, pipeline and data parallel). See docs/eval.md. */
#ifndef TRIDENT_EVAL_H
#define TRIDENT_EVAL_H

#include <stdint.h>

#include "trident/gpt.h"
#include "trident/indexed.h"
#include "trident/parallel_state.h"

typedef struct ev_result {
    int64_t documents;   /* documents scored */
    int64_t doc_tokens;  /* tokens in them */
    int64_t windows;
    int64_t tokens;      /* targets scored: S + (windows - 1) K */
    double loss;         /* mean loss per scored token (nats) */
    double perplexity;   /* exp(loss) */
} ev_result;

/* Windows of S+1 tokens every K over n tokens: floor((n - S - 1) / K) + 1, or 0 when n <= S. */
int64_t ev_num_windows(int64_t n, int S, int K);

/* Scores documents [doc_begin, doc_end) of d with the model stage m of this rank (collective
 * over ps->world; m->cfg.seq is S, m built for micro-batches of `mbs`), stride K (1 <= K <= S).
 * Windows are dealt to data-parallel ranks mbs at a time; stages pass activations along the
 * pipeline group. Every rank gets the result. Dies (collectively) when there is no full window. */
void ev_score(gpt_model *m, const ps_state *ps, const idx_dataset *d, int64_t doc_begin, int64_t doc_end, int K,
              int mbs, ev_result *out);

#endif
