// Fuzz target: the Jinja subset (serving/jinja.h) on arbitrary template text.
//
// The input is a template. Parsing may refuse it and rendering may fail, each with a ConfigError
// (jinja::Raised included); anything else (another exception, a crash, a sanitizer report, a
// timeout, more memory than the limit) is a finding. A template that renders must render the
// same text twice (no state survives a render). The context is a small chat, as engine serve
// gives it: messages, add_generation_prompt, tools and documents (none), bos_token and
// eos_token; the bounds are small (RenderOptions: 20,000 steps, 256 KiB values) so that a
// runaway input ends fast.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/config_error.h"
#include "serving/jinja.h"

namespace {

using servelab::jinja::Dict;
using servelab::jinja::Value;

Dict context() {
  auto message = [](const char* role, const char* content) {
    return Value::dict({{"role", Value::string(role)}, {"content", Value::string(content)}});
  };
  return {{"messages", Value::list({message("system", "Be brief.\n"), message("user", "Hi?"),
                                    message("assistant", " Hello. "), message("user", "é😀")})},
          {"add_generation_prompt", Value::boolean(true)},
          {"tools", Value::none()},
          {"documents", Value::none()},
          {"bos_token", Value::string("<s>")},
          {"eos_token", Value::string("</s>")}};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const Dict ctx = context();
  servelab::jinja::RenderOptions options;
  options.now = 1764849600;
  options.max_steps = 20000;
  options.max_size = 256 << 10;
  const std::string source(reinterpret_cast<const char*>(data), size);
  try {
    const servelab::jinja::Template t(source, "fuzz");
    std::string first;
    try {
      first = t.render(ctx, options);
    } catch (const servelab::ConfigError&) {
      return 0;
    }
    if (t.render(ctx, options) != first) {
      std::fprintf(stderr, "jinja_fuzz: two renders differ\n");
      std::abort();
    }
  } catch (const servelab::ConfigError&) {
  }
  return 0;
}
