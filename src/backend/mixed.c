/* The linear layer's entry points (be_matmul_fwd/bwd and their typed-input forms): fp32 straight
 * to the vtable, or, with a gemm dtype set, mixed precision: multiplying in that dtype from the
 * weights' low-precision copies (see backend.h). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "trident/activation.h"
#include "trident/check.h"
#include "backend.h"

#define LOWP_RANGES 64   /* weight buffers: one per model chunk */
#define LOWP_SLOTS 8192  /* weights tracked; a power of two */

struct be_lowp {
    struct {
        const float *base;
        size_t n;
        uint16_t *copy; /* n elements in the gemm dtype */
    } range[LOWP_RANGES];
    int nranges;
    uint64_t gen; /* bumped by be_lowp_invalidate; a copy made in an older one is stale */
    struct {
        const float *w;
        size_t n;
        uint64_t gen;
    } made[LOWP_SLOTS]; /* open addressing on w: when each weight's copy was made */
    void *scratch[3];   /* inputs, output gradients, a weight outside every range */
    size_t scratch_bytes[3];
};

void be_set_gemm_dtype(backend *be, be_dtype dt)
{
    TD_CHECK(!be->lowp || dt == be->gemm_dtype, "set the GEMM dtype once, before registering weights",
             "gemm dtype changed from %s to %s", be_dtype_name(be->gemm_dtype), be_dtype_name(dt));
    be->gemm_dtype = dt;
    if (dt != BE_F32 && !be->lowp) {
        be->lowp = td_xcalloc(1, sizeof *be->lowp);
        be->lowp->gen = 1;
    }
}

void be_lowp_register(const backend *be, const float *base, size_t n)
{
    struct be_lowp *l = be->lowp;
    if (!l || n == 0) return;
    /* a buffer freed and allocated again may come back at the same place: drop what overlaps it */
    for (int i = 0; i < l->nranges; i++)
        if (base < l->range[i].base + l->range[i].n && l->range[i].base < base + n) {
            be_dfree(be, l->range[i].copy);
            l->range[i--] = l->range[--l->nranges];
        }
    memset(l->made, 0, sizeof l->made);
    l->gen++;
    TD_CHECK(l->nranges < LOWP_RANGES, "use fewer model chunks per rank", "more than %d weight buffers",
             LOWP_RANGES);
    l->range[l->nranges].base = base;
    l->range[l->nranges].n = n;
    l->range[l->nranges].copy = be_alloc(be, n * be_dtype_size(be->gemm_dtype));
    l->nranges++;
}

void be_lowp_invalidate(const backend *be)
{
    if (be->lowp) be->lowp->gen++;
}

size_t be_lowp_bytes(const backend *be)
{
    const struct be_lowp *l = be->lowp;
    if (!l) return 0;
    size_t b = 0;
    for (int i = 0; i < l->nranges; i++) b += l->range[i].n * be_dtype_size(be->gemm_dtype);
    for (int i = 0; i < 3; i++) b += l->scratch_bytes[i];
    return b;
}

static void *lowp_scratch(const backend *be, int slot, size_t bytes)
{
    struct be_lowp *l = be->lowp;
    if (l->scratch_bytes[slot] < bytes) {
        be_dfree(be, l->scratch[slot]);
        l->scratch[slot] = be_alloc(be, bytes);
        l->scratch_bytes[slot] = bytes;
    }
    return l->scratch[slot];
}

/* x (n floats) rounded into scratch slot `slot`. */
static const void *lowp_input(const backend *be, int slot, const float *x, size_t n)
{
    void *d = lowp_scratch(be, slot, n * be_dtype_size(be->gemm_dtype));
    be_convert(be, d, be->gemm_dtype, x, BE_F32, n);
    return d;
}
static be_in lowp_typed(const backend *be, const void *p)
{
    be_in x = {p, be->gemm_dtype};
    return x;
}

/* A GEMM input in the gemm dtype: as it is, or rounded into scratch slot `slot`. */
static be_in lowp_in(const backend *be, int slot, be_in x, size_t n)
{
    if (x.dt == be->gemm_dtype) return x;
    TD_CHECK(x.dt == BE_F32, "keep activations in fp32 or in the GEMMs' dtype", "a %s GEMM input in a %s run",
             be_dtype_name(x.dt), be_dtype_name(be->gemm_dtype));
    return lowp_typed(be, lowp_input(be, slot, x.p, n));
}

/* The copy of weight w (n floats): in its range's copy, made now if stale; a weight in no range
 * is rounded into scratch at every call. */
