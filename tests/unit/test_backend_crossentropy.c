/* src/backend/cpu/crossentropy.c: softmax cross-entropy against a double-precision reference
 * over the REAL vocabulary only (the padded columns are masked out: they must change neither
 * the loss nor get any gradient), the fused in-place backward against finite differences of
 * that reference, and the vocab-parallel steps over 1, 2 and 4 slices (max, sum of exp and
 * target logit combined by hand, as the all-reduces would) with padding that falls into the
 * last slice only or spans several (whole slices of padding included). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "test_backend_util.h"
#include "trident/half.h"

static int setup(void **state)
{
    *state = be_create("cpu", 2);
    return 0;
}

static int teardown(void **state)
{
    be_free(*state);
    return 0;
}

enum { BT = 6, V = 24 }; /* V: the padded vocabulary, a multiple of 4 slices */
static const int32_t targets_all[BT] = {0, 23, 5, 11, 12, 17};

typedef struct {
    double *logits; /* (BT, V) */
    int vocab;      /* real columns */
    int32_t targets[BT];
} ce_ctx;

static void ce_init(ce_ctx *c, const float *logits, int vocab)
{
    c->logits = tb_dup(logits, BT * V);
    c->vocab = vocab;
    for (int i = 0; i < BT; i++) c->targets[i] = targets_all[i] % vocab;
}

/* The reference: softmax over the real columns [0, vocab) only; it never reads the padding. */
static void ce_ref(void *vc, double *loss)
{
    ce_ctx *c = vc;
    for (int i = 0; i < BT; i++) {
        const double *l = c->logits + i * V;
        double m = -INFINITY, s = 0.0;
        for (int j = 0; j < c->vocab; j++) m = l[j] > m ? l[j] : m;
        for (int j = 0; j < c->vocab; j++) s += exp(l[j] - m);
        loss[i] = log(s) + m - l[c->targets[i]];
    }
}

/* The padded columns of dlogits (BT, V) are exactly 0. */
static void assert_padding_zero(const float *dl, int vocab, const char *what)
{
    int nonzero = 0;
    for (int i = 0; i < BT; i++)
        for (int j = vocab; j < V; j++) nonzero += dl[i * V + j] != 0.0f;
    printf("  %-34s %d nonzero padded gradients\n", what, nonzero);
    assert_int_equal(nonzero, 0);
}

static void one_rank(const backend *be, int vocab)
{
    float *logits = tb_rand_new(BT * V, 1, -8, 8), *dloss = tb_rand_new(BT, 2, 0.1f, 1.0f);
    /* padded logits far above the real ones: an unmasked softmax would be dominated by them */
    for (int i = 0; i < BT; i++)
        for (int j = vocab; j < V; j++) logits[i * V + j] = 30.0f;
    float losses[BT], maxv[BT], sumexp[BT], tl[BT];
    ce_ctx c;
    ce_init(&c, logits, vocab);
    double ref[BT], *Rd = tb_dup(dloss, BT);
    printf(" real vocabulary %d of %d\n", vocab, V);

    be_crossentropy_fwd(be, losses, maxv, sumexp, tl, logits, c.targets, BT, V, vocab);
    ce_ref(&c, ref);
    TB_CLOSE("crossentropy loss", losses, ref, BT, 1e-6);
    be_ce_bwd(be, logits, maxv, sumexp, c.targets, dloss, BT, V, vocab, 0);
    TB_GRAD("crossentropy dlogits (in place)", logits, c.logits, BT * V, ce_ref, &c, Rd, BT, 1e-5);
    assert_padding_zero(logits, vocab, "crossentropy dlogits");

    /* large logits: the max subtraction keeps it finite and exact */
    float big[BT * V];
    for (int i = 0; i < BT * V; i++) big[i] = 80.0f + (float)c.logits[i];
    be_crossentropy_fwd(be, losses, maxv, sumexp, tl, big, c.targets, BT, V, vocab);
    TB_CLOSE("crossentropy loss (logits + 80)", losses, ref, BT, 1e-5);
    free(logits), free(dloss), free(c.logits), free(Rd);
}

/* A NaN logit (a diverged model, issue 21) makes its row's loss NaN, the others unchanged: the
 * exponential passes NaN on (under UBSan it once converted NaN to an int and shifted it). */
static void crossentropy_nan_logit(void **state)
{
    const backend *be = *state;
    float *logits = tb_rand_new(BT * V, 1, -8, 8), losses[BT], maxv[BT], sumexp[BT], tl[BT], clean[BT];
    be_crossentropy_fwd(be, clean, maxv, sumexp, tl, logits, targets_all, BT, V, V);
    logits[2 * V + 3] = NAN;
    be_crossentropy_fwd(be, losses, maxv, sumexp, tl, logits, targets_all, BT, V, V);
    for (int i = 0; i < BT; i++)
        if (i == 2) assert_true(isnan(losses[i]));
        else assert_true(losses[i] == clean[i]);
    free(logits);
}

