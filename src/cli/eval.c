/* trident eval: strided perplexity of a checkpoint on a dataset (see docs/eval.md). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "trident/args.h"
#include "trident/check.h"
#include "trident/debug.h"
#include "trident/checkpoint.h"
#include "trident/comm.h"
#include "trident/eval.h"
#include "trident/sft.h"
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
    "papers and llm.c on their published files; --task LOGLIKELIHOOD: each {\"context\", \"continuation\"} item's\n"
    "log-likelihood as lm-evaluation-harness scores it, a line each in --metrics-file (docs/eval.md).";

/* trident eval --task: a zero-shot task on --valid-data (eval_tasks.c). */
static int eval_task(td_args *a, comm *world, const char *prog)
{
    int tp = a->tensor_model_parallel_size, pp = a->pipeline_model_parallel_size;
    if (!a->valid_data) USAGE(world, "%s: --task %s needs --valid-data FILE", prog, a->task);
    cli_check_load_flags(a, world, prog, CLI_LOAD_TOKENIZER);
    cli_model cmod;
    cli_open_checkpoint(&cmod, a, world, prog, CLI_LOAD_TOKENIZER);
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
    } else if (strcmp(a->task, "LOGLIKELIHOOD") == 0) {
        ev_ll_item *it;
        int n;
        if (ev_loglikelihood(m, ps, tok, a->valid_data, &it, &n, err, sizeof err)) td_fatal(1, "%s", err);
        double sum = 0;
        int greedy = 0;
        for (int i = 0; i < n; i++) sum += it[i].loglikelihood, greedy += it[i].is_greedy;
        snprintf(line, sizeof line, "\"items\": %d, \"loglikelihood\": %.17g, \"greedy\": %d", n, sum, greedy);
        if (ps->world_rank == 0) {
            printf("LOGLIKELIHOOD: %d item%s | sum of log-likelihoods %.6f | %d greedy\n", n, td_plural(n), sum, greedy);
            FILE *f = a->metrics_file ? fopen(a->metrics_file, "a") : NULL;
            if (a->metrics_file && !f) td_fatal(1, "cannot open --metrics-file %s: %s", a->metrics_file, td_strerror(errno));
            for (int i = 0; f && i < n; i++) /* each item's, in file order, before the summary line */
                fprintf(f, "{\"task\": \"LOGLIKELIHOOD\", \"item\": %d, \"loglikelihood\": %.17g, \"is_greedy\": %s, "
                        "\"tokens\": %d}\n", i, it[i].loglikelihood, it[i].is_greedy ? "true" : "false", it[i].tokens);
            if (f && fclose(f) != 0) td_fatal(1, "cannot write --metrics-file %s: %s", a->metrics_file, td_strerror(errno));
        }
        free(it);
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

/* --sft: the answer-only loss of the split's samples, one a row (ev_sft); frees what cli_eval opened. */
static void eval_sft(td_args *a, comm *world, cli_model *cmod, dsr_reader *d, int64_t beg, int64_t end, double t0)
{
    char err[4096] = "";
    char *mp = sft_mask_prefix(a->data_path.v[0]);
    dsr_reader *mask = dsr_open(mp, err, sizeof err);
    if (!mask) td_fatal(1, "trident eval --sft: the answer mask %s: %s (write both with preprocess --sft)", mp, err);
    if (dsr_num_sequences(mask) != dsr_num_sequences(d) ||
        memcmp(dsr_seq_lens(mask), dsr_seq_lens(d), (size_t)dsr_num_sequences(d) * sizeof(int32_t)) != 0)
        td_fatal(1, "trident eval --sft: %s and its answer mask %s do not hold the same samples; write both again "
                    "with preprocess --sft", a->data_path.v[0], mp);
    ev_result res;
    sft_trunc how = SFT_TRUNC_RIGHT;
    sft_parse_truncation(a->sft_truncation_method, &how);
    ev_sft(cmod->m, cmod->ps, d, mask, beg, end, a->micro_batch_size, !a->no_answer_only_loss, how, 0, &res);
    double secs = td_now() - t0;
    if (cmod->ps->world_rank == 0) {
        const char *what = a->no_answer_only_loss ? "every target" : "the answer's targets";
        printf("eval --sft: %lld sample%s (%lld truncated past --seq-length + 1 = %d tokens, --sft-truncation-method "
               "%s), %lld tokens; %lld of %s scored\n", (long long)res.documents, td_plural(res.documents),
               (long long)res.windows, a->seq_length + 1, how == SFT_TRUNC_LEFT ? "left" : "right",
               (long long)res.doc_tokens, (long long)res.tokens, what);
        printf("eval: loss %.6f | perplexity %.4f | tokens %lld | %.2f s\n", res.loss, res.perplexity,
               (long long)res.tokens, secs);
        if (a->metrics_file) {
            FILE *f = fopen(a->metrics_file, "a");
            if (!f) td_fatal(1, "cannot open --metrics-file %s: %s", a->metrics_file, td_strerror(errno));
            fprintf(f, "{\"eval\": \"%s\", \"sft\": true, \"answer_only\": %s, \"checkpoint\": \"%s\", "
                       "\"iteration\": %lld, \"samples\": %lld, \"samples_cut\": %lld, \"sample_tokens\": %lld, "
                       "\"seq_length\": %d, \"tokens\": %lld, \"loss\": %.17g, \"perplexity\": %.17g}\n",
                    a->split_name, a->no_answer_only_loss ? "false" : "true", cmod->meta.dir,
                    (long long)cmod->meta.progress.iteration, (long long)res.documents, (long long)res.windows,
                    (long long)res.doc_tokens, a->seq_length, (long long)res.tokens, res.loss, res.perplexity);
            if (fclose(f) != 0) td_fatal(1, "cannot write --metrics-file %s: %s", a->metrics_file, td_strerror(errno));
        }
        fflush(stdout);
    }
    dsr_close(mask);
    free(mp);
    dsr_close(d);
    cli_free_model(cmod);
    td_args_free(a);
    comm_world_finalize(world);
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
    td_debug_from_args(&a);
    comm *world = comm_world_init(&argc, &argv);
    comm_set_timeout(a.distributed_timeout_minutes * 60);
    int tp = a.tensor_model_parallel_size, pp = a.pipeline_model_parallel_size;
    if (!a.load) USAGE(world, "%s: --load DIR (a checkpoint) is required", prog);
    if (a.task) return eval_task(&a, world, prog);
    if (a.data_path.n > 1) USAGE(world, "%s: --data-path takes one dataset prefix (blends are not scored)", prog);
    cli_check_load_flags(&a, world, prog, 0);
    cli_model cmod;
    cli_open_checkpoint(&cmod, &a, world, prog, CLI_LOAD_SCORING);
    const ckpt_meta *meta = &cmod.meta;
    const gpt_config *c = &cmod.cfg;
    /* the documents too: the training run's data path and split unless given */
    char err[4096] = "", taken[4400];
    if (ckpt_args_eval_data(&a, meta, taken, sizeof taken, err, sizeof err)) USAGE(world, "%s: %s", prog, err);
    int S = a.seq_length, K = td_args_given(&a, "--eval-stride") ? a.eval_stride : S;
    if (K > S) USAGE(world, "%s: --eval-stride %d is longer than --seq-length %d (tokens would go unscored)", prog, K, S);
    if (S > c->max_pos)
        USAGE(world, "%s: --seq-length %d is longer than the checkpoint's %d positions", prog, S, c->max_pos);
    if (taken[0] && comm_rank(world) == 0)
        TD_INFO("eval: from the checkpoint's meta.json (%s/meta.json): %s (give a flag to override)", meta->dir, taken);

    /* the documents, every id inside the checkpoint's vocabulary */
    char vsrc[1100];
    snprintf(vsrc, sizeof vsrc, "the vocabulary of checkpoint %s", meta->dir);
    dsr_reader *d = ev_open_dataset(world, a.data_path.v[0], c->vocab, vsrc, a.data_cache_path);
    int64_t beg, end;
    if (gptds_split_docs(a.split, a.split_name, a.data_path.v[0], dsr_num_sequences(d), &beg, &end, err, sizeof err))
        USAGE(world, "%s: %s", prog, err);

    /* the model: one stage per pipeline rank */
    double t0 = td_now();
    cli_load_stage(&cmod, &a, world, a.micro_batch_size);
    gpt_model *m = cmod.m;
    ps_state *ps = cmod.ps;
    if (ps->world_rank == 0)
        TD_INFO("eval: %s (iteration %lld), tp %d x pp %d x dp %d; %s split of %s: documents [%lld, %lld)", meta->dir,
                (long long)meta->progress.iteration, tp, pp, ps->dp, a.split_name, a.data_path.v[0], (long long)beg,
                (long long)end);
    if (a.sft) {
        eval_sft(&a, world, &cmod, d, beg, end, t0);
        return 0;
    }
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
                    a.split_name, meta->dir, (long long)meta->progress.iteration, (long long)res.documents,
                    (long long)res.doc_tokens, S, K, (long long)res.windows, (long long)res.tokens, res.loss,
                    res.perplexity, strcmp(a.split_name, "all") == 0 ? "all" : a.split, (long long)beg);
            if (fclose(f) != 0) td_fatal(1, "cannot write --metrics-file %s: %s", a.metrics_file, td_strerror(errno));
        }
        fflush(stdout);
    }
    dsr_close(d);
    cli_free_model(&cmod);
    td_args_free(&a);
    comm_world_finalize(world);
    return 0;
}
