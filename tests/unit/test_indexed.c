/* src/data/indexed.c: the .idx bytes against Megatron's published layout (parsed by hand here,
 * not by the reader), writer/reader round trips, and the reader on truncated and corrupt files. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "trident/indexed.h"
#include "trident/philox.h"

/* ---- helpers ---------------------------------------------------------------------------- */

static char g_dir[512]; /* a fresh scratch folder per process */

static int setup_dir(void **state)
{
    (void)state;
    snprintf(g_dir, sizeof g_dir, "%s/indexed-%ld", TD_TEST_TMP, (long)getpid());
    mkdir(TD_TEST_TMP, 0755);
    mkdir(g_dir, 0755);
    return 0;
}

static void path_of(char *out, size_t n, const char *name, const char *ext)
{
    snprintf(out, n, "%s/%s%s", g_dir, name, ext);
}

static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc(sz > 0 ? (size_t)sz : 1);
    assert_int_equal(fread(buf, 1, (size_t)sz, f), (size_t)sz);
    fclose(f);
    *n = (size_t)sz;
    return buf;
}

static void spit(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (n) assert_int_equal(fwrite(p, 1, n, f), n);
    fclose(f);
}

static uint64_t le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static uint32_t le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* Writes docs (lengths lens[0..ndoc), tokens concatenated in toks) under prefix name. */
static void write_dataset(const char *name, enum idx_dtype dt, const int32_t *toks, const size_t *lens, size_t ndoc)
{
    char prefix[600], err[512] = "";
    path_of(prefix, sizeof prefix, name, "");
    idx_writer *w = idx_writer_open(prefix, dt, err, sizeof err);
    assert_non_null(w);
    for (size_t i = 0, at = 0; i < ndoc; at += lens[i], i++)
        assert_int_equal(idx_writer_add(w, toks + at, lens[i], err, sizeof err), 0);
    assert_int_equal(idx_writer_finish(w, err, sizeof err), 0);
}

/* Opens name and expects failure; the message is one non-empty line. */
static void expect_open_fails(const char *name, const char *needle)
{
    char prefix[600], err[1024] = "";
    path_of(prefix, sizeof prefix, name, "");
    idx_dataset *d = idx_open(prefix, err, sizeof err);
    if (d) {
        idx_close(d);
        fail_msg("idx_open(%s) accepted a broken dataset (expected '%s')", name, needle);
    }
    assert_true(strlen(err) > 0);
    assert_null(strchr(err, '\n'));
    if (needle && !strstr(err, needle)) fail_msg("error '%s' does not mention '%s'", err, needle);
}

/* Files in g_dir whose name contains s. */
static int count_files_with(const char *s)
{
    DIR *dir = opendir(g_dir);
    assert_non_null(dir);
    int n = 0;
    for (struct dirent *e; (e = readdir(dir));)
        if (strstr(e->d_name, s)) n++;
    closedir(dir);
    return n;
}

/* ---- the byte layout, by hand ------------------------------------------------------------ */

static void dtype_choice_follows_megatron(void **state)
{
    (void)state;
    assert_int_equal(idx_dtype_for_vocab(50257), IDX_U16);
    assert_int_equal(idx_dtype_for_vocab(65499), IDX_U16);
    assert_int_equal(idx_dtype_for_vocab(65500), IDX_I32);
    assert_int_equal(idx_dtype_for_vocab(128256), IDX_I32);
    assert_int_equal(idx_dtype_size(IDX_U16), 2);
    assert_int_equal(idx_dtype_size(IDX_I32), 4);
    assert_int_equal(IDX_U16, 8);
    assert_int_equal(IDX_I32, 4);
}

