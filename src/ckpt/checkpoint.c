/* Distributed checkpoints, saving and meta.json: see include/ckpt/trident/checkpoint.h and
 * docs/checkpoints.md. Reading and resharding are in reader.c; the shard layout both share
 * (names, kinds, slices and their descriptions) in layout.c.
 *
 * A save, in order (a crash at any point leaves the previous checkpoint and the latest file
 * intact):
 *   1. rank 0 creates DIR/iter_N.tmp (removing stale *.tmp folders of crashed saves);
 *   2. dp rank 0 of each (tp, pp) position writes model_tpT_ppP.safetensors and
 *      optim_tpT_ppP.safetensors there, each fsynced;
 *   3. rank 0 writes meta.json (fsynced), fsyncs the folder and renames it to iter_N (atomically
 *      exchanging it with an older iter_N if there is one), fsyncs DIR;
 *   4. rank 0 replaces latest_checkpointed_iteration.txt (temporary, fsync, rename, fsync DIR);
 *   5. --keep-last prunes. */
#include "trident/checkpoint.h"

#include <dirent.h>
#include <limits.h>
#include <fcntl.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "backend.h"
#include "ckpt_fs.h"
#include "ckpt_impl.h"
#include "trident/check.h"
#include "trident/debug.h"
#include "trident/safetensors.h"
#include "trident/timer.h"

/* ---- writing one shard ---- */

/* Entries of a shard under construction: their data stays in backend memory and is streamed
 * to the file through a small host buffer, the CRC32 of each entry computed on the way. */
typedef struct {
    int n, cap;
    st_entry *e;
    char **names, **meta;
    const float **src;   /* backend memory of each entry */
    ckpt_slice *sl;
    uint32_t *crc;
    int64_t **elems;     /* a piece's element ranges (2 per range), or NULL: the whole slice */
    int *nranges;
    const backend *be;
} out_shard;

/* The entry's __metadata__ value: its slice, or its piece of one. */
static char *entry_json(const out_shard *s, int i, uint32_t crc)
{
    return s->elems[i] ? ckpt_piece_json(&s->sl[i], crc, s->elems[i], s->nranges[i]) : ckpt_slice_json(&s->sl[i], crc);
}

/* Adds an entry holding slice sl of tensor `name`, or with elems (nranges ranges, taken over)
 * only those elements of the slice's buffer, one after another. */
static void shard_add(out_shard *s, const char *name, const ckpt_slice *sl, const float *data, int64_t *elems, int nranges)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 64;
        s->e = td_xrealloc(s->e, (size_t)s->cap * sizeof *s->e);
        s->names = td_xrealloc(s->names, (size_t)s->cap * sizeof *s->names);
        s->meta = td_xrealloc(s->meta, (size_t)s->cap * sizeof *s->meta);
        s->src = td_xrealloc(s->src, (size_t)s->cap * sizeof *s->src);
        s->sl = td_xrealloc(s->sl, (size_t)s->cap * sizeof *s->sl);
        s->crc = td_xrealloc(s->crc, (size_t)s->cap * sizeof *s->crc);
        s->elems = td_xrealloc(s->elems, (size_t)s->cap * sizeof *s->elems);
        s->nranges = td_xrealloc(s->nranges, (size_t)s->cap * sizeof *s->nranges);
    }
    int64_t n0 = sl->shape[0], n1 = sl->ndim == 2 ? sl->shape[1] : 1;
    if (sl->dim == 0) n0 = sl->blocks * sl->len;
    if (sl->dim == 1) n1 = sl->blocks * sl->len;
    st_entry *e = &s->e[s->n];
    memset(e, 0, sizeof *e);
    s->names[s->n] = td_xstrdup(name);
    e->name = s->names[s->n];
    e->dtype = ST_F32;
    e->ndim = sl->ndim;
    e->shape[0] = n0;
    e->shape[1] = n1;
    if (elems) {
        n0 = 0;
        for (int k = 0; k < nranges; k++) n0 += elems[2 * k + 1] - elems[2 * k];
        n1 = 1;
        e->ndim = 1;
        e->shape[0] = n0;
    }
    e->bytes = (size_t)(n0 * n1) * sizeof(float);
    s->src[s->n] = data;
    s->sl[s->n] = *sl;
    s->crc[s->n] = 0;
    s->elems[s->n] = elems;
    s->nranges[s->n] = nranges;
    s->meta[s->n] = entry_json(s, s->n, 0); /* the CRC is filled in once the data is written */
    s->n++;
}

static void shard_read(void *user, int i, size_t off, void *buf, size_t n)
{
    out_shard *s = user;
    be_memcpy(s->be, buf, (const char *)s->src[i] + off, n, BE_D2H);
    s->crc[i] = st_crc32(s->crc[i], buf, n);
}

static void shard_done(void *user)
{
    out_shard *s = user;
    for (int i = 0; i < s->n; i++) {
        char *j = entry_json(s, i, s->crc[i]);
        TD_ASSERT(strlen(j) == strlen(s->meta[i]));
        strcpy(s->meta[i], j);
        free(j);
    }
}

static void shard_free(out_shard *s)
{
    for (int i = 0; i < s->n; i++) {
        free(s->names[i]);
        free(s->meta[i]);
        free(s->elems[i]);
    }
    free(s->elems);
    free(s->nranges);
    free(s->e);
    free(s->names);
    free(s->meta);
    free(s->src);
    free(s->sl);
    free(s->crc);
}

/* The tensors of chunk c this rank writes: not the last stage's copy of the word embedding
 * (the first stage saves it), and replicated tensors from tp rank 0 only; the model from the
 * first rank of dp x cp (the context-parallel ranks hold the same model). */
static int rank_writes(const ckpt_model *m, const gpt_tensor_info *t, int by_dp)
{
    if (t->embedding_copy) return 0;
    if (!by_dp && !t->expert && m->ps->dpcp_rank != 0) return 0; /* expert parallelism: the experts' file */
    if (t->tp_replicated && m->ps->tp_rank != 0) return 0;
    return 1;
}

