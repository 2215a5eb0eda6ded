// What a request is before the scheduler sees it: arrival time, prompt content, output length.
//
// Prompt content is deterministic but not stored token by token. A prompt is a list of
// segments; a segment is `length` consecutive tokens of a content stream `content_id`, starting
// at `offset` in that stream. Token identity is the pair (content_id, position in stream): two
// prompts that share a system prompt share a segment with the same content_id, so their first
// tokens are identical and prefix caching sees it, while a million requests need only a few
// words each. Output tokens are identified the same way, in the stream output_content_id(id),
// so block hashes never depend on what a backend sampled (the simulator and the engine hash the
// same blocks the same way). The engine turns identities into token values with token_value().
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/rng.h"
#include "core/time.h"

namespace servelab {

using RequestId = std::uint64_t;

struct StopConditions;   // core/stop_conditions.h
struct RequestSampling;  // core/sampling_params.h

struct PromptSegment {
  std::uint64_t content_id = 0;
  std::uint32_t offset = 0;  // position of the segment's first token in its content stream
  std::uint32_t length = 0;  // number of tokens
  friend bool operator==(const PromptSegment&, const PromptSegment&) = default;
};

// A multimodal input (an image) of a prompt: its placeholder tokens are prompt positions
// [offset, offset + length), and content_id identifies what they stand for (vLLM's mm_hash, the
// content hash of the image). Placeholder tokens are the same for every image, so block hashes
// take the content ids of the inputs that overlap a block as extra keys (core/block_hash.h).
struct MultimodalInput {
  std::uint32_t offset = 0;  // prompt position of the first placeholder token
  std::uint32_t length = 0;  // placeholder tokens (>= 1)
  std::uint64_t content_id = 0;
  friend bool operator==(const MultimodalInput&, const MultimodalInput&) = default;
};

struct RequestSpec {
  RequestId id = 0;                    // unique in a workload; workloads number 0, 1, 2, ...
  TimeNs arrival_ns = 0;               // when the request reaches the server
  std::vector<PromptSegment> prompt;   // canonical: see canonicalize()
  std::int32_t prompt_len = 0;         // sum of segment lengths
  std::int32_t max_output_tokens = 1;  // generation stops after this many tokens at most
  std::int32_t priority = 0;           // smaller is served first (vLLM convention)
  std::uint32_t tenant = 0;            // for fair-share queue orders
  // The request class (a part of a `type: mix` workload, traces/mix_workload.h): the part's
  // index, by which the Recorder splits every metric; 0 in a workload without classes.
  std::uint32_t request_class = 0;
  std::int32_t n = 1;         // parallel samples (n > 1: forked after the prefill)
  std::int32_t sample = 0;    // which sample this sequence is (0: the request itself)
  std::uint64_t session = 0;  // multi-turn session (0: none); for session-affinity routing
  // A literal prompt (engine serve: token ids a client sent): the token values, prompt_len of
  // them; null for prompts described by content streams only. See make_literal_request().
  std::shared_ptr<const std::vector<std::int32_t>> prompt_values;
  // Output tokens identified by their sampled values, as a literal prompt's tokens
  // (literal_token_stream(v) each) instead of the request's own output stream: a client's next
  // prompt that quotes this reply's ids hits its blocks, as vLLM hashes token ids. Set by
  // make_literal_request (engine serve). A block reaching into the outputs is hashed once their
  // values are known (core/block_hash.h). Such a request carries no multimodal inputs.
  bool outputs_by_value = false;
  // EOS, stop token ids, min_tokens, ignore_eos (core/stop_conditions.h); null: the request
  // stops only at max_output_tokens.
  std::shared_ptr<const StopConditions> stop;
  // vLLM's cache_salt: an extra key of the first block's hash, so prompts with different salts
  // never share cached blocks (core/block_hash.h); 0: none.
  std::uint64_t cache_salt = 0;
  // Multimodal inputs, sorted by offset and not overlapping, inside the prompt; null: none.
  std::shared_ptr<const std::vector<MultimodalInput>> mm_inputs;
  // vLLM's LoRARequest (lora_int_id): the adapter the request runs under, 0 for the base model.
  // The id is an extra key of every block's hash (core/block_hash.h), so KV computed under one
  // adapter never serves another; the scheduler admits at most max_loras distinct adapters per
  // step (core/lora_config.h). lora_rank: the adapter's rank (the engine builds its weights from
  // it; the simulator prices the padded max_lora_rank, as vLLM's kernels compute). 0 without one.
  std::uint32_t lora_id = 0;
  std::int32_t lora_rank = 0;
  // The request's own temperature, top_p and seed (engine serve: the client's); null: the
  // engine's (core/sampling_params.h). The engine only: the simulator's steps cost the same.
  std::shared_ptr<const RequestSampling> sampling;
  // Log probabilities of its sampled tokens, with this many most likely alternatives each
  // (0 .. kMaxLogprobs); -1: none (engine serve's `logprobs` / `top_logprobs`).
  std::int32_t logprobs = -1;
  // Log probabilities of its prompt tokens (each given the tokens before it; the first has none),
  // with this many alternatives each (0 .. kMaxLogprobs); -1: none (vLLM's prompt_logprobs, and
  // engine serve's `echo` with `logprobs`). As in vLLM v1 such a request never reads the prefix
  // cache (KvCacheManager::get_computed_blocks): every prompt position is computed, and its
  // logits reach the LM head (StepFeatures::prompt_logprob_rows).
  std::int32_t prompt_logprobs = -1;

