# shellcheck shell=bash
# Sourced by tools/gpu/prebuild.sh and tools/gpu/ab.sh, which must make a variant tree the same way
# (a prebuilt pack is used only for the very sources it was built from).
#
#   apply_patches DIR ROOT SPEC  -> applies SPEC's patches ("P1+P2+...", paths relative to ROOT;
#                                   "-FILE" in reverse) in DIR with patch -p1; status 1 and the
#                                   patch named on stdout at the first that does not apply
#   tree_stamp DIR               -> one line: sha256 over the files under src include bench tests
#                                   cmake and CMakeLists.txt (paths and contents, in path order)
apply_patches() {
  local dir=$1 root=$2 p flag list
  IFS=+ read -ra list <<<"$3"
  for p in "${list[@]}"; do
    flag=; [[ $p == -* ]] && flag=-R && p=${p#-}
    # shellcheck disable=SC2086  # $flag is empty or -R
    (cd "$dir" && patch -p1 -s $flag <"$root/$p") || { echo "patch $flag $p does not apply"; return 1; }
  done
}
tree_stamp() {
  (cd "$1" && find src include bench tests cmake CMakeLists.txt -type f 2>/dev/null | LC_ALL=C sort |
    xargs -d '\n' sha256sum | sha256sum | cut -d' ' -f1)
}
