// The pieces of `engine serve` below HTTP: the OpenAI request parser's defaults and limits (with
// the tiny model's byte tokenizer and the plain chat format), the Prometheus histogram's buckets,
// and the hand-over queue's bound and drain.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "engine/openai_api.h"
#include "engine/serve_metrics.h"
#include "engine/serve_queue.h"
#include "serving/home.h"
#include "serving/tokenizer.h"

namespace servelab {
namespace {

TEST(OpenAiApi, DefaultsAndContextLimits) {
  const std::unique_ptr<Tokenizer> bytes =
      load_tokenizer(home_path("data/tokenizers/bytes/tokenizer.json"));
  const Tokenizer& tok = *bytes;
  const ApiLimits limits{"tiny", 256, 64};
  CompletionRequest r = parse_completion_request("{\"prompt\": \"abc\"}", false, limits, tok);
  EXPECT_EQ(r.prompt, (std::vector<std::int32_t>{'a', 'b', 'c'}));
  EXPECT_EQ(r.max_tokens, 16);  // OpenAI's default for completions
  EXPECT_FALSE(r.stream);
  r = parse_completion_request("{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}", true,
                               limits, tok);
  EXPECT_EQ(r.prompt.size(), std::string("user: hi\nassistant: ").size());
  EXPECT_EQ(r.max_tokens, 64 - static_cast<std::int32_t>(r.prompt.size()));  // rest of context
  r = parse_completion_request("{\"prompt\": [[5, 6]], \"max_tokens\": 62}", false, limits, tok);
  EXPECT_EQ(r.prompt, (std::vector<std::int32_t>{5, 6}));
  try {
    parse_completion_request("{\"prompt\": [5, 6], \"max_tokens\": 63}", false, limits, tok);
    FAIL() << "over the context";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.code, "context_length_exceeded");
    EXPECT_EQ(e.param, "max_tokens");
    EXPECT_NE(error_json(e).find("\"param\":\"max_tokens\""), std::string::npos);
  }
}

TEST(PromHistogram, BucketsAreCumulativeAndInclusive) {
  PromHistogram h({0.1, 1.0});
  h.observe(0.1);  // on the bound: in le="0.1"
  h.observe(0.5);
  h.observe(7);
  std::string out;
  h.render(out, "m", "a=\"b\"");
  EXPECT_NE(out.find("m_bucket{a=\"b\",le=\"0.1\"} 1\n"), std::string::npos) << out;
  EXPECT_NE(out.find("m_bucket{a=\"b\",le=\"1.0\"} 2\n"), std::string::npos) << out;
  EXPECT_NE(out.find("m_bucket{a=\"b\",le=\"+Inf\"} 3\n"), std::string::npos) << out;
  EXPECT_NE(out.find("m_count{a=\"b\"} 3\n"), std::string::npos) << out;
  EXPECT_EQ(h.sum(), 7.6);
}

TEST(ServeQueue, BoundedAndDraining) {
  const WallClock clock;
  ServeQueue q(2, clock);
  RequestId a = 0, b = 0, c = 0;
  const auto spec = [] { return make_literal_request(0, 0, {1, 2}, 3); };
  EXPECT_EQ(q.submit(spec(), std::make_shared<RequestChannel>(), &a),
            ServeQueue::Submit::kAccepted);
  EXPECT_EQ(q.submit(spec(), std::make_shared<RequestChannel>(), &b),
            ServeQueue::Submit::kAccepted);
  EXPECT_NE(a, b);
  EXPECT_EQ(q.submit(spec(), std::make_shared<RequestChannel>(), &c), ServeQueue::Submit::kFull);
  EXPECT_EQ(q.in_flight(), 2u);
  q.done(a);  // finished: room for one more
  EXPECT_EQ(q.submit(spec(), std::make_shared<RequestChannel>(), &c),
            ServeQueue::Submit::kAccepted);
  q.drain();
  EXPECT_EQ(q.submit(spec(), std::make_shared<RequestChannel>(), &c),
            ServeQueue::Submit::kDraining);
}

}  // namespace
}  // namespace servelab
