/* src/model blocks one at a time (norm, attention, MLP), for four architectures — GPT-2's
 * (LayerNorm, fused multi-head QKV with biases, GeLU), Llama's (RMSNorm, rotary, 4 heads in 2
 * query groups of head size 6, SwiGLU, no biases), a mix (rotary on half of each head, QKV
 * bias only, GeLU without bias) and BERT's (GPT-2's blocks, attention bidirectional over each
 * sample's unpadded keys) — against independent double-precision forwards written in this
 * file: the outputs, and the gradients of the input and of every parameter by central finite
 * differences of the reference. Each block also runs as two tensor-parallel shards whose group
 * is a single rank, so the row-parallel outputs and the input gradients stay partial: their sum
 * over the shards must be the whole block's, and each shard's parameter gradients must be the
 * rows or columns of the whole block's that it holds. BERT's new blocks — the token-type
 * embedding, the masked-LM head (dense, GeLU, norm, the tied decoder with its bias, the loss at
 * the masked positions), the pooler and the sentence-order head — are checked as one whole
 * one-layer model against a double-precision BERT written here: the weighted loss and the
 * gradient of every tensor by central differences. The MLP also with the other points of the
 * activation axes: GeGLU (gated tanh GeLU), squared ReLU, the exact erf GeLU. Generation runs
 * each slot through its kind's decode step: a kind generation has never heard of generates, one
 * without a decode step is refused by name. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "backend/backend.h"
#include "model/model_impl.h"
#include "trident/check.h"
#include "trident/comm.h"
#include "trident/philox.h"

enum { B = 2, T = 8, TP = 2 };

static comm *g_world;
static backend *g_be;

/* ---- the architectures ---- */

static gpt_config arch(int which)
{
    gpt_config c = {0};
    c.num_layers = 1;
    c.hidden = 16;
    c.heads = 4;
    c.ffn = 24;
    c.seq = T;
    c.max_pos = T;
    c.vocab = 40;
    c.padded_vocab = 48;
    c.init_std = 0.3f;
    c.seed = 77;
    if (which == 1) { /* Llama */
        c.norm = GPT_NORM_RMSNORM;
        c.norm_eps = 1e-6f;
        c.pos = GPT_POS_ROPE;
        c.rotary_base = 500.0f;
        c.query_groups = 2;
        c.kv_channels = 6;
        c.act = TD_ACT_SILU, c.glu = 1;
        c.disable_bias = 1;
        c.untied = 1;
    } else if (which == 2) { /* rotary on half the dims, QKV bias only, GeLU without bias */
        c.pos = GPT_POS_ROPE;
        c.rotary_percent = 0.5f;
        c.disable_bias = 1;
        c.add_qkv_bias = 1;
    } else if (which == 3) { /* BERT */
        c.kind = GPT_KIND_ENCODER;
        c.binary_head = 1;
    } else if (which == 4) { /* GPT-2's with a GeGLU MLP (Gemma's gate: tanh GeLU), biases */
        c.act = TD_ACT_GELU, c.glu = 1;
    } else if (which == 5) { /* GPT-2's with a squared-ReLU MLP (its bias in the linear, not fused) */
        c.act = TD_ACT_SQUARED_RELU;
    } else if (which == 6) { /* GPT-2's with the exact erf GeLU (BERT's), without biases */
        c.act = TD_ACT_GELU_ERF;
        c.disable_bias = 1;
    }
    return c;
}

/* BERT's samples: tokens before the padding (the attention's keys). */
static const int32_t BERT_KLEN[B] = {T, 5};

/* A one-layer model on a grid point of its own: tp ranks, rank r, but the tp group is this one
 * process, so no collective runs and row-parallel results stay partial sums. */
typedef struct {
    ps_state ps;
    gpt_model *m;
    gpt_acts *a;
} model_at;

static void model_open(model_at *x, const gpt_config *c, int tp, int rank)
{
    memset(&x->ps, 0, sizeof x->ps);
    x->ps.world_size = 1;
    x->ps.tp = tp;
    x->ps.pp = x->ps.dp = 1;
    x->ps.tp_rank = rank;
    x->ps.world = x->ps.tp_group = x->ps.dp_group = x->ps.pp_group = x->ps.mp_group = g_world;
    x->m = gpt_create(c, &x->ps, g_be, 0, 1, B, 1);
    x->a = gpt_acts_acquire(x->m);
    x->a->B = B;
    x->a->training = 0;
    if (gpt_masked_lm(c)) {
        memcpy(x->a->lengths, BERT_KLEN, sizeof BERT_KLEN);
        x->a->klen = x->a->lengths;
    }
}

static void model_close(model_at *x)
{
    gpt_acts_release(x->m, x->a);
    gpt_free(x->m);
}

/* ---- the reference, in double, from the whole (tp 1) model's parameters ---- */

typedef struct {
    const gpt_model *m;
    const float *bump; /* one parameter moved by `by` (finite differences) */
    double by;
} ref;

