"""servelab.compare and servelab.sweep: several runs of one experiment, as `sim compare` and
`sim sweep`, and GroupResult, what they return."""

import io
import os

from . import _servelab
from .experiment_source import check_path, experiment_args, override_list
from .result import Result


class GroupResult:
    """A compare or sweep: ``table`` (compare.csv / sweep.csv as a DataFrame), ``classes``
    (classes.csv, or None), ``runs`` ({run folder name: Result}, in the command's order),
    ``save(dir)``."""

    def __init__(self, kind, names, files):
        self.kind = kind  # "compare" or "sweep"
        self._index = "compare.csv" if kind == "compare" else "sweep.csv"
        self._names = list(names)
        self._files = list(files)
        self.path = None
        by_run = {n: [] for n in self._names}
        for rel, data in self._files:
            head, _, rest = rel.partition("/")
            if rest and head in by_run:
                by_run[head].append((rest, data))
        self.runs = {n: Result(_in_run_order(by_run[n])) for n in self._names}

    @property
    def table(self):
        import pandas

        data = dict(self._files)[self._index]
        return pandas.read_csv(io.BytesIO(data))

    @property
    def classes(self):
        """classes.csv as a DataFrame (a row per run and request class), or None when no run
        has request classes."""
        import pandas

        data = dict(self._files).get("classes.csv")
        return None if data is None else pandas.read_csv(io.BytesIO(data))

    def save(self, dir):
        """Writes the folder the command writes (index file and one run folder per run), with
        its rules: an existing folder may hold only such outputs, the runs are replaced whole.
        Returns the path."""
        where = check_path(f"{type(self).__name__}.save: dir", dir)
        self.path = _servelab.save_group(where, self._index, self.kind, self._names, self._files)
        for name, result in self.runs.items():
            result.path = os.path.join(self.path, name)
        return self.path

    def __repr__(self):
        return f"<servelab.GroupResult {self.kind}: {len(self._names)} runs>"


def _in_run_order(files):
    # The order sim run lists its files in (summary.json, requests.csv, steps.csv, ...).
    order = ["summary.json", "requests.csv", "steps.csv", "schedule.csv", "events.csv",
             "blocks.csv", "config.yaml"]
    rank = {n: i for i, n in enumerate(order)}
    return sorted(files, key=lambda f: (rank.get(f[0], len(order)), f[0]))


def compare(experiment, variants=None, overrides=None, seed=None):
    """`sim compare`: the experiment (a YAML path, or a dict as for run()) under each variant,
    same workload and seed. variants: {name: {"key.path": value}} (replaces the experiment's
    `compare:` section, as --variant does); default: that section. Returns a GroupResult."""
    name, text, base_dir = experiment_args(experiment)
    variant_list = None
    if variants is not None:
        if not isinstance(variants, dict):
            raise TypeError("variants: expected {name: {\"key.path\": value}}")
        variant_list = [(str(name), override_list(sets)) for name, sets in variants.items()]
    names, files = _servelab.compare(name, text, base_dir, variant_list,
                                     override_list(overrides, seed))
    return GroupResult("compare", names, files)


def sweep(experiment, overrides=None, seed=None, jobs=None):
    """`sim sweep`: every point of the experiment's `sweep:` grid (a YAML path, or a dict as for
    run()), on `jobs` threads (default: all cores); results do not depend on `jobs`. No figures
    are drawn (call plot()). Returns a GroupResult."""
    name, text, base_dir = experiment_args(experiment)
    if jobs is None:
        jobs = os.cpu_count() or 1
    if isinstance(jobs, bool) or not isinstance(jobs, int):
        raise TypeError("jobs: expected an int")
    names, files = _servelab.sweep(name, text, base_dir, override_list(overrides, seed), jobs)
    return GroupResult("sweep", names, files)
