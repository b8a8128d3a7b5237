/* The encode pipeline and decoding of a loaded tokenizer.json (src/data/hf_tokenizer.c reads
 * it; see include/data/trident/hf_tokenizer.h and docs/tokenizer.md). Per-thread state lives in an
 * hf_worker: PCRE2 match data, piece lists over a bump allocator, merge scratch and a word
 * cache. */
#include "hf_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/check.h"

/* Rust's char::is_whitespace (Unicode White_Space). */
static int is_space_cp(uint32_t c)
{
    return (c >= 9 && c <= 13) || c == 0x20 || c == 0x85 || c == 0xa0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200a) ||
           c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

/* ---- worker ----------------------------------------------------------------------------- */

/* Bump allocator for rewritten text: blocks are kept, so pointers into it stay valid until the
 * next reset. */
typedef struct block {
    struct block *next;
    size_t used, cap;
    char data[];
} block;

typedef struct {
    const char *s;
    size_t n;
    int first; /* starts at offset 0 of the original text (Metaspace prepend_scheme "first") */
} piece;

typedef struct {
    piece *p;
    size_t n, cap;
} plist;

typedef struct {
    size_t start, end;
    int match;
} span;

typedef struct {
    const char *s;
    size_t n;
    int32_t id; /* -1: text */
    int first;
} segment;

typedef struct {
    segment *v;
    size_t n, cap;
} seglist;

typedef struct {
    uint64_t hash; /* 0: empty */
    uint32_t key, val;
    uint16_t key_len, n_ids;
} cache_slot;

typedef struct {
    uint64_t key; /* rank << 32 | position */
    int32_t new_id;
} merge_entry;

struct hf_worker {
    const hf_tokenizer *t;
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *stack;
    block *head, *cur;
    plist pl[2];
    span *sp, *sp2;
    size_t sp_cap, sp2_cap;
    seglist seg[2];
    sbuf nbuf[2];
    /* merge scratch, one entry per symbol */
    int32_t *id, *prev, *next;
    merge_entry *heap;
    size_t scratch_cap, heap_cap;
    /* word -> ids cache */
    cache_slot *slots;
    size_t cache_used;
    char *keys;
    size_t keys_len, keys_cap;
    int32_t *vals;
    size_t vals_len, vals_cap;
};

hf_worker *hf_worker_new(const hf_tokenizer *t)
{
    hf_worker *w = td_xcalloc(1, sizeof *w);
    w->t = t;
    w->md = pcre2_match_data_create(32, NULL);
    w->mctx = pcre2_match_context_create(NULL);
    TD_CHECK(w->md && w->mctx, "reduce the number of workers", "allocating PCRE2 match data");
    if (t->jit) {
        w->stack = pcre2_jit_stack_create(32 << 10, JIT_STACK_MAX, NULL);
        TD_CHECK(w->stack, "reduce the number of workers", "allocating a PCRE2 JIT stack");
        pcre2_jit_stack_assign(w->mctx, NULL, w->stack);
    }
    w->slots = td_xcalloc(CACHE_SLOTS, sizeof *w->slots);
    return w;
}

void hf_worker_free(hf_worker *w)
{
    if (!w) return;
    pcre2_match_data_free(w->md);
    pcre2_match_context_free(w->mctx);
    pcre2_jit_stack_free(w->stack);
    for (block *b = w->head, *nx; b; b = nx) nx = b->next, free(b);
    free(w->pl[0].p), free(w->pl[1].p);
    free(w->sp), free(w->sp2);
    free(w->seg[0].v), free(w->seg[1].v);
    free(w->nbuf[0].p), free(w->nbuf[1].p);
    free(w->id), free(w->prev), free(w->next), free(w->heap);
    free(w->slots), free(w->keys), free(w->vals);
    free(w);
}

