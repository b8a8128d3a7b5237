/* src/model/moe.c, the mixture-of-experts MLP block, against an independent double-precision
 * MoE written here (Megatron-Core's MoELayer: the router's logits, its own top-k and weights by
 * each score function, every expert an MLP on its tokens, the weighted sum, the load-balancing
 * loss and the z-loss): the output, and by central finite differences of the reference the
 * gradients of the input and of every tensor of the block (router and experts), with the two
 * losses in the objective at the scale the block gives them (loss_scale x tokens). Two
 * architectures: GPT-2's experts (GeLU, biases) and Llama's (SwiGLU, none); softmax after the
 * top-k, before it and sigmoid, each with and without a scaling factor (and the factor by hand). Routing is piecewise smooth: the inputs
 * are drawn so that no token's choice is near a tie (checked), and the choice of the block is
 * the block's output, against the reference's own choice, tells a different one at once. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend/backend.h"
#include "model/model_impl.h"
#include "trident/check.h"
#include "trident/comm.h"
#include "trident/philox.h"

enum { B = 2, T = 8, BT = B * T };

static comm *g_world;
static backend *g_be;

typedef struct {
    gpt_config c;
    const char *name;
} arch;

static arch make_shared(int llama, int score, int pre, float scale, int shared, int gate);
static arch make(int llama, int score, int pre, float scale) { return make_shared(llama, score, pre, scale, 0, 0); }
static arch make_shared(int llama, int score, int pre, float scale, int shared, int gate)
{
    arch a = {{0}, NULL};
    gpt_config *c = &a.c;
    c->num_layers = 1, c->hidden = 12, c->heads = 2, c->ffn = 20, c->seq = T, c->max_pos = T;
    c->vocab = 40, c->padded_vocab = 48, c->init_std = 0.4f, c->seed = 91;
    c->num_experts = 5, c->moe_ffn = 10, c->moe_topk = 2;
    c->moe_score = score, c->moe_pre_softmax = pre, c->moe_topk_scale = scale;
    c->moe_aux_coeff = 0.3f, c->moe_z_coeff = 0.05f;
    c->moe_shared_ffn = shared, c->moe_shared_gate = gate;
    if (llama) c->act = TD_ACT_SILU, c->glu = 1, c->disable_bias = 1, c->norm = GPT_NORM_RMSNORM, c->pos = GPT_POS_ROPE;
    return a;
}

/* ---- the reference ---- */
typedef struct {
    const gpt_model *m;
    const moe_params *p;
    const float *bump; /* a parameter moved by `by` */
    double by;
    double dscale;     /* the losses' weight in the objective: loss_scale x tokens */
    int32_t *idx;      /* (BT, k) the reference's choice, written */
    double margin;     /* the smallest gap between a chosen and an unchosen score, written */
    int dropped;       /* choices dropped over capacity, written */
    const be_drop *lora_drop; /* --lora-dropout on the experts' adapters (NULL: none): the layer's, as given to the block */
} ref;

static double P(const ref *r, const float *p, size_t i) { return (double)p[i] + (p + i == r->bump ? r->by : 0.0); }
static double gelu(double x) { return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }
static double sigm(double x) { return 1.0 / (1.0 + exp(-x)); }

/* LoRA on expert e (c->lora_rank > 0): out (w) += alpha / r B_e (A_e in), A stacked (E r, n),
 * B stacked (E w, r) as moe.c's adapters */
static void ref_expert_lora(const ref *r, double *out, const double *in, const float *A, const float *Bm, int e, int n,
                            int w)
{
    const gpt_config *c = &r->m->cfg;
    if (!A) return;
    int R = c->lora_rank;
    double u[8], sc = (double)c->lora_alpha / R;
    for (int k = 0; k < R; k++) {
        u[k] = 0;
        for (int i = 0; i < n; i++) u[k] += P(r, A, ((size_t)e * R + k) * n + i) * in[i];
    }
    for (int o = 0; o < w; o++)
        for (int k = 0; k < R; k++) out[o] += sc * P(r, Bm, ((size_t)e * w + o) * R + k) * u[k];
}

/* in (n) with the expert adapters' dropout (ld non-NULL) of module i (gate 0, up 1, down 2) of expert e on token t:
 * the mask the design keys (moe.c expert_drop), written out here by hand: site 1 + 3 L + 7 L (after every
 * layer's dense ones) + 3 layer + i, the token as sample seq + position, the expert's index as the position,
 * the input channel as the unit */
