/* Calling a backend: what the model, parallel and other floors include. be_create and be_free,
 * events, and a timed wrapper per entry of the contract (be_ops.h: the vtable, its types and
 * rules): be_<entry>(be, ...) calls be->ops-><entry>(be, ...), adds its time to be->stats when
 * set, and runs the progress hook a caller registered (be_set_progress). The wrappers take `float *` (fp32) where the
 * vtable takes typed buffers. Private to the floors that call a backend (CMakeLists.txt:
 * TRIDENT_BACKEND_CALLERS). */
#ifndef TRIDENT_BACKEND_H
#define TRIDENT_BACKEND_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "trident/activation.h"
#include "trident/check.h"
#include "trident/timer.h"
#include "be_ops.h"
#include "xfer.h"

/* A short name of a family ("GEMM", "attention", ...). */
const char *be_op_name(be_op op);

/* ---- the backends of this binary (registry.c) ---- */
/* A backend by name (be_backend_names; "cpu", "cuda" where built with it), or "auto" (be_auto_name:
 * cuda when built with it and a GPU is visible, else cpu). nthreads_or_device is the cpu's thread
 * count (0: OpenMP's default) or, for a device backend, 0: this rank's device (the local rank
 * modulo the visible devices, be_device_for_rank), d > 0: device d - 1 (with "auto" the number
 * counts only when it runs the cpu). An unknown name exits 2 with the list. */
backend *be_create(const char *name, int nthreads_or_device);
/* 1 if `name` is a backend of this binary, or "auto". */
int be_backend_known(const char *name);
/* The backends of this binary, ", " between them ("cpu" or "cpu, cuda"). */
const char *be_backend_names(void);
/* The backend "auto" stands for on this machine (any other name is returned as it is). */
const char *be_auto_name(const char *name);
/* Devices the backend `name` can run on here: cpu 1; cuda the visible GPUs (CUDA_VISIBLE_DEVICES
 * honoured), 0 when this binary has no CUDA, there is no driver or no GPU; an unknown name 0.
 * Never ends the process: the GPU tests ask it to skip. */
int be_backend_devices(const char *name);
/* 1 if this binary was built with the CUDA backend. */
int be_have_cuda(void);
/* --comm for --backend backend_flag (xfer_comm_choose with the backend resolved, the build's CUDA and
 * the GPUs this process sees): 1 nccl, 0 mpi; --comm nccl that cannot work exits 2. Collective over
 * world; before be_create. */
struct comm;
int be_comm_choose(const char *flag, const char *backend_flag, const struct comm *world);
/* fp32 GEMMs may round their inputs to TF32 (--tf32): a device backend's tensor cores then run
 * them several times faster, at about 1e-3 relative error; off (the default) they are IEEE fp32,
 * held to the CPU's. The cpu backend has no TF32: a no-op there. */
void be_set_tf32(backend *be, int on);

/* ---- device backends: what needs no device (device.c) ---- */
/* This process's rank among the processes of its node as the launcher says
 * (OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID, MPI_LOCALRANKID, PMI_LOCAL_RANK); 0 when none is set
 * (started alone) or it is not a number. */
int be_local_rank(void);
/* The device a process of local rank `local` takes among `ndev` visible ones: local modulo ndev,
 * so that several ranks share a device when there are more ranks than devices; -1 when ndev < 1. */
int be_device_for_rank(int local, int ndev);
/* What --backend auto runs: "cuda" when cuda_built and cuda_devices > 0, else "cpu". */
const char *be_auto_choice(int cuda_built, int cuda_devices);
/* The out-of-memory line of a device backend (out, len bytes): what was being allocated, `asked`
 * bytes (0: not known), the device's free and total bytes, and the flags that need less memory. */
void be_oom_message(char *out, size_t len, const char *what, size_t asked, size_t free_b, size_t total_b);
/* Waits for the queue, frees the backend's state (destroy), its mixed-precision copies and the
 * struct. NULL is a no-op. */
