/* Well-formed UTF-8 by maximal-subpart replacement (utf8.h). */
#include <string.h>

#include "utf8.h"

/* The sequence a first byte c starts: its length (0: c starts none) and the range of its second
 * byte (Unicode Table 3-7: E0 A0..BF, ED 80..9F, F0 90..BF, F4 80..8F; otherwise 80..BF). */
static int lead(unsigned c, unsigned *lo, unsigned *hi)
{
    *lo = 0x80, *hi = 0xbf;
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf) return 2;
    if (c >= 0xe0 && c <= 0xef) {
        if (c == 0xe0) *lo = 0xa0;
        if (c == 0xed) *hi = 0x9f; /* not a surrogate (D800..DFFF) */
        return 3;
    }
    if (c >= 0xf0 && c <= 0xf4) {
        if (c == 0xf0) *lo = 0x90; /* not overlong */
        if (c == 0xf4) *hi = 0x8f; /* not past U+10FFFF */
        return 4;
    }
    return 0; /* a continuation byte, C0/C1 (overlong) or F5..FF */
}

size_t utf8_clean(const char *s, size_t n, int final, char *out, size_t *used)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, k = 0;
    while (i < n) {
        unsigned lo, hi;
        int need = lead(u[i], &lo, &hi), j = 1;
        while (j < need && i + (size_t)j < n && u[i + j] >= (j == 1 ? lo : 0x80) && u[i + j] <= (j == 1 ? hi : 0xbf)) j++;
        if (j == need) { /* a whole character */
            memcpy(out + k, s + i, (size_t)j);
            k += (size_t)j;
        } else if (i + (size_t)j == n && need && !final) { /* the next bytes may complete it */
            break;
        } else { /* the maximal subpart u[i..i+j) */
            memcpy(out + k, "\xef\xbf\xbd", 3);
            k += 3;
        }
        i += (size_t)j;
    }
    if (used) *used = i;
    return k;
}

size_t utf8_chars(const char *s, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((unsigned char)s[i] & 0xc0) != 0x80;
    return k;
}
