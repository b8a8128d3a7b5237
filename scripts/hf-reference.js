#!/usr/bin/env node
// Hugging Face's tokenizers library (Rust, npm @anush008/tokenizers, installed by
// scripts/test-deps.sh) run over test inputs, for the tokenizer.json tests. It never sees
// trident's output.
//
//   hf-reference.js encode NODE_MODULES TOKENIZER.json FILE [--lines]
//        ids of FILE (UTF-8) as `trident tokenize [--whole]` prints them: encode(text,
//        add_special_tokens=false), one line per input line (--lines) or one for the whole file
//   hf-reference.js random SEED N OUT.txt   N lines of random Unicode text with special tokens
//   hf-reference.js tricky OUT.txt          tricky strings, one per line
//   hf-reference.js info NODE_MODULES TOKENIZER.json   vocab size, then BOS and EOS candidates
//
// NODE_MODULES is <build>/node/node_modules.
'use strict';
const fs = require('fs');
const path = require('path');

function load(modules, file) {
  const dir = path.join(path.resolve(modules), '@anush008', 'tokenizers');
  if (!fs.existsSync(dir)) {
    console.error(`hf-reference: ${dir} not found; run scripts/test-deps.sh <build dir> to install the reference ` +
                  '(npm @anush008/tokenizers)');
    process.exit(1);
  }
  const { Tokenizer } = require(dir);
  return Tokenizer.fromFile(file);
}

function readUtf8(file) {
  return new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }).decode(fs.readFileSync(file));
}

async function encodeCmd(modules, tokfile, file, lines) {
  const tok = load(modules, tokfile);
  const text = readUtf8(file);
  const opts = { addSpecialTokens: false };
  const out = [];
  if (lines) {
    const parts = text.split('\n');
    if (parts[parts.length - 1] === '') parts.pop();
    const BATCH = 512;
    for (let i = 0; i < parts.length; i += BATCH) {
      const encs = await tok.encodeBatch(parts.slice(i, i + BATCH), opts);
      for (const e of encs) out.push(e.getIds().join(' '));
    }
  } else {
    out.push((await tok.encode(text, null, opts)).getIds().join(' '));
  }
  fs.writeSync(1, out.join('\n') + (out.length ? '\n' : ''));
}

// ---- generated inputs -----------------------------------------------------------------------

