#include "traces/transforms.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "core/checked_time.h"
#include "core/config_error.h"
#include "core/time.h"

namespace servelab {

TransformOptions parse_transforms(const ConfigNode& n) {
  n.allow_keys(
      {"window_s", "sample", "rate_scale", "shift_s", "max_prompt_tokens", "max_output_tokens"});
  TransformOptions o;
  o.location = n.location() + ": key '" + n.path() + "'";
  if (n.has("window_s")) {
    const ConfigNode w = n.at("window_s");
    const std::vector<ConfigNode> e = w.elements();
    if (e.size() != 2) w.fail("a list [start, end] of two numbers");
    o.window_start_s = e[0].as_double(0.0, 1e12);
    o.window_end_s = e[1].as_double(0.0, 1e12);
    if (!(*o.window_end_s > *o.window_start_s)) w.fail("[start, end] with end > start");
    // Arrivals are whole nanoseconds: a window narrower than one holds none.
    if (seconds_to_ns(*o.window_end_s) <= seconds_to_ns(*o.window_start_s)) {
      w.fail("[start, end] at least 1 ns apart (arrival times are whole nanoseconds)");
    }
  }
  if (n.has("sample")) {
    o.sample = n.get_double("sample", 0.0, 1.0);
    if (!(o.sample > 0)) n.at("sample").fail("a fraction in (0, 1]");
  }
  if (n.has("rate_scale")) {
    o.rate_scale = n.get_double("rate_scale", 0.0, 1e12);
    if (!(o.rate_scale > 0)) n.at("rate_scale").fail("a number > 0");
  }
  o.shift_s = n.get_double("shift_s", 0.0, 0.0, 1e12);
  if (n.has("max_prompt_tokens")) {
    o.max_prompt_tokens = static_cast<std::int32_t>(n.get_int("max_prompt_tokens", 1, INT32_MAX));
  }
  if (n.has("max_output_tokens")) {
    o.max_output_tokens = static_cast<std::int32_t>(n.get_int("max_output_tokens", 1, INT32_MAX));
  }
  return o;
}

TransformedWorkload::TransformedWorkload(std::unique_ptr<Workload> inner, TransformOptions options,
                                         std::uint64_t seed)
    : inner_(std::move(inner)), options_(options), sample_rng_(Rng::stream(seed, "sample")) {
  if (options_.window_start_s.has_value() != options_.window_end_s.has_value() ||
      (options_.window_start_s && !(*options_.window_end_s > *options_.window_start_s)) ||
      !(options_.sample > 0 && options_.sample <= 1) || !(options_.rate_scale > 0) ||
      !(options_.shift_s >= 0) || (options_.max_prompt_tokens && *options_.max_prompt_tokens < 1) ||
      (options_.max_output_tokens && *options_.max_output_tokens < 1)) {
    throw std::invalid_argument("TransformOptions out of range");
  }
}

std::optional<RequestSpec> TransformedWorkload::next() {
  while (!done_) {
    std::optional<RequestSpec> r = inner_->next();
    if (!r) break;
    if (options_.window_start_s) {
      const TimeNs start = seconds_to_ns(*options_.window_start_s);
      // Arrivals are nondecreasing, so the first one past the window ends the stream: the rest
      // of a long trace is never read.
      if (r->arrival_ns >= seconds_to_ns(*options_.window_end_s)) break;
      if (r->arrival_ns < start) continue;
      r->arrival_ns -= start;
    }
    // One draw per inner request, kept or not, so the choice of request k depends only on k.
    if (options_.sample < 1.0 && !(sample_rng_.uniform() < options_.sample)) continue;
    // Checked: a small rate_scale or a large shift_s can take an arrival past 2^62 ns (146
    // years), where it would wrap.
    std::optional<TimeNs> t = r->arrival_ns;
    if (options_.rate_scale != 1.0) {
      t = checked_round_ns(static_cast<double>(r->arrival_ns) / options_.rate_scale);
    }
    const std::optional<TimeNs> shift = checked_seconds_to_ns(options_.shift_s);
    t = t && shift ? checked_add(*t, *shift) : std::nullopt;
    if (!t || *t >= (TimeNs{1} << 62)) {
      throw ConfigError(options_.location + ": request " + std::to_string(next_id_) +
                        " would arrive more than 2^62 ns (146 years) after the start; use a " +
                        "larger rate_scale or a smaller shift_s");
    }
    r->arrival_ns = *t;
    if (options_.max_prompt_tokens && r->prompt_len > *options_.max_prompt_tokens) {
      std::int64_t cut = *options_.max_prompt_tokens;
      if (r->mm_inputs != nullptr) {
        // Images already in the prompt (a mix's parts with `multimodal:`): the cut never splits
        // one (it moves to the image's start, or to its end when the image opens the prompt),
        // and the images past it go with their tokens.
        auto inputs = std::make_shared<std::vector<MultimodalInput>>();
        for (const MultimodalInput& in : *r->mm_inputs) {
          const std::int64_t lo = in.offset, hi = lo + static_cast<std::int64_t>(in.length);
          if (lo < cut && cut < hi) cut = lo > 0 ? lo : hi;
          if (hi <= cut) inputs->push_back(in);
        }
        r->mm_inputs =
            inputs->empty() ? nullptr : std::shared_ptr<const std::vector<MultimodalInput>>(inputs);
      }
      std::uint32_t left = static_cast<std::uint32_t>(cut);
      std::size_t keep = 0;
      for (; keep < r->prompt.size() && left > 0; ++keep) {
        PromptSegment& s = r->prompt[keep];
        s.length = std::min(s.length, left);
        left -= s.length;
      }
      r->prompt.resize(keep);
      r->prompt_len = static_cast<std::int32_t>(cut);
    }
    if (options_.max_output_tokens) {
      r->max_output_tokens = std::min(r->max_output_tokens, *options_.max_output_tokens);
    }
    r->id = next_id_++;
    return r;
  }
  done_ = true;
  return std::nullopt;
}

std::string TransformedWorkload::describe() const {
  std::string s = inner_->describe() + ", transformed (";
  char buf[96];
  bool first = true;
  auto add = [&](const char* text) {
    if (!first) s += ", ";
    s += text;
    first = false;
  };
  if (options_.window_start_s) {
    std::snprintf(buf, sizeof buf, "window [%g, %g) s", *options_.window_start_s,
                  *options_.window_end_s);
    add(buf);
  }
  if (options_.sample < 1) {
    std::snprintf(buf, sizeof buf, "sample %g", options_.sample);
    add(buf);
  }
  if (options_.rate_scale != 1) {
    std::snprintf(buf, sizeof buf, "rate x%g", options_.rate_scale);
    add(buf);
  }
  if (options_.shift_s != 0) {
    std::snprintf(buf, sizeof buf, "shift %g s", options_.shift_s);
    add(buf);
  }
  if (options_.max_prompt_tokens) {
    std::snprintf(buf, sizeof buf, "prompt <= %d", *options_.max_prompt_tokens);
    add(buf);
  }
  if (options_.max_output_tokens) {
    std::snprintf(buf, sizeof buf, "output <= %d", *options_.max_output_tokens);
    add(buf);
  }
  return s + ")";
}

}  // namespace servelab
