/* Compute backends. Owns every floating-point kernel the model runs (GEMMs, norms, attention,
 * activations, dropout, cross-entropy, the optimizer step), behind one vtable so the model and
 * parallel code never include BLAS, OpenMP or CUDA headers. Implementations: cpu/ (OpenBLAS
 * sgemm + OpenMP); registry.c names them (be_create); docs/backend.md is the contract entry by
 * entry and what a device backend implements each with.
 *
 * Conventions (llm.c style, Megatron TP-aware):
 *  - outputs first, then inputs, then sizes;
 *  - every size is the TP-LOCAL size (heads n/t, FFN 4h/t, vocab V/t), so the same kernels
 *    serve tensor parallelism; weights are (out, in) row-major: out = inp . W^T + b;
 *  - backward ACCUMULATES (+=) into every gradient it is given, parameter and input alike,
 *    unless its contract says "writes"; a NULL gradient pointer skips that gradient;
 *  - buffers do not alias unless the contract says so;
 *  - activations (and their gradients) travel as typed buffers (be_in to read, be_out to write:
 *    a pointer and its dtype); weights, their gradients, optimizer state and per-row
 *    statistics (mean, rstd, lse, maxv, ...) are fp32 `float *`. A backend checks the dtypes it
 *    is given and dies naming the entry on one it does not compute in (cpu: fp32 only, but the
 *    low-precision GEMMs).
 *
 * The queue. A backend has ONE ordered queue (cpu: none, every call runs to completion before it
 * returns; CUDA: one stream, be->queue). Every vtable entry is enqueued on it in call order and
 * runs after everything enqueued before it, so the model needs no synchronisation between
 * kernels. Memory:
 *  - every pointer an entry takes is DEVICE memory of this backend (from alloc; cpu: host
 *    memory), including the integer arrays: token ids, targets, attention's klen and a dropout's
 *    sample indices. Only the scalars of the call itself (sizes, eps, a be_drop's p, seed, site,
 *    pos0, unit0) are host values, read when the call is made;
 *  - host code reads or writes device memory only through copy_bytes: an H2D copy returns once
 *    the host source may be reused (synchronous for the host buffer), a D2H copy returns once
 *    everything enqueued before it has run and the host destination holds the bytes
 *    (synchronous); D2D copies and set_bytes are enqueued like kernels. Code that dereferences a
 *    device pointer on the host is correct on cpu only;
 *  - an entry that returns a value read from device memory (sumsq) waits for the queue first;
 *  - sync returns when everything enqueued so far has run: after it the host may time, free or
 *    reuse any buffer. free is ordered after the work queued before it.
 * Timing goes through events (event_record, event_elapsed): a point in the queue, so the time
 * between two is the device's, not the host's enqueueing time. */
#ifndef TRIDENT_BACKEND_H
#define TRIDENT_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "trident/activation.h"
#include "trident/check.h"
#include "trident/comm.h"
#include "trident/philox.h"
#include "trident/timer.h"

typedef struct backend backend;

typedef enum { BE_H2D, BE_D2H, BE_D2D } be_copy_kind;

/* Element types of backend buffers: typed buffers (below) carry one, `float *` arguments are
 * fp32. The cpu kernels compute in fp32 but the low-precision GEMMs and the conversions. bf16
 * is the top half of an IEEE float (8-bit exponent, 7-bit mantissa); fp16 is IEEE binary16
 * (5-bit exponent, 10-bit mantissa, largest finite 65504). Both are stored as uint16_t. */
typedef enum { BE_F32 = 0, BE_BF16 = 1, BE_F16 = 2 } be_dtype;
static inline size_t be_dtype_size(be_dtype t) { return t == BE_F32 ? 4 : 2; }
static inline const char *be_dtype_name(be_dtype t) { return t == BE_BF16 ? "bf16" : t == BE_F16 ? "fp16" : "fp32"; }

/* Typed buffers: an activation (or its gradient) as the kernels receive it, device memory and
 * the dtype of its elements. be_in is read, be_out written or accumulated. A NULL p (an optional
 * output left out) may carry any dtype. */
typedef struct be_in {
    const void *p;
    be_dtype dt;
} be_in;
typedef struct be_out {
    void *p;
    be_dtype dt;
} be_out;
static inline be_in be_f32(const float *p)
{
    be_in x = {p, BE_F32};
    return x;
}
static inline be_out be_f32_out(float *p)
{
    be_out x = {p, BE_F32};
    return x;
}

/* A point in the backend's queue (event_record): cpu stamps the wall clock when the call is made
 * (everything before it has run); a device backend records a device event (h) on its queue. An
 * event is read once, by event_elapsed, which releases what it holds. */
typedef struct be_event {
    double t; /* cpu: td_now() at the record */
    void *h;  /* device backends: their event handle; cpu: NULL */
} be_event;

/* Where a dropout mask lives in the logical model: the mask of an element is a pure function of
 * (seed, sample, site, position, unit) — never of rank or layout — and is regenerated, not
 * stored. p == 0 (or a NULL be_drop) is exactly the identity. The struct itself is host memory
 * read at the call (its scalars are kernel arguments); `sample` points into device memory. */
typedef struct be_drop {
    float p;               /* drop probability in [0, 1); kept values are scaled by 1/(1-p) */
    uint64_t seed;         /* the run's seed */
    const int64_t *sample; /* (B) device array: global sample index (dataset order) of batch row b */
    int site;              /* dropout site id, unique per dropout call site of the model
                            * (e.g. 3*layer + {0 attn, 1 after proj, 2 after fc2}; 0..65535) */
    int pos0;              /* position of row t = 0 (nonzero for a sequence-parallel slice) */
    int unit0;             /* hidden dropout: global channel of column 0;
                            * attention dropout: global index of local head 0 */
} be_drop;

/* The vtable. Every entry takes the backend first (threads, queue) and is enqueued on its queue
 * in call order (see the top of this file). Shapes in comments; N = rows, BT = B*T. See the
 * contracts on each entry. */
struct be_ops {
    const char *name;

    /* ---- memory (device memory of the backend; host for cpu) ---- */
    /* Returns `bytes` of uninitialised memory, 64-byte aligned; dies if short. */
    void *(*alloc)(const backend *be, size_t bytes);
    void (*free)(const backend *be, void *p); /* NULL is a no-op */
    /* dst = src, `bytes` bytes. BE_H2D (src host, dst device) returns when src may be reused;
     * BE_D2H (src device, dst host) returns when dst holds the bytes, after all queued work;
     * BE_D2D (both device) is enqueued. Overlap only when dst == src. */
    void (*copy_bytes)(const backend *be, void *dst, const void *src, size_t bytes, be_copy_kind kind);
    /* p (device, `bytes` bytes) = byte, enqueued. */
    void (*set_bytes)(const backend *be, void *p, int byte, size_t bytes);
    /* Returns when everything enqueued so far has run. cpu: nothing queues, a no-op. */
    void (*sync)(const backend *be);
    /* *ev = a point in the queue after everything enqueued so far (cpu: the wall clock now). */
    void (*event_record)(const backend *be, be_event *ev);
    /* Seconds between two recorded events, start recorded first; waits until `end` has passed.
     * Releases both events (each is read once). */
    double (*event_elapsed)(const backend *be, be_event *start, be_event *end);
    /* Frees the backend's own state (its queue, library handles), after waiting for the queue;
     * be_free calls it, then frees the struct. cpu: nothing to free. */
    void (*destroy)(backend *be);

