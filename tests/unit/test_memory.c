/* src/train/memory: the predicted parameters and activations of a chunk against the model that
 * gpt_create builds (its tensor table's elements and its arena's activation bytes), for GPT-2
 * and Llama-style blocks, for first, middle, last and whole-model chunks, and with each mode of
 * activation recomputation; and, independently of the code's arena, at tensor parallelism 2,
 * with and without sequence parallelism, and for BERT, against counts worked out by hand here
 * (Megatron's 12Lh^2 + 13Lh parameter formula; Korthikanti et al.'s rule that sequence
 * parallelism divides every activation term by t, and plain tensor parallelism all but the
 * norms' and the residual stream's). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <string.h>

#include <cmocka.h>

#include "backend/backend.h"
#include "trident/comm.h"
#include "trident/gpt.h"
#include "trident/memory.h"
#include "trident/parallel_state.h"

static comm *g_world;
static ps_state *g_ps;
static backend *g_be;

static gpt_config gpt2(void)
{
    gpt_config c = {0};
    c.num_layers = 4;
    c.hidden = 32;
    c.heads = 4;
    c.ffn = 128;
    c.seq = 16;
    c.max_pos = 24;
    c.vocab = 100;
    c.padded_vocab = gpt_padded_vocab(c.vocab, 64, 1);
    c.init_std = 0.02f;
    c.seed = 1;
    return c;
}

static gpt_config llama(void)
{
    gpt_config c = gpt2();
    c.norm = GPT_NORM_RMSNORM;
    c.pos = GPT_POS_ROPE;
    c.act = TD_ACT_SILU, c.glu = 1;
    c.disable_bias = 1;
    c.untied = 1;
    c.query_groups = 2;
    c.ffn = 96;
    return c;
}

/* Builds layers [layer0, layer0 + n) with recomputation rc and holds the prediction against it. */
static void check_rc(const gpt_config *c, int layer0, int n, int mbs, const gpt_recompute *rc)
{
    gpt_model *m = gpt_create_recompute(c, g_ps, g_be, layer0, n, mbs, 1, rc);
    mem_layout l = {0};
    l.recompute = rc->granularity == GPT_RECOMPUTE_FULL        ? MEM_RECOMPUTE_FULL
                  : rc->granularity == GPT_RECOMPUTE_SELECTIVE ? MEM_RECOMPUTE_SELECTIVE
                                                               : MEM_RECOMPUTE_NONE;
    l.recompute_block = rc->method == GPT_RECOMPUTE_BLOCK;
    l.recompute_num_layers = rc->num_layers;
    l.lowp = g_be->gemm_dtype != BE_F32;
    l.cfg = *c;
    l.tp = l.dp = 1;
    l.mbs = mbs;
    l.nchunks = 1;
    l.chunk[0] = (mem_chunk){n, m->first, m->last, 1, layer0};
    assert_int_equal((int64_t)mem_chunk_params(c, 1, &l.chunk[0]), (int64_t)m->numel);
    double acts = mem_chunk_acts(&l, &l.chunk[0]);
    /* the arena aligns each buffer to 64 bytes: under 64 bytes more per buffer (13 outside the layers, 13 a layer) */
    assert_true(acts <= (double)m->acts_bytes);
    assert_true((double)m->acts_bytes - acts <= 64.0 * (13 + 13 * n));
    gpt_free(m);
}

static void check(const gpt_config *c, int layer0, int n, int mbs)
{
    gpt_recompute none = {GPT_RECOMPUTE_NONE, GPT_RECOMPUTE_UNIFORM, 0};
    check_rc(c, layer0, n, mbs, &none);
}

/* Recomputation: the kept activations of every mode, GPT-2 and Llama blocks. */
static void test_recompute_chunks(void **state)
{
    (void)state;
    const gpt_recompute modes[] = {{GPT_RECOMPUTE_SELECTIVE, GPT_RECOMPUTE_UNIFORM, 0},
                                   {GPT_RECOMPUTE_FULL, GPT_RECOMPUTE_UNIFORM, 1},
                                   {GPT_RECOMPUTE_FULL, GPT_RECOMPUTE_UNIFORM, 3},
                                   {GPT_RECOMPUTE_FULL, GPT_RECOMPUTE_BLOCK, 2},
                                   {GPT_RECOMPUTE_FULL, GPT_RECOMPUTE_BLOCK, 4}};
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        gpt_config c = gpt2(), d = llama();
        check_rc(&c, 0, 4, 2, &modes[i]);
        check_rc(&c, 1, 2, 1, &modes[i]);
        check_rc(&d, 0, 4, 2, &modes[i]);
        check_rc(&d, 2, 2, 3, &modes[i]);
    }
}

