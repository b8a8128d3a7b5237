/* src/data/bert_dataset.c: the samples mapping against the documents it comes from (a partition
 * of the eligible documents' sentences per epoch), sample structure, segments reconstructed from
 * the dataset's own sentences, masking statistics and whole words, determinism (also across a
 * reopen from cache and per micro-batch layout), and the cache file (atomic, rebuilt when
 * corrupt). The synthetic dataset is generated here, independently of the code under test. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <omp.h>

#include "trident/bert_dataset.h"
#include "trident/check.h"
#include "trident/indexed.h"

enum { VOCAB = 1000, PAD = 0, CLS = 1, SEP = 2, MASK = 3, SUBWORD_FROM = 600, NDOCS = 300, LONG_DOC_EVERY = 37 };

static char g_dir[512];
static char g_prefix[600];
static uint8_t g_subword[VOCAB];

/* The dataset as written: sentence lengths and tokens back to back, document boundaries. */
static int32_t *g_tok;     /* all tokens */
static int64_t *g_sent_at; /* (nsent + 1) token offset of each sentence */
static int64_t *g_doc_at;  /* (NDOCS + 1) first sentence of each document */
static int64_t g_nsent;

static uint64_t g_lcg = 12345;
static uint32_t lcg(void)
{
    g_lcg = g_lcg * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(g_lcg >> 33);
}

/* Documents of 1..12 sentences of 3..20 tokens in [10, VOCAB); about a third of the tokens are
 * "##" pieces (ids >= SUBWORD_FROM). Every LONG_DOC_EVERY-th document holds a sentence of 600
 * tokens (over Megatron's 512), which excludes it. */
static void make_dataset(void)
{
    char err[512];
    idx_writer *w = idx_writer_open(g_prefix, IDX_U16, err, sizeof err);
    if (!w) fail_msg("%s", err);
    size_t cap_tok = 1 << 20, cap_sent = 1 << 14;
    g_tok = malloc(cap_tok * sizeof *g_tok);
    g_sent_at = malloc(cap_sent * sizeof *g_sent_at);
    g_doc_at = malloc((NDOCS + 1) * sizeof *g_doc_at);
    int64_t ntok = 0;
    g_nsent = 0;
    g_sent_at[0] = 0;
    for (int d = 0; d < NDOCS; d++) {
        g_doc_at[d] = g_nsent;
        int ns = 1 + (int)(lcg() % 12);
        for (int k = 0; k < ns; k++) {
            int len = (d % LONG_DOC_EVERY == 5 && k == ns / 2) ? 600 : 3 + (int)(lcg() % 18);
            int32_t *s = g_tok + ntok;
            for (int i = 0; i < len; i++)
                s[i] = lcg() % 3 == 0 ? SUBWORD_FROM + (int32_t)(lcg() % (VOCAB - SUBWORD_FROM))
                                      : 10 + (int32_t)(lcg() % (SUBWORD_FROM - 10));
            if (idx_writer_add_sequence(w, s, (size_t)len, err, sizeof err) != 0) fail_msg("%s", err);
            ntok += len;
            g_sent_at[++g_nsent] = ntok;
            assert_true((size_t)ntok + 600 < cap_tok && (size_t)g_nsent + 1 < cap_sent);
        }
        idx_writer_end_document(w);
    }
    g_doc_at[NDOCS] = g_nsent;
    if (idx_writer_finish(w, err, sizeof err) != 0) fail_msg("%s", err);
    for (int i = 0; i < VOCAB; i++) g_subword[i] = i >= SUBWORD_FROM;
}