static const double *ref_lora_in(const ref *r, double *buf, const double *in, int n, int i, int e, int t)
{
    const be_drop *ld = r->lora_drop;
    if (!ld) return in;
    const gpt_config *c = &r->m->cfg;
    be_drop d = *ld;
    d.site = 1 + 10 * c->num_layers + 3 * 0 + i;
    int64_t tok = ld->sample[t / T] * T + t % T;
    for (int j = 0; j < n; j++)
        buf[j] = be_drop_keep(&d, BE_DROP_HIDDEN, tok, e, j) ? in[j] * (double)(1.0f / (1.0f - d.p)) : 0.0;
    return buf;
}

/* ... of the shared expert's module i on token t: the dense MLP's (site 1 + 3 L + 7 layer + 4 + i; the
 * token's sample and position; the channel) */
static const double *ref_shared_in(const ref *r, double *buf, const double *in, int n, int i, int t)
{
    const be_drop *ld = r->lora_drop;
    if (!ld) return in;
    be_drop d = *ld;
    d.site = 1 + 3 * r->m->cfg.num_layers + 7 * 0 + 4 + i;
    for (int j = 0; j < n; j++)
        buf[j] = be_drop_keep(&d, BE_DROP_HIDDEN, ld->sample[t / T], t % T, j) ? in[j] * (double)(1.0f / (1.0f - d.p)) : 0.0;
    return buf;
}