static void test_gpt2_chunks(void **state)
{
    (void)state;
    gpt_config c = gpt2();
    check(&c, 0, 4, 2); /* the whole model: tied head */
    check(&c, 0, 2, 3); /* first */
    check(&c, 1, 2, 1); /* middle */
    check(&c, 2, 2, 2); /* last: the head's own copy */
}

static void test_llama_chunks(void **state)
{
    (void)state;
    gpt_config c = llama();
    check(&c, 0, 4, 2);
    check(&c, 0, 1, 2);
    check(&c, 3, 1, 3);
}

/* Mixed precision: the GEMM inputs kept in bf16 (norm outputs, attention output, the MLP
 * activation), every chunk position and recomputation mode. */
static void test_bf16_chunks(void **state)
{
    (void)state;
    backend *fp32 = g_be;
    backend *bf16 = be_create("cpu", 0);
    be_set_gemm_dtype(bf16, BE_BF16);
    g_be = bf16;
    test_gpt2_chunks(state);
    test_llama_chunks(state);
    test_recompute_chunks(state);
    g_be = fp32;
    be_free(bf16);
}

/* A mixture of experts mixing dense layers in (--moe-layer-freq [1,0,0,1,1,0]: SwiGLU MLPs of
 * 96 and 4 experts of 32, top-2, a shared expert): a chunk's parameters and activations as the
 * other chunks', and its workspace against the arena gpt_create carves (the scratch one per block
 * kind among the chunk's layers; full recomputation's shared set one region per group position,
 * as large as the largest layer at it), within the 64-byte alignment of each buffer. */
static void check_mixed(const gpt_config *c, int layer0, int n, int mbs, const gpt_recompute *rc)
{
    check_rc(c, layer0, n, mbs, rc);
    gpt_model *m = gpt_create_recompute(c, g_ps, g_be, layer0, n, mbs, 1, rc);
    mem_layout l = {0};
    l.recompute = rc->granularity == GPT_RECOMPUTE_FULL        ? MEM_RECOMPUTE_FULL
                  : rc->granularity == GPT_RECOMPUTE_SELECTIVE ? MEM_RECOMPUTE_SELECTIVE
                                                               : MEM_RECOMPUTE_NONE;
    l.recompute_block = rc->method == GPT_RECOMPUTE_BLOCK;
    l.recompute_num_layers = rc->num_layers;
    l.cfg = *c;
    l.tp = l.dp = 1;
    l.mbs = mbs;
    l.nchunks = 1;
    l.chunk[0] = (mem_chunk){n, m->first, m->last, 1, layer0};
    mem_prediction p;
    mem_predict(&l, &p);
    gpt_layout_bytes b;
    gpt_layout_bytes_of(c, 1, 1, 0, 1, 0, mbs, 0, layer0, &b);
    double act = 4.0 * mbs * c->seq * c->hidden, recv = (m->first && m->last ? 1 : 3) * act;
    double predicted = p.workspace - recv - b.host - (m->last ? b.host_head : 0);
    double measured = (double)m->arena.cap - (double)m->acts_bytes - 64;
    printf("layers [%d, %d), recompute %d/%d/%d: workspace in the arena %.0f, predicted %.0f\n", layer0, layer0 + n,
           rc->granularity, rc->method, rc->num_layers, measured, predicted);
    assert_true(predicted <= measured);
    assert_true(measured - predicted <= 64.0 * (40 + 25 * n));
    gpt_free(m);
}

