/* Requests of trident serve: a body parsed and checked into a request, and the JSON of its
 * answers (request.h, docs/serve.md). */
#include "request.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/check.h"
#include "utf8.h"

static struct {
    const srv_config *cfg;
    const tok_tokenizer *tok;
    int positions; /* the model's */
    int vocab;     /* token ids a prompt may hold: [0, vocab) */
    int32_t eos;   /* a chat's last token: the template's eos_token when it is one token, else the end of document */
} R;

static void encode_text(tok_worker *w, const char *text, size_t len, int special, bpe_ids *out);

/* The token id of a special token's text when it is one token (the chat template's eos_token), else -1. */
static int32_t one_token(const char *text)
{
    if (!text || !*text) return -1;
    tok_worker *w = tok_worker_new(R.tok);
    bpe_ids e = {0};
    encode_text(w, text, strlen(text), 1, &e);
    tok_worker_free(w);
    int32_t id = e.n == 1 ? e.ids[0] : -1;
    free(e.ids);
    return id;
}

void req_setup(const srv_config *cfg, const tok_tokenizer *tok, int positions, int vocab)
{
    R.cfg = cfg;
    R.tok = tok;
    R.positions = positions;
    int tv = tok_vocab_size(tok);
    R.vocab = tv > 0 && tv < vocab ? tv : vocab;
    int32_t eos = cfg->chat_config ? one_token(cfg->chat_config->special[CT_EOS]) : -1;
    R.eos = eos >= 0 ? eos : tok_eod_id(tok);
}

/* ---- requests ---- */

void req_unref(request *r)
{
    pthread_mutex_lock(&r->mu);
    int left = --r->refs;
    pthread_mutex_unlock(&r->mu);
    if (left) return;
    for (int i = 0; i < r->n; i++) {
        free(r->ids[i]), free(r->out[i]), free(r->logprobs ? r->logprobs[i] : NULL);
        free(r->top_ids ? r->top_ids[i] : NULL), free(r->top_lp ? r->top_lp[i] : NULL);
    }
    for (int i = 0; i < r->nstop; i++) free(r->stop[i]);
    free(r->ids), free(r->lens), free(r->out), free(r->out_lens), free(r->sse), free(r->logprobs), free(r->error);
    free(r->held), free(r->nheld);
    free(r->top_ids), free(r->top_lp), free(r->stop);
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

char *req_stream_text(request *r, int row, const char *bytes, size_t n, int final, size_t *len)
{
    size_t h = (size_t)r->nheld[row], used;
    char *b = td_xmalloc(h + n + 1), *w = td_xmalloc(3 * (h + n) + 1);
    memcpy(b, r->held[row], h);
    if (n) memcpy(b + h, bytes, n);
    *len = utf8_clean(b, h + n, final, w, &used);
    w[*len] = 0;
    r->nheld[row] = (int)(h + n - used);
    memcpy(r->held[row], b + used, h + n - used);
    free(b);
    return w;
}

/* The ids of text (len bytes) appended to out. With special, the end-of-document token's own text
 * (GPT-2's "<|endoftext|>") is that token, as Hugging Face's tokenizers (and so vLLM and
 * lm-evaluation-harness) read a special token inside a text; the rest is tokenized as trident
 * tokenizes any text (Megatron's server: every text so). */
static void encode_text(tok_worker *w, const char *text, size_t len, int special, bpe_ids *out)
{
    if (special) tok_encode_special(R.tok, w, text, len, out);
    else tok_encode(w, text, len, out);
}

/* A JSON string of n bytes as a cJSON item. The bytes are made well-formed UTF-8 first (utf8.h:
 * each ill-formed part one U+FFFD). cJSON's strings end at a NUL; this one escapes it (\u0000)
 * with the other control characters, quotes and backslashes, and keeps every other byte. */
static cJSON *text_item(const char *s, size_t n)
{
    char *w = td_xmalloc(3 * n + 1);
    n = utf8_clean(s, n, 1, w, NULL);
    char *q = td_xmalloc(6 * n + 3);
    size_t k = 0;
    q[k++] = '"';
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)w[i];
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
    free(q), free(w);
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

static int utf8_valid(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t k = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
        if (k == 0 || i + k > n) return 0;
        for (size_t j = 1; j < k; j++)
            if ((s[i + j] & 0xc0) != 0x80) return 0;
        if ((c == 0xe0 && s[i + 1] < 0xa0) || (c == 0xed && s[i + 1] >= 0xa0) || (c == 0xf0 && s[i + 1] < 0x90) ||
            (c == 0xf4 && s[i + 1] >= 0x90))
            return 0;
        i += k;
    }
    return 1;
}

/* One token's text as a client sees it (a new C string): its UTF-8, or OpenAI's "bytes:\xNN..."
 * when its bytes are part of a character (or hold a NUL); *bytes gets its bytes. */
