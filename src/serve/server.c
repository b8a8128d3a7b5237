/* trident serve: see include/serve/trident/server.h and docs/serve.md. This file: the HTTP
 * connections (libmicrohttpd), the queue, and the generating loop; a request's parsing and its
 * JSON answers are request.c's. */
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
#include "trident/dynlib.h"
#include "trident/generate.h"
#include "trident/timer.h"
#include "request.h"

/* libmicrohttpd, opened when the server starts (trident/dynlib.h): linked, it and GnuTLS cost every
 * start of every trident process 4.5 ms. TD_MHD_SONAME comes from the build (CMakeLists.txt). */
static struct {
    __typeof__(MHD_add_response_header) *MHD_add_response_header;
    __typeof__(MHD_create_response_from_buffer) *MHD_create_response_from_buffer;
    __typeof__(MHD_create_response_from_callback) *MHD_create_response_from_callback;
    __typeof__(MHD_destroy_response) *MHD_destroy_response;
    __typeof__(MHD_get_connection_info) *MHD_get_connection_info;
    __typeof__(MHD_queue_response) *MHD_queue_response;
    __typeof__(MHD_quiesce_daemon) *MHD_quiesce_daemon;
    __typeof__(MHD_resume_connection) *MHD_resume_connection;
    __typeof__(MHD_start_daemon) *MHD_start_daemon;
    __typeof__(MHD_stop_daemon) *MHD_stop_daemon;
    __typeof__(MHD_suspend_connection) *MHD_suspend_connection;
} mhd;

static void mhd_open(void)
{
    const td_dynsym syms[] = {
        TD_DYNSYM(mhd, MHD_add_response_header),
        TD_DYNSYM(mhd, MHD_create_response_from_buffer),
        TD_DYNSYM(mhd, MHD_create_response_from_callback),
        TD_DYNSYM(mhd, MHD_destroy_response),
        TD_DYNSYM(mhd, MHD_get_connection_info),
        TD_DYNSYM(mhd, MHD_queue_response),
        TD_DYNSYM(mhd, MHD_quiesce_daemon),
        TD_DYNSYM(mhd, MHD_resume_connection),
        TD_DYNSYM(mhd, MHD_start_daemon),
        TD_DYNSYM(mhd, MHD_stop_daemon),
        TD_DYNSYM(mhd, MHD_suspend_connection),
    };
    td_dynlib_open(TD_MHD_SONAME, "trident serve's HTTP server", "install libmicrohttpd (scripts/deps.sh does)", syms,
                   (int)(sizeof syms / sizeof syms[0]));
}

enum { SRV_IDLE, SRV_BATCH, SRV_STOP };
#define HEARTBEAT_S 5.0
#define IP_BUCKETS 4096
#define FD_RESERVE 64   /* descriptors kept for the model's files, MPI, the listening socket, epoll */
#define FD_SLACK 64     /* connections shut down by the server whose close libmicrohttpd has yet to see */
#define REPORT_S 10.0   /* a limit's log line at most this often */


