/* Private to src/backend/cuda: what the CUDA backend's files share. The backend is one stream
 * (be->queue), every entry enqueued on it; each file fills its share of the vtable (the fill
 * functions below, called by be_cuda in cuda.c). Errors never reach the user as a bare CUDA
 * code: CU_CHECK names the call, what trident was doing, the rank and the device, and ends the
 * job as trident's other errors do (cu_die). Compiled as CUDA C++ (.cu) or C (cuda.c). */
#ifndef TRIDENT_CUDA_IMPL_H
#define TRIDENT_CUDA_IMPL_H

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "../be_ops.h"

/* Ends the job: "<what>: <call> failed: <CUDA's name and text> (rank r, device d, file:line)",
 * with a hint for the errors a user can act on (out of memory: how much was asked and free, and
 * the flags that need less). err is the cudaError_t. */
void cu_die(const char *call, const char *what, int err, const char *file, int line);

#define CU_CHECK(call, what)                                                        \
    do {                                                                            \
        cudaError_t cu_e_ = (call);                                                 \
        if (cu_e_ != cudaSuccess) cu_die(#call, (what), (int)cu_e_, __FILE__, __LINE__); \
    } while (0)
/* After a kernel launch: a launch error names the kernel. */
#define CU_LAUNCHED(kernel) CU_CHECK(cudaGetLastError(), "launching " kernel)

static inline cudaStream_t cu_stream(const backend *be) { return (cudaStream_t)be->queue; }

/* Each file's share of the vtable (be_cuda calls them in turn). */
void cuda_fill_core(struct be_ops *ops);            /* cuda.c, gemm.cu: memory, queue, events, GEMMs, dtypes, describe */
void cuda_fill_elementwise(struct be_ops *ops);     /* embedding, norms, rope, activations, dropout, cross-entropy, AdamW, sumsq */
void cuda_fill_attention_moe(struct be_ops *ops);   /* attention (training and the kv decode), the MoE router and permutes */

#ifdef __cplusplus
}
#endif

#endif
