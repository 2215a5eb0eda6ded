#!/usr/bin/env bash
# scripts/kernel-resources without nvcc (ctest: KernelResources): its table from a saved ptxas
# log (entries, template instances, a device function's own report, a kernel that spills), and
# its usage errors (exit 2, naming the file or folder).
#
# usage: kernel_resources_test.sh SOURCE_DIR
set -uo pipefail
src=$1
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
status=0

# ptxas's report for sm_90 as nvcc -Xptxas -v prints it (names mangled; a noinline device
# function gets a properties line of its own between two entries).
cat >"$t/ptxas.log" <<'LOG'
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_ZN8servelab7kernels47_GLOBAL__N__172a2bee_14_elementwise_cu_2d66f7f815silu_mul_kernelEPK13__nv_bfloat16PS2_ii' for 'sm_90'
ptxas info    : Function properties for _ZN8servelab7kernels47_GLOBAL__N__172a2bee_14_elementwise_cu_2d66f7f815silu_mul_kernelEPK13__nv_bfloat16PS2_ii
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 34 registers, used 0 barriers
ptxas info    : Compile time = 231.790 ms
ptxas info    : Function properties for _ZN8servelab7kernels6helperEf
    16 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compiling entry function '_ZN8servelab7kernels13decode_kernelILi128ELi16EEEvPKfPfi' for 'sm_90'
ptxas info    : Function properties for _ZN8servelab7kernels13decode_kernelILi128ELi16EEEvPKfPfi
    40 bytes stack frame, 24 bytes spill stores, 32 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 16384 bytes smem, 400 bytes cmem[0]
ptxas info    : Compiling entry function '_ZN8servelab7kernels15rms_norm_kernelENS0_11RmsNormArgsE' for 'sm_90'
ptxas info    : Function properties for _ZN8servelab7kernels15rms_norm_kernelENS0_11RmsNormArgsE
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 32 registers, used 1 barriers, 128 bytes smem
LOG
# The whole table: demangled names without parameter lists, template arguments kept, the
# device function left out, numbers right-aligned, the spilling kernel named last.
cat >"$t/expected.txt" <<'TABLE'
file      | kernel                                    | registers | static smem (B) | stack (B) | spill stores/loads (B)
----------|-------------------------------------------|-----------|-----------------|-----------|-----------------------
ptxas.log | servelab::kernels::silu_mul_kernel        |        34 |               0 |         0 |                    0/0
ptxas.log | servelab::kernels::decode_kernel<128, 16> |       255 |           16384 |        40 |                  24/32
ptxas.log | servelab::kernels::rms_norm_kernel        |        32 |             128 |         0 |                    0/0
3 kernels, 1 with spills: servelab::kernels::decode_kernel<128, 16>
TABLE
if ! "$src/scripts/kernel-resources" --from-log "$t/ptxas.log" >"$t/table.txt"; then
  echo "FAIL: kernel-resources --from-log exited $?"
  status=1
elif ! diff -u "$t/expected.txt" "$t/table.txt"; then
  echo "FAIL: the table differs (above)"
  status=1
fi

# Usage errors: exit 2 and a message naming what is wrong.
expect_usage_error() {  # NEEDLE ARGS...
  local needle=$1 code
  shift
  "$src/scripts/kernel-resources" "$@" >/dev/null 2>"$t/err.txt"
  code=$?
  if [ "$code" -ne 2 ] || ! grep -qF "$needle" "$t/err.txt"; then
    echo "FAIL: kernel-resources $*: exit $code (want 2), stderr: $(cat "$t/err.txt")"
    status=1
  fi
}
expect_usage_error "$t/nowhere/compile_commands.json: not found" --build "$t/nowhere"
mkdir -p "$t/cpu"
echo '[{"directory": "/", "command": "c++ -c a.cc", "file": "/a.cc"}]' >"$t/cpu/compile_commands.json"
expect_usage_error "no .cu file is compiled there" --build "$t/cpu"
echo "ptxas info    : 0 bytes gmem" >"$t/empty.log"
expect_usage_error "no kernel in ptxas's report" --from-log "$t/empty.log"
expect_usage_error "$t/missing.log: cannot read" --from-log "$t/missing.log"
[ "$status" -eq 0 ] && echo "ok"
exit $status
