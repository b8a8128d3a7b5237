/* trident generate: text from a checkpoint, any tensor x pipeline layout (see docs/generate.md). */
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
#include "trident/generate.h"
#include "trident/parallel_state.h"
#include "trident/timer.h"
#include "trident/tokenizer.h"

static const char SUMMARY[] =
    "Generate text from a checkpoint (any saved layout; a Hugging Face model after `trident convert`):\n"
    "the prompts of --prompt, or of --prompt-file / stdin one a line, batched together, continued by\n"
    "--max-new-tokens tokens each (stopping early at the end-of-document token), greedily or sampled\n"
    "(--temperature, --top-k, --top-p, --seed: the same text in every layout). Keys and values are kept\n"
    "per layer, so each new token costs one position's forward. One prompt streams its tokens as they\n"
    "come; several are printed when done. Runs on one rank or under mpirun in any tp x pp layout.";


/* The prompts of a file (or stdin for "-"), one a line, empty lines skipped. */
static void read_prompts(const char *path, td_strlist *out)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "r");
    if (!f) td_fatal(1, "--prompt-file %s: %s", path, td_strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, f)) >= 0) {
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
        if (n == 0) continue;
        out->v = td_xrealloc(out->v, (size_t)(out->n + 1) * sizeof(char *));
        out->v[out->n++] = td_xstrdup(line);
    }
    free(line);
    if (f != stdin) fclose(f);
}

typedef struct {
    const tok_tokenizer *tok;
    int32_t eod; /* -1 under --ignore-eod */
} streamer;

/* One prompt: its tokens' text as they come (the end-of-document token ends it unprinted). */
static void stream_token(void *user, int b, int32_t token)
{
    (void)b;
    const streamer *s = user;
    if (token == s->eod) return;
    char *text = NULL, err[256];
    size_t len = 0;
    if (tok_decode(s->tok, &token, 1, &text, &len, err, sizeof err) == 0) fwrite(text, 1, len, stdout);
    free(text);
    fflush(stdout);
}

