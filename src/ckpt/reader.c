/* Reading checkpoints in any layout: see include/ckpt/trident/checkpoint.h.
 *
 * Every shard's entries are indexed by (kind, logical name) with the slice they hold. A read
 * of slice W of tensor T intersects W with the slice of every entry of T: per dimension, a
 * slice is a list of intervals of logical indices (one per block along its split dimension, or
 * the whole dimension), each mapped to a local offset, so the intersection is a set of
 * rectangles copied row by row. Entries of one tensor must not overlap, and together they
 * must cover what is asked. Each entry's CRC32 is checked the first time it is read.
 *
 * A distributed optimizer's shards (one per data-parallel rank) hold pieces of slices: element
 * ranges of a slice's buffer. The pieces of one slice, from every data-parallel rank, are
 * indexed as one entry of that slice, assembled in memory when first read; they must tile it. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "backend.h"
#include "ckpt_fs.h"
#include "ckpt_impl.h"
#include "trident/check.h"
#include "trident/checkpoint.h"
#include "trident/safetensors.h"
#include "trident/timer.h"

/* A piece of a slice: the elements [elems[2k], elems[2k+1]) of the slice's buffer, k < n, one
 * after another in entry t. */
typedef struct {
    int file;
    const st_tensor *t;
    uint32_t crc;
    int n;
    int64_t *elems;
} src_piece;

typedef struct {
    int file;             /* index into r->files (of the first piece when assembled) */
    const st_tensor *t;
    ckpt_kind kind;
    const char *lname;    /* logical name (inside t->name) */
    ckpt_slice sl;
    uint32_t crc;
    int verified;
    int npieces;          /* > 0: assembled from these pieces (data-parallel optimizer shards) */
    src_piece *pieces;
    float *buf;           /* the assembled slice, once read */
} src_entry;

struct ckpt_reader {
    char *dir;
    int nfiles;
    st_file **files;
    int n;
    src_entry *e;         /* sorted by (kind, lname) */
};

#define FAIL(...)                                                                        \
    do {                                                                                 \
        snprintf(err, errlen, __VA_ARGS__);                                              \
        goto fail;                                                                       \
    } while (0)

/* ---- intervals ---- */

typedef struct {
    int64_t lo, hi, local;
} ival;

static int64_t cols_of(const ckpt_slice *s) { return s->ndim == 2 ? s->shape[1] : 1; }
static int64_t width_of(const ckpt_slice *s) { return s->dim == 1 ? s->blocks * s->len : cols_of(s); }

/* Intervals of logical indices slice s holds along dimension d (0 rows, 1 columns). */
static int ivals(const ckpt_slice *s, int d, ival *out)
{
    int64_t size = d == 0 ? s->shape[0] : cols_of(s), r0 = d == 0 && s->r1 ? s->r0 : 0, r1 = d == 0 && s->r1 ? s->r1 : size;
    if (s->dim != d) {
        out[0] = (ival){r0, r1, 0};
        return 1;
    }
    TD_ASSERT(s->blocks >= 1 && s->blocks <= CKPT_MAX_BLOCKS);
    int64_t block = size / s->blocks;
    int n = 0;
    for (int b = 0; b < s->blocks; b++)
        if (b * block >= r0 && b * block < r1) /* expert parallelism: its experts' blocks */
            out[n] = (ival){b * block + s->start, b * block + s->start + s->len, n * s->len}, n++;
    return n;
}

/* ivals into a buffer of its own (freed by the caller). */
static ival *ivals_of(const ckpt_slice *s, int d, int *n)
{
    ival *out = td_xmalloc((size_t)(s->dim == d ? s->blocks : 1) * sizeof *out);
    *n = ivals(s, d, out);
    return out;
}