static struct {
    const srv_config *cfg;
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
    const union MHD_ConnectionInfo *ci = mhd.MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
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
        const union MHD_ConnectionInfo *fd = mhd.MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        const union MHD_ConnectionInfo *ad = mhd.MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
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
    struct MHD_Response *res = mhd.MHD_create_response_from_buffer(strlen(json), json, MHD_RESPMEM_MUST_FREE);
    mhd.MHD_add_response_header(res, "Content-Type", type);
    enum MHD_Result ok = mhd.MHD_queue_response(c, code, res);
    mhd.MHD_destroy_response(res);
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
        mhd.MHD_suspend_connection(r->conn);
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
    char *json = r->api == API_MEGATRON ? req_megatron_json(r) : req_openai_json(r, -1, NULL, 0, NULL);
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
    if (strcmp(url, "/v1/models") == 0) {
        if (strcmp(method, "GET") != 0) return error(c, MHD_HTTP_METHOD_NOT_ALLOWED, "%s takes GET", url);
        return reply(c, MHD_HTTP_OK, req_models_json(), "application/json");
    }
    int tk = strcmp(url, "/tokenizer_info") == 0 ? 1 : strcmp(url, "/tokenize") == 0 ? 2 : strcmp(url, "/detokenize") == 0 ? 3 : 0;
    if (tk) { /* the remote tokenizer: answered here, nothing queued */
        if (strcmp(method, tk == 1 ? "GET" : "POST") != 0)
            return error(c, MHD_HTTP_METHOD_NOT_ALLOWED, "%s takes %s", url, tk == 1 ? "GET" : "POST");
        if (k->too_big) return error(c, 413, "the body is over %zu bytes (--max-body-bytes)", S.cfg->max_body);
        unsigned code = 200;
        char msg[512];
        const char *b = k->body ? k->body : "";
        char *json = tk == 1 ? req_tokenizer_info_json() : tk == 2 ? req_tokenize_json(b, k->len, &code, msg, sizeof msg)
                                                                  : req_detokenize_json(b, k->len, &code, msg, sizeof msg);
        return json ? reply(c, MHD_HTTP_OK, json, "application/json") : error(c, code, "%s", msg);
    }
    int api = strcmp(url, "/api") == 0                   ? API_MEGATRON
              : strcmp(url, "/v1/completions") == 0      ? API_OPENAI
              : strcmp(url, "/v1/chat/completions") == 0 ? API_CHAT
                                                         : -1;
    if (api < 0) return error(c, MHD_HTTP_NOT_FOUND, "no such endpoint %s: PUT /api, POST /v1/completions, POST "
                                  "/v1/chat/completions, GET /v1/models, GET /tokenizer_info, POST /tokenize or POST "
                                  "/detokenize", url);
    if (strcmp(method, api == API_MEGATRON ? "PUT" : "POST") != 0)
        return error(c, MHD_HTTP_METHOD_NOT_ALLOWED, "%s takes %s", url, api == API_MEGATRON ? "PUT" : "POST");
    if (k->too_big)
        return error(c, 413, "the body is over %zu bytes (--max-body-bytes)", S.cfg->max_body);
    set_deadline(c, 0); /* the request is whole: answering it takes as long as generating */
    unsigned code;
    char msg[512];
    request *r = req_parse(api, k->body ? k->body : "", k->len, &code, msg, sizeof msg);
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
        struct MHD_Response *res = mhd.MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, sse_read, r, sse_free);
        mhd.MHD_add_response_header(res, "Content-Type", "text/event-stream");
        mhd.MHD_add_response_header(res, "Cache-Control", "no-cache");
        enum MHD_Result ok = mhd.MHD_queue_response(c, MHD_HTTP_OK, res);
        mhd.MHD_destroy_response(res);
        return ok;
    }
    k->req = r;
    pthread_mutex_lock(&r->mu);
    int done = r->done;
    if (!done) r->suspended = 1, mhd.MHD_suspend_connection(c); /* resumed when generated */
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
    int top;      /* the most likely tokens listed a position: the most any request asks */
} batch;

static void on_token(void *user, int b, int32_t token)
{
    batch *bt = user;
    int i = bt->nreq - 1;
    while (i > 0 && bt->row0[i] > b) i--;
    request *r = bt->req[i];
    if (!r->stream || (r->g.eod >= 0 && token == r->g.eod)) return; /* EOD: the last event says "stop" */
    size_t n, sn;
    char *t = req_decode(&token, 1, &n);
    pthread_mutex_lock(&r->mu);
    char *s = req_stream_text(r, b - bt->row0[i], t, n, 0, &sn); /* a character's first bytes wait for the rest */
    char *json = req_openai_json(r, b - bt->row0[i], s, sn, NULL);
    free(s);
    req_sse_append(r, "data: ");
    req_sse_append(r, json);
    req_sse_append(r, "\n\n");
    struct MHD_Connection *wake = to_wake(r);
    pthread_mutex_unlock(&r->mu);
    if (wake) mhd.MHD_resume_connection(wake);
    free(json);
    free(t);
}

