// ModelOpt quantization configs (FP4.md §5): hf_quant_config.json
//   {"producer": {"name": "modelopt", ...},
//    "quantization": {"quant_algo": "NVFP4", "group_size": 16, "exclude_modules": [...]}}
// or config.json → quantization_config {"quant_method": "modelopt", "quant_algo": ..., "ignore":
// [...]} (ModelOpt's convert_hf_quant_config_format), with MIXED_PRECISION adding
// "quantized_layers": {module: {"quant_algo": ..., "group_size": ...}}.
// The config.json form also carries "config_groups", ModelOpt's derived compressed-tensors-style
// copy; quant_algo is authoritative (as in vLLM) and config_groups are not read.
// Exclusion entries are matched with fnmatch only: vLLM's extra substring matching for old
// exports is not reproduced (a module it would have excluded then resolves as quantized, and the
// loader finds an unquantized weight where it expects packed FP4 and reports it).
// Facts checked against ModelOpt (modelopt/torch/export/quant_utils.py process_layer_quant_config,
// convert_hf_config.py) and vLLM (model_executor/layers/quantization/modelopt.py).
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "checkpoint/module_pattern.hpp"
#include "checkpoint/quant_rules.hpp"
#include "support/check.hpp"
#include "support/text.hpp"

namespace fp4cl::detail {

namespace {

constexpr std::string_view kMixedPrecision = "MIXED_PRECISION";
constexpr QuantScheme kNvfp4W4A4{WeightFormat::nvfp4, Activations::fp4_dynamic};
constexpr QuantScheme kNvfp4W4A16{WeightFormat::nvfp4, Activations::bf16};

// ModelOpt's per-layer quant_algo vocabulary (upper case, as vLLM normalizes it). Only the
// NVFP4 pair is an FP4 scheme fp4cl runs; the others are known so that a mixed-precision
// checkpoint using them for some layers still loads its FP4 layers.
struct AlgoInfo {
  std::string_view name;
  std::optional<QuantScheme> scheme;
};
const AlgoInfo kAlgos[] = {
    {"NVFP4", kNvfp4W4A4},
    {"W4A16_NVFP4", kNvfp4W4A16},
    {"FP8", std::nullopt},
    {"FP8_PER_CHANNEL_PER_TOKEN", std::nullopt},
    {"FP8_PC_PT", std::nullopt},
    {"FP8_PB_WO", std::nullopt},
    {"FP8_PB_REAL", std::nullopt},
    {"MXFP8", std::nullopt},
    {"MXFP4", std::nullopt},
    {"INT8_SQ", std::nullopt},
    {"INT8_WO", std::nullopt},
    {"W8A8_SQ_PER_CHANNEL", std::nullopt},
    {"W8A16", std::nullopt},
    {"INT4_AWQ", std::nullopt},
    {"W4A16_AWQ", std::nullopt},
    {"W4A8_AWQ", std::nullopt},
    {"NVFP4_AWQ", std::nullopt},
    {"NVFP4_SVD", std::nullopt},
    {"NVFP4_SVDQUANT", std::nullopt},
    {"W4A8_NVFP4_FP8", std::nullopt},
    {"W4A8_MXFP4_FP8", std::nullopt},
};

const AlgoInfo* find_algo(std::string_view upper_name) {
  for (const AlgoInfo& a : kAlgos) {
    if (a.name == upper_name) return &a;
  }
  return nullptr;
}

// The quantization of one entry (the whole model, or one quantized_layers module).
struct Algo {
  std::string name;                   // upper case
  std::optional<QuantScheme> scheme;  // nullopt: known, but not an FP4 scheme fp4cl runs
};

// Reads `entry.quant_algo` (already upper-cased as `name`) and, for an FP4 algo, checks the
// fields that would change its meaning. Unknown algos are errors.
Algo read_algo(const Json& entry, const JsonPath& at, const std::string& raw_name,
               std::optional<std::int64_t> default_group_size) {
  const std::string name = to_upper(raw_name);
  const AlgoInfo* info = find_algo(name);
  if (!info) {
    (at / "quant_algo")
        .fail("is '{}', which is not a ModelOpt quant_algo fp4cl knows (its FP4 algos: NVFP4, W4A16_NVFP4)",
              raw_name);
  }
  if (info->scheme) {
    const std::int64_t group_size = integer_member(entry, "group_size", at).value_or(default_group_size.value_or(16));
    if (group_size != 16) {
      (at / "group_size").fail("is {}, expected 16 for {} (NVFP4 blocks have 16 elements)", group_size, name);
    }
    if (bool_member(entry, "has_zero_point", at).value_or(false)) {
      (at / "has_zero_point").fail("is true: asymmetric quantization (zero points) is not NVFP4; expected false");
    }
    if (bool_member(entry, "pre_quant_scale", at).value_or(false)) {
      (at / "pre_quant_scale")
          .fail("is true: {} with an AWQ pre-quantization scale is not supported; expected false", name);
    }
  }
  return Algo{name, info->scheme};
}

Decision decision_for(const Algo& algo, std::string reason) {
  Decision d;
  if (algo.scheme) {
    d.kind = Decision::Kind::quantized;
    d.scheme = *algo.scheme;
  } else {
    d.kind = Decision::Kind::unsupported;
    d.what = fmt::format("ModelOpt quant_algo '{}'", algo.name);
  }
  d.reason = std::move(reason);
  return d;
}

class ModelOptRules final : public QuantRules {
 public:
  // `body` holds quant_algo & co. at `body_at`; exclusion lists are read from `exclude_keys`.
  ModelOptRules(const JsonPath& source, const Json& body, const JsonPath& body_at,
                std::initializer_list<std::string_view> exclude_keys)
      : QuantRules(source) {
    for (std::string_view key : exclude_keys) {
      for (const std::string& entry : string_list_member(body, key, body_at)) {
        exclude_.push_back({ModulePattern::modelopt(entry), std::string(key)});
      }
    }
    const std::optional<std::string> raw = string_member(body, "quant_algo", body_at);
    if (!raw) {
      body_at.fail("has no quant_algo (expected hf_quant_config.json {{\"quantization\": {{\"quant_algo\": ...}}}} "
                   "or a config.json quantization_config with \"quant_algo\")");
    }
    if (to_upper(*raw) == kMixedPrecision) {
      read_quantized_layers(body, body_at);
      return;
    }
    algo_ = read_algo(body, body_at, *raw, std::nullopt);
    if (!algo_.scheme) {
      (body_at / "quant_algo")
          .fail("is '{}', which is not an FP4 scheme fp4cl runs (fp4cl reads NVFP4, W4A16_NVFP4, and "
                "MIXED_PRECISION with NVFP4 / W4A16_NVFP4 layers)",
                *raw);
    }
  }

