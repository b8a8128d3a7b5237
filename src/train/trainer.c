/* The trainer: see include/trident/trainer.h. */
#include "trident/trainer.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <math.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "backend/backend.h"
#include "trident/tokenizer.h"
#include "trident/bert_source.h"
#include "trident/breakdown.h"
#include "trident/check.h"
#include "trident/checkpoint.h"
#include "trident/data_parallel.h"
#include "trident/gpt.h"
#include "trident/gpt_dataset.h"
#include "trident/memory.h"
#include "trident/metrics.h"
#include "trident/tensorboard.h"
#include "trident/optim.h"
#include "trident/parallel_state.h"
#include "trident/pipeline.h"
#include "trident/timer.h"

#define FAIL(...)                                                                        \
    do {                                                                                 \
        snprintf(msg, msglen, __VA_ARGS__);                                              \
        return -1;                                                                       \
    } while (0)

/* A tokenizer file flag names a readable file: 0, or -1 with the message naming the flag. */
static int readable_file(const char *flag, const char *path, const char *what, char *msg, size_t msglen)
{
    struct stat st;
    if (!path) FAIL("%s is required (%s)", flag, what);
    if (stat(path, &st) != 0) FAIL("%s %s: %s (give %s)", flag, path, td_strerror(errno), what);
    if (S_ISDIR(st.st_mode)) FAIL("%s %s is a folder; give %s", flag, path, what);
    if (access(path, R_OK) != 0) FAIL("%s %s is not readable: %s", flag, path, td_strerror(errno));
    return 0;
}

/* --decoder-first/last-pipeline-num-layers, or -1 when not given. */
static int trainer_first_layers(const td_args *a)
{
    return td_args_given(a, "--decoder-first-pipeline-num-layers") ? a->decoder_first_pipeline_num_layers : -1;
}
static int trainer_last_layers(const td_args *a)
{
    return td_args_given(a, "--decoder-last-pipeline-num-layers") ? a->decoder_last_pipeline_num_layers : -1;
}

/* Megatron's rules for the recomputation flags; `most`: the layers of the largest stage. */
static int recompute_validate(const td_args *a, int most, char *msg, size_t msglen)
{
    const char *gran = a->recompute_granularity;
    int method = td_args_given(a, "--recompute-method"), num = td_args_given(a, "--recompute-num-layers");
    if (!gran && (method || num))
        FAIL("--recompute-method and --recompute-num-layers need --recompute-granularity full");
    if (!gran) return 0;
    if (strcmp(gran, "selective") == 0) {
        if (method || num)
            FAIL("--recompute-granularity selective takes no --recompute-method or --recompute-num-layers "
                 "(they choose the layers of full recomputation)");
        return 0;
    }
    if (!method) FAIL("--recompute-granularity full needs --recompute-method (uniform or block)");
    if (!num || a->recompute_num_layers > most)
        FAIL("--recompute-granularity full needs --recompute-num-layers between 1 and %d (the layers per pipeline "
             "stage)%s", most, num ? "" : "; it is not given");
    return 0;
}

/* The pipeline split of the flags (virtual stages from --num-layers-per-virtual-pipeline-stage,
 * counting the embedding and loss when accounted for); unchecked. */
static pp_split trainer_split(const td_args *a, int pp)
{
    pp_split s = {a->num_layers, pp, 1, trainer_first_layers(a), trainer_last_layers(a),
                  a->account_for_embedding_in_pipeline_split, a->account_for_loss_in_pipeline_split};
    int per = a->num_layers_per_virtual_pipeline_stage;
    if (td_args_given(a, "--num-layers-per-virtual-pipeline-stage") && per > 0)
        s.vp = (s.L + s.embedding + s.loss) / (pp * per);
    return s;
}

int trainer_validate(const td_args *a, int world_size, char *msg, size_t msglen)
{
    int tp = a->tensor_model_parallel_size, pp = a->pipeline_model_parallel_size;
    int max_pos = a->max_position_embeddings ? a->max_position_embeddings : a->seq_length;
    if (a->data_path.n == 0) FAIL("--data-path is required (a dataset prefix from trident preprocess)");
    if (a->model && strcmp(a->model, "bert") == 0) {
        if (strncmp(a->tokenizer_type, "BertWordPiece", 13) != 0 && strcmp(a->tokenizer_type, "HuggingFaceTokenizer") != 0)
            FAIL("--model bert needs BERT's WordPiece tokenizer: --tokenizer-type BertWordPieceLowerCase (or "
                 "BertWordPieceCase) --vocab-file vocab.txt, or a WordPiece tokenizer.json");
        if (a->data_path.n != 1)
            FAIL("--model bert reads one sentence-level dataset: give --data-path PREFIX (from trident preprocess "
                 "--split-sentences), not a blend");
    }
    tok_spec spec = {a->tokenizer_type, a->vocab_file, a->merge_file, a->tokenizer_model};
    if (tok_check_spec(&spec, msg, msglen) != 0) return -1; /* names the tokenizer flag */
    const char *tflags[2], *tpaths[2];
    for (int i = 0, n = tok_spec_files(&spec, tflags, tpaths); i < n; i++)
        if (readable_file(tflags[i], tpaths[i], i == 0 && n == 2 ? "GPT-2's vocab.json, to size the vocabulary"
                          : n == 2 ? "GPT-2's merges.txt" : "a Hugging Face tokenizer.json, to size the vocabulary",
                          msg, msglen))
            return -1;
    double split_w[GPTDS_NSPLITS];
    char split_err[256];
    const char *split = a->split ? a->split : "969,30,1";
    if (gptds_parse_split(split, split_w, split_err, sizeof split_err)) FAIL("--split %s", split_err);
    if (!(split_w[GPTDS_TRAIN] > 0))
        FAIL("--split %s gives the train split weight 0, so there is nothing to train on; give it a positive "
             "weight (e.g. --split 949,50,1)", split);
    int iters = td_args_given(a, "--train-iters"), samples = td_args_given(a, "--train-samples");
    if (iters == samples) FAIL("give exactly one of --train-iters and --train-samples");
    if (td_args_given(a, "--lr-warmup-iters") && td_args_given(a, "--lr-warmup-fraction"))
        FAIL("give at most one of --lr-warmup-iters and --lr-warmup-fraction");
    if (a->min_lr > a->lr) FAIL("--min-lr %g is larger than --lr %g", a->min_lr, a->lr);
    if (max_pos < a->seq_length)
        FAIL("--max-position-embeddings %d is smaller than --seq-length %d", max_pos, a->seq_length);
    if (world_size % (tp * pp))
        FAIL("the world size %d is not divisible by --tensor-model-parallel-size %d x "
             "--pipeline-model-parallel-size %d",
             world_size, tp, pp);
    if (gpt_config_validate(a, tp, msg, msglen)) return -1;
    pp_split layers_split = trainer_split(a, pp);
    int vp = layers_split.vp;
    if (td_args_given(a, "--num-layers-per-virtual-pipeline-stage")) {
        int per = a->num_layers_per_virtual_pipeline_stage;
        int total = a->num_layers + layers_split.embedding + layers_split.loss;
        if (pp == 1) FAIL("--num-layers-per-virtual-pipeline-stage needs --pipeline-model-parallel-size > 1");
        if (total % (pp * per))
            FAIL("--num-layers %d%s is not divisible by --pipeline-model-parallel-size %d x "
                 "--num-layers-per-virtual-pipeline-stage %d", a->num_layers,
                 total > a->num_layers ? " (+ the embedding and loss accounted for)" : "", pp, per);
        if (vp > PS_MAX_CHUNKS) FAIL("%d virtual stages per rank is more than %d; raise "
                                     "--num-layers-per-virtual-pipeline-stage", vp, PS_MAX_CHUNKS);
    }
    if (pp_split_check(&layers_split, msg, msglen)) return -1;
    int most = 0; /* layers of the largest virtual stage */
    for (int vs = 0, l0, nl; vs < pp * vp; vs++) {
        pp_split_layers(&layers_split, vs, &l0, &nl);
        if (nl > most) most = nl;
    }
    if (recompute_validate(a, most, msg, msglen)) return -1;
    if (a->sequence_parallel && tp > 1 && a->seq_length % tp)
        FAIL("--sequence-parallel splits the sequence over the tensor-parallel ranks: --seq-length %d is not "
             "divisible by --tensor-model-parallel-size %d", a->seq_length, tp);
    if (a->overlap_param_gather && !a->use_distributed_optimizer)
        FAIL("--overlap-param-gather needs --use-distributed-optimizer (only the distributed optimizer all-gathers "
             "parameters)");
    if (a->bf16 && a->fp16) FAIL("give at most one of --bf16 and --fp16");
    if (td_args_given(a, "--loss-scale") && !a->bf16 && !a->fp16)
        FAIL("--loss-scale needs --fp16 or --bf16 (fp32 training has no loss scale)");
    static const char *const dynamic_flags[] = {"--initial-loss-scale", "--min-loss-scale", "--loss-scale-window",
                                                "--hysteresis"};
    for (int i = 0; i < 4; i++)
        if (td_args_given(a, dynamic_flags[i]) && (!a->fp16 || td_args_given(a, "--loss-scale")))
            FAIL("%s sets the dynamic loss scale, which only --fp16 without --loss-scale has", dynamic_flags[i]);
    if (a->min_loss_scale > a->initial_loss_scale)
        FAIL("--min-loss-scale %g is larger than --initial-loss-scale %g", a->min_loss_scale, a->initial_loss_scale);
    if (a->finetune && !a->load) FAIL("--finetune needs --load (the checkpoint to start from)");
    if (a->use_checkpoint_args && !a->load) FAIL("--use-checkpoint-args needs --load (the checkpoint to take them from)");
    if (td_args_given(a, "--save-interval") && !a->save) FAIL("--save-interval needs --save");
    if (a->keep_last && !a->save) FAIL("--keep-last needs --save");
    pp_schedule sched;
    if (pp_schedule_parse(a->pipeline_schedule, pp, vp, &sched)) FAIL("--pipeline-schedule %s", a->pipeline_schedule);
    if (sched == PP_SCHEDULE_INTERLEAVED && vp == 1)
        FAIL("--pipeline-schedule interleaved needs --num-layers-per-virtual-pipeline-stage");
    if (sched != PP_SCHEDULE_INTERLEAVED && vp > 1)
        FAIL("--num-layers-per-virtual-pipeline-stage needs --pipeline-schedule interleaved (or auto)");
    int dp = world_size / (tp * pp);
    int gbs = a->global_batch_size ? a->global_batch_size : a->micro_batch_size * dp;
    if (gbs % (a->micro_batch_size * dp))
        FAIL("--global-batch-size %d is not divisible by --micro-batch-size %d x data-parallel size %d", gbs,
             a->micro_batch_size, dp);
    int micro = gbs / (a->micro_batch_size * dp);
    if (sched == PP_SCHEDULE_INTERLEAVED && micro % pp)
        FAIL("the interleaved schedule needs the number of micro-batches (%d = --global-batch-size %d / "
             "(--micro-batch-size %d x data-parallel %d)) divisible by --pipeline-model-parallel-size %d",
             micro, gbs, a->micro_batch_size, dp, pp);
    if (pp_slots_needed(sched, pp, 0, vp, micro) > PP_MAX_SLOTS)
        FAIL("%d micro-batches in flight per stage is more than %d; use fewer micro-batches with "
             "--pipeline-schedule gpipe",
             pp_slots_needed(sched, pp, 0, vp, micro), PP_MAX_SLOTS);
    return 0;
}

