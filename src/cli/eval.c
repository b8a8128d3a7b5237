/* trident eval: strided perplexity of a checkpoint on a dataset (see docs/eval.md). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "cli.h"
#include "trident/args.h"
#include "trident/check.h"
#include "trident/checkpoint.h"
#include "trident/comm.h"
#include "trident/eval.h"
#include "trident/gpt_dataset.h"
#include "trident/parallel_state.h"
#include "trident/timer.h"
#include "trident/tokenizer.h"

static const char SUMMARY[] =
    "Score a dataset with a checkpoint the way WikiText perplexity is measured: the tokens of the chosen\n"
    "documents (--split-name of --split, or all) concatenated in order, windows of --seq-length + 1 tokens\n"
    "every --eval-stride tokens; the first window scores its --seq-length targets, each later one its last\n"
    "--eval-stride. Prints (and appends to --metrics-file) the mean loss per scored token, the perplexity\n"
    "and the token count. Any layout: tensor x pipeline x data parallel under mpirun. The model, and unless\n"
    "given --data-path, --split and --seq-length (so \"valid\" is what the training held out), come from the\n"
    "checkpoint's meta.json.\n"
    "With --task WIKITEXT103|LAMBADA|HELLASWAG --valid-data FILE: the zero-shot evaluations of the Megatron\n"
    "papers and llm.c on their published files (docs/eval.md).";

static void note_append(char *buf, size_t len, const char *fmt, const char *v)
{
    size_t n = strlen(buf);
    if (n + 2 < len) snprintf(buf + n, len - n, "%s", n ? ", " : "");
    n = strlen(buf);
    if (n + 1 < len) snprintf(buf + n, len - n, fmt, v);
}

/* The data settings that define the documents of --split-name, from the training run's flags in
 * the checkpoint's meta.json ("args") where not given: --data-path (one prefix) and --split, so
 * "valid" is the split the training held out. (--seq-length came from the checkpoint already;
 * the seed plays no part: eval takes the documents in order.) `taken` lists what came from the
 * checkpoint. 0, or -1 with a usage error in err. */
static int data_from_checkpoint(td_args *a, const ckpt_meta *m, char *taken, size_t takenlen, char *err, size_t errlen)
{
    cJSON *args = cJSON_Parse(m->args_json ? m->args_json : "{}");
    const cJSON *split = cJSON_GetObjectItemCaseSensitive(args, "split");
    const cJSON *path = cJSON_GetObjectItemCaseSensitive(args, "data_path");
    int rc = 0;
    taken[0] = 0;
    if (!td_args_given(a, "--data-path")) {
        int n = cJSON_IsArray(path) ? cJSON_GetArraySize(path) : 0;
        const cJSON *p0 = n == 1 ? cJSON_GetArrayItem(path, 0) : NULL;
        char idx[4200];
        if (cJSON_IsString(p0)) snprintf(idx, sizeof idx, "%s.idx", p0->valuestring);
        if (cJSON_IsString(p0) && access(idx, R_OK) != 0) {
            snprintf(err, errlen, "--data-path PREFIX is needed: %.1000s/meta.json records the training run's %.1000s, "
                     "but %.1000s cannot be read here (%s; a path relative to where the training ran?)", m->dir,
                     p0->valuestring, idx, td_strerror(errno));
            rc = -1;
        } else if (cJSON_IsString(p0)) {
            for (int i = 0; i < a->data_path.n; i++) free(a->data_path.v[i]);
            a->data_path.v = td_xrealloc(a->data_path.v, sizeof *a->data_path.v);
            a->data_path.v[0] = td_xstrdup(p0->valuestring);
            a->data_path.n = 1;
            note_append(taken, takenlen, "--data-path %s", p0->valuestring);
        } else {
            snprintf(err, errlen, "--data-path PREFIX is needed: %s/meta.json records %s", m->dir,
                     n > 1 ? "a blend (eval scores one dataset prefix: give one of them)"
                           : "no data path of its own (a converted checkpoint, or written before)");
            rc = -1;
        }
    }
    if (rc == 0 && !td_args_given(a, "--split") && strcmp(a->split_name, "all") != 0 && cJSON_IsString(split)) {
        free(a->split);
        a->split = td_xstrdup(split->valuestring);
        note_append(taken, takenlen, "--split %s", split->valuestring);
    }
    cJSON_Delete(args);
    return rc;
}

