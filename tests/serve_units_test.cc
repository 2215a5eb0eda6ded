// The pieces of `engine serve` below HTTP: the OpenAI request parser's defaults and limits (with
// the tiny model's byte tokenizer and the plain chat format), the Prometheus histogram's buckets,
// and the hand-over queue's bound and drain.
#include <gtest/gtest.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "core/config_error.h"
#include "core/lora_config.h"
#include "core/output_constraint.h"
#include "engine/openai_api.h"
#include "engine/serve_metrics.h"
#include "engine/serve_queue.h"
#include "engine/stop_strings.h"
#include "engine/token_trie.h"
#include "engine/tool_parser.h"
#include "serving/chat_template.h"
#include "serving/home.h"
#include "serving/lora_modules.h"
#include "serving/tokenizer.h"
#include "tests/test_util.h"

namespace servelab {
namespace {

using test_util::read_file;
using test_util::temp_dir;
using test_util::write_file;
namespace fs = std::filesystem;

TEST(OpenAiApi, DefaultsAndContextLimits) {
  const std::unique_ptr<Tokenizer> bytes =
      load_tokenizer(home_path("data/tokenizers/bytes/tokenizer.json"));
  const Tokenizer& tok = *bytes;
  const ApiLimits limits{"tiny", 256, 64, {}};
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

// Chat messages as clients send them: content as a string or as OpenAI's content parts (text
// parts joined by "\n", as vLLM joins them; other parts refused); vLLM's add_generation_prompt
// and continue_final_message (not both).
TEST(OpenAiApi, ChatContentPartsAndGenerationPrompt) {
  const std::unique_ptr<Tokenizer> bytes =
      load_tokenizer(home_path("data/tokenizers/bytes/tokenizer.json"));
  const ApiLimits limits{"tiny", 256, 256, {}};
  const auto prompt_of = [&](const std::string& body) {
    const std::vector<std::int32_t> ids =
        parse_completion_request(body, true, limits, *bytes).prompt;
    return std::string(ids.begin(), ids.end());  // the byte tokenizer: one token a byte
  };
  EXPECT_EQ(prompt_of(R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
                          {"type": "text", "text": "b"}]}]})"),
            "user: a\nb\nassistant: ");
  EXPECT_EQ(prompt_of(R"({"messages": [{"role": "user", "content": []}]})"), "user: \nassistant: ");
  EXPECT_EQ(prompt_of(R"({"messages": [{"role": "user", "content": "q"}],
                          "add_generation_prompt": false})"),
            "user: q\n");
  EXPECT_EQ(prompt_of(R"({"messages": [{"role": "user", "content": "q"},
                          {"role": "assistant", "content": "The answer is"}],
                          "add_generation_prompt": false, "continue_final_message": true})"),
            "user: q\nassistant: The answer is");
  // OpenAI's "developer" role reaches the format as it is (vLLM's), an unknown one is refused.
  EXPECT_EQ(prompt_of(R"({"messages": [{"role": "developer", "content": "be brief"},
                          {"role": "user", "content": "q"}]})"),
            "developer: be brief\nuser: q\nassistant: ");
  const std::vector<std::string> bad = {
      R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]})",
      R"({"messages": [{"role": "user", "content": [{"type": "text"}]}]})",
      R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "a", "x": 1}]}]})",
      R"({"messages": [{"role": "user", "content": ["a"]}]})",
      R"({"messages": [{"role": "user", "content": 5}]})",
      R"({"messages": [{"role": "user"}]})",
      R"({"messages": [{"role": "user", "content": "q"}], "continue_final_message": true})",
      R"({"messages": [{"role": "user", "content": "q"}], "add_generation_prompt": 1})",
      R"({"messages": [{"role": "narrator", "content": "q"}]})",
  };
  for (const std::string& body : bad) {
    try {
      parse_completion_request(body, true, limits, *bytes);
      ADD_FAILURE() << "accepted " << body;
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400) << body;
    }
  }
  try {
    parse_completion_request(bad[0], true, limits, *bytes);
  } catch (const ApiError& e) {
    EXPECT_NE(std::string(e.what()).find("'image_url'"), std::string::npos) << e.what();
  }
  // Completions know neither field.
  EXPECT_THROW(parse_completion_request(R"({"prompt": "a", "add_generation_prompt": false})", false,
                                        limits, *bytes),
               ApiError);
}

// The byte tokenizer whose post_processor puts id 2 ("<s>") before a sequence.
nlohmann::json bytes_with_bos() {
  nlohmann::json doc =
      nlohmann::json::parse(read_file(home_path("data/tokenizers/bytes/tokenizer.json")));
  doc["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", {{{"SpecialToken", {{"id", "<s>"}}}}, {{"Sequence", {{"id", "A"}}}}}},
      {"special_tokens", {{"<s>", {{"ids", {2}}}}}}};
  return doc;
}

std::unique_ptr<Tokenizer> load_doc(const nlohmann::json& doc, const fs::path& dir) {
  write_file(dir / "tokenizer.json", doc.dump());
  return load_tokenizer(dir / "tokenizer.json");
}

// vLLM's add_special_tokens: a completions text prompt goes between the tokenizer's
// post_processor tokens by default (Llama 3's <|begin_of_text|>; here a byte tokenizer whose
// template puts id 2 first), token-id prompts never; chat adds them only when asked. vLLM's
// /tokenize encodes the same way, /detokenize takes ids of the vocabulary.
TEST(OpenAiApi, AddSpecialTokensAsVllm) {
  const fs::path dir = temp_dir("add_special_tokens");
  const std::unique_ptr<Tokenizer> tok = load_doc(bytes_with_bos(), dir);
  const ApiLimits limits{"tiny", 256, 256, {}};
  const auto prompt = [&](const std::string& body, bool chat = false) {
    return parse_completion_request(body, chat, limits, *tok).prompt;
  };
  using Ids = std::vector<std::int32_t>;
  EXPECT_EQ(prompt(R"({"prompt": "ab"})"), (Ids{2, 'a', 'b'}));
  EXPECT_EQ(prompt(R"({"prompt": "ab", "add_special_tokens": false})"), (Ids{'a', 'b'}));
  EXPECT_EQ(prompt(R"({"prompt": [7, 8]})"), (Ids{7, 8}));
  const CompletionRequest batch =
      parse_completion_request(R"({"prompt": ["ab", "c"]})", false, limits, *tok);
  EXPECT_EQ(batch.prompt, (Ids{2, 'a', 'b'}));
  ASSERT_EQ(batch.more_prompts.size(), 1u);
  EXPECT_EQ(batch.more_prompts[0], (Ids{2, 'c'}));
  const std::string chat = R"({"messages": [{"role": "user", "content": "hi"}])";
  const Ids plain = prompt(chat + "}", true);
  EXPECT_EQ(plain.front(), 'u');
  Ids with = plain;
  with.insert(with.begin(), 2);
  EXPECT_EQ(prompt(chat + R"(, "add_special_tokens": true})", true), with);
  EXPECT_THROW(prompt(R"({"prompt": "ab", "add_special_tokens": "yes"})"), ApiError);
  // vLLM's /tokenize encodes as the completion endpoints do.
  EXPECT_EQ(parse_tokenize_request(R"({"prompt": "ab"})", limits, *tok), (Ids{2, 'a', 'b'}));
  EXPECT_EQ(
      parse_tokenize_request(R"({"prompt": "ab", "add_special_tokens": false})", limits, *tok),
      (Ids{'a', 'b'}));
  EXPECT_EQ(parse_tokenize_request(chat + "}", limits, *tok), plain);
  EXPECT_EQ(parse_tokenize_request(R"({"model": "tiny", "messages": [{"role": "user", "content":
                                      "hi"}], "add_generation_prompt": false})",
                                   limits, *tok),
            prompt(chat + R"(, "add_generation_prompt": false})", true));
  EXPECT_EQ(tokenize_json(Ids{2, 97}, 256),
            R"({"count":2,"max_model_len":256,"token_strs":null,"tokens":[2,97]})");
  // vLLM's return_token_strs: each id's token as tokenizer.json writes it (the byte alphabet:
  // a space is "Ġ"; the post-processor's id 2 is byte 2, "Ă"; 300 no token).
  bool strs = false;
  const Ids ids = parse_tokenize_request(R"({"prompt": "a b", "return_token_strs": true})", limits,
                                         *tok, &strs);
  EXPECT_TRUE(strs);
  EXPECT_EQ(tokenize_json(ids, 256, tok.get()),
            "{\"count\":4,\"max_model_len\":256,\"token_strs\":[\"\u0102\",\"a\",\"\u0120\",\"b\"],"
            "\"tokens\":[2,97,32,98]}");
  EXPECT_EQ(tokenize_json(Ids{300}, 256, tok.get()),
            R"({"count":1,"max_model_len":256,"token_strs":[null],"tokens":[300]})");
  parse_tokenize_request(R"({"prompt": "a"})", limits, *tok, &strs);
  EXPECT_FALSE(strs);
  EXPECT_EQ(parse_detokenize_request(R"({"tokens": [104, 105]})", limits), (Ids{104, 105}));
  EXPECT_EQ(detokenize_json("hi"), R"({"prompt":"hi"})");
  const std::vector<std::pair<std::string, std::string>> bad = {
      {R"({"prompt": "a", "messages": []})", "messages"},
      {R"({})", "prompt"},
      {R"({"prompt": [1, 2]})", "prompt"},
      {R"({"prompt": "a", "return_token_strs": "yes"})", "return_token_strs"},
      {R"({"prompt": "a", "add_generation_prompt": true})", "add_generation_prompt"},
      {R"({"prompt": "a", "max_tokens": 3})", "max_tokens"},
  };
  for (const auto& [body, param] : bad) {
    try {
      parse_tokenize_request(body, limits, *tok);
      ADD_FAILURE() << "accepted " << body;
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400) << body;
      EXPECT_EQ(e.param, param) << body;
    }
  }
  for (const char* body : {R"({"tokens": [256]})", R"({"tokens": "ab"})", R"({})"}) {
    try {
      parse_detokenize_request(body, limits);
      ADD_FAILURE() << "accepted " << body;
    } catch (const ApiError& e) {
      EXPECT_EQ(e.param, "tokens") << body;
    }
  }
  try {
    parse_detokenize_request(R"({"model": "other", "tokens": [1]})", limits);
    ADD_FAILURE() << "another model accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 404);
  }
  fs::remove_all(dir);
}