static void save_delay(void)
{
    long ms = td_debug_get()->save_delay_ms;
    if (ms <= 0) return;
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* What a failed save leaves to fall back on: the checkpoint DIR's latest file names, if any. */
static void describe_previous(char *out, size_t len, const char *dir)
{
    char latest[4200];
    ckf_join(latest, sizeof latest, dir, CKPT_LATEST);
    char *text = ckf_read_text(latest, NULL, 1 << 12);
    char *end = NULL;
    long long it = text ? strtoll(text, &end, 10) : -1;
    if (text && end != text && it >= 0) {
        char prev[4200];
        ckpt_iter_dir(prev, sizeof prev, dir, it);
        snprintf(out, len, "the previous checkpoint %s (iteration %lld) is untouched", prev, it);
    } else {
        snprintf(out, len, "there is no earlier checkpoint in %s to fall back on", dir);
    }
    free(text);
}

/* Ends the job after a save failed with errno `e` before the new checkpoint was renamed into
 * place: removes the partial DIR/iter_N.tmp (a full disk must not stay full), says what is left
 * and what to do. Any writer rank may call it; the others are brought down by the abort. */
static _Noreturn void save_fail(const char *dir, const char *tmp, int e, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static _Noreturn void save_fail(const char *dir, const char *tmp, int e, const char *fmt, ...)
{
    char what[2048], prev[4400], removed[4400] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (ckf_exists(tmp)) {
        int rc = -1;
        for (int k = 0; k < 3 && rc != 0; k++) rc = ckf_remove_tree(tmp); /* other writers may still add files */
        snprintf(removed, sizeof removed, rc == 0 ? "; removed the partial %s" : "; could not remove the partial %s",
                 tmp);
    }
    describe_previous(prev, sizeof prev, dir);
    if (e == ENOSPC || e == EDQUOT)
        td_fatal(1, "saving the checkpoint into %s failed: %s%s; %s. Free space on its file system (df %s) or save "
                 "elsewhere", dir, what, removed, prev, dir);
    td_fatal(1, "saving the checkpoint into %s failed: %s%s; %s. Check that %s is writable and its file system healthy",
             dir, what, removed, prev, dir);
}

static int fsync_file(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    errno = e;
    return rc;
}

/* Writes this rank's model shard (optimizer = 0) or optimizer shard (1) into folder tmp.
 * Returns its size in bytes. */
/* The part of tensor t in chunk c's shard (m->shard_ranges): its element ranges within t and
 * where they start in the shard (contiguous there: a tensor's pieces of consecutive buckets
 * are). Returns the number of ranges (0: none of t is here); *elems is malloc'd. */
static int shard_part(const ckpt_model *m, int c, const gpt_tensor_info *t, int64_t **elems, size_t *at)
{
    int n = 0;
    size_t next = 0;
    *elems = NULL;
    for (int k = 0; k < m->nshard_ranges[c]; k++) {
        const dp_range *r = &m->shard_ranges[c][k];
        size_t lo = t->offset > r->lo ? t->offset : r->lo;
        size_t hi = t->offset + t->numel < r->lo + r->n ? t->offset + t->numel : r->lo + r->n;
        if (lo >= hi) continue;
        size_t s = r->shard + (lo - r->lo);
        if (n == 0) *at = s;
        TD_ASSERT(n == 0 || s == next);
        next = s + (hi - lo);
        *elems = td_xrealloc(*elems, (size_t)(n + 1) * 2 * sizeof(int64_t));
        (*elems)[2 * n] = (int64_t)(lo - t->offset);
        (*elems)[2 * n + 1] = (int64_t)(hi - t->offset);
        n++;
    }
    return n;
}

static uint64_t write_shard(const char *dir, const char *tmp, const ckpt_model *m, const ckpt_progress *p,
                            int optimizer)
{
    const ps_state *ps = m->ps;
    int by_dp = optimizer && m->shard_ranges; /* this data-parallel rank's shard of the moments */
    out_shard s = {0};
    s.be = m->chunks[0]->be;
    for (int c = 0; c < m->nchunks; c++) {
        const gpt_model *g = m->chunks[c];
        for (int b = 0; b < (optimizer ? 2 : 1); b++) {
            const float *base = optimizer ? (b == 0 ? m->adam_m[c] : m->adam_v[c]) : g->params;
            for (int i = 0; i < g->ntensors; i++) {
                const gpt_tensor_info *t = &g->table[i];
                if (!rank_writes(m, t, by_dp) || (optimizer && t->frozen)) continue;
                char name[96];
                snprintf(name, sizeof name, "%s%s",
                         optimizer ? ckpt_kind_prefix(b ? CKPT_EXP_AVG_SQ : CKPT_EXP_AVG) : "", t->name);
                ckpt_slice sl = ckpt_slice_of(t);
                if (!by_dp) {
                    shard_add(&s, name, &sl, base + t->offset, NULL, 0);
                    continue;
                }
                int64_t *elems;
                size_t at = 0;
                int n = shard_part(m, c, t, &elems, &at);
                if (n) shard_add(&s, name, &sl, base + at, elems, n);
            }
        }
    }
    char tp_s[16], pp_s[16], dp_s[16], ep_s[16], ver[16], it_s[32];
    snprintf(ep_s, sizeof ep_s, "%d", ps->ep_rank);
    snprintf(it_s, sizeof it_s, "%lld", (long long)p->iteration);
    snprintf(tp_s, sizeof tp_s, "%d", ps->tp_rank);
    snprintf(pp_s, sizeof pp_s, "%d", ps->pp_rank);
    snprintf(dp_s, sizeof dp_s, "%d", ps->dpcp_rank); /* the distributed optimizer's shard: of dp x cp */
    snprintf(ver, sizeof ver, "%d", m->shard_ranges ? 2 : 1);
    int nmeta = 0, has_id = p->run_id[0] != 0, cap = 8 + s.n; /* 8: the shard's own keys at most */
    const char **keys = td_xmalloc((size_t)cap * sizeof(char *)), **vals = td_xmalloc((size_t)cap * sizeof(char *));
    keys[nmeta] = "format", vals[nmeta++] = "trident";
    keys[nmeta] = "format_version", vals[nmeta++] = ver;
    keys[nmeta] = "kind", vals[nmeta++] = optimizer ? "optimizer" : "model";
    keys[nmeta] = "tp_rank", vals[nmeta++] = tp_s;
    keys[nmeta] = "pp_rank", vals[nmeta++] = pp_s;
    if (by_dp) keys[nmeta] = "dp_rank", vals[nmeta++] = dp_s;
    else if (ps->ep_rank > 0) keys[nmeta] = "ep_rank", vals[nmeta++] = ep_s;
    keys[nmeta] = "iteration", vals[nmeta++] = it_s; /* which save of which run: checked against meta.json */
    if (has_id) keys[nmeta] = "run_id", vals[nmeta++] = p->run_id;
    for (int i = 0; i < s.n; i++) keys[nmeta] = s.names[i], vals[nmeta++] = s.meta[i];
    TD_ASSERT(nmeta <= cap);

    char fname[64], path[4200], err[1024];
    if (by_dp) ckpt_dp_shard_name(fname, sizeof fname, ps->tp_rank, ps->pp_rank, ps->dpcp_rank);
    else if (ps->ep_rank > 0) ckpt_ep_shard_name(fname, sizeof fname, optimizer, ps->tp_rank, ps->pp_rank, ps->ep_rank);
    else ckpt_shard_name(fname, sizeof fname, optimizer, ps->tp_rank, ps->pp_rank);
    ckf_join(path, sizeof path, tmp, fname);
    double t0 = td_now();
    st_source src = {shard_read, shard_done, &s};
    if (st_write_stream(path, s.e, s.n, keys, vals, nmeta, &src, 0, err, sizeof err))
        save_fail(dir, tmp, errno, "%s", err);
    double t1 = td_now();
    if (fsync_file(path) != 0) save_fail(dir, tmp, errno, "cannot fsync %s: %s", path, td_strerror(errno));
    TD_DEBUG("%s: written in %.2f s, fsynced in %.2f s", fname, t1 - t0, td_now() - t1);
    struct stat sb;
    uint64_t bytes = stat(path, &sb) == 0 ? (uint64_t)sb.st_size : 0;
    free(keys);
    free(vals);
    shard_free(&s);
    return bytes;
}

void ckpt_new_run_id(char out[CKPT_RUN_ID_LEN + 1])
{
    uint64_t x;
    if (getrandom(&x, sizeof x, 0) != (ssize_t)sizeof x) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        x = ((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec) ^ ((uint64_t)getpid() << 40);
    }
    snprintf(out, CKPT_RUN_ID_LEN + 1, "%016llx", (unsigned long long)x);
}

/* ---- meta.json ---- */

double ckpt_float_value(float f)
{
    char buf[32];
    for (int digits = 1; digits < 10; digits++) {
        snprintf(buf, sizeof buf, "%.*g", digits, (double)f);
        if (strtof(buf, NULL) == f) break;
    }
    return strtod(buf, NULL);
}

static cJSON *meta_json(const ckpt_model *m, const ckpt_progress *p, const char *args_json, const char *dir,
                        const char *tmp)
{
    const ps_state *ps = m->ps;
    gpt_config cn = m->chunks[0]->cfg, *c = &cn;
    gpt_config_resolve(&cn); /* defaults written as what they mean (kv_channels h / n, not 0); read back normalized */
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "format", "trident-checkpoint");
    cJSON_AddNumberToObject(o, "format_version", m->shard_ranges ? 2 : 1); /* 1: readable by older trident */
    cJSON_AddStringToObject(o, "trident_version", TRIDENT_VERSION);
    cJSON_AddNumberToObject(o, "iteration", (double)p->iteration);
    if (p->run_id[0]) cJSON_AddStringToObject(o, "run_id", p->run_id);
    cJSON_AddNumberToObject(o, "consumed_train_samples", (double)p->consumed_train);
    cJSON_AddNumberToObject(o, "consumed_valid_samples", (double)p->consumed_valid);
    if (p->skipped) cJSON_AddNumberToObject(o, "skipped_iterations", (double)p->skipped);
    if (p->has_loss_scale) {
        cJSON *ls = cJSON_AddObjectToObject(o, "loss_scale");
        cJSON_AddNumberToObject(ls, "scale", p->loss_scale);
        cJSON_AddNumberToObject(ls, "growth_tracker", (double)p->growth_tracker);
        cJSON_AddNumberToObject(ls, "hysteresis_tracker", p->hysteresis_tracker);
    }
    cJSON *rng = cJSON_AddObjectToObject(o, "rng");
    cJSON_AddStringToObject(rng, "generator", "philox4x32-10, counter-based");
    char seed[32];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)p->seed);
    cJSON_AddStringToObject(rng, "seed", seed);
    cJSON_AddStringToObject(rng, "note",
                            "init is keyed by (seed, tensor, element), dropout by (seed, sample, site, position, "
                            "unit), data order by (seed, consumed samples): the seed and the consumed samples are "
                            "the whole random state");
    cJSON *lay = cJSON_AddObjectToObject(o, "layout");
    cJSON_AddNumberToObject(lay, "tensor_model_parallel_size", ps->tp);
    cJSON_AddNumberToObject(lay, "pipeline_model_parallel_size", ps->pp);
    cJSON_AddNumberToObject(lay, "data_parallel_size", ps->dp);
    if (ps->cp > 1) cJSON_AddNumberToObject(lay, "context_parallel_size", ps->cp); /* a run setting: any C loads it */
    if (ps->ep > 1) cJSON_AddNumberToObject(lay, "expert_model_parallel_size", ps->ep);
    cJSON_AddNumberToObject(lay, "virtual_pipeline_stages", m->nchunks);
    cJSON_AddNumberToObject(lay, "world_size", ps->world_size);
    cJSON *mod = cJSON_AddObjectToObject(o, "model");
    cJSON_AddStringToObject(mod, "architecture", c->norm == GPT_NORM_RMSNORM ? "llama" : "gpt2"); /* informative */
    for (int k = 0; k < GPT_NCONFIG_KEYS; k++) {
        const gpt_config_key *key = &GPT_CONFIG_KEYS[k];
        double v = gpt_config_get(c, key);
        if (key->choices) {
            char name[64];
            gpt_config_value_str(c, key, name, sizeof name);
            cJSON_AddStringToObject(mod, key->key, name);
        } else {
            cJSON_AddNumberToObject(mod, key->key, key->is_float ? ckpt_float_value((float)v) : v);
        }
    }
    if (gpt_moe(c) && c->num_layers > GPT_MOE_LIST_MAX_LAYERS) { /* longer than a list is read: its integer */
        cJSON_AddNumberToObject(mod, "moe_layer_freq", c->moe_layer_freq > 0 ? c->moe_layer_freq : 1);
    } else if (gpt_moe(c)) { /* Megatron's moe_layer_freq as the list it resolves to: 1 a MoE layer, 0 a dense one */
        cJSON *freq = cJSON_AddArrayToObject(mod, "moe_layer_freq");
        for (int l = 0; l < c->num_layers; l++) cJSON_AddItemToArray(freq, cJSON_CreateNumber(gpt_moe_layer(c, l)));
    }
    if (m->adam_m) {
        cJSON *opt = cJSON_AddObjectToObject(o, "optimizer");
        cJSON_AddStringToObject(opt, "type", "adamw");
        cJSON_AddNumberToObject(opt, "step", (double)p->iteration);
        cJSON_AddStringToObject(opt, "state", m->shard_ranges ? "exp_avg and exp_avg_sq per parameter, each data-parallel "
                                "rank's part in its own shard (optim_*_dp* shards, distributed optimizer)"
                                : "exp_avg and exp_avg_sq per parameter (optim_* shards)");
    } else {
        cJSON_AddNullToObject(o, "optimizer");
    }
    cJSON *files = cJSON_AddArrayToObject(o, "files");
    for (int opt = 0; opt <= (m->adam_m ? 1 : 0); opt++)
        for (int pr = 0; pr < ps->pp; pr++)
            for (int tr = 0; tr < ps->tp; tr++)
                for (int dr = 0; dr < (opt && m->shard_ranges ? ps->dpcp : ps->ep); dr++) {
                /* dr: the dp x cp rank of a distributed optimizer's shard, else the expert-parallel rank */
                char name[64], path[4200];
                if (opt && m->shard_ranges) ckpt_dp_shard_name(name, sizeof name, tr, pr, dr);
                else if (dr > 0) ckpt_ep_shard_name(name, sizeof name, opt, tr, pr, dr);
                else ckpt_shard_name(name, sizeof name, opt, tr, pr);
                ckf_join(path, sizeof path, tmp, name);
                struct stat sb;
                if (stat(path, &sb) != 0)
                    save_fail(dir, tmp, errno, "shard %s was not written: %s", path, td_strerror(errno));
                cJSON *f = cJSON_CreateObject();
                cJSON_AddStringToObject(f, "name", name);
                cJSON_AddStringToObject(f, "kind", opt ? "optimizer" : "model");
                cJSON_AddNumberToObject(f, "tp_rank", tr);
                cJSON_AddNumberToObject(f, "pp_rank", pr);
                if (opt && m->shard_ranges) cJSON_AddNumberToObject(f, "dp_rank", dr);
                else if (dr > 0) cJSON_AddNumberToObject(f, "ep_rank", dr);
                cJSON_AddNumberToObject(f, "bytes", (double)sb.st_size);
                cJSON_AddItemToArray(files, f);
            }
    cJSON *args = args_json ? cJSON_Parse(args_json) : NULL;
    cJSON_AddItemToObject(o, "args", args ? args : cJSON_CreateObject());
    return o;
}

