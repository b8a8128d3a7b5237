/* trident eval --task (src/eval/tasks.c) on small files written here in the published
 * formats: Megatron's WikiText detokenizer and word count on a hand-made excerpt (answers worked
 * by hand); WikiText perplexity, LAMBADA and HellaSwag scores of a small random model against
 * the same scores computed here from the generation forward's logits (gpt_infer: another path
 * through the model) in double precision. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

#include <cmocka.h>

#include "backend/backend.h"
#include "trident/comm.h"
#include "trident/eval.h"
#include "trident/gpt.h"
#include "trident/parallel_state.h"
#include "trident/tokenizer.h"

static comm *g_world;
static ps_state *g_ps;
static backend *g_be;
static tok_tokenizer *g_tok;

enum { S = 24 };

static void detokenizer(void **state)
{
    (void)state;
    const char *raw = " = Valkyria Chronicles III = \n The game 's 1 @,@ 000 units ( in Japan ) sold @-@ out , "
                      "at 3 @.@ 5 % ; \" quoted text \" and N copies . \n = = Reception = = \n";
    const char *want = " = Valkyria Chronicles III =\nThe game's 1,000 units (in Japan) sold-out, "
                       "at 3.5 %; \"quoted text\" and 1 copies.\n== Reception ==\n";
    char *got = ev_wikitext_detokenize(raw);
    assert_string_equal(got, want);
    free(got);
    /* Python: len(s.strip().split(" ")) */
    assert_int_equal(ev_count_space_split("  a b  c \n"), 4); /* "a", "b", "", "c" */
    assert_int_equal(ev_count_space_split("one"), 1);
    assert_int_equal(ev_count_space_split("x\ny z"), 2);
}

static gpt_model *model(int mbs)
{
    gpt_config c = {0};
    c.num_layers = 2;
    c.hidden = 32;
    c.heads = 4;
    c.ffn = 128;
    c.seq = S;
    c.max_pos = S;
    c.vocab = 50257;
    c.padded_vocab = gpt_padded_vocab(c.vocab, 128, 1);
    c.init_std = 0.4f; /* a random model with opinions: its argmaxes vary */
    c.seed = 5;
    return gpt_create(&c, g_ps, g_be, 0, c.num_layers, mbs, 1);
}

static int32_t *encode(const char *text, int *n)
{
    tok_worker *w = tok_worker_new(g_tok);
    bpe_ids e = {0};
    tok_encode(w, text, strlen(text), &e);
    tok_worker_free(w);
    *n = (int)e.n;
    return e.ids;
}

/* log p(tokens[i + 1] | tokens[0..i]) for i in [from, n - 1), and whether each was the argmax, from
 * gpt_infer's logits of each whole prefix (at most S positions: the last S + 1 tokens). */
static double logprob(gpt_model *m, const int32_t *tokens, int n, int from, int *all_argmax)
{
    int drop = n > S + 1 ? n - S - 1 : 0, V = m->cfg.vocab;
    tokens += drop, n -= drop, from -= drop;
    float *logits = malloc((size_t)V * sizeof(float));
    gpt_kv_cache *c = gpt_kv_create(m, 1, S, S);
    double sum = 0;
    *all_argmax = 1;
    for (int i = from; i < n - 1; i++) {
        gpt_infer(m, c, tokens, NULL, 0, i + 1, logits);
        double mx = logits[0], z = 0;
        int arg = 0;
        for (int v = 1; v < V; v++)
            if (logits[v] > mx) mx = logits[v], arg = v;
        for (int v = 0; v < V; v++) z += exp((double)logits[v] - mx);
        sum += (double)logits[tokens[i + 1]] - mx - log(z);
        *all_argmax &= arg == tokens[i + 1];
    }
    gpt_kv_free(m, c);
    free(logits);
    return sum;
}

static const char *write_tmp(const char *name, const char *text)
{
    static char path[4][512];
    static int k;
    char *p = path[k++ % 4];
    snprintf(p, 512, "%s/%s", TD_TEST_TMP, name);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    return p;
}