/* trident eval --task: a zero-shot task on --valid-data (eval_tasks.c). */
static int eval_task(td_args *a, comm *world, const char *prog)
{
    int tp = a->tensor_model_parallel_size, pp = a->pipeline_model_parallel_size;
    if (!a->valid_data) USAGE(world, "%s: --task %s needs --valid-data FILE", prog, a->task);
    cli_check_load_flags(a, world, prog);
    cli_model cmod;
    cli_open_checkpoint(&cmod, a, world, prog);
    int K = a->overlapping_eval;
    if (K > a->seq_length)
        USAGE(world, "%s: --overlapping-eval %d is longer than --seq-length %d", prog, K, a->seq_length);
    cli_load_stage(&cmod, a, world, a->micro_batch_size < 4 && strcmp(a->task, "HELLASWAG") == 0 ? 4 : a->micro_batch_size);
    gpt_model *m = cmod.m;
    ps_state *ps = cmod.ps;
    const tok_tokenizer *tok = cmod.tok;
    const ckpt_meta meta = cmod.meta;
    char err[4096] = "";
    double t0 = td_now();
    char line[512];
    if (strcmp(a->task, "WIKITEXT103") == 0) {
        ev_wikitext_result r;
        if (ev_wikitext(m, ps, tok, a->valid_data, K, &r, err, sizeof err)) td_fatal(1, "%s", err);
        snprintf(line, sizeof line, "\"loss\": %.17g, \"perplexity\": %.17g, \"adjusted_perplexity\": %.17g, "
                 "\"tokens\": %lld, \"original_words\": %lld", r.loss, r.perplexity, r.adjusted_perplexity,
                 (long long)r.doc_tokens, (long long)r.original_words);
        if (ps->world_rank == 0)
            printf("WIKITEXT103: %lld word%s, %lld token%s, %lld window%s every %d | loss %.6f | perplexity %.4f | "
                   "adjusted perplexity (per word) %.4f\n", (long long)r.original_words, td_plural(r.original_words),
                   (long long)r.doc_tokens, td_plural(r.doc_tokens), (long long)r.windows, td_plural(r.windows), K, r.loss, r.perplexity, r.adjusted_perplexity);
    } else if (strcmp(a->task, "LAMBADA") == 0) {
        ev_lambada_result r;
        if (ev_lambada(m, ps, tok, a->valid_data, a->strict_lambada, &r, err, sizeof err)) td_fatal(1, "%s", err);
        snprintf(line, sizeof line, "\"accuracy\": %.17g, \"correct\": %lld, \"examples\": %lld, \"strict\": %s",
                 r.accuracy, (long long)r.correct, (long long)r.n, a->strict_lambada ? "true" : "false");
        if (ps->world_rank == 0)
            printf("LAMBADA%s: %lld of %lld correct | accuracy %.4f\n", a->strict_lambada ? " (strict)" : "",
                   (long long)r.correct, (long long)r.n, r.accuracy);
    } else {
        ev_hellaswag_result r;
        if (ev_hellaswag(m, ps, tok, a->valid_data, &r, err, sizeof err)) td_fatal(1, "%s", err);
        snprintf(line, sizeof line, "\"acc\": %.17g, \"acc_norm\": %.17g, \"examples\": %lld", r.acc, r.acc_norm,
                 (long long)r.n);
        if (ps->world_rank == 0)
            printf("HELLASWAG: %lld example%s | acc %.4f | acc_norm %.4f\n", (long long)r.n, td_plural(r.n), r.acc,
                   r.acc_norm);
    }
    if (ps->world_rank == 0) {
        TD_INFO("eval --task %s: %s (iteration %lld), tp %d x pp %d, %.2f s", a->task, meta.dir,
                (long long)meta.progress.iteration, tp, pp, td_now() - t0);
        if (a->metrics_file) {
            FILE *f = fopen(a->metrics_file, "a");
            if (!f) td_fatal(1, "cannot open --metrics-file %s: %s", a->metrics_file, td_strerror(errno));
            fprintf(f, "{\"task\": \"%s\", \"checkpoint\": \"%s\", %s}\n", a->task, meta.dir, line);
            if (fclose(f) != 0) td_fatal(1, "cannot write --metrics-file %s: %s", a->metrics_file, td_strerror(errno));
        }
        fflush(stdout);
    }
    cli_free_model(&cmod);
    td_args_free(a);
    comm_world_finalize(world);
    return 0;
}

