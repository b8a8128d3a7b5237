/* Private to cuda.c and gemm.cu: the backend's own state behind be->impl and what the two files
 * call of each other. The other files of the folder need none of it (cuda_impl.h is theirs). */
#ifndef TRIDENT_CUDA_CORE_H
#define TRIDENT_CUDA_CORE_H

#include "cuda_impl.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Released events kept for reuse: a timed iteration (the trainer's breakdown) holds two a kernel
 * until its end (be_stats_flush), a few thousand. */
#define CU_EVENT_POOL 4096
/* Host-to-device copies go through pinned staging slots (cuda.c): the host source is copied into
 * a slot and the DMA from it enqueued, so copy_bytes returns once the source may be reused without
 * waiting for the queue. A slot is reused after its copy has run (its event). */
#define CU_STAGE_SLOTS 16
#define CU_STAGE_SLOT_BYTES ((size_t)1 << 20)

typedef struct cuda_state {
    int tf32;                           /* fp32 GEMMs may use TF32 (--tf32) */
    void *cublas;                       /* the cublasHandle_t, on be->queue */
    void *cublaslt;                     /* the cublasLtHandle_t (gemm.cu: the 16-bit GEMMs' bias epilogue), or NULL */
    void *lt_ws;                        /* its workspace (CU_LT_WS bytes, stream-ordered), or NULL */
    cudaEvent_t events[CU_EVENT_POOL];  /* released events, ready for reuse */
    int nevents;
    unsigned char *stage;               /* pinned, CU_STAGE_SLOTS x CU_STAGE_SLOT_BYTES */
    cudaEvent_t stage_done[CU_STAGE_SLOTS]; /* recorded after each slot's copy */
    int stage_next;                     /* the slot the next piece takes */
    int sm;                             /* compute capability, 10 major + minor (90: Hopper) */
    size_t total_mem;                   /* bytes of device memory */
    char name[256];                     /* "NVIDIA H200" */
} cuda_state;

static inline cuda_state *cu_state(const backend *be) { return (cuda_state *)be->impl; }

/* Ends the job as cu_die does, with an error text of the caller's (a library's status). */
void cu_fail(const char *call, const char *what, const char *error, const char *hint, const char *file, int line)
    __attribute__((noreturn));

/* gemm.cu: opens cuBLAS and makes its handle on be's stream (cu_state(be)->cublas); frees it. */
void cuda_gemm_init(backend *be);
void cuda_gemm_destroy(backend *be);
/* "cuBLAS 13.0.2", the loaded library's version. */
void cuda_gemm_describe(const backend *be, char *out, size_t len);
/* The GEMM, dtype and measurement entries: matmul_fwd/bwd, matmul_fwd_lp/bwd_lp, convert,
 * lp_native, peak_gflops, adamw_stream_gbps. */
void cuda_fill_gemm(struct be_ops *ops);

#ifdef __cplusplus
}
#endif

#endif
