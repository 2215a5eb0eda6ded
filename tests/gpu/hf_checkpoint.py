"""A Hugging Face Llama checkpoint directory as the engine reads it, with the standard library only.

- safetensors (huggingface/safetensors, format as of 0.8): an unsigned little-endian u64 N, N
  bytes of JSON header (the writer pads it with spaces to a multiple of 8), then the data; the
  header maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end)} relative to the
  data section, plus an optional "__metadata__" of strings. `read_header`, `read_tensor` (F32 and
  BF16 as Python floats) and `write_safetensors` (F32 or BF16, rounded to nearest even).
- `expected_tensors(config)`: the names and shapes engine/llama_weights.cc loads, which are the
  module names of transformers' LlamaForCausalLM (model.embed_tokens, model.layers.N.self_attn.
  {q,k,v,o}_proj, model.layers.N.mlp.{gate,up,down}_proj, the two layer norms, model.norm,
  lm_head unless tie_word_embeddings), each Linear stored as [out_features, in_features].
- `check_checkpoint(dir)`: what a directory written by save_pretrained must hold for the engine
  (config.json, model.safetensors or an index, every expected tensor with its shape); returns the
  problems as sentences, so hf_compare.py stops with them before running anything.

config.json as transformers 5 writes it: rope_theta inside "rope_parameters" (4.x: top level),
"dtype" (4.x: "torch_dtype"), and keys equal to the class defaults may be left out (to_diff_dict);
`config_value` applies LlamaConfig's defaults.
"""
import json
import math
import os
import struct

# LlamaConfig's defaults (transformers 5: configuration_llama.py), for keys a diff-saved
# config.json may omit.
LLAMA_DEFAULTS = {"rms_norm_eps": 1e-6, "tie_word_embeddings": False, "attention_bias": False,
                  "mlp_bias": False, "hidden_act": "silu", "rope_theta": 10000.0}


def config_value(config, key):
    """A LlamaConfig field from a config.json dict, with transformers' defaults applied."""
    if key == "num_key_value_heads":
        return config.get(key) or config["num_attention_heads"]
    if key == "head_dim":
        return config.get(key) or config["hidden_size"] // config["num_attention_heads"]
    if key == "rope_theta":
        rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
        return rope.get("rope_theta", config.get("rope_theta", LLAMA_DEFAULTS["rope_theta"]))
    if key in config:
        return config[key]
    return LLAMA_DEFAULTS[key]


def rope_parameters(config):
    """The RoPE dict of a config.json (5.x "rope_parameters", 4.x "rope_scaling"), rope_type set."""
    rope = dict(config.get("rope_parameters") or config.get("rope_scaling") or {})
    rope.setdefault("rope_type", rope.get("type", "default"))
    rope.setdefault("rope_theta", config_value(config, "rope_theta"))
    return rope


def expected_tensors(config):
    """[(name, shape)] in the engine's order (engine/llama_weights.cc for_each_tensor)."""
    h, inter = config["hidden_size"], config["intermediate_size"]
    heads, kv = config["num_attention_heads"], config_value(config, "num_key_value_heads")
    hd, vocab = config_value(config, "head_dim"), config["vocab_size"]
    out = [("model.embed_tokens.weight", [vocab, h])]
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out += [(p + "self_attn.q_proj.weight", [heads * hd, h]),
                (p + "self_attn.k_proj.weight", [kv * hd, h]),
                (p + "self_attn.v_proj.weight", [kv * hd, h])]
        if config_value(config, "attention_bias"):
            out += [(p + "self_attn.q_proj.bias", [heads * hd]),
                    (p + "self_attn.k_proj.bias", [kv * hd]),
                    (p + "self_attn.v_proj.bias", [kv * hd])]
        out += [(p + "self_attn.o_proj.weight", [h, heads * hd]),
                (p + "mlp.gate_proj.weight", [inter, h]),
                (p + "mlp.up_proj.weight", [inter, h]),
                (p + "mlp.down_proj.weight", [h, inter]),
                (p + "input_layernorm.weight", [h]),
                (p + "post_attention_layernorm.weight", [h])]
    out.append(("model.norm.weight", [h]))
    if not config_value(config, "tie_word_embeddings"):
        out.append(("lm_head.weight", [vocab, h]))
    return out


DTYPE_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "I16": 2, "U16": 2,
               "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}


class CheckpointError(ValueError):
    """A malformed file: the message names the file and, where one is involved, the tensor."""


