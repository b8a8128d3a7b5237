/* Arena allocator: see include/core/trident/arena.h. */
#include "trident/arena.h"

#include <stdlib.h>

#include "trident/check.h"

#define ARENA_ALIGN 64

void td_arena_init(td_arena *a, size_t cap)
{
    cap = (cap + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
    void *p = NULL;
    if (posix_memalign(&p, ARENA_ALIGN, cap ? cap : ARENA_ALIGN) != 0)
        td_die(__FILE__, __LINE__, "posix_memalign", "reduce the model or micro-batch size",
               "cannot allocate an arena of %zu bytes", cap);
    a->base = p;
    a->cap = cap;
    a->used = a->peak = 0;
    a->owns = 1;
}

void td_arena_wrap(td_arena *a, void *base, size_t cap)
{
    a->base = base;
    a->cap = cap;
    a->used = a->peak = 0;
    a->owns = 0;
}

void td_arena_free(td_arena *a)
{
    if (a->owns) free(a->base);
    a->base = NULL;
    a->cap = a->used = a->peak = 0;
}

void *td_arena_alloc(td_arena *a, size_t n, const char *what)
{
    size_t start = (a->used + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
    if (start > a->cap || n > a->cap - start)
        td_die(__FILE__, __LINE__, "td_arena_alloc", "the arena was sized too small; this is a bug in trident",
               "%s needs %zu bytes but only %zu of %zu are free", what ? what : "allocation", n,
               a->cap - (start < a->cap ? start : a->cap), a->cap);
    a->used = start + n;
    if (a->used > a->peak) a->peak = a->used;
    return a->base + start;
}

size_t td_arena_mark(const td_arena *a) { return a->used; }
void td_arena_release(td_arena *a, size_t mark) { a->used = mark; }
void td_arena_reset(td_arena *a) { a->used = 0; }
