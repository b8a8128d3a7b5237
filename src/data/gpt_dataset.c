/* GPT dataset after Megatron's GPTDataset / BlendedDataset: see include/data/trident/gpt_dataset.h
 * and docs/data.md. Random draws come from Philox keyed by (seed, purpose, split, epoch group). */
#include "trident/gpt_dataset.h"

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
#include <time.h>
#include <unistd.h>

#include "ds_cache.h"
#include "ds_util.h"
#include "trident/check.h"
#include "trident/philox.h"
#include "trident/timer.h"

/* ------------------------------------------------------------------------------------------ */
/* Small helpers: strings, paths, hashes                                                      */

/* Folder part of a dataset prefix ("." when it has none). */
static char *dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash) return td_xstrdup(".");
    if (slash == path) return td_xstrdup("/");
    char *d = td_xmalloc((size_t)(slash - path) + 1);
    memcpy(d, path, (size_t)(slash - path));
    d[slash - path] = 0;
    return d;
}

static const char *base_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

static int64_t mul_or_die(int64_t a, int64_t b, const char *what)
{
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r))
        td_usage_error("%s overflows 64 bits (%" PRId64 " x %" PRId64 "): use smaller values", what, a, b);
    return r;
}

/* ------------------------------------------------------------------------------------------ */
/* Shuffles: Fisher-Yates as numpy's RandomState.shuffle walks it (i from n-1 down to 1, j
 * uniform in [0, i]), with draw i taken from Philox (seed, stream, i).                        */

enum { RNG_DOC_INDEX = 1, RNG_SHUFFLE_INDEX = 2 };

/* Stream of one shuffle: purpose, split, and part (0: the epochs shuffled together, 1: the
 * final epoch when Megatron shuffles it separately). */
static uint64_t rng_stream(int purpose, gptds_split s, int part)
{
    return (0xDA7Aull << 48) | ((uint64_t)purpose << 32) | ((uint64_t)s << 16) | (uint64_t)part;
}

static void shuffle_i32(int32_t *a, int64_t n, uint64_t seed, uint64_t stream)
{
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)td_philox_below(seed, stream, (uint64_t)i, (uint64_t)i + 1);
        int32_t t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

static void shuffle_i64(int64_t *a, int64_t n, uint64_t seed, uint64_t stream)
{
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)td_philox_below(seed, stream, (uint64_t)i, (uint64_t)i + 1);
        int64_t t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Configuration                                                                              */

const char *gptds_split_name(gptds_split s)
{
    static const char *names[GPTDS_NSPLITS] = {"train", "valid", "test"};
    return (unsigned)s < GPTDS_NSPLITS ? names[s] : "?";
}

int gptds_parse_split(const char *split, double w[GPTDS_NSPLITS], char *err, size_t errlen)
{
    double v[GPTDS_NSPLITS] = {0, 0, 0};
    int n = 0;
    const char *p = split;
    for (;;) {
        char *end = NULL;
        errno = 0;
        double x = strtod(p, &end);
        if (end == p || errno || !isfinite(x) || x < 0) {
            snprintf(err, errlen, "'%s' is not up to 3 non-negative numbers separated by commas (e.g. 949,50,1)",
                     split);
            return -1;
        }
        if (n == GPTDS_NSPLITS) {
            snprintf(err, errlen, "'%s' has more than 3 entries (train,valid,test)", split);
            return -1;
        }
        v[n++] = x;
        if (*end == 0) break;
        if (*end != ',' && *end != '/') {
            snprintf(err, errlen, "'%s' is not up to 3 non-negative numbers separated by commas (e.g. 949,50,1)",
                     split);
            return -1;
        }
        p = end + 1;
    }
    if (!(v[0] + v[1] + v[2] > 0)) {
        snprintf(err, errlen, "'%s' gives every split weight 0; give the train split a positive weight", split);
        return -1;
    }
    gptds_normalize(v, GPTDS_NSPLITS);
    memcpy(w, v, sizeof v);
    return 0;
}

unsigned gptds_split_range(const double w[GPTDS_NSPLITS], int64_t n, int64_t beg[GPTDS_NSPLITS],
                           int64_t end[GPTDS_NSPLITS])
{
    double e[GPTDS_NSPLITS + 1];
    e[0] = 0.0;
    for (int s = 0; s < GPTDS_NSPLITS; s++) e[s + 1] = e[s] + w[s];
    unsigned present = 0;
    for (int s = 0; s < GPTDS_NSPLITS; s++) {
        if (e[s + 1] <= e[s]) {
            beg[s] = end[s] = 0;
            continue;
        }
        /* nearbyint in the default rounding mode rounds half to even, as Python's round() */
        beg[s] = (int64_t)nearbyint(e[s] * (double)n);
        end[s] = (int64_t)nearbyint(e[s + 1] * (double)n);
        present |= 1u << s;
    }
    return present;
}