static const void *lowp_weight(const backend *be, const float *w, size_t n)
{
    struct be_lowp *l = be->lowp;
    for (int i = 0; i < l->nranges; i++) {
        if (w < l->range[i].base || w + n > l->range[i].base + l->range[i].n) continue;
        void *copy = (char *)l->range[i].copy + (size_t)(w - l->range[i].base) * be_dtype_size(be->gemm_dtype);
        size_t h = (size_t)(((uintptr_t)w >> 2) * 0x9E3779B97F4A7C15ull >> 40) & (LOWP_SLOTS - 1);
        for (int probe = 0; probe < LOWP_SLOTS; probe++, h = (h + 1) & (LOWP_SLOTS - 1)) {
            if (l->made[h].w == w && l->made[h].n == n) {
                if (l->made[h].gen != l->gen) {
                    be_convert(be, copy, be->gemm_dtype, w, BE_F32, n);
                    l->made[h].gen = l->gen;
                }
                return copy;
            }
            if (!l->made[h].w) {
                be_convert(be, copy, be->gemm_dtype, w, BE_F32, n);
                l->made[h].w = w;
                l->made[h].n = n;
                l->made[h].gen = l->gen;
                return copy;
            }
        }
        break; /* table full: convert into scratch */
    }
    return lowp_input(be, 2, w, n);
}

static void matmul_fwd_mixed(const backend *be, float *out, be_in inp, const float *w, const float *b, int BT, int C,
                             int OC)
{
    if (BT <= 0 || OC <= 0) return;
    const void *wl = lowp_weight(be, w, (size_t)OC * C);
    be_in il = lowp_in(be, 0, inp, (size_t)BT * C);
    be_event t0 = be_tic(be);
    be->ops->matmul_fwd_lp(be, be_f32_out(out), il, wl, b, be->gemm_dtype, BT, C, OC);
    be_toc(be, BE_OP_GEMM, t0, 2.0 * BT * C * OC);
}

/* The backward in slices of rows when the rounded output gradient would pass be_lowp_chunk_bytes
 * (an LM head's: tokens x vocabulary): the scratch stays bounded, and each slice's products are
 * still large GEMMs. dW then sums the slices' products in order. A device has the memory for
 * larger slices, and each slice costs its dW a pass over the fp32 gradient of the weight (an LM
 * head's: vocabulary x hidden), which 64 MiB slices would repeat 25 times at GPT-2 124M's
 * micro-batch of 16 x 1024: 1 GiB there (2 slices). */
#define LOWP_CHUNK_BYTES ((size_t)64 << 20)
#define LOWP_CHUNK_BYTES_DEVICE ((size_t)1 << 30)

size_t be_lowp_chunk_bytes(const backend *be) { return be->device >= 0 ? LOWP_CHUNK_BYTES_DEVICE : LOWP_CHUNK_BYTES; }

/* The cross-entropy's backward feeding an LM head's GEMMs (be_ce_head_bwd): each slice of the
 * output gradient is made by ce_bwd_to straight in the gemm dtype instead of rounded from fp32. */
typedef struct ce_src {
    be_in logits;
    const float *maxv, *sumexp, *dloss;
    const int32_t *targets;
    int Vreal, vstart;
} ce_src;

/* dout's rows [r0, r0 + n) in the gemm dtype: dout's own when it is in that dtype, else in scratch
 * slot 1, rounded from fp32 dout or made by ce_bwd_to from the logits (ce set: dout unused). */
static be_in bwd_dout_slice(const backend *be, be_in dout, const ce_src *ce, int r0, int n, int OC)
{
    if (!ce && dout.dt == be->gemm_dtype)
        return lowp_typed(be, (const char *)dout.p + (size_t)r0 * OC * be_dtype_size(dout.dt));
    if (!ce) {
        TD_CHECK(dout.dt == BE_F32, "keep output gradients in fp32 or in the GEMMs' dtype",
                 "a %s output gradient in a %s run", be_dtype_name(dout.dt), be_dtype_name(be->gemm_dtype));
        return lowp_typed(be, lowp_input(be, 1, (const float *)dout.p + (size_t)r0 * OC, (size_t)n * OC));
    }
    void *d = lowp_scratch(be, 1, (size_t)n * OC * be_dtype_size(be->gemm_dtype));
    be_out o = {d, be->gemm_dtype};
    be_event t0 = be_tic(be);
    be_in l = ce->logits;
    l.p = (const char *)l.p + (size_t)r0 * OC * be_dtype_size(l.dt);
    be->ops->ce_bwd_to(be, o, l, ce->maxv + r0, ce->sumexp + r0, ce->targets + r0, ce->dloss + r0, n, OC, ce->Vreal,
                       ce->vstart);
    be_toc(be, BE_OP_CROSSENTROPY, t0, 0);
    return lowp_typed(be, d);
}