/* out (BT, h) and the objective's extra term (the two losses times dscale), from x (BT, h) */
static double ref_moe(ref *r, double *out, const double *x)
{
    const gpt_config *c = &r->m->cfg;
    const moe_params *p = r->p;
    int h = c->hidden, E = c->num_experts, k = c->moe_topk, F = c->moe_ffn, bF = c->glu ? 2 * F : F;
    double lg[BT][8], sc[BT][8], counts[8] = {0}, zsum = 0, ww[BT][8], cb[B][8] = {{0}};
    r->margin = 1e30, r->dropped = 0;
    for (int t = 0; t < BT; t++) {
        for (int e = 0; e < E; e++) {
            double s = 0;
            for (int i = 0; i < h; i++) s += x[t * h + i] * P(r, p->router_w, (size_t)e * h + i);
            lg[t][e] = s;
        }
        double mx = lg[t][0], sum = 0;
        for (int e = 1; e < E; e++) mx = fmax(mx, lg[t][e]);
        for (int e = 0; e < E; e++) sum += exp(lg[t][e] - mx);
        double lse = mx + log(sum);
        zsum += lse * lse;
        /* the scores the choice ranks */
        double rank[8], chosen[8] = {0};
        for (int e = 0; e < E; e++)
            rank[e] = c->moe_score == BE_MOE_SIGMOID ? sigm(lg[t][e]) + (p->expert_bias ? p->expert_bias[e] : 0.0)
                      : c->moe_pre_softmax ? exp(lg[t][e] - lse) : lg[t][e];
        for (int j = 0; j < k; j++) {
            int best = -1;
            for (int e = 0; e < E; e++)
                if (!chosen[e] && (best < 0 || rank[e] > rank[best])) best = e;
            chosen[best] = 1;
            r->idx[t * k + j] = best;
        }
        for (int e = 0; e < E; e++)
            for (int f = 0; f < E; f++)
                if (chosen[e] && !chosen[f]) r->margin = fmin(r->margin, rank[e] - rank[f]);
        /* the weights */
        double w[8], ws = 0;
        for (int j = 0; j < k; j++) {
            int e = r->idx[t * k + j];
            w[j] = c->moe_score == BE_MOE_SIGMOID ? sigm(lg[t][e]) : exp(lg[t][e] - lse);
            ws += w[j];
        }
        for (int j = 0; j < k; j++) {
            if (c->moe_score == BE_MOE_SOFTMAX && !c->moe_pre_softmax) w[j] /= ws; /* softmax over the k */
            if (c->moe_score == BE_MOE_SIGMOID && k > 1) w[j] /= ws + 1e-20;
            if (c->moe_topk_scale != 0) w[j] *= c->moe_topk_scale;
        }
        /* the aux loss's scores */
        double ssum = 0;
        for (int e = 0; e < E; e++) ssum += (sc[t][e] = c->moe_score == BE_MOE_SIGMOID ? sigm(lg[t][e]) : exp(lg[t][e] - lse));
        if (c->moe_score == BE_MOE_SIGMOID)
            for (int e = 0; e < E; e++) sc[t][e] /= ssum + 1e-20;
        for (int j = 0; j < k; j++) ww[t][j] = w[j];
        /* the load-balancing loss counts the top-k of the scores without the expert bias */
        double unb[8], taken[8] = {0};
        for (int e = 0; e < E; e++) unb[e] = p->expert_bias ? rank[e] - p->expert_bias[e] : rank[e];
        for (int j = 0; j < k; j++) {
            int best = -1;
            for (int e = 0; e < E; e++)
                if (!taken[e] && (best < 0 || unb[e] > unb[best])) best = e;
            taken[best] = 1, counts[best] += 1, cb[t / T][best] += 1;
        }
    }
    /* capacity (Megatron's apply_router_token_dropping): an expert keeps ceil(T k / E x factor) of
     * its choices, the largest weights (ties to the earlier token) or the earliest tokens */
    if (c->moe_capacity > 0) {
        int cap = (int)ceil((double)BT * k / E * c->moe_capacity);
        for (int e = 0; e < E; e++) {
            int mine[BT * 8], n = 0;
            for (int i = 0; i < BT * k; i++)
                if (r->idx[i] == e) mine[n++] = i;
            for (int a = 0; a < n; a++) /* selection sort by weight, descending, stable */
                for (int b = a + 1; b < n && !c->moe_drop_position; b++) {
                    double wa = ww[mine[a] / k][mine[a] % k], wb = ww[mine[b] / k][mine[b] % k];
                    if (wb > wa) { int tmp = mine[a]; mine[a] = mine[b]; mine[b] = tmp; }
                }
            if (n > cap && !c->moe_drop_position) /* the kept and the dropped must not be near a tie */
                r->margin = fmin(r->margin, ww[mine[cap - 1] / k][mine[cap - 1] % k] - ww[mine[cap] / k][mine[cap] % k]);
            for (int q = cap; q < n; q++) ww[mine[q] / k][mine[q] % k] = 0, r->dropped++;
        }
    }
    for (int t = 0; t < BT; t++) {
        /* the experts, after the shared one (Qwen2-MoE: sigmoid(gate . x) times its MLP) */
        for (int i = 0; i < h; i++) out[t * h + i] = 0;
        if (c->moe_shared_ffn > 0) {
            int S = c->moe_shared_ffn, bS = c->glu ? 2 * S : S;
            double u[64], a[64], gw = 1;
            if (p->sh_gate_w) {
                double gl = 0;
                for (int i = 0; i < h; i++) gl += x[t * h + i] * P(r, p->sh_gate_w, (size_t)i);
                gw = sigm(gl);
            }
            for (int o = 0; o < bS; o++) {
                double s = p->sh_fc_b ? P(r, p->sh_fc_b, (size_t)o) : 0;
                for (int i = 0; i < h; i++) s += x[t * h + i] * P(r, p->sh_fc_w, (size_t)o * h + i);
                u[o] = s;
            }
            double xin[64], y[64];
            ref_expert_lora(r, u, ref_shared_in(r, xin, x + t * h, h, 0, t), p->sh_lora_a[0], p->sh_lora_b[0], 0, h, S);
            ref_expert_lora(r, u + (c->glu ? S : 0), ref_shared_in(r, xin, x + t * h, h, 1, t), p->sh_lora_a[1],
                            p->sh_lora_b[1], 0, h, S);
            for (int f = 0; f < S; f++) a[f] = c->glu ? u[f] * sigm(u[f]) * u[S + f] : gelu(u[f]);
            for (int o = 0; o < h; o++) {
                double s = p->sh_fc2_b ? P(r, p->sh_fc2_b, (size_t)o) : 0;
                for (int f = 0; f < S; f++) s += a[f] * P(r, p->sh_fc2_w, (size_t)o * S + f);
                y[o] = s;
            }
            ref_expert_lora(r, y, ref_shared_in(r, xin, a, S, 2, t), p->sh_lora_a[2], p->sh_lora_b[2], 0, S, h);
            for (int o = 0; o < h; o++) out[t * h + o] += gw * y[o];
        }
        for (int j = 0; j < k; j++) {
            int e = r->idx[t * k + j];
            double u[64], a[64];
            for (int o = 0; o < bF; o++) {
                double s = p->fc_b ? P(r, p->fc_b, (size_t)e * bF + o) : 0;
                for (int i = 0; i < h; i++) s += x[t * h + i] * P(r, p->fc_w, ((size_t)e * bF + o) * h + i);
                u[o] = s;
            }
            double xin[64];
            ref_expert_lora(r, u, ref_lora_in(r, xin, x + t * h, h, 0, e, t), p->lora_a[0], p->lora_b[0], e, h, F); /* gate */
            ref_expert_lora(r, u + (c->glu ? F : 0), ref_lora_in(r, xin, x + t * h, h, 1, e, t), p->lora_a[1],
                            p->lora_b[1], e, h, F); /* up */
            for (int f = 0; f < F; f++) a[f] = c->glu ? u[f] * sigm(u[f]) * u[F + f] : gelu(u[f]);
            double y[64];
            for (int o = 0; o < h; o++) {
                double s = p->fc2_b ? P(r, p->fc2_b, (size_t)e * h + o) : 0;
                for (int f = 0; f < F; f++) s += a[f] * P(r, p->fc2_w, ((size_t)e * h + o) * F + f);
                y[o] = s;
            }
            ref_expert_lora(r, y, ref_lora_in(r, xin, a, F, 2, e, t), p->lora_a[2], p->lora_b[2], e, F, h); /* down */
            for (int o = 0; o < h; o++) out[t * h + o] += ww[t][j] * y[o];
        }
    }
    double aux = 0;
    if (c->moe_seq_aux) { /* each sequence's own, averaged */
        for (int t = 0; t < BT; t++)
            for (int e = 0; e < E; e++) aux += sc[t][e] * cb[t / T][e];
        aux *= c->moe_aux_coeff * E / ((double)k * T * T) / B;
    } else {
        for (int t = 0; t < BT; t++)
            for (int e = 0; e < E; e++) aux += sc[t][e] * counts[e];
        aux *= c->moe_aux_coeff * E / ((double)k * BT * BT);
    }
    double z = c->moe_z_coeff * zsum / BT;
    return r->dscale * (aux + z);
}

