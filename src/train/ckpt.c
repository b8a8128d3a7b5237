/* The checkpoint unit of a training run (docs/checkpoints.md): the --load at the start, the
 * --save folder's lock, saves every --save-interval, and the exit conditions (--exit-interval,
 * --exit-duration-in-mins, SIGTERM/SIGINT with --exit-signal-handler). See train_impl.h. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "shared_fs.h"
#include "train_impl.h"
#include "trident/check.h"
#include "trident/peft.h"
#include "trident/timer.h"

/* ---- checkpoints: --load at start, --save and --exit-* after iterations (docs/checkpoints.md) ---- */

static volatile sig_atomic_t g_exit_signal;
static int g_signal_says; /* this rank reports signals as they arrive (world rank 0) */

static const char *signal_name(int sig) { return sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : "a signal"; }

/* Notes the signal; rank 0 says so at once (write(2) is async-signal-safe; stdio is not). */
static int g_output_pipes; /* stdout and stderr lead to Open MPI's mpirun (a pty or pipe), not a terminal */

static void on_exit_signal(int sig)
{
    g_exit_signal = sig;
    if (g_output_pipes) {
        /* while it waits out odls_base_sigkill_timeout mpirun does not drain the ranks' output
         * (a pty of ~4 KB): a full one must drop lines, not block the rank before its save (a
         * write blocked now restarts non-blocking) */
        fcntl(1, F_SETFL, fcntl(1, F_GETFL) | O_NONBLOCK);
        fcntl(2, F_SETFL, fcntl(2, F_GETFL) | O_NONBLOCK);
    }
    if (!g_signal_says) return;
    static const char term[] = "[rank 0] received SIGTERM: finishing this iteration, then saving and exiting\n";
    static const char intr[] = "[rank 0] received SIGINT: finishing this iteration, then saving and exiting\n";
    int saved = errno;
    ssize_t w = sig == SIGTERM ? write(2, term, sizeof term - 1) : write(2, intr, sizeof intr - 1);
    (void)w;
    errno = saved;
}

/* Seconds Open MPI's mpirun waits between forwarding SIGTERM to the ranks and SIGKILLing them
 * (its MCA parameter odls_base_sigkill_timeout; it also waits that long before forwarding):
 * -1 when not started by Open MPI; the default 1 when the environment does not set it. */
static double ompi_sigkill_timeout(int *is_default)
{
    *is_default = 0;
    if (!getenv("OMPI_COMM_WORLD_SIZE")) return -1;
    const char *v = getenv("OMPI_MCA_odls_base_sigkill_timeout");
    if (v && *v) return atof(v);
    *is_default = 1;
    return 1;
}

static double g_sigkill_timeout = -1; /* of mpirun, when known (see above) */

/* Ends the job when `bad` on any rank: the lowest such rank prints msg and aborts the job. */
void run_fail_if_any(comm *world, int bad, const char *msg)
{
    int32_t who = bad ? comm_rank(world) : INT32_MAX;
    comm_allreduce(world, &who, 1, COMM_I32, COMM_MIN);
    if (who == INT32_MAX) return;
    if (comm_rank(world) == who) td_fatal(1, "%s", msg);
    comm_barrier(world); /* rank `who` aborts the job meanwhile */
    td_fatal(1, "rank %d could not load the checkpoint", who);
}

/* Finds the checkpoint of --load (every rank reads its meta.json). Without --finetune or
 * --no-load-rng its seed becomes the run's (eff->seed), as the seed is the whole random state.
 * Returns 1 when there is one to load. */
int run_resume_find(td_args *eff, comm *world, ckpt_meta *meta)
{
    if (!eff->load) return 0;
    char err[1024] = "";
    int rc = ckpt_find(eff->load, meta, err, sizeof err);
    run_fail_if_any(world, rc < 0, err);
    sfs_check_same_checkpoint(world, eff->load, rc, meta); /* not one rank from scratch, another resuming */
    if (rc == 1) {
        /* only the first run of `--save X --load X` starts from scratch; any other empty --load
         * is a wrong path */
        char m[4400];
        int needed = eff->finetune || eff->use_checkpoint_args;
        if (needed)
            snprintf(m, sizeof m, "--load %s holds no checkpoint (no %s, meta.json or iter_* folder) but %s needs one: "
                     "check the path", eff->load, CKPT_LATEST, eff->finetune ? "--finetune" : "--use-checkpoint-args");
        else
            snprintf(m, sizeof m, "--load %s holds no checkpoint (no %s, meta.json or iter_* folder): check the path; "
                     "to start from scratch leave --load out, or give --save and --load the same folder", eff->load,
                     CKPT_LATEST);
        run_fail_if_any(world, needed || !eff->save || strcmp(eff->save, eff->load) != 0, m);
        if (comm_rank(world) == 0)
            TD_INFO("--load %s holds no checkpoint yet: starting from scratch", eff->load);
        return 0;
    }
    if (meta->note && comm_rank(world) == 0) td_warn("%s", meta->note);
    if (!eff->finetune && !eff->no_load_rng && (uint64_t)eff->seed != meta->progress.seed) {
        if (comm_rank(world) == 0 && td_args_given(eff, "--seed"))
            td_warn("using the checkpoint's seed %llu, not --seed %lld (add --no-load-rng to use --seed)",
                    (unsigned long long)meta->progress.seed, (long long)eff->seed);
        eff->seed = (int64_t)meta->progress.seed;
    }
    return 1;
}

