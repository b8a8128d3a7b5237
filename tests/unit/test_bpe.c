/* src/data/bpe.c against GPT-2's reference encoder (ids committed in tests/fixtures by
 * scripts/bpe-reference.js), lossless round trips of any bytes, threads sharing one tokenizer,
 * hand-worked merge semantics on a tiny vocab, and clear errors for bad files. */
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

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "trident/bpe.h"

#define VOCAB TD_TEST_DATA "/gpt2/vocab.json"
#define MERGES TD_TEST_DATA "/gpt2/merges.txt"

static bpe_tokenizer *g_tok;

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

static int setup(void **state)
{
    (void)state;
    char err[512];
    g_tok = bpe_load(VOCAB, MERGES, err, sizeof err);
    if (!g_tok) fprintf(stderr, "%s\n", err);
    return g_tok ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    bpe_free(g_tok);
    return 0;
}

static void encode(bpe_worker *w, const char *s, size_t n, bpe_ids *out)
{
    out->n = 0;
    bpe_encode(w, s, n, out);
}

/* Checks decode(ids) == text[0..n). */
static void assert_decodes_to(const bpe_ids *ids, const char *text, size_t n)
{
    char *out = NULL, err[256];
    size_t len = 0;
    assert_int_equal(bpe_decode(g_tok, ids->ids, ids->n, &out, &len, err, sizeof err), 0);
    assert_int_equal(len, n);
    assert_memory_equal(out, text, n);
    free(out);
}

static void vocab_basics(void **state)
{
    (void)state;
    assert_int_equal(bpe_vocab_size(g_tok), 50257);
    assert_int_equal(bpe_eod_id(g_tok), 50256);
    /* the EOD text is ordinary text to the encoder */
    bpe_worker *w = bpe_worker_new(g_tok);
    bpe_ids ids = {0};
    encode(w, "<|endoftext|>", 13, &ids);
    for (size_t i = 0; i < ids.n; i++) assert_int_not_equal(ids.ids[i], 50256);
    bpe_ids_free(&ids);
    bpe_worker_free(w);
}

/* Every string of the fixture file encodes to the reference's ids, with a cold and a warm cache. */
static void fixtures_match_reference(void **state)
{
    (void)state;
    size_t len;
    char *text = slurp(TD_TEST_FIXTURES "/bpe_reference.jsonl", &len);
    cJSON *cases[1024];
    int n_cases = 0, n_bad = 0;
    for (char *line = strtok(text, "\n"); line && n_cases < 1024; line = strtok(NULL, "\n")) {
        cases[n_cases] = cJSON_Parse(line);
        assert_non_null(cases[n_cases]);
        n_cases++;
    }
    assert_true(n_cases > 250);
    bpe_worker *w = bpe_worker_new(g_tok);
    bpe_ids ids = {0};
    for (int pass = 0; pass < 2; pass++) { /* the second pass hits the cache */
        for (int c = 0; c < n_cases; c++) {
            const char *s = cJSON_GetObjectItem(cases[c], "text")->valuestring;
            const cJSON *want = cJSON_GetObjectItem(cases[c], "ids");
            encode(w, s, strlen(s), &ids);
            int ok = (int)ids.n == cJSON_GetArraySize(want);
            for (int i = 0; ok && i < (int)ids.n; i++) ok = ids.ids[i] == cJSON_GetArrayItem(want, i)->valueint;
            if (!ok) {
                char *line = cJSON_PrintUnformatted(cases[c]);
                printf("mismatch on %s: got", line);
                for (size_t i = 0; i < ids.n; i++) printf(" %d", ids.ids[i]);
                printf("\n");
                free(line);
                n_bad++;
            }
            assert_decodes_to(&ids, s, strlen(s));
        }
    }
    assert_int_equal(n_bad, 0);
    for (int c = 0; c < n_cases; c++) cJSON_Delete(cases[c]);
    bpe_ids_free(&ids);
    bpe_worker_free(w);
    free(text);
}

