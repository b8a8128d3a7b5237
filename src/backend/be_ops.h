/* The backend contract: what a compute backend implements. The vtable (struct be_ops), the
 * types its entries take (typed buffers, events, dropout sites), struct backend, the list of
 * entries a backend may leave NULL (BE_OP_ENTRIES) and the dropout mask every backend reproduces
 * bit for bit. Private to the floors that call a backend: they include backend.h (the timed
 * be_* wrappers over this vtable, be_create); a backend's own folder includes this. docs/backend.md
 * is the contract entry by entry and what a device backend implements each with.
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
 *    reuse any buffer. free is ordered after the work queued before it;
 *  - comm never takes this memory unless the backend says it may: host_alloc NULL (cpu) hands
 *    comm the backend's pointers, host_alloc set stages every transfer through host memory
 *    (xfer.h, the one place that applies the rule).
 * Timing goes through events (event_record, event_elapsed): a point in the queue, so the time
 * between two is the device's, not the host's enqueueing time. */
#ifndef TRIDENT_BE_OPS_H
#define TRIDENT_BE_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "trident/philox.h"

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
/* Rotary frequencies of one model: inv_freq_i for i < rot/2 (computed once on the host, in double
 * and rounded, from the model's base and rope scaling: gpt_rope_freqs), and the factor the cos and
 * sin are multiplied by (YaRN's attention factor; 1 otherwise). Host memory; the CUDA backend
 * passes it to its kernel by value. */
#define BE_ROPE_MAX_HALF 256
typedef struct be_rope {
    float inv_freq[BE_ROPE_MAX_HALF];
    float scale;
} be_rope;

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
    int cp_chunk;          /* hidden dropout under context parallelism: the rows' u = pos0 + t are this
                            * rank's two chunks of cp_chunk positions, chunks cp_c0 and cp_c1 of the
                            * sequence (be_drop_pos); 0: row t is position pos0 + t */
    int cp_c0, cp_c1;
} be_drop;

/* The position row t of a dropout's rows stands at (the Philox counter's). */
static inline int64_t be_drop_pos(const be_drop *d, int64_t t)
{
    int64_t u = (int64_t)d->pos0 + t, L = d->cp_chunk;
    if (!L) return u;
    return u < L ? d->cp_c0 * L + u : d->cp_c1 * L + u - L;
}

