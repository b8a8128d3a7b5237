/* The CUDA backend's elementwise entries: residual add, scale, bias, the MLP's activations and
 * fused bias + GeLU, dropout (the cpu backend's Philox masks, bit for bit), embeddings and RoPE;
 * and cuda_fill_elementwise, which puts this family (norm.cu, loss.cu, optim.cu too) in the
 * vtable. Each kernel computes one element (or one Philox block of 4, or one rotation pair)
 * alone, with the cpu backend's formulas (src/backend/cpu/), so results match it to rounding;
 * the two reductions here (embedding_bwd, pos_embedding_bwd) add in the cpu's order, so they
 * match it bit for bit in fp32. Every launch goes on the backend's stream. */
#include <math.h>

#include "cu_drop.h"
#include "elem_impl.cuh"

extern "C" {
#include "trident/activation.h"
}


/* ---- add, scale, bias ---- */

/* vec: CU_VEC elements a thread, 16-byte accesses (every buffer aligned, n a multiple of CU_VEC). */
static __global__ void add_k(void *out, int ot, const void *a, int at, const void *b, int bt, size_t n, int vec)
{
    if (vec) {
        CU_FOR(g, n / CU_VEC) {
            float x[CU_VEC], y[CU_VEC];
            cu_ld8(a, at, g * CU_VEC, x);
            cu_ld8(b, bt, g * CU_VEC, y);
#pragma unroll
            for (int k = 0; k < CU_VEC; k++) x[k] = x[k] + y[k];
            cu_st8(out, ot, g * CU_VEC, x);
        }
        return;
    }
    CU_FOR(i, n) cu_st(out, ot, i, cu_ld(a, at, i) + cu_ld(b, bt, i));
}
static void e_add(const backend *be, be_out out, be_in a, be_in b, size_t n)
{
    if (n == 0) return;
    int vec = n % CU_VEC == 0 && cu_vec_ok(out.p) && cu_vec_ok(a.p) && cu_vec_ok(b.p);
    add_k<<<cu_blocks(vec ? n / CU_VEC : n), CU_THREADS, 0, cu_stream(be)>>>(
        out.p, cu_dtype(out.dt, "add"), a.p, cu_dtype(a.dt, "add"), b.p, cu_dtype(b.dt, "add"), n, vec);
    CU_LAUNCHED("add");
}

static __global__ void scale_k(void *x, int xt, float s, size_t n)
{
    CU_FOR(i, n) cu_st(x, xt, i, cu_ld(x, xt, i) * s);
}
static void e_scale(const backend *be, be_out x, float s, size_t n)
{
    if (n == 0) return;
    scale_k<<<cu_blocks(n), CU_THREADS, 0, cu_stream(be)>>>(x.p, cu_dtype(x.dt, "scale"), s, n);
    CU_LAUNCHED("scale");
}

static __global__ void bias_add_k(void *out, int ot, const float *b, int C, size_t n)
{
    CU_FOR(i, n) cu_st(out, ot, i, cu_ld(out, ot, i) + b[i % C]);
}
static void e_bias_add(const backend *be, be_out out, const float *b, int N, int C)
{
    size_t n = (size_t)N * C;
    if (n == 0) return;
    bias_add_k<<<cu_blocks(n), CU_THREADS, 0, cu_stream(be)>>>(out.p, cu_dtype(out.dt, "bias_add"), b, C, n);
    CU_LAUNCHED("bias_add");
}

/* ---- the MLP's activations (td_act), as src/backend/cpu/act.c computes them ---- */

static __device__ __forceinline__ float tanh_as_cpu(float u) { return 1.0f - 2.0f / (expf(2.0f * u) + 1.0f); }
static __device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

