"""servelab.compare, servelab.sweep and servelab.plot: the commands' meanings and files."""

import os

import pandas.testing
import pytest

import servelab
from conftest import BURST_TINY, sim

VARIANTS = {"fcfs": {}, "sjf": {"policies.queue": "sjf"}}


def sweep_experiment(tmp_path):
    exp = tmp_path / "sweep.yaml"
    exp.write_text(BURST_TINY.read_text() + "sweep:\n  serving.max_num_seqs: [4, 16]\n"
                   "  workload.arrival.rate: [10, 40]\n")
    return exp


def same_tree(a, b):
    files_a = sorted(str(p.relative_to(a)) for p in a.rglob("*") if p.is_file())
    files_b = sorted(str(p.relative_to(b)) for p in b.rglob("*") if p.is_file())
    assert files_a == files_b
    for f in files_a:
        assert (a / f).read_bytes() == (b / f).read_bytes(), f
    return files_a


def test_compare_matches_sim_compare(tmp_path):
    g = servelab.compare(BURST_TINY, variants=VARIANTS, seed=2)
    assert list(g.runs) == ["fcfs", "sjf"]
    assert list(g.table["variant"]) == ["fcfs", "sjf"]
    assert g.runs["sjf"].summary["run"]["seed"] == "2"
    alone = servelab.run(BURST_TINY, seed=2, overrides={"policies.queue": "sjf"})
    pandas.testing.assert_frame_equal(g.runs["sjf"].requests, alone.requests)
    cli = sim("compare", BURST_TINY, "--seed", 2, "--variant", "fcfs:", "--variant",
              "sjf:policies.queue=sjf", "--quiet", "--out", tmp_path / "cli")
    assert cli.returncode == 0, cli.stderr
    g.save(tmp_path / "py")
    assert "compare.csv" in same_tree(tmp_path / "cli", tmp_path / "py")
    assert g.runs["fcfs"].path == os.path.join(str(tmp_path / "py"), "fcfs")


def test_compare_refuses_variant_names_that_are_no_folder_names(tmp_path):
    # "../x" wrote outside the group's private folder (a saved run elsewhere was replaced).
    saved = tmp_path / "saved"
    servelab.run(BURST_TINY, {"workload.num_requests": 10}).save(saved)
    before = (saved / "requests.csv").read_bytes()
    escape = os.path.relpath(saved, os.getcwd())
    for name in [escape, "../x", "a/b", "", ".hidden", "compare.csv"]:
        with pytest.raises(servelab.ConfigError, match="variant name"):
            servelab.compare(BURST_TINY, variants={name: {}, "b": {}},
                             overrides={"workload.num_requests": 10})
    assert (saved / "requests.csv").read_bytes() == before


def test_sweep_matches_sim_sweep_whatever_the_jobs(tmp_path):
    exp = sweep_experiment(tmp_path)
    one = servelab.sweep(exp, jobs=1)
    two = servelab.sweep(exp, jobs=2)
    assert len(one.runs) == 4 and len(one.table) == 4
    assert list(one.runs) == list(two.runs)
    for name in one.runs:
        assert one.runs[name].files == two.runs[name].files
    pandas.testing.assert_frame_equal(one.table, two.table)
    cli = sim("sweep", exp, "--jobs", 2, "--no-plot", "--quiet", "--out", tmp_path / "cli")
    assert cli.returncode == 0, cli.stderr
    two.save(tmp_path / "py")
    same_tree(tmp_path / "cli", tmp_path / "py")


def test_plot_draws_the_figures_of_a_saved_run(tmp_path):
    r = servelab.run(BURST_TINY, overrides={"workload.num_requests": 40})
    try:
        servelab.plot(r)
        raise AssertionError("plot() accepted a result that was never saved")
    except servelab.ConfigError as e:
        assert "saved" in str(e)
    r.save(tmp_path / "run")
    out = servelab.plot(r, out=tmp_path / "figs", format="svg")
    assert out == str(tmp_path / "figs")
    figures = sorted(p.name for p in (tmp_path / "figs").iterdir() if p.name != ".servelab-figures")
    assert figures and all(f.endswith(".svg") for f in figures)
    # sim plot's manifest of what it drew there (docs/experiments.md "Figures").
    assert (tmp_path / "figs" / ".servelab-figures").read_text().split() == figures
    try:
        servelab.plot(tmp_path / "nothing-here")
        raise AssertionError("plot() accepted a missing folder")
    except servelab.ConfigError as e:
        assert "nothing-here" in str(e)


# experiments/lessons/static-vs-continuous.yaml as a dict, its trace relative to the repository.
STATIC_VS_CONTINUOUS = {
    "name": "static-vs-continuous", "seed": 1, "model": "Llama-3-8B", "hardware": "H100-SXM",
    "serving": {"max_num_seqs": 4},
    "workload": {"type": "vidur", "path": "experiments/lessons/four-lengths.csv"},
    "compare": [{"name": "static", "set": {"policies.batch": "static"}},
                {"name": "continuous", "set": {"policies.batch": "vllm"}}],
    "sweep": {"serving.max_num_seqs": [2, 4], "policies.batch": ["static", "vllm"]},
}


