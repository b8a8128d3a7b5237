/* src/optim: the learning-rate schedule against Megatron's formulas evaluated by hand; the loss
 * scaler's every path (growth after the window, backoff by hysteresis, the floor, a constant
 * scale, the divergence count) worked by hand; and fp16 gradient unscaling: AdamW steps on
 * loss-scaled fp16 gradients against AdamW in double on the true gradients. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "backend/backend.h"
#include "trident/comm.h"
#include "trident/optim.h"

static comm *g_world;
static ps_state *g_ps;

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


/* At the floor (the minimum, or a constant scale) OPT_DIVERGED_OVERFLOWS overflows in a row are a
 * divergence; overflows above the floor do not count, and a good step starts the count again. */
static void loss_scaler_divergence(void **state)
{
    (void)state;
    opt_loss_scaler s;
    opt_loss_scaler_init(&s, 1, 8, 2, 1000, 1);
    opt_loss_scaler_update(&s, 1); /* at 8: halves to 4 */
    opt_loss_scaler_update(&s, 1); /* at 4: halves to 2, the floor */
    assert_true(s.scale == 2 && s.floor_overflows == 0);
    for (int i = 1; i < OPT_DIVERGED_OVERFLOWS; i++) opt_loss_scaler_update(&s, 1);
    assert_true(s.scale == 2 && s.floor_overflows == OPT_DIVERGED_OVERFLOWS - 1 && !opt_loss_scaler_diverged(&s));
    opt_loss_scaler_update(&s, 0); /* a good step */
    assert_true(s.floor_overflows == 0);
    for (int i = 0; i < OPT_DIVERGED_OVERFLOWS; i++) opt_loss_scaler_update(&s, 1);
    assert_true(opt_loss_scaler_diverged(&s));
    /* a constant scale is its own floor */
    opt_loss_scaler_init(&s, 0, 1024, 1024, 1, 1);
    for (int i = 0; i < OPT_DIVERGED_OVERFLOWS - 1; i++) opt_loss_scaler_update(&s, 1);
    assert_true(!opt_loss_scaler_diverged(&s) && s.scale == 1024);
    opt_loss_scaler_update(&s, 1);
    assert_true(opt_loss_scaler_diverged(&s) && s.scale == 1024);
}

/* ---- fp16 gradient unscaling ---- */
#define NP 6 /* elements: a decayed tensor [0, 4) and a no-decay one [4, 6) */
static const double LR = 1e-2, MAX_NORM = 4e-6, B1 = 0.9, B2 = 0.95, EPS = 1e-8, WD = 0.1;

/* AdamW (PyTorch's, decoupled decay) in double on the true gradient g times the clip factor. */
typedef struct {
    double p[NP], m[NP], v[NP];
} ref_adamw;

static void ref_step(ref_adamw *r, const double *g, double clip, int64_t step)
{
    double bc1 = 1 - pow(B1, (double)step), bc2 = 1 - pow(B2, (double)step);
    for (int i = 0; i < NP; i++) {
        double gi = g[i] * clip;
        r->m[i] = B1 * r->m[i] + (1 - B1) * gi;
        r->v[i] = B2 * r->v[i] + (1 - B2) * gi * gi;
        double wd = i < 4 ? WD : 0;
        r->p[i] = r->p[i] * (1 - LR * wd) - LR * (r->m[i] / bc1) / (sqrt(r->v[i] / bc2) + EPS);
    }
}

/* x rounded to fp16 and back (round to nearest even), by the backend's conversion. */
static float fp16_round(const backend *be, float x)
{
    uint16_t h;
    float y;
    be_convert(be, &h, BE_F16, &x, BE_F32, 1);
    be_convert(be, &y, BE_F32, &h, BE_F16, 1);
    return y;
}

/* Eight iterations of an --fp16 run as the trainer does them: gradients of d(loss) * scale held
 * in fp16 (true gradients k * 2^-27, around 1e-7 to 2e-6: the regime where eps matters and
 * fp16 needs the scale: 3 * 2^-27 flushes to 0 in fp16 unscaled), an overflow (Inf) at
 * iterations 3, 5, 6 and 7, a dynamic scaler (2^16, window 2, hysteresis 1, minimum 2^14). Each
 * iteration: the unscaled norm is the true gradients' norm (double), an overflow skips the step
 * and leaves weights and moments as they were, the scale follows the sequence worked by hand,
 * and the weights match AdamW in double on the true gradients clipped to MAX_NORM, within 1e-6
 * (fp32 rounding). Planted, gradients not unscaled in the step (eps then weighs 2^16 times less,
 * and the moments mix scales 2^16, 2^17, 2^14) miss by 3.1e-3 at the first step; a norm not
 * unscaled fails the norm check at once. */
