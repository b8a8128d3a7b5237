/* src/data/chat_template.c, ct_*.c: each construct of the Jinja that chat templates use, with
 * the output worked out by hand from @huggingface/jinja's rules (its whitespace handling, its
 * JavaScript number and string printing); errors as one line; hostile templates ending in an
 * error, not a crash or a hang; tokenizer_config.json reading. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "trident/chat_template.h"

static const char *CTX =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": \" Hi \"},"
    " {\"role\": \"assistant\", \"content\": \"Hello\"}], \"add_generation_prompt\": true, \"bos_token\": \"<s>\","
    " \"tools\": null}";

/* Renders src with ctx (CTX when NULL) on 2024-07-26; NULL and the error in err on failure. */
static char *render(const char *src, const char *ctx, char *err, size_t errlen)
{
    ct_template *t = ct_compile(src, err, errlen);
    if (!t) return NULL;
    cJSON *j = cJSON_Parse(ctx ? ctx : CTX);
    assert_non_null(j);
    struct tm now = {.tm_year = 124, .tm_mon = 6, .tm_mday = 26, .tm_hour = 9, .tm_min = 5};
    size_t len = 0;
    char *out = ct_render(t, j, &now, &len, err, errlen);
    if (out) assert_int_equal(len, strlen(out)); /* no case here writes a NUL (see nul_in_output) */
    cJSON_Delete(j);
    ct_free(t);
    return out;
}

static void expect(const char *src, const char *want)
{
    char err[512] = "";
    char *got = render(src, NULL, err, sizeof err);
    if (!got) {
        print_error("template: %s\nerror: %s\n", src, err);
        fail();
    }
    if (strcmp(got, want) != 0) {
        print_error("template: %s\n got: [%s]\nwant: [%s]\n", src, got, want);
        free(got);
        fail();
    }
    free(got);
}

/* Fails unless src fails to compile or render with an error containing `part` (any, if NULL), on one line. */
static void expect_error(const char *src, const char *part)
{
    char err[512] = "";
    char *got = render(src, NULL, err, sizeof err);
    if (got) {
        print_error("template: %s\nrendered [%s], wanted an error with '%s'\n", src, got, part);
        free(got);
        fail();
    }
    if ((part && !strstr(err, part)) || strchr(err, '\n') || !err[0]) {
        print_error("template: %s\nerror [%s], wanted one line with '%s'\n", src, err, part);
        fail();
    }
}

static void text_and_expressions(void **state)
{
    (void)state;
    expect("", "");
    expect("plain text", "plain text");
    expect("trailing newline dropped\n", "trailing newline dropped");
    expect("two\n\n", "two\n");
    expect("{{ 'a' }}{{ \"b\" }}{{ 'c' 'd' }}", "abcd");
    expect("{{ bos_token }}x", "<s>x");
    expect("[{{ missing }}][{{ none }}][{{ missing.deeper }}]", "[][][]"); /* undefined and null print nothing */
    expect("{{ true }} {{ false }} {{ True }}", "true false true");
    expect("{# a comment #}x", "x");
    expect("{{ '\\n\\t\\\\\\'\\x41\\u00e9' }}", "\n\t\\'A\xc3\xa9");
}

static void whitespace_control(void **state)
{
    (void)state;
    expect("a  {{- 'b' -}}  c", "abc");
    expect("a  {%- if true -%}  b  {%- endif -%}  c", "abc");
    expect("a {#- c -#} b", "ab");
    /* trim_blocks: the newline after a block tag goes; lstrip_blocks: spaces before one */
    expect("x\n  {% if true %}\n  y\n  {% endif %}\nz", "x\n  y\nz");
    expect("{{ 'e' }}\nf", "e\nf"); /* not after an expression */
    expect("a {% generation %} b {% endgeneration %} c", "a  b  c");
    expect("a {%- generation -%} b {% endgeneration %} c", "ab  c");
}

