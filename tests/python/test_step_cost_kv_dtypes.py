"""servelab.step_cost and servelab.compare_kv_dtypes (docs/python.md): the numbers they give
against the C++ measurements the lessons quote (tests/lessons_test.cc), how they respond to the
experiment, and their errors."""

import pytest

import servelab
from conftest import ROOT

FP8 = str(ROOT / "experiments" / "lessons" / "fp8-kv.yaml")
PAGES = str(ROOT / "experiments" / "lessons" / "page-size.yaml")


def test_step_cost_prices_a_decode_step_as_the_roofline_does():
    bf16 = servelab.step_cost(FP8, decode=[2048] * 64)
    fp8 = servelab.step_cost(FP8, {"model.kv_cache_dtype": "fp8"}, decode=[2048] * 64)
    assert bf16["model"] == "roofline"
    # tests/lessons_test.cc (Lessons.Fp8Kv) prices the same step with RooflineCostModel.
    assert bf16["decode_attention_ms"] == pytest.approx(7.344, abs=0.001)
    assert fp8["decode_attention_ms"] == pytest.approx(3.679, abs=0.001)
    assert bf16["total_ms"] == pytest.approx(14.855, abs=0.001)
    # fp8 changes only what reads the KV.
    for key in ("gemm_ms", "elementwise_ms", "lm_head_ms", "overhead_ms"):
        assert bf16[key] == fp8[key]
    assert bf16["bytes"] > fp8["bytes"] and bf16["flops"] == fp8["flops"]
    parts = [v for k, v in bf16.items() if k.endswith("_ms") and k not in ("total_ms", "step_ms")]
    assert sum(parts) == pytest.approx(bf16["total_ms"])
    assert abs(bf16["step_ms"] - bf16["total_ms"]) < 1e-5  # rounded to whole ns


def test_step_cost_block_indirection_follows_the_block_size():
    def attention(block_size, ns):
        return servelab.step_cost(PAGES, {"serving.block_size": block_size,
                                          "cost_model.block_indirection_ns": ns},
                                  decode=[256])["decode_attention_ms"]
    base = attention(16, 0)
    assert attention(8, 0) == base
    added = [100 * (attention(b, 40) / base - 1) for b in (8, 16, 32)]
    assert [round(a, 1) for a in added] == [43.2, 21.6, 10.8]  # docs/lessons/page-size.md


def test_step_cost_prefill_entries_and_dicts():
    one = {"model": "Llama-3-8B", "hardware": "H100-SXM",
           "serving": {"max_model_len": 8192, "max_num_batched_tokens": 8192},
           "workload": {"type": "synthetic", "num_requests": 1,
                        "arrival": {"process": "fixed", "rate": 1},
                        "prompt_len": {"dist": "fixed", "value": 256},
                        "output_len": {"dist": "fixed", "value": 1}}}
    # A 256-token prompt alone: the first step of the chunked-prefill notebook's run.
    run = servelab.run(one)
    cost = servelab.step_cost(one, prefill=[256])
    assert cost["step_ms"] == pytest.approx(run.steps["duration_ms"][0], abs=1e-6)
    assert servelab.step_cost(one, prefill=[(0, 256)]) == cost
    cached = servelab.step_cost(one, prefill=[(1024, 256)])
    assert cached["prefill_attention_ms"] > cost["prefill_attention_ms"]
    assert cached["gemm_ms"] == cost["gemm_ms"]


