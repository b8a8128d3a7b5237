/* TensorBoard event files (src/train/tensorboard.c): CRC32C against RFC 3720's test vectors and
 * the check value; a file written by tb_open/tb_scalar read back by a reader written here from
 * the TFRecord and protocol-buffer specifications (both CRCs verified, every field decoded). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <unistd.h>
#include <math.h>

#include <cmocka.h>

#include "trident/tensorboard.h"

static void crc32c(void **state)
{
    (void)state;
    uint8_t zeros[32] = {0}, ones[32], inc[32];
    for (int i = 0; i < 32; i++) ones[i] = 0xFF, inc[i] = (uint8_t)i;
    assert_int_equal(tb_crc32c(zeros, 32), 0x8A9136AAu);
    assert_int_equal(tb_crc32c(ones, 32), 0x62A8AB43u);
    assert_int_equal(tb_crc32c(inc, 32), 0x46DD794Eu);
    assert_int_equal(tb_crc32c("123456789", 9), 0xE3069283u);
    assert_int_equal(tb_mask_crc(0), 0xa282ead8u);
    assert_int_equal(tb_mask_crc(0x12345678u), (((0x12345678u >> 15) | (0x12345678u << 17)) + 0xa282ead8u));
}

static uint64_t le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}
static uint64_t varint(const uint8_t **p)
{
    uint64_t v = 0;
    for (int s = 0;; s += 7) {
        uint8_t b = *(*p)++;
        v |= (uint64_t)(b & 0x7f) << s;
        if (!(b & 0x80)) return v;
    }
}

typedef struct {
    int has_version;
    int64_t step;
    char tag[300];
    float value;
} event;

/* Decodes an Event: wall_time (1, fixed64), step (2, varint), file_version (3), summary (5). */
static void decode(const uint8_t *p, size_t n, event *e)
{
    memset(e, 0, sizeof *e);
    const uint8_t *end = p + n;
    while (p < end) {
        uint64_t key = varint(&p);
        int field = (int)(key >> 3), wire = (int)(key & 7);
        if (wire == 1) { assert_int_equal(field, 1); p += 8; }
        else if (wire == 0) { assert_int_equal(field, 2); e->step = (int64_t)varint(&p); }
        else {
            assert_int_equal(wire, 2);
            size_t len = varint(&p);
            if (field == 3) { assert_memory_equal(p, "brain.Event:2", 13); e->has_version = 1; }
            else {
                assert_int_equal(field, 5); /* Summary { Value value = 1 { tag = 1; simple_value = 2 } } */
                const uint8_t *q = p;
                assert_int_equal(varint(&q), 1 << 3 | 2);
                size_t vl = varint(&q);
                const uint8_t *vend = q + vl;
                while (q < vend) {
                    uint64_t k = varint(&q);
                    if (k == (1 << 3 | 2)) { size_t tl = varint(&q); memcpy(e->tag, q, tl); e->tag[tl] = 0; q += tl; }
                    else { assert_int_equal(k, 2 << 3 | 5); uint32_t u = (uint32_t)le(q, 4); memcpy(&e->value, &u, 4); q += 4; }
                }
            }
            p += len;
        }
    }
}

/* Counts DIR's events.out.tfevents.* files (the last one's path in path); removes them if remove. */
static int event_files(const char *dir, char *path, size_t cap, int remove)
{
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        if (strncmp(de->d_name, "events.out.tfevents.", 20) == 0) {
            snprintf(path, cap, "%s/%s", dir, de->d_name);
            if (remove) unlink(path);
            n++;
        }
    closedir(d);
    return n;
}

static void write_and_read_back(void **state)
{
    (void)state;
    char dir[512];
    snprintf(dir, sizeof dir, "%s/tb_unit/run1", TD_TEST_TMP);
    char stale[1024];
    event_files(dir, stale, sizeof stale, 1); /* an earlier run's file */
    tb_writer *w = tb_open(dir);
    tb_scalar(w, "lm loss", 1, 10.5);
    tb_scalar(w, "learning-rate", 300000, 6e-4);
    met_record r = {.iteration = 7, .lm_loss = 3.25, .lr = 1e-3, .grad_norm = 0.5, .loss_scale = 1024,
                    .tokens_per_s = 1000, .mfu = 0.5, .elapsed_ms = 250, .val_loss = 2.0};
    tb_log_iteration(w, &r, 1, 1);
    /* interval 2: iteration 7 writes only its validation tags, 8 the training tags (unscaled: no
     * loss-scale), 9 nothing */
    tb_log_iteration(w, &r, 1, 2);
    met_record r8 = r, r9 = r;
    r8.iteration = 8, r8.val_loss = NAN;
    r9.iteration = 9, r9.val_loss = NAN;
    tb_log_iteration(w, &r8, 0, 2);
    tb_log_iteration(w, &r9, 0, 2);
    char longest[257];
    memset(longest, 'x', 256);
    longest[256] = 0;
    tb_scalar(w, longest, -1, -2.5);
    tb_close(w);
    char path[1024];
    assert_int_equal(event_files(dir, path, sizeof path, 0), 1);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    uint8_t buf[8192];
    size_t n = fread(buf, 1, sizeof buf, f), off = 0;
    fclose(f);
    event ev[32];
    int k = 0;
    while (off < n) { /* TFRecord: length, masked CRC of it, data, masked CRC of the data */
        uint64_t len = le(buf + off, 8);
        assert_int_equal(le(buf + off + 8, 4), tb_mask_crc(tb_crc32c(buf + off, 8)));
        assert_int_equal(le(buf + off + 12 + len, 4), tb_mask_crc(tb_crc32c(buf + off + 12, len)));
        decode(buf + off + 12, len, &ev[k++]);
        off += 12 + len + 4;
    }
    assert_int_equal(off, n);
    assert_int_equal(k, 1 + 2 + 9 + 2 + 6 + 1);
    assert_true(ev[0].has_version);
    assert_string_equal(ev[1].tag, "lm loss");
    assert_int_equal(ev[1].step, 1);
    assert_true(ev[1].value == 10.5f);
    assert_int_equal(ev[2].step, 300000);
    assert_true(ev[2].value == 6e-4f);
    const char *tags[] = {"lm loss", "learning-rate", "grad-norm", "loss-scale", "tokens-per-second", "mfu",
                          "iteration-time", "lm loss validation", "lm loss validation ppl"};
    for (int i = 0; i < 9; i++) {
        assert_string_equal(ev[3 + i].tag, tags[i]);
        assert_int_equal(ev[3 + i].step, 7);
    }
    assert_true(ev[6].value == 1024.0f);
    assert_true(ev[9].value == 0.25f);
    assert_string_equal(ev[12].tag, "lm loss validation");
    assert_string_equal(ev[13].tag, "lm loss validation ppl");
    assert_int_equal(ev[13].step, 7);
    const char *unscaled[] = {"lm loss", "learning-rate", "grad-norm", "tokens-per-second", "mfu", "iteration-time"};
    for (int i = 0; i < 6; i++) {
        assert_string_equal(ev[14 + i].tag, unscaled[i]);
        assert_int_equal(ev[14 + i].step, 8);
    }
    assert_string_equal(ev[20].tag, longest);
    assert_int_equal(ev[20].step, -1); /* a ten-byte varint */
    assert_true(ev[20].value == -2.5f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(crc32c),
        cmocka_unit_test(write_and_read_back),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
