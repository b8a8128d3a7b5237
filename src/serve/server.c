/* trident serve: see include/serve/trident/server.h and docs/serve.md. */
#include "trident/server.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "trident/check.h"
#include "trident/comm.h"
#include "trident/generate.h"
#include "trident/timer.h"

enum { API_MEGATRON, API_OPENAI };
enum { SRV_IDLE, SRV_BATCH, SRV_STOP };
#define HEARTBEAT_S 5.0
#define IP_BUCKETS 4096
#define FD_RESERVE 64   /* descriptors kept for the model's files, MPI, the listening socket, epoll */
#define FD_SLACK 64     /* connections shut down by the server whose close libmicrohttpd has yet to see */
#define REPORT_S 10.0   /* a limit's log line at most this often */

typedef struct request {
    int api, stream, n;       /* n prompts */
    uint64_t id;              /* OpenAI's "cmpl-<id>", one a request */
    int want_logprobs;        /* Megatron's "logprobs": true */
    float **logprobs;         /* (n, positions - 1) when wanted */
    int32_t **ids;
    int *lens;
    gen_config g;
    int32_t **out;
    int *out_lens;
    int done;
    char *error;              /* when done: why it failed (a 500), or NULL */
    /* streaming: server-sent events appended as tokens come, read by the response callback */
    char *sse;
    size_t sse_len, sse_read;
    int refs;                 /* the handler and (streaming) the response callback */
    struct MHD_Connection *conn; /* the connection answering it */
    int suspended;            /* conn is suspended until the request is done or has events to send */
    pthread_mutex_t mu;
    struct request *next;
} request;

static struct {
    const srv_config *cfg;
    const tok_tokenizer *tok;
    int positions;            /* the model's */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    request *head, *tail;
    int queued;
    int connections;          /* open requests (answered when 0 at shutdown) */
    int answering;            /* requests accepted (queued) and not yet answered */
    struct watch *watched, *watched_tail; /* every open connection, oldest first */
    int live;                 /* open connections not yet shut down by the server */
    int max_connections;      /* --max-connections, or what the descriptor limit allows */
    struct ip_count *ips[IP_BUCKETS]; /* live connections by client address */
    int slow_closed;          /* connections closed for sending their request too slowly */
    int full_dropped;         /* connections dropped for a new one at max_connections */
    int ip_refused;           /* connections refused at --max-connections-per-ip */
    uint64_t next_id;         /* the last id given to a queued request */
} S = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static volatile sig_atomic_t g_stop;
static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
}

/* ---- requests ---- */

static void req_unref(request *r)
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

static void sse_append(request *r, const char *text)
{
    size_t n = strlen(text);
    r->sse = td_xrealloc(r->sse, r->sse_len + n + 1);
    memcpy(r->sse + r->sse_len, text, n + 1);
    r->sse_len += n;
}

/* The text of n ids and its length (invalid UTF-8 left as the bytes are, so clients see what the
 * model produced; a NUL byte stays inside: see text_item). */
