/* src/data/preprocess.c: the JSON line reader, token ids against the tokenizer's own ids, empty
 * documents, bad lines (error with file:line and nothing written, or counted with
 * --skip-bad-lines), .gz/.zst inputs and worker counts giving byte-identical output, text format. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <cmocka.h>

#include "trident/bpe.h"
#include "trident/indexed.h"
#include "trident/preprocess.h"

static char g_dir[512];
static tok_tokenizer *g_tok;

static int setup(void **state)
{
    (void)state;
    snprintf(g_dir, sizeof g_dir, "%s/preprocess-%ld", TD_TEST_TMP, (long)getpid());
    mkdir(TD_TEST_TMP, 0755);
    mkdir(g_dir, 0755);
    char err[512];
    tok_spec spec = {"GPT2BPETokenizer", TD_TEST_DATA "/gpt2/vocab.json", TD_TEST_DATA "/gpt2/merges.txt", NULL};
    g_tok = tok_open(&spec, err, sizeof err);
    if (!g_tok) {
        fprintf(stderr, "cannot load the GPT-2 tokenizer: %s\n", err);
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tok_free(g_tok);
    return 0;
}

/* ---- helpers ---------------------------------------------------------------------------- */

static char *tmp_path(const char *name)
{
    static char buf[32][700];
    static int k;
    char *p = buf[k++ % 32];
    snprintf(p, sizeof buf[0], "%s/%s", g_dir, name);
    return p;
}

static void spit(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (n) assert_int_equal(fwrite(p, 1, n, f), n);
    fclose(f);
}

static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(sz > 0 ? (size_t)sz : 1);
    assert_int_equal(fread(b, 1, (size_t)sz, f), (size_t)sz);
    fclose(f);
    *n = (size_t)sz;
    return b;
}

/* Appends text as a JSON string (quotes included) to a growing buffer. */
static void json_escape(prep_str *o, const char *s, size_t n)
{
    char u[8];
    size_t need = o->n + 6 * n + 3;
    if (need > o->cap) {
        o->cap = need * 2;
        o->s = realloc(o->s, o->cap);
    }
    o->s[o->n++] = '"';
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            o->s[o->n++] = '\\';
            o->s[o->n++] = (char)c;
        } else if (c < 0x20) {
            snprintf(u, sizeof u, "\\u%04x", c);
            memcpy(o->s + o->n, u, 6);
            o->n += 6;
        } else {
            o->s[o->n++] = (char)c;
        }
    }
    o->s[o->n++] = '"';
}

static void append(prep_str *o, const char *s)
{
    size_t n = strlen(s);
    if (o->n + n + 1 > o->cap) {
        o->cap = (o->n + n + 1) * 2;
        o->s = realloc(o->s, o->cap);
    }
    memcpy(o->s + o->n, s, n);
    o->n += n;
}

/* JSON lines {"text": <chunk>} from the first `bytes` of tinyshakespeare, in chunks of ~`per`
 * bytes (cut at newlines), written to path. */
static void shakespeare_jsonl(const char *path, size_t bytes, size_t per)
{
    size_t n;
    unsigned char *all = slurp(TD_TEST_DATA "/tinyshakespeare.txt", &n);
    if (bytes < n) n = bytes;
    prep_str o = {0};
    for (size_t at = 0; at < n;) {
        size_t end = at + per < n ? at + per : n;
        while (end < n && all[end - 1] != '\n') end++;
        append(&o, "{\"id\": 7, \"text\": ");
        json_escape(&o, (const char *)all + at, end - at);
        append(&o, ", \"meta\": {\"a\": [1, 2.5e3, null, true]}}\n");
        at = end;
    }
    spit(path, o.s, o.n);
    free(o.s);
    free(all);
}

static prep_config base_config(const char *const *inputs, int n_inputs, const char *prefix)
{
    static const char *const text_key[] = {"text"};
    prep_config c = {0};
    c.inputs = inputs;
    c.n_inputs = n_inputs;
    c.keys = text_key;
    c.n_keys = 1;
    c.output_prefix = prefix;
    c.workers = 1;
    c.quiet = 1;
    return c;
}

