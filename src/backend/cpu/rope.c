/* Rotary position embedding, "rotate half" (Hugging Face Llama, Megatron non-interleaved): pairs
 * (i, i + rot/2) of the first rot dims of each head turn by (pos0 + t) * inv_freq_i, or by
 * pos[b T + t] * inv_freq_i when a position array is given (packed documents).
 *
 * The angles follow Hugging Face's float32 computation, so that a model trained there sees the
 * same rotations here: inv_freq as the caller gives it (float32: without rope scaling
 * 1 / base^(arange(0, rot, 2) / rot), every step in float32, the power correctly rounded); angle = float32(position) * inv_freq rounded to float32; cos and sin of
 * that float32 angle computed in double and rounded (torch's float32 cos is within an ulp of that).
 * At position 4096 the float32 angle differs from the exact one by up to about 2e-4 rad: that
 * rounding is the reference's, not an error here.
 *
 * cos and sin are then multiplied by r->scale (YaRN's attention factor) in float32.
 *
 * The (position, i) cos/sin table is a pure function of (rot, r); the calling thread keeps the
 * last one, positions [0, npos), and grows or rebuilds it when a call needs more or other. Rows
 * are rotated in parallel; every element is computed alone, so results do not depend on the
 * thread count. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "trident/check.h"
#include "cpu.h"

static _Thread_local struct {
    float *tab; /* (npos, 2, r2): cos of row p at tab[2 p r2 + i], sin at tab[(2 p + 1) r2 + i] */
    int npos, rot;
    be_rope r;
} g_rope;

/* The first rot/2 frequencies and the scale of a and b are the same. */
static int same_rope(const be_rope *a, const be_rope *b, int rot)
{
    return a->scale == b->scale && memcmp(a->inv_freq, b->inv_freq, (size_t)(rot / 2) * sizeof(float)) == 0;
}

/* The table of positions [0, npos) for (rot, r), built or reused. */
static const float *rope_table(const backend *be, int npos, int rot, const be_rope *r)
{
    if (g_rope.tab && g_rope.rot == rot && same_rope(&g_rope.r, r, rot) && g_rope.npos >= npos) return g_rope.tab;
    int r2 = rot / 2;
    free(g_rope.tab);
    g_rope.tab = NULL;
    void *p = NULL;
    size_t bytes = (size_t)npos * 2 * r2 * sizeof(float);
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0)
        td_die(__FILE__, __LINE__, "posix_memalign", "reduce the sequence length",
               "cannot allocate %zu bytes of rotary tables", bytes);
    float *tab = p, sc = r->scale;
    const float *inv = r->inv_freq;
#pragma omp parallel for schedule(static) num_threads(cpu_threads(be)) if ((size_t)npos * r2 > CPU_PAR_MIN_EXP / 8)
    for (int pos = 0; pos < npos; pos++) {
        float *c = tab + (size_t)pos * 2 * r2, *s = c + r2;
        for (int i = 0; i < r2; i++) {
            float a = (float)pos * inv[i];
            c[i] = (float)cos((double)a) * sc;
            s[i] = (float)sin((double)a) * sc;
        }
    }
    g_rope.tab = tab, g_rope.npos = npos, g_rope.rot = rot, g_rope.r = *r;
    return tab;
}

/* x rotated by sgn * angle in place (sgn = 1 forward, -1 the transpose). */
static void rope_apply(const backend *be, float *x, int B, int T, int ld, int nh, int hs, int rot, const be_rope *r,
                       int pos0, const int32_t *pos, float sgn)
{
    TD_ASSERT(rot > 0 && rot % 2 == 0 && rot <= hs && rot / 2 <= BE_ROPE_MAX_HALF && nh * hs <= ld && pos0 >= 0 &&
              (!pos || pos0 == 0));
    if (B <= 0 || T <= 0 || nh <= 0) return;
    int r2 = rot / 2, npos = pos0 + T;
    if (pos) /* packed documents' positions lie in [0, T); context parallelism's chunks anywhere in the sequence */
        for (int bt = 0; bt < B * T; bt++) npos = pos[bt] >= npos ? pos[bt] + 1 : npos;
    const float *tab = rope_table(be, npos, rot, r);
#pragma omp parallel for schedule(static) num_threads(cpu_threads(be)) if ((size_t)B * T * nh * rot > CPU_PAR_MIN)
    for (int bt = 0; bt < B * T; bt++) {
        int p = pos ? pos[bt] : pos0 + bt % T;
        TD_ASSERT(p >= 0 && p < npos);
        const float *c = tab + (size_t)p * 2 * r2, *s = c + r2;
        float *row = x + (size_t)bt * ld;
        for (int h = 0; h < nh; h++) {
            float *x1 = row + (size_t)h * hs, *x2 = x1 + r2;
#pragma omp simd
            for (int i = 0; i < r2; i++) {
                float a = x1[i], b = x2[i], si = sgn * s[i];
                x1[i] = a * c[i] - b * si;
                x2[i] = b * c[i] + a * si;
            }
        }
    }
}

void cpu_rope_fwd(const backend *be, float *x, int B, int T, int ld, int nh, int hs, int rot, const be_rope *r, int pos0,
                  const int32_t *pos)
{
    rope_apply(be, x, B, T, ld, nh, hs, rot, r, pos0, pos, 1.0f);
}

void cpu_rope_bwd(const backend *be, float *dx, int B, int T, int ld, int nh, int hs, int rot, const be_rope *r, int pos0,
                  const int32_t *pos)
{
    rope_apply(be, dx, B, T, ld, nh, hs, rot, r, pos0, pos, -1.0f);
}