static void idx_bytes_match_megatron_layout(void **state)
{
    (void)state;
    /* three documents: [10 20 30], [65535], [7 8] */
    const int32_t toks[] = {10, 20, 30, 65535, 7, 8};
    const size_t lens[] = {3, 1, 2};
    write_dataset("layout16", IDX_U16, toks, lens, 3);
    char path[600];
    size_t n;
    path_of(path, sizeof path, "layout16", ".idx");
    unsigned char *b = slurp(path, &n);
    /* magic, version, dtype, counts */
    assert_int_equal(n, 9 + 8 + 1 + 8 + 8 + 3 * 4 + 3 * 8 + 4 * 8);
    assert_memory_equal(b, "MMIDIDX\x00\x00", 9);
    assert_int_equal(le64(b + 9), 1);    /* version */
    assert_int_equal(b[17], 8);          /* uint16 */
    assert_int_equal(le64(b + 18), 3);   /* sequences */
    assert_int_equal(le64(b + 26), 4);   /* document-index entries: documents + 1 */
    const unsigned char *L = b + 34, *P = L + 3 * 4, *D = P + 3 * 8;
    assert_int_equal(le32(L + 0), 3);
    assert_int_equal(le32(L + 4), 1);
    assert_int_equal(le32(L + 8), 2);
    assert_int_equal(le64(P + 0), 0); /* byte pointers: lengths x 2 bytes */
    assert_int_equal(le64(P + 8), 6);
    assert_int_equal(le64(P + 16), 8);
    for (int j = 0; j < 4; j++) assert_int_equal(le64(D + 8 * j), (uint64_t)j);
    free(b);
    /* .bin: the raw little-endian uint16 tokens */
    path_of(path, sizeof path, "layout16", ".bin");
    b = slurp(path, &n);
    const unsigned char want[] = {10, 0, 20, 0, 30, 0, 0xff, 0xff, 7, 0, 8, 0};
    assert_int_equal(n, sizeof want);
    assert_memory_equal(b, want, sizeof want);
    free(b);
    assert_int_equal(count_files_with(".tmp-"), 0);
}

/* Sentence-level documents (Megatron's add_item / end_document): the document index holds each
 * document's end; trailing sequences form one last document at finish. */
static void idx_bytes_sentence_documents(void **state)
{
    (void)state;
    char prefix[600], err[512] = "";
    path_of(prefix, sizeof prefix, "sentences", "");
    idx_writer *w = idx_writer_open(prefix, IDX_U16, err, sizeof err);
    assert_non_null(w);
    const int32_t a[] = {1, 2}, b[] = {3}, c[] = {4, 5, 6};
    /* document 0: [1 2] [3]; document 1: [4 5 6]; document 2: empty; document 3: [3] [1 2] */
    assert_int_equal(idx_writer_add_sequence(w, a, 2, err, sizeof err), 0);
    assert_int_equal(idx_writer_add_sequence(w, b, 1, err, sizeof err), 0);
    assert_int_equal(idx_writer_end_document(w, err, sizeof err), 0);
    assert_int_equal(idx_writer_add(w, c, 3, err, sizeof err), 0);
    assert_int_equal(idx_writer_end_document(w, err, sizeof err), 0);
    assert_int_equal(idx_writer_add_sequence(w, b, 1, err, sizeof err), 0);
    assert_int_equal(idx_writer_add_sequence(w, a, 2, err, sizeof err), 0);
    assert_int_equal(idx_writer_finish(w, err, sizeof err), 0);
    char path[600];
    size_t n;
    path_of(path, sizeof path, "sentences", ".idx");
    unsigned char *m = slurp(path, &n);
    assert_int_equal(le64(m + 18), 5); /* sequences */
    assert_int_equal(le64(m + 26), 5); /* documents + 1 */
    assert_int_equal(n, 34 + 5 * 4 + 5 * 8 + 5 * 8);
    const unsigned char *D = m + 34 + 5 * 4 + 5 * 8;
    const uint64_t want[] = {0, 2, 3, 3, 5};
    for (int j = 0; j < 5; j++) assert_int_equal(le64(D + 8 * j), want[j]);
    free(m);
    idx_dataset *d = idx_open(prefix, err, sizeof err);
    assert_non_null(d);
    assert_int_equal(idx_num_sequences(d), 5);
    assert_int_equal(idx_num_documents(d), 4);
    int32_t got[3];
    idx_read(d, 2, 0, 3, got);
    assert_memory_equal(got, c, sizeof c);
    idx_close(d);
}

