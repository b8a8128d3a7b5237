/* The MoE block's private parts shared by moe.c (routing, dispatch, the experts' GEMMs) and
 * moe_lora.c (LoRA on the experts and the shared expert). */
#ifndef TRIDENT_MOE_IMPL_H
#define TRIDENT_MOE_IMPL_H

#include <math.h>

#include "block.h"
#include "lora.h"

typedef struct moe_acts {
    float *logits;    /* (T, E) */
    int32_t *idx;     /* (T, k): the chosen experts */
    float *probs;     /* (T, k): their weights */
    int32_t *row;     /* (T, k): each choice's row in the expert-sorted buffers */
    int32_t *count;   /* (E): rows of each expert (the tokens it takes) */
    int32_t *routed;  /* (E): the tokens routed to it, before any were dropped over its capacity */
    int32_t *aux_count; /* (E): what the load-balancing loss counts: routed, or with the expert bias the
                         * unbiased top-k's (Megatron's compute_routing_scores_for_aux_loss) */
    int32_t *aux_idx; /* (T, k) that top-k, with the expert bias */
    int32_t *seq_count; /* (B, E) seq_aux_loss: what it counts, per sequence */
    float *aux_probs; /* (T, k) its weights (unused) */
    int dropped;      /* (token, expert) choices dropped over capacity in this micro-batch */
    int near_ties;    /* tokens whose last chosen expert and first left out score within float noise */
    float *xe;        /* (T k, h): the input rows in expert order */
    float *he;        /* (Rmax, bF): fc's output, on this rank's experts' rows */
    float *ae;        /* (Rmax, F): the activation's */
    float *ye;        /* (T k, h): the experts' outputs, back in xe's order */
    float *sh_he;     /* the shared expert: (T, bS) fc's output */
    float *sh_ae;     /* (T, S) the activation's */
    float *sh_ye;     /* (T, h) its output */
    float *sh_gy;     /* (T, h) ... gated */
    float *sh_glog;   /* (T) the gate's logit */
    float *sh_g;      /* (T) sigmoid of it */
    int32_t *sh_idx;  /* (T) 0: the gate as a router of one expert (be_moe_route_*) */
    int32_t *ident;   /* (T) n: the rows of the shared expert's combine */
    int32_t *rcount;  /* (ep, El) expert parallelism: the rows each rank of the group sent each of this
                       * rank's El experts */
    int32_t *lcount;  /* (El) the rows of each of this rank's experts (count's own without ep) */
    int32_t *rowm;    /* whole experts split over tp: (T, k) row, or -1 where the expert is another tp rank's;
                       * NULL otherwise (row serves) */
    float *xl;        /* (Rmax, h) with ep: this rank's experts' input rows, expert by expert, each one's
                       * by source rank then token (without ep: xe) */
    int32_t *grow;    /* (ep T, k) the allgather dispatcher: each gathered choice's row among this rank's
                       * experts' (-1: another rank's expert, or dropped) */
    float *gprobs;    /* (ep T, k) the gathered weights */
    float *x32;       /* (T, h) the input in fp32 when the layer keeps it in the GEMMs' dtype (bf16, fp16) */
    float *su[3];     /* LoRA on the experts: (Rmax, r) each target's low-rank activation, row by row as xl */
    float *sh_su[3];  /* (T, r) the shared expert's, with LoRA on it */
    int64_t *tok;     /* (Rmax) --lora-dropout on the experts: each of xl's rows' token, sample seq + position
                       * (the dropout masks' key; host memory: the CPU backend's) */
    lora_scratch lora; /* generation's step: its scratch (a micro-batch's is the slot's, moe_scratch's) */
    double aux, z;    /* this micro-batch's load-balancing and z losses without their coefficients */
    int E;
} moe_acts;