static int setup(void **state)
{
    (void)state;
    snprintf(g_dir, sizeof g_dir, "%s/bert_dataset-%ld", TD_TEST_TMP, (long)getpid());
    mkdir(TD_TEST_TMP, 0755);
    mkdir(g_dir, 0755);
    snprintf(g_prefix, sizeof g_prefix, "%s/sent", g_dir);
    td_log_set_level(0);
    /* one OpenMP thread (the token id scan): a child forked to test an exit would otherwise
     * inherit a thread pool whose threads it does not have, and hang in its first scan */
    omp_set_num_threads(1);
    make_dataset();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    free(g_tok);
    free(g_sent_at);
    free(g_doc_at);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static bertds_config config(int S, uint64_t seed, int64_t train, int binary_head, const char *cache_dir)
{
    bertds_config c;
    memset(&c, 0, sizeof c);
    c.path = g_prefix;
    c.split = "90,8,2";
    c.cache_dir = cache_dir;
    c.seq_length = S;
    c.seed = seed;
    c.num_samples[0] = train;
    c.num_samples[1] = -1;
    c.num_samples[2] = -1;
    c.short_seq_prob = 0.1;
    c.masked_lm_prob = 0.15;
    c.binary_head = binary_head;
    c.vocab_size = VOCAB;
    c.cls_id = CLS;
    c.sep_id = SEP;
    c.mask_id = MASK;
    c.pad_id = PAD;
    c.subword = g_subword;
    return c;
}

typedef struct {
    int32_t *buf;
    bertds_sample s;
} sample_buf;

static sample_buf sample_new(int S)
{
    sample_buf b;
    b.buf = calloc(3 * (size_t)S, sizeof *b.buf);
    b.s = (bertds_sample){.tokens = b.buf, .types = b.buf + S, .labels = b.buf + 2 * S};
    return b;
}

static int samples_equal(const bertds_sample *x, const bertds_sample *y, int S)
{
    return x->length == y->length && x->is_random == y->is_random &&
           memcmp(x->tokens, y->tokens, (size_t)S * 4) == 0 && memcmp(x->types, y->types, (size_t)S * 4) == 0 &&
           memcmp(x->labels, y->labels, (size_t)S * 4) == 0;
}

static int doc_of_sentence(int64_t k)
{
    int d = 0;
    while (g_doc_at[d + 1] <= k) d++;
    return d;
}

static int doc_has_long_sentence(int d)
{
    for (int64_t k = g_doc_at[d]; k < g_doc_at[d + 1]; k++)
        if (g_sent_at[k + 1] - g_sent_at[k] > 512) return 1;
    return 0;
}

/* Whether orig[0..n) occurs in the tokens of sentences [k0, k1). */
static int occurs_in(const int32_t *orig, int n, int64_t k0, int64_t k1)
{
    const int32_t *h = g_tok + g_sent_at[k0];
    int64_t hn = g_sent_at[k1] - g_sent_at[k0];
    for (int64_t at = 0; at + n <= hn; at++)
        if (memcmp(h + at, orig, (size_t)n * 4) == 0) return 1;
    return 0;
}

/* ---- the samples mapping ----------------------------------------------------------------- */

/* One epoch: the rows partition the sentences of every eligible document of the split (>= 2
 * sentences with the binary head, >= 1 without; none over 512 tokens), each row inside one
 * document, target lengths in [2, S-3]. */
static void check_one_epoch(int binary_head)
{
    const int S = 64;
    bertds_config c = config(S, 7, -1, binary_head, NULL);
    c.no_cache = 1;
    bertds *ds = bertds_open(&c);
    for (int s = 0; s < GPTDS_NSPLITS; s++) {
        bertds_split_info in = bertds_info(ds, (gptds_split)s);
        assert_int_equal(in.num_epochs, 1);
        assert_int_equal(in.num_samples, bertds_num_samples(ds, (gptds_split)s));
        int64_t s0 = g_doc_at[in.doc_begin], s1 = g_doc_at[in.doc_end];
        int *cover = calloc((size_t)(s1 - s0 + 1), sizeof *cover);
        for (int64_t r = 0; r < in.num_samples; r++) {
            const int64_t *row = in.mapping + 3 * r;
            assert_true(row[0] >= s0 && row[1] <= s1 && row[0] < row[1]);
            assert_int_equal(doc_of_sentence(row[0]), doc_of_sentence(row[1] - 1));
            if (binary_head) assert_true(row[1] - row[0] >= 2);
            assert_true(row[2] >= 2 && row[2] <= S - 3);
            for (int64_t k = row[0]; k < row[1]; k++) cover[k - s0]++;
        }
        for (int64_t d = in.doc_begin; d < in.doc_end; d++) {
            int64_t ns = g_doc_at[d + 1] - g_doc_at[d];
            int eligible = ns >= (binary_head ? 2 : 1) && !(ns > 1 && doc_has_long_sentence((int)d));
            for (int64_t k = g_doc_at[d]; k < g_doc_at[d + 1]; k++)
                if (cover[k - s0] != eligible) fail_msg("split %d, document %lld, sentence %lld covered %d times, "
                                                        "expected %d", s, (long long)d, (long long)k, cover[k - s0],
                                                        eligible);
        }
        free(cover);
    }
    bertds_close(ds);
}

static void mapping_partitions_one_epoch(void **state)
{
    (void)state;
    check_one_epoch(1);
    check_one_epoch(0);
}

/* Asking for more samples than an epoch holds takes more epochs; the rows are shuffled (not in
 * document order); a sample's target is short with probability about short_seq_prob. */
static void mapping_epochs_shuffle_and_short_targets(void **state)
{
    (void)state;
    const int S = 64;
    bertds_config c = config(S, 7, 3000, 1, NULL);
    c.no_cache = 1;
    bertds *ds = bertds_open(&c);
    bertds_split_info in = bertds_info(ds, GPTDS_TRAIN);
    assert_true(in.num_samples >= 3000);
    assert_true(in.num_epochs > 1);
    int64_t sorted = 0, shorter = 0;
    for (int64_t r = 0; r < in.num_samples; r++) {
        if (r && in.mapping[3 * r] > in.mapping[3 * (r - 1)]) sorted++;
        if (in.mapping[3 * r + 2] < S - 3) shorter++;
    }
    assert_true(sorted < in.num_samples * 6 / 10); /* about half rise in a random order */
    /* a short target is uniform in [2, S-3]: below S-3 with probability 0.1 * (S-5)/(S-4) */
    double want = 0.1 * (S - 5.0) / (S - 4.0), got = (double)shorter / (double)in.num_samples;
    if (fabs(got - want) > 0.03) fail_msg("short targets %.4f, expected %.4f", got, want);
    bertds_close(ds);
}

/* ---- samples ----------------------------------------------------------------------------- */

/* The structure of a sample with the binary head, and its segments traced back to the
 * sentences of its mapping row: A and B (originals restored from the labels) each lie in one
 * side of a sentence boundary of that row, in order unless swapped. */
static void check_structure_and_segments(const bertds *ds, gptds_split sp, int64_t idx, const bertds_sample *x, int S)
{
    assert_true(x->length >= 5 && x->length <= S);
    assert_int_equal(x->tokens[0], CLS);
    assert_int_equal(x->types[0], 0);
    assert_int_equal(x->labels[0], -1);
    int sep_a = 0;
    while (sep_a + 1 < x->length && x->types[sep_a + 1] == 0) sep_a++;
    assert_true(sep_a >= 2 && sep_a <= x->length - 3); /* A and B are not empty */
    int seps = 0;
    for (int i = 0; i < x->length; i++)
        if (x->tokens[i] == SEP && x->labels[i] == -1) seps++;
    assert_int_equal(seps, 2);
    assert_int_equal(x->tokens[sep_a], SEP);
    assert_int_equal(x->labels[sep_a], -1);
    assert_int_equal(x->tokens[x->length - 1], SEP);
    assert_int_equal(x->labels[x->length - 1], -1);
    for (int i = sep_a + 1; i < x->length; i++) assert_int_equal(x->types[i], 1);
    for (int i = x->length; i < S; i++) {
        assert_int_equal(x->tokens[i], PAD);
        assert_int_equal(x->types[i], 0);
        assert_int_equal(x->labels[i], -1);
    }
    int32_t orig[512];
    for (int i = 0; i < x->length; i++) orig[i] = x->labels[i] >= 0 ? x->labels[i] : x->tokens[i];
    const int32_t *a = orig + 1, *b = orig + sep_a + 1;
    int na = sep_a - 1, nb = x->length - sep_a - 2;
    const int64_t *row = bertds_info(ds, sp).mapping + 3 * idx;
    assert_true(na + nb <= row[2]);
    int found = 0;
    for (int64_t k = row[0] + 1; k < row[1] && !found; k++) {
        if (!x->is_random) found = occurs_in(a, na, row[0], k) && occurs_in(b, nb, k, row[1]);
        else found = occurs_in(b, nb, row[0], k) && occurs_in(a, na, k, row[1]);
    }
    if (!found) fail_msg("sample %lld: segments are not runs of its sentences [%lld, %lld) (swapped %d)",
                         (long long)idx, (long long)row[0], (long long)row[1], x->is_random);
}

static void samples_have_bert_structure(void **state)
{
    (void)state;
    const int S = 64;
    bertds_config c = config(S, 11, 400, 1, NULL);
    c.no_cache = 1;
    bertds *ds = bertds_open(&c);
    sample_buf b = sample_new(S);
    for (int s = 0; s < GPTDS_NSPLITS; s++)
        for (int64_t i = 0; i < bertds_num_samples(ds, (gptds_split)s) && i < 400; i++) {
            bertds_get(ds, (gptds_split)s, i, &b.s);
            check_structure_and_segments(ds, (gptds_split)s, i, &b.s, S);
        }
    free(b.buf);
    bertds_close(ds);

    /* without the binary head: [CLS] A [SEP], types 0, never swapped, A a run of its sentences */
    c.binary_head = 0;
    ds = bertds_open(&c);
    b = sample_new(S);
    bertds_split_info in = bertds_info(ds, GPTDS_TRAIN);
    for (int64_t i = 0; i < 400; i++) {
        bertds_get(ds, GPTDS_TRAIN, i, &b.s);
        const bertds_sample *x = &b.s;
        assert_true(x->length >= 3 && x->length <= S - 1);
        assert_int_equal(x->is_random, 0);
        assert_int_equal(x->tokens[0], CLS);
        assert_int_equal(x->tokens[x->length - 1], SEP);
        for (int j = 0; j < S; j++) assert_int_equal(x->types[j], 0);
        int32_t orig[512];
        for (int j = 1; j < x->length - 1; j++) orig[j - 1] = x->labels[j] >= 0 ? x->labels[j] : x->tokens[j];
        const int64_t *row = in.mapping + 3 * i;
        assert_true(occurs_in(orig, x->length - 2, row[0], row[1]));
    }
    free(b.buf);
    bertds_close(ds);
}

/* Python's round(): to the nearest integer, halves to the even one. */
static double round_half_even(double x)
{
    double r = floor(x + 0.5);
    if (r - x == 0.5 && fmod(r, 2.0) != 0.0) r -= 1.0;
    return r;
}

/* Megatron's count of predictions (masked_dataset.py, _create_masked_lm_predictions):
 * n_maskings = min(masking_probability * target_sequence_length,
 *                  max(1, int(round(len(token_ids) * masking_probability)))),
 * token_ids the whole sample ([CLS] and [SEP]s too). Spans are taken while the count stays at
 * most n_maskings (a span shrinks to one word; a word too long, or a span touching a masked
 * token, is skipped for the next of the shuffled words), so the count is n_maskings' floor
 * unless the words run out first — Megatron asserts only <=; in these samples they never do. */
static int megatron_num_to_predict(double p, int64_t target, int length)
{
    double by_len = round_half_even((double)length * p);
    return (int)floor(fmin(p * (double)target, by_len > 1 ? by_len : 1));
}

/* Over a few thousand samples: swaps ~1/2; every sample's count of masked tokens exactly
 * Megatron's (so ~15% of the text tokens); of the masked
 * positions ~80% [MASK], ~10% kept, ~10% random; and whole words: the pieces of one word (a word
 * start and the "##" pieces after it, across [SEP] as Megatron groups them) are masked together. */
static void masking_statistics_and_whole_words(void **state)
{
    (void)state;
    const int S = 128;
    bertds_config c = config(S, 3, 3000, 1, NULL);
    c.no_cache = 1;
    bertds *ds = bertds_open(&c);
    sample_buf b = sample_new(S);
    int64_t n = 3000, swapped = 0, text = 0, masked = 0, as_mask = 0, kept = 0, other = 0;
    int64_t masked_words = 0, runs = 0; /* masked words, and runs of consecutive masked words */
    const int64_t *mapping = bertds_info(ds, GPTDS_TRAIN).mapping;
    for (int64_t i = 0; i < n; i++) {
        bertds_get(ds, GPTDS_TRAIN, i, &b.s);
        const bertds_sample *x = &b.s;
        /* exactly Megatron's number of predictions in every sample */
        int want = megatron_num_to_predict(c.masked_lm_prob, mapping[3 * i + 2], x->length), got = 0;
        for (int j = 0; j < S; j++) got += x->labels[j] >= 0;
        if (got != want)
            fail_msg("sample %lld (%d tokens, target length %lld): %d predictions, Megatron's n_maskings gives %d",
                     (long long)i, x->length, (long long)mapping[3 * i + 2], got, want);
        swapped += x->is_random;
        int sep_a = 0;
        while (x->types[sep_a + 1] == 0) sep_a++;
        int word_masked = -1, prev_word_masked = 0; /* of the current word: -1 none yet, else 0/1 */
        for (int j = 1; j < x->length - 1; j++) {
            if (j == sep_a) continue;
            text++;
            int32_t o = x->labels[j] >= 0 ? x->labels[j] : x->tokens[j];
            int m = x->labels[j] >= 0;
            if (o < SUBWORD_FROM || word_masked < 0) {
                if (word_masked >= 0) prev_word_masked = word_masked;
                word_masked = m;
                masked_words += m;
                runs += m && !prev_word_masked;
            }
            else if (m != word_masked) fail_msg("sample %lld position %d: a \"##\" piece masked %d, its word %d",
                                                (long long)i, j, m, word_masked);
            if (!m) continue;
            masked++;
            if (x->tokens[j] == MASK) as_mask++;
            else if (x->tokens[j] == x->labels[j]) kept++;
            else other++;
            assert_true(x->tokens[j] >= 0 && x->tokens[j] < VOCAB);
        }
        for (int j = 0; j < S; j++)
            if (x->labels[j] >= 0) assert_true(j > 0 && j < x->length - 1 && j != sep_a);
    }
    double f_swap = (double)swapped / (double)n, f_mask = (double)masked / (double)text;
    double f_as = (double)as_mask / (double)masked, f_kept = (double)kept / (double)masked;
    double f_other = (double)other / (double)masked;
    if (fabs(f_swap - 0.5) > 0.03) fail_msg("swapped %.4f", f_swap);
    if (fabs(f_mask - 0.15) > 0.02) fail_msg("masked %.4f of text tokens", f_mask);
    if (fabs(f_as - 0.8) > 0.03 || fabs(f_kept - 0.1) > 0.03 || fabs(f_other - 0.1) > 0.03)
        fail_msg("masked positions: [MASK] %.4f, kept %.4f, random %.4f", f_as, f_kept, f_other);
    /* n-gram spans: 1, 2 or 3 words (6/11, 3/11, 2/11), so runs of masked words average well over
     * the 1.2 words that single words at this density would give */
    double run = (double)masked_words / (double)runs;
    printf("  %lld samples: swapped %.3f, masked %.3f of text tokens ([MASK] %.3f, kept %.3f, random %.3f), "
           "%.2f words a masked run\n", (long long)n, f_swap, f_mask, f_as, f_kept, f_other, run);
    if (run < 1.4) fail_msg("masked runs average %.2f words: no n-gram spans", run);
    free(b.buf);
    bertds_close(ds);
}

/* ---- determinism, micro-batches, cache --------------------------------------------------- */

static int count_files_with(const char *dir, const char *s)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (strstr(e->d_name, s)) n++;
    closedir(d);
    return n;
}