static char *ar_alloc(hf_worker *w, size_t n)
{
    for (;;) {
        if (w->cur && w->cur->cap - w->cur->used >= n) {
            char *p = w->cur->data + w->cur->used;
            w->cur->used += n;
            return p;
        }
        if (w->cur && w->cur->next) {
            w->cur = w->cur->next;
            w->cur->used = 0;
            continue;
        }
        size_t cap = n > ARENA_BLOCK ? n : ARENA_BLOCK;
        block *b = td_xmalloc(sizeof *b + cap);
        b->next = NULL, b->used = 0, b->cap = cap;
        if (w->cur) w->cur->next = b;
        else w->head = b;
        w->cur = b;
    }
}

static void ar_reset(hf_worker *w)
{
    w->cur = w->head;
    if (w->cur) w->cur->used = 0;
}

static void pl_push(plist *l, const char *s, size_t n, int first)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->p = td_xrealloc(l->p, l->cap * sizeof *l->p);
    }
    l->p[l->n++] = (piece){s, n, first};
}

static void seg_push(seglist *l, const char *s, size_t n, int32_t id, int first)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->v = td_xrealloc(l->v, l->cap * sizeof *l->v);
    }
    l->v[l->n++] = (segment){s, n, id, first};
}

static void span_push(span **v, size_t *n, size_t *cap, size_t start, size_t end, int match)
{
    if (*n == *cap) {
        *cap = *cap ? 2 * *cap : 64;
        *v = td_xrealloc(*v, *cap * sizeof **v);
    }
    (*v)[(*n)++] = (span){start, end, match};
}

/* ---- splitting on a pattern --------------------------------------------------------- */

/* Runs re on s[0..n) from pos: 1 with the match in [*ms, *me), 0 if none. */
static int re_next(hf_worker *w, const pcre2_code *re, const char *s, size_t n, size_t pos, size_t *ms, size_t *me)
{
    int rc = w->t->jit ? pcre2_jit_match(re, (PCRE2_SPTR)s, n, pos, 0, w->md, w->mctx)
                       : pcre2_match(re, (PCRE2_SPTR)s, n, pos, 0, w->md, w->mctx);
    if (rc == PCRE2_ERROR_NOMATCH) return 0;
    if (rc < 0) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof msg);
        td_die(__FILE__, __LINE__, "pcre2_match", "a tokenizer.json regex this costly cannot be used as it is",
               "matching a pre-tokenizer regex of '%s' at byte %zu: %s", w->t->name, pos, (char *)msg);
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(w->md);
    *ms = ov[0], *me = ov[1];
    TD_ASSERT(*ms >= pos && *me >= *ms && *me <= n);
    return 1;
}

/* The library's find_matches: spans tiling s[0..n), each a match or not. Regex matches follow
 * Oniguruma's find_iter: an empty match right where the previous match ended is skipped. */
static size_t find_spans(hf_worker *w, const pattern *p, const char *s, size_t n)
{
    size_t k = 0, prev = 0;
    if (n == 0) {
        span_push(&w->sp, &k, &w->sp_cap, 0, 0, 0);
        return k;
    }
    if (!p->re) {
        if (p->nlit == 0) {
            span_push(&w->sp, &k, &w->sp_cap, 0, n, 0);
            return k;
        }
        for (size_t i = 0; i + p->nlit <= n;) {
            const char *hit = memmem(s + i, n - i, p->lit, p->nlit);
            if (!hit) break;
            size_t at = (size_t)(hit - s);
            if (at > prev) span_push(&w->sp, &k, &w->sp_cap, prev, at, 0);
            span_push(&w->sp, &k, &w->sp_cap, at, at + p->nlit, 1);
            prev = i = at + p->nlit;
        }
    } else {
        size_t last_end = 0, last_match_end = 0;
        int have_last = 0;
        while (last_end <= n) {
            size_t ms, me;
            if (!re_next(w, p->re, s, n, last_end, &ms, &me)) break;
            if (me == ms && have_last && last_match_end == me) {
                if (last_end >= n) break;
                last_end += hf_char_len(s + last_end, n - last_end);
                continue;
            }
            last_end = me, last_match_end = me, have_last = 1;
            if (ms != prev) span_push(&w->sp, &k, &w->sp_cap, prev, ms, 0);
            span_push(&w->sp, &k, &w->sp_cap, ms, me, 1);
            prev = me;
        }
    }
    if (prev != n) span_push(&w->sp, &k, &w->sp_cap, prev, n, 0);
    return k;
}

