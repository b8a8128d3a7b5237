/* The trainer's BERT batches: see include/train/trident/bert_source.h. */
#include "trident/bert_source.h"

#include <stdlib.h>
#include <string.h>

#include "trident/bert_dataset.h"
#include "trident/check.h"
#include "trident/tokenizer.h"

struct bert_source {
    bertds *ds;
    int seq, mbs, num_micro, dp, dp_rank;
    int64_t consumed;
    /* the iteration's micro-batches on this rank: num_micro * mbs rows */
    int32_t *tokens, *types, *labels, *lengths, *sop;
    float mlm_weight, sop_weight;
};

bert_source *bert_source_open(const gptds_config *dc, const td_args *a, const gpt_config *c, int mbs, int num_micro,
                              int dp, int dp_rank, comm *world)
{
    char err[512];
    tok_spec spec = {a->tokenizer_type, a->vocab_file, a->merge_file, a->tokenizer_model};
    tok_tokenizer *tok = tok_open(&spec, err, sizeof err);
    if (!tok) td_fatal(1, "%s", err);
    bertds_vocab bv;
    if (bertds_vocab_get(tok, &bv, err, sizeof err)) td_fatal(2, "--model bert: %s", err);
    TD_ASSERT(dc->n == 1 && !dc->weights); /* trainer_validate */
    bertds_config bc = {.path = dc->paths[0],
                        .split = dc->split,
                        .cache_dir = dc->cache_dir,
                        .no_cache = dc->no_cache,
                        .seq_length = c->seq,
                        .seed = dc->seed,
                        .short_seq_prob = a->short_seq_prob,
                        .masked_lm_prob = a->mask_prob,
                        .binary_head = c->binary_head,
                        .vocab_size = tok_vocab_size(tok),
                        .vocab_source = dc->vocab_source,
                        .cls_id = bv.cls,
                        .sep_id = bv.sep,
                        .mask_id = bv.mask,
                        .pad_id = bv.pad,
                        .subword = bv.subword};
    memcpy(bc.num_samples, dc->num_samples, sizeof bc.num_samples);
    bert_source *s = td_xcalloc(1, sizeof *s);
    int rank = comm_rank(world);
    if (rank == 0) s->ds = bertds_open(&bc);
    comm_barrier(world);
    if (rank != 0) s->ds = bertds_open(&bc);
    free(bv.subword);
    tok_free(tok);
    s->seq = c->seq, s->mbs = mbs, s->num_micro = num_micro, s->dp = dp, s->dp_rank = dp_rank;
    size_t rows = (size_t)num_micro * mbs, n = rows * (size_t)c->seq;
    s->tokens = td_xmalloc(n * sizeof(int32_t));
    s->types = td_xmalloc(n * sizeof(int32_t));
    s->labels = td_xmalloc(n * sizeof(int32_t));
    s->lengths = td_xmalloc(rows * sizeof(int32_t));
    s->sop = td_xmalloc(rows * sizeof(int32_t));
    return s;
}

void bert_source_close(bert_source *s)
{
    if (!s) return;
    bertds_close(s->ds);
    free(s->tokens), free(s->types), free(s->labels), free(s->lengths), free(s->sop);
    free(s);
}

int64_t bert_source_num_samples(const bert_source *s, gptds_split split) { return bertds_num_samples(s->ds, split); }

void bert_source_begin(bert_source *s, gptds_split split, int64_t consumed, const comm *dp_group)
{
    s->consumed = consumed;
    int64_t masked = 0;
    for (int m = 0; m < s->num_micro; m++) {
        bertds_sample rows[s->mbs];
        for (int j = 0; j < s->mbs; j++) {
            size_t r = (size_t)m * s->mbs + j, off = r * (size_t)s->seq;
            rows[j] = (bertds_sample){s->tokens + off, s->types + off, s->labels + off, 0, 0};
        }
        bertds_micro_batch(s->ds, split, consumed, m, s->mbs, s->dp, s->dp_rank, rows);
        for (int j = 0; j < s->mbs; j++) {
            size_t r = (size_t)m * s->mbs + j;
            s->lengths[r] = rows[j].length;
            s->sop[r] = rows[j].is_random;
            for (int t = 0; t < s->seq; t++) masked += rows[j].labels[t] >= 0;
        }
    }
    comm_allreduce(dp_group, &masked, 1, COMM_I64, COMM_SUM);
    s->mlm_weight = masked ? (float)(1.0 / (double)masked) : 0.0f;
    s->sop_weight = (float)(1.0 / ((double)s->num_micro * s->mbs * s->dp));
}

void bert_source_batch(void *user, int m, int32_t *ids, int32_t *targets, gpt_bert_batch *bert, int64_t *sample)
{
    bert_source *s = user;
    size_t r0 = (size_t)m * s->mbs, n = (size_t)s->mbs * s->seq;
    memcpy(ids, s->tokens + r0 * s->seq, n * sizeof(int32_t));
    memcpy(targets, s->labels + r0 * s->seq, n * sizeof(int32_t));
    memcpy((int32_t *)bert->types, s->types + r0 * s->seq, n * sizeof(int32_t));
    memcpy((int32_t *)bert->lengths, s->lengths + r0, (size_t)s->mbs * sizeof(int32_t));
    memcpy((int32_t *)bert->sop, s->sop + r0, (size_t)s->mbs * sizeof(int32_t));
    bert->mlm_weight = s->mlm_weight;
    bert->sop_weight = s->sop_weight;
    for (int j = 0; j < s->mbs; j++)
        sample[j] = s->consumed + (int64_t)m * s->mbs * s->dp + (int64_t)s->dp_rank * s->mbs + j;
}
