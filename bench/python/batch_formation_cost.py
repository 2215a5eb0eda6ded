#!/usr/bin/env python3
"""What a batch formation written in Python costs: experiments/burst.yaml (2,000 requests,
about 14,000 steps, preemptions) under the built-in `vllm` formation and under vLLM v1's
formation written in Python (servelab.StepBuilder), with the per-step invariant checks (the
default while a Python policy is active) and without them (check_invariants=False). Runs are
interleaved; prints each run's wall time, the medians, and checks that every run folder is
byte-identical once the formation's name is replaced. docs/performance.md records the numbers.

    PYTHONPATH=build/release/python /usr/bin/python3 bench/python/batch_formation_cost.py [--reps N]
"""

import servelab
from policy_cost import Calls, arguments, compare


def main():
    args = arguments(__doc__, "experiments/burst.yaml")
    calls = Calls()

    def tokens_for(request, left):
        calls.n += 1
        return min(request.tokens_to_compute, left)

    def vllm(step):
        before = step.num_preempted
        budget = step.schedule_running(step.max_num_batched_tokens, tokens_for,
                                       stop_at_self_preemption=True)
        if not step.admit or step.num_preempted != before:
            return
        if step.num_swapped:
            budget = step.swap_in(budget)
        if not step.num_swapped:
            step.admit_waiting(budget)

    servelab.register_batch_formation("python-vllm", vllm, resumes_swapped=True)
    compare(args, {}, {"policies.batch": "python-vllm"}, calls, "tokens_for calls",
            lambda files: {n: d.replace(b"batch: python-vllm", b"batch: vllm")
                           for n, d in files.items()})


if __name__ == "__main__":
    main()
