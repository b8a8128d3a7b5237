/* Chat templates: the Jinja `chat_template` of a Hugging Face model's tokenizer_config.json,
 * rendered byte for byte as @huggingface/jinja 0.5.11 renders it (the renderer transformers.js's
 * apply_chat_template uses). A hand-written lexer, parser and evaluator of the part of Jinja that
 * templates use; docs/chat.md lists what is in and what is left out. Templates are untrusted
 * input: nesting depth, loop steps, memory and output size are bounded, and a template past a
 * bound ends with an error, never a crash or a hang. */
#ifndef TRIDENT_CHAT_TEMPLATE_H
#define TRIDENT_CHAT_TEMPLATE_H

#include <stddef.h>
#include <time.h>

#include <cjson/cJSON.h>

typedef struct ct_template ct_template;

/* Compiles template source `src` (UTF-8, NUL-terminated). Returns the template, or NULL with a
 * one-line reason (what was wrong, where) in err[errlen]. Free with ct_free. */
ct_template *ct_compile(const char *src, char *err, size_t errlen);

/* Renders t with the variables of `ctx`, a cJSON object (messages, add_generation_prompt,
 * bos_token, ...; ct_chat_context builds the one apply_chat_template passes). `now` is the
 * local time strftime_now() formats (NULL: the clock). Returns a malloc'd string, NUL-terminated,
 * its length in *len if len is not NULL (a template may write a NUL itself: '\x00'), or NULL with
 * a one-line reason in err[errlen]: the template's raise_exception("...") gives
 * "raise_exception: ...". Thread-safe: t is only read; a render needs < 512 KiB of stack. */
char *ct_render(const ct_template *t, const cJSON *ctx, const struct tm *now, size_t *len, char *err, size_t errlen);

void ct_free(ct_template *t);

/* The special tokens transformers.js passes to a template, in this order. */
enum { CT_BOS, CT_EOS, CT_UNK, CT_SEP, CT_PAD, CT_CLS, CT_MASK, CT_NSPECIAL };
extern const char *const ct_special_names[CT_NSPECIAL]; /* "bos_token", "eos_token", ... */

/* What a model's tokenizer_config.json gives a chat. */
typedef struct {
    char *template_src;              /* chat_template: the string, or of the list of {name,
                                        template} the one named "default"; NULL if none */
    char *tool_template_src;         /* of that list, "tool_use"; else NULL */
    char *special[CT_NSPECIAL];      /* bos_token ...: the string, or {content: ...}; NULL if absent or empty */
} ct_config;

/* Reads tokenizer_config.json at `path` into *cfg (zeroed first). Returns 0, or -1 with a
 * one-line reason in err (unreadable file, bad JSON, chat_template of a wrong type). A config
 * without a chat_template returns 0 with cfg->template_src NULL. Free with ct_config_free. */
int ct_load_config(const char *path, ct_config *cfg, char *err, size_t errlen);
void ct_config_free(ct_config *cfg);

/* The context apply_chat_template(messages, {add_generation_prompt, tools, ...kwargs}) of
 * transformers.js renders with: {messages, add_generation_prompt, tools (null if NULL), documents:
 * null, each special token cfg has, then the members of the object `kwargs` (NULL: none; e.g.
 * {"enable_thinking": false}), a member of the same name replacing the value in place}. Its
 * arguments are copied. Returns a new cJSON object. */
cJSON *ct_chat_context(const ct_config *cfg, const cJSON *messages, int add_generation_prompt, const cJSON *tools,
                       const cJSON *kwargs);

#endif
