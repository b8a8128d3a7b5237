/* Requests of trident serve: a body parsed and checked into a request, and the JSON of its
 * answers (request.h, docs/serve.md). */
#include "request.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/check.h"

static struct {
    const srv_config *cfg;
    const tok_tokenizer *tok;
    int positions; /* the model's */
} R;

void req_setup(const srv_config *cfg, const tok_tokenizer *tok, int positions)
{
    R.cfg = cfg;
    R.tok = tok;
    R.positions = positions;
}

/* ---- requests ---- */

void req_unref(request *r)
{
    pthread_mutex_lock(&r->mu);
    int left = --r->refs;
    pthread_mutex_unlock(&r->mu);
    if (left) return;
    for (int i = 0; i < r->n; i++) free(r->ids[i]), free(r->out[i]), free(r->logprobs ? r->logprobs[i] : NULL);
    free(r->ids), free(r->lens), free(r->out), free(r->out_lens), free(r->sse), free(r->logprobs), free(r->error);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

void req_sse_append(request *r, const char *text)
{
    size_t n = strlen(text);
    r->sse = td_xrealloc(r->sse, r->sse_len + n + 1);
    memcpy(r->sse + r->sse_len, text, n + 1);
    r->sse_len += n;
}

/* The text of n ids and its length (invalid UTF-8 left as the bytes are, so clients see what the
 * model produced; a NUL byte stays inside: see text_item). */
char *req_decode(const int32_t *ids, int n, size_t *len)
{
    char *text = NULL, err[256];
    *len = 0;
    if (n <= 0 || tok_decode(R.tok, ids, (size_t)n, &text, len, err, sizeof err)) {
        free(text);
        *len = 0;
        return td_xstrdup("");
    }
    return text;
}

/* A JSON string of n bytes as a cJSON item. cJSON's strings end at a NUL; this one escapes it
 * (\u0000) with the other control characters, quotes and backslashes, and keeps every other byte. */
static cJSON *text_item(const char *s, size_t n)
{
    char *q = td_xmalloc(6 * n + 3);
    size_t k = 0;
    q[k++] = '"';
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') q[k++] = '\\', q[k++] = (char)c;
        else if (c == '\n') q[k++] = '\\', q[k++] = 'n';
        else if (c == '\t') q[k++] = '\\', q[k++] = 't';
        else if (c == '\r') q[k++] = '\\', q[k++] = 'r';
        else if (c < 0x20) k += (size_t)sprintf(q + k, "\\u%04x", c);
        else q[k++] = (char)c;
    }
    q[k++] = '"';
    q[k] = 0;
    cJSON *item = cJSON_CreateRaw(q);
    free(q);
    return item;
}

/* Prompt i's continuation: its generated tokens without the end-of-document token that ended it
 * (generation stops there; the token is never part of the text). */
static int continuation(const request *r, int i, const int32_t **ids)
{
    int gen = r->out_lens[i] - r->lens[i];
    if (gen > 0 && r->g.eod >= 0 && r->out[i][r->out_lens[i] - 1] == r->g.eod) gen--;
    *ids = r->out[i] + r->lens[i];
    return gen > 0 ? gen : 0;
}

/* "stop" when prompt i ended at the end-of-document token, else "length". */
const char *req_finish_reason(const request *r, int i)
{
    int gen = r->out_lens[i] - r->lens[i];
    return gen > 0 && r->g.eod >= 0 && r->out[i][r->out_lens[i] - 1] == r->g.eod ? "stop" : "length";
}

/* An OpenAI completion as JSON text: the whole answer (chunk NULL), or one streamed event of
 * row stream_row with its text (finish: NULL while tokens come, then "stop" or "length"). */
