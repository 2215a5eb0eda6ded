#!/usr/bin/env python3
"""What one servelab.step_cost call costs: each call loads the experiment and builds its cost
model, then prices one decode step (batch 1..N at context 1,024). Prints the mean per call over
N calls for a dense model (experiments/burst.yaml: Llama-3-8B on an H100) and a mixture of
experts (experiments/lessons/mixture-of-experts.yaml); best of --reps rounds.
docs/performance.md records the numbers.

    PYTHONPATH=build/release/python /usr/bin/python3 bench/python/step_cost_calls.py [--calls N]
"""

import argparse
import time

import servelab


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=50, help="calls per round (default 50)")
    parser.add_argument("--reps", type=int, default=3, help="rounds (default 3)")
    args = parser.parse_args()
    if args.calls < 1 or args.reps < 1:
        parser.error("--calls and --reps must be at least 1")
    for name in ("experiments/burst.yaml", "experiments/lessons/mixture-of-experts.yaml"):
        path = servelab.home + "/" + name
        best = float("inf")
        for _ in range(args.reps):
            start = time.perf_counter()
            for batch in range(1, args.calls + 1):
                servelab.step_cost(path, decode=[1024] * batch)
            best = min(best, (time.perf_counter() - start) / args.calls)
        print(f"{name}: {best * 1e3:.2f} ms per call (best of {args.reps} rounds of {args.calls})")


if __name__ == "__main__":
    main()
