/* CUDA kernels of the tensor-core kind on host threads, for tests of warp-level code where there is
 * no GPU (tests/gpu/test_att_mma_emu.cpp). A launch runs each thread of a block as a host thread
 * (the blocks one after another, so `__shared__` is static storage and dynamic shared memory one
 * buffer); __syncthreads is a barrier of the block's threads, a shuffle an exchange between the
 * 32 threads of a warp between two warp barriers, and mma.m16n8k16 (emu_mma) gathers the warp's
 * operand registers and multiplies the matrices they hold by PTX's fragment layout (the PTX ISA,
 * "Matrix Fragments for mma.m16n8k16 with floating point type"): written from that table alone,
 * so a kernel that loads its fragments in another layout computes something else here.
 * Only what src/backend/cuda/att_mma.cuh uses: 1-D blocks of a multiple of 32 threads. */
#ifndef TRIDENT_CUEMU_H
#define TRIDENT_CUEMU_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <ucontext.h>
#include <stdint.h>
#include <string.h>

#include <algorithm>
#include <vector>

#define ATT_EMU 1
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(n)

using std::max;
using std::min;

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

/* The emulated threads are contexts (ucontext) of one host thread, switched cooperatively at
 * barriers: a thread arriving at a barrier yields to the scheduler until the barrier's last thread
 * arrives (that one goes on at once). No host thread, lock or system call per barrier but the
 * context switch: a warp's 32 lanes cost what a function call a lane costs. threadIdx is set by
 * the scheduler when it resumes a thread; blockIdx is every thread's (the blocks run in turn). */
inline dim3 threadIdx, blockIdx, blockDim, gridDim;

