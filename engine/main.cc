// The `engine` command: runs an experiment for real on the CPU reference executor. Exit codes as
// for `sim`: 0 success, 2 bad input, usage or an unavailable device, 1 an internal error.
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine_driver.h"
#include "engine/profile.h"
#include "engine/server.h"
#include "serving/cli.h"
#include "serving/config_node.h"
#include "serving/experiment.h"
#include "serving/home.h"
#include "serving/model_config.h"
#include "serving/output_file.h"
#include "serving/run_folder.h"

namespace {

using servelab::ConfigError;

constexpr const char* kUsage =
    "usage: engine <command> [arguments]\n"
    "\n"
    "commands:\n"
    "  run EXP.yaml [--device cpu|cuda] [--out DIR] [--seed N] [--set key.path=value]...\n"
    "             [--weights PATH] [--kv-memory-gb G] [--record-schedule] [--record-events]\n"
    "             [--record-blocks] [--tokens] [--progress] [--quiet]\n"
    "      run one experiment (the same files as `sim run`) with every step executed on the\n"
    "      model and timed; arrivals are replayed in wall-clock time. Writes summary.json,\n"
    "      requests.csv, steps.csv, config.yaml (schedule.csv with --record-schedule,\n"
    "      tokens.jsonl with --tokens) to DIR (default out/<experiment name>-engine/).\n"
    "      Weights: random from the seed, or a safetensors checkpoint (--weights). KV blocks:\n"
    "      serving.num_gpu_blocks, else G GiB of fp32 K/V (default 1). The block count the\n"
    "      engine allocated is in summary.json and config.yaml; `sim run EXP --set\n"
    "      serving.num_gpu_blocks=N` simulates the same capacity. A cluster: section of\n"
    "      unified pools runs on CPU replicas, one thread each, behind its router (the KV\n"
    "      blocks are per replica; events.csv with --record-events has the routes).\n"
    "  profile --model M -o PROFILE.csv [--device cpu|cuda] [--reps N] [--rounds R]\n"
    "             [--warmup N] [--quick] [--max-tokens N] [--block-size N] [--weights PATH]\n"
    "             [--lora-rank R] [--kv-cache-dtype D] [--quantization Q] [--seed N] [--force]\n"
    "             [--quiet]\n"
    "      time the executor over a grid of step shapes (prefill, batched prefill, chunks with\n"
    "      cached context, decode batches by context, mixed, swap, copy; with --lora-rank, steps\n"
    "      under LoRA adapters of rank R): N repetitions\n"
    "      (default 9) over R passes (default 3), each shape warmed up and timed back to back\n"
    "      within a pass; writes each shape's median with the cost model's features and a\n"
    "      header naming the machine (device name, threads), date, engine version, KV dtype\n"
    "      and weight quantization, for `sim calibrate` (docs/validation.md); an existing\n"
    "      PROFILE.csv is replaced only with --force\n"
    "  serve [EXP.yaml | --model M] [--host H] [--port P] [--device cpu|cuda] [--weights PATH]\n"
    "             [--kv-memory-gb G] [--max-in-flight N] [--served-model-name NAME]\n"
    "             [--generation-config SOURCE] [--override-generation-config JSON]\n"
    "             [--tokenizer FILE] [--chat-template FILE|TEMPLATE]\n"
    "             [--chat-template-content-format auto|string|openai]\n"
    "             [--enable-auto-tool-choice --tool-call-parser NAME]\n"
    "             [--exclude-tools-when-tool-choice-none] [--reasoning-parser NAME]\n"
    "             [--lora-modules NAME=ID[:RANK]...] [--seed N]\n"
    "             [--set key.path=value]...\n"
    "      an OpenAI-compatible HTTP server (/v1/completions, /v1/chat/completions, /v1/models,\n"
    "      /health, /metrics) over the engine with the experiment's serving settings (default\n"
    "      experiments/serve.yaml with model M); SIGINT/SIGTERM drain in-flight requests, then\n"
    "      exit 0. docs/serving.md.\n"
    "  help       this text; `engine COMMAND --help` lists a command's options\n"
    "\n"
    "Experiment files are described in docs/experiments.md; the engine in docs/engine.md.\n";

using servelab::UsageError;

double parse_gib(const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  // strtod also reads hexadecimal ("0x10" is 16) and "inf": only a decimal number is GiB.
  const bool decimal = text.find_first_not_of("0123456789.eE+-") == std::string::npos;
  if (text.empty() || !decimal || *end != '\0' || !(v > 0) || v > 1e6) {
    throw UsageError("--kv-memory-gb: expected a decimal number of GiB in (0, 1e6], got '" + text +
                     "'");
  }
  return v;
}

// --kv-memory-gb G (engine run and engine serve); `given` becomes true when it is passed.
void add_kv_memory_option(CLI::App& app, double& gib, bool& given) {
  app.add_option_function<std::string>(
         "--kv-memory-gb",
         [&gib, &given](const std::string& v) {
           gib = parse_gib(v);
           given = true;
         },
         "GiB of K/V blocks when serving.num_gpu_blocks is not set (default 1)")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            try {
              parse_gib(v);
            } catch (const UsageError&) {
              return "expected a positive number of GiB, at most 1e6, got '" + v + "'";
            }
            return "";
          },
          "G"));
}

