#!/usr/bin/env python3
"""Markdown table of `sim validate` results: one row per OUT/<name>-<mix>-validation/validation.json.

usage: experiments/validation/summarize.py OUT_DIR
"""
import glob
import json
import os
import sys


def pct(x):
    return "n/a" if x is None else f"{100 * x:+.1f}"


def abs_pct(x):
    return "n/a" if x is None else f"{100 * x:.1f}"


out = sys.argv[1] if len(sys.argv) > 1 else "out/validation"
print("| workload | mix | steps eng/sim | schedule | step MAPE replayed (p50) | step MAPE paired (n) "
      "| TTFT mean / p50 | TPOT mean / p50 | E2E mean / p50 | throughput | TTFT p50 | TTFT p99 "
      "| TPOT p50 | TPOT p99 |")
print("|" + "---|" * 14)
for f in sorted(glob.glob(os.path.join(out, "*-validation", "validation.json"))):
    j = json.load(open(f))
    name = os.path.basename(os.path.dirname(f))[: -len("-validation")]
    wl, mix = None, None
    for m in ("vllm-hash", "sarathi-nocache", "vllm-swap"):
        if name.endswith("-" + m):
            wl, mix = name[: -len(m) - 1], m
    st, rq, ag = j["step_time"], j["requests"], j["aggregates"]
    rep = st["replayed"]
    sched = j["schedule"]["comparison"]
    if sched == "differ":
        sched = f"differ at {j['schedule']['first_differing_step']}"
    print(f"| {wl} | {mix} | {j['steps']['engine']}/{j['steps']['sim']} | {sched} "
          f"| {abs_pct(rep['mean'])} ({abs_pct(rep['p50'])}) "
          f"| {abs_pct(st['paired']['mean'])} ({st['paired']['count']}) "
          f"| {abs_pct(rq['ttft']['mean'])} / {abs_pct(rq['ttft']['p50'])} "
          f"| {abs_pct(rq['tpot']['mean'])} / {abs_pct(rq['tpot']['p50'])} "
          f"| {abs_pct(rq['e2e']['mean'])} / {abs_pct(rq['e2e']['p50'])} "
          f"| {pct(ag['throughput.output_tokens_per_s']['error'])} "
          f"| {pct(ag['ttft_ms.p50']['error'])} | {pct(ag['ttft_ms.p99']['error'])} "
          f"| {pct(ag['tpot_ms.p50']['error'])} | {pct(ag['tpot_ms.p99']['error'])} |")

# The latency attribution (sim validate; docs/validation.md "Latency attribution"): signed p50
# errors with the engine's steps back to back, priced by the cost model, and the simulator's run.
print()
print("| workload | mix | requests | time between steps, % of step time "
      "| TTFT p50: back to back / priced / simulator | TPOT p50: back to back / priced / simulator |")
print("|" + "---|" * 6)
for f in sorted(glob.glob(os.path.join(out, "*-validation", "validation.json"))):
    j = json.load(open(f))
    name = os.path.basename(os.path.dirname(f))[: -len("-validation")]
    a = j.get("latency_attribution") or {}
    rows = {r["name"]: r for r in a.get("rows", [])}
    if not rows:
        print(f"| {name} | | not attributed | | | |")
        continue
    wl, mix = name, ""
    for m in ("vllm-hash", "sarathi-nocache", "vllm-swap"):
        if name.endswith("-" + m):
            wl, mix = name[: -len(m) - 1], m
    names = ("back to back", "priced", "simulator")
    share = a["between_steps_s"] / a["steps_s"] if a["steps_s"] else None
    print(f"| {wl} | {mix} | {a['requests']} | {abs_pct(share)} "
          f"| {' / '.join(pct(rows[n]['ttft_error']) for n in names)} "
          f"| {' / '.join(pct(rows[n]['tpot_error']) for n in names)} |")