static double P(const ref *r, const float *p, size_t i) { return (double)p[i] + (p + i == r->bump ? r->by : 0.0); }

static void ref_norm(const ref *r, double *out, const double *x, const norm_params *p)
{
    const gpt_config *c = &r->m->cfg;
    int h = c->hidden;
    double eps = gpt_norm_eps(c);
    for (int t = 0; t < B * T; t++) {
        const double *xi = x + t * h;
        double mean = 0, var = 0;
        if (c->norm == GPT_NORM_LAYERNORM) {
            for (int i = 0; i < h; i++) mean += xi[i];
            mean /= h;
        }
        for (int i = 0; i < h; i++) var += (xi[i] - mean) * (xi[i] - mean);
        double rstd = 1.0 / sqrt(var / h + eps);
        for (int i = 0; i < h; i++)
            out[t * h + i] = (xi[i] - mean) * rstd * P(r, p->w, i) + (p->b ? P(r, p->b, i) : 0.0);
    }
}

/* y (rows, out) = x (rows, in) W^T + b, W (out, in) */
static void ref_linear(const ref *r, double *y, const double *x, const float *w, const float *b, int rows, int in,
                       int out)
{
    for (int t = 0; t < rows; t++)
        for (int o = 0; o < out; o++) {
            double s = b ? P(r, b, o) : 0.0;
            for (int i = 0; i < in; i++) s += x[t * in + i] * P(r, w, (size_t)o * in + i);
            y[t * out + o] = s;
        }
}

/* Hugging Face's rotate-half on one head vector at position pos. */
static void ref_rope(const gpt_config *c, double *v, int pos)
{
    int rot = gpt_rotary_dims(c), r2 = rot / 2;
    for (int i = 0; i < r2; i++) {
        double ang = pos * pow(gpt_rotary_base(c), -2.0 * i / rot);
        double a = v[i], b = v[i + r2];
        v[i] = a * cos(ang) - b * sin(ang);
        v[i + r2] = b * cos(ang) + a * sin(ang);
    }
}

/* The attention block's output (BT, h) after its output bias. */
static void ref_attention(const ref *r, double *out, const double *x, const attn_params *p)
{
    const gpt_config *c = &r->m->cfg;
    int h = c->hidden, n = c->heads, g = gpt_groups(c), d = gpt_head_dim(c), nd = n * d, gd = g * d, BT = B * T;
    double *q = calloc((size_t)BT * nd, sizeof(double)), *k = calloc((size_t)BT * gd, sizeof(double));
    double *v = calloc((size_t)BT * gd, sizeof(double)), *y = calloc((size_t)BT * nd, sizeof(double));
    if (gpt_gqa(c)) {
        double *kv = calloc((size_t)BT * 2 * gd, sizeof(double));
        ref_linear(r, q, x, p->qkv_w, p->qkv_b, BT, h, nd);
        ref_linear(r, kv, x, p->kv_w, p->kv_b, BT, h, 2 * gd);
        for (int t = 0; t < BT; t++)
            for (int i = 0; i < gd; i++) k[t * gd + i] = kv[t * 2 * gd + i], v[t * gd + i] = kv[t * 2 * gd + gd + i];
        free(kv);
    } else {
        double *qkv = calloc((size_t)BT * 3 * nd, sizeof(double));
        ref_linear(r, qkv, x, p->qkv_w, p->qkv_b, BT, h, 3 * nd);
        for (int t = 0; t < BT; t++)
            for (int i = 0; i < nd; i++) {
                q[t * nd + i] = qkv[t * 3 * nd + i];
                k[t * nd + i] = qkv[t * 3 * nd + nd + i];
                v[t * nd + i] = qkv[t * 3 * nd + 2 * nd + i];
            }
        free(qkv);
    }
    if (c->pos == GPT_POS_ROPE)
        for (int t = 0; t < BT; t++) {
            for (int hd = 0; hd < n; hd++) ref_rope(c, q + t * nd + hd * d, t % T);
            for (int gi = 0; gi < g; gi++) ref_rope(c, k + t * gd + gi * d, t % T);
        }
    double s[T];
    for (int b = 0; b < B; b++)
        for (int hd = 0; hd < n; hd++) {
            int gi = hd / (n / g);
            for (int i = 0; i < T; i++) {
                const double *qi = q + (b * T + i) * nd + hd * d;
                double mx = -1e300, sum = 0;
                int e = gpt_masked_lm(c) ? BERT_KLEN[b] : i + 1; /* keys [0, e) */
                for (int j = 0; j < e; j++) {
                    const double *kj = k + (b * T + j) * gd + gi * d;
                    double dot = 0;
                    for (int e = 0; e < d; e++) dot += qi[e] * kj[e];
                    s[j] = dot / sqrt((double)d);
                    mx = fmax(mx, s[j]);
                }
                for (int j = 0; j < e; j++) sum += (s[j] = exp(s[j] - mx));
                double *yi = y + (b * T + i) * nd + hd * d;
                for (int j = 0; j < e; j++)
                    for (int e = 0; e < d; e++) yi[e] += s[j] / sum * v[(b * T + j) * gd + gi * d + e];
            }
        }
    ref_linear(r, out, y, p->proj_w, p->proj_b, BT, nd, h);
    free(q);
    free(k);
    free(v);
    free(y);
}

