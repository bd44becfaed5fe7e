// Peer timing: single-threaded encode throughput of @huggingface/tokenizers (tokenizers.js).
//
// Usage: TOKENIZERS_JS_DIR=/tmp/tokgold node bench/tokenizer/hf_encode_bench.mjs FILE TOKENIZER_JSON \
//            [--mode chunks|lines] [--chunk-bytes 4096] [--runs 3]
// (TOKENIZERS_JS_DIR: a scratch dir where tools/tokenizer_goldens/package.json was `npm ci`-ed.)
// tokenizer_config.json is read from TOKENIZER_JSON's directory when present.
//
// Input split (so that a C++ benchmark can reproduce the exact token count):
//   chunks (default): the file, decoded as UTF-8, is cut into lines that keep their "\n"; lines are
//     appended to the current chunk and the chunk is closed as soon as it holds >= chunk-bytes
//     UTF-8 bytes (so chunks end at a line end and are >= 4096 bytes except the last; a single long
//     line is never cut). Each chunk is one encode() call.
//   lines: each line (with its "\n") is one encode() call.
// Each call is encode(text, {add_special_tokens: false}) (special-token strings in the text are
// still matched). One untimed warm-up pass (it also fills the BPE word cache, as a long-running
// server's would be, and computes ids_checksum), then the best of --runs timed passes.
// MB = 10^6 bytes of the UTF-8 file. Prints one JSON line; the token count and ids_checksum
// (h = h*31 + id + 1 mod 2^32 over all ids in order, h starting at 0) let another implementation
// show that it produced the very same ids.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const { loadTokenizersJs } = await import(
  pathToFileURL(path.join(here, "..", "..", "tools", "tokenizer_goldens", "tokjs.mjs")).href
);

const args = process.argv.slice(2);
const pos = [];
let mode = "chunks";
let chunkBytes = 4096;
let runs = 3;
for (let i = 0; i < args.length; i++) {
  if (args[i] === "--mode") mode = args[++i];
  else if (args[i] === "--chunk-bytes") chunkBytes = Number(args[++i]);
  else if (args[i] === "--runs") runs = Number(args[++i]);
  else pos.push(args[i]);
}
if (pos.length !== 2 || !["chunks", "lines"].includes(mode) || !(chunkBytes > 0) || !(runs > 0)) {
  console.error("usage: hf_encode_bench.mjs FILE TOKENIZER_JSON [--mode chunks|lines] [--chunk-bytes N] [--runs N]");
  process.exit(2);
}
const [file, tokJson] = pos;

const buf = fs.readFileSync(file);
const text = new TextDecoder("utf-8", { fatal: true }).decode(buf);
const lines = text.match(/[^\n]*\n|[^\n]+$/g) ?? [];
let pieces;
if (mode === "lines") {
  pieces = lines;
} else {
  pieces = [];
  let cur = "";
  let curBytes = 0;
  for (const l of lines) {
    cur += l;
    curBytes += Buffer.byteLength(l);
    if (curBytes >= chunkBytes) {
      pieces.push(cur);
      cur = "";
      curBytes = 0;
    }
  }
  if (cur.length) pieces.push(cur);
}

const { Tokenizer, version } = await loadTokenizersJs();
const cfgPath = path.join(path.dirname(tokJson), "tokenizer_config.json");
const t0 = process.hrtime.bigint();
const tok = new Tokenizer(
  JSON.parse(fs.readFileSync(tokJson, "utf8")),
  fs.existsSync(cfgPath) ? JSON.parse(fs.readFileSync(cfgPath, "utf8")) : {},
);
const loadS = Number(process.hrtime.bigint() - t0) / 1e9;

function pass() {
  let n = 0;
  const s = process.hrtime.bigint();
  for (const p of pieces) n += tok.encode(p, { add_special_tokens: false }).ids.length;
  return [Number(process.hrtime.bigint() - s) / 1e9, n];
}
// Warm-up pass (with the checksum).
let checksum = 0;
const w0 = process.hrtime.bigint();
let warmTokens = 0;
for (const p of pieces) {
  const ids = tok.encode(p, { add_special_tokens: false }).ids;
  warmTokens += ids.length;
  for (const id of ids) checksum = (Math.imul(checksum, 31) + id + 1) >>> 0;
}
const warmS = Number(process.hrtime.bigint() - w0) / 1e9;
const times = [];
let tokens = warmTokens;
for (let r = 0; r < runs; r++) {
  const [s, n] = pass();
  if (n !== warmTokens) throw new Error(`token count changed between passes: ${warmTokens} vs ${n}`);
  times.push(s);
  tokens = n;
}
const best = Math.min(...times);
console.log(
  JSON.stringify({
    impl: `@huggingface/tokenizers@${version}`,
    node: process.version,
    tokenizer: tokJson,
    file,
    bytes: buf.length,
    mode: mode === "chunks" ? `chunks>=${chunkBytes}B at line ends` : "lines",
    calls: pieces.length,
    tokens,
    ids_checksum: checksum,
    load_s: +loadS.toFixed(3),
    warmup_s: +warmS.toFixed(3),
    runs_s: times.map((t) => +t.toFixed(3)),
    best_s: +best.toFixed(3),
    mb_per_s: +(buf.length / 1e6 / best).toFixed(3),
    tokens_per_s: Math.round(tokens / best),
  }),
);
