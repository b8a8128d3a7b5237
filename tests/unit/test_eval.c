/* src/eval/strided.c: strided perplexity against a hand computation. A tiny model scores a tiny
 * indexed dataset; the reference concatenates the documents itself, cuts the windows itself and
 * scores every window with an independent double-precision GPT-2 forward (per-position losses
 * over the real vocabulary only: the padded ids are no part of the model), keeping the first window's S
 * targets and each later window's last K. Checked for K = S (plain chunks), K < S, K = 1, an
 * odd micro-batch size, and document ranges; and the window count. */
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
#include "trident/comm.h"
#include "trident/eval.h"
#include "trident/gpt.h"
#include "trident/indexed.h"
#include "trident/parallel_state.h"
#include "test_model_tensors.h"

static comm *g_world;
static ps_state *g_ps;
static backend *g_be;

enum { S = 8, NDOCS = 9 };

static gpt_config tiny(void)
{
    gpt_config c = {0};
    c.num_layers = 2, c.hidden = 16, c.heads = 4, c.ffn = 64, c.seq = S, c.max_pos = S, c.vocab = 50;
    c.padded_vocab = gpt_padded_vocab(c.vocab, 8, 1);
    c.init_std = 0.25f;
    c.seed = 31;
    return c;
}

/* ---- reference: per-position losses of one window, in double, from the parameters ---- */

static void ln(double *out, const double *in, const float *w, const float *b, int C)
{
    double mean = 0, var = 0;
    for (int i = 0; i < C; i++) mean += in[i];
    mean /= C;
    for (int i = 0; i < C; i++) var += (in[i] - mean) * (in[i] - mean);
    double rstd = 1.0 / sqrt(var / C + 1e-5);
    for (int i = 0; i < C; i++) out[i] = (in[i] - mean) * rstd * w[i] + b[i];
}

/* out (OC) = W (OC, C) . in (C) + b */
static void lin(double *out, const double *in, const float *w, const float *b, int C, int OC)
{
    for (int o = 0; o < OC; o++) {
        double s = b ? b[o] : 0;
        for (int i = 0; i < C; i++) s += (double)w[(size_t)o * C + i] * in[i];
        out[o] = s;
    }
}