    /* ---- matmul: out = inp . W^T + b ---- */
    /* out (BT, OC) written; inp (BT, C); w (OC, C); b (OC) or NULL. */
    void (*matmul_fwd)(const backend *be, be_out out, be_in inp, const float *w, const float *b, int BT, int C,
                       int OC);
    /* dinp (BT, C) += dout . W; dw (OC, C) += dout^T . inp; db (OC) += column sums of dout.
     * Any of dinp, dw, db may be NULL. dout (BT, OC). */
    void (*matmul_bwd)(const backend *be, be_out dinp, float *dw, float *db, be_in dout, be_in inp, const float *w,
                       int BT, int C, int OC);

    /* ---- grouped matmul: a mixture of experts' experts in one call (--moe-grouped-gemm) ----
     * G groups of counts[g] consecutive rows: out_g (n_g, OC) written = inp_g (n_g, C) . W_g^T + b_g,
     * W_g = w + g OC C, b_g = b + g OC (b NULL: none); and its backward, dinp_g, dW_g, db_g
     * accumulated (any NULL). fp32. NULL: be_matmul_grouped_* runs matmul_fwd/bwd group by group. */
    void (*matmul_grouped_fwd)(const backend *be, float *out, const float *inp, const float *w, const float *b,
                               const int32_t *counts, int G, int C, int OC);
    void (*matmul_grouped_bwd)(const backend *be, float *dinp, float *dw, float *db, const float *dout,
                               const float *inp, const float *w, const int32_t *counts, int G, int C, int OC);

    /* ---- dtypes ---- */
    /* dst (n, dtype dt) written = src (n, dtype st) converted: to bf16 and fp16 rounded to nearest
     * even, NaN kept NaN, beyond fp16's range +-Inf; widening is exact. dst == src only when the
     * types are equal. */
    void (*convert)(const backend *be, void *dst, be_dtype dt, const void *src, be_dtype st, size_t n);
    /* The low-precision linear layer: as matmul_fwd and matmul_bwd, with inp, w and dout in dtype
     * dt (BE_BF16 or BE_F16: inp.dt and dout.dt are dt) and every product accumulated in fp32
     * into fp32 outputs (out written, b fp32 or NULL; dinp and dw accumulated, either may be
     * NULL). The bias gradient is not here: it is a column sum of the fp32 dout (bias_bwd). */
    void (*matmul_fwd_lp)(const backend *be, be_out out, be_in inp, const void *w, const float *b, be_dtype dt,
                          int BT, int C, int OC);
    void (*matmul_bwd_lp)(const backend *be, be_out dinp, float *dw, be_in dout, be_in inp, const void *w,
                          be_dtype dt, int BT, int C, int OC);
    /* 1 if GEMMs in dt run on the device's own instructions for it (cpu: bf16 with AVX512-BF16),
     * 0 if they are widened to fp32 (same results, fp32 speed). */
    int (*lp_native)(const backend *be, be_dtype dt);

    /* ---- embeddings (vocab-parallel word table, replicated positions) ---- */
    /* out (BT, C) written: row i = wte[ids[i] - vstart] if vstart <= ids[i] < vstart + Vloc, else
     * zeros. wte (Vloc, C) is the local slice of the word table. ids (BT) are device ints. */
    void (*embedding_fwd)(const backend *be, be_out out, const int32_t *ids, const float *wte, int BT, int C,
                          int vstart, int Vloc);
    /* dwte (Vloc, C) += dout rows for the ids in this slice (others ignored). Deterministic. */
    void (*embedding_bwd)(const backend *be, float *dwte, be_in dout, const int32_t *ids, int BT, int C,
                          int vstart, int Vloc);
    /* out (B, T, C) += wpe[pos0 + t] for each row (b, t). wpe (>= pos0 + T, C). */
    void (*pos_embedding_fwd)(const backend *be, be_out out, const float *wpe, int B, int T, int C, int pos0);
    /* dwpe[pos0 + t] += sum over b of dout[b, t]. dout (B, T, C). Deterministic. */
    void (*pos_embedding_bwd)(const backend *be, float *dwpe, be_in dout, int B, int T, int C, int pos0);

    /* ---- layernorm ---- */
    /* out (N, C) written = (inp - mean) * rstd * w + b, rstd = 1 / sqrt(var + eps) (biased
     * variance, as torch.nn.LayerNorm); mean (N), rstd (N) written (either may be NULL when no
     * backward follows). inp (N, C); w, b (C). */
    void (*layernorm_fwd)(const backend *be, be_out out, float *mean, float *rstd, be_in inp, const float *w,
                          const float *b, int N, int C, float eps);
    /* dinp (N, C) +=; dw (C) +=; db (C) += (any may be NULL). dout, inp (N, C); mean, rstd (N)
     * from the forward. Deterministic (no dependence on thread count). */
    void (*layernorm_bwd)(const backend *be, be_out dinp, float *dw, float *db, be_in dout, be_in inp,
                          const float *w, const float *mean, const float *rstd, int N, int C);

    /* ---- RMSNorm (Llama; Megatron --normalization RMSNorm) ---- */
    /* out (N, C) written = inp * rstd * w, rstd = 1 / sqrt(mean(inp^2) + eps); rstd (N) written
     * (may be NULL when no backward follows). inp (N, C); w (C). */
    void (*rmsnorm_fwd)(const backend *be, be_out out, float *rstd, be_in inp, const float *w, int N, int C,
                        float eps);
    /* dinp (N, C) +=; dw (C) += (either may be NULL). dout, inp (N, C); w (C); rstd (N) from the
     * forward. Deterministic (no dependence on thread count). */
    void (*rmsnorm_bwd)(const backend *be, be_out dinp, float *dw, be_in dout, be_in inp, const float *w,
                        const float *rstd, int N, int C);

    /* ---- rotary position embedding, "rotate half" (Hugging Face Llama, Megatron non-interleaved) ----
     * x: rows (B, T) of ld floats, each holding nh heads of hs floats from the start pointer (a q
     * or k slice of a fused qkv row, say). In each head the first rot dims (rot even, <= hs;
     * rot = hs * --rotary-percent) turn by angle a_i = (pos0 + t) * inv_freq_i, r2 = rot / 2,
     * inv_freq_i = 1 / base^(2i / rot), i < r2:
     *   y[i] = x[i] cos a_i - x[i + r2] sin a_i,   y[i + r2] = x[i + r2] cos a_i + x[i] sin a_i;
     * dims rot.. hs-1 are unchanged. The angles are rounded as Hugging Face's float32
     * computation rounds them (inv_freq and the product (pos0 + t) * inv_freq in float32; cos
     * and sin of that float32 angle correctly rounded), so positions far from 0 turn as they do
     * in a checkpoint's original framework. */
    /* x rotated in place (written). */
    void (*rope_fwd)(const backend *be, be_out x, int B, int T, int ld, int nh, int hs, int rot, float base,
                     int pos0);
    /* dx rotated back in place: WRITES dx = R^T dx (the rotation by -a_i; not +=). */
    void (*rope_bwd)(const backend *be, be_out dx, int B, int T, int ld, int nh, int hs, int rot, float base,
                     int pos0);

