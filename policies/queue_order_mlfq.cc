// Queue order `mlfq`: FastServe's skip-join multi-level feedback queue (Wu et al., "Fast
// Distributed Inference Serving for Large Language Models", arXiv 2305.05920). Meant to be used
// with the preemptive batch formation, which re-ranks the running requests every step and lets a
// waiting request displace running ones it outranks (FastServe preempts at token granularity);
// with another formation it only orders admissions.
//
// Levels 0..levels-1 have quanta q_l = quantum_ms * growth^l. A request's key is (level,
// arrival): lower levels first, first come first served within a level.
// - Skip-join: on arrival a request joins the first level whose quantum covers its first
//   iteration, the time to prefill its prompt, estimated as prompt_len / R, where R is the
//   prefill rate (prefill_tokens_per_s, or with 0 an exponentially weighted mean, newest step
//   1/4, of completed steps' prefill tokens over their duration; until one has completed every
//   request joins level 0).
// - Demotion: each completed step charges its duration to every request it ran; a request whose
//   service at its level reaches the level's quantum moves down one level (several if one step
//   used up several quanta), its service carried over less the quanta used. The last level keeps
//   everything.
// - Starvation prevention (starve_s > 0): at the start of every step, a waiting request below
//   level 0 that has not run for more than starve_s (since its arrival if it never ran) is
//   promoted back to level 0 with its service reset (FastServe's STARVE_LIMIT; vllm-ltr's MLFQ
//   baseline promotes after 3 s).
// A preempted request keeps its level and service. Every operation is O(log n); promotion looks
// only at the requests it promotes (they are also indexed by when they last ran). The level state
// lives in Request::queue_level, so a request's rank against the running ones needs no lookup.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <set>
#include <span>
#include <stdexcept>
#include <utility>
#include <vector>

#include "policies/keyed_queue.h"
#include "policies/queue_order.h"
#include "policies/registry.h"

namespace servelab {
namespace {

struct LevelKey {
  std::pair<std::int32_t, TimeNs> operator()(const Request& r) const {
    return {r.queue_level.level, r.spec.arrival_ns};
  }
};

class MlfqQueue final : public KeyedQueue<std::pair<std::int32_t, TimeNs>, LevelKey> {
  using Base = KeyedQueue<std::pair<std::int32_t, TimeNs>, LevelKey>;

 public:
  // Throws std::invalid_argument when the last level's quantum does not fit in TimeNs.
  MlfqQueue(std::int32_t levels, double quantum_ms, double growth, bool skip_join,
            double prefill_tokens_per_s, double starve_s)
      : Base("mlfq", LevelKey{}),
        skip_join_(skip_join),
        rate_(prefill_tokens_per_s),
        learn_rate_(prefill_tokens_per_s <= 0),
        starve_ns_(static_cast<TimeNs>(std::llround(starve_s * 1e9))) {
    double q = quantum_ms * 1e6;
    for (std::int32_t l = 0; l < levels; ++l, q *= growth) {
      if (q >= 9e18) {
        throw std::invalid_argument("mlfq: quantum_ms * growth^(levels - 1) is too long");
      }
      quanta_.push_back(std::max<TimeNs>(1, static_cast<TimeNs>(std::llround(q))));
    }
  }

  void push_back(Request* r) override {
    if (r->queue_level.level < 0) place(*r);
    Base::push_back(r);
    index(*r);
  }
  void push_front(Request* r) override {
    Base::push_front(r);  // keeps its level
    index(*r);
  }
  void pop_front() override {
    unindex(*Base::front());
    Base::pop_front();
  }
  bool erase(Request* r) override {
    if (!Base::erase(r)) return false;
    unindex(*r);
    return true;
  }

  bool reorders() const override { return starve_ns_ > 0; }
  void reorder(PrefixProbe*, TimeNs now) override {
    while (!idle_.empty() && now - idle_.begin()->first > starve_ns_) {
      const RequestId id = idle_.begin()->second;
      idle_.erase(idle_.begin());
      const auto it = Base::find(id);
      Request& r = *it->r;
      r.queue_level.level = 0;
      r.queue_level.service_ns = 0;
      Base::rekey(it, LevelKey{}(r));
    }
  }