static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)sz + 1);
    assert_int_equal(fread(buf, 1, (size_t)sz, f), (size_t)sz);
    fclose(f);
    *n = (size_t)sz;
    return buf;
}

static void spit(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (n) assert_int_equal(fwrite(p, 1, n, f), n);
    fclose(f);
}

/* Warnings expected by a test go to /dev/null. */
static int g_saved_stderr = -1;
static void quiet_stderr(void)
{
    fflush(stderr);
    g_saved_stderr = dup(2);
    FILE *null = fopen("/dev/null", "w");
    assert_non_null(null);
    dup2(fileno(null), 2);
    fclose(null);
}
static void restore_stderr(void)
{
    fflush(stderr);
    dup2(g_saved_stderr, 2);
    close(g_saved_stderr);
}

static void assert_same_samples(const bertds *x, const bertds *y, int S, int64_t n)
{
    sample_buf a = sample_new(S), b = sample_new(S);
    for (gptds_split s = GPTDS_TRAIN; s <= GPTDS_TEST; s++) {
        assert_int_equal(bertds_num_samples(x, s), bertds_num_samples(y, s));
        for (int64_t i = 0; i < bertds_num_samples(x, s) && i < n; i++) {
            bertds_get(x, s, i, &a.s);
            bertds_get(y, s, i, &b.s);
            if (!samples_equal(&a.s, &b.s, S)) fail_msg("split %d sample %lld differs", (int)s, (long long)i);
        }
    }
    free(a.buf);
    free(b.buf);
}