    /* ---- self-attention core, grouped-query: NH local query heads, NKV local key/value
     * heads (NH % NKV == 0; NKV = NH is multi-head attention), head size HS, C = NH * HS ---- */
    /* q: rows (B, T) of stride ldq, each holding the NH query heads, head h at columns h*HS..;
     * k, v: rows (B, T) of stride ldkv, each holding NKV heads. Query head h attends with
     * key/value head h / (NH / NKV). A fused GPT-2 qkv (B, T, 3C) with rows [q | k | v] is
     * q = qkv, k = qkv + C, v = qkv + 2C, ldq = ldkv = 3C.
     * out (B, T, C) written: head h at columns h*HS... att = softmax(q k^T / sqrt(HS)) over keys
     * [0, t] of query t (causal: klen NULL), or over keys [0, klen[b]) for every query of sample b
     * (bidirectional with a padding mask: klen (B) device ints in [1, T]), then dropout (drop,
     * unit = (drop->unit0 + h) * T + key position; NULL or p = 0: none),
     * out = att . v. lse (B, NH, T) written: the log-sum-exp of each score row, which is all the
     * backward needs (it recomputes the probabilities; no (T, T) buffer is kept). Caller
     * buffers: out B*T*C floats, lse B*NH*T floats; cpu scratch is per thread and reused
     * (64*T floats forward, 3x that backward). */
    void (*attention_fwd)(const backend *be, be_out out, float *lse, be_in q, be_in k, be_in v, int ldq, int ldkv,
                          int B, int T, int NH, int NKV, int HS, const int32_t *klen, const be_drop *drop);
    /* dq (rows of stride ldq) +=, dk, dv (rows of stride ldkv) += the gradients w.r.t. q, k, v
     * (any may be NULL; the other columns of their rows are untouched); dk and dv of a key/value
     * head receive the sum over the query heads that share it, in a fixed order (deterministic).
     * dout (B, T, C); q, k, v, lse, strides, klen, drop as in the forward. dq, dk, dv may be
     * parts of one fused buffer (disjoint columns). */
    void (*attention_bwd)(const backend *be, be_out dq, be_out dk, be_out dv, be_in dout, be_in q, be_in k, be_in v,
                          const float *lse, int ldq, int ldkv, int B, int T, int NH, int NKV, int HS,
                          const int32_t *klen, const be_drop *drop);

    /* ---- attention over a key/value cache (generation; no dropout, no backward) ----
     * q: rows (B, n) of stride ldq, the queries of positions pos0 .. pos0 + n - 1 (NH heads of HS,
     * rotated); kc, vc: (B, cap, NKV * HS) caches holding the keys and values of positions
     * 0 .. pos0 + n - 1 (the new ones already appended). out (B, n, NH * HS) written: query i of
     * head h attends to keys 0 .. pos0 + i of head h / (NH / NKV), softmax(q k^T / sqrt(HS)) v. */
    void (*attention_kv_fwd)(const backend *be, be_out out, be_in q, be_in kc, be_in vc, int ldq, int B, int n,
                             int pos0, int cap, int NH, int NKV, int HS);

    /* ---- The MLP's activation: a function of td_act (trident/activation.h), gated or not ---- */
    /* Not gated (glu 0): out (N, F) written = act(inp (N, F)); out may equal inp.
     * Gated (glu 1): inp (N, 2F), each row [gate (F) | up (F)] (the fused fc output); out (N, F)
     * written = act(gate) * up. */
    void (*act_fwd)(const backend *be, int act, int glu, be_out out, be_in inp, int N, int F);
    /* dinp (N, F) += act'(inp) * dout, or, gated, dinp (N, 2F) += the gradient w.r.t. [gate | up];
     * dout (N, F); inp as in the forward. */
    void (*act_bwd)(const backend *be, int act, int glu, be_out dinp, be_in dout, be_in inp, int N, int F);
    /* Fused bias + GeLU (tanh), the ungated GeLU MLP's fast path: out (N, C) written =
     * gelu(inp + b); inp (N, C) is kept (it is what the backward needs); b (C). */
    void (*bias_gelu_fwd)(const backend *be, be_out out, be_in inp, const float *b, int N, int C);
    /* dinp (N, C) += gelu'(inp + b) * dout; db (C) += column sums of that (either may be NULL). */
    void (*bias_gelu_bwd)(const backend *be, be_out dinp, float *db, be_in dout, be_in inp, const float *b, int N,
                          int C);

    /* ---- mixture-of-experts routing (Megatron-Core's TopKRouter) ---- */
    /* Each row n of the router's logits (N, E), E <= BE_MOE_MAX_EXPERTS: its top-k experts idx
     * (N, k), largest first (ties to the lower index), and their weights probs (N, k), as
     * topk_routing_with_score_function: BE_MOE_SOFTMAX with pre_softmax: the k largest of
     * softmax(l), as they are; without: softmax over the k largest logits; BE_MOE_SIGMOID:
     * the k largest of sigmoid(l) (+ bias[e], the aux-loss-free expert bias, for the choice
     * only; bias may be NULL), normalised over the k when k > 1. Times scale unless scale is 0. */
    void (*moe_route_fwd)(const backend *be, int32_t *idx, float *probs, const float *logits, const float *bias, int N,
                          int E, int k, int score, int pre_softmax, float scale);
    /* dlogits (N, E) += the gradient of the weights (dprobs (N, k)) through the same function,
     * the choice held fixed. */
    void (*moe_route_bwd)(const backend *be, float *dlogits, const float *dprobs, const float *logits,
                          const int32_t *idx, int N, int E, int k, int score, int pre_softmax, float scale);
    /* Switch Transformer's load-balancing loss as Megatron computes it, coeff E / (k T^2)
     * sum_e (sum_n s[n][e]) counts[e] over these N rows (s: softmax of the logits, or sigmoid
     * normalised over the experts; counts (E): the tokens routed to each expert among the T =
     * `tokens` it counts), returned; dlogits (N, E) += dscale times its gradient, counts held
     * fixed (dlogits NULL: the loss only). */
    double (*moe_aux_loss)(const backend *be, float *dlogits, const float *logits, const int32_t *counts, int N, int E,
                           int k, int score, double coeff, double tokens, float dscale);
    /* ST-MoE's router z-loss, coeff / T sum_n logsumexp(l_n)^2 over these N rows (T = `tokens`),
     * returned; dlogits += dscale times its gradient (NULL: the loss only). */
    double (*moe_z_loss)(const backend *be, float *dlogits, const float *logits, int N, int E, double coeff,
                         double tokens, float dscale);
    /* The token dispatch inside a rank: xe[row[n k + j]] = x[n] (rows of h floats), and its
     * backward dx[n] += sum_j dxe[row[n k + j]]; the combine out[n] written = sum_j probs[n k + j]
     * ye[row[n k + j]], and its backward dye[row] written = probs dout[n], dprobs written =
     * dout[n] . ye[row]. row: each (token, choice)'s row in the expert-sorted buffers, or -1:
     * dropped (over its expert's capacity: no row, no part in the output, dprobs 0). */
    void (*moe_permute)(const backend *be, float *xe, const float *x, const int32_t *row, int N, int k, int h);
    void (*moe_permute_bwd)(const backend *be, float *dx, const float *dxe, const int32_t *row, int N, int k, int h);
    void (*moe_unpermute)(const backend *be, float *out, const float *ye, const int32_t *row, const float *probs,
                          int N, int k, int h);
    void (*moe_unpermute_bwd)(const backend *be, float *dye, float *dprobs, const float *dout, const float *ye,
                              const int32_t *row, const float *probs, int N, int k, int h);