static __device__ float act_f(int act, float x)
{
    switch (act) {
    case TD_ACT_GELU: return 0.5f * x * (1.0f + tanh_as_cpu(0.7978845608028654f * (x + 0.044715f * x * x * x)));
    case TD_ACT_GELU_ERF: return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    case TD_ACT_SILU: return x * sigmoid(x);
    case TD_ACT_RELU: return x > 0.0f ? x : 0.0f;
    default: { /* TD_ACT_SQUARED_RELU */
        float r = x > 0.0f ? x : 0.0f;
        return r * r;
    }
    }
}
static __device__ float act_df(int act, float x)
{
    switch (act) {
    case TD_ACT_GELU: return cu_gelu_grad(x);
    case TD_ACT_GELU_ERF:
        return 0.5f * (1.0f + erff(x * 0.70710678118654752f)) + x * 0.3989422804014327f * expf(-0.5f * x * x);
    case TD_ACT_SILU: {
        float s = sigmoid(x);
        return s * (1.0f + x * (1.0f - s));
    }
    case TD_ACT_RELU: return x > 0.0f ? 1.0f : 0.0f;
    default: return 2.0f * (x > 0.0f ? x : 0.0f); /* TD_ACT_SQUARED_RELU */
    }
}

/* n = N F outputs; gated: inp rows [gate | up] of 2F. */
/* vec: CU_VEC outputs a thread, 16-byte accesses (every buffer aligned, F a multiple of CU_VEC, so
 * that a thread's outputs, gates and ups are each one aligned run of a row). */
static __global__ void act_fwd_k(int act, int glu, void *out, int ot, const void *inp, int it, int F, size_t n,
                                 int vec)
{
    if (vec) {
        CU_FOR(q, n / CU_VEC) {
            size_t i = q * CU_VEC, g = glu ? i / F * 2 * F + i % F : i;
            float x[CU_VEC], u[CU_VEC], y[CU_VEC];
            cu_ld8(inp, it, g, x);
            if (glu) cu_ld8(inp, it, g + F, u);
#pragma unroll
            for (int k = 0; k < CU_VEC; k++) y[k] = !glu ? act_f(act, x[k]) : act_f(act, x[k]) * u[k];
            cu_st8(out, ot, i, y);
        }
        return;
    }
    CU_FOR(i, n) {
        if (!glu) {
            cu_st(out, ot, i, act_f(act, cu_ld(inp, it, i)));
        } else {
            size_t g = i / F * 2 * F + i % F;
            cu_st(out, ot, i, act_f(act, cu_ld(inp, it, g)) * cu_ld(inp, it, g + F));
        }
    }
}
/* The gated derivatives (gate dg, up du) of one element, in the cpu's order. */
static __device__ __forceinline__ void glu_df(int act, float dy, float x, float u, float *dg, float *du)
{
    if (act == TD_ACT_SILU) { /* the cpu's SwiGLU products, in its order */
        float sg = sigmoid(x);
        *dg = dy * u * sg * (1.0f + x * (1.0f - sg));
        *du = dy * x * sg;
    } else {
        *dg = dy * u * act_df(act, x);
        *du = dy * act_f(act, x);
    }
}
static __global__ void act_bwd_k(int act, int glu, void *dinp, int dit, const void *dout, int dt, const void *inp,
                                 int it, int F, size_t n, int vec)
{
    if (vec) { /* as act_fwd_k's */
        CU_FOR(q, n / CU_VEC) {
            size_t i = q * CU_VEC, g = glu ? i / F * 2 * F + i % F : i;
            float dy[CU_VEC], x[CU_VEC], d[CU_VEC];
            cu_ld8(dout, dt, i, dy);
            cu_ld8(inp, it, g, x);
            cu_ld8(dinp, dit, g, d);
            if (!glu) {
#pragma unroll
                for (int k = 0; k < CU_VEC; k++) d[k] = d[k] + act_df(act, x[k]) * dy[k];
                cu_st8(dinp, dit, g, d);
                continue;
            }
            float u[CU_VEC], du[CU_VEC];
            cu_ld8(inp, it, g + F, u);
            cu_ld8(dinp, dit, g + F, du);
#pragma unroll
            for (int k = 0; k < CU_VEC; k++) {
                float a, b;
                glu_df(act, dy[k], x[k], u[k], &a, &b);
                d[k] = d[k] + a;
                du[k] = du[k] + b;
            }
            cu_st8(dinp, dit, g, d);
            cu_st8(dinp, dit, g + F, du);
        }
        return;
    }
    CU_FOR(i, n) {
        float dy = cu_ld(dout, dt, i);
        if (!glu) {
            cu_st(dinp, dit, i, cu_ld(dinp, dit, i) + act_df(act, cu_ld(inp, it, i)) * dy);
            continue;
        }
        size_t g = i / F * 2 * F + i % F;
        float x = cu_ld(inp, it, g), u = cu_ld(inp, it, g + F), dg, du;
        glu_df(act, dy, x, u, &dg, &du);
        cu_st(dinp, dit, g, cu_ld(dinp, dit, g) + dg);
        cu_st(dinp, dit, g + F, cu_ld(dinp, dit, g + F) + du);
    }
}

