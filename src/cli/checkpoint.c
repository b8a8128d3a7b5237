/* trident checkpoint: inspect and verify checkpoints (see docs/checkpoints.md).
 *   trident checkpoint info DIR         what a checkpoint holds; verifies every CRC32
 *   trident checkpoint compare A B      every logical tensor of A against B, any layouts */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "trident/args.h"
#include "trident/check.h"
#include "trident/checkpoint.h"

static const char SUMMARY[] =
    "trident checkpoint info DIR: print what a checkpoint holds (iteration, layout, model, shards,\n"
    "tensors and sizes) and verify the CRC32 of every tensor of every shard; exit 1 if any is bad.\n"
    "trident checkpoint compare A B: compare every logical tensor (parameters, and the Adam moments\n"
    "when both have them) of two checkpoints written in any layouts; exit 0 when bit-identical.\n"
    "DIR is a save folder (its latest checkpoint) or an iter_NNNNNNN folder.";

static void open_or_die(const char *path, ckpt_meta *m)
{
    char err[1024] = "";
    int rc = ckpt_find(path, m, err, sizeof err);
    if (rc == 1) td_fatal(1, "%s holds no checkpoint (no %s, no meta.json)", path, CKPT_LATEST);
    if (rc) td_fatal(1, "%s", err);
    if (m->note) td_warn("%s", m->note);
}

typedef struct {
    int bad;
    int entries;
} verify_count;

static void on_entry(void *user, const char *file, const char *entry, int ok)
{
    verify_count *v = user;
    v->entries++;
    if (!ok) {
        v->bad++;
        printf("  BAD CRC32: %s: %s\n", file, entry);
    }
}

static int info(const char *path)
{
    ckpt_meta m;
    open_or_die(path, &m);
    gpt_config shown = m.model, *c = &shown;
    gpt_config_resolve(&shown); /* what the defaults mean: kv_channels h / n, norm_epsilon 1e-5, ... */
    printf("checkpoint %s (format %d, written by trident %s)\n", m.dir, m.format_version, m.version);
    printf("iteration %lld; consumed samples: train %lld, valid %lld; seed %llu; run %s\n",
           (long long)m.progress.iteration, (long long)m.progress.consumed_train, (long long)m.progress.consumed_valid,
           (unsigned long long)m.progress.seed, m.progress.run_id[0] ? m.progress.run_id : "(no id: written before run ids)");
    printf("layout: tp %d x pp %d x dp %d, %d virtual stage%s per rank\n", m.tp, m.pp, m.dp, m.vp, m.vp > 1 ? "s" : "");
    char arch[480];
    gpt_config_describe(c, arch, sizeof arch);
    printf("model: %s\n", arch);
    printf("settings:");
    for (int k = 0; k < GPT_NCONFIG_KEYS; k++) { /* every setting meta.json stores */
        char v[64];
        gpt_config_value_str(c, &GPT_CONFIG_KEYS[k], v, sizeof v);
        printf("%s %s %s", k ? "," : "", GPT_CONFIG_KEYS[k].key, v);
    }
    if (gpt_moe(c)) { /* the MoE layers (--moe-layer-freq), a list */
        char freq[8 * GPT_MOE_LIST_MAX_LAYERS];
        gpt_moe_layer_freq_str(c, freq, sizeof freq);
        printf(", moe_layer_freq %s", freq);
    }
    printf("\n");
    int by_dp = 0;
    for (int i = 0; i < m.nfiles; i++) by_dp |= m.files[i].dp_rank >= 0;
    printf("optimizer: %s\n", !m.has_optimizer ? "none (weights only)"
                              : by_dp ? "adamw (exp_avg, exp_avg_sq), one shard per data-parallel rank (distributed)"
                                      : "adamw (exp_avg, exp_avg_sq)");
    uint64_t total = 0;
    printf("shards (%d):\n", m.nfiles);
    for (int i = 0; i < m.nfiles; i++) {
        printf("  %-34s %12llu bytes\n", m.files[i].name, (unsigned long long)m.files[i].bytes);
        total += m.files[i].bytes;
    }
    char err[1024] = "";
    ckpt_reader *r = ckpt_reader_open(&m, err, sizeof err);
    if (!r) td_fatal(1, "%s", err);
    ckpt_tensor_list tl;
    ckpt_list_tensors(r, &tl);
    int64_t params = 0;
    for (int i = 0; i < tl.n; i++) params += ckpt_slice_numel(&tl.shapes[i]);
    printf("tensors (%d, %lld parameters, %.1f MB as float32):\n", tl.n, (long long)params, (double)params * 4 / 1e6);
    for (int i = 0; i < tl.n; i++) {
        char shape[64];
        const ckpt_slice *s = &tl.shapes[i];
        if (s->ndim == 2) snprintf(shape, sizeof shape, "[%lld, %lld]", (long long)s->shape[0], (long long)s->shape[1]);
        else snprintf(shape, sizeof shape, "[%lld]", (long long)s->shape[0]);
        printf("  %-40s %-16s %12lld\n", tl.names[i], shape, (long long)ckpt_slice_numel(s));
    }
    verify_count v = {0, 0};
    int bad = ckpt_verify(r, on_entry, &v, err, sizeof err);
    printf("total %.1f MB in %d shard%s\n", (double)total / 1e6, m.nfiles, td_plural(m.nfiles));
    if (bad) printf("CRC32: %d of %d entries BAD: the checkpoint is corrupt\n", bad, v.entries);
    else printf("CRC32: all %d entr%s ok\n", v.entries, v.entries == 1 ? "y" : "ies");
    ckpt_tensor_list_free(&tl);
    ckpt_reader_close(r);
    ckpt_meta_free(&m);
    return bad ? 1 : 0;
}

