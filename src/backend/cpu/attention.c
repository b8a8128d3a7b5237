/* Self-attention core on the local heads, grouped-query: query head h reads key/value head
 * h / (NH / NKV). Causal (query t reads keys [0, t]), or bidirectional with a padding mask over
 * each sample's unpadded keys (every query of sample b reads keys [0, klen[b]); the padded
 * queries read them too, and what they compute is never used). Forward: each (batch, query
 * head) is one task of one thread. Backward: each (batch, key/value head) is one task, which
 * walks the query heads of its group in order, so the sums into dk and dv are owned by one
 * thread and do not depend on the thread count. Query rows go in blocks of ATT_BLK so that only
 * the scores that count are computed: keys [0, end of block) when causal, [0, klen[b])
 * otherwise. Packed documents (seg): query t reads keys [seg[t], t] only, and a block of query
 * rows scores only keys [seg[r0], end of block): the key blocks before the segment of its first
 * row are skipped. Q K^T, att . V and the backward products are cblas_sgemm calls straight on the
 * strided q, k, v rows (a fused qkv layout, leading dimension 3C, or separate buffers): no
 * copies. OpenBLAS runs single-threaded inside the parallel region, so the threads do not
 * oversubscribe. The forward keeps only the log-sum-exp of each score row; the backward
 * recomputes the probabilities from it (one extra Q K^T) instead of storing (B, NH, T, T). */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>

#include "trident/check.h"
#include "cpu.h"

#define ATT_BLK 64

/* One (batch row, query head): its q rows (stride ldq), the k and v rows of its key/value head
 * (stride ldkv), out and dout rows (stride C = NH * HS). */
typedef struct {
    const float *q, *k, *v;
    int ldq, ldkv, T, HS, C, head; /* head: local query head index */
    int klen;                      /* bidirectional over keys [0, klen); 0: causal */
    const int32_t *seg;            /* (T) the row's document starts; NULL: one document */
    int64_t sample;                /* global sample index of the batch row (dropout) */
    /* A block of queries against a block of keys (attention_block_*); NULL: self-attention. */
    const int32_t *lo, *hi;     /* (Tq) query row i reads keys [lo[i], hi[i]) of the block */
    const int32_t *qpos, *kpos; /* global positions of the query rows and of the keys (dropout) */
} att_task;

typedef struct {
    const float *q, *k, *v;
    int ldq, ldkv, B, T, NH, NKV, HS;
    const int32_t *klen, *seg;
    int Tk, Tg;                 /* key rows a sample (T for self-attention); dropout's sequence length */
    const int32_t *qpos, *kpos; /* block mode: (T), (Tk) global positions; NULL: self-attention */
} att_shape;

/* Keys of query row t: [0, t] causal, else [0, klen); in block mode [lo[t], hi[t]). */
static inline int keys_of(const att_task *a, int t) { return a->hi ? a->hi[t] : a->klen ? a->klen : t + 1; }
/* First key of query row t: its document's start. */
static inline int key0_of(const att_task *a, int t) { return a->lo ? a->lo[t] : a->seg ? a->seg[t] : 0; }
/* Keys a block of query rows [r0, r0 + nr) reads: [block_key0, block_keys) (both non-decreasing
 * in the row, so the last row's end and the first row's start). */
static inline int block_keys(const att_task *a, int r0, int nr)
{
    return a->hi ? a->hi[r0 + nr - 1] : a->klen ? a->klen : r0 + nr;
}
static inline int block_key0(const att_task *a, int r0) { return key0_of(a, r0); }

