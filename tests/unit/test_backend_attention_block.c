/* src/backend/cpu/attention.c, the context-parallel entries: attention_block_fwd (a block of
 * queries against a block of keys, by global position) against a double-precision reference
 * over fully visible, diagonal, partly visible and invisible blocks, load-balanced chunks, GQA on
 * strided rows, padding (klen), packed documents (seg) and dropout; attention_merge and
 * attention_delta against hand-worked numbers; and the load-balanced chunking of Megatron's
 * context parallelism (rank i holding chunks i and 2C-1-i, C = 2 and 4): each rank's queries
 * against every rank's keys, merged, equal attention_fwd on the whole sequence, and the sum of
 * attention_block_bwd over the key blocks equals attention_bwd, with and without dropout. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "test_backend_util.h"

static int setup(void **state)
{
    *state = be_create("cpu", 2);
    return 0;
}

static int teardown(void **state)
{
    be_free(*state);
    return 0;
}

/* One block call: q rows (B, Tq), k, v rows (B, Tk) at the given global positions. */
typedef struct {
    const double *q, *k, *v;
    int ldq, ldkv, B, Tq, Tk, Tg, NH, NKV, HS;
    const int32_t *qpos, *kpos, *klen, *seg;
    const be_drop *drop;
} blk_ctx;

/* Does query row i of sample b read key j (the contract's masks, by global position)? */
static int reads(const blk_ctx *c, int b, int i, int j)
{
    int p = c->qpos[i], kp = c->kpos[j];
    if (c->klen) return kp < c->klen[b];
    return kp <= p && (!c->seg || kp >= c->seg[(size_t)b * c->Tq + i]);
}

/* out (B, Tq, NH HS), lse (B, NH, Tq) of the block in double: softmax over the keys a row reads
 * in this block, then the dropout multiplier of (sample, query position, (unit0 + h) Tg + key
 * position); rows reading none: out 0, lse -inf. */
static void blk_ref(const blk_ctx *c, double *out, double *lse)
{
    int C = c->NH * c->HS, HS = c->HS;
    double *s = td_xmalloc((size_t)(c->Tk ? c->Tk : 1) * sizeof(double));
    for (int b = 0; b < c->B; b++)
        for (int h = 0; h < c->NH; h++)
            for (int i = 0; i < c->Tq; i++) {
                int g = h / (c->NH / c->NKV);
                const double *q = c->q + ((size_t)b * c->Tq + i) * c->ldq + h * HS;
                double m = -INFINITY, sum = 0.0, *o = out + ((size_t)b * c->Tq + i) * C + h * HS;
                for (int j = 0; j < c->Tk; j++) {
                    if (!reads(c, b, i, j)) continue;
                    const double *k = c->k + ((size_t)b * c->Tk + j) * c->ldkv + g * HS;
                    double d = 0.0;
                    for (int e = 0; e < HS; e++) d += q[e] * k[e];
                    s[j] = d / sqrt((double)HS);
                    m = s[j] > m ? s[j] : m;
                }
                for (int j = 0; j < c->Tk; j++)
                    if (reads(c, b, i, j)) sum += exp(s[j] - m);
                lse[((size_t)b * c->NH + h) * c->Tq + i] = sum > 0 ? m + log(sum) : -INFINITY;
                for (int e = 0; e < HS; e++) o[e] = 0.0;
                for (int j = 0; j < c->Tk; j++) {
                    if (!reads(c, b, i, j)) continue;
                    double p = exp(s[j] - m) / sum;
                    const be_drop *dr = c->drop;
                    if (dr && dr->p > 0)
                        p *= be_drop_keep(dr, BE_DROP_ATTN, dr->sample[b], dr->pos0 + c->qpos[i],
                                          ((int64_t)dr->unit0 + h) * c->Tg + c->kpos[j])
                                 ? 1.0 / (1.0 - dr->p)
                                 : 0.0;
                    const double *v = c->v + ((size_t)b * c->Tk + j) * c->ldkv + g * HS;
                    for (int e = 0; e < HS; e++) o[e] += p * v[e];
                }
            }
    free(s);
}