/* The rows of a slice of the backward's rounded output gradient (be_lowp_chunk_bytes). */
static int bwd_slice_rows(const backend *be, int BT, int OC)
{
    size_t row = (size_t)OC * be_dtype_size(be->gemm_dtype), chunk = be_lowp_chunk_bytes(be);
    int rows = (size_t)BT * row > chunk ? (int)(chunk / row) : BT;
    return rows < 256 ? (BT < 256 ? BT : 256) : rows;
}

static void matmul_bwd_mixed(const backend *be, float *dinp, float *dw, float *db, be_in dout, const ce_src *ce,
                             be_in inp, const float *w, int BT, int C, int OC)
{
    if (BT <= 0 || OC <= 0) return;
    be_dtype dt = be->gemm_dtype;
    int rows = bwd_slice_rows(be, BT, OC), gemms = dinp || dw;
    const void *rounded = NULL; /* fp32 dout rounded for the GEMMs by bias_bwd_to, in the pass of its db */
    if (db) {
        be_event t0 = be_tic(be);
        if (gemms && !ce && dout.dt == BE_F32 && rows >= BT && be->ops->bias_bwd_to) {
            void *d = lowp_scratch(be, 1, (size_t)BT * OC * be_dtype_size(dt));
            be_out r = {d, dt};
            be->ops->bias_bwd_to(be, db, r, dout, BT, OC);
            rounded = d;
        } else {
            be->ops->bias_bwd(be, db, dout, BT, OC);
        }
        be_toc(be, BE_OP_RESIDUAL, t0, 0);
    }
    if (!gemms) return;
    const void *wl = dinp ? lowp_weight(be, w, (size_t)OC * C) : NULL;
    for (int r0 = 0; r0 < BT; r0 += rows) {
        int n = BT - r0 < rows ? BT - r0 : rows;
        be_in dl = rounded ? lowp_typed(be, rounded) : bwd_dout_slice(be, dout, ce, r0, n, OC);
        be_in il = lowp_typed(be, NULL);
        if (dw) {
            be_in part = inp;
            part.p = (const char *)inp.p + (size_t)r0 * C * be_dtype_size(inp.dt);
            il = lowp_in(be, 0, part, (size_t)n * C);
        }
        be_event t0 = be_tic(be);
        be->ops->matmul_bwd_lp(be, be_f32_out(dinp ? dinp + (size_t)r0 * C : NULL), dw, dl, il, wl, dt, n, C, OC);
        be_toc(be, BE_OP_GEMM, t0, 2.0 * n * C * OC * ((dinp != NULL) + (dw != NULL)));
    }
}

void be_lowp_free(backend *be)
{
    struct be_lowp *l = be->lowp;
    if (!l) return;
    for (int i = 0; i < l->nranges; i++) be_dfree(be, l->range[i].copy);
    for (int i = 0; i < 3; i++) be_dfree(be, l->scratch[i]);
    free(l);
    be->lowp = NULL;
}

void be_matmul_fwd_in(const backend *be, float *out, be_in inp, const float *w, const float *b, int BT, int C,
                      int OC)
{
    if (be->gemm_dtype != BE_F32) {
        matmul_fwd_mixed(be, out, inp, w, b, BT, C, OC);
        return;
    }
    be_event t0 = be_tic(be);
    be->ops->matmul_fwd(be, be_f32_out(out), inp, w, b, BT, C, OC);
    be_toc(be, BE_OP_GEMM, t0, 2.0 * BT * C * OC);
}

void be_matmul_bwd_in(const backend *be, float *dinp, float *dw, float *db, const float *dout, be_in inp,
                      const float *w, int BT, int C, int OC)
{
    if (be->gemm_dtype != BE_F32) {
        matmul_bwd_mixed(be, dinp, dw, db, be_f32(dout), NULL, inp, w, BT, C, OC);
        return;
    }
    double f = 2.0 * BT * C * OC * ((dinp != NULL) + (dw != NULL));
    be_event t0 = be_tic(be);
    be->ops->matmul_bwd(be, be_f32_out(dinp), dw, db, be_f32(dout), inp, w, BT, C, OC);
    be_toc(be, BE_OP_GEMM, t0, f);
}

