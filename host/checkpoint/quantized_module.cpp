// Binding a quantized linear module to its tensors, checking what the headers tell.
#include "checkpoint/quantized_module.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "fp4cl/formats.hpp"

#include "support/check.hpp"

namespace fp4cl::detail {

namespace {

std::string tensor_text(const TensorView& t) {
  return fmt::format("{} {}", dtype_name(t.dtype()), shape_string(t.shape()));
}

class Binder {
 public:
  Binder(const SafetensorsModel& model, std::string module, const QuantScheme& scheme, QuantProducer producer)
      : model_(model), module_(std::move(module)), scheme_(scheme), producer_(producer) {}

  std::string who() const { return fmt::format("{} ({}, {})", module_, scheme_.name(), to_string(producer_)); }

  // The tensor "<module>.<suffix>"; `expected` says what it should be.
  TensorView find(const std::string& suffix, const std::string& expected, const TensorView* beside) const {
    const std::string name = TensorLayout::tensor_name(module_, suffix);
    if (std::optional<TensorView> t = model_.find(name)) return *t;
    fail("{}: tensor '{}' is missing from {}; expected {}{}", who(), name, model_.source(), expected,
         beside ? fmt::format(" (the module's weight '{}' is in '{}')", beside->name(), beside->file()) : "");
  }

  [[noreturn]] void wrong(const TensorView& t, const std::string& expected, const std::string& why = "") const {
    fail("{}: tensor '{}' in '{}' is {}; expected {}{}", who(), t.name(), t.file(), tensor_text(t), expected, why);
  }

  // An F32 scalar, shape [] (ModelOpt) or [1] (compressed-tensors).
  TensorView global_scale(const std::string& suffix, const std::string& what, ScaleDirection direction,
                          const TensorView& weight) const {
    const std::string expected = fmt::format("F32 [] or [1]: {} ({} direction)", what, to_string(direction));
    TensorView t = find(suffix, expected, &weight);
    const auto& shape = t.shape();
    if (t.dtype() != Dtype::f32 || !(shape.empty() || (shape.size() == 1 && shape[0] == 1))) wrong(t, expected);
    return t;
  }

 private:
  const SafetensorsModel& model_;
  std::string module_;
  QuantScheme scheme_;
  QuantProducer producer_;
};

bool scale_dtype_ok(WeightFormat format, Dtype dtype) {
  if (format == WeightFormat::nvfp4) return dtype == Dtype::f8_e4m3;
  return dtype == Dtype::u8 || dtype == Dtype::f8_e8m0;  // E8M0 exponents: torch.uint8 or float8_e8m0fnu
}

const char* scale_dtype_text(WeightFormat format) {
  return format == WeightFormat::nvfp4 ? "F8_E4M3" : "U8 (or F8_E8M0)";
}

}  // namespace

std::string QuantizedModule::describe() const {
  return fmt::format("{} ({}, {})", name, scheme.name(), to_string(producer));
}

std::uint64_t QuantizedModule::stored_bytes() const {
  std::uint64_t bytes = weight.info().size_bytes() + weight_scale.info().size_bytes();
  if (weight_global_scale) bytes += weight_global_scale->info().size_bytes();
  if (input_global_scale) bytes += input_global_scale->info().size_bytes();
  return bytes;
}

QuantizedModule bind_quantized_module(const SafetensorsModel& model, const QuantConfig& config, std::string module,
                                      const QuantScheme& scheme) {
  const TensorLayout layout = config.layout(scheme);
  const Binder b(model, module, scheme, config.producer());
  const int block = scheme.block_size();

  const TensorView weight = b.find(layout.weight, "U8 [N, K/2]: the packed E2M1 codes", nullptr);
  const auto& ws = weight.shape();
  if (weight.dtype() != Dtype::u8 || ws.size() != 2 || ws[0] <= 0 || ws[1] <= 0) {
    b.wrong(weight, "U8 [N, K/2] with N, K > 0: the packed E2M1 codes, two per byte");
  }
  const std::int64_t n = ws[0];
  const std::int64_t k = 2 * ws[1];
  if (k % block != 0) {
    b.wrong(weight, fmt::format("U8 [N, K/2] with K a multiple of {}", block),
            fmt::format(" (K = {} in-features is not a multiple of the {} block size {})", k, to_string(scheme.weight),
                        block));
  }

  const std::string scale_expected =
      fmt::format("{} [N, K/{}] = [{}, {}]: one {} scale per {} elements of weight '{}' (U8 [{}, {}], K = {})",
                  scale_dtype_text(scheme.weight), block, n, k / block,
                  scheme.weight == WeightFormat::nvfp4 ? "E4M3" : "E8M0", block, weight.name(), n, k / 2, k);
  const TensorView scale = b.find(layout.weight_scale, scale_expected, &weight);
  const std::vector<std::int64_t> scale_shape{n, k / block};
  if (!scale_dtype_ok(scheme.weight, scale.dtype()) || scale.shape() != scale_shape) b.wrong(scale, scale_expected);

  std::optional<TensorView> weight_gs, input_gs;
  if (!layout.weight_global_scale.empty()) {
    weight_gs =
        b.global_scale(layout.weight_global_scale, "the weight's global scale", layout.global_scale_direction, weight);
  }
  if (!layout.input_global_scale.empty()) {
    input_gs = b.global_scale(layout.input_global_scale, "the activations' global scale", layout.global_scale_direction,
                              weight);
  }
  // An unquantized bias beside the weight (gpt-oss's experts, Qwen2's q/k/v projections): read, never
  // dropped.
  std::optional<TensorView> bias = model.find(TensorLayout::tensor_name(module, "bias"));
  if (bias) {
    const std::string expected =
        fmt::format("BF16 or F32 [{}]: one bias per out-feature of weight '{}' (U8 [{}, {}])", n, weight.name(), n, k / 2);
    if ((bias->dtype() != Dtype::bf16 && bias->dtype() != Dtype::f32) || bias->shape() != std::vector<std::int64_t>{n})
      b.wrong(*bias, expected);
  }
  return QuantizedModule{std::move(module),
                         scheme,
                         config.producer(),
                         layout.global_scale_direction,
                         n,
                         k,
                         weight,
                         scale,
                         std::move(weight_gs),
                         std::move(input_gs),
                         std::move(bias)};
}

std::vector<float> module_bias(const QuantizedModule& m) {
  return m.bias ? bias_values(*m.bias, m.describe()) : std::vector<float>{};
}

std::vector<float> bias_values(const TensorView& bias, const std::string& owner) {
  std::vector<float> out;
  if (bias.dtype() == Dtype::f32) {
    out = bias.to_vector<float>();
  } else {
    for (const std::uint16_t bits : bias.to_vector<std::uint16_t>(Dtype::bf16)) out.push_back(bf16_to_float(bits));
  }
  for (std::size_t i = 0; i < out.size(); ++i)
    if (!std::isfinite(out[i]))
      fail("{}: tensor '{}' in '{}' has {} at [{}]; a bias must be finite", owner, bias.name(), bias.file(), out[i], i);
  return out;
}

}  // namespace fp4cl::detail