char *req_openai_json(request *r, int stream_row, const char *chunk, size_t chunk_len, const char *finish)
{
    cJSON *o = cJSON_CreateObject();
    char id[48];
    snprintf(id, sizeof id, "cmpl-%llu", (unsigned long long)r->id);
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "object", "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)time(NULL));
    cJSON_AddStringToObject(o, "model", "trident");
    cJSON *ch = cJSON_AddArrayToObject(o, "choices");
    int64_t completion = 0, prompt = 0;
    for (int i = 0; i < r->n; i++) {
        if (chunk && i != stream_row) continue;
        cJSON *c = cJSON_CreateObject();
        int gen = r->out_lens[i] - r->lens[i];
        completion += gen > 0 ? gen : 0;
        prompt += r->lens[i];
        if (chunk) {
            cJSON_AddItemToObject(c, "text", text_item(chunk, chunk_len));
            cJSON_AddNumberToObject(c, "index", i);
            if (finish) cJSON_AddStringToObject(c, "finish_reason", finish);
            else cJSON_AddNullToObject(c, "finish_reason");
        } else {
            const int32_t *ids;
            size_t n;
            char *t = req_decode(ids, continuation(r, i, &ids), &n);
            cJSON_AddItemToObject(c, "text", text_item(t, n));
            free(t);
            cJSON_AddNumberToObject(c, "index", i);
            cJSON_AddStringToObject(c, "finish_reason", req_finish_reason(r, i));
        }
        cJSON_AddItemToArray(ch, c);
    }
    if (!chunk) {
        cJSON *u = cJSON_AddObjectToObject(o, "usage");
        cJSON_AddNumberToObject(u, "prompt_tokens", (double)prompt);
        cJSON_AddNumberToObject(u, "completion_tokens", (double)completion);
        cJSON_AddNumberToObject(u, "total_tokens", (double)(prompt + completion));
    }
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

/* Megatron's answer: {"text": [prompt + continuation], "segments": [[token texts]], "logprobs": null}. */
char *req_megatron_json(request *r)
{
    cJSON *o = cJSON_CreateObject(), *text = cJSON_AddArrayToObject(o, "text");
    cJSON *seg = cJSON_AddArrayToObject(o, "segments");
    for (int i = 0; i < r->n; i++) {
        const int32_t *gen;
        size_t n;
        char *t = req_decode(r->out[i], r->lens[i] + continuation(r, i, &gen), &n); /* the text stops before EOD */
        cJSON_AddItemToArray(text, text_item(t, n));
        free(t);
        cJSON *s = cJSON_CreateArray();
        for (int k = 0; k < r->out_lens[i]; k++) { /* every token, EOD included, as Megatron's */
            char *p = req_decode(r->out[i] + k, 1, &n);
            cJSON_AddItemToArray(s, text_item(p, n));
            free(p);
        }
        cJSON_AddItemToArray(seg, s);
    }
    if (r->want_logprobs) { /* log p(token i + 1 | tokens 0..i), as Megatron's */
        cJSON *lp = cJSON_AddArrayToObject(o, "logprobs");
        for (int i = 0; i < r->n; i++) {
            cJSON *row = cJSON_CreateArray();
            for (int k = 0; k + 1 < r->out_lens[i]; k++) cJSON_AddItemToArray(row, cJSON_CreateNumber(r->logprobs[i][k]));
            cJSON_AddItemToArray(lp, row);
        }
    } else {
        cJSON_AddNullToObject(o, "logprobs");
    }
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

/* A number field: absent (def), or a JSON number within [lo, hi]; -1 with the message otherwise. */
static int number(const cJSON *o, const char *key, double def, double lo, double hi, int integer, double *v, char *msg,
                  size_t len)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
    *v = def;
    if (!j || cJSON_IsNull(j)) return 0;
    if (!cJSON_IsNumber(j)) return snprintf(msg, len, "\"%s\" must be a number", key), -1;
    *v = j->valuedouble;
    if (*v < lo || *v > hi || (integer && *v != (double)(int64_t)*v))
        return snprintf(msg, len, "\"%s\" is %g; it takes %s from %g to %g", key, *v, integer ? "integers" : "numbers",
                        lo, hi), -1;
    return 0;
}

/* ---- JSON strings by length ----
 * cJSON's strings are C strings, so a "\u0000" inside a prompt would cut it: the prompts are read
 * again from the body (which cJSON has already accepted as JSON) with their lengths. */

static const char *skip_ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    return p;
}

