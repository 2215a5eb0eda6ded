#include "engine/warm_up.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include "kernels/decode_graph_plan.h"

namespace servelab {

RequestSpec& WarmUpPlans::add_request(std::int32_t prompt_len) {
  const RequestId id = next_id_--;
  return specs_.emplace_back(make_request(
      id, 0, {PromptSegment{unique_content_id(0, id), 0, static_cast<std::uint32_t>(prompt_len)}},
      1));
}

WarmUpPlans::WarmUpPlans(const WarmUpShape& shape) {
  if (shape.max_num_batched_tokens < 1 || shape.max_model_len < 1 || shape.max_num_seqs < 1 ||
      shape.num_blocks < 1 || shape.block_size < 1 || shape.lora_rank < 0) {
    throw std::invalid_argument(
        "WarmUpPlans: max_num_batched_tokens, max_model_len, max_num_seqs, num_blocks and "
        "block_size must be >= 1, lora_rank >= 0");
  }
  const std::int32_t bs = shape.block_size;
  const std::int64_t fit = (shape.num_blocks - 1) * bs;
  std::int64_t largest =
      std::min<std::int64_t>({shape.max_num_batched_tokens, shape.max_model_len, fit});
  largest = largest / bs * bs;
  if (largest < std::max(bs, 16)) return;
  const auto t_max = static_cast<std::int32_t>(largest);

  // Prefills, largest first: its blocks hold the keys the decode rows read.
  for (std::int32_t t = t_max; t >= 16 && t >= bs; t /= 4) {
    RequestSpec& spec = add_request(t);
    std::vector<BlockId>& table = tables_.emplace_back();
    for (std::int32_t b = 0; b < (t + bs - 1) / bs; ++b) table.push_back(1 + b);
    ScheduledRequest e;
    e.id = spec.id;
    e.spec = &spec;
    e.first_token = 0;
    e.num_tokens = t;
    e.is_prefill = true;
    e.samples = true;
    e.block_table = table;
    StepPlan& plan = plans_.emplace_back();
    plan.requests.push_back(e);
    plan.num_prefill_tokens = t;
    if (t / 4 < bs) break;
  }

  // One decode step per graph bucket: row i at context bs in block 1 + i; then, with LoRA, the
  // same under the warm-up adapter.
  const std::int32_t rows = std::min(shape.max_num_seqs, t_max / bs);
  for (const std::int32_t bucket : kernels::decode_graph_buckets(shape.max_num_seqs)) {
    if (bucket > rows) break;
    for (const bool lora : {false, true}) {
      if (lora && shape.lora_rank == 0) break;
      add_decode_step(bucket, bs, lora ? shape.lora_rank : 0);
    }
  }
}

void WarmUpPlans::add_decode_step(std::int32_t bucket, std::int32_t bs, std::int32_t lora_rank) {
  StepPlan& plan = plans_.emplace_back();
  for (std::int32_t i = 0; i < bucket; ++i) {
    RequestSpec& spec = add_request(bs);
    if (lora_rank > 0) {
      spec.lora_id = kWarmUpLoraId;
      spec.lora_rank = lora_rank;
    }
    std::vector<BlockId>& table = tables_.emplace_back(1, 1 + i);
    ScheduledRequest e;
    e.id = spec.id;
    e.spec = &spec;
    e.first_token = bs - 1;
    e.num_tokens = 1;
    e.is_prefill = false;
    e.samples = true;
    e.block_table = table;
    plan.requests.push_back(e);
  }
  plan.num_decode_tokens = bucket;
}

double run_warm_up(Backend& backend, const WarmUpPlans& plans) {
  const auto start = std::chrono::steady_clock::now();
  for (const StepPlan& plan : plans.plans()) backend.execute(plan);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace servelab
