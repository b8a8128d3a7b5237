/* src/backend/cuda/cu_drop.h, compiled here as C: the CUDA dropout kernels' Philox rounds
 * against Random123's known answers, their counters against the cpu backend's be_drop_block on
 * random coordinates (every field, its high bits and masks included), and the cut of a row of
 * units into Philox blocks (one thread a block) against a plain count. Runs without a GPU: it is
 * the same source the device compiles, so a GPU run of the kernels draws the cpu's masks as far
 * as these functions go; tests/gpu/test_cuda_elementwise.c holds the kernels themselves. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "backend/be_ops.h"
#include "backend/cuda/cu_drop.h"

static void philox_known_answers(void **state)
{
    (void)state;
    /* Random123 kat_vectors, philox4x32_10 */
    struct { uint32_t ctr[4], key[2], out[4]; } kat[] = {
        {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
        {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff},
         {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
        {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0},
         {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
    };
    for (size_t i = 0; i < sizeof kat / sizeof kat[0]; i++) {
        uint32_t r[4];
        cu_philox(r, kat[i].ctr, kat[i].key[0], kat[i].key[1]);
        for (int j = 0; j < 4; j++) assert_int_equal(r[j], kat[i].out[j]);
    }
}

static uint64_t rng_next(uint64_t *s) /* xorshift64* */
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1DULL;
}

/* cu_drop_block == be_drop_block word for word, and the keep decision of every unit agrees with
 * be_drop_keep, over 20000 random coordinates: seeds with both halves set, both kinds, sites
 * beyond 16 bits (masked), samples beyond 32 and 40 bits, positions and units beyond 2^31. */
static void blocks_match_cpu(void **state)
{
    (void)state;
    uint64_t s = 0x9E3779B97F4A7C15ULL;
    for (int it = 0; it < 20000; it++) {
        uint64_t seed = rng_next(&s);
        int kind = it % 2 ? BE_DROP_ATTN : BE_DROP_HIDDEN;
        int site = (int)(rng_next(&s) % (it % 7 ? 65536u : 1u << 20));
        int64_t sample = (int64_t)(rng_next(&s) >> (it % 3 ? 40 : 20)); /* up to 2^24 or 2^44 */
        int64_t pos = (int64_t)(rng_next(&s) % (it % 5 ? 4096u : 1ull << 33));
        int64_t unit = (int64_t)(rng_next(&s) % (it % 4 ? 50304u : 1ull << 36));
        uint32_t r[4];
        cu_drop_block(r, seed, kind, site, sample, pos, unit);
        td_philox_ctr c = be_drop_block(seed, kind, site, sample, pos, unit);
        for (int w = 0; w < 4; w++) assert_int_equal(r[w], c.v[w]);
        be_drop d = {.p = (float)(it % 10) / 10.0f, .seed = seed, .site = site};
        assert_int_equal(r[unit & 3] >= be_drop_threshold(d.p), be_drop_keep(&d, kind, sample, pos, unit));
    }
}

/* The kernels give Philox block first + k (k < nblocks) of a row to one thread, which handles its
 * units inside [unit0, unit0 + n): every unit of the row exactly once, and no block without one. */
static void row_cut_covers_each_unit_once(void **state)
{
    (void)state;
    static int seen[4096];
    const int64_t starts[] = {0, 1, 2, 3, 4, 5, 7, 32, 1023, 1LL << 33};
    for (size_t si = 0; si < sizeof starts / sizeof starts[0]; si++) {
        int64_t unit0 = starts[si];
        for (int64_t n = 1; n <= 4000; n += n < 40 ? 1 : 97) {
            memset(seen, 0, sizeof seen);
            int64_t first = cu_drop_first_block(unit0), nb = cu_drop_nblocks(unit0, n);
            assert_true(nb <= (n + 3) / 4 + 1);
            for (int64_t k = 0; k < nb; k++) {
                int units = 0;
                for (int w = 0; w < 4; w++) {
                    int64_t c = 4 * (first + k) + w - unit0;
                    if (c < 0 || c >= n) continue;
                    seen[c]++;
                    units++;
                }
                assert_true(units > 0);
            }
            for (int64_t c = 0; c < n; c++) assert_int_equal(seen[c], 1);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(philox_known_answers),
        cmocka_unit_test(blocks_match_cpu),
        cmocka_unit_test(row_cut_covers_each_unit_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
