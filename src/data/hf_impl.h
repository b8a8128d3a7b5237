/* Private to src/data/hf_tokenizer.c (reading tokenizer.json) and src/data/hf_encode.c (the
 * encode pipeline and decoding): the loaded tokenizer's layout and the helpers both use
 * (defined in src/data/hf_text.c). */
#ifndef TRIDENT_HF_IMPL_H
#define TRIDENT_HF_IMPL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stddef.h>
#include <stdint.h>

#include "trident/bpe_merges.h"

#include "trident/hf_tokenizer.h"

enum {
    MAX_ID = 1 << 24,       /* ids beyond this are refused: the tables are dense */
    MAX_STEPS = 32,         /* normalizers, pre-tokenizers or decoders in one file */
    CACHE_MAX_WORD = 128,   /* longer words are merged every time */
    CACHE_SLOTS = 1 << 16,  /* per worker; cleared when half full */
    JIT_STACK_MAX = 8 << 20,
    ARENA_BLOCK = 1 << 20,
};

typedef struct {
    char *p;
    size_t n, cap;
} strpool;

typedef struct {
    uint64_t hash; /* 0: empty */
    uint32_t off, len;
    int32_t id;
} smap_slot;

typedef struct {
    smap_slot *slot;
    size_t mask, used;
} smap;

typedef struct {
    char *p;
    size_t n, cap;
} sbuf;


enum split_behavior { SB_REMOVED, SB_ISOLATED, SB_MERGED_PREV, SB_MERGED_NEXT, SB_CONTIGUOUS };
enum prepend_scheme { PS_NEVER, PS_FIRST, PS_ALWAYS };

typedef struct {
    pcre2_code *re; /* NULL: a literal pattern */
    char *lit;
    size_t nlit;
} pattern;

enum norm_kind { NORM_PREPEND, NORM_REPLACE, NORM_UNICODE };
typedef struct {
    enum norm_kind kind;
    char *a, *b; /* prepend: a; replace: a -> b */
    size_t na, nb;
    const void *unorm; /* NFC, NFD, NFKC, NFKD: ICU's UNormalizer2 */
} norm_step;

enum pre_kind { PRE_SPLIT, PRE_METASPACE, PRE_BYTELEVEL };
typedef struct {
    enum pre_kind kind;
    pattern pat; /* split; bytelevel with use_regex (GPT-2's regex) */
    int has_pat;
    enum split_behavior behavior;
    int invert;
    char rep[8]; /* metaspace replacement */
    size_t nrep;
    enum prepend_scheme prepend;
    int split;            /* metaspace */
    int add_prefix_space; /* bytelevel */
} pre_step;

enum dec_kind { DEC_BYTELEVEL, DEC_REPLACE, DEC_BYTEFALLBACK, DEC_FUSE, DEC_STRIP, DEC_METASPACE };
typedef struct {
    enum dec_kind kind;
    char *a, *b; /* replace a -> b; strip / metaspace: a is the character */
    size_t na, nb;
    int start, stop;
    enum prepend_scheme prepend;
} dec_step;

typedef struct {
    int32_t id;
    const char *s; /* the text to match (in the set's text) */
    size_t n;
    int lstrip, rstrip, single_word;
} added_tok;

/* Added tokens of one kind (matched on raw or on normalized text), sorted by first byte, then
 * longest first; bucket[b]..bucket[b+1] are those starting with byte b. */
typedef struct {
    added_tok *tok;
    int n;
    char *text;
    int bucket[257];
} added_set;

