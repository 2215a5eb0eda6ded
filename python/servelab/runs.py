"""servelab.run and servelab.engine_run: one experiment, as `sim run` and `engine run`."""

from . import _servelab
from .experiment_source import (check_flag, check_gib, check_seed, check_text, experiment_args,
                                override_list)
from .result import Result


def run(experiment, overrides=None, seed=None, *, record_schedule=False, record_events=False,
        record_blocks=False, check_invariants=True):
    """Simulates `experiment` (a YAML path or a dict) with `overrides` ({"key.path": value},
    as --set) and `seed` (as --seed), and returns its Result. The record_* switches are the
    command's --record-schedule/--record-events/--record-blocks. Raises ConfigError (a
    ValueError) for a bad experiment or argument, with the command's FILE:LINE:COL message;
    PolicyError when a Python policy fails; KeyboardInterrupt on Ctrl-C (nothing is left
    behind). Nothing is written to disk until Result.save(). While a Python policy is active the
    scheduler's invariants are checked after every step; check_invariants=False skips that
    (for a policy already trusted: the checks cost about 15 us per step)."""
    name, text, base_dir = experiment_args(experiment)
    files = _servelab.run(name, text, base_dir, override_list(overrides), check_seed(seed),
                          check_flag("record_schedule", record_schedule),
                          check_flag("record_events", record_events),
                          check_flag("record_blocks", record_blocks),
                          check_flag("check_invariants", check_invariants))
    return Result(files)


def engine_run(experiment, overrides=None, seed=None, *, device="cpu", weights="",
               kv_memory_gb=1.0, record_schedule=False, tokens=False, check_invariants=True):
    """Runs `experiment` on the engine (`engine run`): every step executed on the model, arrivals
    replayed in wall-clock time. device "cpu" (the exact reference executor; "cuda" where the
    build has CUDA), weights a safetensors checkpoint (default: random weights from the seed),
    kv_memory_gb the KV budget when serving.num_gpu_blocks is unset, tokens=True to keep the
    sampled tokens (Result.tokens). Errors and check_invariants as run()."""
    name, text, base_dir = experiment_args(experiment)
    files = _servelab.engine_run(name, text, base_dir, override_list(overrides),
                                 check_seed(seed), check_flag("record_schedule", record_schedule),
                                 check_text("device", device, "cpu"),
                                 check_text("weights", weights, ""),
                                 check_gib("kv_memory_gb", kv_memory_gb),
                                 check_flag("tokens", tokens),
                                 check_flag("check_invariants", check_invariants))
    return Result(files)
