"""servelab.step_cost: one step priced by an experiment's cost model, per operator."""

from . import _servelab
from .experiment_source import experiment_args, override_list


def step_cost(experiment, overrides=None, *, decode=(), prefill=(), drafts=0):
    """What one step costs under `experiment`'s cost model (a YAML path or a dict, with
    `overrides` as for run(): its model, hardware, block size, KV dtype, parallelism and
    cost_model settings; the roofline, or the calibrated profile it names), in milliseconds per
    operator, as the simulator charges it (docs/cost-model.md).

    decode: the context length of each decode entry (one token at position context - 1).
    drafts: draft tokens each decode entry verifies (speculative decoding: the entry computes
    1 + drafts tokens and the LM head scores them all); the drafting itself (draft_model, EAGLE)
    is not included.
    prefill: each prefill entry as its token count, or (cached, tokens): `tokens` computed
    after `cached` already in the cache. Every entry samples a token.

    Returns a dict: gemm_ms, elementwise_ms, prefill_attention_ms, decode_attention_ms,
    lm_head_ms, swap_ms, copy_ms, overhead_ms, communication_ms, pipeline_ms, total_ms (their
    sum), step_ms (the step's duration as the simulator rounds it, whole ns), flops, bytes and
    model ("roofline" or "calibrated"). Raises ConfigError for a bad experiment or entry."""
    name, text, base_dir = experiment_args(experiment)
    decode = [_count("decode", i, c) for i, c in enumerate(decode)]
    entries = []
    for i, p in enumerate(prefill):
        if isinstance(p, (tuple, list)):
            if len(p) != 2:
                raise TypeError(f"prefill[{i}]: expected tokens or (cached, tokens), got {p!r}")
            entries.append((_count("prefill", i, p[0]), _count("prefill", i, p[1])))
        else:
            entries.append((0, _count("prefill", i, p)))
    if isinstance(drafts, bool) or not isinstance(drafts, int):
        raise TypeError(f"drafts: expected an int, got {type(drafts).__name__}")
    return _servelab.step_cost(name, text, base_dir, override_list(overrides), decode, entries,
                               drafts)


def _count(what, i, value):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what}[{i}]: expected an int, got {type(value).__name__}")
    return value
