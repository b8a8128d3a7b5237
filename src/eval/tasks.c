/* The zero-shot evaluations of the Megatron papers and llm.c: WikiText-103 perplexity (with
 * Megatron's detokenizer and its adjusted perplexity per original word), LAMBADA last-word
 * accuracy and HellaSwag (acc and acc_norm, as llm.c scores it). See include/eval/trident/eval.h
 * and docs/eval.md. */
#include "trident/eval.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/check.h"

/* ---- WikiText's detokenizer (Megatron's tasks/zeroshot_gpt/detokenizer.py) ---- */

/* s with every `from` replaced by `to`, left to right (Python's str.replace). Frees s. */
static char *replace_all(char *s, const char *from, const char *to)
{
    size_t nf = strlen(from), nt = strlen(to), n = 0;
    for (const char *p = strstr(s, from); p; p = strstr(p + nf, from)) n++;
    if (!n) return s;
    size_t len = strlen(s);
    char *out = td_xmalloc(len + n * nt + 1), *o = out;
    const char *p = s;
    for (const char *q = strstr(p, from); q; q = strstr(p, from)) {
        memcpy(o, p, (size_t)(q - p));
        o += q - p;
        memcpy(o, to, nt);
        o += nt;
        p = q + nf;
    }
    strcpy(o, p);
    free(s);
    return out;
}

/* s with every match of `pattern` replaced (Python's re.sub; $1 in `to` is the first group). */
static char *regex_all(char *s, const char *pattern, const char *to)
{
    int code;
    PCRE2_SIZE off;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &code, &off, NULL);
    TD_CHECK(re != NULL, "", "the detokenizer's pattern %s does not compile (offset %zu)", pattern, (size_t)off);
    size_t len = strlen(s);
    PCRE2_SIZE cap = len * 2 + 64;
    char *out = td_xmalloc(cap);
    for (;;) {
        PCRE2_SIZE outlen = cap;
        int rc = pcre2_substitute(re, (PCRE2_SPTR)s, len, 0, PCRE2_SUBSTITUTE_GLOBAL | PCRE2_SUBSTITUTE_OVERFLOW_LENGTH,
                                  NULL, NULL, (PCRE2_SPTR)to, PCRE2_ZERO_TERMINATED, (PCRE2_UCHAR *)out, &outlen);
        if (rc == PCRE2_ERROR_NOMEMORY) {
            cap = outlen + 1;
            out = td_xrealloc(out, cap);
            continue;
        }
        TD_CHECK(rc >= 0, "check that the file is UTF-8", "substituting %s failed (PCRE2 error %d)", pattern, rc);
        break;
    }
    pcre2_code_free(re);
    free(s);
    return out;
}

char *ev_wikitext_detokenize(const char *text)
{
    char *s = td_xstrdup(text);
    s = replace_all(s, "s '", "s'");
    s = regex_all(s, "/' [0-9]/", "/'[0-9]/");
    s = replace_all(s, " @-@ ", "-");
    s = replace_all(s, " @,@ ", ",");
    s = replace_all(s, " @.@ ", ".");
    s = replace_all(s, " : ", ": ");
    s = replace_all(s, " ; ", "; ");
    s = replace_all(s, " . ", ". ");
    s = replace_all(s, " ! ", "! ");
    s = replace_all(s, " ? ", "? ");
    s = replace_all(s, " , ", ", ");
    s = regex_all(s, "\\(\\s*([^\\)]*?)\\s*\\)", "($1)");
    s = regex_all(s, "\\[\\s*([^\\]]*?)\\s*\\]", "[$1]");
    s = regex_all(s, "{\\s*([^}]*?)\\s*}", "{$1}");
    s = regex_all(s, "\"\\s*([^\"]*?)\\s*\"", "\"$1\"");
    s = regex_all(s, "'\\s*([^']*?)\\s*'", "'$1'");
    s = replace_all(s, "= = = =", "====");
    s = replace_all(s, "= = =", "===");
    s = replace_all(s, "= =", "==");
    s = replace_all(s, " \xc2\xb0 ", "\xc2\xb0"); /* the degree sign */
    s = replace_all(s, " \n", "\n");
    s = replace_all(s, "\n ", "\n");
    s = replace_all(s, " N ", " 1 ");
    s = replace_all(s, " 's", "'s");
    return s;
}

