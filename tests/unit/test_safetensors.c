/* src/ckpt/safetensors: write/read round trip; the byte layout checked by hand (length prefix,
 * JSON header, alignment, data order); CRC-32 against the check value and zlib; and the strict
 * parser against a catalogue of malformed headers, each rejected with one line. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <omp.h>
#include <zlib.h>

#include "trident/safetensors.h"

static char g_path[512];

static int setup(void **state)
{
    (void)state;
    snprintf(g_path, sizeof g_path, "%s/test_safetensors_%ld.safetensors", TD_TEST_TMP, (long)getpid());
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    unlink(g_path);
    return 0;
}

static void crc32_matches_reference(void **state)
{
    (void)state;
    assert_int_equal(st_crc32(0, "123456789", 9), 0xCBF43926u); /* the CRC-32 check value */
    assert_int_equal(st_crc32(0, "", 0), 0);
    uint8_t buf[4099];
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (uint8_t)(i * 131 + (i >> 5));
    /* every alignment and length, and continuation in pieces, against zlib */
    for (size_t off = 0; off < 9; off++)
        for (size_t n = 0; n < 70; n += 3)
            assert_int_equal(st_crc32(0, buf + off, n), (uint32_t)crc32(0, buf + off, (uInt)n));
    uint32_t c = st_crc32(0, buf, 1000);
    c = st_crc32(c, buf + 1000, sizeof buf - 1000);
    assert_int_equal(c, (uint32_t)crc32(0, buf, sizeof buf));
    /* large buffers are split over threads and the pieces' CRCs combined */
    size_t big = (9u << 20) + 5;
    uint8_t *p = malloc(big);
    for (size_t i = 0; i < big; i++) p[i] = (uint8_t)(i * 2654435761u >> 13);
    int saved = omp_get_max_threads();
    for (int nt = 1; nt <= 5; nt += 2) {
        omp_set_num_threads(nt);
        assert_int_equal(st_crc32(0, p + 3, big - 3), (uint32_t)crc32(0, p + 3, (uInt)(big - 3)));
        assert_int_equal(st_crc32(0x12345678u, p, big), (uint32_t)crc32(0x12345678u, p, (uInt)big));
    }
    omp_set_num_threads(saved);
    free(p);
}

static void round_trip(void **state)
{
    (void)state;
    float a[6] = {1, 2, 3, 4, 5, 6};
    int32_t b[3] = {-1, 0, 7};
    uint16_t c[1] = {0x3c00};
    st_entry e[4] = {
        {"layers.0.w", ST_F32, 2, {2, 3}, a, sizeof a},
        {"ids \"quoted\"", ST_I32, 1, {3}, b, sizeof b},
        {"empty", ST_F32, 2, {0, 5}, NULL, 0},
        {"half", ST_F16, 0, {0}, c, sizeof c},
    };
    const char *keys[] = {"format", "note"}, *vals[] = {"pt", "a \"json\" {value}\n"};
    char err[512] = "";
    assert_int_equal(st_write(g_path, e, 4, keys, vals, 2, 1, err, sizeof err), 0);

    st_file *f = st_open(g_path, err, sizeof err);
    if (!f) fail_msg("%s", err);
    assert_int_equal(f->h.ntensors, 4);
    assert_int_equal(f->h.data_start % 8, 0);
    assert_int_equal(f->h.data_len, sizeof a + sizeof b + sizeof c);
    const st_tensor *t = st_find(&f->h, "layers.0.w");
    assert_non_null(t);
    assert_int_equal(t->dtype, ST_F32);
    assert_int_equal(t->ndim, 2);
    assert_int_equal(t->shape[0], 2);
    assert_int_equal(t->shape[1], 3);
    assert_int_equal(t->begin, 0);
    assert_memory_equal(st_data(f, t), a, sizeof a);
    t = st_find(&f->h, "ids \"quoted\"");
    assert_non_null(t);
    assert_int_equal(t->begin, sizeof a);
    assert_memory_equal(st_data(f, t), b, sizeof b);
    t = st_find(&f->h, "half");
    assert_int_equal(t->ndim, 0);
    assert_memory_equal(st_data(f, t), c, sizeof c);
    assert_non_null(st_find(&f->h, "empty"));
    assert_null(st_find(&f->h, "nope"));
    assert_string_equal(st_meta(&f->h, "format"), "pt");
    assert_string_equal(st_meta(&f->h, "note"), vals[1]);
    /* the first 8 bytes are the header length, little-endian */
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | f->map[i];
    assert_int_equal(n + 8, f->h.data_start);
    assert_int_equal(f->map[8], '{');
    st_close(f);
}

