/* File-system helpers shared by the checkpoint modules (private to src/ckpt): paths, durable
 * writes (fsync of files and folders, atomic replacement), recursive removal. Functions return
 * 0, or -1 with errno set. */
#ifndef TRIDENT_CKPT_FS_H
#define TRIDENT_CKPT_FS_H

#include <stddef.h>

/* out = a "/" b; dies if it does not fit. */
void ckf_join(char *out, size_t len, const char *a, const char *b);
/* mkdir -p. */
int ckf_mkdirs(const char *path);
/* fsync of a folder (makes renames and new entries in it durable). */
int ckf_fsync_dir(const char *path);
/* Writes `n` bytes to `path` through a temporary name in the same folder: written, fsynced,
 * renamed over `path`, and the folder fsynced. */
int ckf_write_atomic(const char *path, const void *data, size_t n);
/* rm -rf: removes `path` and everything under it (0 when it did not exist). */
int ckf_remove_tree(const char *path);
/* Reads a whole (small) file into a NUL-terminated buffer; NULL with errno set. */
char *ckf_read_text(const char *path, size_t *len, size_t max);
/* 1 if path exists (any type). */
int ckf_exists(const char *path);
int ckf_is_dir(const char *path);

#endif