int64_t ev_count_space_split(const char *text)
{
    size_t a = 0, b = strlen(text); /* Python's len(text.strip().split(" ")) */
    while (a < b && strchr(" \t\n\r\v\f", text[a])) a++;
    while (b > a && strchr(" \t\n\r\v\f", text[b - 1])) b--;
    int64_t n = 1;
    for (size_t i = a; i < b; i++) n += text[i] == ' ';
    return n;
}

/* Row r of a batch: the last S + 1 of tokens [0, n) as ids and targets (padding after it);
 * returns the position of tokens[first] among the targets' positions (<0: cut off). */
static int fill_row(int32_t *ids, int32_t *targets, int S, const int32_t *tokens, int n, int first)
{
    int drop = n > S + 1 ? n - (S + 1) : 0;
    int len = n - drop - 1; /* predictions */
    for (int i = 0; i < S; i++) {
        ids[i] = i < len ? tokens[drop + i] : 0;
        targets[i] = i < len ? tokens[drop + i + 1] : 0;
    }
    return first - drop - 1;
}

/* Row r of a batch from a context (nc tokens) and its continuation (nt): returns the position of
 * the continuation's first token among the targets (fill_row). */
static int fill_pair(int32_t *ids, int32_t *targets, int S, const int32_t *ctx, int nc, const int32_t *cont, int nt)
{
    int32_t *all = td_xmalloc((size_t)(nc + nt) * sizeof(int32_t));
    memcpy(all, ctx, (size_t)nc * sizeof(int32_t));
    memcpy(all + nc, cont, (size_t)nt * sizeof(int32_t));
    int first = fill_row(ids, targets, S, all, nc + nt, nc);
    free(all);
    return first;
}

/* ---- the tasks ---- */

static char *read_file(const char *path, size_t *len, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "cannot open %s: %s", path, td_strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = td_xmalloc(cap);
    size_t got;
    while ((got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (cap - n < 2) buf = td_xrealloc(buf, cap *= 2);
    }
    fclose(f);
    buf[n] = 0;
    *len = n;
    return buf;
}

static int32_t *encode(tok_worker *w, const char *text, size_t len, int *n)
{
    bpe_ids e = {0};
    tok_encode(w, text, len, &e);
    *n = (int)e.n;
    return e.ids ? e.ids : td_xcalloc(1, sizeof(int32_t));
}

/* The offset of the first byte of s[0..n) that does not start or continue a valid UTF-8
 * character (overlong forms, surrogates and code points past U+10FFFF included), or -1. */
static long long utf8_bad_at(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t k = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
        if (k == 0 || i + k > n) return (long long)i;
        for (size_t j = 1; j < k; j++)
            if ((s[i + j] & 0xc0) != 0x80) return (long long)i;
        if ((c == 0xe0 && s[i + 1] < 0xa0) || (c == 0xed && s[i + 1] >= 0xa0) || (c == 0xf0 && s[i + 1] < 0x90) ||
            (c == 0xf4 && s[i + 1] >= 0x90))
            return (long long)i;
        i += k;
    }
    return -1;
}