static void determinism_cache_and_seed(void **state)
{
    (void)state;
    const int S = 48;
    char cache[600];
    snprintf(cache, sizeof cache, "%s/cache-det", g_dir);
    bertds_config c = config(S, 1234, 700, 1, cache);
    bertds *x = bertds_open(&c);
    for (int s = 0; s < GPTDS_NSPLITS; s++) {
        bertds_split_info in = bertds_info(x, (gptds_split)s);
        assert_int_equal(in.cache_loaded, 0);
        assert_non_null(in.cache_file);
        assert_non_null(strstr(in.cache_file, cache));
    }
    assert_int_equal(count_files_with(cache, ".tmp."), 0);
    assert_int_equal(count_files_with(cache, ".bert."), 3);
    /* the same sample twice */
    sample_buf a = sample_new(S), b = sample_new(S);
    bertds_get(x, GPTDS_TRAIN, 17, &a.s);
    bertds_get(x, GPTDS_TRAIN, 17, &b.s);
    assert_true(samples_equal(&a.s, &b.s, S));
    /* reopened: every mapping from the cache, every sample equal */
    bertds *y = bertds_open(&c);
    for (int s = 0; s < GPTDS_NSPLITS; s++) assert_int_equal(bertds_info(y, (gptds_split)s).cache_loaded, 1);
    assert_same_samples(x, y, S, 300);
    bertds_close(y);
    /* without a cache: the same */
    c.no_cache = 1;
    y = bertds_open(&c);
    assert_null(bertds_info(y, GPTDS_TRAIN).cache_file);
    assert_same_samples(x, y, S, 300);
    bertds_close(y);
    /* another seed: other samples */
    c.no_cache = 0;
    c.seed = 1235;
    y = bertds_open(&c);
    assert_int_equal(bertds_info(y, GPTDS_TRAIN).cache_loaded, 0);
    int differ = 0;
    for (int64_t i = 0; i < 20; i++) {
        bertds_get(x, GPTDS_TRAIN, i, &a.s);
        bertds_get(y, GPTDS_TRAIN, i, &b.s);
        differ += !samples_equal(&a.s, &b.s, S);
    }
    assert_true(differ >= 15);
    bertds_close(y);
    /* any input of the mapping changes the cache key */
    c.seed = 1234;
    c.short_seq_prob = 0.2;
    y = bertds_open(&c);
    assert_int_equal(bertds_info(y, GPTDS_TRAIN).cache_loaded, 0);
    bertds_close(y);
    c.short_seq_prob = 0.1;
    c.seq_length = S + 1;
    y = bertds_open(&c);
    assert_int_equal(bertds_info(y, GPTDS_TRAIN).cache_loaded, 0);
    bertds_close(y);
    free(a.buf);
    free(b.buf);
    bertds_close(x);
}