static void check_act(int act, const char *entry)
{
    TD_CHECK(act >= 0 && act < TD_ACT_COUNT, "choose the activation from td_act (trident/activation.h)",
             "cuda %s: activation %d", entry, act);
}
static void e_act_fwd(const backend *be, int act, int glu, be_out out, be_in inp, int N, int F)
{
    check_act(act, "act_fwd");
    size_t n = (size_t)N * F;
    if (n == 0) return;
    int vec = F % CU_VEC == 0 && cu_vec_ok(out.p) && cu_vec_ok(inp.p);
    act_fwd_k<<<cu_blocks(vec ? n / CU_VEC : n), CU_THREADS, 0, cu_stream(be)>>>(
        act, glu, out.p, cu_dtype(out.dt, "act_fwd"), inp.p, cu_dtype(inp.dt, "act_fwd"), F, n, vec);
    CU_LAUNCHED("act_fwd");
}
static void e_act_bwd(const backend *be, int act, int glu, be_out dinp, be_in dout, be_in inp, int N, int F)
{
    check_act(act, "act_bwd");
    size_t n = (size_t)N * F;
    if (n == 0 || !dinp.p) return;
    int vec = F % CU_VEC == 0 && cu_vec_ok(dinp.p) && cu_vec_ok(dout.p) && cu_vec_ok(inp.p);
    act_bwd_k<<<cu_blocks(vec ? n / CU_VEC : n), CU_THREADS, 0, cu_stream(be)>>>(
        act, glu, dinp.p, cu_dtype(dinp.dt, "act_bwd"), dout.p, cu_dtype(dout.dt, "act_bwd"), inp.p,
        cu_dtype(inp.dt, "act_bwd"), F, n, vec);
    CU_LAUNCHED("act_bwd");
}

/* ---- fused bias + GeLU (tanh) ---- */

