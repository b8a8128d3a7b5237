/* The CUDA backend's attention and MoE entries (src/backend/cuda/attention.cu, moe.cu) against
 * the CPU backend on the same fresh random inputs: attention_fwd/bwd (causal, padded and packed,
 * grouped-query, fused and separate q/k/v rows, dropout, head sizes 64, 80, 128 and 256, sequence
 * lengths 1, 7, 33, 40, 129, 200 and 513; fp32, bf16 and fp16; bf16 cases on the CUDA-core and
 * the tensor-core kernels), attention_kv_fwd (the decode step;
 * fp32 and a bf16 cache), the router (every score function), its losses and the permutes.
 * Error measure: the max-norm relative error max_i |gpu_i - cpu_i| / max_i |cpu_i| of each
 * output buffer; fp32 within 1e-5, bf16 and fp16 within 1e-2 (the CPU computes in fp32 on the
 * same rounded inputs). The attention dropout's mask is checked bit for bit against be_drop_keep
 * (be_ops.h) itself: with q = 0 and v the identity, out = mask / T exactly, on both backends.
 * Bytes that must not be read (padded keys, cache positions past the step) are NaN, so a
 * kernel reading them fails; columns a fused layout leaves to others must come back unchanged.
 * Before any device is touched it checks that cuda_fill_attention_moe fills exactly its entries
 * and that the entries refuse what the kernels cannot do (head size past 256, more than 1024
 * experts, a decode step past the cache) before they launch anything; then it exits 77
 * (skipped), saying why, where the binary has no CUDA backend or no GPU is visible. Built only
 * with the CUDA backend (tests/gpu/attention_moe.cmake). */
#include <math.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/check.h"
#include "trident/philox.h"
#include "backend/backend.h"

/* backend.h declares it once the backend core is merged (the devices backend `name` sees); the same
 * declaration here, so that this file compiles before. */
int be_backend_devices(const char *name);
/* src/backend/cuda/cuda_impl.h (private, and needs cuda_runtime.h): attention.cu's share of the vtable. */
void cuda_fill_attention_moe(struct be_ops *ops);

#define SKIP 77
#define TOL32 1e-5
#define TOL16 1e-2

static backend *cpu, *gpu;
static int failures, checks;
static uint64_t stream_next = 1; /* a fresh Philox stream for each random tensor */

/* ---- host tensors and transfers ---- */

static void rnd(float *x, size_t n, float lo, float hi)
{
    uint64_t s = stream_next++;
    for (size_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * td_philox_uniform(4242, s, i);
}
static float *rnd_new(size_t n, float lo, float hi)
{
    float *x = td_xmalloc((n ? n : 1) * sizeof(float));
    rnd(x, n, lo, hi);
    return x;
}
static float *dup(const float *x, size_t n)
{
    float *y = td_xmalloc((n ? n : 1) * sizeof(float));
    memcpy(y, x, n * sizeof(float));
    return y;
}

/* x (n floats) rounded to dt in place (the values both backends then see); dt BE_F32: as is. */
static void round_to(float *x, size_t n, be_dtype dt)
{
    if (dt == BE_F32) return;
    uint16_t *h = td_xmalloc((n ? n : 1) * 2);
    cpu->ops->convert(cpu, h, dt, x, BE_F32, n);
    cpu->ops->convert(cpu, x, BE_F32, h, dt, n);
    free(h);
}

/* Device buffer d (n elements of dt) = x (n floats) converted to dt. */
static void put(void *d, const float *x, size_t n, be_dtype dt)
{
    void *h = td_xmalloc((n ? n : 1) * be_dtype_size(dt));
    cpu->ops->convert(cpu, h, dt, x, BE_F32, n);
    be_memcpy(gpu, d, h, n * be_dtype_size(dt), BE_H2D);
    free(h);
}
/* A device copy of x (n floats) in dtype dt. */
static void *up(const float *x, size_t n, be_dtype dt)
{
    void *d = be_alloc(gpu, (n ? n : 1) * be_dtype_size(dt));
    put(d, x, n, dt);
    return d;
}
#ifndef TD_CUDA_EMU
/* The bytes of device buffer d (new host memory). */
static void *raw(const void *d, size_t bytes)
{
    void *h = td_xmalloc(bytes ? bytes : 1);
    be_memcpy(gpu, h, d, bytes, BE_D2H);
    return h;
}
#endif
static void *up_bytes(const void *x, size_t bytes)
{
    void *d = be_alloc(gpu, bytes ? bytes : 1);
    be_memcpy(gpu, d, x, bytes, BE_H2D);
    return d;
}
/* The device buffer d (n elements of dt) as host floats (new). */
static float *down(const void *d, size_t n, be_dtype dt)
{
    size_t bytes = (n ? n : 1) * be_dtype_size(dt);
    void *h = td_xmalloc(bytes);
    float *x = td_xmalloc((n ? n : 1) * sizeof(float));
    be_memcpy(gpu, h, d, n * be_dtype_size(dt), BE_D2H);
    cpu->ops->convert(cpu, x, BE_F32, h, dt, n);
    free(h);
    return x;
}

/* ---- checks ---- */

/* Max-norm relative error of g against c (n floats); NaN anywhere in g is an infinite error. */
static double relerr(const float *g, const float *c, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)g[i] - c[i]);
        if (d != d) return INFINITY;
        num = d > num ? d : num;
        den = fabs(c[i]) > den ? fabs(c[i]) : den;
    }
    return den > 0 ? num / den : num;
}

static void expect(const char *name, const char *what, double err, double tol)
{
    checks++;
    int ok = err <= tol;
    failures += !ok;
    printf("%s %s: %s max-norm relative error %.3g (tolerance %.0e)\n", ok ? "ok  " : "FAIL", name, what, err, tol);
}

static void expect_true(const char *name, const char *what, int ok)
{
    checks++;
    failures += !ok;
    printf("%s %s: %s\n", ok ? "ok  " : "FAIL", name, what);
}

/* ---- attention_fwd / attention_bwd ---- */

typedef struct {
    const char *name;
    int B, T, NH, NKV, HS;
    int padded; /* 1: bidirectional over klen[b] = T - b T / 3 (at least 1); 0: causal; 2: causal
                 * over packed documents (seg: lengths 32, 1, 31, 33, 64, 7, ... from b) */
    int fused;  /* 1: q, k, v columns of one row [q | k | v | 3 spare] (and the gradients too) */
    int grads;  /* bits: 1 dq, 2 dk, 4 dv (the others NULL) */
    float p;    /* attention dropout */
    be_dtype dt;
} att_case;

/* Set while the GPU backend multiplies in bf16 (be_set_gemm_dtype: a --bf16 run): fp32 q, k, v then
 * go through the tensor-core kernels, rounded to bf16 as they load, so the 16-bit tolerance applies. */
static int g_bf16_run;