static void corrupt_cache_is_rebuilt(void **state)
{
    (void)state;
    const int S = 48;
    char cache[600];
    snprintf(cache, sizeof cache, "%s/cache-corrupt", g_dir);
    bertds_config c = config(S, 99, 500, 1, cache);
    bertds *x = bertds_open(&c);
    char file[1024];
    snprintf(file, sizeof file, "%s", bertds_info(x, GPTDS_TRAIN).cache_file);
    size_t n;
    unsigned char *good = slurp(file, &n);
    assert_true(n > 200);
    unsigned char *bad = malloc(n);
    const size_t cuts[3] = {n - 5, n / 2, 20}; /* a flipped byte in the rows, in the middle, in the header */
    for (int k = 0; k < 3; k++) {
        memcpy(bad, good, n);
        bad[cuts[k]] ^= 0x40;
        spit(file, bad, n);
        quiet_stderr();
        bertds *y = bertds_open(&c);
        restore_stderr();
        assert_int_equal(bertds_info(y, GPTDS_TRAIN).cache_loaded, 0);
        assert_same_samples(x, y, S, 200);
        bertds_close(y);
        size_t m;
        unsigned char *again = slurp(file, &m);
        assert_int_equal(m, n);
        assert_memory_equal(again, good, n);
        free(again);
    }
    /* truncated, and empty */
    for (int k = 0; k < 2; k++) {
        spit(file, good, k ? 0 : n - 24);
        quiet_stderr();
        bertds *y = bertds_open(&c);
        restore_stderr();
        assert_int_equal(bertds_info(y, GPTDS_TRAIN).cache_loaded, 0);
        assert_same_samples(x, y, S, 50);
        bertds_close(y);
    }
    bertds *y = bertds_open(&c);
    assert_int_equal(bertds_info(y, GPTDS_TRAIN).cache_loaded, 1);
    bertds_close(y);
    assert_int_equal(count_files_with(cache, ".tmp."), 0);
    free(bad);
    free(good);
    bertds_close(x);
}