/* vec: CU_VEC elements a thread, 16-byte accesses (every buffer and b aligned, C a multiple of CU_VEC). */
static __global__ void bias_gelu_fwd_k(void *out, int ot, const void *inp, int it, const float *b, int C, size_t n,
                                       int vec)
{
    if (vec) {
        CU_FOR(q, n / CU_VEC) {
            size_t i = q * CU_VEC;
            float x[CU_VEC], bb[CU_VEC];
            cu_ld8(inp, it, i, x);
            cu_ld8(b, BE_F32, i % C, bb);
#pragma unroll
            for (int k = 0; k < CU_VEC; k++) x[k] = act_f(TD_ACT_GELU, x[k] + bb[k]);
            cu_st8(out, ot, i, x);
        }
        return;
    }
    CU_FOR(i, n) cu_st(out, ot, i, act_f(TD_ACT_GELU, cu_ld(inp, it, i) + b[i % C]));
}
static __global__ void bias_gelu_bwd_k(void *dinp, int dit, const void *dout, int dt, const void *inp, int it,
                                       const float *b, int C, size_t n, int vec)
{
    if (vec) {
        CU_FOR(q, n / CU_VEC) {
            size_t i = q * CU_VEC;
            float d[CU_VEC], x[CU_VEC], bb[CU_VEC], dy[CU_VEC];
            cu_ld8(dinp, dit, i, d);
            cu_ld8(inp, it, i, x);
            cu_ld8(b, BE_F32, i % C, bb);
            cu_ld8(dout, dt, i, dy);
#pragma unroll
            for (int k = 0; k < CU_VEC; k++) d[k] = d[k] + cu_gelu_grad(x[k] + bb[k]) * dy[k];
            cu_st8(dinp, dit, i, d);
        }
        return;
    }
    CU_FOR(i, n)
    cu_st(dinp, dit, i, cu_ld(dinp, dit, i) + cu_gelu_grad(cu_ld(inp, it, i) + b[i % C]) * cu_ld(dout, dt, i));
}
static void e_bias_gelu_fwd(const backend *be, be_out out, be_in inp, const float *b, int N, int C)
{
    size_t n = (size_t)N * C;
    if (n == 0) return;
    int vec = C % CU_VEC == 0 && cu_vec_ok(out.p) && cu_vec_ok(inp.p) && cu_vec_ok(b);
    bias_gelu_fwd_k<<<cu_blocks(vec ? n / CU_VEC : n), CU_THREADS, 0, cu_stream(be)>>>(
        out.p, cu_dtype(out.dt, "bias_gelu_fwd"), inp.p, cu_dtype(inp.dt, "bias_gelu_fwd"), b, C, n, vec);
    CU_LAUNCHED("bias_gelu_fwd");
}
/* db first (a column sum over the rows in a fixed order, norm.cu), then dinp: the same terms
 * the cpu adds. */
static void e_bias_gelu_bwd(const backend *be, be_out dinp, float *db, be_in dout, be_in inp, const float *b, int N,
                            int C)
{
    size_t n = (size_t)N * C;
    if (n == 0) return;
    int dt = cu_dtype(dout.dt, "bias_gelu_bwd"), it = cu_dtype(inp.dt, "bias_gelu_bwd");
    if (db) cu_colsum(be, CU_COL_GELU, db, NULL, dout.p, dt, inp.p, it, NULL, NULL, b, N, C);
    if (!dinp.p) return;
    int vec = C % CU_VEC == 0 && cu_vec_ok(dinp.p) && cu_vec_ok(dout.p) && cu_vec_ok(inp.p) && cu_vec_ok(b);
    bias_gelu_bwd_k<<<cu_blocks(vec ? n / CU_VEC : n), CU_THREADS, 0, cu_stream(be)>>>(
        dinp.p, cu_dtype(dinp.dt, "bias_gelu_bwd"), dout.p, dt, inp.p, it, b, C, n, vec);
    CU_LAUNCHED("bias_gelu_bwd");
}

/* ---- dropout (hidden), with bias and residual: one thread a Philox block of 4 units ---- */

/* A be_drop as kernel arguments; on 0: no dropout (every multiplier 1). */
typedef struct {
    uint64_t seed;
    const int64_t *sample;
    uint32_t thr;
    float keep;
    int site, pos0, unit0, on;
    int cp_chunk, cp_c0, cp_c1; /* be_drop's: be_drop_pos */
} drop_args;

/* The mask words of Philox block q of a row (all 0 without dropout). */
static __device__ __forceinline__ void drop_words(uint32_t r[4], const drop_args &d, size_t row, int T, int64_t q)
{
    r[0] = r[1] = r[2] = r[3] = 0;
    if (!d.on) return;
    int64_t u = (int64_t)d.pos0 + (int64_t)(row % T), L = d.cp_chunk; /* be_drop_pos */
    int64_t pos = !L ? u : u < L ? d.cp_c0 * L + u : d.cp_c1 * L + u - L;
    cu_drop_block(r, d.seed, BE_DROP_HIDDEN, d.site, d.sample[row / T], pos, 4 * q);
}
/* One unit: [resid +] ([x + b]) [* mask / (1 - p)], x and resid already loaded. */
static __device__ __forceinline__ float drop_one(float v, const float *b, int64_t c, const drop_args &d, uint32_t r,
                                                 bool resid, float rv)
{
    if (b) v = v + b[c];
    if (d.on) v = v * (r >= d.thr ? d.keep : 0.0f);
    if (resid) v = rv + v;
    return v;
}

