#!/usr/bin/env python3
"""What a router written in Python costs: the prefix-routing lesson's cluster
(experiments/lessons/prefix-routing.yaml: 3,000 requests on four replicas) under the built-in
`round_robin` and under a Python round-robin class, with the per-step invariant checks of every
replica (the default while a Python policy is active) and without them (check_invariants=False).
Runs are interleaved so machine load hits all alike; prints each run's wall time, the medians,
and checks that every run folder is byte-identical (once the router's name is replaced).
docs/performance.md records the numbers.

    PYTHONPATH=build/release/python /usr/bin/python3 bench/python/router_cost.py [--reps N]
"""

import argparse
import statistics
import time

import servelab


class RoundRobin:
    calls = 0

    def __init__(self):
        self.next = 0

    def __call__(self, request, replicas):
        RoundRobin.calls += 1
        choice = self.next % len(replicas)
        self.next = choice + 1
        return choice


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5, help="runs of each (default 5)")
    parser.add_argument("--experiment",
                        default=servelab.home + "/experiments/lessons/prefix-routing.yaml")
    args = parser.parse_args()

    servelab.register_router("python-rr", RoundRobin, description="round-robin in Python")
    python = {"cluster.router": "python-rr"}
    variants = {"built-in round_robin": ({"cluster.router": "round_robin"}, True),
                "Python round-robin": (python, True), "  unchecked": (python, False)}
    times = {name: [] for name in variants}
    files = {}
    for _ in range(args.reps):
        for name, (overrides, check) in variants.items():
            RoundRobin.calls = 0
            start = time.perf_counter()
            result = servelab.run(args.experiment, overrides=overrides, check_invariants=check)
            times[name].append(time.perf_counter() - start)
            files[name] = {n: d.replace(b"python-rr", b"round_robin")
                           for n, d in result.files.items()}
            if name == "Python round-robin":
                calls = RoundRobin.calls
    same = all(files[n] == files["built-in round_robin"] for n in variants)
    print(f"{args.experiment}: {result.summary['requests']['total']} requests, "
          f"{result.summary['num_steps']} steps, {calls} router calls per Python run; "
          f"outputs identical: {same}")
    base = statistics.median(times["built-in round_robin"])
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"  {name:20s} median {med:.3f} s  (runs: {', '.join(f'{t:.3f}' for t in ts)})"
              f"  x{med / base:.2f}")
    if not same:
        raise SystemExit("the Python round-robin did not reproduce the built-in one")


if __name__ == "__main__":
    main()