/* tinyshakespeare round-trips, a fresh worker and a warm one alike (its speed is bench/'s to measure, not a
 * test's: bench/prep_json.sh). */
static void shakespeare_round_trip(void **state)
{
    (void)state;
    size_t len;
    char *text = slurp(TD_TEST_DATA "/tinyshakespeare.txt", &len);
    bpe_worker *w = bpe_worker_new(g_tok);
    bpe_ids ids = {0}, again = {0};
    encode(w, text, len, &ids);
    encode(w, text, len, &again);
    assert_int_equal(ids.n, 338025); /* the reference's count (the e2e test compares every id) */
    assert_int_equal(again.n, ids.n);
    assert_memory_equal(again.ids, ids.ids, ids.n * sizeof *ids.ids);
    assert_decodes_to(&ids, text, len);
    bpe_ids_free(&ids);
    bpe_ids_free(&again);
    bpe_worker_free(w);
    free(text);
}

static uint64_t xorshift(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Random bytes of several kinds: uniform, ASCII with stray high bytes, and pieces of valid and
 * broken UTF-8 (truncated, overlong, surrogates, past U+10FFFF, lone continuation bytes). */
static size_t random_bytes(uint64_t *s, char *buf, size_t cap)
{
    static const char *pieces[] = {"a", " ", "  ", "\n", "'s", "\xc3\xa9", "\xe4\xb8\xad", "\xf0\x9f\x91\x8d",
                                   "\xc3", "\xe4\xb8", "\xf0\x9f\x91", "\x80", "\xbf", "\xc0\xaf", "\xe0\x80\xaf",
                                   "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xf8\x88\x80\x80\x80", "\xff", "\xfe",
                                   "\xc2\xa0", "\xef\xbb\xbf", "\xc2\x85", "1", "!", "\t", "\x00"};
    size_t n = xorshift(s) % cap, kind = xorshift(s) % 3, len = 0;
    while (len < n) {
        uint64_t r = xorshift(s);
        if (kind == 0) {
            buf[len++] = (char)(r & 0xff);
        } else if (kind == 1) {
            buf[len++] = (char)(r % 16 == 0 ? 0x80 + (r >> 8) % 128 : 32 + (r >> 8) % 95);
        } else {
            const char *p = pieces[r % (sizeof pieces / sizeof pieces[0])];
            size_t k = p[0] ? strlen(p) : 1;
            if (len + k > cap) break;
            memcpy(buf + len, p, k);
            len += k;
        }
    }
    return len;
}

static void random_bytes_round_trip(void **state)
{
    (void)state;
    enum { CAP = 4096 };
    char buf[CAP];
    uint64_t seed = 0x243f6a8885a308d3ull;
    bpe_worker *w = bpe_worker_new(g_tok), *cold = NULL;
    bpe_ids ids = {0}, ids2 = {0};
    for (int iter = 0; iter < 1000; iter++) {
        size_t n = random_bytes(&seed, buf, CAP);
        encode(w, buf, n, &ids);
        for (size_t i = 0; i < ids.n; i++) assert_true(ids.ids[i] >= 0 && ids.ids[i] < 50256);
        assert_decodes_to(&ids, buf, n);
        if (iter % 100 == 0) { /* a fresh worker (empty cache) gives the same ids */
            cold = bpe_worker_new(g_tok);
            encode(cold, buf, n, &ids2);
            assert_int_equal(ids2.n, ids.n);
            assert_memory_equal(ids2.ids, ids.ids, ids.n * sizeof *ids.ids);
            bpe_worker_free(cold);
        }
    }
    /* long chunks: one word, one space run, one punctuation run, one invalid run of 200 KB */
    static char big[200000];
    const char fill[] = {'x', ' ', '!', (char)0xff};
    for (int k = 0; k < 4; k++) {
        memset(big, fill[k], sizeof big);
        encode(w, big, sizeof big, &ids);
        assert_decodes_to(&ids, big, sizeof big);
    }
    bpe_ids_free(&ids);
    bpe_ids_free(&ids2);
    bpe_worker_free(w);
}

/* Without PCRE2's JIT (TD_BPE_NO_JIT=1, the path for platforms that lack it) the regex runs in
 * windows; the ids must equal the JIT's on text and on random bytes. */
static void interpreter_matches_jit(void **state)
{
    (void)state;
    char err[512];
    setenv("TD_BPE_NO_JIT", "1", 1);
    bpe_tokenizer *slow = bpe_load(VOCAB, MERGES, err, sizeof err);
    unsetenv("TD_BPE_NO_JIT");
    if (!slow) fail_msg("%s", err);
    bpe_worker *wj = bpe_worker_new(g_tok), *wi = bpe_worker_new(slow);
    bpe_ids a = {0}, b = {0};
    size_t len;
    char *text = slurp(TD_TEST_DATA "/tinyshakespeare.txt", &len);
    static char buf[8192];
    uint64_t seed = 0x13198a2e03707344ull;
    for (int iter = 0; iter < 201; iter++) {
        const char *s = text;
        size_t n = len;
        if (iter) {
            n = random_bytes(&seed, buf, sizeof buf);
            s = buf;
        }
        encode(wj, s, n, &a);
        encode(wi, s, n, &b);
        assert_int_equal(a.n, b.n);
        assert_memory_equal(a.ids, b.ids, a.n * sizeof *a.ids);
    }
    /* chunks that end at and around the window edges (256, 512, 1024 bytes): every length within 16
     * bytes of each edge, so units of 1, 2 and 3 bytes end at, before and across it */
    const char *units[] = {" ", "x", "!", "\xff", "\xe4\xb8\xad", "1", "\t"};
    const char *tails[] = {"\xe4\xb8\xad", "x", " x", "\xff", "'s", "  ", ""};
    for (int u = 0; u < 7; u++)
        for (int t = 0; t < 7; t++)
            for (int e = 0; e < 3 * 33; e++) {
                size_t target = ((size_t)256 << (e / 33)) - 16 + (size_t)(e % 33), n = 0, k = strlen(units[u]);
                while (n + k <= target) memcpy(buf + n, units[u], k), n += k;
                memcpy(buf + n, tails[t], strlen(tails[t]));
                n += strlen(tails[t]);
                encode(wj, buf, n, &a);
                encode(wi, buf, n, &b);
                assert_int_equal(a.n, b.n);
                assert_memory_equal(a.ids, b.ids, a.n * sizeof *a.ids);
            }
    free(text);
    bpe_ids_free(&a);
    bpe_ids_free(&b);
    bpe_worker_free(wj);
    bpe_worker_free(wi);
    bpe_free(slow);
}

/* Bytes no regex alternative can match form their own chunk: splitting around them changes nothing. */
static void invalid_utf8_is_its_own_chunk(void **state)
{
    (void)state;
    bpe_worker *w = bpe_worker_new(g_tok);
    bpe_ids whole = {0}, part = {0}, cat = {0};
    const char *pieces[] = {"Hello", "\xff\xfe\xc3", " world", "\x80", "!"};
    char text[64] = "";
    for (int i = 0; i < 5; i++) {
        strcat(text, pieces[i]);
        encode(w, pieces[i], strlen(pieces[i]), &part);
        for (size_t j = 0; j < part.n; j++) bpe_ids_push(&cat, part.ids[j]);
    }
    encode(w, text, strlen(text), &whole);
    assert_int_equal(whole.n, cat.n);
    assert_memory_equal(whole.ids, cat.ids, cat.n * sizeof *cat.ids);
    /* a stray byte between letters splits the word */
    encode(w, "ab\xff" "cd", 5, &whole);
    assert_int_equal(whole.n, 3);
    bpe_ids_free(&whole);
    bpe_ids_free(&part);
    bpe_ids_free(&cat);
    bpe_worker_free(w);
}

typedef struct {
    const char *text;
    size_t len;
    bpe_ids ids;
} job;

static void *encode_job(void *arg)
{
    job *j = arg;
    bpe_worker *w = bpe_worker_new(g_tok);
    bpe_encode(w, j->text, j->len, &j->ids);
    bpe_worker_free(w);
    return NULL;
}

/* Four threads share one tokenizer, each with its own worker, and agree with one thread. */
static void threads_share_tokenizer(void **state)
{
    (void)state;
    size_t len;
    char *text = slurp(TD_TEST_DATA "/tinyshakespeare.txt", &len);
    len = 200000;
    job jobs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (job){text, len, {0}};
        assert_int_equal(pthread_create(&th[i], NULL, encode_job, &jobs[i]), 0);
    }
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    job serial = {text, len, {0}};
    encode_job(&serial);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(jobs[i].ids.n, serial.ids.n);
        assert_memory_equal(jobs[i].ids.ids, serial.ids.ids, serial.ids.n * sizeof(int32_t));
        bpe_ids_free(&jobs[i].ids);
    }
    bpe_ids_free(&serial.ids);
    free(text);
}