/* ---- the run ---- */

typedef struct {
    const gptds *ds;
    gptds_split split;
    int64_t consumed; /* samples consumed before this iteration */
    int mbs, dp, dp_rank, seq;
    int32_t *buf;     /* (mbs, seq + 1) */
    bd_state *bd;     /* times the reads */
} batch_source;

static void next_batch(void *user, int m, int32_t *ids, int32_t *targets, gpt_bert_batch *bert, int64_t *sample)
{
    batch_source *b = user;
    (void)bert;
    bd_start(b->bd, BD_DATA);
    gptds_micro_batch(b->ds, b->split, b->consumed, m, b->mbs, b->dp, b->dp_rank, b->buf);
    int S = b->seq;
    for (int j = 0; j < b->mbs; j++) {
        const int32_t *row = b->buf + (size_t)j * (S + 1);
        memcpy(ids + (size_t)j * S, row, (size_t)S * sizeof(int32_t));
        memcpy(targets + (size_t)j * S, row + 1, (size_t)S * sizeof(int32_t));
        sample[j] = b->consumed + (int64_t)m * b->mbs * b->dp + (int64_t)b->dp_rank * b->mbs + j;
    }
    bd_stop(b->bd, BD_DATA);
}

typedef struct {
    const td_args *a;
    ps_state *ps;
    backend *be;
    int nchunks;                          /* model chunks (virtual stages) on this rank */
    gpt_model *chunks[PS_MAX_CHUNKS];
    opt_adamw *opt;                       /* AdamW: the moments, grad norm and step */
    dp_chunk *dp[PS_MAX_CHUNKS];          /* data parallelism attached to each chunk */
    const dp_range *shard_ranges[PS_MAX_CHUNKS]; /* what the optimizer steps of each chunk */
    int nshard_ranges[PS_MAX_CHUNKS];
    pp_schedule schedule;
    gptds *data;             /* GPT's dataset, or */
    bert_source *bert;       /* BERT's batches */
    opt_lr_schedule lr;
    int scaled;              /* a loss scale: --fp16, or --loss-scale */
    opt_loss_scaler scaler;
    int64_t skipped;         /* iterations whose step was skipped (overflow) */
    char run_id[CKPT_RUN_ID_LEN + 1]; /* the run's identity in its checkpoints: kept by a resume */
    int gbs, num_micro;
    int64_t train_iters;
    pp_iteration it;
    batch_source src;
    int reporter;            /* this rank prints and writes metrics */
    int eval;                /* validation runs: --eval-iters > 0 and a validation split exists */
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
} run_state;

/* Completes every parameter all-gather in flight (distributed optimizer): before anything
 * reads the parameters outside a forward. */
static void wait_params(run_state *r)
{
    for (int c = 0; c < r->nchunks; c++) dp_wait_params(r->dp[c]);
}

/* BERT: builds this rank's micro-batches of the iteration at r->src.consumed (timed as data). */
static void bert_begin(run_state *r, gptds_split s)
{
    if (!r->bert) return;
    bd_start(&r->bd, BD_DATA);
    bert_source_begin(r->bert, s, r->src.consumed, r->ps->dp_group);
    bd_stop(&r->bd, BD_DATA);
}

/* Mean token loss over `iters` global batches of split s starting at sample `consumed`. */
static double evaluate(run_state *r, gptds_split s, int64_t consumed, int64_t iters)
{
    double total = 0;
    wait_params(r);
    be_lowp_invalidate(r->be); /* evaluation follows a step */
    r->src.split = s;
    r->it.training = 0;
    for (int64_t i = 0; i < iters; i++) {
        r->src.consumed = consumed + i * r->gbs;
        bert_begin(r, s);
        total += pp_run(r->schedule, &r->it);
    }
    r->it.training = 1;
    r->src.split = GPTDS_TRAIN;
    memset(r->it.bert_stats, 0, sizeof r->it.bert_stats); /* the training iterations' sums are their own */
    comm_allreduce(r->ps->dp_group, &total, 1, COMM_F64, COMM_SUM);
    /* the loss lives on the last stage: share it with every rank */
    comm_bcast(r->ps->pp_group, &total, 1, COMM_F64, r->ps->pp - 1);
    /* BERT's batches are weighted to the mean already */
    return total / ((double)iters * (r->bert ? 1.0 : (double)r->gbs * r->a->seq_length));
}

/* BERT: the iteration's masked-LM and sentence-order means and accuracies, from the last stage's
 * sums (zeroed for the next iteration). */
static void bert_metrics(run_state *r, met_record *rec)
{
    double *st = r->it.bert_stats;
    comm_allreduce(r->ps->dp_group, st, GPT_BERT_NSTATS, COMM_F64, COMM_SUM);
    comm_bcast(r->ps->pp_group, st, GPT_BERT_NSTATS, COMM_F64, r->ps->pp - 1);
    double tokens = st[GPT_BERT_MLM_TOKENS] > 0 ? st[GPT_BERT_MLM_TOKENS] : 1, n = st[GPT_BERT_SOP_SAMPLES];
    rec->bert = 1;
    rec->lm_loss = st[GPT_BERT_MLM_LOSS] / tokens;
    rec->lm_acc = st[GPT_BERT_MLM_CORRECT] / tokens;
    rec->sop_loss = n > 0 ? st[GPT_BERT_SOP_LOSS] / n : NAN;
    rec->sop_acc = n > 0 ? st[GPT_BERT_SOP_CORRECT] / n : NAN;
    memset(st, 0, GPT_BERT_NSTATS * sizeof(double));
}