/* Cuts piece p by pattern with a split behaviour; pushes the non-empty parts to out. */
static void split_piece(hf_worker *w, const piece *p, const pattern *pat, enum split_behavior bh, int invert,
                        plist *out)
{
    size_t k = find_spans(w, pat, p->s, p->n), m = 0;
    span *sp = w->sp;
    if (invert)
        for (size_t i = 0; i < k; i++) sp[i].match = !sp[i].match;
    int prev_match = 0;
    switch (bh) {
    case SB_REMOVED:
    case SB_ISOLATED:
        for (size_t i = 0; i < k; i++)
            if (!(bh == SB_REMOVED && sp[i].match)) span_push(&w->sp2, &m, &w->sp2_cap, sp[i].start, sp[i].end, 0);
        break;
    case SB_MERGED_PREV:
        for (size_t i = 0; i < k; i++) {
            if (sp[i].match && !prev_match && m) w->sp2[m - 1].end = sp[i].end;
            else span_push(&w->sp2, &m, &w->sp2_cap, sp[i].start, sp[i].end, 0);
            prev_match = sp[i].match;
        }
        break;
    case SB_MERGED_NEXT: /* built from the end, then read backwards */
        for (size_t i = k; i-- > 0;) {
            if (sp[i].match && !prev_match && m) w->sp2[m - 1].start = sp[i].start;
            else span_push(&w->sp2, &m, &w->sp2_cap, sp[i].start, sp[i].end, 0);
            prev_match = sp[i].match;
        }
        for (size_t i = 0; i < m / 2; i++) {
            span tmp = w->sp2[i];
            w->sp2[i] = w->sp2[m - 1 - i];
            w->sp2[m - 1 - i] = tmp;
        }
        break;
    case SB_CONTIGUOUS:
        for (size_t i = 0; i < k; i++) {
            if (sp[i].match == prev_match && m) w->sp2[m - 1].end = sp[i].end;
            else span_push(&w->sp2, &m, &w->sp2_cap, sp[i].start, sp[i].end, 0);
            prev_match = sp[i].match;
        }
        break;
    }
    for (size_t i = 0; i < m; i++)
        if (w->sp2[i].end > w->sp2[i].start)
            pl_push(out, p->s + w->sp2[i].start, w->sp2[i].end - w->sp2[i].start, p->first && w->sp2[i].start == 0);
}

/* Metaspace: spaces become the replacement, which is prepended per the scheme; then split
 * before each replacement (MergedWithNext). */
static void metaspace_piece(hf_worker *w, const pre_step *st, const piece *p, plist *out)
{
    size_t spaces = 0;
    for (size_t i = 0; i < p->n; i++) spaces += p->s[i] == ' ';
    char *buf = ar_alloc(w, p->n + spaces * st->nrep + st->nrep + 1), *q = buf;
    for (size_t i = 0; i < p->n; i++) {
        if (p->s[i] == ' ') memcpy(q, st->rep, st->nrep), q += st->nrep;
        else *q++ = p->s[i];
    }
    size_t n = (size_t)(q - buf);
    int starts = n >= st->nrep && memcmp(buf, st->rep, st->nrep) == 0;
    if (!starts && (st->prepend == PS_ALWAYS || (st->prepend == PS_FIRST && p->first))) {
        memmove(buf + st->nrep, buf, n);
        memcpy(buf, st->rep, st->nrep);
        n += st->nrep;
    }
    piece np = {buf, n, p->first};
    if (st->split) split_piece(w, &np, &st->pat, SB_MERGED_NEXT, 0, out);
    else if (n) pl_push(out, buf, n, p->first);
}