static void decode_rejects_bad_ids(void **state)
{
    (void)state;
    int32_t ids[] = {15496, 50257};
    char *out = NULL, err[256];
    size_t len = 0;
    assert_int_equal(bpe_decode(g_tok, ids, 2, &out, &len, err, sizeof err), -1);
    assert_non_null(strstr(err, "50257"));
    int32_t neg[] = {-1};
    assert_int_equal(bpe_decode(g_tok, neg, 1, &out, &len, err, sizeof err), -1);
    assert_int_equal(bpe_decode(g_tok, ids, 1, &out, &len, err, sizeof err), 0);
    assert_int_equal(len, 5);
    assert_memory_equal(out, "Hello", 5);
    free(out);
}

/* ---- a tiny vocab: the 256 byte tokens, a few merges, <|endoftext|> ----------------------- */

/* The GPT-2 alphabet spelling of byte b, as UTF-8. */
static void byte_char(int b, char *out)
{
    int self = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255), n = 0;
    for (int i = 0; i < b; i++) n += !((i >= 33 && i <= 126) || (i >= 161 && i <= 172) || (i >= 174 && i <= 255));
    unsigned cp = self ? (unsigned)b : 256u + (unsigned)n;
    if (cp < 0x80) out[0] = (char)cp, out[1] = 0;
    else out[0] = (char)(0xc0 | cp >> 6), out[1] = (char)(0x80 | (cp & 63)), out[2] = 0;
}

