// The quantization config a producer writes for a checkpoint whose quantized linears all use one
// FP4 scheme, field for field as the producers write it (FP4.md §5):
//  - ModelOpt (modelopt/torch/export: quant_utils.py process_layer_quant_config builds
//    hf_quant_config.json, convert_hf_config.py convert_hf_quant_config_format the copy in
//    config.json): hf_quant_config.json {"producer": {"name": "modelopt", "version": ...},
//    "quantization": {"quant_algo": "NVFP4" | "W4A16_NVFP4", "kv_cache_quant_algo": null,
//    "group_size": 16, "exclude_modules": [sorted]}}; config.json quantization_config
//    {"config_groups": {"group_0": {"input_activations": ..., "weights": ..., "targets":
//    ["Linear"]}} (NVFP4 only: the converter derives no group for W4A16_NVFP4), "ignore": [...],
//    "quant_algo": ..., "producer": {...}, "quant_method": "modelopt"}; keys in that order.
//  - compressed-tensors (QuantizationConfig.model_dump as llm-compressor saves it, keys sorted
//    as transformers' save_pretrained writes them; the field set of compressed-tensors 0.12):
//    {"config_groups": {"group_0": {"format", "input_activations", "output_activations": null,
//    "targets": ["Linear"], "weights"}}, "format": "nvfp4-pack-quantized" |
//    "mxfp4-pack-quantized", "global_compression_ratio": null, "ignore": [...],
//    "kv_cache_scheme": null, "quant_method": "compressed-tensors", "quantization_status":
//    "compressed", "sparsity_config": {}, "transform_config": {}, "version": ...}. Weights are the
//    NVFP4 / MXFP4 presets' QuantizationArgs (tensor_group 16 with E4M3 scales / group 32 with
//    uint8 exponent scales); input_activations are the presets' (NVFP4 dynamic "local" with a
//    stored global scale, MXFP4 dynamic true) for W4A4 and null for W4A16.
// `ignored` are the linear modules left unquantized; they are written in natural order
// (layer 2 before layer 10) for compressed-tensors and sorted as Python's sorted() for ModelOpt.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "fp4cl/quant_config.hpp"

namespace fp4cl::detail {

// The ModelOpt release whose export format the ModelOpt files mirror (written as the producer
// version, which ModelOpt consumers expect to find).
inline constexpr const char* kModelOptFormatVersion = "0.37.0";
// The compressed-tensors release whose config fields the compressed-tensors files carry.
inline constexpr const char* kCompressedTensorsFormatVersion = "0.12.2";

struct ProducerQuantConfig {
  nlohmann::ordered_json quantization_config;             // config.json → "quantization_config"
  std::optional<nlohmann::ordered_json> hf_quant_config;  // ModelOpt's hf_quant_config.json
};

ProducerQuantConfig producer_quant_config(QuantProducer producer, const QuantScheme& scheme,
                                          const std::vector<std::string>& ignored);

}  // namespace fp4cl::detail
