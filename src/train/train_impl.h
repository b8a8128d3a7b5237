/* The trainer's private header: the state of one training run, grouped by the unit that sets it
 * up and owns it, and the functions the train floor's units give each other. Only src/train/
 * includes it. Who calls whom (no unit calls back up; farm-studio look src/train: no circle):
 *
 *   trainer.c  (trainer.h: trainer_run: flags, lock, signals, set-up in order, resume, the loop,
 *              teardown; trainer_validate and trainer_peak_rss pass to validate.c and report.c)
 *     -> validate.c  (the flags against the rules; the pipeline split)
 *     -> model.c     (rank grid, backend, model chunks + data parallelism)      -> validate
 *     -> batches.c   (the family's batch source, the iteration, evaluation)     -> model
 *     -> optim.c     (AdamW, learning-rate schedule, loss scale)
 *     -> ckpt.c      (--load, --save, the exit conditions and signals)           -> model
 *     -> report.c    (start lines, metrics, TensorBoard, MFU, breakdown, memory) -> validate
 *     -> loop.c      (the iterations) -> batches, optim, ckpt, report, dump
 *   dump.c (--dump-params) -> model. */
#ifndef TRIDENT_TRAIN_IMPL_H
#define TRIDENT_TRAIN_IMPL_H

#include <stdint.h>

#include "backend.h"
#include "trident/batch_source.h"
#include "breakdown.h"
#include "trident/checkpoint.h"
#include "trident/data_parallel.h"
#include "trident/gpt.h"
#include "trident/gpt_dataset.h"
#include "trident/memory.h"
#include "trident/metrics.h"
#include "trident/optim.h"
#include "trident/parallel_state.h"
#include "trident/pipeline.h"
#include "trident/tensorboard.h"

/* The model unit (model.c): the backend, this rank's chunks and their data parallelism. */
typedef struct {
    backend *be;
    int nchunks;                          /* model chunks (virtual stages) on this rank */
    gpt_model *chunks[PS_MAX_CHUNKS];
    dp_chunk *dp[PS_MAX_CHUNKS];          /* data parallelism attached to each chunk */
    const dp_range *shard_ranges[PS_MAX_CHUNKS]; /* what the optimizer steps of each chunk */
    int nshard_ranges[PS_MAX_CHUNKS];
    pp_schedule schedule;
    int slots;                            /* micro-batches in flight per stage */
} run_model;

/* The data unit (batches.c): the family's batch source and the schedule's iteration. */
typedef struct {
    batch_source *source;    /* chosen once at set-up (batch_source_open) */
    int eval;                /* validation runs: --eval-iters > 0 and a validation split exists */
    int64_t consumed;        /* samples consumed before this iteration */
    pp_iteration it;         /* it.micro: the source's micro-batches of the iteration */
    double *block_sums;      /* the blocks' statistics of the iteration over the global batch, named by
                              * their kinds (gpt_block_stats_size numbers; NULL: none yet) */
} run_batches;

/* The optimizer unit (optim.c). */
typedef struct {
    opt_adamw *opt;          /* AdamW: the moments, grad norm and step */
    opt_lr_schedule lr;
    int scaled;              /* a loss scale: --fp16, or --loss-scale */
    opt_loss_scaler scaler;
    int64_t skipped;         /* iterations whose step was skipped (overflow) */
} run_optim;

/* The checkpoint unit (ckpt.c). */
typedef struct {
    char run_id[CKPT_RUN_ID_LEN + 1]; /* the run's identity in its checkpoints: kept by a resume */
} run_ckpt;

/* The reporting unit (report.c). */
typedef struct {
    int reporter;            /* this rank prints and writes metrics */
    double peak_tflops;      /* for MFU: measured at start (or --peak-tflops), raised to any rate above it */
    double peak_measured;    /* the GEMM peak as measured at start (or --peak-tflops), TFLOP/s */
    met_writer *metrics;
    tb_writer *tb;           /* --tensorboard-dir, on the reporter */
    bd_state bd;             /* the time breakdown printed at the end */
    mem_layout mem;          /* what this rank holds, for the memory prediction */
    mem_prediction mem_pred;
    double rss_start;        /* resident bytes before the data and the model (libraries, MPI, what the
                              * tokenizer's load left) */
    double hwm_start;        /* the peak resident bytes before them (the tokenizer's load at its largest) */
    double rss_peak;         /* peak resident bytes of the training (before the end-of-run measurements) */
} run_report;

typedef struct {
    const td_args *a;
    ps_state *ps;
    int gbs, num_micro;
    int64_t train_iters;
    run_model model;
    run_batches batches;
    run_optim optim;
    run_ckpt ckpt;
    run_report report;
} run_state;

/* ---- validate.c ---- */