static char *token_text(int32_t id, size_t *bytes)
{
    size_t n;
    char *t = req_decode(&id, 1, &n);
    *bytes = n;
    if (utf8_valid((const unsigned char *)t, n) && !memchr(t, 0, n)) { /* tok_decode's text has no NUL after it */
        char *z = td_xmalloc(n + 1);
        memcpy(z, t, n);
        z[n] = 0;
        free(t);
        return z;
    }
    char *q = td_xmalloc(8 + 4 * n);
    size_t k = (size_t)sprintf(q, "bytes:");
    for (size_t i = 0; i < n; i++) k += (size_t)sprintf(q + k, "\\x%02x", (unsigned char)t[i]);
    free(t);
    return q;
}

/* The characters that token id adds to a text streamed so far (utf8.h), whose trailing bytes
 * not yet a whole character are hold[0..*held); updates them. */
static size_t stream_chars(int32_t id, char *hold, size_t *held)
{
    size_t n, used;
    char *t = req_decode(&id, 1, &n);
    char *b = td_xmalloc(*held + n), *w = td_xmalloc(3 * (*held + n) + 1);
    memcpy(b, hold, *held), memcpy(b + *held, t, n);
    size_t chars = utf8_chars(w, utf8_clean(b, *held + n, 0, w, &used));
    *held = *held + n - used;
    memcpy(hold, b + used, *held);
    free(t), free(b), free(w);
    return chars;
}

/* Where row i's continuation (its decoded text, n bytes) is cut by its first stop string: the
 * bytes kept (n when none is found). */
static size_t stop_cut(const request *r, const char *text, size_t n)
{
    size_t cut = n;
    for (int s = 0; s < r->nstop; s++) {
        size_t k = strlen(r->stop[s]);
        for (size_t at = 0; k && at + k <= cut; at++)
            if (memcmp(text + at, r->stop[s], k) == 0) {
                cut = at;
                break;
            }
    }
    return cut;
}

/* OpenAI's "logprobs" of row i's tokens [from, to): tokens, token_logprobs (null for the first
 * token of the prompt, which nothing predicts), top_logprobs (the top most likely next tokens of
 * the position before each, token text -> log-probability) and text_offset (the characters of
 * prompt and continuation before each token). */
static cJSON *choice_logprobs(const request *r, int i, int from, int to)
{
    cJSON *lp = cJSON_CreateObject(), *toks = cJSON_AddArrayToObject(lp, "tokens");
    cJSON *tlp = cJSON_AddArrayToObject(lp, "token_logprobs"), *top = cJSON_AddArrayToObject(lp, "top_logprobs");
    cJSON *off = cJSON_AddArrayToObject(lp, "text_offset");
    size_t at = 0, bytes, held = 0; /* at: characters of the text (as streamed) before token k */
    char hold[UTF8_HELD_MAX];
    for (int k = 0; k < to; k++) {
        char *t = token_text(r->out[i][k], &bytes);
        if (k >= from) {
            cJSON_AddItemToArray(toks, cJSON_CreateString(t));
            cJSON_AddItemToArray(off, cJSON_CreateNumber((double)at));
        }
        free(t);
        at += stream_chars(r->out[i][k], hold, &held);
        if (k < from) continue;
        if (k == 0) {
            cJSON_AddItemToArray(tlp, cJSON_CreateNull());
            cJSON_AddItemToArray(top, cJSON_CreateNull());
            continue;
        }
        cJSON_AddItemToArray(tlp, cJSON_CreateNumber(r->logprobs[i][k - 1]));
        cJSON *d = cJSON_CreateObject();
        for (int j = 0; j < r->top; j++) {
            size_t at_k = (size_t)(k - 1) * r->top + j, b2;
            char *key = token_text(r->top_ids[i][at_k], &b2);
            if (!cJSON_GetObjectItemCaseSensitive(d, key)) /* two tokens may print alike: the likelier keeps it */
                cJSON_AddNumberToObject(d, key, r->top_lp[i][at_k]);
            free(key);
        }
        cJSON_AddItemToArray(top, d);
    }
    return lp;
}

/* An OpenAI completion as JSON text: the whole answer (chunk NULL), or one streamed event of
 * row stream_row with its text (finish: NULL while tokens come, then "stop" or "length"). */
