/* Fuzzes preprocess --sft's line reader (src/data/sft.c) with arbitrary bytes: the first byte picks
 * the format (prompt-response with 'Q: {input}\nA: {output}', chat or ShareGPT with ChatML), the
 * rest is the JSONL line. Whatever it accepts has one mask value, 0 or 1, per token and at least
 * one answer token; a rejection says why; nothing crashes or reads out of bounds. GPT-2's BPE
 * from $TD_FUZZ_DATA/gpt2 (else TD_TEST_DATA/gpt2). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/chat_template.h"
#include "trident/sft.h"
#include "trident/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static tok_tokenizer *g_tok;
static tok_worker *g_w;
static ct_template *g_tmpl;
static ct_config g_cfg;

static void release(void)
{
    tok_worker_free(g_w);
    tok_free(g_tok);
    ct_free(g_tmpl);
}

static void load(void)
{
    const char *dir = getenv("TD_FUZZ_DATA");
#ifdef TD_TEST_DATA
    if (!dir || !*dir) dir = TD_TEST_DATA;
#endif
    char vocab[4096], merges[4096], err[512];
    snprintf(vocab, sizeof vocab, "%s/gpt2/vocab.json", dir ? dir : "");
    snprintf(merges, sizeof merges, "%s/gpt2/merges.txt", dir ? dir : "");
    tok_spec spec = {"GPT2BPETokenizer", vocab, merges, NULL};
    if (!(g_tok = tok_open(&spec, err, sizeof err))) {
        fprintf(stderr, "fuzz_sft: %s (set TD_FUZZ_DATA to the folder holding gpt2/)\n", err);
        abort();
    }
    g_w = tok_worker_new(g_tok);
    g_tmpl = ct_compile("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
                        "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
                        "{% endif %}", err, sizeof err);
    if (!g_tmpl) abort();
    atexit(release);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g_tok) load();
    if (size == 0) return 0;
    sft_config c = {.format = (sft_format)(data[0] % 3), .chat = &g_cfg, .tmpl = g_tmpl,
                    .prompt_template = "Q: {input}\\nA: {output}", .truncation_field = data[0] & 4 ? "input" : NULL};
    bpe_ids ids = {0}, mask = {0};
    char err[512] = "";
    if (sft_encode(&c, g_tok, g_w, (const char *)data + 1, size - 1, &ids, &mask, err, sizeof err) == 0) {
        if (ids.n != mask.n) abort();
        int answer = 0, field = 0;
        for (size_t i = 0; i < mask.n; i++) {
            if (mask.ids[i] < 0 || mask.ids[i] > 3 || (mask.ids[i] > 1 && !c.truncation_field)) abort();
            answer += mask.ids[i] == SFT_MASK_ANSWER;
            field += mask.ids[i] >= SFT_MASK_FIELD;
        }
        if (!answer) abort();
        /* truncated to a budget from the first byte: min(n, budget) tokens, in their order, each with
         * its mark; the answer whole when the fields hold the excess */
        int64_t n = (int64_t)ids.n, budget = (data[0] >> 3) + 1;
        for (int how = 0; how < 2; how++) {
            int32_t *t = malloc((size_t)(n ? n : 1) * sizeof *t), *m = malloc((size_t)(n ? n : 1) * sizeof *m);
            memcpy(t, ids.ids, (size_t)n * sizeof *t);
            memcpy(m, mask.ids, (size_t)n * sizeof *m);
            int64_t k = sft_truncate(t, m, n, budget, (sft_trunc)how), j = 0, kept_answer = 0;
            if (k != (n < budget ? n : budget)) abort();
            for (int64_t i = 0; i < k; i++, j++) { /* a subsequence of (ids, mask) */
                while (j < n && (ids.ids[j] != t[i] || mask.ids[j] != m[i])) j++;
                if (j == n) abort();
                kept_answer += m[i] == SFT_MASK_ANSWER;
            }
            if (n - budget <= field && kept_answer != answer) abort();
            free(t), free(m);
        }
    } else if (err[0] == '\0' || ids.n || mask.n) {
        abort(); /* a rejection says why and adds nothing */
    }
    bpe_ids_free(&ids);
    bpe_ids_free(&mask);
    return 0;
}
