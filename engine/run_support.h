// The pieces `engine run` uses for one replica (engine/engine_driver.h) and for a cluster
// (engine/engine_cluster.h): the experiment's workload with the model's EOS ids, arrivals pulled
// in order, and the sampled tokens kept for tokens.jsonl.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/scheduler_observer.h"
#include "engine/reply_tokens.h"
#include "serving/experiment.h"
#include "serving/model_config.h"
#include "serving/run_folder.h"
#include "serving/run_stage.h"
#include "traces/workload.h"

namespace servelab {

// The experiment's workload (limited by max_requests and max_duration) whose stop conditions
// have the model's EOS ids in place of the simulator's EOS point: the engine's model decides
// where it stops (core/stop_conditions.h).
std::unique_ptr<Workload> make_engine_workload(const ExperimentConfig& config,
                                               const ModelConfig& model);

// Pulls arrivals from a workload in order: an independent workload is read one request ahead,
// a dependent one announces its next release (as in Simulator). Throws std::logic_error when
// an independent workload yields a request out of arrival order.
class ArrivalFeed {
 public:
  // `replies`, when given, fills in each taken request's quoted replies (engine/reply_tokens.h).
  explicit ArrivalFeed(Workload& w, const ReplyTokens* replies = nullptr)
      : w_(w), replies_(replies) {}
  std::optional<TimeNs> peek();
  RequestSpec take();  // REQUIRES: peek() returned a time

 private:
  Workload& w_;
  const ReplyTokens* replies_;
  std::optional<RequestSpec> buffered_;
  bool done_ = false;
  TimeNs last_ = 0;
};

// Forwards every event to `downstream` and keeps each request's sampled token ids (when
// `keep`), every sample's with parallel sampling (n > 1: sample k at index k), so tokens.jsonl
// can be written without the Recorder holding tokens.
class TokenCapture : public ForwardingObserver {
 public:
  using Samples = std::vector<std::vector<std::int32_t>>;
  TokenCapture(SchedulerObserver& downstream, bool keep)
      : ForwardingObserver(downstream), keep_(keep) {}
  void on_reject(const Request& req, TimeNs now) override;
  void on_finish(const Request& req, TimeNs now) override;
  const std::map<RequestId, Samples>& tokens() const { return tokens_; }

 private:
  bool keep_;
  std::map<RequestId, Samples> tokens_;  // sorted by id
};

// tokens.jsonl: one line {"id": N, "tokens": [...]} per request, sorted by id; with n > 1 the
// line adds "samples": [[...], ...], every sample's tokens ("tokens" is sample 0's). Throws
// ConfigError on I/O failure.
void write_tokens_jsonl(const std::string& path,
                        const std::map<RequestId, TokenCapture::Samples>& tokens);

// What an engine run depended on beyond its experiment, for RunMeta::derived (config.yaml's
// `derived:` record): `kv_memory_gb` when it sized the KV cache (`device` "cpu" and
// serving.num_gpu_blocks unset; on "cuda" the GPU's free memory does), `weights` (its absolute
// path) when a checkpoint was loaded.
std::vector<std::pair<std::string, std::string>> engine_options_record(
    const ExperimentConfig& config, const std::string& device, double kv_memory_gib,
    const std::string& weights);

// The end of every engine run (one replica or a cluster): the run's files into the staged
// folder (write_run_outputs, with `meta`), tokens.jsonl from `capture` when `write_tokens`, then
// the folder moved into place (out.out_dir becomes the final folder). Throws ConfigError on I/O
// failure, leaving the user's folder as it was.
void finish_engine_run(const ExperimentConfig& config, const RunMeta& meta,
                       const TokenCapture& capture, bool write_tokens, RunStage& stage,
                       RunOutput& out);

}  // namespace servelab
