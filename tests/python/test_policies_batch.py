"""Batch formations written in Python (python/python_batch_formation.h): vLLM v1's and
Sarathi-Serve's rewritten on servelab.StepBuilder schedule exactly as the built-in ones."""

import pandas.testing
import pytest

import servelab
from conftest import BURST_TINY


def assert_same_schedule(a, b):
    pandas.testing.assert_frame_equal(a.schedule, b.schedule)
    pandas.testing.assert_frame_equal(a.requests, b.requests)
    pandas.testing.assert_frame_equal(a.steps, b.steps)
    assert a.summary == b.summary


def vllm(step):
    """vLLM v1 (core/vllm_batch_formation.h) with chunked prefill and no per-request cap."""
    before = step.num_preempted
    budget = step.schedule_running(step.max_num_batched_tokens,
                                   lambda r, left: min(r.tokens_to_compute, left),
                                   stop_at_self_preemption=True)
    if not step.admit or step.num_preempted != before:
        return
    if step.num_swapped:
        budget = step.swap_in(budget)
    if step.num_swapped:
        return
    step.admit_waiting(budget)


def sarathi(step, params):
    """Sarathi-Serve (policies/batch_sarathi.cc): decodes, partial prefills, then new prompts."""
    tau = min(params["chunk_size"] or step.max_num_batched_tokens, step.max_num_batched_tokens)
    before = step.num_preempted
    budget = step.schedule_running(
        tau, lambda r, left: 0 if r.prefill_pending or r.tokens_to_compute <= 0 else 1)
    budget = step.schedule_running(
        budget, lambda r, left: min(r.tokens_to_compute, left) if r.prefill_pending else 0)
    if not step.admit or step.num_preempted != before:
        return
    step.admit_waiting(budget, watermark=params["watermark"])


@pytest.mark.parametrize("preemption", ["recompute", "swap"])
def test_python_vllm_schedules_as_the_builtin(preemption):
    servelab.register_batch_formation("py-vllm", vllm, resumes_swapped=True)
    builtin = servelab.run(BURST_TINY, record_schedule=True,
                           overrides={"policies.preemption": preemption})
    assert builtin.summary["preemption"]["preemptions"] > 0
    python = servelab.run(BURST_TINY, record_schedule=True, overrides={
        "policies.preemption": preemption, "policies.batch": "py-vllm"})
    assert_same_schedule(python, builtin)


def test_python_vllm_on_the_cpu_engine():
    from conftest import ALL_AT_ZERO
    servelab.register_batch_formation("py-vllm", vllm, resumes_swapped=True)
    builtin = servelab.engine_run(ALL_AT_ZERO, tokens=True)
    assert builtin.summary["preemption"]["preemptions"] > 0
    python = servelab.engine_run(ALL_AT_ZERO, overrides={"policies.batch": "py-vllm"},
                                 tokens=True)
    assert python.tokens == builtin.tokens
    assert python.summary["preemption"] == builtin.summary["preemption"]
    # A formation that schedules nothing while nothing runs stops the engine too, naming it.
    servelab.register_batch_formation("py-idle-engine", lambda step: None)
    with pytest.raises(servelab.PolicyError,
                       match=r"batch formation 'py-idle-engine': scheduled nothing.*would stall"):
        servelab.engine_run(ALL_AT_ZERO, overrides={"policies.batch": "py-idle-engine"})


def test_python_sarathi_schedules_as_the_builtin():
    servelab.register_batch_formation("py-sarathi", sarathi,
                                      params={"chunk_size": 0, "watermark": 0.01})
    settings = {"chunk_size": 64, "watermark": 0.01}
    builtin = servelab.run(BURST_TINY, record_schedule=True,
                           overrides={"policies.batch": {"name": "sarathi", **settings}})
    assert builtin.summary["preemption"]["preemptions"] > 0
    python = servelab.run(BURST_TINY, record_schedule=True,
                          overrides={"policies.batch": {"name": "py-sarathi", **settings}})
    assert_same_schedule(python, builtin)
    listed = [p for p in servelab.policies() if p["name"] == "py-sarathi"][0]
    assert listed["kind"] == "batch" and listed["python"]
    assert [q["name"] for q in listed["params"]] == ["chunk_size", "watermark"]