/* The switch between contexts: on x86-64 (without a sanitizer, which must see stack switches
 * through swapcontext) six callee-saved registers and the stack pointer, a few nanoseconds;
 * elsewhere swapcontext, which also saves the signal mask with a system call. */
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define EMU_ASM_SWITCH 1
extern "C" void emu_switch(void **save_sp, void *to_sp);
__asm__(".text\n"
        ".globl emu_switch\n"
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
#define EMU_STACK (128 * 1024)
struct emu_barrier {
    unsigned needed, arrived;
    std::vector<unsigned> waiting;
};
struct emu_thread {
    ucontext_t ctx; /* swapcontext's */
    void *sp;       /* emu_switch's */
    bool blocked, done;
    std::vector<char> stack;
};
struct emu_state {
    emu_barrier block, warp[EMU_MAX_THREADS / 32];
    std::vector<emu_thread> th;
    ucontext_t sched;
    void *sched_sp;
    uint32_t a[EMU_MAX_THREADS][4], b[EMU_MAX_THREADS][2];
    std::vector<unsigned char> smem;
    void (*body)(void *);
    void *arg;
};
inline emu_state g_emu;

inline unsigned char *emu_smem() { return g_emu.smem.data(); }

inline void emu_wait(emu_barrier &bar)
{
    unsigned me = threadIdx.x;
    if (++bar.arrived == bar.needed) { /* the last: release the others and go on */
        for (unsigned t : bar.waiting) g_emu.th[t].blocked = false;
        bar.waiting.clear();
        bar.arrived = 0;
        return;
    }
    bar.waiting.push_back(me);
    g_emu.th[me].blocked = true;
#ifdef EMU_ASM_SWITCH
    emu_switch(&g_emu.th[me].sp, g_emu.sched_sp);
#else
    swapcontext(&g_emu.th[me].ctx, &g_emu.sched);
#endif
    threadIdx = dim3(me);
}
inline void __syncthreads() { emu_wait(g_emu.block); }
inline void emu_warp_sync() { emu_wait(g_emu.warp[threadIdx.x / 32]); }

/* The exchange of a shuffle: one barrier. A lane past it may reach its next shuffle before a
 * slower one has read this one's values, so consecutive shuffles alternate between two slots. */
inline float __shfl_xor_sync(unsigned mask, float v, int lanemask)
{
    (void)mask;
    static uint32_t xchg[2][EMU_MAX_THREADS];
    static unsigned calls[EMU_MAX_THREADS];
    unsigned t = threadIdx.x, slot = calls[t]++ & 1;
    memcpy(&xchg[slot][t], &v, 4);
    emu_warp_sync();
    float r;
    memcpy(&r, &xchg[slot][(t & ~31u) | ((t & 31u) ^ (unsigned)lanemask)], 4);
    return r;
}

/* 16-bit values (bf16 when bf, else IEEE fp16) to and from fp32, round to nearest even. */
inline float cu_h2f(uint16_t u, bool bf)
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
inline uint16_t cu_f2h(float x, bool bf)
{
    uint32_t w;
    memcpy(&w, &x, 4);
    if (bf) {
        if ((w & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((w >> 16) | 0x40);
        return (uint16_t)((w + 0x7fffu + ((w >> 16) & 1)) >> 16);
    }
    uint16_t sign = (uint16_t)((w >> 16) & 0x8000);
    float a = fabsf(x);
    if (isnan(x)) return (uint16_t)(sign | 0x7e00);
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

/* Typed element access, as cu_common.cuh's. */
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

/* mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}: every lane of the warp deposits its A (4
 * registers) and B (2); the first lane past the barrier unpacks the warp's matrices by the layout
 * (once a call: `calls` counts each lane's), and each lane reads back its 4 elements of C += A B. */
inline void emu_mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1, bool bf)
{
    static float A[EMU_MAX_THREADS / 32][16][16], B[EMU_MAX_THREADS / 32][16][8];
    static unsigned unpacked[EMU_MAX_THREADS / 32], calls[EMU_MAX_THREADS];
    unsigned t = threadIdx.x, w = t / 32, w0 = t & ~31u, lane = t & 31u;
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
                A[w][row][col] = cu_h2f(v, bf);
            }
            for (int i = 0; i < 4; i++) { /* b_i: row tig * 2 + (i & 1) (+ 8 for i >= 2), column group */
                uint32_t reg = g_emu.b[w0 + L][i >> 1];
                uint16_t v = (uint16_t)((i & 1) ? reg >> 16 : reg & 0xffff);
                B[w][tig * 2 + (i & 1) + (i >= 2 ? 8 : 0)][grp] = cu_h2f(v, bf);
            }
        }
    }
    unsigned grp = lane >> 2, tig = lane & 3;
    for (int i = 0; i < 4; i++) { /* c_i: row group (+ 8 for i >= 2), column tig * 2 + (i & 1) */
        unsigned row = i < 2 ? grp : grp + 8, col = tig * 2 + (i & 1);
        float s = 0.0f;
        for (int k = 0; k < 16; k++) s += A[w][row][k] * B[w][k][col];
        c[i] += s;
    }
    /* no second barrier: a lane that deposits its next operands waits for the others there, and
     * the matrices are unpacked again only past that barrier, after every lane has read these */
}

/* ldmatrix.sync.aligned.m8n8.x{1,2,4}[.trans].shared.b16: lanes 8i..8i+7 give the addresses of
 * the 8 rows (8 16-bit elements each, 16-byte aligned, in shared memory) of matrix i < n; lane L
 * receives in register i the elements (row L / 4, columns 2 (L % 4) and + 1) of matrix i, or with
 * .trans (rows 2 (L % 4) and + 1, column L / 4): the PTX ISA's "Warp-level matrix load
 * instruction: ldmatrix", written from it alone. The addresses go through two slots as a
 * shuffle's values do; a misaligned or out-of-shared-memory row aborts, as the device faults. */
