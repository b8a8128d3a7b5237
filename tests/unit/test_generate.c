/* Generation's forward (src/model/infer.c) against the training forward (gpt_forward, dropout
 * off), which computes every position's logits with the training attention kernel: the logits of
 * the last position of a prefix, run whole (a fresh cache) and step by step (a prefix, then one
 * position at a time through the cache), for GPT-2 blocks and Llama blocks (RMSNorm, rotary
 * positions, SwiGLU, grouped-query attention, no biases, untied output), and Llama blocks with a
 * mixture of experts in the middle layer only (--moe-layer-freq). And the sampler: greedy
 * is the argmax, top-k and top-p never pick outside their set, a seed gives the same tokens; a row
 * whose logits are not finite stops, the others go on. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend/backend.h"
#include "trident/comm.h"
#include "trident/generate.h"
#include "trident/gpt.h"
#include "trident/parallel_state.h"
#include "trident/philox.h"

static comm *g_world;
static ps_state *g_ps;
static backend *g_be;

enum { B = 2, T = 12 };

static gpt_config gpt2(void)
{
    gpt_config c = {0};
    c.num_layers = 3;
    c.hidden = 32;
    c.heads = 4;
    c.ffn = 128;
    c.seq = T;
    c.max_pos = 16;
    c.vocab = 100;
    c.padded_vocab = gpt_padded_vocab(c.vocab, 64, 1);
    c.init_std = 0.2f; /* large enough that the logits differ from row to row */
    c.seed = 3;
    return c;
}

static gpt_config llama(void)
{
    gpt_config c = gpt2();
    c.norm = GPT_NORM_RMSNORM;
    c.pos = GPT_POS_ROPE;
    c.act = TD_ACT_SILU, c.glu = 1;
    c.disable_bias = 1;
    c.untied = 1;
    c.query_groups = 2;
    c.ffn = 96;
    return c;
}

/* Largest |a - b| over the largest |b| of the real vocabulary. */
static double rel(const float *a, const float *b, int n)
{
    double e = 0, s = 1e-6;
    for (int i = 0; i < n; i++) {
        e = fmax(e, fabs((double)a[i] - b[i]));
        s = fmax(s, fabs((double)b[i]));
    }
    return e / s;
}

static void check_model(const gpt_config *c, const char *name)
{
    gpt_model *m = gpt_create(c, g_ps, g_be, 0, c->num_layers, B, 1);
    int V = c->vocab, Vl = m->vocab_l;
    for (int i = 0; i < m->ntensors; i++) /* LoRA's B starts at zero: values, so the adapters count */
        if (strstr(m->table[i].name, ".lora_B"))
            for (size_t k = 0; k < m->table[i].numel; k++)
                m->params[m->table[i].offset + k] = 0.2f * sinf((float)(k + 5 * i));
    int32_t ids[B * T], targets[B * T];
    int64_t sample[B] = {0, 1};
    for (int i = 0; i < B * T; i++) {
        ids[i] = (int32_t)(td_philox_uniform(9, 0, (uint64_t)i) * V);
        targets[i] = ids[(i + 1) % (B * T)];
    }
    gpt_acts *a = gpt_acts_acquire(m);
    gpt_forward(m, a, &(gpt_batch){.B = B, .ids = ids, .targets = targets, .sample = sample}, NULL, 0, NULL);
    const float *ref = gpt_acts_logits(a); /* (B, T, Vl) */

    float logits[B * 100];
    gpt_kv_cache *kv = gpt_kv_create(m, B, T, T);
    double worst_whole = 0, worst_steps = 0;
    /* whole prefixes from position 0 */
    for (int t = 1; t <= T; t++) {
        int32_t pre[B * T];
        for (int b = 0; b < B; b++) memcpy(pre + b * t, ids + b * T, (size_t)t * sizeof(int32_t));
        gpt_infer(m, kv, pre, NULL, 0, t, logits);
        for (int b = 0; b < B; b++)
            worst_whole = fmax(worst_whole, rel(logits + b * V, ref + ((size_t)b * T + t - 1) * Vl, V));
    }
    /* a prefix of 4, then one position at a time */
    int32_t pre[B * 4];
    for (int b = 0; b < B; b++) memcpy(pre + b * 4, ids + b * T, 4 * sizeof(int32_t));
    gpt_infer(m, kv, pre, NULL, 0, 4, logits);
    for (int b = 0; b < B; b++) worst_steps = fmax(worst_steps, rel(logits + b * V, ref + ((size_t)b * T + 3) * Vl, V));
    for (int t = 4; t < T; t++) {
        int32_t one[B] = {ids[t], ids[T + t]};
        gpt_infer(m, kv, one, NULL, t, 1, logits);
        for (int b = 0; b < B; b++) worst_steps = fmax(worst_steps, rel(logits + b * V, ref + ((size_t)b * T + t) * Vl, V));
    }
    printf("  %s: whole prefixes %.2e, through the cache %.2e (tol 1e-5)\n", name, worst_whole, worst_steps);
    assert_true(worst_whole < 1e-5);
    assert_true(worst_steps < 1e-5);
    gpt_kv_free(m, kv);
    gpt_acts_release(m, a);
    gpt_free(m);
}