static int run(const prep_config *c, prep_stats *st, char *err, size_t errlen)
{
    err[0] = '\0';
    return prep_run(c, g_tok, st, err, errlen);
}

static void run_ok(const prep_config *c, prep_stats *st)
{
    char err[1024];
    if (run(c, st, err, sizeof err) != 0) fail_msg("prep_run failed: %s", err);
}

/* The bytes of PREFIX_text_<level>.{bin,idx}, concatenated. */
static unsigned char *dataset_bytes(const char *prefix, const char *level, size_t *n)
{
    char path[800];
    size_t a, b;
    snprintf(path, sizeof path, "%s_text_%s.bin", prefix, level);
    unsigned char *bin = slurp(path, &a);
    snprintf(path, sizeof path, "%s_text_%s.idx", prefix, level);
    unsigned char *idx = slurp(path, &b);
    unsigned char *all = malloc(a + b + 1);
    memcpy(all, bin, a);
    memcpy(all + a, idx, b);
    free(bin);
    free(idx);
    *n = a + b;
    return all;
}

static void assert_same_dataset(const char *p1, const char *p2, const char *level)
{
    size_t n1, n2;
    unsigned char *a = dataset_bytes(p1, level, &n1), *b = dataset_bytes(p2, level, &n2);
    assert_int_equal(n1, n2);
    assert_memory_equal(a, b, n1);
    free(a);
    free(b);
}

static int files_with(const char *s)
{
    DIR *d = opendir(g_dir);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (strstr(e->d_name, s)) n++;
    closedir(d);
    return n;
}

/* Expects document i of the dataset to hold exactly the tokenizer's ids of text (+ EOD). */
static void expect_doc(idx_dataset *d, int64_t i, const char *text, size_t n, int eod)
{
    tok_worker *w = tok_worker_new(g_tok);
    bpe_ids want = {0};
    tok_encode(w, text, n, &want);
    if (eod) bpe_ids_push(&want, tok_eod_id(g_tok));
    assert_int_equal(idx_seq_len(d, i), (int32_t)want.n);
    int32_t *got = malloc(want.n * sizeof *got + 1);
    idx_read(d, i, 0, (int64_t)want.n, got);
    assert_memory_equal(got, want.ids, want.n * sizeof *got);
    free(got);
    bpe_ids_free(&want);
    tok_worker_free(w);
}

/* ---- the JSON line reader ------------------------------------------------------------------ */

