/* Shared libraries opened the first time a command needs them (dlopen), not linked: each library
 * linked is loaded, relocated and initialised at every start of every process, and most of
 * trident's processes never serve HTTP, run a bf16 GEMM or normalise text. libmicrohttpd (with
 * GnuTLS and its eight libraries) cost each start 4.5 ms, ICU 1.5 ms, oneDNN 1.2 ms
 * (docs/architecture.md, "Libraries opened when needed"). The caller's table of function
 * pointers keeps each function's C type (__typeof__ of the declaration in the library's header),
 * so calls stay checked by the compiler. */
#ifndef TRIDENT_DYNLIB_H
#define TRIDENT_DYNLIB_H

#ifdef __cplusplus
extern "C" {
#endif

/* One function to look up: its exported name and where its address goes. */
typedef struct {
    const char *name;
    void **fn;
} td_dynsym;

/* The entry for field f of a table whose fields are named as the library's functions: looked up
 * by f's name after macro expansion, so a header that renames its functions (ICU's u_charType is
 * u_charType_72) names the field and the symbol alike. */
#define TD_DYNSYM_NAME2(f) #f
#define TD_DYNSYM_NAME(f) TD_DYNSYM_NAME2(f)
#define TD_DYNSYM(table, f) {TD_DYNSYM_NAME(f), (void **)&(table).f}

/* Opens the library `soname` (once a process: later calls return at once) and fills every
 * syms[i].fn. On failure ends the job with one line naming the library, what needed it (`need`,
 * e.g. "trident serve's HTTP server"), dlerror's reason and `fix` (e.g. the package to install).
 * Thread-safe. */
void td_dynlib_open(const char *soname, const char *need, const char *fix, const td_dynsym *syms, int n);

#ifdef __cplusplus
}
#endif
#endif
