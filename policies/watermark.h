// The admission watermark shared by the sarathi and prefill-first batch formations (vLLM v0
// BlockSpaceManager.watermark, Sarathi's can_allocate): an admission must leave
// int(watermark * usable blocks) blocks free.
#pragma once

#include <string>

#include "policies/registry.h"

namespace servelab {

class Scheduler;
class Request;

// The `watermark` parameter (double in [0, 0.99], default 0.01).
ParamInfo watermark_param();
// Throws std::invalid_argument unless 0 <= watermark < 1.
void check_watermark(double watermark);
// The reason to refuse `r` at arrival when its blocks plus the watermark exceed the cache
// (vLLM v0 can_allocate answers NEVER), or "". A resumed request is admitted with up to
// prompt + outputs - 1 tokens.
std::string watermark_rejection(const Request& r, const Scheduler& s, double watermark);

}  // namespace servelab