static void run_attention(const att_case *c)
{
#ifdef TD_CUDA_EMU
    /* the host emulation (tests/gpu/cuda_emu.cmake) runs a kernel a thread at a time: a sequence
     * past 160 rows is cut to 130 (four 32-row tiles and two rows, two 64-row tiles and two), the
     * case otherwise the same, and its name says so */
    att_case cut = *c;
    char cut_name[160];
    if (c->T > 160) {
        cut.T = 130;
        snprintf(cut_name, sizeof cut_name, "%s (T %d emulated)", c->name, cut.T);
        cut.name = cut_name;
        c = &cut;
    }
#endif
    const int B = c->B, T = c->T, NH = c->NH, NKV = c->NKV, HS = c->HS, C = NH * HS;
    const int ldq = c->fused ? (NH + 2 * NKV) * HS + 3 : C, ldkv = c->fused ? ldq : NKV * HS;
    const size_t nq = (size_t)B * T * ldq, nkv = (size_t)B * T * ldkv, no = (size_t)B * T * C;
    const size_t nl = (size_t)B * NH * T;
    double tol = c->dt == BE_F32 && !g_bf16_run ? TOL32 : TOL16;
    /* inputs: q, k, v in one buffer when fused, else three; padded keys NaN */
    float *qb = rnd_new(nq, -1.5f, 1.5f), *kb = c->fused ? qb : rnd_new(nkv, -1.5f, 1.5f);
    float *vb = c->fused ? qb : rnd_new(nkv, -1.5f, 1.5f);
    size_t koff = c->fused ? (size_t)C : 0, voff = c->fused ? (size_t)(NH + NKV) * HS : 0;
    int32_t klen[8];
    for (int b = 0; b < B; b++) klen[b] = T - b * T / 3 > 0 ? T - b * T / 3 : 1;
    static const int doclen[6] = {32, 1, 31, 33, 64, 7};
    int32_t *seg = td_xmalloc((size_t)B * T * sizeof(int32_t));
    for (int b = 0; b < B; b++)
        for (int t = 0, s0 = 0, k = b, left = doclen[b % 6]; t < T; t++, left--) {
            if (left == 0) s0 = t, left = doclen[++k % 6];
            seg[(size_t)b * T + t] = s0;
        }
    const int32_t *klen_c = c->padded == 1 ? klen : NULL, *seg_c = c->padded == 2 ? seg : NULL;
    if (c->padded == 1) /* padding only: packed rows read every key up to their own */
        for (int b = 0; b < B; b++)
            for (int t = klen[b]; t < T; t++)
                for (int d = 0; d < NKV * HS; d++) {
                    kb[((size_t)b * T + t) * ldkv + koff + d] = NAN;
                    vb[((size_t)b * T + t) * ldkv + voff + d] = NAN;
                }
    float *dout = rnd_new(no, -1.0f, 1.0f);
    float *gq = rnd_new(nq, -0.5f, 0.5f), *gk = c->fused ? gq : rnd_new(nkv, -0.5f, 0.5f);
    float *gv = c->fused ? gq : rnd_new(nkv, -0.5f, 0.5f);
    round_to(qb, nq, c->dt), round_to(dout, no, c->dt), round_to(gq, nq, c->dt);
    if (!c->fused) {
        round_to(kb, nkv, c->dt), round_to(vb, nkv, c->dt);
        round_to(gk, nkv, c->dt), round_to(gv, nkv, c->dt);
    }
    int64_t sample[8];
    for (int b = 0; b < B; b++) sample[b] = b % 2 ? ((int64_t)1 << 33) + 11 * b : 5 + b;
    be_drop drop = {.p = c->p, .seed = 777, .sample = sample, .site = 5, .pos0 = 3, .unit0 = 2};

    /* the CPU: fp32 on the same values */
    float *out_c = td_xcalloc(no ? no : 1, sizeof(float)), *lse_c = td_xcalloc(nl, sizeof(float));
    float *gq_c = dup(gq, nq), *gk_c = c->fused ? gq_c : dup(gk, nkv), *gv_c = c->fused ? gq_c : dup(gv, nkv);
    cpu->ops->attention_fwd(cpu, be_f32_out(out_c), lse_c, be_f32(qb), be_f32(kb + koff), be_f32(vb + voff), ldq,
                            ldkv, B, T, NH, NKV, HS, klen_c, seg_c, &drop);
    cpu->ops->attention_bwd(cpu, be_f32_out(c->grads & 1 ? gq_c : NULL), be_f32_out(c->grads & 2 ? gk_c + koff : NULL),
                            be_f32_out(c->grads & 4 ? gv_c + voff : NULL), be_f32(dout), be_f32(NULL), be_f32(qb),
                            be_f32(kb + koff), be_f32(vb + voff), lse_c, ldq, ldkv, B, T, NH, NKV, HS,
                            klen_c, seg_c, &drop);

    /* the GPU, in dt */
    size_t es = be_dtype_size(c->dt);
    char *q_d = up(qb, nq, c->dt), *k_d = c->fused ? q_d : up(kb, nkv, c->dt);
    char *v_d = c->fused ? q_d : up(vb, nkv, c->dt);
    char *gq_d = up(gq, nq, c->dt), *gk_d = c->fused ? gq_d : up(gk, nkv, c->dt);
    char *gv_d = c->fused ? gq_d : up(gv, nkv, c->dt);
    void *dout_d = up(dout, no, c->dt), *out_d = be_alloc(gpu, no * es + 1);
    float *lse_d = be_alloc(gpu, nl * sizeof(float));
    int32_t *klen_d = up_bytes(klen, sizeof(int32_t) * B), *seg_d = up_bytes(seg, sizeof(int32_t) * B * T);
    const int32_t *klen_g = c->padded == 1 ? klen_d : NULL, *seg_g = c->padded == 2 ? seg_d : NULL;
    be_drop drop_d = drop;
    drop_d.sample = up_bytes(sample, sizeof(int64_t) * B);
    be_in q_in = {q_d, c->dt}, k_in = {k_d + koff * es, c->dt}, v_in = {v_d + voff * es, c->dt};
    be_out out_o = {out_d, c->dt};
    gpu->ops->attention_fwd(gpu, out_o, lse_d, q_in, k_in, v_in, ldq, ldkv, B, T, NH, NKV, HS,
                            klen_g, seg_g, &drop_d);
    be_out dq_o = {c->grads & 1 ? gq_d : NULL, c->dt}, dk_o = {c->grads & 2 ? gk_d + koff * es : NULL, c->dt};
    be_out dv_o = {c->grads & 4 ? gv_d + voff * es : NULL, c->dt};
    be_in dout_in = {dout_d, c->dt}, out_in = {out_d, c->dt}, no_out = {NULL, c->dt};
    float *out_g = down(out_d, no, c->dt), *lse_g = down(lse_d, nl, BE_F32);
    expect(c->name, "out", relerr(out_g, out_c, no), tol);
    expect(c->name, "lse", relerr(lse_g, lse_c, nl), tol);
    /* the backward without out first (D from the forward run again), then with it as training
     * passes it (D from out); each from the same starting gradients, held to the cpu's */
    gpu->ops->attention_bwd(gpu, dq_o, dk_o, dv_o, dout_in, no_out, q_in, k_in, v_in, lse_d, ldq, ldkv, B, T, NH, NKV,
                            HS, klen_g, seg_g, &drop_d);
    float *gq_r = down(gq_d, nq, c->dt);
    expect(c->name, c->fused ? "d[q|k|v] without out (D by the forward again)" : "dq without out (D by the forward again)",
           relerr(gq_r, gq_c, nq), tol);
    if (!c->fused) {
        float *gk_r = down(gk_d, nkv, c->dt), *gv_r = down(gv_d, nkv, c->dt);
        expect(c->name, "dk without out", relerr(gk_r, gk_c, nkv), tol);
        expect(c->name, "dv without out", relerr(gv_r, gv_c, nkv), tol);
        free(gk_r), free(gv_r);
    }
    free(gq_r);
    put(gq_d, gq, nq, c->dt);
    if (!c->fused) put(gk_d, gk, nkv, c->dt), put(gv_d, gv, nkv, c->dt);
    gpu->ops->attention_bwd(gpu, dq_o, dk_o, dv_o, dout_in, out_in, q_in, k_in, v_in, lse_d, ldq, ldkv, B, T, NH, NKV,
                            HS, klen_g, seg_g, &drop_d);
    float *gq_g = down(gq_d, nq, c->dt);
    if (c->fused) {
        expect(c->name, "d[q|k|v] (fused rows)", relerr(gq_g, gq_c, nq), tol);
        int spare = 1; /* the 3 spare columns of every row: nobody's */
        for (size_t r = 0; r < (size_t)B * T; r++)
            for (int j = ldq - 3; j < ldq; j++) spare &= memcmp(&gq_g[r * ldq + j], &gq[r * ldq + j], 4) == 0;
        expect_true(c->name, "spare columns of the fused gradient rows untouched", spare);
    } else {
        float *gk_g = down(gk_d, nkv, c->dt), *gv_g = down(gv_d, nkv, c->dt);
        expect(c->name, "dq", relerr(gq_g, gq_c, nq), tol);
        expect(c->name, "dk", relerr(gk_g, gk_c, nkv), tol);
        expect(c->name, "dv", relerr(gv_g, gv_c, nkv), tol);
        free(gk_g), free(gv_g);
    }
    free(out_g), free(lse_g), free(gq_g);
#ifndef TD_CUDA_EMU /* the emulation runs the blocks one after another: the same bits by construction */
    /* the backward again from the same gradients: the same bits (fixed-order sums, no atomics) */
    size_t bq = nq * es, bkv = c->fused ? 0 : nkv * es;
    char *r1 = raw(gq_d, bq), *r1k = raw(gk_d, bkv), *r1v = raw(gv_d, bkv);
    put(gq_d, gq, nq, c->dt);
    if (!c->fused) put(gk_d, gk, nkv, c->dt), put(gv_d, gv, nkv, c->dt);
    gpu->ops->attention_bwd(gpu, dq_o, dk_o, dv_o, dout_in, out_in, q_in, k_in, v_in, lse_d, ldq, ldkv, B, T, NH, NKV,
                            HS, klen_g, seg_g, &drop_d);
    char *r2 = raw(gq_d, bq), *r2k = raw(gk_d, bkv), *r2v = raw(gv_d, bkv);
    expect_true(c->name, "a second backward gives the same bits",
                !memcmp(r1, r2, bq) && !memcmp(r1k, r2k, bkv) && !memcmp(r1v, r2v, bkv));
    free(r1), free(r1k), free(r1v), free(r2), free(r2k), free(r2v);
#endif
    be_dfree(gpu, q_d), be_dfree(gpu, gq_d), be_dfree(gpu, dout_d), be_dfree(gpu, out_d), be_dfree(gpu, lse_d);
    be_dfree(gpu, klen_d), be_dfree(gpu, seg_d), be_dfree(gpu, (void *)drop_d.sample);
    free(seg);
    if (!c->fused) be_dfree(gpu, k_d), be_dfree(gpu, v_d), be_dfree(gpu, gk_d), be_dfree(gpu, gv_d);
    free(out_c), free(lse_c), free(gq_c), free(qb), free(dout), free(gq);
    if (!c->fused) free(gk_c), free(gv_c), free(kb), free(vb), free(gk), free(gv);
}

