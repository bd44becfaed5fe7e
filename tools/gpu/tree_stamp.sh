# shellcheck shell=bash
# Sourced by tools/gpu/prebuild.sh and tools/gpu/ab.sh: a digest of the sources a GPU build compiles,
# so binaries built elsewhere are used only for the very tree they were built from.
#
#   tree_stamp DIR   -> one line: sha256 over the files under src include bench tests cmake and
#                       CMakeLists.txt (paths and contents, in path order)
tree_stamp() {
  (cd "$1" && find src include bench tests cmake CMakeLists.txt -type f 2>/dev/null | LC_ALL=C sort |
    xargs -d '\n' sha256sum | sha256sum | cut -d' ' -f1)
}
