/* The tensor-core attention kernels (src/backend/cuda/att_mma.cuh) run on host threads
 * (tests/gpu/cuemu.h: a thread a lane, mma.m16n8k16 by PTX's fragment layout), held to a
 * double-precision attention written here: forward (out, lse), the backward's D pass (by the
 * forward again, and from out a warp a row: am_delta_kernel, a third of the grid striding over the
 * rows), and dq, dk, dv accumulated into a buffer that already holds values. Causal, padded (BERT) and packed
 * documents; grouped-query heads; dropout by the CPU backend's Philox masks (cu_drop.h, which
 * unit/test_cuda_drop holds to the CPU's bit for bit); head sizes 64 and 128; bf16 and fp16;
 * sequence lengths that are not multiples of the tiles; q, k, v interleaved in one row as the
 * model's fused QKV, as 16-bit values or as fp32 ones (a --bf16 run's activations, rounded as the
 * tiles load). Runs everywhere, GPU or not: the fragment layouts, the masks and the tiling
 * are checked before a GPU ever runs them (tests/gpu/test_cuda_attention_moe.c then holds the
 * real kernels to the CPU backend on the device). */
#include "cuemu.h"

#include "backend/cuda/att_mma.cuh"

#include <stdio.h>
#include <stdlib.h>

#include <random>
#include <string>

enum { M_CAUSAL, M_PADDED, M_SEG };

struct tcase {
    const char *name;
    int B, T, NH, NKV, HS;
    bool bf;
    int mask;
    float p;  /* attention dropout */
    int odt;  /* out's dtype */
    float tol; /* max |err| / max |ref| per tensor */
    bool f32in; /* q, k, v handed over as fp32 (a --bf16 run's activations), rounded as the tiles load */
    bool odd;   /* q, k, v start 4 bytes past a 16-byte boundary: the tiles load 4 bytes (or an element)
                 * at a time, not 16 */
};

struct ref_out {
    std::vector<double> out, lse, D, dq, dk, dv;
};

/* Everything the kernels read, as the kernels read it (16-bit values widened exactly). */
struct inputs {
    int B, T, NH, NKV, HS, ld;
    std::vector<uint16_t> qkv;   /* (B, T, ld): q heads, then k, then v */
    std::vector<float> dout;     /* (B, T, NH HS) fp32 */
    std::vector<int32_t> klen, seg;
    std::vector<int64_t> sample;
    cu_drop dr;
};

static bool reads(const inputs &in, int mask, int b, int t, int j)
{
    if (mask == M_PADDED) {
        int n = in.klen[b] < 1 ? 1 : in.klen[b] > in.T ? in.T : in.klen[b];
        return j < n;
    }
    if (j > t) return false;
    if (mask == M_SEG) {
        int s = in.seg[(size_t)b * in.T + t];
        s = s < 0 ? 0 : s > t ? t : s;
        return j >= s;
    }
    return true;
}

static double mult_of(const inputs &in, int b, int h, int t, int j)
{
    if (!in.dr.on) return 1.0;
    int64_t unit = ((int64_t)in.dr.unit0 + h) * in.T + j;
    uint32_t r[4];
    cu_drop_block(r, (uint64_t)in.dr.k0 | (uint64_t)in.dr.k1 << 32, BE_DROP_ATTN, (int)in.dr.site, in.sample[b],
                  (int64_t)in.dr.pos0 + t, unit);
    return r[unit & 3] >= in.dr.thr ? (double)in.dr.keep : 0.0;
}