static void infer_matches_training_forward(void **state)
{
    (void)state;
    gpt_config c = gpt2(), d = llama();
    check_model(&c, "GPT-2 blocks");
    check_model(&d, "Llama blocks");
    /* a mixture of experts mixing dense layers in (--moe-layer-freq [0,1,0]): each layer's MLP kind */
    gpt_config e = llama();
    e.num_experts = 4, e.moe_topk = 2, e.moe_ffn = 32;
    char msg[200];
    assert_int_equal(gpt_moe_layer_freq_parse(&e, "[0,1,0]", e.num_layers, msg, sizeof msg), 0);
    check_model(&e, "Llama blocks, the middle layer's MLP 4 experts");
    /* LoRA adapters on all seven projections (the fused outputs' column ranges, o and down) */
    gpt_config f = llama(), g = gpt2();
    f.lora_rank = g.lora_rank = 3;
    f.lora_alpha = g.lora_alpha = 6.0f;
    f.lora_targets = 0x7f;
    g.lora_targets = 0x7f & ~(1 << GPT_LORA_GATE);
    check_model(&f, "Llama blocks with LoRA adapters");
    check_model(&g, "GPT-2 blocks with LoRA adapters");
}

static void sampler(void **state)
{
    (void)state;
    enum { V = 50 };
    float base[V], l[V];
    for (int i = 0; i < V; i++) base[i] = (float)(td_philox_uniform(4, 1, (uint64_t)i) * 6.0);
    int best = 0;
    for (int i = 1; i < V; i++)
        if (base[i] > base[best]) best = i;
    gen_config g = {.max_new = 1, .greedy = 1, .temperature = 1.0f, .seed = 7, .eod = -1};
    memcpy(l, base, sizeof l);
    assert_int_equal(gen_sample(l, V, &g, 0, 0), best);
    /* top-k 3: only the 3 largest, and each of them sometimes */
    g.greedy = 0;
    g.top_k = 3;
    float sorted[V];
    memcpy(sorted, base, sizeof sorted);
    for (int i = 0; i < V; i++)
        for (int j = i + 1; j < V; j++)
            if (sorted[j] > sorted[i]) {
                float t = sorted[i];
                sorted[i] = sorted[j];
                sorted[j] = t;
            }
    int seen[V] = {0};
    for (int pos = 0; pos < 300; pos++) {
        memcpy(l, base, sizeof l);
        int k = gen_sample(l, V, &g, 0, pos);
        assert_true(base[k] >= sorted[2]);
        seen[k]++;
    }
    int kinds = 0;
    for (int i = 0; i < V; i++) kinds += seen[i] > 0;
    assert_int_equal(kinds, 3);
    /* top-p 0.5: the smallest set of the most likely with half the mass */
    g.top_k = 0;
    g.top_p = 0.5f;
    double z = 0, cum = 0;
    for (int i = 0; i < V; i++) z += exp(sorted[i] - sorted[0]);
    int keep = 0;
    while (cum < 0.5) cum += exp(sorted[keep++] - sorted[0]) / z;
    for (int pos = 0; pos < 300; pos++) {
        memcpy(l, base, sizeof l);
        int k = gen_sample(l, V, &g, 1, pos);
        assert_true(base[k] >= sorted[keep - 1]);
    }
    /* the same seed, row and position: the same token */
    memcpy(l, base, sizeof l);
    int a = gen_sample(l, V, &g, 1, 17);
    memcpy(l, base, sizeof l);
    assert_int_equal(gen_sample(l, V, &g, 1, 17), a);
}

