#include "serving/model_config.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "core/strings.h"
#include "serving/config_node.h"
#include "serving/home.h"
#include "serving/input_file.h"
#include "traces/json_duplicate_keys.h"

namespace servelab {

namespace fs = std::filesystem;

namespace {

// Limits a catalogue or config.json may state; generous, they only catch nonsense (a negative
// count, a misplaced exponent) early with a message rather than an overflow later.
constexpr std::int64_t kMaxLayers = 1024;
constexpr std::int64_t kMaxWidth = 1 << 20;  // hidden, intermediate, head counts, head_dim
constexpr std::int64_t kMaxVocab = 1 << 24;
constexpr std::int64_t kMaxExperts = 4096;

// --- Hugging Face config.json ------------------------------------------------------------

class JsonReader {
 public:
  JsonReader(const nlohmann::json& j, const std::string& path) : j_(j), path_(path) {}

  bool has(const char* key) const { return j_.contains(key) && !j_.at(key).is_null(); }

  [[noreturn]] void fail(const char* key, const std::string& what) const {
    throw ConfigError(path_ + ": key '" + key + "': " + what);
  }

  std::int64_t get_int(const char* key, std::int64_t min, std::int64_t max) const {
    if (!has(key)) fail(key, "is required but missing");
    return check_int(key, min, max);
  }
  std::int64_t get_int(const char* key, std::int64_t def, std::int64_t min,
                       std::int64_t max) const {
    return has(key) ? check_int(key, min, max) : def;
  }
  double get_double(const char* key, double def, double min, double max) const {
    if (!has(key)) return def;
    const nlohmann::json& v = j_.at(key);
    if (!v.is_number()) fail(key, "expected a number, got " + v.dump());
    const double d = v.get<double>();
    if (!(d >= min && d <= max)) {
      fail(key, "expected a number in [" + nlohmann::json(min).dump() + ", " +
                    nlohmann::json(max).dump() + "], got " + v.dump());
    }
    return d;
  }
  bool get_bool(const char* key, bool def) const {
    if (!has(key)) return def;
    const nlohmann::json& v = j_.at(key);
    if (!v.is_boolean()) fail(key, "expected true or false, got " + v.dump());
    return v.get<bool>();
  }

 private:
  std::int64_t check_int(const char* key, std::int64_t min, std::int64_t max) const {
    const nlohmann::json& v = j_.at(key);
    if (!v.is_number_integer() || v.get<std::int64_t>() < min || v.get<std::int64_t>() > max) {
      fail(key, "expected an integer in [" + std::to_string(min) + ", " + std::to_string(max) +
                    "], got " + v.dump());
    }
    return v.get<std::int64_t>();
  }

  const nlohmann::json& j_;
  const std::string& path_;
};

std::string dtype_from_torch(const JsonReader& r, const nlohmann::json& j, const char* key) {
  const nlohmann::json& v = j.at(key);
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (s == "bfloat16") return "bf16";
    if (s == "float16" || s == "half") return "fp16";
    if (s == "float32" || s == "float") return "fp32";
  }
  r.fail(key, "expected one of: bfloat16, float16, float32, got " + v.dump());
}

// The architectures parse_hf_config reads (the first entry of config.json's "architectures").
constexpr std::string_view kArchitectures[] = {
    "LlamaForCausalLM",   "MistralForCausalLM",  "Qwen2ForCausalLM",   "Qwen3ForCausalLM",
    "MixtralForCausalLM", "Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM"};

// The experts of a mixture-of-experts config.json (parse_hf_config's contract).
void read_hf_experts(const JsonReader& r, const nlohmann::json& j, const std::string& arch,
                     ModelConfig& m) {
  const char* count = arch == "MixtralForCausalLM" ? "num_local_experts" : "num_experts";
  m.num_experts = static_cast<std::int32_t>(r.get_int(count, 1, kMaxExperts));
  m.experts_per_token =
      static_cast<std::int32_t>(r.get_int("num_experts_per_tok", 1, m.num_experts));
  if (r.has("moe_intermediate_size")) {
    m.intermediate_size =
        static_cast<std::int32_t>(r.get_int("moe_intermediate_size", 1, kMaxWidth));
  }
  m.shared_expert_intermediate_size =
      static_cast<std::int32_t>(r.get_int("shared_expert_intermediate_size", 0, 0, kMaxWidth));
  if (r.get_int("decoder_sparse_step", 1, 0, kMaxLayers) != 1) {
    r.fail("decoder_sparse_step", "only 1 is supported (every layer a mixture of experts), got " +
                                      j.at("decoder_sparse_step").dump());
  }
  if (r.has("mlp_only_layers")) {
    const nlohmann::json& dense = j.at("mlp_only_layers");
    if (!dense.is_array() || !dense.empty()) {
      r.fail("mlp_only_layers",
             "dense layers among the experts' are not supported, got " + dense.dump());
    }
  }
}

ModelConfig load_catalogue_file(const std::string& path) {
  const ConfigNode node = ConfigNode::load_file(path);
  ModelConfig m = parse_model(node, fs::path(path).stem().string());
  m.source = path;
  return m;
}

}  // namespace