static ref_out reference(const inputs &in, int mask, bool bf)
{
    const int B = in.B, T = in.T, NH = in.NH, HS = in.HS, C = NH * HS, rep = NH / in.NKV;
    const double scale = 1.0 / sqrt((double)HS);
    auto q = [&](int b, int t, int h, int d) { return (double)cu_h2f(in.qkv[((size_t)b * T + t) * in.ld + h * HS + d], bf); };
    auto k = [&](int b, int t, int g, int d) {
        return (double)cu_h2f(in.qkv[((size_t)b * T + t) * in.ld + (NH + g) * HS + d], bf);
    };
    auto v = [&](int b, int t, int g, int d) {
        return (double)cu_h2f(in.qkv[((size_t)b * T + t) * in.ld + (NH + in.NKV + g) * HS + d], bf);
    };
    ref_out r;
    r.out.assign((size_t)B * T * C, 0.0);
    r.lse.assign((size_t)B * NH * T, 0.0);
    r.D.assign((size_t)B * NH * T, 0.0);
    r.dq.assign((size_t)B * T * C, 0.0);
    r.dk.assign((size_t)B * T * in.NKV * HS, 0.0);
    r.dv.assign((size_t)B * T * in.NKV * HS, 0.0);
    std::vector<double> P(T), M(T), dP(T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            int g = h / rep;
            for (int t = 0; t < T; t++) {
                double mx = -INFINITY;
                for (int j = 0; j < T; j++) {
                    P[j] = -INFINITY;
                    if (!reads(in, mask, b, t, j)) continue;
                    double s = 0.0;
                    for (int d = 0; d < HS; d++) s += q(b, t, h, d) * k(b, j, g, d);
                    P[j] = s * scale;
                    mx = P[j] > mx ? P[j] : mx;
                }
                double l = 0.0;
                for (int j = 0; j < T; j++) l += P[j] == -INFINITY ? 0.0 : exp(P[j] - mx);
                for (int j = 0; j < T; j++) {
                    P[j] = P[j] == -INFINITY ? 0.0 : exp(P[j] - mx) / l;
                    M[j] = P[j] != 0.0 ? mult_of(in, b, h, t, j) : 0.0;
                }
                r.lse[((size_t)b * NH + h) * T + t] = mx + log(l);
                const float *dor = &in.dout[((size_t)b * T + t) * C + h * HS];
                double Dt = 0.0;
                for (int d = 0; d < HS; d++) {
                    double o = 0.0;
                    for (int j = 0; j < T; j++) o += P[j] * M[j] * v(b, j, g, d);
                    r.out[((size_t)b * T + t) * C + h * HS + d] = o;
                    Dt += o * dor[d];
                }
                r.D[((size_t)b * NH + h) * T + t] = Dt;
                for (int j = 0; j < T; j++) {
                    if (P[j] == 0.0) continue;
                    double dpm = 0.0;
                    for (int d = 0; d < HS; d++) dpm += dor[d] * v(b, j, g, d);
                    double ds = P[j] * (dpm * M[j] - Dt);
                    for (int d = 0; d < HS; d++) {
                        r.dv[((size_t)b * T + j) * in.NKV * HS + g * HS + d] += P[j] * M[j] * dor[d];
                        r.dq[((size_t)b * T + t) * C + h * HS + d] += scale * ds * k(b, j, g, d);
                        r.dk[((size_t)b * T + j) * in.NKV * HS + g * HS + d] += scale * ds * q(b, t, h, d);
                    }
                }
            }
        }
    return r;
}

static int g_fail = 0;

/* max |got - want| over max |want|; fails the case above tol. */
template <class G> static void compare(const tcase &c, const char *what, size_t n, G got, const std::vector<double> &want)
{
    double emax = 0.0, wmax = 0.0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs(got(i) - want[i]);
        if (!(e <= emax)) emax = e, at = i; /* NaN counts as the worst */
        wmax = fabs(want[i]) > wmax ? fabs(want[i]) : wmax;
    }
    double rel = emax / (wmax > 0.0 ? wmax : 1.0);
    bool ok = rel <= c.tol;
    printf("  %-4s max err %.3g of max %.3g: %.3g relative%s\n", what, emax, wmax, rel,
           ok ? "" : "  <-- beyond the tolerance");
    if (!ok) {
        printf("    worst at %zu: got %.6g, want %.6g\n", at, (double)got(at), want[at]);
        g_fail++;
    }
}

