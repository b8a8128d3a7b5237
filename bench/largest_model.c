/* The largest GPT that trains on one machine's memory with a given number of ranks, by trident's
 * memory prediction (src/train/memory.c): for GPT-2-style models of hidden 1024..4096 (head size
 * 64... 128) and any depth, every layout tp x pp x dp of the ranks, with and without the
 * distributed optimizer, sequence parallelism and full recomputation, the sum over the ranks of
 * the predicted bytes plus a per-rank runtime allowance must fit the budget. For each hidden size
 * of GPT-3's family (head size 128, ffn 4h) it prints the deepest model of each feature set that
 * fits, with its layout.
 * Usage: largest_model [--ranks 8] [--budget-gib 22] [--runtime-mib 160] [--seq 1024] [--gbs 16] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/gpt.h"
#include "trident/memory.h"
#include "trident/pipeline.h"

typedef struct {
    int distopt, sp, recompute;
    const char *name;
} features;

typedef struct {
    double params, bytes;
    int L, h, tp, pp, dp;
} best;

/* Predicted bytes of the whole job (every rank) for a layout, or -1 when the layout is invalid. */
static double job_bytes(const gpt_config *c0, int tp, int pp, int dp, int gbs, const features *f, double runtime)
{
    gpt_config c = *c0;
    if (c.heads % tp || c.ffn % tp || c.num_layers % pp || c.seq % tp) return -1;
    if (gbs % dp) return -1;
    c.padded_vocab = gpt_padded_vocab(c.vocab, 128, tp);
    int micro = gbs / dp;
    pp_schedule s = pp == 1 ? PP_SCHEDULE_NONE : PP_SCHEDULE_1F1B;
    double total = 0;
    for (int st = 0; st < pp; st++) {
        mem_layout l = {0};
        l.cfg = c;
        l.tp = tp;
        l.dp = dp;
        l.mbs = 1;
        l.nchunks = 1;
        l.chunk[0] = (mem_chunk){c.num_layers / pp, st == 0, st == pp - 1, pp_slots_needed(s, pp, st, 1, micro), st * (c.num_layers / pp)};
        l.distributed_optimizer = f->distopt && dp > 1;
        l.sequence_parallel = f->sp && tp > 1;
        l.recompute = f->recompute ? MEM_RECOMPUTE_FULL : MEM_RECOMPUTE_NONE;
        l.recompute_num_layers = 1;
        mem_prediction p;
        mem_predict(&l, &p);
        total += (p.total + runtime) * tp * dp;
    }
    return total;
}

int main(int argc, char **argv)
{
    int ranks = 8, seq = 1024, gbs = 16;
    double budget = 22, runtime = 160;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--ranks")) ranks = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--budget-gib")) budget = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--runtime-mib")) runtime = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--seq")) seq = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--gbs")) gbs = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "largest_model: unknown option %s (--ranks --budget-gib --runtime-mib --seq --gbs)\n", argv[i]);
            return 2;
        }
    }
    budget *= 1024.0 * 1024 * 1024;
    runtime *= 1024.0 * 1024;
    const features sets[] = {
        {0, 0, 0, "none (replicated optimizer, full activations)"},
        {1, 0, 0, "distributed optimizer"},
        {1, 1, 0, "distributed optimizer + sequence parallel"},
        {1, 1, 1, "distributed optimizer + sequence parallel + full recompute"},
    };
    printf("budget %.1f GiB for %d ranks (%.0f MiB runtime each); seq %d, micro-batch 1, global batch %d\n",
           budget / (1 << 30), ranks, runtime / (1 << 20), seq, gbs);
    const int hiddens[] = {1536, 2048, 2560};
    for (size_t hi = 0; hi < sizeof hiddens / sizeof *hiddens; hi++)
        for (size_t fi = 0; fi < sizeof sets / sizeof *sets; fi++) {
            best b = {0};
            int h = hiddens[hi];
            for (int L = 1; L <= 256; L++) {
                gpt_config c = {0};
                c.num_layers = L;
                c.hidden = h;
                c.heads = h / 128;
                c.ffn = 4 * h;
                c.seq = seq;
                c.max_pos = seq;
                c.vocab = 50257;
                c.padded_vocab = gpt_padded_vocab(c.vocab, 128, 1);
                double params = (double)gpt_num_params(&c);
                for (int tp = 1; tp <= ranks; tp *= 2)
                    for (int pp = 1; tp * pp <= ranks; pp *= 2) {
                        if (ranks % (tp * pp)) continue;
                        int dp = ranks / (tp * pp);
                        double bytes = job_bytes(&c, tp, pp, dp, gbs, &sets[fi], runtime);
                        if (bytes < 0 || bytes > budget || params <= b.params) continue;
                        b = (best){params, bytes, L, h, tp, pp, dp};
                    }
            }
            if (!b.L) {
                printf("%-62s hidden %d: nothing fits\n", sets[fi].name, h);
                continue;
            }
            printf("%-62s %6.2fB parameters: %d layers x %d (%d heads), tp %d x pp %d x dp %d, %.1f GiB predicted\n",
                   sets[fi].name, b.params / 1e9, b.L, b.h, b.h / 128, b.tp, b.pp, b.dp, b.bytes / (1 << 30));
        }
    return 0;
}