    /* ---- elementwise ---- */
    /* out (n) written = a + b; out may equal a or b. */
    void (*add)(const backend *be, be_out out, be_in a, be_in b, size_t n);
    /* x (n) *= s. */
    void (*scale)(const backend *be, be_out x, float s, size_t n);
    /* out (N, C) += b (C) on every row. */
    void (*bias_add)(const backend *be, be_out out, const float *b, int N, int C);
    /* db (C) += column sums of dout (N, C). Deterministic. */
    void (*bias_bwd)(const backend *be, float *db, be_in dout, int N, int C);

    /* ---- dropout (hidden): tensor (B, T, C), unit = drop->unit0 + channel ---- */
    /* out written = inp * mask / (1 - p); out may equal inp (then p = 0 costs nothing). */
    void (*dropout_fwd)(const backend *be, be_out out, be_in inp, int B, int T, int C, const be_drop *drop);
    /* WRITES dinp = dout * mask / (1 - p) (not +=); dinp may equal dout. */
    void (*dropout_bwd)(const backend *be, be_out dinp, be_in dout, int B, int T, int C, const be_drop *drop);
    /* Megatron's bias-dropout-add: out (B, T, C) written = resid + dropout(inp + b); b (C) or
     * NULL; out may equal resid or inp. Backward: dresid = dout; d(inp) via dropout_bwd, and
     * db via bias_bwd of that. */
    void (*bias_dropout_add_fwd)(const backend *be, be_out out, be_in resid, be_in inp, const float *b, int B,
                                 int T, int C, const be_drop *drop);

    /* ---- vocab-parallel softmax cross-entropy over logits (BT, Vloc) of the vocab slice
     * [vstart, vstart + Vloc). Only its first Vreal columns (0 <= Vreal <= Vloc, see
     * be_vocab_real) are real vocabulary entries; the rest are Megatron's padding, treated as
     * logits of -inf: no part in the max or the sum, probability 0, gradient 0. The parallel
     * code all-reduces between the steps: max (MAX), sumexp (SUM), tlogit (SUM). Targets are
     * global ids in [0, V) of the real vocabulary, (BT) device ints. ---- */
    /* maxv (BT) written = max over the real columns of the local slice (-inf when none). */
    void (*ce_max)(const backend *be, float *maxv, be_in logits, int BT, int Vloc, int Vreal);
    /* sumexp (BT) written = sum over the real columns of exp(logit - maxv) (maxv: GLOBAL max). */
    void (*ce_sumexp)(const backend *be, float *sumexp, be_in logits, const float *maxv, int BT, int Vloc,
                      int Vreal);
    /* tlogit (BT) written = logits[i, targets[i] - vstart] if the target is in the slice, else 0. */
    void (*ce_target)(const backend *be, float *tlogit, be_in logits, const int32_t *targets, int BT, int Vloc,
                      int vstart);
    /* losses (BT) written = log(sumexp) + maxv - tlogit (all global). */
    void (*ce_loss)(const backend *be, float *losses, const float *maxv, const float *sumexp, const float *tlogit,
                    int BT);
    /* In place, one pass: logits (BT, Vloc) is overwritten (WRITES, not +=) with
     * dlogits = (exp(logit - maxv) / sumexp - [target == vstart + j]) * dloss[i] for the real
     * columns j < Vreal, and exactly 0 for the padded ones.
     * maxv, sumexp: the global ones; dloss (BT): d(total loss)/d(loss of row i). */
    void (*ce_bwd)(const backend *be, be_out logits, const float *maxv, const float *sumexp, const int32_t *targets,
                   const float *dloss, int BT, int Vloc, int Vreal, int vstart);

    /* ---- optimizer, on a contiguous slice of n elements ---- */
    /* PyTorch AdamW, step >= 1 (count including this one): with g' = g * gscale,
     * p -= lr*wd*p; m = b1 m + (1-b1) g'; v = b2 v + (1-b2) g'^2;
     * p -= lr/(1-b1^step) * m / (sqrt(v)/sqrt(1-b2^step) + eps). p, m, v updated in place. */
    void (*adamw)(const backend *be, float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1,
                  float beta2, float eps, float wd, float gscale, int64_t step);
    /* Sum of squares of x (n), accumulated in double. Returns it to the host (waits for the queue). */
    double (*sumsq)(const backend *be, const float *x, size_t n);

    /* ---- measurement ---- */
    /* Best sgemm GFLOP/s of a quick square run (a fraction of a second), for MFU. */
    double (*peak_gflops)(const backend *be);
    /* Best STREAM-like copy bandwidth in GB/s (bytes read + bytes written, 1e9) of all threads,
     * over buffers well beyond the caches (a fraction of a second; 256 MB allocated and freed):
     * the memory-bound limit kernels like AdamW are held against. */
    double (*copy_gbps)(const backend *be);
    /* Best bandwidth in GB/s of AdamW's memory traffic alone (p, g, m, v read, p, m, v written in
     * place; be_adamw_bytes) over buffers beyond the caches: the limit the AdamW kernel is held
     * against. A read-heavy mix streams faster than a copy (1.8x here). */
    double (*adamw_stream_gbps)(const backend *be);
    /* One line naming the kernels in use (ISA build, GEMM libraries), for the start-up log. */
    void (*describe)(const backend *be, char *out, size_t len);
};

/* ---- time per kernel family, for the trainer's breakdown of an iteration ----
 * When be->stats is set, every be_<entry> wrapper below adds the time between two events, one
 * recorded before the entry and one after (be_tic, be_toc), to the family of the entry (and,
 * for GEMMs and attention, its model FLOPs). On cpu the events are wall-clock stamps around a
 * call that runs to completion; on a device backend they are points of its queue, and reading
 * one waits for it (stats are for measurement runs). */
typedef enum {
    BE_OP_GEMM,         /* matmul_fwd, matmul_bwd */
    BE_OP_ATTENTION,    /* attention_fwd, attention_bwd */
    BE_OP_LAYERNORM,    /* layernorm_*, rmsnorm_* */
    BE_OP_GELU,         /* act_*, bias_gelu_* (the MLP's activation) */
    BE_OP_ROPE,         /* rope_* */
    BE_OP_RESIDUAL,     /* bias, dropout, residual add, scale */
    BE_OP_EMBEDDING,    /* embedding_*, pos_embedding_* */
    BE_OP_CROSSENTROPY, /* ce_* */
    BE_OP_OPTIMIZER,    /* adamw, sumsq */
    BE_OP_MEMORY,       /* zero, copy, dtype conversion */
    BE_OP_ROUTER,       /* moe_* (mixture-of-experts routing and its losses) */
    BE_OP_COUNT
} be_op;

typedef struct be_stats {
    double seconds[BE_OP_COUNT];
    double flops[BE_OP_COUNT]; /* GEMM: 2 m n k per product; attention: Megatron's count (4 B s^2 h
                                * forward, twice that backward, causal mask ignored) */
    int64_t calls[BE_OP_COUNT];
} be_stats;

/* A short name of a family ("GEMM", "attention", ...). */
const char *be_op_name(be_op op);

