/* What every backend shares and calls no implementation: the kernel families' names and the
 * wrappers that chain vtable entries. */
#include "backend.h"

const char *be_op_name(be_op op)
{
    static const char *const names[BE_OP_COUNT] = {"GEMM",          "attention", "norm",      "activation",
                                                   "rope",          "bias/dropout/residual", "embedding",
                                                   "cross-entropy", "optimizer", "memory", "router"};
    return op >= 0 && op < BE_OP_COUNT ? names[op] : "?";
}

void be_crossentropy_fwd(const backend *be, float *losses, float *maxv, float *sumexp, float *tlogit,
                         const float *logits, const int32_t *targets, int BT, int V, int vocab)
{
    be_ce_max(be, maxv, logits, BT, V, vocab);
    be_ce_sumexp(be, sumexp, logits, maxv, BT, V, vocab);
    be_ce_target(be, tlogit, logits, targets, BT, V, 0);
    be_ce_loss(be, losses, maxv, sumexp, tlogit, BT);
}
