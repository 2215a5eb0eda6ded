#include "engine/sample_stream.h"

#include <map>

#include "core/rng.h"

namespace servelab {

RowSampling row_sampling(const SamplingParams& engine, const RequestSpec& spec, RequestId id,
                         std::uint64_t index) {
  RowSampling row;
  const RequestSampling* own = spec.sampling.get();
  row.temperature = own != nullptr ? own->temperature : engine.temperature;
  row.top_p = own != nullptr ? own->top_p : engine.top_p;
  if (row.temperature == 0) return row;
  std::uint64_t stream = 0;
  if (own != nullptr && own->seed) {
    // The request's seed: sample k draws with seed + k, whatever the request's id.
    const std::uint64_t k = id >> kSampleIdShift;
    stream = mix64((*own->seed + k) ^ name_hash("request.seed"));
  } else {
    stream = mix64(mix64(engine.seed ^ name_hash("cpu_executor.sample")) ^ id);
  }
  Rng rng(stream ^ mix64(index));
  row.u = rng.uniform();
  return row;
}

std::vector<std::pair<std::int32_t, float>> penalty_deltas(const RequestSpec& spec,
                                                           std::span<const std::int32_t> earlier,
                                                           std::span<const std::int32_t> later) {
  std::vector<std::pair<std::int32_t, float>> out;
  const RequestSampling* own = spec.sampling.get();
  if (own == nullptr || !own->penalized()) return out;
  std::map<std::int32_t, std::int32_t> counts;
  for (const std::int32_t t : earlier) ++counts[t];
  for (const std::int32_t t : later) ++counts[t];
  out.reserve(counts.size());
  for (const auto& [token, count] : counts) {
    out.emplace_back(token,
                     static_cast<float>(-(own->frequency_penalty * count + own->presence_penalty)));
  }
  return out;
}

std::vector<std::pair<std::int32_t, float>> row_penalties(const ScheduledRequest& e,
                                                          std::size_t index,
                                                          std::optional<std::int32_t> previous,
                                                          std::span<const std::int32_t> drafts) {
  if (e.spec->sampling == nullptr || !e.spec->sampling->penalized()) return {};
  const std::size_t extra = index - e.output_tokens.size();
  std::vector<std::int32_t> later;
  later.reserve(extra);
  if (previous && extra > 0) later.push_back(*previous);
  const std::size_t skip = later.size();  // drafts follow the previous token
  while (later.size() < extra) later.push_back(drafts[later.size() - skip]);
  return penalty_deltas(*e.spec, e.output_tokens, later);
}

}  // namespace servelab