namespace {

// q and o are h x q_size; k and v are h x kv_size.
std::int64_t attention_linear_params(const ModelConfig& m) {
  return 2 * std::int64_t{m.hidden_size} * (m.q_size() + m.kv_size());
}

// The router (h x experts) and the shared expert (gate, up, down of its width, and its h x 1
// gate); 0 in a dense model.
std::int64_t moe_dense_params(const ModelConfig& m) {
  if (!m.is_moe()) return 0;
  const std::int64_t h = m.hidden_size;
  const std::int64_t shared = m.shared_expert_intermediate_size;
  return h * m.num_experts + (shared > 0 ? 3 * h * shared + h : 0);
}

}  // namespace

std::int64_t ModelConfig::linear_params_per_layer() const {
  const std::int64_t mlp = 3 * std::int64_t{hidden_size} * intermediate_size;
  const std::int64_t experts = is_moe() ? num_experts : 1;
  return attention_linear_params(*this) + experts * mlp + moe_dense_params(*this);
}

std::int64_t ModelConfig::active_linear_params_per_layer() const {
  if (!is_moe()) return linear_params_per_layer();
  return attention_linear_params(*this) +
         experts_per_token * 3 * std::int64_t{hidden_size} * intermediate_size +
         moe_dense_params(*this);
}

std::int64_t ModelConfig::mlp_width_per_token() const {
  if (!is_moe()) return intermediate_size;
  return std::int64_t{experts_per_token} * intermediate_size + shared_expert_intermediate_size;
}

std::int64_t ModelConfig::params_per_layer() const {
  const std::int64_t bias = qkv_bias ? q_size() + 2 * kv_size() : 0;
  const std::int64_t norms = 2 * std::int64_t{hidden_size} + (qk_norm ? 2 * head_dim : 0);
  return linear_params_per_layer() + bias + norms;
}

std::int64_t ModelConfig::num_params() const {
  const std::int64_t lm_head = tie_word_embeddings ? 0 : embedding_params();
  return num_layers * params_per_layer() + hidden_size /* final norm */ + embedding_params() +
         lm_head;
}

std::int64_t ModelConfig::active_params() const {
  return num_params() - num_layers * (linear_params_per_layer() - active_linear_params_per_layer());
}

std::string awq_alignment_problem(const ModelConfig& m) {
  const std::pair<const char*, std::int64_t> inputs[] = {
      {"hidden_size (the input of q/k/v and gate/up)", m.hidden_size},
      {"num_heads x head_dim (the input of o_proj)",
       static_cast<std::int64_t>(m.num_heads) * m.head_dim},
      {"intermediate_size (the input of down_proj)", m.intermediate_size}};
  for (const auto& [what, width] : inputs) {
    if (width > 0 && width % kAwqGroupSize != 0) {
      return what + std::string(" is ") + std::to_string(width) +
             ", not a multiple of AWQ's group of " + std::to_string(kAwqGroupSize) + " input rows";
    }
  }
  return {};
}

std::string awq_problem(const ModelConfig& m) {
  if (!is_awq(m.quantization)) return {};
  const std::string model = m.name.empty() ? std::string("the model") : "model " + m.name;
  if (m.is_moe()) {
    return m.quantization + " is not modelled for a mixture of experts (" + model +
           " has num_experts " + std::to_string(m.num_experts) + "); none or fp8";
  }
  if (const std::string problem = awq_alignment_problem(m); !problem.empty()) {
    return m.quantization + " needs every projection's input width to be a multiple of " +
           std::to_string(kAwqGroupSize) + " (as vLLM's AWQ layers do): " + model + "'s " + problem;
  }
  return {};
}

