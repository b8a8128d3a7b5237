/* src/model/block_stats.c and the metrics file: a block kind's statistics, named by the kind,
 * reach the iteration's metrics and metrics.jsonl by name. A mixed model ([1,0,1,1]: three MoE
 * layers, one dense) runs two training forwards; the MoE block's named sums are held against
 * arithmetic by hand (each token chooses k experts: B s k choices a layer a micro-batch; the
 * dense layer has no row), and the report's figures against the named sums (the means, the
 * busiest expert against the mean, the lists per layer), then read back from metrics.jsonl. */
#define _POSIX_C_SOURCE 200809L /* mkstemp */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "backend/backend.h"
#include "trident/activation.h"
#include "trident/comm.h"
#include "trident/gpt.h"
#include "trident/metrics.h"
#include "trident/parallel_state.h"

static comm *g_world;
static ps_state *g_ps;
static backend *g_be;

enum { B = 2, S = 8, E = 4, K = 2, L_MOE = 3 };

static gpt_config mixed(void)
{
    gpt_config c = {0};
    c.num_layers = 4, c.hidden = 16, c.heads = 4, c.ffn = 24, c.seq = S, c.max_pos = S;
    c.vocab = 50, c.padded_vocab = 64, c.init_std = 0.02f, c.seed = 5, c.act = TD_ACT_SILU, c.glu = 1;
    c.num_experts = E, c.moe_ffn = 8, c.moe_topk = K, c.moe_aux_coeff = 0.01f, c.moe_z_coeff = 0.001f;
    char msg[200];
    assert_int_equal(gpt_moe_layer_freq_parse(&c, "[1,0,1,1]", 4, msg, sizeof msg), 0);
    return c;
}

static double stat(const gpt_config *c, const double *sums, int row, const char *name, int e)
{
    long i = gpt_block_stat_index(c, row, name);
    if (i < 0) fail_msg("no statistic %s in row %d", name, row);
    return sums[i + e];
}

static const gpt_metric *metric(const gpt_metric *m, int n, const char *key)
{
    for (int i = 0; i < n; i++)
        if (strcmp(m[i].key, key) == 0) return &m[i];
    return NULL;
}

/* The one line met_write appends for r, parsed. */
static cJSON *write_and_parse(const met_record *r)
{
    char path[] = TD_TEST_TMP "/block_stats_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    met_writer *w = met_open(path);
    met_write(w, r);
    met_close(w);
    FILE *f = fopen(path, "r");
    char line[8192];
    assert_non_null(fgets(line, sizeof line, f));
    fclose(f);
    unlink(path);
    cJSON *j = cJSON_Parse(line);
    if (!j) fail_msg("not JSON: %s", line);
    return j;
}

