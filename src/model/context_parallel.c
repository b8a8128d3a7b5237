/* Context parallelism: see src/model/context_parallel.h. */
#include "context_parallel.h"

#include <stdlib.h>

#include "trident/check.h"

enum { CP_TAG_A2A = 0x4350 };

/* Every rank sends n floats at r n of send to rank r and receives n at r n of recv. */
static void exchange(const backend *be, const comm *cp, const float *send, float *recv, size_t n)
{
    int C = comm_size(cp);
    size_t *v = td_xmalloc((size_t)2 * C * sizeof *v);
    for (int r = 0; r < C; r++) v[r] = n, v[C + r] = (size_t)r * n;
    xfer_alltoallv(be, cp, send, v, v + C, recv, v, v + C, COMM_F32, CP_TAG_A2A);
    free(v);
}

/* Chunk i (0 or 1) of cp rank r: its place among the 2C chunks. */
static int chunk_of(int r, int i, int C) { return i == 0 ? r : 2 * C - 1 - r; }

/* Between a rank's block (B, S/C, P w/C) of a rank-major buffer and the sample-major full
 * (B, S, P w/C): its two chunks at their places. */
static void place_chunks(const backend *be, float *full, float *block, int r, int C, int B, int S, int Pwc,
                         int to_full)
{
    size_t L = (size_t)S / (2 * C), Tc = 2 * L;
    for (int b = 0; b < B; b++)
        for (int i = 0; i < 2; i++) {
            float *f = full + ((size_t)b * S + (size_t)chunk_of(r, i, C) * L) * Pwc;
            float *k = block + ((size_t)b * Tc + i * L) * Pwc;
            if (to_full) be_copy(be, f, k, L * Pwc);
            else be_copy(be, k, f, L * Pwc);
        }
}

/* Between the local (B, S/C, P w) and rank j's block (B, S/C, P w/C): its C-th of each part. */
static void slice_heads(const backend *be, float *local, float *block, int j, int C, int B, int Tc, int P, int w,
                        int to_local)
{
    size_t wc = (size_t)w / C;
    for (size_t t = 0; t < (size_t)B * Tc; t++)
        for (int p = 0; p < P; p++) {
            float *l = local + t * P * w + (size_t)p * w + j * wc, *k = block + (t * P + p) * wc;
            if (to_local) be_copy(be, l, k, wc);
            else be_copy(be, k, l, wc);
        }
}

void cp_a2a_to_heads(const backend *be, const comm *cp, float *full, const float *local, float *send, float *recv,
                     int B, int S, int P, int w)
{
    int C = comm_size(cp), Tc = S / C, Pwc = P * (w / C);
    size_t n = (size_t)B * Tc * Pwc;
    if (C == 1) {
        if (full != local) be_copy(be, full, local, n);
        return;
    }
    for (int j = 0; j < C; j++) slice_heads(be, (float *)local, send + j * n, j, C, B, Tc, P, w, 0);
    exchange(be, cp, send, recv, n);
    for (int r = 0; r < C; r++) place_chunks(be, full, recv + r * n, r, C, B, S, Pwc, 1);
}

void cp_a2a_to_seq(const backend *be, const comm *cp, float *local, const float *full, float *send, float *recv,
                   int B, int S, int P, int w)
{
    int C = comm_size(cp), Tc = S / C, Pwc = P * (w / C);
    size_t n = (size_t)B * Tc * Pwc;
    if (C == 1) {
        if (full != local) be_copy(be, local, full, n);
        return;
    }
    for (int r = 0; r < C; r++) place_chunks(be, (float *)full, send + r * n, r, C, B, S, Pwc, 0);
    exchange(be, cp, send, recv, n);
    for (int j = 0; j < C; j++) slice_heads(be, local, recv + j * n, j, C, B, Tc, P, w, 1);
}

void cp_ring_start(const backend *be, const comm *cp, const float *send, float *recv, size_t n, int tag,
                   cp_ring_req *q)
{
    int C = comm_size(cp), r = comm_rank(cp);
    q->dst = recv, q->bytes = n * sizeof(float);
    q->recv = comm_irecv(xfer_comm(be, cp), xfer_recv_view(be, recv, q->bytes), n, COMM_F32, (r + C - 1) % C, tag);
    q->send = comm_isend(xfer_comm(be, cp), xfer_send_view(be, send, q->bytes), n, COMM_F32, (r + 1) % C, tag);
}

void cp_ring_wait(const backend *be, cp_ring_req *q)
{
    comm_wait(q->send);
    comm_wait(q->recv);
    xfer_recv_done(be, q->dst, q->bytes);
    q->send = q->recv = NULL;
}
