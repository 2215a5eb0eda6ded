"""Result: one run's outputs, in memory.

The files are exactly those `sim run` (or `engine run`) writes, produced by the same C++ code and
held as bytes; the attributes parse them on first use. Columns are those of docs/metrics.md.
"""

import functools
import io
import json

from . import _servelab
from .experiment_source import check_path


class Result:
    """One run: ``summary`` (dict), ``requests``/``steps`` (DataFrames), ``schedule``,
    ``events``, ``blocks`` (DataFrames when recorded, else None), ``config`` (the resolved
    config.yaml text), ``files`` ({name: bytes}), ``save(dir)``."""

    def __init__(self, files):
        # [(name, bytes)] in the order the run wrote them.
        self._files = list(files)
        self.path = None  # the folder it was last saved to

    @property
    def files(self):
        """{name: bytes}, in the order the run wrote them."""
        return dict(self._files)

    def _file(self, name):
        for n, data in self._files:
            if n == name:
                return data
        return None

    def _csv(self, name):
        data = self._file(name)
        if data is None:
            return None
        import pandas  # imported here: the module itself needs no pandas

        return pandas.read_csv(io.BytesIO(data), keep_default_na=True)

    @functools.cached_property
    def summary(self):
        """summary.json as a dict (keys and units of docs/metrics.md)."""
        return json.loads(self._file("summary.json"))

    @functools.cached_property
    def requests(self):
        """requests.csv: one row per request, sorted by id (None when outputs.requests_csv is off)."""
        return self._csv("requests.csv")

    @functools.cached_property
    def steps(self):
        """steps.csv: one row per executed step (None when outputs.steps_csv is off)."""
        return self._csv("steps.csv")

    @functools.cached_property
    def schedule(self):
        """schedule.csv (record_schedule=True or outputs.record_schedule), else None."""
        return self._csv("schedule.csv")

    @functools.cached_property
    def events(self):
        """events.csv (record_events=True or outputs.record_events), else None."""
        return self._csv("events.csv")

    @functools.cached_property
    def blocks(self):
        """blocks.csv (record_blocks=True or outputs.record_blocks), else None."""
        return self._csv("blocks.csv")

    @property
    def config(self):
        """config.yaml: the resolved configuration the run used (text)."""
        return self._file("config.yaml").decode()

    @property
    def tokens(self):
        """engine_run(..., tokens=True): {request id: [token, ...]}, else None."""
        data = self._file("tokens.jsonl")
        if data is None:
            return None
        out = {}
        for line in data.decode().splitlines():
            row = json.loads(line)
            out[row["id"]] = row["tokens"]
        return out

    def save(self, dir):
        """Writes the run folder to `dir` as `sim run --out dir` would, byte for byte. Like the
        command it refuses a folder that holds anything but a previous run's outputs, and
        replaces a previous run only once the new one is complete. Returns the path."""
        self.path = _servelab.save_run(check_path("Result.save: dir", dir), self._files)
        return self.path

    def __repr__(self):
        s = self.summary
        run = s.get("run", {})
        req = s.get("requests", {})
        return (
            f"<servelab.Result {run.get('experiment', '?')} ({run.get('backend', '?')}): "
            f"{req.get('completed', '?')}/{req.get('total', '?')} requests completed, "
            f"{s.get('num_steps', '?')} steps>"
        )
