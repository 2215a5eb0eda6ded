// The weights of a Llama-family decoder (Llama 2/3, Mistral, Qwen2) in fp32, and the engine-side
// model config (ModelConfig plus the RoPE scaling that ModelConfig does not carry).
//
// Matrices keep the Hugging Face nn.Linear layout [out_features, in_features], row-major, so a
// projection of a token batch X [tokens, in] is X * W^T, and a checkpoint tensor is copied as is.
// Weights come from one of two places:
//   - LlamaWeights::random(config, seed): deterministic from the seed, scaled so activations
//     stay O(1) and logits have a spread of a few units (random_tensor_params). Each element is
//     a pure function of (seed, tensor name, element index) (kernels/counter_normal.h), so the
//     tensors fill in parallel and the CUDA executor generates the same weights on the GPU;
//   - LlamaWeights::load(config, path): a safetensors file, directory or sharded index with the
//     Hugging Face names (tensor_names() lists them), shapes checked against the config.
#pragma once

#include <Eigen/Core>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kernels/counter_normal.h"
#include "serving/model_config.h"

namespace servelab {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Llama 3.x "llama3" RoPE frequency scaling (transformers _compute_llama3_parameters), or the
// older "linear" scaling (every inverse frequency divided by factor).
struct RopeScaling {
  enum class Type { kLlama3, kLinear };
  Type type = Type::kLlama3;
  double factor = 8.0;
  double low_freq_factor = 1.0;                      // llama3 only
  double high_freq_factor = 4.0;                     // llama3 only
  double original_max_position_embeddings = 8192.0;  // llama3 only
};

struct LlamaConfig {
  ModelConfig model;
  std::optional<RopeScaling> rope_scaling;  // none: plain RoPE with model.rope_theta
  // config.json's sliding_window (0: full attention). The engine computes full attention, which
  // equals windowed attention for sequences of at most this many tokens: the engine driver
  // refuses a longer serving.max_model_len.
  std::int64_t sliding_window = 0;
};

// load_model(name_or_path, catalog_dir) plus, when name_or_path is a Hugging Face config.json
// (or a directory holding one), its rope_scaling (or rope_parameters) entry. Throws ConfigError
// naming the file for a rope type other than default/llama3/linear or a missing scaling key,
// and naming the model for one the engine cannot run: a mixture of experts or Qwen3's q/k norm
// (ModelConfig::is_moe, qk_norm; the simulator prices both) or with an odd head_dim; reads
// sliding_window (refusing a malformed one) for the engine driver's length check.
LlamaConfig load_llama_config(const std::string& name_or_path, const std::string& catalog_dir);

// The RoPE inverse frequencies, head_dim / 2 of them: theta^(-2j/d), then scaled. Pair (j,
// j + d/2) of a head rotates by position * inv_freq[j] (rotate-half convention).
std::vector<double> rope_inv_freq(const LlamaConfig& config);

struct LlamaLayerWeights {
  RowMatrix q_proj, k_proj, v_proj,
      o_proj;  // [q_size, hidden], [kv_size, hidden] x2, [hidden, q_size]
  Eigen::VectorXf q_bias, k_bias, v_bias;                     // empty unless config.qkv_bias
  RowMatrix gate_proj, up_proj;                               // [intermediate, hidden]
  RowMatrix down_proj;                                        // [hidden, intermediate]
  Eigen::VectorXf input_layernorm, post_attention_layernorm;  // [hidden]
};

struct LlamaWeights {
  LlamaConfig config;
  RowMatrix embed_tokens;  // [vocab, hidden]
  std::vector<LlamaLayerWeights> layers;
  Eigen::VectorXf norm;  // [hidden]
  RowMatrix lm_head;     // [vocab, hidden]; empty when config.model.tie_word_embeddings

  // The output projection: lm_head, or embed_tokens when the embeddings are tied.
  const RowMatrix& head() const {
    return config.model.tie_word_embeddings ? embed_tokens : lm_head;
  }

  // Deterministic random weights: tensor `name` ([rows, cols]) holds counter_normal(
  // random_tensor_params(config, seed, name, cols), i) at flat row-major index i. Filled by
  // num_threads threads (0: std::thread::hardware_concurrency()); the result does not depend on
  // the thread count. Throws ConfigError when config.model.validate() does.
  static LlamaWeights random(const LlamaConfig& config, std::uint64_t seed, int num_threads = 0);
  // Loads every tensor of tensor_names(config) from `path` (see TensorStore::open). Throws
  // std::runtime_error naming the tensor when one is missing or its shape disagrees with the
  // config (and naming the file for malformed checkpoints). Extra tensors are ignored.
  static LlamaWeights load(const LlamaConfig& config, const std::string& path);
  // Writes these weights with the Hugging Face names to one safetensors file in `dtype`
  // ("F32", "BF16" or "F16"). Throws std::runtime_error on I/O errors.
  void save(const std::string& path, const std::string& dtype = "F32") const;
};

// The Hugging Face tensor names a model with this config needs, in a fixed order.
std::vector<std::string> tensor_names(const ModelConfig& config);

// How LlamaWeights::random draws tensor `name` of `config` (cols: its columns, 0 for a vector)
// under `seed`: the stream key mixes the seed with the name, and the mean and scale follow these
// rules. Embeddings N(0, 1) so the residual stream starts at unit RMS; a projection N(0, 1/in)
// keeps its output's variance equal to its input's; norm weights and biases N(1, 0.01) and
// N(0, 0.01) so they matter without dominating; the LM head N(0, 16/hidden) on a unit-RMS input
// gives logits of standard deviation ~4, so the top two logits are rarely within 1e-3.
kernels::CounterNormal random_tensor_params(const ModelConfig& config, std::uint64_t seed,
                                            const std::string& name, std::int64_t cols);

}  // namespace servelab