/* out (B, T, C) = [resid +] ([inp + b]) [* mask / (1 - p)]: the cpu's drop_rows and its
 * no-dropout paths, term for term. Thread k: row k / nb, Philox block k % nb of that row. vec
 * (unit0 a multiple of 4, C of CU_VEC, out, inp and resid aligned): thread k takes two blocks,
 * row k / (nb / 2), columns 8 (k % (nb / 2)) .. + 7, with 16-byte accesses. */
static __global__ void drop_k(void *out, int ot, const void *resid, int rt, const void *inp, int it, const float *b,
                              int T, int C, int64_t nb, size_t nthreads, drop_args d, int vec)
{
    if (vec) {
        int64_t np = nb / 2;
        CU_FOR(k, nthreads) {
            size_t row = k / np;
            int64_t q = cu_drop_first_block(d.unit0) + 2 * (int64_t)(k % np), c0 = 8 * (int64_t)(k % np);
            uint32_t r[8];
            drop_words(r, d, row, T, q);
            drop_words(r + 4, d, row, T, q + 1);
            size_t i = row * C + (size_t)c0;
            float v[CU_VEC], rv[CU_VEC] = {0, 0, 0, 0, 0, 0, 0, 0};
            cu_ld8(inp, it, i, v);
            if (resid) cu_ld8(resid, rt, i, rv);
#pragma unroll
            for (int w = 0; w < CU_VEC; w++) v[w] = drop_one(v[w], b, c0 + w, d, r[w], resid != NULL, rv[w]);
            cu_st8(out, ot, i, v);
        }
        return;
    }
    CU_FOR(k, nthreads) {
        size_t row = k / nb;
        int64_t q = cu_drop_first_block(d.unit0) + (int64_t)(k % nb);
        uint32_t r[4];
        drop_words(r, d, row, T, q);
        for (int w = 0; w < 4; w++) {
            int64_t c = 4 * q + w - d.unit0;
            if (c < 0 || c >= C) continue;
            size_t i = row * C + (size_t)c;
            float rv = resid ? cu_ld(resid, rt, i) : 0.0f;
            cu_st(out, ot, i, drop_one(cu_ld(inp, it, i), b, c, d, r[w], resid != NULL, rv));
        }
    }
}

static void drop_launch(const backend *be, const char *entry, be_out out, be_in resid, be_in inp, const float *b,
                        int B, int T, int C, const be_drop *drop)
{
    drop_args d = {0, NULL, 0, 1.0f, 0, 0, 0, 0, 0, 0, 0};
    if (drop && drop->p > 0.0f) {
        d.on = 1;
        d.seed = drop->seed;
        d.sample = drop->sample;
        d.thr = be_drop_threshold(drop->p);
        d.keep = 1.0f / (1.0f - drop->p);
        d.site = drop->site;
        d.pos0 = drop->pos0;
        d.unit0 = drop->unit0;
        d.cp_chunk = drop->cp_chunk, d.cp_c0 = drop->cp_c0, d.cp_c1 = drop->cp_c1;
    }
    int ot = cu_dtype(out.dt, entry), it = cu_dtype(inp.dt, entry), rt = resid.p ? cu_dtype(resid.dt, entry) : 0;
    /* no dropout, no bias, no residual, in place: the identity */
    if (!d.on && !b && !resid.p && out.p == inp.p && ot == it) return;
    if (B <= 0 || T <= 0 || C <= 0) return;
    int64_t nb = cu_drop_nblocks(d.unit0, C);
    int vec = d.unit0 % 4 == 0 && C % CU_VEC == 0 && cu_vec_ok(out.p) && cu_vec_ok(inp.p) && cu_vec_ok(resid.p);
    size_t nthreads = (size_t)B * T * (size_t)(vec ? nb / 2 : nb);
    drop_k<<<cu_blocks(nthreads), CU_THREADS, 0, cu_stream(be)>>>(out.p, ot, resid.p, rt, inp.p, it, b, T, C, nb,
                                                                 nthreads, d, vec);
    CU_LAUNCHED("dropout");
}

