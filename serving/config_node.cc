#include "serving/config_node.h"

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/parser.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <unordered_map>
#include <utility>

#include "core/strings.h"

namespace servelab {

namespace {

// Nodes created by --set carry this tag so messages can say where the value came from.
constexpr const char* kOverrideTag = "!servelab-set";
// The same mark on a scalar that was quoted (yaml-cpp's tag "!"): it stays text, never a number.
constexpr const char* kQuotedOverrideTag = "!servelab-set-quoted";

bool override_tag(const std::string& tag) {
  return tag == kOverrideTag || tag == kQuotedOverrideTag;
}

// Marks every node of an override value so messages about it say "--set a.b.c".
void tag_override(YAML::Node node) {
  node.SetTag(node.IsScalar() && node.Tag() == "!" ? kQuotedOverrideTag : kOverrideTag);
  if (node.IsMap()) {
    for (auto kv : node) tag_override(kv.second);
  } else if (node.IsSequence()) {
    for (auto e : node) tag_override(e);
  }
}

std::string mark_text(const std::string& name, const YAML::Mark& m) {
  if (m.line < 0) return name;
  return name + ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1);
}

// Where the first document after the first one with content begins, if there is one. Read
// through the parser's events (no tree is built): yaml-cpp's LoadAll loops forever on some
// malformed input, yielding empty documents without consuming it (found by experiment_fuzz),
// so at most kMaxDocuments documents are looked at; empty ones (a trailing `---`) do not count.
std::optional<YAML::Mark> second_document(const std::string& text) {
  struct Probe : YAML::EventHandler {
    std::optional<YAML::Mark> content;  // of the current document
    void content_at(const YAML::Mark& m) {
      if (!content) content = m;
    }
    void OnDocumentStart(const YAML::Mark&) override { content.reset(); }
    void OnDocumentEnd() override {}
    void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
    void OnAlias(const YAML::Mark& m, YAML::anchor_t) override { content_at(m); }
    void OnScalar(const YAML::Mark& m, const std::string&, YAML::anchor_t,
                  const std::string&) override {
      content_at(m);
    }
    void OnSequenceStart(const YAML::Mark& m, const std::string&, YAML::anchor_t,
                         YAML::EmitterStyle::value) override {
      content_at(m);
    }
    void OnSequenceEnd() override {}
    void OnMapStart(const YAML::Mark& m, const std::string&, YAML::anchor_t,
                    YAML::EmitterStyle::value) override {
      content_at(m);
    }
    void OnMapEnd() override {}
  } probe;
  constexpr int kMaxDocuments = 64;
  std::istringstream in(text);
  YAML::Parser parser(in);
  for (int i = 0; i < kMaxDocuments && parser.HandleNextDocument(probe); ++i) {
    if (i > 0 && probe.content) return probe.content;
  }
  return std::nullopt;
}

}  // namespace

// Whether mark a comes before mark b in the text (false when either is unknown).
bool before(const YAML::Mark& a, const YAML::Mark& b) {
  if (a.line < 0 || b.line < 0) return false;
  return a.line < b.line || (a.line == b.line && a.column < b.column);
}

// The text positions of the nodes YAML aliases share. An alias's node is its anchor's (yaml-cpp
// shares one node), so where it is reached again its mark, the anchor's place, comes before the
// key or the list position that reaches it: those marks name every shared node.
std::set<std::pair<int, int>> shared_node_marks(const YAML::Node& root) {
  std::set<std::pair<int, int>> out;
  std::vector<YAML::Node> stack{root};
  for (std::size_t visited = 0; !stack.empty() && visited < kMaxYamlNodes; ++visited) {
    const YAML::Node node = stack.back();
    stack.pop_back();
    if (node.IsMap()) {
      for (const auto& kv : node) {
        // An override's nodes carry positions in its --set text, not in the file's.
        if (override_tag(kv.second.Tag())) continue;
        if (before(kv.second.Mark(), kv.first.Mark())) {
          out.emplace(kv.second.Mark().line, kv.second.Mark().column);
        } else {
          stack.push_back(kv.second);
        }
      }
    } else if (node.IsSequence()) {
      YAML::Mark prev = node.Mark();
      for (const auto& e : node) {
        if (override_tag(e.Tag())) continue;
        // An entry never starts where the one before it (or its list) does, but an alias does.
        if (e.Mark().line >= 0 && prev.line >= 0 && !before(prev, e.Mark())) {
          out.emplace(e.Mark().line, e.Mark().column);
          continue;
        }
        prev = e.Mark();
        stack.push_back(e);
      }
    }
  }
  return out;
}

