/* trident serve: a text-generation server on a checkpoint (see docs/serve.md). */
#include <stdio.h>

#include "cli.h"
#include "trident/check.h"
#include "trident/server.h"

static const char SUMMARY[] =
    "Serve a checkpoint over HTTP: Megatron's PUT /api ({\"prompts\": [...], \"tokens_to_generate\": N, ...}) and an\n"
    "OpenAI-style POST /v1/completions ({\"prompt\", \"max_tokens\", \"temperature\", \"top_p\", \"stream\"}), on\n"
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
                      a.request_timeout, a.shutdown_grace, (uint64_t)a.seed};
    if (comm_rank(world) == 0)
        TD_INFO("serve: %s (iteration %lld), tp %d x pp %d; batches of up to %d prompt%s, %d queued", cm.meta.dir,
                (long long)cm.meta.progress.iteration, a.tensor_model_parallel_size, a.pipeline_model_parallel_size,
                cfg.max_batch, td_plural(cfg.max_batch), cfg.max_queue);
    char err[512] = "";
    int rc = srv_run(cm.m, cm.ps, cm.tok, &cfg, err, sizeof err);
    if (rc) td_fatal(1, "%s", err);
    cli_free_model(&cm);
    td_args_free(&a);
    comm_world_finalize(world);
    return 0;
}
