/* The CUDA backend's AdamW over a flat slice (PyTorch semantics, decoupled weight decay, the bias
 * corrections computed on the host in double as the cpu backend's) and the sum of squares behind
 * the gradient norm, which returns its value to the host (it waits for the stream).
 *
 * sumsq sums in double in an order fixed by n alone: nb blocks of CU_THREADS threads (one per
 * 8192 elements, 1 to 512), thread t of the slice's grid taking elements t, t + nb CU_THREADS, ...
 * in order; each block's sum to a partial in stream-ordered scratch (cudaMallocAsync), and one
 * block adds the partials in a fixed order. No atomics: the same bits on every run and every GPU. AdamW reads and writes
 * four elements a thread through 128-bit accesses where the four buffers are 16-byte aligned (the
 * flat buffers' slices are), the same arithmetic per element either way.
 *
 * Slices come many at once (a model's tensors: adamw_many, sumsq_many; adamw and sumsq are the
 * same code on one slice): a table of tasks, built on the host and copied to the device with the
 * call (the staged H2D copy: no wait), and one launch over it — a block a task — instead of a
 * launch (two for sumsq) a slice. */
#include <math.h>
#include <stdint.h>

#include "elem_impl.cuh"

/* One element's step; both kernels below run exactly this arithmetic. */
static __device__ __forceinline__ void adamw1(float &p, float g, float &m, float &v, float beta1, float beta2,
                                              float eps, float gscale, float step_size, float inv_sqrt_bc2,
                                              float decay)
{
    float gi = g * gscale;
    m = beta1 * m + (1.0f - beta1) * gi;
    v = beta2 * v + (1.0f - beta2) * gi * gi;
    p = p * decay - step_size * m / (sqrtf(v) * inv_sqrt_bc2 + eps);
}
/* AdamW over many slices: each task a run of one slice, of float4s (vec) or floats. */
#define ADAM_TASK 8192 /* float4s or floats a task */
typedef struct {
    float *p;
    const float *g;
    float *m, *v;
    uint32_t len, vec;
    float decay;
    uint32_t pad;
} adam_task;

static __global__ void adamw_many_k(const adam_task *t, int ntasks, float beta1, float beta2, float eps,
                                    float gscale, float step_size, float inv_sqrt_bc2)
{
    for (int k = blockIdx.x; k < ntasks; k += gridDim.x) {
        const adam_task a = t[k];
        if (a.vec) {
            float4 *p = (float4 *)a.p, *m = (float4 *)a.m, *v = (float4 *)a.v;
            const float4 *g = (const float4 *)a.g;
            for (uint32_t i = threadIdx.x; i < a.len; i += blockDim.x) {
                float4 pi = p[i], gi = g[i], mi = m[i], vi = v[i];
                adamw1(pi.x, gi.x, mi.x, vi.x, beta1, beta2, eps, gscale, step_size, inv_sqrt_bc2, a.decay);
                adamw1(pi.y, gi.y, mi.y, vi.y, beta1, beta2, eps, gscale, step_size, inv_sqrt_bc2, a.decay);
                adamw1(pi.z, gi.z, mi.z, vi.z, beta1, beta2, eps, gscale, step_size, inv_sqrt_bc2, a.decay);
                adamw1(pi.w, gi.w, mi.w, vi.w, beta1, beta2, eps, gscale, step_size, inv_sqrt_bc2, a.decay);
                p[i] = pi, m[i] = mi, v[i] = vi;
            }
        } else {
            for (uint32_t i = threadIdx.x; i < a.len; i += blockDim.x)
                adamw1(a.p[i], a.g[i], a.m[i], a.v[i], beta1, beta2, eps, gscale, step_size, inv_sqrt_bc2, a.decay);
        }
    }
}

static void e_adamw_many(const backend *be, float *const *p, const float *const *g, float *const *m, float *const *v,
                         const size_t *n, const float *wd, int count, float lr, float beta1, float beta2, float eps,
                         float gscale, int64_t step)
{
    TD_CHECK(step >= 1, "AdamW steps count from 1", "step %lld", (long long)step);
    size_t ntasks = 0;
    for (int pass = 0; pass < 2; pass++) { /* count the tasks, then fill them */
        adam_task *t = NULL;
        if (pass) {
            if (!ntasks) return;
            t = (adam_task *)td_xcalloc(ntasks, sizeof *t);
        }
        size_t k = 0;
        for (int i = 0; i < count; i++) {
            size_t n4 = ((((uintptr_t)p[i] | (uintptr_t)g[i] | (uintptr_t)m[i] | (uintptr_t)v[i]) & 15) == 0 && n[i] >= 4)
                            ? n[i] / 4 : 0;
            float decay = 1.0f - lr * wd[i]; /* as adamw's */
            for (int vec = 1; vec >= 0; vec--) { /* the float4s, then the floats past them */
                size_t lo = vec ? 0 : 4 * n4, len = vec ? n4 : n[i] - 4 * n4;
                for (size_t o = 0; o < len; o += ADAM_TASK, k++) {
                    if (!t) continue;
                    size_t e = lo + (vec ? 4 * o : o); /* the task's first element */
                    t[k].p = p[i] + e, t[k].g = g[i] + e, t[k].m = m[i] + e, t[k].v = v[i] + e;
                    t[k].len = (uint32_t)(len - o < ADAM_TASK ? len - o : ADAM_TASK);
                    t[k].vec = (uint32_t)vec, t[k].decay = decay;
                }
            }
        }
        if (!pass) {
            ntasks = k;
            continue;
        }
        double bc1 = 1.0 - pow((double)beta1, (double)step);
        double bc2 = 1.0 - pow((double)beta2, (double)step);
        float step_size = (float)(lr / bc1);
        float inv_sqrt_bc2 = (float)(1.0 / sqrt(bc2));
        size_t bytes = ntasks * sizeof *t;
        adam_task *dt = (adam_task *)be->ops->alloc(be, bytes);
        be->ops->copy_bytes(be, dt, t, bytes, BE_H2D); /* staged: t may go at once */
        free(t);
        unsigned blocks = (unsigned)(ntasks < 65535 ? ntasks : 65535);
        adamw_many_k<<<blocks, CU_THREADS, 0, cu_stream(be)>>>(dt, (int)ntasks, beta1, beta2, eps, gscale, step_size,
                                                               inv_sqrt_bc2);
        CU_LAUNCHED("adamw (many slices)");
        be->ops->free(be, dt); /* ordered after the kernel */
    }
}

