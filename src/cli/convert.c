/* trident convert: Hugging Face (GPT-2, Llama, Mixtral, Qwen2-MoE, Megatron-BERT) <-> trident
 * checkpoints (see docs/convert.md). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "trident/args.h"
#include "trident/check.h"
#include "trident/debug.h"
#include "trident/checkpoint.h"
#include "trident/comm.h"
#include "trident/hf.h"
#include "trident/peft.h"
#include "trident/timer.h"

static const char SUMMARY[] =
    "trident convert --from trident DIR --to hf OUT: write OUT/config.json and OUT/model.safetensors in\n"
    "the layout of the transformers class that computes the model (GPT2LMHeadModel, LlamaForCausalLM,\n"
    "MixtralForCausalLM, Qwen2MoeForCausalLM, MegatronBertForPreTraining; a model none computes is refused,\n"
    "naming what differs) from a trident checkpoint of any layout (DIR: a save folder or an iter_NNNNNNN\n"
    "folder), as F32 tensors or (--dtype) F16 or BF16 ones rounded from the fp32 weights; an OUT already\n"
    "holding a model is refused.\n"
    "trident convert --from hf DIR --to trident OUT: the reverse; OUT is a checkpoint folder (iteration 0,\n"
    "weights only) to train from with --load OUT --finetune; OUT is locked while it is written, as a\n"
    "training run locks its --save folder.\n"
    "Both ways the model's tokenizer_config.json (its chat template and special tokens; of an iter_NNNNNNN\n"
    "folder, the checkpoint folder's) is copied along when there is one (docs/chat.md).\n"
    "trident convert --from hf DIR --to hf OUT --merge-lora ADAPTER: OUT is DIR's model with the PEFT LoRA\n"
    "adapter ADAPTER merged into its weights (W + scaling B A), config.json copied (docs/finetune.md);\n"
    "with --to trident OUT the merged model is imported as above.";

/* --to trident OUT: takes OUT's save lock (ckpt_lock_save_dir, held until this process ends) before
 * checking that OUT holds no checkpoint and writing one, so two converts into one folder, or a
 * convert and a training run, never write it at once. The lock's messages name the folder as
 * this command's --to trident. */
static void lock_out(const char *out)
{
    char err[4400] = "", msg[4500];
    int rc = ckpt_lock_save_dir(out, err, sizeof err);
    if (rc == 0) return;
    const char *rest = strncmp(err, "--save ", 7) == 0 ? err + 7 : err;
    snprintf(msg, sizeof msg, "--to trident %s", rest);
    if (rc > 0) td_warn("%s", msg);
    else td_fatal(1, "%s", msg);
}

/* Keeps the model's tokenizer_config.json (its chat template and special tokens, docs/chat.md)
 * with the converted model: copies FROM/tokenizer_config.json, or when FROM is a checkpoint's
 * iter_NNNNNNN folder its parent's, to TO/tokenizer_config.json (through a temporary file and a
 * rename). Returns 1 if copied, 0 if FROM has none, -1 with the reason in err. */
static int keep_tokenizer_config(const char *from, const char *to, char *err, size_t errlen)
{
    char src[4200], dst[4200], tmp[4300];
    struct stat st;
    size_t fl = strlen(from);
    while (fl > 1 && from[fl - 1] == '/') fl--;
    const char *base = from + fl;
    while (base > from && base[-1] != '/') base--;
    snprintf(src, sizeof src, "%s/tokenizer_config.json", from);
    if (stat(src, &st) != 0) {
        if (strncmp(base, "iter_", 5) != 0) return 0;
        snprintf(src, sizeof src, "%.*s/../tokenizer_config.json", (int)fl, from);
        if (stat(src, &st) != 0) return 0;
    }
    errno = 0;
    snprintf(dst, sizeof dst, "%s/tokenizer_config.json", to);
    snprintf(tmp, sizeof tmp, "%s.tmp", dst);
    FILE *in = fopen(src, "rb"), *out = in ? fopen(tmp, "wb") : NULL;
    int rc = in && out ? 0 : -1;
    char buf[1 << 16];
    size_t n;
    while (rc == 0 && (n = fread(buf, 1, sizeof buf, in)) > 0)
        if (fwrite(buf, 1, n, out) != n) rc = -1;
    if (in && ferror(in)) rc = -1;
    int e = errno;
    if (in) fclose(in);
    if (out && fclose(out) != 0) rc = -1;
    if (rc == 0 && rename(tmp, dst) != 0) rc = -1;
    if (rc) {
        snprintf(err, errlen, "copying %.400s to %.400s failed: %s", src, dst, td_strerror(errno ? errno : e));
        remove(tmp);
        return -1;
    }
    return 1;
}

