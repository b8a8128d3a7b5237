/* CUDA kernels on one host thread, for tests where there is no GPU: tests/gpu/test_att_mma_emu.cpp
 * (the tensor-core attention kernels alone) and the host emulation of the whole CUDA backend
 * (tests/gpu/emu/cuda_runtime.h, tests/gpu/cuda_emu.cmake; docs/gpu.md "Host emulation of the
 * CUDA backend"). A launch runs each thread of a block as a context of its own (the blocks one
 * after another, so `__shared__` is static storage and dynamic shared memory one buffer);
 * __syncthreads is a barrier of the block's threads, a shuffle or ballot an exchange between the
 * lanes of a warp between two warp barriers, and mma.m16n8k16 (emu_mma) gathers the warp's operand
 * registers and multiplies the matrices they hold by PTX's fragment layout (the PTX ISA, "Matrix
 * Fragments for mma.m16n8k16 with floating point type"): written from that table alone, so a
 * kernel that loads its fragments in another layout computes something else here.
 *
 * What it cannot see: blocks never run concurrently (a kernel whose blocks race on global memory,
 * or wait for one another, runs here as if they did not); between two barriers a thread runs
 * alone to the next barrier, so a race between threads of a block on shared memory without a
 * barrier between them reads one fixed interleaving (threads in index order, or in reverse with
 * CUEMU_ORDER=reverse: a race shows in one of the two), not the device's, and memory ordering, warp
 * lockstep (a warp's lanes diverging and reconverging), performance, registers and the real
 * shared-memory banks are not modelled. It does see: a barrier some threads of a block never reach
 * (a deadlock: aborts naming the launch), a shuffle with a lane that has exited, blocks beyond
 * 1024 threads, an access past the launch's dynamic shared memory or past a device allocation
 * (guard pages: a fault naming the block and thread), the 16-bit roundings and the MMA fragment
 * layouts. Threads that have returned no longer count at __syncthreads (as on sm_70 and later). */
#ifndef TRIDENT_CUEMU_H
#define TRIDENT_CUEMU_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#define ATT_EMU 1
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))

using std::max;
using std::min;

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct __attribute__((aligned(16))) float4 {
    float x, y, z, w;
};
struct __attribute__((aligned(8))) float2 {
    float x, y;
};
struct __attribute__((aligned(16))) uint4 {
    unsigned x, y, z, w;
};
struct __attribute__((aligned(8))) uint2 {
    unsigned x, y;
};
static inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return uint4{x, y, z, w}; }
static inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
static inline float2 make_float2(float x, float y) { return float2{x, y}; }

/* The CUDA kernels' 16-byte accesses (cu_common.cuh's cu_ld8, cu_st8): one at p whose element
 * index is a multiple of the vector (ok) must be 16-byte aligned, or it aborts naming it, as the
 * device faults; each is counted in cuemu_vec_accesses (emu_runtime.cpp), which a test program
 * reads to see that an entry took its vector path. */
extern "C" unsigned long long cuemu_vec_accesses;
inline void cuemu_vec_access(const void *p, bool ok)
{
    if (((uintptr_t)p & 15u) || !ok) {
        fprintf(stderr, "cuemu: a 16-byte access to %p at a misaligned element (the device faults)\n", p);
        abort();
    }
    cuemu_vec_accesses++;
}

/* The emulated threads are contexts of one host thread, switched cooperatively at barriers: a
 * thread arriving at a barrier yields to the scheduler until the barrier's last thread arrives
 * (that one goes on at once). No host thread, lock or system call per barrier but the context
 * switch. threadIdx is set by the scheduler when it resumes a thread; blockIdx is every thread's
 * (the blocks run in turn). */
inline dim3 threadIdx, blockIdx, blockDim, gridDim;

/* The switch between contexts: on x86-64 (without a sanitizer, which must see stack switches
 * through swapcontext) six callee-saved registers and the stack pointer, a few nanoseconds;
 * elsewhere swapcontext, which also saves the signal mask with a system call. */
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define EMU_ASM_SWITCH 1
extern "C" void emu_switch(void **save_sp, void *to_sp);
__asm__(".text\n"
        ".weak emu_switch\n" /* global, one copy however many units include this header */
        ".type emu_switch, @function\n"
        "emu_switch:\n"
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  movq %rsp, (%rdi)\n"
        "  movq %rsi, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
        "  ret\n"
        ".size emu_switch, .-emu_switch\n");
