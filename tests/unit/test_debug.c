#define _POSIX_C_SOURCE 200809L /* setenv */
/* src/core/debug.c: the fakes and faults for tests come from the command line's debug flags or a
 * test's setter, never from the environment: the old variables (TRIDENT_TEST_HOSTS, ...) set,
 * nothing changes; --fake-hosts names the hosts as N nodes filled in rank order would
 * (comm_host_name, by hand); the flags reach td_debug_get, and each is off by default. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "trident/args.h"
#include "trident/comm_hier.h"
#include "trident/debug.h"

static void environment_is_not_read(void **state)
{
    (void)state;
    setenv("TRIDENT_TEST_HOSTS", "2", 1);
    setenv("TRIDENT_TEST_WATCH_ONLY_RANK", "0", 1);
    setenv("TRIDENT_TEST_SAVE_DELAY_MS", "500", 1);
    setenv("TRIDENT_TEST_OVERFLOW_ITER", "2", 1);
    const td_debug *d = td_debug_get();
    assert_int_equal(d->fake_hosts, 0);
    assert_int_equal(d->save_delay_ms, 0);
    assert_true(d->overflow_iter == 0);
    assert_int_equal(d->watch_only_rank, -1);
    char real[64] = "", got[64];
    if (gethostname(real, sizeof real - 1) != 0) strcpy(real, "?");
    comm_host_name(3, 4, got, sizeof got);
    assert_string_equal(got, real);
    unsetenv("TRIDENT_TEST_HOSTS"), unsetenv("TRIDENT_TEST_WATCH_ONLY_RANK");
    unsetenv("TRIDENT_TEST_SAVE_DELAY_MS"), unsetenv("TRIDENT_TEST_OVERFLOW_ITER");
}

/* 4 ranks on 2 fake hosts: ranks 0-1 on test-host-0, 2-3 on test-host-1; 3 hosts of 6 ranks: pairs */
static void fake_hosts_by_hand(void **state)
{
    (void)state;
    td_debug_set(&(td_debug){.fake_hosts = 2, .watch_only_rank = -1});
    char got[64];
    static const char *want4[4] = {"test-host-0", "test-host-0", "test-host-1", "test-host-1"};
    for (int r = 0; r < 4; r++) {
        comm_host_name(r, 4, got, sizeof got);
        assert_string_equal(got, want4[r]);
    }
    td_debug_set(&(td_debug){.fake_hosts = 3, .watch_only_rank = -1});
    comm_host_name(5, 6, got, sizeof got);
    assert_string_equal(got, "test-host-2");
    comm_host_name(2, 6, got, sizeof got);
    assert_string_equal(got, "test-host-1");
    td_debug_set(&(td_debug){.watch_only_rank = -1});
}

static void flags_reach_the_settings(void **state)
{
    (void)state;
    char *argv[] = {"--fake-hosts", "3", "--debug-save-delay-ms", "250", "--debug-overflow-iteration", "7",
                    "--debug-watch-only-rank", "0"};
    td_args a;
    assert_int_equal(td_args_parse(&a, TD_CMD_TRAIN, "trident train", 8, argv, 0), 0);
    td_debug_from_args(&a);
    const td_debug *d = td_debug_get();
    assert_int_equal(d->fake_hosts, 3);
    assert_int_equal(d->save_delay_ms, 250);
    assert_true(d->overflow_iter == 7);
    assert_int_equal(d->watch_only_rank, 0);
    td_args_free(&a);
    /* a command given none: every one off again */
    assert_int_equal(td_args_parse(&a, TD_CMD_TRAIN, "trident train", 0, argv, 0), 0);
    td_debug_from_args(&a);
    assert_int_equal(d->fake_hosts, 0);
    assert_int_equal(d->save_delay_ms, 0);
    assert_true(d->overflow_iter == 0);
    assert_int_equal(d->watch_only_rank, -1);
    td_args_free(&a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(environment_is_not_read),
        cmocka_unit_test(fake_hosts_by_hand),
        cmocka_unit_test(flags_reach_the_settings),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
