#!/usr/bin/env bash
# `gpu-check validate --device cpu` (ctest: GpuValidateCpu): the GPU validation pipeline of
# issue 20 end to end on the CPU engine, from a bundle-shaped folder, so that on the GPU only the
# device differs. The folder is laid out as scripts/gpu-bundle lays out a bundle (bin/ with sim
# and engine, experiments/, the traces the GPU experiments read, sim/plot/, bench/gpu/,
# gpu-check at the root), from this build's CPU programs; it runs from another working
# directory with a bare environment. Checks: exit 0, two files left, the report's tables (six
# workload x mix rows, calibrated and roofline, the held-out calibration error), the profile and
# calibrated model named and written as they ship in experiments/catalog/calibrated/ (and usable
# from there), a replay.csv per validation, the figure where matplotlib is installed, and the
# option's refusals; then scripts/gpu-runs on the tarball (keep, and revalidate offline to the
# same validations).
#
# usage: gpu_validate_cpu_test.sh SOURCE_DIR BUILD_DIR
set -uo pipefail
src=$1 build=$2
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
t=$(realpath "$t")
fails=0
# check and run: tests/script_checks.sh
source "$src/tests/script_checks.sh"
has() { grep -q -- "$1" "$2" || { echo "$2 lacks '$1'"; return 1; }; }

# The bundle's layout (scripts/gpu-bundle), with this build's CPU programs.
b=$t/bundle
mkdir -p "$b/bin" "$b/lib" "$b/sim" "$b/bench" "$b/traces" "$t/elsewhere"
cp "$build/sim/sim" "$build/engine/engine" "$b/bin/"
cp -r "$src/experiments" "$b/"
rm -rf "$b/experiments/validation/e2e"
while read -r f; do
  [ -f "$src/$f" ] || continue
  mkdir -p "$b/$(dirname "$f")"
  cp "$src/$f" "$b/$f"
done < <(grep -rhoE 'traces/[A-Za-z0-9_./-]+' "$src/experiments/validation/gpu" | sort -u)
cp -r "$src/sim/plot" "$b/sim/"
cp -r "$src/bench/gpu" "$b/bench/"
cp "$src/scripts/gpu-check" "$b/gpu-check"
echo "commit: cpu-test" >"$b/BUNDLE.txt"
echo cpu-test >"$b/.servelab-bundle"

t0=$(date +%s)
check "gpu-check validate --device cpu exits 0" run 0 "$b/gpu-check" validate --device cpu --out "$t/o"
echo "gpu-check validate --device cpu: $(($(date +%s) - t0)) s"
check "  ... and leaves two files" test "$(ls "$t/o" | tr '\n' ' ')" = "validate.tar.gz validate.txt "
r=$t/o/validate.txt
check "  ... the pipeline is complete" has "Pipeline: complete." "$r"
for wl in burst-8b azure-conv-8b mooncake-8b; do
  for mix in vllm-hash sarathi-recompute; do
    # One headline row (calibrated / roofline side by side), a row in each full table, in
    # each by-kind table and in each latency attribution table, one in the engine table.
    check "  ... $wl $mix in the tables" test "$(grep -c "^| $wl | $mix |" "$r")" = 8
    # Every request attributed: the CPU engine's token times are its steps' ends.
    check "  ... its latency attributed" test "$(grep -c "^| $wl | $mix | [0-9]* (0 unmatched) |" "$r")" = 2
  done
done
check "  ... the latency attribution" has "| TTFT p50: back to back / priced / simulator |" "$r"
check "  ... with the engine's idle wake-ups" has "| idle wake-ups: steps, p50 / p90 us |" "$r"
check "  ... the replayed error by step kind" has "| decode: steps, time-weighted % (without slow)" "$r"
check "  ... the profile's time, and its setup's (engine profile's last line)" \
  has "the profile took [0-9.]* s, [0-9.]* of them before its first shape" "$r"
check "  ... the held-out calibration error" has "held-out error (one shape in 3 of each family" "$r"
check "  ... the profile's spread per family" has "| decode | " "$r"
check "  ... the commands" has "BUNDLE/bin/sim calibrate experiments/catalog/calibrated/tiny-cpu-profile.csv" "$r"
check "  ... the machine" has "device: cpu" "$r"

mkdir -p "$t/x"
tar -xzf "$t/o/validate.tar.gz" -C "$t/x"
w=$(echo "$t"/x/gpu-check-validate.*)
cal=$w/experiments/catalog/calibrated
check "the profile ships as tiny-cpu-profile.csv" has "# machine_kind: cpu" "$cal/tiny-cpu-profile.csv"
check "the model ships as tiny-cpu.yaml, naming the profile where it ships" \
  has 'profile: "experiments/catalog/calibrated/tiny-cpu-profile.csv"' "$cal/tiny-cpu.yaml"
