/* The layout of a checkpoint's shards, shared by the writer (checkpoint.c) and the reader
 * (reader.c): the reader builds on it alone, never on the writer (which uses the reader to
 * find and verify what it wrote). Iteration folders and shard file names, the entry kinds
 * (parameters, Adam moments) and their name prefixes, the tensors split along the vocabulary,
 * and slices — which part of a logical tensor an entry holds — with their __metadata__
 * descriptions, written and parsed. See include/ckpt/trident/checkpoint.h and docs/checkpoints.md. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "ckpt_impl.h"
#include "trident/check.h"
#include "trident/checkpoint.h"

int ckpt_is_vocab_tensor(const char *name)
{
    return strcmp(name, "embedding.word.weight") == 0 || strcmp(name, "output_layer.weight") == 0 ||
           strcmp(name, "lm_head.bias") == 0;
}

ckpt_slice ckpt_slice_of(const gpt_tensor_info *t)
{
    ckpt_slice s = {t->ndim, {t->shape[0], t->ndim == 2 ? t->shape[1] : 0}, t->shard_dim, 1, 0, 0, 0, 0};
    if (t->shard_dim >= 0) {
        s.blocks = t->shard_blocks;
        s.start = t->shard_start;
        s.len = t->shard_len;
    }
    if (t->nrows) s.r0 = t->row0, s.r1 = t->row0 + t->nrows;
    return s;
}

ckpt_slice ckpt_slice_whole(int64_t d0, int64_t d1)
{
    ckpt_slice s = {d1 ? 2 : 1, {d0, d1}, -1, 1, 0, 0, 0, 0};
    return s;
}

int64_t ckpt_slice_numel(const ckpt_slice *s)
{
    int64_t n0 = s->r1 ? s->r1 - s->r0 : s->shape[0], n1 = s->ndim == 2 ? s->shape[1] : 1;
    if (s->dim == 0) n0 = (s->r1 ? (s->r1 - s->r0) / (s->shape[0] / s->blocks) : s->blocks) * s->len;
    if (s->dim == 1) n1 = s->blocks * s->len;
    return n0 * n1;
}

void ckpt_slice_take(const ckpt_slice *s, const float *whole, float *dst)
{
    TD_ASSERT(s->r1 == 0);
    int64_t rows = s->shape[0], cols = s->ndim == 2 ? s->shape[1] : 1;
    if (s->dim < 0) {
        memcpy(dst, whole, (size_t)(rows * cols) * sizeof(float));
        return;
    }
    int64_t block = s->shape[s->dim] / s->blocks;
    if (s->dim == 0) {
        for (int b = 0; b < s->blocks; b++)
            memcpy(dst + (int64_t)b * s->len * cols, whole + (b * block + s->start) * cols,
                   (size_t)(s->len * cols) * sizeof(float));
        return;
    }
    for (int64_t i = 0; i < rows; i++)
        for (int b = 0; b < s->blocks; b++)
            memcpy(dst + (i * s->blocks + b) * s->len, whole + i * cols + b * block + s->start,
                   (size_t)s->len * sizeof(float));
}

void ckpt_iter_dir(char *out, size_t len, const char *dir, int64_t iteration)
{
    int k = snprintf(out, len, "%s/iter_%07lld", dir, (long long)iteration);
    if (k < 0 || (size_t)k >= len) td_fatal(1, "--save path too long: %s", dir);
}

const char *ckpt_kind_prefix(ckpt_kind k)
{
    return k == CKPT_EXP_AVG ? "exp_avg." : k == CKPT_EXP_AVG_SQ ? "exp_avg_sq." : "";
}

void ckpt_shard_name(char *out, size_t len, int optimizer, int tp_rank, int pp_rank)
{
    snprintf(out, len, "%s_tp%03d_pp%03d.safetensors", optimizer ? "optim" : "model", tp_rank, pp_rank);
}

void ckpt_ep_shard_name(char *out, size_t len, int optimizer, int tp_rank, int pp_rank, int ep_rank)
{
    snprintf(out, len, "%s_tp%03d_pp%03d_ep%03d.safetensors", optimizer ? "optim" : "model", tp_rank, pp_rank, ep_rank);
}

void ckpt_dp_shard_name(char *out, size_t len, int tp_rank, int pp_rank, int dp_rank)
{
    snprintf(out, len, "optim_tp%03d_pp%03d_dp%03d.safetensors", tp_rank, pp_rank, dp_rank);
}

char *ckpt_piece_json(const ckpt_slice *s, uint32_t crc, const int64_t *elems, int nranges)
{
    char *head = ckpt_slice_json(s, crc);
    size_t cap = strlen(head) + 32 + (size_t)nranges * 48, at = strlen(head) - 1; /* drop the closing brace */
    char *out = td_xmalloc(cap);
    memcpy(out, head, at);
    free(head);
    at += (size_t)snprintf(out + at, cap - at, ",\"elements\":[");
    for (int i = 0; i < 2 * nranges; i++)
        at += (size_t)snprintf(out + at, cap - at, "%s%lld", i ? "," : "", (long long)elems[i]);
    snprintf(out + at, cap - at, "]}");
    return out;
}