static void fp16_unscaled_steps(void **state)
{
    (void)state;
    backend *be = be_create("cpu", 1);
    gpt_tensor_info table[2];
    memset(table, 0, sizeof table);
    table[0] = (gpt_tensor_info){.offset = 0, .numel = 4};
    table[1] = (gpt_tensor_info){.offset = 4, .numel = 2, .no_decay = 1};
    float params[NP], grads[NP];
    ref_adamw ref;
    memset(&ref, 0, sizeof ref);
    for (int i = 0; i < NP; i++) params[i] = (float)(ref.p[i] = 0.5 - 0.125 * i);
    gpt_model m;
    memset(&m, 0, sizeof m);
    m.params = params;
    m.grads = grads;
    m.numel = NP;
    m.table = table;
    m.ntensors = 2;
    dp_range range = {0, NP, 0};
    gpt_model *chunks[1] = {&m};
    opt_shard sh = {&range, 1, grads};
    opt_adamw_hparams hp = {B1, B2, EPS, WD};
    opt_adamw *o = opt_adamw_create(be, g_ps, chunks, 1, &sh, 0, &hp);
    o->check_all_finite = 1;
    opt_loss_scaler s;
    opt_loss_scaler_init(&s, 1, 65536, 16384, 2, 1);
    const int overflow[8] = {0, 0, 1, 0, 1, 1, 1, 0};
    const double scale_used[8] = {65536, 65536, 131072, 65536, 65536, 32768, 16384, 16384};
    const int k[8][NP] = {{3, -40, 100, 7, -250, 60},  {5, 30, -90, 11, 240, -64}, {1, 1, 1, 1, 1, 1},
                          {-3, 44, 120, -9, -200, 70}, {1, 1, 1, 1, 1, 1},         {1, 1, 1, 1, 1, 1},
                          {1, 1, 1, 1, 1, 1},          {7, -36, 80, 13, 260, -50}};
    assert_true(fp16_round(be, (float)ldexp(3, -27)) == 0.0f); /* why fp16 needs the scale */
    int64_t taken = 0;
    double gmax = 0;
    for (int it = 0; it < 8; it++) {
        double scale = s.scale, g[NP], ss = 0;
        assert_true(scale == scale_used[it]);
        for (int i = 0; i < NP; i++) {
            g[i] = ldexp(k[it][i], -27);
            ss += g[i] * g[i];
            grads[i] = fp16_round(be, (float)(g[i] * scale));
            assert_true(grads[i] == (float)(g[i] * scale)); /* exact: the scaled k fit fp16 */
        }
        if (overflow[it]) grads[2] = INFINITY; /* as a product past 65504 rounds in fp16 */
        float before[NP];
        memcpy(before, params, sizeof params);
        double norm = opt_unscaled_grad_norm(o, scale);
        int found_inf = !isfinite(norm);
        assert_int_equal(found_inf, overflow[it]);
        if (!found_inf) assert_true(fabs(norm - sqrt(ss)) <= 1e-6 * sqrt(ss));
        opt_loss_scaler_update(&s, found_inf);
        int stepped = opt_adamw_step_scaled(o, LR, norm, MAX_NORM, scale, taken + 1);
        assert_int_equal(stepped, !found_inf);
        if (found_inf) {
            assert_memory_equal(before, params, sizeof params); /* skipped: nothing moved */
            continue;
        }
        taken++;
        double clip = opt_clip_factor(sqrt(ss), MAX_NORM);
        ref_step(&ref, g, clip, taken);
        for (int i = 0; i < NP; i++) gmax = fmax(gmax, fabs(g[i]) * clip); /* the moments' magnitude */
        for (int i = 0; i < NP; i++) {
            if (fabs(params[i] - ref.p[i]) > 1e-6)
                fail_msg("iteration %d, element %d: %.9g, AdamW in double on the unscaled gradients %.9g", it + 1, i,
                         params[i], ref.p[i]);
            if (fabs(o->m[0][i] - ref.m[i]) > 1e-6 * gmax)
                fail_msg("iteration %d, element %d: first moment %.9g, in double %.9g", it + 1, i, o->m[0][i],
                         ref.m[i]);
        }
    }
    assert_int_equal(taken, 4);
    assert_true(s.scale == 16384 && s.floor_overflows == 0); /* the last good step reset the count */
    opt_adamw_free(o);
    be_free(be);
}

int main(int argc, char **argv)
{
    g_world = comm_world_init(&argc, &argv);
    g_ps = ps_init(g_world, 1, 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(warmup_then_cosine),
        cmocka_unit_test(linear_and_constant),
        cmocka_unit_test(clip),
        cmocka_unit_test(loss_scaler_dynamic),
        cmocka_unit_test(loss_scaler_divergence),
        cmocka_unit_test(fp16_unscaled_steps),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    ps_free(g_ps);
    comm_world_finalize(g_world);
    return failed;
}