void be_ce_head_bwd(const backend *be, float *dinp, float *dw, be_out logits, const float *maxv,
                    const float *sumexp, const int32_t *targets, const float *dloss, be_in inp, const float *w, int BT,
                    int C, int Vloc, int Vreal, int vstart)
{
    if (be->gemm_dtype != BE_F32 && be->ops->ce_bwd_to) {
        be_in l = {logits.p, logits.dt};
        ce_src ce = {l, maxv, sumexp, dloss, targets, Vreal, vstart};
        matmul_bwd_mixed(be, dinp, dw, NULL, be_f32(NULL), &ce, inp, w, BT, C, Vloc);
        return;
    }
    TD_CHECK(logits.dt == BE_F32, "keep the logits in fp32 where the backend has no ce_bwd_to",
             "%s logits and no out-of-place cross-entropy backward", be_dtype_name(logits.dt));
    be_ce_bwd(be, logits.p, maxv, sumexp, targets, dloss, BT, Vloc, Vreal, vstart);
    be_matmul_bwd_in(be, dinp, dw, NULL, logits.p, inp, w, BT, C, Vloc);
}

void be_matmul_bwd_lpout(const backend *be, float *dinp, float *dw, float *db, be_in dout, be_in inp, const float *w,
                         int BT, int C, int OC)
{
    if (dout.dt == BE_F32) {
        be_matmul_bwd_in(be, dinp, dw, db, dout.p, inp, w, BT, C, OC);
        return;
    }
    TD_CHECK(dout.dt == be->gemm_dtype, "pass a 16-bit output gradient in the run's GEMM dtype",
             "a %s output gradient in a %s run", be_dtype_name(dout.dt), be_dtype_name(be->gemm_dtype));
    matmul_bwd_mixed(be, dinp, dw, db, dout, NULL, inp, w, BT, C, OC);
}

int be_matmul_gelu_fwd(const backend *be, void *act, void *pre, be_in inp, const float *w, const float *b, int BT,
                       int C, int OC)
{
    be_dtype dt = be->gemm_dtype;
    if (dt == BE_F32 || !be->ops->matmul_gelu_fwd_lp || BT <= 0 || OC <= 0) return 0;
    const void *wl = lowp_weight(be, w, (size_t)OC * C);
    be_in il = lowp_in(be, 0, inp, (size_t)BT * C);
    be_out a = {act, dt}, p = {pre, dt};
    be_event t0 = be_tic(be);
    int done = be->ops->matmul_gelu_fwd_lp(be, a, p, il, wl, b, dt, BT, C, OC);
    be_toc(be, BE_OP_GEMM, t0, done ? 2.0 * BT * C * OC : 0.0);
    return done;
}

void be_matmul_dgelu_bwd(const backend *be, void *dpre, float *tmp, float *dw, const float *dout, be_in act,
                         const float *w, const void *pre, int BT, int C, int OC)
{
    be_dtype dt = be->gemm_dtype;
    if (BT <= 0 || OC <= 0) return;
    int rows = bwd_slice_rows(be, BT, OC), fused = be->ops->matmul_dgelu_bwd_lp != NULL;
    const void *wl = lowp_weight(be, w, (size_t)OC * C);
    size_t es = be_dtype_size(dt);
    for (int r0 = 0; r0 < BT; r0 += rows) {
        int n = BT - r0 < rows ? BT - r0 : rows;
        be_in dl = bwd_dout_slice(be, be_f32(dout), NULL, r0, n, OC);
        be_in part = act;
        part.p = (const char *)act.p + (size_t)r0 * C * be_dtype_size(act.dt);
        be_event t0;
        if (dw) {
            be_in il = lowp_in(be, 0, part, (size_t)n * C);
            t0 = be_tic(be);
            be->ops->matmul_bwd_lp(be, be_f32_out(NULL), dw, dl, il, NULL, dt, n, C, OC);
            be_toc(be, BE_OP_GEMM, t0, 2.0 * n * C * OC);
        }
        if (fused) {
            be_out d = {(char *)dpre + (size_t)r0 * C * es, dt};
            be_in pr = {(const char *)pre + (size_t)r0 * C * es, dt};
            t0 = be_tic(be);
            fused = be->ops->matmul_dgelu_bwd_lp(be, d, dl, wl, pr, dt, n, C, OC);
            be_toc(be, BE_OP_GEMM, t0, fused ? 2.0 * n * C * OC : 0.0);
            if (fused) continue;
        }
        /* refused: the input gradient in fp32 into tmp, then GeLU's derivative at pre */
        float *t = tmp + (size_t)r0 * C;
        be_zero(be, t, (size_t)n * C);
        t0 = be_tic(be);
        be->ops->matmul_bwd_lp(be, be_f32_out(t), NULL, dl, lowp_typed(be, NULL), wl, dt, n, C, OC);
        be_toc(be, BE_OP_GEMM, t0, 2.0 * n * C * OC);
        be_out d = {(char *)dpre + (size_t)r0 * C * es, dt};
        be->ops->set_bytes(be, d.p, 0, (size_t)n * C * es);
        be_in pr = {(const char *)pre + (size_t)r0 * C * es, dt};
        t0 = be_tic(be);
        be->ops->act_bwd(be, TD_ACT_GELU, 0, d, be_f32(t), pr, n, C);
        be_toc(be, BE_OP_GELU, t0, 0);
    }
}

