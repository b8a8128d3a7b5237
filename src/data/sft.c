/* SFT samples: JSONL lines into tokens and answer masks, written as an indexed dataset and its
 * mask sidecar. See include/data/trident/sft.h. */
#include "trident/sft.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "prep_impl.h"
#include "trident/check.h"
#include "trident/indexed.h"

int sft_parse_format(const char *name, sft_format *f)
{
    static const char *const names[] = {"prompt-response", "chat", "sharegpt"};
    for (int i = 0; i < 3; i++)
        if (name && strcmp(name, names[i]) == 0) return *f = (sft_format)i, 0;
    return -1;
}

char *sft_mask_prefix(const char *data_prefix)
{
    size_t n = strlen(data_prefix) + sizeof "_answer_mask";
    char *p = td_xmalloc(n);
    snprintf(p, n, "%s_answer_mask", data_prefix);
    return p;
}

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

static void push_mask(bpe_ids *mask, size_t n, int32_t v)
{
    for (size_t i = 0; i < n; i++) bpe_ids_push(mask, v);
}

/* ---- prompt/response ---------------------------------------------------------------------- */

/* The placeholder at p ('{'): its key's length, or 0 when p does not open one. */
static size_t placeholder(const char *p)
{
    if (*p != '{') return 0;
    const char *e = strchr(p + 1, '}');
    if (!e || e == p + 1) return 0;
    for (const char *q = p + 1; q < e; q++)
        if (*q == '{' || *q == '"') return 0;
    return (size_t)(e - p - 1);
}

int sft_check_prompt_template(const char *tmpl, char *err, size_t errlen)
{
    if (!tmpl || !*tmpl)
        return fail(err, errlen, "--prompt-template is required with --sft-format prompt-response "
                                 "(e.g. 'Q: {input}\\n\\nA: {output}', the answer's key last)");
    const char *last = NULL;
    for (const char *p = tmpl; *p; p++) {
        size_t k = placeholder(p);
        if (k) last = p, p += k + 1;
    }
    if (!last) return fail(err, errlen, "--prompt-template '%s' has no {key} placeholder; the answer's {key} ends it", tmpl);
    if (last[placeholder(last) + 2] != '\0')
        return fail(err, errlen, "--prompt-template '%s' must end with the answer's {key} placeholder", tmpl);
    return 0;
}

/* Appends tmpl[0..n) to out with \n, \t, \\ decoded. */
static void put_unescaped(prep_str *out, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '\\' && i + 1 < n && (s[i + 1] == 'n' || s[i + 1] == 't' || s[i + 1] == '\\')) {
            i++;
            c = s[i] == 'n' ? '\n' : s[i] == 't' ? '\t' : '\\';
        }
        prep_str_put(out, &c, 1);
    }
}

/* The line's string value of key[0..n), spaces stripped at both ends (Megatron-Bridge's strip(" ")). */
static int value_of(const cJSON *o, const char *key, size_t n, prep_str *out, char *err, size_t errlen)
{
    char name[256];
    if (n >= sizeof name) return fail(err, errlen, "a placeholder key of more than 255 bytes");
    memcpy(name, key, n);
    name[n] = '\0';
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!v) return fail(err, errlen, "no \"%s\" key (the prompt template names it)", name);
    if (!cJSON_IsString(v)) return fail(err, errlen, "\"%s\" is not a string", name);
    const char *s = v->valuestring, *e = s + strlen(s);
    while (s < e && *s == ' ') s++;
    while (e > s && e[-1] == ' ') e--;
    prep_str_put(out, s, (size_t)(e - s));
    return 0;
}

/* Whether key[0..n) is one of the comma-separated fields. */
static int is_field(const char *fields, const char *key, size_t n)
{
    for (const char *f = fields; f && *f;) {
        const char *e = strchr(f, ',');
        size_t l = e ? (size_t)(e - f) : strlen(f);
        if (l == n && memcmp(f, key, n) == 0) return 1;
        if (!e) break;
        f = e + 1;
    }
    return 0;
}