void be_free(backend *be);
/* 1 if this binary has the CPU kernel build `name` (baseline, avx2, avx512) and this CPU runs it;
 * else 0 with the reason written to why (len bytes). *best (when best is not NULL) = the build
 * the cpu backend takes when TRIDENT_CPU_ISA is unset. */
int be_cpu_isa_runs(const char *name, const char **best, char *why, size_t len);
/* The cpu backend's thread count (OpenMP, and OpenBLAS's); 0 when be is not the cpu backend. */
int be_cpu_threads(const backend *be);
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

/* 1 if everything enqueued before ev was recorded has run (no wait; ev is not released). A backend
 * without event_query (cpu) runs every entry to completion: always 1. */
static inline int be_event_query(const backend *be, const be_event *ev)
{
    return !be->ops->event_query || be->ops->event_query(be, ev);
}
/* Releases an event recorded for be_event_query once it is no longer needed (cpu: nothing to do). */
static inline void be_event_release(const backend *be, be_event *ev)
{
    if (be->ops->event_release) be->ops->event_release(be, ev);
    ev->h = NULL;
}
/* hook(ctx) runs after every wrapped entry from now on (NULL: nothing): the parallel floor's
 * (trident/overlap.h), which starts the transfers whose events have passed and lets communication
 * in flight move on between kernels. */
static inline void be_set_progress(backend *be, void (*hook)(void *ctx), void *ctx)
{
    be->progress = hook;
    be->progress_ctx = ctx;
}

/* ---- wrappers: be_<entry>(be, ...) calls be->ops-><entry>(be, ...), timed into be->stats ---- */
/* Fp32 callers: the wrappers take float * and pass it as an fp32 typed buffer. */
static inline be_event be_tic(const backend *be)
{
    be_event e = {0.0, NULL};
    if (be->stats) be->ops->event_record(be, &e);
    return e;
}
/* Ends every wrapped kernel: the registered progress hook runs (be_set_progress), so a rank
 * computing does not hold back the transfers it started. */
void be_stats_defer(be_stats *st, be_event t0, be_event t1, be_op op);
static inline void be_toc(const backend *be, be_op op, be_event t0, double flops)
{
    if (be->progress) be->progress(be->progress_ctx);
    if (!be->stats) return;
    be_event t1 = be_event_record(be);
    be->stats->flops[op] += flops;
    be->stats->calls[op]++;
    if (be->ops->event_query) be_stats_defer(be->stats, t0, t1, op); /* asynchronous: read later, no wait */
    else be->stats->seconds[op] += be->ops->event_elapsed(be, &t0, &t1);
}
/* Reads the events be_toc queued on an asynchronous backend (waiting for the last of them) into
 * st's seconds, and releases them. The trainer calls it once an iteration, after its end. */
void be_stats_flush(const backend *be, be_stats *st);

static inline void *be_alloc(const backend *be, size_t bytes)
{
    void *p = be->ops->alloc(be, bytes);
    if (be->xfer) xfer_note_alloc(be, p, bytes); /* staged comm: its mirrors go with it */
    return p;
}
static inline void be_dfree(const backend *be, void *p)
{
    if (be->xfer) xfer_note_free(be, p);
    be->ops->free(be, p);
}
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
/* The largest slice of rows of a rounded output gradient the backward makes at once (the rest in
 * further slices): 64 MiB on cpu, 1 GiB on a device backend. */
size_t be_lowp_chunk_bytes(const backend *be);
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
/* be_matmul_bwd_in with the output gradient typed: fp32, or already in the gemm dtype (read as it
 * is, no rounding pass; db then sums its 16-bit values). */
void be_matmul_bwd_lpout(const backend *be, float *dinp, float *dw, float *db, be_in dout, be_in inp, const float *w,
                         int BT, int C, int OC);
