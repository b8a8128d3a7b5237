/* The CUDA backend's core: the device a rank takes, its stream (the queue), memory from the
 * device's stream-ordered pool, copies, events, the start-up line and the error line (cu_die).
 * The GEMMs are in gemm.cu, the other kernels in the files that fill cuda_fill_elementwise and
 * cuda_fill_attention_moe (cuda_impl.h). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "trident/check.h"
#include "trident/timer.h"
#include "backend.h"
#include "cuda.h"
#include "cuda_core.h"

/* ---- errors ---- */

/* The job's rank: the communicator's once there is one, else the launcher's, else 0. */
static int cu_rank(void)
{
    if (td_log_rank() >= 0) return td_log_rank();
    static const char *vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) return atoi(v);
    }
    return 0;
}

/* "cudaMallocAsync" of "cudaMallocAsync(&p, n, s)": the called function's name. */
static void call_name(char *out, size_t len, const char *call)
{
    size_t n = strcspn(call, "( ");
    if (n >= len) n = len - 1;
    memcpy(out, call, n);
    out[n] = 0;
}

void cu_fail(const char *call, const char *what, const char *error, const char *hint, const char *file, int line)
{
    char host[64] = "?", fn[96], devname[264] = "";
    int dev = -1;
    (void)gethostname(host, sizeof host);
    host[sizeof host - 1] = 0;
    if (cudaGetDevice(&dev) == cudaSuccess) {
        struct cudaDeviceProp p;
        if (cudaGetDeviceProperties(&p, dev) == cudaSuccess) snprintf(devname, sizeof devname, " (%s)", p.name);
    } else {
        dev = -1;
    }
    call_name(fn, sizeof fn, call);
    td_die(file, line, fn, hint, "%s: %s (rank %d, host %s, device %d%s)", what && *what ? what : "cuda", error,
           cu_rank(), host, dev, devname);
}

void cu_die(const char *call, const char *what, int err, const char *file, int line)
{
    cudaError_t e = (cudaError_t)err;
    char text[1024];
    if (e == cudaErrorMemoryAllocation) {
        size_t free_b = 0, total_b = 0;
        (void)cudaGetLastError(); /* not sticky: clear it so that cudaMemGetInfo answers */
        (void)cudaMemGetInfo(&free_b, &total_b);
        be_oom_message(text, sizeof text, what, 0, free_b, total_b);
        cu_fail(call, "cuda", text, NULL, file, line);
    }
    snprintf(text, sizeof text, "%s (%s)", cudaGetErrorName(e), cudaGetErrorString(e));
    cu_fail(call, what, text,
            "an error of an earlier kernel can surface at a later call: run under compute-sanitizer, or with "
            "CUDA_LAUNCH_BLOCKING=1 to stop at the kernel that failed",
            file, line);
}

/* ---- devices ---- */

int cuda_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

void cuda_set_tf32(backend *be, int on) { cu_state(be)->tf32 = on != 0; }

/* The kernel driver's version as nvidia-smi shows it ("580.159.04"), else the CUDA version the
 * driver supports ("CUDA 13.0"). */
static void driver_version(char *out, size_t len)
{
    FILE *f = fopen("/proc/driver/nvidia/version", "r");
    char line[512];
    if (f) {
        int found = 0;
        if (fgets(line, sizeof line, f)) {
            const char *p = strstr(line, "Module");
            char v[64];
            if (p && sscanf(p + 6, " %63s", v) == 1) {
                snprintf(out, len, "%s", v);
                found = 1;
            }
        }
        fclose(f);
        if (found) return;
    }
    int v = 0;
    if (cudaDriverGetVersion(&v) == cudaSuccess) snprintf(out, len, "CUDA %d.%d", v / 1000, v % 1000 / 10);
    else snprintf(out, len, "unknown");
}

/* ---- memory ---- */

static void *cu_alloc(const backend *be, size_t bytes)
{
    size_t n = bytes ? (bytes + 63) & ~(size_t)63 : 64;
    void *p = NULL;
    cudaError_t e = cudaMallocAsync(&p, n, cu_stream(be));
    if (e == cudaErrorMemoryAllocation) {
        /* the pool keeps what was freed (release threshold: all); give it back and try once more */
        (void)cudaGetLastError();
        cudaMemPool_t pool;
        CU_CHECK(cudaStreamSynchronize(cu_stream(be)), "waiting for the queue before trimming the memory pool");
        if (cudaDeviceGetMemPool(&pool, be->device) == cudaSuccess) (void)cudaMemPoolTrimTo(pool, 0);
        e = cudaMallocAsync(&p, n, cu_stream(be));
    }
    if (e == cudaErrorMemoryAllocation) {
        size_t free_b = 0, total_b = 0;
        char text[1024], what[64];
        (void)cudaGetLastError();
        (void)cudaMemGetInfo(&free_b, &total_b);
        snprintf(what, sizeof what, "allocating %zu bytes", bytes);
        be_oom_message(text, sizeof text, what, bytes, free_b, total_b);
        cu_fail("cudaMallocAsync", "cuda alloc", text, NULL, __FILE__, __LINE__);
    }
    if (e != cudaSuccess) cu_die("cudaMallocAsync", "allocating device memory", (int)e, __FILE__, __LINE__);
    TD_ASSERT(((uintptr_t)p & 63) == 0);
    return p;
}