static void crossentropy_one_rank(void **state)
{
    one_rank(*state, V);      /* no padding */
    one_rank(*state, V - 5);  /* padding */
}

/* The parallel recipe on S slices of V/S entries each, a vocabulary of `vocab` real ids. */
static void vocab_parallel(const backend *be, int S, int vocab)
{
    int Vl = V / S;
    float *logits = tb_rand_new(BT * V, 3, -6, 6), *dloss = tb_rand_new(BT, 4, 0.1f, 1.0f);
    for (int i = 0; i < BT; i++)
        for (int j = vocab; j < V; j++) logits[i * V + j] = 30.0f;
    ce_ctx c;
    ce_init(&c, logits, vocab);
    const int32_t *targets = c.targets;

    float *sl = td_xmalloc((size_t)S * BT * Vl * sizeof(float)); /* slice s: (BT, Vl) at s * BT * Vl */
    for (int s = 0; s < S; s++)
        for (int i = 0; i < BT; i++) memcpy(sl + (s * BT + i) * Vl, logits + i * V + s * Vl, Vl * sizeof(float));
    float gmax[BT], gsum[BT], gtl[BT], part[BT], loss[BT];
    for (int i = 0; i < BT; i++) gmax[i] = -INFINITY, gsum[i] = 0.0f, gtl[i] = 0.0f;
    for (int s = 0; s < S; s++) { /* all-reduce MAX */
        be_ce_max(be, part, be_f32(sl + s * BT * Vl), BT, Vl, be_vocab_real(vocab, s * Vl, Vl));
        for (int i = 0; i < BT; i++) gmax[i] = part[i] > gmax[i] ? part[i] : gmax[i];
    }
    for (int s = 0; s < S; s++) { /* all-reduce SUM, twice */
        be_ce_sumexp(be, part, be_f32(sl + s * BT * Vl), gmax, BT, Vl, be_vocab_real(vocab, s * Vl, Vl));
        for (int i = 0; i < BT; i++) gsum[i] += part[i];
        be_ce_target(be, part, be_f32(sl + s * BT * Vl), targets, BT, Vl, s * Vl);
        for (int i = 0; i < BT; i++) gtl[i] += part[i];
    }
    be_ce_loss(be, loss, gmax, gsum, gtl, BT);
    double ref[BT], *Rd = tb_dup(dloss, BT);
    ce_ref(&c, ref);
    char name[80];
    snprintf(name, sizeof name, "loss, %d slices, vocab %d", S, vocab);
    TB_CLOSE(name, loss, ref, BT, 1e-6);

    float *dl = td_xmalloc(BT * V * sizeof(float)); /* the slices' gradients put back together */
    for (int s = 0; s < S; s++) {
        be_ce_bwd(be, sl + s * BT * Vl, gmax, gsum, targets, dloss, BT, Vl, be_vocab_real(vocab, s * Vl, Vl), s * Vl);
        for (int i = 0; i < BT; i++) memcpy(dl + i * V + s * Vl, sl + (s * BT + i) * Vl, Vl * sizeof(float));
    }
    snprintf(name, sizeof name, "dlogits, %d slices, vocab %d", S, vocab);
    TB_GRAD(name, dl, c.logits, BT * V, ce_ref, &c, Rd, BT, 1e-5);
    assert_padding_zero(dl, vocab, name);
    free(logits), free(dloss), free(sl), free(dl), free(c.logits), free(Rd);
}

static void crossentropy_vocab_parallel(void **state)
{
    for (int S = 1; S <= 4; S *= 2) {
        vocab_parallel(*state, S, V);     /* no padding */
        vocab_parallel(*state, S, V - 2); /* padding inside the last slice */
        vocab_parallel(*state, S, 7);     /* padding over several slices (with 4: two whole slices) */
    }
}

static float *dup_f(const float *x, size_t n)
{
    float *y = td_xmalloc(n * sizeof(float));
    memcpy(y, x, n * sizeof(float));
    return y;
}

/* ce_bwd_to (out of place, any dtype) gives, element for element, what ce_bwd leaves in place,
 * rounded as convert rounds: fp32 the same bits, bf16 and fp16 td_f32_to_bf16/f16 of them; the
 * logits are not changed. A slice starting at vstart 2 (one target below it, one in the padding). */
