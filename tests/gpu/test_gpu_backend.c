/* The CUDA backend's core entries against the cpu backend's on the same fresh random inputs, odd
 * sizes included (docs/gpu.md): memory, copies, set_bytes, events, the fp32 GEMMs (within 1e-5 of
 * the largest value, TF32 off; 1e-2 with --tf32 allowed), the MoE grouped GEMM (both of its cuBLAS
 * paths, the same tolerances), the bf16 and fp16 GEMMs (1e-2), the
 * dtype conversions (bit for bit, NaN for NaN), lp_native and the measurements. Built only with
 * CUDA; exits 77 (ctest: skipped), saying why, without CUDA in the build or without a visible GPU.
 * The kernels of cuda_fill_elementwise and cuda_fill_attention_moe are held by their own tests.
 * Seed: argv[1] (default: the time), printed, so a failure can be run again; argv[2]
 * --sanitizer leaves out the timed figures (compute-sanitizer slows kernels) and the
 * out-of-memory check (a CUDA error on purpose, which the sanitizer would count). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#include "backend/backend.h"
#include "trident/activation.h"
#include "trident/half.h"
#include "trident/philox.h"

#define SKIP 77

#ifndef TRIDENT_HAVE_CUDA
int main(void)
{
    printf("SKIP: this trident was built without CUDA (no nvcc at configure time, or -DTRIDENT_CUDA=OFF)\n");
    return SKIP;
}
#else
#include <cuda_runtime.h>

#include "backend/cuda/cuda.h"

/* Under the host emulation (tests/gpu/cuda_emu.cmake: TD_CUDA_EMU) the largest GEMMs are smaller by
 * `by` along each dimension: its cuBLAS is plain loops, and the glue held here is the same at any
 * size. The same cases otherwise. */
#ifdef TD_CUDA_EMU
#define EMU_SMALLER(n, by) ((n) / (by))
#else
#define EMU_SMALLER(n, by) (n)
#endif

static int g_fail, g_checks;
static uint64_t g_seed;
static uint64_t g_stream;

static void check(int ok, const char *what, double got, double tol)
{
    g_checks++;
    if (!ok) g_fail++;
    printf("%s: %s (%.3g, limit %.3g)\n", ok ? "ok" : "FAIL", what, got, tol);
}

/* x (n) uniform in [-1, 1) from the next Philox stream of the run's seed. */
static void rnd(float *x, size_t n)
{
    td_philox_key k = td_philox_key_from_seed(g_seed);
    uint64_t s = g_stream++;
    for (size_t i = 0; i < n; i += 4) {
        td_philox_ctr c = {{(uint32_t)(i >> 2), (uint32_t)((i >> 2) >> 32), (uint32_t)s, 0x6770u}};
        td_philox_ctr r = td_philox4x32_inline(c, k);
        for (size_t j = 0; j < 4 && i + j < n; j++) x[i + j] = (float)((double)r.v[j] / 2147483648.0 - 1.0);
    }
}

static float *fmem(size_t n) { return calloc(n ? n : 1, sizeof(float)); }

/* Host copy to device memory of the cuda backend. */
static void *up(const backend *g, const void *h, size_t bytes)
{
    void *d = g->ops->alloc(g, bytes);
    g->ops->copy_bytes(g, d, h, bytes, BE_H2D);
    return d;
}
static void down(const backend *g, void *h, const void *d, size_t bytes) { g->ops->copy_bytes(g, h, d, bytes, BE_D2H); }

/* max |a - b| over max |b| (b: the cpu's); NaN anywhere is a failure (returned as +inf). */
static double rel_err(const float *a, const float *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(a[i]) || isnan(b[i])) return INFINITY;
        double d = fabs((double)a[i] - b[i]);
        if (d > num) num = d;
        if (fabs(b[i]) > den) den = fabs(b[i]);
    }
    return den > 0 ? num / den : num;
}