  bool times_service() const override { return true; }
  void on_step_completed(std::span<Request* const> ran, std::int64_t prefill_tokens, TimeNs start,
                         TimeNs end) override {
    const TimeNs d = end - start;
    if (d <= 0) return;
    if (learn_rate_ && prefill_tokens > 0) {
      const double rate = static_cast<double>(prefill_tokens) / (static_cast<double>(d) * 1e-9);
      rate_ = rate_ > 0 ? 0.75 * rate_ + 0.25 * rate : rate;
    }
    const auto last = static_cast<std::int32_t>(quanta_.size()) - 1;
    for (Request* r : ran) {
      Request::QueueLevel& s = r->queue_level;
      s.last_run_ns = end;
      s.service_ns += d;
      while (s.level < last && s.service_ns >= quanta_[static_cast<std::size_t>(s.level)]) {
        s.service_ns -= quanta_[static_cast<std::size_t>(s.level)];
        ++s.level;
      }
    }
  }

 private:
  // Skip-join: the first level whose quantum covers the estimated prefill of the prompt.
  void place(Request& r) const {
    Request::QueueLevel& s = r.queue_level;
    s.level = 0;
    s.service_ns = 0;
    s.last_run_ns = r.spec.arrival_ns;
    if (!skip_join_ || rate_ <= 0) return;
    const double t_init = static_cast<double>(r.spec.prompt_len) / rate_ * 1e9;
    const auto last = static_cast<std::int32_t>(quanta_.size()) - 1;
    while (s.level < last &&
           static_cast<double>(quanta_[static_cast<std::size_t>(s.level)]) < t_init) {
      ++s.level;
    }
  }
  void index(const Request& r) {
    if (starve_ns_ > 0 && r.queue_level.level > 0)
      idle_.insert({r.queue_level.last_run_ns, r.id()});
  }
  void unindex(const Request& r) {
    if (starve_ns_ > 0) idle_.erase({r.queue_level.last_run_ns, r.id()});
  }

  std::vector<TimeNs> quanta_;
  bool skip_join_;
  double rate_;  // prefill tokens per second (0: not known yet)
  bool learn_rate_;
  TimeNs starve_ns_;
  // (last run, id) of the queued requests below level 0, with starvation prevention on.
  std::set<std::pair<TimeNs, RequestId>> idle_;
};

const PolicyRegistrar kMlfq(
    {PolicyKind::kQueue,
     "mlfq",
     "skip-join multi-level feedback queue: levels with growing quanta of step time, a new "
     "request joins the first level whose quantum covers its prefill, a request that used up its "
     "quantum moves down; pair with batch: preemptive",
     "FastServe (Wu et al., arXiv 2305.05920), skip-join MLFQ with starvation prevention",
     {{"levels", ParamType::kInt, std::int64_t{8}, 1, 64, {}, "number of levels"},
      {"quantum_ms",
       ParamType::kDouble,
       20.0,
       1e-3,
       1e7,
       {},
       "the quantum of level 0, in milliseconds of step time"},
      {"growth",
       ParamType::kDouble,
       2.0,
       1.0,
       1e3,
       {},
       "each level's quantum is this many times the level above's"},
      {"skip_join",
       ParamType::kBool,
       true,
       0,
       0,
       {},
       "a new request joins the first level whose quantum covers its estimated prefill time "
       "(false: every request starts at level 0)"},
      {"prefill_tokens_per_s",
       ParamType::kDouble,
       0.0,
       0.0,
       1e12,
       {},
       "the prefill rate skip-join estimates with (0: learned from completed steps)"},
      {"starve_s",
       ParamType::kDouble,
       0.0,
       0.0,
       1e9,
       {},
       "starvation prevention: a waiting request that has not run for this long goes back to "
       "level 0 (0: off)"}},
     queue_factory([](const PolicySpec& spec, std::uint64_t) -> std::unique_ptr<WaitingQueue> {
       return std::make_unique<MlfqQueue>(
           static_cast<std::int32_t>(spec.get_int("levels")), spec.get_double("quantum_ms"),
           spec.get_double("growth"), spec.get_bool("skip_join"),
           spec.get_double("prefill_tokens_per_s"), spec.get_double("starve_s"));
     }),
     /*rank=*/9});

}  // namespace
}  // namespace servelab
