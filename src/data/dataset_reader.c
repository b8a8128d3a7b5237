/* The dataset-reader seam: the registry of formats and the calls through it (see
 * include/data/trident/dataset_reader.h). */
#include "trident/dataset_reader.h"

#include <stdlib.h>

#include "trident/check.h"

/* Each format's table, defined in its own file. */
extern const dsr_ops dsr_indexed_ops; /* indexed.c: Megatron's .bin/.idx */

/* The registry: dsr_open takes the first row whose probe knows the prefix; the first row is also
 * the format whose error a prefix nobody knows gets. A new format is one row here. */
static const dsr_ops *const FORMATS[] = {
    &dsr_indexed_ops,
};
#define NFORMATS ((int)(sizeof FORMATS / sizeof FORMATS[0]))

struct dsr_reader {
    const dsr_ops *ops;
    void *h;
    char *prefix;
};

/* The first format whose probe knows prefix, or NULL with the first format's errno and file. */
static const dsr_ops *format_of(const char *prefix, int *why, char *file, size_t filelen)
{
    char other[16];
    for (int i = 0; i < NFORMATS; i++) {
        int e = i == 0 ? FORMATS[i]->probe(prefix, file, filelen) : FORMATS[i]->probe(prefix, other, sizeof other);
        if (e == 0) return FORMATS[i];
        if (i == 0) *why = e;
    }
    return NULL;
}

int dsr_probe(const char *prefix, char *file, size_t filelen)
{
    int why = 0;
    return format_of(prefix, &why, file, filelen) ? 0 : why;
}

dsr_reader *dsr_open(const char *prefix, char *err, size_t errlen)
{
    int why = 0;
    char file[16];
    const dsr_ops *ops = format_of(prefix, &why, file, sizeof file);
    if (!ops) ops = FORMATS[0];
    void *h = ops->open(prefix, err, errlen);
    if (!h) return NULL;
    dsr_reader *r = td_xcalloc(1, sizeof *r);
    r->ops = ops;
    r->h = h;
    r->prefix = td_xstrdup(prefix);
    return r;
}

void dsr_close(dsr_reader *r)
{
    if (!r) return;
    r->ops->close(r->h);
    free(r->prefix);
    free(r);
}

const char *dsr_format(const dsr_reader *r) { return r->ops->name; }
const char *dsr_prefix(const dsr_reader *r) { return r->prefix; }
int64_t dsr_num_sequences(const dsr_reader *r) { return r->ops->num_sequences(r->h); }
int64_t dsr_num_documents(const dsr_reader *r) { return r->ops->num_documents(r->h); }
const int32_t *dsr_seq_lens(const dsr_reader *r) { return r->ops->seq_lens(r->h); }
const int64_t *dsr_doc_index(const dsr_reader *r) { return r->ops->doc_index(r->h); }
int64_t dsr_num_tokens(const dsr_reader *r) { return r->ops->num_tokens(r->h); }

int32_t dsr_seq_len(const dsr_reader *r, int64_t i)
{
    TD_ASSERT(i >= 0 && i < dsr_num_sequences(r));
    return r->ops->seq_lens(r->h)[i];
}

void dsr_read(const dsr_reader *r, int64_t i, int64_t offset, int64_t n, int32_t *out)
{
    r->ops->read(r->h, i, offset, n, out);
}

int64_t dsr_find_id_outside(const dsr_reader *r, int64_t limit, int64_t *offset, int32_t *id)
{
    return r->ops->find_id_outside(r->h, limit, offset, id);
}

char *dsr_token_file(const dsr_reader *r) { return r->ops->token_file(r->prefix); }

int64_t dsr_token_byte_offset(const dsr_reader *r, int64_t i, int64_t offset)
{
    return r->ops->token_byte_offset(r->h, i, offset);
}

const char *dsr_token_type(const dsr_reader *r) { return r->ops->token_type(r->h); }
