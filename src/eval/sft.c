/* The answer-only loss of a checkpoint on SFT samples, over the rows of forward.c: see
 * include/eval/trident/eval.h. */
#include "trident/eval.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "trident/check.h"
#include "trident/comm.h"
#include "trident/sft.h"

void ev_sft(gpt_model *m, const ps_state *ps, const dsr_reader *d, const dsr_reader *mask, int64_t doc_begin,
            int64_t doc_end, int mbs, int answer_only, sft_trunc how, int32_t pad, ev_result *out)
{
    const int S = m->cfg.seq;
    TD_ASSERT(mbs >= 1 && mbs <= m->mbs);
    int64_t n = doc_end - doc_begin;
    memset(out, 0, sizeof *out);
    out->documents = n;
    size_t BT = (size_t)mbs * S;
    size_t longest = (size_t)S + 1; /* a sample is read whole, then truncated */
    for (int64_t i = doc_begin; i < doc_end; i++)
        if ((size_t)dsr_seq_len(d, i) > longest) longest = (size_t)dsr_seq_len(d, i);
    int32_t *toks = td_xmalloc(longest * sizeof(int32_t)), *am = td_xmalloc(longest * sizeof(int32_t));
    int32_t *ids = td_xmalloc(BT * sizeof(int32_t)), *targets = td_xmalloc(BT * sizeof(int32_t));
    float *mk = td_xmalloc(BT * sizeof(float)), *losses = td_xmalloc(BT * sizeof(float));
    int64_t per_step = (int64_t)mbs * ps->dp, steps = (n + per_step - 1) / per_step;
    double sum[4] = {0, 0, 0, 0}; /* loss, targets counted, samples cut, tokens */
    for (int64_t step = 0; step < steps; step++) {
        for (int b = 0; b < mbs; b++) {
            int64_t i = step * per_step + (int64_t)ps->dp_rank * mbs + b;
            int64_t doc = doc_begin + (i < n ? i : 0), len = dsr_seq_len(d, doc);
            dsr_read(d, doc, 0, len, toks);
            dsr_read(mask, doc, 0, len, am);
            int64_t k = sft_truncate(toks, am, len, S + 1, how);
            sft_row(toks, am, k, S, answer_only, pad, ids + (size_t)b * S, targets + (size_t)b * S, mk + (size_t)b * S);
            if (i >= n) memset(mk + (size_t)b * S, 0, (size_t)S * sizeof(float)); /* padding rows count nothing */
            else if (ps->tp_rank == 0 && ps->pp_rank == ps->pp - 1) sum[2] += len > S + 1, sum[3] += (double)len;
        }
        ev_forward(m, ps, ids, targets, mbs, losses, NULL);
        if (ps->tp_rank == 0 && ps->pp_rank == ps->pp - 1) /* one rank a replica adds up */
            for (size_t t = 0; t < BT; t++) sum[0] += mk[t] * (double)losses[t], sum[1] += mk[t];
    }
    comm_allreduce(ps->world, sum, 4, COMM_F64, COMM_SUM);
    out->tokens = (int64_t)sum[1];
    out->windows = (int64_t)sum[2];
    out->doc_tokens = (int64_t)sum[3];
    out->loss = sum[1] > 0 ? sum[0] / sum[1] : NAN;
    out->perplexity = exp(out->loss);
    free(toks), free(am), free(ids), free(targets), free(mk), free(losses);
}
