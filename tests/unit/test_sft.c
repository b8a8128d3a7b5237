/* SFT samples in training (train --sft): a row cut and padded from a sample and its answer mask
 * against a hand-worked one; the batch source over an indexed dataset and its mask sidecar written
 * here (each sample once an epoch, its rows, the weight that makes the loss the mean over the
 * counted targets); and a tiny model's loss of the source's micro-batch against the mean of its
 * per-token losses over the answer's targets, picked in the test from the masks it wrote. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "backend/backend.h"
#include "trident/batch_source.h"
#include "trident/comm.h"
#include "trident/gpt.h"
#include "trident/indexed.h"
#include "trident/parallel_state.h"
#include "trident/sft.h"
#include "trident/sft_source.h"

static comm *g_world;
static ps_state *g_ps;
static backend *g_be;

enum { S = 8, PAD = 0, NDOC = 5 };

/* Hand-worked: a sample of 6 tokens 11..16 whose answer is its last 3 (mask 0 0 0 1 1 1).
 * seq 8: ids 11..16 then padding; target t is token t + 1, counted where that token is the
 * answer's (t = 2, 3, 4); past the end nothing counts. seq 3: the first 4 tokens kept (cut at the
 * right), targets 12 13 14, only the last (14, mask 1) counted. */
static void row_by_hand(void **state)
{
    (void)state;
    const int32_t toks[6] = {11, 12, 13, 14, 15, 16}, am[6] = {0, 0, 0, 1, 1, 1};
    int32_t ids[8], tg[8];
    float mk[8];
    assert_int_equal(sft_row(toks, am, 6, 8, 1, PAD, ids, tg, mk), 3);
    const int32_t want_ids[8] = {11, 12, 13, 14, 15, 16, PAD, PAD}, want_tg[8] = {12, 13, 14, 15, 16, PAD, PAD, PAD};
    const float want_mk[8] = {0, 0, 1, 1, 1, 0, 0, 0};
    assert_memory_equal(ids, want_ids, sizeof ids);
    assert_memory_equal(tg, want_tg, sizeof tg);
    assert_memory_equal(mk, want_mk, sizeof mk);
    /* every target of the sample when not answer-only: 5 */
    assert_int_equal(sft_row(toks, am, 6, 8, 0, PAD, ids, tg, mk), 5);
    const float all_mk[8] = {1, 1, 1, 1, 1, 0, 0, 0};
    assert_memory_equal(mk, all_mk, sizeof mk);
    /* cut: seq 3 keeps 11 12 13 14 */
    assert_int_equal(sft_row(toks, am, 6, 3, 1, PAD, ids, tg, mk), 1);
    const int32_t cut_ids[3] = {11, 12, 13}, cut_tg[3] = {12, 13, 14};
    const float cut_mk[3] = {0, 0, 1};
    assert_memory_equal(ids, cut_ids, sizeof cut_ids);
    assert_memory_equal(tg, cut_tg, sizeof cut_tg);
    assert_memory_equal(mk, cut_mk, sizeof cut_mk);
}

/* The samples written: sample k of LEN[k] tokens, its first token 20 + k (so a row names its
 * sample), the answer from ANS[k] on. Sample 2 is longer than S + 1 and is cut. */
static const int LEN[NDOC] = {5, 9, 12, 3, 7}, ANS[NDOC] = {2, 4, 10, 1, 6};

static int32_t tok_of(int k, int t) { return t == 0 ? 20 + k : (int32_t)((k * 7 + t * 3) % 19 + 1); }

static char g_prefix[256];

