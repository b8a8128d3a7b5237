/* libFuzzer harness: chat templates (trident/chat_template.h) on arbitrary template source,
 * rendered with a small conversation. Compiling and rendering must each give a result or an
 * error of one non-empty line, never crash or hang; a render must fit the output bound and come
 * out the same twice (no state kept between renders). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "data/ct_impl.h"
#include "trident/chat_template.h"

static const char CTX[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \" Hi \\u00e9\"},"
    " {\"role\": \"assistant\", \"content\": \"<think>x</think>ok\"}, {\"role\": \"user\", \"content\": \"\"}],"
    " \"add_generation_prompt\": true, \"tools\": null, \"documents\": null, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}";

static void one_line(const char *err)
{
    if (!err[0] || strchr(err, '\n')) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *src = malloc(size + 1);
    if (!src) return 0;
    if (size) memcpy(src, data, size);
    src[size] = 0;
    char err[512] = "";
    ct_template *t = ct_compile(src, err, sizeof err);
    free(src);
    if (!t) {
        one_line(err);
        return 0;
    }
    static cJSON *ctx;
    if (!ctx && !(ctx = cJSON_Parse(CTX))) abort();
    struct tm now = {.tm_year = 124, .tm_mon = 6, .tm_mday = 26};
    char err2[512] = "";
    size_t na = 0, nb = 0;
    char *a = ct_render(t, ctx, &now, &na, err, sizeof err);
    char *b = ct_render(t, ctx, &now, &nb, err2, sizeof err2);
    if (!a != !b) abort();
    if (a) {
        if (na > CT_MAX_OUTPUT || na != nb || memcmp(a, b, na) || a[na] || strlen(a) > na) abort();
    } else {
        one_line(err);
        if (strcmp(err, err2)) abort();
    }
    free(a);
    free(b);
    ct_free(t);
    return 0;
}