/* The tokens of s appended to ids, each marked v in mask; s emptied. */
static void flush(const tok_tokenizer *t, tok_worker *w, prep_str *s, int32_t v, bpe_ids *ids, bpe_ids *mask)
{
    size_t n0 = ids->n;
    if (s->n) tok_encode_special(t, w, s->s, s->n, ids);
    push_mask(mask, ids->n - n0, v);
    s->n = 0;
}

/* The prompt's text encoded as one piece, except each truncation field's value, encoded apart
 * with the template's spaces before it (as Bridge splits the template at " *{key}") and marked
 * SFT_MASK_FIELD (+ 1 every other field); then the answer and EOD marked SFT_MASK_ANSWER. */
static int encode_pair(const sft_config *c, const tok_tokenizer *t, tok_worker *w, const cJSON *o, bpe_ids *ids,
                       bpe_ids *mask, char *err, size_t errlen)
{
    prep_str prompt = {0}, field = {0}, answer = {0};
    const char *p = c->prompt_template, *lit = p;
    int rc = 0, nfield = 0;
    while (*p && rc == 0) {
        size_t k = placeholder(p);
        if (!k) {
            p++;
            continue;
        }
        int is_answer = p[k + 2] == '\0', cut = !is_answer && is_field(c->truncation_field, p + 1, k);
        size_t litn = (size_t)(p - lit), sp = 0;
        while (cut && sp < litn && lit[litn - 1 - sp] == ' ') sp++;
        put_unescaped(&prompt, lit, litn - sp);
        if (cut) {
            flush(t, w, &prompt, SFT_MASK_PROMPT, ids, mask);
            prep_str_put(&field, lit + litn - sp, sp);
            rc = value_of(o, p + 1, k, &field, err, errlen);
            if (rc == 0) flush(t, w, &field, SFT_MASK_FIELD + (nfield++ & 1), ids, mask);
        } else {
            rc = value_of(o, p + 1, k, is_answer ? &answer : &prompt, err, errlen);
        }
        p += k + 2;
        lit = p;
    }
    if (rc == 0) {
        flush(t, w, &prompt, SFT_MASK_PROMPT, ids, mask);
        size_t n0 = ids->n;
        if (answer.n) tok_encode_special(t, w, answer.s, answer.n, ids);
        if (tok_eod_id(t) >= 0) bpe_ids_push(ids, tok_eod_id(t));
        push_mask(mask, ids->n - n0, SFT_MASK_ANSWER);
    }
    prep_str_free(&prompt);
    prep_str_free(&field);
    prep_str_free(&answer);
    return rc;
}

int sft_check_truncation_field(const char *tmpl, const char *fields, char *err, size_t errlen)
{
    for (const char *f = fields; f && *f;) {
        const char *e = strchr(f, ',');
        size_t l = e ? (size_t)(e - f) : strlen(f);
        int found = 0, answer = 0;
        for (const char *p = tmpl; p && *p; p++) {
            size_t k = placeholder(p);
            if (!k) continue;
            if (k == l && memcmp(p + 1, f, l) == 0) found = 1, answer = p[k + 2] == '\0';
            p += k + 1;
        }
        if (!found || answer || l == 0)
            return fail(err, errlen, "--sft-truncation-field '%.*s' %s; name prompt keys of --prompt-template '%s', "
                        "comma-separated", (int)l, f, answer ? "is the answer's key (the answer is kept)" :
                        "is not a {key} of the prompt template", tmpl);
        for (const char *g = fields; g < f; g++)
            if ((g == fields || g[-1] == ',') && strncmp(g, f, l) == 0 && (g[l] == ',' || g[l] == '\0'))
                return fail(err, errlen, "--sft-truncation-field lists '%.*s' twice", (int)l, f);
        if (!e) break;
        f = e + 1;
    }
    return 0;
}

