/* trident generate: text from a checkpoint, any tensor x pipeline layout (see docs/generate.md). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "trident/args.h"
#include "trident/check.h"
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

#define USAGE(world, ...)                                                                \
    do {                                                                                 \
        if (comm_rank(world) == 0) td_usage_error(__VA_ARGS__);                          \
        comm_barrier(world);                                                             \
        td_usage_error(__VA_ARGS__);                                                     \
    } while (0)

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
} streamer;

/* One prompt: its tokens' text as they come. */
static void stream_token(void *user, int b, int32_t token)
{
    (void)b;
    const streamer *s = user;
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
    comm *world = comm_world_init(&argc, &argv);
    comm_set_timeout(a.distributed_timeout_minutes * 60);
    int tp = a.tensor_model_parallel_size, pp = a.pipeline_model_parallel_size;
    if (!a.load) USAGE(world, "%s: --load DIR (a checkpoint) is required", prog);
    if (comm_size(world) % (tp * pp))
        USAGE(world, "%s: the world size %d is not divisible by --tensor-model-parallel-size %d x "
                     "--pipeline-model-parallel-size %d", prog, comm_size(world), tp, pp);
    char err[4096] = "";
    tok_spec spec = {a.tokenizer_type, a.vocab_file, a.merge_file, a.tokenizer_model};
    if (tok_check_spec(&spec, err, sizeof err)) USAGE(world, "%s: %s", prog, err);

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

    ckpt_meta meta;
    int rc = ckpt_find(a.load, &meta, err, sizeof err);
    if (rc == 1) td_fatal(1, "--load %s: no checkpoint there (no %s, meta.json or iter_* folder)", a.load, CKPT_LATEST);
    if (rc) td_fatal(1, "%s", err);
    tok_tokenizer *tok = tok_open(&spec, err, sizeof err);
    if (!tok) td_fatal(1, "%s", err);
    if (ckpt_args_reconcile(&a, &meta, tok_vocab_size(tok), tp, 0, err, sizeof err)) USAGE(world, "%s: %s", prog, err);
    gpt_config c = ckpt_model_config(&meta, tp, a.seq_length, a.make_vocab_size_divisible_by);
    if (c.heads % tp || c.ffn % tp || gpt_groups(&c) % tp)
        USAGE(world, "%s: --tensor-model-parallel-size %d does not divide the checkpoint's %d heads, %d query groups "
                     "and FFN size %d", prog, tp, c.heads, gpt_groups(&c), c.ffn);
    if (c.num_layers % pp)
        USAGE(world, "%s: --pipeline-model-parallel-size %d does not divide the checkpoint's %d layers", prog, pp,
              c.num_layers);

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
                    a.ignore_eod ? -1 : tok_eod_id(tok), a.no_kv_cache};
    int cap = gen_capacity(&g, B, lens);
    if (cap > c.max_pos)
        USAGE(world, "%s: the longest prompt plus --max-new-tokens is %d positions, more than the model's %d", prog,
              cap, c.max_pos);
    for (int b = 0; b < B; b++) out[b] = td_xmalloc((size_t)cap * sizeof(int32_t));

    /* the model, one stage per pipeline rank, loaded from any layout */
    ps_state *ps = ps_init(world, tp, pp);
    backend *be = be_cpu(0);
    int per = c.num_layers / pp;
    gpt_model *m = gpt_create(&c, ps, be, ps->pp_rank * per, per, 1, 1);
    ckpt_model cm = {ps, 1, &m, NULL, NULL, NULL, NULL};
    if (ckpt_load(&meta, &cm, 0, err, sizeof err)) td_fatal(1, "%s", err);
    if (ps->world_rank == 0)
        TD_INFO("generate: %s (iteration %lld), tp %d x pp %d; %d prompt%s, %s, %s", meta.dir,
                (long long)meta.progress.iteration, tp, pp, B, B > 1 ? "s" : "",
                g.greedy || g.temperature <= 0 || g.top_k == 1 ? "greedy" : "sampled",
                g.no_cache ? "no key/value cache" : "key/value cache");

    streamer s = {tok};
    if (ps->world_rank == 0 && B == 1) {
        fwrite(prompts.v[0], 1, strlen(prompts.v[0]), stdout);
        fflush(stdout);
    }
    gen_stats st;
    gen_run(m, ps, &g, B, ids, lens, out, out_lens, B == 1 ? stream_token : NULL, &s, &st);
    if (ps->world_rank == 0) {
        for (int b = 0; b < B; b++) {
            if (B == 1) {
                printf("\n");
                break;
            }
            char *text = NULL;
            size_t len = 0;
            if (tok_decode(tok, out[b], (size_t)out_lens[b], &text, &len, err, sizeof err))
                td_fatal(1, "decoding the output of prompt %d: %s", b + 1, err);
            printf("--- %d ---\n", b + 1);
            fwrite(text, 1, len, stdout);
            printf("\n");
            free(text);
        }
        fflush(stdout);
        TD_INFO("generate: %lld tokens for %d prompt%s (%lld prompt tokens) in %.2f s: %.1f tokens/s (first "
                "step %.2f s, then %.1f tokens/s)", (long long)st.generated, B, B > 1 ? "s" : "",
                (long long)st.prompt_tokens, st.prefill_s + st.decode_s,
                (double)st.generated / (st.prefill_s + st.decode_s + 1e-12), st.prefill_s,
                (double)(st.generated > B ? st.generated - B : 0) / (st.decode_s + 1e-12));
    }
    for (int b = 0; b < B; b++) free(ids[b]), free(out[b]), free(prompts.v[b]);
    free(ids), free(out), free(lens), free(out_lens), free(prompts.v);
    gpt_free(m);
    be_free(be);
    ps_free(ps);
    tok_free(tok);
    ckpt_meta_free(&meta);
    td_args_free(&a);
    comm_world_finalize(world);
    return 0;
}