static void cu_free(const backend *be, void *p)
{
    if (p) CU_CHECK(cudaFreeAsync(p, cu_stream(be)), "freeing device memory");
}

/* H2D through the pinned slots, a slot (1 MiB) a piece: the host's memcpy into a slot, then the DMA
 * from it enqueued and an event after it. Waiting for a slot waits only for the copy that used it
 * CU_STAGE_SLOTS pieces ago, so small copies (a micro-batch's ids and targets) never wait for the
 * queue, and a large one (a checkpoint) overlaps the host's copying with the DMA. */
static void stage_h2d(const backend *be, unsigned char *dst, const unsigned char *src, size_t bytes)
{
    cuda_state *st = cu_state(be);
    for (size_t off = 0; off < bytes; off += CU_STAGE_SLOT_BYTES) {
        size_t n = bytes - off < CU_STAGE_SLOT_BYTES ? bytes - off : CU_STAGE_SLOT_BYTES;
        int k = st->stage_next;
        st->stage_next = (k + 1) % CU_STAGE_SLOTS;
        unsigned char *slot = st->stage + (size_t)k * CU_STAGE_SLOT_BYTES;
        CU_CHECK(cudaEventSynchronize(st->stage_done[k]), "waiting for a staging slot of host-to-device copies");
        memcpy(slot, src + off, n);
        CU_CHECK(cudaMemcpyAsync(dst + off, slot, n, cudaMemcpyHostToDevice, cu_stream(be)),
                 "copying host memory to the device");
        CU_CHECK(cudaEventRecord(st->stage_done[k], cu_stream(be)), "recording a staging slot's copy");
    }
}

static void cu_copy_bytes(const backend *be, void *dst, const void *src, size_t bytes, be_copy_kind kind)
{
    if (!bytes || dst == src) return;
    cudaStream_t s = cu_stream(be);
    switch (kind) {
    case BE_H2D:
        stage_h2d(be, dst, src, bytes);
        break;
    case BE_D2H:
        CU_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s), "copying device memory to the host");
        CU_CHECK(cudaStreamSynchronize(s), "waiting for a copy to the host");
        break;
    case BE_D2D:
        CU_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s), "copying device memory");
        break;
    }
}

static void cu_set_bytes(const backend *be, void *p, int byte, size_t bytes)
{
    if (bytes) CU_CHECK(cudaMemsetAsync(p, byte, bytes, cu_stream(be)), "setting device memory");
}

static void cu_sync(const backend *be) { CU_CHECK(cudaStreamSynchronize(cu_stream(be)), "waiting for the queue"); }

/* ---- events (a pool of released ones) ---- */

static void cu_event_record(const backend *be, be_event *ev)
{
    cuda_state *st = cu_state(be);
    cudaEvent_t e;
    if (st->nevents > 0) e = st->events[--st->nevents];
    else CU_CHECK(cudaEventCreate(&e), "creating a timing event");
    CU_CHECK(cudaEventRecord(e, cu_stream(be)), "recording a timing event");
    ev->t = 0.0;
    ev->h = e;
}

static void event_release(const backend *be, be_event *ev)
{
    cuda_state *st = cu_state(be);
    cudaEvent_t e = (cudaEvent_t)ev->h;
    ev->h = NULL;
    if (!e) return;
    if (st->nevents < CU_EVENT_POOL) st->events[st->nevents++] = e;
    else CU_CHECK(cudaEventDestroy(e), "destroying a timing event");
}

/* Whether everything before ev has run, without waiting (cudaEventQuery: ready, or not yet). */
static int cu_event_query(const backend *be, const be_event *ev)
{
    (void)be;
    if (!ev->h) return 1;
    cudaError_t e = cudaEventQuery((cudaEvent_t)ev->h);
    if (e == cudaErrorNotReady) {
        (void)cudaGetLastError(); /* not an error: clear it */
        return 0;
    }
    CU_CHECK(e, "asking whether a queued transfer's kernels have run");
    return 1;
}

