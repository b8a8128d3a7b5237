/* The reporting unit of a training run: the lines at its start, the metrics file and
 * TensorBoard, MFU against the measured peak, the time breakdown at the end, and the memory
 * predicted and measured. See train_impl.h. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train_impl.h"
#include "trident/check.h"

/* Resident bytes of this process now (VmRSS), or at its peak (VmHWM). */
static long long proc_status_bytes(const char *key)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    long long kb = 0;
    size_t n = strlen(key);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, n) == 0 && line[n] == ':') {
            kb = atoll(line + n + 1);
            break;
        }
    fclose(f);
    return kb * 1024;
}

long long run_peak_rss(void) { return proc_status_bytes("VmHWM"); }

#define MIB (1024.0 * 1024.0)

/* Gathers every rank's line of `len` bytes to world rank 0 and prints, per pipeline stage, the
 * line of its first rank (tp 0, dp 0) under `title`. */
static void print_per_stage(const run_state *r, const char *line, size_t len, const char *title)
{
    const ps_state *ps = r->ps;
    char *all = td_xmalloc(len * (size_t)ps->world_size);
    comm_allgather(ps->world, line, all, len, COMM_U8);
    if (ps->world_rank == 0)
        for (int st = 0; st < ps->pp; st++)
            TD_INFO("%s, stage %d: %s", title, st, all + len * (size_t)ps_rank_of(ps, 0, 0, st));
    free(all);
}

/* Predicts what this rank will hold (memory.h) and prints it per pipeline stage. */
void run_predict_memory(run_state *r, const gpt_config *c, int slots)
{
    const td_args *a = r->a;
    mem_layout *l = &r->report.mem;
    l->cfg = *c;
    l->tp = r->ps->tp;
    l->dp = r->ps->dp;
    l->ep = r->ps->ep;
    l->cp = r->ps->cp;
    l->cp_comm = r->ps->cp_comm;
    l->mbs = a->micro_batch_size;
    l->nchunks = r->model.nchunks;
    l->distributed_optimizer = a->use_distributed_optimizer && r->ps->dpcp > 1;
    l->bucket_elems = (double)a->ddp_bucket_size;
    l->lowp = r->model.be->gemm_dtype != BE_F32;
    l->lowp_widened = l->lowp && !r->model.be->ops->lp_native(r->model.be, r->model.be->gemm_dtype);
    l->lowp_chunk_bytes = (double)be_lowp_chunk_bytes(r->model.be);
    l->lib_workspace = r->model.be->ops->lib_workspace_bytes
                           ? (double)r->model.be->ops->lib_workspace_bytes(r->model.be) : 0;
    l->sequence_parallel = r->ps->sequence_parallel;
    const gpt_recompute *rc = &r->model.chunks[0]->rc;
    l->recompute = rc->granularity == GPT_RECOMPUTE_FULL        ? MEM_RECOMPUTE_FULL
                   : rc->granularity == GPT_RECOMPUTE_SELECTIVE ? MEM_RECOMPUTE_SELECTIVE
                                                                : MEM_RECOMPUTE_NONE;
    l->recompute_block = rc->method == GPT_RECOMPUTE_BLOCK;
    l->recompute_num_layers = rc->num_layers;
    for (int k = 0; k < r->model.nchunks; k++) {
        const gpt_model *m = r->model.chunks[k];
        l->chunk[k] = (mem_chunk){m->nlayers, m->first, m->last, slots, m->layer0};
    }
    mem_predict(l, &r->report.mem_pred);
    char line[400];
    mem_describe(&r->report.mem_pred, l, line, sizeof line);
    print_per_stage(r, line, sizeof line, "memory per rank (predicted)");
}

/* Sets this rank's peak RSS against the prediction: the larger of the model's run plus what the
 * process held before it (the libraries, MPI), and the peak reached before the model (a large
 * tokenizer.json's parse: the vocabulary size is read from it). The largest per pipeline stage.
 * On a device backend (mem_peak), also the device memory's peak against the model and its run. */
