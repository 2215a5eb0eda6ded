#include "policies/queue_order.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/rng.h"
#include "core/stop_conditions.h"
#include "policies/keyed_queue.h"

namespace servelab {

namespace {

// edf's key: (deadline, arrival) from the request class's TTFT objective (ttft_deadline).
struct EdfKey {
  std::vector<TimeNs> targets;
  std::pair<TimeNs, TimeNs> operator()(const Request& r) const {
    return {ttft_deadline(r.spec, targets), r.spec.arrival_ns};
  }
};

// edf with `late: demote`: at the start of every step, each queued request without its first
// token whose deadline is less than `slack` after the step's start is moved to the best-effort
// tier, the key (never, arrival) of a class without a TTFT objective: behind every request that
// can still be on time, in arrival order among the others that cannot (or need not). A request
// that already has its first token (preempted, back in the queue) keeps its deadline key: it is
// past, so it goes first, as with `late: keep`. Demotion lasts: a demoted request pushed again
// gets its deadline key back and is demoted at the next step. reorder() costs O(m log n) for m
// demotions plus one step per returning request queued ahead of the first on-time deadline.
class EdfDemoteQueue final : public KeyedQueue<std::pair<TimeNs, TimeNs>, EdfKey> {
 public:
  EdfDemoteQueue(std::vector<TimeNs> targets, TimeNs slack_ns)
      : KeyedQueue("edf", EdfKey{std::move(targets)}), slack_ns_(slack_ns) {}

  bool reorders() const override { return true; }
  void reorder(PrefixProbe*, TimeNs now) override {
    constexpr TimeNs kNever = std::numeric_limits<TimeNs>::max();
    const TimeNs horizon = now > kNever - slack_ns_ ? kNever : now + slack_ns_;
    // Stops at the best-effort tier, which demoted entries join (they are not visited again).
    for (auto it = begin(); it != end() && it->key.first < horizon && it->key.first != kNever;) {
      if (it->r->first_token_ns >= 0) {
        ++it;
      } else {
        it = rekey(it, {kNever, it->r->spec.arrival_ns});
      }
    }
  }

 private:
  TimeNs slack_ns_;
};

// A keyed order's key behind a tier: (1, its key) when pushed; reorder() moves a request to tier
// 0 (AgingQueue).
template <class InnerKey, class InnerFn>
struct TieredKey {
  InnerFn inner;
  std::pair<int, InnerKey> operator()(const Request& r) const { return {1, inner(r)}; }
};

// sjf and predicted-sjf with max_wait_s > 0 (starvation prevention, as vllm-ltr's, by waiting
// time): at the start of every step, each queued request that arrived more than max_wait before
// the step goes ahead of every request that did not, in arrival order among them. A promoted
// request pushed again (preempted) gets its plain key back and is promoted again at the next
// step. The unpromoted requests are also indexed by arrival, so reorder() costs O(log n) per
// promotion. InnerKey is a pair (size, arrival); a promoted request's key is (0, {0, arrival}).
template <class InnerKey, class InnerFn>
class AgingQueue final : public KeyedQueue<std::pair<int, InnerKey>, TieredKey<InnerKey, InnerFn>> {
  using Base = KeyedQueue<std::pair<int, InnerKey>, TieredKey<InnerKey, InnerFn>>;

 public:
  AgingQueue(const char* name, InnerFn inner, TimeNs max_wait_ns)
      : Base(name, TieredKey<InnerKey, InnerFn>{std::move(inner)}), max_wait_ns_(max_wait_ns) {}

  void push_back(Request* r) override {
    Base::push_back(r);
    unpromoted_.insert({r->spec.arrival_ns, r->id()});
  }
  void push_front(Request* r) override {
    Base::push_front(r);
    unpromoted_.insert({r->spec.arrival_ns, r->id()});
  }
  void pop_front() override {
    const Request* r = Base::front();
    unpromoted_.erase({r->spec.arrival_ns, r->id()});
    Base::pop_front();
  }
  bool erase(Request* r) override {
    if (!Base::erase(r)) return false;
    unpromoted_.erase({r->spec.arrival_ns, r->id()});
    return true;
  }
  bool reorders() const override { return true; }
  void reorder(PrefixProbe*, TimeNs now) override {
    now_ = now;
    while (!unpromoted_.empty() && now - unpromoted_.begin()->first > max_wait_ns_) {
      const auto [arrival, id] = *unpromoted_.begin();
      unpromoted_.erase(unpromoted_.begin());
      Base::rekey(Base::find(id), {0, InnerKey{typename InnerKey::first_type{}, arrival}});
    }
  }