static att_task task_of(const att_shape *s, const be_drop *drop, int b, int h)
{
    int g = h / (s->NH / s->NKV);
    att_task a = {s->q + (size_t)b * s->T * s->ldq + (size_t)h * s->HS,
                  s->k + (size_t)b * s->Tk * s->ldkv + (size_t)g * s->HS,
                  s->v + (size_t)b * s->Tk * s->ldkv + (size_t)g * s->HS,
                  s->ldq, s->ldkv, s->Tg, s->HS, s->NH * s->HS, h, s->klen ? s->klen[b] : 0,
                  s->seg ? s->seg + (size_t)b * s->T : NULL, cpu_dropping(drop) ? drop->sample[b] : 0,
                  NULL, NULL, s->qpos, s->kpos};
    return a;
}

/* Block mode: the key range [lo[i], hi[i]) of each query row i of sample b, from the positions
 * (both strictly increasing): keys at positions <= the query's (causal) or < klen[b], and not
 * before the row's document start seg. */
static void block_rows(int32_t *lo, int32_t *hi, const att_shape *s, int b)
{
    int j0 = 0, j1 = 0;
    for (int i = 0; i < s->T; i++) {
        int last = s->klen ? s->klen[b] - 1 : s->qpos[i], first = s->seg ? s->seg[(size_t)b * s->T + i] : 0;
        while (j1 < s->Tk && s->kpos[j1] <= last) j1++;
        while (j0 < s->Tk && s->kpos[j0] < first) j0++;
        lo[i] = j0 < j1 ? j0 : j1;
        hi[i] = j1;
    }
}

static void check_shape(const att_shape *s)
{
    TD_ASSERT(s->NKV > 0 && s->NH % s->NKV == 0 && s->ldq >= s->NH * s->HS && s->ldkv >= s->NKV * s->HS);
    for (int b = 0; s->klen && b < s->B; b++) TD_ASSERT(s->klen[b] >= 1 && s->klen[b] <= s->Tg);
    for (int i = 0; s->qpos && i < s->T; i++)
        TD_CHECK(s->qpos[i] >= 0 && s->qpos[i] < s->Tg && (i == 0 || s->qpos[i] > s->qpos[i - 1]),
                 "query positions are strictly increasing, within [0, Tg)", "attention block: qpos[%d] = %d", i,
                 s->qpos[i]);
    for (int j = 0; s->kpos && j < s->Tk; j++)
        TD_CHECK(s->kpos[j] >= 0 && s->kpos[j] < s->Tg && (j == 0 || s->kpos[j] > s->kpos[j - 1]),
                 "key positions are strictly increasing, within [0, Tg)", "attention block: kpos[%d] = %d", j,
                 s->kpos[j]);
    if (!s->seg) return;
    TD_CHECK(!s->klen, "packed documents are causal", "attention: both a padding mask (klen) and segments (seg)");
    for (int b = 0; b < s->B; b++)
        for (int t = 0; t < s->T; t++) {
            int g = s->seg[(size_t)b * s->T + t], p = s->qpos ? s->qpos[t] : t;
            TD_CHECK(g >= 0 && g <= p && (t == 0 || g >= s->seg[(size_t)b * s->T + t - 1]),
                     "segment starts are non-decreasing, within [0, the row's position]",
                     "attention: seg[%d][%d] = %d", b, t, g);
        }
}

/* Scores of query rows [r0, r0 + nr) against keys [k0, nk) into S (nr, nk - k0). */
static void scores(float *S, const att_task *a, int r0, int nr, int k0, int nk)
{
    float scale = 1.0f / sqrtf((float)a->HS);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nr, nk - k0, a->HS, scale, a->q + (size_t)r0 * a->ldq,
                a->ldq, a->k + (size_t)k0 * a->ldkv, a->ldkv, 0.0f, S, nk - k0);
}