static void json_lines_decode_like_python(void **state)
{
    (void)state;
    static const struct {
        const char *line, *want;
        size_t want_len;
    } ok[] = {
        {"{\"text\": \"hello\"}", "hello", 5},
        {"  {\"a\":1,\"text\":\"x\",\"b\":[{},[],\"s\",-0.5e+3,true,false,null]}  \r", "x", 1},
        {"{\"text\": \"\\\"q\\\" \\\\ \\/ \\b\\f\\n\\r\\t\"}", "\"q\" \\ / \b\f\n\r\t", 13},
        {"{\"text\": \"\\u00e9\\u4e2d\\ud83d\\ude00\"}", "\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80", 9},
        {"{\"text\": \"a\\u0000b\"}", "a\0b", 3},
        {"{\"text\": \"first\", \"text\": \"last\"}", "last", 4},
        {"{\"t\\u0065xt\": \"escaped key\"}", "escaped key", 11},
        {"{\"n\": NaN, \"i\": -Infinity, \"j\": Infinity, \"text\": \"\"}", "", 0},
        {"{\"text\": \"raw \xc3\xa9 bytes \xff\"}", "raw \xc3\xa9 bytes \xff", 14},
    };
    const char *keys[] = {"text"};
    prep_str out = {0};
    char err[256];
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        if (prep_json_extract(ok[i].line, strlen(ok[i].line), keys, 1, &out, err, sizeof err) != 0)
            fail_msg("line %zu rejected: %s", i, err);
        assert_int_equal(out.n, ok[i].want_len);
        assert_memory_equal(out.s, ok[i].want, out.n);
    }
    static const struct {
        const char *line, *why;
    } bad[] = {
        {"", "expected a JSON value"},
        {"{\"text\": \"x\"", "line ends"},
        {"{\"text\": \"x\",}", "expected a string key"},
        {"{\"text\" \"x\"}", "expected ':'"},
        {"{\"text\": \"x\"} {}", "extra data"},
        {"{\"text\": 'x'}", "expected a JSON value"},
        {"{\"text\": \"a\tb\"}", "control character"},
        {"{\"text\": \"\\x\"}", "invalid escape"},
        {"{\"text\": \"\\u12g4\"}", "four hex digits"},
        {"{\"text\": \"\\ud800\"}", "surrogate"},
        {"{\"text\": \"\\udc00\\ud800\"}", "surrogate"},
        {"{\"text\": 01}", "expected ',' or '}'"},
        {"{\"text\": 1.}", "after '.'"},
        {"{\"text\": tru}", "expected a JSON value"},
        {"[\"text\"]", "an array, not a JSON object"},
        {"\"text\"", "a string, not a JSON object"},
        {"{\"other\": \"x\"}", "no key \"text\""},
        {"{\"text\": 5}", "a number, not a string"},
        {"{\"text\": null}", "null, not a string"},
        {"{\"text\": [\"a\", \"b\"]}", "an array, not a string"},
        {"{\"text\": {\"a\": 1}}", "an object, not a string"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        if (prep_json_extract(bad[i].line, strlen(bad[i].line), keys, 1, &out, err, sizeof err) == 0)
            fail_msg("bad line %zu accepted: %s", i, bad[i].line);
        if (!strstr(err, bad[i].why)) fail_msg("bad line %zu: error '%s' does not say '%s'", i, err, bad[i].why);
    }
    /* nesting is bounded, not a stack overflow */
    enum { DEEP = 100000 };
    char *deep = malloc(DEEP * 2 + 32);
    size_t n = 0;
    n += (size_t)sprintf(deep, "{\"x\": ");
    for (int i = 0; i < DEEP; i++) deep[n++] = '[';
    for (int i = 0; i < DEEP; i++) deep[n++] = ']';
    deep[n++] = '}';
    assert_int_equal(prep_json_extract(deep, n, keys, 1, &out, err, sizeof err), -1);
    assert_non_null(strstr(err, "nested too deeply"));
    free(deep);
    /* two keys at once */
    const char *two[] = {"title", "text"};
    prep_str outs[2] = {{0}, {0}};
    const char *line = "{\"text\": \"body\", \"title\": \"head\"}";
    assert_int_equal(prep_json_extract(line, strlen(line), two, 2, outs, err, sizeof err), 0);
    assert_int_equal(outs[0].n, 4);
    assert_memory_equal(outs[0].s, "head", 4);
    assert_memory_equal(outs[1].s, "body", 4);
    prep_str_free(&outs[0]);
    prep_str_free(&outs[1]);
    prep_str_free(&out);
}

/* ---- token ids ---------------------------------------------------------------------------- */

static void ids_equal_tokenizer_ids(void **state)
{
    (void)state;
    const char *lines =
        "{\"text\": \"Hello world\"}\n"
        "{\"text\": \"caf\\u00e9 \\ud83d\\ude00 na\\u00efve  spaces\\n\\nnew \\\"lines\\\"\"}\n"
        "{\"text\": \"\"}\n"
        "\n"
        "{\"text\": \"literal <|endoftext|> stays text\"}\n"
        "{\"text\": \"   \"}";                                      /* no final newline */
    const char *texts[] = {"Hello world", "caf\xc3\xa9 \xf0\x9f\x98\x80 na\xc3\xafve  spaces\n\nnew \"lines\"",
                           "literal <|endoftext|> stays text", "   "};
    char *in = tmp_path("ids.jsonl");
    spit(in, lines, strlen(lines));
    const char *inputs[] = {in};
    for (int eod = 0; eod <= 1; eod++) {
        char *prefix = tmp_path(eod ? "ids-eod" : "ids");
        prep_config c = base_config(inputs, 1, prefix);
        c.append_eod = eod;
        prep_stats st;
        run_ok(&c, &st);
        assert_int_equal(st.documents, 5);
        assert_int_equal(st.written, 4);
        assert_int_equal(st.empty, 1); /* "" has no tokens: skipped, with or without EOD (Megatron) */
        assert_int_equal(st.blank_lines, 1);
        char path[800], err[512];
        snprintf(path, sizeof path, "%s_text_document", prefix);
        idx_dataset *d = idx_open(path, err, sizeof err);
        if (!d) fail_msg("%s", err);
        assert_int_equal(idx_num_sequences(d), 4);
        assert_int_equal(idx_num_documents(d), 4);
        assert_int_equal(idx_dtype(d), IDX_U16);
        for (int i = 0; i < 4; i++) expect_doc(d, i, texts[i], strlen(texts[i]), eod);
        assert_int_equal(idx_num_tokens(d), st.tokens);
        idx_close(d);
    }
}

