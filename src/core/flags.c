/* The flag table: the one place a flag is named, typed, defaulted, documented and bounded (read by
 * args.c; see include/core/trident/args.h). */
#include <stddef.h>

#include "args_impl.h"
#include "trident/activation.h"

#define OFF(f) offsetof(td_args, f)
#define ANY_DATA (TD_CMD_TRAIN | TD_CMD_DATA_INFO | TD_CMD_EVAL)
#define MODEL (TD_CMD_TRAIN | TD_CMD_EVAL | TD_CMD_GENERATE | TD_CMD_SERVE | TD_CMD_PLAN)
#define TOK (TD_CMD_TRAIN | TD_CMD_PREPROCESS | TD_CMD_TOKENIZE | TD_CMD_DATA_INFO | TD_CMD_EVAL | TD_CMD_GENERATE | \
             TD_CMD_SERVE)
#define ALL 0xffffffffu
#define BIG 9.0e18

const char TD_MODEL_CHOICES[] = "gpt|bert";
const char TD_LORA_MODULE_CHOICES[] = "q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj";
/* The backends of src/backend/registry.c, and auto: cuda only in a binary built with it. */
#ifdef TRIDENT_HAVE_CUDA
#define TD_BACKEND_CHOICES "auto|cpu|cuda"
#else
#define TD_BACKEND_CHOICES "auto|cpu"
#endif