static void idx_bytes_int32_and_empty(void **state)
{
    (void)state;
    const int32_t toks[] = {100000, 1, 2147483647};
    const size_t lens[] = {1, 2};
    write_dataset("layout32", IDX_I32, toks, lens, 2);
    char path[600];
    size_t n;
    path_of(path, sizeof path, "layout32", ".idx");
    unsigned char *b = slurp(path, &n);
    assert_int_equal(b[17], 4);
    assert_int_equal(le64(b + 18), 2);
    assert_int_equal(le64(b + 26), 3);
    assert_int_equal(le64(b + 34 + 8 + 8), 4); /* pointer of sequence 1: 1 token x 4 bytes */
    free(b);
    path_of(path, sizeof path, "layout32", ".bin");
    b = slurp(path, &n);
    assert_int_equal(n, 12);
    assert_int_equal(le32(b), 100000);
    assert_int_equal(le32(b + 8), 2147483647u);
    free(b);

    /* no documents at all: a header and the lone leading 0 */
    write_dataset("empty", IDX_U16, NULL, NULL, 0);
    path_of(path, sizeof path, "empty", ".idx");
    b = slurp(path, &n);
    assert_int_equal(n, 34 + 8);
    assert_int_equal(le64(b + 18), 0);
    assert_int_equal(le64(b + 26), 1);
    assert_int_equal(le64(b + 34), 0);
    free(b);
    char prefix[600], err[512];
    path_of(prefix, sizeof prefix, "empty", "");
    idx_dataset *d = idx_open(prefix, err, sizeof err);
    assert_non_null(d);
    assert_int_equal(idx_num_sequences(d), 0);
    assert_int_equal(idx_num_documents(d), 0);
    assert_int_equal(idx_num_tokens(d), 0);
    idx_close(d);
}

/* ---- round trip ------------------------------------------------------------------------- */

static void roundtrip(enum idx_dtype dt, int32_t vocab)
{
    enum { NDOC = 300 };
    size_t lens[NDOC], total = 0;
    for (int i = 0; i < NDOC; i++) {
        lens[i] = (size_t)td_philox_below(7, 1, (uint64_t)i, 200); /* zero-length documents too */
        total += lens[i];
    }
    int32_t *toks = malloc(total * sizeof *toks);
    for (size_t k = 0; k < total; k++) toks[k] = (int32_t)td_philox_below(7, 2, k, (uint64_t)vocab);
    toks[0] = vocab - 1;
    write_dataset("roundtrip", dt, toks, lens, NDOC);

    char prefix[600], err[512];
    path_of(prefix, sizeof prefix, "roundtrip", "");
    idx_dataset *d = idx_open(prefix, err, sizeof err);
    if (!d) fail_msg("%s", err);
    assert_int_equal(idx_dtype(d), dt);
    assert_int_equal(idx_num_sequences(d), NDOC);
    assert_int_equal(idx_num_documents(d), NDOC);
    assert_int_equal(idx_num_tokens(d), (int64_t)total);
    const int64_t *doc = idx_doc_index(d);
    const int32_t *sl = idx_seq_lens(d);
    int32_t buf[256];
    for (size_t i = 0, at = 0; i < NDOC; at += lens[i], i++) {
        assert_int_equal(doc[i], (int64_t)i);
        assert_int_equal(sl[i], (int32_t)lens[i]);
        assert_int_equal(idx_seq_len(d, (int64_t)i), (int32_t)lens[i]);
        idx_read(d, (int64_t)i, 0, (int64_t)lens[i], buf);
        assert_memory_equal(buf, toks + at, lens[i] * sizeof *buf);
        if (lens[i] > 3) { /* a slice from the middle */
            idx_read(d, (int64_t)i, 2, (int64_t)lens[i] - 3, buf);
            assert_memory_equal(buf, toks + at + 2, (lens[i] - 3) * sizeof *buf);
        }
    }
    assert_int_equal(doc[NDOC], NDOC);
    idx_close(d);
    free(toks);
}

static void roundtrip_uint16(void **state)
{
    (void)state;
    roundtrip(IDX_U16, 65535 + 1);
}

static void roundtrip_int32(void **state)
{
    (void)state;
    roundtrip(IDX_I32, 1 << 30);
}

/* ---- writer errors and atomicity ---------------------------------------------------------- */