/* Gives the heap's free pages back to the system (glibc keeps freed small and medium blocks
 * resident): what a transient buffer left must not count in the run's peak memory. */
static void trim_heap(void)
{
#ifdef __GLIBC__
    malloc_trim(0);
#endif
}

/* The vocabulary of the tokenizer (--vocab-file or --tokenizer-model); -1 without one. */
static int tokenizer_vocab(const td_args *a)
{
    if (!a->vocab_file && !a->tokenizer_model) return -1;
    char err[512];
    tok_spec spec = {a->tokenizer_type, a->vocab_file, a->merge_file, a->tokenizer_model};
    tok_tokenizer *tok = tok_open(&spec, err, sizeof err);
    if (!tok) td_fatal(1, "%s", err);
    int v = tok_vocab_size(tok);
    tok_free(tok);
    trim_heap(); /* a tokenizer.json's parse leaves tens of MB in the heap's free lists */
    return v;
}

static gpt_config model_config(const td_args *a, const ps_state *ps)
{
    return ckpt_config_of_args(a, tokenizer_vocab(a), ps->tp);
}

/* Resident bytes of this process now (VmRSS), or at its peak (VmHWM). */
static long long proc_status_bytes(const char *key)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    long long kb = 0;
    size_t n = strlen(key);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, n) == 0 && line[n] == ':') {
            kb = atoll(line + n + 1);
            break;
        }
    fclose(f);
    return kb * 1024;
}

long long trainer_peak_rss(void) { return proc_status_bytes("VmHWM"); }

#define MIB (1024.0 * 1024.0)

/* Gathers every rank's line of `len` bytes to world rank 0 and prints, per pipeline stage, the
 * line of its first rank (tp 0, dp 0) under `title`. */
static void print_per_stage(const run_state *r, const char *line, size_t len, const char *title)
{
    const ps_state *ps = r->ps;
    char *all = td_xmalloc(len * (size_t)ps->world_size);
    comm_allgather(ps->world, line, all, len, COMM_U8);
    if (ps->world_rank == 0)
        for (int st = 0; st < ps->pp; st++)
            TD_INFO("%s, stage %d: %s", title, st, all + len * (size_t)ps_rank_of(ps, 0, 0, st));
    free(all);
}

/* Predicts what this rank will hold (memory.h) and prints it per pipeline stage. */
static void predict_memory(run_state *r, const gpt_config *c, int slots)
{
    const td_args *a = r->a;
    mem_layout *l = &r->mem;
    l->cfg = *c;
    l->tp = r->ps->tp;
    l->dp = r->ps->dp;
    l->mbs = a->micro_batch_size;
    l->nchunks = r->nchunks;
    l->distributed_optimizer = a->use_distributed_optimizer && r->ps->dp > 1;
    l->bucket_elems = (double)a->ddp_bucket_size;
    l->lowp = r->be->gemm_dtype != BE_F32;
    l->lowp_widened = l->lowp && !r->be->ops->lp_native(r->be, r->be->gemm_dtype);
    l->sequence_parallel = r->ps->sequence_parallel;
    const gpt_recompute *rc = &r->chunks[0]->rc;
    l->recompute = rc->granularity == GPT_RECOMPUTE_FULL        ? MEM_RECOMPUTE_FULL
                   : rc->granularity == GPT_RECOMPUTE_SELECTIVE ? MEM_RECOMPUTE_SELECTIVE
                                                                : MEM_RECOMPUTE_NONE;
    l->recompute_block = rc->method == GPT_RECOMPUTE_BLOCK;
    l->recompute_num_layers = rc->num_layers;
    for (int k = 0; k < r->nchunks; k++) {
        const gpt_model *m = r->chunks[k];
        l->chunk[k] = (mem_chunk){m->nlayers, m->first, m->last, slots};
    }
    mem_predict(l, &r->mem_pred);
    char line[400];
    mem_describe(&r->mem_pred, l, line, sizeof line);
    print_per_stage(r, line, sizeof line, "memory per rank (predicted)");
}

/* Sets this rank's peak RSS against the prediction: the larger of the model's run plus what the
 * process held before it (the libraries, MPI), and the peak reached before the model (a large
 * tokenizer.json's parse: the vocabulary size is read from it). The largest per pipeline stage. */
static void report_memory(run_state *r)
{
    const ps_state *ps = r->ps;
    double mine[4] = {r->rss_peak, r->mem_pred.total, r->rss_start, r->hwm_start};
    double *all = td_xmalloc(4 * sizeof(double) * (size_t)ps->world_size);
    comm_allgather(ps->world, mine, all, 4, COMM_F64);
    if (ps->world_rank == 0)
        for (int st = 0; st < ps->pp; st++) {
            const double *top = NULL; /* the rank of the stage with the largest peak */
            for (int t = 0; t < ps->tp; t++)
                for (int d = 0; d < ps->dp; d++) {
                    const double *x = all + 4 * ps_rank_of(ps, t, d, st);
                    if (!top || x[0] > top[0]) top = x;
                }
            double run = top[1] + top[2], pred = fmax(run, top[3]);
            char before[160] = "";
            if (top[3] > run)
                snprintf(before, sizeof before, "; the peak before the model, %.1f MiB (the tokenizer's load), is larger",
                         top[3] / MIB);
            TD_INFO("peak memory (RSS), stage %d: %.1f MiB measured, %.1f MiB predicted (%.1f for the model and its "
                    "run + %.1f held before it%s): %+.1f%%", st, top[0] / MIB, pred / MIB, top[1] / MIB, top[2] / MIB,
                    before, 100.0 * (top[0] - pred) / pred);
        }
    free(all);
}

