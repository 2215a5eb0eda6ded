#!/usr/bin/env python3
"""What an admission rule written in Python costs: the saying-no lesson at 80 requests/s
(experiments/lessons/saying-no.yaml: about 9,600 arrivals, 5 of 6 shed) under the built-in
`queue-length` rule (max_waiting 12) and under the same rule in Python, with the per-step
invariant checks (the default while a Python policy is active) and without them
(check_invariants=False). Runs are interleaved; prints each run's wall time, the medians, and
checks that every run folder is byte-identical once the rule's name is replaced.
docs/performance.md records the numbers.

    PYTHONPATH=build/release/python /usr/bin/python3 bench/python/admission_cost.py [--reps N]
"""

import servelab
from policy_cost import Calls, arguments, compare


def main():
    args = arguments(__doc__, "experiments/lessons/saying-no.yaml")
    calls = Calls()

    def queue_length(request, load, params):
        calls.n += 1
        if load.waiting < params["max_waiting"]:
            return ""
        return f"shed: {load.waiting} requests waiting (max_waiting {params['max_waiting']})"

    servelab.register_admission("python-queue-length", queue_length, params={"max_waiting": 64})
    rate = {"workload.arrival.rate": 80}
    compare(args, {**rate, "policies.admission": {"name": "queue-length", "max_waiting": 12}},
            {**rate, "policies.admission": {"name": "python-queue-length", "max_waiting": 12}},
            calls, "admission calls",
            lambda files: {n: d.replace(b"python-queue-length", b"queue-length")
                           for n, d in files.items()})


if __name__ == "__main__":
    main()