/* Row j of micro-batch m of rank d is sample consumed + m*b*dp + d*b + j, for every layout. */
static void micro_batch_order(void **state)
{
    (void)state;
    const int S = 40;
    bertds_config c = config(S, 5, 300, 1, NULL);
    c.no_cache = 1;
    bertds *ds = bertds_open(&c);
    const int layouts[3][2] = {{1, 1}, {2, 3}, {4, 2}}; /* (b, dp) */
    sample_buf one = sample_new(S);
    for (int l = 0; l < 3; l++) {
        int b = layouts[l][0], dp = layouts[l][1];
        sample_buf *rows = calloc((size_t)b, sizeof *rows);
        bertds_sample *rs = calloc((size_t)b, sizeof *rs);
        for (int j = 0; j < b; j++) {
            rows[j] = sample_new(S);
            rs[j] = rows[j].s;
        }
        int64_t consumed = 24;
        for (int m = 0; m < 2; m++)
            for (int d = 0; d < dp; d++) {
                bertds_micro_batch(ds, GPTDS_TRAIN, consumed, m, b, dp, d, rs);
                for (int j = 0; j < b; j++) {
                    bertds_get(ds, GPTDS_TRAIN, consumed + (int64_t)m * b * dp + (int64_t)d * b + j, &one.s);
                    assert_true(samples_equal(&rs[j], &one.s, S));
                }
            }
        for (int j = 0; j < b; j++) free(rows[j].buf);
        free(rows);
        free(rs);
    }
    free(one.buf);
    bertds_close(ds);
}

