/* The MLP's activation as Megatron-Core's two config axes: an activation function
 * (TransformerConfig.activation_func) and a gated-linear-unit switch (gated_linear_unit; the fc
 * layer then holds two blocks [gate | up] and the MLP computes act(gate) * up). Chosen once, in
 * the model config; the blocks, the kernels, the converters, the memory and plan models read the
 * pair, never a name. One row of TD_ACTS per function: its flag name, what it is called printed,
 * gated, and in Hugging Face's config.json. Adding an activation: docs/architecture.md "How to add". */
#ifndef TRIDENT_ACTIVATION_H
#define TRIDENT_ACTIVATION_H

#include <stddef.h>

struct td_args;

/* Numbered as TD_ACT_CHOICES (--activation-func, meta.json's activation_func): 0 is GPT-2's. */
typedef enum {
    TD_ACT_GELU,         /* GeLU, tanh approximation (GPT-2; Megatron --openai-gelu) */
    TD_ACT_GELU_ERF,     /* GeLU, exact (erf; BERT, torch.nn.functional.gelu) */
    TD_ACT_SILU,         /* SiLU x sigmoid(x) (gated: SwiGLU, Megatron --swiglu) */
    TD_ACT_RELU,         /* max(x, 0) */
    TD_ACT_SQUARED_RELU, /* max(x, 0)^2 (Megatron --squared-relu) */
    TD_ACT_COUNT
} td_act;

#define TD_ACT_CHOICES "gelu|gelu_erf|silu|relu|squared_relu"
/* Megatron's switches that choose an activation (td_act_of_args): they count as giving
 * --activation-func when a checkpoint's settings are held against the flags. */
#define TD_ACT_SWITCHES "--swiglu|--squared-relu|--openai-gelu"

typedef struct {
    const char *name;      /* --activation-func's choice, meta.json's activation_func */
    const char *label;     /* printed: "GeLU" */
    const char *glu_label; /* printed when gated: "SwiGLU" */
    const char *hf;        /* Hugging Face's hidden_act written on export */
    const char *hf_also;   /* other hidden_act names read as this function ("a|b"), or NULL */
} td_act_info;

extern const td_act_info TD_ACTS[TD_ACT_COUNT];

/* The printed name of (act, glu): "GeLU", "SwiGLU", "GeGLU", "squared ReLU". */
const char *td_act_label(int act, int glu);
/* The function Hugging Face's hidden_act / hidden_activation / activation_function `name` means
 * (gelu_new, gelu_pytorch_tanh, gelu_fast: GeLU tanh; gelu: GeLU erf; silu, swish; relu; relu2):
 * its td_act, or -1 for a name trident does not compute. */
int td_act_from_hf(const char *name);
/* The activation the flags choose: --activation-func and --gated-linear-unit, or Megatron's
 * switches --swiglu (silu, gated), --squared-relu, --openai-gelu (GeLU tanh, trident's default).
 * 0 with *act and *glu set, or -1 with one line naming the flags that disagree in msg. */
int td_act_of_args(const struct td_args *a, int *act, int *glu, char *msg, size_t msglen);

#endif
