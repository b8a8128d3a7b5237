/* The blocks' statistics (include/model/trident/gpt.h, gpt_block_stats_*): what a block kind's
 * layers measure in the training forwards, named by the kind (block.h's block_stat), gathered
 * for the whole model's layers of that kind in order, and reported by the kind's metrics. The
 * layer's MLP slot is the one that has statistics today (the MoE block's); a model holds one
 * kind with statistics. */
#include <stdlib.h>
#include <string.h>

#include "model_impl.h"
#include "trident/check.h"

int block_stat_count(const block_ops *ops, const gpt_config *c)
{
    int n = 0;
    for (int i = 0; i < ops->nstat; i++) n += ops->stat_list[i].per_expert ? c->num_experts : 1;
    return n;
}

int block_stat_index(const block_ops *ops, const gpt_config *c, const char *name)
{
    int at = 0;
    for (int i = 0; i < ops->nstat; i++) {
        if (strcmp(ops->stat_list[i].name, name) == 0) return at;
        at += ops->stat_list[i].per_expert ? c->num_experts : 1;
    }
    return -1;
}

/* The kind of global layer `layer` when it has statistics, else NULL. */
static const block_ops *stats_kind_of(const gpt_config *c, int layer)
{
    const block_ops *o = layer_spec_ops(c, layer, GPT_SLOT_MLP);
    return o->nstat > 0 ? o : NULL;
}

/* The model's kind with statistics (NULL: none), and how many of its layers are before `layer`. */
static const block_ops *stats_kind(const gpt_config *c, int layer, int *rows_before)
{
    const block_ops *kind = NULL;
    int rows = 0;
    for (int l = 0; l < c->num_layers; l++) {
        const block_ops *o = stats_kind_of(c, l);
        if (!o) continue;
        TD_ASSERT(!kind || kind == o); /* one kind with statistics a model */
        kind = o;
        rows += l < layer;
    }
    if (rows_before) *rows_before = rows;
    return kind;
}

size_t gpt_block_stats_size(const gpt_config *c)
{
    int rows;
    const block_ops *k = stats_kind(c, c->num_layers, &rows);
    return k ? (size_t)rows * block_stat_count(k, c) : 0;
}

long gpt_block_stat_index(const gpt_config *c, int row, const char *name)
{
    int rows;
    const block_ops *k = stats_kind(c, c->num_layers, &rows);
    if (!k || row < 0 || row >= rows) return -1;
    int i = block_stat_index(k, c, name);
    return i < 0 ? -1 : (long)row * block_stat_count(k, c) + i;
}

/* gpt_forward's part, training only: the micro-batch's statistics of layer l (of the stage)
 * added into the stage's sums. */
void model_block_stats_add(gpt_model *m, const gpt_acts *a, int l)
{
    const block_ops *o = stats_kind_of(&m->cfg, m->layer0 + l);
    if (!o) return;
    int n = block_stat_count(o, &m->cfg);
    if (!m->layer_stats) m->layer_stats = td_xcalloc((size_t)m->nlayers * n, sizeof(double));
    o->stats(a->layers[l].slot[GPT_SLOT_MLP], m->layer_stats + (size_t)l * n);
}

void gpt_block_stats_take(gpt_model *m, double *sums)
{
    int row;
    const block_ops *k = stats_kind(&m->cfg, m->layer0, &row);
    if (!k || !m->layer_stats) return;
    int n = block_stat_count(k, &m->cfg);
    for (int l = 0; l < m->nlayers; l++) {
        if (!stats_kind_of(&m->cfg, m->layer0 + l)) continue;
        for (int i = 0; i < n; i++) sums[(size_t)row * n + i] += m->layer_stats[(size_t)l * n + i];
        row++;
    }
    memset(m->layer_stats, 0, (size_t)m->nlayers * n * sizeof(double));
}

void gpt_block_stats_apply(gpt_model *m, const double *sums)
{
    int row;
    const block_ops *k = stats_kind(&m->cfg, m->layer0, &row);
    if (!k || !k->stats_apply) return;
    int n = block_stat_count(k, &m->cfg);
    for (int l = 0; l < m->nlayers; l++)
        if (stats_kind_of(&m->cfg, m->layer0 + l))
            k->stats_apply(&m->cfg, m->layers[l].slot[GPT_SLOT_MLP].p, sums + (size_t)row++ * n);
}

int gpt_block_metrics(const gpt_config *c, double *sums, const gpt_stats_scope *s, gpt_metric *out, int max,
                      gpt_metric_array *arr, int *narr)
{
    int rows;
    const block_ops *k = stats_kind(c, c->num_layers, &rows);
    if (!k || !k->metrics || rows == 0) return 0;
    return k->metrics(c, sums, rows, s, out, max, arr, narr);
}
