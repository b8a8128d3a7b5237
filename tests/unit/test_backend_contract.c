/* The backend contract's list of optional entries (BE_OP_ENTRIES, src/backend/backend.c) held
 * to three things it must agree with: struct be_ops (one row per member, in order, none left
 * out), the cpu backend (every entry the list does not mark optional is filled, in whichever
 * ISA build runs), and docs/backend.md (its "Optional entries" line names exactly the optional
 * rows). be_ops_missing (what be_create refuses a backend by) is held to the same list. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "test_backend_util.h"

typedef void (*fnptr)(void);

static fnptr entry_of(const struct be_ops *o, const be_op_entry *e)
{
    fnptr f;
    memcpy(&f, (const char *)o + e->offset, sizeof f);
    return f;
}

/* The table has a row for every member, in declaration order, each name once: the rows tile the
 * struct from its first entry to its end, one function pointer each. */
static void test_table_covers_the_struct(void **state)
{
    (void)state;
    assert_true(BE_OP_NENTRIES > 50);
    assert_int_equal(BE_OP_ENTRIES[0].offset, offsetof(struct be_ops, alloc));
    for (int i = 1; i < BE_OP_NENTRIES; i++) {
        assert_int_equal(BE_OP_ENTRIES[i].offset, BE_OP_ENTRIES[i - 1].offset + sizeof(fnptr));
        for (int j = 0; j < i; j++) assert_string_not_equal(BE_OP_ENTRIES[i].name, BE_OP_ENTRIES[j].name);
    }
    assert_int_equal(BE_OP_ENTRIES[BE_OP_NENTRIES - 1].offset + sizeof(fnptr), sizeof(struct be_ops));
    /* names are the members': spot checks across the struct */
    struct {
        const char *name;
        size_t off;
    } spot[] = {{"alloc", offsetof(struct be_ops, alloc)},
                {"destroy", offsetof(struct be_ops, destroy)},
                {"matmul_grouped_fwd", offsetof(struct be_ops, matmul_grouped_fwd)},
                {"matmul_grouped_bwd", offsetof(struct be_ops, matmul_grouped_bwd)},
                {"attention_kv_fwd", offsetof(struct be_ops, attention_kv_fwd)},
                {"ce_bwd", offsetof(struct be_ops, ce_bwd)},
                {"describe", offsetof(struct be_ops, describe)}};
    for (size_t s = 0; s < sizeof spot / sizeof spot[0]; s++) {
        int found = 0;
        for (int i = 0; i < BE_OP_NENTRIES; i++)
            if (strcmp(BE_OP_ENTRIES[i].name, spot[s].name) == 0) {
                assert_int_equal(BE_OP_ENTRIES[i].offset, spot[s].off);
                found = 1;
            }
        assert_true(found);
    }
}

/* The cpu backend fills every required entry (and, today, the optional ones too). */
static void test_cpu_fills_every_required_entry(void **state)
{
    (void)state;
    backend *be = be_create("cpu", 1);
    for (int i = 0; i < BE_OP_NENTRIES; i++) {
        if (BE_OP_ENTRIES[i].optional) continue;
        if (!entry_of(be->ops, &BE_OP_ENTRIES[i])) fail_msg("cpu leaves required entry %s NULL", BE_OP_ENTRIES[i].name);
    }
    assert_null(be_ops_missing(be->ops));
    be_free(be);
}

/* be_ops_missing names an entry left NULL exactly when the table does not mark it optional. */
static void test_missing_names_required_entries_only(void **state)
{
    (void)state;
    backend *be = be_create("cpu", 1);
    for (int i = 0; i < BE_OP_NENTRIES; i++) {
        struct be_ops o = *be->ops;
        memset((char *)&o + BE_OP_ENTRIES[i].offset, 0, sizeof(fnptr));
        const char *m = be_ops_missing(&o);
        if (BE_OP_ENTRIES[i].optional)
            assert_null(m);
        else {
            assert_non_null(m);
            assert_string_equal(m, BE_OP_ENTRIES[i].name);
        }
    }
    be_free(be);
}

/* docs/backend.md's line "**Optional entries**: `a`, `b`, ..." names exactly the optional rows. */
static void test_docs_name_the_optional_entries(void **state)
{
    (void)state;
    const char *path = TD_TEST_FIXTURES "/../../docs/backend.md";
    FILE *f = fopen(path, "r");
    if (!f) fail_msg("cannot read %s", path);
    char line[4096], *opt = NULL;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "**Optional entries**", 20) == 0) {
            opt = line;
            break;
        }
    fclose(f);
    if (!opt) fail_msg("%s has no line starting \"**Optional entries**\"", path);
    int ndoc = 0;
    for (char *p = strchr(opt, '`'); p; p = strchr(p, '`')) {
        char *q = strchr(p + 1, '`');
        assert_non_null(q);
        *q = 0;
        int row = -1;
        for (int i = 0; i < BE_OP_NENTRIES; i++)
            if (strcmp(BE_OP_ENTRIES[i].name, p + 1) == 0) row = i;
        if (row < 0) fail_msg("docs/backend.md names `%s`, not an entry of struct be_ops", p + 1);
        if (!BE_OP_ENTRIES[row].optional) fail_msg("docs/backend.md calls `%s` optional; BE_OP_ENTRIES does not", p + 1);
        ndoc++;
        p = q + 1;
    }
    int nopt = 0;
    for (int i = 0; i < BE_OP_NENTRIES; i++) nopt += BE_OP_ENTRIES[i].optional;
    if (ndoc != nopt) fail_msg("docs/backend.md names %d optional entries, BE_OP_ENTRIES marks %d", ndoc, nopt);
}

/* The cpu's own state sits behind impl: its thread count reads back, and a backend that is not
 * the cpu's (another vtable) has none. */
static void test_cpu_state_behind_impl(void **state)
{
    (void)state;
    backend *be = be_create("cpu", 3);
    assert_int_equal(be_cpu_threads(be), 3);
    assert_non_null(be->impl);
    struct be_ops other = *be->ops;
    backend fake = *be;
    fake.ops = &other;
    assert_int_equal(be_cpu_threads(&fake), 0);
    be_free(be);
    be = be_create("cpu", 1);
    assert_int_equal(be_cpu_threads(be), 1);
    be_free(be);
}

int main(void)
{
    tb_skip_unless_isa_runs();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_covers_the_struct),
        cmocka_unit_test(test_cpu_fills_every_required_entry),
        cmocka_unit_test(test_missing_names_required_entries_only),
        cmocka_unit_test(test_docs_name_the_optional_entries),
        cmocka_unit_test(test_cpu_state_behind_impl),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
