/* src/serve/utf8.c: ill-formed UTF-8 made well-formed by maximal-subpart replacement, against
 * hand-worked byte strings: Unicode 15's own example (section 3.9, Table 3-8), overlongs,
 * surrogates, past U+10FFFF, the old 5- and 6-byte forms, truncated characters; and a stream cut
 * anywhere giving the text of the whole. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "serve/utf8.h"

#define R "\xef\xbf\xbd" /* U+FFFD */

static void expect_clean(const char *in, size_t n, const char *want, size_t wn)
{
    char out[256];
    size_t used = 0, k = utf8_clean(in, n, 1, out, &used);
    assert_int_equal(used, n);
    assert_int_equal(k, wn);
    assert_memory_equal(out, want, k);
}
#define CLEAN(in, want) expect_clean(in, sizeof in - 1, want, sizeof want - 1)

static void well_formed_kept(void **state)
{
    (void)state;
    CLEAN("", "");
    CLEAN("plain ascii\n", "plain ascii\n");
    CLEAN("\xc2\x80 \xdf\xbf", "\xc2\x80 \xdf\xbf");                       /* U+0080, U+07FF */
    CLEAN("\xe0\xa0\x80\xe2\x82\xac\xed\x9f\xbf\xef\xbf\xbd", "\xe0\xa0\x80\xe2\x82\xac\xed\x9f\xbf\xef\xbf\xbd");
    CLEAN("\xf0\x90\x80\x80\xf0\x9f\x98\x80\xf4\x8f\xbf\xbf", "\xf0\x90\x80\x80\xf0\x9f\x98\x80\xf4\x8f\xbf\xbf");
    CLEAN("a\0b", "a\0b");
}

static void unicode_table_3_8(void **state)
{
    (void)state;
    /* 61 F1 80 80 E1 80 C2 62 80 63 80 BF 64 -> 0061 FFFD FFFD FFFD 0062 FFFD 0063 FFFD FFFD 0064 */
    CLEAN("\x61\xf1\x80\x80\xe1\x80\xc2\x62\x80\x63\x80\xbf\x64", "a" R R R "b" R "c" R R "d");
}

static void ill_formed(void **state)
{
    (void)state;
    CLEAN("\xc0\xaf", R R);                    /* overlong '/': C0 starts nothing, AF is a stray */
    CLEAN("\xc1\xbf", R R);
    CLEAN("\xe0\x80\xaf", R R R);              /* overlong: E0 wants A0..BF next */
    CLEAN("\xf0\x80\x80\xaf", R R R R);        /* overlong: F0 wants 90..BF next */
    CLEAN("\xed\xa0\x80", R R R);              /* surrogate U+D800 */
    CLEAN("\xed\xbf\xbf", R R R);              /* surrogate U+DFFF */
    CLEAN("\xf4\x90\x80\x80", R R R R);        /* U+110000 */
    CLEAN("\xf5\x80\x80\x80", R R R R);
    CLEAN("\xf8\x88\x80\x80\x80", R R R R R);  /* the old 5-byte form */
    CLEAN("\xfc\x84\x80\x80\x80\x80", R R R R R R);
    CLEAN("\xfe\xff", R R);
    CLEAN("\x80\xbf", R R);                    /* strays */
    CLEAN("\xf0\x9f\x98" "a", R "a");         /* a truncated emoji: one U+FFFD for its three bytes */
    CLEAN("\xf0\x9f" "\xe2\x82\xac", R "\xe2\x82\xac");
    CLEAN("\xe2\x82", R);                      /* truncated at the end */
    CLEAN("\xf0\x9f\x98", R);
    CLEAN("\xe2\x82\xe2\x82\xac\x82", R "\xe2\x82\xac" R);
}

/* With final 0, a trailing sequence that can still complete is not written; one that cannot is. */
static void held_back(void **state)
{
    (void)state;
    char out[64];
    size_t used;
    assert_int_equal(utf8_clean("a\xf0\x9f\x98", 4, 0, out, &used), 1);
    assert_int_equal(used, 1);
    assert_int_equal(utf8_clean("a\xe2", 2, 0, out, &used), 1);
    assert_int_equal(used, 1);
    assert_int_equal(utf8_clean("a\xf0\x80", 3, 0, out, &used), 7); /* F0 80 never completes */
    assert_int_equal(used, 3);
    assert_memory_equal(out, "a" R R, 7);
    assert_int_equal(utf8_clean("\xed\xa0", 2, 0, out, &used), 6); /* a surrogate's start */
    assert_int_equal(used, 2);
    assert_int_equal(utf8_clean("\x80", 1, 0, out, &used), 3);
    assert_int_equal(used, 1);
}

/* A text fed in pieces cut at any two points, each time with what was held before it, gives the
 * text of the whole; nothing held is longer than UTF8_HELD_MAX. */
static void stream_equals_whole(void **state)
{
    (void)state;
    const char in[] = "\x61\xf1\x80\x80\xe1\x80\xc2\x62\x80\x63\x80\xbf\x64\xf0\x9f\x98\x80\xe2\x82\xac\xf0\x9f\x98";
    size_t n = sizeof in - 1;
    char whole[256], out[256], buf[64];
    size_t wn = utf8_clean(in, n, 1, whole, NULL);
    for (size_t a = 0; a <= n; a++)
        for (size_t b = a; b <= n; b++) {
            size_t cuts[4] = {0, a, b, n}, held = 0, k = 0, used;
            for (int p = 0; p < 3; p++) {
                size_t m = cuts[p + 1] - cuts[p];
                memcpy(buf + held, in + cuts[p], m);
                k += utf8_clean(buf, held + m, p == 2, out + k, &used);
                held = held + m - used;
                assert_true(held <= UTF8_HELD_MAX);
                memmove(buf, buf + used, held);
            }
            assert_int_equal(held, 0);
            assert_int_equal(k, wn);
            assert_memory_equal(out, whole, wn);
        }
    assert_int_equal(utf8_chars(whole, wn), 13); /* a R R R b R c R R d, the emoji, the euro, R */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(well_formed_kept), cmocka_unit_test(unicode_table_3_8), cmocka_unit_test(ill_formed),
        cmocka_unit_test(held_back), cmocka_unit_test(stream_equals_whole),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
