#!/usr/bin/env bash
# gpu-check's board entries (ctest GpuCheckBoardEntry): `gpu-check validate` names the GPU's
# catalogue entry on every run (`--set hardware=...`), chosen from the name nvidia-smi gives;
# a card with other memory or power than every entry (H100 PCIe and NVL, 40 GB A100s, L40, an
# RTX A4000 whose name contains "A40") gets none, so that validate keeps the experiments' H200
# and says so instead of pricing the wrong board. Every named entry must exist in the catalogue.
#
# usage: gpu_check_board_test.sh SOURCE_DIR
set -uo pipefail
src=$1
fails=0
check() {  # NAME WANT
  local got
  got=$("$src/scripts/gpu-check" --board-entry "$1")
  if [ "$got" != "$2" ]; then
    echo "FAIL: '$1' -> '$got', expected '$2'"
    fails=$((fails + 1))
  fi
  if [ -n "$got" ] && [ ! -f "$src/experiments/catalog/hardware/$got.yaml" ]; then
    echo "FAIL: '$1' -> '$got', which has no experiments/catalog/hardware/$got.yaml"
    fails=$((fails + 1))
  fi
}
check "NVIDIA H200" H200
check "NVIDIA H200 NVL" H200
check "NVIDIA H100 80GB HBM3" H100-SXM
check "NVIDIA H100 SXM5 80GB" H100-SXM
check "NVIDIA H100 PCIe" ""
check "NVIDIA H100 NVL" ""
check "NVIDIA A100-SXM4-80GB" A100-80GB
check "NVIDIA A100 80GB PCIe" A100-80GB
check "NVIDIA A100-SXM4-40GB" ""
check "NVIDIA A100-PCIE-40GB" ""
check "NVIDIA L40S" L40S
check "NVIDIA L40" ""
check "NVIDIA A40" A40
check "NVIDIA RTX A4000" ""
check "Tesla V100-SXM2-32GB" ""
# Usage: exactly one name.
"$src/scripts/gpu-check" --board-entry >/dev/null 2>&1
[ $? -eq 2 ] || { echo "FAIL: --board-entry without a name should exit 2"; fails=$((fails + 1)); }
[ $fails -eq 0 ] && echo "gpu-check board entries: all as expected"
exit $((fails > 0))