def test_step_cost_verify_entries():
    spec = str(ROOT / "experiments" / "lessons" / "speculative-decoding.yaml")
    assert servelab.step_cost(spec, decode=[640] * 8, drafts=0) == servelab.step_cost(
        spec, decode=[640] * 8)
    # Batch 1 is memory-bound: five tokens cost barely more than one. At 256 sequences the
    # 1,280 rows are compute-bound: more than twice a decode step (speculative-decoding.md).
    for batch, low, high in ((1, 1.0, 1.1), (256, 2.0, 5.0)):
        one = servelab.step_cost(spec, decode=[640] * batch)
        verify = servelab.step_cost(spec, decode=[640] * batch, drafts=4)
        assert low < verify["total_ms"] / one["total_ms"] < high, batch
        assert verify["lm_head_ms"] > one["lm_head_ms"]
        assert verify["flops"] > 4 * one["flops"]
    with pytest.raises(servelab.ConfigError, match="drafts: expected 0 to 64"):
        servelab.step_cost(spec, decode=[16], drafts=-1)
    with pytest.raises(TypeError, match="drafts"):
        servelab.step_cost(spec, decode=[16], drafts=1.5)


def test_step_cost_errors():
    with pytest.raises(servelab.ConfigError, match="at least one entry"):
        servelab.step_cost(FP8)
    with pytest.raises(servelab.ConfigError, match=r"decode\[1\]: expected a context length"):
        servelab.step_cost(FP8, decode=[16, 0])
    with pytest.raises(servelab.ConfigError, match=r"prefill\[0\]"):
        servelab.step_cost(FP8, prefill=[(-1, 4)])
    with pytest.raises(servelab.ConfigError, match="model.kv_cache_dtype"):
        servelab.step_cost(FP8, {"model.kv_cache_dtype": "fp4"}, decode=[16])
    with pytest.raises(TypeError, match=r"decode\[0\]"):
        servelab.step_cost(FP8, decode=[1.5])


def test_compare_kv_dtypes_gives_the_lessons_numbers():
    d = servelab.compare_kv_dtypes().set_index("format")
    assert list(d.index) == ["fp32", "fp16", "fp8_e4m3", "fp8_e5m2", "fp8_e4m3:computed_scales"]
    assert set(d["steps"]) == {256}
    # tests/lessons_test.cc (Lessons.Fp8Kv) measures the same with tests/kv_quant_measure.h.
    assert d.loc["fp32", "max_logit_diff"] == pytest.approx(0.019, abs=0.0005)
    assert d.loc["fp8_e4m3", "max_logit_diff"] == pytest.approx(0.38, abs=0.005)
    assert d.loc["fp8_e5m2", "max_logit_diff"] == pytest.approx(0.65, abs=0.005)
    assert d.loc["fp8_e4m3:computed_scales", "max_logit_diff"] == pytest.approx(0.35, abs=0.005)
    assert list(d["tokens_differing"]) == [1, 1, 4, 13, 4]
    assert d["max_logit"].round(2).tolist() == [17.87] * 5


def test_compare_kv_dtypes_is_deterministic_and_follows_its_setup():
    a = servelab.compare_kv_dtypes(["fp8", "bf16"], requests=2, decode_tokens=8)
    b = servelab.compare_kv_dtypes(["fp8", "bf16"], requests=2, decode_tokens=8)
    assert a.equals(b)
    assert list(a["steps"]) == [16, 16]
    # bf16 against itself: no difference at all.
    assert a["max_logit_diff"][1] == 0 and a["tokens_differing"][1] == 0
    assert a["max_logit_diff"][0] > 0
    other = servelab.compare_kv_dtypes("fp8", requests=2, decode_tokens=8, seed=6)
    assert other["max_logit_diff"][0] != a["max_logit_diff"][0]


def test_compare_kv_dtypes_errors():
    with pytest.raises(servelab.ConfigError, match=r"formats\[1\]: expected fp32, bf16"):
        servelab.compare_kv_dtypes(["fp8", "int4"])
    with pytest.raises(servelab.ConfigError, match="computed scales apply to fp8"):
        servelab.compare_kv_dtypes(["fp16:computed_scales"])
    with pytest.raises(servelab.ConfigError, match="requests: expected 1 to"):
        servelab.compare_kv_dtypes(requests=0)
    with pytest.raises(servelab.ConfigError, match="no-such-model"):
        servelab.compare_kv_dtypes(model="no-such-model")
    with pytest.raises(TypeError, match="decode_tokens"):
        servelab.compare_kv_dtypes(decode_tokens="8")