/* The attention core's output as a --bf16 run keeps it (fp32 q, k, v; out straight in bf16, be_ops.h
 * acts_in): the same bits as the fp32 out rounded by convert, on the tensor cores (a bf16 run) and
 * on the CUDA-core kernels (TRIDENT_CUDA_ATTENTION-free: an fp32 run with a bf16 out). */
static void run_kept_out(int bf16_run)
{
    const int B = 2, T = 130, NH = 4, NKV = 2, HS = 64, C = NH * HS, ld = (NH + 2 * NKV) * HS;
    const size_t nq = (size_t)B * T * ld, no = (size_t)B * T * C;
    float *qkv = rnd_new(nq, -1.5f, 1.5f);
    char *q_d = up(qkv, nq, BE_F32);
    float *o32 = be_alloc(gpu, no * 4), *lse = be_alloc(gpu, (size_t)B * NH * T * 4);
    void *o16 = be_alloc(gpu, no * 2), *r16 = be_alloc(gpu, no * 2);
    be_in q = {q_d, BE_F32}, k = {q_d + (size_t)C * 4, BE_F32}, v = {q_d + (size_t)(C + NKV * HS) * 4, BE_F32};
    if (bf16_run) gpu->gemm_dtype = BE_BF16; /* be_set_gemm_dtype is once a backend */
    gpu->ops->attention_fwd(gpu, be_f32_out(o32), lse, q, k, v, ld, ld, B, T, NH, NKV, HS, NULL, NULL, NULL);
    gpu->ops->attention_fwd(gpu, (be_out){o16, BE_BF16}, lse, q, k, v, ld, ld, B, T, NH, NKV, HS, NULL, NULL, NULL);
    if (bf16_run) gpu->gemm_dtype = BE_F32;
    gpu->ops->convert(gpu, r16, BE_BF16, o32, BE_F32, no);
    char *h1 = td_xmalloc(no * 2), *h2 = td_xmalloc(no * 2);
    be_memcpy(gpu, h1, o16, no * 2, BE_D2H);
    be_memcpy(gpu, h2, r16, no * 2, BE_D2H);
    expect_true(bf16_run ? "kept out, a bf16 run (tensor cores)" : "kept out, CUDA cores",
                "out written in bf16 = the fp32 out rounded by convert, bit for bit", !memcmp(h1, h2, no * 2));
    free(h1), free(h2), free(qkv);
    be_dfree(gpu, q_d), be_dfree(gpu, o32), be_dfree(gpu, lse), be_dfree(gpu, o16), be_dfree(gpu, r16);
}

/* The attention dropout mask itself on both backends: q = 0 makes every probability 1/T, v the
 * identity makes out[b, t, h, c] = mask(b, t, h, key c) / (T (1 - p)); kept iff nonzero, held to
 * be_drop_keep at (sample, pos0 + t, (unit0 + h) T + c). */
static void run_mask(void)
{
    const int B = 2, T = 64, NH = 3, NKV = 1, HS = 64, C = NH * HS;
    const size_t nq = (size_t)B * T * C, nkv = (size_t)B * T * HS, no = nq;
    float *q = td_xcalloc(nq, sizeof(float)), *k = rnd_new(nkv, -1, 1), *v = td_xcalloc(nkv, sizeof(float));
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) v[((size_t)b * T + t) * HS + t] = 1.0f;
    int32_t klen[2] = {T, T};
    int64_t sample[2] = {((int64_t)5 << 32) + 3, 12345};
    be_drop drop = {.p = 0.5f, .seed = 0x123456789abcdefULL, .sample = sample, .site = 17, .pos0 = 1000, .unit0 = 5};
    float *out_c = td_xcalloc(no, sizeof(float)), *lse = td_xcalloc((size_t)B * NH * T, sizeof(float));
    cpu->ops->attention_fwd(cpu, be_f32_out(out_c), lse, be_f32(q), be_f32(k), be_f32(v), C, HS, B, T, NH, NKV, HS,
                            klen, NULL, &drop);
    void *q_d = up(q, nq, BE_F32), *k_d = up(k, nkv, BE_F32), *v_d = up(v, nkv, BE_F32);
    void *out_d = be_alloc(gpu, no * 4), *lse_d = be_alloc(gpu, (size_t)B * NH * T * 4);
    be_drop drop_d = drop;
    drop_d.sample = up_bytes(sample, sizeof sample);
    int32_t *klen_d = up_bytes(klen, sizeof klen);
    gpu->ops->attention_fwd(gpu, be_f32_out(out_d), lse_d, be_f32(q_d), be_f32(k_d), be_f32(v_d), C, HS, B, T, NH,
                            NKV, HS, klen_d, NULL, &drop_d);
    float *out_g = down(out_d, no, BE_F32);
    long bad_c = 0, bad_g = 0, kept = 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < NH; h++)
                for (int c = 0; c < HS; c++) {
                    size_t i = ((size_t)b * T + t) * C + (size_t)h * HS + c;
                    int keep = be_drop_keep(&drop, BE_DROP_ATTN, sample[b], drop.pos0 + t,
                                            ((int64_t)drop.unit0 + h) * T + c);
                    kept += keep;
                    bad_c += (out_c[i] != 0) != keep;
                    bad_g += (out_g[i] != 0) != keep;
                }
    long n = (long)B * T * NH * HS;
    char what[160];
    snprintf(what, sizeof what,
             "attention dropout mask = be_drop_keep bit for bit (cpu %ld, cuda %ld of %ld differ; %ld kept)", bad_c,
             bad_g, n, kept);
    expect_true("mask", what, bad_c == 0 && bad_g == 0 && kept > n / 4 && kept < 3 * n / 4);
    be_dfree(gpu, q_d), be_dfree(gpu, k_d), be_dfree(gpu, v_d), be_dfree(gpu, out_d), be_dfree(gpu, lse_d);
    be_dfree(gpu, (void *)drop_d.sample), be_dfree(gpu, klen_d);
    free(q), free(k), free(v), free(out_c), free(lse), free(out_g);
}

