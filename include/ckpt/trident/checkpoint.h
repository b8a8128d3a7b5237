/* Distributed checkpoints. Owns the on-disk layout of a saved run — DIR/iter_NNNNNNN/ with
 * meta.json and one model and one optimizer safetensors shard per model-parallel position,
 * whose entries are named by logical tensor with the slice they hold and a CRC32 — the
 * crash-safe save (shards fsynced, folder renamed into place, latest_checkpointed_iteration.txt
 * replaced last), pruning, and reading any slice of any logical tensor whatever layout wrote
 * it (resharding). See docs/checkpoints.md. */
#ifndef TRIDENT_CHECKPOINT_H
#define TRIDENT_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "trident/args.h"
#include "trident/data_parallel.h"
#include "trident/gpt.h"
#include "trident/parallel_state.h"

/* Version of the layout written (2 with optimizer shards per data-parallel rank, else 1); a
 * checkpoint with a larger one is refused. */
#define CKPT_FORMAT_VERSION 2
#define CKPT_LATEST "latest_checkpointed_iteration.txt"
#define CKPT_RUN_ID_LEN 16

/* Where a run stands: everything besides tensors that exact resumption needs. Randomness is
 * counter-based (init, dropout and data order are functions of the seed and logical
 * coordinates), so the seed is the whole RNG state. */
typedef struct ckpt_progress {
    int64_t iteration;      /* iterations done (the Adam step count) */
    int64_t consumed_train; /* training samples consumed */
    int64_t consumed_valid; /* validation samples consumed */
    uint64_t seed;
    /* mixed precision (meta.json "skipped_iterations", "loss_scale"; absent: 0, none) */
    int64_t skipped;        /* iterations whose step was skipped by an overflow: Adam steps = iteration - skipped */
    int has_loss_scale;     /* the run had a loss scale; then: */
    double loss_scale;
    int64_t growth_tracker;
    int hysteresis_tracker;
    /* The run's identity (meta.json "run_id", and every shard's __metadata__ with its iteration):
     * made when a run starts from scratch, kept by every resume; "" for checkpoints written
     * before run ids (they load as before). */
    char run_id[CKPT_RUN_ID_LEN + 1];
} ckpt_progress;

/* A new run id: CKPT_RUN_ID_LEN hex digits of the system's randomness (getrandom; the time and
 * pid when that fails). */
void ckpt_new_run_id(char out[CKPT_RUN_ID_LEN + 1]);

/* What one rank holds: its model chunks (virtual stages) and their Adam moments. */
typedef struct ckpt_model {
    const ps_state *ps;
    int nchunks;
    gpt_model **chunks;          /* chunk k is virtual stage k * pp + pp_rank */
    float **adam_m, **adam_v;    /* per chunk, laid out like its params; NULL: no optimizer state */
    /* The distributed optimizer's shards, or NULL: chunk k's moments hold buffer ranges
     * shard_ranges[k][0 .. nshard_ranges[k]) in shard order (data_parallel); every
     * data-parallel rank writes its own optimizer shard, and a load keeps only those ranges. */
    const dp_range *const *shard_ranges;
    const int *nshard_ranges;
} ckpt_model;

/* Which part of a logical tensor a buffer holds. Dimension `dim` (-1: none; the tensor is
 * whole) is `blocks` equal blocks, and [start, start + len) of every block is held; the local
 * buffer is row-major over the held indices (block by block). A 1-D tensor is (n, 1). */
typedef struct ckpt_slice {
    int ndim;
    int64_t shape[2]; /* logical shape */
    int dim, blocks;
    int64_t start, len;
    int64_t r0, r1;   /* expert parallelism: only rows [r0, r1) of dim 0 (whole blocks of a dim-0 split;
                       * r1 0: every row) */
} ckpt_slice;

/* The slice a model's table entry holds. */
ckpt_slice ckpt_slice_of(const gpt_tensor_info *t);
/* The whole of a tensor of logical shape (d0) or (d0, d1) (d1 = 0 for 1-D). */
ckpt_slice ckpt_slice_whole(int64_t d0, int64_t d1);
/* Elements a buffer holding slice s has. */
int64_t ckpt_slice_numel(const ckpt_slice *s);
/* Copies slice s of a whole row-major tensor (s->shape) into dst (ckpt_slice_numel(s) floats, laid
 * out as a buffer holding s), an expert-parallel rank's rows [s->r0, s->r1) of it when s->r1. */
void ckpt_slice_take(const ckpt_slice *s, const float *whole, float *dst);

/* Kinds of state in a checkpoint. */
typedef enum { CKPT_PARAMS = 0, CKPT_EXP_AVG = 1, CKPT_EXP_AVG_SQ = 2 } ckpt_kind;