static void write_samples(void)
{
    char dir[] = "/tmp/test_sft_XXXXXX", err[256];
    assert_non_null(mkdtemp(dir));
    snprintf(g_prefix, sizeof g_prefix, "%s/d_sft_document", dir);
    char *mp = sft_mask_prefix(g_prefix);
    idx_writer *tw = idx_writer_open(g_prefix, IDX_U16, err, sizeof err), *mw = idx_writer_open(mp, IDX_U8, err, sizeof err);
    assert_non_null(tw);
    assert_non_null(mw);
    for (int k = 0; k < NDOC; k++) {
        int32_t t[16], m[16];
        for (int i = 0; i < LEN[k]; i++) t[i] = tok_of(k, i), m[i] = i >= ANS[k];
        assert_int_equal(idx_writer_add(tw, t, (size_t)LEN[k], err, sizeof err), 0);
        assert_int_equal(idx_writer_add(mw, m, (size_t)LEN[k], err, sizeof err), 0);
    }
    assert_int_equal(idx_writer_finish(tw, err, sizeof err), 0);
    assert_int_equal(idx_writer_finish(mw, err, sizeof err), 0);
    free(mp);
}

static gpt_config tiny_config(void)
{
    gpt_config c = {0};
    c.num_layers = 2, c.hidden = 16, c.heads = 4, c.ffn = 64, c.seq = S, c.max_pos = S, c.vocab = 40;
    c.padded_vocab = gpt_padded_vocab(c.vocab, 8, 1);
    c.init_std = 0.2f, c.seed = 5;
    return c;
}

static void *open_packed(const gpt_config *c, int mbs, int num_micro, int packed, int answer_only)
{
    char *paths[1] = {g_prefix};
    gptds_config dc = {.n = 1, .paths = paths, .split = "100,0,0", .seed = 1234, .seq_length = S};
    return sft_source_open(&dc, c, answer_only, SFT_TRUNC_RIGHT, packed, packed, PAD, mbs, num_micro, 1, 0, 0);
}

static void *open_source(const gpt_config *c, int mbs, int num_micro) { return open_packed(c, mbs, num_micro, 0, 1); }

/* The sample a row holds, by its first token. */
static int sample_of(const int32_t *row)
{
    int k = row[0] - 20;
    assert_true(k >= 0 && k < NDOC);
    return k;
}

/* sft_truncate against Megatron-Bridge's _multiple_truncation worked by hand. */
static void check_trunc(const int32_t *toks, const int32_t *am, int64_t len, int64_t budget, sft_trunc how,
                        const int32_t *want, int64_t want_len)
{
    int32_t t[16], m[16];
    memcpy(t, toks, (size_t)len * sizeof *t);
    memcpy(m, am, (size_t)len * sizeof *m);
    assert_int_equal(sft_truncate(t, m, len, budget, how), want_len);
    assert_memory_equal(t, want, (size_t)want_len * sizeof *t);
    for (int64_t i = 0; i < want_len; i++) assert_int_equal(m[i], am[want[i] - 1]); /* each token keeps its mark */
}

/* A prompt/response sample: "Q:" (tokens 1 2), the truncation field (3..7, mask 2), "A:" (8 9),
 * the answer and EOD (10 11 12, mask 1). Budget 9 (3 too many): the field alone gives 3 — right
 * keeps its first 2 (3 4), left its last 2 (6 7); the answer is whole. Budget 5 (7 too many): the
 * field gives all 5, the 2 left come off the sample's end (right: the answer's 11 12) or start
 * (left: "Q:"). Two fields (2 2 2 and 3 3 3, 10 tokens, budget 7): 3 shared 2 then 1. A field
 * shorter than its share (one token, share 2 of 4) gives what it has; the rest of the sample gives
 * the remainder. A chat sample (no field) loses its end or start. Then sft_row over what remains:
 * the answer-only targets are the answer's, never the field's. */
