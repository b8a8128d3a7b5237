/* Preprocessing, after Megatron's tools/preprocess_data.py. Owns reading the inputs (plain, .gz,
 * .zst), loose JSON lines (one document per line) or whole text files (one document per file),
 * the worker threads that tokenize batches of documents in parallel, and writing one indexed
 * dataset per JSON key, PREFIX_<key>_document.{bin,idx}, in input order; with split_sentences
 * (sentence-pair data) each document is cut into sentences (sent_split), one sequence each, in
 * PREFIX_<key>_sentence.{bin,idx}. */
#ifndef TRIDENT_PREPROCESS_H
#define TRIDENT_PREPROCESS_H

#include <stddef.h>
#include <stdint.h>

#include "trident/tokenizer.h"

typedef struct prep_config {
    const char *const *inputs; /* files, read in this order */
    int n_inputs;
    const char *const *keys; /* JSON keys; one dataset each (text format: exactly one, naming it) */
    int n_keys;
    int text_format;           /* 1: each input file is one document; 0: one JSON object per line */
    const char *output_prefix; /* datasets go to PREFIX_<key>_document.{bin,idx} */
    int split_sentences;       /* one sequence per sentence, to PREFIX_<key>_sentence.{bin,idx} */
    int append_eod;            /* append the tokenizer's EOD to every non-empty document (its last sentence) */
    int workers;               /* tokenizer threads, >= 1 */
    int skip_bad_lines;        /* count and skip bad JSON lines instead of failing */
    int64_t log_every;         /* documents between progress lines on stderr; 0: none */
    size_t batch_bytes;        /* input text per work batch; 0: 256 KiB */
    int quiet;                 /* 1: no progress, warnings or summary on stderr */
} prep_config;

typedef struct prep_stats {
    int64_t documents; /* documents read (JSON lines that parsed, or files) */
    int64_t written;   /* documents written, summed over keys */
    int64_t empty;     /* documents skipped because they have no tokens, summed over keys */
    int64_t sentences; /* with split_sentences: sentences written (sequences), summed over keys */
    int64_t bad_lines; /* lines skipped by --skip-bad-lines */
    int64_t blank_lines;
    int64_t tokens; /* tokens written, summed over keys */
    int64_t bytes;  /* input bytes after decompression */
    double seconds;
} prep_stats;

/* Tokenizes every input with `tok` and writes the datasets atomically (nothing under the final
 * names unless the whole run succeeds). Progress, warnings and a summary go to stderr unless
 * c->quiet. Returns 0, or -1 with one line in err naming the file (and line) and what to do.
 * stats may be NULL. */
int prep_run(const prep_config *c, const tok_tokenizer *tok, prep_stats *stats, char *err, size_t errlen);

/* "PREFIX_<key>_document" ("PREFIX_<key>_sentence" with split_sentences), the dataset prefix
 * preprocess writes for `key` (caller frees). */
char *prep_dataset_prefix(const char *output_prefix, const char *key, int split_sentences);

/* Growable byte string. */
typedef struct {
    char *s;
    size_t n, cap;
} prep_str;

/* Parses one JSON line (Python json.loads rules: NaN/Infinity allowed, raw control characters in
 * strings rejected, last duplicate key wins) that must be an object, and decodes the string value
 * of each keys[k] into out[k] (UTF-8; \u escapes and surrogate pairs decoded, \u0000 kept).
 * Returns 0, or -1 with the reason in err (no file or line: the caller adds them). */
int prep_json_extract(const char *line, size_t len, const char *const *keys, int n_keys, prep_str *out, char *err,
                    size_t errlen);
void prep_str_free(prep_str *s);

#endif