std::int64_t quantized_matrix_bytes(std::int64_t in, std::int64_t out,
                                    std::string_view quantization, std::int64_t dtype_bytes) {
  if (is_awq(quantization)) {
    // Two int4 weights per byte; per group of kAwqGroupSize input rows and per output column an
    // fp16 scale and an int4 zero point (vLLM's AWQ layers: qweight and qzeros pack eight int4
    // values per int32, scales are fp16).
    const std::int64_t groups = (in + kAwqGroupSize - 1) / kAwqGroupSize;
    return (in * out + 1) / 2 + groups * out * 2 + groups * ((out + 1) / 2);
  }
  if (quantization == "fp8") return in * out + 4;  // one byte each, an fp32 per-tensor scale
  return in * out * dtype_bytes;
}

std::int64_t ModelConfig::expert_weight_bytes() const {
  if (!is_moe()) return 0;
  const std::int64_t h = hidden_size, inter = intermediate_size, d = dtype_bytes;
  return 2 * quantized_matrix_bytes(h, inter, quantization, d) +
         quantized_matrix_bytes(inter, h, quantization, d);
}

std::int64_t ModelConfig::linear_weight_bytes_per_layer() const {
  const std::int64_t h = hidden_size, q = q_size(), kv = kv_size(), inter = intermediate_size;
  const std::int64_t d = dtype_bytes;
  // q, k, v (h -> q, kv, kv), o (q -> h).
  const std::int64_t attention = quantized_matrix_bytes(h, q, quantization, d) +
                                 2 * quantized_matrix_bytes(h, kv, quantization, d) +
                                 quantized_matrix_bytes(q, h, quantization, d);
  if (!is_moe()) {
    // gate and up (h -> inter), down (inter -> h).
    return attention + 2 * quantized_matrix_bytes(h, inter, quantization, d) +
           quantized_matrix_bytes(inter, h, quantization, d);
  }
  // The experts as stored; the router and the shared expert's gate in dtype (vLLM leaves the
  // router unquantized), the shared expert's matrices as stored.
  const std::int64_t shared = shared_expert_intermediate_size;
  std::int64_t bytes = attention + num_experts * expert_weight_bytes() + h * num_experts * d;
  if (shared > 0) {
    bytes += 2 * quantized_matrix_bytes(h, shared, quantization, d) +
             quantized_matrix_bytes(shared, h, quantization, d) + h * d;
  }
  return bytes;
}

std::string ModelConfig::kv_dtype() const {
  if (kv_cache_dtype == "auto") return dtype;
  if (kv_cache_dtype == "fp8") return "fp8_e4m3";
  return kv_cache_dtype;
}

std::int32_t ModelConfig::kv_dtype_bytes() const {
  const std::string k = kv_dtype();
  return k == "fp8_e4m3" || k == "fp8_e5m2" ? 1 : dtype_size(k);
}

