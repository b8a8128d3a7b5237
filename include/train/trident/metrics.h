/* Training metrics. Owns what an iteration reports: one JSON object per iteration appended
 * to --metrics-file, and the Megatron-style log line. */
#ifndef TRIDENT_METRICS_H
#define TRIDENT_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "trident/gpt.h"
#include "trident/parallel_state.h"

typedef struct met_record {
    int64_t iteration;
    int64_t consumed_samples;
    double lm_loss;
    double lr;
    double grad_norm;
    double loss_scale;
    int skipped;             /* this iteration's step was skipped (a loss-scale overflow) */
    int64_t skipped_total;   /* ... and how many were, so far */
    double tokens_per_s;
    double model_tflops_per_rank;
    double mfu;              /* fraction of the peak, 0..1 */
    double elapsed_ms;
    double comm_ms;          /* time this rank was blocked in communication */
    double pp_ms;            /* ... of which in pipeline stage transfers (pp_iteration.transfer_s) */
    double exposed_ms[PS_GROUPS];  /* ... of it, per kind of group (ps_comm_times) */
    double inflight_ms[PS_GROUPS]; /* time each kind had communication in flight */
    double val_loss;         /* NaN when not evaluated this iteration */
    /* the head's metrics beside the loss (gpt_head_metrics: e.g. a masked LM's accuracy), then
     * the blocks' (gpt_block_metrics: e.g. MoE's load-balancing loss), in metrics.jsonl under
     * their keys and in the log line after the loss */
    int nextra;
    gpt_metric extra[GPT_MAX_STATS];
    const char *val_name;    /* the validation line's name of the loss; NULL: "lm loss", with its
                              * perplexity */
    double time_left_s;      /* to --train-iters at the mean iteration time so far; NaN: not known */
    /* the blocks' lists (gpt_block_metrics: e.g. a MoE layer's tokens per expert), in
     * metrics.jsonl only, after the metrics */
    int narrays;
    gpt_metric_array arrays[GPT_MAX_ARRAYS];
} met_record;

typedef struct met_writer met_writer;

/* Opens `path` for appending; dies naming the path if it cannot. */
met_writer *met_open(const char *path);
/* Appends one line; NULL writer is a no-op. Flushed at once, so a crash loses nothing. */
void met_write(met_writer *w, const met_record *r);
void met_close(met_writer *w);
/* s seconds as "1:02:03" (hours:minutes:seconds, the hours growing past 99 as needed), "?" when
 * s is not finite or negative. */
void met_format_duration(char *buf, size_t len, double s);
/* Prints the Megatron-style line (and the validation line when val_loss is set) on stdout. */
void met_print(const met_record *r, int64_t train_iters, int global_batch);

#endif
