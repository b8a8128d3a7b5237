/* Backend selection, and the wrappers that chain vtable entries. */
#include <stdlib.h>
#include <string.h>

#include "trident/check.h"
#include "backend/backend.h"

backend *be_create(const char *name, int nthreads_or_device)
{
    if (strcmp(name, "cpu") == 0) return be_cpu(nthreads_or_device);
    if (strcmp(name, "cuda") == 0)
        td_fatal(1, "backend 'cuda' is not built into this binary (configure with -DTRIDENT_CUDA=ON on a machine "
                    "with nvcc)");
    td_fatal(TD_EXIT_USAGE, "unknown backend '%s' (choose cpu or cuda)", name);
}

const char *be_op_name(be_op op)
{
    static const char *const names[BE_OP_COUNT] = {"GEMM",          "attention", "norm",      "activation",
                                                   "rope",          "bias/dropout/residual", "embedding",
                                                   "cross-entropy", "optimizer", "memory"};
    return op >= 0 && op < BE_OP_COUNT ? names[op] : "?";
}

void be_free(backend *be)
{
    if (!be) return;
    be_lowp_free(be);
    free(be);
}

void be_crossentropy_fwd(const backend *be, float *losses, float *maxv, float *sumexp, float *tlogit,
                         const float *logits, const int32_t *targets, int BT, int V, int vocab)
{
    be_ce_max(be, maxv, logits, BT, V, vocab);
    be_ce_sumexp(be, sumexp, logits, maxv, BT, V, vocab);
    be_ce_target(be, tlogit, logits, targets, BT, V, 0);
    be_ce_loss(be, losses, maxv, sumexp, tlogit, BT);
}