/* The sampler as first written: every probability sorted, the cut read off the full order. */
static int desc_ref(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

static int sample_full_sort(float *logits, int V, const gen_config *g, int b, int pos)
{
    int best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;
    if (g->top_k == 1) return best; /* greedy */
    float mx = logits[best];
    double sum = 0;
    for (int i = 0; i < V; i++) {
        logits[i] = expf((logits[i] - mx) / g->temperature);
        sum += logits[i];
    }
    float floor_p = 0.0f;
    if ((g->top_k > 0 && g->top_k < V) || (g->top_p > 0.0f && g->top_p < 1.0f)) {
        float *sorted = malloc((size_t)V * sizeof(float));
        memcpy(sorted, logits, (size_t)V * sizeof(float));
        qsort(sorted, (size_t)V, sizeof(float), desc_ref);
        /* the definition: the k largest, then the fewest of those whose share reaches p */
        int keep = g->top_k > 0 && g->top_k < V ? g->top_k : V;
        if (g->top_p > 0.0f && g->top_p < 1.0f) {
            int n = 0;
            double share = 0;
            do share += sorted[n++] / sum;
            while (n < keep && share < g->top_p);
            keep = n;
        }
        floor_p = sorted[keep - 1];
        free(sorted);
    }
    /* a draw over the kept probabilities (those at or above the floor) in id order */
    double total = 0;
    for (int i = 0; i < V; i++) total += logits[i] >= floor_p ? logits[i] : 0.0f;
    double u = td_philox_uniform(g->seed, (uint64_t)b, (uint64_t)pos) * total, run = 0;
    int last = best;
    for (int i = 0; i < V; i++) {
        float p = logits[i] >= floor_p ? logits[i] : 0.0f;
        if (!(p > 0.0f)) continue;
        run += p;
        last = i;
        if (u < run) return i;
    }
    return last;
}

/* gen_sample orders the probabilities by a radix sort of their bits: the same token as a qsort at
 * every position, over vocabularies of 1 to Llama 3's size, logits with ties, with most
 * exponentials underflowing to 0, all equal, and every kind of cut. */
static void sampler_cut_matches_full_sort(void **state)
{
    (void)state;
    const int vs[] = {1, 2, 7, 300, 5000, 128256};
    const float scales[] = {4.0f, 200.0f, 0.0f}; /* spread; most underflow at temperature 0.7; all equal */
    const int ks[] = {0, 1, 2, 40, 299, 300, 4999, 128256};
    const float ps[] = {0.0f, 0.1f, 0.5f, 0.95f, 0.9999f, 1.0f};
    int checked = 0;
    for (size_t vi = 0; vi < sizeof vs / sizeof *vs; vi++) {
        int V = vs[vi];
        float *base = malloc((size_t)V * sizeof(float)), *a = malloc((size_t)V * sizeof(float)),
              *r = malloc((size_t)V * sizeof(float));
        for (size_t si = 0; si < sizeof scales / sizeof *scales; si++)
            for (int tied = 0; tied < 2; tied++) {
                for (int i = 0; i < V; i++) {
                    float x = (float)(td_philox_uniform(9, vi, (uint64_t)i) * scales[si]);
                    base[i] = tied ? floorf(x * 2) / 2 : x; /* tied: a few distinct values, many of each */
                }
                for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++)
                    for (size_t pi = 0; pi < sizeof ps / sizeof *ps; pi++) {
                        if (V > 5000 && (ki % 4 != 3 || pi % 3 != 1)) continue; /* Llama 3's size: top-k 40 or none, top-p 0.1 or 0.9999 */
                        gen_config g = {.max_new = 1, .temperature = si == 1 ? 0.7f : 1.0f, .top_k = ks[ki],
                                        .top_p = ps[pi], .seed = 5, .eod = -1};
                        for (int pos = 0; pos < (V > 5000 ? 1 : 3); pos++) {
                            memcpy(a, base, (size_t)V * sizeof(float));
                            memcpy(r, base, (size_t)V * sizeof(float));
                            int got = gen_sample(a, V, &g, 0, pos), want = sample_full_sort(r, V, &g, 0, pos);
                            if (got != want)
                                fail_msg("V %d, scale %g, tied %d, top-k %d, top-p %g, position %d: token %d, the full sort's %d",
                                         V, scales[si], tied, g.top_k, g.top_p, pos, got, want);
                            checked++;
                        }
                    }
            }
        free(base);
        free(a);
        free(r);
    }
    assert_true(checked > 1000);
}

