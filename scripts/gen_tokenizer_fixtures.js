#!/usr/bin/env node
// Regenerates the tokenizer parity fixtures in tests/data/tokenizer/fixtures/ from npm packages that ship GPT-2's
// byte-level BPE (vocabulary, merges and reference encoders). Needs node >= 18 and, in some scratch directory:
//
//   mkdir -p /tmp/tokref && cd /tmp/tokref
//   npm install gpt-3-encoder@1.1.4 gpt-tokenizer@4.0.0 @huggingface/tokenizers@0.2.0
//   node /path/to/repo/scripts/gen_tokenizer_fixtures.js /tmp/tokref/node_modules /path/to/repo
//
// Writes:
//   gpt2_tokenizer.json.gz  GPT-2's tokenizer.json in Hugging Face's layout, built from encoder.json + vocab.bpe
//   gpt2_reference.json     [{text, ids}]: ids from gpt-3-encoder (OpenAI's encoder.py ported), each one checked
//                           against gpt-tokenizer's r50k_base encoder and Hugging Face's tokenizers.js loading
//                           gpt2_tokenizer.json; the script fails if any two differ
//   gpt2_variants_reference.json  the GPT-2 vocabulary under other pipeline configurations (SmolLM2's Digits +
//                           ByteLevel, Llama-3's Split + ignore_merges + template, Qwen2's NFC + Split,
//                           add_prefix_space), each encoded by tokenizers.js. Texts where tokenizers.js is known
//                           to deviate from the Rust library are left out per variant (see `safe_for`).
//   split_reference.json    pre-tokenizer splits of random strings under the GPT-2, Llama-3 and Qwen2 patterns,
//                           computed with JavaScript's regex engine (Unicode mode, \s spelled as White_Space)
'use strict';
const fs = require('fs');
const path = require('path');
const zlib = require('zlib');

const [modules, repo] = process.argv.slice(2);
if (!modules || !repo) {
  console.error('usage: gen_tokenizer_fixtures.js <node_modules dir> <repo root>');
  process.exit(2);
}
const outDir = path.join(repo, 'tests/data/tokenizer/fixtures');
fs.mkdirSync(outDir, { recursive: true });

// ---------- GPT-2 tokenizer.json ----------
const encDir = path.join(modules, 'gpt-3-encoder');
const vocab = JSON.parse(fs.readFileSync(path.join(encDir, 'encoder.json'), 'utf8'));
const mergeLines = fs.readFileSync(path.join(encDir, 'vocab.bpe'), 'utf8').split('\n');
const merges = mergeLines.slice(1).filter((l) => l.length > 0);
for (const m of merges) {
  const parts = m.split(' ');
  if (parts.length !== 2 || !(parts[0] in vocab) || !(parts[1] in vocab) || !(parts[0] + parts[1] in vocab)) {
    throw new Error('bad merge line: ' + JSON.stringify(m));
  }
}
const eot = '<|endoftext|>';
const tokenizerJson = {
  version: '1.0',
  truncation: null,
  padding: null,
  added_tokens: [{ id: vocab[eot], content: eot, single_word: false, lstrip: false, rstrip: false,
                   normalized: true, special: true }],
  normalizer: null,
  pre_tokenizer: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true },
  post_processor: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true },
  decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
  model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: '', end_of_word_suffix: '',
           fuse_unk: false, byte_fallback: false, vocab, merges },
};
const gz = zlib.gzipSync(Buffer.from(JSON.stringify(tokenizerJson), 'utf8'), { level: 9 });
fs.writeFileSync(path.join(outDir, 'gpt2_tokenizer.json.gz'), gz);
console.log(`gpt2_tokenizer.json.gz: ${Object.keys(vocab).length} tokens, ${merges.length} merges, ${gz.length} bytes`);

// ---------- random strings ----------
let seed = 20240611;
function rand(n) {  // xorshift32, deterministic across node versions
  seed ^= seed << 13; seed >>>= 0;
  seed ^= seed >>> 17;
  seed ^= seed << 5; seed >>>= 0;
  return seed % n;
}
const cp = (...xs) => xs.map((x) => String.fromCodePoint(x));
// Characters stable since well before Unicode 14 (so node's ICU and our tables agree on their categories).
const basePool = [
  ...'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789',
  ...' '.repeat(12), '\t', '\n', '\n', '\r', '\v', '\f',
  ...'\'\'\'\'"!?.,;:-_()[]{}<>/\\|@#$%^&*+=~`',
  "'s", "'S", "'t", "'re", "'RE", "'Ve", "'m", "'ll", "'LL", "'d", "'D", "'x",
  ...cp(0xE9, 0xFC, 0xC5, 0xDF, 0x17F, 0x301, 0x308, 0x327, 0x3B1, 0x3A9, 0x416, 0x44F, 0x5D0, 0x627, 0x645,
        0x660, 0x663, 0x915, 0x94D, 0x966, 0xE01, 0x4E2D, 0x6587, 0x65E5, 0x3042, 0x30AB, 0xAC00, 0xD55C,
        0xFF21, 0xFF13, 0xB2, 0xBD, 0x2163, 0x2460, 0x20AC, 0x2211, 0x2014, 0x2026, 0x201C, 0xAB,
        0x1F600, 0x1F389, 0x1F44D, 0x1F3FD, 0x200D, 0x2764, 0xFE0F, 0x1D400, 0x10330,
        0xA0, 0x2003, 0x2009, 0x3000, 0x2028, 0x2029, 0x1680, 0x202F, 0x205F),
];
const splitOnlyPool = cp(0x85, 0xFEFF, 0x180E, 0x200B);  // JS \s differs from White_Space on these
function randomString(pool, maxLen) {
  const n = 1 + rand(maxLen);
  let s = '';
  for (let i = 0; i < n; ++i) s += pool[rand(pool.length)];
  return s;
}

