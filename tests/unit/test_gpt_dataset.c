/* src/data/gpt_dataset.c: splits against Megatron's formula worked by hand, indices against
 * independent recomputations in this file (epochs, separate final epoch, token coverage, the
 * greedy blend rule), determinism, the cache (reuse, corruption), and micro-batch layouts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <glob.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "trident/check.h"
#include "trident/gpt_dataset.h"
#include "trident/indexed.h"

static char g_dir[512];

/* Document d of a test dataset: its length, and token p of it (unique across the dataset). */
static int32_t doc_len(int d, int maxlen) { return d % 50 == 17 ? 0 : 1 + (int32_t)((d * 7919) % maxlen); }
static int32_t doc_token(int d, int p) { return d * 1000 + p; }

static void make_dataset(const char *prefix, int ndocs, int maxlen)
{
    char err[512];
    idx_writer *w = idx_writer_open(prefix, IDX_I32, err, sizeof err);
    if (!w) fail_msg("%s", err);
    int32_t buf[1000];
    for (int d = 0; d < ndocs; d++) {
        int32_t n = doc_len(d, maxlen);
        for (int p = 0; p < n; p++) buf[p] = doc_token(d, p);
        if (idx_writer_add(w, buf, (size_t)n, err, sizeof err) != 0) fail_msg("%s", err);
    }
    if (idx_writer_finish(w, err, sizeof err) != 0) fail_msg("%s", err);
}

static char *path_in(const char *name)
{
    static char p[4][600];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", g_dir, name);
    return p[k];
}

/* A config for one dataset (prefix) or a blend (n > 1 with weights). */
static gptds_config config(int n, const char *const *prefixes, const double *weights, const char *split, int S,
                           uint64_t seed, int64_t tr, int64_t va, int64_t te, int no_cache)
{
    gptds_config c;
    memset(&c, 0, sizeof c);
    c.n = n;
    c.paths = calloc((size_t)n, sizeof *c.paths);
    for (int i = 0; i < n; i++) c.paths[i] = strdup(prefixes[i]);
    if (weights) {
        c.weights = calloc((size_t)n, sizeof *c.weights);
        memcpy(c.weights, weights, (size_t)n * sizeof *weights);
        gptds_normalize(c.weights, n);
    }
    c.split = strdup(split);
    c.seq_length = S;
    c.seed = seed;
    c.num_samples[0] = tr;
    c.num_samples[1] = va;
    c.num_samples[2] = te;
    c.no_cache = no_cache;
    return c;
}

static gptds *open_one(const char *prefix, const char *split, int S, uint64_t seed, int64_t tr, int64_t va,
                       int64_t te, int no_cache)
{
    gptds_config c = config(1, &prefix, NULL, split, S, seed, tr, va, te, no_cache);
    gptds *ds = gptds_open(&c);
    gptds_config_free(&c);
    return ds;
}

