/* Fuzzes BERT's WordPiece (src/data/wordpiece.c) with arbitrary bytes, invalid UTF-8 included. The
 * first byte chooses: even, the bytes are text encoded by both kinds (lower-cased and cased) over
 * a small vocabulary written here; odd, the bytes are a vocab.txt, loaded (or refused with a
 * message) and, when loaded, used to encode a fixed text. Every id must lie inside the vocabulary
 * and every encoding decode. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "trident/wordpiece.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static wp_tokenizer *g_lower, *g_cased;

static const char *write_tmp(const char *name, const void *data, size_t n, char *path, size_t len)
{
    const char *dir = getenv("TMPDIR");
    snprintf(path, len, "%s/%s.%d", dir && *dir ? dir : "/tmp", name, (int)getpid());
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (n) fwrite(data, 1, n, f);
    fclose(f);
    return path;
}

static void check(const wp_tokenizer *t, const char *text, size_t n)
{
    bpe_ids ids = {0};
    wp_encode(t, text, n, &ids);
    for (size_t i = 0; i < ids.n; i++)
        if (ids.ids[i] < 0 || ids.ids[i] >= wp_vocab_size(t)) abort();
    char *out = NULL, err[256];
    size_t len = 0;
    if (wp_decode(t, ids.ids, ids.n, &out, &len, err, sizeof err) != 0) abort();
    free(out);
    bpe_ids_free(&ids);
}

static void load(void)
{
    static const char vocab[] = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\nun\n##aff\n##able\nhello\n##s\n,\n.\n!\n"
                                "a\n##b\n##c\nb\nc\n\xe4\xb8\x96\n\xc3\xa9\n##\xc3\xa9\n";
    char path[512], err[512];
    write_tmp("wp_vocab", vocab, sizeof vocab - 1, path, sizeof path);
    wp_options lo = {1, 1, 1, 1, NULL}, ca = {0, 0, 1, 1, NULL};
    g_lower = wp_load_vocab(path, &lo, err, sizeof err);
    g_cased = wp_load_vocab(path, &ca, err, sizeof err);
    unlink(path);
    if (!g_lower || !g_cased) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g_lower) load();
    if (size == 0) return 0;
    if (data[0] % 2 == 0) {
        check(g_lower, (const char *)data + 1, size - 1);
        check(g_cased, (const char *)data + 1, size - 1);
        return 0;
    }
    char path[512], err[512];
    write_tmp("wp_fuzz_vocab", data + 1, size - 1, path, sizeof path);
    wp_options o = {data[0] & 2 ? 1 : 0, data[0] & 2 ? 1 : 0, 1, 1, NULL};
    wp_tokenizer *t = wp_load_vocab(path, &o, err, sizeof err);
    unlink(path);
    if (!t) {
        if (!err[0]) abort(); /* a refusal names what is wrong */
        return 0;
    }
    static const char text[] = "Unaffable, the h\xc3\xa9llo! \xe4\xb8\x96\xe7\x95\x8c [CLS] ##x";
    check(t, text, sizeof text - 1);
    wp_free(t);
    return 0;
}