static void text_format_one_document_per_file(void **state)
{
    (void)state;
    const char *a = "First file.\nTwo lines {not json}\n", *b = "Second \"file\"";
    char *fa = tmp_path("a.txt"), *fb = tmp_path("b.txt"), *fe = tmp_path("empty.txt");
    spit(fa, a, strlen(a));
    spit(fb, b, strlen(b));
    spit(fe, "", 0);
    const char *inputs[] = {fa, fe, fb};
    char *prefix = tmp_path("textfmt");
    prep_config c = base_config(inputs, 3, prefix);
    c.text_format = 1;
    c.append_eod = 1;
    c.workers = 2;
    prep_stats st;
    run_ok(&c, &st);
    assert_int_equal(st.documents, 3);
    assert_int_equal(st.written, 2);
    assert_int_equal(st.empty, 1);
    char path[800], err[512];
    snprintf(path, sizeof path, "%s_text_document", prefix);
    idx_dataset *d = idx_open(path, err, sizeof err);
    if (!d) fail_msg("%s", err);
    assert_int_equal(idx_num_sequences(d), 2);
    expect_doc(d, 0, a, strlen(a), 1);
    expect_doc(d, 1, b, strlen(b), 1);
    idx_close(d);
}

static void several_inputs_and_keys(void **state)
{
    (void)state;
    const char *l1 = "{\"title\": \"T1\", \"text\": \"body one\"}\n{\"title\": \"\", \"text\": \"body two\"}\n";
    const char *l2 = "{\"text\": \"body three\", \"title\": \"T3\"}\n";
    char *f1 = tmp_path("k1.jsonl"), *f2 = tmp_path("k2.jsonl");
    spit(f1, l1, strlen(l1));
    spit(f2, l2, strlen(l2));
    const char *inputs[] = {f1, f2};
    const char *keys[] = {"text", "title"};
    char *prefix = tmp_path("keys");
    prep_config c = base_config(inputs, 2, prefix);
    c.keys = keys;
    c.n_keys = 2;
    prep_stats st;
    run_ok(&c, &st);
    assert_int_equal(st.documents, 3);
    assert_int_equal(st.written, 5);
    assert_int_equal(st.empty, 1);
    char path[800], err[512];
    snprintf(path, sizeof path, "%s_text_document", prefix);
    idx_dataset *d = idx_open(path, err, sizeof err);
    assert_non_null(d);
    expect_doc(d, 0, "body one", 8, 0);
    expect_doc(d, 1, "body two", 8, 0);
    expect_doc(d, 2, "body three", 10, 0);
    idx_close(d);
    snprintf(path, sizeof path, "%s_title_document", prefix);
    d = idx_open(path, err, sizeof err);
    assert_non_null(d);
    assert_int_equal(idx_num_sequences(d), 2);
    expect_doc(d, 0, "T1", 2, 0);
    expect_doc(d, 1, "T3", 2, 0);
    idx_close(d);
}

/* ---- bad input --------------------------------------------------------------------------- */

