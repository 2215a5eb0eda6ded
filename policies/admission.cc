// Admission plugins (`policies.admission`; core/admission_policy.h): overload control that sheds
// arrivals at the door instead of letting the waiting queue, and every queued request's TTFT,
// grow without bound.
// - admit-all: admits every request (the default; what every run did before).
// - queue-length: sheds an arrival while max_waiting requests already wait, so arrivals never
//   make the queue longer than max_waiting (preempted requests returning to it may).
// - predicted-wait: sheds an arrival whose predicted queueing delay, the waiting queue's tokens
//   over the recent prefill throughput (AdmissionLoad), exceeds max_wait_s. Until a step with
//   prefill tokens has completed the throughput is unknown: prior_tokens_per_s stands in (0:
//   admit until measured).
#include <cstdio>
#include <memory>
#include <string>

#include "core/admission_policy.h"
#include "policies/registry.h"

namespace servelab {
namespace {

class AdmitAll final : public AdmissionPolicy {
 public:
  std::string_view name() const override { return "admit-all"; }
  std::string shed_reason(const RequestSpec&, const AdmissionLoad&) const override { return ""; }
};

class QueueLengthAdmission final : public AdmissionPolicy {
 public:
  explicit QueueLengthAdmission(std::int64_t max_waiting) : max_waiting_(max_waiting) {}
  std::string_view name() const override { return "queue-length"; }
  std::string shed_reason(const RequestSpec&, const AdmissionLoad& load) const override {
    if (load.num_waiting < max_waiting_) return "";
    return "shed: " + std::to_string(load.num_waiting) + " requests waiting (max_waiting " +
           std::to_string(max_waiting_) + ")";
  }

 private:
  std::int64_t max_waiting_;
};

class PredictedWaitAdmission final : public AdmissionPolicy {
 public:
  PredictedWaitAdmission(double max_wait_s, double prior_tokens_per_s)
      : max_wait_s_(max_wait_s), prior_tokens_per_s_(prior_tokens_per_s) {}
  std::string_view name() const override { return "predicted-wait"; }
  std::string shed_reason(const RequestSpec&, const AdmissionLoad& load) const override {
    const double rate =
        load.prefill_tokens_per_s > 0 ? load.prefill_tokens_per_s : prior_tokens_per_s_;
    if (rate <= 0) return "";  // nothing measured yet, no prior: admit
    const double wait_s = static_cast<double>(load.waiting_tokens) / rate;
    if (wait_s <= max_wait_s_) return "";
    char buf[160];
    std::snprintf(buf, sizeof buf,
                  "shed: predicted wait %.3f s > max_wait_s %g (%lld queued tokens at %.0f "
                  "prefill tokens/s)",
                  wait_s, max_wait_s_, static_cast<long long>(load.waiting_tokens), rate);
    return buf;
  }

 private:
  double max_wait_s_;
  double prior_tokens_per_s_;
};

const PolicyRegistrar kAdmitAll({PolicyKind::kAdmission,
                                 "admit-all",
                                 "admit every request (no overload control)",
                                 "vLLM (no admission control)",
                                 {},
                                 [](const PolicySpec&, PolicyTarget& t) {
                                   t.scheduler->admission = nullptr;  // the scheduler's default
                                 },
                                 /*rank=*/0});

const PolicyRegistrar kQueueLength(
    {PolicyKind::kAdmission,
     "queue-length",
     "shed an arrival while max_waiting requests already wait",
     "bounded queue (engine serve's 429; the course's 'shed load under overload')",
     {{"max_waiting",
       ParamType::kInt,
       std::int64_t{64},
       1,
       1e9,
       {},
       "arrivals are shed while this many requests wait"}},
     [](const PolicySpec& spec, PolicyTarget& t) {
       t.scheduler->admission =
           std::make_shared<const QueueLengthAdmission>(spec.get_int("max_waiting"));
     },
     /*rank=*/1});

const PolicyRegistrar kPredictedWait(
    {PolicyKind::kAdmission,
     "predicted-wait",
     "shed an arrival whose predicted queueing delay exceeds max_wait_s",
     "ServeLab (queued tokens over the measured prefill throughput)",
     {{"max_wait_s",
       ParamType::kDouble,
       2.0,
       0,
       1e6,
       {},
       "shed when waiting tokens / recent prefill tokens per second exceeds this (seconds)"},
      {"prior_tokens_per_s",
       ParamType::kDouble,
       0.0,
       0,
       1e12,
       {},
       "prefill throughput assumed until a prefill step completed (0: admit until then)"}},
     [](const PolicySpec& spec, PolicyTarget& t) {
       t.scheduler->admission = std::make_shared<const PredictedWaitAdmission>(
           spec.get_double("max_wait_s"), spec.get_double("prior_tokens_per_s"));
     },
     /*rank=*/2});

}  // namespace
}  // namespace servelab