  QuantProducer producer() const override { return QuantProducer::modelopt; }

  std::string summary() const override { return mixed_ ? std::string(kMixedPrecision) : algo_.name; }

  Decision decide(std::string_view module) const override {
    for (const Exclusion& e : exclude_) {
      if (e.pattern.matches(module)) {
        Decision d;
        d.reason = fmt::format("{} entry '{}'", e.key, e.pattern.text());
        return d;
      }
    }
    if (!mixed_) return decision_for(algo_, fmt::format("quant_algo {}", algo_.name));
    return decide_mixed(module);
  }

 private:
  struct Exclusion {
    ModulePattern pattern;
    std::string key;
  };

  void read_quantized_layers(const Json& body, const JsonPath& body_at) {
    mixed_ = true;
    const JsonPath layers_at = body_at / "quantized_layers";
    const Json* layers = object_member(body, "quantized_layers", body_at);
    if (!layers || layers->empty()) {
      layers_at.fail("is missing or empty: MIXED_PRECISION needs a quant_algo per quantized module");
    }
    const std::optional<std::int64_t> default_group_size = integer_member(body, "group_size", body_at);
    bool any_fp4 = false;
    for (auto it = layers->begin(); it != layers->end(); ++it) {
      const JsonPath entry_at = layers_at / it.key();
      expect_object(it.value(), entry_at);
      const std::optional<std::string> raw = string_member(it.value(), "quant_algo", entry_at);
      if (!raw) (entry_at / "quant_algo").fail("is missing");
      Algo algo = read_algo(it.value(), entry_at, *raw, default_group_size);
      any_fp4 = any_fp4 || algo.scheme.has_value();
      layers_.emplace(it.key(), std::move(algo));
    }
    if (!any_fp4) layers_at.fail("has no NVFP4 or W4A16_NVFP4 module: nothing fp4cl can run");
  }

  // quantized_layers names a module, its parent (e.g. "model.layers.0.mlp.experts" for every
  // expert projection under it), or its children (when asked for a parent).
  Decision decide_mixed(std::string_view module) const {
    if (const auto it = layers_.find(module); it != layers_.end()) {
      return decision_for(it->second, fmt::format("quantized_layers entry '{}'", it->first));
    }
    for (std::size_t dot = module.rfind('.'); dot != std::string_view::npos && dot > 0;
         dot = module.rfind('.', dot - 1)) {
      if (const auto it = layers_.find(module.substr(0, dot)); it != layers_.end()) {
        return decision_for(it->second, fmt::format("quantized_layers entry '{}', a parent module", it->first));
      }
    }
    const std::string prefix = std::string(module) + ".";
    auto first = layers_.lower_bound(prefix);
    if (first != layers_.end() && starts_with(first->first, prefix)) {
      for (auto it = std::next(first); it != layers_.end() && starts_with(it->first, prefix); ++it) {
        if (it->second.name != first->second.name) {
          fail("{}: module '{}' contains quantized_layers entries with different quant_algo: '{}' is {} and "
               "'{}' is {}; resolve its sub-modules one by one",
               source(), module, first->first, first->second.name, it->first, it->second.name);
        }
      }
      return decision_for(first->second, fmt::format("quantized_layers entries under it, e.g. '{}'", first->first));
    }
    Decision d;
    d.reason = "not listed in quantized_layers";
    return d;
  }

  std::vector<Exclusion> exclude_;
  bool mixed_ = false;
  Algo algo_;                                           // when !mixed_
  std::map<std::string, Algo, std::less<>> layers_;     // when mixed_
};

}  // namespace

std::shared_ptr<const QuantRules> parse_modelopt_config(const Json& config, const JsonPath& at) {
  expect_object(config, at);
  if (const Json* producer = object_member(config, "producer", at)) {
    const std::optional<std::string> name = string_member(*producer, "name", at / "producer");
    if (name && *name != "modelopt") (at / "producer" / "name").fail("is '{}', expected 'modelopt'", *name);
  }
  // hf_quant_config.json, and the legacy config.json form, nest everything under "quantization".
  if (const Json* nested = object_member(config, "quantization", at)) {
    return std::make_shared<ModelOptRules>(at, *nested, at / "quantization",
                                           std::initializer_list<std::string_view>{"exclude_modules"});
  }
  return std::make_shared<ModelOptRules>(at, config, at,
                                         std::initializer_list<std::string_view>{"ignore", "exclude_modules"});
}

}  // namespace fp4cl::detail
