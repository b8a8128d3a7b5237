/* Text generation: see include/serve/trident/generate.h. Megatron's batching: every row starts at
 * position 0; the steps run from the shortest prompt on, a row taking its own prompt's token
 * while it has one and the sampled one after. */
#include "trident/generate.h"

#include "backend.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "trident/check.h"
#include "trident/comm.h"
#include "trident/philox.h"
#include "trident/timer.h"

int gen_capacity(const gen_config *g, int B, const int *lens)
{
    int most = 0;
    for (int b = 0; b < B; b++) most = lens[b] > most ? lens[b] : most;
    return most + g->max_new;
}

static int is_greedy(const gen_config *g) { return g->greedy || g->temperature <= 0.0f || g->top_k == 1; }

/* out[0, n): x[0, n), largest first. The values are exponentials (finite, not negative), whose bit
 * patterns order as they do: an LSD radix sort of the complemented patterns in three passes of 11
 * bits gives a comparison sort's order in linear time (a qsort of GPT-2's 50257 took 4-5 ms a
 * token, this about 0.3). tmp holds n. */
static void sort_desc(const float *x, int n, float *out, uint32_t *tmp)
{
    uint32_t *a = tmp, *b = (uint32_t *)out;
    for (int i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, x + i, sizeof u);
        a[i] = ~u;
    }
    for (int shift = 0; shift < 32; shift += 11) { /* three passes: tmp -> out -> tmp -> out */
        int at[2049] = {0};
        for (int i = 0; i < n; i++) at[((a[i] >> shift) & 2047) + 1]++;
        for (int d = 0; d < 2048; d++) at[d + 1] += at[d];
        for (int i = 0; i < n; i++) b[at[(a[i] >> shift) & 2047]++] = a[i];
        uint32_t *t = a;
        a = b;
        b = t;
    }
    for (int i = 0; i < n; i++) {
        uint32_t u = ~a[i];
        memcpy(out + i, &u, sizeof u);
    }
}

int32_t gen_sample(float *logits, int V, const gen_config *g, int b, int pos)
{
    int best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;
    if (is_greedy(g)) return best;
    float mx = logits[best];
    double sum = 0;
    for (int i = 0; i < V; i++) {
        logits[i] = expf((logits[i] - mx) / g->temperature);
        sum += logits[i];
    }
    /* the cut: probabilities below the k-th largest, and past the top-p mass, are dropped */
    float floor_p = 0.0f;
    if ((g->top_k > 0 && g->top_k < V) || (g->top_p > 0.0f && g->top_p < 1.0f)) {
        float *sorted = td_xmalloc((size_t)V * sizeof(float));
        uint32_t *tmp = td_xmalloc((size_t)V * sizeof(uint32_t));
        sort_desc(logits, V, sorted, tmp);
        free(tmp);
        int keep = g->top_k > 0 && g->top_k < V ? g->top_k : V;
        if (g->top_p > 0.0f && g->top_p < 1.0f) {
            double cum = 0;
            for (int i = 0; i < keep; i++) {
                cum += sorted[i] / sum;
                if (cum >= g->top_p) {
                    keep = i + 1;
                    break;
                }
            }
        }
        floor_p = sorted[keep - 1];
        free(sorted);
        sum = 0;
        for (int i = 0; i < V; i++) {
            if (logits[i] < floor_p) logits[i] = 0.0f;
            sum += logits[i];
        }
    }
    double u = td_philox_uniform(g->seed, (uint64_t)b, (uint64_t)pos) * sum, cum = 0;
    int last = best;
    for (int i = 0; i < V; i++) {
        if (logits[i] <= 0.0f) continue;
        cum += logits[i];
        last = i;
        if (u < cum) return i;
    }
    return last; /* rounding left u at the very top */
}

/* The prompt step of a batch with log-probabilities: every position's logits are scored as they
 * come (gpt_infer_each), each row's last kept for the sampler. */
