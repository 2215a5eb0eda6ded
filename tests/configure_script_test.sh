#!/usr/bin/env bash
# scripts/configure (ctest: ConfigureScript): a build folder an older checkout configured with
# another generator or another C++ compiler than the preset names is reconfigured (its
# CMakeCache.txt and CMakeFiles/ removed, saying so); a current one is left as it is. Runs the
# script on a copy of the project's CMakePresets.json over a one-file CMake project, so the
# project's own build folders are not touched. Skips (exit 77) without ninja or clang++-16 (the
# debug preset's compiler: scripts/bootstrap --sanitize).
#
# usage: configure_script_test.sh SOURCE_DIR
set -uo pipefail
src=$1
for tool in ninja clang++-16 cmake; do
  command -v "$tool" >/dev/null || { echo "SKIPPED: $tool is not installed"; exit 77; }
done
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
fails=0
source "$src/tests/script_checks.sh"
has() { grep -q -- "$1" "$t/last.txt" || { echo "output lacks '$1':"; cat "$t/last.txt"; return 1; }; }
lacks() { ! grep -q -- "$1" "$t/last.txt" || { echo "output has '$1':"; cat "$t/last.txt"; return 1; }; }
p=$t/project
mkdir -p "$p/scripts"
cp "$src/scripts/configure" "$p/scripts/"
cp "$src/CMakePresets.json" "$p/"
printf 'cmake_minimum_required(VERSION 3.21)\nproject(configure_check LANGUAGES CXX)\n' >"$p/CMakeLists.txt"
configure() { "$p/scripts/configure" "$@" >"$t/last.txt" 2>&1; }
cached() { grep -q "^$1" "$p/build/$2/CMakeCache.txt"; }

# A debug folder configured with GCC (before 2026-12-04): reconfigured with the preset's clang.
mkdir -p "$p/build/debug/CMakeFiles"
printf 'CMAKE_GENERATOR:INTERNAL=Ninja\nCMAKE_CXX_COMPILER:FILEPATH=/usr/bin/c++\n' \
  >"$p/build/debug/CMakeCache.txt"
touch "$p/build/debug/CMakeFiles/stale" "$p/build/debug/keep.o"
check "configure debug over a GCC folder" configure debug
check "  ... says it reconfigures" has "configured with /usr/bin/c++, the preset names clang++-16"
check "  ... the cache names clang++-16" cached 'CMAKE_CXX_COMPILER:[A-Z]*=.*clang++-16$' debug
check "  ... CMakeFiles/ was removed" test ! -e "$p/build/debug/CMakeFiles/stale"
check "  ... other build outputs stay" test -e "$p/build/debug/keep.o"
check "configure debug again" configure debug
check "  ... leaves a current folder alone" lacks "reconfiguring"

# A fuzz folder configured with clang 14 (scripts/fuzz before 2026-12-04): reconfigured.
mkdir -p "$p/build/fuzz"
printf 'CMAKE_GENERATOR:INTERNAL=Ninja\nCMAKE_CXX_COMPILER:FILEPATH=/usr/bin/clang++\n' \
  >"$p/build/fuzz/CMakeCache.txt"
check "configure fuzz over a clang 14 folder" configure fuzz
check "  ... says it reconfigures" has "configured with /usr/bin/clang++, the preset names clang++-16"
check "  ... the cache names clang++-16" cached 'CMAKE_CXX_COMPILER:[A-Z]*=.*clang++-16$' fuzz

# A release folder made with the Makefiles generator: reconfigured for Ninja.
mkdir -p "$p/build/release"
printf 'CMAKE_GENERATOR:INTERNAL=Unix Makefiles\n' >"$p/build/release/CMakeCache.txt"
check "configure release over a Makefiles folder" configure release
check "  ... says it reconfigures for Ninja" has "reconfiguring it for Ninja"
check "  ... the cache names Ninja" cached 'CMAKE_GENERATOR:INTERNAL=Ninja$' release
check "configure release again" configure release
check "  ... leaves a current folder alone" lacks "reconfiguring"
[ "$fails" -eq 0 ] || { echo "$fails check(s) failed"; exit 1; }
echo "all checks passed"
