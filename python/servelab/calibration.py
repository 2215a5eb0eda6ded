"""servelab.profile, calibrate, validate: the simulator held against the engine, from Python.

The loop of docs/validation.md, by the code of `engine profile`, `sim calibrate` and
`sim validate`: time the engine over a grid of step shapes, fit the calibrated cost model to
those times, run an experiment on the engine and in the simulator, and measure how far apart
they are::

    p = servelab.profile("tiny", quick=True)
    cal = servelab.calibrate(p, holdout=3)
    cost = cal.save("cost.yaml")
    eng = servelab.engine_run("experiments/burst-tiny.yaml", record_schedule=True)
    sim = servelab.run("experiments/burst-tiny.yaml", {"cost_model.file": cost},
                       record_schedule=True)
    v = servelab.validate(sim, eng)
    v.report["step_time"]["replayed"]["mean"], v.replay   # dict, DataFrame

Inputs are files and folders or the objects these functions and run/engine_run return; objects
not saved are written to a private temporary folder for the call. Nothing is written elsewhere
until save().
"""

import io
import json
import os
import tempfile

from . import _servelab
from .experiment_source import check_flag, check_path
from .kv_dtypes import _int
from .result import Result


def _read_csv(text, **kwargs):
    import pandas

    return pandas.read_csv(io.StringIO(text), **kwargs)


class Profile:
    """An `engine profile` measurement: ``text`` (the CSV exactly as the command writes it),
    ``header`` (its ``# key: value`` lines as a dict: model, device, machine, date_utc,
    engine_version, block_size, block_bytes, kv_cache_dtype, quantization, ...), ``shapes``
    (the rows as a DataFrame: family, the cost model's features, reps, median_ns, min_ns,
    max_ns), ``device``, ``path`` (where it was last saved, else None), ``save(path)``."""

    def __init__(self, text, device, path=None, inputs=()):
        self.text = text
        self.device = device
        self.path = path
        self._inputs = [os.fspath(x) for x in inputs if x]  # the model and weights it timed

    @property
    def header(self):
        out = {}
        for line in self.text.splitlines():
            if not line.startswith("#"):
                continue
            key, sep, value = line[1:].partition(":")
            if sep:
                out[key.strip()] = value.strip()
        return out

    @property
    def shapes(self):
        return _read_csv(self.text, comment="#")

    def save(self, path, force=False):
        """Writes the profile to `path` as `engine profile -o path` would (atomically; an existing
        file only with force=True; never the model file or the weights it timed). Returns the
        path."""
        self.path = _servelab.save_file(check_path("Profile.save: path", path), self.text,
                                        check_flag("force", force), self._inputs)
        return self.path

    @classmethod
    def load(cls, path):
        """A profile file (written by `engine profile` or save())."""
        with open(os.fspath(path), encoding="utf-8") as f:
            text = f.read()
        p = cls(text, "", os.fspath(path))
        p.device = p.header.get("device", "")
        return p

    def __repr__(self):
        h = self.header
        return (f"<servelab.Profile {h.get('model', '?')} on {self.device}: "
                f"{len(self.shapes)} shapes, KV cache {h.get('kv_cache_dtype', '?')}>")


def profile(model, *, device="cpu", quick=False, reps=9, rounds=3, warmup=2, max_tokens=2048,
            block_size=16, weights=None, lora_rank=0, kv_cache_dtype=None, quantization=None,
            seed=0):
    """`engine profile`: times the executor on `device` over the grid of step shapes
    (docs/validation.md §1) for `model` (a catalogue name, a model .yaml or a config.json),
    random weights from `seed` or the safetensors checkpoint `weights`. `kv_cache_dtype` and
    `quantization` (None: the model file's) store the model as `engine run` would;
    `lora_rank` > 0 adds steps under adapters of that rank. Returns a Profile; writes nothing.
    Raises ConfigError for a bad argument, an unknown model or a device that is not there."""
    text, dev = _servelab.profile(
        str(model), str(device), _int("reps", reps), _int("rounds", rounds),
        _int("warmup", warmup), check_flag("quick", quick), _int("max_tokens", max_tokens),
        _int("block_size", block_size), os.fspath(weights) if weights else "",
        _int("lora_rank", lora_rank), str(kv_cache_dtype) if kv_cache_dtype else "",
        str(quantization) if quantization else "", _int("seed", seed))
    return Profile(text, dev, inputs=[model if isinstance(model, (str, os.PathLike)) else "",
                                      weights or ""])


