/* The tests' view of a GPT-2 layer of a built model: its tensors by their logical names (the
 * layer holds its blocks behind their ops, so a test reads them through gpt_param). Shared by
 * test_gpt.c and test_eval.c, whose double-precision references read the same tensors. */
#ifndef TEST_MODEL_TENSORS_H
#define TEST_MODEL_TENSORS_H

#include <stdio.h>

#include "trident/gpt.h"

typedef struct {
    const float *w, *b;
} tnorm;
typedef struct {
    tnorm ln1, ln2;
    struct {
        const float *qkv_w, *qkv_b, *proj_w, *proj_b;
    } attn;
    struct {
        const float *fc_w, *fc_b, *fc2_w, *fc2_b;
    } mlp;
} tlayer;

static const float *tensor_at(const gpt_model *m, int l, const char *what)
{
    char n[64];
    if (l < 0) snprintf(n, sizeof n, "%s", what);
    else snprintf(n, sizeof n, "layers.%d.%s", l, what);
    return gpt_param(m, n, 0);
}

static tlayer layer_of(const gpt_model *m, int l)
{
    tlayer L = {{tensor_at(m, l, "ln1.weight"), tensor_at(m, l, "ln1.bias")},
                {tensor_at(m, l, "ln2.weight"), tensor_at(m, l, "ln2.bias")},
                {tensor_at(m, l, "attn.qkv.weight"), tensor_at(m, l, "attn.qkv.bias"),
                 tensor_at(m, l, "attn.proj.weight"), tensor_at(m, l, "attn.proj.bias")},
                {tensor_at(m, l, "mlp.fc.weight"), tensor_at(m, l, "mlp.fc.bias"), tensor_at(m, l, "mlp.fc2.weight"),
                 tensor_at(m, l, "mlp.fc2.bias")}};
    return L;
}

#endif
