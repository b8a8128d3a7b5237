/* The vtable's kernel entries of one ISA build (see cpu.h): compiled once per build, so each
 * build fills the table with its own kernels. */
#include "backend/cpu/cpu.h"

void cpu_kernels_fill(struct be_ops *o)
{
    o->matmul_fwd = cpu_matmul_fwd;
    o->matmul_bwd = cpu_matmul_bwd;
    o->convert = cpu_convert;
    o->matmul_fwd_lp = cpu_matmul_fwd_lp;
    o->matmul_bwd_lp = cpu_matmul_bwd_lp;
    o->lp_native = cpu_lp_native;
    o->embedding_fwd = cpu_embedding_fwd;
    o->embedding_bwd = cpu_embedding_bwd;
    o->pos_embedding_fwd = cpu_pos_embedding_fwd;
    o->pos_embedding_bwd = cpu_pos_embedding_bwd;
    o->layernorm_fwd = cpu_layernorm_fwd;
    o->layernorm_bwd = cpu_layernorm_bwd;
    o->rmsnorm_fwd = cpu_rmsnorm_fwd;
    o->rmsnorm_bwd = cpu_rmsnorm_bwd;
    o->rope_fwd = cpu_rope_fwd;
    o->rope_bwd = cpu_rope_bwd;
    o->attention_fwd = cpu_attention_fwd;
    o->attention_bwd = cpu_attention_bwd;
    o->attention_kv_fwd = cpu_attention_kv_fwd;
    o->gelu_fwd = cpu_gelu_fwd;
    o->gelu_bwd = cpu_gelu_bwd;
    o->bias_gelu_fwd = cpu_bias_gelu_fwd;
    o->bias_gelu_bwd = cpu_bias_gelu_bwd;
    o->swiglu_fwd = cpu_swiglu_fwd;
    o->swiglu_bwd = cpu_swiglu_bwd;
    o->add = cpu_add;
    o->scale = cpu_scale;
    o->bias_add = cpu_bias_add;
    o->bias_bwd = cpu_bias_bwd;
    o->dropout_fwd = cpu_dropout_fwd;
    o->dropout_bwd = cpu_dropout_bwd;
    o->bias_dropout_add_fwd = cpu_bias_dropout_add_fwd;
    o->ce_max = cpu_ce_max;
    o->ce_sumexp = cpu_ce_sumexp;
    o->ce_target = cpu_ce_target;
    o->ce_loss = cpu_ce_loss;
    o->ce_bwd = cpu_ce_bwd;
    o->adamw = cpu_adamw;
    o->sumsq = cpu_sumsq;
}