static void test_memory(const backend *g)
{
    enum { N = 1000003 };
    unsigned char *h = malloc(N), *back = malloc(N);
    for (size_t i = 0; i < N; i++) h[i] = (unsigned char)(i * 2654435761u >> 24);
    int aligned = 1;
    void *p[7];
    for (int i = 0; i < 7; i++) {
        p[i] = g->ops->alloc(g, (size_t)1 + 37 * (size_t)i);
        aligned &= ((uintptr_t)p[i] & 63) == 0;
    }
    for (int i = 0; i < 7; i++) g->ops->free(g, p[i]);
    g->ops->free(g, NULL);
    check(aligned, "alloc: 64-byte aligned", aligned, 1);
    unsigned char *a = up(g, h, N), *b = g->ops->alloc(g, N);
    g->ops->copy_bytes(g, b, a, N, BE_D2D);
    g->ops->set_bytes(g, b + 100, 0xab, 1000);
    down(g, back, b, N);
    int same = 1;
    for (size_t i = 0; i < N; i++) same &= back[i] == (i >= 100 && i < 1100 ? 0xab : h[i]);
    check(same, "copy_bytes H2D, D2D, D2H and set_bytes: every byte", same, 1);
    be_event t0, t1;
    g->ops->event_record(g, &t0);
    for (int r = 0; r < 20; r++) g->ops->set_bytes(g, b, r, N);
    g->ops->event_record(g, &t1);
    double s = g->ops->event_elapsed(g, &t0, &t1);
    check(s > 0 && s < 1.0 && t0.h == NULL && t1.h == NULL, "events: elapsed > 0 and both released", s, 1.0);
    /* 40 H2D copies from one host buffer rewritten after each (more copies than staging slots):
     * each copy holds what the buffer held when it was called */
    enum { SEG = 100003, NSEG = 40 };
    unsigned char *hb = malloc(SEG), *all = malloc((size_t)SEG * NSEG), *dall = g->ops->alloc(g, (size_t)SEG * NSEG);
    for (int i = 0; i < NSEG; i++) {
        memset(hb, 7 * i + 1, SEG);
        g->ops->copy_bytes(g, dall + (size_t)i * SEG, hb, SEG, BE_H2D);
        memset(hb, 0xee, SEG);
    }
    down(g, all, dall, (size_t)SEG * NSEG);
    same = 1;
    for (size_t i = 0; i < (size_t)SEG * NSEG; i++) same &= all[i] == (unsigned char)(7 * (i / SEG) + 1);
    check(same, "40 H2D copies from one reused host buffer: each holds its own bytes", same, 1);
    g->ops->free(g, dall);
    free(hb), free(all);
    /* H2D from pinned memory: the source may be reused once copy_bytes returns */
    unsigned char *pinned = NULL;
    if (cudaMallocHost((void **)&pinned, N) == cudaSuccess) {
        memcpy(pinned, h, N);
        g->ops->copy_bytes(g, b, pinned, N, BE_H2D);
        memset(pinned, 0, N); /* at once */
        down(g, back, b, N);
        same = memcmp(back, h, N) == 0;
        check(same, "copy_bytes H2D from pinned memory: the source reusable on return", same, 1);
        cudaFreeHost(pinned);
    } else {
        check(0, "cudaMallocHost for the pinned-copy check", 0, 1);
    }
    /* comm's staging (xfer.h): host_alloc is pinned, writable host memory a copy can use both ways */
    check(g->ops->host_alloc && g->ops->host_free, "host_alloc and host_free set: comm is staged", 1, 1);
    unsigned char *stage = g->ops->host_alloc(g, N);
    memcpy(stage, h, N);
    g->ops->copy_bytes(g, a, stage, N, BE_H2D);
    memset(stage, 0, N);
    g->ops->copy_bytes(g, stage, a, N, BE_D2H);
    check(memcmp(stage, h, N) == 0, "host_alloc memory: H2D then D2H through it, every byte", 1, 1);
    g->ops->host_free(g, stage);
    g->ops->host_free(g, NULL);
    /* event_query: an event behind a long queue has not passed at once, has after sync; released once */
    be_event q;
    for (int r = 0; r < 200; r++) g->ops->set_bytes(g, b, r, N);
    g->ops->event_record(g, &q);
    int early = g->ops->event_query(g, &q);
    g->ops->sync(g);
    int late = g->ops->event_query(g, &q);
    check(late == 1, "event_query: 1 once the queue has run", late, 1);
    printf("event_query right after 200 queued set_bytes: %d (0 expected on a GPU, not required)\n", early);
    g->ops->event_release(g, &q);
    g->ops->event_release(g, &q); /* a released event: a no-op */
    check(q.h == NULL, "event_release: the handle given back", q.h == NULL, 1);
    g->ops->sync(g);
    g->ops->free(g, a);
    g->ops->free(g, b);
    free(h);
    free(back);
}

/* matmul_fwd (bias or none) and matmul_bwd (accumulating into random gradients, each of dinp,
 * dw, db left out in turn) on both backends. */
