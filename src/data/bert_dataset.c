/* BERT dataset after Megatron's BertDataset: see include/data/trident/bert_dataset.h and docs/bert.md.
 * Random draws come from Philox keyed by (seed, purpose, split, index), never by rank.
 *
 * Cache file: a header (magic, key, description length, rows, epochs, checksum of the rest), the
 * description text (every input the mapping depends on, compared byte for byte on load) padded
 * to 8 bytes, then the mapping rows (int64 x 3). */
#include "trident/bert_dataset.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ds_util.h"
#include "trident/check.h"
#include "trident/philox.h"
#include "trident/timer.h"
#include "trident/wordpiece.h"

/* ------------------------------------------------------------------------------------------ */
/* Small helpers: src/data/ds_util.h                                                          */

/* ------------------------------------------------------------------------------------------ */
/* Random draws. A stream is (tag, purpose, split); per-sample generators put the sample index
 * in the Philox counter and count blocks in the stream's low 32 bits.                        */

enum { RNG_TARGET = 1, RNG_SHUFFLE = 2, RNG_SEGMENTS = 3, RNG_MASK = 4 };

static uint64_t rng_stream(int purpose, gptds_split s)
{
    return (0xBE27ull << 48) | ((uint64_t)purpose << 40) | ((uint64_t)s << 32);
}

typedef struct {
    td_philox_key key;
    uint64_t stream, index;
    uint32_t block;
    td_philox_ctr buf;
    int left; /* 64-bit draws left in buf (0, 1 or 2) */
} sample_rng;

static sample_rng rng_for(uint64_t seed, int purpose, gptds_split s, uint64_t index)
{
    return (sample_rng){.key = td_philox_key_from_seed(seed), .stream = rng_stream(purpose, s), .index = index};
}

static uint64_t rng_u64(sample_rng *r)
{
    if (r->left == 0) {
        r->buf = td_philox_at(r->key, r->stream | r->block++, r->index);
        r->left = 2;
    }
    int w = 2 * (2 - r->left--);
    return ((uint64_t)r->buf.v[w] << 32) | r->buf.v[w + 1];
}

/* Uniform double in [0, 1) (53 bits). */
static double rng_unit(sample_rng *r) { return (double)(rng_u64(r) >> 11) * (1.0 / 9007199254740992.0); }

/* Uniform integer in [0, bound) by multiply-shift on 64 bits. */
static uint64_t rng_below(sample_rng *r, uint64_t bound)
{
    return (uint64_t)(((unsigned __int128)rng_u64(r) * bound) >> 64);
}

/* ------------------------------------------------------------------------------------------ */
/* The samples mapping (Megatron's helpers.cpp build_mapping)                                 */

typedef struct {
    int64_t *rows; /* (n, 3) */
    int64_t n, cap;
} row_vec;

static void row_push(row_vec *v, int64_t first, int64_t last, int64_t target)
{
    if (v->n == v->cap) {
        v->cap = v->cap ? 2 * v->cap : 1024;
        v->rows = td_xrealloc(v->rows, (size_t)v->cap * 3 * sizeof *v->rows);
    }
    int64_t *r = v->rows + 3 * v->n++;
    r[0] = first;
    r[1] = last;
    r[2] = target;
}

typedef struct {
    const int32_t *lens;  /* sentence lengths */
    const int64_t *docs;  /* document index: document d is sentences [docs[d], docs[d+1]) */
    int64_t doc_beg, doc_end;
    int max_tokens;       /* target length of a full sample */
    double short_prob;
    int min_sent;         /* 2 with the binary head, else 1 */
    int64_t wanted;       /* <= 0: one epoch */
    uint64_t seed;
    gptds_split split;
} map_plan;

/* Target length of the next sample: max_tokens, or with probability short_prob a uniform
 * length in [2, max_tokens]. Draw k of the split's target stream. */
