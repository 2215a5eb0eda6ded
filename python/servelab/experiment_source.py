"""How an experiment and its overrides reach the C++ loader.

An experiment is a YAML file (str or os.PathLike) or a dict with the same keys. A dict is passed
as JSON text (JSON is YAML), named "<dict>" in error messages; its relative data paths (a trace
file) resolve against the current folder, and without a `name` key it is called "experiment".
Overrides are {"key.path": value} as with `--set key.path=value`: a str is taken as YAML text,
anything else is written as JSON (numbers, booleans, None, lists, dicts).
"""

import json
import numbers
import operator
import os

from ._servelab import ConfigError

DICT_NAME = "<dict>"


def _plain(value):
    """json.dumps' fallback: NumPy's (and other) integer and real scalars as numbers, arrays as
    lists (values read from a DataFrame are NumPy's)."""
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def experiment_args(experiment):
    """(name, text or None, base_dir) for the C++ loader."""
    if isinstance(experiment, dict):
        try:
            text = json.dumps(experiment, indent=1, allow_nan=False, default=_plain)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"{DICT_NAME}: not an experiment: {e}") from None
        return DICT_NAME, text, os.getcwd()
    if isinstance(experiment, (str, os.PathLike)):
        return os.fspath(experiment), None, ""
    raise TypeError(
        "experiment: expected a YAML file path or a dict, got " + type(experiment).__name__
    )


def override_list(overrides, seed=None):
    """["key.path=value", ...] from a dict (and seed=N last, as the commands' --seed)."""
    if overrides is None:
        overrides = {}
    if not isinstance(overrides, dict):
        raise TypeError("overrides: expected a dict {\"key.path\": value}, got "
                        + type(overrides).__name__)
    out = []
    for key, value in overrides.items():
        if not isinstance(key, str) or not key:
            raise ConfigError(f"overrides: expected key paths as non-empty strings, got {key!r}")
        if any(c in key for c in "=# \t\n\r"):
            raise ConfigError(f"overrides: {key!r} is not a key path (no '=', '#' or white space: "
                              "the value goes in the dict's value)")
        if isinstance(value, str):
            text = value
        else:
            try:
                text = json.dumps(value, allow_nan=False, default=_plain)
            except (TypeError, ValueError) as e:
                raise ConfigError(f"--set {key}: cannot write {value!r} as YAML: {e}") from None
        out.append(f"{key}={text}")
    if seed is not None:
        out.append(f"seed={check_seed(seed)}")
    return out


def check_seed(seed):
    if seed is None:
        return None
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"seed: expected an int, got {type(seed).__name__} {seed!r}")
    seed = operator.index(seed)
    if seed < 0 or seed >= 2**63:
        raise ConfigError(f"seed: expected an integer from 0 to 2^63-1, got {seed!r}")
    return seed


def check_flag(name, value):
    """A switch: True or False, nothing that merely looks truthy ("no" is not False)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name}: expected True or False, got {type(value).__name__} {value!r}")
    return value


def check_text(name, value, default):
    """A string argument; None means its default (never the text "None")."""
    if value is None:
        return default
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):
        raise TypeError(f"{name}: expected a str, got {type(value).__name__} {value!r}")
    return value


def check_path(name, value):
    """A path argument (str or os.PathLike): never empty, which would name no file."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):
        raise TypeError(f"{name}: expected a path (str or os.PathLike), got "
                        f"{type(value).__name__} {value!r}")
    if not value:
        raise ConfigError(f"{name}: expected a path, got an empty one")
    return value


def check_gib(name, value):
    """A size in GiB: a number in (0, 1e6] (as --kv-memory-gb), not a string or a bool."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name}: expected a number of GiB, got {type(value).__name__} {value!r}")
    if not 0 < value <= 1e6:
        raise ConfigError(f"{name}: expected a number of GiB in (0, 1e6], got {value!r}")
    return float(value)
