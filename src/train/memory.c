/* Memory prediction: see include/train/trident/memory.h. Every figure is counted from the model's
 * shape the way the blocks lay their tensors and activations out (src/model/), in fp32. */
#include "trident/memory.h"

#include <math.h>

#include <stdio.h>

#define MIB (1024.0 * 1024.0)

static double norm_param_count(const gpt_config *c) { return c->norm == GPT_NORM_LAYERNORM ? 2.0 * c->hidden : c->hidden; }

double mem_chunk_params(const gpt_config *c, int tp, const mem_chunk *k)
{
    double h = c->hidden, qkv = gpt_q_width(c) + 2.0 * gpt_kv_width(c), q = gpt_q_width(c);
    double fc = (c->swiglu ? 2.0 : 1.0) * c->ffn, V = c->padded_vocab;
    double layer = 2 * norm_param_count(c) + qkv * h / tp + h * q / tp + fc * h / tp + h * c->ffn / tp;
    if (gpt_has_qkv_bias(c)) layer += qkv / tp;
    if (gpt_has_bias(c)) layer += h + fc / tp + h;
    double n = layer * k->nlayers;
    if (k->first) n += V / tp * h + (c->pos == GPT_POS_LEARNED ? (double)c->max_pos * h : 0);
    if (k->last) {
        n += norm_param_count(c);
        if (c->untied || !k->first) n += V / tp * h;
    }
    if (gpt_is_bert(c)) { /* token types; the LM head's transform and bias, the pooler and binary head */
        if (k->first) n += GPT_BERT_TOKENTYPES * h;
        if (k->last) n += h * h + h + norm_param_count(c) + V / tp + (c->binary_head ? h * h + h + 2 * h + 2 : 0);
    }
    return n;
}

/* Floats of a kept GEMM input of n elements: half under mixed precision (model_impl.h), except
 * a norm output under sequence parallelism. */
static double kept(const mem_layout *l, double n, int norm_out)
{
    return l->lowp && !(norm_out && l->sequence_parallel) ? n / 2 : n;
}

/* Floats of one norm's saved activations over `rows` tokens: its output and statistics. */
static double norm_acts(const mem_layout *l, double rows)
{
    const gpt_config *c = &l->cfg;
    return kept(l, rows * c->hidden, 1) + rows * (c->norm == GPT_NORM_LAYERNORM ? 2 : 1);
}

/* Floats one layer saves for one micro-batch of BT tokens, and (*shared) the floats a
 * recomputed layer needs only while its backward runs. */
static double layer_acts(const mem_layout *l, double BT, double *recomputed)
{
    const gpt_config *c = &l->cfg;
    double t = l->tp, h = c->hidden, q = gpt_q_width(c) / t, kv = gpt_kv_width(c) / t, f = c->ffn / t;
    double sp = l->sequence_parallel ? t : 1; /* the residual stream's tokens are divided by sp */
    double qkv = BT * (q + 2 * kv), lse = BT * c->heads / t, atty = kept(l, BT * q, 0);
    double mlp = BT * (c->swiglu ? 2 : 1) * f + kept(l, BT * f, 0);
    double all = 2 * norm_acts(l, BT / sp) + qkv + lse + atty + mlp + 2 * BT / sp * h; /* + res2 and out */
    *recomputed = all;
    /* selective: the attention core's output and lse are recomputed (one shared pair a chunk) */
    if (l->recompute == MEM_RECOMPUTE_SELECTIVE) return all - atty - lse;
    return all;
}

double mem_chunk_acts(const mem_layout *l, const mem_chunk *k)
{
    const gpt_config *c = &l->cfg;
    double BT = (double)l->mbs * c->seq, h = c->hidden, sp = l->sequence_parallel ? l->tp : 1;
    double ints = 2 * BT;          /* ids and targets (int32) */
    double input = BT / sp * h;    /* the stage input */
    double layer_full, layer = layer_acts(l, BT, &layer_full), layers;
    if (l->recompute == MEM_RECOMPUTE_FULL) {
        /* a recomputed layer keeps its input only (the group's first layer's, uniform: one per group) */
        int n = l->recompute_num_layers > 0 ? l->recompute_num_layers : 1;
        if (l->recompute_block) {
            int rec = n < k->nlayers ? n : k->nlayers;
            layers = rec * (BT / sp * h) + (k->nlayers - rec) * layer;
        } else {
            int groups = (k->nlayers + n - 1) / n;
            layers = groups * (BT / sp * h);
        }
    } else {
        layers = k->nlayers * layer;
    }
    double last = 0;
    if (k->last) last = norm_acts(l, BT / sp) + BT * c->padded_vocab / l->tp + 4 * BT;
    if (gpt_is_bert(c)) { /* token types; the LM head's dense and GeLU outputs and norm, the [CLS] rows */
        if (k->first) ints += BT / sp;
        if (k->last) last += 2 * BT / sp * h + norm_acts(l, BT / sp) + (c->binary_head ? l->mbs * (3 * h + 4) : 0);
    }
    return 4.0 * (ints + input + layers + last);
}