/* ---- pinned host memory: comm's staging (xfer.h) ----
 * Plain Open MPI cannot read device memory, so every buffer that crosses comm is staged through
 * page-locked host memory (the D2H and H2D copies then run at the link's speed). A CUDA-aware MPI
 * or NCCL would hand comm device pointers instead: leave these two NULL then. */
static void *cu_host_alloc(const backend *be, size_t bytes)
{
    (void)be;
    void *p = NULL;
    CU_CHECK(cudaMallocHost(&p, bytes ? bytes : 1), "allocating pinned host memory for comm's staging");
    return p; /* page-aligned */
}

static void cu_host_free(const backend *be, void *p)
{
    (void)be;
    if (p) CU_CHECK(cudaFreeHost(p), "freeing pinned host memory");
}

static double cu_event_elapsed(const backend *be, be_event *start, be_event *end)
{
    float ms = 0.0f;
    CU_CHECK(cudaEventSynchronize((cudaEvent_t)end->h), "waiting for a timing event");
    CU_CHECK(cudaEventElapsedTime(&ms, (cudaEvent_t)start->h, (cudaEvent_t)end->h), "reading a timing event");
    event_release(be, start);
    event_release(be, end);
    return ms * 1e-3;
}

static void cu_destroy(backend *be)
{
    cuda_state *st = cu_state(be);
    CU_CHECK(cudaStreamSynchronize(cu_stream(be)), "waiting for the queue before freeing the backend");
    cuda_gemm_destroy(be);
    while (st->nevents > 0) CU_CHECK(cudaEventDestroy(st->events[--st->nevents]), "destroying a timing event");
    for (int k = 0; k < CU_STAGE_SLOTS; k++) CU_CHECK(cudaEventDestroy(st->stage_done[k]), "destroying a staging event");
    CU_CHECK(cudaFreeHost(st->stage), "freeing the pinned staging slots");
    CU_CHECK(cudaStreamDestroy(cu_stream(be)), "destroying the stream");
    be->queue = NULL;
    free(st);
    be->impl = NULL;
}

/* ---- measurement and description ---- */

/* Best of five device-to-device copies of 128 MB after a warm-up, timed by events; bytes read +
 * written. */
static double cu_copy_gbps(const backend *be)
{
    size_t n = (size_t)128 << 20;
    void *a = cu_alloc(be, n), *b = cu_alloc(be, n);
    cu_set_bytes(be, a, 1, n);
    double best = 1e30;
    for (int r = 0; r <= 5; r++) {
        be_event t0, t1;
        cu_event_record(be, &t0);
        cu_copy_bytes(be, b, a, n, BE_D2D);
        cu_event_record(be, &t1);
        double dt = cu_event_elapsed(be, &t0, &t1);
        if (r > 0 && dt < best) best = dt;
    }
    cu_free(be, a);
    cu_free(be, b);
    cu_sync(be);
    return be_copy_bytes(n) / best * 1e-9;
}

/* The device's memory and what is in use on it (cudaMemGetInfo: total, total - free). */
static size_t cu_mem_capacity(const backend *be, size_t *in_use)
{
    size_t free_b = 0, total_b = 0;
    (void)be;
    CU_CHECK(cudaMemGetInfo(&free_b, &total_b), "reading the device's memory");
    if (in_use) *in_use = total_b - free_b;
    return total_b;
}

/* The device pool's high-water mark of memory in use (cudaMemPoolAttrUsedMemHigh): what this
 * process's allocations held at once, cached memory the pool kept aside not counted. */
static size_t cu_mem_peak(const backend *be)
{
    cudaMemPool_t pool;
    unsigned long long high = 0;
    CU_CHECK(cudaDeviceGetMemPool(&pool, be->device), "finding the device's memory pool");
    CU_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &high), "reading the memory pool's peak");
    return (size_t)high;
}

static void cu_describe(const backend *be, char *out, size_t len)
{
    const cuda_state *st = cu_state(be);
    char drv[64], blas[128];
    int rt = 0;
    driver_version(drv, sizeof drv);
    (void)cudaRuntimeGetVersion(&rt);
    cuda_gemm_describe(be, blas, sizeof blas);
    snprintf(out, len, "CUDA on %s (device %d, sm_%d, %.1f GiB, driver %s, runtime %d.%d), %s, fp32 GEMMs %s",
             st->name, be->device, st->sm, (double)st->total_mem / (double)((size_t)1 << 30), drv, rt / 1000,
             rt % 1000 / 10, blas, st->tf32 ? "in TF32 (--tf32)" : "in IEEE fp32 (TF32 off; --tf32 allows it)");
}

