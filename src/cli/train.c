/* trident train: pretrain a GPT model (see docs/training.md). */
#include <stdio.h>

#include "cli.h"
#include "trident/args.h"
#include "trident/check.h"
#include "trident/debug.h"
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
    td_debug_from_args(&a);
    comm *world = comm_world_init(&argc, &argv);
    comm_set_timeout(a.distributed_timeout_minutes * 60);
    int rc = trainer_run(&a, world); /* validates the flags (against the checkpoint of --load) first */
    td_args_free(&a);
    comm_world_finalize(world);
    return rc;
}