static void bytelevel_piece(hf_worker *w, const pre_step *st, const piece *p, plist *out)
{
    piece np = *p;
    if (st->add_prefix_space && !(p->n && p->s[0] == ' ')) {
        char *buf = ar_alloc(w, p->n + 1);
        buf[0] = ' ';
        memcpy(buf + 1, p->s, p->n);
        np.s = buf, np.n = p->n + 1;
    }
    if (st->has_pat) split_piece(w, &np, &st->pat, SB_ISOLATED, 0, out);
    else if (np.n) pl_push(out, np.s, np.n, np.first);
}

/* ---- BPE on one word -------------------------------------------------------------------- */

static void scratch_reserve(hf_worker *w, size_t n)
{
    if (n <= w->scratch_cap) return;
    size_t cap = w->scratch_cap ? w->scratch_cap : 64;
    while (cap < n) cap *= 2;
    w->id = td_xrealloc(w->id, cap * sizeof *w->id);
    w->prev = td_xrealloc(w->prev, cap * sizeof *w->prev);
    w->next = td_xrealloc(w->next, cap * sizeof *w->next);
    w->scratch_cap = cap;
}

static void heap_push(hf_worker *w, size_t *hn, uint64_t key, int32_t new_id)
{
    if (*hn == w->heap_cap) {
        w->heap_cap = w->heap_cap ? 2 * w->heap_cap : 256;
        w->heap = td_xrealloc(w->heap, w->heap_cap * sizeof *w->heap);
    }
    merge_entry *h = w->heap, v = {key, new_id};
    size_t i = (*hn)++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (h[parent].key <= key) break;
        h[i] = h[parent];
        i = parent;
    }
    h[i] = v;
}

static merge_entry heap_pop(hf_worker *w, size_t *hn)
{
    merge_entry *h = w->heap, top = h[0], last = h[--*hn];
    size_t i = 0, len = *hn;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= len) break;
        if (c + 1 < len && h[c + 1].key < h[c].key) c++;
        if (h[c].key >= last.key) break;
        h[i] = h[c];
        i = c;
    }
    if (len) h[i] = last;
    return top;
}

static void push_pair(hf_worker *w, size_t *hn, int32_t p)
{
    if (p < 0 || w->next[p] < 0) return;
    const bpe_merge *s = bpe_merges_find(&w->t->merges, w->id[p], w->id[w->next[p]]);
    if (s) heap_push(w, hn, (uint64_t)(uint32_t)s->rank << 32 | (uint32_t)p, s->id);
}

/* The library's merge_word: a word's characters (its bytes, under ByteLevel) become symbols:
 * their token, else their bytes' <0xNN> tokens (byte_fallback), else the unknown token (runs
 * fused with fuse_unk). Returns the number of symbols in w->id. */
static size_t word_symbols(hf_worker *w, const char *s, size_t n)
{
    const hf_tokenizer *t = w->t;
    scratch_reserve(w, n + 1);
    size_t ns = 0;
    int unk = 0;
    for (size_t i = 0; i < n;) {
        size_t k = t->byte_level ? 1 : hf_char_len(s + i, n - i);
        int32_t id = k == 1 ? t->byte_id[(unsigned char)s[i]] : hf_smap_find(&t->keys, &t->pool, s + i, k);
        if (id >= 0) {
            if (unk) w->id[ns++] = t->unk_id, unk = 0;
            w->id[ns++] = id;
        } else {
            int all = t->byte_fallback;
            for (size_t j = 0; j < k && all; j++) all = t->fallback_id[(unsigned char)s[i + j]] >= 0;
            if (all) {
                for (size_t j = 0; j < k; j++) w->id[ns++] = t->fallback_id[(unsigned char)s[i + j]];
            } else if (t->unk_id >= 0) {
                if (unk && !t->fuse_unk) w->id[ns++] = t->unk_id; /* the previous one; this one waits */
                unk = 1;
            }
        }
        i += k;
    }
    if (unk) w->id[ns++] = t->unk_id;
    return ns;
}