void ModelConfig::validate() const {
  const std::string where = (source.empty() ? "model '" + name + "'" : source) + ": key '";
  auto check = [&](bool ok, const char* key, const std::string& what) {
    if (!ok) throw ConfigError(where + key + "': " + what);
  };
  check(num_layers >= 1 && num_layers <= kMaxLayers, "num_layers", "out of range");
  check(hidden_size >= 1 && hidden_size <= kMaxWidth, "hidden_size", "out of range");
  check(num_heads >= 1 && num_heads <= kMaxWidth, "num_heads", "out of range");
  check(num_kv_heads >= 1 && num_kv_heads <= num_heads && num_heads % num_kv_heads == 0,
        "num_kv_heads",
        "must divide num_heads (" + std::to_string(num_heads) + "), got " +
            std::to_string(num_kv_heads));
  check(head_dim >= 1 && head_dim <= kMaxWidth, "head_dim", "out of range");
  check(intermediate_size >= 1 && intermediate_size <= kMaxWidth, "intermediate_size",
        "out of range");
  check(vocab_size >= 1 && vocab_size <= kMaxVocab, "vocab_size", "out of range");
  check(dtype_size(dtype) == dtype_bytes, "dtype",
        "dtype_bytes " + std::to_string(dtype_bytes) + " does not match " + dtype);
  check(max_position_embeddings >= 1, "max_position_embeddings", "must be positive");
  // Each width is bounded, but their products need not be: the parameter count (and from it the
  // weight bytes and a step's FLOPs) and the KV bytes per token (times the blocks of a cache) are
  // 64-bit counts. 1e15 parameters and 1e8 KV bytes a token are thousands of times today's
  // largest models.
  {
    const auto hidden = static_cast<long double>(hidden_size);
    const long double q = static_cast<long double>(num_heads) * head_dim;
    const long double kv = static_cast<long double>(num_kv_heads) * head_dim;
    const long double mlp = 3.0L * hidden * intermediate_size * std::max(1, num_experts) +
                            3.0L * hidden * std::max(0, shared_expert_intermediate_size);
    const long double params = num_layers * (hidden * (2 * q + 2 * kv) + mlp) +
                               2.0L * hidden * static_cast<long double>(vocab_size);
    check(params <= 1e15L, "num_layers",
          format_text("with these widths the model has %.3Lg parameters, more than the 1e15 "
                      "ServeLab counts in 64 bits",
                      params));
    const long double kv_fp32 = 2.0L * num_layers * kv * 4;  // the widest KV dtype
    check(kv_fp32 <= 1e8L, "num_kv_heads",
          format_text("with num_layers %d and head_dim %d the KV cache holds %.3Lg bytes a token "
                      "in fp32, more than the 1e8 ServeLab counts in 64 bits",
                      num_layers, head_dim, kv_fp32));
  }
  check(std::find(std::begin(kKvCacheDtypes), std::end(kKvCacheDtypes), kv_cache_dtype) !=
            std::end(kKvCacheDtypes),
        "kv_cache_dtype",
        "expected one of auto, bf16, fp16, fp8, fp8_e4m3, fp8_e5m2, got '" + kv_cache_dtype + "'");
  check(std::find(std::begin(kQuantizations), std::end(kQuantizations), quantization) !=
            std::end(kQuantizations),
        "quantization", "expected one of none, awq, awq_marlin, fp8, got '" + quantization + "'");
  const std::string awq = awq_problem(*this);
  check(awq.empty(), "quantization", awq);
  if (!is_moe()) {
    check(experts_per_token == 0, "experts_per_token", "needs num_experts (a mixture of experts)");
    check(shared_expert_intermediate_size == 0, "shared_expert_intermediate_size",
          "needs num_experts (a mixture of experts)");
    check(router_skew == 0, "router_skew", "needs num_experts (a mixture of experts)");
    return;
  }
  check(num_experts <= kMaxExperts, "num_experts", "out of range");
  check(experts_per_token >= 1 && experts_per_token <= num_experts, "experts_per_token",
        "must be in [1, num_experts (" + std::to_string(num_experts) + ")], got " +
            std::to_string(experts_per_token));
  check(shared_expert_intermediate_size >= 0 && shared_expert_intermediate_size <= kMaxWidth,
        "shared_expert_intermediate_size", "out of range");
  check(router_skew >= 0 && router_skew <= kMaxRouterSkew, "router_skew",
        "must be in [0, 4], got " + std::to_string(router_skew));
}

std::int32_t dtype_size(std::string_view dtype) {
  if (dtype == "bf16" || dtype == "fp16") return 2;
  if (dtype == "fp32") return 4;
  throw ConfigError("unknown dtype '" + std::string(dtype) + "' (expected bf16, fp16 or fp32)");
}

std::string default_catalog_dir() { return home_path("experiments/catalog"); }