static void bad_line_fails_naming_file_and_line(void **state)
{
    (void)state;
    /* many good lines first so the bad ones sit in later batches */
    prep_str o = {0};
    for (int i = 0; i < 300; i++) append(&o, "{\"text\": \"a good line of text\"}\n");
    append(&o, "{\"text\": \"unterminated}\n");                   /* line 301 */
    append(&o, "[1, 2]\n");                                       /* line 302 */
    append(&o, "{\"body\": \"missing key\"}\n");                  /* line 303 */
    append(&o, "{\"text\": 42}\n");                               /* line 304 */
    append(&o, "{\"text\": \"fine again\"}\n");                   /* line 305 */
    char *in = tmp_path("bad.jsonl");
    spit(in, o.s, o.n);
    free(o.s);
    const char *inputs[] = {in};
    char *prefix = tmp_path("badout");
    char err[1024], want[800];
    for (int workers = 1; workers <= 3; workers += 2) {
        prep_config c = base_config(inputs, 1, prefix);
        c.batch_bytes = 200;
        c.workers = workers;
        assert_int_equal(run(&c, NULL, err, sizeof err), -1);
        snprintf(want, sizeof want, "%s:301:", in);
        if (!strstr(err, want)) fail_msg("error '%s' does not name %s", err, want);
        assert_non_null(strstr(err, "--skip-bad-lines"));
        assert_int_equal(files_with("badout"), 0); /* nothing written, no temporaries left */
    }
    /* each kind of bad line on its own names its line and reason */
    static const struct { const char *line, *why; } kinds[] = {
        {"[1, 2]", "not a JSON object"},
        {"{\"body\": \"x\"}", "no key \"text\""},
        {"{\"text\": 42}", "a number, not a string"},
        {"{\"text\": \"x\"} trailing", "extra data"},
    };
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        char buf[200];
        snprintf(buf, sizeof buf, "{\"text\": \"ok\"}\n%s\n", kinds[k].line);
        spit(in, buf, strlen(buf));
        prep_config c = base_config(inputs, 1, prefix);
        assert_int_equal(run(&c, NULL, err, sizeof err), -1);
        snprintf(want, sizeof want, "%s:2:", in);
        if (!strstr(err, want) || !strstr(err, kinds[k].why))
            fail_msg("error '%s' should name %s and say '%s'", err, want, kinds[k].why);
        assert_int_equal(files_with("badout"), 0);
    }
}

static void skip_bad_lines_counts_them(void **state)
{
    (void)state;
    const char *lines = "{\"text\": \"one\"}\n"
                        "{\"text\": \"two\"\n"
                        "not json at all\n"
                        "{\"text\": \"three\"}\n"
                        "{\"text\": null}\n"
                        "{\"text\": \"four\"}\n";
    char *in = tmp_path("skip.jsonl");
    spit(in, lines, strlen(lines));
    const char *inputs[] = {in};
    char *prefix = tmp_path("skipout");
    prep_config c = base_config(inputs, 1, prefix);
    c.skip_bad_lines = 1;
    c.append_eod = 1;
    prep_stats st;
    run_ok(&c, &st);
    assert_int_equal(st.bad_lines, 3);
    assert_int_equal(st.documents, 3);
    assert_int_equal(st.written, 3);
    char path[800], err[512];
    snprintf(path, sizeof path, "%s_text_document", prefix);
    idx_dataset *d = idx_open(path, err, sizeof err);
    assert_non_null(d);
    expect_doc(d, 0, "one", 3, 1);
    expect_doc(d, 1, "three", 5, 1);
    expect_doc(d, 2, "four", 4, 1);
    idx_close(d);
}

static void missing_input_or_output_folder_fails_cleanly(void **state)
{
    (void)state;
    const char *inputs[] = {tmp_path("does-not-exist.jsonl")};
    char err[1024];
    prep_config c = base_config(inputs, 1, tmp_path("missingout"));
    assert_int_equal(run(&c, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "does-not-exist.jsonl"));
    assert_int_equal(files_with("missingout"), 0);
    char *in = tmp_path("one.jsonl");
    spit(in, "{\"text\": \"x\"}\n", 14);
    const char *ok[] = {in};
    prep_config c2 = base_config(ok, 1, tmp_path("no/such/folder/out"));
    assert_int_equal(run(&c2, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "no/such/folder"));
}

