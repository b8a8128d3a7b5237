/* Pipeline schedules: see include/parallel/trident/pipeline.h.
 *
 * Every schedule is one loop over "virtual micro-batches" k (a micro-batch on one chunk) in
 * three labelled phases, after Megatron's schedules.py: warm-up (forwards only), steady 1F1B
 * (one forward, one backward) and cool-down (backwards only). GPipe is the case where the
 * warm-up is everything; no pipeline is GPipe's order on one stage, a micro-batch at a time.
 *
 * Transfers: a forward sends its output to the next virtual stage and a backward sends its input
 * gradient to the previous one, both non-blocking; a step blocks only on the receive it needs.
 * That receive was posted ahead, as soon as the step before it had its own input, into a landing
 * buffer (pp_iteration.prefetch): across a network a message above the eager limit moves only
 * once its receive is posted, so a receive posted when needed exposed all of its wire time.
 * A message to virtual stage vs for micro-batch m has tag 2 (m V + vs) (+1 for gradients), V the
 * number of virtual stages, so matching never depends on the order messages are posted.
 * Scatter/gather (Megatron-LM 2021, section 4.1): with tp > 1 every tp rank of a stage holds the
 * same boundary tensor, so each sends only its 1/tp slice to its peer of the same tp rank, and
 * the receivers rebuild the whole by an all-gather over their tp group (the fast links inside
 * a node, when tp is kept there and pp crosses nodes). */
#include "trident/pipeline.h"

#include "backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/check.h"
#include "trident/overlap.h"
#include "trident/timer.h"

int pp_schedule_parse(const char *s, int pp, int vp, pp_schedule *out)
{
    if (strcmp(s, "auto") == 0)
        *out = pp == 1 ? PP_SCHEDULE_NONE : vp > 1 ? PP_SCHEDULE_INTERLEAVED : PP_SCHEDULE_1F1B;
    else if (strcmp(s, "gpipe") == 0) *out = pp == 1 ? PP_SCHEDULE_NONE : PP_SCHEDULE_GPIPE;
    else if (strcmp(s, "1f1b") == 0) *out = pp == 1 ? PP_SCHEDULE_NONE : PP_SCHEDULE_1F1B;
    else if (strcmp(s, "interleaved") == 0) *out = PP_SCHEDULE_INTERLEAVED;
    else return -1;
    return 0;
}

const char *pp_schedule_name(pp_schedule s)
{
    switch (s) {
    case PP_SCHEDULE_NONE: return "none";
    case PP_SCHEDULE_GPIPE: return "gpipe";
    case PP_SCHEDULE_1F1B: return "1f1b";
    case PP_SCHEDULE_INTERLEAVED: return "interleaved";
    }
    return "?";
}

/* Forwards run before the first backward on this rank (Megatron's num_warmup_microbatches). */
static int warmup_count(pp_schedule s, int p, int rank, int v, int total)
{
    int w;
    switch (s) {
    case PP_SCHEDULE_NONE: w = 0; break; /* one forward then its backward */
    case PP_SCHEDULE_GPIPE: w = total; break;
    case PP_SCHEDULE_1F1B: w = p - rank - 1; break;
    default: w = (p - rank - 1) * 2 + (v - 1) * p; break;
    }
    return w < total ? w : total;
}