/* ---- the context-parallel entries: attention_block_fwd/bwd, attention_merge, attention_delta ---- */

/* lse rows against the CPU's: -inf at the same rows (a row that reads no key of the block), the
 * finite rest within tol. */
static void expect_lse(const char *name, const char *what, const float *g, const float *c, size_t n, double tol)
{
    float *gf = dup(g, n), *cf = dup(c, n);
    int same = 1;
    for (size_t i = 0; i < n; i++) {
        same &= isinf(g[i]) == isinf(c[i]) && (!isinf(c[i]) || c[i] < 0);
        if (isinf(gf[i])) gf[i] = 0;
        if (isinf(cf[i])) cf[i] = 0;
    }
    char line[160];
    snprintf(line, sizeof line, "%s: -inf at the same rows", what);
    expect_true(name, line, same);
    expect(name, what, relerr(gf, cf, n), tol);
    free(gf), free(cf);
}

typedef struct {
    const char *name;
    int B, C, L, rank; /* the sequence Tg = 2 C L; this rank's rows: chunks rank and 2C-1-rank */
    int NH, NKV, HS;
    int mode; /* 0 causal, 1 padded (klen[b] = Tg - b Tg / 3), 2 packed (documents of 13 from b) */
    float p;
    be_dtype dt;
} blk_case;

/* One rank of the load-balanced ring: its queries against every rank's key block in ring order,
 * each block's out and lse, the merges, D and the block backward (accumulated into gradients that
 * start random) on both backends from the same inputs. */
