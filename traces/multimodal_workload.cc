#include "traces/multimodal_workload.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace servelab {

std::optional<MultimodalOptions> parse_multimodal_options(const ConfigNode& section) {
  if (!section.has("multimodal")) return std::nullopt;
  const ConfigNode n = section.at("multimodal");
  if (!n.is_map()) {
    n.fail(
        "a mapping (images_per_request, tokens_per_image, distinct_images, fraction, zipf_s, "
        "position)");
  }
  n.allow_keys({"images_per_request", "tokens_per_image", "distinct_images", "fraction", "zipf_s",
                "position"});
  MultimodalOptions o;
  o.images_per_request = static_cast<std::int32_t>(n.get_int("images_per_request", 1, 1, 64));
  o.tokens_per_image = static_cast<std::int32_t>(n.get_int("tokens_per_image", 576, 1, 65536));
  o.distinct_images = static_cast<std::int32_t>(n.get_int("distinct_images", 1, 10'000'000));
  o.fraction = n.get_double("fraction", 1.0, 0.0, 1.0);
  o.zipf_s = n.get_double("zipf_s", 0.0, 0.0, 100.0);
  if (o.zipf_s > 0 && o.distinct_images > 1'000'000) {
    n.at("distinct_images").fail("at most 1000000 images with zipf_s > 0");
  }
  if (n.has("position")) o.at_end = n.at("position").as_choice({"start", "end"}) == "end";
  return o;
}

MultimodalWorkload::MultimodalWorkload(std::unique_ptr<Workload> inner, MultimodalOptions options,
                                       std::uint64_t seed)
    : WorkloadDecorator(std::move(inner)),
      options_(options),
      seed_(seed),
      rng_(Rng::stream(seed, "multimodal")),
      image_rng_(Rng::stream(seed, "multimodal-images")) {
  if (options_.zipf_s > 0) {
    zipf_cdf_.resize(static_cast<std::size_t>(options_.distinct_images));
    double sum = 0;
    for (std::size_t r = 0; r < zipf_cdf_.size(); ++r) {
      sum += std::pow(static_cast<double>(r + 1), -options_.zipf_s);
      zipf_cdf_[r] = sum;
    }
    for (double& c : zipf_cdf_) c /= sum;
  }
}

std::int32_t MultimodalWorkload::draw_image() {
  if (zipf_cdf_.empty())
    return static_cast<std::int32_t>(image_rng_.uniform_int(0, options_.distinct_images - 1));
  const double u = image_rng_.uniform();
  const auto it = std::upper_bound(zipf_cdf_.begin(), zipf_cdf_.end(), u);
  return static_cast<std::int32_t>(
      std::min<std::ptrdiff_t>(it - zipf_cdf_.begin(), options_.distinct_images - 1));
}

std::optional<RequestSpec> MultimodalWorkload::next() {
  std::optional<RequestSpec> r = inner().next();
  if (!r) return r;
  // One draw a request for the share, from a stream of its own (the images come from another),
  // so whether a request carries images does not depend on the images drawn before it: raising
  // the fraction adds carriers and keeps the others.
  const bool carries = rng_.uniform() < options_.fraction;
  if (!carries) return r;
  const std::int32_t images = options_.images_per_request;
  const std::int32_t per = options_.tokens_per_image;
  std::vector<PromptSegment> placeholders;
  auto inputs = std::make_shared<std::vector<MultimodalInput>>();
  // In 64 bits: a trace's prompt can be near 2^31 tokens; canonicalize() below refuses a total
  // past it.
  const std::int64_t first = options_.at_end ? r->prompt_len : 0;
  for (std::int32_t i = 0; i < images; ++i) {
    placeholders.push_back(
        PromptSegment{kImagePlaceholderStream, 0, static_cast<std::uint32_t>(per)});
    inputs->push_back(MultimodalInput{
        static_cast<std::uint32_t>(first + std::int64_t{i} * per), static_cast<std::uint32_t>(per),
        image_content_id(seed_, static_cast<std::uint64_t>(draw_image()))});
  }
  if (options_.at_end) {
    r->prompt.insert(r->prompt.end(), placeholders.begin(), placeholders.end());
  } else {
    r->prompt.insert(r->prompt.begin(), placeholders.begin(), placeholders.end());
  }
  canonicalize(*r);
  // Images the inner workload placed already (a mix part's own `multimodal`) stay, shifted past
  // the new ones when those go first: their content ids are what tells their blocks apart.
  if (r->mm_inputs != nullptr && !r->mm_inputs->empty()) {
    const auto shift = static_cast<std::uint32_t>(std::int64_t{images} * per);
    std::vector<MultimodalInput> earlier = *r->mm_inputs;
    if (options_.at_end) {
      inputs->insert(inputs->begin(), earlier.begin(), earlier.end());
    } else {
      for (MultimodalInput& m : earlier) m.offset += shift;
      inputs->insert(inputs->end(), earlier.begin(), earlier.end());
    }
  }
  r->mm_inputs = std::move(inputs);
  return r;
}

std::string MultimodalWorkload::describe() const {
  char share[48];
  if (options_.fraction >= 1.0) {
    std::snprintf(share, sizeof share, "every request");
  } else {
    std::snprintf(share, sizeof share, "%g%% of requests", 100.0 * options_.fraction);
  }
  char buf[240];
  std::snprintf(
      buf, sizeof buf, ", %d image(s) of %d tokens on %s (%d distinct, %s, at the %s)",
      options_.images_per_request, options_.tokens_per_image, share, options_.distinct_images,
      options_.zipf_s > 0 ? ("zipf " + std::to_string(options_.zipf_s)).c_str() : "uniform",
      options_.at_end ? "end" : "start");
  return inner().describe() + buf;
}

}  // namespace servelab
