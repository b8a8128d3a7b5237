/* The layout planner (`trident plan`, docs/plan.md). Owns a model of a training iteration's time
 * and of a device's memory for a GPT model laid out over a cluster — tensor, pipeline (1F1B or
 * interleaved) and data parallelism, micro-batch size, recomputation, sequence parallelism, the
 * distributed optimizer — the cluster descriptions it runs on (presets of the Megatron papers'
 * machines, JSON files, or this machine measured), and the search over layouts. */
#ifndef TRIDENT_PLAN_H
#define TRIDENT_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "trident/gpt_config.h"

/* A cluster: nodes of identical devices. Bandwidths are per device and per direction. Ranks fill
 * the nodes in order (rank r on node r / gpus_per_node), Megatron's rank order over them
 * (rank = tp_rank + tp (cp_rank + cp (dp_rank + dp pp_rank))): a group whose ranks sit on one node uses the intra
 * figures, one that spans nodes the inter ones (plan_group_link). */
typedef struct plan_cluster {
    char name[64];
    int gpus_per_node;     /* devices (trident: MPI ranks) a node */
    double peak[3];        /* FLOP/s per device in fp32, bf16, fp16 (be_dtype order) */
    double mem_gib;        /* device memory */
    double hbm_bw;         /* bytes/s of memory-bound kernels (norms, softmax, the optimizer) */
    double intra_bw;       /* bytes/s between devices of a node (NVLink / NVSwitch) */
    double intra_lat;      /* s per message step inside a node */
    double inter_bw;       /* bytes/s a device gets across nodes when every device of its node crosses at
                            * once (its share of the node's NICs) */
    double inter_lat;      /* s per message step across nodes */
    /* GEMM efficiency, a fraction of the peak: gemm_emax * f(M) f(N) f(K), f(d) = d / (d + gemm_half) */
    double gemm_emax, gemm_half;
    double mem_reserved_gib; /* what the framework and libraries hold besides the model (CUDA context, allocator) */
    /* Whose training the model describes: Megatron's on GPUs (16-bit weights and activations,
     * fp32 master weights; Korthikanti's activations), or trident's own on CPUs (fp32 weights,
     * grads and Adam state; activations as trident lays them out, src/train/memory.c): what
     * --calibrate measures. */
    int trident_cpu;
    int nodes;             /* nodes in the cluster; 0: as many as a layout needs */
    double cores_per_node; /* the cores a node's ranks get, as --calibrate saw them (a CPU quota may make it
                            * fractional; information only; 0 when not given) */
    int trident_gpu;       /* trident's own on GPUs (the cuda backend; "framework": "trident-cuda"): the
                            * same memory and communication model as trident_cpu (set with it) */
} plan_cluster;

/* Fills c with a preset ("dgx2h-v100", "dgx-a100-80gb", "dgx-h100"); -1 when unknown. */
int plan_cluster_preset(const char *name, plan_cluster *c);
/* Names of the presets, "a, b, c". */
const char *plan_cluster_presets(void);
/* Reads a cluster from a JSON file (the fields above; a "base" preset may give the rest).
 * 0, or -1 with one line in err. */
int plan_cluster_load(const char *path, plan_cluster *c, char *err, size_t errlen);
/* The cluster as JSON text (caller frees), e.g. what --calibrate measured. */
char *plan_cluster_json(const plan_cluster *c);

struct comm;
/* This machine as trident runs on it, one device per rank of `world` (src/plan/calibrate.c):
 * the sgemm peak and its curve over GEMM sizes, the copy bandwidth, the MPI collectives' bandwidth
 * and latency between the ranks, and what a rank holds before a model, on backend `backend_name`
 * (be_create). Collective over world. */
void plan_calibrate(plan_cluster *c, const char *backend_name, double seconds, struct comm *world);

typedef enum { PLAN_RC_NONE, PLAN_RC_SELECTIVE, PLAN_RC_FULL } plan_recompute;
/* --dp-collectives: on a trident-cpu cluster, a dp group with k >= 2 of its ranks on each node it
 * spans either reduces inside each node, crosses the network once per rail of local ranks on 1/k
 * of the gradients and gathers inside again (hierarchical), or runs one ring over all (flat);
 * auto takes the cheaper, as the trainer's start-up measurement does. */
typedef enum { PLAN_DP_AUTO, PLAN_DP_FLAT, PLAN_DP_HIER } plan_dp_collectives;

/* --cp-comm-type: how attention reaches the other context-parallel ranks' keys and values. */
typedef enum { PLAN_CP_P2P, PLAN_CP_ALL_GATHER, PLAN_CP_A2A } plan_cp_comm;