// serving.num_gpu_blocks sizes the KV cache before --kv-memory-gb does, and on the GPU the
// device's free memory does (docs/engine.md): say so rather than drop an option the user gave
// without a word.
void note_kv_memory_ignored(const servelab::ExperimentConfig& config, const std::string& device,
                            bool given) {
  if (given && config.num_gpu_blocks) {
    std::fprintf(stderr,
                 "engine: note: --kv-memory-gb is not used: the experiment sets "
                 "serving.num_gpu_blocks (%lld), which sizes the KV cache\n",
                 static_cast<long long>(*config.num_gpu_blocks));
  } else if (given && device != "cpu") {
    std::fprintf(stderr,
                 "engine: note: --kv-memory-gb is not used on --device %s: the GPU's free memory "
                 "(serving.gpu_memory_utilization) sizes the KV cache\n",
                 device.c_str());
  }
}

int cmd_run(const std::vector<std::string>& args) {
  servelab::EngineOptions options;
  bool kv_memory_given = false;
  const servelab::ExperimentArgs a = servelab::parse_experiment_args(
      args, "engine run",
      [&](CLI::App& app) {
        app.add_option("--device", options.device, "where the model runs (default cpu)")
            ->check(servelab::cli::one_of({"cpu", "cuda"}));
        app.add_option("--weights", options.weights,
                       "a safetensors checkpoint (default: random weights from the seed)")
            ->type_name("PATH")
            ->check(servelab::cli::non_empty("a path"));
        add_kv_memory_option(app, options.kv_memory_gib, kv_memory_given);
        app.add_flag("--tokens", options.write_tokens, "write tokens.jsonl (the sampled tokens)");
      },
      "Run one experiment (the same files as `sim run`) with every step executed on the model "
      "and timed; arrivals are replayed in wall-clock time. Writes summary.json, requests.csv, "
      "steps.csv, config.yaml (schedule.csv with --record-schedule, tokens.jsonl with --tokens) "
      "to the run folder (default out/<experiment name>-engine/).");
  options.out_dir = a.out_dir;
  const bool record_schedule = a.record_schedule, quiet = a.quiet;
  servelab::ExperimentConfig config = servelab::load_experiment(a.experiment, a.overrides, a.seed);
  if (record_schedule) config.outputs.record_schedule = true;
  if (a.record_events) config.outputs.record_events = true;
  if (a.record_blocks) config.outputs.record_blocks = true;
  note_kv_memory_ignored(config, options.device, kv_memory_given);
  options.progress = a.show_progress();
  const auto start = std::chrono::steady_clock::now();
  const servelab::RunOutput run = servelab::run_engine(config, options);
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!quiet) {
    servelab::print_summary(stdout, config, run);
    std::printf("  wall time %.3f s (including model setup)\n", wall);
  }
  return 0;
}