static double objective(ref *r, const double *x, const float *R, double *tmp)
{
    double L = ref_moe(r, tmp, x);
    for (int i = 0; i < BT * r->m->cfg.hidden; i++) L += tmp[i] * R[i];
    return L;
}

static const gpt_tensor_info *find(const gpt_model *m, const char *name)
{
    for (int i = 0; i < m->ntensors; i++)
        if (strcmp(m->table[i].name, name) == 0) return &m->table[i];
    return NULL;
}

static void check(arch A, const char *name)
{
    const gpt_config *c = &A.c;
    int h = c->hidden, n = BT * h;
    ps_state ps;
    memset(&ps, 0, sizeof ps);
    ps.world_size = ps.tp = ps.pp = ps.dp = 1;
    ps.world = ps.tp_group = ps.dp_group = ps.pp_group = ps.mp_group = g_world;
    gpt_model *m = gpt_create(c, &ps, g_be, 0, 1, B, 1);
    gpt_acts *acts = gpt_acts_acquire(m);
    acts->B = B;
    acts->training = 0;
    const block_slot *s = &m->layers[0].slot[GPT_SLOT_MLP];
    assert_ptr_equal(s->ops, &moe_ops);
    void *av = acts->layers[0].slot[GPT_SLOT_MLP];
    for (int ti = 0; ti < m->ntensors && gpt_lora(c); ti++) { /* LoRA: B's too nonzero, so A has a gradient */
        const gpt_tensor_info *t = &m->table[ti];
        if (strstr(t->name, ".lora_B")) td_philox_fill_normal(m->params + t->offset, t->numel, 6, 3 + (uint64_t)ti, 0, 0.0f, 0.5f);
    }
    if (c->moe_expert_bias) { /* a bias that moves the choice: +0.25 makes expert 3 chosen more often, -0.3 expert 0 less */
        const gpt_tensor_info *t = find(m, "layers.0.mlp.router.expert_bias");
        assert_non_null(t);
        static const float bias[5] = {-0.3f, 0.05f, 0.0f, 0.25f, -0.1f};
        memcpy(m->params + t->offset, bias, sizeof bias);
    }
    block_io io = {.m = m, .B = B, .scratch = model_kind_scratch(m, m->layers[0].slot[GPT_SLOT_MLP].ops)};
    static const int64_t samples[B] = {1234567, 42}; /* the micro-batch's samples' dataset indices */
    if (c->lora_dropout > 0) /* the layer's LoRA dropout (layer.c slot_io), its mask fixed by the seed */
        io.lora = (be_drop){.p = c->lora_dropout, .seed = 5, .sample = samples, .site = 1 + 3 * c->num_layers};

    float *x = malloc((size_t)n * sizeof(float)), *R = malloc((size_t)n * sizeof(float));
    float *out = malloc((size_t)n * sizeof(float)), *dx = malloc((size_t)n * sizeof(float));
    double *xd = malloc((size_t)n * sizeof(double)), *od = malloc((size_t)n * sizeof(double));
    td_philox_fill_normal(x, (uint64_t)n, 6, 1, 0, 0.0f, 1.0f);
    td_philox_fill_normal(R, (uint64_t)n, 6, 2, 0, 0.0f, 1.0f);
    for (int i = 0; i < n; i++) xd[i] = x[i];
    int32_t ridx[BT * 8];
    ref r = {m, s->p, NULL, 0, 0, ridx, 0, 0, c->lora_dropout > 0 ? &io.lora : NULL};

    m->loss_scale = 0.9f / BT; /* the block's losses then weigh loss_scale x tokens = 0.9 */
    r.dscale = (double)m->loss_scale * BT;
    be_zero(g_be, m->grads, m->numel);
    s->ops->fwd(&io, av, s->p, out, be_f32(x));
    s->ops->bwd(&io, dx, s->g, R, av, s->p, be_f32(x));
    double extra = ref_moe(&r, od, xd);
    printf("%s: the nearest tie is %.3g away (a finite difference moves a score by ~1e-5)%s\n", name, r.margin,
           c->moe_capacity > 0 ? "; choices dropped over capacity:" : "");
    if (c->moe_capacity > 0) {
        printf("  %d of %d\n", r.dropped, BT * c->moe_topk);
        if (c->moe_capacity < 1) assert_true(r.dropped > 0); /* the case must drop some */
    }
    assert_true(r.margin > 1e-3);
    /* the output (a choice other than the reference's would be off by a whole expert's share) */
    double scale = 0, err = 0;
    for (int i = 0; i < n; i++) scale = fmax(scale, fabs(od[i]));
    for (int i = 0; i < n; i++) err = fmax(err, fabs(out[i] - od[i]) / scale);
    printf("%s: forward %.2e relative to the largest output %.3g; losses x dscale %.4g\n", name, err, scale, extra);
    assert_true(err < 1e-5);

    /* the input's gradient */
    double eps = 1e-5, gscale = 0, gerr = 0, *tmp = malloc((size_t)n * sizeof(double));
    double *fd = malloc((size_t)n * sizeof(double));
    for (int i = 0; i < n; i++) {
        double x0 = xd[i];
        xd[i] = x0 + eps;
        double lp = objective(&r, xd, R, tmp);
        xd[i] = x0 - eps;
        double lm = objective(&r, xd, R, tmp);
        xd[i] = x0;
        fd[i] = (lp - lm) / (2 * eps);
        gscale = fmax(gscale, fabs(fd[i]));
    }
    for (int i = 0; i < n; i++) gerr = fmax(gerr, fabs(dx[i] - fd[i]) / gscale);
    printf("%s: input gradient %.2e (largest %.3g)\n", name, gerr, gscale);
    assert_true(gerr < 1e-4);

    /* every tensor of the block: 16 elements each */
    float *wg = malloc(m->numel * sizeof(float));
    be_memcpy(g_be, wg, m->grads, m->numel * sizeof(float), BE_D2H);
    int checked = 0;
    double perr = 0;
    for (int ti = 0; ti < m->ntensors; ti++) {
        const gpt_tensor_info *t = &m->table[ti];
        if (strncmp(t->name, "layers.0.mlp.", 13) != 0) continue;
        if (t->frozen) { /* LoRA: the base has no gradient (its pointer NULL) */
            assert_true(gpt_lora(c) && !strstr(t->name, ".lora_"));
            continue;
        }
        for (int e = 0; e < 16; e++) {
            size_t i = (size_t)(((uint64_t)e * 2654435761u + (uint64_t)ti * 40503u) % t->numel);
            float *pp = m->params + t->offset + i;
            ref rp = r, rm = r;
            rp.bump = pp, rp.by = eps, rm.bump = pp, rm.by = -eps;
            double g = (objective(&rp, xd, R, tmp) - objective(&rm, xd, R, tmp)) / (2 * eps);
            perr = fmax(perr, fabs(wg[t->offset + i] - g) / fmax(gscale, 1e-3));
            checked++;
        }
    }
    printf("%s: %d parameter gradients %.2e\n", name, checked, perr);
    int tensors = (c->disable_bias ? 3 : 5) + (c->moe_shared_ffn ? (c->disable_bias ? 2 : 4) + c->moe_shared_gate : 0) +
                  c->moe_expert_bias; /* its gradient is 0, as the reference's: only the choice moves with it */
    if (gpt_lora(c)) /* only the adapters train: A and B of each target, the experts' and the shared expert's */
        tensors = 2 * (gpt_lora_on(c, GPT_LORA_GATE) + gpt_lora_on(c, GPT_LORA_UP) + gpt_lora_on(c, GPT_LORA_DOWN)) *
                  (c->moe_shared_ffn > 0 ? 2 : 1);
    assert_true(checked == 16 * tensors);
    assert_true(perr < 1e-4);
    free(wg), free(fd), free(tmp), free(x), free(R), free(out), free(dx), free(xd), free(od);
    gpt_acts_release(m, acts);
    gpt_free(m);
}

