/* Hugging Face interchange. Owns the mapping between trident's logical tensors and transformers'
 * files (config.json + model.safetensors) of the families src/ckpt/hf_families.c lists (GPT-2,
 * Llama, Mixtral, Qwen2-MoE, Megatron-BERT): tensor names, row ranges (q|k|v, gate|up, each
 * expert of a stack), transposes (GPT-2's Conv1D), the vocabulary unpadded. See docs/convert.md. */
#ifndef TRIDENT_HF_H
#define TRIDENT_HF_H

#include <stddef.h>

#include "trident/checkpoint.h"
#include "trident/comm.h"
#include "trident/safetensors.h"

/* Writes OUT/config.json and OUT/model.safetensors (each through a temporary name, fsynced,
 * renamed) from the parameters of checkpoint `meta`, whatever layout wrote it. The padded rows
 * of the word embedding are dropped. The tensors are written as `dtype` (ST_F32, or ST_F16 or
 * ST_BF16 rounded to nearest even from the fp32 master weights; config.json's torch_dtype says
 * which). An OUT that already holds a model (config.json, model.safetensors, ...) is refused,
 * nothing written. Returns 0, or -1 with one line in err. */
int hf_export(const ckpt_meta *meta, const char *out, st_dtype dtype, char *err, size_t errlen);

/* Reads a transformers folder of a family's model_type (config.json, and model.safetensors or the
 * shards model.safetensors.index.json names; F32, F16 or BF16; GPT-2's names with or without the
 * "transformer." prefix; a tied lm_head.weight, if present, must equal the embedding) and
 * saves it as a trident checkpoint in OUT (iteration 0, one rank, weights only: load it with
 * --finetune). The vocabulary is padded to a multiple of divisible_by with copies of the last
 * row (Megatron's rule). The model is built on backend `backend_name` (be_create); `world` is a
 * one-rank communicator. Returns 0, or -1 with err. */
int hf_import(const char *in, const char *out, int divisible_by, const char *backend_name, comm *world, char *err,
              size_t errlen);

/* The model_type values the families read, in the order they are tried: "gpt2, llama, mistral
 * and ..." (truncated to len). */
void hf_model_types(char *out, size_t len);
/* The Hugging Face class a model of c's family converts to (the architecture of the first family
 * row that holds it: "GPT2LMHeadModel", ...), or NULL when none does. For messages. */
const char *hf_class_of(const gpt_config *c);

#endif