static double gelu(double x) { return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }

/* The MLP's activation function, from its definition. */
static double ref_act(int act, double x)
{
    switch (act) {
    case TD_ACT_GELU: return gelu(x);
    case TD_ACT_GELU_ERF: return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
    case TD_ACT_SILU: return x / (1.0 + exp(-x));
    case TD_ACT_RELU: return x > 0 ? x : 0.0;
    case TD_ACT_SQUARED_RELU: return x > 0 ? x * x : 0.0;
    default: fail_msg("no reference for activation %d", act); return 0;
    }
}

/* The MLP block's output (BT, h) after its output bias. */
static void ref_mlp(const ref *r, double *out, const double *x, const mlp_params *p)
{
    const gpt_config *c = &r->m->cfg;
    int h = c->hidden, f = c->ffn, BT = B * T, w = c->glu ? 2 * f : f;
    double *u = calloc((size_t)BT * w, sizeof(double)), *a = calloc((size_t)BT * f, sizeof(double));
    ref_linear(r, u, x, p->fc_w, p->fc_b, BT, h, w);
    for (int t = 0; t < BT; t++)
        for (int i = 0; i < f; i++) {
            if (c->glu) {
                double gt = u[t * w + i], up = u[t * w + f + i];
                a[t * f + i] = ref_act(c->act, gt) * up;
            } else {
                a[t * f + i] = ref_act(c->act, u[t * w + i]);
            }
        }
    ref_linear(r, out, a, p->fc2_w, p->fc2_b, BT, f, h);
    free(u);
    free(a);
}

/* ---- driving a block ---- */

enum block { NORM, ATTN, MLP };

/* The block of layer 0 on model x: out (BT, h) = block(in) including its output bias; then, with
 * dout (BT, h) given, dx (BT, h) written and the parameter gradients accumulated (zeroed first). */
static int slot_of(enum block k)
{
    return k == NORM ? GPT_SLOT_INPUT_NORM : k == ATTN ? GPT_SLOT_ATTENTION : GPT_SLOT_MLP;
}

static void run_block(model_at *x, enum block k, float *out, const float *in, const float *dout, float *dx)
{
    gpt_model *m = x->m;
    int slot = slot_of(k);
    const block_slot *s = &m->layers[0].slot[slot];
    void *acts = x->a->layers[0].slot[slot];
    block_io io = {.m = m, .B = B, .klen = x->a->klen, .scratch = model_kind_scratch(m, s->ops)};
    int BT = B * T, h = m->cfg.hidden;
    be_zero(g_be, m->grads, m->numel);
    if (k == NORM) {
        s->ops->fwd(&io, acts, s->p, NULL, be_f32(in));
        memcpy(out, s->ops->output(acts)->p, (size_t)BT * h * sizeof(float)); /* fp32: no mixed precision here */
        if (dout) {
            memset(dx, 0, (size_t)BT * h * sizeof(float));
            s->ops->bwd(&io, dx, s->g, dout, acts, s->p, be_f32(in));
        }
        return;
    }
    s->ops->fwd(&io, acts, s->p, out, be_f32(in));
    const float *bias = s->ops->out_bias(s->p);
    /* a shard adds the replicated bias too: the whole block's is added once, below */
    if (bias && x->ps.tp_rank == 0)
        for (int t = 0; t < BT; t++)
            for (int i = 0; i < h; i++) out[t * h + i] += bias[i];
    if (!dout) return;
    s->ops->bwd(&io, dx, s->g, dout, acts, s->p, be_f32(in));
}

static void ref_block(const ref *r, enum block k, double *out, const double *x)
{
    const void *p = r->m->layers[0].slot[slot_of(k)].p;
    if (k == NORM) ref_norm(r, out, x, p);
    else if (k == ATTN) ref_attention(r, out, x, p);
    else ref_mlp(r, out, x, p);
}

/* sum(out * R) of the reference, with the input x moved at element xi by dxv (xi < 0: none). */
static double ref_loss(const ref *r, enum block k, const double *x, int xi, double dxv, const float *R)
{
    int n = B * T * r->m->cfg.hidden;
    double *xx = malloc((size_t)n * sizeof(double)), *o = malloc((size_t)n * sizeof(double)), L = 0;
    memcpy(xx, x, (size_t)n * sizeof(double));
    if (xi >= 0) xx[xi] += dxv;
    ref_block(r, k, o, xx);
    for (int i = 0; i < n; i++) L += o[i] * R[i];
    free(xx);
    free(o);
    return L;
}

static int prefix_of(const char *name, enum block k)
{
    const char *want = k == NORM ? "layers.0.ln1." : k == ATTN ? "layers.0.attn." : "layers.0.mlp.";
    return strncmp(name, want, strlen(want)) == 0;
}

