/* Tensor parallelism: see include/trident/tensor_parallel.h. */
#include "trident/tensor_parallel.h"

void tp_copy_bwd(const comm *tp, float *dx, size_t n) { comm_allreduce(tp, dx, n, COMM_F32, COMM_SUM); }

void tp_reduce_fwd(const comm *tp, float *x, size_t n) { comm_allreduce(tp, x, n, COMM_F32, COMM_SUM); }

void tp_column_linear_fwd(const backend *be, const comm *tp, float *out, const float *inp, const float *w,
                          const float *b, int BT, int C, int OCl)
{
    tp_copy_fwd(tp, (float *)inp, (size_t)BT * C);
    be_matmul_fwd(be, out, inp, w, b, BT, C, OCl);
}

void tp_column_linear_bwd(const backend *be, const comm *tp, float *dinp, float *dw, float *db,
                          const float *dout, const float *inp, const float *w, int BT, int C, int OCl)
{
    be_zero(be, dinp, (size_t)BT * C);
    be_matmul_bwd(be, dinp, dw, db, dout, inp, w, BT, C, OCl);
    tp_copy_bwd(tp, dinp, (size_t)BT * C);
}

void tp_row_linear_fwd(const backend *be, const comm *tp, float *out, const float *inp, const float *w, int BT,
                       int Cl, int OC)
{
    be_matmul_fwd(be, out, inp, w, NULL, BT, Cl, OC);
    tp_reduce_fwd(tp, out, (size_t)BT * OC);
}

void tp_row_linear_bwd(const backend *be, const comm *tp, float *dinp, float *dw, const float *dout,
                       const float *inp, const float *w, int BT, int Cl, int OC)
{
    tp_reduce_bwd(tp, (float *)dout, (size_t)BT * OC);
    be_matmul_bwd(be, dinp, dw, NULL, dout, inp, w, BT, Cl, OC);
}

void tp_embedding_fwd(const backend *be, const comm *tp, float *out, const int32_t *ids, const float *wte_l,
                      int BT, int C, int vstart, int Vloc)
{
    be_embedding_fwd(be, out, ids, wte_l, BT, C, vstart, Vloc);
    tp_reduce_fwd(tp, out, (size_t)BT * C);
}

void tp_cross_entropy_fwd(const backend *be, const comm *tp, float *losses, float *maxv, float *sumexp,
                          float *tlogit, const float *logits_l, const int32_t *targets, int BT, int Vloc,
                          int vstart, int vocab)
{
    int Vreal = be_vocab_real(vocab, vstart, Vloc);
    be_ce_max(be, maxv, logits_l, BT, Vloc, Vreal);
    comm_allreduce(tp, maxv, (size_t)BT, COMM_F32, COMM_MAX);
    be_ce_sumexp(be, sumexp, logits_l, maxv, BT, Vloc, Vreal);
    comm_allreduce(tp, sumexp, (size_t)BT, COMM_F32, COMM_SUM);
    be_ce_target(be, tlogit, logits_l, targets, BT, Vloc, vstart);
    comm_allreduce(tp, tlogit, (size_t)BT, COMM_F32, COMM_SUM);
    be_ce_loss(be, losses, maxv, sumexp, tlogit, BT);
}