/* ---- the vtable ---- */

/* Defaults for the other files' shares (cuda_impl.h) while they are not in the build: nothing
 * filled, so be_create refuses the backend naming the first entry left NULL. Their real
 * definitions win over these at link time (CMakeLists.txt links the folder's objects directly). */
__attribute__((weak)) void cuda_fill_elementwise(struct be_ops *ops) { (void)ops; }
__attribute__((weak)) void cuda_fill_attention_moe(struct be_ops *ops) { (void)ops; }

void cuda_fill_core(struct be_ops *o)
{
    o->name = "cuda";
    o->alloc = cu_alloc;
    o->free = cu_free;
    o->copy_bytes = cu_copy_bytes;
    o->set_bytes = cu_set_bytes;
    o->sync = cu_sync;
    o->event_record = cu_event_record;
    o->event_elapsed = cu_event_elapsed;
    o->event_query = cu_event_query;
    o->event_release = event_release;
    o->host_alloc = cu_host_alloc;
    o->host_free = cu_host_free;
    o->destroy = cu_destroy;
    o->copy_gbps = cu_copy_gbps;
    o->describe = cu_describe;
    o->mem_peak = cu_mem_peak;
    o->mem_capacity = cu_mem_capacity;
    cuda_fill_gemm(o);
}

static struct be_ops g_cuda_ops;

backend *be_cuda(int device)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n < 1)
        td_fatal(1, "--backend cuda: no CUDA device is visible (%s): run where an NVIDIA GPU and its driver are, "
                    "check CUDA_VISIBLE_DEVICES, or use --backend cpu",
                 e != cudaSuccess ? cudaGetErrorName(e) : "0 devices");
    int dev = device > 0 ? device - 1 : be_device_for_rank(be_local_rank(), n);
    if (dev >= n) td_fatal(1, "cuda: device %d asked for, but %d device%s visible", dev, n, n == 1 ? " is" : "s are");
    CU_CHECK(cudaSetDevice(dev), "choosing the device");
    if (!g_cuda_ops.name) {
        cuda_fill_core(&g_cuda_ops);
        cuda_fill_elementwise(&g_cuda_ops);
        cuda_fill_attention_moe(&g_cuda_ops);
        /* TRIDENT_CUDA_FUSED=0: the optional fused entries left out (the contract's plain steps run
         * instead), to tell on a GPU whether one of them is at fault (docs/gpu.md, "Switches") */
        const char *f = getenv("TRIDENT_CUDA_FUSED");
        if (f && strcmp(f, "0") == 0)
            g_cuda_ops.ce_fwd_fused = NULL, g_cuda_ops.ce_bwd_to = NULL, g_cuda_ops.bias_bwd_to = NULL;
    }
    backend *be = td_xcalloc(1, sizeof *be);
    cuda_state *st = td_xcalloc(1, sizeof *st);
    be->ops = &g_cuda_ops;
    be->impl = st;
    be->device = dev;
    struct cudaDeviceProp p;
    CU_CHECK(cudaGetDeviceProperties(&p, dev), "reading the device's properties");
    snprintf(st->name, sizeof st->name, "%s", p.name);
    st->sm = p.major * 10 + p.minor;
    st->total_mem = p.totalGlobalMem;
    cudaStream_t s;
    CU_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "creating the backend's stream");
    be->queue = s;
    /* the pool keeps freed memory for the next allocation (a caching allocator), trimmed on need */
    cudaMemPool_t pool;
    uint64_t keep = UINT64_MAX;
    CU_CHECK(cudaDeviceGetDefaultMemPool(&pool, dev), "finding the device's memory pool");
    CU_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep), "setting the memory pool");
    CU_CHECK(cudaMallocHost((void **)&st->stage, CU_STAGE_SLOTS * CU_STAGE_SLOT_BYTES),
             "allocating pinned staging memory for host-to-device copies");
    for (int k = 0; k < CU_STAGE_SLOTS; k++)
        CU_CHECK(cudaEventCreateWithFlags(&st->stage_done[k], cudaEventDisableTiming), "creating a staging event");
    cuda_gemm_init(be);
    char drv[64];
    driver_version(drv, sizeof drv);
    TD_INFO("cuda: device %d of %d, %s, %.1f GiB, sm_%d, driver %s (local rank %d)", dev, n, st->name,
            (double)st->total_mem / (double)((size_t)1 << 30), st->sm, drv, be_local_rank());
    return be;
}