typedef struct plan_layout {
    int tp, pp, dp;
    int vp;                /* model chunks per pipeline rank (interleaved schedule when > 1) */
    int mbs;
    plan_recompute recompute; /* full: every layer (Megatron's uniform, 1 layer a group) */
    int sp;                /* sequence parallelism */
    int distopt;           /* distributed optimizer */
    int overlap_grad;      /* --overlap-grad-reduce: the gradient buckets that close before the end of the
                            * backward reduce behind the last micro-batch's remaining backward */
    int no_scatter_gather; /* --no-scatter-gather-tensors-in-pipeline: with tp > 1 every tp rank sends the
                            * whole boundary activation (by default each sends 1/tp, the receivers all-gather) */
    plan_dp_collectives dp_collectives; /* trident-cpu only; 0: auto */
    int overlap_param;     /* --overlap-param-gather (with distopt): the parameter all-gather behind the next
                            * forward */
    double bucket_elems;   /* --ddp-bucket-size, gradient elements a bucket; 0: the default 40e6 */
    int ep;                /* a mixture of experts: --expert-model-parallel-size (0: 1), carved out of dp x cp as
                            * the trainer's: ep consecutive dp x cp ranks, the experts' gradients over the
                            * rest (dp x cp / ep, PLAN_GROUP_EDP) */
    int ep_alltoall;       /* --moe-token-dispatcher-type alltoall (else allgather) */
    int cp;                /* --context-parallel-size (0: 1): each sample's sequence split over cp ranks in
                            * every layer; the rank order tp-cp-dp-pp, gradients reduced over dp x cp */
    plan_cp_comm cp_comm;  /* --cp-comm-type (0: p2p, Megatron's default) */
} plan_layout;

/* What a training iteration costs: a model, its batch and dtype. */
typedef struct plan_job {
    gpt_config cfg;        /* seq, vocab (padded) set */
    int64_t gbs;           /* global batch (samples) */
    int dtype;             /* 0 fp32, 1 bf16, 2 fp16 (be_dtype) */
} plan_job;

typedef struct plan_result {
    plan_layout l;
    int fits;              /* memory within the device's */
    int micro;             /* micro-batches per iteration per pipeline */
    double iter_s;         /* predicted time per iteration */
    double flops;          /* model FLOPs of an iteration (Megatron's formula, recomputation's included) */
    double tflops_per_gpu; /* flops / iter_s / devices / 1e12 */
    double mfu;            /* tflops_per_gpu against the device's peak */
    /* the iteration's time, in seconds: what the critical path spends on each */
    double t_compute;      /* forward and backward GEMMs and kernels of the pipeline's busiest stage */
    double t_recompute;    /* of which the forward re-run by recomputation */
    double t_tp;           /* tensor-parallel collectives */
    double t_bubble;       /* pipeline fill and drain */
    double t_p2p;          /* pipeline transfers (and the tied embedding's gradient sum between the first
                            * and last stages) */
    double t_dp;           /* data-parallel reduction not hidden behind the backward */
    double t_optimizer;    /* the optimizer step (and the parameter all-gather with the distributed optimizer) */
    /* communication the critical path waits for, per kind of group, named as the trainer's metrics
     * file names its measured figures (<group>_exposed_ms): tp (the layers' collectives and the
     * scatter/gather's all-gather over the tp group), pp (stage-to-stage transfers), embd (the tied
     * embedding's gradient sum between the first and last stages), dp (the gradients' reduction and
     * the distributed optimizer's all-gather not hidden) */
    double x_tp, x_pp, x_embd, x_dp;
    double t_ep;           /* a mixture of experts' token exchange over the expert-parallel group (the
                            * critical path's; never hidden: x_ep the same) */
    /* context parallelism's attention exchange over the cp group, forward and backward (and the
     * recomputed forward's): t_cp all of it (in flight), x_cp what the critical path waits for (p2p
     * hides a ring step behind the block attention at hand; all_gather and a2a are blocking) */
    double t_cp, x_cp;
    int dp_hier;           /* the dp collectives priced hierarchical (trident-cpu, k >= 2 a node) */
    /* memory of the busiest device, bytes */
    double m_params, m_grads, m_optimizer, m_acts, m_other, m_total;
} plan_result;

/* ---- the terms (exposed for the unit tests) ---- */
/* Ring all-reduce / all-gather (or reduce-scatter) of `bytes` (the whole buffer) over n ranks. */
double plan_allreduce_s(double bytes, int n, double bw, double lat);
double plan_allgather_s(double bytes, int n, double bw, double lat);
/* Seconds of an (M, K) x (K, N) GEMM in the job's dtype. */
double plan_gemm_s(const plan_cluster *c, int dtype, double M, double N, double K);
/* Activation bytes one layer keeps for a micro-batch (Korthikanti et al. 2022, 16-bit
 * activations): sbh(34 + 5as/h) without parallelism; tp t: sbh(10 + 24/t + 5as/(ht)); with
 * sequence parallelism sbh/t (34 + 5as/h); selective recomputation drops the 5as/h term; full
 * recomputation keeps the layer input, 2sbh (/t with sequence parallelism). */