static void e_adamw(const backend *be, float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1,
                    float beta2, float eps, float wd, float gscale, int64_t step)
{
    e_adamw_many(be, &p, &g, &m, &v, &n, &wd, 1, lr, beta1, beta2, eps, gscale, step); /* one slice: the same kernel */
}

#define SUMSQ_BLOCKS 512    /* blocks a slice, at most */
#define SUMSQ_PER_BLOCK 8192 /* elements a block, about, below that */

/* The blocks of a slice of n elements: one per SUMSQ_PER_BLOCK, 1 to SUMSQ_BLOCKS (a bias of 768
 * elements is one block, not 512 of mostly idle threads). Set by n alone. */
static unsigned sumsq_blocks(size_t n)
{
    size_t b = (n + SUMSQ_PER_BLOCK - 1) / SUMSQ_PER_BLOCK;
    return (unsigned)(b < 1 ? 1 : b > SUMSQ_BLOCKS ? SUMSQ_BLOCKS : b);
}

/* Slice s is blocks first .. first + nb - 1 of the first kernel: its block k's thread t sums
 * elements k CU_THREADS + t, + nb CU_THREADS, ... in order, the block's sum the partial part[first
 * + k]; then block s of the second adds slice s's nb partials in a fixed order. Set by n alone
 * (one slice or many: the same bits). */
typedef struct {
    const float *x;
    size_t n;
    unsigned first, nb;
} sumsq_slice;
static __global__ void sumsq_many_part_k(double *part, const sumsq_slice *sl, int count)
{
    int lo = 0, hi = count - 1; /* the slice whose blocks hold this one */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (sl[mid].first <= blockIdx.x) lo = mid;
        else hi = mid - 1;
    }
    const sumsq_slice s = sl[lo];
    size_t kb = blockIdx.x - s.first;
    double acc = 0.0;
    for (size_t i = kb * CU_THREADS + threadIdx.x; i < s.n; i += (size_t)s.nb * CU_THREADS)
        acc += (double)s.x[i] * s.x[i];
    acc = cu_block_sum_d(acc);
    if (threadIdx.x == 0) part[blockIdx.x] = acc;
}
static __global__ void sumsq_many_total_k(double *tot, const double *part, const sumsq_slice *sl)
{
    const sumsq_slice s = sl[blockIdx.x];
    double acc = 0.0;
    for (unsigned k = threadIdx.x; k < s.nb; k += CU_THREADS) acc += part[s.first + k];
    acc = cu_block_sum_d(acc);
    if (threadIdx.x == 0) tot[blockIdx.x] = acc;
}

/* Every slice's sum in two launches, read back once: count slices, one wait. */
static void e_sumsq_many(const backend *be, double *out, const float *const *x, const size_t *n, int count)
{
    if (count <= 0) return;
    cudaStream_t st = cu_stream(be);
    sumsq_slice *h = (sumsq_slice *)td_xmalloc((size_t)count * sizeof *h);
    size_t blocks = 0;
    for (int i = 0; i < count; i++) {
        h[i].x = x[i], h[i].n = n[i], h[i].first = (unsigned)blocks, h[i].nb = sumsq_blocks(n[i]);
        blocks += h[i].nb;
    }
    size_t tb = (size_t)count * sizeof *h, pb = blocks * sizeof(double);
    char *scratch = NULL;
    CU_CHECK(cudaMallocAsync((void **)&scratch, pb + (size_t)count * sizeof(double) + tb, st), "sumsq: scratch");
    double *part = (double *)scratch, *tot = (double *)(scratch + pb);
    sumsq_slice *sl = (sumsq_slice *)(scratch + pb + (size_t)count * sizeof(double));
    be->ops->copy_bytes(be, sl, h, tb, BE_H2D); /* staged: h may go at once */
    free(h);
    sumsq_many_part_k<<<(unsigned)blocks, CU_THREADS, 0, st>>>(part, sl, count);
    CU_LAUNCHED("sumsq (many slices)");
    sumsq_many_total_k<<<(unsigned)count, CU_THREADS, 0, st>>>(tot, part, sl);
    CU_LAUNCHED("sumsq (many slices, totals)");
    CU_CHECK(cudaMemcpyAsync(out, tot, (size_t)count * sizeof(double), cudaMemcpyDeviceToHost, st),
             "sumsq: reading the sums");
    CU_CHECK(cudaFreeAsync(scratch, st), "sumsq: scratch");
    CU_CHECK(cudaStreamSynchronize(st), "sumsq: waiting for the sums");
}

static double e_sumsq(const backend *be, const float *x, size_t n)
{
    double s = 0.0;
    e_sumsq_many(be, &s, &x, &n, 1); /* one slice: the same kernels, one wait */
    return s;
}

void cu_fill_optim(struct be_ops *o)
{
    o->adamw = e_adamw;
    o->adamw_many = e_adamw_many;
    o->sumsq = e_sumsq;
    o->sumsq_many = e_sumsq_many;
}