/* The iteration an iter_NNNNNNN folder's name says (the last path component), or -1. */
static int64_t iter_of_name(const char *path)
{
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--;
    size_t b = n;
    while (b > 0 && path[b - 1] != '/') b--;
    if (n - b < 6 || strncmp(path + b, "iter_", 5) != 0) return -1;
    int64_t v = 0;
    for (size_t i = b + 5; i < n; i++) {
        if (path[i] < '0' || path[i] > '9' || v > (INT64_MAX - 9) / 10) return -1;
        v = v * 10 + (path[i] - '0');
    }
    return v;
}

/* The iterations of the checkpoint folders (iter_NNNNNNN, not *.tmp or *.old) in dir, newest
 * first. Returns how many; *its is malloc'd (NULL when none). */
static int list_iters(const char *dir, int64_t **its)
{
    *its = NULL;
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        int64_t v = iter_of_name(e->d_name);
        char path[4400];
        ckf_join(path, sizeof path, dir, e->d_name);
        if (v < 0 || !ckf_is_dir(path)) continue;
        *its = td_xrealloc(*its, (size_t)(n + 1) * sizeof **its);
        (*its)[n++] = v;
    }
    closedir(d);
    for (int i = 0; i < n; i++)
        for (int k = i + 1; k < n; k++)
            if ((*its)[k] > (*its)[i]) {
                int64_t t = (*its)[i];
                (*its)[i] = (*its)[k];
                (*its)[k] = t;
            }
    return n;
}

