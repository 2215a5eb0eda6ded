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

import servelab
from policy_cost import Calls, arguments, compare

calls = Calls()


class RoundRobin:
    def __init__(self):
        self.next = 0

    def __call__(self, request, replicas):
        calls.n += 1
        choice = self.next % len(replicas)
        self.next = choice + 1
        return choice


def main():
    args = arguments(__doc__, "experiments/lessons/prefix-routing.yaml")
    servelab.register_router("python-rr", RoundRobin, description="round-robin in Python")
    compare(args, {"cluster.router": "round_robin"}, {"cluster.router": "python-rr"}, calls,
            "router calls",
            lambda files: {n: d.replace(b"python-rr", b"round_robin") for n, d in files.items()})


if __name__ == "__main__":
    main()
