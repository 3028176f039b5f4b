// The common part of the strategies that read the "rows" weight layout (linear_gemv.cl,
// linear_gemm.cl): one shared prepared copy of the weights, the activation pre-pass into the
// workspace, the epilogue factor, and the kernel arguments both kernels take.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kernels/linear_activation_pass.hpp"
#include "kernels/linear_kernel.hpp"
#include "prepare/fp4_row_layout.hpp"

namespace fp4cl {

class RowsLinearKernel : public LinearKernel {
 public:
  Verdict can_implement(const LinearConfig& config) const override;
  void prepare(const Context& ctx, const LinearConfig& config, const Fp4Weight& weight,
               WeightLayouts& layouts) final;
  std::size_t workspace_bytes() const final;
  void apply(const Context& ctx, const LinearCall& call) final;
  std::uint64_t weight_bytes() const final;

 protected:
  // Builds the strategy's kernels for the config (its tuning read with tuning_value). They share
  // one signature (fp4_dot.cl's argument list); prepare() and apply() set the arguments of all.
  virtual std::vector<cl::Kernel> build(const Context& ctx, const LinearConfig& config) = 0;
  // Enqueues the matmul for m tokens, with one of kernels() whose arguments are set, after `wait`.
  virtual cl::Event launch(const Context& ctx, std::int64_t m, const std::vector<cl::Event>& wait) = 0;

  // The strategy's name in the registry (the key of its built-in tuning).
  virtual const char* strategy_name() const = 0;
  // The value of tuning parameter `name` in the config, else the built-in default of the config's
  // device class for this strategy.
  long long tuning_value(const LinearConfig& config, const std::string& name) const;
  // FP4CL_VEC, the vector width of the decode and the accumulators (8 or 16).
  long long vector_width(const LinearConfig& config) const { return tuning_value(config, "FP4CL_VEC"); }

  const Fp4RowLayoutInfo& layout() const { return weights_->info; }
  std::vector<cl::Kernel>& kernels() { return kernels_; }

 private:
  template <typename T>
  void set_arg(cl_uint index, const T& value, const char* what);

  std::shared_ptr<const DeviceFp4RowLayout> weights_;
  LinearActivationPass activations_;
  std::vector<cl::Kernel> kernels_;
  std::int64_t max_tokens_ = 0;
  float epilogue_ = 1.0f;
};

// The factor of the rows kernels' epilogue: alpha (gs_d(weight), times gs_d(input) = 1/gs_q(input)
// under NVFP4 W4A4) times 2^scale_shift. Throws when it is not a finite nonzero float.
float rows_epilogue_factor(const QuantScheme& scheme, const Fp4Weight& weight, const Fp4RowLayoutInfo& layout);
// The same for any layout, given its MXFP4 scale shift (0 for NVFP4).
float linear_epilogue_factor(const QuantScheme& scheme, const Fp4Weight& weight, int scale_shift);

std::unique_ptr<LinearKernel> make_gemv_rows_kernel();
std::unique_ptr<LinearKernel> make_gemm_tiled_kernel();
std::unique_ptr<LinearKernel> make_gemv_lanes_kernel();  // linear_gemv_lanes.cpp
std::unique_ptr<LinearKernel> make_gemv_words_kernel();  // linear_gemv_words.cpp
std::unique_ptr<LinearKernel> make_gemv_int_kernel();    // linear_gemv_int.cpp
std::unique_ptr<LinearKernel> make_gemv_denorm_kernel(); // linear_gemv_denorm.cpp
std::unique_ptr<LinearKernel> make_gemv_split_kernel();  // linear_gemv_split.cpp
std::unique_ptr<LinearKernel> make_linear_mma_kernel();  // linear_mma.cpp

}  // namespace fp4cl
