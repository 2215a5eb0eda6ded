"""servelab.plot: `sim plot`'s figures from saved run, compare or sweep folders."""

import os

from . import _servelab
from ._servelab import ConfigError
from .experiment_source import check_flag
from .groups import GroupResult
from .result import Result


def plot(*runs, out=None, format="png", quiet=True):
    """Draws the figures of `sim plot` for `runs`: folders, or Results / GroupResults already
    saved (save(dir) first). out: the figures' folder (default <first run>/figures). Returns
    the folder. Raises ConfigError for input the command refuses, RuntimeError when the script
    fails (matplotlib missing: exit status 3)."""
    inputs = []
    for r in runs:
        if isinstance(r, (Result, GroupResult)):
            if r.path is None:
                raise ConfigError("plot: a result must be saved first (result.save(dir))")
            inputs.append(r.path)
        else:
            inputs.append(os.fspath(r))
    if not inputs:
        raise ConfigError("plot: expected at least one run folder")
    out_dir = os.fspath(out) if out is not None else ""
    status = _servelab.plot(inputs, out_dir, format, check_flag("quiet", quiet))
    if status == 2:
        raise ConfigError("plot: the plot script refused its input (its message is on stderr)")
    if status == 3:
        raise RuntimeError("plot: matplotlib is missing for the plot script's interpreter")
    if status != 0:
        raise RuntimeError(f"plot: the plot script failed (exit status {status})")
    return out_dir or os.path.join(inputs[0], "figures")