static void named_stats_reach_the_metrics(void **state)
{
    (void)state;
    gpt_config c = mixed();
    /* three MoE rows of: the two losses, dropped, E tokens, near ties, the derived load */
    assert_int_equal(gpt_block_stats_size(&c), L_MOE * (E + 5));
    assert_true(gpt_block_stat_index(&c, 0, "no_such_stat") == -1);
    assert_true(gpt_block_stat_index(&c, L_MOE, "tokens") == -1);
    gpt_config dense = c;
    dense.num_experts = 0;
    assert_int_equal(gpt_block_stats_size(&dense), 0);

    gpt_model *m = gpt_create(&c, g_ps, g_be, 0, c.num_layers, B, 1);
    int32_t ids[B * S], targets[B * S];
    int64_t sample[B] = {0, 1};
    for (int i = 0; i < B * S; i++) ids[i] = (i * 7 + 3) % c.vocab, targets[i] = (i * 5 + 1) % c.vocab;
    gpt_batch in = {.B = B, .ids = ids, .targets = targets, .sample = sample, .token_weight = 1, .sample_weight = 1};
    gpt_acts *a = gpt_acts_acquire(m);
    double loss;
    for (int micro = 0; micro < 2; micro++) gpt_forward(m, a, &in, NULL, 1, &loss);
    gpt_forward(m, a, &in, NULL, 0, &loss); /* an evaluation forward counts nothing */
    gpt_acts_release(m, a);

    size_t n = gpt_block_stats_size(&c);
    double *sums = calloc(n, sizeof(double));
    gpt_block_stats_take(m, sums);
    double *again = calloc(n, sizeof(double));
    gpt_block_stats_take(m, again); /* the take cleared the stage's */
    for (size_t i = 0; i < n; i++) assert_true(again[i] == 0);
    free(again);

    double aux = 0, z = 0, ties = 0, worst = 0, load[L_MOE];
    for (int r = 0; r < L_MOE; r++) {
        double total = 0, most = 0;
        for (int e = 0; e < E; e++) total += stat(&c, sums, r, "tokens", e), most = fmax(most, stat(&c, sums, r, "tokens", e));
        assert_true(total == 2.0 * B * S * K); /* two micro-batches of B s tokens, k choices each */
        assert_true(stat(&c, sums, r, "dropped", 0) == 0); /* no capacity */
        assert_true(stat(&c, sums, r, "load_balancing_loss", 0) > 0);
        assert_true(stat(&c, sums, r, "z_loss", 0) > 0);
        aux += stat(&c, sums, r, "load_balancing_loss", 0), z += stat(&c, sums, r, "z_loss", 0);
        ties += stat(&c, sums, r, "near_ties", 0);
        load[r] = most / (total / E), worst = fmax(worst, load[r]);
    }

    met_record rec = {.iteration = 1, .val_loss = NAN};
    gpt_stats_scope sc = {.micro_batches = 2, .samples = 2 * B};
    rec.nextra = gpt_block_metrics(&c, sums, &sc, rec.extra, GPT_MAX_STATS, rec.arrays, &rec.narrays);
    assert_int_equal(rec.nextra, 4); /* no dropped_tokens without a capacity */
    assert_int_equal(rec.narrays, 2);
    assert_null(metric(rec.extra, rec.nextra, "dropped_tokens"));
    const gpt_metric *lb = metric(rec.extra, rec.nextra, "load_balancing_loss");
    assert_non_null(lb);
    assert_string_equal(lb->label, "load balancing loss");
    assert_true(lb->value == aux / (L_MOE * 2.0));
    assert_true(metric(rec.extra, rec.nextra, "z_loss")->value == z / (L_MOE * 2.0));
    assert_true(metric(rec.extra, rec.nextra, "expert_load_max_mean")->value == worst);
    assert_true(metric(rec.extra, rec.nextra, "router_near_ties")->value == ties);
    for (int r = 0; r < L_MOE; r++) assert_true(stat(&c, sums, r, "load_max_mean", 0) == load[r]);

    cJSON *j = write_and_parse(&rec);
    assert_true(cJSON_GetObjectItem(j, "load_balancing_loss")->valuedouble == aux / (L_MOE * 2.0));
    assert_true(cJSON_GetObjectItem(j, "router_near_ties")->valuedouble == ties);
    const cJSON *tok = cJSON_GetObjectItem(j, "tokens_per_expert"), *per = cJSON_GetObjectItem(j, "expert_load_max_mean_per_layer");
    assert_int_equal(cJSON_GetArraySize(tok), L_MOE);
    assert_int_equal(cJSON_GetArraySize(per), L_MOE);
    for (int r = 0; r < L_MOE; r++) {
        const cJSON *row = cJSON_GetArrayItem(tok, r);
        assert_int_equal(cJSON_GetArraySize(row), E);
        for (int e = 0; e < E; e++) assert_true(cJSON_GetArrayItem(row, e)->valuedouble == stat(&c, sums, r, "tokens", e));
        assert_true(fabs(cJSON_GetArrayItem(per, r)->valuedouble - load[r]) <= 1e-5 * load[r]); /* %.6g */
    }
    cJSON_Delete(j);

    /* with a capacity, the share of the choices dropped: dropped / (layers x samples x s x k) */
    c.moe_capacity = 1.0f;
    sums[gpt_block_stat_index(&c, 1, "dropped")] = 6;
    rec.narrays = 0;
    rec.nextra = gpt_block_metrics(&c, sums, &sc, rec.extra, GPT_MAX_STATS, rec.arrays, &rec.narrays);
    assert_int_equal(rec.nextra, 5);
    assert_true(metric(rec.extra, rec.nextra, "dropped_tokens")->value == 6.0 / (L_MOE * 2 * B * S * K));
    free(sums);
    gpt_free(m);
}

int main(int argc, char **argv)
{
    g_world = comm_world_init(&argc, &argv);
    g_ps = ps_init(g_world, 1, 1);
    g_be = be_create("cpu", 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(named_stats_reach_the_metrics),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    be_free(g_be);
    ps_free(g_ps);
    comm_world_finalize(g_world);
    return rc;
}