/* A batch's stop strings, every rank's copy: row b's packed in stops + at[b] ("one\0two\0", len[b]
 * bytes), so that each rank stops a row at the same token (gen_config.stop). */
typedef struct {
    int *len;
    size_t *at;
    char *stops;
} row_stops;

static void row_stops_free(row_stops *rs)
{
    free(rs->len), free(rs->at), free(rs->stops);
    memset(rs, 0, sizeof *rs);
}

/* Rank 0: the rows' stop strings of the batch's requests. */
static void row_stops_of(const batch *bt, int B, row_stops *rs)
{
    rs->len = td_xcalloc((size_t)B + 1, sizeof(int));
    rs->at = td_xcalloc((size_t)B + 1, sizeof(size_t));
    size_t total = 0;
    for (int q = 0, k = 0; q < bt->nreq; q++)
        for (int i = 0; i < bt->req[q]->n; i++, k++) {
            const request *r = bt->req[q];
            rs->at[k] = total;
            for (int j = 0; j < r->nstop; j++) rs->len[k] += (int)strlen(r->stop[j]) + 1;
            total += (size_t)rs->len[k];
        }
    rs->stops = td_xmalloc(total + 1);
    for (int q = 0, k = 0; q < bt->nreq; q++)
        for (int i = 0; i < bt->req[q]->n; i++, k++)
            for (int j = 0, o = 0; j < bt->req[q]->nstop; j++) {
                size_t n = strlen(bt->req[q]->stop[j]) + 1;
                memcpy(rs->stops + rs->at[k] + o, bt->req[q]->stop[j], n);
                o += (int)n;
            }
}

/* Whether row b's continuation gen[0..n) holds one of its stop strings. */
static int stop_hit(void *user, int b, const int32_t *gen, int n)
{
    const row_stops *rs = user;
    if (!rs->len[b]) return 0;
    size_t tl;
    char *t = req_decode(gen, n, &tl);
    int hit = 0;
    for (const char *p = rs->stops + rs->at[b]; p < rs->stops + rs->at[b] + rs->len[b] && !hit; p += strlen(p) + 1)
        hit = memmem(t, tl, p, strlen(p)) != NULL;
    free(t);
    return hit;
}

/* Broadcasts one message from rank 0: the kind, and for a batch its settings, lengths, tokens and
 * stop strings. */
static int exchange(const ps_state *ps, int kind, gen_config *g, int *B, int **lens, int32_t ***ids, int *logprobs,
                    int *top, row_stops *rs)
{
    int64_t h[10] = {kind, *B, g->max_new, g->greedy, g->top_k, g->eod, (int64_t)(g->seed >> 1), (int64_t)(g->seed & 1),
                     logprobs ? *logprobs : 0, top ? *top : 0};
    double f[2] = {g->temperature, g->top_p};
    comm_bcast(ps->world, h, 10, COMM_I64, 0);
    if (h[0] != SRV_BATCH) return (int)h[0];
    comm_bcast(ps->world, f, 2, COMM_F64, 0);
    if (ps->world_rank != 0) {
        *B = (int)h[1];
        *g = (gen_config){(int)h[2], (int)h[3], (float)f[0], (int)h[4], (float)f[1],
                          (uint64_t)h[6] << 1 | (uint64_t)h[7], (int)h[5], 0, NULL, NULL};
        *lens = td_xmalloc((size_t)*B * sizeof(int));
        *ids = td_xcalloc((size_t)*B, sizeof **ids);
        *logprobs = (int)h[8], *top = (int)h[9];
    }
    comm_bcast(ps->world, *lens, (size_t)*B, COMM_I32, 0);
    for (int i = 0; i < *B; i++) {
        if (ps->world_rank != 0) (*ids)[i] = td_xmalloc((size_t)(*lens)[i] * sizeof(int32_t));
        comm_bcast(ps->world, (*ids)[i], (size_t)(*lens)[i], COMM_I32, 0);
    }
    if (ps->world_rank != 0) {
        rs->len = td_xcalloc((size_t)*B + 1, sizeof(int));
        rs->at = td_xcalloc((size_t)*B + 1, sizeof(size_t));
    }
    comm_bcast(ps->world, rs->len, (size_t)*B, COMM_I32, 0);
    size_t total = 0;
    for (int i = 0; i < *B; i++) rs->at[i] = total, total += (size_t)rs->len[i];
    if (ps->world_rank != 0) rs->stops = td_xmalloc(total + 1);
    if (total) comm_bcast(ps->world, rs->stops, total, COMM_U8, 0);
    g->stop = stop_hit, g->stop_user = rs;
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
        req_sse_append(r, "data: ");
        req_sse_append(r, json);
        req_sse_append(r, "\n\n");
        free(json);
    }
    r->done = 1;
    return 1;
}