static int setup(void **state)
{
    (void)state;
    snprintf(g_dir, sizeof g_dir, "%s/gpt_dataset-%ld", TD_TEST_TMP, (long)getpid());
    mkdir(TD_TEST_TMP, 0755);
    mkdir(g_dir, 0755);
    td_log_set_level(0);
    make_dataset(path_in("a"), 400, 60);
    make_dataset(path_in("b"), 150, 90);
    make_dataset(path_in("c"), 60, 30);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* ---- splits ------------------------------------------------------------------------------ */

/* gptds_split_docs (eval's documents): a split by name, "all", and the usage errors, by hand:
 * 1500 documents at 90,10,0 -> train [0, 1350), valid [1350, 1500); "98,2" over 150 -> test empty. */
static void split_docs_by_name(void **state)
{
    (void)state;
    int64_t b = -1, e = -1;
    char err[512] = "";
    assert_int_equal(gptds_split_docs("90,10,0", "valid", "P", 1500, &b, &e, err, sizeof err), 0);
    assert_int_equal(b, 1350);
    assert_int_equal(e, 1500);
    assert_int_equal(gptds_split_docs("90,10,0", "train", "P", 1500, &b, &e, err, sizeof err), 0);
    assert_int_equal(b, 0);
    assert_int_equal(e, 1350);
    assert_int_equal(gptds_split_docs("8/1/1", "test", "P", 25, &b, &e, err, sizeof err), 0);
    assert_int_equal(b, 22);
    assert_int_equal(e, 25);
    assert_int_equal(gptds_split_docs("not a split", "all", "P", 7, &b, &e, err, sizeof err), 0); /* not read */
    assert_int_equal(b, 0);
    assert_int_equal(e, 7);
    assert_int_equal(gptds_split_docs("98,2", "test", "data/x", 150, &b, &e, err, sizeof err), -1);
    assert_string_equal(err, "--split 98,2 leaves the test split of data/x empty; use --split-name all or another "
                             "--split");
    assert_int_equal(gptds_split_docs("a,b", "valid", "P", 150, &b, &e, err, sizeof err), -1);
    assert_string_equal(err, "--split 'a,b' is not up to 3 non-negative numbers separated by commas (e.g. 949,50,1)");
}

static void split_boundaries_match_megatron(void **state)
{
    (void)state;
    /* Values worked by hand from Megatron: cumulative normalised weights times n, rounded half
     * to even (Python's round): 0.949*10 = 9.49 -> 9; 0.5*5 = 2.5 -> 2; 0.5*7 = 3.5 -> 4. */
    struct { const char *split; int64_t n; int64_t beg[3], end[3]; unsigned present; } cases[] = {
        {"949,50,1", 1000, {0, 949, 999}, {949, 999, 1000}, 7},
        {"949,50,1", 10, {0, 9, 10}, {9, 10, 10}, 7},
        {"969,30,1", 400, {0, 388, 400}, {388, 400, 400}, 7},  /* 387.6 -> 388, 399.6 -> 400 */
        {"1,1", 5, {0, 2, 0}, {2, 5, 0}, 3},                   /* 2.5 -> 2 (half to even) */
        {"1,1", 7, {0, 4, 0}, {4, 7, 0}, 3},                   /* 3.5 -> 4 */
        {"1,1", 3, {0, 2, 0}, {2, 3, 0}, 3},                   /* 1.5 -> 2 */
        {"100,0,0", 33, {0, 0, 0}, {33, 0, 0}, 1},
        {"0,1,0", 12, {0, 0, 0}, {0, 12, 0}, 2},
        {"98,2", 150, {0, 147, 0}, {147, 150, 0}, 3},
        {"8/1/1", 25, {0, 20, 22}, {20, 22, 25}, 7},           /* 22.5 -> 22 */
        {"1,1,1", 2, {0, 1, 1}, {1, 1, 2}, 7},                 /* 2/3 -> 1, 4/3 -> 1 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double w[3];
        char err[256];
        assert_int_equal(gptds_parse_split(cases[i].split, w, err, sizeof err), 0);
        int64_t beg[3], end[3];
        unsigned present = gptds_split_range(w, cases[i].n, beg, end);
        assert_int_equal(present, cases[i].present);
        for (int s = 0; s < 3; s++) {
            if (beg[s] != cases[i].beg[s] || end[s] != cases[i].end[s])
                fail_msg("split %s over %lld: %s [%lld, %lld), expected [%lld, %lld)", cases[i].split,
                         (long long)cases[i].n, gptds_split_name((gptds_split)s), (long long)beg[s],
                         (long long)end[s], (long long)cases[i].beg[s], (long long)cases[i].end[s]);
        }
    }
    double w[3];
    char err[256];
    assert_int_equal(gptds_parse_split("a,b", w, err, sizeof err), -1);
    assert_int_equal(gptds_parse_split("1,2,3,4", w, err, sizeof err), -1);
    assert_int_equal(gptds_parse_split("0,0,0", w, err, sizeof err), -1);
    assert_int_equal(gptds_parse_split("-1,2", w, err, sizeof err), -1);
    assert_int_equal(gptds_parse_split("", w, err, sizeof err), -1);

    /* the dataset uses these ranges: 400 documents at 969,30,1 */
    gptds *ds = open_one(path_in("a"), "969,30,1", 16, 1, -1, -1, -1, 1);
    const gptds_dataset_info *in = gptds_dataset(ds, 0);
    assert_int_equal(in->num_documents, 400);
    assert_int_equal(in->split[0].doc_begin, 0);
    assert_int_equal(in->split[0].doc_end, 388);
    assert_int_equal(in->split[1].doc_begin, 388);
    assert_int_equal(in->split[1].doc_end, 400);
    assert_int_equal(in->split[2].doc_end - in->split[2].doc_begin, 0);
    assert_int_equal(gptds_num_samples(ds, GPTDS_TEST), 0);
    gptds_close(ds);
}

static void target_samples_follow_megatron(void **state)
{
    (void)state;
    int64_t n[3];
    gptds_target_samples(100, 0, 10, 5, 8, n);
    assert_int_equal(n[0], 800);
    assert_int_equal(n[1], (100 / 10 + 1) * 5 * 8);
    assert_int_equal(n[2], 40);
    gptds_target_samples(0, 1000, 10, 5, 8, n); /* train_iters = 1000 / 8 = 125 */
    assert_int_equal(n[0], 1000);
    assert_int_equal(n[1], (125 / 10 + 1) * 5 * 8);
    assert_int_equal(n[2], 40);
    gptds_target_samples(7, 0, 1000, 0, 4, n);
    assert_int_equal(n[0], 28);
    assert_int_equal(n[1], 0);
    assert_int_equal(n[2], 0);
}

/* ---- indices ----------------------------------------------------------------------------- */

/* Tokens of documents doc[0..n) concatenated (the split's token stream in document-index order). */
static int32_t *doc_stream(const gptds_indices *ix, int maxlen, int64_t *len)
{
    int64_t total = 0;
    for (int64_t i = 0; i < ix->n_doc; i++) total += doc_len(ix->doc_index[i], maxlen);
    int32_t *t = malloc((size_t)total * sizeof *t + 4);
    int64_t k = 0;
    for (int64_t i = 0; i < ix->n_doc; i++)
        for (int p = 0; p < doc_len(ix->doc_index[i], maxlen); p++) t[k++] = doc_token(ix->doc_index[i], p);
    *len = total;
    return t;
}

static int64_t *inverse(const int64_t *perm, int64_t n)
{
    int64_t *inv = malloc((size_t)(n ? n : 1) * sizeof *inv);
    for (int64_t i = 0; i < n; i++) inv[i] = -1;
    for (int64_t i = 0; i < n; i++) {
        assert_true(perm[i] >= 0 && perm[i] < n);
        assert_int_equal(inv[perm[i]], -1); /* a permutation: each value once */
        inv[perm[i]] = i;
    }
    return inv;
}

static void one_epoch_uses_every_token_once(void **state)
{
    (void)state;
    const int S = 16, maxlen = 60;
    gptds *ds = open_one(path_in("a"), "969,30,1", S, 7, -1, -1, -1, 1);
    for (int s = 0; s < 2; s++) {
        const gptds_dataset_info *in = gptds_dataset(ds, 0);
        gptds_indices ix = gptds_get_indices(ds, 0, (gptds_split)s);
        int64_t beg = in->split[s].doc_begin, end = in->split[s].doc_end, tokens = 0;
        assert_int_equal(in->split[s].num_epochs, 1);
        /* the document index holds each of the split's documents exactly once */
        assert_int_equal(ix.n_doc, end - beg);
        int *seen = calloc((size_t)(end - beg), sizeof *seen);
        for (int64_t i = 0; i < ix.n_doc; i++) {
            assert_true(ix.doc_index[i] >= beg && ix.doc_index[i] < end);
            seen[ix.doc_index[i] - beg]++;
        }
        for (int64_t i = 0; i < end - beg; i++) {
            assert_int_equal(seen[i], 1);
            tokens += doc_len((int)(beg + i), maxlen);
        }
        free(seen);
        assert_int_equal(ix.n_samples, (tokens - 1) / S);
        /* samples in sample-index order: their first S tokens concatenated are the documents in
         * document-index order; the extra token of one sample is the first of the next */
        int64_t len;
        int32_t *stream = doc_stream(&ix, maxlen, &len);
        int64_t *inv = inverse(ix.shuffle_index, ix.n_samples);
        int32_t *prev = malloc((size_t)(S + 1) * sizeof *prev), *cur = malloc((size_t)(S + 1) * sizeof *cur);
        for (int64_t j = 0; j < ix.n_samples; j++) {
            gptds_sample(ds, (gptds_split)s, inv[j], cur);
            assert_memory_equal(cur, stream + j * S, (size_t)S * sizeof *cur);
            assert_int_equal(cur[S], stream[(j + 1) * S]);
            if (j) assert_int_equal(prev[S], cur[0]);
            memcpy(prev, cur, (size_t)(S + 1) * sizeof *cur);
        }
        /* what is left over is less than one more sample */
        assert_true(len - ix.n_samples * S < S + 1);
        free(prev);
        free(cur);
        free(inv);
        free(stream);
    }
    gptds_close(ds);
}

/* Megatron's epoch count and separate-final-epoch rule, written out again here. */
static void expect_epochs(int64_t tokens, int64_t wanted, int S, int64_t *epochs, int *sep, int64_t *sans)
{
    assert_true(tokens > 1);
    int64_t e = 1, have = tokens;
    while (have < wanted * S + 1) {
        e++;
        have += tokens;
    }
    *epochs = e;
    *sep = 0;
    *sans = -1;
    if (e > 1) {
        int64_t before = ((e - 1) * tokens - 1) / S;
        int64_t per_epoch = (tokens - 1) / S;
        *sep = (wanted - before) < (int64_t)(0.8 * (double)per_epoch);
        *sans = before;
    }
}

static void check_multi_epoch(gptds *ds, gptds_split s, int S, int64_t wanted)
{
    const gptds_dataset_info *in = gptds_dataset(ds, 0);
    gptds_indices ix = gptds_get_indices(ds, 0, s);
    int64_t beg = in->split[s].doc_begin, end = in->split[s].doc_end, nd = end - beg;
    int64_t epochs, sans;
    int sep;
    expect_epochs(in->split[s].num_tokens, wanted, S, &epochs, &sep, &sans);
    assert_int_equal(in->split[s].num_epochs, epochs);
    assert_int_equal(in->split[s].separate_final_epoch, sep);
    assert_int_equal(ix.n_doc, epochs * nd);
    assert_true(ix.n_samples >= wanted);
    assert_int_equal(ix.n_samples, (epochs * in->split[s].num_tokens - 1) / S);
    /* each document `epochs` times; with a separate final epoch, the last nd entries once each */
    int *seen = calloc((size_t)nd, sizeof *seen);
    for (int64_t i = 0; i < ix.n_doc; i++) seen[ix.doc_index[i] - beg]++;
    for (int64_t i = 0; i < nd; i++) assert_int_equal(seen[i], epochs);
    if (sep) {
        memset(seen, 0, (size_t)nd * sizeof *seen);
        for (int64_t i = (epochs - 1) * nd; i < ix.n_doc; i++) seen[ix.doc_index[i] - beg]++;
        for (int64_t i = 0; i < nd; i++) assert_int_equal(seen[i], 1);
        /* shuffle: [0, sans) permuted among themselves, then [sans, n) */
        for (int64_t i = 0; i < ix.n_samples; i++)
            assert_true((i < sans) == (ix.shuffle_index[i] < sans));
    }
    free(seen);
    free(inverse(ix.shuffle_index, ix.n_samples));
}

static void epochs_and_separate_final_epoch(void **state)
{
    (void)state;
    const int S = 16;
    gptds *one = open_one(path_in("c"), "1,0,0", S, 3, -1, -1, -1, 1);
    int64_t tokens = gptds_dataset(one, 0)->split[0].num_tokens, per_epoch = (tokens - 1) / S;
    gptds_close(one);
    /* 2 epochs + a sliver: final epoch shuffled on its own; 2 epochs + 90%: together */
    int64_t sliver = 2 * per_epoch + per_epoch / 10, most = 2 * per_epoch + (per_epoch * 9) / 10;
    gptds *a = open_one(path_in("c"), "1,0,0", S, 3, sliver, 0, 0, 1);
    gptds *b = open_one(path_in("c"), "1,0,0", S, 3, most, 0, 0, 1);
    check_multi_epoch(a, GPTDS_TRAIN, S, sliver);
    check_multi_epoch(b, GPTDS_TRAIN, S, most);
    assert_int_equal(gptds_dataset(a, 0)->split[0].separate_final_epoch, 1);
    assert_int_equal(gptds_dataset(b, 0)->split[0].separate_final_epoch, 0);
    /* every sample is seq_length + 1 tokens of consecutive positions or document starts */
    int32_t *t = malloc((size_t)(S + 1) * sizeof *t);
    for (int64_t i = 0; i < gptds_num_samples(a, GPTDS_TRAIN); i++) {
        gptds_sample(a, GPTDS_TRAIN, i, t);
        for (int k = 1; k <= S; k++)
            assert_true(t[k] == t[k - 1] + 1 || t[k] % 1000 == 0);
    }
    free(t);
    gptds_close(a);
    gptds_close(b);
}

static int indices_equal(const gptds *x, const gptds *y, gptds_split s)
{
    gptds_indices a = gptds_get_indices(x, 0, s), b = gptds_get_indices(y, 0, s);
    return a.n_doc == b.n_doc && a.n_samples == b.n_samples &&
           memcmp(a.doc_index, b.doc_index, (size_t)a.n_doc * 4) == 0 &&
           memcmp(a.sample_index, b.sample_index, (size_t)(a.n_samples + 1) * 16) == 0 &&
           memcmp(a.shuffle_index, b.shuffle_index, (size_t)a.n_samples * 8) == 0;
}

static void deterministic_and_seeded(void **state)
{
    (void)state;
    gptds *x = open_one(path_in("a"), "90,8,2", 16, 11, 900, 50, 20, 1);
    gptds *y = open_one(path_in("a"), "90,8,2", 16, 11, 900, 50, 20, 1);
    gptds *z = open_one(path_in("a"), "90,8,2", 16, 12, 900, 50, 20, 1);
    for (int s = 0; s < 3; s++) {
        assert_true(indices_equal(x, y, (gptds_split)s));
        gptds_indices a = gptds_get_indices(x, 0, (gptds_split)s), c = gptds_get_indices(z, 0, (gptds_split)s);
        assert_int_equal(a.n_doc, c.n_doc);
        assert_int_equal(a.n_samples, c.n_samples);
        assert_true(memcmp(a.doc_index, c.doc_index, (size_t)a.n_doc * 4) != 0);
        assert_true(memcmp(a.shuffle_index, c.shuffle_index, (size_t)a.n_samples * 8) != 0);
    }
    /* the splits are shuffled by different streams, not copies of one permutation */
    gptds_indices tr = gptds_get_indices(x, 0, GPTDS_TRAIN), va = gptds_get_indices(x, 0, GPTDS_VALID);
    int64_t m = va.n_samples < tr.n_samples ? va.n_samples : tr.n_samples;
    assert_true(memcmp(tr.shuffle_index, va.shuffle_index, (size_t)m * 8) != 0);
    gptds_close(x);
    gptds_close(y);
    gptds_close(z);
}

/* Warnings expected by a test go to /dev/null; restore_stderr puts stderr back. */
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

static int file_exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

static void cache_is_reused_and_identical(void **state)
{
    (void)state;
    char cache[600];
    snprintf(cache, sizeof cache, "%s/cache-reuse", g_dir);
    const char *prefix = path_in("a");
    gptds_config c = config(1, &prefix, NULL, "90,8,2", 16, 5, 700, 40, 10, 0);
    c.cache_dir = strdup(cache);
    gptds *built = gptds_open(&c);
    gptds *loaded = gptds_open(&c);
    gptds *fresh = open_one(prefix, "90,8,2", 16, 5, 700, 40, 10, 1);
    for (int s = 0; s < 3; s++) {
        const gptds_split_info *bi = &gptds_dataset(built, 0)->split[s], *li = &gptds_dataset(loaded, 0)->split[s];
        assert_int_equal(bi->cache_loaded, 0);
        assert_int_equal(li->cache_loaded, 1);
        assert_non_null(li->cache_file);
        assert_string_equal(bi->cache_file, li->cache_file);
        assert_true(strncmp(li->cache_file, cache, strlen(cache)) == 0);
        assert_true(file_exists(li->cache_file));
        assert_true(indices_equal(loaded, fresh, (gptds_split)s));
        assert_true(indices_equal(built, fresh, (gptds_split)s));
    }
    /* another seq_length or sample count is another file */
    gptds_config d = config(1, &prefix, NULL, "90,8,2", 16, 5, 701, 40, 10, 0);
    d.cache_dir = strdup(cache);
    gptds *other = gptds_open(&d);
    assert_int_equal(gptds_dataset(other, 0)->split[0].cache_loaded, 0);
    assert_string_not_equal(gptds_dataset(other, 0)->split[0].cache_file, gptds_dataset(built, 0)->split[0].cache_file);
    assert_int_equal(gptds_dataset(other, 0)->split[1].cache_loaded, 1); /* valid did not change */
    gptds_close(other);
    gptds_close(built);
    gptds_close(loaded);
    gptds_close(fresh);
    gptds_config_free(&c);
    gptds_config_free(&d);
}

/* Rewrites one byte of a file (or truncates it when `truncate_to` >= 0). */
static void damage(const char *path, long at, long truncate_to)
{
    if (truncate_to >= 0) {
        assert_int_equal(truncate(path, truncate_to), 0);
        return;
    }
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, at, SEEK_SET), 0);
    int ch = fgetc(f);
    assert_int_equal(fseek(f, at, SEEK_SET), 0);
    fputc(ch ^ 0x5a, f);
    fclose(f);
}