char *req_openai_json(request *r, int stream_row, const char *chunk, size_t chunk_len, const char *finish)
{
    cJSON *o = cJSON_CreateObject();
    char id[48];
    int chat = r->api == API_CHAT;
    snprintf(id, sizeof id, "%s-%llu", chat ? "chatcmpl" : "cmpl", (unsigned long long)r->id);
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "object", !chat ? "text_completion" : chunk ? "chat.completion.chunk" : "chat.completion");
    cJSON_AddNumberToObject(o, "created", (double)time(NULL));
    cJSON_AddStringToObject(o, "model", "trident");
    cJSON *ch = cJSON_AddArrayToObject(o, "choices");
    int64_t completion = 0, prompt = 0;
    for (int i = 0; i < r->n; i++) {
        if (chunk && i != stream_row) continue;
        cJSON *c = cJSON_CreateObject();
        int gen = r->out_lens[i] - r->lens[i];
        completion += gen > 0 ? gen : 0;
        if (i % r->choices == 0) prompt += r->lens[i]; /* each prompt once, whatever its choices */
        if (chunk && chat) { /* the assistant's message in deltas; the last event's delta is empty */
            cJSON_AddNumberToObject(c, "index", i);
            cJSON *d = cJSON_AddObjectToObject(c, "delta");
            if (!finish || chunk_len) {
                cJSON_AddStringToObject(d, "role", "assistant");
                cJSON_AddItemToObject(d, "content", text_item(chunk, chunk_len));
            }
            cJSON_AddNullToObject(c, "logprobs");
            if (finish) cJSON_AddStringToObject(c, "finish_reason", finish);
            else cJSON_AddNullToObject(c, "finish_reason");
        } else if (chunk) {
            cJSON_AddItemToObject(c, "text", text_item(chunk, chunk_len));
            cJSON_AddNumberToObject(c, "index", i);
            if (finish) cJSON_AddStringToObject(c, "finish_reason", finish);
            else cJSON_AddNullToObject(c, "finish_reason");
        } else {
            const int32_t *ids;
            size_t n, pn = 0;
            char *t = req_decode(ids, continuation(r, i, &ids), &n);
            size_t cut = stop_cut(r, t, n);
            char *p = r->echo ? req_decode(r->out[i], r->lens[i], &pn) : td_xstrdup("");
            char *all = td_xmalloc(pn + cut + 1);
            memcpy(all, p, pn), memcpy(all + pn, t, cut);
            if (chat) {
                cJSON *msg = cJSON_AddObjectToObject(c, "message");
                cJSON_AddStringToObject(msg, "role", "assistant");
                cJSON_AddItemToObject(msg, "content", text_item(all, pn + cut));
            } else {
                cJSON_AddItemToObject(c, "text", text_item(all, pn + cut));
            }
            cJSON_AddNumberToObject(c, "index", i);
            if (r->want_logprobs) {
                int to = r->out_lens[i];
                if (cut < n) { /* the generated tokens that start before the cut */
                    size_t at = 0, bytes;
                    to = r->lens[i];
                    while (to < r->out_lens[i] && at < cut) {
                        free(token_text(r->out[i][to], &bytes));
                        at += bytes, to++;
                    }
                }
                cJSON_AddItemToObject(c, "logprobs", choice_logprobs(r, i, r->echo ? 0 : r->lens[i], to));
            } else {
                cJSON_AddNullToObject(c, "logprobs");
            }
            cJSON_AddStringToObject(c, "finish_reason", cut < n ? "stop" : req_finish_reason(r, i));
            free(t), free(p), free(all);
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

/* ---- request fields ----
 * Every field of a body is one the server honours, or one it has not built, accepted only at the
 * value that changes nothing (null always; false, 1, 0 or empty as the field's default): a client
 * asking for what is not built (penalties, a suffix, several sampled candidates) is told so by
 * name, never answered as if it had been heard. */

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
    {"top_k", API_OPENAI, HONOURED, NULL}, /* vLLM's, which lm-evaluation-harness passes on from a task */
    {"seed", API_OPENAI, HONOURED, NULL},
    {"stream", API_OPENAI, HONOURED, NULL},
    {"echo", API_OPENAI, HONOURED, NULL},
    {"logprobs", API_OPENAI, HONOURED, NULL},
    {"stop", API_OPENAI, HONOURED, NULL},
    {"n", API_OPENAI, HONOURED, NULL},
    {"best_of", API_OPENAI, NOOP_ONE, "one completion a prompt; leave it out or 1"},
    {"suffix", API_OPENAI, NOOP_EMPTY, "no text is inserted; leave it out or null"},
    {"presence_penalty", API_OPENAI, NOOP_ZERO, "no penalties; leave it out or 0"},
    {"frequency_penalty", API_OPENAI, NOOP_ZERO, "no penalties; leave it out or 0"},
    {"logit_bias", API_OPENAI, NOOP_EMPTY, "no biases; leave it out or null"},
    {"stream_options", API_OPENAI, NOOP_NULL, "the stream has no usage event; leave it out or null"},
    {"model", API_CHAT, NOOP_ANY, NULL},
    {"user", API_CHAT, NOOP_ANY, NULL},
    {"messages", API_CHAT, HONOURED, NULL},
    {"tools", API_CHAT, HONOURED, NULL}, /* given to the template, which may describe them to the model */
    {"chat_template_kwargs", API_CHAT, HONOURED, NULL}, /* vLLM's: more variables for the template (enable_thinking) */
    {"max_tokens", API_CHAT, HONOURED, NULL},
    {"max_completion_tokens", API_CHAT, HONOURED, NULL},
    {"temperature", API_CHAT, HONOURED, NULL},
    {"top_p", API_CHAT, HONOURED, NULL},
    {"top_k", API_CHAT, HONOURED, NULL},
    {"seed", API_CHAT, HONOURED, NULL},
    {"stream", API_CHAT, HONOURED, NULL},
    {"stop", API_CHAT, HONOURED, NULL},
    {"n", API_CHAT, HONOURED, NULL},
    {"tool_choice", API_CHAT, NOOP_ANY, NULL}, /* the template and the model decide */
    {"parallel_tool_calls", API_CHAT, NOOP_ANY, NULL},
    {"logprobs", API_CHAT, NOOP_FALSE, "a chat answer has no log-probabilities here; score text with POST "
                                       "/v1/completions (echo, logprobs), or leave it out or false"},
    {"top_logprobs", API_CHAT, NOOP_ZERO, "a chat answer has no log-probabilities here; leave it out or 0"},
    {"presence_penalty", API_CHAT, NOOP_ZERO, "no penalties; leave it out or 0"},
    {"frequency_penalty", API_CHAT, NOOP_ZERO, "no penalties; leave it out or 0"},
    {"logit_bias", API_CHAT, NOOP_EMPTY, "no biases; leave it out or null"},
    {"response_format", API_CHAT, NOOP_NULL, "no constrained output; leave it out or null"},
    {"stream_options", API_CHAT, NOOP_NULL, "the stream has no usage event; leave it out or null"},
};

static const char *api_path(int api)
{
    return api == API_MEGATRON ? "PUT /api" : api == API_CHAT ? "POST /v1/chat/completions" : "POST /v1/completions";
}

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
            char known[600];
            size_t k = 0;
            known[0] = 0;
            for (size_t i = 0; i < sizeof FIELDS / sizeof *FIELDS && k < sizeof known - 40; i++)
                if (FIELDS[i].api == api && FIELDS[i].kind == HONOURED)
                    k += (size_t)snprintf(known + k, sizeof known - k, "%s%s", k ? ", " : "", FIELDS[i].name);
            snprintf(msg, mlen, "\"%s\" is not a field of %s (it takes %s)", j->string, api_path(api), known);
            return -1;
        }
        if (f->kind != HONOURED && !noop_value(j, f->kind)) {
            snprintf(msg, mlen, "\"%s\" is not supported yet: %s", f->name, f->why);
            return -1;
        }
    }
    return 0;
}