/* The vtable. Every entry takes the backend first (its queue and state) and is enqueued on its queue
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
    /* Frees the backend's own state (impl: its queue, library handles), after waiting for the
     * queue; be_free calls it, then frees the struct. Optional: NULL when there is nothing to free. */
    void (*destroy)(backend *be);
    /* Pinned host memory for the transfers comm makes (xfer.h), a pair, both set or both NULL.
     * NULL: comm reads and writes this backend's memory directly (cpu: it is host memory; a device
     * backend over a CUDA-aware MPI or NCCL). Set: every buffer that crosses comm is staged through
     * host memory from host_alloc (`bytes`, 64-byte aligned, dies if short): copied D2H before a
     * send, H2D after a receive completes. host_free(NULL) is a no-op. Optional. */
    void *(*host_alloc)(const backend *be, size_t bytes);
    void (*host_free)(const backend *be, void *p);
    /* 1 if everything enqueued before ev was recorded has run, without waiting; 0 if not yet. Reads
     * ev, never releases it. Optional: NULL means every recorded event has passed (cpu: each entry
     * runs to completion before it returns). Data parallelism and the pipeline start a bucket's
     * reduction or a stage's send when the event recorded after its last kernel has passed. */
    int (*event_query)(const backend *be, const be_event *ev);
    /* Releases what an event recorded for event_query holds (one never timed by event_elapsed);
     * ev->h is NULL after it, and releasing a released or empty event is a no-op. Optional: NULL
     * when an event holds nothing (cpu). The overlap releases a bucket's or a send's event when it
     * starts the transfer. */
    void (*event_release)(const backend *be, be_event *ev);

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
     * accumulated (any NULL). fp32. Optional: when NULL, be_matmul_grouped_* runs matmul_fwd/bwd
     * group by group. */
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
     * NULL). On a backend whose acts_in(dt), out may be in dt too: the product rounded once, the
     * bias (if any) added to that and rounded again. The bias gradient is not here: it is a column
     * sum of dout (bias_bwd). */
    void (*matmul_fwd_lp)(const backend *be, be_out out, be_in inp, const void *w, const float *b, be_dtype dt,
                          int BT, int C, int OC);
    void (*matmul_bwd_lp)(const backend *be, be_out dinp, float *dw, be_in dout, be_in inp, const void *w,
                          be_dtype dt, int BT, int C, int OC);
    /* A 16-bit MLP's fc and its tanh GeLU as one product (cuda: cuBLASLt's GELU_AUX_BIAS
     * epilogue): pre (BT, OC) written = inp . W^T + b rounded to dt (what the backward's GeLU
     * derivative reads), act (BT, OC) written = gelu of the fp32 sum, rounded to dt; inp, w as
     * matmul_fwd_lp's, b fp32 (OC), pre.dt = act.dt = dt. Returns 1 when done, 0 when the backend
     * refuses this call (nothing written: the caller runs the product and bias_gelu_fwd). */
    int (*matmul_gelu_fwd_lp)(const backend *be, be_out act, be_out pre, be_in inp, const void *w, const float *b,
                              be_dtype dt, int BT, int C, int OC);
    /* Its backward through the next layer's input gradient (cuda: the DGELU epilogue): dinp
     * (BT, C) written = (dout . W) * gelu'(pre), dout (BT, OC) and W (OC, C) in dt as
     * matmul_bwd_lp's, pre (BT, C) as matmul_gelu_fwd_lp wrote it, dinp in dt. 1 when done, 0
     * refused (nothing written). */
    int (*matmul_dgelu_bwd_lp)(const backend *be, be_out dinp, be_in dout, const void *w, be_in pre, be_dtype dt,
                               int BT, int C, int OC);
    /* 1 if GEMMs in dt run on the device's own instructions for it (cpu: bf16 with AVX512-BF16),
     * 0 if they are widened to fp32 (same results, fp32 speed). */
    int (*lp_native)(const backend *be, be_dtype dt);
    /* 1 if every activation entry (norms, activations, attention, rope, dropout, the residual
     * adds: everything that takes be_in/be_out, the GEMMs and the losses aside) reads and writes
     * activations in dt (cuda: bf16 and fp16); 0, or the entry NULL: fp32 only (cpu). The model
     * then has the producers of the activations it keeps for the GEMMs (the norms' outputs, the
     * attention core's, the MLP activation's) write them straight in the GEMMs' 16-bit dtype,
     * not in fp32 rounded by convert afterwards: the same bits, one pass less. */
    int (*acts_in)(const backend *be, be_dtype dt);

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
     * inv_freq_i = r->inv_freq[i] (1 / base^(2i / rot) without rope scaling), i < r2 (r2 <=
     * BE_ROPE_MAX_HALF), c_i = cos(a_i) * r->scale, s_i = sin(a_i) * r->scale:
     *   y[i] = x[i] c_i - x[i + r2] s_i,   y[i + r2] = x[i + r2] c_i + x[i] s_i;
     * dims rot.. hs-1 are unchanged. The angles are rounded as Hugging Face's float32
     * computation rounds them (inv_freq and the product (pos0 + t) * inv_freq in float32; cos
     * and sin of that float32 angle correctly rounded), so positions far from 0 turn as they do
     * in a checkpoint's original framework. pos: (B, T) device ints, the position (>= 0) of row
     * (b, t) (packed documents, --reset-position-ids: positions restart at each document; context
     * parallelism: a rank's chunks lie anywhere in the sequence), used instead of pos0 + t (pos0
     * must be 0); NULL: pos0 + t. */
    /* x rotated in place (written). */
    void (*rope_fwd)(const backend *be, be_out x, int B, int T, int ld, int nh, int hs, int rot, const be_rope *r,
                     int pos0, const int32_t *pos);
    /* dx rotated back in place: WRITES dx = R^T dx (the rotation by -a_i; not +=). */
    void (*rope_bwd)(const backend *be, be_out dx, int B, int T, int ld, int nh, int hs, int rot, const be_rope *r,
                     int pos0, const int32_t *pos);

    /* ---- self-attention core, grouped-query: NH local query heads, NKV local key/value
     * heads (NH % NKV == 0; NKV = NH is multi-head attention), head size HS, C = NH * HS ---- */
    /* q: rows (B, T) of stride ldq, each holding the NH query heads, head h at columns h*HS..;
     * k, v: rows (B, T) of stride ldkv, each holding NKV heads. Query head h attends with
     * key/value head h / (NH / NKV). A fused GPT-2 qkv (B, T, 3C) with rows [q | k | v] is
     * q = qkv, k = qkv + C, v = qkv + 2C, ldq = ldkv = 3C.
     * out (B, T, C) written: head h at columns h*HS... att = softmax(q k^T / sqrt(HS)) over keys
     * [0, t] of query t (causal: klen NULL), or over keys [0, klen[b]) for every query of sample b
     * (bidirectional with a padding mask: klen (B) device ints in [1, T]). Packed documents
     * (Megatron's --reset-attention-mask): seg (B, T) device ints, causal only (klen NULL), the
     * first position of the document token t of sample b belongs to, so query t reads keys
     * [seg[b T + t], t]; each row's seg is non-decreasing with seg[b T + t] in [0, t]. seg NULL:
     * one document (today's causal attention, bit for bit). Then dropout (drop,
     * unit = (drop->unit0 + h) * T + key position; NULL or p = 0: none),
     * out = att . v. lse (B, NH, T) written: the log-sum-exp of each score row, which is all the
     * backward needs (it recomputes the probabilities; no (T, T) buffer is kept). Caller
     * buffers: out B*T*C floats, lse B*NH*T floats; cpu scratch is per thread and reused
     * (64*T floats forward, 3x that backward). */
    void (*attention_fwd)(const backend *be, be_out out, float *lse, be_in q, be_in k, be_in v, int ldq, int ldkv,
                          int B, int T, int NH, int NKV, int HS, const int32_t *klen, const int32_t *seg,
                          const be_drop *drop);
    /* dq (rows of stride ldq) +=, dk, dv (rows of stride ldkv) += the gradients w.r.t. q, k, v
     * (any may be NULL; the other columns of their rows are untouched); dk and dv of a key/value
     * head receive the sum over the query heads that share it, in a fixed order (deterministic).
     * dout (B, T, C); q, k, v, lse, strides, klen, seg, drop as in the forward. dq, dk, dv may be
     * parts of one fused buffer (disjoint columns). out: the forward's out (B, T, C) as the caller
     * kept it (its dtype may be the GEMMs' 16-bit one), or p NULL. A backend that needs the
     * softmax backward's row term D = dout . out takes it from there instead of running the
     * forward again (cuda); one that has the probabilities at hand ignores it (cpu). */
    void (*attention_bwd)(const backend *be, be_out dq, be_out dk, be_out dv, be_in dout, be_in out, be_in q,
                          be_in k, be_in v, const float *lse, int ldq, int ldkv, int B, int T, int NH, int NKV,
                          int HS, const int32_t *klen, const int32_t *seg, const be_drop *drop);

    /* ---- attention of a block of queries against a block of keys (context parallelism) ----
     * The pieces of attention_fwd/bwd over one sequence of Tg tokens whose query rows and key
     * rows live in blocks (a rank's load-balanced chunks, a key/value block passed round a ring
     * or gathered). q: rows (B, Tq) of stride ldq, the queries at global positions qpos[0..Tq);
     * k, v: rows (B, Tk) of stride ldkv, the keys and values at global positions kpos[0..Tk).
     * qpos (Tq), kpos (Tk): device ints, strictly increasing, in [0, Tg), the same for every
     * sample (a rank's chunks i and 2C-1-i in order are fine: increasing, not contiguous). Heads,
     * GQA and strides as attention_fwd. Masks by global position: causal (klen NULL: the query at
     * p reads keys at positions <= p), bidirectional (klen (B) device ints in [1, Tg]: keys at
     * positions < klen[b]), packed documents (seg (B, Tq) device ints, causal only: the global
     * start of each query row's document, non-decreasing along the rows, <= the row's position:
     * keys at positions in [seg, p]). Dropout as attention_fwd's over the whole sequence, bit for
     * bit: row position drop->pos0 + qpos[i], unit (drop->unit0 + h) * Tg + kpos[j]. */
    /* out (B, Tq, C) written: the attention of each query row over the keys of THIS block it
     * reads, normalised over them (then dropped: the multipliers of those keys); lse (B, NH, Tq)
     * written: the log-sum-exp of the row's scores over those keys. A row that reads no key of
     * the block gets out 0 and lse -inf. Merging the blocks of a row with attention_merge gives
     * attention_fwd's out and lse (dropout acts on each probability alone, so the merge's
     * rescaling by exp(lse_block - lse) turns each block's probabilities into the global ones). */
    void (*attention_block_fwd)(const backend *be, be_out out, float *lse, be_in q, be_in k, be_in v, int ldq,
                                int ldkv, int B, int Tq, int Tk, int Tg, const int32_t *qpos, const int32_t *kpos,
                                int NH, int NKV, int HS, const int32_t *klen, const int32_t *seg, const be_drop *drop);
    /* dq +=, dk +=, dv += (any may be NULL; other columns untouched) the gradients of this
     * (query block, key block) pair, with lse and D (B, NH, Tq) the rows' GLOBAL log-sum-exp
     * (merged over every key block) and D = attention_delta(dout, merged out). dq: rows (B, Tq)
     * of stride ldq; dk, dv: rows (B, Tk) of stride ldkv. Summed over all key blocks of a
     * sequence it is attention_bwd's gradient (to fp32 rounding: D comes from out, not from the
     * probabilities). Everything else as attention_block_fwd. */
    void (*attention_block_bwd)(const backend *be, be_out dq, be_out dk, be_out dv, be_in dout, be_in q, be_in k,
                                be_in v, const float *lse, const float *D, int ldq, int ldkv, int B, int Tq, int Tk,
                                int Tg, const int32_t *qpos, const int32_t *kpos, int NH, int NKV, int HS,
                                const int32_t *klen, const int32_t *seg, const be_drop *drop);
    /* (out, lse) <- the exact merge of (out, lse) and (out_part, lse_part), in place: out (B, T,
     * NH * HS), lse (B, NH, T) rows of one query's results over two disjoint key sets:
     * lse' = log(e^lse + e^lse_part), out' = e^(lse - lse') out + e^(lse_part - lse') out_part.
     * A side at -inf contributes nothing (both -inf: unchanged, out stays what it was). Start
     * from the first block's (out, lse), or from out 0 and lse -inf. */
    void (*attention_merge)(const backend *be, be_out out, float *lse, be_in out_part, const float *lse_part, int B,
                            int T, int NH, int HS);
    /* D (B, NH, T) written = sum over the head's HS columns of dout * out, per row and head:
     * the softmax backward's row term, from the merged out, for attention_block_bwd. */
    void (*attention_delta)(const backend *be, float *D, be_in dout, be_in out, int B, int T, int NH, int HS);

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
    /* bias_bwd and convert from one read of dout: db (C) += the column sums of dout (N, C) as
     * bias_bwd sums them, and rounded (N, C) written = dout converted to rounded.dt as convert
     * rounds it (the bits of the two calls). Optional: NULL, the two calls (be_matmul_bwd's
     * 16-bit path, where dout is rounded for the GEMMs anyway: one pass over an fp32 gradient
     * instead of two). */
    void (*bias_bwd_to)(const backend *be, float *db, be_out rounded, be_in dout, int N, int C);

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
    /* The four steps in one pass over the logits, for a vocabulary not split (tensor-parallel size
     * 1: vstart 0, the slice's values are the global ones): maxv, sumexp, tlogit and losses written
     * as ce_max, ce_sumexp, ce_target and ce_loss would (the sum of exps in another order: equal
     * within rounding). Optional: NULL, tp_cross_entropy_fwd runs the four steps. */
    void (*ce_fwd_fused)(const backend *be, float *losses, float *maxv, float *sumexp, float *tlogit, be_in logits,
                         const int32_t *targets, int BT, int Vloc, int Vreal);
    /* losses (BT) written = log(sumexp) + maxv - tlogit (all global). */
    void (*ce_loss)(const backend *be, float *losses, const float *maxv, const float *sumexp, const float *tlogit,
                    int BT);
    /* In place, one pass: logits (BT, Vloc) is overwritten (WRITES, not +=) with
     * dlogits = (exp(logit - maxv) / sumexp - [target == vstart + j]) * dloss[i] for the real
     * columns j < Vreal, and exactly 0 for the padded ones.
     * maxv, sumexp: the global ones; dloss (BT): d(total loss)/d(loss of row i). */
    void (*ce_bwd)(const backend *be, be_out logits, const float *maxv, const float *sumexp, const int32_t *targets,
                   const float *dloss, int BT, int Vloc, int Vreal, int vstart);
    /* ce_bwd out of place: dlogits (BT, Vloc) written with, element for element, the fp32 value
     * ce_bwd would leave in logits, rounded into dlogits' dtype as convert rounds (fp32: the same
     * bits); logits (fp32) is read, not changed. Optional: NULL, be_ce_head_bwd runs ce_bwd in
     * place and rounds its result with convert. A run that multiplies in 16 bits hands the LM
     * head's GEMMs their output gradient with it, never as fp32 (docs/backend.md). */
    void (*ce_bwd_to)(const backend *be, be_out dlogits, be_in logits, const float *maxv, const float *sumexp,
                      const int32_t *targets, const float *dloss, int BT, int Vloc, int Vreal, int vstart);

    /* ---- optimizer, on a contiguous slice of n elements ---- */
    /* PyTorch AdamW, step >= 1 (count including this one): with g' = g * gscale,
     * p -= lr*wd*p; m = b1 m + (1-b1) g'; v = b2 v + (1-b2) g'^2;
     * p -= lr/(1-b1^step) * m / (sqrt(v)/sqrt(1-b2^step) + eps). p, m, v updated in place. */
    void (*adamw)(const backend *be, float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1,
                  float beta2, float eps, float wd, float gscale, int64_t step);
    /* adamw on count slices at once (slice i: p[i], g[i], m[i], v[i] of n[i] elements, weight decay
     * wd[i]; the arrays host memory, the buffers device memory; the other arguments one step's),
     * each element the same bits as adamw gives it: a model's tensors in a launch or two, not one
     * each. Optional: NULL, be_adamw_many calls adamw a slice at a time. */
    void (*adamw_many)(const backend *be, float *const *p, const float *const *g, float *const *m, float *const *v,
                       const size_t *n, const float *wd, int count, float lr, float beta1, float beta2, float eps,
                       float gscale, int64_t step);
    /* Sum of squares of x (n), accumulated in double. Returns it to the host (waits for the queue). */
    double (*sumsq)(const backend *be, const float *x, size_t n);
    /* out[i] (host, count) = sumsq(x[i], n[i]) for each of count slices (x, n: host arrays of device
     * pointers and lengths), each the value sumsq gives (the same bits), waiting for the queue
     * once, not once a slice: the gradient norm over a model's tensors. Optional: NULL,
     * be_sumsq_many calls sumsq a slice at a time. */
    void (*sumsq_many)(const backend *be, double *out, const float *const *x, const size_t *n, int count);

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
    /* The most device memory this backend's allocations held at once since it was created, in
     * bytes (the trainer holds it to its memory prediction). Optional: NULL for a backend whose
     * memory is the process's (cpu: its peak RSS is measured instead). */
    size_t (*mem_peak)(const backend *be);
    /* The device's memory in bytes, and in *in_use (when not NULL) the bytes in use on it now by
     * every process (contexts, pools): what `trident plan --calibrate` records as a device's memory
     * and what is held besides the model. Optional: NULL for a backend whose memory is the host's
     * (cpu: /proc/meminfo and the process's RSS are read). */
    size_t (*mem_capacity)(const backend *be, size_t *in_use);
    /* The device memory this backend allocates for its libraries' workspaces in a run at its
     * gemm_dtype (cuBLASLt's epilogue workspace in a 16-bit run), in bytes: what the memory
     * prediction adds to the model's own. Optional: NULL for none (cpu). */
    size_t (*lib_workspace_bytes)(const backend *be);
};


