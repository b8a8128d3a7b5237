/* ICU, opened the first time a tokenizer or a template needs it (trident/dynlib.h), not linked:
 * linked, it cost every start of every trident process 1.5 ms, and most processes (a rank of a
 * run on a preprocessed dataset, a conversion) never normalise text. Calls go through the table:
 * `td_icu()->u_charType(c)`. ICU renames its functions by version (u_charType is u_charType_72 in
 * ICU 72, through its header's macros): the table's fields take the same names, so the calls read
 * as ICU's own and the symbols looked up are the versioned ones the header names. Private to the
 * data floor. */
#ifndef TRIDENT_DATA_ICU_H
#define TRIDENT_DATA_ICU_H

#include <stdatomic.h>

#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>
#include <unicode/utypes.h>

typedef struct {
    __typeof__(u_charAge) *u_charAge;
    __typeof__(u_charType) *u_charType;
    __typeof__(u_errorName) *u_errorName;
    __typeof__(u_isUWhiteSpace) *u_isUWhiteSpace;
    __typeof__(u_islower) *u_islower;
    __typeof__(u_strFromUTF8) *u_strFromUTF8;
    __typeof__(u_strFromUTF8WithSub) *u_strFromUTF8WithSub;
    __typeof__(u_strToLower) *u_strToLower;
    __typeof__(u_strToUTF8) *u_strToUTF8;
    __typeof__(u_strToUTF8WithSub) *u_strToUTF8WithSub;
    __typeof__(u_strToUpper) *u_strToUpper;
    __typeof__(unorm2_getNFCInstance) *unorm2_getNFCInstance;
    __typeof__(unorm2_getNFDInstance) *unorm2_getNFDInstance;
    __typeof__(unorm2_getNFKCInstance) *unorm2_getNFKCInstance;
    __typeof__(unorm2_getNFKDInstance) *unorm2_getNFKDInstance;
    __typeof__(unorm2_normalize) *unorm2_normalize;
} td_icu_fns;

extern td_icu_fns td_icu_table;
extern atomic_int td_icu_ready;
/* Opens ICU's common library and fills td_icu_table (once; thread-safe); ends the job with one
 * line if it cannot. */
void td_icu_open(void);

/* The table, opened on the first call from any thread. */
static inline const td_icu_fns *td_icu(void)
{
    if (!atomic_load_explicit(&td_icu_ready, memory_order_acquire)) td_icu_open();
    return &td_icu_table;
}

#endif
