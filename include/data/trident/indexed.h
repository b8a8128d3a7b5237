/* Megatron indexed dataset (.bin + .idx, "MMIDIDX", version 1). Owns the byte format: a
 * writer that builds a dataset atomically (temporary names, fsync, rename) and an mmap
 * reader that validates the header and every bound before anything is read. */
#ifndef TRIDENT_INDEXED_H
#define TRIDENT_INDEXED_H

#include <stddef.h>
#include <stdint.h>

/* Megatron's dtype codes. */
enum idx_dtype { IDX_U8 = 1, IDX_I8 = 2, IDX_I16 = 3, IDX_I32 = 4, IDX_I64 = 5, IDX_F64 = 6, IDX_F32 = 7, IDX_U16 = 8 };

/* Megatron's choice: uint16 when the vocabulary has fewer than 65500 ids, else int32. */
enum idx_dtype idx_dtype_for_vocab(int vocab_size);
size_t idx_dtype_size(enum idx_dtype t);
/* numpy's name of a dtype code ("uint16", ...), "unknown" for a code Megatron does not define. */
const char *idx_dtype_name(int code);

typedef struct idx_writer idx_writer;

/* Starts PREFIX.bin / PREFIX.idx under temporary names. NULL with a message in err on failure. */
idx_writer *idx_writer_open(const char *prefix, enum idx_dtype dtype, char *err, size_t errlen);
/* Appends one sequence of n tokens to the current document. Returns 0, or -1 with err set (I/O
 * error, a token that does not fit the dtype). */
int idx_writer_add_sequence(idx_writer *w, const int32_t *ids, size_t n, char *err, size_t errlen);
/* Ends the current document: the sequences added since the previous end (none: an empty
 * document, as Megatron writes for a text without tokens). */
void idx_writer_end_document(idx_writer *w);
/* Appends one document of one sequence of n tokens (add_sequence + end_document). */
int idx_writer_add(idx_writer *w, const int32_t *ids, size_t n, char *err, size_t errlen);
/* Ends a document still open, writes the index, fsyncs both files and renames them into place.
 * Frees w. 0 or -1 + err. */
int idx_writer_finish(idx_writer *w, char *err, size_t errlen);
/* Removes the temporary files and frees w (a failed run leaves nothing behind). */
void idx_writer_abort(idx_writer *w);

typedef struct idx_dataset idx_dataset;

/* Maps PREFIX.bin and PREFIX.idx and validates them: magic, version, dtype, counts against
 * file sizes, every pointer and length inside .bin, document indices increasing from 0 and
 * ending at the sequence count. NULL with one line in err when anything is wrong. */
idx_dataset *idx_open(const char *prefix, char *err, size_t errlen);
void idx_close(idx_dataset *d);

int64_t idx_num_sequences(const idx_dataset *d);
int64_t idx_num_documents(const idx_dataset *d); /* documents (doc_idx has this + 1 entries) */
enum idx_dtype idx_dtype(const idx_dataset *d);
/* Length in tokens of sequence i. */
int32_t idx_seq_len(const idx_dataset *d, int64_t i);
const int32_t *idx_seq_lens(const idx_dataset *d);   /* all lengths (the mapped array) */
const int64_t *idx_doc_index(const idx_dataset *d);   /* num_documents + 1 entries */
int64_t idx_num_tokens(const idx_dataset *d);
/* Copies tokens [offset, offset+n) of sequence i into out as int32; the range must lie in the
 * sequence (asserted). */
void idx_read(const idx_dataset *d, int64_t i, int64_t offset, int64_t n, int32_t *out);
/* Scans every token of every sequence (in parallel, with OpenMP) for an id outside [0, limit).
 * Returns -1 when there is none; else the first sequence holding one, with *offset the token's
 * offset in it and *id its value (the first such token in file order). */
int64_t idx_find_id_outside(const idx_dataset *d, int64_t limit, int64_t *offset, int32_t *id);
/* Byte offset in PREFIX.bin of token `offset` of sequence i. */
int64_t idx_token_byte_offset(const idx_dataset *d, int64_t i, int64_t offset);

#endif
