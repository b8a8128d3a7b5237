/* BERT dataset after Megatron's BertDataset (legacy bert_dataset.py, dataset_utils.py and
 * helpers.cpp build_mapping). Owns the samples mapping of a sentence-level indexed dataset (runs
 * of sentences of one document, with a target length, shuffled), its on-disk cache, and building
 * a training sample from a mapping entry: segments A and B with the sentence-order label,
 * truncation, [CLS]/[SEP], whole-word masking and padding. Every random draw comes from Philox
 * keyed by (seed, purpose, split, sample index), so a sample never depends on rank or layout.
 * See docs/bert.md ("Data"). */
#ifndef TRIDENT_BERT_DATASET_H
#define TRIDENT_BERT_DATASET_H

#include <stdint.h>

#include "trident/gpt_dataset.h"
#include "trident/tokenizer.h"

/* Version of the mapping algorithm; part of every cache key, so a change rebuilds old caches. */
#define BERTDS_ALGO_VERSION 1
/* Megatron's LONG_SENTENCE_LEN: a document (of >= 2 sentences) holding a longer sentence is
 * skipped. */
#define BERTDS_LONG_SENTENCE_LEN 512
/* Megatron's max_ngrams: masked spans of up to this many whole words. */
#define BERTDS_MAX_NGRAMS 3

typedef struct bertds_config {
    const char *path;        /* indexed dataset prefix, sentence level: a document is a run of sequences */
    const char *split;       /* "949,50,1": train,valid,test proportions of the documents */
    const char *cache_dir;   /* folder for the mapping caches; NULL: beside the dataset */
    int no_cache;            /* 1: neither read nor write cache files */
    int seq_length;          /* tokens per sample incl. [CLS] and [SEP]s (>= 5) */
    uint64_t seed;
    int64_t num_samples[GPTDS_NSPLITS]; /* wanted per split; -1 (or 0): one epoch */
    double short_seq_prob;   /* probability of a random target length in [2, seq_length - 3] (0.1) */
    double masked_lm_prob;   /* fraction of tokens to predict (0.15) */
    int binary_head;         /* 1: two segments and the sentence-order label; 0: one segment */
    int vocab_size;          /* token ids lie in [0, vocab_size) (checked); random replacements too */
    const char *vocab_source; /* where vocab_size comes from, for messages; NULL: "the tokenizer" */
    int32_t cls_id, sep_id, mask_id, pad_id;
    const uint8_t *subword;  /* (vocab_size) 1 for a "##" continuation piece; NULL: every token is a word; copied */
} bertds_config;

typedef struct bertds_sample {   /* caller-owned arrays of seq_length */
    int32_t *tokens;   /* [CLS] A [SEP] B [SEP], masked, then pad_id */
    int32_t *types;    /* 0 for [CLS], A and its [SEP]; 1 for B and the last [SEP]; 0 on padding */
    int32_t *labels;   /* the original token at masked positions, -1 elsewhere */
    int32_t length;    /* tokens before the padding */
    int32_t is_random; /* sentence-order label: 1 when A and B were swapped */
} bertds_sample;

typedef struct bertds bertds;

/* Opens the dataset, checks every token id against vocab_size (gptds_check_token_ids, cached),
 * and builds (or loads from cache) the samples mapping of each split. A bad config, a dataset
 * that cannot be opened, or a train split that yields no sample while samples are wanted ends
 * the job with one line naming the flag or file. A missing, corrupt or mismatched cache file is
 * rebuilt (with a warning when it existed) and written atomically. Logs at debug level. */
bertds *bertds_open(const bertds_config *c);
void bertds_close(bertds *ds);

int bertds_seq_length(const bertds *ds);
/* Samples in split s (>= the number asked; 0 for an empty split). */
int64_t bertds_num_samples(const bertds *ds, gptds_split s);

/* Builds sample idx of split s into out (arrays of seq_length). A pure function of the dataset,
 * the config and (s, idx). idx must be below bertds_num_samples (a bug in the caller otherwise:
 * the job ends). Safe to call from several threads at once. */
void bertds_get(const bertds *ds, gptds_split s, int64_t idx, bertds_sample *out);

/* Fills rows[0..b) with micro-batch m of data-parallel rank d, in gptds_micro_batch's order:
 * row j is sample consumed + m*(b*dp) + d*b + j. */
void bertds_micro_batch(const bertds *ds, gptds_split s, int64_t consumed, int m, int b, int dp, int d,
                        bertds_sample *rows);

/* What bertds_open found and did for split s, for tools, logs and tests. */
typedef struct bertds_split_info {
    int64_t doc_begin, doc_end; /* documents [doc_begin, doc_end) of the dataset */
    int64_t samples_wanted;     /* -1: one epoch */
    int64_t num_samples;        /* entries of the mapping */
    int64_t num_epochs;         /* passes over the documents it took */
    const int64_t *mapping;     /* (num_samples, 3): first sentence, last sentence + 1, target length; shuffled */
    const char *cache_file;     /* NULL when not cached */
    int cache_loaded;           /* 1 loaded from cache, 0 built */
} bertds_split_info;
bertds_split_info bertds_info(const bertds *ds, gptds_split s);

/* BERT's special tokens and "##" continuation pieces (whole-word masking), from a WordPiece
 * tokenizer. */
typedef struct bertds_vocab {
    int32_t cls, sep, mask, pad; /* [CLS], [SEP], [MASK], [PAD] */
    uint8_t *subword;            /* (vocab) 1 for a "##" piece; free() it */
} bertds_vocab;
/* 0 with *out filled; -1 with one line in msg when the tokenizer is not WordPiece or lacks one of
 * the special tokens. */
int bertds_vocab_get(const tok_tokenizer *t, bertds_vocab *out, char *msg, size_t msglen);

#endif
