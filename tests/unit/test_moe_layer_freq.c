/* src/model/moe_layer_freq.c and what a mixed model builds from it (--moe-layer-freq: dense and
 * MoE layers mixed, as Megatron's moe_layer_freq): which layers are MoE for an integer, a list
 * and Megatron's list expressions, worked out by hand; the flag's errors; the tensor table of a
 * mixed model (a dense layer's MLP under the dense names at --ffn-hidden-size, a MoE layer's
 * experts and router) and its parameters counted by hand, whole and per pipeline stage; each MoE
 * layer's expert bias moved by its own row of the load; and the model FLOPs (MFU) by hand, each
 * layer's MLP its own. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "backend/backend.h"
#include "trident/args.h"
#include "trident/comm.h"
#include "trident/gpt.h"
#include "trident/parallel_state.h"

static comm *g_world;
static ps_state *g_ps;
static backend *g_be;

/* The MoE layers of text for L layers as a string of 0 and 1 ("1010"), or the error. */
static const char *layers_of(const char *text, int L)
{
    static char out[300];
    gpt_config c = {0};
    c.num_layers = L, c.num_experts = 4;
    if (gpt_moe_layer_freq_parse(&c, text, L, out, sizeof out)) return out;
    for (int l = 0; l < L; l++) out[l] = (char)('0' + gpt_moe_layer(&c, l));
    out[L] = 0;
    return out;
}

static void which_layers_by_hand(void **state)
{
    (void)state;
    assert_string_equal(layers_of("1", 4), "1111");
    assert_string_equal(layers_of("2", 5), "10101"); /* layer i iff i % 2 == 0 */
    assert_string_equal(layers_of("3", 7), "1001001");
    assert_string_equal(layers_of("9", 4), "1000");   /* N past the layers: layer 0 only */
    assert_string_equal(layers_of("[1,0,1,1]", 4), "1011");
    assert_string_equal(layers_of(" [ 0, 1 ,1, 1 ] ", 4), "0111");
    assert_string_equal(layers_of("([1]*1+[0]*1)*2", 4), "1010"); /* Megatron's expressions */
    assert_string_equal(layers_of("[0]*1+[1]*3", 4), "0111");
    assert_string_equal(layers_of("[1]*2+[0]*3+([0,1])*2", 9), "110000101");
    /* a list that is a frequency is stored as one; one that is not, as the list */
    gpt_config a = {0}, b = {0};
    a.num_layers = b.num_layers = 4, a.num_experts = b.num_experts = 2;
    char msg[200];
    assert_int_equal(gpt_moe_layer_freq_parse(&a, "[1,0,1,0]", 4, msg, sizeof msg), 0);
    assert_int_equal(a.moe_layer_freq, 2);
    assert_int_equal(gpt_moe_layer_freq_parse(&b, "2", 4, msg, sizeof msg), 0);
    assert_true(gpt_moe_layers_equal(&a, &b));
    assert_int_equal(gpt_moe_layer_freq_parse(&b, "[1,1,1,1]", 4, msg, sizeof msg), 0);
    assert_int_equal(b.moe_layer_freq, 0); /* every layer: the default */
    assert_int_equal(gpt_moe_layer_freq_parse(&b, "[1,0,1,1]", 4, msg, sizeof msg), 0);
    assert_int_equal(b.moe_layer_freq, GPT_MOE_FREQ_LIST);
    assert_false(gpt_moe_layers_equal(&a, &b));
    assert_int_equal(gpt_moe_layers(&b, 0, 4), 3);
    assert_int_equal(gpt_moe_layers(&b, 1, 2), 1);
    gpt_moe_layer_freq_str(&b, msg, sizeof msg);
    assert_string_equal(msg, "[1, 0, 1, 1]");
    assert_string_equal(layers_of(msg, 4), "1011"); /* what meta.json holds reads back */
    /* a dense model has no MoE layer, whatever the field */
    b.num_experts = 0;
    assert_int_equal(gpt_moe_layers(&b, 0, 4), 0);
}

