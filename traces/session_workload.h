// SessionWorkload: multi-turn conversations and agent workflows as DAGs of requests.
//
// A node of the DAG is one request. A root arrives at its own time; any other node arrives only
// after ALL its parents have finished (or been rejected or aborted), a think time after the
// last of them. Its prompt carries its parents' context, so prefix caching across turns is real:
//   prompt = first parent's prompt + first parent's output
//          + the output of each further parent (a join), in the order the parents are listed
//          + the node's own new tokens.
// A request's output tokens are the stream output_content_id(id) at offsets 0..n-1 and the
// simulator generates exactly max_output_tokens of them, so a child's prompt is known the
// moment its parents are: only its arrival time depends on the run. The workload is therefore
// dependent() (see workload.h): the simulator calls on_finish() for every request and the
// workload releases children as their last parent finishes.
//
// Ids: RequestIds 0..N-1 follow a topological order (parents before children) in which, among
// the nodes ready at each step, the one given first (file or generation order) goes first; for
// chains given session by session this is plain file order. Content: a node's own tokens are
// `content` (explicit segments: a shared system prompt, or hash-id blocks) followed by
// `fresh_tokens` tokens of the stream unique_content_id(seed, id).
//
// Sessions: a request's RequestSpec::session is 1 + the id of the root its first-parent chain
// leads to, so every turn of a conversation carries the same one (session-affinity routing).
//
// Errors (ConfigError, "SOURCE: session request 'KEY' ..."): a duplicate key, a parent key that
// names no request, a parent listed twice, a root with an empty prompt, and a cycle (checked
// with Boost.Graph; the message names one request on the cycle).
//
// YAML, recorded sessions (type: sessions):
//
//   workload:
//     type: sessions
//     path: sessions.json     # resolved like every data path (see resolve_data_path)
//     block_tokens: 512       # optional (>= 1, default 512): tokens per hash id
//     time_scale: 1.0         # optional (> 0): multiplies every arrival and think time
//
//   The JSON file is an object with a "requests" array; every request is an object:
//     {"id": "s1t2",           string (or integer), unique
//      "parents": ["s1t1"],    optional, default []: ids of the requests it waits for
//      "arrival_s": 0.0,       roots only (required there, >= 0): absolute arrival time
//      "think_time_s": 2.0,    non-roots only (optional, default 0, >= 0): delay after the last
//                              parent finishes
//      "input_tokens": 120,    its NEW prompt tokens (>= 0; >= 1 for a root)
//      "output_tokens": 40,    >= 1
//      "hash_ids": [7, 8],     optional: block ids of its new tokens, block_tokens each (the last
//                              block shorter when input_tokens ends inside it); the same hash id
//                              is the same content everywhere (mooncake_content_id), tokens past
//                              the blocks are fresh. Needs input_tokens > block_tokens * (n - 1).
//      "priority": 0,          optional (default 0)
//      "tenant": 0}            optional (default 0, >= 0)
//   Unknown fields are errors. Errors name the file and the request ("FILE: request 's1t2':
//   field 'output_tokens': expected an integer >= 1, got \"x\"").
//
// YAML, generated multi-turn chat (type: multiturn):
//
//   workload:
//     type: multiturn
//     num_sessions: 200                  # conversations (>= 1)
//     start_s: 0                         # optional (>= 0): arrival of the first session
//     session_arrival: {process: poisson, rate: 2.0}   # first turns; poisson | gamma (+ cv) |
//                                        # fixed, rate in sessions/s, as in synthetic_workload.h
//     turns: {dist: uniform, min: 2, max: 8}           # turns per session (integers >= 1)
//     think_time_s: {dist: exponential, mean: 5}       # seconds between a reply and the next turn
//     first_prompt_len: {dist: lognormal, mean: 600, stddev: 300, min: 16, max: 4096}
//     new_tokens: {dist: uniform, min: 16, max: 256}   # user tokens of each later turn (>= 1)
//     output_len: {dist: uniform, min: 32, max: 512}
//     system_prompt: {num_prefixes: 4, length: 512, fraction: 1.0}    # optional
//     fanout: {every: 3, width: 4}       # optional agent fan-out, see below
//
//   Distributions (the same keys for counts and seconds; counts are rounded to the nearest
//   integer, then every draw is clamped to [min, max], which default to 1 and 10,000,000 for
//   counts and to 0 and 1e9 for seconds):
//     {dist: fixed, value}   {dist: uniform, min, max}   {dist: exponential, mean, min, max}
//     {dist: normal, mean, stddev, min, max}   {dist: lognormal, mean, stddev, min, max}
//   (lognormal: mean and stddev of the values themselves; uniform counts are integers in
//   [min, max] inclusive.)
//   Session s is a chain: its first turn (a root) arrives from session_arrival and has
//   first_prompt_len tokens, preceded by system prompt p (stream shared_prefix_content_id(seed,
//   p)) with probability `fraction`; turn k > 0 has turn k-1 as its parent, new_tokens new
//   tokens and a think time. With fanout, every turn k > 0 with k % every == 0 is instead
//   `width` parallel sub-requests, each a child of the previous turn (each with its own new
//   tokens, output and think time), and the next turn joins them all (its parents are the
//   `width` sub-requests). Keys are "s<session>t<turn>" (".<branch>" for sub-requests).
//   The whole DAG is generated up front; Rng streams "session_arrivals", "turns", "think_time",
//   "prompt_len", "new_tokens", "output_len" and "system_prompt" are separate, so changing one
//   distribution never changes what the others draw.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/request.h"
#include "core/time.h"
#include "serving/config_node.h"
#include "traces/workload.h"