/* Removes all but the keep_last newest checkpoints with iteration <= `iteration`. */
static void prune(const char *dir, int64_t iteration, int keep_last)
{
    int64_t *its;
    int n = list_iters(dir, &its), kept = 0;
    for (int i = 0; i < n; i++) { /* newest first */
        if (its[i] > iteration || kept++ < keep_last) continue;
        char path[4200];
        ckpt_iter_dir(path, sizeof path, dir, its[i]);
        if (ckf_remove_tree(path) != 0) td_warn("--keep-last: cannot remove %s: %s; remove it by hand", path, td_strerror(errno));
        else TD_INFO("removed old checkpoint %s (--keep-last %d)", path, keep_last);
    }
    free(its);
}

/* Removes DIR/iter_*.tmp folders left by saves that crashed. */
static void remove_stale(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));) {
        size_t n = strlen(e->d_name);
        if (strncmp(e->d_name, "iter_", 5) != 0 || n < 4 || strcmp(e->d_name + n - 4, ".tmp") != 0) continue;
        char path[4200];
        ckf_join(path, sizeof path, dir, e->d_name);
        TD_INFO("removing %s, left by an interrupted save", path);
        if (ckf_remove_tree(path) != 0)
            td_fatal(1, "--save: cannot remove %s, left by an interrupted save: %s; remove it by hand", path,
                     td_strerror(errno));
    }
    closedir(d);
}