static int64_t target_length(const map_plan *P, uint64_t k)
{
    sample_rng r = rng_for(P->seed, RNG_TARGET, P->split, k);
    if (P->short_prob > 0 && rng_unit(&r) < P->short_prob) return 2 + (int64_t)rng_below(&r, (uint64_t)P->max_tokens - 1);
    return P->max_tokens;
}

static int has_long_sentence(const map_plan *P, int64_t first, int64_t last)
{
    for (int64_t i = first; i < last; i++)
        if (P->lens[i] > BERTDS_LONG_SENTENCE_LEN) return 1;
    return 0;
}

/* Walks the documents in epochs until `wanted` rows exist (one epoch when wanted <= 0, or when
 * an epoch yields none), then shuffles the rows. Returns the rows; *n and *epochs set. */
static int64_t *build_mapping(const map_plan *P, int64_t *n, int64_t *epochs)
{
    row_vec v = {0};
    uint64_t draws = 0;
    int64_t e = 0;
    for (; e == 0 || (P->wanted > 0 && v.n > 0 && v.n < P->wanted); e++) {
        for (int64_t d = P->doc_beg; d < P->doc_end; d++) {
            int64_t first = P->docs[d], last = P->docs[d + 1], remain = last - first;
            /* as Megatron: only documents of >= 2 sentences are checked for long sentences */
            if (remain < P->min_sent || (remain > 1 && has_long_sentence(P, first, last))) continue;
            int64_t start = first, seq_len = 0, num_sent = 0;
            int64_t target = target_length(P, draws++);
            for (int64_t i = first; i < last; i++) {
                seq_len += P->lens[i];
                num_sent++;
                remain--;
                if ((seq_len >= target && remain > 1 && num_sent >= P->min_sent) || remain == 0) {
                    row_push(&v, start, i + 1, target);
                    start = i + 1;
                    target = target_length(P, draws++);
                    seq_len = num_sent = 0;
                }
            }
        }
    }
    /* Fisher-Yates as numpy walks it: i from n-1 down to 1, j uniform in [0, i] */
    uint64_t stream = rng_stream(RNG_SHUFFLE, P->split);
    for (int64_t i = v.n - 1; i > 0; i--) {
        int64_t j = (int64_t)td_philox_below(P->seed, stream, (uint64_t)i, (uint64_t)i + 1);
        for (int c = 0; c < 3; c++) {
            int64_t t = v.rows[3 * i + c];
            v.rows[3 * i + c] = v.rows[3 * j + c];
            v.rows[3 * j + c] = t;
        }
    }
    *n = v.n;
    *epochs = e;
    return v.rows;
}

/* ------------------------------------------------------------------------------------------ */
/* Cache files                                                                                */

#define CACHE_MAGIC "TDBERTv1"

typedef struct {
    char magic[8];
    uint64_t key;
    uint64_t desc_len;
    uint64_t n_rows;
    uint64_t epochs;
    uint64_t checksum; /* fnv1a over every byte after the header */
} cache_header;

static size_t pad8(size_t n) { return (n + 7) & ~(size_t)7; }

/* An image holding rows under description desc, sealed with its checksum. */
static ds_image image_make(const char *desc, uint64_t key, const int64_t *rows, int64_t n, int64_t epochs)
{
    size_t dl = strlen(desc), at = sizeof(cache_header) + pad8(dl);
    ds_image im = {.len = at + (size_t)n * 3 * sizeof(int64_t)};
    im.p = td_xcalloc(1, im.len);
    cache_header h = {.key = key, .desc_len = dl, .n_rows = (uint64_t)n, .epochs = (uint64_t)epochs};
    memcpy(h.magic, CACHE_MAGIC, 8);
    memcpy(im.p + sizeof h, desc, dl);
    if (n) memcpy(im.p + at, rows, (size_t)n * 3 * sizeof(int64_t));
    h.checksum = ds_fnv1a_words(DS_FNV_OFFSET, im.p + sizeof h, im.len - sizeof h);
    memcpy(im.p, &h, sizeof h);
    return im;
}

