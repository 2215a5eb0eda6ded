"""The policy catalogue and Python policies."""

import pandas.testing
import pytest

import servelab
from conftest import BURST_TINY, sim


def test_catalogue_is_sim_policies():
    assert servelab.policies_text() == sim("policies").stdout
    plugins = servelab.policies()
    fcfs = [p for p in plugins if p["kind"] == "queue" and p["name"] == "fcfs"]
    assert len(fcfs) == 1 and not fcfs[0]["python"]
    sjf = [p for p in plugins if p["name"] == "predicted-sjf"][0]
    error = [q for q in sjf["params"] if q["name"] == "error"][0]
    assert error["type"] == "double" and "default" in error
    assert {p["kind"] for p in plugins} >= {"batch", "queue", "preemption", "prefix_cache",
                                            "allocation", "victim"}


def test_python_fcfs_equals_builtin_fcfs():
    servelab.register_queue_order("py-fcfs", lambda r: (r.arrival_ns, r.id),
                                  description="FCFS in Python")
    servelab.register_victim_rule("py-last", lambda running: len(running) - 1)
    builtin = servelab.run(BURST_TINY, record_schedule=True)
    assert builtin.summary["preemption"]["preemptions"] > 0
    python = servelab.run(BURST_TINY, record_schedule=True, overrides={
        "policies.queue": "py-fcfs",
        "policies.preemption": {"name": "recompute", "victim": "py-last"}})
    pandas.testing.assert_frame_equal(python.schedule, builtin.schedule)
    pandas.testing.assert_frame_equal(python.requests, builtin.requests)
    assert python.summary == builtin.summary
    listed = [p for p in servelab.policies() if p["name"] == "py-fcfs"][0]
    assert listed["python"] and listed["description"] == "FCFS in Python"
    assert "py-fcfs" in servelab.policies_text()


def test_python_policy_from_yaml_with_parameters(tmp_path):
    seen = []

    def shortest(r, params):
        seen.append(params["weight"])
        return (params["weight"] * r.max_output_tokens, r.arrival_ns)

    servelab.register_queue_order("py-short", shortest, params={"weight": (1.0, "a factor")})
    exp = tmp_path / "exp.yaml"
    exp.write_text(BURST_TINY.read_text().replace("queue: fcfs",
                                                  "queue: {name: py-short, weight: 2.5}"))
    r = servelab.run(exp)
    assert r.summary["requests"]["completed"] == 200
    assert seen and set(seen) == {2.5}
    assert "py-short" in r.config
    # Its parameters are checked like a built-in plugin's.
    with pytest.raises(servelab.ConfigError, match="weight"):
        servelab.run(BURST_TINY, overrides={"policies.queue": {"name": "py-short",
                                                               "weight": "heavy"}})


def test_python_victim_rule_is_asked_on_preemption():
    calls = []

    def first(running):
        calls.append(len(running))
        return 0

    servelab.register_victim_rule("py-first", first)
    r = servelab.run(BURST_TINY, overrides={
        "policies.preemption": {"name": "recompute", "victim": "py-first"}})
    assert r.summary["preemption"]["preemptions"] > 0 and calls
    assert r.summary["requests"]["completed"] == 200


