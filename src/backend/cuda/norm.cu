/* The CUDA backend's LayerNorm and RMSNorm (forward and backward) and the column sums behind every
 * parameter gradient of this family (bias_bwd, the norms' weights, bias + GeLU's bias).
 *
 * Rows: one warp a row (CU_THREADS / 32 rows a block), the row's sums over its columns each lane
 * strided then a butterfly across the warp; the mean, the variance about it (two passes, as the
 * cpu) and 1 / sqrtf (correctly rounded, not rsqrtf). Column sums: the rows in chunks of about
 * COL_ROWS (at most COL_CHUNKS of them), a block for each 32 columns of each chunk, 32 row lanes:
 * lane y sums the chunk's rows y, y + 32, ... in order, one thread a column adds the 32 lane sums
 * in order into the chunk's partial; then one thread a column adds the chunks' partials in order
 * and adds the total to the gradient. A fixed order set by N and C alone, no atomics
 * (deterministic, as the contract asks); and every SM has blocks: a GPT-2 124M micro-batch's
 * 16384 rows of 768 columns are 768 blocks, where one block a column group (24) would leave most
 * of an H100 idle on a gradient that is a single pass over memory. */
#include <math.h>

#include "elem_impl.cuh"


#define ROWS_PER_BLOCK (CU_THREADS / 32)

static unsigned row_blocks(int N)
{
    size_t b = ((size_t)N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
    return (unsigned)(b < 65536 ? b : 65536);
}
/* The grid-stride loop over rows, one warp a row. */
#define ROW_FOR(n, N)                                                                           \
    for (int n = blockIdx.x * ROWS_PER_BLOCK + (int)(threadIdx.x >> 5); n < (N);                \
         n += gridDim.x * ROWS_PER_BLOCK)

/* ---- column sums ---- */

#define COL_W 32      /* columns a block */
#define COL_H 32      /* row lanes a block */
#define COL_ROWS 512  /* rows a chunk, about */
#define COL_CHUNKS 128

/* The column sums of rows [n0, n1) for 32 columns: into part[0][c] and part[1][c] (acc and acc2's
 * terms) at chunk blockIdx.y, or, with one chunk, added to acc and acc2 at once. out (not NULL):
 * every x read also written there, rounded into ot as convert rounds (bias_bwd_to). */
static __global__ void colsum_k(int mode, float *acc, float *acc2, float *part, const void *x, int xt, const void *y,
                                int yt, const float *s0, const float *s1, const float *b, int N, int C, int L,
                                void *out, int ot)
{
    __shared__ float lanes[2][COL_H][COL_W + 1];
    int c = blockIdx.x * COL_W + threadIdx.x, n0 = blockIdx.y * L, n1 = min(n0 + L, N);
    float a1 = 0.0f, a2 = 0.0f;
    if (c < C) {
        for (int n = n0 + threadIdx.y; n < n1; n += COL_H) {
            size_t i = (size_t)n * C + c;
            float xv = cu_ld(x, xt, i);
            if (out) cu_st_convert(out, ot, i, xv);
            switch (mode) {
            case CU_COL_LN:
                a1 += xv * (cu_ld(y, yt, i) - s0[n]) * s1[n];
                a2 += xv;
                break;
            case CU_COL_RMS: a1 += xv * cu_ld(y, yt, i) * s1[n]; break;
            case CU_COL_GELU: a1 += cu_gelu_grad(cu_ld(y, yt, i) + b[c]) * xv; break;
            default: a1 += xv; break;
            }
        }
    }
    lanes[0][threadIdx.y][threadIdx.x] = a1;
    lanes[1][threadIdx.y][threadIdx.x] = a2;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float t1 = 0.0f, t2 = 0.0f;
        for (int k = 0; k < COL_H; k++) {
            t1 += lanes[0][k][threadIdx.x];
            t2 += lanes[1][k][threadIdx.x];
        }
        if (part) {
            part[(size_t)blockIdx.y * C + c] = t1;
            part[((size_t)gridDim.y + blockIdx.y) * C + c] = t2;
            return;
        }
        if (acc) acc[c] += t1;
        if (acc2) acc2[c] += t2;
    }
}

/* acc[c] += the R chunks' partials of column c in order (acc2 likewise). */
static __global__ void colsum_fin_k(float *acc, float *acc2, const float *part, int R, int C)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float t1 = 0.0f, t2 = 0.0f;
    for (int k = 0; k < R; k++) {
        t1 += part[(size_t)k * C + c];
        t2 += part[((size_t)R + k) * C + c];
    }
    if (acc) acc[c] += t1;
    if (acc2) acc2[c] += t2;
}