int pp_split_check(const pp_split *s, char *msg, size_t msglen)
{
    int L = s->L, pp = s->pp, first = s->first, last = s->last;
    int ends = (first >= 0) + (last >= 0), accounted = s->embedding + s->loss;
    if (ends && accounted) {
        snprintf(msg, msglen, "--decoder-first/last-pipeline-num-layers do not combine with "
                 "--account-for-embedding/loss-in-pipeline-split: give one kind of uneven split");
        return -1;
    }
    if ((ends || accounted) && pp == 1) {
        snprintf(msg, msglen, "--%s need --pipeline-model-parallel-size > 1",
                 ends ? "decoder-first/last-pipeline-num-layers" : "account-for-embedding/loss-in-pipeline-split");
        return -1;
    }
    if (ends && s->vp > 1) {
        snprintf(msg, msglen, "--decoder-first/last-pipeline-num-layers do not combine with "
                 "--num-layers-per-virtual-pipeline-stage (give the interleaved schedule an even split, or "
                 "--account-for-embedding/loss-in-pipeline-split)");
        return -1;
    }
    if (accounted) {
        int V = pp * s->vp, total = L + accounted;
        if (total % V) {
            snprintf(msg, msglen, "--num-layers %d + %d for --account-for-%s-in-pipeline-split is not divisible by the "
                     "%d %sstages", L, accounted, s->embedding && s->loss ? "embedding/loss" : s->embedding ? "embedding"
                     : "loss", V, s->vp > 1 ? "virtual " : "");
            return -1;
        }
        return 0; /* every stage has total / V >= 1, the ends one less */
    }
    if (!ends) {
        if (L % (pp * s->vp)) {
            if (s->vp > 1)
                snprintf(msg, msglen, "--num-layers %d is not divisible by %d virtual stages", L, pp * s->vp);
            else
                snprintf(msg, msglen, "--num-layers %d is not divisible by --pipeline-model-parallel-size %d (or give "
                         "--decoder-first/last-pipeline-num-layers or --account-for-embedding/loss-in-pipeline-split)",
                         L, pp);
            return -1;
        }
        return 0;
    }
    int middle = pp - ends, rest = L - (first > 0 ? first : 0) - (last > 0 ? last : 0);
    if (ends == 2 && pp == 2 && rest != 0) {
        snprintf(msg, msglen, "--decoder-first-pipeline-num-layers %d + --decoder-last-pipeline-num-layers %d is not "
                 "--num-layers %d (two stages hold them all)", first, last, L);
        return -1;
    }
    if (rest < 0 || (middle > 0 && (rest < middle || rest % middle))) {
        snprintf(msg, msglen, "--num-layers %d less the first/last stages' layers leaves %d for %d other stage%s: "
                 "give them a positive multiple of %d", L, rest, middle, middle > 1 ? "s" : "", middle > 0 ? middle : 1);
        return -1;
    }
    return 0;
}

/* Layers of virtual stage vs under the split. */
static int split_count(const pp_split *s, int vs)
{
    int V = s->pp * s->vp;
    if (s->embedding || s->loss) {
        int per = (s->L + s->embedding + s->loss) / V;
        return per - (vs == 0 && s->embedding) - (vs == V - 1 && s->loss);
    }
    if (s->first < 0 && s->last < 0) return s->L / V;
    int ends = (s->first >= 0) + (s->last >= 0), middle = s->pp - ends;
    int rest = s->L - (s->first > 0 ? s->first : 0) - (s->last > 0 ? s->last : 0);
    if (vs == 0 && s->first >= 0) return s->first;
    if (vs == s->pp - 1 && s->last >= 0) return s->last;
    return rest / middle;
}

void pp_split_layers(const pp_split *s, int vs, int *layer0, int *n)
{
    int at = 0;
    for (int v = 0; v < vs; v++) at += split_count(s, v);
    *layer0 = at;
    *n = split_count(s, vs);
}

int pp_slots_needed(pp_schedule schedule, int pp, int pp_rank, int nchunks, int num_micro)
{
    int w = warmup_count(schedule, pp, pp_rank, nchunks, num_micro * nchunks);
    int n = w + 1; /* in flight at once on the rank; a chunk never holds more */
    return n < num_micro ? n : num_micro;
}

/* ---- stage transfers ---- */

int pp_scatter_gather_applies(const ps_state *ps, int wanted)
{
    return wanted && ps->pp > 1 && ps->tp > 1 && !ps->sequence_parallel;
}

void pp_transfer_slice(size_t n, int t, int r, size_t *off, size_t *count)
{
    size_t q = n / (size_t)t, extra = n % (size_t)t, ur = (size_t)r;
    *count = q + (ur < extra);
    *off = ur * q + (ur < extra ? ur : extra);
}

comm_req *pp_send(const ps_state *ps, const backend *be, int scatter_gather, const float *buf, size_t n, int peer,
                  int tag)
{
    size_t off = 0, count = n;
    if (scatter_gather) pp_transfer_slice(n, ps->tp, ps->tp_rank, &off, &count);
    return comm_isend(xfer_comm(be, ps->pp_group), xfer_send_view(be, buf + off, count * sizeof(float)), count, COMM_F32, peer, tag);
}

/* The receive lands in the view of the whole of buf (the slice at its place), where the
 * all-gather rebuilds the rest: a staged transfer crosses to the device once, whole. */
comm_req *pp_recv_start(const ps_state *ps, const backend *be, int scatter_gather, float *buf, size_t n, int peer,
                        int tag)
{
    size_t off = 0, count = n;
    if (scatter_gather) pp_transfer_slice(n, ps->tp, ps->tp_rank, &off, &count);
    float *view = xfer_recv_view(be, buf, n * sizeof(float));
    return comm_irecv(xfer_comm(be, ps->pp_group), view + off, count, COMM_F32, peer, tag);
}