namespace servelab {

struct SessionNode {
  std::string key;                   // unique name, for messages
  std::vector<std::string> parents;  // keys of the requests this one waits for
  // Roots: the absolute arrival time. Others: the delay after the last parent finishes.
  TimeNs time_ns = 0;
  std::vector<PromptSegment> content;  // explicit own tokens (system prompt, hash-id blocks)
  std::int32_t fresh_tokens = 0;       // own tokens after `content`, fresh content (>= 0)
  std::int32_t output_tokens = 1;      // >= 1
  std::int32_t priority = 0;
  std::uint32_t tenant = 0;
};

class SessionWorkload : public Workload {
 public:
  // Validates the DAG (see the errors above; `source` names the file or generator in messages)
  // and numbers the requests. Roots are released at once; `seed` derives the fresh content.
  SessionWorkload(std::vector<SessionNode> nodes, std::uint64_t seed, std::string source,
                  std::string description);

  std::optional<RequestSpec> next() override;
  std::string describe() const override { return description_; }
  bool dependent() const override { return true; }
  std::optional<TimeNs> next_arrival() override;
  // Throws std::logic_error for an unknown id or one reported twice.
  void on_finish(RequestId id, TimeNs t) override;
  bool exhausted() const override { return returned_ == nodes_.size(); }

  std::size_t size() const { return nodes_.size(); }
  // The node that became request `id`, and the ids of its parents (in the order listed).
  const SessionNode& node(RequestId id) const { return nodes_[id]; }
  const std::vector<RequestId>& parents(RequestId id) const { return parents_[id]; }
  RequestId id_of(const std::string& key) const;  // throws std::out_of_range when unknown

 private:
  struct Ready {
    TimeNs arrival_ns;
    RequestId id;
    bool operator>(const Ready& o) const {
      return arrival_ns != o.arrival_ns ? arrival_ns > o.arrival_ns : id > o.id;
    }
  };
  void release(RequestId id, TimeNs arrival_ns);

  std::vector<SessionNode> nodes_;  // by id
  std::vector<std::vector<RequestId>> parents_, children_;
  std::vector<std::int32_t> unfinished_parents_;
  std::vector<TimeNs> last_parent_finish_;
  std::vector<std::uint8_t> finished_;
  // The prompt of each returned request while some child still needs it (freed after that).
  std::vector<std::vector<PromptSegment>> prompts_;
  std::vector<std::uint64_t> session_;  // RequestSpec::session of each returned request
  std::vector<std::int32_t> children_unbuilt_;
  std::vector<Ready> heap_;  // min-heap of released, not yet returned requests
  std::size_t returned_ = 0;
  std::uint64_t seed_;
  std::string description_;
};

// Builders for make_workload(): `section` is the `workload:` mapping (keys checked as
// documented above); `path` is the resolved file of type: sessions. Throw ConfigError.
std::unique_ptr<Workload> make_multiturn_workload(const ConfigNode& section, std::uint64_t seed);
std::unique_ptr<Workload> make_session_file_workload(const ConfigNode& section, std::uint64_t seed,
                                                     const std::string& path);
// The recorded-sessions JSON text `text` (`name` stands for the file in messages).
std::vector<SessionNode> parse_session_json(const std::string& text, const std::string& name,
                                            std::int32_t block_tokens = 512,
                                            double time_scale = 1.0);

}  // namespace servelab