/* Elements of `want` (rows below rows_lim) that `src` holds; with dst and sdata, copies them. */
static int64_t intersect(const ckpt_slice *want, const ckpt_slice *src, int64_t rows_lim, float *dst,
                         const float *sdata)
{
    int nw0, nw1, ns0, ns1;
    ival *w0 = ivals_of(want, 0, &nw0), *w1 = ivals_of(want, 1, &nw1), *s0 = ivals_of(src, 0, &ns0),
         *s1 = ivals_of(src, 1, &ns1);
    int64_t Ww = width_of(want), Ws = width_of(src), count = 0;
    for (int a = 0; a < nw0; a++)
        for (int b = 0; b < ns0; b++) {
            int64_t lo = w0[a].lo > s0[b].lo ? w0[a].lo : s0[b].lo;
            int64_t hi = w0[a].hi < s0[b].hi ? w0[a].hi : s0[b].hi;
            if (hi > rows_lim) hi = rows_lim;
            if (lo >= hi) continue;
            for (int c = 0; c < nw1; c++)
                for (int d = 0; d < ns1; d++) {
                    int64_t clo = w1[c].lo > s1[d].lo ? w1[c].lo : s1[d].lo;
                    int64_t chi = w1[c].hi < s1[d].hi ? w1[c].hi : s1[d].hi;
                    if (clo >= chi) continue;
                    count += (hi - lo) * (chi - clo);
                    if (!dst) continue;
                    for (int64_t row = lo; row < hi; row++) {
                        int64_t wr = w0[a].local + row - w0[a].lo, sr = s0[b].local + row - s0[b].lo;
                        memcpy(dst + wr * Ww + w1[c].local + (clo - w1[c].lo),
                               sdata + sr * Ws + s1[d].local + (clo - s1[d].lo), (size_t)(chi - clo) * sizeof(float));
                    }
                }
        }
    free(w0), free(w1), free(s0), free(s1);
    return count;
}

static int same_shape(const ckpt_slice *a, const ckpt_slice *b)
{
    return a->ndim == b->ndim && a->shape[0] == b->shape[0] && cols_of(a) == cols_of(b);
}

static void shape_str(char *out, size_t len, const ckpt_slice *s)
{
    if (s->ndim == 2) snprintf(out, len, "[%lld, %lld]", (long long)s->shape[0], (long long)s->shape[1]);
    else snprintf(out, len, "[%lld]", (long long)s->shape[0]);
}

/* ---- the index ---- */

/* Natural order: digit runs compare as numbers ("layers.2" before "layers.10"). */
static int natcmp(const char *a, const char *b)
{
    while (*a && *b) {
        if (*a >= '0' && *a <= '9' && *b >= '0' && *b <= '9') {
            const char *x = a, *y = b;
            while (*x == '0') x++;
            while (*y == '0') y++;
            size_t nx = strspn(x, "0123456789"), ny = strspn(y, "0123456789");
            if (nx != ny) return nx < ny ? -1 : 1;
            int c = strncmp(x, y, nx);
            if (c) return c;
            a = x + nx, b = y + ny;
            continue;
        }
        if (*a != *b) return (unsigned char)*a < (unsigned char)*b ? -1 : 1;
        a++, b++;
    }
    return *a ? 1 : *b ? -1 : 0;
}

static int entry_cmp(const void *x, const void *y)
{
    const src_entry *a = x, *b = y;
    if (a->kind != b->kind) return a->kind < b->kind ? -1 : 1;
    int c = natcmp(a->lname, b->lname);
    if (c) return c;
    return a->file < b->file ? -1 : a->file > b->file ? 1 : 0;
}

/* Entries [*g0, *g1) of (kind, name). */
static void find_group(const ckpt_reader *r, ckpt_kind kind, const char *name, int *g0, int *g1)
{
    int lo = 0, hi = r->n;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        const src_entry *e = &r->e[mid];
        int c = e->kind != kind ? (e->kind < kind ? -1 : 1) : natcmp(e->lname, name);
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    *g0 = lo;
    while (lo < r->n && r->e[lo].kind == kind && strcmp(r->e[lo].lname, name) == 0) lo++;
    *g1 = lo;
}

/* A shard's iteration and run id (its __metadata__) against meta.json's: a shard copied in from
 * another save or another run is refused. Checkpoints from before run ids have neither. */
static int check_identity(const st_file *f, const ckpt_meta *m, char *err, size_t errlen)
{
    const char *it = st_meta(&f->h, "iteration"), *id = st_meta(&f->h, "run_id"), *want = m->progress.run_id;
    char *end = NULL;
    long long v = it ? strtoll(it, &end, 10) : -1;
    int it_ok = it ? end != it && !*end && v == m->progress.iteration : !want[0];
    int id_ok = id ? strcmp(id, want) == 0 : !want[0];
    if (it_ok && id_ok) return 0;
    snprintf(err, errlen, "%s: its __metadata__ says iteration %s of run %s but %s/meta.json is iteration %lld of run "
             "%s: the shard was copied from another checkpoint; restore the one saved with this meta.json",
             f->path, it ? it : "(none)", id ? id : "(none: written before run ids)", m->dir,
             (long long)m->progress.iteration, want[0] ? want : "(none: written before run ids)");
    return -1;
}