static void crossentropy_bwd_to(void **state)
{
    const backend *be = *state;
    const int32_t targets[BT] = {0, 23, 5, 11, 2, 17};
    for (int vocab = V; vocab >= V - 5; vocab -= 5) {
        float *logits = tb_rand_new(BT * V, 5, -8, 8), *dloss = tb_rand_new(BT, 6, 0.1f, 1.0f);
        float losses[BT], maxv[BT], sumexp[BT], tl[BT];
        be_crossentropy_fwd(be, losses, maxv, sumexp, tl, logits, targets, BT, V, vocab);
        float *inplace = dup_f(logits, BT * V), *keep = dup_f(logits, BT * V);
        be_ce_bwd(be, inplace, maxv, sumexp, targets, dloss, BT, V, vocab, 2);
        float *o32 = td_xmalloc(BT * V * sizeof(float));
        uint16_t *o16 = td_xmalloc(BT * V * sizeof(uint16_t));
        be->ops->ce_bwd_to(be, be_f32_out(o32), be_f32(logits), maxv, sumexp, targets, dloss, BT, V, vocab, 2);
        assert_memory_equal(o32, inplace, BT * V * sizeof(float));
        assert_memory_equal(logits, keep, BT * V * sizeof(float));
        for (int t = BE_BF16; t <= BE_F16; t++) {
            be_out o = {o16, (be_dtype)t};
            be->ops->ce_bwd_to(be, o, be_f32(logits), maxv, sumexp, targets, dloss, BT, V, vocab, 2);
            int differ = 0;
            for (int i = 0; i < BT * V; i++)
                differ += o16[i] != (t == BE_BF16 ? td_f32_to_bf16(inplace[i]) : td_f32_to_f16(inplace[i]));
            printf("  ce_bwd_to %s, vocab %d: %d of %d elements differ from ce_bwd's rounded\n",
                   be_dtype_name((be_dtype)t), vocab, differ, BT * V);
            assert_int_equal(differ, 0);
        }
        free(logits), free(dloss), free(inplace), free(keep), free(o32), free(o16);
    }
}

/* be_ce_head_bwd in a bf16 run (the gradient made by ce_bwd_to straight in bf16) gives the bits of
 * be_ce_bwd then be_matmul_bwd (which rounds the fp32 gradient into bf16 itself); in an fp32 run it
 * is those two calls. */
static void crossentropy_head_bwd_fused(void **state)
{
    (void)state;
    enum { C = 16 };
    const int32_t targets[BT] = {0, 23, 5, 11, 12, 17};
    for (int run = 0; run < 2; run++) {
        backend *be = be_create("cpu", 2); /* a run's gemm dtype is set once */
        if (run) be_set_gemm_dtype(be, BE_BF16);
        float *logits = tb_rand_new(BT * V, 7, -6, 6), *dloss = tb_rand_new(BT, 8, 0.1f, 1.0f);
        float *inp = tb_rand_new(BT * C, 9, -1, 1), *w = tb_rand_new(V * C, 10, -1, 1);
        float losses[BT], maxv[BT], sumexp[BT], tl[BT];
        be_crossentropy_fwd(be, losses, maxv, sumexp, tl, logits, targets, BT, V, V - 3);
        float *l2 = dup_f(logits, BT * V), *orig = dup_f(logits, BT * V);
        float dinp_a[BT * C] = {0}, dw_a[V * C] = {0}, dinp_b[BT * C] = {0}, dw_b[V * C] = {0};
        be_ce_bwd(be, logits, maxv, sumexp, targets, dloss, BT, V, V - 3, 0);
        be_matmul_bwd(be, dinp_a, dw_a, NULL, logits, inp, w, BT, C, V);
        be_ce_head_bwd(be, dinp_b, dw_b, be_f32_out(l2), maxv, sumexp, targets, dloss, be_f32(inp), w, BT, C, V, V - 3, 0);
        printf("  be_ce_head_bwd, %s run: dinp and dw %s\n", run ? "bf16" : "fp32",
               memcmp(dinp_a, dinp_b, sizeof dinp_a) || memcmp(dw_a, dw_b, sizeof dw_a) ? "DIFFER" : "the same bits");
        assert_memory_equal(dinp_a, dinp_b, sizeof dinp_a);
        assert_memory_equal(dw_a, dw_b, sizeof dw_a);
        /* the bf16 run took the fused path: its logits were never overwritten */
        assert_int_equal(memcmp(l2, orig, BT * V * sizeof(float)) == 0, run == 1);
        free(logits), free(dloss), free(inp), free(w), free(l2), free(orig);
        be_free(be);
    }
}

int main(void)
{
    tb_skip_unless_isa_runs();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(crossentropy_one_rank),
        cmocka_unit_test(crossentropy_nan_logit),
        cmocka_unit_test(crossentropy_bwd_to),
        cmocka_unit_test(crossentropy_head_bwd_fused),
        cmocka_unit_test(crossentropy_vocab_parallel),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