static void commit(const char *dir, const char *tmp, const char *final, const ckpt_model *m, const ckpt_progress *p,
                   const char *args_json)
{
    cJSON *meta = meta_json(m, p, args_json, dir, tmp);
    char *text = cJSON_Print(meta);
    cJSON_Delete(meta);
    char path[4200];
    ckf_join(path, sizeof path, tmp, "meta.json");
    size_t n = strlen(text);
    text = td_xrealloc(text, n + 2);
    text[n++] = '\n';
    if (ckf_write_atomic(path, text, n) != 0)
        save_fail(dir, tmp, errno, "cannot write %s: %s", path, td_strerror(errno));
    free(text);
    if (ckf_fsync_dir(tmp) != 0) save_fail(dir, tmp, errno, "cannot fsync %s: %s", tmp, td_strerror(errno));
    save_delay();
    if (ckf_is_dir(final)) {
        /* an older save of this iteration: swap atomically, then remove the old one */
        if (renameat2(AT_FDCWD, tmp, AT_FDCWD, final, RENAME_EXCHANGE) == 0) {
            if (ckf_remove_tree(tmp) != 0) td_warn("cannot remove the replaced %s: %s", tmp, td_strerror(errno));
        } else if (errno == EINVAL || errno == ENOSYS || errno == ENOTSUP) {
            /* no atomic exchange on this file system: move the old one aside first (a crash in
             * between leaves latest naming a missing folder; the .old copy is intact) */
            char old[4400];
            snprintf(old, sizeof old, "%s.old", final);
            if (ckf_remove_tree(old) != 0 || rename(final, old) != 0 || rename(tmp, final) != 0)
                td_fatal(1, "saving the checkpoint: cannot replace %s: %s", final, td_strerror(errno));
            if (ckf_remove_tree(old) != 0) td_warn("cannot remove the replaced %s: %s", old, td_strerror(errno));
        } else {
            save_fail(dir, tmp, errno, "cannot replace %s: %s", final, td_strerror(errno));
        }
    } else if (rename(tmp, final) != 0) {
        save_fail(dir, tmp, errno, "cannot rename %s to %s: %s", tmp, final, td_strerror(errno));
    }
    if (ckf_fsync_dir(dir) != 0)
        td_fatal(1, "saving the checkpoint: %s is in place but fsync of %s failed: %s; %s still names the previous "
                 "checkpoint: check the file system before trusting %s", final, dir, td_strerror(errno), CKPT_LATEST,
                 final);
    char latest[4200], it[32];
    ckf_join(latest, sizeof latest, dir, CKPT_LATEST);
    int k = snprintf(it, sizeof it, "%lld\n", (long long)p->iteration);
    if (ckf_write_atomic(latest, it, (size_t)k) != 0)
        td_fatal(1, "saving the checkpoint: %s is complete but %s could not be updated (%s) and still names the "
                 "previous checkpoint: free space (df %s), then load %s explicitly or fix %s", final, latest,
                 td_strerror(errno), dir, final, CKPT_LATEST);
}

void ckpt_save(const char *dir, const ckpt_model *m, const ckpt_progress *p, const char *args_json, int keep_last,
               ckpt_save_stats *stats)
{
    const ps_state *ps = m->ps;
    double t0 = td_now();
    char final[4200], tmp[4300];
    ckpt_iter_dir(final, sizeof final, dir, p->iteration);
    snprintf(tmp, sizeof tmp, "%s.tmp", final);
    if (ps->world_rank == 0) {
        if (ckf_mkdirs(dir) != 0) td_fatal(1, "--save %s: cannot create the folder: %s", dir, td_strerror(errno));
        remove_stale(dir);
        if (mkdir(tmp, 0755) != 0) save_fail(dir, tmp, errno, "cannot create %s: %s", tmp, td_strerror(errno));
    }
    comm_barrier(ps->world);
    int64_t bytes = 0;
    int writer = ps->edp_rank == 0; /* the first of the ranks holding the same experts (dp x cp rank 0 without) */
    if (writer) {
        bytes += (int64_t)write_shard(dir, tmp, m, p, 0);
        save_delay();
    }
    if (m->adam_m && (writer || m->shard_ranges)) {
        bytes += (int64_t)write_shard(dir, tmp, m, p, 1);
        save_delay();
    }
    comm_allreduce(ps->world, &bytes, 1, COMM_I64, COMM_SUM); /* every shard is on disk */
    if (ps->world_rank == 0) {
        commit(dir, tmp, final, m, p, args_json);
        if (keep_last > 0) prune(dir, p->iteration, keep_last);
    }
    comm_barrier(ps->world);
    if (stats) {
        stats->seconds = td_now() - t0;
        stats->bytes = (uint64_t)bytes;
    }
}

/* ---- finding and reading meta.json ---- */

#undef FAIL
#define FAIL(...)                                                                        \
    do {                                                                                 \
        snprintf(err, errlen, __VA_ARGS__);                                              \
        goto fail;                                                                       \
    } while (0)

static int get_num(const cJSON *o, const char *key, double *v)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(j)) return -1;
    *v = j->valuedouble;
    return 0;
}

static int get_int(const cJSON *o, const char *key, int64_t *v)
{
    double d;
    if (get_num(o, key, &d) || d != floor(d) || fabs(d) > 9007199254740992.0) return -1;
    *v = (int64_t)d;
    return 0;
}

/* model.moe_layer_freq (absent: every layer MoE; an integer, or the list of 0 and 1 Megatron's
 * resolves to, one a layer) into c, whose num_layers is read. 0, or -1 with msg. */
static int read_moe_layer_freq(const cJSON *mod, gpt_config *c, const char *mpath, char *msg, size_t msglen)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(mod, "moe_layer_freq");
    if (!j || c->num_experts == 0) return 0;
    char text[8 * GPT_MOE_LIST_MAX_LAYERS + 8], why[256];
    size_t at = 0;
    if (cJSON_IsNumber(j) && j->valuedouble == floor(j->valuedouble) && j->valuedouble >= 1 && j->valuedouble <= 1 << 30) {
        snprintf(text, sizeof text, "%.0f", j->valuedouble);
    } else if (cJSON_IsArray(j) && cJSON_GetArraySize(j) <= GPT_MOE_LIST_MAX_LAYERS) {
        for (const cJSON *e = j->child; e; e = e->next) {
            if (!cJSON_IsNumber(e) || (e->valuedouble != 0 && e->valuedouble != 1)) goto bad;
            at += (size_t)snprintf(text + at, sizeof text - at, "%s%d", at ? "," : "[", (int)e->valuedouble);
        }
        snprintf(text + at, sizeof text - at, "%s", at ? "]" : "[]");
    } else {
        goto bad;
    }
    if (gpt_moe_layer_freq_parse(c, text, c->num_layers, why, sizeof why) == 0) return 0;
bad:
    snprintf(msg, msglen, "%s: model.moe_layer_freq is not an integer >= 1 nor a list of 0 and 1 with a 1, one a layer "
             "of model.num_layers %d: the checkpoint is corrupt", mpath, c->num_layers);
    return -1;
}