static void setup(run_state *r, const td_args *a, comm *world)
{
    memset(r, 0, sizeof *r);
    r->a = a;
    r->ps = ps_init(world, a->tensor_model_parallel_size, a->pipeline_model_parallel_size);
    ps_state *ps = r->ps;
    /* Megatron turns sequence parallelism off on one tensor-parallel rank */
    ps->sequence_parallel = a->sequence_parallel && ps->tp > 1;
    if (a->sequence_parallel && ps->tp == 1 && ps->world_rank == 0)
        TD_INFO("--sequence-parallel does nothing without tensor parallelism: off");
    r->be = be_cpu(0);
    if (a->bf16 || a->fp16) be_set_gemm_dtype(r->be, a->bf16 ? BE_BF16 : BE_F16);
    /* measured before the model exists: its GEMMs' buffers come and go below the run's peak */
    r->peak_tflops = td_args_given(a, "--peak-tflops") ? a->peak_tflops : be_peak_gflops(r->be) / 1e3;
    r->peak_measured = r->peak_tflops;
    gpt_config c = model_config(a, ps);
    r->rss_start = (double)proc_status_bytes("VmRSS"); /* with OpenBLAS's buffers, which the GEMMs above made */
    r->hwm_start = (double)proc_status_bytes("VmHWM");
    r->scaled = a->fp16 || td_args_given(a, "--loss-scale");
    if (td_args_given(a, "--loss-scale")) opt_loss_scaler_init(&r->scaler, 0, a->loss_scale, a->loss_scale, 1, 1);
    else opt_loss_scaler_init(&r->scaler, 1, a->initial_loss_scale, a->min_loss_scale, a->loss_scale_window,
                              a->hysteresis);
    r->reporter = ps->tp_rank == 0 && ps->dp_rank == 0 && ps_is_last_stage(ps);

    r->gbs = a->global_batch_size ? a->global_batch_size : a->micro_batch_size * ps->dp;
    r->num_micro = r->gbs / (a->micro_batch_size * ps->dp);
    r->train_iters = td_args_given(a, "--train-iters") ? a->train_iters : a->train_samples / r->gbs;
    if (r->train_iters < 1)
        td_usage_error("--train-samples %lld is less than one global batch (%d)", (long long)a->train_samples,
                       r->gbs);

    /* data: every rank reads; rank 0 builds the index caches first so the others load them */
    int64_t want[GPTDS_NSPLITS];
    gptds_target_samples(r->train_iters, 0, a->eval_interval, a->eval_iters, r->gbs, want);
    gptds_config dc;
    gptds_config_from_args(&dc, a, want);
    char vsrc[1100];
    if (a->tokenizer_model) snprintf(vsrc, sizeof vsrc, "--tokenizer-model %s", a->tokenizer_model);
    else snprintf(vsrc, sizeof vsrc, "--vocab-file %s", a->vocab_file);
    dc.vocab_size = c.vocab;
    dc.vocab_source = vsrc;
    if (gpt_is_bert(&c)) {
        r->bert = bert_source_open(&dc, a, &c, a->micro_batch_size, r->num_micro, ps->dp, ps->dp_rank, world);
    } else {
        if (ps->world_rank == 0) r->data = gptds_open(&dc);
        comm_barrier(world);
        if (ps->world_rank != 0) r->data = gptds_open(&dc);
    }
    gptds_config_free(&dc);
    r->eval = a->eval_iters > 0 && (r->bert ? bert_source_num_samples(r->bert, GPTDS_VALID)
                                            : gptds_num_samples(r->data, GPTDS_VALID)) > 0;
    if (a->eval_iters > 0 && !r->eval && ps->world_rank == 0)
        td_warn("--split %s leaves no validation documents: no validation runs", a->split);

    /* the model chunks of this rank: chunk k is virtual stage k * pp + pp_rank */
    pp_split split = trainer_split(a, ps->pp);
    r->nchunks = split.vp;
    TD_ASSERT(pp_schedule_parse(a->pipeline_schedule, ps->pp, r->nchunks, &r->schedule) == 0);
    int slots = pp_slots_needed(r->schedule, ps->pp, ps->pp_rank, r->nchunks, r->num_micro);
    gpt_recompute rc = {GPT_RECOMPUTE_NONE, GPT_RECOMPUTE_UNIFORM, 0};
    if (a->recompute_granularity) {
        int full = strcmp(a->recompute_granularity, "full") == 0;
        rc.granularity = full ? GPT_RECOMPUTE_FULL : GPT_RECOMPUTE_SELECTIVE;
        if (full && strcmp(a->recompute_method, "block") == 0) rc.method = GPT_RECOMPUTE_BLOCK;
        if (full) rc.num_layers = a->recompute_num_layers;
    }
    /* on one data-parallel rank the distributed optimizer is the plain one (no second grad buffer) */
    int distributed = a->use_distributed_optimizer && ps->dp > 1;
    dp_config dpc = {(size_t)a->ddp_bucket_size, a->overlap_grad_reduce, distributed, a->overlap_param_gather};
    opt_shard shards[PS_MAX_CHUNKS];
    for (int k = 0; k < r->nchunks; k++) {
        int layer0, n;
        pp_split_layers(&split, k * ps->pp + ps->pp_rank, &layer0, &n);
        gpt_model *m = gpt_create_recompute(&c, ps, r->be, layer0, n, a->micro_batch_size, slots, &rc);
        r->chunks[k] = m;
        be_lowp_register(r->be, m->params, m->numel);
        r->dp[k] = dp_attach(m, ps, &dpc);
        shards[k].ranges = dp_shard(r->dp[k], &shards[k].nranges, &shards[k].grads);
        r->shard_ranges[k] = shards[k].ranges;
        r->nshard_ranges[k] = shards[k].nranges;
    }
    opt_adamw_hparams hp = {a->adam_beta1, a->adam_beta2, a->adam_eps, a->weight_decay};
    r->opt = opt_adamw_create(r->be, ps, r->chunks, r->nchunks, shards, distributed, &hp);
    r->opt->check_all_finite = r->scaled;
    trim_heap(); /* the initialization's host buffer of the largest tensor (the embedding's) */
    predict_memory(r, &c, slots);

    opt_decay_style style;
    if (opt_decay_style_parse(a->lr_decay_style, &style)) td_usage_error("--lr-decay-style %s", a->lr_decay_style);
    r->lr.max_lr = a->lr;
    r->lr.min_lr = a->min_lr;
    r->lr.style = style;
    r->lr.decay_iters = td_args_given(a, "--lr-decay-iters") ? a->lr_decay_iters : r->train_iters;
    r->lr.warmup_iters = td_args_given(a, "--lr-warmup-fraction")
                             ? (int64_t)(a->lr_warmup_fraction * (double)r->lr.decay_iters)
                             : a->lr_warmup_iters;

    size_t tokens = (size_t)a->micro_batch_size * c.seq;
    r->src = (batch_source){r->data, GPTDS_TRAIN, 0, a->micro_batch_size, ps->dp, ps->dp_rank, c.seq,
                            td_xmalloc((size_t)a->micro_batch_size * (c.seq + 1) * sizeof(int32_t)), &r->bd};
    bd_init(&r->bd, r->be, ps);
    r->it = (pp_iteration){.ps = ps,
                           .chunks = r->chunks,
                           .nchunks = r->nchunks,
                           .num_micro = r->num_micro,
                           .mbs = a->micro_batch_size,
                           .loss_scale = (float)(1.0 / ((double)r->gbs * c.seq)),
                           .training = 1,
                           .batch = r->bert ? bert_source_batch : next_batch,
                           .user = r->bert ? (void *)r->bert : (void *)&r->src,
                           .ids = td_xmalloc(tokens * sizeof(int32_t)),
                           .targets = td_xmalloc(tokens * sizeof(int32_t)),
                           .sample = td_xmalloc((size_t)a->micro_batch_size * sizeof(int64_t)),
                           .grad_in = be_alloc(r->be, tokens * c.hidden * sizeof(float))};

    if (r->bert) {
        r->it.bert.types = td_xmalloc(tokens * sizeof(int32_t));
        r->it.bert.lengths = td_xmalloc((size_t)a->micro_batch_size * sizeof(int32_t));
        r->it.bert.sop = td_xmalloc((size_t)a->micro_batch_size * sizeof(int32_t));
    }
    if (ps->world_rank == 0) {
        TD_INFO("trident %s: world %d = tp %d x pp %d x dp %d%s, backend %s, schedule %s (%d chunk%s per rank)",
                TRIDENT_VERSION, ps->world_size, ps->tp, ps->pp, ps->dp,
                ps->sequence_parallel ? " (sequence parallel)" : "", r->be->ops->name,
                pp_schedule_name(r->schedule), r->nchunks, r->nchunks > 1 ? "s" : "");
        char arch[320];
        be_describe(r->be, arch, sizeof arch);
        TD_INFO("kernels: %s", arch);
        if (a->bf16 || a->fp16) {
            int native = r->be->ops->lp_native(r->be, r->be->gemm_dtype);
            TD_INFO("mixed precision: %s GEMMs (%s), fp32 master weights, grads, Adam state, norms, softmax and "
                    "cross-entropy; %s",
                    be_dtype_name(r->be->gemm_dtype),
                    native ? "oneDNN on the CPU's AVX512-BF16 instructions"
                    : a->bf16 ? "this CPU lacks AVX512-BF16: bf16-rounded inputs multiplied by the fp32 sgemm, "
                                "same results at fp32 speed"
                              : "no fp16 arithmetic on this CPU: fp16-rounded inputs multiplied by the fp32 sgemm",
                    !r->scaled ? "no loss scale"
                    : r->scaler.dynamic ? "dynamic loss scale" : "constant loss scale");
        }
        gpt_config_describe(&c, arch, sizeof arch);
        TD_INFO("model: %s; seq %d, vocab %d (padded %d): %.2fM parameters", arch, c.seq, c.vocab, c.padded_vocab,
                (double)gpt_num_params(&c) / 1e6);
        if (ps->pp > 1) {
            char line[1024] = "";
            for (int vs = 0, l0, n; vs < ps->pp * r->nchunks; vs++) {
                char one[48];
                pp_split_layers(&split, vs, &l0, &n);
                const char *sep = vs == 0 ? "" : vs % ps->pp == 0 ? " || " : " | ";
                if (n) snprintf(one, sizeof one, "%s%d-%d", sep, l0, l0 + n - 1);
                else snprintf(one, sizeof one, "%snone", sep);
                strncat(line, one, sizeof line - strlen(line) - 1);
            }
            TD_INFO("pipeline %sstages (layers): %s%s%s", r->nchunks > 1 ? "virtual " : "", line,
                    split.embedding ? "; the embedding counted as a layer" : "",
                    split.loss ? "; the loss counted as a layer" : "");
        }
        TD_INFO("batch: micro %d x %d micro-batches x dp %d = global %d; %lld iterations", a->micro_batch_size,
                r->num_micro, ps->dp, r->gbs, (long long)r->train_iters);
        double acts = 0, shared = 0;
        for (int k = 0; k < r->nchunks; k++) {
            acts += (double)r->chunks[k]->acts_bytes;
            shared += (double)r->chunks[k]->rc_bytes;
        }
        char rcs[64];
        gpt_recompute_describe(&r->chunks[0]->rc, rcs, sizeof rcs);
        TD_INFO("activations (rank 0): %.2f MiB per micro-batch x %d in flight, + %.2f MiB shared by them; "
                "recomputation %s", acts / 1048576.0, slots, shared / 1048576.0, rcs);
        TD_INFO("peak for MFU: %.3f TFLOP/s per rank (%s)", r->peak_tflops,
                td_args_given(a, "--peak-tflops") ? "--peak-tflops"
                : r->be->gemm_dtype == BE_BF16 ? "measured bf16 GEMM"
                : r->be->gemm_dtype == BE_F16  ? "measured fp16 GEMM"
                                               : "measured sgemm");
    }
    /* the optimizer state of the first rank of each stage (its dp peers' differ by at most one
     * element a bucket) */
    if (ps->dp_rank == 0 && ps->tp_rank == 0) {
        size_t numel = 0;
        for (int k = 0; k < r->nchunks; k++) numel += r->chunks[k]->numel;
        size_t st = opt_adamw_state_numel(r->opt);
        TD_INFO("optimizer: AdamW %s (%d bucket%s per chunk); state on this rank %.2f MB: both moments of %zu of its "
                "%zu parameters", r->opt->sharded ? "distributed over dp" : a->use_distributed_optimizer ? "on one dp rank (the "
                "distributed optimizer is the plain one)" : "replicated over dp",
                dp_num_buckets(r->dp[0]), dp_num_buckets(r->dp[0]) > 1 ? "s" : "", (double)st * sizeof(float) / 1e6,
                st / 2, numel);
    }
    if (r->reporter && a->metrics_file) r->metrics = met_open(a->metrics_file);
    if (r->reporter && a->tensorboard_dir) r->tb = tb_open(a->tensorboard_dir);
}

