/* Private to src/ckpt: the Hugging Face families hf.c converts, one file each (hf_gpt2.c,
 * hf_llama.c, ...) defining one row, listed in hf_families.c. A family maps each trident logical tensor to one or more transformers tensors
 * ("pieces": row ranges, possibly stored transposed), writes and reads config.json, and says
 * whether a trident architecture is one it computes exactly. */
#ifndef TRIDENT_HF_IMPL_H
#define TRIDENT_HF_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "trident/gpt.h"

#define HF_MAX_PIECES 3

typedef struct {
    char hf[128];     /* the transformers tensor name */
    int64_t row0;     /* first row of the trident tensor it holds */
    int64_t rows;     /* rows it holds; -1: all (the real vocabulary for the embedding and output) */
    int transpose;    /* stored [in, out] (GPT-2's Conv1D) */
} hf_piece;

typedef struct hf_family {
    const char *model_type, *arch; /* "gpt2", "GPT2LMHeadModel" */
    gpt_kind kind;                 /* the trident models it holds (--model) */
    /* The pieces of trident tensor `name` (0: it has no counterpart). */
    int (*pieces)(const gpt_config *c, const char *name, hf_piece *out);
    cJSON *(*config)(const gpt_config *c);
    /* NULL when the family computes exactly what trident's config does, else what differs. */
    const char *(*mismatch)(const gpt_config *c);
    /* Fills the architecture of c from config.json (o, read from path); -1 with one line in err. */
    int (*read_config)(const cJSON *o, const char *path, gpt_config *c, char *err, size_t errlen);
    const char *alias; /* another model_type read the same way ("mistral"), or NULL */
    /* 1 for a tensor of the family's files that carries no parameter of its own (a buffer, a
     * tied copy), which import passes over; NULL: none beyond the common ones (hf.c). */
    int (*ignorable)(const char *name);
} hf_family;

/* Every family, in the order export tries them (the first whose architecture matches); NULL
 * ends the list (hf_families.c). */
extern const hf_family *const hf_families[];

/* config.json values: a positive integer (def when absent or null; def < 0: required), a
 * number, a boolean. hf_json_int returns -1 when the value is not a positive integer. */
int hf_json_int(const cJSON *o, const char *key, int def, int *v);
double hf_json_num(const cJSON *o, const char *key, double def);
int hf_json_bool(const cJSON *o, const char *key, int def);

#endif