/* A list of token ids (those of prompt `which`, 1-based; 0: the "tokens" field) checked against
 * [0, vocab): the ids (*n), or NULL with the message. */
static int32_t *token_ids(const cJSON *a, int which, int *n, char *msg, size_t mlen)
{
    int k = cJSON_GetArraySize(a), i = 0;
    char what[40];
    if (which) snprintf(what, sizeof what, "prompt %d's", which);
    else snprintf(what, sizeof what, "\"tokens\"");
    if (k == 0) return snprintf(msg, mlen, "prompt %d is an empty list of token ids; a prompt holds at least one token", which), NULL;
    int32_t *ids = td_xmalloc((size_t)k * sizeof(int32_t));
    for (const cJSON *e = a->child; e; e = e->next, i++) {
        double v = cJSON_IsNumber(e) ? e->valuedouble : -1;
        if (!cJSON_IsNumber(e) || v != (double)(int64_t)v || v < 0 || v >= R.vocab) {
            if (cJSON_IsNumber(e))
                snprintf(msg, mlen, "%s token %d is %g; token ids are integers from 0 to %d (the vocabulary)", what, i + 1,
                         v, R.vocab - 1);
            else
                snprintf(msg, mlen, "%s token %d is not a number; a list of token ids holds integers from 0 to %d", what,
                         i + 1, R.vocab - 1);
            free(ids);
            return NULL;
        }
        ids[i] = (int32_t)v;
    }
    *n = k;
    return ids;
}

/* The prompts of a body (Megatron's "prompts": strings; OpenAI's "prompt": a string, strings, a
 * list of token ids or lists of them) as token ids: *np prompts into *ids and *lens; 0, or -1
 * with the message. */
