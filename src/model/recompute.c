/* Activation recomputation (after Megatron's --recompute-granularity, -method, -num-layers): see
 * gpt.h. Only the carving of the activations and one hook before each layer's backward differ;
 * the layers' forward and backward are the same functions, reading and writing wherever the
 * micro-batch's layer_acts point.
 *
 * Full: a recomputed layer's activations point into `shared` (one set per stage, as many layers
 * as a group holds), except the output of a group's last layer, which is the next group's input
 * (or the stage output) and is kept per micro-batch. The forward writes the group's activations
 * into the shared set as it goes; the backward of the group's last layer first re-runs the
 * group's forward from its kept input (the same kernels, dropout masks and tensor-parallel
 * all-reduces on the same data: the same bits), then the layers' backward run as without
 * recomputation.
 * Selective: every layer keeps all but what its slots' kinds say they redo (block_ops
 * recompute_acts: the attention core's output and log-sum-exp); that points at one shared set,
 * carved again over the same bytes for each layer, and is redone before the layer's backward. */
#include "model_impl.h"

#include <stdio.h>

/* The recomputed group of layer l: [*start, *end], or 0 when the layer keeps its activations. */
static int full_group(const gpt_model *m, int l, int *start, int *end)
{
    int n = m->rc.num_layers;
    if (m->rc.granularity != GPT_RECOMPUTE_FULL || n < 1) return 0;
    if (m->rc.method == GPT_RECOMPUTE_BLOCK) {
        *start = *end = l;
        return l < n;
    }
    *start = l / n * n;
    *end = *start + n - 1 < m->nlayers - 1 ? *start + n - 1 : m->nlayers - 1;
    return 1;
}

/* Layers of activations a full recomputation re-runs at a time. */
static int full_shared_layers(const gpt_model *m)
{
    int n = m->rc.num_layers < m->nlayers ? m->rc.num_layers : m->nlayers;
    return m->rc.method == GPT_RECOMPUTE_BLOCK ? (n > 0) : n;
}

/* Carves what selective recomputation redoes of layer L's slots into a (the same bytes for
 * every layer when cv's arena is rewound over them). */
static void selective_carve(carver *cv, const gpt_model *m, const gpt_layer *L, layer_acts *a)
{
    for (int k = 0; k < GPT_LAYER_NSLOTS; k++)
        if (L->slot[k].ops->recompute_acts) L->slot[k].ops->recompute_acts(cv, m, a->slot[k]);
}

/* Full: the shared set, one region for each position in a group; every recomputed layer's
 * activations (shared[l], allocated for its own kinds) carved over its position's region, which
 * is as large as the largest of them (layers of a mixture of experts differ: --moe-layer-freq).
 * Returns the bytes. */
static size_t full_shared_layout(gpt_model *m, layer_acts *shared, td_arena *ar)
{
    int npos = full_shared_layers(m), start, end;
    size_t total = 0;
    for (int j = 0; j < npos; j++) {
        size_t most = 0, from = ar ? td_arena_mark(ar) : 0, to = from;
        for (int l = 0; l < m->nlayers; l++) {
            if (!full_group(m, l, &start, &end) || l - start != j) continue;
            if (ar) td_arena_release(ar, from);
            carver cv = model_carver(m, ar);
            layer_acts_carve(&cv, m, &m->layers[l], &shared[l]);
            if (cv.bytes > most) most = cv.bytes;
            if (ar && td_arena_mark(ar) > to) to = td_arena_mark(ar);
        }
        if (ar) td_arena_release(ar, to);
        total += most;
    }
    return total;
}

size_t recompute_shared_layout(gpt_model *m, layer_acts *shared, td_arena *ar)
{
    carver cv = model_carver(m, ar);
    if (m->rc.granularity == GPT_RECOMPUTE_FULL) {
        return full_shared_layout(m, shared, ar);
    } else if (m->rc.granularity == GPT_RECOMPUTE_SELECTIVE && m->nlayers > 0) {
        if (ar) m->rc_base = ar->base + ((ar->used + 63) & ~(size_t)63);
        selective_carve(&cv, m, &m->layers[0], &shared[0]);
    }
    return cv.bytes;
}

void recompute_layers_carve(carver *cv, const gpt_model *m, layer_acts *layers, const layer_acts *shared)
{
    for (int l = 0, start, end; l < m->nlayers; l++) {
        const gpt_layer *L = &m->layers[l];
        if (full_group(m, l, &start, &end)) {
            layer_acts_share(L, &layers[l], &shared[l]); /* over the region of its position in the group */
            if (l == end) CARVE(cv, layers[l].out, float, (int64_t)m->mbs * m->seq_l * m->cfg.hidden);
        } else if (m->rc.granularity == GPT_RECOMPUTE_SELECTIVE) {
            cv->selective = 1;
            layer_acts_carve(cv, m, L, &layers[l]);
            cv->selective = 0;
            if (cv->ar) { /* the shared bytes again: the same pointers as every other layer's */
                td_arena over;
                td_arena_wrap(&over, m->rc_base, m->rc_bytes);
                carver again = *cv;
                again.ar = &over;
                selective_carve(&again, m, L, &layers[l]);
            }
        } else {
            layer_acts_carve(cv, m, L, &layers[l]);
        }
    }
}

void recompute_before_bwd(gpt_model *m, gpt_acts *acts, int l)
{
    int start, end;
    if (m->rc.granularity == GPT_RECOMPUTE_SELECTIVE) {
        layer_recompute(m, acts, l);
    } else if (full_group(m, l, &start, &end) && l == end) {
        for (int j = start; j <= end; j++) layer_fwd(m, acts, j, j ? acts->layers[j - 1].out : acts->input);
    }
}

void gpt_recompute_describe(const gpt_recompute *rc, char *out, size_t len)
{
    if (!rc || rc->granularity == GPT_RECOMPUTE_NONE) snprintf(out, len, "none");
    else if (rc->granularity == GPT_RECOMPUTE_SELECTIVE) snprintf(out, len, "selective");
    else snprintf(out, len, "full %s %d", rc->method == GPT_RECOMPUTE_BLOCK ? "block" : "uniform", rc->num_layers);
}
