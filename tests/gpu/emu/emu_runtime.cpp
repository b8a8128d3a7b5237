/* The CUDA runtime of the host emulation (cuda_runtime.h says what it models and what it cannot):
 * one device of EMU_DEVICE_BYTES whose memory is host memory, synchronous streams and events (an
 * event holds the host clock when recorded), and the launch errors the device would report. */
#include <cuda_runtime.h>

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include <map>

#define EMU_DEVICE_BYTES ((size_t)8 << 30)

struct emu_stream {
    unsigned flags;
};
struct emu_event {
    double t; /* seconds, CLOCK_MONOTONIC, when recorded */
    unsigned flags;
};
struct emu_mempool {
    int unused;
};

static cudaError_t g_last;                   /* the error cudaGetLastError answers */
static size_t g_in_use, g_high;              /* bytes allocated; the most at once */
static std::map<const void *, int> g_smem;   /* kernels' dynamic shared memory limits */
static int g_device;
static emu_mempool g_pool;

static cudaError_t fail(cudaError_t e)
{
    g_last = e;
    return e;
}

extern "C" {
unsigned long long cuemu_vec_accesses; /* cuemu.h */
}

extern "C" {

void emu_cuda_set_error(cudaError_t e) { g_last = e; }
void emu_cuda_set_smem_limit(const void *kernel, int bytes) { g_smem[kernel] = bytes; }
int emu_cuda_smem_limit(const void *kernel)
{
    auto it = g_smem.find(kernel);
    return it == g_smem.end() ? EMU_SMEM_DEFAULT : std::max(it->second, EMU_SMEM_DEFAULT);
}

cudaError_t cudaGetDeviceCount(int *n)
{
    *n = 1;
    return cudaSuccess;
}
cudaError_t cudaGetDevice(int *dev)
{
    *dev = g_device;
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int dev)
{
    if (dev != 0) return fail(cudaErrorInvalidDevice);
    g_device = dev;
    return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int dev)
{
    if (dev != 0) return fail(cudaErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "cuemu (host emulation of one sm_90 device)");
    p->totalGlobalMem = EMU_DEVICE_BYTES;
    p->sharedMemPerBlock = EMU_SMEM_DEFAULT;
    p->sharedMemPerBlockOptin = EMU_SMEM_OPTIN;
    p->major = 9, p->minor = 0;
    p->multiProcessorCount = 1;
    p->warpSize = 32;
    p->maxThreadsPerBlock = 1024;
    return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int *v)
{
    *v = CUDART_VERSION;
    return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int *v)
{
    *v = CUDART_VERSION;
    return cudaSuccess;
}
cudaError_t cudaGetLastError(void)
{
    cudaError_t e = g_last;
    g_last = cudaSuccess;
    return e;
}
cudaError_t cudaPeekAtLastError(void) { return g_last; }
const char *cudaGetErrorName(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    }
    return "cudaErrorUnknown";
}
const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorNotReady: return "device not ready";
    }
    return "unknown error";
}

/* Device memory: 256-byte aligned (cudaMalloc's alignment), its own pages, ending where a guard
 * page starts: an access past the end (beyond the 256-byte rounding) faults at once, and
 * tests/gpu/cuemu.h's handler says so. Filled with a pattern (NaN as fp32, bf16 and fp16:
 * 0xffff...) so that a kernel reading what nothing wrote shows. */
struct emu_alloc {
    size_t bytes;  /* asked for */
    char *map;     /* the mapping: pages, then the guard page */
    size_t mapped; /* its length */
};
static std::map<void *, emu_alloc> g_allocs; /* device allocations */

