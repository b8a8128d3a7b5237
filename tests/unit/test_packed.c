/* Packed documents (--reset-attention-mask, --reset-position-ids, --eod-mask-loss): the batch
 * source's document starts, positions and loss mask from the EOD tokens against a hand-worked
 * row (Megatron's get_ltor_masks_and_position_ids); a tiny model's per-token losses of documents
 * packed into one sequence against each document run alone (GPT-2's learned positions and a
 * Llama block's rope with grouped-query attention), and the same packed row without the flags
 * differing (so the comparison can fail); the loss mask's loss and gradients against the sums
 * they must be. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend/backend.h"
#include "trident/comm.h"
#include "trident/gpt.h"
#include "trident/gpt_source.h"
#include "trident/parallel_state.h"

static comm *g_world;
static ps_state *g_ps;
static backend *g_be;

enum { S = 16, EOD = 49 };

static gpt_config tiny_config(int llama)
{
    gpt_config c = {0};
    c.num_layers = 2;
    c.hidden = 16;
    c.heads = 4;
    c.ffn = 64;
    c.seq = S;
    c.max_pos = S;
    c.vocab = 50;
    c.padded_vocab = gpt_padded_vocab(c.vocab, 8, 1);
    c.init_std = 0.2f;
    c.seed = 99;
    if (llama) {
        c.norm = GPT_NORM_RMSNORM;
        c.pos = GPT_POS_ROPE;
        c.act = TD_ACT_SILU, c.glu = 1;
        c.ffn = 32;
        c.query_groups = 2;
        c.disable_bias = 1;
        c.untied = 1;
    }
    return c;
}

/* Hand-worked: ids 5 EOD 7 8 EOD EOD 9 (Megatron: the token after an EOD at i starts a document
 * at i + 1; positions count from each start; the loss mask is 0 where the input is EOD). */
static void packing_row_by_hand(void **state)
{
    (void)state;
    const int32_t ids[7] = {5, EOD, 7, 8, EOD, EOD, 9};
    const int32_t seg_want[7] = {0, 0, 2, 2, 2, 5, 6}, pos_want[7] = {0, 1, 0, 1, 2, 0, 0};
    const float mask_want[7] = {1, 0, 1, 1, 0, 0, 1};
    int32_t seg[7], pos[7];
    float mask[7];
    assert_int_equal(gpt_packing_row(ids, 7, EOD, seg, pos, mask), 4);
    assert_memory_equal(seg, seg_want, sizeof seg);
    assert_memory_equal(pos, pos_want, sizeof pos);
    assert_memory_equal(mask, mask_want, sizeof mask);
    /* no EOD: one document */
    const int32_t plain[3] = {1, 2, 3}, zero[3] = {0, 0, 0}, ramp[3] = {0, 1, 2};
    assert_int_equal(gpt_packing_row(plain, 3, EOD, seg, pos, NULL), 3);
    assert_memory_equal(seg, zero, sizeof zero);
    assert_memory_equal(pos, ramp, sizeof ramp);
}

/* Rotary positions from a position array: each row turned as rope_fwd turns position pos[t]
 * (pos0 = pos[t], one row), bit for bit, forward and backward. (In the model a shift of every
 * position of a document changes nothing once attention stays inside it: rope is relative; so
 * the positions are held here, at the kernel.) */
static void rope_positions(void **state)
{
    (void)state;
    enum { B = 2, T = 7, NH = 2, HS = 8, LD = NH * HS + 3 };
    const int32_t pos[B * T] = {0, 1, 2, 0, 1, 0, 1, 0, 1, 2, 3, 4, 5, 6};
    float x[B * T * LD], y[B * T * LD], one[LD];
    for (int i = 0; i < B * T * LD; i++) x[i] = sinf(0.37f * (float)i) * 2.0f;
    for (int dir = 0; dir < 2; dir++) {
        memcpy(y, x, sizeof x);
        if (dir == 0) be_rope_fwd_at(g_be, y, B, T, LD, NH, HS, 6, 10000.0f, 0, pos);
        else be_rope_bwd_at(g_be, y, B, T, LD, NH, HS, 6, 10000.0f, 0, pos);
        for (int r = 0; r < B * T; r++) {
            memcpy(one, x + (size_t)r * LD, sizeof one);
            if (dir == 0) be_rope_fwd(g_be, one, 1, 1, LD, NH, HS, 6, 10000.0f, pos[r]);
            else be_rope_bwd(g_be, one, 1, 1, LD, NH, HS, 6, 10000.0f, pos[r]);
            assert_memory_equal(one, y + (size_t)r * LD, sizeof one);
        }
    }
}

