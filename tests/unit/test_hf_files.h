/* The independent side of tests/unit/test_checkpoint_hf.c: a model as named float tensors in
 * transformers' layout, with its own safetensors writer and reader over cJSON (not
 * src/ckpt/safetensors.c) and config.json's reader. Static helpers, for that one test. */
#ifndef TD_TEST_HF_FILES_H
#define TD_TEST_HF_FILES_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

/* ---- the independent model: named float tensors in HF layout ---- */

typedef struct {
    char name[96];
    int ndim;
    int64_t shape[2];
    float *v;
} htensor;

typedef struct {
    int n;
    htensor t[96];
    char dtype[8]; /* read_hf: the tensors' dtype (all the same) */
} hmodel;

static htensor *hadd(hmodel *m, const char *name, int64_t d0, int64_t d1)
{
    assert_true(m->n < (int)(sizeof m->t / sizeof m->t[0]));
    htensor *t = &m->t[m->n++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = d1 ? 2 : 1;
    t->shape[0] = d0;
    t->shape[1] = d1;
    t->v = calloc((size_t)(d0 * (d1 ? d1 : 1)), sizeof(float));
    return t;
}

/* Finds `name`, with or without the "transformer." prefix. */
static const float *hget(const hmodel *m, const char *name, int64_t d0, int64_t d1)
{
    for (int i = 0; i < m->n; i++) {
        const char *n = m->t[i].name;
        if (strncmp(n, "transformer.", 12) == 0) n += 12;
        if (strcmp(n, name) == 0) {
            assert_int_equal(m->t[i].shape[0], d0);
            if (d1) assert_int_equal(m->t[i].shape[1], d1);
            return m->t[i].v;
        }
    }
    fail_msg("tensor %s missing", name);
    return NULL;
}

static void hfree(hmodel *m)
{
    for (int i = 0; i < m->n; i++) free(m->t[i].v);
    m->n = 0;
}

/* ---- its own safetensors writer and reader (not src/ckpt/safetensors.c) ---- */

/* Tensors [from, to) of m as a safetensors file at path. */
static void write_st(const hmodel *m, const char *path, int from, int to)
{
    char hdr[16384];
    size_t n = 0, off = 0;
    n += (size_t)snprintf(hdr + n, sizeof hdr - n, "{\"__metadata__\":{\"format\":\"pt\"}");
    for (int i = from; i < to; i++) {
        const htensor *t = &m->t[i];
        size_t bytes = (size_t)(t->shape[0] * (t->ndim == 2 ? t->shape[1] : 1)) * 4;
        if (t->ndim == 2)
            n += (size_t)snprintf(hdr + n, sizeof hdr - n, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%lld,%lld],\"data_offsets\":[%zu,%zu]}",
                                  t->name, (long long)t->shape[0], (long long)t->shape[1], off, off + bytes);
        else
            n += (size_t)snprintf(hdr + n, sizeof hdr - n, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%lld],\"data_offsets\":[%zu,%zu]}",
                                  t->name, (long long)t->shape[0], off, off + bytes);
        off += bytes;
    }
    n += (size_t)snprintf(hdr + n, sizeof hdr - n, "}");
    assert_true(n < sizeof hdr - 1);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    uint64_t len = n;
    fwrite(&len, 8, 1, f);
    fwrite(hdr, 1, n, f);
    for (int i = from; i < to; i++) {
        const htensor *t = &m->t[i];
        fwrite(t->v, 4, (size_t)(t->shape[0] * (t->ndim == 2 ? t->shape[1] : 1)), f);
    }
    fclose(f);
}

static void write_config(const char *dir, const char *config)
{
    mkdir(dir, 0755);
    char path[700];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    fputs(config, f);
    fclose(f);
}

static void write_hf(const hmodel *m, const char *dir, const char *config)
{
    write_config(dir, config);
    char path[700];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    write_st(m, path, 0, m->n);
}

/* m as save_pretrained shards it: `shards` files model-0000i-of-0000k.safetensors of
 * consecutive tensors, and model.safetensors.index.json's weight_map naming each tensor's file. */
