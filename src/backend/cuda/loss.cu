/* The CUDA backend's vocab-parallel softmax cross-entropy, in the steps the parallel code
 * all-reduces between (max, sum of exp, target logit, loss) and the fused backward that
 * overwrites the logits with their gradient, as src/backend/cpu/crossentropy.c: columns past
 * Vreal are vocabulary padding (no part in the max or the sum, gradient exactly 0).
 * One block a row for the row-wide steps (each thread strides the columns; the block combines
 * in a fixed order, the sum of exps in double as the cpu's), one thread a row for the others. */
#include <math.h>

#include "elem_impl.cuh"

static unsigned row_grid(int BT) { return BT < 65536 ? (unsigned)BT : 65536u; }
#define BLOCK_ROW_FOR(i, BT) for (int i = blockIdx.x; i < (BT); i += gridDim.x)

static __global__ void ce_max_k(float *maxv, const void *logits, int lt, int BT, int Vloc, int Vreal)
{
    BLOCK_ROW_FOR(i, BT) {
        size_t r = (size_t)i * Vloc;
        float m = -INFINITY;
        for (int j = threadIdx.x; j < Vreal; j += CU_THREADS) {
            float v = cu_ld(logits, lt, r + j);
            m = v > m ? v : m;
        }
        m = cu_block_max(m);
        if (threadIdx.x == 0) maxv[i] = m;
    }
}
static void e_ce_max(const backend *be, float *maxv, be_in logits, int BT, int Vloc, int Vreal)
{
    if (BT <= 0) return;
    ce_max_k<<<row_grid(BT), CU_THREADS, 0, cu_stream(be)>>>(maxv, logits.p, cu_dtype(logits.dt, "ce_max"), BT, Vloc,
                                                            Vreal);
    CU_LAUNCHED("ce_max");
}

static __global__ void ce_sumexp_k(float *sumexp, const void *logits, int lt, const float *maxv, int BT, int Vloc,
                                   int Vreal)
{
    BLOCK_ROW_FOR(i, BT) {
        size_t r = (size_t)i * Vloc;
        float m = maxv[i];
        double s = 0.0;
        for (int j = threadIdx.x; j < Vreal; j += CU_THREADS) s += (double)expf(cu_ld(logits, lt, r + j) - m);
        s = cu_block_sum_d(s);
        if (threadIdx.x == 0) sumexp[i] = (float)s;
    }
}
static void e_ce_sumexp(const backend *be, float *sumexp, be_in logits, const float *maxv, int BT, int Vloc,
                        int Vreal)
{
    if (BT <= 0) return;
    ce_sumexp_k<<<row_grid(BT), CU_THREADS, 0, cu_stream(be)>>>(sumexp, logits.p, cu_dtype(logits.dt, "ce_sumexp"),
                                                               maxv, BT, Vloc, Vreal);
    CU_LAUNCHED("ce_sumexp");
}

static __global__ void ce_target_k(float *tlogit, const void *logits, int lt, const int32_t *targets, int BT, int Vloc,
                                   int vstart)
{
    CU_FOR(i, (size_t)BT) {
        int64_t r = (int64_t)targets[i] - vstart;
        tlogit[i] = r >= 0 && r < Vloc ? cu_ld(logits, lt, i * Vloc + (size_t)r) : 0.0f;
    }
}
static void e_ce_target(const backend *be, float *tlogit, be_in logits, const int32_t *targets, int BT, int Vloc,
                        int vstart)
{
    if (BT <= 0) return;
    ce_target_k<<<cu_blocks((size_t)BT), CU_THREADS, 0, cu_stream(be)>>>(
        tlogit, logits.p, cu_dtype(logits.dt, "ce_target"), targets, BT, Vloc, vstart);
    CU_LAUNCHED("ce_target");
}

/* The four forward steps in one pass, for an unsplit vocabulary (vstart 0): each thread keeps a
 * running max and its sum of exps relative to it over its columns (the sum in double, rescaled
 * when the max rises), the block combines the threads' pairs in thread order (deterministic):
 * M = their max, S = sum of s_t exp(m_t - M); loss = log S + M - the target's logit. */