static void ref_window(const gpt_model *m, const int32_t *tok /* S + 1 */, double *loss /* S */)
{
    const gpt_config *c = &m->cfg;
    const gpt_tensors *p = &m->p;
    enum { H = 16, F = 64 };
    int nh = c->heads, hs = H / nh, V = c->vocab;
    double x[S][H], a[S][H], qkv[S][3 * H], y[S][H], t1[S][H], fc[S][F], logits[64];
    for (int t = 0; t < S; t++)
        for (int i = 0; i < H; i++) x[t][i] = (double)p->wte[tok[t] * H + i] + p->wpe[t * H + i];
    for (int l = 0; l < c->num_layers; l++) {
        tlayer Lv = layer_of(m, l), *L = &Lv;
        for (int t = 0; t < S; t++) {
            ln(a[t], x[t], L->ln1.w, L->ln1.b, H);
            lin(qkv[t], a[t], L->attn.qkv_w, L->attn.qkv_b, H, 3 * H);
        }
        for (int hd = 0; hd < nh; hd++)
            for (int t = 0; t < S; t++) {
                double s[S], mx = -1e300, sum = 0;
                for (int u = 0; u <= t; u++) {
                    s[u] = 0;
                    for (int k = 0; k < hs; k++) s[u] += qkv[t][hd * hs + k] * qkv[u][H + hd * hs + k];
                    s[u] /= sqrt((double)hs);
                    mx = s[u] > mx ? s[u] : mx;
                }
                for (int u = 0; u <= t; u++) sum += (s[u] = exp(s[u] - mx));
                for (int k = 0; k < hs; k++) {
                    double acc = 0;
                    for (int u = 0; u <= t; u++) acc += s[u] / sum * qkv[u][2 * H + hd * hs + k];
                    y[t][hd * hs + k] = acc;
                }
            }
        for (int t = 0; t < S; t++) {
            lin(t1[t], y[t], L->attn.proj_w, L->attn.proj_b, H, H);
            for (int i = 0; i < H; i++) x[t][i] += t1[t][i];
            ln(a[t], x[t], L->ln2.w, L->ln2.b, H);
            lin(fc[t], a[t], L->mlp.fc_w, L->mlp.fc_b, H, F);
            for (int i = 0; i < F; i++) {
                double v = fc[t][i];
                fc[t][i] = 0.5 * v * (1 + tanh(sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
            }
            lin(t1[t], fc[t], L->mlp.fc2_w, L->mlp.fc2_b, F, H);
            for (int i = 0; i < H; i++) x[t][i] += t1[t][i];
        }
    }
    for (int t = 0; t < S; t++) {
        ln(a[t], x[t], tensor_at(m, -1, "final_norm.weight"), tensor_at(m, -1, "final_norm.bias"), H);
        lin(logits, a[t], p->wte, NULL, H, V);
        double mx = -1e300, sum = 0;
        for (int v = 0; v < V; v++) mx = logits[v] > mx ? logits[v] : mx;
        for (int v = 0; v < V; v++) sum += exp(logits[v] - mx);
        loss[t] = log(sum) + mx - logits[tok[t + 1]];
    }
}

/* ---- the dataset: NDOCS documents of assorted lengths ---- */

static char g_prefix[512];
static int32_t g_tokens[4096];
static int64_t g_doc_start[NDOCS + 1];

static void make_dataset(void)
{
    snprintf(g_prefix, sizeof g_prefix, "%s/test_eval_%ld", TD_TEST_TMP, (long)getpid());
    char err[512];
    idx_writer *w = idx_writer_open(g_prefix, IDX_U16, err, sizeof err);
    if (!w) fail_msg("%s", err);
    const int lens[NDOCS] = {5, 17, 1, 9, 30, 2, 12, 8, 21};
    unsigned seed = 11;
    int64_t n = 0;
    for (int d = 0; d < NDOCS; d++) {
        g_doc_start[d] = n;
        for (int i = 0; i < lens[d]; i++) {
            seed = seed * 1103515245u + 12345u;
            g_tokens[n + i] = (int32_t)((seed >> 8) % 50);
        }
        if (idx_writer_add(w, g_tokens + n, (size_t)lens[d], err, sizeof err)) fail_msg("%s", err);
        n += lens[d];
    }
    g_doc_start[NDOCS] = n;
    if (idx_writer_finish(w, err, sizeof err)) fail_msg("%s", err);
}

static void remove_dataset(void)
{
    char p[600];
    snprintf(p, sizeof p, "%s.bin", g_prefix);
    unlink(p);
    snprintf(p, sizeof p, "%s.idx", g_prefix);
    unlink(p);
}

/* The hand computation: mean loss and scored tokens over documents [d0, d1), stride K. */
static double reference(const gpt_model *m, int d0, int d1, int K, int64_t *tokens)
{
    const int32_t *tok = g_tokens + g_doc_start[d0];
    int64_t n = g_doc_start[d1] - g_doc_start[d0];
    double sum = 0;
    int64_t cnt = 0;
    for (int64_t start = 0, w = 0; start + S + 1 <= n; start += K, w++) {
        double loss[S];
        ref_window(m, tok + start, loss);
        for (int t = w == 0 ? 0 : S - K; t < S; t++, cnt++) sum += loss[t];
    }
    *tokens = cnt;
    return sum / (double)cnt;
}

static void check(gpt_model *m, const dsr_reader *d, int d0, int d1, int K, int mbs)
{
    ev_result r;
    ev_score(m, g_ps, d, d0, d1, K, mbs, &r);
    int64_t tokens;
    double ref = reference(m, d0, d1, K, &tokens);
    int64_t n = g_doc_start[d1] - g_doc_start[d0];
    printf("docs [%d, %d) (%lld tokens), K %d, mbs %d: %lld windows, %lld tokens, loss %.9f reference %.9f\n", d0, d1,
           (long long)n, K, mbs, (long long)r.windows, (long long)r.tokens, r.loss, ref);
    assert_int_equal(r.documents, d1 - d0);
    assert_int_equal(r.doc_tokens, n);
    assert_int_equal(r.windows, ev_num_windows(n, S, K));
    assert_int_equal(r.tokens, tokens);
    assert_int_equal(r.tokens, S + (r.windows - 1) * K);
    assert_true(fabs(r.loss - ref) <= 1e-5 * fabs(ref));
    assert_true(fabs(r.perplexity - exp(ref)) <= 1e-4 * exp(ref));
}

static void strided_loss_matches_hand_computation(void **state)
{
    (void)state;
    make_dataset();
    char err[512];
    dsr_reader *d = dsr_open(g_prefix, err, sizeof err);
    if (!d) fail_msg("%s", err);
    gpt_config c = tiny();
    gpt_model *m = gpt_create(&c, g_ps, g_be, 0, c.num_layers, 3, 1);
    check(m, d, 0, NDOCS, S, 2);     /* K = S: disjoint chunks, every target once */
    check(m, d, 0, NDOCS, 3, 3);     /* K < S: later windows score their last 3 */
    check(m, d, 0, NDOCS, 1, 1);     /* K = 1 */
    check(m, d, 3, 7, 5, 2);         /* a run of documents inside the dataset */
    check(m, d, 4, 5, 7, 3);         /* one document */
    gpt_free(m);
    dsr_close(d);
    remove_dataset();
}

static void window_count(void **state)
{
    (void)state;
    assert_int_equal(ev_num_windows(8, 8, 8), 0);    /* needs S + 1 tokens */
    assert_int_equal(ev_num_windows(9, 8, 8), 1);
    assert_int_equal(ev_num_windows(16, 8, 8), 1);   /* the last 7 tokens make no full window */
    assert_int_equal(ev_num_windows(17, 8, 8), 2);
    assert_int_equal(ev_num_windows(17, 8, 1), 9);
    assert_int_equal(ev_num_windows(12, 8, 3), 2);
}

int main(int argc, char **argv)
{
    g_world = comm_world_init(&argc, &argv);
    g_ps = ps_init(g_world, 1, 1);
    g_be = be_create("cpu", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(window_count),
        cmocka_unit_test(strided_loss_matches_hand_computation),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    be_free(g_be);
    ps_free(g_ps);
    comm_world_finalize(g_world);
    return rc;
}