/* Element (row, col) of a logical tensor held by a shard, or -1 (local element index). */
static long local_index(const gpt_tensor_info *t, int64_t row, int64_t col)
{
    int64_t cols = t->ndim == 2 ? t->shape[1] : 1;
    if (t->shard_dim < 0) return (long)(row * cols + col);
    if (t->shard_dim == 0) {
        int64_t block = t->shape[0] / t->shard_blocks, b = row / block, in = row % block - t->shard_start;
        if (in < 0 || in >= t->shard_len) return -1;
        return (long)((b * t->shard_len + in) * cols + col);
    }
    int64_t in = col - t->shard_start;
    if (in < 0 || in >= t->shard_len) return -1;
    return (long)(row * t->shard_len + in);
}

static const gpt_tensor_info *find_tensor(const gpt_model *m, const char *name)
{
    for (int i = 0; i < m->ntensors; i++)
        if (strcmp(m->table[i].name, name) == 0) return &m->table[i];
    return NULL;
}

static void check_block(int which, enum block k)
{
    const char *bname = k == NORM ? "norm" : k == ATTN ? "attention" : "mlp";
    gpt_config c = arch(which);
    int h = c.hidden, n = B * T * h;
    model_at whole, shard[TP];
    model_open(&whole, &c, 1, 0);
    for (int s = 0; s < TP; s++) model_open(&shard[s], &c, TP, s);

    float *x = malloc((size_t)n * sizeof(float)), *R = malloc((size_t)n * sizeof(float));
    float *out = malloc((size_t)n * sizeof(float)), *dx = malloc((size_t)n * sizeof(float));
    float *sout = calloc((size_t)n, sizeof(float)), *sdx = calloc((size_t)n, sizeof(float));
    float *tmp = malloc((size_t)n * sizeof(float)), *tdx = malloc((size_t)n * sizeof(float));
    double *xd = malloc((size_t)n * sizeof(double)), *od = malloc((size_t)n * sizeof(double));
    td_philox_fill_normal(x, (uint64_t)n, 5, 1, 0, 0.0f, 1.0f);
    td_philox_fill_normal(R, (uint64_t)n, 5, 2, 0, 0.0f, 1.0f);
    for (int i = 0; i < n; i++) xd[i] = x[i];

    /* forward: the whole block against the reference, the shards' sum against the whole */
    run_block(&whole, k, out, x, R, dx);
    ref r = {whole.m, NULL, 0};
    ref_block(&r, k, od, xd);
    double scale = 0, err = 0, serr = 0;
    for (int i = 0; i < n; i++) scale = fmax(scale, fabs(od[i]));
    for (int i = 0; i < n; i++) err = fmax(err, fabs(out[i] - od[i]) / scale);
    for (int s = 0; s < TP; s++) {
        run_block(&shard[s], k, tmp, x, R, tdx);
        for (int i = 0; i < n; i++) sout[i] += k == NORM && s ? 0.0f : tmp[i], sdx[i] += k == NORM && s ? 0.0f : tdx[i];
    }
    for (int i = 0; i < n; i++) serr = fmax(serr, fabs(sout[i] - od[i]) / scale);
    printf("%s %d: forward %.2e relative to the largest output %.3g; tp %d shards summed %.2e\n", bname, which, err,
           scale, TP, serr);
    assert_true(err < 1e-5);
    assert_true(serr < 1e-5);

    /* input gradient by central differences of the reference (every element) */
    double eps = 1e-5, gscale = 0, gerr = 0, gserr = 0;
    double *fd = malloc((size_t)n * sizeof(double));
    for (int i = 0; i < n; i++) {
        fd[i] = (ref_loss(&r, k, xd, i, eps, R) - ref_loss(&r, k, xd, i, -eps, R)) / (2 * eps);
        gscale = fmax(gscale, fabs(fd[i]));
    }
    for (int i = 0; i < n; i++) {
        gerr = fmax(gerr, fabs(dx[i] - fd[i]) / gscale);
        gserr = fmax(gserr, fabs(sdx[i] - fd[i]) / gscale);
    }
    printf("%s %d: input gradient %.2e, shards summed %.2e (largest %.3g)\n", bname, which, gerr, gserr, gscale);
    assert_true(gerr < 1e-4);
    assert_true(gserr < 1e-4);

    /* parameter gradients: 12 elements of every tensor of the block by central differences;
     * each shard's slice equal to the whole's (replicated tensors: the whole's on every shard) */
    float *wg = malloc(whole.m->numel * sizeof(float));
    be_memcpy(g_be, wg, whole.m->grads, whole.m->numel * sizeof(float), BE_D2H);
    int checked = 0;
    long compared = 0; /* shard elements held against the whole */
    double perr = 0, slerr = 0;
    for (int ti = 0; ti < whole.m->ntensors; ti++) {
        const gpt_tensor_info *t = &whole.m->table[ti];
        if (!prefix_of(t->name, k)) continue;
        for (int e = 0; e < 12; e++) {
            size_t idx = (size_t)(((uint64_t)e * 2654435761u + (uint64_t)ti * 40503u) % t->numel);
            float *pp = whole.m->params + t->offset + idx;
            ref rp = {whole.m, pp, eps}, rm = {whole.m, pp, -eps};
            double g = (ref_loss(&rp, k, xd, -1, 0, R) - ref_loss(&rm, k, xd, -1, 0, R)) / (2 * eps);
            double got = wg[t->offset + idx];
            perr = fmax(perr, fabs(got - g) / fmax(gscale, 1e-3));
            checked++;
        }
        int64_t rows = t->shape[0], cols = t->ndim == 2 ? t->shape[1] : 1;
        for (int s = 0; s < TP; s++) {
            const gpt_tensor_info *st = find_tensor(shard[s].m, t->name);
            assert_non_null(st);
            for (int64_t i = 0; i < rows; i++)
                for (int64_t j = 0; j < cols; j++) {
                    long li = local_index(st, i, j);
                    if (li < 0) continue;
                    compared++;
                    double want = wg[t->offset + (size_t)(i * cols + j)], have = shard[s].m->grads[st->offset + (size_t)li];
                    slerr = fmax(slerr, fabs(want - have) / fmax(gscale, 1e-3));
                }
        }
    }
    printf("%s %d: %d parameter gradients %.2e; %ld shard elements against the whole %.2e\n", bname, which, checked,
           perr, compared, slerr);
    assert_true(checked > 0 && compared > 0);
    assert_true(perr < 1e-4);
    assert_true(slerr < 1e-5);

    free(wg);
    free(fd);
    free(x);
    free(R);
    free(out);
    free(dx);
    free(sout);
    free(sdx);
    free(tmp);
    free(tdx);
    free(xd);
    free(od);
    model_close(&whole);
    for (int s = 0; s < TP; s++) model_close(&shard[s]);
}

