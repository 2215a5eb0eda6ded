// `sim bench EXP.yaml --url URL`: a load generator that replays an experiment's workload against
// any OpenAI-compatible server (`engine serve`, vLLM, SGLang, ...) and writes the run folder
// `sim run` writes, so `sim validate SIM_DIR BENCH_DIR` compares the simulator with that server.
//
// Each request of the workload is sent at its arrival time (wall clock, relative to the first
// arrival) as a streaming POST to /v1/completions: the prompt as token ids (the experiment's
// lengths; a prompt position's value is the one the engine would use, prompt_token_value(), so
// shared prefixes share ids), max_tokens = the output length, ignore_eos, temperature 0,
// stream_options.include_usage. At most `max_concurrency` requests are open at once (more wait
// for a free connection, measured from when they are sent). A dependent workload (sessions,
// multiturn) releases a request when the requests it follows were answered (the time of the
// last chunk, or of the failure), at that time plus its think time; its requests ask for
// vLLM's return_token_ids, and a turn's prompt quotes its parents' replies as the server
// sampled them (serving/quoted_replies.h), as the engine's own runs do, so the server's prefix
// cache sees the conversation the simulator models.
//
// Measurements follow vLLM's benchmark_serving: TTFT is the time from sending the request to the
// first streamed chunk carrying choices; ITL the gaps between consecutive such chunks; E2E from
// sending to the last such chunk; TPOT = (E2E - TTFT) / (output tokens - 1), output tokens from
// the usage chunk (else the chunk count). In the run folder a request's arrival is its workload
// arrival and its first-token and finish times are arrival + TTFT and arrival + E2E. What a
// client cannot know is left empty in requests.csv (first_scheduled_s, cached_tokens,
// preemptions, recomputed_tokens, queueing_ms) and zero in summary.json (steps, preemptions,
// prefix cache, KV usage); steps.csv has its header only. A request the server refused (HTTP 4xx)
// is `rejected`, one that failed otherwise (5xx, a broken stream, no [DONE], an answer that did
// not complete within timeout_s, a usage count outside [0, max_tokens x n]) `aborted`, with the
// reason (the server's error message where it sent one, on one line) in requests.csv.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "serving/experiment.h"
#include "serving/run_folder.h"

namespace servelab {

struct BenchOptions {
  std::string url;      // http://HOST:PORT (a path ending in /completions is used as is)
  std::string out_dir;  // empty: out/<experiment name>-bench
  std::string model;    // empty: the first model GET /v1/models lists
  // Requests under a LoRA adapter (workload.lora) name it as `model`: the name these
  // "NAME=ID[:RANK]" entries give its id (vLLM's --lora-modules, as the server was started
  // with), else "lora-ID" (serving/lora_modules.h).
  std::vector<std::string> lora_modules;
  int max_concurrency = 256;      // open requests at most
  double timeout_s = 600;         // per request: its whole answer, in [0.001, 1e6]
  std::FILE* progress = nullptr;  // a progress line every second when set
};

struct BenchOutput {
  RunOutput run;
  // "request ID: REASON" of the lowest-numbered request that did not finish; "" when all did.
  std::string first_failure;
  // Requests sent more than 10 ms after their arrival (every connection was busy:
  // --max-concurrency), and the longest such wait. Their arrival_s is when they were sent.
  std::int64_t client_waits = 0;
  double client_wait_max_s = 0;
  // A dependent workload's requests that finished without `token_ids` in their answer (a server
  // without vLLM's return_token_ids): the turns quoting them were sent token_value()s there.
  std::int64_t unquoted_replies = 0;
};

// Throws ConfigError for bad input (the experiment, the URL, a server that cannot be reached,
// lists no model, or lists models but not --model) and I/O failures; Interrupted on
// SIGINT/SIGTERM (nothing written). Output folder rules as for run_simulation.
BenchOutput run_bench(const ExperimentConfig& config, const BenchOptions& options);

// `sim bench EXP.yaml --url URL [--out DIR] [--model NAME] [--max-concurrency N] ...`; returns
// the exit code: 0, or 1 when requests were sent and none finished (the run folder is written,
// with each request's reason; the first is printed).
int bench_command(const std::vector<std::string>& args);

}  // namespace servelab
