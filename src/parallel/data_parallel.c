/* Data parallelism: see include/trident/data_parallel.h. */
#include "trident/data_parallel.h"

#include <stdlib.h>

#include "trident/check.h"

struct dp_buckets {
    const comm *dp;
    float *grads;
    size_t numel, bucket;
    int n;            /* buckets */
    int started;      /* buckets [0, started) have their all-reduce in flight */
    comm_req **req;   /* (n) */
};

dp_buckets *dp_buckets_create(const comm *dp, float *grads, size_t numel, size_t bucket_elems)
{
    dp_buckets *d = td_xcalloc(1, sizeof *d);
    d->dp = dp;
    d->grads = grads;
    d->numel = numel;
    d->bucket = bucket_elems ? bucket_elems : numel;
    d->n = numel ? (int)((numel + d->bucket - 1) / d->bucket) : 0;
    d->req = td_xcalloc((size_t)(d->n ? d->n : 1), sizeof *d->req);
    return d;
}

void dp_buckets_free(dp_buckets *d)
{
    if (!d) return;
    free(d->req);
    free(d);
}

int dp_buckets_count(const dp_buckets *d) { return d->n; }

static void start(dp_buckets *d, int b)
{
    size_t lo = (size_t)b * d->bucket, hi = lo + d->bucket < d->numel ? lo + d->bucket : d->numel;
    d->req[b] = comm_iallreduce(d->dp, d->grads + lo, hi - lo, COMM_F32, COMM_SUM);
}

void dp_buckets_ready(void *user, size_t prefix_end)
{
    dp_buckets *d = user;
    while (d->started < d->n) {
        size_t hi = (size_t)(d->started + 1) * d->bucket;
        if (hi > d->numel) hi = d->numel;
        if (hi > prefix_end) break;
        start(d, d->started++);
    }
}

void dp_buckets_finish(dp_buckets *d)
{
    while (d->started < d->n) start(d, d->started++);
    for (int b = 0; b < d->n; b++) {
        comm_wait(d->req[b]);
        d->req[b] = NULL;
    }
    d->started = 0;
}