void check_yaml_structure(const YAML::Node& root, const std::string& name) {
  // Depth-first over the tree as a reader sees it: a node reached through several aliases is
  // visited (and counted) once per path, which is what expanding the aliases would cost.
  std::vector<std::pair<YAML::Node, int>> stack{{root, 0}};
  std::size_t count = 0;
  while (!stack.empty()) {
    auto [node, depth] = stack.back();
    stack.pop_back();
    if (++count > kMaxYamlNodes) {
      throw ConfigError(mark_text(name, node.Mark()) + ": more than " +
                        std::to_string(kMaxYamlNodes) +
                        " YAML nodes (with anchors and aliases expanded); refusing to load it");
    }
    if (depth > kMaxYamlDepth) {
      throw ConfigError(mark_text(name, node.Mark()) + ": nesting too deep (more than " +
                        std::to_string(kMaxYamlDepth) + " levels)");
    }
    // `!!str 20` is the text "20", as "20" quoted: the same non-specific tag from here on, so
    // every reader treats it as one (it was read as the number). The other core tags (!!int,
    // !!float, !!bool) say what the value reads as anyway; an application tag (`!mine`) means
    // nothing to ServeLab and is refused rather than dropped.
    if (node.IsScalar() && node.Tag() == "tag:yaml.org,2002:str") node.SetTag("!");
    if (const std::string& tag = node.Tag();
        tag.size() > 1 && tag[0] == '!' && !override_tag(tag)) {
      throw ConfigError(mark_text(name, node.Mark()) + ": the YAML tag '" + tag +
                        "' is not supported (ServeLab reads plain values; quote text instead)");
    }
    if (node.IsMap()) {
      std::unordered_map<std::string, YAML::Mark> seen;  // membership only, never iterated
      for (const auto& kv : node) {
        // Every reader takes keys as names: a sequence, mapping or empty key ("? - a") is an
        // error here, once, rather than a conversion failure wherever the key is read.
        if (!kv.first.IsScalar()) {
          throw ConfigError(mark_text(name, kv.first.Mark()) +
                            ": expected a plain key (a name), got " +
                            (kv.first.IsSequence() ? "a sequence"
                             : kv.first.IsMap()    ? "a mapping"
                                                   : "an empty key"));
        }
        {
          const std::string key = kv.first.Scalar();
          if (key == "<<" && kv.first.Tag() == "?") {
            throw ConfigError(mark_text(name, kv.first.Mark()) +
                              ": YAML merge keys (<<) are not supported; write the keys out");
          }
          const auto [it, added] = seen.emplace(key, kv.first.Mark());
          if (!added) {
            throw ConfigError(mark_text(name, kv.first.Mark()) + ": duplicate key '" + key +
                              "' (first at line " + std::to_string(it->second.line + 1) + ")");
          }
        }
        if (kv.second.IsNull()) {
          // `key:` with nothing after it: never read as "the default" (remove the key for that).
          throw ConfigError(mark_text(name, kv.first.Mark()) + ": key '" + kv.first.Scalar() +
                            "' has no value (give one, or remove the key to use its default)");
        }
        stack.emplace_back(kv.second, depth + 1);
      }
    } else if (node.IsSequence()) {
      for (const auto& e : node) {
        if (e.IsNull()) {
          throw ConfigError(mark_text(name, e.Mark()) + ": an empty list entry (no value)");
        }
        stack.emplace_back(e, depth + 1);
      }
    }
  }
}

ConfigNode ConfigNode::load_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw ConfigError(path + ": is a directory, expected a YAML file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(path + ": cannot open file (" + std::strerror(errno) + ")");
  std::stringstream ss;
  ss << in.rdbuf();
  return load_string(ss.str(), path);
}

ConfigNode ConfigNode::load_string(const std::string& text, const std::string& name) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
    // A second document (after `---`) is an error rather than silently ignored.
    if (const std::optional<YAML::Mark> second = second_document(text)) {
      throw ConfigError(mark_text(name, *second) +
                        ": a second YAML document (after '---'); an experiment is one document");
    }
  } catch (const YAML::DeepRecursion& e) {
    throw ConfigError(name + ":" + std::to_string(e.mark.line + 1) + ":" +
                      std::to_string(e.mark.column + 1) + ": nesting too deep (more than " +
                      std::to_string(kMaxYamlDepth) + " levels)");
  } catch (const YAML::Exception& e) {
    throw ConfigError(name + ":" + std::to_string(e.mark.line + 1) + ":" +
                      std::to_string(e.mark.column + 1) + ": malformed YAML: " + e.msg);
  }
  if (!root.IsMap()) {
    throw ConfigError(name + ":1:1: expected a mapping of sections at the top level");
  }
  check_yaml_structure(root, name);
  return ConfigNode(root, std::make_shared<const std::string>(name), "");
}