double plan_layer_act_bytes(const gpt_config *c, int mbs, int tp, int sp, plan_recompute rc);
/* Micro-batches whose activations a pipeline's first stage holds at once: min(p, m) for 1F1B,
 * times (1 + (p - 1) / (p v)) interleaved (Megatron's interleaved schedule). */
double plan_inflight(int pp, int vp, int micro);
/* Context parallelism's attention exchange for one layer and micro-batch on one rank, in seconds,
 * over a cp group's link (bw, lat): `flight` all of it, forward, backward and `redo` recomputed
 * forwards (0, or 1 with selective or full recomputation), and `exposed` what the compute does not
 * hide. kv_bytes: the key/value rows a rank holds (mbs s/cp of them, the widths its comm type
 * sends); qo_bytes: its query and output rows (a2a exchanges them too); block_s: one block's
 * attention forward (a rank's queries against one rank's keys: the core's time / cp). p2p: a ring
 * of cp - 1 sends of kv_bytes forward, each behind one block's attention; backward cp - 1 sends of
 * the keys/values and their gradients (2 kv_bytes) behind twice a block, and the gradients' last
 * hop home. all_gather: the keys/values gathered forward (and again backward), their gradients
 * reduce-scattered. a2a: four all-to-alls forward (q, k, v to heads, the output back), (cp-1)/cp of
 * the rows each, as many backward (trident's backward exchanges q, k, v again: twice_bwd). */
void plan_cp_exchange_s(plan_cp_comm type, int cp, double kv_bytes, double qo_bytes, double block_s, double bw,
                        double lat, int redo, int twice_bwd, double *flight, double *exposed);

/* The groups: PLAN_GROUP_DP is the gradients' group, dp x cp (same tp and pp rank; the dp ranks
 * alone without context parallelism); PLAN_GROUP_CP the ranks sharing a sample's sequence;
 * PLAN_GROUP_EP ep consecutive ranks of dp x cp (dp x cp rank = cp_rank + cp dp_rank), the token
 * exchange's; PLAN_GROUP_EDP the experts' gradients' group, the dp x cp / ep ranks of one ep rank
 * (dp x cp rank mod ep). */
typedef enum { PLAN_GROUP_TP, PLAN_GROUP_PP, PLAN_GROUP_DP, PLAN_GROUP_EP, PLAN_GROUP_CP, PLAN_GROUP_EDP } plan_group;
/* The link the collectives of a layout's tp, pp or dp groups run over, given the placement rule
 * above: the intra-node bandwidth and latency when every group of that kind sits inside a node,
 * else the inter-node ones. On a trident-cpu cluster the ranks of a node share its one link, so a
 * group with k ranks on each node it spans (a ring crosses each node's link once, and the node's
 * K / k groups at once) gets k shares of it: k * inter_bw, at most intra_bw. Writes *bw and *lat;
 * returns the most nodes one group spans (1: inside a node). */
int plan_group_link(const plan_cluster *c, const plan_layout *l, plan_group g, double *bw, double *lat);

/* Evaluates a layout; 0, or -1 with why in err when the layout is impossible (sizes that do not
 * divide, more devices than the cluster's nodes hold). */
int plan_evaluate(const plan_job *j, const plan_cluster *c, const plan_layout *l, plan_result *r, char *err,
                  size_t errlen);

/* What a search tried, to say why nothing fits. */
typedef struct plan_search_why {
    int priced;          /* layouts evaluated (fitting or not) */
    int batch_refused;   /* (tp, pp, dp) shapes skipped: dp does not divide the global batch */
    int batch_dp;        /* ... the smallest such dp */
    double least_bytes;  /* the least memory a priced layout needs (0: none priced) */
    char refused[256];   /* plan_evaluate's first reason for refusing a layout ("" when none) */
} plan_search_why;

/* Every layout of n devices (tp a power of two up to a node, cp dividing the devices left with
 * seq % 2 cp == 0 (and the heads and groups of a tp rank for a2a) at opts's comm type (a search
 * does not vary it; cp > 1 at micro-batch size 1; with experts too), ep a power of two dividing
 * the experts and dp x cp, pp dividing the layers, mbs dividing the per-replica batch,
 * interleaving, recomputation, sequence parallelism, the
 * distributed optimizer), the ones that fit sorted fastest first into out (up to cap). Every
 * layout takes opts's no_scatter_gather, dp_collectives, overlap_param (with the distributed
 * optimizer) and bucket_elems (opts NULL: the defaults). Fills *why (NULL: not asked). Returns how
 * many fit (may exceed cap). */
int plan_search(const plan_job *j, const plan_cluster *c, int n, const plan_layout *opts, plan_result *out, int cap,
                plan_search_why *why);

/* `trident train` flags of a layout: "--tensor-model-parallel-size 8 ..." */
void plan_layout_flags(const plan_layout *l, int num_layers, char *out, size_t len);

#endif
