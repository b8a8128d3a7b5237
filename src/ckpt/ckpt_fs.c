/* File-system helpers of the checkpoint modules: see ckpt_fs.h. */
#include "ckpt_fs.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "trident/check.h"

void ckf_join(char *out, size_t len, const char *a, const char *b)
{
    int k = snprintf(out, len, "%s/%s", a, b);
    if (k < 0 || (size_t)k >= len) td_fatal(1, "path too long: %s/%s", a, b);
}

int ckf_mkdirs(const char *path)
{
    char buf[4096];
    if (strlen(path) >= sizeof buf) {
        errno = ENAMETOOLONG;
        return -1;
    }
    strcpy(buf, path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
    return ckf_is_dir(buf) ? 0 : (errno = ENOTDIR, -1);
}

int ckf_fsync_dir(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    errno = e;
    return rc;
}

int ckf_write_atomic(const char *path, const void *data, size_t n)
{
    char tmp[4200], dir[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    else strcpy(dir, ".");
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return -1;
    const char *p = data;
    size_t left = n;
    while (left) {
        ssize_t w = write(fd, p, left);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) goto fail;
        p += w;
        left -= (size_t)w;
    }
    if (fsync(fd) != 0) goto fail;
    if (close(fd) != 0) {
        fd = -1;
        goto fail;
    }
    fd = -1;
    if (rename(tmp, path) != 0) goto fail;
    return ckf_fsync_dir(dir);
fail:;
    int e = errno;
    if (fd >= 0) close(fd);
    unlink(tmp);
    errno = e;
    return -1;
}

static int remove_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

int ckf_remove_tree(const char *path)
{
    struct stat sb;
    if (lstat(path, &sb) != 0) return errno == ENOENT ? 0 : -1;
    if (!S_ISDIR(sb.st_mode)) return unlink(path);
    return nftw(path, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

char *ckf_read_text(const char *path, size_t *len, size_t max)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    char *buf = td_xmalloc(cap);
    for (;;) {
        if (n + 1 >= cap) {
            if (cap > max) {
                fclose(f);
                free(buf);
                errno = EFBIG;
                return NULL;
            }
            cap *= 2;
            buf = td_xrealloc(buf, cap);
        }
        size_t k = fread(buf + n, 1, cap - n - 1, f);
        n += k;
        if (k == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        errno = EIO;
        return NULL;
    }
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

int ckf_exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

int ckf_is_dir(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}