static void test_matmul(const backend *c, const backend *g, int BT, int C, int OC, double tol, const char *mode)
{
    size_t ni = (size_t)BT * C, nw = (size_t)OC * C, no = (size_t)BT * OC;
    float *x = fmem(ni), *w = fmem(nw), *b = fmem(OC), *dy = fmem(no), *out = fmem(no), *gout = fmem(no);
    float *dx0 = fmem(ni), *dw0 = fmem(nw), *db0 = fmem(OC);
    rnd(x, ni), rnd(w, nw), rnd(b, OC), rnd(dy, no), rnd(dx0, ni), rnd(dw0, nw), rnd(db0, OC);
    float *dx = up(g, x, ni * 4), *dw = up(g, w, nw * 4), *dbias = up(g, b, OC * 4), *ddy = up(g, dy, no * 4);
    float *dout = g->ops->alloc(g, no * 4);
    char what[160];
    for (int bias = 0; bias < 2; bias++) {
        c->ops->matmul_fwd(c, be_f32_out(out), be_f32(x), w, bias ? b : NULL, BT, C, OC);
        g->ops->set_bytes(g, dout, 0xff, no * 4); /* NaN: an element left unwritten fails */
        g->ops->matmul_fwd(g, be_f32_out(dout), be_f32(dx), dw, bias ? dbias : NULL, BT, C, OC);
        down(g, gout, dout, no * 4);
        double e = rel_err(gout, out, no);
        snprintf(what, sizeof what, "matmul_fwd %s %dx%dx%d%s", mode, BT, C, OC, bias ? " + bias" : "");
        check(e <= tol, what, e, tol);
    }
    for (int skip = -1; skip < 3; skip++) { /* -1: all three gradients; else that one left out */
        float *cdx = fmem(ni), *cdw = fmem(nw), *cdb = fmem(OC), *hdx = fmem(ni), *hdw = fmem(nw), *hdb = fmem(OC);
        memcpy(cdx, dx0, ni * 4), memcpy(cdw, dw0, nw * 4), memcpy(cdb, db0, OC * 4);
        float *gdx = up(g, dx0, ni * 4), *gdw = up(g, dw0, nw * 4), *gdb = up(g, db0, OC * 4);
        c->ops->matmul_bwd(c, be_f32_out(skip == 0 ? NULL : cdx), skip == 1 ? NULL : cdw, skip == 2 ? NULL : cdb,
                           be_f32(dy), be_f32(x), w, BT, C, OC);
        g->ops->matmul_bwd(g, be_f32_out(skip == 0 ? NULL : gdx), skip == 1 ? NULL : gdw, skip == 2 ? NULL : gdb,
                           be_f32(ddy), be_f32(dx), dw, BT, C, OC);
        down(g, hdx, gdx, ni * 4), down(g, hdw, gdw, nw * 4), down(g, hdb, gdb, OC * 4);
        double e = fmax(rel_err(hdx, cdx, ni), fmax(rel_err(hdw, cdw, nw), rel_err(hdb, cdb, OC)));
        snprintf(what, sizeof what, "matmul_bwd %s %dx%dx%d (dinp, dW, db +=%s)", mode, BT, C, OC,
                 skip < 0 ? "" : skip == 0 ? "; dinp NULL" : skip == 1 ? "; dW NULL" : "; db NULL");
        check(e <= tol, what, e, tol);
        int untouched = 1; /* a NULL gradient is not written: the cpu's buffer kept its start values */
        if (skip == 0) untouched = memcmp(cdx, dx0, ni * 4) == 0 && memcmp(hdx, dx0, ni * 4) == 0;
        if (skip == 1) untouched = memcmp(hdw, dw0, nw * 4) == 0;
        if (skip == 2) untouched = memcmp(hdb, db0, OC * 4) == 0;
        if (skip >= 0) check(untouched, "  the gradient passed as NULL kept its values", untouched, 1);
        g->ops->free(g, gdx), g->ops->free(g, gdw), g->ops->free(g, gdb);
        free(cdx), free(cdw), free(cdb), free(hdx), free(hdw), free(hdb);
    }
    g->ops->free(g, dx), g->ops->free(g, dw), g->ops->free(g, dbias), g->ops->free(g, ddy), g->ops->free(g, dout);
    free(x), free(w), free(b), free(dy), free(out), free(gout), free(dx0), free(dw0), free(db0);
}

/* matmul_grouped_fwd (bias or none; the output poisoned with NaN first: every row written) and
 * matmul_grouped_bwd (accumulating into random gradients, each of dinp, dW, db left out in turn;
 * the experts without rows and a NULL gradient keep their values) against the cpu's grouped
 * entries; counts[G] the experts' rows. */
static void test_matmul_grouped(const backend *c, const backend *g, const int32_t *counts, int G, int C, int OC,
                                double tol, const char *mode)
{
    int N = 0;
    for (int e = 0; e < G; e++) N += counts[e];
    size_t ni = (size_t)N * C, nw = (size_t)G * OC * C, no = (size_t)N * OC, nb = (size_t)G * OC;
    float *x = fmem(ni), *w = fmem(nw), *b = fmem(nb), *dy = fmem(no), *out = fmem(no), *gout = fmem(no);
    float *dx0 = fmem(ni), *dw0 = fmem(nw), *db0 = fmem(nb);
    rnd(x, ni), rnd(w, nw), rnd(b, nb), rnd(dy, no), rnd(dx0, ni), rnd(dw0, nw), rnd(db0, nb);
    float *gx = up(g, x, ni * 4), *gw = up(g, w, nw * 4), *gb = up(g, b, nb * 4), *gdy = up(g, dy, no * 4);
    float *go = g->ops->alloc(g, no * 4);
    char what[200], cnt[120] = "";
    for (int e = 0, at = 0; e < G && at < (int)sizeof cnt - 8; e++)
        at += snprintf(cnt + at, sizeof cnt - (size_t)at, "%s%d", e ? "," : "", (int)counts[e]);
    for (int bias = 0; bias < 2; bias++) {
        for (size_t i = 0; i < no; i++) out[i] = NAN;
        c->ops->matmul_grouped_fwd(c, out, x, w, bias ? b : NULL, counts, G, C, OC);
        g->ops->set_bytes(g, go, 0xff, no * 4); /* NaN: an element left unwritten fails */
        g->ops->matmul_grouped_fwd(g, go, gx, gw, bias ? gb : NULL, counts, G, C, OC);
        down(g, gout, go, no * 4);
        double e = rel_err(gout, out, no);
        snprintf(what, sizeof what, "matmul_grouped_fwd %s G %d rows {%s} C %d OC %d%s", mode, G, cnt, C, OC,
                 bias ? " + bias" : "");
        check(e <= tol, what, e, tol);
    }
    for (int skip = -1; skip < 3; skip++) { /* -1: all three gradients; else that one left out */
        float *cdx = fmem(ni), *cdw = fmem(nw), *cdb = fmem(nb), *hdx = fmem(ni), *hdw = fmem(nw), *hdb = fmem(nb);
        memcpy(cdx, dx0, ni * 4), memcpy(cdw, dw0, nw * 4), memcpy(cdb, db0, nb * 4);
        float *gdx = up(g, dx0, ni * 4), *gdw = up(g, dw0, nw * 4), *gdb = up(g, db0, nb * 4);
        c->ops->matmul_grouped_bwd(c, skip == 0 ? NULL : cdx, skip == 1 ? NULL : cdw, skip == 2 ? NULL : cdb, dy, x, w,
                                   counts, G, C, OC);
        g->ops->matmul_grouped_bwd(g, skip == 0 ? NULL : gdx, skip == 1 ? NULL : gdw, skip == 2 ? NULL : gdb, gdy, gx,
                                   gw, counts, G, C, OC);
        down(g, hdx, gdx, ni * 4), down(g, hdw, gdw, nw * 4), down(g, hdb, gdb, nb * 4);
        double e = fmax(rel_err(hdx, cdx, ni), fmax(rel_err(hdw, cdw, nw), rel_err(hdb, cdb, nb)));
        snprintf(what, sizeof what, "matmul_grouped_bwd %s G %d rows {%s} C %d OC %d (dinp, dW, db +=%s)", mode, G,
                 cnt, C, OC, skip < 0 ? "" : skip == 0 ? "; dinp NULL" : skip == 1 ? "; dW NULL" : "; db NULL");
        check(e <= tol, what, e, tol);
        int untouched = 1; /* a NULL gradient is not written */
        if (skip == 0) untouched = memcmp(hdx, dx0, ni * 4) == 0;
        if (skip == 1) untouched = memcmp(hdw, dw0, nw * 4) == 0;
        if (skip == 2) untouched = memcmp(hdb, db0, nb * 4) == 0;
        for (int ex = 0; ex < G; ex++) /* an expert without rows: its dW and db kept their values */
            if (!counts[ex])
                untouched &= memcmp(hdw + (size_t)ex * OC * C, dw0 + (size_t)ex * OC * C, (size_t)OC * C * 4) == 0 &&
                             memcmp(hdb + (size_t)ex * OC, db0 + (size_t)ex * OC, (size_t)OC * 4) == 0;
        check(untouched, "  a NULL gradient and the experts without rows kept their values", untouched, 1);
        g->ops->free(g, gdx), g->ops->free(g, gdw), g->ops->free(g, gdb);
        free(cdx), free(cdw), free(cdb), free(hdx), free(hdw), free(hdb);
    }
    g->ops->free(g, gx), g->ops->free(g, gw), g->ops->free(g, gb), g->ops->free(g, gdy), g->ops->free(g, go);
    free(x), free(w), free(b), free(dy), free(out), free(gout), free(dx0), free(dw0), free(db0);
}