  std::int32_t total_tokens() const { return prompt_len + max_output_tokens; }
};

// Parallel sampling: sample k > 0 of request `id` is a sequence of its own with id
// sample_request_id(id, k) (so its output stream, its sampling stream and its plan entries are
// its own); workload ids stay below 2^kSampleIdShift. Sample 0 is the request itself.
inline constexpr int kSampleIdShift = 48;
inline constexpr std::int32_t kMaxSamples = 1024;
inline constexpr std::int32_t kMaxLogprobs = 20;  // vLLM's default max_logprobs
inline constexpr RequestId sample_request_id(RequestId id, std::int32_t k) {
  return id + (static_cast<RequestId>(k) << kSampleIdShift);
}
inline constexpr RequestId base_request_id(RequestId id) {
  return id & ((RequestId{1} << kSampleIdShift) - 1);
}

// The content stream of a request's generated tokens.
inline constexpr std::uint64_t output_content_id(RequestId id) {
  return mix64(id ^ 0x6f75747075747321ULL);  // "outputs!"
}

// A fresh content stream that no other request shares, derived from a seed and an index.
inline constexpr std::uint64_t unique_content_id(std::uint64_t seed, std::uint64_t index) {
  return mix64(mix64(seed ^ 0x756e69717565ULL) ^ index);
}

// Merges adjacent segments that continue the same stream, drops empty ones and recomputes
// prompt_len. Equal token sequences built from the same streams end up with equal segment lists.
// Throws ConfigError naming the request when the prompt has more than 2^31 - 1 tokens (a
// workload that adds up lengths: session histories, images on a trace's long prompts).
void canonicalize(RequestSpec& spec);

// A prompt made of `segments` (canonicalized).
RequestSpec make_request(RequestId id, TimeNs arrival_ns, std::vector<PromptSegment> segments,
                         std::int32_t max_output_tokens);

// The token value the engine feeds the model for position `offset` of stream `content_id`,
// in [0, vocab_size). REQUIRES: vocab_size > 0.
inline std::int32_t token_value(std::uint64_t content_id, std::uint32_t offset,
                                std::int32_t vocab_size) {
  return static_cast<std::int32_t>(mix64(content_id + 0x9e3779b97f4a7c15ULL * (offset + 1ULL)) %
                                   static_cast<std::uint64_t>(vocab_size));
}

// Identity of token `pos` of a request's sequence (prompt then outputs). REQUIRES: pos >= 0.
struct TokenId {
  std::uint64_t content_id;
  std::uint32_t offset;
};
TokenId token_identity(const RequestSpec& spec, std::int32_t pos);

// The content stream standing for the literal token value `value`: a literal prompt is one
// one-token segment of literal_token_stream(t) per token t, so equal token sequences have equal
// identities (block hashes, prefix caching) and different ones differ (up to a 64-bit hash).
inline constexpr std::uint64_t literal_token_stream(std::int32_t value) {
  return mix64(0x6c69746572616c21ULL ^ static_cast<std::uint32_t>(value));  // "literal!"
}

// A request whose prompt is the given token values (kept in prompt_values for the engine), its
// outputs identified by value too (RequestSpec::outputs_by_value).
RequestSpec make_literal_request(RequestId id, TimeNs arrival_ns, std::vector<std::int32_t> tokens,
                                 std::int32_t max_output_tokens);

// The value the engine feeds the model for prompt position p: the literal value when the
// prompt has them, else token_value() of the position's identity. REQUIRES: 0 <= p < prompt_len.
inline std::int32_t prompt_token_value(const RequestSpec& spec, std::int32_t p,
                                       std::int32_t vocab_size) {
  if (spec.prompt_values) return (*spec.prompt_values)[static_cast<std::size_t>(p)];
  const TokenId t = token_identity(spec, p);
  return token_value(t.content_id, t.offset, vocab_size);
}

}  // namespace servelab