static const be_in NO_IN = {NULL, BE_F32};

static void e_dropout_fwd(const backend *be, be_out out, be_in inp, int B, int T, int C, const be_drop *drop)
{
    drop_launch(be, "dropout_fwd", out, NO_IN, inp, NULL, B, T, C, drop);
}
/* The same mask and scale, written. */
static void e_dropout_bwd(const backend *be, be_out dinp, be_in dout, int B, int T, int C, const be_drop *drop)
{
    drop_launch(be, "dropout_bwd", dinp, NO_IN, dout, NULL, B, T, C, drop);
}
static void e_bias_dropout_add_fwd(const backend *be, be_out out, be_in resid, be_in inp, const float *b, int B,
                                   int T, int C, const be_drop *drop)
{
    drop_launch(be, "bias_dropout_add_fwd", out, resid, inp, b, B, T, C, drop);
}

/* ---- embeddings ---- */

/* vec: CU_VEC elements a thread, 16-byte accesses (out and wte aligned, C a multiple of CU_VEC). */
static __global__ void embedding_fwd_k(void *out, int ot, const int32_t *ids, const float *wte, int C, int vstart,
                                       int Vloc, size_t n, int vec)
{
    if (vec) {
        CU_FOR(q, n / CU_VEC) {
            size_t i = q * CU_VEC;
            int64_t r = (int64_t)ids[i / C] - vstart;
            float v[CU_VEC];
            if (r >= 0 && r < Vloc) {
                cu_ld8(wte, BE_F32, (size_t)r * C + i % C, v);
            } else {
#pragma unroll
                for (int k = 0; k < CU_VEC; k++) v[k] = 0.0f;
            }
            cu_st8(out, ot, i, v);
        }
        return;
    }
    CU_FOR(i, n) {
        int64_t r = (int64_t)ids[i / C] - vstart;
        cu_st(out, ot, i, r >= 0 && r < Vloc ? wte[(size_t)r * C + i % C] : 0.0f);
    }
}
static void e_embedding_fwd(const backend *be, be_out out, const int32_t *ids, const float *wte, int BT, int C,
                            int vstart, int Vloc)
{
    size_t n = (size_t)BT * C;
    if (n == 0) return;
    int vec = C % CU_VEC == 0 && cu_vec_ok(out.p) && cu_vec_ok(wte);
    embedding_fwd_k<<<cu_blocks(vec ? n / CU_VEC : n), CU_THREADS, 0, cu_stream(be)>>>(
        out.p, cu_dtype(out.dt, "embedding_fwd"), ids, wte, C, vstart, Vloc, n, vec);
    CU_LAUNCHED("embedding_fwd");
}

/* Row ownership without sorting or atomics: the block of token i owns word row ids[i] when i is
 * the first token with that id; it gathers every token with the id, in token order (a chunk of
 * CU_THREADS ids at a time, compacted in order through warp ballots), and adds their gradient
 * rows to the word row in that order: the cpu's sum, bit for bit in fp32. Blocks of tokens that
 * are not first return after scanning the ids before them. */
