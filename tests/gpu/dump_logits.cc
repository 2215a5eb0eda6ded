// gpu_dump_logits: the C++ side of tests/gpu/hf_compare.py. Loads a Hugging Face checkpoint
// directory (config.json + safetensors), runs P requests one after another, each greedily on the
// CPU reference or the CUDA executor (prompt in one prefill step, then one decode step per token),
// and writes
//   {"device": ..., "runs": [{"prompt": [ids], "tokens": [greedy ids],
//                             "logits": [[vocab floats] per step]}, ...]}
// Prompt k has its own content (so its own ids) and length prompt_len + 5 k. The prompt ids are
// the engine's own (token_value of the request's content), so the script feeds exactly these ids
// to transformers.
//
// usage: gpu_dump_logits MODEL_DIR OUT.json [--device cpu|cuda] [--prompt-len N] [--steps N]
//                        [--prompts P]
// Exit codes: 0 ok, 2 usage or no device, 1 other errors.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "core/request.h"
#include "engine/cpu_executor.h"
#include "engine/llama_weights.h"
#include "serving/config_node.h"
#include "serving/model_config.h"
#if SERVELAB_HAVE_CUDA
#include "engine/cuda_executor.h"
#include "kernels/device.h"
#endif

namespace {

using namespace servelab;

int usage(const char* msg) {
  std::fprintf(stderr,
               "gpu_dump_logits: %s\nusage: gpu_dump_logits MODEL_DIR OUT.json [--device cpu|cuda] "
               "[--prompt-len N] [--steps N] [--prompts P]\n",
               msg);
  return 2;
}

int run(int argc, char** argv) {
  if (argc < 3) return usage("expected MODEL_DIR and OUT.json");
  const std::string model_dir = argv[1], out_path = argv[2];
  std::string device = "cpu";
  std::int32_t prompt_len = 24, steps = 32, prompts = 1;
  for (int i = 3; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--device") {
      device = value;
    } else if (flag == "--prompt-len") {
      prompt_len = std::atoi(value.c_str());
    } else if (flag == "--steps") {
      steps = std::atoi(value.c_str());
    } else if (flag == "--prompts") {
      prompts = std::atoi(value.c_str());
    } else {
      return usage(("unknown flag " + flag).c_str());
    }
  }
  if (prompt_len < 1 || steps < 1 || prompts < 1 || prompts > 64) {
    return usage("--prompt-len and --steps must be >= 1, --prompts 1..64");
  }
  const std::int32_t longest = prompt_len + 5 * (prompts - 1);
  if (device != "cpu" && device != "cuda") return usage("--device: expected cpu or cuda");
  if (device == "cuda") {  // before loading anything: no GPU is a usage error, exit 2
#if SERVELAB_HAVE_CUDA
    std::string why;
    if (!kernels::cuda_device_available(&why))
      return usage(("--device cuda: no usable GPU: " + why).c_str());
#else
    return usage("this build has no CUDA support");
#endif
  }
  const LlamaConfig config = load_llama_config(model_dir, default_catalog_dir());
  const LlamaWeights weights = LlamaWeights::load(config, model_dir);
  const std::int32_t block_size = 16;
  const std::int32_t blocks = (longest + steps + block_size) / block_size + 1;

  std::unique_ptr<Backend> exec;
  CpuExecutor* cpu = nullptr;
#if SERVELAB_HAVE_CUDA
  CudaExecutor* gpu = nullptr;
#endif
  if (device == "cpu") {
    CpuExecutorOptions options;
    options.block_size = block_size;
    options.num_blocks = blocks + 1;
    auto e = std::make_unique<CpuExecutor>(weights, options);
    cpu = e.get();
    exec = std::move(e);
  } else if (device == "cuda") {
#if SERVELAB_HAVE_CUDA
    CudaExecutorOptions o;
    o.block_size = block_size;
    o.num_blocks = blocks + 1;
    o.max_num_tokens = longest;
    o.max_num_seqs = 1;
    o.max_model_len = longest + steps + 1;
    o.keep_logits = true;
    auto e = std::make_unique<CudaExecutor>(weights, o);
    gpu = e.get();
    exec = std::move(e);
#else
    return usage("this build has no CUDA support");
#endif
  } else {
    return usage("--device: expected cpu or cuda");
  }

  struct Run {
    std::vector<std::int32_t> prompt, tokens;
    std::vector<std::vector<float>> logits;
  };
  std::vector<Run> runs;
  std::vector<BlockId> table;
  for (BlockId b = 1; b <= blocks; ++b) table.push_back(b);
  for (std::int32_t k = 0; k < prompts; ++k) {
    // Each request reuses the same blocks: its prefill rewrites every slot it later reads.
    const std::int32_t len = prompt_len + 5 * k;
    const RequestSpec spec = make_request(
        k, 0, {{unique_content_id(2024, k), 0, static_cast<std::uint32_t>(len)}}, steps);
    Run run;
    for (std::int32_t p = 0; p < len; ++p) {
      const TokenId t = token_identity(spec, p);
      run.prompt.push_back(token_value(t.content_id, t.offset, config.model.vocab_size));
    }
    std::int32_t done = 0;
    while (static_cast<std::int32_t>(run.tokens.size()) < steps) {
      StepPlan plan;
      ScheduledRequest e;
      e.id = k;
      e.spec = &spec;
      e.output_tokens = run.tokens;
      e.first_token = done;
      e.num_tokens = len + static_cast<std::int32_t>(run.tokens.size()) - done;
      e.is_prefill = done == 0;
      e.samples = true;
      e.block_table = table;
      plan.requests.push_back(e);
      const StepResult r = exec->execute(plan);
      done += e.num_tokens;
      if (cpu != nullptr) {
        const Eigen::VectorXf& l = cpu->last_logits()[0];
        run.logits.emplace_back(l.data(), l.data() + l.size());
      }
#if SERVELAB_HAVE_CUDA
      if (gpu != nullptr) run.logits.push_back(gpu->last_logits()[0]);
#endif
      run.tokens.push_back(r.sampled_tokens[0]);
    }
    runs.push_back(std::move(run));
  }

  std::FILE* f = std::fopen(out_path.c_str(), "wb");
  if (f == nullptr) throw std::runtime_error(out_path + ": cannot open for writing");
  auto ints = [&](const std::vector<std::int32_t>& v) {
    for (std::size_t i = 0; i < v.size(); ++i) std::fprintf(f, "%s%d", i ? ", " : "", v[i]);
  };
  std::fprintf(f, "{\"device\": \"%s\", \"runs\": [", device.c_str());
  for (std::size_t k = 0; k < runs.size(); ++k) {
    std::fputs(k ? ",\n{\"prompt\": [" : "\n{\"prompt\": [", f);
    ints(runs[k].prompt);
    std::fputs("], \"tokens\": [", f);
    ints(runs[k].tokens);
    std::fputs("], \"logits\": [", f);
    for (std::size_t s = 0; s < runs[k].logits.size(); ++s) {
      std::fputs(s ? ",\n[" : "\n[", f);
      const std::vector<float>& l = runs[k].logits[s];
      for (std::size_t i = 0; i < l.size(); ++i) std::fprintf(f, "%s%.6g", i ? ", " : "", l[i]);
      std::fputs("]", f);
    }
    std::fputs("]}", f);
  }
  std::fputs("]}\n", f);
  if (std::fclose(f) != 0) throw std::runtime_error(out_path + ": write failed");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const servelab::ConfigError& e) {  // a bad checkpoint or model name
    std::fprintf(stderr, "gpu_dump_logits: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_dump_logits: error: %s\n", e.what());
    return 1;
  }
}
