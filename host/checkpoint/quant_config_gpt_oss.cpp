// gpt-oss's quantization config (transformers' Mxfp4Config, as openai/gpt-oss-* ship it):
// config.json → quantization_config {"quant_method": "mxfp4", "modules_to_not_convert":
// ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}.
// Every module not listed is MXFP4 W4A16 (weights only; the checkpoints hold MXFP4 tensors for the
// MoE experts alone, fused per layer: checkpoint/fused_experts.hpp). An entry is matched as
// transformers' should_convert_module does: a Python regular expression matched from the start of
// the module name (re.match), so "model.layers.*.self_attn" covers every attention module.
#include <vector>

#include "checkpoint/module_pattern.hpp"
#include "checkpoint/quant_rules.hpp"

namespace fp4cl::detail {

namespace {

class GptOssRules final : public QuantRules {
 public:
  GptOssRules(const Json& config, const JsonPath& at) : QuantRules(at) {
    const JsonPath entries = at / "modules_to_not_convert";
    for (const std::string& entry : string_list_member(config, "modules_to_not_convert", at))
      // ModulePattern's "re:" form: ECMAScript, anchored at the start only (Python's re.match).
      not_converted_.push_back(ModulePattern::compressed_tensors("re:" + entry, entries));
  }

  QuantProducer producer() const override { return QuantProducer::gpt_oss; }

  Decision decide(std::string_view module) const override {
    Decision d;
    for (const ModulePattern& p : not_converted_) {
      if (p.matches(module)) {
        d.kind = Decision::Kind::not_quantized;
        d.reason = "modules_to_not_convert entry '" + p.text().substr(3) + "'";
        return d;
      }
    }
    d.kind = Decision::Kind::quantized;
    d.scheme = QuantScheme{WeightFormat::mxfp4, Activations::bf16};
    d.reason = "quant_method 'mxfp4'";
    return d;
  }

  std::string summary() const override { return "mxfp4"; }

 private:
  std::vector<ModulePattern> not_converted_;
};

}  // namespace

std::shared_ptr<const QuantRules> parse_gpt_oss_config(const Json& config, const JsonPath& at) {
  return std::make_shared<const GptOssRules>(config, at);
}

}  // namespace fp4cl::detail