/* Rows of a well-formed image (read through the header). */
static const int64_t *image_rows(const ds_image *im)
{
    cache_header h;
    memcpy(&h, im->p, sizeof h);
    return (const int64_t *)(void *)(im->p + sizeof h + pad8(h.desc_len));
}

/* Checks an image against this run's description and the split's bounds: 0, or -1 with why. */
static int image_check(const ds_image *im, const char *desc, uint64_t key, const map_plan *P, char *why,
                       size_t whylen)
{
    cache_header h;
    if (im->len < sizeof h) {
        snprintf(why, whylen, "%zu bytes, shorter than its header", im->len);
        return -1;
    }
    memcpy(&h, im->p, sizeof h);
    size_t dl = strlen(desc);
    if (memcmp(h.magic, CACHE_MAGIC, 8) != 0) {
        snprintf(why, whylen, "bad magic (not a trident BERT mapping, or from another version)");
        return -1;
    }
    if (h.key != key || h.desc_len != dl || im->len < sizeof h + dl || memcmp(im->p + sizeof h, desc, dl) != 0) {
        snprintf(why, whylen, "it was built for other inputs");
        return -1;
    }
    if (h.n_rows > (im->len - sizeof h) / 24 || im->len != sizeof h + pad8(dl) + h.n_rows * 24) {
        snprintf(why, whylen, "%zu bytes for %" PRIu64 " rows (truncated or padded)", im->len, h.n_rows);
        return -1;
    }
    uint64_t sum = ds_fnv1a_words(DS_FNV_OFFSET, im->p + sizeof h, im->len - sizeof h);
    if (sum != h.checksum) {
        snprintf(why, whylen, "checksum %016" PRIx64 ", expected %016" PRIx64 " (corrupt)", sum, h.checksum);
        return -1;
    }
    const int64_t *r = image_rows(im);
    int64_t lo = P->docs[P->doc_beg], hi = P->docs[P->doc_end];
    for (uint64_t k = 0; k < h.n_rows; k++, r += 3)
        if (r[0] < lo || r[1] > hi || r[0] >= r[1] || r[2] < 2 || r[2] > P->max_tokens) {
            snprintf(why, whylen, "row %" PRIu64 " (%" PRId64 ", %" PRId64 ", %" PRId64 ") is out of bounds", k, r[0],
                     r[1], r[2]);
            return -1;
        }
    return 0;
}

/* Maps path and checks it: 0 with im set, or -1 (a file that exists but is unusable is warned
 * about). */
static int cache_load(const char *path, const char *desc, uint64_t key, const map_plan *P, ds_image *im)
{
    char why[512];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno != ENOENT) td_warn("BERT samples mapping %s cannot be read (%s); rebuilding it", path,
                                     td_strerror(errno));
        return -1;
    }
    struct stat st;
    void *p = MAP_FAILED;
    if (fstat(fd, &st) == 0 && st.st_size > 0) p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        td_warn("BERT samples mapping %s cannot be mapped (empty or unreadable); rebuilding it", path);
        return -1;
    }
    *im = (ds_image){.p = p, .len = (size_t)st.st_size, .mapped = 1};
    if (image_check(im, desc, key, P, why, sizeof why) == 0) return 0;
    td_warn("BERT samples mapping %s is unusable (%s); rebuilding it", path, why);
    ds_image_free(im);
    return -1;
}

/* ------------------------------------------------------------------------------------------ */
/* The dataset                                                                                */

typedef struct {
    bertds_split_info info;
    char *cache_file;
    ds_image img;
} split_state;

struct bertds {
    char *path;
    dsr_reader *reader;
    const int32_t *lens;
    int seq_length, max_tokens, binary_head, vocab_size;
    uint64_t seed;
    double masked_lm_prob;
    int32_t cls_id, sep_id, mask_id, pad_id;
    uint8_t *subword; /* (vocab_size) or NULL */
    split_state split[GPTDS_NSPLITS];
};