int ev_wikitext(gpt_model *m, const ps_state *ps, const tok_tokenizer *tok, const char *path, int K,
                ev_wikitext_result *out, char *err, size_t errlen)
{
    size_t len;
    char *raw = read_file(path, &len, err, errlen);
    if (!raw) return -1;
    long long bad = utf8_bad_at((const unsigned char *)raw, len);
    if (bad >= 0 || strlen(raw) != len) {
        if (bad >= 0)
            snprintf(err, errlen, "%s is not UTF-8: byte %lld (0x%02x) is not part of a valid character; WikiText-103 "
                     "(wiki.test.tokens) is UTF-8: convert the file (iconv -f LATIN1 -t UTF-8) or give the right one",
                     path, bad, (unsigned char)raw[bad]);
        else
            snprintf(err, errlen, "%s holds a NUL byte at byte %zu; WikiText-103 (wiki.test.tokens) is UTF-8 text",
                     path, strlen(raw));
        free(raw);
        return -1;
    }
    memset(out, 0, sizeof *out);
    out->original_words = ev_count_space_split(raw);
    char *text = ev_wikitext_detokenize(raw);
    tok_worker *w = tok_worker_new(tok);
    int n;
    int32_t *tokens = encode(w, text, strlen(text), &n);
    tok_worker_free(w);
    free(raw);
    free(text);
    const int S = m->cfg.seq, B = m->mbs;
    out->doc_tokens = n;
    int64_t nwin = ev_num_windows(n, S, K);
    if (nwin == 0) {
        snprintf(err, errlen, "%s holds %d token%s; a window needs --seq-length + 1 = %d", path, n, td_plural(n), S + 1);
        free(tokens);
        return -1;
    }
    int32_t *ids = td_xmalloc((size_t)B * S * sizeof(int32_t)), *tg = td_xmalloc((size_t)B * S * sizeof(int32_t));
    float *loss = td_xmalloc((size_t)B * S * sizeof(float));
    double sum = 0;
    int64_t scored = 0;
    for (int64_t w0 = 0; w0 < nwin; w0 += B) {
        int rows = nwin - w0 < B ? (int)(nwin - w0) : B;
        for (int r = 0; r < rows; r++)
            fill_row(ids + (size_t)r * S, tg + (size_t)r * S, S, tokens + (w0 + r) * K, S + 1, 0);
        ev_forward(m, ps, ids, tg, rows, loss, NULL);
        for (int r = 0; r < rows; r++) {
            int first = w0 + r == 0 ? 0 : S - K;
            for (int t = first; t < S; t++) sum += loss[(size_t)r * S + t];
            scored += S - first;
        }
    }
    out->windows = nwin;
    out->tokens = scored;
    out->loss = sum / (double)scored;
    out->perplexity = exp(fmin(20.0, out->loss));
    /* Megatron: the loss per token of the text, over its original words */
    double ratio = (double)(n - 1) / (double)(out->original_words - 1);
    out->adjusted_perplexity = exp(fmin(20.0, out->loss * ratio));
    free(tokens), free(ids), free(tg), free(loss);
    return 0;
}

/* The jsonl lines of path, parsed; *n of them, each from line (*lines)[i]. A file with none is
 * refused: an empty task scores nothing. */
static cJSON **read_jsonl(const char *path, int *n, int **lines, char *err, size_t errlen)
{
    size_t len;
    char *buf = read_file(path, &len, err, errlen);
    if (!buf) return NULL;
    cJSON **rows = NULL;
    int cnt = 0, lineno = 0;
    for (char *line = buf, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        lineno++;
        if (strspn(line, " \t\r") == strlen(line)) continue;
        cJSON *j = cJSON_Parse(line);
        if (!j) {
            snprintf(err, errlen, "%s line %d: not JSON", path, lineno);
            for (int i = 0; i < cnt; i++) cJSON_Delete(rows[i]);
            free(rows);
            free(*lines);
            *lines = NULL;
            free(buf);
            return NULL;
        }
        rows = td_xrealloc(rows, (size_t)(cnt + 1) * sizeof *rows);
        *lines = td_xrealloc(*lines, (size_t)(cnt + 1) * sizeof **lines);
        (*lines)[cnt] = lineno;
        rows[cnt++] = j;
    }
    free(buf);
    if (cnt == 0) {
        snprintf(err, errlen, "%s holds no examples (%s); the task file has one JSON object a line", path,
                 len ? "only blank lines" : "it is empty");
        return NULL;
    }
    *n = cnt;
    return rows;
}

