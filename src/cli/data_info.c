/* trident data-info: opens the GPT dataset the way training would (splits, epochs, indices,
 * blend, caches) and prints what it found and did. */
#include <inttypes.h>
#include <stdio.h>

#include "cli.h"
#include "trident/args.h"
#include "trident/tokenizer.h"
#include "trident/check.h"
#include "trident/gpt_dataset.h"
#include "trident/dataset_reader.h"

static void print_cache(const char *file, int loaded, double seconds)
{
    if (!file) printf("not cached (%s in %.3f s)", loaded ? "loaded" : "built", seconds);
    else printf("%s (%s in %.3f s)", file, loaded ? "loaded" : "built", seconds);
}

static void print_dataset(const gptds *ds, int i)
{
    const gptds_dataset_info *in = gptds_dataset(ds, i);
    printf("\ndataset %d of %d: %s (weight %.6g)\n", i + 1, gptds_num_datasets(ds), in->path, in->weight);
    /* GPT's "documents" are the sequences; a sentence-level dataset (--split-sentences) groups several
     * sequences into each document of the .idx, and then both counts are shown. */
    int64_t ndocs = dsr_num_documents(in->reader);
    const char *unit = ndocs != in->num_documents ? "sequence" : "document";
    printf("  dtype %s, %ss %" PRId64, dsr_token_type(in->reader), unit, in->num_documents);
    if (ndocs != in->num_documents) printf(" in %" PRId64 " documents (%.2f per document)", ndocs,
                                           ndocs ? (double)in->num_documents / (double)ndocs : 0.0);
    printf(", tokens %" PRId64 ", %s length mean %.1f min %d max %d\n", in->num_tokens, unit, in->mean_len,
           in->min_len, in->max_len);
    if (ndocs != in->num_documents)
        printf("  (the .idx document index groups the sequences into documents, as --split-sentences writes; GPT "
               "splits and samples by sequence, as Megatron)\n");
    if (in->ids_checked)
        printf("  token ids: all below the vocabulary size (%s, %.3f s)\n",
               in->ids_checked == 2 ? "checked before, cached" : "scanned now", in->ids_seconds);
    printf("  %-6s %-22s %12s %7s %10s %10s  %s\n", "split", ndocs != in->num_documents ? "sequences" : "documents",
           "tokens", "epochs", "samples", "wanted", "index cache");
    for (int s = 0; s < GPTDS_NSPLITS; s++) {
        const gptds_split_info *sp = &in->split[s];
        char range[64], wanted[32];
        snprintf(range, sizeof range, "%" PRId64 " [%" PRId64 ", %" PRId64 ")", sp->doc_end - sp->doc_begin,
                 sp->doc_begin, sp->doc_end);
        if (sp->samples_wanted < 0) snprintf(wanted, sizeof wanted, "1 epoch");
        else snprintf(wanted, sizeof wanted, "%" PRId64, sp->samples_wanted);
        printf("  %-6s %-22s %12" PRId64 " %7" PRId64 " %10" PRId64 " %10s  ", gptds_split_name((gptds_split)s), range,
               sp->num_tokens, sp->num_epochs, sp->num_samples, wanted);
        if (sp->num_epochs == 0) printf("empty split, no indices");
        else print_cache(sp->cache_file, sp->cache_loaded, sp->seconds);
        if (sp->separate_final_epoch) printf(", final epoch shuffled separately");
        printf("\n");
    }
}

static void print_blend(const gptds *ds)
{
    printf("\nblend (Megatron's greedy max-error rule over the normalised weights):\n");
    for (int s = 0; s < GPTDS_NSPLITS; s++) {
        const gptds_blend_info *b = gptds_blend(ds, (gptds_split)s);
        printf("  %-6s ", gptds_split_name((gptds_split)s));
        if (b->size < 0) {
            printf("not sized: give --train-iters (or --train-samples) and --global-batch-size\n");
            continue;
        }
        if (b->size == 0) {
            printf("empty\n");
            continue;
        }
        printf("samples %" PRId64 " =", b->size);
        for (int i = 0; i < gptds_num_datasets(ds); i++)
            printf("%s %" PRId64 " (%.4f)", i ? " +" : "", b->per_dataset[i], (double)b->per_dataset[i] / (double)b->size);
        printf(", ");
        print_cache(b->cache_file, b->cache_loaded, b->seconds);
        printf("\n");
    }
}

