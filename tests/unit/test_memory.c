/* src/train/memory: the predicted parameters and activations of a chunk against the model that
 * gpt_create builds (its tensor table's elements and its arena's activation bytes), for GPT-2
 * and Llama-style blocks, for first, middle, last and whole-model chunks, and with each mode of
 * activation recomputation. */
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
    c.swiglu = 1;
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
    l.chunk[0] = (mem_chunk){n, m->first, m->last, 1};
    assert_int_equal((int64_t)mem_chunk_params(c, 1, &l.chunk[0]), (int64_t)m->numel);
    double acts = mem_chunk_acts(&l, &l.chunk[0]);
    /* the arena aligns each buffer to 64 bytes: under 64 bytes more per buffer (11 outside the layers, 13 a layer) */
    assert_true(acts <= (double)m->acts_bytes);
    assert_true((double)m->acts_bytes - acts <= 64.0 * (11 + 13 * n));
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
    backend *bf16 = be_cpu(0);
    be_set_gemm_dtype(bf16, BE_BF16);
    g_be = bf16;
    test_gpt2_chunks(state);
    test_llama_chunks(state);
    test_recompute_chunks(state);
    g_be = fp32;
    be_free(bf16);
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
    l.chunk[0] = (mem_chunk){4, 1, 1, 3};
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
    l.chunk[0] = (mem_chunk){4, 1, 0, 3};
    mem_predict(&l, &b);
    assert_true(fabs(b.comm - 4.0 * l.cfg.padded_vocab * l.cfg.hidden) < 1e-6 * b.comm);
    assert_true(fabs(a.total - (a.params + a.grads + a.optimizer + a.acts + a.workspace + a.comm)) < 1e-6 * a.total);
}

int main(int argc, char **argv)
{
    g_world = comm_world_init(&argc, &argv);
    g_ps = ps_init(g_world, 1, 1);
    g_be = be_cpu(0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt2_chunks),
        cmocka_unit_test(test_llama_chunks),
        cmocka_unit_test(test_recompute_chunks),
        cmocka_unit_test(test_bf16_chunks),
        cmocka_unit_test(test_layout_terms),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    be_free(g_be);
    ps_free(g_ps);
    comm_world_finalize(g_world);
    return rc;
}