static int read_prompts(int api, const cJSON *p, const char *body, size_t len, int32_t ***ids, int **lens, int *np,
                        char *msg, size_t mlen)
{
    const char *pname = api == API_MEGATRON ? "prompts" : "prompt";
    int one = api == API_OPENAI && (cJSON_IsString(p) || (cJSON_IsArray(p) && p->child && cJSON_IsNumber(p->child)));
    int n = one ? 1 : cJSON_IsArray(p) ? cJSON_GetArraySize(p) : -1;
    if (n < 1) {
        if (api == API_MEGATRON)
            snprintf(msg, mlen, "\"prompts\" must be an array of strings with at least one prompt");
        else
            snprintf(msg, mlen, "\"prompt\" must be a string, an array of strings, a list of token ids or a list of "
                     "lists of token ids, with at least one prompt%s", cJSON_IsArray(p) ? " (it is an empty list)" : "");
        return -1;
    }
    *ids = td_xcalloc((size_t)n, sizeof **ids);
    *lens = td_xcalloc((size_t)n, sizeof **lens);
    *np = n;
    tok_worker *w = tok_worker_new(R.tok);
    int err = 0;
    for (int i = 0; i < n && !err; i++) {
        const cJSON *s = one ? p : cJSON_GetArrayItem(p, i);
        if (api == API_OPENAI && cJSON_IsArray(s)) {
            if (!((*ids)[i] = token_ids(s, i + 1, &(*lens)[i], msg, mlen))) err = 1;
            continue;
        }
        size_t tlen = 0;
        char *text = cJSON_IsString(s) ? req_body_string(body, len, pname, i, &tlen) : NULL;
        if (!text || tlen == 0) {
            if (api == API_MEGATRON || cJSON_IsString(s))
                snprintf(msg, mlen, "prompt %d is not a non-empty string", i + 1);
            else
                snprintf(msg, mlen, "prompt %d is neither a string nor a list of token ids", i + 1);
            free(text);
            err = 1;
            break;
        }
        bpe_ids e = {0};
        encode_text(w, text, tlen, api == API_OPENAI, &e);
        free(text);
        (*ids)[i] = e.ids ? e.ids : td_xcalloc(1, sizeof(int32_t));
        (*lens)[i] = (int)e.n;
    }
    tok_worker_free(w);
    return err ? -1 : 0;
}

/* OpenAI's "stop": null, a string or a list of up to 4 strings (empty ones ignored) into r. */
static int read_stop(const cJSON *o, request *r, char *msg, size_t mlen)
{
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(o, "stop");
    if (!st || cJSON_IsNull(st)) return 0;
    int k = cJSON_IsString(st) ? 1 : cJSON_IsArray(st) ? cJSON_GetArraySize(st) : -1;
    if (k < 0 || k > 4)
        return snprintf(msg, mlen, "\"stop\" must be a string or a list of at most 4 strings%s",
                        k > 4 ? " (it has more)" : ""), -1;
    r->stop = td_xcalloc((size_t)k + 1, sizeof *r->stop);
    for (int i = 0; i < k; i++) {
        const cJSON *e = cJSON_IsString(st) ? st : cJSON_GetArrayItem(st, i);
        if (!cJSON_IsString(e)) return snprintf(msg, mlen, "\"stop\" item %d is not a string", i + 1), -1;
        if (*e->valuestring) r->stop[r->nstop++] = td_xstrdup(e->valuestring);
    }
    return 0;
}

/* The request a body describes, or NULL with (code, msg). */
/* POST /v1/chat/completions: "messages" (and "tools") rendered by the model's chat template with the
 * generation prompt, as transformers.js's apply_chat_template renders them, then tokenized with
 * its special tokens read as such: one prompt in (*ids, *len). */