/* Whether logical tensor `name` of the table is frozen (LoRA's base). */
static int frozen_in(const gpt_model *logical, const char *name)
{
    for (int i = 0; i < logical->ntensors; i++)
        if (strcmp(logical->table[i].name, name) == 0) return logical->table[i].frozen;
    return 0;
}

/* Reads the whole of tensor `name` (kind k) of r, as shape s. */
static float *read_whole(ckpt_reader *r, ckpt_kind k, const char *name, const ckpt_slice *s)
{
    char err[1024];
    float *buf = td_xmalloc((size_t)ckpt_slice_numel(s) * sizeof(float));
    if (ckpt_read(r, k, name, s, buf, err, sizeof err)) td_fatal(1, "%s", err);
    return buf;
}

static int compare(const char *pa, const char *pb)
{
    ckpt_meta ma, mb;
    open_or_die(pa, &ma);
    open_or_die(pb, &mb);
    char err[1024];
    ckpt_reader *ra = ckpt_reader_open(&ma, err, sizeof err);
    if (!ra) td_fatal(1, "%s", err);
    ckpt_reader *rb = ckpt_reader_open(&mb, err, sizeof err);
    if (!rb) td_fatal(1, "%s", err);
    ckpt_tensor_list la, lb;
    ckpt_list_tensors(ra, &la);
    ckpt_list_tensors(rb, &lb);
    int differ = 0, compared = 0;
    if (la.n != lb.n) {
        printf("%s has %d tensor%s, %s has %d\n", ma.dir, la.n, td_plural(la.n), mb.dir, lb.n);
        differ++;
    }
    int kinds = ma.has_optimizer && mb.has_optimizer ? 3 : 1;
    gpt_model lfa, lfb; /* the logical tables: which tensors are frozen */
    gpt_logical_table(&ma.model, &lfa);
    gpt_logical_table(&mb.model, &lfb);
    /* the word embedding is compared over the real vocabulary; padded rows (a layout artefact
     * HF files do not have) only get a note */
    int vocab = ma.model.vocab < mb.model.vocab ? ma.model.vocab : mb.model.vocab;
    int same_pad = ma.model.padded_vocab == mb.model.padded_vocab;
    for (int i = 0; i < la.n; i++) {
        ckpt_slice s = la.shapes[i];
        int word = ckpt_is_vocab_tensor(la.names[i]);
        if (word) s.shape[0] = vocab;
        /* LoRA's frozen base has no Adam moments */
        int fa = frozen_in(&lfa, la.names[i]), fb = frozen_in(&lfb, la.names[i]), nk = fa || fb ? 1 : kinds;
        if (kinds > 1 && fa != fb) {
            printf("%s: trained in %s, frozen (LoRA's base) in %s\n", la.names[i], fa ? mb.dir : ma.dir,
                   fa ? ma.dir : mb.dir);
            differ++;
        }
        for (int k = 0; k < nk; k++) {
            float *a = read_whole(ra, (ckpt_kind)k, la.names[i], &s);
            char why[1024];
            float *b = td_xmalloc((size_t)ckpt_slice_numel(&s) * sizeof(float));
            if (ckpt_read(rb, (ckpt_kind)k, la.names[i], &s, b, why, sizeof why)) {
                printf("%s\n", why);
                differ++;
                free(a);
                free(b);
                continue;
            }
            int64_t n = ckpt_slice_numel(&s), ndiff = 0;
            double maxd = 0, maxa = 0;
            for (int64_t j = 0; j < n; j++) {
                if (memcmp(&a[j], &b[j], sizeof(float)) != 0) ndiff++;
                double d = fabs((double)a[j] - b[j]);
                if (d > maxd) maxd = d;
                if (fabs(a[j]) > maxa) maxa = fabs(a[j]);
            }
            const char *kn = k == 0 ? "" : k == 1 ? " (exp_avg)" : " (exp_avg_sq)";
            if (ndiff) {
                printf("%s%s: %lld of %lld values differ, max |a - b| %.3g (max |a| %.3g)\n", la.names[i], kn,
                       (long long)ndiff, (long long)n, maxd, maxa);
                differ++;
            } else if (td_log_level() >= 2) {
                printf("%s%s: identical\n", la.names[i], kn);
            }
            compared++;
            free(a);
            free(b);
            if (word && same_pad && vocab < ma.model.padded_vocab) {
                ckpt_slice p = la.shapes[i];
                p.dim = 0, p.blocks = 1, p.start = vocab, p.len = p.shape[0] - vocab;
                float *x = td_xmalloc((size_t)ckpt_slice_numel(&p) * sizeof(float));
                float *y = td_xmalloc((size_t)ckpt_slice_numel(&p) * sizeof(float));
                if (ckpt_read(ra, (ckpt_kind)k, la.names[i], &p, x, why, sizeof why) ||
                    ckpt_read(rb, (ckpt_kind)k, la.names[i], &p, y, why, sizeof why))
                    td_fatal(1, "%s", why);
                if (memcmp(x, y, (size_t)ckpt_slice_numel(&p) * sizeof(float)) != 0)
                    printf("note: %s%s: the padded rows %d..%d differ (not compared)\n", la.names[i], kn, vocab,
                           ma.model.padded_vocab - 1);
                free(x);
                free(y);
            }
        }
    }
    char rows[96];
    snprintf(rows, sizeof rows, " (word embedding: its %d vocabulary rows)", vocab);
    printf("%d tensors%s compared%s: %s\n", compared, kinds == 3 ? " and Adam moments" : "", rows,
           differ ? "DIFFERENT" : "bit-identical");
    ckpt_tensor_list_free(&la);
    ckpt_tensor_list_free(&lb);
    free(lfa.table);
    free(lfb.table);
    ckpt_reader_close(ra);
    ckpt_reader_close(rb);
    ckpt_meta_free(&ma);
    ckpt_meta_free(&mb);
    return differ ? 1 : 0;
}

int cli_checkpoint(int argc, char **argv)
{
    const char *prog = "trident checkpoint";
    int npos = 0;
    const char *pos[3] = {0};
    int first = 1;
    while (first < argc && strncmp(argv[first], "--", 2) != 0 && strcmp(argv[first], "-h") != 0) {
        if (npos == 3) td_usage_error("%s: too many arguments (see %s --help)", prog, prog);
        pos[npos++] = argv[first++];
    }
    td_args a;
    if (td_args_parse(&a, TD_CMD_CHECKPOINT, prog, argc, argv, first)) {
        td_args_usage(TD_CMD_CHECKPOINT, "trident checkpoint info DIR | compare A B", SUMMARY);
        td_args_free(&a);
        return 0;
    }
    td_log_set_level(a.verbose);
    td_args_free(&a);
    if (npos == 2 && strcmp(pos[0], "info") == 0) return info(pos[1]);
    if (npos == 3 && strcmp(pos[0], "compare") == 0) return compare(pos[1], pos[2]);
    td_usage_error("%s: expected 'info DIR' or 'compare A B' (see %s --help)", prog, prog);
}
