/* The inputs of preprocess: plain files, gzip (zlib) or zstd (streaming), chosen by the file's
 * suffix, read as one stream of decompressed bytes. See src/data/prep_impl.h. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "prep_impl.h"
#include "trident/check.h"

static int has_suffix(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

int prep_src_open(prep_src *s, const char *path, char *err, size_t errlen)
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

void prep_src_close(prep_src *s)
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

ssize_t prep_src_read(prep_src *s, void *buf, size_t cap, char *err, size_t errlen)
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
