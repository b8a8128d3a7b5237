/* The merge table of a byte-pair encoder: (left id, right id) -> (rank, merged id), an
 * open-addressing hash table shared by the GPT-2 BPE (bpe.c) and the Hugging Face BPE
 * (hf_tokenizer.c). A later merge of the same pair replaces the earlier, as both define. */
#ifndef TRIDENT_BPE_MERGES_H
#define TRIDENT_BPE_MERGES_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t key; /* (left id << 32 | right id) + 1; 0 marks an empty slot */
    int32_t rank;
    int32_t id;   /* the merged token */
} bpe_merge;

typedef struct {
    bpe_merge *slots; /* mask + 1 of them */
    size_t mask;
} bpe_merges;

/* An empty table with room for n merges (at most half full). */
void bpe_merges_init(bpe_merges *m, size_t n);
void bpe_merges_free(bpe_merges *m);
/* Adds (a, b) -> id at `rank`, replacing an earlier merge of the same pair. At most n adds. */
void bpe_merges_put(bpe_merges *m, int32_t a, int32_t b, int32_t rank, int32_t id);
/* The first slot (a, b) probes. */
static inline size_t bpe_merges_home(const bpe_merges *m, int32_t a, int32_t b)
{
    uint64_t key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1, h = key * 0x9e3779b97f4a7c15ull;
    return (h ^ (h >> 31)) & m->mask;
}
/* Asks the cache for (a, b)'s slot ahead of a put or a find (a loader's batches). */
static inline void bpe_merges_prefetch(const bpe_merges *m, int32_t a, int32_t b)
{
    __builtin_prefetch(&m->slots[bpe_merges_home(m, a, b)], 1);
}
/* The merge of (a, b), or NULL. */
static inline const bpe_merge *bpe_merges_find(const bpe_merges *m, int32_t a, int32_t b)
{
    uint64_t key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
    for (size_t i = bpe_merges_home(m, a, b);; i = (i + 1) & m->mask) {
        const bpe_merge *s = &m->slots[i];
        if (s->key == key) return s;
        if (s->key == 0) return NULL;
    }
}

/* 1 if a vocabulary entry is spelled like a special token ("<|endoftext|>", "<s>", "<unk>",
 * "<0x0A>", "[CLS]"): ASCII, no space, at least 3 characters, in <...> or [...]. Such entries are
 * the ones a byte-pair vocabulary may hold besides its alphabet and its merges' results. */
int bpe_special_form(const char *s, size_t n);

#endif
