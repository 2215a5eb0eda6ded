// The Jinja subset (serving/jinja.h) and model chat templates (serving/chat_template.h)
// against Python's Jinja2: tests/data/chat_templates/golden.json holds what Jinja2 3.1 renders,
// in transformers' chat-template environment, for six chat templates in the layouts of Llama 2,
// Mistral, ChatML (Qwen), Llama 3.1 (dated), Gemma and a template of rarer constructs, over five
// conversations, and for short expression templates and error cases
// (tests/data/chat_templates/make_golden.py writes it). Also: loading templates from
// tokenizer_config.json and chat_template.jinja, and the errors a bad template gets.
#include "serving/jinja.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <ctime>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/config_error.h"
#include "serving/chat_template.h"
#include "serving/home.h"
#include "test_util.h"

namespace servelab {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test_util::read_file;
using test_util::temp_dir;
using test_util::write_file;

const fs::path kDir = servelab_home() / "tests/data/chat_templates";

jinja::Dict dict_of(const json& object) {
  jinja::Dict out;
  for (const auto& [k, v] : object.items()) out.emplace_back(k, jinja::Value::from_json(v));
  return out;
}

// nlohmann's json sorts object keys; the golden contexts' key order matters where a template
// iterates a dict or prints it, so they are read with ordered_json.
jinja::Value ordered(const nlohmann::ordered_json& j) {
  if (j.is_object()) {
    jinja::Dict items;
    for (const auto& [k, v] : j.items()) items.emplace_back(k, ordered(v));
    return jinja::Value::dict(std::move(items));
  }
  if (j.is_array()) {
    jinja::List items;
    for (const auto& v : j) items.push_back(ordered(v));
    return jinja::Value::list(std::move(items));
  }
  return jinja::Value::from_json(json::parse(j.dump()));
}

struct Golden {
  std::time_t now = 0;
  jinja::Value random_context;  // the random expressions' variables
  nlohmann::ordered_json cases;
};

const Golden& golden() {
  static const Golden g = [] {
    const auto doc = nlohmann::ordered_json::parse(read_file(kDir / "golden.json"));
    return Golden{doc["now"].get<std::time_t>(), ordered(doc["random_context"]), doc["cases"]};
  }();
  return g;
}

// The golden file's clock is UTC.
jinja::RenderOptions options() {
  setenv("TZ", "UTC", 1);
  tzset();
  return jinja::RenderOptions{golden().now};
}

bool is_random(const nlohmann::ordered_json& c) {
  return c["name"].get<std::string>().starts_with("random");
}

// The error loading `source` gives ("(no error)" when it loads).
std::string load_error(const std::string& source) {
  try {
    jinja::Template(source, "t.jinja");
  } catch (const ConfigError& e) {
    return std::string(e.what());
  }
  return std::string("(no error)");
}

// A golden expression case rendered with its context.
std::string render_expression(const nlohmann::ordered_json& c) {
  const jinja::Value context = is_random(c) ? golden().random_context : ordered(c["context"]);
  return jinja::Template(c["source"].get<std::string>(), "expr")
      .render(context.as_dict(), options());
}

TEST(Jinja, ChatTemplatesRenderAsJinja2Does) {
  int checked = 0;
  for (const auto& c : golden().cases) {
    if (!c.contains("template")) continue;
    SCOPED_TRACE(c["name"].get<std::string>());
    const std::string file = (kDir / c["template"].get<std::string>()).string();
    const ChatTemplate tmpl(read_file(file), file,
                            dict_of(json::parse(c["special_tokens"].dump())));
    std::vector<ChatMessage> msgs;
    for (const auto& m : c["messages"]) {
      msgs.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
    }
    const bool gen = c["add_generation_prompt"].get<bool>();
    const bool cont = c["continue_final_message"].get<bool>();
    const jinja::Dict extra = dict_of(json::parse(c["extra"].dump()));
    if (c.contains("error")) {
      EXPECT_THROW(tmpl.render(msgs, gen, cont, extra, options()), ConfigError);
    } else {
      EXPECT_EQ(tmpl.render(msgs, gen, cont, extra, options()), c["expected"].get<std::string>());
    }
    ++checked;
  }
  EXPECT_EQ(checked, 7 * 5 * 2 - 7);  // two flag settings per conversation, one for the open one
}

// The hand-written expression templates and error cases: Jinja2's text, or an error where it
// refuses; then 400 random expressions (make_golden.py random_expr, seeded), the same.
void check_expressions(bool random, int min_rendered, int min_refused) {
  int rendered = 0, refused = 0;
  for (const auto& c : golden().cases) {
    if (!c.contains("source") || is_random(c) != random) continue;
    SCOPED_TRACE(c["name"].get<std::string>() + ": " + c["source"].get<std::string>());
    if (c.contains("expected")) {
      try {
        EXPECT_EQ(render_expression(c), c["expected"].get<std::string>());
      } catch (const ConfigError& e) {
        ADD_FAILURE() << "refused: " << e.what();
      }
      ++rendered;
    } else {
      std::string out;
      EXPECT_THROW(out = render_expression(c), ConfigError)
          << "Jinja2: " << c["error"].get<std::string>() << "; here: " << out;
      ++refused;
    }
  }
  EXPECT_GE(rendered, min_rendered);
  EXPECT_GE(refused, min_refused);
}

TEST(Jinja, ExpressionsAndErrorsAsJinja2) { check_expressions(false, 30, 10); }
TEST(Jinja, RandomExpressionsAsJinja2) { check_expressions(true, 150, 50); }

// The golden file is what make_golden.py writes with the Jinja2 of this machine (Debian's
// python3-jinja2, which scripts/bootstrap installs): a live check that no case was edited by
// hand and that Jinja2 still renders them so.
TEST(Jinja, GoldenFileIsWhatJinja2RendersHere) {
  if (std::system("python3 -c 'import jinja2' >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "python3 with jinja2 is not installed (apt-get install python3-jinja2)";
  }
  const std::string cmd = "python3 " + (kDir / "make_golden.py").string() + " --check";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

std::string error_of(const std::string& source, const jinja::Dict& context = {},
                     const jinja::RenderOptions& options = {}) {
  try {
    jinja::Template(source, "t.jinja").render(context, options);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Jinja, ErrorsNameTheLineAndWhat) {
  EXPECT_EQ(error_of("a\n{% if x %}\nb"),
            "t.jinja:2: the if tag opened here is never closed (expected {% endif %})");
  EXPECT_EQ(error_of("{% include 'x' %}"),
            "t.jinja:1: unsupported tag 'include' (the subset has if, for, set, macro, filter, "
            "break, continue, raw, generation)");
  EXPECT_EQ(error_of("\n\n{{ 1 + }}"), "t.jinja:3: expected an expression, got '}}'");
  EXPECT_EQ(error_of("{{ 1 < 2 < 3 }}"),
            "t.jinja:1: chained comparisons (a < b < c) are not supported: use 'and'");
  EXPECT_EQ(error_of("x\n{{ missing.attr }}"), "t.jinja:2: 'missing' is undefined");
  EXPECT_EQ(error_of("{{ m.a.b }}", {{"m", jinja::Value::dict({})}}),
            "t.jinja:1: 'dict object' has no attribute 'a'");
  EXPECT_EQ(error_of("{{ 'x' | frobnicate }}"), "t.jinja:1: unknown filter 'frobnicate'");
  EXPECT_EQ(error_of("{{ 'abc"), "t.jinja:1: a string opened here is never closed");
  EXPECT_EQ(error_of("{% for i in range(200000) %}{% endfor %}"),
            "t.jinja:1: range too big (the sandbox allows 100000 items)");
  EXPECT_EQ(error_of("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}"),
            "t.jinja:1: macro calls nested deeper than 100");
  EXPECT_EQ(error_of("{{ 'a b'.split('') }}"), "t.jinja:1: empty separator");  // jinja_fuzz
  EXPECT_EQ(error_of("{{ 'a b'.rsplit(x ~ '', 1) }}"), "t.jinja:1: empty separator");
  // raise_exception: the template's own message, nothing added.
  try {
    jinja::Template("{{ raise_exception('roles must alternate') }}", "t").render({});
    ADD_FAILURE() << "no exception";
  } catch (const jinja::Raised& e) {
    EXPECT_STREQ(e.what(), "roles must alternate");
  }
}

// A runaway template ends with an error naming the bound (RenderOptions), never a hang, a
// crash or an exhausted machine; 64-bit integers overflow into an error, not a wrong number.
TEST(Jinja, RunawayTemplatesEndWithAnError) {
  jinja::RenderOptions small;
  small.max_steps = 1000;
  small.max_size = 1 << 20;
  const auto error = [&](const std::string& source) { return error_of(source, {}, small); };
  EXPECT_EQ(
      error("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}"
            "{% endfor %}"),
      "t.jinja:1: the template ran more than 1000 steps (loop iterations, macro calls, outputs)");
  EXPECT_EQ(error("{% set ns = namespace(s='x') %}{% for i in range(64) %}"
                  "{% set ns.s = ns.s ~ ns.s %}{% endfor %}"),
            "t.jinja:1: a value larger than 1048576 bytes");
  EXPECT_EQ(error("{{ 'x' * 100000000 }}"), "t.jinja:1: a value larger than 1048576 bytes");
  EXPECT_EQ(error("{{ ['abc'] * 1000000 }}"), "t.jinja:1: a value larger than 1048576 bytes");
  EXPECT_EQ(error("{{ range(1000) | join('x' * 10000) }}"),
            "t.jinja:1: a value larger than 1048576 bytes");
  EXPECT_EQ(error("{{ ('x' * 1000) | replace('x', 'y' * 2000) }}"),
            "t.jinja:1: a value larger than 1048576 bytes");
  EXPECT_EQ(error("{{ 'a\\nb' | indent(100000000) }}"),
            "t.jinja:1: a value larger than 1048576 bytes");
  EXPECT_EQ(error("{{ {'a': [1, 2]} | tojson(indent=100000000) }}"),
            "t.jinja:1: a value larger than 1048576 bytes");
  EXPECT_EQ(error("{% set ns = namespace(l=[]) %}{% for i in range(150) %}"
                  "{% set ns.l = [ns.l] %}{% endfor %}"),
            "t.jinja:1: lists or dicts nested deeper than 100");
  EXPECT_EQ(error("{% set ns = namespace() %}{% set ns.me = [ns] %}"),
            "t.jinja:1: a namespace attribute cannot hold a namespace (ns.me)");
  EXPECT_EQ(error("{{ " + std::string(300, '(') + "1" + std::string(300, ')') + " }}"),
            "t.jinja:1: expressions or tags nested deeper than 200");
  EXPECT_EQ(error("{{ " + std::string(300, '-') + "1 }}"),
            "t.jinja:1: expressions or tags nested deeper than 200");
  std::string ifs;
  for (int i = 0; i < 300; ++i) ifs += "{% if true %}";
  EXPECT_EQ(error(ifs), "t.jinja:1: expressions or tags nested deeper than 200");
  // A long chain (`a ~ b ~ ...`, `x.a.a...`, `x|f|f...`) is as deep as its terms: refused when
  // the template loads, before anything recurses over it.
  std::string concat = "{{ 'x'", attrs = "{{ x", filters = "{{ 1";
  for (int i = 0; i < 10000; ++i) {
    concat += " ~ 'x'";
    attrs += ".a";
    filters += " | string";
  }
  const std::string deep =
      "t.jinja:1: an expression nested or chained deeper than 200 (operators, filters, "
      "attributes, calls)";
  EXPECT_EQ(load_error(concat + " }}"), deep);
  EXPECT_EQ(load_error(attrs + " }}"), deep);
  EXPECT_EQ(load_error(filters + " }}"), deep);
  EXPECT_EQ(load_error("{% macro m(a=" + concat.substr(3) + ") %}{% endmacro %}"), deep);
  std::string chain150 = "{{ ''";
  for (int i = 0; i < 150; ++i) chain150 += " ~ 'x'";
  EXPECT_EQ(jinja::Template(chain150 + " }}", "t").render({}), std::string(150, 'x'));
  // Macro calls x tags x expressions, each within its bound, still end with an error rather
  // than the thread's stack.
  std::string nested = "{% macro m(n) %}";
  for (int i = 0; i < 150; ++i) nested += "{% if true %}";
  nested += "{{ (m(n - 1)" + std::string(150 * 6, ' ') + ") if n > 0 else '' }}";
  for (int i = 0; i < 150; ++i) nested.replace(nested.find("      "), 6, " ~ 'x'");
  for (int i = 0; i < 150; ++i) nested += "{% endif %}";
  nested += "{% endmacro %}{{ m(99) }}";
  EXPECT_EQ(error_of(nested),
            "t.jinja:1: the template nests too deeply (tags, expressions and macro calls)");
  // Work: every byte a string or list operation makes counts, at most 16 x max_size in all.
  EXPECT_EQ(error("{% set s = 'x' * 300000 %}{% for i in range(100) %}{% set t = s ~ '' %}"
                  "{% endfor %}"),
            "t.jinja:1: the template built more than 16777216 bytes of strings and lists "
            "(concatenation, filters, output)");
  EXPECT_EQ(error("{% set s = 'x' * 300000 %}{% for i in range(100) %}{% if s == s ~ 'y' %}"
                  "{% endif %}{% endfor %}"),
            "t.jinja:1: the template built more than 16777216 bytes of strings and lists "
            "(concatenation, filters, output)");
  EXPECT_EQ(error("{% set s = 'x' * 300000 %}{% for i in range(100) %}{{ s | length }}"
                  "{% endfor %}"),
            "t.jinja:1: the template built more than 16777216 bytes of strings and lists "
            "(concatenation, filters, output)");
  EXPECT_EQ(error("{% set s = 'x' * 100000 %}{% for i in range(50) %}{% set t = s ~ '' %}"
                  "{% endfor %}"),
            "(no error)");
  // strftime_now's text is whole however long, within max_size.
  EXPECT_EQ(jinja::Template("{{ strftime_now('%Y' * 1000) | length }}", "t").render({}), "4000");
  for (const char* overflowing :
       {"{{ 2 ** 64 }}", "{{ 9223372036854775807 + 1 }}", "{{ (-9223372036854775807 - 1) // -1 }}",
        "{{ -(-9223372036854775807 - 1) }}", "{{ (-9223372036854775807 - 1) | abs }}",
        "{{ 3037000500 * 3037000500 }}"}) {
    EXPECT_EQ(error(overflowing), "t.jinja:1: integer overflow (the subset's integers are 64-bit)")
        << overflowing;
  }
  EXPECT_EQ(error("{{ range(1, 9223372036854775807, 9223372036854775807) | list }}"), "(no error)");
}

// Filters and tests the renderer does not know are refused when the template loads (as Jinja2
// refuses them when compiling; inside an if, where Jinja2 waits for the render, only the
// Jinja2 built-ins the subset leaves out), so a server refuses the template at start.
TEST(Jinja, UnknownFiltersAndTestsAreRefusedAtLoad) {
  EXPECT_EQ(load_error("{% for m in messages %}\n{{ m | frobnicate }}{% endfor %}"),
            "t.jinja:2: unknown filter 'frobnicate'");
  EXPECT_EQ(load_error("{{ x is frobnicated }}"), "t.jinja:1: unknown test 'frobnicated'");
  EXPECT_EQ(load_error("{% if x %}{{ x | frobnicate }}{% endif %}"), "(no error)");
  EXPECT_EQ(load_error("{% if x %}{{ x | groupby('a') }}{% endif %}"),
            "t.jinja:1: the filter 'groupby' is outside the subset (serving/jinja.h)");
  EXPECT_EQ(load_error("{% macro f() %}{{ x is escaped }}{% endmacro %}"),
            "t.jinja:1: the test 'escaped' is outside the subset (serving/jinja.h)");
  EXPECT_EQ(load_error("{{ x | map('wordwrap') | list }}"),
            "t.jinja:1: the filter 'wordwrap' is outside the subset (serving/jinja.h)");
  EXPECT_EQ(load_error("{{ x | select('escaped') | list }}"),
            "t.jinja:1: the test 'escaped' is outside the subset (serving/jinja.h)");
  EXPECT_EQ(load_error("{{ x | tojson(sort_keys=true) | dictsort | truncate(3) | center }}"),
            "(no error)");
  // Arguments a filter does not take are refused with their name.
  EXPECT_EQ(error_of("{{ {} | tojson(bogus=1) }}"),
            "t.jinja:1: tojson() got an unexpected keyword argument 'bogus'");
  EXPECT_EQ(error_of("{{ raise_exception() }}"),
            "t.jinja:1: raise_exception() takes exactly one argument (the message), got 0");
}

TEST(Jinja, NothingTheTemplateDoesChangesItsInputs) {
  const jinja::Value messages = jinja::Value::list({jinja::Value::string("a")});
  const jinja::Dict context{{"messages", messages}};
  jinja::Template("{% set messages = messages[1:] %}{{ messages | length }}", "t").render(context);
  EXPECT_EQ(messages.as_list().size(), 1u);
  EXPECT_THROW(jinja::Template("{{ messages.append('b') }}", "t").render(context), ConfigError);
  EXPECT_EQ(messages.as_list().size(), 1u);
}

// A JSON integer past int64 (a tool schema's maximum, a tool call's argument) keeps its digits
// as Python's int does, in tojson, str and type tests, never wrapping negative.
TEST(Jinja, IntegersPastInt64KeepTheirDigits) {
  const jinja::Dict context = dict_of(json::parse(R"({"x": 18446744073709551615, "y": 7})"));
  EXPECT_EQ(jinja::Template("{{ x }} {{ x | tojson }} {{ [x, y] | tojson }} {{ x is number }} "
                            "{{ x > y }}",
                            "t")
                .render(context),
            "18446744073709551615 18446744073709551615 [18446744073709551615, 7] True True");
  EXPECT_EQ(jinja::Value::from_json(json::parse("12345678901234567890")).type_name(), "int");
}

// vLLM's detection of a template that takes OpenAI's content parts: a loop over a message's
// content, the messages reached through {% set %}, slices, filters and tests.
TEST(ChatTemplateFiles, ContentFormatIsDetectedAsVllmDetectsIt) {
  using Format = ChatTemplate::ContentFormat;
  const auto format = [](const std::string& source) {
    return ChatTemplate(source, "t").content_format();
  };
  EXPECT_EQ(format("{% for m in messages %}{% for p in m['content'] %}{{ p.text }}{% endfor %}"
                   "{% endfor %}"),
            Format::kOpenAi);
  EXPECT_EQ(format("{% set rest = messages[1:] %}{% set shown = rest | list %}"
                   "{% for m in shown %}{% if m.role == 'user' %}"
                   "{% for p in m.content | selectattr('type', 'eq', 'text') %}{{ p.text }}"
                   "{% endfor %}{% endif %}{% endfor %}"),
            Format::kOpenAi);
  EXPECT_EQ(format("{% for m in messages %}{{ m['content'] }}{% endfor %}"), Format::kString);
  EXPECT_EQ(format("{% for m in other %}{% for p in m.content %}{% endfor %}{% endfor %}"),
            Format::kString);
  for (const char* name : {"llama2.jinja", "mistral.jinja", "chatml_default_system.jinja",
                           "llama3_dated.jinja", "gemma.jinja", "kitchen_sink.jinja"}) {
    EXPECT_EQ(format(read_file(kDir / name)), Format::kString) << name;
  }
  const ChatTemplate parts(read_file(kDir / "content_parts.jinja"), "parts");
  EXPECT_EQ(parts.content_format(), Format::kOpenAi);
  // A message's text parts each reach the template; as a string they are joined.
  const std::vector<ChatMessage> msgs = {{"user", "a\nb", std::nullopt, {" a ", "b"}}};
  EXPECT_EQ(parts.render(msgs, true, false), "<|user|>a | b<|end|>\n<|assistant|>");
  EXPECT_EQ(parts.with_content_format(Format::kString).render(msgs, true, false),
            "<|user|><|end|>\n<|assistant|>");  // a string has no text parts to select
  const ChatTemplate plain("{% for m in messages %}{{ m.content }}{% endfor %}", "plain");
  EXPECT_EQ(plain.render(msgs, false, false), "a\nb");
  EXPECT_EQ(plain.with_content_format(Format::kOpenAi).render(msgs, false, false),
            "[{'type': 'text', 'text': ' a '}, {'type': 'text', 'text': 'b'}]");
}

TEST(ChatTemplateFiles, TokenizerConfigGivesTheTemplateAndItsSpecialTokens) {
  const fs::path dir = temp_dir("chat_template_config");
  write_file(dir / "tokenizer.json", "{}");
  // No template beside the tokenizer: none found.
  EXPECT_EQ(find_chat_template(dir / "tokenizer.json"), nullptr);
  json config = {{"bos_token", {{"__type", "AddedToken"}, {"content", "<s>"}}},
                 {"eos_token", "</s>"},
                 {"chat_template", read_file(kDir / "llama2.jinja")}};
  write_file(dir / "tokenizer_config.json", config.dump());
  const std::vector<ChatMessage> msgs = {{"user", "Hi"}, {"assistant", "Yo"}, {"user", "Bye"}};
  const auto found = find_chat_template(dir / "tokenizer.json");
  ASSERT_NE(found, nullptr);
  EXPECT_EQ(found->render(msgs, true, false), "<s>[INST] Hi [/INST] Yo </s><s>[INST] Bye [/INST]");
  // --chat-template naming the config, a .jinja file (special tokens from the config beside
  // the tokenizer), or the template text itself.
  EXPECT_EQ(
      load_chat_template((dir / "tokenizer_config.json").string(), "")->render(msgs, true, false),
      found->render(msgs, true, false));
  write_file(dir / "plain.jinja",
             "{% for m in messages %}{{ bos_token }}{{ m.content }}{% endfor %}");
  EXPECT_EQ(load_chat_template((dir / "plain.jinja").string(), dir / "tokenizer.json")
                ->render(msgs, true, false),
            "<s>Hi<s>Yo<s>Bye");
  EXPECT_EQ(load_chat_template("{{ messages | length }}", dir / "tokenizer.json")
                ->render(msgs, true, false),
            "3");
  // chat_template.jinja beside the tokenizer comes first, as transformers loads it.
  write_file(dir / "chat_template.jinja", "jinja file {{ eos_token }}");
  EXPECT_EQ(find_chat_template(dir / "tokenizer.json")->render(msgs, true, false),
            "jinja file </s>");
  // A list of named templates: "default".
  fs::remove(dir / "chat_template.jinja");
  config["chat_template"] = json::array({{{"name", "tool_use"}, {"template", "tools"}},
                                         {{"name", "default"}, {"template", "default"}}});
  write_file(dir / "tokenizer_config.json", config.dump());
  EXPECT_EQ(find_chat_template(dir / "tokenizer.json")->render(msgs, true, false), "default");
}

TEST(ChatTemplateFiles, BadTemplatesAreClearErrors) {
  const fs::path dir = temp_dir("chat_template_bad");
  auto error = [&](const std::string& arg) {
    try {
      load_chat_template(arg, dir / "tokenizer.json");
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_EQ(error((dir / "none.jinja").string()),
            "--chat-template " + (dir / "none.jinja").string() +
                ": no such file, and not a template (no \"{{\" or \"{%\")");
  write_file(dir / "a.json", R"({"bos_token": "<s>"})");
  EXPECT_EQ(error((dir / "a.json").string()), (dir / "a.json").string() + ": no chat_template key");
  write_file(dir / "b.json", R"({"chat_template": [{"name": "rag", "template": "x"}]})");
  EXPECT_EQ(error((dir / "b.json").string()),
            (dir / "b.json").string() +
                ": chat_template: a list of named templates without one named \"default\"");
  write_file(dir / "c.json", R"({"chat_template": "{% for m in messages %}"})");
  EXPECT_EQ(error((dir / "c.json").string()),
            (dir / "c.json").string() +
                " (chat_template):1: the for tag opened here is never closed (expected {% "
                "endfor %})");
  write_file(dir / "d.json", "{ not json");
  EXPECT_NE(error((dir / "d.json").string()).find("d.json: malformed JSON"), std::string::npos);
}

TEST(ChatTemplateFiles, ContinueFinalMessageCutsAfterTheLastMessage) {
  const ChatTemplate chatml(read_file(kDir / "chatml_default_system.jinja"), "chatml");
  const std::vector<ChatMessage> msgs = {{"user", "Hi"}, {"assistant", "The answer is"}};
  EXPECT_EQ(chatml.render(msgs, false, true),
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
            "Hi<|im_end|>\n<|im_start|>assistant\nThe answer is");
  // Python's strip(): Unicode whitespace around the final message is not part of the cut.
  const std::vector<ChatMessage> spaced = {{"user", "Hi"},
                                           {"assistant", "\u3000The answer is\u00a0"}};
  EXPECT_TRUE(chatml.render(spaced, false, true).ends_with("assistant\n\u3000The answer is"));
  // A template that drops the final message: an error saying so.
  const ChatTemplate dropping("{{ messages[0].content }}", "dropping");
  EXPECT_THROW(dropping.render(msgs, false, true), ConfigError);
}

TEST(ChatTemplateFiles, EncodeChatUsesTheTemplateOverTheBuiltInFormats) {
  const auto tok = load_tokenizer(servelab_home() / "data/tokenizers/bytes/tokenizer.json");
  const ChatTemplate tmpl("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}", "t");
  const std::vector<ChatMessage> msgs = {{"user", "Hi"}};
  EXPECT_EQ(encode_chat(*tok, msgs, true, false, &tmpl), tok->encode("<user>Hi"));
  EXPECT_EQ(encode_chat(*tok, msgs, true, false), tok->encode("user: Hi\nassistant: "));
  const jinja::Dict extra{{"flag", jinja::Value::boolean(true)}};
  const ChatTemplate kw("{{ 'on' if flag else 'off' }}", "kw");
  EXPECT_EQ(encode_chat(*tok, msgs, true, false, &kw, extra), tok->encode("on"));
  EXPECT_EQ(encode_chat(*tok, msgs, true, false, &kw), tok->encode("off"));
}

}  // namespace
}  // namespace servelab