std::vector<std::string> catalog_names(const std::string& catalog_dir, const std::string& kind) {
  std::vector<std::string> names;
  std::error_code ec;
  const fs::path dir = fs::path(catalog_dir) / kind;
  if (!fs::is_directory(dir, ec)) return names;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.is_regular_file(ec) && entry.path().extension() == ".yaml") {
      names.push_back(entry.path().stem().string());
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

ModelConfig parse_model(const ConfigNode& node, const std::string& default_name) {
  node.allow_keys({"name",
                   "hf_id",
                   "num_layers",
                   "hidden_size",
                   "num_heads",
                   "num_kv_heads",
                   "head_dim",
                   "intermediate_size",
                   "vocab_size",
                   "dtype",
                   "tie_word_embeddings",
                   "rope_theta",
                   "max_position_embeddings",
                   "rms_norm_eps",
                   "qkv_bias",
                   "qk_norm",
                   "num_experts",
                   "experts_per_token",
                   "shared_expert_intermediate_size",
                   "kv_cache_dtype",
                   "quantization",
                   "eos_token_id"});
  ModelConfig m;
  m.name = node.get_string("name", default_name);
  m.source = node.file();
  m.hf_id = node.get_string("hf_id", "");
  m.num_layers = static_cast<std::int32_t>(node.get_int("num_layers", 1, kMaxLayers));
  m.hidden_size = static_cast<std::int32_t>(node.get_int("hidden_size", 1, kMaxWidth));
  m.num_heads = static_cast<std::int32_t>(node.get_int("num_heads", 1, kMaxWidth));
  m.num_kv_heads =
      static_cast<std::int32_t>(node.get_int("num_kv_heads", m.num_heads, 1, m.num_heads));
  if (m.num_heads % m.num_kv_heads != 0) {
    node.at("num_kv_heads")
        .fail_message("must divide num_heads (" + std::to_string(m.num_heads) + ")");
  }
  // head_dim is required rather than defaulted: a catalogue entry should say it outright.
  m.head_dim = static_cast<std::int32_t>(node.get_int("head_dim", 1, kMaxWidth));
  m.intermediate_size = static_cast<std::int32_t>(node.get_int("intermediate_size", 1, kMaxWidth));
  m.vocab_size = static_cast<std::int32_t>(node.get_int("vocab_size", 1, kMaxVocab));
  m.dtype = node.has("dtype") ? node.at("dtype").as_choice({"bf16", "fp16", "fp32"}) : "bf16";
  m.dtype_bytes = dtype_size(m.dtype);
  m.tie_word_embeddings = node.get_bool("tie_word_embeddings", false);
  m.rope_theta = node.get_double("rope_theta", 10000.0, 1.0, 1e12);
  m.max_position_embeddings =
      node.get_int("max_position_embeddings", 4096, 1, std::int64_t{1} << 40);
  m.rms_norm_eps = node.get_double("rms_norm_eps", 1e-5, 0.0, 1.0);
  m.qkv_bias = node.get_bool("qkv_bias", false);
  m.qk_norm = node.get_bool("qk_norm", false);
  if (node.has("num_experts")) {
    m.num_experts = static_cast<std::int32_t>(node.get_int("num_experts", 1, kMaxExperts));
    m.experts_per_token =
        static_cast<std::int32_t>(node.get_int("experts_per_token", 1, m.num_experts));
    m.shared_expert_intermediate_size =
        static_cast<std::int32_t>(node.get_int("shared_expert_intermediate_size", 0, 0, kMaxWidth));
  } else {
    for (const char* key : {"experts_per_token", "shared_expert_intermediate_size"}) {
      if (node.has(key)) node.at(key).fail_message("needs num_experts (a mixture of experts)");
    }
  }
  parse_model_storage(node, m);
  if (node.has("eos_token_id")) {
    const ConfigNode e = node.at("eos_token_id");
    const std::vector<ConfigNode> ids = e.is_sequence() ? e.elements() : std::vector<ConfigNode>{e};
    for (const ConfigNode& id : ids) {
      m.eos_token_ids.push_back(static_cast<std::int32_t>(id.as_int(0, m.vocab_size - 1)));
    }
  }
  return m;
}

void parse_model_storage(const ConfigNode& node, ModelConfig& m) {
  if (node.has("kv_cache_dtype")) {
    m.kv_cache_dtype = node.at("kv_cache_dtype")
                           .as_choice({"auto", "bf16", "fp16", "fp8", "fp8_e4m3", "fp8_e5m2"});
  }
  if (node.has("quantization")) {
    m.quantization = node.at("quantization").as_choice({"none", "awq", "awq_marlin", "fp8"});
    if (const std::string problem = awq_problem(m); !problem.empty()) {
      node.at("quantization").fail_message(problem);
    }
  }
}

namespace {

// A quantized checkpoint's `quantization_config`, as vLLM reads it: AWQ int4 in groups of 128 is
// served by vLLM's default kernel for it, awq_marlin; fp8 as fp8. Any other method or shape is
// refused rather than priced as the unquantized model (an experiment's model.quantization may
// still choose the kernel: `awq` forces the legacy one, as vLLM's --quantization awq does).
void read_hf_quantization(const JsonReader& r, const nlohmann::json& j, ModelConfig& m) {
  if (!r.has("quantization_config")) return;
  const nlohmann::json& q = j.at("quantization_config");
  if (!q.is_object() || !q.contains("quant_method") || !q.at("quant_method").is_string()) {
    r.fail("quantization_config", "expected an object with a quant_method, got " + q.dump());
  }
  const std::string method = q.at("quant_method").get<std::string>();
  if (method == "fp8") {
    m.quantization = "fp8";
    return;
  }
  if (method != "awq") {
    r.fail("quantization_config",
           "quant_method '" + method + "' is not modelled (ServeLab prices awq and fp8 weights)");
  }
  const auto number = [&](const char* key) -> std::int64_t {
    const nlohmann::json& v = q.contains(key) ? q.at(key) : nlohmann::json();
    return v.is_number_integer() ? v.get<std::int64_t>() : -1;
  };
  if (number("bits") != 4 || number("group_size") != kAwqGroupSize) {
    r.fail("quantization_config",
           "AWQ with bits " + (q.contains("bits") ? q.at("bits").dump() : std::string("?")) +
               " and group_size " +
               (q.contains("group_size") ? q.at("group_size").dump() : std::string("?")) +
               " is not modelled (ServeLab prices int4 in groups of " +
               std::to_string(kAwqGroupSize) + ")");
  }
  m.quantization = "awq_marlin";
}

}  // namespace

ModelConfig parse_hf_config(const std::string& path) {
  const std::string text = read_input_file(path, "a model's config.json file");
  if (const std::optional<std::string> problem = json_text_problem(text)) {
    throw ConfigError(path + ": " + *problem);
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(path + ": malformed JSON: " + e.what());
  }
  if (!j.is_object()) throw ConfigError(path + ": expected a JSON object at the top level");
  const JsonReader r(j, path);

  std::string arch = "LlamaForCausalLM";
  if (r.has("architectures")) {
    const nlohmann::json& archs = j.at("architectures");
    if (!archs.is_array() || archs.empty() || !archs.at(0).is_string()) {
      r.fail("architectures", "expected a list of names, got " + archs.dump());
    }
    arch = archs.at(0).get<std::string>();
    if (std::find(std::begin(kArchitectures), std::end(kArchitectures), arch) ==
        std::end(kArchitectures)) {
      r.fail("architectures", "unsupported architecture " + archs.at(0).dump() + " (supported: " +
                                  join(std::vector<std::string>(std::begin(kArchitectures),
                                                                std::end(kArchitectures))) +
                                  ")");
    }
  }
  const bool qwen2 = arch == "Qwen2ForCausalLM" || arch == "Qwen2MoeForCausalLM";
  const bool qwen3 = arch == "Qwen3ForCausalLM" || arch == "Qwen3MoeForCausalLM";
  const bool moe = arch == "MixtralForCausalLM" || arch == "Qwen2MoeForCausalLM" ||
                   arch == "Qwen3MoeForCausalLM";

  ModelConfig m;
  const fs::path p(path);
  // ".../Llama-3-8B/config.json" is named after its directory; "foo.json" after its stem.
  m.name = p.stem() == "config" && p.has_parent_path() ? p.parent_path().filename().string()
                                                       : p.stem().string();
  if (m.name.empty()) m.name = p.stem().string();
  m.source = path;
  m.num_layers = static_cast<std::int32_t>(r.get_int("num_hidden_layers", 1, kMaxLayers));
  m.hidden_size = static_cast<std::int32_t>(r.get_int("hidden_size", 1, kMaxWidth));
  m.num_heads = static_cast<std::int32_t>(r.get_int("num_attention_heads", 1, kMaxWidth));
  m.num_kv_heads =
      static_cast<std::int32_t>(r.get_int("num_key_value_heads", m.num_heads, 1, m.num_heads));
  if (m.num_heads % m.num_kv_heads != 0) {
    r.fail("num_key_value_heads", "must divide num_attention_heads (" +
                                      std::to_string(m.num_heads) + "), got " +
                                      std::to_string(m.num_kv_heads));
  }
  if (!r.has("head_dim") && m.hidden_size % m.num_heads != 0) {
    r.fail("head_dim", "is missing and hidden_size is not a multiple of num_attention_heads");
  }
  m.head_dim =
      static_cast<std::int32_t>(r.get_int("head_dim", m.hidden_size / m.num_heads, 1, kMaxWidth));
  // A Qwen mixture of experts gives its experts' width as moe_intermediate_size (its
  // intermediate_size is that of dense layers it does not have); read_hf_experts reads it.
  if (!(moe && r.has("moe_intermediate_size"))) {
    m.intermediate_size = static_cast<std::int32_t>(r.get_int("intermediate_size", 1, kMaxWidth));
  }
  m.vocab_size = static_cast<std::int32_t>(r.get_int("vocab_size", 1, kMaxVocab));
  // Newer transformers write "dtype" where older ones wrote "torch_dtype".
  if (r.has("torch_dtype")) {
    m.dtype = dtype_from_torch(r, j, "torch_dtype");
  } else if (r.has("dtype")) {
    m.dtype = dtype_from_torch(r, j, "dtype");
  }
  m.dtype_bytes = dtype_size(m.dtype);
  read_hf_quantization(r, j, m);
  m.tie_word_embeddings = r.get_bool("tie_word_embeddings", false);
  m.rope_theta = r.get_double("rope_theta", 10000.0, 1.0, 1e12);
  // transformers 5 moved rope_theta into a "rope_parameters" object.
  if (!r.has("rope_theta") && r.has("rope_parameters") && j.at("rope_parameters").is_object()) {
    const JsonReader rope(j.at("rope_parameters"), path);
    m.rope_theta = rope.get_double("rope_theta", 10000.0, 1.0, 1e12);
  }
  m.max_position_embeddings = r.get_int("max_position_embeddings", 4096, 1, std::int64_t{1} << 40);
  m.rms_norm_eps = r.get_double("rms_norm_eps", 1e-6, 0.0, 1.0);
  m.qkv_bias = qwen2 || r.get_bool("attention_bias", false);
  m.qk_norm = qwen3;
  if (moe) read_hf_experts(r, j, arch, m);
  if (r.has("eos_token_id")) {
    const nlohmann::json& e = j.at("eos_token_id");
    const nlohmann::json ids = e.is_array() ? e : nlohmann::json::array({e});
    for (const nlohmann::json& id : ids) {
      if (!id.is_number_integer() || id.get<std::int64_t>() < 0 ||
          id.get<std::int64_t>() >= m.vocab_size) {
        r.fail("eos_token_id",
               "expected a token id or a list of token ids in [0, vocab_size), got " + e.dump());
      }
      m.eos_token_ids.push_back(static_cast<std::int32_t>(id.get<std::int64_t>()));
    }
  }
  return m;
}

namespace {

ModelConfig validated(ModelConfig m) {
  m.validate();
  return m;
}

}  // namespace

ModelConfig load_model(const std::string& name_or_path, const std::string& catalog_dir) {
  std::error_code ec;
  if (ends_with(name_or_path, ".json")) return validated(parse_hf_config(name_or_path));
  if (fs::is_directory(name_or_path, ec) &&
      fs::is_regular_file(fs::path(name_or_path) / "config.json", ec)) {
    return validated(parse_hf_config((fs::path(name_or_path) / "config.json").string()));
  }
  if (ends_with(name_or_path, ".yaml") || ends_with(name_or_path, ".yml")) {
    return validated(load_catalogue_file(name_or_path));
  }
  const fs::path file = fs::path(catalog_dir) / "models" / (name_or_path + ".yaml");
  // The name must match a file exactly, case included, whatever the file system's own
  // sensitivity: compare against the listing rather than trusting exists().
  const std::vector<std::string> names = catalog_names(catalog_dir, "models");
  if (name_or_path.find('/') != std::string::npos ||
      std::find(names.begin(), names.end(), name_or_path) == names.end()) {
    throw ConfigError("unknown model '" + name_or_path + "': the catalogue " +
                      (fs::path(catalog_dir) / "models").string() + " has " +
                      (names.empty() ? std::string("no models") : join(names)) +
                      "; or give the path of a Hugging Face config.json");
  }
  return validated(load_catalogue_file(file.string()));
}

}  // namespace servelab