static int chat_prompt(const cJSON *o, int32_t **ids, int *len, char *msg, size_t mlen)
{
    const srv_config *cfg = R.cfg;
    if (!cfg->chat)
        return snprintf(msg, mlen, "this server has no chat template: the checkpoint holds no tokenizer_config.json "
                        "with a chat_template; start it with --chat-template PATH (a model's tokenizer_config.json), "
                        "or send POST /v1/completions"), -1;
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(o, "messages"), *tools = cJSON_GetObjectItemCaseSensitive(o, "tools");
    if (!cJSON_IsArray(m) || !m->child)
        return snprintf(msg, mlen, "\"messages\" must be a list of at least one {\"role\", \"content\"} message"), -1;
    int i = 0;
    for (const cJSON *e = m->child; e; e = e->next, i++) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(e, "role");
        if (!cJSON_IsObject(e) || !cJSON_IsString(role))
            return snprintf(msg, mlen, "message %d is not an object with a \"role\" string", i + 1), -1;
    }
    if (tools && !cJSON_IsNull(tools) && !cJSON_IsArray(tools))
        return snprintf(msg, mlen, "\"tools\" must be a list or null"), -1;
    const cJSON *kw = cJSON_GetObjectItemCaseSensitive(o, "chat_template_kwargs");
    if (kw && !cJSON_IsNull(kw) && !cJSON_IsObject(kw))
        return snprintf(msg, mlen, "\"chat_template_kwargs\" must be an object of the template's variables"), -1;
    int with_tools = cJSON_IsArray(tools) && tools->child;
    cJSON *ctx = ct_chat_context(cfg->chat_config, m, 1, with_tools ? tools : NULL, cJSON_IsObject(kw) ? kw : NULL);
    char err[512] = "";
    size_t tl = 0;
    /* a list of templates: its "tool_use" one when tools are given (as get_chat_template picks) */
    char *text = ct_render(with_tools && cfg->chat_tools ? cfg->chat_tools : cfg->chat, ctx, NULL, &tl, err, sizeof err);
    cJSON_Delete(ctx);
    if (!text) return snprintf(msg, mlen, "the model's chat template refused the conversation: %s", err), -1;
    if (tl == 0) {
        free(text);
        return snprintf(msg, mlen, "the model's chat template rendered the conversation as nothing"), -1;
    }
    tok_worker *w = tok_worker_new(R.tok);
    bpe_ids e = {0};
    encode_text(w, text, tl, 1, &e);
    tok_worker_free(w);
    free(text);
    *ids = e.ids ? e.ids : td_xcalloc(1, sizeof(int32_t));
    *len = (int)e.n;
    return 0;
}

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
    double tokens, temp, top_k = 0, top_p, seed = (double)(cfg->seed % 9007199254740992ull), choices = 1, top = 0;
    int stream = 0, err = 0, logprobs = 0, echo = 0;
    if (api == API_MEGATRON) {
        err = number(o, "tokens_to_generate", 64, 0, cfg->max_tokens, 1, &tokens, msg, mlen) ||
              number(o, "temperature", 1.0, 0, 100, 0, &temp, msg, mlen) ||
              number(o, "top_k", 0, 0, 1e9, 1, &top_k, msg, mlen) || number(o, "top_p", 0, 0, 1, 0, &top_p, msg, mlen) ||
              number(o, "random_seed", seed, 0, 9007199254740992.0, 1, &seed, msg, mlen);
        const cJSON *lp = cJSON_GetObjectItemCaseSensitive(o, "logprobs");
        if (!err && lp && !cJSON_IsBool(lp)) snprintf(msg, mlen, "\"logprobs\" must be true or false"), err = 1;
        logprobs = cJSON_IsTrue(lp);
    } else {
        const cJSON *lp = api == API_CHAT ? NULL : cJSON_GetObjectItemCaseSensitive(o, "logprobs");
        /* chat: max_completion_tokens (OpenAI's newer name) or max_tokens, the server's most by default */
        const char *mt = api == API_CHAT && cJSON_GetObjectItemCaseSensitive(o, "max_completion_tokens")
                             ? "max_completion_tokens" : "max_tokens";
        err = number(o, mt, api == API_CHAT ? cfg->max_tokens : 16, api == API_CHAT ? 1 : 0, cfg->max_tokens, 1, &tokens,
                     msg, mlen) ||
              number(o, "temperature", 1.0, 0, 100, 0, &temp, msg, mlen) ||
              number(o, "top_p", 1.0, 0, 1, 0, &top_p, msg, mlen) ||
              number(o, "top_k", 0, -1, 1e9, 1, &top_k, msg, mlen) ||
              number(o, "seed", seed, 0, 9007199254740992.0, 1, &seed, msg, mlen) ||
              number(o, "n", 1, 1, cfg->max_batch, 1, &choices, msg, mlen);
        if (!err && lp && cJSON_IsBool(lp))
            snprintf(msg, mlen, "\"logprobs\" is %s; it takes an integer from 0 to %d (the most likely tokens listed "
                     "a position) or null", cJSON_IsTrue(lp) ? "true" : "false", GEN_MAX_TOP), err = 1;
        err = err || number(o, "logprobs", 0, 0, GEN_MAX_TOP, 1, &top, msg, mlen);
        logprobs = lp && !cJSON_IsNull(lp);
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(o, "stream"),
                    *ec = api == API_CHAT ? NULL : cJSON_GetObjectItemCaseSensitive(o, "echo");
        if (!err && st && !cJSON_IsBool(st) && !cJSON_IsNull(st)) snprintf(msg, mlen, "\"stream\" must be true or false"), err = 1;
        if (!err && ec && !cJSON_IsBool(ec) && !cJSON_IsNull(ec)) snprintf(msg, mlen, "\"echo\" must be true or false"), err = 1;
        stream = cJSON_IsTrue(st), echo = cJSON_IsTrue(ec);
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(o, "stop");
        const char *with = echo ? "echo" : logprobs ? "logprobs" : sp && !cJSON_IsNull(sp) ? "stop" : NULL;
        if (!err && stream && with)
            snprintf(msg, mlen, "\"%s\" is not supported with \"stream\": true; send the request without streaming", with),
                err = 1;
    }
    if (err) {
        cJSON_Delete(o);
        return NULL;
    }
    int32_t **pids = NULL;
    int *plens = NULL, np = 0;
    if (api == API_CHAT) {
        np = 1;
        pids = td_xcalloc(1, sizeof *pids);
        plens = td_xcalloc(1, sizeof *plens);
        err = chat_prompt(o, &pids[0], &plens[0], msg, mlen);
    }
    if (err || (api != API_CHAT && read_prompts(api, p, body, len, &pids, &plens, &np, msg, mlen))) {
        for (int i = 0; i < np; i++) free(pids[i]);
        free(pids), free(plens);
        cJSON_Delete(o);
        return NULL;
    }
    if (api == API_CHAT && !cJSON_GetObjectItemCaseSensitive(o, "max_tokens") &&
        !cJSON_GetObjectItemCaseSensitive(o, "max_completion_tokens")) { /* as many as the positions leave */
        int room = R.positions - plens[0];
        tokens = room < cfg->max_tokens ? room : cfg->max_tokens;
        if (tokens < 1) tokens = 1; /* the prompt is too long: said below */
    }
    int n = np * (int)choices;
    request *r = td_xcalloc(1, sizeof *r);
    r->api = api, r->stream = stream, r->n = n, r->refs = 1, r->want_logprobs = logprobs;
    r->prompts = np, r->choices = (int)choices, r->echo = echo, r->top = (int)top;
    pthread_mutex_init(&r->mu, NULL);
    int k = top_k < 0 ? 0 : (int)top_k; /* vLLM's -1: every token */
    /* a chat ends at the template's eos_token when it is one token (Llama 3's <|eot_id|>), else at the
     * tokenizer's end of document (R.eos) */
    r->g = (gen_config){(int)tokens, temp == 0 || top_k == 1, (float)temp, k, (float)top_p, (uint64_t)seed,
                        api == API_CHAT ? R.eos : tok_eod_id(R.tok), 0, NULL, NULL};
    r->ids = td_xcalloc((size_t)n, sizeof *r->ids);
    r->out = td_xcalloc((size_t)n, sizeof *r->out);
    r->lens = td_xcalloc((size_t)n, sizeof(int));
    r->out_lens = td_xcalloc((size_t)n, sizeof(int));
    r->held = td_xcalloc((size_t)n, sizeof *r->held);
    r->nheld = td_xcalloc((size_t)n, sizeof(int));
    if (logprobs) r->logprobs = td_xcalloc((size_t)n, sizeof *r->logprobs);
    if (r->top) r->top_ids = td_xcalloc((size_t)n, sizeof *r->top_ids), r->top_lp = td_xcalloc((size_t)n, sizeof *r->top_lp);
    if (n > cfg->max_batch) {
        snprintf(msg, mlen, "%d prompt%s x \"n\" %d = %d completions; a request takes at most %d (--max-batch)", np,
                 td_plural(np), (int)choices, n, cfg->max_batch);
        err = 1;
    }
    err = err || read_stop(o, r, msg, mlen);
    for (int q = 0; q < np && !err; q++) {
        int L = plens[q];
        if (L > cfg->max_prompt_tokens || L + (int)tokens > R.positions) {
            snprintf(msg, mlen, "prompt %d is %d token%s; with %d to generate a request takes at most %d (the model's "
                     "positions %d; --max-prompt-tokens %d)", q + 1, L, td_plural(L), (int)tokens,
                     R.positions - (int)tokens < cfg->max_prompt_tokens ? R.positions - (int)tokens : cfg->max_prompt_tokens,
                     R.positions, cfg->max_prompt_tokens);
            err = 1;
            break;
        }
        for (int j = 0; j < (int)choices; j++) {
            int i = q * (int)choices + j;
            size_t cap = (size_t)L + (size_t)tokens + 1;
            r->ids[i] = td_xmalloc((size_t)L * sizeof(int32_t));
            memcpy(r->ids[i], pids[q], (size_t)L * sizeof(int32_t));
            r->lens[i] = L;
            r->out[i] = td_xmalloc(cap * sizeof(int32_t));
            if (logprobs) r->logprobs[i] = td_xcalloc(cap, sizeof(float));
            if (r->top) {
                r->top_ids[i] = td_xcalloc(cap * (size_t)r->top, sizeof(int32_t));
                r->top_lp[i] = td_xcalloc(cap * (size_t)r->top, sizeof(float));
            }
        }
    }
    for (int i = 0; i < np; i++) free(pids[i]);
    free(pids), free(plens);
    cJSON_Delete(o);
    if (err) {
        req_unref(r);
        return NULL;
    }
    return r;
}