static void check_config(const bertds_config *c)
{
    if (!c->path) td_usage_error("--data-path is required: a sentence-level dataset prefix (PREFIX.bin + PREFIX.idx)");
    if (c->seq_length < 5)
        td_usage_error("--seq-length %d is too short for BERT: a sample holds [CLS], two [SEP] and at least 2 "
                       "tokens of text; give at least 5", c->seq_length);
    if (c->vocab_size < 1) td_usage_error("the BERT dataset needs the vocabulary size (got %d)", c->vocab_size);
    const int32_t ids[4] = {c->cls_id, c->sep_id, c->mask_id, c->pad_id};
    const char *names[4] = {"[CLS]", "[SEP]", "[MASK]", "[PAD]"};
    for (int i = 0; i < 4; i++)
        if (ids[i] < 0 || ids[i] >= c->vocab_size)
            td_usage_error("the %s id %d is outside the vocabulary of %d ids: use a BERT vocabulary (with %s)",
                           names[i], (int)ids[i], c->vocab_size, names[i]);
    if (!(c->short_seq_prob >= 0 && c->short_seq_prob <= 1))
        td_usage_error("--short-seq-prob %g must lie in [0, 1]", c->short_seq_prob);
    if (!(c->masked_lm_prob >= 0 && c->masked_lm_prob <= 1))
        td_usage_error("--mask-prob %g must lie in [0, 1]", c->masked_lm_prob);
}

/* Builds or loads the mapping of documents [beg, end) of split s into st. */
static void split_build(bertds *ds, gptds_split s, const bertds_config *c, int64_t beg, int64_t end)
{
    split_state *st = &ds->split[s];
    bertds_split_info *in = &st->info;
    map_plan P = {.lens = ds->lens, .docs = dsr_doc_index(ds->reader), .doc_beg = beg, .doc_end = end,
                  .max_tokens = ds->max_tokens, .short_prob = c->short_seq_prob, .min_sent = c->binary_head ? 2 : 1,
                  .wanted = in->samples_wanted, .seed = c->seed, .split = s};
    int64_t s0 = P.docs[beg], s1 = P.docs[end];
    uint64_t h = ds_fnv1a_words(DS_FNV_OFFSET, P.docs + beg, (size_t)(end - beg + 1) * sizeof *P.docs);
    h = ds_fnv1a_words(h, ds->lens + s0, (size_t)(s1 - s0) * sizeof *ds->lens);
    char *desc = ds_aprintf("trident BertDataset samples mapping, algorithm v%d\nsplit: %s\ndocuments: [%" PRId64
                         ", %" PRId64 ") of %" PRId64 "\nsentences: [%" PRId64 ", %" PRId64 ") of %" PRId64
                         "\ndocument index and sentence lengths fnv1a64: %016" PRIx64 "\nmax tokens: %d\nshort "
                         "sequence probability: %a\nbinary head: %d\nseed: %" PRIu64 "\nsamples wanted: %" PRId64 "\n",
                         BERTDS_ALGO_VERSION, gptds_split_name(s), beg, end, dsr_num_documents(ds->reader), s0, s1,
                         dsr_num_sequences(ds->reader), h, P.max_tokens, P.short_prob, P.min_sent == 2, c->seed,
                         in->samples_wanted);
    uint64_t key = ds_fnv1a_words(DS_FNV_OFFSET, desc, strlen(desc));
    if (!c->no_cache) {
        const char *slash = strrchr(ds->path, '/');
        const char *base = slash ? slash + 1 : ds->path;
        if (c->cache_dir)
            st->cache_file = ds_aprintf("%s/%s.bert.%s.%016" PRIx64 ".tdidx", c->cache_dir, base, gptds_split_name(s), key);
        else
            st->cache_file = ds_aprintf("%.*s%s.bert.%s.%016" PRIx64 ".tdidx", (int)(base - ds->path), ds->path, base,
                                     gptds_split_name(s), key);
        in->cache_file = st->cache_file;
    }

    double t0 = td_now();
    in->cache_loaded = st->cache_file && cache_load(st->cache_file, desc, key, &P, &st->img) == 0;
    if (!in->cache_loaded) {
        int64_t n = 0, epochs = 0;
        int64_t *rows = build_mapping(&P, &n, &epochs);
        st->img = image_make(desc, key, rows, n, epochs);
        free(rows);
        char why[512];
        if (st->cache_file && ds_write_atomic(st->cache_file, st->img.p, st->img.len, why, sizeof why) != 0)
            td_warn("cannot write the BERT samples mapping (%s); continuing with it in memory (point "
                    "--data-cache-path at a writable folder to keep it)", why);
    }
    cache_header hd;
    memcpy(&hd, st->img.p, sizeof hd);
    in->num_samples = (int64_t)hd.n_rows;
    in->num_epochs = (int64_t)hd.epochs;
    in->mapping = in->num_samples ? image_rows(&st->img) : NULL;
    free(desc);
    TD_DEBUG("bert dataset %s, %s split: %s %" PRId64 " samples, %" PRId64 " epochs in %.3f s (%s)", ds->path,
             gptds_split_name(s), in->cache_loaded ? "loaded" : "built", in->num_samples, in->num_epochs,
             td_now() - t0, st->cache_file ? st->cache_file : "not cached");
}

