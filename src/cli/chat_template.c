/* trident chat-template: renders a conversation with a model's chat template (the Jinja
 * chat_template of its tokenizer_config.json) as transformers.js's apply_chat_template does, to
 * check a template by hand; see docs/chat.md. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cli.h"
#include "trident/chat_template.h"
#include "trident/check.h"

static const char USAGE_TEXT[] =
    "usage: trident chat-template (--tokenizer-config PATH | --model-dir DIR) --messages FILE.json\n"
    "                             [--add-generation-prompt] [--date YYYY-MM-DD]\n"
    "\n"
    "Renders the conversation of FILE.json with the chat_template of a Hugging Face tokenizer_config.json\n"
    "and writes the text to stdout, nothing added: byte for byte what transformers.js's\n"
    "apply_chat_template(messages, {tokenize: false, add_generation_prompt}) returns (@huggingface/jinja).\n"
    "\n"
    "  --tokenizer-config PATH   the tokenizer_config.json (chat_template, bos_token, eos_token, ...)\n"
    "  --model-dir DIR           a Hugging Face model folder or a trident checkpoint converted from one:\n"
    "                            DIR/tokenizer_config.json (of an iter_NNNNNNN folder, its parent's)\n"
    "  --messages FILE.json      a JSON list of messages ({\"role\": ..., \"content\": ...}), or an object\n"
    "                            {\"messages\": [...], \"tools\": [...], ...}: its other members are more\n"
    "                            variables for the template (\"enable_thinking\": false); '-' reads stdin\n"
    "  --add-generation-prompt   end with the opening of the assistant's turn (default: off)\n"
    "  --date YYYY-MM-DD         the date strftime_now() gives the template (default: today, local time)\n"
    "  --cases FILE.jsonl        many renders at once (tests): each line {id, config, messages,\n"
    "                            add_generation_prompt, tools, kwargs} -> one line {id, ok: true, text} or\n"
    "                            {id, ok: false, error}\n"
    "\n"
    "A template error, or the template's raise_exception(), exits 1 with one line; a bad flag exits 2.\n";

static char *read_file(const char *path, size_t *len)
{
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0, got;
    char *buf = td_xmalloc(cap);
    while ((got = fread(buf + n, 1, cap - n - 1, f)) > 0)
        if ((n += got) + 1 == cap) buf = td_xrealloc(buf, cap *= 2);
    int bad = ferror(f);
    if (f != stdin) fclose(f);
    if (bad) {
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

static int is_file(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

char *cli_find_tokenizer_config(const char *dir)
{
    size_t n = strlen(dir) + 64;
    char *p = td_xmalloc(n);
    snprintf(p, n, "%s/tokenizer_config.json", dir);
    if (is_file(p)) return p;
    size_t l = strlen(dir);
    while (l > 1 && dir[l - 1] == '/') l--;
    const char *base = dir + l;
    while (base > dir && base[-1] != '/') base--;
    snprintf(p, n, "%.*s/../tokenizer_config.json", (int)l, dir);
    if (!strncmp(base, "iter_", 5) && is_file(p)) return p;
    free(p);
    return NULL;
}

static int parse_date(const char *s, struct tm *tm)
{
    int y, m, d;
    char extra;
    if (sscanf(s, "%4d-%2d-%2d%c", &y, &m, &d, &extra) != 3 || m < 1 || m > 12 || d < 1 || d > 31) return -1;
    memset(tm, 0, sizeof *tm);
    tm->tm_year = y - 1900;
    tm->tm_mon = m - 1;
    tm->tm_mday = d;
    tm->tm_isdst = -1;
    return mktime(tm) == (time_t)-1 ? -1 : 0;
}

/* One template per config file, compiled once: the --cases loop. */
typedef struct {
    char *path;
    ct_config cfg;
    ct_template *t, *tool_t;
    char err[512];
} cached;

