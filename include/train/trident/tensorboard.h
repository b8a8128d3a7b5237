/* TensorBoard event files, written by hand: TFRecord framing (little-endian length, masked
 * CRC32C of the length, the data, masked CRC32C of the data) around Event protocol buffers
 * (wall_time = 1, step = 2, file_version = 3, summary = 5; Summary.value = 1; Value.tag = 1,
 * Value.simple_value = 2), as tensorboard's event_file_writer writes them. See docs/training.md. */
#ifndef TRIDENT_TENSORBOARD_H
#define TRIDENT_TENSORBOARD_H

#include <stddef.h>
#include <stdint.h>

#include "trident/metrics.h"

typedef struct tb_writer tb_writer;

/* Creates DIR (and its parents) and DIR/events.out.tfevents.<seconds>.<host>.<pid>, starting with
 * the file_version event; dies naming the path when it cannot. */
tb_writer *tb_open(const char *dir);
/* Appends one scalar event (flushed by tb_flush); tag at most 256 bytes. NULL w: nothing. */
void tb_scalar(tb_writer *w, const char *tag, int64_t step, double value);
void tb_flush(tb_writer *w);
void tb_close(tb_writer *w);
/* One iteration's record with Megatron's tags, then flushed: when iteration % interval == 0, lm
 * loss, learning-rate, grad-norm, loss-scale (when scaled), tokens-per-second, mfu and
 * iteration-time (seconds); when it has a validation loss (not NaN), "lm loss validation" and
 * "lm loss validation ppl". NULL w: nothing. */
void tb_log_iteration(tb_writer *w, const met_record *r, int scaled, int64_t interval);

/* CRC32C (Castagnoli) of n bytes, and TFRecord's mask of a CRC. */
uint32_t tb_crc32c(const void *data, size_t n);
static inline uint32_t tb_mask_crc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

#endif