static void split_open(bertds *ds, gptds_split s, const bertds_config *c, int present, int64_t beg, int64_t end)
{
    bertds_split_info *in = &ds->split[s].info;
    in->doc_begin = beg;
    in->doc_end = end;
    in->samples_wanted = c->num_samples[s] > 0 ? c->num_samples[s] : -1;
    if (present && end > beg) split_build(ds, s, c, beg, end);
    if (in->num_samples == 0 && s == GPTDS_TRAIN && c->num_samples[s] > 0)
        td_usage_error("--split %s leaves the train split of %s with documents [%" PRId64 ", %" PRId64 "), which "
                       "give no BERT sample (%s needs documents of at least %d sentence%s, none over %d tokens): "
                       "give the train split more weight, or preprocess with --split-sentences",
                       c->split ? c->split : "969,30,1", ds->path, beg, end,
                       c->binary_head ? "the binary head" : "a sample", c->binary_head ? 2 : 1,
                       td_plural(c->binary_head ? 2 : 1), BERTDS_LONG_SENTENCE_LEN);
}

bertds *bertds_open(const bertds_config *c)
{
    check_config(c);
    double w[GPTDS_NSPLITS];
    char err[512];
    if (gptds_parse_split(c->split ? c->split : "969,30,1", w, err, sizeof err) != 0) td_usage_error("--split %s", err);
    if (c->cache_dir && !c->no_cache && ds_make_dirs(c->cache_dir) != 0)
        td_fatal(1, "--data-cache-path %s: cannot create the folder (%s); give a writable folder", c->cache_dir,
                 td_strerror(errno));
    bertds *ds = td_xcalloc(1, sizeof *ds);
    ds->path = td_xstrdup(c->path);
    ds->reader = dsr_open(c->path, err, sizeof err);
    if (!ds->reader) td_fatal(1, "--data-path %s: %s", c->path, err);
    gptds_check_token_ids(ds->reader, c->vocab_size, c->vocab_source ? c->vocab_source : "the tokenizer",
                          c->cache_dir, c->no_cache);
    ds->lens = dsr_seq_lens(ds->reader);
    ds->seq_length = c->seq_length;
    ds->max_tokens = c->seq_length - 3; /* [CLS] and two [SEP], also without the binary head, as Megatron */
    ds->binary_head = c->binary_head != 0;
    ds->vocab_size = c->vocab_size;
    ds->seed = c->seed;
    ds->masked_lm_prob = c->masked_lm_prob;
    ds->cls_id = c->cls_id;
    ds->sep_id = c->sep_id;
    ds->mask_id = c->mask_id;
    ds->pad_id = c->pad_id;
    if (c->subword) {
        ds->subword = td_xmalloc((size_t)c->vocab_size);
        memcpy(ds->subword, c->subword, (size_t)c->vocab_size);
    }
    int64_t beg[GPTDS_NSPLITS], end[GPTDS_NSPLITS];
    unsigned present = gptds_split_range(w, dsr_num_documents(ds->reader), beg, end);
    for (int s = 0; s < GPTDS_NSPLITS; s++)
        split_open(ds, (gptds_split)s, c, (present >> s) & 1, beg[s], end[s]);
    return ds;
}