static void test_moe_mixed_chunks(void **state)
{
    (void)state;
    gpt_config c = llama();
    c.num_layers = 6, c.hidden = 64, c.heads = 4, c.query_groups = 2, c.seq = 32, c.max_pos = 32, c.ffn = 96;
    c.num_experts = 4, c.moe_topk = 2, c.moe_ffn = 32, c.moe_shared_ffn = 16, c.moe_aux_coeff = 0.01f;
    char msg[200];
    assert_int_equal(gpt_moe_layer_freq_parse(&c, "[1,0,0,1,1,0]", 6, msg, sizeof msg), 0);
    const gpt_recompute modes[] = {{GPT_RECOMPUTE_NONE, GPT_RECOMPUTE_UNIFORM, 0},
                                   {GPT_RECOMPUTE_SELECTIVE, GPT_RECOMPUTE_UNIFORM, 0},
                                   {GPT_RECOMPUTE_FULL, GPT_RECOMPUTE_UNIFORM, 2},
                                   {GPT_RECOMPUTE_FULL, GPT_RECOMPUTE_UNIFORM, 4},
                                   {GPT_RECOMPUTE_FULL, GPT_RECOMPUTE_BLOCK, 3}};
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        check_mixed(&c, 0, 6, 2, &modes[i]); /* the whole model */
        check_mixed(&c, 0, 3, 2, &modes[i]); /* first: MoE, dense, dense */
        check_mixed(&c, 1, 2, 1, &modes[i]); /* middle: dense only */
        check_mixed(&c, 3, 3, 2, &modes[i]); /* last: MoE, MoE, dense */
    }
    /* a dense chunk of the mixed model predicts what the same chunk of the dense model does */
    gpt_config d = c;
    d.num_experts = 0;
    mem_chunk middle = {2, 0, 0, 1, 1};
    assert_true(mem_chunk_params(&c, 1, &middle) == mem_chunk_params(&d, 1, &middle));
}

/* The distributed optimizer divides Adam's state by dp (and adds a grad shard); activations scale with the micro-batches
 * in flight. */
static void test_layout_terms(void **state)
{
    (void)state;
    mem_layout l = {0};
    l.cfg = gpt2();
    l.tp = 1;
    l.dp = 4;
    l.mbs = 2;
    l.nchunks = 1;
    l.chunk[0] = (mem_chunk){4, 1, 1, 3, 0};
    mem_prediction a, b;
    mem_predict(&l, &a);
    l.distributed_optimizer = 1;
    mem_predict(&l, &b);
    assert_true(fabs(b.optimizer * 4 - 1.5 * a.optimizer) < 1e-6 * a.optimizer); /* + the grad shard */
    assert_true(fabs(a.optimizer - 2 * a.params) < 1e-6 * a.params);
    assert_true(fabs(a.acts - 3 * a.acts_micro) < 1e-6 * a.acts);
    assert_true(a.comm > 0);
    /* the first stage of a pipeline with a tied embedding: + the embedding's all-reduce copy */
    l.dp = 1;
    l.distributed_optimizer = 0;
    mem_predict(&l, &a);
    assert_true(a.comm == 0);
    l.chunk[0] = (mem_chunk){4, 1, 0, 3, 0};
    mem_predict(&l, &b);
    assert_true(fabs(b.comm - 4.0 * l.cfg.padded_vocab * l.cfg.hidden) < 1e-6 * b.comm);
    assert_true(fabs(a.total - (a.params + a.grads + a.optimizer + a.acts + a.workspace + a.comm)) < 1e-6 * a.total);
}


/* The distributed optimizer under expert parallelism: the experts' state (Adam's moments and the
 * grad shard, 12 bytes an element) is sharded over the expert-data-parallel group, dp / ep, the
 * rest over dp. GPT-2 of test_params_by_hand with 4 experts of 64 a layer (GeLU, biases: fc1 64 x
 * 32 + 64, fc2 32 x 64 + 32 = 4192 an expert), ep 2 of dp 4: a rank holds 2 experts a layer,
 * 4 x 2 x 4192 = 33536 elements of experts, each with 1/2 of its state. */
static void test_moe_distributed_optimizer(void **state)
{
    (void)state;
    mem_layout l = {0};
    l.cfg = gpt2();
    l.cfg.num_experts = 4, l.cfg.moe_topk = 2, l.cfg.moe_ffn = 64;
    l.tp = 1, l.dp = 4, l.ep = 2, l.mbs = 2, l.nchunks = 1, l.distributed_optimizer = 1;
    l.chunk[0] = (mem_chunk){4, 1, 1, 1, 0};
    mem_prediction p;
    mem_predict(&l, &p);
    double experts = 4 * 2 * 4192.0, numel = p.params / 4;
    double one = (double)gpt_stage_numel(&l.cfg, 1, 1, 0, 4, 1, 1); /* every expert: 2 more a layer */
    assert_true(fabs(one - numel - experts) < 0.5);
    double want = 12.0 * ((numel - experts) / 4 + experts / 2);
    printf("ep 2 of dp 4: optimizer %.0f bytes, by hand %.0f\n", p.optimizer, want);
    assert_true(fabs(p.optimizer - want) < 1e-9 * want);
}