// A body that is not UTF-8 (found by openai_fuzz: a malformed body whose parse error quotes an
// invalid byte) is a 400 whose error JSON carries U+FFFD, not an exception out of error_json
// (the server answered 500).
// The server's chat template (vLLM's --chat-template; serving/chat_template.h): chat bodies
// and chat-shaped /tokenize bodies render through it, chat_template_kwargs reach it, its
// raise_exception is a 400 carrying its message, and a request's own template is refused.
TEST(OpenAiApi, ChatTemplateOfTheServer) {
  const std::unique_ptr<Tokenizer> tok =
      load_tokenizer(servelab_home() / "data/tokenizers/bytes/tokenizer.json");
  ApiLimits limits{"tiny", 256, 256, {}};
  limits.chat_template = std::make_shared<const ChatTemplate>(
      "{% for m in messages %}{% if m.role == 'system' %}"
      "{{ raise_exception('no system messages, ' ~ m.content) }}{% endif %}"
      "[{{ m.content }}]{% endfor %}{% if add_generation_prompt %}>{{ suffix }}{% endif %}",
      "test-template");
  const std::string user = R"({"messages": [{"role": "user", "content": "hi"}])";
  const auto chat = [&](const std::string& body) {
    return parse_completion_request(body, true, limits, *tok).prompt;
  };
  EXPECT_EQ(chat(user + "}"), tok->encode("[hi]>"));
  EXPECT_EQ(chat(user + R"(, "chat_template_kwargs": {"suffix": "A:"}})"), tok->encode("[hi]>A:"));
  EXPECT_EQ(chat(user + R"(, "add_generation_prompt": false})"), tok->encode("[hi]"));
  EXPECT_EQ(parse_tokenize_request(user + R"(, "add_generation_prompt": false})", limits, *tok),
            tok->encode("[hi]"));
  const auto error = [&](const std::string& body) {
    try {
      chat(body);
    } catch (const ApiError& e) {
      return std::to_string(e.status) + " " + e.param + ": " + e.what();
    }
    return std::string("(no error)");
  };
  EXPECT_EQ(error(R"({"messages": [{"role": "system", "content": "be brief"}]})"),
            "400 messages: 'messages': no system messages, be brief");
  EXPECT_EQ(error(user + R"(, "chat_template_kwargs": [1]})"),
            "400 chat_template_kwargs: 'chat_template_kwargs': expected an object");
  EXPECT_EQ(error(user + R"(, "chat_template_kwargs": {"messages": []}})"),
            "400 chat_template_kwargs: 'chat_template_kwargs.messages': set by the request "
            "itself, not here");
  EXPECT_EQ(error(user + R"(, "chat_template": "{{ 1 }}"})").substr(0, 47),
            "400 chat_template: 'chat_template': a request's");
  // A message's name reaches the template (vLLM passes it on); it must be a string.
  ApiLimits named = limits;
  named.chat_template = std::make_shared<const ChatTemplate>(
      "{% for m in messages %}{{ m.name | default('-') }}:{{ m.content }};{% endfor %}", "names");
  EXPECT_EQ(parse_completion_request(R"({"messages": [{"role": "user", "content": "a", "name":
                                       "ann"}, {"role": "user", "content": "b"}]})",
                                     true, named, *tok)
                .prompt,
            tok->encode("ann:a;-:b;"));
  EXPECT_EQ(error(R"({"messages": [{"role": "user", "content": "a", "name": 7}]})"),
            "400 messages: 'messages': expected a string 'name'");
  // A template that loops over a message's content gets OpenAI's text parts, each as sent.
  ApiLimits parts = limits;
  parts.chat_template = std::make_shared<const ChatTemplate>(
      "{% for m in messages %}{% for p in m.content %}({{ p.text }}){% endfor %}{% endfor %}",
      "parts");
  EXPECT_EQ(parse_completion_request(R"({"messages": [{"role": "user", "content": [{"type":
                                       "text", "text": "a"}, {"type": "text", "text": "b"}]},
                                       {"role": "user", "content": "c"}]})",
                                     true, parts, *tok)
                .prompt,
            tok->encode("(a)(b)(c)"));
  // continue_final_message: the template's text cut after the last message.
  EXPECT_EQ(chat(R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant",
                "content": "The"}], "add_generation_prompt": false,
                "continue_final_message": true})"),
            tok->encode("[q][The"));
  // Without a template (the built-in formats) chat_template_kwargs has nothing to reach.
  limits.chat_template = nullptr;
  EXPECT_EQ(error(user + R"(, "chat_template_kwargs": {"suffix": "A:"}})"),
            "400 chat_template_kwargs: 'chat_template_kwargs': the server renders chats with a "
            "built-in format, not a template (start engine serve with --chat-template, or a "
            "tokenizer whose tokenizer_config.json has one)");
}

// Chat requests with tools, parsed as the server parses them and rendered with their template:
// the prompt vLLM renders (tests/data/chat_templates/make_golden.py's REQUESTS, rendered by
// Python's Jinja2 after vLLM's conversion: tools as model_dump() gives them, tool calls'
// arguments decoded in their key order, null content as "").
TEST(OpenAiApi, ToolRequestsRenderAsVllmRendersThem) {
  const fs::path dir = servelab_home() / "tests/data/chat_templates";
  const auto golden = nlohmann::ordered_json::parse(read_file(dir / "golden.json"));
  const std::unique_ptr<Tokenizer> tok =
      load_tokenizer(servelab_home() / "data/tokenizers/bytes/tokenizer.json");
  int checked = 0;
  for (const auto& c : golden["cases"]) {
    if (!c.contains("request")) continue;
    SCOPED_TRACE(c["name"].get<std::string>());
    ApiLimits limits{"tiny", 256, 1 << 20, {}};
    const fs::path file = dir / c["request_template"].get<std::string>();
    limits.chat_template = std::make_shared<const ChatTemplate>(read_file(file), file.string());
    limits.tool_parser = make_tool_parser("hermes");
    const std::vector<std::int32_t> ids =
        parse_completion_request(c["request"].dump(), true, limits, *tok).prompt;
    EXPECT_EQ(std::string(ids.begin(), ids.end()), c["expected"].get<std::string>());
    ++checked;
  }
  EXPECT_EQ(checked, 4);
}

