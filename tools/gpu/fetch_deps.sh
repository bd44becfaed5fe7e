#!/usr/bin/env bash
# Downloads (does not install) the build dependencies the GPU machine's image lacks, as Debian
# packages into .gpu-deps/ (git-ignored): nlohmann-json (headers) and GoogleTest for the GPU-only
# tree, plus PCRE2, utf8proc and pkgconf for the whole engine (tokenizer, CLI, engine tests and the
# engine benchmark). Run it on a machine with apt access; carry .gpu-deps to the GPU machine;
# tools/gpu/run_all.sh unpacks them into a private prefix there.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .gpu-deps
cd .gpu-deps
apt-get download nlohmann-json3-dev libgtest-dev \
  libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 \
  libutf8proc-dev libutf8proc2 pkgconf pkgconf-bin libpkgconf3 >/dev/null
ls -1 *.deb