static void teardown(run_state *r)
{
    met_close(r->metrics);
    tb_close(r->tb);
    free(r->src.buf);
    free(r->it.ids);
    free(r->it.targets);
    free(r->it.sample);
    be_dfree(r->be, r->it.grad_in);
    opt_adamw_free(r->opt);
    for (int k = 0; k < r->nchunks; k++) {
        dp_detach(r->dp[k]);
        gpt_free(r->chunks[k]);
    }
    gptds_close(r->data);
    bert_source_close(r->bert);
    free((void *)r->it.bert.types);
    free((void *)r->it.bert.lengths);
    free((void *)r->it.bert.sop);
    be_free(r->be);
    ps_free(r->ps);
}

static double max_abs_diff(const float *a, const float *b, size_t n)
{
    double d = 0;
    for (size_t i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - b[i]));
    return d;
}

/* The dump holds one copy of each parameter; every other copy must be bitwise the same: the
 * data-parallel replicas, the tensor-parallel copies of replicated tensors (norms, biases
 * after a row-parallel reduce) and the last stage's copy of the word embedding. A drifted
 * replica is a bug the dump alone would hide: it ends the job naming the kind and size. */
static void check_replicas(run_state *r)
{
    double d[3] = {0, 0, 0}; /* data-parallel, tensor-parallel, embedding copy */
    for (int k = 0; k < r->nchunks; k++) {
        gpt_model *m = r->chunks[k];
        float *mine = td_xmalloc(m->numel * sizeof(float)), *ref = td_xmalloc(m->numel * sizeof(float));
        be_memcpy(r->be, mine, m->params, m->numel * sizeof(float), BE_D2H);
        memcpy(ref, mine, m->numel * sizeof(float));
        comm_bcast(r->ps->dp_group, ref, m->numel, COMM_F32, 0);
        d[0] = fmax(d[0], max_abs_diff(mine, ref, m->numel));
        for (int i = 0; i < m->ntensors; i++) {
            const gpt_tensor_info *t = &m->table[i];
            if (!t->tp_replicated) continue;
            memcpy(ref + t->offset, mine + t->offset, t->numel * sizeof(float));
            comm_bcast(r->ps->tp_group, ref + t->offset, t->numel, COMM_F32, 0);
            d[1] = fmax(d[1], max_abs_diff(mine + t->offset, ref + t->offset, t->numel));
        }
        /* the first stage's word embedding against the last stage's copy */
        float *w = m->first ? mine + (m->p.wte - m->params) : m->last ? mine + (m->p.head_w - m->params) : NULL;
        if (w && !m->cfg.untied && r->ps->embd_group && comm_size(r->ps->embd_group) > 1) {
            size_t n = (size_t)m->vocab_l * m->cfg.hidden;
            memcpy(ref, w, n * sizeof(float));
            comm_bcast(r->ps->embd_group, ref, n, COMM_F32, 0);
            d[2] = fmax(d[2], max_abs_diff(w, ref, n));
        }
        free(mine);
        free(ref);
    }
    comm_allreduce(r->ps->world, d, 3, COMM_F64, COMM_MAX);
    if (d[0] > 0 || d[1] > 0 || d[2] > 0)
        td_fatal(1, "--dump-params: parameter replicas differ (largest difference: data-parallel %g, "
                 "tensor-parallel copies %g, the last stage's word embedding %g); this is a bug in trident",
                 d[0], d[1], d[2]);
    if (r->reporter) TD_INFO("dump-params: every replica is bitwise the same as the dumped copy");
}

/* Writes the whole model, gathered to its logical shapes, to `path` (collective). */
static void dump_params(run_state *r, const char *path)
{
    const gpt_config *c = &r->chunks[0]->cfg;
    wait_params(r);
    off_t bytes = (off_t)gpt_num_params(c) * (off_t)sizeof(float);
    if (r->ps->world_rank == 0) {
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0 || ftruncate(fd, bytes) != 0) td_fatal(1, "cannot create --dump-params %s: %s", path, td_strerror(errno));
        close(fd);
    }
    comm_barrier(r->ps->world);
    int fd = open(path, O_WRONLY);
    if (fd < 0) td_fatal(1, "cannot open --dump-params %s: %s", path, td_strerror(errno));
    for (int k = 0; k < r->nchunks; k++)
        if (gpt_write_canonical(r->chunks[k], fd, r->ps->dp_rank == 0))
            td_fatal(1, "cannot write --dump-params %s: %s", path, td_strerror(errno));
    if (fsync(fd) != 0 || close(fd) != 0) td_fatal(1, "cannot write --dump-params %s: %s", path, td_strerror(errno));
    check_replicas(r);
    comm_barrier(r->ps->world);
}

/* ---- checkpoints: --load at start, --save and --exit-* after iterations (docs/checkpoints.md) ---- */

static volatile sig_atomic_t g_exit_signal;
static int g_signal_says; /* this rank reports signals as they arrive (world rank 0) */

static const char *signal_name(int sig) { return sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : "a signal"; }

/* Notes the signal; rank 0 says so at once (write(2) is async-signal-safe; stdio is not). */
static int g_output_pipes; /* stdout and stderr lead to Open MPI's mpirun (a pty or pipe), not a terminal */

static void on_exit_signal(int sig)
{
    g_exit_signal = sig;
    if (g_output_pipes) {
        /* while it waits out odls_base_sigkill_timeout mpirun does not drain the ranks' output
         * (a pty of ~4 KB): a full one must drop lines, not block the rank before its save (a
         * write blocked now restarts non-blocking) */
        fcntl(1, F_SETFL, fcntl(1, F_GETFL) | O_NONBLOCK);
        fcntl(2, F_SETFL, fcntl(2, F_GETFL) | O_NONBLOCK);
    }
    if (!g_signal_says) return;
    static const char term[] = "[rank 0] received SIGTERM: finishing this iteration, then saving and exiting\n";
    static const char intr[] = "[rank 0] received SIGINT: finishing this iteration, then saving and exiting\n";
    int saved = errno;
    ssize_t w = sig == SIGTERM ? write(2, term, sizeof term - 1) : write(2, intr, sizeof intr - 1);
    (void)w;
    errno = saved;
}