const char *sft_default_truncation_field(const char *tmpl)
{
    char err[8];
    return tmpl && sft_check_truncation_field(tmpl, "input", err, sizeof err) == 0 ? "input" : "";
}

int sft_parse_truncation(const char *name, sft_trunc *t)
{
    if (name && strcmp(name, "right") == 0) return *t = SFT_TRUNC_RIGHT, 0;
    if (name && strcmp(name, "left") == 0) return *t = SFT_TRUNC_LEFT, 0;
    return -1;
}

/* ---- chat and ShareGPT ---------------------------------------------------------------------- */

/* ShareGPT's speaker names as chat roles: human -> user, gpt -> assistant, others lower-cased. */
static void sharegpt_role(const char *from, char *role, size_t n)
{
    size_t i = 0;
    for (; from[i] && i + 1 < n; i++) role[i] = (char)(from[i] >= 'A' && from[i] <= 'Z' ? from[i] + 32 : from[i]);
    role[i] = '\0';
    if (strcmp(role, "human") == 0) snprintf(role, n, "user");
    else if (strcmp(role, "gpt") == 0) snprintf(role, n, "assistant");
}

/* The line's conversation as a new cJSON array of {role, content} messages, or NULL with err. */
static cJSON *conversation(sft_format f, const cJSON *o, char *err, size_t errlen)
{
    if (f == SFT_CHAT) {
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(o, "messages");
        if (!cJSON_IsArray(m) || !m->child)
            return fail(err, errlen, "no \"messages\" list of {\"role\", \"content\"} messages"), NULL;
        int i = 1;
        for (const cJSON *e = m->child; e; e = e->next, i++)
            if (!cJSON_IsObject(e) || !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(e, "role")))
                return fail(err, errlen, "message %d has no \"role\" string", i), NULL;
        return cJSON_Duplicate(m, 1);
    }
    const cJSON *cv = cJSON_GetObjectItemCaseSensitive(o, "conversations");
    if (!cJSON_IsArray(cv) || !cv->child)
        return fail(err, errlen, "no \"conversations\" list of {\"from\", \"value\"} turns"), NULL;
    cJSON *out = cJSON_CreateArray();
    const cJSON *sys = cJSON_GetObjectItemCaseSensitive(o, "system");
    if (cJSON_IsString(sys) && *sys->valuestring) {
        cJSON *msg = cJSON_CreateObject();
        cJSON_AddStringToObject(msg, "role", "system");
        cJSON_AddStringToObject(msg, "content", sys->valuestring);
        cJSON_AddItemToArray(out, msg);
    }
    int i = 1;
    for (const cJSON *e = cv->child; e; e = e->next, i++) {
        const cJSON *from = cJSON_GetObjectItemCaseSensitive(e, "from"), *v = cJSON_GetObjectItemCaseSensitive(e, "value");
        if (!cJSON_IsString(from) || !cJSON_IsString(v)) {
            cJSON_Delete(out);
            return fail(err, errlen, "turn %d has no \"from\" and \"value\" strings", i), NULL;
        }
        char role[64];
        sharegpt_role(from->valuestring, role, sizeof role);
        cJSON *msg = cJSON_CreateObject();
        cJSON_AddStringToObject(msg, "role", role);
        cJSON_AddStringToObject(msg, "content", v->valuestring);
        cJSON_AddItemToArray(out, msg);
    }
    return out;
}

