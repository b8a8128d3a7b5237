/* trident: one binary, one subcommand per job. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "trident/hf.h"
#include "backend.h"
#include "trident/check.h"
#include "trident/comm.h"

/* "trident 0.1.0 (backends: cpu, cuda)": the version and the backends built in. */
static void version_line(void) { printf("trident %s (backends: %s)\n", TRIDENT_VERSION, be_backend_names()); }

static int cli_version(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    version_line();
    return 0;
}

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
    void (*detail)(char *out, size_t len); /* more of the summary, from the floor that knows it; or NULL */
} subcommand;

static const subcommand COMMANDS[] = {
    /* one row per subcommand: {name, cli_<name>, summary, detail} */
    {"tokenize", cli_tokenize, "text to token ids and back: GPT-2 BPE, Hugging Face tokenizer.json, WordPiece", NULL},
    {"chat-template", cli_chat_template, "render a conversation with a model's chat template (tokenizer_config.json)", NULL},
    {"preprocess", cli_preprocess, "tokenize JSON lines or text files into a Megatron .bin/.idx dataset", NULL},
    {"data-info", cli_data_info, "split a dataset, build or load its indices, print the statistics", NULL},
    {"eval", cli_eval, "strided perplexity of a checkpoint on a dataset (any layout)", NULL},
    {"generate", cli_generate, "generate text from a checkpoint with a key/value cache (any tp x pp layout)", NULL},
    {"serve", cli_serve, "serve a checkpoint over HTTP (Megatron's PUT /api, OpenAI-style /v1/completions)", NULL},
    {"convert", cli_convert, "convert checkpoints between trident and Hugging Face; model_type", hf_model_types},
    {"checkpoint", cli_checkpoint, "inspect a checkpoint (info: contents and CRC check; compare: two checkpoints)", NULL},
    {"train", cli_train, "pretrain a decoder (GPT-2, Llama-style) or an encoder (--model), on one rank or many under mpirun", NULL},
    {"plan", cli_plan, "predict time, TFLOP/s and memory of layouts on a cluster; search for the fastest", NULL},
    {"version", cli_version, "print the version", NULL},
};
#define NCOMMANDS ((int)(sizeof COMMANDS / sizeof COMMANDS[0]))

static void usage(FILE *f)
{
    fprintf(f, "trident %s: Megatron-style transformer training in C\n\nusage: trident <command> [flags]\n\n"
               "commands:\n", TRIDENT_VERSION);
    for (int i = 0; i < NCOMMANDS; i++) {
        char detail[256] = "";
        if (COMMANDS[i].detail) COMMANDS[i].detail(detail, sizeof detail);
        fprintf(f, "  %-12s %s%s%s\n", COMMANDS[i].name, COMMANDS[i].summary, detail[0] ? " " : "", detail);
    }
    fprintf(f, "\n'trident <command> --help' lists a command's flags.\n");
}

int main(int argc, char **argv)
{
    be_prepare_process(argv);
    td_set_usage_hook(comm_usage_exit); /* under mpirun rank 0's error line must get out first */
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? TD_EXIT_USAGE : 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        version_line();
        return 0;
    }
    for (int i = 0; i < NCOMMANDS; i++)
        if (strcmp(argv[1], COMMANDS[i].name) == 0) {
            td_hang_guard_start(COMMANDS[i].name);
            comm_exit(COMMANDS[i].run(argc - 1, argv + 1));
        }
    fprintf(stderr, "error: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return TD_EXIT_USAGE;
}
