/* Blend arithmetic after Megatron: weight normalisation in numpy's summation order and the
 * greedy max-error rule of build_blending_indices. See include/data/trident/gpt_dataset.h. */
#include <stdint.h>
#include <stdlib.h>

#include "trident/check.h"
#include "trident/gpt_dataset.h"

/* numpy's pairwise summation (what numpy.sum does on a contiguous float64 array): below 8
 * elements a plain loop; up to 128 eight interleaved partial sums combined as a tree; above,
 * two halves split at a multiple of 8. Reproduced so normalised weights match bit for bit. */
double gptds_np_sum(const double *a, int64_t n)
{
    if (n < 8) {
        double r = 0.0;
        for (int64_t i = 0; i < n; i++) r += a[i];
        return r;
    }
    if (n <= 128) {
        double r[8];
        for (int j = 0; j < 8; j++) r[j] = a[j];
        int64_t i = 8;
        for (; i < n - n % 8; i += 8)
            for (int j = 0; j < 8; j++) r[j] += a[i + j];
        double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++) res += a[i];
        return res;
    }
    int64_t half = n / 2;
    half -= half % 8;
    return gptds_np_sum(a, half) + gptds_np_sum(a + half, n - half);
}

void gptds_normalize(double *w, int n)
{
    double s = gptds_np_sum(w, n);
    for (int i = 0; i < n; i++) w[i] = w[i] / s;
}

void gptds_build_blend_indices(const double *weights, int n, int64_t size, int32_t *ds_index, int64_t *ds_sample)
{
    TD_ASSERT(n >= 1);
    int64_t *count = td_xcalloc((size_t)n, sizeof *count);
    for (int64_t k = 0; k < size; k++) {
        double x = k > 1 ? (double)k : 1.0;
        int best = 0;
        double best_err = weights[0] * x - (double)count[0];
        for (int j = 1; j < n; j++) {
            double err = weights[j] * x - (double)count[j];
            if (err > best_err) {
                best_err = err;
                best = j;
            }
        }
        ds_index[k] = best;
        ds_sample[k] = count[best]++;
    }
    free(count);
}
