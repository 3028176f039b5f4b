// What Checkpoint::open() finds in a model directory: every quantized linear module bound to its
// tensors, the MoE layers their expert projections form, and the layer list Checkpoint reports.
#pragma once

#include <cstddef>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/expert_naming.hpp"
#include "checkpoint/fused_experts.hpp"
#include "checkpoint/quantized_module.hpp"
#include "fp4cl/checkpoint.hpp"
#include "fp4cl/quant_config.hpp"
#include "fp4cl/safetensors.hpp"
#include "prepare/stack_experts.hpp"

namespace fp4cl::detail {

struct MoeLayerIndex {
  std::string name;    // "<prefix>.<container>"
  std::string prefix;  // the decoder layer, "model.layers.3"
  const ExpertNaming* naming = nullptr;
  std::vector<ExpertModules> experts;  // expert e at index e; pointers into CheckpointIndex::modules
  std::optional<FusedExperts> fused;   // gpt-oss: the experts as fused tensors (then `experts` is empty)
};

struct CheckpointIndex {
  CheckpointIndex(std::filesystem::path dir, QuantConfig quant_config, SafetensorsModel safetensors)
      : directory(std::move(dir)), config(std::move(quant_config)), model(std::move(safetensors)) {}
  CheckpointIndex(const CheckpointIndex&) = delete;  // `moe` points into `modules`
  CheckpointIndex& operator=(const CheckpointIndex&) = delete;

  std::filesystem::path directory;
  QuantConfig config;
  SafetensorsModel model;
  std::vector<QuantizedModule> modules;  // model order; never resized after discovery
  std::map<std::string, std::size_t, std::less<>> module_by_name;
  std::vector<MoeLayerIndex> moe;  // model order
  std::vector<CheckpointLayer> layers;
  std::vector<UnsupportedModule> unsupported;

  const QuantizedModule* find_module(std::string_view name) const;
  const MoeLayerIndex* find_moe(std::string_view name_or_prefix) const;
};

// Opens `dir` and discovers its quantized layers (see fp4cl/checkpoint.hpp for the rules).
std::shared_ptr<const CheckpointIndex> discover_checkpoint(const std::filesystem::path& dir);

}  // namespace fp4cl::detail