void pp_recv_finish(const ps_state *ps, const backend *be, int scatter_gather, float *buf, size_t n)
{
    if (scatter_gather) {
        int t = ps->tp;
        size_t *counts = td_xmalloc(2 * (size_t)t * sizeof(size_t)), *displs = counts + t;
        for (int r = 0; r < t; r++) pp_transfer_slice(n, t, r, &displs[r], &counts[r]);
        comm_wait(comm_iallgatherv(xfer_comm(be, ps->tp_group), xfer_recv_view(be, buf, n * sizeof(float)), counts, displs, COMM_F32));
        free(counts);
    }
    xfer_recv_done(be, buf, n * sizeof(float));
}

void pp_recv(const ps_state *ps, const backend *be, int scatter_gather, float *buf, size_t n, int peer, int tag)
{
    comm_wait(pp_recv_start(ps, be, scatter_gather, buf, n, peer, tag));
    pp_recv_finish(ps, be, scatter_gather, buf, n);
}

/* ---- per-chunk bookkeeping of micro-batches in flight ---- */

typedef struct {
    gpt_acts *a;
    int micro;
    int backward_done;
    comm_req *send; /* output (forward) or input gradient (backward) on its way */
    /* a send not started yet: it starts once `ready` (recorded after the kernels that wrote src)
     * has passed (queue_send) */
    int pending;
    be_event ready;
    const float *src;
    size_t n;
    int peer, tag;
} flight;

/* A receive posted ahead (it->prefetch): for the step (forward or backward, chunk, micro-batch). */
typedef struct {
    comm_req *q;      /* the receive (of this rank's slice, with scatter/gather), until it completes */
    comm_req *gather; /* then, with scatter/gather, the all-gather that rebuilds the whole */
    int chunk, micro;
    long seq;         /* the order receives were posted in, the same on every tp rank */
} prefetched;

typedef struct {
    pp_iteration *it;
    const backend *be; /* the chunks' */
    int p, s, v, V;
    flight *fl;    /* per chunk: max_inflight entries */
    int *nfl;      /* per chunk: entries in use */
    int *next_fwd, *next_bwd; /* per chunk: next micro-batch to run */
    prefetched pre[2];        /* [0] the next forward's input, [1] the next backward's gradient */
    long seq;                 /* receives posted ahead so far */
    size_t *counts, *displs;  /* scatter/gather: the tp ranks' slices of a transfer */
    int next_forward, next_chunk, next_micro; /* the step after the running one (next_chunk -1: none) */
    double loss;
} run;

static int vstage(const run *r, int chunk) { return chunk * r->p + r->s; }
static int tag_of(const run *r, int micro, int vs, int grad) { return 2 * (micro * r->V + vs) + grad; }

/* comm_wait on a stage transfer, its time counted in the iteration's transfer_s; what still
 * waits for its event is started first (ov_flush: a peer may be waiting on it). */
static void transfer_wait(run *r, comm_req *q)
{
    if (!q) return;
    ov_flush();
    double t0 = td_now();
    comm_wait(q);
    r->it->transfer_s += td_now() - t0;
}

/* Scatter/gather behind compute: once a slice received ahead has arrived, the all-gather that
 * rebuilds it starts on ps->tp_gather, so that the two tp ranks meet there while they compute
 * (comm_progress's hook, advance_gathers) instead of at the step that needs it. Gathers start in
 * the order their receives were posted, the same on every tp rank whichever slice lands first. */
static void start_gather(run *r, prefetched *pf)
{
    comm_wait(pf->q);
    pf->q = NULL;
    int t = r->it->ps->tp;
    size_t n = r->displs[t - 1] + r->counts[t - 1]; /* the whole transfer, in its view */
    float *view = xfer_recv_view(r->be, r->it->prefetch[pf - r->pre], n * sizeof(float));
    pf->gather = comm_iallgatherv(xfer_comm(r->be, r->it->ps->tp_gather), view, r->counts, r->displs, COMM_F32);
}

static prefetched *oldest_receiving(run *r)
{
    prefetched *a = r->pre[0].q ? &r->pre[0] : NULL, *b = r->pre[1].q ? &r->pre[1] : NULL;
    return !a ? b : !b ? a : a->seq < b->seq ? a : b;
}

static void advance_gathers(void *ctx)
{
    run *r = ctx;
    prefetched *pf = oldest_receiving(r);
    if (pf && comm_test(pf->q)) start_gather(r, pf);
}