// ---------- GPT-2 reference encodings ----------
const gpt3 = require(path.join(modules, 'gpt-3-encoder'));
const r50k = require(path.join(modules, 'gpt-tokenizer/cjs/encoding/r50k_base'));
const fixed = [
  '', 'Hello world', 'Hello, world!', ' leading space', 'trailing space ', '  two leading spaces',
  'multiple   spaces   between', 'tabs\tand\t\ttabs', 'new\nline', '\n\n\nnewlines first\n\n', 'CRLF\r\nline\r\n',
  'numbers 12345 and 3.14159 and 1,000,000', '12345678901234567890', 'year 2024-06-11 at 10:30pm',
  "don't can't won't I'm you're we've they'll he'd", "DON'T SHOUT, IT'S LOUD", "'s 't 're 've 'm 'll 'd",
  "rock 'n' roll, ''quoted'' and '''triple'''", 'email: someone@example.com', 'https://example.com/a/b?q=1&r=two#frag',
  'snake_case_identifier = camelCaseValue + 42;', 'int main() { return 0; }  // C++', 'naïve café résumé',
  'Ångström Ørsted Œuvre straße', 'e\u0301 combining acute, a\u0308 diaeresis', '日本語のテキストです。',
  '中文字符测试，标点！', '한국어 텍스트', 'Привет, мир! Как дела?', 'Γειά σου Κόσμε', 'مرحبا بالعالم ١٢٣',
  'שלום עולם', 'हिन्दी पाठ और संख्या १२३', 'ภาษาไทย', 'emoji 😀🎉👍🏽 test', '👨‍👩‍👧‍👦 family', 'heart ❤️ red',
  'Z̤͔ͧ̑̓ä͖̭̈̇lͮ̒ͫǧ̗͚̚o̙̔ͮ̇͐̇', 'ＦＵＬＬＷＩＤＴＨ　１２３', 'math ∑∫√∞ ≠ ≤ ≥ ½ ² Ⅻ', 'currency $5 €10 £3 ¥100 ₹50',
  'quotes “curly” ‘single’ «guillemets»', 'ellipsis… em—dash en–dash', '\u00a0nbsp\u00a0inside\u00a0',
  'ideographic\u3000space', '   ', '\t\n \r\n', 'a', '!!!???...', '---===+++***', 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa',
  'A photo of a cat sitting on a red couch, looking at the camera.',
  'Two dogs play in the snow near a wooden fence; one carries a stick.',
  '<image> What is in this picture? <|im_start|>user', 'The quick brown fox jumps over the lazy dog. '.repeat(4),
  'mixedCASE Words AND numbers123abc456', '    indented code\n        more indented\n', 'end with newline\n',
];
const cases = [...fixed];
for (let i = 0; i < 150; ++i) cases.push(randomString(basePool, 30));
const { Tokenizer: HfTokenizer } = require(path.join(modules, '@huggingface/tokenizers'));
const hfGpt2 = new HfTokenizer(tokenizerJson, {});
const reference = [];
for (const text of cases) {
  const a = gpt3.encode(text);
  const b = r50k.encode(text);
  const c = hfGpt2.encode(text, { add_special_tokens: false }).ids;
  if (JSON.stringify(a) !== JSON.stringify(b) || JSON.stringify(a) !== JSON.stringify(c)) {
    throw new Error(`reference encoders disagree on ${JSON.stringify(text)}: ${a} vs ${b} vs ${c}`);
  }
  if (gpt3.decode(a) !== text) throw new Error(`round trip failed for ${JSON.stringify(text)}`);
  reference.push({ text, ids: a });
}
fs.writeFileSync(path.join(outDir, 'gpt2_reference.json'),
                 '[\n' + reference.map((r) => JSON.stringify(r)).join(',\n') + '\n]\n');
console.log(`gpt2_reference.json: ${reference.length} cases`);