void cu_colsum(const backend *be, int mode, float *acc, float *acc2, const void *x, int xt, const void *y, int yt,
               const float *s0, const float *s1, const float *b, int N, int C, void *out, int ot)
{
    if ((!acc && !acc2 && !out) || N <= 0 || C <= 0) return;
    int R = (N + COL_ROWS - 1) / COL_ROWS;
    R = R < COL_CHUNKS ? R : COL_CHUNKS;
    int L = (N + R - 1) / R;
    R = (N + L - 1) / L; /* no empty chunk */
    float *part = R > 1 ? (float *)be->ops->alloc(be, (size_t)2 * R * C * sizeof(float)) : NULL;
    dim3 grid((unsigned)((C + COL_W - 1) / COL_W), (unsigned)R), block(COL_W, COL_H);
    colsum_k<<<grid, block, 0, cu_stream(be)>>>(mode, acc, acc2, part, x, xt, y, yt, s0, s1, b, N, C, L, out, ot);
    CU_LAUNCHED("column sums (a parameter gradient)");
    if (!part) return;
    colsum_fin_k<<<(unsigned)((C + 255) / 256), 256, 0, cu_stream(be)>>>(acc, acc2, part, R, C);
    CU_LAUNCHED("column sums' chunks (a parameter gradient)");
    be->ops->free(be, part); /* ordered after the kernels that use it */
}

static void e_bias_bwd(const backend *be, float *db, be_in dout, int N, int C)
{
    cu_colsum(be, CU_COL_PLAIN, db, NULL, dout.p, cu_dtype(dout.dt, "bias_bwd"), NULL, 0, NULL, NULL, NULL, N, C);
}

/* bias_bwd and convert from one read of dout: the column-sum kernel also stores what it reads,
 * rounded (the same sums, in the same order, as bias_bwd; the same bits as convert). */
static void e_bias_bwd_to(const backend *be, float *db, be_out rounded, be_in dout, int N, int C)
{
    cu_colsum(be, CU_COL_PLAIN, db, NULL, dout.p, cu_dtype(dout.dt, "bias_bwd_to"), NULL, 0, NULL, NULL, NULL, N, C,
              rounded.p, cu_dtype(rounded.dt, "bias_bwd_to"));
}

/* ---- rows: the scalar path, and the vector one ----
 * The vector path (C a multiple of CU_VEC, every row buffer and w, b 16-byte aligned): a warp
 * takes its row in chunks of CHUNK columns, lane l loading columns 8 l .. 8 l + 7 of a chunk with
 * 16-byte accesses. The outputs are computed per element, by the scalar path's expressions. The
 * row sums go through the warp's stage in shared memory, which lane l then reads as the scalar
 * path reads the row (columns l, l + 32, l + 64, ...): each lane adds the same terms in the same
 * order, then the same butterfly, so both paths give the same bits (a fixed order set by C). */
#define CHUNK (32 * CU_VEC)

/* Every buffer a row kernel touches aligned for the vector path, and C a multiple of CU_VEC. */
static int rows_vec(int C, const void *a, const void *b, const void *c, const void *d)
{
    return C % CU_VEC == 0 && cu_vec_ok(a) && cu_vec_ok(b) && cu_vec_ok(c) && cu_vec_ok(d);
}

/* Lane's CU_VEC columns of the chunk at c0 of the row at r into the warp's stage (st, CHUNK
 * floats, 16-byte aligned), widened; lanes past C load nothing. */
static __device__ __forceinline__ void stage_chunk(float *st, const void *p, int dt, size_t r, int c0, int C, int lane)
{
    int c = c0 + CU_VEC * lane;
    if (c >= C) return;
    float v[CU_VEC];
    cu_ld8(p, dt, r + c, v);
    float4 *q = (float4 *)st + 2 * lane;
    q[0] = make_float4(v[0], v[1], v[2], v[3]);
    q[1] = make_float4(v[4], v[5], v[6], v[7]);
}
/* The stage's column count for lane at chunk c0: its reads are st[lane + 32 j], j < this. */
static __device__ __forceinline__ int stage_cols(int c0, int C, int lane)
{
    int k = (C - c0 - lane + 31) / 32;
    return k < 0 ? 0 : k < CU_VEC ? k : CU_VEC;
}

/* ---- LayerNorm ---- */

static __device__ __forceinline__ float ln_out(float x, float m, float s, float w, float b)
{
    return (x - m) * s * w + b;
}