int cmd_serve(const std::vector<std::string>& args) {
  namespace cli = servelab::cli;
  servelab::ServeOptions o;
  std::string experiment, model;
  std::optional<std::uint64_t> seed;
  std::vector<std::string> overrides;
  int max_in_flight = 256;
  const auto app = cli::command(
      "engine serve",
      "Serve the engine over HTTP with the OpenAI API subset of docs/serving.md "
      "(/v1/completions, /v1/chat/completions, streaming or not; /v1/models, /health, /metrics "
      "with vLLM's metric names). Serving settings come from EXP.yaml (its workload is not used) "
      "or experiments/serve.yaml with --model M. SIGINT/SIGTERM stop new requests, let the "
      "in-flight ones finish, then exit 0.");
  app->add_option("experiment", experiment, "the experiment whose serving settings to use")
      ->type_name("EXP.yaml");
  app->add_option("--model", model, "the model (catalogue name), with experiments/serve.yaml")
      ->type_name("M");
  app->add_option("--host", o.host, "the address to listen on (default 127.0.0.1)")->type_name("H");
  app->add_option("--port", o.port, "the port (default 8000; 0: any free port)")
      ->check(cli::integer_in(0, 65535))
      ->type_name("P");
  app->add_option("--device", o.engine.device, "where the model runs (default cpu)")
      ->check(cli::one_of({"cpu", "cuda"}));
  app->add_option("--weights", o.engine.weights,
                  "a safetensors checkpoint (default: random weights from the seed)")
      ->type_name("PATH")
      ->check(cli::non_empty("a path"));
  bool kv_memory_given = false;
  add_kv_memory_option(*app, o.engine.kv_memory_gib, kv_memory_given);
  app->add_option("--max-in-flight", max_in_flight,
                  "requests accepted and not finished before new ones get 429 (default 256)")
      ->check(cli::integer_in(1, 100000))
      ->type_name("N");
  app->add_option("--tokenizer", o.tokenizer,
                  "tokenizer.json for text prompts and output text (default: "
                  "data/tokenizers/bytes, one token per byte)");
  app->add_option("--chat-template", o.chat_template,
                  "the chat template of chat requests (vLLM's): a Jinja file, a "
                  "tokenizer_config.json, or the template itself (default: chat_template.jinja "
                  "or tokenizer_config.json beside --tokenizer, else a built-in format: Llama 3, "
                  "ChatML or plain lines)")
      ->check(cli::non_empty("a file or a template"))
      ->type_name("FILE|TEMPLATE");
  app->add_option("--chat-template-content-format", o.chat_template_content_format,
                  "how a message's content reaches the chat template (vLLM's): auto (default: "
                  "a list of parts when the template loops over a message's content), string, "
                  "or openai (a list of {type: text, text} parts)")
      ->check(cli::one_of({"auto", "string", "openai"}));
  app->add_flag("--enable-auto-tool-choice", o.enable_auto_tool_choice,
                "parse the tool calls of requests with tools and tool_choice \"auto\" out of "
                "the output (vLLM's; needs --tool-call-parser)");
  app->add_option("--tool-call-parser", o.tool_call_parser,
                  "the format of the model's tool calls (vLLM's parsers): hermes (Hermes, Qwen "
                  "2.5/3), llama3_json (Llama 3.1-3.3) or mistral")
      ->check(cli::one_of({"hermes", "llama3_json", "mistral"}))
      ->type_name("NAME");
  app->add_flag("--exclude-tools-when-tool-choice-none", o.exclude_tools_when_tool_choice_none,
                "leave the tools out of the chat template when tool_choice is \"none\" "
                "(vLLM's; by default the template sees them)");
  app->add_option("--reasoning-parser", o.reasoning_parser,
                  "split a reasoning model's <think> ... </think> from its answer into "
                  "reasoning_content (vLLM's parsers): deepseek_r1 or qwen3")
      ->check(cli::one_of({"deepseek_r1", "qwen3"}))
      ->type_name("NAME");
  app->add_option("--served-model-name", o.served_model_name,
                  "the model name clients use (default: the model's)")
      ->check(cli::non_empty("a name"))
      ->type_name("NAME");
  app->add_option("--generation-config", o.generation_config,
                  "the sampling defaults of the fields requests leave out (vLLM's): servelab "
                  "(default: greedy), vllm (temperature 1), auto (vLLM's default: the "
                  "generation_config.json beside --weights, else vllm), or a folder or file "
                  "with a generation_config.json")
      ->check(cli::non_empty("servelab, vllm, auto or a path"))
      ->type_name("SOURCE");
  app->add_option("--override-generation-config", o.override_generation_config,
                  "a JSON object of temperature, top_p, top_k, min_p, repetition_penalty and "
                  "max_new_tokens over the --generation-config defaults (vLLM's)")
      ->type_name("JSON");
  app->add_option("--lora-modules", o.lora_modules,
                  "LoRA adapters served under their own model names (vLLM's --lora-modules; "
                  "needs serving.lora): adapter ID, of rank RANK (default "
                  "serving.lora.max_lora_rank), as NAME")
      ->type_name("NAME=ID[:RANK] ...");
  app->add_option_function<std::string>(
         "--seed", [&](const std::string& v) { seed = servelab::parse_seed(v); },
         "the random weights' seed")
      ->check(cli::seed_value())
      ->type_name("N");
  app->add_option("--set", overrides, "override an experiment key (key.path=value)")
      ->type_name("KEY=VALUE");
  cli::parse(*app, args);
  cli::check_overrides(overrides, seed.has_value());
  if (experiment.empty() == model.empty()) {
    throw UsageError("engine serve: give an experiment file or --model M (one of them)");
  }
  if (!model.empty()) {
    for (const std::string& o : overrides) {
      if (o.substr(0, o.find('=')) == "model") {
        throw UsageError("engine serve: --set model: given with --model too (give the model once)");
      }
    }
    experiment = servelab::home_path("experiments/serve.yaml");
    overrides.insert(overrides.begin(), "model=" + model);
  }
  o.max_in_flight = static_cast<std::size_t>(max_in_flight);
  const servelab::ExperimentConfig config = servelab::load_experiment(experiment, overrides, seed);
  note_kv_memory_ignored(config, o.engine.device, kv_memory_given);
  return servelab::run_server(config, o, stdout);
}