/* A 16-bit run's GPT MLP (tanh GeLU after a biased fc, nothing between) in two products where the
 * backend has the entries (matmul_gelu_fwd_lp, matmul_dgelu_bwd_lp):
 *  - be_matmul_gelu_fwd: pre (BT, OC) = inp . W^T + b and act = gelu of it, both written in the
 *    gemm dtype by one product; 1 when done, 0 (nothing written) where the run is fp32 or the
 *    backend lacks or refuses it: the caller then runs the GEMM and bias_gelu_fwd;
 *  - be_matmul_dgelu_bwd, for a forward be_matmul_gelu_fwd did: the next layer's (fc2's, W (OC,
 *    C)) backward from dout (BT, OC, fp32) with act (BT, C) its input: dw += dout^T act, and dpre
 *    (BT, C, gemm dtype) written = (dout . W) * gelu'(pre), by the DGELU product where the backend
 *    takes it, else by the product into tmp (BT, C fp32 scratch) and act_bwd. */
int be_matmul_gelu_fwd(const backend *be, void *act, void *pre, be_in inp, const float *w, const float *b, int BT,
                       int C, int OC);
void be_matmul_dgelu_bwd(const backend *be, void *dpre, float *tmp, float *dw, const float *dout, be_in act,
                         const float *w, const void *pre, int BT, int C, int OC);
/* be_matmul_fwd_in with the output typed: fp32, or in the gemm dtype on a backend whose activations
 * may be (be_acts_in): a 16-bit run's logits, half the bytes. */
void be_matmul_fwd_to(const backend *be, be_out out, be_in inp, const float *w, const float *b, int BT, int C, int OC);
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
/* Whether the backend's activation entries write and read dt (be_ops.h: acts_in). */
static inline int be_acts_in(const backend *be, be_dtype dt)
{
    return dt == BE_F32 || (be->ops->acts_in && be->ops->acts_in(be, dt));
}
/* The norms, the activations and the attention core writing a typed output (out.dt: fp32, or one
 * be_acts_in accepts); the float * forms below write fp32. */
static inline void be_layernorm_fwd_to(const backend *be, be_out out, float *mean, float *rstd, const float *inp,
                                       const float *w, const float *b, int N, int C, float eps)
{
    be_event t0 = be_tic(be);
    be->ops->layernorm_fwd(be, out, mean, rstd, be_f32(inp), w, b, N, C, eps);
    be_toc(be, BE_OP_LAYERNORM, t0, 0);
}
static inline void be_layernorm_fwd(const backend *be, float *out, float *mean, float *rstd, const float *inp,
                                    const float *w, const float *b, int N, int C, float eps)
{
    be_layernorm_fwd_to(be, be_f32_out(out), mean, rstd, inp, w, b, N, C, eps);
}
static inline void be_layernorm_bwd(const backend *be, float *dinp, float *dw, float *db, const float *dout,
                                    const float *inp, const float *w, const float *mean, const float *rstd, int N,
                                    int C)
{
    be_event t0 = be_tic(be);
    be->ops->layernorm_bwd(be, be_f32_out(dinp), dw, db, be_f32(dout), be_f32(inp), w, mean, rstd, N, C);
    be_toc(be, BE_OP_LAYERNORM, t0, 0);
}
static inline void be_rmsnorm_fwd_to(const backend *be, be_out out, float *rstd, const float *inp, const float *w,
                                     int N, int C, float eps)
{
    be_event t0 = be_tic(be);
    be->ops->rmsnorm_fwd(be, out, rstd, be_f32(inp), w, N, C, eps);
    be_toc(be, BE_OP_LAYERNORM, t0, 0);
}
static inline void be_rmsnorm_fwd(const backend *be, float *out, float *rstd, const float *inp, const float *w,
                                  int N, int C, float eps)
{
    be_rmsnorm_fwd_to(be, be_f32_out(out), rstd, inp, w, N, C, eps);
}
static inline void be_rmsnorm_bwd(const backend *be, float *dinp, float *dw, const float *dout, const float *inp,
                                  const float *w, const float *rstd, int N, int C)
{
    be_event t0 = be_tic(be);
    be->ops->rmsnorm_bwd(be, be_f32_out(dinp), dw, be_f32(dout), be_f32(inp), w, rstd, N, C);
    be_toc(be, BE_OP_LAYERNORM, t0, 0);
}
/* r filled with the plain rotary frequencies of (rot, base), rounded as Hugging Face's float32
 * computation rounds them (1 / base^(2i / rot), the power in double), scale 1. */