/* Merges the symbols: the heap yields the lowest (rank, position); an entry is used if the pair
 * now at its position still merges into the same token; pairs a merge creates join at once. */
static void merge_symbols(hf_worker *w, size_t ns)
{
    int32_t *id = w->id, *prev = w->prev, *next = w->next;
    for (size_t i = 0; i < ns; i++) {
        prev[i] = (int32_t)i - 1;
        next[i] = i + 1 < ns ? (int32_t)i + 1 : -1;
    }
    size_t hn = 0;
    for (size_t i = 0; i + 1 < ns; i++) push_pair(w, &hn, (int32_t)i);
    while (hn) {
        merge_entry top = heap_pop(w, &hn);
        int32_t p = (int32_t)(uint32_t)top.key, q = next[p];
        if (id[p] < 0 || q < 0) continue;
        const bpe_merge *pair = bpe_merges_find(&w->t->merges, id[p], id[q]);
        if (!pair || pair->id != top.new_id) continue;
        id[p] = top.new_id;
        id[q] = -1;
        next[p] = next[q];
        if (next[q] >= 0) prev[next[q]] = p;
        push_pair(w, &hn, prev[p]);
        push_pair(w, &hn, p);
    }
}

static void ids_push(bpe_ids *v, int32_t id) { bpe_ids_push(v, id); }

static void ids_append(bpe_ids *v, const int32_t *ids, size_t n)
{
    if (n == 0) return;
    if (v->n + n > v->cap) {
        while (v->n + n > v->cap) v->cap = v->cap ? 2 * v->cap : 256;
        v->ids = td_xrealloc(v->ids, v->cap * sizeof *v->ids);
    }
    memcpy(v->ids + v->n, ids, n * sizeof *ids);
    v->n += n;
}

static cache_slot *cache_find(hf_worker *w, const char *s, size_t n, uint64_t h)
{
    for (size_t i = h & (CACHE_SLOTS - 1);; i = (i + 1) & (CACHE_SLOTS - 1)) {
        cache_slot *c = &w->slots[i];
        if (c->hash == 0) return c;
        if (c->hash == h && c->key_len == n && memcmp(w->keys + c->key, s, n) == 0) return c;
    }
}

static void cache_store(hf_worker *w, const char *s, size_t n, uint64_t h, const int32_t *ids, size_t n_ids)
{
    if (2 * (w->cache_used + 1) > CACHE_SLOTS) {
        memset(w->slots, 0, CACHE_SLOTS * sizeof *w->slots);
        w->cache_used = w->keys_len = w->vals_len = 0;
    }
    if (n_ids > UINT16_MAX) return;
    cache_slot *c = cache_find(w, s, n, h);
    if (w->keys_len + n > w->keys_cap) w->keys = td_xrealloc(w->keys, w->keys_cap = 2 * (w->keys_cap + n) + 4096);
    if (w->vals_len + n_ids > w->vals_cap)
        w->vals = td_xrealloc(w->vals, (w->vals_cap = 2 * (w->vals_cap + n_ids) + 1024) * sizeof *w->vals);
    memcpy(w->keys + w->keys_len, s, n);
    if (n_ids) memcpy(w->vals + w->vals_len, ids, n_ids * sizeof *ids); /* none: unknown characters, no unk token */
    *c = (cache_slot){h, (uint32_t)w->keys_len, (uint32_t)w->vals_len, (uint16_t)n, (uint16_t)n_ids};
    w->keys_len += n, w->vals_len += n_ids;
    w->cache_used++;
}

/* Merges one word, or one independent part of it, through the cache. */
static void bpe_part(hf_worker *w, const char *s, size_t n, bpe_ids *out)
{
    uint64_t h = 0;
    if (n <= CACHE_MAX_WORD) {
        h = hf_hash_bytes(s, n) | 1ull << 63;
        cache_slot *c = cache_find(w, s, n, h);
        if (c->hash) {
            if (c->n_ids) ids_append(out, w->vals + c->val, c->n_ids);
            return;
        }
    }
    size_t ns = word_symbols(w, s, n), first = out->n;
    merge_symbols(w, ns);
    for (size_t i = 0; i < ns; i++)
        if (w->id[i] >= 0) ids_push(out, w->id[i]);
    if (n <= CACHE_MAX_WORD) cache_store(w, s, n, h, out->n > first ? out->ids + first : NULL, out->n - first);
}

