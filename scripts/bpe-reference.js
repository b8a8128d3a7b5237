#!/usr/bin/env node
// GPT-2's reference encoder (npm gpt-3-encoder@1.1.4, installed by scripts/test-deps.sh) run
// over test inputs, for the tokenizer tests. It never sees trident's output.
//
//   bpe-reference.js fixtures MODULE_DIR OUT.jsonl    tricky strings + reference ids (committed)
//   bpe-reference.js random SEED N OUT.txt            N lines of random Unicode text
//   bpe-reference.js encode MODULE_DIR FILE [--lines] reference ids of FILE (UTF-8), as
//                                                     `trident tokenize [--whole]` prints them
//   bpe-reference.js encode-both MODULE_DIR FILE WHOLE_OUT LINES_OUT   both of encode's outputs
//                                                     (whole, --lines) written to two files
//
// MODULE_DIR is <build>/node/node_modules/gpt-3-encoder.
'use strict';
const fs = require('fs');
const path = require('path');

// The reference's encode() grows its result with Array.concat, quadratic in the number of tokens
// (minutes for tinyshakespeare). Its output is a function of the regex chunks alone, so a long
// text is cut where a chunk boundary is certain and the pieces are encoded one by one: after a
// "\n" with non-space on both sides. There the whole text has the chunk "\n" (neither \s+(?!\S)
// nor \s+ can reach past the next character, and no other alternative takes "\n"), and so does a
// piece that ends with it. checkSplit() holds this against one whole call.
const SPACE = /\s/u;
function encodeLong(ref, text) {
  const ids = [];
  let start = 0;
  for (let i = 1; i + 1 < text.length; i++) {
    if (text[i] !== '\n' || i - start < 4096) continue;
    if (SPACE.test(text[i - 1]) || SPACE.test(text[i + 1])) continue;
    for (const id of ref.encode(text.slice(start, i + 1))) ids.push(id);
    start = i + 1;
  }
  for (const id of ref.encode(text.slice(start))) ids.push(id);
  return ids;
}

function checkSplit(ref, text) {
  const sample = text.slice(0, 40000);
  const a = JSON.stringify(ref.encode(sample)), b = JSON.stringify(encodeLong(ref, sample));
  if (a !== b) {
    console.error('bpe-reference: encoding in pieces differs from one call; the split rule is wrong');
    process.exit(1);
  }
}

function load(moduleDir) {
  const file = path.join(moduleDir, 'Encoder.js');
  if (!fs.existsSync(file)) {
    console.error(`bpe-reference: ${file} not found; run scripts/test-deps.sh <build dir> to install the ` +
                  'reference encoder (npm gpt-3-encoder@1.1.4)');
    process.exit(1);
  }
  return require(path.resolve(file));
}

function readUtf8(file) {
  const bytes = fs.readFileSync(file);
  const text = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }).decode(bytes);
  return text;
}

// The ids of text, whole (one line) or line by line, as the lines of one string.
function encodeText(ref, text, lines) {
  const out = [];
  if (lines) {
    const parts = text.split('\n');
    if (parts[parts.length - 1] === '') parts.pop(); // the newline ends the last line
    for (const line of parts) out.push(ref.encode(line).join(' '));
  } else {
    checkSplit(ref, text);
    out.push(encodeLong(ref, text).join(' '));
  }
  return out.join('\n') + (out.length ? '\n' : '');
}

function encodeCmd(moduleDir, file, lines) {
  fs.writeSync(1, encodeText(load(moduleDir), readUtf8(file), lines));
}

// Both encodings of one file from one start of node and of the encoder (whose word cache the
// second then finds warm: the same ids, half the time of two runs).
function encodeBothCmd(moduleDir, file, wholeOut, linesOut) {
  const ref = load(moduleDir);
  const text = readUtf8(file);
  fs.writeFileSync(wholeOut, encodeText(ref, text, false));
  fs.writeFileSync(linesOut, encodeText(ref, text, true));
}