/* ---- compressed inputs and workers --------------------------------------------------------- */

static void write_gz(const char *path, const unsigned char *p, size_t n)
{
    gzFile g = gzopen(path, "wb6");
    assert_non_null(g);
    assert_int_equal(gzwrite(g, p, (unsigned)n), (int)n);
    assert_int_equal(gzclose(g), Z_OK);
}

/* Two zstd frames (the input cut in two), as `zstd` writes for concatenated files. */
static void write_zst(const char *path, const unsigned char *p, size_t n)
{
    size_t half = n / 2, cap = ZSTD_compressBound(n) + 64;
    unsigned char *z = malloc(2 * cap);
    size_t a = ZSTD_compress(z, cap, p, half, 3);
    assert_false(ZSTD_isError(a));
    size_t b = ZSTD_compress(z + a, cap, p + half, n - half, 3);
    assert_false(ZSTD_isError(b));
    spit(path, z, a + b);
    free(z);
}

static void gz_and_zst_match_plain(void **state)
{
    (void)state;
    char *plain = tmp_path("shake.jsonl"), *gz = tmp_path("shake.jsonl.gz"), *zst = tmp_path("shake.jsonl.zst");
    shakespeare_jsonl(plain, 120000, 1500);
    size_t n;
    unsigned char *bytes = slurp(plain, &n);
    write_gz(gz, bytes, n);
    write_zst(zst, bytes, n);
    const char *prefixes[] = {tmp_path("plain"), tmp_path("gz"), tmp_path("zst")};
    const char *files[] = {plain, gz, zst};
    for (int i = 0; i < 3; i++) {
        const char *inputs[] = {files[i]};
        prep_config c = base_config(inputs, 1, prefixes[i]);
        c.append_eod = 1;
        c.batch_bytes = 16384;
        prep_stats st;
        run_ok(&c, &st);
        assert_int_equal(st.bytes, (int64_t)n);
    }
    assert_same_dataset(prefixes[0], prefixes[1], "document");
    assert_same_dataset(prefixes[0], prefixes[2], "document");

    /* truncated compressed files are errors naming the file, not short datasets */
    char err[1024];
    size_t zn;
    unsigned char *z = slurp(gz, &zn);
    spit(gz, z, zn - 20);
    free(z);
    z = slurp(zst, &zn);
    spit(zst, z, zn - 20);
    free(z);
    for (int i = 1; i < 3; i++) {
        const char *inputs[] = {files[i]};
        prep_config c = base_config(inputs, 1, tmp_path("trunc"));
        assert_int_equal(run(&c, NULL, err, sizeof err), -1);
        if (!strstr(err, files[i]) || !strstr(err, "truncated")) fail_msg("unexpected error: %s", err);
        assert_int_equal(files_with("trunc"), 0);
    }
    free(bytes);
}

static void workers_give_identical_output(void **state)
{
    (void)state;
    char *in = tmp_path("workers.jsonl");
    shakespeare_jsonl(in, 150000, 700);
    /* a line longer than a batch, to take the long-line path */
    FILE *f = fopen(in, "ab");
    fputs("{\"text\": \"", f);
    for (int i = 0; i < 3000; i++) fputs("long line ", f);
    fputs("\"}\n", f);
    fclose(f);
    const char *inputs[] = {in, in};
    const char *prefixes[] = {tmp_path("w1"), tmp_path("w2"), tmp_path("w3")};
    int64_t docs = -1;
    for (int w = 1; w <= 3; w++) {
        prep_config c = base_config(inputs, 2, prefixes[w - 1]);
        c.workers = w;
        c.append_eod = 1;
        c.batch_bytes = 4096;
        prep_stats st;
        run_ok(&c, &st);
        if (docs >= 0) assert_int_equal(st.written, docs);
        docs = st.written;
    }
    assert_same_dataset(prefixes[0], prefixes[1], "document");
    assert_same_dataset(prefixes[0], prefixes[2], "document");
    /* and the default batch size gives the same bytes too */
    prep_config c = base_config(inputs, 2, tmp_path("wdefault"));
    c.workers = 2;
    c.append_eod = 1;
    run_ok(&c, NULL);
    assert_same_dataset(prefixes[0], tmp_path("wdefault"), "document");
}