check "  ... with the held-out errors" has "holdout:" "$cal/tiny-cpu.yaml"
check "  ... and the host overhead of the calibration run" has "engine_run: \"calibration-burst-8b-engine\"" "$cal/tiny-cpu.yaml"
n=$(ls -d "$w"/*-validation | wc -l)
check "twelve validations (3 workloads x 2 mixes x 2 cost models) and the graphs-off diagnostic's two" test "$n" = 14
check "  ... each with replay.csv" test "$(ls "$w"/*-validation/replay.csv | wc -l)" = 14
check "  ... the diagnostic run with CUDA graphs off" has "SERVELAB_CUDA_GRAPHS=0" "$w/commands.txt"
check "  ... reported, not counted among the targets" has "Every target met on [0-9]* of 6 workload" "$w/report.md"
check "  ... named as such" has "burst-8b-graphs-off (not counted above)" "$w/report.md"
check "  ... the engine table's packed prefill steps (n/a on the CPU)" has "| packed prefill steps |" "$w/report.md"
check "  ... the roofline ones replayed with the H200 roofline" \
  has '"replay_cost_model": "roofline (H200)"' "$w/mooncake-8b-vllm-hash-roofline-validation/validation.json"
check "  ... the sim given the engine's block count" \
  has '"num_gpu_blocks": "1024"' "$w/azure-conv-8b-sarathi-recompute-roofline-sim/summary.json"
check "  ... Sarathi chunks of 512" has "chunk_size: 512" "$w/burst-8b-sarathi-recompute-engine/config.yaml"
if /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
  check "the figure" test -s "$w/figures/step-time-validation.png"
else
  echo "skip the figure: /usr/bin/python3 has no matplotlib"
fi

# scripts/gpu-runs: keep what the tarball measured (deterministically, never overwriting), then
# rerun its simulations and validations offline from the kept archive: the same validation.
g=$src/scripts/gpu-runs
check "gpu-runs keep packs the tarball's measurements" run 0 "$g" keep "$t/o/validate.tar.gz" --into "$t/kept"
kept=$(echo "$t"/kept/*-validate.tar.xz)
check "  ... as DATE-validate.tar.xz" test -f "$kept"
python3 -c 'import sys, tarfile; print("\n".join(tarfile.open(sys.argv[1]).getnames()))' "$kept" >"$t/kept.txt"
check "  ... with the engine runs' schedules" has "-validate/burst-8b-vllm-hash-engine/schedule.csv" "$t/kept.txt"
check "  ... the calibration run, the profile and the commands" test "$(grep -cE \
  'calibration-burst-8b-engine/steps.csv|calibrated/tiny-cpu-profile.csv|validate/commands.txt$' "$t/kept.txt")" = 3
check "  ... but not what the simulator recomputes" test "$(grep -cE -- '-sim/|replay.csv|\.png' "$t/kept.txt")" = 0
check "  ... and refuses to overwrite it (exit 2)" run 2 "$g" keep "$t/o/validate.tar.gz" --into "$t/kept"
cp "$kept" "$t/kept1.tar.xz"
check "  ... with --force, the same bytes" run 0 "$g" keep "$t/o/validate.tar.gz" --into "$t/kept" --force
check "  ... (identical)" cmp -s "$kept" "$t/kept1.tar.xz"
check "  ... over --max-mb: refused, nothing written (exit 2)" run 2 "$g" keep "$t/o/validate.tar.gz" \
  --into "$t/kept2" --max-mb 0.001
check "  ... (nothing)" test ! -e "$t/kept2/$(basename "$kept")"
check "  ... not a gpu-check tarball (exit 2)" run 2 "$g" keep "$t/o/validate.txt" --into "$t/kept2"
mkdir -p "$t/kept3"
cp "$src/data/gpu-runs/README.md" "$t/kept3/"
check "  ... listed in the folder's README table" run 0 "$g" keep "$t/o/validate.tar.gz" --into "$t/kept3"
check "  ... (one row, naming the bundle)" test "$(grep -c '^| [0-9-]*-validate.tar.xz | [0-9-]* | cpu-test | `gpu-check validate`' "$t/kept3/README.md")" = 1
check "  ... and once only" run 0 "$g" keep "$t/o/validate.tar.gz" --into "$t/kept3" --force
check "  ... (still one)" test "$(grep -c -- '-validate.tar.xz |' "$t/kept3/README.md")" = 1
check "gpu-runs revalidate reruns the simulations offline" run 0 "$g" revalidate "$kept" \
  --out "$t/rv" --build-dir "$build"
rv=$(echo "$t"/rv/*-validate)
check "  ... and the report" has "Pipeline: complete." "$rv/report.md"
same_validation() {
  python3 - "$1" "$2" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
for j in (a, b):
    j["step_time"].pop("replay_cost_model")  # the model file's path, which moved
sys.exit(0 if a == b else 1)
PY
}
for v in burst-8b-vllm-hash-calibrated mooncake-8b-sarathi-recompute-roofline; do
  check "  ... $v: the validation the GPU machine wrote" \
    same_validation "$w/$v-validation/validation.json" "$rv/$v-validation/validation.json"
done
check "  ... refuses an existing folder (exit 2)" run 2 "$g" revalidate "$kept" --out "$t/rv" --build-dir "$build"
check "  ... and a missing --cost-model (exit 2)" run 2 "$g" revalidate "$kept" --out "$t/rv2" \
  --build-dir "$build" --cost-model "$t/none.yaml"
# Another cost model for the calibrated runs: 10 ms more a step moves every TPOT (added to the
# fitted step_s: a slow build, such as the sanitizers', fits one near 10 ms already).
awk '/^  step_s: / { printf "  step_s: %.9g\n", $2 + 0.01; next } { print }' "$cal/tiny-cpu.yaml" \
  >"$t/slower.yaml"
check "  ... --cost-model replaces the calibrated model" run 0 "$g" revalidate "$kept" --out "$t/rv3" \
  --build-dir "$build" --cost-model "$t/slower.yaml"
check "  ... (its runs are slower)" python3 -c "
import json, sys
a, b = (json.load(open(sys.argv[i] + '/burst-8b-vllm-hash-calibrated-validation/validation.json'))['aggregates']['tpot_ms.p50']['sim'] for i in (1, 2))
sys.exit(0 if b > a + 5 else 1)" "$rv" "$(echo "$t"/rv3/*-validate)"

# The report says when the pipeline is incomplete, and exits 1.
rm -rf "$w/burst-8b-vllm-hash-roofline-validation"
check "the report of an incomplete run exits 1" run 1 python3 "$b/experiments/validation/gpu/report.py" "$w" --out r2.md
check "  ... naming what is missing" has "INCOMPLETE: no validation of burst-8b vllm-hash (roofline)" "$w/r2.md"

# The calibrated model, shipped where its name says, is found from any folder by that path.
cp "$cal/tiny-cpu.yaml" "$cal/tiny-cpu-profile.csv" "$b/experiments/catalog/calibrated/"
check "the shipped model loads from the catalogue" run 0 "$b/bin/sim" run "$b/experiments/burst-tiny.yaml" \
  --set cost_model.file=experiments/catalog/calibrated/tiny-cpu.yaml --quiet --out "$t/shipped"

# --budget: the smallest (60 s) leaves 30 s to commands (30 s are kept for the tables): what
# fits runs, the rest is skipped, and the two files are written all the same.
t0=$(date +%s)
check "gpu-check validate --budget 60 ends within it" run 1 "$b/gpu-check" validate --device cpu \
  --budget 60 --out "$t/b"
check "  ... (within 60 s)" test $(($(date +%s) - t0)) -le 60
check "  ... leaving two files" test "$(ls "$t/b" | tr '\n' ' ')" = "validate.tar.gz validate.txt "
mkdir -p "$t/bx"
tar -xzf "$t/b/validate.tar.gz" -C "$t/bx"
bw=$(echo "$t"/bx/gpu-check-validate.*)
check "  ... the profile ran" grep -q "^profile	0	" "$bw/steps.tsv"
check "  ... the engine runs were skipped, saying why" \
  has "skipped: [0-9]* s left of the 60 s budget (--budget)" "$bw/engine_burst-8b-vllm-hash.log"
check "  ... and the report says the pipeline is incomplete" has "INCOMPLETE" "$t/b/validate.txt"
check "--budget below 60 refuses (exit 2)" run 2 "$b/gpu-check" validate --device cpu --budget 59
check "a mode named twice refuses (exit 2)" run 2 "$b/gpu-check" bench bench --dry-run
check "two modes dry-run in order" run 0 "$b/gpu-check" bench e2e --dry-run --out "$t/d"
check "  ... bench, then e2e" test "$(grep -o '^mode [a-z0-9]*' "$t/last.txt" | tr '\n' ' ')" = "mode bench mode e2e "

# --only: the steps it names run, the others are listed as skipped; a pattern that matches no
# step is named; anything but names, patterns and commas is refused.
check "gpu-check --only keeps the steps it names" run 0 "$b/gpu-check" tests e2e --dry-run \
  --only 'gpu_*,engine_c32,copy_bw,ncu_decode_step,no_such_step' --out "$t/d"
check "  ... running them" test "$(grep -cE '^  \[(gpu_kernels_test|gpu_executor_test|engine_c32|copy_bw|ncu_decode_step)\] timeout' "$t/last.txt")" = 5
check "  ... skipping the rest" has "\[engine_c128\] skipped: not in --only" "$t/last.txt"
check "  ... (all the rest: 5 of tests, 11 of e2e)" test "$(grep -c 'skipped: not in --only' "$t/last.txt")" = 16
check "  ... naming a pattern that matched nothing" has "'no_such_step' matched no step of tests e2e" "$t/last.txt"
check "--only with a space refuses (exit 2)" run 2 "$b/gpu-check" e2e --dry-run --only 'engine_c32 copy_bw'
check "gpu-check --skip leaves out the steps it names" run 0 "$b/gpu-check" tests e2e --dry-run \
  --skip 'hf_*,sanitizer_racecheck' --out "$t/d"
check "  ... (three)" test "$(grep -c 'skipped: in --skip' "$t/last.txt")" = 3
check "  ... HF generate among them" has "\[hf_generate\] skipped: in --skip" "$t/last.txt"
check "gpu-check validate --dry-run lists the roofline runs" run 0 "$b/gpu-check" validate --dry-run --out "$t/d"
check "  ... " has "sim_burst-8b-vllm-hash_roofline" "$t/last.txt"
check "  ... and the report" has "experiments/validation/gpu/report.py" "$t/last.txt"
# On the GPU every run names the board's catalogue entry (\$HW in a dry run), so that on an H100
# the roofline runs do not price the experiments' H200.
check "  ... every run names the GPU's hardware entry (calibration, 6 + 1 engine runs, 12 sim runs)" \
  test "$(grep -c 'run .*--set hardware=\\\$HW' "$t/last.txt")" = 20
# --kv-cache-dtype: the profile and every engine and sim run store K/V so, and the calibrated
# files carry the dtype in their names.
check "gpu-check validate --kv-cache-dtype fp8 --dry-run" run 0 "$b/gpu-check" validate \
  --kv-cache-dtype fp8 --dry-run --out "$t/d"
check "  ... profiles an fp8 cache" has "profile --device cuda --model Llama-3-8B --max-tokens 8192 --kv-cache-dtype fp8" "$t/last.txt"
check "  ... into files named for it" grep -qF \
  'sim calibrate experiments/catalog/calibrated/llama-3-8b-\$GPU-fp8-profile.csv -o experiments/catalog/calibrated/llama-3-8b-\$GPU-fp8.yaml' "$t/last.txt"
check "  ... every run stores it (calibration, 6 + 1 graphs-off engine runs, 12 sim runs)" test "$(grep -c "run .*--set model.kv_cache_dtype=fp8" "$t/last.txt")" = 20
check "  ... the report names it" has "KV cache {header.get('kv_cache_dtype'" "$b/experiments/validation/gpu/report.py"
check "  ... with the wgmma prefill kernel chosen" run 0 env SERVELAB_CUDA_PREFILL=wgmma \
  "$b/gpu-check" validate --kv-cache-dtype fp8 --dry-run --out "$t/d"
check "  ... keeps it (wgmma reads fp8 too)" test "$(grep -c 'prefill kernel .* over fp8' "$t/last.txt")" = 0
check "--kv-cache-dtype fp16 refuses (exit 2)" run 2 "$b/gpu-check" validate --kv-cache-dtype fp16 --dry-run
check "  ... naming what the CUDA executor stores" has "expected bf16, fp8, fp8_e4m3 or fp8_e5m2" "$t/last.txt"
check "--kv-cache-dtype with another mode refuses (exit 2)" run 2 "$b/gpu-check" e2e --kv-cache-dtype fp8 --dry-run
check "--device cpu with another mode refuses (exit 2)" run 2 "$b/gpu-check" tests --device cpu
check "--device gpu refuses (exit 2)" run 2 "$b/gpu-check" validate --device gpu
check "  ... naming what it expected" has "expected cuda or cpu" "$t/last.txt"

echo "$fails failed"
[ "$fails" = 0 ]