static void run_block(const blk_case *c)
{
    const int B = c->B, Tg = 2 * c->C * c->L, Tq = 2 * c->L, NH = c->NH, NKV = c->NKV, HS = c->HS;
    const int D = NH * HS, KV = NKV * HS, R = c->C;
    const size_t nq = (size_t)B * Tq * D, nkv = (size_t)B * Tq * KV, nl = (size_t)B * NH * Tq;
    double tol = c->dt == BE_F32 ? TOL32 : TOL16;
    size_t es = be_dtype_size(c->dt);
    int32_t *pos = td_xmalloc((size_t)R * Tq * sizeof(int32_t)), klen[8];
    for (int r = 0; r < R; r++)
        for (int i = 0; i < c->L; i++)
            pos[r * Tq + i] = r * c->L + i, pos[r * Tq + c->L + i] = (2 * R - 1 - r) * c->L + i;
    for (int b = 0; b < B; b++) klen[b] = Tg - b * Tg / 3 > 0 ? Tg - b * Tg / 3 : 1;
    int32_t *seg = td_xmalloc((size_t)B * Tq * sizeof(int32_t));
    for (int b = 0; b < B; b++)
        for (int i = 0; i < Tq; i++) {
            int p = pos[c->rank * Tq + i], s0 = (p + b) / 13 * 13 - b;
            seg[(size_t)b * Tq + i] = s0 < 0 ? 0 : s0;
        }
    const int32_t *klen_c = c->mode == 1 ? klen : NULL, *seg_c = c->mode == 2 ? seg : NULL;
    int64_t sample[8];
    for (int b = 0; b < B; b++) sample[b] = 9 + 1000 * b;
    be_drop drop = {.p = c->p, .seed = 4321, .sample = sample, .site = 3, .unit0 = 1};
    float *q = rnd_new(nq, -1.5f, 1.5f), *dout = rnd_new(nq, -1, 1), *gq = rnd_new(nq, -0.5f, 0.5f);
    float *k = rnd_new(R * nkv, -1.5f, 1.5f), *v = rnd_new(R * nkv, -1.5f, 1.5f);
    float *gk = rnd_new(R * nkv, -0.5f, 0.5f), *gv = rnd_new(R * nkv, -0.5f, 0.5f);
    round_to(q, nq, c->dt), round_to(dout, nq, c->dt), round_to(gq, nq, c->dt);
    round_to(k, R * nkv, c->dt), round_to(v, R * nkv, c->dt);
    round_to(gk, R * nkv, c->dt), round_to(gv, R * nkv, c->dt);

    float *out_c = td_xcalloc(nq, sizeof(float)), *lse_c = td_xcalloc(nl, sizeof(float));
    float *po_c = td_xcalloc(nq, sizeof(float)), *pl_c = td_xcalloc(nl, sizeof(float)), *D_c = td_xcalloc(nl, 4);
    float *gq_c = dup(gq, nq), *gk_c = dup(gk, R * nkv), *gv_c = dup(gv, R * nkv);
    void *q_d = up(q, nq, c->dt), *dout_d = up(dout, nq, c->dt), *gq_d = up(gq, nq, c->dt);
    char *k_d = up(k, R * nkv, c->dt), *v_d = up(v, R * nkv, c->dt), *gk_d = up(gk, R * nkv, c->dt);
    char *gv_d = up(gv, R * nkv, c->dt);
    void *out_d = be_alloc(gpu, nq * es), *po_d = be_alloc(gpu, nq * es);
    float *lse_d = be_alloc(gpu, nl * 4), *pl_d = be_alloc(gpu, nl * 4), *D_d = be_alloc(gpu, nl * 4);
    int32_t *pos_d = up_bytes(pos, (size_t)R * Tq * sizeof(int32_t)), *klen_d = up_bytes(klen, sizeof(int32_t) * B);
    int32_t *seg_d = up_bytes(seg, sizeof(int32_t) * B * Tq);
    const int32_t *klen_g = c->mode == 1 ? klen_d : NULL, *seg_g = c->mode == 2 ? seg_d : NULL;
    be_drop drop_d = drop;
    drop_d.sample = up_bytes(sample, sizeof(int64_t) * B);
    const int32_t *qp_c = pos + c->rank * Tq, *qp_g = pos_d + c->rank * Tq;
    be_in q_in = {q_d, c->dt}, dout_in = {dout_d, c->dt};
    char what[96];
    for (int s = 0; s < R; s++) { /* forward: the ring, this rank's own block first */
        int j = ((c->rank - s) % R + R) % R;
        float *o_c = s ? po_c : out_c, *l_c = s ? pl_c : lse_c;
        void *o_d = s ? po_d : out_d;
        float *l_d = s ? pl_d : lse_d;
        cpu->ops->attention_block_fwd(cpu, be_f32_out(o_c), l_c, be_f32(q), be_f32(k + j * nkv), be_f32(v + j * nkv), D,
                                      KV, B, Tq, Tq, Tg, qp_c, pos + j * Tq, NH, NKV, HS, klen_c, seg_c, &drop);
        be_in k_in = {k_d + j * nkv * es, c->dt}, v_in = {v_d + j * nkv * es, c->dt};
        be_out o_o = {o_d, c->dt};
        gpu->ops->attention_block_fwd(gpu, o_o, l_d, q_in, k_in, v_in, D, KV, B, Tq, Tq, Tg, qp_g, pos_d + j * Tq, NH,
                                      NKV, HS, klen_g, seg_g, &drop_d);
        float *o_g = down(o_d, nq, c->dt), *l_g = down(l_d, nl, BE_F32);
        snprintf(what, sizeof what, "block fwd out (keys of rank %d)", j);
        expect(c->name, what, relerr(o_g, o_c, nq), tol);
        snprintf(what, sizeof what, "block fwd lse (keys of rank %d)", j);
        expect_lse(c->name, what, l_g, l_c, nl, tol);
        free(o_g), free(l_g);
        if (!s) continue;
        cpu->ops->attention_merge(cpu, be_f32_out(out_c), lse_c, be_f32(po_c), pl_c, B, Tq, NH, HS);
        be_out acc = {out_d, c->dt};
        be_in part = {po_d, c->dt};
        gpu->ops->attention_merge(gpu, acc, lse_d, part, pl_d, B, Tq, NH, HS);
    }
    float *out_g = down(out_d, nq, c->dt), *lse_g = down(lse_d, nl, BE_F32);
    expect(c->name, "merged out", relerr(out_g, out_c, nq), tol);
    expect_lse(c->name, "merged lse", lse_g, lse_c, nl, tol);
    cpu->ops->attention_delta(cpu, D_c, be_f32(dout), be_f32(out_c), B, Tq, NH, HS);
    be_in out_in = {out_d, c->dt};
    gpu->ops->attention_delta(gpu, D_d, dout_in, out_in, B, Tq, NH, HS);
    float *D_g = down(D_d, nl, BE_F32);
    expect(c->name, "delta D", relerr(D_g, D_c, nl), tol);
    for (int s = 0; s < R; s++) { /* backward: the merged lse and D, gradients into the key block */
        int j = ((c->rank - s) % R + R) % R;
        cpu->ops->attention_block_bwd(cpu, be_f32_out(gq_c), be_f32_out(gk_c + j * nkv), be_f32_out(gv_c + j * nkv),
                                      be_f32(dout), be_f32(q), be_f32(k + j * nkv), be_f32(v + j * nkv), lse_c, D_c,
                                      D, KV, B, Tq, Tq, Tg, qp_c, pos + j * Tq, NH, NKV, HS, klen_c, seg_c, &drop);
        be_in k_in = {k_d + j * nkv * es, c->dt}, v_in = {v_d + j * nkv * es, c->dt};
        be_out dq_o = {gq_d, c->dt}, dk_o = {gk_d + j * nkv * es, c->dt}, dv_o = {gv_d + j * nkv * es, c->dt};
        gpu->ops->attention_block_bwd(gpu, dq_o, dk_o, dv_o, dout_in, q_in, k_in, v_in, lse_d, D_d, D, KV, B, Tq, Tq,
                                      Tg, qp_g, pos_d + j * Tq, NH, NKV, HS, klen_g, seg_g, &drop_d);
    }
    float *gq_g = down(gq_d, nq, c->dt), *gk_g = down(gk_d, R * nkv, c->dt), *gv_g = down(gv_d, R * nkv, c->dt);
    expect(c->name, "block bwd dq (summed over the key blocks)", relerr(gq_g, gq_c, nq), tol);
    expect(c->name, "block bwd dk (every key block)", relerr(gk_g, gk_c, R * nkv), tol);
    expect(c->name, "block bwd dv (every key block)", relerr(gv_g, gv_c, R * nkv), tol);
    free(out_g), free(lse_g), free(D_g), free(gq_g), free(gk_g), free(gv_g);
    be_dfree(gpu, q_d), be_dfree(gpu, dout_d), be_dfree(gpu, gq_d), be_dfree(gpu, k_d), be_dfree(gpu, v_d);
    be_dfree(gpu, gk_d), be_dfree(gpu, gv_d), be_dfree(gpu, out_d), be_dfree(gpu, po_d), be_dfree(gpu, lse_d);
    be_dfree(gpu, pl_d), be_dfree(gpu, D_d), be_dfree(gpu, pos_d), be_dfree(gpu, klen_d), be_dfree(gpu, seg_d);
    be_dfree(gpu, (void *)drop_d.sample);
    free(pos), free(seg), free(q), free(dout), free(gq), free(k), free(v), free(gk), free(gv), free(out_c);
    free(lse_c), free(po_c), free(pl_c), free(D_c), free(gq_c), free(gk_c), free(gv_c);
}

/* ---- attention_kv_fwd ---- */

typedef struct {
    const char *name;
    int B, n, pos0, cap, NH, NKV, HS;
    be_dtype dt; /* of the caches (q and out fp32) */
} kv_case;

static void run_kv(const kv_case *c)
{
    const int B = c->B, n = c->n, NH = c->NH, NKV = c->NKV, HS = c->HS, C = NH * HS, ldq = C + 7;
    const size_t nq = (size_t)B * n * ldq, nc = (size_t)B * c->cap * NKV * HS, no = (size_t)B * n * C;
    float *q = rnd_new(nq, -1.5f, 1.5f), *kc = rnd_new(nc, -1.5f, 1.5f), *vc = rnd_new(nc, -1, 1);
    round_to(kc, nc, c->dt), round_to(vc, nc, c->dt);
    for (int b = 0; b < B; b++) /* positions past the step: never read */
        for (int t = c->pos0 + n; t < c->cap; t++)
            for (int d = 0; d < NKV * HS; d++) {
                kc[((size_t)b * c->cap + t) * NKV * HS + d] = NAN;
                vc[((size_t)b * c->cap + t) * NKV * HS + d] = NAN;
            }
    float *out_c = td_xcalloc(no, sizeof(float));
    cpu->ops->attention_kv_fwd(cpu, be_f32_out(out_c), be_f32(q), be_f32(kc), be_f32(vc), ldq, B, n, c->pos0, c->cap,
                               NH, NKV, HS);
    void *q_d = up(q, nq, BE_F32), *kc_d = up(kc, nc, c->dt), *vc_d = up(vc, nc, c->dt), *out_d = be_alloc(gpu, no * 4);
    be_in kin = {kc_d, c->dt}, vin = {vc_d, c->dt};
    gpu->ops->attention_kv_fwd(gpu, be_f32_out(out_d), be_f32(q_d), kin, vin, ldq, B, n, c->pos0, c->cap, NH, NKV, HS);
    float *out_g = down(out_d, no, BE_F32);
    expect(c->name, "out", relerr(out_g, out_c, no), TOL32); /* the same inputs, fp32 sums */
    be_dfree(gpu, q_d), be_dfree(gpu, kc_d), be_dfree(gpu, vc_d), be_dfree(gpu, out_d);
    free(q), free(kc), free(vc), free(out_c), free(out_g);
}

/* ---- the MoE router and its losses ---- */

typedef struct {
    const char *name;
    int N, E, k, score, pre, bias;
    float scale;
    int ties; /* logits on a grid of 0.5: many exact ties, which go to the lower expert */
} route_case;