/* A note when a resumed run's sequence length or global batch size (gbs) differs from the
 * checkpoint's: both allowed, as in Megatron (the data continues from the consumed sample count). */
void run_resume_note_changes(const td_args *a, const ckpt_meta *m, int gbs)
{
    if (a->finetune) return;
    if (a->seq_length != m->model.seq)
        TD_INFO("note: --seq-length %d differs from the checkpoint's %d: the run continues with %d-token samples",
                a->seq_length, m->model.seq, a->seq_length);
    cJSON *args = m->args_json ? cJSON_Parse(m->args_json) : NULL;
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(args, "global_batch_size");
    const cJSON *mb = cJSON_GetObjectItemCaseSensitive(args, "micro_batch_size");
    int old = cJSON_IsNumber(g) && g->valuedouble > 0 ? (int)g->valuedouble
              : cJSON_IsNumber(mb)                    ? (int)mb->valuedouble * m->dp
                                                      : 0;
    if (old > 0 && old != gbs)
        TD_INFO("note: the global batch size is %d, the checkpoint's was %d: the run continues from its %lld "
                "consumed samples in batches of %d", gbs, old, (long long)m->progress.consumed_train, gbs);
    cJSON_Delete(args);
}

/* The run as the checkpoint code sees it: with the distributed optimizer, the moments of this
 * rank's shard (each dp rank saves its own; a load keeps its ranges). */
static ckpt_model ckpt_view(run_state *r)
{
    ckpt_model m = {r->ps, r->model.nchunks, r->model.chunks, r->optim.opt->m, r->optim.opt->v, NULL, NULL};
    if (r->optim.opt->sharded) {
        m.shard_ranges = r->model.shard_ranges;
        m.nshard_ranges = r->model.nshard_ranges;
    }
    return m;
}

/* What a checkpoint saved now records of the run's progress. */
ckpt_progress run_progress_now(const run_state *r, int64_t iter, int64_t consumed, int64_t valid_consumed)
{
    ckpt_progress p = {.iteration = iter, .consumed_train = consumed, .consumed_valid = valid_consumed, .seed = (uint64_t)r->a->seed};
    p.skipped = r->optim.skipped;
    memcpy(p.run_id, r->ckpt.run_id, sizeof p.run_id);
    if (r->optim.scaled) {
        p.has_loss_scale = 1;
        p.loss_scale = r->optim.scaler.scale;
        p.growth_tracker = r->optim.scaler.growth_tracker;
        p.hysteresis_tracker = r->optim.scaler.hysteresis_tracker;
    }
    return p;
}

/* Loads the checkpoint into the run (weights only with --finetune, no moments with
 * --no-load-optim) and returns where to continue from. */
ckpt_progress run_resume_load(run_state *r, const ckpt_meta *meta)
{
    const td_args *a = r->a;
    double t0 = td_now();
    ckpt_model m = ckpt_view(r);
    char err[1024] = "";
    int rc = ckpt_load(meta, &m, !a->finetune && !a->no_load_optim, err, sizeof err);
    run_fail_if_any(r->ps->world, rc != 0, err);
    ckpt_progress p = meta->progress;
    if (a->finetune) p = (ckpt_progress){.seed = (uint64_t)a->seed};
    p.seed = (uint64_t)a->seed;
    comm_barrier(r->ps->world);
    char cps[32] = ""; /* context parallelism: a run setting the checkpoint records */
    if (meta->cp > 1) snprintf(cps, sizeof cps, ", cp %d", meta->cp);
    if (r->ps->world_rank == 0)
        TD_INFO("loaded checkpoint %s (iteration %lld, written by tp %d x pp %d x dp %d, ep %d%s, %d virtual stage%s) "
                "in %.2f s%s", meta->dir, (long long)meta->progress.iteration, meta->tp, meta->pp, meta->dp, meta->ep,
                cps, meta->vp,
                meta->vp > 1 ? "s" : "", td_now() - t0,
                a->finetune ? ": weights only, starting at iteration 0" : a->no_load_optim ? ": no optimizer state" : "");
    return p;
}

#define FAIL(...)                                                                        \
    do {                                                                                 \
        snprintf(msg, msglen, __VA_ARGS__);                                              \
        goto fail;                                                                       \
    } while (0)

