/* A rule-based sentence splitter for `trident preprocess --split-sentences` (BERT data), in place
 * of the NLTK punkt tokenizer Megatron's preprocess_data.py uses. docs/preprocess.md
 * ("Sentence splitting") has the rules with examples.
 *
 * Text is UTF-8 (invalid bytes are tolerated). A blank line (a newline, optional spaces, tabs or
 * \r, a newline) always ends a sentence; single newlines are ordinary whitespace. Inside a
 * paragraph a sentence ends after a run of `.` `!` `?` (or `…`), then any closing quotes or
 * brackets (" ' ) ] ” ’), then whitespace, when the next word looks like a sentence start: an
 * ASCII capital or digit, an opening quote or bracket (" ' ( [ “ ‘) before one, or a non-ASCII
 * character that is not a lower-case letter (ICU's u_islower; caseless scripts count as starts).
 * Not an end:
 *   - no whitespace after the run (3.14, U.S.A, "end."Next) or a lower-case next word;
 *   - a single `.` after a word of a fixed list of abbreviations, case-insensitive (Mr, Dr, Prof,
 *     St, vs, etc, Inc, Ltd, Gen, Jan ... Dec, and more in sentence.c), after a word of single
 *     letters joined by dots (U.S, e.g, i.e, a.m, p.m), after a single ASCII capital other
 *     than the pronoun I (an initial: J. R. R. Tolkien), or after a number that starts its
 *     sentence or a line (a list item "1. ");
 *   - a single `.` after No, Fig, Vol, pp, ch, sec, eq and the like when a digit follows ("No. 5");
 *     before anything else these end a sentence like any word.
 * Unlike punkt nothing is learned from a corpus: an abbreviation that ends a sentence ("... and
 * so on, etc. The next") never splits, one not in the list always splits when a capital
 * follows, and scripts without spaces between sentences (Chinese, Japanese) are not split. */
#ifndef TRIDENT_SENTENCE_H
#define TRIDENT_SENTENCE_H

#include <stddef.h>

/* Bytes [start, end) of one sentence in the text. */
typedef struct {
    size_t start, end;
} sent_span;

/* Splits text[0, len) (no terminating NUL needed) into sentences and writes the first `cap`
 * spans to out (out may be NULL when cap is 0). Spans are in text order, non-empty, do not
 * overlap and are trimmed of surrounding ASCII whitespace; text that is only whitespace has no
 * sentences. Returns the number of sentences, which may exceed cap (call again with a larger
 * out, as with snprintf). */
size_t sent_split(const char *text, size_t len, sent_span *out, size_t cap);

#endif
