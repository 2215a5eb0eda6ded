#!/usr/bin/env python3
"""What the GPU validation workloads ask of the machine, measured by the simulator: the table of
docs/validation.md §5 ("The workloads") and docs/gpu-todo.md, and the basis of gpu-check
validate's time estimate.

usage: workload_stats.py [--sim PATH] [--set KEY=VALUE]... [EXP.yaml ...]

Simulates each experiment (default: every *.yaml beside this file) under the two policy mixes of
`gpu-check validate` (vllm-hash: the file's policies; sarathi-recompute: Sarathi-Serve batching
in chunks of 512 tokens, no prefix cache), with the KV block count the file gives or, where it
gives none, the simulator's own memory arithmetic (gpu_memory_utilization), which stands in for
the engine's count. --set is passed to every run (to measure a candidate slice). Run folders go
to a temporary directory that is removed afterwards; nothing is written elsewhere.

Prints a markdown table, one row per workload x mix: requests, prompt and output tokens, prefix
hit rate (tokens), mean sequences a step, TTFT p50 / p99, queueing p50, preemptions, prefills cut
short (requests whose prompt took more than one step, and the partial chunks), simulated
duration, KV blocks and peak KV usage. Then the sum of the simulated durations: gpu-check replays
each workload in real time on the engine, so that sum is the engine time of the mode.

--sim defaults to $SERVELAB_SIM, else build/release/sim/sim of this repository. Exit status: 0,
1 when a run fails or the mixes here are out of step with scripts/gpu-check, 2 for bad usage
(a missing file, or an experiment or --set the simulator refuses).
Standard library only.
"""
import argparse
import csv
import glob
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))

# The mixes of scripts/gpu-check mode_validate, in the same words (checked below).
SARATHI_SETS = ["--set", "policies.batch={name: sarathi, chunk_size: 512}",
                "--set", "policies.prefix_cache=none"]
GPU_CHECK_LINE = ("--set 'policies.batch={name: sarathi, chunk_size: 512}' "
                  "--set policies.prefix_cache=none")
MIXES = (("vllm-hash", []), ("sarathi-recompute", SARATHI_SETS))


def check_mixes():
    """None when gpu-check (repository or bundle layout) sets the Sarathi mix as this file does."""
    for path in (os.path.join(ROOT, "scripts", "gpu-check"), os.path.join(ROOT, "gpu-check")):
        if os.path.isfile(path):
            with open(path) as f:
                if GPU_CHECK_LINE in f.read():
                    return None
            return (f"{path}: its sarathi-recompute mix is no longer `{GPU_CHECK_LINE}`; "
                    f"update {__file__}")
    return None  # no gpu-check beside this copy: nothing to compare with


class RunFailed(Exception):
    def __init__(self, message, code):
        super().__init__(message)
        self.code = code


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def measure(sim, exp, mix_sets, extra_sets, out):
    cmd = [sim, "run", exp, *extra_sets, *mix_sets, "--record-schedule", "--quiet", "--out", out]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RunFailed(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr.strip()}", r.returncode)
    with open(os.path.join(out, "summary.json")) as f:
        s = json.load(f)
    requests = read_csv(os.path.join(out, "requests.csv"))
    prompt = {int(q["id"]): int(q["prompt_tokens"]) for q in requests}
    partial, chunked = 0, set()
    for row in read_csv(os.path.join(out, "schedule.csv")):
        if row["kind"] != "prefill":
            continue
        req = int(row["request"])
        if int(row["first_token"]) + int(row["num_tokens"]) < prompt[req]:
            partial += 1
            chunked.add(req)
    return {
        "requests": s["requests"]["completed"],
        "total": s["requests"]["total"],
        "prompt": s["throughput"]["input_tokens"],
        "output": s["throughput"]["output_tokens"],
        "hit": s["prefix_cache"]["hit_rate"],
        "batch": s["batch"]["seqs_mean"],
        "ttft50": s["ttft_ms"]["p50"],
        "ttft99": s["ttft_ms"]["p99"],
        "queue50": s["queueing_ms"]["p50"],
        "preempt": s["preemption"]["preemptions"],
        "chunked": len(chunked),
        "partial": partial,
        "duration": s["duration_s"],
        "blocks": int(s["run"]["num_gpu_blocks"]),
        "kv_max": s["kv_cache"]["usage_max"],
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("experiments", nargs="*", metavar="EXP.yaml")
    default_sim = os.path.join(ROOT, "build", "release", "sim", "sim")
    ap.add_argument("--sim", default=os.environ.get("SERVELAB_SIM", default_sim))
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="sets")
    args = ap.parse_args()
    exps = args.experiments or sorted(glob.glob(os.path.join(HERE, "*.yaml")))
    if not os.access(args.sim, os.X_OK):
        print(f"workload_stats.py: --sim {args.sim}: not an executable (build the sim target)",
              file=sys.stderr)
        return 2
    for e in exps:
        if not os.path.isfile(e):
            print(f"workload_stats.py: {e}: no such file", file=sys.stderr)
            return 2
    problem = check_mixes()
    if problem:
        print(f"workload_stats.py: {problem}", file=sys.stderr)
        return 1
    extra = [a for kv in args.sets for a in ("--set", kv)]
    print("| workload | mix | requests | prompt / output tokens | prefix hits | seqs a step | "
          "TTFT p50 / p99 ms | queueing p50 ms | preemptions | chunked prompts (partial chunks) | "
          "simulated s | KV blocks (peak use) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    total = 0.0
    with tempfile.TemporaryDirectory(prefix="workload_stats_") as tmp:
        for exp in exps:
            name = os.path.splitext(os.path.basename(exp))[0]
            for mix, sets in MIXES:
                try:
                    m = measure(args.sim, exp, sets, extra, os.path.join(tmp, f"{name}-{mix}"))
                except RunFailed as err:
                    print(f"workload_stats.py: {name} {mix}: {err}", file=sys.stderr)
                    return 2 if err.code == 2 else 1  # 2: the sim refused the experiment
                except (OSError, KeyError, ValueError) as err:
                    print(f"workload_stats.py: {name} {mix}: unreadable run folder: {err}",
                          file=sys.stderr)
                    return 1
                total += m["duration"]
                done = f"{m['requests']:,}"
                if m["requests"] != m["total"]:
                    done += f" of {m['total']:,}"
                print(f"| {name} | {mix} | {done} | {m['prompt']:,} / {m['output']:,} | "
                      f"{100 * m['hit']:.1f} % | {m['batch']:.1f} | "
                      f"{m['ttft50']:,.0f} / {m['ttft99']:,.0f} | "
                      f"{m['queue50']:.0f} | {m['preempt']} | {m['chunked']} ({m['partial']}) | "
                      f"{m['duration']:.1f} | {m['blocks']:,} ({100 * m['kv_max']:.0f} %) |")
    print(f"\nSimulated time of the {2 * len(exps)} runs: {total:.1f} s (the engine replays them "
          f"in real time; x2 for safety: {2 * total:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
