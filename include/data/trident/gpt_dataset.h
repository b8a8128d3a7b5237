/* GPT dataset after Megatron's GPTDataset and BlendedDataset. Owns the train/valid/test split of
 * each indexed dataset's documents, the per-split document, sample and shuffle indices (shuffled
 * with Philox keyed by seed, purpose, split and epoch group, never by rank), the blend indices of
 * a weighted --data-path, their on-disk cache, and reading samples and micro-batches by index. */
#ifndef TRIDENT_GPT_DATASET_H
#define TRIDENT_GPT_DATASET_H

#include <stddef.h>
#include <stdint.h>

#include "trident/args.h"
#include "trident/dataset_reader.h"

typedef enum { GPTDS_TRAIN = 0, GPTDS_VALID = 1, GPTDS_TEST = 2 } gptds_split;
#define GPTDS_NSPLITS 3

/* Version of the index algorithms; part of every cache key, so a change rebuilds old caches. */
#define GPTDS_ALGO_VERSION 1

typedef struct gptds_config {
    int n;                 /* datasets in the blend (>= 1) */
    char **paths;          /* (n) indexed-dataset prefixes (PREFIX.bin / PREFIX.idx) */
    double *weights;       /* (n) normalised blend weights, or NULL: one dataset, no blend */
    char *split;           /* "949,50,1": train,valid,test proportions of the documents */
    char *cache_dir;       /* folder for index caches; NULL: beside each dataset */
    int seq_length;        /* tokens per sample; a sample holds seq_length + 1 */
    uint64_t seed;
    int64_t num_samples[GPTDS_NSPLITS]; /* samples wanted per split; -1: one epoch (Megatron's None) */
    int no_cache;          /* 1: neither read nor write cache files */
    int vocab_size;        /* every token id must be below it (checked once, cached); 0: not checked */
    const char *vocab_source; /* where vocab_size comes from, for messages ("--vocab-file F"); not owned */
} gptds_config;

/* Megatron's get_train_valid_test_num_samples: train = train_samples if > 0 else
 * train_iters * global_batch; with --train-samples, train_iters = train_samples / global_batch;
 * valid = (train_iters / eval_interval + 1) * eval_iters * global_batch;
 * test = eval_iters * global_batch. */
void gptds_target_samples(int64_t train_iters, int64_t train_samples, int64_t eval_interval, int64_t eval_iters,
                          int64_t global_batch, int64_t out[GPTDS_NSPLITS]);

/* Fills cfg from --data-path, --split, --data-cache-path, --seq-length, --seed and the sample
 * counts `num_samples` (see gptds_target_samples; NULL: one epoch per split). A malformed
 * --data-path or --split is a usage error (exit 2). vocab_size is left 0 (the caller sets it
 * with the tokenizer's). Free with gptds_config_free. */
void gptds_config_from_args(gptds_config *cfg, const td_args *a, const int64_t *num_samples);
void gptds_config_free(gptds_config *cfg);

/* Parses a Megatron --split string ("949,50,1", "99,1", "1/0/0") into normalised weights
 * (missing entries are 0). Returns 0, or -1 with a reason in err. */
int gptds_parse_split(const char *split, double w[GPTDS_NSPLITS], char *err, size_t errlen);
/* Megatron's split bookends over n documents: split s holds [beg[s], end[s]), the cumulative
 * weights times n rounded half to even (Python's round). Returns a bit per split that exists: a
 * split whose bookends coincide (weight 0) does not, and gets beg == end == 0. */
/* The documents [*beg, *end) of the split called `name` ("train", "valid", "test"; "all": every
 * one) of dataset `path` of n documents under --split `split`, as gptds_split_range cuts them.
 * Returns 0, or -1 with one line in err (a usage error: the --split string is bad, or leaves that
 * split empty). */
int gptds_split_docs(const char *split, const char *name, const char *path, int64_t n, int64_t *beg, int64_t *end,
                     char *err, size_t errlen);
unsigned gptds_split_range(const double w[GPTDS_NSPLITS], int64_t n, int64_t beg[GPTDS_NSPLITS],
                           int64_t end[GPTDS_NSPLITS]);

typedef struct gptds gptds;

/* Opens every dataset of cfg and builds (or loads from cache) the indices of all three splits.
 * With cfg->vocab_size, first checks every token id of every dataset against it
 * (gptds_check_token_ids). A dataset that cannot be opened, holds an id outside the vocabulary,
 * or has a split with too few tokens for the samples asked of it, ends the job with one line
 * naming it. A cache file that is missing, corrupt or for other
 * inputs is rebuilt (with a warning when it existed). Safe to call from several processes at
 * once (unique temporaries, atomic rename); a trainer opens on one rank per cache folder first,
 * so that the others load (src/train/shared_fs.c). Logs what it did at info level. */
gptds *gptds_open(const gptds_config *cfg);
void gptds_close(gptds *ds);
/* The folder that the index caches of dataset i of cfg go into (cfg->cache_dir, or the folder of
 * paths[i]; BERT's dataset uses the same), td_xmalloc'ed; NULL with no_cache. */
char *gptds_cache_dir(const gptds_config *cfg, int i);