static void errors_name_the_flag(void **state)
{
    (void)state;
    static const struct {
        const char *text, *says;
    } bad[] = {
        {"0", "give an integer N >= 1"},
        {"-2", "give an integer N >= 1"},
        {"2x", "give an integer N >= 1"},
        {"[1,0]", "names 2 layers but --num-layers is 4"},
        {"[1]*5", "names 5 layers but --num-layers is 4"},
        {"[0,0,0,0]", "has no MoE layer"},
        {"[1,2,1,1]", "not 0 or 1"},
        {"[1,10,1]", "not 0 or 1"},
        {"[1 0 1 1]", "not separated by commas"},
        {"([1]*4", "without its ')'"},
        {"[]", "empty list"},
        {"[1]*x", "expects an integer"},
        {"[1,0,1,1] if True else 2", "has text after the list"},
        {"range(4)", "neither an integer nor a list"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const char *msg = layers_of(bad[i].text, 4);
        printf("%-28s -> %s\n", bad[i].text, msg);
        assert_non_null(strstr(msg, "--moe-layer-freq"));
        assert_non_null(strstr(msg, bad[i].says));
    }
    /* a list longer than a list may name */
    char big[2 * GPT_MOE_LIST_MAX_LAYERS + 8];
    snprintf(big, sizeof big, "[1]*%d", GPT_MOE_LIST_MAX_LAYERS + 1);
    assert_non_null(strstr(layers_of(big, 4), "longer than"));
}

/* gpt_config_validate: the flag without experts, and a list of the wrong length. */
static void validate_refuses(void **state)
{
    (void)state;
    const char *dense[] = {"train", "--num-layers", "4", "--moe-layer-freq", "2"};
    const char *wrong[] = {"train", "--num-layers", "4", "--num-experts", "4", "--moe-layer-freq", "[1,0,1]"};
    const char *good[] = {"train", "--num-layers", "4", "--num-experts", "4", "--moe-layer-freq", "([1]*1+[0]*1)*2"};
    td_args a;
    char msg[300];
    td_args_parse(&a, TD_CMD_TRAIN, "trident train", 5, (char **)dense, 1);
    assert_int_equal(gpt_config_validate(&a, 1, msg, sizeof msg), -1);
    assert_string_equal(msg, "--moe-layer-freq needs --num-experts (a mixture of experts)");
    td_args_free(&a);
    td_args_parse(&a, TD_CMD_TRAIN, "trident train", 7, (char **)wrong, 1);
    assert_int_equal(gpt_config_validate(&a, 1, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "--moe-layer-freq [1,0,1] names 3 layers but --num-layers is 4"));
    td_args_free(&a);
    td_args_parse(&a, TD_CMD_TRAIN, "trident train", 7, (char **)good, 1);
    assert_int_equal(gpt_config_validate(&a, 1, msg, sizeof msg), 0);
    gpt_config c;
    gpt_config_from_args(&c, &a);
    assert_int_equal(c.moe_layer_freq, 2);
    td_args_free(&a);
}

/* A mixed model of 4 layers, [1,0,1,1]: SwiGLU, biases, dense MLP f = 24, experts F = 8. */
static gpt_config mixed(void)
{
    gpt_config c = {0};
    c.num_layers = 4, c.hidden = 16, c.heads = 4, c.ffn = 24, c.seq = 8, c.max_pos = 8;
    c.vocab = 50, c.padded_vocab = 64, c.init_std = 0.02f, c.seed = 5, c.act = TD_ACT_SILU, c.glu = 1;
    c.num_experts = 4, c.moe_ffn = 8, c.moe_topk = 2;
    char msg[200];
    assert_int_equal(gpt_moe_layer_freq_parse(&c, "[1,0,1,1]", 4, msg, sizeof msg), 0);
    return c;
}

/* Parameters of one layer by hand: norms, attention with biases, then the MLP slot's kind. */
static int64_t layer_params(const gpt_config *c, int moe)
{
    int64_t h = c->hidden, f = c->ffn, E = c->num_experts, F = c->moe_ffn;
    int64_t attn = 2 * h + (3 * h * h + 3 * h) + (h * h + h) + 2 * h;
    int64_t dense = (2 * f * h + 2 * f) + (h * f + h);
    int64_t experts = E * h + (E * 2 * F * h + E * 2 * F) + (E * h * F + E * h);
    return attn + (moe ? experts : dense);
}

static const gpt_tensor_info *find(const gpt_model *m, const char *name)
{
    for (int i = 0; i < m->ntensors; i++)
        if (strcmp(m->table[i].name, name) == 0) return &m->table[i];
    return NULL;
}

static void tensor_table_by_hand(void **state)
{
    (void)state;
    gpt_config c = mixed();
    gpt_model *m = gpt_create(&c, g_ps, g_be, 0, c.num_layers, 1, 1);
    int64_t h = c.hidden;
    for (int l = 0; l < 4; l++) {
        char n[64];
        int moe = l != 1;
        snprintf(n, sizeof n, "layers.%d.mlp.router.weight", l);
        assert_int_equal(find(m, n) != NULL, moe);
        snprintf(n, sizeof n, "layers.%d.mlp.experts.fc.weight", l);
        const gpt_tensor_info *t = find(m, n);
        assert_int_equal(t != NULL, moe);
        if (t) assert_true(t->shape[0] == 4 * 2 * 8 && t->shape[1] == h);
        snprintf(n, sizeof n, "layers.%d.mlp.fc.weight", l); /* the dense MLP's logical names */
        t = find(m, n);
        assert_int_equal(t != NULL, !moe);
        if (t) assert_true(t->shape[0] == 2 * 24 && t->shape[1] == h);
        snprintf(n, sizeof n, "layers.%d.mlp.fc2.weight", l);
        t = find(m, n);
        if (t) assert_true(t->shape[0] == h && t->shape[1] == 24);
    }
    int64_t V = c.padded_vocab, P = c.max_pos, embed = V * h + P * h, fnorm = 2 * h;
    int64_t L0 = layer_params(&c, 1), L1 = layer_params(&c, 0);
    assert_int_equal((int64_t)m->numel, embed + 3 * L0 + L1 + fnorm);
    assert_int_equal(gpt_num_params(&c), embed + 3 * L0 + L1 + fnorm);
    /* the stages of an uneven split in kinds: [0, 2) holds 1 MoE and 1 dense, [2, 4) 2 MoE */
    assert_int_equal(gpt_stage_numel(&c, 1, 1, 0, 2, 1, 0), embed + L0 + L1);
    assert_int_equal(gpt_stage_numel(&c, 1, 1, 2, 2, 0, 1), 2 * L0 + fnorm + V * h); /* the last stage's output copy */
    assert_int_equal(gpt_stage_numel(&c, 1, 1, 1, 1, 0, 0), L1);
    /* expert parallelism 2: a rank holds 2 of the 4 experts of each MoE layer (the router whole) */
    int64_t F = c.moe_ffn, half = 2 * (2 * F * h + 2 * F) + 2 * (h * F + h);
    assert_int_equal(gpt_stage_numel(&c, 1, 2, 2, 2, 0, 1), 2 * (L0 - half) + fnorm + V * h);
    assert_int_equal(gpt_stage_numel(&c, 1, 4, 0, 1, 1, 0), embed + L0 - 3 * half / 2);
    /* the canonical layout: layer 2 starts after a MoE and a dense layer */
    assert_int_equal(gpt_canonical_offset(&c, "layers.2.mlp.experts.fc2.bias"), embed + L0 + L1);
    gpt_free(m);
}

/* The expert bias of each MoE layer moves against its own row of the iteration's tokens (rows
 * for the MoE layers only, in order), on a stage holding layers [1, 4) of [1,0,1,1]: layer 2 takes
 * row 1, layer 3 row 2; layer 1 (dense) has none. By hand: mean 10, bias += rate sign(mean - load). */
static void expert_bias_rows_by_hand(void **state)
{
    (void)state;
    gpt_config c = mixed();
    c.moe_score = 1, c.moe_expert_bias = 1, c.moe_bias_rate = 0.5f;
    gpt_model *m = gpt_create(&c, g_ps, g_be, 1, 3, 1, 1);
    const double tokens[3][4] = {{40, 0, 0, 0}, {16, 4, 10, 10}, {5, 5, 15, 15}};
    gpt_moe_update_expert_bias(m, &tokens[0][0]);
    assert_null(gpt_param(m, "layers.1.mlp.router.expert_bias", 0));
    const float *b2 = gpt_param(m, "layers.2.mlp.router.expert_bias", 0);
    const float *b3 = gpt_param(m, "layers.3.mlp.router.expert_bias", 0);
    assert_non_null(b2);
    assert_non_null(b3);
    const float want2[4] = {-0.5f, 0.5f, 0, 0}, want3[4] = {0.5f, 0.5f, -0.5f, -0.5f};
    for (int e = 0; e < 4; e++) {
        assert_true(b2[e] == want2[e]);
        assert_true(b3[e] == want3[e]);
    }
    gpt_free(m);
}

/* Megatron's count, by hand: forward 2 B s (4 h^2) + 4 B s^2 h per layer for attention, the MLP
 * 2 B s (3 f h) (SwiGLU's three matrices) dense or 2 B s k (3 F h) through k experts, the logits
 * 2 B s V h; backward twice the forward. */
static void flops_by_hand(void **state)
{
    (void)state;
    gpt_config c = mixed();
    double B = 3, s = c.seq, h = c.hidden, V = c.padded_vocab, f = c.ffn, F = c.moe_ffn, k = c.moe_topk;
    double attn = 2 * B * s * 4 * h * h + 4 * B * s * s * h;
    double fwd = 4 * attn + 3 * (2 * B * s * k * 3 * F * h) + 1 * (2 * B * s * 3 * f * h) + 2 * B * s * V * h;
    double got = gpt_flops_per_iteration(&c, 3, 0);
    printf("flops: %.0f, by hand %.0f\n", got, 3 * fwd);
    assert_true(fabs(got - 3 * fwd) <= 1e-9 * got);
}

int main(int argc, char **argv)
{
    g_world = comm_world_init(&argc, &argv);
    g_ps = ps_init(g_world, 1, 1);
    g_be = be_create("cpu", 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(which_layers_by_hand),
        cmocka_unit_test(errors_name_the_flag),
        cmocka_unit_test(validate_refuses),
        cmocka_unit_test(tensor_table_by_hand),
        cmocka_unit_test(expert_bias_rows_by_hand),
        cmocka_unit_test(flops_by_hand),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    be_free(g_be);
    ps_free(g_ps);
    comm_world_finalize(g_world);
    return rc;
}
