/* src/backend/cpu/attention.c: the causal attention core against a double-precision reference
 * (with and without attention dropout, across the query-block boundary; on a fused GPT-2 qkv and
 * grouped-query on separate strided q, k, v), the backward against central finite differences
 * of that reference, accumulation, causality, and dropout masks that do not depend on how heads
 * and batch rows are split. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
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

/* The GPT-2 layout through the general entry points: qkv (B, T, 3C), rows [q | k | v]. */
static void fwd_fused(const backend *be, float *out, float *lse, const float *qkv, int B, int T, int NH, int HS,
                      const be_drop *drop)
{
    int C = NH * HS;
    be_attention_fwd(be, out, lse, qkv, qkv + C, qkv + 2 * C, 3 * C, 3 * C, B, T, NH, NH, HS, drop);
}

static void bwd_fused(const backend *be, float *dqkv, const float *dout, const float *qkv, const float *lse, int B,
                      int T, int NH, int HS, const be_drop *drop)
{
    int C = NH * HS;
    be_attention_bwd(be, dqkv, dqkv + C, dqkv + 2 * C, dout, qkv, qkv + C, qkv + 2 * C, lse, 3 * C, 3 * C, B, T, NH,
                     NH, HS, drop);
}

typedef struct {
    const double *q, *k, *v; /* rows (B, T) of stride ldq, ldkv, ldkv */
    int ldq, ldkv, B, T, NH, NKV, HS;
    const be_drop *drop; /* NULL: none */
    double *lse;         /* (B, NH, T) written, or NULL */
    const int32_t *klen; /* (B) bidirectional over keys [0, klen[b]); NULL: causal */
    const int32_t *seg;  /* (B, T) causal over packed documents: keys [seg[b T + t], t]; NULL: none */
    double *keep;        /* (B, NH, T, T) dropout's factor of each probability, drawn at the first call
                          * (the finite differences call this hundreds of times); freed by the caller */
} att_ctx;

static void att_ref(void *vc, double *out)
{
    att_ctx *c = vc;
    int C = c->NH * c->HS, T = c->T, HS = c->HS;
    if (c->drop && c->drop->p > 0 && !c->keep) {
        c->keep = td_xmalloc((size_t)c->B * c->NH * T * T * sizeof(double));
        for (int b = 0; b < c->B; b++)
            for (int h = 0; h < c->NH; h++)
                for (int t = 0; t < T; t++)
                    for (int j = 0; j < T; j++)
                        c->keep[(((size_t)b * c->NH + h) * T + t) * T + j] =
                            be_drop_keep(c->drop, BE_DROP_ATTN, c->drop->sample[b], c->drop->pos0 + t,
                                         ((int64_t)c->drop->unit0 + h) * T + j)
                                ? 1.0 / (1.0 - c->drop->p)
                                : 0.0;
    }
    double *s = td_xmalloc((size_t)T * sizeof(double));
    for (int b = 0; b < c->B; b++)
        for (int h = 0; h < c->NH; h++)
            for (int t = 0; t < T; t++) {
                int g = h / (c->NH / c->NKV), e = c->klen ? c->klen[b] : t + 1;
                int j0 = c->seg ? c->seg[(size_t)b * T + t] : 0; /* keys before j0: probability 0 */
                const double *q = c->q + ((size_t)b * T + t) * c->ldq + h * HS;
                double m = -INFINITY, sum = 0.0;
                for (int j = j0; j < e; j++) {
                    const double *k = c->k + ((size_t)b * T + j) * c->ldkv + g * HS;
                    double d = 0.0;
                    for (int e = 0; e < HS; e++) d += q[e] * k[e];
                    s[j] = d / sqrt((double)HS);
                    m = s[j] > m ? s[j] : m;
                }
                for (int j = j0; j < e; j++) sum += s[j] = exp(s[j] - m); /* each exp once: the finite */
                if (c->lse) c->lse[((size_t)b * c->NH + h) * T + t] = m + log(sum); /* differences call this a lot */
                double *o = out + ((size_t)b * T + t) * C + h * HS;
                for (int i = 0; i < HS; i++) o[i] = 0.0;
                for (int j = j0; j < e; j++) {
                    double p = s[j] / sum;
                    if (c->keep) p *= c->keep[(((size_t)b * c->NH + h) * T + t) * T + j];
                    const double *v = c->v + ((size_t)b * T + j) * c->ldkv + g * HS;
                    for (int i = 0; i < HS; i++) o[i] += p * v[i];
                }
            }
    free(s);
}