/* Dropout multipliers of row t, keys [k0, k0 + n), of this head into mult. */
static void att_mults(float *mult, const att_task *a, const be_drop *drop, int t, int k0, int n)
{
    if (!a->kpos) {
        int64_t unit0 = ((int64_t)drop->unit0 + a->head) * a->T + k0;
        cpu_drop_mults(mult, n, drop, BE_DROP_ATTN, a->sample, be_drop_pos(drop, t), unit0);
        return;
    }
    /* block mode: the row at its global position, keys by theirs, a run of consecutive positions
     * a call */
    for (int j = 0, run; j < n; j += run) {
        for (run = 1; j + run < n && a->kpos[k0 + j + run] == a->kpos[k0 + j] + run; run++) {
        }
        int64_t unit0 = ((int64_t)drop->unit0 + a->head) * a->T + a->kpos[k0 + j];
        cpu_drop_mults(mult + j, run, drop, BE_DROP_ATTN, a->sample, (int64_t)drop->pos0 + a->qpos[t], unit0);
    }
}

/* The forward over every (batch row, query head) of sh: out (B, T, C) and lse (B, NH, T)
 * written. Block mode (sh->qpos): each row over its keys [lo, hi) of the key block; a row that
 * reads none gets out 0 and lse -inf. */
static void att_fwd(const backend *be, float *out, float *lse, const att_shape *sh, const be_drop *drop)
{
    int T = sh->T, Tk = sh->Tk, NH = sh->NH, HS = sh->HS, C = NH * HS, blk = T < ATT_BLK ? T : ATT_BLK;
    int dropping = cpu_dropping(drop);
#pragma omp parallel num_threads(cpu_threads(be)) if ((double)sh->B * NH * T * Tk * HS > CPU_PAR_MIN_MACS)
    {
        float *S = cpu_scratch(0, (size_t)blk * Tk * sizeof(float));
        float *mult = dropping ? cpu_scratch(1, (size_t)Tk * sizeof(float)) : NULL;
        int32_t *rows = sh->qpos ? cpu_scratch(3, 2 * (size_t)T * sizeof(int32_t)) : NULL;
#pragma omp for schedule(dynamic, 1)
        for (int bh = 0; bh < sh->B * NH; bh++) {
            att_task a = task_of(sh, drop, bh / NH, bh % NH);
            float *o = out + (size_t)(bh / NH) * T * C + (size_t)(bh % NH) * HS;
            float *l = lse + (size_t)bh * T;
            if (rows) {
                block_rows(rows, rows + T, sh, bh / NH);
                a.lo = rows, a.hi = rows + T;
            }
            for (int r0 = 0; r0 < T; r0 += blk) {
                int nr = T - r0 < blk ? T - r0 : blk, nk = block_keys(&a, r0, nr), kb = block_key0(&a, r0);
                int w = nk - kb; /* the block's score columns: keys [kb, nk) */
                if (w == 0) {    /* block mode: these rows read no key of this block */
                    for (int i = 0; i < nr; i++) {
                        l[r0 + i] = -INFINITY;
                        for (int c = 0; c < HS; c++) o[(size_t)(r0 + i) * C + c] = 0.0f;
                    }
                    continue;
                }
                scores(S, &a, r0, nr, kb, nk);
                for (int i = 0; i < nr; i++) {
                    int t = r0 + i, e = keys_of(&a, t) - kb, s0 = key0_of(&a, t) - kb;
                    float *row = S + (size_t)i * w, m = -INFINITY, sum = 0.0f;
#pragma omp simd reduction(max : m)
                    for (int j = s0; j < e; j++) m = row[j] > m ? row[j] : m;
#pragma omp simd reduction(+ : sum)
                    for (int j = s0; j < e; j++) {
                        row[j] = cpu_expf(row[j] - m);
                        sum += row[j];
                    }
                    float inv = 1.0f / sum;
#pragma omp simd
                    for (int j = s0; j < e; j++) row[j] *= inv;
                    for (int j = 0; j < s0; j++) row[j] = 0.0f;
                    for (int j = e; j < w; j++) row[j] = 0.0f;
                    l[t] = e > s0 ? m + logf(sum) : -INFINITY;
                    if (dropping) {
                        att_mults(mult, &a, drop, t, kb + s0, e - s0);
                        for (int j = s0; j < e; j++) row[j] *= mult[j - s0];
                    }
                }
                /* out rows (nr, HS) = att (nr, w) . V (w, HS) */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nr, HS, w, 1.0f, S, w,
                            a.v + (size_t)kb * a.ldkv, a.ldkv, 0.0f, o + (size_t)r0 * C, C);
            }
        }
    }
}