static size_t last_char(const char *s, size_t n);

/* Whether a long word may be cut before the U+2581 at s[at] (see marker_split). */
static int marker_cut(const hf_tokenizer *t, const char *s, size_t at)
{
    size_t k = last_char(s, at), n = at - k;
    int32_t id = n == 1 ? t->byte_id[(unsigned char)s[k]] : hf_smap_find(&t->keys, &t->pool, s + k, n);
    if (id < 0) return 0;
    for (int m = 0; m < t->n_marker_prev; m++)
        if (strlen(t->marker_prev[m]) == n && memcmp(t->marker_prev[m], s + k, n) == 0) return 0;
    return 1;
}

/* The model's tokenize on one word. */
static void bpe_word(hf_worker *w, const char *s, size_t n, bpe_ids *out)
{
    const hf_tokenizer *t = w->t;
    if (n == 0) return;
    if (t->ignore_merges) {
        int32_t id = n == 1 ? t->byte_id[(unsigned char)s[0]] : hf_smap_find(&t->keys, &t->pool, s, n);
        if (id >= 0) {
            ids_push(out, id);
            return;
        }
    }
    size_t start = 0;
    if (t->marker_split && n > CACHE_MAX_WORD) {
        for (size_t i = 1; i + 3 <= n;) {
            const char *hit = memmem(s + i, n - i, "\xe2\x96\x81", 3);
            if (!hit) break;
            size_t at = (size_t)(hit - s);
            if (marker_cut(t, s, at)) {
                bpe_part(w, s + start, at - start, out);
                start = at;
            }
            i = at + 3;
        }
    }
    bpe_part(w, s + start, n - start, out);
}

/* ---- added tokens ------------------------------------------------------------------------ */

static int is_word_char(const hf_tokenizer *t, hf_worker *w, const char *s, size_t n)
{
    return pcre2_match(t->word_re, (PCRE2_SPTR)s, n, 0, PCRE2_ANCHORED, w->md, NULL) >= 0;
}

/* Start of the last character of s[0..n). */
static size_t last_char(const char *s, size_t n)
{
    size_t i = n - 1;
    while (i > 0 && n - i < 4 && ((unsigned char)s[i] & 0xc0) == 0x80) i--;
    return hf_char_len(s + i, n - i) == n - i ? i : n - 1;
}

static int space_at(const char *s, size_t n)
{
    uint32_t cp;
    return hf_utf8_len((const unsigned char *)s, n, &cp) && is_space_cp(cp);
}

/* The library's AddedVocabulary split: leftmost-longest matches of the set's tokens, honouring
 * single_word, lstrip and rstrip; pushes text and token segments of s[0..n) to out. */
static void split_added(hf_worker *w, const added_set *set, const char *s, size_t n, int first, seglist *out)
{
    size_t start_offset = 0, pos = 0;
    while (set->n && pos < n) {
        unsigned char c = (unsigned char)s[pos];
        const added_tok *hit = NULL;
        for (int k = set->bucket[c]; k < set->bucket[c + 1] && !hit; k++)
            if (set->tok[k].n <= n - pos && memcmp(set->tok[k].s, s + pos, set->tok[k].n) == 0) hit = &set->tok[k];
        if (!hit) {
            pos++;
            continue;
        }
        size_t start = pos, stop = pos + hit->n;
        pos = stop;
        if (hit->single_word) {
            int before = start > 0 && is_word_char(w->t, w, s + last_char(s, start), start - last_char(s, start));
            int after = stop < n && is_word_char(w->t, w, s + stop, hf_char_len(s + stop, n - stop));
            if (before || after) continue;
        }
        if (hit->lstrip) {
            size_t ns = start;
            while (ns > 0) {
                size_t lc = last_char(s, ns);
                if (!space_at(s + lc, ns - lc)) break;
                ns = lc;
            }
            start = ns > start_offset ? ns : start_offset;
        }
        if (hit->rstrip)
            while (stop < n && space_at(s + stop, n - stop)) stop += hf_char_len(s + stop, n - stop);
        if (start < start_offset) continue;
        if (start > start_offset) seg_push(out, s + start_offset, start - start_offset, -1, first && start_offset == 0);
        seg_push(out, s + start, stop - start, hit->id, 0);
        start_offset = stop;
        if (pos < stop) pos = stop;
    }
    if (start_offset < n || n == 0) seg_push(out, s + start_offset, n - start_offset, -1, first && start_offset == 0);
}

