#include "checkpoint/activation_calibration.hpp"

#include <fmt/format.h>

#include <cmath>
#include <optional>
#include <string_view>

#include "checkpoint/portable_math.hpp"
#include "checkpoint/portable_random.hpp"
#include "checkpoint/weight_quantizer.hpp"
#include "fp4cl/formats.hpp"
#include "support/check.hpp"
#include "support/text.hpp"

namespace fp4cl::detail {

namespace {

float round_bf16(double x) { return bf16_to_float(float_to_bf16(static_cast<float>(x))); }

}  // namespace

ActivationCalibration::ActivationCalibration(const SafetensorsModel& model, std::int64_t rows,
                                             std::uint64_t seed)
    : model_(model), rows_(rows), seed_(seed) {
  if (rows <= 0) fail("calibration rows = {} must be positive", rows);
}

const std::vector<float>& ActivationCalibration::inputs(std::int64_t width) {
  auto it = inputs_.find(width);
  if (it != inputs_.end()) return it->second;
  PortableRandom random(seed_, fmt::format("calibration.activations.{}", width));
  std::vector<float> x(static_cast<std::size_t>(rows_ * width));
  for (float& v : x) v = round_bf16(random.normal());
  return inputs_.emplace(width, std::move(x)).first->second;
}

std::vector<float> ActivationCalibration::project(const TensorView& weight) {
  const std::int64_t n = weight.shape()[0], k = weight.shape()[1];
  const std::vector<float> w = weight_values(weight);
  const std::vector<float>& x = inputs(k);
  std::vector<float> y(static_cast<std::size_t>(rows_ * n));
  for (std::int64_t r = 0; r < rows_; ++r) {
    const float* xr = &x[static_cast<std::size_t>(r * k)];
    for (std::int64_t j = 0; j < n; ++j) {
      const float* wj = &w[static_cast<std::size_t>(j * k)];
      double acc = 0.0;
      for (std::int64_t i = 0; i < k; ++i) {
        const double p = static_cast<double>(xr[i]) * static_cast<double>(wj[i]);  // exact
        acc += p;
      }
      y[static_cast<std::size_t>(r * n + j)] = round_bf16(acc);
    }
  }
  return y;
}

float ActivationCalibration::input_amax(const std::string& module, std::int64_t in_features) {
  std::vector<float> activations;
  if (ends_with(module, "down_proj")) {
    // The siblings are [I, K'] each, I = in_features; K' is the MLP's input width.
    const std::string prefix = module.substr(0, module.size() - std::string_view("down_proj").size());
    std::optional<TensorView> g = model_.find(prefix + "gate_proj.weight");
    std::optional<TensorView> u = model_.find(prefix + "up_proj.weight");
    if (g && u && g->shape().size() == 2 && g->shape() == u->shape() && g->shape()[0] == in_features) {
      const std::vector<float> gv = project(*g);
      const std::vector<float> uv = project(*u);
      activations.resize(gv.size());
      for (std::size_t i = 0; i < gv.size(); ++i) {
        const double gd = gv[i];
        const double e = portable_exp(-gd);
        const double den = 1.0 + e;
        const double silu = gd / den;
        activations[i] = round_bf16(silu * static_cast<double>(uv[i]));
      }
      return tensor_amax(activations);
    }
  }
  if (ends_with(module, "o_proj")) {
    const std::string prefix = module.substr(0, module.size() - std::string_view("o_proj").size());
    std::optional<TensorView> v = model_.find(prefix + "v_proj.weight");
    if (v && v->shape().size() == 2) return tensor_amax(project(*v));
  }
  return tensor_amax(inputs(in_features));
}

}  // namespace fp4cl::detail
