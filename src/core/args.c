/* Command-line arguments: see include/core/trident/args.h. The flags themselves are the table in
 * flags.c, the one place a flag is named, typed, defaulted, documented and bounded. */
#include "trident/args.h"

#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/activation.h"
#include "trident/check.h"

#include "args_impl.h"

static const flag_t *find_flag(const char *name, size_t len, int *index)
{
    for (int i = 0; i < td_nflags; i++)
        if (strlen(td_flags[i].name) == len && strncmp(td_flags[i].name, name, len) == 0) {
            *index = i;
            return &td_flags[i];
        }
    return NULL;
}

static void list_push(td_strlist *l, const char *s)
{
    l->v = td_xrealloc(l->v, (size_t)(l->n + 1) * sizeof *l->v);
    l->v[l->n++] = td_xstrdup(s);
}

static void list_clear(td_strlist *l)
{
    for (int i = 0; i < l->n; i++) free(l->v[i]);
    free(l->v);
    l->v = NULL;
    l->n = 0;
}

static int choice_ok(const char *choices, const char *v)
{
    size_t n = strlen(v);
    for (const char *p = choices; *p;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && strncmp(p, v, n) == 0) return 1;
        p += len + (bar != NULL);
    }
    return 0;
}

/* Stores one value (text v) into the field of flag f; exits 2 on a bad value. */
static void store(td_args *a, const flag_t *f, const char *prog, const char *v)
{
    char *field = (char *)a + f->off;
    char *end = NULL;
    errno = 0;
    switch (f->type) {
    case A_INT:
    case A_I64: {
        long long x = strtoll(v, &end, 10);
        if (end == v || *end || errno)
            td_usage_error("%s: %s '%s' is not an integer", prog, f->name, v);
        if ((double)x < f->lo || (double)x > f->hi)
            td_usage_error("%s: %s %s is out of range [%.0f, %.0f]", prog, f->name, v, f->lo, f->hi);
        if (f->type == A_INT) *(int *)field = (int)x;
        else *(int64_t *)field = (int64_t)x;
        break;
    }
    case A_FLOAT: {
        double x = strtod(v, &end);
        if (end == v || *end || errno || !isfinite(x))
            td_usage_error("%s: %s '%s' is not a number", prog, f->name, v);
        if (x < f->lo || x > f->hi)
            td_usage_error("%s: %s %s is out of range [%g, %g]", prog, f->name, v, f->lo, f->hi);
        *(double *)field = x;
        break;
    }
    case A_CHOICE:
        if (!choice_ok(f->choices, v) && strcmp(f->name, "--backend") == 0 && strcmp(v, "cuda") == 0)
            td_usage_error("%s: --backend cuda: this trident was built without CUDA: build it where nvcc is "
                           "(-DTRIDENT_CUDA=ON, docs/gpu.md), or use --backend cpu", prog);
        if (!choice_ok(f->choices, v))
            td_usage_error("%s: %s '%s' is not one of %s", prog, f->name, v, f->choices);
        /* fall through */
    case A_STR:
        free(*(char **)field);
        *(char **)field = td_xstrdup(v);
        break;
    case A_BOOL:
        if (strcmp(v, "1") == 0 || strcmp(v, "true") == 0) *(int *)field = 1;
        else if (strcmp(v, "0") == 0 || strcmp(v, "false") == 0) *(int *)field = 0;
        else td_usage_error("%s: %s takes no value (got '%s')", prog, f->name, v);
        break;
    case A_LIST:
        list_push((td_strlist *)field, v);
        break;
    }
}

static void clear_field(td_args *a, const flag_t *f)
{
    char *field = (char *)a + f->off;
    switch (f->type) {
    case A_INT: *(int *)field = 0; break;
    case A_I64: *(int64_t *)field = 0; break;
    case A_FLOAT: *(double *)field = 0; break;
    case A_STR:
    case A_CHOICE: free(*(char **)field); *(char **)field = NULL; break;
    case A_BOOL: *(int *)field = 0; break;
    case A_LIST: list_clear((td_strlist *)field); break;
    }
}

void td_args_defaults(td_args *a, unsigned cmd)
{
    memset(a, 0, sizeof *a);
    for (int i = 0; i < td_nflags; i++) {
        const flag_t *f = &td_flags[i];
        if (!(f->cmds & cmd) || !f->def) continue;
        if (f->type == A_LIST) {
            /* a list default is space-separated */
            char *copy = td_xstrdup(f->def), *save = NULL;
            for (char *t = strtok_r(copy, " ", &save); t; t = strtok_r(NULL, " ", &save))
                list_push((td_strlist *)((char *)a + f->off), t);
            free(copy);
        } else {
            store(a, f, "defaults", f->def);
        }
    }
}