static const char *skip_string(const char *p, const char *end) /* p at the opening quote */
{
    for (p++; p < end && *p != '"'; p++)
        if (*p == '\\') p++;
    return p < end ? p + 1 : end;
}

static const char *skip_value(const char *p, const char *end)
{
    if (p < end && *p == '"') return skip_string(p, end);
    int depth = 0;
    for (; p < end; p++) {
        if (*p == '"') {
            p = skip_string(p, end) - 1;
        } else if (*p == '{' || *p == '[') {
            depth++;
        } else if (*p == '}' || *p == ']') {
            if (depth == 0) return p;
            if (--depth == 0) return p + 1;
        } else if (depth == 0 && (*p == ',' || *p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) {
            return p;
        }
    }
    return end;
}

static unsigned hex4(const char *p)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        v = v << 4 | (unsigned)(c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c - 'A' + 10);
    }
    return v;
}

static size_t put_utf8(char *o, unsigned cp)
{
    if (cp < 0x80) return o[0] = (char)cp, 1;
    if (cp < 0x800) return o[0] = (char)(0xc0 | cp >> 6), o[1] = (char)(0x80 | (cp & 63)), 2;
    if (cp < 0x10000)
        return o[0] = (char)(0xe0 | cp >> 12), o[1] = (char)(0x80 | (cp >> 6 & 63)), o[2] = (char)(0x80 | (cp & 63)), 3;
    o[0] = (char)(0xf0 | cp >> 18), o[1] = (char)(0x80 | (cp >> 12 & 63));
    return o[2] = (char)(0x80 | (cp >> 6 & 63)), o[3] = (char)(0x80 | (cp & 63)), 4;
}

/* The string at p (its opening quote), unescaped into a new buffer of *n bytes (NUL-terminated
 * past them); a lone surrogate becomes U+FFFD. */
static char *read_string(const char *p, const char *end, size_t *n)
{
    const char *e = skip_string(p, end);
    char *o = td_xmalloc((size_t)(e - p) + 4);
    size_t k = 0;
    for (p++; p < e - 1; p++) {
        if (*p != '\\') {
            o[k++] = *p;
            continue;
        }
        char c = *++p;
        if (c == 'u' && p + 4 < e) {
            unsigned cp = hex4(p + 1);
            p += 4;
            if (cp >= 0xd800 && cp < 0xdc00 && p + 6 < e && p[1] == '\\' && p[2] == 'u') {
                unsigned lo = hex4(p + 3);
                if (lo >= 0xdc00 && lo < 0xe000) cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00), p += 6;
            }
            if (cp >= 0xd800 && cp < 0xe000) cp = 0xfffd;
            k += put_utf8(o + k, cp);
        } else {
            o[k++] = c == 'n' ? '\n' : c == 't' ? '\t' : c == 'r' ? '\r' : c == 'b' ? '\b' : c == 'f' ? '\f' : c;
        }
    }
    o[k] = 0;
    *n = k;
    return o;
}

/* The value of the first member `key` of the top-level object in body, or NULL. */
static const char *member(const char *body, size_t len, const char *key)
{
    const char *end = body + len, *p = skip_ws(body, end);
    if (p == end || *p != '{') return NULL;
    for (p = skip_ws(p + 1, end); p < end && *p == '"';) {
        size_t n;
        char *k = read_string(p, end, &n);
        int hit = n == strlen(key) && memcmp(k, key, n) == 0;
        free(k);
        p = skip_ws(skip_string(p, end), end);
        if (p < end && *p == ':') p = skip_ws(p + 1, end);
        if (hit) return p;
        p = skip_ws(skip_value(p, end), end);
        if (p < end && *p == ',') p = skip_ws(p + 1, end);
    }
    return NULL;
}

/* Prompt i (a string, or item i of an array) read by length; NULL if it is not a string. */
static char *prompt_text(const char *body, size_t len, const char *key, int i, size_t *n)
{
    const char *end = body + len, *p = member(body, len, key);
    if (!p) return NULL;
    if (*p == '[') {
        p = skip_ws(p + 1, end);
        for (int k = 0; k < i && p < end; k++) {
            p = skip_ws(skip_value(p, end), end);
            if (p < end && *p == ',') p = skip_ws(p + 1, end);
        }
    }
    return p < end && *p == '"' ? read_string(p, end, n) : NULL;
}