// tool_choice, parallel_tool_calls and the shapes of tools and tool messages: what is asked of
// the output (parse_tool_calls, skip_special_tokens off for a parser that reads special tokens),
// and every refusal naming its field.
TEST(OpenAiApi, ToolChoiceAndToolMessages) {
  const std::unique_ptr<Tokenizer> tok =
      load_tokenizer(servelab_home() / "data/tokenizers/bytes/tokenizer.json");
  ApiLimits limits{"tiny", 256, 4096, {}};
  limits.chat_template = std::make_shared<const ChatTemplate>(
      "{{ tools | tojson }}|{% for m in messages %}{{ m.role }}:{{ m.content }}"
      "{{ m.tool_calls | default('') | tojson }}{{ m.tool_call_id | default('') }};{% endfor %}",
      "tools-test");
  limits.tool_parser = make_tool_parser("hermes");
  const std::string user = R"("messages": [{"role": "user", "content": "hi"}])";
  const std::string tool = R"("tools": [{"type": "function", "function": {"name": "f"}}])";
  const auto parse = [&](const std::string& fields, const ApiLimits& l) {
    return parse_completion_request("{" + fields + "}", true, l, *tok);
  };
  const auto prompt = [&](const std::string& fields, const ApiLimits& l) {
    const std::vector<std::int32_t> ids = parse(fields, l).prompt;
    return std::string(ids.begin(), ids.end());
  };
  const auto error = [&](const std::string& fields, const ApiLimits& l) {
    try {
      parse(fields, l);
    } catch (const ApiError& e) {
      return std::to_string(e.status) + " " + e.param + ": " + e.what();
    }
    return std::string("(no error)");
  };
  CompletionRequest r = parse(user + ", " + tool, limits);
  EXPECT_TRUE(r.parse_tool_calls);  // tool_choice "auto" by default with tools
  EXPECT_TRUE(r.parallel_tool_calls);
  EXPECT_FALSE(r.skip_special_tokens);  // hermes reads its tags with the special tokens kept
  r = parse(user + ", " + tool + R"(, "tool_choice": "none", "parallel_tool_calls": false)",
            limits);
  EXPECT_FALSE(r.parse_tool_calls);
  EXPECT_FALSE(r.parallel_tool_calls);
  EXPECT_TRUE(r.skip_special_tokens);
  EXPECT_FALSE(parse(user, limits).parse_tool_calls);
  // The tools reach the template with tool_choice "none" too, unless the server excludes them.
  const std::string f_dumped =
      R"([{"type": "function", "function": {"name": "f", "description": null, "parameters": null}}])";
  EXPECT_EQ(prompt(user + ", " + tool + R"(, "tool_choice": "none")", limits),
            f_dumped + "|user:hi\"\";");
  ApiLimits exclude = limits;
  exclude.exclude_tools_when_tool_choice_none = true;
  EXPECT_EQ(prompt(user + ", " + tool + R"(, "tool_choice": "none")", exclude),
            "null|user:hi\"\";");
  // A conversation with calls and results; /tokenize renders the tools whatever tool_choice.
  const std::string turns =
      R"("messages": [{"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
      "function": {"name": "f", "arguments": "{\"b\": 1, \"a\": [true]}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "ok"}])";
  const std::string rendered =
      f_dumped +
      R"(|assistant:[{"id": "c1", "type": "function", "function": {"name": "f", "arguments": )"
      R"({"b": 1, "a": [true]}}}];tool:ok""c1;)";
  EXPECT_EQ(prompt(turns + ", " + tool + R"(, "add_generation_prompt": false)", limits), rendered);
  const std::vector<std::int32_t> tokenized =
      parse_tokenize_request("{" + turns + ", " + tool + "}", exclude, *tok);
  EXPECT_EQ(std::string(tokenized.begin(), tokenized.end()), rendered);
  // Refusals.
  ApiLimits no_parser = limits;
  no_parser.tool_parser = nullptr;
  EXPECT_EQ(error(user + ", " + tool, no_parser),
            "400 tool_choice: \"auto\" tool choice requires --enable-auto-tool-choice and "
            "--tool-call-parser to be set");
  EXPECT_EQ(prompt(user + ", " + tool + R"(, "tool_choice": "none")", no_parser),
            f_dumped + "|user:hi\"\";");
  // "required" and a named function: forced through structured outputs (no parser needed), on
  // a server with a vocabulary and an end token.
  const std::string required = user + ", " + tool + R"(, "tool_choice": "required")";
  const std::string named =
      user + ", " + tool + R"(, "tool_choice": {"type": "function", "function": {"name": "f"}})";
  EXPECT_EQ(error(required, limits),
            "400 tool_choice: structured outputs need the server's vocabulary, which this server "
            "lacks");
  ApiLimits grammar = no_parser;
  grammar.token_trie = std::make_shared<const TokenTrie>(*tok, 256);
  EXPECT_EQ(error(required, grammar),
            "400 tool_choice: structured outputs need a token that ends the output where its "
            "grammar completes: the model has no EOS token; give stop_token_ids");
  grammar.eos_token_ids = {0};
  for (const std::string& forced : {required, named}) {
    r = parse(forced, grammar);
    EXPECT_TRUE(r.parse_tool_calls);
    ASSERT_NE(r.tool_parser, nullptr);
    EXPECT_TRUE(r.tool_parser->forced());
    ASSERT_TRUE(r.sampling);
    EXPECT_NE(r.sampling->constraint, nullptr);
    EXPECT_EQ(r.sampling->temperature, 0);  // greedy, as without the constraint
  }
  // A reasoning server ('<' and '>' standing for <think> and </think>): the output is held after
  // the model's own </think>, or from its start where the prompt closed the thinking.
  grammar.reasoning_tokens = std::make_pair(std::int32_t{'<'}, std::int32_t{'>'});
  const std::string json_object = R"(, "response_format": {"type": "json_object"})";
  for (const auto& [content, held] : {std::pair<std::string, bool>{"hi", false},
                                      {"hi<", false},
                                      {"hi<x>", true},
                                      {"<x>hi<", false}}) {
    r = parse(R"("messages": [{"role": "user", "content": ")" + content + "\"}]" + json_object,
              grammar);
    ASSERT_TRUE(r.sampling && r.sampling->constraint) << content;
    EXPECT_EQ(r.sampling->constraint->allowed(0, {}, {}) != nullptr, held) << content;
  }
  grammar.reasoning_tokens.reset();
  EXPECT_EQ(error(required + R"(, "response_format": {"type": "json_object"})", grammar),
            "400 tool_choice: 'tool_choice': a forced tool choice already constrains the output; "
            "not with 'response_format'");
  EXPECT_EQ(error(user + ", " + tool +
                      R"(, "tool_choice": {"type": "function", "function": {"name": "g"}})",
                  limits),
            "400 tool_choice: 'tool_choice': no tool named 'g' in 'tools'");
  EXPECT_EQ(error(user + R"(, "tool_choice": "auto")", limits),
            "400 tool_choice: 'tool_choice': needs 'tools' (when using tool_choice, tools must be "
            "set)");
  EXPECT_EQ(error(user + R"(, "tool_choice": "sometimes", )" + tool, limits).substr(0, 55),
            "400 tool_choice: 'tool_choice': expected \"none\", \"auto\"");
  EXPECT_EQ(error(user + R"(, "tools": [{"type": "function", "function": {"name": ""}}])", limits),
            "400 tools: 'tools[0].function.name': expected a non-empty string");
  EXPECT_EQ(error(user + R"(, "tools": [{"type": "code", "function": {"name": "f"}}])", limits),
            "400 tools: 'tools[0].type': expected \"function\"");
  EXPECT_EQ(error(user + R"(, "tools": [{"function": {"name": "f", "params": {}}}])", limits),
            "400 tools: unknown field 'tools[0].function.params'");
  EXPECT_EQ(error(user + R"(, "tools": [{"function": {"name": "f", "parameters": []}}])", limits),
            "400 tools: 'tools[0].function.parameters': expected an object (a JSON Schema)");
  EXPECT_EQ(error(user + ", " + tool + R"(, "parallel_tool_calls": 1)", limits),
            "400 parallel_tool_calls: 'parallel_tool_calls': expected true or false");
  EXPECT_EQ(error(R"("messages": [{"role": "assistant", "tool_calls": [{"id": "c", "type":
                  "function", "function": {"name": "f", "arguments": "{oops"}}]}])",
                  limits),
            "400 messages: 'messages[0].tool_calls[0].function.arguments': not JSON (or nested "
            "more than 256 levels deep)");
  EXPECT_EQ(error(R"("messages": [{"role": "user", "content": "x", "tool_calls": []}])", limits),
            "400 messages: 'messages[0].tool_calls': only an assistant message makes tool calls");
  EXPECT_EQ(error(R"("messages": [{"role": "tool"}])", limits),
            "400 messages: 'messages': expected a 'content' in every message");
  // The built-in formats have no place for tools or tool turns.
  ApiLimits builtin = limits;
  builtin.chat_template = nullptr;
  EXPECT_EQ(error(user + ", " + tool + R"(, "tool_choice": "none")", builtin).substr(0, 78),
            "400 tools: 'tools': the server renders chats with a built-in format, not a tem");
  EXPECT_EQ(error(R"("messages": [{"role": "tool", "content": "x"}])", builtin).substr(0, 53),
            "400 messages: 'messages[0]': tool messages need the m");
}

TEST(OpenAiApi, ErrorsQuotingInvalidUtf8AreStillJson) {
  const std::unique_ptr<Tokenizer> bytes =
      load_tokenizer(home_path("data/tokenizers/bytes/tokenizer.json"));
  const ApiLimits limits{"tiny", 256, 64, {}};
  for (const std::string& body : {std::string("{\"prompt\": \"hi\"}\xf2, \"x\": 1}"),
                                  std::string("{\"prompt\": [1], \"model\": \"\xff\xfe\"}")}) {
    try {
      parse_completion_request(body, false, limits, *bytes);
      ADD_FAILURE() << "accepted";
    } catch (const ApiError& e) {
      EXPECT_GE(e.status, 400);
      EXPECT_LT(e.status, 500);
      const nlohmann::json j = nlohmann::json::parse(error_json(e));  // valid UTF-8 JSON
      EXPECT_TRUE(j["error"]["message"].is_string());
    }
  }
  // A number too large for a double (found by openai_fuzz) is malformed JSON too.
  try {
    parse_completion_request("{\"prompt\": [1], \"max_tokens\": 6e99999}", false, limits, *bytes);
    ADD_FAILURE() << "accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.code, "invalid_json");
  }
  const ApiError e(400, "bad \xc3 byte", "invalid_request_error");
  EXPECT_NE(error_json(e).find("bad \xef\xbf\xbd byte"), std::string::npos) << error_json(e);
}

