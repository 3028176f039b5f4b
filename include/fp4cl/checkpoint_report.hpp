// What `fp4cl inspect` tells about a checkpoint: its producer and files, every quantized layer
// with its scheme, shapes, bytes and global-scale ranges, the layers grouped by name pattern
// ("model.layers.{0–47}.mlp.experts: 128 experts NVFP4 W4A4"), the modules fp4cl cannot run,
// and warnings (gate and up projections with different global scales, activation scales present
// in W4A16 layers, which are ignored). Reads tensor headers and global scales only; the codes and
// block scales are checked when a layer is loaded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fp4cl/checkpoint.hpp"

namespace fp4cl {

// The smallest and largest of a set of positive scales.
struct ScaleRange {
  float min = 0.0f;
  float max = 0.0f;
  void add(float value);
  void merge(const ScaleRange& other);
};

struct LayerReport {
  CheckpointLayer layer;
  // NVFP4: the weights' global scales in the dequant direction (gs_d), over every projection.
  std::optional<ScaleRange> weight_global_scale;
  // NVFP4 W4A4: the activations' global scales in the dequant direction (gs_d).
  std::optional<ScaleRange> input_scale;
  // MoE: the experts whose gate and up projections carry different weight global scales (kept
  // exactly, one per projection).
  std::int64_t gate_up_scale_mismatches = 0;
  // Whether its weights have biases ("<module>.bias"; an MoE layer: every expert projection's),
  // which the layer loads and adds.
  bool biases = false;
  // W4A16: the activation-scale tensors the checkpoint carries for this layer (ignored: a W4A16
  // layer never reads them).
  std::vector<std::string> ignored_activation_scales;
};

// Layers whose names differ only in their layer number and whose kind, scheme and shapes agree.
struct LayerGroup {
  std::string pattern;                // "model.layers.{}.mlp.experts" (the name, when it has no number)
  std::vector<std::int64_t> numbers;  // the layer numbers, ascending (empty without a number)
  std::vector<std::size_t> layers;    // indices into CheckpointReport::layers
  LayerReport total;                  // the first layer's description, with bytes, ranges and counts summed

  // "model.layers.{0–47}.mlp.experts", "model.layers.{0–2, 5}.mlp.experts", "model.layers.3.mlp.experts".
  std::string label() const;
};

struct CheckpointReport {
  std::string directory;
  std::string producer;        // "ModelOpt" / "compressed-tensors"
  std::string config_source;   // where the quantization config came from
  std::string tensors_source;  // the index file or the single safetensors file
  std::size_t shards = 0;
  std::size_t tensors = 0;
  std::uint64_t file_bytes = 0;       // all shards together
  std::uint64_t quantized_bytes = 0;  // the bytes the quantized layers load
  std::vector<std::pair<QuantScheme, std::size_t>> schemes;  // each scheme used, with its layer count
  std::vector<LayerReport> layers;    // Checkpoint::layers() order
  std::vector<LayerGroup> groups;     // in order of their first layer
  std::vector<UnsupportedModule> unsupported;
  std::vector<std::string> warnings;
};

// Throws fp4cl::Error when a global scale it reads is invalid (zero, negative, not finite).
CheckpointReport inspect_checkpoint(const Checkpoint& checkpoint);

}  // namespace fp4cl
