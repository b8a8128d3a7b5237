/* trident preprocess: loose JSON (or text files) -> GPT-2 BPE or a tokenizer.json -> Megatron .bin/.idx.
 * Every flag is checked (exit 2, naming it) before the tokenizer is loaded. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "trident/args.h"
#include "trident/check.h"
#include "trident/preprocess.h"
#include "trident/sft.h"
#include "trident/timer.h"
#include "trident/tokenizer.h"

#define PROG "trident preprocess"

static void need_readable(const char *flag, const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0) td_usage_error(PROG ": %s %s: %s", flag, path, td_strerror(errno));
    if (S_ISDIR(st.st_mode)) td_usage_error(PROG ": %s %s is a folder; pass a file", flag, path);
    if (access(path, R_OK) != 0) td_usage_error(PROG ": %s %s is not readable: %s", flag, path, td_strerror(errno));
}

/* The folder the output prefix names must exist. */
static void need_output_folder(const char *prefix)
{
    char *dir = td_xstrdup(prefix);
    char *slash = strrchr(dir, '/');
    if (!slash) {
        free(dir);
        return;
    }
    if (slash == dir) slash[1] = '\0';
    else *slash = '\0';
    struct stat st;
    int ok = stat(dir, &st) == 0 && S_ISDIR(st.st_mode);
    if (!ok) {
        /* td_usage_error exits; copy the name into a fixed buffer so nothing leaks on the way */
        char shown[512];
        snprintf(shown, sizeof shown, "%s", dir);
        free(dir);
        td_usage_error(PROG ": --output-prefix %s: folder %s does not exist; create it first", prefix, shown);
    }
    free(dir);
}

static void validate(const td_args *a)
{
    char msg[512];
    if (a->input.n == 0)
        td_usage_error(PROG ": --input is required (one or more .jsonl or text files; .gz and .zst are decompressed)");
    if (!a->output_prefix || !*a->output_prefix)
        td_usage_error(PROG ": --output-prefix is required (writes PREFIX_<key>_document.bin and .idx, or "
                       "PREFIX_<key>_sentence.* with --split-sentences)");
    tok_spec spec = {a->tokenizer_type, a->vocab_file, a->merge_file, a->tokenizer_model};
    if (tok_check_spec(&spec, msg, sizeof msg) != 0) td_usage_error(PROG ": %s", msg);
    if (!a->sft) {
        const char *only[] = {"--sft-format", "--prompt-template", "--chat-template", "--sft-truncation-field"};
        for (int i = 0; i < 4; i++)
            if (td_args_given(a, only[i])) td_usage_error(PROG ": %s applies to --sft only", only[i]);
    } else {
        if (strcmp(a->input_format, "json") != 0 || a->split_sentences || td_args_given(a, "--json-keys") ||
            a->append_eod || a->skip_bad_lines)
            td_usage_error(PROG ": --sft reads JSON lines whole: leave out --input-format text, --split-sentences, "
                           "--json-keys, --append-eod and --skip-bad-lines");
        sft_format f;
        sft_parse_format(a->sft_format, &f);
        if (f == SFT_PROMPT_RESPONSE) {
            if (sft_check_prompt_template(a->prompt_template, msg, sizeof msg) != 0) td_usage_error(PROG ": %s", msg);
            if (a->chat_template) td_usage_error(PROG ": --chat-template applies to --sft-format chat and sharegpt");
            if (a->sft_truncation_field && *a->sft_truncation_field &&
                sft_check_truncation_field(a->prompt_template, a->sft_truncation_field, msg, sizeof msg) != 0)
                td_usage_error(PROG ": %s", msg);
        } else {
            if (!a->chat_template)
                td_usage_error(PROG ": --sft-format %s needs --chat-template (the model's tokenizer_config.json, or "
                               "its folder)", a->sft_format);
            if (a->prompt_template) td_usage_error(PROG ": --prompt-template applies to --sft-format prompt-response");
            if (a->sft_truncation_field)
                td_usage_error(PROG ": --sft-truncation-field applies to --sft-format prompt-response (a chat sample "
                               "is truncated at its ends, by train's --sft-truncation-method)");
        }
    }
    if (a->json_keys.n == 0) td_usage_error(PROG ": --json-keys needs at least one key");
    for (int i = 0; i < a->json_keys.n; i++) {
        const char *k = a->json_keys.v[i];
        if (!*k || strchr(k, '/'))
            td_usage_error(PROG ": --json-keys '%s' cannot name an output file (empty or contains '/')", k);
        for (int j = 0; j < i; j++)
            if (strcmp(k, a->json_keys.v[j]) == 0) td_usage_error(PROG ": --json-keys lists '%s' twice", k);
    }
    if (a->json_keys.n > 64) td_usage_error(PROG ": --json-keys takes at most 64 keys (got %d)", a->json_keys.n);
    int text = strcmp(a->input_format, "text") == 0;
    if (text && a->json_keys.n != 1)
        td_usage_error(PROG ": --input-format text takes one --json-keys value (it only names the output), got %d",
                       a->json_keys.n);
    if (text && td_args_given(a, "--skip-bad-lines"))
        td_usage_error(PROG ": --skip-bad-lines applies to --input-format json only");
    for (int i = 0; i < a->input.n; i++) need_readable("--input", a->input.v[i]);
    const char *flags[2], *paths[2];
    for (int i = 0, n = tok_spec_files(&spec, flags, paths); i < n; i++) need_readable(flags[i], paths[i]);
    need_output_folder(a->output_prefix);
}

