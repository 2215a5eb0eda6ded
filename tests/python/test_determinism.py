"""The same experiment and seed give the same DataFrames and byte-identical files from Python
and from `sim run`."""

import json

import pandas.testing

import servelab
from conftest import ALL_AT_ZERO, BURST_TINY, sim


def test_two_python_runs_give_equal_dataframes():
    a = servelab.run(BURST_TINY, seed=3, record_schedule=True)
    b = servelab.run(BURST_TINY, seed=3, record_schedule=True)
    pandas.testing.assert_frame_equal(a.requests, b.requests)
    pandas.testing.assert_frame_equal(a.steps, b.steps)
    pandas.testing.assert_frame_equal(a.schedule, b.schedule)
    assert a.summary == b.summary
    assert a.files == b.files


def test_saved_run_is_byte_identical_to_sim_run(tmp_path):
    cli = sim("run", BURST_TINY, "--seed", 5, "--set", "serving.max_num_seqs=16",
              "--record-schedule", "--record-events", "--record-blocks", "--quiet",
              "--out", tmp_path / "cli")
    assert cli.returncode == 0, cli.stderr
    r = servelab.run(BURST_TINY, seed=5, overrides={"serving.max_num_seqs": 16},
                     record_schedule=True, record_events=True, record_blocks=True)
    assert r.save(tmp_path / "py") == str(tmp_path / "py")
    cli_files = sorted(p.name for p in (tmp_path / "cli").iterdir())
    assert sorted(p.name for p in (tmp_path / "py").iterdir()) == cli_files
    assert len(cli_files) == 7
    for name in cli_files:
        assert (tmp_path / "py" / name).read_bytes() == (tmp_path / "cli" / name).read_bytes(), name
    # The DataFrames are those files.
    cli_requests = pandas.read_csv(tmp_path / "cli" / "requests.csv")
    pandas.testing.assert_frame_equal(r.requests, cli_requests)
    assert r.summary == json.loads((tmp_path / "cli" / "summary.json").read_text())


def test_dict_and_yaml_file_give_the_same_files(tmp_path):
    path = tmp_path / "agnostic.yaml"
    path.write_text(json.dumps(ALL_AT_ZERO))
    from_dict = servelab.run(ALL_AT_ZERO)
    from_file = servelab.run(path)
    assert from_dict.files == from_file.files


def test_save_replaces_a_previous_run_but_never_a_users_files(tmp_path):
    r = servelab.run(ALL_AT_ZERO)
    r.save(tmp_path / "run")
    r.save(tmp_path / "run")  # a previous run's outputs may be replaced
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    try:
        r.save(tmp_path / "mine")
        raise AssertionError("save() wrote into a folder holding a user's file")
    except servelab.ConfigError as e:
        assert "notes.txt" in str(e) or "mine" in str(e)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"
    assert sorted(p.name for p in (tmp_path / "mine").iterdir()) == ["notes.txt"]
