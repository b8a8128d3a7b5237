/* Well-formed UTF-8 for trident serve's JSON answers (RFC 8259 wants UTF-8): a token's bytes are
 * often part of a character, so the text of a few tokens may not be UTF-8. Each maximal subpart
 * of an ill-formed sequence (Unicode 15, section 3.9, "U+FFFD Substitution of Maximal Subparts";
 * WHATWG Encoding's UTF-8 decoder does the same) becomes one U+FFFD, as Python's
 * bytes.decode("utf-8", errors="replace") that Hugging Face's decode uses. Private to src/serve. */
#ifndef TRIDENT_SERVE_UTF8_H
#define TRIDENT_SERVE_UTF8_H

#include <stddef.h>

/* Longest bytes a stream holds back: a character's first three of four. */
#define UTF8_HELD_MAX 3

/* Writes the n bytes of s to out as well-formed UTF-8, each maximal subpart of an ill-formed
 * sequence replaced by U+FFFD (EF BF BD); returns the bytes written (out holds 3 n at least;
 * not NUL-terminated). With final 0 a trailing sequence that the next bytes may still complete
 * (at most UTF8_HELD_MAX bytes) is not written: *used gets the bytes of s consumed (n with
 * final 1), so a stream passes s[*used..n) again ahead of its next bytes. used may be NULL. */
size_t utf8_clean(const char *s, size_t n, int final, char *out, size_t *used);

/* Characters (code points) in n bytes of well-formed UTF-8. */
size_t utf8_chars(const char *s, size_t n);

#endif