#endif

#define EMU_MAX_THREADS 1024
#define EMU_WARPS (EMU_MAX_THREADS / 32)
#define EMU_STACK (256 * 1024) /* a thread's stack (virtual: pages are committed as touched), a guard page below */
struct emu_barrier {
    unsigned needed, arrived;
    std::vector<unsigned> waiting;
};
struct emu_thread {
    ucontext_t ctx; /* swapcontext's */
    void *sp;       /* emu_switch's */
    bool blocked, done, exited;
    char *stack;    /* EMU_STACK bytes above a guard page, kept from launch to launch */
    dim3 idx;       /* its threadIdx in this launch */
};
#define EMU_SMEM_REGION (256 * 1024) /* more than any device's shared memory a block (227 KiB) */
struct emu_state {
    emu_barrier block, warp[EMU_WARPS], endb; /* __syncthreads, each warp's, the end of a block */
    std::vector<emu_thread> th;
    unsigned nthreads, cur; /* threads a block; the running one (linear index) */
    ucontext_t sched;
    void *sched_sp;
    uint32_t a[EMU_MAX_THREADS][4], b[EMU_MAX_THREADS][2];
    uint64_t xchg[2][EMU_MAX_THREADS]; /* a warp exchange's values, two slots taken in turn */
    unsigned xcalls[EMU_MAX_THREADS];  /* exchanges each thread made in this launch */
    int votes[2][EMU_MAX_THREADS];     /* __syncthreads_or's, two slots taken in turn */
    unsigned bcalls[EMU_MAX_THREADS];  /* __syncthreads_or calls each thread made in this launch */
    unsigned char *smem;    /* the launch's dynamic shared memory: its end is a guard page's start */
    unsigned char *smem_region; /* EMU_SMEM_REGION bytes, then the guard page */
    bool running;           /* inside emu_run (the fault handler names the block and thread) */
    void (*body)(void *);
    void *arg;
};
inline emu_state g_emu;

inline unsigned char *emu_smem() { return g_emu.smem; }

[[noreturn]] inline void emu_fail(const char *what)
{
    fprintf(stderr, "cuemu: %s (block (%u, %u, %u) of grid (%u, %u, %u), thread (%u, %u, %u) of (%u, %u, %u))\n", what,
            blockIdx.x, blockIdx.y, blockIdx.z, gridDim.x, gridDim.y, gridDim.z, threadIdx.x, threadIdx.y,
            threadIdx.z, blockDim.x, blockDim.y, blockDim.z);
    abort();
}

/* The running thread: linear index t (threadIdx x fastest). */
inline void emu_set_thread(unsigned t)
{
    g_emu.cur = t;
    threadIdx = g_emu.th[t].idx;
}

inline void emu_yield(unsigned me)
{
    g_emu.th[me].blocked = true;
#ifdef EMU_ASM_SWITCH
    emu_switch(&g_emu.th[me].sp, g_emu.sched_sp);
#else
    swapcontext(&g_emu.th[me].ctx, &g_emu.sched);
#endif
    emu_set_thread(me);
}

inline void emu_release(emu_barrier &bar)
{
    for (unsigned t : bar.waiting) g_emu.th[t].blocked = false;
    bar.waiting.clear();
    bar.arrived = 0;
}

inline void emu_wait(emu_barrier &bar)
{
    unsigned me = g_emu.cur;
    if (++bar.arrived == bar.needed) { /* the last: release the others and go on */
        emu_release(bar);
        return;
    }
    bar.waiting.push_back(me);
    emu_yield(me);
}
inline void __syncthreads() { emu_wait(g_emu.block); }
inline void emu_warp_sync() { emu_wait(g_emu.warp[g_emu.cur / 32]); }
inline void __syncwarp(unsigned mask = 0xffffffffu)
{
    (void)mask;
    emu_warp_sync();
}

/* The lanes of the running thread's warp: its first thread and how many it has. */
inline unsigned emu_warp0() { return g_emu.cur & ~31u; }
inline unsigned emu_warp_size() { return std::min(32u, g_emu.nthreads - emu_warp0()); }