void bertds_close(bertds *ds)
{
    if (!ds) return;
    for (int s = 0; s < GPTDS_NSPLITS; s++) {
        ds_image_free(&ds->split[s].img);
        free(ds->split[s].cache_file);
    }
    dsr_close(ds->reader);
    free(ds->subword);
    free(ds->path);
    free(ds);
}

int bertds_seq_length(const bertds *ds) { return ds->seq_length; }

int64_t bertds_num_samples(const bertds *ds, gptds_split s)
{
    TD_ASSERT((unsigned)s < GPTDS_NSPLITS);
    return ds->split[s].info.num_samples;
}

bertds_split_info bertds_info(const bertds *ds, gptds_split s)
{
    TD_ASSERT((unsigned)s < GPTDS_NSPLITS);
    return ds->split[s].info;
}

/* ------------------------------------------------------------------------------------------ */
/* Building a sample (Megatron's build_training_sample)                                       */

typedef struct {
    int64_t lo, hi; /* tokens [lo, hi) of the concatenated sentences */
} segment;

/* Megatron's truncate_seq_pair: drop one token at a time from the longer segment (B on a tie),
 * from its front or back with probability 1/2 each, until the pair fits max_tokens. */
static void truncate_pair(segment *a, segment *b, int64_t max_tokens, sample_rng *r)
{
    while ((a->hi - a->lo) + (b->hi - b->lo) > max_tokens) {
        segment *t = (a->hi - a->lo) > (b->hi - b->lo) ? a : b;
        if (rng_unit(r) < 0.5) t->lo++;
        else t->hi--;
    }
}

/* Megatron's create_masked_lm_predictions with whole words and n-gram spans: the candidates
 * (every token but [CLS]/[SEP]) grouped into words, a "##" piece joining the previous word; spans
 * of up to BERTDS_MAX_NGRAMS words starting at the words in a random order, taken while the count
 * stays within num_to_predict; each chosen token becomes [MASK] (80%), stays (10%) or becomes a
 * random id (10%); labels = originals. */