int gptds_split_docs(const char *split, const char *name, const char *path, int64_t n, int64_t *beg, int64_t *end,
                     char *err, size_t errlen)
{
    *beg = 0, *end = n;
    if (strcmp(name, "all") == 0) return 0;
    double w[GPTDS_NSPLITS];
    int64_t b[GPTDS_NSPLITS], e[GPTDS_NSPLITS];
    char why[1024];
    if (gptds_parse_split(split, w, why, sizeof why)) {
        snprintf(err, errlen, "--split %s", why);
        return -1;
    }
    gptds_split_range(w, n, b, e);
    int s = strcmp(name, "train") == 0 ? GPTDS_TRAIN : strcmp(name, "valid") == 0 ? GPTDS_VALID : GPTDS_TEST;
    *beg = b[s], *end = e[s];
    if (*beg == *end) {
        snprintf(err, errlen, "--split %s leaves the %s split of %s empty; use --split-name all or another --split",
                 split, name, path);
        return -1;
    }
    return 0;
}

void gptds_target_samples(int64_t train_iters, int64_t train_samples, int64_t eval_interval, int64_t eval_iters,
                          int64_t global_batch, int64_t out[GPTDS_NSPLITS])
{
    if (global_batch < 1) td_usage_error("--global-batch-size %" PRId64 " must be at least 1", global_batch);
    if (eval_interval < 1) td_usage_error("--eval-interval %" PRId64 " must be at least 1", eval_interval);
    if (train_samples > 0) {
        out[GPTDS_TRAIN] = train_samples;
        train_iters = train_samples / global_batch;
    } else {
        out[GPTDS_TRAIN] = mul_or_die(train_iters, global_batch, "--train-iters x --global-batch-size");
    }
    int64_t evals = train_iters / eval_interval + 1;
    out[GPTDS_VALID] = mul_or_die(mul_or_die(evals, eval_iters, "validation iterations"), global_batch,
                                  "validation iterations x --global-batch-size");
    out[GPTDS_TEST] = mul_or_die(eval_iters, global_batch, "--eval-iters x --global-batch-size");
}

static int is_number(const char *s)
{
    char *end = NULL;
    errno = 0;
    double x = strtod(s, &end);
    (void)x;
    return end != s && *end == 0 && !errno;
}

void gptds_config_from_args(gptds_config *cfg, const td_args *a, const int64_t *num_samples)
{
    memset(cfg, 0, sizeof *cfg);
    const td_strlist *dp = &a->data_path;
    if (dp->n == 0)
        td_usage_error("--data-path is required: a dataset prefix (PREFIX.bin + PREFIX.idx), or a blend "
                       "W1 PREFIX1 W2 PREFIX2 ...");
    int weighted = 0;
    if (dp->n % 2 == 0) {
        int numbers = 0;
        const char *bad = NULL;
        for (int i = 0; i < dp->n; i += 2) {
            if (is_number(dp->v[i])) numbers++;
            else if (!bad) bad = dp->v[i];
        }
        if (numbers == dp->n / 2) weighted = 1;
        else if (numbers > 0)
            td_usage_error("--data-path: '%s' is not a weight; a blend is W1 PREFIX1 W2 PREFIX2 ... with a number "
                           "before every prefix", bad);
    }
    if (!weighted && dp->n > 1)
        td_usage_error("--data-path: got %d values; give one dataset prefix, or a weight before each prefix "
                       "(e.g. --data-path 0.7 A 0.3 B)", dp->n);
    cfg->n = weighted ? dp->n / 2 : 1;
    cfg->paths = td_xcalloc((size_t)cfg->n, sizeof *cfg->paths);
    if (weighted) cfg->weights = td_xcalloc((size_t)cfg->n, sizeof *cfg->weights);
    for (int i = 0; i < cfg->n; i++) {
        cfg->paths[i] = td_xstrdup(dp->v[weighted ? 2 * i + 1 : 0]);
        if (!weighted) continue;
        double w = strtod(dp->v[2 * i], NULL);
        if (!isfinite(w) || !(w > 0))
            td_usage_error("--data-path: weight %s of %s must be a positive number (drop the dataset instead of "
                           "giving it weight 0)", dp->v[2 * i], cfg->paths[i]);
        cfg->weights[i] = w;
    }
    if (weighted) gptds_normalize(cfg->weights, cfg->n);

    cfg->split = td_xstrdup(a->split ? a->split : "969,30,1");
    double w[GPTDS_NSPLITS];
    char err[256];
    if (gptds_parse_split(cfg->split, w, err, sizeof err) != 0) td_usage_error("--split %s", err);
    cfg->cache_dir = a->data_cache_path ? td_xstrdup(a->data_cache_path) : NULL;
    cfg->seq_length = a->seq_length;
    cfg->seed = (uint64_t)a->seed;
    for (int s = 0; s < GPTDS_NSPLITS; s++) cfg->num_samples[s] = num_samples ? num_samples[s] : -1;
}

void gptds_config_free(gptds_config *cfg)
{
    for (int i = 0; i < cfg->n; i++) free(cfg->paths[i]);
    free(cfg->paths);
    free(cfg->weights);
    free(cfg->split);
    free(cfg->cache_dir);
    memset(cfg, 0, sizeof *cfg);
}

