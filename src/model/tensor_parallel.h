/* Tensor parallelism inside a layer (Megatron's mappings and layers). Owns the f and g maps
 * (f: forward identity, backward all-reduce; g: forward all-reduce, backward identity), the
 * column- and row-parallel linears built on them, and the vocab-parallel cross-entropy. Every
 * map returns at once when the tensor-parallel group is one rank. */
#ifndef TRIDENT_TENSOR_PARALLEL_H
#define TRIDENT_TENSOR_PARALLEL_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "trident/comm.h"

/* f, forward: identity (nothing to do; named so the call sites read like the paper). */
static inline void tp_copy_fwd(const comm *tp, float *x, size_t n)
{
    (void)tp;
    (void)x;
    (void)n;
}
/* Sequence parallelism (Korthikanti et al. 2022): outside the tensor-parallel regions a rank holds
 * positions [r s/t, (r + 1) s/t) of every sample, (B, s/t, C). f becomes an all-gather along the
 * sequence (backward: reduce-scatter) and g a reduce-scatter (backward: all-gather).
 * full (B, T, C) written = the group's local (B, T/t, C) parts in sequence order; tmp (B, T, C)
 * is scratch. */
void tp_sp_gather(const backend *be, const comm *tp, float *full, const float *local, float *tmp, int B, int T,
                  int C);
/* local (B, T/t, C) written = this rank's positions of the sum over the group of full (B, T, C);
 * tmp (B, T, C) is scratch. */
void tp_sp_scatter(const backend *be, const comm *tp, float *local, const float *full, float *tmp, int B, int T,
                   int C);

/* The maps below take a NULL group to mean "no reduction here": sequence parallelism reduces
 * with a reduce-scatter instead (the caller's). */
/* Every collective here is over backend memory, through xfer.h's rule (direct or staged). */
/* f, backward: dx (n) = sum over the group of dx. */
void tp_copy_bwd(const backend *be, const comm *tp, float *dx, size_t n);
/* g, forward: x (n) = sum over the group of x. */
void tp_reduce_fwd(const backend *be, const comm *tp, float *x, size_t n);
/* g, backward: identity. */
static inline void tp_reduce_bwd(const comm *tp, float *dx, size_t n)
{
    (void)tp;
    (void)dx;
    (void)n;
}

/* The inputs of the linear layers are be_in: fp32, or an activation kept in the GEMMs' dtype. */
/* Column-parallel linear: out (BT, OCl) written = f(inp) . W_l^T + b_l, where W_l (OCl, C) and
 * b_l (OCl) are this rank's rows of the full weight. */
void tp_column_linear_fwd(const backend *be, const comm *tp, float *out, be_in inp, const float *w, const float *b,
                          int BT, int C, int OCl);
/* As tp_column_linear_fwd, out typed: fp32, or the gemm dtype where be_acts_in (be_matmul_fwd_to). */
void tp_column_linear_fwd_to(const backend *be, const comm *tp, be_out out, be_in inp, const float *w, const float *b,
                             int BT, int C, int OCl);
/* dinp (BT, C) WRITTEN with the full input gradient (summed over the group); dw (OCl, C) and
 * db (OCl) accumulate. dinp must not alias anything else. */
void tp_column_linear_bwd(const backend *be, const comm *tp, float *dinp, float *dw, float *db,
                          const float *dout, be_in inp, const float *w, int BT, int C, int OCl);
/* As tp_column_linear_bwd, dout typed: fp32, or in the run's gemm dtype (be_matmul_bwd_lpout). */
void tp_column_linear_bwd_lp(const backend *be, const comm *tp, float *dinp, float *dw, float *db, be_in dout,
                             be_in inp, const float *w, int BT, int C, int OCl);
/* The LM head's backward with its vocab-parallel cross-entropy's: dlogits = the cross-entropy's
 * gradient (be_ce_head_bwd: in a 16-bit run never materialised in fp32; otherwise written over
 * logits), then tp_column_linear_bwd's dinp (written, all-reduced over tp) and dw (accumulated). */
void tp_column_linear_ce_bwd(const backend *be, const comm *tp, float *dinp, float *dw, be_out logits,
                             const float *maxv, const float *sumexp, const int32_t *targets, const float *dloss,
                             be_in inp, const float *w, int BT, int C, int Vloc, int Vreal, int vstart);
/* Row-parallel linear without its bias: out (BT, OC) written = g(inp_l . W_l^T), where inp_l
 * (BT, Cl) is this rank's slice of the input features and W_l (OC, Cl) its columns of the full
 * weight. The caller adds the (replicated) bias after the reduce. */
void tp_row_linear_fwd(const backend *be, const comm *tp, float *out, be_in inp, const float *w, int BT, int Cl,
                       int OC);
/* dinp (BT, Cl) accumulates dout . W_l; dw (OC, Cl) accumulates. */
void tp_row_linear_bwd(const backend *be, const comm *tp, float *dinp, float *dw, const float *dout,
                       be_in inp, const float *w, int BT, int Cl, int OC);

/* Vocab-parallel embedding lookup: out (BT, C) written = rows of the full table for ids, each
 * rank contributing the ids in its slice [vstart, vstart + Vloc) and the group summing (g). */
void tp_embedding_fwd(const backend *be, const comm *tp, float *out, const int32_t *ids, const float *wte_l,
                      int BT, int C, int vstart, int Vloc);

/* Vocab-parallel cross-entropy over logits_l (BT, Vloc) of slice [vstart, vstart + Vloc) of a
 * vocabulary with `vocab` real ids (the padding past them is masked out of the softmax: the
 * loss is over the real vocabulary in every layout): losses (BT) written; maxv, sumexp (BT)
 * written for the backward (be_ce_bwd with Vreal = be_vocab_real(vocab, vstart, Vloc)). Three
 * all-reduces (max, sum of exp, target logit); the full logits are never gathered. tlogit (BT)
 * is scratch. */
void tp_cross_entropy_fwd(const backend *be, const comm *tp, float *losses, float *maxv, float *sumexp,
                          float *tlogit, be_in logits_l, const int32_t *targets, int BT, int Vloc, int vstart,
                          int vocab);

#endif
