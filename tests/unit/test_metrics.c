#define _POSIX_C_SOURCE 200809L /* mkstemp */
/* src/train/metrics.c: every --metrics-file line is JSON a strict reader accepts (JSON has no
 * NaN or Infinity: a skipped step's grad norm, a diverged loss, a perplexity past the double
 * range are null), and the time left of the log line. */
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

#include "trident/metrics.h"

/* The one line met_write appends for r, parsed by cJSON (which refuses nan, inf and -nan). */
static cJSON *write_and_parse(const met_record *r)
{
    char path[] = TD_TEST_TMP "/metrics_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    met_writer *w = met_open(path);
    met_write(w, r);
    met_close(w);
    FILE *f = fopen(path, "r");
    char line[4096];
    assert_non_null(fgets(line, sizeof line, f));
    fclose(f);
    unlink(path);
    cJSON *j = cJSON_Parse(line);
    if (!j) fail_msg("not JSON: %s", line);
    return j;
}

static void finite_values_as_numbers(void **state)
{
    (void)state;
    met_record r = {.iteration = 3, .consumed_samples = 24, .lm_loss = 6.25, .lr = 1e-3, .grad_norm = 0.5,
                    .loss_scale = 65536, .val_loss = 2.0};
    cJSON *j = write_and_parse(&r);
    assert_true(cJSON_GetObjectItem(j, "lm_loss")->valuedouble == 6.25);
    assert_true(cJSON_GetObjectItem(j, "grad_norm")->valuedouble == 0.5);
    assert_true(fabs(cJSON_GetObjectItem(j, "val_ppl")->valuedouble - exp(2.0)) < 1e-12);
    cJSON_Delete(j);
}

/* A skipped fp16 step (grad norm Inf), a NaN loss, -NaN, a validation loss whose perplexity
 * overflows: null, never nan/inf; a validation loss not measured: absent. */
static void non_finite_values_as_null(void **state)
{
    (void)state;
    met_record r = {.iteration = 12, .lm_loss = -NAN, .grad_norm = INFINITY, .loss_scale = 1, .skipped = 1,
                    .mfu = NAN, .val_loss = 800.0};
    cJSON *j = write_and_parse(&r);
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(j, "lm_loss")));
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(j, "grad_norm")));
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(j, "mfu")));
    assert_true(cJSON_GetObjectItem(j, "val_loss")->valuedouble == 800.0);
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(j, "val_ppl"))); /* e^800 > DBL_MAX */
    assert_true(cJSON_GetObjectItem(j, "skipped")->valueint == 1);
    cJSON_Delete(j);
    r.val_loss = NAN;
    r.nextra = 3; /* a head's metrics, by their keys */
    r.extra[0] = (gpt_metric){"lm_acc", "lm acc", "%.4f", NAN};
    r.extra[1] = (gpt_metric){"sop_loss", "sop loss", "%.6E", INFINITY};
    r.extra[2] = (gpt_metric){"sop_acc", "sop acc", "%.4f", 0.5};
    j = write_and_parse(&r);
    assert_null(cJSON_GetObjectItem(j, "val_loss"));
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(j, "lm_acc")));
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(j, "sop_loss")));
    assert_true(cJSON_GetObjectItem(j, "sop_acc")->valuedouble == 0.5);
    cJSON_Delete(j);
}

static void durations(void **state)
{
    (void)state;
    char b[48];
    met_format_duration(b, sizeof b, 0);
    assert_string_equal(b, "0:00:00");
    met_format_duration(b, sizeof b, 59.6); /* rounds to the second */
    assert_string_equal(b, "0:01:00");
    met_format_duration(b, sizeof b, 3723);
    assert_string_equal(b, "1:02:03");
    met_format_duration(b, sizeof b, 100 * 3600.0 + 5);
    assert_string_equal(b, "100:00:05");
    met_format_duration(b, sizeof b, NAN);
    assert_string_equal(b, "?");
    met_format_duration(b, sizeof b, -1);
    assert_string_equal(b, "?");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(finite_values_as_numbers),
        cmocka_unit_test(non_finite_values_as_null),
        cmocka_unit_test(durations),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
