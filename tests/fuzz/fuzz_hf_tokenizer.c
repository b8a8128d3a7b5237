/* Fuzzes the tokenizer.json reader (src/data/hf_tokenizer.c) with arbitrary bytes as the file.
 * A file that loads must then encode a few fixed texts, and arbitrary bytes cut from the input,
 * to ids inside its vocab, and decode them, without a crash or sanitizer report. A file that
 * does not load must leave one line in err. Seeds: tests/fuzz/corpus/hf_tokenizer/. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/hf_tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *TEXTS[] = {
    "", "Hello world", "  two  spaces\n\nand lines\t", "I'm 12345 d\xc3\xa9j\xc3\xa0 vu \xe4\xb8\xad\xe6\x96\x87",
    "<|endoftext|></s><s> <unk>\xe2\x96\x81x", "\xff\xfe\xc0 bad \xed\xa0\x80 utf8",
};

static void fail(const char *what, const uint8_t *data, size_t size)
{
    fprintf(stderr, "fuzz_hf_tokenizer: %s on an input of %zu bytes\n", what, size);
    for (size_t i = 0; i < size && i < 256; i++) fprintf(stderr, "%02x", data[i]);
    fprintf(stderr, "\n");
    abort();
}

static void check(hf_worker *w, const hf_tokenizer *t, const char *s, size_t n, const uint8_t *data, size_t size)
{
    bpe_ids ids = {0};
    hf_encode(w, s, n, &ids);
    for (size_t i = 0; i < ids.n; i++)
        if (ids.ids[i] < 0 || ids.ids[i] >= hf_vocab_size(t)) fail("an id outside the vocab", data, size);
    char *text = NULL, err[256];
    size_t len = 0;
    if (hf_decode(t, ids.ids, ids.n, &text, &len, err, sizeof err) != 0) fail(err, data, size);
    free(text);
    bpe_ids_free(&ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512];
    err[0] = 0;
    hf_tokenizer *t = hf_load_json((const char *)data, size, "fuzz input", err, sizeof err);
    if (!t) {
        if (!err[0] || strchr(err, '\n')) fail("a refusal without one line of error", data, size);
        return 0;
    }
    hf_worker *w = hf_worker_new(t);
    for (size_t i = 0; i < sizeof TEXTS / sizeof TEXTS[0]; i++) check(w, t, TEXTS[i], strlen(TEXTS[i]), data, size);
    check(w, t, (const char *)data, size < 512 ? size : 512, data, size);
    hf_worker_free(w);
    hf_free(t);
    return 0;
}