static int same_folder(const char *a, const char *b)
{
    char ra[PATH_MAX], rb[PATH_MAX];
    return realpath(a, ra) && realpath(b, rb) && strcmp(ra, rb) == 0;
}

int ckpt_check_save_dir(const char *dir, int64_t start, const char *loaded, char *err, size_t errlen)
{
    int64_t *its;
    int n = list_iters(dir, &its), rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        char path[4200];
        ckpt_iter_dir(path, sizeof path, dir, its[i]);
        if (its[i] < start || (its[i] == start && loaded && same_folder(path, loaded))) continue;
        if (loaded)
            snprintf(err, errlen, "--save %s already holds %s, which this run did not load (it continues from %s at "
                     "iteration %lld): its saves would replace or outdate it. Move it away, save elsewhere, or load "
                     "it", dir, path, loaded, (long long)start);
        else
            snprintf(err, errlen, "--save %s already holds %s and this run starts from scratch: its saves would "
                     "replace it. Load it with --load %s, move it away, or save elsewhere", dir, path, dir);
        rc = -1;
    }
    free(its);
    return rc;
}

/* Reads and checks the meta.json of the iteration folder iter_dir, and every shard header
 * against it (see ckpt_find). */
static int read_meta(const char *iter_dir, ckpt_meta *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    cJSON *root = NULL;
    char *text = NULL;
    char mpath[4200];
    ckf_join(mpath, sizeof mpath, iter_dir, "meta.json");
    size_t len;
    text = ckf_read_text(mpath, &len, (size_t)1 << 26);
    if (!text) FAIL("cannot read %s: %s", mpath, td_strerror(errno));
    root = cJSON_ParseWithLength(text, len);
    if (!root || !cJSON_IsObject(root)) FAIL("%s is not valid JSON: the checkpoint is corrupt", mpath);
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, "trident-checkpoint") != 0)
        FAIL("%s is not a trident checkpoint's meta.json (no \"format\": \"trident-checkpoint\")", mpath);
    int64_t v;
    if (get_int(root, "format_version", &v)) FAIL("%s: format_version is missing", mpath);
    const cJSON *tv = cJSON_GetObjectItemCaseSensitive(root, "trident_version");
    out->version = td_xstrdup(cJSON_IsString(tv) ? tv->valuestring : "?");
    if (v > CKPT_FORMAT_VERSION || v < 1)
        FAIL("%s has checkpoint format version %lld (written by trident %s); this trident %s reads versions up to "
             "%d: use a newer trident", mpath, (long long)v, out->version, TRIDENT_VERSION, CKPT_FORMAT_VERSION);
    out->format_version = (int)v;
    out->dir = td_xstrdup(iter_dir);
    if (get_int(root, "iteration", &out->progress.iteration) ||
        get_int(root, "consumed_train_samples", &out->progress.consumed_train) ||
        get_int(root, "consumed_valid_samples", &out->progress.consumed_valid))
        FAIL("%s: iteration or consumed samples missing", mpath);
    if (get_int(root, "skipped_iterations", &out->progress.skipped)) out->progress.skipped = 0;
    if (out->progress.skipped < 0 || out->progress.skipped > out->progress.iteration)
        FAIL("%s: skipped_iterations %lld is not in [0, iteration]", mpath, (long long)out->progress.skipped);
    const cJSON *ls = cJSON_GetObjectItemCaseSensitive(root, "loss_scale");
    if (ls) {
        int64_t ht;
        if (get_num(ls, "scale", &out->progress.loss_scale) || !(out->progress.loss_scale > 0) ||
            get_int(ls, "growth_tracker", &out->progress.growth_tracker) || get_int(ls, "hysteresis_tracker", &ht))
            FAIL("%s: loss_scale needs a positive scale, growth_tracker and hysteresis_tracker", mpath);
        out->progress.hysteresis_tracker = (int)ht;
        out->progress.has_loss_scale = 1;
    }
    const cJSON *rng = cJSON_GetObjectItemCaseSensitive(root, "rng");
    const cJSON *seed = rng ? cJSON_GetObjectItemCaseSensitive(rng, "seed") : NULL;
    if (!cJSON_IsString(seed)) FAIL("%s: rng.seed is missing", mpath);
    out->progress.seed = strtoull(seed->valuestring, NULL, 10);
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(root, "run_id"); /* absent before run ids */
    if (id && (!cJSON_IsString(id) || !id->valuestring[0] || strlen(id->valuestring) > CKPT_RUN_ID_LEN))
        FAIL("%s: run_id is not a string of 1 to %d characters: the checkpoint is corrupt", mpath, CKPT_RUN_ID_LEN);
    if (id) strcpy(out->progress.run_id, id->valuestring);
    int64_t named = iter_of_name(iter_dir);
    if (named >= 0 && named != out->progress.iteration)
        FAIL("%s: iteration is %lld but the folder is iter_%07lld: meta.json was edited or the folder renamed; "
             "restore one to match the other", mpath, (long long)out->progress.iteration, (long long)named);

    const cJSON *lay = cJSON_GetObjectItemCaseSensitive(root, "layout");
    int64_t tp, pp, dp, vp;
    if (!lay || get_int(lay, "tensor_model_parallel_size", &tp) || get_int(lay, "pipeline_model_parallel_size", &pp) ||
        get_int(lay, "data_parallel_size", &dp) || get_int(lay, "virtual_pipeline_stages", &vp) || tp < 1 || pp < 1 ||
        dp < 1 || vp < 1 || tp > 65536 || pp > 65536)
        FAIL("%s: the layout is missing or malformed", mpath);
    out->tp = (int)tp, out->pp = (int)pp, out->dp = (int)dp, out->vp = (int)vp;
    int64_t cp = 1;
    if (cJSON_GetObjectItemCaseSensitive(lay, "context_parallel_size") &&
        (get_int(lay, "context_parallel_size", &cp) || cp < 1 || cp > 65536))
        FAIL("%s: the layout's context_parallel_size is malformed", mpath);
    out->cp = (int)cp;
    int64_t ep = 1;
    if (cJSON_GetObjectItemCaseSensitive(lay, "expert_model_parallel_size") &&
        (get_int(lay, "expert_model_parallel_size", &ep) || ep < 1 || (dp * cp) % ep))
        FAIL("%s: the layout's expert_model_parallel_size is malformed (a divisor of data_parallel_size %lld x "
             "context_parallel_size %lld)", mpath, (long long)dp, (long long)cp);
    out->ep = (int)ep;

    const cJSON *mod = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!cJSON_IsObject(mod)) FAIL("%s: the model section is missing", mpath);
    gpt_config *c = &out->model;
    for (int k = 0; k < GPT_NCONFIG_KEYS; k++) {
        const gpt_config_key *key = &GPT_CONFIG_KEYS[k];
        const cJSON *j = cJSON_GetObjectItemCaseSensitive(mod, key->key);
        double x = 0;
        if (!j && key->lo <= 0) continue; /* a setting older checkpoints lack: GPT-2's (0) */
        if (key->choices) {
            int idx = 0, found = 0;
            const char *s = key->choices;
            for (; s && cJSON_IsString(j); idx++, s = strchr(s, '|') ? strchr(s, '|') + 1 : NULL)
                if (strlen(j->valuestring) == strcspn(s, "|") && strncmp(s, j->valuestring, strcspn(s, "|")) == 0) {
                    found = 1;
                    break;
                }
            if (!found) FAIL("%s: model.%s is missing or not one of %s: the checkpoint is corrupt", mpath, key->key,
                             key->choices);
            x = idx;
        } else if (get_num(mod, key->key, &x) || x < key->lo || x > key->hi || (!key->is_float && x != floor(x))) {
            FAIL("%s: model.%s is missing or not a%s number in [%g, %g]: the checkpoint is corrupt", mpath, key->key,
                 key->is_float ? "" : "n integer", key->lo, key->hi);
        }
        gpt_config_set(c, key, x);
    }
    /* before issue 33 the activation was one switch, "swiglu": SiLU, gated */
    const cJSON *sw = cJSON_GetObjectItemCaseSensitive(mod, "swiglu");
    if (sw && !cJSON_GetObjectItemCaseSensitive(mod, "activation_func")) {
        double x;
        if (get_num(mod, "swiglu", &x) || (x != 0 && x != 1))
            FAIL("%s: model.swiglu is not 0 or 1: the checkpoint is corrupt", mpath);
        if (x == 1) c->act = TD_ACT_SILU, c->glu = 1;
    }
    if (read_moe_layer_freq(mod, c, mpath, err, errlen)) goto fail;
    gpt_config_normalize(c); /* resolved defaults (written since issue 21) read as the 0 older files hold */
    if (c->padded_vocab < c->vocab)
        FAIL("%s: model.padded_vocab_size %d is smaller than model.vocab_size %d: the checkpoint is corrupt", mpath,
             c->padded_vocab, c->vocab);
    if (!c->kv_channels && c->hidden % c->heads)
        FAIL("%s: model.hidden_size %d is not divisible by model.num_attention_heads %d: the checkpoint is corrupt",
             mpath, c->hidden, c->heads);
    if (c->heads % gpt_groups(c))
        FAIL("%s: model.num_attention_heads %d is not divisible by model.num_query_groups %d: the checkpoint is "
             "corrupt", mpath, c->heads, gpt_groups(c));
    c->seed = out->progress.seed;
    const cJSON *optim = cJSON_GetObjectItemCaseSensitive(root, "optimizer");
    out->has_optimizer = cJSON_IsObject(optim);
    int64_t step;
    if (out->has_optimizer && (get_int(optim, "step", &step) || step != out->progress.iteration))
        FAIL("%s: optimizer.step is %s but iteration is %lld (the Adam step count is the iteration): the "
             "checkpoint is corrupt", mpath, get_int(optim, "step", &step) ? "missing" : "different",
             (long long)out->progress.iteration);

    const cJSON *files = cJSON_GetObjectItemCaseSensitive(root, "files");
    if (!cJSON_IsArray(files)) FAIL("%s: the file list is missing", mpath);
    out->nfiles = cJSON_GetArraySize(files);
    out->files = td_xcalloc((size_t)(out->nfiles ? out->nfiles : 1), sizeof *out->files);
    int counts[2] = {0, 0}, i = 0, by_dp = 0;
    for (const cJSON *j = files->child; j; j = j->next, i++) {
        ckpt_file *fl = &out->files[i];
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(j, "name"), *kd = cJSON_GetObjectItemCaseSensitive(j, "kind");
        int64_t tr, pr, bytes;
        if (!cJSON_IsString(nm) || !cJSON_IsString(kd) || get_int(j, "tp_rank", &tr) || get_int(j, "pp_rank", &pr) ||
            get_int(j, "bytes", &bytes) || strchr(nm->valuestring, '/') || !nm->valuestring[0])
            FAIL("%s: file entry %d is malformed", mpath, i);
        fl->name = td_xstrdup(nm->valuestring);
        fl->optimizer = strcmp(kd->valuestring, "optimizer") == 0;
        fl->tp_rank = (int)tr, fl->pp_rank = (int)pr, fl->bytes = (uint64_t)bytes;
        int64_t dr = -1;
        if (cJSON_GetObjectItemCaseSensitive(j, "dp_rank") && (get_int(j, "dp_rank", &dr) || !fl->optimizer || dr < 0))
            FAIL("%s: file entry %d has a malformed dp_rank", mpath, i);
        fl->dp_rank = (int)dr;
        int64_t er = 0;
        if (cJSON_GetObjectItemCaseSensitive(j, "ep_rank") && (get_int(j, "ep_rank", &er) || dr >= 0 || er < 1 || er >= out->ep))
            FAIL("%s: file entry %d has a malformed ep_rank", mpath, i);
        fl->ep_rank = (int)er;
        by_dp += dr >= 0;
        counts[fl->optimizer]++;
    }
    /* optimizer shards: one per model-parallel position, or (distributed optimizer) per rank of
     * dp x cp */
    int optim_want = out->tp * out->pp * (by_dp ? out->dp * out->cp : out->ep);
    if (counts[0] != out->tp * out->pp * out->ep || (out->has_optimizer && counts[1] != optim_want) ||
        (by_dp && by_dp != counts[1]))
        FAIL("%s lists %d model and %d optimizer shards (%d of them per data-parallel rank); a %d x %d x dp %d (ep %d, "
             "cp %d) layout has %d model and %d optimizer shards: the checkpoint is corrupt", mpath, counts[0], counts[1],
             by_dp, out->tp, out->pp, out->dp, out->ep, out->cp, out->tp * out->pp * out->ep, optim_want);
    for (i = 0; i < out->nfiles; i++) {
        char fpath[4400];
        ckf_join(fpath, sizeof fpath, iter_dir, out->files[i].name);
        struct stat sb;
        if (stat(fpath, &sb) != 0)
            FAIL("%s is missing (%s lists it): the checkpoint is incomplete", fpath, mpath);
        if ((uint64_t)sb.st_size != out->files[i].bytes)
            FAIL("%s has %lld bytes but %s records %llu: the shard is truncated or corrupt", fpath,
                 (long long)sb.st_size, mpath, (unsigned long long)out->files[i].bytes);
    }
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(root, "args");
    out->args_json = args ? cJSON_PrintUnformatted(args) : td_xstrdup("{}");
    cJSON_Delete(root);
    root = NULL;
    free(text);
    text = NULL;
    ckpt_reader *r = ckpt_reader_open(out, err, errlen); /* every shard's tensors against the model config */
    if (!r) goto fail;
    ckpt_reader_close(r);
    return 0;
