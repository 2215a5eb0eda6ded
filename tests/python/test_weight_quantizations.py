"""servelab.compare_weight_quantizations (docs/python.md): the numbers docs/lessons/
quantized-weights.md quotes (also checked in C++ by tests/lessons_test.cc,
Lessons.QuantizedWeightsAccuracy), and its errors."""

import pytest

import servelab
from conftest import ROOT

TINY = (ROOT / "experiments" / "catalog" / "models" / "tiny.yaml").read_text()


@pytest.fixture
def wide(tmp_path):
    """The tiny model widened to AWQ's group of 128 (hidden 128, 8 heads of 16, MLP 256)."""
    text = (TINY.replace("hidden_size: 64", "hidden_size: 128")
            .replace("num_heads: 4", "num_heads: 8")
            .replace("intermediate_size: 128", "intermediate_size: 256"))
    path = tmp_path / "wide.yaml"
    path.write_text(text)
    return str(path)


def test_the_lessons_numbers(wide):
    d = servelab.compare_weight_quantizations(model=wide).set_index("quantization")
    assert list(d.index) == ["fp8", "awq"]
    assert (d["steps"] == 256).all()
    assert d.loc["fp8", "max_logit"] == pytest.approx(17.88, abs=0.005)
    assert d.loc["fp8", "max_logit_diff"] == pytest.approx(0.82, abs=0.005)
    assert d.loc["awq", "max_logit_diff"] == pytest.approx(2.96, abs=0.005)
    assert list(d["tokens_differing"]) == [13, 47]


def test_none_changes_nothing_and_the_setup_is_followed(wide):
    d = servelab.compare_weight_quantizations(["none", "fp8"], model=wide, requests=2,
                                              decode_tokens=5)
    assert list(d["steps"]) == [10, 10]
    assert d.loc[0, "max_logit_diff"] == 0 and d.loc[0, "tokens_differing"] == 0
    assert d.loc[1, "max_logit_diff"] > 0
    again = servelab.compare_weight_quantizations("fp8", model=wide, requests=2, decode_tokens=5)
    assert again.loc[0, "max_logit_diff"] == d.loc[1, "max_logit_diff"]


def test_errors():
    with pytest.raises(servelab.ConfigError, match="tiny's q_proj has 64"):
        servelab.compare_weight_quantizations("awq")
    with pytest.raises(servelab.ConfigError, match=r"quantizations\[1\]: expected none, fp8, awq or awq_marlin"):
        servelab.compare_weight_quantizations(["fp8", "int4"])
    with pytest.raises(servelab.ConfigError, match="requests: expected 1 to 1024"):
        servelab.compare_weight_quantizations(requests=0)
    with pytest.raises(TypeError):
        servelab.compare_weight_quantizations(seed="7")
