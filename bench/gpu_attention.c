/* Attention alone on one backend (issue 35: the tensor-core kernels against the CUDA-core ones and
 * PyTorch's scaled_dot_product_attention; bench/gpu_speed.sh runs it with and without
 * TRIDENT_CUDA_ATTENTION=simt, beside `gpu_speed_peer.py attention`):
 *   gpu_attention [--backend cuda|cpu] [--batch 16] [--seq 1024] [--heads 12] [--groups 12]
 *                 [--head-size 64] [--dtype bf16|fp16|fp32] [--reps 20] [--bf16-run]
 * Causal self-attention over q, k, v interleaved in one row as the model's fused QKV. Times
 * attention_fwd and attention_bwd (dq, dk, dv) with the backend's events, the best of `reps`
 * after one warm-up, and prints "attention fwd_ms X fwd_tflops Y bwd_ms X bwd_tflops Y
 * bwd_rerun_ms Z" with FlashAttention's FLOP count (forward 4 B H T^2 d / 2 for causal, backward
 * 2.5 times it). bwd is the backward as training calls it, given the forward's out; bwd_rerun
 * the backward without it (D from the forward run again).
 * --bf16-run: the backend multiplies in bf16 (be_set_gemm_dtype), as a --bf16 training run does:
 * with --dtype fp32 that is the attention such a run gets (fp32 activations, bf16 products). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"

static void usage_die(const char *why)
{
    fprintf(stderr,
            "gpu_attention: %s\nusage: gpu_attention [--backend cuda|cpu] [--batch N] [--seq N] [--heads N] "
            "[--groups N] [--head-size N] [--dtype bf16|fp16|fp32] [--reps N] [--bf16-run]\n",
            why);
    exit(2);
}

static uint16_t to_bf16(float x)
{
    uint32_t w;
    memcpy(&w, &x, 4);
    return (uint16_t)((w + 0x7fffu + ((w >> 16) & 1)) >> 16);
}

/* n random values in [-1, 1) of dtype dt, in backend memory. */
static void *random_buffer(backend *be, be_dtype dt, size_t n, unsigned *seed)
{
    size_t es = be_dtype_size(dt);
    void *host = malloc(n * es);
    float *f32 = malloc(n * sizeof(float));
    if (!host || !f32) usage_die("out of host memory");
    for (size_t i = 0; i < n; i++) {
        *seed = *seed * 1664525u + 1013904223u;
        f32[i] = (float)(*seed >> 8) / (float)(1u << 24) * 2.0f - 1.0f;
    }
    void *d = be->ops->alloc(be, n * es);
    if (dt == BE_F32) {
        be->ops->copy_bytes(be, d, f32, n * es, BE_H2D);
    } else {
        for (size_t i = 0; i < n; i++) ((uint16_t *)host)[i] = to_bf16(f32[i]); /* fp16: convert below */
        if (dt == BE_BF16) {
            be->ops->copy_bytes(be, d, host, n * es, BE_H2D);
        } else {
            void *tmp = be->ops->alloc(be, n * sizeof(float));
            be->ops->copy_bytes(be, tmp, f32, n * sizeof(float), BE_H2D);
            be->ops->convert(be, d, BE_F16, tmp, BE_F32, n);
            be->ops->free(be, tmp);
        }
    }
    free(host);
    free(f32);
    return d;
}