fail:
    cJSON_Delete(root);
    free(text);
    ckpt_meta_free(out);
    return -1;
}


/* Opens iteration folder iter_dir as read_meta does and checks the CRC32 of every entry. */
static int read_verified(const char *iter_dir, ckpt_meta *out, char *err, size_t errlen)
{
    if (read_meta(iter_dir, out, err, errlen)) return -1;
    ckpt_reader *r = ckpt_reader_open(out, err, errlen);
    int bad = r ? ckpt_verify(r, NULL, NULL, err, errlen) : -1;
    ckpt_reader_close(r);
    if (bad) ckpt_meta_free(out);
    return bad ? -1 : 0;
}

/* Tries the checkpoints of dir newer than `above` (all when -1), newest first; the first that
 * verifies fills *out. Returns its iteration, or -1 with the newest one's problem in why. */
static int64_t newest_verified(const char *dir, int64_t above, ckpt_meta *out, char *why, size_t whylen, int *tried)
{
    int64_t *its;
    int n = list_iters(dir, &its), found = -1;
    *tried = 0;
    why[0] = 0;
    for (int i = 0; i < n && its[i] > above && found < 0; i++) {
        char path[4200], e[1024];
        ckpt_iter_dir(path, sizeof path, dir, its[i]);
        ++*tried;
        if (read_verified(path, out, e, sizeof e) == 0) found = i;
        else if (!why[0]) snprintf(why, whylen, "%s", e);
    }
    int64_t it = found >= 0 ? its[found] : -1;
    free(its);
    return it;
}

