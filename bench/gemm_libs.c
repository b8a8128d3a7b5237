/* GEMM libraries side by side, in one process: Debian's OpenBLAS (the kernels it picked at load,
 * or the core OPENBLAS_CORETYPE names), BLIS and oneDNN (fp32 and bf16 x bf16 -> fp32), on the
 * GEMMs of a GPT-2 layer. Each library is dlopen'ed, so a missing one is skipped, not a build
 * error. Build and run: bench/gemm_libs.sh.
 *
 *   gemm_libs [BT] [threads] [H]   BT = tokens per micro-batch (default 2048 = 8 x 256), H = the
 *                                  model's width (default 768, GPT-2 124M; 64 for the tests' models)
 *
 * Prints GFLOP/s (2 m n k per product, best of a few runs after a warm-up) per library and shape:
 * the three products of a linear layer (forward NT, input-grad NN, weight-grad TN) for
 * GPT-2 124M's qkv, fc1, fc2 and its LM head. */
#include <dlfcn.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { ROW = 101, NOTRANS = 111, TRANS = 112 }; /* CBLAS enum values */
typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *, int, const float *, int, float,
                         float *, int);
typedef int (*dnnl_sgemm_fn)(char, char, int64_t, int64_t, int64_t, float, const float *, int64_t, const float *,
                             int64_t, float, float *, int64_t);
typedef int (*dnnl_bf16_fn)(char, char, int64_t, int64_t, int64_t, float, const uint16_t *, int64_t,
                            const uint16_t *, int64_t, float, float *, int64_t);

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint16_t to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* One product C (m, n) = op(A) op(B): form "NT" (A (m,k), B (n,k)), "NN" (B (k,n)), "TN" (A (k,m)). */
typedef struct {
    const char *name, *form;
    int m, n, k;
} shape;

typedef struct {
    const char *lib;
    sgemm_fn cblas;
    dnnl_sgemm_fn dsgemm;
    dnnl_bf16_fn dbf16;
} impl;

/* 0, or the library's error (oneDNN's bf16 GEMM on a CPU without the instructions it needs) */
static int run(const impl *im, const shape *s, const float *a, const float *b, const uint16_t *a16,
               const uint16_t *b16, float *c)
{
    int ta = s->form[0] == 'T', tb = s->form[1] == 'T';
    int lda = ta ? s->m : s->k, ldb = tb ? s->k : s->n;
    if (im->cblas) {
        im->cblas(ROW, ta ? TRANS : NOTRANS, tb ? TRANS : NOTRANS, s->m, s->n, s->k, 1.0f, a, lda, b, ldb, 0.0f, c,
                  s->n);
        return 0;
    }
    if (im->dsgemm) return im->dsgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', s->m, s->n, s->k, 1.0f, a, lda, b, ldb, 0.0f, c, s->n);
    return im->dbf16(ta ? 'T' : 'N', tb ? 'T' : 'N', s->m, s->n, s->k, 1.0f, a16, lda, b16, ldb, 0.0f, c, s->n);
}

int main(int argc, char **argv)
{
    int BT = argc > 1 ? atoi(argv[1]) : 2048;
    int threads = argc > 2 ? atoi(argv[2]) : omp_get_max_threads();
    int H = argc > 3 ? atoi(argv[3]) : 768;
    omp_set_num_threads(threads);
    impl ims[8];
    int ni = 0;
    void *h = dlopen("/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
    if (h) {
        const char *(*core)(void) = (const char *(*)(void))dlsym(h, "openblas_get_corename");
        void (*nt)(int) = (void (*)(int))dlsym(h, "openblas_set_num_threads");
        if (nt) nt(threads);
        static char name[64];
        snprintf(name, sizeof name, "openblas-%s", core ? core() : "?");
        ims[ni++] = (impl){name, (sgemm_fn)dlsym(h, "cblas_sgemm"), NULL, NULL};
    }
    h = dlopen("/usr/lib/x86_64-linux-gnu/blis-openmp/libblis.so.4", RTLD_NOW | RTLD_LOCAL);
    if (h) {
        void (*nt)(int64_t) = (void (*)(int64_t))dlsym(h, "bli_thread_set_num_threads");
        if (nt) nt(threads);
        ims[ni++] = (impl){"blis", (sgemm_fn)dlsym(h, "cblas_sgemm"), NULL, NULL};
    }
    h = dlopen("libdnnl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (h) {
        ims[ni++] = (impl){"onednn-f32", NULL, (dnnl_sgemm_fn)dlsym(h, "dnnl_sgemm"), NULL};
        ims[ni++] = (impl){"onednn-bf16", NULL, NULL, (dnnl_bf16_fn)dlsym(h, "dnnl_gemm_bf16bf16f32")};
    }
    const shape shapes[] = {
        {"qkv fwd", "NT", BT, 3 * H, H},  {"qkv dinp", "NN", BT, H, 3 * H},  {"qkv dw", "TN", 3 * H, H, BT},
        {"fc1 fwd", "NT", BT, 4 * H, H},  {"fc2 fwd", "NT", BT, H, 4 * H},    {"fc2 dw", "TN", H, 4 * H, BT},
        {"head fwd", "NT", BT, 50304, H}, {"head dinp", "NN", BT, H, 50304}, {"head dw", "TN", 50304, H, BT},
    };
    size_t maxe = (size_t)(BT > H ? BT : H) * 50304;
    float *a = malloc(maxe * 4), *b = malloc(maxe * 4), *c = malloc(maxe * 4);
    uint16_t *a16 = malloc(maxe * 2), *b16 = malloc(maxe * 2);
    for (size_t i = 0; i < maxe; i++) {
        a[i] = (float)((i * 7) % 13) * 0.01f - 0.06f;
        b[i] = (float)((i * 5) % 11) * 0.01f - 0.05f;
        a16[i] = to_bf16(a[i]);
        b16[i] = to_bf16(b[i]);
    }
    printf("GFLOP/s, BT=%d, H=%d, %d threads\n%-10s", BT, H, threads, "");
    for (int i = 0; i < ni; i++) printf(" %14s", ims[i].lib);
    printf("\n");
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        printf("%-10s", shapes[s].name);
        double fl = 2.0 * shapes[s].m * (double)shapes[s].n * shapes[s].k;
        for (int i = 0; i < ni; i++) {
            if (!ims[i].cblas && !ims[i].dsgemm && !ims[i].dbf16) {
                printf(" %14s", "-");
                continue;
            }
            double best = 1e30, t_start = now();
            int rc = 0;
            for (int r = 0; r < 6 && (r < 2 || now() - t_start < 1.5) && !rc; r++) {
                double t0 = now();
                rc = run(&ims[i], &shapes[s], a, b, a16, b16, c);
                double dt = now() - t0;
                if (r > 0 && dt < best) best = dt;
            }
            if (rc) printf(" %14s", "unsupported");
            else printf(" %14.1f", fl / best * 1e-9);
        }
        printf("\n");
        fflush(stdout);
    }
    return 0;
}
