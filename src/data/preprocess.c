/* Preprocessing: see include/trident/preprocess.h and docs/preprocess.md.
 *
 * The main thread reads the inputs and cuts them into batches of whole lines (or one whole file
 * in text format); worker threads, one tokenizer worker each, parse and tokenize batches; the main
 * thread writes finished batches strictly in the order it read them, so the output does not
 * depend on --workers. Batches live in a ring of slots: FREE -> READY (filled) -> BUSY (a worker
 * has it) -> DONE (tokenized) -> written -> FREE. */
#include "trident/preprocess.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include "trident/check.h"
#include "trident/indexed.h"
#include "trident/sentence.h"
#include "trident/timer.h"

#define PP_DEFAULT_BATCH (256u << 10)
#define PP_MAX_DEPTH 512 /* JSON nesting; Python's json gives up near 1000 */
#define PP_WARN_TOTAL 10 /* bad lines printed (docs/preprocess.md); the summary counts them all */
#define PP_WARN_PER_BATCH PP_WARN_TOTAL /* a batch may hold all of the first ten */

char *prep_dataset_prefix(const char *output_prefix, const char *key, int split_sentences)
{
    const char *level = split_sentences ? "sentence" : "document";
    size_t n = strlen(output_prefix) + strlen(key) + strlen(level) + 3;
    char *p = td_xmalloc(n);
    snprintf(p, n, "%s_%s_%s", output_prefix, key, level);
    return p;
}

/* ---------------------------------------------------------------------------------------------
 * Byte strings
 * ------------------------------------------------------------------------------------------- */

static void str_reserve(prep_str *s, size_t extra)
{
    if (s->cap - s->n >= extra) return;
    size_t cap = s->cap ? s->cap : 256;
    while (cap - s->n < extra) cap *= 2;
    s->s = td_xrealloc(s->s, cap);
    s->cap = cap;
}

static void str_put(prep_str *s, const char *p, size_t n)
{
    if (!n) return;
    str_reserve(s, n);
    memcpy(s->s + s->n, p, n);
    s->n += n;
}

void prep_str_free(prep_str *s)
{
    free(s->s);
    s->s = NULL;
    s->n = s->cap = 0;
}

/* ---------------------------------------------------------------------------------------------
 * JSON: a validating parser for one line that keeps only the spans of the wanted values
 * ------------------------------------------------------------------------------------------- */

typedef struct {
    const char *p, *start, *end;
    char *err;
    size_t errlen;
} jp;

enum { J_FAIL = -1, J_STRING, J_NUMBER, J_OBJECT, J_ARRAY, J_TRUE, J_FALSE, J_NULL };

static const char *jtype_name(int t)
{
    switch (t) {
    case J_STRING: return "a string";
    case J_NUMBER: return "a number";
    case J_OBJECT: return "an object";
    case J_ARRAY: return "an array";
    case J_TRUE:
    case J_FALSE: return "a boolean";
    default: return "null";
    }
}

static int jfail(jp *j, const char *what)
{
    if (j->p >= j->end) td_seterr(j->err, j->errlen, "malformed JSON: %s, but the line ends", what);
    else
        td_seterr(j->err, j->errlen, "malformed JSON at column %zu: %s, found '%c'", (size_t)(j->p - j->start) + 1, what,
               (unsigned char)*j->p >= 0x20 && (unsigned char)*j->p < 0x7f ? *j->p : '?');
    return J_FAIL;
}

static void jws(jp *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) j->p++;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Reads 4 hex digits at p (p + 4 <= end checked by the caller); -1 if not hex. */
static long hex4(const char *p)
{
    long v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(p[i]);
        if (h < 0) return -1;
        v = v * 16 + h;
    }
    return v;
}

/* Validates a string at j->p (on the opening quote); *body / *body_end get the raw bytes between
 * the quotes, *has_escape whether a backslash occurs. */
static int jstring(jp *j, const char **body, const char **body_end, int *has_escape)
{
    j->p++; /* opening quote */
    *body = j->p;
    *has_escape = 0;
    for (;;) {
        const char *q = j->p;
        while (q < j->end && *q != '"' && *q != '\\' && (unsigned char)*q >= 0x20) q++;
        j->p = q;
        if (q >= j->end) return jfail(j, "unterminated string");
        if (*q == '"') break;
        if ((unsigned char)*q < 0x20) return jfail(j, "raw control character in a string (escape it)");
        *has_escape = 1;
        if (q + 1 >= j->end) {
            j->p = q + 1;
            return jfail(j, "unterminated escape");
        }
        char e = q[1];
        if (e == 'u') {
            if (j->end - q < 6 || hex4(q + 2) < 0) {
                j->p = q + 1;
                return jfail(j, "\\u needs four hex digits");
            }
            j->p = q + 6;
        } else if (e && strchr("\"\\/bfnrt", e)) {
            j->p = q + 2;
        } else {
            j->p = q + 1;
            return jfail(j, "invalid escape");
        }
    }
    *body_end = j->p;
    j->p++; /* closing quote */
    return J_STRING;
}

static int jliteral(jp *j, const char *word, int type)
{
    size_t n = strlen(word);
    if ((size_t)(j->end - j->p) < n || memcmp(j->p, word, n) != 0) return jfail(j, "expected a JSON value");
    j->p += n;
    return type;
}