/* lse against the reference: -inf exactly where the reference has it, the rest within tol. */
static void check_lse(const char *name, const float *got, const double *want, size_t n, double tol)
{
    float *g = tb_copy(got, n);
    double *w = td_xmalloc(n * sizeof(double));
    int ninf = 0;
    for (size_t i = 0; i < n; i++) {
        assert_true(isinf(want[i]) == isinf(got[i]) && (!isinf(got[i]) || got[i] < 0));
        ninf += isinf(want[i]) != 0;
        w[i] = isinf(want[i]) ? 0.0 : want[i];
        g[i] = isinf(got[i]) ? 0.0f : got[i];
    }
    printf("  %s: %d of %zu rows read no key (lse -inf)\n", name, ninf, n);
    TB_CLOSE(name, g, w, n, tol);
    free(g), free(w);
}

/* The positions of a [p0, p0 + n) range into pos. */
static int32_t *range_of(int32_t *pos, int p0, int n)
{
    for (int i = 0; i < n; i++) pos[i] = p0 + i;
    return pos;
}

/* One block call against the reference: random q (padded rows of ldq = NH HS + pad), k, v. */
static void check_block(const backend *be, int B, int Tq, int Tk, int Tg, const int32_t *qpos, const int32_t *kpos,
                        int NH, int NKV, int HS, int pad, const int32_t *klen, const int32_t *seg, const be_drop *drop,
                        const char *what)
{
    int C = NH * HS, ldq = C + pad, ldkv = NKV * HS + pad;
    size_t nq = (size_t)B * Tq * ldq, nkv = (size_t)B * Tk * ldkv, nout = (size_t)B * Tq * C, nl = (size_t)B * NH * Tq;
    float *q = tb_rand_new(nq, 90, -1.5f, 1.5f), *k = tb_rand_new(nkv ? nkv : 1, 91, -1.5f, 1.5f);
    float *v = tb_rand_new(nkv ? nkv : 1, 92, -1, 1), *out = tb_rand_new(nout, 93, -9, 9), *lse = tb_zeros(nl);
    double *qd = tb_dup(q, nq), *kd = tb_dup(k, nkv), *vd = tb_dup(v, nkv);
    double *ref = td_xmalloc(nout * sizeof(double)), *lref = td_xmalloc(nl * sizeof(double));
    blk_ctx c = {qd, kd, vd, ldq, ldkv, B, Tq, Tk, Tg, NH, NKV, HS, qpos, kpos, klen, seg, drop};
    be_attention_block_fwd(be, out, lse, q, k, v, ldq, ldkv, B, Tq, Tk, Tg, qpos, kpos, NH, NKV, HS, klen, seg, drop);
    blk_ref(&c, ref, lref);
    char name[96];
    snprintf(name, sizeof name, "block fwd %s", what);
    TB_CLOSE(name, out, ref, nout, 1e-5);
    snprintf(name, sizeof name, "block lse %s", what);
    check_lse(name, lse, lref, nl, 1e-5);
    free(q), free(k), free(v), free(out), free(lse), free(qd), free(kd), free(vd), free(ref), free(lref);
}

/* Blocks of a causal sequence of 12: fully visible (queries after every key), the diagonal,
 * partly visible (some rows read none), invisible (every row reads none), the load-balanced
 * chunks of C = 2 (positions 0-2 and 9-11) against the middle; GQA on padded rows. */
static void block_causal(void **state)
{
    const backend *be = *state;
    int32_t qp[8], kp[8];
    check_block(be, 2, 4, 4, 12, range_of(qp, 8, 4), range_of(kp, 0, 4), 4, 2, 3, 1, NULL, NULL, NULL, "(visible)");
    check_block(be, 2, 4, 4, 12, range_of(qp, 4, 4), range_of(kp, 4, 4), 4, 2, 3, 1, NULL, NULL, NULL, "(diagonal)");
    check_block(be, 2, 6, 6, 12, range_of(qp, 3, 6), range_of(kp, 5, 6), 4, 2, 3, 2, NULL, NULL, NULL, "(partly)");
    check_block(be, 2, 4, 4, 12, range_of(qp, 0, 4), range_of(kp, 6, 4), 4, 1, 3, 0, NULL, NULL, NULL, "(invisible)");
    const int32_t lq[6] = {0, 1, 2, 9, 10, 11}, lk[6] = {3, 4, 5, 6, 7, 8};
    check_block(be, 2, 6, 6, 12, lq, lk, 4, 2, 3, 1, NULL, NULL, NULL, "(chunks 0,3 vs 1,2)");
    check_block(be, 2, 6, 6, 12, lk, lq, 4, 4, 3, 0, NULL, NULL, NULL, "(chunks 1,2 vs 0,3)");
    check_block(be, 2, 6, 6, 12, lq, lq, 2, 1, 5, 3, NULL, NULL, NULL, "(chunks 0,3 vs 0,3)");
}