static void writer_is_atomic_and_abort_cleans_up(void **state)
{
    (void)state;
    char prefix[600], path[600], err[512] = "";
    path_of(prefix, sizeof prefix, "atomic", "");
    idx_writer *w = idx_writer_open(prefix, IDX_U16, err, sizeof err);
    assert_non_null(w);
    const int32_t ok[] = {1, 2, 3};
    assert_int_equal(idx_writer_add(w, ok, 3, err, sizeof err), 0);
    /* nothing under the final names until finish */
    path_of(path, sizeof path, "atomic", ".bin");
    assert_int_equal(access(path, F_OK), -1);
    assert_int_equal(count_files_with("atomic.bin.tmp-"), 1);
    /* a token that does not fit uint16 is refused with a message */
    const int32_t big[] = {5, 65536};
    assert_int_equal(idx_writer_add(w, big, 2, err, sizeof err), -1);
    assert_non_null(strstr(err, "65536"));
    const int32_t neg[] = {-1};
    assert_int_equal(idx_writer_add(w, neg, 1, err, sizeof err), -1);
    idx_writer_abort(w);
    assert_int_equal(count_files_with("atomic"), 0);

    /* finish replaces an existing dataset in one step and leaves no temporaries */
    const int32_t t1[] = {4};
    const size_t l1[] = {1};
    write_dataset("atomic", IDX_U16, t1, l1, 1);
    const int32_t t2[] = {5, 6};
    const size_t l2[] = {2};
    write_dataset("atomic", IDX_U16, t2, l2, 1);
    assert_int_equal(count_files_with("atomic"), 2);
    idx_dataset *d = idx_open(prefix, err, sizeof err);
    assert_non_null(d);
    assert_int_equal(idx_num_tokens(d), 2);
    idx_close(d);

    /* a writer into a folder that does not exist fails at open, naming the path */
    snprintf(path, sizeof path, "%s/no/such/dir/x", g_dir);
    assert_null(idx_writer_open(path, IDX_U16, err, sizeof err));
    assert_non_null(strstr(err, "no/such/dir"));
    assert_null(idx_writer_open(prefix, IDX_F32, err, sizeof err));
}

/* ---- the reader on broken files ----------------------------------------------------------- */

/* A small valid dataset "good" (uint16, documents [1 2 3] [4] [5 6]) and its bytes. */
static unsigned char *good_idx(size_t *n)
{
    const int32_t toks[] = {1, 2, 3, 4, 5, 6};
    const size_t lens[] = {3, 1, 2};
    write_dataset("good", IDX_U16, toks, lens, 3);
    char path[600];
    path_of(path, sizeof path, "good", ".idx");
    return slurp(path, n);
}

/* Writes idx bytes as bad.idx and the good .bin as bad.bin. */
static void write_bad(const unsigned char *idx, size_t n)
{
    char path[600];
    size_t bn;
    path_of(path, sizeof path, "good", ".bin");
    unsigned char *bin = slurp(path, &bn);
    path_of(path, sizeof path, "bad", ".bin");
    spit(path, bin, bn);
    free(bin);
    path_of(path, sizeof path, "bad", ".idx");
    spit(path, idx, n);
}

static void reader_rejects_every_truncation(void **state)
{
    (void)state;
    size_t n;
    unsigned char *idx = good_idx(&n);
    for (size_t len = 0; len < n; len++) {
        write_bad(idx, len);
        expect_open_fails("bad", NULL);
    }
    write_bad(idx, n);
    char prefix[600], err[512];
    path_of(prefix, sizeof prefix, "bad", "");
    idx_dataset *d = idx_open(prefix, err, sizeof err);
    assert_non_null(d);
    idx_close(d);
    /* trailing garbage is not silently ignored */
    unsigned char *longer = calloc(n + 1, 1);
    memcpy(longer, idx, n);
    write_bad(longer, n + 1);
    expect_open_fails("bad", "truncated or corrupt");
    free(longer);
    free(idx);
}

static void reader_rejects_short_or_long_bin(void **state)
{
    (void)state;
    size_t n, bn;
    unsigned char *idx = good_idx(&n);
    char path[600];
    path_of(path, sizeof path, "good", ".bin");
    unsigned char *bin = slurp(path, &bn);
    assert_int_equal(bn, 12);
    unsigned char more[14] = {0};
    memcpy(more, bin, bn);
    size_t sizes[] = {0, 1, 2, 10, 11, 13, 14};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        path_of(path, sizeof path, "bad", ".idx");
        spit(path, idx, n);
        path_of(path, sizeof path, "bad", ".bin");
        spit(path, more, sizes[k]);
        expect_open_fails("bad", ".bin");
    }
    /* a missing .bin names the file */
    unlink(path);
    expect_open_fails("bad", "bad.bin");
    free(bin);
    free(idx);
}