/* gen_run's log-probabilities (Megatron's server and /v1/completions return them): log p(token
 * i + 1 | tokens 0..i) of prompt and generated tokens alike, and the 3 most likely tokens at every
 * position with theirs, with the cache and without, and with nothing generated (max_new 0: the
 * prompts scored), against the log-softmax of the training forward's logits over the final sequences. */
static void logprobs(void **state)
{
    (void)state;
    gpt_config c = llama();
    gpt_model *m = gpt_create(&c, g_ps, g_be, 0, c.num_layers, B, 1);
    int V = c.vocab, Vl = m->vocab_l;
    int32_t p0[5] = {3, 14, 15, 92, 65}, p1[2] = {35, 89};
    int32_t *prompts[B] = {p0, p1};
    int lens[B] = {5, 2};
    enum { TOP = 3 };
    for (int mode = 0; mode < 3; mode++) {
        int no_cache = mode == 1, max_new = mode == 2 ? 0 : 4;
        gen_config g = {.max_new = max_new, .greedy = 1, .temperature = 1.0f, .seed = 1, .eod = -1, .no_cache = no_cache};
        int cap = gen_capacity(&g, B, lens), out_len[B];
        int32_t *out[B], *top_ids[B];
        float *lp[B], *top_lp[B];
        for (int b = 0; b < B; b++) {
            out[b] = calloc((size_t)cap, sizeof(int32_t)), lp[b] = calloc((size_t)cap, sizeof(float));
            top_ids[b] = calloc((size_t)cap * TOP, sizeof(int32_t)), top_lp[b] = calloc((size_t)cap * TOP, sizeof(float));
        }
        gen_stats st;
        gen_logprobs want = {lp, TOP, top_ids, top_lp};
        gen_run(m, g_ps, &g, B, prompts, lens, out, out_len, &want, NULL, NULL, &st);
        int32_t ids[B * T] = {0}, targets[B * T] = {0};
        int64_t sample[B] = {0, 1};
        for (int b = 0; b < B; b++)
            for (int i = 0; i + 1 < out_len[b]; i++) ids[b * T + i] = out[b][i], targets[b * T + i] = out[b][i + 1];
        gpt_acts *a = gpt_acts_acquire(m);
        gpt_forward(m, a, &(gpt_batch){.B = B, .ids = ids, .targets = targets, .sample = sample}, NULL, 0, NULL);
        const float *ref = gpt_acts_logits(a);
        double worst = 0;
        for (int b = 0; b < B; b++) {
            assert_int_equal(out_len[b], lens[b] + max_new);
            for (int i = 0; i + 1 < out_len[b]; i++) {
                const float *l = ref + ((size_t)b * T + i) * Vl;
                double mx = l[0], z = 0;
                for (int v = 1; v < V; v++) mx = fmax(mx, l[v]);
                for (int v = 0; v < V; v++) z += exp(l[v] - mx);
                double want = l[out[b][i + 1]] - mx - log(z);
                worst = fmax(worst, fabs(lp[b][i] - want));
                int best[TOP]; /* the reference's 3 largest logits, by a plain scan */
                for (int k = 0; k < TOP; k++) {
                    best[k] = -1;
                    for (int v = 0; v < V; v++) {
                        int taken = 0;
                        for (int j = 0; j < k; j++) taken |= best[j] == v;
                        if (!taken && (best[k] < 0 || l[v] > l[best[k]])) best[k] = v;
                    }
                    assert_int_equal(top_ids[b][i * TOP + k], best[k]);
                    worst = fmax(worst, fabs(top_lp[b][i * TOP + k] - (l[best[k]] - mx - log(z))));
                }
            }
        }
        printf("  log-probabilities and top %d (%s): largest difference %.2e (tol 1e-4)\n", TOP,
               mode == 0 ? "cache" : mode == 1 ? "no cache" : "nothing generated", worst);
        assert_true(worst < 1e-4);
        gpt_acts_release(m, a);
        for (int b = 0; b < B; b++) free(out[b]), free(lp[b]), free(top_ids[b]), free(top_lp[b]);
    }
    gpt_free(m);
}