/* Writes a vocab of the 256 bytes (skipping `skip_byte`), then `extra` tokens, then EOD, to path. */
static void write_tiny_vocab(const char *path, const char **extra, int n_extra, int skip_byte, int with_eod)
{
    FILE *f = fopen(path, "wb");
    int id = 0;
    fputs("{", f);
    for (int b = 0; b < 256; b++) {
        if (b == skip_byte) continue;
        char c[4];
        byte_char(b, c);
        fprintf(f, "%s\"%s%s\": %d", id ? ", " : "", b == '"' || b == '\\' ? "\\" : "", c, id);
        id++;
    }
    for (int i = 0; i < n_extra; i++, id++) fprintf(f, ", \"%s\": %d", extra[i], id);
    if (with_eod) fprintf(f, ", \"<|endoftext|>\": %d", id);
    fputs("}", f);
    fclose(f);
}

#define TMP(name) TD_TEST_TMP "/bpe_" name

/* One round merges every occurrence of the lowest-ranked pair, left to right, before pairs it
 * creates are ranked: with merges (ab a) rank 0 and (a b) rank 1, "abab" -> [ab][ab]. A merge
 * as soon as its pair appears would give [aba][b]. Also: "aaa" -> [aa][a], leftmost first. */
static void tiny_vocab_merge_rounds(void **state)
{
    (void)state;
    const char *extra[] = {"ab", "aba", "aa"};
    write_tiny_vocab(TMP("tiny.json"), extra, 3, -1, 1);
    spit(TMP("tiny.txt"), "#version: 0.2\nab a\na b\na a\n");
    char err[512];
    bpe_tokenizer *t = bpe_load(TMP("tiny.json"), TMP("tiny.txt"), err, sizeof err);
    if (!t) fail_msg("%s", err);
    assert_int_equal(bpe_vocab_size(t), 260);
    assert_int_equal(bpe_eod_id(t), 259);
    bpe_worker *w = bpe_worker_new(t);
    bpe_ids ids = {0};
    encode(w, "abab", 4, &ids);
    assert_int_equal(ids.n, 2);
    assert_int_equal(ids.ids[0], 256);
    assert_int_equal(ids.ids[1], 256);
    encode(w, "aaa", 3, &ids);
    assert_int_equal(ids.n, 2);
    assert_int_equal(ids.ids[0], 258);
    assert_int_equal(ids.ids[1], 'a'); /* byte b is id b in this vocab */
    bpe_ids_free(&ids);
    bpe_worker_free(w);
    bpe_free(t);
}

