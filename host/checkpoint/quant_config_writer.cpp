#include "checkpoint/quant_config_writer.hpp"

#include <algorithm>

#include "checkpoint/module_names.hpp"
#include "support/check.hpp"

namespace fp4cl::detail {

namespace {

using OJson = nlohmann::ordered_json;

OJson modelopt_args() {
  // convert_hf_quant_config_format's NVFP4 group: the same four fields for weights and inputs.
  return OJson{{"dynamic", false}, {"num_bits", 4}, {"type", "float"}, {"group_size", 16}};
}

ProducerQuantConfig modelopt_config(const QuantScheme& scheme, std::vector<std::string> ignored) {
  if (scheme.weight != WeightFormat::nvfp4) {
    fail("ModelOpt has no {} checkpoint layout that fp4cl writes (FP4.md §5: ModelOpt NVFP4 and "
         "W4A16_NVFP4 only); use the compressed-tensors layout",
         scheme.name());
  }
  std::sort(ignored.begin(), ignored.end());  // process_layer_quant_config: sorted(exclude_modules)
  const char* algo = scheme.w4a16() ? "W4A16_NVFP4" : "NVFP4";
  const OJson producer = {{"name", "modelopt"}, {"version", kModelOptFormatVersion}};

  OJson quantization;
  quantization["quant_algo"] = algo;
  quantization["kv_cache_quant_algo"] = nullptr;
  quantization["group_size"] = 16;
  quantization["exclude_modules"] = ignored;
  OJson hf;
  hf["producer"] = producer;
  hf["quantization"] = std::move(quantization);

  OJson config;
  if (!scheme.w4a16()) {
    OJson group;
    group["input_activations"] = modelopt_args();
    group["weights"] = modelopt_args();
    group["targets"] = {"Linear"};
    config["config_groups"] = {{"group_0", std::move(group)}};
  }
  config["ignore"] = ignored;
  config["quant_algo"] = algo;
  config["producer"] = producer;
  config["quant_method"] = "modelopt";
  return {std::move(config), std::move(hf)};
}

// QuantizationArgs as compressed-tensors 0.12 dumps them (nlohmann::json sorts the keys).
nlohmann::json ct_args(const QuantScheme& scheme, bool activations) {
  const bool nv = scheme.weight == WeightFormat::nvfp4;
  nlohmann::json a;
  a["actorder"] = nullptr;
  a["block_structure"] = nullptr;
  a["group_size"] = nv ? 16 : 32;
  a["num_bits"] = 4;
  a["observer_kwargs"] = nlohmann::json::object();
  a["scale_dtype"] = nv ? "torch.float8_e4m3fn" : "torch.uint8";
  a["strategy"] = nv ? "tensor_group" : "group";
  a["symmetric"] = true;
  a["type"] = "float";
  a["zp_dtype"] = nv ? nlohmann::json("torch.float8_e4m3fn") : nlohmann::json(nullptr);
  if (!activations) {
    a["dynamic"] = false;
    a["observer"] = "minmax";
  } else if (nv) {
    a["dynamic"] = "local";  // per-block scales at run time, calibrated global scale stored
    a["observer"] = "static_minmax";
  } else {
    a["dynamic"] = true;
    a["observer"] = nullptr;
  }
  return a;
}

ProducerQuantConfig compressed_tensors_config(const QuantScheme& scheme, std::vector<std::string> ignored) {
  std::sort(ignored.begin(), ignored.end(), natural_less);
  const char* format = scheme.weight == WeightFormat::nvfp4 ? "nvfp4-pack-quantized" : "mxfp4-pack-quantized";
  nlohmann::json group;
  group["format"] = format;
  group["input_activations"] = scheme.w4a16() ? nlohmann::json(nullptr) : ct_args(scheme, true);
  group["output_activations"] = nullptr;
  group["targets"] = {"Linear"};
  group["weights"] = ct_args(scheme, false);
  nlohmann::json c;
  c["config_groups"] = {{"group_0", std::move(group)}};
  c["format"] = format;
  c["global_compression_ratio"] = nullptr;
  c["ignore"] = ignored;
  c["kv_cache_scheme"] = nullptr;
  c["quant_method"] = "compressed-tensors";
  c["quantization_status"] = "compressed";
  c["sparsity_config"] = nlohmann::json::object();
  c["transform_config"] = nlohmann::json::object();
  c["version"] = kCompressedTensorsFormatVersion;
  return {OJson::parse(c.dump()), std::nullopt};  // keeps the sorted order
}

}  // namespace

ProducerQuantConfig producer_quant_config(QuantProducer producer, const QuantScheme& scheme,
                                          const std::vector<std::string>& ignored) {
  return producer == QuantProducer::modelopt ? modelopt_config(scheme, ignored)
                                             : compressed_tensors_config(scheme, ignored);
}

}  // namespace fp4cl::detail