/* Seconds Open MPI's mpirun waits between forwarding SIGTERM to the ranks and SIGKILLing them
 * (its MCA parameter odls_base_sigkill_timeout; it also waits that long before forwarding):
 * -1 when not started by Open MPI; the default 1 when the environment does not set it. */
static double ompi_sigkill_timeout(int *is_default)
{
    *is_default = 0;
    if (!getenv("OMPI_COMM_WORLD_SIZE")) return -1;
    const char *v = getenv("OMPI_MCA_odls_base_sigkill_timeout");
    if (v && *v) return atof(v);
    *is_default = 1;
    return 1;
}

static double g_sigkill_timeout = -1; /* of mpirun, when known (see above) */

/* Ends the job when `bad` on any rank: the lowest such rank prints msg and aborts the job. */
static void fail_if_any(comm *world, int bad, const char *msg)
{
    int32_t who = bad ? comm_rank(world) : INT32_MAX;
    comm_allreduce(world, &who, 1, COMM_I32, COMM_MIN);
    if (who == INT32_MAX) return;
    if (comm_rank(world) == who) td_fatal(1, "%s", msg);
    comm_barrier(world); /* rank `who` aborts the job meanwhile */
    td_fatal(1, "rank %d could not load the checkpoint", who);
}

/* Finds the checkpoint of --load (every rank reads its meta.json). Without --finetune or
 * --no-load-rng its seed becomes the run's (eff->seed), as the seed is the whole random state.
 * Returns 1 when there is one to load. */
static int resume_find(td_args *eff, comm *world, ckpt_meta *meta)
{
    if (!eff->load) return 0;
    char err[1024] = "";
    int rc = ckpt_find(eff->load, meta, err, sizeof err);
    fail_if_any(world, rc < 0, err);
    if (rc == 1) {
        /* only the first run of `--save X --load X` starts from scratch; any other empty --load
         * is a wrong path */
        char m[4400];
        int needed = eff->finetune || eff->use_checkpoint_args;
        if (needed)
            snprintf(m, sizeof m, "--load %s holds no checkpoint (no %s, meta.json or iter_* folder) but %s needs one: "
                     "check the path", eff->load, CKPT_LATEST, eff->finetune ? "--finetune" : "--use-checkpoint-args");
        else
            snprintf(m, sizeof m, "--load %s holds no checkpoint (no %s, meta.json or iter_* folder): check the path; "
                     "to start from scratch leave --load out, or give --save and --load the same folder", eff->load,
                     CKPT_LATEST);
        fail_if_any(world, needed || !eff->save || strcmp(eff->save, eff->load) != 0, m);
        if (comm_rank(world) == 0)
            TD_INFO("--load %s holds no checkpoint yet: starting from scratch", eff->load);
        return 0;
    }
    if (meta->note && comm_rank(world) == 0) td_warn("%s", meta->note);
    if (!eff->finetune && !eff->no_load_rng && (uint64_t)eff->seed != meta->progress.seed) {
        if (comm_rank(world) == 0 && td_args_given(eff, "--seed"))
            td_warn("using the checkpoint's seed %llu, not --seed %lld (add --no-load-rng to use --seed)",
                    (unsigned long long)meta->progress.seed, (long long)eff->seed);
        eff->seed = (int64_t)meta->progress.seed;
    }
    return 1;
}

/* A note when a resumed run's sequence length or global batch size (gbs) differs from the
 * checkpoint's: both allowed, as in Megatron (the data continues from the consumed sample count). */
static void resume_note_changes(const td_args *a, const ckpt_meta *m, int gbs)
{
    if (a->finetune) return;
    if (a->seq_length != m->model.seq)
        TD_INFO("note: --seq-length %d differs from the checkpoint's %d: the run continues with %d-token samples",
                a->seq_length, m->model.seq, a->seq_length);
    cJSON *args = m->args_json ? cJSON_Parse(m->args_json) : NULL;
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(args, "global_batch_size");
    const cJSON *mb = cJSON_GetObjectItemCaseSensitive(args, "micro_batch_size");
    int old = cJSON_IsNumber(g) && g->valuedouble > 0 ? (int)g->valuedouble
              : cJSON_IsNumber(mb)                    ? (int)mb->valuedouble * m->dp
                                                      : 0;
    if (old > 0 && old != gbs)
        TD_INFO("note: the global batch size is %d, the checkpoint's was %d: the run continues from its %lld "
                "consumed samples in batches of %d", gbs, old, (long long)m->progress.consumed_train, gbs);
    cJSON_Delete(args);
}

/* The run as the checkpoint code sees it: with the distributed optimizer, the moments of this
 * rank's shard (each dp rank saves its own; a load keeps its ranges). */
static ckpt_model ckpt_view(run_state *r)
{
    ckpt_model m = {r->ps, r->nchunks, r->chunks, r->opt->m, r->opt->v, NULL, NULL};
    if (r->opt->sharded) {
        m.shard_ranges = r->shard_ranges;
        m.nshard_ranges = r->nshard_ranges;
    }
    return m;
}

/* What a checkpoint saved now records of the run's progress. */
static ckpt_progress progress_now(const run_state *r, int64_t iter, int64_t consumed, int64_t valid_consumed)
{
    ckpt_progress p = {.iteration = iter, .consumed_train = consumed, .consumed_valid = valid_consumed, .seed = (uint64_t)r->a->seed};
    p.skipped = r->skipped;
    memcpy(p.run_id, r->run_id, sizeof p.run_id);
    if (r->scaled) {
        p.has_loss_scale = 1;
        p.loss_scale = r->scaler.scale;
        p.growth_tracker = r->scaler.growth_tracker;
        p.hysteresis_tracker = r->scaler.hysteresis_tracker;
    }
    return p;
}

/* Test hook (TRIDENT_TEST_OVERFLOW_ITER=N): at iteration N the last rank finds an Inf in one of
 * the gradients it steps, as an fp16 overflow would leave there; every rank must skip the step. */
static void inject_overflow(run_state *r)
{
    if (r->ps->world_rank != r->ps->world_size - 1) return;
    for (int k = 0; k < r->nchunks; k++)
        if (r->opt->shard[k].nranges > 0) {
            float *g = (float *)r->opt->shard[k].grads + r->opt->shard[k].ranges[0].shard;
            *g = INFINITY;
            return;
        }
}

/* Loads the checkpoint into the run (weights only with --finetune, no moments with
 * --no-load-optim) and returns where to continue from. */
static ckpt_progress resume_load(run_state *r, const ckpt_meta *meta)
{
    const td_args *a = r->a;
    double t0 = td_now();
    ckpt_model m = ckpt_view(r);
    char err[1024] = "";
    int rc = ckpt_load(meta, &m, !a->finetune && !a->no_load_optim, err, sizeof err);
    fail_if_any(r->ps->world, rc != 0, err);
    ckpt_progress p = meta->progress;
    if (a->finetune) p = (ckpt_progress){.seed = (uint64_t)a->seed};
    p.seed = (uint64_t)a->seed;
    comm_barrier(r->ps->world);
    if (r->ps->world_rank == 0)
        TD_INFO("loaded checkpoint %s (iteration %lld, written by tp %d x pp %d x dp %d, %d virtual stage%s) in %.2f s%s",
                meta->dir, (long long)meta->progress.iteration, meta->tp, meta->pp, meta->dp, meta->vp,
                meta->vp > 1 ? "s" : "", td_now() - t0,
                a->finetune ? ": weights only, starting at iteration 0" : a->no_load_optim ? ": no optimizer state" : "");
    return p;
}

