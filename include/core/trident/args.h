/* Command-line arguments. Owns the one table of Megatron-named flags (type, default, help,
 * which subcommands take it, valid range) and the parser every subcommand uses. A bad flag or
 * value is one line naming the flag, and exit 2, before anything else is allocated. */
#ifndef TRIDENT_ARGS_H
#define TRIDENT_ARGS_H

#include <stddef.h>
#include <stdint.h>

typedef struct { int n; char **v; } td_strlist;

/* Subcommands, as bits: a flag lists the subcommands that accept it. */
enum td_cmd {
    TD_CMD_TRAIN = 1u << 0,
    TD_CMD_PREPROCESS = 1u << 1,
    TD_CMD_TOKENIZE = 1u << 2,
    TD_CMD_DATA_INFO = 1u << 3,
    TD_CMD_EVAL = 1u << 4,
    TD_CMD_GENERATE = 1u << 5,
    TD_CMD_CONVERT = 1u << 6,
    TD_CMD_CHECKPOINT = 1u << 7,
    TD_CMD_PLAN = 1u << 8,
    TD_CMD_SERVE = 1u << 9,
};

#define TD_MAX_FLAGS 224

typedef struct td_args {
    /* common */
    int64_t seed;
    int verbose;
    char *backend;             /* --backend: auto or a name of the registry (src/backend/registry.c) */
    char *comm;                /* --comm: auto, mpi or nccl (the communicator of device buffers; xfer.h) */
    int tf32;                  /* --tf32: fp32 GEMMs may use TF32 (cuda) */
    /* tokenizer */
    char *tokenizer_type;
    char *vocab_file;
    char *merge_file;
    char *tokenizer_model;
    int decode;
    int whole;
    /* preprocess */
    td_strlist input;
    char *input_format;
    td_strlist json_keys;
    char *output_prefix;
    int append_eod;
    int split_sentences;
    int workers;
    int skip_bad_lines;
    /* data */
    td_strlist data_path;
    char *split;
    char *data_cache_path;
    int seq_length;
    int micro_batch_size;
    int global_batch_size;
    int reset_attention_mask, reset_position_ids, eod_mask_loss; /* packed documents (gpt_source.h) */
    int sft, no_answer_only_loss;    /* SFT samples (include/data/trident/sft.h) */
    char *sft_format, *prompt_template, *sft_truncation_field, *sft_truncation_method;
    /* plan */
    char *cluster;
    int num_gpus, vocab_size, plan_top, plan_explain, plan_json, plan_calibrate;
    double plan_calibrate_s;
    int num_experts, moe_ffn_hidden_size, moe_router_topk, moe_router_pre_softmax;
    int expert_model_parallel_size, expert_tensor_parallel_size, moe_grouped_gemm;
    char *moe_token_dispatcher_type;
    int moe_shared_expert_intermediate_size, moe_shared_expert_gate, moe_router_enable_expert_bias;
    double moe_router_bias_update_rate, moe_expert_capacity_factor;
    char *moe_token_drop_policy;
    int moe_pad_expert_input_to_capacity;
    char *moe_layer_freq;
    char *moe_router_score_function, *moe_router_load_balancing_type;
    double moe_router_topk_scaling_factor, moe_aux_loss_coeff, moe_z_loss_coeff;
    /* model */
    char *model;               /* gpt | bert */
    int bert_binary_head, bert_no_binary_head;
    double short_seq_prob, mask_prob;
    int num_layers;
    int hidden_size;
    int num_attention_heads;
    int ffn_hidden_size;
    char *normalization;
    double norm_epsilon;
    char *position_embedding_type;
    double rotary_base;
    double rotary_percent;
    char *rope_scaling_type;   /* --rope-scaling-type: none|linear|llama3|yarn */
    int use_rope_scaling;      /* Megatron's --use-rope-scaling: llama3 */
    double rope_scaling_factor;
    double rotary_scaling_factor; /* Megatron's name of the factor (yarn) */
    double rope_low_freq_factor;
    double rope_high_freq_factor;
    int original_max_position_embeddings;
    double yarn_beta_fast;
    double yarn_beta_slow;
    double yarn_attention_factor;
    char *rope_type;           /* Megatron's --rope-type rope|yarn */
    double mscale;             /* Megatron's --mscale, --mscale-all-dim: yarn's attention factor */
    double mscale_all_dim;
    int swiglu;
    char *activation_func;     /* --activation-func: a TD_ACT_CHOICES name, NULL: from the switches */
    int gated_linear_unit;
    int squared_relu;
    int openai_gelu;
    int group_query_attention;
    int num_query_groups;
    int kv_channels;
    int disable_bias_linear;
    int add_qkv_bias;
    int untie_embeddings_and_output_weights;
    int max_position_embeddings;
    int make_vocab_size_divisible_by;
    double init_method_std;
    double hidden_dropout;
    double attention_dropout;
    int lora_rank;             /* train: LoRA adapters of this rank on a frozen base (0: off) */
    double lora_alpha, lora_dropout;
    char *lora_target_modules; /* a comma-separated subset of TD_LORA_MODULE_CHOICES, or all-linear */
    char *lora_load;           /* train: a PEFT adapter folder loaded as the trainable adapters */
    /* parallel */
    int tensor_model_parallel_size;
    int context_parallel_size; /* ranks each sample's sequence is split over (1: off) */
    char *cp_comm_type;        /* context parallelism's attention exchange: "p2p", "all_gather" or "a2a" */
    int pipeline_model_parallel_size;
    int num_layers_per_virtual_pipeline_stage;
    char *pipeline_schedule;
    char *recompute_granularity; /* NULL, "full" or "selective" */
    char *recompute_method;      /* NULL, "uniform" or "block" */
    int recompute_num_layers;
    int decoder_first_pipeline_num_layers;
    int account_for_embedding_in_pipeline_split;
    int account_for_loss_in_pipeline_split;
    int decoder_last_pipeline_num_layers;
    int64_t ddp_bucket_size;
    int overlap_grad_reduce;
    int use_distributed_optimizer;
    int sequence_parallel;
    int no_scatter_gather_tensors_in_pipeline;
    int bf16, fp16;            /* mixed precision */
    char *dtype;               /* convert --to hf: F32, F16 or BF16 */
    char *merge_lora;          /* convert --from hf --to hf: a PEFT LoRA adapter folder to merge */
    td_strlist prompt;         /* generate */
    char *prompt_file;
    char *task, *valid_data;   /* eval --task */
    char *tensorboard_dir;
    char *host;                /* serve */
    char *chat_template;       /* serve: a tokenizer_config.json (or its folder) for /v1/chat/completions */
    int port, max_batch, max_queue, max_prompt_tokens, max_tokens_to_generate;
    int max_connections, max_connections_per_ip, idle_timeout, request_timeout, shutdown_grace;
    int64_t max_body_bytes;
    int64_t tensorboard_log_interval;
    int strict_lambada, overlapping_eval;
    int max_new_tokens, greedy, top_k, no_kv_cache, ignore_eod;
    double temperature, top_p;
    double loss_scale;         /* constant loss scale (given or not) */
    double initial_loss_scale, min_loss_scale;
    int64_t loss_scale_window;
    int hysteresis;
    int overlap_param_gather;
    char *dp_collectives;
    double distributed_timeout_minutes;
    /* optimizer and schedule */
    double lr;
    double min_lr;
    int64_t lr_warmup_iters;
    double lr_warmup_fraction;
    char *lr_decay_style;
    int64_t lr_decay_iters;
    double weight_decay;
    double adam_beta1;
    double adam_beta2;
    double adam_eps;
    double clip_grad;
    /* training loop */
    int64_t train_iters;
    int64_t train_samples;
    int64_t eval_interval;
    int64_t eval_iters;
    int64_t log_interval;
    char *metrics_file;
    char *dump_params;
    double peak_tflops;
    /* checkpoints */
    char *save;
    int64_t save_interval;
    char *load;
    int no_load_optim;
    int no_load_rng;
    int use_checkpoint_args;
    int finetune;
    int keep_last;
    int64_t exit_interval;
    double exit_duration_in_mins;
    int exit_signal_handler;
    /* eval and convert */
    char *split_name;
    int eval_stride;
    td_strlist from;
    td_strlist to;

    /* debug (trident/debug.h, td_debug_from_args): fakes and faults for tests and drills */
    int fake_hosts, debug_save_delay_ms, debug_watch_only_rank, debug_comm_staged;
    int64_t debug_overflow_iteration;
    unsigned char set_[TD_MAX_FLAGS]; /* set_[i]: flag i of the table was given */
} td_args;