static void reader_rejects_corrupt_fields(void **state)
{
    (void)state;
    size_t n;
    unsigned char *good = good_idx(&n);
    unsigned char *b = malloc(n);
    enum { LENS = 34, PTRS = 34 + 3 * 4, DOCS = 34 + 3 * 4 + 3 * 8 };
#define CASE(edit, needle)                                                                                \
    do {                                                                                                  \
        memcpy(b, good, n);                                                                               \
        edit;                                                                                             \
        write_bad(b, n);                                                                                  \
        expect_open_fails("bad", needle);                                                                 \
    } while (0)
    CASE(b[0] = 'X', "magic");
    CASE(b[8] = 1, "magic");
    CASE(put64(b + 9, 2), "version");
    CASE(put64(b + 9, 0), "version");
    CASE(b[17] = 0, "dtype");
    CASE(b[17] = 9, "dtype");
    CASE(b[17] = IDX_F64, "dtype");
    CASE(b[17] = IDX_I32, "points at"); /* 12 bytes are 3 int32 tokens, not the 6 the lengths say */
    CASE(put64(b + 18, 4), "promises");
    CASE(put64(b + 18, 2), "promises");
    CASE(put64(b + 18, UINT64_MAX), "promises");
    CASE(put64(b + 18, UINT64_MAX / 12 + 1), "promises");
    CASE(put64(b + 26, UINT64_MAX / 8 + 1), "promises");
    CASE(put64(b + 26, 5), "promises");
    CASE(put64(b + 26, 3), "promises");
    CASE(put32(b + LENS, (uint32_t)-1), "negative");
    CASE(put32(b + LENS, 4), "points at");       /* sequence 1 then starts in the wrong place */
    CASE(put32(b + LENS + 8, 3), "runs past");   /* last sequence past the end of .bin */
    CASE(put32(b + LENS + 8, 1), "holds");       /* .bin longer than the index says */
    CASE(put64(b + PTRS, 2), "points at");
    CASE(put64(b + PTRS + 8, 4), "points at");
    CASE(put64(b + PTRS + 16, UINT64_MAX), "points at");
    CASE(put64(b + DOCS, 1), "starts at");
    CASE(put64(b + DOCS + 8, 3), "outside");
    CASE(put64(b + DOCS + 8, (uint64_t)-1), "outside");
    CASE(put64(b + DOCS + 16, 0), "outside"); /* 0 1 0 3: decreasing */
    CASE(put64(b + DOCS + 24, 2), "ends at");
    CASE(put64(b + DOCS + 24, 4), "outside");
#undef CASE
    /* one case that must stay accepted: a document of no sequences (Megatron writes this for an
     * empty document): doc index 0 1 1 3 */
    memcpy(b, good, n);
    put64(b + DOCS + 16, 1);
    put64(b + DOCS + 24, 3);
    write_bad(b, n);
    char prefix[600], err[512];
    path_of(prefix, sizeof prefix, "bad", "");
    idx_dataset *d = idx_open(prefix, err, sizeof err);
    if (!d) fail_msg("%s", err);
    assert_int_equal(idx_num_documents(d), 3);
    idx_close(d);
    free(b);
    free(good);
    /* missing files */
    expect_open_fails("does-not-exist", "does-not-exist.idx");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(dtype_choice_follows_megatron),
        cmocka_unit_test(idx_bytes_match_megatron_layout),
        cmocka_unit_test(idx_bytes_sentence_documents),
        cmocka_unit_test(idx_bytes_int32_and_empty),
        cmocka_unit_test(roundtrip_uint16),
        cmocka_unit_test(roundtrip_int32),
        cmocka_unit_test(writer_is_atomic_and_abort_cleans_up),
        cmocka_unit_test(reader_rejects_every_truncation),
        cmocka_unit_test(reader_rejects_short_or_long_bin),
        cmocka_unit_test(reader_rejects_corrupt_fields),
    };
    return cmocka_run_group_tests(tests, setup_dir, NULL);
}
