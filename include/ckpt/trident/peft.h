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

struct ckpt_meta;
/* Writes the LoRA adapters of a trident checkpoint (train --lora-rank) in PEFT's format:
 * OUT/adapter_model.safetensors (F32, base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight
 * ..., the Llama names) and OUT/adapter_config.json (r, lora_alpha, lora_dropout, target_modules,
 * bias "none", task_type CAUSAL_LM). For Llama-family models (RMSNorm, gated MLP); an OUT already
 * holding an adapter is refused. Returns 0 and the number of modules in *modules, or -1 with one
 * line in err. */
int peft_export(const struct ckpt_meta *meta, const char *out, int *modules, char *err, size_t errlen);

#endif
