/* Compares two training runs: usage
 *   compare_runs METRICS_A METRICS_B PARAMS_A PARAMS_B TOL [NOISE]
 * Per iteration, lm_loss, grad_norm and lr (and val_loss, and BERT's sop_loss, where
 * either has them) must agree within TOL relative; the
 * parameter files (gathered, canonical float32) within TOL in relative norm of the difference.
 *
 * NOISE: the metrics of run A again with another build of the CPU kernels (TRIDENT_CPU_ISA=
 * baseline: other vector widths and FMA contraction, so other rounding in every kernel). Its
 * differences from A are the float32 noise of this model's training, as it shows after the
 * optimizer has amplified it; each key's tolerance is then the larger of TOL and NOISE_FACTOR
 * times that key's largest relative difference over the iterations.
 *
 * Why the grad norm needs this (issue 21): it agrees to ~1e-8 at iteration 1 in every layout,
 * so its reduction across tp/pp is not the cause. From the first step on, Adam's update
 * lr * g / (|g| + eps) turns the float noise of gradients near eps into parameter differences
 * (up to 5e-5 per element measured; with --adam-eps 1e-5 they shrink 70x) and the grad norm
 * answers them with a heavy tail that depends on the model: the Llama-shaped layouts reach 3-5e-6
 * at iteration 3 in Release (1.2e-5 seen under ASan on another machine), the GPT-2 ones ~2e-8;
 * the one-rank Llama run under another kernel build alone gives 1.7e-6 (baseline) and 5.1e-6
 * (AVX2), GPT-2 under 4e-8; dropping any one Llama feature (RMSNorm, rotary, SwiGLU, GQA, no
 * biases, untied output) lowers it 4-50x, no single one is the cause.
 *
 * Prints one line per check and "N passed, M failed". */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#define MAXIT 4096

/* The per-iteration values compared; a run missing one where the other has it fails. A JSON
 * null (a value that was not finite: a skipped fp16 step's grad norm) agrees only with a null. */
static const char *const KEYS[] = {"lm_loss", "grad_norm", "lr", "val_loss", "sop_loss"};
#define NKEYS 5
#define FIRST_OPTIONAL 3 /* keys from here on may be missing from both runs */
/* How far above the measured noise a layout may land: over the layout matrix the largest
 * difference was 3x the baseline-kernel run's (Llama tp2 x pp2 x vp2, 5.1e-6 against 1.7e-6),
 * and a single sample of a heavy-tailed noise can sit below its typical size: 10x. A real fault
 * (a gradient missed, counted twice, or unscaled) moves the grad norm by 1e-3 or more. */
#define NOISE_FACTOR 10.0

#define NULL_VALUE (-INFINITY) /* a JSON null; missing is NaN */

static int read_metrics(const char *path, double (*v)[NKEYS], int *n)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "compare_runs: cannot open %s\n", path);
        return -1;
    }
    char line[8192];
    *n = 0;
    while (fgets(line, sizeof line, f) && *n < MAXIT) {
        cJSON *o = cJSON_Parse(line);
        if (!o) {
            fprintf(stderr, "compare_runs: %s: line %d is not JSON\n", path, *n + 1);
            fclose(f);
            return -1;
        }
        for (int k = 0; k < NKEYS; k++) {
            cJSON *x = cJSON_GetObjectItem(o, KEYS[k]);
            v[*n][k] = cJSON_IsNumber(x) ? x->valuedouble : cJSON_IsNull(x) ? NULL_VALUE : NAN;
        }
        (*n)++;
        cJSON_Delete(o);
    }
    fclose(f);
    return 0;
}

static double rel_diff(double x, double y) { return x == y ? 0 : fabs(x - y) / fabs(x); }

/* tol[k] = max(base, NOISE_FACTOR x the largest relative difference of key k between the
 * reference run a and the noise run over the iterations both have). */