/* The grouped GEMM's cases: one expert, uneven counts with zeros and a one-row expert, odd C and
 * OC both ways, a larger layer, and no rows at all; through cublasSgemmGroupedBatched and
 * through one cublasSgemm an expert, then in TF32 (under the sanitizer: the first path only, its
 * kernels are the same). */
static void test_grouped(const backend *c, backend *g, int sanitizer)
{
    static const int32_t one[1] = {37}, three[3] = {17, 0, 1}, eight[8] = {0, 9, 1, 40, 0, 3, 0, 22};
    static const int32_t big[8] = {130, 0, 257, 64, 1, 90, 0, 200}, none[4] = {0, 0, 0, 0};
    int native = cuda_set_grouped_batched(1);
    printf("loaded cuBLAS %s cublasSgemmGroupedBatched\n", native ? "has" : "lacks (the per-expert path only)");
    int first = native ? 1 : 0, last = sanitizer ? first : 0;
    for (int path = first; path >= last; path--) {
        cuda_set_grouped_batched(path);
        const char *mode = path ? "fp32 grouped-batched" : "fp32 per-expert";
        test_matmul_grouped(c, g, one, 1, 37, 53, 1e-5, mode);
        test_matmul_grouped(c, g, three, 3, 37, 53, 1e-5, mode);
        test_matmul_grouped(c, g, eight, 8, 53, 37, 1e-5, mode);
        test_matmul_grouped(c, g, big, 8, EMU_SMALLER(256, 4), EMU_SMALLER(384, 4), 1e-5, mode);
        test_matmul_grouped(c, g, none, 4, 37, 53, 1e-5, mode);
    }
    cuda_set_grouped_batched(1);
    if (sanitizer) return;
    be_set_tf32(g, 1);
    test_matmul_grouped(c, g, big, 8, EMU_SMALLER(256, 4), EMU_SMALLER(384, 4), 1e-2,
                        native ? "tf32 grouped-batched" : "tf32 per-expert");
    be_set_tf32(g, 0);
}