void run_report_memory(run_state *r)
{
    const ps_state *ps = r->ps;
    const backend *be = r->model.be;
    double dev = be->ops->mem_peak ? (double)be->ops->mem_peak(be) : 0;
    double mine[5] = {r->report.rss_peak, r->report.mem_pred.total, r->report.rss_start, r->report.hwm_start, dev};
    double *all = td_xmalloc(5 * sizeof(double) * (size_t)ps->world_size);
    comm_allgather(ps->world, mine, all, 5, COMM_F64);
    if (ps->world_rank == 0)
        for (int st = 0; st < ps->pp; st++) {
            const double *top = NULL, *dtop = NULL; /* the ranks of the stage with the largest peaks (RSS, device) */
            for (int t = 0; t < ps->tp; t++)
                for (int d = 0; d < ps->dp; d++) {
                    const double *x = all + 5 * ps_rank_of(ps, t, d, st);
                    if (!top || x[0] > top[0]) top = x;
                    if (!dtop || x[4] > dtop[4]) dtop = x;
                }
            double run = top[1] + top[2], pred = fmax(run, top[3]);
            char before[160] = "";
            if (top[3] > run)
                snprintf(before, sizeof before, "; the peak before the model, %.1f MiB (the tokenizer's load), is larger",
                         top[3] / MIB);
            TD_INFO("peak memory (RSS), stage %d: %.1f MiB measured, %.1f MiB predicted (%.1f for the model and its "
                    "run + %.1f held before it%s): %+.1f%%", st, top[0] / MIB, pred / MIB, top[1] / MIB, top[2] / MIB,
                    before, 100.0 * (top[0] - pred) / pred);
            if (be->ops->mem_peak) /* a device: the model and its run live in its memory, the rest on the host */
                TD_INFO("peak device memory, stage %d: %.1f MiB measured (the memory pool's high-water mark), %.1f MiB "
                        "predicted for the model and its run: %+.1f%%", st, dtop[4] / MIB, dtop[1] / MIB,
                        100.0 * (dtop[4] - dtop[1]) / dtop[1]);
        }
    free(all);
}

/* The time breakdown and the limits it is held against: the GEMM peak (the best of the start's
 * measurement and a new one now; raised by bd_print if the GEMMs ran faster) and the bandwidth of AdamW's streams
 * (measured now, after the peak RSS was read, and only when AdamW's bytes exceed the caches;
 * bytes read + written, as AdamW's). */
void run_print_breakdown(run_state *r)
{
    size_t stepped = opt_adamw_state_numel(r->optim.opt) / 2; /* the shard with the distributed optimizer */
    double peak = r->report.peak_measured * 1e3;
    if (!td_args_given(r->a, "--peak-tflops")) peak = fmax(peak, be_peak_gflops(r->model.be));
    bd_limits lim = {.peak_gflops = peak, .adamw_bytes = be_adamw_bytes(stepped)};
    lim.peak_name = td_args_given(r->a, "--peak-tflops") ? "--peak-tflops peak"
                    : r->model.be->gemm_dtype == BE_BF16       ? "bf16 GEMM peak"
                    : r->model.be->gemm_dtype == BE_F16        ? "fp16 GEMM peak"
                                                         : "sgemm peak";
    if (lim.adamw_bytes > 256e6) lim.stream_gbps = be_adamw_stream_gbps(r->model.be);
    bd_print(&r->report.bd, &lim);
}

/* This iteration's MFU against the peak, raised (and said) if the model's rate passed it: the
 * start's measurement ran on a busier machine or other shapes. */
double run_mfu_of(run_state *r, double model_tflops, int64_t iter)
{
    double before = r->report.peak_tflops, mfu;
    if (bd_fraction(model_tflops, &r->report.peak_tflops, &mfu) && r->report.reporter)
        TD_INFO("peak for MFU: %.4g TFLOP/s per rank (raised from %.4g: iteration %lld ran the model at this rate)",
                model_tflops, before, (long long)iter);
    return mfu;
}

/* Ends a diverged run (exit 1, no checkpoint of the diverged model): `what` happened at `iter`;
 * names the newest checkpoint saved before it, which --load resumes from. */
