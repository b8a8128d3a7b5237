/* SFT's batch source: a sample per row, cut and padded, the loss mask from the answer mask. See
 * include/train/trident/sft_source.h. */
#include "trident/sft_source.h"

#include <stdlib.h>
#include <string.h>

#include "trident/check.h"
#include "trident/indexed.h"
#include "trident/sft.h"

typedef struct {
    idx_dataset *tok, *am;
    int64_t beg[GPTDS_NSPLITS], end[GPTDS_NSPLITS];
    uint64_t seed;
    int mbs, dp, dp_rank, seq, num_micro, answer_only;
    int32_t pad;
    int64_t *perm, perm_epoch;   /* the order of perm_split's documents in epoch perm_epoch */
    int perm_split;
    sft_trunc how;               /* --sft-truncation-method */
    int32_t *toks, *amask;       /* (the longest sample, at least seq + 1) one sample, truncated in place */
    int32_t *ids, *targets;      /* (num_micro, mbs, seq) */
    int64_t *sample;             /* (num_micro, mbs) */
    float *mask;                 /* (num_micro, mbs, seq) */
    int64_t last[2];             /* the last training iteration's counted targets, samples cut */
    /* rows of a split: bin i holds documents bin_docs[s][bin_off[s][i] .. bin_off[s][i + 1]) (one
     * each unless packed) */
    int64_t nbins[GPTDS_NSPLITS], *bin_off[GPTDS_NSPLITS], *bin_docs[GPTDS_NSPLITS];
    int pack_seg, pack_pos;      /* packed: --reset-attention-mask, --reset-position-ids */
    int32_t *seg, *pos;          /* (num_micro, mbs, seq) when packed */
    int32_t *buf, *bufm, *owner; /* (seq + 1) a packed row's tokens, answer mask, sample of each */
} sft_source;