/* ------------------------------------------------------------------------------------------ */
/* The dataset                                                                                */

typedef struct {
    uint64_t key;       /* cache key of these indices (0 for an empty split) */
    ds_image img;    /* holds the arrays */
    gptds_indices ix;
} split_state;

typedef struct {
    gptds_dataset_info info;
    char *path;
    dsr_reader *reader;
    const int32_t *lens; /* (num_documents) */
    split_state split[GPTDS_NSPLITS];
} component;

typedef struct {
    gptds_blend_info info;
    ds_image img;
    const int32_t *ds_index;  /* (size) */
    const int64_t *ds_sample; /* (size) */
} blend_state;

struct gptds {
    int n;
    component *c;
    int blended;
    int seq_length;
    blend_state blend[GPTDS_NSPLITS];
};

/* What one split of one dataset needs, computed before building (Megatron's
 * _get_num_epochs and separate-final-epoch rule, helpers' num_samples). */
typedef struct {
    int64_t beg, end, ndocs, tokens, wanted;
    int64_t epochs, n_doc, n_samples;
    int sep;      /* shuffle the final epoch on its own */
    int64_t sans; /* samples before the final epoch (when sep) */
} gpt_plan;

static void plan_split(gpt_plan *P, int seq_length)
{
    int64_t S = seq_length, T = P->tokens;
    P->epochs = 1;
    if (P->wanted > 0) {
        int64_t req = mul_or_die(P->wanted, S, "samples x --seq-length") + 1;
        P->epochs = (req + T - 1) / T;
        if (P->epochs < 1) P->epochs = 1;
    }
    P->n_doc = mul_or_die(P->epochs, P->ndocs, "epochs x documents");
    P->n_samples = (mul_or_die(P->epochs, T, "epochs x tokens") - 1) / S;
    P->sep = 0;
    P->sans = P->n_samples;
    if (P->epochs > 1) {
        int64_t sans = ((P->epochs - 1) * T - 1) / S;
        int64_t from_final = P->wanted - sans;
        int64_t per_epoch = (T - 1) / S;
        TD_ASSERT(from_final >= 0 && from_final <= per_epoch + 1);
        P->sep = from_final < (int64_t)(0.80 * (double)per_epoch);
        if (P->sep) P->sans = sans;
    }
}

/* Megatron's build_sample_idx with add_extra_token: sample k spans from row k to row k+1
 * inclusive, seq_length + 1 tokens, so consecutive samples share one token. */
static void build_sample_index(const int32_t *lens, const int32_t *doc, int64_t n_doc, int64_t n, int seq_length,
                               int64_t *si)
{
    int64_t pos = 0, off = 0;
    si[0] = 0;
    si[1] = 0;
    for (int64_t k = 1; k <= n; k++) {
        int64_t need = (int64_t)seq_length + 1;
        for (;;) {
            int64_t avail = lens[doc[pos]] - off;
            if (avail >= need) {
                off += need - 1;
                break;
            }
            need -= avail;
            TD_ASSERT(pos + 1 < n_doc); /* n was sized so that the documents suffice */
            pos++;
            off = 0;
        }
        si[2 * k] = pos;
        si[2 * k + 1] = off;
    }
}

static void build_gpt_arrays(const gpt_plan *P, const int32_t *lens, uint64_t seed, gptds_split s, int seq_length,
                             int32_t *doc, int64_t *si, int64_t *shuf)
{
    int64_t nd = P->ndocs;
    for (int64_t e = 0; e < P->epochs; e++)
        for (int64_t k = 0; k < nd; k++) doc[e * nd + k] = (int32_t)(P->beg + k);
    if (!P->sep) {
        shuffle_i32(doc, P->n_doc, seed, rng_stream(RNG_DOC_INDEX, s, 0));
    } else {
        int64_t first = (P->epochs - 1) * nd;
        shuffle_i32(doc, first, seed, rng_stream(RNG_DOC_INDEX, s, 0));
        shuffle_i32(doc + first, nd, seed, rng_stream(RNG_DOC_INDEX, s, 1));
    }
    build_sample_index(lens, doc, P->n_doc, P->n_samples, seq_length, si);
    for (int64_t i = 0; i < P->n_samples; i++) shuf[i] = i;
    shuffle_i64(shuf, P->sans, seed, rng_stream(RNG_SHUFFLE_INDEX, s, 0));
    if (P->sep) shuffle_i64(shuf + P->sans, P->n_samples - P->sans, seed, rng_stream(RNG_SHUFFLE_INDEX, s, 1));
}

typedef struct {
    const gpt_plan *P;
    const int32_t *lens;
} gpt_check_ctx;

