/* src/core: Philox against the Random123 known-answer vectors, the arena, the flag parser and the
 * flag combinations --model fixes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "trident/arena.h"
#include "trident/activation.h"
#include "trident/args.h"
#include "trident/dynlib.h"
#include "trident/philox.h"

static void philox_known_answers(void **state)
{
    (void)state;
    /* Random123 kat_vectors, philox4x32_10. */
    struct { uint32_t ctr[4], key[2], out[4]; } kat[] = {
        {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
        {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff},
         {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
        {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0},
         {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
    };
    for (size_t i = 0; i < sizeof kat / sizeof kat[0]; i++) {
        td_philox_ctr c;
        td_philox_key k;
        memcpy(c.v, kat[i].ctr, sizeof c.v);
        memcpy(k.v, kat[i].key, sizeof k.v);
        td_philox_ctr r = td_philox4x32(c, k);
        for (int j = 0; j < 4; j++) assert_int_equal(r.v[j], kat[i].out[j]);
        /* the batched form: block 0 is the same answer, block b the block function of ctr + b (the
         * first word wraps at 2^32: the second vector starts at 0xffffffff) */
        uint32_t out[4][TD_PHILOX_BATCH];
        td_philox4x32_batch(out, c, k);
        for (int b = 0; b < TD_PHILOX_BATCH; b++) {
            td_philox_ctr cb = c;
            cb.v[0] += (uint32_t)b;
            td_philox_ctr rb = td_philox4x32(cb, k);
            for (int j = 0; j < 4; j++) assert_int_equal(out[j][b], rb.v[j]);
        }
        for (int j = 0; j < 4; j++) assert_int_equal(out[j][0], kat[i].out[j]);
    }
}

static void philox_slices_match_whole(void **state)
{
    (void)state;
    enum { N = 1000 };
    float whole[N], part[N];
    td_philox_fill_normal(whole, N, 42, 7, 0, 0.0f, 0.02f);
    td_philox_fill_normal(part, 300, 42, 7, 0, 0.0f, 0.02f);
    td_philox_fill_normal(part + 300, N - 300, 42, 7, 300, 0.0f, 0.02f);
    assert_memory_equal(whole, part, sizeof whole);
    /* moments of a normal stream */
    double s = 0, s2 = 0;
    enum { M = 200000 };
    for (int i = 0; i < M; i++) {
        double x = td_philox_normal(1, 2, (uint64_t)i);
        s += x;
        s2 += x * x;
    }
    assert_true(fabs(s / M) < 0.01);
    assert_true(fabs(s2 / M - 1.0) < 0.02);
    /* each draw is Box-Muller of its block's first two words (24 bits each), within float
     * rounding of the same formula in double through libm; across a wrap of the counter's first
     * word (the batched path stops there) the fill gives each index's own draw */
    double worst = 0;
    for (uint64_t i = 0; i < 100000; i++) {
        td_philox_ctr r = td_philox_at(td_philox_key_from_seed(3), 4, i * 7919);
        double u1 = 1.0 - (double)(r.v[0] >> 8) / 16777216.0, u2 = (double)(r.v[1] >> 8) / 16777216.0;
        double ref = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
        double err = fabs(td_philox_normal(3, 4, i * 7919) - ref) / (1.0 + fabs(ref));
        worst = err > worst ? err : worst;
    }
    assert_true(worst < 2e-6);
    float wrap[40];
    uint64_t at = 0xffffffffull - 20;
    td_philox_fill_normal(wrap, 40, 3, 4, at, 1.0f, 2.0f);
    for (int i = 0; i < 40; i++) assert_true(wrap[i] == 1.0f + 2.0f * td_philox_normal(3, 4, at + (uint64_t)i));
    /* different streams differ */
    assert_true(td_philox_uniform(1, 2, 3) != td_philox_uniform(1, 3, 3));
    for (int i = 0; i < 1000; i++) assert_true(td_philox_below(9, 9, (uint64_t)i, 7) < 7);
}

static void arena_aligns_and_releases(void **state)
{
    (void)state;
    td_arena a;
    td_arena_init(&a, 1024);
    char *p = td_arena_alloc(&a, 3, "p");
    size_t mark = td_arena_mark(&a);
    char *q = td_arena_alloc(&a, 100, "q");
    assert_int_equal((uintptr_t)p % 64, 0);
    assert_int_equal((uintptr_t)q % 64, 0);
    assert_true(q >= p + 3);
    td_arena_release(&a, mark);
    char *r = td_arena_alloc(&a, 100, "r");
    assert_ptr_equal(q, r);
    assert_true(a.peak >= 164);
    td_arena_free(&a);
}

static void args_parse_values(void **state)
{
    (void)state;
    char *argv[] = {"train", "--num-layers", "4", "--lr=3e-4", "--data-path", "0.7", "A", "0.3", "B",
                    "--lr-decay-style", "cosine", "--train-iters", "10"};
    td_args a;
    int rc = td_args_parse(&a, TD_CMD_TRAIN, "trident train", 13, argv, 1);
    assert_int_equal(rc, 0);
    assert_int_equal(a.num_layers, 4);
    assert_true(fabs(a.lr - 3e-4) < 1e-12);
    assert_int_equal(a.data_path.n, 4);
    assert_string_equal(a.data_path.v[3], "B");
    assert_string_equal(a.lr_decay_style, "cosine");
    assert_int_equal(a.hidden_size, 768); /* default */
    assert_true(td_args_given(&a, "--train-iters"));
    assert_false(td_args_given(&a, "--train-samples"));
    td_args_free(&a);
}

/* Runs the parser in a child; returns its exit status. */
static int parse_in_child(unsigned cmd, int argc, char **argv)
{
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stderr)) _exit(99);
        td_args a;
        td_args_parse(&a, cmd, "trident test", argc, argv, 1);
        _exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void args_bad_values_exit_2(void **state)
{
    (void)state;
    char *unknown[] = {"train", "--no-such-flag", "1"};
    char *notint[] = {"train", "--num-layers", "four"};
    char *range[] = {"train", "--hidden-dropout", "1.5"};
    char *choice[] = {"train", "--lr-decay-style", "exp"};
    char *wrongcmd[] = {"tokenize", "--num-layers", "2"};
    char *missing[] = {"train", "--num-layers"};
    assert_int_equal(parse_in_child(TD_CMD_TRAIN, 3, unknown), 2);
    assert_int_equal(parse_in_child(TD_CMD_TRAIN, 3, notint), 2);
    assert_int_equal(parse_in_child(TD_CMD_TRAIN, 3, range), 2);
    assert_int_equal(parse_in_child(TD_CMD_TRAIN, 3, choice), 2);
    assert_int_equal(parse_in_child(TD_CMD_TOKENIZE, 3, wrongcmd), 2);
    assert_int_equal(parse_in_child(TD_CMD_TRAIN, 2, missing), 2);
    char *good[] = {"train", "--num-layers", "2"};
    assert_int_equal(parse_in_child(TD_CMD_TRAIN, 3, good), 0);
}

/* The index of a choice flag's value: --model's choices are "gpt|bert" (gpt_kind's order). */
static void args_choice_index(void **state)
{
    (void)state;
    char *argv[] = {"train", "--model", "bert"};
    td_args a;
    assert_int_equal(td_args_parse(&a, TD_CMD_TRAIN, "trident train", 1, argv, 1), 0);
    assert_int_equal(td_args_choice_index(&a, "--model"), 0); /* the default, gpt */
    td_args_free(&a);
    assert_int_equal(td_args_parse(&a, TD_CMD_TRAIN, "trident train", 3, argv, 1), 0);
    assert_int_equal(td_args_choice_index(&a, "--model"), 1);
    assert_int_equal(td_args_choice_index(&a, "--num-layers"), -1); /* no choice flag */
    assert_int_equal(td_args_choice_index(&a, "--no-such-flag"), -1);
    assert_string_equal(TD_MODEL_CHOICES, "gpt|bert");
    td_args_free(&a);
}

/* The flag combinations --model fixes: each argv, and the words its one line must hold (NULL:
 * accepted). */
static void args_model_rules(void **state)
{
    (void)state;
    struct {
        const char *argv[12];
        const char *want;
    } cases[] = {
        {{"--data-path", "A"}, NULL},
        {{"--data-path", "1", "A", "1", "B"}, NULL}, /* a blend is fine for gpt */
        {{"--bert-no-binary-head"}, "--bert-binary-head and --bert-no-binary-head need --model bert"},
        {{"--bert-binary-head", "--model", "gpt"}, "need --model bert"},
        {{"--model", "bert", "--data-path", "A"}, "needs BERT's WordPiece tokenizer"},
        {{"--model", "bert", "--tokenizer-type", "BertWordPieceLowerCase", "--data-path", "A"}, NULL},
        {{"--model", "bert", "--tokenizer-type", "BertWordPieceCase", "--data-path", "A", "--bert-no-binary-head"},
         NULL},
        {{"--model", "bert", "--tokenizer-type", "HuggingFaceTokenizer", "--data-path", "A"}, NULL},
        {{"--model", "bert", "--tokenizer-type", "BertWordPieceLowerCase", "--data-path", "1", "A", "1", "B"},
         "not a blend"},
        {{"--model", "bert", "--tokenizer-type", "BertWordPieceLowerCase", "--data-path", "A", "--normalization",
          "RMSNorm"}, "with LayerNorm: leave out --normalization RMSNorm"},
        {{"--model", "bert", "--tokenizer-type", "BertWordPieceLowerCase", "--data-path", "A",
          "--position-embedding-type", "rope"}, "leave out --position-embedding-type rope"},
        {{"--model", "bert", "--tokenizer-type", "BertWordPieceLowerCase", "--data-path", "A", "--swiglu"},
         "leave out --swiglu"},
        {{"--model", "bert", "--tokenizer-type", "BertWordPieceLowerCase", "--data-path", "A", "--gated-linear-unit"},
         "--gated-linear-unit"},
        {{"--model", "bert", "--tokenizer-type", "BertWordPieceLowerCase", "--data-path", "A", "--activation-func",
          "gelu_erf"}, NULL},
        {{"--model", "bert", "--tokenizer-type", "BertWordPieceLowerCase", "--data-path", "A",
          "--untie-embeddings-and-output-weights"}, "leave out --swiglu"},
        {{"--model", "bert", "--tokenizer-type", "BertWordPieceLowerCase", "--data-path", "A", "--bert-binary-head",
          "--bert-no-binary-head"}, "give at most one of --bert-binary-head and --bert-no-binary-head"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *argv[13] = {"train"};
        int argc = 1;
        while (argc < 13 && cases[i].argv[argc - 1]) {
            argv[argc] = (char *)cases[i].argv[argc - 1];
            argc++;
        }
        td_args a;
        assert_int_equal(td_args_parse(&a, TD_CMD_TRAIN, "trident train", argc, argv, 1), 0);
        char msg[512] = "";
        int rc = td_args_check_model(&a, msg, sizeof msg);
        if (cases[i].want ? rc != -1 || !strstr(msg, cases[i].want) : rc != 0)
            fail_msg("case %zu (%s ...): rc %d, '%s'; wanted %s", i, argv[1], rc, msg,
                     cases[i].want ? cases[i].want : "acceptance");
        td_args_free(&a);
    }
}

/* The activation axes from the flags (Megatron's switches and the explicit pair), the conflicts
 * named, Hugging Face's names, and the table in the order of --activation-func's choices. */
static void activation_axes(void **state)
{
    (void)state;
    static const struct {
        const char *argv[6];
        int act, glu;      /* -1: refused */
        const char *want;  /* the refusal names */
    } cases[] = {
        {{NULL}, TD_ACT_GELU, 0, NULL},
        {{"--swiglu"}, TD_ACT_SILU, 1, NULL},
        {{"--squared-relu"}, TD_ACT_SQUARED_RELU, 0, NULL},
        {{"--openai-gelu"}, TD_ACT_GELU, 0, NULL},
        {{"--activation-func", "gelu", "--gated-linear-unit"}, TD_ACT_GELU, 1, NULL}, /* GeGLU */
        {{"--activation-func", "gelu_erf"}, TD_ACT_GELU_ERF, 0, NULL},
        {{"--activation-func", "relu", "--gated-linear-unit"}, TD_ACT_RELU, 1, NULL},
        {{"--swiglu", "--activation-func", "silu"}, TD_ACT_SILU, 1, NULL},
        {{"--squared-relu", "--gated-linear-unit"}, TD_ACT_SQUARED_RELU, 1, NULL},
        {{"--swiglu", "--squared-relu"}, -1, 0, "--swiglu and --squared-relu choose two activations"},
        {{"--swiglu", "--activation-func", "gelu"}, -1, 0, "--swiglu means --activation-func silu, not gelu"},
        {{"--openai-gelu", "--activation-func", "gelu_erf"}, -1, 0, "--openai-gelu means --activation-func gelu"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *argv[7] = {"train"};
        int argc = 1;
        while (argc < 7 && cases[i].argv[argc - 1]) {
            argv[argc] = (char *)cases[i].argv[argc - 1];
            argc++;
        }
        td_args a;
        assert_int_equal(td_args_parse(&a, TD_CMD_TRAIN, "trident train", argc, argv, 1), 0);
        char msg[256] = "";
        int act = -9, glu = -9, rc = td_act_of_args(&a, &act, &glu, msg, sizeof msg);
        if (cases[i].act < 0 ? rc != -1 || !strstr(msg, cases[i].want)
                             : rc != 0 || act != cases[i].act || glu != cases[i].glu)
            fail_msg("case %zu: rc %d act %d glu %d '%s'", i, rc, act, glu, msg);
        td_args_free(&a);
    }
    static const struct { const char *hf; int act; } hf[] = {
        {"gelu_new", TD_ACT_GELU}, {"gelu_pytorch_tanh", TD_ACT_GELU}, {"gelu_fast", TD_ACT_GELU},
        {"gelu", TD_ACT_GELU_ERF}, {"silu", TD_ACT_SILU}, {"swish", TD_ACT_SILU}, {"relu", TD_ACT_RELU},
        {"relu2", TD_ACT_SQUARED_RELU}, {"quick_gelu", -1}, {"gelu_new2", -1}, {"", -1}};
    for (size_t i = 0; i < sizeof hf / sizeof hf[0]; i++) assert_int_equal(td_act_from_hf(hf[i].hf), hf[i].act);
    /* every row's export name reads back as itself; the rows in the order of the choices */
    const char *p = TD_ACT_CHOICES;
    for (int i = 0; i < TD_ACT_COUNT; i++) {
        assert_int_equal(td_act_from_hf(TD_ACTS[i].hf), i);
        size_t n = strcspn(p, "|");
        assert_true(strlen(TD_ACTS[i].name) == n && strncmp(p, TD_ACTS[i].name, n) == 0);
        p += n + (p[n] == '|');
    }
    assert_true(*p == 0);
    assert_string_equal(td_act_label(TD_ACT_SILU, 1), "SwiGLU");
    assert_string_equal(td_act_label(TD_ACT_GELU, 1), "GeGLU");
    assert_string_equal(td_act_label(TD_ACT_GELU, 0), "GeLU");
}

/* td_dynlib_open in a child whose stderr goes to out (n bytes): its exit status. */
static int dynlib_in_child(const char *soname, const char *sym, char *out, size_t n)
{
    char path[] = "/tmp/td_dynlib_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd, 2);
        double (*fn)(double) = NULL;
        const td_dynsym syms[] = {{sym, (void **)&fn}};
        td_dynlib_open(soname, "the dynlib test", "install nothing: this is a test", syms, 1);
        _exit(fn ? 0 : 98);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    ssize_t got = pread(fd, out, n - 1, 0);
    out[got > 0 ? got : 0] = 0;
    close(fd);
    unlink(path);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* A library opened when needed: the functions found and called; a second call returns at once; a
 * missing library or function ends with exit 1 and one line naming it, what needed it and the fix. */
static void dynlib_opens_and_refuses(void **state)
{
    (void)state;
    double (*cos_fn)(double) = NULL;
    const td_dynsym syms[] = {{"cos", (void **)&cos_fn}};
    td_dynlib_open("libm.so.6", "the dynlib test", "-", syms, 1);
    assert_non_null(cos_fn);
    assert_true(cos_fn(0.5) == cos(0.5));
    double (*first)(double) = cos_fn;
    td_dynlib_open("libm.so.6", "the dynlib test", "-", syms, 1);
    assert_true(cos_fn == first);

    char out[1024];
    assert_int_equal(dynlib_in_child("libtrident-absent.so.9", "cos", out, sizeof out), 1);
    assert_non_null(strstr(out, "the dynlib test needs the shared library libtrident-absent.so.9"));
    assert_non_null(strstr(out, "install nothing: this is a test"));
    assert_non_null(strchr(out, '\n'));
    assert_null(strchr(strchr(out, '\n') + 1, '\n'));
    assert_int_equal(dynlib_in_child("libm.so.6", "td_no_such_function", out, sizeof out), 1);
    assert_non_null(strstr(out, "needs td_no_such_function from libm.so.6"));
    assert_int_equal(dynlib_in_child("libm.so.6", "sin", out, sizeof out), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(philox_known_answers),
        cmocka_unit_test(philox_slices_match_whole),
        cmocka_unit_test(arena_aligns_and_releases),
        cmocka_unit_test(args_parse_values),
        cmocka_unit_test(args_bad_values_exit_2),
        cmocka_unit_test(args_choice_index),
        cmocka_unit_test(args_model_rules),
        cmocka_unit_test(activation_axes),
        cmocka_unit_test(dynlib_opens_and_refuses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
