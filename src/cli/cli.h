/* Subcommands of the trident binary. Each takes (argc, argv) with argv[0] the subcommand
 * name, parses its flags with td_args_parse, and returns the process exit code. */
#ifndef TRIDENT_CLI_H
#define TRIDENT_CLI_H

#include "backend.h"
#include "trident/args.h"
#include "trident/check.h"
#include "trident/checkpoint.h"
#include "trident/comm.h"
#include "trident/gpt.h"
#include "trident/parallel_state.h"
#include "trident/tokenizer.h"

int cli_data_info(int argc, char **argv);
int cli_plan(int argc, char **argv);
int cli_train(int argc, char **argv);

int cli_tokenize(int argc, char **argv);
int cli_chat_template(int argc, char **argv);
/* DIR/tokenizer_config.json, or its parent's when DIR is a checkpoint's iter_NNNNNNN folder (where
 * `convert` keeps it): malloc'd, or NULL when there is none. */
char *cli_find_tokenizer_config(const char *dir);
int cli_preprocess(int argc, char **argv);

int cli_checkpoint(int argc, char **argv);
int cli_convert(int argc, char **argv);
int cli_eval(int argc, char **argv);
int cli_generate(int argc, char **argv);
int cli_serve(int argc, char **argv);

/* A usage error found by every rank alike: one line naming the flag, exit 2, printed by rank 0
 * only (the others wait for it at the barrier, then exit too). */
#define USAGE(world, ...)                                                                \
    do {                                                                                 \
        if (comm_rank(world) == 0) td_usage_error(__VA_ARGS__);                          \
        comm_barrier(world);                                                             \
        td_usage_error(__VA_ARGS__);                                                     \
    } while (0)

/* ---- model_load.c: the one way generate, serve and eval load a model ----
 * cli_check_load_flags, cli_open_checkpoint, the command's own checks against the reconciled
 * flags, then cli_load_stage: every flag checked before anything is allocated. */

/* A command that scores or generates text left to right (generate, serve, eval): refuses, with
 * exit 2, a checkpoint whose model is not a causal decoder with a next-token loss, naming its
 * --model and, for eval, where its losses come from instead. */
void cli_need_causal(const gpt_config *c, comm *world, const char *prog, const char *dir, int scoring);

typedef struct {
    ckpt_meta meta;
    tok_tokenizer *tok;
    ps_state *ps;
    backend *be;
    gpt_config cfg; /* the checkpoint's model, for a's layout */
    gpt_model *m; /* this rank's stage, loaded from the checkpoint (any layout it was saved in) */
} cli_model;
/* What a command loads a model for (cli_check_load_flags, cli_open_checkpoint). */
enum {
    CLI_LOAD_TOKENIZER = 1, /* it reads text: the tokenizer of --tokenizer-* (generate, serve, eval --task) */
    CLI_LOAD_SCORING = 2,   /* it scores a dataset's tokens: a model that cannot says where its losses are */
};
/* --load given, no expert parallelism, the world divisible by tp x pp and, with CLI_LOAD_TOKENIZER
 * in `what`, the tokenizer flags whole: else exit 2. */
void cli_check_load_flags(const td_args *a, comm *world, const char *prog, int what);
/* The checkpoint of --load (how it was chosen, when not as latest says, logged by rank 0; its model
 * settings reconciled into a; its config in out->cfg) and, with CLI_LOAD_TOKENIZER, its tokenizer
 * (whose vocabulary must be the checkpoint's); nothing allocated for the model yet. Exits 2 on
 * flags that do not fit it: a model that is not a causal decoder, tp or pp that does not divide it. */
void cli_open_checkpoint(cli_model *out, td_args *a, comm *world, const char *prog, int what);
/* Then this rank's stage in the layout of a's tp and pp, for micro-batches of mbs rows, loaded. */
void cli_load_stage(cli_model *out, const td_args *a, comm *world, int mbs);
void cli_free_model(cli_model *c);

#endif