static __global__ void embedding_bwd_k(float *dwte, const void *dout, int dt, const int32_t *ids, int BT, int C,
                                       int vstart, int Vloc)
{
    __shared__ int list[CU_THREADS];
    __shared__ int wcount[CU_THREADS / 32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int i = blockIdx.x; i < BT; i += gridDim.x) {
        int id = ids[i];
        int64_t r = (int64_t)id - vstart;
        if (r < 0 || r >= Vloc) continue; /* the same for the whole block */
        int dup = 0;
        for (int j = threadIdx.x; j < i; j += blockDim.x) dup |= ids[j] == id;
        if (__syncthreads_or(dup)) continue;
        float *dw = dwte + (size_t)r * C;
        for (int s = i; s < BT; s += CU_THREADS) {
            int j = s + threadIdx.x, m = j < BT && ids[j] == id;
            unsigned bal = __ballot_sync(0xffffffffu, m);
            if (lane == 0) wcount[warp] = __popc(bal);
            __syncthreads();
            int off = 0, total = 0;
            for (int w = 0; w < CU_THREADS / 32; w++) {
                off += w < warp ? wcount[w] : 0;
                total += wcount[w];
            }
            if (m) list[off + __popc(bal & ((1u << lane) - 1u))] = j;
            __syncthreads();
            for (int c = threadIdx.x; c < C; c += CU_THREADS) {
                float v = dw[c];
                for (int k = 0; k < total; k++) v += cu_ld(dout, dt, (size_t)list[k] * C + c);
                dw[c] = v;
            }
            __syncthreads(); /* list and wcount are reused */
        }
    }
}
static void e_embedding_bwd(const backend *be, float *dwte, be_in dout, const int32_t *ids, int BT, int C, int vstart,
                            int Vloc)
{
    if (BT <= 0 || C <= 0 || !dwte) return;
    unsigned blocks = BT < 65536 ? (unsigned)BT : 65536u;
    embedding_bwd_k<<<blocks, CU_THREADS, 0, cu_stream(be)>>>(dwte, dout.p, cu_dtype(dout.dt, "embedding_bwd"), ids,
                                                             BT, C, vstart, Vloc);
    CU_LAUNCHED("embedding_bwd");
}

static __global__ void pos_embedding_fwd_k(void *out, int ot, const float *wpe, int T, int C, int pos0, size_t n)
{
    CU_FOR(i, n) {
        size_t row = i / C;
        cu_st(out, ot, i, cu_ld(out, ot, i) + wpe[(size_t)(pos0 + (int)(row % T)) * C + i % C]);
    }
}
static void e_pos_embedding_fwd(const backend *be, be_out out, const float *wpe, int B, int T, int C, int pos0)
{
    size_t n = (size_t)B * T * C;
    if (n == 0) return;
    pos_embedding_fwd_k<<<cu_blocks(n), CU_THREADS, 0, cu_stream(be)>>>(
        out.p, cu_dtype(out.dt, "pos_embedding_fwd"), wpe, T, C, pos0, n);
    CU_LAUNCHED("pos_embedding_fwd");
}

/* One thread a (position, channel): the samples added in order, as the cpu does. */
static __global__ void pos_embedding_bwd_k(float *dwpe, const void *dout, int dt, int B, int T, int C, int pos0)
{
    CU_FOR(i, (size_t)T * C) {
        size_t t = i / C, c = i % C;
        float *p = dwpe + (size_t)(pos0 + (int)t) * C + c, v = *p;
        for (int b = 0; b < B; b++) v += cu_ld(dout, dt, ((size_t)b * T + t) * C + c);
        *p = v;
    }
}
static void e_pos_embedding_bwd(const backend *be, float *dwpe, be_in dout, int B, int T, int C, int pos0)
{
    if ((size_t)B * T * C == 0 || !dwpe) return;
    pos_embedding_bwd_k<<<cu_blocks((size_t)T * C), CU_THREADS, 0, cu_stream(be)>>>(
        dwpe, dout.p, cu_dtype(dout.dt, "pos_embedding_bwd"), B, T, C, pos0);
    CU_LAUNCHED("pos_embedding_bwd");
}

/* ---- RoPE, rotate half: one thread a (row, pair i), over the row's heads ----
 * The angle as the cpu (and Hugging Face's float32) rounds it: inv_freq in float32 as the host
 * computed it (be_rope, passed by value), the product in float32, cos and sin of it in double,
 * rounded, then times r.scale. */