static inline void be_rope_plain(be_rope *r, int rot, float base)
{
    for (int i = 0; i < rot / 2 && i < BE_ROPE_MAX_HALF; i++)
        r->inv_freq[i] = 1.0f / (float)pow((double)base, (double)((float)(2 * i) / (float)rot));
    r->scale = 1.0f;
}
/* Rotary positions of rows (b, t) by the frequencies r: pos (B, T) device ints, or NULL: pos0 + t. */
static inline void be_rope_fwd_freq(const backend *be, float *x, int B, int T, int ld, int nh, int hs, int rot,
                                    const be_rope *r, int pos0, const int32_t *pos)
{
    be_event t0 = be_tic(be);
    be->ops->rope_fwd(be, be_f32_out(x), B, T, ld, nh, hs, rot, r, pos0, pos);
    be_toc(be, BE_OP_ROPE, t0, 0);
}
static inline void be_rope_bwd_freq(const backend *be, float *dx, int B, int T, int ld, int nh, int hs, int rot,
                                    const be_rope *r, int pos0, const int32_t *pos)
{
    be_event t0 = be_tic(be);
    be->ops->rope_bwd(be, be_f32_out(dx), B, T, ld, nh, hs, rot, r, pos0, pos);
    be_toc(be, BE_OP_ROPE, t0, 0);
}
/* The same with the plain frequencies of base. */
static inline void be_rope_fwd_at(const backend *be, float *x, int B, int T, int ld, int nh, int hs, int rot,
                                  float base, int pos0, const int32_t *pos)
{
    be_rope r;
    be_rope_plain(&r, rot, base);
    be_rope_fwd_freq(be, x, B, T, ld, nh, hs, rot, &r, pos0, pos);
}
static inline void be_rope_bwd_at(const backend *be, float *dx, int B, int T, int ld, int nh, int hs, int rot,
                                  float base, int pos0, const int32_t *pos)
{
    be_rope r;
    be_rope_plain(&r, rot, base);
    be_rope_bwd_freq(be, dx, B, T, ld, nh, hs, rot, &r, pos0, pos);
}
static inline void be_rope_fwd(const backend *be, float *x, int B, int T, int ld, int nh, int hs, int rot,
                               float base, int pos0)
{
    be_rope_fwd_at(be, x, B, T, ld, nh, hs, rot, base, pos0, NULL);
}
static inline void be_rope_bwd(const backend *be, float *dx, int B, int T, int ld, int nh, int hs, int rot,
                               float base, int pos0)
{
    be_rope_bwd_at(be, dx, B, T, ld, nh, hs, rot, base, pos0, NULL);
}
/* Model FLOPs are Megatron's count (4 B s^2 h forward) whatever the mask. seg: packed documents
 * (be_ops.h), NULL: none. */
