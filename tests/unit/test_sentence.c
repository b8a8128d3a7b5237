/* src/data/sentence.c: the splitting rules of include/data/trident/sentence.h, one group per rule,
 * each case the sentences a reader would mark by hand. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "trident/sentence.h"

/* Asserts that text splits into exactly the sentences of want, joined by " | ". */
static void expect_split(const char *text, const char *want)
{
    size_t len = strlen(text);
    sent_span sp[64];
    size_t n = sent_split(text, len, sp, 64);
    assert_true(n <= 64);
    char got[4096] = "";
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        assert_true(sp[i].start < sp[i].end && sp[i].end <= len);
        if (i) assert_true(sp[i - 1].end <= sp[i].start);
        at += (size_t)snprintf(got + at, sizeof got - at, "%s%.*s", i ? " | " : "", (int)(sp[i].end - sp[i].start),
                               text + sp[i].start);
    }
    if (strcmp(got, want) != 0) {
        print_error("text: \"%s\"\n got: \"%s\"\nwant: \"%s\"\n", text, got, want);
        fail();
    }
}

static void plain_terminators(void **state)
{
    (void)state;
    expect_split("Hello world. This is a test.", "Hello world. | This is a test.");
    expect_split("Is it? Yes! It is.", "Is it? | Yes! | It is.");
    expect_split("Really?! Yes.", "Really?! | Yes.");
    expect_split("What?? No!!! Fine.", "What?? | No!!! | Fine.");
    expect_split("One. 2 is a number.", "One. | 2 is a number.");
    expect_split("Wow! that was close.", "Wow! that was close."); /* a lower-case word follows */
}

static void no_terminal_punctuation_and_empty(void **state)
{
    (void)state;
    expect_split("a document without an end", "a document without an end");
    expect_split("Ends here. and trails off", "Ends here. and trails off");
    expect_split("", "");
    expect_split("   \n\t \n  ", "");
    expect_split(".", ".");
    expect_split("  padded.  ", "padded.");
    assert_int_equal(sent_split(NULL, 0, NULL, 0), 0);
}

static void abbreviations(void **state)
{
    (void)state;
    expect_split("Mr. Smith met Dr. Jones. They talked.", "Mr. Smith met Dr. Jones. | They talked.");
    expect_split("MRS. Brown and prof. Plum left.", "MRS. Brown and prof. Plum left.");
    expect_split("Apples, pears, etc. Were sold.", "Apples, pears, etc. Were sold.");
    expect_split("Acme Inc. Was founded. Acme Corp. Too.", "Acme Inc. Was founded. | Acme Corp. Too.");
    expect_split("Ali vs. Frazier. Next.", "Ali vs. Frazier. | Next.");
    expect_split("Smith et al. Showed it.", "Smith et al. Showed it.");
    expect_split("On Jan. 5 and Sept. 9 it rained.", "On Jan. 5 and Sept. 9 it rained.");
    expect_split("He lives on Main St. In town.", "He lives on Main St. In town.");
    expect_split("Gen. Lee and Lt. Dan and Sgt. Pepper.", "Gen. Lee and Lt. Dan and Sgt. Pepper.");
    expect_split("(Mr. Smith) Arrived.", "(Mr. Smith) Arrived.");
    /* words that merely end like an abbreviation are ordinary words */
    expect_split("I met Mister. He waved.", "I met Mister. | He waved.");
    expect_split("The cat sat. The sun set.", "The cat sat. | The sun set.");
}

static void number_abbreviations(void **state)
{
    (void)state;
    expect_split("See No. 5 and Fig. 3 in vol. 2, pp. 10.", "See No. 5 and Fig. 3 in vol. 2, pp. 10.");
    expect_split("The answer was no. Then he left.", "The answer was no. | Then he left.");
    expect_split("I ate a fig. It was sweet.", "I ate a fig. | It was sweet.");
}

static void dotted_abbreviations(void **state)
{
    (void)state;
    expect_split("Fruit, e.g. Apples, and i.e. Pears.", "Fruit, e.g. Apples, and i.e. Pears.");
    expect_split("The U.S. Army came. We left.", "The U.S. Army came. | We left.");
    expect_split("At 5 p.m. Smith left at 9 A.M. Sharp.", "At 5 p.m. Smith left at 9 A.M. Sharp.");
    expect_split("It is U.S.A.-made. Yes.", "It is U.S.A.-made. | Yes.");
}

static void initials(void **state)
{
    (void)state;
    expect_split("J. R. R. Tolkien wrote it. He was English.", "J. R. R. Tolkien wrote it. | He was English.");
    expect_split("By John F. Kennedy. Read it.", "By John F. Kennedy. | Read it.");
    /* the pronoun I is not an initial */
    expect_split("So did I. Then we left.", "So did I. | Then we left.");
}

static void decimals_and_numbers(void **state)
{
    (void)state;
    expect_split("Pi is 3.14 or so. It is irrational.", "Pi is 3.14 or so. | It is irrational.");
    expect_split("It cost $2.50. Cheap.", "It cost $2.50. | Cheap.");
    expect_split("Version 1.2.3 is out. Get it.", "Version 1.2.3 is out. | Get it.");
    expect_split("It was 1995. Then came 1996.", "It was 1995. | Then came 1996.");
    expect_split("1. First item here", "1. First item here"); /* a list item */
    expect_split("Steps:\n1. Open it. 2. Close it.", "Steps:\n1. Open it. | 2. Close it.");
}