int cli_eval(int argc, char **argv)
{
    const char *prog = "trident eval";
    td_args a;
    if (td_args_parse(&a, TD_CMD_EVAL, prog, argc, argv, 1)) {
        td_args_usage(TD_CMD_EVAL, prog, SUMMARY);
        td_args_free(&a);
        return 0;
    }
    td_log_set_level(a.verbose);
    comm *world = comm_world_init(&argc, &argv);
    comm_set_timeout(a.distributed_timeout_minutes * 60);
    int tp = a.tensor_model_parallel_size, pp = a.pipeline_model_parallel_size;
    if (!a.load) USAGE(world, "%s: --load DIR (a checkpoint) is required", prog);
    if (a.task) return eval_task(&a, world, prog);
    if (a.data_path.n > 1) USAGE(world, "%s: --data-path takes one dataset prefix (blends are not scored)", prog);
    if (comm_size(world) % (tp * pp))
        USAGE(world, "%s: the world size %d is not divisible by --tensor-model-parallel-size %d x "
                     "--pipeline-model-parallel-size %d", prog, comm_size(world), tp, pp);

    ckpt_meta meta;
    char err[4096] = "";
    int rc = ckpt_find(a.load, &meta, err, sizeof err);
    if (rc == 1) td_fatal(1, "--load %s: no checkpoint there (no %s, meta.json or iter_* folder)", a.load, CKPT_LATEST);
    if (rc) td_fatal(1, "%s", err);
    if (meta.note && comm_rank(world) == 0) td_warn("%s", meta.note);
    /* the model is the checkpoint's: a model flag given must agree; --seq-length defaults to its own */
    if (ckpt_args_reconcile(&a, &meta, -1, tp, 0, err, sizeof err)) USAGE(world, "%s: %s", prog, err);
    /* the documents too: the training run's data path and split unless given */
    char taken[4400];
    if (data_from_checkpoint(&a, &meta, taken, sizeof taken, err, sizeof err)) USAGE(world, "%s: %s", prog, err);
    if (!td_args_given(&a, "--seq-length")) {
        char s[32];
        snprintf(s, sizeof s, "%d", a.seq_length);
        note_append(taken, sizeof taken, "--seq-length %s", s);
    }
    int S = a.seq_length, K = td_args_given(&a, "--eval-stride") ? a.eval_stride : S;
    if (K > S) USAGE(world, "%s: --eval-stride %d is longer than --seq-length %d (tokens would go unscored)", prog, K, S);
    gpt_config c = ckpt_model_config(&meta, tp, S, a.make_vocab_size_divisible_by);
    cli_need_causal(&c, world, prog, meta.dir, 1);
    if (S > c.max_pos)
        USAGE(world, "%s: --seq-length %d is longer than the checkpoint's %d positions", prog, S, c.max_pos);
    if (c.heads % tp || c.ffn % tp)
        USAGE(world, "%s: --tensor-model-parallel-size %d does not divide the checkpoint's %d heads and FFN size %d",
              prog, tp, c.heads, c.ffn);
    if (c.num_layers % pp)
        USAGE(world, "%s: --pipeline-model-parallel-size %d does not divide the checkpoint's %d layer%s", prog, pp,
              c.num_layers, td_plural(c.num_layers));

    if (taken[0] && comm_rank(world) == 0)
        TD_INFO("eval: from the checkpoint's meta.json (%s/meta.json): %s (give a flag to override)", meta.dir, taken);

    /* the documents */
    dsr_reader *d = dsr_open(a.data_path.v[0], err, sizeof err);
    if (!d) td_fatal(1, "%s", err);
    /* every id inside the checkpoint's vocabulary: rank 0 checks (and caches), then the others load */
    char vsrc[1100];
    snprintf(vsrc, sizeof vsrc, "the vocabulary of checkpoint %s", meta.dir);
    if (comm_rank(world) == 0) gptds_check_token_ids(d, c.vocab, vsrc, a.data_cache_path, 0);
    comm_barrier(world);
    if (comm_rank(world) != 0) gptds_check_token_ids(d, c.vocab, vsrc, a.data_cache_path, 0);
    int64_t ndocs = dsr_num_sequences(d), beg = 0, end = ndocs;
    if (strcmp(a.split_name, "all") != 0) {
        double w[GPTDS_NSPLITS];
        int64_t b[GPTDS_NSPLITS], e[GPTDS_NSPLITS];
        if (gptds_parse_split(a.split, w, err, sizeof err)) USAGE(world, "%s: --split %s", prog, err);
        gptds_split_range(w, ndocs, b, e);
        int s = strcmp(a.split_name, "train") == 0 ? 0 : strcmp(a.split_name, "valid") == 0 ? 1 : 2;
        beg = b[s], end = e[s];
        if (beg == end)
            USAGE(world, "%s: --split %s leaves the %s split of %s empty; use --split-name all or another --split", prog,
                  a.split, a.split_name, a.data_path.v[0]);
    }

    /* the model: one stage per pipeline rank */
    ps_state *ps = ps_init(world, tp, pp);
    backend *be = be_create(a.backend, 0);
    int per = c.num_layers / pp;
    gpt_model *m = gpt_create(&c, ps, be, ps->pp_rank * per, per, a.micro_batch_size, 1);
    ckpt_model cm = {ps, 1, &m, NULL, NULL, NULL, NULL};
    double t0 = td_now();
    rc = ckpt_load(&meta, &cm, 0, err, sizeof err);
    if (rc) td_fatal(1, "%s", err);
    if (ps->world_rank == 0)
        TD_INFO("eval: %s (iteration %lld), tp %d x pp %d x dp %d; %s split of %s: documents [%lld, %lld)", meta.dir,
                (long long)meta.progress.iteration, tp, pp, ps->dp, a.split_name, a.data_path.v[0], (long long)beg,
                (long long)end);
    ev_result res;
    ev_score(m, ps, d, beg, end, K, a.micro_batch_size, &res);
    double secs = td_now() - t0;
    if (ps->world_rank == 0) {
        printf("eval: %lld document%s, %lld token%s; %lld window%s of %d+1 tokens every %d; %lld token%s scored\n",
               (long long)res.documents, td_plural(res.documents), (long long)res.doc_tokens, td_plural(res.doc_tokens),
               (long long)res.windows, td_plural(res.windows), S, K, (long long)res.tokens, td_plural(res.tokens));
        printf("eval: loss %.6f | perplexity %.4f | tokens %lld | %.2f s\n", res.loss, res.perplexity,
               (long long)res.tokens, secs);
        if (a.metrics_file) {
            FILE *f = fopen(a.metrics_file, "a");
            if (!f) td_fatal(1, "cannot open --metrics-file %s: %s", a.metrics_file, td_strerror(errno));
            fprintf(f, "{\"eval\": \"%s\", \"checkpoint\": \"%s\", \"iteration\": %lld, \"documents\": %lld, "
                       "\"document_tokens\": %lld, \"seq_length\": %d, \"stride\": %d, \"windows\": %lld, "
                       "\"tokens\": %lld, \"loss\": %.17g, \"perplexity\": %.17g, \"split\": \"%s\", "
                       "\"first_document\": %lld}\n",
                    a.split_name, meta.dir, (long long)meta.progress.iteration, (long long)res.documents,
                    (long long)res.doc_tokens, S, K, (long long)res.windows, (long long)res.tokens, res.loss,
                    res.perplexity, strcmp(a.split_name, "all") == 0 ? "all" : a.split, (long long)beg);
            if (fclose(f) != 0) td_fatal(1, "cannot write --metrics-file %s: %s", a.metrics_file, td_strerror(errno));
        }
        fflush(stdout);
    }
    gpt_free(m);
    be_free(be);
    ps_free(ps);
    dsr_close(d);
    ckpt_meta_free(&meta);
    td_args_free(&a);
    comm_world_finalize(world);
    return 0;
}
