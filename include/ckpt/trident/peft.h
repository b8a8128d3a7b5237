/* LoRA adapters in PEFT's format (Hugging Face peft: save_pretrained of a LoraConfig model).
 * Owns adapter_config.json's fields and adapter_model.safetensors' names: for a linear module M of
 * the base model (its weight M.weight, (out, in); GPT-2's Conv1D (in, out), fan_in_fan_out),
 * base_model.model.M.lora_A.weight (r, in) and base_model.model.M.lora_B.weight (out, r), no
 * adapter name in the keys; the module computes W x + scaling B A x with scaling = lora_alpha / r,
 * or lora_alpha / sqrt(r) under use_rslora. Merges an adapter into a Hugging Face model
 * (W + scaling B A). See docs/finetune.md. */
#ifndef TRIDENT_PEFT_H
#define TRIDENT_PEFT_H

#include <stddef.h>

#include "trident/comm.h"

typedef struct peft_lora_config {
    int r;                 /* rank */
    double lora_alpha;     /* PEFT's default 8 */
    double lora_dropout;   /* training only (the merge ignores it) */
    int use_rslora;        /* scaling lora_alpha / sqrt(r) */
    int fan_in_fan_out;    /* the base weights are stored (in, out) (GPT-2's Conv1D) */
    char *base_model;      /* base_model_name_or_path, or NULL */
} peft_lora_config;

/* Reads DIR/adapter_config.json: a LoRA adapter (peft_type "LORA") that is a plain delta B A on
 * linear modules (bias "none", no DoRA, no rank_pattern or alpha_pattern, no modules_to_save).
 * Returns 0, or -1 with one line in err naming the file and the field. Free with
 * peft_config_free. */
int peft_read_config(const char *dir, peft_lora_config *c, char *err, size_t errlen);
void peft_config_free(peft_lora_config *c);
/* lora_alpha / r, or lora_alpha / sqrt(r) under use_rslora. */
double peft_scaling(const peft_lora_config *c);

/* Writes OUT/config.json (IN's, byte for byte) and OUT/model.safetensors: IN/model.safetensors
 * with every weight the adapter ADAPTER (adapter_config.json + adapter_model.safetensors) names
 * replaced by W + scaling B A (computed in double from the stored values, rounded once to W's
 * dtype), every other tensor and the metadata unchanged. Every adapter tensor must be a lora_A or
 * lora_B of a module whose weight IN holds, with shapes agreeing; an OUT already holding a model
 * is refused. Returns 0 and the number of merged modules in *merged, or -1 with one line in err. */
int peft_merge_hf(const char *adapter, const char *in, const char *out, int *merged, char *err, size_t errlen);
/* hf_import (trident/hf.h) of IN with the adapter merged as peft_merge_hf merges it: the merged
 * model is written to a temporary folder beside OUT (OUT.merge-lora.PID, removed afterwards) and
 * imported into the trident checkpoint OUT (iteration 0, weights only). Returns 0 and *merged, or
 * -1 with one line in err. */
int peft_import_hf(const char *adapter, const char *in, const char *out, int divisible_by, const char *backend_name,
                   comm *world, int *merged, char *err, size_t errlen);

/* ---- a PEFT adapter as trident's trainable adapters (train --lora-load) ---- */
struct ckpt_slice;
typedef struct peft_adapter {
    peft_lora_config cfg;
    int num_layers;
    unsigned targets;      /* bit m: module GPT_LORA_* m has adapters, in every layer */
    void *file;            /* the open adapter_model.safetensors (st_file) */
    const void **tensors;  /* [layer][module][A, B]: its st_tensor, or NULL */
    int num_experts;       /* the model's (0: dense) */
    const void **experts;  /* [layer][gate, up, down][expert][A, B]: an expert's st_tensor, or NULL */
} peft_adapter;
/* Opens the PEFT adapter folder DIR (adapter_config.json read as peft_read_config reads it,
 * adapter_model.safetensors) for a model of num_layers layers. Its tensors must all be LoRA
 * weights of Llama-family modules, base_model.model.model.layers.N.self_attn.{q,k,v,o}_proj or
 * .mlp.{gate,up,down}_proj (bert: MegatronBert's, base_model.model.bert.encoder.layer.N.
 * attention.self.{query,key,value}, .attention.output.dense, .intermediate.dense, .output.dense),
 * each .lora_A.weight or .lora_B.weight, with or without the adapter name before .weight
 * (.lora_A.default.weight, as a model's state_dict names it), and the same modules in every
 * layer, each with both A and B. A MoE model's (num_experts > 0) experts' too: Mixtral's
 * model.layers.N.block_sparse_moe.experts.E.{w1,w3,w2} or Qwen2-MoE's mlp.experts.E.{gate,up,
 * down}_proj, every expert of every layer, and Qwen2-MoE's shared expert's mlp.shared_expert.{gate,
 * up,down}_proj (held in its layer's MLP module slots). Returns 0, or -1 with one line in err. */
int peft_adapter_open(const char *dir, int num_layers, int num_experts, int bert, peft_adapter *ad, char *err,
                      size_t errlen);
/* The slice `want` of trident adapter tensor `name` (layers.N.attn.q_proj.lora_A.weight ...) as
 * floats into dst: the adapter's tensor (F32, F16 or BF16) whose shape must be want's (an expert
 * stack's, layers.N.mlp.experts.gate_proj.lora_A.weight ...: every expert's tensor, stacked).
 * Returns 0, or -1 with one line in err. */
int peft_adapter_read(const peft_adapter *ad, const char *name, const struct ckpt_slice *want, float *dst, char *err,
                      size_t errlen);
/* lora_alpha for trident's scaling alpha / r: the adapter's, or alpha sqrt(r) under use_rslora. */
double peft_adapter_alpha(const peft_adapter *ad);
void peft_adapter_close(peft_adapter *ad);

struct ckpt_meta;
/* Writes the LoRA adapters of a trident checkpoint (train --lora-rank) in PEFT's format:
 * OUT/adapter_model.safetensors (F32) and OUT/adapter_config.json (r, lora_alpha, lora_dropout,
 * target_modules, bias "none", fan_in_fan_out, task_type CAUSAL_LM). Llama-family models (RMSNorm,
 * gated MLP): base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight ..., each adapter as
 * it is. GPT-2: base_model.model.transformer.h.N.attn.c_attn.lora_A.weight ..., fan_in_fan_out,
 * c_attn the rank n r stack of the n targeted q, k, v adapters (lora_B block-diagonal), the other
 * modules zero-padded to that rank, lora_alpha scaled with it (docs/finetune.md). Any other
 * model, or an OUT already holding an adapter, is refused. Returns 0 and the number of modules in
 * *modules, or -1 with one line in err. */
int peft_export(const struct ckpt_meta *meta, const char *out, int *modules, char *err, size_t errlen);

#endif
