/* The JSON-line reader of trident preprocess against cJSON, on one JSONL file: every line
 * through prep_json_extract (src/data/prep_json.c: validates the line, copies the wanted
 * values) and through cJSON_ParseWithLength plus the lookup and copy of the same values (a
 * tree of the whole line). Best of --reps passes over the file in memory, MB/s of input each.
 *
 *   bench/prep_json.sh [--mb 200] [--reps 3] [--key text]
 *
 * Built by bench/prep_json.sh against the core library (see bench/README.md). The figures
 * are quoted at the top of src/data/prep_json.c. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/check.h"
#include "trident/preprocess.h"
#include "trident/timer.h"

typedef struct {
    size_t lines, bytes, out_bytes, failed;
} pass_stats;

/* Every line of buf through prep_json_extract. */
static pass_stats run_scanner(const char *buf, size_t n, const char *key)
{
    pass_stats st = {0};
    prep_str out = {0};
    char err[256];
    for (const char *p = buf, *end = buf + n; p < end;) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
        out.n = 0;
        if (prep_json_extract(p, len, &key, 1, &out, err, sizeof err) == 0) st.out_bytes += out.n;
        else st.failed++;
        st.lines++;
        st.bytes += len + 1;
        p += len + 1;
    }
    prep_str_free(&out);
    return st;
}

/* Every line of buf through cJSON: parse, the key's string, copied out as the scanner does. */
static pass_stats run_cjson(const char *buf, size_t n, const char *key)
{
    pass_stats st = {0};
    size_t cap = 1 << 16;
    char *copy = td_xmalloc(cap);
    for (const char *p = buf, *end = buf + n; p < end;) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
        cJSON *o = cJSON_ParseWithLength(p, len);
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
        if (cJSON_IsObject(o) && cJSON_IsString(v)) {
            size_t k = strlen(v->valuestring);
            if (k + 1 > cap) copy = td_xrealloc(copy, cap = 2 * (k + 1));
            memcpy(copy, v->valuestring, k + 1);
            st.out_bytes += k;
        } else {
            st.failed++;
        }
        cJSON_Delete(o);
        st.lines++;
        st.bytes += len + 1;
        p += len + 1;
    }
    free(copy);
    return st;
}

int main(int argc, char **argv)
{
    const char *path = NULL, *key = "text";
    int reps = 3;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--key") && i + 1 < argc) key = argv[++i];
        else path = argv[i];
    }
    if (!path || reps < 1) {
        fprintf(stderr, "usage: prep_json FILE.jsonl [--reps N] [--key KEY]\n");
        return 2;
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", path);
        return 1;
    }
    fseek(f, 0, SEEK_END);
    size_t n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = td_xmalloc(n + 1);
    if (fread(buf, 1, n, f) != n) {
        fprintf(stderr, "cannot read %s\n", path);
        return 1;
    }
    fclose(f);
    const char *names[2] = {"prep_json_extract", "cJSON"};
    for (int which = 0; which < 2; which++) {
        double best = 1e30;
        pass_stats st = {0};
        for (int r = 0; r < reps; r++) {
            double t0 = td_now();
            st = which == 0 ? run_scanner(buf, n, key) : run_cjson(buf, n, key);
            double t = td_now() - t0;
            if (t < best) best = t;
        }
        printf("%-18s %8.1f MB/s  (best of %d: %.3f s over %.1f MB, %zu lines, %zu refused, %.1f MB of values)\n",
               names[which], (double)n / 1e6 / best, reps, best, (double)n / 1e6, st.lines, st.failed,
               (double)st.out_bytes / 1e6);
    }
    free(buf);
    return 0;
}