int cli_data_info(int argc, char **argv)
{
    td_args a;
    if (td_args_parse(&a, TD_CMD_DATA_INFO, "trident data-info", argc, argv, 1) == 1) {
        td_args_usage(TD_CMD_DATA_INFO, "trident data-info",
                      "Splits the documents of --data-path by --split, builds or loads the document, sample and\n"
                      "shuffle indices of each split (and the blend indices of a weighted --data-path) the way\n"
                      "training does, and prints the statistics. Without --train-iters or --train-samples each\n"
                      "split is sized to one epoch.");
        td_args_free(&a);
        return 0;
    }
    td_log_set_level(a.verbose);
    int64_t n[GPTDS_NSPLITS];
    const int64_t *wanted = NULL;
    if (td_args_given(&a, "--train-iters") || td_args_given(&a, "--train-samples")) {
        if (!td_args_given(&a, "--global-batch-size"))
            td_usage_error("trident data-info: --train-iters and --train-samples need --global-batch-size to count "
                           "the samples of each split");
        gptds_target_samples(a.train_iters, a.train_samples, a.eval_interval, a.eval_iters, a.global_batch_size, n);
        wanted = n;
    }
    gptds_config cfg;
    gptds_config_from_args(&cfg, &a, wanted);
    char vsrc[1200];
    if (a.vocab_file || a.tokenizer_model) { /* optional here: with it, the token ids are checked as training does */
        char err[1024];
        tok_spec spec = {a.tokenizer_type, a.vocab_file, a.merge_file, a.tokenizer_model};
        if (tok_check_spec(&spec, err, sizeof err) != 0) td_usage_error("trident data-info: %s", err);
        tok_tokenizer *tok = tok_open(&spec, err, sizeof err);
        const char *flag = a.tokenizer_model ? "--tokenizer-model" : "--vocab-file";
        const char *file = a.tokenizer_model ? a.tokenizer_model : a.vocab_file;
        if (!tok) td_fatal(1, "trident data-info: %s %s: %s", flag, file, err);
        cfg.vocab_size = tok_vocab_size(tok);
        tok_free(tok);
        snprintf(vsrc, sizeof vsrc, "%s %s", flag, file);
        cfg.vocab_source = vsrc;
    }
    gptds *ds = gptds_open(&cfg);

    double w[GPTDS_NSPLITS];
    char err[256];
    gptds_parse_split(cfg.split, w, err, sizeof err);
    printf("seq_length %d (samples of %d tokens), seed %" PRIu64 ", split %s = train %.6g, valid %.6g, test %.6g\n",
           cfg.seq_length, cfg.seq_length + 1, cfg.seed, cfg.split, w[0], w[1], w[2]);
    if (wanted)
        printf("samples wanted (Megatron's formula): train %" PRId64 ", valid %" PRId64 ", test %" PRId64 "\n", n[0],
               n[1], n[2]);
    else
        printf("samples wanted: one epoch per split (give --train-iters or --train-samples, and "
               "--global-batch-size, to size the splits as training will)\n");
    for (int i = 0; i < gptds_num_datasets(ds); i++) print_dataset(ds, i);
    if (cfg.weights) print_blend(ds);
    printf("\nsamples available: train %" PRId64 ", valid %" PRId64 ", test %" PRId64 "\n",
           gptds_num_samples(ds, GPTDS_TRAIN), gptds_num_samples(ds, GPTDS_VALID), gptds_num_samples(ds, GPTDS_TEST));

    gptds_close(ds);
    gptds_config_free(&cfg);
    td_args_free(&a);
    return 0;
}