/* More query rows than the kernel's row block (64), keys in two separate runs. */
static void block_long(void **state)
{
    int32_t qp[80], kp[70];
    range_of(qp, 0, 40), range_of(qp + 40, 120, 40); /* chunks 0 and 3 of 160 */
    range_of(kp, 30, 35), range_of(kp + 35, 100, 35);
    const int64_t sample[1] = {17};
    be_drop drop = {.p = 0.25f, .seed = 8, .sample = sample, .site = 3, .pos0 = 0, .unit0 = 2};
    check_block(*state, 1, 80, 70, 160, qp, kp, 2, 1, 4, 1, NULL, NULL, NULL, "(Tq 80, two runs)");
    check_block(*state, 1, 80, 70, 160, qp, kp, 2, 1, 4, 1, NULL, NULL, &drop, "(Tq 80, two runs, p 0.25)");
}

/* Bidirectional with padding: keys at positions < klen[b], whatever the query's position. */
static void block_padding(void **state)
{
    const backend *be = *state;
    const int32_t klen[2] = {7, 12}, lq[6] = {0, 1, 2, 9, 10, 11}, lk[6] = {3, 4, 5, 6, 7, 8};
    int32_t kp[4];
    check_block(be, 2, 6, 6, 12, lq, lk, 4, 2, 3, 1, klen, NULL, NULL, "(klen, chunks)");
    check_block(be, 2, 6, 4, 12, lq, range_of(kp, 8, 4), 4, 2, 3, 1, klen, NULL, NULL, "(klen, past sample 0)");
    const int64_t sample[2] = {4, 5};
    be_drop drop = {.p = 0.3f, .seed = 2, .sample = sample, .site = 7, .pos0 = 0, .unit0 = 0};
    check_block(be, 2, 6, 6, 12, lk, lq, 4, 4, 3, 0, klen, NULL, &drop, "(klen, p 0.3)");
}

/* Packed documents: query rows read keys from their document's (global) start. */
static void block_packed(void **state)
{
    const backend *be = *state;
    /* documents [0, 4), [4, 10), [10, 12) in sample 0; [0, 12) in sample 1 */
    const int32_t lq[6] = {0, 1, 2, 9, 10, 11}, lk[6] = {3, 4, 5, 6, 7, 8};
    const int32_t seg[2 * 6] = {0, 0, 0, 4, 10, 10, 0, 0, 0, 0, 0, 0};
    check_block(be, 2, 6, 6, 12, lq, lk, 4, 2, 3, 1, NULL, seg, NULL, "(seg, chunks 0,3 vs 1,2)");
    const int32_t seg2[2 * 6] = {0, 4, 4, 4, 4, 4, 0, 0, 0, 0, 0, 0}; /* rows at 3..8 */
    const int64_t sample[2] = {1, 2};
    be_drop drop = {.p = 0.3f, .seed = 6, .sample = sample, .site = 1, .pos0 = 0, .unit0 = 1};
    check_block(be, 2, 6, 6, 12, lk, lq, 4, 2, 3, 1, NULL, seg2, &drop, "(seg, p 0.3)");
}

/* The whole sequence as one block (positions 0..T-1 both) is attention_fwd, bit for bit: the
 * same scores, softmax and dropout mask (so the block entry draws its mask by global position
 * exactly as attention_fwd does). */