static uint64_t splitmix(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* A Fisher-Yates order of n items keyed by the seed, the split and the epoch into perm. */
static void shuffle(uint64_t seed, int s, int64_t epoch, int64_t *perm, int64_t n)
{
    for (int64_t i = 0; i < n; i++) perm[i] = i;
    uint64_t x = seed * 0x100000001b3ULL ^ ((uint64_t)s << 56) ^ (uint64_t)epoch;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(splitmix(&x) % (uint64_t)(i + 1));
        int64_t t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
}

/* The row (bin) of sample idx of split s: the bins in an order shuffled per epoch. */
static int64_t bin_of(sft_source *g, gptds_split s, int64_t idx)
{
    int64_t n = g->nbins[s], epoch = idx / n;
    if (!g->perm || g->perm_split != (int)s || g->perm_epoch != epoch) {
        free(g->perm);
        g->perm = td_xmalloc((size_t)n * sizeof(int64_t));
        shuffle(g->seed, (int)s, epoch, g->perm, n);
        g->perm_split = (int)s, g->perm_epoch = epoch;
    }
    return g->perm[idx % n];
}

/* Sample sq (len tokens) read whole into g->toks and g->amask and truncated to seq + 1 tokens
 * (sft_truncate): its new length. */
static int64_t read_sample(sft_source *g, int64_t sq, int64_t len)
{
    idx_read(g->tok, sq, 0, len, g->toks);
    idx_read(g->am, sq, 0, len, g->amask);
    return sft_truncate(g->toks, g->amask, len, g->seq + 1, g->how);
}

/* A packed row of the documents of bin b of split s: each truncated to seq + 1 tokens, concatenated,
 * then pad; a target counts where it and its input are of one sample (and, answer-only, the
 * answer's); seg and pos restart at each sample. Returns the counted targets; *cut += the
 * samples cut. */
static int pack_row(sft_source *g, int s, int64_t b, int32_t *ids, int32_t *targets, float *mask, int32_t *seg,
                    int32_t *pos, int64_t *cut)
{
    const int S = g->seq;
    const int64_t *di = idx_doc_index(g->tok);
    int used = 0;
    for (int64_t k = g->bin_off[s][b]; k < g->bin_off[s][b + 1]; k++) {
        int64_t sq = di[g->bin_docs[s][k]], len = idx_seq_len(g->tok, sq), kept = read_sample(g, sq, len);
        int n = (int)(kept < S + 1 - used ? kept : S + 1 - used);
        *cut += len > n;
        memcpy(g->buf + used, g->toks, (size_t)n * sizeof(int32_t));
        memcpy(g->bufm + used, g->amask, (size_t)n * sizeof(int32_t));
        for (int t = used; t < used + n; t++) g->owner[t] = used; /* the sample's first position */
        used += n;
    }
    int counted = 0;
    for (int t = 0; t < S; t++) {
        int in = t < used, has = t + 1 < used && g->owner[t + 1] == g->owner[t];
        int start = in ? g->owner[t] : used;
        ids[t] = in ? g->buf[t] : g->pad;
        targets[t] = t + 1 < used ? g->buf[t + 1] : g->pad;
        int c = has && (!g->answer_only || g->bufm[t + 1] == SFT_MASK_ANSWER);
        mask[t] = c ? 1.0f : 0.0f;
        counted += c;
        if (seg) seg[t] = start;
        if (pos) pos[t] = t - start;
    }
    return counted;
}

static void sft_begin(void *self, gptds_split split, int64_t consumed, const comm *dp_group, gpt_batch *micro)
{
    sft_source *g = self;
    int S = g->seq;
    int64_t counted[2] = {0, 0}; /* targets counted, samples cut */
    const int64_t *di = idx_doc_index(g->tok);
    for (int m = 0; m < g->num_micro; m++) {
        size_t r0 = (size_t)m * g->mbs;
        for (int j = 0; j < g->mbs; j++) {
            int64_t idx = batch_sample_index(consumed, m, j, g->mbs, g->dp, g->dp_rank);
            int64_t bin = bin_of(g, split, idx);
            size_t o = (r0 + j) * S;
            g->sample[r0 + j] = idx;
            if (g->pack_seg || g->pack_pos) {
                counted[0] += pack_row(g, split, bin, g->ids + o, g->targets + o, g->mask + o,
                                       g->pack_seg ? g->seg + o : NULL, g->pack_pos ? g->pos + o : NULL, &counted[1]);
                continue;
            }
            int64_t sq = di[g->bin_docs[split][g->bin_off[split][bin]]];
            int64_t len = idx_seq_len(g->tok, sq), n = read_sample(g, sq, len);
            counted[1] += len > S + 1;
            counted[0] += sft_row(g->toks, g->amask, n, S, g->answer_only, g->pad, g->ids + o, g->targets + o,
                               g->mask + o);
        }
        micro[m] = (gpt_batch){.B = g->mbs, .ids = g->ids + r0 * S, .targets = g->targets + r0 * S,
                               .sample = g->sample + r0, .loss_mask = g->mask + r0 * S};
        if (g->pack_seg) micro[m].seg = g->seg + r0 * S;
        if (g->pack_pos) micro[m].pos = g->pos + r0 * S;
    }
    /* the mean over the counted targets of the global batch, as the packed source weighs it */
    comm_allreduce(dp_group, counted, 2, COMM_I64, COMM_SUM);
    if (split == GPTDS_TRAIN) g->last[0] = counted[0], g->last[1] = counted[1];
    double all = (double)g->num_micro * g->mbs * g->dp * S;
    float w = counted[0] ? (float)(all / (double)counted[0]) : 0.0f;
    for (int m = 0; m < g->num_micro; m++) micro[m].token_weight = w;
}

static int64_t sft_num_samples(const void *self, gptds_split split)
{
    const sft_source *g = self;
    return g->nbins[split];
}

static void sft_close(void *self)
{
    sft_source *g = self;
    idx_close(g->tok), idx_close(g->am);
    free(g->perm), free(g->toks), free(g->amask), free(g->ids), free(g->targets), free(g->sample), free(g->mask);
    free(g->seg), free(g->pos), free(g->buf), free(g->bufm), free(g->owner);
    for (int s = 0; s < GPTDS_NSPLITS; s++) free(g->bin_off[s]), free(g->bin_docs[s]);
    free(g);
}

/* sft_loss_tokens: the targets the loss counted over the global batch; sft_samples_cut: its
 * samples longer than seq + 1, truncated */
static int sft_metrics(const void *self, gpt_metric *out, int max)
{
    const sft_source *g = self;
    static const gpt_metric m[2] = {{"sft_loss_tokens", "loss tokens", "%.0f", 0},
                                    {"sft_samples_cut", "samples cut", "%.0f", 0}};
    int n = max < 2 ? max : 2;
    for (int i = 0; i < n; i++) out[i] = m[i], out[i].value = (double)g->last[i];
    return n;
}

const batch_source_ops sft_source_ops = {"SFT samples", sft_begin, sft_num_samples, sft_close, sft_metrics};

/* The samples of [beg, end) longer than seq + 1 tokens, truncated. */
static int64_t count_long(const idx_dataset *d, int64_t beg, int64_t end, int seq)
{
    const int64_t *di = idx_doc_index(d);
    int64_t n = 0;
    for (int64_t i = beg; i < end; i++) n += idx_seq_len(d, di[i]) > seq + 1;
    return n;
}

/* The bins of split s: one document each, or (packed) documents of an order shuffled by the seed
 * taken in turn into a row while their tokens (each cut to seq + 1) fit seq + 1. */
static void make_bins(sft_source *g, int s, int packed)
{
    int64_t n = g->end[s] - g->beg[s];
    const int64_t *di = idx_doc_index(g->tok);
    g->bin_off[s] = td_xmalloc((size_t)(n + 1) * sizeof(int64_t));
    g->bin_docs[s] = td_xmalloc((size_t)(n > 0 ? n : 1) * sizeof(int64_t));
    if (packed) shuffle(g->seed, s, -1, g->bin_docs[s], n);
    else
        for (int64_t i = 0; i < n; i++) g->bin_docs[s][i] = i;
    int64_t nb = 0, used = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t d = g->beg[s] + g->bin_docs[s][i], len = idx_seq_len(g->tok, di[d]);
        if (len > g->seq + 1) len = g->seq + 1;
        g->bin_docs[s][i] = d;
        if (i == 0 || !packed || used + len > g->seq + 1) g->bin_off[s][nb++] = i, used = 0;
        used += len;
    }
    g->bin_off[s][nb] = n;
    g->nbins[s] = nb;
}