/* Forward (out and lse) against the reference, backward against FD, accumulation: the fused
 * GPT-2 layout (NKV = NH). */
static void check_attention(const backend *be, int B, int T, int NH, int HS, const be_drop *drop, const char *what)
{
    int C = NH * HS;
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nlse = (size_t)B * NH * T;
    float *qkv = tb_rand_new(nqkv, 60, -1.5f, 1.5f), *R = tb_rand_new(nout, 61, -1, 1);
    float *out = tb_zeros(nout), *lse = tb_zeros(nlse), *dqkv = tb_zeros(nqkv);
    double *ref = td_xmalloc(nout * sizeof(double)), *lse_ref = td_xmalloc(nlse * sizeof(double));
    double *Rd = tb_dup(R, nout), *qkvd = tb_dup(qkv, nqkv);
    att_ctx c = {qkvd, qkvd + C, qkvd + 2 * C, 3 * C, 3 * C, B, T, NH, NH, HS, drop, lse_ref, NULL, NULL, NULL};
    char name[64];

    fwd_fused(be, out, lse, qkv, B, T, NH, HS, drop);
    att_ref(&c, ref);
    c.lse = NULL;
    snprintf(name, sizeof name, "attention fwd %s", what);
    TB_CLOSE(name, out, ref, nout, 1e-5);
    snprintf(name, sizeof name, "attention lse %s", what);
    TB_CLOSE(name, lse, lse_ref, nlse, 1e-5);

    bwd_fused(be, dqkv, R, qkv, lse, B, T, NH, HS, drop);
    snprintf(name, sizeof name, "attention dqkv %s", what);
    TB_GRAD(name, dqkv, qkvd, nqkv, att_ref, &c, Rd, nout, 1e-4);
    float *once = tb_copy(dqkv, nqkv);
    bwd_fused(be, dqkv, R, qkv, lse, B, T, NH, HS, drop);
    tb_check_doubled(name, once, dqkv, nqkv);

    free(qkv), free(R), free(out), free(lse), free(dqkv), free(ref), free(lse_ref), free(Rd), free(qkvd);
    free(once), free(c.keep);
}

/* Grouped-query attention on separate q, k, v buffers whose rows carry pad extra columns (which
 * must get no gradient): forward and lse against the reference, dq, dk, dv against FD,
 * accumulation, and NULL gradients skipped. */
