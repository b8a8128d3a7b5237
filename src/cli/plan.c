/* trident plan: the layout planner's command (include/plan/trident/plan.h, docs/plan.md). With layout
 * flags it evaluates that layout; without, it searches every layout of --num-gpus devices and
 * prints the fastest that fit, and the train flags of the best. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "trident/args.h"
#include "trident/check.h"
#include "trident/debug.h"
#include "trident/comm.h"
#include "trident/plan.h"

#define PROG "trident plan"
#define GIB (1024.0 * 1024.0 * 1024.0)

static const char *rc_name(plan_recompute r)
{
    return r == PLAN_RC_FULL ? "full" : r == PLAN_RC_SELECTIVE ? "selective" : "none";
}

/* Whether the layout's pipeline transfers go by scatter/gather (tp > 1 between stages, not turned
 * off, no sequence parallelism, which splits them already). */
static int scatter_gather(const plan_result *r)
{
    const plan_layout *l = &r->l;
    return l->pp > 1 && l->tp > 1 && !l->sp && !l->no_scatter_gather;
}

static const char *cp_name(plan_cp_comm t)
{
    return t == PLAN_CP_A2A ? "a2a" : t == PLAN_CP_ALL_GATHER ? "all_gather" : "p2p";
}

/* The experts' data-parallel size: dp x cp / ep (expert parallelism carved out of dp x cp). */
static int edp(const plan_layout *l) { return l->dp * (l->cp > 1 ? l->cp : 1) / (l->ep > 1 ? l->ep : 1); }

static void print_json(const plan_result *r, const plan_cluster *c)
{
    const plan_layout *l = &r->l;
    printf("{\"tensor_model_parallel_size\": %d, \"pipeline_model_parallel_size\": %d, \"data_parallel_size\": %d, "
           "\"virtual_pipeline_stages\": %d, \"micro_batch_size\": %d, \"micro_batches\": %d, \"recompute\": \"%s\", "
           "\"sequence_parallel\": %s, \"distributed_optimizer\": %s, \"fits\": %s, \"iteration_s\": %.6g, "
           "\"tflops_per_gpu\": %.6g, \"mfu\": %.6g, \"memory_gib_per_gpu\": %.6g, \"cluster\": \"%s\", "
           "\"breakdown_s\": {\"compute\": %.6g, \"recompute\": %.6g, \"tensor_parallel\": %.6g, \"bubble\": %.6g, "
           "\"pipeline_p2p\": %.6g, \"data_parallel\": %.6g, \"optimizer\": %.6g, \"expert_parallel\": %.6g, "
           "\"context_parallel\": %.6g}, "
           "\"memory_gib\": {\"params\": %.6g, "
           "\"grads\": %.6g, \"optimizer\": %.6g, \"activations\": %.6g, \"other\": %.6g}, ",
           l->tp, l->pp, l->dp, l->vp, l->mbs, r->micro, rc_name(l->recompute), l->sp ? "true" : "false",
           l->distopt ? "true" : "false", r->fits ? "true" : "false", r->iter_s, r->tflops_per_gpu, r->mfu,
           r->m_total / GIB, c->name, r->t_compute, r->t_recompute, r->t_tp, r->t_bubble, r->t_p2p, r->t_dp,
           r->t_optimizer, r->t_ep, r->x_cp, r->m_params / GIB, r->m_grads / GIB, r->m_optimizer / GIB, r->m_acts / GIB,
           r->m_other / GIB);
    /* the communication left exposed per kind of group, as the trainer's metrics file names its own */
    printf("\"tp_exposed_ms\": %.6g, \"pp_exposed_ms\": %.6g, \"ep_exposed_ms\": %.6g, \"embd_exposed_ms\": %.6g, "
           "\"dp_exposed_ms\": %.6g, \"scatter_gather\": %s, \"dp_collectives\": \"%s\", "
           "\"expert_model_parallel_size\": %d, \"expert_data_parallel_size\": %d, \"context_parallel_size\": %d, "
           "\"cp_comm_type\": \"%s\", \"cp_exposed_ms\": %.6g, \"cp_inflight_ms\": %.6g}\n",
           r->x_tp * 1e3, r->x_pp * 1e3, r->t_ep * 1e3, r->x_embd * 1e3, r->x_dp * 1e3, scatter_gather(r) ? "true" : "false",
           r->dp_hier ? "hierarchical" : "flat", l->ep > 1 ? l->ep : 1, edp(l), l->cp > 1 ? l->cp : 1,
           cp_name(l->cp_comm), r->x_cp * 1e3, r->t_cp * 1e3);
}

