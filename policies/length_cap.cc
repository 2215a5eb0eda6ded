// Length-cap plugins (`policies.length_cap`; core/length_cap.h): a brownout that lowers the
// output length of requests arriving while the server is overloaded, so each one holds its seat
// and KV blocks for less time and the queue drains faster.
// - off: never caps (the default).
// - queue-length: while more than when_waiting_over requests wait, an arrival's
//   max_output_tokens becomes min(max_output_tokens, max_tokens).
#include "core/length_cap.h"

#include <algorithm>
#include <memory>

#include "policies/registry.h"

namespace servelab {
namespace {

class QueueLengthCap final : public LengthCap {
 public:
  QueueLengthCap(std::int32_t max_tokens, std::int64_t when_waiting_over)
      : max_tokens_(max_tokens), when_waiting_over_(when_waiting_over) {}
  std::string_view name() const override { return "queue-length"; }
  std::int32_t cap(const RequestSpec& spec, const AdmissionLoad& load) const override {
    if (load.num_waiting <= when_waiting_over_) return spec.max_output_tokens;
    return std::min(spec.max_output_tokens, max_tokens_);
  }

 private:
  std::int32_t max_tokens_;
  std::int64_t when_waiting_over_;
};

const PolicyRegistrar kOff({PolicyKind::kLengthCap,
                            "off",
                            "never lower a request's max_output_tokens",
                            "vLLM (generation runs to max_tokens)",
                            {},
                            [](const PolicySpec&, PolicyTarget& t) {
                              t.scheduler->length_cap = nullptr;  // the scheduler's default
                            },
                            /*rank=*/0});

const PolicyRegistrar kQueueLength(
    {PolicyKind::kLengthCap,
     "queue-length",
     "while more than when_waiting_over requests wait, cap arrivals at max_tokens",
     "brownout (the course's 'apply length caps under overload')",
     {{"max_tokens",
       ParamType::kInt,
       std::int64_t{128},
       1,
       1e9,
       {},
       "the max_output_tokens an arrival is lowered to under overload"},
      {"when_waiting_over",
       ParamType::kInt,
       std::int64_t{32},
       0,
       1e9,
       {},
       "overload: more than this many requests wait when the request arrives"}},
     [](const PolicySpec& spec, PolicyTarget& t) {
       t.scheduler->length_cap = std::make_shared<const QueueLengthCap>(
           static_cast<std::int32_t>(spec.get_int("max_tokens")),
           spec.get_int("when_waiting_over"));
     },
     /*rank=*/1});

}  // namespace
}  // namespace servelab
