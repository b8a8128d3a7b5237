/* The trainer's BERT batches: see include/train/trident/bert_source.h. */
#include "trident/bert_source.h"

#include "trident/batch_source.h"

#include <stdlib.h>
#include <string.h>

#include "trident/bert_dataset.h"
#include "shared_fs.h"
#include "trident/check.h"
#include "trident/tokenizer.h"

struct bert_source {
    bertds *ds;
    int seq, mbs, num_micro, dp, dp_rank;
    int64_t consumed;
    /* the iteration's micro-batches on this rank: num_micro * mbs rows */
    int32_t *tokens, *types, *labels, *lengths, *sop;
    int64_t *sample;
    float mlm_weight, sop_weight;
};

struct open_bert {
    const bertds_config *bc;
    bertds *ds;
};

static void open_bert(void *ctx)
{
    struct open_bert *o = ctx;
    o->ds = bertds_open(o->bc);
}

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
    struct open_bert o = {&bc, NULL};
    sfs_open_data(world, dc, open_bert, &o); /* each cache folder built by one rank, then read by the others */
    s->ds = o.ds;
    free(bv.subword);
    tok_free(tok);
    s->seq = c->seq, s->mbs = mbs, s->num_micro = num_micro, s->dp = dp, s->dp_rank = dp_rank;
    size_t rows = (size_t)num_micro * mbs, n = rows * (size_t)c->seq;
    s->tokens = td_xmalloc(n * sizeof(int32_t));
    s->types = td_xmalloc(n * sizeof(int32_t));
    s->labels = td_xmalloc(n * sizeof(int32_t));
    s->lengths = td_xmalloc(rows * sizeof(int32_t));
    s->sop = td_xmalloc(rows * sizeof(int32_t));
    s->sample = td_xmalloc(rows * sizeof(int64_t));
    return s;
}

void bert_source_close(bert_source *s)
{
    if (!s) return;
    bertds_close(s->ds);
    free(s->tokens), free(s->types), free(s->labels), free(s->lengths), free(s->sop), free(s->sample);
    free(s);
}

static int64_t num_samples(const void *self, gptds_split split)
{
    return bertds_num_samples(((const bert_source *)self)->ds, split);
}

/* Builds the iteration's micro-batches, then the weights: 1 / masked tokens and 1 / samples of
 * the global batch (one all-reduce over dp_group). */
static void begin(void *self, gptds_split split, int64_t consumed, const comm *dp_group, gpt_batch *micro)
{
    bert_source *s = self;
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
            s->sample[r] = batch_sample_index(consumed, m, j, s->mbs, s->dp, s->dp_rank);
            for (int t = 0; t < s->seq; t++) masked += rows[j].labels[t] >= 0;
        }
    }
    comm_allreduce(dp_group, &masked, 1, COMM_I64, COMM_SUM);
    s->mlm_weight = masked ? (float)(1.0 / (double)masked) : 0.0f;
    s->sop_weight = (float)(1.0 / ((double)s->num_micro * s->mbs * s->dp));
    for (int m = 0; m < s->num_micro; m++) {
        size_t r0 = (size_t)m * s->mbs, t0 = r0 * s->seq;
        micro[m] = (gpt_batch){.B = s->mbs, .ids = s->tokens + t0, .targets = s->labels + t0, .sample = s->sample + r0,
                               .types = s->types + t0, .lengths = s->lengths + r0, .labels = s->sop + r0,
                               .token_weight = s->mlm_weight, .sample_weight = s->sop_weight};
    }
}

static void close_source(void *self) { bert_source_close(self); }

const batch_source_ops bert_source_ops = {"BERT sentence pairs", begin, num_samples, close_source, NULL};
