// What a sampled row of a step draws with: the temperature and top_p that apply to it (the
// request's own, else the engine's), its uniform draw u from the stream core/sampling_params.h
// describes, and the request's penalties on its logits. CpuExecutor and CudaExecutor both take
// their rows' parameters from here, so the two draw the same u for the same token of the same
// sequence.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "core/request.h"
#include "core/sampling_params.h"
#include "core/step_plan.h"

namespace servelab {

struct RowSampling {
  double temperature = 0.0;  // 0: greedy (u unused, 0)
  double top_p = 1.0;
  double u = 0.0;  // in [0, 1)
};

// The row that samples output `index` of sequence `id` (the request's id, or
// sample_request_id(spec.id, k) for its sample k) of the request `spec`, under the engine's
// `engine` parameters.
RowSampling row_sampling(const SamplingParams& engine, const RequestSpec& spec, RequestId id,
                         std::uint64_t index);

// The presence and frequency penalties of request `spec` (RequestSampling) for a row whose
// sequence has produced the tokens `earlier` followed by `later` (its outputs, then what the
// executor alone knows: the previous step's token, a verify row's drafts before it): the amount
// to add to each penalized token's logit, by token id ascending. Empty without penalties.
std::vector<std::pair<std::int32_t, float>> penalty_deltas(const RequestSpec& spec,
                                                           std::span<const std::int32_t> earlier,
                                                           std::span<const std::int32_t> later);

// The same for the row of plan entry `e` that samples output `index`: over e.output_tokens, then
// what the executor alone knows of the outputs before `index`: `previous` (the previous step's
// token, for an entry that takes it under async scheduling) and the entry's verify `drafts`.
std::vector<std::pair<std::int32_t, float>> row_penalties(const ScheduledRequest& e,
                                                          std::size_t index,
                                                          std::optional<std::int32_t> previous,
                                                          std::span<const std::int32_t> drafts);

}  // namespace servelab
