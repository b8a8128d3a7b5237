/* The one way generate, serve and eval (its tasks and strided perplexity) load a model: the
 * checkpoint, its tokenizer when the command reads text, and this rank's model stage. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "xfer.h"
#include "trident/check.h"
#include "trident/hf.h"

/* The --model value of c's family ("gpt", ...), as meta.json's key spells it. */
static void model_flag_value(const gpt_config *c, char *out, size_t len)
{
    snprintf(out, len, "?");
    for (int i = 0; i < GPT_NCONFIG_KEYS; i++)
        if (strcmp(GPT_CONFIG_KEYS[i].flag, "--model") == 0) gpt_config_value_str(c, &GPT_CONFIG_KEYS[i], out, len);
}

void cli_need_causal(const gpt_config *c, comm *world, const char *prog, const char *dir, int scoring)
{
    if (c->kind == GPT_KIND_DECODER) return;
    char model[32];
    model_flag_value(c, model, sizeof model);
    if (scoring)
        USAGE(world, "%s: %s holds a --model %s checkpoint, not a causal decoder: it has no next-token loss to "
                     "score; its validation losses come from trident train --model %s --eval-iters N", prog, dir,
              model, model);
    const char *hf = hf_class_of(c);
    USAGE(world, "%s: %s holds a --model %s checkpoint, not a causal decoder: it does not generate or score text "
                 "left to right%s%s%s", prog, dir, model, hf ? "; convert it to Hugging Face's " : "", hf ? hf : "",
          hf ? " (trident convert) for its predictions" : "");
}

void cli_check_load_flags(const td_args *a, comm *world, const char *prog, int what)
{
    int tp = a->tensor_model_parallel_size, pp = a->pipeline_model_parallel_size;
    if (!a->load) USAGE(world, "%s: --load DIR (a checkpoint) is required", prog);
    if (a->expert_model_parallel_size > 1)
        USAGE(world, "%s: --expert-model-parallel-size %d: %s holds every expert of a layer on each rank of its "
                     "stage (tensor and pipeline parallelism split a mixture of experts here); leave the flag out",
                     prog, a->expert_model_parallel_size, prog);
    if (comm_size(world) % (tp * pp))
        USAGE(world, "%s: the world size %d is not divisible by --tensor-model-parallel-size %d x "
                     "--pipeline-model-parallel-size %d", prog, comm_size(world), tp, pp);
    if (!(what & CLI_LOAD_TOKENIZER)) return;
    char err[1024] = "";
    tok_spec spec = {a->tokenizer_type, a->vocab_file, a->merge_file, a->tokenizer_model};
    if (tok_check_spec(&spec, err, sizeof err)) USAGE(world, "%s: %s", prog, err);
}

void cli_open_checkpoint(cli_model *out, td_args *a, comm *world, const char *prog, int what)
{
    memset(out, 0, sizeof *out);
    int tp = a->tensor_model_parallel_size, pp = a->pipeline_model_parallel_size;
    char err[4096] = "";
    int rc = ckpt_find(a->load, &out->meta, err, sizeof err);
    if (rc == 1) td_fatal(1, "--load %s: no checkpoint there (no %s, meta.json or iter_* folder)", a->load, CKPT_LATEST);
    if (rc) td_fatal(1, "%s", err);
    if (out->meta.note && comm_rank(world) == 0) td_warn("%s", out->meta.note);
    if (what & CLI_LOAD_TOKENIZER) {
        tok_spec spec = {a->tokenizer_type, a->vocab_file, a->merge_file, a->tokenizer_model};
        out->tok = tok_open(&spec, err, sizeof err);
        if (!out->tok) td_fatal(1, "%s", err);
    }
    /* the model is the checkpoint's: a model flag given must agree; --seq-length defaults to its own */
    if (ckpt_args_reconcile(a, &out->meta, out->tok ? tok_vocab_size(out->tok) : -1, tp, 0, err, sizeof err))
        USAGE(world, "%s: %s", prog, err);
    out->cfg = ckpt_model_config(&out->meta, tp, a->seq_length, a->make_vocab_size_divisible_by);
    const gpt_config *c = &out->cfg;
    cli_need_causal(c, world, prog, out->meta.dir, (what & CLI_LOAD_SCORING) != 0);
    if (c->heads % tp || c->ffn % tp || gpt_groups(c) % tp)
        USAGE(world, "%s: --tensor-model-parallel-size %d does not divide the checkpoint's %d heads, %d query groups "
                     "and FFN size %d", prog, tp, c->heads, gpt_groups(c), c->ffn);
    if (c->num_layers % pp)
        USAGE(world, "%s: --pipeline-model-parallel-size %d does not divide the checkpoint's %d layer%s", prog, pp,
              c->num_layers, td_plural(c->num_layers));
}

void cli_load_stage(cli_model *out, const td_args *a, comm *world, int mbs)
{
    char err[4096] = "";
    int pp = a->pipeline_model_parallel_size, per = out->cfg.num_layers / pp;
    be_comm_choose(a->comm ? a->comm : "auto", a->backend, world); /* --comm nccl that cannot work: exit 2 here */
    out->ps = ps_init(world, a->tensor_model_parallel_size, pp);
    out->be = be_create(a->backend, 0);
    xfer_comm_attach(out->be, out->ps); /* --comm nccl: every group's NCCL twin */
    be_set_tf32(out->be, a->tf32);
    out->m = gpt_create_for_checkpoint(&out->cfg, out->ps, out->be, out->ps->pp_rank * per, per, mbs, 1);
    ckpt_model cm = {out->ps, 1, &out->m, NULL, NULL, NULL, NULL};
    if (ckpt_load(&out->meta, &cm, 0, err, sizeof err)) td_fatal(1, "%s", err);
}

void cli_free_model(cli_model *c)
{
    gpt_free(c->m);
    be_free(c->be);
    ps_free(c->ps);
    tok_free(c->tok);
    ckpt_meta_free(&c->meta);
}