/* Loads vocab/merges; expects failure with every `want` substring in the message. */
static void expect_load_error(const char *vocab, const char *merges, const char *want1, const char *want2)
{
    char err[512] = "";
    bpe_tokenizer *t = bpe_load(vocab, merges, err, sizeof err);
    if (t) fail_msg("loading %s + %s should fail", vocab, merges);
    if (!strstr(err, want1) || (want2 && !strstr(err, want2)))
        fail_msg("error message '%s' should name '%s' and '%s'", err, want1, want2 ? want2 : "");
}

static void bad_files_give_errors(void **state)
{
    (void)state;
    const char *extra[] = {"ab"};
    write_tiny_vocab(TMP("ok.json"), extra, 1, -1, 1);
    spit(TMP("ok.txt"), "#version: 0.2\na b\n");
    char err[512];
    bpe_tokenizer *t = bpe_load(TMP("ok.json"), TMP("ok.txt"), err, sizeof err);
    if (!t) fail_msg("%s", err);
    bpe_free(t);

    expect_load_error(TMP("missing.json"), TMP("ok.txt"), "missing.json", "vocab");
    expect_load_error(TMP("ok.json"), TMP("missing.txt"), "missing.txt", "merges");
    spit(TMP("bad1.json"), "{\"a\": 1,");
    expect_load_error(TMP("bad1.json"), TMP("ok.txt"), "bad1.json", "not valid JSON");
    spit(TMP("bad2.json"), "[1, 2, 3]");
    expect_load_error(TMP("bad2.json"), TMP("ok.txt"), "bad2.json", "not an object");
    spit(TMP("bad3.json"), "");
    expect_load_error(TMP("bad3.json"), TMP("ok.txt"), "bad3.json", "JSON");
    spit(TMP("bad4.json"), "{\"a\": \"zero\"}");
    expect_load_error(TMP("bad4.json"), TMP("ok.txt"), "bad4.json", "not a number");
    spit(TMP("bad5.json"), "{\"a\": 0, \"b\": 0}");
    expect_load_error(TMP("bad5.json"), TMP("ok.txt"), "bad5.json", "two tokens");
    spit(TMP("bad6.json"), "{\"a\": 0, \"b\": 7}");
    expect_load_error(TMP("bad6.json"), TMP("ok.txt"), "bad6.json", "out of range");
    spit(TMP("bad7.json"), "{\"a\": 0, \"b\\u4e2d\": 1}");
    expect_load_error(TMP("bad7.json"), TMP("ok.txt"), "bad7.json", "byte alphabet");
    spit(TMP("bad8.json"), "{\"a\": 0, \"b\": 1.5}");
    expect_load_error(TMP("bad8.json"), TMP("ok.txt"), "bad8.json", "ids must be");
    write_tiny_vocab(TMP("nobyte.json"), extra, 1, 'q', 1);
    expect_load_error(TMP("nobyte.json"), TMP("ok.txt"), "nobyte.json", "byte 0x71");
    write_tiny_vocab(TMP("noeod.json"), extra, 1, -1, 0);
    expect_load_error(TMP("noeod.json"), TMP("ok.txt"), "noeod.json", "<|endoftext|>");
    const char *dup[] = {"ab", "ab"};
    write_tiny_vocab(TMP("dup.json"), dup, 2, -1, 1);
    expect_load_error(TMP("dup.json"), TMP("ok.txt"), "dup.json", "same token");

    spit(TMP("m1.txt"), "#version: 0.2\nab\n");
    expect_load_error(TMP("ok.json"), TMP("m1.txt"), "m1.txt", "line 2");
    spit(TMP("m2.txt"), "#version: 0.2\na b c\n");
    expect_load_error(TMP("ok.json"), TMP("m2.txt"), "m2.txt", "two tokens");
    spit(TMP("m3.txt"), "#version: 0.2\na zz\n");
    expect_load_error(TMP("ok.json"), TMP("m3.txt"), "m3.txt", "\"zz\" is not in the vocab");
    spit(TMP("m4.txt"), "#version: 0.2\na b\nb a\n");
    expect_load_error(TMP("ok.json"), TMP("m4.txt"), "m4.txt", "merged token \"ba\"");
    spit(TMP("m5.txt"), "#version: 0.2\na \xe4\xb8\xad\n");
    expect_load_error(TMP("ok.json"), TMP("m5.txt"), "m5.txt", "byte alphabet");
    /* a token no merge makes: "xyz" has no "xy z" or "x yz" merge */
    const char *dead[] = {"ab", "xyz"};
    write_tiny_vocab(TMP("dead.json"), dead, 2, -1, 1);
    expect_load_error(TMP("dead.json"), TMP("ok.txt"), "token \"xyz\" (id 257)", "made by no merge");
    /* a merges file given as the vocab, and the other way round */
    expect_load_error(MERGES, VOCAB, "merges.txt", "not valid JSON");
    expect_load_error(VOCAB, VOCAB, "vocab.json", "merges file");
}

