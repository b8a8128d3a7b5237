/* Shared between the checkpoint sources (private to src/ckpt; defined in layout.c): shard and
 * entry naming and the per-entry slice metadata. */
#ifndef TRIDENT_CKPT_IMPL_H
#define TRIDENT_CKPT_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "trident/checkpoint.h"

/* "" for parameters, "exp_avg." and "exp_avg_sq." for the Adam moments: entry name = prefix +
 * logical tensor name. */
const char *ckpt_kind_prefix(ckpt_kind k);
/* model_tpTTT_ppPPP.safetensors or optim_tpTTT_ppPPP.safetensors. */
void ckpt_shard_name(char *out, size_t len, int optimizer, int tp_rank, int pp_rank);
/* optim_tpTTT_ppPPP_dpDDD.safetensors: the optimizer shard of one data-parallel rank. */
/* Under expert parallelism, the model (or plain optimizer) shard of expert-parallel rank ep_rank > 0:
 * its experts only (rank 0's file, named as without, holds the rest and its own experts). */
void ckpt_ep_shard_name(char *out, size_t len, int optimizer, int tp_rank, int pp_rank, int ep_rank);
void ckpt_dp_shard_name(char *out, size_t len, int tp_rank, int pp_rank, int dp_rank);
/* The __metadata__ value describing an entry: {"shape":[..],"dim":d,"blocks":b,"start":s,
 * "len":l,"crc32":"xxxxxxxx"} (malloc'd). */
char *ckpt_slice_json(const ckpt_slice *s, uint32_t crc);
/* The same for a piece of a slice (an entry of a data-parallel optimizer shard): the slice's
 * description plus "elements":[b0,e0,b1,e1,...], the element ranges [b, e) of the slice's
 * buffer (row-major over the held indices) the entry holds, one after another (malloc'd). */
char *ckpt_piece_json(const ckpt_slice *s, uint32_t crc, const int64_t *elems, int nranges);
/* Parses it back; 0, or -1 when malformed or inconsistent (blocks not dividing the dimension,
 * the held range outside a block). */
int ckpt_slice_parse(const char *json, ckpt_slice *s, uint32_t *crc);
/* The "elements" of a piece's description: 0 with *elems (malloc'd, 2 n values) and *n, or -1
 * when there are none or they are malformed (not increasing, outside [0, numel)). */
int ckpt_piece_parse(const char *json, int64_t numel, int64_t **elems, int *n);
/* Blocks a split dimension may have at most (a larger "blocks" is refused as malformed). */
#define CKPT_MAX_BLOCKS 4096 /* a MoE layer's stacked experts under tp: 2 blocks (SwiGLU) an expert */

/* (checkpoint.c) A float as the double of the shortest decimal that reads back as the float, for JSON (1e-5f is
 * 1e-05, not 9.99999974737875e-06; 0.02f is 0.02). */
double ckpt_float_value(float f);

#endif