static void block_whole_is_attention_fwd(void **state)
{
    const backend *be = *state;
    enum { B = 2, T = 70, NH = 4, NKV = 2, HS = 4, C = NH * HS, LDKV = NKV * HS };
    const int64_t sample[B] = {3, 9};
    be_drop drop = {.p = 0.2f, .seed = 5, .sample = sample, .site = 2, .pos0 = 0, .unit0 = 3};
    const int32_t klen[B] = {33, 70};
    int32_t pos[T], seg[B * T];
    range_of(pos, 0, T);
    for (int t = 0; t < T; t++) seg[t] = t < 20 ? 0 : t < 50 ? 20 : 50, seg[T + t] = 0;
    float *q = tb_rand_new(B * T * C, 94, -1, 1), *k = tb_rand_new(B * T * LDKV, 95, -1, 1);
    float *v = tb_rand_new(B * T * LDKV, 96, -1, 1);
    float *o1 = tb_zeros(B * T * C), *o2 = tb_zeros(B * T * C), *l1 = tb_zeros(B * NH * T), *l2 = tb_zeros(B * NH * T);
    for (int m = 0; m < 3; m++) {
        const int32_t *kl = m == 1 ? klen : NULL, *sg = m == 2 ? seg : NULL;
        be_attention_fwd_seg(be, o1, l1, q, k, v, C, LDKV, B, T, NH, NKV, HS, kl, sg, &drop);
        be_attention_block_fwd(be, o2, l2, q, k, v, C, LDKV, B, T, T, T, pos, pos, NH, NKV, HS, kl, sg, &drop);
        assert_memory_equal(o1, o2, sizeof(float) * B * T * C);
        assert_memory_equal(l1, l2, sizeof(float) * B * NH * T);
    }
    printf("  block fwd over the whole sequence: attention_fwd's out and lse bit for bit (causal, klen, seg, p 0.2)\n");
    free(q), free(k), free(v), free(o1), free(o2), free(l1), free(l2);
}

/* attention_merge against hand-worked numbers: (1, log 1) and (3, log 3) -> log 4 and
 * 1/4 * 1 + 3/4 * 3 = 2.5; a -inf side changes nothing or hands over the other; two -inf stay. */
static void merge_by_hand(void **state)
{
    const backend *be = *state;
    /* B 1, T 4, NH 1, HS 2: rows (acc, part) = (finite, finite), (finite, -inf), (-inf, finite), (-inf, -inf) */
    float out[8] = {1, -2, 5, 6, 0, 0, 0, 0}, lse[4] = {0.0f, 1.5f, -INFINITY, -INFINITY};
    const float op[8] = {3, 4, 7, 7, 8, -9, 1, 1}, lp[4] = {logf(3.0f), -INFINITY, 0.25f, -INFINITY};
    be_attention_merge(be, out, lse, op, lp, 1, 4, 1, 2);
    assert_true(fabsf(out[0] - 2.5f) < 1e-6f && fabsf(out[1] - 2.5f) < 1e-6f); /* -2/4 + 4*3/4 */
    assert_true(fabsf(lse[0] - logf(4.0f)) < 1e-6f);
    assert_true(out[2] == 5 && out[3] == 6 && lse[1] == 1.5f);
    assert_true(out[4] == 8 && out[5] == -9 && lse[2] == 0.25f);
    assert_true(out[6] == 0 && out[7] == 0 && isinf(lse[3]) && lse[3] < 0);
    /* large lse apart: no overflow (e^100 is past fp32) */
    float o2[2] = {1, 1}, l2[1] = {100.0f};
    const float p2[2] = {3, 3}, q2[1] = {100.0f + logf(3.0f)};
    be_attention_merge(be, o2, l2, p2, q2, 1, 1, 1, 2);
    assert_true(fabsf(o2[0] - 2.5f) < 1e-5f && fabsf(l2[0] - (100.0f + logf(4.0f))) < 1e-5f);
    /* delta: rowsum per head of dout * out, (B 1, T 2, NH 2, HS 2), D (1, 2, 2) = [h][t] */
    const float dout[8] = {1, 2, 3, 4, 5, 6, 7, 8}, ov[8] = {1, 1, 2, 0, -1, 1, 0.5f, 0.5f};
    float D[4];
    be_attention_delta(be, D, dout, ov, 1, 2, 2, 2);
    assert_true(D[0] == 3 && D[1] == 1 && D[2] == 6 && D[3] == 7.5f);
    printf("  attention_merge and attention_delta: hand-worked values, -inf on either side\n");
}

/* The load-balanced context-parallel layout: Tg = 2 C L, rank i's rows are chunks i and
 * 2C-1-i of each sample. */
typedef struct {
    int C, L, Tq;   /* Tq = 2 L local rows */
    int32_t *pos;   /* (C, 2L) each rank's global positions */
} cp_layout;