/* The routers' score functions (moe_route_fwd) and the most experts a router may choose among. */
enum { BE_MOE_SOFTMAX, BE_MOE_SIGMOID };
#define BE_MOE_MAX_EXPERTS 1024

/* ---- time per kernel family, for the trainer's breakdown of an iteration ----
 * When be->stats is set, every be_<entry> wrapper (backend.h) adds the time between two events, one
 * recorded before the entry and one after (be_tic, be_toc), to the family of the entry (and,
 * for GEMMs and attention, its model FLOPs). On cpu the events are wall-clock stamps around a
 * call that runs to completion; on a device backend they are points of its queue, and reading
 * one waits for it (stats are for measurement runs). */
typedef enum {
    BE_OP_GEMM,         /* matmul_fwd, matmul_bwd */
    BE_OP_ATTENTION,    /* attention_fwd, attention_bwd, the block entries, merge, delta */
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

/* A timed kernel of an asynchronous backend whose events are not read yet (be_toc, be_stats_flush). */
typedef struct be_pending {
    be_event t0, t1;
    int op; /* be_op */
} be_pending;

typedef struct be_stats {
    double seconds[BE_OP_COUNT];
    double flops[BE_OP_COUNT]; /* GEMM: 2 m n k per product; attention: Megatron's count (4 B s^2 h
                                * forward, twice that backward, causal mask ignored) */
    int64_t calls[BE_OP_COUNT];
    /* On an asynchronous backend (event_query set) reading a kernel's events waits for it, which
     * would leave the device idle while the host enqueues the next: be_toc queues the events here
     * instead, and be_stats_flush reads them all (seconds complete only after it). Empty on cpu. */
    be_pending *pending;
    int npending, cap;
} be_stats;


/* A backend: its vtable and a small context, the same for every implementation. Stateless
 * otherwise: every kernel is a pure function of its arguments (scratch, if any, is the
 * implementation's own). What one implementation needs besides (cpu: its thread count and ISA
 * build; CUDA: library handles, an event pool) lives behind impl, in its own folder. */
struct backend {
    const struct be_ops *ops;
    void *queue; /* the one ordered queue every entry is enqueued on (CUDA: a cudaStream_t);
                  * cpu: NULL, every entry runs before it returns */
    int device;  /* a device backend: its device ordinal; cpu: -1 */
    void *impl;  /* the implementation's own state (cpu: cpu_state, src/backend/cpu/cpu.h) */
    be_stats *stats; /* NULL, or where the wrappers add kernel times (see be_stats) */
    /* Mixed precision (mixed.c): BE_F32, or the dtype every be_matmul_fwd/bwd multiplies in
     * (be_set_gemm_dtype); the weights' copies in it. */
    be_dtype gemm_dtype;
    struct be_lowp *lowp;
    /* Run after every wrapped entry (be_toc): what the caller registered with be_set_progress (the
     * parallel floor: buckets and stage sends whose events have passed start, and communication
     * in flight moves on); NULL: nothing. */
    void (*progress)(void *ctx);
    void *progress_ctx;
    /* The staging of comm transfers when ops->host_alloc is set (xfer.c); NULL when comm is direct. */
    struct xfer_state *xfer;
};

/* ---- which entries a backend must fill ----
 * Every entry of struct be_ops, by name and place, in declaration order; `optional` marks the
 * ones a backend may leave NULL, and what then happens is in their contract above (destroy:
 * nothing to free; matmul_grouped_fwd/bwd: be_matmul_grouped_* runs matmul_fwd/bwd group by
 * group). This table (backend.c) is the one list of optional entries: be_create refuses a backend
 * missing any other, docs/backend.md names the same ones, and unit/test_backend_contract holds
 * the table to the struct, the cpu backend to the table and the page to the table. */
typedef struct be_op_entry {
    const char *name; /* the member's name */
    size_t offset;    /* offsetof(struct be_ops, name) */
    int optional;     /* 1: may be NULL */
} be_op_entry;
extern const be_op_entry BE_OP_ENTRIES[];
extern const int BE_OP_NENTRIES;
/* The name of the first entry `ops` leaves NULL that BE_OP_ENTRIES does not mark optional, or
 * NULL when every required entry is there. */
const char *be_ops_missing(const struct be_ops *ops);

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
