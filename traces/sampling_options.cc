#include "traces/sampling_options.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/stop_conditions.h"

namespace servelab {

RequestOptions parse_request_options(const ConfigNode& s) {
  RequestOptions o;
  if (s.has("sampling")) {
    const ConfigNode n = s.at("sampling");
    if (!n.is_map()) {
      n.fail(
          "a mapping (max_tokens, eos_probability, min_tokens, ignore_eos, temperature, top_p, "
          "top_k, min_p, seed, presence_penalty, frequency_penalty, repetition_penalty, "
          "logprobs, prompt_logprobs)");
    }
    n.allow_keys({"max_tokens", "eos_probability", "min_tokens", "ignore_eos", "temperature",
                  "top_p", "top_k", "min_p", "seed", "presence_penalty", "frequency_penalty",
                  "repetition_penalty", "logprobs", "prompt_logprobs"});
    SamplingOptions p;
    const bool draw_keys = n.has("temperature") || n.has("top_p") || n.has("seed") ||
                           n.has("presence_penalty") || n.has("frequency_penalty") ||
                           n.has("top_k") || n.has("min_p") || n.has("repetition_penalty");
    const bool logprob_keys = n.has("logprobs") || n.has("prompt_logprobs");
    p.stops = !(draw_keys || logprob_keys) || n.has("max_tokens") || n.has("eos_probability") ||
              n.has("min_tokens") || n.has("ignore_eos");
    if (n.has("logprobs")) {
      p.logprobs = static_cast<std::int32_t>(n.get_int("logprobs", 0, kMaxLogprobs));
    }
    if (n.has("prompt_logprobs")) {
      p.prompt_logprobs = static_cast<std::int32_t>(n.get_int("prompt_logprobs", 0, kMaxLogprobs));
    }
    if (draw_keys) {
      RequestSampling d;
      d.temperature = n.get_double("temperature", 0.0, 0.0, 1e6);
      d.top_p = n.get_double("top_p", 1.0, 0.0, 1.0);
      if (!(d.top_p > 0)) n.at("top_p").fail("a number in (0, 1]");
      if (n.has("seed")) d.seed = static_cast<std::uint64_t>(n.get_int("seed", 0, INT64_MAX));
      d.presence_penalty = n.get_double("presence_penalty", 0.0, -2.0, 2.0);
      d.frequency_penalty = n.get_double("frequency_penalty", 0.0, -2.0, 2.0);
      d.top_k = static_cast<std::int32_t>(n.get_int("top_k", 0, 0, INT32_MAX));
      d.min_p = n.get_double("min_p", 0.0, 0.0, 1.0);
      d.repetition_penalty =
          n.get_double("repetition_penalty", 1.0, kMinRepetitionPenalty, kMaxRepetitionPenalty);
      p.draws = d;
    }
    if (n.has("max_tokens")) {
      p.max_tokens = static_cast<std::int32_t>(n.get_int("max_tokens", 1, 10'000'000));
    }
    if (n.has("eos_probability")) {
      p.eos_probability = n.get_double("eos_probability", 0.0, 1.0);
      if (!(*p.eos_probability > 0)) n.at("eos_probability").fail("a probability in (0, 1]");
    }
    p.min_tokens = static_cast<std::int32_t>(n.get_int("min_tokens", 0, 0, 10'000'000));
    if (p.max_tokens && p.min_tokens > *p.max_tokens) {
      // vLLM's SamplingParams refuses it ("min_tokens must be less than or equal to
      // max_tokens"); every request would end at max_tokens as if min_tokens were not there.
      n.at("min_tokens").fail("at most max_tokens (" + std::to_string(*p.max_tokens) + ")");
    }
    p.ignore_eos = n.get_bool("ignore_eos", false);
    o.sampling = p;
  }
  if (s.has("cache_salt")) {
    const ConfigNode n = s.at("cache_salt");
    if (!n.is_map()) n.fail("a mapping with `value: SALT` or `per_tenant: true`");
    n.allow_keys({"value", "per_tenant"});
    CacheSaltOptions c;
    if (n.has("value")) {
      c.value = n.get_string("value");
      if (c.value.empty()) n.at("value").fail("a non-empty string");
    }
    c.per_tenant = n.get_bool("per_tenant", false);
    if (c.value.empty() == !c.per_tenant) {
      n.fail_message("needs exactly one of `value: SALT` or `per_tenant: true`");
    }
    o.cache_salt = c;
  }
  return o;
}

std::uint64_t cache_salt_key(const std::string& salt) {
  std::uint64_t h = 0x63616368655f73ULL;  // "cache_s"
  for (const unsigned char c : salt) h = mix64(h ^ c);
  return h == 0 ? 1 : h;
}

SampledWorkload::SampledWorkload(std::unique_ptr<Workload> inner, RequestOptions options,
                                 std::uint64_t seed)
    : WorkloadDecorator(std::move(inner)),
      options_(std::move(options)),
      eos_rng_(Rng::stream(seed, "eos")) {
  if (options_.cache_salt && !options_.cache_salt->value.empty()) {
    salt_ = cache_salt_key(options_.cache_salt->value);
  }
}

std::optional<RequestSpec> SampledWorkload::next() {
  std::optional<RequestSpec> r = inner().next();
  if (!r) return r;
  if (options_.sampling && options_.sampling->draws) {
    const RequestSampling& d = *options_.sampling->draws;
    if (d.seed) {
      RequestSampling own = d;
      own.seed = *d.seed + r->id;
      r->sampling = std::make_shared<const RequestSampling>(own);
    } else {
      if (!draws_) draws_ = std::make_shared<const RequestSampling>(d);
      r->sampling = draws_;
    }
  }
  if (options_.sampling) {
    if (options_.sampling->logprobs) r->logprobs = *options_.sampling->logprobs;
    if (options_.sampling->prompt_logprobs)
      r->prompt_logprobs = *options_.sampling->prompt_logprobs;
  }
  if (options_.sampling && options_.sampling->stops) {
    const SamplingOptions& p = *options_.sampling;
    auto stop = std::make_shared<StopConditions>();
    stop->eos_token_id = kSimEosToken;
    stop->ignore_eos = p.ignore_eos;
    stop->min_tokens = p.min_tokens;
    std::int32_t eos_at = r->max_output_tokens;  // the workload's length: where the model stops
    if (p.eos_probability) {
      // Geometric: the first output token that is EOS, each with probability p.
      const double q = 1.0 - *p.eos_probability;
      const double k =
          q <= 0 ? 1.0 : 1.0 + std::floor(std::log(eos_rng_.uniform_pos()) / std::log(q));
      eos_at = static_cast<std::int32_t>(std::clamp(k, 1.0, 10'000'000.0));
    }
    stop->sim_eos_at = eos_at;
    if (p.max_tokens) {
      r->max_output_tokens = std::min(*p.max_tokens, options_.output_cap.value_or(INT32_MAX));
    }
    r->stop = std::move(stop);
  }
  if (options_.cache_salt) {
    r->cache_salt = options_.cache_salt->per_tenant
                        ? cache_salt_key("tenant-" + std::to_string(r->tenant))
                        : salt_;
  }
  return r;
}

std::string SampledWorkload::describe() const {
  std::string s = inner().describe();
  if (options_.sampling && options_.sampling->draws) {
    const RequestSampling& d = *options_.sampling->draws;
    char buf[64];
    std::snprintf(buf, sizeof buf, ", draws (temperature %g, top_p %g", d.temperature, d.top_p);
    s += buf;
    if (d.top_k > 0) s += ", top_k " + std::to_string(d.top_k);
    if (d.min_p > 0) {
      std::snprintf(buf, sizeof buf, ", min_p %g", d.min_p);
      s += buf;
    }
    if (d.seed) s += ", seed " + std::to_string(*d.seed) + " + id";
    if (d.presence_penalty != 0 || d.frequency_penalty != 0) {
      std::snprintf(buf, sizeof buf, ", penalties presence %g frequency %g", d.presence_penalty,
                    d.frequency_penalty);
      s += buf;
    }
    if (d.repetition_penalty != 1) {
      std::snprintf(buf, sizeof buf, ", repetition_penalty %g", d.repetition_penalty);
      s += buf;
    }
    s += ")";
  }
  if (options_.sampling && (options_.sampling->logprobs || options_.sampling->prompt_logprobs)) {
    const SamplingOptions& p = *options_.sampling;
    if (p.logprobs) s += ", logprobs " + std::to_string(*p.logprobs);
    if (p.prompt_logprobs) s += ", prompt_logprobs " + std::to_string(*p.prompt_logprobs);
  }
  if (options_.sampling && options_.sampling->stops) {
    const SamplingOptions& p = *options_.sampling;
    char buf[160];
    std::snprintf(buf, sizeof buf, ", stops (eos %s, max_tokens %s, min_tokens %d%s)",
                  p.eos_probability ? ("p=" + std::to_string(*p.eos_probability)).c_str()
                                    : "at the output length",
                  p.max_tokens ? std::to_string(*p.max_tokens).c_str() : "the output length",
                  p.min_tokens, p.ignore_eos ? ", ignore_eos" : "");
    s += buf;
  }
  if (options_.cache_salt) {
    s += options_.cache_salt->per_tenant ? ", cache_salt per tenant"
                                         : ", cache_salt '" + options_.cache_salt->value + "'";
  }
  return s;
}

}  // namespace servelab