template <int HS, bool BF> static void run_case(const tcase &c)
{
    printf("%s: B %d, T %d, heads %d over %d, head size %d, %s%s, %s, dropout %.2f\n", c.name, c.B, c.T, c.NH, c.NKV,
           HS, BF ? "bf16" : "fp16", c.f32in ? " (from fp32)" : "", c.mask == M_CAUSAL ? "causal" : c.mask == M_PADDED ? "padded" : "packed",
           (double)c.p);
    std::mt19937 rng(1234 + c.T * 7 + c.NH);
    std::uniform_real_distribution<float> U(-1.0f, 1.0f);
    inputs in;
    in.B = c.B, in.T = c.T, in.NH = c.NH, in.NKV = c.NKV, in.HS = HS;
    in.ld = (c.NH + 2 * c.NKV) * HS + 2 * HS; /* a row wider than its heads */
    const int C = c.NH * HS, T = c.T;
    in.qkv.resize((size_t)c.B * T * in.ld);
    for (auto &x : in.qkv) x = cu_f2h(1.5f * U(rng), BF);
    in.dout.resize((size_t)c.B * T * C);
    for (auto &x : in.dout) x = U(rng);
    in.klen.resize(c.B);
    for (int b = 0; b < c.B; b++) in.klen[b] = b == 0 ? T * 3 / 5 : T; /* one padded sample, one full */
    in.seg.resize((size_t)c.B * T);
    for (int b = 0; b < c.B; b++) /* documents starting at 0, 37, 70 and 101 (sample 1: one document) */
        for (int t = 0; t < T; t++) in.seg[(size_t)b * T + t] = b == 1 ? 0 : t >= 101 ? 101 : t >= 70 ? 70 : t >= 37 ? 37 : 0;
    in.sample = {5, 9, 11};
    in.dr.on = c.p > 0.0f;
    in.dr.thr = in.dr.on ? be_drop_threshold(c.p) : 0;
    in.dr.keep = in.dr.on ? 1.0f / (1.0f - c.p) : 1.0f;
    in.dr.k0 = 0x1234567u, in.dr.k1 = 0x9u;
    in.dr.site = 7;
    in.dr.pos0 = 0, in.dr.unit0 = 0;
    in.dr.sample = in.sample.data();

    att_args a;
    std::vector<float> qkvf; /* the same values widened (exact), for the fp32-input cases */
    std::vector<uint16_t> qkvo; /* the 16-bit values 4 bytes past a 16-byte boundary (odd) */
    const int sh = c.odd ? 2 : 0; /* odd: 16-bit elements past the vector's 16-byte aligned start */
    if (c.f32in) {
        qkvf.resize(in.qkv.size() + sh / 2);
        for (size_t i = 0; i < in.qkv.size(); i++) qkvf[i + sh / 2] = cu_h2f(in.qkv[i], BF);
        const float *q = qkvf.data() + sh / 2;
        a.q = q, a.k = q + C, a.v = q + C + c.NKV * HS;
        a.qdt = a.kdt = a.vdt = BE_F32;
    } else {
        qkvo.resize(in.qkv.size() + sh);
        std::copy(in.qkv.begin(), in.qkv.end(), qkvo.begin() + sh);
        const uint16_t *q = qkvo.data() + sh;
        a.q = q, a.k = q + C, a.v = q + C + c.NKV * HS;
        a.qdt = a.kdt = a.vdt = BF ? BE_BF16 : BE_F16;
    }
    a.ldq = a.ldkv = in.ld, a.B = c.B, a.T = T, a.NH = c.NH, a.NKV = c.NKV, a.HS = HS;
    a.klen = c.mask == M_PADDED ? in.klen.data() : NULL;
    a.seg = c.mask == M_SEG ? in.seg.data() : NULL;
    a.scale = 1.0f / sqrtf((float)HS);
    a.dr = in.dr;
    a.Tk = T, a.Tg = T;
    a.qpos = a.kpos = NULL;

    ref_out r = reference(in, c.mask, BF);

    size_t no = (size_t)c.B * T * C, nl = (size_t)c.B * c.NH * T;
    std::vector<unsigned char> out(no * 4);
    std::vector<float> lse(nl, NAN), D(nl, NAN);
    dim3 gq((T + AM_BQ - 1) / AM_BQ, c.NH, c.B), gk((T + AM_BK - 1) / AM_BK, c.NKV, c.B);
    void *outp = out.data();
    emu_launch(gq, AM_THREADS, am_smem_fwd(HS), [&] { am_fwd_kernel<HS, BF>(a, outp, c.odt, lse.data(), NULL, 0, NULL); });
    compare(c, "out", no, [&](size_t i) { return (double)cu_ld(outp, c.odt, i); }, r.out);
    compare(c, "lse", nl, [&](size_t i) { return (double)lse[i]; }, r.lse);
    emu_launch(gq, AM_THREADS, am_smem_fwd(HS),
               [&] { am_fwd_kernel<HS, BF>(a, NULL, 0, NULL, in.dout.data(), BE_F32, D.data()); });
    compare(c, "D", nl, [&](size_t i) { return (double)D[i]; }, r.D);
    /* D as training takes it: from the forward's out in its dtype, a warp a row (am_delta_kernel);
     * the backward below runs on this one */
    std::fill(D.begin(), D.end(), NAN);
    unsigned dblocks = (unsigned)((nl + AM_THREADS / 32 - 1) / (AM_THREADS / 32));
    emu_launch(dim3(dblocks > 3 ? dblocks / 3 : 1), AM_THREADS, 0, [&] {
        am_delta_kernel(D.data(), in.dout.data(), BE_F32, outp, c.odt, T, c.NH, HS, nl);
    });
    compare(c, "D from out", nl, [&](size_t i) { return (double)D[i]; }, r.D);

    /* gradients accumulate into a fp32 buffer shaped as qkv, already holding 0.25 */
    std::vector<float> g((size_t)c.B * T * in.ld, 0.25f);
    float *dq = g.data(), *dk = g.data() + C, *dv = g.data() + C + c.NKV * HS;
    emu_launch(gk, AM_THREADS, am_smem_kv(HS), [&] {
        am_bwd_kv_kernel<HS, BF>(a, dk, BE_F32, dv, BE_F32, in.dout.data(), BE_F32, lse.data(), D.data());
    });
    emu_launch(gq, AM_THREADS, am_smem_q(HS),
               [&] { am_bwd_q_kernel<HS, BF>(a, dq, BE_F32, in.dout.data(), BE_F32, lse.data(), D.data()); });
    auto at = [&](const float *p, int width) {
        return [=, &in](size_t i) {
            size_t row = i / width, col = i % width;
            return (double)p[row * in.ld + col] - 0.25;
        };
    };
    compare(c, "dq", no, at(dq, C), r.dq);
    compare(c, "dk", (size_t)c.B * T * c.NKV * HS, at(dk, c.NKV * HS), r.dk);
    compare(c, "dv", (size_t)c.B * T * c.NKV * HS, at(dv, c.NKV * HS), r.dv);
    /* the padding between the heads and the row's end is untouched */
    for (size_t row = 0; row < (size_t)c.B * T; row++)
        for (int col = C + 2 * c.NKV * HS; col < in.ld; col++)
            if (g[row * in.ld + col] != 0.25f) {
                printf("  a gradient was written past the heads: row %zu, column %d\n", row, col);
                g_fail++;
                return;
            }
}