def test_a_formation_of_ones_own_serves_everyone():
    # Decode-first with whole prompts reserved to their full length (Orca-like): never preempts.
    seen = {"steps": 0, "running": 0}

    def decode_first(step):
        seen["steps"] += 1
        seen["running"] = max(seen["running"], len(step.running()))
        budget = step.schedule_running(step.budget_left,
                                       lambda r, left: min(r.tokens_to_compute, left))
        if step.admit:
            step.admit_waiting(budget, whole_prompt=True, reserve_max_length=True)

    servelab.register_batch_formation("py-decode-first", decode_first)
    r = servelab.run(BURST_TINY, overrides={"policies.batch": "py-decode-first"})
    assert r.summary["requests"]["completed"] == 200
    assert r.summary["preemption"]["preemptions"] == 0
    # Asked at least once a step (also when nothing could be scheduled).
    assert seen["steps"] >= r.summary["num_steps"] and seen["running"] > 1


def test_bad_steps_stop_the_run_naming_the_formation():
    def too_many(step):
        step.schedule_running(step.budget_left, lambda r, left: r.tokens_to_compute + 1)
        step.admit_waiting(step.budget_left)

    servelab.register_batch_formation("py-too-many", too_many)
    with pytest.raises(servelab.PolicyError,
                       match=r"^Python batch formation 'py-too-many': tokens_for returned \d+ for request "
                             r"\d+, which has \d+ tokens to compute"):
        servelab.run(BURST_TINY, overrides={"policies.batch": "py-too-many"})

    servelab.register_batch_formation(
        "py-over-budget", lambda step: step.admit_waiting(step.max_num_batched_tokens + 1))
    with pytest.raises(servelab.PolicyError,
                       match=r"'py-over-budget': admit_waiting: budget 1025 outside \[0, 1024\]"):
        servelab.run(BURST_TINY, overrides={"policies.batch": "py-over-budget"})

    def text(step):
        step.schedule_running(step.budget_left, lambda r, left: "all")
        step.admit_waiting(step.budget_left)

    servelab.register_batch_formation("py-text", text)
    with pytest.raises(servelab.PolicyError, match=r"'py-text': tokens_for must return an int"):
        servelab.run(BURST_TINY, overrides={"policies.batch": "py-text"})

    # A step operation from inside tokens_for scheduled past the step's budget (512 tokens in a
    # 256-token step) with the invariant checks off, and was blamed on the queue order with them on.
    def nested(step):
        def tokens_for(r, left):
            if step.admit and step.budget_left > 0:
                step.admit_waiting(step.budget_left)
            return min(r.tokens_to_compute, left)
        step.schedule_running(step.max_num_batched_tokens, tokens_for)
        if step.admit and step.num_preempted == 0 and step.budget_left > 0:
            step.admit_waiting(step.budget_left)

    servelab.register_batch_formation("py-nested", nested)
    for check in (True, False):
        with pytest.raises(servelab.PolicyError,
                           match=r"'py-nested': admit_waiting called from inside "
                                 r"schedule_running's tokens_for"):
            servelab.run(BURST_TINY, overrides={"policies.batch": "py-nested"},
                         check_invariants=check)

    servelab.register_batch_formation("py-raises", lambda step: step.nothing_here())
    with pytest.raises(servelab.PolicyError,
                       match=r"batch formation 'py-raises': raised AttributeError"):
        servelab.run(BURST_TINY, overrides={"policies.batch": "py-raises"})

    # A formation that never schedules anything would stall the run: the policy's error, and in
    # a compare or sweep the variant's.
    servelab.register_batch_formation("py-idle", lambda step: None)
    with pytest.raises(servelab.PolicyError,
                       match=r"batch formation 'py-idle': scheduled nothing while 1 requests wait"):
        servelab.run(BURST_TINY, overrides={"policies.batch": "py-idle"})
    with pytest.raises(servelab.PolicyError, match=r"^variant 'idle': .*'py-idle'"):
        servelab.compare(BURST_TINY, variants={"ok": {}, "idle": {"policies.batch": "py-idle"}})
    # One that leaves running requests out of every step: they never finish, the run ends with
    # them unfinished, the policy's error too (it was a RuntimeError, the simulator's own).
    def leaves_running(step):
        step.admit_waiting(step.budget_left)

    servelab.register_batch_formation("py-leaves-running", leaves_running)
    with pytest.raises(servelab.PolicyError,
                       match=r"unfinished requests .*'py-leaves-running'.*a Python policy is registered"):
        servelab.run(BURST_TINY, overrides={"policies.batch": "py-leaves-running"})
    with pytest.raises(servelab.PolicyError, match=r"^variant 'stuck': simulation ended"):
        servelab.compare(BURST_TINY, variants={"stuck": {"policies.batch": "py-leaves-running"}})

    kept = []
    servelab.register_batch_formation("py-keeps", lambda step: kept.append(step) or vllm(step))
    servelab.run(BURST_TINY, overrides={"policies.batch": "py-keeps"})
    with pytest.raises(RuntimeError, match="used after the batch formation call"):
        kept[0].num_running


