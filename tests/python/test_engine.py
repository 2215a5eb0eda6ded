"""servelab.engine_run: the CPU engine from Python."""

import servelab
from conftest import ALL_AT_ZERO


def test_engine_run_on_the_cpu_matches_the_simulators_schedule():
    e = servelab.engine_run(ALL_AT_ZERO, record_schedule=True, tokens=True)
    assert e.summary["run"]["backend"] == "engine-cpu"
    assert e.summary["requests"]["completed"] == 40
    assert len(e.tokens) == 40 and all(len(t) >= 5 for t in e.tokens.values())
    # All arrivals at t = 0: the engine makes the simulator's decisions (engine/engine_driver.h).
    s = servelab.run(ALL_AT_ZERO, record_schedule=True)
    assert e.files["schedule.csv"] == s.files["schedule.csv"]


def test_engine_run_checks_its_arguments():
    try:
        servelab.engine_run(ALL_AT_ZERO, kv_memory_gb=0)
        raise AssertionError("kv_memory_gb=0 accepted")
    except servelab.ConfigError as e:
        assert "kv_memory_gb" in str(e)