static void noise_tolerances(double (*a)[NKEYS], int na, double (*noise)[NKEYS], int nn, double base, double tol[NKEYS])
{
    for (int k = 0; k < NKEYS; k++) {
        double worst = 0;
        for (int i = 0; i < na && i < nn; i++) {
            double d = rel_diff(a[i][k], noise[i][k]);
            if (!isnan(d) && d > worst) worst = d;
        }
        tol[k] = fmax(base, NOISE_FACTOR * worst);
        if (tol[k] > base)
            printf("%s: tolerance %.2e, %.0f x the noise %.2e of the reference under other kernels\n", KEYS[k],
                   tol[k], NOISE_FACTOR, worst);
    }
}

static float *read_floats(const char *path, long *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long bytes = ftell(f);
    fseek(f, 0, SEEK_SET);
    float *p = malloc((size_t)bytes + 4);
    *n = (long)(fread(p, 1, (size_t)bytes, f) / sizeof(float));
    fclose(f);
    return p;
}

int main(int argc, char **argv)
{
    if (argc != 6 && argc != 7) {
        fprintf(stderr, "usage: compare_runs METRICS_A METRICS_B PARAMS_A PARAMS_B TOL [NOISE_METRICS]\n");
        return 2;
    }
    double tol = atof(argv[5]), ktol[NKEYS];
    static double a[MAXIT][NKEYS], b[MAXIT][NKEYS], noise[MAXIT][NKEYS];
    int na, nb, nn, pass = 0, fail = 0;
    if (read_metrics(argv[1], a, &na) || read_metrics(argv[2], b, &nb)) return 1;
    for (int k = 0; k < NKEYS; k++) ktol[k] = tol;
    if (argc == 7) {
        if (read_metrics(argv[6], noise, &nn)) return 1;
        if (nn != na) {
            printf("the noise run has %d iterations, the reference %d\n", nn, na);
            fail++;
        }
        noise_tolerances(a, na, noise, nn, tol, ktol);
    }
    if (na != nb || na == 0) {
        printf("iteration count differs: %d vs %d\n", na, nb);
        fail++;
    }
    for (int i = 0; i < na && i < nb; i++)
        for (int k = 0; k < NKEYS; k++) {
            double x = a[i][k], y = b[i][k];
            if (k >= FIRST_OPTIONAL && isnan(x) && isnan(y)) continue; /* no validation this iteration, or GPT */
            double rel = rel_diff(x, y); /* null == null: 0; null against a number: NaN */
            int ok = !isnan(rel) && rel <= ktol[k]; /* a value missing on one side is NaN: fails */
            char xs[32], ys[32];
            snprintf(xs, sizeof xs, x == NULL_VALUE ? "null" : "%.9g", x);
            snprintf(ys, sizeof ys, y == NULL_VALUE ? "null" : "%.9g", y);
            printf("iteration %d: %s %s vs %s (relative %.2e) %s\n", i + 1, KEYS[k], xs, ys, rel, ok ? "ok" : "FAIL");
            ok ? pass++ : fail++;
        }
    long pa, pb;
    float *A = read_floats(argv[3], &pa), *B = read_floats(argv[4], &pb);
    if (!A || !B || pa != pb || pa == 0) {
        printf("parameter files missing or of different sizes (%ld vs %ld floats)\n", A ? pa : -1, B ? pb : -1);
        fail++;
    } else {
        double d = 0, s = 0;
        for (long i = 0; i < pa; i++) {
            d += ((double)A[i] - B[i]) * ((double)A[i] - B[i]);
            s += (double)A[i] * A[i];
        }
        double rel = sqrt(d / s);
        int ok = rel <= tol;
        printf("parameters: %ld values, relative norm of the difference %.2e %s\n", pa, rel, ok ? "ok" : "FAIL");
        ok ? pass++ : fail++;
    }
    free(A);
    free(B);
    printf("%d passed, %d failed\n", pass, fail);
    return fail ? 1 : 0;
}