int main(int argc, char **argv)
{
    const char *bk = "cuda", *dts = "bf16";
    int B = 16, T = 1024, NH = 12, NKV = -1, HS = 64, reps = 20, bf16_run = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--bf16-run")) {
            bf16_run = 1;
            continue;
        }
        if (i + 1 >= argc) usage_die("every option takes a value");
        const char *v = argv[++i];
        if (!strcmp(a, "--backend")) bk = v;
        else if (!strcmp(a, "--dtype")) dts = v;
        else if (!strcmp(a, "--batch")) B = atoi(v);
        else if (!strcmp(a, "--seq")) T = atoi(v);
        else if (!strcmp(a, "--heads")) NH = atoi(v);
        else if (!strcmp(a, "--groups")) NKV = atoi(v);
        else if (!strcmp(a, "--head-size")) HS = atoi(v);
        else if (!strcmp(a, "--reps")) reps = atoi(v);
        else usage_die("unknown option");
    }
    if (NKV < 0) NKV = NH;
    be_dtype dt = !strcmp(dts, "bf16") ? BE_BF16 : !strcmp(dts, "fp16") ? BE_F16 : !strcmp(dts, "fp32") ? BE_F32 : -1;
    if ((int)dt < 0) usage_die("--dtype: bf16, fp16 or fp32");
    if (B < 1 || T < 1 || NH < 1 || NKV < 1 || NH % NKV || HS < 1 || reps < 1)
        usage_die("sizes must be positive, the heads a multiple of the groups");
    backend *be = be_create(bk, 0);
    if (bf16_run) be_set_gemm_dtype(be, BE_BF16);
    const int C = NH * HS, ld = (NH + 2 * NKV) * HS;
    unsigned seed = 12345;
    size_t nrow = (size_t)B * T;
    void *qkv = random_buffer(be, dt, nrow * ld, &seed);
    void *dout = random_buffer(be, dt, nrow * C, &seed);
    void *out = be->ops->alloc(be, nrow * C * be_dtype_size(dt));
    void *dqkv = be->ops->alloc(be, nrow * ld * be_dtype_size(dt));
    be->ops->set_bytes(be, dqkv, 0, nrow * ld * be_dtype_size(dt));
    float *lse = be->ops->alloc(be, (size_t)B * NH * T * sizeof(float));
    size_t es = be_dtype_size(dt);
    be_in q = {qkv, dt}, k = {(char *)qkv + C * es, dt}, v = {(char *)qkv + (size_t)(C + NKV * HS) * es, dt};
    be_out o = {out, dt}, dq = {dqkv, dt}, dk = {(char *)dqkv + C * es, dt},
           dv = {(char *)dqkv + (size_t)(C + NKV * HS) * es, dt};
    be_in gin = {dout, dt}, oin = {out, dt}, nout = {NULL, dt};
    double fwd = 1e30, bwd = 1e30, bwd_rerun = 1e30;
    for (int r = 0; r <= reps; r++) {
        be_event a = be_event_record(be);
        be->ops->attention_fwd(be, o, lse, q, k, v, ld, ld, B, T, NH, NKV, HS, NULL, NULL, NULL);
        be_event b = be_event_record(be), b2 = be_event_record(be);
        /* as training calls it: D from the kept out */
        be->ops->attention_bwd(be, dq, dk, dv, gin, oin, q, k, v, lse, ld, ld, B, T, NH, NKV, HS, NULL, NULL, NULL);
        be_event c = be_event_record(be), c2 = be_event_record(be);
        /* without out: D from the forward run again (the context-parallel a2a path) */
        be->ops->attention_bwd(be, dq, dk, dv, gin, nout, q, k, v, lse, ld, ld, B, T, NH, NKV, HS, NULL, NULL, NULL);
        be_event e = be_event_record(be);
        double tf = be_event_elapsed(be, &a, &b), tb = be_event_elapsed(be, &b2, &c);
        double tr = be_event_elapsed(be, &c2, &e);
        if (r > 0) { /* the first is the warm-up */
            fwd = tf < fwd ? tf : fwd;
            bwd = tb < bwd ? tb : bwd;
            bwd_rerun = tr < bwd_rerun ? tr : bwd_rerun;
        }
    }
    double flops = 4.0 * B * NH * (double)T * T * HS / 2.0;
    const char *kern = getenv("TRIDENT_CUDA_ATTENTION");
    printf("attention backend %s dtype %s%s B %d T %d heads %d groups %d head_size %d kernels %s\n", bk, dts,
           bf16_run ? " (a bf16 run)" : "", B, T, NH, NKV, HS, kern && *kern ? kern : "default");
    printf("attention fwd_ms %.4f fwd_tflops %.2f bwd_ms %.4f bwd_tflops %.2f bwd_rerun_ms %.4f\n", fwd * 1e3,
           flops / fwd / 1e12, bwd * 1e3, 2.5 * flops / bwd / 1e12, bwd_rerun * 1e3);
    be_free(be);
    return 0;
}