void *sft_source_open(const gptds_config *dc, const gpt_config *c, int answer_only, sft_trunc how, int pack_seg,
                      int pack_pos, int32_t pad, int mbs, int num_micro, int dp, int dp_rank, int log)
{
    if (dc->n != 1 || dc->weights)
        td_fatal(2, "--sft reads one dataset: give --data-path one PREFIX_sft_document, not a blend");
    char err[1024];
    sft_source *g = td_xcalloc(1, sizeof *g);
    char *mp = sft_mask_prefix(dc->paths[0]);
    if (!(g->tok = idx_open(dc->paths[0], err, sizeof err))) td_fatal(1, "--sft: %s", err);
    if (!(g->am = idx_open(mp, err, sizeof err)))
        td_fatal(1, "--sft: the answer mask %s: %s (write both with preprocess --sft)", mp, err);
    int64_t nd = idx_num_documents(g->tok);
    if (idx_num_documents(g->am) != nd || idx_num_sequences(g->am) != idx_num_sequences(g->tok) ||
        idx_num_sequences(g->tok) != nd || memcmp(idx_seq_lens(g->am), idx_seq_lens(g->tok), (size_t)nd * sizeof(int32_t)))
        td_fatal(1, "--sft: %s and its answer mask %s do not hold the same samples; write both again with preprocess --sft",
                 dc->paths[0], mp);
    double w[GPTDS_NSPLITS];
    if (gptds_parse_split(dc->split, w, err, sizeof err) != 0) td_fatal(2, "%s", err);
    gptds_split_range(w, nd, g->beg, g->end);
    if (g->end[GPTDS_TRAIN] <= g->beg[GPTDS_TRAIN])
        td_fatal(2, "--sft: --split %s leaves no training samples of the %lld in %s", dc->split, (long long)nd,
                 dc->paths[0]);
    g->seed = (uint64_t)dc->seed;
    g->mbs = mbs, g->dp = dp, g->dp_rank = dp_rank, g->seq = c->seq, g->num_micro = num_micro;
    g->answer_only = answer_only, g->pad = pad, g->perm_split = -1, g->how = how;
    size_t rows = (size_t)num_micro * mbs, longest = (size_t)c->seq + 1;
    for (int64_t i = 0; i < nd; i++)
        if ((size_t)idx_seq_lens(g->tok)[i] > longest) longest = (size_t)idx_seq_lens(g->tok)[i];
    g->toks = td_xmalloc(longest * sizeof(int32_t));
    g->amask = td_xmalloc(longest * sizeof(int32_t));
    g->ids = td_xmalloc(rows * c->seq * sizeof(int32_t));
    g->targets = td_xmalloc(rows * c->seq * sizeof(int32_t));
    g->sample = td_xmalloc(rows * sizeof(int64_t));
    g->mask = td_xmalloc(rows * c->seq * sizeof(float));
    g->pack_seg = pack_seg, g->pack_pos = pack_pos;
    if (pack_seg) g->seg = td_xmalloc(rows * c->seq * sizeof(int32_t));
    if (pack_pos) g->pos = td_xmalloc(rows * c->seq * sizeof(int32_t));
    g->buf = td_xmalloc((size_t)(c->seq + 1) * sizeof(int32_t));
    g->bufm = td_xmalloc((size_t)(c->seq + 1) * sizeof(int32_t));
    g->owner = td_xmalloc((size_t)(c->seq + 1) * sizeof(int32_t));
    for (int s = 0; s < GPTDS_NSPLITS; s++) make_bins(g, s, pack_seg || pack_pos);
    if (log) {
        static const char *const names[] = {"training", "validation", "test"};
        for (int s = 0; s < GPTDS_NSPLITS; s++) {
            int64_t n = g->end[s] - g->beg[s];
            if (n <= 0) continue;
            int64_t cut = count_long(g->tok, g->beg[s], g->end[s], c->seq);
            TD_INFO("sft: %lld %s samples, %lld of them longer than --seq-length + 1 = %d tokens, truncated "
                    "(%.1f%%, --sft-truncation-method %s); loss over %s", (long long)n, names[s], (long long)cut,
                    c->seq + 1, 100.0 * (double)cut / (double)n, how == SFT_TRUNC_LEFT ? "left" : "right",
                    answer_only ? "the answer's tokens" : "every token");
            if (pack_seg || pack_pos)
                TD_INFO("sft: %s samples packed into %lld rows of %d (%.2f a row)", names[s], (long long)g->nbins[s],
                        c->seq, (double)n / (double)g->nbins[s]);
        }
    }
    free(mp);
    return g;
}
