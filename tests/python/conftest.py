"""Shared fixtures of the servelab module's tests (run by ctest: tests/CMakeLists.txt, and so by
scripts/test and CI).

The module under test is the build tree's: $SERVELAB_BUILD_DIR/python (ctest sets it), else
build/release of this checkout. `sim` is that build's sim/sim.
"""

import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("SERVELAB_BUILD_DIR", ROOT / "build" / "release"))
sys.path.insert(0, str(BUILD / "python"))

import servelab  # noqa: E402

# Bursty, 200 requests on the tiny model with a 64-block pool: preemptions happen.
BURST_TINY = ROOT / "experiments" / "burst-tiny.yaml"

# All arrivals at t = 0 on a 24-block pool (tests/engine_run_test.cc's): small enough for the
# CPU engine, and it preempts.
ALL_AT_ZERO = {
    "name": "agnostic",
    "seed": 11,
    "model": "tiny",
    "hardware": "H100-SXM",
    "serving": {"block_size": 16, "num_gpu_blocks": 24, "max_num_batched_tokens": 256,
                "max_num_seqs": 16, "max_model_len": 384},
    "policies": {"prefix_cache": "hash", "preemption": "recompute"},
    "workload": {"type": "synthetic", "num_requests": 40, "start_s": 0,
                 "arrival": {"process": "fixed", "rate": 1.0e12},
                 "prompt_len": {"dist": "uniform", "min": 20, "max": 120},
                 "output_len": {"dist": "uniform", "min": 5, "max": 40},
                 "shared_prefix": {"num_prefixes": 3, "length": 32, "fraction": 0.6}},
}


def sim(*args, cwd=None):
    """Runs the build's `sim`; returns the CompletedProcess (text)."""
    return subprocess.run([str(BUILD / "sim" / "sim"), *map(str, args)], cwd=cwd,
                          capture_output=True, text=True)


@pytest.fixture
def burst_tiny():
    return BURST_TINY