int ev_lambada(gpt_model *m, const ps_state *ps, const tok_tokenizer *tok, const char *path, int strict,
               ev_lambada_result *out, char *err, size_t errlen)
{
    int n, *lines = NULL;
    cJSON **rows = read_jsonl(path, &n, &lines, err, errlen);
    if (!rows) return -1;
    memset(out, 0, sizeof *out);
    const int S = m->cfg.seq, B = m->mbs;
    tok_worker *w = tok_worker_new(tok);
    int32_t *ids = td_xmalloc((size_t)B * S * sizeof(int32_t)), *tg = td_xmalloc((size_t)B * S * sizeof(int32_t));
    float *loss = td_xmalloc((size_t)B * S * sizeof(float));
    uint8_t *ok = td_xmalloc((size_t)B * S);
    int first[64], count[64], rc = 0;
    TD_ASSERT(B <= 64);
    for (int e0 = 0; e0 < n && rc == 0; e0 += B) {
        int rows_in = n - e0 < B ? n - e0 : B;
        for (int r = 0; r < rows_in; r++) {
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(rows[e0 + r], "text");
            if (!cJSON_IsString(t) || !*t->valuestring) {
                snprintf(err, errlen, "%s line %d (example %d): no \"text\" string", path, lines[e0 + r], e0 + r + 1);
                rc = -1;
                break;
            }
            const char *text = t->valuestring;
            int nc, nt;
            int32_t *ctx, *tgt;
            if (strict) { /* the whole last word (after Megatron's get_tokens) */
                size_t L = strlen(text);
                while (L > 0 && strchr(" \t\n\r", text[L - 1])) L--;
                size_t s = L;
                while (s > 0 && !strchr(" \t\n\r", text[s - 1])) s--;
                size_t cs = s; /* text[:start].strip() */
                while (cs > 0 && strchr(" \t\n\r", text[cs - 1])) cs--;
                size_t c0 = strspn(text, " \t\n\r");
                ctx = encode(w, text + c0, cs > c0 ? cs - c0 : 0, &nc);
                char *word = td_xmalloc(L - s + 2);
                word[0] = ' ';
                memcpy(word + 1, text + s, L - s);
                tgt = encode(w, word, L - s + 1, &nt);
                free(word);
            } else { /* the last token */
                ctx = encode(w, text, strlen(text), &nc);
                tgt = td_xmalloc(sizeof(int32_t));
                tgt[0] = ctx[--nc];
                nt = 1;
            }
            first[r] = fill_pair(ids + (size_t)r * S, tg + (size_t)r * S, S, ctx, nc, tgt, nt);
            count[r] = nt;
            free(ctx), free(tgt);
        }
        if (rc) break;
        ev_forward(m, ps, ids, tg, rows_in, loss, ok);
        for (int r = 0; r < rows_in; r++) {
            int good = first[r] >= 0;
            for (int i = 0; i < count[r] && good; i++) good = ok[(size_t)r * S + first[r] + i];
            out->correct += good;
            out->n++;
        }
    }
    tok_worker_free(w);
    for (int i = 0; i < n; i++) cJSON_Delete(rows[i]);
    free(rows), free(lines), free(ids), free(tg), free(loss), free(ok);
    if (rc == 0) out->accuracy = out->n ? (double)out->correct / (double)out->n : 0;
    return rc;
}

int ev_hellaswag(gpt_model *m, const ps_state *ps, const tok_tokenizer *tok, const char *path,
                 ev_hellaswag_result *out, char *err, size_t errlen)
{
    int n, *lines = NULL;
    cJSON **rows = read_jsonl(path, &n, &lines, err, errlen);
    if (!rows) return -1;
    memset(out, 0, sizeof *out);
    const int S = m->cfg.seq;
    TD_CHECK(m->mbs >= 4, "", "HellaSwag scores its 4 endings in one micro-batch of 4");
    tok_worker *w = tok_worker_new(tok);
    int32_t *ids = td_xmalloc((size_t)4 * S * sizeof(int32_t)), *tg = td_xmalloc((size_t)4 * S * sizeof(int32_t));
    float *loss = td_xmalloc((size_t)4 * S * sizeof(float));
    int rc = 0;
    for (int e = 0; e < n; e++) {
        const cJSON *ctx = cJSON_GetObjectItemCaseSensitive(rows[e], "ctx");
        const cJSON *label = cJSON_GetObjectItemCaseSensitive(rows[e], "label");
        const cJSON *ends = cJSON_GetObjectItemCaseSensitive(rows[e], "endings");
        if (!cJSON_IsString(ctx) || !cJSON_IsNumber(label) || !cJSON_IsArray(ends) || cJSON_GetArraySize(ends) != 4) {
            snprintf(err, errlen, "%s line %d (example %d): needs \"ctx\" (a string), \"label\" (a number) and "
                     "\"endings\" (4 strings)", path, lines[e], e + 1);
            rc = -1;
            break;
        }
        double lv = label->valuedouble;
        if (!(lv >= 0 && lv <= 3 && lv == (double)(int)lv)) {
            snprintf(err, errlen, "%s line %d (example %d): \"label\" is %g; it is the index of the right ending, an "
                     "integer 0 to 3", path, lines[e], e + 1, lv);
            rc = -1;
            break;
        }
        int nc, first[4], cnt[4];
        int32_t *c = encode(w, ctx->valuestring, strlen(ctx->valuestring), &nc);
        for (int k = 0; k < 4; k++) {
            const cJSON *end = cJSON_GetArrayItem(ends, k);
            if (!cJSON_IsString(end)) {
                snprintf(err, errlen, "%s line %d (example %d): ending %d is not a string", path, lines[e], e + 1, k + 1);
                rc = -1;
                break;
            }
            size_t el = strlen(end->valuestring);
            char *spaced = td_xmalloc(el + 2); /* llm.c: " " + ending */
            spaced[0] = ' ';
            memcpy(spaced + 1, end->valuestring, el + 1);
            int ne;
            int32_t *t = encode(w, spaced, el + 1, &ne);
            first[k] = fill_pair(ids + (size_t)k * S, tg + (size_t)k * S, S, c, nc, t, ne);
            cnt[k] = ne;
            free(spaced), free(t);
        }
        free(c);
        if (rc) break;
        ev_forward(m, ps, ids, tg, 4, loss, NULL);
        int best = 0, best_norm = 0;
        double sum[4], avg[4];
        for (int k = 0; k < 4; k++) {
            sum[k] = 0;
            int counted = 0;
            for (int i = 0; i < cnt[k]; i++)
                if (first[k] + i >= 0) sum[k] += loss[(size_t)k * S + first[k] + i], counted++;
            avg[k] = counted ? sum[k] / counted : INFINITY;
            if (sum[k] < sum[best]) best = k;
            if (avg[k] < avg[best_norm]) best_norm = k;
        }
        out->correct += best == label->valueint;
        out->correct_norm += best_norm == label->valueint;
        out->n++;
    }
    tok_worker_free(w);
    for (int i = 0; i < n; i++) cJSON_Delete(rows[i]);
    free(rows), free(lines), free(ids), free(tg), free(loss);
    if (rc == 0 && out->n) {
        out->acc = (double)out->correct / (double)out->n;
        out->acc_norm = (double)out->correct_norm / (double)out->n;
    }
    return rc;
}

