/* LoRA on the tensor-parallel linears: see src/model/lora.h. */
#include "lora.h"

#include "tensor_parallel.h"

/* Whether this rank adds a whole term the caller then sums over `later`. */
static int adds_here(const comm *later) { return !later || comm_rank(later) == 0; }

/* The input the adapter reads: dropout(x) into xd, or x itself. */
static const float *dropped(const backend *be, float *xd, const float *x, const be_drop *drop, const lora_dims *d)
{
    if (!drop || drop->p == 0.0f) return x;
    be_dropout_fwd(be, xd, x, d->B, d->T, d->in, drop);
    return xd;
}

/* out (BT, nout) += su (BT, r) W^T for W (nout, r), through tmp. */
static void add_up(const backend *be, float *out, float *tmp, const float *su, const float *w, int BT, int r,
                   int nout)
{
    be_matmul_fwd(be, tmp, su, w, NULL, BT, r, nout);
    be_add(be, out, out, tmp, (size_t)BT * nout);
}

/* The down path's backward, from du (BT, r): dA (r, in) += du^T xin; dx (BT, in) += dropout
 * backward of du A, through tmp (when add_dx). */
static void down_bwd(const backend *be, float *dx, float *dA, float *tmp, const float *du, const float *xin,
                     const float *A, const be_drop *drop, const lora_dims *d, int add_dx)
{
    int BT = d->B * d->T;
    be_matmul_bwd(be, NULL, dA, NULL, du, xin, A, BT, d->in, d->r);
    if (!add_dx) return;
    be_zero(be, tmp, (size_t)BT * d->in);
    be_matmul_bwd(be, tmp, NULL, NULL, du, xin, A, BT, d->in, d->r);
    if (drop && drop->p != 0.0f) be_dropout_bwd(be, tmp, tmp, d->B, d->T, d->in, drop);
    be_add(be, dx, dx, tmp, (size_t)BT * d->in);
}

void lora_column_fwd(const backend *be, const comm *later, float *out, float *su, float *xd, float *tmp,
                     const float *x, const float *A, const float *Bl, const be_drop *drop, const lora_dims *d)
{
    int BT = d->B * d->T;
    be_matmul_fwd(be, su, dropped(be, xd, x, drop, d), A, NULL, BT, d->in, d->r);
    be_scale(be, su, d->scaling, (size_t)BT * d->r);
    if (adds_here(later)) add_up(be, out, tmp, su, Bl, BT, d->r, d->out);
}

void lora_column_bwd(const backend *be, const comm *tp, const comm *later, float *dx, float *dA, float *dBl, float *du,
                     float *tmp, const float *dy, const float *x, const float *xd, const float *su, const float *A,
                     const float *Bl, const be_drop *drop, const lora_dims *d)
{
    int BT = d->B * d->T;
    const float *xin = drop && drop->p != 0.0f ? xd : x;
    /* dB_l += dy^T su; du = scaling dy B_l, a part of the whole, summed over the group */
    be_matmul_bwd(be, NULL, dBl, NULL, dy, su, Bl, BT, d->r, d->out);
    be_zero(be, du, (size_t)BT * d->r);
    be_matmul_bwd(be, du, NULL, NULL, dy, su, Bl, BT, d->r, d->out);
    be_scale(be, du, d->scaling, (size_t)BT * d->r);
    tp_copy_bwd(be, tp, du, (size_t)BT * d->r);
    down_bwd(be, dx, dA, tmp, du, xin, A, drop, d, adds_here(later));
}

void lora_row_fwd(const backend *be, const comm *tp, const comm *later, float *out, float *su, float *xd, float *tmp,
                  const float *x, const float *Al, const float *B, const be_drop *drop, const lora_dims *d)
{
    int BT = d->B * d->T;
    be_matmul_fwd(be, su, dropped(be, xd, x, drop, d), Al, NULL, BT, d->in, d->r);
    be_scale(be, su, d->scaling, (size_t)BT * d->r);
    tp_reduce_fwd(be, tp, su, (size_t)BT * d->r);
    if (adds_here(later)) add_up(be, out, tmp, su, B, BT, d->r, d->out);
}

void lora_row_bwd(const backend *be, float *dx, float *dAl, float *dB, float *du, float *tmp, const float *dy,
                  const float *x, const float *xd, const float *su, const float *Al, const float *B,
                  const be_drop *drop, const lora_dims *d)
{
    int BT = d->B * d->T;
    const float *xin = drop && drop->p != 0.0f ? xd : x;
    be_matmul_bwd(be, NULL, dB, NULL, dy, su, B, BT, d->r, d->out);
    be_zero(be, du, (size_t)BT * d->r);
    be_matmul_bwd(be, du, NULL, NULL, dy, su, B, BT, d->r, d->out);
    be_scale(be, du, d->scaling, (size_t)BT * d->r);
    down_bwd(be, dx, dAl, tmp, du, xin, Al, drop, d, 1);
}

const float *lora_input(const backend *be, float *xf, be_in x, size_t n)
{
    if (x.dt == BE_F32) return x.p;
    be_convert(be, xf, BE_F32, x.p, x.dt, n);
    return xf;
}

/* B (w, r) into rows [off, off + w) of the zeroed (ld, r) bw. */
static void widen(const backend *be, float *bw, const float *B, int off, int w, int ld, int r)
{
    be_zero(be, bw, (size_t)ld * r);
    be_memcpy(be, bw + (size_t)off * r, B, (size_t)w * r * sizeof(float), BE_D2D);
}

void lora_fused_fwd(const backend *be, float *out, float *su, const lora_scratch *s, const float *x, const float *A,
                    const float *B, int off, int w, int ld, const be_drop *drop, const lora_dims *d)
{
    lora_dims dd = *d;
    dd.out = ld;
    widen(be, s->bw, B, off, w, ld, d->r);
    lora_column_fwd(be, NULL, out, su, s->xd, s->tmp, x, A, s->bw, drop, &dd);
}

void lora_fused_bwd(const backend *be, const comm *tp, const comm *later, float *dx, float *dA, float *dB,
                    const lora_scratch *s,
                    const float *dy, const float *x, const float *su, const float *A, const float *B, int off, int w,
                    int ld, const be_drop *drop, const lora_dims *d)
{
    lora_dims dd = *d;
    dd.out = ld;
    widen(be, s->bw, B, off, w, ld, d->r);
    be_zero(be, s->dbw, (size_t)ld * d->r);
    if (drop && drop->p != 0.0f) be_dropout_fwd(be, s->xd, x, d->B, d->T, d->in, drop); /* the forward's mask again */
    lora_column_bwd(be, tp, later, dx, dA, s->dbw, s->du, s->tmp, dy, x, s->xd, su, A, s->bw, drop, &dd);
    be_add(be, dB, dB, s->dbw + (size_t)off * d->r, (size_t)w * d->r);
}
