/* What the datasets' index caches share: see ds_util.h. */
#include "ds_util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "trident/check.h"

#define DS_FNV_PRIME 0x100000001b3ull

char *ds_aprintf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    TD_ASSERT(n >= 0);
    char *s = td_xmalloc((size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

int ds_make_dirs(const char *path)
{
    char *p = td_xstrdup(path);
    int rc = 0;
    for (char *q = p + 1; ; q++) {
        if (*q == '/' || *q == 0) {
            char c = *q;
            *q = 0;
            if (mkdir(p, 0755) != 0 && errno != EEXIST) rc = -1;
            *q = c;
            if (rc || !c) break;
        }
    }
    free(p);
    struct stat st;
    if (rc == 0 && (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))) {
        if (errno == 0) errno = ENOTDIR;
        rc = -1;
    }
    return rc;
}

/* FNV-1a, 64-bit, byte by byte: cache keys (names). */
uint64_t ds_fnv1a(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * DS_FNV_PRIME;
    return h;
}

/* FNV-1a over 64-bit words (then the tail bytes): checksums of large arrays. Each step is a
 * bijection of the state, so any single changed word changes the result. */
uint64_t ds_fnv1a_words(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, b + i, 8);
        h = (h ^ w) * DS_FNV_PRIME;
    }
    return ds_fnv1a(h, b + i, n - i);
}

/* Writes path atomically: a temporary name unique to this host and process, fsync, rename.
 * 0, or -1 with why (the temporary is removed). */
int ds_write_atomic(const char *path, const char *b, size_t len, char *why, size_t whylen)
{
    static unsigned counter;
    char host[64] = "host";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = 0;
    char *tmp = ds_aprintf("%s.tmp.%s.%ld.%u", path, host, (long)getpid(), counter++);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(why, whylen, "create %s: %s", tmp, td_strerror(errno));
        free(tmp);
        return -1;
    }
    size_t put = 0;
    int rc = 0;
    while (put < len) {
        ssize_t w = write(fd, b + put, len - put);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            snprintf(why, whylen, "write %s: %s", tmp, w < 0 ? td_strerror(errno) : "no progress");
            rc = -1;
            break;
        }
        put += (size_t)w;
    }
    if (rc == 0 && fsync(fd) != 0) {
        snprintf(why, whylen, "fsync %s: %s", tmp, td_strerror(errno));
        rc = -1;
    }
    if (close(fd) != 0 && rc == 0) {
        snprintf(why, whylen, "close %s: %s", tmp, td_strerror(errno));
        rc = -1;
    }
    if (rc == 0 && rename(tmp, path) != 0) {
        snprintf(why, whylen, "rename %s -> %s: %s", tmp, path, td_strerror(errno));
        rc = -1;
    }
    if (rc != 0) unlink(tmp);
    free(tmp);
    return rc;
}


void ds_image_free(ds_image *im)
{
    if (!im->p) return;
    if (im->mapped) munmap(im->p, im->len);
    else free(im->p);
    memset(im, 0, sizeof *im);
}