/* The transfer into buf of step (grad: backward) of chunk c's micro-batch `micro`, its time
 * counted in transfer_s: from the receive posted ahead for it (and its all-gather), copied out of
 * its landing buffer, or received now. */
static void transfer_recv(run *r, int grad, int c, int micro, float *buf, size_t n, int peer, int tag)
{
    pp_iteration *it = r->it;
    ov_flush(); /* this rank blocks below: nothing of its own may be left waiting for an event */
    double t0 = td_now();
    prefetched *pf = &r->pre[grad];
    if ((pf->q || pf->gather) && pf->chunk == c && pf->micro == micro) {
        if (pf->q && r->counts) {
            TD_ASSERT(oldest_receiving(r) == pf); /* the gathers' order */
            start_gather(r, pf);
        } else if (pf->q) {
            comm_wait(pf->q);
            pf->q = NULL;
        }
        comm_wait(pf->gather);
        pf->gather = NULL;
        xfer_recv_done(r->be, it->prefetch[grad], n * sizeof(float));
        be_copy(it->chunks[c]->be, buf, it->prefetch[grad], n);
    } else {
        TD_ASSERT(pf->q == NULL && pf->gather == NULL);
        pp_recv(it->ps, r->be, it->scatter_gather, buf, n, peer, tag);
    }
    it->transfer_s += td_now() - t0;
}

/* Posts the receive of the step after the running one into its landing buffer (it->prefetch),
 * once the running step has its own input: the transfer then moves while this step computes
 * (comm_progress advances it between kernels). Nothing when the step needs no receive (a first
 * stage's forward, a last stage's backward) or there is no landing buffer (pp 1). */
static void prefetch_next(run *r)
{
    pp_iteration *it = r->it;
    int c = r->next_chunk, grad = !r->next_forward;
    if (c < 0 || !it->prefetch[grad]) return;
    gpt_model *m = it->chunks[c];
    if (r->next_forward ? m->first : m->last) return;
    TD_ASSERT(r->pre[grad].q == NULL && r->pre[grad].gather == NULL);
    int vs = vstage(r, c);
    size_t act = (size_t)it->mbs * m->seq_l * m->cfg.hidden;
    int peer = r->next_forward ? (vs - 1) % r->p : (vs + 1) % r->p;
    r->pre[grad].q = pp_recv_start(it->ps, r->be, it->scatter_gather, it->prefetch[grad], act, peer,
                                   tag_of(r, r->next_micro, vs, grad));
    r->pre[grad].chunk = c;
    r->pre[grad].micro = r->next_micro;
    r->pre[grad].seq = r->seq++;
}

static void send_start(run *r, flight *f)
{
    f->send = pp_send(r->it->ps, r->be, r->it->scatter_gather, f->src, f->n, f->peer, f->tag);
    be_event_release(r->be, &f->ready);
    f->pending = 0;
}

static void send_now(run *r, flight *f);

/* ov_progress's poll while sends wait for their events: starts those whose events have passed
 * (ov_flush's, force: all of them). */
static void poll_sends(void *ctx, int force)
{
    run *r = ctx;
    int waiting = 0;
    for (int c = 0; c < r->v; c++) {
        flight *fl = r->fl + (size_t)c * r->it->chunks[c]->max_inflight;
        for (int i = 0; i < r->nfl[c]; i++)
            if (fl[i].pending) {
                if (force) send_now(r, &fl[i]);
                else if (be_event_query(r->be, &fl[i].ready)) send_start(r, &fl[i]);
                else waiting++;
            }
    }
    if (!waiting) ov_remove(poll_sends, r);
}

/* f's send of the n floats of src to peer with tag: an event recorded after the kernels that
 * wrote src, and the send started once it has passed (at once on cpu; else from ov_progress,
 * between later kernels, or send_now). */
static void queue_send(run *r, flight *f, const float *src, size_t n, int peer, int tag)
{
    f->src = src, f->n = n, f->peer = peer, f->tag = tag;
    f->ready = be_event_record(r->be);
    f->pending = 1;
    if (be_event_query(r->be, &f->ready)) send_start(r, f);
    else ov_add(poll_sends, r);
}

/* Before f's send is waited on: started, after its kernels if they have not run yet. */
static void send_now(run *r, flight *f)
{
    if (!f->pending) return;
    if (!be_event_query(r->be, &f->ready)) be_sync(r->be);
    send_start(r, f);
}

