/* Attention of new queries over a key/value cache, for generation: see attention_kv_fwd in
 * be_ops.h. One (row, head, query) per task; the scores of one query in per-thread scratch. */
#include <math.h>
#include <omp.h>

#include "cpu.h"

void cpu_attention_kv_fwd(const backend *be, float *out, const float *q, const float *kc, const float *vc, int ldq,
                          int B, int n, int pos0, int cap, int NH, int NKV, int HS)
{
    const int C = NH * HS, ldkv = NKV * HS, per = NH / NKV;
    const float scale = 1.0f / sqrtf((float)HS);
    const int64_t tasks = (int64_t)B * NH * n;
    double macs = (double)tasks * (pos0 + n) * HS * 2;
#pragma omp parallel num_threads(cpu_threads(be)) if (macs > CPU_PAR_MIN_MACS)
    {
        float *s = cpu_scratch(0, (size_t)(pos0 + n) * sizeof(float));
#pragma omp for schedule(static)
        for (int64_t t = 0; t < tasks; t++) {
            int i = (int)(t % n), h = (int)(t / n % NH), b = (int)(t / n / NH), g = h / per;
            int L = pos0 + i + 1; /* keys 0 .. pos0 + i */
            const float *qi = q + ((size_t)b * n + i) * ldq + (size_t)h * HS;
            const float *kb = kc + (size_t)b * cap * ldkv + (size_t)g * HS;
            const float *vb = vc + (size_t)b * cap * ldkv + (size_t)g * HS;
            float mx = -INFINITY;
            for (int j = 0; j < L; j++) {
                const float *kj = kb + (size_t)j * ldkv;
                float d = 0.0f;
#pragma omp simd reduction(+ : d)
                for (int e = 0; e < HS; e++) d += qi[e] * kj[e];
                s[j] = d * scale;
                mx = s[j] > mx ? s[j] : mx;
            }
            float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
            for (int j = 0; j < L; j++) {
                s[j] = cpu_expf(s[j] - mx);
                sum += s[j];
            }
            float *o = out + ((size_t)b * n + i) * C + (size_t)h * HS;
            for (int e = 0; e < HS; e++) o[e] = 0.0f;
            for (int j = 0; j < L; j++) {
                const float *vj = vb + (size_t)j * ldkv;
                float p = s[j] / sum;
#pragma omp simd
                for (int e = 0; e < HS; e++) o[e] += p * vj[e];
            }
        }
    }
}