static int jdigits(jp *j)
{
    const char *s = j->p;
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') j->p++;
    return j->p > s;
}

/* Python's number grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?, plus -Infinity. */
static int jnumber(jp *j)
{
    if (*j->p == '-') {
        j->p++;
        if (j->p < j->end && *j->p == 'I') return jliteral(j, "Infinity", J_NUMBER);
    }
    if (j->p < j->end && *j->p == '0') j->p++;
    else if (!jdigits(j)) return jfail(j, "expected a digit");
    if (j->p < j->end && *j->p == '.') {
        j->p++;
        if (!jdigits(j)) return jfail(j, "expected a digit after '.'");
    }
    if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
        j->p++;
        if (j->p < j->end && (*j->p == '+' || *j->p == '-')) j->p++;
        if (!jdigits(j)) return jfail(j, "expected an exponent");
    }
    return J_NUMBER;
}

static int jvalue(jp *j, int depth);

static int jcontainer(jp *j, int depth, char close)
{
    if (depth >= PP_MAX_DEPTH) return jfail(j, "nested too deeply");
    j->p++;
    jws(j);
    if (j->p < j->end && *j->p == close) {
        j->p++;
        return close == '}' ? J_OBJECT : J_ARRAY;
    }
    for (;;) {
        if (close == '}') {
            jws(j);
            if (j->p >= j->end || *j->p != '"') return jfail(j, "expected a string key");
            const char *b, *e;
            int esc;
            if (jstring(j, &b, &e, &esc) == J_FAIL) return J_FAIL;
            jws(j);
            if (j->p >= j->end || *j->p != ':') return jfail(j, "expected ':'");
            j->p++;
        }
        if (jvalue(j, depth + 1) == J_FAIL) return J_FAIL;
        jws(j);
        if (j->p < j->end && *j->p == ',') {
            j->p++;
            continue;
        }
        if (j->p < j->end && *j->p == close) {
            j->p++;
            return close == '}' ? J_OBJECT : J_ARRAY;
        }
        return jfail(j, close == '}' ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

/* Validates one value (after optional whitespace); returns its type. */
static int jvalue(jp *j, int depth)
{
    jws(j);
    if (j->p >= j->end) return jfail(j, "expected a JSON value");
    const char *b, *e;
    int esc;
    switch (*j->p) {
    case '"': return jstring(j, &b, &e, &esc);
    case '{': return jcontainer(j, depth, '}');
    case '[': return jcontainer(j, depth, ']');
    case 't': return jliteral(j, "true", J_TRUE);
    case 'f': return jliteral(j, "false", J_FALSE);
    case 'n': return jliteral(j, "null", J_NULL);
    case 'N': return jliteral(j, "NaN", J_NUMBER);
    case 'I': return jliteral(j, "Infinity", J_NUMBER);
    default:
        if (*j->p == '-' || (*j->p >= '0' && *j->p <= '9')) return jnumber(j);
        return jfail(j, "expected a JSON value");
    }
}

static void put_utf8(prep_str *o, unsigned long c)
{
    char b[4];
    size_t n;
    if (c < 0x80) {
        b[0] = (char)c;
        n = 1;
    } else if (c < 0x800) {
        b[0] = (char)(0xc0 | (c >> 6));
        b[1] = (char)(0x80 | (c & 0x3f));
        n = 2;
    } else if (c < 0x10000) {
        b[0] = (char)(0xe0 | (c >> 12));
        b[1] = (char)(0x80 | ((c >> 6) & 0x3f));
        b[2] = (char)(0x80 | (c & 0x3f));
        n = 3;
    } else {
        b[0] = (char)(0xf0 | (c >> 18));
        b[1] = (char)(0x80 | ((c >> 12) & 0x3f));
        b[2] = (char)(0x80 | ((c >> 6) & 0x3f));
        b[3] = (char)(0x80 | (c & 0x3f));
        n = 4;
    }
    str_put(o, b, n);
}

/* Decodes the (validated) string body [p, end) into o. -1 on a lone surrogate, which Python's
 * json accepts but GPT-2's tokenizer cannot encode. */
static int junescape(const char *p, const char *end, prep_str *o, char *err, size_t errlen)
{
    o->n = 0;
    str_reserve(o, (size_t)(end - p) + 1);
    while (p < end) {
        const char *q = memchr(p, '\\', (size_t)(end - p));
        if (!q) q = end;
        str_put(o, p, (size_t)(q - p));
        p = q;
        if (p >= end) break;
        char e = p[1];
        p += 2;
        switch (e) {
        case 'b': str_put(o, "\b", 1); break;
        case 'f': str_put(o, "\f", 1); break;
        case 'n': str_put(o, "\n", 1); break;
        case 'r': str_put(o, "\r", 1); break;
        case 't': str_put(o, "\t", 1); break;
        case 'u': {
            unsigned long c = (unsigned long)hex4(p);
            p += 4;
            if (c >= 0xd800 && c <= 0xdbff && end - p >= 6 && p[0] == '\\' && p[1] == 'u') {
                long lo = hex4(p + 2);
                if (lo >= 0xdc00 && lo <= 0xdfff) {
                    c = 0x10000 + ((c - 0xd800) << 10) + ((unsigned long)lo - 0xdc00);
                    p += 6;
                }
            }
            if (c >= 0xd800 && c <= 0xdfff) {
                td_seterr(err, errlen, "lone UTF-16 surrogate \\u%04lx in a string (not valid text)", c);
                return -1;
            }
            put_utf8(o, c);
            break;
        }
        default: str_put(o, &e, 1); break; /* " \ / */
        }
    }
    return 0;
}

/* Is the raw key [b, e) (escapes decoded when esc) equal to key? */
static int key_equals(const char *b, const char *e, int esc, const char *key, prep_str *tmp)
{
    if (esc) {
        if (junescape(b, e, tmp, NULL, 0) != 0) return 0;
        b = tmp->s;
        e = tmp->s + tmp->n;
    }
    size_t n = strlen(key);
    return (size_t)(e - b) == n && memcmp(b, key, n) == 0;
}

int prep_json_extract(const char *line, size_t len, const char *const *keys, int n_keys, prep_str *out, char *err,
                    size_t errlen)
{
    enum { MAXK = 64 };
    const char *vb[MAXK], *ve[MAXK];
    int vt[MAXK];
    if (n_keys > MAXK) {
        td_seterr(err, errlen, "too many JSON keys (%d, at most %d)", n_keys, MAXK);
        return -1;
    }
    for (int k = 0; k < n_keys; k++) vt[k] = J_FAIL;
    jp j = {line, line, line + len, err, errlen};
    jws(&j);
    if (j.p >= j.end || *j.p != '{') {
        int t = jvalue(&j, 0);
        if (t == J_FAIL) return -1;
        td_seterr(err, errlen, "the line is %s, not a JSON object", jtype_name(t));
        return -1;
    }
    /* top-level object by hand, remembering the wanted values */
    prep_str tmp = {0};
    j.p++;
    jws(&j);
    int rc = -1;
    if (j.p < j.end && *j.p == '}') {
        j.p++;
    } else {
        for (;;) {
            jws(&j);
            if (j.p >= j.end || *j.p != '"') {
                jfail(&j, "expected a string key");
                goto done;
            }
            const char *kb, *ke;
            int kesc;
            if (jstring(&j, &kb, &ke, &kesc) == J_FAIL) goto done;
            jws(&j);
            if (j.p >= j.end || *j.p != ':') {
                jfail(&j, "expected ':'");
                goto done;
            }
            j.p++;
            jws(&j);
            const char *v = j.p;
            int t = jvalue(&j, 1);
            if (t == J_FAIL) goto done;
            for (int k = 0; k < n_keys; k++)
                if (key_equals(kb, ke, kesc, keys[k], &tmp)) { /* a later duplicate wins, as in Python */
                    vt[k] = t;
                    vb[k] = v;
                    ve[k] = j.p;
                }
            jws(&j);
            if (j.p < j.end && *j.p == ',') {
                j.p++;
                continue;
            }
            if (j.p < j.end && *j.p == '}') {
                j.p++;
                break;
            }
            jfail(&j, "expected ',' or '}'");
            goto done;
        }
    }
    jws(&j);
    if (j.p < j.end) {
        jfail(&j, "extra data after the JSON object");
        goto done;
    }
    for (int k = 0; k < n_keys; k++) {
        if (vt[k] == J_FAIL) {
            td_seterr(err, errlen, "no key \"%s\" in the JSON object", keys[k]);
            goto done;
        }
        if (vt[k] != J_STRING) {
            td_seterr(err, errlen, "the value of \"%s\" is %s, not a string", keys[k], jtype_name(vt[k]));
            goto done;
        }
        /* re-scan the string to find its body, then decode it */
        jp s = {vb[k], line, ve[k], err, errlen};
        const char *b, *e;
        int esc;
        jstring(&s, &b, &e, &esc);
        if (!esc) {
            out[k].n = 0;
            str_put(&out[k], b, (size_t)(e - b));
        } else if (junescape(b, e, &out[k], err, errlen) != 0) {
            goto done;
        }
    }
    rc = 0;
done:
    prep_str_free(&tmp);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Inputs: plain, gzip (zlib) or zstd (streaming), by file suffix
 * ------------------------------------------------------------------------------------------- */

enum { SRC_PLAIN, SRC_GZ, SRC_ZST };

typedef struct {
    const char *path;
    int kind;
    int fd;
    gzFile gz;
    ZSTD_DCtx *zd;
    unsigned char *zin;
    size_t zin_cap, zin_len, zin_pos, zlast;
    int zeof;
} pp_src;

static int has_suffix(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

static int src_open(pp_src *s, const char *path, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    s->path = path;
    s->fd = -1;
    s->kind = has_suffix(path, ".gz") ? SRC_GZ : has_suffix(path, ".zst") ? SRC_ZST : SRC_PLAIN;
    s->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (s->fd < 0) {
        td_seterr(err, errlen, "cannot open %s: %s (check the --input path)", path, td_strerror(errno));
        return -1;
    }
    if (s->kind == SRC_GZ) {
        s->gz = gzdopen(s->fd, "rb");
        if (!s->gz) {
            td_seterr(err, errlen, "cannot read %s as gzip: out of memory", path);
            close(s->fd);
            s->fd = -1;
            return -1;
        }
        s->fd = -1; /* owned by gz now */
        gzbuffer(s->gz, 1u << 17);
    } else if (s->kind == SRC_ZST) {
        s->zd = ZSTD_createDCtx();
        TD_CHECK(s->zd != NULL, "free some memory", "ZSTD_createDCtx returned NULL");
        s->zin_cap = ZSTD_DStreamInSize();
        s->zin = td_xmalloc(s->zin_cap);
    }
    return 0;
}

static void src_close(pp_src *s)
{
    if (s->gz) gzclose(s->gz);
    if (s->fd >= 0) close(s->fd);
    if (s->zd) ZSTD_freeDCtx(s->zd);
    free(s->zin);
    memset(s, 0, sizeof *s);
    s->fd = -1;
}

static ssize_t read_fd(int fd, void *buf, size_t cap)
{
    for (;;) {
        ssize_t n = read(fd, buf, cap);
        if (n >= 0 || errno != EINTR) return n;
    }
}

/* Reads up to cap decompressed bytes: >0 bytes, 0 at the end, -1 with err. */
static ssize_t src_read(pp_src *s, void *buf, size_t cap, char *err, size_t errlen)
{
    if (cap > (1u << 30)) cap = 1u << 30;
    if (s->kind == SRC_PLAIN) {
        ssize_t n = read_fd(s->fd, buf, cap);
        if (n < 0) td_seterr(err, errlen, "cannot read %s: %s", s->path, td_strerror(errno));
        return n;
    }
    if (s->kind == SRC_GZ) {
        int n = gzread(s->gz, buf, (unsigned)cap);
        int code = Z_OK;
        const char *msg = gzerror(s->gz, &code);
        if (n < 0 || (n == 0 && code != Z_OK)) {
            td_seterr(err, errlen, "cannot decompress %s: %s (the gzip file is truncated or corrupt; recreate it)",
                   s->path, code == Z_ERRNO ? td_strerror(errno) : msg);
            return -1;
        }
        return n;
    }
    for (;;) {
        if (s->zin_pos == s->zin_len && !s->zeof) {
            ssize_t n = read_fd(s->fd, s->zin, s->zin_cap);
            if (n < 0) {
                td_seterr(err, errlen, "cannot read %s: %s", s->path, td_strerror(errno));
                return -1;
            }
            s->zin_len = (size_t)n;
            s->zin_pos = 0;
            if (n == 0) s->zeof = 1;
        }
        ZSTD_inBuffer in = {s->zin, s->zin_len, s->zin_pos};
        ZSTD_outBuffer out = {buf, cap, 0};
        size_t r = ZSTD_decompressStream(s->zd, &out, &in);
        if (ZSTD_isError(r)) {
            td_seterr(err, errlen, "cannot decompress %s: %s (the zstd file is corrupt; recreate it)", s->path,
                   ZSTD_getErrorName(r));
            return -1;
        }
        if (in.pos != s->zin_pos || out.pos > 0) s->zlast = r; /* 0: a frame ended and is flushed */
        s->zin_pos = in.pos;
        if (out.pos > 0) return (ssize_t)out.pos;
        if (s->zeof && s->zin_pos == s->zin_len) {
            if (s->zlast != 0) {
                td_seterr(err, errlen, "cannot decompress %s: the zstd stream ends inside a frame (the file is "
                       "truncated; recreate it)", s->path);
                return -1;
            }
            return 0;
        }
    }
}

/* ---------------------------------------------------------------------------------------------
 * Batches and workers
 * ------------------------------------------------------------------------------------------- */

enum { SLOT_FREE, SLOT_READY, SLOT_BUSY, SLOT_DONE };

typedef struct {
    bpe_ids toks;       /* tokens of this batch's documents for one key, back to back */
    int64_t *lens;      /* (nseqs) tokens per sequence written */
    size_t nseqs, cap;
    int64_t *doc_seqs;  /* (ndocs) sequences per document written: 1, or its sentences */
    size_t ndocs, doc_cap;
} pp_keyout;

typedef struct {
    int state;
    int64_t seq;
    int file;
    int64_t first_line; /* 1-based number of the batch's first line */
    char *text;
    size_t len, cap;
    pp_keyout *out; /* (n_keys) */
    int64_t docs, empty, bad, blank;
    int failed;    /* a bad line and no --skip-bad-lines: msg says which */
    char msg[1024]; /* "FILE:LINE: reason" */
    int nwarn;
    char warn[PP_WARN_PER_BATCH][1024];
} pp_batch;

typedef struct {
    const prep_config *c;
    const tok_tokenizer *tok;
    int eod;
    pp_batch *slots;
    int nslots;
    pthread_mutex_t mu;
    pthread_cond_t work_cv, done_cv;
    int64_t next_claim;
    int stop;
} pp_shared;

typedef struct {
    pp_shared *sh;
    tok_worker *bw;
    prep_str *vals; /* (n_keys) decoded values */
    sent_span *spans; /* (span_cap) sentences of the current value, with split_sentences */
    size_t span_cap;
    pthread_t thread;
} pp_worker;

static void batch_reset(pp_batch *b, int n_keys)
{
    b->len = 0;
    b->docs = b->empty = b->bad = b->blank = 0;
    b->failed = 0;
    b->msg[0] = '\0';
    b->nwarn = 0;
    for (int k = 0; k < n_keys; k++) {
        b->out[k].toks.n = 0;
        b->out[k].nseqs = b->out[k].ndocs = 0;
    }
}

static void push_len(int64_t **v, size_t *n, size_t *cap, int64_t x)
{
    if (*n == *cap) {
        *cap = *cap ? 2 * *cap : 256;
        *v = td_xrealloc(*v, *cap * sizeof **v);
    }
    (*v)[(*n)++] = x;
}

/* Appends the tokens of text to key k's output, as one sequence or (split_sentences) one per
 * sentence, each sentence tokenized alone as Megatron does; sentences without tokens are dropped,
 * and a document left without any is counted as empty. */
static void add_document(pp_worker *w, pp_batch *b, int k, const char *text, size_t n)
{
    const prep_config *c = w->sh->c;
    pp_keyout *o = &b->out[k];
    sent_span whole = {0, n}, *sp = &whole;
    size_t nsp = n > 0;
    if (c->split_sentences) {
        nsp = sent_split(text, n, w->spans, w->span_cap);
        if (nsp > w->span_cap) {
            w->span_cap = 2 * nsp;
            w->spans = td_xrealloc(w->spans, w->span_cap * sizeof *w->spans);
            sent_split(text, n, w->spans, w->span_cap);
        }
        sp = w->spans;
    }
    size_t first = o->nseqs;
    for (size_t i = 0; i < nsp; i++) {
        size_t before = o->toks.n;
        tok_encode(w->bw, text + sp[i].start, sp[i].end - sp[i].start, &o->toks);
        if (o->toks.n > before) push_len(&o->lens, &o->nseqs, &o->cap, (int64_t)(o->toks.n - before));
    }
    if (o->nseqs == first) { /* Megatron: no tokens, no document (and no EOD) */
        b->empty++;
        return;
    }
    if (c->append_eod) { /* on the last sentence only */
        bpe_ids_push(&o->toks, w->sh->eod);
        o->lens[o->nseqs - 1]++;
    }
    push_len(&o->doc_seqs, &o->ndocs, &o->doc_cap, (int64_t)(o->nseqs - first));
}

static int is_blank(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != ' ' && p[i] != '\t' && p[i] != '\r') return 0;
    return 1;
}

static void process_batch(pp_worker *w, pp_batch *b)
{
    const prep_config *c = w->sh->c;
    if (c->text_format) {
        b->docs = 1;
        add_document(w, b, 0, b->text, b->len);
        return;
    }
    const char *p = b->text, *end = b->text + b->len;
    char why[400];
    for (int64_t line = b->first_line; p < end; line++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *e = nl ? nl : end;
        size_t n = (size_t)(e - p);
        if (is_blank(p, n)) {
            b->blank++;
        } else if (prep_json_extract(p, n, c->keys, c->n_keys, w->vals, why, sizeof why) != 0) {
            const char *file = c->inputs[b->file];
            if (!c->skip_bad_lines) {
                snprintf(b->msg, sizeof b->msg, "%s:%lld: %s; fix the line or pass --skip-bad-lines", file,
                         (long long)line, why);
                b->failed = 1;
                return;
            }
            if (b->nwarn < PP_WARN_PER_BATCH)
                snprintf(b->warn[b->nwarn++], sizeof b->warn[0], "%s:%lld: %s", file, (long long)line, why);
            b->bad++;
        } else {
            b->docs++;
            for (int k = 0; k < c->n_keys; k++) add_document(w, b, k, w->vals[k].s, w->vals[k].n);
        }
        p = e + 1;
    }
}

static void *worker_main(void *arg)
{
    pp_worker *w = arg;
    pp_shared *sh = w->sh;
    pthread_mutex_lock(&sh->mu);
    for (;;) {
        pp_batch *b = &sh->slots[sh->next_claim % sh->nslots];
        while (!sh->stop && !(b->state == SLOT_READY && b->seq == sh->next_claim)) {
            pthread_cond_wait(&sh->work_cv, &sh->mu);
            b = &sh->slots[sh->next_claim % sh->nslots];
        }
        if (sh->stop) break;
        b->state = SLOT_BUSY;
        sh->next_claim++;
        pthread_mutex_unlock(&sh->mu);
        process_batch(w, b);
        pthread_mutex_lock(&sh->mu);
        b->state = SLOT_DONE;
        pthread_cond_broadcast(&sh->done_cv);
    }
    pthread_mutex_unlock(&sh->mu);
    return NULL;
}

/* ---------------------------------------------------------------------------------------------
 * The run: read and cut batches, write finished ones in order
 * ------------------------------------------------------------------------------------------- */

typedef struct {
    const prep_config *c;
    pp_shared sh;
    idx_writer **writers; /* (n_keys) */
    char **names;         /* (n_keys) dataset prefixes */
    int64_t next_fill, next_write;
    prep_stats st;
    int64_t next_log;
    int64_t warned;
    double t0;
    char *err;
    size_t errlen;
    int failed;
    int tty;              /* stderr is a terminal: progress every PP_PROGRESS_S seconds too */
    double last_progress;
    int64_t total_bytes;  /* the inputs' sizes when all are plain files (for an ETA), else 0 */
} pp_run_state;

enum { PP_PROGRESS_S = 5 };

static void progress(pp_run_state *r)
{
    double dt = td_now() - r->t0;
    if (dt <= 0) dt = 1e-9;
    double mbs = (double)r->st.bytes / 1e6 / dt;
    char eta[64] = "";
    if (r->total_bytes > r->st.bytes && r->st.bytes > 0)
        snprintf(eta, sizeof eta, ", %.0f%%, about %.0f s left", 100.0 * (double)r->st.bytes / (double)r->total_bytes,
                 (double)(r->total_bytes - r->st.bytes) / 1e6 / mbs);
    fprintf(stderr, "preprocess: %lld document%s (%.0f docs/s, %.2f MB/s%s)\n", (long long)r->st.documents,
            td_plural(r->st.documents), (double)r->st.documents / dt, mbs, eta);
    r->last_progress = td_now();
}

/* The inputs' total size when every input is an uncompressed regular file (bytes counted are
 * after decompression), else 0. */
static int64_t inputs_size(const prep_config *c)
{
    int64_t total = 0;
    for (int i = 0; i < c->n_inputs; i++) {
        struct stat st;
        size_t n = strlen(c->inputs[i]);
        if (strcmp(c->inputs[i], "-") == 0 || (n > 3 && strcmp(c->inputs[i] + n - 3, ".gz") == 0) ||
            (n > 4 && strcmp(c->inputs[i] + n - 4, ".zst") == 0) ||
            stat(c->inputs[i], &st) != 0 || !S_ISREG(st.st_mode))
            return 0;
        total += (int64_t)st.st_size;
    }
    return total;
}

/* Why nothing was written, as one line: the inputs and what their lines were. */
static void nothing_usable(pp_run_state *r)
{
    const prep_config *c = r->c;
    const prep_stats *s = &r->st;
    char names[512] = "";
    for (int i = 0, len = 0; i < c->n_inputs && len < (int)sizeof names - 1; i++)
        len += snprintf(names + len, sizeof names - (size_t)len, "%s%s", i ? ", " : "", c->inputs[i]);
    td_seterr(r->err, r->errlen, "preprocess: no usable document in %s: %lld document%s read, %lld empty (no tokens "
              "for %s), %lld bad line%s skipped, %lld blank line%s; nothing written. Check --input-format and "
              "--json-keys against the file", names, (long long)s->documents, td_plural(s->documents),
              (long long)s->empty, c->n_keys == 1 ? c->keys[0] : "the keys", (long long)s->bad_lines,
              td_plural(s->bad_lines), (long long)s->blank_lines, td_plural(s->blank_lines));
}

/* Writes the oldest batch once a worker has finished it. 0, or -1 with r->err set. */
static int consume_one(pp_run_state *r)
{
    pp_shared *sh = &r->sh;
    pp_batch *b = &sh->slots[r->next_write % sh->nslots];
    pthread_mutex_lock(&sh->mu);
    while (b->state != SLOT_DONE) pthread_cond_wait(&sh->done_cv, &sh->mu);
    pthread_mutex_unlock(&sh->mu);

    int rc = 0;
    if (b->failed) {
        td_seterr(r->err, r->errlen, "%s", b->msg);
        rc = -1;
    }
    for (int k = 0; k < r->c->n_keys && rc == 0; k++) {
        pp_keyout *o = &b->out[k];
        const int32_t *t = o->toks.ids;
        for (size_t i = 0, q = 0; i < o->ndocs && rc == 0; i++) {
            for (int64_t j = 0; j < o->doc_seqs[i] && rc == 0; j++, q++) {
                rc = idx_writer_add_sequence(r->writers[k], t, (size_t)o->lens[q], r->err, r->errlen);
                t += o->lens[q];
            }
            idx_writer_end_document(r->writers[k]);
        }
        r->st.tokens += (int64_t)o->toks.n;
        r->st.written += (int64_t)o->ndocs;
        if (r->c->split_sentences) r->st.sentences += (int64_t)o->nseqs;
    }
    if (rc == 0) {
        for (int i = 0; i < b->nwarn && !r->c->quiet; i++, r->warned++)
            if (r->warned < PP_WARN_TOTAL) fprintf(stderr, "warning: skipping bad line %s\n", b->warn[i]);
        r->st.documents += b->docs;
        r->st.empty += b->empty;
        r->st.bad_lines += b->bad;
        r->st.blank_lines += b->blank;
        r->st.bytes += (int64_t)b->len;
        if (r->c->log_every > 0 && !r->c->quiet && r->st.documents >= r->next_log) {
            progress(r);
            while (r->next_log <= r->st.documents) r->next_log += r->c->log_every;
        } else if (r->tty && !r->c->quiet && td_now() - r->last_progress >= PP_PROGRESS_S) {
            progress(r);
        }
    }
    pthread_mutex_lock(&sh->mu);
    b->state = SLOT_FREE;
    pthread_mutex_unlock(&sh->mu);
    r->next_write++;
    return rc;
}

/* Writes every finished batch at the head of the ring without waiting. */
static int consume_ready(pp_run_state *r)
{
    while (r->next_write < r->next_fill) {
        pp_batch *b = &r->sh.slots[r->next_write % r->sh.nslots];
        pthread_mutex_lock(&r->sh.mu);
        int done = b->state == SLOT_DONE;
        pthread_mutex_unlock(&r->sh.mu);
        if (!done) break;
        if (consume_one(r) != 0) return -1;
    }
    return 0;
}

/* A free slot for the next batch (writing older ones as needed); NULL on a write error. */
static pp_batch *acquire(pp_run_state *r)
{
    while (r->next_fill - r->next_write >= r->sh.nslots)
        if (consume_one(r) != 0) return NULL;
    pp_batch *b = &r->sh.slots[r->next_fill % r->sh.nslots];
    batch_reset(b, r->c->n_keys);
    return b;
}

static int publish(pp_run_state *r, pp_batch *b)
{
    pthread_mutex_lock(&r->sh.mu);
    b->seq = r->next_fill++;
    b->state = SLOT_READY;
    pthread_cond_broadcast(&r->sh.work_cv);
    pthread_mutex_unlock(&r->sh.mu);
    return consume_ready(r);
}

static void reserve_text(pp_batch *b, size_t extra)
{
    if (b->cap - b->len >= extra) return;
    size_t cap = b->cap ? b->cap : 1u << 16;
    while (cap - b->len < extra) cap *= 2;
    b->text = td_xrealloc(b->text, cap);
    b->cap = cap;
}

/* Text format: the whole file is one document. */
static int read_text_file(pp_run_state *r, pp_src *s, int file)
{
    pp_batch *b = acquire(r);
    if (!b) return -1;
    b->file = file;
    b->first_line = 1;
    for (;;) {
        reserve_text(b, 1u << 20);
        ssize_t n = src_read(s, b->text + b->len, b->cap - b->len, r->err, r->errlen);
        if (n < 0) return -1;
        if (n == 0) break;
        b->len += (size_t)n;
    }
    return publish(r, b);
}

/* JSON lines: batches of about batch_bytes of whole lines; a line never spans two batches. */
static int read_json_file(pp_run_state *r, pp_src *s, int file, prep_str *carry)
{
    size_t target = r->c->batch_bytes ? r->c->batch_bytes : PP_DEFAULT_BATCH;
    int64_t line = 1;
    int eof = 0;
    carry->n = 0;
    while (!eof || carry->n) {
        pp_batch *b = acquire(r);
        if (!b) return -1;
        b->file = file;
        b->first_line = line;
        reserve_text(b, carry->n + target);
        if (carry->n) memcpy(b->text, carry->s, carry->n);
        b->len = carry->n;
        carry->n = 0;
        size_t scanned = 0; /* bytes known to hold no '\n' */
        const char *last_nl = NULL;
        while (!eof) {
            if (b->len >= target) {
                /* enough text: stop at the last newline, if there is one */
                for (size_t i = b->len; i > scanned; i--)
                    if (b->text[i - 1] == '\n') {
                        last_nl = b->text + i - 1;
                        break;
                    }
                if (last_nl) break;
                scanned = b->len;
                reserve_text(b, b->len); /* a long line: double and read on */
            }
            reserve_text(b, 1);
            size_t want = b->cap - b->len;
            ssize_t n = src_read(s, b->text + b->len, want, r->err, r->errlen);
            if (n < 0) return -1;
            if (n == 0) eof = 1;
            b->len += (size_t)n;
        }
        if (last_nl) { /* the partial line after it waits for the next batch */
            size_t keep = (size_t)(b->text + b->len - (last_nl + 1));
            str_put(carry, last_nl + 1, keep);
            b->len -= keep;
        }
        for (const char *p = b->text, *e = b->text + b->len; (p = memchr(p, '\n', (size_t)(e - p))); p++) line++;
        if (b->len == 0) continue; /* an empty file: the slot stays free */
        if (publish(r, b) != 0) return -1;
    }
    return 0;
}

static int read_inputs(pp_run_state *r)
{
    prep_str carry = {0};
    int rc = 0;
    for (int f = 0; f < r->c->n_inputs && rc == 0; f++) {
        pp_src s;
        if (src_open(&s, r->c->inputs[f], r->err, r->errlen) != 0) {
            rc = -1;
            break;
        }
        rc = r->c->text_format ? read_text_file(r, &s, f) : read_json_file(r, &s, f, &carry);
        src_close(&s);
    }
    prep_str_free(&carry);
    while (rc == 0 && r->next_write < r->next_fill) rc = consume_one(r);
    return rc;
}

static void summary(pp_run_state *r)
{
    const prep_stats *s = &r->st;
    double mbs = s->seconds > 0 ? (double)s->bytes / 1e6 / s->seconds : 0;
    fprintf(stderr, "preprocess: %lld document%s, %.2f MB in %.2f s (%.2f MB/s, %d worker%s); wrote ",
            (long long)s->documents, td_plural(s->documents), (double)s->bytes / 1e6, s->seconds, mbs, r->c->workers,
            td_plural(r->c->workers));
    for (int k = 0; k < r->c->n_keys; k++) fprintf(stderr, "%s%s.{bin,idx}", k ? ", " : "", r->names[k]);
    fprintf(stderr, " (%lld document%s, ", (long long)s->written, td_plural(s->written));
    if (r->c->split_sentences) fprintf(stderr, "%lld sentence%s, ", (long long)s->sentences, td_plural(s->sentences));
    fprintf(stderr, "%lld token%s)", (long long)s->tokens, td_plural(s->tokens));
    if (s->empty) fprintf(stderr, "; skipped %lld empty document%s", (long long)s->empty, td_plural(s->empty));
    if (s->bad_lines)
        fprintf(stderr, "; skipped %lld bad line%s%s", (long long)s->bad_lines, td_plural(s->bad_lines),
                s->bad_lines > PP_WARN_TOTAL ? " (the first 10 are printed above)" : "");
    fputc('\n', stderr);
}

int prep_run(const prep_config *c, const tok_tokenizer *tok, prep_stats *stats, char *err, size_t errlen)
{
    if (c->n_inputs < 1 || c->n_keys < 1 || c->workers < 1 || !c->output_prefix || (c->text_format && c->n_keys != 1)) {
        td_seterr(err, errlen, "preprocess: needs at least one input, one key (exactly one in text format), one worker "
               "and an output prefix");
        return -1;
    }
    if (c->append_eod && tok_eod_id(tok) < 0) {
        td_seterr(err, errlen, "preprocess: --append-eod: the %s tokenizer names no end-of-document token (no EOS in "
                  "its post-processor, no <|end_of_text|>, <|endoftext|>, </s> or <eos> token)", tok_kind(tok));
        return -1;
    }
    pp_run_state r = {0};
    r.c = c;
    r.err = err;
    r.errlen = errlen;
    r.t0 = r.last_progress = td_now();
    r.next_log = c->log_every;
    r.tty = isatty(STDERR_FILENO);
    r.total_bytes = inputs_size(c);
    pp_shared *sh = &r.sh;
    sh->c = c;
    sh->tok = tok;
    sh->eod = tok_eod_id(tok);
    sh->nslots = 2 * c->workers + 2;
    sh->slots = td_xcalloc((size_t)sh->nslots, sizeof *sh->slots);
    for (int i = 0; i < sh->nslots; i++) sh->slots[i].out = td_xcalloc((size_t)c->n_keys, sizeof(pp_keyout));
    pthread_mutex_init(&sh->mu, NULL);
    pthread_cond_init(&sh->work_cv, NULL);
    pthread_cond_init(&sh->done_cv, NULL);

    int rc = 0;
    enum idx_dtype dt = idx_dtype_for_vocab(tok_vocab_size(tok));
    r.writers = td_xcalloc((size_t)c->n_keys, sizeof *r.writers);
    r.names = td_xcalloc((size_t)c->n_keys, sizeof *r.names);
    for (int k = 0; k < c->n_keys && rc == 0; k++) {
        r.names[k] = prep_dataset_prefix(c->output_prefix, c->keys[k], c->split_sentences);
        r.writers[k] = idx_writer_open(r.names[k], dt, err, errlen);
        if (!r.writers[k]) rc = -1;
    }

    pp_worker *ws = td_xcalloc((size_t)c->workers, sizeof *ws);
    int started = 0;
    if (rc == 0)
        for (; started < c->workers; started++) {
            pp_worker *w = &ws[started];
            w->sh = sh;
            w->bw = tok_worker_new(tok);
            w->vals = td_xcalloc((size_t)c->n_keys, sizeof *w->vals);
            int e = pthread_create(&w->thread, NULL, worker_main, w);
            if (e != 0) {
                td_seterr(err, errlen, "preprocess: cannot start worker thread %d: %s (lower --workers)", started,
                       td_strerror(e));
                tok_worker_free(w->bw);
                free(w->vals);
                rc = -1;
                break;
            }
        }

    if (rc == 0) rc = read_inputs(&r);

    pthread_mutex_lock(&sh->mu);
    sh->stop = 1;
    pthread_cond_broadcast(&sh->work_cv);
    pthread_mutex_unlock(&sh->mu);
    for (int i = 0; i < started; i++) {
        pthread_join(ws[i].thread, NULL);
        tok_worker_free(ws[i].bw);
        for (int k = 0; k < c->n_keys; k++) prep_str_free(&ws[i].vals[k]);
        free(ws[i].vals);
        free(ws[i].spans);
    }
    free(ws);

    if (rc == 0 && r.st.written == 0) {
        nothing_usable(&r);
        rc = -1;
    }
    for (int k = 0; k < c->n_keys; k++) {
        if (!r.writers[k]) continue;
        if (rc == 0) rc = idx_writer_finish(r.writers[k], err, errlen);
        else idx_writer_abort(r.writers[k]);
        r.writers[k] = NULL;
    }
    r.st.seconds = td_now() - r.t0;
    if (rc == 0 && !c->quiet) summary(&r);
    if (stats) *stats = r.st;

    for (int k = 0; k < c->n_keys; k++) free(r.names[k]);
    free(r.names);
    free(r.writers);
    for (int i = 0; i < sh->nslots; i++) {
        for (int k = 0; k < c->n_keys; k++) {
            bpe_ids_free(&sh->slots[i].out[k].toks);
            free(sh->slots[i].out[k].lens);
            free(sh->slots[i].out[k].doc_seqs);
        }
        free(sh->slots[i].out);
        free(sh->slots[i].text);
    }
    free(sh->slots);
    pthread_mutex_destroy(&sh->mu);
    pthread_cond_destroy(&sh->work_cv);
    pthread_cond_destroy(&sh->done_cv);
    return rc;
}