static int run_cases(const char *prog, const char *path, const struct tm *now)
{
    size_t len;
    char *text = read_file(path, &len);
    if (!text) td_fatal(1, "%s: cannot read --cases %s: %s", prog, path, td_strerror(errno));
    cached *cache = NULL;
    size_t ncache = 0, lineno = 0;
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        lineno++;
        if (!*line) continue;
        cJSON *c = cJSON_Parse(line);
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(c, "id"), *cfgp = cJSON_GetObjectItemCaseSensitive(c, "config");
        const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(c, "messages");
        if (!cJSON_IsString(cfgp) || !cJSON_IsArray(msgs))
            td_fatal(1, "%s: --cases %s line %zu: expected {id, config, messages, add_generation_prompt}", prog, path, lineno);
        size_t k;
        for (k = 0; k < ncache && strcmp(cache[k].path, cfgp->valuestring); k++) {}
        if (k == ncache) {
            cache = td_xrealloc(cache, ++ncache * sizeof *cache);
            memset(&cache[k], 0, sizeof cache[k]);
            cache[k].path = strdup(cfgp->valuestring);
            if (ct_load_config(cfgp->valuestring, &cache[k].cfg, cache[k].err, sizeof cache[k].err) == 0) {
                if (!cache[k].cfg.template_src) snprintf(cache[k].err, sizeof cache[k].err, "no chat_template");
                else cache[k].t = ct_compile(cache[k].cfg.template_src, cache[k].err, sizeof cache[k].err);
                if (cache[k].t && cache[k].cfg.tool_template_src &&
                    !(cache[k].tool_t = ct_compile(cache[k].cfg.tool_template_src, cache[k].err, sizeof cache[k].err))) {
                    ct_free(cache[k].t);
                    cache[k].t = NULL;
                }
            }
        }
        cJSON *out = cJSON_CreateObject();
        cJSON_AddItemToObject(out, "id", id ? cJSON_Duplicate(id, 1) : cJSON_CreateNull());
        char err[1024] = "";
        char *r = NULL;
        const cJSON *tools = cJSON_GetObjectItemCaseSensitive(c, "tools");
        if (cJSON_IsNull(tools)) tools = NULL;
        ct_template *t = cache[k].t;
        if (t && tools && cache[k].tool_t) t = cache[k].tool_t; /* get_chat_template: "tool_use" with tools */
        if (t) {
            cJSON *ctx = ct_chat_context(&cache[k].cfg, msgs, cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "add_generation_prompt")),
                                         tools, cJSON_GetObjectItemCaseSensitive(c, "kwargs"));
            r = ct_render(t, ctx, now, NULL, err, sizeof err);
            cJSON_Delete(ctx);
        } else {
            snprintf(err, sizeof err, "%s", cache[k].err);
        }
        cJSON_AddBoolToObject(out, "ok", r != NULL);
        if (r) cJSON_AddStringToObject(out, "text", r);
        else cJSON_AddStringToObject(out, "error", err);
        char *s = cJSON_PrintUnformatted(out);
        fputs(s, stdout);
        fputc('\n', stdout);
        free(s);
        free(r);
        cJSON_Delete(out);
        cJSON_Delete(c);
    }
    for (size_t k = 0; k < ncache; k++) {
        free(cache[k].path);
        ct_config_free(&cache[k].cfg);
        ct_free(cache[k].t);
        ct_free(cache[k].tool_t);
    }
    free(cache);
    free(text);
    if (fflush(stdout) != 0) td_fatal(1, "%s: writing stdout failed: %s", prog, td_strerror(errno));
    return 0;
}