static void norm_gpt2(void **st) { (void)st; check_block(0, NORM); }
static void norm_llama(void **st) { (void)st; check_block(1, NORM); }
static void attention_gpt2(void **st) { (void)st; check_block(0, ATTN); }
static void attention_llama(void **st) { (void)st; check_block(1, ATTN); }
static void attention_mixed(void **st) { (void)st; check_block(2, ATTN); }
static void mlp_gpt2(void **st) { (void)st; check_block(0, MLP); }
static void mlp_llama(void **st) { (void)st; check_block(1, MLP); }
static void mlp_mixed(void **st) { (void)st; check_block(2, MLP); }
static void attention_bert(void **st) { (void)st; check_block(3, ATTN); }
static void mlp_geglu(void **st) { (void)st; check_block(4, MLP); }
static void mlp_squared_relu(void **st) { (void)st; check_block(5, MLP); }
static void mlp_gelu_erf(void **st) { (void)st; check_block(6, MLP); }

/* ---- BERT: the whole one-layer model against a double-precision one ---- */

static const int32_t BERT_IDS[B * T] = {1, 17, 5, 9, 33, 2, 30, 12, 1, 8, 39, 21, 2, 0, 0, 0};
static const int32_t BERT_TYPES[B * T] = {0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 1, 1, 1, 0, 0, 0};
static const int32_t BERT_LABELS[B * T] = {-1, 3, -1, -1, 36, -1, 7, -1, -1, -1, 22, -1, -1, -1, -1, -1};
static const int32_t BERT_SOP[B] = {1, 0};
static const float BERT_MLM_W = 0.25f, BERT_SOP_W = 0.5f; /* 1 / 4 masked tokens, 1 / 2 samples */

