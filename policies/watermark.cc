#include "policies/watermark.h"

#include <stdexcept>

#include "core/scheduler.h"

namespace servelab {

ParamInfo watermark_param() {
  return {"watermark",
          ParamType::kDouble,
          0.01,
          0.0,
          0.99,
          {},
          "fraction of the KV blocks an admission must leave free"};
}

void check_watermark(double watermark) {
  if (!(watermark >= 0.0 && watermark < 1.0)) {
    throw std::invalid_argument("admission watermark must be in [0, 1)");
  }
}

std::string watermark_rejection(const Request& r, const Scheduler& s, double watermark) {
  const std::int64_t block_size = s.config().block_size;
  const std::int64_t total =
      static_cast<std::int64_t>(r.spec.prompt_len) + r.spec.max_output_tokens;
  const std::int64_t blocks = (total - 1 + block_size - 1) / block_size;
  const std::int32_t reserve = s.watermark_blocks(watermark);
  const std::int32_t usable = s.kv().pool().num_usable_blocks();
  if (blocks + reserve <= usable) return {};
  return "needs " + std::to_string(blocks) + " KV blocks plus a watermark of " +
         std::to_string(reserve) + ", more than the cache's capacity of " + std::to_string(usable) +
         " blocks";
}

}  // namespace servelab