def test_failing_policies_stop_the_run_naming_the_policy():
    servelab.register_queue_order("py-broken", lambda r: 1 // 0)
    with pytest.raises(servelab.PolicyError, match=r"queue order 'py-broken': raised ZeroDivisionError: integer division"):
        servelab.run(BURST_TINY, overrides={"policies.queue": "py-broken"})
    servelab.register_queue_order("py-text", lambda r: "soon")
    with pytest.raises(servelab.PolicyError, match=r"(?s)'py-text'.*expected the key.*'soon'"):
        servelab.run(BURST_TINY, overrides={"policies.queue": "py-text"})
    servelab.register_victim_rule("py-out", lambda running: len(running))
    with pytest.raises(servelab.PolicyError, match=r"(?s)victim rule 'py-out'.*index"):
        servelab.run(BURST_TINY, overrides={
            "policies.preemption": {"name": "recompute", "victim": "py-out"}})


def test_keyboard_interrupt_and_system_exit_in_a_policy_pass_through(tmp_path):
    """Ctrl-C inside a callable, or sys.exit(), is the program's to handle: raised as it is, not
    turned into a PolicyError; the run leaves no output folder."""
    def interrupt(r):
        raise KeyboardInterrupt()

    def leave(r):
        raise SystemExit(3)

    servelab.register_queue_order("py-ctrl-c", interrupt)
    servelab.register_queue_order("py-exit", leave)
    with pytest.raises(KeyboardInterrupt):
        servelab.run(BURST_TINY, overrides={"policies.queue": "py-ctrl-c"})
    with pytest.raises(SystemExit) as e:
        servelab.run(BURST_TINY, overrides={"policies.queue": "py-exit"})
    assert e.value.code == 3
    # The module still runs after either.
    assert servelab.run(BURST_TINY).summary["requests"]["completed"] > 0


def test_python_queue_order_ranks_for_the_preemptive_formation():
    """A Python key is a rank: under batch preemptive, shortest-remaining-first written in Python
    schedules exactly as the built-in sjf does, running requests ranked by the same key."""
    servelab.register_queue_order(
        "py-srtf", lambda r: (r.max_output_tokens - r.output_tokens, r.arrival_ns))
    builtin = servelab.run(BURST_TINY, record_schedule=True, overrides={
        "policies.batch": "preemptive", "policies.queue": "sjf"})
    assert builtin.summary["preemption"]["preemptions"] > 0
    python = servelab.run(BURST_TINY, record_schedule=True, overrides={
        "policies.batch": "preemptive", "policies.queue": "py-srtf"})
    pandas.testing.assert_frame_equal(python.schedule, builtin.schedule)
    pandas.testing.assert_frame_equal(python.requests, builtin.requests)
    assert python.summary == builtin.summary
    # A key that fails for a running request stops the run naming the policy.
    servelab.register_queue_order(
        "py-fails-later", lambda r: (1 // 0) if r.output_tokens > 3 else (r.arrival_ns,))
    with pytest.raises(servelab.PolicyError, match="py-fails-later.*ZeroDivisionError"):
        servelab.run(BURST_TINY, overrides={"policies.batch": "preemptive",
                                            "policies.queue": "py-fails-later"})


def test_registration_rules():
    with pytest.raises(servelab.ConfigError, match="built-in"):
        servelab.register_queue_order("fcfs", lambda r: 0)
    # Registering a name again replaces the Python plugin.
    servelab.register_queue_order("py-again", lambda r: 1 // 0)
    servelab.register_queue_order("py-again", lambda r: (r.arrival_ns,))
    assert servelab.run(BURST_TINY, overrides={"policies.queue": "py-again"})
    kept = []
    servelab.register_queue_order("py-keep", lambda r: kept.append(r) or 0)
    servelab.run(BURST_TINY, overrides={"policies.queue": "py-keep",
                                        "workload.num_requests": 5})
    with pytest.raises(RuntimeError, match="after the policy call"):
        kept[0].id


def test_a_callable_of_the_wrong_signature_is_refused_at_registration():
    """A callable that cannot take the arguments its kind passes is named when registered (it
    used to fail inside every run with pybind11's bare TypeError); defaults and *args pass."""
    with pytest.raises(TypeError, match=r"register_queue_order: key must take 1 argument "
                                        r"\(request\); <lambda>\(\) does not"):
        servelab.register_queue_order("py-arity", lambda: 0)
    with pytest.raises(TypeError, match=r"key must take 2 arguments \(request, params\)"):
        servelab.register_queue_order("py-arity", lambda r: 0, params={"w": 1.0})
    with pytest.raises(TypeError, match=r"register_router: route must take 2 arguments"):
        servelab.register_router("py-arity", lambda r: 0)
    with pytest.raises(TypeError, match=r"admit must take 3 arguments \(request, load, params\)"):
        servelab.register_admission("py-arity", lambda r, load: "", params={"x": 1})
    with pytest.raises(TypeError, match=r"register_victim_rule: pick must be callable, got int"):
        servelab.register_victim_rule("py-arity", 3)
    with pytest.raises(TypeError, match=r"fill must take 1 argument \(step\)"):
        servelab.register_batch_formation("py-arity", lambda a, b: None)
    with pytest.raises(TypeError, match=r"cap must take 2 arguments"):
        servelab.register_length_cap("py-arity", lambda r, load, extra: 1)

    class NeedsArgs:
        def __init__(self, size):
            self.size = size

        def __call__(self, request, replicas):
            return 0

    class NotCallable:
        pass

    class Stateful:
        def __call__(self, request, replicas):
            return 0

    with pytest.raises(TypeError, match=r"an instance without arguments; NeedsArgs\(\) cannot"):
        servelab.register_router("py-arity", NeedsArgs)
    with pytest.raises(TypeError, match=r"route is a class without a __call__ method"):
        servelab.register_router("py-arity", NotCallable)
    assert not any(p["name"] == "py-arity" for p in servelab.policies())
    # What fits is registered: defaults, *args, a class router, a builtin.
    servelab.register_queue_order("py-arity", lambda r, unused=None: (r.arrival_ns,))
    servelab.register_victim_rule("py-arity", lambda *running: 0)
    servelab.register_router("py-arity", Stateful)
    servelab.register_victim_rule("py-arity-len", len)


def test_python_policy_in_a_parallel_sweep_and_a_compare(tmp_path):
    servelab.register_queue_order("py-fcfs2", lambda r: (r.arrival_ns, r.id))
    exp = tmp_path / "sweep.yaml"
    exp.write_text(BURST_TINY.read_text() + "sweep:\n  policies.queue: [fcfs, py-fcfs2]\n"
                   "  serving.max_num_seqs: [8, 32]\n")
    g = servelab.sweep(exp, jobs=2)  # workers take the GIL for each key call
    runs = list(g.runs.values())
    assert len(runs) == 4
    for builtin, python in ((runs[0], runs[2]), (runs[1], runs[3])):
        assert builtin.files["requests.csv"] == python.files["requests.csv"]
        assert builtin.files["steps.csv"] == python.files["steps.csv"]
    servelab.register_queue_order("py-broken2", lambda r: r.no_such_attribute)
    with pytest.raises(servelab.PolicyError, match="^variant 'bad': .*py-broken2.*AttributeError"):
        servelab.compare(BURST_TINY, variants={"ok": {}, "bad": {"policies.queue": "py-broken2"}})


def test_python_queue_order_sees_the_request_class():
    """A Python queue order keyed on `request_class` (a mix workload's part) puts the chat class
    first, as the built-in priority order does with the parts' priorities."""
    servelab.register_queue_order("py-class-first", lambda r: (r.request_class, r.arrival_ns, r.id))
    lesson = servelab.home + "/experiments/lessons/sharing-a-server.yaml"
    small = {"workload.parts[1].workload.num_requests": 600,
             "workload.parts[0].workload.duration_s": 60}
    by_class = servelab.run(lesson, overrides={**small, "policies.queue": "py-class-first"})
    by_priority = servelab.run(lesson, overrides={**small, "policies.queue": "priority"})
    fcfs = servelab.run(lesson, overrides={**small, "policies.queue": "fcfs"})
    chat = lambda r: r.summary["classes"]["chat"]["ttft_ms"]["p99"]
    assert chat(by_class) == chat(by_priority)
    assert chat(by_class) * 10 < chat(fcfs)
    assert set(by_class.requests["class"]) == {"chat", "batch"}


def test_registering_while_another_thread_runs_is_refused():
    # The registry has no lock: replacing a plugin while a sweep in another thread parsed its
    # experiments crashed the process. A run holds the registry; registering waits for its end.
    import threading
    started, go = threading.Event(), threading.Event()

    def key(r):
        started.set()
        go.wait(30)
        return (r.arrival_ns, r.id)

    servelab.register_queue_order("py-waiting", key)
    box = {}
    thread = threading.Thread(target=lambda: box.setdefault("run", servelab.run(
        BURST_TINY, overrides={"policies.queue": "py-waiting", "workload.num_requests": 5})))
    thread.start()
    try:
        assert started.wait(30)
        with pytest.raises(RuntimeError, match="in another thread"):
            servelab.register_queue_order("py-later", lambda r: (r.id,))
    finally:
        go.set()
        thread.join(60)
    assert box["run"].summary["requests"]["completed"] == 5
    servelab.register_queue_order("py-later", lambda r: (r.id,))  # after the run: accepted


def test_parameters_named_name_or_not_str_are_refused_at_registration():
    # `name` names the plugin in {name: P, ...}: such a parameter made the plugin unusable.
    with pytest.raises(servelab.ConfigError, match="a parameter cannot be called 'name'"):
        servelab.register_queue_order("py-named", lambda r, p: (r.id,), params={"name": 1})
    with pytest.raises(TypeError, match="parameter names must be str"):
        servelab.register_queue_order("py-keyed", lambda r, p: (r.id,), params={1: 1})


def test_numpy_integers_are_ints():
    # np.argmax gives an np.int64: it was refused ("expected the index ... (an int), got 3").
    import numpy as np
    servelab.register_queue_order("py-np-fcfs", lambda r: (np.int64(r.arrival_ns), np.int32(r.id)))
    servelab.register_victim_rule("py-np-last", lambda running: np.int64(len(running) - 1))
    builtin = servelab.run(BURST_TINY)
    numpy = servelab.run(BURST_TINY, overrides={
        "policies.queue": "py-np-fcfs",
        "policies.preemption": {"name": "recompute", "victim": "py-np-last"}})
    pandas.testing.assert_frame_equal(numpy.requests, builtin.requests)
