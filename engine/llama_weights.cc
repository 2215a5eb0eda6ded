#include "engine/llama_weights.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string_view>
#include <system_error>
#include <thread>
#include <unordered_set>

#include "core/rng.h"
#include "engine/safetensors.h"
#include "serving/config_node.h"

namespace servelab {
namespace {

constexpr double kPi = 3.14159265358979323846;

// Vectors are tensors of one dimension (cols == 0 in for_each_tensor).
template <typename X>
void resize_to(X& x, std::int64_t rows, std::int64_t cols) {
  if constexpr (X::ColsAtCompileTime == 1) {
    x.resize(rows);
  } else {
    x.resize(rows, cols);
  }
}

std::string layer_prefix(int i) { return "model.layers." + std::to_string(i) + "."; }

// Calls f(name, matrix-or-vector data pointer, rows, cols) for every tensor of `w` (cols = 0 for
// vectors), in tensor_names() order. One walk serves load, save and random init, so the three
// cannot disagree on names or shapes.
template <typename W, typename F>
void for_each_tensor(W& w, F&& f) {
  const ModelConfig& m = w.config.model;
  auto mat = [&](const std::string& name, auto& x, std::int64_t rows, std::int64_t cols) {
    f(name, x, rows, cols);
  };
  mat("model.embed_tokens.weight", w.embed_tokens, m.vocab_size, m.hidden_size);
  for (int i = 0; i < m.num_layers; ++i) {
    auto& l = w.layers[i];
    const std::string p = layer_prefix(i);
    mat(p + "self_attn.q_proj.weight", l.q_proj, m.q_size(), m.hidden_size);
    mat(p + "self_attn.k_proj.weight", l.k_proj, m.kv_size(), m.hidden_size);
    mat(p + "self_attn.v_proj.weight", l.v_proj, m.kv_size(), m.hidden_size);
    if (m.qkv_bias) {
      mat(p + "self_attn.q_proj.bias", l.q_bias, m.q_size(), 0);
      mat(p + "self_attn.k_proj.bias", l.k_bias, m.kv_size(), 0);
      mat(p + "self_attn.v_proj.bias", l.v_bias, m.kv_size(), 0);
    }
    mat(p + "self_attn.o_proj.weight", l.o_proj, m.hidden_size, m.q_size());
    mat(p + "mlp.gate_proj.weight", l.gate_proj, m.intermediate_size, m.hidden_size);
    mat(p + "mlp.up_proj.weight", l.up_proj, m.intermediate_size, m.hidden_size);
    mat(p + "mlp.down_proj.weight", l.down_proj, m.hidden_size, m.intermediate_size);
    mat(p + "input_layernorm.weight", l.input_layernorm, m.hidden_size, 0);
    mat(p + "post_attention_layernorm.weight", l.post_attention_layernorm, m.hidden_size, 0);
  }
  mat("model.norm.weight", w.norm, m.hidden_size, 0);
  if (!m.tie_word_embeddings) mat("lm_head.weight", w.lm_head, m.vocab_size, m.hidden_size);
}

double json_number(const nlohmann::json& j, const std::string& key, const std::string& path) {
  if (!j.contains(key) || !j[key].is_number()) {
    throw ConfigError(path + ": key 'rope_scaling." + key + "': expected a number");
  }
  return j[key].get<double>();
}

nlohmann::json read_config_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ConfigError(path + ": cannot open");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(path + ": malformed JSON: " + e.what());
  }
  // The engine computes SiLU: another activation would run another model without a word.
  if (j.is_object() && j.contains("hidden_act") && j["hidden_act"] != "silu") {
    throw ConfigError(path + ": key 'hidden_act': the engine computes silu, got " +
                      j["hidden_act"].dump());
  }
  return j;
}