static void truncate_by_hand(void **state)
{
    (void)state;
    const int32_t a[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, am[12] = {0, 0, 2, 2, 2, 2, 2, 0, 0, 1, 1, 1};
    check_trunc(a, am, 12, 12, SFT_TRUNC_RIGHT, a, 12);
    check_trunc(a, am, 12, 9, SFT_TRUNC_RIGHT, (const int32_t[]){1, 2, 3, 4, 8, 9, 10, 11, 12}, 9);
    check_trunc(a, am, 12, 9, SFT_TRUNC_LEFT, (const int32_t[]){1, 2, 6, 7, 8, 9, 10, 11, 12}, 9);
    check_trunc(a, am, 12, 5, SFT_TRUNC_RIGHT, (const int32_t[]){1, 2, 8, 9, 10}, 5);
    check_trunc(a, am, 12, 5, SFT_TRUNC_LEFT, (const int32_t[]){8, 9, 10, 11, 12}, 5);
    const int32_t b[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, bm[10] = {0, 2, 2, 2, 0, 3, 3, 3, 1, 1};
    check_trunc(b, bm, 10, 7, SFT_TRUNC_RIGHT, (const int32_t[]){1, 2, 5, 6, 7, 9, 10}, 7);
    check_trunc(b, bm, 10, 7, SFT_TRUNC_LEFT, (const int32_t[]){1, 4, 5, 7, 8, 9, 10}, 7);
    const int32_t c[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, cm[9] = {0, 2, 0, 3, 3, 3, 3, 1, 1};
    check_trunc(c, cm, 9, 5, SFT_TRUNC_RIGHT, (const int32_t[]){1, 3, 4, 5, 8}, 5);
    check_trunc(c, cm, 9, 5, SFT_TRUNC_LEFT, (const int32_t[]){3, 6, 7, 8, 9}, 5);
    const int32_t d[6] = {1, 2, 3, 4, 5, 6}, dm[6] = {0, 0, 0, 1, 1, 1};
    check_trunc(d, dm, 6, 4, SFT_TRUNC_RIGHT, (const int32_t[]){1, 2, 3, 4}, 4);
    check_trunc(d, dm, 6, 4, SFT_TRUNC_LEFT, (const int32_t[]){3, 4, 5, 6}, 4);
    /* seq 8 over the budget-9 right cut: targets 2 3 4 8 9 10 11 12 (marks 0 2 2 0 0 1 1 1 at t + 1):
     * the last three counted */
    int32_t t[12], m[12], ids[8], tg[8];
    float mk[8];
    memcpy(t, a, sizeof a), memcpy(m, am, sizeof am);
    int64_t n = sft_truncate(t, m, 12, 9, SFT_TRUNC_RIGHT);
    assert_int_equal(sft_row(t, m, n, 8, 1, PAD, ids, tg, mk), 3);
    const float want_mk[8] = {0, 0, 0, 0, 0, 1, 1, 1};
    const int32_t want_tg[8] = {2, 3, 4, 8, 9, 10, 11, 12};
    assert_memory_equal(mk, want_mk, sizeof mk);
    assert_memory_equal(tg, want_tg, sizeof tg);
    assert_int_equal(sft_row(t, m, n, 8, 0, PAD, ids, tg, mk), 8); /* every target, the field's too */
}

/* Two iterations of 2 micro-batches of 2 rows (8 rows): the first 5 are the 5 samples in some
 * order, the next 3 of the second epoch; each row is its sample cut/padded with the answer's
 * targets counted, and the weight is all targets / counted ones. */
static void source_rows(void **state)
{
    (void)state;
    gpt_config c = tiny_config();
    void *src = open_source(&c, 2, 2);
    assert_int_equal(sft_source_ops.num_samples(src, GPTDS_TRAIN), NDOC);
    assert_int_equal(sft_source_ops.num_samples(src, GPTDS_VALID), 0);
    int seen[NDOC] = {0}, row = 0;
    for (int it = 0; it < 2; it++) {
        gpt_batch micro[2];
        sft_source_ops.begin(src, GPTDS_TRAIN, it * 4, g_ps->dp_group, micro);
        int counted = 0;
        for (int m = 0; m < 2; m++)
            for (int j = 0; j < 2; j++, row++) {
                const int32_t *ids = micro[m].ids + j * S, *tg = micro[m].targets + j * S;
                const float *mk = micro[m].loss_mask + j * S;
                int k = sample_of(ids);
                if (row < NDOC) seen[k]++;
                int n = LEN[k] < S + 1 ? LEN[k] : S + 1;
                for (int t = 0; t < S; t++) {
                    assert_int_equal(ids[t], t < n ? tok_of(k, t) : PAD);
                    assert_int_equal(tg[t], t + 1 < n ? tok_of(k, t + 1) : PAD);
                    float want = t + 1 < n && t + 1 >= ANS[k] ? 1.0f : 0.0f;
                    assert_true(mk[t] == want);
                    counted += want > 0;
                }
            }
        assert_true(fabsf(micro[0].token_weight - (float)(4.0 * S / counted)) < 1e-6f);
        assert_true(micro[1].token_weight == micro[0].token_weight);
    }
    for (int k = 0; k < NDOC; k++) assert_int_equal(seen[k], 1);
    sft_source_ops.close(src);
}

/* The loss of one micro-batch of all 5 samples from the source: token_weight x the masked sum, over
 * the head's divisor (B x S), is the mean of the per-token losses (no mask) over the targets that
 * are the answer's, picked here from LEN and ANS. */
static void answer_only_loss(void **state)
{
    (void)state;
    gpt_config c = tiny_config();
    void *src = open_source(&c, NDOC, 1);
    gpt_batch in;
    sft_source_ops.begin(src, GPTDS_TRAIN, 0, g_ps->dp_group, &in);
    gpt_model *m = gpt_create(&c, g_ps, g_be, 0, c.num_layers, NDOC, 1);
    float losses[NDOC * S];
    gpt_batch plain = {.B = NDOC, .ids = in.ids, .targets = in.targets, .sample = in.sample};
    gpt_acts *a = gpt_acts_acquire(m);
    double sum = 0;
    gpt_forward(m, a, &plain, NULL, 0, &sum);
    be_memcpy(g_be, losses, gpt_acts_losses(a), sizeof losses, BE_D2H);
    gpt_acts_release(m, a);
    double want = 0;
    int n = 0;
    for (int j = 0; j < NDOC; j++) {
        int k = sample_of(in.ids + j * S), kept = LEN[k] < S + 1 ? LEN[k] : S + 1;
        for (int t = ANS[k] - 1; t + 1 < kept; t++)
            if (t >= 0) want += losses[j * S + t], n++;
    }
    want /= n;
    a = gpt_acts_acquire(m);
    double got = 0;
    gpt_forward(m, a, &in, NULL, 0, &got);
    gpt_acts_release(m, a);
    got /= (double)NDOC * S;
    printf("answer-only loss %.6f over %d targets; by hand %.6f\n", got, n, want);
    assert_true(fabs(got - want) < 1e-5 * fabs(want));
    gpt_free(m);
    sft_source_ops.close(src);
}

/* Per-token losses (B, S) of a forward without the loss mask into out. */
static void losses_of(gpt_model *m, const gpt_batch *in, float *out)
{
    gpt_batch plain = *in;
    plain.loss_mask = NULL, plain.token_weight = 0;
    gpt_acts *a = gpt_acts_acquire(m);
    double sum = 0;
    gpt_forward(m, a, &plain, NULL, 0, &sum);
    be_memcpy(g_be, out, gpt_acts_losses(a), (size_t)in->B * m->cfg.seq * sizeof(float), BE_D2H);
    gpt_acts_release(m, a);
}

/* Packed (--reset-attention-mask, --reset-position-ids): every sample in exactly one row; each
 * row's samples (found by seg) have the per-token losses and the loss mask of the sample alone in
 * a row of its own (sft_row), where the mask counts; no target across two samples; the loss is
 * the mean over the counted targets of the samples alone. */
static void check_packed(int answer_only)
{
    enum { P = 16 }; /* rows of 16 + 1: the samples of 5, 9, 12, 3 and 7 tokens fill 3 or 4 (12 fits with 5 or 3 only) */
    gpt_config c = tiny_config();
    c.seq = c.max_pos = P;
    void *src = open_packed(&c, 1, 1, 1, answer_only);
    int rows = (int)sft_source_ops.num_samples(src, GPTDS_TRAIN);
    assert_true(rows >= 3 && rows <= 4);
    sft_source_ops.close(src);
    src = open_packed(&c, rows, 1, 1, answer_only);
    gpt_batch in;
    sft_source_ops.begin(src, GPTDS_TRAIN, 0, g_ps->dp_group, &in);
    gpt_model *m = gpt_create(&c, g_ps, g_be, 0, c.num_layers, rows > NDOC ? rows : NDOC, 1);
    float *packed = malloc((size_t)rows * P * sizeof(float)), alone[P];
    losses_of(m, &in, packed);
    int seen[NDOC] = {0}, counted = 0;
    double want = 0;
    for (int r = 0; r < rows; r++) {
        const int32_t *ids = in.ids + r * P, *seg = in.seg + r * P, *pos = in.pos + r * P;
        for (int t0 = 0; t0 < P; t0++) {
            if (seg[t0] != t0 || ids[t0] < 20) continue; /* a sample starts here (padding: ids PAD) */
            int k = sample_of(ids + t0);
            seen[k]++;
            int32_t toks[16], am[16], a_ids[P], a_tg[P];
            float a_mk[P];
            for (int i = 0; i < LEN[k]; i++) toks[i] = tok_of(k, i), am[i] = i >= ANS[k];
            sft_row(toks, am, LEN[k], P, answer_only, PAD, a_ids, a_tg, a_mk);
            int64_t sample = 0;
            losses_of(m, &(gpt_batch){.B = 1, .ids = a_ids, .targets = a_tg, .sample = &sample}, alone);
            for (int t = 0; t0 + t < P && seg[t0 + t] == t0; t++) {
                assert_int_equal(pos[t0 + t], t);
                int last = t0 + t + 1 >= P || seg[t0 + t + 1] != t0; /* its target is another sample's */
                float mk = in.loss_mask[r * P + t0 + t];
                assert_true(mk == (last ? 0.0f : a_mk[t]));
                if (mk > 0) {
                    double d = fabs((double)packed[r * P + t0 + t] - alone[t]);
                    assert_true(d < 1e-5 * fabs(alone[t]) + 1e-6);
                    want += alone[t], counted++;
                }
            }
        }
    }
    for (int k = 0; k < NDOC; k++) assert_int_equal(seen[k], 1);
    gpt_acts *a = gpt_acts_acquire(m);
    double got = 0;
    gpt_forward(m, a, &in, NULL, 0, &got);
    gpt_acts_release(m, a);
    got /= (double)rows * P;
    want /= counted;
    printf("packed (%s): %d samples in %d rows; loss %.6f, the samples alone %.6f over %d targets\n",
           answer_only ? "answer-only" : "every target", NDOC, rows,
           got, want, counted);
    assert_true(fabs(got - want) < 1e-5 * fabs(want));
    free(packed);
    gpt_free(m);
    sft_source_ops.close(src);
}

static void packed_equals_alone(void **state)
{
    (void)state;
    check_packed(1);
    check_packed(0); /* every target of a sample: the one across two samples must still not count */
}

int main(int argc, char **argv)
{
    g_world = comm_world_init(&argc, &argv);
    g_ps = ps_init(g_world, 1, 1);
    g_be = be_create("cpu", 0);
    write_samples();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(row_by_hand),
        cmocka_unit_test(truncate_by_hand),
        cmocka_unit_test(source_rows),
        cmocka_unit_test(answer_only_loss),
        cmocka_unit_test(packed_equals_alone),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char *mp = sft_mask_prefix(g_prefix), path[600];
    const char *files[4][2] = {{g_prefix, ".bin"}, {g_prefix, ".idx"}, {mp, ".bin"}, {mp, ".idx"}};
    for (int i = 0; i < 4; i++) snprintf(path, sizeof path, "%s%s", files[i][0], files[i][1]), unlink(path);
    *strrchr(g_prefix, '/') = '\0';
    rmdir(g_prefix);
    free(mp);
    be_free(g_be);
    ps_free(g_ps);
    comm_world_finalize(g_world);
    return rc;
}