static void corrupt_cache_is_rebuilt(void **state)
{
    (void)state;
    char cache[600];
    snprintf(cache, sizeof cache, "%s/cache-corrupt", g_dir);
    const char *prefix = path_in("b");
    gptds *fresh = open_one(prefix, "80,20,0", 16, 9, 500, 30, 0, 1);
    gptds_config c = config(1, &prefix, NULL, "80,20,0", 16, 9, 500, 30, 0, 0);
    c.cache_dir = strdup(cache);
    gptds *ds = gptds_open(&c);
    char *file = strdup(gptds_dataset(ds, 0)->split[0].cache_file);
    gptds_close(ds);
    struct stat st;
    assert_int_equal(stat(file, &st), 0);
    /* a flipped payload byte, a flipped header byte, a truncation: each rebuilt, then reloaded */
    long cases[][2] = {{st.st_size / 2, -1}, {9, -1}, {0, st.st_size - 8}, {0, 0}};
    quiet_stderr();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        damage(file, cases[i][0], cases[i][1]);
        ds = gptds_open(&c);
        assert_int_equal(gptds_dataset(ds, 0)->split[0].cache_loaded, 0);
        assert_true(indices_equal(ds, fresh, GPTDS_TRAIN));
        gptds_close(ds);
        ds = gptds_open(&c);
        assert_int_equal(gptds_dataset(ds, 0)->split[0].cache_loaded, 1);
        assert_true(indices_equal(ds, fresh, GPTDS_TRAIN));
        gptds_close(ds);
    }
    restore_stderr();
    free(file);
    gptds_close(fresh);
    gptds_config_free(&c);
}

