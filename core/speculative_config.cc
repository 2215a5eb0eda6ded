#include "core/speculative_config.h"

namespace servelab {

const char* to_string(SpecMethod m) {
  switch (m) {
    case SpecMethod::kNone:
      return "none";
    case SpecMethod::kNgram:
      return "ngram";
    case SpecMethod::kDraftModel:
      return "draft_model";
    case SpecMethod::kEagle:
      return "eagle";
  }
  return "none";
}

}  // namespace servelab
