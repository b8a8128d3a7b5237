/* The dataset-reader seam: what the GPT and BERT datasets and eval read from a tokenized dataset on
 * disk, behind one opaque handle, whatever its format. A format is a `dsr_ops` (its own file in
 * src/data/, as `indexed.c` is Megatron's .bin/.idx) and one row of the registry in
 * `dataset_reader.c`; the callers name no format. See docs/architecture.md, "A dataset format". */
#ifndef TRIDENT_DATASET_READER_H
#define TRIDENT_DATASET_READER_H

#include <stddef.h>
#include <stdint.h>

/* A dataset is sequences of tokens grouped into documents (a document is one sequence or, for
 * sentence-split data, its sentences in order). Every entry reads an opened handle. */
typedef struct dsr_ops {
    const char *name; /* the format, as the docs call it ("indexed") */
    /* 0 if PREFIX holds a dataset of this format (its file is there and readable), else the
     * errno that says why not, with `file` (filelen bytes) the file it looked for; reads no more
     * than it needs to tell */
    int (*probe)(const char *prefix, char *file, size_t filelen);
    /* Opens and validates PREFIX: NULL with one line in err when anything is wrong. */
    void *(*open)(const char *prefix, char *err, size_t errlen);
    void (*close)(void *h);
    int64_t (*num_sequences)(const void *h);
    int64_t (*num_documents)(const void *h);
    const int32_t *(*seq_lens)(const void *h);  /* (num_sequences) tokens in each sequence */
    const int64_t *(*doc_index)(const void *h); /* (num_documents + 1) first sequence of each */
    int64_t (*num_tokens)(const void *h);
    /* out (n) = tokens [offset, offset + n) of sequence i as int32; the range lies in it */
    void (*read)(const void *h, int64_t i, int64_t offset, int64_t n, int32_t *out);
    /* the first sequence holding an id outside [0, limit) (its offset and id), or -1 */
    int64_t (*find_id_outside)(const void *h, int64_t limit, int64_t *offset, int32_t *id);
    /* the file holding the tokens (the one a cache checks the size and time of, and an error
     * about a token names), as a new string */
    char *(*token_file)(const char *prefix);
    /* byte offset in token_file of token `offset` of sequence i */
    int64_t (*token_byte_offset)(const void *h, int64_t i, int64_t offset);
    /* how a token is stored ("uint16", ...): part of what a cache keys on */
    const char *(*token_type)(const void *h);
} dsr_ops;

typedef struct dsr_reader dsr_reader;

/* Opens the dataset at PREFIX with the first format of the registry whose probe knows it (none:
 * the first format's, whose error then says what is missing). NULL with one line in err. */
dsr_reader *dsr_open(const char *prefix, char *err, size_t errlen);
/* 0 if a format of the registry knows PREFIX; else the first format's errno, with `file` the file
 * it looked for (for a message: "FILE cannot be read: strerror"). Opens nothing. */
int dsr_probe(const char *prefix, char *file, size_t filelen);
void dsr_close(dsr_reader *r);

const char *dsr_format(const dsr_reader *r);   /* its format's name */
const char *dsr_prefix(const dsr_reader *r);   /* the PREFIX it was opened from */
int64_t dsr_num_sequences(const dsr_reader *r);
int64_t dsr_num_documents(const dsr_reader *r);
int32_t dsr_seq_len(const dsr_reader *r, int64_t i);
const int32_t *dsr_seq_lens(const dsr_reader *r); /* (num_sequences) */
const int64_t *dsr_doc_index(const dsr_reader *r); /* (num_documents + 1) */
int64_t dsr_num_tokens(const dsr_reader *r);
/* out (n) = tokens [offset, offset + n) of sequence i; the range must lie in the sequence */
void dsr_read(const dsr_reader *r, int64_t i, int64_t offset, int64_t n, int32_t *out);
/* Scans every token for an id outside [0, limit): -1 when there is none; else the first sequence
 * holding one, with *offset the token's offset in it and *id its value. */
int64_t dsr_find_id_outside(const dsr_reader *r, int64_t limit, int64_t *offset, int32_t *id);
/* The file of PREFIX's tokens ("PREFIX.bin" for the indexed format), as a new string, and the
 * byte offset in it of token `offset` of sequence i. */
char *dsr_token_file(const dsr_reader *r);
int64_t dsr_token_byte_offset(const dsr_reader *r, int64_t i, int64_t offset);
/* How a token is stored ("uint16", "int32", ...). */
const char *dsr_token_type(const dsr_reader *r);

#endif
