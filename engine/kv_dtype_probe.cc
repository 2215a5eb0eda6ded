#include "engine/kv_dtype_probe.h"

#include <algorithm>
#include <stdexcept>

#include "serving/interrupt.h"

namespace servelab {

namespace {

void check_setup(const KvProbeSetup& s) {
  if (s.requests < 1 || s.prompt_len < 1 || s.decode_tokens < 1 || s.block_size < 1) {
    throw std::invalid_argument(
        "KV dtype probe: requests, prompt_len, decode_tokens and block_size must be >= 1");
  }
}

CpuExecutorOptions probe_options(const KvProbeSetup& s, kernels::FloatFormat format,
                                 bool compute_scales, std::int32_t num_blocks) {
  CpuExecutorOptions opt;
  opt.block_size = s.block_size;
  opt.num_blocks = num_blocks;
  opt.kv_format = format;
  opt.compute_kv_scales = compute_scales;
  return opt;
}

}  // namespace

std::vector<RequestSpec> kv_probe_requests(const KvProbeSetup& setup) {
  check_setup(setup);
  std::vector<RequestSpec> specs;
  for (std::int32_t i = 0; i < setup.requests; ++i) {
    specs.push_back(make_request(
        static_cast<RequestId>(i + 1), 0,
        {{static_cast<std::uint64_t>(100 + i), 0, static_cast<std::uint32_t>(setup.prompt_len)}},
        setup.decode_tokens));
  }
  return specs;
}

std::vector<BlockId> kv_probe_block_table(const KvProbeSetup& setup) {
  check_setup(setup);
  const std::int32_t blocks =
      (setup.prompt_len + setup.decode_tokens + setup.block_size - 1) / setup.block_size;
  std::vector<BlockId> table;
  for (BlockId b = blocks - 1; b >= 0; --b) table.push_back(b);
  return table;
}

KvProbeGeneration kv_probe_generate(CpuExecutor& exec, const RequestSpec& spec,
                                    std::int32_t decode_tokens,
                                    const std::vector<BlockId>& block_table,
                                    const std::vector<std::int32_t>* forced) {
  KvProbeGeneration r;
  std::int32_t done = 0;
  while (static_cast<std::int32_t>(r.tokens.size()) < decode_tokens) {
    throw_if_interrupted();
    const auto n_out = static_cast<std::int32_t>(r.tokens.size());
    // The entry holds a view of `outputs`, which must outlive the step.
    const std::vector<std::int32_t> outputs =
        forced ? std::vector<std::int32_t>(forced->begin(), forced->begin() + n_out) : r.tokens;
    StepPlan plan;
    ScheduledRequest e;
    e.id = spec.id;
    e.spec = &spec;
    e.output_tokens = outputs;
    e.first_token = done;
    e.num_tokens = spec.prompt_len + n_out - done;
    e.samples = true;
    e.is_prefill = done < spec.prompt_len;
    e.block_table = block_table;
    plan.requests.push_back(e);
    const StepResult out = exec.execute(plan);
    done += e.num_tokens;
    r.logits.push_back(exec.last_logits()[0]);
    r.tokens.push_back(out.sampled_tokens[0]);
  }
  return r;
}

void add_probe_difference(KvProbeDifference& d, const KvProbeGeneration& got,
                          const KvProbeGeneration& ref) {
  for (std::size_t s = 0; s < got.logits.size(); ++s) {
    d.max_abs = std::max(
        d.max_abs, static_cast<double>((got.logits[s] - ref.logits[s]).cwiseAbs().maxCoeff()));
    d.max_logit = std::max(d.max_logit, static_cast<double>(ref.logits[s].cwiseAbs().maxCoeff()));
    d.differing += got.tokens[s] != ref.tokens[s];
    ++d.steps;
  }
}

std::vector<KvProbeDifference> compare_kv_dtypes(const LlamaWeights& weights,
                                                 const KvProbeSetup& setup,
                                                 const std::vector<KvProbeCase>& cases) {
  const std::vector<RequestSpec> specs = kv_probe_requests(setup);
  const std::vector<BlockId> table = kv_probe_block_table(setup);
  const auto blocks = static_cast<std::int32_t>(table.size());

  std::vector<KvProbeGeneration> ref;
  for (const RequestSpec& s : specs) {
    CpuExecutor exec(weights, probe_options(setup, kernels::FloatFormat::kBf16, false, blocks));
    ref.push_back(kv_probe_generate(exec, s, setup.decode_tokens, table, nullptr));
  }
  std::vector<KvProbeDifference> out;
  for (const KvProbeCase& c : cases) {
    KvProbeDifference d;
    d.name = c.name;
    for (std::size_t i = 0; i < specs.size(); ++i) {
      CpuExecutor exec(weights, probe_options(setup, c.format, c.compute_scales, blocks));
      add_probe_difference(
          d, kv_probe_generate(exec, specs[i], setup.decode_tokens, table, &ref[i].tokens), ref[i]);
    }
    out.push_back(d);
  }
  return out;
}

}  // namespace servelab