int main(int argc, char **argv)
{
    (void)argc, (void)argv;
    const tcase cases[] = {
        {"causal", 2, 100, 2, 1, 64, true, M_CAUSAL, 0.0f, BE_F32, 2e-2f, false, false},
        {"padded+dropout", 2, 80, 2, 2, 128, false, M_PADDED, 0.2f, BE_F32, 5e-3f, false, false},
        {"packed+dropout", 2, 130, 4, 2, 64, false, M_SEG, 0.1f, BE_BF16, 1e-2f, false, false},
        {"causal fp16 out", 1, 64, 1, 1, 128, true, M_CAUSAL, 0.0f, BE_F16, 2e-2f, false, false},
        {"fp32 inputs, bf16 products", 2, 70, 2, 1, 64, true, M_CAUSAL, 0.1f, BE_F32, 2e-2f, true, false},
        {"fp32 inputs, padded", 2, 66, 2, 2, 128, true, M_PADDED, 0.0f, BE_F32, 2e-2f, true, false},
        {"unaligned rows", 2, 70, 2, 1, 64, true, M_CAUSAL, 0.0f, BE_F32, 2e-2f, false, true},
        {"unaligned fp32 rows", 1, 66, 2, 2, 128, true, M_SEG, 0.1f, BE_F32, 2e-2f, true, true},
    };
    for (const tcase &c : cases) {
        if (c.HS == 64 && c.bf) run_case<64, true>(c);
        else if (c.HS == 64) run_case<64, false>(c);
        else if (c.bf) run_case<128, true>(c);
        else run_case<128, false>(c);
    }
    if (g_fail) printf("FAILED: %d checks beyond their tolerance\n", g_fail);
    else printf("all passed\n");
    return g_fail ? 1 : 0;
}