int cli_chat_template(int argc, char **argv)
{
    const char *prog = "trident chat-template";
    const char *config = NULL, *model_dir = NULL, *messages_path = NULL, *date = NULL, *cases = NULL;
    int add_gen = 0;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) {
            fputs(USAGE_TEXT, stdout);
            return 0;
        }
        if (!strcmp(f, "--add-generation-prompt")) {
            add_gen = 1;
            continue;
        }
        const char **dst = !strcmp(f, "--tokenizer-config") ? &config
                         : !strcmp(f, "--model-dir")        ? &model_dir
                         : !strcmp(f, "--messages")         ? &messages_path
                         : !strcmp(f, "--date")             ? &date
                         : !strcmp(f, "--cases")            ? &cases
                                                            : NULL;
        if (!dst) td_usage_error("%s: unknown flag %s (see %s --help)", prog, f, prog);
        if (i + 1 >= argc) td_usage_error("%s: %s needs a value (see %s --help)", prog, f, prog);
        *dst = argv[++i];
    }
    struct tm now, *nowp = NULL;
    if (date) {
        if (parse_date(date, &now)) td_usage_error("%s: --date %s is not a date YYYY-MM-DD", prog, date);
        nowp = &now;
    }
    if (cases) {
        if (config || model_dir || messages_path || add_gen)
            td_usage_error("%s: --cases takes the configs and messages from its file (only --date goes with it)", prog);
        return run_cases(prog, cases, nowp);
    }
    if (!config == !model_dir) td_usage_error("%s: give one of --tokenizer-config PATH and --model-dir DIR", prog);
    if (!messages_path) td_usage_error("%s: give --messages FILE.json (a JSON list of messages)", prog);
    char *found = NULL;
    if (model_dir && !(config = found = cli_find_tokenizer_config(model_dir)))
        td_usage_error("%s: --model-dir %s has no tokenizer_config.json (nor has its parent folder)", prog, model_dir);

    char err[1024];
    ct_config cfg;
    if (ct_load_config(config, &cfg, err, sizeof err)) td_fatal(1, "%s: %s", prog, err);
    size_t len;
    char *text = read_file(messages_path, &len);
    if (!text) td_fatal(1, "%s: cannot read --messages %s: %s", prog, messages_path, td_strerror(errno));
    cJSON *j = cJSON_ParseWithLength(text, len);
    free(text);
    const cJSON *messages = j, *tools = NULL;
    cJSON *kwargs = cJSON_CreateObject(); /* the object's other members: apply_chat_template's kwargs */
    if (cJSON_IsObject(j)) {
        messages = cJSON_GetObjectItemCaseSensitive(j, "messages");
        tools = cJSON_GetObjectItemCaseSensitive(j, "tools");
        if (cJSON_IsNull(tools)) tools = NULL;
        for (const cJSON *k = j->child; k; k = k->next)
            if (strcmp(k->string, "messages") && strcmp(k->string, "tools"))
                cJSON_AddItemToObject(kwargs, k->string, cJSON_Duplicate(k, 1));
    }
    if (!cJSON_IsArray(messages))
        td_fatal(1, "%s: --messages %s is not a JSON list of messages (nor an object with one as \"messages\")", prog, messages_path);
    /* get_chat_template: with tools, a "tool_use" template of a list is preferred */
    const char *src = tools && cfg.tool_template_src ? cfg.tool_template_src : cfg.template_src;
    if (!src) td_fatal(1, "%s: %s has no chat_template", prog, config);
    ct_template *t = ct_compile(src, err, sizeof err);
    if (!t) td_fatal(1, "%s: the chat_template of %s: %s", prog, config, err);
    cJSON *ctx = ct_chat_context(&cfg, messages, add_gen, tools, kwargs);
    cJSON_Delete(kwargs);
    size_t n;
    char *out = ct_render(t, ctx, nowp, &n, err, sizeof err);
    if (!out) td_fatal(1, "%s: the chat_template of %s: %s", prog, config, err);
    if (n && fwrite(out, 1, n, stdout) != n) td_fatal(1, "%s: writing stdout failed: %s", prog, td_strerror(errno));
    if (fflush(stdout) != 0) td_fatal(1, "%s: writing stdout failed: %s", prog, td_strerror(errno));
    free(out);
    cJSON_Delete(ctx);
    ct_free(t);
    cJSON_Delete(j);
    ct_config_free(&cfg);
    free(found);
    return 0;
}
