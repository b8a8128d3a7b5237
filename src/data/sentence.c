/* Rule-based sentence splitter: see include/data/trident/sentence.h and docs/preprocess.md.
 *
 * One pass over the text: paragraphs (cut at blank lines) are split independently; inside one,
 * each run of terminators followed by whitespace is a candidate end, decided by the run, the
 * word before it and the word after it. Every candidate looks at bytes it alone owns (the word
 * before stops at whitespace), so the whole split is linear in the text. */
#include "trident/sentence.h"

#include <stdint.h>
#include <string.h>
#include <unicode/utf8.h>

#include "icu.h"

/* Abbreviations that never end a sentence with one `.` (lower case, no dots). Full words that
 * often end sentences (May, June, sat, sun) are left out: a false split costs less in BERT data
 * than two sentences glued together. */
static const char *const ABBREVS[] = {
    "mr", "mrs", "ms", "messrs", "mme", "mlle", "dr", "prof", "sr", "jr", "st", "rev", "hon", "gen", "col", "lt",
    "sgt", "capt", "cmdr", "adm", "maj", "cpl", "pvt", "gov", "sen", "supt", "insp", "inc", "ltd", "co", "corp",
    "llc", "bros", "dept", "univ", "assn", "mt", "ft", "ave", "blvd", "rd", "vs", "etc", "al", "approx", "cf", "viz",
    "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec",
};
/* Abbreviations that do not end a sentence only before a number ("No. 5", "Fig. 3"); before
 * anything else they are the words no, fig, art ... */
static const char *const NUMBER_ABBREVS[] = {
    "no", "nos", "fig", "figs", "vol", "vols", "pp", "ch", "chap", "sec", "eq", "eqs", "art",
};

