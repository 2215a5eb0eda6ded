#include "traces/session_workload.h"

#include <algorithm>
#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/topological_sort.hpp>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iterator>
#include <nlohmann/json.hpp>
#include <queue>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

#include "core/checked_time.h"
#include "core/rng.h"
#include "serving/interrupt.h"
#include "traces/csv_reader.h"
#include "traces/json_duplicate_keys.h"
#include "traces/synthetic_workload.h"
#include "traces/trace_readers.h"

namespace servelab {

namespace {

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

[[noreturn]] void fail(const std::string& source, const std::string& key, const std::string& what) {
  throw ConfigError(source + ": session request '" + key + "' " + what);
}

}  // namespace

SessionWorkload::SessionWorkload(std::vector<SessionNode> nodes, std::uint64_t seed,
                                 std::string source, std::string description)
    : seed_(seed), description_(std::move(description)) {
  const std::size_t n = nodes.size();
  std::unordered_map<std::string, std::size_t> index;  // key -> position in `nodes`
  index.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (!index.emplace(nodes[i].key, i).second) fail(source, nodes[i].key, "is defined twice");
  }
  // Parent positions per node, checked: every parent exists and is listed once.
  std::vector<std::vector<std::size_t>> parent_pos(n);
  for (std::size_t i = 0; i < n; ++i) {
    const SessionNode& node = nodes[i];
    for (const std::string& p : node.parents) {
      const auto it = index.find(p);
      if (it == index.end()) fail(source, node.key, "has parent '" + p + "', which is no request");
      if (std::find(parent_pos[i].begin(), parent_pos[i].end(), it->second) !=
          parent_pos[i].end()) {
        fail(source, node.key, "lists parent '" + p + "' twice");
      }
      parent_pos[i].push_back(it->second);
    }
    if (node.parents.empty() && node.fresh_tokens == 0 && node.content.empty()) {
      fail(source, node.key, "has no parent and no prompt tokens");
    }
    if (node.output_tokens < 1) fail(source, node.key, "needs output_tokens >= 1");
    if (node.fresh_tokens < 0) fail(source, node.key, "needs new prompt tokens >= 0");
    if (node.time_ns < 0) fail(source, node.key, "needs a time >= 0");
  }

  // A cycle would leave its requests waiting forever: Boost.Graph finds it up front.
  using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS>;
  Graph g(n);
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t p : parent_pos[i]) boost::add_edge(p, i, g);
  }
  try {
    std::vector<Graph::vertex_descriptor> order;
    order.reserve(n);
    boost::topological_sort(g, std::back_inserter(order));
  } catch (const boost::not_a_dag&) {
    // not_a_dag names no vertex. Peel the requests whose ancestry is acyclic (Kahn); every one
    // left has a parent left, so walking parents among them must come back to a request on a
    // cycle: the first one seen twice.
    std::vector<std::int32_t> pending(n);
    std::vector<std::vector<std::size_t>> kids(n);
    std::vector<std::size_t> stack;
    for (std::size_t i = 0; i < n; ++i) {
      pending[i] = static_cast<std::int32_t>(parent_pos[i].size());
      for (std::size_t p : parent_pos[i]) kids[p].push_back(i);
      if (pending[i] == 0) stack.push_back(i);
    }
    while (!stack.empty()) {
      const std::size_t i = stack.back();
      stack.pop_back();
      for (std::size_t k : kids[i]) {
        if (--pending[k] == 0) stack.push_back(k);
      }
    }
    std::size_t at = 0;
    while (pending[at] == 0) ++at;
    std::vector<std::uint8_t> seen(n, 0);
    while (!seen[at]) {
      seen[at] = 1;
      for (std::size_t p : parent_pos[at]) {
        if (pending[p] > 0) {
          at = p;
          break;
        }
      }
    }
    fail(source, nodes[at].key, "is part of a cycle");
  }

  // Ids: Kahn's order, the first-given ready node first, so ids are deterministic and parents
  // come before children.
  std::vector<std::int32_t> pending(n);
  std::vector<std::vector<std::size_t>> kids(n);
  std::priority_queue<std::size_t, std::vector<std::size_t>, std::greater<>> ready;
  for (std::size_t i = 0; i < n; ++i) {
    pending[i] = static_cast<std::int32_t>(parent_pos[i].size());
    for (std::size_t p : parent_pos[i]) kids[p].push_back(i);
    if (pending[i] == 0) ready.push(i);
  }
  std::vector<RequestId> id_of_pos(n);
  std::vector<std::size_t> pos_of_id;
  pos_of_id.reserve(n);
  while (!ready.empty()) {
    const std::size_t i = ready.top();
    ready.pop();
    id_of_pos[i] = pos_of_id.size();
    pos_of_id.push_back(i);
    for (std::size_t k : kids[i]) {
      if (--pending[k] == 0) ready.push(k);
    }
  }

  nodes_.reserve(n);
  parents_.resize(n);
  children_.resize(n);
  for (RequestId id = 0; id < n; ++id) {
    const std::size_t i = pos_of_id[id];
    nodes_.push_back(std::move(nodes[i]));
    for (std::size_t p : parent_pos[i]) {
      parents_[id].push_back(id_of_pos[p]);
      children_[id_of_pos[p]].push_back(id);
    }
  }
  unfinished_parents_.resize(n);
  children_unbuilt_.resize(n);
  for (RequestId id = 0; id < n; ++id) {
    unfinished_parents_[id] = static_cast<std::int32_t>(parents_[id].size());
    children_unbuilt_[id] = static_cast<std::int32_t>(children_[id].size());
  }
  last_parent_finish_.assign(n, 0);
  finished_.assign(n, 0);
  prompts_.resize(n);
  for (RequestId id = 0; id < n; ++id) {
    if (parents_[id].empty()) release(id, nodes_[id].time_ns);
  }
}