static char *decode(const int32_t *ids, int n, size_t *len)
{
    char *text = NULL, err[256];
    *len = 0;
    if (n <= 0 || tok_decode(S.tok, ids, (size_t)n, &text, len, err, sizeof err)) {
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
static const char *finish_reason(const request *r, int i)
{
    int gen = r->out_lens[i] - r->lens[i];
    return gen > 0 && r->g.eod >= 0 && r->out[i][r->out_lens[i] - 1] == r->g.eod ? "stop" : "length";
}

/* An OpenAI completion as JSON text: the whole answer (chunk NULL), or one streamed event of
 * row stream_row with its text (finish: NULL while tokens come, then "stop" or "length"). */
static char *openai_json(request *r, int stream_row, const char *chunk, size_t chunk_len, const char *finish)
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
            char *t = decode(ids, continuation(r, i, &ids), &n);
            cJSON_AddItemToObject(c, "text", text_item(t, n));
            free(t);
            cJSON_AddNumberToObject(c, "index", i);
            cJSON_AddStringToObject(c, "finish_reason", finish_reason(r, i));
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
static char *megatron_json(request *r)
{
    cJSON *o = cJSON_CreateObject(), *text = cJSON_AddArrayToObject(o, "text");
    cJSON *seg = cJSON_AddArrayToObject(o, "segments");
    for (int i = 0; i < r->n; i++) {
        const int32_t *gen;
        size_t n;
        char *t = decode(r->out[i], r->lens[i] + continuation(r, i, &gen), &n); /* the text stops before EOD */
        cJSON_AddItemToArray(text, text_item(t, n));
        free(t);
        cJSON *s = cJSON_CreateArray();
        for (int k = 0; k < r->out_lens[i]; k++) { /* every token, EOD included, as Megatron's */
            char *p = decode(r->out[i] + k, 1, &n);
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

/* ---- HTTP ---- */

typedef struct {
    char *body;
    size_t len;
    int too_big;
    int answering; /* its request was queued: counted in S.answering until completed */
    request *req;  /* a queued request answered in one piece: the handler's reference */
} conn;

/* Every open connection, from accept to close: a client must send a whole request (headers and
 * body) by its deadline, or rank 0's loop shuts its socket down (slow headers never reach the
 * handler, so MHD's idle timeout alone cannot bound them). When a new connection would pass
 * max_connections, the oldest one without a whole request is dropped for it. */
typedef struct watch {
    struct MHD_Connection *c;
    int fd;
    uint32_t addr;   /* the client's IPv4 address */
    double deadline; /* 0: a request is being answered */
    int dropped;     /* shut down by the server; libmicrohttpd closes it next */
    struct watch *prev, *next;
} watch;

typedef struct ip_count {
    uint32_t addr;
    int n;
    struct ip_count *next;
} ip_count;

/* The live-connection count of addr (S.mu held); created at 0. */
static ip_count *ip_entry(uint32_t addr)
{
    ip_count **p = &S.ips[(addr * 2654435761u) >> 20 & (IP_BUCKETS - 1)];
    while (*p && (*p)->addr != addr) p = &(*p)->next;
    if (!*p) *p = td_xcalloc(1, sizeof **p), (*p)->addr = addr;
    return *p;
}

static void ip_release(uint32_t addr)
{
    ip_count **p = &S.ips[(addr * 2654435761u) >> 20 & (IP_BUCKETS - 1)];
    while (*p && (*p)->addr != addr) p = &(*p)->next;
    if (*p && --(*p)->n <= 0) {
        ip_count *e = *p;
        *p = e->next;
        free(e);
    }
}

/* Answers code with {"error": why} straight on the socket, then shuts it down (S.mu held).
 * Only for connections whose request is not whole: libmicrohttpd is reading them, never writing,
 * and sees the end at once and closes them. */
static void drop(watch *w, unsigned code, const char *why)
{
    if (w->dropped) return;
    char body[300], head[200];
    int nb = snprintf(body, sizeof body, "{\"error\":\"%s\"}", why);
    int nh = snprintf(head, sizeof head, "HTTP/1.1 %u %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                      "Connection: close\r\n\r\n", code, code == 503 ? "Service Unavailable" : "Request Timeout", nb);
    if (send(w->fd, head, (size_t)nh, MSG_DONTWAIT | MSG_NOSIGNAL) == nh)
        (void)send(w->fd, body, (size_t)nb, MSG_DONTWAIT | MSG_NOSIGNAL);
    shutdown(w->fd, SHUT_RDWR);
    w->dropped = 1, w->deadline = 0;
    S.live--;
    ip_release(w->addr);
}

static void set_deadline(struct MHD_Connection *c, double deadline)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    watch *w = ci ? ci->socket_context : NULL;
    if (!w) return;
    pthread_mutex_lock(&S.mu);
    if (!w->dropped) w->deadline = deadline;
    pthread_mutex_unlock(&S.mu);
}

/* A new connection: refused (503) past --max-connections-per-ip; past max_connections the oldest
 * connection that has not sent a whole request is dropped (503) for it, so idle or slow clients
 * can never lock a fresh one out. */
static void admit(watch *w)
{
    char msg[160];
    ip_count *ip = ip_entry(w->addr);
    S.live++;
    if (ip->n >= S.cfg->max_per_ip) {
        snprintf(msg, sizeof msg, "%d connections are open from this address (--max-connections-per-ip)", ip->n);
        ip->n++; /* drop releases it */
        drop(w, 503, msg);
        S.ip_refused++;
        return;
    }
    ip->n++;
    if (S.live <= S.max_connections) return;
    watch *old = S.watched;
    while (old && (old->dropped || old->deadline <= 0)) old = old->next;
    snprintf(msg, sizeof msg, "the server is full (%d connections) and this one had not sent a whole request",
             S.max_connections);
    if (old) drop(old, 503, msg), S.full_dropped++;
}

static void notify_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                              enum MHD_ConnectionNotificationCode toe)
{
    (void)cls;
    pthread_mutex_lock(&S.mu);
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *fd = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        const union MHD_ConnectionInfo *ad = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        watch *w = td_xcalloc(1, sizeof *w);
        w->c = c, w->deadline = td_now() + S.cfg->request_timeout, w->fd = fd ? fd->connect_fd : -1;
        if (ad && ad->client_addr->sa_family == AF_INET)
            w->addr = ((const struct sockaddr_in *)(const void *)ad->client_addr)->sin_addr.s_addr;
        w->prev = S.watched_tail;
        if (S.watched_tail) S.watched_tail->next = w;
        else S.watched = w;
        S.watched_tail = w;
        *socket_context = w;
        admit(w);
    } else if (*socket_context) { /* closed: MHD closes the socket after this returns */
        watch *w = *socket_context;
        if (!w->dropped) S.live--, ip_release(w->addr);
        if (w->prev) w->prev->next = w->next;
        else S.watched = w->next;
        if (w->next) w->next->prev = w->prev;
        else S.watched_tail = w->prev;
        free(w);
        *socket_context = NULL;
    }
    pthread_mutex_unlock(&S.mu);
}

/* Shuts down the sockets of connections past their deadline (S.mu held), answering 408; with
 * all, every connection not being answered (503). MHD's thread sees the end and closes them. */
static int close_slow(int all)
{
    double now = td_now();
    int n = 0;
    for (watch *w = S.watched; w; w = w->next) {
        if (w->dropped || w->deadline <= 0 || (!all && now <= w->deadline)) continue;
        if (all) drop(w, 503, "the server is stopping");
        else drop(w, 408, "no whole request within --request-timeout");
        n++;
        if (!all) S.slow_closed++;
    }
    return n;
}

/* Wakes r's suspended connection (r->mu held by the caller until it returns the connection to
 * resume, which the caller resumes after unlocking). */
static struct MHD_Connection *to_wake(request *r)
{
    if (!r->suspended) return NULL;
    r->suspended = 0;
    return r->conn;
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned code, char *json, const char *type)
{
    struct MHD_Response *res = MHD_create_response_from_buffer(strlen(json), json, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(res, "Content-Type", type);
    enum MHD_Result ok = MHD_queue_response(c, code, res);
    MHD_destroy_response(res);
    return ok;
}

static enum MHD_Result error(struct MHD_Connection *c, unsigned code, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "error", msg);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return reply(c, code, s, "application/json");
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
static request *parse(int api, const char *body, size_t len, unsigned *code, char *msg, size_t mlen)
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
    const srv_config *cfg = S.cfg;
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
                        (uint64_t)seed, tok_eod_id(S.tok), 0};
    r->ids = td_xcalloc((size_t)n, sizeof *r->ids);
    r->out = td_xcalloc((size_t)n, sizeof *r->out);
    r->lens = td_xcalloc((size_t)n, sizeof(int));
    r->out_lens = td_xcalloc((size_t)n, sizeof(int));
    if (logprobs) r->logprobs = td_xcalloc((size_t)n, sizeof *r->logprobs);
    tok_worker *w = tok_worker_new(S.tok);
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
        if (e.n < 1 || (int)e.n > cfg->max_prompt_tokens || (int)e.n + (int)tokens > S.positions) {
            snprintf(msg, mlen, "prompt %d is %zu token%s; with %d to generate a request takes at most %d (the model's "
                     "positions; --max-prompt-tokens %d)", i + 1, e.n, td_plural((long long)e.n), (int)tokens,
                     S.positions - (int)tokens < cfg->max_prompt_tokens ? S.positions - (int)tokens : cfg->max_prompt_tokens,
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

/* Streaming responses: the events so far, then the end when the request is done. With nothing
 * to send yet, the connection is suspended (the event loop never waits on a request) until the
 * generating thread has events for it. */
static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    request *r = cls;
    ssize_t n;
    pthread_mutex_lock(&r->mu);
    if (r->sse_read < r->sse_len) {
        n = (ssize_t)(r->sse_len - r->sse_read < max ? r->sse_len - r->sse_read : max);
        memcpy(buf, r->sse + r->sse_read, (size_t)n);
        r->sse_read += (size_t)n;
    } else if (r->done) {
        n = MHD_CONTENT_READER_END_OF_STREAM;
    } else {
        r->suspended = 1;
        MHD_suspend_connection(r->conn);
        n = 0;
    }
    pthread_mutex_unlock(&r->mu);
    return n;
}
static void sse_free(void *cls) { req_unref(cls); }

/* The answer of k's generated request (the handler's reference given up). */
static enum MHD_Result answer(struct MHD_Connection *c, conn *k)
{
    request *r = k->req;
    k->req = NULL;
    if (r->error) { /* non-finite logits (generate.c): no text from them */
        enum MHD_Result ok = error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "%s", r->error);
        req_unref(r);
        return ok;
    }
    char *json = r->api == API_MEGATRON ? megatron_json(r) : openai_json(r, -1, NULL, 0, NULL);
    req_unref(r);
    return reply(c, MHD_HTTP_OK, json, "application/json");
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                              const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
    (void)cls, (void)version;
    conn *k = *con_cls;
    if (!k) {
        *con_cls = k = td_xcalloc(1, sizeof *k);
        pthread_mutex_lock(&S.mu);
        S.connections++;
        pthread_mutex_unlock(&S.mu);
        return MHD_YES;
    }
    if (*upload_size) {
        if (!k->too_big && k->len + *upload_size <= S.cfg->max_body) {
            k->body = td_xrealloc(k->body, k->len + *upload_size + 1);
            memcpy(k->body + k->len, upload, *upload_size);
            k->len += *upload_size;
        } else {
            k->too_big = 1;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (k->req) return answer(c, k); /* resumed: its request is done */
    int api = strcmp(url, "/api") == 0 ? API_MEGATRON : strcmp(url, "/v1/completions") == 0 ? API_OPENAI : -1;
    if (api < 0) return error(c, MHD_HTTP_NOT_FOUND, "no such endpoint %s: PUT /api or POST /v1/completions", url);
    if (strcmp(method, api == API_MEGATRON ? "PUT" : "POST") != 0)
        return error(c, MHD_HTTP_METHOD_NOT_ALLOWED, "%s takes %s", url, api == API_MEGATRON ? "PUT" : "POST");
    if (k->too_big)
        return error(c, 413, "the body is over %zu bytes (--max-body-bytes)", S.cfg->max_body);
    set_deadline(c, 0); /* the request is whole: answering it takes as long as generating */
    unsigned code;
    char msg[512];
    request *r = parse(api, k->body ? k->body : "", k->len, &code, msg, sizeof msg);
    if (!r) return error(c, code, "%s", msg);
    pthread_mutex_lock(&S.mu);
    if (g_stop || S.queued >= S.cfg->max_queue) {
        pthread_mutex_unlock(&S.mu);
        req_unref(r);
        return error(c, MHD_HTTP_SERVICE_UNAVAILABLE, g_stop ? "the server is stopping" :
                     "%d request%s queued (--max-queue): try again later", S.cfg->max_queue,
                     S.cfg->max_queue == 1 ? " is" : "s are");
    }
    r->refs++; /* the queue's */
    r->id = ++S.next_id;
    S.answering++;
    k->answering = 1;
    if (S.tail) S.tail->next = r;
    else S.head = r;
    S.tail = r;
    S.queued++;
    pthread_cond_signal(&S.cv);
    pthread_mutex_unlock(&S.mu);
    r->conn = c;
    if (r->stream) { /* the callback holds the handler's reference */
        struct MHD_Response *res = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, sse_read, r, sse_free);
        MHD_add_response_header(res, "Content-Type", "text/event-stream");
        MHD_add_response_header(res, "Cache-Control", "no-cache");
        enum MHD_Result ok = MHD_queue_response(c, MHD_HTTP_OK, res);
        MHD_destroy_response(res);
        return ok;
    }
    k->req = r;
    pthread_mutex_lock(&r->mu);
    int done = r->done;
    if (!done) r->suspended = 1, MHD_suspend_connection(c); /* resumed when generated */
    pthread_mutex_unlock(&r->mu);
    return done ? answer(c, k) : MHD_YES;
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode why)
{
    (void)cls, (void)why;
    conn *k = *con_cls;
    if (!k) return;
    int answering = k->answering;
    if (k->req) req_unref(k->req); /* closed unanswered (the server stopping) */
    free(k->body);
    free(k);
    *con_cls = NULL;
    set_deadline(c, td_now() + S.cfg->request_timeout); /* a kept-alive connection's next request */
    pthread_mutex_lock(&S.mu);
    S.connections--;
    S.answering -= answering;
    pthread_cond_broadcast(&S.cv);
    pthread_mutex_unlock(&S.mu);
}

/* ---- generation: rank 0 batches, every rank generates ---- */

typedef struct {
    request **req;
    int *row0; /* the batch's first row of each request */
    int nreq;
    int logprobs; /* some request wants them: the batch computes them */
} batch;

static void on_token(void *user, int b, int32_t token)
{
    batch *bt = user;
    int i = bt->nreq - 1;
    while (i > 0 && bt->row0[i] > b) i--;
    request *r = bt->req[i];
    if (!r->stream || (r->g.eod >= 0 && token == r->g.eod)) return; /* EOD: the last event says "stop" */
    size_t n;
    char *t = decode(&token, 1, &n);
    pthread_mutex_lock(&r->mu);
    char *json = openai_json(r, b - bt->row0[i], t, n, NULL);
    sse_append(r, "data: ");
    sse_append(r, json);
    sse_append(r, "\n\n");
    struct MHD_Connection *wake = to_wake(r);
    pthread_mutex_unlock(&r->mu);
    if (wake) MHD_resume_connection(wake);
    free(json);
    free(t);
}

/* Broadcasts one message from rank 0: the kind, and for a batch its settings, lengths and tokens. */
static int exchange(const ps_state *ps, int kind, gen_config *g, int *B, int **lens, int32_t ***ids, int *logprobs)
{
    int64_t h[10] = {kind, *B, g->max_new, g->greedy, g->top_k, g->eod, (int64_t)(g->seed >> 1), (int64_t)(g->seed & 1),
                     logprobs ? *logprobs : 0};
    double f[2] = {g->temperature, g->top_p};
    comm_bcast(ps->world, h, 10, COMM_I64, 0);
    if (h[0] != SRV_BATCH) return (int)h[0];
    comm_bcast(ps->world, f, 2, COMM_F64, 0);
    if (ps->world_rank != 0) {
        *B = (int)h[1];
        *g = (gen_config){(int)h[2], (int)h[3], (float)f[0], (int)h[4], (float)f[1],
                          (uint64_t)h[6] << 1 | (uint64_t)h[7], (int)h[5], 0};
        *lens = td_xmalloc((size_t)*B * sizeof(int));
        *ids = td_xcalloc((size_t)*B, sizeof **ids);
        *logprobs = (int)h[8];
    }
    comm_bcast(ps->world, *lens, (size_t)*B, COMM_I32, 0);
    for (int i = 0; i < *B; i++) {
        if (ps->world_rank != 0) (*ids)[i] = td_xmalloc((size_t)(*lens)[i] * sizeof(int32_t));
        comm_bcast(ps->world, (*ids)[i], (size_t)(*lens)[i], COMM_I32, 0);
    }
    return SRV_BATCH;
}

/* Request r (its rows' out_lens and prompt lens), r->mu held, when a row stopped for non-finite
 * logits: made done with the error (a 500, or a streamed error event); returns 1. 0 when every
 * row is whole. */
static int nonfinite_error(request *r, const int *out_lens, const int *lens)
{
    int i = 0;
    while (i < r->n && out_lens[i] != 0) i++;
    if (i == r->n) return 0;
    char msg[400];
    snprintf(msg, sizeof msg, "the model's logits for prompt %d hold a NaN or an infinity (its %d tokens or what "
             "followed): nothing can be sampled from them; the checkpoint's weights are broken or overflow float32",
             i + 1, lens[i]);
    TD_INFO("serve: request %llu: %s", (unsigned long long)r->id, msg);
    r->error = td_xstrdup(msg);
    if (r->stream) { /* the 200 and maybe tokens are out: an error event ends the stream, no [DONE] */
        cJSON *o = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(o, "error");
        cJSON_AddStringToObject(e, "message", msg);
        cJSON_AddStringToObject(e, "type", "server_error");
        char *json = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
        sse_append(r, "data: ");
        sse_append(r, json);
        sse_append(r, "\n\n");
        free(json);
    }
    r->done = 1;
    return 1;
}

static void generate(gpt_model *m, const ps_state *ps, const gen_config *g, int B, int32_t **ids, int *lens,
                     int want_logprobs, batch *bt)
{
    int cap = gen_capacity(g, B, lens);
    int32_t **out = td_xcalloc((size_t)B, sizeof *out);
    int *out_lens = td_xcalloc((size_t)B, sizeof(int));
    float **lp = want_logprobs ? td_xcalloc((size_t)B, sizeof *lp) : NULL;
    for (int i = 0; i < B; i++) {
        out[i] = td_xmalloc((size_t)cap * sizeof(int32_t));
        if (lp) lp[i] = td_xcalloc((size_t)cap, sizeof(float));
    }
    gen_stats st;
    gen_run(m, ps, g, B, ids, lens, out, out_lens, lp, bt ? on_token : NULL, bt, &st);
    if (bt)
        for (int q = 0; q < bt->nreq; q++) {
            request *r = bt->req[q];
            pthread_mutex_lock(&r->mu);
            if (nonfinite_error(r, out_lens + bt->row0[q], lens + bt->row0[q])) {
                struct MHD_Connection *wake = to_wake(r);
                pthread_mutex_unlock(&r->mu);
                if (wake) MHD_resume_connection(wake);
                req_unref(r); /* the queue's */
                continue;
            }
            for (int i = 0; i < r->n; i++) {
                int row = bt->row0[q] + i, keep = out_lens[row] - lens[row] + r->lens[i];
                memcpy(r->out[i], r->ids[i], (size_t)r->lens[i] * sizeof(int32_t));
                memcpy(r->out[i] + r->lens[i], out[row] + lens[row], (size_t)(keep - r->lens[i]) * sizeof(int32_t));
                r->out_lens[i] = keep;
                if (r->want_logprobs) memcpy(r->logprobs[i], lp[row], (size_t)(keep > 1 ? keep - 1 : 0) * sizeof(float));
            }
            for (int i = 0; i < r->n && r->stream; i++) { /* each row's last event: why it ended */
                char *json = openai_json(r, i, "", 0, finish_reason(r, i));
                sse_append(r, "data: ");
                sse_append(r, json);
                sse_append(r, "\n\n");
                free(json);
            }
            if (r->stream) sse_append(r, "data: [DONE]\n\n");
            r->done = 1;
            struct MHD_Connection *wake = to_wake(r);
            pthread_mutex_unlock(&r->mu);
            if (wake) MHD_resume_connection(wake);
            req_unref(r); /* the queue's */
        }
    for (int i = 0; i < B; i++) free(out[i]), free(lp ? lp[i] : NULL);
    free(out), free(out_lens), free(lp);
}

/* Rank 0: the next batch: the first queued request, and after it the queued requests with the
 * same settings while the prompts fit max_batch (greedy ones only: a sampled row's random
 * numbers depend on its row, so it runs alone). NULL when the queue is empty. */
static int take_batch(batch *bt, gen_config *g, int *B, int **lens, int32_t ***ids)
{
    if (!S.head) return 0;
    bt->nreq = 0, *B = 0, bt->logprobs = 0;
    *g = S.head->g;
    request **pp = &S.head;
    while (*pp) {
        request *r = *pp;
        int same = bt->nreq == 0 || (r->g.greedy && g->greedy && r->g.max_new == g->max_new);
        if (!same || *B + r->n > S.cfg->max_batch) break;
        bt->req = td_xrealloc(bt->req, (size_t)(bt->nreq + 1) * sizeof *bt->req);
        bt->row0 = td_xrealloc(bt->row0, (size_t)(bt->nreq + 1) * sizeof(int));
        bt->row0[bt->nreq] = *B;
        bt->req[bt->nreq++] = r;
        bt->logprobs |= r->want_logprobs;
        *B += r->n;
        *pp = r->next;
        S.queued--;
        if (!g->greedy) break;
    }
    if (!S.head) S.tail = NULL;
    else for (S.tail = S.head; S.tail->next; S.tail = S.tail->next);
    *lens = td_xmalloc((size_t)*B * sizeof(int));
    *ids = td_xmalloc((size_t)*B * sizeof **ids);
    for (int q = 0, k = 0; q < bt->nreq; q++)
        for (int i = 0; i < bt->req[q]->n; i++, k++) (*lens)[k] = bt->req[q]->lens[i], (*ids)[k] = bt->req[q]->ids[i];
    return 1;
}

/* Raises the soft descriptor limit to the hard one; the connections the limit leaves room for. */
static long connection_room(long *nofile)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return *nofile = 1024, 1024 - FD_RESERVE - FD_SLACK;
    if (rl.rlim_cur != rl.rlim_max) {
        struct rlimit up = rl;
        up.rlim_cur = rl.rlim_max == RLIM_INFINITY ? (rlim_t)1 << 20 : rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &up) == 0) rl = up;
    }
    *nofile = rl.rlim_cur == RLIM_INFINITY ? 1L << 20 : (long)rl.rlim_cur;
    return *nofile - FD_RESERVE - FD_SLACK;
}

/* libmicrohttpd's own messages, at most one a second (a flood of refused sockets would
 * otherwise write one line each). */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    static double last = -1e9;
    static int skipped;
    double now = td_now();
    if (now - last < 1.0) {
        skipped++;
        return;
    }
    char msg[400];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r')) msg[--n] = 0;
    if (skipped) TD_INFO("serve: libmicrohttpd: %s (%d more message%s in the last second not shown)", msg, skipped,
                         td_plural(skipped));
    else TD_INFO("serve: libmicrohttpd: %s", msg);
    last = now, skipped = 0;
}

