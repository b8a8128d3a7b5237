/* What every backend shares and calls no implementation: the kernel families' names, the table
 * of the contract's entries (which may be NULL) and the wrappers that chain vtable entries. */
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "trident/check.h"

void be_stats_defer(be_stats *st, be_event t0, be_event t1, be_op op)
{
    if (st->npending == st->cap) {
        st->cap = st->cap ? 2 * st->cap : 256;
        st->pending = td_xrealloc(st->pending, (size_t)st->cap * sizeof *st->pending);
    }
    st->pending[st->npending++] = (be_pending){t0, t1, (int)op};
}

void be_stats_flush(const backend *be, be_stats *st)
{
    for (int i = 0; i < st->npending; i++) {
        be_pending *p = &st->pending[i];
        st->seconds[p->op] += be->ops->event_elapsed(be, &p->t0, &p->t1);
    }
    free(st->pending);
    st->pending = NULL;
    st->npending = st->cap = 0;
}

/* Every entry of struct be_ops, in declaration order; 1: optional (be_ops.h, docs/backend.md). */
const be_op_entry BE_OP_ENTRIES[] = {
    {"alloc", offsetof(struct be_ops, alloc), 0},
    {"free", offsetof(struct be_ops, free), 0},
    {"copy_bytes", offsetof(struct be_ops, copy_bytes), 0},
    {"set_bytes", offsetof(struct be_ops, set_bytes), 0},
    {"sync", offsetof(struct be_ops, sync), 0},
    {"event_record", offsetof(struct be_ops, event_record), 0},
    {"event_elapsed", offsetof(struct be_ops, event_elapsed), 0},
    {"destroy", offsetof(struct be_ops, destroy), 1},
    {"host_alloc", offsetof(struct be_ops, host_alloc), 1},
    {"host_free", offsetof(struct be_ops, host_free), 1},
    {"event_query", offsetof(struct be_ops, event_query), 1},
    {"event_release", offsetof(struct be_ops, event_release), 1},
    {"matmul_fwd", offsetof(struct be_ops, matmul_fwd), 0},
    {"matmul_bwd", offsetof(struct be_ops, matmul_bwd), 0},
    {"matmul_grouped_fwd", offsetof(struct be_ops, matmul_grouped_fwd), 1},
    {"matmul_grouped_bwd", offsetof(struct be_ops, matmul_grouped_bwd), 1},
    {"convert", offsetof(struct be_ops, convert), 0},
    {"matmul_fwd_lp", offsetof(struct be_ops, matmul_fwd_lp), 0},
    {"matmul_bwd_lp", offsetof(struct be_ops, matmul_bwd_lp), 0},
    {"matmul_gelu_fwd_lp", offsetof(struct be_ops, matmul_gelu_fwd_lp), 1},
    {"matmul_dgelu_bwd_lp", offsetof(struct be_ops, matmul_dgelu_bwd_lp), 1},
    {"lp_native", offsetof(struct be_ops, lp_native), 0},
    {"acts_in", offsetof(struct be_ops, acts_in), 1},
    {"embedding_fwd", offsetof(struct be_ops, embedding_fwd), 0},
    {"embedding_bwd", offsetof(struct be_ops, embedding_bwd), 0},
    {"pos_embedding_fwd", offsetof(struct be_ops, pos_embedding_fwd), 0},
    {"pos_embedding_bwd", offsetof(struct be_ops, pos_embedding_bwd), 0},
    {"layernorm_fwd", offsetof(struct be_ops, layernorm_fwd), 0},
    {"layernorm_bwd", offsetof(struct be_ops, layernorm_bwd), 0},
    {"rmsnorm_fwd", offsetof(struct be_ops, rmsnorm_fwd), 0},
    {"rmsnorm_bwd", offsetof(struct be_ops, rmsnorm_bwd), 0},
    {"rope_fwd", offsetof(struct be_ops, rope_fwd), 0},
    {"rope_bwd", offsetof(struct be_ops, rope_bwd), 0},
    {"attention_fwd", offsetof(struct be_ops, attention_fwd), 0},
    {"attention_bwd", offsetof(struct be_ops, attention_bwd), 0},
    {"attention_block_fwd", offsetof(struct be_ops, attention_block_fwd), 0},
    {"attention_block_bwd", offsetof(struct be_ops, attention_block_bwd), 0},
    {"attention_merge", offsetof(struct be_ops, attention_merge), 0},
    {"attention_delta", offsetof(struct be_ops, attention_delta), 0},
    {"attention_kv_fwd", offsetof(struct be_ops, attention_kv_fwd), 0},
    {"act_fwd", offsetof(struct be_ops, act_fwd), 0},
    {"act_bwd", offsetof(struct be_ops, act_bwd), 0},
    {"bias_gelu_fwd", offsetof(struct be_ops, bias_gelu_fwd), 0},
    {"bias_gelu_bwd", offsetof(struct be_ops, bias_gelu_bwd), 0},
    {"moe_route_fwd", offsetof(struct be_ops, moe_route_fwd), 0},
    {"moe_route_bwd", offsetof(struct be_ops, moe_route_bwd), 0},
    {"moe_aux_loss", offsetof(struct be_ops, moe_aux_loss), 0},
    {"moe_z_loss", offsetof(struct be_ops, moe_z_loss), 0},
    {"moe_permute", offsetof(struct be_ops, moe_permute), 0},
    {"moe_permute_bwd", offsetof(struct be_ops, moe_permute_bwd), 0},
    {"moe_unpermute", offsetof(struct be_ops, moe_unpermute), 0},
    {"moe_unpermute_bwd", offsetof(struct be_ops, moe_unpermute_bwd), 0},
    {"add", offsetof(struct be_ops, add), 0},
    {"scale", offsetof(struct be_ops, scale), 0},
    {"bias_add", offsetof(struct be_ops, bias_add), 0},
    {"bias_bwd", offsetof(struct be_ops, bias_bwd), 0},
    {"bias_bwd_to", offsetof(struct be_ops, bias_bwd_to), 1},
    {"dropout_fwd", offsetof(struct be_ops, dropout_fwd), 0},
    {"dropout_bwd", offsetof(struct be_ops, dropout_bwd), 0},
    {"bias_dropout_add_fwd", offsetof(struct be_ops, bias_dropout_add_fwd), 0},
    {"ce_max", offsetof(struct be_ops, ce_max), 0},
    {"ce_sumexp", offsetof(struct be_ops, ce_sumexp), 0},
    {"ce_target", offsetof(struct be_ops, ce_target), 0},
    {"ce_fwd_fused", offsetof(struct be_ops, ce_fwd_fused), 1},
    {"ce_loss", offsetof(struct be_ops, ce_loss), 0},
    {"ce_bwd", offsetof(struct be_ops, ce_bwd), 0},
    {"ce_bwd_to", offsetof(struct be_ops, ce_bwd_to), 1},
    {"adamw", offsetof(struct be_ops, adamw), 0},
    {"adamw_many", offsetof(struct be_ops, adamw_many), 1},
    {"sumsq", offsetof(struct be_ops, sumsq), 0},
    {"sumsq_many", offsetof(struct be_ops, sumsq_many), 1},
    {"peak_gflops", offsetof(struct be_ops, peak_gflops), 0},
    {"copy_gbps", offsetof(struct be_ops, copy_gbps), 0},
    {"adamw_stream_gbps", offsetof(struct be_ops, adamw_stream_gbps), 0},
    {"describe", offsetof(struct be_ops, describe), 0},
    {"mem_peak", offsetof(struct be_ops, mem_peak), 1},
    {"mem_capacity", offsetof(struct be_ops, mem_capacity), 1},
    {"lib_workspace_bytes", offsetof(struct be_ops, lib_workspace_bytes), 1},
};
const int BE_OP_NENTRIES = (int)(sizeof BE_OP_ENTRIES / sizeof BE_OP_ENTRIES[0]);
/* An entry added to struct be_ops without its row here does not compile (every entry is a
 * function pointer after `name`). */