// vLLM's `priority` (refused when nonzero unless the server schedules by priority, and outside
// 32 bits) and OpenAI's `user`, which becomes the request's tenant (stable, 0 for none).
TEST(OpenAiApi, PriorityAndUser) {
  const std::unique_ptr<Tokenizer> bytes =
      load_tokenizer(home_path("data/tokenizers/bytes/tokenizer.json"));
  const Tokenizer& tok = *bytes;
  ApiLimits limits{"tiny", 256, 64, {}};
  const auto error_of = [&](const std::string& body) -> ApiError {
    try {
      parse_completion_request(body, false, limits, tok);
    } catch (const ApiError& e) {
      return e;
    }
    ADD_FAILURE() << "accepted: " << body;
    return ApiError(0, "", "");
  };
  // Priority 0 (or null) is always fine: it is the default.
  EXPECT_EQ(
      parse_completion_request("{\"prompt\": [1], \"priority\": 0}", false, limits, tok).priority,
      0);
  ApiError e = error_of("{\"prompt\": [1], \"priority\": 2}");
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "priority");
  EXPECT_NE(std::string(e.what()).find("does not schedule by priority"), std::string::npos)
      << e.what();
  limits.priority_scheduling = true;
  EXPECT_EQ(
      parse_completion_request("{\"prompt\": [1], \"priority\": -7}", false, limits, tok).priority,
      -7);
  for (const char* bad : {"1.5", "\"high\"", "2147483648", "-2147483649", "18446744073709551615"}) {
    e = error_of(std::string("{\"prompt\": [1], \"priority\": ") + bad + "}");
    EXPECT_EQ(e.param, "priority") << bad;
    EXPECT_NE(std::string(e.what()).find("a 32-bit integer"), std::string::npos) << e.what();
  }
  // user -> tenant.
  const CompletionRequest r =
      parse_completion_request("{\"prompt\": [1], \"user\": \"alice\"}", false, limits, tok);
  EXPECT_EQ(r.user, "alice");
  EXPECT_EQ(user_tenant(""), 0u);
  EXPECT_EQ(user_tenant("alice"), user_tenant("alice"));
  EXPECT_NE(user_tenant("alice"), user_tenant("bob"));
  for (const char* u : {"alice", "bob", "a", "x-very-long-user-name-0123456789"}) {
    EXPECT_GE(user_tenant(u), 1u) << u;
    EXPECT_LE(user_tenant(u), 0x7fffffffu) << u;
  }
  EXPECT_EQ(error_of("{\"prompt\": [1], \"user\": 5}").param, "user");
}

// A body nested 100,000 levels deep (200 KB) is a 400, not a stack overflow of the server when a
// message quotes it; 256 levels still parse (and fail on the field's type as usual).
TEST(OpenAiApi, DeeplyNestedBodiesAreRefused) {
  const std::unique_ptr<Tokenizer> bytes =
      load_tokenizer(home_path("data/tokenizers/bytes/tokenizer.json"));
  const ApiLimits limits{"tiny", 256, 64, {}};
  auto nested = [](int depth) {
    return "{\"prompt\": [1], \"max_tokens\": " + std::string(depth, '[') +
           std::string(depth, ']') + "}";
  };
  try {
    parse_completion_request(nested(100'000), false, limits, *bytes);
    FAIL() << "accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.code, "invalid_json");
    EXPECT_NE(std::string(e.what()).find("nested more than 256 levels"), std::string::npos)
        << e.what();
  }
  try {
    parse_completion_request(nested(255), false, limits, *bytes);
    FAIL() << "accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, "max_tokens");
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

// Stop strings on the incremental text (vLLM's check_stop_strings): a stop string spanning
// tokens, the cut before or after it, the request's order, min_tokens, an incomplete character.
TEST(StopStrings, MatchesOnTheIncrementalText) {
  StopStrings s({"bc"}, false, 0);
  EXPECT_FALSE(s.update("a", 1));
  EXPECT_FALSE(s.update("ab", 2));
  EXPECT_TRUE(s.update("abcd", 3));  // "c" and "d" came in one token: "d" is dropped too
  EXPECT_EQ(s.matched(), "bc");
  EXPECT_EQ(s.text_end(), 1u);
  StopStrings inc({"bc"}, true, 0);
  EXPECT_FALSE(inc.update("ab", 1));
  EXPECT_TRUE(inc.update("abcd", 2));
  EXPECT_EQ(inc.text_end(), 3u);
  // The first stop string of the list that the new text completes wins.
  StopStrings order({"zz", "d", "c"}, false, 0);
  EXPECT_TRUE(order.update("abcd", 1));
  EXPECT_EQ(order.matched(), "d");
  EXPECT_EQ(order.text_end(), 3u);
  // min_tokens: no stop string before the output has more tokens; text that came before is not
  // searched again (only the new text is).
  StopStrings min({"a"}, false, 2);
  EXPECT_FALSE(min.update("a", 1));
  EXPECT_FALSE(min.update("ab", 2));
  EXPECT_FALSE(min.update("abc", 3));
  EXPECT_TRUE(min.update("abca", 4));
  EXPECT_EQ(min.text_end(), 3u);
  // An incomplete UTF-8 character (decoded as U+FFFD) is not searched until it completes.
  StopStrings utf({"\xC3\xA9"}, false, 0);  // "é"
  EXPECT_FALSE(utf.update("x\xEF\xBF\xBD", 1));
  EXPECT_TRUE(utf.update("x\xC3\xA9", 2));
  EXPECT_EQ(utf.text_end(), 1u);
  StopStrings fffd({"\xEF\xBF\xBD"}, false, 0);
  EXPECT_FALSE(fffd.update("x\xEF\xBF\xBD", 1));  // may still become a character
  EXPECT_TRUE(fffd.update("x\xEF\xBF\xBDy", 2));  // it did not
  EXPECT_EQ(fffd.text_end(), 1u);
}

TEST(StopStrings, StreamingHoldsBackWhatMayBeginAStopString) {
  StopStrings s({"abc", "z"}, false, 0);  // holds back 2 bytes
  EXPECT_EQ(s.sendable("xyzab", false), 3u);
  EXPECT_EQ(s.sendable("xyzab", true), 5u);
  EXPECT_EQ(s.sendable("x", false), 0u);
  // Never splits a character: "é" is two bytes.
  StopStrings one({"ab"}, false, 0);  // holds back 1 byte
  EXPECT_EQ(one.sendable("x\xC3\xA9", false), 1u);
  EXPECT_EQ(one.sendable("x\xC3\xA9y", false), 3u);
  // A trailing incomplete character waits; without stop strings nothing else does.
  StopStrings none;
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(none.sendable("ab\xEF\xBF\xBD", false), 2u);
  EXPECT_EQ(none.sendable("ab\xEF\xBF\xBD", true), 5u);
  // include_stop_str_in_output holds nothing back; after a stop, up to the cut.
  StopStrings inc({"abc"}, true, 0);
  EXPECT_EQ(inc.sendable("xyzab", false), 5u);
  EXPECT_TRUE(s.update("xyzabcq", 1));
  EXPECT_EQ(s.sendable("xyzabcq", false), 3u);
}

TEST(OpenAiApi, StopStringsParse) {
  const std::unique_ptr<Tokenizer> bytes =
      load_tokenizer(home_path("data/tokenizers/bytes/tokenizer.json"));
  const ApiLimits limits{"tiny", 256, 64, {}};
  CompletionRequest r =
      parse_completion_request(R"({"prompt": "a", "stop": "xy"})", false, limits, *bytes);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"xy"}));
  EXPECT_FALSE(r.include_stop_str_in_output);
  r = parse_completion_request(
      R"({"prompt": "a", "stop": ["x", "yz"], "include_stop_str_in_output": true})", false, limits,
      *bytes);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"x", "yz"}));
  EXPECT_TRUE(r.include_stop_str_in_output);
  for (const char* none : {R"({"prompt": "a", "stop": ""})", R"({"prompt": "a", "stop": []})",
                           R"({"prompt": "a", "stop": null})"}) {
    EXPECT_TRUE(parse_completion_request(none, false, limits, *bytes).stop.empty()) << none;
  }
}