def test_compare_and_sweep_take_a_dict_like_a_file(tmp_path, monkeypatch):
    root = BURST_TINY.parent.parent
    lessons = root / "experiments" / "lessons"
    # A dict's relative data paths resolve against the current folder, as run()'s do.
    monkeypatch.chdir(root)
    as_dict = servelab.compare(STATIC_VS_CONTINUOUS, overrides={"workload.max_requests": 8})
    as_file = servelab.compare(lessons / "static-vs-continuous.yaml",
                               overrides={"workload.max_requests": 8})
    pandas.testing.assert_frame_equal(as_dict.table, as_file.table)
    assert list(as_dict.runs) == ["static", "continuous"]
    for name in as_dict.runs:
        pandas.testing.assert_frame_equal(as_dict.runs[name].requests, as_file.runs[name].requests)
    swept = servelab.sweep(STATIC_VS_CONTINUOUS, jobs=2)
    exp = tmp_path / "svc.yaml"
    text = (lessons / "static-vs-continuous.yaml").read_text()
    exp.write_text(text.replace("path: four-lengths.csv", f"path: {lessons / 'four-lengths.csv'}")
                   + "sweep:\n  serving.max_num_seqs: [2, 4]\n  policies.batch: [static, vllm]\n")
    pandas.testing.assert_frame_equal(swept.table, servelab.sweep(exp, jobs=1).table)
    assert len(swept.table) == 4
    # Relative to the current folder: a trace the home does not ship.
    (tmp_path / "mine.csv").write_bytes((lessons / "four-lengths.csv").read_bytes())
    monkeypatch.chdir(tmp_path)
    mine = dict(STATIC_VS_CONTINUOUS, workload={"type": "vidur", "path": "mine.csv"})
    pandas.testing.assert_frame_equal(
        servelab.compare(mine, overrides={"workload.max_requests": 8}).table, as_dict.table)
    # Errors name the dict.
    with pytest.raises(servelab.ConfigError, match=r"<dict>:\d+:\d+: .*max_num_seqs"):
        servelab.compare(dict(mine, serving={"max_num_seqs": "many"}))
    with pytest.raises(servelab.ConfigError, match=r"<dict>: no `sweep:` section"):
        servelab.sweep({k: v for k, v in mine.items() if k != "sweep"})


def test_sweep_variant_axis_runs_the_compare_variants(monkeypatch):
    # A dict's `variant` axis: each point is the comparison's variant at that point's values.
    monkeypatch.chdir(BURST_TINY.parent.parent)
    exp = dict(STATIC_VS_CONTINUOUS, sweep={"variant": "all", "serving.max_num_seqs": [2, 4]})
    swept = servelab.sweep(exp, overrides={"workload.max_requests": 8}, jobs=2)
    assert list(swept.table["variant"]) == ["static", "static", "continuous", "continuous"]
    assert list(swept.runs)[0] == "0_variant-static_max_num_seqs-2"
    compared = servelab.compare(exp, overrides={"workload.max_requests": 8,
                                                "serving.max_num_seqs": 4})
    for variant, point in (("static", 1), ("continuous", 3)):
        pandas.testing.assert_frame_equal(swept.runs[list(swept.runs)[point]].requests,
                                          compared.runs[variant].requests)
    with pytest.raises(servelab.ConfigError, match=r"<dict>:\d+:\d+: .*sweep.variant\[0\].*"
                                                   r"static, continuous"):
        servelab.sweep(dict(exp, sweep={"variant": ["dynamic"]}))


def test_classes_table_of_a_mix_workload(tmp_path):
    exp = tmp_path / "mix.yaml"
    exp.write_text(
        "name: mix\nmodel: Llama-3-8B\nhardware: H100-SXM\nseed: 4\n"
        "workload:\n  type: mix\n  parts:\n"
        "    - {class: chat, workload: {type: synthetic, num_requests: 30, arrival: {process: poisson,"
        " rate: 5}, prompt_len: {dist: fixed, value: 300}, output_len: {dist: fixed, value: 40}}}\n"
        "    - {class: batch, workload: {type: synthetic, num_requests: 20, arrival: {process: poisson,"
        " rate: 5}, prompt_len: {dist: fixed, value: 2000}, output_len: {dist: fixed, value: 200}}}\n"
        "sweep:\n  workload.parts[1].workload.arrival.rate: [5, 20]\n")
    swept = servelab.sweep(exp, jobs=2)
    c = swept.classes
    assert list(c["class"]) == ["chat", "batch", "chat", "batch"]
    assert list(c["workload.parts[1].workload.arrival.rate"]) == [5, 5, 20, 20]
    for _, row in c.iterrows():
        cls = swept.runs[row["point"]].summary["classes"][row["class"]]
        assert row["completed"] == cls["requests"]["completed"]
        assert row["itl_p99_ms"] == pytest.approx(cls["itl_ms"]["p99"], abs=1e-6)
    # Without classes there is no table, and saving over a folder drops the old one.
    swept.save(tmp_path / "out")
    assert (tmp_path / "out" / "classes.csv").exists()
    plain = servelab.sweep(sweep_experiment(tmp_path), jobs=2)
    assert plain.classes is None
    plain.save(tmp_path / "out")
    assert not (tmp_path / "out" / "classes.csv").exists()
    assert (tmp_path / "out" / "sweep.csv").exists()
