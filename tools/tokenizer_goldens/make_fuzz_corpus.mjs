// Random (fixed-seed) corpus for differential testing of tokenizers: texts built from atoms that
// stress pre-tokenizer regexes (letters/digits/punctuation/whitespace classes of many scripts,
// contractions, special-token strings and near-misses, combining marks, emoji sequences, random
// scalar values from the whole Unicode range). Not committed; used to compare tokenizers.js with
// the Rust library (tools/tokenizer_goldens/rust_check.py) and usable for deepinfer's own fuzzing.
//
// Usage: node tools/tokenizer_goldens/make_fuzz_corpus.mjs OUT_JSONL [LINES=3000] [SEED=1]
import fs from "node:fs";

const [out, linesArg, seedArg] = process.argv.slice(2);
if (!out) {
  console.error("usage: make_fuzz_corpus.mjs OUT_JSONL [LINES] [SEED]");
  process.exit(2);
}
const LINES = Number(linesArg ?? 3000);
let seed = Number(seedArg ?? 1) | 0;
function rand() {
  seed = (seed + 0x6d2b79f5) | 0;
  let t = seed;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const ri = (lo, hi) => lo + Math.floor(rand() * (hi - lo + 1)); // inclusive
const pick = (a) => a[Math.floor(rand() * a.length)];
const rep = (f, n) => Array.from({ length: n }, f).join("");
const cp = (lo, hi) => {
  for (;;) {
    const c = ri(lo, hi);
    if (c < 0xd800 || c > 0xdfff) return String.fromCodePoint(c);
  }
};

const WS = ["\u00a0", "\u1680", "\u2000", "\u2003", "\u2007", "\u2009", "\u200a", "\u2028", "\u2029", "\u202f",
  "\u205f", "\u3000", "\u0085", "\u000b", "\u000c", "\u180e", "\u200b", "\u200c", "\u200d", "\ufeff",
  "\u001c", "\u001d", "\u001e", "\u001f", "\u00ad", "\u2060"];
const SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>",
  "<|fim_prefix|>", "<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|reserved_special_token_17|>",
  "<|endofprompt|>", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>",
  "<｜tool▁sep｜>", "<｜place▁holder▁no▁42｜>", "<|EOT|>", "<|endoftext|", "<|im_", "|>", "<｜", "｜>", "▁"];
const BLOCKS = [
  [0x20, 0x7e], [0xa0, 0xff], [0x100, 0x24f], [0x250, 0x2ff], [0x300, 0x36f], [0x370, 0x3ff], [0x400, 0x4ff],
  [0x590, 0x5ff], [0x600, 0x6ff], [0x900, 0x97f], [0x980, 0x9ff], [0xe00, 0xe7f], [0x1100, 0x11ff],
  [0x1e00, 0x1eff], [0x2000, 0x206f], [0x2070, 0x209f], [0x20a0, 0x20cf], [0x20d0, 0x20ff], [0x2100, 0x218f],
  [0x2190, 0x23ff], [0x2460, 0x24ff], [0x2500, 0x27bf], [0x3000, 0x303f], [0x3040, 0x309f], [0x30a0, 0x30ff],
  [0x3400, 0x4dbf], [0x4e00, 0x9fff], [0xa000, 0xa4cf], [0xac00, 0xd7a3], [0xe000, 0xf8ff], [0xf900, 0xfaff],
  [0xfb00, 0xfb4f], [0xfe00, 0xfe0f], [0xfe30, 0xfe4f], [0xff00, 0xffef], [0xfff0, 0xffff], [0x10000, 0x1007f],
  [0x1d400, 0x1d7ff], [0x1f1e6, 0x1f1ff], [0x1f300, 0x1faff], [0x1f3fb, 0x1f3ff], [0x20000, 0x2a6df],
  [0xe0000, 0xe007f], [0xf0000, 0x10ffff],
];
const WORDS = ["the", "of", "and", "to", "in", "is", "you", "that", "it", "he", "was", "for", "on", "are", "with",
  "token", "izer", "deep", "infer", "hello", "world", "Python", "HTTP", "JSON", "ok", "I"];

const atoms = [
  () => pick(WORDS),
  () => " " + pick(WORDS),
  () => rep(() => cp(0x61, 0x7a), ri(1, 12)),
  () => rep(() => cp(0x41, 0x5a), ri(1, 8)),
  () => pick(["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'VE", "'M", "'LL", "'D", "'Ll", "’s", "'"]),
  () => rep(() => cp(0x30, 0x39), ri(1, 25)),
  () => pick(["-", "+", ".", ","]) + rep(() => cp(0x30, 0x39), ri(1, 6)),
  () => rep(() => pick("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"), ri(1, 6)),
  () => " ".repeat(ri(1, 6)),
  () => pick(["\n", "\r", "\r\n", "\t", "\n\n", " \n", "\t\n", "\n ", "\r\r", "\n\r"]),
  () => pick(WS),
  () => rep(() => pick(WS), ri(2, 4)),
  () => pick(SPECIAL),
  () => cp(...pick(BLOCKS)),
  () => rep(() => cp(...pick(BLOCKS)), ri(2, 6)),
  () => rep(() => cp(0x4e00, 0x9fff), ri(1, 10)),
  () => rep(() => cp(0x3040, 0x30ff), ri(1, 8)),
  () => rep(() => cp(0xac00, 0xd7a3), ri(1, 6)),
  () => pick(["a", "e", "o", "n", " ", "1", "中", ""]) + rep(() => cp(0x300, 0x36f), ri(1, 4)),
  () => pick(["👍", "👩", "🧑", "✋"]) + cp(0x1f3fb, 0x1f3ff) + pick(["", "\u200d💻", "\u200d🤝\u200d🧑"]),
  () => cp(0x1f1e6, 0x1f1ff) + cp(0x1f1e6, 0x1f1ff),
  () => pick(["❤", "☺", "✔", "1", "#"]) + pick(["\ufe0f", "\ufe0e", "\ufe0f\u20e3", ""]),
  () => "🏴" + rep(() => cp(0xe0061, 0xe007a), ri(2, 5)) + "\udb40\udc7f",
  () => rep(() => cp(0x0, 0x10ffff), ri(1, 3)),
  () => pick(["\u1100\u1161\u11a8", "\u212b", "\u2126", "\ufb01", "e\u0301", "\u0958", "\u2000", "\u00c5", "\u1e9b\u0323"]),
  () => pick(["٠١٢", "۴۵۶", "१२३", "๑๒", "１２", "²³", "½", "Ⅻ", "①", "𝟙"]) ,
];

const lines = [];
const seen = new Set();
while (lines.length < LINES) {
  const n = ri(1, 30);
  let s = "";
  for (let k = 0; k < n; k++) s += pick(atoms)();
  if (!s.isWellFormed() || seen.has(s)) continue;
  seen.add(s);
  lines.push(JSON.stringify({ text: s }));
}
fs.writeFileSync(out, lines.join("\n") + "\n");
console.error(`wrote ${lines.length} texts to ${out}`);