// ---------- the same vocabulary under other pipelines (tokenizers.js as reference) ----------
const LLAMA3 = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const QWEN2 = LLAMA3.replace('\\p{N}{1,3}', '\\p{N}');
const byteLevel = (prefix, regex) => ({ type: 'ByteLevel', add_prefix_space: prefix, trim_offsets: true, use_regex: regex });
const split = (re) => ({ type: 'Split', pattern: { Regex: re }, behavior: 'Isolated', invert: false });
const variants = {
  add_prefix_space: { pre_tokenizer: byteLevel(true, true) },
  smollm2: { pre_tokenizer: { type: 'Sequence', pretokenizers: [{ type: 'Digits', individual_digits: true },
                                                                 byteLevel(false, true)] } },
  llama3: { pre_tokenizer: { type: 'Sequence', pretokenizers: [split(LLAMA3), byteLevel(false, false)] },
            ignore_merges: true,
            post_processor: { type: 'TemplateProcessing',
                              single: [{ SpecialToken: { id: eot, type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
                              pair: [],
                              special_tokens: { [eot]: { id: eot, ids: [vocab[eot]], tokens: [eot] } } } },
  qwen2: { normalizer: { type: 'NFC' },
           pre_tokenizer: { type: 'Sequence', pretokenizers: [split(QWEN2), byteLevel(false, false)] } },
};
// tokenizers.js deviations from the Rust library: its ByteLevel regex uses JavaScript's \s (U+FEFF yes, U+0085
// no), its Digits uses \d (ASCII only), and its (?i:...) folds ASCII only (Rust also folds U+017F to 's').
function safe_for(name, text) {
  if (/[\u0085\uFEFF]/u.test(text) && name !== 'llama3' && name !== 'qwen2') return false;
  if (name === 'smollm2' && /[^0-9]/u.test(text.replace(/[^\p{N}]/gu, ''))) return false;
  if ((name === 'llama3' || name === 'qwen2') && text.includes('\u017F')) return false;
  return true;
}
const variantCases = [];
const variantTexts = [...cases];
for (let i = 0; i < 100; ++i) variantTexts.push(randomString([...basePool, ...splitOnlyPool], 30));
const hfVariants = {};
for (const [name, patch] of Object.entries(variants)) {
  const j = JSON.parse(JSON.stringify(tokenizerJson));
  for (const key of ['normalizer', 'pre_tokenizer', 'post_processor']) if (key in patch) j[key] = patch[key];
  if ('ignore_merges' in patch) j.model.ignore_merges = patch.ignore_merges;
  hfVariants[name] = new HfTokenizer(j, {});
}
for (const text of variantTexts) {
  const entry = { text, ids: {} };
  for (const name of Object.keys(variants)) {
    if (!safe_for(name, text)) continue;
    entry.ids[name] = hfVariants[name].encode(text, { add_special_tokens: false }).ids;
  }
  if (entry.ids.llama3) entry.llama3_with_special = hfVariants.llama3.encode(text, { add_special_tokens: true }).ids;
  variantCases.push(entry);
}
fs.writeFileSync(path.join(outDir, 'gpt2_variants_reference.json'),
                 '{"variants": ' + JSON.stringify(variants) + ',\n"cases": [\n' +
                 variantCases.map((r) => JSON.stringify(r)).join(',\n') + '\n]}\n');
console.log(`gpt2_variants_reference.json: ${variantCases.length} cases`);

// ---------- pre-tokenizer splits ----------
const WS = '\\t\\n\\v\\f\\r \\x85\\xA0\\u1680\\u2000-\\u200A\\u2028\\u2029\\u202F\\u205F\\u3000';
const S = `[${WS}]`, NS = `[^${WS}]`;
const gpt2Re = new RegExp(
  `'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^${WS}\\p{L}\\p{N}]+|${S}+(?!${NS})|${S}+`, 'gu');
const contraction = "'(?:[sS\\u017F]|[tT]|[rR][eE]|[vV][eE]|[mM]|[lL][lL]|[dD])";
const llamaRe = (digits) => new RegExp(
  `${contraction}|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}${digits}| ?[^${WS}\\p{L}\\p{N}]+[\\r\\n]*|${S}*[\\r\\n]+` +
  `|${S}+(?!${NS})|${S}+`, 'gu');
const patterns = { gpt2: gpt2Re, llama3: llamaRe('{1,3}'), qwen2: llamaRe('') };
const splitPool = [...basePool, ...splitOnlyPool];
const splitCases = [...fixed];
for (let i = 0; i < 250; ++i) splitCases.push(randomString(splitPool, 40));
const splits = splitCases.map((text) => {
  const entry = { text };
  for (const [name, re] of Object.entries(patterns)) {
    const pieces = Array.from(text.matchAll(re), (m) => m[0]);
    if (pieces.join('') !== text) throw new Error(`${name} does not cover ${JSON.stringify(text)}`);
    entry[name] = pieces;
  }
  return entry;
});
fs.writeFileSync(path.join(outDir, 'split_reference.json'),
                 '[\n' + splits.map((r) => JSON.stringify(r)).join(',\n') + '\n]\n');
console.log(`split_reference.json: ${splits.length} cases`);