static void write_hf_sharded(const hmodel *m, const char *dir, const char *config, int shards)
{
    write_config(dir, config);
    cJSON *idx = cJSON_CreateObject(), *map = cJSON_CreateObject();
    size_t total = 0;
    for (int k = 0; k < shards; k++) {
        int from = m->n * k / shards, to = m->n * (k + 1) / shards;
        char name[64], path[700];
        snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", k + 1, shards);
        snprintf(path, sizeof path, "%s/%s", dir, name);
        write_st(m, path, from, to);
        for (int i = from; i < to; i++) {
            cJSON_AddStringToObject(map, m->t[i].name, name);
            total += (size_t)(m->t[i].shape[0] * (m->t[i].ndim == 2 ? m->t[i].shape[1] : 1)) * 4;
        }
    }
    cJSON *meta = cJSON_AddObjectToObject(idx, "metadata");
    cJSON_AddNumberToObject(meta, "total_size", (double)total);
    cJSON_AddItemToObject(idx, "weight_map", map);
    char *text = cJSON_Print(idx), path[700];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    free(text);
    cJSON_Delete(idx);
}

static void read_hf(hmodel *m, const char *dir)
{
    char path[700];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc((size_t)size);
    assert_int_equal(fread(buf, 1, (size_t)size, f), (size_t)size);
    fclose(f);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | buf[i];
    cJSON *h = cJSON_ParseWithLength((const char *)buf + 8, (size_t)n);
    assert_non_null(h);
    for (cJSON *j = h->child; j; j = j->next) {
        if (strcmp(j->string, "__metadata__") == 0) {
            assert_string_equal(cJSON_GetObjectItem(j, "format")->valuestring, "pt");
            continue;
        }
        const char *dt = cJSON_GetObjectItem(j, "dtype")->valuestring;
        assert_true(strcmp(dt, "F32") == 0 || strcmp(dt, "F16") == 0 || strcmp(dt, "BF16") == 0);
        snprintf(m->dtype, sizeof m->dtype, "%s", dt);
        size_t es = dt[0] == 'F' && dt[1] == '3' ? 4 : 2;
        cJSON *shape = cJSON_GetObjectItem(j, "shape"), *offs = cJSON_GetObjectItem(j, "data_offsets");
        int nd = cJSON_GetArraySize(shape);
        htensor *t = hadd(m, j->string, (int64_t)cJSON_GetArrayItem(shape, 0)->valuedouble,
                          nd == 2 ? (int64_t)cJSON_GetArrayItem(shape, 1)->valuedouble : 0);
        size_t b = (size_t)cJSON_GetArrayItem(offs, 0)->valuedouble, e = (size_t)cJSON_GetArrayItem(offs, 1)->valuedouble;
        size_t cnt = (size_t)(t->shape[0] * (nd == 2 ? t->shape[1] : 1));
        assert_int_equal(e - b, cnt * es);
        const uint8_t *src = buf + 8 + n + b;
        for (size_t k = 0; k < cnt; k++) { /* 16-bit formats decoded from their definitions */
            if (es == 4) {
                memcpy(&t->v[k], src + 4 * k, 4);
                continue;
            }
            unsigned h = src[2 * k] | (unsigned)src[2 * k + 1] << 8;
            if (dt[0] == 'B') { /* bf16: sign, 8-bit exponent (bias 127), 7-bit mantissa */
                int ex = (h >> 7) & 255, mant = h & 127;
                double v = ex == 0 ? ldexp(mant, -133) : ldexp(128 + mant, ex - 134);
                t->v[k] = (float)(h >> 15 ? -v : v);
            } else { /* fp16: 5-bit exponent (bias 15), 10-bit mantissa */
                int ex = (h >> 10) & 31, mant = h & 1023;
                double v = ex == 0 ? ldexp(mant, -24) : ldexp(1024 + mant, ex - 25);
                t->v[k] = (float)(h >> 15 ? -v : v);
            }
        }
    }
    cJSON_Delete(h);
    free(buf);
}

/* DIR/config.json, parsed. */
static cJSON *read_config_json(const char *dir)
{
    char path[700], text[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    cJSON *cfg = cJSON_Parse(text);
    assert_non_null(cfg);
    return cfg;
}

#endif