static void print_row(const plan_result *r)
{
    const plan_layout *l = &r->l;
    char ep[64] = "";
    if (l->ep > 1) snprintf(ep, sizeof ep, "  ep %d", l->ep);
    if (l->cp > 1) snprintf(ep + strlen(ep), sizeof ep - strlen(ep), "  cp %d %s", l->cp, cp_name(l->cp_comm));
    printf("%4d %4d %5d %3d %4d %5d  %-9s %3s %7s  %9.3f %8.1f %6.1f%% %8.1f%s%s\n", l->tp, l->pp, l->dp, l->vp, l->mbs,
           r->micro, rc_name(l->recompute), l->sp ? "yes" : "no", l->distopt ? "yes" : "no", r->iter_s,
           r->tflops_per_gpu, 100.0 * r->mfu, r->m_total / GIB, ep, r->fits ? "" : "  does not fit");
}

static void print_explain(const plan_result *r)
{
    double t = r->iter_s;
    printf("      time: compute %.3f s (%.0f%%, of which recomputation %.3f), tensor-parallel collectives %.3f (%.0f%%), "
           "pipeline bubble %.3f (%.0f%%), pipeline transfers %.3f (%.0f%%), data-parallel reduction %.3f (%.0f%%), "
           "optimizer %.3f (%.0f%%)",
           r->t_compute, 100 * r->t_compute / t, r->t_recompute, r->t_tp, 100 * r->t_tp / t, r->t_bubble,
           100 * r->t_bubble / t, r->t_p2p, 100 * r->t_p2p / t, r->t_dp, 100 * r->t_dp / t, r->t_optimizer,
           100 * r->t_optimizer / t);
    if (r->t_ep > 0) printf(", expert-parallel exchange %.3f (%.0f%%)", r->t_ep, 100 * r->t_ep / t);
    if (r->l.cp > 1)
        printf(", context-parallel exchange %.3f (%.0f%%; %s, %.3f in flight, %.0f%% hidden)", r->x_cp,
               100 * r->x_cp / t, cp_name(r->l.cp_comm), r->t_cp, r->t_cp > 0 ? 100 * (1 - r->x_cp / r->t_cp) : 0.0);
    printf("\n");
    printf("      memory (GiB): params %.2f + grads %.2f + optimizer %.2f + activations %.2f + framework %.2f = %.2f\n",
           r->m_params / GIB, r->m_grads / GIB, r->m_optimizer / GIB, r->m_acts / GIB, r->m_other / GIB,
           r->m_total / GIB);
    char cp[64] = "", experts[96] = "";
    if (r->l.cp > 1) snprintf(cp, sizeof cp, ", cp %.1f", r->x_cp * 1e3);
    if (r->l.ep > 1) /* the experts' gradients: over the rest of dp x cp */
        snprintf(experts, sizeof experts, "; the experts' over %d (dp x cp / ep)", edp(&r->l));
    printf("      exposed communication (ms): tp %.1f, pp %.1f, ep %.1f, embd %.1f, dp %.1f%s (%s%s%s%s)\n", r->x_tp * 1e3,
           r->x_pp * 1e3, r->t_ep * 1e3, r->x_embd * 1e3, r->x_dp * 1e3, cp, r->dp_hier ? "hierarchical" : "flat",
           r->l.cp > 1 ? " over dp x cp" : "", experts, scatter_gather(r) ? "; pipeline scatter/gather" : "");
}

/* The job and the cluster in a line; ep: the expert-parallel size of an evaluated layout (0: a search). */
static void header(const plan_job *j, const plan_cluster *c, int n, int ep)
{
    const gpt_config *g = &j->cfg;
    const char *dt = j->dtype == 1 ? "bf16" : j->dtype == 2 ? "fp16" : "fp32";
    char moe[128] = "";
    if (gpt_moe(g)) {
        char eps[32];
        if (ep > 0) snprintf(eps, sizeof eps, "ep %d", ep);
        else snprintf(eps, sizeof eps, "ep searched");
        snprintf(moe, sizeof moe, ", %d expert%s top-%d (%s)", g->num_experts, td_plural(g->num_experts), g->moe_topk,
                 eps);
    }
    printf("%d layer%s, hidden %d, %d head%s%s, seq %d, vocab %d (padded %d), global batch %lld, %s on %d device%s of "
           "%s (%d a node, %.0f TFLOP/s %s, %.0f GiB)\n", g->num_layers, td_plural(g->num_layers), g->hidden, g->heads,
           td_plural(g->heads), moe, g->seq, g->vocab, g->padded_vocab, (long long)j->gbs, dt, n, td_plural(n), c->name,
           c->gpus_per_node, c->peak[j->dtype] / 1e12, dt, c->mem_gib);
}

/* The options every layout takes (the search's too): scatter/gather, the dp collectives, the
 * parameter all-gather's overlap, the bucket size. */