/* Parses argv[first..argc) for subcommand `cmd` (one td_cmd bit) into *a, after filling every
 * default. Returns 0 on success, 1 when --help was asked (usage printed to stdout). A bad flag
 * or value prints one line naming it and exits 2. `prog` is e.g. "trident train". */
int td_args_parse(td_args *a, unsigned cmd, const char *prog, int argc, char **argv, int first);
/* Fills every default for `cmd` (what td_args_parse starts from). */
void td_args_defaults(td_args *a, unsigned cmd);
/* The value of numeric flag `flag` (int or float) in *v: 0, or -1 when it is no such flag. */
int td_args_get_number(const td_args *a, const char *flag, double *v);
/* Sets numeric flag `flag` to v (not marking it given; a switch to v != 0, a choice flag to its
 * v-th choice): 0, or -1 when it is no such flag or v is outside its range. */
int td_args_set_number(td_args *a, const char *flag, double v);
/* Sets string flag `flag` to a copy of v (not marking it given): 0, or -1 when it is no such flag. */
int td_args_set_string(td_args *a, const char *flag, const char *v);
/* 1 if `flag` (e.g. "--train-iters") was given on the command line. */
int td_args_given(const td_args *a, const char *flag);
/* The index of choice flag `flag`'s value among its choices ("--model bert": 1), or -1 when it is
 * no choice flag or has no value. */