typedef struct ckpt_file {
    char *name;        /* in the iteration folder */
    int optimizer;     /* 0 model, 1 optimizer shard */
    int tp_rank, pp_rank;
    int dp_rank;       /* an optimizer shard of one data-parallel rank (distributed optimizer), or -1 */
    int ep_rank;       /* otherwise: the expert-parallel rank whose experts it holds (0: and the rest) */
    uint64_t bytes;
} ckpt_file;

/* A checkpoint's meta.json. */
typedef struct ckpt_meta {
    char *dir;               /* the iteration folder */
    int format_version;
    char *version;           /* trident version that wrote it */
    ckpt_progress progress;
    int tp, pp, dp, vp;      /* the layout that wrote it */
    int ep;                  /* its expert parallelism (1 without) */
    int cp;                  /* its context parallelism (1 without): a run setting, not the model's; a
                              * distributed optimizer's state is in dp x cp shards */
    gpt_config model;        /* seq: the training sequence length; seed: progress.seed */
    int has_optimizer;
    int nfiles;
    ckpt_file *files;
    char *args_json;         /* the "args" object, as JSON text */
    char *note;              /* how ckpt_find chose it when not as latest says (print it), or NULL */
} ckpt_meta;

/* 1 for the tensors with a row per vocabulary entry (the word embedding, an untied output
 * layer): their padded rows may differ between runs, so reads take the rows both have. */
int ckpt_is_vocab_tensor(const char *name);

/* Finds the checkpoint at `path`: an iteration folder (holding meta.json) or a save folder —
 * the iteration its latest_checkpointed_iteration.txt names, or a newer complete iter_NNNNNNN
 * folder that verifies (a save interrupted before latest was updated); without a latest file,
 * the newest folder that verifies (every CRC32 checked). m->note then says which and why.
 * meta.json is checked against the folder's name (iteration) and every shard's header: each
 * tensor's logical shape must be the one the model config makes, and all must be there; each
 * shard's iteration and run id must be meta.json's (neither present: written before run ids).
 * Returns 0 with *out filled; 1 when `path` holds no checkpoint at all (no such folder, or no
 * latest file, meta.json or iter_* folder); -1 with one line in err when it holds a bad one
 * (unreadable or malformed latest file or meta.json, a newer format version, a missing shard or
 * one of the wrong size, a shard disagreeing with meta.json, or no folder that verifies).
 * Free with ckpt_meta_free. */
int ckpt_find(const char *path, ckpt_meta *out, char *err, size_t errlen);
void ckpt_meta_free(ckpt_meta *m);

/* The model config the model flags of `a` make, for a tokenizer of `vocab` tokens and `tp`
 * tensor-parallel ranks (defaults: FFN 4h, positions = --seq-length). */
gpt_config ckpt_config_of_args(const td_args *a, int vocab, int tp);

/* Holds the model flags of `a` against checkpoint m, setting by setting (GPT_CONFIG_KEYS), before
 * anything is allocated. With a->use_checkpoint_args the architecture, the sequence length and
 * the padded vocabulary come from the checkpoint. Without it, an architecture flag given on the
 * command line that differs is an error naming the flag, its value and the checkpoint's; a flag
 * not given takes the checkpoint's value (so do --seq-length and the padding when not given).
 * The tokenizer's `vocab` (<= 0: not checked) must equal the checkpoint's. Updates a; logs what
 * came from the checkpoint when `log`. Returns 0, or -1 with one line in msg (a usage error). */
int ckpt_args_reconcile(td_args *a, const ckpt_meta *m, int vocab, int tp, int log, char *msg, size_t msglen);

/* The data flags that define eval's documents, from the training run's flags in m's meta.json
 * ("args") where not given: --data-path (one prefix, readable here) and, unless --split-name is
 * "all", --split, so "valid" is the split the training held out (the seed plays no part: eval
 * takes the documents in order). Call after ckpt_args_reconcile. Updates a; `taken` lists what
 * came from the checkpoint for a log line ("--data-path P, --split S, --seq-length N": the
 * sequence length too when not given, which reconcile took; with --sft, the training run's
 * --sft-truncation-method unless given), "" for nothing. Returns 0, or -1
 * with one line in err (a usage error). */
int ckpt_args_eval_data(td_args *a, const ckpt_meta *m, char *taken, size_t takenlen, char *err, size_t errlen);

/* The model config stored in a checkpoint, for a run of `tp` ranks per layer and sequence
 * length `seq`: the checkpoint's padded vocabulary when tp divides it, else the vocabulary
 * padded to a multiple of divisible_by x tp. Dropout off. */
gpt_config ckpt_model_config(const ckpt_meta *m, int tp, int seq, int divisible_by);