// ---- random Unicode text -----------------------------------------------------------------

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
  "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", "''", ' ', ' ', ' ', '  ', '\t', '\r', '\u00a0',
  '\ufeff', '\u0085', '\u180e', '\u2028', '\u3000', '\u200b', '\u200d', '\u0301', '...', '!?', '--', '"',
  ',', '0', '12', '³', '½', 'Ⅻ', '٣', 'a', 'Z', 'é', 'ß', 'я', 'λ', 'א', 'ع', 'ह', '中', '日本', '한', 'ア',
  '👍', '👩‍👩‍👧', '🇯🇵', '🏳️‍🌈', '👋🏽', '𝔘', '𠀀', '\u{31350}', '\u{1e4f0}', '\u{1d2c0}', '<|endoftext|>',
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
    if (c !== '\n' && ASSIGNED.test(c)) return c; // assigned in this node's Unicode (see docs/tokenizer.md)
  }
}

function randomLine(r) {
  let s = '';
  const n = Math.floor(r() * r() * 80);
  for (let i = 0; i < n; i++) {
    const x = r();
    if (x < 0.35) s += PIECES[Math.floor(r() * PIECES.length)];
    else if (x < 0.97) s += randomChar(r);
    else s += randomChar(r).repeat(1 + Math.floor(r() * 300)); // long runs: long chunks
  }
  return s;
}

function randomCmd(seed, n, out) {
  const r = rng(Number(seed));
  const lines = [];
  for (let i = 0; i < Number(n); i++) lines.push(randomLine(r));
  fs.writeFileSync(out, lines.join('\n') + '\n');
}

// ---- the committed fixtures --------------------------------------------------------------

const TRICKY = [
  '', ' ', '  ', '\n', '\n\n\n', '\t', ' \t \n ', 'a', 'Hello world', 'Hello, world!', 'hello   world   ',
  'trailing space ', 'trailing spaces     ', '   leading spaces', 'tabs\tand\t\ttabs', 'line\nbreaks\r\nand\rCR',
  "It's", "IT'S", "It'S", "don't won't can't", "we're you've I'm they'll he'd", "WE'RE YOU'VE I'M THEY'LL HE'D",
  "'s 's's", "rock 'n' roll", "''quoted''", "it''s", "o'clock", "y'all'd've",
  '12345', '3.14159', '1,000,000', 'x=1+2*3', '0x7fff', 'ⅫⅣ ½ ¾ ³²', '٠١٢٣ ۴۵۶', '१२३ ๑๒๓',
  '!!!', '?!?!', '...', '—–-', '"quoted"', '(parens) [brackets] {braces}', '#$%&*@^_`|~', ' ,"a","b"',
  '["a","b"]', "['a','b']", '<|endoftext|>', 'a<|endoftext|>b', ' <|endoftext|> ',
  'naïve café résumé', 'Straße groß', 'Ελληνικά κείμενα', 'Русский текст', 'עברית', 'العربية',
  'हिन्दी', 'தமிழ்', 'ภาษาไทย', 'ქართული', 'Հայերեն', 'ᚠᚢᚦᚨᚱᚲ', '中文字符', '日本語のテキスト',
  '한국어 텍스트', '𠀀𠀁𠀂', '𝔘𝔫𝔦𝔠𝔬𝔡𝔢', 'e\u0301 a\u0308 n\u0303', 'Z\u0351\u036b\u0343alg\u0310o',
  '👍', '👍🏽 👋🏿', '👩‍👩‍👧‍👦', '👨‍💻 🏳️‍🌈 🏴‍☠️', '🇯🇵🇺🇸🇩🇪', 'I ❤️ emoji 😀😃😄', '©®™',
  '\u00a0', 'a\u00a0b', ' \u00a0 ', '\ufeff', '\ufeffBOM', 'a \ufeff b', '\u0085', 'a\u0085b', '\u180e',
  'a\u180eb', '\u2028\u2029', 'a\u2028b', '\u3000', 'a\u3000b', '\u200b', 'a\u200bb', '\u2000\u2005\u200a',
  'word\u205fword', '\u1680', '\u202f', ' \u00a0 \ufeff \u3000 x',
  'x'.repeat(300), 'ab'.repeat(500), ' '.repeat(100), ' '.repeat(100) + 'x', '\n'.repeat(50) + 'x',
  'Supercalifragilisticexpialidocious', 'pneumonoultramicroscopicsilicovolcanoconiosis',
  'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa', '!'.repeat(200), '1234567890'.repeat(20),
  'a\u0001b\u001fc\u007f', '\u{10ffff}', '\u{e0001}\u{e0020}', '\ue000 private use',
  'def f(x):\n    return x  # comment\n', '    indented\n        more', 'Mixed 123abc ABC123 a1b2',
  'First Citizen:\nBefore we proceed any further, hear me speak.\n',
];

