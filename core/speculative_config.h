// SpeculativeConfig: vLLM's `speculative_config` (serving.speculative_config in an experiment).
//
// A request that decodes carries draft tokens proposed after its last step (Request::
// spec_token_ids); the scheduler gives it 1 + drafts tokens in the next step (one verify pass,
// counted in the token budget), and complete() appends the accepted drafts plus the token the
// verifier sampled, rolling the rejected drafts' slots back (num_computed_tokens falls; the blocks
// stay in the table, as in vLLM v1). Who proposes: the backend, in its StepResult (the CPU engine
// looks the n-gram up in the request's tokens; the simulator proposes num_speculative_tokens and
// draws acceptance). EAGLE reserves lookahead slots (num_speculative_tokens) in every allocation,
// as vLLM v1 does for methods that draft after the step on the device. docs/policies.md
// "Speculative decoding" documents each key and its vLLM origin.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace servelab {

enum class SpecMethod : std::uint8_t { kNone, kNgram, kDraftModel, kEagle };

// "none", "ngram", "draft_model", "eagle".
const char* to_string(SpecMethod m);

struct SpeculativeConfig {
  SpecMethod method = SpecMethod::kNone;
  std::int32_t num_speculative_tokens = 0;  // k: drafts proposed per step (0: off)
  // n-gram (prompt lookup): the longest suffix of the request's tokens, of prompt_lookup_max down
  // to prompt_lookup_min tokens, that occurs earlier proposes the k tokens that followed it.
  std::int32_t prompt_lookup_min = 5;  // vLLM's defaults
  std::int32_t prompt_lookup_max = 5;
  std::string draft_model;  // draft_model: the small model (a catalogue name); the simulator
                            // prices its decode steps
  // Simulator only: the probability that a proposed token is accepted, per draft position
  // (i.i.d. draws from the run's seeded stream; acceptance stops at the first rejection). One
  // value applies to every position.
  std::vector<double> acceptance_rates;

  bool enabled() const { return method != SpecMethod::kNone && num_speculative_tokens > 0; }
  // Lookahead slots every allocation reserves (vLLM v1: num_speculative_tokens for EAGLE).
  std::int32_t lookahead_slots() const {
    return method == SpecMethod::kEagle ? num_speculative_tokens : 0;
  }
};

}  // namespace servelab