inline void emu_ldmatrix(uint32_t *r, int n, bool trans, const uint16_t *row)
{
    static const uint16_t *xchg[2][EMU_MAX_THREADS];
    static unsigned calls[EMU_MAX_THREADS];
    unsigned t = threadIdx.x, slot = calls[t]++ & 1, w0 = t & ~31u, lane = t & 31u;
    xchg[slot][t] = row;
    emu_warp_sync();
    const unsigned char *lo = g_emu.smem.data(), *hi = lo + g_emu.smem.size();
    for (int i = 0; i < n; i++) {
        uint16_t v[2];
        for (int e = 0; e < 2; e++) {
            unsigned rr = trans ? 2 * (lane & 3) + e : lane >> 2, cc = trans ? lane >> 2 : 2 * (lane & 3) + e;
            const uint16_t *p = xchg[slot][w0 + 8 * i + rr];
            if (((uintptr_t)p & 15) || (const unsigned char *)p < lo || (const unsigned char *)(p + 8) > hi) {
                fprintf(stderr, "cuemu: ldmatrix row %u of matrix %d at %p: not a 16-byte aligned row of shared "
                        "memory\n", rr, i, (const void *)p);
                abort();
            }
            v[e] = p[cc];
        }
        r[i] = (uint32_t)v[0] | (uint32_t)v[1] << 16;
    }
}

/* Runs kernel() for every block of grid (x fastest), `threads` emulated threads a block. */
template <class F> static void emu_body(void *arg)
{
    F &kernel = *(F *)arg;
    for (unsigned z = 0; z < gridDim.z; z++)
        for (unsigned y = 0; y < gridDim.y; y++)
            for (unsigned x = 0; x < gridDim.x; x++) {
                blockIdx = dim3(x, y, z);
                kernel();
                __syncthreads(); /* the block is done before the next reuses shared memory */
            }
}
static void emu_entry(unsigned t)
{
    threadIdx = dim3(t);
    g_emu.body(g_emu.arg);
    g_emu.th[t].done = true; /* uc_link returns to the scheduler */
}
#ifdef EMU_ASM_SWITCH
static void emu_entry_asm()
{
    unsigned t = threadIdx.x; /* the scheduler's, for the thread it starts */
    emu_entry(t);
    void *dead;
    emu_switch(&dead, g_emu.sched_sp); /* never resumed */
    abort();
}
#endif
template <class F> void emu_launch(dim3 grid, unsigned threads, size_t smem_bytes, F kernel)
{
    gridDim = grid;
    blockDim = dim3(threads);
    g_emu.smem.assign(smem_bytes + 16, 0xee);
    g_emu.block = emu_barrier{threads, 0, {}};
    for (unsigned w = 0; w < threads / 32; w++) g_emu.warp[w] = emu_barrier{32, 0, {}};
    g_emu.body = emu_body<F>;
    g_emu.arg = &kernel;
    g_emu.th.assign(threads, emu_thread());
    for (unsigned t = 0; t < threads; t++) {
        emu_thread &e = g_emu.th[t];
        e.stack.resize(EMU_STACK);
#ifdef EMU_ASM_SWITCH
        /* a stack emu_switch returns into emu_entry_asm from, as if called (rsp = 8 mod 16) */
        uintptr_t top = ((uintptr_t)e.stack.data() + e.stack.size()) & ~(uintptr_t)15;
        void **sp = (void **)top - 8;
        for (int r = 0; r < 6; r++) sp[r] = NULL; /* r15 r14 r13 r12 rbx rbp */
        sp[6] = (void *)emu_entry_asm;
        sp[7] = NULL;
        e.sp = sp;
#else
        getcontext(&e.ctx);
        e.ctx.uc_stack.ss_sp = e.stack.data();
        e.ctx.uc_stack.ss_size = e.stack.size();
        e.ctx.uc_link = &g_emu.sched;
        makecontext(&e.ctx, (void (*)())emu_entry, 1, t);
#endif
    }
    for (bool alive = true; alive;) {
        alive = false;
        bool ran = false;
        for (unsigned t = 0; t < threads; t++) {
            emu_thread &e = g_emu.th[t];
            if (e.done) continue;
            alive = true;
            if (e.blocked) continue;
            threadIdx = dim3(t);
            ran = true;
#ifdef EMU_ASM_SWITCH
            emu_switch(&g_emu.sched_sp, e.sp);
#else
            swapcontext(&g_emu.sched, &e.ctx);
#endif
        }
        if (alive && !ran) {
            fprintf(stderr, "cuemu: every live thread waits at a barrier: a kernel deadlocks\n");
            abort();
        }
    }
}

#endif