typedef struct {
    int n, cap, V, top;
    const int32_t *tokens; /* (B, cap) */
    float *lps;            /* (B, n - 1): log p(token i + 1), NaN where the logits were not all finite */
    int32_t *tids;         /* (B, n - 1, top) */
    float *tlps;
    float *logits;         /* (B, V): each row's position n - 1 */
} prefill;

static void on_prefill(void *user, int r0, int count, const float *logits);

/* One forward of positions [pos, pos + n) of tokens (B, cap) through the pipeline; the last stage
 * fills logits (B, vocab), or with p (pos 0) scores every position into p. */
static void step(gpt_model *m, const ps_state *ps, gpt_kv_cache *c, const int32_t *tokens, int B, int cap, int pos,
                 int n, int32_t *ids, float *logits, prefill *p)
{
    size_t rows = (size_t)B * n, h = (size_t)m->cfg.hidden;
    float *in = NULL;
    if (m->first) {
        for (int b = 0; b < B; b++) memcpy(ids + (size_t)b * n, tokens + (size_t)b * cap + pos, (size_t)n * sizeof(int32_t));
    } else {
        in = be_alloc(m->be, rows * h * sizeof(float));
        comm_wait(comm_irecv(xfer_comm(m->be, ps->pp_group), xfer_recv_view(m->be, in, rows * h * sizeof(float)), rows * h, COMM_F32,
                             ps->pp_rank - 1, 1));
        xfer_recv_done(m->be, in, rows * h * sizeof(float));
    }
    float *y = p ? gpt_infer_each(m, c, ids, in, pos, n, on_prefill, p) : gpt_infer(m, c, ids, in, pos, n, logits);
    if (!m->last)
        comm_wait(comm_isend(xfer_comm(m->be, ps->pp_group), xfer_send_view(m->be, y, rows * h * sizeof(float)), rows * h, COMM_F32,
                             ps->pp_rank + 1, 1));
    be_dfree(m->be, in);
}

/* Marks what a row's next token is when its logits were not all finite (never a token id). */
#define GEN_NONFINITE INT32_MIN

static int all_finite(const float *l, int V)
{
    for (int i = 0; i < V; i++)
        if (!isfinite(l[i])) return 0;
    return 1;
}

/* Row b stops for non-finite logits at position pos (every rank: the token broadcast said so). */
static void stop_row(gen_stats *st, int *done, int *len, int b, int pos)
{
    if (st->nonfinite++ == 0) st->bad_row = b, st->bad_pos = pos;
    done[b] = 1;
    len[b] = 0;
}

/* log p(token) under logits (V): the log-softmax (exponentials in float, summed and logged in
 * double), rounded to float; with top > 0 the
 * top most likely ids into ti (best first, the lower id on ties) and their log-probabilities into tl. */
static float score_row(const float *l, int V, int token, int top, int32_t *ti, float *tl)
{
    float mx = l[0];
    double z = 0;
    for (int i = 1; i < V; i++) mx = l[i] > mx ? l[i] : mx;
    for (int i = 0; i < V; i++) z += expf(l[i] - mx); /* as the training loss sums them (cpu_ce_sumexp) */
    double lz = (double)mx + log(z);
    if (top > V) top = V;
    int k = 0;
    for (int i = 0; i < V && top > 0; i++) {
        if (k == top && !(l[i] > l[ti[top - 1]])) continue;
        int j = k < top ? k++ : top - 1;
        for (; j > 0 && l[i] > l[ti[j - 1]]; j--) ti[j] = ti[j - 1];
        ti[j] = i;
    }
    for (int j = 0; j < top; j++) tl[j] = (float)((double)l[ti[j]] - lz);
    return (float)((double)l[token] - lz);
}

static void on_prefill(void *user, int r0, int count, const float *logits)
{
    prefill *p = user;
#pragma omp parallel for schedule(static) if ((size_t)count * p->V > (1u << 20))
    for (int k = 0; k < count; k++) {
        int r = r0 + k, b = r / p->n, i = r % p->n;
        const float *l = logits + (size_t)k * p->V;
        if (i == p->n - 1) {
            memcpy(p->logits + (size_t)b * p->V, l, (size_t)p->V * sizeof(float));
            continue;
        }
        size_t at = (size_t)b * (p->n - 1) + i;
        p->lps[at] = all_finite(l, p->V) ? score_row(l, p->V, p->tokens[(size_t)b * p->cap + i + 1], p->top,
                                                     p->tids + at * p->top, p->tlps + at * p->top)
                                         : NAN;
    }
}