/* ---- blends ------------------------------------------------------------------------------ */

/* Megatron's build_blending_indices written out again: the dataset furthest behind its share
 * of max(k, 1) samples goes next, the first on ties. */
static void greedy_reference(const double *w, int n, int64_t size, int32_t *di, int64_t *dsi)
{
    int64_t taken[8] = {0};
    for (int64_t k = 0; k < size; k++) {
        double x = (double)(k < 1 ? 1 : k);
        int pick = 0;
        for (int j = 1; j < n; j++)
            if (w[j] * x - (double)taken[j] > w[pick] * x - (double)taken[pick]) pick = j;
        di[k] = pick;
        dsi[k] = taken[pick]++;
    }
}

static void blend_follows_greedy_rule(void **state)
{
    (void)state;
    /* the rule alone, three weights */
    double w3[3] = {0.5, 0.3, 0.2};
    enum { N = 1000 };
    int32_t di[N], rdi[N];
    int64_t dsi[N], rdsi[N];
    gptds_build_blend_indices(w3, 3, N, di, dsi);
    greedy_reference(w3, 3, N, rdi, rdsi);
    assert_memory_equal(di, rdi, sizeof di);
    assert_memory_equal(dsi, rdsi, sizeof dsi);

    /* a blend of two datasets: sizes, proportions, and each sample is the dataset's own */
    const char *prefixes[2] = {path_in("a"), path_in("b")};
    double raw[2] = {7, 3};
    const int64_t want = 300;
    gptds_config c = config(2, prefixes, raw, "90,10,0", 16, 21, want, 20, 0, 1);
    assert_true(fabs(c.weights[0] - 0.7) < 1e-15 && fabs(c.weights[1] - 0.3) < 1e-15);
    gptds *ds = gptds_open(&c);
    int64_t per[2];
    for (int i = 0; i < 2; i++) {
        per[i] = (int64_t)ceil((double)want * c.weights[i] * 1.005);
        assert_int_equal(gptds_dataset(ds, i)->split[0].samples_wanted, per[i]);
    }
    int64_t size = per[0] + per[1];
    assert_int_equal(gptds_num_samples(ds, GPTDS_TRAIN), size);
    const int32_t *bdi = gptds_blend_dataset_index(ds, GPTDS_TRAIN);
    const int64_t *bdsi = gptds_blend_sample_index(ds, GPTDS_TRAIN);
    int32_t *edi = malloc((size_t)size * sizeof *edi);
    int64_t *edsi = malloc((size_t)size * sizeof *edsi);
    double w2[2] = {c.weights[0], c.weights[1]};
    gptds_normalize(w2, 2);
    greedy_reference(w2, 2, size, edi, edsi);
    assert_memory_equal(bdi, edi, (size_t)size * sizeof *edi);
    assert_memory_equal(bdsi, edsi, (size_t)size * sizeof *edsi);
    int64_t count[2] = {0, 0};
    for (int64_t k = 0; k < size; k++) {
        count[bdi[k]]++;
        /* the greedy rule never lets a dataset fall a whole sample behind its share */
        if (k >= 1)
            for (int j = 0; j < 2; j++) assert_true(fabs((double)count[j] - w2[j] * (double)(k + 1)) <= 1.0 + 1e-9);
    }
    assert_true(fabs((double)count[0] / (double)size - 0.7) < 0.005);
    assert_true(fabs((double)count[1] / (double)size - 0.3) < 0.005);
    const gptds_blend_info *bi = gptds_blend(ds, GPTDS_TRAIN);
    assert_int_equal(bi->per_dataset[0], count[0]);
    assert_int_equal(bi->per_dataset[1], count[1]);

    /* sample k of the blend is sample dsi[k] of dataset di[k] opened alone with its share */
    gptds *alone[2];
    for (int i = 0; i < 2; i++) alone[i] = open_one(prefixes[i], "90,10,0", 16, 21, per[i], 0, 0, 1);
    int32_t x[17], y[17];
    for (int64_t k = 0; k < size; k += 7) {
        gptds_sample(ds, GPTDS_TRAIN, k, x);
        gptds_sample(alone[bdi[k]], GPTDS_TRAIN, bdsi[k], y);
        assert_memory_equal(x, y, sizeof x);
    }
    for (int i = 0; i < 2; i++) gptds_close(alone[i]);
    free(edi);
    free(edsi);
    gptds_close(ds);
    gptds_config_free(&c);
}