static __global__ void ce_fwd_fused_k(float *losses, float *maxv, float *sumexp, float *tlogit, const void *logits,
                                      int lt, const int32_t *targets, int BT, int Vloc, int Vreal)
{
    __shared__ float ms[CU_THREADS];
    __shared__ double ss[CU_THREADS];
    BLOCK_ROW_FOR(i, BT) {
        size_t r = (size_t)i * Vloc;
        float m = -INFINITY;
        double s = 0.0;
        for (int j = threadIdx.x; j < Vreal; j += CU_THREADS) {
            float x = cu_ld(logits, lt, r + j);
            if (x > m) {
                s = m == -INFINITY ? 0.0 : s * (double)expf(m - x);
                m = x;
            }
            s += (double)expf(x - m);
        }
        ms[threadIdx.x] = m;
        ss[threadIdx.x] = s;
        __syncthreads();
        if (threadIdx.x == 0) {
            float M = -INFINITY;
            for (int t = 0; t < CU_THREADS; t++) M = fmaxf(M, ms[t]);
            double S = 0.0;
            for (int t = 0; t < CU_THREADS; t++)
                if (ms[t] != -INFINITY) S += ss[t] * (double)expf(ms[t] - M);
            int64_t tg = targets[i];
            float tl = tg >= 0 && tg < Vloc ? cu_ld(logits, lt, r + (size_t)tg) : 0.0f;
            maxv[i] = M;
            sumexp[i] = (float)S;
            tlogit[i] = tl;
            losses[i] = logf((float)S) + M - tl;
        }
        __syncthreads(); /* the pairs are read before the next row writes them */
    }
}
static void e_ce_fwd_fused(const backend *be, float *losses, float *maxv, float *sumexp, float *tlogit, be_in logits,
                           const int32_t *targets, int BT, int Vloc, int Vreal)
{
    if (BT <= 0) return;
    ce_fwd_fused_k<<<row_grid(BT), CU_THREADS, 0, cu_stream(be)>>>(losses, maxv, sumexp, tlogit, logits.p,
                                                                  cu_dtype(logits.dt, "ce_fwd_fused"), targets, BT,
                                                                  Vloc, Vreal);
    CU_LAUNCHED("ce_fwd_fused");
}

static __global__ void ce_loss_k(float *losses, const float *maxv, const float *sumexp, const float *tlogit, int BT)
{
    CU_FOR(i, (size_t)BT) losses[i] = logf(sumexp[i]) + maxv[i] - tlogit[i];
}
static void e_ce_loss(const backend *be, float *losses, const float *maxv, const float *sumexp, const float *tlogit,
                      int BT)
{
    if (BT <= 0) return;
    ce_loss_k<<<cu_blocks((size_t)BT), CU_THREADS, 0, cu_stream(be)>>>(losses, maxv, sumexp, tlogit, BT);
    CU_LAUNCHED("ce_loss");
}


/* Row i of dlogits (dtype ot) written = exp(l - maxv) / sumexp dloss, minus dloss at the target, 0
 * past Vreal, from logits (it): ce_bwd_to, and ce_bwd in place (dlogits = logits). */
static __global__ void ce_bwd_to_k(void *dlogits, int ot, const void *logits, int it, const float *maxv,
                                   const float *sumexp, const int32_t *targets, const float *dloss, int BT, int Vloc,
                                   int Vreal, int vstart)
{
    BLOCK_ROW_FOR(i, BT) {
        size_t r = (size_t)i * Vloc;
        float m = maxv[i], d = dloss[i], scale = 1.0f / sumexp[i] * d;
        int64_t t = (int64_t)targets[i] - vstart;
        for (int j = threadIdx.x; j < Vloc; j += CU_THREADS) {
            float v = 0.0f;
            if (j < Vreal) {
                v = expf(cu_ld(logits, it, r + j) - m) * scale;
                if (j == t) v -= d;
            }
            cu_st(dlogits, ot, r + j, v);
        }
    }
}
static void e_ce_bwd_to(const backend *be, be_out dlogits, be_in logits, const float *maxv, const float *sumexp,
                        const int32_t *targets, const float *dloss, int BT, int Vloc, int Vreal, int vstart)
{
    if (BT <= 0 || Vloc <= 0) return;
    ce_bwd_to_k<<<row_grid(BT), CU_THREADS, 0, cu_stream(be)>>>(dlogits.p, cu_dtype(dlogits.dt, "ce_bwd_to"), logits.p,
                                                               cu_dtype(logits.dt, "ce_bwd_to"), maxv, sumexp, targets,
                                                               dloss, BT, Vloc, Vreal, vstart);
    CU_LAUNCHED("ce_bwd_to");
}

static void e_ce_bwd(const backend *be, be_out logits, const float *maxv, const float *sumexp, const int32_t *targets,
                     const float *dloss, int BT, int Vloc, int Vreal, int vstart)
{
    if (BT <= 0 || Vloc <= 0) return;
    int lt = cu_dtype(logits.dt, "ce_bwd"); /* in place: each element read, then written, by one thread */
    ce_bwd_to_k<<<row_grid(BT), CU_THREADS, 0, cu_stream(be)>>>(logits.p, lt, logits.p, lt, maxv, sumexp, targets,
                                                               dloss, BT, Vloc, Vreal, vstart);
    CU_LAUNCHED("ce_bwd");
}

void cu_fill_loss(struct be_ops *o)
{
    o->ce_max = e_ce_max;
    o->ce_sumexp = e_ce_sumexp;
    o->ce_target = e_ce_target;
    o->ce_loss = e_ce_loss;
    o->ce_fwd_fused = e_ce_fwd_fused;
    o->ce_bwd = e_ce_bwd;
    o->ce_bwd_to = e_ce_bwd_to;
}