static int is_space(unsigned char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

static int is_upper(unsigned char c) { return c >= 'A' && c <= 'Z'; }
static int is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
static int is_alpha(unsigned char c) { return is_upper(c) || (c >= 'a' && c <= 'z'); }

/* Does the 3-byte UTF-8 sequence u start at t[i] (inside [0, end))? */
static int has_u8(const char *t, size_t i, size_t end, const char *u)
{
    return end - i >= 3 && memcmp(t + i, u, 3) == 0;
}

#define U8_ELLIPSIS "\xe2\x80\xa6" /* … */
#define U8_RSQUO "\xe2\x80\x99"    /* ’ */
#define U8_RDQUO "\xe2\x80\x9d"    /* ” */
#define U8_LSQUO "\xe2\x80\x98"    /* ‘ */
#define U8_LDQUO "\xe2\x80\x9c"    /* “ */

/* Length of the closing quote or bracket at t[i], or 0. */
static size_t closer_len(const char *t, size_t i, size_t end)
{
    if (t[i] == '"' || t[i] == '\'' || t[i] == ')' || t[i] == ']') return 1;
    return has_u8(t, i, end, U8_RDQUO) || has_u8(t, i, end, U8_RSQUO) ? 3 : 0;
}

/* Length of the opening quote or bracket at t[i], or 0. */
static size_t opener_len(const char *t, size_t i, size_t end)
{
    if (t[i] == '"' || t[i] == '\'' || t[i] == '(' || t[i] == '[') return 1;
    return has_u8(t, i, end, U8_LDQUO) || has_u8(t, i, end, U8_LSQUO) ? 3 : 0;
}

/* Could a sentence start at t[i] (i < end)? A capital, a digit, or a non-ASCII character that is
 * not a lower-case letter (invalid UTF-8 counts as a letter of unknown case, so as a start). */
static int starts_word(const char *t, size_t i, size_t end, int digits)
{
    unsigned char c = (unsigned char)t[i];
    if (c < 0x80) return is_upper(c) || (digits && is_digit(c));
    int32_t k = 0, n = end - i < 4 ? (int32_t)(end - i) : 4;
    UChar32 cp;
    U8_NEXT((const uint8_t *)t + i, k, n, cp);
    return cp < 0 || !td_icu()->u_islower(cp);
}

static int sentence_start(const char *t, size_t i, size_t end)
{
    size_t o = opener_len(t, i, end);
    if (o) return i + o < end && starts_word(t, i + o, end, 1);
    return starts_word(t, i, end, 1);
}

/* Is the word [b, e) (ASCII, at most 7 bytes) in list, ignoring case? */
static int in_list(const char *t, size_t b, size_t e, const char *const *list, size_t n)
{
    char w[8];
    if (e - b >= sizeof w) return 0;
    for (size_t i = b; i < e; i++) w[i - b] = (char)(is_upper((unsigned char)t[i]) ? t[i] - 'A' + 'a' : t[i]);
    w[e - b] = '\0';
    for (size_t i = 0; i < n; i++)
        if (strcmp(w, list[i]) == 0) return 1;
    return 0;
}

/* Single ASCII letters joined by dots: "U.S", "e.g", "a.m" (the final dot is the terminator). */
static int dotted_letters(const char *t, size_t b, size_t e)
{
    if (e - b < 3) return 0;
    for (size_t i = b; i < e; i++)
        if ((i - b) % 2 == 0 ? !is_alpha((unsigned char)t[i]) : t[i] != '.') return 0;
    return (e - b) % 2 == 1;
}

/* May the single `.` at t[dot], inside the sentence that began at `start`, end it, given that
 * the next word starts at t[next]? The word before it runs back to whitespace or punctuation. */
static int period_ends(const char *t, size_t start, size_t dot, size_t next)
{
    size_t b = dot;
    while (b > start && (is_alpha((unsigned char)t[b - 1]) || is_digit((unsigned char)t[b - 1]) || t[b - 1] == '.' ||
                         (unsigned char)t[b - 1] >= 0x80))
        b--;
    if (b == dot) return 1;
    if (dot - b == 1 && is_upper((unsigned char)t[b]) && t[b] != 'I') return 0; /* an initial */
    if (dotted_letters(t, b, dot)) return 0;
    if (in_list(t, b, dot, ABBREVS, sizeof ABBREVS / sizeof *ABBREVS)) return 0;
    size_t n_number = sizeof NUMBER_ABBREVS / sizeof *NUMBER_ABBREVS;
    if (is_digit((unsigned char)t[next]) && in_list(t, b, dot, NUMBER_ABBREVS, n_number)) return 0;
    if (b == start || t[b - 1] == '\n') { /* a list item "1. " */
        size_t i = b;
        while (i < dot && is_digit((unsigned char)t[i])) i++;
        if (i == dot) return 0;
    }
    return 1;
}

typedef struct {
    sent_span *out;
    size_t cap, n;
} sink;

/* Records [a, b) trimmed of whitespace, unless nothing is left. */
static void emit(sink *s, const char *t, size_t a, size_t b)
{
    while (a < b && is_space((unsigned char)t[a])) a++;
    while (b > a && is_space((unsigned char)t[b - 1])) b--;
    if (a == b) return;
    if (s->n < s->cap) s->out[s->n] = (sent_span){a, b};
    s->n++;
}

/* Splits the paragraph t[ps, pe). */
static void split_paragraph(sink *s, const char *t, size_t ps, size_t pe)
{
    size_t start = ps;
    while (start < pe && is_space((unsigned char)t[start])) start++;
    for (size_t i = start; i < pe;) {
        /* a run of terminators at i: . ! ? … */
        size_t r = i, dots = 0;
        int strong = 0, ellipsis = 0;
        for (;;) {
            if (r < pe && (t[r] == '.' || t[r] == '!' || t[r] == '?')) {
                strong |= t[r] != '.';
                dots += t[r] == '.';
                r++;
            } else if (r < pe && has_u8(t, r, pe, U8_ELLIPSIS)) {
                ellipsis = 1;
                r += 3;
            } else {
                break;
            }
        }
        if (r == i) {
            i++;
            continue;
        }
        size_t j = r, c;
        while (j < pe && (c = closer_len(t, j, pe))) j += c;
        size_t k = j;
        while (k < pe && is_space((unsigned char)t[k])) k++;
        if (k == j || k == pe) { /* glued to the next word, or the paragraph's end */
            i = k;
            continue;
        }
        int end = sentence_start(t, k, pe);
        if (end && !strong && !ellipsis && dots == 1) end = period_ends(t, start, i, k);
        if (end) {
            emit(s, t, start, j);
            start = k;
        }
        i = k;
    }
    emit(s, t, start, pe);
}

size_t sent_split(const char *text, size_t len, sent_span *out, size_t cap)
{
    sink s = {out, cap, 0};
    size_t ps = 0;
    for (size_t i = 0; i < len; i++) {
        if (text[i] != '\n') continue;
        size_t j = i + 1;
        while (j < len && (text[j] == ' ' || text[j] == '\t' || text[j] == '\r')) j++;
        if (j < len && text[j] == '\n') { /* a blank line */
            split_paragraph(&s, text, ps, i);
            ps = j;
            i = j;
        }
    }
    split_paragraph(&s, text, ps, len);
    return s.n;
}