/* text + the model's most likely next token (decoded): an example the model gets right. */
static void greedy_next(gpt_model *m, const char *text, char *out, size_t len)
{
    int n, V = m->cfg.vocab;
    int32_t *t = encode(text, &n);
    float *logits = malloc((size_t)V * sizeof(float));
    gpt_kv_cache *c = gpt_kv_create(m, 1, S, S);
    gpt_infer(m, c, t, NULL, 0, n, logits);
    int32_t arg = 0;
    for (int v = 1; v < V; v++)
        if (logits[v] > logits[arg]) arg = v;
    char *dec = NULL, err[128];
    size_t dl = 0;
    assert_int_equal(tok_decode(g_tok, &arg, 1, &dec, &dl, err, sizeof err), 0);
    snprintf(out, len, "%s%.*s", text, (int)dl, dec);
    free(dec), free(logits), free(t);
    gpt_kv_free(m, c);
}

static void lambada(void **state)
{
    (void)state;
    gpt_model *m = model(2);
    char own[2][256];
    greedy_next(m, "the cat sat on the mat and then the", own[0], sizeof own[0]);
    greedy_next(m, "she opened the door and saw", own[1], sizeof own[1]);
    const char *texts[] = {own[0], "she opened the door and saw her brother", own[1],
                           "one two three four five six seven eight nine ten",
                           "the old man and the sea is a novel by hemingway", "it was the best of times, it was"};
    enum { N = 6 };
    char jsonl[2048] = "";
    for (int i = 0; i < N; i++) {
        strcat(jsonl, "{\"text\": \"");
        strcat(jsonl, texts[i]);
        strcat(jsonl, "\"}\n");
    }
    const char *path = write_tmp("lambada.jsonl", jsonl);
    for (int strict = 0; strict <= 1; strict++) {
        int want = 0;
        for (int i = 0; i < N; i++) {
            int n, nc, all;
            int32_t *tokens;
            if (!strict) {
                tokens = encode(texts[i], &n);
                nc = n - 1;
            } else { /* the context before the last word, then " " + the word */
                const char *sp = strrchr(texts[i], ' ');
                char ctx[256];
                memcpy(ctx, texts[i], (size_t)(sp - texts[i]));
                ctx[sp - texts[i]] = 0;
                int nw;
                int32_t *c = encode(ctx, &nc), *wd = encode(sp, &nw);
                n = nc + nw;
                tokens = malloc((size_t)n * sizeof(int32_t));
                memcpy(tokens, c, (size_t)nc * sizeof(int32_t));
                memcpy(tokens + nc, wd, (size_t)nw * sizeof(int32_t));
                free(c), free(wd);
            }
            logprob(m, tokens, n, nc - 1, &all);
            want += all;
            free(tokens);
        }
        ev_lambada_result r;
        char err[512] = "";
        assert_int_equal(ev_lambada(m, g_ps, g_tok, path, strict, &r, err, sizeof err), 0);
        printf("  LAMBADA%s: %lld of %lld (expected %d)\n", strict ? " strict" : "", (long long)r.correct,
               (long long)r.n, want);
        assert_int_equal(r.n, N);
        assert_int_equal(r.correct, want);
    }
    /* a malformed line is refused, naming it */
    ev_lambada_result r;
    char err[512] = "";
    assert_int_equal(ev_lambada(m, g_ps, g_tok, write_tmp("bad.jsonl", "{\"text\": \"ok\"}\n{\"txt\": 1}\n"), 0, &r,
                                err, sizeof err), -1);
    assert_non_null(strstr(err, "line 2 (example 2)"));
    gpt_free(m);
}