/* ---- reading ---- */

typedef struct ckpt_reader ckpt_reader;

/* Opens every shard of the checkpoint (headers parsed, data mapped) and indexes their entries.
 * NULL with err naming the file on a malformed shard or inconsistent slices. */
ckpt_reader *ckpt_reader_open(const ckpt_meta *m, char *err, size_t errlen);
void ckpt_reader_close(ckpt_reader *r);

/* Fills dst, a buffer holding slice `want` of logical tensor `name`, with state `kind` from
 * whichever shards hold the parts of it, checking the CRC32 of every entry it reads. The
 * logical shapes must agree, except for the word embedding's padded rows: rows past the
 * checkpoint's are copies of its last row (Megatron's rule), rows past this one's are dropped.
 * Returns 0, or -1 with one line in err (the tensor is missing or not wholly covered, a shape
 * differs — naming both — or a CRC mismatch naming the file and entry). */
int ckpt_read(ckpt_reader *r, ckpt_kind kind, const char *name, const ckpt_slice *want, float *dst, char *err,
              size_t errlen);

/* Loads every chunk of `m` (parameters, and Adam moments when load_optimizer and m has them)
 * from the checkpoint (this rank only; no communication). 0, or -1 with err. */
int ckpt_load(const ckpt_meta *meta, const ckpt_model *m, int load_optimizer, char *err, size_t errlen);

/* Logical tensors of a checkpoint, in the order first met (model shards in file order). */
typedef struct ckpt_tensor_list {
    int n;
    char **names;
    ckpt_slice *shapes; /* whole slices: logical shapes */
} ckpt_tensor_list;
void ckpt_list_tensors(const ckpt_reader *r, ckpt_tensor_list *out);
void ckpt_tensor_list_free(ckpt_tensor_list *l);

/* Verifies the CRC32 of every entry of every shard. Calls report (if not NULL) per entry.
 * Returns the number of bad entries; err gets the first. */
int ckpt_verify(ckpt_reader *r, void (*report)(void *user, const char *file, const char *entry, int ok),
                void *user, char *err, size_t errlen);

/* ---- saving ---- */

typedef struct ckpt_save_stats {
    double seconds;   /* wall time of the whole save, every rank done */
    uint64_t bytes;   /* bytes of all shards */
} ckpt_save_stats;

/* Saves the state of every rank of ps->world (collective): dp rank 0 of each model-parallel
 * position writes its model shard (and optimizer shard when m has moments; with
 * m->shard_ranges every dp rank writes its own optimizer shard) into
 * DIR/iter_NNNNNNN.tmp, every file fsynced; then world rank 0 writes meta.json (the layout,
 * progress, model config and `args_json`), fsyncs the folder, renames it to iter_NNNNNNN
 * (exchanging it with an old one of that iteration), and replaces DIR/CKPT_LATEST by an atomic
 * rename. keep_last > 0 then removes all but the keep_last newest checkpoints at or below this
 * iteration. An I/O error ends the job naming the file, after removing the partial iter_NNNNNNN.tmp;
 * the previous checkpoint stays intact.
 * --debug-save-delay-ms (td_debug_get()->save_delay_ms, tests only) sleeps that long after each
 * shard and before the renames. */
void ckpt_save(const char *dir, const ckpt_model *m, const ckpt_progress *p, const char *args_json, int keep_last,
               ckpt_save_stats *stats);

/* Checks that a run saving into `dir` overwrites or outdates no checkpoint it did not load: no
 * iter_NNNNNNN folder there is at or past `start` (the iteration the run continues from), except
 * `loaded` itself (the folder loaded, or NULL for a run from scratch). 0, or -1 with one line in
 * err naming the folder and what to do. */
int ckpt_check_save_dir(const char *dir, int64_t start, const char *loaded, char *err, size_t errlen);

/* The lock file a training run holds in its --save folder (docs/checkpoints.md). */
#define CKPT_LOCK_FILE ".trident-save.lock"

/* Takes the --save folder `dir` for this process (creating the folder): an exclusive flock on
 * DIR/CKPT_LOCK_FILE, held until the process ends however it ends (the kernel releases it; no
 * stale lock), the file naming the holder (host, pid, start time). One rank of a job calls it.
 * Returns 0 when held; -1 with one line in err when another process holds it (naming it) or the
 * folder or the lock file cannot be created; 1 with the reason in err when the file system
 * does not support flock (nothing is held: warn and go on). */
int ckpt_lock_save_dir(const char *dir, char *err, size_t errlen);

/* The iteration folder name of `iteration` in `dir`. */
void ckpt_iter_dir(char *out, size_t len, const char *dir, int64_t iteration);

#endif
