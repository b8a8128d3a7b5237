/* Arena allocator. Owns one block sized once; allocations are bumped from it, 64-byte
 * aligned, and released together (reset) or back to a mark. Activations live here. */
#ifndef TRIDENT_ARENA_H
#define TRIDENT_ARENA_H

#include <stddef.h>

typedef struct td_arena {
    char *base;
    size_t cap;  /* bytes */
    size_t used; /* bytes */
    size_t peak; /* high-water mark of used */
    int owns;    /* base was allocated by td_arena_init */
} td_arena;

/* Allocates `cap` bytes; dies with a clear message when memory is short. */
void td_arena_init(td_arena *a, size_t cap);
/* Uses caller memory [base, base+cap) instead of allocating. */
void td_arena_wrap(td_arena *a, void *base, size_t cap);
void td_arena_free(td_arena *a);
/* Returns n bytes, 64-byte aligned; dies naming `what` if the arena is full. */
void *td_arena_alloc(td_arena *a, size_t n, const char *what);
size_t td_arena_mark(const td_arena *a);
void td_arena_release(td_arena *a, size_t mark);
void td_arena_reset(td_arena *a);

#endif