static void check_gqa_seg(const backend *be, int B, int T, int NH, int NKV, int HS, int pad, const int32_t *klen,
                          const int32_t *seg, const be_drop *drop, const char *what)
{
    int C = NH * HS, ldq = C + pad, ldkv = NKV * HS + pad;
    size_t nq = (size_t)B * T * ldq, nkv = (size_t)B * T * ldkv, nout = (size_t)B * T * C, nlse = (size_t)B * NH * T;
    float *q = tb_rand_new(nq, 62, -1.5f, 1.5f), *k = tb_rand_new(nkv, 63, -1.5f, 1.5f);
    float *v = tb_rand_new(nkv, 64, -1.5f, 1.5f), *R = tb_rand_new(nout, 65, -1, 1);
    float *out = tb_zeros(nout), *lse = tb_zeros(nlse), *dq = tb_zeros(nq), *dk = tb_zeros(nkv), *dv = tb_zeros(nkv);
    double *ref = td_xmalloc(nout * sizeof(double)), *lse_ref = td_xmalloc(nlse * sizeof(double));
    double *Rd = tb_dup(R, nout), *qd = tb_dup(q, nq), *kd = tb_dup(k, nkv), *vd = tb_dup(v, nkv);
    att_ctx c = {qd, kd, vd, ldq, ldkv, B, T, NH, NKV, HS, drop, lse_ref, klen, seg, NULL};
    char name[80];

    be_attention_fwd_seg(be, out, lse, q, k, v, ldq, ldkv, B, T, NH, NKV, HS, klen, seg, drop);
    att_ref(&c, ref);
    c.lse = NULL;
    snprintf(name, sizeof name, "gqa fwd %s", what);
    TB_CLOSE(name, out, ref, nout, 1e-5);
    snprintf(name, sizeof name, "gqa lse %s", what);
    TB_CLOSE(name, lse, lse_ref, nlse, 1e-5);

    be_attention_bwd_seg(be, dq, dk, dv, R, q, k, v, lse, ldq, ldkv, B, T, NH, NKV, HS, klen, seg, drop);
    snprintf(name, sizeof name, "gqa dq %s", what);
    TB_GRAD(name, dq, qd, nq, att_ref, &c, Rd, nout, 1e-4);
    snprintf(name, sizeof name, "gqa dk %s", what);
    TB_GRAD(name, dk, kd, nkv, att_ref, &c, Rd, nout, 1e-4);
    snprintf(name, sizeof name, "gqa dv %s", what);
    TB_GRAD(name, dv, vd, nkv, att_ref, &c, Rd, nout, 1e-4);

    float *dq1 = tb_copy(dq, nq), *dk1 = tb_copy(dk, nkv), *dv1 = tb_copy(dv, nkv);
    be_attention_bwd_seg(be, dq, dk, dv, R, q, k, v, lse, ldq, ldkv, B, T, NH, NKV, HS, klen, seg, drop);
    tb_check_doubled("gqa dq", dq1, dq, nq);
    tb_check_doubled("gqa dk", dk1, dk, nkv);
    tb_check_doubled("gqa dv", dv1, dv, nkv);
    /* each gradient alone is the same as with the others */
    float *g = tb_zeros(nq > nkv ? nq : nkv);
    be_attention_bwd_seg(be, g, NULL, NULL, R, q, k, v, lse, ldq, ldkv, B, T, NH, NKV, HS, klen, seg, drop);
    assert_memory_equal(g, dq1, nq * sizeof(float));
    memset(g, 0, nkv * sizeof(float));
    be_attention_bwd_seg(be, NULL, g, NULL, R, q, k, v, lse, ldq, ldkv, B, T, NH, NKV, HS, klen, seg, drop);
    assert_memory_equal(g, dk1, nkv * sizeof(float));
    memset(g, 0, nkv * sizeof(float));
    be_attention_bwd_seg(be, NULL, NULL, g, R, q, k, v, lse, ldq, ldkv, B, T, NH, NKV, HS, klen, seg, drop);
    assert_memory_equal(g, dv1, nkv * sizeof(float));

    free(q), free(k), free(v), free(R), free(out), free(lse), free(dq), free(dk), free(dv), free(ref), free(lse_ref);
    free(Rd), free(qd), free(kd), free(vd), free(dq1), free(dk1), free(dv1), free(g), free(c.keep);
}

static void check_gqa_masked(const backend *be, int B, int T, int NH, int NKV, int HS, int pad, const int32_t *klen,
                             const be_drop *drop, const char *what)
{
    check_gqa_seg(be, B, T, NH, NKV, HS, pad, klen, NULL, drop, what);
}

/* seg (B, T) of documents of the given lengths, cycled from lens[b % n] for row b. */
static int32_t *seg_of(int B, int T, const int *lens, int n)
{
    int32_t *seg = td_xmalloc((size_t)B * T * sizeof(int32_t));
    for (int b = 0; b < B; b++)
        for (int t = 0, s0 = 0, k = b % n, left = lens[k]; t < T; t++, left--) {
            if (left == 0) s0 = t, k = (k + 1) % n, left = lens[k];
            seg[(size_t)b * T + t] = s0;
        }
    return seg;
}

/* Packed documents (--reset-attention-mask): against the reference (query t reads keys
 * [seg[t], t]) and FD; many short documents, one-token ones, boundaries on and beside the
 * kernel's 64-row query blocks, GQA, dropout. */
