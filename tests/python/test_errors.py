"""Bad input raises servelab.ConfigError (a ValueError) with the command line's message; Ctrl-C
stops a run cleanly."""

import glob
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

import servelab
from conftest import ALL_AT_ZERO, BUILD, BURST_TINY, sim


def cli_message(*args):
    """The message `sim run` prints for an error ("sim: error: MESSAGE"), and its exit code."""
    p = sim("run", *args, "--quiet")
    prefix = "sim: error: "
    line = p.stderr.strip().splitlines()[0]
    assert line.startswith(prefix), p.stderr
    return line[len(prefix):], p.returncode


def test_bad_experiment_file_gives_the_commands_file_line_col_message(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(BURST_TINY.read_text().replace("max_num_seqs: 64", "max_num_seqs: many"))
    expected, code = cli_message(bad, "--out", tmp_path / "out")
    assert code == 2
    assert f"{bad}:19:" in expected and "serving.max_num_seqs" in expected
    with pytest.raises(servelab.ConfigError) as e:
        servelab.run(bad)
    assert str(e.value) == expected
    assert isinstance(e.value, ValueError)


def test_bad_override_names_the_key_as_set_does(tmp_path):
    expected, _ = cli_message(BURST_TINY, "--set", "serving.max_num_seqs=0", "--out",
                              tmp_path / "out")
    with pytest.raises(servelab.ConfigError) as e:
        servelab.run(BURST_TINY, overrides={"serving.max_num_seqs": 0})
    assert str(e.value) == expected
    assert "--set serving.max_num_seqs" in str(e.value)


def test_dict_errors_name_the_key():
    bad = dict(ALL_AT_ZERO, serving=dict(ALL_AT_ZERO["serving"], block_size="big"))
    with pytest.raises(servelab.ConfigError, match=r"<dict>:\d+:\d+: key 'serving.block_size'"):
        servelab.run(bad)
    with pytest.raises(servelab.ConfigError, match="unknown key|allowed"):
        servelab.run(dict(ALL_AT_ZERO, sevring={}))


def test_bad_arguments():
    with pytest.raises(servelab.ConfigError, match="cannot open|No such file|not found"):
        servelab.run("no/such/experiment.yaml")
    with pytest.raises(servelab.ConfigError, match="seed"):
        servelab.run(BURST_TINY, seed=-1)
    with pytest.raises(TypeError):
        servelab.run(42)
    with pytest.raises(TypeError):
        servelab.run(BURST_TINY, overrides=["serving.max_num_seqs=4"])
    with pytest.raises(servelab.ConfigError, match="expected a queue policy name .*no-such-order"):
        servelab.run(BURST_TINY, overrides={"policies.queue": "no-such-order"})
    with pytest.raises(TypeError):
        servelab.compare(42)
    with pytest.raises(servelab.ConfigError, match="<dict>: no variants: add a `compare:` section"):
        servelab.compare(ALL_AT_ZERO)
    with pytest.raises(servelab.ConfigError, match="jobs"):
        servelab.sweep(BURST_TINY, jobs=0)


def test_arguments_of_the_wrong_type_are_not_coerced():
    """A truthy string is not True, None is not the text "None", a string is not GiB; an
    unbounded size is refused before it becomes a block count."""
    with pytest.raises(TypeError, match="record_schedule: expected True or False, got str 'no'"):
        servelab.run(BURST_TINY, record_schedule="no")
    with pytest.raises(TypeError, match="tokens: expected True or False"):
        servelab.engine_run(BURST_TINY, tokens="no")
    with pytest.raises(TypeError, match="kv_memory_gb: expected a number of GiB, got str '1'"):
        servelab.engine_run(BURST_TINY, kv_memory_gb="1")
    with pytest.raises(TypeError, match="kv_memory_gb"):
        servelab.engine_run(BURST_TINY, kv_memory_gb=True)
    for huge in (float("inf"), float("nan"), 1e30, 0, -1):
        with pytest.raises(servelab.ConfigError, match=r"kv_memory_gb: expected a number of GiB in \(0, 1e6\]"):
            servelab.engine_run(BURST_TINY, kv_memory_gb=huge)
    with pytest.raises(TypeError, match="device: expected a str"):
        servelab.engine_run(BURST_TINY, device=3)
    # None is the default: random weights, the CPU device (a short run of four requests).
    r = servelab.engine_run(BURST_TINY, overrides={"workload.num_requests": 4}, weights=None,
                            device=None)
    assert r.summary["requests"]["completed"] == 4
    # Every save() names its argument: an empty path names no folder, None is not "None".
    with pytest.raises(servelab.ConfigError, match="Result.save: dir: expected a path, got an empty"):
        r.save("")
    with pytest.raises(TypeError, match=r"Result.save: dir: expected a path \(str or os.PathLike\), "
                                        r"got NoneType None"):
        r.save(None)


def test_ctrl_c_stops_a_run_cleanly(tmp_path, monkeypatch):
    # A temporary folder of its own: other tests running at the same time (ctest -j) and other
    # processes make and remove servelab-* folders in the shared one.
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    before = set(glob.glob(os.path.join(str(tmp_path), "servelab-*")))
    # A run of many seconds: interrupted after 0.3 s.
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            servelab.run(BURST_TINY, overrides={"workload.num_requests": 2000000,
                                                "limits.max_requests": 2000000})
    finally:
        timer.cancel()
    after = set(glob.glob(os.path.join(str(tmp_path), "servelab-*")))
    assert after == before  # the temporary run folder is gone
    # Python's own SIGINT handler is back, and the next run is not interrupted.
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert servelab.run(ALL_AT_ZERO).summary["requests"]["completed"] == 40


def test_ctrl_c_stops_the_cpu_engine_probes():
    # The probes run the CPU engine step by step (minutes at these sizes): Ctrl-C stops them
    # between steps, and Python's handler is back afterwards.
    pytest.importorskip("pandas")
    for probe, kwargs in ((servelab.compare_kv_dtypes, {"formats": ["fp16"]}),
                          (servelab.compare_weight_quantizations, {"quantizations": ["fp8"]})):
        timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
        timer.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                probe(requests=1024, decode_tokens=4096, **kwargs)
        finally:
            timer.cancel()
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_numpy_numbers_are_numbers_and_wrong_types_are_type_errors():
    np = pytest.importorskip("numpy")
    base = servelab.run(ALL_AT_ZERO, seed=4, overrides={"serving.max_num_seqs": 8})
    # Values read from a DataFrame are NumPy's: taken as the Python numbers they are.
    same = servelab.run(ALL_AT_ZERO, seed=np.int64(4),
                        overrides={"serving.max_num_seqs": np.int64(8)})
    assert same.requests.equals(base.requests)
    d = dict(ALL_AT_ZERO, serving=dict(ALL_AT_ZERO["serving"], max_num_seqs=np.int32(8)))
    assert servelab.run(d, seed=4).requests.equals(base.requests)
    for bad in ("4", 4.0, True):
        with pytest.raises(TypeError, match="seed: expected an int"):
            servelab.run(ALL_AT_ZERO, seed=bad)
    # A key path with '=' would smuggle a value in ("...=4 #": 64 ran with 4).
    for key in ("serving.max_num_seqs=4 #", "serving.max num seqs"):
        with pytest.raises(servelab.ConfigError, match="is not a key path"):
            servelab.run(ALL_AT_ZERO, overrides={key: 64})
    with pytest.raises(TypeError, match="quiet: expected True or False"):
        servelab.plot("some-run", quiet="no")


def _script(tmp_path, name, body):
    """A Python program that imports the module under test, in a file of its own."""
    path = tmp_path / name
    path.write_text(f"import sys\nsys.path.insert(0, {str(BUILD / 'python')!r})\n"
                    f"import servelab\nimport signal\n{body}")
    return path


def test_a_second_ctrl_c_stops_a_policy_stuck_in_python(tmp_path):
    # The first Ctrl-C asks the run to stop, which a policy looping in Python never lets it do;
    # the second reaches Python's handler: KeyboardInterrupt in the policy, the run unwound.
    script = _script(tmp_path, "stuck.py", f"""
def stuck(r):
    if r.id == 5:
        print("stuck", flush=True)
        while True:
            pass
    return (r.arrival_ns, r.id)
servelab.register_queue_order("stuck", stuck)
servelab.run({str(BURST_TINY)!r}, {{"policies.queue": "stuck"}})
""")
    p = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline() == "stuck\n"
        p.send_signal(signal.SIGINT)
        time.sleep(0.5)
        assert p.poll() is None  # still looping: the first one only asked
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
    finally:
        p.kill()
    # An uncaught KeyboardInterrupt: Python dies of the SIGINT it re-raises.
    assert p.returncode == -signal.SIGINT and "KeyboardInterrupt" in err, err


def test_a_program_that_ignores_ctrl_c_is_not_interrupted(tmp_path):
    script = _script(tmp_path, "ignore.py", f"""
signal.signal(signal.SIGINT, signal.SIG_IGN)
import time
def slow(r):
    if r.id == 0:
        print("running", flush=True)
        time.sleep(1)
    return (r.arrival_ns, r.id)
servelab.register_queue_order("slow", slow)
r = servelab.run({str(BURST_TINY)!r}, {{"policies.queue": "slow"}})
print("completed", r.summary["requests"]["completed"], flush=True)
""")
    p = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline() == "running\n"
        p.send_signal(signal.SIGINT)  # during the run, while the policy sleeps
        out, err = p.communicate(timeout=60)
    finally:
        p.kill()
    assert p.returncode == 0, err
    assert out == "completed 200\n"