/* One warp exchange: each lane deposits 8 bytes, then reads lane src's (src computed per lane
 * from its lane index); a lane past the barrier may reach its next exchange before a slower one
 * has read this one, so consecutive exchanges alternate between two slots. */
inline const uint64_t *emu_exchange(uint64_t v)
{
    unsigned t = g_emu.cur, slot = g_emu.xcalls[t]++ & 1;
    g_emu.xchg[slot][t] = v;
    emu_warp_sync();
    return &g_emu.xchg[slot][emu_warp0()];
}
/* Whether thread t deposited in the running thread's exchange in progress (it may be past it, in
 * its next one; a lane that returned before this exchange never deposited). */
inline bool emu_took_part(unsigned t) { return g_emu.xcalls[t] >= g_emu.xcalls[g_emu.cur]; }
template <class T> inline uint64_t emu_bits(T v)
{
    static_assert(sizeof(T) <= 8, "a shuffle moves at most 8 bytes");
    uint64_t u = 0;
    memcpy(&u, &v, sizeof v);
    return u;
}
template <class T> inline T emu_from_bits(uint64_t u)
{
    T v;
    memcpy(&v, &u, sizeof v);
    return v;
}
/* Lane src's value of the exchange (src within the lanes of a width-segment, as the device). */
template <class T> inline T emu_shfl(const uint64_t *lanes, unsigned src)
{
    if (src >= emu_warp_size() || !emu_took_part(emu_warp0() + src))
        emu_fail("a shuffle reads a lane that has exited or does not exist");
    return emu_from_bits<T>(lanes[src]);
}
template <class T> inline T __shfl_xor_sync(unsigned mask, T v, int lanemask, int width = 32)
{
    (void)mask;
    unsigned lane = g_emu.cur & 31u, src = lane ^ (unsigned)lanemask;
    if ((src & ~(unsigned)(width - 1)) != (lane & ~(unsigned)(width - 1))) src = lane;
    return emu_shfl<T>(emu_exchange(emu_bits(v)), src);
}
template <class T> inline T __shfl_sync(unsigned mask, T v, int srclane, int width = 32)
{
    (void)mask;
    unsigned lane = g_emu.cur & 31u, src = (lane & ~(unsigned)(width - 1)) + ((unsigned)srclane & (unsigned)(width - 1));
    return emu_shfl<T>(emu_exchange(emu_bits(v)), src);
}
template <class T> inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32)
{
    (void)mask;
    unsigned lane = g_emu.cur & 31u, src = lane + delta;
    if ((src & ~(unsigned)(width - 1)) != (lane & ~(unsigned)(width - 1))) src = lane;
    return emu_shfl<T>(emu_exchange(emu_bits(v)), src);
}
template <class T> inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32)
{
    (void)mask;
    unsigned lane = g_emu.cur & 31u, src = lane - delta;
    if (delta > lane || (src & ~(unsigned)(width - 1)) != (lane & ~(unsigned)(width - 1))) src = lane;
    return emu_shfl<T>(emu_exchange(emu_bits(v)), src);
}
/* Bit l: lane l of the mask is live and its predicate nonzero. */
inline unsigned __ballot_sync(unsigned mask, int pred)
{
    const uint64_t *lanes = emu_exchange(pred != 0);
    unsigned r = 0, n = emu_warp_size(), w0 = emu_warp0();
    for (unsigned l = 0; l < n; l++)
        if ((mask >> l & 1u) && emu_took_part(w0 + l) && lanes[l]) r |= 1u << l;
    return r;
}
inline int __any_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) != 0; }
inline int __all_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) == __ballot_sync(mask, 1); }
/* __syncthreads, then whether any thread of the block passed a nonzero predicate. */
inline int __syncthreads_or(int pred)
{
    unsigned t = g_emu.cur, *calls = g_emu.bcalls, slot = calls[t]++ & 1;
    g_emu.votes[slot][t] = pred != 0;
    __syncthreads();
    int any = 0;
    for (unsigned k = 0; k < g_emu.nthreads; k++) any |= calls[k] >= calls[t] && g_emu.votes[slot][k]; /* it voted */
    return any;
}