static __global__ void rope_k(void *x, int xt, int T, int ld, int nh, int hs, int rot, be_rope r, int pos0,
                              const int32_t *pos, float sgn, size_t n)
{
    int r2 = rot / 2;
    CU_FOR(k, n) {
        size_t bt = k / r2;
        int i = (int)(k % r2);
        float a = (float)(pos ? pos[bt] : pos0 + (int)(bt % T)) * r.inv_freq[i];
        float c = (float)cos((double)a) * r.scale, si = sgn * ((float)sin((double)a) * r.scale);
        for (int h = 0; h < nh; h++) {
            size_t i1 = bt * ld + (size_t)h * hs + i, i2 = i1 + r2;
            float x1 = cu_ld(x, xt, i1), x2 = cu_ld(x, xt, i2);
            cu_st(x, xt, i1, x1 * c - x2 * si);
            cu_st(x, xt, i2, x2 * c + x1 * si);
        }
    }
}
static void rope_launch(const backend *be, const char *entry, be_out x, int B, int T, int ld, int nh, int hs, int rot,
                        const be_rope *r, int pos0, const int32_t *pos, float sgn)
{
    TD_CHECK(rot > 0 && rot % 2 == 0 && rot <= hs && rot / 2 <= BE_ROPE_MAX_HALF && nh * hs <= ld && pos0 >= 0 && (!pos || pos0 == 0),
             "rot even in (0, hs], nh * hs <= ld, pos0 >= 0", "cuda %s: rot %d hs %d nh %d ld %d pos0 %d", entry, rot,
             hs, nh, ld, pos0);
    size_t n = (size_t)B * T * (rot / 2);
    if (n == 0 || nh <= 0) return;
    rope_k<<<cu_blocks(n), CU_THREADS, 0, cu_stream(be)>>>(x.p, cu_dtype(x.dt, entry), T, ld, nh, hs, rot, *r, pos0,
                                                          pos, sgn, n);
    CU_LAUNCHED("rope");
}
static void e_rope_fwd(const backend *be, be_out x, int B, int T, int ld, int nh, int hs, int rot, const be_rope *r,
                       int pos0, const int32_t *pos)
{
    rope_launch(be, "rope_fwd", x, B, T, ld, nh, hs, rot, r, pos0, pos, 1.0f);
}
static void e_rope_bwd(const backend *be, be_out dx, int B, int T, int ld, int nh, int hs, int rot, const be_rope *r,
                       int pos0, const int32_t *pos)
{
    rope_launch(be, "rope_bwd", dx, B, T, ld, nh, hs, rot, r, pos0, pos, -1.0f);
}

/* Every activation entry here and in attention.cu, norm.cu reads and writes fp32, bf16 and fp16
 * through cu_ld/cu_st (a store rounds to nearest even: the bits convert gives). */
static int e_acts_in(const backend *be, be_dtype dt)
{
    (void)be;
    return dt == BE_F32 || dt == BE_BF16 || dt == BE_F16;
}

void cuda_fill_elementwise(struct be_ops *o)
{
    o->acts_in = e_acts_in;
    o->embedding_fwd = e_embedding_fwd;
    o->embedding_bwd = e_embedding_bwd;
    o->pos_embedding_fwd = e_pos_embedding_fwd;
    o->pos_embedding_bwd = e_pos_embedding_bwd;
    o->rope_fwd = e_rope_fwd;
    o->rope_bwd = e_rope_bwd;
    o->act_fwd = e_act_fwd;
    o->act_bwd = e_act_bwd;
    o->bias_gelu_fwd = e_bias_gelu_fwd;
    o->bias_gelu_bwd = e_bias_gelu_bwd;
    o->add = e_add;
    o->scale = e_scale;
    o->bias_add = e_bias_add;
    o->dropout_fwd = e_dropout_fwd;
    o->dropout_bwd = e_dropout_bwd;
    o->bias_dropout_add_fwd = e_bias_dropout_add_fwd;
    cu_fill_norm(o);  /* layernorm_*, rmsnorm_*, bias_bwd */
    cu_fill_loss(o);  /* ce_* */
    cu_fill_optim(o); /* adamw, sumsq */
}
