// ConfigNode: typed access and errors that name file, line and key.
#include "serving/config_node.h"

#include <gtest/gtest.h>

namespace servelab {
namespace {

std::string error_of(auto&& fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(ConfigNode, TypedGettersAndDefaults) {
  ConfigNode n = ConfigNode::load_string("a: 3\nb: 2.5\nc: true\nd: hello\ne: 1e6\n", "x.yaml");
  EXPECT_EQ(n.get_int("a"), 3);
  EXPECT_DOUBLE_EQ(n.get_double("b"), 2.5);
  EXPECT_TRUE(n.get_bool("c", false));
  EXPECT_EQ(n.get_string("d"), "hello");
  EXPECT_EQ(n.get_int("e"), 1000000);  // integral float notation is an integer
  EXPECT_EQ(n.get_int("missing", 7, 0, 10), 7);
  EXPECT_EQ(n.get_string("missing", "dflt"), "dflt");
}

// YAML 1.1's boolean words in each of their spellings (`TRUE` and `Yes` were refused while
// `True` and `yes` passed); a one-letter `y` is not a boolean.
TEST(ConfigNode, BooleansInEverySpelling) {
  for (const char* w : {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON"}) {
    EXPECT_TRUE(
        ConfigNode::load_string(std::string("b: ") + w + "\n", "x.yaml").get_bool("b", false))
        << w;
  }
  for (const char* w : {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF"}) {
    EXPECT_FALSE(
        ConfigNode::load_string(std::string("b: ") + w + "\n", "x.yaml").get_bool("b", true))
        << w;
  }
  for (const char* w : {"y", "n", "tRUE", "1", "enabled"}) {
    const ConfigNode n = ConfigNode::load_string(std::string("b: ") + w + "\n", "x.yaml");
    EXPECT_NE(error_of([&] { n.get_bool("b", false); }).find("expected true or false"),
              std::string::npos)
        << w;
  }
}

// `010` is octal 8 in YAML 1.1 and decimal 10 in YAML 1.2: refused rather than guessed.
TEST(ConfigNode, IntegersWithALeadingZeroAreRefused) {
  const ConfigNode n =
      ConfigNode::load_string("a: 010\nb: -007\nc: 0\nd: 0.5\ne: 00.25\nf: 0e0\n", "x.yaml");
  EXPECT_NE(error_of([&] { n.get_int("a"); }).find("x.yaml:1:"), std::string::npos);
  EXPECT_NE(error_of([&] { n.get_int("a"); }).find("without a leading zero"), std::string::npos);
  EXPECT_NE(error_of([&] { n.get_double("a"); }).find("without a leading zero"), std::string::npos);
  EXPECT_NE(error_of([&] { n.get_int("b"); }).find("without a leading zero"), std::string::npos);
  EXPECT_EQ(n.get_int("c"), 0);
  EXPECT_DOUBLE_EQ(n.get_double("d"), 0.5);
  EXPECT_DOUBLE_EQ(n.get_double("e"), 0.25);
  EXPECT_EQ(n.get_int("f"), 0);
}

// `!!str 20` is text, as "20" is (it was read as the number 20); an application tag is refused.
TEST(ConfigNode, StrTagIsTextAndOtherLocalTagsAreRefused) {
  const ConfigNode n = ConfigNode::load_string("a: !!str 20\nb: !!int 7\n", "x.yaml");
  EXPECT_NE(error_of([&] { n.get_int("a"); }).find("got the quoted text '20'"), std::string::npos);
  EXPECT_EQ(n.get_string("a"), "20");
  EXPECT_EQ(n.get_int("b"), 7);
  const std::string msg = error_of([] { ConfigNode::load_string("a: 1\nb: !mine 5\n", "x.yaml"); });
  EXPECT_NE(msg.find("x.yaml:2:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("the YAML tag '!mine' is not supported"), std::string::npos) << msg;
}

TEST(ConfigNode, WrongTypeNamesFileLineAndKey) {
  ConfigNode n = ConfigNode::load_string("serving:\n  block_size: sixteen\n", "exp.yaml");
  const std::string msg = error_of([&] { n.at("serving").get_int("block_size", 1, 256); });
  EXPECT_NE(msg.find("exp.yaml:2:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("serving.block_size"), std::string::npos) << msg;
  EXPECT_NE(msg.find("expected an integer in [1, 256]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'sixteen'"), std::string::npos) << msg;
}

// A quoted scalar is text: where a number or a boolean is expected it is refused, never read
// as one (`num_requests: "20"` was 20, `enable: "off"` false); as text it stays valid.
TEST(ConfigNode, QuotedNumbersAndBooleansAreText) {
  ConfigNode n =
      ConfigNode::load_string("a: \"20\"\nb: '2.5'\nc: \"off\"\nd: \"123\"\ne: 20\n", "q.yaml");
  std::string msg = error_of([&] { n.get_int("a", 1, 100); });
  EXPECT_NE(msg.find("q.yaml:1:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("key 'a': expected an integer in [1, 100], got the quoted text '20'"),
            std::string::npos)
      << msg;
  msg = error_of([&] { n.get_double("b"); });
  EXPECT_NE(msg.find("expected a number, got the quoted text '2.5'"), std::string::npos) << msg;
  msg = error_of([&] { n.get_bool("c", true); });
  EXPECT_NE(msg.find("expected true or false, got the quoted text 'off'"), std::string::npos)
      << msg;
  EXPECT_EQ(n.get_string("d"), "123");
  EXPECT_EQ(n.get_int("e"), 20);
  // The same through --set, and through the text a variant's or sweep axis's value becomes.
  YAML::Node root = n.yaml();
  apply_override(root, "e=\"20\"");
  apply_override(root, "f={x: '1', y: [2, \"off\", \"text\"]}");
  ConfigNode set(root, std::make_shared<const std::string>("q.yaml"), "");
  msg = error_of([&] { set.get_int("e", 1, 100); });
  EXPECT_NE(msg.find("--set e: key 'e': expected an integer in [1, 100], got the quoted text '20'"),
            std::string::npos)
      << msg;
  EXPECT_EQ(override_text(set.at("f").yaml()), "{x: \"1\", y: [2, \"off\", text]}");
  EXPECT_EQ(override_text(ConfigNode::load_string("e: 20\n", "x.yaml").at("e").yaml()), "20");
}

TEST(ConfigNode, OutOfRangeIsAnError) {
  ConfigNode n = ConfigNode::load_string("rate: -2\n", "w.yaml");
  const std::string msg = error_of([&] { n.get_double("rate", 1e-9, 1e9); });
  EXPECT_NE(msg.find("w.yaml:1:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'rate'"), std::string::npos) << msg;
  // Numbers the doubles cannot hold: 1e400 overflows, 1e-400 underflows to a silent 0.
  ConfigNode big = ConfigNode::load_string("a: 1e400\nb: 1e-400\nc: 1e-300\n", "w.yaml");
  EXPECT_THROW(big.get_double("a"), ConfigError);
  EXPECT_THROW(big.get_double("b"), ConfigError);
  EXPECT_THROW(big.get_int("b"), ConfigError);
  EXPECT_THROW(big.get_int("a"), ConfigError);
  EXPECT_DOUBLE_EQ(big.get_double("c"), 1e-300);
}

TEST(ConfigNode, UnknownKeyListsAllowedKeys) {
  ConfigNode n = ConfigNode::load_string("a: 1\nbogus: 2\n", "k.yaml");
  const std::string msg = error_of([&] { n.allow_keys({"a", "b"}); });
  EXPECT_NE(msg.find("k.yaml:2:1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("unknown key 'bogus'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("a, b"), std::string::npos) << msg;
}

// Found by experiment_fuzz: a sequence, mapping or empty key reached allow_keys() and escaped as
// a yaml-cpp conversion error (an uncaught exception) instead of a ConfigError with the line.
TEST(ConfigNode, KeysThatAreNotNamesAreErrorsWithTheLine) {
  for (const char* text :
       {"a: 1\n? - x\n  - y\n: 2\n", "a: 1\n? {x: 1}\n: 2\n", "a: 1\n? \n: 2\n"}) {
    const std::string msg = error_of([&] { ConfigNode::load_string(text, "c.yaml"); });
    EXPECT_EQ(msg.rfind("c.yaml:", 0), 0u) << text << " -> " << msg;  // FILE:LINE:COL first
    EXPECT_NE(msg.find("expected a plain key"), std::string::npos) << text << " -> " << msg;
  }
}

// `key:` with no value read as "absent" would quietly mean the default (an emptied
// gpu_memory_utilization ran at 0.9 instead of the 0.3 the user had); a second document after
// `---` was never read, however malformed.
TEST(ConfigNode, EmptyValuesAndSecondDocumentsAreErrors) {
  std::string msg =
      error_of([] { ConfigNode::load_string("serving:\n  gpu_memory_utilization:\n", "n.yaml"); });
  EXPECT_EQ(msg.rfind("n.yaml:2:3: key 'gpu_memory_utilization' has no value", 0), 0u) << msg;
  msg = error_of([] { ConfigNode::load_string("slo: {ttft_ms: ~}\n", "n.yaml"); });
  EXPECT_NE(msg.find("key 'ttft_ms' has no value"), std::string::npos) << msg;
  msg = error_of([] { ConfigNode::load_string("a: [1, , 3]\n", "n.yaml"); });
  EXPECT_NE(msg.find("n.yaml:1:"), std::string::npos) << msg;
  msg = error_of([] { ConfigNode::load_string("a: 1\n---\nb: 2\n", "d.yaml"); });
  EXPECT_EQ(msg.rfind("d.yaml:3:1: a second YAML document", 0), 0u) << msg;
  msg = error_of([] { ConfigNode::load_string("a: 1\n...\ngarbage: [\n", "d.yaml"); });
  EXPECT_NE(msg.find("malformed YAML"), std::string::npos) << msg;
  EXPECT_EQ(error_of([] { ConfigNode::load_string("a: 1\n---\n", "d.yaml"); }), "");
  EXPECT_EQ(error_of([] { ConfigNode::load_string("a: 1\n---\n---\n", "d.yaml"); }), "");
  msg = error_of([] { ConfigNode::load_string("a: 1\n---\n---\nb: 2\n", "d.yaml"); });
  EXPECT_EQ(msg.rfind("d.yaml:4:1: a second YAML document", 0), 0u) << msg;
  // Found by experiment_fuzz: yaml-cpp's LoadAll never returns on this text (it yields empty
  // documents forever); read through the parser's events it is one error, at once.
  msg = error_of([] { ConfigNode::load_string(",,,,,,,Qw,,,,,,,,,,reev_g:\n:\n", "f.yaml"); });
  EXPECT_EQ(msg.rfind("f.yaml:", 0), 0u) << msg;
}

TEST(ConfigNode, MissingRequiredKey) {
  ConfigNode n = ConfigNode::load_string("a: 1\n", "m.yaml");
  const std::string msg = error_of([&] { n.get_string("model"); });
  EXPECT_NE(msg.find("'model' is required"), std::string::npos) << msg;
}

TEST(ConfigNode, MalformedYamlNamesLine) {
  const std::string msg =
      error_of([] { ConfigNode::load_string("a: 1\nb: [1, 2\nc: 3\n", "bad.yaml"); });
  EXPECT_NE(msg.find("bad.yaml:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("malformed YAML"), std::string::npos) << msg;
}

TEST(ConfigNode, MissingFile) {
  const std::string msg = error_of([] { ConfigNode::load_file("/nonexistent/exp.yaml"); });
  EXPECT_NE(msg.find("/nonexistent/exp.yaml: cannot open"), std::string::npos) << msg;
}

TEST(ConfigNode, ChoiceListsOptions) {
  ConfigNode n = ConfigNode::load_string("p: lifo\n", "c.yaml");
  const std::string msg = error_of([&] { n.at("p").as_choice({"fcfs", "priority"}); });
  EXPECT_NE(msg.find("one of: fcfs, priority"), std::string::npos) << msg;
  EXPECT_EQ(ConfigNode::load_string("p: fcfs\n", "c.yaml").at("p").as_choice({"fcfs"}), "fcfs");
}

// A node YAML anchors and aliases share would change for every key reaching it: --set into it
// is refused, by either key; the keys around it still take overrides. Merge keys are refused.
TEST(ConfigNode, OverridesIntoAliasedNodesAreRefused) {
  ConfigNode n = ConfigNode::load_string(
      "w:\n  prompt: &len {dist: fixed, value: 100}\n  output: *len\n  rate: &r 5\n"
      "  burst: *r\n  list: [&item {a: 1}, *item]\n  other: {dist: fixed, value: 3}\n",
      "a.yaml");
  for (const char* set :
       {"w.prompt.value=50", "w.output.value=50", "w.rate=6", "w.burst=6", "w.list[0].a=2",
        "w.list[1].a=2", "w.list[1]=7", "w.prompt={dist: fixed, value: 9}"}) {
    YAML::Node root = n.yaml();
    const std::string msg = error_of([&] { apply_override(root, set); });
    EXPECT_NE(msg.find("is shared with another key through a YAML anchor and alias"),
              std::string::npos)
        << set << ": " << msg;
  }
  YAML::Node root = n.yaml();
  apply_override(root, "w.other.value=4");
  ConfigNode top(root, std::make_shared<const std::string>("a.yaml"), "");
  EXPECT_EQ(top.at("w").at("other").get_int("value"), 4);
  EXPECT_EQ(top.at("w").at("output").get_int("value"), 100);
  EXPECT_NE(error_of([] {
              ConfigNode::load_string("a: &b {x: 1}\nc:\n  <<: *b\n", "m.yaml");
            }).find("m.yaml:3:3: YAML merge keys (<<) are not supported"),
            std::string::npos);
}

TEST(ConfigNode, OverrideSetsNestedKeysAndIsNamedInErrors) {
  ConfigNode n = ConfigNode::load_string("serving:\n  block_size: 16\n", "o.yaml");
  YAML::Node root = n.yaml();
  apply_override(root, "serving.block_size=32");
  apply_override(root, "workload.arrival.rate=4.5");
  ConfigNode top(root, std::make_shared<const std::string>("o.yaml"), "");
  EXPECT_EQ(top.at("serving").get_int("block_size"), 32);
  EXPECT_DOUBLE_EQ(top.at("workload").at("arrival").get_double("rate"), 4.5);
  apply_override(root, "serving.block_size=huge");
  ConfigNode again(root, std::make_shared<const std::string>("o.yaml"), "");
  const std::string msg = error_of([&] { again.at("serving").get_int("block_size"); });
  EXPECT_NE(msg.find("--set serving.block_size"), std::string::npos) << msg;
}

// An unknown key that came from --set is named by its --set, not by a line of the file: the
// override's marks are positions in the --set text (this once said "o.yaml:1:2" for a key on no
// line of o.yaml), and a key the override created has no mark at all.
TEST(ConfigNode, UnknownKeyFromAnOverrideNamesTheOverride) {
  // A section the override creates (bogus.x=3) is named by the --set too.
  {
    YAML::Node root = ConfigNode::load_string("serving:\n  block_size: 16\n", "o.yaml").yaml();
    apply_override(root, "bogus.x=3");
    const ConfigNode top(root, std::make_shared<const std::string>("o.yaml"), "");
    const std::string msg = error_of([&] { top.allow_keys({"serving"}); });
    EXPECT_EQ(msg.rfind("--set bogus: unknown key 'bogus'", 0), 0u) << msg;
  }
  for (const char* assignment : {"serving.bogus=1", "serving={block_size: 8, bogus: 1}"}) {
    YAML::Node root =
        ConfigNode::load_string("# a comment\nserving:\n  block_size: 16\n", "o.yaml").yaml();
    apply_override(root, assignment);
    const ConfigNode top(root, std::make_shared<const std::string>("o.yaml"), "");
    const std::string msg = error_of([&] { top.at("serving").allow_keys({"block_size"}); });
    EXPECT_EQ(msg.rfind("--set serving.bogus: unknown key 'serving.bogus'", 0), 0u)
        << assignment << " -> " << msg;
    EXPECT_EQ(msg.find("o.yaml"), std::string::npos) << assignment << " -> " << msg;
  }
  // A key of the file itself keeps its line, after an override of a sibling.
  YAML::Node root =
      ConfigNode::load_string("serving:\n  block_size: 16\n  bogus: 1\n", "o.yaml").yaml();
  apply_override(root, "serving.block_size=8");
  const ConfigNode top(root, std::make_shared<const std::string>("o.yaml"), "");
  const std::string msg = error_of([&] { top.at("serving").allow_keys({"block_size"}); });
  EXPECT_EQ(msg.rfind("o.yaml:3:3: unknown key 'serving.bogus'", 0), 0u) << msg;
}

TEST(ConfigNode, MalformedOverride) {
  YAML::Node root = ConfigNode::load_string("a: 1\n", "o.yaml").yaml();
  EXPECT_NE(error_of([&] { apply_override(root, "novalue"); }).find("KEY.PATH=VALUE"),
            std::string::npos);
  EXPECT_NE(error_of([&] { apply_override(root, "a.b=1"); }).find("not a section"),
            std::string::npos);
}

// A path component may index an existing list entry (a mix workload's parts): the entry's key,
// or the entry itself, is replaced, the rest of the list is left alone, errors name the --set.
TEST(ConfigNode, OverrideIndexesListEntries) {
  YAML::Node root = ConfigNode::load_string(
                        "w:\n  parts:\n    - {class: a, priority: 0}\n    - {class: b}\n"
                        "m: [[1, 2], [3, 4]]\n",
                        "o.yaml")
                        .yaml();
  apply_override(root, "w.parts[1].priority=7");
  apply_override(root, "w.parts[0].workload.rate=2");
  apply_override(root, "m[1][0]=9");
  const ConfigNode top(root, std::make_shared<const std::string>("o.yaml"), "");
  const std::vector<ConfigNode> parts = top.at("w").at("parts").elements();
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].get_string("class"), "a");
  EXPECT_EQ(parts[0].get_int("priority"), 0);
  EXPECT_DOUBLE_EQ(parts[0].at("workload").get_double("rate"), 2.0);
  EXPECT_EQ(parts[1].get_string("class"), "b");
  EXPECT_EQ(parts[1].get_int("priority"), 7);
  EXPECT_EQ(top.at("m").elements()[1].elements()[0].as_int(), 9);
  EXPECT_EQ(top.at("m").elements()[0].elements()[0].as_int(), 1);
  apply_override(root, "w.parts[1].priority=high");
  const ConfigNode again(root, std::make_shared<const std::string>("o.yaml"), "");
  const std::string msg =
      error_of([&] { again.at("w").at("parts").elements()[1].get_int("priority"); });
  EXPECT_NE(msg.find("--set w.parts[1].priority"), std::string::npos) << msg;
  EXPECT_NE(error_of([&] {
              apply_override(root, "w.parts[2].priority=1");
            }).find("'w.parts' has 2 entries, no [2]"),
            std::string::npos);
  EXPECT_NE(error_of([&] { apply_override(root, "m[5]=1"); }).find("'m' has 2 entries, no [5]"),
            std::string::npos);
  EXPECT_NE(error_of([&] { apply_override(root, "w[0].x=1"); }).find("'w' is not a list"),
            std::string::npos);
  for (const char* bad : {"w.parts[].x=1", "w.parts[x].x=1", "w.parts[1.x=1", "w.parts[1]y.x=1"}) {
    EXPECT_NE(error_of([&] { apply_override(root, bad); }).find("malformed list index"),
              std::string::npos)
        << bad;
  }
  EXPECT_NE(error_of([&] { apply_override(root, "w.parts[0][0].x=1"); }).find("is not a list"),
            std::string::npos);
}

}  // namespace
}  // namespace servelab
