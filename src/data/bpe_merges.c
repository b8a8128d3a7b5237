/* The merge table of a byte-pair encoder: see include/data/trident/bpe_merges.h. */
#include "trident/bpe_merges.h"

#include <stdlib.h>

#include "trident/check.h"

void bpe_merges_init(bpe_merges *m, size_t n)
{
    size_t cap = 16;
    while (cap < 2 * n + 2) cap <<= 1;
    m->slots = td_xcalloc(cap, sizeof *m->slots);
    m->mask = cap - 1;
}

void bpe_merges_free(bpe_merges *m)
{
    free(m->slots);
    m->slots = NULL;
}

void bpe_merges_put(bpe_merges *m, int32_t a, int32_t b, int32_t rank, int32_t id)
{
    uint64_t key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
    for (size_t i = bpe_merges_home(m, a, b);; i = (i + 1) & m->mask) {
        bpe_merge *s = &m->slots[i];
        if (s->key == 0 || s->key == key) {
            *s = (bpe_merge){key, rank, id};
            return;
        }
    }
}

int bpe_special_form(const char *s, size_t n)
{
    if (n < 3 || !((s[0] == '<' && s[n - 1] == '>') || (s[0] == '[' && s[n - 1] == ']'))) return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] <= 0x20 || (unsigned char)s[i] >= 0x7f) return 0;
    return 1;
}