static int add_entries(ckpt_reader *r, int fi, const ckpt_file *cf, char *err, size_t errlen)
{
    const st_file *f = r->files[fi];
    const char *fmt = st_meta(&f->h, "format"), *kind = st_meta(&f->h, "kind");
    if (!fmt || strcmp(fmt, "trident") != 0 || !kind || strcmp(kind, cf->optimizer ? "optimizer" : "model") != 0)
        FAIL("%s: not a trident %s shard (its __metadata__ lacks format/kind)", f->path,
             cf->optimizer ? "optimizer" : "model");
    const char *tr = st_meta(&f->h, "tp_rank"), *pr = st_meta(&f->h, "pp_rank"), *dr = st_meta(&f->h, "dp_rank");
    const char *er = st_meta(&f->h, "ep_rank");
    if ((er ? atoi(er) : 0) != cf->ep_rank)
        FAIL("%s: its __metadata__ says ep_rank %s but meta.json lists it as ep_rank %d: the checkpoint is corrupt",
             f->path, er ? er : "(none)", cf->ep_rank);
    if (!tr || !pr || atoi(tr) != cf->tp_rank || atoi(pr) != cf->pp_rank || (dr ? atoi(dr) : -1) != cf->dp_rank)
        FAIL("%s: its __metadata__ says tp_rank %s, pp_rank %s, dp_rank %s but meta.json lists it as tp_rank %d, "
             "pp_rank %d, dp_rank %d: the checkpoint is corrupt", f->path, tr ? tr : "(none)", pr ? pr : "(none)",
             dr ? dr : "(none)", cf->tp_rank, cf->pp_rank, cf->dp_rank);
    r->e = td_xrealloc(r->e, (size_t)(r->n + f->h.ntensors) * sizeof *r->e);
    for (int i = 0; i < f->h.ntensors; i++) {
        const st_tensor *t = &f->h.tensors[i];
        src_entry *e = &r->e[r->n];
        memset(e, 0, sizeof *e);
        e->file = fi;
        e->t = t;
        if (!cf->optimizer) {
            e->kind = CKPT_PARAMS;
            e->lname = t->name;
        } else if (strncmp(t->name, "exp_avg_sq.", 11) == 0) {
            e->kind = CKPT_EXP_AVG_SQ;
            e->lname = t->name + 11;
        } else if (strncmp(t->name, "exp_avg.", 8) == 0) {
            e->kind = CKPT_EXP_AVG;
            e->lname = t->name + 8;
        } else {
            FAIL("%s: entry '%s' is not an optimizer state (exp_avg.* or exp_avg_sq.*)", f->path, t->name);
        }
        const char *js = st_meta(&f->h, t->name);
        if (!js || ckpt_slice_parse(js, &e->sl, &e->crc))
            FAIL("%s: entry '%s' has no valid slice description in __metadata__: the shard is corrupt", f->path,
                 t->name);
        int64_t d0 = e->sl.dim == 0 ? e->sl.blocks * e->sl.len : e->sl.shape[0];
        int64_t d1 = e->sl.dim == 1 ? e->sl.blocks * e->sl.len : cols_of(&e->sl);
        int ok = t->dtype == ST_F32 && t->ndim == e->sl.ndim && t->shape[0] == d0 && (t->ndim == 1 || t->shape[1] == d1);
        if (cf->dp_rank >= 0) { /* a piece: the listed elements, one after another */
            src_piece pc = {fi, t, e->crc, 0, NULL};
            if (ckpt_piece_parse(js, ckpt_slice_numel(&e->sl), &pc.elems, &pc.n))
                FAIL("%s: entry '%s' has no valid element ranges in __metadata__: the shard is corrupt", f->path,
                     t->name);
            int64_t held = 0;
            for (int k = 0; k < pc.n; k++) held += pc.elems[2 * k + 1] - pc.elems[2 * k];
            ok = t->dtype == ST_F32 && t->ndim == 1 && t->shape[0] == held;
            e->npieces = 1;
            e->pieces = td_xmalloc(sizeof *e->pieces);
            e->pieces[0] = pc;
            r->n++; /* freed with the reader from here on */
            if (!ok) FAIL("%s: entry '%s' does not hold the elements its description lists: the shard is corrupt",
                          f->path, t->name);
            continue;
        }
        if (!ok) FAIL("%s: entry '%s' (%s, %d dimensions) does not match its slice description: the shard is corrupt",
                      f->path, t->name, st_dtype_name(t->dtype), t->ndim);
        r->n++;
    }
    return 0;
fail:
    return -1;
}

