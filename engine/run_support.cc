#include "engine/run_support.h"

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <system_error>

#include "core/stop_conditions.h"
#include "core/strings.h"
#include "serving/output_file.h"

namespace servelab {

namespace {

class ModelEosWorkload : public WorkloadDecorator {
 public:
  ModelEosWorkload(std::unique_ptr<Workload> inner, std::vector<std::int32_t> eos_ids)
      : WorkloadDecorator(std::move(inner)), eos_ids_(std::move(eos_ids)) {}
  std::optional<RequestSpec> next() override {
    std::optional<RequestSpec> r = inner().next();
    if (r && r->stop != nullptr) {
      r->stop = std::make_shared<const StopConditions>(with_model_eos(*r->stop, eos_ids_));
    }
    return r;
  }

 private:
  std::vector<std::int32_t> eos_ids_;
};

}  // namespace

std::unique_ptr<Workload> make_engine_workload(const ExperimentConfig& config,
                                               const ModelConfig& model) {
  return std::make_unique<ModelEosWorkload>(
      limit_workload(make_workload(config.workload_section(), config.seed, config.base_dir),
                     config.max_requests, config.max_duration_ns, config.file),
      model.eos_token_ids);
}

std::optional<TimeNs> ArrivalFeed::peek() {
  if (w_.dependent()) return w_.next_arrival();
  if (!buffered_ && !done_) {
    buffered_ = w_.next();
    if (!buffered_) {
      done_ = true;
    } else if (buffered_->arrival_ns < last_) {
      throw std::logic_error("workload yielded request " + std::to_string(buffered_->id) +
                             " out of arrival order");
    }
  }
  return buffered_ ? std::optional<TimeNs>(buffered_->arrival_ns) : std::nullopt;
}

RequestSpec ArrivalFeed::take() {
  if (w_.dependent()) {
    std::optional<RequestSpec> r = w_.next();
    if (!r) throw std::logic_error("dependent workload announced an arrival it did not yield");
    if (replies_ != nullptr) replies_->quote_replies(*r);
    return std::move(*r);
  }
  RequestSpec r = std::move(*buffered_);
  buffered_.reset();
  last_ = r.arrival_ns;
  return r;
}

void TokenCapture::on_reject(const Request& req, TimeNs now) {
  ForwardingObserver::on_reject(req, now);
  if (keep_) tokens_[req.id()] = {req.output_tokens};
}

void TokenCapture::on_finish(const Request& req, TimeNs now) {
  ForwardingObserver::on_finish(req, now);
  if (!keep_) return;
  Samples& s = tokens_[req.id()];
  s.clear();
  if (req.group != nullptr && req.group->samples.size() > 1) {
    // The group is reported once, through sample 0; every sample is alive until after this.
    for (const Request* k : req.group->samples) s.push_back(k->output_tokens);
  } else {
    s.push_back(req.output_tokens);
  }
}

namespace {
void write_ids(std::FILE* f, const std::vector<std::int32_t>& toks) {
  std::fputc('[', f);
  for (std::size_t i = 0; i < toks.size(); ++i) std::fprintf(f, "%s%d", i ? ", " : "", toks[i]);
  std::fputc(']', f);
}
}  // namespace

void write_tokens_jsonl(const std::string& path,
                        const std::map<RequestId, TokenCapture::Samples>& tokens) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) throw_io_error(path, "writing", errno);
  for (const auto& [id, samples] : tokens) {
    std::fprintf(f, "{\"id\": %llu, \"tokens\": ", static_cast<unsigned long long>(id));
    write_ids(f, samples.empty() ? std::vector<std::int32_t>{} : samples[0]);
    if (samples.size() > 1) {
      std::fputs(", \"samples\": [", f);
      for (std::size_t k = 0; k < samples.size(); ++k) {
        if (k > 0) std::fputs(", ", f);
        write_ids(f, samples[k]);
      }
      std::fputc(']', f);
    }
    std::fputs("}\n", f);
  }
  if (std::fclose(f) != 0) throw_io_error(path, "writing", errno);
}

std::vector<std::pair<std::string, std::string>> engine_options_record(
    const ExperimentConfig& config, const std::string& device, double kv_memory_gib,
    const std::string& weights) {
  std::vector<std::pair<std::string, std::string>> out;
  if (!config.num_gpu_blocks && device == "cpu") {
    out.emplace_back("kv_memory_gb", format_text("%.10g", kv_memory_gib));
  }
  if (!weights.empty()) {
    std::error_code ec;
    const std::filesystem::path abs = std::filesystem::absolute(weights, ec);
    out.emplace_back("weights", ec ? weights : abs.lexically_normal().string());
  }
  return out;
}

void finish_engine_run(const ExperimentConfig& config, const RunMeta& meta,
                       const TokenCapture& capture, bool write_tokens, RunStage& stage,
                       RunOutput& out) {
  write_run_outputs(config, stage.recorder(), meta, out);
  if (write_tokens) {
    write_tokens_jsonl(out.out_dir + "/tokens.jsonl", capture.tokens());
    out.files.push_back("tokens.jsonl");
  }
  out.out_dir = stage.commit();
}

}  // namespace servelab