static void run_route(const route_case *c)
{
    const int N = c->N, E = c->E, k = c->k;
    const size_t nl = (size_t)N * E, np = (size_t)N * k;
    float *l = rnd_new(nl, -3, 3), *bias = rnd_new(E, -0.3f, 0.3f), *dprobs = rnd_new(np, -1, 1);
    float *dl = rnd_new(nl, -0.2f, 0.2f);
    for (size_t i = 0; c->ties && i < nl; i++) l[i] = roundf(l[i] * 2) / 2;
    int32_t *idx_c = td_xcalloc(np, 4), *idx_g = td_xcalloc(np, 4), *counts = td_xcalloc(E, 4);
    float *probs_c = td_xcalloc(np, 4), *dl_c = dup(dl, nl);
    const float *b = c->bias ? bias : NULL;
    cpu->ops->moe_route_fwd(cpu, idx_c, probs_c, l, b, N, E, k, c->score, c->pre, c->scale);
    cpu->ops->moe_route_bwd(cpu, dl_c, dprobs, l, idx_c, N, E, k, c->score, c->pre, c->scale);
    for (size_t i = 0; i < np; i++) counts[idx_c[i]]++;
    double tokens = N * 1.5;
    double aux_c = cpu->ops->moe_aux_loss(cpu, dl_c, l, counts, N, E, k, c->score, 0.01, tokens, 0.7f);
    double aux0_c = cpu->ops->moe_aux_loss(cpu, NULL, l, counts, N, E, k, c->score, 0.01, tokens, 0.7f);
    double z_c = cpu->ops->moe_z_loss(cpu, dl_c, l, N, E, 0.001, tokens, 1.3f);

    float *l_d = up(l, nl, BE_F32), *bias_d = up(bias, E, BE_F32), *dprobs_d = up(dprobs, np, BE_F32);
    float *dl_d = up(dl, nl, BE_F32), *probs_d = be_alloc(gpu, np * 4);
    int32_t *idx_d = be_alloc(gpu, np * 4), *counts_d = up_bytes(counts, (size_t)E * 4);
    gpu->ops->moe_route_fwd(gpu, idx_d, probs_d, l_d, c->bias ? bias_d : NULL, N, E, k, c->score, c->pre, c->scale);
    /* the backward on the CPU's choice, so that both differentiate the same function */
    int32_t *idxc_d = up_bytes(idx_c, np * 4);
    gpu->ops->moe_route_bwd(gpu, dl_d, dprobs_d, l_d, idxc_d, N, E, k, c->score, c->pre, c->scale);
    double aux_g = gpu->ops->moe_aux_loss(gpu, dl_d, l_d, counts_d, N, E, k, c->score, 0.01, tokens, 0.7f);
    double aux0_g = gpu->ops->moe_aux_loss(gpu, NULL, l_d, counts_d, N, E, k, c->score, 0.01, tokens, 0.7f);
    double z_g = gpu->ops->moe_z_loss(gpu, dl_d, l_d, N, E, 0.001, tokens, 1.3f);
    be_memcpy(gpu, idx_g, idx_d, np * 4, BE_D2H);
    float *probs_g = down(probs_d, np, BE_F32), *dl_g = down(dl_d, nl, BE_F32);
    expect_true(c->name, "top-k choice identical", memcmp(idx_g, idx_c, np * 4) == 0);
    expect(c->name, "probs", relerr(probs_g, probs_c, np), TOL32);
    expect(c->name, "dlogits (route_bwd + aux + z)", relerr(dl_g, dl_c, nl), TOL32);
    expect(c->name, "aux loss", fabs(aux_g - aux_c) / fabs(aux_c), TOL32);
    expect(c->name, "aux loss without gradient", fabs(aux0_g - aux0_c) / fabs(aux0_c), TOL32);
    expect(c->name, "z loss", fabs(z_g - z_c) / fabs(z_c), TOL32);
    be_dfree(gpu, l_d), be_dfree(gpu, bias_d), be_dfree(gpu, dprobs_d), be_dfree(gpu, dl_d), be_dfree(gpu, probs_d);
    be_dfree(gpu, idx_d), be_dfree(gpu, counts_d), be_dfree(gpu, idxc_d);
    free(l), free(bias), free(dprobs), free(dl), free(idx_c), free(idx_g), free(counts), free(probs_c), free(dl_c);
    free(probs_g), free(dl_g);
}

/* ---- the permutes ---- */

static void run_permute(int N, int k, int h)
{
    const size_t nr = (size_t)N * k;
    /* row: every (token, choice) a distinct expert-sorted row, every 5th dropped (-1) */
    int32_t *row = td_xmalloc(nr * 4);
    int R = 0;
    for (size_t i = 0; i < nr; i++) row[i] = i % 5 == 3 ? -1 : R++;
    for (int i = R - 1; i > 0; i--) { /* shuffle the rows (a fixed Philox permutation) */
        int j = (int)td_philox_below(99, 7, (uint64_t)i, (uint64_t)i + 1), t = -1, a = -1, bb = -1;
        for (size_t m = 0; m < nr; m++) a = row[m] == i ? (int)m : a, bb = row[m] == j ? (int)m : bb;
        t = row[a], row[a] = row[bb], row[bb] = t;
    }
    const size_t nx = (size_t)N * h, ne = (size_t)(R + 2) * h; /* 2 spare rows nobody writes */
    float *x = rnd_new(nx, -1, 1), *xe = rnd_new(ne, -1, 1), *dx = rnd_new(nx, -1, 1), *dxe = rnd_new(ne, -1, 1);
    float *probs = rnd_new(nr, 0, 1), *ye = rnd_new(ne, -1, 1), *dout = rnd_new(nx, -1, 1);
    float *xe_c = dup(xe, ne), *dx_c = dup(dx, nx), *out_c = rnd_new(nx, -1, 1), *dye_c = dup(xe, ne);
    float *dprobs_c = rnd_new(nr, -1, 1);
    cpu->ops->moe_permute(cpu, xe_c, x, row, N, k, h);
    cpu->ops->moe_permute_bwd(cpu, dx_c, dxe, row, N, k, h);
    cpu->ops->moe_unpermute(cpu, out_c, ye, row, probs, N, k, h);
    cpu->ops->moe_unpermute_bwd(cpu, dye_c, dprobs_c, dout, ye, row, probs, N, k, h);
    float *x_d = up(x, nx, BE_F32), *xe_d = up(xe, ne, BE_F32), *dx_d = up(dx, nx, BE_F32);
    float *dxe_d = up(dxe, ne, BE_F32);
    float *probs_d = up(probs, nr, BE_F32), *ye_d = up(ye, ne, BE_F32), *dout_d = up(dout, nx, BE_F32);
    float *out_d = be_alloc(gpu, nx * 4), *dye_d = up(xe, ne, BE_F32), *dprobs_d = be_alloc(gpu, nr * 4);
    int32_t *row_d = up_bytes(row, nr * 4);
    gpu->ops->moe_permute(gpu, xe_d, x_d, row_d, N, k, h);
    gpu->ops->moe_permute_bwd(gpu, dx_d, dxe_d, row_d, N, k, h);
    gpu->ops->moe_unpermute(gpu, out_d, ye_d, row_d, probs_d, N, k, h);
    gpu->ops->moe_unpermute_bwd(gpu, dye_d, dprobs_d, dout_d, ye_d, row_d, probs_d, N, k, h);
    float *xe_g = down(xe_d, ne, BE_F32), *dx_g = down(dx_d, nx, BE_F32), *out_g = down(out_d, nx, BE_F32);
    float *dye_g = down(dye_d, ne, BE_F32), *dprobs_g = down(dprobs_d, nr, BE_F32);
    char name[64];
    snprintf(name, sizeof name, "permute N %d k %d h %d", N, k, h);
    expect_true(name, "xe (copies, spare rows untouched) bit for bit", memcmp(xe_g, xe_c, ne * 4) == 0);
    expect(name, "dx", relerr(dx_g, dx_c, nx), TOL32);
    expect(name, "unpermute out", relerr(out_g, out_c, nx), TOL32);
    expect(name, "dye (spare rows untouched)", relerr(dye_g, dye_c, ne), TOL32);
    expect(name, "dprobs (0 where dropped)", relerr(dprobs_g, dprobs_c, nr), TOL32);
    be_dfree(gpu, x_d), be_dfree(gpu, xe_d), be_dfree(gpu, dx_d), be_dfree(gpu, dxe_d), be_dfree(gpu, probs_d);
    be_dfree(gpu, ye_d), be_dfree(gpu, dout_d), be_dfree(gpu, out_d), be_dfree(gpu, dye_d), be_dfree(gpu, dprobs_d);
    be_dfree(gpu, row_d);
    free(row), free(x), free(xe), free(dx), free(dxe), free(probs), free(ye), free(dout), free(xe_c), free(dx_c);
    free(out_c), free(dye_c), free(dprobs_c), free(xe_g), free(dx_g), free(out_g), free(dye_g), free(dprobs_g);
}