// temperature, top_p, seed, n and best_of: absent, the engine's sampling (no RequestSampling)
// and one choice; any of the first three gives the request its own parameters, the missing ones
// at temperature 0 / top_p 1 / no seed; out-of-range values are 400 naming the field.
TEST(OpenAiApi, SamplingParametersAndN) {
  const std::unique_ptr<Tokenizer> bytes =
      load_tokenizer(home_path("data/tokenizers/bytes/tokenizer.json"));
  const ApiLimits limits{"tiny", 256, 64, {}};
  const auto parse = [&](const std::string& body) {
    return parse_completion_request(body, false, limits, *bytes);
  };
  CompletionRequest r = parse(R"({"prompt": "a"})");
  EXPECT_FALSE(r.sampling);
  EXPECT_EQ(r.n, 1);
  r = parse(R"({"prompt": "a", "temperature": 0.7, "top_p": 0.9, "seed": 42, "n": 3})");
  ASSERT_TRUE(r.sampling);
  EXPECT_DOUBLE_EQ(r.sampling->temperature, 0.7);
  EXPECT_DOUBLE_EQ(r.sampling->top_p, 0.9);
  EXPECT_EQ(r.sampling->seed, std::optional<std::uint64_t>(42));
  EXPECT_EQ(r.n, 3);
  r = parse(R"({"prompt": "a", "seed": -1})");
  ASSERT_TRUE(r.sampling);
  EXPECT_EQ(r.sampling->temperature, 0.0);
  EXPECT_EQ(r.sampling->top_p, 1.0);
  EXPECT_EQ(r.sampling->seed, std::optional<std::uint64_t>(~std::uint64_t{0}));
  r = parse(R"({"prompt": "a", "top_p": 0.5})");
  ASSERT_TRUE(r.sampling);
  EXPECT_FALSE(r.sampling->seed);
  // vLLM raises a temperature in (0, 0.01) to 0.01: only 0 is greedy.
  EXPECT_EQ(parse(R"({"prompt": "a", "temperature": 0.000001})").sampling->temperature, 0.01);
  EXPECT_EQ(parse(R"({"prompt": "a", "temperature": 0.005})").sampling->temperature, 0.01);
  EXPECT_EQ(parse(R"({"prompt": "a", "temperature": 0.02})").sampling->temperature, 0.02);
  EXPECT_EQ(parse(R"({"prompt": "a", "temperature": 0})").sampling->temperature, 0.0);
  EXPECT_EQ(parse(R"({"prompt": "a", "temperature": null, "n": null})").sampling, std::nullopt);
  EXPECT_EQ(parse(R"({"prompt": "a", "temperature": 1, "n": 4, "best_of": 4})").n, 4);
  r = parse(R"({"prompt": "a", "presence_penalty": 0.5, "frequency_penalty": -1})");
  ASSERT_TRUE(r.sampling);  // penalties alone: greedy with them
  EXPECT_EQ(r.sampling->temperature, 0.0);
  EXPECT_EQ(r.sampling->presence_penalty, 0.5);
  EXPECT_EQ(r.sampling->frequency_penalty, -1.0);
  EXPECT_FALSE(parse(R"({"prompt": "a", "presence_penalty": 0})").sampling);
  // vLLM's top_k (-1 and 0: every token), min_p, repetition_penalty and OpenAI's logit_bias
  // (ids ascending, each bias clamped to [-100, 100] as vLLM does, zero ones dropped); each alone
  // gives the request its own (greedy) parameters, their neutral values do not.
  r = parse(R"({"prompt": "a", "temperature": 1, "top_k": 40, "min_p": 0.05,
                "repetition_penalty": 1.2, "logit_bias": {"17": 5, "3": -250, "9": 0}})");
  ASSERT_TRUE(r.sampling);
  EXPECT_EQ(r.sampling->top_k, 40);
  EXPECT_EQ(r.sampling->min_p, 0.05);
  EXPECT_EQ(r.sampling->repetition_penalty, 1.2);
  EXPECT_EQ(r.sampling->logit_bias,
            (std::vector<std::pair<std::int32_t, float>>{{3, -100.0f}, {17, 5.0f}}));
  EXPECT_EQ(parse(R"({"prompt": "a", "top_k": 5})").sampling->temperature, 0.0);
  EXPECT_EQ(parse(R"({"prompt": "a", "temperature": 1, "top_k": -1})").sampling->top_k, 0);
  for (const char* neutral :
       {R"({"prompt": "a", "top_k": -1})", R"({"prompt": "a", "top_k": 0, "min_p": 0})",
        R"({"prompt": "a", "repetition_penalty": 1})", R"({"prompt": "a", "logit_bias": {}})",
        R"({"prompt": "a", "logit_bias": {"4": 0}})", R"({"prompt": "a", "logit_bias": null})"}) {
    EXPECT_FALSE(parse(neutral).sampling) << neutral;
  }
  EXPECT_EQ(parse_completion_request(R"({"messages": [{"role": "user", "content": "a"}],
                                         "logit_bias": {"5": 1.5}, "top_k": 2})",
                                     true, limits, *bytes)
                .sampling->logit_bias.size(),
            1u);
  const std::vector<std::pair<std::string, std::string>> bad = {
      {R"({"prompt": "a", "temperature": -0.5})", "temperature"},
      {R"({"prompt": "a", "temperature": "hot"})", "temperature"},
      {R"({"prompt": "a", "top_p": 0})", "top_p"},
      {R"({"prompt": "a", "top_p": 1.5})", "top_p"},
      {R"({"prompt": "a", "seed": 1.5})", "seed"},
      {R"({"prompt": "a", "n": 0})", "n"},
      {R"({"prompt": "a", "n": 1025})", "n"},
      {R"({"prompt": "a", "n": 2.5})", "n"},
      {R"({"prompt": "a", "temperature": 1, "n": 2, "best_of": 3})", "best_of"},
      {R"({"prompt": "a", "best_of": 2})", "best_of"},
      {R"({"prompt": "a", "n": 2})", "n"},  // greedy: vLLM's "n must be 1"
      {R"({"prompt": "a", "temperature": 0, "n": 3})", "n"},
      {R"({"prompt": "a", "presence_penalty": 2.5})", "presence_penalty"},
      {R"({"prompt": "a", "frequency_penalty": "high"})", "frequency_penalty"},
      {R"({"prompt": "a", "top_k": -2})", "top_k"},
      {R"({"prompt": "a", "top_k": 1.5})", "top_k"},
      {R"({"prompt": "a", "top_k": 4294967296})", "top_k"},
      {R"({"prompt": "a", "top_k": 18446744073709551615})", "top_k"},
      {R"({"prompt": "a", "min_p": 1.5})", "min_p"},
      {R"({"prompt": "a", "min_p": -0.1})", "min_p"},
      {R"({"prompt": "a", "repetition_penalty": 0})", "repetition_penalty"},
      {R"({"prompt": "a", "repetition_penalty": "x"})", "repetition_penalty"},
      {R"({"prompt": "a", "logit_bias": [1, 2]})", "logit_bias"},
      {R"({"prompt": "a", "logit_bias": {"256": 1}})", "logit_bias"},
      {R"({"prompt": "a", "logit_bias": {"-1": 1}})", "logit_bias"},
      {R"({"prompt": "a", "logit_bias": {"a7": 1}})", "logit_bias"},
      {R"({"prompt": "a", "logit_bias": {"": 1}})", "logit_bias"},
      {R"({"prompt": "a", "logit_bias": {"7": "up"}})", "logit_bias"},
      {R"({"prompt": "a", "logit_bias": {"7": 1, "07": 2}})", "logit_bias"},
  };
  for (const auto& [body, param] : bad) {
    try {
      parse(body);
      ADD_FAILURE() << "accepted " << body;
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400) << body;
      EXPECT_EQ(e.param, param) << body;
    }
  }
}