/* Intrinsics of one IEEE operation, rounded to nearest even (no contraction into an FMA). */
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline unsigned __float_as_uint(float f) { return emu_from_bits<unsigned>(emu_bits(f)); }
inline float __uint_as_float(unsigned u) { return emu_from_bits<float>(emu_bits(u)); }
inline int __float_as_int(float f) { return emu_from_bits<int>(emu_bits(f)); }
inline float __int_as_float(int u) { return emu_from_bits<float>(emu_bits(u)); }

/* 16-bit values (bf16 when bf, else IEEE fp16) to and from fp32, to nearest even as the device's
 * cvt.rn (__float2bfloat16_rn, __float2half_rn): overflow to +-Inf, a NaN to the canonical 0x7fff. */
inline float emu_h2f(uint16_t u, bool bf)
{
    if (bf) {
        uint32_t w = (uint32_t)u << 16;
        float f;
        memcpy(&f, &w, 4);
        return f;
    }
    static float *table;
    if (!table) {
        table = new float[65536];
        for (unsigned x = 0; x < 65536; x++) {
            int e = (x >> 10) & 31, m = x & 1023;
            float v = e == 0 ? ldexpf((float)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(m | 1024), e - 25);
            table[x] = (x & 0x8000) ? -v : v;
        }
    }
    return table[u];
}
inline uint16_t emu_f2h(float x, bool bf)
{
    uint32_t w;
    memcpy(&w, &x, 4);
    if ((w & 0x7fffffffu) > 0x7f800000u) return 0x7fff;
    if (bf) return (uint16_t)((w + 0x7fffu + ((w >> 16) & 1)) >> 16);
    uint16_t sign = (uint16_t)((w >> 16) & 0x8000);
    float a = fabsf(x);
    if (a >= 65520.0f) return (uint16_t)(sign | 0x7c00);
    if (a < ldexpf(1.0f, -14)) { /* subnormal: multiples of 2^-24, nearest even by rintf */
        return (uint16_t)(sign | (uint16_t)rintf(ldexpf(a, 24)));
    }
    int e;
    float fr = frexpf(a, &e);                  /* a = fr 2^e, fr in [0.5, 1) */
    float mant = rintf(ldexpf(fr, 11));        /* 11 significant bits, nearest even */
    if (mant >= 2048.0f) mant = 1024.0f, e++;
    if (e + 14 >= 31) return (uint16_t)(sign | 0x7c00);
    return (uint16_t)(sign | (uint16_t)((e + 14) << 10) | (uint16_t)((int)mant - 1024));
}

#ifndef TRIDENT_EMU_CUDA_RUNTIME_H
/* Typed element access, as cu_common.cuh's (test_att_mma_emu.cpp; the backend's own come from its
 * source there). */
inline float cu_h2f(uint16_t u, bool bf) { return emu_h2f(u, bf); }
inline uint16_t cu_f2h(float x, bool bf) { return emu_f2h(x, bf); }
inline float cu_ld(const void *p, int dt, size_t i)
{
    if (dt == 0) return ((const float *)p)[i];
    return cu_h2f(((const uint16_t *)p)[i], dt == 1);
}
inline void cu_st(void *p, int dt, size_t i, float x)
{
    if (dt == 0) ((float *)p)[i] = x;
    else ((uint16_t *)p)[i] = cu_f2h(x, dt == 1);
}
inline void cu_acc(void *p, int dt, size_t i, float x) { cu_st(p, dt, i, cu_ld(p, dt, i) + x); }
#endif

/* mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}: every lane of the warp deposits its A (4
 * registers) and B (2); the first lane past the barrier unpacks the warp's matrices by the layout
 * (once a call: `calls` counts each lane's), and each lane reads back its 4 elements of C += A B. */