/* ... and under context parallelism: expert parallelism is carved out of dp x cp, so at dp 2 x
 * cp 2 with ep 2 the experts' state is sharded over the expert-data-parallel group of
 * dp x cp / ep = 2 ranks, the rest over dp x cp = 4 (the trainer's edp group,
 * src/comm/parallel_state.c; before, the experts' shards were taken over dp / ep = 1). */
static void test_moe_distributed_optimizer_cp(void **state)
{
    (void)state;
    mem_layout l = {0};
    l.cfg = gpt2();
    l.cfg.num_experts = 4, l.cfg.moe_topk = 2, l.cfg.moe_ffn = 64;
    l.tp = 1, l.dp = 2, l.cp = 2, l.ep = 2, l.mbs = 2, l.nchunks = 1, l.distributed_optimizer = 1;
    l.chunk[0] = (mem_chunk){4, 1, 1, 1, 0};
    mem_prediction p;
    mem_predict(&l, &p);
    double experts = 4 * 2 * 4192.0, numel = p.params / 4; /* as test_moe_distributed_optimizer */
    double want = 12.0 * ((numel - experts) / 4 + experts / 2);
    printf("ep 2 of dp 2 x cp 2: optimizer %.0f bytes, by hand %.0f\n", p.optimizer, want);
    assert_true(fabs(p.optimizer - want) < 1e-9 * want);
}

/* A MoE layer under context parallelism holds the buffers of its seq / cp tokens: the router's
 * logits, choices and weights, the dispatched rows, the experts' activations and the exchange's
 * rows at ep 2 are exactly those of the same layer at cp 1 over a sequence of seq / cp (with
 * seq_aux_loss its per-sequence counts too); and the prediction holds the arena a cp rank's MoE
 * model carves. */
static void test_moe_cp_acts(void **state)
{
    (void)state;
    for (int ep = 1; ep <= 2; ep++)
        for (int seqaux = 0; seqaux <= 1; seqaux++) {
            gpt_config c = gpt2(), half;
            c.num_experts = 4, c.moe_topk = 2, c.moe_ffn = 64, c.moe_seq_aux = seqaux;
            c.seq = 32, c.max_pos = 32;
            half = c;
            half.seq = 16;
            gpt_layout_bytes two, one;
            gpt_layout_bytes_of(&c, 1, 2, PS_CP_P2P, ep, 0, 2, 0, 0, &two);
            gpt_layout_bytes_of(&half, 1, 1, PS_CP_P2P, ep, 0, 2, 0, 0, &one);
            printf("MoE ep %d%s: a layer at cp 2 of seq 32 %.0f bytes, at cp 1 of seq 16 %.0f\n", ep,
                   seqaux ? " seq_aux" : "", two.layer, one.layer);
            assert_true(two.layer == one.layer);
            assert_true(two.layer_selective == one.layer_selective);
            assert_true(two.scratch_mlp == one.scratch_mlp);
            if (ep > 1) continue; /* one rank: no ep group to build */
            ps_state cp = *g_ps;
            cp.cp = 2, cp.cp_rank = 1, cp.cp_comm = PS_CP_P2P;
            gpt_model *m = gpt_create(&c, &cp, g_be, 0, c.num_layers, 2, 1);
            mem_layout l = {0};
            l.cfg = c;
            l.tp = l.dp = 1, l.cp = 2, l.cp_comm = PS_CP_P2P, l.mbs = 2, l.nchunks = 1;
            l.chunk[0] = (mem_chunk){c.num_layers, 1, 1, 1, 0};
            double acts = mem_chunk_acts(&l, &l.chunk[0]);
            assert_true(acts <= (double)m->acts_bytes);
            assert_true((double)m->acts_bytes - acts <= 64.0 * (13 + 40 * c.num_layers));
            gpt_free(m);
        }
}

