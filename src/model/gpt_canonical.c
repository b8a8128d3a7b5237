/* The canonical flat layout of a whole GPT model: see gpt_canonical_offset in
 * include/model/trident/gpt.h. Used to gather parameters written by any layout into one file. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "trident/check.h"
#include "trident/gpt.h"

/* Offset of `name` in a logical table, or -1. */
static int64_t offset_in(const gpt_model *logical, const char *name)
{
    for (int i = 0; i < logical->ntensors; i++)
        if (strcmp(logical->table[i].name, name) == 0) return (int64_t)logical->table[i].offset;
    return -1;
}

int64_t gpt_canonical_offset(const gpt_config *c, const char *name)
{
    gpt_model m;
    gpt_logical_table(c, &m);
    int64_t off = offset_in(&m, name);
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

const char *gpt_logical_dim_key(const gpt_config *c, const char *name, int64_t n)
{
    if (n == c->padded_vocab) return "padded_vocab_size";
    if (n == c->max_pos && strstr(name, "position")) return "max_position_embeddings";
    if (n == c->hidden || n == 3 * (int64_t)c->hidden) return "hidden_size";
    if (n == c->ffn || n == 2 * (int64_t)c->ffn) return "ffn_hidden_size";
    if (n == c->max_pos) return "max_position_embeddings";
    if (strstr(name, ".kv.")) return "num_query_groups";
    return c->kv_channels ? "kv_channels" : "num_attention_heads";
}

int gpt_logical_tensor(const gpt_config *c, int i, char *name, size_t len, int64_t shape[2], const char *keys[2])
{
    gpt_model m;
    gpt_logical_table(c, &m);
    int nd = 0;
    if (i >= 0 && i < m.ntensors) {
        const gpt_tensor_info *t = &m.table[i];
        snprintf(name, len, "%s", t->name);
        nd = t->ndim;
        shape[0] = t->shape[0];
        shape[1] = nd == 2 ? t->shape[1] : 0;
        if (keys) {
            keys[0] = gpt_logical_dim_key(c, t->name, shape[0]);
            keys[1] = nd == 2 ? gpt_logical_dim_key(c, t->name, shape[1]) : NULL;
        }
    }
    free(m.table);
    return nd;
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
    float *host = td_xmalloc(m->numel_all * sizeof(float));
    be_memcpy(m->be, host, m->params, m->numel_all * sizeof(float), BE_D2H);
    gpt_model logical; /* the canonical offsets, built once */
    gpt_logical_table(&m->cfg, &logical);
    int rc = 0;
    for (int i = 0; i < m->ntensors && rc == 0; i++) {
        const gpt_tensor_info *t = &m->table[i];
        if (t->embedding_copy) continue;
        /* the experts: from the first copy of each expert-parallel rank's (writer is the dense tensors') */
        int w = t->expert ? m->ps->edp_rank == 0 : writer;
        if (t->tp_replicated && !(w && m->ps->tp_rank == 0)) continue;
        if (!t->tp_replicated && !w) continue;
        int64_t base = offset_in(&logical, t->name);
        TD_ASSERT(base >= 0);
        const float *src = host + t->offset;
        int64_t rows = t->shape[0], cols = t->ndim == 2 ? t->shape[1] : 1, r0, r1;
        gpt_tensor_rows(t, &r0, &r1);
        if (t->shard_dim < 0) {
            rc = write_at(fd, src, t->numel, base + r0 * cols);
        } else if (t->shard_dim == 0) {
            int64_t block = rows / t->shard_blocks, local = 0;
            for (int b = 0; b < t->shard_blocks && rc == 0; b++) {
                if (b * block < r0 || b * block >= r1) continue;
                rc = write_at(fd, src + local * t->shard_len * cols, (size_t)(t->shard_len * cols),
                              base + (b * block + t->shard_start) * cols);
                local++;
            }
        } else {
            for (int64_t r = r0; r < r1 && rc == 0; r++)
                rc = write_at(fd, src + (r - r0) * t->shard_len, (size_t)t->shard_len, base + r * cols + t->shard_start);
        }
    }
    free(host);
    free(logical.table);
    return rc;
}
