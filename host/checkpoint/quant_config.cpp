// fp4cl::QuantConfig: finding a checkpoint's quantization config (config.json and/or
// hf_quant_config.json), telling the producers apart, and the tensor layout each producer writes.
#include "fp4cl/quant_config.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <optional>

#include "checkpoint/json_access.hpp"
#include "checkpoint/quant_rules.hpp"
#include "support/check.hpp"

namespace fp4cl {

const char* to_string(QuantProducer producer) {
  switch (producer) {
    case QuantProducer::modelopt:
      return "ModelOpt";
    case QuantProducer::compressed_tensors:
      return "compressed-tensors";
    case QuantProducer::gpt_oss:
      return "gpt-oss MXFP4";
  }
  return "?";
}

const char* to_string(ScaleDirection direction) {
  switch (direction) {
    case ScaleDirection::none:
      return "none";
    case ScaleDirection::dequant:
      return "dequant";
    case ScaleDirection::quant:
      return "quant";
  }
  return "?";
}

std::string TensorLayout::tensor_name(std::string_view module, std::string_view suffix) {
  if (suffix.empty()) fail("no tensor name for module '{}': the scheme has no such tensor (empty suffix)", module);
  return fmt::format("{}.{}", module, suffix);
}

namespace {

// FP4.md §5: what each producer writes per quantized linear. W4A16 drops the input scale.
struct LayoutRow {
  QuantProducer producer;
  WeightFormat format;
  TensorLayout w4a4;
};

const LayoutRow kLayouts[] = {
    {QuantProducer::modelopt, WeightFormat::nvfp4,
     {"weight", "weight_scale", "weight_scale_2", "input_scale", ScaleDirection::dequant}},
    {QuantProducer::compressed_tensors, WeightFormat::nvfp4,
     {"weight_packed", "weight_scale", "weight_global_scale", "input_global_scale", ScaleDirection::quant}},
    {QuantProducer::compressed_tensors, WeightFormat::mxfp4,
     {"weight_packed", "weight_scale", "", "", ScaleDirection::none}},
};

}  // namespace

TensorLayout tensor_layout(QuantProducer producer, const QuantScheme& scheme) {
  if (producer == QuantProducer::gpt_oss)
    fail("gpt-oss MXFP4 checkpoints have no per-module {} layout: they quantize MoE experts only, as fused "
         "tensors (<layer>.gate_up_proj_blocks, ...)",
         scheme.name());
  for (const LayoutRow& row : kLayouts) {
    if (row.producer != producer || row.format != scheme.weight) continue;
    TensorLayout layout = row.w4a4;
    if (scheme.w4a16()) layout.input_global_scale.clear();
    return layout;
  }
  fail("{} checkpoints have no {} layout that fp4cl reads", to_string(producer), scheme.name());
}

namespace detail {

QuantRules::QuantRules(const JsonPath& at)
    : source_(at.path().empty() ? at.file() : fmt::format("{} ({})", at.file(), at.path())) {}

namespace {

bool is_modelopt_method(std::string_view method) {
  std::string m(method);
  std::transform(m.begin(), m.end(), m.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return m.compare(0, 8, "modelopt") == 0;  // "modelopt", "modelopt_fp4", "modelopt_mixed"
}

// A quantization_config object from config.json (or given bare).
std::shared_ptr<const QuantRules> parse_quantization_config(const Json& config, const JsonPath& at) {
  expect_object(config, at);
  if (const std::optional<std::string> method = string_member(config, "quant_method", at)) {
    if (*method == "compressed-tensors") return parse_compressed_tensors_config(config, at);
    if (is_modelopt_method(*method)) return parse_modelopt_config(config, at);
    if (*method == "mxfp4") return parse_gpt_oss_config(config, at);
    (at / "quant_method")
        .fail("is '{}', which fp4cl does not read (it reads ModelOpt, \"modelopt\", compressed-tensors, "
              "\"compressed-tensors\", and gpt-oss's \"mxfp4\")",
              *method);
  }
  // ModelOpt exports that predate quant_method: {"quant_library": "modelopt", ...},
  // {"quant_algo": ...} or {"quantization": {"quant_algo": ...}}.
  const std::optional<std::string> library = string_member(config, "quant_library", at);
  if ((library && is_modelopt_method(*library)) || member(config, "quant_algo") || member(config, "quantization")) {
    return parse_modelopt_config(config, at);
  }
  at.fail("has no quant_method: cannot tell which producer wrote it");
}

// A whole JSON document: config.json, hf_quant_config.json or a bare quantization_config.
std::shared_ptr<const QuantRules> parse_document(const Json& doc, const std::string& source) {
  const JsonPath root(source, "");
  expect_object(doc, root);
  if (const Json* q = member(doc, "quantization_config")) return parse_quantization_config(*q, root / "quantization_config");
  if (member(doc, "producer") || member(doc, "quantization")) return parse_modelopt_config(doc, root);
  if (member(doc, "quant_method") || member(doc, "quant_algo")) return parse_quantization_config(doc, root);
  if (member(doc, "architectures") || member(doc, "model_type")) {
    root.fail("has no \"quantization_config\": the model is not quantized");
  }
  root.fail("is not a quantization config: expected a config.json with \"quantization_config\", an "
            "hf_quant_config.json with \"quantization\", or a quantization_config object with \"quant_method\"");
}

}  // namespace

}  // namespace detail

QuantConfig::QuantConfig(std::shared_ptr<const detail::QuantRules> rules) : rules_(std::move(rules)) {}

QuantConfig QuantConfig::load(const std::filesystem::path& model_dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(model_dir, ec)) fail("model directory '{}' does not exist or is not a directory", model_dir.string());
  const fs::path config_path = model_dir / "config.json";
  const fs::path hf_path = model_dir / "hf_quant_config.json";
  const bool has_config = fs::exists(config_path, ec);
  const bool has_hf = fs::exists(hf_path, ec);
  if (!has_config && !has_hf) {
    fail("model directory '{}' has neither config.json nor hf_quant_config.json", model_dir.string());
  }
  std::shared_ptr<const detail::QuantRules> from_hf;
  if (has_hf) from_hf = detail::parse_modelopt_config(detail::read_json_file(hf_path), detail::JsonPath(hf_path.string(), ""));
  if (has_config) {
    const detail::Json config = detail::read_json_file(config_path);
    if (const detail::Json* q = detail::member(config, "quantization_config")) {
      auto rules = detail::parse_quantization_config(*q, detail::JsonPath(config_path.string(), "quantization_config"));
      if (from_hf && (rules->producer() != QuantProducer::modelopt || rules->summary() != from_hf->summary())) {
        fail("{} and {} disagree: {} {} versus ModelOpt {}; remove the stale one", rules->source(),
             from_hf->source(), to_string(rules->producer()), rules->summary(), from_hf->summary());
      }
      return QuantConfig(std::move(rules));
    }
  }
  if (from_hf) return QuantConfig(std::move(from_hf));
  fail("{}: no \"quantization_config\", and there is no hf_quant_config.json: the model is not quantized",
       config_path.string());
}

QuantConfig QuantConfig::from_file(const std::filesystem::path& file) {
  return QuantConfig(detail::parse_document(detail::read_json_file(file), file.string()));
}

QuantConfig QuantConfig::from_json(std::string_view json_text, std::string_view source) {
  const std::string name(source);
  return QuantConfig(detail::parse_document(detail::parse_json(json_text, name), name));
}

QuantProducer QuantConfig::producer() const { return rules_->producer(); }

const std::string& QuantConfig::source() const { return rules_->source(); }

std::optional<QuantScheme> QuantConfig::resolve(std::string_view module) const {
  const detail::Decision d = rules_->decide(module);
  switch (d.kind) {
    case detail::Decision::Kind::quantized:
      return d.scheme;
    case detail::Decision::Kind::not_quantized:
      return std::nullopt;
    case detail::Decision::Kind::unsupported:
      break;
  }
  fail("{}: module '{}' is quantized with {} ({}), which fp4cl cannot run (it runs NVFP4 and MXFP4 weights)",
       source(), module, d.what, d.reason);
}

TensorLayout QuantConfig::layout(const QuantScheme& scheme) const { return tensor_layout(producer(), scheme); }

std::string QuantConfig::explain(std::string_view module) const {
  try {
    const detail::Decision d = rules_->decide(module);
    switch (d.kind) {
      case detail::Decision::Kind::quantized:
        return fmt::format("{}: {} ({})", module, d.scheme.name(), d.reason);
      case detail::Decision::Kind::not_quantized:
        return fmt::format("{}: not quantized ({})", module, d.reason);
      case detail::Decision::Kind::unsupported:
        return fmt::format("{}: {}, not supported by fp4cl ({})", module, d.what, d.reason);
    }
  } catch (const Error& e) {
    return fmt::format("{}: error: {}", module, e.what());
  }
  return std::string(module);
}

}  // namespace fp4cl