/* The low-precision GEMMs: the same rounded inputs on both backends (rounded by the cpu's convert). */
static void test_matmul_lp(const backend *c, const backend *g, be_dtype dt, int BT, int C, int OC)
{
    const double tol = 1e-2;
    size_t ni = (size_t)BT * C, nw = (size_t)OC * C, no = (size_t)BT * OC;
    float *x = fmem(ni), *w = fmem(nw), *b = fmem(OC), *dy = fmem(no), *out = fmem(no), *gout = fmem(no);
    float *dx0 = fmem(ni), *dw0 = fmem(nw);
    rnd(x, ni), rnd(w, nw), rnd(b, OC), rnd(dy, no), rnd(dx0, ni), rnd(dw0, nw);
    uint16_t *xl = malloc(ni * 2 + 2), *wl = malloc(nw * 2 + 2), *dyl = malloc(no * 2 + 2);
    c->ops->convert(c, xl, dt, x, BE_F32, ni);
    c->ops->convert(c, wl, dt, w, BE_F32, nw);
    c->ops->convert(c, dyl, dt, dy, BE_F32, no);
    void *gx = up(g, xl, ni * 2), *gw = up(g, wl, nw * 2), *gdy = up(g, dyl, no * 2);
    float *gb = up(g, b, OC * 4), *go = g->ops->alloc(g, no * 4);
    be_in cx = {xl, dt}, cdy = {dyl, dt}, hx = {gx, dt}, hdy = {gdy, dt};
    c->ops->matmul_fwd_lp(c, be_f32_out(out), cx, wl, b, dt, BT, C, OC);
    g->ops->set_bytes(g, go, 0xff, no * 4);
    g->ops->matmul_fwd_lp(g, be_f32_out(go), hx, gw, gb, dt, BT, C, OC);
    down(g, gout, go, no * 4);
    char what[160];
    double e = rel_err(gout, out, no);
    snprintf(what, sizeof what, "matmul_fwd_lp %s %dx%dx%d + bias", be_dtype_name(dt), BT, C, OC);
    check(e <= tol, what, e, tol);
    { /* the output in dt itself (a 16-bit run's logits: acts_in), the bias added after */
        void *g16 = g->ops->alloc(g, no * 2);
        uint16_t *h16 = malloc(no * 2);
        g->ops->matmul_fwd_lp(g, (be_out){g16, dt}, hx, gw, gb, dt, BT, C, OC);
        down(g, h16, g16, no * 2);
        c->ops->convert(c, gout, BE_F32, h16, dt, no);
        e = rel_err(gout, out, no);
        snprintf(what, sizeof what, "matmul_fwd_lp %s %dx%dx%d + bias, output in %s", be_dtype_name(dt), BT, C, OC,
                 be_dtype_name(dt));
        check(e <= tol, what, e, tol);
        g->ops->free(g, g16), free(h16);
    }
    float *cdx = fmem(ni), *cdw = fmem(nw), *hdx = fmem(ni), *hdw = fmem(nw);
    memcpy(cdx, dx0, ni * 4), memcpy(cdw, dw0, nw * 4);
    float *gdx = up(g, dx0, ni * 4), *gdw = up(g, dw0, nw * 4);
    c->ops->matmul_bwd_lp(c, be_f32_out(cdx), cdw, cdy, cx, wl, dt, BT, C, OC);
    g->ops->matmul_bwd_lp(g, be_f32_out(gdx), gdw, hdy, hx, gw, dt, BT, C, OC);
    down(g, hdx, gdx, ni * 4), down(g, hdw, gdw, nw * 4);
    e = fmax(rel_err(hdx, cdx, ni), rel_err(hdw, cdw, nw));
    snprintf(what, sizeof what, "matmul_bwd_lp %s %dx%dx%d (dinp, dW +=)", be_dtype_name(dt), BT, C, OC);
    check(e <= tol, what, e, tol);
    g->ops->free(g, gx), g->ops->free(g, gw), g->ops->free(g, gdy), g->ops->free(g, gb), g->ops->free(g, go);
    g->ops->free(g, gdx), g->ops->free(g, gdw);
    free(x), free(w), free(b), free(dy), free(out), free(gout), free(dx0), free(dw0), free(xl), free(wl), free(dyl);
    free(cdx), free(cdw), free(hdx), free(hdw);
}

/* The GPT MLP's fc and GeLU as one product and fc2's input gradient through GeLU's derivative
 * (matmul_gelu_fwd_lp, matmul_dgelu_bwd_lp: cuBLASLt's GELU_AUX_BIAS and DGELU epilogues), held to
 * the cpu's composition from the same rounded inputs: the GEMM with its bias, then the tanh GeLU
 * (act_fwd) of the fp32 sum; fc2's product, then act_bwd at the GPU's rounded pre-activation. Then
 * the mixed-precision wrappers the MLP calls (be_matmul_gelu_fwd, be_matmul_dgelu_bwd: dW as well),
 * with cuBLASLt on, and off (lt 0: the forward declines, the backward's GeLU derivative by a
 * kernel after the GEMM). BT x C into fc's OC, fc2 back to H. */