/* check_model against the whole model's logical tensors (a one-rank table of them). */
static int check_against(const ckpt_reader *r, const ckpt_meta *m, const gpt_model *logical, char *err,
                         size_t errlen)
{
    const gpt_config *c = &m->model;
    int nkinds = m->has_optimizer ? 3 : 1, matched = 0;
    char mpath[4400];
    ckf_join(mpath, sizeof mpath, m->dir, "meta.json");
    for (int i = 0; i < logical->ntensors; i++) {
        const gpt_tensor_info *lt = &logical->table[i];
        const char *name = lt->name;
        int nd = lt->ndim;
        int64_t want[2] = {lt->shape[0], nd == 2 ? lt->shape[1] : 0};
        for (int kind = 0; kind < (lt->frozen ? 1 : nkinds); kind++) { /* LoRA's frozen base: no moments */
            int g0, g1;
            find_group(r, (ckpt_kind)kind, name, &g0, &g1);
            if (g0 == g1)
                FAIL("%s: tensor %s%s is in none of the shards but the model of %s (num_layers %d) has it: the "
                     "checkpoint is incomplete, or meta.json was edited", m->dir, ckpt_kind_prefix((ckpt_kind)kind),
                     name, mpath, c->num_layers);
            const src_entry *e = &r->e[g0];
            int64_t have[2] = {e->sl.shape[0], e->sl.ndim == 2 ? e->sl.shape[1] : 0};
            if (e->sl.ndim != nd || have[0] != want[0] || have[1] != want[1]) {
                int d = have[0] != want[0] || e->sl.ndim != nd ? 0 : 1;
                char shape[64];
                shape_str(shape, sizeof shape, &e->sl);
                FAIL("%s: %s is %lld but tensor %s in %s is %lld along that dimension (logical shape %s): meta.json "
                     "and the shards disagree; restore the meta.json written with them", mpath,
                     gpt_logical_dim_key(c, name, want[d]),
                     (long long)want[d], e->t->name, r->files[e->file]->path, (long long)have[d], shape);
            }
            int64_t held = 0, whole = want[0] * (nd == 2 ? want[1] : 1);
            for (int k = g0; k < g1; k++) held += ckpt_slice_numel(&r->e[k].sl);
            if (held != whole)
                FAIL("%s: tensor %s%s: the shards hold %lld of its %lld elements: a shard is missing or %s's layout "
                     "is wrong", m->dir, ckpt_kind_prefix((ckpt_kind)kind), name, (long long)held, (long long)whole,
                     mpath);
            matched += g1 - g0;
        }
    }
    if (matched == r->n) return 0;
    for (int i = 0; i < r->n; i++) {
        const src_entry *e = &r->e[i];
        if ((int)e->kind < nkinds && gpt_canonical_offset(c, e->lname) >= 0) continue;
        int l;
        if (sscanf(e->lname, "layers.%d.", &l) == 1 && l >= c->num_layers)
            FAIL("%s: num_layers is %d but %s holds tensor %s: meta.json and the shards disagree; restore the "
                 "meta.json written with them", mpath, c->num_layers, r->files[e->file]->path, e->t->name);
        FAIL("%s: entry '%s' is not a tensor of the model %s describes: the shard is corrupt or does not belong here",
             r->files[e->file]->path, e->t->name, mpath);
    }
    return 0;
fail:
    return -1;
}

/* Every tensor the model config of meta.json makes is in the shards at its logical shape and
 * wholly covered, for each kind of state the checkpoint has, and nothing else is there. */
static int check_model(const ckpt_reader *r, const ckpt_meta *m, char *err, size_t errlen)
{
    gpt_model logical; /* the whole model's tensors, built once */
    gpt_logical_table(&m->model, &logical);
    int rc = check_against(r, m, &logical, err, errlen);
    free(logical.table);
    return rc;
}

static int same_slice(const ckpt_slice *a, const ckpt_slice *b)
{
    if (!same_shape(a, b) || a->dim != b->dim || a->r0 != b->r0 || a->r1 != b->r1) return 0;
    return a->dim < 0 || (a->blocks == b->blocks && a->start == b->start && a->len == b->len);
}

static int range_cmp(const void *x, const void *y)
{
    const int64_t *a = x, *b = y;
    return a[0] < b[0] ? -1 : a[0] > b[0];
}

/* Joins the pieces of each slice (same tensor, kind and slice; from the data-parallel ranks'
 * shards) into one entry, checking that they tile the slice. */