  // A running request that arrived more than max_wait before the last step ranks as promoted,
  // so that the preemptive formation does not displace a promoted request right after admitting
  // it (it would be promoted and admitted again, and recomputed, every other step).
  std::pair<int, InnerKey> running_key(const Request& r) const override {
    if (now_ - r.spec.arrival_ns > max_wait_ns_) {
      return {0, InnerKey{typename InnerKey::first_type{}, r.spec.arrival_ns}};
    }
    return Base::running_key(r);
  }

 private:
  TimeNs max_wait_ns_;
  TimeNs now_ = 0;                                     // the start of the last step (reorder)
  std::set<std::pair<TimeNs, RequestId>> unpromoted_;  // (arrival, id) of tier-1 requests
};

// The keyed order `fn`, with starvation prevention after `max_wait_s` seconds of waiting when
// that is > 0 (AgingQueue).
template <class KeyFn>
std::unique_ptr<WaitingQueue> make_keyed_with_aging(const char* name, KeyFn fn, double max_wait_s) {
  if (max_wait_s <= 0) return make_keyed(name, std::move(fn));
  using Inner = decltype(fn(std::declval<const Request&>()));
  return std::make_unique<AgingQueue<Inner, KeyFn>>(
      name, std::move(fn), static_cast<TimeNs>(std::llround(max_wait_s * 1e9)));
}

// sjf's and predicted-sjf's starvation prevention parameter.
ParamInfo max_wait_param() {
  return {"max_wait_s",
          ParamType::kDouble,
          0.0,
          0.0,
          1e9,
          {},
          "starvation prevention: a request waiting longer than this goes ahead of the others, "
          "in arrival order (0: off)"};
}

// Virtual Token Counter (Sheng et al., OSDI'24, Algorithm 2). Each tenant has a counter of the
// service it received (weighted input + output tokens). Admission takes the oldest request of
// the backlogged tenant with the smallest counter (ties: smaller tenant id). A tenant that
// becomes backlogged has its counter lifted to max(own, min over backlogged tenants), or, when
// no tenant is backlogged, to max(own, current counter of the tenant admitted last), so idling
// never banks credit for a later burst.
class VtcQueue final : public WaitingQueue {
 public:
  VtcQueue(double input_weight, double output_weight)
      : w_in_(input_weight), w_out_(output_weight) {}

  const char* name() const override { return "fair"; }
  void push_back(Request* r) override {
    Tenant& t = enqueue_tenant(r->spec.tenant);
    t.q.push_back(r);
    ++size_;
  }
  void push_front(Request* r) override {
    Tenant& t = enqueue_tenant(r->spec.tenant);
    t.q.push_front(r);  // a preempted request resumes before its tenant's newer ones
    ++size_;
  }
  Request* front() const override {
    return tenants_.find(backlogged_.begin()->second)->second.q.front();
  }
  void pop_front() override {
    const std::uint32_t id = backlogged_.begin()->second;
    Tenant& t = tenants_.find(id)->second;
    t.q.pop_front();
    --size_;
    last_admitted_ = id;
    if (t.q.empty()) backlogged_.erase(backlogged_.begin());
  }
  bool empty() const override { return size_ == 0; }
  std::size_t size() const override { return size_; }
  bool erase(Request* r) override {
    const auto it = tenants_.find(r->spec.tenant);
    if (it == tenants_.end()) return false;
    Tenant& t = it->second;
    const auto pos = std::find(t.q.begin(), t.q.end(), r);  // O(tenant's queue): rare path
    if (pos == t.q.end()) return false;
    t.q.erase(pos);
    --size_;
    if (t.q.empty()) backlogged_.erase({t.counter, it->first});
    return true;
  }
  std::vector<Request*> snapshot() const override {
    // Tenants in current counter order, each in FCFS order: the admission order if no more
    // service were counted (service changes counters, so the real order interleaves).
    std::vector<Request*> out;
    out.reserve(size_);
    for (const auto& [counter, id] : backlogged_) {
      const Tenant& t = tenants_.find(id)->second;
      out.insert(out.end(), t.q.begin(), t.q.end());
    }
    return out;
  }
  bool counts_service() const override { return true; }
  void on_tokens_scheduled(const Request& r, std::int32_t prefill_tokens,
                           std::int32_t decode_tokens) override {
    const auto it = tenants_.find(r.spec.tenant);
    if (it == tenants_.end()) return;  // cannot happen: a scheduled request was queued once
    Tenant& t = it->second;
    const double add = w_in_ * prefill_tokens + w_out_ * decode_tokens;
    if (add == 0) return;
    if (t.q.empty()) {
      t.counter += add;  // not backlogged: nothing to re-sort
      return;
    }
    backlogged_.erase({t.counter, it->first});
    t.counter += add;
    backlogged_.insert({t.counter, it->first});
  }

