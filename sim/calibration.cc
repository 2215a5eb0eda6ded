#include "sim/calibration.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <utility>
#include <vector>

#include "core/lora_config.h"
#include "serving/config_node.h"
#include "serving/model_config.h"
#include "sim/huber_nnls.h"
#include "traces/csv_reader.h"

namespace servelab {

namespace {

constexpr int kTerms = 14;
enum Term {
  kStep,
  kSequence,
  kToken,
  kAboveKnee,
  kPrefillPair,
  kDecodeContext,
  kDecodeAboveKnee,
  kSampled,
  kSwapByte,
  kCopyByte,
  kLoraTokenRank,
  kLoraAdapterRank,
  kCriticalKey,
  kMergeStep
};

// The basis value of each term for one step (the unit each coefficient multiplies); lora_rank:
// the profile's (0 without LoRA rows).
std::array<double, kTerms> basis(const CalibrationFeatures& f, std::int64_t knee,
                                 std::int64_t decode_knee, double block_bytes, double lora_rank) {
  const StepFeatures& s = f.step;
  const double t = static_cast<double>(s.num_tokens);
  const double dc = static_cast<double>(s.decode_context_tokens);
  const bool lora = s.lora_tokens > 0;
  return {f.empty() ? 0.0 : 1.0,
          static_cast<double>(f.num_entries),
          t,
          knee > 0 ? std::max(0.0, t - static_cast<double>(knee)) : 0.0,
          static_cast<double>(s.prefill_pairs),
          dc,
          decode_knee > 0 ? std::max(0.0, dc - static_cast<double>(decode_knee)) : 0.0,
          static_cast<double>(s.num_sampled),
          static_cast<double>(s.swap_out_blocks + s.swap_in_blocks) * block_bytes,
          static_cast<double>(s.copy_blocks) * block_bytes,
          lora ? static_cast<double>(s.lora_tokens) * lora_rank : 0.0,
          lora ? static_cast<double>(s.num_loras) * lora_rank : 0.0,
          static_cast<double>(f.prefill_critical_keys),
          static_cast<double>(f.prefill_merge_steps)};
}

CalibratedCoefficients from_vector(const Eigen::VectorXd& x, std::int64_t knee,
                                   std::int64_t decode_knee, bool lora,
                                   const std::optional<PrefillLaunch>& launch) {
  CalibratedCoefficients c;
  c.step_s = x(kStep);
  c.per_sequence_s = x(kSequence);
  c.per_token_s = x(kToken);
  c.per_token_above_knee_s = x(kAboveKnee);
  c.knee_tokens = c.per_token_above_knee_s > 0 ? knee : 0;
  if (c.knee_tokens == 0) c.per_token_above_knee_s = 0;
  c.prefill_pair_s = x(kPrefillPair);
  c.decode_context_token_s = x(kDecodeContext);
  c.decode_context_token_above_knee_s = x(kDecodeAboveKnee);
  c.decode_context_knee_tokens = c.decode_context_token_above_knee_s > 0 ? decode_knee : 0;
  if (c.decode_context_knee_tokens == 0) c.decode_context_token_above_knee_s = 0;
  c.sampled_sequence_s = x(kSampled);
  c.swap_byte_s = x(kSwapByte);
  c.copy_byte_s = x(kCopyByte);
  if (lora) {
    c.lora_token_rank_s = x(kLoraTokenRank);
    c.lora_adapter_rank_s = x(kLoraAdapterRank);
    c.lora_set = true;
  }
  if (launch) {
    c.prefill_critical_key_s = x(kCriticalKey);
    c.prefill_merge_step_s = x(kMergeStep);
    c.prefill_launch = launch;
  }
  return c;
}

// The `# prefill_launch:` header value, "query_heads=H tile_rows=R max_ctas=M
// min_split_tokens=S merge_rows=G" and optionally "packed_heads=P packed_rows=Q
// packed_max_ctas=N" (all three or none; profiles before 2026-12-05 have none) (any order, each
// once): "" and `out` filled, or what is wrong.
std::string parse_prefill_launch(std::string_view text, PrefillLaunch& out) {
  struct Field {
    const char* name;
    std::int32_t* value;
    std::int64_t least;
    bool seen = false;
  };
  Field fields[] = {
      {"query_heads", &out.query_heads, 1}, {"tile_rows", &out.tile_rows, 1},
      {"max_ctas", &out.max_ctas, 1},       {"min_split_tokens", &out.min_split_tokens, 0},
      {"merge_rows", &out.merge_rows, 1},   {"packed_heads", &out.packed_heads, 1},
      {"packed_rows", &out.packed_rows, 1}, {"packed_max_ctas", &out.packed_max_ctas, 1}};
  constexpr std::size_t kRequired = 5;  // the packing fields come all three or none
  std::istringstream words{std::string(text)};
  std::string word;
  while (words >> word) {
    const auto eq = word.find('=');
    const std::string key = word.substr(0, eq);
    Field* f = nullptr;
    for (Field& candidate : fields) {
      if (key == candidate.name) f = &candidate;
    }
    if (eq == std::string::npos || f == nullptr) {
      return "expected KEY=VALUE words with keys query_heads, tile_rows, max_ctas, "
             "min_split_tokens, merge_rows and optionally packed_heads, packed_rows, "
             "packed_max_ctas, got '" +
             shorten(word) + "'";
    }
    if (f->seen) return "'" + key + "' given twice";
    const std::optional<std::int64_t> v = parse_int(std::string_view(word).substr(eq + 1));
    if (!v || *v < f->least || *v > (1 << 30)) {
      return "'" + key + "': expected an integer in [" + std::to_string(f->least) +
             ", 2^30], got '" + shorten(word.substr(eq + 1)) + "'";
    }
    *f->value = static_cast<std::int32_t>(*v);
    f->seen = true;
  }
  for (std::size_t i = 0; i < std::size(fields); ++i) {
    if (!fields[i].seen && (i < kRequired || fields[kRequired].seen || fields[kRequired + 1].seen ||
                            fields[kRequired + 2].seen)) {
      return "'" + std::string(fields[i].name) + "=' is missing" +
             (i < kRequired ? ""
                            : " (packed_heads, packed_rows and packed_max_ctas come together)");
    }
  }
  return prefill_launch_error(out);
}

// The SMs a CUDA profile's `# device:` line names ("NVIDIA H200 (sm_90, 132 SMs)"), or 0.
std::int64_t device_sms(const std::string& device) {
  const auto end = device.rfind(" SMs)");
  if (end == std::string::npos) return 0;
  const auto begin = device.rfind(' ', end - 1);
  if (begin == std::string::npos) return 0;
  const std::optional<std::int64_t> n = parse_int(device.substr(begin + 1, end - begin - 1));
  return n && *n >= 1 && *n <= (1 << 20) ? *n : 0;
}

// The prefill launch of a profile without a `# prefill_launch:` line (written before engines
// recorded it): a CUDA profile whose device line names its SMs and whose model is in the
// catalogue ran the wgmma kernel (the default over bf16 KV since 2026-12-04: 128 query rows per
// CTA, two resident CTAs per SM at head_dim 128), split plans with the default 512-key minimum,
// and the merge kernel of that time, one CTA per (tile, head) walking the tile's rows.
// Anything else (a CPU profile): none.
std::optional<PrefillLaunch> default_prefill_launch(const EngineProfile& p) {
  const auto device = p.header.find("device");
  const std::int64_t sms = device == p.header.end() ? 0 : device_sms(device->second);
  if (sms == 0) return std::nullopt;
  ModelConfig model;
  try {
    model = load_model(p.header.at("model"), default_catalog_dir());
  } catch (const ConfigError&) {
    return std::nullopt;  // a model the catalogue does not have: no critical-path terms
  }
  PrefillLaunch l;
  l.query_heads = model.num_heads;
  l.tile_rows = kDefaultProfileTileRows;
  l.max_ctas = static_cast<std::int32_t>(sms * kDefaultProfileCtasPerSm);
  l.min_split_tokens = kPrefillMinSplitTokens;
  l.merge_rows = l.tile_rows;
  return l;
}

// A profile row's prefill launch: `engine profile`'s shapes have alike prefill entries (k of
// them, k = entries - decode tokens, each of n queries after p cached tokens) and one-token
// decode entries. Fills in the row's critical paths, or returns what contradicts that.
std::string add_row_launch(const PrefillLaunch& launch, ProfileRow& r) {
  StepFeatures& s = r.features.step;
  if (s.prefill_tokens == 0) return "";
  const std::int64_t k = r.features.num_entries - s.decode_tokens;
  const auto unlike = [&] {
    return "prefill_tokens " + std::to_string(s.prefill_tokens) + ", prefill_context_tokens " +
           std::to_string(s.prefill_context_tokens) + " and prefill_pairs " +
           std::to_string(s.prefill_pairs) + " over " +
           std::to_string(std::max<std::int64_t>(k, 0)) +
           " prefill entries (num_entries - decode_tokens) are not those of alike entries, which "
           "the critical-path terms need (every shape of `engine profile` has them)";
  };
  if (k < 1 || s.prefill_tokens % k != 0 || s.prefill_context_tokens % k != 0) return unlike();
  const std::int64_t n = s.prefill_tokens / k;
  const std::int64_t p = s.prefill_context_tokens / k - n;
  if (p < 0 || k * causal_pairs(p, n) != s.prefill_pairs) return unlike();
  PrefillLaunchCost cost(launch);
  cost.add(p, n, k);
  const PrefillCriticalPath c = cost.critical_path();
  r.features.prefill_critical_keys = c.keys;
  r.features.prefill_merge_steps = c.merge_steps;
  return "";
}

}  // namespace

EngineProfile read_profile(const std::string& path) {
  if (!std::filesystem::is_regular_file(path)) {
    throw ConfigError(path + ": cannot open the profile (does it exist?)");
  }
  // The one CSV reader (traces/csv_reader.h): blank lines skipped, errors name PATH:LINE.
  CsvReader csv(path);
  EngineProfile p;
  p.file = path;
  std::vector<std::string> header;
  std::map<std::string, std::size_t> col;
  std::size_t lora_columns = 0;      // 2 when the profile has LoRA columns
  std::int64_t first_lora_line = 0;  // the first row with tokens under an adapter
  // Each row's (family, shape) and line.
  std::map<std::pair<std::string, std::vector<std::int64_t>>, std::int64_t> shapes;
  auto fail = [&](const std::string& what) { csv.fail_message(what); };
  while (csv.next_row()) {
    const std::string_view line = csv.line();
    if (line[0] == '#') {
      const std::string_view body = line.substr(1);
      const auto colon = body.find(':');
      if (colon != std::string_view::npos && !header.empty()) {
        // `engine profile` writes every header line before the column names: one after them
        // would be ignored, and the file read without it.
        fail("a header line ('#" + shorten(std::string(body.substr(0, colon))) +
             ": ...') after the column names; move it above them");
      }
      if (colon != std::string_view::npos && header.empty()) {
        const std::string key(trim(body.substr(0, colon)));
        const std::string value(trim(body.substr(colon + 1)));
        if (key == "machine_kind" && value != "cpu" && value != "cuda") {
          fail("header 'machine_kind': expected cpu or cuda, got '" + shorten(value) + "'");
        }
        if (key == "machine_name" && value.empty()) {
          fail("header 'machine_name': expected a device name, got nothing");
        }
        if (key == "machine_threads") {
          const std::optional<std::int64_t> n = parse_int(value);
          if (!n || *n < 1) {
            fail("header 'machine_threads': expected an integer >= 1, got '" + shorten(value) +
                 "'");
          }
        }
        if (key == "format_version" && value != "1") {
          fail("header 'format_version': this sim reads format 1, got '" + shorten(value) +
               "' (a profile from a newer engine? rerun `engine profile` with this build)");
        }
        if (key == "prefill_launch") {
          PrefillLaunch launch;
          if (const std::string why = parse_prefill_launch(value, launch); !why.empty()) {
            fail("header 'prefill_launch': " + why);
          }
          p.prefill_launch = launch;
        }
        if (!p.header.emplace(key, value).second) {
          fail("header '" + key + "' given twice (which one holds?)");
        }
      }
      continue;
    }
    std::vector<std::string> f;
    for (const std::string_view field : csv.fields()) f.emplace_back(trim(field));
    if (header.empty()) {
      header = std::move(f);
      for (std::size_t i = 0; i < header.size(); ++i) {
        if (!col.emplace(header[i], i).second) {
          fail("the column '" + header[i] + "' appears twice in the header");
        }
      }
      for (const std::string& c : profile_columns()) {
        if (c == "reps" || c == "min_ns" || c == "max_ns") continue;
        if (!col.count(c)) fail("the header has no column '" + c + "'");
      }
      lora_columns = 0;
      for (const std::string& c : profile_lora_columns()) lora_columns += col.count(c);
      if (lora_columns == 1) {
        fail("the header has one of the LoRA columns lora_tokens and num_loras, not both");
      }
      continue;
    }
    if (f.size() != header.size()) {
      fail("expected " + std::to_string(header.size()) + " fields, got " +
           std::to_string(f.size()));
    }
    // Counts and durations up to 1e15 (tokens, pairs, blocks; nanoseconds: 11.6 days), so the
    // fit's sums of a few of them stay far inside int64.
    constexpr long long kMaxValue = 1'000'000'000'000'000;
    auto integer = [&](const std::string& name) -> std::int64_t {
      const std::string& s = f[col.at(name)];
      errno = 0;
      char* end = nullptr;
      const long long v = std::strtoll(s.c_str(), &end, 10);
      if (s.empty() || *end != '\0' || errno != 0 || v < 0 || v > kMaxValue) {
        fail("column '" + name + "': expected an integer in [0, 1e15], got '" + s + "'");
      }
      return v;
    };
    ProfileRow r;
    r.line = csv.line_number();
    r.family = f[col.at("family")];
    if (r.family.empty()) fail("column 'family': empty");
    for (const char c : r.family) {
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
        fail("column 'family': a control character in '" + shorten(r.family) + "'");
      }
    }
    StepFeatures& s = r.features.step;
    s.num_tokens = integer("num_tokens");
    s.prefill_tokens = integer("prefill_tokens");
    s.prefill_pairs = integer("prefill_pairs");
    s.prefill_context_tokens = integer("prefill_context_tokens");
    s.decode_tokens = integer("decode_tokens");
    s.decode_pairs = integer("decode_pairs");
    s.decode_context_tokens = integer("decode_context_tokens");
    s.num_sampled = integer("num_sampled");
    r.features.num_entries = integer("num_entries");
    s.swap_out_blocks = integer("swap_out_blocks");
    s.swap_in_blocks = integer("swap_in_blocks");
    s.copy_blocks = integer("copy_blocks");
    if (lora_columns == 2) {
      s.lora_tokens = integer("lora_tokens");
      s.num_loras = integer("num_loras");
      if (s.lora_tokens > s.num_tokens || (s.num_loras > 0) != (s.lora_tokens > 0) ||
          s.num_loras > s.lora_tokens) {
        fail("lora_tokens (" + std::to_string(s.lora_tokens) + ") and num_loras (" +
             std::to_string(s.num_loras) +
             "): expected at most num_tokens tokens under at most as many adapters, both 0 or "
             "both positive");
      }
      if (s.lora_tokens > 0 && first_lora_line == 0) first_lora_line = csv.line_number();
    }
    r.median_ns = integer("median_ns");
    // The spread columns, when the profile has them, bracket the median.
    if (col.count("min_ns") && col.count("max_ns")) {
      const std::int64_t lo = integer("min_ns"), hi = integer("max_ns");
      if (lo > r.median_ns || r.median_ns > hi) {
        fail("min_ns " + std::to_string(lo) + ", median_ns " + std::to_string(r.median_ns) +
             ", max_ns " + std::to_string(hi) + ": expected min_ns <= median_ns <= max_ns");
      }
    }
    if (const auto it = col.find("power_w"); it != col.end() && !f[it->second].empty()) {
      const std::string& text = f[it->second];
      char* end = nullptr;
      const double w = std::strtod(text.c_str(), &end);
      // Decimal only: strtod would read "0x10" as 16 W and "inf" as infinite.
      const bool decimal = text.find_first_not_of("0123456789.eE+-") == std::string::npos;
      if (!decimal || *end != '\0' || !(w > 0) || w > 1e5) {
        fail("column 'power_w': expected watts in (0, 1e5] or nothing, got '" + f[it->second] +
             "'");
      }
      r.power_w = w;
    }
    if (s.num_tokens != s.prefill_tokens + s.decode_tokens) {
      fail("num_tokens (" + std::to_string(s.num_tokens) +
           ") is not prefill_tokens + decode_tokens");
    }
    if (r.features.empty()) fail("an empty step (no tokens, no block moves)");
    if (r.median_ns <= 0) fail("column 'median_ns': expected a positive duration");
    // One row a shape: a shape measured twice could be fitted on one row and held out on the
    // other, and the hold-out would test the fit on a shape it saw.
    const std::vector<std::int64_t> shape = {s.num_tokens,
                                             s.prefill_tokens,
                                             s.prefill_pairs,
                                             s.prefill_context_tokens,
                                             s.decode_tokens,
                                             s.decode_pairs,
                                             s.decode_context_tokens,
                                             s.num_sampled,
                                             r.features.num_entries,
                                             s.swap_out_blocks,
                                             s.swap_in_blocks,
                                             s.copy_blocks,
                                             s.lora_tokens,
                                             s.num_loras};
    if (const auto [it, fresh] = shapes.try_emplace({r.family, shape}, r.line); !fresh) {
      fail("the same shape as line " + std::to_string(it->second) + " (family '" +
           shorten(r.family) + "'): a profile measures each shape once");
    }
    p.rows.push_back(std::move(r));
  }
  if (header.empty() || p.rows.empty()) {
    throw ConfigError(path + ": the profile holds no measurements (empty, or only comments)");
  }
  auto header_int = [&](const std::string& key, std::int64_t min,
                        std::int64_t max) -> std::int64_t {
    auto it = p.header.find(key);
    if (it == p.header.end()) {
      throw ConfigError(path + ": header line '# " + key + ": ...' is missing");
    }
    errno = 0;
    char* end = nullptr;
    const long long v = std::strtoll(it->second.c_str(), &end, 10);
    if (it->second.empty() || *end != '\0' || errno != 0 || v < min || v > max) {
      throw ConfigError(path + ": header '" + key + "': expected an integer in [" +
                        std::to_string(min) + ", " + std::to_string(max) + "], got '" + it->second +
                        "'");
    }
    return v;
  };
  if (!p.header.count("model")) throw ConfigError(path + ": header line '# model: ...' is missing");
  if (p.header.at("model").empty()) {
    throw ConfigError(path + ": header 'model': expected the profiled model's name, got nothing");
  }
  p.block_size = static_cast<std::int32_t>(header_int("block_size", 1, 256));
  p.block_bytes = header_int("block_bytes", 1, std::int64_t{1} << 40);
  if (p.header.count("lora_rank") || first_lora_line > 0) {
    if (!p.header.count("lora_rank")) {
      throw ConfigError(path + ":" + std::to_string(first_lora_line) +
                        ": a row with tokens under LoRA adapters, but no header line "
                        "'# lora_rank: R' (the adapters' rank)");
    }
    p.lora_rank = static_cast<std::int32_t>(header_int("lora_rank", 1, kMaxLoraRank));
  }
  // How the model was stored: optional (older profiles have neither line).
  const auto storage = [&](const char* key, const auto& words) -> std::string {
    const auto it = p.header.find(key);
    if (it == p.header.end()) return "";
    if (const std::string why = unknown_storage_word(it->second, words); !why.empty()) {
      throw ConfigError(path + ": header '" + key + "': " + why);
    }
    return it->second;
  };
  p.kv_cache_dtype = storage("kv_cache_dtype", kProfileKvDtypes);
  p.quantization = storage("quantization", kQuantizations);
  // The machine: all three lines (each checked where it was read) or none (an older profile).
  const int machine_lines =
      static_cast<int>(p.header.count("machine_kind") + p.header.count("machine_name") +
                       p.header.count("machine_threads"));
  if (machine_lines == 3) {
    MachineRecord m;
    m.kind = p.header.at("machine_kind");
    m.name = p.header.at("machine_name");
    m.threads = header_int("machine_threads", 1, 1 << 20);
    p.machine = std::move(m);
  } else if (machine_lines > 0) {
    for (const char* key : {"machine_kind", "machine_name", "machine_threads"}) {
      if (!p.header.count(key)) {
        throw ConfigError(path + ": header line '# " + std::string(key) +
                          ": ...' is missing (the machine_kind, machine_name and "
                          "machine_threads lines come together)");
      }
    }
  }
  // The prefill launch the critical-path terms are computed over: the header's, or for an older
  // CUDA profile the defaults of its time.
  if (p.prefill_launch) {
    p.prefill_launch_source = "from the profile's header";
  } else if ((p.prefill_launch = default_prefill_launch(p))) {
    p.prefill_launch_source = "defaults, the profile having no prefill_launch line: " +
                              std::to_string(kDefaultProfileCtasPerSm) +
                              " CTAs per SM, the catalogue model's query heads";
  }
  if (p.prefill_launch) {
    for (ProfileRow& r : p.rows) {
      if (const std::string why = add_row_launch(*p.prefill_launch, r); !why.empty()) {
        throw ConfigError(path + ":" + std::to_string(r.line) + ": " + why);
      }
    }
  }
  return p;
}