/* Builds a file image: the 8-byte length of `json`, json, then `data_len` bytes. */
static uint8_t *image(const char *json, size_t data_len, size_t *size)
{
    size_t n = strlen(json);
    *size = 8 + n + data_len;
    uint8_t *p = calloc(1, *size);
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)((uint64_t)n >> (8 * i));
    memcpy(p + 8, json, n);
    return p;
}

static void expect_reject(const char *json, size_t data_len, const char *why)
{
    size_t size;
    uint8_t *p = image(json, data_len, &size);
    st_header h;
    char err[512] = "";
    int rc = st_parse(p, size, size, &h, err, sizeof err);
    if (rc == 0) fail_msg("accepted: %s", json);
    if (!strstr(err, why)) fail_msg("for %s: message '%s' lacks '%s'", json, err, why);
    assert_null(strchr(err, '\n'));
    free(p);
}

static void expect_accept(const char *json, size_t data_len)
{
    size_t size;
    uint8_t *p = image(json, data_len, &size);
    st_header h;
    char err[512] = "";
    if (st_parse(p, size, size, &h, err, sizeof err)) fail_msg("rejected %s: %s", json, err);
    st_header_free(&h);
    free(p);
}

#define T8 "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}"

static long long rss_file_bytes(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "RssFile:", 8) == 0) kb = atoll(line + 8);
    if (f) fclose(f);
    return kb * 1024;
}

/* st_release drops a tensor's mapped pages from the process's resident memory, and its bytes read
 * the same afterwards (from the page cache): a checkpoint read tensor by tensor holds one tensor's
 * pages, where the whole file's stayed resident (a resharded resume measured 486 MiB of RSS for a
 * 278 MiB run). */
static void release_drops_mapped_pages(void **state)
{
    (void)state;
    size_t n = (size_t)6 << 20; /* 24 MiB of floats in each of two tensors */
    float *a = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) a[i] = (float)(i % 1000003);
    st_entry e[2] = {{"a", ST_F32, 1, {(int64_t)n}, a, n * sizeof(float)}, {"b", ST_F32, 1, {(int64_t)n}, a, n * sizeof(float)}};
    char err[512] = "";
    assert_int_equal(st_write(g_path, e, 2, NULL, NULL, 0, 0, err, sizeof err), 0);
    st_file *f = st_open(g_path, err, sizeof err);
    if (!f) fail_msg("%s", err);
    if (rss_file_bytes() < 0) skip(); /* no RssFile line (a kernel before 4.5) */
    long long before = rss_file_bytes();
    const volatile uint8_t *p = st_data(f, &f->h.tensors[0]);
    unsigned sum = 0;
    for (size_t i = 0; i < n * sizeof(float); i += 4096) sum += p[i]; /* touch every page */
    long long touched = rss_file_bytes();
    st_release(f, &f->h.tensors[0]);
    long long released = rss_file_bytes();
    print_message("  RssFile: %.1f MiB before, %.1f after reading 24 MiB, %.1f after st_release (%u)\n", before / 1048576.0,
                  touched / 1048576.0, released / 1048576.0, sum & 1);
    assert_true(touched - before > (long long)(n * sizeof(float)) * 3 / 4);
    assert_true(touched - released > (long long)(n * sizeof(float)) * 3 / 4);
    assert_memory_equal(st_data(f, &f->h.tensors[0]), a, n * sizeof(float)); /* read again, the same bytes */
    assert_memory_equal(st_data(f, &f->h.tensors[1]), a, n * sizeof(float)); /* the neighbour untouched */
    st_close(f);
    free(a);
}

static void parser_accepts_valid(void **state)
{
    (void)state;
    expect_accept("{}", 0);
    expect_accept("{" T8 "}", 8);
    expect_accept("{" T8 "}      ", 8); /* space padding */
    expect_accept("{\"__metadata__\":{\"k\":\"v\"}," T8 "}", 8);
    expect_accept("{\"b\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[8,11]}," T8 "}", 11); /* any order */
    expect_accept("{\"z\":{\"dtype\":\"BF16\",\"shape\":[0,4],\"data_offsets\":[0,0]}}", 0);
    expect_accept("{\"\xc3\xa9\":{\"dtype\":\"I8\",\"shape\":[],\"data_offsets\":[0,1]}}", 1); /* UTF-8 name */
}

