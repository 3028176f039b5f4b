// Module-name matching: ModelOpt fnmatch wildcards and compressed-tensors "re:" / exact / class
// targets. The expected answers are those of Python's fnmatch.fnmatchcase and re.match, which
// the producers use.
#include <gtest/gtest.h>

#include <string>

#include "checkpoint/module_pattern.hpp"
#include "config_test_support.hpp"

namespace fp4cl::detail {
namespace {

struct Case {
  const char* name;
  const char* pattern;
  bool match;
};

TEST(Fnmatch, AgreesWithPythonFnmatchcase) {
  const Case cases[] = {
      {"lm_head", "lm_head", true},
      {"model.lm_head", "lm_head", false},
      {"model.layers.3.mlp.gate", "*mlp.gate", true},
      {"model.layers.3.mlp.gate_proj", "*mlp.gate", false},
      {"model.layers.3.mlp.gate_proj", "*mlp.gate*", true},
      {"model.layers.0.self_attn.q_proj", "model.layers.0.self_attn*", true},
      {"model.layers.10.self_attn.q_proj", "model.layers.1*", true},
      {"model.layers.1.self_attn.q_proj", "model.layers.0.self_attn*", false},
      {"model.layers.7.mlp", "model.layers.?.mlp", true},
      {"model.layers.17.mlp", "model.layers.?.mlp", false},
      {"model.layers.2.mlp", "model.layers.[0-3].mlp", true},
      {"model.layers.5.mlp", "model.layers.[0-3].mlp", false},
      {"model.layers.5.mlp", "model.layers.[!0-3].mlp", true},
      {"model.layers.2.mlp", "model.layers.[!0-3].mlp", false},
      {"a[b", "a[b", true},
      {"a]", "a[]]", true},
      {"a-", "a[a-]", true},
      {"ab", "a[a-]", false},
      {"", "*", true},
      {"abc", "a*b*c", true},
      {"aXbYbZc", "a*b*c", true},
      {"abcd", "a*b*c", false},
      {"x.y.z", "**", true},
      {"model.layers.0.mlp.experts.7.down_proj", "*experts.*.down_proj", true},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(fnmatch(c.name, c.pattern), c.match) << "'" << c.name << "' vs '" << c.pattern << "'";
  }
}

TEST(ModulePattern, ModelOptEntriesWithoutWildcardsAreExactNames) {
  const ModulePattern p = ModulePattern::modelopt("lm_head");
  EXPECT_EQ(p.kind(), ModulePattern::Kind::exact);
  EXPECT_TRUE(p.matches("lm_head"));
  EXPECT_FALSE(p.matches("model.lm_head"));
  EXPECT_EQ(ModulePattern::modelopt("*mlp.gate").kind(), ModulePattern::Kind::wildcard);
}

TEST(ModulePattern, CompressedTensorsRegexIsAnchoredAtTheStartLikeReMatch) {
  const JsonPath at("config.json", "quantization_config.ignore[0]");
  const Case cases[] = {
      {"model.layers.0.self_attn.q_proj", "re:.*self_attn.*", true},
      {"model.layers.0.self_attn.q_proj", "re:self_attn", false},
      {"model.layers.0.mlp.gate", "re:.*mlp.gate$", true},
      {"model.layers.0.mlp.gate_proj", "re:.*mlp.gate$", false},
      {"model.layers.0.mlp.gate_proj", "re:.*mlp.gate", true},  // no '$': a prefix match, as in Python
      {"model.layers.12.mlp.experts.3.up_proj", "re:model\\.layers\\.1\\d\\.mlp\\.experts\\..*", true},
      {"model.layers.2.mlp.experts.3.up_proj", "re:model\\.layers\\.1\\d\\.mlp\\.experts\\..*", false},
      {"lm_head", "lm_head", true},
      {"xlm_head", "lm_head", false},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(ModulePattern::compressed_tensors(c.pattern, at).matches(c.name), c.match)
        << "'" << c.name << "' vs '" << c.pattern << "'";
  }
}

TEST(ModulePattern, CompressedTensorsKinds) {
  const JsonPath at("config.json", "quantization_config.config_groups.group_0.targets[0]");
  EXPECT_EQ(ModulePattern::compressed_tensors("Linear", at).kind(), ModulePattern::Kind::linear_class);
  EXPECT_TRUE(ModulePattern::compressed_tensors("Linear", at).matches("model.layers.0.mlp.experts.1.up_proj"));
  EXPECT_EQ(ModulePattern::compressed_tensors("re:.*", at).kind(), ModulePattern::Kind::regex);
  EXPECT_EQ(ModulePattern::compressed_tensors("lm_head", at).kind(), ModulePattern::Kind::exact);
}

TEST(ModulePattern, PythonOnlyRegexSyntaxIsAnErrorNamingTheEntry) {
  const JsonPath at("/m/config.json", "quantization_config.ignore[2]");
  test::expect_error([&] { ModulePattern::compressed_tensors("re:(?P<layer>\\d+)", at); },
                     {"/m/config.json: quantization_config.ignore[2]", "'re:(?P<layer>\\d+)'", "regular expression"});
  test::expect_error([&] { ModulePattern::compressed_tensors("re:(unclosed", at); },
                     {"quantization_config.ignore[2]", "'re:(unclosed'"});
  test::expect_error([&] { ModulePattern::compressed_tensors("", at); }, {"ignore[2]", "empty"});
}

}  // namespace
}  // namespace fp4cl::detail
