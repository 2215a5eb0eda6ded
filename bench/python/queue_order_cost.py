#!/usr/bin/env python3
"""What a queue order written in Python costs: the Azure conversation trace
(experiments/azure-conv.yaml, 19,366 requests) under the built-in `fcfs` and under a Python
queue order that admits in the same order (key: arrival time, then id), with the same
preemption rule. Runs are interleaved (built-in, Python, built-in, ...) so machine load hits
both alike; prints each run's wall time, the medians, and checks that both give byte-identical
run folders. docs/performance.md records the numbers.

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
    variants = {"built-in fcfs": {}, "Python fcfs": {"policies.queue": "python-fcfs"}}
    times = {name: [] for name in variants}
    files = {}
    for _ in range(args.reps):
        for name, overrides in variants.items():
            calls = 0
            start = time.perf_counter()
            result = servelab.run(args.experiment, overrides=overrides)
            times[name].append(time.perf_counter() - start)
            files[name] = result.files
            if name == "Python fcfs":
                key_calls = calls
    summary = files["built-in fcfs"]
    same = all(files[n] == summary for n in variants)
    requests = result.summary["requests"]["total"]
    print(f"{args.experiment}: {requests} requests, {result.summary['num_steps']} steps, "
          f"{key_calls} key calls per Python run; outputs identical: {same}")
    base = statistics.median(times["built-in fcfs"])
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"  {name:14s} median {med:.3f} s  (runs: {', '.join(f'{t:.3f}' for t in ts)})"
              f"  x{med / base:.2f}")
    extra = statistics.median(times["Python fcfs"]) - base
    print(f"  cost of the Python order: {extra * 1e6 / key_calls:.2f} us per key call")
    if not same:
        raise SystemExit("the Python FCFS order did not reproduce the built-in one")


if __name__ == "__main__":
    main()
