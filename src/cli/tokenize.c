/* trident tokenize: GPT-2 BPE or a Hugging Face tokenizer.json from stdin to stdout. Encodes each input line (without its
 * newline) to one line of space-separated ids, or the whole input to one line with --whole;
 * --decode turns lines of ids back into text. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "trident/args.h"
#include "trident/check.h"
#include "trident/tokenizer.h"

static const char SUMMARY[] =
    "Encodes stdin with GPT-2's byte-level BPE, or a Hugging Face tokenizer.json (--tokenizer-type\n"
    "HuggingFaceTokenizer --tokenizer-model FILE): one line of space-separated ids per input line\n"
    "(the line without its newline), or one line for the whole input with --whole. With --decode,\n"
    "reads lines of space-separated ids and writes the text of each line followed by a newline\n"
    "(with --whole: the text of all ids, nothing added). Any bytes round-trip through GPT-2's BPE\n"
    "and byte-level tokenizer.json files, invalid UTF-8 included; see docs/tokenizer.md.\n"
    "\n"
    "  trident tokenize --vocab-file gpt2/vocab.json --merge-file gpt2/merges.txt < in.txt\n"
    "  trident tokenize --tokenizer-type HuggingFaceTokenizer --tokenizer-model tokenizer.json < in.txt";

static void write_or_die(const void *p, size_t n)
{
    if (n && fwrite(p, 1, n, stdout) != n)
        td_fatal(1, "trident tokenize: writing stdout failed: %s", td_strerror(errno));
}

/* Writes ids as one line of space-separated decimals. */
static void write_ids(const bpe_ids *v, char **buf, size_t *cap)
{
    size_t need = v->n * 12 + 2;
    if (need > *cap) *buf = td_xrealloc(*buf, *cap = need);
    char *p = *buf;
    for (size_t i = 0; i < v->n; i++) {
        char tmp[12];
        int k = 0;
        uint32_t x = (uint32_t)v->ids[i];
        do tmp[k++] = (char)('0' + x % 10); while (x /= 10);
        if (i) *p++ = ' ';
        while (k) *p++ = tmp[--k];
    }
    *p++ = '\n';
    write_or_die(*buf, (size_t)(p - *buf));
}

static char *read_all(FILE *f, size_t *len)
{
    size_t cap = 1 << 20, n = 0;
    char *buf = td_xmalloc(cap);
    for (;;) {
        if (n == cap) buf = td_xrealloc(buf, cap *= 2);
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    if (ferror(f)) td_fatal(1, "trident tokenize: reading stdin failed: %s", td_strerror(errno));
    *len = n;
    return buf;
}

static void encode_stream(const tok_tokenizer *t, int whole)
{
    tok_worker *w = tok_worker_new(t);
    bpe_ids ids = {0};
    char *out = NULL;
    size_t out_cap = 0;
    if (whole) {
        size_t len;
        char *text = read_all(stdin, &len);
        tok_encode(w, text, len, &ids);
        write_ids(&ids, &out, &out_cap);
        free(text);
    } else {
        char *line = NULL;
        size_t line_cap = 0;
        ssize_t n;
        while ((n = getline(&line, &line_cap, stdin)) > 0) {
            if (line[n - 1] == '\n') n--;
            ids.n = 0;
            tok_encode(w, line, (size_t)n, &ids);
            write_ids(&ids, &out, &out_cap);
        }
        if (ferror(stdin)) td_fatal(1, "trident tokenize: reading stdin failed: %s", td_strerror(errno));
        free(line);
    }
    free(out);
    bpe_ids_free(&ids);
    tok_worker_free(w);
}

/* Appends the ids of one text line to v; exits naming the line on anything but ids. */
static void parse_ids(const char *s, size_t n, size_t lineno, int n_vocab, bpe_ids *v)
{
    size_t i = 0;
    for (;;) {
        while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r')) i++;
        if (i == n) return;
        size_t start = i;
        long long x = 0;
        for (; i < n && s[i] >= '0' && s[i] <= '9'; i++)
            if (x <= n_vocab) x = x * 10 + (s[i] - '0'); /* stays small: anything past n_vocab is out */
        int bad_char = i < n && s[i] != ' ' && s[i] != '\t' && s[i] != '\r';
        if (i == start || bad_char) {
            size_t end = i;
            while (end < n && s[end] != ' ' && end - start < 24) end++;
            td_fatal(1, "trident tokenize --decode: line %zu: '%.*s' is not a token id (expected space-separated "
                     "integers in 0..%d)", lineno, (int)(end - start), s + start, n_vocab - 1);
        }
        if (x >= n_vocab)
            td_fatal(1, "trident tokenize --decode: line %zu: token id %.*s is out of range (the vocab has ids "
                     "0..%d)", lineno, (int)(i - start), s + start, n_vocab - 1);
        bpe_ids_push(v, (int32_t)x);
    }
}

static void decode_ids(const tok_tokenizer *t, const bpe_ids *ids, size_t lineno, char **text, int newline)
{
    char err[256];
    size_t len = 0;
    if (tok_decode(t, ids->ids, ids->n, text, &len, err, sizeof err) != 0)
        td_fatal(1, "trident tokenize --decode: line %zu: %s", lineno, err);
    write_or_die(*text, len);
    if (newline) write_or_die("\n", 1);
}

static void decode_stream(const tok_tokenizer *t, int whole)
{
    bpe_ids ids = {0};
    char *line = NULL, *text = NULL;
    size_t line_cap = 0, lineno = 0;
    ssize_t n;
    while ((n = getline(&line, &line_cap, stdin)) > 0) {
        lineno++;
        if (line[n - 1] == '\n') n--;
        if (!whole) ids.n = 0;
        parse_ids(line, (size_t)n, lineno, tok_vocab_size(t), &ids);
        if (!whole) decode_ids(t, &ids, lineno, &text, 1);
    }
    if (ferror(stdin)) td_fatal(1, "trident tokenize: reading stdin failed: %s", td_strerror(errno));
    if (whole) decode_ids(t, &ids, lineno, &text, 0);
    free(line);
    free(text);
    bpe_ids_free(&ids);
}

int cli_tokenize(int argc, char **argv)
{
    td_args a;
    if (td_args_parse(&a, TD_CMD_TOKENIZE, "trident tokenize", argc, argv, 1)) {
        td_args_usage(TD_CMD_TOKENIZE, "trident tokenize", SUMMARY);
        td_args_free(&a);
        return 0;
    }
    td_log_set_level(a.verbose);
    char err[512];
    tok_spec spec = {a.tokenizer_type, a.vocab_file, a.merge_file, a.tokenizer_model};
    if (tok_check_spec(&spec, err, sizeof err) != 0) td_usage_error("trident tokenize: %s", err);
    tok_tokenizer *t = tok_open(&spec, err, sizeof err);
    if (!t) td_usage_error("trident tokenize: %s", err);
    static char outbuf[1 << 16];
    setvbuf(stdout, outbuf, _IOFBF, sizeof outbuf);
    if (a.decode) decode_stream(t, a.whole);
    else encode_stream(t, a.whole);
    if (fflush(stdout) != 0) td_fatal(1, "trident tokenize: writing stdout failed: %s", td_strerror(errno));
    tok_free(t);
    td_args_free(&a);
    return 0;
}
