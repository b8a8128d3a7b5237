/* Compares two training runs: usage
 *   compare_runs METRICS_A METRICS_B PARAMS_A PARAMS_B TOL
 * Per iteration, lm_loss, grad_norm and lr (and val_loss, and BERT's sop_loss, where
 * either has them) must agree within TOL relative; the
 * parameter files (gathered, canonical float32) within TOL in relative norm of the difference.
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
    if (argc != 6) {
        fprintf(stderr, "usage: compare_runs METRICS_A METRICS_B PARAMS_A PARAMS_B TOL\n");
        return 2;
    }
    double tol = atof(argv[5]);
    static double a[MAXIT][NKEYS], b[MAXIT][NKEYS];
    int na, nb, pass = 0, fail = 0;
    if (read_metrics(argv[1], a, &na) || read_metrics(argv[2], b, &nb)) return 1;
    if (na != nb || na == 0) {
        printf("iteration count differs: %d vs %d\n", na, nb);
        fail++;
    }
    for (int i = 0; i < na && i < nb; i++)
        for (int k = 0; k < NKEYS; k++) {
            double x = a[i][k], y = b[i][k];
            if (k >= FIRST_OPTIONAL && isnan(x) && isnan(y)) continue; /* no validation this iteration, or GPT */
            double rel = x == y ? 0 : fabs(x - y) / fabs(x); /* null == null: 0; null against a number: NaN */
            int ok = !isnan(rel) && rel <= tol; /* a value missing on one side is NaN: fails */
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