static __global__ void layernorm_fwd_k(void *out, int ot, float *mean, float *rstd, const void *inp, int it,
                                       const float *w, const float *b, int N, int C, float eps, int vec)
{
    __shared__ float4 stage[ROWS_PER_BLOCK][CHUNK / 4];
    float *st = (float *)stage[threadIdx.x >> 5];
    const int lane = threadIdx.x & 31;
    ROW_FOR(n, N) {
        size_t r = (size_t)n * C;
        float m = 0.0f;
        if (vec) {
            for (int c0 = 0; c0 < C; c0 += CHUNK) {
                stage_chunk(st, inp, it, r, c0, C, lane);
                __syncwarp();
                for (int j = 0, e = stage_cols(c0, C, lane); j < e; j++) m += st[lane + 32 * j];
                __syncwarp();
            }
        } else {
            for (int c = lane; c < C; c += 32) m += cu_ld(inp, it, r + c);
        }
        m = cu_warp_sum(m) / (float)C;
        float var = 0.0f;
        if (vec) {
            for (int c0 = 0; c0 < C; c0 += CHUNK) {
                stage_chunk(st, inp, it, r, c0, C, lane);
                __syncwarp();
                for (int j = 0, e = stage_cols(c0, C, lane); j < e; j++) {
                    float d = st[lane + 32 * j] - m;
                    var += d * d;
                }
                __syncwarp();
            }
        } else {
            for (int c = lane; c < C; c += 32) {
                float d = cu_ld(inp, it, r + c) - m;
                var += d * d;
            }
        }
        float s = 1.0f / sqrtf(cu_warp_sum(var) / (float)C + eps);
        if (vec) {
            for (int c = CU_VEC * lane; c < C; c += CHUNK) {
                float x[CU_VEC], wv[CU_VEC], bv[CU_VEC];
                cu_ld8(inp, it, r + c, x);
                cu_ld8(w, BE_F32, c, wv);
                cu_ld8(b, BE_F32, c, bv);
#pragma unroll
                for (int k = 0; k < CU_VEC; k++) x[k] = ln_out(x[k], m, s, wv[k], bv[k]);
                cu_st8(out, ot, r + c, x);
            }
        } else {
            for (int c = lane; c < C; c += 32) cu_st(out, ot, r + c, ln_out(cu_ld(inp, it, r + c), m, s, w[c], b[c]));
        }
        if (lane == 0) {
            if (mean) mean[n] = m;
            if (rstd) rstd[n] = s;
        }
    }
}
static void e_layernorm_fwd(const backend *be, be_out out, float *mean, float *rstd, be_in inp, const float *w,
                            const float *b, int N, int C, float eps)
{
    if (N <= 0 || C <= 0) return;
    int vec = rows_vec(C, out.p, inp.p, w, b);
    layernorm_fwd_k<<<row_blocks(N), CU_THREADS, 0, cu_stream(be)>>>(out.p, cu_dtype(out.dt, "layernorm_fwd"), mean,
                                                                    rstd, inp.p, cu_dtype(inp.dt, "layernorm_fwd"),
                                                                    w, b, N, C, eps, vec);
    CU_LAUNCHED("layernorm_fwd");
}

/* One element of LayerNorm's dinp: d + rstd (dxhat - a - xhat bs), dxhat = dy w. */
static __device__ __forceinline__ float ln_din(float d, float dy, float x, float w, float m, float s, float a,
                                               float bs)
{
    float xh = (x - m) * s;
    return d + s * (dy * w - a - xh * bs);
}