int td_args_parse(td_args *a, unsigned cmd, const char *prog, int argc, char **argv, int first)
{
    td_args_defaults(a, cmd);
    unsigned char list_started[TD_MAX_FLAGS] = {0};
    for (int i = first; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) return 1;
        if (strncmp(arg, "--", 2) != 0)
            td_usage_error("%s: unexpected argument '%s' (flags start with --; see %s --help)", prog, arg, prog);
        const char *eq = strchr(arg, '=');
        size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
        int idx = -1;
        const flag_t *f = find_flag(arg, len, &idx);
        if (!f) td_usage_error("%s: unknown flag %.*s (see %s --help)", prog, (int)len, arg, prog);
        if (!(f->cmds & cmd))
            td_usage_error("%s: flag %s does not apply to this command (see %s --help)", prog, f->name, prog);
        if (f->type == A_LIST && !list_started[idx]) {
            /* the first occurrence replaces the default; later ones append */
            clear_field(a, f);
            list_started[idx] = 1;
        }
        a->set_[idx] = 1;
        if (f->type == A_BOOL) {
            store(a, f, prog, eq ? eq + 1 : "1");
            continue;
        }
        if (eq) {
            store(a, f, prog, eq + 1);
            continue;
        }
        if (f->type == A_LIST) {
            int got = 0;
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) {
                store(a, f, prog, argv[++i]);
                got++;
            }
            if (!got) td_usage_error("%s: %s needs at least one value", prog, f->name);
            continue;
        }
        if (i + 1 >= argc) td_usage_error("%s: %s needs a value", prog, f->name);
        store(a, f, prog, argv[++i]);
    }
    return 0;
}

int td_args_get_number(const td_args *a, const char *flag, double *v)
{
    int idx = -1;
    const flag_t *f = find_flag(flag, strlen(flag), &idx);
    if (!f) return -1;
    const char *field = (const char *)a + f->off;
    switch (f->type) {
    case A_INT: *v = *(const int *)field; return 0;
    case A_I64: *v = (double)*(const int64_t *)field; return 0;
    case A_FLOAT: *v = *(const double *)field; return 0;
    default: return -1;
    }
}

int td_args_set_number(td_args *a, const char *flag, double v)
{
    int idx = -1;
    const flag_t *f = find_flag(flag, strlen(flag), &idx);
    if (!f) return -1;
    int numeric = f->type == A_INT || f->type == A_I64 || f->type == A_FLOAT; /* bools and choices have no range */
    if (numeric && (v < f->lo || v > f->hi)) return -1;
    char *field = (char *)a + f->off;
    switch (f->type) {
    case A_INT: *(int *)field = (int)v; return 0;
    case A_I64: *(int64_t *)field = (int64_t)v; return 0;
    case A_FLOAT: *(double *)field = v; return 0;
    case A_BOOL: *(int *)field = v != 0; return 0;
    case A_STR: { /* a set of the choices (--lora-target-modules): v its mask */
        if (!f->choices || v != (unsigned)v || v < 1 || v >= 128) return -1;
        char list[256];
        td_lora_modules_str((unsigned)v, list, sizeof list);
        free(*(char **)field);
        *(char **)field = td_xstrdup(list);
        return 0;
    }
    case A_CHOICE: { /* the v-th of the choices */
        const char *p = f->choices;
        for (int i = 0; i < (int)v && p; i++) {
            p = strchr(p, '|');
            if (p) p++;
        }
        if (!p || v != (int)v) return -1;
        size_t n = strcspn(p, "|");
        char *val = td_xmalloc(n + 1);
        memcpy(val, p, n);
        val[n] = 0;
        free(*(char **)field);
        *(char **)field = val;
        return 0;
    }
    default: return -1;
    }
}

int td_args_set_string(td_args *a, const char *flag, const char *v)
{
    int idx = -1;
    const flag_t *f = find_flag(flag, strlen(flag), &idx);
    if (!f || f->type != A_STR) return -1;
    char **field = (char **)((char *)a + f->off);
    free(*field);
    *field = v ? td_xstrdup(v) : NULL;
    return 0;
}

int td_args_given(const td_args *a, const char *flag)
{
    int idx = -1;
    if (!find_flag(flag, strlen(flag), &idx)) return 0;
    return a->set_[idx];
}

int td_args_choice_index(const td_args *a, const char *flag)
{
    int idx = -1;
    const flag_t *f = find_flag(flag, strlen(flag), &idx);
    if (!f || f->type != A_CHOICE) return -1;
    const char *v = *(char *const *)((const char *)a + f->off);
    if (!v) return -1;
    size_t n = strlen(v);
    int i = 0;
    for (const char *p = f->choices; *p; i++) {
        size_t len = strcspn(p, "|");
        if (len == n && strncmp(p, v, n) == 0) return i;
        p += len + (p[len] == '|');
    }
    return -1;
}