/* One side of a LOGLIKELIHOOD item: a list of token ids (checked against the vocabulary) into
 * *ids (*n), or NULL when j is a text; -1 with err when neither. */
static int item_ids(const cJSON *j, const char *key, int vocab, int32_t **ids, int *n, const char *where, char *err,
                    size_t errlen)
{
    *ids = NULL, *n = 0;
    if (cJSON_IsString(j)) return 0;
    if (!cJSON_IsArray(j)) return snprintf(err, errlen, "%s: \"%s\" must be a text or a list of token ids", where, key), -1;
    int k = cJSON_GetArraySize(j), i = 0;
    *ids = td_xmalloc((size_t)(k + 1) * sizeof(int32_t));
    for (const cJSON *e = j->child; e; e = e->next, i++) {
        double v = cJSON_IsNumber(e) ? e->valuedouble : -1;
        if (v < 0 || v >= vocab || v != (double)(int64_t)v) {
            snprintf(err, errlen, "%s: \"%s\" token %d is not a token id (an integer from 0 to %d)", where, key, i + 1,
                     vocab - 1);
            free(*ids), *ids = NULL;
            return -1;
        }
        (*ids)[i] = (int32_t)v;
    }
    *n = k;
    return 0;
}

/* A LOGLIKELIHOOD item's context and continuation as ids (lm-evaluation-harness's _encode_pair for
 * texts); 0, or -1 with err. */
