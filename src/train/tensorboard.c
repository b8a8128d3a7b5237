/* TensorBoard event files: see include/train/trident/tensorboard.h. */
#include "trident/tensorboard.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "trident/check.h"

struct tb_writer {
    FILE *f;
    char *path;
};

uint32_t tb_crc32c(const void *data, size_t n)
{
    static uint32_t table[256];
    static int ready;
    if (!ready) {
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
            table[i] = c;
        }
        ready = 1;
    }
    const uint8_t *p = data;
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

/* ---- a protocol buffer, by hand ---- */
#define TB_MAX_TAG 256 /* bounds an event well inside a pbuf */
typedef struct {
    uint8_t b[512];
    size_t n;
} pbuf;

static void put_byte(pbuf *p, uint8_t v)
{
    if (p->n == sizeof p->b) td_fatal(1, "TensorBoard: an event exceeds %zu bytes (internal error)", sizeof p->b);
    p->b[p->n++] = v;
}
static void put_varint(pbuf *p, uint64_t v)
{
    for (; v >= 0x80; v >>= 7) put_byte(p, (uint8_t)(v | 0x80));
    put_byte(p, (uint8_t)v);
}
static void put_bytes(pbuf *p, const void *d, size_t n)
{
    for (size_t i = 0; i < n; i++) put_byte(p, ((const uint8_t *)d)[i]);
}
static void put_key(pbuf *p, int field, int wire) { put_varint(p, (uint64_t)field << 3 | (uint64_t)wire); }
static void put_fixed64(pbuf *p, int field, double v)
{
    put_key(p, field, 1);
    uint64_t u;
    memcpy(&u, &v, 8);
    for (int i = 0; i < 8; i++) put_byte(p, (uint8_t)(u >> (8 * i)));
}
static void put_fixed32(pbuf *p, int field, float v)
{
    put_key(p, field, 5);
    uint32_t u;
    memcpy(&u, &v, 4);
    for (int i = 0; i < 4; i++) put_byte(p, (uint8_t)(u >> (8 * i)));
}
static void put_len(pbuf *p, int field, const void *d, size_t n)
{
    put_key(p, field, 2);
    put_varint(p, n);
    put_bytes(p, d, n);
}

static double wall_time(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void put_le(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* One TFRecord holding the event, in one fwrite. */
static void write_record(tb_writer *w, const pbuf *ev)
{
    uint8_t rec[12 + sizeof ev->b + 4];
    put_le(rec, ev->n, 8);
    put_le(rec + 8, tb_mask_crc(tb_crc32c(rec, 8)), 4);
    memcpy(rec + 12, ev->b, ev->n);
    put_le(rec + 12 + ev->n, tb_mask_crc(tb_crc32c(ev->b, ev->n)), 4);
    size_t n = 12 + ev->n + 4;
    if (fwrite(rec, 1, n, w->f) != n)
        td_fatal(1, "cannot write the TensorBoard file %s: %s; check the disk", w->path, td_strerror(errno));
}

static void mkdirs(const char *dir)
{
    char *p = td_xstrdup(dir);
    for (char *s = p + 1; *s; s++)
        if (*s == '/') {
            *s = 0;
            mkdir(p, 0777);
            *s = '/';
        }
    if (mkdir(p, 0777) != 0 && errno != EEXIST)
        td_fatal(1, "--tensorboard-dir %s: cannot create it: %s", dir, td_strerror(errno));
    free(p);
}

tb_writer *tb_open(const char *dir)
{
    mkdirs(dir);
    char host[256] = "localhost";
    gethostname(host, sizeof host - 1);
    size_t n = strlen(dir) + strlen(host) + 96;
    tb_writer *w = td_xcalloc(1, sizeof *w);
    w->path = td_xmalloc(n);
    snprintf(w->path, n, "%s/events.out.tfevents.%lld.%s.%d", dir, (long long)time(NULL), host, (int)getpid());
    w->f = fopen(w->path, "wb");
    if (!w->f) td_fatal(1, "--tensorboard-dir: cannot create %s: %s", w->path, td_strerror(errno));
    pbuf ev = {.n = 0};
    put_fixed64(&ev, 1, wall_time());
    put_len(&ev, 3, "brain.Event:2", 13);
    write_record(w, &ev);
    tb_flush(w);
    return w;
}

void tb_scalar(tb_writer *w, const char *tag, int64_t step, double value)
{
    if (!w) return;
    if (strlen(tag) > TB_MAX_TAG) td_fatal(1, "TensorBoard tag \"%.40s...\" is longer than %d bytes", tag, TB_MAX_TAG);
    pbuf val = {.n = 0}, sum = {.n = 0}, ev = {.n = 0};
    put_len(&val, 1, tag, strlen(tag));
    put_fixed32(&val, 2, (float)value);
    put_len(&sum, 1, val.b, val.n);
    put_fixed64(&ev, 1, wall_time());
    put_key(&ev, 2, 0);
    put_varint(&ev, (uint64_t)step);
    put_len(&ev, 5, sum.b, sum.n);
    write_record(w, &ev);
}

void tb_flush(tb_writer *w)
{
    if (w && fflush(w->f) != 0)
        td_fatal(1, "cannot write the TensorBoard file %s: %s; check the disk", w->path, td_strerror(errno));
}

void tb_close(tb_writer *w)
{
    if (!w) return;
    tb_flush(w);
    fclose(w->f);
    free(w->path);
    free(w);
}

void tb_log_iteration(tb_writer *w, const met_record *r, int scaled, int64_t interval)
{
    if (!w) return;
    int64_t it = r->iteration;
    if (it % interval == 0) {
        tb_scalar(w, "lm loss", it, r->lm_loss);
        tb_scalar(w, "learning-rate", it, r->lr);
        tb_scalar(w, "grad-norm", it, r->grad_norm);
        if (scaled) tb_scalar(w, "loss-scale", it, r->loss_scale);
        tb_scalar(w, "tokens-per-second", it, r->tokens_per_s);
        tb_scalar(w, "mfu", it, r->mfu);
        tb_scalar(w, "iteration-time", it, r->elapsed_ms / 1e3);
        for (int i = 0; i < r->nextra; i++) tb_scalar(w, r->extra[i].label, it, r->extra[i].value);
    }
    if (!isnan(r->val_loss)) {
        tb_scalar(w, "lm loss validation", it, r->val_loss);
        tb_scalar(w, "lm loss validation ppl", it, exp(fmin(r->val_loss, 20.0)));
    }
    tb_flush(w);
}