static void hellaswag(void **state)
{
    (void)state;
    const char *ctx[3] = {"A man is sitting on a roof. He", "The dog runs to the", "She poured the water into"};
    const char *ends[3][4] = {{"is using wrap to wrap a pair of skis.", "is ripping level tiles off.",
                               "is holding a rubik's cube.", "starts pulling up roofing on a roof."},
                              {"ball", "moon and back again quickly", "kitchen", "end of the long road"},
                              {"a glass", "the sink slowly", "the plant pot by the window", "it"}};
    gpt_model *m = model(4);
    int arg[3], arg_norm[3];
    for (int e = 0; e < 3; e++) { /* the model's choices by summed and by mean loss, computed here */
        double best = INFINITY, best_norm = INFINITY;
        for (int k = 0; k < 4; k++) {
            int nc, ne, all;
            int32_t *c = encode(ctx[e], &nc);
            char sp[256];
            snprintf(sp, sizeof sp, " %s", ends[e][k]);
            int32_t *t = encode(sp, &ne);
            int32_t *tok = malloc((size_t)(nc + ne) * sizeof(int32_t));
            memcpy(tok, c, (size_t)nc * sizeof(int32_t));
            memcpy(tok + nc, t, (size_t)ne * sizeof(int32_t));
            double loss = -logprob(m, tok, nc + ne, nc - 1, &all);
            if (loss < best) best = loss, arg[e] = k;
            if (loss / ne < best_norm) best_norm = loss / ne, arg_norm[e] = k;
            free(c), free(t), free(tok);
        }
    }
    /* labels: the summed choice, the mean choice, and neither */
    int label[3] = {arg[0], arg_norm[1], 0};
    while (label[2] == arg[2] || label[2] == arg_norm[2]) label[2]++;
    int want = 0, want_norm = 0;
    for (int e = 0; e < 3; e++) want += arg[e] == label[e], want_norm += arg_norm[e] == label[e];
    char jsonl[4096] = "", line[1024];
    for (int e = 0; e < 3; e++) {
        snprintf(line, sizeof line, "{\"ctx\": \"%s\", \"label\": %d, \"endings\": [\"%s\", \"%s\", \"%s\", \"%s\"]}\n",
                 ctx[e], label[e], ends[e][0], ends[e][1], ends[e][2], ends[e][3]);
        strcat(jsonl, line);
    }
    const char *path = write_tmp("hellaswag.jsonl", jsonl);
    ev_hellaswag_result r;
    char err[512] = "";
    assert_int_equal(ev_hellaswag(m, g_ps, g_tok, path, &r, err, sizeof err), 0);
    printf("  HellaSwag: acc %lld of 3 (expected %d), acc_norm %lld (expected %d)\n", (long long)r.correct, want,
           (long long)r.correct_norm, want_norm);
    assert_int_equal(r.n, 3);
    assert_true(want >= 1 && want_norm >= 1);
    assert_int_equal(r.correct, want);
    assert_int_equal(r.correct_norm, want_norm);
    gpt_free(m);
}

static void wikitext(void **state)
{
    (void)state;
    const char *raw = " = Robert Boulter = \n Robert Boulter is an English film , television and theatre actor . He had "
                      "a guest @-@ starring role on the television series The Bill in 2000 . This was followed by a "
                      "starring role in the play Herons written by Simon Stephens , which was performed in 2001 at the "
                      "Royal Court Theatre . \n";
    const char *path = write_tmp("wiki.test.tokens", raw);
    gpt_model *m = model(2);
    int K = 8, n;
    char *det = ev_wikitext_detokenize(raw);
    int32_t *tokens = encode(det, &n);
    /* windows of S + 1 every K: the first scores all S targets, each later one its last K */
    double sum = 0;
    int64_t scored = 0, nwin = ev_num_windows(n, S, K);
    for (int64_t w = 0; w < nwin; w++) {
        int all;
        int first = w == 0 ? 0 : S - K;
        sum -= logprob(m, tokens + w * K, S + 1, first, &all);
        scored += S - first;
    }
    ev_wikitext_result r;
    char err[512] = "";
    assert_int_equal(ev_wikitext(m, g_ps, g_tok, path, K, &r, err, sizeof err), 0);
    double loss = sum / (double)scored, words = (double)ev_count_space_split(raw);
    double adjusted = exp(loss * (n - 1) / (words - 1));
    printf("  WikiText: loss %.6f (expected %.6f), adjusted perplexity %.3f (expected %.3f), %lld windows\n", r.loss,
           loss, r.adjusted_perplexity, adjusted, (long long)r.windows);
    assert_int_equal(r.tokens, scored);
    assert_true(fabs(r.loss - loss) < 1e-5 * loss);
    assert_true(fabs(r.adjusted_perplexity - adjusted) < 1e-4 * adjusted);
    free(det), free(tokens);
    gpt_free(m);
}