/* The prompt step with log-probabilities: positions [0, n) of every row in one step, each position's
 * scores into lp (every rank: the last stage broadcasts them), logits (last stage) the last
 * position's; a row whose logits were not finite at a position stops there. Returns the rows stopped. */
static int prefill_scored(gpt_model *m, const ps_state *ps, gpt_kv_cache *c, const int32_t *tokens, int B, int cap,
                          int n, int32_t *ids, float *logits, const gen_logprobs *lp, gen_stats *st, int *done, int *len)
{
    int V = m->cfg.vocab, top = lp->top, last_stage = ps->pp - 1, stopped = 0;
    size_t np = (size_t)B * (n - 1);
    prefill p = {n, cap, V, top, tokens, td_xcalloc(np + 1, sizeof(float)), td_xcalloc(np * top + 1, sizeof(int32_t)),
                 td_xcalloc(np * top + 1, sizeof(float)), logits};
    step(m, ps, c, tokens, B, cap, 0, n, ids, logits, &p);
    comm_bcast(ps->pp_group, p.lps, np, COMM_F32, last_stage);
    if (top) {
        comm_bcast(ps->pp_group, p.tids, np * top, COMM_I32, last_stage);
        comm_bcast(ps->pp_group, p.tlps, np * top, COMM_F32, last_stage);
    }
    for (int b = 0; b < B; b++)
        for (int i = 0; i < n - 1; i++) {
            size_t at = (size_t)b * (n - 1) + i;
            if (isnan(p.lps[at])) {
                stop_row(st, done, len, b, i);
                stopped++;
                break;
            }
            lp->lp[b][i] = p.lps[at];
            if (top) {
                memcpy(lp->top_ids[b] + (size_t)i * top, p.tids + at * top, (size_t)top * sizeof(int32_t));
                memcpy(lp->top_lp[b] + (size_t)i * top, p.tlps + at * top, (size_t)top * sizeof(float));
            }
        }
    free(p.lps), free(p.tids), free(p.tlps);
    return stopped;
}

