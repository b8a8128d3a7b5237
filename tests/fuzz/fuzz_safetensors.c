/* Fuzzes the safetensors header parser (src/ckpt/safetensors.c): the input is a whole file
 * image. st_parse must reject it with exactly one line, or accept it; when it accepts, every
 * tensor's byte range must lie in the file, the ranges must tile the data section in order,
 * and every byte of every tensor and every metadata string is read (ASan catches a read past
 * the input) and checksummed. Any crash or sanitizer report is a bug. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "trident/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    st_header h;
    char err[512] = "";
    if (st_parse(data, size, size, &h, err, sizeof err)) {
        if (!err[0] || strchr(err, '\n')) abort(); /* a rejection is exactly one line */
        return 0;
    }
    if (h.data_start + h.data_len != size) abort();
    uint64_t at = 0;
    volatile uint32_t sink = 0;
    for (int i = 0; i < h.ntensors; i++) {
        const st_tensor *t = &h.tensors[i];
        if (t->begin != at || t->end < t->begin || t->end > h.data_len) abort();
        if (!t->name || !t->name[0] || (unsigned)t->dtype >= ST_NDTYPES || t->ndim > ST_MAX_DIMS) abort();
        uint64_t numel = 1;
        for (int k = 0; k < t->ndim; k++) numel *= (uint64_t)t->shape[k];
        if (numel * st_dtype_size(t->dtype) != t->end - t->begin) abort();
        sink ^= st_crc32(0, data + h.data_start + t->begin, (size_t)(t->end - t->begin));
        if (st_find(&h, t->name) != t) abort();
        at = t->end;
    }
    if (at != h.data_len) abort();
    for (int i = 0; i < h.nmeta; i++) {
        if (st_meta(&h, h.meta_keys[i]) != h.meta_values[i]) abort();
        sink ^= st_crc32(0, h.meta_values[i], strlen(h.meta_values[i]));
    }
    (void)sink;
    st_header_free(&h);
    return 0;
}
