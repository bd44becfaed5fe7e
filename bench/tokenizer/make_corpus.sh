#!/usr/bin/env bash
# Builds a mixed-text benchmark input for tokenizer throughput (not committed; ~12 MB by default)
# from text found on this machine: English prose (licences, Debian copyright files and changelogs),
# Python stdlib sources, C/C++ headers, JavaScript/JSON (global node_modules), shell scripts,
# and multilingual text (vim tutors in ~30 languages, GnuPG help in ~25, the freedesktop MIME
# database's translated comments, plus texts of tests/data/tokenizers/corpus.jsonl - CJK, emoji,
# combining marks, special-token strings - recombined with a fixed-seed PRNG to fill up).
#
# Usage: bench/tokenizer/make_corpus.sh OUT_FILE [TOTAL_MB=12]
#
# Deterministic for a given machine: file lists are sorted (LC_ALL=C), every category is capped at
# a byte budget and cut at a line boundary, and the categories are interleaved in ~32 KB slices
# (so the file is mixed throughout, not in blocks). Files that are not valid UTF-8 are skipped
# and NUL bytes are dropped, so the output is valid UTF-8. Machines with other packages installed
# give a different (still valid) file; the script prints its size, per-category sizes and sha256.
# Needs bash, coreutils, findutils, gzip, iconv (libc-bin), awk and node.
set -euo pipefail
export LC_ALL=C