void cpu_attention_fwd(const backend *be, float *out, float *lse, const float *q, const float *k, const float *v,
                       int ldq, int ldkv, int B, int T, int NH, int NKV, int HS, const int32_t *klen,
                       const int32_t *seg, const be_drop *drop)
{
    if (B <= 0 || T <= 0 || NH <= 0) return;
    att_shape sh = {q, k, v, ldq, ldkv, B, T, NH, NKV, HS, klen, seg, T, T, NULL, NULL};
    check_shape(&sh);
    att_fwd(be, out, lse, &sh, drop);
}

void cpu_attention_block_fwd(const backend *be, float *out, float *lse, const float *q, const float *k,
                             const float *v, int ldq, int ldkv, int B, int Tq, int Tk, int Tg, const int32_t *qpos,
                             const int32_t *kpos, int NH, int NKV, int HS, const int32_t *klen, const int32_t *seg,
                             const be_drop *drop)
{
    if (B <= 0 || Tq <= 0 || NH <= 0) return;
    TD_ASSERT(qpos && kpos && Tk >= 0);
    att_shape sh = {q, k, v, ldq, ldkv, B, Tq, NH, NKV, HS, klen, seg, Tk, Tg, qpos, kpos};
    check_shape(&sh);
    att_fwd(be, out, lse, &sh, drop);
}

/* One block of query rows of one head, over the block's keys [kb, nk) (w = nk - kb of them):
 * P (probabilities), M (dropout multipliers) and G (the gradient buffer) are (nr, w) scratch.
 * Accumulates into dq rows [r0, r0+nr) (stride ldq), dk, dv rows [kb, nk) (stride ldkv); any of
 * them may be NULL. Dl: the rows' D = dout . out (block mode, given); NULL: each row's
 * sum_j P dP over its keys, all of which are in this block. */
static void att_bwd_block(float *dq, float *dk, float *dv, const float *dO, const att_task *a, const float *l,
                          const float *Dl, const be_drop *drop, int r0, int nr, float *P, float *M, float *G)
{
    int nk = block_keys(a, r0, nr), kb = block_key0(a, r0), w = nk - kb;
    if (w == 0) return; /* block mode: these rows read no key of this block */
    int ldq = a->ldq, ldkv = a->ldkv, C = a->C, HS = a->HS, dropping = M != NULL;
    float scale = 1.0f / sqrtf((float)HS);
    const float *kk = a->k + (size_t)kb * ldkv, *vv = a->v + (size_t)kb * ldkv;
    scores(P, a, r0, nr, kb, nk);
    for (int i = 0; i < nr; i++) {
        int t = r0 + i, e = keys_of(a, t) - kb, s0 = key0_of(a, t) - kb;
        float *row = P + (size_t)i * w;
        float lt = l[t];
#pragma omp simd
        for (int j = s0; j < e; j++) row[j] = cpu_expf(row[j] - lt);
        for (int j = 0; j < s0; j++) row[j] = 0.0f;
        for (int j = e; j < w; j++) row[j] = 0.0f;
        if (dropping) {
            float *mrow = M + (size_t)i * w, *grow = G + (size_t)i * w;
            att_mults(mrow + s0, a, drop, t, kb + s0, e - s0);
            for (int j = 0; j < s0; j++) mrow[j] = 0.0f;
            for (int j = e; j < w; j++) mrow[j] = 0.0f;
            for (int j = 0; j < w; j++) grow[j] = row[j] * mrow[j];
        }
    }
    /* dV (w, HS) += att_dropped^T (w, nr) . dO (nr, HS) */
    if (dv)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, w, HS, nr, 1.0f, dropping ? G : P, w,
                    dO + (size_t)r0 * C, C, 1.0f, dv + (size_t)kb * ldkv, ldkv);
    if (!dq && !dk) return;
    /* G (nr, w) = dO . V^T: the gradient of the dropped probabilities */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nr, w, HS, 1.0f, dO + (size_t)r0 * C, C, vv, ldkv, 0.0f, G,
                w);
    /* dS = P * (dP - sum_j P dP), dP = G * M; written over P (zero outside [s0, e) already) */
    for (int i = 0; i < nr; i++) {
        int e = keys_of(a, r0 + i) - kb, s0 = key0_of(a, r0 + i) - kb;
        float *prow = P + (size_t)i * w, *grow = G + (size_t)i * w;
        if (dropping) {
            const float *mrow = M + (size_t)i * w;
            for (int j = s0; j < e; j++) grow[j] *= mrow[j];
        }
        float dot = 0.0f;
        if (Dl)
            dot = Dl[r0 + i];
        else {
#pragma omp simd reduction(+ : dot)
            for (int j = s0; j < e; j++) dot += prow[j] * grow[j];
        }
#pragma omp simd
        for (int j = s0; j < e; j++) prow[j] *= grow[j] - dot;
    }
    /* dQ (nr, HS) += scale dS . K;  dK (w, HS) += scale dS^T . Q */
    if (dq)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nr, HS, w, scale, P, w, kk, ldkv, 1.0f,
                    dq + (size_t)r0 * ldq, ldq);
    if (dk)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, w, HS, nr, scale, P, w, a->q + (size_t)r0 * ldq, ldq,
                    1.0f, dk + (size_t)kb * ldkv, ldkv);
}

