/* The rank grid. Owns world = tp x dp x pp (tp fastest, then dp, then pp:
 * rank = tp_rank + tp * (dp_rank + dp * pp_rank)) and the process groups built from it by
 * communicator split: tp, dp, pp, model-parallel (tp x pp) and embedding (first and last stage). */
#ifndef TRIDENT_PARALLEL_STATE_H
#define TRIDENT_PARALLEL_STATE_H

#include "trident/comm.h"

typedef struct ps_state {
    int world_rank, world_size;
    int tp, pp, dp;                /* group sizes */
    int tp_rank, pp_rank, dp_rank; /* this rank's coordinates */
    comm *world;                   /* not owned */
    comm *tp_group;                /* same dp_rank and pp_rank */
    comm *dp_group;                /* same tp_rank and pp_rank */
    comm *pp_group;                /* same tp_rank and dp_rank, ordered by stage */
    comm *mp_group;                /* same dp_rank: tp x pp, for the grad norm */
    comm *embd_group;              /* first and last stage (same tp, dp rank); NULL on others */
    comm *dp_hier;                 /* a hierarchical view of dp_group for the gradient and parameter
                                    * buckets (--dp-collectives), or NULL: flat (owned) */
    comm *tp_gather;               /* with tp > 1 and pp > 1: the tp group again, for the all-gathers
                                    * of stage transfers that run behind compute (scatter/gather:
                                    * their order there is the schedule's, whatever the layers' tp
                                    * collectives do meanwhile); NULL otherwise */
    int ep, ep_rank;               /* expert parallelism (--expert-model-parallel-size), carved out of dp as
                                    * Megatron's: ep_rank = dp_rank % ep; 1 and 0 without */
    int edp, edp_rank;             /* expert data parallelism: dp / ep, dp_rank / ep */
    comm *ep_group;                /* the ep consecutive dp ranks whose experts together make a layer's
                                    * (same tp, pp and dp_rank / ep); NULL when ep is 1 */
    comm *edp_group;               /* the ranks holding the same experts (same tp, pp, dp_rank % ep): the
                                    * experts' gradients are summed over it only; the dp group itself
                                    * when ep is 1 (not owned then) */
    int sequence_parallel;         /* outside the tensor-parallel regions each tp rank holds s/tp of
                                    * the sequence (set by the trainer before building models) */
} ps_state;

/* Model chunks (virtual pipeline stages) one rank may hold at most: --num-layers-per-virtual-
 * pipeline-stage gives each rank num_layers / (pp x layers per stage) chunks, and the schedule,
 * the optimizer and the memory prediction keep a fixed table per chunk. The trainer's config
 * validation refuses more, naming this limit. */
#define PS_MAX_CHUNKS 16

/* Builds the grid; the caller has checked that tp * pp divides the world size (collective over
 * world: every rank must call it). No expert parallelism (ep 1). */
ps_state *ps_init(comm *world, int tp, int pp);
/* Carves expert parallelism of size ep out of dp (ep divides dp; the caller checked): the ep and
 * expert-data-parallel groups. Collective over the world; once, before models are built. */
void ps_init_experts(ps_state *ps, int ep);
void ps_free(ps_state *ps);

/* Seconds this rank has spent blocked in communication on all its groups so far. */
double ps_comm_seconds(const ps_state *ps);

/* The kinds of group communication time is reported by (the embedding group's sum of the tied
 * word embedding's gradient apart from pp; "other": the world and model-parallel groups). */
typedef enum { PS_TP, PS_PP, PS_DP, PS_EP, PS_EMBD, PS_OTHER, PS_GROUPS } ps_group;
/* "tp", "pp", "dp", "ep" (the experts' token exchange; their gradients' sum over the expert-data-
 * parallel group is dp's), "embd", "other". */
const char *ps_group_name(ps_group g);
/* Per kind of group, so far: exposed[g] the seconds blocked in it (comm_seconds; their sum is
 * ps_comm_seconds) and inflight[g] the seconds it had communication in flight
 * (comm_busy_seconds; "other" adds its two groups). exposed[g] <= inflight[g]. */
void ps_comm_times(const ps_state *ps, double exposed[PS_GROUPS], double inflight[PS_GROUPS]);

/* Where the ranks run (collective over the world): on world rank 0, fills `out` with one line per
 * host, "HOST: ranks A-B (tp a-b, pp c, dp d-e)", and `warn` with one line naming the first
 * tensor-parallel group whose ranks span hosts and how to keep tp inside a node ("" when none);
 * other ranks get "" in both. Hosts are gethostname()'s names. */
void ps_placement(const ps_state *ps, char *out, size_t len, char *warn, size_t wlen);

/* World rank of the grid point (tp_rank, dp_rank, pp_rank). */
int ps_rank_of(const ps_state *ps, int tp_rank, int dp_rank, int pp_rank);
static inline int ps_is_first_stage(const ps_state *ps) { return ps->pp_rank == 0; }
static inline int ps_is_last_stage(const ps_state *ps) { return ps->pp_rank == ps->pp - 1; }

#endif