static void conditionals_and_loops(void **state)
{
    (void)state;
    expect("{% if 0 %}a{% elif '' %}b{% elif [1] %}c{% else %}d{% endif %}", "c");
    expect("{% if {} or [] or none %}t{% else %}f{% endif %}", "f");
    expect("{% for m in messages %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}"
           "{{ loop.first }}{{ loop.last }}{{ loop.length }},{% endfor %}",
           "1032truefalse3,2121falsefalse3,3210falsetrue3,");
    expect("{% for m in messages if m.role != 'system' %}{{ loop.index }}{{ m.role }}{% endfor %}", "1user2assistant");
    expect("{% for x in [] %}a{% else %}empty{% endfor %}", "empty");
    expect("{% for x in [1, 2, 3, 4] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}"
           "{% endfor %}", "13");
    expect("{% for x in [1] %}{% continue %}{% else %}else runs{% endfor %}", "else runs"); /* as the reference */
    expect("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}", "a=1;b=2;");
    expect("{% for k in {'x': 1, 'y': 2} %}{{ k }}{% endfor %}", "xy");
    expect("{% for m in messages %}{{ loop.previtem.role if loop.previtem is defined else '^' }}{% endfor %}",
           "^systemuser");
}

static void assignments(void **state)
{
    (void)state;
    expect("{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{% endfor %}{{ x }}", "1"); /* a loop is a scope */
    expect("{% set x = 1 %}{% if true %}{% set x = 2 %}{% endif %}{{ x }}", "2"); /* an if is not */
    expect("{% set ns = namespace(n=0) %}{% for i in [1, 2, 3] %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}", "6");
    expect("{% set a, b = [1, 2] %}{{ b }}{{ a }}", "21");
    expect("{% set s %}x{{ 1 + 1 }}{% endset %}[{{ s }}]", "[x2]");
    expect("{% set x = [] | first %}[{{ x }}]", "[]"); /* a JavaScript undefined kept by set prints nothing */
    /* the reference's instanceof tests take it (false); default() without its flag passes it on */
    expect("{{ ([] | last) is sequence }}{{ ([] | first) is not number }}{% set y = ([] | first) | default('d') %}[{{ y }}]",
           "falsetrue[]");
    /* inside a list or dict literal it stays until used: a join of the list's string skips it */
    expect("{% if {'a': [] | first} %}T{% endif %}{{ [[] | first, 1] | length }}{{ [[] | first, 2] ~ 'x' }}", "T2,2x");
}

static void arithmetic_and_numbers(void **state)
{
    (void)state;
    expect("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }}", "3 -4 1 -1"); /* % keeps the dividend's sign (JS) */
    expect("{{ 7 / 2 }} {{ 6 / 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }}", "3.5 3.0 1024 0.5");
    expect("{{ 1.5 + 1 }} {{ 3 * 1.0 }} {{ 0.1 + 0.2 }} {{ 10 - 2 - 3 }}", "2.5 3.0 0.30000000000000004 5");
    expect("{{ 1.0 }} {{ 1.0 ~ '' }} {{ 100.0 / 3 }} {{ 0.0000001 }} {{ -0.0 }}", "1.0 1 33.333333333333336 1e-7 -0.0");
    expect("{{ 1000000 * 1000000 }} {{ 2 ** 70 }}", "1000000000000 1.1805916207174113e+21");
    expect("{{ [1.0, 2] }}", "[1, 2]"); /* JSON.stringify prints 1.0 as 1 */
    expect("{{ 1 < 2 }}{{ 2 >= 3 }}{{ -(3) }}{{ +4 }}", "truefalse-34");
}

static void comparisons(void **state)
{
    (void)state;
    expect("{{ 1 == 1.0 }}{{ '1' == 1 }}{{ true == 1 }}{{ missing == none }}", "truetruetruetrue"); /* JS == */
    expect("{{ [1] == [1] }}{{ messages == messages }}", "falsetrue");
    /* an array against a primitive: its join(",") (ToPrimitive); a dict is "[object Map]" */
    expect("{{ [] == false }}{{ [1, 2] == '1,2' }}{{ [1] == 1 }}{{ [[1, 2]] == '1,2' }}{{ {} == '[object Map]' }}",
           "truetruetruefalsetrue");
    /* none is a NullValue holding JavaScript's undefined: "undefined" inside an array's string,
     * and === to an undefined */
    expect("{{ [none, 1] ~ '' }}{{ [none, missing] | unique | length }}", "undefined,11");
    expect("{{ 'b' in 'abc' }}{{ 2 in [1, 2] }}{{ 'a' in {'a': 1} }}{{ 'z' not in 'abc' }}{{ 1 in missing }}",
           "truetruetruetruefalse");
    expect("{{ [] or 'x' }}{{ 'y' and 'z' }}{{ not [] }}{{ none or 0 or '' or 'last' }}", "xztruelast");
    expect("{{ 'yes' if add_generation_prompt else 'no' }}[{{ 'x' if false }}]", "yes[]");
}