/* The first n messages of m rendered: a malloc'd text (length in *len) or NULL with err. */
static char *render_first(const sft_config *c, const cJSON *m, int n, int gen, size_t *len, char *err, size_t errlen)
{
    cJSON *part = cJSON_CreateArray();
    int i = 0;
    for (const cJSON *e = m->child; e && i < n; e = e->next, i++) cJSON_AddItemToArray(part, cJSON_Duplicate(e, 1));
    cJSON *ctx = ct_chat_context(c->chat, part, gen, NULL, NULL);
    char why[384] = "";
    char *text = ct_render(c->tmpl, ctx, NULL, len, why, sizeof why);
    cJSON_Delete(ctx);
    cJSON_Delete(part);
    if (!text) fail(err, errlen, "the chat template refused the conversation: %s", why);
    return text;
}

/* Whether render(messages[:n], gen 0) equals `with` (the gen 1 render of the same messages). */
static int always_prompts(const sft_config *c, const cJSON *m, int n, const char *with, size_t wl)
{
    size_t l0 = 0;
    char err[64];
    char *without = render_first(c, m, n, 0, &l0, err, sizeof err);
    int same = without && l0 == wl && memcmp(without, with, wl) == 0;
    free(without);
    return same;
}

static size_t common_prefix(const bpe_ids *a, const bpe_ids *b)
{
    size_t i = 0;
    while (i < a->n && i < b->n && a->ids[i] == b->ids[i]) i++;
    return i;
}

/* The tokens of render(messages[:n], gen) and their common prefix with full's; -1 with err when
 * that render's text is not a prefix of the whole conversation's. */
static long prefix_tokens(const sft_config *c, const tok_tokenizer *t, tok_worker *w, const cJSON *m, int n, int gen,
                          const char *full, size_t full_len, const bpe_ids *full_ids, char *err, size_t errlen)
{
    size_t len = 0;
    char *text = render_first(c, m, n, gen, &len, err, errlen);
    if (!text) return -1;
    if (len > full_len || memcmp(text, full, len) != 0) {
        free(text);
        if (!gen) { /* a template that appends the generation prompt whatever add_generation_prompt says */
            size_t l2 = 0;
            char *with = render_first(c, m, n, 1, &l2, err, errlen);
            int same = with && always_prompts(c, m, n, with, l2);
            free(with);
            if (same)
                return fail(err, errlen, "the chat template appends the assistant's generation prompt even when "
                                         "add_generation_prompt is false (as Llama 3.0's first template does), so where "
                                         "an answer ends cannot be told; use a template that honours "
                                         "add_generation_prompt (e.g. Llama 3.1's)");
        }
        return fail(err, errlen, "the chat template does not render the first %d messages%s as the start of the whole "
                                 "conversation, so the assistant's tokens cannot be told apart; use a template that "
                                 "renders earlier turns unchanged", n, gen ? " with the generation prompt" : "");
    }
    bpe_ids ids = {0};
    tok_encode_special(t, w, text, len, &ids);
    free(text);
    size_t k = common_prefix(&ids, full_ids);
    bpe_ids_free(&ids);
    return (long)k;
}

static int encode_chat(const sft_config *c, const tok_tokenizer *t, tok_worker *w, const cJSON *o, bpe_ids *ids,
                       bpe_ids *mask, char *err, size_t errlen)
{
    cJSON *m = conversation(c->format, o, err, errlen);
    if (!m) return -1;
    int rc = -1, answers = 0;
    size_t len = 0;
    int n = cJSON_GetArraySize(m);
    char *full = render_first(c, m, n, 0, &len, err, errlen);
    bpe_ids all = {0};
    if (!full) goto out;
    tok_encode_special(t, w, full, len, &all);
    int32_t *mk = td_xcalloc(all.n ? all.n : 1, sizeof *mk);
    int k = 0;
    for (const cJSON *e = m->child; e; e = e->next, k++) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(e, "role");
        if (!cJSON_IsString(role) || strcmp(role->valuestring, "assistant") != 0) continue;
        long a = prefix_tokens(c, t, w, m, k, 1, full, len, &all, err, errlen);
        long b = a < 0 ? -1 : prefix_tokens(c, t, w, m, k + 1, 0, full, len, &all, err, errlen);
        if (b < 0) {
            free(mk);
            goto out;
        }
        for (long i = a; i < b; i++) mk[i] = 1;
        answers++;
    }
    if (!answers) {
        free(mk);
        fail(err, errlen, "no assistant turn: nothing to learn (roles are \"assistant\"; ShareGPT's \"gpt\")");
        goto out;
    }
    for (size_t i = 0; i < all.n; i++) bpe_ids_push(ids, all.ids[i]), bpe_ids_push(mask, mk[i]);
    free(mk);
    rc = 0;
