/* src/parallel/data_parallel.c's shard arithmetic (which elements each dp rank owns) and the
 * distributed optimizer's step over a shard (the weight-decay mask follows the tensor each
 * element lies in), against sums and masks written out by hand. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "backend/backend.h"
#include "trident/data_parallel.h"
#include "trident/optim.h"

/* Every rank's piece of n elements: consecutive from 0, covering n, sizes differing by <= 1. */
static void pieces_tile(void **state)
{
    (void)state;
    for (size_t n = 0; n < 60; n++)
        for (int dp = 1; dp <= 8; dp++) {
            size_t at = 0, lo = (size_t)-1, hi = 0;
            for (int r = 0; r < dp; r++) {
                size_t s, c;
                dp_piece(n, dp, r, &s, &c);
                assert_int_equal(s, at);
                at += c;
                lo = c < lo ? c : lo;
                hi = c > hi ? c : hi;
            }
            assert_int_equal(at, n);
            assert_true(hi - lo <= 1);
        }
    size_t s, c;
    dp_piece(10, 4, 1, &s, &c); /* 3 3 2 2 */
    assert_int_equal(s, 3);
    assert_int_equal(c, 3);
    dp_piece(10, 4, 3, &s, &c);
    assert_int_equal(s, 8);
    assert_int_equal(c, 2);
}

static void buckets(void **state)
{
    (void)state;
    size_t lo, hi;
    assert_int_equal(dp_bucket_count(23, 5), 5);
    dp_bucket_bounds(23, 5, 4, &lo, &hi);
    assert_int_equal(lo, 20);
    assert_int_equal(hi, 23);
    assert_int_equal(dp_bucket_count(23, 0), 1);
    dp_bucket_bounds(23, 0, 0, &lo, &hi);
    assert_int_equal(hi, 23);
    assert_int_equal(dp_bucket_count(0, 5), 0);
    assert_int_equal(dp_bucket_count(10, 5), 2);
}

/* A 12-element model of three tensors (decay [0,5), no decay [5,8), decay [8,12)) in buckets of
 * 5 split over dp 2; rank 0 owns [0,3), [5,8) and [10,11). With zero gradients one step only
 * decays: p *= 1 - lr wd on the owned decayed elements; the rest is untouched. */
static void step_over_shard(void **state)
{
    (void)state;
    backend *be = be_create("cpu", 1);
    gpt_tensor_info table[3];
    memset(table, 0, sizeof table);
    size_t off[3] = {0, 5, 8}, num[3] = {5, 3, 4};
    for (int i = 0; i < 3; i++) {
        table[i].offset = off[i];
        table[i].numel = num[i];
        table[i].no_decay = i == 1;
    }
    float params[12], grads[12] = {0};
    for (int i = 0; i < 12; i++) params[i] = 1.0f + (float)i;
    gpt_model m;
    memset(&m, 0, sizeof m);
    m.params = params;
    m.grads = grads;
    m.numel = 12;
    m.table = table;
    m.ntensors = 3;
    dp_range ranges[3];
    size_t shard = 0;
    for (int b = 0; b < dp_bucket_count(12, 5); b++) {
        size_t lo, hi, s, c;
        dp_bucket_bounds(12, 5, b, &lo, &hi);
        dp_piece(hi - lo, 2, 0, &s, &c);
        ranges[b] = (dp_range){lo + s, c, shard};
        shard += c;
    }
    assert_int_equal(ranges[0].lo, 0);
    assert_int_equal(ranges[0].n, 3);
    assert_int_equal(ranges[1].lo, 5);
    assert_int_equal(ranges[1].n, 3);
    assert_int_equal(ranges[2].lo, 10);
    assert_int_equal(ranges[2].n, 1);
    assert_int_equal(shard, 7);
    float shard_grads[7] = {0};
    ps_state ps;
    memset(&ps, 0, sizeof ps);
    gpt_model *chunks[1] = {&m};
    opt_shard sh = {ranges, 3, shard_grads};
    opt_adamw_hparams hp = {0.9, 0.95, 1e-8, 0.5};
    opt_adamw *o = opt_adamw_create(be, &ps, chunks, 1, &sh, 1, &hp);
    assert_int_equal(opt_adamw_state_numel(o), 14); /* two moments of 7 */
    opt_adamw_step(o, 1.0, 1.0, 1);
    const int decayed[12] = {1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0}; /* owned and not in [5, 8) */
    for (int i = 0; i < 12; i++)
        assert_true(params[i] == (decayed[i] ? 0.5f : 1.0f) * (1.0f + (float)i));
    /* the moments follow the shard's gradients: one step of gradient 1 gives m = 1 - beta1 */
    for (int i = 0; i < 7; i++) shard_grads[i] = 1.0f;
    opt_adamw_step(o, 0.0, 1.0, 2);
    for (int i = 0; i < 7; i++) assert_true(fabsf(o->m[0][i] - 0.1f) < 1e-7f);
    opt_adamw_free(o);
    be_free(be);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(pieces_tile),
        cmocka_unit_test(buckets),
        cmocka_unit_test(step_over_shard),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
