/* The CUDA runtime as the host emulation of the CUDA backend sees it (tests/gpu/cuda_emu.cmake,
 * docs/gpu.md "Host emulation of the CUDA backend"): this folder comes first on the include path
 * of src/backend/cuda's files compiled as host C++ (the .cu files, their launches rewritten by
 * rewrite.cmake) and as C (cuda.c), and of the GPU test programs.
 *
 * One emulated device ("cuemu", sm_90, 8 GiB); device memory is host memory (cudaMallocAsync is
 * an aligned malloc), every stream and event is synchronous (a launch has run when it returns; an
 * event records the host clock), so stream ordering, overlap and asynchrony are not modelled: a
 * missing synchronisation between host and device, or between two streams, cannot show here.
 * The functions are named emu_cuda* (the macros below), so the emulated objects never collide
 * with a CUDA runtime linked into the same program (libcudart_static in a build with nvcc).
 * Kernels run on tests/gpu/cuemu.h (C++ only: dim3, threadIdx, __syncthreads, shuffles, ...). */
#ifndef TRIDENT_EMU_CUDA_RUNTIME_H
#define TRIDENT_EMU_CUDA_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#define CUDART_VERSION 13000
#define EMU_SMEM_DEFAULT (48 * 1024)  /* dynamic shared memory a kernel may take unless raised */
#define EMU_SMEM_OPTIN (227 * 1024)   /* the most it may be raised to (sm_90) */

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidDevice = 101,
    cudaErrorNotReady = 600,
} cudaError_t;

typedef struct emu_stream *cudaStream_t;
typedef struct emu_event *cudaEvent_t;
typedef struct emu_mempool *cudaMemPool_t;

enum cudaMemcpyKind { cudaMemcpyHostToHost, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice,
                      cudaMemcpyDefault };
enum cudaMemPoolAttr { cudaMemPoolReuseFollowEventDependencies = 1, cudaMemPoolReuseAllowOpportunistic,
                       cudaMemPoolReuseAllowInternalDependencies, cudaMemPoolAttrReleaseThreshold,
                       cudaMemPoolAttrReservedMemCurrent, cudaMemPoolAttrReservedMemHigh, cudaMemPoolAttrUsedMemCurrent,
                       cudaMemPoolAttrUsedMemHigh };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };

#define cudaStreamDefault 0x0
#define cudaStreamNonBlocking 0x1
#define cudaEventDefault 0x0
#define cudaEventDisableTiming 0x2

struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
    size_t sharedMemPerBlock, sharedMemPerBlockOptin;
    int major, minor;
    int multiProcessorCount;
    int warpSize;
    int maxThreadsPerBlock;
};

#define cudaGetDeviceCount emu_cudaGetDeviceCount
#define cudaGetDevice emu_cudaGetDevice
#define cudaSetDevice emu_cudaSetDevice
#define cudaGetDeviceProperties emu_cudaGetDeviceProperties
#define cudaDriverGetVersion emu_cudaDriverGetVersion
#define cudaRuntimeGetVersion emu_cudaRuntimeGetVersion
#define cudaGetLastError emu_cudaGetLastError
#define cudaPeekAtLastError emu_cudaPeekAtLastError
#define cudaGetErrorName emu_cudaGetErrorName
#define cudaGetErrorString emu_cudaGetErrorString
#define cudaMalloc emu_cudaMalloc
#define cudaFree emu_cudaFree
#define cudaMallocAsync emu_cudaMallocAsync
#define cudaFreeAsync emu_cudaFreeAsync
#define cudaMallocHost emu_cudaMallocHost
#define cudaFreeHost emu_cudaFreeHost
#define cudaMemGetInfo emu_cudaMemGetInfo
#define cudaMemcpy emu_cudaMemcpy
#define cudaMemcpyAsync emu_cudaMemcpyAsync
#define cudaMemset emu_cudaMemset
#define cudaMemsetAsync emu_cudaMemsetAsync
#define cudaDeviceSynchronize emu_cudaDeviceSynchronize
#define cudaStreamCreateWithFlags emu_cudaStreamCreateWithFlags
#define cudaStreamDestroy emu_cudaStreamDestroy
#define cudaStreamSynchronize emu_cudaStreamSynchronize
#define cudaEventCreate emu_cudaEventCreate
#define cudaEventCreateWithFlags emu_cudaEventCreateWithFlags
#define cudaEventDestroy emu_cudaEventDestroy
#define cudaEventRecord emu_cudaEventRecord
#define cudaEventQuery emu_cudaEventQuery
#define cudaEventSynchronize emu_cudaEventSynchronize
#define cudaEventElapsedTime emu_cudaEventElapsedTime
#define cudaDeviceGetMemPool emu_cudaDeviceGetMemPool
#define cudaDeviceGetDefaultMemPool emu_cudaDeviceGetDefaultMemPool
#define cudaMemPoolSetAttribute emu_cudaMemPoolSetAttribute
#define cudaMemPoolGetAttribute emu_cudaMemPoolGetAttribute
#define cudaMemPoolTrimTo emu_cudaMemPoolTrimTo

cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaGetDevice(int *dev);
cudaError_t cudaSetDevice(int dev);
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int dev);
cudaError_t cudaDriverGetVersion(int *v);
cudaError_t cudaRuntimeGetVersion(int *v);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
const char *cudaGetErrorName(cudaError_t e);
const char *cudaGetErrorString(cudaError_t e);
cudaError_t cudaMalloc(void **p, size_t bytes);
cudaError_t cudaFree(void *p);
cudaError_t cudaMallocAsync(void **p, size_t bytes, cudaStream_t s);
cudaError_t cudaFreeAsync(void *p, cudaStream_t s);
cudaError_t cudaMallocHost(void **p, size_t bytes);
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind, cudaStream_t s);
cudaError_t cudaMemset(void *p, int byte, size_t bytes);
cudaError_t cudaMemsetAsync(void *p, int byte, size_t bytes, cudaStream_t s);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaEventCreate(cudaEvent_t *e);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s);
cudaError_t cudaEventQuery(cudaEvent_t e);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end);
cudaError_t cudaDeviceGetMemPool(cudaMemPool_t *pool, int dev);
cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *pool, int dev);
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, enum cudaMemPoolAttr attr, void *value);
cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, enum cudaMemPoolAttr attr, void *value);
cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t keep);

/* The emulator's own: a launch's error (a block of more than 1024 threads, more dynamic shared
 * memory than cudaFuncSetAttribute allowed) as the next cudaGetLastError answers it. */
void emu_cuda_set_error(cudaError_t e);
/* The dynamic shared memory a kernel may take (cudaFuncSetAttribute), by its address. */
void emu_cuda_set_smem_limit(const void *kernel, int bytes);
int emu_cuda_smem_limit(const void *kernel);

#ifdef __cplusplus
}

#include "../cuemu.h"

template <class F> cudaError_t cudaFuncSetAttribute(F *kernel, cudaFuncAttribute attr, int value)
{
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaErrorInvalidValue;
    if (value < 0 || value > EMU_SMEM_OPTIN) return cudaErrorInvalidValue;
    emu_cuda_set_smem_limit((const void *)kernel, value);
    return cudaSuccess;
}

/* Whether the device would start this launch: a block of 1 to 1024 threads, grid.y and grid.z at
 * most 65535, no more dynamic shared memory than the kernel may take (48 KiB, or what
 * cudaFuncSetAttribute allowed, up to the device's 227 KiB). Else the launch error is set, as the
 * next cudaGetLastError answers it, and nothing runs. */
inline bool emu_cuda_launchable(const void *kernel, dim3 grid, dim3 block, size_t smem)
{
    unsigned long long threads = (unsigned long long)block.x * block.y * block.z;
    if (threads == 0 || threads > 1024 || block.z > 64 || grid.x == 0 || grid.y == 0 || grid.z == 0 ||
        grid.y > 65535 || grid.z > 65535) {
        emu_cuda_set_error(cudaErrorInvalidConfiguration);
        return false;
    }
    if (smem > (size_t)emu_cuda_smem_limit(kernel)) {
        emu_cuda_set_error(cudaErrorInvalidValue);
        return false;
    }
    return true;
}

/* A launch kernel<<<grid, block, smem, stream>>>(args) as rewrite.cmake writes it:
 * emu_launch(kernel, grid, block, smem, stream)(args). The arguments convert to the kernel's
 * parameter types at the call, as they do at a launch, and each emulated thread gets its own
 * copies (the kernel's parameters). Synchronous: the grid has run when it returns. */
template <class... P> struct emu_call {
    void (*kernel)(P...);
    dim3 grid, block;
    size_t smem;
    void operator()(P... args) const
    {
        if (!emu_cuda_launchable((const void *)kernel, grid, block, smem)) return;
        void (*k)(P...) = kernel;
        emu_run(grid, block, smem, [&]() { k(args...); });
    }
};
template <class... P>
emu_call<P...> emu_launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem = 0, cudaStream_t stream = 0)
{
    (void)stream;
    return emu_call<P...>{kernel, grid, block, smem};
}
#endif

#endif