int cli_generate(int argc, char **argv)
{
    const char *prog = "trident generate";
    td_args a;
    if (td_args_parse(&a, TD_CMD_GENERATE, prog, argc, argv, 1)) {
        td_args_usage(TD_CMD_GENERATE, prog, SUMMARY);
        td_args_free(&a);
        return 0;
    }
    td_log_set_level(a.verbose);
    td_log_set_stream(stderr); /* stdout holds the generated text alone */
    td_debug_from_args(&a);
    comm *world = comm_world_init(&argc, &argv);
    comm_set_timeout(a.distributed_timeout_minutes * 60);
    int tp = a.tensor_model_parallel_size, pp = a.pipeline_model_parallel_size;
    cli_check_load_flags(&a, world, prog, CLI_LOAD_TOKENIZER);
    char err[4096] = "";

    /* the prompts: every rank reads them (a file, or stdin on rank 0 passed on) */
    td_strlist prompts = {0, NULL};
    for (int i = 0; i < a.prompt.n; i++) {
        prompts.v = td_xrealloc(prompts.v, (size_t)(prompts.n + 1) * sizeof(char *));
        prompts.v[prompts.n++] = td_xstrdup(a.prompt.v[i]);
    }
    const char *file = a.prompt_file ? a.prompt_file : a.prompt.n ? NULL : "-";
    if (file && (strcmp(file, "-") != 0 || comm_rank(world) == 0)) read_prompts(file, &prompts);
    if (file && strcmp(file, "-") == 0) { /* stdin: rank 0's lines to every rank */
        int32_t n = prompts.n;
        comm_bcast(world, &n, 1, COMM_I32, 0);
        for (int i = 0; i < n; i++) {
            int32_t len = comm_rank(world) == 0 ? (int32_t)strlen(prompts.v[i]) + 1 : 0;
            comm_bcast(world, &len, 1, COMM_I32, 0);
            if (comm_rank(world) != 0) {
                prompts.v = td_xrealloc(prompts.v, (size_t)(prompts.n + 1) * sizeof(char *));
                prompts.v[prompts.n++] = td_xmalloc((size_t)len);
            }
            comm_bcast(world, prompts.v[i], (size_t)len, COMM_U8, 0);
        }
    }
    if (prompts.n == 0) USAGE(world, "%s: no prompt: give --prompt TEXT, --prompt-file FILE or lines on stdin", prog);

    cli_model cm;
    cli_open_checkpoint(&cm, &a, world, prog, CLI_LOAD_TOKENIZER);
    const tok_tokenizer *tok = cm.tok;
    const gpt_config c = cm.cfg;

    /* the prompts' tokens */
    int B = prompts.n;
    int32_t **ids = td_xcalloc((size_t)B, sizeof *ids), **out = td_xcalloc((size_t)B, sizeof *out);
    int *lens = td_xcalloc((size_t)B, sizeof(int)), *out_lens = td_xcalloc((size_t)B, sizeof(int));
    tok_worker *w = tok_worker_new(tok);
    for (int b = 0; b < B; b++) {
        bpe_ids e = {0};
        tok_encode(w, prompts.v[b], strlen(prompts.v[b]), &e);
        if (e.n == 0) USAGE(world, "%s: prompt %d encodes to no tokens", prog, b + 1);
        ids[b] = td_xmalloc((size_t)e.n * sizeof(int32_t));
        memcpy(ids[b], e.ids, (size_t)e.n * sizeof(int32_t));
        lens[b] = (int)e.n;
        free(e.ids);
    }
    tok_worker_free(w);
    gen_config g = {a.max_new_tokens, a.greedy, (float)a.temperature, a.top_k, (float)a.top_p, (uint64_t)a.seed,
                    a.ignore_eod ? -1 : tok_eod_id(tok), a.no_kv_cache, NULL, NULL};
    int cap = gen_capacity(&g, B, lens);
    if (cap > c.max_pos && cap - g.max_new < c.max_pos && !td_args_given(&a, "--max-new-tokens")) {
        int fit = c.max_pos - (cap - g.max_new); /* the default asks more than the model holds: what fits */
        if (comm_rank(world) == 0)
            TD_INFO("generate: note: --max-new-tokens %d (the default) shortened to %d: the longest prompt is %d "
                    "token%s of the model's %d positions", g.max_new, fit, cap - g.max_new,
                    td_plural(cap - g.max_new), c.max_pos);
        g.max_new = fit;
        cap = gen_capacity(&g, B, lens);
    }
    if (cap > c.max_pos)
        USAGE(world, "%s: the longest prompt plus --max-new-tokens is %d positions, more than the model's %d", prog,
              cap, c.max_pos);
    for (int b = 0; b < B; b++) out[b] = td_xmalloc((size_t)cap * sizeof(int32_t));
    cli_load_stage(&cm, &a, world, 1);
    gpt_model *m = cm.m;
    ps_state *ps = cm.ps;

    if (ps->world_rank == 0)
        TD_INFO("generate: %s (iteration %lld), tp %d x pp %d; %d prompt%s, %s, %s", cm.meta.dir,
                (long long)cm.meta.progress.iteration, tp, pp, B, B > 1 ? "s" : "",
                g.greedy || g.temperature <= 0 || g.top_k == 1 ? "greedy" : "sampled",
                g.no_cache ? "no key/value cache" : "key/value cache");

    streamer s = {tok, g.eod};
    if (ps->world_rank == 0 && B == 1) {
        fwrite(prompts.v[0], 1, strlen(prompts.v[0]), stdout);
        fflush(stdout);
    }
    gen_stats st;
    int bad = gen_run(m, ps, &g, B, ids, lens, out, out_lens, NULL, B == 1 ? stream_token : NULL, &s, &st);
    if (ps->world_rank == 0) {
        for (int b = 0; b < B; b++) {
            if (B == 1) {
                printf("\n");
                break;
            }
            if (out_lens[b] == 0) continue; /* stopped: non-finite logits (the error line below) */
            char *text = NULL;
            size_t len = 0;
            int n = out_lens[b] - (out_lens[b] > lens[b] && g.eod >= 0 && out[b][out_lens[b] - 1] == g.eod);
            if (tok_decode(tok, out[b], (size_t)n, &text, &len, err, sizeof err))
                td_fatal(1, "decoding the output of prompt %d: %s", b + 1, err);
            printf("--- %d ---\n", b + 1);
            fwrite(text, 1, len, stdout);
            printf("\n");
            free(text);
        }
        fflush(stdout);
        TD_INFO("generate: %lld token%s for %d prompt%s (%lld prompt token%s) in %.2f s: %.1f tokens/s (first "
                "step %.2f s, then %.1f tokens/s)", (long long)st.generated, td_plural(st.generated), B, td_plural(B),
                (long long)st.prompt_tokens, td_plural(st.prompt_tokens), st.prefill_s + st.decode_s,
                (double)st.generated / (st.prefill_s + st.decode_s + 1e-12), st.prefill_s,
                (double)(st.generated > B ? st.generated - B : 0) / (st.decode_s + 1e-12));
        if (bad) {
            int b = st.bad_row, gen = st.bad_pos + 1 - lens[b];
            td_error("prompt %d%s: the model's logits at position %d (%s%d generated) hold a NaN or an "
                     "infinity, so nothing can be sampled from them: the checkpoint's weights are broken or overflow "
                     "float32 (%s); %d of %d prompt%s stopped", b + 1, B == 1 ? "" : " (of the batch)", st.bad_pos,
                     gen < 0 ? "inside the prompt, " : "", gen < 0 ? 0 : gen, cm.meta.dir, bad, B, td_plural(B));
        }
    }
    for (int b = 0; b < B; b++) free(ids[b]), free(out[b]), free(prompts.v[b]);
    free(ids), free(out), free(lens), free(out_lens), free(prompts.v);
    cli_free_model(&cm);
    td_args_free(&a);
    comm_world_finalize(world);
    return bad ? 1 : 0;
}
