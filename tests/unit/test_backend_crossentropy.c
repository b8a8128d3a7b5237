/* src/backend/cpu/crossentropy.c: softmax cross-entropy against a double-precision reference,
 * the fused in-place backward against finite differences, and the vocab-parallel steps over
 * 2 and 4 slices (max, sum of exp and target logit combined by hand, as the all-reduces
 * would) against the one-slice result. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "test_backend_util.h"

static int setup(void **state)
{
    *state = be_cpu(2);
    return 0;
}

static int teardown(void **state)
{
    be_free(*state);
    return 0;
}

enum { BT = 6, V = 24 }; /* V: the padded vocabulary, a multiple of 4 slices */
static const int32_t targets[BT] = {0, 23, 5, 11, 12, 17};

typedef struct {
    double *logits; /* (BT, V) */
} ce_ctx;

static void ce_ref(void *vc, double *loss)
{
    ce_ctx *c = vc;
    for (int i = 0; i < BT; i++) {
        const double *l = c->logits + i * V;
        double m = -INFINITY, s = 0.0;
        for (int j = 0; j < V; j++) m = l[j] > m ? l[j] : m;
        for (int j = 0; j < V; j++) s += exp(l[j] - m);
        loss[i] = log(s) + m - l[targets[i]];
    }
}

static void crossentropy_one_rank(void **state)
{
    const backend *be = *state;
    float *logits = tb_rand_new(BT * V, 1, -8, 8), *dloss = tb_rand_new(BT, 2, 0.1f, 1.0f);
    float losses[BT], maxv[BT], sumexp[BT], tl[BT];
    ce_ctx c = {tb_dup(logits, BT * V)};
    double ref[BT], *Rd = tb_dup(dloss, BT);

    be_crossentropy_fwd(be, losses, maxv, sumexp, tl, logits, targets, BT, V);
    ce_ref(&c, ref);
    TB_CLOSE("crossentropy loss", losses, ref, BT, 1e-6);
    be_ce_bwd(be, logits, maxv, sumexp, targets, dloss, BT, V, 0);
    TB_GRAD("crossentropy dlogits (in place)", logits, c.logits, BT * V, ce_ref, &c, Rd, BT, 1e-5);

    /* large logits: the max subtraction keeps it finite and exact */
    float big[BT * V];
    for (int i = 0; i < BT * V; i++) big[i] = 80.0f + (float)c.logits[i];
    be_crossentropy_fwd(be, losses, maxv, sumexp, tl, big, targets, BT, V);
    TB_CLOSE("crossentropy loss (logits + 80)", losses, ref, BT, 1e-5);
    free(logits), free(dloss), free(c.logits), free(Rd);
}

/* The parallel recipe on S slices of V/S entries each. */
static void vocab_parallel(const backend *be, int S)
{
    int Vl = V / S;
    float *logits = tb_rand_new(BT * V, 3, -6, 6), *dloss = tb_rand_new(BT, 4, 0.1f, 1.0f);
    float loss1[BT], max1[BT], sum1[BT], tl1[BT];
    be_crossentropy_fwd(be, loss1, max1, sum1, tl1, logits, targets, BT, V);
    float *dl1 = tb_copy(logits, BT * V);
    be_ce_bwd(be, dl1, max1, sum1, targets, dloss, BT, V, 0);

    float *sl = td_xmalloc((size_t)S * BT * Vl * sizeof(float)); /* slice s: (BT, Vl) at s * BT * Vl */
    for (int s = 0; s < S; s++)
        for (int i = 0; i < BT; i++) memcpy(sl + (s * BT + i) * Vl, logits + i * V + s * Vl, Vl * sizeof(float));
    float gmax[BT], gsum[BT], gtl[BT], part[BT], loss[BT];
    for (int i = 0; i < BT; i++) gmax[i] = -INFINITY, gsum[i] = 0.0f, gtl[i] = 0.0f;
    for (int s = 0; s < S; s++) { /* all-reduce MAX */
        be_ce_max(be, part, sl + s * BT * Vl, BT, Vl);
        for (int i = 0; i < BT; i++) gmax[i] = part[i] > gmax[i] ? part[i] : gmax[i];
    }
    for (int s = 0; s < S; s++) { /* all-reduce SUM, twice */
        be_ce_sumexp(be, part, sl + s * BT * Vl, gmax, BT, Vl);
        for (int i = 0; i < BT; i++) gsum[i] += part[i];
        be_ce_target(be, part, sl + s * BT * Vl, targets, BT, Vl, s * Vl);
        for (int i = 0; i < BT; i++) gtl[i] += part[i];
    }
    be_ce_loss(be, loss, gmax, gsum, gtl, BT);
    double ref[BT], dref[BT * V];
    for (int i = 0; i < BT; i++) ref[i] = loss1[i];
    for (int i = 0; i < BT * V; i++) dref[i] = dl1[i];
    char name[64];
    snprintf(name, sizeof name, "vocab-parallel loss, %d slices", S);
    TB_CLOSE(name, loss, ref, BT, 1e-6);

    float *dl = td_xmalloc(BT * V * sizeof(float)); /* the slices' gradients put back together */
    for (int s = 0; s < S; s++) {
        be_ce_bwd(be, sl + s * BT * Vl, gmax, gsum, targets, dloss, BT, Vl, s * Vl);
        for (int i = 0; i < BT; i++) memcpy(dl + i * V + s * Vl, sl + (s * BT + i) * Vl, Vl * sizeof(float));
    }
    snprintf(name, sizeof name, "vocab-parallel dlogits, %d slices", S);
    TB_CLOSE(name, dl, dref, BT * V, 1e-6);
    free(logits), free(dloss), free(dl1), free(sl), free(dl);
}

static void crossentropy_vocab_parallel(void **state)
{
    vocab_parallel(*state, 2);
    vocab_parallel(*state, 4);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(crossentropy_one_rank),
        cmocka_unit_test(crossentropy_vocab_parallel),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
