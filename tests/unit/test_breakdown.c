#define _POSIX_C_SOURCE 200809L /* mkstemp, dup */
/* src/train/breakdown.c: the limits the time breakdown holds rates against. AdamW's bytes and
 * a copy's are counted alike (read + written), worked by hand; no printed fraction of a limit
 * exceeds 1: a rate above its limit raises the limit and the line says so. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "train/breakdown.h"

/* AdamW per element: reads p, g, m, v (4 floats), writes p, m, v (3 floats) = 28 bytes; a copy of
 * n bytes reads n and writes n. So AdamW over n elements moves as much as a copy of 14 n bytes,
 * 3.5 copies of its 4 n bytes of parameters. */
static void bytes_counted_alike(void **state)
{
    (void)state;
    assert_true(be_adamw_bytes(1) == 4 * 4 + 3 * 4);
    assert_true(be_adamw_bytes(124000000) == 28.0 * 124000000);
    assert_true(be_copy_bytes(128u << 20) == 2.0 * (128u << 20));
    assert_true(be_adamw_bytes(1000) == be_copy_bytes(14 * 1000));
}

static void fraction_raises_the_limit(void **state)
{
    (void)state;
    double lim = 200, f;
    assert_int_equal(bd_fraction(50, &lim, &f), 0);
    assert_true(lim == 200 && f == 0.25);
    assert_int_equal(bd_fraction(250, &lim, &f), 1); /* above: the limit was measured low */
    assert_true(lim == 250 && f == 1.0);
    assert_int_equal(bd_fraction(100, &lim, &f), 0); /* the raised limit holds */
    assert_true(f == 0.4);
    lim = 0; /* no limit: no fraction */
    assert_int_equal(bd_fraction(100, &lim, &f), 0);
    assert_true(f == 0 && lim == 0);
}

/* What bd_print writes (on stdout) for two counted iterations: GEMMs of 400 GFLOP in 2 s (200
 * GFLOP/s), AdamW 0.2 s of 2 x 2.8 GB (28 GB/s), against the limits given. */
static char *print_to_string(double peak_gflops, double stream_gbps)
{
    bd_state b;
    memset(&b, 0, sizeof b);
    b.iters = 2;
    b.total = 4;
    b.kern.seconds[BE_OP_GEMM] = 2;
    b.kern.flops[BE_OP_GEMM] = 400e9;
    b.kern.calls[BE_OP_GEMM] = 10;
    b.region[BD_OPTIMIZER] = b.region[BD_ADAMW] = 0.2;
    bd_limits lim = {.peak_gflops = peak_gflops, .peak_name = "bf16 GEMM peak", .stream_gbps = stream_gbps,
                     .adamw_bytes = be_adamw_bytes(100000000)};
    char path[] = TD_TEST_TMP "/breakdown_XXXXXX";
    int fd = mkstemp(path), saved = dup(1);
    assert_true(fd >= 0 && saved >= 0);
    fflush(stdout);
    dup2(fd, 1);
    bd_print(&b, &lim);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    static char out[8192];
    ssize_t n = pread(fd, out, sizeof out - 1, 0);
    assert_true(n > 0);
    out[n] = 0;
    close(fd);
    unlink(path);
    return out;
}

/* Every "= N% of" in the text is at most 100%. */
static void assert_fractions_at_most_one(const char *text)
{
    int seen = 0;
    for (const char *p = strstr(text, "= "); p; p = strstr(p + 1, "= ")) {
        double pc;
        char of[4];
        if (sscanf(p, "= %lf%% %3s", &pc, of) == 2 && strcmp(of, "of") == 0) {
            seen++;
            if (pc > 100.0) fail_msg("a fraction above 1: %.60s", p);
        }
    }
    assert_int_equal(seen, 2); /* GEMMs and AdamW */
}

static void printed_fractions_below_limits(void **state)
{
    (void)state;
    const char *out = print_to_string(400, 56);
    assert_fractions_at_most_one(out);
    assert_non_null(strstr(out, "200.0 GFLOP/s = 50% of the bf16 GEMM peak 400.0 GFLOP/s"));
    assert_non_null(strstr(out, "2.80 GB read + written at 28.0 GB/s = 50% of the bandwidth of its streams 56.0 GB/s"));
    assert_null(strstr(out, "raised"));
}

/* The rates above the limits (the 101% of the GEMM peak; AdamW faster than its limit):
 * the limits are raised to the rates, the lines say so and name the limits measured. */
static void printed_fractions_above_limits(void **state)
{
    (void)state;
    const char *out = print_to_string(198, 10);
    assert_fractions_at_most_one(out);
    assert_non_null(strstr(out, "200.0 GFLOP/s = 100% of the bf16 GEMM peak, raised to this rate from 198.0 GFLOP/s"));
    assert_non_null(strstr(out, "at 28.0 GB/s = 100% of the bandwidth of its streams, raised to this rate from 10.0 GB/s "
                                "measured"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(bytes_counted_alike),
        cmocka_unit_test(fraction_raises_the_limit),
        cmocka_unit_test(printed_fractions_below_limits),
        cmocka_unit_test(printed_fractions_above_limits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