/* cuda_fill_attention_moe sets exactly these entries of a zeroed vtable, and no other. */
static void run_fill(void)
{
    static const char *const mine[] = {"attention_fwd",       "attention_bwd",   "attention_block_fwd",
                                       "attention_block_bwd", "attention_merge", "attention_delta",
                                       "attention_kv_fwd",    "moe_route_fwd",   "moe_route_bwd",
                                       "moe_aux_loss",        "moe_z_loss",      "moe_permute",
                                       "moe_permute_bwd",     "moe_unpermute",   "moe_unpermute_bwd"};
    const int nmine = (int)(sizeof mine / sizeof mine[0]);
    struct be_ops o;
    memset(&o, 0, sizeof o);
    cuda_fill_attention_moe(&o);
    int bad = 0, found = 0;
    for (int e = 0; e < BE_OP_NENTRIES; e++) {
        int is_mine = 0;
        for (int j = 0; j < nmine; j++) is_mine |= strcmp(mine[j], BE_OP_ENTRIES[e].name) == 0;
        found += is_mine;
        void *fn;
        memcpy(&fn, (const char *)&o + BE_OP_ENTRIES[e].offset, sizeof fn);
        if (is_mine != (fn != NULL)) {
            printf("FAIL cuda_fill_attention_moe: %s %s\n", BE_OP_ENTRIES[e].name,
                   fn ? "set, not its entry" : "left NULL");
            bad = 1;
        }
    }
    expect_true("fill", "cuda_fill_attention_moe sets its 15 entries and no other", !bad && found == nmine);
}

/* ---- the refusals, on the host: each entry checks its sizes before it touches the backend ---- */
static jmp_buf g_died;
static void died(int code) { longjmp(g_died, code ? code : 1); }

