/* Pipeline schedules: see include/trident/pipeline.h. */
#include "trident/pipeline.h"

#include "trident/check.h"

/* One micro-batch forward (and backward when training) on a single-stage model. */
static double run_one(pp_iteration *it, int m)
{
    gpt_model *model = it->model;
    it->batch(it->user, m, it->ids, it->targets, it->sample);
    gpt_acts *a = gpt_acts_acquire(model);
    double loss = 0;
    gpt_forward(model, a, it->ids, NULL, it->targets, it->sample, it->mbs, it->training, &loss);
    if (it->training) gpt_backward(model, a, NULL, it->loss_scale);
    gpt_acts_release(model, a);
    return loss;
}

/* No pipeline: gradient accumulation over the micro-batches, one at a time. */
static double schedule_none(pp_iteration *it)
{
    double loss = 0;
    for (int m = 0; m < it->num_micro; m++) loss += run_one(it, m);
    return loss;
}

double pp_run(pp_schedule schedule, pp_iteration *it)
{
    switch (schedule) {
    case PP_SCHEDULE_NONE: return schedule_none(it);
    default: break;
    }
    td_die(__FILE__, __LINE__, "pp_run", "use --pipeline-model-parallel-size 1",
           "pipeline schedule %d is not available in this build", (int)schedule);
}