static void blend_cache_roundtrip(void **state)
{
    (void)state;
    char cache[600];
    snprintf(cache, sizeof cache, "%s/cache-blend", g_dir);
    const char *prefixes[3] = {path_in("a"), path_in("b"), path_in("c")};
    double raw[3] = {0.5, 0.3, 0.2};
    gptds_config c = config(3, prefixes, raw, "949,50,1", 8, 4, 400, 40, 0, 0);
    c.cache_dir = strdup(cache);
    gptds *x = gptds_open(&c);
    gptds *y = gptds_open(&c);
    const gptds_blend_info *bx = gptds_blend(x, GPTDS_TRAIN), *by = gptds_blend(y, GPTDS_TRAIN);
    assert_int_equal(bx->cache_loaded, 0);
    assert_int_equal(by->cache_loaded, 1);
    assert_int_equal(bx->size, by->size);
    assert_memory_equal(gptds_blend_dataset_index(x, GPTDS_TRAIN), gptds_blend_dataset_index(y, GPTDS_TRAIN),
                        (size_t)bx->size * 4);
    assert_memory_equal(gptds_blend_sample_index(x, GPTDS_TRAIN), gptds_blend_sample_index(y, GPTDS_TRAIN),
                        (size_t)bx->size * 8);
    /* corrupt the blend file: rebuilt, same content */
    char *file = strdup(by->cache_file);
    gptds_close(y);
    struct stat st;
    assert_int_equal(stat(file, &st), 0);
    damage(file, st.st_size - 3, -1);
    quiet_stderr();
    y = gptds_open(&c);
    restore_stderr();
    assert_int_equal(gptds_blend(y, GPTDS_TRAIN)->cache_loaded, 0);
    assert_memory_equal(gptds_blend_dataset_index(x, GPTDS_TRAIN), gptds_blend_dataset_index(y, GPTDS_TRAIN),
                        (size_t)bx->size * 4);
    free(file);
    gptds_close(x);
    gptds_close(y);
    gptds_config_free(&c);
}