/* ---- encode ------------------------------------------------------------------------------ */

/* Pre-tokenizes one normalized text without added tokens and runs the model on each word. */
static void encode_words(hf_worker *w, const char *s, size_t n, int first, bpe_ids *out)
{
    const hf_tokenizer *t = w->t;
    if (n == 0) return; /* the library gives no ids for an empty text, whatever its pre-tokenizers */
    ar_reset(w);
    plist *a = &w->pl[0], *b = &w->pl[1];
    a->n = 0;
    pl_push(a, s, n, first);
    for (int k = 0; k < t->n_pre; k++) {
        const pre_step *st = &t->pre[k];
        b->n = 0;
        for (size_t i = 0; i < a->n; i++) {
            if (st->kind == PRE_SPLIT) split_piece(w, &a->p[i], &st->pat, st->behavior, st->invert, b);
            else if (st->kind == PRE_METASPACE) metaspace_piece(w, st, &a->p[i], b);
            else bytelevel_piece(w, st, &a->p[i], b);
        }
        plist *tmp = a;
        a = b, b = tmp;
    }
    for (size_t i = 0; i < a->n; i++) bpe_word(w, a->p[i].s, a->p[i].n, out);
}

void hf_encode(hf_worker *w, const char *text, size_t len, bpe_ids *out)
{
    const hf_tokenizer *t = w->t;
    seglist *raw = &w->seg[0], *nrm = &w->seg[1];
    raw->n = 0;
    split_added(w, &t->raw, text, len, 1, raw);
    for (size_t i = 0; i < raw->n; i++) {
        const segment g = raw->v[i];
        if (g.id >= 0) {
            ids_push(out, g.id);
            continue;
        }
        size_t nn;
        const char *s = hf_normalize(t, g.s, g.n, w->nbuf, &nn);
        nrm->n = 0;
        split_added(w, &t->normed, s, nn, g.first, nrm);
        for (size_t j = 0; j < nrm->n; j++) {
            if (nrm->v[j].id >= 0) ids_push(out, nrm->v[j].id);
            else encode_words(w, nrm->v[j].s, nrm->v[j].n, nrm->v[j].first, out);
        }
    }
}

/* ---- decode ------------------------------------------------------------------------------ */

typedef struct {
    sbuf text;   /* all token strings, back to back */
    size_t *off; /* token i is text[off[i] .. off[i + 1]) */
    size_t n, cap;
} toklist;

static void tl_begin(toklist *l)
{
    l->n = 0;
    l->text.n = 0;
    hf_sb_add(&l->text, "", 0);
    if (!l->cap) l->off = td_xmalloc((l->cap = 64) * sizeof *l->off);
    l->off[0] = 0;
}

/* Ends the token being written (its bytes were added to text). */
static void tl_end(toklist *l)
{
    if (l->n + 2 > l->cap) l->off = td_xrealloc(l->off, (l->cap *= 2) * sizeof *l->off);
    l->off[++l->n] = l->text.n;
}

static void tl_push(toklist *l, const char *s, size_t n)
{
    hf_sb_add(&l->text, s, n);
    tl_end(l);
}