static int merge_pieces(ckpt_reader *r, char *err, size_t errlen)
{
    int out = 0;
    for (int i = 0; i < r->n; i++) {
        src_entry *e = &r->e[i];
        src_entry *into = NULL;
        if (e->npieces)
            for (int k = out - 1; k >= 0 && r->e[k].kind == e->kind && strcmp(r->e[k].lname, e->lname) == 0; k--)
                if (r->e[k].npieces && same_slice(&r->e[k].sl, &e->sl)) into = &r->e[k];
        if (!into) {
            r->e[out++] = *e;
            continue;
        }
        into->pieces = td_xrealloc(into->pieces, (size_t)(into->npieces + e->npieces) * sizeof *into->pieces);
        memcpy(into->pieces + into->npieces, e->pieces, (size_t)e->npieces * sizeof *e->pieces);
        into->npieces += e->npieces;
        free(e->pieces);
    }
    r->n = out;
    for (int i = 0; i < r->n; i++) {
        src_entry *e = &r->e[i];
        if (!e->npieces) continue;
        int nr = 0;
        for (int p = 0; p < e->npieces; p++) nr += e->pieces[p].n;
        int64_t *all = td_xmalloc((size_t)nr * 2 * sizeof(int64_t)), at = 0;
        for (int p = 0, k = 0; p < e->npieces; p++, k = 0)
            for (; k < e->pieces[p].n; k++) {
                all[2 * at] = e->pieces[p].elems[2 * k];
                all[2 * at + 1] = e->pieces[p].elems[2 * k + 1];
                at++;
            }
        qsort(all, (size_t)nr, 2 * sizeof(int64_t), range_cmp);
        int64_t end = 0;
        for (int k = 0; k < nr && all[2 * k] == end; k++) end = all[2 * k + 1];
        free(all);
        if (end != ckpt_slice_numel(&e->sl)) {
            snprintf(err, errlen, "%s: tensor '%s': the data-parallel optimizer shards hold pieces that do not tile "
                     "its slice (elements covered up to %lld of %lld): a shard is missing or the checkpoint is corrupt",
                     r->dir, e->t->name, (long long)end, (long long)ckpt_slice_numel(&e->sl));
            return -1;
        }
    }
    return 0;
}

ckpt_reader *ckpt_reader_open(const ckpt_meta *m, char *err, size_t errlen)
{
    ckpt_reader *r = td_xcalloc(1, sizeof *r);
    r->dir = td_xstrdup(m->dir);
    r->files = td_xcalloc((size_t)(m->nfiles ? m->nfiles : 1), sizeof *r->files);
    for (int i = 0; i < m->nfiles; i++) {
        char path[4400], why[1024];
        ckf_join(path, sizeof path, m->dir, m->files[i].name);
        r->files[i] = st_open(path, why, sizeof why);
        r->nfiles = i + 1;
        if (!r->files[i]) FAIL("%s: the checkpoint is corrupt", why);
        if (check_identity(r->files[i], m, err, errlen) || add_entries(r, i, &m->files[i], err, errlen)) goto fail;
    }
    qsort(r->e, (size_t)r->n, sizeof *r->e, entry_cmp);
    if (merge_pieces(r, err, errlen)) goto fail;
    for (int g0 = 0, g1; g0 < r->n; g0 = g1) {
        find_group(r, r->e[g0].kind, r->e[g0].lname, &g0, &g1);
        for (int i = g0; i < g1; i++) {
            if (!same_shape(&r->e[i].sl, &r->e[g0].sl)) {
                char a[64], b[64];
                shape_str(a, sizeof a, &r->e[g0].sl);
                shape_str(b, sizeof b, &r->e[i].sl);
                FAIL("%s: tensor '%s' has logical shape %s in %s but %s in %s: the checkpoint is corrupt", r->dir,
                     r->e[i].t->name, a, r->files[r->e[g0].file]->path, b, r->files[r->e[i].file]->path);
            }
            for (int k = g0; k < i; k++)
                if (intersect(&r->e[i].sl, &r->e[k].sl, INT64_MAX, NULL, NULL))
                    FAIL("%s: tensor '%s' has overlapping slices in %s and %s: the checkpoint is corrupt", r->dir,
                         r->e[i].t->name, r->files[r->e[k].file]->path, r->files[r->e[i].file]->path);
        }
    }
    if (check_model(r, m, err, errlen)) goto fail;
    return r;
fail:
    ckpt_reader_close(r);
    return NULL;
}

void ckpt_reader_close(ckpt_reader *r)
{
    if (!r) return;
    for (int i = 0; i < r->nfiles; i++) st_close(r->files[i]);
    free(r->files);
    for (int i = 0; i < r->n; i++) {
        for (int p = 0; p < r->e[i].npieces; p++) free(r->e[i].pieces[p].elems);
        free(r->e[i].pieces);
        free(r->e[i].buf);
    }
    free(r->e);
    free(r->dir);
    free(r);
}

/* ---- reading ---- */

