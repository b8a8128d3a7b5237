/* A request of trident serve, from the body that asked for it to the JSON that answers it:
 * request.c parses and checks a body (Megatron's PUT /api, OpenAI's POST /v1/completions) into a
 * request and writes its responses; server.c (HTTP, the queue, the generating loop) moves it
 * along. Private to src/serve. */
#ifndef TRIDENT_SERVE_REQUEST_H
#define TRIDENT_SERVE_REQUEST_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "trident/generate.h"
#include "trident/server.h"

struct MHD_Connection;

enum { API_MEGATRON, API_OPENAI, API_CHAT }; /* PUT /api, POST /v1/completions, POST /v1/chat/completions */

typedef struct request {
    int api, stream, n;       /* n rows: prompts x choices */
    int prompts, choices;     /* OpenAI: its prompts and "n", choice j of prompt p at row p choices + j */
    uint64_t id;              /* OpenAI's "cmpl-<id>", one a request */
    int want_logprobs;        /* Megatron's "logprobs": true; OpenAI's "logprobs" not null */
    int top;                  /* OpenAI's "logprobs" N: the N most likely tokens of every position */
    int echo;                 /* OpenAI's "echo": the prompt (and its log-probabilities) in the answer */
    char **stop;              /* OpenAI's "stop" strings (nstop), the text cut before the first found */
    int nstop;
    float **logprobs;         /* (n, positions - 1) when wanted: log p(token i + 1 | tokens 0..i) */
    int32_t **top_ids;        /* (n, (positions - 1) top), best first */
    float **top_lp;
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
    char (*held)[4];          /* each row's streamed bytes not yet a whole character (nheld[row] of them) */
    int *nheld;
    int refs;                 /* the handler and (streaming) the response callback */
    struct MHD_Connection *conn; /* the connection answering it */
    int suspended;            /* conn is suspended until the request is done or has events to send */
    pthread_mutex_t mu;
    struct request *next;
} request;

/* What every request is checked against, set once before the first req_parse: the server's
 * settings, the tokenizer (kept, not copied) and the model's positions. */
void req_setup(const srv_config *cfg, const tok_tokenizer *tok, int positions, int vocab);
/* The request a body of `api` describes (one reference), or NULL with the HTTP status and a
 * one-line message in (code, msg). */
request *req_parse(int api, const char *body, size_t len, unsigned *code, char *msg, size_t mlen);
/* Drops one reference; the last frees the request. */
void req_unref(request *r);
/* Appends text to r's server-sent events (the caller holds r->mu where another thread reads them). */
void req_sse_append(request *r, const char *text);
/* String i of member `key` of the top-level object in body (the member a string: i 0; an array:
 * its item i), unescaped by length into a malloc'd buffer of *n bytes (NUL-terminated past them;
 * a lone surrogate becomes U+FFFD), or NULL when it is not a string. body is JSON cJSON accepted. */
char *req_body_string(const char *body, size_t len, const char *key, int i, size_t *n);
/* The text of n ids (malloc'd; its bytes as the tokenizer gives them, ill-formed UTF-8 included:
 * every JSON answer makes them well-formed) and its length in *len. */
char *req_decode(const int32_t *ids, int n, size_t *len);
/* Streaming row `row`: the text to send now (malloc'd, *len bytes, NUL-terminated past them) for
 * the next n bytes of its continuation, well-formed UTF-8 (utf8.h): bytes that may start a character
 * the next token completes are held back in r->held; final sends what is held (a character that
 * never completed as U+FFFD). Concatenated, the texts equal the unstreamed answer's text. */
char *req_stream_text(request *r, int row, const char *bytes, size_t n, int final, size_t *len);
/* OpenAI's finish_reason of row i of a done request. */
const char *req_finish_reason(const request *r, int i);
/* The OpenAI completion (malloc'd JSON): the whole response (stream_row -1), or one event of a
 * stream: row stream_row's chunk (chunk_len bytes) and its finish reason (NULL until the end). */
char *req_openai_json(request *r, int stream_row, const char *chunk, size_t chunk_len, const char *finish);
/* The remote tokenizer lm-evaluation-harness calls (vLLM's endpoints): GET /tokenizer_info's answer,
 * and POST /tokenize's and POST /detokenize's for a body, each malloc'd JSON, or NULL with the
 * HTTP status and a one-line message in (code, msg). */
char *req_tokenizer_info_json(void);
char *req_tokenize_json(const char *body, size_t len, unsigned *code, char *msg, size_t mlen);
char *req_detokenize_json(const char *body, size_t len, unsigned *code, char *msg, size_t mlen);
/* GET /v1/models' answer (malloc'd JSON): the one model, "trident". */
char *req_models_json(void);
/* Megatron's response to PUT /api (malloc'd JSON). */
char *req_megatron_json(request *r);

#endif
