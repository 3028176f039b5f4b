// fp4cl::ModelConfig: the routing facts of a model's config.json.
#include "fp4cl/model_config.hpp"

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
  if (model_type == "mixtral" || model_type == "gpt_oss") return true;
  for (std::string_view t : {"qwen2_moe", "qwen3_moe"})
    if (model_type == t) return false;
  return std::nullopt;
}

}  // namespace fp4cl
