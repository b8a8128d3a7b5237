/* The flags of a training run held against the rules before anything is allocated
 * (trainer_validate), and the pipeline split they describe. See trainer.h and train_impl.h. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "train_impl.h"
#include "trident/check.h"
#include "trident/tokenizer.h"

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
pp_split run_split(const td_args *a, int pp)
{
    pp_split s = {a->num_layers, pp, 1, trainer_first_layers(a), trainer_last_layers(a),
                  a->account_for_embedding_in_pipeline_split, a->account_for_loss_in_pipeline_split};
    int per = a->num_layers_per_virtual_pipeline_stage;
    if (td_args_given(a, "--num-layers-per-virtual-pipeline-stage") && per > 0)
        s.vp = (s.L + s.embedding + s.loss) / (pp * per);
    return s;
}

/* Context parallelism's rules (--context-parallel-size C > 1): the world holds the grid, each
 * sequence cuts into 2C chunks (Megatron's load balancing; uneven lengths are refused, not
 * padded), the a2a exchange splits the local heads and key/value groups C ways, and what is not
 * built with it yet is refused by name. */
static int cp_validate(const td_args *a, int world_size, char *msg, size_t msglen)
{
    int tp = a->tensor_model_parallel_size, pp = a->pipeline_model_parallel_size, cp = a->context_parallel_size;
    if (cp == 1) return 0;
    if (world_size % (tp * cp * pp))
        FAIL("the world size %d is not divisible by --tensor-model-parallel-size %d x --context-parallel-size %d x "
             "--pipeline-model-parallel-size %d", world_size, tp, cp, pp);
    if (a->seq_length % (2 * cp))
        FAIL("--seq-length %d is not divisible by 2 x --context-parallel-size %d: context parallelism cuts each "
             "sequence into %d equal chunks (refused, not padded)", a->seq_length, cp, 2 * cp);
    int heads = a->num_attention_heads / tp;
    int groups = (a->group_query_attention && a->num_query_groups ? a->num_query_groups : a->num_attention_heads) / tp;
    if (strcmp(a->cp_comm_type, "a2a") == 0 && (heads % cp || groups % cp))
        FAIL("--cp-comm-type a2a splits each tensor-parallel rank's %d attention heads and %d key/value groups over "
             "--context-parallel-size %d ranks: give sizes that divide them", heads, groups, cp);
    return 0;
}

int run_validate(const td_args *a, int world_size, char *msg, size_t msglen)
{
    int tp = a->tensor_model_parallel_size, pp = a->pipeline_model_parallel_size;
    int max_pos = a->max_position_embeddings ? a->max_position_embeddings : a->seq_length;
    if (a->data_path.n == 0) FAIL("--data-path is required (a dataset prefix from trident preprocess)");
    if (td_args_check_model(a, msg, msglen)) return -1; /* what the --model choice fixes */
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
    if (cp_validate(a, world_size, msg, msglen)) return -1;
    pp_split layers_split = run_split(a, pp);
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
    int dp = world_size / (tp * pp * a->context_parallel_size);
    int gbs = a->global_batch_size ? a->global_batch_size : a->micro_batch_size * dp;
    if (gbs % (a->micro_batch_size * dp))
        FAIL("--global-batch-size %d is not divisible by --micro-batch-size %d x data-parallel size %d", gbs,
             a->micro_batch_size, dp);
    if (dp * a->context_parallel_size % a->expert_model_parallel_size)
        FAIL("--expert-model-parallel-size %d does not divide the data-parallel x context-parallel size %d (world %d "
             "/ (tensor %d x pipeline %d)): expert parallelism is carved out of data x context parallelism",
             a->expert_model_parallel_size, dp * a->context_parallel_size, world_size, tp, pp);
    int micro = gbs / (a->micro_batch_size * dp);
    if (sched == PP_SCHEDULE_INTERLEAVED && micro % pp)
        FAIL("the interleaved schedule needs the number of micro-batches (%d = --global-batch-size %d / "
             "(--micro-batch-size %d x data-parallel %d)) divisible by --pipeline-model-parallel-size %d",
             micro, gbs, a->micro_batch_size, dp, pp);
    if (pp_slots_needed(sched, pp, 0, vp, micro) > PP_MAX_SLOTS)
        FAIL("%d micro-batches in flight per stage is more than %d; use fewer micro-batches with "
             "--pipeline-schedule gpipe",
             pp_slots_needed(sched, pp, 0, vp, micro), PP_MAX_SLOTS);
    if (a->sft && a->eod_mask_loss)
        FAIL("--sft counts the answer's tokens (or every sample token with --no-answer-only-loss), never one across "
             "two samples: leave out --eod-mask-loss");
    if (!a->sft && a->no_answer_only_loss) FAIL("--no-answer-only-loss applies to --sft only");
    if (!a->sft && td_args_given(a, "--sft-truncation-method")) FAIL("--sft-truncation-method applies to --sft only");
    if (!a->sft && (a->reset_attention_mask || a->reset_position_ids || a->eod_mask_loss)) {
        /* packed documents split at the tokenizer's EOD (a tokenizer that does not open is
         * reported where the run opens it) */
        int eod = 0;
        if (run_tokenizer_facts(a, NULL, &eod, msg, msglen)) eod = 0;
        msg[0] = 0;
        if (eod < 0)
            FAIL("--reset-attention-mask, --reset-position-ids and --eod-mask-loss split documents at the "
                 "tokenizer's end-of-document token, and this tokenizer has none: leave them out");
    }
    return 0;
}