static int exit_code_of_child(const bertds_config *c, int64_t read_idx)
{
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stderr)) _exit(99);
        bertds *ds = bertds_open(c);
        if (read_idx >= 0) {
            sample_buf b = sample_new(c->seq_length);
            bertds_get(ds, GPTDS_TRAIN, read_idx, &b.s);
            free(b.buf);
        }
        bertds_close(ds);
        _exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void bad_configs_and_reads_fail_loudly(void **state)
{
    (void)state;
    bertds_config c = config(48, 5, 100, 1, NULL);
    c.no_cache = 1;
    bertds *ds = bertds_open(&c);
    int64_t n = bertds_num_samples(ds, GPTDS_TRAIN);
    bertds_close(ds);
    assert_int_equal(exit_code_of_child(&c, n - 1), 0);
    assert_int_equal(exit_code_of_child(&c, n), 1);
    bertds_config bad = c;
    bad.seq_length = 4;
    assert_int_equal(exit_code_of_child(&bad, -1), 2);
    bad = c;
    bad.mask_id = VOCAB;
    assert_int_equal(exit_code_of_child(&bad, -1), 2);
    bad = c;
    bad.vocab_size = 500; /* the data holds larger ids */
    bad.subword = NULL;
    assert_int_equal(exit_code_of_child(&bad, -1), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(mapping_partitions_one_epoch),
        cmocka_unit_test(mapping_epochs_shuffle_and_short_targets),
        cmocka_unit_test(samples_have_bert_structure),
        cmocka_unit_test(masking_statistics_and_whole_words),
        cmocka_unit_test(determinism_cache_and_seed),
        cmocka_unit_test(corrupt_cache_is_rebuilt),
        cmocka_unit_test(micro_batch_order),
        cmocka_unit_test(bad_configs_and_reads_fail_loudly),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