class Calibration:
    """A fitted calibrated cost model: ``yaml`` (the cost.yaml text `sim calibrate` writes),
    ``summary`` (what it prints), ``coefficients`` (seconds per unit, by cost.yaml's names),
    ``fit`` (mape, max_error, shapes, families, converged, and holdout: the errors on the shapes
    held out, or None), ``host_overhead`` (fitted on an engine run, or None), ``model``,
    ``device``, ``kv_cache_dtype``, ``quantization``, ``path``, ``save(path)``."""

    def __init__(self, d, inputs=()):
        self.yaml = d["yaml"]
        self.summary = d["summary"]
        self.coefficients = d["coefficients"]
        self.fit = d["fit"]
        self.host_overhead = d["host_overhead"]
        self.model = d["model"]
        self.device = d["device"]
        self.kv_cache_dtype = d["kv_cache_dtype"] or None
        self.quantization = d["quantization"] or None
        self.path = None
        self._inputs = list(inputs)  # the profile file and engine run folder it was fitted on

    def save(self, path, force=False):
        """Writes the cost.yaml to `path` as `sim calibrate -o path` would (atomically; an
        existing file only with force=True; never the profile file or a file of the engine run
        folder it was fitted on). Use it with `cost_model.file`. Returns the path."""
        self.path = _servelab.save_file(check_path("Calibration.save: path", path), self.yaml,
                                        check_flag("force", force), self._inputs)
        return self.path

    def __repr__(self):
        return (f"<servelab.Calibration {self.model} on {self.device}: "
                f"MAPE {100 * self.fit['mape']:.1f} % over {self.fit['shapes']} shapes>")


class _Inputs:
    """Inputs of one call as files: paths as given; Results, Profiles and Calibrations written
    into a private temporary folder, which the outputs and error messages then name by the
    object's saved path, else by the argument, "<engine_run>" (so that they do not depend on
    where the temporary folder was)."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.labels = []  # (temporary path, label)

    def _written(self, obj, what, path):
        self.labels.append((path, obj.path or f"<{what}>"))
        return path

    def run_folder(self, run, what):
        if isinstance(run, Result):
            return self._written(run, what,
                                 _servelab.save_run(os.path.join(self.tmp, what), run._files))
        if isinstance(run, (str, os.PathLike)):
            return os.fspath(run)
        raise TypeError(f"{what}: expected a run folder or a servelab.Result, got "
                        f"{type(run).__name__}")

    def file(self, obj, cls, what, name):
        if isinstance(obj, cls):
            path = os.path.join(self.tmp, name)
            with open(path, "w", encoding="utf-8") as f:
                f.write(obj.text if cls is Profile else obj.yaml)
            return self._written(obj, what, path)
        if isinstance(obj, (str, os.PathLike)):
            return os.fspath(obj)
        raise TypeError(f"{what}: expected a file or a servelab.{cls.__name__}, got "
                        f"{type(obj).__name__}")

    def relabel(self, text, in_json=False):
        for path, label in self.labels:
            text = text.replace(path, json.dumps(label)[1:-1] if in_json else label)
        return text

    def call(self, fn, *args):
        """fn(*args), its ConfigError's message naming the inputs as the outputs do."""
        try:
            return fn(*args)
        except _servelab.ConfigError as e:
            raise _servelab.ConfigError(self.relabel(str(e))) from None


def _saved_paths(*args):
    """The files and folders behind a call's arguments: paths as given, the saved path of a
    Result, Profile or Calibration (where it was last saved), nothing for objects never saved."""
    out = []
    for x in args:
        if isinstance(x, (str, os.PathLike)):
            out.append(os.fspath(x))
        elif getattr(x, "path", None):
            out.append(os.fspath(x.path))
    return out