int gen_run(gpt_model *m, const ps_state *ps, const gen_config *g, int B, int32_t *const *prompts, const int *lens,
            int32_t **out, int *out_len, const gen_logprobs *lp, gen_stream_fn stream, void *user, gen_stats *st)
{
    int cap = gen_capacity(g, B, lens), V = m->cfg.vocab, shortest = lens[0], top = lp ? lp->top : 0;
    for (int b = 1; b < B; b++) shortest = lens[b] < shortest ? lens[b] : shortest;
    TD_ASSERT(shortest >= 1);
    int32_t *tokens = td_xcalloc((size_t)B * cap, sizeof(int32_t)), *next = td_xmalloc((size_t)B * sizeof(int32_t));
    int32_t *ids = td_xmalloc((size_t)B * cap * sizeof(int32_t));
    int *done = td_xcalloc((size_t)B, sizeof(int)), *len = td_xmalloc((size_t)B * sizeof(int));
    float *logits = m->last ? td_xmalloc((size_t)B * V * sizeof(float)) : NULL;
    for (int b = 0; b < B; b++) {
        memcpy(tokens + (size_t)b * cap, prompts[b], (size_t)lens[b] * sizeof(int32_t));
        len[b] = lens[b];
    }
    gpt_kv_cache *c = gpt_kv_create(m, B, cap, g->no_cache ? cap : shortest);
    memset(st, 0, sizeof *st);
    for (int b = 0; b < B; b++) st->prompt_tokens += lens[b];
    st->bad_row = st->bad_pos = -1;
    int last_stage = ps->pp - 1, ndone = 0;
    /* with log-probabilities, each row's logits kept for scoring (the sampler overwrites them) */
    float *lpv = td_xcalloc((size_t)B, sizeof(float)), *rows = lp && m->last ? td_xmalloc((size_t)B * V * sizeof(float)) : NULL;
    int32_t *tids = td_xcalloc((size_t)B * top + 1, sizeof(int32_t));
    float *tlps = td_xcalloc((size_t)B * top + 1, sizeof(float));
    double t0 = td_now();
    /* with log-probabilities, the shortest prompt's positions run first in one step that scores each */
    if (lp) ndone += prefill_scored(m, ps, c, tokens, B, cap, shortest, ids, logits, lp, st, done, len);
    /* position t - 1's logits choose the token at t; t runs from the shortest prompt on */
    for (int t = shortest; ndone < B && t < cap; t++) {
        if (t == shortest && lp) (void)0; /* the prompt step has left its logits */
        else if (g->no_cache || t == shortest) step(m, ps, c, tokens, B, cap, 0, t, ids, logits, NULL);
        else step(m, ps, c, tokens, B, cap, t - 1, 1, ids, logits, NULL);
        if (t == shortest) st->prefill_s = td_now() - t0;
        if (m->last) /* the rows sampled side by side (each draw is its own (seed, row, position)) */
#pragma omp parallel for schedule(dynamic, 1) if (B > 1)
            for (int b = 0; b < B; b++) {
                float *l = logits + (size_t)b * V, *row = rows ? rows + (size_t)b * V : NULL;
                if (!all_finite(l, V)) {
                    next[b] = GEN_NONFINITE;
                    continue;
                }
                if (row) memcpy(row, l, (size_t)V * sizeof(float));
                next[b] = gen_sample(l, V, g, b, t);
                if (row)
                    lpv[b] = score_row(row, V, t < lens[b] ? tokens[(size_t)b * cap + t] : next[b], top,
                                       tids + (size_t)b * top, tlps + (size_t)b * top);
            }
        comm_bcast(ps->pp_group, next, (size_t)B, COMM_I32, last_stage);
        if (lp) comm_bcast(ps->pp_group, lpv, (size_t)B, COMM_F32, last_stage);
        if (top) {
            comm_bcast(ps->pp_group, tids, (size_t)B * top, COMM_I32, last_stage);
            comm_bcast(ps->pp_group, tlps, (size_t)B * top, COMM_F32, last_stage);
        }
        for (int b = 0; b < B; b++) {
            if (done[b]) continue;
            if (next[b] == GEN_NONFINITE) {
                stop_row(st, done, len, b, t - 1);
                ndone++;
                continue;
            }
            if (lp && !(t == lens[b] && g->max_new == 0)) { /* max_new 0: nothing follows the prompt */
                lp->lp[b][t - 1] = lpv[b];
                if (top) {
                    memcpy(lp->top_ids[b] + (size_t)(t - 1) * top, tids + (size_t)b * top, (size_t)top * sizeof(int32_t));
                    memcpy(lp->top_lp[b] + (size_t)(t - 1) * top, tlps + (size_t)b * top, (size_t)top * sizeof(float));
                }
            }
            if (t < lens[b]) continue; /* still inside its prompt */
            if (g->max_new == 0) { /* scored, nothing to generate */
                done[b] = 1, ndone++;
                continue;
            }
            tokens[(size_t)b * cap + t] = next[b];
            len[b] = t + 1;
            st->generated++;
            if (stream && ps->world_rank == 0) stream(user, b, next[b]);
            if (next[b] == g->eod || len[b] - lens[b] >= g->max_new ||
                (g->stop && g->stop(g->stop_user, b, tokens + (size_t)b * cap + lens[b], len[b] - lens[b])))
                done[b] = 1, ndone++;
        }
    }
    st->decode_s = td_now() - t0 - st->prefill_s;
    for (int b = 0; b < B; b++) {
        memcpy(out[b], tokens + (size_t)b * cap, (size_t)len[b] * sizeof(int32_t));
        out_len[b] = len[b];
    }
    gpt_kv_free(m, c);
    free(tokens), free(next), free(ids), free(done), free(len), free(logits), free(lpv), free(rows), free(tids), free(tlps);
    return st->nonfinite;
}
