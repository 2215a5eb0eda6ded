"""servelab.compare_weight_quantizations: what quantized weights change in the CPU engine's
logits."""

from . import _servelab
from .kv_dtypes import _int


def compare_weight_quantizations(quantizations=("fp8", "awq"), *, model="tiny", seed=7,
                                 requests=8, prompt_len=48, decode_tokens=32, block_size=16):
    """Each weight quantization of `quantizations` (model.quantization values: none, fp8, awq,
    awq_marlin) against the unquantized weights on the CPU engine (engine/weight_quant_probe.h;
    docs/engine.md, "Quantized weights"): `requests` requests of `prompt_len` tokens decode
    `decode_tokens` tokens greedily, alone, on `model`'s random weights from `seed` (a catalogue
    name, a model .yaml or a config.json), with fp32 KV; then the same requests run on the quantized
    weights, teacher-forced (fed the reference run's tokens).

    awq groups 128 input columns, so it needs a model whose projection inputs are multiples of
    128 wide: not the tiny model (64; ConfigError naming the matrix). The lesson
    docs/lessons/quantized-weights.md widens it to 128.

    Returns a pandas DataFrame, one row per quantization in the order given: quantization,
    max_logit_diff, max_logit, tokens_differing, steps (as compare_kv_dtypes). Deterministic.
    Raises ConfigError for a bad quantization or count."""
    import pandas

    if isinstance(quantizations, str):
        quantizations = [quantizations]
    rows = _servelab.compare_weight_quantizations(
        str(model), _int("seed", seed), _int("requests", requests),
        _int("prompt_len", prompt_len), _int("decode_tokens", decode_tokens),
        _int("block_size", block_size), [str(q) for q in quantizations])
    return pandas.DataFrame(rows, columns=["quantization", "max_logit_diff", "max_logit",
                                           "tokens_differing", "steps"])