int cmd_profile(const std::vector<std::string>& args) {
  namespace cli = servelab::cli;
  servelab::ProfileOptions o;
  bool quiet = false;
  const auto app = cli::command(
      "engine profile",
      "Time the executor over a grid of step shapes (prefill, batched prefill, chunks with "
      "cached context, decode batches by context, mixed, swap, copy): N repetitions over R "
      "passes, each shape warmed up and timed back to back within a pass; writes each shape's "
      "median with the cost model's features and a header naming the machine (device name, "
      "threads; $SERVELAB_MACHINE_NAME replaces the name), date, engine version, KV dtype and "
      "weight quantization, for `sim calibrate` (docs/validation.md).");
  app->add_option("--model", o.model, "the model (catalogue name or config.json)")->type_name("M");
  cli::add_out(*app, o.out, "the profile to write")->type_name("PROFILE.csv");
  app->add_option("--device", o.device, "where the model runs (default cpu)")
      ->check(cli::one_of({"cpu", "cuda"}));
  const auto count = [&](const char* name, auto& field, int min, int max, const char* what) {
    app->add_option(name, field, what)->check(cli::integer_in(min, max))->type_name("N");
  };
  count("--reps", o.reps, 1, 1000, "timed repetitions per shape (default 9)");
  count("--rounds", o.rounds, 1, 1000, "passes over the grid (default 3)");
  count("--warmup", o.warmup, 0, 1000, "untimed runs before each shape");
  count("--max-tokens", o.max_tokens, 16, 1 << 20, "the largest step in tokens");
  count("--block-size", o.block_size, 1, 256, "tokens per KV block");
  count("--lora-rank", o.lora_rank, 1, 512,
        "also time steps under LoRA adapters of this rank (the `lora` family), for the LoRA "
        "terms of `sim calibrate`");
  app->add_option("--weights", o.weights, "a safetensors checkpoint (default: random weights)")
      ->type_name("PATH")
      ->check(cli::non_empty("a path"));
  const auto words = [](const auto& list) {
    return std::vector<std::string>(std::begin(list), std::end(list));
  };
  app->add_option("--kv-cache-dtype", o.kv_cache_dtype,
                  "store K/V in this dtype (default: the model file's kv_cache_dtype, else auto)")
      ->check(cli::one_of(words(servelab::kKvCacheDtypes)))
      ->type_name("D");
  app->add_option("--quantization", o.quantization,
                  "store the weights so (default: the model file's quantization, else none; "
                  "--device cpu only)")
      ->check(cli::one_of(words(servelab::kQuantizations)))
      ->type_name("Q");
  app->add_option_function<std::string>(
         "--seed", [&](const std::string& v) { o.seed = servelab::parse_seed(v); },
         "the random weights' seed")
      ->check(cli::seed_value())
      ->type_name("N");
  app->add_flag("--quick", o.quick, "a small grid (minutes, not hours)");
  cli::add_force(*app, o.force, "PROFILE.csv");
  cli::add_quiet(*app, quiet);
  cli::parse(*app, args);
  if (o.model.empty()) throw UsageError("engine profile: --model M is required");
  if (o.out.empty()) throw UsageError("engine profile: -o PROFILE.csv is required");
  // Before the (long) profile: an existing file only with --force, never an input.
  servelab::check_output_file(o.out, {o.weights, o.model}, o.force);
  const auto start = std::chrono::steady_clock::now();
  const servelab::ProfileRun run =
      servelab::run_profile(o, !quiet && isatty(STDERR_FILENO) ? stderr : nullptr);
  if (!quiet) {
    std::printf("profiled %zu step shapes of %s on %s in %.1f s (setup %.1f s); wrote %s\n",
                run.shapes, o.model.c_str(), run.device.c_str(),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
                run.setup_s, o.out.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return servelab::run_command(
      "engine", kUsage, argc, argv,
      [](const std::string& cmd, const std::vector<std::string>& args) -> std::optional<int> {
        if (cmd == "run") return cmd_run(args);
        if (cmd == "profile") return cmd_profile(args);
        if (cmd == "serve") return cmd_serve(args);
        return std::nullopt;
      });
}