inline void emu_mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1, bool bf)
{
    static float A[EMU_WARPS][16][16], B[EMU_WARPS][8][16]; /* B transposed: B[w][col][k] */
    static unsigned unpacked[EMU_WARPS], calls[EMU_MAX_THREADS];
    unsigned t = g_emu.cur, w = t / 32, w0 = t & ~31u, lane = t & 31u;
    if (emu_warp_size() != 32) emu_fail("mma.sync in a warp of fewer than 32 threads");
    memcpy(g_emu.a[t], a, 16);
    g_emu.b[t][0] = b0, g_emu.b[t][1] = b1;
    emu_warp_sync();
    if (unpacked[w] != ++calls[t]) {
        unpacked[w] = calls[t];
        for (unsigned L = 0; L < 32; L++) {
            unsigned grp = L >> 2, tig = L & 3;
            for (int i = 0; i < 8; i++) { /* a_i: register i / 2, low half first */
                uint32_t reg = g_emu.a[w0 + L][i >> 1];
                uint16_t v = (uint16_t)((i & 1) ? reg >> 16 : reg & 0xffff);
                unsigned row = (i < 2 || (i >= 4 && i < 6)) ? grp : grp + 8;
                unsigned col = tig * 2 + (i & 1) + (i >= 4 ? 8 : 0);
                A[w][row][col] = emu_h2f(v, bf);
            }
            for (int i = 0; i < 4; i++) { /* b_i: row tig * 2 + (i & 1) (+ 8 for i >= 2), column group */
                uint32_t reg = g_emu.b[w0 + L][i >> 1];
                uint16_t v = (uint16_t)((i & 1) ? reg >> 16 : reg & 0xffff);
                B[w][grp][tig * 2 + (i & 1) + (i >= 2 ? 8 : 0)] = emu_h2f(v, bf);
            }
        }
    }
    unsigned grp = lane >> 2, tig = lane & 3;
    for (int i = 0; i < 4; i++) { /* c_i: row group (+ 8 for i >= 2), column tig * 2 + (i & 1) */
        unsigned row = i < 2 ? grp : grp + 8, col = tig * 2 + (i & 1);
        /* the 16 products (exact in fp32: 16-bit operands) summed in double, added to c with one
         * rounding (the device's order of accumulation is its own; its precision at least fp32's) */
        const float *ar = A[w][row], *bc = B[w][col];
        double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
        for (int k = 0; k < 16; k += 4) {
            s0 += (double)(ar[k] * bc[k]), s1 += (double)(ar[k + 1] * bc[k + 1]);
            s2 += (double)(ar[k + 2] * bc[k + 2]), s3 += (double)(ar[k + 3] * bc[k + 3]);
        }
        c[i] = (float)((double)c[i] + ((s0 + s1) + (s2 + s3)));
    }
    /* no second barrier: a lane that deposits its next operands waits for the others there, and
     * the matrices are unpacked again only past that barrier, after every lane has read these */
}

/* ldmatrix.sync.aligned.m8n8.x{1,2,4}[.trans].shared.b16: lanes 8i..8i+7 give the addresses of
 * the 8 rows (8 16-bit elements each, 16-byte aligned, in the launch's dynamic shared memory) of
 * matrix i < n; lane L receives in register i the elements (row L / 4, columns 2 (L % 4) and + 1)
 * of matrix i, or with .trans (rows 2 (L % 4) and + 1, column L / 4): the PTX ISA's "Warp-level
 * matrix load instruction: ldmatrix", written from it alone. The addresses go through a warp
 * exchange; a misaligned row or one outside shared memory fails, as the device faults. */
inline void emu_ldmatrix(uint32_t *r, int n, bool trans, const uint16_t *row)
{
    const uint64_t *rows = emu_exchange((uint64_t)(uintptr_t)row);
    const unsigned char *lo = g_emu.smem, *hi = g_emu.smem_region + EMU_SMEM_REGION;
    unsigned lane = g_emu.cur & 31u;
    for (int i = 0; i < n; i++) {
        uint16_t v[2];
        for (int e = 0; e < 2; e++) {
            unsigned rr = trans ? 2 * (lane & 3) + e : lane >> 2, cc = trans ? lane >> 2 : 2 * (lane & 3) + e;
            const uint16_t *p = (const uint16_t *)(uintptr_t)rows[8 * i + rr];
            if (((uintptr_t)p & 15) || (const unsigned char *)p < lo || (const unsigned char *)(p + 8) > hi)
                emu_fail("ldmatrix: a row that is not 16-byte aligned in the dynamic shared memory");
            v[e] = p[cc];
        }
        r[i] = (uint32_t)v[0] | (uint32_t)v[1] << 16;
    }
}

/* A thread done with its block: it no longer counts at the block's or its warp's barriers (the
 * others waiting there may now go on), then waits for the block's other threads; the last one
 * readies the barriers for the next block. */
