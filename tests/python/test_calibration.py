"""servelab.profile, calibrate, validate: the validation loop of docs/validation.md from Python,
against the commands it mirrors (`engine profile`, `sim calibrate`, `sim validate`)."""

import json
import os

import pytest

import servelab
from conftest import ALL_AT_ZERO, sim

QUICK = dict(quick=True, reps=3, rounds=1, warmup=1, max_tokens=512)


@pytest.fixture(scope="module")
def tiny_profile():
    return servelab.profile("tiny", **QUICK)


def test_profile_measures_the_grid_and_saves_like_the_command(tiny_profile, tmp_path):
    p = tiny_profile
    h = p.header
    assert h["model"] == "tiny" and h["machine_kind"] == "cpu"
    assert h["kv_cache_dtype"] == "fp32" and h["quantization"] == "none"
    assert h["block_bytes"] == "8192" and h["grid"] == "quick, max_tokens 512"
    assert p.device.startswith("cpu: ")
    shapes = p.shapes
    assert {"prefill", "decode", "mixed", "swap", "copy"} <= set(shapes["family"])
    assert (shapes["median_ns"] > 0).all() and (shapes["reps"] == 3).all()
    assert p.path is None
    out = tmp_path / "profile.csv"
    assert p.save(out) == str(out) and p.path == str(out)
    assert out.read_text() == p.text
    # As `engine profile -o`: an existing file only when asked (the argument named, not the flag).
    with pytest.raises(servelab.ConfigError, match="output file exists; pass force=True"):
        p.save(out)
    # A value that merely looks truthy is no answer ("no" overwrote the file).
    with pytest.raises(TypeError, match="force: expected True or False"):
        p.save(out, force="no")
    p.save(out, force=True)
    assert servelab.Profile.load(out).header == h


def test_profile_stores_the_model_as_asked_and_checks_its_words():
    p = servelab.profile("tiny", kv_cache_dtype="fp8", quantization="fp8", **QUICK)
    assert p.header["kv_cache_dtype"] == "fp8_e4m3" and p.header["quantization"] == "fp8"
    c = servelab.calibrate(p)
    assert (c.kv_cache_dtype, c.quantization) == ("fp8_e4m3", "fp8")
    assert "stored as: KV cache fp8_e4m3, weights fp8" in c.summary
    with pytest.raises(servelab.ConfigError, match="kv_cache_dtype: expected one of auto, bf16"):
        servelab.profile("tiny", kv_cache_dtype="int8", **QUICK)
    with pytest.raises(servelab.ConfigError, match="quantization: expected one of none, awq, awq_marlin, fp8"):
        servelab.profile("tiny", quantization="gptq", **QUICK)
    with pytest.raises(servelab.ConfigError, match="CUDA executor runs bf16 weights"):
        servelab.profile("tiny", device="cuda", quantization="fp8", **QUICK)
    with pytest.raises(TypeError, match="reps"):
        servelab.profile("tiny", reps="3")


def test_calibrate_writes_what_sim_calibrate_writes(tiny_profile, tmp_path):
    path = tiny_profile.save(tmp_path / "profile.csv")
    c = servelab.calibrate(tiny_profile, holdout=3)
    done = sim("calibrate", path, "-o", tmp_path / "cli.yaml", "--holdout", 3)
    assert done.returncode == 0, done.stderr
    assert c.yaml == (tmp_path / "cli.yaml").read_text()
    assert c.summary.splitlines()[0] == done.stdout.splitlines()[0]
    assert c.model == "tiny" and c.kv_cache_dtype == "fp32" and c.quantization == "none"
    assert c.coefficients["per_token_s"] >= 0 and "lora_token_rank_s" not in c.coefficients
    fit = c.fit
    assert fit["holdout"]["every"] == 3 and fit["holdout"]["shapes"] > 0
    assert set(fit["families"]) == set(tiny_profile.shapes["family"])
    assert 0 <= fit["mape"] <= fit["max_error"]
    assert c.host_overhead is None
    # From the file, the same fit; an unsaved profile is named by the argument.
    assert servelab.calibrate(path, holdout=3).yaml == c.yaml
    unsaved = servelab.Profile(tiny_profile.text, tiny_profile.device)
    assert 'profile: "<profile>"' in servelab.calibrate(unsaved).yaml
    cost = c.save(tmp_path / "cost.yaml")
    assert (tmp_path / "cost.yaml").read_text() == c.yaml and c.path == cost
    with pytest.raises(servelab.ConfigError, match="pass force=True"):
        c.save(tmp_path / "cost.yaml")


def test_saves_never_replace_what_they_were_made_from(tiny_profile, tmp_path):
    # As `sim calibrate -o` and `engine profile -o`, which refuse these even with --force: the
    # profile a calibration was fitted on (given as a file, or as a Profile saved there), a file
    # of its engine run, the model file a profile timed.
    path = tiny_profile.save(tmp_path / "p.csv")
    for cal in (servelab.calibrate(path), servelab.calibrate(tiny_profile)):
        with pytest.raises(servelab.ConfigError, match="the output is the input file"):
            cal.save(path, force=True)
    assert open(path).read() == tiny_profile.text
    eng = servelab.engine_run(ALL_AT_ZERO, record_schedule=True)
    eng_dir = eng.save(tmp_path / "eng")
    for run in (eng, eng_dir):
        cal = servelab.calibrate(tiny_profile, engine_run=run)
        with pytest.raises(servelab.ConfigError, match="a file of the input folder"):
            cal.save(os.path.join(eng_dir, "summary.json"), force=True)
    assert json.loads(open(os.path.join(eng_dir, "summary.json")).read())["requests"]
    model = tmp_path / "tiny.yaml"
    model.write_text(open(os.path.join(servelab.home, "experiments/catalog/models/tiny.yaml")).read())
    before = model.read_text()
    p = servelab.profile(model, **QUICK)
    with pytest.raises(servelab.ConfigError, match="the output is the input file"):
        p.save(model, force=True)
    assert model.read_text() == before
    with pytest.raises(TypeError, match="quick: expected True or False"):
        servelab.profile("tiny", quick="no")