// The attention window a config.json declares (Mistral v0.1's sliding_window; Qwen2's when
// use_sliding_window is true), or 0 for full attention (null, absent, or switched off).
std::int64_t parse_sliding_window(const nlohmann::json& j, const std::string& path) {
  if (!j.is_object() || !j.contains("sliding_window") || j["sliding_window"].is_null()) return 0;
  if (j.contains("use_sliding_window")) {
    const nlohmann::json& use = j["use_sliding_window"];
    if (!use.is_boolean()) {
      throw ConfigError(path + ": key 'use_sliding_window': expected true or false, got " +
                        use.dump());
    }
    if (!use.get<bool>()) return 0;
  }
  const nlohmann::json& w = j["sliding_window"];
  if (!w.is_number_integer() || w.get<std::int64_t>() < 1) {
    throw ConfigError(
        path + ": key 'sliding_window': expected a positive token count or null, got " + w.dump());
  }
  return w.get<std::int64_t>();
}

std::optional<RopeScaling> parse_rope_scaling(const nlohmann::json& j, const std::string& path) {
  nlohmann::json s;
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    if (!j.is_object() || !j.contains(key) || j[key].is_null()) continue;
    if (!j[key].is_object()) {
      throw ConfigError(path + ": key '" + key + "': expected an object (or null), got " +
                        j[key].dump());
    }
    // newer transformers fold the scaling into rope_parameters
    if (s.is_null()) s = j[key];
  }
  if (s.is_null()) return std::nullopt;
  std::string type;
  for (const char* key : {"rope_type", "type"}) {  // "type": older configs
    if (!s.contains(key) || !type.empty()) continue;
    if (!s[key].is_string()) {
      throw ConfigError(path + ": key 'rope_scaling." + key + "': expected a string, got " +
                        s[key].dump());
    }
    type = s[key].get<std::string>();
  }
  if (type.empty()) {
    // A factor without a type would otherwise be dropped (transformers refuses it too).
    if (s.contains("factor")) {
      throw ConfigError(path + ": key 'rope_scaling': a factor without rope_type");
    }
    return std::nullopt;
  }
  if (type == "default") return std::nullopt;
  RopeScaling r;
  r.factor = json_number(s, "factor", path);
  if (type == "linear") {
    r.type = RopeScaling::Type::kLinear;
  } else if (type == "llama3") {
    r.type = RopeScaling::Type::kLlama3;
    r.low_freq_factor = json_number(s, "low_freq_factor", path);
    r.high_freq_factor = json_number(s, "high_freq_factor", path);
    r.original_max_position_embeddings = json_number(s, "original_max_position_embeddings", path);
    if (!(r.low_freq_factor > 0) || !(r.original_max_position_embeddings > 0)) {
      throw ConfigError(path +
                        ": key 'rope_scaling': low_freq_factor and "
                        "original_max_position_embeddings must be positive");
    }
    if (r.high_freq_factor <= r.low_freq_factor) {
      throw ConfigError(path +
                        ": key 'rope_scaling': high_freq_factor must exceed low_freq_factor");
    }
  } else {
    throw ConfigError(path + ": key 'rope_scaling.rope_type': '" + type +
                      "' is not supported (default, linear, llama3)");
  }
  if (!(r.factor > 0)) throw ConfigError(path + ": key 'rope_scaling.factor': must be positive");
  return r;
}

}  // namespace

LlamaConfig load_llama_config(const std::string& name_or_path, const std::string& catalog_dir) {
  namespace fs = std::filesystem;
  LlamaConfig c;
  c.model = load_model(name_or_path, catalog_dir);
  const ModelConfig& m = c.model;
  const std::string who = "model " + m.name + (m.source.empty() ? "" : " (" + m.source + ")");
  if (m.is_moe()) {
    throw ConfigError(who + " is a mixture of experts (num_experts " +
                      std::to_string(m.num_experts) + ", " + std::to_string(m.experts_per_token) +
                      " per token): the engine runs dense Llama-family models only; `sim run` "
                      "simulates it");
  }
  if (m.qk_norm) {
    throw ConfigError(who +
                      " normalises q and k per head (Qwen3's qk_norm): the engine runs "
                      "Llama, Mistral and Qwen2 models only; `sim run` simulates it");
  }
  std::error_code ec;
  std::string json_path;
  if (name_or_path.ends_with(".json")) {
    json_path = name_or_path;
  } else if (fs::is_directory(name_or_path, ec) &&
             fs::is_regular_file(fs::path(name_or_path) / "config.json", ec)) {
    json_path = (fs::path(name_or_path) / "config.json").string();
  }
  if (!json_path.empty()) {
    const nlohmann::json j = read_config_json(json_path);
    c.rope_scaling = parse_rope_scaling(j, json_path);
    c.sliding_window = parse_sliding_window(j, json_path);
  }
  // Rotate-half RoPE pairs element j with j + head_dim / 2: an odd width leaves one unrotated
  // (transformers cannot run such a model either).
  if (m.head_dim % 2 != 0) {
    throw ConfigError(who + ": head_dim " + std::to_string(m.head_dim) +
                      " is odd; rotary position embeddings need an even head_dim");
  }
  return c;
}