inline void emu_block_done()
{
    unsigned me = g_emu.cur;
    g_emu.th[me].exited = true;
    emu_barrier &blk = g_emu.block, &wb = g_emu.warp[me / 32];
    blk.needed--;
    if (blk.arrived && blk.arrived == blk.needed) emu_release(blk);
    wb.needed--;
    if (wb.arrived && wb.arrived == wb.needed) emu_release(wb);
    emu_barrier &end = g_emu.endb;
    if (++end.arrived == end.needed) {
        blk.needed = g_emu.nthreads;
        for (unsigned w = 0; w * 32 < g_emu.nthreads; w++) g_emu.warp[w].needed = std::min(32u, g_emu.nthreads - w * 32);
        for (unsigned t = 0; t < g_emu.nthreads; t++) g_emu.th[t].exited = false;
        emu_release(end);
        return;
    }
    end.waiting.push_back(me);
    emu_yield(me);
}

/* Runs kernel() for every block of grid (x fastest). */
template <class F> static void emu_body(void *arg)
{
    F &kernel = *(F *)arg;
    for (unsigned z = 0; z < gridDim.z; z++)
        for (unsigned y = 0; y < gridDim.y; y++)
            for (unsigned x = 0; x < gridDim.x; x++) {
                blockIdx = dim3(x, y, z);
                kernel();
                emu_block_done();
            }
}
static inline void emu_entry(unsigned t)
{
    emu_set_thread(t);
    g_emu.body(g_emu.arg);
    g_emu.th[t].done = true; /* uc_link returns to the scheduler */
}
#ifdef EMU_ASM_SWITCH
static inline void emu_entry_asm()
{
    unsigned t = g_emu.cur; /* the scheduler's, for the thread it starts */
    emu_entry(t);
    void *dead;
    emu_switch(&dead, g_emu.sched_sp); /* never resumed */
    abort();
}
#endif

/* The order the threads of a block run in between two barriers: 0, 1, ... or, with CUEMU_ORDER=reverse
 * in the environment, the last first. A race between threads of a block (a barrier missing between
 * a write to shared memory and another thread's read of it) shows in one order or the other: the
 * tests run both (tests/gpu/cuda_emu.cmake). */
inline bool emu_reverse()
{
    static int r = -1;
    if (r < 0) {
        const char *e = getenv("CUEMU_ORDER");
        r = e && strcmp(e, "reverse") == 0;
    }
    return r;
}

/* Memory a kernel must not touch faults: each thread's stack has a guard page below it, the launch's
 * dynamic shared memory ends where a guard page starts (reading or writing past the bytes the
 * launch asked for faults, to within 16 bytes), and so do the emulated device allocations
 * (tests/gpu/emu/emu_runtime.cpp). The handler says so in one line, naming the block and thread
 * of the launch in progress, then gives the fault to the handler before it (the default's core
 * dump, or a sanitizer's report). */
inline struct sigaction g_emu_old_segv;
inline void emu_on_fault(int sig, siginfo_t *info, void *ctx)
{
    char line[400];
    int n = g_emu.running
                ? snprintf(line, sizeof line,
                           "cuemu: an access at %p faulted in a kernel (block (%u, %u, %u), thread (%u, %u, %u)): past the "
                           "end of a device allocation or of the launch's dynamic shared memory, or a thread's stack "
                           "overflowed\n",
                           info->si_addr, blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x, threadIdx.y, threadIdx.z)
                : snprintf(line, sizeof line, "cuemu: an access at %p faulted outside a kernel (%s)\n", info->si_addr,
                           (uintptr_t)info->si_addr < 4096 ? "a NULL pointer" : "past the end of a device allocation?");
    if (n > 0 && write(2, line, (size_t)n) < 0) n = 0;
    sigaction(SIGSEGV, &g_emu_old_segv, NULL); /* the fault again, to the handler before */
    (void)sig, (void)ctx;
}
inline void emu_guard_init()
{
    if (g_emu.smem_region) return;
    void *m = mmap(NULL, EMU_SMEM_REGION + 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) emu_fail("no memory for the shared memory");
    mprotect((char *)m + EMU_SMEM_REGION, 4096, PROT_NONE);
    g_emu.smem_region = (unsigned char *)m;
    static char altstack[64 * 1024]; /* the handler runs here: a thread's overflowed stack cannot hold it */
    stack_t ss;
    memset(&ss, 0, sizeof ss);
    ss.ss_sp = altstack;
    ss.ss_size = sizeof altstack;
    sigaltstack(&ss, NULL);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = emu_on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESETHAND;
    sigaction(SIGSEGV, &sa, &g_emu_old_segv);
}

