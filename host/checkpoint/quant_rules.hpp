// The parsed form of a quantization config behind fp4cl::QuantConfig: one implementation per
// producer (quant_config_modelopt.cpp, quant_config_compressed_tensors.cpp,
// quant_config_gpt_oss.cpp), each deciding per
// module with its producer's matching rules.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "checkpoint/json_access.hpp"
#include "fp4cl/quant_config.hpp"
#include "fp4cl/scheme.hpp"

namespace fp4cl::detail {

// What a config decides for one module.
struct Decision {
  enum class Kind {
    quantized,      // `scheme` applies
    not_quantized,  // ignored / excluded / matched by nothing
    unsupported,    // quantized with something fp4cl does not run; `what` says what
  };
  Kind kind = Kind::not_quantized;
  QuantScheme scheme;
  std::string what;    // unsupported: the quantization, e.g. "ModelOpt quant_algo 'FP8'"
  std::string reason;  // the config entry that decided, e.g. "config_groups.group_0 target 'Linear'"
};

class QuantRules {
 public:
  virtual ~QuantRules() = default;

  virtual QuantProducer producer() const = 0;

  // The decision for `module`. Throws fp4cl::Error when the config is ambiguous for it.
  virtual Decision decide(std::string_view module) const = 0;

  // What the config quantizes with, for comparing two configs of one checkpoint: the ModelOpt
  // quant_algo ("NVFP4", "MIXED_PRECISION") or the compressed-tensors format.
  virtual std::string summary() const = 0;

  // Where the config came from, e.g. "/m/config.json (quantization_config)".
  const std::string& source() const { return source_; }

 protected:
  explicit QuantRules(const JsonPath& at);

 private:
  std::string source_;
};

// A ModelOpt config at `at`: an hf_quant_config.json document ({"producer", "quantization"}) or
// a config.json quantization_config (flat, or with a nested "quantization" object).
std::shared_ptr<const QuantRules> parse_modelopt_config(const Json& config, const JsonPath& at);

// A compressed-tensors quantization_config at `at`.
std::shared_ptr<const QuantRules> parse_compressed_tensors_config(const Json& config, const JsonPath& at);

// A gpt-oss quantization_config ({"quant_method": "mxfp4", "modules_to_not_convert": [...]}) at `at`.
std::shared_ptr<const QuantRules> parse_gpt_oss_config(const Json& config, const JsonPath& at);

}  // namespace fp4cl::detail