/* dinp row += rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)), dxhat = dout w. */
static __global__ void layernorm_bwd_k(void *dinp, int dit, const void *dout, int dt, const void *inp, int it,
                                       const float *w, const float *mean, const float *rstd, int N, int C, int vec)
{
    __shared__ float4 stage[ROWS_PER_BLOCK][2][CHUNK / 4];
    float *sd = (float *)stage[threadIdx.x >> 5][0], *sx = (float *)stage[threadIdx.x >> 5][1];
    const int lane = threadIdx.x & 31;
    ROW_FOR(n, N) {
        size_t r = (size_t)n * C;
        float m = mean[n], s = rstd[n], a = 0.0f, bs = 0.0f;
        if (vec) {
            for (int c0 = 0; c0 < C; c0 += CHUNK) {
                stage_chunk(sd, dout, dt, r, c0, C, lane);
                stage_chunk(sx, inp, it, r, c0, C, lane);
                __syncwarp();
                for (int j = 0, e = stage_cols(c0, C, lane); j < e; j++) {
                    float dxh = sd[lane + 32 * j] * w[c0 + lane + 32 * j];
                    a += dxh;
                    bs += dxh * (sx[lane + 32 * j] - m) * s;
                }
                __syncwarp();
            }
        } else {
            for (int c = lane; c < C; c += 32) {
                float dxh = cu_ld(dout, dt, r + c) * w[c];
                a += dxh;
                bs += dxh * (cu_ld(inp, it, r + c) - m) * s;
            }
        }
        a = cu_warp_sum(a) / (float)C;
        bs = cu_warp_sum(bs) / (float)C;
        if (vec) {
            for (int c = CU_VEC * lane; c < C; c += CHUNK) {
                float d[CU_VEC], dy[CU_VEC], x[CU_VEC], wv[CU_VEC];
                cu_ld8(dinp, dit, r + c, d);
                cu_ld8(dout, dt, r + c, dy);
                cu_ld8(inp, it, r + c, x);
                cu_ld8(w, BE_F32, c, wv);
#pragma unroll
                for (int k = 0; k < CU_VEC; k++) d[k] = ln_din(d[k], dy[k], x[k], wv[k], m, s, a, bs);
                cu_st8(dinp, dit, r + c, d);
            }
        } else {
            for (int c = lane; c < C; c += 32)
                cu_st(dinp, dit, r + c,
                      ln_din(cu_ld(dinp, dit, r + c), cu_ld(dout, dt, r + c), cu_ld(inp, it, r + c), w[c], m, s, a,
                             bs));
        }
    }
}
static void e_layernorm_bwd(const backend *be, be_out dinp, float *dw, float *db, be_in dout, be_in inp,
                            const float *w, const float *mean, const float *rstd, int N, int C)
{
    if (N <= 0 || C <= 0) return;
    int dt = cu_dtype(dout.dt, "layernorm_bwd"), it = cu_dtype(inp.dt, "layernorm_bwd");
    cu_colsum(be, CU_COL_LN, dw, db, dout.p, dt, inp.p, it, mean, rstd, NULL, N, C);
    if (!dinp.p) return;
    int vec = rows_vec(C, dinp.p, dout.p, inp.p, w);
    layernorm_bwd_k<<<row_blocks(N), CU_THREADS, 0, cu_stream(be)>>>(dinp.p, cu_dtype(dinp.dt, "layernorm_bwd"),
                                                                    dout.p, dt, inp.p, it, w, mean, rstd, N, C, vec);
    CU_LAUNCHED("layernorm_bwd");
}

/* ---- RMSNorm ---- */

static __global__ void rmsnorm_fwd_k(void *out, int ot, float *rstd, const void *inp, int it, const float *w, int N,
                                     int C, float eps, int vec)
{
    __shared__ float4 stage[ROWS_PER_BLOCK][CHUNK / 4];
    float *st = (float *)stage[threadIdx.x >> 5];
    const int lane = threadIdx.x & 31;
    ROW_FOR(n, N) {
        size_t r = (size_t)n * C;
        float ss = 0.0f;
        if (vec) {
            for (int c0 = 0; c0 < C; c0 += CHUNK) {
                stage_chunk(st, inp, it, r, c0, C, lane);
                __syncwarp();
                for (int j = 0, e = stage_cols(c0, C, lane); j < e; j++) {
                    float v = st[lane + 32 * j];
                    ss += v * v;
                }
                __syncwarp();
            }
        } else {
            for (int c = lane; c < C; c += 32) {
                float v = cu_ld(inp, it, r + c);
                ss += v * v;
            }
        }
        float s = 1.0f / sqrtf(cu_warp_sum(ss) / (float)C + eps);
        if (vec) {
            for (int c = CU_VEC * lane; c < C; c += CHUNK) {
                float x[CU_VEC], wv[CU_VEC];
                cu_ld8(inp, it, r + c, x);
                cu_ld8(w, BE_F32, c, wv);
#pragma unroll
                for (int k = 0; k < CU_VEC; k++) x[k] = x[k] * s * wv[k];
                cu_st8(out, ot, r + c, x);
            }
        } else {
            for (int c = lane; c < C; c += 32) cu_st(out, ot, r + c, cu_ld(inp, it, r + c) * s * w[c]);
        }
        if (lane == 0 && rstd) rstd[n] = s;
    }
}
static void e_rmsnorm_fwd(const backend *be, be_out out, float *rstd, be_in inp, const float *w, int N, int C,
                          float eps)
{
    if (N <= 0 || C <= 0) return;
    int vec = rows_vec(C, out.p, inp.p, w, w);
    rmsnorm_fwd_k<<<row_blocks(N), CU_THREADS, 0, cu_stream(be)>>>(out.p, cu_dtype(out.dt, "rmsnorm_fwd"), rstd,
                                                                  inp.p, cu_dtype(inp.dt, "rmsnorm_fwd"), w, N, C,
                                                                  eps, vec);
    CU_LAUNCHED("rmsnorm_fwd");
}