/* ---- micro-batches ----------------------------------------------------------------------- */

static void micro_batches_cover_the_global_batch(void **state)
{
    (void)state;
    enum { S = 8, GBS = 8, ITERS = 6 };
    gptds *ds = open_one(path_in("a"), "1,0,0", S, 13, GBS * ITERS, 0, 0, 1);
    int layouts[][2] = {{1, 1}, {1, 2}, {2, 1}, {2, 2}, {4, 1}, {4, 2}}; /* (dp, mbs) */
    int32_t expect[GBS][S + 1];
    int32_t *mb = malloc(2 * (S + 1) * sizeof *mb);
    for (int64_t consumed = 0; consumed < GBS * ITERS; consumed += GBS) {
        for (int j = 0; j < GBS; j++) gptds_sample(ds, GPTDS_TRAIN, consumed + j, expect[j]);
        for (size_t l = 0; l < sizeof layouts / sizeof layouts[0]; l++) {
            int dp = layouts[l][0], b = layouts[l][1], nmb = GBS / (b * dp);
            int used[GBS] = {0};
            for (int d = 0; d < dp; d++)
                for (int m = 0; m < nmb; m++) {
                    gptds_micro_batch(ds, GPTDS_TRAIN, consumed, m, b, dp, d, mb);
                    for (int j = 0; j < b; j++) {
                        int hit = -1;
                        for (int e = 0; e < GBS && hit < 0; e++)
                            if (!used[e] && memcmp(mb + j * (S + 1), expect[e], sizeof expect[e]) == 0) hit = e;
                        if (hit < 0) fail_msg("dp %d mbs %d: a row of micro-batch %d on rank %d is not in [%lld, %lld)",
                                              dp, b, m, d, (long long)consumed, (long long)consumed + GBS);
                        used[hit] = 1;
                    }
                }
            for (int e = 0; e < GBS; e++) assert_int_equal(used[e], 1);
        }
    }
    /* a resumed run (fresh open, consumed = 3 iterations) reads what the uninterrupted one read */
    gptds *resumed = open_one(path_in("a"), "1,0,0", S, 13, GBS * ITERS, 0, 0, 1);
    int32_t *a = malloc(2 * (S + 1) * sizeof *a);
    for (int64_t consumed = 3 * GBS; consumed < GBS * ITERS; consumed += GBS)
        for (int d = 0; d < 2; d++)
            for (int m = 0; m < 2; m++) {
                gptds_micro_batch(ds, GPTDS_TRAIN, consumed, m, 2, 2, d, mb);
                gptds_micro_batch(resumed, GPTDS_TRAIN, consumed, m, 2, 2, d, a);
                assert_memory_equal(mb, a, 2 * (S + 1) * sizeof *a);
            }
    free(a);
    free(mb);
    gptds_close(resumed);
    gptds_close(ds);
}

