/* The canonical flat layout of a whole GPT model: see gpt_canonical_offset in
 * include/trident/gpt.h. Used to gather parameters written by any layout into one file. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "trident/check.h"
#include "trident/gpt.h"

int64_t gpt_canonical_offset(const gpt_config *c, const char *name)
{
    gpt_model m;
    gpt_logical_table(c, &m);
    int64_t off = -1;
    for (int i = 0; i < m.ntensors && off < 0; i++)
        if (strcmp(m.table[i].name, name) == 0) off = (int64_t)m.table[i].offset;
    free(m.table);
    return off;
}

int64_t gpt_num_params(const gpt_config *c)
{
    gpt_model m;
    gpt_logical_table(c, &m);
    free(m.table);
    return (int64_t)m.numel;
}

static int write_at(int fd, const float *src, size_t n, int64_t elem)
{
    const char *p = (const char *)src;
    size_t left = n * sizeof(float);
    off_t pos = (off_t)elem * (off_t)sizeof(float);
    while (left) {
        ssize_t w = pwrite(fd, p, left, pos);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += w;
        pos += w;
        left -= (size_t)w;
    }
    return 0;
}

int gpt_write_canonical(const gpt_model *m, int fd, int writer)
{
    float *host = td_xmalloc(m->numel * sizeof(float));
    be_memcpy(m->be, host, m->params, m->numel * sizeof(float), BE_D2H);
    int rc = 0;
    for (int i = 0; i < m->ntensors && rc == 0; i++) {
        const gpt_tensor_info *t = &m->table[i];
        if (t->embedding_copy) continue;
        if (t->tp_replicated && !(writer && m->ps->tp_rank == 0)) continue;
        if (!t->tp_replicated && !writer) continue;
        int64_t base = gpt_canonical_offset(&m->cfg, t->name);
        TD_ASSERT(base >= 0);
        const float *src = host + t->offset;
        int64_t rows = t->shape[0], cols = t->ndim == 2 ? t->shape[1] : 1;
        if (t->shard_dim < 0) {
            rc = write_at(fd, src, t->numel, base);
        } else if (t->shard_dim == 0) {
            int64_t block = rows / t->shard_blocks;
            for (int b = 0; b < t->shard_blocks && rc == 0; b++)
                rc = write_at(fd, src + b * t->shard_len * cols, (size_t)(t->shard_len * cols),
                              base + (b * block + t->shard_start) * cols);
        } else {
            for (int64_t r = 0; r < rows && rc == 0; r++)
                rc = write_at(fd, src + r * t->shard_len, (size_t)t->shard_len, base + r * cols + t->shard_start);
        }
    }
    free(host);
    return rc;
}