static void test_matmul_gelu(const backend *c, backend *g, be_dtype dt, int BT, int C, int OC, int H, int lt)
{
    const double tol = 1e-2;
    size_t ni = (size_t)BT * C, nw = (size_t)OC * C, no = (size_t)BT * OC, nw2 = (size_t)H * OC, ny = (size_t)BT * H;
    size_t es = be_dtype_size(dt);
    float *x = fmem(ni), *w = fmem(nw), *b = fmem(OC), *w2 = fmem(nw2), *dy = fmem(ny);
    rnd(x, ni), rnd(w, nw), rnd(b, OC), rnd(w2, nw2), rnd(dy, ny);
    uint16_t *xl = malloc(ni * 2), *wl = malloc(nw * 2), *w2l = malloc(nw2 * 2), *dyl = malloc(ny * 2);
    c->ops->convert(c, xl, dt, x, BE_F32, ni), c->ops->convert(c, wl, dt, w, BE_F32, nw);
    c->ops->convert(c, w2l, dt, w2, BE_F32, nw2), c->ops->convert(c, dyl, dt, dy, BE_F32, ny);
    /* the cpu: pre = x W^T + b (fp32), act = gelu(pre) */
    float *pre = fmem(no), *act = fmem(no), *t = fmem(no), *dref = fmem(no);
    c->ops->matmul_fwd_lp(c, be_f32_out(pre), (be_in){xl, dt}, wl, b, dt, BT, C, OC);
    c->ops->act_fwd(c, TD_ACT_GELU, 0, be_f32_out(act), be_f32(pre), BT, OC);
    /* the gpu's entries */
    int on = cuda_set_lt_bias(lt);
    void *gx = up(g, xl, ni * 2), *gw = up(g, wl, nw * 2), *gw2 = up(g, w2l, nw2 * 2), *gdy = up(g, dyl, ny * 2);
    float *gb = up(g, b, OC * 4);
    void *gact = g->ops->alloc(g, no * es), *gpre = g->ops->alloc(g, no * es), *gd = g->ops->alloc(g, no * es);
    int done = g->ops->matmul_gelu_fwd_lp(g, (be_out){gact, dt}, (be_out){gpre, dt}, (be_in){gx, dt}, gw, gb, dt, BT,
                                         C, OC);
    char what[200];
    snprintf(what, sizeof what, "matmul_gelu_fwd_lp %s %dx%dx%d: %s", be_dtype_name(dt), BT, C, OC,
             on ? "cuBLASLt's GELU_AUX_BIAS ran" : "declined with cuBLASLt set aside");
    check(done == on, what, done, on);
    uint16_t *h16 = malloc(no * 2);
    float *hact = fmem(no), *hpre = fmem(no), *hd = fmem(no);
    if (done) {
        down(g, h16, gact, no * es), c->ops->convert(c, hact, BE_F32, h16, dt, no);
        down(g, h16, gpre, no * es), c->ops->convert(c, hpre, BE_F32, h16, dt, no);
        double e = rel_err(hact, act, no);
        snprintf(what, sizeof what, "matmul_gelu_fwd_lp %s %dx%dx%d: act = gelu(x W^T + b)", be_dtype_name(dt), BT, C, OC);
        check(e <= tol, what, e, tol);
        e = rel_err(hpre, pre, no);
        snprintf(what, sizeof what, "matmul_gelu_fwd_lp %s %dx%dx%d: pre = x W^T + b", be_dtype_name(dt), BT, C, OC);
        check(e <= tol, what, e, tol);
    } else { /* the cpu's pre, rounded, stands in for the backward */
        c->ops->convert(c, h16, dt, pre, BE_F32, no), c->ops->convert(c, hpre, BE_F32, h16, dt, no);
        g->ops->copy_bytes(g, gpre, h16, no * es, BE_H2D);
    }
    /* fc2's input gradient: (dy W2) * gelu'(pre), pre as the gpu holds it */
    c->ops->matmul_bwd_lp(c, be_f32_out(t), NULL, (be_in){dyl, dt}, (be_in){NULL, dt}, w2l, dt, BT, OC, H);
    c->ops->act_bwd(c, TD_ACT_GELU, 0, be_f32_out(dref), be_f32(t), be_f32(hpre), BT, OC);
    done = g->ops->matmul_dgelu_bwd_lp(g, (be_out){gd, dt}, (be_in){gdy, dt}, gw2, (be_in){gpre, dt}, dt, BT, OC, H);
    snprintf(what, sizeof what, "matmul_dgelu_bwd_lp %s %dx%dx%d: %s", be_dtype_name(dt), BT, OC, H,
             on ? "cuBLASLt's DGELU ran" : "declined with cuBLASLt set aside");
    check(done == on, what, done, on);
    if (done) {
        down(g, h16, gd, no * es), c->ops->convert(c, hd, BE_F32, h16, dt, no);
        double e = rel_err(hd, dref, no);
        snprintf(what, sizeof what, "matmul_dgelu_bwd_lp %s %dx%dx%d: (dy W2) gelu'(pre)", be_dtype_name(dt), BT, OC, H);
        check(e <= tol, what, e, tol);
    }
    /* the wrappers, as the MLP calls them: fp32 x and dy, fp32 weights rounded by mixed.c, on a
     * second backend of the device in the 16-bit run (be_set_gemm_dtype is once a backend) */
    g->ops->sync(g);
    backend *gm = g;
    g = be_cuda(0);
    be_set_gemm_dtype(g, dt);
    float *gx32 = up(g, x, ni * 4), *gw32 = up(g, w, nw * 4), *gw232 = up(g, w2, nw2 * 4), *gdy32 = up(g, dy, ny * 4);
    float *gdw = g->ops->alloc(g, nw2 * 4), *gtmp = g->ops->alloc(g, no * 4);
    g->ops->set_bytes(g, gdw, 0, nw2 * 4);
    done = be_matmul_gelu_fwd(g, gact, gpre, be_f32(gx32), gw32, gb, BT, C, OC);
    snprintf(what, sizeof what, "be_matmul_gelu_fwd %s: %s", be_dtype_name(dt), on ? "one product" : "declined");
    check(done == on, what, done, on);
    if (!done) { /* nothing to hold: the backward below from the cpu's act and pre */
        c->ops->convert(c, h16, dt, act, BE_F32, no);
        g->ops->copy_bytes(g, gact, h16, no * es, BE_H2D);
        c->ops->convert(c, h16, dt, pre, BE_F32, no);
        g->ops->copy_bytes(g, gpre, h16, no * es, BE_H2D);
    }
    down(g, h16, gpre, no * es), c->ops->convert(c, hpre, BE_F32, h16, dt, no);
    uint16_t *actl = malloc(no * 2);
    down(g, actl, gact, no * es);
    be_matmul_dgelu_bwd(g, gd, gtmp, gdw, gdy32, (be_in){gact, dt}, gw232, gpre, BT, OC, H);
    memset(t, 0, no * 4), memset(dref, 0, no * 4);
    float *dw = fmem(nw2), *hdw = fmem(nw2);
    c->ops->matmul_bwd_lp(c, be_f32_out(t), dw, (be_in){dyl, dt}, (be_in){actl, dt}, w2l, dt, BT, OC, H);
    c->ops->act_bwd(c, TD_ACT_GELU, 0, be_f32_out(dref), be_f32(t), be_f32(hpre), BT, OC);
    down(g, h16, gd, no * es), c->ops->convert(c, hd, BE_F32, h16, dt, no);
    down(g, hdw, gdw, nw2 * 4);
    double e = fmax(rel_err(hd, dref, no), rel_err(hdw, dw, nw2));
    snprintf(what, sizeof what, "be_matmul_dgelu_bwd %s %dx%dx%d (%s): dpre and dW", be_dtype_name(dt), BT, OC, H,
             on ? "DGELU" : "GEMM, then act_bwd");
    check(e <= tol, what, e, tol);
    cuda_set_lt_bias(1);
    g->ops->free(g, gx32), g->ops->free(g, gw32), g->ops->free(g, gw232), g->ops->free(g, gdy32);
    g->ops->free(g, gdw), g->ops->free(g, gtmp);
    g->ops->sync(g);
    be_free(g);
    g = gm;
    g->ops->free(g, gx), g->ops->free(g, gw), g->ops->free(g, gw2), g->ops->free(g, gdy), g->ops->free(g, gb);
    g->ops->free(g, gact), g->ops->free(g, gpre), g->ops->free(g, gd);
    free(x), free(w), free(b), free(w2), free(dy), free(xl), free(wl), free(w2l), free(dyl), free(pre), free(act);
    free(t), free(dref), free(h16), free(hact), free(hpre), free(hd), free(actl), free(dw), free(hdw);
}