static void parser_rejects_malformed(void **state)
{
    (void)state;
    /* the length prefix */
    st_header h;
    char err[512];
    uint8_t shortf[5] = {0};
    assert_int_equal(st_parse(shortf, 5, 5, &h, err, sizeof err), -1);
    assert_non_null(strstr(err, "too short"));
    uint8_t huge[16] = {0, 0, 0, 0, 0, 0, 0, 0x10, '{', '}'};
    assert_int_equal(st_parse(huge, 16, 16, &h, err, sizeof err), -1);
    assert_non_null(strstr(err, "limit"));
    uint8_t past[12] = {100, 0, 0, 0, 0, 0, 0, 0, '{', '}', ' ', ' '};
    assert_int_equal(st_parse(past, 12, 12, &h, err, sizeof err), -1);
    assert_non_null(strstr(err, "truncated"));

    /* JSON */
    expect_reject("{\"a\":", 0, "not valid JSON");
    expect_reject("[1,2]", 0, "start with '{'");
    expect_reject(" {}", 0, "start with '{'");
    expect_reject("{}x", 0, "after its JSON object");
    expect_reject("{}\n", 0, "after its JSON object");
    expect_reject("{\"a\x01\":1}", 0, "not UTF-8 text"); /* a control character */
    expect_reject("{\"a\nb\":1}", 0, "not UTF-8 text"); /* a raw newline inside a string */
    expect_reject("{\"a\\nb\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"q\\n\":1}}", 8, "unknown field 'q?'");
    expect_reject("{\"\xff\":1}", 0, "not UTF-8 text");
    expect_reject("{\"\xc0\xaf\":1}", 0, "not UTF-8 text"); /* overlong */
    expect_reject("{\"\xed\xa0\x80\":1}", 0, "not UTF-8 text"); /* surrogate */

    /* fields */
    expect_reject("{\"a\":5}", 0, "not a JSON object");
    expect_reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, "lacks data_offsets");
    expect_reject("{\"a\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "unknown dtype");
    expect_reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}", 8, "unknown field");
    expect_reject("{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "twice");
    expect_reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, "non-negative integer");
    expect_reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,8]}}", 8, "non-negative integer");
    expect_reject("{\"a\":{\"dtype\":\"F32\",\"shape\":\"2\",\"data_offsets\":[0,8]}}", 8, "not an array");
    expect_reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4,
                  "dimensions");
    expect_reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}}", 8,
                  "overflows");
    expect_reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8, "[begin, end]");
    expect_reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, "ends before");
    expect_reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,12]}}", 12, "need 8");
    expect_reject("{\"__metadata__\":{\"k\":1}}", 0, "not a string");
    expect_reject("{\"__metadata__\":[]}", 0, "not a JSON object");
    expect_reject("{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0, "twice");
    expect_reject("{\"\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "empty name");

    /* byte ranges */
    expect_reject("{" T8 "," T8 "}", 16, "appears twice");
    expect_reject("{" T8 ",\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, "overlaps");
    expect_reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, "belong to no tensor");
    expect_reject("{" T8 "}", 4, "truncated");
    expect_reject("{" T8 "}", 9, "after the last tensor");
    expect_reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,1e300]}}", 8,
                  "[begin, end]");
}

static void open_names_the_file(void **state)
{
    (void)state;
    char err[512] = "";
    assert_null(st_open("/nonexistent/x.safetensors", err, sizeof err));
    assert_non_null(strstr(err, "/nonexistent/x.safetensors"));
    FILE *f = fopen(g_path, "wb");
    fwrite("\x02\0\0\0\0\0\0\0{", 1, 9, f);
    fclose(f);
    assert_null(st_open(g_path, err, sizeof err));
    assert_non_null(strstr(err, g_path));
    assert_non_null(strstr(err, "truncated"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(crc32_matches_reference),
        cmocka_unit_test_setup_teardown(round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(release_drops_mapped_pages, setup, teardown),
        cmocka_unit_test(parser_accepts_valid),
        cmocka_unit_test(parser_rejects_malformed),
        cmocka_unit_test_setup_teardown(open_names_the_file, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