/* Per-token losses (B, S) of a forward (no dropout) into out. */
static void losses_of(gpt_model *m, const gpt_batch *in, float *out)
{
    gpt_acts *a = gpt_acts_acquire(m);
    double sum = 0;
    gpt_forward(m, a, in, NULL, 0, &sum);
    be_memcpy(g_be, out, gpt_acts_losses(a), (size_t)in->B * S * sizeof(float), BE_D2H);
    gpt_acts_release(m, a);
}

/* Three documents of lengths 5, 3 and 8 (the first two ending in EOD) packed into one row of 16,
 * with the three flags, against each document alone at the start of a row (the rest of the row
 * filler, which a causal model's earlier positions never see) with the packed row's targets. */
static void check_packed_equals_alone(int llama)
{
    gpt_config c = tiny_config(llama);
    gpt_model *m = gpt_create(&c, g_ps, g_be, 0, c.num_layers, 1, 1);
    const int start[3] = {0, 5, 8}, len[3] = {5, 3, 8};
    int32_t ids[S], targets[S], seg[S], pos[S];
    unsigned r = 7;
    for (int t = 0; t < S; t++) {
        r = r * 1103515245u + 12345u;
        ids[t] = (int32_t)((r >> 8) % 40);
        r = r * 1103515245u + 12345u;
        targets[t] = (int32_t)((r >> 8) % 40);
    }
    ids[4] = ids[7] = EOD;
    gpt_packing_row(ids, S, EOD, seg, pos, NULL);
    int64_t sample[1] = {0};
    float packed[S], plain[S];
    losses_of(m, &(gpt_batch){.B = 1, .ids = ids, .targets = targets, .sample = sample, .seg = seg, .pos = pos},
              packed);
    losses_of(m, &(gpt_batch){.B = 1, .ids = ids, .targets = targets, .sample = sample}, plain);
    double worst = 0, moved = 0;
    for (int d = 0; d < 3; d++) {
        int32_t ids1[S], tg1[S];
        float alone[S];
        for (int t = 0; t < S; t++) ids1[t] = 3 + t % 7, tg1[t] = 1; /* filler after the document */
        memcpy(ids1, ids + start[d], (size_t)len[d] * sizeof(int32_t));
        memcpy(tg1, targets + start[d], (size_t)len[d] * sizeof(int32_t));
        losses_of(m, &(gpt_batch){.B = 1, .ids = ids1, .targets = tg1, .sample = sample}, alone);
        for (int t = 0; t < len[d]; t++) {
            double e = fabs(packed[start[d] + t] - alone[t]) / fabs(alone[t]);
            worst = e > worst ? e : worst;
            if (d > 0) moved = fmax(moved, fabs(plain[start[d] + t] - alone[t]) / fabs(alone[t]));
        }
    }
    printf("%s: packed vs alone, worst relative difference of a token's loss %.2e; without the flags %.2e\n",
           llama ? "llama (rope, GQA)" : "gpt2 (learned positions)", worst, moved);
    assert_true(worst < 1e-5);
    assert_true(moved > 1e-3); /* the same row unpacked is another computation */
    gpt_free(m);
}

static void packed_equals_alone_gpt2(void **state)
{
    (void)state;
    check_packed_equals_alone(0);
}

static void packed_equals_alone_llama(void **state)
{
    (void)state;
    check_packed_equals_alone(1);
}