/* Bounds of loaded GPT indices: nothing read through them can leave the dataset. */
static int check_gpt_arrays(const void *vctx, void *arr[DS_CACHE_MAX_ARRAYS], char *why, size_t whylen)
{
    const gpt_check_ctx *ctx = vctx;
    const gpt_plan *P = ctx->P;
    const int32_t *doc = arr[0];
    const int64_t *si = arr[1], *shuf = arr[2];
    for (int64_t i = 0; i < P->n_doc; i++)
        if (doc[i] < P->beg || doc[i] >= P->end) {
            snprintf(why, whylen, "document index entry %" PRId64 " is %d, outside the split's documents [%" PRId64
                     ", %" PRId64 ")", i, doc[i], P->beg, P->end);
            return -1;
        }
    int64_t prev_pos = 0, prev_off = 0;
    for (int64_t k = 0; k <= P->n_samples; k++) {
        int64_t pos = si[2 * k], off = si[2 * k + 1];
        int ok = pos >= prev_pos && pos < P->n_doc && off >= 0 && (pos > prev_pos || off >= prev_off) &&
                 (k > 0 || (pos == 0 && off == 0));
        if (ok) {
            int64_t len = ctx->lens[doc[pos]];
            ok = off < (len > 0 ? len : 1);
        }
        if (!ok) {
            snprintf(why, whylen, "sample index row %" PRId64 " (%" PRId64 ", %" PRId64 ") is out of order or bounds",
                     k, pos, off);
            return -1;
        }
        prev_pos = pos;
        prev_off = off;
    }
    for (int64_t i = 0; i < P->n_samples; i++)
        if (shuf[i] < 0 || shuf[i] >= P->n_samples) {
            snprintf(why, whylen, "shuffle index entry %" PRId64 " is %" PRId64 ", outside [0, %" PRId64 ")", i,
                     shuf[i], P->n_samples);
            return -1;
        }
    return 0;
}

char *gptds_cache_dir(const gptds_config *cfg, int i)
{
    if (cfg->no_cache) return NULL;
    return cfg->cache_dir ? td_xstrdup(cfg->cache_dir) : dir_of(cfg->paths[i]);
}

static char *cache_path(const gptds_config *cfg, const char *dataset_path, const char *stem, gptds_split s,
                        uint64_t key)
{
    if (cfg->no_cache) return NULL;
    char *dir = cfg->cache_dir ? td_xstrdup(cfg->cache_dir) : dir_of(dataset_path);
    char *p = ds_aprintf("%s/%s.%s.%016" PRIx64 ".tdidx", dir, stem, gptds_split_name(s), key);
    free(dir);
    return p;
}

static void gpt_split_open(component *c, gptds_split s, const gptds_config *cfg, int present, int64_t beg,
                           int64_t end, int64_t wanted)
{
    split_state *st = &c->split[s];
    gptds_split_info *in = &c->info.split[s];
    gpt_plan P = {.beg = beg, .end = end, .ndocs = end - beg, .wanted = wanted};
    for (int64_t i = beg; i < end; i++) P.tokens += c->lens[i];
    in->doc_begin = beg;
    in->doc_end = end;
    in->num_tokens = P.tokens;
    in->samples_wanted = wanted;
    if (P.tokens <= 1) {
        /* no training data makes training impossible: the fix is the flag. An empty validation or
         * test split is just empty (no samples; the trainer skips it) */
        if (s == GPTDS_TRAIN && wanted > 0)
            td_usage_error("--split %s leaves the train split of %s with %" PRId64 " documents [%" PRId64 ", %" PRId64
                           ") of %" PRId64 " (%" PRId64 " tokens), but training needs %" PRId64 " samples of %d+1 "
                           "tokens: give the train split more weight in --split, or use more data",
                           cfg->split, c->path, P.ndocs, beg, end, c->info.num_documents, P.tokens, wanted,
                           cfg->seq_length);
        (void)present;
        return; /* empty */
    }
    plan_split(&P, cfg->seq_length);

    uint64_t lens_hash = ds_fnv1a_words(DS_FNV_OFFSET, c->lens + beg, (size_t)P.ndocs * sizeof *c->lens);
    ds_cache_layout L = {.n_arrays = 3,
                      .count = {(uint64_t)P.n_doc, 2 * (uint64_t)(P.n_samples + 1), (uint64_t)P.n_samples},
                      .elem = {4, 8, 8}};
    L.desc = ds_aprintf("trident GPTDataset indices, algorithm v%d\nsplit: %s\ndocuments: [%" PRId64 ", %" PRId64
                     ") of %" PRId64 "\ndocument lengths fnv1a64: %016" PRIx64 "\ntokens per epoch: %" PRId64
                     "\nseq_length: %d (+1 extra token)\nseed: %" PRIu64 "\nsamples wanted: %" PRId64
                     "\nepochs: %" PRId64 "\nseparate final epoch: %d\n",
                     GPTDS_ALGO_VERSION, gptds_split_name(s), beg, end, c->info.num_documents, lens_hash, P.tokens,
                     cfg->seq_length, cfg->seed, wanted, P.epochs, P.sep);
    L.key = ds_fnv1a(DS_FNV_OFFSET, L.desc, strlen(L.desc));
    st->key = L.key;
    in->cache_file = cache_path(cfg, c->path, base_of(c->path), s, L.key);

    double t0 = td_now();
    void *arr[DS_CACHE_MAX_ARRAYS] = {0};
    gpt_check_ctx ctx = {&P, c->lens};
    in->cache_loaded = in->cache_file && ds_cache_load(in->cache_file, &L, check_gpt_arrays, &ctx, arr, &st->img) == 0;
    if (!in->cache_loaded) {
        st->img.p = ds_cache_alloc(&L, &st->img.len, arr);
        build_gpt_arrays(&P, c->lens, cfg->seed, s, cfg->seq_length, arr[0], arr[1], arr[2]);
        ds_cache_store(in->cache_file, st->img.p, st->img.len);
    }
    in->seconds = td_now() - t0;
    in->num_samples = P.n_samples;
    in->num_epochs = P.epochs;
    in->separate_final_epoch = P.sep;
    st->ix = (gptds_indices){.n_doc = P.n_doc, .doc_index = arr[0], .n_samples = P.n_samples,
                             .sample_index = arr[1], .shuffle_index = arr[2]};
    TD_DEBUG("gpt dataset %s, %s split: %s %" PRId64 " samples, %" PRId64 " epochs in %.3f s (%s)", c->path,
             gptds_split_name(s), in->cache_loaded ? "loaded" : "built", P.n_samples, P.epochs, in->seconds,
             in->cache_file ? in->cache_file : "not cached");
    free(L.desc);
}