/* The weighted masked-LM plus sentence-order loss of the reference. */
static double ref_bert_loss(const ref *r)
{
    const gpt_model *m = r->m;
    const gpt_config *c = &m->cfg;
    int h = c->hidden, V = c->vocab, n = B * T * h;
    double *x = calloc((size_t)n, sizeof(double)), *y = calloc((size_t)n, sizeof(double));
    double *z = calloc((size_t)n, sizeof(double)), *u = calloc((size_t)n, sizeof(double));
    for (int t = 0; t < B * T; t++)
        for (int i = 0; i < h; i++)
            x[t * h + i] = P(r, m->p.wte, (size_t)BERT_IDS[t] * h + i) + P(r, m->p.wpe, (size_t)(t % T) * h + i) +
                           P(r, m->p.tte, (size_t)BERT_TYPES[t] * h + i);
    const gpt_layer *L = &m->layers[0];
    ref_norm(r, y, x, L->slot[GPT_SLOT_INPUT_NORM].p);
    ref_attention(r, z, y, L->slot[GPT_SLOT_ATTENTION].p);
    for (int i = 0; i < n; i++) x[i] += z[i];
    ref_norm(r, y, x, L->slot[GPT_SLOT_PRE_MLP_NORM].p);
    ref_mlp(r, z, y, L->slot[GPT_SLOT_MLP].p);
    for (int i = 0; i < n; i++) x[i] += z[i];
    ref_norm(r, y, x, m->lnf.p); /* y: the encoder's output */
    norm_params lm_norm = {gpt_param(m, "lm_head.norm.weight", 0), gpt_param(m, "lm_head.norm.bias", 0)};
    /* masked LM: dense, GeLU, norm, the tied decoder with its bias */
    ref_linear(r, z, y, gpt_param(m, "lm_head.dense.weight", 0), gpt_param(m, "lm_head.dense.bias", 0), B * T, h, h);
    for (int i = 0; i < n; i++) z[i] = gelu(z[i]);
    ref_norm(r, u, z, &lm_norm);
    double loss = 0;
    for (int t = 0; t < B * T; t++) {
        if (BERT_LABELS[t] < 0) continue;
        double lg[64], mx = -1e300, sum = 0;
        for (int v = 0; v < V; v++) {
            lg[v] = P(r, gpt_param(m, "lm_head.bias", 0), v);
            for (int i = 0; i < h; i++) lg[v] += u[t * h + i] * P(r, m->p.wte, (size_t)v * h + i);
            mx = fmax(mx, lg[v]);
        }
        for (int v = 0; v < V; v++) sum += exp(lg[v] - mx);
        loss += BERT_MLM_W * (mx + log(sum) - lg[BERT_LABELS[t]]);
    }
    /* sentence order: the pooler on [CLS], the binary head */
    for (int b = 0; b < B; b++) {
        double pool[64], lg[2];
        ref_linear(r, pool, y + (size_t)b * T * h, gpt_param(m, "pooler.dense.weight", 0),
                   gpt_param(m, "pooler.dense.bias", 0), 1, h, h);
        for (int i = 0; i < h; i++) pool[i] = tanh(pool[i]);
        ref_linear(r, lg, pool, gpt_param(m, "binary_head.weight", 0), gpt_param(m, "binary_head.bias", 0), 1, h, 2);
        double mx = fmax(lg[0], lg[1]);
        loss += BERT_SOP_W * (mx + log(exp(lg[0] - mx) + exp(lg[1] - mx)) - lg[BERT_SOP[b]]);
    }
    free(x), free(y), free(z), free(u);
    return loss;
}

static void bert_model(void **st)
{
    (void)st;
    gpt_config c = arch(3);
    model_at x;
    model_open(&x, &c, 1, 0);
    gpt_model *m = x.m;
    gpt_batch bb = {.types = BERT_TYPES, .lengths = BERT_KLEN, .labels = BERT_SOP, .token_weight = BERT_MLM_W,
                    .sample_weight = BERT_SOP_W};
    int64_t sample[B] = {0, 1};
    double loss = 0;
    be_zero(g_be, m->grads, m->numel);
    bb.B = B, bb.ids = BERT_IDS, bb.targets = BERT_LABELS, bb.sample = sample;
    gpt_forward(m, x.a, &bb, NULL, 0, &loss);
    gpt_backward(m, x.a, NULL, 1.0f);
    ref r0 = {m, NULL, 0};
    double want = ref_bert_loss(&r0);
    printf("bert: loss %.9g, reference %.9g (relative %.2e)\n", loss, want, fabs(loss - want) / want);
    assert_true(fabs(loss - want) / want < 1e-5);
    /* the head's sums, by the names it gives them: 4 masked tokens, B samples */
    double stats[GPT_MAX_STATS] = {0};
    gpt_head_stats(x.a, stats);
    assert_int_equal(gpt_head_nstats(&c), 6);
    for (int i = 0; i < gpt_head_nstats(&c); i++) {
        if (strcmp(gpt_head_stat_name(&c, i), "mlm_tokens") == 0) assert_true(stats[i] == 4);
        if (strcmp(gpt_head_stat_name(&c, i), "sop_samples") == 0) assert_true(stats[i] == B);
    }

    /* every tensor: 8 elements by central differences (all of the small ones) */
    double eps = 1e-5, gscale = 0, perr = 0;
    int checked = 0;
    double *fd = calloc(m->numel, sizeof(double));
    int *picked = calloc(m->numel, sizeof(int));
    for (int ti = 0; ti < m->ntensors; ti++) {
        const gpt_tensor_info *t = &m->table[ti];
        for (int e = 0; e < 8 && e < (int)t->numel; e++) {
            size_t idx = t->numel <= 8 ? (size_t)e : (size_t)(((uint64_t)e * 2654435761u + ti * 97u) % t->numel);
            float *pp = m->params + t->offset + idx;
            ref rp = {m, pp, eps}, rm = {m, pp, -eps};
            fd[t->offset + idx] = (ref_bert_loss(&rp) - ref_bert_loss(&rm)) / (2 * eps);
            picked[t->offset + idx] = 1;
            gscale = fmax(gscale, fabs(fd[t->offset + idx]));
        }
    }
    for (int ti = 0; ti < m->ntensors; ti++) {
        const gpt_tensor_info *t = &m->table[ti];
        double terr = 0;
        for (size_t i = t->offset; i < t->offset + t->numel; i++)
            if (picked[i]) terr = fmax(terr, fabs(m->grads[i] - fd[i]) / gscale), checked++;
        if (strncmp(t->name, "layers.", 7) != 0) printf("  %-28s gradient %.2e\n", t->name, terr);
        perr = fmax(perr, terr);
    }
    printf("bert: %d parameter gradients of %d tensors against central differences: %.2e (largest %.3g)\n",
           checked, m->ntensors, perr, gscale);
    assert_true(perr < 1e-4);
    free(fd);
    free(picked);
    model_close(&x);
}