/* ---- the remote tokenizer (vLLM's endpoints, as lm-evaluation-harness's RemoteTokenizer calls them) ---- */

char *req_models_json(void)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", "trident");
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", 0);
    cJSON_AddStringToObject(m, "owned_by", "trident");
    cJSON_AddNumberToObject(m, "max_model_len", R.positions);
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "data"), m);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

char *req_tokenizer_info_json(void)
{
    cJSON *o = cJSON_CreateObject();
    int eod = tok_eod_id(R.tok);
    if (eod >= 0) {
        size_t n;
        char *t = req_decode((const int32_t *)&eod, 1, &n);
        cJSON_AddItemToObject(o, "eos_token", text_item(t, n));
        free(t);
    } else {
        cJSON_AddNullToObject(o, "eos_token");
    }
    int bos = tok_bos_id(R.tok); /* lm-eval's prefix token is the BOS when there is one, else the EOS */
    if (bos >= 0) {
        size_t n;
        char *t = req_decode((const int32_t *)&bos, 1, &n);
        cJSON_AddItemToObject(o, "bos_token", text_item(t, n));
        free(t);
    }
    cJSON_AddNumberToObject(o, "model_max_length", R.positions);
    cJSON_AddNumberToObject(o, "vocab_size", R.vocab);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

/* The body of a tokenizer endpoint as an object holding only the named fields (and "model"), or
 * NULL with (code, msg). */
static cJSON *tokenizer_body(const char *body, size_t len, const char *path, const char *const *names, int nn,
                             unsigned *code, char *msg, size_t mlen)
{
    *code = 400;
    cJSON *o = cJSON_ParseWithLength(body, len);
    if (!o || !cJSON_IsObject(o)) {
        snprintf(msg, mlen, "the body is not a JSON object");
        cJSON_Delete(o);
        return NULL;
    }
    for (const cJSON *j = o->child; j; j = j->next) {
        int known = strcmp(j->string, "model") == 0;
        for (int i = 0; i < nn && !known; i++) known = strcmp(j->string, names[i]) == 0;
        if (!known) {
            snprintf(msg, mlen, "\"%s\" is not a field of POST %s (it takes %s%s%s)", j->string, path, names[0],
                     nn > 1 ? ", " : "", nn > 1 ? names[1] : "");
            cJSON_Delete(o);
            return NULL;
        }
    }
    return o;
}

char *req_tokenize_json(const char *body, size_t len, unsigned *code, char *msg, size_t mlen)
{
    static const char *const names[] = {"prompt", "add_special_tokens"};
    cJSON *o = tokenizer_body(body, len, "/tokenize", names, 2, code, msg, mlen);
    if (!o) return NULL;
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(o, "prompt"), *sp = cJSON_GetObjectItemCaseSensitive(o, "add_special_tokens");
    size_t tlen = 0;
    char *text = cJSON_IsString(p) ? req_body_string(body, len, "prompt", 0, &tlen) : NULL;
    if (!text || (sp && !cJSON_IsBool(sp) && !cJSON_IsNull(sp))) {
        snprintf(msg, mlen, text ? "\"add_special_tokens\" must be true or false" : "\"prompt\" must be a string");
        free(text);
        cJSON_Delete(o);
        return NULL;
    }
    bpe_ids e = {0};
    tok_worker *w = tok_worker_new(R.tok);
    encode_text(w, text, tlen, 1, &e);
    tok_worker_free(w);
    free(text);
    cJSON_Delete(o);
    cJSON *a = cJSON_CreateObject();
    cJSON_AddNumberToObject(a, "count", (double)e.n);
    cJSON_AddNumberToObject(a, "max_model_len", R.positions);
    cJSON *t = cJSON_AddArrayToObject(a, "tokens");
    for (size_t i = 0; i < e.n; i++) cJSON_AddItemToArray(t, cJSON_CreateNumber(e.ids[i]));
    free(e.ids);
    char *s = cJSON_PrintUnformatted(a);
    cJSON_Delete(a);
    return s;
}

char *req_detokenize_json(const char *body, size_t len, unsigned *code, char *msg, size_t mlen)
{
    static const char *const names[] = {"tokens"};
    cJSON *o = tokenizer_body(body, len, "/detokenize", names, 1, code, msg, mlen);
    if (!o) return NULL;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "tokens");
    int n = 0;
    int32_t *ids = NULL;
    if (!cJSON_IsArray(t)) snprintf(msg, mlen, "\"tokens\" must be a list of token ids");
    else if (t->child) ids = token_ids(t, 0, &n, msg, mlen);
    int bad = !cJSON_IsArray(t) || (t->child && !ids);
    cJSON_Delete(o);
    if (bad) return NULL;
    size_t tl;
    char *text = req_decode(ids, n, &tl);
    free(ids);
    cJSON *a = cJSON_CreateObject();
    cJSON_AddItemToObject(a, "prompt", text_item(text, tl));
    free(text);
    char *s = cJSON_PrintUnformatted(a);
    cJSON_Delete(a);
    return s;
}