function rng(seed) { // mulberry32
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const ASSIGNED = /^\P{Cn}$/u;
const PIECES = [
  "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", "'Re", "''", ' ', ' ', ' ', '  ', '   ', '\t', '\r',
  '\r\n', '\u00a0', '\ufeff', '\u0085', '\u180e', '\u2028', '\u3000', '\u200b', '\u200d', '\u0301', '...', '!?',
  '--', '"', ',', '0', '12', '1234', '12345678', '³', '½', 'Ⅻ', '٣', 'a', 'Z', 'é', 'ß', 'ſ', 'K', 'я', 'λ', 'א',
  'ع', 'ह', '中', '日本', '한', 'ア', '👍', '👩‍👩‍👧', '🇯🇵', '🏳️‍🌈', '👋🏽', '𝔘', '𠀀', '\u{31350}', '\u{1e4f0}',
  '\u{1d2c0}', '▁', '▁▁', '<0x41>', '<unk>', '<s>', '</s>', '<|endoftext|>', '<|end_of_text|>',
  '<|begin_of_text|>', '<|reserved_special_token_5|>', '<|eot_id|>', '<|end_of_text', 'end_of_text|>',
];
const RANGES = [[0x20, 0x7e], [0xa0, 0x24f], [0x370, 0x52f], [0x590, 0x6ff], [0x900, 0xdff], [0x1100, 0x11ff],
  [0x1d00, 0x1fff], [0x2000, 0x2bff], [0x3000, 0x30ff], [0x4e00, 0x9fff], [0xac00, 0xd7a3], [0xfb00, 0xffef],
  [0x10000, 0x1ffff], [0x20000, 0x3ffff], [0xe0000, 0xe01ef]];

function randomChar(r) {
  for (;;) {
    const g = RANGES[Math.floor(r() * RANGES.length)];
    const cp = g[0] + Math.floor(r() * (g[1] - g[0] + 1));
    if (cp >= 0xd800 && cp <= 0xdfff) continue;
    const c = String.fromCodePoint(cp);
    // assigned in this node's Unicode: the reference's Oniguruma and trident's tables agree on
    // those up to Unicode 16.0 (docs/tokenizer.md)
    if (c !== '\n' && ASSIGNED.test(c)) return c;
  }
}

function randomLine(r) {
  let s = '';
  const n = Math.floor(r() * r() * 80);
  for (let i = 0; i < n; i++) {
    const x = r();
    if (x < 0.35) s += PIECES[Math.floor(r() * PIECES.length)];
    else if (x < 0.97) s += randomChar(r);
    else s += randomChar(r).repeat(1 + Math.floor(r() * 300));
  }
  return s;
}

function randomCmd(seed, n, out) {
  const r = rng(Number(seed));
  const lines = [];
  for (let i = 0; i < Number(n); i++) lines.push(randomLine(r));
  fs.writeFileSync(out, lines.join('\n') + '\n');
}

const TRICKY = [
  '', ' ', '  ', '   ', '\t', ' \t  ', 'a', 'Hello world', 'Hello, world!', 'hello   world   ', 'trailing space ',
  '   leading spaces', 'tabs\tand\t\ttabs', 'CR\rin\r\rline', 'crlf at end\r', "It's", "IT'S", "It'S", "it'Ll",
  "don't won't can't", "we're you've I'm they'll he'd", "WE'RE YOU'VE I'M THEY'LL HE'D", "'s 's's", "rock 'n' roll",
  "''quoted''", "o'clock", "y'all'd've", "'ſ 'K", '12345', '1234567890123', '3.14159', '1,000,000', 'x=1+2*3',
  '0x7fff', 'ⅫⅣ ½ ¾ ³²', '٠١٢٣ ۴۵۶', '१२३ ๑๒๓', '!!!', '?!?!', '...', '—–-', '"quoted"', '(a) [b] {c}',
  '#$%&*@^_`|~', '!!!\r\r\r', '?? \t\t', 'naïve café résumé', 'Straße groß', 'Ελληνικά κείμενα', 'Русский текст',
  'עברית', 'العربية', 'हिन्दी', 'தமிழ்', 'ภาษาไทย', '中文字符', '日本語のテキスト', '한국어 텍스트', '𠀀𠀁𠀂',
  '𝔘𝔫𝔦𝔠𝔬𝔡𝔢', 'e\u0301 a\u0308 n\u0303', '👍', '👍🏽 👋🏿', '👩‍👩‍👧‍👦', '👨‍💻 🏳️‍🌈 🏴‍☠️', '🇯🇵🇺🇸🇩🇪',
  'I ❤️ emoji 😀😃😄', '©®™', '\u00a0', 'a\u00a0b', '\ufeffBOM', 'a\u0085b', 'a\u180eb', 'a\u2028b', 'a\u3000b',
  'a\u200bb', ' \u00a0 \ufeff \u3000 x', 'x'.repeat(300), 'ab'.repeat(500), ' '.repeat(100) + 'x', '!'.repeat(200),
  '1234567890'.repeat(20), 'a\u0001b\u001fc\u007f', '\u{10ffff}', '\ue000 private use', '\u{31350}\u{1e4f0}x',
  'def f(x):\tpass  # c', '    indented', 'Mixed 123abc ABC123 a1b2', '▁', '▁▁x', 'a▁b', ' ▁ ',
  '<0x41>', '<0xZZ>', '<unk>', '<unk><unk>', '<s>', '</s>', 'a</s>b', ' </s> ', '</s></s>', '<s>hello</s>',
  '<|endoftext|>', '<|end_of_text|>', 'x<|end_of_text|>y', ' <|end_of_text|> ', '<|begin_of_text|>Hi',
  '<|end_of_text|><|end_of_text|>', '<|reserved_special_token_0|>', '<|eot_id|>', '<|end_of_text', '<|<|end_of_text|>',
  'First Citizen: Before we proceed any further, hear me speak.',
];

function trickyCmd(out) {
  fs.writeFileSync(out, TRICKY.join('\n') + '\n');
}

async function infoCmd(modules, tokfile) {
  const tok = load(modules, tokfile);
  console.log(tok.getVocabSize(true));
}

const [cmd, ...args] = process.argv.slice(2);
(async () => {
  if (cmd === 'encode' && (args.length === 3 || (args.length === 4 && args[3] === '--lines'))) {
    await encodeCmd(args[0], args[1], args[2], args.length === 4);
  } else if (cmd === 'random' && args.length === 3) {
    randomCmd(args[0], args[1], args[2]);
  } else if (cmd === 'tricky' && args.length === 1) {
    trickyCmd(args[0]);
  } else if (cmd === 'info' && args.length === 2) {
    await infoCmd(args[0], args[1]);
  } else {
    console.error('usage: hf-reference.js encode NODE_MODULES TOKENIZER.json FILE [--lines] | random SEED N OUT.txt | ' +
                  'tricky OUT.txt | info NODE_MODULES TOKENIZER.json');
    process.exit(2);
  }
})().catch(e => { console.error('hf-reference:', e); process.exit(1); });
