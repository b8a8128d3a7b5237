/* The CUDA backend as the registry sees it (src/backend/registry.c): plain C, no CUDA header, so
 * the registry compiles as C11 without nvcc. Only in a binary built with TRIDENT_HAVE_CUDA. */
#ifndef TRIDENT_CUDA_H
#define TRIDENT_CUDA_H

#include "../be_ops.h"

/* A CUDA backend on device `device` - 1 (device > 0), or on this rank's device (device 0: the
 * local rank modulo the visible devices, be_device_for_rank): one non-blocking stream as its queue,
 * memory from the device's stream-ordered pool, cuBLAS for the GEMMs (libcublas.so.13, opened
 * now). Logs one line naming the device, its memory and the driver. Dies (one line naming what
 * to do) when there is no usable GPU or cuBLAS. */
backend *be_cuda(int device);
/* The visible CUDA devices (CUDA_VISIBLE_DEVICES honoured); 0 when there is no driver or GPU.
 * Never dies. */
int cuda_device_count(void);
/* fp32 GEMMs in TF32 (on) or IEEE fp32 (off, the default) on this backend. */
void cuda_set_tf32(backend *be, int on);
/* The MoE grouped GEMM (matmul_grouped_fwd/bwd of every CUDA backend of the process) through
 * cublasSgemmGroupedBatched (on: the default, when the loaded cuBLAS has it, 12.5+) or one
 * cublasSgemm an expert (off), so the tests can hold both to the cpu's. Returns whether the
 * grouped call is now in use. Call it after be_cuda (cuBLAS is opened there). */
int cuda_set_grouped_batched(int on);
/* The 16-bit forward GEMM's bias as cuBLASLt's epilogue (on: the default, where libcublasLt takes
 * it) or a kernel after the GEMM (off), for the tests to hold both to the cpu's. Returns whether the
 * epilogue is now in use (off for good once cuBLASLt refused a call). */
int cuda_set_lt_bias(int on);

#endif
