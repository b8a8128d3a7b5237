/* Memory prediction: see include/train/trident/memory.h. The activations and the backward's scratch
 * are the model's own layout description (gpt_layout_bytes_of: the bytes the stage's carving
 * asks for, from the same functions) and its tensor table (gpt_stage_numel), so the prediction
 * cannot drift from what gpt_create builds. */
#include "trident/memory.h"

#include "trident/gpt.h"

#include <math.h>

#include <stdio.h>
#include <string.h>

#define MIB (1024.0 * 1024.0)

double mem_chunk_params(const gpt_config *c, int tp, const mem_chunk *k)
{
    return (double)gpt_stage_numel(c, tp, 1, k->layer0, k->nlayers, k->first, k->last); /* the model's own table */
}

/* The layouts in bytes of the model's layer kinds, as the model carves them (gpt_layout_bytes_of:
 * the blocks' and the head's own descriptions), for this layout: a dense layer's and a MoE
 * layer's (a mixture of experts may mix dense layers in, --moe-layer-freq), each counted once,
 * only for the kinds the model has. */
typedef struct {
    gpt_layout_bytes dense, moe;
} kind_layouts;

static int ep_of(const mem_layout *l) { return l->ep > 1 ? l->ep : 1; }
static int cp_of(const mem_layout *l) { return l->cp > 1 ? l->cp : 1; }
/* Positions of a sample on a rank: seq / cp. */
static double seq_of(const mem_layout *l) { return (double)l->cfg.seq / cp_of(l); }

static kind_layouts layouts_of(const mem_layout *l)
{
    kind_layouts k;
    memset(&k, 0, sizeof k);
    int dense = -1, moe = -1;
    for (int i = 0; i < l->cfg.num_layers && (dense < 0 || moe < 0); i++) {
        if (gpt_moe_layer(&l->cfg, i) && moe < 0) moe = i;
        if (!gpt_moe_layer(&l->cfg, i) && dense < 0) dense = i;
    }
    if (dense >= 0 || moe < 0)
        gpt_layout_bytes_of(&l->cfg, l->tp, cp_of(l), l->cp_comm, ep_of(l), l->sequence_parallel, l->mbs, l->lowp,
                            dense < 0 ? 0 : dense, &k.dense);
    if (moe >= 0)
        gpt_layout_bytes_of(&l->cfg, l->tp, cp_of(l), l->cp_comm, ep_of(l), l->sequence_parallel, l->mbs, l->lowp, moe,
                            &k.moe);
    return k;
}

/* The layout of global layer `layer`'s kind. */
static const gpt_layout_bytes *kind_of(const kind_layouts *k, const mem_layout *l, int layer)
{
    return gpt_moe_layer(&l->cfg, layer) ? &k->moe : &k->dense;
}

/* Full recomputation's group of the chunk's layer j (0-based in the chunk): its position in the
 * group, or -1 when the layer keeps its activations (recompute.c's full_group). */
static int full_position(const mem_layout *l, int j)
{
    int n = l->recompute_num_layers > 0 ? l->recompute_num_layers : 1;
    if (l->recompute_block) return j < n ? 0 : -1;
    return j % n; /* uniform: every layer, in groups of n from the chunk's first */
}

double mem_chunk_acts(const mem_layout *l, const mem_chunk *k)
{
    const gpt_config *c = &l->cfg;
    kind_layouts kl = layouts_of(l);
    const gpt_layout_bytes *b = kind_of(&kl, l, k->layer0); /* what every layer kind has alike */
    double BT = l->mbs * seq_of(l), h = c->hidden, sp = l->sequence_parallel ? l->tp : 1;
    double inputs = b->inputs + (k->first ? b->types : 0), layers = 0;
    int n = l->recompute_num_layers > 0 ? l->recompute_num_layers : 1;
    for (int j = 0; j < k->nlayers; j++) {
        const gpt_layout_bytes *lb = kind_of(&kl, l, k->layer0 + j);
        if (l->recompute == MEM_RECOMPUTE_FULL && full_position(l, j) >= 0) {
            /* a recomputed group keeps the output of its last layer only (the next one's input) */
            int group_end = l->recompute_block || j % n == n - 1 || j == k->nlayers - 1;
            layers += group_end ? 4.0 * BT / sp * h : 0;
        } else {
            layers += l->recompute == MEM_RECOMPUTE_SELECTIVE ? lb->layer_selective : lb->layer;
        }
    }
    return inputs + layers + (k->last ? b->head : 0);
}