out=${1:?usage: make_corpus.sh OUT_FILE [TOTAL_MB]}
total_mb=${2:-12}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
corpus_jsonl="$repo/tests/data/tokenizers/corpus.jsonl"
command -v node >/dev/null || { echo "make_corpus.sh: node is required" >&2; exit 1; }
command -v iconv >/dev/null || { echo "make_corpus.sh: iconv is required" >&2; exit 1; }
[ -f "$corpus_jsonl" ] || { echo "make_corpus.sh: missing $corpus_jsonl" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/tokbench.XXXXXX")
trap 'rm -rf "$work"' EXIT

# emit_files CAP: cat the files named on stdin (one per line) that are valid UTF-8 until about CAP
# bytes are out; "zcat:" in front of a name means gunzip it first.
emit_files() {
  local cap=$1 n=0 f tmp="$work/one"
  while IFS= read -r f; do
    if [[ $f == zcat:* ]]; then
      gzip -dc -- "${f#zcat:}" >"$tmp" 2>/dev/null || continue
    else
      [ -f "$f" ] && [ -r "$f" ] || continue
      cat -- "$f" >"$tmp" 2>/dev/null || continue
    fi
    iconv -f UTF-8 -t UTF-8 "$tmp" >/dev/null 2>&1 || continue
    tr -d '\000' <"$tmp"
    printf '\n'
    n=$((n + $(stat -c %s "$tmp")))
    [ "$n" -lt "$cap" ] || break
  done
}
# cap_lines CAP: pass whole lines through until CAP bytes.
cap_lines() { awk -v max="$1" '{ n = length($0) + 1; if (tot + n > max) exit; print; tot += n }'; }
lst() { find "$@" 2>/dev/null | sort || true; }

category() { # NAME CAP: reads the file list on stdin, writes $work/cat.NAME
  emit_files "$2" | cap_lines "$2" >"$work/cat.$1" || true
}

# File lists first (each in its own file, so no pipeline gets SIGPIPE under `set -o pipefail`).
L=$work/list
lst /usr/share/common-licenses -type f >"$L.prose"
lst /usr/share/doc -name copyright -type f >>"$L.prose"
lst /usr/share/doc -name 'changelog*.gz' -type f | sed 's/^/zcat:/' >>"$L.prose"
lst /usr/lib/python3* -name '*.py' -type f >"$L.python"
lst /usr/include/c++ -type f >"$L.cpp"
lst /usr/include -name '*.h' -type f >>"$L.cpp"
npm_root=$( (npm root -g 2>/dev/null) || true)
: >"$L.js0"
for d in "$npm_root" /usr/lib/node_modules /usr/share/nodejs /usr/local/lib/node_modules; do
  if [ -n "$d" ] && [ -d "$d" ]; then
    lst "$d" \( -name '*.js' -o -name '*.mjs' -o -name '*.json' \) -type f >>"$L.js0"
  fi
done
awk '!seen[$0]++' "$L.js0" >"$L.js"
: >"$L.shell"
while IFS= read -r f; do
  if head -c 64 "$f" 2>/dev/null | head -n1 | grep -qa '^#!.*\(sh\|bash\)'; then echo "$f" >>"$L.shell"; fi
done < <(lst /usr/bin /usr/sbin /etc -maxdepth 2 -type f)
lst /usr/share/vim -name 'tutor*.utf-8' -type f >"$L.multi"
lst /usr/share/gnupg -name 'help*.txt' -type f >>"$L.multi"
lst /usr/share/mime/packages -name '*.xml' -type f >>"$L.multi"

category prose 3000000 <"$L.prose"
category python 2500000 <"$L.python"
category cpp 1500000 <"$L.cpp"
category js 1500000 <"$L.js"
category shell 600000 <"$L.shell"
category multi 2000000 <"$L.multi"

# Fill up to TOTAL_MB (at least 500 KB) with recombined texts of the test corpus.
have=$(cat "$work"/cat.* | wc -c)
want=$((total_mb * 1000 * 1000))
synth=$((want - have + 4096))
[ "$synth" -ge 500000 ] || synth=500000
node - "$corpus_jsonl" "$synth" >"$work/cat.synth" <<'EOF'
const fs = require("fs");
const [file, bytesArg] = process.argv.slice(2);
const texts = fs.readFileSync(file, "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l).text)
  .filter((t) => t.length >= 2 && t.length <= 600);
let seed = 12345;
const rand = () => { seed = (seed + 0x6d2b79f5) | 0; let t = seed; t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61); return ((t ^ (t >>> 14)) >>> 0) / 4294967296; };
const pick = (a) => a[Math.floor(rand() * a.length)];
// Non-ASCII texts weigh 3x so the filler is mostly CJK / other scripts / emoji.
const pool = texts.flatMap((t) => (/[^\x00-\x7f]/.test(t) ? [t, t, t] : [t]));
const seps = [" ", " ", "\n", "\n\n", "。", ", ", " — ", "\t"];
const want = Number(bytesArg);
let n = 0; const parts = [];
for (let para = 0; n < want; para++) {
  const k = 2 + Math.floor(rand() * 7);
  let s = "";
  for (let i = 0; i < k; i++) {
    let t = pick(pool);
    if (rand() < 0.3) t = t.replace(/\d+/g, () => String(Math.floor(rand() * 10 ** (1 + Math.floor(rand() * 9)))));
    if (rand() < 0.2) t = `${para}. ${t}`;
    s += (i ? pick(seps) : "") + t;
  }
  s += "\n";
  parts.push(s);
  n += Buffer.byteLength(s);
}
process.stdout.write(parts.join(""));
EOF

# Interleave the categories in ~32 KB slices (line-aligned), round-robin.
cats=()
for c in prose python cpp js shell multi synth; do
  [ -s "$work/cat.$c" ] && cats+=("$work/cat.$c")
done
awk -v chunk=32768 'BEGIN {
  n = ARGC - 1; alive = n
  while (alive > 0) {
    for (i = 1; i <= n; i++) {
      if (done[i]) continue
      got = 0
      while (got < chunk) {
        if ((getline line < ARGV[i]) <= 0) { done[i] = 1; alive--; break }
        print line; got += length(line) + 1
      }
    }
  }
  exit
}' "${cats[@]}" >"$work/all"
iconv -f UTF-8 -t UTF-8 "$work/all" >/dev/null || { echo "make_corpus.sh: output is not valid UTF-8" >&2; exit 1; }
mkdir -p "$(dirname "$out")"
mv "$work/all" "$out"
for c in "${cats[@]}"; do printf '  %-7s %9d bytes\n' "${c##*/cat.}" "$(wc -c <"$c")" >&2; done
size=$(wc -c <"$out")
echo "make_corpus.sh: wrote $out: $size bytes, $(wc -l <"$out") lines, sha256 $(sha256sum "$out" | cut -d' ' -f1)" >&2
[ "$size" -ge $((total_mb * 1000 * 1000 * 9 / 10)) ] || { echo "make_corpus.sh: output too small" >&2; exit 1; }