/* trainer_validate (trainer.h), which trainer.c gives the rest of trident. */
int run_validate(const td_args *a, int world_size, char *msg, size_t msglen);

/* The pipeline split of the flags (virtual stages from --num-layers-per-virtual-pipeline-stage,
 * counting the embedding and loss when accounted for); unchecked. */
pp_split run_split(const td_args *a, int pp);

/* ---- tokenizer_facts.c ---- */

/* Gives the heap's free pages back to the system (glibc keeps freed small and medium blocks
 * resident): what a transient buffer left must not count in the run's peak memory. */
void run_trim_heap(void);

/* The tokenizer's vocabulary size and end-of-document id (-1: none) into *vocab and *eod (either
 * may be NULL), opened once a process for the same tokenizer flags; -1 with err when it does not open. */
int run_tokenizer_facts(const td_args *a, int *vocab, int *eod, char *err, size_t errlen);

/* The vocabulary of the tokenizer (--vocab-file or --tokenizer-model); -1 without one. Ends the
 * job (exit 1) when the tokenizer does not open. */
int run_tokenizer_vocab(const td_args *a, const comm *world);

/* ---- model.c ---- */

/* The model's configuration from the flags (reads the tokenizer for the vocabulary). */
gpt_config run_model_config(const td_args *a, const ps_state *ps);

/* Sets r->ps (the rank grid of r->a on `world`, sequence parallelism) and r->model.be (the
 * backend, its GEMM precision). */
void run_model_grid(run_state *r, comm *world);

/* Creates this rank's model chunks of configuration c, attaches data parallelism to each and
 * sets the schedule and r->model.slots; fills shards[k] (what the optimizer steps of chunk k).
 * Returns whether the optimizer is distributed over dp. */
int run_model_build(run_state *r, const gpt_config *c, opt_shard shards[PS_MAX_CHUNKS]);

/* Completes every parameter all-gather in flight (distributed optimizer): before anything
 * reads the parameters outside a forward. */
void run_wait_params(run_state *r);

/* Frees the chunks, their data parallelism, the backend and the rank grid. */
void run_model_free(run_state *r);

/* ---- batches.c ---- */

/* Opens the batch source of configuration c's family and decides r->batches.eval. */
void run_batches_open(run_state *r, const gpt_config *c, comm *world);

/* Sets up r->batches.it, the schedule's iteration over the source's micro-batches (needs the
 * model chunks). */
void run_batches_iteration(run_state *r, const gpt_config *c);

/* Builds this rank's micro-batches of the iteration of split s at r->batches.consumed into
 * r->batches.it.micro (timed as data), before the schedule runs. */
void run_batches_begin(run_state *r, gptds_split s);

/* Mean token loss over `iters` global batches of split s starting at sample `consumed`. */
double run_evaluate(run_state *r, gptds_split s, int64_t consumed, int64_t iters);

/* The loss scale the schedule's last stage applies to its loss sum this iteration: `scale`
 * (the loss scaler's) over the head's loss divisor (the iteration's tokens for a next-token loss;
 * 1 for batches weighted already). */
float run_batches_loss_scale(const run_state *r, double scale);

/* The iteration's mean loss from the loss sum reduced over dp (same weighting as above). */
double run_batches_loss(const run_state *r, double loss_sum);

/* Adds the head's own figures to the iteration's record, from the last stage's sums (zeroed for
 * the next iteration), then the blocks' (run_batches_block_stats's). */
void run_batches_metrics(run_state *r, met_record *rec);
/* The blocks' statistics of the iteration summed over the global batch, and what their kinds do
 * with them before the optimizer step (every rank; gpt_block_stats_apply). Nothing when no kind
 * of the model has statistics. */
void run_batches_block_stats(run_state *r);

/* Frees the batch source and the iteration's buffers. */
void run_batches_close(run_state *r);

/* ---- optim.c ---- */

/* Creates AdamW over the chunks' shards (`distributed`: over dp). */
void run_optim_create(run_state *r, const opt_shard shards[PS_MAX_CHUNKS], int distributed);

/* Sets the learning-rate schedule (exits on a bad --lr-decay-style) and the loss scale. */
void run_optim_schedule(run_state *r);

/* Prints the optimizer's line (the first rank of each stage). */
void run_optim_describe(run_state *r);

/* --debug-overflow-iteration N (trident/debug.h): at iteration N the last rank finds an Inf in one of
 * the gradients it steps, as an fp16 overflow would leave there; every rank must skip the step. */
void run_inject_overflow(run_state *r);

/* ---- ckpt.c ---- */

/* Ends the job when `bad` on any rank: the lowest such rank prints msg and aborts the job. */
void run_fail_if_any(comm *world, int bad, const char *msg);