typedef struct {
    const gptds *ds;
    gptds_split s;
    int64_t size;
} blend_check_ctx;

/* A loaded blend is valid when every entry names a dataset and is that dataset's running count,
 * within the samples the dataset has. */
static int check_blend_arrays(const void *vctx, void *arr[DS_CACHE_MAX_ARRAYS], char *why, size_t whylen)
{
    const blend_check_ctx *ctx = vctx;
    const int32_t *di = arr[0];
    const int64_t *dsi = arr[1];
    int64_t *count = td_xcalloc((size_t)ctx->ds->n, sizeof *count);
    int rc = 0;
    for (int64_t k = 0; k < ctx->size && rc == 0; k++) {
        int d = di[k];
        if (d < 0 || d >= ctx->ds->n || dsi[k] != count[d] ||
            dsi[k] >= ctx->ds->c[d].info.split[ctx->s].num_samples) {
            snprintf(why, whylen, "entry %" PRId64 " (dataset %d, sample %" PRId64 ") is inconsistent", k, d, dsi[k]);
            rc = -1;
        } else {
            count[d]++;
        }
    }
    free(count);
    return rc;
}

static void blend_split_open(gptds *ds, gptds_split s, const gptds_config *cfg, const int64_t *sizes)
{
    blend_state *b = &ds->blend[s];
    int64_t size = 0;
    for (int i = 0; i < ds->n; i++) size += sizes[i];
    b->info.size = size;
    b->info.per_dataset = td_xcalloc((size_t)ds->n, sizeof *b->info.per_dataset);
    if (size == 0) return;
    /* BlendedDataset normalises the (already normalised) weights once more; so do we, for
     * bit-identical decisions. */
    double *w = td_xmalloc((size_t)ds->n * sizeof *w);
    memcpy(w, cfg->weights, (size_t)ds->n * sizeof *w);
    gptds_normalize(w, ds->n);

    size_t dl = 0;
    char *desc = ds_aprintf("trident BlendedDataset indices, algorithm v%d\nsplit: %s\nsize: %" PRId64 "\n",
                         GPTDS_ALGO_VERSION, gptds_split_name(s), size);
    for (int i = 0; i < ds->n; i++) {
        char *more = ds_aprintf("%sdataset %d: weight %a, indices %016" PRIx64 "\n", desc, i, w[i],
                             ds->c[i].split[s].key);
        free(desc);
        desc = more;
    }
    dl = strlen(desc);
    ds_cache_layout L = {.desc = desc, .key = ds_fnv1a(DS_FNV_OFFSET, desc, dl), .n_arrays = 2,
                      .count = {(uint64_t)size, (uint64_t)size}, .elem = {4, 8}};
    b->info.cache_file = cache_path(cfg, ds->c[0].path, "blend", s, L.key);

    double t0 = td_now();
    void *arr[DS_CACHE_MAX_ARRAYS] = {0};
    blend_check_ctx ctx = {ds, s, size};
    b->info.cache_loaded =
        b->info.cache_file && ds_cache_load(b->info.cache_file, &L, check_blend_arrays, &ctx, arr, &b->img) == 0;
    if (!b->info.cache_loaded) {
        b->img.p = ds_cache_alloc(&L, &b->img.len, arr);
        gptds_build_blend_indices(w, ds->n, size, arr[0], arr[1]);
        ds_cache_store(b->info.cache_file, b->img.p, b->img.len);
    }
    b->ds_index = arr[0];
    b->ds_sample = arr[1];
    for (int64_t k = 0; k < size; k++) b->info.per_dataset[b->ds_index[k]]++;
    for (int i = 0; i < ds->n; i++)
        if (b->info.per_dataset[i] > ds->c[i].info.split[s].num_samples)
            td_fatal(1, "blend of the %s split takes %" PRId64 " samples from %s, which has only %" PRId64
                     ": give more data or change the weights (this follows Megatron's BlendedDataset check)",
                     gptds_split_name(s), b->info.per_dataset[i], ds->c[i].path, ds->c[i].info.split[s].num_samples);
    b->info.seconds = td_now() - t0;
    free(w);
    free(desc);
}

