#!/usr/bin/env python3
"""What a queue order written in Python costs: the Azure conversation trace
(experiments/azure-conv.yaml, 19,366 requests) under the built-in `fcfs` and under a Python
queue order that admits in the same order (key: arrival time, then id), with the same
preemption rule, with the per-step invariant checks (the default while a Python policy is
active) and without them (check_invariants=False). Runs are interleaved (built-in, Python, built-in, ...) so machine load hits
both alike; prints each run's wall time, the medians, and checks that all give byte-identical
run folders (but config.yaml, which names the queue order). docs/performance.md records the numbers.

    PYTHONPATH=build/release/python /usr/bin/python3 bench/python/queue_order_cost.py [--reps N]
"""

import argparse
import statistics
import time

import servelab


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5, help="runs of each (default 5)")
    parser.add_argument("--experiment", default=servelab.home + "/experiments/azure-conv.yaml")
    args = parser.parse_args()

    calls = 0

    def fcfs_key(request):
        nonlocal calls
        calls += 1
        return (request.arrival_ns, request.id)

    servelab.register_queue_order("python-fcfs", fcfs_key, description="FCFS in Python")
    python = {"policies.queue": "python-fcfs"}
    variants = {"built-in fcfs": ({}, True), "Python fcfs": (python, True),
                "  unchecked": (python, False)}
    times = {name: [] for name in variants}
    files = {}
    for _ in range(args.reps):
        for name, (overrides, check) in variants.items():
            calls = 0
            start = time.perf_counter()
            result = servelab.run(args.experiment, overrides=overrides, check_invariants=check)
            times[name].append(time.perf_counter() - start)
            # config.yaml names the queue order; every other file must be the same.
            files[name] = {n: d for n, d in result.files.items() if n != "config.yaml"}
            if name == "Python fcfs":
                key_calls = calls
    same = all(files[n] == files["built-in fcfs"] for n in variants)
    requests = result.summary["requests"]["total"]
    print(f"{args.experiment}: {requests} requests, {result.summary['num_steps']} steps, "
          f"{key_calls} key calls per Python run; outputs identical: {same}")
    base = statistics.median(times["built-in fcfs"])
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"  {name:14s} median {med:.3f} s  (runs: {', '.join(f'{t:.3f}' for t in ts)})"
              f"  x{med / base:.2f}")
    unchecked = statistics.median(times["  unchecked"]) - base
    checks = statistics.median(times["Python fcfs"]) - statistics.median(times["  unchecked"])
    steps = result.summary["num_steps"]
    print(f"  Python key calls: {unchecked * 1e6 / key_calls:.2f} us per call; invariant checks:"
          f" {checks * 1e6 / steps:.2f} us per step")
    if not same:
        raise SystemExit("the Python FCFS order did not reproduce the built-in one")


if __name__ == "__main__":
    main()