/* The backward's gradients (shared by the micro-batches of a chunk), and with full
 * recomputation one group's re-run activations, with selective the attention core's output. */
static double chunk_workspace(const mem_layout *l, const mem_chunk *k)
{
    const gpt_config *c = &l->cfg;
    double t = l->tp, BT = (double)l->mbs * c->seq, h = c->hidden;
    double q = gpt_q_width(c) / t, kv = gpt_kv_width(c) / t, f = c->ffn / t;
    double floats = 4 * BT * h + BT * (q + 2 * kv) + BT * q + BT * (c->swiglu ? 2 : 1) * f + BT * f + 2 * BT;
    if (l->sequence_parallel) floats += 3 * BT * h + 2 * BT / t * h; /* gathered, staging; two local */
    if (l->lowp) floats += BT * fmax(fmax(h, q), f); /* a kept input's fp32 staging */
    if (gpt_is_bert(c) && k->last) /* the pooler's gradients, and the heads' host buffer */
        floats += 2.0 * l->mbs * h + fmax(3 * BT, 2.0 * l->mbs * h);
    if (l->recompute == MEM_RECOMPUTE_FULL) {
        double full;
        layer_acts(l, BT, &full);
        int n = l->recompute_num_layers > 0 ? l->recompute_num_layers : 1;
        if (n > k->nlayers) n = k->nlayers;
        floats += (l->recompute_block ? 1 : n) * full;
    } else if (l->recompute == MEM_RECOMPUTE_SELECTIVE && k->nlayers > 0) {
        floats += kept(l, BT * q, 0) + BT * c->heads / t;
    }
    return 4.0 * floats;
}

void mem_predict(const mem_layout *l, mem_prediction *p)
{
    *p = (mem_prediction){0};
    double numel = 0;
    for (int i = 0; i < l->nchunks; i++) {
        const mem_chunk *k = &l->chunk[i];
        numel += mem_chunk_params(&l->cfg, l->tp, k);
        double a = mem_chunk_acts(l, k);
        p->acts_micro += a;
        p->acts += a * k->inflight;
        p->workspace += chunk_workspace(l, k);
    }
    p->workspace += 4.0 * l->mbs * l->cfg.seq * l->cfg.hidden; /* the received output gradient */
    p->params = 4.0 * numel;
    p->grads = 4.0 * numel;
    /* the distributed optimizer also reduce-scatters the grads into a buffer of its shard */
    p->optimizer = l->distributed_optimizer ? 12.0 * numel / l->dp : 8.0 * numel;
    if (l->dp > 1) { /* Open MPI's non-blocking reductions copy a bucket (measured: about one) */
        double bucket = l->bucket_elems > 0 && l->bucket_elems < numel ? l->bucket_elems : numel;
        p->comm = 4.0 * bucket;
    }
    /* a tied word embedding split over the first and last stage: its grads' sum over the two is
     * a non-blocking all-reduce, which Open MPI stages through a copy (measured at pp 8) */
    for (int i = 0; i < l->nchunks; i++)
        if (l->chunk[i].first != l->chunk[i].last && !l->cfg.untied)
            p->comm += 4.0 * l->cfg.padded_vocab / l->tp * l->cfg.hidden;
    if (l->lowp) {
        const gpt_config *c = &l->cfg;
        double BT = (double)l->mbs * c->seq, V = (double)c->padded_vocab / l->tp;
        double widest_in = c->hidden > c->ffn / l->tp ? c->hidden : c->ffn / l->tp;
        int head = 0;
        for (int i = 0; i < l->nchunks; i++) head |= l->chunk[i].last;
        double fc1 = (c->swiglu ? 2.0 : 1.0) * c->ffn / l->tp, qkv = (gpt_q_width(c) + 2.0 * gpt_kv_width(c)) / l->tp;
        double widest_out = fc1 > qkv ? fc1 : qkv; /* the widest GEMM output: fc1's, qkv's or the logits */
        if (head && V > widest_out) widest_out = V;
        /* the copies and one output gradient rounded (mixed.c's scratch: at most 64 MiB of
         * rows at a time); under sequence parallelism also a gathered norm output */
        double dout = fmin(2.0 * BT * widest_out, fmax(64.0 * MIB, 2.0 * 256 * widest_out));
        p->lowp = 2.0 * numel + dout;
        if (l->sequence_parallel) p->lowp += 2.0 * BT * c->hidden;
        if (l->lowp_widened) /* and their fp32 widenings (cpu's per-thread scratch), the largest weight's too */
            p->lowp += 4.0 * BT * widest_in + 2.0 * dout + 4.0 * (head ? V : fc1) * c->hidden;
    }
    p->total = p->params + p->grads + p->optimizer + p->acts + p->workspace + p->lowp + p->comm;
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