/* Checks the CRC32 of one piece; 0, or -1 with err. */
static int verify_piece(const ckpt_reader *r, const src_piece *pc, char *err, size_t errlen)
{
    const st_file *f = r->files[pc->file];
    uint32_t c = st_crc32(0, st_data(f, pc->t), (size_t)(pc->t->end - pc->t->begin));
    if (c == pc->crc) return 0;
    snprintf(err, errlen, "%s: entry '%s': CRC32 mismatch (stored %08x, computed %08x): the shard is corrupt", f->path,
             pc->t->name, pc->crc, c);
    return -1;
}

/* Checks every piece's CRC32 and assembles the slice in e->buf. */
static int assemble(ckpt_reader *r, src_entry *e, char *err, size_t errlen)
{
    float *buf = td_xmalloc((size_t)ckpt_slice_numel(&e->sl) * sizeof(float));
    for (int p = 0; p < e->npieces; p++) {
        const src_piece *pc = &e->pieces[p];
        const float *data = st_data(r->files[pc->file], pc->t);
        if (verify_piece(r, pc, err, errlen)) {
            free(buf);
            return -1;
        }
        for (int k = 0; k < pc->n; k++) {
            int64_t n = pc->elems[2 * k + 1] - pc->elems[2 * k];
            memcpy(buf + pc->elems[2 * k], data, (size_t)n * sizeof(float));
            data += n;
        }
        st_release(r->files[pc->file], pc->t);
    }
    e->buf = buf;
    e->verified = 1;
    return 0;
}

static const float *entry_data(const ckpt_reader *r, const src_entry *e)
{
    return e->npieces ? e->buf : st_data(r->files[e->file], e->t);
}

static int verify_entry(ckpt_reader *r, src_entry *e, char *err, size_t errlen)
{
    if (e->verified) return 0;
    if (e->npieces) return assemble(r, e, err, errlen);
    const st_file *f = r->files[e->file];
    /* ask the kernel for the whole entry at once, then checksum it */
    uintptr_t page = 4096, b = (uintptr_t)st_data(f, e->t) & ~(page - 1);
    uintptr_t end = (uintptr_t)st_data(f, e->t) + (size_t)(e->t->end - e->t->begin);
    if (end > b) madvise((void *)b, end - b, MADV_WILLNEED);
    uint32_t c = st_crc32(0, st_data(f, e->t), (size_t)(e->t->end - e->t->begin));
    if (c != e->crc) {
        snprintf(err, errlen, "%s: entry '%s': CRC32 mismatch (stored %08x, computed %08x): the shard is corrupt",
                 f->path, e->t->name, e->crc, c);
        return -1;
    }
    e->verified = 1;
    return 0;
}

/* Reads the whole of entry e into dst with pread (sequential reads, no page faults on a
 * mapping), checking its CRC32 on the way: each piece is checksummed right after it lands. */
static int copy_verified(ckpt_reader *r, src_entry *e, float *dst, char *err, size_t errlen)
{
    const st_file *f = r->files[e->file];
    size_t n = (size_t)(e->t->end - e->t->begin), piece = (size_t)4 << 20;
    off_t at = (off_t)(f->h.data_start + e->t->begin);
    posix_fadvise(f->fd, at, (off_t)n, POSIX_FADV_WILLNEED); /* the whole entry, read ahead meanwhile */
    uint32_t c = 0;
    for (size_t off = 0; off < n;) {
        size_t k = n - off < piece ? n - off : piece;
        ssize_t got = pread(f->fd, (uint8_t *)dst + off, k, at + (off_t)off);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
            snprintf(err, errlen, "%s: cannot read entry '%s': %s", f->path, e->t->name,
                     got < 0 ? td_strerror(errno) : "unexpected end of file");
            return -1;
        }
        c = st_crc32(c, (uint8_t *)dst + off, (size_t)got);
        off += (size_t)got;
    }
    if (c != e->crc) {
        snprintf(err, errlen, "%s: entry '%s': CRC32 mismatch (stored %08x, computed %08x): the shard is corrupt",
                 f->path, e->t->name, e->crc, c);
        return -1;
    }
    e->verified = 1;
    return 0;
}

static const char *kind_name(ckpt_kind k)
{
    return k == CKPT_PARAMS ? "parameters" : k == CKPT_EXP_AVG ? "Adam exp_avg" : "Adam exp_avg_sq";
}

