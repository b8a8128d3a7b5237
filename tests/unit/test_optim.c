/* src/optim: the learning-rate schedule against Megatron's formulas evaluated by hand. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "trident/optim.h"

static void warmup_then_cosine(void **state)
{
    (void)state;
    opt_lr_schedule s = {.max_lr = 6e-4, .min_lr = 6e-5, .warmup_iters = 10, .decay_iters = 110,
                         .style = OPT_DECAY_COSINE};
    assert_true(fabs(opt_lr_at(&s, 1) - 6e-5) < 1e-15);
    assert_true(fabs(opt_lr_at(&s, 10) - 6e-4) < 1e-15);
    /* halfway through decay: cos(pi/2) = 0 -> midpoint */
    assert_true(fabs(opt_lr_at(&s, 60) - (6e-5 + 0.5 * (6e-4 - 6e-5))) < 1e-12);
    assert_true(fabs(opt_lr_at(&s, 110) - 6e-5) < 1e-15);
    assert_true(fabs(opt_lr_at(&s, 500) - 6e-5) < 1e-15);
}

static void linear_and_constant(void **state)
{
    (void)state;
    opt_lr_schedule s = {.max_lr = 1.0, .min_lr = 0.0, .warmup_iters = 0, .decay_iters = 100,
                         .style = OPT_DECAY_LINEAR};
    assert_true(fabs(opt_lr_at(&s, 25) - 0.75) < 1e-12);
    s.style = OPT_DECAY_CONSTANT;
    assert_true(opt_lr_at(&s, 99) == 1.0);
    opt_decay_style st;
    assert_int_equal(opt_decay_style_parse("cosine", &st), 0);
    assert_int_equal(st, OPT_DECAY_COSINE);
    assert_int_equal(opt_decay_style_parse("exp", &st), -1);
}

static void clip(void **state)
{
    (void)state;
    assert_true(opt_clip_factor(0.5, 1.0) == 1.0);
    assert_true(opt_clip_factor(5.0, 0.0) == 1.0);
    assert_true(fabs(opt_clip_factor(4.0, 1.0) * 4.0 - 1.0) < 1e-6);
}

/* Megatron's DynamicGradScaler, worked by hand: hysteresis 2 halves on the second overflow in a row
 * (the count-down is not reset by a good step, only by a growth), then on every one after; a
 * window of 3 good steps doubles and resets the count-down; never below the minimum. */
static void loss_scaler_dynamic(void **state)
{
    (void)state;
    opt_loss_scaler s;
    opt_loss_scaler_init(&s, 1, 1024, 128, 3, 2);
    opt_loss_scaler_update(&s, 1);
    assert_true(s.scale == 1024 && s.hysteresis_tracker == 1); /* first overflow: skipped, kept */
    opt_loss_scaler_update(&s, 0);
    opt_loss_scaler_update(&s, 1);
    assert_true(s.scale == 512 && s.hysteresis_tracker == 0 && s.growth_tracker == 0);
    opt_loss_scaler_update(&s, 1);
    assert_true(s.scale == 256);
    opt_loss_scaler_update(&s, 1);
    opt_loss_scaler_update(&s, 1);
    assert_true(s.scale == 128); /* the minimum */
    for (int i = 0; i < 2; i++) opt_loss_scaler_update(&s, 0);
    assert_true(s.scale == 128 && s.growth_tracker == 2);
    opt_loss_scaler_update(&s, 0);
    assert_true(s.scale == 256 && s.growth_tracker == 0 && s.hysteresis_tracker == 2);
    opt_loss_scaler_update(&s, 1); /* hysteresis back at 2: one overflow does not halve */
    assert_true(s.scale == 256 && s.hysteresis_tracker == 1);
    /* hysteresis 1: every overflow halves */
    opt_loss_scaler_init(&s, 1, 4096, 1, 1000, 1);
    opt_loss_scaler_update(&s, 1);
    assert_true(s.scale == 2048);
    /* a constant scaler never moves */
    opt_loss_scaler_init(&s, 0, 8, 8, 1, 1);
    opt_loss_scaler_update(&s, 1);
    opt_loss_scaler_update(&s, 0);
    assert_true(s.scale == 8);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(warmup_then_cosine),
        cmocka_unit_test(linear_and_constant),
        cmocka_unit_test(clip),
        cmocka_unit_test(loss_scaler_dynamic),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
