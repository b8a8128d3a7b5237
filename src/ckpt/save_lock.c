/* The --save folder's lock: see ckpt_lock_save_dir in include/ckpt/trident/checkpoint.h.
 *
 * An flock(2) on DIR/.trident-save.lock, taken without waiting and never released by hand: the
 * kernel drops it when the process ends, however it ends (a kill -9 included), so a lock is
 * never stale. The file keeps the holder's host, pid and start time for the refusal; it is not
 * removed (removing a lock file races with a process that has just opened it). */
#include "trident/checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include "ckpt_fs.h"
#include "trident/check.h"

/* Who holds the lock, as the holder wrote it into the lock file ("" when it has not yet). */
static void read_holder(int fd, char *out, size_t len)
{
    ssize_t n = pread(fd, out, len - 1, 0);
    out[n > 0 ? n : 0] = 0;
    out[strcspn(out, "\n")] = 0;
}

static void write_holder(int fd)
{
    char host[256] = "?", when[64] = "?", line[512];
    gethostname(host, sizeof host - 1);
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm)) strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm);
    int k = snprintf(line, sizeof line, "host %s, pid %ld, since %s\n", host, (long)getpid(), when);
    /* best effort: the lock is the flock, this only names its holder */
    if (ftruncate(fd, 0) == 0 && pwrite(fd, line, (size_t)k, 0) != k) errno = 0;
}

int ckpt_lock_save_dir(const char *dir, char *err, size_t errlen)
{
    char path[4200];
    if (ckf_mkdirs(dir) != 0) {
        snprintf(err, errlen, "--save %s: cannot create the folder: %s", dir, td_strerror(errno));
        return -1;
    }
    ckf_join(path, sizeof path, dir, CKPT_LOCK_FILE);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(err, errlen, "--save %s: cannot create its lock file %s: %s; check that the folder is writable", dir,
                 path, td_strerror(errno));
        return -1;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
        write_holder(fd);
        return 0; /* fd stays open: the lock lasts as long as this process */
    }
    int e = errno;
    if (e == EWOULDBLOCK || e == EAGAIN) {
        char holder[512];
        read_holder(fd, holder, sizeof holder);
        close(fd);
        snprintf(err, errlen, "--save %s is in use by another training run (%s): two runs saving into one folder "
                 "replace each other's checkpoints; wait for that run to end, or save elsewhere", dir,
                 holder[0] ? holder : "its holder has not written its name yet");
        return -1;
    }
    close(fd);
    snprintf(err, errlen, "--save %s: cannot lock %s (%s): its file system does not support flock, so nothing keeps "
             "a second run from saving into it at the same time", dir, path, td_strerror(e));
    return 1;
}
