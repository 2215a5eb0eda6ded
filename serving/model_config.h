// ModelConfig: the shape of a Llama-family decoder, as the cost model and the engine need it.
//
// A model comes from one of two places:
//   - the catalogue: experiments/catalog/models/<name>.yaml, validated strictly (an unknown or
//     mistyped key is a ConfigError naming FILE:LINE:COL and the key);
//   - a Hugging Face config.json (a path to the file, or to a directory that holds one).
// Supported architectures: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM (dense,
// RMSNorm, RoPE, SwiGLU MLP, grouped-query attention; Qwen2 adds q/k/v biases), Qwen3ForCausalLM
// (a per-head RMSNorm on q and k, no biases), and the mixtures of experts MixtralForCausalLM,
// Qwen2MoeForCausalLM and Qwen3MoeForCausalLM (simulated only: the engine refuses them).
//
// Parameter counting (see docs/cost-model.md): per layer q, k, v, o matrices, optional q/k/v
// biases, optional q/k norm weights (head_dim each), two RMSNorm weight vectors, and the MLP:
// dense, gate, up and down (hidden x intermediate each); a mixture of experts, num_experts such
// triples of width intermediate_size, the router (hidden x num_experts) and, when
// shared_expert_intermediate_size > 0, one shared expert of that width with its gate (hidden x
// 1); plus the embedding, the final norm and the LM head (absent when tied to the embedding).
// Every layer of a mixture of experts is sparse (configs with dense layers are refused).
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
  // The SwiGLU MLP's width; in a mixture of experts, each routed expert's (config.json's
  // moe_intermediate_size where it has one, Mixtral's intermediate_size).
  std::int32_t intermediate_size = 0;
  std::int32_t vocab_size = 0;
  // Mixture of experts (num_experts 0: a dense MLP): each token is routed to experts_per_token
  // of the num_experts experts (top-k of the router's logits), and passes through the shared
  // expert too when shared_expert_intermediate_size > 0 (Qwen2-MoE).
  std::int32_t num_experts = 0;
  std::int32_t experts_per_token = 0;
  std::int32_t shared_expert_intermediate_size = 0;
  // How unevenly the router spreads tokens over the experts: the Zipf exponent of their
  // popularity (0: uniform; serving/expert_routing.h). Set by an experiment's
  // `model.router_skew`; in [0, kMaxRouterSkew], and 0 for a dense model.
  double router_skew = 0;
  static constexpr double kMaxRouterSkew = 4;
  bool qk_norm = false;        // RMSNorm over each head of q and k before RoPE (Qwen3)
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
  //   quantization: "none", "awq" and "awq_marlin" (int4 weights in groups of 128 input rows,
  //     an fp16 scale and an int4 zero point per group and output column; the same bytes,
  //     multiplied by vLLM's legacy `awq` kernel or by `awq_marlin`, the kernel vLLM picks for
  //     an AWQ checkpoint on the GPUs of the catalogue), "fp8" (one byte per weight and an
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
  bool is_moe() const { return num_experts > 0; }
  // Weights of one layer's projection matrices: q, k, v, o and the MLP's (dense: gate, up, down;
  // a mixture of experts: every expert's, the router and the shared expert with its gate);
  // biases and norms excluded.
  std::int64_t linear_params_per_layer() const;
  // Of those, the ones one token multiplies by: all of them in a dense model; in a mixture of
  // experts q, k, v, o, the router, experts_per_token experts and the shared expert.
  std::int64_t active_linear_params_per_layer() const;
  // Parameters one token uses, all layers (num_params() for a dense model).
  std::int64_t active_params() const;
  // The MLP's intermediate values of one token: intermediate_size, or in a mixture of experts
  // experts_per_token * intermediate_size + shared_expert_intermediate_size.
  std::int64_t mlp_width_per_token() const;
  // One routed expert's gate, up and down matrices (3 * hidden * intermediate_size weights) as
  // stored under `quantization`; 0 in a dense model.
  std::int64_t expert_weight_bytes() const;
  // All parameters of one layer: the matrices, q/k/v biases when present, two RMSNorm vectors.
  std::int64_t params_per_layer() const;
  // Embedding table (vocab x hidden); the LM head has the same shape and is counted separately
  // unless tied.
  std::int64_t embedding_params() const { return std::int64_t{vocab_size} * hidden_size; }
  std::int64_t num_params() const;
  // Bytes of one layer's projection matrices as stored under `quantization`
  // (linear_params_per_layer() * dtype_bytes when "none"; see docs/cost-model.md). The router
  // and the shared expert's gate stay in dtype.
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
  // inconsistent (num_kv_heads must divide num_heads, dtype_bytes must match dtype,
  // experts_per_token in [1, num_experts] in a mixture of experts and 0 otherwise, no shared
  // expert without experts, no AWQ for a mixture of experts).
  void validate() const;
};

// Bytes per element of "bf16", "fp16" or "fp32"; ConfigError for anything else.
std::int32_t dtype_size(std::string_view dtype);

// The values model.kv_cache_dtype and model.quantization accept.
inline constexpr std::string_view kKvCacheDtypes[] = {"auto", "bf16",     "fp16",
                                                      "fp8",  "fp8_e4m3", "fp8_e5m2"};
inline constexpr std::string_view kQuantizations[] = {"none", "awq", "awq_marlin", "fp8"};
// AWQ's int4 storage, under either kernel.
inline bool is_awq(std::string_view quantization) {
  return quantization == "awq" || quantization == "awq_marlin";
}
// AWQ's group: this many input rows share one scale and zero point.
inline constexpr std::int64_t kAwqGroupSize = 128;
// Why `m`'s projections cannot be stored as AWQ (an input width that is not a multiple of
// kAwqGroupSize, vLLM's and the engine's requirement; under tensor parallelism, of the shard's
// widths), or "" when they can.
std::string awq_alignment_problem(const ModelConfig& m);
// Why `m` cannot be stored as its quantization says when that is AWQ (a mixture of experts, or
// awq_alignment_problem), as a sentence naming the method and the model; "" when it can (and for
// every other quantization). Each caller prefixes where the choice was made.
std::string awq_problem(const ModelConfig& m);
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
// attention_bias, eos_token_id (an id or a list), and architectures (Qwen2ForCausalLM and
// Qwen2MoeForCausalLM imply qkv_bias, Qwen3ForCausalLM and Qwen3MoeForCausalLM qk_norm). A
// mixture of experts adds num_local_experts (Mixtral) or num_experts (Qwen), num_experts_per_tok,
// moe_intermediate_size (Qwen; the experts' width), shared_expert_intermediate_size (Qwen2-MoE),
// and refuses decoder_sparse_step other than 1 or a non-empty mlp_only_layers (dense layers
// among sparse ones). Other keys are ignored: a
// config.json has many that do not matter here. Errors are ConfigErrors "PATH: key 'K': ...".
ModelConfig parse_hf_config(const std::string& path);

// `name_or_path` is
//   - a path ending in .json, or an existing directory holding config.json: parse_hf_config;
//   - a path ending in .yaml/.yml: that file, parsed as a catalogue entry;
//   - otherwise a catalogue name: catalog_dir/models/<name>.yaml (case-sensitive). An unknown
//     name is a ConfigError listing the names the catalogue has.
// The model is validate()d: widths whose products 64-bit counts cannot hold are refused here.
ModelConfig load_model(const std::string& name_or_path, const std::string& catalog_dir);

}  // namespace servelab