/* LoRA (rank 2 on q_proj, v_proj of the Llama blocks): the parameters are the whole model's, the
 * grads and the optimizer's state the adapters' alone, counted by hand: q A (2, 32) + B (32, 2),
 * v A (2, 32) + B (16, 2) = 224 a layer, 896 in 4; the activations (each adapter's (BT, r) kept)
 * as the model carves them. */
static void test_lora_by_hand(void **state)
{
    (void)state;
    mem_layout l = {0};
    l.cfg = llama();
    l.cfg.lora_rank = 2, l.cfg.lora_alpha = 8, l.cfg.lora_targets = 1 << GPT_LORA_Q | 1 << GPT_LORA_V;
    l.tp = 1, l.dp = 1, l.mbs = 2, l.nchunks = 1;
    l.chunk[0] = (mem_chunk){4, 1, 1, 1, 0};
    gpt_model *m = gpt_create(&l.cfg, g_ps, g_be, 0, 4, 2, 1);
    assert_int_equal(m->numel, 896);
    gpt_config base = l.cfg;
    base.lora_rank = 0, base.lora_targets = 0;
    assert_int_equal(m->numel_all, gpt_stage_numel(&base, 1, 1, 0, 4, 1, 1) + 896);
    mem_prediction p;
    mem_predict(&l, &p);
    printf("LoRA: params %.0f, grads %.0f, optimizer %.0f bytes\n", p.params, p.grads, p.optimizer);
    assert_true(p.params == 4.0 * (double)m->numel_all);
    assert_true(p.grads == 4.0 * 896 && p.optimizer == 8.0 * 896);
    double acts = mem_chunk_acts(&l, &l.chunk[0]);
    assert_true(acts <= (double)m->acts_bytes && (double)m->acts_bytes - acts <= 64.0 * (13 + 15 * 4));
    gpt_free(m);
    l.dp = 4, l.distributed_optimizer = 1;
    mem_predict(&l, &p);
    assert_true(p.optimizer == 12.0 * 896 / 4);
}

/* Parameters per tensor-parallel rank, counted by hand. GPT-2 (h 32, ffn 128, 4 layers, vocab
 * 100 padded to 128, 24 positions): Megatron's 12 L h^2 + 13 L h for the layers at tp 1; at tp 2
 * per layer 2 LayerNorms 2 x 2h = 128, QKV 3h h / 2 = 1536 + bias 3h / 2 = 48, projection
 * h h / 2 = 512 + bias h = 32 (replicated), fc 128 h / 2 = 2048 + bias 64, fc2 2048 + bias 32:
 * 6448; the word embedding V / 2 x h = 2048, positions 768, the final LayerNorm 64. */
static void test_params_by_hand(void **state)
{
    (void)state;
    gpt_config c = gpt2();
    mem_chunk whole = {4, 1, 1, 1, 0};
    c.padded_vocab = gpt_padded_vocab(c.vocab, 64, 1);
    assert_int_equal(c.padded_vocab, 128);
    double h = 32, L = 4;
    assert_true(mem_chunk_params(&c, 1, &whole) == 12 * L * h * h + 13 * L * h + 128 * h + 24 * h + 2 * h);
    c.padded_vocab = gpt_padded_vocab(c.vocab, 64, 2); /* 128: a multiple of 64 x 2 */
    assert_true(mem_chunk_params(&c, 2, &whole) == 4 * 6448 + 2048 + 768 + 64);
    mem_chunk middle = {2, 0, 0, 1, 0};
    assert_true(mem_chunk_params(&c, 2, &middle) == 2 * 6448);
    /* Llama (RMSNorm h, no biases, SwiGLU 2 x 96, 4 heads of 8 in 2 query groups: QKV 32 + 2 x 16
     * wide, untied): per layer 2 x 32 + 64 h / 2 + h 32 / 2 + 192 h / 2 + h 96 / 2 = 6208; the
     * embedding and the output layer 2048 each, the final RMSNorm 32 */
    gpt_config d = llama();
    d.padded_vocab = 128;
    assert_true(mem_chunk_params(&d, 2, &whole) == 4 * 6208 + 2048 + 32 + 2048);
    mem_chunk last = {1, 0, 1, 1, 0};
    assert_true(mem_chunk_params(&d, 2, &last) == 6208 + 32 + 2048);
    /* BERT (2 layers as GPT-2's, tied): + token types 2h = 64; the LM head's dense h h + h = 1056,
     * its LayerNorm 64 and output bias V / 2 = 64; the pooler 1056 and the sentence-order head
     * 2h + 2 = 66 */
    gpt_config b = gpt2();
    b.kind = GPT_KIND_ENCODER;
    b.num_layers = 2;
    b.binary_head = 1;
    b.padded_vocab = 128;
    mem_chunk bert = {2, 1, 1, 1, 0};
    assert_true(mem_chunk_params(&b, 2, &bert) == 2 * 6448 + 2048 + 768 + 64 + 64 + 1056 + 64 + 64 + 1056 + 66);
    b.binary_head = 0;
    assert_true(mem_chunk_params(&b, 2, &bert) == 2 * 6448 + 2048 + 768 + 64 + 64 + 1056 + 64 + 64);
}