/* The backward over every (batch row, key/value head) of sh: see cpu_attention_bwd. D (B, NH,
 * T): the rows' dout . out (block mode), or NULL. */
static void att_bwd(const backend *be, float *dq, float *dk, float *dv, const float *dout, const float *lse,
                    const float *D, const att_shape *sh, const be_drop *drop)
{
    int T = sh->T, Tk = sh->Tk, NH = sh->NH, NKV = sh->NKV, HS = sh->HS, C = NH * HS;
    int blk = T < ATT_BLK ? T : ATT_BLK, dropping = cpu_dropping(drop), rep = NH / NKV;
    size_t scratch = (size_t)blk * Tk;
#pragma omp parallel num_threads(cpu_threads(be)) if ((double)sh->B * NH * T * Tk * HS > CPU_PAR_MIN_MACS)
    {
        float *P = cpu_scratch(0, scratch * sizeof(float)), *G = cpu_scratch(1, scratch * sizeof(float));
        float *M = dropping ? cpu_scratch(2, scratch * sizeof(float)) : NULL;
        int32_t *rows = sh->qpos ? cpu_scratch(3, 2 * (size_t)T * sizeof(int32_t)) : NULL;
#pragma omp for schedule(dynamic, 1)
        for (int bg = 0; bg < sh->B * NKV; bg++) { /* one key/value head: its gradients are this thread's */
            int b = bg / NKV, g = bg % NKV;
            size_t okv = (size_t)b * Tk * sh->ldkv + (size_t)g * HS;
            float *dkg = dk ? dk + okv : NULL, *dvg = dv ? dv + okv : NULL;
            if (rows) block_rows(rows, rows + T, sh, b);
            for (int h = g * rep; h < (g + 1) * rep; h++) {
                att_task a = task_of(sh, drop, b, h);
                if (rows) a.lo = rows, a.hi = rows + T;
                float *dqh = dq ? dq + (size_t)b * T * sh->ldq + (size_t)h * HS : NULL;
                const float *dO = dout + (size_t)b * T * C + (size_t)h * HS;
                size_t row0 = ((size_t)b * NH + h) * T;
                for (int r0 = 0; r0 < T; r0 += blk) {
                    int nr = T - r0 < blk ? T - r0 : blk;
                    att_bwd_block(dqh, dkg, dvg, dO, &a, lse + row0, D ? D + row0 : NULL, drop, r0, nr, P, M, G);
                }
            }
        }
    }
}

