// Shared helpers: load @huggingface/tokenizers (tokenizers.js) from a scratch install and wrap it
// with the encode/decode settings the goldens use.
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";

export const PINNED_VERSION = "0.2.0"; // keep in sync with package.json

// tokenizers.js is installed outside the repo (never commit node_modules). Where to find it:
// $TOKENIZERS_JS_DIR (a dir whose node_modules/ holds @huggingface/tokenizers), else the normal
// Node resolution from this file.
export async function loadTokenizersJs() {
  const base = process.env.TOKENIZERS_JS_DIR;
  let entry;
  try {
    const req = createRequire(base ? path.join(path.resolve(base), "package.json") : import.meta.url);
    // The package's "exports" hide package.json; resolve the entry point and walk up to it.
    let pkgDir = path.dirname(req.resolve("@huggingface/tokenizers"));
    while (!fs.existsSync(path.join(pkgDir, "package.json")) && path.dirname(pkgDir) !== pkgDir) {
      pkgDir = path.dirname(pkgDir);
    }
    const pkgJson = path.join(pkgDir, "package.json");
    const pkg = JSON.parse(fs.readFileSync(pkgJson, "utf8"));
    if (pkg.name !== "@huggingface/tokenizers") throw new Error(`unexpected package at ${pkgJson}`);
    if (pkg.version !== PINNED_VERSION) {
      throw new Error(`found @huggingface/tokenizers ${pkg.version} at ${pkgJson}, want ${PINNED_VERSION}`);
    }
    entry = path.join(path.dirname(pkgJson), pkg.exports["."].node.import);
  } catch (e) {
    console.error(
      `cannot load @huggingface/tokenizers@${PINNED_VERSION}: ${e.message}\n` +
        "install it in a scratch dir and point TOKENIZERS_JS_DIR there, e.g.\n" +
        "  mkdir -p /tmp/tokgold && cp tools/tokenizer_goldens/package*.json /tmp/tokgold/ && " +
        "(cd /tmp/tokgold && npm ci)\n  export TOKENIZERS_JS_DIR=/tmp/tokgold",
    );
    process.exit(2);
  }
  const mod = await import(pathToFileURL(entry).href);
  return { Tokenizer: mod.Tokenizer, version: PINNED_VERSION };
}

export function loadTokenizer(Tokenizer, dir) {
  const tj = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
  const cfgPath = path.join(dir, "tokenizer_config.json");
  const cfg = fs.existsSync(cfgPath) ? JSON.parse(fs.readFileSync(cfgPath, "utf8")) : {};
  const tok = new Tokenizer(tj, cfg);
  return {
    // No BOS/EOS or template tokens; special-token strings inside the text are still matched as
    // added tokens (tokenizers.js always does that; there is no split_special_tokens option).
    encode: (text) => tok.encode(text, { add_special_tokens: false }).ids,
    // Like the Rust library's decode(ids, skip_special_tokens=False): no transformers-style
    // clean_up_tokenization_spaces (tokenizers.js would otherwise take it from tokenizer_config,
    // e.g. llama3 sets it to true). tokenizers.js throws on an empty id list; that decodes to "".
    decode: (ids) =>
      ids.length === 0 ? "" : tok.decode(ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false }),
  };
}

export function readJsonl(file) {
  return fs
    .readFileSync(file, "utf8")
    .split("\n")
    .filter((l) => l.length > 0)
    .map((l) => JSON.parse(l));
}