static void mask_tokens(const bertds *ds, gptds_split s, int64_t idx, int32_t *tok, int32_t *labels, int n,
                        int64_t target)
{
    int *cand = td_xmalloc((size_t)n * sizeof *cand);  /* positions of candidate tokens, in order */
    int *wbeg = td_xmalloc((size_t)n * sizeof *wbeg);  /* word w is cand[wbeg[w] .. wbeg[w+1]) */
    int nc = 0, nw = 0;
    for (int i = 0; i < n; i++) {
        int32_t t = tok[i];
        if (t == ds->cls_id || t == ds->sep_id) continue;
        if (!(ds->subword && ds->subword[t] && nw > 0)) wbeg[nw++] = nc;
        cand[nc++] = i;
    }
    double limit = ds->masked_lm_prob * (double)target; /* Megatron's max_predictions_per_seq */
    double by_len = fmax(1.0, nearbyint((double)n * ds->masked_lm_prob));
    if (by_len < limit) limit = by_len;
    if (ds->masked_lm_prob == 0) limit = 0;

    sample_rng r = rng_for(ds->seed, RNG_MASK, s, (uint64_t)idx);
    int *order = td_xmalloc((size_t)(nw > 0 ? nw : 1) * sizeof *order);
    for (int w = 0; w < nw; w++) order[w] = w;
    for (int i = nw - 1; i > 0; i--) {
        int j = (int)rng_below(&r, (uint64_t)i + 1);
        int t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    /* Megatron's n-gram spans: from each word (in shuffled order) a span of n whole words, n in
     * 1..3 with probabilities 6/11, 3/11, 2/11 (1/n normalised), cut to the words left and
     * shortened while it would pass the limit; a span touching a masked token is skipped */
    static const double CUM[BERTDS_MAX_NGRAMS] = {6.0 / 11, 9.0 / 11, 1.0};
    char *covered = td_xcalloc((size_t)(n > 0 ? n : 1), 1);
    int count = 0;
    for (int k = 0; k < nw && (double)count < limit; k++) {
        int w = order[k], span = 1;
        double u = rng_unit(&r);
        while (span < BERTDS_MAX_NGRAMS && u >= CUM[span - 1]) span++;
        if (span > nw - w) span = nw - w;
        int a = wbeg[w], b = w + span < nw ? wbeg[w + span] : nc;
        while ((double)(count + b - a) > limit && span > 1) {
            span--;
            b = w + span < nw ? wbeg[w + span] : nc;
        }
        if ((double)(count + b - a) > limit) continue;
        int taken = 0;
        for (int c = a; c < b; c++) taken |= covered[cand[c]];
        if (taken) continue;
        for (int c = a; c < b; c++) {
            int p = cand[c];
            covered[p] = 1;
            labels[p] = tok[p];
            if (rng_unit(&r) < 0.8) tok[p] = ds->mask_id;
            else if (rng_unit(&r) >= 0.5) tok[p] = (int32_t)rng_below(&r, (uint64_t)ds->vocab_size);
        }
        count += b - a;
    }
    free(covered);
    free(order);
    free(wbeg);
    free(cand);
}

void bertds_get(const bertds *ds, gptds_split s, int64_t idx, bertds_sample *out)
{
    TD_ASSERT((unsigned)s < GPTDS_NSPLITS);
    const split_state *st = &ds->split[s];
    int64_t ns = st->info.num_samples;
    if (idx < 0 || idx >= ns) {
        if (ns == 0)
            td_fatal(1, "BERT sample %" PRId64 " of the %s split was asked for, but the split is empty (weight 0 in "
                     "--split, or no document of enough sentences); the caller must skip an empty split",
                     idx, gptds_split_name(s));
        td_fatal(1, "BERT sample %" PRId64 " of the %s split is past its end (%" PRId64 " samples were built); "
                 "reading past the end is a bug in the caller", idx, gptds_split_name(s), ns);
    }
    const int64_t *row = st->info.mapping + 3 * idx;
    int64_t first = row[0], last = row[1], target = row[2], nsent = last - first;

    /* the sentences, back to back; bound[k] = offset of sentence k */
    int64_t *bound = td_xmalloc((size_t)(nsent + 1) * sizeof *bound);
    bound[0] = 0;
    for (int64_t k = 0; k < nsent; k++) bound[k + 1] = bound[k] + ds->lens[first + k];
    int32_t *buf = td_xmalloc((size_t)(bound[nsent] > 0 ? bound[nsent] : 1) * sizeof *buf);
    for (int64_t k = 0; k < nsent; k++) dsr_read(ds->reader, first + k, 0, ds->lens[first + k], buf + bound[k]);

    /* segments A and B (Megatron's get_a_and_b_segments), then truncation */
    sample_rng r = rng_for(ds->seed, RNG_SEGMENTS, s, (uint64_t)idx);
    segment a = {0, bound[nsent]}, b = {bound[nsent], bound[nsent]};
    out->is_random = 0;
    if (ds->binary_head) {
        TD_CHECK(nsent >= 2, "delete the samples mapping cache and rerun", "BERT sample %" PRId64 " of the %s split "
                 "has %" PRId64 " sentence(s); the binary head needs two", idx, gptds_split_name(s), nsent);
        int64_t a_end = 1;
        if (nsent >= 3) a_end = 1 + (int64_t)rng_below(&r, (uint64_t)nsent - 1);
        a.hi = b.lo = bound[a_end];
        if (rng_unit(&r) < 0.5) {
            segment t = a;
            a = b;
            b = t;
            out->is_random = 1;
        }
    }
    truncate_pair(&a, &b, target, &r);

    /* [CLS] A [SEP] B [SEP] */
    int32_t *tok = out->tokens, *ty = out->types;
    int n = 0;
    tok[n] = ds->cls_id;
    ty[n++] = 0;
    for (int64_t i = a.lo; i < a.hi; i++, n++) {
        tok[n] = buf[i];
        ty[n] = 0;
    }
    tok[n] = ds->sep_id;
    ty[n++] = 0;
    if (b.hi > b.lo) {
        for (int64_t i = b.lo; i < b.hi; i++, n++) {
            tok[n] = buf[i];
            ty[n] = 1;
        }
        tok[n] = ds->sep_id;
        ty[n++] = 1;
    }
    TD_ASSERT(n <= ds->seq_length);
    for (int i = 0; i < ds->seq_length; i++) out->labels[i] = -1;
    mask_tokens(ds, s, idx, tok, out->labels, n, target);
    out->length = n;
    for (int i = n; i < ds->seq_length; i++) {
        tok[i] = ds->pad_id;
        ty[i] = 0;
    }
    free(buf);
    free(bound);
}

void bertds_micro_batch(const bertds *ds, gptds_split s, int64_t consumed, int m, int b, int dp, int d,
                        bertds_sample *rows)
{
    TD_CHECK(consumed >= 0 && m >= 0 && b >= 1 && dp >= 1 && d >= 0 && d < dp, "this is a bug in the caller",
             "bad micro-batch request: consumed %" PRId64 ", m %d, b %d, dp %d, d %d", consumed, m, b, dp, d);
    int64_t first = consumed + (int64_t)m * b * dp + (int64_t)d * b;
    for (int j = 0; j < b; j++) bertds_get(ds, s, first + j, &rows[j]);
}

/* ---- the vocabulary's special tokens ---- */

int bertds_vocab_get(const tok_tokenizer *t, bertds_vocab *out, char *msg, size_t msglen)
{
    const wp_tokenizer *wp = tok_wordpiece(t);
    if (!wp) {
        snprintf(msg, msglen, "BERT needs a WordPiece tokenizer (--tokenizer-type BertWordPieceLowerCase or "
                              "BertWordPieceCase with --vocab-file vocab.txt), not %s", tok_kind(t));
        return -1;
    }
    static const char *const names[4] = {"[CLS]", "[SEP]", "[MASK]", "[PAD]"};
    int32_t *ids[4] = {&out->cls, &out->sep, &out->mask, &out->pad};
    for (int i = 0; i < 4; i++)
        if ((*ids[i] = wp_token_id(wp, names[i])) < 0) {
            snprintf(msg, msglen, "the WordPiece vocabulary has no %s token, which BERT needs; use a BERT vocab.txt",
                     names[i]);
            return -1;
        }
    int n = wp_vocab_size(wp);
    out->subword = td_xcalloc((size_t)n, 1);
    for (int i = 0; i < n; i++) {
        const char *s = wp_token(wp, i);
        out->subword[i] = s && strncmp(s, "##", 2) == 0 && s[2];
    }
    return 0;
}