  double counter(std::uint32_t tenant) const {
    const auto it = tenants_.find(tenant);
    return it == tenants_.end() ? 0.0 : it->second.counter;
  }

 private:
  struct Tenant {
    double counter = 0;
    std::deque<Request*> q;
  };

  // The tenant's state, made backlogged (with VTC's counter lift) if it was not.
  Tenant& enqueue_tenant(std::uint32_t id) {
    Tenant& t = tenants_[id];
    if (t.q.empty()) {
      // The last admitted tenant's counter as it is now, i.e. including the service it got
      // since (its counter is the service level the system is at).
      const double floor = !backlogged_.empty() ? backlogged_.begin()->first
                           : last_admitted_     ? tenants_.find(*last_admitted_)->second.counter
                                                : 0.0;
      t.counter = std::max(t.counter, floor);
      backlogged_.insert({t.counter, id});
    }
    return t;
  }

  double w_in_, w_out_;
  std::map<std::uint32_t, Tenant> tenants_;
  std::set<std::pair<double, std::uint32_t>> backlogged_;  // (counter, tenant), non-empty queues
  std::size_t size_ = 0;
  std::optional<std::uint32_t> last_admitted_;  // tenant of the latest pop_front()
};

}  // namespace

double predicted_output_tokens(std::uint64_t seed, double error, std::uint64_t id,
                               std::int32_t true_output) {
  // One independent draw per (seed, id): the prediction of a request does not depend on which
  // other requests exist or in what order they arrive.
  const std::uint64_t stream = mix64(seed ^ name_hash("predictor"));
  Rng rng(mix64(stream ^ id));
  return static_cast<double>(true_output) * std::exp(error * rng.normal());
}

std::unique_ptr<WaitingQueue> make_waiting_queue(const PolicySpec& spec, std::uint64_t seed,
                                                 std::vector<TimeNs> ttft_targets_ns) {
  SchedulerConfig sc;
  PolicyTarget target{&sc, nullptr, seed};
  target.ttft_targets_ns = std::move(ttft_targets_ns);
  build_policy(PolicyKind::kQueue, spec, target);
  return sc.make_waiting_queue();
}

TimeNs ttft_deadline(const RequestSpec& spec, const std::vector<TimeNs>& ttft_targets_ns) {
  constexpr TimeNs kNever = std::numeric_limits<TimeNs>::max();
  if (spec.request_class >= ttft_targets_ns.size()) return kNever;
  const TimeNs target = ttft_targets_ns[spec.request_class];
  if (target < 0) return kNever;
  return spec.arrival_ns > kNever - target ? kNever : spec.arrival_ns + target;
}

namespace {

const PolicyRegistrar kFcfs({PolicyKind::kQueue,
                             "fcfs",
                             "first come, first served; a preempted request goes back to the head",
                             "vLLM v1 FCFSRequestQueue (--scheduling-policy fcfs)",
                             {},
                             queue_factory([](const PolicySpec&,
                                              std::uint64_t) -> std::unique_ptr<WaitingQueue> {
                               return std::make_unique<FcfsWaitingQueue>();
                             }),
                             /*rank=*/0});

const PolicyRegistrar kPriority(
    {PolicyKind::kQueue,
     "priority",
     "smallest RequestSpec.priority first, then arrival, then id; preempted requests are "
     "re-inserted by the same key",
     "vLLM v1 PriorityRequestQueue (--scheduling-policy priority)",
     {},
     queue_factory([](const PolicySpec&, std::uint64_t) {
       return make_keyed("priority", [](const Request& r) {
         return std::pair<std::int32_t, TimeNs>(r.spec.priority, r.spec.arrival_ns);
       });
     }),
     /*rank=*/1});

const PolicyRegistrar kSjf(
    {PolicyKind::kQueue,
     "sjf",
     "oracle shortest job first: fewest remaining output tokens (true length), then arrival; "
     "max_wait_s > 0 puts requests that waited longer first",
     "oracle SJF baseline of Fu et al., arXiv 2408.15792 (vllm-ltr), with its starvation "
     "prevention by waiting time",
     {max_wait_param()},
     queue_factory([](const PolicySpec& spec, std::uint64_t) {
       return make_keyed_with_aging(
           "sjf",
           [](const Request& r) {
             return std::pair<std::int32_t, TimeNs>(
                 sim_output_length(r.spec) - r.num_output_tokens(), r.spec.arrival_ns);
           },
           spec.get_double("max_wait_s"));
     }),
     /*rank=*/2});

const PolicyRegistrar kPredictedSjf(
    {PolicyKind::kQueue,
     "predicted-sjf",
     "SJF on a noisy length prediction: true output * exp(error * N(0,1)), one draw per "
     "request",
     "learning-to-rank SJF (Fu et al., arXiv 2408.15792), predictor modelled as noise",
     {{"error",
       ParamType::kDouble,
       0.5,
       0.0,
       10.0,
       {},
       "lognormal sigma of the prediction error (0: exact, equals sjf)"},
      max_wait_param()},
     queue_factory([](const PolicySpec& spec, std::uint64_t seed) {
       const double error = spec.get_double("error");
       return make_keyed_with_aging(
           "predicted-sjf",
           [seed, error](const Request& r) {
             const double predicted =
                 predicted_output_tokens(seed, error, r.id(), sim_output_length(r.spec));
             const double remaining = std::max(0.0, predicted - r.num_output_tokens());
             return std::pair<double, TimeNs>(remaining, r.spec.arrival_ns);
           },
           spec.get_double("max_wait_s"));
     }),
     /*rank=*/3});

const PolicyRegistrar kFair(
    {PolicyKind::kQueue,
     "fair",
     "per-tenant virtual token counters; admit from the backlogged tenant served least",
     "VTC (Sheng et al., OSDI'24, Fairness in Serving Large Language Models)",
     {{"input_weight",
       ParamType::kDouble,
       1.0,
       0.0,
       1e6,
       {},
       "counter increment per prefill token served"},
      {"output_weight",
       ParamType::kDouble,
       2.0,
       0.0,
       1e6,
       {},
       "counter increment per decode token served"}},
     queue_factory([](const PolicySpec& spec, std::uint64_t) -> std::unique_ptr<WaitingQueue> {
       return std::make_unique<VtcQueue>(spec.get_double("input_weight"),
                                         spec.get_double("output_weight"));
     }),
     /*rank=*/4});

// Earliest deadline first on the experiment's TTFT objectives. The key is fixed at arrival, so a
// preempted request returns by the deadline it already had (it is late, so it goes first). With
// `late: demote` a request that has missed (or is about to miss) its deadline before its first
// token is served after every request that can still meet one (EdfDemoteQueue).
const PolicyRegistrar kEdf(
    {PolicyKind::kQueue,
     "edf",
     "earliest TTFT deadline first: arrival + the request class's slo ttft_ms, then arrival; a "
     "class without a TTFT objective after every deadline; preempted requests re-inserted by "
     "the same key; late: demote serves requests past their deadline after the others",
     "earliest deadline first (Liu and Layland, JACM 1973) over the experiment's slo targets; "
     "demotion of late jobs as in overload-tolerant EDF (Buttazzo, Hard Real-Time Computing "
     "Systems)",
     {{"late",
       ParamType::kString,
       std::string("keep"),
       0,
       0,
       {"keep", "demote"},
       "keep: a late request keeps its deadline (it goes first); demote: once its deadline is "
       "less than slack_ms away and it has no first token, it goes behind every request that "
       "can still be on time, in arrival order with the classes that have no objective"},
      {"slack_ms",
       ParamType::kDouble,
       0.0,
       0.0,
       1e9,
       {},
       "with late: demote, how long before its deadline a waiting request counts as late (0: "
       "once the deadline has passed)"}},
     [](const PolicySpec& spec, PolicyTarget& t) {
       const bool demote = spec.get_string("late") == "demote";
       const double slack_ms = spec.get_double("slack_ms");
       if (!demote && slack_ms != 0) {
         throw std::invalid_argument(
             "edf: slack_ms needs late: demote (with late: keep no request is demoted)");
       }
       const auto slack_ns = static_cast<TimeNs>(std::llround(slack_ms * 1e6));
       t.scheduler->make_waiting_queue = [targets = t.ttft_targets_ns, demote,
                                          slack_ns]() -> std::unique_ptr<WaitingQueue> {
         if (demote) return std::make_unique<EdfDemoteQueue>(targets, slack_ns);
         return make_keyed("edf", EdfKey{targets});
       };
     },
     /*rank=*/5});

}  // namespace

}  // namespace servelab