#define FAIL(...)                                                                        \
    do {                                                                                 \
        snprintf(msg, msglen, __VA_ARGS__);                                              \
        return -1;                                                                       \
    } while (0)

/* --model bert is Megatron-BERT: it reads one sentence-level dataset under a WordPiece
 * tokenizer, and its architecture flags are fixed. */
static int check_bert(const td_args *a, char *msg, size_t msglen)
{
    const char *tok = a->tokenizer_type ? a->tokenizer_type : "";
    if (strncmp(tok, "BertWordPiece", 13) != 0 && strcmp(tok, "HuggingFaceTokenizer") != 0)
        FAIL("--model bert needs BERT's WordPiece tokenizer: --tokenizer-type BertWordPieceLowerCase (or "
             "BertWordPieceCase) --vocab-file vocab.txt, or a WordPiece tokenizer.json");
    if (a->data_path.n != 1)
        FAIL("--model bert reads one sentence-level dataset: give --data-path PREFIX (from trident preprocess "
             "--split-sentences), not a blend");
    if (strcmp(a->normalization, "LayerNorm") != 0)
        FAIL("--model bert is Megatron-BERT, with LayerNorm: leave out --normalization %s", a->normalization);
    if (strcmp(a->position_embedding_type, "learned_absolute") != 0)
        FAIL("--model bert has learned absolute positions: leave out --position-embedding-type %s",
             a->position_embedding_type);
    if (a->swiglu || a->gated_linear_unit || a->disable_bias_linear || a->untie_embeddings_and_output_weights)
        FAIL("--model bert is Megatron-BERT (an ungated MLP, biases, the decoder tied to the word embedding): leave "
             "out --swiglu, --gated-linear-unit, --disable-bias-linear and --untie-embeddings-and-output-weights");
    if (a->bert_binary_head && a->bert_no_binary_head && td_args_given(a, "--bert-binary-head"))
        FAIL("give at most one of --bert-binary-head and --bert-no-binary-head");
    if (a->reset_attention_mask || a->reset_position_ids || a->eod_mask_loss)
        FAIL("--model bert trains on padded sentence pairs with bidirectional attention: leave out "
             "--reset-attention-mask, --reset-position-ids and --eod-mask-loss (packed documents of a causal model)");
    return 0;
}

int td_args_check_model(const td_args *a, char *msg, size_t msglen)
{
    int bert = a->model && strcmp(a->model, "bert") == 0;
    if (!bert && (td_args_given(a, "--bert-no-binary-head") || td_args_given(a, "--bert-binary-head")))
        FAIL("--bert-binary-head and --bert-no-binary-head need --model bert");
    return bert ? check_bert(a, msg, msglen) : 0;
}

/* Appends text to a growing buffer. */
static void jput(char **buf, size_t *n, size_t *cap, const char *s)
{
    size_t k = strlen(s);
    if (*n + k + 1 > *cap) {
        *cap = (*n + k + 1) * 2;
        *buf = td_xrealloc(*buf, *cap);
    }
    memcpy(*buf + *n, s, k + 1);
    *n += k;
}

static void jstring(char **buf, size_t *n, size_t *cap, const char *s)
{
    jput(buf, n, cap, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char e[8] = {(char)*p, 0};
        if (*p == '"' || *p == '\\') e[0] = '\\', e[1] = (char)*p, e[2] = 0;
        else if (*p < 0x20) snprintf(e, sizeof e, "\\u%04x", *p);
        jput(buf, n, cap, e);
    }
    jput(buf, n, cap, "\"");
}

char *td_args_json(const td_args *a, unsigned cmd)
{
    char *buf = NULL, tmp[64];
    size_t n = 0, cap = 0;
    jput(&buf, &n, &cap, "{");
    int first = 1;
    for (int i = 0; i < td_nflags; i++) {
        const flag_t *f = &td_flags[i];
        if (!(f->cmds & cmd)) continue;
        jput(&buf, &n, &cap, first ? "\"" : ", \"");
        first = 0;
        for (const char *p = f->name + 2; *p; p++) {
            char c[2] = {*p == '-' ? '_' : *p, 0};
            jput(&buf, &n, &cap, c);
        }
        jput(&buf, &n, &cap, "\": ");
        const char *field = (const char *)a + f->off;
        int set = a->set_[i] || f->def;
        switch (f->type) {
        case A_INT: snprintf(tmp, sizeof tmp, "%d", *(const int *)field); break;
        case A_I64: snprintf(tmp, sizeof tmp, "%lld", (long long)*(const int64_t *)field); break;
        case A_FLOAT: snprintf(tmp, sizeof tmp, "%.17g", *(const double *)field); break;
        case A_BOOL: snprintf(tmp, sizeof tmp, "%s", *(const int *)field ? "true" : "false"); break;
        default: tmp[0] = 0; break;
        }
        if (f->type == A_STR || f->type == A_CHOICE) {
            const char *v = *(char *const *)field;
            if (v) jstring(&buf, &n, &cap, v);
            else jput(&buf, &n, &cap, "null");
        } else if (f->type == A_LIST) {
            const td_strlist *l = (const td_strlist *)field;
            jput(&buf, &n, &cap, "[");
            for (int k = 0; k < l->n; k++) {
                if (k) jput(&buf, &n, &cap, ", ");
                jstring(&buf, &n, &cap, l->v[k]);
            }
            jput(&buf, &n, &cap, "]");
        } else {
            jput(&buf, &n, &cap, set || f->type == A_BOOL ? tmp : "null");
        }
    }
    jput(&buf, &n, &cap, "}");
    return buf;
}

