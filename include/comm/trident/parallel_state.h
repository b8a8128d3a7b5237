/* The rank grid. Owns world = tp x cp x dp x pp in Megatron's order (tp fastest, then context
 * parallelism, then dp, then pp: rank = tp_rank + tp * (cp_rank + cp * (dp_rank + dp * pp_rank)))
 * and the process groups built from it by communicator split: tp, cp, dp, dp x cp (gradients and
 * the distributed optimizer's shards), pp, model-parallel (tp x pp) and embedding (first and last
 * stage). */
#ifndef TRIDENT_PARALLEL_STATE_H
#define TRIDENT_PARALLEL_STATE_H

#include "trident/comm.h"

typedef struct ps_state {
    int world_rank, world_size;
    int tp, pp, dp;                /* group sizes */
    int tp_rank, pp_rank, dp_rank; /* this rank's coordinates */
    int cp, cp_rank;               /* context parallelism (--context-parallel-size): each sample's
                                    * sequence split over cp ranks; 1 and 0 without */
    int dpcp, dpcp_rank;           /* dp x cp and this rank's place in it (cp_rank + cp * dp_rank) */
    comm *world;                   /* not owned */
    comm *tp_group;                /* same cp, dp and pp rank */
    comm *cp_group;                /* same tp, dp and pp rank, ordered by cp_rank (size 1 without cp) */
    comm *dp_group;                /* same tp, cp and pp rank: the ranks that read different samples */
    comm *dpcp_group;              /* same tp and pp rank: dp x cp, over which gradients are summed and the
                                    * distributed optimizer sharded (Megatron's data parallel group with
                                    * context parallelism); the dp group itself when cp is 1 (not owned) */
    comm *pp_group;                /* same tp, cp and dp rank, ordered by stage */
    comm *mp_group;                /* same cp and dp rank: tp x pp, for the grad norm */
    comm *embd_group;              /* first and last stage (same tp, cp, dp rank); NULL on others */
    comm *dp_hier;                 /* a hierarchical view of dp_group for the gradient and parameter
                                    * buckets (--dp-collectives), or NULL: flat (owned) */
    comm *tp_gather;               /* with tp > 1 and pp > 1: the tp group again, for the all-gathers
                                    * of stage transfers that run behind compute (scatter/gather:
                                    * their order there is the schedule's, whatever the layers' tp
                                    * collectives do meanwhile); NULL otherwise */
    int ep, ep_rank;               /* expert parallelism (--expert-model-parallel-size), carved out of
                                    * dp x cp as Megatron's: ep_rank = dpcp_rank % ep; 1 and 0 without */
    int edp, edp_rank;             /* expert data parallelism: dpcp / ep, dpcp_rank / ep */
    comm *ep_group;                /* the ep consecutive dp x cp ranks whose experts together make a
                                    * layer's (same tp, pp and dpcp_rank / ep); NULL when ep is 1 */
    comm *edp_group;               /* the ranks holding the same experts (same tp, pp, dpcp_rank % ep):
                                    * the experts' gradients are summed over it only; the dp x cp group
                                    * itself when ep is 1 (not owned then) */
    int sequence_parallel;         /* outside the tensor-parallel regions each tp rank holds s/tp of
                                    * the sequence (set by the trainer before building models) */
    int cp_comm;                   /* context parallelism's attention exchange (--cp-comm-type, PS_CP_*;
                                    * set by the trainer before building models) */
} ps_state;

/* --cp-comm-type: Ulysses' all-to-all (heads for sequence around the core; the zero value), every
 * rank's keys and values gathered, or a ring of key/value blocks. */
enum { PS_CP_A2A, PS_CP_ALL_GATHER, PS_CP_P2P };

/* Model chunks (virtual pipeline stages) one rank may hold at most: --num-layers-per-virtual-
 * pipeline-stage gives each rank num_layers / (pp x layers per stage) chunks, and the schedule,
 * the optimizer and the memory prediction keep a fixed table per chunk. The trainer's config
 * validation refuses more, naming this limit. */
#define PS_MAX_CHUNKS 16

/* Builds the grid; the caller has checked that tp * pp divides the world size (collective over
 * world: every rank must call it). No expert parallelism (ep 1), no context parallelism (cp 1). */
ps_state *ps_init(comm *world, int tp, int pp);
/* ps_init with context parallelism of size cp (tp * cp * pp divides the world size; the caller
 * checked). */
ps_state *ps_init_cp(comm *world, int tp, int cp, int pp);
/* Carves expert parallelism of size ep out of dp x cp (ep divides dp x cp; the caller checked): the ep and expert-data-parallel groups. Collective over the world; once,
 * before models are built. */
void ps_init_experts(ps_state *ps, int ep);
void ps_free(ps_state *ps);
/* Every group of ps gets its NCCL twin (comm_make_twin, ordered against the backend's `stream`),
 * the world first and then the groups in one fixed order on every rank, each collective over its
 * own ranks; the pp and cp groups' with p2p (their stage transfers and ring). Before the data-parallel collectives are chosen (a twin's group takes NCCL's own
 * ring and tree choices: no hierarchical view). */
void ps_make_twins(ps_state *ps, void *stream);

/* Seconds this rank has spent blocked in communication on all its groups so far. */
double ps_comm_seconds(const ps_state *ps);

/* The kinds of group communication time is reported by (the embedding group's sum of the tied
 * word embedding's gradient apart from pp; "other": the world and model-parallel groups). */
typedef enum { PS_TP, PS_PP, PS_DP, PS_EP, PS_EMBD, PS_CP, PS_OTHER, PS_GROUPS } ps_group;
/* "tp", "pp", "dp" (the dp x cp group's gradient sums too), "ep" (the experts' token exchange;
 * their gradients' sum over the expert-data-parallel group is dp's), "embd", "cp" (context
 * parallelism's attention exchanges), "other". */
const char *ps_group_name(ps_group g);
/* Per kind of group, so far: exposed[g] the seconds blocked in it (comm_seconds; their sum is
 * ps_comm_seconds) and inflight[g] the seconds it had communication in flight
 * (comm_busy_seconds; "other" adds its two groups). exposed[g] <= inflight[g]. */
void ps_comm_times(const ps_state *ps, double exposed[PS_GROUPS], double inflight[PS_GROUPS]);

/* Where the ranks run (collective over the world): on world rank 0, fills `out` with one line per
 * host, "HOST: ranks A-B (tp a-b, pp c, dp d-e)" (", cp f-g" after dp under context parallelism), and `warn` with one line naming the first
 * tensor-parallel group whose ranks span hosts and how to keep tp inside a node ("" when none);
 * other ranks get "" in both. Hosts are gethostname()'s names. */
void ps_placement(const ps_state *ps, char *out, size_t len, char *warn, size_t wlen);

/* World rank of the grid point (tp_rank, cp rank 0, dp_rank, pp_rank). */
int ps_rank_of(const ps_state *ps, int tp_rank, int dp_rank, int pp_rank);
static inline int ps_is_first_stage(const ps_state *ps) { return ps->pp_rank == 0; }
static inline int ps_is_last_stage(const ps_state *ps) { return ps->pp_rank == ps->pp - 1; }

#endif