/* Expects fn's refusal of a file holding text, with every `want` in the message. */
static void expect_task_error(const char *task, const char *name, const char *text, const char *want1,
                              const char *want2)
{
    gpt_model *m = model(4);
    const char *path = write_tmp(name, text);
    char err[512] = "";
    int rc;
    if (strcmp(task, "hellaswag") == 0) {
        ev_hellaswag_result r;
        rc = ev_hellaswag(m, g_ps, g_tok, path, &r, err, sizeof err);
    } else if (strcmp(task, "lambada") == 0) {
        ev_lambada_result r;
        rc = ev_lambada(m, g_ps, g_tok, path, 0, &r, err, sizeof err);
    } else {
        ev_wikitext_result r;
        rc = ev_wikitext(m, g_ps, g_tok, path, 8, &r, err, sizeof err);
    }
    gpt_free(m);
    if (rc != -1) fail_msg("%s accepted %s", task, name);
    if (!strstr(err, path) || !strstr(err, want1) || (want2 && !strstr(err, want2)))
        fail_msg("%s on %s: '%s' should name the file, '%s' and '%s'", task, name, err, want1, want2 ? want2 : "");
}

/* Bad task files: a HellaSwag label that is not an ending's index (-1, 7, 1.7) is refused naming
 * its line (it used to score as a wrong answer); an empty file says so (it used to print an empty
 * message); a WikiText file that is not UTF-8 names the first bad byte's offset (it used to stop
 * on an internal PCRE2 error). */
static void bad_task_files(void **state)
{
    (void)state;
    const char *good = "{\"ctx\": \"The dog runs to the\", \"label\": 0, \"endings\": [\"a\", \"b\", \"c\", \"d\"]}\n";
    const char *labels[] = {"-1", "7", "1.7"};
    for (int i = 0; i < 3; i++) {
        char text[512], want[64];
        snprintf(text, sizeof text, "%s\n{\"ctx\": \"x\", \"label\": %s, \"endings\": [\"a\", \"b\", \"c\", \"d\"]}\n",
                 good, labels[i]);
        snprintf(want, sizeof want, "\"label\" is %s;", labels[i]);
        expect_task_error("hellaswag", "label.jsonl", text, "line 3 (example 2)", want);
    }
    expect_task_error("hellaswag", "empty.jsonl", "", "holds no examples (it is empty)", NULL);
    expect_task_error("lambada", "empty.jsonl", "", "holds no examples (it is empty)", NULL);
    expect_task_error("lambada", "blank.jsonl", "\n  \n", "holds no examples (only blank lines)", NULL);
    expect_task_error("lambada", "notext.jsonl", "{\"text\": \"ok\"}\n\n{\"txt\": 1}\n", "line 3 (example 2)", NULL);
    expect_task_error("wikitext", "latin1.tokens", " = Caf\xe9 = \n", "byte 6 (0xe9)", "not UTF-8");
    expect_task_error("wikitext", "overlong.tokens", "ab\xc0\xaf", "byte 2 (0xc0)", NULL);
    expect_task_error("wikitext", "surrogate.tokens", "abc\xed\xa0\x80", "byte 3 (0xed)", NULL);
    expect_task_error("wikitext", "cut.tokens", "abcd \xe2\x82", "byte 5 (0xe2)", NULL);
}

int main(int argc, char **argv)
{
    g_world = comm_world_init(&argc, &argv);
    g_ps = ps_init(g_world, 1, 1);
    g_be = be_create("cpu", 0);
    char err[512];
    tok_spec spec = {"GPT2BPETokenizer", TD_TEST_DATA "/gpt2/vocab.json", TD_TEST_DATA "/gpt2/merges.txt", NULL};
    g_tok = tok_open(&spec, err, sizeof err);
    if (!g_tok) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(detokenizer),
        cmocka_unit_test(lambada),
        cmocka_unit_test(hellaswag),
        cmocka_unit_test(wikitext),
        cmocka_unit_test(bad_task_files),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    tok_free(g_tok);
    be_free(g_be);
    ps_free(g_ps);
    comm_world_finalize(g_world);
    return rc;
}
