// LoraConfig: vLLM's LoRA serving limits (vllm/config/lora.py: max_loras, max_lora_rank), the
// `serving.lora` section of an experiment (docs/policies.md "LoRA adapters").
//
// A request may run under an adapter (RequestSpec::lora_id > 0). With LoRA on, the scheduler
// admits at most max_loras distinct adapters into the running batch: a waiting request whose
// adapter is not among the running requests' adapters while those already number max_loras is
// skipped and stays waiting, in its place, while later requests may still be admitted (vLLM v1's
// scheduler skips it the same way). Off (max_loras 0, the default) a request with an adapter is
// rejected at arrival, as vLLM refuses a LoRA request when LoRA is not enabled.
#pragma once

#include <cstdint>

namespace servelab {

// vLLM's largest max_lora_rank (its allowed ranks end at 512).
inline constexpr std::int32_t kMaxLoraRank = 512;

struct LoraConfig {
  std::int32_t max_loras = 0;       // adapters per batch (vLLM's default is 1 once enabled); 0: off
  std::int32_t max_lora_rank = 16;  // the largest adapter rank; vLLM pads every adapter to it

  bool enabled() const { return max_loras > 0; }
};

}  // namespace servelab