void cpu_attention_bwd(const backend *be, float *dq, float *dk, float *dv, const float *dout, const float *q,
                       const float *k, const float *v, const float *lse, int ldq, int ldkv, int B, int T, int NH,
                       int NKV, int HS, const int32_t *klen, const int32_t *seg, const be_drop *drop)
{
    if (B <= 0 || T <= 0 || NH <= 0 || (!dq && !dk && !dv)) return;
    att_shape sh = {q, k, v, ldq, ldkv, B, T, NH, NKV, HS, klen, seg, T, T, NULL, NULL};
    check_shape(&sh);
    att_bwd(be, dq, dk, dv, dout, lse, NULL, &sh, drop);
}

void cpu_attention_block_bwd(const backend *be, float *dq, float *dk, float *dv, const float *dout, const float *q,
                             const float *k, const float *v, const float *lse, const float *D, int ldq, int ldkv,
                             int B, int Tq, int Tk, int Tg, const int32_t *qpos, const int32_t *kpos, int NH, int NKV,
                             int HS, const int32_t *klen, const int32_t *seg, const be_drop *drop)
{
    if (B <= 0 || Tq <= 0 || Tk <= 0 || NH <= 0 || (!dq && !dk && !dv)) return;
    TD_ASSERT(qpos && kpos && D);
    att_shape sh = {q, k, v, ldq, ldkv, B, Tq, NH, NKV, HS, klen, seg, Tk, Tg, qpos, kpos};
    check_shape(&sh);
    att_bwd(be, dq, dk, dv, dout, lse, D, &sh, drop);
}

/* out, lse <- the exact merge of (out, lse) and (op, lp): see attention_merge in be_ops.h. */
void cpu_attention_merge(const backend *be, float *out, float *lse, const float *op, const float *lp, int B, int T,
                         int NH, int HS)
{
    int C = NH * HS;
    size_t rows = (size_t)B * NH * T;
#pragma omp parallel for schedule(static) num_threads(cpu_threads(be)) if (rows * HS > CPU_PAR_MIN)
    for (size_t r = 0; r < rows; r++) {
        size_t b = r / ((size_t)NH * T), h = r / T % NH, t = r % T;
        float la = lse[r], lb = lp[r], *o = out + (b * T + t) * C + h * HS;
        const float *p = op + (b * T + t) * C + h * HS;
        if (lb == -INFINITY) continue; /* the part saw no key: nothing changes */
        if (la == -INFINITY) {         /* nothing so far: the part as it is */
            for (int c = 0; c < HS; c++) o[c] = p[c];
            lse[r] = lb;
            continue;
        }
        float m = la > lb ? la : lb, l = m + log1pf(expf(-fabsf(la - lb)));
        float wa = expf(la - l), wb = expf(lb - l);
#pragma omp simd
        for (int c = 0; c < HS; c++) o[c] = wa * o[c] + wb * p[c];
        lse[r] = l;
    }
}

/* D (B, NH, T) written = rowsum(dout * out) a head: see attention_delta in be_ops.h. */
void cpu_attention_delta(const backend *be, float *D, const float *dout, const float *out, int B, int T, int NH,
                         int HS)
{
    int C = NH * HS;
    size_t rows = (size_t)B * NH * T;
#pragma omp parallel for schedule(static) num_threads(cpu_threads(be)) if (rows * HS > CPU_PAR_MIN)
    for (size_t r = 0; r < rows; r++) {
        size_t b = r / ((size_t)NH * T), h = r / T % NH, t = r % T, off = (b * T + t) * C + h * HS;
        float d = 0.0f;
#pragma omp simd reduction(+ : d)
        for (int c = 0; c < HS; c++) d += dout[off + c] * out[off + c];
        D[r] = d;
    }
}