RequestId SessionWorkload::id_of(const std::string& key) const {
  for (RequestId id = 0; id < nodes_.size(); ++id) {
    if (nodes_[id].key == key) return id;
  }
  throw std::out_of_range("no session request '" + key + "'");
}

void SessionWorkload::release(RequestId id, TimeNs arrival_ns) {
  heap_.push_back({arrival_ns, id});
  std::push_heap(heap_.begin(), heap_.end(), std::greater<>());
}

std::optional<TimeNs> SessionWorkload::next_arrival() {
  if (heap_.empty()) return std::nullopt;
  return heap_.front().arrival_ns;
}

std::optional<RequestSpec> SessionWorkload::next() {
  if (heap_.empty()) return std::nullopt;
  std::pop_heap(heap_.begin(), heap_.end(), std::greater<>());
  const Ready r = heap_.back();
  heap_.pop_back();
  const SessionNode& node = nodes_[r.id];
  const std::vector<RequestId>& parents = parents_[r.id];

  // Every parent was returned before (it finished), so its prompt is still held.
  std::vector<PromptSegment> prompt;
  if (!parents.empty()) prompt = prompts_[parents[0]];
  for (RequestId p : parents) {
    prompt.push_back(
        {output_content_id(p), 0, static_cast<std::uint32_t>(nodes_[p].output_tokens)});
  }
  prompt.insert(prompt.end(), node.content.begin(), node.content.end());
  prompt.push_back(
      {unique_content_id(seed_, r.id), 0, static_cast<std::uint32_t>(node.fresh_tokens)});
  RequestSpec spec = make_request(r.id, r.arrival_ns, std::move(prompt), node.output_tokens);
  spec.priority = node.priority;
  spec.tenant = node.tenant;
  // The session: the root reached through first parents (a conversation's turns share it).
  if (session_.empty()) session_.assign(nodes_.size(), 0);
  session_[r.id] = parents.empty() ? r.id + 1 : session_[parents[0]];
  spec.session = session_[r.id];

  for (RequestId p : parents) {
    if (--children_unbuilt_[p] == 0) std::vector<PromptSegment>().swap(prompts_[p]);
  }
  if (!children_[r.id].empty()) prompts_[r.id] = spec.prompt;
  ++returned_;
  return spec;
}

