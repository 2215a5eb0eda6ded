#!/usr/bin/env bash
# The build refuses includes across layers (docs/architecture.md): a header of a layer a target
# does not depend on is not on its include path. For each layer's library, with the include
# directories CMake gives it, a file including one of its own headers compiles and a file
# including a header of a forbidden layer fails with "No such file or directory" (GCC; clang: "file
# not found"). The compiler
# only preprocesses (-E): that resolves every include, transitively, which is all the layering is
# about, in a tenth of the time of parsing the headers (the build itself compiles them).
# Usage: layering_test.sh CXX core=DIRS config=DIRS serving=DIRS sim=DIRS engine=DIRS
# (DIRS: the target's include directories, ';'-separated, as CMake lists them).
set -uo pipefail
cxx=$1
shift
declare -A dirs
for arg in "$@"; do dirs[${arg%%=*}]=${arg#*=}; done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0

compile() {  # compile LAYER HEADER -> stderr in $tmp/err, returns the preprocessor's status
  local flags=()
  IFS=';' read -ra list <<<"${dirs[$1]}"
  for d in "${list[@]}"; do [ -n "$d" ] && flags+=("-I$d"); done
  printf '#include "%s"\n' "$2" >"$tmp/t.cc"
  "$cxx" -std=c++20 -E -o /dev/null "${flags[@]}" "$tmp/t.cc" 2>"$tmp/err"
}
allowed() {
  if ! compile "$1" "$2"; then
    echo "FAIL: $1 cannot include $2 (it should):"
    head -5 "$tmp/err"
    failures=$((failures + 1))
  fi
}
refused() {
  if compile "$1" "$2"; then
    echo "FAIL: $1 can include $2 (the layering should refuse it)"
    failures=$((failures + 1))
  elif ! grep -q -e "$2: No such file or directory" -e "'$2' file not found" "$tmp/err"; then
    echo "FAIL: $1 including $2 failed for another reason:"
    head -5 "$tmp/err"
    failures=$((failures + 1))
  fi
}

allowed core core/scheduler.h
allowed core core/prefill_launch.h  # kernels/ uses it; it must not need kernels/
for h in serving/config_node.h serving/experiment.h policies/registry.h traces/workload.h \
  sim/cost_model.h engine/cpu_executor.h kernels/attention_plan.h; do
  refused core "$h"
done
allowed config serving/config_node.h
for h in sim/cost_model.h engine/cpu_executor.h; do refused config "$h"; done
allowed serving serving/experiment.h
allowed serving serving/replica.h
for h in sim/cost_model.h sim/simulator.h engine/cpu_executor.h engine/engine_driver.h; do
  refused serving "$h"
done
allowed sim sim/run.h
for h in engine/cpu_executor.h engine/engine_driver.h; do refused sim "$h"; done
allowed engine engine/engine_driver.h
for h in sim/cost_model.h sim/run.h sim/simulator.h; do refused engine "$h"; done

if [ "$failures" -gt 0 ]; then
  echo "$failures layering check(s) failed"
  exit 1
fi
echo "layering: every allowed include compiles, every forbidden one is refused"
