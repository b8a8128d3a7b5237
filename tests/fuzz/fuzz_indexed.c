/* Fuzzes the indexed-dataset reader (src/data/indexed.c): the input becomes a .idx and a .bin
 * in a scratch folder, then idx_open validates them and, when it accepts, every token of every
 * sequence and the whole document index are read. Any crash, sanitizer report or out-of-bounds
 * read is a bug; a rejection must come with a one-line message.
 *
 * Input: byte 0 = mode, bytes 1..4 = little-endian u32 `b`, then the payload.
 *   mode bit 0 clear: .bin = the last min(b, payload) bytes of the payload, .idx = the rest
 *   mode bit 0 set:   .idx = the whole payload, .bin = (b mod 2^20) bytes of a token pattern */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "trident/indexed.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char g_prefix[256];

static void remove_files(void)
{
    char path[300];
    snprintf(path, sizeof path, "%s.idx", g_prefix);
    unlink(path);
    snprintf(path, sizeof path, "%s.bin", g_prefix);
    unlink(path);
}

static void put_file(const char *ext, const uint8_t *p, size_t n)
{
    char path[300];
    snprintf(path, sizeof path, "%s%s", g_prefix, ext);
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (n && fwrite(p, 1, n, f) != n) abort();
    if (fclose(f) != 0) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g_prefix[0]) {
        const char *tmp = getenv("TMPDIR");
        snprintf(g_prefix, sizeof g_prefix, "%s/trident-fuzz-indexed-%ld", tmp && *tmp ? tmp : "/tmp", (long)getpid());
        atexit(remove_files);
    }
    if (size < 5) return 0;
    uint8_t mode = data[0];
    uint32_t b = (uint32_t)data[1] | (uint32_t)data[2] << 8 | (uint32_t)data[3] << 16 | (uint32_t)data[4] << 24;
    const uint8_t *payload = data + 5;
    size_t n = size - 5;
    if (mode & 1) {
        size_t bn = b % (1u << 20);
        uint8_t *bin = malloc(bn ? bn : 1);
        for (size_t i = 0; i < bn; i++) bin[i] = (uint8_t)(i * 7 + (i >> 8));
        put_file(".idx", payload, n);
        put_file(".bin", bin, bn);
        free(bin);
    } else {
        size_t bn = b < n ? b : n;
        put_file(".idx", payload, n - bn);
        put_file(".bin", payload + n - bn, bn);
    }

    char err[512] = "";
    idx_dataset *d = idx_open(g_prefix, err, sizeof err);
    if (!d) {
        if (!err[0] || strchr(err, '\n')) abort(); /* a rejection is exactly one line */
        return 0;
    }
    int64_t ns = idx_num_sequences(d), nd = idx_num_documents(d), total = 0;
    const int64_t *doc = idx_doc_index(d);
    const int32_t *lens = idx_seq_lens(d);
    volatile int64_t sink = 0;
    for (int64_t j = 0; j <= nd; j++) sink += doc[j];
    int32_t buf[1024];
    for (int64_t i = 0; i < ns; i++) {
        int32_t len = idx_seq_len(d, i);
        if (len != lens[i]) abort();
        for (int64_t off = 0; off < len; off += 1024) {
            int64_t m = len - off < 1024 ? len - off : 1024;
            idx_read(d, i, off, m, buf);
            for (int64_t k = 0; k < m; k++) sink += buf[k];
        }
        total += len;
    }
    if (total != idx_num_tokens(d)) abort();
    (void)sink;
    idx_close(d);
    return 0;
}