static void run_refusals(void)
{
    /* static: nothing here lives in a register a longjmp could clobber */
    static struct be_ops o;
    static const be_in none = {NULL, BE_F32};
    static const be_out nout = {NULL, BE_F32}, some = {&o, BE_F32}; /* some: a gradient asked for (the call
                                                                      * dies before writing it) */
    cuda_fill_attention_moe(&o);
    if (!o.attention_fwd || !o.attention_kv_fwd || !o.moe_route_fwd) return; /* run_fill said so */
    const char *what[] = {"attention_fwd head size 257", "attention_bwd head size 300",
                          "attention_kv_fwd head size 512", "attention_kv_fwd positions past the cache",
                          "attention_fwd 3 query heads over 2 key/value heads", "moe_route_fwd 1025 experts",
                          "moe_route_fwd top-9 of 8", "moe_aux_loss 2000 experts",
                          "attention_block_fwd head size 257", "attention_block_bwd without key positions"};
    td_set_abort_hook(died);
    for (int i = 0; i < 10; i++) {
        volatile int dead = 0;
        if (setjmp(g_died) == 0) {
            switch (i) { /* a NULL backend: the check must come first */
            case 0:
                o.attention_fwd(NULL, nout, NULL, none, none, none, 257 * 2, 257, 1, 4, 2, 1, 257, NULL, NULL, NULL);
                break;
            case 1:
                o.attention_bwd(NULL, some, nout, nout, none, none, none, none, none, NULL, 600, 300, 1, 4, 2, 1, 300,
                                NULL, NULL, NULL);
                break;
            case 2: o.attention_kv_fwd(NULL, nout, none, none, none, 512, 1, 1, 0, 8, 1, 1, 512); break;
            case 3: o.attention_kv_fwd(NULL, nout, none, none, none, 64, 1, 2, 7, 8, 1, 1, 64); break;
            case 4: o.attention_fwd(NULL, nout, NULL, none, none, none, 192, 128, 1, 4, 3, 2, 64, NULL, NULL, NULL); break;
            case 5: o.moe_route_fwd(NULL, NULL, NULL, NULL, NULL, 4, 1025, 2, BE_MOE_SOFTMAX, 0, 0.0f); break;
            case 6: o.moe_route_fwd(NULL, NULL, NULL, NULL, NULL, 4, 8, 9, BE_MOE_SOFTMAX, 0, 0.0f); break;
            case 7: o.moe_aux_loss(NULL, NULL, NULL, NULL, 4, 2000, 2, BE_MOE_SOFTMAX, 0.01, 8, 1.0f); break;
            case 8:
                o.attention_block_fwd(NULL, nout, NULL, none, none, none, 257 * 2, 257, 1, 4, 4, 8, (const int32_t *)&o,
                                      (const int32_t *)&o, 2, 1, 257, NULL, NULL, NULL);
                break;
            default:
                o.attention_block_bwd(NULL, some, nout, nout, none, none, none, none, NULL, NULL, 128, 64, 1, 4, 4, 8,
                                      (const int32_t *)&o, NULL, 2, 1, 64, NULL, NULL, NULL);
                break;
            }
        } else
            dead = 1;
        char line[160];
        snprintf(line, sizeof line, "refuses %s (ends naming the entry)", what[i]);
        expect_true("refusal", line, dead);
    }
    td_set_abort_hook(NULL);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    run_fill();
    run_refusals();
    if (failures) return 1;
    if (!be_backend_known("cuda")) {
        printf("SKIP: this binary has no cuda backend (built without CUDA: -DTRIDENT_CUDA=OFF or no nvcc)\n");
        return SKIP;
    }
    if (be_backend_devices("cuda") == 0) {
        printf("SKIP: no CUDA device is visible (CUDA_VISIBLE_DEVICES, driver)\n");
        return SKIP;
    }
    cpu = be_create("cpu", 1);
    gpu = be_create("cuda", 0);

    static const att_case att[] = {
        {"att T1 causal mha hs64", 2, 1, 3, 3, 64, 0, 0, 7, 0.0f, BE_F32},
        {"att T7 padded gqa1 hs80 drop", 2, 7, 3, 1, 80, 1, 1, 7, 0.1f, BE_F32},
        {"att T129 causal mha hs64 fused drop", 2, 129, 3, 3, 64, 0, 1, 7, 0.1f, BE_F32},
        {"att T129 padded gqa1 hs64", 3, 129, 3, 1, 64, 1, 0, 7, 0.0f, BE_F32},
        {"att T513 causal gqa1 hs80 drop", 1, 513, 3, 1, 80, 0, 0, 7, 0.2f, BE_F32},
        {"att T513 padded mha hs64 drop", 2, 513, 3, 3, 64, 1, 1, 7, 0.1f, BE_F32},
        {"att T129 causal gqa1 hs80 dk dv only", 1, 129, 3, 1, 80, 0, 0, 6, 0.1f, BE_F32},
        {"att T129 padded mha hs64 dq only", 2, 129, 3, 3, 64, 1, 0, 1, 0.1f, BE_F32},
        {"att T40 causal gqa2 hs256 drop", 1, 40, 4, 2, 256, 0, 0, 7, 0.1f, BE_F32},
        {"att T129 causal gqa1 hs64 bf16 drop", 2, 129, 3, 1, 64, 0, 0, 7, 0.1f, BE_BF16},
        {"att T129 padded mha hs80 bf16 fused", 2, 129, 3, 3, 80, 1, 1, 7, 0.0f, BE_BF16},
        {"att T33 causal gqa1 hs64 fp16 drop", 1, 33, 2, 1, 64, 0, 0, 7, 0.1f, BE_F16},
        /* packed documents (seg): boundaries on and off the 32-key tiles, one-token documents */
        {"att T129 packed mha hs64 fused drop", 3, 129, 3, 3, 64, 2, 1, 7, 0.1f, BE_F32},
        {"att T200 packed gqa1 hs80", 2, 200, 4, 2, 80, 2, 0, 7, 0.0f, BE_F32},
        {"att T129 packed gqa1 hs64 dk dv only drop", 2, 129, 3, 1, 64, 2, 0, 6, 0.1f, BE_F32},
        {"att T129 packed mha hs64 bf16", 2, 129, 3, 3, 64, 2, 0, 7, 0.0f, BE_BF16},
        /* the tensor-core kernels (att_mma.cuh: bf16 q, k, v, head size 64 or 128, even row
         * strides; the fused cases above have odd ones, and fp16 runs the CUDA-core kernels) */
        {"att T513 causal gqa2 hs128 bf16 drop (tensor cores)", 1, 513, 4, 2, 128, 0, 0, 7, 0.1f, BE_BF16},
        {"att T200 padded mha hs128 bf16 (tensor cores)", 2, 200, 2, 2, 128, 1, 0, 7, 0.0f, BE_BF16},
        {"att T129 packed gqa1 hs64 bf16 dk dv only drop (tensor cores)", 2, 129, 3, 1, 64, 2, 0, 6, 0.1f, BE_BF16},
        {"att T129 causal mha hs64 bf16 dq only drop (tensor cores)", 2, 129, 3, 3, 64, 0, 0, 1, 0.1f, BE_BF16},
    };
    for (size_t i = 0; i < sizeof att / sizeof att[0]; i++) run_attention(&att[i]);
    /* fp32 activations in a --bf16 run: attention on the tensor cores as well */
    static const att_case bf16_run[] = {
        {"att T257 causal gqa2 hs64 fp32 in a bf16 run drop (tensor cores)", 2, 257, 4, 2, 64, 0, 0, 7, 0.1f, BE_F32},
        {"att T100 padded mha hs128 fp32 in a bf16 run (tensor cores)", 2, 100, 2, 2, 128, 1, 0, 7, 0.0f, BE_F32},
    };
    /* the field itself, as a --bf16 run's be_set_gemm_dtype sets it: that call is once a backend
     * (src/backend/mixed.c refuses a change back), and the cases below are fp32 runs again */
    gpu->gemm_dtype = BE_BF16;
    g_bf16_run = 1;
    for (size_t i = 0; i < sizeof bf16_run / sizeof bf16_run[0]; i++) run_attention(&bf16_run[i]);
    g_bf16_run = 0;
    gpu->gemm_dtype = BE_F32;
    run_kept_out(1);
    run_kept_out(0);
    run_mask();

    static const blk_case blk[] = {
        {"cp C2 rank0 causal gqa2 hs64", 2, 2, 20, 0, 4, 2, 64, 0, 0.0f, BE_F32},
        {"cp C2 rank1 causal mha hs80 drop", 2, 2, 20, 1, 3, 3, 80, 0, 0.1f, BE_F32},
        {"cp C4 rank1 causal gqa1 hs64 drop (Tq 80)", 1, 4, 40, 1, 3, 1, 64, 0, 0.2f, BE_F32},
        {"cp C4 rank3 padded mha hs64 drop", 3, 4, 9, 3, 2, 2, 64, 1, 0.1f, BE_F32},
        {"cp C2 rank0 packed gqa1 hs64 drop", 2, 2, 33, 0, 2, 1, 64, 2, 0.1f, BE_F32},
        {"cp C2 rank1 causal gqa1 hs256", 1, 2, 16, 1, 2, 1, 256, 0, 0.0f, BE_F32},
        {"cp C2 rank1 causal mha hs64 bf16 drop", 2, 2, 20, 1, 3, 3, 64, 0, 0.1f, BE_BF16},
    };
    for (size_t i = 0; i < sizeof blk / sizeof blk[0]; i++) run_block(&blk[i]);

    static const kv_case kv[] = {
        {"kv n1 pos0 0 mha hs64", 2, 1, 0, 16, 3, 3, 64, BE_F32},
        {"kv n1 pos0 512 gqa1 hs80", 2, 1, 512, 600, 3, 1, 80, BE_F32},
        {"kv n7 pos0 129 gqa1 hs64", 1, 7, 129, 200, 3, 1, 64, BE_F32},
        {"kv n3 pos0 300 gqa2 hs256", 1, 3, 300, 400, 4, 2, 256, BE_F32},
        {"kv n2 pos0 100 gqa1 hs80 bf16 cache", 2, 2, 100, 130, 3, 1, 80, BE_BF16},
    };
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++) run_kv(&kv[i]);

    static const route_case rt[] = {
        {"route softmax pre k2 E8", 37, 8, 2, BE_MOE_SOFTMAX, 1, 0, 0.0f, 0},
        {"route softmax post k2 E8", 37, 8, 2, BE_MOE_SOFTMAX, 0, 0, 0.0f, 0},
        {"route softmax post k1 E64 scale", 33, 64, 1, BE_MOE_SOFTMAX, 0, 0, 2.5f, 0},
        {"route softmax pre k4 E160", 41, 160, 4, BE_MOE_SOFTMAX, 1, 0, 0.0f, 0},
        {"route sigmoid k2 E64 bias", 37, 64, 2, BE_MOE_SIGMOID, 0, 1, 0.0f, 0},
        {"route sigmoid k1 E8", 29, 8, 1, BE_MOE_SIGMOID, 0, 0, 1.5f, 0},
        {"route sigmoid k8 E1024 bias", 9, 1024, 8, BE_MOE_SIGMOID, 0, 1, 0.0f, 0},
        {"route softmax pre k8 E1024", 9, 1024, 8, BE_MOE_SOFTMAX, 1, 0, 0.0f, 0},
        {"route softmax pre k4 E64 ties", 37, 64, 4, BE_MOE_SOFTMAX, 1, 0, 0.0f, 1},
        {"route softmax post k6 E64 ties", 37, 64, 6, BE_MOE_SOFTMAX, 0, 0, 0.0f, 1},
        {"route sigmoid k3 E40 ties", 37, 40, 3, BE_MOE_SIGMOID, 0, 0, 0.0f, 1},
    };
    for (size_t i = 0; i < sizeof rt / sizeof rt[0]; i++) run_route(&rt[i]);
    run_permute(37, 2, 77);
    run_permute(5, 1, 300);

    be_free(gpu);
    be_free(cpu);
    printf("%d of %d checks failed\n", failures, checks);
    return failures ? 1 : 0;
}
