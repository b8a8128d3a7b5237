/* Batch sources: see include/train/trident/batch_source.h. The generic part: a family's source behind
 * its ops (the choice of one is source_open.c). */
#include "trident/batch_source.h"

#include <stdlib.h>
#include <string.h>

#include "trident/check.h"

void batch_source_begin(batch_source *s, gptds_split split, int64_t consumed, const comm *dp_group)
{
    s->ops->begin(s->self, split, consumed, dp_group, s->micro);
}

int64_t batch_source_num_samples(const batch_source *s, gptds_split split)
{
    return s->ops->num_samples(s->self, split);
}

int batch_source_metrics(const batch_source *s, gpt_metric *out, int max)
{
    return s->ops->metrics && max > 0 ? s->ops->metrics(s->self, out, max) : 0;
}

void batch_source_close(batch_source *s)
{
    if (!s) return;
    s->ops->close(s->self);
    free(s->micro);
    free(s);
}
