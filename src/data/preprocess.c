/* Preprocessing: see include/data/trident/preprocess.h and docs/preprocess.md. This file runs it
 * (batches, workers, the writer); the inputs are read by prep_input.c and each JSON line is
 * parsed by prep_json.c.
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
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "prep_impl.h"
#include "trident/check.h"
#include "trident/indexed.h"
#include "trident/sentence.h"
#include "trident/timer.h"

#define PP_DEFAULT_BATCH (256u << 10)
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

/* A name of a plain text file: .txt, possibly compressed (.txt.gz, .txt.zst). */
static int ends_with_text(const char *file)
{
    static const char *const ext[] = {".txt", ".txt.gz", ".txt.zst"};
    size_t n = strlen(file);
    for (size_t i = 0; i < sizeof ext / sizeof ext[0]; i++) {
        size_t k = strlen(ext[i]);
        if (n >= k && strcasecmp(file + n - k, ext[i]) == 0) return 1;
    }
    return 0;
}

/* A bad line that says the file is plain text rather than JSON lines: it does not start with '{',
 * and it is the file's first or the file is named .txt. */
static int looks_like_text(const char *file, int64_t line, const char *p, size_t n)
{
    size_t i = 0;
    while (i < n && (p[i] == ' ' || p[i] == '\t' || p[i] == '\r')) i++;
    if (i + 3 <= n && memcmp(p + i, "\xef\xbb\xbf", 3) == 0) i += 3; /* a byte-order mark */
    return (i == n || p[i] != '{') && (line == 1 || ends_with_text(file));
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
                if (looks_like_text(file, line, p, n))
                    snprintf(b->msg, sizeof b->msg, "%s:%lld: %s; the file does not look like JSON lines (%s): to "
                             "read it as plain text, one document a file, pass --input-format text", file,
                             (long long)line, why, line == 1 ? "its first line is not a JSON object" :
                             "its name ends in .txt and the line is not a JSON object");
                else
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
static int read_text_file(pp_run_state *r, prep_src *s, int file)
{
    pp_batch *b = acquire(r);
    if (!b) return -1;
    b->file = file;
    b->first_line = 1;
    for (;;) {
        reserve_text(b, 1u << 20);
        ssize_t n = prep_src_read(s, b->text + b->len, b->cap - b->len, r->err, r->errlen);
        if (n < 0) return -1;
        if (n == 0) break;
        b->len += (size_t)n;
    }
    return publish(r, b);
}

/* JSON lines: batches of about batch_bytes of whole lines; a line never spans two batches. */
static int read_json_file(pp_run_state *r, prep_src *s, int file, prep_str *carry)
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
            ssize_t n = prep_src_read(s, b->text + b->len, want, r->err, r->errlen);
            if (n < 0) return -1;
            if (n == 0) eof = 1;
            b->len += (size_t)n;
        }
        if (last_nl) { /* the partial line after it waits for the next batch */
            size_t keep = (size_t)(b->text + b->len - (last_nl + 1));
            prep_str_put(carry, last_nl + 1, keep);
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
        prep_src s;
        if (prep_src_open(&s, r->c->inputs[f], r->err, r->errlen) != 0) {
            rc = -1;
            break;
        }
        rc = r->c->text_format ? read_text_file(r, &s, f) : read_json_file(r, &s, f, &carry);
        prep_src_close(&s);
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