static int item_pair(const cJSON *row, tok_worker *w, int vocab, int eod, int32_t **ctx, int *nc, int32_t **cont,
                     int *nt, const char *where, char *err, size_t errlen)
{
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(row, "context");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(row, "continuation");
    if (!c || !t) return snprintf(err, errlen, "%s: needs \"context\" and \"continuation\"", where), -1;
    if (item_ids(c, "context", vocab, ctx, nc, where, err, errlen)) return -1;
    if (item_ids(t, "continuation", vocab, cont, nt, where, err, errlen)) return free(*ctx), -1;
    if (!*ctx && !*cont) { /* both texts */
        const char *cs = c->valuestring, *ts = t->valuestring;
        size_t cl = strlen(cs), tl = strlen(ts), keep = cl;
        while (keep > 0 && strchr(" \t\n\r\v\f", cs[keep - 1])) keep--; /* trailing spaces go to the continuation */
        if (keep == 0) { /* no context: the end-of-document token is, unless the continuation starts with it */
            char *all = td_xmalloc(cl + tl + 1);
            memcpy(all, cs, cl), memcpy(all + cl, ts, tl + 1);
            int32_t *whole = encode(w, all, cl + tl, nt);
            free(all);
            int lead = *nt > 0 && whole[0] == eod;
            *ctx = td_xmalloc(sizeof(int32_t)), (*ctx)[0] = eod, *nc = 1;
            *nt -= lead;
            *cont = td_xmalloc((size_t)(*nt + 1) * sizeof(int32_t));
            memcpy(*cont, whole + lead, (size_t)*nt * sizeof(int32_t));
            free(whole);
        } else {
            char *all = td_xmalloc(cl + tl + 1);
            memcpy(all, cs, cl), memcpy(all + cl, ts, tl + 1);
            int nw;
            int32_t *whole = encode(w, all, cl + tl, &nw);
            free(all);
            *ctx = encode(w, cs, keep, nc);
            *nt = nw > *nc ? nw - *nc : 0;
            *cont = td_xmalloc((size_t)(*nt + 1) * sizeof(int32_t));
            memcpy(*cont, whole + *nc, (size_t)*nt * sizeof(int32_t));
            free(whole);
        }
    } else if (!*ctx || !*cont) {
        free(*ctx), free(*cont);
        return snprintf(err, errlen, "%s: \"context\" and \"continuation\" are both texts or both lists of token ids",
                        where), -1;
    }
    if (*nc < 1 || *nt < 1) {
        free(*ctx), free(*cont);
        return snprintf(err, errlen, "%s: the %s holds no token", where, *nc < 1 ? "context" : "continuation"), -1;
    }
    return 0;
}

int ev_loglikelihood(gpt_model *m, const ps_state *ps, const tok_tokenizer *tok, const char *path, ev_ll_item **items,
                     int *n, char *err, size_t errlen)
{
    int *lines = NULL;
    cJSON **rows = read_jsonl(path, n, &lines, err, errlen);
    if (!rows) return -1;
    const int S = m->cfg.seq, B = m->mbs;
    int eod = tok_eod_id(tok), rc = 0;
    tok_worker *w = tok_worker_new(tok);
    int32_t *ids = td_xmalloc((size_t)B * S * sizeof(int32_t)), *tg = td_xmalloc((size_t)B * S * sizeof(int32_t));
    float *loss = td_xmalloc((size_t)B * S * sizeof(float));
    uint8_t *ok = td_xmalloc((size_t)B * S);
    int *first = td_xmalloc((size_t)B * sizeof(int)), *count = td_xmalloc((size_t)B * sizeof(int));
    *items = td_xcalloc((size_t)*n, sizeof **items);
    for (int e0 = 0; e0 < *n && rc == 0; e0 += B) {
        int rows_in = *n - e0 < B ? *n - e0 : B;
        for (int r = 0; r < rows_in && rc == 0; r++) {
            char where[600];
            snprintf(where, sizeof where, "%s line %d (item %d)", path, lines[e0 + r], e0 + r + 1);
            int32_t *ctx, *cont;
            int nc, nt;
            if (item_pair(rows[e0 + r], w, m->cfg.vocab, eod, &ctx, &nc, &cont, &nt, where, err, errlen)) {
                rc = -1;
                break;
            }
            first[r] = fill_pair(ids + (size_t)r * S, tg + (size_t)r * S, S, ctx, nc, cont, nt);
            count[r] = nt;
            free(ctx), free(cont);
        }
        if (rc) break;
        ev_forward(m, ps, ids, tg, rows_in, loss, ok);
        for (int r = 0; r < rows_in; r++) {
            ev_ll_item *it = &(*items)[e0 + r];
            it->is_greedy = 1;
            for (int i = 0; i < count[r]; i++) {
                if (first[r] + i < 0) continue; /* cut off with the front of a long item */
                it->loglikelihood -= loss[(size_t)r * S + first[r] + i];
                it->is_greedy &= ok[(size_t)r * S + first[r] + i];
                it->tokens++;
            }
        }
    }
    tok_worker_free(w);
    for (int i = 0; i < *n; i++) cJSON_Delete(rows[i]);
    free(rows), free(lines), free(ids), free(tg), free(loss), free(ok), free(first), free(count);
    if (rc) free(*items), *items = NULL;
    return rc;
}