void td_args_usage(unsigned cmd, const char *prog, const char *summary)
{
    printf("usage: %s [flags]\n", prog);
    if (summary) printf("\n%s\n", summary);
    const char *group = NULL;
    for (int i = 0; i < td_nflags; i++) {
        const flag_t *f = &td_flags[i];
        if (!(f->cmds & cmd)) continue;
        if (!group || strcmp(group, f->group) != 0) {
            group = f->group;
            printf("\n%s:\n", group);
        }
        const char *meta = f->type == A_BOOL ? "" : f->type == A_LIST ? " V [V ...]"
                         : f->type == A_CHOICE ? " {choice}" : f->type == A_STR ? " STR"
                         : f->type == A_FLOAT ? " X" : " N";
        char head[96];
        snprintf(head, sizeof head, "  %s%s", f->name, meta);
        printf("%-44s %s", head, f->help);
        if (f->type == A_CHOICE) printf(" {%s}", f->choices);
        if (f->def && f->type != A_BOOL) printf(" [default %s]", f->def);
        printf("\n");
    }
    printf("\n  --help                                     this message\n");
}

void td_args_copy(td_args *dst, const td_args *src)
{
    *dst = *src;
    for (int i = 0; i < td_nflags; i++) {
        const flag_t *f = &td_flags[i];
        char *d = (char *)dst + f->off;
        const char *s = (const char *)src + f->off;
        if (f->type == A_STR || f->type == A_CHOICE) {
            const char *v = *(char *const *)s;
            *(char **)d = v ? td_xstrdup(v) : NULL;
        } else if (f->type == A_LIST) {
            const td_strlist *l = (const td_strlist *)s;
            td_strlist *out = (td_strlist *)d;
            out->n = 0;
            out->v = NULL;
            for (int k = 0; k < l->n; k++) list_push(out, l->v[k]);
        }
    }
}

void td_args_free(td_args *a)
{
    for (int i = 0; i < td_nflags; i++) clear_field(a, &td_flags[i]);
}

int td_lora_modules_parse(const char *list, unsigned *mask, char *msg, size_t msglen)
{
    *mask = 0;
    if (strcmp(list, "all-linear") == 0) {
        *mask = 0x7f;
        return 0;
    }
    /* Hugging Face BERT's names of the attention's projections (PEFT's default for BERT: query,
     * value), bits 0-2 */
    static const char *const bert[3] = {"query", "key", "value"};
    for (const char *p = list; *p;) {
        size_t n = strcspn(p, ",");
        int i = 0, found = 0;
        for (const char *c = TD_LORA_MODULE_CHOICES; c; c = strchr(c, '|') ? strchr(c, '|') + 1 : NULL, i++)
            if (n && n == strcspn(c, "|") && strncmp(c, p, n) == 0) {
                found = 1;
                break;
            }
        for (int b = 0; b < 3 && !found; b++)
            if (n == strlen(bert[b]) && strncmp(bert[b], p, n) == 0) found = 1, i = b;
        if (!found) {
            snprintf(msg, msglen, "--lora-target-modules: '%.*s' is not one of q_proj, k_proj, v_proj, o_proj, "
                     "gate_proj, up_proj, down_proj (BERT's query, key, value too; comma-separated) or all-linear",
                     (int)n, p);
            return -1;
        }
        *mask |= 1u << i;
        p += n;
        if (*p == ',') p++;
    }
    if (!*mask) {
        snprintf(msg, msglen, "--lora-target-modules is empty: name at least one module (q_proj,v_proj is PEFT's default)");
        return -1;
    }
    return 0;
}

void td_lora_modules_str(unsigned mask, char *out, size_t len)
{
    size_t used = 0;
    out[0] = 0;
    int i = 0;
    for (const char *c = TD_LORA_MODULE_CHOICES; c && used < len; c = strchr(c, '|') ? strchr(c, '|') + 1 : NULL, i++)
        if (mask >> i & 1) used += (size_t)snprintf(out + used, len - used, "%s%.*s", used ? "," : "",
                                                    (int)strcspn(c, "|"), c);
}
