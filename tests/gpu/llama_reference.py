"""A slow, exact, standard-library forward pass of transformers' LlamaForCausalLM (eager attention,
float64), for checking the engine against Hugging Face's conventions where torch is absent.

What it encodes, as transformers 5 defines it (models/llama/modeling_llama.py,
modeling_rope_utils.py):
- RMSNorm: weight * x / sqrt(mean(x^2) + eps);
- RoPE over the whole head: inv_freq[j] = theta^(-2j/head_dim) for j < head_dim/2, rescaled by
  rope_type "linear" (/ factor) or "llama3" (wavelengths longer than original_max / low_freq_factor
  divided by factor, shorter than original_max / high_freq_factor kept, the band between blended);
  angle = position * inv_freq[j], applied "rotate_half" style: element j pairs with j + head_dim/2
  (not interleaved pairs 2j, 2j+1);
- attention: query head h reads key/value head h // (heads / kv_heads), scores scaled by
  head_dim^-0.5, causal;
- MLP: down(silu(gate(x)) * up(x)); residual adds after attention and after the MLP;
- logits = lm_head(norm(x)), lm_head = embed_tokens when tie_word_embeddings.
Weights are nn.Linear's [out_features, in_features], row-major.

Only tiny models are practical (tests/gpu/test_gpu_scripts.py uses hidden 32, two layers).
"""
import math

import hf_checkpoint


def inv_freq(config):
    """The RoPE inverse frequencies of a config.json dict."""
    hd = hf_checkpoint.config_value(config, "head_dim")
    rope = hf_checkpoint.rope_parameters(config)
    base = [rope["rope_theta"] ** (-2.0 * j / hd) for j in range(hd // 2)]
    kind = rope["rope_type"]
    if kind == "default":
        return base
    if kind == "linear":
        return [f / rope["factor"] for f in base]
    if kind != "llama3":
        raise ValueError(f"llama_reference: rope_type {kind!r} is not modelled")
    factor, low, high = rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"]
    old = rope["original_max_position_embeddings"]
    out = []
    for f in base:
        wavelen = 2 * math.pi / f
        if wavelen > old / low:
            out.append(f / factor)
        elif wavelen < old / high:
            out.append(f)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append((1 - smooth) * f / factor + smooth * f)
    return out


def _matvec(w, rows, cols, x):
    return [sum(w[r * cols + c] * x[c] for c in range(cols)) for r in range(rows)]


def _rms_norm(x, weight, eps):
    scale = 1.0 / math.sqrt(sum(v * v for v in x) / len(x) + eps)
    return [w * v * scale for w, v in zip(weight, x)]


def _rope(vec, heads, hd, freqs, position):
    half = hd // 2
    out = list(vec)
    for h in range(heads):
        o = h * hd
        for j in range(half):
            c, s = math.cos(position * freqs[j]), math.sin(position * freqs[j])
            x1, x2 = vec[o + j], vec[o + j + half]
            out[o + j] = x1 * c - x2 * s
            out[o + j + half] = x2 * c + x1 * s
    return out


def forward(config, weights, ids):
    """Logits (one list of vocab floats per position) of token ids `ids` at positions 0..n-1.

    weights: {tensor name: flat list}, the names of hf_checkpoint.expected_tensors(config).
    """
    h, inter = config["hidden_size"], config["intermediate_size"]
    heads = config["num_attention_heads"]
    kv = hf_checkpoint.config_value(config, "num_key_value_heads")
    hd = hf_checkpoint.config_value(config, "head_dim")
    vocab, eps = config["vocab_size"], hf_checkpoint.config_value(config, "rms_norm_eps")
    freqs, group = inv_freq(config), heads // kv
    embed = weights["model.embed_tokens.weight"]
    xs = [embed[t * h:(t + 1) * h] for t in ids]
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w = lambda n: weights[p + n]  # noqa: E731
        normed = [_rms_norm(x, w("input_layernorm.weight"), eps) for x in xs]
        q = [_rope(_matvec(w("self_attn.q_proj.weight"), heads * hd, h, x), heads, hd, freqs, t)
             for t, x in enumerate(normed)]
        k = [_rope(_matvec(w("self_attn.k_proj.weight"), kv * hd, h, x), kv, hd, freqs, t)
             for t, x in enumerate(normed)]
        v = [_matvec(w("self_attn.v_proj.weight"), kv * hd, h, x) for x in normed]
        for t in range(len(xs)):
            attn = []
            for head in range(heads):
                g = head // group
                qh = q[t][head * hd:(head + 1) * hd]
                scores = [sum(a * b for a, b in zip(qh, k[s][g * hd:(g + 1) * hd])) / math.sqrt(hd)
                          for s in range(t + 1)]
                top = max(scores)
                e = [math.exp(sc - top) for sc in scores]
                z = sum(e)
                attn += [sum(e[s] / z * v[s][g * hd + d] for s in range(t + 1)) for d in range(hd)]
            o = _matvec(w("self_attn.o_proj.weight"), h, heads * hd, attn)
            xs[t] = [a + b for a, b in zip(xs[t], o)]
        for t in range(len(xs)):
            n = _rms_norm(xs[t], w("post_attention_layernorm.weight"), eps)
            gate = _matvec(w("mlp.gate_proj.weight"), inter, h, n)
            up = _matvec(w("mlp.up_proj.weight"), inter, h, n)
            act = [g / (1 + math.exp(-g)) * u for g, u in zip(gate, up)]
            down = _matvec(w("mlp.down_proj.weight"), h, inter, act)
            xs[t] = [a + b for a, b in zip(xs[t], down)]
    head = weights.get("lm_head.weight", embed)
    if hf_checkpoint.config_value(config, "tie_word_embeddings"):
        head = embed
    return [_matvec(head, vocab, h, _rms_norm(x, weights["model.norm.weight"], eps)) for x in xs]