/* GPT-2's merges.txt cut to its first 1000 lines (the header and 999 merges) still holds only
 * valid merges, but 49001 vocab tokens are left that no merge makes: the first of them is the
 * result of merge 1000, "Ġresult" (id 256 + 999 = 1255; GPT-2 numbers its merged tokens after the
 * 256 bytes in merge order), refused, naming both files. */
static void truncated_merges_refused(void **state)
{
    (void)state;
    FILE *in = fopen(MERGES, "rb"), *out = fopen(TMP("merges_1000.txt"), "wb");
    assert_non_null(in);
    assert_non_null(out);
    char line[256];
    for (int i = 0; i < 1000 && fgets(line, sizeof line, in); i++) fputs(line, out);
    fclose(in);
    fclose(out);
    char err[1024] = "";
    bpe_tokenizer *t = bpe_load(VOCAB, TMP("merges_1000.txt"), err, sizeof err);
    if (t) fail_msg("a merges file of 999 merges loaded with the 50257-token vocab");
    const char *want[] = {"vocab.json", "merges_1000.txt", "(id 1255)", "the merges make 999 tokens",
                          "would hold 1256, it holds 50257", "truncated"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!strstr(err, want[i])) fail_msg("'%s' does not say '%s'", err, want[i]);
    assert_null(strchr(err, '\n'));
}

/* ---- the command line ----------------------------------------------------------------- */

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