std::vector<double> rope_inv_freq(const LlamaConfig& config) {
  const int d = config.model.head_dim;
  std::vector<double> inv(d / 2);
  for (int j = 0; j < d / 2; ++j) inv[j] = std::pow(config.model.rope_theta, -2.0 * j / d);
  if (!config.rope_scaling) return inv;
  const RopeScaling& s = *config.rope_scaling;
  if (s.type == RopeScaling::Type::kLinear) {
    for (double& f : inv) f /= s.factor;
    return inv;
  }
  // Long wavelengths are slowed by `factor`, short ones kept, and the band between is blended.
  const double low_wavelen = s.original_max_position_embeddings / s.low_freq_factor;
  const double high_wavelen = s.original_max_position_embeddings / s.high_freq_factor;
  for (double& f : inv) {
    const double wavelen = 2 * kPi / f;
    if (wavelen > low_wavelen) {
      f /= s.factor;
    } else if (wavelen >= high_wavelen) {
      const double smooth = (s.original_max_position_embeddings / wavelen - s.low_freq_factor) /
                            (s.high_freq_factor - s.low_freq_factor);
      f = (1 - smooth) * f / s.factor + smooth * f;
    }
  }
  return inv;
}

std::vector<std::string> tensor_names(const ModelConfig& config) {
  LlamaWeights w;
  w.config.model = config;
  w.layers.resize(config.num_layers);
  std::vector<std::string> names;
  for_each_tensor(w, [&](const std::string& name, auto&, std::int64_t, std::int64_t) {
    names.push_back(name);
  });
  return names;
}

kernels::CounterNormal random_tensor_params(const ModelConfig& config, std::uint64_t seed,
                                            const std::string& name, std::int64_t cols) {
  const std::uint64_t key = mix64(mix64(seed ^ name_hash("llama_weights")) ^ name_hash(name));
  double mean = 0;
  double scale;
  if (cols == 0) {
    mean = name.ends_with("norm.weight") ? 1.0 : 0.0;
    scale = 0.1;
  } else {
    scale = name == "model.embed_tokens.weight" ? 1.0 : 1.0 / std::sqrt(double(cols));
    if (name == "lm_head.weight") scale = 4.0 / std::sqrt(double(config.hidden_size));
  }
  return kernels::counter_normal_params(key, mean, scale);
}

LlamaWeights LlamaWeights::random(const LlamaConfig& config, std::uint64_t seed, int num_threads) {
  config.model.validate();
  LlamaWeights w;
  w.config = config;
  w.layers.resize(config.model.num_layers);
  struct Tensor {
    float* data;
    std::int64_t size;
    kernels::CounterNormal params;
  };
  std::vector<Tensor> tensors;
  for_each_tensor(w, [&](const std::string& name, auto& x, std::int64_t rows, std::int64_t cols) {
    resize_to(x, rows, cols);
    tensors.push_back({x.data(), x.size(), random_tensor_params(config.model, seed, name, cols)});
  });
  // Work items of at most kChunk elements, taken from a shared counter: every element is a pure
  // function of (tensor, index), so which thread writes it does not matter. Pages are first
  // touched by the filling threads, so allocation cost is parallel too.
  constexpr std::int64_t kChunk = std::int64_t{1} << 20;
  struct Chunk {
    std::size_t tensor;
    std::int64_t begin, end;
  };
  std::vector<Chunk> chunks;
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    for (std::int64_t b = 0; b < tensors[t].size; b += kChunk) {
      chunks.push_back({t, b, std::min(tensors[t].size, b + kChunk)});
    }
  }
  std::atomic<std::size_t> next{0};
  auto work = [&] {
    for (std::size_t c = next++; c < chunks.size(); c = next++) {
      const Tensor& t = tensors[chunks[c].tensor];
      for (std::int64_t i = chunks[c].begin; i < chunks[c].end; ++i) {
        t.data[i] = kernels::counter_normal(t.params, static_cast<std::uint64_t>(i));
      }
    }
  };
  const int hw = static_cast<int>(std::max(1U, std::thread::hardware_concurrency()));
  const std::size_t n = std::min<std::size_t>(num_threads > 0 ? num_threads : hw, chunks.size());
  std::vector<std::thread> pool;
  try {
    for (std::size_t i = 1; i < n; ++i) pool.emplace_back(work);
  } catch (const std::system_error&) {
    // No more threads: the ones running (and this one) take the remaining chunks.
  }
  work();
  for (std::thread& t : pool) t.join();
  return w;
}