ConfigNode::ConfigNode(YAML::Node node, std::shared_ptr<const std::string> file, std::string path)
    : node_(std::move(node)), file_(std::move(file)), path_(std::move(path)) {}

std::string ConfigNode::location() const {
  if (override_tag(node_.Tag())) return "--set " + path_;
  const YAML::Mark m = node_.Mark();
  if (m.line < 0) return *file_;
  return *file_ + ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1);
}

bool ConfigNode::has(std::string_view key) const {
  return node_.IsMap() && node_[std::string(key)].IsDefined() && !node_[std::string(key)].IsNull();
}

std::vector<std::string> ConfigNode::keys() const {
  std::vector<std::string> out;
  if (!node_.IsMap()) return out;
  for (const auto& kv : node_) out.push_back(kv.first.Scalar());
  return out;
}

std::string ConfigNode::child_path(std::string_view key) const {
  return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
}

ConfigNode ConfigNode::at(std::string_view key) const {
  if (!node_.IsMap()) fail("a mapping");
  YAML::Node child = node_[std::string(key)];
  if (!child.IsDefined() || child.IsNull()) {
    throw ConfigError(location() + ": key '" + child_path(key) + "' is required but missing");
  }
  return ConfigNode(child, file_, child_path(key));
}

std::optional<ConfigNode> ConfigNode::find(std::string_view key) const {
  if (!has(key)) return std::nullopt;
  return at(key);
}

std::vector<ConfigNode> ConfigNode::elements() const {
  if (!node_.IsSequence()) fail("a list");
  std::vector<ConfigNode> out;
  std::size_t i = 0;
  for (const auto& e : node_) out.emplace_back(e, file_, path_ + "[" + std::to_string(i++) + "]");
  return out;
}

void ConfigNode::allow_keys(std::initializer_list<std::string_view> allowed) const {
  allow_keys(std::vector<std::string>(allowed.begin(), allowed.end()));
}

void ConfigNode::allow_keys(const std::vector<std::string>& allowed) const {
  if (!node_.IsMap()) fail("a mapping");
  for (const auto& kv : node_) {
    const std::string key = kv.first.Scalar();
    bool ok = false;
    for (const auto& a : allowed) ok = ok || a == key;
    if (!ok) {
      // Where the key was written: its line in the file, or the --set that brought it (the
      // override's values carry the tag; its keys do not, and their marks are positions in the
      // --set text, not in the file).
      const ConfigNode k(override_tag(kv.second.Tag()) ? kv.second : kv.first, file_,
                         child_path(key));
      throw ConfigError(k.location() + ": unknown key '" + child_path(key) +
                        "' (expected one of: " + join(allowed) + ")");
    }
  }
}

std::string ConfigNode::describe_value() const {
  if (!node_.IsDefined() || node_.IsNull()) return "nothing";
  if (node_.IsMap()) return "a mapping";
  if (node_.IsSequence()) return "a list";
  if (quoted()) return "the quoted text '" + node_.Scalar() + "'";
  return "'" + node_.Scalar() + "'";
}

bool ConfigNode::quoted() const {
  // yaml-cpp gives a quoted scalar the non-specific tag "!", a plain one "?".
  return node_.IsScalar() && (node_.Tag() == "!" || node_.Tag() == kQuotedOverrideTag);
}

void ConfigNode::fail(std::string_view expected) const {
  throw ConfigError(location() + ": key '" + path_ + "': expected " + std::string(expected) +
                    ", got " + describe_value());
}

void ConfigNode::fail_message(std::string_view message) const {
  throw ConfigError(location() + ": key '" + path_ + "': " + std::string(message));
}

namespace {

// `010`, `-007`: YAML 1.1 reads an integer with a leading zero as octal (8), YAML 1.2 and
// strtoll as decimal (10); which one the writer meant is unknowable, so both refuse it.
bool has_leading_zero(const std::string& s) {
  const std::size_t i = !s.empty() && (s[0] == '-' || s[0] == '+') ? 1 : 0;
  return s.size() > i + 1 && s[i] == '0' && s[i + 1] >= '0' && s[i + 1] <= '9';
}

}  // namespace