static void tests(void **state)
{
    (void)state;
    expect("{{ 1 is number }}{{ 1.5 is integer }}{{ 'a' is string }}{{ none is none }}{{ missing is defined }}"
           "{{ missing is undefined }}{{ {} is mapping }}{{ [] is iterable }}{{ 'a' is sequence }}{{ 3 is odd }}"
           "{{ 3 is not even }}{{ true is boolean }}{{ 'abc' is lower }}",
           "truefalsetruetruefalsetruetruetruetruetruetruetruetrue");
    expect("{{ (1, 2) is iterable }}", "false"); /* a tuple is no ArrayValue to the reference */
}

static void filters(void **state)
{
    (void)state;
    expect("[{{ '  a b  ' | trim }}][{{ 'abc' | upper }}][{{ 'ABC' | lower }}][{{ 'ab cd' | title }}]"
           "[{{ 'aB cD' | capitalize }}]", "[a b][ABC][abc][Ab Cd][AB cD]");
    expect("{{ messages | length }}{{ 'h\xc3\xa9' | length }}{{ '\xf0\x9f\x98\x80' | length }}", "322"); /* UTF-16 units */
    expect("{{ [3, 1, 2] | sort }}{{ [3, 1, 2] | reverse }}{{ [3, 1, 2] | first }}{{ [3, 1, 2] | last }}",
           "[1, 2, 3][2, 1, 3]32");
    expect("{{ [1, 'a', none] | join(',') }}|{{ 'abc' | join('-') }}|{{ ['b', 'a', 'b'] | unique }}", "1,a,|a-b-c|[\"b\", \"a\"]");
    expect("{{ '42' | int }}{{ ' 12abc' | int }}{{ 'x' | int(7) }}{{ '3.5' | float }}{{ -3.7 | int }}{{ true | int }}",
           "421273.5-41");
    expect("{{ missing | default('d') }}{{ '' | default('e') }}{{ '' | default('e', true) }}{{ none | default('n') }}", "de");
    expect("{{ 'a\nb\n\nc' | indent }}|{{ 'a\nb' | indent(2, true) }}", "a\n    b\n\n    c|  a\n  b");
    expect("{{ messages | selectattr('role', 'equalto', 'user') | map(attribute='content') | join }}", " Hi ");
    expect("{{ messages | rejectattr('role', 'equalto', 'user') | map(attribute='role') | join(',') }}", "system,assistant");
    expect("{{ {'b': 1, 'a': 2} | dictsort }}{{ {'b': 1} | items }}", "[[\"a\", 2], [\"b\", 1]][[\"b\", 1]]");
    expect("{% filter upper %}ab{{ 'c' }}{% endfilter %}", "ABC");
    expect("{{ 'x' | safe }}{{ 5 | string }}{{ 2.0 | string }}{{ false | string }}", "x52.0false");
}

static void tojson(void **state)
{
    (void)state;
    expect("{{ messages[0] | tojson }}", "{\"role\": \"system\", \"content\": \"Be brief.\"}");
    expect("{{ {'a': [1, {'b': none}]} | tojson(indent=2) }}",
           "{\n  \"a\": [\n    1,\n    {\n      \"b\": null\n    }\n  ]\n}");
    expect("{{ [1, 2] | tojson(separators=(',', ':')) }}{{ [] | tojson(indent=4) }}", "[1,2][]");
    expect("{{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }}", "{\"a\": 2, \"b\": 1}");
    expect("{{ '\xc3\xa9\xf0\x9f\x98\x80\"\\\\\n' | tojson }}", "\"\xc3\xa9\xf0\x9f\x98\x80\\\"\\\\\\n\"");
    expect("{{ '\xc3\xa9\xf0\x9f\x98\x80' | tojson(ensure_ascii=true) }}", "\"\\u00e9\\ud83d\\ude00\"");
    expect("{{ missing | tojson }}{{ tools | tojson }}", "nullnull");
}