static void save_checkpoint(run_state *r, const ckpt_progress *p)
{
    const td_args *a = r->a;
    wait_params(r);
    ckpt_model m = ckpt_view(r);
    char *args = td_args_json(a, TD_CMD_TRAIN);
    ckpt_save_stats st;
    ckpt_save(a->save, &m, p, args, a->keep_last, &st);
    free(args);
    if (r->ps->world_rank != 0) return;
    TD_INFO("saved checkpoint at iteration %lld to %s: %.1f MB in %.2f s (%.0f MB/s)", (long long)p->iteration,
            a->save, (double)st.bytes / 1e6, st.seconds, (double)st.bytes / 1e6 / (st.seconds > 0 ? st.seconds : 1e-9));
    static int warned;
    if (a->exit_signal_handler && g_sigkill_timeout >= 0 && st.seconds > 0.5 * g_sigkill_timeout && !warned) {
        warned = 1;
        td_warn("this save took %.1f s but mpirun SIGKILLs the ranks %g s after passing SIGTERM on "
                "(odls_base_sigkill_timeout): a SIGTERM to mpirun could lose the save; launch with mpirun --mca "
                "odls_base_sigkill_timeout %.0f (see docs/checkpoints.md)", st.seconds, g_sigkill_timeout,
                st.seconds * 4 + 10);
    }
}

/* After each iteration: saves every --save-interval, and decides whether to stop (--exit-interval,
 * --exit-duration-in-mins, a signal with --exit-signal-handler; agreed by all ranks), saving
 * first. *last_saved: the iteration of the newest save. Returns 1 to stop. */
static int after_iteration(run_state *r, const ckpt_progress *p, double t_begin, int64_t *last_saved)
{
    const td_args *a = r->a;
    int64_t it = p->iteration;
    if (a->save && a->save_interval && it % a->save_interval == 0) {
        save_checkpoint(r, p);
        *last_saved = it;
    }
    int32_t stop[3] = {0, 0, 0}; /* the signal received (its number), duration, interval */
    int timed = td_args_given(a, "--exit-duration-in-mins");
    if (a->exit_signal_handler || timed) {
        stop[0] = g_exit_signal;
        stop[1] = timed && (td_now() - t_begin) / 60.0 > a->exit_duration_in_mins;
        comm_allreduce(r->ps->world, stop, 2, COMM_I32, COMM_MAX);
    }
    stop[2] = a->exit_interval && it % a->exit_interval == 0;
    if (!stop[0] && !stop[1] && !stop[2]) return 0;
    int rank0 = r->ps->world_rank == 0;
    const char *sig = signal_name(stop[0]);
    if (a->save && *last_saved != it) {
        if (rank0 && stop[0]) TD_INFO("received %s: saving iteration %lld to %s before exiting", sig, (long long)it, a->save);
        save_checkpoint(r, p);
        *last_saved = it;
    } else if (rank0 && stop[0]) {
        TD_INFO("received %s: %s", sig, a->save ? "this iteration is saved already" : "no --save, nothing to save");
    }
    if (rank0) {
        char why[64];
        snprintf(why, sizeof why, "%s received", sig);
        TD_INFO("exiting after iteration %lld (%s)", (long long)it,
                stop[0] ? why : stop[1] ? "--exit-duration-in-mins" : "--exit-interval");
    }
    return 1;
}

/* The time breakdown and the limits it is held against: the GEMM peak (the best of the start's
 * measurement and a new one now; raised by bd_print if the GEMMs ran faster) and the bandwidth of AdamW's streams
 * (measured now, after the peak RSS was read, and only when AdamW's bytes exceed the caches;
 * bytes read + written, as AdamW's). */
static void print_breakdown(run_state *r)
{
    size_t stepped = opt_adamw_state_numel(r->opt) / 2; /* the shard with the distributed optimizer */
    double peak = r->peak_measured * 1e3;
    if (!td_args_given(r->a, "--peak-tflops")) peak = fmax(peak, be_peak_gflops(r->be));
    bd_limits lim = {.peak_gflops = peak, .adamw_bytes = be_adamw_bytes(stepped)};
    lim.peak_name = td_args_given(r->a, "--peak-tflops") ? "--peak-tflops peak"
                    : r->be->gemm_dtype == BE_BF16       ? "bf16 GEMM peak"
                    : r->be->gemm_dtype == BE_F16        ? "fp16 GEMM peak"
                                                         : "sgemm peak";
    if (lim.adamw_bytes > 256e6) lim.stream_gbps = be_adamw_stream_gbps(r->be);
    bd_print(&r->bd, &lim);
}

/* World rank 0 takes the --save folder's lock for the job (held until it ends); when another run
 * holds it, rank 0 says so in one line and every rank returns 1 together. */
static int lock_save_dir(const char *dir, comm *world)
{
    char err[4400] = "";
    int32_t busy = 0;
    if (comm_rank(world) == 0) {
        int rc = ckpt_lock_save_dir(dir, err, sizeof err);
        if (rc > 0) td_warn("%s", err);
        busy = rc < 0;
        if (busy) fprintf(stderr, "error: trident train: %s\n", err);
    }
    comm_bcast(world, &busy, 1, COMM_I32, 0);
    return busy;
}

/* This iteration's MFU against the peak, raised (and said) if the model's rate passed it: the
 * start's measurement ran on a busier machine or other shapes. */
static double mfu_of(run_state *r, double model_tflops, int64_t iter)
{
    double before = r->peak_tflops, mfu;
    if (bd_fraction(model_tflops, &r->peak_tflops, &mfu) && r->reporter)
        TD_INFO("peak for MFU: %.4g TFLOP/s per rank (raised from %.4g: iteration %lld ran the model at this rate)",
                model_tflops, before, (long long)iter);
    return mfu;
}

/* Ends a diverged run (exit 1, no checkpoint of the diverged model): `what` happened at `iter`;
 * names the newest checkpoint saved before it, which --load resumes from. */
static void stop_diverged(const td_args *a, int64_t iter, int64_t last_saved, const char *what)
{
    char saved[600] = "";
    if (a->save && last_saved > 0)
        snprintf(saved, sizeof saved, "; not saved: the newest checkpoint in --save %s is iteration %lld", a->save,
                 (long long)last_saved);
    else if (a->save)
        snprintf(saved, sizeof saved, "; not saved to --save %s", a->save);
    td_fatal(1, "iteration %lld: %s: the training diverged; lower --lr%s%s%s", (long long)iter, what,
             a->clip_grad > 0 ? "" : ", clip the gradients (--clip-grad 1, the default; 0 turns it off)",
             a->fp16 ? ", or train in --bf16" : "", saved);
}