std::map<std::string, FamilyError> profile_errors(const EngineProfile& profile,
                                                  const CalibratedCoefficients& coefficients,
                                                  FamilyError* overall) {
  std::map<std::string, FamilyError> fam;
  FamilyError all;
  const double bb = static_cast<double>(profile.block_bytes);
  for (const ProfileRow& r : profile.rows) {
    const double measured = static_cast<double>(r.median_ns) * 1e-9;
    const double err =
        std::abs(calibrated_seconds(coefficients, r.features, bb, profile.lora_rank) - measured) /
        measured;
    for (FamilyError* e : {&fam[r.family], &all}) {
      ++e->shapes;
      e->mape += err;
      e->max_error = std::max(e->max_error, err);
    }
  }
  for (auto& [name, e] : fam) e.mape /= static_cast<double>(e.shapes);
  if (all.shapes) all.mape /= static_cast<double>(all.shapes);
  if (overall) *overall = all;
  return fam;
}

ProfileSplit split_profile(const EngineProfile& profile, int every) {
  if (every < 2) {
    throw ConfigError("--holdout: expected an integer >= 2 (every N-th shape is held out), got " +
                      std::to_string(every));
  }
  ProfileSplit s;
  s.fit = profile;
  s.fit.rows.clear();
  s.held_out = s.fit;
  std::map<std::string, int> seen;  // shapes of each family so far
  for (const ProfileRow& r : profile.rows) {
    const int k = ++seen[r.family];
    (k % every == 0 ? s.held_out : s.fit).rows.push_back(r);
  }
  if (s.held_out.rows.empty()) {
    throw ConfigError(profile.file + ": --holdout " + std::to_string(every) +
                      ": no shape family has " + std::to_string(every) +
                      " shapes, so nothing would be held out");
  }
  return s;
}

