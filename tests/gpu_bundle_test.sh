#!/usr/bin/env bash
# scripts/gpu-bundle and scripts/gpu-check on a machine without a GPU (ctest: GpuBundle): builds
# a bundle from this build folder, checks its size (32,000,000 bytes), with ldd that only glibc,
# the NVIDIA driver and cuBLAS are left to the target, that the programs share libservelab.so and
# that cudart is in it and nowhere else, runs its programs from another folder with a bare
# environment (they must start, and skip or refuse cleanly without a GPU), and runs every
# gpu-check mode with --dry-run.
#
# usage: gpu_bundle_test.sh SOURCE_DIR BUILD_DIR   (exit 77: skipped, the build has no CUDA)
set -uo pipefail
src=$1 build=$2
if [ ! -f "$build/kernels/libservelab_kernels.a" ]; then
  echo "SKIPPED: this build has no CUDA (nvcc was not found), so there is no GPU bundle to make"
  exit 77
fi
if [ ! -x "$build/bench/kernels_bench" ]; then
  echo "SKIPPED: the benchmarks are not built (SERVELAB_BUILD_BENCH=OFF); the bundle needs kernels_bench"
  exit 77
fi
if [ ! -f "$build/bundle/lib/libservelab.so" ]; then
  echo "SKIPPED: this build has no bundle programs (scripts/gpu-bundle.cmake: they need position-independent code, SERVELAB_BUILD_PYTHON=ON)"
  exit 77
fi
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
fails=0
# check and run: tests/script_checks.sh
source "$src/tests/script_checks.sh"
has() { grep -q -- "$1" "$t/last.txt" || { echo "output lacks '$1':"; tail -n 20 "$t/last.txt"; return 1; }; }
mkdir -p "$t/elsewhere"
t=$(realpath "$t")
b=$t/bundle

check "gpu-bundle builds a bundle" "$src/scripts/gpu-bundle" "$b" --build-dir "$build" --no-build
[ -f "$b/BUNDLE.txt" ] || { echo "FAIL no bundle made"; exit 1; }
bytes=$(du -sb "$b" | cut -f1)
echo "bundle: $((bytes / 1024)) KiB"
check "bundle within 32,000,000 bytes" test "$bytes" -le 32000000

