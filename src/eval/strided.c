/* Strided perplexity of a checkpoint (windows of a run of documents, each token scored once),
 * over the rows of forward.c: see include/eval/trident/eval.h and docs/eval.md. */
#include "trident/eval.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "trident/check.h"
#include "trident/comm.h"
#include "trident/gpt_dataset.h"

/* The concatenated tokens of documents [d0, d1): cum[i] tokens precede document d0 + i. */
typedef struct {
    const dsr_reader *d;
    int64_t d0, n;   /* first document, documents */
    int64_t *cum;    /* (n + 1) */
} stream;

static void stream_open(stream *s, const dsr_reader *d, int64_t d0, int64_t d1)
{
    s->d = d;
    s->d0 = d0;
    s->n = d1 - d0;
    s->cum = td_xmalloc((size_t)(s->n + 1) * sizeof(int64_t));
    s->cum[0] = 0;
    for (int64_t i = 0; i < s->n; i++) s->cum[i + 1] = s->cum[i] + dsr_seq_len(d, d0 + i);
}

/* out (len) = tokens [pos, pos + len) of the stream. */
static void stream_read(const stream *s, int64_t pos, int64_t len, int32_t *out)
{
    int64_t lo = 0, hi = s->n; /* the last document starting at or before pos */
    while (hi - lo > 1) {
        int64_t mid = (lo + hi) / 2;
        if (s->cum[mid] <= pos) lo = mid;
        else hi = mid;
    }
    for (int64_t doc = lo; len > 0; doc++) {
        TD_ASSERT(doc < s->n);
        int64_t off = pos - s->cum[doc], avail = s->cum[doc + 1] - pos;
        int64_t k = avail < len ? avail : len;
        if (k > 0) dsr_read(s->d, s->d0 + doc, off, k, out);
        out += k, pos += k, len -= k;
    }
}

void ev_score(gpt_model *m, const ps_state *ps, const dsr_reader *d, int64_t doc_begin, int64_t doc_end, int K,
              int mbs, ev_result *out)
{
    const int S = m->cfg.seq;
    TD_ASSERT(K >= 1 && K <= S && mbs >= 1 && mbs <= m->mbs);
    stream s;
    stream_open(&s, d, doc_begin, doc_end);
    int64_t ntok = s.cum[s.n], nwin = ev_num_windows(ntok, S, K);
    memset(out, 0, sizeof *out);
    out->documents = s.n;
    out->doc_tokens = ntok;
    out->windows = nwin;
    if (nwin == 0) {
        if (ps->world_rank == 0)
            td_fatal(1, "the chosen documents hold %lld token%s; a window needs --seq-length + 1 = %d", (long long)ntok, td_plural(ntok),
                     S + 1);
        comm_barrier(ps->world);
    }
    size_t BT = (size_t)mbs * S;
    int32_t *row = td_xmalloc((size_t)(S + 1) * sizeof(int32_t));
    int32_t *ids = td_xmalloc(BT * sizeof(int32_t)), *targets = td_xmalloc(BT * sizeof(int32_t));
    int64_t *win = td_xmalloc((size_t)mbs * sizeof(int64_t));
    float *losses = td_xmalloc(BT * sizeof(float));
    int64_t per_step = (int64_t)mbs * ps->dp, steps = (nwin + per_step - 1) / per_step;
    double sum[2] = {0, 0}; /* loss, tokens */
    for (int64_t step = 0; step < steps; step++) {
        for (int b = 0; b < mbs; b++) {
            int64_t w = step * per_step + (int64_t)ps->dp_rank * mbs + b;
            win[b] = w < nwin ? w : -1; /* -1: padding, not scored */
            stream_read(&s, (w < nwin ? w : 0) * K, S + 1, row);
            memcpy(ids + (size_t)b * S, row, (size_t)S * sizeof(int32_t));
            memcpy(targets + (size_t)b * S, row + 1, (size_t)S * sizeof(int32_t));
        }
        ev_forward(m, ps, ids, targets, mbs, losses, NULL);
        if (ps->tp_rank == 0 && ps->pp_rank == ps->pp - 1) /* one rank a replica adds up */
            for (int b = 0; b < mbs; b++) {
                if (win[b] < 0) continue;
                int first = win[b] == 0 ? 0 : S - K; /* later windows score their last K targets */
                for (int t = first; t < S; t++) sum[0] += losses[(size_t)b * S + t];
                sum[1] += S - first;
            }
    }
    comm_allreduce(ps->world, sum, 2, COMM_F64, COMM_SUM);
    out->tokens = (int64_t)sum[1];
    TD_ASSERT(out->tokens == S + (nwin - 1) * K);
    out->loss = sum[0] / sum[1];
    out->perplexity = exp(out->loss);
    free(row);
    free(ids);
    free(targets);
    free(win);
    free(losses);
    free(s.cum);
}

dsr_reader *ev_open_dataset(comm *world, const char *path, int vocab, const char *vocab_source,
                            const char *cache_dir)
{
    char err[4096] = "";
    dsr_reader *d = dsr_open(path, err, sizeof err);
    if (!d) td_fatal(1, "%s", err);
    if (comm_rank(world) == 0) gptds_check_token_ids(d, vocab, vocab_source, cache_dir, 0);
    comm_barrier(world);
    if (comm_rank(world) != 0) gptds_check_token_ids(d, vocab, vocab_source, cache_dir, 0);
    return d;
}