CalibrationResult fit_profile_holdout(const EngineProfile& profile, int every) {
  const ProfileSplit s = split_profile(profile, every);
  CalibrationResult r = fit_profile(s.fit);
  HoldoutErrors h;
  h.every = every;
  h.families = profile_errors(s.held_out, r.profile.coefficients, &h.overall);
  r.holdout = std::move(h);
  return r;
}

CalibrationResult fit_profile(const EngineProfile& profile) {
  const Eigen::Index n = static_cast<Eigen::Index>(profile.rows.size());
  const double bb = static_cast<double>(profile.block_bytes);
  // Candidate knees: every distinct value of the feature but the largest.
  auto candidates = [&](auto value) {
    std::set<std::int64_t> values;
    for (const ProfileRow& r : profile.rows) values.insert(value(r.features));
    std::vector<std::int64_t> out;
    for (std::int64_t v : values) {
      if (v > 0 && v < *values.rbegin()) out.push_back(v);
    }
    return out;
  };

  struct Fit {
    Eigen::VectorXd x;
    double objective = INFINITY;
    bool converged = true;
  };
  double huber_c = 0;  // set by the first fit
  // A knee's term the shapes cannot determine leaves that knee out (an infinite objective); the
  // fit without knees must be determined.
  auto fit = [&](std::int64_t knee, std::int64_t decode_knee) {
    Eigen::MatrixXd A(n, kTerms);
    const Eigen::VectorXd b = Eigen::VectorXd::Ones(n);
    for (Eigen::Index i = 0; i < n; ++i) {
      const ProfileRow& r = profile.rows[static_cast<std::size_t>(i)];
      const auto row = basis(r.features, knee, decode_knee, bb, profile.lora_rank);
      const double y = static_cast<double>(r.median_ns) * 1e-9;
      for (int j = 0; j < kTerms; ++j) A(i, j) = row[static_cast<std::size_t>(j)] / y;
    }
    // Normalise columns (a zero column stays zero and its coefficient 0).
    Eigen::VectorXd norms = A.colwise().norm().transpose();
    int used = 0;
    for (int j = 0; j < kTerms; ++j) {
      if (norms(j) > 0) {
        A.col(j) /= norms(j);
        ++used;
      } else {
        norms(j) = 1;
      }
    }
    if (n < used) {
      if (knee != 0 || decode_knee != 0) return Fit{};
      throw ConfigError(profile.file + ": " + std::to_string(n) + " shapes cannot determine the " +
                        std::to_string(used) + " terms they exercise; profile more shapes");
    }
    // Huber-weighted NNLS (sim/huber_nnls.h): a shape whose median was hit by a scheduling
    // hiccup (a few ms on a loaded machine) weighs linearly, not quadratically. The Huber
    // threshold is fixed from the first (no-knee) fit so that the objectives of all knees are
    // comparable.
    const HuberNnlsResult h = huber_nnls(A, b, huber_c);
    const NnlsResult& r = h.fit;
    Fit f;
    f.objective = h.objective;
    f.x = r.x.cwiseQuotient(norms);
    f.converged = r.converged;
    return f;
  };

  // No knees; then the best GEMM knee; then, with it, the best decode-context knee. A knee adds
  // two parameters (its position and slope): it must cut the objective by at least 25 % to be
  // kept, so noise alone does not buy one.
  Fit best = fit(0, 0);
  std::int64_t best_knee = 0, best_decode_knee = 0;
  {
    const double needed = 0.75 * best.objective;
    for (std::int64_t k :
         candidates([](const CalibrationFeatures& f) { return f.step.num_tokens; })) {
      Fit f = fit(k, 0);
      if (f.objective < needed && f.objective < best.objective) {
        best = std::move(f);
        best_knee = k;
      }
    }
  }
  {
    const double needed = 0.75 * best.objective;
    for (std::int64_t k :
         candidates([](const CalibrationFeatures& f) { return f.step.decode_context_tokens; })) {
      Fit f = fit(best_knee, k);
      if (f.objective < needed && f.objective < best.objective) {
        best = std::move(f);
        best_decode_knee = k;
      }
    }
  }
  const bool converged = best.converged;
  const Eigen::VectorXd best_x = best.x;

  CalibrationResult result;
  result.converged = converged;
  CalibratedProfile& p = result.profile;
  auto header = [&](const std::string& k) {
    auto it = profile.header.find(k);
    return it == profile.header.end() ? std::string() : it->second;
  };
  p.model = header("model");
  p.device = header("device");
  p.machine = profile.machine;
  p.date_utc = header("date_utc");
  p.engine_version = header("engine_version");
  p.block_size = profile.block_size;
  p.block_bytes = profile.block_bytes;
  p.kv_cache_dtype = profile.kv_cache_dtype;
  p.quantization = profile.quantization;
  const bool lora = std::any_of(profile.rows.begin(), profile.rows.end(), [](const ProfileRow& r) {
    return r.features.step.lora_tokens > 0;
  });
  p.coefficients = from_vector(best_x, best_knee, best_decode_knee, lora, profile.prefill_launch);
  result.lora_rank = profile.lora_rank;
  result.prefill_launch_source = profile.prefill_launch_source;
  result.families = profile_errors(profile, p.coefficients, &result.overall);
  for (const ProfileRow& r : profile.rows) {
    result.predicted_s.push_back(
        calibrated_seconds(p.coefficients, r.features, bb, profile.lora_rank));
  }
  return result;
}

