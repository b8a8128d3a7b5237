/* The canonical flat layout of a whole GPT model: see gpt_canonical_offset in
 * include/trident/gpt.h. Used to gather parameters written by any layout into one file. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "trident/check.h"
#include "trident/gpt.h"

/* The per-layer tensors in table order, with their logical sizes. */
static const char *const LAYER_TENSORS[] = {"mlp.fc2.bias", "mlp.fc2.weight", "mlp.fc.bias", "mlp.fc.weight",
                                            "ln2.bias", "ln2.weight", "attn.proj.bias", "attn.proj.weight",
                                            "attn.qkv.bias", "attn.qkv.weight", "ln1.bias", "ln1.weight"};

/* Logical shape of per-layer tensor k: ndim, and (d0) or (d0, d1); keys (if not NULL) gets the
 * config key each dimension is set by. */
static int layer_tensor_shape(const gpt_config *c, int k, int64_t shape[2], const char *keys[2])
{
    int64_t h = c->hidden, f = c->ffn;
    const int64_t d0[] = {h, h, f, f, h, h, h, h, 3 * h, 3 * h, h, h};
    const int64_t d1[] = {0, f, 0, h, 0, 0, 0, h, 0, h, 0, 0};
    shape[0] = d0[k];
    shape[1] = d1[k];
    if (keys) {
        const char *H = "hidden_size", *F = "ffn_hidden_size";
        const char *k0[] = {H, H, F, F, H, H, H, H, H, H, H, H}, *k1[] = {0, F, 0, H, 0, 0, 0, H, 0, H, 0, 0};
        keys[0] = k0[k];
        keys[1] = k1[k];
    }
    return d1[k] ? 2 : 1;
}

static int64_t layer_tensor_size(const gpt_config *c, int k)
{
    int64_t s[2];
    return layer_tensor_shape(c, k, s, NULL) == 2 ? s[0] * s[1] : s[0];
}

int gpt_logical_tensor(const gpt_config *c, int i, char *name, size_t len, int64_t shape[2], const char *keys[2])
{
    int nlayer = 12 * c->num_layers;
    const char *unused[2];
    if (!keys) keys = unused;
    if (i < 0 || i >= 4 + nlayer) return 0;
    shape[1] = 0;
    keys[1] = NULL;
    if (i < 2) {
        snprintf(name, len, "%s", i == 0 ? "embedding.word.weight" : "embedding.position.weight");
        shape[0] = i == 0 ? c->padded_vocab : c->max_pos;
        keys[0] = i == 0 ? "padded_vocab_size" : "max_position_embeddings";
        shape[1] = c->hidden;
        keys[1] = "hidden_size";
        return 2;
    }
    if (i >= 2 + nlayer) {
        snprintf(name, len, "%s", i == 2 + nlayer ? "final_norm.bias" : "final_norm.weight");
        shape[0] = c->hidden;
        keys[0] = "hidden_size";
        return 1;
    }
    int l = (i - 2) / 12, k = (i - 2) % 12;
    snprintf(name, len, "layers.%d.%s", l, LAYER_TENSORS[k]);
    return layer_tensor_shape(c, k, shape, keys);
}

static int64_t layer_size(const gpt_config *c)
{
    int64_t n = 0;
    for (int k = 0; k < 12; k++) n += layer_tensor_size(c, k);
    return n;
}

int64_t gpt_canonical_offset(const gpt_config *c, const char *name)
{
    int64_t h = c->hidden, wte = (int64_t)c->padded_vocab * h, wpe = (int64_t)c->max_pos * h;
    int64_t layers = wte + wpe, end = layers + c->num_layers * layer_size(c);
    if (strcmp(name, "embedding.word.weight") == 0) return 0;
    if (strcmp(name, "embedding.position.weight") == 0) return wte;
    if (strcmp(name, "final_norm.bias") == 0) return end;
    if (strcmp(name, "final_norm.weight") == 0) return end + h;
    int l, n = 0;
    if (sscanf(name, "layers.%d.%n", &l, &n) != 1 || n == 0 || l < 0 || l >= c->num_layers) return -1;
    int64_t off = layers + l * layer_size(c);
    for (int k = 0; k < 12; k++) {
        if (strcmp(name + n, LAYER_TENSORS[k]) == 0) return off;
        off += layer_tensor_size(c, k);
    }
    return -1;
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
