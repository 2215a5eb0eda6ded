#!/bin/sh
# Sim-vs-engine validation on the CPU engine (docs/validation.md): every workload below under two
# policy mixes (three for burst-tiny), each run by `engine run` and by `sim run` with the calibrated cost model, then
# `sim validate`. Prints each validation table; the JSON files land in OUT/<name>-<mix>-validation/.
#
#   experiments/validation/run.sh [BUILD_DIR] [OUT_DIR] [COST_YAML]
#
# Defaults: build/release, out/validation, experiments/catalog/calibrated/tiny-cpu.yaml.
# Takes about 3 minutes of wall time (the engine replays arrivals in real time).
set -eu
B=${1:-build/release}
O=${2:-out/validation}
COST=${3:-experiments/catalog/calibrated/tiny-cpu.yaml}
mkdir -p "$O"
for exp in experiments/burst-tiny.yaml experiments/validation/azure-conv-tiny.yaml \
           experiments/validation/mooncake-tiny.yaml; do
  name=$(basename "$exp" .yaml)
  mixes="vllm-hash sarathi-nocache"
  [ "$name" = burst-tiny ] && mixes="$mixes vllm-swap"  # the one workload that preempts
  for mix in $mixes; do
    case $mix in
      vllm-hash) sets="";;  # the files' own policies: vllm, fcfs, recompute, hash prefix cache
      sarathi-nocache) sets="--set policies.batch=sarathi --set policies.prefix_cache=none";;
      vllm-swap) sets="--set policies.preemption=swap --set serving.swap_space_gb=0.25";;
    esac
    rm -rf "$O/$name-$mix-engine" "$O/$name-$mix-sim" "$O/$name-$mix-validation"
    # shellcheck disable=SC2086
    "$B/engine/engine" run "$exp" $sets --record-schedule --quiet --out "$O/$name-$mix-engine"
    # shellcheck disable=SC2086
    "$B/sim/sim" run "$exp" $sets --record-schedule --quiet --set "cost_model.file=$COST" \
      --out "$O/$name-$mix-sim"
    echo "== $name, $mix"
    "$B/sim/sim" validate "$O/$name-$mix-sim" "$O/$name-$mix-engine" \
      --out "$O/$name-$mix-validation"
  done
done