out:
    bpe_ids_free(&all);
    free(full);
    cJSON_Delete(m);
    return rc;
}

int sft_encode(const sft_config *c, const tok_tokenizer *t, tok_worker *w, const char *line, size_t len, bpe_ids *ids,
               bpe_ids *mask, char *err, size_t errlen)
{
    cJSON *o = cJSON_ParseWithLength(line, len);
    if (!o || !cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return fail(err, errlen, "not a JSON object");
    }
    size_t n0 = ids->n, m0 = mask->n;
    int rc = c->format == SFT_PROMPT_RESPONSE ? encode_pair(c, t, w, o, ids, mask, err, errlen)
                                              : encode_chat(c, t, w, o, ids, mask, err, errlen);
    cJSON_Delete(o);
    if (rc) ids->n = n0, mask->n = m0;
    return rc;
}

int64_t sft_truncate(int32_t *toks, int32_t *am, int64_t len, int64_t budget, sft_trunc how)
{
    if (len <= budget) return len;
    int64_t excess = len - budget, nf = 0;
    for (int64_t i = 0; i < len; i++) nf += am[i] >= SFT_MASK_FIELD && (i == 0 || am[i - 1] != am[i]);
    if (nf > 0) { /* Bridge's shares: excess / nf each, the first excess % nf fields one more */
        int64_t total = excess, f = 0, out = 0;
        for (int64_t i = 0; i < len;) {
            if (am[i] < SFT_MASK_FIELD) {
                toks[out] = toks[i], am[out] = am[i], out++, i++;
                continue;
            }
            int64_t j = i + 1;
            while (j < len && am[j] == am[i]) j++;
            int64_t share = total / nf + (f < total % nf), cut = share < j - i ? share : j - i;
            f++, excess -= cut;
            int64_t b = how == SFT_TRUNC_LEFT ? i + cut : i, e = how == SFT_TRUNC_LEFT ? j : j - cut;
            for (int64_t k = b; k < e; k++) toks[out] = toks[k], am[out] = am[k], out++;
            i = j;
        }
        len = out;
    }
    if (excess > 0) { /* what the fields could not give: the sample's end (right) or start (left) */
        if (how == SFT_TRUNC_LEFT) {
            memmove(toks, toks + excess, (size_t)(len - excess) * sizeof *toks);
            memmove(am, am + excess, (size_t)(len - excess) * sizeof *am);
        }
        len -= excess;
    }
    return len;
}

int sft_row(const int32_t *toks, const int32_t *am, int64_t len, int seq, int answer_only, int32_t pad, int32_t *ids,
            int32_t *targets, float *mask)
{
    int64_t n = len < seq + 1 ? len : seq + 1; /* the tokens kept: the first seq + 1 */
    int counted = 0;
    for (int t = 0; t < seq; t++) {
        ids[t] = t < n ? toks[t] : pad;
        int has = t + 1 < n;
        targets[t] = has ? toks[t + 1] : pad;
        int c = has && (!answer_only || am[t + 1] == SFT_MASK_ANSWER); /* the target token is the answer's */
        mask[t] = c ? 1.0f : 0.0f;
        counted += c;
    }
    return counted;
}

/* ---- the run ------------------------------------------------------------------------------ */

#define SFT_BATCH_BYTES (1u << 20) /* text a worker's share of a batch holds, about */

