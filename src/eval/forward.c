/* The rows every evaluation scores: windows of a token stream (ev_num_windows) and one batch of
 * rows through the pipeline stage of this rank with each target's loss and whether it was the
 * most likely token (ev_forward). Strided perplexity (strided.c) and the zero-shot tasks
 * (tasks.c) both build on it and on nothing of each other. See include/eval/trident/eval.h. */
#include "trident/eval.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "trident/check.h"
#include "trident/comm.h"
#include "trident/pipeline.h"

int64_t ev_num_windows(int64_t n, int S, int K)
{
    return n <= S ? 0 : (n - S - 1) / K + 1;
}

void ev_forward(gpt_model *m, const ps_state *ps, const int32_t *ids, const int32_t *targets, int B, float *loss,
                uint8_t *correct)
{
    const int S = m->cfg.seq, h = m->cfg.hidden;
    size_t BT = (size_t)B * S;
    int64_t *sample = td_xcalloc((size_t)B, sizeof(int64_t));
    gpt_acts *a = gpt_acts_acquire(m);
    const float *input = NULL;
    int sg = pp_scatter_gather_applies(ps, 1); /* each tp rank sends 1/tp of the activation */
    if (!m->first) {
        pp_recv(ps, m->be, sg, gpt_acts_input(a), BT * h, ps->pp_rank - 1, 0);
        input = gpt_acts_input(a);
    }
    gpt_batch in = {.B = B, .ids = ids, .targets = targets, .sample = sample};
    const float *y = gpt_forward(m, a, &in, input, 0, NULL);
    if (!m->last) {
        comm_wait(pp_send(ps, m->be, sg, y, BT * h, ps->pp_rank + 1, 0));
    } else {
        be_memcpy(m->be, loss, gpt_acts_losses(a), BT * sizeof(float), BE_D2H);
        if (correct) { /* the argmax over the whole vocabulary: each slice's, then the best of them */
            int Vl = m->vocab_l, Vr = be_vocab_real(m->cfg.vocab, m->vstart, Vl), t = ps->tp;
            float *logits = td_xmalloc(BT * (size_t)Vl * sizeof(float));
            be_memcpy(m->be, logits, gpt_acts_logits(a), BT * (size_t)Vl * sizeof(float), BE_D2H);
            float *best = td_xmalloc(BT * sizeof(float) * (size_t)t);
            int32_t *arg = td_xmalloc(BT * sizeof(int32_t) * (size_t)t);
            for (size_t i = 0; i < BT; i++) {
                const float *row = logits + i * (size_t)Vl;
                int k = 0;
                for (int j = 1; j < Vr; j++)
                    if (row[j] > row[k]) k = j;
                best[i] = Vr > 0 ? row[k] : -INFINITY;
                arg[i] = m->vstart + k;
            }
            if (t > 1) {
                float *allb = td_xmalloc(BT * sizeof(float) * (size_t)t);
                int32_t *alla = td_xmalloc(BT * sizeof(int32_t) * (size_t)t);
                comm_allgather(ps->tp_group, best, allb, BT, COMM_F32);
                comm_allgather(ps->tp_group, arg, alla, BT, COMM_I32);
                for (size_t i = 0; i < BT; i++)
                    for (int r = 1; r < t; r++) /* ranks in vocabulary order: a tie keeps the lower id */
                        if (allb[(size_t)r * BT + i] > allb[i]) allb[i] = allb[(size_t)r * BT + i], alla[i] = alla[(size_t)r * BT + i];
                memcpy(arg, alla, BT * sizeof(int32_t));
                free(allb);
                free(alla);
            }
            for (size_t i = 0; i < BT; i++) correct[i] = arg[i] == targets[i];
            free(logits);
            free(best);
            free(arg);
        }
    }
    gpt_acts_release(m, a);
    comm_bcast(ps->pp_group, loss, BT, COMM_F32, ps->pp - 1);
    if (correct) comm_bcast(ps->pp_group, correct, BT, COMM_U8, ps->pp - 1);
    free(sample);
}
