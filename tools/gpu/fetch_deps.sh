#!/usr/bin/env bash
# Downloads (does not install) the two build dependencies the GPU build needs beyond the CUDA
# image of the GPU machine: nlohmann-json (headers) and GoogleTest (static libraries + headers), as
# Debian packages into .gpu-deps/ (git-ignored). Run it on a machine with apt access; carry
# .gpu-deps to the GPU machine; tools/gpu/run_all.sh unpacks them into a private prefix there.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .gpu-deps
cd .gpu-deps
apt-get download nlohmann-json3-dev libgtest-dev >/dev/null
ls -1 *.deb