void run_stop_diverged(const td_args *a, int64_t iter, int64_t last_saved, const char *what)
{
    char saved[600] = "";
    if (a->save && last_saved > 0)
        snprintf(saved, sizeof saved, "; not saved: the newest checkpoint in --save %s is iteration %lld", a->save,
                 (long long)last_saved);
    else if (a->save)
        snprintf(saved, sizeof saved, "; not saved to --save %s", a->save);
    td_fatal(1, "iteration %lld: %s: the training diverged; lower --lr%s%s%s", (long long)iter, what,
             a->clip_grad > 0 ? "" : ", clip the gradients (--clip-grad 1, the default; 0 turns it off)",
             a->fp16 ? ", or train in --bf16" : "", saved);
}

void run_report_peak(run_state *r)
{
    const td_args *a = r->a;
    /* measured before the model exists: its GEMMs' buffers come and go below the run's peak */
    r->report.peak_tflops = td_args_given(a, "--peak-tflops") ? a->peak_tflops : be_peak_gflops(r->model.be) / 1e3;
    r->report.peak_measured = r->report.peak_tflops;
}

void run_report_rss_start(run_state *r)
{
    r->report.rss_start = (double)proc_status_bytes("VmRSS"); /* with OpenBLAS's buffers, which the GEMMs above made */
    r->report.hwm_start = (double)proc_status_bytes("VmHWM");
}

/* "mixed precision: ..." (--bf16 or --fp16). */
static void print_precision(const run_state *r)
{
    const td_args *a = r->a;
    const backend *be = r->model.be;
    int native = be->ops->lp_native(be, be->gemm_dtype), device = be->device >= 0;
    TD_INFO("mixed precision: %s GEMMs (%s), fp32 master weights, grads, Adam state, norms, softmax and "
            "cross-entropy; %s",
            be_dtype_name(be->gemm_dtype),
            device && native ? "cuBLAS on the device's tensor cores"
            : device         ? "cuBLAS; this device has no tensor-core instructions for them"
            : native         ? "oneDNN on the CPU's AVX512-BF16 instructions"
            : a->bf16 ? "this CPU lacks AVX512-BF16: bf16-rounded inputs multiplied by the fp32 sgemm, "
                        "same results at fp32 speed"
                      : "no fp16 arithmetic on this CPU: fp16-rounded inputs multiplied by the fp32 sgemm",
            !r->optim.scaled ? "no loss scale"
            : r->optim.scaler.dynamic ? "dynamic loss scale" : "constant loss scale");
}

/* "pipeline stages (layers): ..." (more than one stage). */
static void print_stages(const run_state *r)
{
    const ps_state *ps = r->ps;
    pp_split split = run_split(r->a, ps->pp);
    char line[1024] = "";
    for (int vs = 0, l0, n; vs < ps->pp * r->model.nchunks; vs++) {
        char one[48];
        pp_split_layers(&split, vs, &l0, &n);
        const char *sep = vs == 0 ? "" : vs % ps->pp == 0 ? " || " : " | ";
        if (n) snprintf(one, sizeof one, "%s%d-%d", sep, l0, l0 + n - 1);
        else snprintf(one, sizeof one, "%snone", sep);
        strncat(line, one, sizeof line - strlen(line) - 1);
    }
    TD_INFO("pipeline %sstages (layers): %s%s%s", r->model.nchunks > 1 ? "virtual " : "", line,
            split.embedding ? "; the embedding counted as a layer" : "",
            split.loss ? "; the loss counted as a layer" : "");
}

/* One line saying whether the stage transfers use scatter/gather, and why (more than one stage). */
static void print_transfers(const run_state *r, const gpt_config *c)
{
    const ps_state *ps = r->ps;
    double kib = (double)r->a->micro_batch_size * c->seq * c->hidden * sizeof(float) / 1024.0;
    if (ps->tp == 1)
        TD_INFO("pipeline transfers: %.0f KiB a micro-batch; scatter/gather off: one tensor-parallel rank", kib);
    else if (ps->sequence_parallel)
        TD_INFO("pipeline transfers: %.0f KiB a micro-batch per tp rank; scatter/gather not needed: under "
                "--sequence-parallel each of the %d tp ranks already sends only its 1/%d of the sequence",
                kib / ps->tp, ps->tp, ps->tp);
    else if (pp_scatter_gather_applies(ps, !r->a->no_scatter_gather_tensors_in_pipeline))
        TD_INFO("pipeline transfers: %.0f KiB a micro-batch per tp rank; scatter/gather on: each of the %d tp "
                "ranks sends 1/%d of the %.0f KiB activation and the receivers all-gather it over their tp group",
                kib / ps->tp, ps->tp, ps->tp, kib);
    else
        TD_INFO("pipeline transfers: %.0f KiB a micro-batch per tp rank; scatter/gather off "
                "(--no-scatter-gather-tensors-in-pipeline): each of the %d tp ranks sends the whole activation",
                kib, ps->tp);
}