/* A row whose logits hold a NaN stops there, nothing sampled from them, and the others go on: the
 * word embedding row of token 92, which only prompt 0 holds (at position 3), set to NaN makes
 * prompt 0's logits NaN from position 3 on; prompt 1 must give the tokens it gives unpoisoned. */
static void nonfinite_logits_stop_the_row(void **state)
{
    (void)state;
    gpt_config c = llama();
    gpt_model *m = gpt_create(&c, g_ps, g_be, 0, c.num_layers, B, 1);
    int32_t p0[5] = {3, 14, 15, 92, 65}, p1[2] = {35, 89};
    int32_t *prompts[B] = {p0, p1};
    int lens[B] = {5, 2};
    const gpt_tensor_info *emb = NULL;
    for (int i = 0; i < m->ntensors; i++)
        if (strcmp(m->table[i].name, "embedding.word.weight") == 0) emb = &m->table[i];
    assert_non_null(emb);
    for (int no_cache = 0; no_cache <= 1; no_cache++) {
        gen_config g = {.max_new = 4, .greedy = 1, .temperature = 1.0f, .seed = 1, .eod = -1, .no_cache = no_cache};
        int cap = gen_capacity(&g, B, lens), clean_len[B], out_len[B];
        int32_t *clean[B], *out[B];
        for (int b = 0; b < B; b++) clean[b] = calloc((size_t)cap, sizeof(int32_t)), out[b] = calloc((size_t)cap, sizeof(int32_t));
        gen_stats st;
        assert_int_equal(gen_run(m, g_ps, &g, B, prompts, lens, clean, clean_len, NULL, NULL, NULL, &st), 0);
        assert_int_equal(st.nonfinite, 0);
        for (int i = 0; i < clean_len[1]; i++) assert_int_not_equal(clean[1][i], 92); /* the poison stays in row 0 */
        float *row = m->params + emb->offset + (size_t)92 * (size_t)c.hidden, keep[32], nan[32];
        assert_int_equal(c.hidden, 32);
        for (int j = 0; j < 32; j++) nan[j] = NAN;
        be_memcpy(g_be, keep, row, sizeof keep, BE_D2H);
        be_memcpy(g_be, row, nan, sizeof nan, BE_H2D);
        int bad = gen_run(m, g_ps, &g, B, prompts, lens, out, out_len, NULL, NULL, NULL, &st);
        be_memcpy(g_be, row, keep, sizeof keep, BE_H2D);
        printf("  NaN embedding of token 92 (%s): %d row stopped, row %d at position %d\n", no_cache ? "no cache" : "cache",
               bad, st.bad_row, st.bad_pos);
        assert_int_equal(bad, 1);
        assert_int_equal(st.nonfinite, 1);
        assert_int_equal(st.bad_row, 0);
        assert_int_equal(st.bad_pos, 3);
        assert_int_equal(out_len[0], 0);
        assert_int_equal(out_len[1], clean_len[1]);
        assert_memory_equal(out[1], clean[1], (size_t)clean_len[1] * sizeof(int32_t));
        for (int b = 0; b < B; b++) free(clean[b]), free(out[b]);
    }
    gpt_free(m);
}

int main(int argc, char **argv)
{
    g_world = comm_world_init(&argc, &argv);
    g_ps = ps_init(g_world, 1, 1);
    g_be = be_create("cpu", 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(infer_matches_training_forward),
        cmocka_unit_test(sampler),
        cmocka_unit_test(sampler_cut_matches_full_sort),
        cmocka_unit_test(logprobs),
        cmocka_unit_test(nonfinite_logits_stop_the_row),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    be_free(g_be);
    ps_free(g_ps);
    comm_world_finalize(g_world);
    return rc;
}
