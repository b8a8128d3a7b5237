/* trident train: pretrain a GPT model (see docs/training.md). */
#include <stdio.h>

#include "cli.h"
#include "trident/args.h"
#include "trident/check.h"
#include "trident/comm.h"
#include "trident/trainer.h"

static const char SUMMARY[] =
    "Pretrain a GPT model on an indexed dataset (trident preprocess). One rank, or many under\n"
    "mpirun/srun: world = tensor x pipeline x data parallel.";

int cli_train(int argc, char **argv)
{
    td_args a;
    if (td_args_parse(&a, TD_CMD_TRAIN, "trident train", argc, argv, 1)) {
        td_args_usage(TD_CMD_TRAIN, "trident train", SUMMARY);
        td_args_free(&a);
        return 0;
    }
    td_log_set_level(a.verbose);
    comm *world = comm_world_init(&argc, &argv);
    comm_set_timeout(a.distributed_timeout_minutes * 60);
    char msg[512];
    if (trainer_validate(&a, comm_size(world), msg, sizeof msg)) {
        /* every rank finds the same error; one prints it, all exit 2 */
        if (comm_rank(world) == 0) fprintf(stderr, "error: trident train: %s\n", msg);
        td_args_free(&a);
        comm_world_finalize(world);
        return TD_EXIT_USAGE;
    }
    int rc = trainer_run(&a, world);
    td_args_free(&a);
    comm_world_finalize(world);
    return rc;
}