typedef struct {
    size_t off, len; /* in the batch's text */
    int64_t lineno;
} sft_line;

/* A worker's share of a batch: lines [beg, end), encoded in order until the first bad one. */
typedef struct {
    const sft_config *c;
    const tok_tokenizer *t;
    tok_worker *w;
    const char *text;
    const sft_line *lines;
    size_t beg, end, bad; /* bad: the first line that failed, or end */
    bpe_ids ids, mask;    /* the share's samples back to back */
    int64_t *lens;        /* (end - beg) each line's tokens, -1 for a blank line */
    size_t lens_cap;
    char why[512];
    pthread_t thread;
} sft_part;

typedef struct {
    sft_prep_stats *st;
    idx_writer *tokens, *masks;
    int nparts;
    sft_part *parts;
    prep_str text;      /* the batch's lines */
    sft_line *lines;
    size_t nlines, lines_cap;
} sft_run;

static int is_blank(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != ' ' && p[i] != '\t' && p[i] != '\r') return 0;
    return 1;
}

static void *encode_part(void *arg)
{
    sft_part *p = arg;
    p->ids.n = p->mask.n = 0;
    p->bad = p->end;
    for (size_t i = p->beg; i < p->end; i++) {
        const sft_line *l = &p->lines[i];
        size_t n0 = p->ids.n;
        if (is_blank(p->text + l->off, l->len)) {
            p->lens[i - p->beg] = -1;
            continue;
        }
        if (sft_encode(p->c, p->t, p->w, p->text + l->off, l->len, &p->ids, &p->mask, p->why, sizeof p->why) != 0) {
            p->bad = i;
            break;
        }
        p->lens[i - p->beg] = (int64_t)(p->ids.n - n0);
    }
    return NULL;
}

/* The batch's lines cut into nparts shares in order, encoded by as many threads, then written in
 * order up to the first bad line (so the output does not depend on the workers); the batch
 * emptied. */
static int flush_batch(sft_run *r, const char *file, char *err, size_t errlen)
{
    size_t n = r->nlines, W = (size_t)r->nparts;
    for (size_t k = 0; k < W; k++) {
        sft_part *p = &r->parts[k];
        p->text = r->text.s, p->lines = r->lines;
        p->beg = n * k / W, p->end = n * (k + 1) / W;
        if (p->end - p->beg > p->lens_cap) {
            p->lens_cap = p->end - p->beg;
            p->lens = td_xrealloc(p->lens, p->lens_cap * sizeof *p->lens);
        }
    }
    size_t started = 1;
    for (; started < W; started++)
        if (pthread_create(&r->parts[started].thread, NULL, encode_part, &r->parts[started]) != 0) break;
    encode_part(&r->parts[0]);
    for (size_t k = started; k < W; k++) encode_part(&r->parts[k]); /* threads that did not start */
    for (size_t k = 1; k < started; k++) pthread_join(r->parts[k].thread, NULL);
    for (size_t k = 0; k < W; k++) {
        sft_part *p = &r->parts[k];
        size_t off = 0;
        for (size_t i = p->beg; i < p->bad; i++) {
            int64_t len = p->lens[i - p->beg];
            if (len < 0) {
                r->st->blank_lines++;
                continue;
            }
            if (idx_writer_add(r->tokens, p->ids.ids + off, (size_t)len, err, errlen) != 0 ||
                idx_writer_add(r->masks, p->mask.ids + off, (size_t)len, err, errlen) != 0)
                return -1;
            r->st->samples++;
            r->st->tokens += len;
            for (int64_t j = 0; j < len; j++) r->st->answer_tokens += p->mask.ids[off + (size_t)j] == SFT_MASK_ANSWER;
            off += (size_t)len;
        }
        if (p->bad < p->end)
            return fail(err, errlen, "%s:%lld: %s", file, (long long)r->lines[p->bad].lineno, p->why);
    }
    r->nlines = 0;
    r->text.n = 0;
    return 0;
}

