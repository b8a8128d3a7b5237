/* run_tokenizer_facts (src/train/model.c): a training run asks for its tokenizer's vocabulary and
 * end-of-document id in four places (the resume's check, the model's configuration, validation,
 * the data source) and the tokenizer is read once a process for the same flags. Held by what the
 * cache must and must not do: the GPT-2 files copied to a folder of their own, asked once, then
 * removed — the same flags still answer (from the kept facts), other flags open their own files
 * (and fail, naming them, once those are gone), and the facts are GPT-2's: 50257 ids, EOD 50256. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "train/train_impl.h"
#include "trident/args.h"

static void copy_file(const char *from, const char *to)
{
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    assert_non_null(in);
    assert_non_null(out);
    char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0) assert_int_equal(fwrite(buf, 1, n, out), n);
    fclose(in);
    fclose(out);
}

static void gpt2_args(td_args *a, const char *vocab, const char *merges)
{
    char *argv[] = {"train", "--vocab-file", (char *)vocab, "--merge-file", (char *)merges, NULL};
    assert_int_equal(td_args_parse(a, TD_CMD_TRAIN, "trident train", 5, argv, 1), 0);
}

static void read_once_for_the_same_flags(void **state)
{
    (void)state;
    char dir[512], vocab[600], merges[600], other[600];
    snprintf(dir, sizeof dir, "%s/tokenizer_facts_%ld", TD_TEST_TMP, (long)getpid());
    snprintf(vocab, sizeof vocab, "%s/vocab.json", dir);
    snprintf(merges, sizeof merges, "%s/merges.txt", dir);
    snprintf(other, sizeof other, "%s/vocab2.json", dir);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    assert_int_equal(system(cmd), 0);
    copy_file(TD_TEST_DATA "/gpt2/vocab.json", vocab);
    copy_file(TD_TEST_DATA "/gpt2/merges.txt", merges);
    copy_file(TD_TEST_DATA "/gpt2/vocab.json", other);

    td_args a, b;
    gpt2_args(&a, vocab, merges);
    gpt2_args(&b, other, merges);
    int v = 0, eod = 0;
    char err[512] = "";
    assert_int_equal(run_tokenizer_facts(&a, &v, &eod, err, sizeof err), 0);
    assert_int_equal(v, 50257);
    assert_int_equal(eod, 50256);

    unlink(vocab); /* the same flags: the kept facts, no file read */
    v = eod = 0;
    assert_int_equal(run_tokenizer_facts(&a, &v, NULL, err, sizeof err), 0);
    assert_int_equal(v, 50257);
    assert_int_equal(run_tokenizer_facts(&a, NULL, &eod, err, sizeof err), 0);
    assert_int_equal(eod, 50256);

    /* other flags: their own files, read */
    v = 0;
    assert_int_equal(run_tokenizer_facts(&b, &v, NULL, err, sizeof err), 0);
    assert_int_equal(v, 50257);
    unlink(other);
    /* back to the first flags, whose file is gone: read again, and the failure names the file */
    err[0] = 0;
    assert_int_equal(run_tokenizer_facts(&a, &v, NULL, err, sizeof err), -1);
    print_message("  %s\n", err);
    assert_non_null(strstr(err, "vocab.json"));

    td_args_free(&a);
    td_args_free(&b);
    unlink(merges);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(read_once_for_the_same_flags),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