/* A backend: its vtable and a small context. Stateless otherwise: every kernel is a pure
 * function of its arguments (scratch, if any, is the implementation's own). */
struct backend {
    const struct be_ops *ops;
    void *queue;  /* the one ordered queue every entry is enqueued on (CUDA: a cudaStream_t);
                   * cpu: NULL, every entry runs before it returns */
    int nthreads; /* cpu: OpenMP threads of every kernel (and of OpenBLAS) */
    int device;   /* a device backend: its device ordinal; cpu: -1 */
    int isa;      /* cpu: which ISA build of the kernels runs (cpu.c) */
    void *impl;   /* implementation state (library handles, event pools) */
    be_stats *stats; /* NULL, or where the wrappers add kernel times (see be_stats) */
    /* Mixed precision (mixed.c): BE_F32, or the dtype every be_matmul_fwd/bwd multiplies in
     * (be_set_gemm_dtype); the weights' copies in it. */
    be_dtype gemm_dtype;
    struct be_lowp *lowp;
};

/* ---- the backends of this binary (registry.c) ---- */
/* A backend by name (be_backend_names; "cpu"): nthreads_or_device is the cpu's thread count (0:
 * OpenMP's default) or a device backend's device ordinal. An unknown name exits 2 with the list. */
backend *be_create(const char *name, int nthreads_or_device);
/* 1 if `name` is a backend of this binary. */
int be_backend_known(const char *name);
/* The backends of this binary, ", " between them ("cpu"). */
const char *be_backend_names(void);
/* Waits for the queue, frees the backend's state (destroy), its mixed-precision copies and the
 * struct. NULL is a no-op. */
void be_free(backend *be);
/* 1 if this binary has the CPU kernel build `name` (baseline, avx2, avx512) and this CPU runs it;
 * else 0 with the reason written to why (len bytes). *best (when best is not NULL) = the build
 * the cpu backend takes when TRIDENT_CPU_ISA is unset. */
int be_cpu_isa_runs(const char *name, const char **best, char *why, size_t len);
/* First thing in main, before any thread or library starts: lets the backends set up the process
 * for this machine. cpu: where OpenBLAS loaded older kernels than the CPU runs (0.3.21 gives
 * AMD Zen 4 its AVX2 ones), sets OPENBLAS_CORETYPE and executes the program again, once; the
 * log then names what it replaced. */
void be_prepare_process(char **argv);

/* ---- events: time on the backend's queue ---- */
/* A point in the queue after everything enqueued so far. */
static inline be_event be_event_record(const backend *be)
{
    be_event e = {0.0, NULL};
    be->ops->event_record(be, &e);
    return e;
}
/* Seconds from start to end (both recorded by be_event_record, start first); waits for end and
 * releases both. */
static inline double be_event_elapsed(const backend *be, be_event *start, be_event *end)
{
    return be->ops->event_elapsed(be, start, end);
}

/* ---- wrappers: be_<entry>(be, ...) calls be->ops-><entry>(be, ...), timed into be->stats ---- */
/* Fp32 callers: the wrappers take float * and pass it as an fp32 typed buffer. */
static inline be_event be_tic(const backend *be)
{
    be_event e = {0.0, NULL};
    if (be->stats) be->ops->event_record(be, &e);
    return e;
}
/* Ends every wrapped kernel: communication in flight moves on between kernels (comm_progress;
 * nothing when none is), so a rank computing does not hold back the transfers it started. */
static inline void be_toc(const backend *be, be_op op, be_event t0, double flops)
{
    comm_progress();
    if (!be->stats) return;
    be_event t1 = be_event_record(be);
    be->stats->seconds[op] += be->ops->event_elapsed(be, &t0, &t1);
    be->stats->flops[op] += flops;
    be->stats->calls[op]++;
}

static inline void *be_alloc(const backend *be, size_t bytes) { return be->ops->alloc(be, bytes); }
static inline void be_dfree(const backend *be, void *p) { be->ops->free(be, p); }
static inline void be_memcpy(const backend *be, void *dst, const void *src, size_t bytes, be_copy_kind k)
{
    be_event t0 = be_tic(be);
    be->ops->copy_bytes(be, dst, src, bytes, k);
    be_toc(be, BE_OP_MEMORY, t0, 0);
}
/* x (n floats) = 0. */
static inline void be_zero(const backend *be, float *x, size_t n)
{
    be_event t0 = be_tic(be);
    be->ops->set_bytes(be, x, 0, n * sizeof(float));
    be_toc(be, BE_OP_MEMORY, t0, 0);
}
/* dst (n floats) = src, both device. */
static inline void be_copy(const backend *be, float *dst, const float *src, size_t n)
{
    be_event t0 = be_tic(be);
    be->ops->copy_bytes(be, dst, src, n * sizeof(float), BE_D2D);
    be_toc(be, BE_OP_MEMORY, t0, 0);
}
static inline void be_sync(const backend *be) { be->ops->sync(be); }

/* ---- mixed precision (mixed.c) ----
 * With a gemm dtype set, be_matmul_fwd and be_matmul_bwd keep their fp32 interface but multiply
 * in that dtype: inputs and output gradients are rounded into it on the way in (scratch of the
 * backend), weights come from their copies in it, and every product accumulates in fp32. The
 * weight copies: be_lowp_register names the fp32 buffers weights live in (a model's parameter
 * buffer); the first GEMM reading a weight after be_lowp_invalidate rounds that weight into its
 * copy, the later ones reuse it. Everything else (norms, softmax, cross-entropy, the optimizer,
 * grads) stays fp32. */
void be_set_gemm_dtype(backend *be, be_dtype dt);
/* [base, base + n) holds weights: keeps a copy of it in the gemm dtype (2 bytes an element). */
void be_lowp_register(const backend *be, const float *base, size_t n);
/* The registered weights changed (an optimizer step, a load): copies are remade on next use. */
void be_lowp_invalidate(const backend *be);
/* Frees the copies and scratch (be_free does). */
void be_lowp_free(backend *be);
/* Bytes of the weight copies and conversion scratch held now. */
size_t be_lowp_bytes(const backend *be);

static inline void be_convert(const backend *be, void *dst, be_dtype dt, const void *src, be_dtype st, size_t n)
{
    be_event t0 = be_tic(be);
    be->ops->convert(be, dst, dt, src, st, n);
    be_toc(be, BE_OP_MEMORY, t0, 0);
}
/* The linear layer (mixed.c): out (BT, OC) written = inp . W^T + b, and its backward (as
 * matmul_fwd / matmul_bwd), in the backend's gemm dtype. The _in forms take the input as a
 * typed buffer: fp32, or already in the gemm dtype (an activation a model keeps in it, half the
 * bytes; the GEMMs then read it as it is). */
void be_matmul_fwd_in(const backend *be, float *out, be_in inp, const float *w, const float *b, int BT, int C,
                      int OC);
void be_matmul_bwd_in(const backend *be, float *dinp, float *dw, float *db, const float *dout, be_in inp,
                      const float *w, int BT, int C, int OC);
void be_matmul_fwd(const backend *be, float *out, const float *inp, const float *w, const float *b, int BT, int C,
                   int OC);
void be_matmul_bwd(const backend *be, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                   const float *w, int BT, int C, int OC);
/* G linear layers on consecutive groups of rows (counts[g] each), weights stacked (W_g = w + g OC C,
 * b_g = b + g OC): one backend call in fp32 (matmul_grouped_fwd/bwd), else group by group. */
