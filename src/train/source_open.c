/* The choice of a family's batch source, once at set-up: see batch_source_open in
 * include/train/trident/batch_source.h. */
#include "trident/batch_source.h"

#include <stdlib.h>

#include "trident/bert_source.h"
#include "trident/check.h"
#include "trident/gpt_source.h"

batch_source *batch_source_open(const gptds_config *dc, const td_args *a, const gpt_config *c, int mbs, int num_micro,
                                int dp, int dp_rank, comm *world)
{
    batch_source *s = td_xcalloc(1, sizeof *s);
    s->num_micro = num_micro;
    s->micro = td_xcalloc((size_t)num_micro, sizeof *s->micro);
    if (gpt_tokentypes(c)) { /* an encoder: masked sentence pairs with token types */
        s->ops = &bert_source_ops;
        s->self = bert_source_open(dc, a, c, mbs, num_micro, dp, dp_rank, world);
    } else {
        s->ops = &gpt_source_ops;
        s->self = gpt_source_open(dc, c, mbs, num_micro, dp, dp_rank, world);
    }
    return s;
}