#define BIN "'" TD_TRIDENT_BIN "' tokenize"
#define FILES " --vocab-file '" VOCAB "' --merge-file '" MERGES "'"

static void cli_tokenize_round_trips_and_fails_clearly(void **state)
{
    (void)state;
    /* trident --help's line for tokenize names the three kinds it reads (it said "GPT-2 BPE" only) */
    assert_int_equal(run("'" TD_TRIDENT_BIN "' --help > " TMP("main_help.txt")), 0);
    assert_true(file_contains(TMP("main_help.txt"), "tokenize     text to token ids and back: GPT-2 BPE, Hugging Face "
                                                    "tokenizer.json, WordPiece"));
    /* and convert's every transformers model_type it reads, from the converter's list of families */
    assert_true(file_contains(TMP("main_help.txt"), "convert      convert checkpoints between trident and Hugging Face; "
                                                    "model_type gpt2, llama, mistral, mixtral, qwen2_moe and megatron-bert\n"));
    assert_int_equal(run(BIN " --help > " TMP("help.txt")), 0);
    assert_true(file_contains(TMP("help.txt"), "--vocab-file"));
    assert_int_equal(run("printf 'Hello world\\nIt'\\''s\\n\\n' | " BIN FILES " > " TMP("enc.txt")), 0);
    assert_true(file_contains(TMP("enc.txt"), "15496 995\n1026 338\n\n"));
    assert_int_equal(run(BIN FILES " --decode < " TMP("enc.txt") " > " TMP("dec.txt")), 0);
    assert_true(file_contains(TMP("dec.txt"), "Hello world\nIt's\n\n"));
    assert_int_equal(run("printf 'a\\377\\n b' | " BIN FILES " --whole | " BIN FILES " --decode --whole > "
                         TMP("whole.txt")), 0);
    size_t len;
    char *s = slurp(TMP("whole.txt"), &len);
    assert_int_equal(len, 5);
    assert_memory_equal(s, "a\xff\n b", 5);
    free(s);

    assert_int_equal(run("echo hi | " BIN " --merge-file x 2> " TMP("err.txt")), 2);
    assert_true(file_contains(TMP("err.txt"), "--vocab-file is required"));
    assert_int_equal(run("echo hi | " BIN " --vocab-file '" VOCAB "' 2> " TMP("err.txt")), 2);
    assert_true(file_contains(TMP("err.txt"), "--merge-file is required"));
    assert_int_equal(run("echo hi | " BIN " --vocab-file /nonexistent/v.json --merge-file x 2> " TMP("err.txt")), 2);
    assert_true(file_contains(TMP("err.txt"), "/nonexistent/v.json"));
    assert_int_equal(run(BIN FILES " --no-such-flag 2> /dev/null"), 2);
    assert_int_equal(run("echo '15496 50257' | " BIN FILES " --decode 2> " TMP("err.txt")), 1);
    assert_true(file_contains(TMP("err.txt"), "line 1: token id 50257 is out of range"));
    assert_int_equal(run("printf '1\\n2 x3\\n' | " BIN FILES " --decode > /dev/null 2> " TMP("err.txt")), 1);
    assert_true(file_contains(TMP("err.txt"), "line 2: 'x3' is not a token id"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(vocab_basics),
        cmocka_unit_test(fixtures_match_reference),
        cmocka_unit_test(shakespeare_round_trip),
        cmocka_unit_test(random_bytes_round_trip),
        cmocka_unit_test(interpreter_matches_jit),
        cmocka_unit_test(invalid_utf8_is_its_own_chunk),
        cmocka_unit_test(threads_share_tokenizer),
        cmocka_unit_test(decode_rejects_bad_ids),
        cmocka_unit_test(tiny_vocab_merge_rounds),
        cmocka_unit_test(truncated_merges_refused),
        cmocka_unit_test(bad_files_give_errors),
        cmocka_unit_test(cli_tokenize_round_trips_and_fails_clearly),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
