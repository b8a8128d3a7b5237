/* The flag table's entry (private to the core floor's args.c and flags.c). */
#ifndef TRIDENT_ARGS_IMPL_H
#define TRIDENT_ARGS_IMPL_H

#include <stddef.h>

#include "trident/args.h"

enum arg_type { A_INT, A_I64, A_FLOAT, A_STR, A_BOOL, A_LIST, A_CHOICE };

typedef struct {
    const char *name;
    enum arg_type type;
    size_t off;
    const char *def; /* default, parsed like a command-line value; NULL: unset */
    unsigned cmds;
    const char *group;
    const char *help;
    double lo, hi;       /* valid range for numbers (inclusive) */
    const char *choices; /* "a|b|c" for A_CHOICE */
} flag_t;

/* Every flag of every subcommand (flags.c): its name, type, field, default, subcommands, group,
 * help and bounds. */
extern const flag_t td_flags[];
extern const int td_nflags;

#endif
