/* --dump-params: the whole model, gathered to its logical shapes, written to one file, and every
 * replica of it checked bitwise against the dumped copy. See train_impl.h. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train_impl.h"
#include "trident/check.h"

static double max_abs_diff(const float *a, const float *b, size_t n)
{
    double d = 0;
    for (size_t i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - b[i]));
    return d;
}

/* The dump holds one copy of each parameter; every other copy must be bitwise the same: the
 * data-parallel replicas, the tensor-parallel copies of replicated tensors (norms, biases
 * after a row-parallel reduce) and the last stage's copy of the word embedding. A drifted
 * replica is a bug the dump alone would hide: it ends the job naming the kind and size. */
static void check_replicas(run_state *r)
{
    double d[3] = {0, 0, 0}; /* data-parallel, tensor-parallel, embedding copy */
    for (int k = 0; k < r->model.nchunks; k++) {
        gpt_model *m = r->model.chunks[k];
        int embd = (m->first || m->last) && !m->cfg.untied && r->ps->embd_group && comm_size(r->ps->embd_group) > 1;
        if (comm_size(r->ps->dpcp_group) == 1 && comm_size(r->ps->tp_group) == 1 && !embd &&
            (r->ps->ep == 1 || comm_size(r->ps->edp_group) == 1))
            continue; /* no other copy of anything here (one rank): nothing to compare, no collective */
        float *mine = td_xmalloc(m->numel_all * sizeof(float)), *ref = td_xmalloc(m->numel_all * sizeof(float));
        be_memcpy(r->model.be, mine, m->params, m->numel_all * sizeof(float), BE_D2H);
        memcpy(ref, mine, m->numel_all * sizeof(float));
        comm_bcast(r->ps->dpcp_group, ref, m->numel_all, COMM_F32, 0); /* dp and cp replicas */
        for (int i = 0; i < m->ntensors; i++) { /* the experts: over the ranks holding the same ones */
            const gpt_tensor_info *t = &m->table[i];
            if (!t->expert || r->ps->ep == 1) continue;
            memcpy(ref + t->offset, mine + t->offset, t->numel * sizeof(float));
            comm_bcast(r->ps->edp_group, ref + t->offset, t->numel, COMM_F32, 0);
        }
        d[0] = fmax(d[0], max_abs_diff(mine, ref, m->numel_all));
        for (int i = 0; i < m->ntensors; i++) {
            const gpt_tensor_info *t = &m->table[i];
            if (!t->tp_replicated) continue;
            memcpy(ref + t->offset, mine + t->offset, t->numel * sizeof(float));
            comm_bcast(r->ps->tp_group, ref + t->offset, t->numel, COMM_F32, 0);
            d[1] = fmax(d[1], max_abs_diff(mine + t->offset, ref + t->offset, t->numel));
        }
        /* the first stage's word embedding against the last stage's copy */
        float *w = m->first ? mine + (m->p.wte - m->params) : m->last ? mine + (m->p.head_w - m->params) : NULL;
        if (w && !m->cfg.untied && r->ps->embd_group && comm_size(r->ps->embd_group) > 1) {
            size_t n = (size_t)m->vocab_l * m->cfg.hidden;
            memcpy(ref, w, n * sizeof(float));
            comm_bcast(r->ps->embd_group, ref, n, COMM_F32, 0);
            d[2] = fmax(d[2], max_abs_diff(w, ref, n));
        }
        free(mine);
        free(ref);
    }
    comm_allreduce(r->ps->world, d, 3, COMM_F64, COMM_MAX);
    if (d[0] > 0 || d[1] > 0 || d[2] > 0)
        td_fatal(1, "--dump-params: parameter replicas differ (largest difference: data-parallel %g, "
                 "tensor-parallel copies %g, the last stage's word embedding %g); this is a bug in trident",
                 d[0], d[1], d[2]);
    if (r->report.reporter) TD_INFO("dump-params: every replica is bitwise the same as the dumped copy");
}

/* Writes the whole model, gathered to its logical shapes, to `path` (collective). */
void run_dump_params(run_state *r, const char *path)
{
    const gpt_config *c = &r->model.chunks[0]->cfg;
    run_wait_params(r);
    off_t bytes = (off_t)gpt_num_params(c) * (off_t)sizeof(float);
    if (r->ps->world_rank == 0) {
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0 || ftruncate(fd, bytes) != 0) td_fatal(1, "cannot create --dump-params %s: %s", path, td_strerror(errno));
        close(fd);
    }
    comm_barrier(r->ps->world);
    int fd = open(path, O_WRONLY);
    if (fd < 0) td_fatal(1, "cannot open --dump-params %s: %s", path, td_strerror(errno));
    for (int k = 0; k < r->model.nchunks; k++)
        if (gpt_write_canonical(r->model.chunks[k], fd, r->ps->dpcp_rank == 0))
            td_fatal(1, "cannot write --dump-params %s: %s", path, td_strerror(errno));
    if (fsync(fd) != 0 || close(fd) != 0) td_fatal(1, "cannot write --dump-params %s: %s", path, td_strerror(errno));
    check_replicas(r);
    comm_barrier(r->ps->world);
}