/* Gradients of one forward and backward (loss scale 1) with the batch in; the loss into *loss. */
static float *grads_of(gpt_model *m, const gpt_batch *in, double *loss)
{
    be_zero(g_be, m->grads, m->numel);
    gpt_acts *a = gpt_acts_acquire(m);
    *loss = 0;
    gpt_forward(m, a, in, NULL, 1, loss);
    gpt_backward(m, a, NULL, 1.0f);
    gpt_acts_release(m, a);
    float *g = malloc(m->numel * sizeof(float));
    be_memcpy(g_be, g, m->grads, m->numel * sizeof(float), BE_D2H);
    return g;
}

/* --eod-mask-loss: the loss is token_weight * the sum of the counted tokens' losses; the
 * gradients of a mask and of its complement add up to the unmasked ones, and an all-ones mask
 * of weight 1 is the unmasked computation bit for bit. */
static void eod_mask_loss_sums(void **state)
{
    (void)state;
    gpt_config c = tiny_config(0);
    enum { B = 2 };
    gpt_model *m = gpt_create(&c, g_ps, g_be, 0, c.num_layers, B, 1);
    int32_t ids[B * S], targets[B * S];
    float mask[B * S], comp[B * S], ones[B * S], losses[B * S];
    int64_t sample[B] = {0, 1};
    for (int i = 0; i < B * S; i++) {
        ids[i] = (int32_t)((i * 7 + 3) % 40), targets[i] = (int32_t)((i * 11 + 5) % 40);
        if (i % 5 == 2) ids[i] = EOD;
    }
    for (int b = 0; b < B; b++) gpt_packing_row(ids + b * S, S, EOD, NULL, NULL, mask + b * S);
    for (int i = 0; i < B * S; i++) comp[i] = 1.0f - mask[i], ones[i] = 1.0f;
    gpt_batch in = {.B = B, .ids = ids, .targets = targets, .sample = sample};
    losses_of(m, &in, losses);
    double l0, l1, l2, l3;
    float *g0 = grads_of(m, &in, &l0);
    in.loss_mask = mask, in.token_weight = 2.5f;
    float *g1 = grads_of(m, &in, &l1);
    in.loss_mask = comp;
    float *g2 = grads_of(m, &in, &l2);
    in.loss_mask = ones, in.token_weight = 1.0f;
    float *g3 = grads_of(m, &in, &l3);
    double want = 0;
    for (int i = 0; i < B * S; i++) want += mask[i] * (double)losses[i];
    assert_true(fabs(l1 - 2.5 * want) < 1e-5 * fabs(l1));
    assert_true(fabs(l1 + l2 - 2.5 * l0) < 1e-5 * fabs(l0));
    double worst = 0, top = 0;
    for (size_t i = 0; i < m->numel; i++) {
        worst = fmax(worst, fabs(g1[i] + g2[i] - 2.5 * g0[i]));
        top = fmax(top, fabs(g0[i]));
    }
    printf("eod mask: loss %.6f = 2.5 x %.6f; gradients of the mask and its complement sum to 2.5 x the "
           "unmasked within %.1e of %.1e\n", l1, want, worst, top);
    assert_true(worst < 1e-5 * top);
    assert_true(l3 == l0);
    assert_memory_equal(g3, g0, m->numel * sizeof(float));
    free(g0), free(g1), free(g2), free(g3);
    gpt_free(m);
}

int main(int argc, char **argv)
{
    g_world = comm_world_init(&argc, &argv);
    g_ps = ps_init(g_world, 1, 1);
    g_be = be_create("cpu", 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(packing_row_by_hand),
        cmocka_unit_test(rope_positions),
        cmocka_unit_test(packed_equals_alone_gpt2),
        cmocka_unit_test(packed_equals_alone_llama),
        cmocka_unit_test(eod_mask_loss_sums),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    be_free(g_be);
    ps_free(g_ps);
    comm_world_finalize(g_world);
    return rc;
}
