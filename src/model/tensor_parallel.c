/* Tensor parallelism: see src/model/tensor_parallel.h. */
#include "tensor_parallel.h"

void tp_copy_bwd(const backend *be, const comm *tp, float *dx, size_t n)
{
    if (tp) xfer_allreduce(be, tp, dx, n, COMM_F32, COMM_SUM);
}

void tp_reduce_fwd(const backend *be, const comm *tp, float *x, size_t n)
{
    if (tp) xfer_allreduce(be, tp, x, n, COMM_F32, COMM_SUM);
}

/* Rank-major (t, B, T/t, C) <-> sample-major (B, T, C): chunk r of sample b is positions
 * [r T/t, (r + 1) T/t) of it. */
static void sp_permute(const backend *be, float *dst, const float *src, int t, int B, int T, int C, int to_samples)
{
    size_t part = (size_t)(T / t) * C;
    for (int r = 0; r < t; r++)
        for (int b = 0; b < B; b++) {
            float *rank_major = (float *)(to_samples ? src : dst) + ((size_t)r * B + b) * part;
            float *sample_major = (float *)(to_samples ? dst : src) + (size_t)b * T * C + (size_t)r * part;
            if (to_samples) be_copy(be, sample_major, rank_major, part);
            else be_copy(be, rank_major, sample_major, part);
        }
}

void tp_sp_gather(const backend *be, const comm *tp, float *full, const float *local, float *tmp, int B, int T,
                  int C)
{
    int t = comm_size(tp);
    size_t n = (size_t)B * (T / t) * C;
    if (t == 1) {
        if (full != local) be_copy(be, full, local, n);
        return;
    }
    xfer_allgather(be, tp, local, tmp, n, COMM_F32);
    sp_permute(be, full, tmp, t, B, T, C, 1);
}

void tp_sp_scatter(const backend *be, const comm *tp, float *local, const float *full, float *tmp, int B, int T,
                   int C)
{
    int t = comm_size(tp);
    size_t n = (size_t)B * (T / t) * C;
    if (t == 1) {
        if (full != local) be_copy(be, local, full, n);
        return;
    }
    sp_permute(be, tmp, full, t, B, T, C, 0);
    xfer_reduce_scatter(be, tp, tmp, local, n, COMM_F32, COMM_SUM);
}

void tp_column_linear_fwd(const backend *be, const comm *tp, float *out, be_in inp, const float *w, const float *b,
                          int BT, int C, int OCl)
{
    tp_column_linear_fwd_to(be, tp, be_f32_out(out), inp, w, b, BT, C, OCl);
}

void tp_column_linear_fwd_to(const backend *be, const comm *tp, be_out out, be_in inp, const float *w, const float *b,
                             int BT, int C, int OCl)
{
    tp_copy_fwd(tp, (float *)inp.p, (size_t)BT * C); /* the identity (f) */
    be_matmul_fwd_to(be, out, inp, w, b, BT, C, OCl);
}

void tp_column_linear_bwd(const backend *be, const comm *tp, float *dinp, float *dw, float *db,
                          const float *dout, be_in inp, const float *w, int BT, int C, int OCl)
{
    tp_column_linear_bwd_lp(be, tp, dinp, dw, db, be_f32(dout), inp, w, BT, C, OCl);
}

void tp_column_linear_bwd_lp(const backend *be, const comm *tp, float *dinp, float *dw, float *db, be_in dout,
                             be_in inp, const float *w, int BT, int C, int OCl)
{
    be_zero(be, dinp, (size_t)BT * C);
    be_matmul_bwd_lpout(be, dinp, dw, db, dout, inp, w, BT, C, OCl);
    tp_copy_bwd(be, tp, dinp, (size_t)BT * C);
}

void tp_column_linear_ce_bwd(const backend *be, const comm *tp, float *dinp, float *dw, be_out logits,
                             const float *maxv, const float *sumexp, const int32_t *targets, const float *dloss,
                             be_in inp, const float *w, int BT, int C, int Vloc, int Vreal, int vstart)
{
    be_zero(be, dinp, (size_t)BT * C);
    be_ce_head_bwd(be, dinp, dw, logits, maxv, sumexp, targets, dloss, inp, w, BT, C, Vloc, Vreal, vstart);
    tp_copy_bwd(be, tp, dinp, (size_t)BT * C);
}

void tp_row_linear_fwd(const backend *be, const comm *tp, float *out, be_in inp, const float *w, int BT, int Cl,
                       int OC)
{
    be_matmul_fwd_in(be, out, inp, w, NULL, BT, Cl, OC);
    tp_reduce_fwd(be, tp, out, (size_t)BT * OC);
}

void tp_row_linear_bwd(const backend *be, const comm *tp, float *dinp, float *dw, const float *dout,
                       be_in inp, const float *w, int BT, int Cl, int OC)
{
    tp_reduce_bwd(tp, (float *)dout, (size_t)BT * OC);
    be_matmul_bwd_in(be, dinp, dw, NULL, dout, inp, w, BT, Cl, OC);
}

void tp_embedding_fwd(const backend *be, const comm *tp, float *out, const int32_t *ids, const float *wte_l,
                      int BT, int C, int vstart, int Vloc)
{
    be_embedding_fwd(be, out, ids, wte_l, BT, C, vstart, Vloc);
    tp_reduce_fwd(be, tp, out, (size_t)BT * C);
}

void tp_cross_entropy_fwd(const backend *be, const comm *tp, float *losses, float *maxv, float *sumexp,
                          float *tlogit, be_in logits_l, const int32_t *targets, int BT, int Vloc, int vstart,
                          int vocab)
{
    int Vreal = be_vocab_real(vocab, vstart, Vloc);
    /* the vocabulary not split: one pass where the backend has it */
    if (comm_size(tp) == 1 && be_ce_fwd_fused(be, losses, maxv, sumexp, tlogit, logits_l, targets, BT, Vloc, Vreal))
        return;
    be_ce_max(be, maxv, logits_l, BT, Vloc, Vreal);
    xfer_allreduce(be, tp, maxv, (size_t)BT, COMM_F32, COMM_MAX);
    be_ce_sumexp(be, sumexp, logits_l, maxv, BT, Vloc, Vreal);
    xfer_allreduce(be, tp, sumexp, (size_t)BT, COMM_F32, COMM_SUM);
    be_ce_target(be, tlogit, logits_l, targets, BT, Vloc, vstart);
    xfer_allreduce(be, tp, tlogit, (size_t)BT, COMM_F32, COMM_SUM);
    be_ce_loss(be, losses, maxv, sumexp, tlogit, BT);
}