static void gpt2_softmax(void **st) { (void)st; check(make(0, BE_MOE_SOFTMAX, 0, 0), "GeLU experts, softmax after top-k"); }
static void gpt2_pre_softmax(void **st)
{
    (void)st;
    check(make(0, BE_MOE_SOFTMAX, 1, 2.0f), "GeLU experts, softmax before top-k, scaled 2");
}
static void llama_softmax(void **st) { (void)st; check(make(1, BE_MOE_SOFTMAX, 0, 0), "SwiGLU experts, softmax after top-k"); }
static void llama_sigmoid(void **st) { (void)st; check(make(1, BE_MOE_SIGMOID, 0, 0), "SwiGLU experts, sigmoid"); }
static void qwen_shared_gated(void **st)
{
    (void)st;
    check(make_shared(1, BE_MOE_SOFTMAX, 0, 0, 14, 1), "SwiGLU experts and a gated shared expert (Qwen2-MoE)");
}
/* LoRA on every expert's gate, up and down (rank 2, alpha 3: scaling 1.5), the base and the router
 * frozen: each expert's adapters change its own tokens' outputs only, their gradients by finite
 * differences of the double reference */
static void llama_lora_experts(void **st)
{
    (void)st;
    arch a = make(1, BE_MOE_SOFTMAX, 0, 0);
    a.c.lora_rank = 2, a.c.lora_alpha = 3.0f;
    a.c.lora_targets = 1 << GPT_LORA_GATE | 1 << GPT_LORA_UP | 1 << GPT_LORA_DOWN;
    check(a, "SwiGLU experts with LoRA on gate, up and down");
    a.c.moe_grouped = 1;
    check(a, "SwiGLU experts with LoRA on gate, up and down, grouped GEMMs");
}
static void gpt2_lora_experts(void **st)
{
    (void)st;
    arch a = make(0, BE_MOE_SOFTMAX, 0, 0);
    a.c.lora_rank = 3, a.c.lora_alpha = 6.0f;
    a.c.lora_targets = 1 << GPT_LORA_UP | 1 << GPT_LORA_DOWN;
    check(a, "GeLU experts (biases) with LoRA on up and down");
}
/* ... with --lora-dropout 0.3: each expert row's adapter input masked by its token, module and expert
 * (the reference draws the masks by that key itself), the masks fixed under the finite differences */