// A few code points from each letter or number range newer than Unicode 14.0 (see bpe.c). A
// contraction after one is its own chunk only if the regex takes the character for a letter or number.
const NEWER = [0x88f, 0xc5c, 0xcdc, 0x1c89, 0xa7cb, 0xa7f1, 0x105c0, 0x10940, 0x10d4a, 0x10d6f, 0x10ec2, 0x1123f,
  0x11380, 0x11390, 0x113d1, 0x11bc0, 0x11db0, 0x11f04, 0x11f12, 0x1342f, 0x13460, 0x143fa, 0x16100, 0x16d40,
  0x16ea0, 0x16ebb, 0x16ff2, 0x187f8, 0x18cff, 0x18d09, 0x18d80, 0x1b132, 0x1b155, 0x1df25, 0x1e030, 0x1e4d0,
  0x1e5d0, 0x1e6c0, 0x1e6fe, 0x2b739, 0x2cea2, 0x2ebf0, 0x31350, 0x33479, 0x10d40, 0x116d0, 0x11bf0, 0x11de0,
  0x11f50, 0x16130, 0x16d70, 0x16ff4, 0x1ccf0, 0x1d2c0, 0x1e4f0, 0x1e5f1];

function fixturesCmd(moduleDir, out) {
  const ref = load(moduleDir);
  const texts = TRICKY.slice();
  for (const cp of NEWER) {
    const c = String.fromCodePoint(cp);
    texts.push(c, ' ' + c + c + c, 'a' + c + '1 ' + c + '!', c + "'s", "'" + c + c);
  }
  // Each space of JavaScript's \s, and the two that only PCRE2's \s has: a contraction after one
  // is its own chunk only if the character is a space to the regex.
  for (const cp of [9, 10, 11, 12, 13, 32, 0x85, 0xa0, 0x1680, 0x180e, 0x2000, 0x2005, 0x200a, 0x200b, 0x2028,
                    0x2029, 0x202f, 0x205f, 0x3000, 0xfeff]) {
    const c = String.fromCodePoint(cp);
    texts.push(c + "'s", 'x' + c + c + 'y', c + c + '!' + c);
  }
  const lines = texts.map(text => JSON.stringify({ text, ids: ref.encode(text) }));
  fs.writeFileSync(out, lines.join('\n') + '\n');
  console.error(`bpe-reference: wrote ${lines.length} strings (node ${process.versions.node}, Unicode ` +
                `${process.versions.unicode}) to ${out}`);
}

const [cmd, ...args] = process.argv.slice(2);
if (cmd === 'encode' && (args.length === 2 || (args.length === 3 && args[2] === '--lines'))) {
  encodeCmd(args[0], args[1], args.length === 3);
} else if (cmd === 'encode-both' && args.length === 4) {
  encodeBothCmd(args[0], args[1], args[2], args[3]);
} else if (cmd === 'random' && args.length === 3) {
  randomCmd(args[0], args[1], args[2]);
} else if (cmd === 'fixtures' && args.length === 2) {
  fixturesCmd(args[0], args[1]);
} else {
  console.error('usage: bpe-reference.js fixtures MODULE_DIR OUT.jsonl | random SEED N OUT.txt | ' +
                'encode MODULE_DIR FILE [--lines] | encode-both MODULE_DIR FILE WHOLE_OUT LINES_OUT');
  process.exit(2);
}