struct hf_tokenizer {
    char name[256];
    int n_vocab;             /* 1 + largest id */
    int32_t n_model;         /* entries in model.vocab */
    strpool pool;
    uint32_t *tok_off, *tok_len; /* per id: its string as the file spells it; len UINT32_MAX: none */
    smap vocab;              /* model vocab string -> id */
    smap keys;               /* what a word is looked up as (bytes for byte-level) -> id */
    int byte_level;          /* words are bytes: a ByteLevel pre-tokenizer is present */
    int32_t byte_id[256];    /* id of the one-byte key, or -1 */
    int32_t fallback_id[256];/* id of "<0xNN>", or -1 */
    bpe_merges merges;
    int32_t n_merges;        /* entries in model.merges */
    int byte_fallback, fuse_unk, ignore_merges;
    int32_t unk_id;          /* -1: no unknown token */
    norm_step norm[MAX_STEPS];
    int n_norm;
    pre_step pre[MAX_STEPS];
    int n_pre;
    dec_step dec[MAX_STEPS];
    int n_dec, has_decoder;
    added_set raw, normed;
    pcre2_code *word_re; /* \w, for single_word added tokens */
    int jit;
    /* Cutting long words before U+2581 (SentencePiece-style files: the word is a whole text).
     * No merge can join the symbols on either side of a U+2581 whose preceding character c
     * has its own token and never precedes U+2581 inside a vocab token: every merge's result is
     * in the vocab. marker_split is 0 where that cannot be used; marker_prev lists the c's. */
    int marker_split;
    char marker_prev[16][5];
    int n_marker_prev;
    int eod, bos;
};

uint64_t hf_hash_bytes(const char *s, size_t n);
/* Length of the valid UTF-8 character at s (1-4), or 0 if the bytes there are not one. */
size_t hf_utf8_len(const unsigned char *s, size_t n, uint32_t *cp);
/* Bytes of one "character" at s: a valid UTF-8 character, or one byte of invalid input. */
size_t hf_char_len(const char *s, size_t n);
/* GPT-2's byte alphabet (cp_to_byte[cp], -1 outside it) and a string of it to bytes (-1 if a
 * character is outside it; out has room for n). */
void hf_byte_alphabet(int16_t cp_to_byte[324]);
long hf_alphabet_to_bytes(const char *s, size_t n, const int16_t *cp_to_byte, char *out);
/* Appends s[0..n) to the pool (no NUL: strings are (offset, length)); its offset. */
uint32_t hf_pool_add(strpool *sp, const char *s, size_t n);
/* An empty map of at least 2 n slots (a power of two, 16 at least; it grows when half full). */
void hf_smap_init(smap *m, size_t n);
/* Maps the n bytes at sp->p + off to id (a later put of the same string replaces it). */
void hf_smap_put(smap *m, const strpool *sp, uint32_t off, size_t n, int32_t id);
int32_t hf_smap_find(const smap *m, const strpool *sp, const char *s, size_t n); /* -1: absent */
/* The same lookup in steps, for loaders that look up many strings at once: the hash of s, a
 * prefetch of its first slot, then (that slot in cache) a prefetch of the pooled string it holds,
 * then the lookup itself. The misses of a batch then overlap rather than follow each other. */
uint64_t hf_smap_hash(const char *s, size_t n);
static inline void hf_smap_prefetch_slot(const smap *m, uint64_t h) { __builtin_prefetch(&m->slot[h & m->mask]); }
static inline void hf_smap_prefetch_key(const smap *m, const strpool *sp, uint64_t h)
{
    const smap_slot *x = &m->slot[h & m->mask];
    if (x->hash == h) __builtin_prefetch(sp->p + x->off);
}
int32_t hf_smap_find_hashed(const smap *m, const strpool *sp, const char *s, size_t n, uint64_t h);
void hf_sb_add(sbuf *b, const char *s, size_t n); /* appends, keeps a NUL after */
/* Appends s[0..n) to b with every occurrence of pat replaced by rep (left to right). */
void hf_replace_into(sbuf *b, const char *s, size_t n, const char *pat, size_t np, const char *rep, size_t nr);
/* The regex src[0..n) compiled for PCRE2 (rewrite: \\s, \\p{L}, \\p{N} and their negations as
 * Oniguruma's classes); *jit = 0 when the JIT fails (TD_BPE_NO_JIT=1: not tried). NULL with err
 * naming the file (name) and the place in it (where) when it does not compile. */
pcre2_code *hf_regex_compile(const char *src, size_t n, int rewrite, int *jit, char *err, size_t errlen,
                             const char *name, const char *where);
/* Runs the normalizers over s[0..n); the result is s itself (none) or in one of bufs. */
const char *hf_normalize(const hf_tokenizer *t, const char *s, size_t n, sbuf bufs[2], size_t *out_n);

#endif