static void lora_experts_dropout(void **st)
{
    (void)st;
    arch a = make(1, BE_MOE_SOFTMAX, 0, 0);
    a.c.lora_rank = 2, a.c.lora_alpha = 3.0f, a.c.lora_dropout = 0.3f;
    a.c.lora_targets = 1 << GPT_LORA_GATE | 1 << GPT_LORA_UP | 1 << GPT_LORA_DOWN;
    check(a, "SwiGLU experts with LoRA on gate, up and down, dropout 0.3");
    a.c.moe_grouped = 1;
    check(a, "SwiGLU experts with LoRA on gate, up and down, dropout 0.3, grouped GEMMs");
    a = make(0, BE_MOE_SOFTMAX, 0, 0);
    a.c.lora_rank = 3, a.c.lora_alpha = 6.0f, a.c.lora_dropout = 0.3f;
    a.c.lora_targets = 1 << GPT_LORA_UP | 1 << GPT_LORA_DOWN;
    check(a, "GeLU experts (biases) with LoRA on up and down, dropout 0.3");
}
/* LoRA on the shared expert too (Qwen2-MoE: gated, SwiGLU): the dense MLP's adapters on its gate,
 * up and down beside the routed experts', without and with dropout */
static void qwen_lora_shared(void **st)
{
    (void)st;
    arch a = make_shared(1, BE_MOE_SOFTMAX, 0, 0, 14, 1);
    a.c.lora_rank = 2, a.c.lora_alpha = 3.0f;
    a.c.lora_targets = 1 << GPT_LORA_GATE | 1 << GPT_LORA_UP | 1 << GPT_LORA_DOWN;
    check(a, "SwiGLU experts and a gated shared expert, LoRA on gate, up and down");
    a.c.lora_dropout = 0.3f;
    check(a, "SwiGLU experts and a gated shared expert, LoRA on gate, up and down, dropout 0.3");
    a = make_shared(0, BE_MOE_SOFTMAX, 0, 0, 14, 0);
    a.c.lora_rank = 3, a.c.lora_alpha = 6.0f;
    a.c.lora_targets = 1 << GPT_LORA_UP | 1 << GPT_LORA_DOWN;
    check(a, "GeLU experts and an ungated shared expert (biases), LoRA on up and down");
}