int td_args_choice_index(const td_args *a, const char *flag);
/* --model's choices, in the order of gpt_kind (include/model/trident/gpt_config.h). */
extern const char TD_MODEL_CHOICES[];
/* The Hugging Face module names --lora-target-modules takes (Llama's), in bit order. */
extern const char TD_LORA_MODULE_CHOICES[];
/* Parses a --lora-target-modules list (names of TD_LORA_MODULE_CHOICES, comma-separated, or
 * "all-linear") into *mask (bit i: the i-th choice): 0, or -1 with one line in msg. */
int td_lora_modules_parse(const char *list, unsigned *mask, char *msg, size_t msglen);
/* The list of mask's names, comma-separated, into out. */
void td_lora_modules_str(unsigned mask, char *out, size_t len);
/* The flag combinations a --model choice fixes (--model bert: Megatron-BERT's LayerNorm, learned
 * positions, GeLU MLP with biases and tied decoder, a WordPiece tokenizer and one sentence-level
 * dataset; --bert-binary-head and --bert-no-binary-head need it) for a training run: 0, or -1
 * with one line naming the flags and the rule in msg. Reads only the flags. */
int td_args_check_model(const td_args *a, char *msg, size_t msglen);
/* Every flag `cmd` takes with its value (defaults included) as the text of one JSON object,
 * keyed by Megatron's argument names ("num_layers": 12, "split": "969,30,1", lists as arrays,
 * unset flags null). The caller frees it. */
char *td_args_json(const td_args *a, unsigned cmd);
/* Prints the flags `cmd` takes, grouped, with defaults and help. */
void td_args_usage(unsigned cmd, const char *prog, const char *summary);
/* A deep copy (strings and lists its own): free both. */
void td_args_copy(td_args *dst, const td_args *src);
void td_args_free(td_args *a);

#endif