static plan_layout layout_options(const td_args *a)
{
    plan_layout o;
    memset(&o, 0, sizeof o);
    o.no_scatter_gather = a->no_scatter_gather_tensors_in_pipeline;
    o.dp_collectives = strcmp(a->dp_collectives, "flat") == 0           ? PLAN_DP_FLAT
                       : strcmp(a->dp_collectives, "hierarchical") == 0 ? PLAN_DP_HIER
                                                                        : PLAN_DP_AUTO;
    o.overlap_param = a->overlap_param_gather;
    o.bucket_elems = td_args_given(a, "--ddp-bucket-size") ? (double)a->ddp_bucket_size : 0;
    o.ep_alltoall = strcmp(a->moe_token_dispatcher_type, "alltoall") == 0;
    o.cp_comm = strcmp(a->cp_comm_type, "a2a") == 0          ? PLAN_CP_A2A
                : strcmp(a->cp_comm_type, "all_gather") == 0 ? PLAN_CP_ALL_GATHER
                                                             : PLAN_CP_P2P;
    return o;
}

static const char *const LAYOUT_FLAGS[] = {"--tensor-model-parallel-size", "--pipeline-model-parallel-size",
                                           "--num-layers-per-virtual-pipeline-stage", "--micro-batch-size",
                                           "--recompute-granularity", "--use-distributed-optimizer",
                                           "--sequence-parallel", "--expert-model-parallel-size",
                                           "--context-parallel-size"};