static void llama_sigmoid_bias(void **st)
{
    (void)st;
    arch a = make(1, BE_MOE_SIGMOID, 0, 0);
    a.c.moe_expert_bias = 1, a.c.moe_bias_rate = 0.01f;
    check(a, "SwiGLU experts, sigmoid with the expert bias");
}

/* Megatron's update: bias[e] += rate sign(mean - tokens[e]), by hand */
static void expert_bias_update(void **st)
{
    (void)st;
    arch a = make(1, BE_MOE_SIGMOID, 0, 0);
    a.c.moe_expert_bias = 1, a.c.moe_bias_rate = 0.01f;
    ps_state ps;
    memset(&ps, 0, sizeof ps);
    ps.world_size = ps.tp = ps.pp = ps.dp = 1;
    ps.world = ps.tp_group = ps.dp_group = ps.pp_group = ps.mp_group = g_world;
    gpt_model *m = gpt_create(&a.c, &ps, g_be, 0, 1, B, 1);
    const gpt_tensor_info *t = find(m, "layers.0.mlp.router.expert_bias");
    assert_non_null(t);
    const double tokens[5] = {10, 40, 20, 20, 10}; /* mean 20 */
    gpt_moe_update_expert_bias(m, tokens);
    gpt_moe_update_expert_bias(m, tokens);
    const float *b = m->params + t->offset;
    assert_true(b[0] == 0.02f && b[1] == -0.02f && b[2] == 0 && b[3] == 0 && b[4] == 0.02f);
    gpt_free(m);
}

static void capacity_probs(void **st)
{
    (void)st;
    arch a = make(1, BE_MOE_SOFTMAX, 0, 0);
    a.c.moe_capacity = 0.6f; /* 16 tokens x 2 / 5 experts x 0.6: 4 rows an expert */
    check(a, "SwiGLU experts, capacity 0.6, dropping the lowest weights");
}
static void seq_aux(void **st)
{
    (void)st;
    arch a = make(1, BE_MOE_SIGMOID, 0, 0);
    a.c.moe_seq_aux = 1;
    check(a, "SwiGLU experts, sigmoid, the load-balancing loss per sequence");
}
static void capacity_position(void **st)
{
    (void)st;
    arch a = make(0, BE_MOE_SOFTMAX, 0, 0);
    a.c.moe_capacity = 0.8f, a.c.moe_drop_position = 1;
    check(a, "GeLU experts, capacity 0.8, dropping the latest tokens");
}

/* padded to capacity: the padding rows (zeros in, their outputs unused, no gradient back: the
 * experts' biases would give them one) change nothing the reference sees; 1.5 pads every expert to
 * 10 rows (50 > the 32 choices), 0.6 drops and pads to 4 */
static void capacity_padded(void **st)
{
    (void)st;
    arch a = make(0, BE_MOE_SOFTMAX, 0, 0);
    a.c.moe_capacity = 1.5f, a.c.moe_pad = 1;
    check(a, "GeLU experts with biases, capacity 1.5, padded to it");
    a = make(1, BE_MOE_SOFTMAX, 0, 0);
    a.c.moe_capacity = 0.6f, a.c.moe_pad = 1;
    check(a, "SwiGLU experts, capacity 0.6, dropping the lowest weights, padded");
}

/* --moe-grouped-gemm: the experts' GEMMs in one grouped call each, against the same reference */
static void grouped(void **st)
{
    (void)st;
    arch a = make(0, BE_MOE_SOFTMAX, 0, 0);
    a.c.moe_grouped = 1;
    check(a, "GeLU experts with biases, grouped GEMMs");
    a = make_shared(1, BE_MOE_SOFTMAX, 1, 0, 9, 1);
    a.c.moe_grouped = 1;
    check(a, "SwiGLU experts and a gated shared expert, grouped GEMMs");
}

/* --moe-router-topk-scaling-factor under the other score functions than softmax before top-k,
 * against the reference (its weights times the factor) */
static void gpt2_softmax_scaled(void **st)
{
    (void)st;
    check(make(0, BE_MOE_SOFTMAX, 0, 2.0f), "GeLU experts, softmax after top-k, scaled 2");
}
static void llama_sigmoid_scaled(void **st)
{
    (void)st;
    check(make(1, BE_MOE_SIGMOID, 0, 2.5f), "SwiGLU experts, sigmoid, scaled 2.5");
}