LlamaWeights LlamaWeights::load(const LlamaConfig& config, const std::string& path) {
  config.model.validate();
  const TensorStore store = TensorStore::open(path);
  LlamaWeights w;
  w.config = config;
  w.layers.resize(config.model.num_layers);
  // Tensors the model does not name are left alone (a checkpoint may carry extras), but a bias
  // the forward pass would need is refused: Llama's attention_bias also biases o_proj, and
  // mlp_bias the MLP; dropping them would change the outputs without a word. So is a layer past
  // the model's num_layers: the checkpoint is of a deeper model, and running the first layers
  // only would be another model's outputs.
  std::unordered_set<std::string> known;
  for (const std::string& n : tensor_names(config.model)) known.insert(n);
  constexpr std::string_view kLayers = "model.layers.";
  for (const std::string& n : store.names()) {
    if (!n.starts_with(kLayers) || known.count(n)) continue;
    if (n.ends_with(".bias")) {
      throw ConfigError("checkpoint " + store.file_of(n) + ": tensor '" + n +
                        "' is a bias the engine does not apply (it applies q/k/v biases only); "
                        "the outputs would differ from the model's");
    }
    const std::string_view rest = std::string_view(n).substr(kLayers.size());
    std::int64_t layer = -1;
    const auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), layer);
    if (ec == std::errc() && end != rest.data() + rest.size() && *end == '.' &&
        layer >= config.model.num_layers) {
      throw ConfigError("checkpoint " + store.file_of(n) + ": tensor '" + n + "' is of layer " +
                        std::to_string(layer) + ", but model " + config.model.name + " has " +
                        std::to_string(config.model.num_layers) +
                        " layers (num_layers): the checkpoint is of a deeper model");
    }
  }
  for_each_tensor(w, [&](const std::string& name, auto& x, std::int64_t rows, std::int64_t cols) {
    const SafetensorsEntry& e = store.entry(name);  // throws naming the tensor when missing
    const std::vector<std::int64_t> want =
        cols == 0 ? std::vector<std::int64_t>{rows} : std::vector<std::int64_t>{rows, cols};
    if (e.shape != want) {
      auto str = [](const std::vector<std::int64_t>& s) {
        std::string out = "[";
        for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
        return out + "]";
      };
      throw ConfigError("checkpoint " + store.file_of(name) + ": tensor '" + name + "' has shape " +
                        str(e.shape) + " but the config needs " + str(want));
    }
    const Tensor t = store.load(name);
    resize_to(x, rows, cols);
    std::copy(t.values.begin(), t.values.end(), x.data());
  });
  return w;
}

void LlamaWeights::save(const std::string& path, const std::string& dtype) const {
  std::vector<TensorToWrite> out;
  for_each_tensor(*this, [&](const std::string& name, const auto& x, std::int64_t rows,
                             std::int64_t cols) {
    TensorToWrite t;
    t.name = name;
    t.dtype = dtype;
    t.shape = cols == 0 ? std::vector<std::int64_t>{rows} : std::vector<std::int64_t>{rows, cols};
    t.values.assign(x.data(), x.data() + x.size());
    out.push_back(std::move(t));
  });
  write_safetensors(path, out, {{"format", "pt"}});
}

}  // namespace servelab