void SessionWorkload::on_finish(RequestId id, TimeNs t) {
  if (id >= nodes_.size() || finished_[id]) {
    throw std::logic_error("SessionWorkload: unknown or repeated finish of request " +
                           std::to_string(id));
  }
  finished_[id] = 1;
  for (RequestId c : children_[id]) {
    last_parent_finish_[c] = std::max(last_parent_finish_[c], t);
    if (--unfinished_parents_[c] == 0) release(c, last_parent_finish_[c] + nodes_[c].time_ns);
  }
}

// ---------------------------------------------------------------------------------------------
// Recorded sessions (JSON)

std::vector<SessionNode> parse_session_json(const std::string& text, const std::string& name,
                                            std::int32_t block_tokens, double time_scale) {
  nlohmann::json doc;
  if (const std::optional<std::string> problem = json_text_problem(text)) {
    throw ConfigError(name + ": " + *problem);
  }
  try {
    doc = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range (406) for a
                                                  // number too large for a double
    // Its "last read" may quote bytes that are not UTF-8: escaped, never sent raw.
    throw ConfigError(name + ": malformed JSON: " + shorten(e.what(), 400));
  }
  if (!doc.is_object() || !doc.contains("requests") || !doc["requests"].is_array()) {
    throw ConfigError(name + ": expected an object with a \"requests\" array");
  }
  // As a request's fields are: a misspelt or foreign key is an error, not ignored.
  for (const auto& [key, value] : doc.items()) {
    if (key != "requests") {
      throw ConfigError(name + ": unknown top-level key '" + key +
                        "' (expected only \"requests\")");
    }
  }
  if (doc["requests"].empty()) throw ConfigError(name + ": the \"requests\" array is empty");
  std::vector<SessionNode> nodes;
  nodes.reserve(doc["requests"].size());
  std::size_t index = 0;
  for (const nlohmann::json& r : doc["requests"]) {
    ++index;
    std::string who = "request #" + std::to_string(index);
    if (!r.is_object()) throw ConfigError(name + ": " + who + ": expected an object");
    SessionNode node;
    if (!r.contains("id")) throw ConfigError(name + ": " + who + ": missing field 'id'");
    const nlohmann::json& id = r["id"];
    if (id.is_string()) {
      node.key = id.get<std::string>();
    } else if (id.is_number_integer()) {
      node.key = std::to_string(id.get<std::int64_t>());
    } else {
      throw ConfigError(name + ": " + who + ": field 'id': expected a string or an integer, got " +
                        id.dump());
    }
    who = "request '" + node.key + "'";
    auto bad = [&](const std::string& field, const std::string& expected, const std::string& got) {
      throw ConfigError(name + ": " + who + ": field '" + field + "': expected " + expected +
                        ", got " + got);
    };
    for (const auto& item : r.items()) {
      // Not a structured binding: clang before 16 cannot capture one in the lambda below.
      const std::string& k = item.key();
      static const char* const kKnown[] = {"id",           "parents",      "arrival_s",
                                           "think_time_s", "input_tokens", "output_tokens",
                                           "hash_ids",     "priority",     "tenant"};
      if (std::find_if(std::begin(kKnown), std::end(kKnown),
                       [&](const char* s) { return k == s; }) == std::end(kKnown)) {
        throw ConfigError(name + ": " + who + ": unknown field '" + k +
                          "' (known: id, parents, arrival_s, think_time_s, input_tokens, "
                          "output_tokens, hash_ids, priority, tenant)");
      }
    }
    auto integer = [&](const std::string& field, std::int64_t lo, std::int64_t hi,
                       std::optional<std::int64_t> def) -> std::int64_t {
      if (!r.contains(field)) {
        if (def) return *def;
        throw ConfigError(name + ": " + who + ": missing field '" + field + "'");
      }
      const nlohmann::json& v = r[field];
      const std::string expected =
          "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
      if (!v.is_number_integer()) bad(field, expected, v.dump());
      const std::int64_t x = v.is_number_unsigned() && v.get<std::uint64_t>() > INT64_MAX
                                 ? INT64_MAX
                                 : v.get<std::int64_t>();
      if (x < lo || x > hi) bad(field, expected, v.dump());
      return x;
    };
    auto seconds = [&](const std::string& field) -> TimeNs {
      const nlohmann::json& v = r[field];
      if (!v.is_number() || !(v.get<double>() >= 0) || !(v.get<double>() <= 1e9)) {
        bad(field, "a number of seconds in [0, 1e9]", v.dump());
      }
      const std::optional<TimeNs> ns = checked_seconds_to_ns(v.get<double>() * time_scale);
      if (!ns || *ns >= kTimeHorizonNs) {
        bad(field,
            "a time that, scaled by time_scale " + num(time_scale) +
                ", is within the simulator's clock (146 years)",
            v.dump());
      }
      return *ns;
    };

    if (r.contains("parents")) {
      const nlohmann::json& ps = r["parents"];
      if (!ps.is_array()) bad("parents", "an array of request ids", ps.dump());
      for (const nlohmann::json& p : ps) {
        if (p.is_string()) {
          node.parents.push_back(p.get<std::string>());
        } else if (p.is_number_integer()) {
          node.parents.push_back(std::to_string(p.get<std::int64_t>()));
        } else {
          bad("parents", "an array of request ids (strings or integers)", ps.dump());
        }
      }
    }
    const bool root = node.parents.empty();
    if (root) {
      if (!r.contains("arrival_s")) {
        throw ConfigError(name + ": " + who + ": missing field 'arrival_s' (it has no parents)");
      }
      if (r.contains("think_time_s")) {
        throw ConfigError(name + ": " + who +
                          ": has think_time_s but no parents (a root arrives at arrival_s)");
      }
      node.time_ns = seconds("arrival_s");
    } else {
      if (r.contains("arrival_s")) {
        throw ConfigError(name + ": " + who +
                          ": has arrival_s but also parents (it arrives think_time_s after its "
                          "last parent finishes)");
      }
      if (r.contains("think_time_s")) node.time_ns = seconds("think_time_s");
    }
    const auto input =
        static_cast<std::int32_t>(integer("input_tokens", root ? 1 : 0, kMaxSyntheticLength, {}));
    node.output_tokens =
        static_cast<std::int32_t>(integer("output_tokens", 1, kMaxSyntheticLength, {}));
    node.priority = static_cast<std::int32_t>(integer("priority", INT32_MIN, INT32_MAX, 0));
    node.tenant = static_cast<std::uint32_t>(integer("tenant", 0, UINT32_MAX, 0));
    std::int64_t left = input;
    if (r.contains("hash_ids")) {
      const nlohmann::json& ids = r["hash_ids"];
      if (!ids.is_array()) bad("hash_ids", "an array of non-negative integers", ids.dump());
      const auto n = static_cast<std::int64_t>(ids.size());
      if (n > 0 && input <= static_cast<std::int64_t>(block_tokens) * (n - 1)) {
        bad("input_tokens",
            "more than " + std::to_string(block_tokens) + " * (" + std::to_string(n) +
                " hash ids - 1)",
            std::to_string(input));
      }
      for (const nlohmann::json& h : ids) {
        if (!h.is_number_unsigned() && !(h.is_number_integer() && h.get<std::int64_t>() >= 0)) {
          bad("hash_ids", "an array of non-negative integers", h.dump());
        }
        const auto len = static_cast<std::uint32_t>(std::min<std::int64_t>(left, block_tokens));
        node.content.push_back({mooncake_content_id(h.get<std::uint64_t>()), 0, len});
        left -= len;
      }
    }
    node.fresh_tokens = static_cast<std::int32_t>(left);
    nodes.push_back(std::move(node));
  }
  return nodes;
}