char *ckpt_slice_json(const ckpt_slice *s, uint32_t crc)
{
    char buf[320], rows[64] = "";
    if (s->r1) snprintf(rows, sizeof rows, ",\"rows\":[%lld,%lld]", (long long)s->r0, (long long)s->r1);
    if (s->ndim == 2)
        snprintf(buf, sizeof buf, "{\"shape\":[%lld,%lld],\"dim\":%d,\"blocks\":%d,\"start\":%lld,\"len\":%lld%s,"
                 "\"crc32\":\"%08x\"}", (long long)s->shape[0], (long long)s->shape[1], s->dim, s->blocks,
                 (long long)s->start, (long long)s->len, rows, crc);
    else
        snprintf(buf, sizeof buf, "{\"shape\":[%lld],\"dim\":%d,\"blocks\":%d,\"start\":%lld,\"len\":%lld%s,"
                 "\"crc32\":\"%08x\"}", (long long)s->shape[0], s->dim, s->blocks, (long long)s->start,
                 (long long)s->len, rows, crc);
    return td_xstrdup(buf);
}

/* ---- slice descriptions, parsed ---- */

int ckpt_slice_parse(const char *json, ckpt_slice *s, uint32_t *crc)
{
    cJSON *o = cJSON_Parse(json);
    int rc = -1;
    if (!cJSON_IsObject(o)) goto done;
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(o, "shape"), *dim = cJSON_GetObjectItemCaseSensitive(o, "dim");
    const cJSON *blocks = cJSON_GetObjectItemCaseSensitive(o, "blocks"), *start = cJSON_GetObjectItemCaseSensitive(o, "start");
    const cJSON *len = cJSON_GetObjectItemCaseSensitive(o, "len"), *c = cJSON_GetObjectItemCaseSensitive(o, "crc32");
    if (!cJSON_IsArray(shape) || !cJSON_IsNumber(dim) || !cJSON_IsNumber(blocks) || !cJSON_IsNumber(start) ||
        !cJSON_IsNumber(len) || !cJSON_IsString(c))
        goto done;
    int nd = cJSON_GetArraySize(shape);
    if (nd < 1 || nd > 2) goto done;
    memset(s, 0, sizeof *s);
    s->ndim = nd;
    int k = 0;
    for (const cJSON *d = shape->child; d; d = d->next, k++) {
        if (!cJSON_IsNumber(d) || d->valuedouble < 0 || d->valuedouble > 1e15) goto done;
        s->shape[k] = (int64_t)d->valuedouble;
    }
    s->dim = (int)dim->valuedouble;
    s->blocks = (int)blocks->valuedouble;
    s->start = (int64_t)start->valuedouble;
    s->len = (int64_t)len->valuedouble;
    if (s->dim < -1 || s->dim >= nd || s->blocks < 1 || s->blocks > CKPT_MAX_BLOCKS) goto done;
    if (s->dim >= 0) {
        int64_t size = s->shape[s->dim];
        if (size % s->blocks || s->start < 0 || s->len < 0 || s->start + s->len > size / s->blocks) goto done;
    }
    const cJSON *rows = cJSON_GetObjectItemCaseSensitive(o, "rows"); /* expert parallelism's range */
    if (rows) {
        if (!cJSON_IsArray(rows) || cJSON_GetArraySize(rows) != 2 || !cJSON_IsNumber(rows->child) ||
            !cJSON_IsNumber(rows->child->next))
            goto done;
        double a = rows->child->valuedouble, b = rows->child->next->valuedouble;
        if (a < 0 || b <= a || b > (double)s->shape[0] || a != floor(a) || b != floor(b)) goto done;
        s->r0 = (int64_t)a, s->r1 = (int64_t)b;
        int64_t block = s->dim == 0 ? s->shape[0] / s->blocks : 1;
        if (s->r0 % block || s->r1 % block) goto done; /* whole blocks */
    }
    char *end;
    unsigned long v = strtoul(c->valuestring, &end, 16);
    if (*end || end == c->valuestring || v > 0xffffffffUL) goto done;
    *crc = (uint32_t)v;
    rc = 0;
done:
    cJSON_Delete(o);
    return rc;
}

int ckpt_piece_parse(const char *json, int64_t numel, int64_t **elems, int *n)
{
    cJSON *o = cJSON_Parse(json);
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, "elements");
    int k = cJSON_IsArray(a) ? cJSON_GetArraySize(a) : 0, rc = -1;
    *elems = NULL;
    if (k < 2 || k % 2) goto done;
    *elems = td_xmalloc((size_t)k * sizeof(int64_t));
    int i = 0;
    int64_t prev = 0;
    for (const cJSON *v = a->child; v; v = v->next, i++) {
        if (!cJSON_IsNumber(v) || v->valuedouble < (double)prev || v->valuedouble > (double)numel) goto done;
        (*elems)[i] = prev = (int64_t)v->valuedouble;
        if (i % 2 && (*elems)[i] == (*elems)[i - 1]) goto done;
    }
    *n = k / 2;
    rc = 0;
done:
    if (rc) {
        free(*elems);
        *elems = NULL;
    }
    cJSON_Delete(o);
    return rc;
}