def calibrate(profile, *, holdout=None, engine_run=None, between_steps=False):
    """`sim calibrate`: fits the calibrated cost model (docs/validation.md §2) to `profile` (a
    Profile or a profile file). `holdout` N >= 2 holds every N-th shape of each family out of
    the fit and reports the error on those (fit["holdout"]); `engine_run` (an engine run folder
    or Result recorded with record_schedule=True) adds the host overhead fitted on its steps,
    on step periods with `between_steps=True` (`--between-steps`: a step's duration plus the
    engine's time before the next step when the next continues a request).
    Returns a Calibration; writes nothing. Raises ConfigError for a bad profile or run."""
    if not isinstance(between_steps, bool):
        raise TypeError(f"calibrate: between_steps: expected True or False, got {between_steps!r}")
    if between_steps and engine_run is None:
        raise _servelab.ConfigError("calibrate: between_steps goes with engine_run (the time "
                                    "between steps is measured on that run)")
    if holdout is None:
        holdout = 0
    elif isinstance(holdout, bool) or not isinstance(holdout, int) or holdout < 2:
        raise _servelab.ConfigError(
            f"calibrate: holdout: expected an integer >= 2 (or None), got {holdout!r}")
    with tempfile.TemporaryDirectory(prefix="servelab-") as tmp:
        inputs = _Inputs(tmp)
        path = inputs.file(profile, Profile, "profile", "profile.csv")
        run = inputs.run_folder(engine_run, "engine_run") if engine_run is not None else ""
        d = inputs.call(_servelab.calibrate, path, path, holdout, run, between_steps)
        d["yaml"] = inputs.relabel(d["yaml"])
        d["summary"] = inputs.relabel(d["summary"])
        if d["host_overhead"] is not None:
            d["host_overhead"]["engine_run"] = inputs.relabel(d["host_overhead"]["engine_run"])
        return Calibration(d, _saved_paths(profile, engine_run))


class Validation:
    """`sim validate`'s report: ``report`` (validation.json as a dict: schedule, step_time
    paired and replayed, requests, aggregates; fractions, docs/validation.md), ``replay``
    (replay.csv as a DataFrame: each engine step's measured and predicted milliseconds),
    ``text`` (what the command prints), ``json``, ``save(dir)``."""

    def __init__(self, d, inputs=()):
        self.json = d["json"]
        self.text = d["text"]
        self._csv = d["replay_csv"]
        self.report = json.loads(self.json)
        self.path = None
        self._inputs = list(inputs)  # the run folders given as paths

    @property
    def replay(self):
        return _read_csv(self._csv)

    def save(self, dir, force=False):
        """Writes validation.json and replay.csv into `dir` (created if need be), as `sim
        validate --out dir`: a folder holding a previous report is replaced only with
        force=True (its sim plot figures removed); one holding other files, or inside a run folder it compared, is refused
        (ConfigError). Returns the folder."""
        self.path = _servelab.save_validation(check_path("Validation.save: dir", dir), self.json,
                                              self._csv, check_flag("force", force), self._inputs)
        return self.path

    def __repr__(self):
        r = self.report.get("step_time", {}).get("replayed") or {}
        mean = r.get("mean")
        err = f"replayed step error {100 * mean:.1f} %" if isinstance(mean, float) else "no replay"
        return (f"<servelab.Validation schedules {self.report.get('schedule', {}).get('comparison')}"
                f", {err}>")


def validate(sim, engine, *, cost_model=None):
    """`sim validate`: how far the simulated run `sim` is from the engine's run `engine` of the
    same experiment (docs/validation.md §3): run folders or Results, both recorded with
    record_schedule=True for the schedule comparison, the replay and the latency attribution
    (report["latency_attribution"]). `cost_model` (a cost.yaml or a Calibration) replays the
    engine's steps with it instead of the sim run's own model.
    Returns a Validation; writes nothing. Raises ConfigError when the runs differ in workload,
    seed or model, or a folder lacks a file."""
    with tempfile.TemporaryDirectory(prefix="servelab-") as tmp:
        inputs = _Inputs(tmp)
        s = inputs.run_folder(sim, "sim")
        e = inputs.run_folder(engine, "engine")
        c = inputs.file(cost_model, Calibration, "cost_model", "cost.yaml") if cost_model else ""
        d = inputs.call(_servelab.validate, s, e, c)
        d["json"] = inputs.relabel(d["json"], in_json=True)
        d["text"] = inputs.relabel(d["text"])
        return Validation(d, _saved_paths(sim, engine))
