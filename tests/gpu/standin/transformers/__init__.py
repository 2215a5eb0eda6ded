"""Stand-in for the subset of transformers 5 that tests/gpu/hf_compare.py calls (../README.md).

LlamaConfig keeps its keyword arguments (rope_parameters, not rope_theta/rope_scaling, as 5.x
takes them); LlamaForCausalLM has the parameters of hf_checkpoint.expected_tensors, initialised
N(0, 0.02) as transformers does; save_pretrained writes config.json as 5.x does ("dtype",
"architectures", rope_theta inside "rope_parameters") and model.safetensors; from_pretrained
takes `dtype` and `attn_implementation`; calling the model runs llama_reference.forward.
"""
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import hf_checkpoint  # noqa: E402
import llama_reference  # noqa: E402

__version__ = "5.17.0"


class LlamaConfig:
    _ALLOWED = {"hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "head_dim", "vocab_size", "max_position_embeddings",
                "rms_norm_eps", "tie_word_embeddings", "hidden_act", "attention_bias",
                "mlp_bias", "rope_parameters", "bos_token_id", "eos_token_id", "pad_token_id",
                "dtype"}

    def __init__(self, **kwargs):
        unknown = set(kwargs) - self._ALLOWED
        if unknown:
            raise TypeError(f"stand-in LlamaConfig: unexpected arguments {sorted(unknown)}")
        self.values = dict(kwargs)
        rope = dict(self.values.get("rope_parameters") or {})
        rope.setdefault("rope_type", "default")
        rope.setdefault("rope_theta", 10000.0)
        self.values["rope_parameters"] = rope
        for k, v in self.values.items():
            setattr(self, k, v)

    def to_json(self, dtype):
        d = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
             "dtype": dtype.name, "transformers_version": __version__}
        d.update({k: v for k, v in self.values.items() if k != "dtype"})
        return d


class Output:
    def __init__(self, logits):
        self.logits = logits


# Test knobs (environment), so the tests can reach hf_compare.py's failure paths:
# STANDIN_RENAME=OLD:NEW saves tensor OLD under the name NEW (a changed checkpoint format);
# STANDIN_LOGIT_OFFSET=X adds X to token 0's logit everywhere (a reference that disagrees).
def _renamed(name):
    old, _, new = os.environ.get("STANDIN_RENAME", "").partition(":")
    return new if old and name == old else name


class LlamaForCausalLM:
    def __init__(self, config):
        self.config = config
        c = config.values
        self.params = {name: torch.Tensor([0.0] * math.prod(shape), shape).normal_(0.0, 0.02)
                       for name, shape in hf_checkpoint.expected_tensors(c)}
        self.dtype = torch.float32

    def named_parameters(self):
        return iter(self.params.items())

    def state_dict(self):
        return dict(self.params)

    def to(self, arg):
        if isinstance(arg, torch.dtype):
            self.params = {k: v.to(arg) for k, v in self.params.items()}
            self.dtype = arg
        elif arg != "cpu":
            raise RuntimeError(f"stand-in transformers has no device {arg!r}")
        return self

    def eval(self):
        return self

    def save_pretrained(self, path):
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, "config.json"), "w") as f:
            json.dump(self.config.to_json(self.dtype), f, indent=2)
        if self.dtype not in (torch.bfloat16, torch.float32):
            raise ValueError(f"stand-in save_pretrained: dtype {self.dtype}")
        hf_checkpoint.write_safetensors(
            os.path.join(path, "model.safetensors"),
            [(_renamed(n), list(t.shape), t.data) for n, t in self.params.items()],
            "BF16" if self.dtype is torch.bfloat16 else "F32", {"format": "pt"})

    @classmethod
    def from_pretrained(cls, path, dtype=None, attn_implementation=None):
        if attn_implementation not in (None, "eager", "sdpa"):
            raise ValueError(f"stand-in from_pretrained: attn_implementation "
                             f"{attn_implementation!r}")
        with open(os.path.join(path, "config.json")) as f:
            saved = json.load(f)
        config = LlamaConfig(**{k: v for k, v in saved.items() if k in LlamaConfig._ALLOWED})
        model = cls.__new__(cls)
        model.config, model.dtype = config, dtype or torch.float32
        file = os.path.join(path, "model.safetensors")
        header = hf_checkpoint.read_header(file)
        model.params = {n: torch.Tensor(hf_checkpoint.read_tensor(file, n, header),
                                        e["shape"], torch.bfloat16).to(model.dtype)
                        for n, e in header[0].items()}
        return model

    def __call__(self, input_ids=None, use_cache=None):
        ids = [int(i) for i in input_ids.data]
        weights = {n: t.data for n, t in self.params.items()}
        rows = llama_reference.forward(self.config.values, weights, ids)
        offset = float(os.environ.get("STANDIN_LOGIT_OFFSET", "0"))
        for r in rows:
            r[0] += offset
        return Output(torch.Tensor([x for r in rows for x in r],
                                   (1, len(ids), len(rows[0])), torch.float32))