_Static_assert(sizeof(struct be_ops) ==
                   offsetof(struct be_ops, alloc) + sizeof BE_OP_ENTRIES / sizeof BE_OP_ENTRIES[0] * sizeof(void (*)(void)),
               "a member of struct be_ops has no row in BE_OP_ENTRIES (src/backend/backend.c)");

const char *be_ops_missing(const struct be_ops *ops)
{
    for (int i = 0; i < BE_OP_NENTRIES; i++) {
        void (*f)(void);
        memcpy(&f, (const char *)ops + BE_OP_ENTRIES[i].offset, sizeof f);
        if (!f && !BE_OP_ENTRIES[i].optional) return BE_OP_ENTRIES[i].name;
    }
    return NULL;
}

const char *be_op_name(be_op op)
{
    static const char *const names[BE_OP_COUNT] = {"GEMM",          "attention", "norm",      "activation",
                                                   "rope",          "bias/dropout/residual", "embedding",
                                                   "cross-entropy", "optimizer", "memory", "router"};
    return op >= 0 && op < BE_OP_COUNT ? names[op] : "?";
}

void be_crossentropy_fwd(const backend *be, float *losses, float *maxv, float *sumexp, float *tlogit,
                         const float *logits, const int32_t *targets, int BT, int V, int vocab)
{
    be_ce_max(be, maxv, be_f32(logits), BT, V, vocab);
    be_ce_sumexp(be, sumexp, be_f32(logits), maxv, BT, V, vocab);
    be_ce_target(be, tlogit, be_f32(logits), targets, BT, V, 0);
    be_ce_loss(be, losses, maxv, sumexp, tlogit, BT);
}