/* Runs kernel (a callable of no arguments: one thread's work in one block) on a grid of blocks of
 * `block` threads with smem_bytes of dynamic shared memory; returns when every block has run. */
template <class F> void emu_run(dim3 grid, dim3 block, size_t smem_bytes, F kernel)
{
    unsigned threads = block.x * block.y * block.z;
    if (threads == 0 || threads > EMU_MAX_THREADS) emu_fail("a block of 0 or more than 1024 threads");
    gridDim = grid;
    blockDim = block;
    blockIdx = dim3(0, 0, 0);
    g_emu.nthreads = threads;
    emu_guard_init();
    if (smem_bytes > EMU_SMEM_REGION) emu_fail("more dynamic shared memory than any device has");
    g_emu.smem = g_emu.smem_region + EMU_SMEM_REGION - ((smem_bytes + 15) & ~(size_t)15);
    memset(g_emu.smem, 0xee, (smem_bytes + 15) & ~(size_t)15); /* what nothing wrote reads as garbage */
    g_emu.block = emu_barrier{threads, 0, {}};
    g_emu.endb = emu_barrier{threads, 0, {}};
    for (unsigned w = 0; w * 32 < threads; w++) g_emu.warp[w] = emu_barrier{std::min(32u, threads - w * 32), 0, {}};
    memset(g_emu.xcalls, 0, sizeof g_emu.xcalls);
    memset(g_emu.bcalls, 0, sizeof g_emu.bcalls);
    g_emu.body = emu_body<F>;
    g_emu.arg = &kernel;
    if (g_emu.th.size() < threads) g_emu.th.resize(threads, emu_thread());
    for (unsigned t = 0; t < threads; t++) {
        emu_thread &e = g_emu.th[t];
        e.blocked = e.done = e.exited = false;
        e.idx = dim3(t % block.x, t / block.x % block.y, t / (block.x * block.y));
        if (!e.stack) {
            void *m = mmap(NULL, EMU_STACK + 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                           -1, 0);
            if (m == MAP_FAILED) emu_fail("no memory for a thread's stack");
            mprotect(m, 4096, PROT_NONE); /* a guard page: an overflow faults, never corrupts */
            e.stack = (char *)m + 4096;
        }
#ifdef EMU_ASM_SWITCH
        /* a stack emu_switch returns into emu_entry_asm from, as if called (rsp = 8 mod 16) */
        uintptr_t top = ((uintptr_t)e.stack + EMU_STACK) & ~(uintptr_t)15;
        void **sp = (void **)top - 8;
        for (int r = 0; r < 6; r++) sp[r] = NULL; /* r15 r14 r13 r12 rbx rbp */
        sp[6] = (void *)emu_entry_asm;
        sp[7] = NULL;
        e.sp = sp;
#else
        getcontext(&e.ctx);
        e.ctx.uc_stack.ss_sp = e.stack;
        e.ctx.uc_stack.ss_size = EMU_STACK;
        e.ctx.uc_link = &g_emu.sched;
        makecontext(&e.ctx, (void (*)())emu_entry, 1, t);
#endif
    }
    g_emu.running = true;
    for (bool alive = true; alive;) {
        alive = false;
        bool ran = false;
        for (unsigned k = 0; k < threads; k++) {
            unsigned t = emu_reverse() ? threads - 1 - k : k;
            emu_thread &e = g_emu.th[t];
            if (e.done) continue;
            alive = true;
            if (e.blocked) continue;
            emu_set_thread(t);
            ran = true;
#ifdef EMU_ASM_SWITCH
            emu_switch(&g_emu.sched_sp, e.sp);
#else
            swapcontext(&g_emu.sched, &e.ctx);
#endif
        }
        if (alive && !ran) emu_fail("every live thread waits at a barrier that the others never reach: a deadlock");
    }
    g_emu.running = false;
}

/* The launch of test_att_mma_emu.cpp: 1-D blocks, kernel a callable of no arguments. */
template <class F> void emu_launch(dim3 grid, unsigned threads, size_t smem_bytes, F kernel)
{
    emu_run(grid, dim3(threads), smem_bytes, kernel);
}

#endif
