// MultimodalWorkload: synthetic images on the requests of any workload (`workload.multimodal`),
// so that the prefix cache's multimodal extra keys (core/block_hash.h) meet image reuse.
//
// Each request that carries images (a share `fraction` of them, drawn per request) gets
// `images_per_request` images, each drawn from `distinct_images` images (uniformly, or by a
// Zipf law of exponent `zipf_s` over image ranks). An image is `tokens_per_image` placeholder
// tokens inserted into the prompt (before the text, or after it: `position`) plus a
// MultimodalInput naming the image's content id: every image's placeholder tokens are the same
// tokens (one placeholder stream, as a model's repeated <image> token id), and only the content
// id tells images apart, as vLLM's mm_hash does. The prompt grows by the placeholder tokens.
//
// YAML, inside any synthetic or trace `workload:` section:
//
//   multimodal:
//     images_per_request: 1   # (>= 1) images on a request that carries images
//     tokens_per_image: 576   # (>= 1) placeholder tokens per image (LLaVA-1.5: 576)
//     distinct_images: 100    # (>= 1) the images requests draw from
//     fraction: 1.0           # ([0, 1]) share of requests that carry images (default 1)
//     zipf_s: 0               # (>= 0) image popularity: 0 uniform (default), s > 0 Zipf(s)
//     position: start         # start (default): images before the prompt text; end: after it
//
// Images a wrapped workload placed already (a mix part's own `multimodal` under a mix-level one)
// are kept, their offsets shifted past images inserted before them.
// Whether a request carries images comes from Rng::stream(seed, "multimodal") (one draw a
// request: the carriers of a larger fraction include those of a smaller one), which images from
// Rng::stream(seed, "multimodal-images"); image content ids from the seed. The vision
// encoder is not charged by the cost model (docs/experiments.md "multimodal").
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/rng.h"
#include "serving/config_node.h"
#include "traces/workload.h"

namespace servelab {

struct MultimodalOptions {
  std::int32_t images_per_request = 1;
  std::int32_t tokens_per_image = 576;
  std::int32_t distinct_images = 100;
  double fraction = 1.0;
  double zipf_s = 0.0;
  bool at_end = false;  // position: end
};

// Reads `multimodal:` of a workload section (nullopt when absent). Throws ConfigError naming
// the key for an invalid value.
std::optional<MultimodalOptions> parse_multimodal_options(const ConfigNode& section);

// The content stream of image placeholder tokens (the same for every image).
inline constexpr std::uint64_t kImagePlaceholderStream = 0x696d6167655f7068ULL;  // "image_ph"

// The content id (vLLM's mm_hash) of image `index` of a run seeded with `seed`.
inline constexpr std::uint64_t image_content_id(std::uint64_t seed, std::uint64_t index) {
  return unique_content_id(mix64(seed ^ 0x696d61676573ULL), index);  // "images"
}

class MultimodalWorkload : public WorkloadDecorator {
 public:
  MultimodalWorkload(std::unique_ptr<Workload> inner, MultimodalOptions options,
                     std::uint64_t seed);

  std::optional<RequestSpec> next() override;
  std::string describe() const override;

 private:
  std::int32_t draw_image();

  MultimodalOptions options_;
  std::uint64_t seed_;
  Rng rng_;                       // the carriers
  Rng image_rng_;                 // the images they carry
  std::vector<double> zipf_cdf_;  // zipf_s > 0: cumulative probabilities of image ranks
};

}  // namespace servelab
