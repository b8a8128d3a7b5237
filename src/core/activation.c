/* The activation table and its names: see include/core/trident/activation.h. */
#include "trident/activation.h"

#include <stdio.h>
#include <string.h>

#include "trident/args.h"

const td_act_info TD_ACTS[TD_ACT_COUNT] = {
    [TD_ACT_GELU] = {"gelu", "GeLU", "GeGLU", "gelu_new", "gelu_pytorch_tanh|gelu_fast"},
    [TD_ACT_GELU_ERF] = {"gelu_erf", "GeLU (erf)", "GeGLU (erf)", "gelu", NULL},
    [TD_ACT_SILU] = {"silu", "SiLU", "SwiGLU", "silu", "swish"},
    [TD_ACT_RELU] = {"relu", "ReLU", "ReGLU", "relu", NULL},
    [TD_ACT_SQUARED_RELU] = {"squared_relu", "squared ReLU", "squared-ReGLU", "relu2", NULL},
};

const char *td_act_label(int act, int glu)
{
    if (act < 0 || act >= TD_ACT_COUNT) return "?";
    return glu ? TD_ACTS[act].glu_label : TD_ACTS[act].label;
}

/* Whether name is one of the '|'-separated names in list. */
static int in_list(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; p && *p;) {
        size_t len = strcspn(p, "|");
        if (len == n && strncmp(p, name, n) == 0) return 1;
        p += len + (p[len] == '|');
    }
    return 0;
}

int td_act_from_hf(const char *name)
{
    for (int i = 0; i < TD_ACT_COUNT; i++)
        if (strcmp(TD_ACTS[i].hf, name) == 0 || in_list(TD_ACTS[i].hf_also, name)) return i;
    return -1;
}

int td_act_of_args(const td_args *a, int *act, int *glu, char *msg, size_t msglen)
{
    static const struct { const char *flag; int act; } sw[] = {
        {"--swiglu", TD_ACT_SILU}, {"--squared-relu", TD_ACT_SQUARED_RELU}, {"--openai-gelu", TD_ACT_GELU}};
    const int on[] = {a->swiglu, a->squared_relu, a->openai_gelu};
    int chosen = -1;
    for (int i = 0; i < 3; i++) {
        if (!on[i]) continue;
        if (chosen >= 0) {
            snprintf(msg, msglen, "%s and %s choose two activations: give one of them", sw[chosen].flag, sw[i].flag);
            return -1;
        }
        chosen = i;
    }
    int given = a->activation_func ? td_args_choice_index(a, "--activation-func") : -1;
    if (given >= 0 && chosen >= 0 && given != sw[chosen].act) {
        snprintf(msg, msglen, "%s means --activation-func %s, not %s: give one of them", sw[chosen].flag,
                 TD_ACTS[sw[chosen].act].name, a->activation_func);
        return -1;
    }
    *act = given >= 0 ? given : chosen >= 0 ? sw[chosen].act : TD_ACT_GELU;
    *glu = a->gated_linear_unit || a->swiglu;
    return 0;
}