/* ---- token ids against the vocabulary: a passing scan is cached as (tokens, vocabulary) ---- */

typedef struct {
    int64_t tokens, vocab;
} ids_check_ctx;

static int check_ids_arrays(const void *vctx, void *arr[DS_CACHE_MAX_ARRAYS], char *why, size_t whylen)
{
    const ids_check_ctx *ctx = vctx;
    const int64_t *v = arr[0];
    if (v[0] != ctx->tokens || v[1] != ctx->vocab) {
        snprintf(why, whylen, "it records %" PRId64 " tokens below %" PRId64 ", expected %" PRId64 " below %" PRId64,
                 v[0], v[1], ctx->tokens, ctx->vocab);
        return -1;
    }
    return 0;
}

/* a - b in seconds */
static double seconds_after(const struct timespec *a, const struct timespec *b)
{
    return (double)(a->tv_sec - b->tv_sec) + 1e-9 * (double)(a->tv_nsec - b->tv_nsec);
}

int gptds_check_token_ids(const dsr_reader *r, int vocab, const char *vocab_source, const char *cache_dir,
                          int no_cache)
{
    const char *path = dsr_prefix(r);
    char *bin = dsr_token_file(r);
    struct stat st;
    if (stat(bin, &st) != 0)
        td_fatal(1, "%s: %s (the tokens of dataset %s); give the prefix of a dataset from trident preprocess", bin,
                 td_strerror(errno), path);
    int64_t nseq = dsr_num_sequences(r), ntok = dsr_num_tokens(r);
    uint64_t lens_hash = ds_fnv1a_words(DS_FNV_OFFSET, dsr_seq_lens(r), (size_t)nseq * sizeof(int32_t));
    ds_cache_layout L = {.n_arrays = 1, .count = {2}, .elem = {8}};
    L.desc = ds_aprintf("trident token id check, algorithm v1\nvocabulary size: %d\n.bin bytes: %lld\n.bin modified: "
                     "%lld.%09ld\ndtype: %s\nsequences: %" PRId64 "\ntokens: %" PRId64
                     "\ndocument lengths fnv1a64: %016" PRIx64 "\n",
                     vocab, (long long)st.st_size, (long long)st.st_mtim.tv_sec, (long)st.st_mtim.tv_nsec,
                     dsr_token_type(r), nseq, ntok, lens_hash);
    L.key = ds_fnv1a(DS_FNV_OFFSET, L.desc, strlen(L.desc));
    char *file = NULL;
    if (!no_cache) {
        char *dir = cache_dir ? td_xstrdup(cache_dir) : dir_of(path);
        file = ds_aprintf("%s/%s.ids.%016" PRIx64 ".tdidx", dir, base_of(path), L.key);
        free(dir);
    }
    ds_image im = {0};
    void *arr[DS_CACHE_MAX_ARRAYS] = {0};
    ids_check_ctx ctx = {ntok, vocab};
    /* a .bin rewritten in place with the same size within one tick of the file system's clock
     * keeps its mtime: a cache written less than 2 s after the .bin's mtime could predate such a
     * rewrite, so it is not trusted (git's "racily clean" rule), and the scan writes a newer one */
    struct stat cs;
    int racy = file && stat(file, &cs) == 0 && seconds_after(&cs.st_mtim, &st.st_mtim) < 2;
    int loaded = file && !racy && ds_cache_load(file, &L, check_ids_arrays, &ctx, arr, &im) == 0;
    if (!loaded) {
        double t0 = td_now();
        int64_t off = 0;
        int32_t id = 0;
        int64_t bad = dsr_find_id_outside(r, vocab, &off, &id);
        double dt = td_now() - t0;
        if (bad >= 0)
            td_fatal(1, "%s: token id %d at document %" PRId64 ", token %" PRId64 " (byte %" PRId64 " of the file) is "
                     "outside the vocabulary of %d ids (%s): the data was tokenized with another vocabulary, or is "
                     "corrupt; preprocess it again with this vocabulary, or use the one it was made with",
                     bin, (int)id, bad, off, dsr_token_byte_offset(r, bad, off), vocab, vocab_source);
        TD_DEBUG("%s: %" PRId64 " token ids below %d, checked in %.3f s (%.2f GB/s)", bin, ntok, vocab, dt,
                 dt > 0 ? (double)st.st_size / dt / 1e9 : 0.0);
        im.p = ds_cache_alloc(&L, &im.len, arr);
        int64_t *v = arr[0];
        v[0] = ntok;
        v[1] = vocab;
        /* a cache written now would be racy by the rule above, never trusted: none is written (so
         * the ranks that all scan a .bin this fresh never write one file at once either) */
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        ds_cache_store(seconds_after(&now, &st.st_mtim) < 2 ? NULL : file, im.p, im.len);
    }
    ds_image_free(&im);
    free(file);
    free(L.desc);
    free(bin);
    return loaded;
}