int run_lora_load_args(td_args *a, const ckpt_meta *meta, int resume, int log, char *msg, size_t msglen)
{
    if (!a->lora_load) return 0;
    peft_adapter ad = {0};
    if (!a->load || !a->finetune || !resume)
        FAIL("--lora-load needs --load BASE --finetune: the base model the adapter was trained on, as a trident "
             "checkpoint (convert --from hf BASE --to trident)");
    if (meta->model.lora_rank > 0)
        FAIL("--lora-load %s: --load %s has LoRA adapters of its own (lora_rank %d in its meta.json): load the base "
             "without adapters", a->lora_load, meta->dir, meta->model.lora_rank);
    if (peft_adapter_open(a->lora_load, meta->model.num_layers, meta->model.num_experts, meta->model.kind == GPT_KIND_ENCODER, &ad, msg, msglen))
        return -1;
    double alpha = peft_adapter_alpha(&ad);
    char list[256];
    td_lora_modules_str(ad.targets, list, sizeof list);
    unsigned given_mask = 0;
    if (td_args_given(a, "--lora-rank") && a->lora_rank != ad.cfg.r)
        FAIL("--lora-rank %d differs from the adapter's r %d (%s/adapter_config.json): leave --lora-rank out",
             a->lora_rank, ad.cfg.r, a->lora_load);
    if (td_args_given(a, "--lora-alpha") && a->lora_alpha != alpha)
        FAIL("--lora-alpha %g differs from the adapter's lora_alpha %g%s (%s/adapter_config.json): leave "
             "--lora-alpha out", a->lora_alpha, alpha, ad.cfg.use_rslora ? " (use_rslora: alpha sqrt(r))" : "",
             a->lora_load);
    if (td_args_given(a, "--lora-target-modules") &&
        (td_lora_modules_parse(a->lora_target_modules, &given_mask, msg, msglen) || given_mask != ad.targets))
        FAIL("--lora-target-modules %s differs from the adapter's modules %s (%s): leave --lora-target-modules out",
             a->lora_target_modules, list, a->lora_load);
    if (td_args_set_number(a, "--lora-rank", ad.cfg.r) || td_args_set_number(a, "--lora-alpha", alpha) ||
        td_args_set_number(a, "--lora-target-modules", ad.targets) ||
        (!td_args_given(a, "--lora-dropout") && td_args_set_number(a, "--lora-dropout", ad.cfg.lora_dropout)))
        FAIL("--lora-load %s: r %d, lora_alpha %g or lora_dropout %g is outside what train takes (--lora-rank, "
             "--lora-alpha, --lora-dropout)", a->lora_load, ad.cfg.r, alpha, ad.cfg.lora_dropout);
    if (log)
        TD_INFO("--lora-load %s: r %d, lora_alpha %g%s, lora_dropout %g, modules %s", a->lora_load, ad.cfg.r, alpha,
                ad.cfg.use_rslora ? " (use_rslora: its alpha sqrt(r))" : "", a->lora_dropout, list);
    peft_adapter_close(&ad);
    return 0;
fail:
    peft_adapter_close(&ad);
    return -1;
}
#undef FAIL

void run_lora_load(run_state *r)
{
    const td_args *a = r->a;
    char err[4400] = "";
    peft_adapter ad;
    double t0 = td_now();
    const gpt_config *c = &r->model.chunks[0]->cfg;
    int bad = peft_adapter_open(a->lora_load, c->num_layers, c->num_experts, c->kind == GPT_KIND_ENCODER, &ad, err, sizeof err) != 0;
    int n = 0;
    for (int k = 0; k < r->model.nchunks && !bad; k++) {
        const gpt_model *g = r->model.chunks[k];
        for (int i = 0; i < g->ntensors && !bad; i++) {
            const gpt_tensor_info *t = &g->table[i];
            if (t->frozen) continue; /* under LoRA, what is not frozen is an adapter */
            ckpt_slice want = ckpt_slice_of(t);
            float *host = td_xmalloc(t->numel * sizeof(float));
            bad = peft_adapter_read(&ad, t->name, &want, host, err, sizeof err) != 0;
            if (!bad) be_memcpy(g->be, g->params + t->offset, host, t->numel * sizeof(float), BE_H2D);
            free(host);
            n++;
        }
    }
    peft_adapter_close(&ad); /* zeroed by a failed open: nothing to close */
    run_fail_if_any(r->ps->world, bad, err);
    int32_t total = n;
    comm_allreduce(r->ps->world, &total, 1, COMM_I32, COMM_SUM);
    if (r->ps->world_rank == 0)
        TD_INFO("loaded the PEFT adapter %s as the trainable adapters (%d slices over the ranks) in %.2f s", a->lora_load,
                (int)total, td_now() - t0);
}