int ckpt_read(ckpt_reader *r, ckpt_kind kind, const char *name, const ckpt_slice *want, float *dst, char *err,
              size_t errlen)
{
    int g0, g1;
    find_group(r, kind, name, &g0, &g1);
    if (g0 == g1) FAIL("tensor %s (%s) is not in the checkpoint %s", name, kind_name(kind), r->dir);
    const ckpt_slice *have = &r->e[g0].sl;
    int64_t rows_lim = want->shape[0];
    if (!same_shape(want, have)) {
        int vocab_rows = ckpt_is_vocab_tensor(name) && want->ndim == have->ndim &&
                         (want->ndim == 1 || want->shape[1] == have->shape[1]) && want->dim != 1;
        if (!vocab_rows) {
            char a[64], b[64];
            shape_str(a, sizeof a, have);
            shape_str(b, sizeof b, want);
            FAIL("tensor %s: the checkpoint's shape is %s but this run's is %s (the model flags differ from the "
                 "checkpoint's; see its meta.json)", name, a, b);
        }
        if (have->shape[0] < rows_lim) rows_lim = have->shape[0];
    }
    int64_t expected = 0;
    {
        int n0;
        ival *w0 = ivals_of(want, 0, &n0);
        for (int a = 0; a < n0; a++) {
            int64_t hi = w0[a].hi < rows_lim ? w0[a].hi : rows_lim;
            if (hi > w0[a].lo) expected += hi - w0[a].lo;
        }
        expected *= width_of(want);
        free(w0);
    }
    int64_t covered = 0;
    if (g1 - g0 == 1 && same_slice(want, &r->e[g0].sl) && !r->e[g0].verified && !r->e[g0].npieces)
        return copy_verified(r, &r->e[g0], dst, err, errlen); /* the layout that wrote it: one pass */
    for (int i = g0; i < g1; i++) {
        src_entry *e = &r->e[i];
        if (!intersect(want, &e->sl, rows_lim, NULL, NULL)) continue;
        if (verify_entry(r, e, err, errlen)) return -1;
        covered += intersect(want, &e->sl, rows_lim, dst, entry_data(r, e));
        if (e->npieces) { /* assembled again if read again: one slice in memory at a time */
            free(e->buf);
            e->buf = NULL;
            e->verified = 0;
        } else {
            st_release(r->files[e->file], e->t); /* resident: one entry's mapped pages at a time */
        }
    }
    if (covered != expected)
        FAIL("tensor %s (%s): the checkpoint %s holds only %lld of the %lld elements needed: a shard is missing",
             name, kind_name(kind), r->dir, (long long)covered, (long long)expected);
    if (rows_lim < want->shape[0]) {
        /* padded rows the checkpoint lacks: copies of its last row */
        int64_t cols = cols_of(want);
        ckpt_slice last = {want->ndim, {have->shape[0], want->ndim == 2 ? cols : 0}, 0, 1, have->shape[0] - 1, 1, 0, 0};
        float *row = td_xmalloc((size_t)cols * sizeof(float));
        if (ckpt_read(r, kind, name, &last, row, err, errlen)) {
            free(row);
            return -1;
        }
        int n0;
        ival *w0 = ivals_of(want, 0, &n0);
        int64_t W = width_of(want);
        for (int a = 0; a < n0; a++)
            for (int64_t x = w0[a].lo > rows_lim ? w0[a].lo : rows_lim; x < w0[a].hi; x++)
                memcpy(dst + (w0[a].local + x - w0[a].lo) * W, row, (size_t)W * sizeof(float));
        free(w0);
        free(row);
    }
    return 0;
fail:
    return -1;
}