static inline void be_attention_fwd_to(const backend *be, be_out out, float *lse, const float *q, const float *k,
                                       const float *v, int ldq, int ldkv, int B, int T, int NH, int NKV, int HS,
                                       const int32_t *klen, const int32_t *seg, const be_drop *drop)
{
    be_event t0 = be_tic(be);
    be->ops->attention_fwd(be, out, lse, be_f32(q), be_f32(k), be_f32(v), ldq, ldkv, B, T, NH, NKV, HS, klen, seg,
                          drop);
    be_toc(be, BE_OP_ATTENTION, t0, 4.0 * B * T * (double)T * NH * HS);
}
static inline void be_attention_fwd_seg(const backend *be, float *out, float *lse, const float *q, const float *k,
                                        const float *v, int ldq, int ldkv, int B, int T, int NH, int NKV, int HS,
                                        const int32_t *klen, const int32_t *seg, const be_drop *drop)
{
    be_attention_fwd_to(be, be_f32_out(out), lse, q, k, v, ldq, ldkv, B, T, NH, NKV, HS, klen, seg, drop);
}
/* out: the forward's out as kept (be_ops.h: a backend may take D from it), or p NULL. */
static inline void be_attention_bwd_out(const backend *be, float *dq, float *dk, float *dv, const float *dout,
                                        be_in out, const float *q, const float *k, const float *v, const float *lse,
                                        int ldq, int ldkv, int B, int T, int NH, int NKV, int HS,
                                        const int32_t *klen, const int32_t *seg, const be_drop *drop)
{
    be_event t0 = be_tic(be);
    be->ops->attention_bwd(be, be_f32_out(dq), be_f32_out(dk), be_f32_out(dv), be_f32(dout), out, be_f32(q),
                          be_f32(k), be_f32(v), lse, ldq, ldkv, B, T, NH, NKV, HS, klen, seg, drop);
    be_toc(be, BE_OP_ATTENTION, t0, 8.0 * B * T * (double)T * NH * HS);
}
static inline void be_attention_bwd_seg(const backend *be, float *dq, float *dk, float *dv, const float *dout,
                                        const float *q, const float *k, const float *v, const float *lse, int ldq,
                                        int ldkv, int B, int T, int NH, int NKV, int HS, const int32_t *klen,
                                        const int32_t *seg, const be_drop *drop)
{
    be_attention_bwd_out(be, dq, dk, dv, dout, be_f32(NULL), q, k, v, lse, ldq, ldkv, B, T, NH, NKV, HS, klen, seg,
                         drop);
}
static inline void be_attention_fwd_masked(const backend *be, float *out, float *lse, const float *q, const float *k,
                                           const float *v, int ldq, int ldkv, int B, int T, int NH, int NKV, int HS,
                                           const int32_t *klen, const be_drop *drop)
{
    be_attention_fwd_seg(be, out, lse, q, k, v, ldq, ldkv, B, T, NH, NKV, HS, klen, NULL, drop);
}
static inline void be_attention_bwd_masked(const backend *be, float *dq, float *dk, float *dv, const float *dout,
                                           const float *q, const float *k, const float *v, const float *lse, int ldq,
                                           int ldkv, int B, int T, int NH, int NKV, int HS, const int32_t *klen,
                                           const be_drop *drop)
{
    be_attention_bwd_seg(be, dq, dk, dv, dout, q, k, v, lse, ldq, ldkv, B, T, NH, NKV, HS, klen, NULL, drop);
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
/* A block of queries against a block of keys, fp32 (be_ops.h: attention_block_fwd). Model FLOPs
 * 4 B Tq Tk h whatever the mask: summed over a sequence's blocks, Megatron's count. */
static inline void be_attention_block_fwd(const backend *be, float *out, float *lse, const float *q, const float *k,
                                          const float *v, int ldq, int ldkv, int B, int Tq, int Tk, int Tg,
                                          const int32_t *qpos, const int32_t *kpos, int NH, int NKV, int HS,
                                          const int32_t *klen, const int32_t *seg, const be_drop *drop)
{
    be_event t0 = be_tic(be);
    be->ops->attention_block_fwd(be, be_f32_out(out), lse, be_f32(q), be_f32(k), be_f32(v), ldq, ldkv, B, Tq, Tk, Tg,
                                 qpos, kpos, NH, NKV, HS, klen, seg, drop);
    be_toc(be, BE_OP_ATTENTION, t0, 4.0 * B * Tq * (double)Tk * NH * HS);
}
/* The gradients of one (query block, key block) pair from the global lse and D (be_ops.h). */
static inline void be_attention_block_bwd(const backend *be, float *dq, float *dk, float *dv, const float *dout,
                                          const float *q, const float *k, const float *v, const float *lse,
                                          const float *D, int ldq, int ldkv, int B, int Tq, int Tk, int Tg,
                                          const int32_t *qpos, const int32_t *kpos, int NH, int NKV, int HS,
                                          const int32_t *klen, const int32_t *seg, const be_drop *drop)
{
    be_event t0 = be_tic(be);
    be->ops->attention_block_bwd(be, be_f32_out(dq), be_f32_out(dk), be_f32_out(dv), be_f32(dout), be_f32(q),
                                 be_f32(k), be_f32(v), lse, D, ldq, ldkv, B, Tq, Tk, Tg, qpos, kpos, NH, NKV, HS, klen,
                                 seg, drop);
    be_toc(be, BE_OP_ATTENTION, t0, 8.0 * B * Tq * (double)Tk * NH * HS);
}
/* (out, lse) <- their exact merge with (out_part, lse_part) (be_ops.h: attention_merge). */
static inline void be_attention_merge(const backend *be, float *out, float *lse, const float *out_part,
                                      const float *lse_part, int B, int T, int NH, int HS)
{
    be_event t0 = be_tic(be);
    be->ops->attention_merge(be, be_f32_out(out), lse, be_f32(out_part), lse_part, B, T, NH, HS);
    be_toc(be, BE_OP_ATTENTION, t0, 0);
}
/* D (B, NH, T) = rowsum(dout * out) a head (be_ops.h: attention_delta). */
static inline void be_attention_delta(const backend *be, float *D, const float *dout, const float *out, int B, int T,
                                      int NH, int HS)
{
    be_event t0 = be_tic(be);
    be->ops->attention_delta(be, D, be_f32(dout), be_f32(out), B, T, NH, HS);
    be_toc(be, BE_OP_ATTENTION, t0, 0);
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
static inline void be_act_fwd_to(const backend *be, int act, int glu, be_out out, const float *inp, int N, int F)
{
    be_event t0 = be_tic(be);
    be->ops->act_fwd(be, act, glu, out, be_f32(inp), N, F);
    be_toc(be, BE_OP_GELU, t0, 0);
}
static inline void be_act_fwd(const backend *be, int act, int glu, float *out, const float *inp, int N, int F)
{
    be_act_fwd_to(be, act, glu, be_f32_out(out), inp, N, F);
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
static inline void be_bias_gelu_fwd_to(const backend *be, be_out out, const float *inp, const float *b, int N,
                                       int C)
{
    be_event t0 = be_tic(be);
    be->ops->bias_gelu_fwd(be, out, be_f32(inp), b, N, C);
    be_toc(be, BE_OP_GELU, t0, 0);
}
static inline void be_bias_gelu_fwd(const backend *be, float *out, const float *inp, const float *b, int N, int C)
{
    be_bias_gelu_fwd_to(be, be_f32_out(out), inp, b, N, C);
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
static inline void be_ce_max(const backend *be, float *maxv, be_in logits, int BT, int Vloc, int Vreal)
{
    be_event t0 = be_tic(be);
    be->ops->ce_max(be, maxv, logits, BT, Vloc, Vreal);
    be_toc(be, BE_OP_CROSSENTROPY, t0, 0);
}
static inline void be_ce_sumexp(const backend *be, float *sumexp, be_in logits, const float *maxv, int BT, int Vloc,
                                int Vreal)
{
    be_event t0 = be_tic(be);
    be->ops->ce_sumexp(be, sumexp, logits, maxv, BT, Vloc, Vreal);
    be_toc(be, BE_OP_CROSSENTROPY, t0, 0);
}
static inline void be_ce_target(const backend *be, float *tlogit, be_in logits, const int32_t *targets, int BT,
                                int Vloc, int vstart)
{
    be_event t0 = be_tic(be);
    be->ops->ce_target(be, tlogit, logits, targets, BT, Vloc, vstart);
    be_toc(be, BE_OP_CROSSENTROPY, t0, 0);
}
/* ce_fwd_fused when the backend has it (1), else nothing (0): the caller runs the four steps.
 * logits typed (fp32, or a 16-bit run's logits in the gemm dtype). */
static inline int be_ce_fwd_fused(const backend *be, float *losses, float *maxv, float *sumexp, float *tlogit,
                                  be_in logits, const int32_t *targets, int BT, int V, int Vreal)
{
    if (!be->ops->ce_fwd_fused) return 0;
    be_event t0 = be_tic(be);
    be->ops->ce_fwd_fused(be, losses, maxv, sumexp, tlogit, logits, targets, BT, V, Vreal);
    be_toc(be, BE_OP_CROSSENTROPY, t0, 0);
    return 1;
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
/* An LM head's backward with its cross-entropy's: be_ce_bwd over logits (BT, Vloc), then
 * be_matmul_bwd_in with that as the output gradient (dinp, dw accumulated; no bias). In a run that
 * multiplies in 16 bits, with the backend's ce_bwd_to, the gradient goes straight into the GEMMs'
 * 16-bit scratch a slice of rows at a time (the same values, rounded as the GEMMs would round
 * them) and logits is left as it was; otherwise logits holds the gradient after, as be_ce_bwd's.
 * logits: fp32, or (a 16-bit run with ce_bwd_to) in the gemm dtype. */
void be_ce_head_bwd(const backend *be, float *dinp, float *dw, be_out logits, const float *maxv,
                    const float *sumexp, const int32_t *targets, const float *dloss, be_in inp, const float *w, int BT,
                    int C, int Vloc, int Vreal, int vstart);
static inline void be_adamw(const backend *be, float *p, const float *g, float *m, float *v, size_t n, float lr,
                            float beta1, float beta2, float eps, float wd, float gscale, int64_t step)
{
    be_event t0 = be_tic(be);
    be->ops->adamw(be, p, g, m, v, n, lr, beta1, beta2, eps, wd, gscale, step);
    be_toc(be, BE_OP_OPTIMIZER, t0, 0);
}
/* adamw on count slices (be_ops.h: adamw_many), or a slice at a time where the backend lacks it. */
static inline void be_adamw_many(const backend *be, float *const *p, const float *const *g, float *const *m,
                                 float *const *v, const size_t *n, const float *wd, int count, float lr, float beta1,
                                 float beta2, float eps, float gscale, int64_t step)
{
    if (count <= 0) return;
    be_event t0 = be_tic(be);
    if (be->ops->adamw_many)
        be->ops->adamw_many(be, p, g, m, v, n, wd, count, lr, beta1, beta2, eps, gscale, step);
    else
        for (int i = 0; i < count; i++)
            be->ops->adamw(be, p[i], g[i], m[i], v[i], n[i], lr, beta1, beta2, eps, wd[i], gscale, step);
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
/* out[i] = be_sumsq(x[i], n[i]) for count slices, through sumsq_many (one wait for the queue) where
 * the backend has it, else a slice at a time; the same values either way. */
static inline void be_sumsq_many(const backend *be, double *out, const float *const *x, const size_t *n, int count)
{
    if (count <= 0) return;
    if (!be->ops->sumsq_many) {
        for (int i = 0; i < count; i++) out[i] = be_sumsq(be, x[i], n[i]);
        return;
    }
    be_event t0 = be_tic(be);
    be->ops->sumsq_many(be, out, x, n, count);
    be_toc(be, BE_OP_OPTIMIZER, t0, 0);
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

#endif