/* Activation floats of one GPT-2 layer (h 32, 4 heads, ffn 128) for a micro-batch of 2 x 16 =
 * BT 32 tokens, tensor by tensor: the two LayerNorms' outputs BT h / sp and statistics 2 BT / sp,
 * QKV BT 3h / t, the attention's log-sum-exp BT heads / t, its output BT h / t, the MLP's fc
 * output and GeLU output BT ffn / t each, the residual and the layer's output BT h / sp each.
 * tp 1: 2 (1024 + 64) + 3072 + 128 + 1024 + 2 x 4096 + 2 x 1024 = 16640. */
static double gpt2_layer_floats(int t, int sp)
{
    double BT = 32, h = 32, heads = 4, ffn = 128, s = sp ? t : 1;
    return 2 * (BT * h / s + 2 * BT / s) + BT * 3 * h / t + BT * heads / t + BT * h / t + 2 * BT * ffn / t + 2 * BT * h / s;
}

static void test_tp_sp_acts_by_hand(void **state)
{
    (void)state;
    assert_true(gpt2_layer_floats(1, 0) == 16640);
    /* Korthikanti et al.: with sequence parallelism every term is divided by t ... */
    assert_true(gpt2_layer_floats(2, 1) == 16640 / 2);
    /* ... without it, the norms' and the residual stream's (2 (1024 + 64) + 2 x 1024 = 4224) are not */
    assert_true(gpt2_layer_floats(2, 0) == (16640 - 4224) / 2 + 4224);
    mem_layout l = {0};
    l.cfg = gpt2();
    l.cfg.padded_vocab = 128;
    l.mbs = 2;
    l.dp = 1;
    l.nchunks = 1;
    mem_chunk middle = {2, 0, 0, 1, 0};
    /* a middle chunk: the ids and targets (2 BT int32), the sample indices the stage copies to the
     * device for dropout (mbs int64: 2 mbs floats), the stage input BT h / sp, its layers */
    for (int t = 1; t <= 2; t++)
        for (int sp = 0; sp <= (t > 1); sp++) {
            l.tp = t;
            l.sequence_parallel = sp;
            double want = 4 * (2 * 32 + 2 * 2 + 32 * 32 / (sp ? t : 1) + 2 * gpt2_layer_floats(t, sp));
            if (mem_chunk_acts(&l, &middle) != want)
                fail_msg("tp %d, sp %d: %.0f predicted, %.0f by hand", t, sp, mem_chunk_acts(&l, &middle), want);
        }
    /* the last stage adds its final LayerNorm (BT h / sp + 2 BT / sp), the logits BT V / t and the
     * cross-entropy's 4 floats a token: at tp 2 with sp 512 + 32 + 32 x 64 + 128 */
    l.tp = 2;
    l.sequence_parallel = 1;
    mem_chunk last = {2, 0, 1, 1, 0};
    assert_true(mem_chunk_acts(&l, &last) == 4 * (64 + 4 + 512 + 2 * 8320 + 512 + 32 + 2048 + 128));
    /* BERT, the whole model at tp 2 with sp: + token types (BT / sp ints) and the lengths on the
     * device for the attention (mbs ints); on the last stage the
     * LM head's dense and GeLU outputs (2 BT h / sp), its LayerNorm (BT h / sp + 2 BT / sp) and
     * the pooler's and binary head's rows (mbs (3h + 4)) */
    l.cfg.kind = GPT_KIND_ENCODER;
    l.cfg.num_layers = 2;
    l.cfg.binary_head = 1;
    mem_chunk bert = {2, 1, 1, 1, 0};
    double first = 64 + 4 + 16 + 2 + 512, layers = 2 * 8320, head = 512 + 32 + 2048 + 128;
    double bert_head = 2 * 16 * 32 + (512 + 32) + 2 * (3 * 32 + 4);
    assert_true(mem_chunk_acts(&l, &bert) == 4 * (first + layers + head + bert_head));
}