int ckpt_load(const ckpt_meta *meta, const ckpt_model *m, int load_optimizer, char *err, size_t errlen)
{
    ckpt_reader *r = NULL;
    float *host = NULL;
    const gpt_config *c = &m->chunks[0]->cfg;
    if (meta->model.vocab != c->vocab)
        FAIL("the checkpoint %s has a vocabulary of %d tokens but this run's tokenizer has %d (check --vocab-file)",
             meta->dir, meta->model.vocab, c->vocab);
    if (meta->model.num_layers != c->num_layers)
        FAIL("the checkpoint %s has %d layers but this run has %d (--num-layers)", meta->dir, meta->model.num_layers,
             c->num_layers);
    if (load_optimizer && m->adam_m && !meta->has_optimizer)
        FAIL("the checkpoint %s has no optimizer state (a converted or weights-only checkpoint): add --finetune "
             "or --no-load-optim", meta->dir);
    /* LoRA on a base checkpoint (train --finetune --lora-rank): the adapters keep their initial
     * values (B zero: the model starts as the base) */
    int new_adapters = gpt_lora(c) && meta->model.lora_rank == 0;
    if (new_adapters && load_optimizer)
        FAIL("the checkpoint %s has no LoRA adapters and this run trains them (--lora-rank %d): add --finetune to "
             "start them on its weights", meta->dir, c->lora_rank);
    r = ckpt_reader_open(meta, err, errlen);
    if (!r) goto fail;
    for (int k = 0; k < m->nchunks; k++) {
        const gpt_model *g = m->chunks[k];
        int nkinds = load_optimizer && m->adam_m ? 3 : 1;
        size_t largest = 1;
        for (int i = 0; i < g->ntensors; i++)
            if (g->table[i].numel > largest) largest = g->table[i].numel;
        for (int kind = 0; kind < nkinds; kind++) {
            double t0 = td_now();
            float *dst = kind == 0 ? g->params : kind == 1 ? m->adam_m[k] : m->adam_v[k];
            /* the distributed optimizer keeps pieces that cut across tensors: the chunk's whole
             * state through the host, then its pieces; else one tensor at a time through a host
             * buffer of the largest (no second copy of the model in memory) */
            int whole = kind > 0 && m->shard_ranges;
            host = td_xmalloc((whole ? g->numel : largest) * sizeof(float));
            for (int i = 0; i < g->ntensors; i++) {
                const gpt_tensor_info *t = &g->table[i];
                if (kind > 0 && t->frozen) continue; /* LoRA's frozen base: no optimizer state */
                if (new_adapters && !t->frozen) continue;
                ckpt_slice want = ckpt_slice_of(t);
                if (ckpt_read(r, (ckpt_kind)kind, t->name, &want, whole ? host + t->offset : host, err, errlen)) goto fail;
                if (!whole) be_memcpy(g->be, dst + t->offset, host, t->numel * sizeof(float), BE_H2D);
            }
            for (int q = 0; whole && q < m->nshard_ranges[k]; q++) {
                const dp_range *sr = &m->shard_ranges[k][q];
                be_memcpy(g->be, dst + sr->shard, host + sr->lo, sr->n * sizeof(float), BE_H2D);
            }
            free(host);
            host = NULL;
            TD_DEBUG("chunk %d, %s: read, checked and copied to the backend in %.2f s", k, kind_name((ckpt_kind)kind),
                     td_now() - t0);
        }
    }
    ckpt_reader_close(r);
    return 0;
fail:
    free(host);
    ckpt_reader_close(r);
    return -1;
}

void ckpt_list_tensors(const ckpt_reader *r, ckpt_tensor_list *out)
{
    memset(out, 0, sizeof *out);
    for (int i = 0; i < r->n; i++) {
        const src_entry *e = &r->e[i];
        if (e->kind != CKPT_PARAMS || (out->n && strcmp(out->names[out->n - 1], e->lname) == 0)) continue;
        out->names = td_xrealloc(out->names, (size_t)(out->n + 1) * sizeof *out->names);
        out->shapes = td_xrealloc(out->shapes, (size_t)(out->n + 1) * sizeof *out->shapes);
        out->names[out->n] = td_xstrdup(e->lname);
        out->shapes[out->n] = ckpt_slice_whole(e->sl.shape[0], e->sl.ndim == 2 ? e->sl.shape[1] : 0);
        out->n++;
    }
}

void ckpt_tensor_list_free(ckpt_tensor_list *l)
{
    for (int i = 0; i < l->n; i++) free(l->names[i]);
    free(l->names);
    free(l->shapes);
    memset(l, 0, sizeof *l);
}

int ckpt_verify(ckpt_reader *r, void (*report)(void *user, const char *file, const char *entry, int ok), void *user,
                char *err, size_t errlen)
{
    int bad = 0;
    /* in file order, so a report reads shard by shard; the pieces of a slice each in its own file */
    for (int fi = 0; fi < r->nfiles; fi++)
        for (int i = 0; i < r->n; i++) {
            src_entry *e = &r->e[i];
            char why[1024];
            for (int p = 0; p < e->npieces; p++) {
                if (e->pieces[p].file != fi) continue;
                int ok = verify_piece(r, &e->pieces[p], why, sizeof why) == 0;
                st_release(r->files[fi], e->pieces[p].t);
                if (!ok && !bad++) snprintf(err, errlen, "%s", why);
                if (report) report(user, r->files[fi]->path, e->pieces[p].t->name, ok);
            }
            if (e->npieces || e->file != fi) continue;
            int ok = verify_entry(r, e, why, sizeof why) == 0;
            st_release(r->files[fi], e->t);
            if (!ok && !bad++) snprintf(err, errlen, "%s", why);
            if (report) report(user, r->files[fi]->path, e->t->name, ok);
        }
    return bad;
}
