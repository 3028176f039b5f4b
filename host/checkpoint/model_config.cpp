// fp4cl::ModelConfig: the routing facts of a model's config.json.
#include "fp4cl/model_config.hpp"

#include <fmt/format.h>

#include <limits>
#include <string_view>
#include <utility>
#include <vector>

#include "checkpoint/json_access.hpp"

namespace fp4cl {

namespace {

using detail::Json;
using detail::JsonPath;

// The object itself, then its "text_config" (where multimodal models keep the language model's).
std::vector<std::pair<const Json*, JsonPath>> places(const Json& config, const JsonPath& root) {
  std::vector<std::pair<const Json*, JsonPath>> out{{&config, root}};
  if (const Json* text = detail::object_member(config, "text_config", root))
    out.emplace_back(text, root / "text_config");
  return out;
}

}  // namespace

ModelConfig ModelConfig::load(const std::filesystem::path& model_dir) {
  ModelConfig c;
  const std::filesystem::path file = model_dir / "config.json";
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) return c;
  c.source = file.string();
  const Json config = detail::read_json_file(file);
  const JsonPath root(c.source, "");
  detail::expect_object(config, root);
  for (const auto& [object, at] : places(config, root)) {
    if (c.model_type.empty()) c.model_type = detail::string_member(*object, "model_type", at).value_or("");
    if (!c.experts_per_token) {
      if (const std::optional<std::int64_t> k = detail::integer_member(*object, "num_experts_per_tok", at)) {
        if (*k < 1 || *k > std::numeric_limits<int>::max())
          (at / "num_experts_per_tok").fail("must be a positive integer, got {}", *k);
        c.experts_per_token = static_cast<int>(*k);
      }
    }
    if (!c.norm_topk_prob) c.norm_topk_prob = detail::bool_member(*object, "norm_topk_prob", at);
    if (!c.scoring_func) c.scoring_func = detail::string_member(*object, "scoring_func", at);
    if (!c.topk_method) c.topk_method = detail::string_member(*object, "topk_method", at);
    for (auto [key, field] : {std::pair{"n_group", &c.n_group}, std::pair{"topk_group", &c.topk_group}}) {
      if (*field) continue;
      if (const std::optional<std::int64_t> v = detail::integer_member(*object, key, at)) {
        if (*v < 1 || *v > std::numeric_limits<int>::max()) (at / key).fail("must be a positive integer, got {}", *v);
        *field = static_cast<int>(*v);
      }
    }
    if (!c.routed_scaling_factor) {
      c.routed_scaling_factor = detail::number_member(*object, "routed_scaling_factor", at);
      if (c.routed_scaling_factor &&
          !(*c.routed_scaling_factor > 0 && *c.routed_scaling_factor <= std::numeric_limits<float>::max()))
        (at / "routed_scaling_factor").fail("must be a finite number > 0 (as a float), got {}", *c.routed_scaling_factor);
    }
    if (!c.swiglu_limit) {
      c.swiglu_limit = detail::number_member(*object, "swiglu_limit", at);
      // The kernels take it as a float: finite there too.
      if (c.swiglu_limit && !(*c.swiglu_limit > 0 && *c.swiglu_limit <= std::numeric_limits<float>::max()))
        (at / "swiglu_limit").fail("must be a finite number > 0 (as a float), got {}", *c.swiglu_limit);
    }
  }
  return c;
}

std::optional<bool> ModelConfig::renormalize() const {
  if (norm_topk_prob) return norm_topk_prob;
  // transformers: MixtralSparseMoeBlock always divides by the top-k sum, and GptOssTopKRouter's
  // softmax over the top-k logits is the same weights; Qwen2MoeConfig and Qwen3MoeConfig default
  // norm_topk_prob to False.
  // DeepseekV3Config and Glm4MoeConfig default it to True (Kimi-K2 is a DeepSeek-V3),
  // DeepseekV2Config to False.
  for (std::string_view t : {"mixtral", "gpt_oss", "deepseek_v3", "kimi_k2", "glm4_moe"})
    if (model_type == t) return true;
  for (std::string_view t : {"qwen2_moe", "qwen3_moe", "deepseek_v2"})
    if (model_type == t) return false;
  return std::nullopt;
}

MoeLogitRouting ModelConfig::logit_routing() const {
  MoeLogitRouting r;
  const bool glm = model_type == "glm4_moe";  // transformers' Glm4MoeTopkRouter: DeepSeek-V3's gate
  const std::string scoring = scoring_func.value_or(glm ? "sigmoid" : "softmax");
  if (scoring == "sigmoid") {
    r.scoring = MoeLogitRouting::Scoring::sigmoid;
  } else if (scoring != "softmax") {
    r.unsupported = fmt::format("{}'s scoring_func '{}' is neither softmax nor sigmoid", source, scoring);
    return r;
  }
  const std::string method = topk_method.value_or(glm ? "noaux_tc" : "greedy");
  if (method == "group_limited_greedy" || method == "noaux_tc") {
    r.groups = n_group.value_or(1);
    r.top_groups = topk_group.value_or(r.groups);
  } else if (method != "greedy") {
    r.unsupported = fmt::format("{}'s topk_method '{}' is none of greedy, group_limited_greedy and noaux_tc", source,
                                method);
    return r;
  }
  if (routed_scaling_factor) r.scaling_factor = static_cast<float>(*routed_scaling_factor);
  return r;
}

bool ModelConfig::router_correction_bias() const {
  return topk_method ? *topk_method == "noaux_tc" : model_type == "glm4_moe";
}

}  // namespace fp4cl