static void generate(gpt_model *m, const ps_state *ps, const gen_config *g, int B, int32_t **ids, int *lens,
                     int want_logprobs, int top, batch *bt)
{
    int cap = gen_capacity(g, B, lens);
    int32_t **out = td_xcalloc((size_t)B, sizeof *out);
    int *out_lens = td_xcalloc((size_t)B, sizeof(int));
    gen_logprobs L = {NULL, top, NULL, NULL};
    float **lp = want_logprobs ? td_xcalloc((size_t)B, sizeof *lp) : NULL;
    if (top) L.top_ids = td_xcalloc((size_t)B, sizeof *L.top_ids), L.top_lp = td_xcalloc((size_t)B, sizeof *L.top_lp);
    for (int i = 0; i < B; i++) {
        out[i] = td_xmalloc((size_t)cap * sizeof(int32_t));
        if (lp) lp[i] = td_xcalloc((size_t)cap, sizeof(float));
        if (top) {
            L.top_ids[i] = td_xcalloc((size_t)cap * top, sizeof(int32_t));
            L.top_lp[i] = td_xcalloc((size_t)cap * top, sizeof(float));
        }
    }
    L.lp = lp;
    gen_stats st;
    gen_run(m, ps, g, B, ids, lens, out, out_lens, lp ? &L : NULL, bt ? on_token : NULL, bt, &st);
    if (bt)
        for (int q = 0; q < bt->nreq; q++) {
            request *r = bt->req[q];
            pthread_mutex_lock(&r->mu);
            if (nonfinite_error(r, out_lens + bt->row0[q], lens + bt->row0[q])) {
                struct MHD_Connection *wake = to_wake(r);
                pthread_mutex_unlock(&r->mu);
                if (wake) mhd.MHD_resume_connection(wake);
                req_unref(r); /* the queue's */
                continue;
            }
            for (int i = 0; i < r->n; i++) {
                int row = bt->row0[q] + i, keep = out_lens[row] - lens[row] + r->lens[i];
                memcpy(r->out[i], r->ids[i], (size_t)r->lens[i] * sizeof(int32_t));
                memcpy(r->out[i] + r->lens[i], out[row] + lens[row], (size_t)(keep - r->lens[i]) * sizeof(int32_t));
                r->out_lens[i] = keep;
                if (r->want_logprobs) memcpy(r->logprobs[i], lp[row], (size_t)(keep > 1 ? keep - 1 : 0) * sizeof(float));
                for (int k = 0; k + 1 < keep && r->top; k++) { /* the first r->top of the batch's top */
                    memcpy(r->top_ids[i] + (size_t)k * r->top, L.top_ids[row] + (size_t)k * top, (size_t)r->top * sizeof(int32_t));
                    memcpy(r->top_lp[i] + (size_t)k * r->top, L.top_lp[row] + (size_t)k * top, (size_t)r->top * sizeof(float));
                }
            }
            for (int i = 0; i < r->n && r->stream; i++) { /* each row's last event: why it ended */
                size_t sn;
                char *s = req_stream_text(r, i, "", 0, 1, &sn);
                if (sn) { /* bytes held for a character that never completed: U+FFFD */
                    char *ev = req_openai_json(r, i, s, sn, NULL);
                    req_sse_append(r, "data: ");
                    req_sse_append(r, ev);
                    req_sse_append(r, "\n\n");
                    free(ev);
                }
                free(s);
                char *json = req_openai_json(r, i, "", 0, req_finish_reason(r, i));
                req_sse_append(r, "data: ");
                req_sse_append(r, json);
                req_sse_append(r, "\n\n");
                free(json);
            }
            if (r->stream) req_sse_append(r, "data: [DONE]\n\n");
            r->done = 1;
            struct MHD_Connection *wake = to_wake(r);
            pthread_mutex_unlock(&r->mu);
            if (wake) mhd.MHD_resume_connection(wake);
            req_unref(r); /* the queue's */
        }
    for (int i = 0; i < B; i++)
        free(out[i]), free(lp ? lp[i] : NULL), free(top ? L.top_ids[i] : NULL), free(top ? L.top_lp[i] : NULL);
    free(out), free(out_lens), free(lp), free(L.top_ids), free(L.top_lp);
}

