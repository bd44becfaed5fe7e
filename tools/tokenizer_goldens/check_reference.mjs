// Compares tokenizers.js against a reference JSONL (lines {"text", "ids", "decoded"}), e.g. the
// Rust-library (Python `tokenizers`) reference in ../shared/fixtures/tokenizer/deepseek-v3/.
//
// Usage: TOKENIZERS_JS_DIR=/tmp/tokgold node tools/tokenizer_goldens/check_reference.mjs \
//            TOKENIZER_DIR REFERENCE_JSONL
// Prints every differing line (text, reference ids, tokenizers.js ids) and a summary; exits 1 if any
// line differs.
import { loadTokenizersJs, loadTokenizer, readJsonl } from "./tokjs.mjs";

const [dir, refFile] = process.argv.slice(2);
if (!dir || !refFile) {
  console.error("usage: check_reference.mjs TOKENIZER_DIR REFERENCE_JSONL");
  process.exit(2);
}
const { Tokenizer, version } = await loadTokenizersJs();
const tok = loadTokenizer(Tokenizer, dir);
const ref = readJsonl(refFile);
let idsOk = 0;
let decOk = 0;
let decTotal = 0;
for (const [i, r] of ref.entries()) {
  const ids = tok.encode(r.text);
  if (JSON.stringify(ids) === JSON.stringify(r.ids)) idsOk++;
  else {
    console.log(JSON.stringify({ line: i + 1, kind: "ids", text: r.text, reference: r.ids, tokenizers_js: ids }));
  }
  if ("decoded" in r) {
    decTotal++;
    const dec = tok.decode(r.ids);
    if (dec === r.decoded) decOk++;
    else console.log(JSON.stringify({ line: i + 1, kind: "decoded", reference: r.decoded, tokenizers_js: dec }));
  }
}
console.log(
  JSON.stringify({ tokenizers_js: version, reference: refFile, lines: ref.length, ids_equal: idsOk, decoded_equal: decOk, decoded_checked: decTotal }),
);
process.exit(idsOk === ref.length && decOk === decTotal ? 0 : 1);
