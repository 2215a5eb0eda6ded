// `engine serve`: an OpenAI-compatible HTTP server (cpp-httplib) over the engine's wall-clock
// loop (engine/engine_loop.h). docs/serving.md is the user's manual.
//
// Threads: cpp-httplib's pool runs the handlers (one thread per open connection, so the pool has
// max_in_flight + 16 threads); the scheduler loop runs on a thread of its own; the calling
// thread waits for SIGINT/SIGTERM. Handlers parse and check a request (engine/openai_api.h),
// submit it to the bounded ServeQueue (engine/serve_queue.h) and wait on its channel, writing
// server-sent events as tokens come (stream: true) or the whole response at the end. A client
// that disconnects is noticed within 50 ms (the handler polls its socket) and its request is
// aborted (Scheduler::abort: blocks freed). On SIGINT/SIGTERM the server stops accepting
// requests (503 for new ones, /health 503), lets every in-flight request finish and be written,
// then returns 0.
#pragma once

#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

#include "engine/engine_driver.h"
#include "serving/experiment.h"

namespace servelab {

struct ServeOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port (the line printed on stdout says which)
  EngineOptions engine;
  std::size_t max_in_flight = 256;  // requests admitted and not finished; more: 429
  std::string served_model_name;    // empty: the model's name
  // LoRA adapters served under their own names, "NAME=ID[:RANK]" each (vLLM's --lora-modules;
  // serving/lora_modules.h): needs serving.lora; ConfigError for a bad entry.
  std::vector<std::string> lora_modules;
  // The tokenizer.json of text prompts, chat messages and output text (serving/tokenizer.h);
  // empty: data/tokenizers/bytes (one token per byte, for the tiny model). Its vocabulary may
  // not exceed the model's.
  std::string tokenizer;
  // vLLM's --chat-template: a Jinja file, a tokenizer_config.json, or the template text
  // (serving/chat_template.h load_chat_template); empty: the template beside the tokenizer
  // (chat_template.jinja or tokenizer_config.json's), else the built-in formats.
  std::string chat_template;
  // vLLM's --chat-template-content-format: auto (the template's need, detected), string or
  // openai (a message's content as a list of text parts).
  std::string chat_template_content_format = "auto";
  // vLLM's --enable-auto-tool-choice, --tool-call-parser (engine/tool_parser.h: hermes,
  // llama3_json, mistral) and --exclude-tools-when-tool-choice-none: requests with tools and
  // tool_choice "auto" get their tool calls parsed out of the text (both flags needed; either
  // alone is a ConfigError, as vLLM refuses --enable-auto-tool-choice without a parser).
  bool enable_auto_tool_choice = false;
  std::string tool_call_parser;
  bool exclude_tools_when_tool_choice_none = false;
  // vLLM's --reasoning-parser (engine/reasoning_parser.h: deepseek_r1, qwen3): chat choices'
  // thinking split into `reasoning_content`; empty: none.
  std::string reasoning_parser;
  // vLLM's --generation-config (servelab, vllm, auto, or a folder or file) and
  // --override-generation-config (a JSON object): the sampling defaults of the fields requests
  // leave out (engine/generation_config.h).
  std::string generation_config = "servelab";
  std::string override_generation_config;
};

// Serves until SIGINT/SIGTERM, then drains and returns 0. Prints "listening on
// http://HOST:PORT" on `log` once the socket is bound (flushed: tests read it for the port).
// Throws ConfigError for bad input (as load_engine) or a port that cannot be bound, and passes
// on an exception of the scheduler loop after the HTTP side stopped.
int run_server(const ExperimentConfig& config, const ServeOptions& options, std::FILE* log);

}  // namespace servelab
