#!/usr/bin/env bash
# The kernel benchmark (bench/kernels_bench.cc) on the CUDA emulator (ctest: Emu.KernelsBench,
# label EMU): its smallest shapes run to the end (buffers, split plans, the L2 flush, the copy
# reference, CUDA-event timing) with no benchmark error, as `gpu-check bench` will run them on a
# GPU, and bench/gpu/report.py reads the JSON Google Benchmark writes (the counters it needs are
# there, named as it expects). The emulator's timings are the CPU's: nothing is judged on them.
# The fp8 rows (kernel 2) run once each, the 128-row prefill kernels (3 fa2_128, 4 wgmma) at 512;
# the o_proj GEMM at one token through cuBLAS, the skinny kernel, cuBLASLt (timed per shape) and
# auto (the fastest of them, timed per shape),
# the skinny kernel with its plan's splits and with 2; the three per-token kernels
# (RMSNorm, SiLU-mul, QKV + RoPE + KV write) at one row. The WMMA prefill fallback is
# left out: its replicated-fragment model is the emulator's slowest path (minutes under
# AddressSanitizer).
#
# usage: kernels_bench_emu_test.sh SOURCE_DIR KERNELS_BENCH_EMU
set -uo pipefail
src=$1 bench=$2
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
fails=0
mkdir -p "$t/elsewhere" "$t/work"
# check and run: tests/script_checks.sh (run: from $t/elsewhere, bare environment).
source "$src/tests/script_checks.sh"
has() { grep -q -- "$1" "$2" || { echo "$2 lacks '$1'"; return 1; }; }

j=$t/work/kernels_bench.json
check "kernels_bench (emulated) runs its smallest shapes" run 0 "$bench" \
  '--benchmark_filter=^BM_(DeviceCopy/268435456|DecodeAttention/(1|8)/512/|PrefillAttention/512/(0|2|3|4)|PrefillChunk/16/128/|DecodeGemm/1/1/|SkinnySplits/1/1/(0|2)/|LoraDelta/8/4/|TokenKernels/1/|SwapOut/16)' \
  --benchmark_min_time=0.01 --benchmark_out_format=json "--benchmark_out=$j"
check "  ... twenty-five benchmarks, none in error" python3 - "$j" <<'EOF'
import json, sys
runs = [b for b in json.load(open(sys.argv[1]))["benchmarks"]
        if b.get("run_type", "iteration") == "iteration"]
names = [b["name"] for b in runs]
print("  " + ", ".join(names))
bad = [b["name"] + ": " + b.get("error_message", "") for b in runs if b.get("error_occurred")]
decode = [b for b in runs if b["name"].startswith("BM_DecodeAttention")]
lt = [b for b in runs if b["name"].startswith("BM_DecodeGemm/1/1/2")]
skinny = [b for b in runs if b["name"].startswith("BM_DecodeGemm/1/1/1")]
auto = [b for b in runs if b["name"].startswith("BM_DecodeGemm/1/1/3")]
splits = {b["name"]: b for b in runs if b["name"].startswith("BM_SkinnySplits")}
ok = (len(runs) == 25 and not bad and len(decode) == 5 and
      len(auto) == 1 and auto[0]["label"] in ("o auto lt", "o auto cublas", "o auto skinny") and
      all(auto[0][c] > 0 for c in ("lt_us", "cublas_us", "skinny_us")) and
      (auto[0]["skinny_splits"] >= 1) == auto[0]["label"].endswith("skinny") and
      splits.keys() == {"BM_SkinnySplits/1/1/0/manual_time", "BM_SkinnySplits/1/1/2/manual_time"} and
      splits["BM_SkinnySplits/1/1/2/manual_time"]["splits"] == 2 and
      splits["BM_SkinnySplits/1/1/2/manual_time"]["label"] == "o 2 splits" and
      all(b["predicted_us"] > 0 and b["GBps"] > 0 for b in splits.values()) and
      all(b["GBps"] > 0 and b["copy_GBps"] > 0 and b["splits"] >= 1 for b in decode) and
      {b["label"] for b in decode} == {"tiled", "pipelined", "pipelined fp8_e4m3"} and
      len(skinny) == 1 and skinny[0]["splits"] >= 1 and skinny[0]["predicted_us"] > 0 and
      "predicted_us" not in lt[0] and
      len(lt) == 1 and lt[0]["label"] == "o lt" and lt[0]["candidates"] >= 1 and
      0 <= lt[0]["chosen"] < lt[0]["candidates"] and lt[0]["first_us"] > 0 and
      all(b["TFLOPs"] > 0 for b in runs if b["name"].startswith("BM_PrefillAttention")) and
      {b["label"] for b in runs if b["name"].startswith("BM_TokenKernels")} ==
      {"rms_norm", "silu_mul", "qkv_rope_kv_write"})
