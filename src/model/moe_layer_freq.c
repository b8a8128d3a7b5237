/* Which layers of a mixture of experts hold the MoE block: --moe-layer-freq (Megatron's
 * moe_layer_freq), see gpt_moe_layer_freq_parse in include/model/trident/gpt_config.h. An
 * integer N: layer i iff i % N == 0; or a Python list of 0 and 1, one a layer, written out or as
 * the expressions Megatron's scripts use ("([1]*1+[0]*1)*2"): lists, + (concatenation), * by an
 * integer (repetition), parentheses. Nothing else of Python is evaluated. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/check.h"
#include "trident/gpt_config.h"

/* A list being parsed: its entries (0 or 1), or the first error. */
typedef struct {
    const char *p;
    unsigned char v[GPT_MOE_LIST_MAX_LAYERS];
    int n;
    char err[160];
} list_parse;

static void skip_space(list_parse *s)
{
    while (isspace((unsigned char)*s->p)) s->p++;
}

static int fail(list_parse *s, const char *what)
{
    if (!s->err[0]) snprintf(s->err, sizeof s->err, "%s", what);
    return -1;
}

static int push(list_parse *s, int x)
{
    if (s->n == GPT_MOE_LIST_MAX_LAYERS) return fail(s, "is longer than the 1024 layers a list may name");
    s->v[s->n++] = (unsigned char)x;
    return 0;
}

/* An integer >= 0 at s->p into *x. */
static int integer(list_parse *s, long *x)
{
    skip_space(s);
    if (!isdigit((unsigned char)*s->p)) return fail(s, "expects an integer after '*'");
    char *end;
    *x = strtol(s->p, &end, 10);
    s->p = end;
    return 0;
}

static int expr(list_parse *s);

/* "[a, b, ...]" (each 0 or 1) or "(expr)". */
static int atom(list_parse *s)
{
    skip_space(s);
    if (*s->p == '(') {
        s->p++;
        if (expr(s)) return -1;
        skip_space(s);
        if (*s->p != ')') return fail(s, "has a '(' without its ')'");
        s->p++;
        return 0;
    }
    if (*s->p != '[') return fail(s, "is neither an integer nor a list of 0 and 1 such as [1,0,1,1]");
    s->p++;
    skip_space(s);
    if (*s->p == ']') return fail(s, "has an empty list");
    for (;;) {
        skip_space(s);
        if ((*s->p != '0' && *s->p != '1') || isalnum((unsigned char)s->p[1]) || s->p[1] == '.')
            return fail(s, "has a list entry that is not 0 or 1");
        if (push(s, *s->p - '0')) return -1;
        s->p++;
        skip_space(s);
        if (*s->p == ']') break;
        if (*s->p != ',') return fail(s, "has a list whose entries are not separated by commas");
        s->p++;
    }
    s->p++;
    return 0;
}

/* atom, or atom * integer (the list repeated). */
static int term(list_parse *s)
{
    int start = s->n;
    if (atom(s)) return -1;
    for (;;) {
        skip_space(s);
        if (*s->p != '*') return 0;
        s->p++;
        long times;
        if (integer(s, &times)) return -1;
        int len = s->n - start;
        if (times == 0) s->n = start;
        for (long t = 1; t < times; t++)
            for (int i = 0; i < len; i++)
                if (push(s, s->v[start + i])) return -1;
    }
}

static int expr(list_parse *s)
{
    if (term(s)) return -1;
    for (;;) {
        skip_space(s);
        if (*s->p != '+') return 0;
        s->p++;
        if (term(s)) return -1;
    }
}

#define FAIL(...)                                                                        \
    do {                                                                                 \
        snprintf(msg, msglen, __VA_ARGS__);                                              \
        return -1;                                                                       \
    } while (0)

/* The pattern as a frequency when it is one (N: layer i iff i % N == 0), else 0. */
static int as_freq(const unsigned char *v, int L)
{
    for (int N = 1; N <= L; N++) {
        int same = 1;
        for (int i = 0; i < L && same; i++) same = v[i] == (i % N == 0);
        if (same) return N;
    }
    return 0;
}

int gpt_moe_layer_freq_parse(gpt_config *c, const char *text, int num_layers, char *msg, size_t msglen)
{
    const char *p = text;
    while (isspace((unsigned char)*p)) p++;
    if (isdigit((unsigned char)*p) || *p == '-' || *p == '+') {
        char *end;
        long n = strtol(p, &end, 10);
        while (isspace((unsigned char)*end)) end++;
        if (*end || n < 1)
            FAIL("--moe-layer-freq %s: give an integer N >= 1 (every N-th layer is MoE, from layer 0) or a list of "
                 "0 and 1, one a layer", text);
        c->moe_layer_freq = (int)(n < num_layers ? n : num_layers > 0 ? num_layers : 1);
        memset(c->moe_layer_bits, 0, sizeof c->moe_layer_bits);
        if (c->moe_layer_freq == 1) c->moe_layer_freq = 0;
        return 0;
    }
    list_parse *s = td_xcalloc(1, sizeof *s);
    s->p = p;
    int rc = expr(s);
    skip_space(s);
    if (rc == 0 && *s->p) fail(s, "has text after the list (only lists of 0 and 1, +, * and parentheses are read)");
    if (s->err[0]) {
        snprintf(msg, msglen, "--moe-layer-freq %s %s", text, s->err);
        free(s);
        return -1;
    }
    int ones = 0;
    for (int i = 0; i < s->n; i++) ones += s->v[i];
    if (s->n != num_layers || ones == 0) {
        snprintf(msg, msglen,
                 ones ? "--moe-layer-freq %s names %d layers but --num-layers is %d: give one 0 (dense) or 1 (MoE) a layer"
                      : "--moe-layer-freq %s has no MoE layer: leave out --num-experts for a dense model",
                 text, s->n, num_layers);
        free(s);
        return -1;
    }
    int N = as_freq(s->v, num_layers);
    memset(c->moe_layer_bits, 0, sizeof c->moe_layer_bits);
    if (N) {
        c->moe_layer_freq = N == 1 ? 0 : N;
    } else {
        c->moe_layer_freq = GPT_MOE_FREQ_LIST;
        for (int i = 0; i < num_layers; i++)
            if (s->v[i]) c->moe_layer_bits[i / 64] |= (uint64_t)1 << (i % 64);
    }
    free(s);
    return 0;
}

int gpt_moe_layers(const gpt_config *c, int layer0, int n)
{
    int count = 0;
    for (int l = layer0; l < layer0 + n; l++) count += gpt_moe_layer(c, l);
    return count;
}

void gpt_moe_layer_freq_str(const gpt_config *c, char *out, size_t len)
{
    size_t at = 0;
    if (len == 0) return;
    out[0] = 0;
    for (int l = 0; l < c->num_layers && at + 1 < len; l++) {
        int w = snprintf(out + at, len - at, "%s%d", l ? ", " : "[", gpt_moe_layer(c, l));
        if (w < 0) return;
        at += (size_t)w;
    }
    if (at + 1 < len) snprintf(out + at, len - at, "]");
}

int gpt_moe_layers_equal(const gpt_config *a, const gpt_config *b)
{
    if (a->num_layers != b->num_layers) return 0;
    for (int l = 0; l < a->num_layers; l++)
        if (gpt_moe_layer(a, l) != gpt_moe_layer(b, l)) return 0;
    return 1;
}