void be_matmul_grouped_fwd(const backend *be, float *out, const float *inp, const float *w, const float *b,
                           const int32_t *counts, int G, int C, int OC);
void be_matmul_grouped_bwd(const backend *be, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                           const float *w, const int32_t *counts, int G, int C, int OC);
static inline void be_embedding_fwd(const backend *be, float *out, const int32_t *ids, const float *wte, int BT,
                                    int C, int vstart, int Vloc)
{
    be_event t0 = be_tic(be);
    be->ops->embedding_fwd(be, be_f32_out(out), ids, wte, BT, C, vstart, Vloc);
    be_toc(be, BE_OP_EMBEDDING, t0, 0);
}
static inline void be_embedding_bwd(const backend *be, float *dwte, const float *dout, const int32_t *ids, int BT,
                                    int C, int vstart, int Vloc)
{
    be_event t0 = be_tic(be);
    be->ops->embedding_bwd(be, dwte, be_f32(dout), ids, BT, C, vstart, Vloc);
    be_toc(be, BE_OP_EMBEDDING, t0, 0);
}
static inline void be_pos_embedding_fwd(const backend *be, float *out, const float *wpe, int B, int T, int C,
                                        int pos0)
{
    be_event t0 = be_tic(be);
    be->ops->pos_embedding_fwd(be, be_f32_out(out), wpe, B, T, C, pos0);
    be_toc(be, BE_OP_EMBEDDING, t0, 0);
}
static inline void be_pos_embedding_bwd(const backend *be, float *dwpe, const float *dout, int B, int T, int C,
                                        int pos0)
{
    be_event t0 = be_tic(be);
    be->ops->pos_embedding_bwd(be, dwpe, be_f32(dout), B, T, C, pos0);
    be_toc(be, BE_OP_EMBEDDING, t0, 0);
}
static inline void be_layernorm_fwd(const backend *be, float *out, float *mean, float *rstd, const float *inp,
                                    const float *w, const float *b, int N, int C, float eps)
{
    be_event t0 = be_tic(be);
    be->ops->layernorm_fwd(be, be_f32_out(out), mean, rstd, be_f32(inp), w, b, N, C, eps);
    be_toc(be, BE_OP_LAYERNORM, t0, 0);
}
static inline void be_layernorm_bwd(const backend *be, float *dinp, float *dw, float *db, const float *dout,
                                    const float *inp, const float *w, const float *mean, const float *rstd, int N,
                                    int C)
{
    be_event t0 = be_tic(be);
    be->ops->layernorm_bwd(be, be_f32_out(dinp), dw, db, be_f32(dout), be_f32(inp), w, mean, rstd, N, C);
    be_toc(be, BE_OP_LAYERNORM, t0, 0);
}
static inline void be_rmsnorm_fwd(const backend *be, float *out, float *rstd, const float *inp, const float *w,
                                  int N, int C, float eps)
{
    be_event t0 = be_tic(be);
    be->ops->rmsnorm_fwd(be, be_f32_out(out), rstd, be_f32(inp), w, N, C, eps);
    be_toc(be, BE_OP_LAYERNORM, t0, 0);
}
static inline void be_rmsnorm_bwd(const backend *be, float *dinp, float *dw, const float *dout, const float *inp,
                                  const float *w, const float *rstd, int N, int C)
{
    be_event t0 = be_tic(be);
    be->ops->rmsnorm_bwd(be, be_f32_out(dinp), dw, be_f32(dout), be_f32(inp), w, rstd, N, C);
    be_toc(be, BE_OP_LAYERNORM, t0, 0);
}
static inline void be_rope_fwd(const backend *be, float *x, int B, int T, int ld, int nh, int hs, int rot,
                               float base, int pos0)
{
    be_event t0 = be_tic(be);
    be->ops->rope_fwd(be, be_f32_out(x), B, T, ld, nh, hs, rot, base, pos0);
    be_toc(be, BE_OP_ROPE, t0, 0);
}
static inline void be_rope_bwd(const backend *be, float *dx, int B, int T, int ld, int nh, int hs, int rot,
                               float base, int pos0)
{
    be_event t0 = be_tic(be);
    be->ops->rope_bwd(be, be_f32_out(dx), B, T, ld, nh, hs, rot, base, pos0);
    be_toc(be, BE_OP_ROPE, t0, 0);
}
/* Model FLOPs are Megatron's count (4 B s^2 h forward) whatever the mask. */
static inline void be_attention_fwd_masked(const backend *be, float *out, float *lse, const float *q, const float *k,
                                           const float *v, int ldq, int ldkv, int B, int T, int NH, int NKV, int HS,
                                           const int32_t *klen, const be_drop *drop)
{
    be_event t0 = be_tic(be);
    be->ops->attention_fwd(be, be_f32_out(out), lse, be_f32(q), be_f32(k), be_f32(v), ldq, ldkv, B, T, NH, NKV,
                          HS, klen, drop);
    be_toc(be, BE_OP_ATTENTION, t0, 4.0 * B * T * (double)T * NH * HS);
}
static inline void be_attention_bwd_masked(const backend *be, float *dq, float *dk, float *dv, const float *dout,
                                           const float *q, const float *k, const float *v, const float *lse, int ldq,
                                           int ldkv, int B, int T, int NH, int NKV, int HS, const int32_t *klen,
                                           const be_drop *drop)
{
    be_event t0 = be_tic(be);
    be->ops->attention_bwd(be, be_f32_out(dq), be_f32_out(dk), be_f32_out(dv), be_f32(dout), be_f32(q),
                          be_f32(k), be_f32(v), lse, ldq, ldkv, B, T, NH, NKV, HS, klen, drop);
    be_toc(be, BE_OP_ATTENTION, t0, 8.0 * B * T * (double)T * NH * HS);
}
/* Causal (GPT). */
static inline void be_attention_fwd(const backend *be, float *out, float *lse, const float *q, const float *k,
                                    const float *v, int ldq, int ldkv, int B, int T, int NH, int NKV, int HS,
                                    const be_drop *drop)
{
    be_attention_fwd_masked(be, out, lse, q, k, v, ldq, ldkv, B, T, NH, NKV, HS, NULL, drop);
}
static inline void be_attention_bwd(const backend *be, float *dq, float *dk, float *dv, const float *dout,
                                    const float *q, const float *k, const float *v, const float *lse, int ldq,
                                    int ldkv, int B, int T, int NH, int NKV, int HS, const be_drop *drop)
{
    be_attention_bwd_masked(be, dq, dk, dv, dout, q, k, v, lse, ldq, ldkv, B, T, NH, NKV, HS, NULL, drop);
}
static inline void be_attention_kv_fwd(const backend *be, float *out, const float *q, const float *kc,
                                       const float *vc, int ldq, int B, int n, int pos0, int cap, int NH, int NKV,
                                       int HS)
{
    be_event t0 = be_tic(be);
    be->ops->attention_kv_fwd(be, be_f32_out(out), be_f32(q), be_f32(kc), be_f32(vc), ldq, B, n, pos0, cap, NH, NKV,
                              HS);
    be_toc(be, BE_OP_ATTENTION, t0, 4.0 * B * n * (double)(pos0 + n) * NH * HS);
}
static inline void be_act_fwd(const backend *be, int act, int glu, float *out, const float *inp, int N, int F)
{
    be_event t0 = be_tic(be);
    be->ops->act_fwd(be, act, glu, be_f32_out(out), be_f32(inp), N, F);
    be_toc(be, BE_OP_GELU, t0, 0);
}
static inline void be_act_bwd(const backend *be, int act, int glu, float *dinp, const float *dout, const float *inp,
                              int N, int F)
{
    be_event t0 = be_tic(be);
    be->ops->act_bwd(be, act, glu, be_f32_out(dinp), be_f32(dout), be_f32(inp), N, F);
    be_toc(be, BE_OP_GELU, t0, 0);
}
/* GeLU (tanh) over n (< 2^31) elements, and SwiGLU: be_act_* of TD_ACT_GELU and of TD_ACT_SILU gated. */
static inline void be_gelu_fwd(const backend *be, float *out, const float *inp, size_t n)
{
    be_act_fwd(be, TD_ACT_GELU, 0, out, inp, 1, (int)n);
}
static inline void be_gelu_bwd(const backend *be, float *dinp, const float *dout, const float *inp, size_t n)
{
    be_act_bwd(be, TD_ACT_GELU, 0, dinp, dout, inp, 1, (int)n);
}
static inline void be_bias_gelu_fwd(const backend *be, float *out, const float *inp, const float *b, int N, int C)
{
    be_event t0 = be_tic(be);
    be->ops->bias_gelu_fwd(be, be_f32_out(out), be_f32(inp), b, N, C);
    be_toc(be, BE_OP_GELU, t0, 0);
}
static inline void be_bias_gelu_bwd(const backend *be, float *dinp, float *db, const float *dout,
                                    const float *inp, const float *b, int N, int C)
{
    be_event t0 = be_tic(be);
    be->ops->bias_gelu_bwd(be, be_f32_out(dinp), db, be_f32(dout), be_f32(inp), b, N, C);
    be_toc(be, BE_OP_GELU, t0, 0);
}
static inline void be_swiglu_fwd(const backend *be, float *out, const float *inp, int N, int F)
{
    be_act_fwd(be, TD_ACT_SILU, 1, out, inp, N, F);
}
static inline void be_swiglu_bwd(const backend *be, float *dinp, const float *dout, const float *inp, int N, int F)
{
    be_act_bwd(be, TD_ACT_SILU, 1, dinp, dout, inp, N, F);
}
/* The routers' score functions (moe_route_fwd) and the most experts a router may choose among. */
enum { BE_MOE_SOFTMAX, BE_MOE_SIGMOID };
#define BE_MOE_MAX_EXPERTS 1024
static inline void be_moe_route_fwd(const backend *be, int32_t *idx, float *probs, const float *logits,
                                    const float *bias, int N, int E, int k, int score, int pre_softmax, float scale)
{
    TD_ASSERT(E >= 1 && E <= BE_MOE_MAX_EXPERTS && k >= 1 && k <= E);
    be_event t0 = be_tic(be);
    be->ops->moe_route_fwd(be, idx, probs, logits, bias, N, E, k, score, pre_softmax, scale);
    be_toc(be, BE_OP_ROUTER, t0, 0);
}
static inline void be_moe_route_bwd(const backend *be, float *dlogits, const float *dprobs, const float *logits,
                                    const int32_t *idx, int N, int E, int k, int score, int pre_softmax, float scale)
{
    TD_ASSERT(E >= 1 && E <= BE_MOE_MAX_EXPERTS && k >= 1 && k <= E);
    be_event t0 = be_tic(be);
    be->ops->moe_route_bwd(be, dlogits, dprobs, logits, idx, N, E, k, score, pre_softmax, scale);
    be_toc(be, BE_OP_ROUTER, t0, 0);
}
static inline double be_moe_aux_loss(const backend *be, float *dlogits, const float *logits, const int32_t *counts,
                                     int N, int E, int k, int score, double coeff, double tokens, float dscale)
{
    TD_ASSERT(E >= 1 && E <= BE_MOE_MAX_EXPERTS && k >= 1 && k <= E && tokens > 0);
    be_event t0 = be_tic(be);
    double loss = be->ops->moe_aux_loss(be, dlogits, logits, counts, N, E, k, score, coeff, tokens, dscale);
    be_toc(be, BE_OP_ROUTER, t0, 0);
    return loss;
}
static inline double be_moe_z_loss(const backend *be, float *dlogits, const float *logits, int N, int E, double coeff,
                                   double tokens, float dscale)
{
    TD_ASSERT(E >= 1 && E <= BE_MOE_MAX_EXPERTS && tokens > 0);
    be_event t0 = be_tic(be);
    double loss = be->ops->moe_z_loss(be, dlogits, logits, N, E, coeff, tokens, dscale);
    be_toc(be, BE_OP_ROUTER, t0, 0);
    return loss;
}
static inline void be_moe_permute(const backend *be, float *xe, const float *x, const int32_t *row, int N, int k,
                                  int h)
{
    be_event t0 = be_tic(be);
    be->ops->moe_permute(be, xe, x, row, N, k, h);
    be_toc(be, BE_OP_ROUTER, t0, 0);
}
static inline void be_moe_permute_bwd(const backend *be, float *dx, const float *dxe, const int32_t *row, int N,
                                      int k, int h)
{
    be_event t0 = be_tic(be);
    be->ops->moe_permute_bwd(be, dx, dxe, row, N, k, h);
    be_toc(be, BE_OP_ROUTER, t0, 0);
}
static inline void be_moe_unpermute(const backend *be, float *out, const float *ye, const int32_t *row,
                                    const float *probs, int N, int k, int h)
{
    be_event t0 = be_tic(be);
    be->ops->moe_unpermute(be, out, ye, row, probs, N, k, h);
    be_toc(be, BE_OP_ROUTER, t0, 0);
}
static inline void be_moe_unpermute_bwd(const backend *be, float *dye, float *dprobs, const float *dout,
                                        const float *ye, const int32_t *row, const float *probs, int N, int k, int h)
{
    be_event t0 = be_tic(be);
    be->ops->moe_unpermute_bwd(be, dye, dprobs, dout, ye, row, probs, N, k, h);
    be_toc(be, BE_OP_ROUTER, t0, 0);
}
static inline void be_add(const backend *be, float *out, const float *a, const float *b, size_t n)
{
    be_event t0 = be_tic(be);
    be->ops->add(be, be_f32_out(out), be_f32(a), be_f32(b), n);
    be_toc(be, BE_OP_RESIDUAL, t0, 0);
}
static inline void be_scale(const backend *be, float *x, float s, size_t n)
{
    be_event t0 = be_tic(be);
    be->ops->scale(be, be_f32_out(x), s, n);
    be_toc(be, BE_OP_RESIDUAL, t0, 0);
}
static inline void be_bias_add(const backend *be, float *out, const float *b, int N, int C)
{
    be_event t0 = be_tic(be);
    be->ops->bias_add(be, be_f32_out(out), b, N, C);
    be_toc(be, BE_OP_RESIDUAL, t0, 0);
}
static inline void be_bias_bwd(const backend *be, float *db, const float *dout, int N, int C)
{
    be_event t0 = be_tic(be);
    be->ops->bias_bwd(be, db, be_f32(dout), N, C);
    be_toc(be, BE_OP_RESIDUAL, t0, 0);
}
static inline void be_dropout_fwd(const backend *be, float *out, const float *inp, int B, int T, int C,
                                  const be_drop *drop)
{
    be_event t0 = be_tic(be);
    be->ops->dropout_fwd(be, be_f32_out(out), be_f32(inp), B, T, C, drop);
    be_toc(be, BE_OP_RESIDUAL, t0, 0);
}
static inline void be_dropout_bwd(const backend *be, float *dinp, const float *dout, int B, int T, int C,
                                  const be_drop *drop)
{
    be_event t0 = be_tic(be);
    be->ops->dropout_bwd(be, be_f32_out(dinp), be_f32(dout), B, T, C, drop);
    be_toc(be, BE_OP_RESIDUAL, t0, 0);
}
static inline void be_bias_dropout_add_fwd(const backend *be, float *out, const float *resid, const float *inp,
                                           const float *b, int B, int T, int C, const be_drop *drop)
{
    be_event t0 = be_tic(be);
    be->ops->bias_dropout_add_fwd(be, be_f32_out(out), be_f32(resid), be_f32(inp), b, B, T, C, drop);
    be_toc(be, BE_OP_RESIDUAL, t0, 0);
}
/* Real vocabulary columns of the slice [vstart, vstart + Vloc) of a vocabulary of `vocab` real
 * ids padded past it: the Vreal of the cross-entropy steps. */
