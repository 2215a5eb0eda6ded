#include "engine/sample_stream.h"

#include <algorithm>
#include <limits>
#include <map>

#include "core/rng.h"
#include "core/stop_conditions.h"

namespace servelab {

RowSampling row_sampling(const SamplingParams& engine, const RequestSpec& spec, RequestId id,
                         std::uint64_t index) {
  RowSampling row;
  const RequestSampling* own = spec.sampling.get();
  row.temperature = own != nullptr ? own->temperature : engine.temperature;
  row.top_p = own != nullptr ? own->top_p : engine.top_p;
  if (own != nullptr) {
    row.top_k = own->top_k;
    row.min_p = own->min_p;
  }
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

std::vector<std::int32_t> distinct_prompt_tokens(const RequestSpec& spec, std::int32_t vocab) {
  std::vector<std::int32_t> out(static_cast<std::size_t>(spec.prompt_len));
  for (std::int32_t p = 0; p < spec.prompt_len; ++p) {
    out[static_cast<std::size_t>(p)] = prompt_token_value(spec, p, vocab);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<LogitAdjustment> logit_adjustments(const RequestSpec& spec,
                                               std::span<const std::int32_t> prompt_tokens,
                                               std::span<const std::int32_t> earlier,
                                               std::span<const std::int32_t> later) {
  std::vector<LogitAdjustment> out;
  const RequestSampling* own = spec.sampling.get();
  if (own == nullptr || !own->adjusts_logits()) return out;
  std::map<std::int32_t, std::int32_t> counts;  // the outputs' tokens
  for (const std::int32_t t : earlier) ++counts[t];
  for (const std::int32_t t : later) ++counts[t];
  const bool repetition = own->repetition_penalty != 1;
  if (!repetition) prompt_tokens = {};
  const bool counted = own->presence_penalty != 0 || own->frequency_penalty != 0;
  // Every token some adjustment names, ascending: a merge of three ascending lists.
  auto c = counts.begin();
  auto b = own->logit_bias.begin();
  auto p = prompt_tokens.begin();
  constexpr std::int32_t kEnd = std::numeric_limits<std::int32_t>::max();
  out.reserve(prompt_tokens.size() + counts.size() + own->logit_bias.size());
  while (true) {
    const std::int32_t tc = c != counts.end() && (repetition || counted) ? c->first : kEnd;
    const std::int32_t tb = b != own->logit_bias.end() ? b->first : kEnd;
    const std::int32_t tp = p != prompt_tokens.end() ? *p : kEnd;
    const std::int32_t t = std::min({tc, tb, tp});
    if (t == kEnd) break;
    LogitAdjustment a;
    a.token = t;
    std::int32_t count = 0;
    if (tc == t) count = (c++)->second;
    if (tb == t) a.bias = (b++)->second;
    const bool in_prompt = tp == t;
    if (in_prompt) ++p;
    if (repetition && (in_prompt || count > 0)) {
      a.factor = static_cast<float>(own->repetition_penalty);
    }
    if (counted && count > 0) {
      a.delta = static_cast<float>(-(own->frequency_penalty * count + own->presence_penalty));
    }
    if (a.bias != 0 || a.factor != 1 || a.delta != 0) out.push_back(a);
  }
  return out;
}

namespace {

// The outputs of entry `e` before output `index` that only the executor knows: the previous
// step's token (when the entry takes it), then the entry's verify drafts.
std::vector<std::int32_t> outputs_after(const ScheduledRequest& e, std::size_t index,
                                        std::optional<std::int32_t> previous,
                                        std::span<const std::int32_t> drafts) {
  const std::size_t extra = index - e.output_tokens.size();
  std::vector<std::int32_t> later;
  later.reserve(extra);
  if (previous && extra > 0) later.push_back(*previous);
  const std::size_t skip = later.size();  // drafts follow the previous token
  while (later.size() < extra) later.push_back(drafts[later.size() - skip]);
  return later;
}

}  // namespace

std::vector<LogitAdjustment> row_adjustments(const ScheduledRequest& e, std::size_t index,
                                             std::optional<std::int32_t> previous,
                                             std::span<const std::int32_t> drafts,
                                             std::span<const std::int32_t> prompt_tokens) {
  if (e.spec->sampling == nullptr || !e.spec->sampling->adjusts_logits()) return {};
  return logit_adjustments(*e.spec, prompt_tokens, e.output_tokens,
                           outputs_after(e, index, previous, drafts));
}

std::vector<std::int32_t> bad_word_bans(const std::vector<std::vector<std::int32_t>>& words,
                                        std::span<const std::int32_t> earlier,
                                        std::span<const std::int32_t> later) {
  std::vector<std::int32_t> out;
  const std::size_t have = earlier.size() + later.size();
  // Output i from the end (1: the last one).
  const auto back = [&](std::size_t i) {
    return i <= later.size() ? later[later.size() - i] : earlier[have - i];
  };
  for (const std::vector<std::int32_t>& w : words) {
    if (w.empty() || w.size() - 1 > have) continue;
    const std::size_t prefix = w.size() - 1;
    bool ends = true;
    for (std::size_t j = 0; j < prefix && ends; ++j) ends = back(prefix - j) == w[j];
    if (ends) out.push_back(w.back());
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<std::int32_t> row_bans(const ScheduledRequest& e, std::size_t index,
                                   std::optional<std::int32_t> previous,
                                   std::span<const std::int32_t> drafts) {
  std::vector<std::int32_t> out;
  if (e.spec->stop != nullptr) out = suppressed_tokens(*e.spec, static_cast<std::int32_t>(index));
  const RequestSampling* own = e.spec->sampling.get();
  if (own != nullptr && !own->bad_words.empty()) {
    const std::vector<std::int32_t> words =
        bad_word_bans(own->bad_words, e.output_tokens, outputs_after(e, index, previous, drafts));
    out.insert(out.end(), words.begin(), words.end());
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::shared_ptr<const TokenMask> row_constraint(const ScheduledRequest& e, RequestId sequence,
                                                std::size_t index,
                                                std::optional<std::int32_t> previous,
                                                std::span<const std::int32_t> drafts) {
  const RequestSampling* own = e.spec->sampling.get();
  if (own == nullptr || own->constraint == nullptr) return nullptr;
  if (sequence != e.id) return own->constraint->allowed(sequence, {}, {});  // a fork's first
  return own->constraint->allowed(sequence, e.output_tokens,
                                  outputs_after(e, index, previous, drafts));
}

TokenMask row_keep_mask(std::span<const std::int32_t> allowed_ids, const TokenMask* grammar,
                        std::int32_t vocab) {
  const auto words = static_cast<std::size_t>((vocab + 31) / 32);
  TokenMask keep(words, 0u);
  if (!allowed_ids.empty()) {
    for (const std::int32_t t : allowed_ids) {
      if (t >= 0 && t < vocab) keep[static_cast<std::size_t>(t) / 32] |= 1u << (t % 32);
    }
    if (grammar != nullptr) {
      for (std::size_t w = 0; w < words; ++w) keep[w] &= w < grammar->size() ? (*grammar)[w] : 0u;
    }
  } else {
    std::copy_n(grammar->begin(), std::min(words, grammar->size()), keep.begin());
  }
  if (vocab % 32 != 0) keep.back() &= (1u << (vocab % 32)) - 1u;
  return keep;
}

void PromptTokenSets::retain(const StepPlan& plan) {
  if (sets_.empty()) return;
  std::unordered_map<RequestId, std::vector<std::int32_t>> kept;
  for (const ScheduledRequest& e : plan.requests) {
    const auto it = sets_.find(base_request_id(e.id));
    if (it != sets_.end()) kept.emplace(it->first, std::move(it->second));
  }
  sets_ = std::move(kept);
}

std::span<const std::int32_t> PromptTokenSets::of(const ScheduledRequest& e, std::int32_t vocab) {
  const RequestSampling* own = e.spec->sampling.get();
  if (own == nullptr || own->repetition_penalty == 1) return {};
  auto [it, added] = sets_.try_emplace(base_request_id(e.id));
  if (added) it->second = distinct_prompt_tokens(*e.spec, vocab);
  return it->second;
}

}  // namespace servelab