static void attention_packed(void **state)
{
    const int64_t sample[2] = {3, 11};
    be_drop drop = {.p = 0.2f, .seed = 5, .sample = sample, .site = 2, .pos0 = 0, .unit0 = 1};
    const int shortd[] = {2, 1, 3}, edges[] = {64, 1, 63, 2}, edges2[] = {65, 63, 2};
    int32_t *s1 = seg_of(2, 9, shortd, 3), *s2 = seg_of(2, 130, edges, 4), *s3 = seg_of(1, 130, edges2, 3);
    check_gqa_seg(*state, 2, 9, 2, 2, 3, 1, NULL, s1, NULL, "(packed, documents 2 1 3)");
    check_gqa_seg(*state, 2, 9, 4, 2, 3, 0, NULL, s1, &drop, "(packed GQA, p 0.2)");
    check_gqa_seg(*state, 2, 130, 2, 1, 2, 0, NULL, s2, &drop, "(packed T130, boundaries at 64 and 128, p 0.2)");
    check_gqa_seg(*state, 1, 130, 2, 2, 2, 1, NULL, s3, NULL, "(packed T130, boundaries at 65 and 128)");
    free(s1), free(s2), free(s3);
}

/* One document (seg all 0) is today's causal attention bit for bit: out, lse and gradients. */
static void attention_packed_one(void **state)
{
    const backend *be = *state;
    enum { B = 2, T = 70, NH = 4, NKV = 2, HS = 3, ldq = NH * HS, ldkv = NKV * HS };
    const int64_t sample[B] = {8, 9};
    be_drop drop = {.p = 0.1f, .seed = 4, .sample = sample, .site = 3, .pos0 = 0, .unit0 = 2};
    size_t nq = (size_t)B * T * ldq, nkv = (size_t)B * T * ldkv, nl = (size_t)B * NH * T;
    float *q = tb_rand_new(nq, 80, -1.5f, 1.5f), *k = tb_rand_new(nkv, 81, -1.5f, 1.5f);
    float *v = tb_rand_new(nkv, 82, -1.5f, 1.5f), *R = tb_rand_new(nq, 83, -1, 1);
    int32_t *zero = td_xcalloc((size_t)B * T, sizeof(int32_t));
    float *o[2], *l[2], *g[2][3];
    for (int w = 0; w < 2; w++) {
        o[w] = tb_zeros(nq), l[w] = tb_zeros(nl);
        g[w][0] = tb_zeros(nq), g[w][1] = tb_zeros(nkv), g[w][2] = tb_zeros(nkv);
        be_attention_fwd_seg(be, o[w], l[w], q, k, v, ldq, ldkv, B, T, NH, NKV, HS, NULL, w ? zero : NULL, &drop);
        be_attention_bwd_seg(be, g[w][0], g[w][1], g[w][2], R, q, k, v, l[w], ldq, ldkv, B, T, NH, NKV, HS, NULL,
                             w ? zero : NULL, &drop);
    }
    assert_memory_equal(o[0], o[1], nq * sizeof(float));
    assert_memory_equal(l[0], l[1], nl * sizeof(float));
    assert_memory_equal(g[0][0], g[1][0], nq * sizeof(float));
    assert_memory_equal(g[0][1], g[1][1], nkv * sizeof(float));
    assert_memory_equal(g[0][2], g[1][2], nkv * sizeof(float));
    printf("  attention: one packed document is the causal attention bit for bit\n");
    for (int w = 0; w < 2; w++) free(o[w]), free(l[w]), free(g[w][0]), free(g[w][1]), free(g[w][2]);
    free(q), free(k), free(v), free(R), free(zero);
}

static void check_gqa(const backend *be, int B, int T, int NH, int NKV, int HS, int pad, const be_drop *drop,
                      const char *what)
{
    check_gqa_masked(be, B, T, NH, NKV, HS, pad, NULL, drop, what);
}

/* BERT's bidirectional attention over each sample's unpadded keys: against the reference (every
 * query, padded ones included, reads keys [0, klen[b])) and FD, across the query-block boundary. */
static void attention_bidirectional(void **state)
{
    const int64_t sample[3] = {3, 4, 9};
    const int32_t klen[3] = {5, 2, 1}, klen_long[1] = {67};
    be_drop drop = {.p = 0.2f, .seed = 5, .sample = sample, .site = 2, .pos0 = 0, .unit0 = 1};
    check_gqa_masked(*state, 3, 5, 2, 2, 3, 0, klen, NULL, "(bidirectional, lengths 5 2 1)");
    check_gqa_masked(*state, 3, 5, 4, 2, 3, 1, klen, &drop, "(bidirectional GQA, p 0.2)");
    check_gqa_masked(*state, 1, 70, 2, 1, 2, 0, klen_long, &drop, "(bidirectional T70 length 67, p 0.2)");
}