/* ---- request fields ----
 * Every field of a body is one the server honours, or one it has not built yet, accepted only
 * at the value that changes nothing (null always; false, 1, 0 or empty as the field's default):
 * a client asking for what is not built (log-probabilities, stop strings, several choices) is
 * told so by name, never answered as if it had been heard. */

enum { HONOURED, NOOP_ANY, NOOP_NULL, NOOP_FALSE, NOOP_ONE, NOOP_ZERO, NOOP_EMPTY };

typedef struct {
    const char *name;
    int api, kind;
    const char *why; /* what to do instead, for the refusal */
} field;

static const field FIELDS[] = {
    {"prompts", API_MEGATRON, HONOURED, NULL},
    {"tokens_to_generate", API_MEGATRON, HONOURED, NULL},
    {"temperature", API_MEGATRON, HONOURED, NULL},
    {"top_k", API_MEGATRON, HONOURED, NULL},
    {"top_p", API_MEGATRON, HONOURED, NULL},
    {"random_seed", API_MEGATRON, HONOURED, NULL},
    {"logprobs", API_MEGATRON, HONOURED, NULL},
    {"no_log", API_MEGATRON, NOOP_ANY, NULL}, /* Megatron's request logging: none here */
    {"add_BOS", API_MEGATRON, NOOP_FALSE, "no token is put before the prompts; leave it out or false"},
    {"stop_on_eol", API_MEGATRON, NOOP_FALSE, "generation stops only at the end-of-document token; leave it out or false"},
    {"stop_on_double_eol", API_MEGATRON, NOOP_FALSE,
     "generation stops only at the end-of-document token; leave it out or false"},
    {"prevent_newline_after_colon", API_MEGATRON, NOOP_FALSE, "leave it out or false"},
    {"top_p_decay", API_MEGATRON, NOOP_ZERO, "top_p stays as given; leave it out or 0"},
    {"top_p_bound", API_MEGATRON, NOOP_ZERO, "top_p stays as given; leave it out or 0"},
    {"beam_width", API_MEGATRON, NOOP_NULL, "no beam search; leave it out or null"},
    {"model", API_OPENAI, NOOP_ANY, NULL}, /* the server has one model */
    {"user", API_OPENAI, NOOP_ANY, NULL},  /* a client's label: changes nothing */
    {"prompt", API_OPENAI, HONOURED, NULL},
    {"max_tokens", API_OPENAI, HONOURED, NULL},
    {"temperature", API_OPENAI, HONOURED, NULL},
    {"top_p", API_OPENAI, HONOURED, NULL},
    {"seed", API_OPENAI, HONOURED, NULL},
    {"stream", API_OPENAI, HONOURED, NULL},
    {"echo", API_OPENAI, NOOP_FALSE,
     "the answer holds the continuation only, with no log-probabilities of the prompt; leave it out or false"},
    {"logprobs", API_OPENAI, NOOP_NULL,
     "no log-probabilities are computed here; leave it out or null (PUT /api takes \"logprobs\": true)"},
    {"stop", API_OPENAI, NOOP_EMPTY, "generation stops only at the end-of-document token; leave it out or null"},
    {"n", API_OPENAI, NOOP_ONE, "one completion a prompt; send the request again for more, or leave it out or 1"},
    {"best_of", API_OPENAI, NOOP_ONE, "one completion a prompt; leave it out or 1"},
    {"suffix", API_OPENAI, NOOP_EMPTY, "no text is inserted; leave it out or null"},
    {"presence_penalty", API_OPENAI, NOOP_ZERO, "no penalties; leave it out or 0"},
    {"frequency_penalty", API_OPENAI, NOOP_ZERO, "no penalties; leave it out or 0"},
    {"logit_bias", API_OPENAI, NOOP_EMPTY, "no biases; leave it out or null"},
    {"stream_options", API_OPENAI, NOOP_NULL, "the stream has no usage event; leave it out or null"},
};