/* Every pair of dtypes on random values and the edge cases (ties, fp16 overflow and subnormals,
 * signed zeros, Inf, NaN): the same bits as the cpu's, and NaN where the cpu has NaN. */
static void test_convert(const backend *c, const backend *g)
{
    enum { R = 4099, E = 16, N = R + E };
    static const float edge[E] = {0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, 65520.0f, -70000.0f, 1e-8f, -3e-5f,
                                  1.00390625f /* bf16 tie */, 1.01171875f, 3.4e38f, INFINITY, -INFINITY, NAN,
                                  1.00048828125f /* fp16 tie */};
    float *f = fmem(N);
    rnd(f, R);
    for (int i = 0; i < R; i++) f[i] *= (float)(1 << (i % 24)) * 0.01f; /* many exponents */
    memcpy(f + R, edge, sizeof edge);
    static const be_dtype T[3] = {BE_F32, BE_BF16, BE_F16};
    unsigned char *cs = malloc(N * 4), *cd = malloc(N * 4), *gd = malloc(N * 4);
    for (int si = 0; si < 3; si++)
        for (int di = 0; di < 3; di++) {
            be_dtype st = T[si], dt = T[di];
            c->ops->convert(c, cs, st, f, BE_F32, N); /* the source, as the cpu rounds it */
            c->ops->convert(c, cd, dt, cs, st, N);
            void *gs = up(g, cs, N * be_dtype_size(st)), *gdst = g->ops->alloc(g, N * be_dtype_size(dt));
            g->ops->convert(g, gdst, dt, gs, st, N);
            down(g, gd, gdst, N * be_dtype_size(dt));
            size_t bad = 0;
            for (size_t i = 0; i < N; i++) {
                float a, b;
                if (dt == BE_F32) memcpy(&a, gd + 4 * i, 4), memcpy(&b, cd + 4 * i, 4);
                else {
                    uint16_t ha, hb;
                    memcpy(&ha, gd + 2 * i, 2), memcpy(&hb, cd + 2 * i, 2);
                    a = dt == BE_BF16 ? td_bf16_to_f32(ha) : td_f16_to_f32(ha);
                    b = dt == BE_BF16 ? td_bf16_to_f32(hb) : td_f16_to_f32(hb);
                }
                int same = isnan(b) ? isnan(a) != 0 : memcmp(&a, &b, 4) == 0;
                if (!same && bad++ < 3)
                    printf("  element %zu: cuda %.9g, cpu %.9g (source %.9g)\n", i, (double)a, (double)b, (double)f[i]);
            }
            char what[96];
            snprintf(what, sizeof what, "convert %s -> %s, %d values (bits; NaN for NaN)", be_dtype_name(st),
                     be_dtype_name(dt), N);
            check(bad == 0, what, (double)bad, 0);
            g->ops->free(g, gs), g->ops->free(g, gdst);
        }
    free(f), free(cs), free(cd), free(gd);
}