/* The backward's gradients (shared by the micro-batches of a chunk: one scratch for each block
 * kind among its layers) and its host staging, and with full recomputation one group's re-run
 * activations (each position in a group as large as its largest layer), with selective what it
 * redoes. */
static double chunk_workspace(const mem_layout *l, const mem_chunk *k)
{
    kind_layouts kl = layouts_of(l);
    const gpt_layout_bytes *b = kind_of(&kl, l, k->layer0);
    int dense = 0, moe = 0; /* the MLP kinds among the chunk's layers */
    for (int j = 0; j < k->nlayers; j++) {
        if (gpt_moe_layer(&l->cfg, k->layer0 + j)) moe = 1;
        else dense = 1;
    }
    double bytes = b->scratch - b->scratch_mlp + (dense ? kl.dense.scratch_mlp : 0) + (moe ? kl.moe.scratch_mlp : 0);
    if (k->nlayers == 0) bytes = b->scratch; /* as gpt_layout_bytes_of counts a stage of layer0's kinds */
    bytes += b->host;
    if (k->last) bytes += b->scratch_head + b->host_head;
    if (l->recompute == MEM_RECOMPUTE_FULL) {
        int n = l->recompute_num_layers > 0 ? l->recompute_num_layers : 1;
        int npos = l->recompute_block ? (k->nlayers > 0) : n < k->nlayers ? n : k->nlayers;
        for (int p = 0; p < npos; p++) {
            double most = 0;
            for (int j = 0; j < k->nlayers; j++)
                if (full_position(l, j) == p && kind_of(&kl, l, k->layer0 + j)->layer > most)
                    most = kind_of(&kl, l, k->layer0 + j)->layer;
            bytes += most;
        }
    } else if (l->recompute == MEM_RECOMPUTE_SELECTIVE && k->nlayers > 0) {
        bytes += b->layer_redo;
    }
    return bytes;
}