void be_matmul_fwd_to(const backend *be, be_out out, be_in inp, const float *w, const float *b, int BT, int C, int OC)
{
    if (out.dt == BE_F32) {
        be_matmul_fwd_in(be, out.p, inp, w, b, BT, C, OC);
        return;
    }
    TD_CHECK(out.dt == be->gemm_dtype && be_acts_in(be, out.dt), "write a GEMM's 16-bit output only where the backend takes 16-bit activations",
             "a %s GEMM output in a %s run", be_dtype_name(out.dt), be_dtype_name(be->gemm_dtype));
    if (BT <= 0 || OC <= 0) return;
    const void *wl = lowp_weight(be, w, (size_t)OC * C);
    be_in il = lowp_in(be, 0, inp, (size_t)BT * C);
    be_event t0 = be_tic(be);
    be->ops->matmul_fwd_lp(be, out, il, wl, b, be->gemm_dtype, BT, C, OC);
    be_toc(be, BE_OP_GEMM, t0, 2.0 * BT * C * OC);
}

void be_matmul_fwd(const backend *be, float *out, const float *inp, const float *w, const float *b, int BT, int C,
                   int OC)
{
    be_matmul_fwd_in(be, out, be_f32(inp), w, b, BT, C, OC);
}

void be_matmul_bwd(const backend *be, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                   const float *w, int BT, int C, int OC)
{
    be_matmul_bwd_in(be, dinp, dw, db, dout, be_f32(inp), w, BT, C, OC);
}

static int64_t rows_of(const int32_t *counts, int G)
{
    int64_t n = 0;
    for (int g = 0; g < G; g++) n += counts[g];
    return n;
}

void be_matmul_grouped_fwd(const backend *be, float *out, const float *inp, const float *w, const float *b,
                           const int32_t *counts, int G, int C, int OC)
{
    if (be->gemm_dtype == BE_F32 && be->ops->matmul_grouped_fwd) {
        be_event t0 = be_tic(be);
        be->ops->matmul_grouped_fwd(be, out, inp, w, b, counts, G, C, OC);
        be_toc(be, BE_OP_GEMM, t0, 2.0 * (double)rows_of(counts, G) * C * OC);
        return;
    }
    for (int g = 0, r = 0; g < G; r += counts[g++])
        if (counts[g])
            be_matmul_fwd(be, out + (size_t)r * OC, inp + (size_t)r * C, w + (size_t)g * OC * C,
                          b ? b + (size_t)g * OC : NULL, counts[g], C, OC);
}

void be_matmul_grouped_bwd(const backend *be, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                           const float *w, const int32_t *counts, int G, int C, int OC)
{
    if (be->gemm_dtype == BE_F32 && be->ops->matmul_grouped_bwd) {
        be_event t0 = be_tic(be);
        be->ops->matmul_grouped_bwd(be, dinp, dw, db, dout, inp, w, counts, G, C, OC);
        be_toc(be, BE_OP_GEMM, t0, 2.0 * (double)rows_of(counts, G) * C * OC * ((dinp != NULL) + (dw != NULL)));
        return;
    }
    for (int g = 0, r = 0; g < G; r += counts[g++])
        if (counts[g])
            be_matmul_bwd(be, dinp ? dinp + (size_t)r * C : NULL, dw ? dw + (size_t)g * OC * C : NULL,
                          db ? db + (size_t)g * OC : NULL, dout + (size_t)r * OC, inp + (size_t)r * C,
                          w + (size_t)g * OC * C, counts[g], C, OC);
}