/* The layer spec: each architecture's slots hold the kinds its config names (by hand: GPT-2
 * LayerNorm and GeLU, Llama RMSNorm and SwiGLU, BERT GPT-2's with its own heads), the final
 * norm the same kind as the layers', and the slot's tensors are the kind's, named after the slot. */
static void layer_spec(void **st)
{
    (void)st;
    static const char *const want[4][5] = {
        {"LayerNorm", "attention", "LayerNorm", "MLP", "LM head"},
        {"RMSNorm", "attention", "RMSNorm", "MLP", "LM head"},
        {"LayerNorm", "attention", "LayerNorm", "MLP", "LM head"},
        {"LayerNorm", "attention", "LayerNorm", "MLP", "BERT heads"},
    };
    static const char *const prefix[GPT_LAYER_NSLOTS] = {"layers.0.ln1.", "layers.0.attn.", "layers.0.ln2.",
                                                         "layers.0.mlp."};
    for (int which = 0; which < 4; which++) {
        gpt_config c = arch(which);
        model_at x;
        model_open(&x, &c, 1, 0);
        const gpt_model *m = x.m;
        for (int k = 0; k < GPT_LAYER_NSLOTS; k++) {
            const block_slot *s = &m->layers[0].slot[k];
            assert_string_equal(s->ops->name, want[which][k]);
            assert_true(s->t1 > s->t0);
            for (int t = s->t0; t < s->t1; t++)
                assert_true(strncmp(m->table[t].name, prefix[k], strlen(prefix[k])) == 0);
        }
        assert_string_equal(m->lnf.ops->name, want[which][0]);
        assert_string_equal(m->head->name, want[which][4]);
        model_close(&x);
    }
}

/* The heads' report by hand: BERT's means over the masked tokens and the samples (and none of
 * the sentence order without samples); the LM head's none, its loss the mean over the tokens. */
static void head_metrics(void **st)
{
    (void)st;
    gpt_config bert = arch(3), gpt = arch(0);
    double sums[GPT_MAX_STATS] = {0}, loss = 7;
    const char *names[] = {"mlm_loss", "mlm_tokens", "mlm_correct", "sop_loss", "sop_samples", "sop_correct"};
    const double v[] = {6, 3, 2, 1.5, 3, 1};
    for (int i = 0; i < gpt_head_nstats(&bert); i++)
        for (int k = 0; k < 6; k++)
            if (strcmp(gpt_head_stat_name(&bert, i), names[k]) == 0) sums[i] = v[k];
    gpt_metric out[GPT_MAX_STATS];
    assert_int_equal(gpt_head_metrics(&bert, sums, &loss, out), 3);
    assert_true(loss == 2.0);
    assert_string_equal(out[0].key, "lm_acc");
    assert_true(out[0].value == 2.0 / 3);
    assert_string_equal(out[1].key, "sop_loss");
    assert_true(out[1].value == 0.5);
    assert_string_equal(out[2].key, "sop_acc");
    assert_true(out[2].value == 1.0 / 3);
    assert_true(gpt_head_loss_divisor(&bert, 16) == 1.0);
    assert_string_equal(gpt_head_loss_name(&bert), "lm + sop loss");
    for (int i = 0; i < gpt_head_nstats(&bert); i++)
        if (strcmp(gpt_head_stat_name(&bert, i), "sop_samples") == 0) sums[i] = 0;
    assert_int_equal(gpt_head_metrics(&bert, sums, &loss, out), 1);
    assert_int_equal(gpt_head_nstats(&gpt), 0);
    loss = 7;
    assert_int_equal(gpt_head_metrics(&gpt, sums, &loss, out), 0);
    assert_true(loss == 7);
    assert_true(gpt_head_loss_divisor(&gpt, 16) == 16.0 * T);
    assert_null(gpt_head_loss_name(&gpt));
}

/* The stage's checks of what it is given: a bidirectional model's micro-batch without its
 * lengths and a token-type model's without its types each end the job naming what is missing
 * (caught here through the abort hook). */
static jmp_buf g_died;
static void died(int code)
{
    (void)code;
    longjmp(g_died, 1);
}

static int dies_forward(model_at *x, const gpt_batch *in)
{
    if (setjmp(g_died)) return 1;
    gpt_forward(x->m, x->a, in, NULL, 0, NULL);
    return 0;
}


