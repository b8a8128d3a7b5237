/* The device twins' entry points in a build without CUDA (nccl.c has them with it): NCCL cannot
 * load, and asking for a twin is a bug (the --comm rule never chooses nccl here). */
#include "comm_impl.h"
#include "trident/check.h"

int comm_nccl_loadable(char *why, size_t len)
{
    td_seterr(why, len, "this trident was built without CUDA (no nvcc at its build): NCCL needs a build with the "
                        "CUDA backend");
    return 0;
}

void comm_make_twin(comm *c, void *stream, int p2p)
{
    (void)stream, (void)p2p;
    td_die(__FILE__, __LINE__, "comm_make_twin", "this is a bug in trident; please report it",
           "the %s group asked for an NCCL twin in a build without CUDA", c ? c->name : "(none)");
}