void run_save_checkpoint(run_state *r, const ckpt_progress *p)
{
    const td_args *a = r->a;
    run_wait_params(r);
    ckpt_model m = ckpt_view(r);
    char *args = td_args_json(a, TD_CMD_TRAIN);
    ckpt_save_stats st;
    ckpt_save(a->save, &m, p, args, a->keep_last, &st);
    free(args);
    if (r->ps->world_rank != 0) return;
    TD_INFO("saved checkpoint at iteration %lld to %s: %.1f MB in %.2f s (%.0f MB/s)", (long long)p->iteration,
            a->save, (double)st.bytes / 1e6, st.seconds, (double)st.bytes / 1e6 / (st.seconds > 0 ? st.seconds : 1e-9));
    static int warned;
    if (a->exit_signal_handler && g_sigkill_timeout >= 0 && st.seconds > 0.5 * g_sigkill_timeout && !warned) {
        warned = 1;
        td_warn("this save took %.1f s but mpirun SIGKILLs the ranks %g s after passing SIGTERM on "
                "(odls_base_sigkill_timeout): a SIGTERM to mpirun could lose the save; launch with mpirun --mca "
                "odls_base_sigkill_timeout %.0f (see docs/checkpoints.md)", st.seconds, g_sigkill_timeout,
                st.seconds * 4 + 10);
    }
}

/* After each iteration: saves every --save-interval, and decides whether to stop (--exit-interval,
 * --exit-duration-in-mins, a signal with --exit-signal-handler; agreed by all ranks), saving
 * first. *last_saved: the iteration of the newest save. Returns 1 to stop. */
int run_after_iteration(run_state *r, const ckpt_progress *p, double t_begin, int64_t *last_saved)
{
    const td_args *a = r->a;
    int64_t it = p->iteration;
    if (a->save && a->save_interval && it % a->save_interval == 0) {
        run_save_checkpoint(r, p);
        *last_saved = it;
    }
    int32_t stop[3] = {0, 0, 0}; /* the signal received (its number), duration, interval */
    int timed = td_args_given(a, "--exit-duration-in-mins");
    if (a->exit_signal_handler || timed) {
        stop[0] = g_exit_signal;
        stop[1] = timed && (td_now() - t_begin) / 60.0 > a->exit_duration_in_mins;
        comm_allreduce(r->ps->world, stop, 2, COMM_I32, COMM_MAX);
    }
    stop[2] = a->exit_interval && it % a->exit_interval == 0;
    if (!stop[0] && !stop[1] && !stop[2]) return 0;
    int rank0 = r->ps->world_rank == 0;
    const char *sig = signal_name(stop[0]);
    if (a->save && *last_saved != it) {
        if (rank0 && stop[0]) TD_INFO("received %s: saving iteration %lld to %s before exiting", sig, (long long)it, a->save);
        run_save_checkpoint(r, p);
        *last_saved = it;
    } else if (rank0 && stop[0]) {
        TD_INFO("received %s: %s", sig, a->save ? "this iteration is saved already" : "no --save, nothing to save");
    }
    if (rank0) {
        char why[64];
        snprintf(why, sizeof why, "%s received", sig);
        TD_INFO("exiting after iteration %lld (%s)", (long long)it,
                stop[0] ? why : stop[1] ? "--exit-duration-in-mins" : "--exit-interval");
    }
    return 1;
}


/* World rank 0 takes the --save folder's lock for the job (held until it ends); when another run
 * holds it, rank 0 says so in one line and every rank returns 1 together. */
int run_lock_save_dir(const char *dir, comm *world)
{
    char err[4400] = "";
    int32_t busy = 0;
    if (comm_rank(world) == 0) {
        int rc = ckpt_lock_save_dir(dir, err, sizeof err);
        if (rc > 0) td_warn("%s", err);
        busy = rc < 0;
        if (busy) fprintf(stderr, "error: trident train: %s\n", err);
    }
    comm_bcast(world, &busy, 1, COMM_I32, 0);
    return busy;
}

void run_ckpt_signals(const td_args *a, int rank)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    g_signal_says = rank == 0;
    g_output_pipes = getenv("OMPI_MCA_orte_hnp_uri") != NULL; /* started by mpirun: output goes through it */
    int is_default;
    g_sigkill_timeout = ompi_sigkill_timeout(&is_default);
    if (rank == 0 && is_default && a->save)
        td_warn("--exit-signal-handler under Open MPI: on SIGTERM (or Ctrl-C) mpirun passes SIGTERM to the ranks "
                "after odls_base_sigkill_timeout seconds (default 1) and SIGKILLs them as long again later, too "
                "soon to save; launch with mpirun --mca odls_base_sigkill_timeout 60 (more than an iteration plus "
                "a save; see docs/checkpoints.md)");
    sa.sa_handler = on_exit_signal;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
}