static void test_measurements(backend *g)
{
    char d[512] = "";
    g->ops->describe(g, d, sizeof d);
    printf("describe: %s\n", d);
    check(strstr(d, "CUDA on ") != NULL && strstr(d, "cuBLAS") != NULL, "describe names the device and cuBLAS", 1, 1);
    check(g->ops->lp_native(g, BE_BF16) == 1, "lp_native(bf16) on an sm_80+ GPU", g->ops->lp_native(g, BE_BF16), 1);
    check(g->ops->lp_native(g, BE_F32) == 0, "lp_native(fp32) is 0", g->ops->lp_native(g, BE_F32), 0);
#ifdef TD_CUDA_EMU
    printf("figures: not measured (the host emulation, tests/gpu/cuda_emu.cmake, has no device's speed)\n");
    return;
#endif
    double p = g->ops->peak_gflops(g), cp = g->ops->copy_gbps(g), ad = g->ops->adamw_stream_gbps(g);
    g->gemm_dtype = BE_BF16; /* what peak_gflops reads (be_set_gemm_dtype is once a backend) */
    double pb = g->ops->peak_gflops(g);
    g->gemm_dtype = BE_F32;
    printf("figures: sgemm %.0f GFLOP/s, bf16 GEMM %.0f GFLOP/s, copy %.0f GB/s, AdamW streams %.0f GB/s\n", p, pb,
           cp, ad);
    check(p > 1000 && pb > p && cp > 100 && ad > 100, "peak_gflops, bf16 above fp32, copy_gbps, adamw_stream_gbps",
          p, 1000);
}

/* `test_gpu_backend --oom`: asks for twice the device's memory (its run ends there). */
static void oom_child(void)
{
    backend *g = be_cuda(0);
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    g->ops->alloc(g, 2 * total_b);
    printf("alloc of %zu bytes returned\n", 2 * total_b);
    exit(0);
}

/* Out of device memory: one line saying how much was asked and free, and the flags; exit 1. */
static void test_oom(const char *self)
{
    char cmd[4200], out[8192] = "";
    snprintf(cmd, sizeof cmd, "'%s' --oom 2>&1", self);
    FILE *p = popen(cmd, "r");
    size_t n = p ? fread(out, 1, sizeof out - 1, p) : 0;
    out[n] = 0;
    int st = p ? pclose(p) : -1;
    int rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    const char *line = strstr(out, "out of device memory");
    printf("%s", out);
    check(rc == 1 && line && strstr(out, "asked") && strstr(out, "free of") && strstr(out, "--micro-batch-size") &&
              strstr(out, "cudaMallocAsync"),
          "alloc beyond the device's memory: exit 1, one line with asked, free and the flags", rc, 1);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--oom") == 0) oom_child();
    if (be_backend_devices("cuda") < 1) {
        printf("SKIP: no CUDA device is visible here (no GPU, no driver, or CUDA_VISIBLE_DEVICES empty)\n");
        return SKIP;
    }
    g_seed = argc > 1 ? strtoull(argv[1], NULL, 10) : (uint64_t)time(NULL);
    printf("seed %llu (run again with: %s %llu)\n", (unsigned long long)g_seed, argv[0],
           (unsigned long long)g_seed);
    backend *c = be_create("cpu", 0);
    backend *g = be_cuda(0); /* not be_create: that refuses the backend while any kernel file is missing */
    int sanitizer = argc > 2 && strcmp(argv[2], "--sanitizer") == 0;
    test_memory(g);
    if (!sanitizer) test_oom(argv[0]);
    static const int sizes[][3] = {
        {1, 1, 1}, {37, 53, 29}, {130, 257, 67}, {EMU_SMALLER(256, 8), EMU_SMALLER(768, 8), EMU_SMALLER(2304, 8)}, {7, 1024, 50}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        test_matmul(c, g, sizes[i][0], sizes[i][1], sizes[i][2], 1e-5, "fp32");
    be_set_tf32(g, 1);
    test_matmul(c, g, 130, 257, 67, 1e-2, "tf32");
    be_set_tf32(g, 0);
    test_grouped(c, g, sanitizer);
    for (int dt = BE_BF16; dt <= BE_F16; dt++) {
        /* the forward's bias as cuBLASLt's epilogue, then as a kernel after cublasGemmEx */
        for (int lt = 1; lt >= 0; lt--) {
            int on = cuda_set_lt_bias(lt);
            printf("matmul_fwd_lp's bias: %s\n", on ? "cuBLASLt epilogue" : "a kernel after the GEMM");
            test_matmul_lp(c, g, (be_dtype)dt, 37, 53, 29);
            test_matmul_lp(c, g, (be_dtype)dt, EMU_SMALLER(256, 8), EMU_SMALLER(768, 8), EMU_SMALLER(2304, 8));
        }
        cuda_set_lt_bias(1);
        for (int lt = 1; lt >= 0; lt--) {
            test_matmul_gelu(c, g, (be_dtype)dt, 37, 53, 40, 29, lt);
            test_matmul_gelu(c, g, (be_dtype)dt, 300, 96, 384, 96, lt);
        }
    }
    test_convert(c, g);
    if (!sanitizer) test_measurements(g);
    const char *missing = be_ops_missing(g->ops);
    if (missing) /* be_create("cuda") refuses the backend until every kernel file is in the build */
        printf("note: entry %s (at least) is not filled yet: the kernel files of cuda_impl.h are missing\n", missing);
    be_free(g);
    be_free(c);
    printf("%d of %d checks passed\n", g_checks - g_fail, g_checks);
    return g_fail ? 1 : 0;
}
#endif
