#!/usr/bin/env bash
# `engine serve` on a device, loaded over HTTP by `sim bench` with the same experiment's workload
# (gpu-check e2e's serve step; docs/serving.md):
#
#   bench/gpu/serve_bench.sh ENGINE SIM EXPERIMENT OUT_DIR [--device cuda|cpu] [--set k=v ...]
#
# Starts `ENGINE serve EXPERIMENT --device D --port 0` (its output in OUT_DIR.server.log), waits
# up to 120 s for its "listening on http://HOST:PORT" line, runs `SIM bench EXPERIMENT --url URL
# --out OUT_DIR --quiet`, then stops the server with SIGTERM (it drains and exits 0). The --set
# options go to both. Exit status: sim bench's when it failed, else the server's (0 when it
# drained cleanly); 1 when the server never listened or died; 2 bad arguments.
set -uo pipefail
usage() {
  echo "usage: serve_bench.sh ENGINE SIM EXPERIMENT OUT_DIR [--device cuda|cpu] [--set k=v ...]" >&2
  exit 2
}
[ $# -ge 4 ] || usage
engine=$1 sim=$2 exp=$3 out=$4
shift 4
device=cuda sets=()
while [ $# -gt 0 ]; do
  case $1 in
    --device) [ $# -ge 2 ] || usage; device=$2; shift 2 ;;
    --set) [ $# -ge 2 ] || usage; sets+=(--set "$2"); shift 2 ;;
    *) usage ;;
  esac
done
[ -x "$engine" ] && [ -x "$sim" ] && [ -f "$exp" ] || { echo "serve_bench.sh: missing $engine, $sim or $exp" >&2; exit 2; }

log=$out.server.log
"$engine" serve "$exp" --device "$device" --port 0 "${sets[@]}" >"$log" 2>&1 &
server=$!
url=""
for _ in $(seq 1 240); do
  url=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$log" | head -n1)
  [ -n "$url" ] && break
  kill -0 "$server" 2>/dev/null || break
  sleep 0.5
done
if [ -z "$url" ]; then
  echo "serve_bench.sh: the server did not listen (its log, $log):" >&2
  tail -n 20 "$log" >&2
  kill -KILL "$server" 2>/dev/null
  wait "$server" 2>/dev/null
  exit 1
fi
echo "serve_bench.sh: server at $url" >&2
"$sim" bench "$exp" --url "$url" --out "$out" --quiet "${sets[@]}"
bench=$?
kill -TERM "$server" 2>/dev/null
wait "$server"
rc=$?
[ "$bench" = 0 ] || { echo "serve_bench.sh: sim bench exited $bench" >&2; exit "$bench"; }
[ "$rc" = 0 ] || { echo "serve_bench.sh: the server exited $rc (log: $log)" >&2; tail -n 20 "$log" >&2; }
exit "$rc"