static void component_open(component *c, const char *path, double weight)
{
    char err[512];
    c->path = td_xstrdup(path);
    c->reader = dsr_open(path, err, sizeof err);
    if (!c->reader) td_fatal(1, "--data-path %s: %s", path, err);
    gptds_dataset_info *in = &c->info;
    in->path = c->path;
    in->weight = weight;
    in->reader = c->reader;
    in->num_documents = dsr_num_sequences(c->reader);
    c->lens = dsr_seq_lens(c->reader);
    in->min_len = in->num_documents ? INT32_MAX : 0;
    for (int64_t i = 0; i < in->num_documents; i++) {
        int32_t l = c->lens[i];
        in->num_tokens += l;
        if (l < in->min_len) in->min_len = l;
        if (l > in->max_len) in->max_len = l;
    }
    in->mean_len = in->num_documents ? (double)in->num_tokens / (double)in->num_documents : 0.0;
}

gptds *gptds_open(const gptds_config *cfg)
{
    if (cfg->n < 1 || !cfg->paths) td_usage_error("--data-path is required");
    if (cfg->seq_length < 1) td_usage_error("--seq-length %d must be at least 1", cfg->seq_length);
    double w[GPTDS_NSPLITS];
    char err[256];
    if (gptds_parse_split(cfg->split, w, err, sizeof err) != 0) td_usage_error("--split %s", err);
    if (cfg->cache_dir && !cfg->no_cache && ds_make_dirs(cfg->cache_dir) != 0)
        td_fatal(1, "--data-cache-path %s: cannot create the folder (%s); give a writable folder", cfg->cache_dir,
                 td_strerror(errno));

    gptds *ds = td_xcalloc(1, sizeof *ds);
    ds->n = cfg->n;
    ds->blended = cfg->weights != NULL;
    ds->seq_length = cfg->seq_length;
    ds->c = td_xcalloc((size_t)ds->n, sizeof *ds->c);
    for (int i = 0; i < ds->n; i++) {
        component *c = &ds->c[i];
        component_open(c, cfg->paths[i], ds->blended ? cfg->weights[i] : 1.0);
        if (cfg->vocab_size > 0) {
            double t0 = td_now();
            c->info.ids_checked = 1 + gptds_check_token_ids(c->reader, cfg->vocab_size,
                                                            cfg->vocab_source ? cfg->vocab_source : "the tokenizer",
                                                            cfg->cache_dir, cfg->no_cache);
            c->info.ids_seconds = td_now() - t0;
        }
    }

    for (int s = 0; s < GPTDS_NSPLITS; s++) {
        int64_t want = cfg->num_samples[s];
        int64_t *sizes = td_xcalloc((size_t)ds->n, sizeof *sizes);
        unsigned present = 0;
        for (int i = 0; i < ds->n; i++) {
            int64_t beg[GPTDS_NSPLITS], end[GPTDS_NSPLITS];
            present = gptds_split_range(w, ds->c[i].info.num_documents, beg, end);
            int here = (present >> s) & 1;
            int64_t wanted = want;
            if (ds->blended && want >= 0) /* Megatron's 0.5% margin per blended dataset */
                wanted = (int64_t)ceil((double)want * cfg->weights[i] * 1.005);
            gpt_split_open(&ds->c[i], (gptds_split)s, cfg, here, beg[s], end[s], wanted);
            /* a dataset whose split is empty gives the blend nothing */
            sizes[i] = here && ds->c[i].info.split[s].num_samples > 0 ? (wanted > 0 ? wanted : 0) : 0;
        }
        if (ds->blended) {
            if (want < 0) ds->blend[s].info.size = -1; /* no target size: nothing to blend */
            else blend_split_open(ds, (gptds_split)s, cfg, sizes);
        }
        free(sizes);
    }
    return ds;
}

void gptds_close(gptds *ds)
{
    if (!ds) return;
    for (int i = 0; i < ds->n; i++) {
        component *c = &ds->c[i];
        for (int s = 0; s < GPTDS_NSPLITS; s++) {
            ds_image_free(&c->split[s].img);
            free(c->info.split[s].cache_file);
        }
        dsr_close(c->reader);
        free(c->path);
    }
    for (int s = 0; s < GPTDS_NSPLITS; s++) {
        ds_image_free(&ds->blend[s].img);
        free(ds->blend[s].info.cache_file);
        free(ds->blend[s].info.per_dataset);
    }
    free(ds->c);
    free(ds);
}

/* ------------------------------------------------------------------------------------------ */
/* Accessors and reading                                                                      */