std::int64_t ConfigNode::as_int(std::int64_t min, std::int64_t max) const {
  auto expected = [&] {
    std::string e = "an integer";
    if (min != INT64_MIN && max != INT64_MAX) {
      e += " in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
    } else if (min != INT64_MIN) {
      e += " >= " + std::to_string(min);
    } else if (max != INT64_MAX) {
      e += " <= " + std::to_string(max);
    }
    return e;
  };
  if (!node_.IsScalar() || quoted()) fail(expected());
  const std::string& s = node_.Scalar();
  if (has_leading_zero(s))
    fail(expected() + " without a leading zero (YAML 1.1 reads 010 as octal)");
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || errno != 0 || *end != '\0') {
    // Accept integral floats written as 1e6 or 2000.0.
    // (1e-400 underflows to 0 with ERANGE: not the integer the text says.)
    char* fend = nullptr;
    errno = 0;
    const double d = std::strtod(s.c_str(), &fend);
    if (s.empty() || *fend != '\0' || errno == ERANGE || !std::isfinite(d) || d != std::floor(d) ||
        d < -9.2e18 || d > 9.2e18) {
      fail(expected());
    }
    v = static_cast<long long>(d);
  }
  if (v < min || v > max) fail(expected());
  return v;
}

double ConfigNode::as_double(double min, double max) const {
  // Bounds as their shortest exact text: six digits printed 9999999 as 1e+07, so the message
  // said a value equal to the bound was out of range.
  const auto text = [](double v) {
    char buf[64];
    const auto r = std::to_chars(buf, buf + sizeof buf, v);
    return std::string(buf, r.ptr);
  };
  auto expected = [&] {
    std::string e = "a number";
    if (min > -1e300 && max < 1e300) {
      e += " in [" + text(min) + ", " + text(max) + "]";
    } else if (min > -1e300) {
      e += " >= " + text(min);
    } else if (max < 1e300) {
      e += " <= " + text(max);
    }
    return e;
  };
  if (!node_.IsScalar() || quoted()) fail(expected());
  const std::string& s = node_.Scalar();
  if (has_leading_zero(s) && s.find_first_of(".eE") == std::string::npos) {
    fail(expected() + " without a leading zero (YAML 1.1 reads 010 as octal)");
  }
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  // ERANGE: 1e400 overflows, 1e-400 underflows to 0 (a silent 0 is not the number written).
  if (s.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(v) || v < min || v > max) {
    fail(expected());
  }
  return v;
}