/* The block's output on the test input with the router's weights zeroed (every logit 0). */
static void zero_router_out(arch A, float *out)
{
    ps_state ps;
    memset(&ps, 0, sizeof ps);
    ps.world_size = ps.tp = ps.pp = ps.dp = 1;
    ps.world = ps.tp_group = ps.dp_group = ps.pp_group = ps.mp_group = g_world;
    gpt_model *m = gpt_create(&A.c, &ps, g_be, 0, 1, B, 1);
    gpt_acts *acts = gpt_acts_acquire(m);
    acts->B = B;
    acts->training = 0;
    const block_slot *s = &m->layers[0].slot[GPT_SLOT_MLP];
    const gpt_tensor_info *t = find(m, "layers.0.mlp.router.weight");
    assert_non_null(t);
    memset(m->params + t->offset, 0, t->numel * sizeof(float));
    block_io io = {.m = m, .B = B, .scratch = model_kind_scratch(m, s->ops)};
    float *x = malloc((size_t)BT * A.c.hidden * sizeof(float));
    td_philox_fill_normal(x, (uint64_t)BT * A.c.hidden, 6, 1, 0, 0.0f, 1.0f);
    s->ops->fwd(&io, acts->layers[0].slot[GPT_SLOT_MLP], s->p, out, be_f32(x));
    free(x);
    gpt_acts_release(m, acts);
    gpt_free(m);
}

/* The scaling factor by hand: with every logit 0 each token takes experts 0 and 1 (ties to the
 * lower index) and its output is w0 y0 + w1 y1 with the same y (the same seed, the same experts).
 * Softmax after top-k unscaled: w = 1/2 each, the unit here. Sigmoid: 0.5 each normalised over the
 * two, 1/2, scaled 2.5: 1.25 (2.5 units); softmax after top-k scaled 2: 1 (2 units); softmax before
 * top-k (1/5 each) scaled 2: 0.4 (0.8 units). */
static void scale_by_hand(void **st)
{
    (void)st;
    static const struct { int score, pre; float scale; double units; const char *name; } cases[] = {
        {BE_MOE_SIGMOID, 0, 0, 1.0, "sigmoid"},
        {BE_MOE_SIGMOID, 0, 2.5f, 2.5, "sigmoid, scaled 2.5"},
        {BE_MOE_SOFTMAX, 0, 2.0f, 2.0, "softmax after top-k, scaled 2"},
        {BE_MOE_SOFTMAX, 1, 2.0f, 0.8, "softmax before top-k, scaled 2"},
    };
    int n = BT * 12;
    float *unit = malloc((size_t)n * sizeof(float)), *out = malloc((size_t)n * sizeof(float));
    zero_router_out(make(1, BE_MOE_SOFTMAX, 0, 0), unit);
    double big = 0;
    for (int i = 0; i < n; i++) big = fmax(big, fabs(unit[i]));
    assert_true(big > 0.1);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        zero_router_out(make(1, cases[c].score, cases[c].pre, cases[c].scale), out);
        double err = 0;
        for (int i = 0; i < n; i++) err = fmax(err, fabs(out[i] - cases[c].units * unit[i]) / (cases[c].units * big));
        printf("scaling by hand, %s: %g units, off by %.2e relative\n", cases[c].name, cases[c].units, err);
        assert_true(err < 1e-6);
    }
    free(unit), free(out);
}

static void gpt2_shared(void **st) { (void)st; check(make_shared(0, BE_MOE_SOFTMAX, 1, 0, 9, 0), "GeLU experts and a shared expert"); }

int main(int argc, char **argv)
{
    g_world = comm_world_init(&argc, &argv);
    g_be = be_create("cpu", 2);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(gpt2_softmax), cmocka_unit_test(gpt2_pre_softmax), cmocka_unit_test(llama_softmax),
        cmocka_unit_test(llama_sigmoid), cmocka_unit_test(qwen_shared_gated), cmocka_unit_test(gpt2_shared),
        cmocka_unit_test(llama_sigmoid_bias), cmocka_unit_test(llama_lora_experts),
        cmocka_unit_test(gpt2_lora_experts), cmocka_unit_test(lora_experts_dropout),
        cmocka_unit_test(qwen_lora_shared), cmocka_unit_test(expert_bias_update), cmocka_unit_test(capacity_probs),
        cmocka_unit_test(capacity_position), cmocka_unit_test(seq_aux), cmocka_unit_test(capacity_padded), cmocka_unit_test(grouped),
        cmocka_unit_test(gpt2_softmax_scaled), cmocka_unit_test(llama_sigmoid_scaled), cmocka_unit_test(scale_by_hand),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    be_free(g_be);
    comm_world_finalize(g_world);
    return rc;
}