static cp_layout cp_of(int C, int L)
{
    cp_layout l = {C, L, 2 * L, td_xmalloc((size_t)C * 2 * L * sizeof(int32_t))};
    for (int r = 0; r < C; r++) {
        range_of(l.pos + (size_t)r * 2 * L, r * L, L);
        range_of(l.pos + (size_t)r * 2 * L + L, (2 * C - 1 - r) * L, L);
    }
    return l;
}

/* dst (B, n, w) = rows pos[0..n) of each sample of src (B, Tg, ld), columns [0, w); back: the
 * reverse (dst into src's rows, added when add). */
static void gather_rows(float *dst, const float *src, int B, int Tg, int ld, const int32_t *pos, int n, int w)
{
    for (int b = 0; b < B; b++)
        for (int i = 0; i < n; i++)
            memcpy(dst + ((size_t)b * n + i) * w, src + ((size_t)b * Tg + pos[i]) * ld, (size_t)w * sizeof(float));
}
static void scatter_rows(float *dst, const float *src, int B, int Tg, int ld, const int32_t *pos, int n, int w)
{
    for (int b = 0; b < B; b++)
        for (int i = 0; i < n; i++)
            for (int e = 0; e < w; e++) dst[((size_t)b * Tg + pos[i]) * ld + e] += src[((size_t)b * n + i) * w + e];
}
/* lse (B, NH, Tq) of a rank into the whole's (B, NH, Tg). */
static void scatter_lse(float *dst, const float *src, int B, int NH, int Tg, const int32_t *pos, int n)
{
    for (int bh = 0; bh < B * NH; bh++)
        for (int i = 0; i < n; i++) dst[(size_t)bh * Tg + pos[i]] = src[(size_t)bh * n + i];
}

/* Every rank's queries against every rank's keys in ring order (its own first, then ranks
 * i-1, i-2, ...), merged; the backward with the merged lse and D; the whole put back together
 * and held to attention_fwd / attention_bwd on the whole sequence. */
