/* GPT's batch source: windows of seq + 1 tokens of the GPT dataset, ids the first seq and
 * targets the next seq, the global sample index of each row; with packed documents each row's
 * document starts, positions and loss mask from its ids' EOD tokens. See include/train/trident/gpt_source.h. */
#include "trident/gpt_source.h"

#include <stdlib.h>
#include <string.h>

#include "shared_fs.h"
#include "trident/check.h"

typedef struct {
    gptds *ds;
    int mbs, dp, dp_rank, seq, num_micro;
    int32_t *window;           /* (mbs, seq + 1) */
    int32_t *ids, *targets;    /* (num_micro, mbs, seq) */
    int64_t *sample;           /* (num_micro, mbs) */
    gpt_packing pk;            /* packed documents (all 0: none) */
    int32_t *seg, *pos;        /* (num_micro, mbs, seq) with reset_attention_mask, reset_position_ids */
    float *mask;               /* (num_micro, mbs, seq) with eod_mask_loss */
} gpt_source;

int gpt_packing_row(const int32_t *ids, int S, int32_t eod, int32_t *seg, int32_t *pos, float *mask)
{
    int start = 0, counted = 0;
    for (int t = 0; t < S; t++) {
        if (seg) seg[t] = start;
        if (pos) pos[t] = t - start;
        if (mask) mask[t] = ids[t] == eod ? 0.0f : 1.0f;
        counted += ids[t] != eod;
        if (ids[t] == eod) start = t + 1; /* the next token begins a document */
    }
    return counted;
}

static void gpt_begin(void *self, gptds_split split, int64_t consumed, const comm *dp_group, gpt_batch *micro)
{
    gpt_source *g = self;
    int S = g->seq;
    int64_t counted = 0;
    for (int m = 0; m < g->num_micro; m++) {
        gptds_micro_batch(g->ds, split, consumed, m, g->mbs, g->dp, g->dp_rank, g->window);
        size_t r0 = (size_t)m * g->mbs;
        for (int j = 0; j < g->mbs; j++) {
            const int32_t *row = g->window + (size_t)j * (S + 1);
            memcpy(g->ids + (r0 + j) * S, row, (size_t)S * sizeof(int32_t));
            memcpy(g->targets + (r0 + j) * S, row + 1, (size_t)S * sizeof(int32_t));
            g->sample[r0 + j] = batch_sample_index(consumed, m, j, g->mbs, g->dp, g->dp_rank);
            if (gpt_packing_on(&g->pk)) {
                size_t o = (r0 + j) * S;
                counted += gpt_packing_row(row, S, g->pk.eod, g->seg ? g->seg + o : NULL, g->pos ? g->pos + o : NULL,
                                           g->mask ? g->mask + o : NULL);
            }
        }
        micro[m] = (gpt_batch){.B = g->mbs, .ids = g->ids + r0 * S, .targets = g->targets + r0 * S,
                               .sample = g->sample + r0};
        if (g->seg) micro[m].seg = g->seg + r0 * S;
        if (g->pos) micro[m].pos = g->pos + r0 * S;
        if (g->mask) micro[m].loss_mask = g->mask + r0 * S;
    }
    if (!g->mask) return;
    /* the loss is token_weight * sum(mask * loss) over the micro-batches and data-parallel ranks,
     * then divided by the head's divisor (every token of the global batch): the weight makes it
     * the mean over the counted tokens */
    comm_allreduce(dp_group, &counted, 1, COMM_I64, COMM_SUM);
    double all = (double)g->num_micro * g->mbs * g->dp * S;
    float w = counted ? (float)(all / (double)counted) : 0.0f;
    for (int m = 0; m < g->num_micro; m++) micro[m].token_weight = w;
}

static int64_t gpt_num_samples(const void *self, gptds_split split)
{
    return gptds_num_samples(((const gpt_source *)self)->ds, split);
}

static void gpt_close(void *self)
{
    gpt_source *g = self;
    gptds_close(g->ds);
    free(g->window), free(g->ids), free(g->targets), free(g->sample);
    free(g->seg), free(g->pos), free(g->mask);
    free(g);
}

const batch_source_ops gpt_source_ops = {"GPT windows", gpt_begin, gpt_num_samples, gpt_close, NULL};

struct open_gpt {
    const gptds_config *dc;
    gptds *ds;
};

static void open_gpt(void *ctx)
{
    struct open_gpt *o = ctx;
    o->ds = gptds_open(o->dc);
}

void *gpt_source_open(const gptds_config *dc, const gpt_config *c, const gpt_packing *pk, int mbs, int num_micro,
                      int dp, int dp_rank, comm *world)
{
    gpt_source *g = td_xcalloc(1, sizeof *g);
    struct open_gpt o = {dc, NULL};
    sfs_open_data(world, dc, open_gpt, &o); /* each cache folder built by one rank, then read by the others */
    g->ds = o.ds;
    g->mbs = mbs, g->dp = dp, g->dp_rank = dp_rank, g->seq = c->seq, g->num_micro = num_micro;
    size_t rows = (size_t)num_micro * mbs;
    g->window = td_xmalloc((size_t)mbs * (c->seq + 1) * sizeof(int32_t));
    g->ids = td_xmalloc(rows * c->seq * sizeof(int32_t));
    g->targets = td_xmalloc(rows * c->seq * sizeof(int32_t));
    g->sample = td_xmalloc(rows * sizeof(int64_t));
    if (gpt_packing_on(pk)) {
        g->pk = *pk;
        size_t n = rows * c->seq;
        if (pk->reset_attention_mask) g->seg = td_xmalloc(n * sizeof(int32_t));
        if (pk->reset_position_ids) g->pos = td_xmalloc(n * sizeof(int32_t));
        if (pk->eod_mask_loss) g->mask = td_xmalloc(n * sizeof(float));
    }
    return g;
}