static void add_line(sft_run *r, const char *p, size_t n, int64_t lineno)
{
    if (r->nlines == r->lines_cap) {
        r->lines_cap = r->lines_cap ? 2 * r->lines_cap : 1024;
        r->lines = td_xrealloc(r->lines, r->lines_cap * sizeof *r->lines);
    }
    r->lines[r->nlines++] = (sft_line){r->text.n, n, lineno};
    prep_str_put(&r->text, p, n);
}

static int one_file(sft_run *r, const char *file, char *err, size_t errlen)
{
    prep_src s;
    if (prep_src_open(&s, file, err, errlen) != 0) return -1;
    prep_str buf = {0};
    char chunk[1 << 16];
    int64_t lineno = 0;
    int rc = 0;
    size_t batch = (size_t)r->nparts * SFT_BATCH_BYTES;
    for (;;) {
        ssize_t got = prep_src_read(&s, chunk, sizeof chunk, err, errlen);
        if (got < 0) {
            rc = -1;
            break;
        }
        if (got > 0) prep_str_put(&buf, chunk, (size_t)got);
        size_t start = 0;
        for (size_t i = 0; i < buf.n && rc == 0; i++)
            if (buf.s[i] == '\n') {
                add_line(r, buf.s + start, i - start, ++lineno);
                start = i + 1;
                if (r->text.n >= batch) rc = flush_batch(r, file, err, errlen);
            }
        if (rc) break;
        memmove(buf.s, buf.s + start, buf.n - start);
        buf.n -= start;
        if (got == 0) {
            if (buf.n) add_line(r, buf.s, buf.n, ++lineno);
            rc = flush_batch(r, file, err, errlen);
            break;
        }
    }
    prep_str_free(&buf);
    prep_src_close(&s);
    return rc;
}

int sft_prep_run(const sft_config *c, const tok_tokenizer *t, const char *const *inputs, int n_inputs,
                 const char *output_prefix, sft_prep_stats *st, char *err, size_t errlen)
{
    sft_prep_stats local = {0};
    sft_run r = {.st = st ? st : &local, .nparts = c->workers > 1 ? c->workers : 1};
    *r.st = (sft_prep_stats){0};
    char *data = prep_dataset_prefix(output_prefix, "sft", 0);
    char *maskp = sft_mask_prefix(data);
    r.tokens = idx_writer_open(data, idx_dtype_for_vocab(tok_vocab_size(t)), err, errlen);
    r.masks = r.tokens ? idx_writer_open(maskp, IDX_U8, err, errlen) : NULL;
    int rc = r.masks ? 0 : -1;
    r.parts = td_xcalloc((size_t)r.nparts, sizeof *r.parts);
    for (int k = 0; k < r.nparts; k++) r.parts[k].c = c, r.parts[k].t = t, r.parts[k].w = tok_worker_new(t);
    for (int i = 0; i < n_inputs && rc == 0; i++) rc = one_file(&r, inputs[i], err, errlen);
    if (rc == 0 && r.st->samples == 0) rc = fail(err, errlen, "no samples in the inputs (every line blank)");
    if (rc == 0) {
        rc = idx_writer_finish(r.tokens, err, errlen);
        r.tokens = NULL;
        if (rc == 0) rc = idx_writer_finish(r.masks, err, errlen), r.masks = NULL;
    }
    if (r.tokens) idx_writer_abort(r.tokens);
    if (r.masks) idx_writer_abort(r.masks);
    for (int k = 0; k < r.nparts; k++) {
        tok_worker_free(r.parts[k].w);
        bpe_ids_free(&r.parts[k].ids);
        bpe_ids_free(&r.parts[k].mask);
        free(r.parts[k].lens);
    }
    free(r.parts);
    prep_str_free(&r.text);
    free(r.lines);
    free(data);
    free(maskp);
    return rc;
}