cudaError_t cudaMalloc(void **p, size_t bytes)
{
    *p = NULL;
    if (bytes > EMU_DEVICE_BYTES - g_in_use) return fail(cudaErrorMemoryAllocation);
    size_t n = bytes ? (bytes + 255) & ~(size_t)255 : 256, pages = (n + 4095) & ~(size_t)4095;
    void *m = mmap(NULL, pages + 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) return fail(cudaErrorMemoryAllocation);
    mprotect((char *)m + pages, 4096, PROT_NONE);
    char *d = (char *)m + pages - n;
    memset(d, 0xff, n);
    g_allocs[d] = emu_alloc{bytes, (char *)m, pages + 4096};
    g_in_use += bytes;
    g_high = std::max(g_high, g_in_use);
    *p = d;
    return cudaSuccess;
}
cudaError_t cudaFree(void *p)
{
    if (!p) return cudaSuccess;
    auto it = g_allocs.find(p);
    if (it == g_allocs.end()) return fail(cudaErrorInvalidValue);
    g_in_use -= it->second.bytes;
    munmap(it->second.map, it->second.mapped);
    g_allocs.erase(it);
    return cudaSuccess;
}
cudaError_t cudaMallocAsync(void **p, size_t bytes, cudaStream_t s)
{
    (void)s;
    return cudaMalloc(p, bytes);
}
cudaError_t cudaFreeAsync(void *p, cudaStream_t s)
{
    (void)s;
    return cudaFree(p);
}
cudaError_t cudaMallocHost(void **p, size_t bytes)
{
    *p = aligned_alloc(4096, (bytes + 4095) & ~(size_t)4095);
    return *p ? cudaSuccess : fail(cudaErrorMemoryAllocation);
}
cudaError_t cudaFreeHost(void *p)
{
    free(p);
    return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b)
{
    *free_b = EMU_DEVICE_BYTES - g_in_use;
    *total_b = EMU_DEVICE_BYTES;
    return cudaSuccess;
}
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind)
{
    (void)kind;
    if (bytes) memmove(dst, src, bytes);
    return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind, cudaStream_t s)
{
    (void)s;
    return cudaMemcpy(dst, src, bytes, kind);
}
cudaError_t cudaMemset(void *p, int byte, size_t bytes)
{
    if (bytes) memset(p, byte, bytes);
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void *p, int byte, size_t bytes, cudaStream_t s)
{
    (void)s;
    return cudaMemset(p, byte, bytes);
}
cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
    *s = new emu_stream{flags};
    return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    delete s;
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    (void)s;
    return cudaSuccess;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, cudaEventDefault); }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags)
{
    *e = new emu_event{-1.0, flags};
    return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    delete e;
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
    (void)s;
    e->t = now();
    return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t e)
{
    (void)e;
    return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
    (void)e;
    return cudaSuccess;
}
/* As the device: both recorded, neither created with cudaEventDisableTiming. */
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
    if (start->t < 0 || end->t < 0 || (start->flags & cudaEventDisableTiming) || (end->flags & cudaEventDisableTiming))
        return fail(cudaErrorInvalidValue);
    *ms = (float)((end->t - start->t) * 1e3);
    return cudaSuccess;
}

cudaError_t cudaDeviceGetMemPool(cudaMemPool_t *pool, int dev)
{
    if (dev != 0) return fail(cudaErrorInvalidDevice);
    *pool = &g_pool;
    return cudaSuccess;
}
cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *pool, int dev) { return cudaDeviceGetMemPool(pool, dev); }
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, enum cudaMemPoolAttr attr, void *value)
{
    (void)pool, (void)attr, (void)value;
    return cudaSuccess;
}
cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, enum cudaMemPoolAttr attr, void *value)
{
    (void)pool;
    if (attr == cudaMemPoolAttrUsedMemHigh || attr == cudaMemPoolAttrReservedMemHigh) *(unsigned long long *)value = g_high;
    else if (attr == cudaMemPoolAttrUsedMemCurrent || attr == cudaMemPoolAttrReservedMemCurrent)
        *(unsigned long long *)value = g_in_use;
    else return fail(cudaErrorInvalidValue);
    return cudaSuccess;
}
cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t keep)
{
    (void)pool, (void)keep;
    return cudaSuccess;
}

} /* extern "C" */