// vLLM's allowed_token_ids (ids ascending, repeats dropped) and bad_words (each word without its
// leading whitespace, and " " + word where that is as many tokens starting elsewhere: here a byte
// tokenizer with the merges "Ġa" (256) and "ab" (257)), each alone giving the request its own
// greedy parameters; and truncate_prompt_tokens (the last k tokens; a text prompt keeps its
// special tokens; -1: max_model_len), applied before the context check, a truncated echo decoded.
TEST(OpenAiApi, AllowedTokensBadWordsAndTruncation) {
  nlohmann::json doc = bytes_with_bos();
  doc["model"]["vocab"]["\u0120a"] = 256;
  doc["model"]["vocab"]["ab"] = 257;
  doc["model"]["merges"] = {"\u0120 a", "a b"};
  const fs::path dir = temp_dir("bad_words");
  const std::unique_ptr<Tokenizer> tok = load_doc(doc, dir);
  using Ids = std::vector<std::int32_t>;
  using Words = std::vector<Ids>;
  EXPECT_EQ(bad_word_token_ids("a", *tok), (Words{{'a'}, {256}}));
  EXPECT_EQ(bad_word_token_ids(" \tab", *tok), (Words{{257}}));    // " ab" is 2 tokens
  EXPECT_EQ(bad_word_token_ids("xy", *tok), (Words{{'x', 'y'}}));  // " xy" is 3
  EXPECT_TRUE(bad_word_token_ids(" \n", *tok).empty());
  // Python's lstrip: Unicode whitespace too (U+3000, U+00A0, U+2009), not U+200B.
  EXPECT_EQ(bad_word_token_ids("\u3000\u00a0\u2009ab", *tok), (Words{{257}}));
  EXPECT_TRUE(bad_word_token_ids("\u2028\x1f\u0085", *tok).empty());
  EXPECT_EQ(bad_word_token_ids("\u200bab", *tok).front(), (Ids{0xe2, 0x80, 0x8b, 257}));  // kept
  const ApiLimits limits{"tiny", 300, 64, {}};
  const auto parse = [&](const std::string& body, bool chat = false) {
    return parse_completion_request(body, chat, limits, *tok);
  };
  CompletionRequest r = parse(R"({"prompt": "q", "allowed_token_ids": [9, 3, 9, 40]})");
  ASSERT_TRUE(r.sampling);
  EXPECT_EQ(r.sampling->temperature, 0.0);
  EXPECT_EQ(r.sampling->allowed_token_ids, (Ids{3, 9, 40}));
  r = parse(R"({"prompt": "q", "temperature": 1, "bad_words": ["a", " ab", "xy"]})");
  ASSERT_TRUE(r.sampling);
  EXPECT_EQ(r.sampling->bad_words, (Words{{'a'}, {256}, {257}, {'x', 'y'}}));
  EXPECT_TRUE(r.sampling->allowed_token_ids.empty());
  EXPECT_FALSE(parse(R"({"prompt": "q", "bad_words": []})").sampling);
  EXPECT_FALSE(parse(R"({"prompt": "q", "allowed_token_ids": null})").sampling);
  // spaces_between_special_tokens: accepted (a boolean), nothing changes (vLLM's fast
  // tokenizers ignore it).
  EXPECT_EQ(parse(R"({"prompt": "q", "spaces_between_special_tokens": false})").prompt,
            parse(R"({"prompt": "q"})").prompt);
  EXPECT_THROW(parse(R"({"prompt": "q", "spaces_between_special_tokens": "no"})"), ApiError);
  EXPECT_TRUE(
      parse(R"({"prompt": "q", "return_tokens_as_token_ids": true})").return_tokens_as_token_ids);
  EXPECT_FALSE(parse(R"({"prompt": "q"})").return_tokens_as_token_ids);
  EXPECT_TRUE(parse(R"({"prompt": "q", "return_token_ids": true})").return_token_ids);
  EXPECT_FALSE(parse(R"({"prompt": "q"})").return_token_ids);
  EXPECT_THROW(parse(R"({"prompt": "q", "return_token_ids": 1})"), ApiError);
  // truncate_prompt_tokens.
  EXPECT_EQ(parse(R"({"prompt": [5, 6, 7, 8], "truncate_prompt_tokens": 2})").prompt, (Ids{7, 8}));
  EXPECT_EQ(parse(R"({"prompt": [5, 6], "truncate_prompt_tokens": 3})").prompt, (Ids{5, 6}));
  EXPECT_EQ(parse(R"({"prompt": "wxyz", "truncate_prompt_tokens": 3})").prompt, (Ids{2, 'y', 'z'}));
  EXPECT_EQ(parse(R"({"prompt": "wxyz", "truncate_prompt_tokens": 3, "add_special_tokens": false})")
                .prompt,
            (Ids{'x', 'y', 'z'}));
  r = parse(R"({"prompt": ["wxyz", "ab"], "truncate_prompt_tokens": 2, "echo": true})");
  EXPECT_EQ(r.prompt, (Ids{2, 'z'}));
  EXPECT_EQ(r.echo_text, "");  // truncated: the ids are decoded
  ASSERT_EQ(r.more_prompts.size(), 1u);
  EXPECT_EQ(r.more_prompts[0], (Ids{2, 257}));
  EXPECT_EQ(r.more_echo_texts[0], "ab");  // as sent: not truncated
  const std::string chat = R"({"messages": [{"role": "user", "content": "hi"}])";
  const Ids full = parse(chat + "}", true).prompt;
  EXPECT_EQ(parse(chat + R"(, "truncate_prompt_tokens": 4})", true).prompt,
            Ids(full.end() - 4, full.end()));
  // -1: the model's length. A prompt over it is cut to it, and then leaves no room to generate.
  std::string ids = "[";
  for (int i = 0; i < 70; ++i) ids += std::to_string(i) + (i < 69 ? "," : "]");
  try {
    parse(R"({"prompt": )" + ids + R"(, "truncate_prompt_tokens": -1})");
    ADD_FAILURE() << "no room left";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.code, "context_length_exceeded");
  }
  EXPECT_EQ(parse(R"({"prompt": )" + ids + R"(, "truncate_prompt_tokens": 40})").prompt.front(),
            30);
  const std::vector<std::pair<std::string, std::string>> bad = {
      {R"({"prompt": "q", "allowed_token_ids": []})", "allowed_token_ids"},
      {R"({"prompt": "q", "allowed_token_ids": [300]})", "allowed_token_ids"},
      {R"({"prompt": "q", "allowed_token_ids": [-1]})", "allowed_token_ids"},
      {R"({"prompt": "q", "allowed_token_ids": 5})", "allowed_token_ids"},
      {R"({"prompt": "q", "bad_words": "a"})", "bad_words"},
      {R"({"prompt": "q", "bad_words": [1]})", "bad_words"},
      {R"({"prompt": "q", "bad_words": ["  "]})", "bad_words"},
      {R"({"prompt": "q", "truncate_prompt_tokens": 0})", "truncate_prompt_tokens"},
      {R"({"prompt": "q", "truncate_prompt_tokens": -2})", "truncate_prompt_tokens"},
      {R"({"prompt": "q", "truncate_prompt_tokens": 1.5})", "truncate_prompt_tokens"},
      {R"({"prompt": "q", "truncate_prompt_tokens": 65})", "truncate_prompt_tokens"},
      {R"({"prompt": "qr", "truncate_prompt_tokens": 1})", "truncate_prompt_tokens"},
      {R"({"prompt": "q", "return_tokens_as_token_ids": 1})", "return_tokens_as_token_ids"},
  };
  for (const auto& [body, param] : bad) {
    try {
      parse(body);
      ADD_FAILURE() << "accepted " << body;
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400) << body;
      EXPECT_EQ(e.param, param) << body;
    }
  }
  // A word outside a smaller model's vocabulary; more words than kMaxBadWords.
  const ApiLimits small{"tiny", 256, 64, {}};
  EXPECT_THROW(
      parse_completion_request(R"({"prompt": "q", "bad_words": ["ab"]})", false, small, *tok),
      ApiError);
  nlohmann::json many = {{"prompt", "q"}, {"bad_words", nlohmann::json::array()}};
  for (std::size_t i = 0; i <= kMaxBadWords; ++i) many["bad_words"].push_back("w");
  EXPECT_THROW(parse(many.dump()), ApiError);
  many["bad_words"].erase(0);
  EXPECT_EQ(parse(many.dump()).sampling->bad_words.size(), kMaxBadWords);
  fs::remove_all(dir);
}

// Log probabilities: completions' `logprobs: K`, chat's `logprobs: true` with `top_logprobs: K`
// (0 .. 20); false or null is none; a server that cannot return them refuses them with its reason.
TEST(OpenAiApi, LogprobsFields) {
  const std::unique_ptr<Tokenizer> bytes =
      load_tokenizer(home_path("data/tokenizers/bytes/tokenizer.json"));
  ApiLimits limits{"tiny", 256, 64, {}};
  const std::string chat = R"("messages": [{"role": "user", "content": "hi"}])";
  EXPECT_EQ(parse_completion_request(R"({"prompt": "a"})", false, limits, *bytes).logprobs, -1);
  EXPECT_EQ(
      parse_completion_request(R"({"prompt": "a", "logprobs": 5})", false, limits, *bytes).logprobs,
      5);
  EXPECT_EQ(
      parse_completion_request(R"({"prompt": "a", "logprobs": 0})", false, limits, *bytes).logprobs,
      0);
  EXPECT_EQ(parse_completion_request(R"({"prompt": "a", "logprobs": false})", false, limits, *bytes)
                .logprobs,
            -1);
  EXPECT_EQ(parse_completion_request("{" + chat + R"(, "logprobs": true})", true, limits, *bytes)
                .logprobs,
            0);
  EXPECT_EQ(parse_completion_request("{" + chat + R"(, "logprobs": true, "top_logprobs": 7})", true,
                                     limits, *bytes)
                .logprobs,
            7);
  const std::vector<std::tuple<std::string, bool, std::string>> bad = {
      {R"({"prompt": "a", "logprobs": 21})", false, "logprobs"},
      {R"({"prompt": "a", "logprobs": -1})", false, "logprobs"},
      {R"({"prompt": "a", "logprobs": true})", false, "logprobs"},
      {R"({"prompt": "a", "top_logprobs": 2})", false, "top_logprobs"},  // not a completions field
      {"{" + chat + R"(, "logprobs": 3})", true, "logprobs"},
      {"{" + chat + R"(, "top_logprobs": 3})", true, "top_logprobs"},
      {"{" + chat + R"(, "logprobs": true, "top_logprobs": 21})", true, "top_logprobs"},
  };
  for (const auto& [body, is_chat, param] : bad) {
    try {
      parse_completion_request(body, is_chat, limits, *bytes);
      ADD_FAILURE() << "accepted " << body;
    } catch (const ApiError& e) {
      EXPECT_EQ(e.param, param) << body;
    }
  }
  limits.logprobs_unsupported = "not returned with speculative decoding";
  try {
    parse_completion_request(R"({"prompt": "a", "logprobs": 1})", false, limits, *bytes);
    ADD_FAILURE() << "accepted logprobs on a server without them";
  } catch (const ApiError& e) {
    EXPECT_NE(std::string(e.what()).find("speculative decoding"), std::string::npos);
  }
}

