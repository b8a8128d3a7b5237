/* trident serve: a text-generation server on a checkpoint (see docs/serve.md). */
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "cli.h"
#include "trident/check.h"
#include "trident/server.h"

static const char SUMMARY[] =
    "Serve a checkpoint over HTTP: Megatron's PUT /api ({\"prompts\": [...], \"tokens_to_generate\": N, ...}) and an\n"
    "OpenAI-style POST /v1/completions ({\"prompt\", \"max_tokens\", \"temperature\", \"top_p\", \"stream\"}) and\n"
    "POST /v1/chat/completions ({\"messages\": [...]}, rendered with the model's chat template), on\n"
    "--host:--port (127.0.0.1:5000). The model is loaded once, in any tp x pp layout under mpirun; requests are\n"
    "queued and batched. SIGTERM or Ctrl-C finishes the requests in flight and exits.";

int cli_serve(int argc, char **argv)
{
    const char *prog = "trident serve";
    td_args a;
    if (td_args_parse(&a, TD_CMD_SERVE, prog, argc, argv, 1)) {
        td_args_usage(TD_CMD_SERVE, prog, SUMMARY);
        td_args_free(&a);
        return 0;
    }
    td_log_set_level(a.verbose);
    comm *world = comm_world_init(&argc, &argv);
    comm_set_timeout(a.distributed_timeout_minutes * 60);
    cli_check_load_flags(&a, world, prog, CLI_LOAD_TOKENIZER);
    cli_model cm;
    cli_open_checkpoint(&cm, &a, world, prog, CLI_LOAD_TOKENIZER);
    cli_load_stage(&cm, &a, world, 1);
    int positions = cm.m->cfg.max_pos;
    srv_config cfg = {a.host, a.port, a.max_batch, a.max_queue, (size_t)a.max_body_bytes,
                      td_args_given(&a, "--max-prompt-tokens") ? a.max_prompt_tokens : positions - 1,
                      a.max_tokens_to_generate,
                      td_args_given(&a, "--max-connections") ? a.max_connections : 0, a.max_connections_per_ip, a.idle_timeout,
                      a.request_timeout, a.shutdown_grace, (uint64_t)a.seed, NULL, NULL, NULL};
    if (comm_rank(world) == 0)
        TD_INFO("serve: %s (iteration %lld), tp %d x pp %d; batches of up to %d prompt%s, %d queued", cm.meta.dir,
                (long long)cm.meta.progress.iteration, a.tensor_model_parallel_size, a.pipeline_model_parallel_size,
                cfg.max_batch, td_plural(cfg.max_batch), cfg.max_queue);
    /* the chat template: --chat-template (a tokenizer_config.json or its folder), else the one
     * `convert --from hf` kept with the checkpoint */
    char err[4096] = "";
    ct_config chat_config = {0};
    ct_template *chat = NULL, *chat_tools = NULL;
    char *path = NULL;
    if (a.chat_template) {
        struct stat st;
        if (stat(a.chat_template, &st) == 0 && S_ISDIR(st.st_mode)) {
            if (!(path = cli_find_tokenizer_config(a.chat_template)))
                td_fatal(2, "%s: --chat-template %s: the folder holds no tokenizer_config.json", prog, a.chat_template);
        } else {
            path = td_xstrdup(a.chat_template);
        }
    } else {
        path = cli_find_tokenizer_config(a.load);
    }
    if (path) {
        if (ct_load_config(path, &chat_config, err, sizeof err)) td_fatal(1, "%s: %s", prog, err);
        if (!chat_config.template_src) {
            if (a.chat_template) td_fatal(1, "%s: --chat-template %s has no chat_template", prog, path);
        } else if (!(chat = ct_compile(chat_config.template_src, err, sizeof err))) {
            td_fatal(1, "%s: the chat_template of %s: %s", prog, path, err);
        }
        if (chat && chat_config.tool_template_src && !(chat_tools = ct_compile(chat_config.tool_template_src, err, sizeof err)))
            td_fatal(1, "%s: the tool_use chat_template of %s: %s", prog, path, err);
        if (chat && comm_rank(world) == 0) TD_INFO("serve: POST /v1/chat/completions renders with the chat_template of %s", path);
    }
    if (!chat && comm_rank(world) == 0)
        TD_INFO("serve: no chat template (no tokenizer_config.json with one in %s; --chat-template gives one): "
                "POST /v1/chat/completions answers 400", a.load);
    cfg.chat_config = chat ? &chat_config : NULL;
    cfg.chat = chat;
    cfg.chat_tools = chat_tools;
    int rc = srv_run(cm.m, cm.ps, cm.tok, &cfg, err, sizeof err);
    if (rc) td_fatal(1, "%s", err);
    ct_free(chat);
    ct_free(chat_tools);
    ct_config_free(&chat_config);
    free(path);
    cli_free_model(&cm);
    td_args_free(&a);
    comm_world_finalize(world);
    return 0;
}