/* Changing a padded token (at or past klen) changes no output of the unpadded queries, and no
 * gradient flows to its keys and values. */
static void attention_padding(void **state)
{
    const backend *be = *state;
    enum { B = 2, T = 9, NH = 2, HS = 4, C = NH * HS };
    const int32_t klen[B] = {6, 9};
    const int64_t sample[B] = {5, 6};
    be_drop drop = {.p = 0.25f, .seed = 1, .sample = sample, .site = 0, .pos0 = 0, .unit0 = 0};
    float *qkv = tb_rand_new(B * T * 3 * C, 72, -1, 1), out0[B * T * C], out1[B * T * C], lse[B * NH * T];
    be_attention_fwd_masked(be, out0, lse, qkv, qkv + C, qkv + 2 * C, 3 * C, 3 * C, B, T, NH, NH, HS, klen, &drop);
    for (int j = C; j < 3 * C; j++) qkv[7 * 3 * C + j] += 0.5f + (float)j; /* k, v of sample 0's position 7 */
    be_attention_fwd_masked(be, out1, lse, qkv, qkv + C, qkv + 2 * C, 3 * C, 3 * C, B, T, NH, NH, HS, klen, &drop);
    assert_memory_equal(out0, out1, sizeof out0);
    float *dout = tb_rand_new(B * T * 3 * C, 73, -1, 1), *dqkv = tb_zeros(B * T * 3 * C);
    be_attention_bwd_masked(be, dqkv, dqkv + C, dqkv + 2 * C, dout, qkv, qkv + C, qkv + 2 * C, lse, 3 * C, 3 * C, B,
                            T, NH, NH, HS, klen, &drop);
    for (int t = 6; t < T; t++)
        for (int j = C; j < 3 * C; j++) assert_true(dqkv[t * 3 * C + j] == 0.0f);
    printf("  attention: padded keys change nothing and get no gradient\n");
    free(qkv), free(dout), free(dqkv);
}

static void attention_gqa(void **state)
{
    const int64_t sample[2] = {3, 4};
    be_drop drop = {.p = 0.2f, .seed = 5, .sample = sample, .site = 2, .pos0 = 0, .unit0 = 1};
    check_gqa(*state, 2, 5, 4, 2, 3, 2, NULL, "(NH4 NKV2, pad 2)");
    check_gqa(*state, 2, 5, 4, 1, 3, 1, NULL, "(NH4 NKV1, pad 1)");
    check_gqa(*state, 2, 5, 4, 2, 3, 0, &drop, "(NH4 NKV2, p 0.2)");
    check_gqa(*state, 1, 67, 4, 1, 2, 3, &drop, "(NH4 NKV1, T67, p 0.2)");
    check_gqa(*state, 1, 6, 3, 3, 4, 5, NULL, "(NH3 NKV3, separate)");
}

static void attention_small(void **state) { check_attention(*state, 2, 5, 2, 3, NULL, "(B2 T5 NH2 HS3)"); }

static void attention_dropout(void **state)
{
    const int64_t sample[2] = {7, 1000000000123LL};
    be_drop drop = {.p = 0.3f, .seed = 99, .sample = sample, .site = 5, .pos0 = 0, .unit0 = 3};
    check_attention(*state, 2, 5, 2, 3, &drop, "(p 0.3)");
    be_drop zero = drop;
    zero.p = 0.0f;
    check_attention(*state, 2, 5, 2, 3, &zero, "(p 0)");
}

/* T > the kernel's query block (64): the blocks and the causal key ranges meet correctly. */
static void attention_blocked(void **state)
{
    const int64_t sample[1] = {42};
    be_drop drop = {.p = 0.2f, .seed = 3, .sample = sample, .site = 1, .pos0 = 0, .unit0 = 0};
    check_attention(*state, 1, 70, 1, 2, &drop, "(T70, p 0.2)");
}

/* Changing token u changes no output before u; gradients flowing from outputs before u give
 * token u exactly nothing. */
