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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(warmup_then_cosine),
        cmocka_unit_test(linear_and_constant),
        cmocka_unit_test(clip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
