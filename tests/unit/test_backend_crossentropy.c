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
        be_ce_max(be, part, sl + s * BT * Vl, BT, Vl, be_vocab_real(vocab, s * Vl, Vl));
        for (int i = 0; i < BT; i++) gmax[i] = part[i] > gmax[i] ? part[i] : gmax[i];
    }
    for (int s = 0; s < S; s++) { /* all-reduce SUM, twice */
        be_ce_sumexp(be, part, sl + s * BT * Vl, gmax, BT, Vl, be_vocab_real(vocab, s * Vl, Vl));
        for (int i = 0; i < BT; i++) gsum[i] += part[i];
        be_ce_target(be, part, sl + s * BT * Vl, targets, BT, Vl, s * Vl);
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

int main(void)
{
    tb_skip_unless_isa_runs();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(crossentropy_one_rank),
        cmocka_unit_test(crossentropy_nan_logit),
        cmocka_unit_test(crossentropy_vocab_parallel),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