bool ConfigNode::as_bool() const {
  if (node_.IsScalar() && !quoted()) {
    const std::string& s = node_.Scalar();
    // YAML 1.1's words in its three spellings (the ones reads_as_non_text re-quotes); `y` and
    // `n` are left out: a one-letter value is more likely a typo than a boolean.
    for (const char* w : {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON"}) {
      if (s == w) return true;
    }
    for (const char* w : {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF"}) {
      if (s == w) return false;
    }
  }
  fail("true or false");
}

std::string ConfigNode::as_string() const {
  if (!node_.IsScalar()) fail("a string");
  return node_.Scalar();
}

std::string ConfigNode::as_choice(std::initializer_list<std::string_view> choices) const {
  std::vector<std::string> names(choices.begin(), choices.end());
  if (node_.IsScalar()) {
    for (const auto& c : names) {
      if (c == node_.Scalar()) return c;
    }
  }
  fail("one of: " + join(names));
}

std::int64_t ConfigNode::get_int(std::string_view key, std::int64_t min, std::int64_t max) const {
  return at(key).as_int(min, max);
}
std::int64_t ConfigNode::get_int(std::string_view key, std::int64_t def, std::int64_t min,
                                 std::int64_t max) const {
  return has(key) ? at(key).as_int(min, max) : def;
}
double ConfigNode::get_double(std::string_view key, double min, double max) const {
  return at(key).as_double(min, max);
}
double ConfigNode::get_double(std::string_view key, double def, double min, double max) const {
  return has(key) ? at(key).as_double(min, max) : def;
}
bool ConfigNode::get_bool(std::string_view key, bool def) const {
  return has(key) ? at(key).as_bool() : def;
}
std::string ConfigNode::get_string(std::string_view key) const { return at(key).as_string(); }
std::string ConfigNode::get_string(std::string_view key, std::string_view def) const {
  return has(key) ? at(key).as_string() : std::string(def);
}

namespace {

// Whether plain `text` would read as something other than text: a number, a boolean or null.
bool reads_as_non_text(const std::string& text) {
  static const char* const kWords[] = {"true", "false", "yes", "no", "on", "off", "null",
                                       "True", "False", "Yes", "No", "On", "Off", "Null",
                                       "TRUE", "FALSE", "YES", "NO", "ON", "OFF", "NULL",
                                       "~",    "y",     "n",   "Y",  "N"};
  for (const char* w : kWords) {
    if (text == w) return true;
  }
  if (text.empty()) return true;
  char* end = nullptr;
  std::strtod(text.c_str(), &end);
  return end == text.c_str() + text.size();
}

void emit_flow(YAML::Emitter& e, const YAML::Node& n) {
  if (n.IsMap()) {
    e << YAML::BeginMap;
    for (const auto& kv : n) {
      e << YAML::Key;
      emit_flow(e, kv.first);
      e << YAML::Value;
      emit_flow(e, kv.second);
    }
    e << YAML::EndMap;
  } else if (n.IsSequence()) {
    e << YAML::BeginSeq;
    for (const auto& item : n) emit_flow(e, item);
    e << YAML::EndSeq;
  } else if (n.IsScalar()) {
    // Quoted again only where plain it would read as a number, a boolean or null.
    if ((n.Tag() == "!" || n.Tag() == kQuotedOverrideTag) && reads_as_non_text(n.Scalar())) {
      e << YAML::DoubleQuoted;
    }
    e << n.Scalar();
  } else {
    e << YAML::Null;
  }
}

}  // namespace

std::string override_key(std::string_view assignment) {
  const std::string_view path = assignment.substr(0, assignment.find('='));
  std::string out;
  for (std::size_t i = 0; i < path.size(); ++i) {
    out.push_back(path[i]);
    if (path[i] != '[') continue;
    while (i + 2 < path.size() && path[i + 1] == '0' && path[i + 2] >= '0' && path[i + 2] <= '9') {
      ++i;  // a leading zero of an index
    }
  }
  return out;
}

bool key_holds(std::string_view holder, std::string_view held) {
  return held.size() > holder.size() && held.starts_with(holder) &&
         (held[holder.size()] == '.' || held[holder.size()] == '[');
}

bool override_replaces(std::string_view earlier, std::string_view later) {
  if (!key_holds(override_key(later), override_key(earlier))) return false;
  const std::size_t eq = later.find('=');
  const std::string_view value = eq == std::string_view::npos ? "" : later.substr(eq + 1);
  const std::size_t first = value.find_first_not_of(" \t");
  return first != std::string_view::npos && (value[first] == '{' || value[first] == '[');
}

std::string override_text(const YAML::Node& node) {
  YAML::Emitter e;
  e.SetMapFormat(YAML::Flow);
  e.SetSeqFormat(YAML::Flow);
  emit_flow(e, node);
  return e.c_str();
}

YAML::Node without_override_marks(const YAML::Node& node) {
  YAML::Node copy = YAML::Clone(node);
  std::vector<YAML::Node> stack{copy};
  while (!stack.empty()) {
    YAML::Node n = stack.back();
    stack.pop_back();
    if (n.Tag() == kOverrideTag) n.SetTag("?");
    if (n.Tag() == kQuotedOverrideTag) n.SetTag("!");
    if (n.IsMap()) {
      for (auto kv : n) stack.push_back(kv.second);
    } else if (n.IsSequence()) {
      for (auto e : n) stack.push_back(e);
    }
  }
  return copy;
}

void apply_override(YAML::Node root, const std::string& assignment) {
  const auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw ConfigError("--set " + assignment + ": expected KEY.PATH=VALUE");
  }
  const std::string path = assignment.substr(0, eq);
  const std::string text = assignment.substr(eq + 1);
  YAML::Node value;
  try {
    value = YAML::Load(text);
  } catch (const YAML::DeepRecursion&) {
    throw ConfigError("--set " + path + ": nesting too deep (more than " +
                      std::to_string(kMaxYamlDepth) + " levels)");
  } catch (const YAML::Exception& e) {
    throw ConfigError("--set " + path + ": malformed value '" + text + "': " + e.msg);
  }
  if (!value.IsDefined() || value.IsNull()) value = YAML::Node(text);
  check_yaml_structure(value, "--set " + path);
  tag_override(value);
  // Path components: a key, optionally followed by list indices ("parts[1]", "a[0][2]").
  struct Step {
    std::string key;
    std::vector<std::size_t> indices;
  };
  std::vector<Step> steps;
  std::size_t start = 0;
  for (;;) {
    const auto dot = path.find('.', start);
    std::string part = path.substr(start, dot - start);
    Step step;
    const auto bracket = part.find('[');
    step.key = part.substr(0, bracket);
    if (step.key.empty()) throw ConfigError("--set " + path + ": empty key in path");
    for (std::size_t at = bracket; at != std::string::npos;) {
      const auto close = part.find(']', at);
      const std::string digits =
          close == std::string::npos ? "" : part.substr(at + 1, close - at - 1);
      if (digits.empty() || digits.size() > 9 ||
          digits.find_first_not_of("0123456789") != std::string::npos ||
          (close + 1 < part.size() && part[close + 1] != '[')) {
        throw ConfigError("--set " + path + ": malformed list index in '" + part +
                          "' (expected KEY[N], N an entry's position from 0)");
      }
      step.indices.push_back(std::stoul(digits));
      at = close + 1 < part.size() ? close + 1 : std::string::npos;
    }
    steps.push_back(std::move(step));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  // An existing list's entry at `index` of the node `list` reached by `shown`.
  const auto entry = [&](YAML::Node list, std::size_t index, const std::string& shown) {
    if (!list.IsSequence()) {
      throw ConfigError("--set " + path + ": '" + shown + "' is not a list");
    }
    if (index >= list.size()) {
      std::string message = "--set " + path + ": '" + shown + "' has ";
      message.append(std::to_string(list.size())).append(" entries, no [");
      message.append(std::to_string(index)).append("]");
      throw ConfigError(message);
    }
    return list[index];
  };
  // A node YAML aliases share is changed in place for every key that reaches it (yaml-cpp keeps
  // one node): refused, naming the key, rather than changing the others without a word.
  const std::set<std::pair<int, int>> shared = shared_node_marks(root);
  const auto refuse_shared = [&](const YAML::Node& node, const std::string& shown) {
    if (!node.IsDefined() || node.Mark().line < 0 || override_tag(node.Tag())) return;
    if (shared.contains({node.Mark().line, node.Mark().column})) {
      throw ConfigError("--set " + path + ": '" + shown +
                        "' is shared with another key through a YAML anchor and alias (&, *), "
                        "so setting it would change both; write it out in the file instead");
    }
  };
  // yaml-cpp's operator[] on a non-const node creates children; walk with explicit copies so
  // we hold references into the tree, not temporaries.
  std::vector<YAML::Node> chain{root};
  std::string walked;  // the path up to the node at chain.back(), for messages
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const Step& step = steps[i];
    const bool last = i + 1 == steps.size();
    if (last && step.indices.empty()) break;
    YAML::Node next = chain.back()[step.key];
    std::string shown = walked.empty() ? step.key : walked + "." + step.key;
    refuse_shared(next, shown);
    for (std::size_t k = 0; k < step.indices.size(); ++k) {
      if (last && k + 1 == step.indices.size()) {
        // The assignment replaces an existing entry of the list.
        YAML::Node slot = entry(next, step.indices[k], shown);
        refuse_shared(slot, shown + "[" + std::to_string(step.indices[k]) + "]");
        slot = value;
        return;
      }
      next.reset(entry(next, step.indices[k], shown));  // rebinds the handle; = would assign
      shown.append("[").append(std::to_string(step.indices[k])).append("]");
      refuse_shared(next, shown);
    }
    if (next.IsDefined() && !next.IsNull() && !next.IsMap()) {
      throw ConfigError("--set " + path + ": '" + shown + "' is not a section");
    }
    if (!next.IsDefined() || next.IsNull()) {
      if (!step.indices.empty()) {
        throw ConfigError("--set " + path + ": '" + shown + "' is not a section");
      }
      // A section the override creates is the override's: an unknown key there names the --set.
      YAML::Node created(YAML::NodeType::Map);
      created.SetTag(kOverrideTag);
      chain.back()[step.key] = created;
      next = chain.back()[step.key];
    }
    chain.push_back(next);
    walked = std::move(shown);
  }
  if (chain.back().IsMap()) {
    const YAML::Node section = chain.back();  // const: looking does not create the key
    refuse_shared(section[steps.back().key], path);
  }
  chain.back()[steps.back().key] = value;
}

}  // namespace servelab
