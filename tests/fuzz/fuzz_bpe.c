/* Fuzzes the GPT-2 BPE encoder (src/data/bpe.c) with arbitrary bytes, invalid UTF-8 included.
 * Every input must encode without a crash or sanitizer report to ids inside the vocab, decode
 * back to exactly the input, and give the same ids from two workers whose chunk caches hold
 * different things. The vocab comes from $TD_FUZZ_DATA/gpt2 (else TD_TEST_DATA/gpt2). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/bpe.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bpe_tokenizer *g_tok;
static bpe_worker *g_warm; /* lives for the whole run: its cache fills up and is cleared */
static bpe_worker *g_fresh; /* replaced every 256 inputs */
static long g_inputs;

static void release(void)
{
    bpe_worker_free(g_warm);
    bpe_worker_free(g_fresh);
    bpe_free(g_tok);
}

static void load(void)
{
    const char *dir = getenv("TD_FUZZ_DATA");
#ifdef TD_TEST_DATA
    if (!dir || !*dir) dir = TD_TEST_DATA;
#endif
    if (!dir || !*dir) {
        fprintf(stderr, "fuzz_bpe: set TD_FUZZ_DATA to the folder holding gpt2/vocab.json and gpt2/merges.txt\n");
        abort();
    }
    char vocab[4096], merges[4096], err[512];
    snprintf(vocab, sizeof vocab, "%s/gpt2/vocab.json", dir);
    snprintf(merges, sizeof merges, "%s/gpt2/merges.txt", dir);
    g_tok = bpe_load(vocab, merges, err, sizeof err);
    if (!g_tok) {
        fprintf(stderr, "fuzz_bpe: %s (set TD_FUZZ_DATA to the folder holding gpt2/)\n", err);
        abort();
    }
    g_warm = bpe_worker_new(g_tok);
    atexit(release);
}

static void fail(const char *what, const uint8_t *data, size_t size)
{
    fprintf(stderr, "fuzz_bpe: %s on an input of %zu bytes\n", what, size);
    for (size_t i = 0; i < size && i < 256; i++) fprintf(stderr, "%02x", data[i]);
    fprintf(stderr, "\n");
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g_tok) load();
    if (g_inputs++ % 256 == 0) {
        bpe_worker_free(g_fresh);
        g_fresh = bpe_worker_new(g_tok);
    }
    bpe_ids a = {0}, b = {0};
    bpe_encode(g_warm, (const char *)data, size, &a);
    bpe_encode(g_fresh, (const char *)data, size, &b);
    if (a.n != b.n || (a.n && memcmp(a.ids, b.ids, a.n * sizeof *a.ids) != 0))
        fail("two workers disagree", data, size);
    if (size && !a.n) fail("no ids for a non-empty input", data, size);
    for (size_t i = 0; i < a.n; i++)
        if (a.ids[i] < 0 || a.ids[i] >= bpe_vocab_size(g_tok) || a.ids[i] == bpe_eod_id(g_tok))
            fail("an id outside the vocab (or the EOD id)", data, size);
    char *text = NULL, err[256];
    size_t len = 0;
    if (bpe_decode(g_tok, a.ids, a.n, &text, &len, err, sizeof err) != 0) fail(err, data, size);
    if (len != size || (size && memcmp(text, data, size) != 0)) fail("decode(encode(x)) != x", data, size);
    free(text);
    bpe_ids_free(&a);
    bpe_ids_free(&b);
    return 0;
}