int cli_convert(int argc, char **argv)
{
    const char *prog = "trident convert";
    td_args a;
    if (td_args_parse(&a, TD_CMD_CONVERT, prog, argc, argv, 1)) {
        td_args_usage(TD_CMD_CONVERT, prog, SUMMARY);
        td_args_free(&a);
        return 0;
    }
    td_log_set_level(a.verbose);
    td_debug_from_args(&a);
    if (a.from.n != 2 || a.to.n != 2)
        td_usage_error("%s: give --from FORMAT DIR and --to FORMAT DIR (see %s --help)", prog, prog);
    const char *ff = a.from.v[0], *in = a.from.v[1], *tf = a.to.v[0], *out = a.to.v[1];
    if (a.merge_lora && (strcmp(ff, "hf") != 0 || (strcmp(tf, "hf") != 0 && strcmp(tf, "trident") != 0)))
        td_usage_error("%s: --merge-lora merges into a Hugging Face model: give --from hf DIR and --to hf OUT or "
                       "--to trident OUT", prog);
    if (a.merge_lora && strcmp(tf, "hf") == 0) {
        if (td_args_given(&a, "--dtype"))
            td_usage_error("%s: --merge-lora keeps each weight's type: --dtype does not apply", prog);
        char merr[4600] = "";
        int merged = 0;
        double m0 = td_now();
        if (peft_merge_hf(a.merge_lora, in, out, &merged, merr, sizeof merr)) td_fatal(1, "%s", merr);
        TD_INFO("wrote %s/config.json and %s/model.safetensors: %s with the LoRA adapter %s merged into %d weights "
                "in %.2f s", out, out, in, a.merge_lora, merged, td_now() - m0);
        int kept = keep_tokenizer_config(in, out, merr, sizeof merr); /* the merged model keeps its chat template */
        if (kept < 0) td_fatal(1, "%s", merr);
        td_args_free(&a);
        return 0;
    }
    if (strcmp(tf, "peft") == 0) { /* a LoRA checkpoint's adapters in PEFT's format */
        if (strcmp(ff, "trident") != 0 || td_args_given(&a, "--dtype"))
            td_usage_error("%s: --to peft writes the LoRA adapters of --from trident DIR (F32; --dtype does not apply)",
                           prog);
        ckpt_meta m;
        char perr[4600] = "";
        int found = ckpt_find(in, &m, perr, sizeof perr), modules = 0;
        if (found == 1) td_fatal(1, "--from trident %s: no checkpoint there (no %s, no meta.json)", in, CKPT_LATEST);
        if (found) td_fatal(1, "%s", perr);
        if (peft_export(&m, out, &modules, perr, sizeof perr)) td_fatal(1, "%s", perr);
        TD_INFO("wrote %s/adapter_config.json and %s/adapter_model.safetensors: the %d LoRA modules of %s (iteration "
                "%lld)", out, out, modules, m.dir, (long long)m.progress.iteration);
        ckpt_meta_free(&m);
        td_args_free(&a);
        return 0;
    }
    int t2h = strcmp(ff, "trident") == 0 && strcmp(tf, "hf") == 0;
    int h2t = strcmp(ff, "hf") == 0 && strcmp(tf, "trident") == 0;
    if (td_args_given(&a, "--dtype") && !t2h)
        td_usage_error("%s: --dtype chooses the tensors' type of --to hf (a trident checkpoint keeps fp32)", prog);
    if (!t2h && !h2t)
        td_usage_error("%s: --from %s --to %s: the conversions are --from trident --to hf and --from hf --to trident",
                       prog, ff, tf);
    char err[4600] = "";
    double t0 = td_now();
    int rc;
    if (t2h) {
        ckpt_meta m;
        int found = ckpt_find(in, &m, err, sizeof err);
        if (found == 1) td_fatal(1, "--from trident %s: no checkpoint there (no %s, no meta.json)", in, CKPT_LATEST);
        if (found) td_fatal(1, "%s", err);
        if (m.note) td_warn("%s", m.note);
        rc = hf_export(&m, out, (st_dtype)st_dtype_parse(a.dtype), err, sizeof err);
        if (rc == 0 && keep_tokenizer_config(in, out, err, sizeof err) < 0) rc = -1;
        if (rc == 0)
            TD_INFO("wrote %s/config.json and %s/model.safetensors (%s) from %s (iteration %lld, tp %d x pp %d) in %.2f s",
                    out, out, a.dtype, m.dir, (long long)m.progress.iteration, m.tp, m.pp, td_now() - t0);
        ckpt_meta_free(&m);
    } else {
        comm *world = comm_world_init(&argc, &argv);
        if (comm_size(world) != 1) td_fatal(1, "%s runs on one rank (not under mpirun -np > 1)", prog);
        lock_out(out);
        int merged = 0;
        rc = a.merge_lora ? peft_import_hf(a.merge_lora, in, out, a.make_vocab_size_divisible_by, a.backend, world,
                                           &merged, err, sizeof err)
                          : hf_import(in, out, a.make_vocab_size_divisible_by, a.backend, world, err, sizeof err);
        if (rc == 0 && a.merge_lora)
            TD_INFO("the LoRA adapter %s merged into %d weights of %s", a.merge_lora, merged, in);
        int kept = rc == 0 ? keep_tokenizer_config(in, out, err, sizeof err) : 0;
        if (kept < 0) rc = -1;
        if (kept > 0) TD_INFO("kept %s/tokenizer_config.json (chat template, special tokens) as %s/tokenizer_config.json", in, out);
        if (rc == 0)
            TD_INFO("wrote a trident checkpoint (iteration 0, weights only) to %s from %s in %.2f s; train from it "
                    "with --load %s --finetune", out, in, td_now() - t0, out);
        comm_world_finalize(world);
    }
    td_args_free(&a);
    if (rc) td_fatal(1, "%s", err);
    return 0;
}
