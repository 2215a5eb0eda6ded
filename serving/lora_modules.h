// LoRA adapters served under model names, as vLLM's `--lora-modules NAME=PATH` (a request's
// `model` field picks the adapter; GET /v1/models lists each with its base model as `parent`).
// ServeLab's adapters are generated from (seed, id) (engine/lora_weights.h), so a module is
// NAME=ID or NAME=ID:RANK. `engine serve --lora-modules` serves them; `sim bench` sends each
// request of a `workload.lora` under its adapter's name (docs/serving.md "LoRA adapters").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/lora_config.h"

namespace servelab {

struct LoraModule {
  std::string name;
  std::uint32_t id = 0;   // >= 1
  std::int32_t rank = 0;  // >= 1
};

// Parses "NAME=ID" (rank `default_rank`) or "NAME=ID:RANK". Throws ConfigError naming
// --lora-modules, the text and what was expected: an empty name or one with whitespace, an id
// that is not an integer in [1, 2^32 - 2], a rank that is not an integer in [1, kMaxLoraRank].
LoraModule parse_lora_module(std::string_view text, std::int32_t default_rank);

// Parses every entry and checks the list for a server: LoRA on (`lora.enabled()`, vLLM's
// --enable-lora), names distinct and none equal to `base_model`, ids distinct, ranks at most
// lora.max_lora_rank. Default rank: lora.max_lora_rank. Throws ConfigError naming the entry.
std::vector<LoraModule> parse_lora_modules(const std::vector<std::string>& texts,
                                           const LoraConfig& lora, const std::string& base_model);

// The model name a client sends for adapter `id`: its module's name, else "lora-ID".
std::string lora_model_name(const std::vector<LoraModule>& modules, std::uint32_t id);

}  // namespace servelab
