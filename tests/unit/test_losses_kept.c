/* The LM head's losses kept on the device (gpt_losses_take, src/model/head_lm.c): with
 * m->defer_losses a training schedule's forwards read no loss back (the host never waits for the
 * device between a micro-batch's forward and its backward), and one read at the take gives the
 * sum the forwards would have given one at a time, bit for bit, with and without a loss mask (a
 * mask overwritten once its forward has returned, as context parallelism's staging of it is).
 * The backend's copies are counted through a wrapper of its copy_bytes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "backend/backend.h"
#include "trident/activation.h"
#include "trident/comm.h"
#include "trident/gpt.h"
#include "trident/parallel_state.h"

static comm *g_world;
static ps_state *g_ps;
static backend *g_be;
static struct be_ops g_counted;
static const struct be_ops *g_real;
static int g_d2h; /* device-to-host copies since the last reset */

static void counting_copy(const backend *be, void *dst, const void *src, size_t bytes, be_copy_kind kind)
{
    g_d2h += kind == BE_D2H;
    g_real->copy_bytes(be, dst, src, bytes, kind);
}

enum { B = 2, S = 8, MICRO = 11 };

static gpt_config tiny(void)
{
    gpt_config c = {0};
    c.num_layers = 2, c.hidden = 16, c.heads = 2, c.ffn = 32, c.seq = S, c.max_pos = S;
    c.vocab = 50, c.padded_vocab = 64, c.init_std = 0.02f, c.seed = 9, c.act = TD_ACT_GELU;
    return c;
}

/* Micro-batch k's inputs: its own tokens and samples; with a mask, every third token left out. */
typedef struct {
    int32_t ids[B * S], targets[B * S];
    int64_t sample[B];
    float mask[B * S];
} micro_in;

static gpt_batch batch_of(micro_in *in, int k, int masked)
{
    for (int i = 0; i < B * S; i++) {
        in->ids[i] = (i * 7 + 3 * k + 1) % 50;
        in->targets[i] = (i * 5 + 11 * k + 2) % 50;
        in->mask[i] = (i + k) % 3 ? 1.0f : 0.0f;
    }
    for (int b = 0; b < B; b++) in->sample[b] = (int64_t)k * B + b;
    gpt_batch g = {.B = B, .ids = in->ids, .targets = in->targets, .sample = in->sample, .token_weight = 0.25f,
                   .sample_weight = 1};
    if (masked) g.loss_mask = in->mask;
    return g;
}

/* n training forwards: the sum of the losses read at each forward, and the same forwards with
 * the losses kept and taken once; the reads counted. */
static void kept_equals_read(int n, int masked)
{
    gpt_config c = tiny();
    gpt_model *m = gpt_create(&c, g_ps, g_be, 0, c.num_layers, B, 1);
    gpt_acts *a = gpt_acts_acquire(m);
    static micro_in in[MICRO];
    double each = 0;
    for (int k = 0; k < n; k++) {
        gpt_batch g = batch_of(&in[k], k, masked);
        double l = 0;
        gpt_forward(m, a, &g, NULL, 1, &l);
        assert_true(l > 0);
        each += l;
    }
    m->defer_losses = 1;
    g_d2h = 0;
    int reads_in_forwards = 0;
    for (int k = 0; k < n; k++) {
        gpt_batch g = batch_of(&in[k], k, masked);
        double untouched = -1;
        gpt_forward(m, a, &g, NULL, 1, &untouched);
        assert_true(untouched == -1); /* kept, not read */
        for (int i = 0; i < B * S; i++) in[k].mask[i] = 7.0f; /* a batch's mask may be staging the next reuses */
        reads_in_forwards = g_d2h;
    }
    /* 8 kept at once: a read every 8 micro-batches, none at all up to 8 */
    assert_int_equal(reads_in_forwards, (n - 1) / 8);
    double kept = 0;
    gpt_losses_take(m, &kept);
    assert_int_equal(g_d2h, reads_in_forwards + 1);
    assert_memory_equal(&kept, &each, sizeof kept); /* the same sum, bit for bit */
    double again = 0;
    gpt_losses_take(m, &again); /* taken: nothing left, nothing read */
    assert_true(again == 0);
    assert_int_equal(g_d2h, reads_in_forwards + 1);
    print_message("%d micro-batches%s: loss %.17g read at each forward and once kept; %d read(s) in the forwards\n",
                  n, masked ? " (masked)" : "", kept, reads_in_forwards);
    gpt_acts_release(m, a);
    gpt_free(m);
}

static void three(void **state)
{
    (void)state;
    kept_equals_read(3, 0);
}
static void eight(void **state)
{
    (void)state;
    kept_equals_read(8, 1);
}
static void past_eight(void **state)
{
    (void)state;
    kept_equals_read(MICRO, 0);
    kept_equals_read(MICRO, 1);
}

int main(int argc, char **argv)
{
    g_world = comm_world_init(&argc, &argv);
    g_ps = ps_init(g_world, 1, 1);
    g_be = be_create("cpu", 0);
    g_real = g_be->ops;
    g_counted = *g_real;
    g_counted.copy_bytes = counting_copy;
    g_be->ops = &g_counted;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(three),
        cmocka_unit_test(eight),
        cmocka_unit_test(past_eight),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    g_be->ops = g_real;
    be_free(g_be);
    ps_free(g_ps);
    comm_world_finalize(g_world);
    return rc;
}
