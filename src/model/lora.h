/* Private to src/model: LoRA (Hu et al. 2021; Hugging Face PEFT's LoraLayer) on a tensor-parallel
 * linear layer, the base weight W frozen: out = W x + scaling B (A dropout(x)), A (r, in),
 * B (out, r), scaling = lora_alpha / r (PEFT's; lora_alpha / sqrt(r) under rsLoRA: the caller's).
 * Split over the tensor-parallel group as the base is (PEFT's LoraParallelLinear on Megatron's
 * parallel linears, src/peft/tuners/lora/tp_layer.py): on a column-parallel linear (W split by
 * output rows) A is replicated and B split by output rows; on a row-parallel one (W split by
 * input columns) A is split by input columns and B replicated. The low-rank activation su = scaling (dropout(x) A^T) (BT, r) is
 * whole on every rank: the row-parallel forward sums it over the group, the column-parallel
 * backward sums its gradient. The dropout is the backend's (be_drop: the same masks in every
 * layout when the caller gives the global channel of the local column 0 and the positions).
 *
 * Where the caller sums the output (forward) or the input gradient (backward) over a group
 * after these calls (`later`: the all-reduce of a column-parallel backward, the reduce-scatter of
 * sequence parallelism), the whole LoRA term is added on that group's rank 0 only, so the sum
 * counts it once; later NULL: it is added on every rank. */
#ifndef TRIDENT_MODEL_LORA_H
#define TRIDENT_MODEL_LORA_H

#include "backend.h"
#include "trident/comm.h"

/* The shapes of one LoRA linear on this rank. */
typedef struct lora_dims {
    int B, T;      /* samples and positions of the input: BT = B T rows */
    int in, out;   /* this rank's input features and output features */
    int r;         /* rank */
    float scaling;
} lora_dims;

/* Column-parallel forward: xd (BT, in) written = dropout(x) (drop NULL: not written, x is used;
 * then xd may be NULL); su (BT, r) written = scaling xd A^T; out (BT, out) += su B_l^T on the
 * ranks `later` says; tmp (BT, out) scratch. A (r, in) whole, B_l (out, r) this rank's rows. */
void lora_column_fwd(const backend *be, const comm *later, float *out, float *su, float *xd, float *tmp,
                     const float *x, const float *A, const float *Bl, const be_drop *drop, const lora_dims *d);
/* Column-parallel backward from dy (BT, out) (this rank's columns of the output gradient): dA (r,
 * in) and dB_l (out, r) accumulate; dx (BT, in) accumulates the input gradient on the ranks
 * `later` says; du (BT, r) and tmp (BT, in) scratch. tp: the tensor-parallel group du is summed
 * over (NULL: one rank). xd as the forward left it (NULL without dropout: x). */
void lora_column_bwd(const backend *be, const comm *tp, const comm *later, float *dx, float *dA, float *dBl, float *du,
                     float *tmp, const float *dy, const float *x, const float *xd, const float *su, const float *A,
                     const float *Bl, const be_drop *drop, const lora_dims *d);
/* Row-parallel forward: x (BT, in) this rank's input columns; xd as for the column forward; su
 * (BT, r) written = scaling sum over tp of xd A_l^T; out (BT, out) += su B^T on the ranks `later`
 * says; tmp (BT, out) scratch. A_l (r, in) this rank's columns, B (out, r) whole. */
void lora_row_fwd(const backend *be, const comm *tp, const comm *later, float *out, float *su, float *xd, float *tmp,
                  const float *x, const float *Al, const float *B, const be_drop *drop, const lora_dims *d);
/* Row-parallel backward from dy (BT, out) (whole, the same on every rank): dA_l (r, in) and dB
 * (out, r) accumulate; dx (BT, in) accumulates this rank's columns of the input gradient; du (BT,
 * r) and tmp (BT, in) scratch. */
void lora_row_bwd(const backend *be, float *dx, float *dAl, float *dB, float *du, float *tmp, const float *dy,
                  const float *x, const float *xd, const float *su, const float *Al, const float *B,
                  const be_drop *drop, const lora_dims *d);

/* ---- a module of trident's fused projections (q|k|v, k|v, gate|up) ----
 * Hugging Face's separate modules are column ranges of one fused column-parallel output here: a
 * module's B (w, r) is widened into the fused rows [off, off + w) of a zeroed (ld, r) buffer so that
 * lora_column_fwd/bwd run on the whole fused output (the zero rows add exact zeros; the LoRA term is
 * about r/h of the base's GEMMs), and its gradient is read back from those rows. */
typedef struct lora_scratch {
    float *bw, *dbw; /* (ld, r): the widened B and its gradient */
    float *tmp;      /* (BT, max(ld, in)) */
    float *xd;       /* (BT, in): the dropped input (with dropout) */
    float *du;       /* (BT, r) */
    float *xf;       /* (BT, in): a low-precision input widened to fp32 (--bf16, --fp16) */
} lora_scratch;
enum { LORA_SCRATCH_FIELDS = 6 };
/* Carving sizes (floats) of a lora_scratch for rows BT, the widest fused output ld, the widest
 * input in, rank r. */
static inline size_t lora_scratch_floats(int64_t BT, int64_t ld, int64_t in, int r, int field)
{
    int64_t w = ld > in ? ld : in;
    const int64_t n[LORA_SCRATCH_FIELDS] = {ld * r, ld * r, BT * w, BT * in, BT * r, BT * in};
    return (size_t)n[field];
}
/* The adapter's input x (n elements) as fp32: x itself, or widened into xf (a kept input in the
 * GEMMs' dtype: the adapter reads the values the base's GEMM reads). */
const float *lora_input(const backend *be, float *xf, be_in x, size_t n);
/* out (BT, ld) columns [off, off + w) += scaling B (A dropout(x)); su (BT, r) written (keep it for
 * the backward). A (r, in) whole, B (w, r) this rank's rows. d->out is ignored (ld is used). */
void lora_fused_fwd(const backend *be, float *out, float *su, const lora_scratch *s, const float *x, const float *A,
                    const float *B, int off, int w, int ld, const be_drop *drop, const lora_dims *d);
/* Its backward from dy (BT, ld): dA (r, in) and dB (w, r) accumulate; dx (BT, in) accumulates the
 * whole input gradient (du summed over tp) on the ranks `later` says (as lora_column_bwd). */
void lora_fused_bwd(const backend *be, const comm *tp, const comm *later, float *dx, float *dA, float *dB,
                    const lora_scratch *s,
                    const float *dy, const float *x, const float *su, const float *A, const float *B, int off, int w,
                    int ld, const be_drop *drop, const lora_dims *d);

#endif