/* Whether j is the no-op value of its kind. */
static int noop_value(const cJSON *j, int kind)
{
    if (cJSON_IsNull(j) || kind == NOOP_ANY) return 1;
    switch (kind) {
    case NOOP_FALSE: return cJSON_IsFalse(j);
    case NOOP_ONE: return cJSON_IsNumber(j) && j->valuedouble == 1;
    case NOOP_ZERO: return cJSON_IsNumber(j) && j->valuedouble == 0;
    case NOOP_EMPTY:
        return (cJSON_IsString(j) && !*j->valuestring) || ((cJSON_IsArray(j) || cJSON_IsObject(j)) && !j->child);
    default: return 0;
    }
}

/* 0, or -1 with the message naming the first field of o the server does not honour. */
static int check_fields(const cJSON *o, int api, char *msg, size_t mlen)
{
    for (const cJSON *j = o->child; j; j = j->next) {
        const field *f = NULL;
        for (size_t i = 0; i < sizeof FIELDS / sizeof *FIELDS && !f; i++)
            if (FIELDS[i].api == api && strcmp(FIELDS[i].name, j->string) == 0) f = &FIELDS[i];
        if (!f) {
            char known[400];
            size_t k = 0;
            known[0] = 0;
            for (size_t i = 0; i < sizeof FIELDS / sizeof *FIELDS && k < sizeof known - 40; i++)
                if (FIELDS[i].api == api && FIELDS[i].kind == HONOURED)
                    k += (size_t)snprintf(known + k, sizeof known - k, "%s%s", k ? ", " : "", FIELDS[i].name);
            snprintf(msg, mlen, "\"%s\" is not a field of %s (it takes %s)", j->string,
                     api == API_MEGATRON ? "PUT /api" : "POST /v1/completions", known);
            return -1;
        }
        if (f->kind != HONOURED && !noop_value(j, f->kind)) {
            snprintf(msg, mlen, "\"%s\" is not supported yet: %s", f->name, f->why);
            return -1;
        }
    }
    return 0;
}

/* A token-id prompt (an array of numbers, or of arrays). */
static int token_prompt(const cJSON *p)
{
    return cJSON_IsArray(p) && p->child && (cJSON_IsNumber(p->child) || cJSON_IsArray(p->child));
}