def read_header(path):
    """(header dict without __metadata__, metadata dict, data section offset)."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise CheckpointError(f"{path}: shorter than the 8-byte header length")
        (n,) = struct.unpack("<Q", raw)
        if n > size - 8:
            raise CheckpointError(f"{path}: header length {n} beyond the file ({size} bytes)")
        try:
            header = json.loads(f.read(n).decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise CheckpointError(f"{path}: malformed JSON header: {e}") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: the header is not a JSON object")
    metadata = header.pop("__metadata__", {}) or {}
    data_size = size - 8 - n
    for name, e in header.items():
        if e.get("dtype") not in DTYPE_BYTES:
            raise CheckpointError(f"{path}: tensor '{name}': unknown dtype {e.get('dtype')!r}")
        begin, end = e["data_offsets"]
        count = math.prod(e["shape"])
        if not 0 <= begin <= end <= data_size or end - begin != count * DTYPE_BYTES[e["dtype"]]:
            raise CheckpointError(f"{path}: tensor '{name}': data_offsets {e['data_offsets']} do "
                                  f"not fit shape {e['shape']} x {e['dtype']} in {data_size} bytes")
    return header, metadata, 8 + n


def bf16_bits(x):
    """The bfloat16 bits of a Python float, rounded to nearest even (NaN kept a NaN)."""
    (bits,) = struct.unpack("<I", struct.pack("<f", x))
    if (bits & 0x7FFFFFFF) > 0x7F800000:
        return (bits >> 16) | 0x40
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF


def bf16_value(bits):
    return struct.unpack("<f", struct.pack("<I", (bits & 0xFFFF) << 16))[0]


def read_tensor(path, name, header=None):
    """The values of an F32 or BF16 tensor as a flat list of floats (row-major)."""
    if header is None:
        header = read_header(path)
    entries, _, start = header
    if name not in entries:
        raise CheckpointError(f"{path}: no tensor '{name}'")
    e = entries[name]
    begin, end = e["data_offsets"]
    with open(path, "rb") as f:
        f.seek(start + begin)
        raw = f.read(end - begin)
    n = math.prod(e["shape"])
    if e["dtype"] == "F32":
        return list(struct.unpack(f"<{n}f", raw))
    if e["dtype"] == "BF16":
        return [bf16_value(b) for b in struct.unpack(f"<{n}H", raw)]
    raise CheckpointError(f"{path}: tensor '{name}': dtype {e['dtype']} cannot be read here")


def write_safetensors(path, tensors, dtype="BF16", metadata=None):
    """tensors: [(name, shape, flat list of floats)]; writes F32 or BF16, header padded to 8."""
    if dtype not in ("F32", "BF16"):
        raise ValueError(f"write_safetensors: dtype must be F32 or BF16, got {dtype}")
    header, blobs, offset = {}, [], 0
    for name, shape, values in tensors:
        if len(values) != math.prod(shape):
            raise ValueError(f"write_safetensors: '{name}' has {len(values)} values for {shape}")
        if dtype == "F32":
            blob = struct.pack(f"<{len(values)}f", *values)
        else:
            blob = struct.pack(f"<{len(values)}H", *(bf16_bits(v) for v in values))
        header[name] = {"dtype": dtype, "shape": list(shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    if metadata:
        header["__metadata__"] = dict(metadata)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def checkpoint_files(model_dir):
    """{tensor name: file} of a directory: the index's weight_map, else model.safetensors."""
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.isfile(index):
        with open(index) as f:
            weight_map = json.load(f).get("weight_map", {})
        return {name: os.path.join(model_dir, file) for name, file in weight_map.items()}
    single = os.path.join(model_dir, "model.safetensors")
    if os.path.isfile(single):
        return {name: single for name in read_header(single)[0]}
    raise CheckpointError(f"{model_dir}: neither model.safetensors nor "
                          f"model.safetensors.index.json")


def check_checkpoint(model_dir):
    """Problems (sentences) that would keep the engine from loading `model_dir`; [] when none."""
    problems = []
    try:
        with open(os.path.join(model_dir, "config.json")) as f:
            config = json.load(f)
    except (OSError, ValueError) as e:
        return [f"{model_dir}/config.json: {e}"]
    arch = config.get("architectures") or ["LlamaForCausalLM"]
    if arch[0] not in ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM"):
        problems.append(f"config.json: architectures {arch} is not one the engine runs")
    if config_value(config, "hidden_act") != "silu":
        problems.append(f"config.json: hidden_act {config['hidden_act']!r}, the engine has silu")
    if config_value(config, "mlp_bias"):
        problems.append("config.json: mlp_bias true, the engine has no MLP biases")
    rope = rope_parameters(config)
    if rope["rope_type"] not in ("default", "linear", "llama3"):
        problems.append(f"config.json: rope_type {rope['rope_type']!r} (engine: default, "
                        f"linear, llama3)")
    try:
        files = checkpoint_files(model_dir)
        headers = {}
        for name, shape in expected_tensors(config):
            if name not in files:
                problems.append(f"tensor '{name}' is missing")
                continue
            path = files[name]
            if path not in headers:
                headers[path] = read_header(path)[0]
            entry = headers[path].get(name)
            if entry is None:
                problems.append(f"{os.path.basename(path)}: tensor '{name}' is missing")
            elif entry["shape"] != shape:
                problems.append(f"tensor '{name}' has shape {entry['shape']}, expected {shape}")
            elif entry["dtype"] not in ("F32", "F16", "BF16"):
                problems.append(f"tensor '{name}' is {entry['dtype']} (engine: F32, F16, BF16)")
    except (OSError, CheckpointError) as e:
        problems.append(str(e))
    return problems
