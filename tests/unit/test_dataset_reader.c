/* src/data/dataset_reader.c: the dataset-reader seam over the indexed format. A dataset written
 * with the indexed writer (tokens, sequences and documents chosen here) is read back through the
 * seam: counts, lengths, the document index, token ranges, the token file and byte offsets
 * (worked by hand from the dtype's width), the id scan; and a prefix no format knows gets the
 * first format's error, word for word what idx_open says, and dsr_probe names the file missing. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "trident/dataset_reader.h"
#include "trident/indexed.h"

static char g_prefix[512];

/* Sequences (lengths 3, 0, 4, 2) in documents {0, 1}, {2}, {3}: tokens 10.. counting up, with
 * id 70000 nowhere (uint16). */
static const int32_t SEQ0[] = {10, 11, 12}, SEQ2[] = {13, 14, 15, 16}, SEQ3[] = {17, 900};

static int setup(void **state)
{
    (void)state;
    char dir[400];
    snprintf(dir, sizeof dir, "%s/dsr-%ld", TD_TEST_TMP, (long)getpid());
    mkdir(TD_TEST_TMP, 0755);
    mkdir(dir, 0755);
    snprintf(g_prefix, sizeof g_prefix, "%s/ds", dir);
    char err[512] = "";
    idx_writer *w = idx_writer_open(g_prefix, IDX_U16, err, sizeof err);
    assert_non_null(w);
    assert_int_equal(idx_writer_add_sequence(w, SEQ0, 3, err, sizeof err), 0);
    assert_int_equal(idx_writer_add_sequence(w, SEQ0, 0, err, sizeof err), 0);
    idx_writer_end_document(w);
    assert_int_equal(idx_writer_add(w, SEQ2, 4, err, sizeof err), 0);
    assert_int_equal(idx_writer_add(w, SEQ3, 2, err, sizeof err), 0);
    assert_int_equal(idx_writer_finish(w, err, sizeof err), 0);
    return 0;
}

static void reads_the_indexed_format(void **state)
{
    (void)state;
    char err[512] = "";
    dsr_reader *r = dsr_open(g_prefix, err, sizeof err);
    assert_non_null(r);
    assert_string_equal(dsr_format(r), "indexed");
    assert_string_equal(dsr_prefix(r), g_prefix);
    assert_int_equal(dsr_num_sequences(r), 4);
    assert_int_equal(dsr_num_documents(r), 3);
    assert_int_equal(dsr_num_tokens(r), 9);
    const int32_t lens[] = {3, 0, 4, 2};
    const int64_t docs[] = {0, 2, 3, 4};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(dsr_seq_len(r, i), lens[i]);
        assert_int_equal(dsr_seq_lens(r)[i], lens[i]);
        assert_int_equal(dsr_doc_index(r)[i], docs[i]);
    }
    int32_t out[4] = {-1, -1, -1, -1};
    dsr_read(r, 2, 1, 3, out);
    assert_int_equal(out[0], 14);
    assert_int_equal(out[1], 15);
    assert_int_equal(out[2], 16);
    dsr_read(r, 3, 0, 2, out);
    assert_int_equal(out[0], 17);
    assert_int_equal(out[1], 900);
    assert_string_equal(dsr_token_type(r), "uint16");
    char *bin = dsr_token_file(r), want[600];
    snprintf(want, sizeof want, "%s.bin", g_prefix);
    assert_string_equal(bin, want);
    free(bin);
    /* sequence 3 starts after 3 + 0 + 4 tokens of 2 bytes: its token 1 is at byte (7 + 1) * 2 */
    assert_int_equal(dsr_token_byte_offset(r, 3, 1), 16);
    int64_t off = -1;
    int32_t id = -1;
    assert_int_equal(dsr_find_id_outside(r, 1000, &off, &id), -1);
    assert_int_equal(dsr_find_id_outside(r, 900, &off, &id), 3);
    assert_int_equal(off, 1);
    assert_int_equal(id, 900);
    assert_int_equal(dsr_find_id_outside(r, 16, &off, &id), 2);
    assert_int_equal(off, 3);
    assert_int_equal(id, 16);
    dsr_close(r);
}

/* A prefix no format's probe knows: the first row's (indexed) error, as idx_open words it. */
static void unknown_prefix_gets_the_first_formats_error(void **state)
{
    (void)state;
    char missing[600], e1[512] = "", e2[512] = "";
    snprintf(missing, sizeof missing, "%s-absent", g_prefix);
    assert_null(dsr_open(missing, e1, sizeof e1));
    assert_null(idx_open(missing, e2, sizeof e2));
    assert_true(e1[0] != 0);
    assert_string_equal(e1, e2);
    assert_non_null(strstr(e1, "-absent.idx"));
    char file[700], want[700];
    assert_int_equal(dsr_probe(missing, file, sizeof file), ENOENT);
    snprintf(want, sizeof want, "%s.idx", missing);
    assert_string_equal(file, want);
    assert_int_equal(dsr_probe(g_prefix, file, sizeof file), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(reads_the_indexed_format),
        cmocka_unit_test(unknown_prefix_gets_the_first_formats_error),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