typedef struct {
    float *dlogits;   /* (T, E) */
    float *dprobs;    /* (T, k) */
    float *dye;       /* (T k, h) */
    float *dae;       /* (T k, F) */
    float *dhe;       /* (T k, bF) */
    float *dxe;       /* (T k, h) */
    float *dyl;       /* with ep: (Rmax, h) dye on this rank's experts' rows */
    float *dxl;       /* (Rmax, h) their input's gradient */
    float *yl;        /* (Rmax, h) their output (the forward's) */
    float *xchg;      /* (Rmax, h) rows as they cross the expert-parallel group: by source rank */
    float *gbuf;      /* (ep T, h) allgather: the group's tokens, then their partial outputs (and back) */
    float *gdprobs;   /* (ep T, k) allgather: the gathered weights' partial gradients */
    float *sh_dye;    /* the shared expert's: (T, h) */
    float *sh_dae;    /* (T, S) */
    float *sh_dhe;    /* (T, bS) */
    float *sh_dg;     /* (T) the gate's weight's gradient through sigmoid, then its logit's */
    float *sh_dglog;  /* (T) */
    lora_scratch lora; /* LoRA on the experts: the adapters' scratch */
} moe_scratch;

/* Expert parallelism of the stage's ranks (1 without; generation and the memory count run one) */
static inline int ep_of(const gpt_model *m) { return m->ps && m->ps->ep > 1 ? m->ps->ep : 1; }

/* --expert-tensor-parallel-size 1 under tp: each expert whole, tp rank r holding experts
 * [r E / tp, (r + 1) E / tp) (split over ep further); else each expert split over tp. */
static inline int whole_experts(const gpt_model *m) { return m->cfg.moe_etp1 && m->tp > 1; }
/* The tensor-parallel split of each expert's hidden width: tp, or 1 with whole experts. */
static inline int expert_tp(const gpt_model *m) { return whole_experts(m) ? 1 : m->tp; }
/* This rank's tp rank's first expert, and the experts each rank of its ep group holds. */
static inline int expert_base(const gpt_model *m) { return whole_experts(m) ? m->ps->tp_rank * (m->cfg.num_experts / m->tp) : 0; }
static inline int local_experts(const gpt_model *m) { return m->cfg.num_experts / ep_of(m) / (whole_experts(m) ? m->tp : 1); }
/* The rows of this rank's combine: each choice's, less other tp ranks' experts when they hold them. */
static inline const int32_t *rows_here(const moe_acts *a) { return a->rowm ? a->rowm : a->row; }

/* An expert's capacity in a micro-batch of T tokens (--moe-expert-capacity-factor): ceil(T k / E f). */
static inline int64_t capacity_of(const gpt_config *c, int64_t T)
{
    return (int64_t)ceil((double)T * c->moe_topk / c->num_experts * c->moe_capacity);
}

/* The rows of a rank's T tokens of a micro-batch in expert order: T k, or padded every expert's
 * capacity, that of the micro-batch's T cp tokens (cp: the context-parallel ranks holding its
 * chunks, 1 without): a rank keeps at most that many of an expert's tokens. */
static inline int64_t src_rows(const gpt_config *c, int64_t T, int cp)
{
    return c->moe_pad ? c->num_experts * capacity_of(c, T * cp) : T * c->moe_topk;
}

/* LoRA on the experts and the shared expert (moe_lora.c). */
void moe_expert_lora_fc_fwd(const gpt_model *m, moe_acts *a, const lora_scratch *ls, const moe_params *p, float *he,
                            const float *xl, int El, int F, const be_drop *ld);
void moe_expert_lora_fc2_fwd(const gpt_model *m, moe_acts *a, const lora_scratch *ls, const moe_params *p,
                             float *yl, const float *ae, int El, int F, const be_drop *ld);
void moe_expert_lora_fc2_bwd(const gpt_model *m, const moe_acts *a, const lora_scratch *ls, const moe_params *p,
                             moe_params *g, float *dae, const float *dyl, int El, int F, const be_drop *ld);
void moe_expert_lora_fc_bwd(const gpt_model *m, const moe_acts *a, const lora_scratch *ls, const moe_params *p,
                            moe_params *g, float *dxl, const float *dhe, const float *xl, int El, int F,
                            const be_drop *ld);
int moe_has_shared_lora(const moe_params *p);
void moe_shared_lora_fwd(const gpt_model *m, moe_acts *a, const lora_scratch *ls, const moe_params *p,
                         const float *xf, const float *b2, int T, int S, const be_drop *ld);
void moe_shared_lora_bwd(const gpt_model *m, const moe_acts *a, moe_scratch *s, const moe_params *p, moe_params *g,
                         float *dx, const float *dsh, const float *xf, int T, int S, const be_drop *ld);
int moe_has_expert_lora(const moe_params *p);

#endif