print("\n".join(bad))
sys.exit(0 if ok else 1)
EOF
# report.py's bench table from the real output: the decode rows named by kernel, the copy
# reference; prefill rows miss their target here (no SDPA figure without torch), so it exits 1.
check "report.py bench reads it" run 1 python3 "$src/bench/gpu/report.py" bench "$t/work"
check "  ... the copy reference" has "device-to-device copy: " "$t/last.txt"
check "  ... decode rows by kernel" has "BM_DecodeAttention/8/512/1 (pipelined)" "$t/last.txt"
check "  ... the tiled kernel reported" has "BM_DecodeAttention/8/512/0 (tiled)" "$t/last.txt"
check "  ... prefill rows" has "BM_PrefillAttention/512/0" "$t/last.txt"
check "  ... the fp8 decode row" has "BM_DecodeAttention/8/512/2 (pipelined fp8_e4m3)" "$t/last.txt"
check "  ... fp8 prefill row" has "BM_PrefillAttention/512/2 (fa2 fp8_e4m3)" "$t/last.txt"
check "  ... the 128-row prefill row" has "BM_PrefillAttention/512/3 (fa2_128)" "$t/last.txt"
check "  ... the wgmma prefill row" has "BM_PrefillAttention/512/4 (wgmma)" "$t/last.txt"
check "  ... the chunk row" has "BM_PrefillChunk/16/128/0 (fa2 unsplit)" "$t/last.txt"
check "  ... the head-packing chunk row" has "BM_PrefillChunk/16/128/2 (fa2_gqa split-KV)" "$t/last.txt"
check "  ... a GEMM row, named" has "BM_DecodeGemm/1/1/0 (o cublas)" "$t/last.txt"
check "  ... the skinny kernel's row" has "BM_DecodeGemm/1/1/1 (o skinny)" "$t/last.txt"
check "  ... with its plan" grep -qE "BM_DecodeGemm/1/1/1 \(o skinny\).* splits, model [0-9.]+ us" "$t/last.txt"
check "  ... the cuBLASLt row, with its choice" has "BM_DecodeGemm/1/1/2 (o lt).*candidate [0-9] of [0-9]" "$t/last.txt"
check "  ... the LoRA rows" has "BM_LoraDelta/8/4/1 (8 segments gather)" "$t/last.txt"
check "  ... the per-token kernels' rows" test "$(grep -cE 'BM_TokenKernels/1/[012] \((rms_norm|silu_mul|qkv_rope_kv_write)\)' "$t/last.txt")" = 3
# gemm-choice needs every decode-step GEMM at M = 1, 8, 32: with one shape it keeps cuBLAS.
check "report.py gemm-choice without every figure: cublas" run 0 python3 \
  "$src/bench/gpu/report.py" gemm-choice "$t/work"
check "  ... printed" has "^cublas$" "$t/last.txt"
check "  ... and no benchmark error" bash -c "! grep -q ERROR '$t/last.txt'"

[ "$fails" -eq 0 ] || { echo "$fails check(s) failed"; cat "$t/last.txt"; exit 1; }
echo "all checks passed"