/* The request a body describes, or NULL with (code, msg). */
request *req_parse(int api, const char *body, size_t len, unsigned *code, char *msg, size_t mlen)
{
    *code = 400;
    cJSON *o = cJSON_ParseWithLength(body, len);
    if (!o || !cJSON_IsObject(o)) {
        snprintf(msg, mlen, "the body is not a JSON object");
        cJSON_Delete(o);
        return NULL;
    }
    if (check_fields(o, api, msg, mlen)) {
        cJSON_Delete(o);
        return NULL;
    }
    const srv_config *cfg = R.cfg;
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(o, api == API_MEGATRON ? "prompts" : "prompt");
    if (api == API_OPENAI && token_prompt(p)) {
        snprintf(msg, mlen, "\"prompt\" as token ids is not supported yet: send the prompt as text (a string or "
                 "strings)");
        cJSON_Delete(o);
        return NULL;
    }
    const char *pname = api == API_MEGATRON ? "prompts" : "prompt";
    int n = cJSON_IsString(p) && api == API_OPENAI ? 1 : cJSON_IsArray(p) ? cJSON_GetArraySize(p) : -1;
    double tokens, temp, top_k = 0, top_p, seed = (double)(cfg->seed % 9007199254740992ull);
    int stream = 0, err = 0, logprobs = 0;
    if (n < 1) {
        snprintf(msg, mlen, "\"%s\" must be %s with at least one prompt", pname,
                 api == API_MEGATRON ? "an array of strings" : "a string or an array of strings");
        err = 1;
    } else if (n > cfg->max_batch) {
        snprintf(msg, mlen, "%d prompts; a request takes at most %d (--max-batch)", n, cfg->max_batch);
        err = 1;
    } else if (api == API_MEGATRON) {
        err = number(o, "tokens_to_generate", 64, 0, cfg->max_tokens, 1, &tokens, msg, mlen) ||
              number(o, "temperature", 1.0, 0, 100, 0, &temp, msg, mlen) ||
              number(o, "top_k", 0, 0, 1e9, 1, &top_k, msg, mlen) || number(o, "top_p", 0, 0, 1, 0, &top_p, msg, mlen) ||
              number(o, "random_seed", seed, 0, 9007199254740992.0, 1, &seed, msg, mlen);
        const cJSON *lp = cJSON_GetObjectItemCaseSensitive(o, "logprobs");
        if (!err && lp && !cJSON_IsBool(lp)) snprintf(msg, mlen, "\"logprobs\" must be true or false"), err = 1;
        logprobs = cJSON_IsTrue(lp);
    } else {
        err = number(o, "max_tokens", 16, 0, cfg->max_tokens, 1, &tokens, msg, mlen) ||
              number(o, "temperature", 1.0, 0, 100, 0, &temp, msg, mlen) ||
              number(o, "top_p", 1.0, 0, 1, 0, &top_p, msg, mlen) ||
              number(o, "seed", seed, 0, 9007199254740992.0, 1, &seed, msg, mlen);
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(o, "stream");
        if (!err && st && !cJSON_IsBool(st)) snprintf(msg, mlen, "\"stream\" must be true or false"), err = 1;
        stream = cJSON_IsTrue(st);
    }
    if (err) {
        cJSON_Delete(o);
        return NULL;
    }
    request *r = td_xcalloc(1, sizeof *r);
    r->api = api, r->stream = stream, r->n = n, r->refs = 1, r->want_logprobs = logprobs;
    pthread_mutex_init(&r->mu, NULL);
    r->g = (gen_config){(int)tokens, temp == 0 || top_k == 1, (float)temp, (int)top_k, (float)top_p,
                        (uint64_t)seed, tok_eod_id(R.tok), 0};
    r->ids = td_xcalloc((size_t)n, sizeof *r->ids);
    r->out = td_xcalloc((size_t)n, sizeof *r->out);
    r->lens = td_xcalloc((size_t)n, sizeof(int));
    r->out_lens = td_xcalloc((size_t)n, sizeof(int));
    if (logprobs) r->logprobs = td_xcalloc((size_t)n, sizeof *r->logprobs);
    tok_worker *w = tok_worker_new(R.tok);
    for (int i = 0; i < n && !err; i++) {
        const cJSON *s = cJSON_IsString(p) ? p : cJSON_GetArrayItem(p, i);
        size_t tlen = 0;
        char *text = cJSON_IsString(s) ? prompt_text(body, len, pname, i, &tlen) : NULL;
        if (!text || tlen == 0) {
            snprintf(msg, mlen, "prompt %d is not a non-empty string", i + 1);
            free(text);
            err = 1;
            break;
        }
        bpe_ids e = {0};
        tok_encode(w, text, tlen, &e);
        free(text);
        r->ids[i] = e.ids, r->lens[i] = (int)e.n;
        if (e.n < 1 || (int)e.n > cfg->max_prompt_tokens || (int)e.n + (int)tokens > R.positions) {
            snprintf(msg, mlen, "prompt %d is %zu token%s; with %d to generate a request takes at most %d (the model's "
                     "positions; --max-prompt-tokens %d)", i + 1, e.n, td_plural((long long)e.n), (int)tokens,
                     R.positions - (int)tokens < cfg->max_prompt_tokens ? R.positions - (int)tokens : cfg->max_prompt_tokens,
                     cfg->max_prompt_tokens);
            err = 1;
        }
        r->out[i] = td_xmalloc((size_t)(e.n + (size_t)tokens + 1) * sizeof(int32_t));
        if (logprobs) r->logprobs[i] = td_xcalloc(e.n + (size_t)tokens + 1, sizeof(float));
    }
    tok_worker_free(w);
    cJSON_Delete(o);
    if (err) {
        req_unref(r);
        return NULL;
    }
    return r;
}