# Every library a program needs is in the bundle, or glibc, the driver or cuBLAS.
target_re='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libcuda\.so|libnvidia|libcublas\.so|libcublasLt\.so)'
ldd_ok() {
  local p name arrow path bad=0
  for p in "$b"/bin/*; do
    while read -r name arrow path _; do
      [ "$arrow" = "=>" ] || continue
      [[ $name =~ $target_re ]] && continue
      path=$(realpath -m "$path")
      case $path in
        "$b"/lib/*) ;;
        *) echo "  $(basename "$p"): $name resolves to $path, outside the bundle"; bad=1 ;;
      esac
    done < <(env -i PATH=/usr/bin:/bin ldd "$p")
  done
  return $bad
}
check "ldd: only glibc, the driver and cuBLAS are left to the target" ldd_ok
cudart_static() { ! env -i PATH=/usr/bin:/bin ldd "$b/bin/engine" | grep -q libcudart; }
check "cudart is linked statically" cudart_static
# One copy of the project's code and of cudart (its shared-memory names mark it), in lib/.
shared_code() {
  local p path bad=0
  for p in "$b"/bin/*; do
    path=$(env -i PATH=/usr/bin:/bin ldd "$p" | awk '$1 == "libservelab.so" {print $3}')
    [ -n "$path" ] && [ "$(realpath -m "$path")" = "$b/lib/libservelab.so" ] ||
      { echo "  $(basename "$p") loads libservelab.so from '${path}', not $b/lib"; bad=1; }
  done
  return $bad
}
check "every program links the bundle's libservelab.so" shared_code
cudart_once() {
  local holders
  holders=$(cd "$b" && grep -l -a 'cudart\.shm' bin/* lib/* | tr '\n' ' ')
  [ "$holders" = "lib/libservelab.so " ] || { echo "  cudart found in: ${holders:-nothing}"; return 1; }
}
check "cudart is in libservelab.so and in no program" cudart_once
for name in sim engine kernels_bench gpu_dump_logits engine_run_test home_test; do
  check "bundle ships $name" test -x "$b/bin/$name"
done
for src_test in "$src"/tests/gpu_*_test.cc; do
  name=$(basename "$src_test" .cc)
  check "bundle ships the GPU test $name" test -x "$b/bin/$name"
done

# The programs, from another folder, with no SERVELAB_HOME and no LD_LIBRARY_PATH.
check "sim runs an experiment from the bundle" run 0 "$b/bin/sim" run "$b/experiments/burst-tiny.yaml" --out "$t/run" --quiet
# The bundle carries no MPI (the plugin stays in the build folder): `sim sweep --mpi` refuses.
check "sim sweep --mpi refuses in the bundle (exit 2)" run 2 "$b/bin/sim" sweep "$b/experiments/policies.yaml" --mpi
check "  ... built without MPI" has "built without MPI"
check "engine --device cuda refuses cleanly (exit 2)" run 2 "$b/bin/engine" run "$b/experiments/burst-tiny.yaml" --device cuda --out "$t/cuda" --quiet
check "  ... and says why" has "cuda"
check "gpu_kernels_test starts and skips" run 0 "$b/bin/gpu_kernels_test"
check "  ... with a message" has "SKIPPED"
check "gpu_executor_test starts and skips" run 0 "$b/bin/gpu_executor_test"
check "  ... with a message" has "SKIPPED"
check "engine_run_test's CUDA cases pass or skip" run 0 "$b/bin/engine_run_test" '--gtest_filter=*Cuda*'
check "home_test passes inside the bundle" run 0 "$b/bin/home_test"
# Every file the programs name by home_path("...") is in the bundle (2026-12-04's GPU window lost
# its serve run to a missing data/tokenizers/bytes/tokenizer.json).
home_files() {
  local f missing=0
  for f in $(grep -rhoE 'home_path\("[^"]+"\)' --include=*.cc --include=*.h "$src/engine" "$src/serving" "$src/sim" "$src/core" | sed -E 's/home_path\("([^"]+)"\)/\1/' | sort -u); do
    [ -e "$b/$f" ] || { echo "  missing from the bundle: $f"; missing=1; }
  done
  return $missing
}
check "every home_path file the sources name is in the bundle" home_files
check "kernels_bench starts and reports no device" run 0 "$b/bin/kernels_bench" --benchmark_filter=DeviceCopy --benchmark_min_time=0.01
check "  ... with a message" has "no CUDA device"
check "gpu_dump_logits refuses --device cuda cleanly (exit 2)" run 2 "$b/bin/gpu_dump_logits" "$t/nomodel" "$t/x.json" --device cuda

# gpu-check: every mode's dry run; no GPU is a clean refusal; only from a bundle.
for m in tests bench e2e validate all; do
  check "gpu-check $m --dry-run" run 0 "$b/gpu-check" "$m" --dry-run --out "$t/o"
done
check "  ... names the sanitizers and HF parity" has "compute-sanitizer --tool synccheck"
check "  ... and the validation runs" has "sim validate\\|validate mooncake-8b\\|validate_mooncake-8b"
check "  ... and the power fit" has "calibrate .*--power --hardware"
check "  ... and bench's head-packing choice" has "\[pack_choice\] export SERVELAB_CUDA_PREFILL_PACK"
# The wgmma prefill kernel reads fp8 KV too: without bench's fp8 choice, e2e's fp8 KV run keeps
# the kernel the environment names.
check "gpu-check e2e --dry-run with SERVELAB_CUDA_PREFILL=wgmma" run 0 SERVELAB_CUDA_PREFILL=wgmma \
  "$b/gpu-check" e2e --dry-run --out "$t/o"
check "  ... runs the fp8 KV step as it is" has "\[engine_c32_fp8\] timeout [0-9]* env [^ ]*/bin/engine run"
# --bench-filter: kernels_bench times only the rows named, and always the copy bandwidth.
check "gpu-check bench --bench-filter --dry-run" run 0 "$b/gpu-check" bench --dry-run --out "$t/o" \
  --bench-filter 'BM_TokenKernels|BM_PrefillChunk/16/'
check "  ... hands kernels_bench the filter, the copy included" \
  has "benchmark_filter=BM_DeviceCopy\\\\|BM_TokenKernels\\\\|BM_PrefillChunk/16/"
check "gpu-check --bench-filter without bench refuses (exit 2)" run 2 "$b/gpu-check" tests \
  --bench-filter BM_TokenKernels --dry-run --out "$t/o"
check "gpu-check --bench-filter with a space refuses (exit 2)" run 2 "$b/gpu-check" bench \
  --bench-filter 'BM_Token Kernels' --dry-run --out "$t/o"
check "gpu-check without a GPU refuses (exit 2)" run 2 "$b/gpu-check" tests --out "$t/o"
check "  ... naming the reason" has "no NVIDIA GPU"
check "gpu-check rejects an unknown mode (exit 2)" run 2 "$b/gpu-check" everything
check "gpu-check outside a bundle refuses (exit 2)" run 2 "$src/scripts/gpu-check" tests --dry-run

# gpu-bundle never overwrites a user's folder, and replaces an earlier bundle in one step.
mkdir -p "$t/mine" && echo precious >"$t/mine/notes.txt"
check "gpu-bundle refuses a user's folder (exit 2)" run 2 "$src/scripts/gpu-bundle" "$t/mine" --build-dir "$build" --no-build
check "  ... and leaves it alone" grep -q precious "$t/mine/notes.txt"
check "gpu-bundle replaces an earlier bundle" "$src/scripts/gpu-bundle" "$b" --build-dir "$build" --no-build
check "gpu-bundle refuses a build without CUDA (exit 2)" run 2 "$src/scripts/gpu-bundle" "$t/b2" --build-dir "$t" --no-build
# A CUDA build without the bundle's programs (scripts/gpu-bundle.cmake did not make them).
mkdir -p "$t/nobundle/kernels" && touch "$t/nobundle/CMakeCache.txt" "$t/nobundle/kernels/libservelab_kernels.a"
check "gpu-bundle refuses a build without the bundle's programs (exit 2)" run 2 "$src/scripts/gpu-bundle" "$t/b3" --build-dir "$t/nobundle" --no-build
check "  ... naming the target to build" has "gpu_bundle_programs"
check "  ... and makes nothing" test ! -e "$t/b3"

echo "$fails failed"
[ "$fails" = 0 ]
