/* trident serve: Megatron's text-generation server (PUT /api) and OpenAI-style POST
 * /v1/completions, POST /v1/chat/completions (the model's chat template) and GET /v1/models on GNU
 * libmicrohttpd, generating with gen_run in any tp x pp layout.
 * World rank 0 runs the HTTP front end and a queue; requests are batched (greedy ones together,
 * up to max_batch prompts) and each batch is broadcast to every rank, which generate it together.
 * Idle ranks hear a heartbeat so their bounded waits do not expire. SIGTERM or SIGINT stops new
 * connections, finishes what is queued and in flight, and exits. See docs/serve.md. */
#ifndef TRIDENT_SERVER_H
#define TRIDENT_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "trident/chat_template.h"
#include "trident/gpt.h"
#include "trident/parallel_state.h"
#include "trident/tokenizer.h"

typedef struct srv_config {
    const char *host;      /* the address to bind (127.0.0.1 by default) */
    int port;
    int max_batch;         /* prompts generated together */
    int max_queue;         /* requests waiting; past it: 503 */
    size_t max_body;       /* bytes of a request body; past it: 413 */
    int max_prompt_tokens; /* tokens of one prompt; past it: 400 */
    int max_tokens;        /* tokens to generate a prompt; past it: 400 */
    int max_connections;   /* open connections in all (0: what the descriptor limit allows, at most
                              10000); past it the oldest without a whole request is dropped */
    int max_per_ip;        /* open connections from one client address; past it: refused */
    int idle_timeout;      /* seconds of silence before a connection is closed */
    int request_timeout;   /* seconds to send a whole request (headers and body) */
    int shutdown_grace;    /* seconds SIGTERM waits for connections without a whole request */
    uint64_t seed;         /* sampling seed when a request gives none */
    /* POST /v1/chat/completions: the model's chat template and the special tokens of its
     * tokenizer_config.json (chat_config), compiled (chat); both NULL: the endpoint answers 400 */
    const ct_config *chat_config;
    const ct_template *chat;
    const ct_template *chat_tools; /* of a list of templates, "tool_use", rendered when tools are given; or NULL */
} srv_config;

/* Serves until SIGTERM or SIGINT (collective over ps->world). Returns 0, or -1 with err when
 * rank 0 cannot listen (then every rank returns -1). */
int srv_run(gpt_model *m, const ps_state *ps, const tok_tokenizer *tok, const srv_config *cfg, char *err,
            size_t errlen);

#endif
