/* The layer spec (after Megatron-Core's get_gpt_layer_local_spec): which block kind fills each
 * slot of a layer for a config and the layer's index (the MLP slot: the MoE block in the layers
 * --moe-layer-freq names, the dense MLP in the others), in one table. A new kind is a row here
 * and its own file. */
#include "model_impl.h"

#include <stdlib.h>

#include "trident/check.h"

/* Whether a kind fits global layer `layer` (-1: a norm outside the layers) of a config. */
static int layernorm(const gpt_config *c, int layer) { return (void)layer, c->norm == GPT_NORM_LAYERNORM; }
static int rmsnorm(const gpt_config *c, int layer) { return (void)layer, c->norm == GPT_NORM_RMSNORM; }
static int always(const gpt_config *c, int layer) { return (void)c, (void)layer, 1; }
/* the MLP slot: the MoE block in the layers --moe-layer-freq names, the dense MLP in the others */
static int dense(const gpt_config *c, int layer) { return !gpt_moe_layer(c, layer); }
static int moe(const gpt_config *c, int layer) { return gpt_moe_layer(c, layer); }

/* Slot -1: a norm anywhere (the layers' two, the final norm, a head's). */
#define ANY_NORM (-1)

static const struct {
    int slot;
    int (*fits)(const gpt_config *c, int layer);
    const block_ops *ops;
} SPEC[] = {
    {ANY_NORM, layernorm, &layernorm_ops},
    {ANY_NORM, rmsnorm, &rmsnorm_ops},
    {GPT_SLOT_ATTENTION, always, &attention_ops}, /* multi-head or grouped-query, rotary or not: the config's */
    {GPT_SLOT_MLP, dense, &mlp_ops}, /* its activation the config's (act, glu) */
    {GPT_SLOT_MLP, moe, &moe_ops},   /* its experts' activation the config's too */
};

const block_ops *layer_spec_ops(const gpt_config *c, int layer, int slot)
{
    int want = slot == GPT_SLOT_INPUT_NORM || slot == GPT_SLOT_PRE_MLP_NORM ? ANY_NORM : slot;
    for (size_t i = 0; i < sizeof SPEC / sizeof *SPEC; i++)
        if (SPEC[i].slot == want && SPEC[i].fits(c, layer)) return SPEC[i].ops;
    td_die(__FILE__, __LINE__, "layer_spec_ops", "add a row for it to SPEC in src/model/layer_spec.c",
           "no block kind fills slot %d of layer %d for this config", slot, layer);
}

const block_ops *layer_spec_norm(const gpt_config *c) { return layer_spec_ops(c, -1, GPT_SLOT_INPUT_NORM); }

void block_slot_init(block_slot *s, const block_ops *ops)
{
    s->ops = ops;
    s->p = td_xcalloc(1, ops->params_size);
    s->g = td_xcalloc(1, ops->params_size);
    s->t0 = s->t1 = 0;
}

void block_slot_free(block_slot *s)
{
    free(s->p);
    free(s->g);
    s->p = s->g = NULL;
}

void block_slot_tensors(block_slot *s, table_builder *tb, int layer, int stream0, const char *prefix)
{
    s->t0 = tb->n;
    s->ops->tensors(tb, layer, stream0, prefix, s->p, s->g);
    s->t1 = tb->n;
}

/* The heads, by what the config's family trains: a masked LM with sentence order (an encoder
 * with token types), or the next-token LM. */
const head_ops *model_head_of(const gpt_config *c)
{
    return gpt_masked_lm(c) ? &mlm_sop_head_ops : &lm_head_ops;
}
