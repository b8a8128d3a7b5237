/* The tokenizer's facts a training run asks for (its vocabulary size and end-of-document id), read
 * once a process, and the heap's trim after such a parse: see train_impl.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "train_impl.h"
#include "trident/check.h"
#include "trident/tokenizer.h"

/* Gives the heap's free pages back to the system (glibc keeps freed small and medium blocks
 * resident): what a transient buffer left must not count in the run's peak memory. */
void run_trim_heap(void)
{
#ifdef __GLIBC__
    malloc_trim(0);
#endif
}

/* The tokenizer's facts a run asks for, kept from the last tokenizer opened: the resume's check, the
 * model's configuration, validation and the data source each ask, and a Llama 3 tokenizer.json is
 * 9 MB of JSON (0.1-0.5 CPU-seconds and 30,000 page faults a parse). */
static struct {
    int vocab, eod;
    char *key; /* the tokenizer flags they are of; NULL before the first */
} g_tok;

static char *spec_key(const tok_spec *s)
{
    const char *p[4] = {s->type, s->vocab, s->merges, s->model};
    size_t n = 8;
    for (int i = 0; i < 4; i++) n += (p[i] ? strlen(p[i]) : 0) + 2;
    char *k = td_xmalloc(n), *at = k;
    for (int i = 0; i < 4; i++) at += sprintf(at, "%s%c", p[i] ? p[i] : "", i < 3 ? '\n' : '\0');
    return k;
}

int run_tokenizer_facts(const td_args *a, int *vocab, int *eod, char *err, size_t errlen)
{
    tok_spec spec = {a->tokenizer_type, a->vocab_file, a->merge_file, a->tokenizer_model};
    char *key = spec_key(&spec);
    if (!g_tok.key || strcmp(key, g_tok.key) != 0) {
        tok_tokenizer *tok = tok_open(&spec, err, errlen);
        if (!tok) {
            free(key);
            return -1;
        }
        g_tok.vocab = tok_vocab_size(tok);
        g_tok.eod = tok_eod_id(tok);
        tok_free(tok);
        run_trim_heap(); /* a tokenizer.json's parse leaves tens of MB in the heap's free lists */
        free(g_tok.key);
        g_tok.key = key;
    } else {
        free(key);
    }
    if (vocab) *vocab = g_tok.vocab;
    if (eod) *eod = g_tok.eod;
    return 0;
}

/* The vocabulary of the tokenizer (--vocab-file or --tokenizer-model); -1 without one. Rank 0 opens
 * the tokenizer and broadcasts its size (once a job, not once a rank); a tokenizer it cannot open
 * ends every rank with 1, rank 0 saying why. */
int run_tokenizer_vocab(const td_args *a, const comm *world)
{
    if (!a->vocab_file && !a->tokenizer_model) return -1;
    char err[512] = "";
    int v = -2;
    if (comm_rank(world) == 0 && run_tokenizer_facts(a, &v, NULL, err, sizeof err)) v = -2;
    int32_t v32 = v;
    comm_bcast(world, &v32, 1, COMM_I32, 0);
    if (v32 == -2) {
        if (comm_rank(world) == 0) fprintf(stderr, "error: %s\n", err);
        comm_usage_exit(1);
    }
    return v32;
}
