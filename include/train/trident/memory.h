/* Memory prediction. Owns the model of what one rank holds while it trains: its parameters and
 * gradients, the optimizer state, the activations of the micro-batches the pipeline schedule
 * keeps in flight, and the backward's workspace, all from the model's shape and the layout
 * (no model is built). The trainer prints it at start-up and sets each rank's measured peak RSS
 * against it at the end; `trident plan` will use it to reject layouts that do not fit. */
#ifndef TRIDENT_MEMORY_H
#define TRIDENT_MEMORY_H

#include <stddef.h>

#include "trident/gpt_config.h"
#include "trident/parallel_state.h"

/* One model chunk (virtual stage) of a rank. */
typedef struct {
    int nlayers;  /* decoder layers */
    int first;    /* holds the embeddings */
    int last;     /* holds the final norm, the output layer and the loss */
    int inflight; /* micro-batches whose activations the schedule keeps at once */
    int layer0;   /* its first layer (of the model): which are MoE and which dense (--moe-layer-freq) */
} mem_chunk;

typedef struct {
    gpt_config cfg;  /* padded_vocab set */
    int tp, dp;
    int ep;          /* expert parallelism (carved out of dp x cp; 0 or 1: none): a rank's experts are
                      * E / ep, their optimizer shards over dp x cp / ep */
    int cp;          /* context parallelism (0 or 1: none): a rank holds seq / cp positions of a sample
                      * (and the attention's exchange buffers); the distributed optimizer shards over
                      * dp x cp */
    int cp_comm;     /* its attention exchange (PS_CP_*: the buffers it carves) */
    int mbs;         /* micro-batch size */
    int nchunks;
    mem_chunk chunk[PS_MAX_CHUNKS];
    int distributed_optimizer; /* Adam state (and a grad shard) divided over dp */
    int sequence_parallel;     /* norms, dropout and residuals hold s/t of the sequence */
    int recompute;             /* MEM_RECOMPUTE_* */
    int recompute_block;       /* full: 1 block method (first N layers of a chunk), 0 uniform (groups of N) */
    int recompute_num_layers;
    double bucket_elems;       /* --ddp-bucket-size (0: one bucket per chunk) */
    int lowp;                  /* GEMMs in bf16 or fp16 (--bf16, --fp16): the weights' copies */
    int lowp_widened;          /* ... widened to fp32 for sgemm (fp16, or no AVX512-BF16) */
    double lowp_chunk_bytes;   /* ... the largest slice of a rounded output gradient (be_lowp_chunk_bytes:
                                * 64 MiB on cpu, 1 GiB on a device); 0: 64 MiB */
    double lib_workspace;      /* the backend's libraries' own workspaces (cuBLASLt's on a device in a
                                * 16-bit run: be_ops.lib_workspace_bytes), counted in the workspace */
} mem_layout;

enum { MEM_RECOMPUTE_NONE, MEM_RECOMPUTE_SELECTIVE, MEM_RECOMPUTE_FULL };

/* Bytes on one rank. */
typedef struct {
    double params, grads;            /* fp32 parameters and grads */
    double optimizer;                /* Adam's two moments; distributed: of the shard, and the
                                      * shard's reduced grads */
    double acts_micro;               /* saved activations of one micro-batch, all chunks */
    double acts;                     /* ... times the micro-batches in flight */
    double workspace;                /* shared per chunk: the backward's gradients, recomputation buffers */
    double lowp;                     /* --bf16/--fp16: the weights' 2-byte copies and the GEMMs'
                                      * conversion scratch */
    double comm;                     /* MPI's temporaries: a bucket's reduction (dp > 1), the tied
                                      * embedding's sum over the first and last stage */
    double total;                    /* the sum of the above */
} mem_prediction;

/* Parameters (elements) of one chunk on one tensor-parallel rank. */
double mem_chunk_params(const gpt_config *c, int tp, const mem_chunk *k);
/* Activation bytes of one micro-batch of one chunk. */
double mem_chunk_acts(const mem_layout *l, const mem_chunk *k);
void mem_predict(const mem_layout *l, mem_prediction *out);
/* Bytes of context parallelism's attention exchange buffers in one chunk's workspace (the model's
 * own carving at l->cp and l->cp_comm, less the same rank's without cp; 0 when cp <= 1): what
 * mem_predict counts for them, for `trident plan`'s other memory models. */
double mem_cp_exchange_bytes(const mem_layout *l);
/* "params 12.1 + grads 12.1 + optimizer 24.2 + activations 3.0 x 4 in flight + workspace 1.2 =
 * 61.6 MiB" */
void mem_describe(const mem_prediction *p, const mem_layout *l, char *out, size_t len);

#endif
