// Activation amax for NVFP4 W4A4 input scales when there is no calibration data (see
// QuantizeOptions::input_amax in fp4cl/model_writer.hpp): synthetic inputs pushed through the
// model's own weights, one linear step deep.
//  - The stand-in for a module's input is `rows` × K values N(0,1) rounded to BF16 (RMS-normalized
//    hidden states have unit RMS), drawn from PortableRandom(seed, "calibration.activations.<K>"):
//    every module with in_features K sees the same rows.
//  - A "<p>.down_proj" whose siblings "<p>.gate_proj" / "<p>.up_proj" exist ([I, K'] each, I its
//    in_features) sees a = bf16(silu(g) × u), g = bf16(x·gateᵀ), u = bf16(x·upᵀ), x the rows of
//    width K' (FP4.md §6's expert MLP).
//  - A "<p>.o_proj" whose sibling "<p>.v_proj" exists sees bf16(x·v_projᵀ): attention output rows
//    are convex combinations of value rows, so their amax is at most that of the values.
// Dot products accumulate in double in index order and silu uses portable_exp, so the result is
// the same on every platform.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "fp4cl/safetensors.hpp"

namespace fp4cl::detail {

class ActivationCalibration {
 public:
  ActivationCalibration(const SafetensorsModel& model, std::int64_t rows, std::uint64_t seed);

  // max |activation| over the synthetic inputs of linear module `module`, whose weight is
  // [N, in_features]. Throws fp4cl::Error naming a sibling weight that cannot be read.
  float input_amax(const std::string& module, std::int64_t in_features);

  // The synthetic input rows of width `width` ([rows, width], BF16 values as floats).
  const std::vector<float>& inputs(std::int64_t width);

 private:
  // bf16(x · Wᵀ) for the named weight W [N, K]: [rows, N].
  std::vector<float> project(const TensorView& weight);

  const SafetensorsModel& model_;
  std::int64_t rows_;
  std::uint64_t seed_;
  std::map<std::int64_t, std::vector<float>> inputs_;  // by width
};

}  // namespace fp4cl::detail