/* --split-sentences: one sequence per sentence, each the tokenizer's ids of the sentence alone,
 * EOD on a document's last sentence, documents without tokens skipped, the document index
 * grouping the sentences; and the same bytes for any number of workers. */
static void split_sentences_one_sequence_each(void **state)
{
    (void)state;
    const char *lines =
        "{\"text\": \"Mr. Smith left. He came back!  Did he?\"}\n"
        "{\"text\": \"\"}\n"
        "{\"text\": \"  \\n\\n \"}\n"
        "{\"text\": \"one sentence only\"}\n"
        "{\"text\": \"First para\\n\\nSecond para. \\u00c9tait fini.\"}\n";
    const char *sentences[] = {"Mr. Smith left.", "He came back!", "Did he?", "one sentence only", "First para",
                               "Second para.", "\xc3\x89tait fini."};
    const int64_t want_docs[] = {0, 3, 4, 7};
    char *in = tmp_path("sent.jsonl");
    spit(in, lines, strlen(lines));
    const char *inputs[] = {in};
    for (int eod = 0; eod <= 1; eod++) {
        char *prefix = tmp_path(eod ? "sent-eod" : "sent");
        prep_config c = base_config(inputs, 1, prefix);
        c.split_sentences = 1;
        c.append_eod = eod;
        prep_stats st;
        run_ok(&c, &st);
        assert_int_equal(st.documents, 5);
        assert_int_equal(st.written, 3);
        assert_int_equal(st.empty, 2); /* "" and whitespace alone have no sentences */
        assert_int_equal(st.sentences, 7);
        char path[800], err[512];
        snprintf(path, sizeof path, "%s_text_sentence", prefix);
        idx_dataset *d = idx_open(path, err, sizeof err);
        if (!d) fail_msg("%s", err);
        assert_int_equal(idx_num_sequences(d), 7);
        assert_int_equal(idx_num_documents(d), 3);
        for (int j = 0; j < 4; j++) assert_int_equal(idx_doc_index(d)[j], want_docs[j]);
        for (int i = 0; i < 7; i++) {
            int last = i == 2 || i == 3 || i == 6;
            expect_doc(d, i, sentences[i], strlen(sentences[i]), eod && last);
        }
        assert_int_equal(idx_num_tokens(d), st.tokens);
        idx_close(d);
        snprintf(path, sizeof path, "%s_text_document.idx", prefix);
        assert_int_equal(access(path, F_OK), -1);
    }

    char *many = tmp_path("sent-workers.jsonl");
    shakespeare_jsonl(many, 60000, 700);
    const char *inputs2[] = {many};
    const char *prefixes[] = {tmp_path("sw1"), tmp_path("sw2")};
    for (int w = 1; w <= 2; w++) {
        prep_config c = base_config(inputs2, 1, prefixes[w - 1]);
        c.split_sentences = 1;
        c.append_eod = 1;
        c.workers = w;
        c.batch_bytes = 4096;
        prep_stats st;
        run_ok(&c, &st);
        assert_true(st.sentences > st.written);
    }
    assert_same_dataset(prefixes[0], prefixes[1], "sentence");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(json_lines_decode_like_python),
        cmocka_unit_test(ids_equal_tokenizer_ids),
        cmocka_unit_test(text_format_one_document_per_file),
        cmocka_unit_test(several_inputs_and_keys),
        cmocka_unit_test(bad_line_fails_naming_file_and_line),
        cmocka_unit_test(skip_bad_lines_counts_them),
        cmocka_unit_test(missing_input_or_output_folder_fails_cleanly),
        cmocka_unit_test(gz_and_zst_match_plain),
        cmocka_unit_test(workers_give_identical_output),
        cmocka_unit_test(split_sentences_one_sequence_each),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
