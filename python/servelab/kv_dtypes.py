"""servelab.compare_kv_dtypes: what a KV-cache dtype changes in the CPU engine's logits."""

import numbers
import operator

from . import _servelab

DEFAULT_FORMATS = ("fp32", "fp16", "fp8_e4m3", "fp8_e5m2", "fp8_e4m3:computed_scales")


def compare_kv_dtypes(formats=DEFAULT_FORMATS, *, model="tiny", seed=5, requests=8,
                      prompt_len=48, decode_tokens=32, block_size=16):
    """Each KV-cache format of `formats` against bf16 KV on the CPU engine (engine/kv_dtype_probe.h;
    docs/engine.md, "KV cache dtype"): `requests` requests of `prompt_len` tokens decode
    `decode_tokens` tokens greedily with bf16 KV, alone, on `model`'s random weights from `seed`
    (a catalogue name or a config.json); then the same requests run with each format,
    teacher-forced (fed the bf16 run's tokens, so every step sees the same context).

    A format is a model.kv_cache_dtype value (bf16, fp16, fp8 = fp8_e4m3, fp8_e5m2) or fp32;
    an fp8 one with the suffix ":computed_scales" sets each layer's scales from its first step's
    data (max |x| / the format's max) instead of 1.

    Returns a pandas DataFrame, one row per format in the order given: format,
    max_logit_diff (the largest |logit - bf16 logit| over every step), max_logit (the largest
    |bf16 logit|), tokens_differing (steps whose greedy token differs from bf16's), steps.
    Deterministic. Raises ConfigError for a bad format or count."""
    import pandas

    if isinstance(formats, str):
        formats = [formats]
    rows = _servelab.compare_kv_dtypes(str(model), _int("seed", seed), _int("requests", requests),
                                       _int("prompt_len", prompt_len),
                                       _int("decode_tokens", decode_tokens),
                                       _int("block_size", block_size), [str(f) for f in formats])
    return pandas.DataFrame(rows, columns=["format", "max_logit_diff", "max_logit",
                                           "tokens_differing", "steps"])


def _int(name, value):
    """An int argument (NumPy's integers too), never a bool."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
    return operator.index(value)