static void attention_causal(void **state)
{
    const backend *be = *state;
    enum { B = 1, T = 9, NH = 2, HS = 4, C = NH * HS, U = 6 };
    const int64_t sample[1] = {5};
    be_drop drop = {.p = 0.25f, .seed = 1, .sample = sample, .site = 0, .pos0 = 0, .unit0 = 0};
    float *qkv = tb_rand_new(B * T * 3 * C, 70, -1, 1), out0[B * T * C], out1[B * T * C], lse[B * NH * T];
    fwd_fused(be, out0, lse, qkv, B, T, NH, HS, &drop);
    for (int j = 0; j < 3 * C; j++) qkv[U * 3 * C + j] += 0.5f + (float)j;
    fwd_fused(be, out1, lse, qkv, B, T, NH, HS, &drop);
    assert_memory_equal(out0, out1, (size_t)U * C * sizeof(float));
    int changed = 0;
    for (int i = U * C; i < T * C; i++) changed |= out0[i] != out1[i];
    assert_true(changed);

    float *dout = tb_rand_new(B * T * C, 71, -1, 1), *dqkv = tb_zeros(B * T * 3 * C);
    memset(dout + U * C, 0, (size_t)(T - U) * C * sizeof(float));
    bwd_fused(be, dqkv, dout, qkv, lse, B, T, NH, HS, &drop);
    for (int i = U * 3 * C; i < T * 3 * C; i++) assert_true(dqkv[i] == 0.0f);
    printf("  attention: past outputs bitwise unchanged by a future token; no gradient flows back to it\n");
    free(qkv), free(dout), free(dqkv);
}

/* The attention dropout mask is keyed by global head and sample: two ranks holding two heads
 * each, or one batch row each, compute exactly the slices of the whole. */
static void attention_dropout_layout_invariant(void **state)
{
    const backend *be = *state;
    enum { B = 2, T = 7, NH = 4, HS = 3, C = NH * HS, HN = 2, HC = HN * HS };
    const int64_t sample[B] = {11, 12};
    be_drop drop = {.p = 0.5f, .seed = 77, .sample = sample, .site = 9, .pos0 = 0, .unit0 = 0};
    float *qkv = tb_rand_new(B * T * 3 * C, 80, -1, 1), out[B * T * C], lse[B * NH * T];
    fwd_fused(be, out, lse, qkv, B, T, NH, HS, &drop);

    /* split by heads: rank r holds heads [2r, 2r+2), its own qkv columns */
    for (int r = 0; r < 2; r++) {
        float part[B * T * 3 * HC], pout[B * T * HC], plse[B * HN * T];
        for (int bt = 0; bt < B * T; bt++)
            for (int s = 0; s < 3; s++)
                memcpy(part + bt * 3 * HC + s * HC, qkv + bt * 3 * C + s * C + r * HC, HC * sizeof(float));
        be_drop d = drop;
        d.unit0 = r * HN;
        fwd_fused(be, pout, plse, part, B, T, HN, HS, &d);
        for (int bt = 0; bt < B * T; bt++)
            for (int e = 0; e < HC; e++) assert_true(fabsf(pout[bt * HC + e] - out[bt * C + r * HC + e]) <= 1e-6f);
    }
    /* split by batch rows: rank b holds row b with its own global sample index */
    for (int b = 0; b < B; b++) {
        float pout[T * C], plse[NH * T];
        be_drop d = drop;
        d.sample = sample + b;
        fwd_fused(be, pout, plse, qkv + b * T * 3 * C, 1, T, NH, HS, &d);
        for (int i = 0; i < T * C; i++) assert_true(fabsf(pout[i] - out[b * T * C + i]) <= 1e-6f);
    }
    /* and a different seed gives a different mask */
    float other[B * T * C];
    drop.seed = 78;
    fwd_fused(be, other, lse, qkv, B, T, NH, HS, &drop);
    assert_true(memcmp(other, out, sizeof other) != 0);
    printf("  attention dropout: head slices and batch-row slices equal the whole (to 1e-6)\n");
    free(qkv);
}

int main(void)
{
    tb_skip_unless_isa_runs();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(attention_small),
        cmocka_unit_test(attention_dropout),
        cmocka_unit_test(attention_blocked),
        cmocka_unit_test(attention_gqa),
        cmocka_unit_test(attention_causal),
        cmocka_unit_test(attention_bidirectional),
        cmocka_unit_test(attention_padding),
        cmocka_unit_test(attention_packed),
        cmocka_unit_test(attention_packed_one),
        cmocka_unit_test(attention_dropout_layout_invariant),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