def test_calibrate_checks_its_arguments(tiny_profile, tmp_path):
    with pytest.raises(servelab.ConfigError, match="holdout: expected an integer >= 2"):
        servelab.calibrate(tiny_profile, holdout=1)
    with pytest.raises(servelab.ConfigError, match="nowhere.csv"):
        servelab.calibrate(tmp_path / "nowhere.csv")
    with pytest.raises(TypeError, match="profile: expected a file or a servelab.Profile"):
        servelab.calibrate(42)
    with pytest.raises(TypeError, match="engine_run: expected a run folder or a servelab.Result"):
        servelab.calibrate(tiny_profile, engine_run=3.5)


def test_the_loop_validates_the_simulator_against_the_engine(tiny_profile, tmp_path):
    eng = servelab.engine_run(ALL_AT_ZERO, record_schedule=True)
    c = servelab.calibrate(tiny_profile, engine_run=eng)
    assert c.host_overhead["engine_run"] == "<engine_run>" and c.host_overhead["steps"] > 0
    assert 'engine_run: "<engine_run>"' in c.yaml
    assert c.host_overhead["between_steps"] is False
    # The run starts idle: at least its first step is an idle wake-up, fitted into wake_up_s.
    assert c.host_overhead["wake_ups"] >= 1 and c.host_overhead["wake_up_s"] >= 0
    assert c.coefficients["wake_up_s"] == c.host_overhead["wake_up_s"]
    periods = servelab.calibrate(tiny_profile, engine_run=eng, between_steps=True)
    assert periods.host_overhead["between_steps"] is True
    assert "between_steps: true" in periods.yaml
    with pytest.raises(servelab.ConfigError, match="between_steps goes with engine_run"):
        servelab.calibrate(tiny_profile, between_steps=True)
    cost = c.save(tmp_path / "cost.yaml")
    s = servelab.run(ALL_AT_ZERO, {"cost_model.file": cost}, record_schedule=True)
    v = servelab.validate(s, eng)
    r = v.report
    assert r["schedule"]["comparison"] == "identical"
    # Every request re-timed on the engine's schedule (docs/validation.md "Latency attribution").
    lat = r["latency_attribution"]
    assert lat["unmatched"] == 0 and lat["requests"] == r["requests"]["compared"]
    assert [row["name"] for row in lat["rows"]] == ["measured", "back to back", "priced",
                                                     "simulator"]
    assert r["requests"]["compared"] == 40
    assert r["step_time"]["replayed"]["count"] > 0
    replay = v.replay
    assert list(replay.columns[:2]) == ["step", "num_seqs"]
    assert len(replay) == r["step_time"]["replayed"]["count"]
    assert "step time" in v.text
    assert "servelab-" not in v.json and '"<sim>"' in v.json  # no temporary paths
    # As `sim validate` on the saved folders (the folders named as given, so the same bytes).
    sim_dir, eng_dir = s.save(tmp_path / "sim"), eng.save(tmp_path / "eng")
    from_folders = servelab.validate(sim_dir, eng_dir)
    done = sim("validate", sim_dir, eng_dir, "--out", tmp_path / "cli", "--quiet")
    assert done.returncode == 0, done.stderr
    assert from_folders.json == (tmp_path / "cli" / "validation.json").read_text()
    assert v.save(tmp_path / "v") == str(tmp_path / "v")
    assert json.loads((tmp_path / "v" / "validation.json").read_text()) == r
    # Saved as `sim validate --out` writes: a previous report only with force, never over other
    # files or into a run folder it compared.
    with pytest.raises(servelab.ConfigError, match="previous validation report; pass force=True"):
        v.save(tmp_path / "v")
    assert v.save(tmp_path / "v", force=True) == str(tmp_path / "v")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "replay.csv").write_text("my own\n")
    (tmp_path / "mine" / "notes.txt").write_text("keep\n")
    with pytest.raises(servelab.ConfigError, match="holds 'notes.txt'"):
        v.save(tmp_path / "mine", force=True)
    assert (tmp_path / "mine" / "replay.csv").read_text() == "my own\n"
    with pytest.raises(servelab.ConfigError, match="is in the run folder"):
        from_folders.save(os.path.join(sim_dir, "report"))
    # The same for saved Results: their folders are the inputs.
    with pytest.raises(servelab.ConfigError, match="is in the run folder"):
        servelab.validate(s, eng).save(os.path.join(sim_dir, "report"))
    # Replayed with another cost model (a Calibration): named in the report.
    other = servelab.validate(s, eng, cost_model=c)
    assert other.report["step_time"]["replay_cost_model"].startswith("calibrated (")


def test_validate_refuses_runs_of_different_experiments():
    a = servelab.run(ALL_AT_ZERO, record_schedule=True)
    b = servelab.engine_run(ALL_AT_ZERO, {"seed": 12}, record_schedule=True)
    with pytest.raises(servelab.ConfigError, match="seed"):
        servelab.validate(a, b)
    # Messages name an unsaved input by its argument, as the outputs do.
    with pytest.raises(servelab.ConfigError, match="^<engine>: a run of backend 'sim'"):
        servelab.validate(a, a)
    with pytest.raises(TypeError, match="sim: expected a run folder or a servelab.Result"):
        servelab.validate(None, b)