// Prompt log probabilities: vLLM's `prompt_logprobs: K` on both endpoints (not with stream), and
// completions' `echo` (with `logprobs: K`: the prompt's with K alternatives, as lm-eval asks).
TEST(OpenAiApi, EchoAndPromptLogprobsFields) {
  const std::unique_ptr<Tokenizer> bytes =
      load_tokenizer(home_path("data/tokenizers/bytes/tokenizer.json"));
  const ApiLimits limits{"tiny", 256, 64, {}};
  const auto parse = [&](const std::string& body, bool chat = false) {
    return parse_completion_request(body, chat, limits, *bytes);
  };
  const std::string chat = R"("messages": [{"role": "user", "content": "hi"}])";
  CompletionRequest r = parse(R"({"prompt": "ab"})");
  EXPECT_FALSE(r.echo);
  EXPECT_EQ(r.prompt_logprobs, -1);
  // lm-eval's loglikelihood request: token ids, one token, echo with logprobs 1.
  r = parse(R"({"prompt": [[3, 4, 5]], "max_tokens": 1, "logprobs": 1, "echo": true,
                "temperature": 0})");
  EXPECT_TRUE(r.echo);
  EXPECT_EQ(r.echo_text, "");  // token ids: the server decodes them
  EXPECT_EQ(r.logprobs, 1);
  EXPECT_EQ(r.prompt_logprobs, 1);
  EXPECT_FALSE(r.prompt_logprobs_field);
  r = parse(R"({"prompt": "ab", "echo": true})");  // echo without logprobs: the text only
  EXPECT_EQ(r.echo_text, "ab");
  EXPECT_EQ(r.prompt_logprobs, -1);
  EXPECT_EQ(parse(R"({"prompt": ["ab"], "echo": true})").echo_text, "ab");
  EXPECT_FALSE(parse(R"({"prompt": "ab", "echo": false, "logprobs": 2})").echo);
  r = parse(R"({"prompt": "ab", "prompt_logprobs": 3, "logprobs": 1, "echo": true})");
  EXPECT_EQ(r.prompt_logprobs, 3);  // the explicit count wins over echo's
  EXPECT_TRUE(r.prompt_logprobs_field);
  r = parse("{" + chat + R"(, "prompt_logprobs": 0})", true);
  EXPECT_EQ(r.prompt_logprobs, 0);
  EXPECT_TRUE(r.prompt_logprobs_field);
  // Echo with a stream is fine (the prompt comes in the first chunk); prompt_logprobs is not.
  EXPECT_TRUE(parse(R"({"prompt": "ab", "echo": true, "logprobs": 0, "stream": true})").echo);
  // vLLM's echo without generation: max_tokens 0 with echo (one token generated, not shown).
  r = parse(R"({"prompt": "ab", "echo": true, "max_tokens": 0, "logprobs": 1})");
  EXPECT_TRUE(r.echo_only);
  EXPECT_EQ(r.max_tokens, 1);
  EXPECT_EQ(r.prompt_logprobs, 1);
  EXPECT_FALSE(parse(R"({"prompt": "ab", "echo": true, "max_tokens": 2})").echo_only);
  try {
    parse(R"({"prompt": "ab", "max_tokens": 0})");
    ADD_FAILURE() << "max_tokens 0 without echo";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.param, "max_tokens");
    EXPECT_NE(std::string(e.what()).find("only with echo"), std::string::npos) << e.what();
  }
  const std::vector<std::tuple<std::string, bool, std::string>> bad = {
      {R"({"prompt": "a", "echo": 1})", false, "echo"},
      {R"({"prompt": "a", "echo": "yes"})", false, "echo"},
      {"{" + chat + R"(, "echo": true})", true, "echo"},  // not a chat field
      {R"({"prompt": "a", "prompt_logprobs": 21})", false, "prompt_logprobs"},
      {R"({"prompt": "a", "prompt_logprobs": -1})", false, "prompt_logprobs"},
      {R"({"prompt": "a", "prompt_logprobs": true})", false, "prompt_logprobs"},
      {R"({"prompt": "a", "prompt_logprobs": 1, "stream": true})", false, "prompt_logprobs"},
      {R"({"prompt": "a", "echo": true, "max_tokens": -1})", false, "max_tokens"},
      {R"({"prompt": "a", "echo": true, "max_tokens": 0, "min_tokens": 1})", false, "min_tokens"},
      {"{" + chat + R"(, "max_tokens": 0})", true, "max_tokens"},
  };
  for (const auto& [body, is_chat, param] : bad) {
    try {
      parse(body, is_chat);
      ADD_FAILURE() << "accepted " << body;
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400) << body;
      EXPECT_EQ(e.param, param) << body;
    }
  }
}

// A batch of prompts in `prompt` (strings, or arrays of token ids; lm-eval sends them with
// batch_size > 1): the first is `prompt`, the others more_prompts; a mix, an empty member or more
// than kMaxBatchPrompts is 400; the context check takes the longest.
TEST(OpenAiApi, BatchesOfPrompts) {
  const std::unique_ptr<Tokenizer> bytes =
      load_tokenizer(home_path("data/tokenizers/bytes/tokenizer.json"));
  const ApiLimits limits{"tiny", 256, 64, {}};
  const auto parse = [&](const std::string& body) {
    return parse_completion_request(body, false, limits, *bytes);
  };
  CompletionRequest r = parse(R"({"prompt": [[1, 2], [3], [4, 5, 6]]})");
  EXPECT_EQ(r.prompt, (std::vector<std::int32_t>{1, 2}));
  ASSERT_EQ(r.more_prompts.size(), 2u);
  EXPECT_EQ(r.more_prompts[0], (std::vector<std::int32_t>{3}));
  EXPECT_EQ(r.more_prompts[1], (std::vector<std::int32_t>{4, 5, 6}));
  r = parse(R"({"prompt": ["ab", "cde"], "echo": true})");
  EXPECT_EQ(r.echo_text, "ab");
  ASSERT_EQ(r.more_echo_texts.size(), 1u);
  EXPECT_EQ(r.more_echo_texts[0], "cde");
  EXPECT_EQ(r.more_prompts[0].size(), 3u);
  EXPECT_TRUE(parse(R"({"prompt": ["ab"]})").more_prompts.empty());
  EXPECT_TRUE(parse(R"({"prompt": [7, 8]})").more_prompts.empty());  // one prompt of ids
  std::string many = R"({"prompt": [)";
  for (std::size_t i = 0; i <= kMaxBatchPrompts; ++i) many += i == 0 ? "[1]" : ", [1]";
  many += "]}";
  std::string sixty = "[1";
  for (int i = 1; i < 60; ++i) sixty += ", 1";
  sixty += "]";
  for (const std::string& body :
       {std::string(R"({"prompt": [[1, 2], "ab"]})"), std::string(R"({"prompt": ["ab", [1]]})"),
        std::string(R"({"prompt": [[1, 2], []]})"), std::string(R"({"prompt": ["ab", ""]})"),
        std::string(R"({"prompt": [[1], [300]]})"), many,
        R"({"prompt": [[1], )" + sixty + R"(], "max_tokens": 8})"}) {
    try {
      parse(body);
      ADD_FAILURE() << "accepted " << body.substr(0, 80);
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400) << body.substr(0, 80);
      EXPECT_TRUE(e.param == "prompt" || e.param == "max_tokens") << e.param;
    }
  }
}

// The response shapes: an echoed prompt's first token has null token_logprobs and top_logprobs;
// vLLM's prompt_logprobs list starts with null, then a dict per token keyed by token id with
// logprob, rank and decoded_token (in each choice for completions, beside the choices for chat).
TEST(OpenAiApi, EchoAndPromptLogprobsShapes) {
  ResponseMeta meta{"cmpl-1", "tiny", 5, false};
  ChoiceText c{"abc", "length", "", std::vector<TokenLogprobText>{}, std::nullopt};
  TokenLogprobText first{"a", 0.0f, {}, true};
  c.logprobs->push_back(first);
  c.logprobs->push_back({"b", -0.5f, {{"x", -0.25f}}});
  c.logprobs->push_back({"c", -1.0f, {}});
  PromptTokenLogprobs p;
  p.id = 98;
  p.text = "b";
  p.logprob = -0.5f;
  p.rank = 2;
  p.top.push_back({120, "x", -0.25f});
  c.prompt_logprobs = std::vector<PromptTokenLogprobs>{p};
  nlohmann::json j = nlohmann::json::parse(completion_json(meta, {c}, 2, 1));
  const nlohmann::json& lp = j["choices"][0]["logprobs"];
  EXPECT_EQ(lp["text_offset"], nlohmann::json::parse("[0, 1, 2]"));
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  EXPECT_EQ(lp["token_logprobs"][1], -0.5);
  EXPECT_EQ(lp["top_logprobs"][1]["x"], -0.25);
  EXPECT_EQ(lp["tokens"], nlohmann::json::parse(R"(["a", "b", "c"])"));
  const nlohmann::json& pl = j["choices"][0]["prompt_logprobs"];
  ASSERT_EQ(pl.size(), 2u);
  EXPECT_TRUE(pl[0].is_null());
  EXPECT_EQ(pl[1]["98"]["rank"], 2);
  EXPECT_EQ(pl[1]["98"]["decoded_token"], "b");
  EXPECT_EQ(pl[1]["98"]["logprob"], -0.5);
  EXPECT_EQ(pl[1]["120"]["rank"], 1);
  EXPECT_FALSE(j.contains("prompt_logprobs"));
  // Chat: beside the choices; and nowhere without them.
  meta.chat = true;
  c.logprobs.reset();
  j = nlohmann::json::parse(completion_json(meta, {c}, 2, 1));
  EXPECT_EQ(j["prompt_logprobs"].size(), 2u);
  EXPECT_FALSE(j["choices"][0].contains("prompt_logprobs"));
  c.prompt_logprobs.reset();
  j = nlohmann::json::parse(completion_json(meta, {c}, 2, 1));
  EXPECT_FALSE(j.contains("prompt_logprobs"));
}

// vLLM's return_token_ids: completions put the prompt's ids in each choice, chat beside the
// choices (a stream: on the choice's first chunk, chat's on the chunk); output ids in the choice.
TEST(OpenAiApi, TokenIdsWhereVllmPutsThem) {
  ResponseMeta meta{"cmpl-1", "tiny", 5, false};
  ChoiceText c{"ab", "length", "", std::nullopt, std::nullopt};
  c.token_ids = std::vector<std::int32_t>{97, 98};
  c.prompt_token_ids = std::vector<std::int32_t>{1, 2, 3};
  nlohmann::json j = nlohmann::json::parse(completion_json(meta, {c}, 3, 2));
  EXPECT_EQ(j["choices"][0]["token_ids"], nlohmann::json::parse("[97, 98]"));
  EXPECT_EQ(j["choices"][0]["prompt_token_ids"], nlohmann::json::parse("[1, 2, 3]"));
  EXPECT_FALSE(j.contains("prompt_token_ids"));
  ChunkFields chunk;
  chunk.text = "a";
  chunk.first = true;
  chunk.token_ids = std::vector<std::int32_t>{97};
  chunk.prompt_token_ids = std::vector<std::int32_t>{1, 2, 3};
  j = nlohmann::json::parse(chunk_json(meta, chunk));
  EXPECT_EQ(j["choices"][0]["token_ids"], nlohmann::json::parse("[97]"));
  EXPECT_EQ(j["choices"][0]["prompt_token_ids"], nlohmann::json::parse("[1, 2, 3]"));
  meta.chat = true;
  j = nlohmann::json::parse(completion_json(meta, {c}, 3, 2));
  EXPECT_EQ(j["choices"][0]["token_ids"], nlohmann::json::parse("[97, 98]"));
  EXPECT_FALSE(j["choices"][0].contains("prompt_token_ids"));
  EXPECT_EQ(j["prompt_token_ids"], nlohmann::json::parse("[1, 2, 3]"));
  j = nlohmann::json::parse(chunk_json(meta, chunk));
  EXPECT_EQ(j["choices"][0]["token_ids"], nlohmann::json::parse("[97]"));
  EXPECT_EQ(j["prompt_token_ids"], nlohmann::json::parse("[1, 2, 3]"));
  // Not asked for: no such fields.
  c.token_ids.reset();
  c.prompt_token_ids.reset();
  meta.chat = false;
  j = nlohmann::json::parse(completion_json(meta, {c}, 3, 2));
  EXPECT_FALSE(j["choices"][0].contains("token_ids"));
  EXPECT_FALSE(j["choices"][0].contains("prompt_token_ids"));
}