static void strings_and_methods(void **state)
{
    (void)state;
    expect("[{{ ' x '.strip() }}][{{ ' x '.lstrip() }}][{{ ' x '.rstrip() }}][{{ 'aB'.upper() }}][{{ 'aB'.lower() }}]",
           "[x][x ][ x][AB][ab]");
    expect("[{{ '\xc2\xa0x\xe3\x80\x80'.strip() }}]", "[x]"); /* JavaScript's trim: NBSP, ideographic space */
    expect("{{ 'a,b,,c'.split(',') }}{{ 'a,b,c'.split(',', 1) }}{{ '  a  b '.split() }}",
           "[\"a\", \"b\", \"\", \"c\"][\"a\", \"b,c\"][\"a\", \"b\"]");
    expect("{{ 'aaa'.replace('a', 'b') }}{{ 'aaa'.replace('a', 'b', 2) }}{{ 'ab'.replace('', '-') }}", "bbbbba-a-b-");
    expect("{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith(('x', 'c')) }}", "truetrue");
    expect("{{ 'abcdef'[1:4] }}{{ 'abc'[::-1] }}{{ 'abc'[-1] }}{{ 'abc'[0] }}[{{ 'abc'[10] }}]", "bcdcbaca[]");
    expect("{{ [1, 2, 3, 4][1:] }}{{ [1, 2, 3, 4][::2] }}{{ [1, 2, 3][-2:] }}", "[2, 3, 4][1, 3][2, 3]");
    expect("{{ 'a' + 'b' }}{{ 'a' ~ 1 ~ 2.0 }}{{ 'n' + 1 }}", "aba12n1");
    expect("{{ messages[0].get('role') }}{{ messages[0].get('zz', 'd') }}[{{ messages[0].get('zz') }}]", "systemd[]");
    expect("{{ {'a': 1}.keys() }}{{ {'a': 1}.values() }}{{ messages[1]['content'] }}", "[\"a\"][1] Hi ");
}

static void macros_and_globals(void **state)
{
    (void)state;
    expect("{% macro f(x, p='*') %}{{ p }}{{ x }}{% endmacro %}{{ f(1) }}{{ f(2, '#') }}{{ f(3, p='!') }}", "*1#2!3");
    expect("{% macro f(a) %}{{ a }}|{{ varargs | length }}|{{ kwargs | tojson }}{% endmacro %}{{ f(1, 2, 3, x=4) }}",
           "1|2|{\"x\": 4}");
    expect("{% macro w(t) %}<{{ t }}>{{ caller() }}</{{ t }}>{% endmacro %}{% call w('b') %}in{% endcall %}", "<b>in</b>");
    expect("{{ range(3) | list }}{{ range(1, 10, 4) | list }}{{ range(3, 0, -1) | list }}", "[0, 1, 2][1, 5, 9][3, 2, 1]");
    expect("{{ strftime_now('%Y-%m-%d %H:%M %b %B %%') }}", "2024-07-26 09:05 Jul July %");
}

static void errors(void **state)
{
    (void)state;
    expect_error("{{ raise_exception('Roles must alternate\nreally') }}", "raise_exception: Roles must alternate really");
    expect_error("{{ raise_exception(none) }}", "raise_exception: "); /* new Error(undefined): "" */
    expect_error("{% if %}x{% endif %}", "template syntax");
    expect_error("{% for m in messages %}x", "missing {% endfor %}");
    expect_error("{{ 'unterminated }}", "unexpected end of input");
    expect_error("{% include 'x' %}", "unknown statement 'include'");
    expect_error("{{ messages | frobnicate }}", "unknown ArrayValue filter: frobnicate");
    expect_error("{{ 'a' < 'b' }}", "unknown operator"); /* the reference orders no strings with < */
    expect_error("{{ missing + 1 }}", "undefined");
    expect_error("{{ none ~ 'x' }}", "null");
    expect_error("{{ [] | first }}", "undefined in JavaScript");
    expect_error("{{ ([] | first) is defined }}", "undefined in JavaScript"); /* .type of undefined throws there */
    expect_error("{% break %}", "outside a for loop");
    expect_error("{{ 'x'.format(1) }}", "not a function");
    expect_error("{{ é }}", "unexpected character");
    char err[256];
    cJSON *j = cJSON_Parse("{\"raise_exception\": 1}");
    ct_template *t = ct_compile("x", err, sizeof err);
    assert_null(ct_render(t, j, NULL, NULL, err, sizeof err)); /* a context may not redeclare a global */
    assert_non_null(strstr(err, "already declared"));
    ct_free(t);
    cJSON_Delete(j);
}