static int exit_code_of_child_reading(const gptds *ds, gptds_split s, int64_t idx)
{
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stderr)) _exit(99);
        int32_t t[64];
        gptds_sample(ds, s, idx, t);
        _exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void reading_past_the_end_fails_loudly(void **state)
{
    (void)state;
    gptds *ds = open_one(path_in("c"), "1,0,0", 16, 1, 10, 0, 0, 1);
    int64_t n = gptds_num_samples(ds, GPTDS_TRAIN);
    assert_true(n >= 10);
    assert_int_equal(exit_code_of_child_reading(ds, GPTDS_TRAIN, n - 1), 0);
    assert_int_equal(exit_code_of_child_reading(ds, GPTDS_TRAIN, n), 1);
    assert_int_equal(exit_code_of_child_reading(ds, GPTDS_TRAIN, -1), 1);
    assert_int_equal(exit_code_of_child_reading(ds, GPTDS_TEST, 0), 1); /* empty split */
    gptds_close(ds);
}

/* ---- token ids against the vocabulary ---------------------------------------------------- */

/* Opens `prefix` with a vocabulary of `vocab` ids in a child process; returns its exit code, its
 * stderr in out, and (when it opened) whether the check was scanned (1) or cached (2). */
static int open_with_vocab(const char *prefix, int vocab, char *out, size_t outlen, int *checked)
{
    char errfile[700];
    snprintf(errfile, sizeof errfile, "%s/child.err", g_dir);
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    fflush(stdout); /* the child's exit() must not print the parent's buffered output again */
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen(errfile, "w", stderr)) _exit(99);
        gptds_config c = config(1, &prefix, NULL, "1,0,0", 4, 1, 1, 0, 0, 0);
        c.vocab_size = vocab;
        c.vocab_source = "--vocab-file test.json";
        gptds *ds = gptds_open(&c);
        int how = gptds_dataset(ds, 0)->ids_checked;
        if (write(pfd[1], &how, sizeof how) != sizeof how) _exit(98);
        gptds_close(ds);
        gptds_config_free(&c);
        _exit(0);
    }
    close(pfd[1]);
    int how = 0;
    if (read(pfd[0], &how, sizeof how) != sizeof how) how = 0;
    close(pfd[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    FILE *f = fopen(errfile, "r");
    size_t got = f ? fread(out, 1, outlen - 1, f) : 0;
    if (f) fclose(f);
    out[got] = 0;
    if (checked) *checked = how;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void write_ids(const char *prefix, enum idx_dtype dt, const int32_t *ids, const int *lens, int ndocs)
{
    char err[512];
    idx_writer *w = idx_writer_open(prefix, dt, err, sizeof err);
    if (!w) fail_msg("%s", err);
    for (int d = 0, at = 0; d < ndocs; at += lens[d], d++)
        if (idx_writer_add(w, ids + at, (size_t)lens[d], err, sizeof err) != 0) fail_msg("%s", err);
    if (idx_writer_finish(w, err, sizeof err) != 0) fail_msg("%s", err);
}

/* Sets PREFIX.bin's modification time `delta` seconds from now: a cache of its check is written,
 * and trusted, only 2 s or more after the .bin was modified (gptds_check_token_ids). */
static void set_bin_time(const char *prefix, int delta)
{
    char bin[700];
    snprintf(bin, sizeof bin, "%s.bin", prefix);
    struct timespec now, t[2];
    clock_gettime(CLOCK_REALTIME, &now);
    t[0] = t[1] = (struct timespec){now.tv_sec + delta, now.tv_nsec};
    assert_int_equal(utimensat(AT_FDCWD, bin, t, 0), 0);
}

static void token_ids_checked_against_the_vocabulary(void **state)
{
    (void)state;
    char out[4096], want[256];
    int how = 0;
    /* dataset c: ids d * 1000 + p. All below 60000: passes, scanned, then from the cache */
    set_bin_time(path_in("c"), -10);
    assert_int_equal(open_with_vocab(path_in("c"), 60000, out, sizeof out, &how), 0);
    assert_int_equal(how, 1);
    assert_int_equal(open_with_vocab(path_in("c"), 60000, out, sizeof out, &how), 0);
    assert_int_equal(how, 2);
    /* a smaller vocabulary is a new key: scanned again, and the first id >= 20000 is named */
    int d0 = 20;
    while (doc_len(d0, 30) == 0) d0++;
    assert_int_equal(open_with_vocab(path_in("c"), 20000, out, sizeof out, NULL), 1);
    printf("  %s", out);
    snprintf(want, sizeof want, "%s.bin: token id %d at document %d, token 0 (byte ", path_in("c"), doc_token(d0, 0),
             d0);
    assert_non_null(strstr(out, want));
    assert_non_null(strstr(out, "outside the vocabulary of 20000 ids (--vocab-file test.json)"));

    /* Megatron's uint16 file of 0xFF bytes: every id 65535 */
    int32_t ff[12];
    int lens[3] = {5, 0, 7};
    for (int i = 0; i < 12; i++) ff[i] = 65535;
    write_ids(path_in("ff"), IDX_U16, ff, lens, 3);
    assert_int_equal(open_with_vocab(path_in("ff"), 50257, out, sizeof out, NULL), 1);
    printf("  %s", out);
    assert_non_null(strstr(out, "token id 65535 at document 0, token 0 (byte 0 of the file)"));
    assert_non_null(strstr(out, "vocabulary of 50257 ids"));

    /* a negative id (int32 file) in the middle of the third document */
    int32_t neg[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    write_ids(path_in("neg"), IDX_I32, neg, lens, 3); /* the writer refuses negative ids: patch two in */
    char bin[700];
    snprintf(bin, sizeof bin, "%s.bin", path_in("neg"));
    FILE *f = fopen(bin, "r+b");
    assert_non_null(f);
    int32_t m1 = -1, m2 = -2;
    assert_int_equal(fseek(f, 36, SEEK_SET), 0);
    assert_int_equal(fwrite(&m1, 4, 1, f), 1);
    assert_int_equal(fseek(f, 44, SEEK_SET), 0);
    assert_int_equal(fwrite(&m2, 4, 1, f), 1);
    fclose(f);
    assert_int_equal(open_with_vocab(path_in("neg"), 50, out, sizeof out, NULL), 1);
    assert_non_null(strstr(out, "token id -1 at document 2, token 4 (byte 36 of the file)"));

    /* the cache is keyed by the .bin too: rewritten with the same lengths and a bad id, it is
     * rescanned, also when the rewrite keeps the size and lands in the same tick of the file
     * system's clock (the same mtime: the cache, written within 2 s of it, is not trusted) */
    int32_t good[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    write_ids(path_in("rw"), IDX_U16, good, lens, 3);
    assert_int_equal(open_with_vocab(path_in("rw"), 50, out, sizeof out, &how), 0);
    assert_int_equal(how, 1);
    good[8] = 50;
    write_ids(path_in("rw"), IDX_U16, good, lens, 3);
    assert_int_equal(open_with_vocab(path_in("rw"), 50, out, sizeof out, NULL), 1);
    assert_non_null(strstr(out, "token id 50 at document 2, token 3 (byte 16 of the file)"));

    /* a .bin this fresh gets no cache of its check (one written now would be racy, never trusted;
     * and the ranks that all scan it would write one file at once): scanned again. (Its time is
     * set a minute ahead: fresh however slowly the test runs.) */
    write_ids(path_in("fresh"), IDX_U16, neg, lens, 3);
    set_bin_time(path_in("fresh"), 60);
    assert_int_equal(open_with_vocab(path_in("fresh"), 50, out, sizeof out, &how), 0);
    assert_int_equal(how, 1);
    char pat[800];
    glob_t g;
    snprintf(pat, sizeof pat, "%s.ids.*", path_in("fresh"));
    assert_int_equal(glob(pat, 0, NULL, &g), GLOB_NOMATCH);
    assert_int_equal(open_with_vocab(path_in("fresh"), 50, out, sizeof out, &how), 0);
    assert_int_equal(how, 1);
}

/* ---- the command ------------------------------------------------------------------------- */

static int run(const char *cmd, char *out, size_t outlen)
{
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t got = fread(out, 1, outlen - 1, p);
    out[got] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void data_info_command(void **state)
{
    (void)state;
    /* the binary is built with the tests (make test); its absence is a failure, not a skip */
    assert_int_equal(access(TD_TRIDENT_BIN, X_OK), 0);
    char cmd[2048], out[16384];
    snprintf(cmd, sizeof cmd, "'%s' data-info --data-path 0.6 '%s' 0.4 '%s' --split 90,8,2 --seq-length 16 "
             "--global-batch-size 4 --train-iters 50 --eval-interval 10 --eval-iters 2 --data-cache-path '%s/cli' "
             "2>&1", TD_TRIDENT_BIN, path_in("a"), path_in("b"), g_dir);
    assert_int_equal(run(cmd, out, sizeof out), 0);
    assert_non_null(strstr(out, "train"));
    assert_non_null(strstr(out, "built"));
    assert_int_equal(run(cmd, out, sizeof out), 0);
    assert_non_null(strstr(out, "loaded"));
    assert_null(strstr(out, "built"));
    snprintf(cmd, sizeof cmd, "'%s' data-info --data-path '%s' --split 1,x 2>&1", TD_TRIDENT_BIN, path_in("a"));
    assert_int_equal(run(cmd, out, sizeof out), 2);
    assert_non_null(strstr(out, "--split"));
    snprintf(cmd, sizeof cmd, "'%s' data-info --data-path '%s/missing' 2>&1", TD_TRIDENT_BIN, g_dir);
    assert_int_equal(run(cmd, out, sizeof out), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(split_boundaries_match_megatron),
        cmocka_unit_test(split_docs_by_name),
        cmocka_unit_test(target_samples_follow_megatron),
        cmocka_unit_test(one_epoch_uses_every_token_once),
        cmocka_unit_test(epochs_and_separate_final_epoch),
        cmocka_unit_test(deterministic_and_seeded),
        cmocka_unit_test(cache_is_reused_and_identical),
        cmocka_unit_test(corrupt_cache_is_rebuilt),
        cmocka_unit_test(blend_follows_greedy_rule),
        cmocka_unit_test(blend_cache_roundtrip),
        cmocka_unit_test(micro_batches_cover_the_global_batch),
        cmocka_unit_test(reading_past_the_end_fails_loudly),
        cmocka_unit_test(token_ids_checked_against_the_vocabulary),
        cmocka_unit_test(data_info_command),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