/* Installs the SIGTERM/SIGINT handlers of --exit-signal-handler (warns rank 0 about Open MPI's
 * SIGKILL timeout when it is the default and there is a --save). */
void run_ckpt_signals(const td_args *a, int rank);

/* Finds the checkpoint of --load (every rank reads its meta.json). Without --finetune or
 * --no-load-rng its seed becomes the run's (eff->seed), as the seed is the whole random state.
 * Returns 1 when there is one to load. */
int run_resume_find(td_args *eff, comm *world, ckpt_meta *meta);

/* A note when a resumed run's sequence length or global batch size (gbs) differs from the
 * checkpoint's: both allowed, as in Megatron (the data continues from the consumed sample count). */
void run_resume_note_changes(const td_args *a, const ckpt_meta *m, int gbs);

/* Loads the checkpoint into the run (weights only with --finetune, no moments with
 * --no-load-optim) and returns where to continue from. */
ckpt_progress run_resume_load(run_state *r, const ckpt_meta *meta);
/* --lora-load DIR (docs/finetune.md): the adapter's r, lora_alpha (rsLoRA's as alpha sqrt(r)),
 * lora_dropout (unless --lora-dropout is given) and modules become a's LoRA flags; a given flag
 * that differs, a --load that is not a base (meta, when resume) loaded with --finetune, or an
 * adapter trident cannot train is refused. Call before ckpt_args_reconcile. Returns 0, or -1 with
 * one line in msg (a usage error). */
int run_lora_load_args(td_args *a, const ckpt_meta *meta, int resume, int log, char *msg, size_t msglen);
/* Fills every rank's adapters (its slices) from --lora-load's tensors; after run_resume_load. */
void run_lora_load(run_state *r);

/* World rank 0 takes the --save folder's lock for the job (held until it ends); when another run
 * holds it, rank 0 says so in one line and every rank returns 1 together. */
int run_lock_save_dir(const char *dir, comm *world);

/* What a checkpoint saved now records of the run's progress. */
ckpt_progress run_progress_now(const run_state *r, int64_t iter, int64_t consumed, int64_t valid_consumed);

/* Saves the run at progress p to --save (collective). */
void run_save_checkpoint(run_state *r, const ckpt_progress *p);

/* After each iteration: saves every --save-interval, and decides whether to stop (--exit-interval,
 * --exit-duration-in-mins, a signal with --exit-signal-handler; agreed by all ranks), saving
 * first. *last_saved: the iteration of the newest save. Returns 1 to stop. */
int run_after_iteration(run_state *r, const ckpt_progress *p, double t_begin, int64_t *last_saved);

/* ---- report.c ---- */

/* Peak resident memory of this process in bytes (VmHWM), 0 if unknown: trainer_peak_rss (trainer.h). */
long long run_peak_rss(void);

/* Measures the GEMM peak for MFU (or takes --peak-tflops). */
void run_report_peak(run_state *r);

/* Notes the resident memory before the data and the model. */
void run_report_rss_start(run_state *r);

/* Predicts what this rank will hold (memory.h) and prints it per pipeline stage. */
void run_predict_memory(run_state *r, const gpt_config *c, int slots);

/* Rank 0's lines about the run at its start: the grid, kernels, precision, model, stages,
 * batch, activations and the MFU peak. */
void run_report_start(run_state *r, const gpt_config *c);

/* Opens --metrics-file and --tensorboard-dir on the reporter. */
void run_report_open(run_state *r);

/* This iteration's MFU against the peak, raised (and said) if the model's rate passed it. */
double run_mfu_of(run_state *r, double model_tflops, int64_t iter);

/* Ends a diverged run (exit 1, no checkpoint of the diverged model): `what` happened at `iter`;
 * names the newest checkpoint saved before it, which --load resumes from. */
void run_stop_diverged(const td_args *a, int64_t iter, int64_t last_saved, const char *what);

/* The time breakdown and the limits it is held against (on the reporter, at the end). */
void run_print_breakdown(run_state *r);

/* Sets this rank's peak RSS against the prediction, the largest per pipeline stage (collective). */
void run_report_memory(run_state *r);

/* Closes the metrics file and TensorBoard. */
void run_report_close(run_state *r);

/* ---- dump.c ---- */

/* Writes the whole model, gathered to its logical shapes, to `path` (collective), and checks
 * every replica against the dumped copy. */
void run_dump_params(run_state *r, const char *path);

/* ---- loop.c ---- */

/* Trains from progress `prog` to --train-iters (or an exit condition), saves the last
 * iteration, dumps and reports. `resume`: the run loaded a checkpoint; t_begin: the job's start. */
void run_loop(run_state *r, ckpt_progress prog, int resume, double t_begin);

#endif
