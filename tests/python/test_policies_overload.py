"""Admission rules and length caps written in Python (python/python_overload.h)."""

import pandas.testing
import pytest

import servelab
from conftest import BURST_TINY


def assert_same_run(a, b):
    pandas.testing.assert_frame_equal(a.requests, b.requests)
    pandas.testing.assert_frame_equal(a.steps, b.steps)
    assert a.summary == b.summary


def assert_python_replays_builtin(kind, builtin_name, python_name, settings, counted):
    """The built-in plugin `builtin_name` of `kind` ("admission", "length_cap") with `settings`
    sheds or caps some requests (summary `counted` > 0), and the Python one gives the same run."""
    builtin = servelab.run(BURST_TINY, overrides={
        f"policies.{kind}": {"name": builtin_name, **settings}})
    assert builtin.summary["requests"][counted] > 0
    python = servelab.run(BURST_TINY, overrides={
        f"policies.{kind}": {"name": python_name, **settings}})
    assert_same_run(python, builtin)


def queue_length(request, load, params):
    if load.waiting < params["max_waiting"]:
        return ""
    return f"shed: {load.waiting} requests waiting (max_waiting {params['max_waiting']})"


def predicted_wait(request, load, params):
    rate = load.prefill_tokens_per_s or params["prior_tokens_per_s"]
    if rate <= 0:
        return ""
    wait_s = load.waiting_tokens / rate
    if wait_s <= params["max_wait_s"]:
        return ""
    return (f"shed: predicted wait {wait_s:.3f} s > max_wait_s {params['max_wait_s']:g} "
            f"({load.waiting_tokens} queued tokens at {rate:.0f} prefill tokens/s)")


def test_python_queue_length_admission_equals_the_builtin():
    servelab.register_admission("py-queue-length", queue_length,
                                params={"max_waiting": (64, "the queue's bound")})
    assert_python_replays_builtin("admission", "queue-length", "py-queue-length",
                                  {"max_waiting": 4}, "shed")
    listed = [p for p in servelab.policies() if p["name"] == "py-queue-length"]
    assert [p["kind"] for p in listed] == ["admission"] and listed[0]["python"]


def test_python_predicted_wait_sees_the_measured_prefill_rate():
    servelab.register_admission("py-predicted-wait", predicted_wait,
                                params={"max_wait_s": 2.0, "prior_tokens_per_s": 0.0})
    assert_python_replays_builtin("admission", "predicted-wait", "py-predicted-wait",
                                  {"max_wait_s": 0.0005, "prior_tokens_per_s": 0.0}, "shed")


def test_python_length_cap_equals_the_builtin():
    def cap(request, load, params):
        if load.waiting <= params["when_waiting_over"]:
            return request.max_output_tokens
        return min(request.max_output_tokens, params["max_tokens"])

    servelab.register_length_cap("py-cap", cap,
                                 params={"max_tokens": 128, "when_waiting_over": 16})
    assert_python_replays_builtin("length_cap", "queue-length", "py-cap",
                                  {"max_tokens": 6, "when_waiting_over": 2}, "capped")


def test_admission_sees_the_request_and_its_reason_is_kept():
    seen = []

    def long_prompts_out(request, load):
        seen.append((request.id, request.prompt_tokens, load.now_ns, load.running))
        return "shed: prompt too long for the lab" if request.prompt_tokens > 150 else ""

    servelab.register_admission("py-long-out", long_prompts_out)
    r = servelab.run(BURST_TINY, overrides={"policies.admission": "py-long-out"})
    shed = r.requests[r.requests.status == "shed"]
    assert len(shed) > 0 and (shed.prompt_tokens > 150).all()
    assert (shed.reason == "shed: prompt too long for the lab").all()
    kept = r.requests[r.requests.status != "shed"]
    assert (kept.prompt_tokens <= 150).all()
    # Asked once per arrival, in arrival order, with the simulated clock.
    assert len(seen) == 200 and [s[0] for s in seen] == sorted(s[0] for s in seen)
    assert [s[2] for s in seen] == sorted(s[2] for s in seen) and seen[-1][2] > 0
    assert max(s[3] for s in seen) > 0
    assert r.summary["requests"]["shed"] == len(shed)


def test_a_length_cap_alone_sees_the_prefill_rate():
    rates = []

    def observe(request, load):
        rates.append(load.prefill_tokens_per_s)
        return request.max_output_tokens

    servelab.register_length_cap("py-observe", observe)
    r = servelab.run(BURST_TINY, overrides={"policies.length_cap": "py-observe"})
    assert r.summary["requests"]["capped"] == 0 and r.summary["requests"]["completed"] == 200
    assert rates[0] == 0 and max(rates) > 0


def test_bad_answers_stop_the_run_naming_the_rule():
    servelab.register_admission("py-bool", lambda request, load: True)
    with pytest.raises(servelab.PolicyError,
                       match=r"admission rule 'py-bool': expected a str .* got True for request"):
        servelab.run(BURST_TINY, overrides={"policies.admission": "py-bool"})
    servelab.register_admission("py-raises", lambda request, load: 1 // 0)
    with pytest.raises(servelab.PolicyError,
                       match=r"admission rule 'py-raises': raised ZeroDivisionError"):
        servelab.run(BURST_TINY, overrides={"policies.admission": "py-raises"})
    servelab.register_length_cap("py-raise-cap", lambda request, load: request.max_output_tokens + 1)
    with pytest.raises(servelab.PolicyError,
                       match=r"length cap 'py-raise-cap': returned \d+, expected 1 to the "
                             r"request's max_output_tokens"):
        servelab.run(BURST_TINY, overrides={"policies.length_cap": "py-raise-cap"})
    servelab.register_length_cap("py-zero", lambda request, load: 0)
    with pytest.raises(servelab.PolicyError, match=r"length cap 'py-zero': returned 0"):
        servelab.run(BURST_TINY, overrides={"policies.length_cap": "py-zero"})
    servelab.register_length_cap("py-none", lambda request, load: None)
    with pytest.raises(servelab.PolicyError, match=r"length cap 'py-none': expected .* got None"):
        servelab.run(BURST_TINY, overrides={"policies.length_cap": "py-none"})
    # Built-in names stay built-in.
    with pytest.raises(servelab.ConfigError, match="built-in admission plugin"):
        servelab.register_admission("queue-length", queue_length, params={"max_waiting": 64})


def test_admitting_everything_changes_nothing():
    servelab.register_admission("py-all", lambda request, load: "")
    listed = [p for p in servelab.policies() if p["name"] == "py-all"][0]
    assert listed["description"] == "an admission rule written in Python"
    r = servelab.run(BURST_TINY, overrides={"policies.admission": "py-all"})
    plain = servelab.run(BURST_TINY)
    pandas.testing.assert_frame_equal(r.requests, plain.requests)
    pandas.testing.assert_frame_equal(r.steps, plain.steps)
    # With overload control configured the summary counts shed and capped requests, here none.
    counts = r.summary["requests"]
    assert counts.pop("shed") == 0 and counts.pop("capped") == 0
    assert r.summary == plain.summary


def test_admission_in_an_engine_run():
    from conftest import ALL_AT_ZERO
    servelab.register_admission(
        "py-first-ten", lambda request, load: "" if request.id < 10 else "shed: lab limit")
    r = servelab.engine_run(ALL_AT_ZERO, overrides={"policies.admission": "py-first-ten"})
    assert r.summary["requests"]["shed"] == 30 and r.summary["requests"]["completed"] == 10
