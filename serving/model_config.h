// ModelConfig: the shape of a Llama-family decoder, as the cost model and the engine need it.
//
// A model comes from one of two places:
//   - the catalogue: experiments/catalog/models/<name>.yaml, validated strictly (an unknown or
//     mistyped key is a ConfigError naming FILE:LINE:COL and the key);
//   - a Hugging Face config.json (a path to the file, or to a directory that holds one).
// Supported architectures: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM (dense,
// RMSNorm, RoPE, SwiGLU MLP, grouped-query attention; Qwen2 adds q/k/v biases).
//
// Parameter counting (see docs/cost-model.md): per layer q, k, v, o, gate, up, down matrices,
// optional q/k/v biases and two RMSNorm weight vectors; plus the embedding, the final norm and
// the LM head (absent when tied to the embedding).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace servelab {

class ConfigNode;

struct ModelConfig {
  std::string name;    // catalogue name, or the directory/file stem of a config.json
  std::string source;  // the file it was read from ("" when built in code)
  std::string hf_id;   // Hugging Face repository the shape was taken from (documentation only)
  std::int32_t num_layers = 0;
  std::int32_t hidden_size = 0;
  std::int32_t num_heads = 0;
  std::int32_t num_kv_heads = 0;  // divides num_heads (grouped-query attention)
  std::int32_t head_dim = 0;
  std::int32_t intermediate_size = 0;
  std::int32_t vocab_size = 0;
  std::string dtype = "bf16";  // "bf16", "fp16" or "fp32": weights, activations and KV cache
  std::int32_t dtype_bytes = 2;
  bool tie_word_embeddings = false;
  double rope_theta = 10000.0;
  std::int64_t max_position_embeddings = 4096;
  double rms_norm_eps = 1e-5;
  bool qkv_bias = false;  // q/k/v projections carry biases (Qwen2)
  // How the model is stored when served (vLLM's --kv-cache-dtype and --quantization; set by a
  // catalogue entry or an experiment's `model:` mapping, docs/experiments.md):
  //   kv_cache_dtype: "auto" (the model's dtype), "bf16", "fp16", "fp8" (= "fp8_e4m3"),
  //     "fp8_e4m3", "fp8_e5m2": the element type of K and V in the KV cache;
  //   quantization: "none", "awq" (int4 weights in groups of 128 input rows, an fp16 scale and
  //     an fp16 zero point per group and output column), "fp8" (one byte per weight and an
  //     fp32 scale per matrix): the seven projection matrices of every layer; the embedding,
  //     the LM head and the norms stay in dtype (as vLLM's AWQ and FP8 methods leave them).
  std::string kv_cache_dtype = "auto";
  std::string quantization = "none";
  // End-of-sequence token ids (config.json / catalogue `eos_token_id`: an id or a list); empty:
  // the model has none. The first is the request's EOS; the others end requests like stop
  // token ids unless ignore_eos (vLLM: generation_config's extra EOS ids).
  std::vector<std::int32_t> eos_token_ids;

  // Width of the query projection output (num_heads * head_dim) and of K or V (num_kv_heads *
  // head_dim).
  std::int64_t q_size() const { return std::int64_t{num_heads} * head_dim; }
  std::int64_t kv_size() const { return std::int64_t{num_kv_heads} * head_dim; }
  // Weights of the seven projection matrices of one layer (q, k, v, o, gate, up, down); biases
  // and norms excluded. These are what every token's GEMMs multiply by.
  std::int64_t linear_params_per_layer() const;
  // All parameters of one layer: the matrices, q/k/v biases when present, two RMSNorm vectors.
  std::int64_t params_per_layer() const;
  // Embedding table (vocab x hidden); the LM head has the same shape and is counted separately
  // unless tied.
  std::int64_t embedding_params() const { return std::int64_t{vocab_size} * hidden_size; }
  std::int64_t num_params() const;
  // Bytes of the seven projection matrices of one layer as stored under `quantization`
  // (linear_params_per_layer() * dtype_bytes when "none"; see docs/cost-model.md).
  std::int64_t linear_weight_bytes_per_layer() const;
  // Bytes of one layer's parameters: its matrices as stored, biases and norms in dtype.
  std::int64_t layer_weight_bytes() const {
    return (params_per_layer() - linear_params_per_layer()) * dtype_bytes +
           linear_weight_bytes_per_layer();
  }
  // All weights as stored: num_params() * dtype_bytes without quantization.
  std::int64_t weight_bytes() const {
    return num_params() * dtype_bytes -
           std::int64_t{num_layers} * (params_per_layer() * dtype_bytes - layer_weight_bytes());
  }
  // The KV cache's element type with "auto" and "fp8" resolved: "fp32", "bf16", "fp16",
  // "fp8_e4m3" or "fp8_e5m2"; and its size in bytes.
  std::string kv_dtype() const;
  std::int32_t kv_dtype_bytes() const;
  // K and V of one token across all layers, in the KV cache's element type.
  std::int64_t kv_bytes_per_token() const {
    return 2 * std::int64_t{num_layers} * kv_size() * kv_dtype_bytes();
  }

