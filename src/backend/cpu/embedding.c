/* Embeddings: a vocab-parallel word-table lookup (ids outside the local slice give zeros; the
 * parallel code all-reduces) and replicated learned positions. */
#include <string.h>

#include "cpu.h"

void cpu_embedding_fwd(const backend *be, float *out, const int32_t *ids, const float *wte, int BT, int C,
                       int vstart, int Vloc)
{
#pragma omp parallel for schedule(static) num_threads(cpu_threads(be)) if ((size_t)BT * C > CPU_PAR_MIN)
    for (int i = 0; i < BT; i++) {
        float *y = out + (size_t)i * C;
        int64_t r = (int64_t)ids[i] - vstart;
        if (r >= 0 && r < Vloc)
            memcpy(y, wte + (size_t)r * C, (size_t)C * sizeof(float));
        else
            memset(y, 0, (size_t)C * sizeof(float));
    }
}

/* Threads own blocks of columns and walk the tokens in order: no races on repeated ids, and
 * the sums do not depend on the thread count. */
void cpu_embedding_bwd(const backend *be, float *dwte, const float *dout, const int32_t *ids, int BT, int C,
                       int vstart, int Vloc)
{
    int nblk = (C + CPU_LINE - 1) / CPU_LINE;
#pragma omp parallel for schedule(static) num_threads(cpu_threads(be)) if ((size_t)BT * C > CPU_PAR_MIN)
    for (int blk = 0; blk < nblk; blk++) {
        int c0 = blk * CPU_LINE, w = C - c0 < CPU_LINE ? C - c0 : CPU_LINE;
        for (int i = 0; i < BT; i++) {
            int64_t r = (int64_t)ids[i] - vstart;
            if (r < 0 || r >= Vloc) continue;
            float *dw = dwte + (size_t)r * C + c0;
            const float *dy = dout + (size_t)i * C + c0;
            for (int j = 0; j < w; j++) dw[j] += dy[j];
        }
    }
}

void cpu_pos_embedding_fwd(const backend *be, float *out, const float *wpe, int B, int T, int C, int pos0)
{
    int rows = B * T;
#pragma omp parallel for schedule(static) num_threads(cpu_threads(be)) if ((size_t)rows * C > CPU_PAR_MIN)
    for (int row = 0; row < rows; row++) {
        float *y = out + (size_t)row * C;
        const float *p = wpe + (size_t)(pos0 + row % T) * C;
        for (int c = 0; c < C; c++) y[c] += p[c];
    }
}

void cpu_pos_embedding_bwd(const backend *be, float *dwpe, const float *dout, int B, int T, int C, int pos0)
{
#pragma omp parallel for schedule(static) num_threads(cpu_threads(be)) if ((size_t)B * T * C > CPU_PAR_MIN)
    for (int t = 0; t < T; t++) {
        float *dp = dwpe + (size_t)(pos0 + t) * C;
        for (int b = 0; b < B; b++) {
            const float *dy = dout + ((size_t)b * T + t) * C;
            for (int c = 0; c < C; c++) dp[c] += dy[c];
        }
    }
}