/* One element of RMSNorm's dinp: d + rstd (dy w - x rstd a). */
static __device__ __forceinline__ float rms_din(float d, float dy, float x, float w, float s, float a)
{
    return d + s * (dy * w - x * s * a);
}

/* dinp row += rstd (dxhat - xhat mean(dxhat xhat)), xhat = x rstd, dxhat = dout w. */
static __global__ void rmsnorm_bwd_k(void *dinp, int dit, const void *dout, int dt, const void *inp, int it,
                                     const float *w, const float *rstd, int N, int C, int vec)
{
    __shared__ float4 stage[ROWS_PER_BLOCK][2][CHUNK / 4];
    float *sd = (float *)stage[threadIdx.x >> 5][0], *sx = (float *)stage[threadIdx.x >> 5][1];
    const int lane = threadIdx.x & 31;
    ROW_FOR(n, N) {
        size_t r = (size_t)n * C;
        float s = rstd[n], a = 0.0f;
        if (vec) {
            for (int c0 = 0; c0 < C; c0 += CHUNK) {
                stage_chunk(sd, dout, dt, r, c0, C, lane);
                stage_chunk(sx, inp, it, r, c0, C, lane);
                __syncwarp();
                for (int j = 0, e = stage_cols(c0, C, lane); j < e; j++)
                    a += sd[lane + 32 * j] * w[c0 + lane + 32 * j] * sx[lane + 32 * j] * s;
                __syncwarp();
            }
        } else {
            for (int c = lane; c < C; c += 32) a += cu_ld(dout, dt, r + c) * w[c] * cu_ld(inp, it, r + c) * s;
        }
        a = cu_warp_sum(a) / (float)C;
        if (vec) {
            for (int c = CU_VEC * lane; c < C; c += CHUNK) {
                float d[CU_VEC], dy[CU_VEC], x[CU_VEC], wv[CU_VEC];
                cu_ld8(dinp, dit, r + c, d);
                cu_ld8(dout, dt, r + c, dy);
                cu_ld8(inp, it, r + c, x);
                cu_ld8(w, BE_F32, c, wv);
#pragma unroll
                for (int k = 0; k < CU_VEC; k++) d[k] = rms_din(d[k], dy[k], x[k], wv[k], s, a);
                cu_st8(dinp, dit, r + c, d);
            }
        } else {
            for (int c = lane; c < C; c += 32)
                cu_st(dinp, dit, r + c, rms_din(cu_ld(dinp, dit, r + c), cu_ld(dout, dt, r + c), cu_ld(inp, it, r + c),
                                                w[c], s, a));
        }
    }
}
static void e_rmsnorm_bwd(const backend *be, be_out dinp, float *dw, be_in dout, be_in inp, const float *w,
                          const float *rstd, int N, int C)
{
    if (N <= 0 || C <= 0) return;
    int dt = cu_dtype(dout.dt, "rmsnorm_bwd"), it = cu_dtype(inp.dt, "rmsnorm_bwd");
    cu_colsum(be, CU_COL_RMS, dw, NULL, dout.p, dt, inp.p, it, NULL, rstd, NULL, N, C);
    if (!dinp.p) return;
    int vec = rows_vec(C, dinp.p, dout.p, inp.p, w);
    rmsnorm_bwd_k<<<row_blocks(N), CU_THREADS, 0, cu_stream(be)>>>(dinp.p, cu_dtype(dinp.dt, "rmsnorm_bwd"), dout.p,
                                                                  dt, inp.p, it, w, rstd, N, C, vec);
    CU_LAUNCHED("rmsnorm_bwd");
}

void cu_fill_norm(struct be_ops *o)
{
    o->layernorm_fwd = e_layernorm_fwd;
    o->layernorm_bwd = e_layernorm_bwd;
    o->rmsnorm_fwd = e_rmsnorm_fwd;
    o->rmsnorm_bwd = e_rmsnorm_bwd;
    o->bias_bwd = e_bias_bwd;
    o->bias_bwd_to = e_bias_bwd_to;
}
