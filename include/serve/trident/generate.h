/* Text generation: batches of prompts of different lengths through a model in any tensor x
 * pipeline layout, with the key/value cache (gpt_infer) or by running the whole prefix again at
 * every step; greedy or sampled (temperature, top-k, top-p) from a seeded counter-based stream,
 * so a seed gives the same tokens in every layout. See docs/generate.md. */
#ifndef TRIDENT_GENERATE_H
#define TRIDENT_GENERATE_H

#include <stdint.h>

#include "trident/gpt.h"
#include "trident/parallel_state.h"

/* Whether row b, having generated gen[0..n) (its last token not the end of a document), stops
 * there: called on every rank, which must all answer alike (the same function of the same ids). */
typedef int (*gen_stop_fn)(void *user, int b, const int32_t *gen, int n);

typedef struct gen_config {
    int max_new;       /* tokens to generate a row (after its prompt) */
    int greedy;        /* argmax (also when temperature is 0 or top_k is 1) */
    float temperature; /* > 0 */
    int top_k;         /* 0: all */
    float top_p;       /* 0 (or 1): all */
    uint64_t seed;
    int eod;           /* a row stops after generating this id; -1: none */
    int no_cache;      /* run the whole prefix at every step (the reference for the cache) */
    gen_stop_fn stop;  /* NULL: a row stops at eod or max_new only */
    void *stop_user;
} gen_config;

typedef struct gen_stats {
    int64_t prompt_tokens, generated;
    double prefill_s, decode_s;
    int nonfinite;        /* rows stopped because their logits held a NaN or an infinity */
    int bad_row, bad_pos; /* the first of them, and the position whose logits it was (-1: none) */
} gen_stats;

/* Log-probabilities gen_run fills (every rank), each row's at positions i < out_len[b] - 1 (rows
 * of gen_capacity - 1 entries): log p(out[b][i + 1] | out[b][0..i]), fp32 log-softmax of the
 * model's logits at position i, prompt tokens and generated ones alike; and with top > 0 the top
 * most likely next tokens at every position, best first (ties: the lower id), top entries a position. */
#define GEN_MAX_TOP 20
typedef struct gen_logprobs {
    float **lp;        /* (B, cap - 1) */
    int top;           /* 0..GEN_MAX_TOP */
    int32_t **top_ids; /* (B, (cap - 1) top) when top > 0 */
    float **top_lp;    /* (B, (cap - 1) top) */
} gen_logprobs;

/* Called on world rank 0 with each generated token of row b as it comes. */
typedef void (*gen_stream_fn)(void *user, int b, int32_t token);

/* Positions a batch needs: its longest prompt plus max_new. */
int gen_capacity(const gen_config *g, int B, const int *lens);

/* Generates for B prompts (prompts[b], lens[b] >= 1 tokens) on this rank's stage m (built for the
 * layout of ps; collective over ps->world). out[b] (capacity gen_capacity ids) gets the prompt
 * and its continuation, out_len[b] their count, on every rank; max_new 0 generates nothing (a
 * row is then its prompt). lp (NULL: none) gets the log-probabilities (gen_logprobs): the
 * shortest prompt's positions then run in one step that keeps every position's logits. A row whose logits at some
 * position hold a NaN or an infinity (a broken model or an overflow) stops there with out_len[b]
 * 0, nothing sampled from them; the others go on. Returns the number of such rows (st says
 * which came first). */
int gen_run(gpt_model *m, const ps_state *ps, const gen_config *g, int B, int32_t *const *prompts, const int *lens,
            int32_t **out, int *out_len, const gen_logprobs *lp, gen_stream_fn stream, void *user, gen_stats *st);

/* The token sampled from logits (V) for row b at position pos: argmax when greedy, else from
 * softmax(logits / temperature) cut to the top_k largest and the smallest set of cumulative
 * probability >= top_p, by the uniform number of (seed, b, pos). logits is overwritten. */
int32_t gen_sample(float *logits, int V, const gen_config *g, int b, int pos);

#endif