static int byte_token(const char *s, size_t n)
{
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* Applies one decoder to the tokens of in, writing out. */
static void decode_step(const dec_step *st, const toklist *in, toklist *out, const int16_t *cp_to_byte)
{
    tl_begin(out);
    const char *base = in->text.p;
    int pending = 0; /* ByteFallback: bytes written to out's open token */
    for (size_t i = 0; i < in->n; i++) {
        const char *s = base + in->off[i];
        size_t n = in->off[i + 1] - in->off[i];
        switch (st->kind) {
        case DEC_BYTELEVEL: { /* all tokens into one string */
            size_t at = out->text.n;
            hf_sb_add(&out->text, s, n);
            long k = hf_alphabet_to_bytes(s, n, cp_to_byte, out->text.p + at);
            if (k >= 0) out->text.n = at + (size_t)k;
            else memcpy(out->text.p + at, s, n); /* not byte-level: the token's own bytes */
            break;
        }
        case DEC_FUSE:
            hf_sb_add(&out->text, s, n);
            break;
        case DEC_REPLACE:
            hf_replace_into(&out->text, s, n, st->a, st->na, st->b, st->nb);
            tl_end(out);
            break;
        case DEC_BYTEFALLBACK: {
            int b = byte_token(s, n);
            if (b >= 0) {
                char c = (char)b;
                hf_sb_add(&out->text, &c, 1);
                pending = 1;
                break;
            }
            if (pending) tl_end(out), pending = 0;
            tl_push(out, s, n);
            break;
        }
        case DEC_STRIP: {
            size_t a = 0, e = n;
            for (int k = 0; k < st->start && e - a >= st->na && memcmp(s + a, st->a, st->na) == 0; k++) a += st->na;
            for (int k = 0; k < st->stop && e - a >= st->na && memcmp(s + e - st->na, st->a, st->na) == 0; k++) e -= st->na;
            tl_push(out, s + a, e - a);
            break;
        }
        case DEC_METASPACE:
            for (size_t j = 0; j < n;) {
                if (n - j >= st->na && memcmp(s + j, st->a, st->na) == 0) {
                    if (!(i == 0 && st->prepend != PS_NEVER)) hf_sb_add(&out->text, " ", 1);
                    j += st->na;
                } else {
                    hf_sb_add(&out->text, s + j, 1);
                    j++;
                }
            }
            tl_end(out);
            break;
        }
    }
    if (st->kind == DEC_BYTELEVEL || st->kind == DEC_FUSE || pending) tl_end(out);
}

int hf_decode(const hf_tokenizer *t, const int32_t *ids, size_t n, char **out, size_t *out_len, char *err,
              size_t errlen)
{
    toklist l[2] = {{{0}, 0, 0, 0}, {{0}, 0, 0, 0}};
    tl_begin(&l[0]);
    for (size_t i = 0; i < n; i++) {
        size_t k;
        const char *s = hf_token(t, ids[i], &k);
        if (!s) {
            td_seterr(err, errlen, "token id %d (position %zu) is not in the vocab (ids 0..%d%s)", ids[i], i,
                      t->n_vocab - 1, ids[i] >= 0 && ids[i] < t->n_vocab ? ", with gaps" : "");
            free(l[0].text.p), free(l[0].off);
            return -1;
        }
        if (!t->has_decoder && i) hf_sb_add(&l[0].text, " ", 1); /* no decoder: tokens joined by spaces */
        tl_push(&l[0], s, k);
    }
    int16_t cp_to_byte[324];
    hf_byte_alphabet(cp_to_byte);
    int cur = 0;
    for (int k = 0; k < t->n_dec; k++, cur ^= 1) decode_step(&t->dec[k], &l[cur], &l[cur ^ 1], cp_to_byte);
    size_t len = l[cur].text.n;
    char *buf = td_xrealloc(*out, len ? len : 1);
    memcpy(buf, l[cur].text.p, len);
    *out = buf;
    *out_len = len;
    for (int k = 0; k < 2; k++) free(l[k].text.p), free(l[k].off);
    return 0;
}
