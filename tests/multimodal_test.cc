// Multimodal inputs in the simulator (`workload.multimodal`, traces/multimodal_workload.h): the
// workload puts image placeholder tokens in the prompts with each image's content id, block
// hashes take the ids as extra keys (core/block_hash.h), so requests that reuse an image hit the
// prefix cache and different images behind identical placeholder tokens never do. Bad values are
// exit code 2 naming the key.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "serving/config_node.h"
#include "tests/test_util.h"
#include "traces/multimodal_workload.h"
#include "traces/workload.h"

namespace servelab {
namespace {

using namespace servelab::test_util;

const std::string kWorkload =
    "  type: synthetic\n  num_requests: 60\n  arrival: {process: poisson, rate: 20}\n"
    "  prompt_len: {dist: uniform, min: 20, max: 60}\n  output_len: {dist: fixed, value: 8}\n";

std::string Experiment(const std::string& extra) {
  return "name: mm\nseed: 11\nmodel: tiny\nhardware: H100-SXM\nserving:\n  block_size: 16\n"
         "  num_gpu_blocks: 512\n  max_model_len: 1024\n"
         "workload:\n" +
         kWorkload + extra;
}

TEST(MultimodalWorkload, PlaceholdersAndInputsInThePrompt) {
  const ConfigNode root = ConfigNode::load_string(
      "workload:\n" + kWorkload +
          "  multimodal: {images_per_request: 2, tokens_per_image: 10, distinct_images: 3, "
          "position: end}\n",
      "w.yaml");
  const std::unique_ptr<Workload> w = make_workload(root.at("workload"), 11, ".");
  std::map<std::uint64_t, int> images;
  int n = 0;
  while (const std::optional<RequestSpec> r = w->next()) {
    ++n;
    ASSERT_NE(r->mm_inputs, nullptr);
    ASSERT_EQ(r->mm_inputs->size(), 2u);
    EXPECT_GE(r->prompt_len, 20 + 20);
    for (std::size_t i = 0; i < 2; ++i) {
      const MultimodalInput& in = (*r->mm_inputs)[i];
      EXPECT_EQ(in.length, 10u);
      EXPECT_EQ(in.offset, static_cast<std::uint32_t>(r->prompt_len - 20 + 10 * i));  // at the end
      for (std::uint32_t p = in.offset; p < in.offset + in.length; ++p) {
        const TokenId t = token_identity(*r, static_cast<std::int32_t>(p));
        EXPECT_EQ(t.content_id, kImagePlaceholderStream);  // the same tokens for every image
        EXPECT_EQ(t.offset, p - in.offset);
      }
      ++images[in.content_id];
    }
  }
  EXPECT_EQ(n, 60);
  EXPECT_EQ(images.size(), 3u);  // drawn from the distinct images
}

// A mix-level `multimodal` over a part with its own images keeps the part's images, shifted
// past the new ones it inserts at the start: every request then has both, at their places.
TEST(MultimodalWorkload, AMixsImagesJoinItsPartsImages) {
  const ConfigNode root = ConfigNode::load_string(
      "workload:\n  type: mix\n  parts:\n    - class: a\n      workload:\n" +
          std::string("        type: synthetic\n        num_requests: 20\n") +
          "        arrival: {process: poisson, rate: 20}\n"
          "        prompt_len: {dist: fixed, value: 30}\n        output_len: {dist: fixed, value: "
          "4}\n"
          "        multimodal: {images_per_request: 1, tokens_per_image: 10, distinct_images: "
          "1000, "
          "position: start}\n"
          "  multimodal: {images_per_request: 1, tokens_per_image: 4, distinct_images: 1}\n",
      "w.yaml");
  const std::unique_ptr<Workload> w = make_workload(root.at("workload"), 11, ".");
  std::map<std::uint64_t, int> part_images;
  int n = 0;
  while (const std::optional<RequestSpec> r = w->next()) {
    ++n;
    ASSERT_NE(r->mm_inputs, nullptr);
    ASSERT_EQ(r->mm_inputs->size(), 2u);
    EXPECT_EQ(r->prompt_len, 4 + 10 + 30);
    const MultimodalInput& mix = (*r->mm_inputs)[0];
    const MultimodalInput& part = (*r->mm_inputs)[1];
    EXPECT_EQ(mix.offset, 0u);
    EXPECT_EQ(mix.length, 4u);
    EXPECT_EQ(part.offset, 4u);
    EXPECT_EQ(part.length, 10u);
    ++part_images[part.content_id];
  }
  EXPECT_EQ(n, 20);
  EXPECT_GT(part_images.size(), 15u);  // the part's images stay its own (1000 to draw from)
}

// Whether a request carries images is one draw of its own: the carriers at fraction 0.5 are
// among those at 0.6 (the image draws came from the same stream and shifted them: 38 of 94
// differed).
TEST(MultimodalWorkload, ALargerFractionKeepsTheCarriersOfASmallerOne) {
  const auto carriers = [](double fraction) {
    const ConfigNode root =
        ConfigNode::load_string("workload:\n" + kWorkload +
                                    "  multimodal: {tokens_per_image: 10, distinct_images: 50, "
                                    "fraction: " +
                                    std::to_string(fraction) + "}\n",
                                "w.yaml");
    std::set<RequestId> out;
    const std::unique_ptr<Workload> w = make_workload(root.at("workload"), 11, ".");
    while (const std::optional<RequestSpec> r = w->next()) {
      if (r->mm_inputs != nullptr) out.insert(r->id);
    }
    return out;
  };
  const std::set<RequestId> half = carriers(0.5), more = carriers(0.6);
  EXPECT_GT(half.size(), 15u);
  EXPECT_GT(more.size(), half.size());
  EXPECT_TRUE(std::includes(more.begin(), more.end(), half.begin(), half.end()));
}

// A mix-level max_prompt_tokens over a part whose prompts end with an image never splits the
// image: a cut inside it moves to its start (the image dropped with its tokens), a cut past it
// keeps it whole; no input points past the prompt (one did: an image cut off, its entry kept).
TEST(MultimodalWorkload, AMixLevelCutNeverSplitsAnImage) {
  const auto run = [](int cap) {
    const ConfigNode root = ConfigNode::load_string(
        "workload:\n  type: mix\n  transforms: {max_prompt_tokens: " + std::to_string(cap) +
            "}\n  parts:\n    - class: a\n      workload:\n"
            "        type: synthetic\n        num_requests: 5\n"
            "        arrival: {process: poisson, rate: 20}\n"
            "        prompt_len: {dist: fixed, value: 200}\n"
            "        output_len: {dist: fixed, value: 4}\n"
            "        multimodal: {images_per_request: 1, tokens_per_image: 64, distinct_images: 3, "
            "position: end}\n",
        "w.yaml");
    std::vector<RequestSpec> out;
    const std::unique_ptr<Workload> w = make_workload(root.at("workload"), 11, ".");
    while (std::optional<RequestSpec> r = w->next()) out.push_back(std::move(*r));
    return out;
  };
  for (const RequestSpec& r : run(230)) {  // inside the image (200 .. 264)
    EXPECT_EQ(r.prompt_len, 200);
    EXPECT_EQ(r.mm_inputs, nullptr);
  }
  for (const RequestSpec& r : run(100)) {  // before it
    EXPECT_EQ(r.prompt_len, 100);
    EXPECT_EQ(r.mm_inputs, nullptr);
  }
  for (const RequestSpec& r : run(264)) {  // the whole prompt
    EXPECT_EQ(r.prompt_len, 264);
    ASSERT_NE(r.mm_inputs, nullptr);
    EXPECT_EQ(r.mm_inputs->size(), 1u);
  }
}

// Runs the experiment; returns summary.json's prefix_cache hit tokens.
std::int64_t HitTokens(const fs::path& dir, const std::string& name, const std::string& extra) {
  write_file(dir / (name + ".yaml"), Experiment(extra));
  const Cli cli = run_sim(
      "run " + (dir / (name + ".yaml")).string() + " -q --out " + (dir / name).string(), dir);
  EXPECT_EQ(cli.code, 0) << cli.err;
  const auto s = nlohmann::json::parse(read_file(dir / name / "summary.json"));
  return s["prefix_cache"]["hit_tokens"].get<std::int64_t>();
}

TEST(MultimodalWorkload, ImageReuseHitsTheCacheDifferentImagesDoNot) {
  const fs::path dir = temp_dir("mm_sim");
  // Text prompts with no shared content: no hits.
  EXPECT_EQ(HitTokens(dir, "text", ""), 0);
  // One image (64 placeholder tokens, 4 blocks) before every prompt: all but the first request
  // hit its 4 blocks.
  const std::int64_t one =
      HitTokens(dir, "one", "  multimodal: {tokens_per_image: 64, distinct_images: 1}\n");
  EXPECT_EQ(one, 59 * 64);
  // Every request a different image (ten million to draw from): the placeholder tokens are the
  // same, the hashes are not.
  EXPECT_EQ(
      HitTokens(dir, "many", "  multimodal: {tokens_per_image: 64, distinct_images: 10000000}\n"),
      0);
  // A few images: hits in between.
  const std::int64_t few =
      HitTokens(dir, "few", "  multimodal: {tokens_per_image: 64, distinct_images: 8}\n");
  EXPECT_GT(few, 0);
  EXPECT_LT(few, one);
  // Deterministic.
  EXPECT_EQ(HitTokens(dir, "few2", "  multimodal: {tokens_per_image: 64, distinct_images: 8}\n"),
            few);
  EXPECT_EQ(read_file(dir / "few" / "requests.csv"), read_file(dir / "few2" / "requests.csv"));
  fs::remove_all(dir);
}

TEST(MultimodalWorkload, BadKeysAreExitCode2NamingTheKey) {
  const fs::path dir = temp_dir("mm_bad");
  const auto err = [&](const std::string& extra) {
    write_file(dir / "bad.yaml", Experiment(extra));
    const Cli cli =
        run_sim("run " + (dir / "bad.yaml").string() + " --out " + (dir / "out").string(), dir);
    EXPECT_EQ(cli.code, 2) << extra;
    return cli.err;
  };
  for (const char* bad :
       {"  multimodal: {distinct_images: 0}\n", "  multimodal: {tokens_per_image: 4}\n",
        "  multimodal: {distinct_images: 2, fraction: 1.5}\n",
        "  multimodal: {distinct_images: 2, position: middle}\n",
        "  multimodal: {distinct_images: 2, images: 3}\n", "  multimodal: 3\n"}) {
    const std::string e = err(bad);
    EXPECT_NE(e.find("bad.yaml:"), std::string::npos) << bad << e;
    EXPECT_NE(e.find("workload.multimodal"), std::string::npos) << bad << e;
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace servelab
