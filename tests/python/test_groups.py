"""servelab.compare, servelab.sweep and servelab.plot: the commands' meanings and files."""

import os

import pandas.testing

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
    figures = sorted(p.name for p in (tmp_path / "figs").iterdir())
    assert figures and all(f.endswith(".svg") for f in figures)
    try:
        servelab.plot(tmp_path / "nothing-here")
        raise AssertionError("plot() accepted a missing folder")
    except servelab.ConfigError as e:
        assert "nothing-here" in str(e)