static inline int be_vocab_real(int vocab, int vstart, int Vloc)
{
    int n = vocab - vstart;
    return n < 0 ? 0 : n > Vloc ? Vloc : n;
}
static inline void be_ce_max(const backend *be, float *maxv, const float *logits, int BT, int Vloc, int Vreal)
{
    be_event t0 = be_tic(be);
    be->ops->ce_max(be, maxv, be_f32(logits), BT, Vloc, Vreal);
    be_toc(be, BE_OP_CROSSENTROPY, t0, 0);
}
static inline void be_ce_sumexp(const backend *be, float *sumexp, const float *logits, const float *maxv, int BT,
                                int Vloc, int Vreal)
{
    be_event t0 = be_tic(be);
    be->ops->ce_sumexp(be, sumexp, be_f32(logits), maxv, BT, Vloc, Vreal);
    be_toc(be, BE_OP_CROSSENTROPY, t0, 0);
}
static inline void be_ce_target(const backend *be, float *tlogit, const float *logits, const int32_t *targets,
                                int BT, int Vloc, int vstart)
{
    be_event t0 = be_tic(be);
    be->ops->ce_target(be, tlogit, be_f32(logits), targets, BT, Vloc, vstart);
    be_toc(be, BE_OP_CROSSENTROPY, t0, 0);
}
static inline void be_ce_loss(const backend *be, float *losses, const float *maxv, const float *sumexp,
                              const float *tlogit, int BT)
{
    be_event t0 = be_tic(be);
    be->ops->ce_loss(be, losses, maxv, sumexp, tlogit, BT);
    be_toc(be, BE_OP_CROSSENTROPY, t0, 0);
}
static inline void be_ce_bwd(const backend *be, float *logits, const float *maxv, const float *sumexp,
                             const int32_t *targets, const float *dloss, int BT, int Vloc, int Vreal, int vstart)
{
    be_event t0 = be_tic(be);
    be->ops->ce_bwd(be, be_f32_out(logits), maxv, sumexp, targets, dloss, BT, Vloc, Vreal, vstart);
    be_toc(be, BE_OP_CROSSENTROPY, t0, 0);
}
static inline void be_adamw(const backend *be, float *p, const float *g, float *m, float *v, size_t n, float lr,
                            float beta1, float beta2, float eps, float wd, float gscale, int64_t step)
{
    be_event t0 = be_tic(be);
    be->ops->adamw(be, p, g, m, v, n, lr, beta1, beta2, eps, wd, gscale, step);
    be_toc(be, BE_OP_OPTIMIZER, t0, 0);
}
static inline double be_sumsq(const backend *be, const float *x, size_t n)
{
    double s;
    be_event t0 = be_tic(be);
    s = be->ops->sumsq(be, x, n);
    be_toc(be, BE_OP_OPTIMIZER, t0, 0);
    return s;
}
static inline double be_peak_gflops(const backend *be) { return be->ops->peak_gflops(be); }
static inline double be_copy_gbps(const backend *be) { return be->ops->copy_gbps(be); }
static inline double be_adamw_stream_gbps(const backend *be) { return be->ops->adamw_stream_gbps(be); }
/* Bytes a copy of n bytes moves as copy_gbps counts them: n read + n written. */
static inline double be_copy_bytes(size_t n) { return 2.0 * (double)n; }
/* Bytes be_adamw moves over n elements, counted as a copy's (read + written): p, g, m and v
 * read, p, m and v written, one float each. */