/* Untrusted templates: each ends with an error within the bounds, not a crash or a hang. */
static void hostile_templates(void **state)
{
    (void)state;
    size_t n = 20000;
    char *deep = malloc(3 * n + 16);
    strcpy(deep, "{{ ");
    for (size_t i = 0; i < n; i++) strcat(deep + 3 + i, "(");
    strcat(deep, "1 }}");
    expect_error(deep, "nested deeper");
    char *ifs = malloc(16 * n + 16);
    ifs[0] = 0;
    for (size_t i = 0, at = 0; i < 2000; i++) at += (size_t)sprintf(ifs + at, "{%% if true %%}");
    expect_error(ifs, "nested deeper");
    free(ifs);
    free(deep);
    expect_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "macro calls nest deeper than 200");
    char *chain = malloc(2 * 3000 + 16);
    strcpy(chain, "{{ 1");
    for (int i = 0; i < 3000; i++) strcat(chain + 4 + 2 * i, "+1");
    strcat(chain, " }}");
    expect_error(chain, "nests deeper than 1000");
    chain[4 + 2 * 900] = 0; /* 901 terms: within the bound */
    strcat(chain, " }}");
    expect(chain, "901");
    free(chain);
    /* 10^10 iterations: the step or the memory bound ends it */
    expect_error("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", NULL);
    expect_error("{% set ns = namespace(s='xxxxxxxxxxxxxxxx') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}"
                 "{% endfor %}{{ ns.s }}", "MiB");
    expect("[{{ 'abc'[::0] }}]", "[]"); /* a zero step selects nothing in the reference's slice() */
}

static void load_config(void **state)
{
    (void)state;
    char path[] = "/tmp/trident_ct_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fputs("{\"chat_template\": [{\"name\": \"default\", \"template\": \"D\"}, {\"name\": \"tool_use\", \"template\": \"T\"}],"
          " \"bos_token\": {\"__type\": \"AddedToken\", \"content\": \"<s>\"}, \"eos_token\": \"</s>\", \"pad_token\": \"\","
          " \"unk_token\": null}", f);
    fclose(f);
    ct_config c;
    char err[256];
    assert_int_equal(ct_load_config(path, &c, err, sizeof err), 0);
    assert_string_equal(c.template_src, "D");
    assert_string_equal(c.tool_template_src, "T");
    assert_string_equal(c.special[CT_BOS], "<s>");
    assert_string_equal(c.special[CT_EOS], "</s>");
    assert_null(c.special[CT_PAD]); /* empty: transformers.js passes no such token */
    assert_null(c.special[CT_UNK]);
    cJSON *m = cJSON_Parse("[]");
    cJSON *kw = cJSON_Parse("{\"enable_thinking\": false, \"bos_token\": \"B\"}");
    cJSON *ctx = ct_chat_context(&c, m, 1, NULL, kw);
    char *s = cJSON_PrintUnformatted(ctx);
    assert_string_equal(s, "{\"messages\":[],\"add_generation_prompt\":true,\"tools\":null,\"documents\":null,"
                           "\"bos_token\":\"B\",\"eos_token\":\"</s>\",\"enable_thinking\":false}");
    cJSON_Delete(kw);
    free(s);
    cJSON_Delete(ctx);
    cJSON_Delete(m);
    ct_config_free(&c);
    f = fopen(path, "w");
    fputs("{\"chat_template\": 5}", f);
    fclose(f);
    assert_int_equal(ct_load_config(path, &c, err, sizeof err), -1);
    assert_non_null(strstr(err, "chat_template must be"));
    unlink(path);
    assert_int_equal(ct_load_config("/nonexistent/tokenizer_config.json", &c, err, sizeof err), -1);
}

/* A NUL the template writes itself ('\x00') is in the output: *len counts past it. */
static void nul_in_output(void **state)
{
    (void)state;
    char err[256];
    ct_template *t = ct_compile("{{ 'a\\x00b' }}", err, sizeof err);
    assert_non_null(t);
    size_t len = 0;
    char *out = ct_render(t, NULL, NULL, &len, err, sizeof err);
    assert_non_null(out);
    assert_int_equal(len, 3);
    assert_memory_equal(out, "a\0b", 4);
    free(out);
    ct_free(t);
}

int main(void)
{
    const struct CMUnitTest tests_[] = {
        cmocka_unit_test(text_and_expressions), cmocka_unit_test(whitespace_control),
        cmocka_unit_test(conditionals_and_loops), cmocka_unit_test(assignments),
        cmocka_unit_test(arithmetic_and_numbers), cmocka_unit_test(comparisons),
        cmocka_unit_test(tests), cmocka_unit_test(filters),
        cmocka_unit_test(tojson), cmocka_unit_test(strings_and_methods),
        cmocka_unit_test(macros_and_globals), cmocka_unit_test(errors),
        cmocka_unit_test(hostile_templates), cmocka_unit_test(load_config),
        cmocka_unit_test(nul_in_output),
    };
    return cmocka_run_group_tests(tests_, NULL, NULL);
}