/* Frees the slot of a finished micro-batch of chunk c (backward done, or any forward when not
 * training) after its send completes. `all`: every finished one, and every send still on its way.
 * A slot is reclaimed only when one is needed, and then the oldest: waiting on a send blocks
 * until the peer posts its receive, which above MPI's eager limit it does only when its own
 * schedule reaches that micro-batch, so a rank must never wait on a send it has just started
 * (forward-only interleaving would then deadlock around the ring of stages). */
static void reclaim(run *r, int c, int all)
{
    gpt_model *m = r->it->chunks[c];
    flight *fl = r->fl + (size_t)c * m->max_inflight;
    int oldest = -1;
    for (int i = 0; i < r->nfl[c]; i++) {
        int finished = fl[i].backward_done || !r->it->training;
        if (all) {
            send_now(r, &fl[i]);
            transfer_wait(r, fl[i].send);
            fl[i].send = NULL;
        }
        if (finished && (oldest < 0 || fl[i].micro < fl[oldest].micro)) oldest = i;
    }
    int keep = 0;
    for (int i = 0; i < r->nfl[c]; i++) {
        int finished = fl[i].backward_done || !r->it->training;
        if (finished && (all || i == oldest)) {
            send_now(r, &fl[i]);
            transfer_wait(r, fl[i].send);
            gpt_acts_release(m, fl[i].a);
        } else {
            fl[keep++] = fl[i];
        }
    }
    r->nfl[c] = keep;
}

static void forward_step(run *r, int c)
{
    pp_iteration *it = r->it;
    gpt_model *m = it->chunks[c];
    int micro = r->next_fwd[c]++, vs = vstage(r, c);
    if (r->nfl[c] == m->max_inflight) reclaim(r, c, 0);
    TD_ASSERT(r->nfl[c] < m->max_inflight);
    gpt_acts *a = gpt_acts_acquire(m);

    const float *input = NULL;
    size_t act = (size_t)it->mbs * m->seq_l * m->cfg.hidden; /* sequence parallelism: this rank's positions */
    if (!m->first) {
        input = gpt_acts_input(a);
        transfer_recv(r, 0, c, micro, (float *)input, act, (vs - 1) % r->p, tag_of(r, micro, vs, 0));
    }
    prefetch_next(r);
    double loss = 0;
    float *out = gpt_forward(m, a, &it->micro[micro], input, it->training, &loss);
    r->loss += loss;
    if (m->last) gpt_head_stats(a, it->stats);
    flight *f = &r->fl[(size_t)c * m->max_inflight + r->nfl[c]++];
    *f = (flight){.a = a, .micro = micro};
    if (!m->last) queue_send(r, f, out, act, (vs + 1) % r->p, tag_of(r, micro, vs + 1, 0));
}

static void backward_step(run *r, int c)
{
    pp_iteration *it = r->it;
    gpt_model *m = it->chunks[c];
    int micro = r->next_bwd[c]++, vs = vstage(r, c);
    flight *fl = r->fl + (size_t)c * m->max_inflight, *f = NULL;
    for (int i = 0; i < r->nfl[c]; i++)
        if (fl[i].micro == micro && !fl[i].backward_done) f = &fl[i];
    TD_ASSERT(f != NULL);
    size_t act = (size_t)it->mbs * m->seq_l * m->cfg.hidden; /* sequence parallelism: this rank's positions */
    if (!m->last) transfer_recv(r, 1, c, micro, it->grad_in, act, (vs + 1) % r->p, tag_of(r, micro, vs, 1));
    prefetch_next(r);
    /* the output has arrived downstream (its gradient came back), so its send is complete */
    send_now(r, f);
    transfer_wait(r, f->send);
    f->send = NULL;
    /* the last micro-batch's backward makes the chunk's gradients final */
    m->grads_final = micro == it->num_micro - 1;
    float *dinput = gpt_backward(m, f->a, m->last ? NULL : it->grad_in, it->loss_scale);
    m->grads_final = 0;
    if (!m->first) {
        float *buf = gpt_acts_input(f->a);
        be_copy(m->be, buf, dinput, act);
        queue_send(r, f, buf, act, (vs - 1 + r->p) % r->p, tag_of(r, micro, vs - 1, 1));
    }
    f->backward_done = 1;
}

/* Chunk of virtual micro-batch k (Megatron's get_model_chunk_id). */
static int chunk_of(const run *r, int k, int forward)
{
    int c = (k % (r->p * r->v)) / r->p;
    return forward ? c : r->v - 1 - c;
}

