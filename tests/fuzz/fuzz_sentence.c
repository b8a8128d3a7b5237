/* libFuzzer harness: the sentence splitter of trident preprocess --split-sentences on arbitrary
 * bytes. Spans must be non-empty, ordered, non-overlapping, inside the text and trimmed, and
 * together cover every byte that is not whitespace; a smaller cap must give a prefix of the same
 * spans with the same count. The text sits in a buffer of exactly its size so that a read past
 * it is caught by ASan. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "trident/sentence.h"

static int is_space(unsigned char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size ? size : 1);
    if (!text) return 0;
    if (size) memcpy(text, data, size);
    size_t n = sent_split(text, size, NULL, 0);
    sent_span *sp = malloc((n ? n : 1) * sizeof *sp);
    if (!sp) abort();
    if (sent_split(text, size, sp, n) != n) abort();
    size_t covered = 0; /* bytes before here are in a span or whitespace */
    for (size_t i = 0; i < n; i++) {
        if (sp[i].start >= sp[i].end || sp[i].end > size || sp[i].start < covered) abort();
        if (is_space((unsigned char)text[sp[i].start]) || is_space((unsigned char)text[sp[i].end - 1])) abort();
        for (size_t k = covered; k < sp[i].start; k++)
            if (!is_space((unsigned char)text[k])) abort();
        covered = sp[i].end;
    }
    for (size_t k = covered; k < size; k++)
        if (!is_space((unsigned char)text[k])) abort();
    if (n > 1) {
        sent_span part[1];
        if (sent_split(text, size, part, 1) != n || part[0].start != sp[0].start || part[0].end != sp[0].end) abort();
    }
    free(sp);
    free(text);
    return 0;
}