int ckpt_find(const char *path, ckpt_meta *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    char mpath[4200], lpath[4200], iter_dir[4200], why[1024], note[12000];
    if (!ckf_is_dir(path)) return 1;
    ckf_join(mpath, sizeof mpath, path, "meta.json");
    if (ckf_exists(mpath)) return read_meta(path, out, err, errlen);
    ckf_join(lpath, sizeof lpath, path, CKPT_LATEST);
    int tried;
    if (!ckf_exists(lpath)) {
        /* no latest file: the newest complete checkpoint that verifies, if there is any */
        int64_t it = newest_verified(path, -1, out, why, sizeof why, &tried);
        if (tried == 0) return 1;
        if (it < 0) {
            snprintf(err, errlen, "%s has no %s and none of its %d checkpoint folders verifies (the newest: %s): "
                     "repair or remove them, or load one with --load %s/iter_NNNNNNN", path, CKPT_LATEST, tried,
                     why, path);
            return -1;
        }
        snprintf(note, sizeof note, "%s has no %s: using %s, the newest checkpoint there that verifies%s%s", path,
                 CKPT_LATEST, out->dir, tried > 1 ? " (skipped, the newest: " : "", tried > 1 ? why : "");
        if (tried > 1) strncat(note, ")", sizeof note - strlen(note) - 1);
        out->note = td_xstrdup(note);
        return 0;
    }
    char *text = ckf_read_text(lpath, NULL, 1 << 12);
    if (!text) {
        snprintf(err, errlen, "cannot read %s: %s", lpath, td_strerror(errno));
        return -1;
    }
    char *end;
    long long it = strtoll(text, &end, 10);
    while (*end == '\n' || *end == ' ' || *end == '\r') end++;
    if (end == text || *end || it < 0) {
        for (char *q = text; *q; q++)
            if ((unsigned char)*q < 0x20) *q = ' ';
        snprintf(err, errlen, "%s does not hold an iteration number (it holds '%.40s'); fix or remove it", lpath, text);
        free(text);
        return -1;
    }
    free(text);
    ckpt_iter_dir(iter_dir, sizeof iter_dir, path, it);
    ckf_join(mpath, sizeof mpath, iter_dir, "meta.json");
    if (!ckf_exists(mpath)) {
        snprintf(err, errlen, "%s names iteration %lld but %s is missing: the checkpoint was removed or never "
                 "completed; fix %s (or remove it to load the newest checkpoint that verifies)", lpath, it, mpath,
                 lpath);
        return -1;
    }
    /* a newer complete folder: a save interrupted after its rename, before latest was updated */
    int64_t newer = newest_verified(path, it, out, why, sizeof why, &tried);
    if (newer >= 0) {
        snprintf(note, sizeof note, "%s names iteration %lld but %s is newer and verifies (a save interrupted before "
                 "%s was updated): using it", lpath, it, out->dir, CKPT_LATEST);
        out->note = td_xstrdup(note);
        return 0;
    }
    if (read_meta(iter_dir, out, err, errlen)) return -1;
    if (tried) {
        snprintf(note, sizeof note, "%s names iteration %lld; newer checkpoint folders there do not verify (%s)",
                 lpath, it, why);
        out->note = td_xstrdup(note);
    }
    return 0;
}

void ckpt_meta_free(ckpt_meta *m)
{
    if (!m) return;
    free(m->dir);
    free(m->version);
    for (int i = 0; i < m->nfiles; i++) free(m->files ? m->files[i].name : NULL);
    free(m->files);
    free(m->args_json);
    free(m->note);
    memset(m, 0, sizeof *m);
}

gpt_config ckpt_model_config(const ckpt_meta *m, int tp, int seq, int divisible_by)
{
    gpt_config c = m->model;
    c.seq = seq;
    c.hidden_dropout = 0;
    c.attn_dropout = 0;
    if (c.padded_vocab % tp) c.padded_vocab = gpt_padded_vocab(c.vocab, divisible_by, tp);
    return c;
}
