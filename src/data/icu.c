/* ICU opened when first needed: see icu.h. TD_ICU_SONAME comes from the build (CMakeLists.txt). */
#include "icu.h"

#include "trident/dynlib.h"

td_icu_fns td_icu_table;
atomic_int td_icu_ready;

/* each function by the versioned name ICU's header gives it (u_charType -> "u_charType_72") */
#define ICU_SYM(f) TD_DYNSYM(td_icu_table, f)

void td_icu_open(void)
{
    const td_dynsym syms[] = {
        ICU_SYM(u_charAge),
        ICU_SYM(u_charType),
        ICU_SYM(u_errorName),
        ICU_SYM(u_isUWhiteSpace),
        ICU_SYM(u_islower),
        ICU_SYM(u_strFromUTF8),
        ICU_SYM(u_strFromUTF8WithSub),
        ICU_SYM(u_strToLower),
        ICU_SYM(u_strToUTF8),
        ICU_SYM(u_strToUTF8WithSub),
        ICU_SYM(u_strToUpper),
        ICU_SYM(unorm2_getNFCInstance),
        ICU_SYM(unorm2_getNFDInstance),
        ICU_SYM(unorm2_getNFKCInstance),
        ICU_SYM(unorm2_getNFKDInstance),
        ICU_SYM(unorm2_normalize),
    };
    td_dynlib_open(TD_ICU_SONAME, "Unicode text handling (normalizers, character classes, case mapping)",
                   "install ICU (scripts/deps.sh does: apt-get install libicu-dev)", syms,
                   (int)(sizeof syms / sizeof syms[0]));
    atomic_store_explicit(&td_icu_ready, 1, memory_order_release);
}
