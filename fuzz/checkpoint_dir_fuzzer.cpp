// libFuzzer target: a whole model directory (config files and safetensors shards, packed as
// model_dir_archive.hpp describes) opened as a checkpoint, inspected, and every layer loaded —
// what `fp4cl inspect` and the layers' from_checkpoint() do before touching a device.
// Properties: each step returns or throws fp4cl::Error; a loaded layer's prepared weights have
// the sizes its shape implies, finite positive global scales and no NaN block scale.
#include <cmath>
#include <cstdint>
#include <string>

#include "fp4cl/checkpoint.hpp"
#include "fp4cl/checkpoint_report.hpp"
#include "fp4cl/moe.hpp"
#include "fuzz_support.hpp"
#include "model_dir_archive.hpp"

namespace {

using fp4cl::fuzz::accepts;
using fp4cl::fuzz::finding;

bool finite_positive(float x) { return std::isfinite(x) && x > 0.0f; }

void check_linear(const fp4cl::CheckpointLayer& layer, const fp4cl::Fp4Weight& w) {
  const std::int64_t block = fp4cl::block_size(w.format);
  if (w.n != layer.out_features || w.k != layer.in_features) finding(layer.name + ": shape differs from the index");
  if (static_cast<std::int64_t>(w.packed.size()) != w.n * w.k / 2 ||
      static_cast<std::int64_t>(w.scales.size()) != w.n * w.k / block)
    finding(layer.name + ": prepared sizes disagree with the shape");
  if (!finite_positive(w.global_scale)) finding(layer.name + ": global scale not finite and positive");
}

void check_moe(const fp4cl::CheckpointLayer& layer, const fp4cl::Fp4Experts& x) {
  const std::int64_t block = fp4cl::block_size(x.format);
  const std::int64_t e = x.num_experts, h = x.hidden, i = x.intermediate;
  if (e != layer.num_experts || h != layer.hidden || i != layer.intermediate)
    finding(layer.name + ": expert shape differs from the index");
  if (static_cast<std::int64_t>(x.w13_packed.size()) != e * 2 * i * h / 2 ||
      static_cast<std::int64_t>(x.w2_packed.size()) != e * h * i / 2 ||
      static_cast<std::int64_t>(x.w13_scales.size()) != e * 2 * i * h / block ||
      static_cast<std::int64_t>(x.w2_scales.size()) != e * h * i / block)
    finding(layer.name + ": stacked sizes disagree with the shape");
  for (float s : x.w13_global_scale)
    if (!finite_positive(s)) finding(layer.name + ": w13 global scale not finite and positive");
  for (float s : x.w2_global_scale)
    if (!finite_positive(s)) finding(layer.name + ": w2 global scale not finite and positive");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static fp4cl::fuzz::ScratchDir scratch;
  const std::filesystem::path& dir = scratch.fresh();
  fp4cl::fuzz::write_model_dir(dir, data, size);

  accepts([&] {
    const fp4cl::Checkpoint ckpt = fp4cl::Checkpoint::open(dir);
    accepts([&] { (void)fp4cl::inspect_checkpoint(ckpt); });
    (void)ckpt.quantized_modules();
    for (const fp4cl::CheckpointLayer& layer : ckpt.layers()) {
      if (layer.kind == fp4cl::LayerKind::linear) {
        accepts([&] { check_linear(layer, ckpt.load_linear(layer.name).weight); });
      } else {
        accepts([&] { check_moe(layer, ckpt.load_moe(layer.name).experts); });
        accepts([&] {
          fp4cl::MoeLoadOptions shared;
          shared.input_scales = fp4cl::ExpertInputScales::shared;
          check_moe(layer, ckpt.load_moe(layer.name, shared).experts);
        });
        accepts([&] { (void)fp4cl::MoeConfig::from_checkpoint(ckpt, layer.name); });
      }
    }
  });
  return 0;
}