int trainer_run(const td_args *a, comm *world)
{
    double t_begin = td_now();
    td_args eff; /* the seed and the model settings may come from the checkpoint */
    td_args_copy(&eff, a);
    ckpt_meta meta;
    int resume = resume_find(&eff, world, &meta), rank = comm_rank(world);
    char msg[4096];
    /* every rank finds the same problem before allocating; rank 0 prints it, all exit 2 */
    if ((resume && ckpt_args_reconcile(&eff, &meta, tokenizer_vocab(&eff), eff.tensor_model_parallel_size, rank == 0,
                                       msg, sizeof msg)) ||
        trainer_validate(&eff, comm_size(world), msg, sizeof msg)) {
        if (rank == 0) fprintf(stderr, "error: trident train: %s\n", msg);
        if (resume) ckpt_meta_free(&meta);
        td_args_free(&eff);
        return TD_EXIT_USAGE;
    }
    if (eff.save && lock_save_dir(eff.save, world)) {
        if (resume) ckpt_meta_free(&meta);
        td_args_free(&eff);
        return 1;
    }
    if (eff.save) {
        int64_t start = resume && !eff.finetune ? meta.progress.iteration : 0;
        int bad = rank == 0 && ckpt_check_save_dir(eff.save, start, resume ? meta.dir : NULL, msg, sizeof msg);
        fail_if_any(world, bad, msg);
    }
    if (eff.exit_signal_handler) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        g_signal_says = rank == 0;
        g_output_pipes = getenv("OMPI_MCA_orte_hnp_uri") != NULL; /* started by mpirun: output goes through it */
        int is_default;
        g_sigkill_timeout = ompi_sigkill_timeout(&is_default);
        if (rank == 0 && is_default && eff.save)
            td_warn("--exit-signal-handler under Open MPI: on SIGTERM (or Ctrl-C) mpirun passes SIGTERM to the ranks "
                    "after odls_base_sigkill_timeout seconds (default 1) and SIGKILLs them as long again later, too "
                    "soon to save; launch with mpirun --mca odls_base_sigkill_timeout 60 (more than an iteration plus "
                    "a save; see docs/checkpoints.md)");
        sa.sa_handler = on_exit_signal;
        sa.sa_flags = SA_RESTART;
        sigaction(SIGTERM, &sa, NULL);
        sigaction(SIGINT, &sa, NULL);
    }
    run_state r;
    setup(&r, &eff, world);
    a = &eff;
    ckpt_progress prog = {.seed = (uint64_t)eff.seed};
    if (resume) {
        if (r.ps->world_rank == 0) resume_note_changes(a, &meta, r.gbs);
        prog = resume_load(&r, &meta);
        ckpt_meta_free(&meta);
        r.skipped = prog.skipped;
        memcpy(r.run_id, prog.run_id, sizeof r.run_id);
        if (prog.has_loss_scale && r.scaled && r.scaler.dynamic && !a->finetune) {
            r.scaler.scale = prog.loss_scale;
            r.scaler.growth_tracker = prog.growth_tracker;
            r.scaler.hysteresis_tracker = prog.hysteresis_tracker;
        }
    }
    if (!r.run_id[0]) { /* a run from scratch, a --finetune, or a checkpoint from before run ids */
        if (rank == 0) ckpt_new_run_id(r.run_id);
        comm_bcast(world, r.run_id, sizeof r.run_id, COMM_U8, 0);
    }
    if (resume && prog.iteration >= r.train_iters && r.reporter)
        TD_INFO("note: the checkpoint is at iteration %lld, already at or past --train-iters %lld%s: nothing to "
                "train; raise --train-iters to continue", (long long)prog.iteration, (long long)r.train_iters,
                td_args_given(a, "--train-iters") ? "" : " (--train-samples / --global-batch-size)");
    const char *ov = getenv("TRIDENT_TEST_OVERFLOW_ITER");
    int64_t overflow_test_iter = ov ? atoll(ov) : -1;
    const gpt_config *c = &r.chunks[0]->cfg;
    double flops_iter = gpt_flops_per_iteration(c, r.gbs, 0);
    int64_t consumed = prog.consumed_train, valid_consumed = prog.consumed_valid, last_saved = -1;
    int64_t last_iter = prog.iteration, stopped = 0;
    double t_start = td_now();

    for (int64_t iter = prog.iteration + 1; iter <= r.train_iters && !stopped; iter++) {
        double t0 = td_now(), c0 = ps_comm_seconds(r.ps);
        bd_begin_iteration(&r.bd);
        bd_start(&r.bd, BD_OPTIMIZER);
        for (int k = 0; k < r.nchunks; k++) be_zero(r.be, r.chunks[k]->grads, r.chunks[k]->numel);
        be_lowp_invalidate(r.be); /* the last step (or a load) changed the weights */
        bd_stop(&r.bd, BD_OPTIMIZER);
        r.src.consumed = consumed;
        double scale = r.scaled ? r.scaler.scale : 1.0;
        r.it.loss_scale = (float)(r.bert ? scale : scale / ((double)r.gbs * c->seq));
        bert_begin(&r, GPTDS_TRAIN);
        double loss_sum = pp_run(r.schedule, &r.it);
        dp_finish_grads(r.dp, r.nchunks);
        bd_start(&r.bd, BD_OPTIMIZER);
        if (iter == overflow_test_iter) inject_overflow(&r);
        double norm = opt_unscaled_grad_norm(r.opt, scale);
        int found_inf = !isfinite(norm);
        if (found_inf && !r.scaled)
            td_fatal(1, "iteration %lld: the gradient norm is %g (NaN or Inf); lower --lr or check the data",
                     (long long)iter, norm);
        if (r.scaled) opt_loss_scaler_update(&r.scaler, found_inf);
        r.skipped += found_inf;
        int64_t step = iter - r.skipped; /* Adam steps and the schedule count only the steps taken */
        double lr = opt_lr_at(&r.lr, found_inf ? step + 1 : step);
        bd_start(&r.bd, BD_ADAMW);
        if (opt_adamw_step_scaled(r.opt, lr, norm, a->clip_grad, scale, step))
            for (int k = 0; k < r.nchunks; k++) dp_start_param_gather(r.dp[k]);
        bd_stop(&r.bd, BD_ADAMW);
        bd_stop(&r.bd, BD_OPTIMIZER);
        consumed += r.gbs;
        comm_allreduce(r.ps->dp_group, &loss_sum, 1, COMM_F64, COMM_SUM);
        comm_bcast(r.ps->pp_group, &loss_sum, 1, COMM_F64, r.ps->pp - 1);
        double loss = r.bert ? loss_sum : loss_sum / ((double)r.gbs * c->seq);
        be_sync(r.be);
        bd_end_iteration(&r.bd);
        double dt = td_now() - t0;

        met_record rec = {0};
        rec.iteration = iter;
        rec.consumed_samples = consumed;
        rec.lm_loss = loss;
        rec.lr = lr;
        rec.grad_norm = norm;
        rec.loss_scale = scale;
        rec.skipped = found_inf;
        rec.skipped_total = r.skipped;
        rec.elapsed_ms = dt * 1e3;
        rec.comm_ms = (ps_comm_seconds(r.ps) - c0) * 1e3;
        rec.tokens_per_s = (double)r.gbs * c->seq / dt;
        rec.model_tflops_per_rank = flops_iter / dt / r.ps->world_size / 1e12;
        rec.mfu = mfu_of(&r, rec.model_tflops_per_rank, iter);
        rec.val_loss = NAN;
        if (r.bert) bert_metrics(&r, &rec);
        if (r.eval && (iter % a->eval_interval == 0 || iter == r.train_iters)) {
            rec.val_loss = evaluate(&r, GPTDS_VALID, valid_consumed, a->eval_iters);
            valid_consumed += a->eval_iters * r.gbs;
        }
        if (!isfinite(loss)) {
            snprintf(msg, sizeof msg, "the loss is %g (a NaN or Inf in the forward pass, which no loss scale "
                     "changes)", loss);
            stop_diverged(a, iter, last_saved, msg);
        }
        if (r.scaled && opt_loss_scaler_diverged(&r.scaler)) {
            snprintf(msg, sizeof msg, "the gradients overflowed in %d steps in a row with the loss scale at its %s %g "
                     "(%lld steps skipped in all; a smaller %s may help)", OPT_DIVERGED_OVERFLOWS,
                     r.scaler.dynamic ? "minimum (--min-loss-scale)" : "constant value (--loss-scale)",
                     r.scaler.scale, (long long)r.skipped, r.scaler.dynamic ? "--min-loss-scale" : "--loss-scale");
            stop_diverged(a, iter, last_saved, msg);
        }
        rec.time_left_s = (td_now() - t_start) / (double)(iter - prog.iteration) * (double)(r.train_iters - iter);
        if (r.reporter) {
            met_write(r.metrics, &rec);
            tb_log_iteration(r.tb, &rec, r.scaled, a->tensorboard_log_interval);
            if (iter % a->log_interval == 0 || iter == 1 || iter == r.train_iters || isfinite(rec.val_loss))
                met_print(&rec, r.train_iters, r.gbs);
        }
        last_iter = iter;
        ckpt_progress now = progress_now(&r, iter, consumed, valid_consumed);
        stopped = after_iteration(&r, &now, t_begin, &last_saved);
    }
    r.rss_peak = (double)trainer_peak_rss();
    if (a->save && last_iter > 0 && last_iter != last_saved) { /* also a loaded one: re-saves it as laid out now */
        ckpt_progress now = progress_now(&r, last_iter, consumed, valid_consumed);
        save_checkpoint(&r, &now);
    }
    if (a->dump_params) dump_params(&r, a->dump_params);
    if (r.reporter) {
        double total = td_now() - t_start;
        TD_INFO("done: %lld iterations in %.1f s%s; peak memory (RSS) %.1f MiB", (long long)last_iter, total,
                last_iter == prog.iteration && resume ? " (none trained: the checkpoint was already there)" : "",
                (double)trainer_peak_rss() / (1024.0 * 1024.0));
        tb_scalar(r.tb, "peak-memory-mib", last_iter, r.rss_peak / (1024.0 * 1024.0));
        tb_flush(r.tb);
        print_breakdown(&r);
    }
    report_memory(&r);
    teardown(&r);
    td_args_free(&eff);
    return 0;
}
