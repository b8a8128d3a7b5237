/* libFuzzer harness: the JSON-line parser of trident preprocess on arbitrary bytes. Whatever it
 * accepts must decode to strings of sane length; nothing may crash or read out of bounds. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "trident/preprocess.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* the parser sees one line at a time, without its newline, as preprocess hands it over */
    char *line = malloc(size + 1);
    if (!line) return 0;
    memcpy(line, data, size);
    line[size] = '\0';
    const char *keys[] = {"text", "meta"};
    prep_str out[2] = {{0}, {0}};
    char err[256];
    if (prep_json_extract(line, size, keys, 2, out, err, sizeof err) == 0) {
        /* decoded text never grows past the input (escapes only shrink) */
        for (int k = 0; k < 2; k++)
            if (out[k].n > size) abort();
    } else if (err[0] == '\0') {
        abort(); /* a rejection always says why */
    }
    prep_str_free(&out[0]);
    prep_str_free(&out[1]);
    free(line);
    return 0;
}