/* Checks every token id of the dataset r (dsr_open) against [0, vocab),
 * scanning in parallel (OpenMP). A passing check is remembered in a cache file beside the
 * dataset (or in cache_dir; none when cache_dir is "" or no_cache), keyed by the vocabulary
 * size, the token file's (the .bin's) size and modification time and the document lengths, so the next open
 * costs nothing (a .bin modified less than 2 s ago gets none: a cache written that soon after it is
 * not trusted, as a rewrite within one tick of the clock keeps the mtime). An id outside the vocabulary ends the job (exit 1) with one line naming the
 * file, the document and token offset (and byte offset in the token file), the id and the vocabulary
 * size; vocab_source says where the size came from ("--vocab-file F"). Returns 1 when the result
 * came from the cache, 0 when it was scanned. */
int gptds_check_token_ids(const dsr_reader *r, int vocab, const char *vocab_source, const char *cache_dir,
                          int no_cache);

int gptds_seq_length(const gptds *ds);
/* Samples available in split s (>= the number asked; 0 for an empty split). */
int64_t gptds_num_samples(const gptds *ds, gptds_split s);

/* Writes sample `idx` of split s: seq_length + 1 int32 tokens (inputs are out[0..S), labels
 * out[1..S]). idx must be below gptds_num_samples: a request past the end is a bug in the
 * caller and ends the job (it never wraps). */
void gptds_sample(const gptds *ds, gptds_split s, int64_t idx, int32_t *out);

/* Fills out (b, seq_length + 1) with micro-batch m of data-parallel rank d, in Megatron's
 * MegatronPretrainingSampler order: row j is sample consumed + m*(b*dp) + d*b + j. Over all
 * d < dp and m < global_batch/(b*dp), one iteration reads exactly samples
 * [consumed, consumed + global_batch), whatever the layout. */
void gptds_micro_batch(const gptds *ds, gptds_split s, int64_t consumed, int m, int b, int dp, int d,
                       int32_t *out);

/* What gptds_open found and did, for `trident data-info` and logs. */
typedef struct gptds_split_info {
    int64_t doc_begin, doc_end; /* documents [doc_begin, doc_end) of the dataset */
    int64_t num_tokens;         /* tokens in those documents (one epoch) */
    int64_t samples_wanted;     /* -1: one epoch */
    int64_t num_samples;        /* samples built (>= samples_wanted) */
    int64_t num_epochs;
    int separate_final_epoch;   /* Megatron's rule: last epoch shuffled on its own */
    char *cache_file;           /* NULL when not cached */
    int cache_loaded;           /* 1 loaded from cache, 0 built */
    double seconds;             /* time to build or load */
} gptds_split_info;

typedef struct gptds_dataset_info {
    const char *path;
    double weight;              /* normalised; 1 without a blend */
    const dsr_reader *reader;   /* the dataset's tokens, opened */
    int64_t num_documents;      /* sequences in the dataset (a GPT document is one sequence) */
    int64_t num_tokens;
    int32_t min_len, max_len;
    double mean_len;
    int ids_checked;            /* token ids against the vocabulary: 0 not checked, 1 scanned, 2 cached */
    double ids_seconds;         /* time the check took */
    gptds_split_info split[GPTDS_NSPLITS];
} gptds_dataset_info;

typedef struct gptds_blend_info {
    int64_t size;               /* samples of the blended split (0: empty) */
    char *cache_file;
    int cache_loaded;
    double seconds;
    int64_t *per_dataset;       /* (n) samples drawn from each dataset */
} gptds_blend_info;

int gptds_num_datasets(const gptds *ds);
const gptds_dataset_info *gptds_dataset(const gptds *ds, int i);
/* NULL when cfg had no weights (a single dataset, no blend). */
const gptds_blend_info *gptds_blend(const gptds *ds, gptds_split s);
const char *gptds_split_name(gptds_split s);

/* Read-only views of the indices of dataset i, split s (for tests and tools). */
typedef struct gptds_indices {
    int64_t n_doc;                /* entries of doc_index */
    const int32_t *doc_index;     /* (n_doc) document ids, epochs repeated and shuffled */
    int64_t n_samples;            /* sample_index has n_samples + 1 rows */
    const int64_t *sample_index;  /* (n_samples + 1, 2): (doc_index position, token offset) */
    const int64_t *shuffle_index; /* (n_samples) a permutation of [0, n_samples) */
} gptds_indices;
gptds_indices gptds_get_indices(const gptds *ds, int i, gptds_split s);
/* Blend views of split s: (size) dataset index and per-dataset sample index; NULL without blend. */
const int32_t *gptds_blend_dataset_index(const gptds *ds, gptds_split s);
const int64_t *gptds_blend_sample_index(const gptds *ds, gptds_split s);

/* Megatron's greedy blend rule (build_blending_indices): sample k goes to the dataset whose
 * weight * max(k, 1) - count is largest (first on ties); ds_sample[k] is that dataset's count
 * before the draw. Exposed for tests. */
void gptds_build_blend_indices(const double *weights, int n, int64_t size, int32_t *ds_index, int64_t *ds_sample);
/* Megatron's normalize(): w[i] / numpy.sum(w), the sum taken in numpy's pairwise order so the
 * weights match Megatron's bit for bit. */
void gptds_normalize(double *w, int n);
double gptds_np_sum(const double *a, int64_t n);

#endif