/* Context parallelism: a rank's activations are those of seq / cp positions (every layer buffer
 * exactly half at cp 2, the core's log-sum-exp too: (B, n/cp, seq) = (B, n, seq/cp)), and the
 * prediction holds the arena a cp rank's model carves: its activations, and its workspace with the
 * all-to-all's buffers. */
static void test_cp_acts(void **state)
{
    (void)state;
    gpt_config cs[2] = {gpt2(), llama()};
    for (int i = 0; i < 6; i++) {
        gpt_config *c = &cs[i % 2];
        int comm = i / 2; /* PS_CP_A2A, PS_CP_ALL_GATHER, PS_CP_P2P */
        c->seq = 32, c->max_pos = 32;
        gpt_layout_bytes one, two;
        gpt_layout_bytes_of(c, 1, 1, 0, 1, 0, 2, 0, 0, &one);
        gpt_layout_bytes_of(c, 1, 2, comm, 1, 0, 2, 0, 0, &two);
        assert_true(two.layer * 2 == one.layer);
        assert_true(two.inputs < one.inputs); /* the ids and stage input halve; the sample indices do not */
        assert_true(two.head * 2 == one.head);
        assert_true(two.scratch > one.scratch / 2); /* the exchange's buffers */
        ps_state cp = *g_ps;
        cp.cp = 2, cp.cp_rank = 1, cp.cp_comm = comm;
        gpt_model *m = gpt_create(c, &cp, g_be, 0, c->num_layers, 2, 1);
        mem_layout l = {0};
        l.cfg = *c;
        l.tp = l.dp = 1, l.cp = 2, l.cp_comm = comm;
        l.mbs = 2;
        l.nchunks = 1;
        l.chunk[0] = (mem_chunk){c->num_layers, 1, 1, 1, 0};
        double acts = mem_chunk_acts(&l, &l.chunk[0]);
        assert_true(acts <= (double)m->acts_bytes);
        assert_true((double)m->acts_bytes - acts <= 64.0 * (13 + 13 * c->num_layers));
        mem_prediction p;
        mem_predict(&l, &p);
        double recv = 4.0 * 2 * (c->seq / 2) * c->hidden;
        double predicted = p.workspace - recv - two.host - two.host_head;
        double measured = (double)m->arena.cap - (double)m->acts_bytes - 64;
        printf("cp 2 (comm %d), %s: activations %.0f carved, %.0f predicted; workspace %.0f, %.0f\n", comm,
               i % 2 ? "llama" : "gpt2",
               (double)m->acts_bytes, acts, measured, predicted);
        assert_true(predicted <= measured);
        assert_true(measured - predicted <= 64.0 * (40 + 25 * c->num_layers));
        gpt_free(m);
    }
}

int main(int argc, char **argv)
{
    g_world = comm_world_init(&argc, &argv);
    g_ps = ps_init(g_world, 1, 1);
    g_be = be_create("cpu", 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt2_chunks),
        cmocka_unit_test(test_llama_chunks),
        cmocka_unit_test(test_recompute_chunks),
        cmocka_unit_test(test_bf16_chunks),
        cmocka_unit_test(test_layout_terms),
        cmocka_unit_test(test_moe_distributed_optimizer),
        cmocka_unit_test(test_moe_distributed_optimizer_cp),
        cmocka_unit_test(test_moe_cp_acts),
        cmocka_unit_test(test_moe_mixed_chunks),
        cmocka_unit_test(test_lora_by_hand),
        cmocka_unit_test(test_params_by_hand),
        cmocka_unit_test(test_tp_sp_acts_by_hand),
        cmocka_unit_test(test_cp_acts),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    be_free(g_be);
    ps_free(g_ps);
    comm_world_finalize(g_world);
    return rc;
}
