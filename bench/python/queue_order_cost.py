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

import servelab
from policy_cost import Calls, arguments, compare


def main():
    args = arguments(__doc__, "experiments/azure-conv.yaml")
    calls = Calls()

    def fcfs_key(request):
        calls.n += 1
        return (request.arrival_ns, request.id)

    servelab.register_queue_order("python-fcfs", fcfs_key, description="FCFS in Python")
    # config.yaml names the queue order; every other file must be the same.
    compare(args, {}, {"policies.queue": "python-fcfs"}, calls, "key calls",
            lambda files: {n: d for n, d in files.items() if n != "config.yaml"})


if __name__ == "__main__":
    main()