const flag_t td_flags[] = {
    {"--seed", A_I64, OFF(seed), "1234", TD_CMD_TRAIN | TD_CMD_DATA_INFO | TD_CMD_EVAL | TD_CMD_GENERATE | TD_CMD_SERVE,
     "common",
     "seed of every random stream (init, dropout, data shuffling)", 0, BIG, NULL},
    {"--verbose", A_INT, OFF(verbose), "1", ALL, "common", "0 errors only, 1 info, 2 debug", 0, 2, NULL},
    {"--backend", A_CHOICE, OFF(backend), "auto",
     TD_CMD_TRAIN | TD_CMD_EVAL | TD_CMD_GENERATE | TD_CMD_SERVE | TD_CMD_CONVERT | TD_CMD_PLAN, "common",
     "the compute backend: auto (cuda when this trident has it and a GPU is visible, else cpu), cpu, or cuda "
     "(one GPU a rank: the local rank modulo the visible GPUs; docs/gpu.md); plan reads it with --calibrate, "
     "convert with --from hf", 0, 0, TD_BACKEND_CHOICES},
    {"--comm", A_CHOICE, OFF(comm), "auto", TD_CMD_TRAIN | TD_CMD_EVAL | TD_CMD_GENERATE | TD_CMD_SERVE, "common",
     "the communicator device buffers cross between ranks: nccl (one NCCL communicator a group, the GPUs' buffers "
     "read in place; needs --backend cuda, libnccl.so.2 and a GPU of its own for each rank of a host), mpi (through "
     "pinned host copies), or auto (nccl where it can work, else mpi; docs/gpu.md, NCCL). Host memory always "
     "crosses MPI", 0, 0, "auto|mpi|nccl"},
    {"--tf32", A_BOOL, OFF(tf32), "0", TD_CMD_TRAIN | TD_CMD_EVAL | TD_CMD_GENERATE | TD_CMD_SERVE,
     "common",
     "cuda: fp32 GEMMs may round their inputs to TF32 on the tensor cores (several times faster, about 1e-3 "
     "relative error); off, they are IEEE fp32 and match the cpu backend's. The cpu backend has no TF32", 0, 0,
     NULL},

    {"--tokenizer-type", A_CHOICE, OFF(tokenizer_type), "GPT2BPETokenizer", TOK, "tokenizer",
     "GPT2BPETokenizer (--vocab-file, --merge-file), HuggingFaceTokenizer (--tokenizer-model), or BERT's "
     "WordPiece BertWordPieceLowerCase / BertWordPieceCase (--vocab-file vocab.txt)", 0, 0,
     "GPT2BPETokenizer|HuggingFaceTokenizer|BertWordPieceLowerCase|BertWordPieceCase"},
    {"--tokenizer-model", A_STR, OFF(tokenizer_model), NULL, TOK, "tokenizer",
     "Hugging Face tokenizer.json (BPE or WordPiece models)", 0, 0, NULL},
    {"--vocab-file", A_STR, OFF(vocab_file), NULL, TOK, "tokenizer",
     "GPT-2 vocab.json (same as encoder.json)", 0, 0, NULL},
    {"--merge-file", A_STR, OFF(merge_file), NULL, TOK, "tokenizer",
     "GPT-2 merges.txt (same as vocab.bpe)", 0, 0, NULL},
    {"--decode", A_BOOL, OFF(decode), "0", TD_CMD_TOKENIZE, "tokenize",
     "read lines of space-separated ids, write text", 0, 0, NULL},
    {"--whole", A_BOOL, OFF(whole), "0", TD_CMD_TOKENIZE, "tokenize",
     "encode the whole input as one text instead of line by line", 0, 0, NULL},

    {"--input", A_LIST, OFF(input), NULL, TD_CMD_PREPROCESS, "preprocess",
     "input files (.jsonl, .txt; .gz and .zst are decompressed); repeatable", 0, 0, NULL},
    {"--input-format", A_CHOICE, OFF(input_format), "json", TD_CMD_PREPROCESS, "preprocess",
     "json: one JSON object per line; text: each file is one document", 0, 0, "json|text"},
    {"--json-keys", A_LIST, OFF(json_keys), "text", TD_CMD_PREPROCESS, "preprocess",
     "keys to extract from each JSON line; one dataset per key", 0, 0, NULL},
    {"--output-prefix", A_STR, OFF(output_prefix), NULL, TD_CMD_PREPROCESS, "preprocess",
     "writes PREFIX_<key>_document.bin and .idx (_sentence with --split-sentences)", 0, 0, NULL},
    {"--append-eod", A_BOOL, OFF(append_eod), "0", TD_CMD_PREPROCESS, "preprocess",
     "append the tokenizer's EOS (<|endoftext|> for GPT-2) to every document (to its last sentence with "
     "--split-sentences)", 0, 0, NULL},
    {"--split-sentences", A_BOOL, OFF(split_sentences), "0", TD_CMD_PREPROCESS, "preprocess",
     "one sequence per sentence (BERT data; rule-based splitter, not NLTK punkt), written to "
     "PREFIX_<key>_sentence.bin and .idx", 0, 0, NULL},
    {"--workers", A_INT, OFF(workers), "1", TD_CMD_PREPROCESS, "preprocess",
     "tokenizer threads", 1, 1024, NULL},
    {"--skip-bad-lines", A_BOOL, OFF(skip_bad_lines), "0", TD_CMD_PREPROCESS, "preprocess",
     "count and skip malformed JSON lines instead of failing", 0, 0, NULL},
    {"--sft", A_BOOL, OFF(sft), "0", TD_CMD_PREPROCESS | TD_CMD_TRAIN | TD_CMD_EVAL, "sft",
     "supervised fine-tuning data: preprocess writes PREFIX_sft_document and its _answer_mask sidecar "
     "(docs/finetune.md); train reads one sample per sequence, padded, the loss over the answer's tokens; eval scores "
     "a split so", 0, 0, NULL},
    {"--sft-format", A_CHOICE, OFF(sft_format), "chat", TD_CMD_PREPROCESS, "sft",
     "--sft lines: prompt-response (--prompt-template), chat ({\"messages\": [{role, content}]}) or sharegpt "
     "({\"conversations\": [{from, value}]}), the last two rendered with --chat-template", 0, 0,
     "prompt-response|chat|sharegpt"},
    {"--prompt-template", A_STR, OFF(prompt_template), NULL, TD_CMD_PREPROCESS, "sft",
     "--sft-format prompt-response: text with {key} placeholders of each line's strings, ending with the answer's "
     "(e.g. 'Q: {input}\\n\\nA: {output}')", 0, 0, NULL},
    {"--sft-truncation-field", A_STR, OFF(sft_truncation_field), NULL, TD_CMD_PREPROCESS, "sft",
     "--sft-format prompt-response: comma-separated prompt keys whose values a sample longer than the sequence "
     "loses tokens from first, shared out (Megatron-Bridge's truncation_field; default input when the template has "
     "{input}, '' for none)", 0, 0, NULL},
    {"--sft-truncation-method", A_CHOICE, OFF(sft_truncation_method), "right", TD_CMD_TRAIN | TD_CMD_EVAL, "sft",
     "--sft: a sample longer than --seq-length + 1 loses the end (right) or the start (left) of its truncation "
     "fields, then of itself (Megatron-Bridge's truncation_method)", 0, 0, "right|left"},
    {"--no-answer-only-loss", A_BOOL, OFF(no_answer_only_loss), "0", TD_CMD_TRAIN | TD_CMD_EVAL, "sft",
     "--sft: the loss counts every token of a sample, not only the answer's", 0, 0, NULL},

    {"--data-path", A_LIST, OFF(data_path), NULL, ANY_DATA, "data",
     "dataset prefix, or a blend: W1 PREFIX1 W2 PREFIX2 ...", 0, 0, NULL},
    {"--split", A_STR, OFF(split), "969,30,1", ANY_DATA, "data",
     "train,valid,test proportions of the documents", 0, 0, NULL},
    {"--data-cache-path", A_STR, OFF(data_cache_path), NULL, ANY_DATA, "data",
     "folder for index caches (default: beside the data)", 0, 0, NULL},
    {"--seq-length", A_INT, OFF(seq_length), "1024", ANY_DATA | MODEL, "data",
     "tokens per sample", 1, 1 << 24, NULL},
    {"--micro-batch-size", A_INT, OFF(micro_batch_size), "1", TD_CMD_TRAIN | TD_CMD_EVAL | TD_CMD_PLAN, "data",
     "samples per micro-batch per data-parallel rank", 1, 1 << 20, NULL},
    {"--global-batch-size", A_INT, OFF(global_batch_size), NULL, TD_CMD_TRAIN | TD_CMD_DATA_INFO | TD_CMD_PLAN,
     "data", "samples per iteration over all ranks (default: micro-batch x data-parallel)", 1, 1 << 30, NULL},
    {"--reset-attention-mask", A_BOOL, OFF(reset_attention_mask), "0", TD_CMD_TRAIN, "data",
     "packed documents: a token attends only to earlier tokens of its own document (the EOD token ends one and "
     "belongs to it)", 0, 0, NULL},
    {"--reset-position-ids", A_BOOL, OFF(reset_position_ids), "0", TD_CMD_TRAIN, "data",
     "packed documents: positions restart at 0 after each EOD token (learned positions and rope)", 0, 0, NULL},
    {"--eod-mask-loss", A_BOOL, OFF(eod_mask_loss), "0", TD_CMD_TRAIN, "data",
     "no loss where the input token is EOD; the loss is the mean over the other tokens of the global batch", 0, 0,
     NULL},

    {"--cluster", A_STR, OFF(cluster), "dgx-a100-80gb", TD_CMD_PLAN, "plan",
     "the cluster: dgx2h-v100, dgx-a100-80gb, dgx-h100, or a JSON file (docs/plan.md)", 0, 0, NULL},
    {"--num-gpus", A_INT, OFF(num_gpus), NULL, TD_CMD_PLAN, "plan", "devices to lay the model out over", 1, 1 << 24,
     NULL},
    {"--vocab-size", A_INT, OFF(vocab_size), NULL, TD_CMD_PLAN, "plan",
     "the vocabulary (plan reads no tokenizer), padded as --make-vocab-size-divisible-by says", 1, 1 << 30, NULL},
    {"--top", A_INT, OFF(plan_top), "5", TD_CMD_PLAN, "plan", "layouts printed by the search", 1, 1000, NULL},
    {"--explain", A_BOOL, OFF(plan_explain), "0", TD_CMD_PLAN, "plan",
     "the breakdown of each layout's time and memory", 0, 0, NULL},
    {"--json", A_BOOL, OFF(plan_json), "0", TD_CMD_PLAN, "plan", "one JSON object a layout, one a line", 0, 0, NULL},
    {"--calibrate", A_BOOL, OFF(plan_calibrate), "0", TD_CMD_PLAN, "plan",
     "measure the machines as trident trains on them (one device per rank: run under the mpirun you train with, "
     "on one host or several): compute, memory, and the links inside and across nodes apart; print it as a cluster "
     "JSON for --cluster", 0, 0, NULL},
    {"--calibrate-seconds", A_FLOAT, OFF(plan_calibrate_s), "0.3", TD_CMD_PLAN, "plan",
     "--calibrate: how long each GEMM and copy measurement runs (the best of 3 such windows); under a CPU quota "
     "give it several of the quota's periods, so that its pauses count", 0.01, 60, NULL},
    {"--model", A_CHOICE, OFF(model), "gpt", MODEL, "model",
     "gpt: a causal decoder with a next-token loss (GPT-2, Llama); bert: Megatron-BERT, a bidirectional encoder "
     "with masked-LM and sentence-order losses (docs/bert.md)", 0, 0, TD_MODEL_CHOICES},
    {"--bert-binary-head", A_BOOL, OFF(bert_binary_head), "1", MODEL, "model",
     "BERT: the pooler and the sentence-order head, samples of two segments (the default)", 0, 0, NULL},
    {"--bert-no-binary-head", A_BOOL, OFF(bert_no_binary_head), "0", MODEL, "model",
     "BERT: no pooler or sentence-order head; samples of one segment, masked-LM loss only", 0, 0, NULL},
    {"--short-seq-prob", A_FLOAT, OFF(short_seq_prob), "0.1", TD_CMD_TRAIN, "data",
     "BERT: probability that a sample aims at a random length shorter than --seq-length", 0, 1, NULL},
    {"--mask-prob", A_FLOAT, OFF(mask_prob), "0.15", TD_CMD_TRAIN, "data",
     "BERT: fraction of the tokens masked for the masked-LM loss (80% [MASK], 10% random, 10% kept)", 0.001, 1,
     NULL},
    {"--num-layers", A_INT, OFF(num_layers), "12", MODEL, "model", "transformer layers", 1, 1 << 16, NULL},
    {"--hidden-size", A_INT, OFF(hidden_size), "768", MODEL, "model", "hidden size h", 1, 1 << 20, NULL},
    {"--num-attention-heads", A_INT, OFF(num_attention_heads), "12", MODEL, "model", "attention heads", 1,
     1 << 16, NULL},
    {"--ffn-hidden-size", A_INT, OFF(ffn_hidden_size), NULL, MODEL, "model",
     "MLP hidden size (default 4h; gated, e.g. --swiglu, 8h/3 rounded down to a multiple of 64, as Megatron)", 1, 1 << 24,
     NULL},
    {"--normalization", A_CHOICE, OFF(normalization), "LayerNorm", MODEL, "model",
     "the layers' and the final norm", 0, 0, "LayerNorm|RMSNorm"},
    {"--norm-epsilon", A_FLOAT, OFF(norm_epsilon), "1e-5", MODEL, "model", "epsilon of the norms", 1e-12, 1,
     NULL},
    {"--position-embedding-type", A_CHOICE, OFF(position_embedding_type), "learned_absolute", MODEL, "model",
     "learned_absolute (GPT-2), rope (rotary, Llama) or none", 0, 0, "learned_absolute|rope|none"},
    {"--rotary-base", A_FLOAT, OFF(rotary_base), "10000", MODEL, "model", "rotary base (theta)", 1, 1e12, NULL},
    {"--rotary-percent", A_FLOAT, OFF(rotary_percent), "1.0", MODEL, "model",
     "fraction of each head's dimensions that rotate", 1e-6, 1, NULL},
    {"--rope-scaling-type", A_CHOICE, OFF(rope_scaling_type), "none", MODEL, "model",
     "rotary scaling for long context (Hugging Face's rope_type): linear, llama3 (Llama 3.1) or yarn", 0, 0,
     "none|linear|llama3|yarn"},
    {"--use-rope-scaling", A_BOOL, OFF(use_rope_scaling), "0", MODEL, "model",
     "Llama 3.1's rope scaling (Megatron's flag): --rope-scaling-type llama3", 0, 0, NULL},
    {"--rope-scaling-factor", A_FLOAT, OFF(rope_scaling_factor), NULL, MODEL, "model",
     "the rope scaling's factor (default 8 for llama3, as Megatron)", 1e-6, 1e6, NULL},
    {"--rotary-scaling-factor", A_FLOAT, OFF(rotary_scaling_factor), NULL, MODEL, "model",
     "the same as --rope-scaling-factor (Megatron's name, used with yarn)", 1e-6, 1e6, NULL},
    {"--rope-low-freq-factor", A_FLOAT, OFF(rope_low_freq_factor), NULL, MODEL, "model",
     "llama3 rope scaling: low_freq_factor (default 1)", 1e-6, 1e6, NULL},
    {"--rope-high-freq-factor", A_FLOAT, OFF(rope_high_freq_factor), NULL, MODEL, "model",
     "llama3 rope scaling: high_freq_factor (default 4)", 1e-6, 1e6, NULL},
    {"--original-max-position-embeddings", A_INT, OFF(original_max_position_embeddings), NULL, MODEL, "model",
     "rope scaling: the context the model was pretrained at (default 8192 for llama3, "
     "--max-position-embeddings for yarn)", 1, 1 << 24, NULL},
    {"--yarn-beta-fast", A_FLOAT, OFF(yarn_beta_fast), NULL, MODEL, "model", "yarn: beta_fast (default 32)", 1e-6,
     1e6, NULL},
    {"--yarn-beta-slow", A_FLOAT, OFF(yarn_beta_slow), NULL, MODEL, "model", "yarn: beta_slow (default 1)", 1e-6,
     1e6, NULL},
    {"--rope-type", A_CHOICE, OFF(rope_type), NULL, MODEL, "model",
     "Megatron's name: yarn is --rope-scaling-type yarn, rope none", 0, 0, "rope|yarn"},
    {"--mscale", A_FLOAT, OFF(mscale), NULL, MODEL, "model",
     "yarn (Megatron's): the attention factor is (0.1 mscale ln F + 1) / (0.1 mscale_all_dim ln F + 1)", 0, 1e6, NULL},
    {"--mscale-all-dim", A_FLOAT, OFF(mscale_all_dim), NULL, MODEL, "model",
     "yarn (Megatron's): see --mscale (default 0: a denominator of 1)", 0, 1e6, NULL},
    {"--yarn-attention-factor", A_FLOAT, OFF(yarn_attention_factor), NULL, MODEL, "model",
     "yarn: the factor of cos and sin (default 0.1 ln(factor) + 1)", 1e-6, 1e6, NULL},
    {"--swiglu", A_BOOL, OFF(swiglu), "0", MODEL, "model",
     "SwiGLU MLP (gate and up projections): --activation-func silu --gated-linear-unit", 0, 0, NULL},
    {"--squared-relu", A_BOOL, OFF(squared_relu), "0", MODEL, "model",
     "squared ReLU MLP: --activation-func squared_relu", 0, 0, NULL},
    {"--openai-gelu", A_BOOL, OFF(openai_gelu), "0", MODEL, "model",
     "GeLU's tanh approximation (GPT-2's; trident's default): --activation-func gelu", 0, 0, NULL},
    {"--activation-func", A_CHOICE, OFF(activation_func), NULL, MODEL, "model",
     "the MLP's activation (Megatron-Core's activation_func): gelu (tanh approximation, GPT-2), gelu_erf (exact, "
     "BERT), silu, relu, squared_relu (default gelu, or what --swiglu/--squared-relu say)", 0, 0, TD_ACT_CHOICES},
    {"--gated-linear-unit", A_BOOL, OFF(gated_linear_unit), "0", MODEL, "model",
     "gated MLP (Megatron-Core's gated_linear_unit): fc holds [gate | up], the MLP computes act(gate) * up "
     "(silu: SwiGLU, gelu: GeGLU)", 0, 0, NULL},
    {"--num-experts", A_INT, OFF(num_experts), "0", MODEL, "moe",
     "mixture of experts: each layer's MLP is this many experts and a router (0: a dense MLP; docs/moe.md)", 0,
     1024, NULL},
    {"--moe-ffn-hidden-size", A_INT, OFF(moe_ffn_hidden_size), NULL, MODEL, "moe",
     "each expert's MLP hidden size (default --ffn-hidden-size)", 1, 1 << 24, NULL},
    {"--moe-router-topk", A_INT, OFF(moe_router_topk), "2", MODEL, "moe", "experts each token goes to", 1, 1024, NULL},
    {"--moe-router-score-function", A_CHOICE, OFF(moe_router_score_function), "softmax", MODEL, "moe",
     "the router's scores: softmax (Mixtral, Qwen-MoE) or sigmoid (DeepSeek-V3: the chosen ones normalised)", 0, 0,
     "softmax|sigmoid"},
    {"--moe-router-pre-softmax", A_BOOL, OFF(moe_router_pre_softmax), "0", MODEL, "moe",
     "softmax over all experts before the top-k (default: over the k chosen logits after it)", 0, 0, NULL},
    {"--moe-router-topk-scaling-factor", A_FLOAT, OFF(moe_router_topk_scaling_factor), "0", MODEL, "moe",
     "the chosen experts' weights times this (0: none)", 0, 1e6, NULL},
    {"--moe-router-load-balancing-type", A_CHOICE, OFF(moe_router_load_balancing_type), "aux_loss", MODEL, "moe",
     "aux_loss: Switch Transformer's load-balancing loss over each micro-batch, weighted by --moe-aux-loss-coeff; "
     "seq_aux_loss: the same over each sequence, averaged (DeepSeek-V2/V3); none", 0, 0, "aux_loss|seq_aux_loss|none"},
    {"--moe-aux-loss-coeff", A_FLOAT, OFF(moe_aux_loss_coeff), "0", MODEL, "moe",
     "the load-balancing loss's weight (Megatron's default 0; 1e-2 is usual)", 0, 1e6, NULL},
    {"--moe-z-loss-coeff", A_FLOAT, OFF(moe_z_loss_coeff), "0", MODEL, "moe",
     "ST-MoE's router z-loss weight (0: none; 1e-3 is usual)", 0, 1e6, NULL},
    {"--moe-shared-expert-intermediate-size", A_INT, OFF(moe_shared_expert_intermediate_size), "0", MODEL, "moe",
     "a shared expert of this hidden size that every token goes through, added to the routed experts' output "
     "(0: none; Qwen-MoE, DeepSeek)", 0, 1 << 24, NULL},
    {"--moe-shared-expert-gate", A_BOOL, OFF(moe_shared_expert_gate), "0", MODEL, "moe",
     "the shared expert's output times sigmoid(w . x), a learned gate (Qwen2-MoE's shared_expert_gate)", 0, 0, NULL},
    {"--moe-router-enable-expert-bias", A_BOOL, OFF(moe_router_enable_expert_bias), "0", MODEL, "moe",
     "DeepSeek-V3's aux-loss-free load balancing: a bias per expert added to the sigmoid scores for the choice "
     "only, moved each iteration by --moe-router-bias-update-rate toward the experts under the mean load", 0, 0, NULL},
    {"--moe-router-bias-update-rate", A_FLOAT, OFF(moe_router_bias_update_rate), "1e-3", MODEL, "moe",
     "how far the expert bias moves an iteration (sign of the mean load minus the expert's)", 0, 1, NULL},
    {"--moe-expert-capacity-factor", A_FLOAT, OFF(moe_expert_capacity_factor), "0", MODEL, "moe",
     "an expert takes at most ceil(tokens x topk / experts x this) of a micro-batch's tokens, the rest of its "
     "choices dropped (0: dropless, the default)", 0, 1e6, NULL},
    {"--moe-token-drop-policy", A_CHOICE, OFF(moe_token_drop_policy), "probs", MODEL, "moe",
     "over capacity, drop the choices of the lowest weight (probs) or of the latest tokens (position)", 0, 0,
     "probs|position"},
    {"--moe-layer-freq", A_STR, OFF(moe_layer_freq), "1", MODEL, "moe",
     "which layers are MoE, the others the dense MLP of --ffn-hidden-size: an integer N (layer i iff i % N == 0) "
     "or a list of 0 and 1, one a layer (\"[1,0,1,1]\", or Megatron's \"([1]*1+[0]*1)*2\")", 0, 0, NULL},
    {"--moe-grouped-gemm", A_BOOL, OFF(moe_grouped_gemm), "0", MODEL, "moe",
     "each MoE layer's experts' GEMMs in one grouped backend call over their variable row counts (on CPUs: "
     "side by side on the threads when the experts' rows are few)", 0, 0, NULL},
    {"--moe-pad-expert-input-to-capacity", A_BOOL, OFF(moe_pad_expert_input_to_capacity), "0", MODEL, "moe",
     "every expert runs on exactly its capacity of rows, padded with zeros (fixed shapes; needs "
     "--moe-expert-capacity-factor)", 0, 0, NULL},
    {"--group-query-attention", A_BOOL, OFF(group_query_attention), "0", MODEL, "model",
     "grouped-query attention: --num-query-groups key/value heads", 0, 0, NULL},
    {"--num-query-groups", A_INT, OFF(num_query_groups), "1", MODEL, "model",
     "key/value heads with --group-query-attention", 1, 1 << 20, NULL},
    {"--kv-channels", A_INT, OFF(kv_channels), NULL, MODEL, "model",
     "head size (default --hidden-size / --num-attention-heads)", 1, 1 << 20, NULL},
    {"--disable-bias-linear", A_BOOL, OFF(disable_bias_linear), "0", MODEL, "model",
     "no biases in the linear layers", 0, 0, NULL},
    {"--add-qkv-bias", A_BOOL, OFF(add_qkv_bias), "0", MODEL, "model",
     "keep the QKV projection's bias under --disable-bias-linear", 0, 0, NULL},
    {"--untie-embeddings-and-output-weights", A_BOOL, OFF(untie_embeddings_and_output_weights), "0", MODEL, "model",
     "the output layer is its own weight, not the word embedding", 0, 0, NULL},
    {"--max-position-embeddings", A_INT, OFF(max_position_embeddings), NULL, MODEL, "model",
     "learned positions (default: --seq-length)", 1, 1 << 24, NULL},
    {"--make-vocab-size-divisible-by", A_INT, OFF(make_vocab_size_divisible_by), "128", MODEL | TD_CMD_CONVERT, "model",
     "pad the vocab to a multiple of this (times the tensor-parallel size)", 1, 1 << 20, NULL},
    {"--init-method-std", A_FLOAT, OFF(init_method_std), "0.02", MODEL, "model",
     "std of the normal init; output projections use std/sqrt(2 layers)", 0, 10, NULL},
    {"--hidden-dropout", A_FLOAT, OFF(hidden_dropout), "0.1", MODEL, "model", "dropout after projections", 0,
     0.999, NULL},
    {"--attention-dropout", A_FLOAT, OFF(attention_dropout), "0.1", MODEL, "model",
     "dropout on attention probabilities", 0, 0.999, NULL},
    {"--lora-rank", A_INT, OFF(lora_rank), "0", MODEL, "lora",
     "LoRA (docs/finetune.md): adapters of this rank on the target modules, the base frozen (no gradients, no "
     "optimizer state); 0: off", 0, 1 << 16, NULL},
    {"--lora-alpha", A_FLOAT, OFF(lora_alpha), "8", MODEL, "lora",
     "LoRA's alpha: the adapters' output scaled by alpha / rank (PEFT's lora_alpha, default 8)", 0, 1e6, NULL},
    {"--lora-dropout", A_FLOAT, OFF(lora_dropout), "0", MODEL, "lora",
     "dropout on the adapters' input (PEFT's lora_dropout)", 0, 0.999, NULL},
    {"--lora-target-modules", A_STR, OFF(lora_target_modules), "q_proj,v_proj", MODEL, "lora",
     "the Hugging Face modules given adapters, comma-separated: q_proj, k_proj, v_proj, o_proj, gate_proj, "
     "up_proj, down_proj (up/down: fc/fc2 of an ungated MLP; BERT's query, key, value are q/k/v_proj), or "
     "all-linear (PEFT's default for Llama: q_proj,v_proj)", 0, 0, TD_LORA_MODULE_CHOICES},
    {"--lora-load", A_STR, OFF(lora_load), NULL, TD_CMD_TRAIN, "lora",
     "DIR: a PEFT LoRA adapter (adapter_config.json + adapter_model.safetensors, Llama module names) loaded as "
     "the trainable adapters, its r, lora_alpha, lora_dropout and modules taken; with --load BASE --finetune", 0, 0,
     NULL},

    {"--tensor-model-parallel-size", A_INT, OFF(tensor_model_parallel_size), "1", MODEL, "parallel",
     "ranks a layer is split over", 1, 1 << 16, NULL},
    {"--context-parallel-size", A_INT, OFF(context_parallel_size), "1", TD_CMD_TRAIN | TD_CMD_PLAN, "parallel",
     "ranks each sample's sequence is split over in every layer (Megatron's context parallelism, load-balanced: "
     "2 x size chunks, rank i holding chunks i and 2 x size - 1 - i; docs/parallelism.md)", 1, 1 << 16, NULL},
    {"--cp-comm-type", A_CHOICE, OFF(cp_comm_type), "p2p", TD_CMD_TRAIN | TD_CMD_PLAN, "parallel",
     "how attention reaches the other context-parallel ranks' keys and values: p2p (Megatron's default: a ring "
     "passing key/value blocks, each step's transfer overlapped with the attention of the block at hand), "
     "all_gather (every rank's keys and values gathered, its queries against each rank's block), a2a "
     "(Ulysses: an all-to-all exchanges sequence for heads around the attention core)",
     0, 0, "a2a|all_gather|p2p"},
    {"--expert-model-parallel-size", A_INT, OFF(expert_model_parallel_size), "1", MODEL, "parallel",
     "ranks the experts of each MoE layer are split over, carved out of data parallelism (Megatron's "
     "expert parallelism; docs/moe.md)", 1, 1 << 16, NULL},
    {"--expert-tensor-parallel-size", A_INT, OFF(expert_tensor_parallel_size), NULL, MODEL, "parallel",
     "ranks each expert is split over (default and only value built: --tensor-model-parallel-size)", 1, 1 << 16,
     NULL},
    {"--moe-token-dispatcher-type", A_CHOICE, OFF(moe_token_dispatcher_type), "allgather", MODEL, "moe",
     "how tokens reach experts on other ranks under expert parallelism: allgather (every rank of the group "
     "gets every token and runs its experts on theirs; the outputs summed back: Megatron's default) or "
     "alltoall (each rank sends each token's rows to the ranks of its experts only)", 0, 0,
     "allgather|alltoall"},
    {"--pipeline-model-parallel-size", A_INT, OFF(pipeline_model_parallel_size), "1", MODEL, "parallel",
     "pipeline stages", 1, 1 << 16, NULL},
    {"--num-layers-per-virtual-pipeline-stage", A_INT, OFF(num_layers_per_virtual_pipeline_stage), NULL,
     TD_CMD_TRAIN | TD_CMD_PLAN, "parallel", "layers per virtual stage (interleaved 1F1B)", 1, 1 << 16, NULL},
    {"--decoder-first-pipeline-num-layers", A_INT, OFF(decoder_first_pipeline_num_layers), NULL, TD_CMD_TRAIN,
     "parallel", "layers of the first pipeline stage (the others share the rest evenly; 0: the embedding only)", 0,
     1 << 16, NULL},
    {"--decoder-last-pipeline-num-layers", A_INT, OFF(decoder_last_pipeline_num_layers), NULL, TD_CMD_TRAIN,
     "parallel", "layers of the last pipeline stage, which also holds the output layer and the loss (0: those "
     "only)", 0, 1 << 16, NULL},
    {"--sequence-parallel", A_BOOL, OFF(sequence_parallel), "0", TD_CMD_TRAIN | TD_CMD_PLAN, "parallel",
     "split norms, dropout and residuals along the sequence over the tensor-parallel ranks (needs "
     "--tensor-model-parallel-size > 1; --seq-length divisible by it)", 0, 0, NULL},
    {"--no-scatter-gather-tensors-in-pipeline", A_BOOL, OFF(no_scatter_gather_tensors_in_pipeline), "0", TD_CMD_TRAIN | TD_CMD_PLAN,
     "parallel", "send the whole activation between pipeline stages from every tensor-parallel rank (default "
     "with tp > 1 and no --sequence-parallel: each sends 1/tp of it and the receivers all-gather it over "
     "their tensor-parallel group)", 0, 0, NULL},
    {"--account-for-embedding-in-pipeline-split", A_BOOL, OFF(account_for_embedding_in_pipeline_split), "0",
     TD_CMD_TRAIN, "parallel", "count the embedding as one layer when splitting layers over pipeline stages (the "
     "first stage holds one decoder layer fewer)", 0, 0, NULL},
    {"--account-for-loss-in-pipeline-split", A_BOOL, OFF(account_for_loss_in_pipeline_split), "0", TD_CMD_TRAIN,
     "parallel", "count the output layer and loss as one layer when splitting layers over pipeline stages (the last "
     "stage holds one decoder layer fewer)", 0, 0, NULL},
    {"--pipeline-schedule", A_CHOICE, OFF(pipeline_schedule), "auto", TD_CMD_TRAIN | TD_CMD_PLAN, "parallel",
     "auto: 1F1B, interleaved with virtual stages, none for one stage", 0, 0, "auto|gpipe|1f1b|interleaved"},
    {"--ddp-bucket-size", A_I64, OFF(ddp_bucket_size), "40000000", TD_CMD_TRAIN | TD_CMD_PLAN, "parallel",
     "gradient elements per data-parallel all-reduce bucket", 1, BIG, NULL},
    {"--overlap-grad-reduce", A_BOOL, OFF(overlap_grad_reduce), "0", TD_CMD_TRAIN | TD_CMD_PLAN, "parallel",
     "start each bucket's all-reduce (reduce-scatter with --use-distributed-optimizer) during the last "
     "micro-batch's backward", 0, 0, NULL},
    {"--use-distributed-optimizer", A_BOOL, OFF(use_distributed_optimizer), "0", TD_CMD_TRAIN | TD_CMD_PLAN, "parallel",
     "shard the Adam state over the data-parallel ranks (ZeRO-1): reduce-scatter the gradients, step "
     "1/dp of each bucket, all-gather the parameters", 0, 0, NULL},
    {"--overlap-param-gather", A_BOOL, OFF(overlap_param_gather), "0", TD_CMD_TRAIN | TD_CMD_PLAN, "parallel",
     "with --use-distributed-optimizer: wait for each bucket's parameter all-gather only when the next "
     "forward first reads it", 0, 0, NULL},
    {"--dp-collectives", A_CHOICE, OFF(dp_collectives), "auto", TD_CMD_TRAIN | TD_CMD_PLAN, "parallel",
     "the data-parallel buckets' collectives when the dp group spans hosts with several of its ranks on each: "
     "hierarchical (sum inside each host, cross the network per rail of local ranks, spread inside again), flat, or "
     "auto (time one bucket both ways at start, keep the faster; one line gives both times). Elsewhere flat", 0, 0,
     "auto|flat|hierarchical"},
    {"--distributed-timeout-minutes", A_FLOAT, OFF(distributed_timeout_minutes), "10",
     TD_CMD_TRAIN | TD_CMD_EVAL | TD_CMD_GENERATE | TD_CMD_SERVE, "parallel",
     "a rank waiting longer than this in one communication aborts the job, naming the call, group and "
     "peer (fractions allowed; 0: wait forever); a peer of its node found dead ends the job at once", 0, 1e6, NULL},
    {"--recompute-granularity", A_CHOICE, OFF(recompute_granularity), NULL, TD_CMD_TRAIN | TD_CMD_PLAN, "recomputation",
     "re-run parts of the forward in the backward instead of keeping their activations: full (whole layers, "
     "with --recompute-method) or selective (the attention core)", 0, 0, "full|selective"},
    {"--recompute-method", A_CHOICE, OFF(recompute_method), NULL, TD_CMD_TRAIN | TD_CMD_PLAN, "recomputation",
     "full recomputation: uniform (each stage's layers in groups of --recompute-num-layers, only each group's "
     "input kept) or block (the first --recompute-num-layers layers of each stage)", 0, 0, "uniform|block"},
    {"--recompute-num-layers", A_INT, OFF(recompute_num_layers), NULL, TD_CMD_TRAIN | TD_CMD_PLAN, "recomputation",
     "full recomputation: layers per group (uniform) or layers recomputed per stage (block)", 1, 1 << 16, NULL},

    {"--lr", A_FLOAT, OFF(lr), "1e-4", TD_CMD_TRAIN, "optimizer", "peak learning rate", 0, 1e3, NULL},
    {"--min-lr", A_FLOAT, OFF(min_lr), "0", TD_CMD_TRAIN, "optimizer", "learning rate at the end of decay", 0,
     1e3, NULL},
    {"--lr-warmup-iters", A_I64, OFF(lr_warmup_iters), "0", TD_CMD_TRAIN, "optimizer",
     "iterations of linear warm-up", 0, BIG, NULL},
    {"--lr-warmup-fraction", A_FLOAT, OFF(lr_warmup_fraction), NULL, TD_CMD_TRAIN, "optimizer",
     "warm-up as a fraction of the decay iterations", 0, 1, NULL},
    {"--lr-decay-style", A_CHOICE, OFF(lr_decay_style), "linear", TD_CMD_TRAIN, "optimizer",
     "learning-rate decay", 0, 0, "constant|linear|cosine"},
    {"--lr-decay-iters", A_I64, OFF(lr_decay_iters), NULL, TD_CMD_TRAIN, "optimizer",
     "iterations to decay over (default: --train-iters)", 1, BIG, NULL},
    {"--weight-decay", A_FLOAT, OFF(weight_decay), "0.01", TD_CMD_TRAIN, "optimizer",
     "AdamW decoupled weight decay (not on biases and norms)", 0, 10, NULL},
    {"--adam-beta1", A_FLOAT, OFF(adam_beta1), "0.9", TD_CMD_TRAIN, "optimizer", "Adam beta1", 0, 0.999999, NULL},
    {"--adam-beta2", A_FLOAT, OFF(adam_beta2), "0.999", TD_CMD_TRAIN, "optimizer", "Adam beta2", 0, 0.999999,
     NULL},
    {"--adam-eps", A_FLOAT, OFF(adam_eps), "1e-8", TD_CMD_TRAIN, "optimizer", "Adam epsilon", 0, 1, NULL},
    {"--clip-grad", A_FLOAT, OFF(clip_grad), "1.0", TD_CMD_TRAIN, "optimizer",
     "clip the global gradient norm to this (0: off)", 0, 1e9, NULL},

    {"--bf16", A_BOOL, OFF(bf16), "0", TD_CMD_TRAIN | TD_CMD_PLAN, "mixed precision",
     "GEMMs in bf16 (bf16 copies of the weights, GEMM inputs rounded to bf16 and kept so, fp32 accumulation); fp32 master "
     "weights, Adam state, grads, norms, softmax and cross-entropy", 0, 0, NULL},
    {"--fp16", A_BOOL, OFF(fp16), "0", TD_CMD_TRAIN | TD_CMD_PLAN, "mixed precision",
     "GEMMs in fp16 as --bf16 does, with loss scaling (dynamic unless --loss-scale)", 0, 0, NULL},
    {"--loss-scale", A_FLOAT, OFF(loss_scale), NULL, TD_CMD_TRAIN, "mixed precision",
     "a constant loss scale (default: dynamic with --fp16, none with --bf16)", 0, 1e300, NULL},
    {"--initial-loss-scale", A_FLOAT, OFF(initial_loss_scale), "4294967296", TD_CMD_TRAIN, "mixed precision",
     "the dynamic loss scale's start (2^32)", 1e-30, 1e300, NULL},
    {"--min-loss-scale", A_FLOAT, OFF(min_loss_scale), "1.0", TD_CMD_TRAIN, "mixed precision",
     "the dynamic loss scale never halves below this", 1e-30, 1e300, NULL},
    {"--loss-scale-window", A_I64, OFF(loss_scale_window), "1000", TD_CMD_TRAIN, "mixed precision",
     "steps without overflow before the dynamic loss scale doubles", 1, BIG, NULL},
    {"--hysteresis", A_INT, OFF(hysteresis), "2", TD_CMD_TRAIN, "mixed precision",
     "overflows (skipped steps) before the dynamic loss scale halves", 1, 1000000, NULL},

    {"--train-iters", A_I64, OFF(train_iters), NULL, TD_CMD_TRAIN | TD_CMD_DATA_INFO, "training", "iterations to train", 1, BIG,
     NULL},
    {"--train-samples", A_I64, OFF(train_samples), NULL, TD_CMD_TRAIN | TD_CMD_DATA_INFO, "training",
     "samples to train (instead of --train-iters)", 1, BIG, NULL},
    {"--eval-interval", A_I64, OFF(eval_interval), "1000", TD_CMD_TRAIN | TD_CMD_DATA_INFO, "training",
     "iterations between validation runs", 1, BIG, NULL},
    {"--eval-iters", A_I64, OFF(eval_iters), "100", TD_CMD_TRAIN | TD_CMD_EVAL | TD_CMD_DATA_INFO, "training",
     "iterations per validation run (0: none)", 0, BIG, NULL},
    {"--log-interval", A_I64, OFF(log_interval), "100", TD_CMD_TRAIN | TD_CMD_PREPROCESS, "training",
     "iterations (or documents x1000 in preprocess) between log lines", 1, BIG, NULL},
    {"--metrics-file", A_STR, OFF(metrics_file), NULL, TD_CMD_TRAIN | TD_CMD_EVAL, "training",
     "append one JSON object per iteration here", 0, 0, NULL},
    {"--dump-params", A_STR, OFF(dump_params), NULL, TD_CMD_TRAIN, "training",
     "at the end, write the whole model's parameters gathered (raw float32, canonical order)", 0, 0, NULL},
    {"--tensorboard-dir", A_STR, OFF(tensorboard_dir), NULL, TD_CMD_TRAIN, "training",
     "write TensorBoard event files here (loss, lr, grad norm, loss scale, tokens/s, MFU, validation, peak memory)",
     0, 0, NULL},
    {"--tensorboard-log-interval", A_I64, OFF(tensorboard_log_interval), "1", TD_CMD_TRAIN, "training",
     "iterations between TensorBoard events (validation is always written)", 1, BIG, NULL},
    {"--peak-tflops", A_FLOAT, OFF(peak_tflops), NULL, TD_CMD_TRAIN | TD_CMD_PLAN, "training",
     "peak TFLOP/s per rank for MFU (default: measured GEMM peak)", 0, 1e9, NULL},

    {"--save", A_STR, OFF(save), NULL, TD_CMD_TRAIN, "checkpointing",
     "save checkpoints in this folder (DIR/iter_NNNNNNN/), every --save-interval, at the end and on exit; "
     "one run at a time (a second run is refused while one holds DIR/.trident-save.lock)", 0, 0,
     NULL},
    {"--save-interval", A_I64, OFF(save_interval), NULL, TD_CMD_TRAIN, "checkpointing",
     "iterations between checkpoints (default: only at the end and on exit)", 1, BIG, NULL},
    {"--load", A_STR, OFF(load), NULL, TD_CMD_TRAIN | TD_CMD_EVAL | TD_CMD_GENERATE | TD_CMD_SERVE, "checkpointing",
     "start from the latest checkpoint in this folder (or an iter_NNNNNNN folder); any layout", 0, 0, NULL},
    {"--no-load-optim", A_BOOL, OFF(no_load_optim), "0", TD_CMD_TRAIN, "checkpointing",
     "with --load: do not load the optimizer state (Adam moments start at zero)", 0, 0, NULL},
    {"--use-checkpoint-args", A_BOOL, OFF(use_checkpoint_args), "0", TD_CMD_TRAIN | TD_CMD_EVAL, "checkpointing",
     "with --load: take the model architecture (and --seq-length) from the checkpoint's meta.json; without it "
     "a model flag that differs from the checkpoint is an error", 0, 0, NULL},
    {"--no-load-rng", A_BOOL, OFF(no_load_rng), "0", TD_CMD_TRAIN, "checkpointing",
     "with --load: use --seed instead of the checkpoint's seed (the whole random state)", 0, 0, NULL},
    {"--finetune", A_BOOL, OFF(finetune), "0", TD_CMD_TRAIN, "checkpointing",
     "with --load: load the weights only and start at iteration 0 with a fresh optimizer", 0, 0, NULL},
    {"--keep-last", A_INT, OFF(keep_last), "0", TD_CMD_TRAIN, "checkpointing",
     "after each save keep only the newest N checkpoints (0: keep all)", 0, 1 << 30, NULL},
    {"--exit-interval", A_I64, OFF(exit_interval), NULL, TD_CMD_TRAIN, "checkpointing",
     "save (with --save) and exit 0 when the iteration is a multiple of this", 1, BIG, NULL},
    {"--exit-duration-in-mins", A_FLOAT, OFF(exit_duration_in_mins), NULL, TD_CMD_TRAIN, "checkpointing",
     "save (with --save) and exit 0 after the iteration that ends past this many minutes", 0, 1e9, NULL},
    {"--exit-signal-handler", A_BOOL, OFF(exit_signal_handler), "0", TD_CMD_TRAIN, "checkpointing",
     "on SIGTERM or SIGINT finish the iteration, save (with --save) and exit 0", 0, 0, NULL},

    {"--prompt", A_LIST, OFF(prompt), NULL, TD_CMD_GENERATE, "generation",
     "one or more prompts (generated together, as one batch)", 0, 0, NULL},
    {"--prompt-file", A_STR, OFF(prompt_file), NULL, TD_CMD_GENERATE, "generation",
     "prompts, one a line (- for stdin); the default when no --prompt is given is stdin", 0, 0, NULL},
    {"--max-new-tokens", A_INT, OFF(max_new_tokens), "64", TD_CMD_GENERATE, "generation",
     "tokens to generate after each prompt (fewer when the end-of-document token comes; the default is shortened "
     "to what the model's positions hold, with a note)", 1, 1 << 20, NULL},
    {"--greedy", A_BOOL, OFF(greedy), "0", TD_CMD_GENERATE, "generation",
     "always the most likely token (also --temperature 0 or --top-k 1)", 0, 0, NULL},
    {"--temperature", A_FLOAT, OFF(temperature), "1.0", TD_CMD_GENERATE, "generation",
     "sampling temperature", 0, 100, NULL},
    {"--top-k", A_INT, OFF(top_k), "0", TD_CMD_GENERATE, "generation",
     "sample from the k most likely tokens (0: all)", 0, 1 << 30, NULL},
    {"--top-p", A_FLOAT, OFF(top_p), "0.0", TD_CMD_GENERATE, "generation",
     "sample from the smallest set of tokens whose probabilities add up to p (0: all)", 0, 1, NULL},
    {"--ignore-eod", A_BOOL, OFF(ignore_eod), "0", TD_CMD_GENERATE, "generation",
     "do not stop at the end-of-document token: always --max-new-tokens", 0, 0, NULL},
    {"--no-kv-cache", A_BOOL, OFF(no_kv_cache), "0", TD_CMD_GENERATE, "generation",
     "run the whole prefix again at every step instead of keeping keys and values (slow; the reference)", 0, 0,
     NULL},

    {"--host", A_STR, OFF(host), "127.0.0.1", TD_CMD_SERVE, "server", "the IPv4 address to listen on", 0, 0, NULL},
    {"--chat-template", A_STR, OFF(chat_template), NULL, TD_CMD_SERVE | TD_CMD_PREPROCESS, "server",
     "the tokenizer_config.json (or a folder holding one) whose chat_template and special tokens render "
     "conversations: serve's POST /v1/chat/completions (default: the one `convert --from hf` kept in the "
     "--load folder; without one the chat endpoint answers 400 saying so), preprocess --sft's chat and sharegpt "
     "formats", 0, 0, NULL},
    {"--port", A_INT, OFF(port), "5000", TD_CMD_SERVE, "server", "the TCP port", 1, 65535, NULL},
    {"--max-batch", A_INT, OFF(max_batch), "8", TD_CMD_SERVE, "server",
     "prompts generated together (greedy requests are batched; a sampled one runs alone)", 1, 1024, NULL},
    {"--max-queue", A_INT, OFF(max_queue), "64", TD_CMD_SERVE, "server",
     "requests waiting; more get 503", 1, 1 << 20, NULL},
    {"--max-body-bytes", A_I64, OFF(max_body_bytes), "1048576", TD_CMD_SERVE, "server",
     "bytes of a request body; more get 413", 64, 1e9, NULL},
    {"--max-connections", A_INT, OFF(max_connections), NULL, TD_CMD_SERVE, "server",
     "open connections in all; when full, the oldest one without a whole request is dropped (503) for a new one "
     "(default: what the descriptor limit allows, at most 10000; its soft limit is raised to the hard one)", 1,
     1 << 20, NULL},
    {"--max-connections-per-ip", A_INT, OFF(max_connections_per_ip), "32", TD_CMD_SERVE, "server",
     "open connections from one client address; more are refused at once (503)", 1, 1 << 20, NULL},
    {"--idle-timeout", A_INT, OFF(idle_timeout), "30", TD_CMD_SERVE, "server",
     "seconds a connection may send nothing before it is closed", 1, 86400, NULL},
    {"--request-timeout", A_INT, OFF(request_timeout), "60", TD_CMD_SERVE, "server",
     "seconds a client has to send a whole request (headers and body); slower ones are closed", 1, 86400, NULL},
    {"--shutdown-grace", A_INT, OFF(shutdown_grace), "10", TD_CMD_SERVE, "server",
     "seconds SIGTERM waits for connections that have not sent a whole request (queued requests are answered)",
     0, 3600, NULL},
    {"--max-prompt-tokens", A_INT, OFF(max_prompt_tokens), NULL, TD_CMD_SERVE, "server",
     "tokens of a prompt; more get 400 (default: the model's positions - 1)", 1, 1 << 24, NULL},
    {"--max-tokens-to-generate", A_INT, OFF(max_tokens_to_generate), "256", TD_CMD_SERVE, "server",
     "tokens a request may ask for; more get 400", 1, 1 << 24, NULL},
    {"--task", A_CHOICE, OFF(task), NULL, TD_CMD_EVAL, "evaluation",
     "a zero-shot task on --valid-data instead of a dataset: WikiText-103 perplexity, LAMBADA accuracy, "
     "HellaSwag, or LOGLIKELIHOOD (each item's log-likelihood of a continuation after a context, as "
     "lm-evaluation-harness scores one; docs/eval.md)", 0, 0, "WIKITEXT103|LAMBADA|HELLASWAG|LOGLIKELIHOOD"},
    {"--valid-data", A_STR, OFF(valid_data), NULL, TD_CMD_EVAL, "evaluation",
     "--task's file: wiki.test.tokens, lambada_test.jsonl, hellaswag_val.jsonl, or for LOGLIKELIHOOD "
     "{\"context\", \"continuation\"} a line (texts or lists of token ids)", 0, 0, NULL},
    {"--strict-lambada", A_BOOL, OFF(strict_lambada), "0", TD_CMD_EVAL, "evaluation",
     "LAMBADA: the whole last word must be predicted (default: its last token)", 0, 0, NULL},
    {"--overlapping-eval", A_INT, OFF(overlapping_eval), "32", TD_CMD_EVAL, "evaluation",
     "WIKITEXT103: tokens between window starts (each later window scores its last ones)", 1, 1 << 24, NULL},
    {"--split-name", A_CHOICE, OFF(split_name), "valid", TD_CMD_EVAL, "evaluation",
     "documents to score: a split of --split, or all of them", 0, 0, "train|valid|test|all"},
    {"--eval-stride", A_INT, OFF(eval_stride), NULL, TD_CMD_EVAL, "evaluation",
     "tokens between window starts; each later window scores only its last K targets (default: "
     "--seq-length)", 1, 1 << 24, NULL},

    {"--from", A_LIST, OFF(from), NULL, TD_CMD_CONVERT, "convert",
     "FORMAT DIR: the input (trident DIR, a checkpoint; hf DIR, config.json + model.safetensors)", 0, 0, NULL},
    {"--to", A_LIST, OFF(to), NULL, TD_CMD_CONVERT, "convert",
     "FORMAT DIR: the output (hf or trident; peft: the LoRA adapters of a trident checkpoint in PEFT's format)", 0,
     0, NULL},
    {"--dtype", A_CHOICE, OFF(dtype), "F32", TD_CMD_CONVERT, "convert",
     "--to hf: the tensors' type (F16 and BF16 round the fp32 weights to nearest even)", 0, 0, "F32|F16|BF16"},
    {"--merge-lora", A_STR, OFF(merge_lora), NULL, TD_CMD_CONVERT, "convert",
     "ADAPTER: a PEFT LoRA adapter folder (adapter_config.json + adapter_model.safetensors) merged into "
     "the weights of --from hf DIR --to hf OUT (W + scaling B A)", 0, 0, NULL},

    /* fakes and faults for tests and drills (trident/debug.h); off by default */
    {"--fake-hosts", A_INT, OFF(fake_hosts), "0", TD_CMD_TRAIN | TD_CMD_PLAN, "debug",
     "the ranks believe they sit on N hosts, consecutive ranks together: hierarchical collectives and "
     "--calibrate on one machine (0: the real host names)", 0, 1 << 20, NULL},
    {"--debug-save-delay-ms", A_INT, OFF(debug_save_delay_ms), "0", TD_CMD_TRAIN | TD_CMD_CONVERT, "debug",
     "a checkpoint save pauses this long after each shard and before its renames (a save to interrupt)", 0,
     3600000, NULL},
    {"--debug-overflow-iteration", A_I64, OFF(debug_overflow_iteration), "0", TD_CMD_TRAIN, "debug",
     "at this iteration the last rank finds an Inf in one gradient: a loss-scale overflow (0: never)", 0, 1e18,
     NULL},
    {"--debug-watch-only-rank", A_INT, OFF(debug_watch_only_rank), "-1", TD_CMD_TRAIN, "debug",
     "only this world rank watches the peers of its node, as if the others were each alone on a node "
     "(-1: every rank)", -1, 1 << 24, NULL},
    {"--debug-comm-staged", A_BOOL, OFF(debug_comm_staged), "0", TD_CMD_TRAIN | TD_CMD_GENERATE | TD_CMD_EVAL, "debug",
     "every buffer crossing comm is staged through host memory, and kernels' events pass late, as on a device "
     "backend without a CUDA-aware MPI (the same results, with copies)", 0, 0, NULL},
};
const int td_nflags = (int)(sizeof td_flags / sizeof td_flags[0]);
_Static_assert(sizeof td_flags / sizeof td_flags[0] <= TD_MAX_FLAGS, "raise TD_MAX_FLAGS");