std::string calibration_yaml(const CalibrationResult& result, const std::string& profile_path,
                             const HostOverhead* host) {
  const CalibratedProfile& p = result.profile;
  const CalibratedCoefficients& c = p.coefficients;
  YAML::Emitter y;
  y.SetDoublePrecision(9);  // "%.9g"
  y.SetIndent(2);
  const auto text = [&](const char* key, const std::string& value) {
    y << YAML::Key << key << YAML::Value << YAML::DoubleQuoted << value;
  };
  const auto number = [&](const char* key, auto value) {
    y << YAML::Key << key << YAML::Value << value;
  };
  y << YAML::BeginMap;
  number("type", "calibrated");
  number("format_version", 1);
  text("model", p.model);
  text("device", p.device);
  if (p.machine) {  // profiles written before the machine was recorded have none
    y << YAML::Key << "machine" << YAML::Value
      << YAML::Comment("what the profile ran on; calibrations do not carry across machines")
      << YAML::BeginMap;
    number("kind", p.machine->kind);
    text("name", p.machine->name);
    number("threads", p.machine->threads);
    y << YAML::EndMap;
  }
  text("date_utc", p.date_utc);
  text("engine_version", p.engine_version);
  text("profile", profile_path);
  number("block_size", p.block_size);
  number("block_bytes", p.block_bytes);
  // How the profiled engine stored the model (profiles before these were recorded have neither).
  if (!p.kv_cache_dtype.empty()) number("kv_cache_dtype", p.kv_cache_dtype);
  if (!p.quantization.empty()) number("quantization", p.quantization);
  y << YAML::Key << "coefficients" << YAML::Value
    << YAML::Comment("seconds per unit; step = sum of unit counts x these") << YAML::BeginMap;
  number("step_s", c.step_s);
  y << YAML::Comment("per non-empty step");
  number("per_sequence_s", c.per_sequence_s);
  number("per_token_s", c.per_token_s);
  number("per_token_above_knee_s", c.per_token_above_knee_s);
  number("knee_tokens", c.knee_tokens);
  number("prefill_pair_s", c.prefill_pair_s);
  number("decode_context_token_s", c.decode_context_token_s);
  number("decode_context_token_above_knee_s", c.decode_context_token_above_knee_s);
  number("decode_context_knee_tokens", c.decode_context_knee_tokens);
  number("sampled_sequence_s", c.sampled_sequence_s);
  number("swap_byte_s", c.swap_byte_s);
  number("copy_byte_s", c.copy_byte_s);
  if (c.lora_set) {
    number("lora_token_rank_s", c.lora_token_rank_s);
    number("lora_adapter_rank_s", c.lora_adapter_rank_s);
  }
  if (c.wake_up_s > 0) {
    number("wake_up_s", c.wake_up_s);
    y << YAML::Comment("an idle engine's wake-up: a step on an idle replica starts this late");
  }
  if (c.prefill_launch) {
    const PrefillLaunch& l = *c.prefill_launch;
    number("prefill_critical_key_s", c.prefill_critical_key_s);
    y << YAML::Comment("per key on the prefill launch's critical path");
    number("prefill_merge_step_s", c.prefill_merge_step_s);
    y << YAML::Comment("per dependent step of the split-KV merge");
    y << YAML::Key << "prefill_launch" << YAML::Value << YAML::Flow << YAML::BeginMap;
    number("query_heads", l.query_heads);
    number("tile_rows", l.tile_rows);
    number("max_ctas", l.max_ctas);
    number("min_split_tokens", l.min_split_tokens);
    number("merge_rows", l.merge_rows);
    if (l.packs()) {
      number("packed_heads", l.packed_heads);
      number("packed_rows", l.packed_rows);
      number("packed_max_ctas", l.packed_max_ctas);
    }
    y << YAML::EndMap;
  }
  y << YAML::EndMap;
  y << YAML::Key << "fit" << YAML::Value
    << YAML::Comment(result.holdout
                         ? "relative errors (fractions) on the shapes fitted; holdout: on the "
                           "shapes held out of the fit"
                         : "relative errors on the profile itself (fractions)")
    << YAML::BeginMap;
  number("method", "nnls-relative-huber");
  number("converged", result.converged);
  number("shapes", result.overall.shapes);
  number("mape", result.overall.mape);
  number("max_error", result.overall.max_error);
  const auto families = [&](const std::map<std::string, FamilyError>& fams) {
    y << YAML::Key << "families" << YAML::Value << YAML::BeginMap;
    for (const auto& [name, e] : fams) {
      y << YAML::Key << YAML::DoubleQuoted << name << YAML::Value << YAML::Flow << YAML::BeginMap;
      number("shapes", e.shapes);
      number("mape", e.mape);
      number("max_error", e.max_error);
      y << YAML::EndMap;
    }
    y << YAML::EndMap;
  };
  families(result.families);
  if (result.holdout) {
    const HoldoutErrors& h = *result.holdout;
    y << YAML::Key << "holdout" << YAML::Value << YAML::BeginMap;
    number("every", h.every);
    number("shapes", h.overall.shapes);
    number("mape", h.overall.mape);
    number("max_error", h.overall.max_error);
    families(h.families);
    y << YAML::EndMap;
  }
  y << YAML::EndMap;
  if (host != nullptr) {
    y << YAML::Key << "host_overhead" << YAML::Value
      << YAML::Comment(host->carried ? "added to step_s and per_sequence_s; fitted with an earlier "
                                       "calibration's predictions (--host-overhead-from)"
                                     : "added to step_s and per_sequence_s")
      << YAML::BeginMap;
    text("engine_run", host->engine_run);
    number("steps", host->steps);
    number("step_s", host->step_s);
    number("per_sequence_s", host->per_sequence_s);
    if (host->between_steps) y << YAML::Key << "between_steps" << YAML::Value << true;
    number("wake_ups", host->wake_ups);
    number("wake_up_s", host->wake_up_s);
    y << YAML::EndMap;
  }
  y << YAML::EndMap;
  if (!y.good()) throw std::logic_error("calibration_yaml: " + y.GetLastError());
  return "# ServeLab calibrated cost model, written by `sim calibrate` (docs/validation.md).\n"
         "# Use it with `cost_model: {type: calibrated, file: THIS_FILE}` in an experiment,\n"
         "# or `sim run EXP.yaml --set cost_model.file=THIS_FILE`.\n" +
         std::string(y.c_str()) + "\n";
}