// --lora-modules entries (serving/lora_modules.h) and a request naming an adapter.
TEST(LoraModules, ParseCheckAndSelectAdapters) {
  LoraModule m = parse_lora_module("sql=7", 16);
  EXPECT_EQ(m.name, "sql");
  EXPECT_EQ(m.id, 7u);
  EXPECT_EQ(m.rank, 16);
  m = parse_lora_module("a/b-c=4294967294:512", 16);
  EXPECT_EQ(m.name, "a/b-c");
  EXPECT_EQ(m.id, 4294967294u);
  EXPECT_EQ(m.rank, 512);
  for (const char* bad : {"sql", "=1", "sql=", "sql=0", "sql=x", "sql=1:", "sql=1:0", "sql=1:513",
                          "s ql=1", "sql=1:8:8", "sql=4294967295", "sql=-1"}) {
    EXPECT_THROW(parse_lora_module(bad, 16), ConfigError) << bad;
  }
  try {
    parse_lora_module("sql=1:1000", 16);
    ADD_FAILURE() << "rank 1000 accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(
        std::string(e.what()),
        "--lora-modules 'sql=1:1000': expected the rank, an integer from 1 to 512, after ':'");
  }
  LoraConfig lora;
  EXPECT_TRUE(parse_lora_modules({}, lora, "tiny").empty());
  EXPECT_THROW(parse_lora_modules({"sql=1"}, lora, "tiny"), ConfigError);  // LoRA off
  lora.max_loras = 2;
  lora.max_lora_rank = 8;
  const std::vector<LoraModule> mods = parse_lora_modules({"sql=1", "chat=2:4"}, lora, "tiny");
  ASSERT_EQ(mods.size(), 2u);
  EXPECT_EQ(mods[0].rank, 8);  // max_lora_rank by default
  EXPECT_EQ(mods[1].rank, 4);
  EXPECT_THROW(parse_lora_modules({"sql=1:16"}, lora, "tiny"), ConfigError);
  EXPECT_THROW(parse_lora_modules({"sql=1", "sql=2"}, lora, "tiny"), ConfigError);
  EXPECT_THROW(parse_lora_modules({"sql=1", "chat=1"}, lora, "tiny"), ConfigError);
  EXPECT_THROW(parse_lora_modules({"tiny=1"}, lora, "tiny"), ConfigError);
  EXPECT_EQ(lora_model_name(mods, 2), "chat");
  EXPECT_EQ(lora_model_name(mods, 3), "lora-3");

  const std::unique_ptr<Tokenizer> bytes =
      load_tokenizer(home_path("data/tokenizers/bytes/tokenizer.json"));
  const ApiLimits limits{"tiny", 256, 64, mods};
  CompletionRequest r =
      parse_completion_request("{\"prompt\": [1], \"model\": \"chat\"}", false, limits, *bytes);
  EXPECT_EQ(r.model, "chat");
  EXPECT_EQ(r.lora_id, 2u);
  EXPECT_EQ(r.lora_rank, 4);
  r = parse_completion_request("{\"prompt\": [1]}", false, limits, *bytes);
  EXPECT_EQ(r.model, "tiny");
  EXPECT_EQ(r.lora_id, 0u);
  try {
    parse_completion_request("{\"prompt\": [1], \"model\": \"lora-3\"}", false, limits, *bytes);
    ADD_FAILURE() << "an adapter that is not served was accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 404);
  }
  const nlohmann::json models = nlohmann::json::parse(models_json("tiny", 5, 64, mods));
  ASSERT_EQ(models["data"].size(), 3u);
  EXPECT_EQ(models["data"][2]["id"], "chat");
  EXPECT_EQ(models["data"][2]["parent"], "tiny");
  EXPECT_FALSE(models["data"][2].contains("max_model_len"));
}

// vLLM's prefix-cache counters and its recent hit rate leave out the lookups of resumed
// (previously preempted) requests: so do the server's (they counted them).
TEST(ServeMetrics, PrefixCacheCountersLeaveOutResumedRequests) {
  ServeMetrics m("tiny");
  PrefixCacheStats p;
  p.lookups = 2;
  p.queried_tokens = 100;
  p.hit_tokens = 20;
  p.preempted_lookups = 1;
  p.preempted_queried_tokens = 60;
  p.preempted_hit_tokens = 60;
  m.set_state(0, 0, 0.0, p);
  const std::string text = m.render();
  EXPECT_NE(text.find("vllm:prefix_cache_queries_total{model_name=\"tiny\"} 100\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("vllm:prefix_cache_hits_total{model_name=\"tiny\"} 20\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("servelab:prefix_cache_hit_rate_recent{model_name=\"tiny\"} 0.2\n"),
            std::string::npos)
      << text;
  // Without an offload tier (vLLM: without a KV connector) the external counters stay 0.
  EXPECT_NE(text.find("vllm:external_prefix_cache_queries_total{model_name=\"tiny\"} 0\n"),
            std::string::npos)
      << text;
  // Hits found in the KV offload tier are vLLM's external ones (a KV connector's), not its
  // prefix cache's; the tier is asked for what the GPU pool did not hold (100 - 5 tokens).
  ServeMetrics t("tiny");
  t.set_external_tier(true);
  p.external_hit_tokens = 15;
  t.set_state(0, 0, 0.0, p);
  const std::string tiers = t.render();
  for (const char* line : {"vllm:prefix_cache_hits_total{model_name=\"tiny\"} 5\n",
                           "vllm:external_prefix_cache_queries_total{model_name=\"tiny\"} 95\n",
                           "vllm:external_prefix_cache_hits_total{model_name=\"tiny\"} 15\n",
                           "servelab:prefix_cache_hit_rate_recent{model_name=\"tiny\"} 0.05\n"}) {
    EXPECT_NE(tiers.find(line), std::string::npos) << line << tiers;
  }
}

// A served model name is a Prometheus label value: its backslashes, double quotes and line feeds
// are escaped as the text format requires (unescaped, one broke the whole scrape).
TEST(ServeMetrics, LabelValuesAreEscaped) {
  ServeMetrics m("my\"model\\x\ny");
  const std::string text = m.render();
  EXPECT_NE(text.find("vllm:num_requests_running{model_name=\"my\\\"model\\\\x\\ny\"} 0\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("my\"model"), std::string::npos) << text;
}

// vllm:inter_token_latency_seconds observes one gap per step, as vLLM's IterationStats: the
// accepted drafts of a speculative step come at the step's time and add tokens, not gaps.
TEST(ServeMetrics, InterTokenLatencyIsOneGapPerStep) {
  ServeMetrics m("tiny");
  m.on_token(-1, 10'000'000, 0);          // first token: TTFT 10 ms
  m.on_token(10'000'000, 30'000'000, 0);  // the next step: a 20 ms gap
  m.on_token(30'000'000, 30'000'000, 0);  // two drafts accepted in that step
  m.on_token(30'000'000, 30'000'000, 0);
  const std::string text = m.render();
  EXPECT_NE(text.find("vllm:inter_token_latency_seconds_count{model_name=\"tiny\"} 1\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("vllm:generation_tokens_total{model_name=\"tiny\"} 4\n"), std::string::npos)
      << text;
}

// vLLM observes a request's E2E latency with its vllm:request_success_total, whatever the finish
// reason: an aborted request is in the histogram too (it was left out, so the histogram's count
// fell short of the requests counted).
TEST(ServeMetrics, AbortedRequestsAreInTheE2eHistogram) {
  ServeMetrics m("tiny");
  m.on_finish(true, 0, 100'000'000, true);
  m.on_finish(false, 0, 300'000'000);
  const std::string text = m.render();
  for (const char* line :
       {"vllm:request_success_total{model_name=\"tiny\",finished_reason=\"abort\"} 1\n",
        "vllm:e2e_request_latency_seconds_count{model_name=\"tiny\"} 2\n",
        "vllm:e2e_request_latency_seconds_sum{model_name=\"tiny\"} 0.4\n"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line << text;
  }
}

// vLLM's vllm:lora_requests_info: only once set, names sorted and each once, no model_name label.
TEST(ServeMetrics, LoraRequestsInfoGauge) {
  ServeMetrics m("tiny");
  EXPECT_EQ(m.render().find("lora_requests_info"), std::string::npos);
  m.set_lora(4, {"sql", "chat", "sql"}, {"zeta"}, 1700000000.5);
  EXPECT_NE(m.render().find("vllm:lora_requests_info{max_lora=\"4\",waiting_lora_adapters=\"zeta\","
                            "running_lora_adapters=\"chat,sql\"} 1700000000.5\n"),
            std::string::npos)
      << m.render();
}

}  // namespace
}  // namespace servelab