/* One log line for a burst of hits of a limit: the first at once, then a count at most every
 * REPORT_S seconds (S.mu held). */
typedef struct {
    int reported;
    double last;
} burst;

static int burst_due(burst *b, int count, double now)
{
    if (count <= b->reported || now - b->last < REPORT_S) return 0;
    b->last = now;
    return 1;
}

int srv_run(gpt_model *m, const ps_state *ps, const tok_tokenizer *tok, const srv_config *cfg, char *err,
            size_t errlen)
{
    S.cfg = cfg, S.tok = tok, S.positions = m->cfg.max_pos;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    struct MHD_Daemon *d = NULL;
    int32_t listening = 1;
    if (ps->world_rank == 0) {
        struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)cfg->port)};
        long nofile, room = connection_room(&nofile);
        S.max_connections = cfg->max_connections ? cfg->max_connections : (int)(room < 10000 ? room : 10000);
        if (inet_pton(AF_INET, cfg->host, &addr.sin_addr) != 1) {
            snprintf(err, errlen, "--host %s is not an IPv4 address", cfg->host);
            listening = 0;
        } else if (S.max_connections > room || S.max_connections < 1) {
            snprintf(err, errlen, "--max-connections %d needs %d file descriptors; the limit is %ld (ulimit -n): "
                     "raise it or lower --max-connections", S.max_connections,
                     S.max_connections + FD_RESERVE + FD_SLACK, nofile);
            listening = 0;
        } else {
            /* One epoll thread for every connection; a request waiting for its generation is suspended. */
            d = MHD_start_daemon(MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG,
                                 (uint16_t)cfg->port, NULL, NULL, handle, NULL, MHD_OPTION_EXTERNAL_LOGGER, mhd_log,
                                 NULL, MHD_OPTION_SOCK_ADDR, &addr,
                                 MHD_OPTION_NOTIFY_COMPLETED, completed, NULL, MHD_OPTION_NOTIFY_CONNECTION,
                                 notify_connection, NULL, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)cfg->idle_timeout,
                                 MHD_OPTION_CONNECTION_LIMIT, (unsigned)(S.max_connections + FD_SLACK),
                                 MHD_OPTION_END);
            if (!d) snprintf(err, errlen, "cannot listen on %s:%d (in use, or not an address of this machine)",
                             cfg->host, cfg->port), listening = 0;
        }
        if (listening)
            TD_INFO("serve: listening on http://%s:%d (PUT /api, POST /v1/completions); pid %ld; at most %d "
                    "connections (descriptor limit %ld), %d per client; idle %d s, request %d s, shutdown grace %d s",
                    cfg->host, cfg->port, (long)getpid(), S.max_connections, nofile, cfg->max_per_ip,
                    cfg->idle_timeout, cfg->request_timeout, cfg->shutdown_grace);
    }
    comm_bcast(ps->world, &listening, 1, COMM_I32, 0);
    if (!listening) {
        if (ps->world_rank != 0) snprintf(err, errlen, "rank 0 could not listen");
        return -1;
    }
    if (ps->world_rank != 0) { /* follow rank 0 */
        for (;;) {
            gen_config g = {0};
            int B = 0, *lens = NULL;
            int32_t **ids = NULL;
            int want = 0;
            int kind = exchange(ps, SRV_IDLE, &g, &B, &lens, &ids, &want);
            if (kind == SRV_STOP) return 0;
            if (kind != SRV_BATCH) continue;
            generate(m, ps, &g, B, ids, lens, want, NULL);
            for (int i = 0; i < B; i++) free(ids[i]);
            free(ids), free(lens);
        }
    }
    batch bt = {0};
    double last = td_now(), stop_at = 0;
    int quiesced = 0, finishing = 0;
    burst slow = {0, -1e9}, full = {0, -1e9}, per_ip = {0, -1e9};
    for (;;) {
        pthread_mutex_lock(&S.mu);
        if (g_stop && !quiesced) {
            MHD_quiesce_daemon(d); /* no new connections; the open ones are answered */
            quiesced = 1, stop_at = td_now();
            TD_INFO("serve: stopping: finishing %d queued request%s", S.queued, S.queued == 1 ? "" : "s");
        }
        close_slow(0);
        double now = td_now();
        if (finishing) slow.last = full.last = per_ip.last = -1e9; /* the last counts before the end */
        if (burst_due(&slow, S.slow_closed, now)) {
            int n = S.slow_closed - slow.reported;
            TD_INFO("serve: closed %d connection%s that sent no whole request within --request-timeout %d s", n,
                    td_plural(n), cfg->request_timeout);
            slow.reported = S.slow_closed;
        }
        if (burst_due(&full, S.full_dropped, now)) {
            int n = S.full_dropped - full.reported;
            TD_INFO("serve: --max-connections %d reached: dropped %d connection%s without a whole request (the "
                    "oldest) for new ones (503)", S.max_connections, n, td_plural(n));
            full.reported = S.full_dropped;
        }
        if (burst_due(&per_ip, S.ip_refused, now)) {
            int n = S.ip_refused - per_ip.reported;
            TD_INFO("serve: --max-connections-per-ip %d reached: refused %d connection%s (503)", cfg->max_per_ip, n,
                    td_plural(n));
            per_ip.reported = S.ip_refused;
        }
        int grace_over = quiesced && td_now() - stop_at >= cfg->shutdown_grace;
        if (grace_over && !S.head && S.answering == 0 && S.watched) {
            int n = close_slow(1);
            if (n) TD_INFO("serve: closing %d connection%s still sending a request after the %d s grace", n,
                           td_plural(n), cfg->shutdown_grace);
        }
        int drained = S.connections == 0 || (grace_over && S.answering == 0);
        if (!S.head && !(quiesced && drained)) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 200 * 1000000L;
            if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
            pthread_cond_timedwait(&S.cv, &S.mu, &ts);
        }
        gen_config g;
        int B, *lens = NULL;
        int32_t **ids = NULL;
        int have = take_batch(&bt, &g, &B, &lens, &ids);
        int finished = quiesced && !have && drained;
        pthread_mutex_unlock(&S.mu);
        if (finished && !finishing) { /* one more turn reports the limits' last counts */
            finishing = 1;
            continue;
        }
        if (finished) break;
        if (have) {
            exchange(ps, SRV_BATCH, &g, &B, &lens, &ids, &bt.logprobs);
            generate(m, ps, &g, B, ids, lens, bt.logprobs, &bt);
            free(lens), free(ids);
            last = td_now();
        } else if (td_now() - last > HEARTBEAT_S) { /* keeps the other ranks' waits from timing out */
            gen_config none = {0};
            int zero = 0;
            exchange(ps, SRV_IDLE, &none, &zero, NULL, NULL, NULL);
            last = td_now();
        }
    }
    gen_config none = {0};
    int zero = 0;
    exchange(ps, SRV_STOP, &none, &zero, NULL, NULL, NULL);
    MHD_stop_daemon(d);
    for (int i = 0; i < IP_BUCKETS; i++)
        while (S.ips[i]) {
            ip_count *e = S.ips[i];
            S.ips[i] = e->next;
            free(e);
        }
    free(bt.req), free(bt.row0);
    TD_INFO("serve: stopped");
    return 0;
}