void mem_predict(const mem_layout *l, mem_prediction *p)
{
    *p = (mem_prediction){0};
    double numel = 0, experts = 0; /* experts: this rank's (split over ep), of numel */
    double trained = 0;            /* of numel, the trained (LoRA: the adapters; the base has no grads) */
    for (int i = 0; i < l->nchunks; i++) {
        const mem_chunk *k = &l->chunk[i];
        double all = mem_chunk_params(&l->cfg, l->tp, k);
        if (ep_of(l) > 1) { /* this rank's experts only: numel(ep) = rest + X / ep, X all the experts' */
            double here = (double)gpt_stage_numel(&l->cfg, l->tp, ep_of(l), k->layer0, k->nlayers, k->first, k->last);
            experts += (all - here) / (ep_of(l) - 1);
            all = here;
        }
        numel += all;
        trained += gpt_lora(&l->cfg) ? (double)gpt_stage_trained_numel(&l->cfg, l->tp, 1, k->layer0, k->nlayers,
                                                                        k->first, k->last)
                                     : all;
        double a = mem_chunk_acts(l, k);
        p->acts_micro += a;
        p->acts += a * k->inflight;
        p->workspace += chunk_workspace(l, k);
    }
    p->workspace += 4.0 * l->mbs * seq_of(l) * l->cfg.hidden; /* the received output gradient */
    p->workspace += l->lib_workspace;
    if (l->nchunks > 1 || !l->chunk[0].first || !l->chunk[0].last) /* pp > 1: the receives posted ahead */
        p->workspace += 2 * 4.0 * l->mbs * seq_of(l) * l->cfg.hidden;
    p->params = 4.0 * numel;
    p->grads = 4.0 * trained;
    /* the distributed optimizer also reduce-scatters the grads into a buffer of its shard */
    /* (the experts' shards are over the expert-data-parallel group, dp x cp / ep: expert parallelism
     * is carved out of dp x cp; the others over dp x cp) */
    double dpcp = (double)l->dp * cp_of(l);
    p->optimizer = l->distributed_optimizer ? 12.0 * ((trained - experts) / dpcp + experts / (dpcp / ep_of(l)))
                                            : 8.0 * trained;
    if (dpcp > 1) { /* Open MPI's non-blocking reductions copy a bucket (measured: about one) */
        double bucket = l->bucket_elems > 0 && l->bucket_elems < trained ? l->bucket_elems : trained;
        p->comm = 4.0 * bucket;
    }
    /* a tied word embedding split over the first and last stage: its grads' sum over the two is
     * a non-blocking all-reduce, which Open MPI stages through a copy (measured at pp 8; none frozen) */
    for (int i = 0; i < l->nchunks; i++)
        if (l->chunk[i].first != l->chunk[i].last && !l->cfg.untied && !gpt_lora(&l->cfg))
            p->comm += 4.0 * l->cfg.padded_vocab / l->tp * l->cfg.hidden;
    if (l->lowp) {
        const gpt_config *c = &l->cfg;
        double BT = l->mbs * seq_of(l), V = (double)c->padded_vocab / l->tp;
        double widest_in = c->hidden > c->ffn / l->tp ? c->hidden : c->ffn / l->tp;
        int head = 0;
        for (int i = 0; i < l->nchunks; i++) head |= l->chunk[i].last;
        double fc1 = (double)gpt_fc_blocks(c) * c->ffn / l->tp, qkv = (gpt_q_width(c) + 2.0 * gpt_kv_width(c)) / l->tp;
        double widest_out = fc1 > qkv ? fc1 : qkv; /* the widest GEMM output: fc1's, qkv's or the logits */
        if (head && V > widest_out) widest_out = V;
        /* the copies and one output gradient rounded (mixed.c's scratch: at most a slice of
         * be_lowp_chunk_bytes of rows at a time); under sequence parallelism also a gathered norm output */
        double slice = l->lowp_chunk_bytes > 0 ? l->lowp_chunk_bytes : 64.0 * MIB;
        double dout = fmin(2.0 * BT * widest_out, fmax(slice, 2.0 * 256 * widest_out));
        p->lowp = 2.0 * numel + dout;
        if (l->sequence_parallel) p->lowp += 2.0 * BT * c->hidden;
        if (l->lowp_widened) /* and their fp32 widenings (cpu's per-thread scratch), the largest weight's too */
            p->lowp += 4.0 * BT * widest_in + 2.0 * dout + 4.0 * (head ? V : fc1) * c->hidden;
    }
    p->total = p->params + p->grads + p->optimizer + p->acts + p->workspace + p->lowp + p->comm;
}

double mem_cp_exchange_bytes(const mem_layout *l)
{
    if (cp_of(l) <= 1) return 0;
    gpt_config local = l->cfg;
    local.seq = (int)seq_of(l);
    gpt_layout_bytes with, without;
    gpt_layout_bytes_of(&l->cfg, l->tp, cp_of(l), l->cp_comm, ep_of(l), l->sequence_parallel, l->mbs, l->lowp, 0, &with);
    gpt_layout_bytes_of(&local, l->tp, 1, l->cp_comm, ep_of(l), l->sequence_parallel, l->mbs, l->lowp, 0, &without);
    return with.scratch - without.scratch;
}

void mem_describe(const mem_prediction *p, const mem_layout *l, char *out, size_t len)
{
    int inflight = 0;
    for (int i = 0; i < l->nchunks; i++) inflight += l->chunk[i].inflight;
    char lp[64] = "";
    if (l->lowp) snprintf(lp, sizeof lp, "low-precision copies %.1f + ", p->lowp / MIB);
    snprintf(out, len,
             "params %.1f + grads %.1f + optimizer %.1f%s + activations %.1f (%.1f per micro-batch, %d in flight) + "
             "workspace %.1f + %scommunication %.1f = %.1f MiB",
             p->params / MIB, p->grads / MIB, p->optimizer / MIB, l->distributed_optimizer ? " (1/dp)" : "",
             p->acts / MIB, p->acts_micro / MIB, inflight, p->workspace / MIB, lp, p->comm / MIB, p->total / MIB);
}