static inline double be_adamw_bytes(size_t n) { return (4.0 + 3.0) * (double)sizeof(float) * (double)n; }
static inline void be_describe(const backend *be, char *out, size_t len) { be->ops->describe(be, out, len); }

/* Non-parallel cross-entropy for one rank holding the whole vocabulary: logits (BT, V), of which
 * the first `vocab` columns are real (the rest padding, masked out): the steps above chained.
 * losses, maxv, sumexp, tlogit (BT) written; keep maxv and sumexp for be_ce_bwd (with Vloc = V,
 * Vreal = vocab, vstart = 0). */
void be_crossentropy_fwd(const backend *be, float *losses, float *maxv, float *sumexp, float *tlogit,
                         const float *logits, const int32_t *targets, int BT, int V, int vocab);

/* ---- the dropout mask, shared by every backend (the CUDA one must match bit for bit) ----
 * One Philox-4x32-10 block (key = seed) gives the masks of 4 consecutive units:
 * counter = { unit / 4, position, sample low 32 bits,
 *             (sample >> 32) & 0xff | site << 8 (16 bits) | kind << 24 };
 * word unit % 4 is kept when it is >= threshold(p) = floor(p * 2^32). */
enum { BE_DROP_HIDDEN = 1, BE_DROP_ATTN = 2 };

static inline uint32_t be_drop_threshold(float p)
{
    double t = (double)p * 4294967296.0;
    return t >= 4294967295.0 ? 4294967295u : (uint32_t)t;
}
static inline td_philox_ctr be_drop_counter(int kind, int site, int64_t sample, int64_t pos, int64_t unit)
{
    td_philox_ctr c = {{(uint32_t)((uint64_t)unit >> 2), (uint32_t)pos, (uint32_t)(uint64_t)sample,
                        (((uint32_t)((uint64_t)sample >> 32)) & 0xffu) | ((uint32_t)site & 0xffffu) << 8 |
                            (uint32_t)kind << 24}};
    return c;
}
static inline td_philox_ctr be_drop_block(uint64_t seed, int kind, int site, int64_t sample, int64_t pos,
                                          int64_t unit)
{
    return td_philox4x32_inline(be_drop_counter(kind, site, sample, pos, unit), td_philox_key_from_seed(seed));
}
/* 1 if element (sample, site, pos, unit) of a `kind` dropout survives. */
static inline int be_drop_keep(const be_drop *d, int kind, int64_t sample, int64_t pos, int64_t unit)
{
    td_philox_ctr r = be_drop_block(d->seed, kind, d->site, sample, pos, unit);
    return r.v[unit & 3] >= be_drop_threshold(d->p);
}

#endif