std::unique_ptr<Workload> make_session_file_workload(const ConfigNode& s, std::uint64_t seed,
                                                     const std::string& path) {
  s.allow_keys({"type", "path", "block_tokens", "time_scale"});
  const auto block = static_cast<std::int32_t>(s.get_int("block_tokens", 512, 1, 1 << 20));
  double scale = 1.0;
  if (s.has("time_scale")) {
    scale = s.at("time_scale").as_double();
    if (!(scale > 0 && scale <= 1e6)) s.at("time_scale").fail("a number > 0 and up to 1e6");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(path + ": cannot open the sessions file");
  std::stringstream text;
  text << in.rdbuf();
  std::vector<SessionNode> nodes = parse_session_json(text.str(), path, block, scale);
  const std::size_t count = nodes.size();
  std::string d = "sessions: " + std::to_string(count) + " requests from " + path;
  if (scale != 1.0) d += ", times x" + num(scale);
  d += ", seed " + std::to_string(seed);
  return std::make_unique<SessionWorkload>(std::move(nodes), seed, path, std::move(d));
}

// ---------------------------------------------------------------------------------------------
// Generated multi-turn chat

namespace {

// A distribution of counts (integer: rounded, clamped) or of seconds.
struct Dist {
  enum Kind { kFixed, kUniform, kNormal, kLognormal, kExponential } kind = kFixed;
  bool integer = true;
  double value = 1, min = 1, max = kMaxSyntheticLength, mean = 1, stddev = 0;
  double mu = 0, sigma = 0;  // kLognormal, derived

  double sample(Rng& rng) const {
    double x = value;
    switch (kind) {
      case kFixed:
        return value;
      case kUniform:
        if (integer) {
          return static_cast<double>(
              rng.uniform_int(static_cast<std::int64_t>(min), static_cast<std::int64_t>(max)));
        }
        return rng.uniform(min, max);
      case kNormal:
        x = rng.normal(mean, stddev);
        break;
      case kLognormal:
        x = rng.lognormal(mu, sigma);
        break;
      case kExponential:
        x = rng.exponential(1.0 / mean);
        break;
    }
    if (integer) x = std::round(x);
    if (!(x >= min)) return min;  // also NaN
    return x > max ? max : x;
  }

  std::string describe() const {
    const std::string range = " in [" + num(min) + ", " + num(max) + "]";
    switch (kind) {
      case kFixed:
        return "fixed " + num(value);
      case kUniform:
        return "uniform [" + num(min) + ", " + num(max) + "]";
      case kNormal:
        return "normal(mean " + num(mean) + ", stddev " + num(stddev) + ")" + range;
      case kLognormal:
        return "lognormal(mean " + num(mean) + ", stddev " + num(stddev) + ")" + range;
      case kExponential:
        return "exponential(mean " + num(mean) + ")" + range;
    }
    return "?";
  }
};

Dist parse_dist(const ConfigNode& n, bool integer) {
  Dist d;
  d.integer = integer;
  const double lo = integer ? 1 : 0, hi = integer ? kMaxSyntheticLength : 1e9;
  auto bound = [&](std::string_view key, double def) {
    if (!n.has(key)) return def;
    return integer ? static_cast<double>(n.get_int(key, static_cast<std::int64_t>(lo),
                                                   static_cast<std::int64_t>(hi)))
                   : n.get_double(key, lo, hi);
  };
  auto clamps = [&] {
    d.min = bound("min", lo);
    d.max = bound("max", hi);
    if (d.max < d.min) n.at("max").fail("a value >= min (" + num(d.min) + ")");
  };
  auto positive = [&](std::string_view key) {
    const double v = n.get_double(key, 0, hi);
    if (!(v > 0)) n.at(key).fail("a number > 0");
    return v;
  };
  const std::string kind =
      n.at("dist").as_choice({"fixed", "uniform", "normal", "lognormal", "exponential"});
  if (kind == "fixed") {
    n.allow_keys({"dist", "value"});
    d.kind = Dist::kFixed;
    n.at("value");  // required
    d.value = bound("value", lo);
    d.min = d.max = d.value;
  } else if (kind == "uniform") {
    n.allow_keys({"dist", "min", "max"});
    d.kind = Dist::kUniform;
    n.at("min");  // both bounds are required for a uniform range
    n.at("max");
    clamps();
  } else if (kind == "exponential") {
    n.allow_keys({"dist", "mean", "min", "max"});
    d.kind = Dist::kExponential;
    d.mean = positive("mean");
    clamps();
  } else {
    n.allow_keys({"dist", "mean", "stddev", "min", "max"});
    d.kind = kind == "normal" ? Dist::kNormal : Dist::kLognormal;
    d.mean = kind == "normal" ? n.get_double("mean", -hi, hi) : positive("mean");
    d.stddev = n.get_double("stddev", 0.0, 0.0, 1e12);
    clamps();
    if (d.kind == Dist::kLognormal) {
      const double ratio = d.stddev / d.mean;
      const double sigma2 = std::log1p(ratio * ratio);
      d.sigma = std::sqrt(sigma2);
      d.mu = std::log(d.mean) - sigma2 / 2;
    }
  }
  return d;
}

}  // namespace

std::unique_ptr<Workload> make_multiturn_workload(const ConfigNode& s, std::uint64_t seed) {
  s.allow_keys({"type", "num_sessions", "start_s", "session_arrival", "turns", "think_time_s",
                "first_prompt_len", "new_tokens", "output_len", "system_prompt", "fanout"});
  const std::int64_t num_sessions = s.get_int("num_sessions", 1, 10'000'000);
  const TimeNs start_ns = seconds_to_ns(s.get_double("start_s", 0.0, 0.0, 1e9));

  const ConfigNode a = s.at("session_arrival");
  const std::string process = a.at("process").as_choice({"poisson", "gamma", "fixed"});
  if (process == "gamma") {
    a.allow_keys({"process", "rate", "cv"});
  } else {
    a.allow_keys({"process", "rate"});
  }
  const double rate = a.get_double("rate", 0, 1e12);
  if (!(rate > 0)) a.at("rate").fail("a number > 0");
  double cv = 1.0;
  if (process == "gamma") {
    cv = a.get_double("cv", 0, 1e6);
    if (!(cv > 0)) a.at("cv").fail("a number > 0");
  }

  const Dist turns = parse_dist(s.at("turns"), true);
  const Dist think = parse_dist(s.at("think_time_s"), false);
  const Dist first = parse_dist(s.at("first_prompt_len"), true);
  const Dist fresh = parse_dist(s.at("new_tokens"), true);
  const Dist output = parse_dist(s.at("output_len"), true);

  std::optional<SharedPrefixConfig> system;
  if (s.has("system_prompt")) {
    const ConfigNode n = s.at("system_prompt");
    n.allow_keys({"num_prefixes", "length", "fraction"});
    SharedPrefixConfig p;
    p.num_prefixes = static_cast<std::int32_t>(n.get_int("num_prefixes", 1, 1'000'000'000));
    p.length = static_cast<std::int32_t>(n.get_int("length", 1, kMaxSyntheticLength));
    p.fraction = n.get_double("fraction", 0.0, 1.0);
    system = p;
  }
  std::int64_t fan_every = 0, fan_width = 1;
  if (s.has("fanout")) {
    const ConfigNode n = s.at("fanout");
    n.allow_keys({"every", "width"});
    fan_every = n.get_int("every", 1, 1'000'000);
    fan_width = n.get_int("width", 1, 1'000);
  }

  Rng arrival_rng = Rng::stream(seed, "session_arrivals");
  Rng turns_rng = Rng::stream(seed, "turns");
  Rng think_rng = Rng::stream(seed, "think_time");
  Rng prompt_rng = Rng::stream(seed, "prompt_len");
  Rng new_rng = Rng::stream(seed, "new_tokens");
  Rng output_rng = Rng::stream(seed, "output_len");
  Rng system_rng = Rng::stream(seed, "system_prompt");
  const double gamma_shape = 1.0 / (cv * cv), gamma_scale = 1.0 / (rate * gamma_shape);

  std::vector<SessionNode> nodes;
  TimeNs gaps_ns = 0;  // poisson/gamma: sum of the gaps so far
  // A session arriving past the simulator's clock is an error naming the rate (checked, never a
  // wrapped or saturated time).
  const auto too_late = [&](std::int64_t si) {
    a.at("rate").fail_message("session " + std::to_string(si) +
                              " would arrive more than 146 years after the start (the rate is "
                              "too small for num_sessions " +
                              std::to_string(num_sessions) + ")");
  };
  for (std::int64_t si = 0; si < num_sessions; ++si) {
    // Fixed arrivals are computed from the index so rounding never accumulates.
    const std::optional<TimeNs> since = process == "fixed"
                                            ? checked_seconds_to_ns(static_cast<double>(si) / rate)
                                            : std::optional<TimeNs>(gaps_ns);
    const std::optional<TimeNs> at = since ? checked_add(start_ns, *since) : std::nullopt;
    if (!at || *at >= kTimeHorizonNs) too_late(si);
    const TimeNs arrival = *at;
    if (process != "fixed") {
      const std::optional<TimeNs> gap =
          checked_seconds_to_ns(process == "poisson" ? arrival_rng.exponential(rate)
                                                     : arrival_rng.gamma(gamma_shape, gamma_scale));
      const std::optional<TimeNs> sum = gap ? checked_add(gaps_ns, *gap) : std::nullopt;
      // The next session's arrival is checked when it is made (none after the last).
      gaps_ns = sum ? std::min(*sum, kTimeHorizonNs) : kTimeHorizonNs;
    }

    if ((si & 1023) == 0) throw_if_interrupted();  // a big DAG takes seconds to build
    const auto num_turns = static_cast<std::int64_t>(turns.sample(turns_rng));
    const std::string session = "s" + std::to_string(si);
    std::vector<std::string> frontier;  // the previous turn (several after a fan-out)
    for (std::int64_t t = 0; t < num_turns; ++t) {
      const std::string turn = session + "t" + std::to_string(t);
      const bool fan = fan_every > 0 && t > 0 && t % fan_every == 0;
      std::vector<std::string> made;
      for (std::int64_t b = 0; b < (fan ? fan_width : 1); ++b) {
        SessionNode node;
        node.key = fan ? turn + "." + std::to_string(b) : turn;
        node.parents = frontier;
        if (t == 0) {
          node.time_ns = arrival;
          if (system && system_rng.uniform() < system->fraction) {
            const auto p =
                static_cast<std::uint64_t>(system_rng.uniform_int(0, system->num_prefixes - 1));
            node.content.push_back(
                {shared_prefix_content_id(seed, p), 0, static_cast<std::uint32_t>(system->length)});
          }
          node.fresh_tokens = static_cast<std::int32_t>(first.sample(prompt_rng));
        } else {
          node.time_ns = seconds_to_ns(think.sample(think_rng));
          node.fresh_tokens = static_cast<std::int32_t>(fresh.sample(new_rng));
        }
        node.output_tokens = static_cast<std::int32_t>(output.sample(output_rng));
        made.push_back(node.key);
        nodes.push_back(std::move(node));
      }
      frontier = std::move(made);
    }
  }

  std::string d = "multiturn: " + std::to_string(num_sessions) + " sessions, " + process +
                  " session arrivals at " + num(rate) + "/s";
  if (process == "gamma") d += " (cv " + num(cv) + ")";
  d += ", turns " + turns.describe() + ", think time " + think.describe() + " s, first prompt " +
       first.describe() + ", new tokens " + fresh.describe() + ", output " + output.describe();
  if (system) {
    d += ", " + num(system->fraction * 100) + "% start with one of " +
         std::to_string(system->num_prefixes) + " system prompts of " +
         std::to_string(system->length) + " tokens";
  }
  if (fan_every > 0) {
    d += ", turns k > 0 with k % " + std::to_string(fan_every) + " == 0 fan out " +
         std::to_string(fan_width) + " ways";
  }
  d += ", " + std::to_string(nodes.size()) + " requests, seed " + std::to_string(seed);
  return std::make_unique<SessionWorkload>(std::move(nodes), seed, "multiturn workload",
                                           std::move(d));
}

}  // namespace servelab