# Two requests that fill a 4-block pool: the first one running out of blocks, with a victim rule
# that picks the first, preempts itself while the other still runs, so the scheduler calls the
# formation a second time with admit False (core/scheduler.cc, schedule()).
TWO_IN_FOUR_BLOCKS = {
    "name": "two-in-four-blocks", "seed": 3, "model": "tiny", "hardware": "H100-SXM",
    "serving": {"block_size": 16, "num_gpu_blocks": 5, "max_num_batched_tokens": 256,
                "max_num_seqs": 4, "max_model_len": 128},
    "policies": {"prefix_cache": "none",
                 "preemption": {"name": "recompute", "victim": "py-first"}},
    "workload": {"type": "synthetic", "num_requests": 2, "start_s": 0,
                 "arrival": {"process": "fixed", "rate": 1.0e12},
                 "prompt_len": {"dist": "uniform", "min": 16, "max": 16},
                 "output_len": {"dist": "uniform", "min": 40, "max": 40}}}


def test_the_second_call_after_a_self_preemption():
    servelab.register_victim_rule("py-first", lambda running: 0)
    admits = []

    def vllm_seen(step):
        admits.append(step.admit)
        vllm(step)

    servelab.register_batch_formation("py-vllm-seen", vllm_seen)
    builtin = servelab.run(TWO_IN_FOUR_BLOCKS, record_schedule=True)
    assert builtin.summary["preemption"]["preemptions"] == 1
    python = servelab.run(TWO_IN_FOUR_BLOCKS, record_schedule=True,
                          overrides={"policies.batch": "py-vllm-seen"})
    assert_same_schedule(python, builtin)
    assert admits.count(False) == 1

    # A formation that does nothing when it may not admit would be called forever.
    def only_when_admitting(step):
        if step.admit:
            vllm(step)

    servelab.register_batch_formation("py-admit-only", only_when_admitting)
    with pytest.raises(servelab.PolicyError,
                       match=r"'py-admit-only': called with step.admit False .* neither "
                             r"scheduled nor preempted"):
        servelab.run(TWO_IN_FOUR_BLOCKS, overrides={"policies.batch": "py-admit-only"})


def test_swap_needs_a_formation_that_resumes():
    servelab.register_batch_formation("py-no-resume", vllm)
    with pytest.raises(servelab.ConfigError, match="py-no-resume"):
        servelab.run(BURST_TINY, overrides={"policies.batch": "py-no-resume",
                                            "policies.preemption": "swap"})
