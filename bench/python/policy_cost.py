"""What the policy-cost scripts share (queue_order_cost.py, router_cost.py, admission_cost.py):
a built-in policy against the same policy written in Python, with the per-step invariant checks
(the default while a Python policy is active) and without them, runs interleaved so that machine
load hits all alike, every run folder compared with the built-in's, and the medians printed.
"""

import argparse
import statistics
import time

import servelab


def arguments(doc, experiment):
    """--reps and --experiment (default `experiment` under the ServeLab home)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5, help="runs of each (default 5)")
    parser.add_argument("--experiment", default=servelab.home + "/" + experiment)
    return parser.parse_args()


class Calls:
    """A counter the Python policy bumps on each call."""

    def __init__(self):
        self.n = 0


def compare(args, builtin, python, calls, what, same_files=lambda files: files):
    """Times `builtin` and `python` (override dicts) and `python` unchecked, `args.reps` times
    each, interleaved. `calls` counts the Python policy's calls, `what` names them ("key
    calls"); `same_files(files)` maps a run's files to what must equal the built-in run's.
    Prints the table and the per-call and per-step costs; exits 1 when the outputs differ."""
    base_name, py_name = "built-in", "Python"
    variants = {base_name: (builtin, True), py_name: (python, True), "  unchecked": (python, False)}
    times = {name: [] for name in variants}
    files = {}
    for _ in range(args.reps):
        for name, (overrides, check) in variants.items():
            calls.n = 0
            start = time.perf_counter()
            result = servelab.run(args.experiment, overrides=overrides, check_invariants=check)
            times[name].append(time.perf_counter() - start)
            files[name] = same_files(result.files)
            if name == py_name:
                per_run = calls.n
    same = all(files[n] == files[base_name] for n in variants)
    steps = result.summary["num_steps"]
    print(f"{args.experiment}: {result.summary['requests']['total']} requests, {steps} steps, "
          f"{per_run} {what} per Python run; outputs identical: {same}")
    median = {name: statistics.median(ts) for name, ts in times.items()}
    for name, ts in times.items():
        print(f"  {name:12s} median {median[name]:.3f} s  (runs: {', '.join(f'{t:.3f}' for t in ts)})"
              f"  x{median[name] / median[base_name]:.2f}")
    unchecked = median["  unchecked"] - median[base_name]
    checks = median[py_name] - median["  unchecked"]
    print(f"  Python {what}: {unchecked * 1e6 / max(per_run, 1):.2f} us per call; invariant checks:"
          f" {checks * 1e6 / steps:.2f} us per step")
    if not same:
        raise SystemExit("the Python policy did not reproduce the built-in one")