int gptds_seq_length(const gptds *ds) { return ds->seq_length; }
int gptds_num_datasets(const gptds *ds) { return ds->n; }

const gptds_dataset_info *gptds_dataset(const gptds *ds, int i)
{
    TD_ASSERT(i >= 0 && i < ds->n);
    return &ds->c[i].info;
}

const gptds_blend_info *gptds_blend(const gptds *ds, gptds_split s)
{
    TD_ASSERT((unsigned)s < GPTDS_NSPLITS);
    return ds->blended ? &ds->blend[s].info : NULL;
}

int64_t gptds_num_samples(const gptds *ds, gptds_split s)
{
    TD_ASSERT((unsigned)s < GPTDS_NSPLITS);
    if (ds->blended) return ds->blend[s].info.size > 0 ? ds->blend[s].info.size : 0;
    return ds->c[0].info.split[s].num_samples;
}

gptds_indices gptds_get_indices(const gptds *ds, int i, gptds_split s)
{
    TD_ASSERT(i >= 0 && i < ds->n && (unsigned)s < GPTDS_NSPLITS);
    return ds->c[i].split[s].ix;
}

const int32_t *gptds_blend_dataset_index(const gptds *ds, gptds_split s)
{
    return ds->blended ? ds->blend[s].ds_index : NULL;
}

const int64_t *gptds_blend_sample_index(const gptds *ds, gptds_split s)
{
    return ds->blended ? ds->blend[s].ds_sample : NULL;
}

/* Sample idx (before shuffling: shuffle_index maps it) of one dataset: the tokens from sample
 * row j to row j+1 inclusive, across document boundaries. */
static void component_sample(const component *c, gptds_split s, int64_t idx, int seq_length, int32_t *out)
{
    const gptds_indices *ix = &c->split[s].ix;
    TD_ASSERT(idx >= 0 && idx < ix->n_samples);
    int64_t j = ix->shuffle_index[idx];
    const int64_t *row = ix->sample_index + 2 * j;
    int64_t p0 = row[0], o0 = row[1], p1 = row[2], o1 = row[3];
    int64_t want = (int64_t)seq_length + 1, got = 0;
    for (int64_t p = p0; p <= p1; p++) {
        int32_t doc = ix->doc_index[p];
        int64_t from = p == p0 ? o0 : 0;
        int64_t to = p == p1 ? o1 + 1 : c->lens[doc];
        int64_t n = to - from;
        if (n <= 0) continue;
        if (got + n > want)
            td_fatal(1, "%s: %s sample %" PRId64 " spans more than %" PRId64 " tokens: its index cache %s is "
                     "inconsistent; delete it and rerun", c->path, gptds_split_name(s), idx, want,
                     c->info.split[s].cache_file ? c->info.split[s].cache_file : "(in memory)");
        dsr_read(c->reader, doc, from, n, out + got);
        got += n;
    }
    if (got != want)
        td_fatal(1, "%s: %s sample %" PRId64 " has %" PRId64 " tokens, expected %" PRId64 ": its index cache %s is "
                 "inconsistent; delete it and rerun", c->path, gptds_split_name(s), idx, got, want,
                 c->info.split[s].cache_file ? c->info.split[s].cache_file : "(in memory)");
}

void gptds_sample(const gptds *ds, gptds_split s, int64_t idx, int32_t *out)
{
    TD_ASSERT((unsigned)s < GPTDS_NSPLITS);
    int64_t n = gptds_num_samples(ds, s);
    if (idx < 0 || idx >= n) {
        if (n == 0)
            td_fatal(1, "sample %" PRId64 " of the %s split was asked for, but the split is empty (weight 0 in "
                     "--split, no documents, or no samples planned); the caller must skip an empty split",
                     idx, gptds_split_name(s));
        td_fatal(1, "sample %" PRId64 " of the %s split is past its end (%" PRId64 " samples were built for the "
                 "planned --train-iters/--train-samples/--eval-iters); reading past the end is a bug in the caller",
                 idx, gptds_split_name(s), n);
    }
    if (ds->blended) {
        const blend_state *b = &ds->blend[s];
        component_sample(&ds->c[b->ds_index[idx]], s, b->ds_sample[idx], ds->seq_length, out);
    } else {
        component_sample(&ds->c[0], s, idx, ds->seq_length, out);
    }
}

void gptds_micro_batch(const gptds *ds, gptds_split s, int64_t consumed, int m, int b, int dp, int d,
                       int32_t *out)
{
    TD_CHECK(consumed >= 0 && m >= 0 && b >= 1 && dp >= 1 && d >= 0 && d < dp, "this is a bug in the caller",
             "bad micro-batch request: consumed %" PRId64 ", m %d, b %d, dp %d, d %d", consumed, m, b, dp, d);
    int64_t first = consumed + (int64_t)m * b * dp + (int64_t)d * b;
    size_t row = (size_t)ds->seq_length + 1;
    for (int j = 0; j < b; j++) gptds_sample(ds, s, first + j, out + (size_t)j * row);
}