  // Throws ConfigError (naming `source` and the field) when a field is out of range or
  // inconsistent (num_kv_heads must divide num_heads, dtype_bytes must match dtype).
  void validate() const;
};

// Bytes per element of "bf16", "fp16" or "fp32"; ConfigError for anything else.
std::int32_t dtype_size(std::string_view dtype);

// The values model.kv_cache_dtype and model.quantization accept.
inline constexpr std::string_view kKvCacheDtypes[] = {"auto", "bf16",     "fp16",
                                                      "fp8",  "fp8_e4m3", "fp8_e5m2"};
inline constexpr std::string_view kQuantizations[] = {"none", "awq", "fp8"};
// AWQ's group: this many input rows share one scale and zero point.
inline constexpr std::int64_t kAwqGroupSize = 128;
// Bytes of one (in x out) projection matrix stored under `quantization` ("none": in * out *
// dtype_bytes; see ModelConfig::quantization).
std::int64_t quantized_matrix_bytes(std::int64_t in, std::int64_t out,
                                    std::string_view quantization, std::int64_t dtype_bytes);

// The shipped catalogue: <source dir>/experiments/catalog.
std::string default_catalog_dir();

// Sorted file stems of the .yaml files under catalog_dir/<kind> (kind = "models", "hardware").
// Empty when the directory does not exist.
std::vector<std::string> catalog_names(const std::string& catalog_dir, const std::string& kind);

// A model from a YAML mapping (a catalogue file, or a section of an experiment file). `name`
// defaults to `default_name`. Unknown keys, missing required keys and out-of-range values are
// ConfigErrors with the location.
ModelConfig parse_model(const ConfigNode& node, const std::string& default_name);

// Reads the optional keys kv_cache_dtype and quantization of `node` into `m` (a catalogue entry,
// or an experiment's `model:` mapping, whose values replace the catalogue's). A value outside
// kKvCacheDtypes or kQuantizations is a ConfigError naming FILE:LINE:COL and the choices.
void parse_model_storage(const ConfigNode& node, ModelConfig& m);

// A model from a Hugging Face config.json. Keys read: num_hidden_layers, hidden_size,
// num_attention_heads, num_key_value_heads (default num_attention_heads), head_dim (default
// hidden_size / num_attention_heads), intermediate_size, vocab_size, torch_dtype (or dtype;
// default bf16), tie_word_embeddings (default false), rope_theta (or rope_parameters.rope_theta;
// default 10000), max_position_embeddings (default 4096), rms_norm_eps (default 1e-6),
// attention_bias, eos_token_id (an id or a list), and architectures (Qwen2ForCausalLM implies
// qkv_bias). Other keys are ignored: a
// config.json has many that do not matter here. Errors are ConfigErrors "PATH: key 'K': ...".
ModelConfig parse_hf_config(const std::string& path);

// `name_or_path` is
//   - a path ending in .json, or an existing directory holding config.json: parse_hf_config;
//   - a path ending in .yaml/.yml: that file, parsed as a catalogue entry;
//   - otherwise a catalogue name: catalog_dir/models/<name>.yaml (case-sensitive). An unknown
//     name is a ConfigError listing the names the catalogue has.
ModelConfig load_model(const std::string& name_or_path, const std::string& catalog_dir);

}  // namespace servelab