double pp_run(pp_schedule schedule, pp_iteration *it)
{
    run r = {0};
    r.it = it;
    r.be = it->chunks[0]->be;
    ov_attach(it->chunks[0]->be);
    r.p = it->ps->pp;
    r.s = it->ps->pp_rank;
    r.v = it->nchunks;
    r.V = r.p * r.v;
    TD_ASSERT(schedule != PP_SCHEDULE_INTERLEAVED || it->num_micro % r.p == 0);
    TD_ASSERT(schedule == PP_SCHEDULE_INTERLEAVED || r.v == 1);
    /* chunk c's flights live at fl_store + c * slots; every chunk has the same slot count */
    flight fl_store[PS_MAX_CHUNKS * PP_MAX_SLOTS] = {{0}};
    int nfl[PS_MAX_CHUNKS] = {0}, next_fwd[PS_MAX_CHUNKS] = {0}, next_bwd[PS_MAX_CHUNKS] = {0};
    TD_ASSERT(r.v <= PS_MAX_CHUNKS && it->chunks[0]->max_inflight <= PP_MAX_SLOTS);
    for (int c = 1; c < r.v; c++) TD_ASSERT(it->chunks[c]->max_inflight == it->chunks[0]->max_inflight);
    /* the last stage's losses stay on the device until the schedule's end (gpt_losses_take) */
    for (int c = 0; c < r.v; c++) it->chunks[c]->defer_losses = 1;
    r.fl = fl_store;
    r.nfl = nfl;
    r.next_fwd = next_fwd;
    r.next_bwd = next_bwd;

    /* the steps in order: forward-only, or warm-up (forwards only), steady state (one forward,
     * one backward) and cool-down (the backwards still owed) */
    int total = it->num_micro * r.v, nsteps = it->training ? 2 * total : total, n = 0;
    int *steps = td_xmalloc((size_t)nsteps * sizeof *steps); /* chunk * 2 + forward */
    if (!it->training) {
        for (int k = 0; k < total; k++) steps[n++] = 2 * chunk_of(&r, k, 1) + 1;
    } else {
        int warmup = warmup_count(schedule, r.p, r.s, r.v, total), steady = total - warmup;
        for (int k = 0; k < warmup; k++) steps[n++] = 2 * chunk_of(&r, k, 1) + 1;
        for (int k = 0; k < steady; k++) {
            steps[n++] = 2 * chunk_of(&r, warmup + k, 1) + 1;
            steps[n++] = 2 * chunk_of(&r, k, 0);
        }
        for (int k = steady; k < total; k++) steps[n++] = 2 * chunk_of(&r, k, 0);
    }
    TD_ASSERT(n == nsteps);
    if (it->scatter_gather && it->prefetch[0] && it->ps->tp_gather) { /* the all-gathers behind compute */
        int t = it->ps->tp;
        size_t act = (size_t)it->mbs * it->chunks[0]->seq_l * it->chunks[0]->cfg.hidden;
        r.counts = td_xmalloc(2 * (size_t)t * sizeof(size_t));
        r.displs = r.counts + t;
        for (int k = 0; k < t; k++) pp_transfer_slice(act, t, k, &r.displs[k], &r.counts[k]);
        comm_set_progress_hook(advance_gathers, &r);
    }
    for (int j = 0; j < nsteps; j++) {
        int fwd = steps[j] & 1, c = steps[j] >> 1;
        r.next_chunk = -1;
        if (j + 1 < nsteps) { /* its micro-batch: the chunk's next, past this step's if the same kind */
            r.next_forward = steps[j + 1] & 1;
            r.next_chunk = steps[j + 1] >> 1;
            r.next_micro = (r.next_forward ? next_fwd : next_bwd)[r.next_chunk] +
                           (r.next_forward == fwd && r.next_chunk == c);
        }
        if (fwd) forward_step(&r, c);
        else backward_step(&r, c);
    }
    free(steps);
    if (r.counts) comm_set_progress_hook(NULL, NULL);
    free(r.counts);
    TD_ASSERT(r.pre[0].q == NULL && r.pre[1].q == NULL && r.pre[0].gather == NULL && r.pre[1].gather == NULL);

    for (int c = 0; c < r.v; c++) reclaim(&r, c, 1);
    ov_remove(poll_sends, &r);
    for (int c = 0; c < r.v; c++) {
        gpt_losses_take(it->chunks[c], &r.loss);
        it->chunks[c]->defer_losses = 0;
    }
    return r.loss;
}
