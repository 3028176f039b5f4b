// The common part of the CPU GEMV strategies whose weights are rows in groups as vector lanes
// (prepare/fp4_lane_groups.hpp): gemv_lanes, gemv_int, gemv_words and gemv_denorm. Strategy S with tuning
// prefix P has kernels/linear_S.cl with three kernels, linear_S_single, linear_S_pair and
// linear_S_tokens (1, 2 and P_TOKENS tokens per work-item), taking the arguments
//   0 codes, 1 block scales, 2 activations, 3 y, 4 bias, 5 n, 6 m, 7 padded k, 8 k,
//   9 MXFP4 exponent bias, 10 epilogue factor, 11 bias flag, 12 output type, 13.. its own,
// launched as global (roundup(groups, P_LOCAL), ceil(m / tokens per item)), local (P_LOCAL, 1).
// Tuning: P_TOKENS (1..16) and P_LOCAL (1..1024). Activations come from the pre-pass
// (kernels/linear_activation_pass.hpp) unless the strategy reads the BF16 input itself.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fp4cl/program_cache.hpp"
#include "kernels/linear_activation_pass.hpp"
#include "kernels/linear_kernel.hpp"
#include "prepare/fp4_lane_groups.hpp"

namespace fp4cl {

class LaneGroupsGemvKernel : public LinearKernel {
 public:
  // `strategy`: the registry name ("gemv_lanes"); `prefix`: its tuning parameters' ("LANES").
  LaneGroupsGemvKernel(std::string strategy, std::string prefix);

  Verdict is_supported(const Context& ctx) const final;
  // Automatic selection passes over a decode to fp32 denormals on CPUs that multiply them slowly
  // (cpu_denormal_speed.hpp; forced, it runs).
  Verdict selectable(const DeviceInfo& device) const override;
  Verdict can_implement(const LinearConfig& config) const final;
  Verdict designed_for(LinearRegime regime, DeviceKind device) const final;
  void prepare(const Context& ctx, const LinearConfig& config, const Fp4Weight& weight,
               WeightLayouts& layouts) final;
  std::size_t workspace_bytes() const final;
  void apply(const Context& ctx, const LinearCall& call) final;
  std::uint64_t weight_bytes() const final;
  std::vector<std::string> tuning_parameters() const final;
  std::string describe() const final;

 protected:
  // What differs between the strategies:
  // what it needs of the layer besides its tuning (k's multiple, the scheme);
  virtual Verdict can_take(const LinearConfig& config) const = 0;
  // its weight layout, taken from `layouts` (or made and uploaded there);
  virtual std::shared_ptr<const DeviceFp4LaneGroups> take_weights(const Context& ctx, const Fp4Weight& weight,
                                                                  WeightLayouts& layouts) const = 0;
  // what the activation pre-pass writes for it (asked at prepare());
  virtual ActivationForm activation_form(const Context& ctx, const LinearConfig& config) const {
    (void)ctx, (void)config;
    return ActivationForm::split_float;
  }
  // whether it reads the layer's BF16 input directly (no pre-pass), decided at prepare();
  virtual bool reads_bf16_input(const Context& ctx, const LinearConfig& config) const;
  // its own build options, and its own arguments (13 on), set once at prepare() and per call.
  virtual void add_options(const Context& ctx, const LinearConfig& config, BuildOptions& options) const;
  // whether its decode needs fp32 denormals kept (is_supported refuses devices that flush them);
  virtual bool needs_fp32_denormals() const { return false; }
  // its tuning parameters besides P_TOKENS and P_LOCAL (default: none).
  virtual std::vector<std::string> own_tuning_parameters() const;
  virtual void set_own_arguments(const LinearConfig& config);
  virtual void set_call_arguments(cl::Kernel& run, std::int64_t tokens_per_item);

  long long tokens() const { return tokens_; }  // P_TOKENS
  bool bf16_input() const { return bf16_x_; }  // reads_bf16_input's answer
  // Whether its activations are BF16 rows [m, k]: the input itself, or the pass's bf16_rows.
  bool bf16_rows() const { return bf16_x_ || form_ == ActivationForm::bf16_rows; }
  const Fp4LaneGroupsInfo& layout() const { return weights_->info; }
  // Sets argument `index` of all three kernels (`what` names it in errors).
  template <typename T>
  void set_arg(cl_uint index, const T& value, const char* what);

 private:
  long long tuning_value(const LinearConfig& config, const char* suffix) const;

  std::string strategy_, prefix_;
  std::shared_ptr<const DeviceFp4LaneGroups> weights_;
  LinearActivationPass activations_;
  std::vector<cl::Kernel> kernels_;
  long long tokens_ = 0, local_ = 0;
  bool bf16_x_ = false;
  ActivationForm form_ = ActivationForm::split_float;
};

}  // namespace fp4cl
