"""ServeLab from Python: run experiments, read their results as pandas DataFrames, write policies.

The API on one page is docs/python.md. In short::

    import servelab
    r = servelab.run("experiments/burst.yaml", overrides={"serving.max_num_seqs": 8}, seed=1)
    r.summary["ttft_ms"]["p99"], r.requests, r.steps   # dict, DataFrames
    r.save("out/burst-8")                                         # the folder `sim run` writes

The C++ extension (_servelab) does the work with the same code as the `sim` and `engine`
commands; this package turns its results into Python objects.
"""

import os as _os

from . import _servelab
from ._servelab import (AdmissionLoad, ConfigError, PolicyError, ReplicaLoad, Request,
                        RouteRequest, StepBuilder)
from .calibration import Calibration, Profile, Validation, calibrate, profile, validate
from .groups import GroupResult, compare, sweep
from .kv_dtypes import compare_kv_dtypes
from .plotting import plot
from .policies import (policies, policies_text, register_admission, register_batch_formation,
                       register_length_cap, register_queue_order, register_router,
                       register_victim_rule)
from .result import Result
from .runs import engine_run, run
from .step_cost import step_cost
from .weight_quantization import compare_weight_quantizations

# The ServeLab home (catalogues, experiments, traces, the plot script): found from this
# package's folder (a build tree or an installed package) unless $SERVELAB_HOME says otherwise.
home = _servelab.locate_home(_os.path.dirname(_os.path.abspath(__file__)))

__all__ = [
    "AdmissionLoad",
    "Calibration",
    "ConfigError",
    "GroupResult",
    "PolicyError",
    "Profile",
    "ReplicaLoad",
    "Request",
    "RouteRequest",
    "Result",
    "StepBuilder",
    "Validation",
    "calibrate",
    "compare",
    "compare_kv_dtypes",
    "compare_weight_quantizations",
    "engine_run",
    "home",
    "plot",
    "policies",
    "policies_text",
    "profile",
    "register_admission",
    "register_batch_formation",
    "register_length_cap",
    "register_queue_order",
    "register_router",
    "register_victim_rule",
    "run",
    "step_cost",
    "sweep",
    "validate",
]