void run_report_start(run_state *r, const gpt_config *c)
{
    const td_args *a = r->a;
    const ps_state *ps = r->ps;
    const backend *be = r->model.be;
    char where[2048], warn[512];
    ps_placement(ps, where, sizeof where, warn, sizeof warn); /* collective */
    if (ps->world_rank != 0) return;
    char cps[64] = "";
    if (ps->cp > 1) snprintf(cps, sizeof cps, " x cp %d (%s)", ps->cp, a->cp_comm_type);
    TD_INFO("trident %s: world %d = tp %d x pp %d x dp %d%s%s, backend %s, schedule %s (%d chunk%s per rank)",
            TRIDENT_VERSION, ps->world_size, ps->tp, ps->pp, ps->dp, cps,
            ps->sequence_parallel ? " (sequence parallel)" : "", be->ops->name,
            pp_schedule_name(r->model.schedule), r->model.nchunks, r->model.nchunks > 1 ? "s" : "");
    int whole = c->moe_etp1 && ps->tp > 1;
    if (ps->ep > 1 || whole)
        TD_INFO("experts: %d a layer over expert parallelism %d%s (%d on each rank) x expert data parallelism %d, "
                "tokens by %s", c->num_experts, ps->ep, whole ? " x tensor parallelism (whole experts)" : "",
                c->num_experts / ps->ep / (whole ? ps->tp : 1), ps->edp, a->moe_token_dispatcher_type);
    TD_INFO("placement: %s", where);
    if (warn[0]) td_warn("%s", warn);
    char arch[480];
    be_describe(be, arch, sizeof arch);
    TD_INFO("kernels: %s", arch);
    if (a->bf16 || a->fp16) print_precision(r);
    gpt_config_describe(c, arch, sizeof arch);
    TD_INFO("model: %s; seq %d, vocab %d (padded %d): %.2fM parameters", arch, c->seq, c->vocab, c->padded_vocab,
            (double)gpt_num_params(c) / 1e6);
    if (ps->pp > 1) {
        print_stages(r);
        print_transfers(r, c);
    }
    TD_INFO("batch: micro %d x %d micro-batches x dp %d = global %d; %lld iterations", a->micro_batch_size,
            r->num_micro, ps->dp, r->gbs, (long long)r->train_iters);
    double acts = 0, shared = 0;
    for (int k = 0; k < r->model.nchunks; k++) {
        acts += (double)r->model.chunks[k]->acts_bytes;
        shared += (double)r->model.chunks[k]->rc_bytes;
    }
    char rcs[64];
    gpt_recompute_describe(&r->model.chunks[0]->rc, rcs, sizeof rcs);
    TD_INFO("activations (rank 0): %.2f MiB per micro-batch x %d in flight, + %.2f MiB shared by them; "
            "recomputation %s", acts / 1048576.0, r->model.slots, shared / 1048576.0, rcs);
    TD_INFO("peak for MFU: %.3f TFLOP/s per rank (%s)", r->report.peak_tflops,
            td_args_given(a, "--peak-tflops") ? "--peak-tflops"
            : be->gemm_dtype == BE_BF16       ? "measured bf16 GEMM"
            : be->gemm_dtype == BE_F16        ? "measured fp16 GEMM"
                                              : "measured sgemm");
}

void run_report_open(run_state *r)
{
    if (r->report.reporter && r->a->metrics_file) r->report.metrics = met_open(r->a->metrics_file);
    if (r->report.reporter && r->a->tensorboard_dir) r->report.tb = tb_open(r->a->tensorboard_dir);
}

void run_report_close(run_state *r)
{
    met_close(r->report.metrics);
    tb_close(r->report.tb);
}