static void check_cp(const backend *be, int B, int C, int L, int NH, int NKV, int HS, const int32_t *klen,
                     const int32_t *seg, const be_drop *drop, const char *what)
{
    cp_layout cl = cp_of(C, L);
    int Tg = 2 * C * L, Tq = cl.Tq, D = NH * HS, KV = NKV * HS;
    size_t nq = (size_t)B * Tg * D, nkv = (size_t)B * Tg * KV, nl = (size_t)B * NH * Tg;
    float *q = tb_rand_new(nq, 97, -1.5f, 1.5f), *k = tb_rand_new(nkv, 98, -1.5f, 1.5f);
    float *v = tb_rand_new(nkv, 99, -1, 1), *dout = tb_rand_new(nq, 100, -1, 1);
    float *out = tb_zeros(nq), *lse = tb_zeros(nl), *dq = tb_zeros(nq), *dk = tb_zeros(nkv), *dv = tb_zeros(nkv);
    be_attention_fwd_seg(be, out, lse, q, k, v, D, KV, B, Tg, NH, NKV, HS, klen, seg, drop);
    be_attention_bwd_seg(be, dq, dk, dv, dout, q, k, v, lse, D, KV, B, Tg, NH, NKV, HS, klen, seg, drop);
    int32_t *rseg = seg ? td_xmalloc((size_t)C * B * 2 * L * sizeof(int32_t)) : NULL; /* (C, B, Tq) */
    for (int r = 0; seg && r < C; r++)
        for (int b = 0; b < B; b++)
            for (int i = 0; i < 2 * L; i++)
                rseg[((size_t)r * B + b) * 2 * L + i] = seg[(size_t)b * Tg + cl.pos[(size_t)r * 2 * L + i]];

    size_t lq = (size_t)B * Tq * D, lkv = (size_t)B * Tq * KV, ll = (size_t)B * NH * Tq;
    float *cq = tb_zeros(nq), *ck = tb_zeros(nkv), *cv = tb_zeros(nkv), *cout = tb_zeros(nq), *clse = tb_zeros(nl);
    float *cdq = tb_zeros(nq), *cdk = tb_zeros(nkv), *cdv = tb_zeros(nkv);
    float *rq = tb_zeros(C * lq), *rk = tb_zeros(C * lkv), *rv = tb_zeros(C * lkv), *rdo = tb_zeros(C * lq);
    float *ro = tb_zeros(C * lq), *rl = tb_zeros(C * ll), *po = tb_zeros(lq), *pl = tb_zeros(ll), *rD = tb_zeros(ll);
    float *rdq = tb_zeros(C * lq), *rdk = tb_zeros(C * lkv), *rdv = tb_zeros(C * lkv);
    for (int r = 0; r < C; r++) { /* each rank's own rows */
        const int32_t *p = cl.pos + (size_t)r * Tq;
        gather_rows(rq + r * lq, q, B, Tg, D, p, Tq, D);
        gather_rows(rdo + r * lq, dout, B, Tg, D, p, Tq, D);
        gather_rows(rk + r * lkv, k, B, Tg, KV, p, Tq, KV);
        gather_rows(rv + r * lkv, v, B, Tg, KV, p, Tq, KV);
    }
    for (int r = 0; r < C; r++) { /* forward: the ring, its own block first */
        float *o = ro + r * lq, *l = rl + r * ll;
        for (int s = 0; s < C; s++) {
            int j = ((r - s) % C + C) % C;
            be_attention_block_fwd(be, s ? po : o, s ? pl : l, rq + r * lq, rk + j * lkv, rv + j * lkv, D, KV, B, Tq,
                                   Tq, Tg, cl.pos + (size_t)r * Tq, cl.pos + (size_t)j * Tq, NH, NKV, HS, klen,
                                   seg ? rseg + (size_t)r * B * Tq : NULL, drop);
            if (s) be_attention_merge(be, o, l, po, pl, B, Tq, NH, HS);
        }
        scatter_rows(cout, o, B, Tg, D, cl.pos + (size_t)r * Tq, Tq, D);
        scatter_lse(clse, l, B, NH, Tg, cl.pos + (size_t)r * Tq, Tq);
    }
    for (int r = 0; r < C; r++) { /* backward: the global lse and D; dk, dv into the key block's owner */
        be_attention_delta(be, rD, rdo + r * lq, ro + r * lq, B, Tq, NH, HS);
        for (int s = 0; s < C; s++) {
            int j = ((r - s) % C + C) % C;
            be_attention_block_bwd(be, rdq + r * lq, rdk + j * lkv, rdv + j * lkv, rdo + r * lq, rq + r * lq,
                                   rk + j * lkv, rv + j * lkv, rl + r * ll, rD, D, KV, B, Tq, Tq, Tg,
                                   cl.pos + (size_t)r * Tq, cl.pos + (size_t)j * Tq, NH, NKV, HS, klen,
                                   seg ? rseg + (size_t)r * B * Tq : NULL, drop);
        }
    }
    for (int r = 0; r < C; r++) {
        const int32_t *p = cl.pos + (size_t)r * Tq;
        scatter_rows(cdq, rdq + r * lq, B, Tg, D, p, Tq, D);
        scatter_rows(cdk, rdk + r * lkv, B, Tg, KV, p, Tq, KV);
        scatter_rows(cdv, rdv + r * lkv, B, Tg, KV, p, Tq, KV);
    }
    double *want = td_xmalloc(nq * sizeof(double));
    char name[96];
#define CP_CLOSE(label, got, ref, n, tol)                                                                  \
    do {                                                                                                   \
        for (size_t i_ = 0; i_ < (n); i_++) want[i_] = (ref)[i_];                                          \
        snprintf(name, sizeof name, "cp %s %s", label, what);                                              \
        TB_CLOSE(name, got, want, n, tol);                                                                 \
    } while (0)
    CP_CLOSE("out", cout, out, nq, 1e-5);
    CP_CLOSE("lse", clse, lse, nl, 1e-5);
    CP_CLOSE("dq", cdq, dq, nq, 1e-5);
    CP_CLOSE("dk", cdk, dk, nkv, 1e-5);
    CP_CLOSE("dv", cdv, dv, nkv, 1e-5);
#undef CP_CLOSE
    free(want), free(cl.pos), free(q), free(k), free(v), free(dout), free(out), free(lse), free(dq), free(dk);
    free(dv), free(cq), free(ck), free(cv), free(cout), free(clse), free(cdq), free(cdk), free(cdv), free(rq);
    free(rk), free(rv), free(rdo), free(ro), free(rl), free(po), free(pl), free(rD), free(rdq), free(rdk);
    free(rdv), free(rseg);
}