/* Rank 0: the next batch: the first queued request, and after it the queued requests with the
 * same settings while the prompts fit max_batch (greedy ones only: a sampled row's random
 * numbers depend on its row, so it runs alone). NULL when the queue is empty. */
static int take_batch(batch *bt, gen_config *g, int *B, int **lens, int32_t ***ids)
{
    if (!S.head) return 0;
    bt->nreq = 0, *B = 0, bt->logprobs = 0, bt->top = 0;
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
        bt->top = r->top > bt->top ? r->top : bt->top;
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
    S.cfg = cfg;
    req_setup(cfg, tok, m->cfg.max_pos, m->cfg.vocab);
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
            mhd_open();
            d = mhd.MHD_start_daemon(MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG,
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
            TD_INFO("serve: listening on http://%s:%d (PUT /api, POST /v1/completions, /tokenize); pid %ld; at most %d "
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
            int want = 0, top = 0;
            row_stops rs = {0};
            int kind = exchange(ps, SRV_IDLE, &g, &B, &lens, &ids, &want, &top, &rs);
            if (kind == SRV_STOP) return 0;
            if (kind != SRV_BATCH) continue;
            generate(m, ps, &g, B, ids, lens, want, top, NULL);
            row_stops_free(&rs);
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
            mhd.MHD_quiesce_daemon(d); /* no new connections; the open ones are answered */
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
            row_stops rs = {0};
            row_stops_of(&bt, B, &rs);
            exchange(ps, SRV_BATCH, &g, &B, &lens, &ids, &bt.logprobs, &bt.top, &rs);
            generate(m, ps, &g, B, ids, lens, bt.logprobs, bt.top, &bt);
            row_stops_free(&rs);
            free(lens), free(ids);
            last = td_now();
        } else if (td_now() - last > HEARTBEAT_S) { /* keeps the other ranks' waits from timing out */
            gen_config none = {0};
            int zero = 0;
            exchange(ps, SRV_IDLE, &none, &zero, NULL, NULL, NULL, NULL, NULL);
            last = td_now();
        }
    }
    gen_config none = {0};
    int zero = 0;
    exchange(ps, SRV_STOP, &none, &zero, NULL, NULL, NULL, NULL, NULL);
    if (d) mhd.MHD_stop_daemon(d); /* rank 0 only: the others never opened libmicrohttpd */
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