void print_calibration(std::FILE* out, const CalibrationResult& r) {
  const CalibratedProfile& p = r.profile;
  const CalibratedCoefficients& c = p.coefficients;
  std::fprintf(out, "calibrated %s on %s (%s, engine %s)\n", p.model.c_str(), p.device.c_str(),
               p.date_utc.c_str(), p.engine_version.c_str());
  if (!p.kv_cache_dtype.empty()) {
    std::fprintf(out, "  stored as: KV cache %s, weights %s (it prices only runs stored so)\n",
                 p.kv_cache_dtype.c_str(),
                 p.quantization.empty() || p.quantization == "none" ? "unquantized"
                                                                    : p.quantization.c_str());
  }
  std::fprintf(out, "  coefficients:\n");
  std::fprintf(out, "    step                  %12.3f us\n", c.step_s * 1e6);
  std::fprintf(out, "    per sequence          %12.3f us\n", c.per_sequence_s * 1e6);
  std::fprintf(out, "    per token             %12.4f us\n", c.per_token_s * 1e6);
  std::fprintf(out, "    per token above %-6lld%12.4f us\n", static_cast<long long>(c.knee_tokens),
               c.per_token_above_knee_s * 1e6);
  std::fprintf(out, "    per prefill pair      %12.6f us\n", c.prefill_pair_s * 1e6);
  std::fprintf(out, "    per decode KV token   %12.6f us\n", c.decode_context_token_s * 1e6);
  std::fprintf(out, "    ... above %-10lld  %12.6f us\n",
               static_cast<long long>(c.decode_context_knee_tokens),
               c.decode_context_token_above_knee_s * 1e6);
  std::fprintf(out, "    per sampled sequence  %12.3f us\n", c.sampled_sequence_s * 1e6);
  std::fprintf(out, "    swap                  %12.3f GB/s\n",
               c.swap_byte_s > 0 ? 1e-9 / c.swap_byte_s : 0.0);
  std::fprintf(out, "    copy                  %12.3f GB/s\n",
               c.copy_byte_s > 0 ? 1e-9 / c.copy_byte_s : 0.0);
  if (c.lora_set) {
    std::fprintf(out, "    LoRA token x rank     %12.6f us  (x rank %d: %.4f us a token)\n",
                 c.lora_token_rank_s * 1e6, r.lora_rank, c.lora_token_rank_s * r.lora_rank * 1e6);
    std::fprintf(out, "    LoRA adapter x rank   %12.6f us  (x rank %d: %.3f us an adapter)\n",
                 c.lora_adapter_rank_s * 1e6, r.lora_rank,
                 c.lora_adapter_rank_s * r.lora_rank * 1e6);
  }
  if (c.prefill_launch) {
    const PrefillLaunch& l = *c.prefill_launch;
    std::fprintf(out, "    per critical key      %12.6f us\n", c.prefill_critical_key_s * 1e6);
    std::fprintf(out, "    per merge step        %12.6f us\n", c.prefill_merge_step_s * 1e6);
    std::fprintf(out,
                 "    over the prefill launch (%s):\n      %d query heads, %d-row tiles, %d CTA "
                 "slots, splits of >= %d keys, %d rows a merge CTA\n",
                 r.prefill_launch_source.c_str(), l.query_heads, l.tile_rows, l.max_ctas,
                 l.min_split_tokens, l.merge_rows);
    if (l.packs()) {
      std::fprintf(out,
                   "      entries of <= %d queries: %d heads a CTA, %d-row tiles, %d CTA slots\n",
                   l.packed_rows, l.packed_heads, l.packed_rows, l.packed_max_ctas);
    }
  }
  const auto table = [&](const std::map<std::string, FamilyError>& fams,
                         const FamilyError& overall) {
    std::fprintf(out, "    %-16s %7s %9s %9s\n", "family", "shapes", "MAPE %", "max %");
    for (const auto& [name, e] : fams) {
      std::fprintf(out, "    %-16s %7lld %9.2f %9.2f\n", name.c_str(),
                   static_cast<long long>(e.shapes), 100 * e.mape, 100 * e.max_error);
    }
    std::fprintf(out, "    %-16s %7lld %9.2f %9.2f\n", "all",
                 static_cast<long long>(overall.shapes), 100 * overall.mape,
                 100 * overall.max_error);
  };
  std::fprintf(out, "  fit error by shape family (|predicted - measured| / measured)%s:\n",
               r.holdout ? ", on the shapes fitted" : "");
  table(r.families, r.overall);
  if (r.holdout) {
    std::fprintf(out, "  held-out error (one shape in %d of each family, never fitted):\n",
                 r.holdout->every);
    table(r.holdout->families, r.holdout->overall);
  }
  if (!r.converged) std::fprintf(out, "  warning: NNLS stopped at its iteration limit\n");
}

}  // namespace servelab