static void cp_causal(void **state)
{
    check_cp(*state, 2, 2, 5, 4, 2, 4, NULL, NULL, NULL, "(C2 L5 GQA)");
    check_cp(*state, 2, 4, 3, 4, 4, 4, NULL, NULL, NULL, "(C4 L3)");
    check_cp(*state, 1, 2, 40, 2, 1, 8, NULL, NULL, NULL, "(C2 L40: Tq 80)");
}

static void cp_dropout(void **state)
{
    const int64_t sample[2] = {12, 1000000000007LL};
    be_drop drop = {.p = 0.3f, .seed = 41, .sample = sample, .site = 6, .pos0 = 0, .unit0 = 2};
    check_cp(*state, 2, 2, 5, 4, 2, 4, NULL, NULL, &drop, "(C2 L5 p 0.3)");
    check_cp(*state, 2, 4, 3, 4, 2, 4, NULL, NULL, &drop, "(C4 L3 p 0.3)");
}

static void cp_bidirectional(void **state)
{
    const int32_t klen[2] = {9, 20};
    const int64_t sample[2] = {5, 6};
    be_drop drop = {.p = 0.2f, .seed = 3, .sample = sample, .site = 1, .pos0 = 0, .unit0 = 0};
    check_cp(*state, 2, 2, 5, 4, 2, 4, klen, NULL, NULL, "(C2 klen)");
    check_cp(*state, 2, 2, 5, 4, 2, 4, klen, NULL, &drop, "(C2 klen p 0.2)");
}

/* Packed documents across the chunks: documents [0, 7), [7, 15), [15, 24) of sample 0 and one
 * document in sample 1, so every rank's rows start documents in other ranks' chunks. */
static void cp_packed(void **state)
{
    int32_t seg[2 * 24];
    for (int t = 0; t < 24; t++) seg[t] = t < 7 ? 0 : t < 15 ? 7 : 15, seg[24 + t] = 0;
    const int64_t sample[2] = {8, 9};
    be_drop drop = {.p = 0.25f, .seed = 13, .sample = sample, .site = 2, .pos0 = 0, .unit0 = 1};
    check_cp(*state, 2, 2, 6, 4, 2, 4, NULL, seg, NULL, "(C2 seg)");
    check_cp(*state, 2, 4, 3, 4, 1, 4, NULL, seg, &drop, "(C4 seg p 0.25)");
}

/* Positions and documents that break the contract end the call, naming what was wrong: query
 * positions not increasing, a key past the sequence, a document start after its row. */
static jmp_buf g_died;
static void died(int code) { longjmp(g_died, code ? code : 1); }

static void block_refusals(void **state)
{
    static const backend *be;
    be = *state;
    static float q[4 * 4], out[4 * 4], lse[4];
    static const int32_t ok[4] = {0, 1, 2, 3}, down[4] = {0, 2, 1, 3}, past[4] = {4, 5, 6, 8};
    static const int32_t seg[4] = {0, 0, 3, 3}; /* row at position 2 starts its document at 3 */
    const char *what[] = {"query positions not increasing", "a key past the sequence", "a document after its row"};
    td_set_abort_hook(died);
    for (int i = 0; i < 3; i++) {
        volatile int dead = 0;
        if (setjmp(g_died) == 0) {
            const int32_t *qp = i == 0 ? down : ok, *kp = i == 1 ? past : ok, *sg = i == 2 ? seg : NULL;
            be_attention_block_fwd(be, out, lse, q, q, q, 4, 4, 1, 4, 4, 8, qp, kp, 1, 1, 4, NULL, sg, NULL);
        } else
            dead = 1;
        printf("  block fwd refuses %s: %s\n", what[i], dead ? "yes" : "NO");
        assert_true(dead);
    }
    td_set_abort_hook(NULL);
}

int main(void)
{
    tb_skip_unless_isa_runs();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(block_causal),
        cmocka_unit_test(block_long),
        cmocka_unit_test(block_padding),
        cmocka_unit_test(block_packed),
        cmocka_unit_test(block_whole_is_attention_fwd),
        cmocka_unit_test(merge_by_hand),
        cmocka_unit_test(cp_causal),
        cmocka_unit_test(cp_dropout),
        cmocka_unit_test(cp_bidirectional),
        cmocka_unit_test(cp_packed),
        cmocka_unit_test(block_refusals),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
