/* The Hugging Face families trident converts (src/ckpt/hf_impl.h), in the order export tries
 * them. A family is its own file, hf_<name>.c, defining one hf_family row; adding a family is
 * that file and its line here (docs/convert.md). */
#include "hf_impl.h"

extern const hf_family HF_GPT2, HF_LLAMA, HF_MIXTRAL, HF_QWEN2MOE, HF_BERT;

const hf_family *const hf_families[] = {&HF_GPT2, &HF_LLAMA, &HF_MIXTRAL, &HF_QWEN2MOE, &HF_BERT, NULL};