static void stage_checks(void **st)
{
    (void)st;
    gpt_config c = arch(3);
    model_at x;
    model_open(&x, &c, 1, 0);
    int64_t sample[B] = {0, 1};
    gpt_batch in = {.B = B, .ids = BERT_IDS, .targets = BERT_LABELS, .sample = sample, .types = BERT_TYPES,
                    .lengths = BERT_KLEN, .labels = BERT_SOP, .token_weight = 1, .sample_weight = 1};
    td_set_abort_hook(died);
    assert_false(dies_forward(&x, &in));
    in.lengths = NULL;
    assert_true(dies_forward(&x, &in));
    in.lengths = BERT_KLEN, in.types = NULL;
    assert_true(dies_forward(&x, &in));
    td_set_abort_hook(NULL);
    model_close(&x);
}

/* ---- generation through the kinds' decode steps ---- */

/* A kind src/model/infer.c has never heard of: the MLP's ops under another name, its decode step
 * the MLP's, counted. */
static int g_decodes;
static void counted_decode(const block_io *io, void *st, const void *p, float *out, be_in x, int pos, int n)
{
    g_decodes++;
    mlp_ops.decode(io, st, p, out, x, pos, n);
}

/* gpt_kv_create and gpt_infer's logits of prompt {3, 1, 4} then one step of {1}, per row (B, V);
 * returns 1 when gpt_kv_create ended the job (err: what it printed). */
static int generate(gpt_model *m, float *logits, char *err, size_t len)
{
    static const int32_t prompt[B * 3] = {3, 1, 4, 15, 9, 2}, next[B] = {1, 5};
    FILE *f = tmpfile();
    assert_non_null(f);
    fflush(stderr);
    int saved = dup(2);
    dup2(fileno(f), 2);
    int died_here = 0;
    gpt_kv_cache *c = NULL;
    if (setjmp(g_died)) died_here = 1;
    else c = gpt_kv_create(m, B, T, 3);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(f);
    size_t n = fread(err, 1, len - 1, f);
    err[n] = 0;
    fclose(f);
    if (died_here) return 1;
    gpt_infer(m, c, prompt, NULL, 0, 3, logits);
    gpt_infer(m, c, next, NULL, 3, 1, logits);
    gpt_kv_free(m, c);
    return 0;
}

/* infer.c runs every slot through its kind's decode step and knows no kind: a kind it has never
 * heard of generates (its decode step called once a step for the one layer), with the logits of
 * the MLP whose step it borrows; a kind that trains but has no decode step is refused by
 * gpt_kv_create with one line naming the kind and the layer. Llama's blocks (RMSNorm, GQA,
 * rotary, SwiGLU). */
static void decode_through_kinds(void **st)
{
    (void)st;
    gpt_config c = arch(1);
    model_at x;
    model_open(&x, &c, 1, 0);
    float want[B * 40], got[B * 40];
    char err[1024];
    td_set_abort_hook(died);
    block_slot *mlp = &x.m->layers[0].slot[GPT_SLOT_MLP];
    const block_ops *kind = mlp->ops;
    assert_ptr_equal(kind, &mlp_ops);
    assert_false(generate(x.m, want, err, sizeof err));

    static block_ops renamed;
    renamed = mlp_ops;
    renamed.name = "an MLP infer.c does not know";
    renamed.decode = counted_decode;
    mlp->ops = &renamed;
    g_decodes = 0;
    assert_false(generate(x.m, got, err, sizeof err));
    assert_int_equal(g_decodes, 2);
    assert_memory_equal(got, want, sizeof want);

    static block_ops no_step;
    no_step = mlp_ops;
    no_step.name = "an MLP without a decode step";
    no_step.decode = NULL;
    mlp->ops = &no_step;
    assert_true(generate(x.m, got, err, sizeof err));
    assert_non_null(strstr(err, "\"an MLP without a decode step\" (layer 0)"));
    assert_non_null(strstr(err, "block_ops.decode"));
    assert_ptr_equal(strchr(err, '\n'), err + strlen(err) - 1); /* one line */

    mlp->ops = kind;
    td_set_abort_hook(NULL);
    model_close(&x);
}

int main(int argc, char **argv)
{
    g_world = comm_world_init(&argc, &argv);
    g_be = be_create("cpu", 2);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(norm_gpt2),      cmocka_unit_test(norm_llama),      cmocka_unit_test(attention_gpt2),
        cmocka_unit_test(attention_llama), cmocka_unit_test(attention_mixed), cmocka_unit_test(mlp_gpt2),
        cmocka_unit_test(mlp_llama),       cmocka_unit_test(mlp_mixed),       cmocka_unit_test(attention_bert),
        cmocka_unit_test(bert_model),      cmocka_unit_test(layer_spec),      cmocka_unit_test(head_metrics),
        cmocka_unit_test(stage_checks),    cmocka_unit_test(mlp_geglu),       cmocka_unit_test(mlp_squared_relu),
        cmocka_unit_test(mlp_gelu_erf),    cmocka_unit_test(decode_through_kinds),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    be_free(g_be);
    comm_world_finalize(g_world);
    return rc;
}