int cli_plan(int argc, char **argv)
{
    td_args a;
    if (td_args_parse(&a, TD_CMD_PLAN, PROG, argc, argv, 1) == 1) {
        td_args_usage(TD_CMD_PLAN, PROG,
                      "Predicts the time per iteration, TFLOP/s per device, MFU and memory per device of training a\n"
                      "GPT model (train's model and batch flags) on a cluster, and searches the layouts of --num-gpus\n"
                      "devices for the fastest that fits; given layout flags, evaluates that layout. docs/plan.md.\n"
                      "  trident plan --num-layers 96 --hidden-size 12288 --num-attention-heads 96 --seq-length 2048 \\\n"
                      "      --vocab-size 51200 --global-batch-size 1536 --fp16 --cluster dgx-a100-80gb --num-gpus 1024");
        td_args_free(&a);
        return 0;
    }
    td_debug_from_args(&a);
    if (a.plan_calibrate) {
        comm *world = comm_world_init(&argc, &argv);
        plan_cluster me;
        plan_calibrate(&me, a.backend, a.plan_calibrate_s, world);
        if (comm_rank(world) == 0) {
            char *js = plan_cluster_json(&me);
            printf("%s\n", js);
            free(js);
        }
        comm_world_finalize(world);
        td_args_free(&a);
        return 0;
    }
    if (!td_args_given(&a, "--vocab-size"))
        td_usage_error(PROG ": --vocab-size is required (plan reads no tokenizer; GPT-2's is 50257)");
    if (!td_args_given(&a, "--global-batch-size")) td_usage_error(PROG ": --global-batch-size is required");
    if (a.bf16 && a.fp16) td_usage_error(PROG ": give at most one of --bf16 and --fp16");
    plan_cluster cl;
    char err[512];
    if (plan_cluster_preset(a.cluster, &cl) && plan_cluster_load(a.cluster, &cl, err, sizeof err))
        td_usage_error(PROG ": %s", err);
    if (!td_args_given(&a, "--num-gpus")) { /* a cluster of known nodes: all its devices */
        if (cl.nodes <= 0)
            td_usage_error(PROG ": --num-gpus is required (the devices to plan for), or a cluster file with \"nodes\"");
        a.num_gpus = cl.nodes * cl.gpus_per_node;
    }
    unsigned lora_mask;
    if (a.lora_rank > 0 && td_lora_modules_parse(a.lora_target_modules, &lora_mask, err, sizeof err))
        td_usage_error(PROG ": %s", err);
    plan_job job;
    memset(&job, 0, sizeof job);
    gpt_config_from_args(&job.cfg, &a);
    job.cfg.vocab = a.vocab_size;
    job.cfg.padded_vocab = gpt_padded_vocab(a.vocab_size, a.make_vocab_size_divisible_by, 1);
    job.gbs = a.global_batch_size;
    job.dtype = a.bf16 ? 1 : a.fp16 ? 2 : 0;
    if (cl.peak[job.dtype] <= 0)
        td_usage_error(PROG ": the cluster %s has no %s peak (give another of --bf16, --fp16 or neither)", cl.name,
                       job.dtype == 1 ? "bf16" : job.dtype == 2 ? "fp16" : "fp32");
    plan_layout opts = layout_options(&a);
    int given = 0;
    for (size_t i = 0; i < sizeof LAYOUT_FLAGS / sizeof LAYOUT_FLAGS[0]; i++) given |= td_args_given(&a, LAYOUT_FLAGS[i]);
    if (given && a.overlap_param_gather && !a.use_distributed_optimizer) /* the search: with its distopt layouts */
        td_usage_error(PROG ": --overlap-param-gather needs --use-distributed-optimizer (only the distributed "
                       "optimizer all-gathers parameters)");
    int n = a.num_gpus, L = job.cfg.num_layers;
    if (given) {
        int tp = a.tensor_model_parallel_size, pp = a.pipeline_model_parallel_size, cp = a.context_parallel_size;
        if (n % (tp * cp * pp))
            td_usage_error(PROG ": --num-gpus %d is not divisible by --tensor-model-parallel-size %d x "
                           "--context-parallel-size %d x --pipeline-model-parallel-size %d", n, tp, cp, pp);
        int per = td_args_given(&a, "--num-layers-per-virtual-pipeline-stage") ? a.num_layers_per_virtual_pipeline_stage
                                                                               : 0;
        plan_layout l = opts;
        l.tp = tp, l.cp = cp, l.pp = pp, l.dp = n / (tp * cp * pp), l.vp = per ? L / (pp * per) : 1, l.mbs = a.micro_batch_size;
        l.sp = a.sequence_parallel && tp > 1;
        l.distopt = a.use_distributed_optimizer && l.dp * cp > 1;
        l.overlap_grad = a.overlap_grad_reduce;
        l.overlap_param = l.distopt && a.overlap_param_gather;
        l.ep = a.expert_model_parallel_size;
        if (per && L % (pp * per))
            td_usage_error(PROG ": --num-layers %d is not divisible by --pipeline-model-parallel-size %d x "
                           "--num-layers-per-virtual-pipeline-stage %d", L, pp, per);
        if (a.recompute_granularity)
            l.recompute = strcmp(a.recompute_granularity, "full") == 0 ? PLAN_RC_FULL : PLAN_RC_SELECTIVE;
        plan_result r;
        if (plan_evaluate(&job, &cl, &l, &r, err, sizeof err)) td_usage_error(PROG ": %s", err);
        if (a.plan_json) {
            print_json(&r, &cl);
        } else {
            header(&job, &cl, n, l.ep > 1 ? l.ep : 1);
            printf("  tp   pp    dp  vp  mbs micro  recompute  sp distopt  iter (s) TFLOP/s    MFU   GiB/dev\n");
            print_row(&r);
            print_explain(&r);
        }
        td_args_free(&a);
        return r.fits ? 0 : 1;
    }
    int cap = a.plan_top;
    if (cl.nodes > 0 && n > cl.nodes * cl.gpus_per_node)
        td_usage_error(PROG ": --num-gpus %d is more than cluster %s has: %d (%d node%s of %d); give at most %d", n,
                       cl.name, cl.nodes * cl.gpus_per_node, cl.nodes, td_plural(cl.nodes), cl.gpus_per_node,
                       cl.nodes * cl.gpus_per_node);
    if (!a.plan_json) header(&job, &cl, n, 0);
    plan_result *res = td_xcalloc((size_t)cap, sizeof *res);
    plan_search_why why;
    int found = plan_search(&job, &cl, n, &opts, res, cap, &why);
    if (found == 0) {
        free(res);
        if (why.priced == 0 && why.batch_refused > 0 && !why.refused[0])
            td_usage_error(PROG ": no layout of %d devices divides --global-batch-size %lld: the data-parallel sizes "
                           "they allow (%d / (tp x cp x pp), pp dividing the %d layers, cp the sequence) are %d or more and none divides "
                           "it; give a batch divisible by %d", n, (long long)job.gbs, n, job.cfg.num_layers,
                           why.batch_dp, why.batch_dp);
        if (why.priced == 0)
            td_usage_error(PROG ": no layout of %d devices suits the model: %s", n,
                           why.refused[0] ? why.refused : "no tensor x pipeline size divides the devices");
        fprintf(stderr, "error: " PROG ": no layout of %d devices fits %.0f GiB a device (the least needs %.1f GiB); "
                        "add devices, or shorten the sequence or the model\n", n, cl.mem_gib, why.least_bytes / GIB);
        td_args_free(&a);
        return 1;
    }
    if (a.plan_json) {
        for (int i = 0; i < found && i < cap; i++) print_json(&res[i], &cl);
    } else {
        printf("%d layouts fit; the fastest %d:\n", found, found < cap ? found : cap);
        printf("  tp   pp    dp  vp  mbs micro  recompute  sp distopt  iter (s) TFLOP/s    MFU   GiB/dev\n");
        for (int i = 0; i < found && i < cap; i++) {
            print_row(&res[i]);
            if (a.plan_explain) print_explain(&res[i]);
        }
        char flags[512];
        plan_layout_flags(&res[0].l, L, flags, sizeof flags);
        printf("train with: %s\n", flags);
    }
    free(res);
    td_args_free(&a);
    return 0;
}