static void quotes_and_brackets(void **state)
{
    (void)state;
    expect_split("He said \"Stop.\" Then he left.", "He said \"Stop.\" | Then he left.");
    expect_split("\"Why?\" she asked.", "\"Why?\" she asked.");
    expect_split("It ended (finally.) Good.", "It ended (finally.) | Good.");
    expect_split("See [this.] Now.", "See [this.] | Now.");
    expect_split("She said 'no.' 'Fine,' he said.", "She said 'no.' | 'Fine,' he said.");
    expect_split("He left. \"Bye,\" she said.", "He left. | \"Bye,\" she said.");
    expect_split("He left. (Quietly.) Then.", "He left. | (Quietly.) | Then.");
    expect_split("He left. \"bye\" she said.", "He left. \"bye\" she said.");
    expect_split("Go.\"Now\" said he.", "Go.\"Now\" said he."); /* no space */
    expect_split("\xe2\x80\x9cStop.\xe2\x80\x9d \xe2\x80\x9cWhy?\xe2\x80\x9d",
                 "\xe2\x80\x9cStop.\xe2\x80\x9d | \xe2\x80\x9cWhy?\xe2\x80\x9d");
    expect_split("It\xe2\x80\x99s over.\xe2\x80\x99 \xe2\x80\x98Yes.", "It\xe2\x80\x99s over.\xe2\x80\x99 | \xe2\x80\x98Yes.");
}

static void ellipses(void **state)
{
    (void)state;
    expect_split("Wait... What happened?", "Wait... | What happened?");
    expect_split("Wait... and then it happened.", "Wait... and then it happened.");
    expect_split("So\xe2\x80\xa6 Here we are.", "So\xe2\x80\xa6 | Here we are.");
    expect_split("So\xe2\x80\xa6 we are here.", "So\xe2\x80\xa6 we are here.");
    expect_split("Hmm.... Right.", "Hmm.... | Right.");
}

static void whitespace_and_paragraphs(void **state)
{
    (void)state;
    expect_split("One.    Two.\t\tThree.", "One. | Two. | Three.");
    expect_split("One.\nTwo.", "One. | Two.");
    expect_split("a line\nwraps here.", "a line\nwraps here."); /* a single newline is whitespace */
    expect_split("Title\n\nBody text here. More text", "Title | Body text here. | More text");
    expect_split("first para\n \t\r\nsecond para", "first para | second para");
    expect_split("ends with mr.\n\nnext para", "ends with mr. | next para");
    expect_split("\n\n\nOne.\n\n\n\nTwo.\n\n", "One. | Two.");
    expect_split("Line one\r\n\r\nLine two", "Line one | Line two");
}

static void utf8_text(void **state)
{
    (void)state;
    /* non-ASCII capitals and caseless scripts start sentences; lower-case letters do not */
    expect_split("Er kam. \xc3\x9c" "ber alles.", "Er kam. | \xc3\x9c" "ber alles.");
    expect_split("Il est venu. \xc3\xa9t\xc3\xa9 fini.", "Il est venu. \xc3\xa9t\xc3\xa9 fini.");
    expect_split("Done. \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e.", "Done. | \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e.");
    expect_split("\xd0\x9e\xd0\xbd \xd0\xbf\xd1\x80\xd0\xb8\xd1\x88\xd1\x91\xd0\xbb. \xd0\x9e\xd0\xbd\xd0\xb0 \xd1\x82\xd0\xbe\xd0\xb6\xd0\xb5.",
                 "\xd0\x9e\xd0\xbd \xd0\xbf\xd1\x80\xd0\xb8\xd1\x88\xd1\x91\xd0\xbb. | "
                 "\xd0\x9e\xd0\xbd\xd0\xb0 \xd1\x82\xd0\xbe\xd0\xb6\xd0\xb5.");
    /* a word with non-ASCII letters is never an abbreviation or an initial */
    expect_split("Er hei\xc3\x9ft M\xc3\xbcller. Er kam.", "Er hei\xc3\x9ft M\xc3\xbcller. | Er kam.");
    expect_split("\xc3\x89. Next.", "\xc3\x89. | Next.");
    /* invalid UTF-8 and a truncated sequence at the end are read without harm */
    expect_split("Bad \xff. \xff\xfe bytes. \xe2\x80", "Bad \xff. | \xff\xfe bytes. | \xe2\x80");
}

static void count_beyond_cap(void **state)
{
    (void)state;
    const char *t = "A. Bb. Cc. Dd.";
    sent_span sp[2];
    assert_int_equal(sent_split(t, strlen(t), sp, 2), 3); /* "A." is an initial: A. Bb. | Cc. | Dd. */
    assert_int_equal(sp[0].start, 0);
    assert_int_equal(sp[0].end, 6);
    assert_int_equal(sp[1].start, 7);
    assert_int_equal(sp[1].end, 10);
    assert_int_equal(sent_split(t, strlen(t), NULL, 0), 3);
    /* len, not a NUL, ends the text */
    assert_int_equal(sent_split("One. Two. Three.", 9, sp, 2), 2);
    assert_int_equal(sp[1].end, 9);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(plain_terminators),
        cmocka_unit_test(no_terminal_punctuation_and_empty),
        cmocka_unit_test(abbreviations),
        cmocka_unit_test(number_abbreviations),
        cmocka_unit_test(dotted_abbreviations),
        cmocka_unit_test(initials),
        cmocka_unit_test(decimals_and_numbers),
        cmocka_unit_test(quotes_and_brackets),
        cmocka_unit_test(ellipses),
        cmocka_unit_test(whitespace_and_paragraphs),
        cmocka_unit_test(utf8_text),
        cmocka_unit_test(count_beyond_cap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