/* --sft: the samples and their answer masks (include/data/trident/sft.h). */
static int run_sft(const td_args *a, const tok_tokenizer *tok)
{
    char err[1024];
    sft_config c = {.prompt_template = a->prompt_template, .truncation_field = a->sft_truncation_field,
                    .workers = a->workers};
    if (!c.truncation_field) c.truncation_field = sft_default_truncation_field(a->prompt_template);
    sft_parse_format(a->sft_format, &c.format);
    ct_config cfg = {0};
    ct_template *t = NULL;
    if (c.format != SFT_PROMPT_RESPONSE) {
        struct stat st;
        char *path = NULL;
        if (stat(a->chat_template, &st) == 0 && S_ISDIR(st.st_mode)) {
            if (!(path = cli_find_tokenizer_config(a->chat_template)))
                td_fatal(2, PROG ": --chat-template %s: the folder holds no tokenizer_config.json", a->chat_template);
        } else {
            path = td_xstrdup(a->chat_template);
        }
        if (ct_load_config(path, &cfg, err, sizeof err) != 0) td_fatal(1, PROG ": --chat-template %s: %s", path, err);
        if (!cfg.template_src) td_fatal(1, PROG ": --chat-template %s has no chat_template", path);
        if (!(t = ct_compile(cfg.template_src, err, sizeof err)))
            td_fatal(1, PROG ": the chat_template of %s: %s", path, err);
        free(path);
        c.chat = &cfg, c.tmpl = t;
    }
    sft_prep_stats st;
    double t0 = td_now();
    int rc = sft_prep_run(&c, tok, (const char *const *)a->input.v, a->input.n, a->output_prefix, &st, err, sizeof err);
    ct_free(t);
    ct_config_free(&cfg);
    if (rc != 0) td_fatal(1, PROG ": %s", err);
    double secs = td_now() - t0;
    char *data = prep_dataset_prefix(a->output_prefix, "sft", 0);
    if (a->verbose)
        fprintf(stderr, "preprocess --sft: %lld samples, %lld tokens, %lld of them the answer's (%.1f%%); wrote %s and "
                        "%s_answer_mask; %.2f s, %.0f samples/s with %d worker%s\n", (long long)st.samples,
                (long long)st.tokens, (long long)st.answer_tokens,
                st.tokens ? 100.0 * (double)st.answer_tokens / (double)st.tokens : 0.0, data, data, secs,
                secs > 0 ? (double)st.samples / secs : 0.0, c.workers, td_plural(c.workers));
    free(data);
    return 0;
}

int cli_preprocess(int argc, char **argv)
{
    td_args a;
    if (td_args_parse(&a, TD_CMD_PREPROCESS, PROG, argc, argv, 1) == 1) {
        td_args_usage(TD_CMD_PREPROCESS, PROG,
                      "Tokenizes loose JSON (one object per line) or text files with GPT-2 BPE (or a Hugging Face\n"
                      "tokenizer.json: --tokenizer-type HuggingFaceTokenizer --tokenizer-model FILE) into Megatron\n"
                      "indexed datasets PREFIX_<key>_document.bin/.idx (MMIDIDX v1). With --split-sentences each\n"
                      "document is cut into sentences, one sequence each, in PREFIX_<key>_sentence.bin/.idx.");
        td_args_free(&a);
        return 0;
    }
    validate(&a);
    td_log_set_level(a.verbose);

    char err[1024];
    tok_spec spec = {a.tokenizer_type, a.vocab_file, a.merge_file, a.tokenizer_model};
    tok_tokenizer *tok = tok_open(&spec, err, sizeof err);
    if (!tok) {
        td_args_free(&a);
        td_fatal(1, "%s", err);
    }
    if (a.sft) {
        int rc = run_sft(&a, tok);
        tok_free(tok);
        td_args_free(&a);
        return rc;
    }
    prep_config c = {
        .inputs = (const char *const *)a.input.v,
        .n_inputs = a.input.n,
        .keys = (const char *const *)a.json_keys.v,
        .n_keys = a.json_keys.n,
        .text_format = strcmp(a.input_format, "text") == 0,
        .output_prefix = a.output_prefix,
        .split_sentences = a.split_sentences,
        .append_eod = a.append_eod,
        .workers = a.workers,
        .skip_bad_lines = a.skip_bad_lines,
        .log_every = a.log_interval > INT64_MAX / 1000 ? INT64_MAX : a.log_interval * 1000,
        .quiet = a.verbose == 0,
    };
    int rc = prep_run(&c, tok, NULL, err, sizeof err);
    tok_free(tok);
    td_args_free(&a);
    if (rc != 0) td_fatal(1, "%s", err);
    return 0;
}
