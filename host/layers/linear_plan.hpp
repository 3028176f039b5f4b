// Which kernel strategy, with which tuning parameters, serves which calls of a linear layer.
//
// With tuned entries for the layer (the tuning database, host/tuning/): one step per token bucket,
// each with the bucket's winning strategy and parameters; a call runs the step of the bucket
// nearest its token count (the largest bucket serves every larger count), except counts below the
// smallest bucket's share when that bucket is not 1 (bucket 64 serves from 46 tokens), which take
// the built-in plan below, and, where every bucket is a decode one, counts past the built-in
// crossover (GPUs: 32 tokens; CPUs with 16 floats a vector: 64; not on other CPUs), which take
// the built-in plan's prefill steps. Without (or when
// LinearOptions::decode_max_tokens is set): the decode strategy up to decode_max_tokens tokens and
// the prefill strategy above, as the registry selects them, with the device class's built-in
// parameters.
// Either way a forced strategy (LinearOptions::kernel, FP4CL_LINEAR_KERNEL) replaces the strategy
// of every step, and LinearOptions::tuning overrides parameters by name in every step whose
// strategy takes them. Consecutive steps with the same strategy and parameters merge.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fp4cl/context.hpp"
#include "fp4cl/linear.hpp"
#include "kernels/linear_kernel.hpp"

namespace fp4cl {

struct LinearPlanStep {
  std::int64_t last_tokens = 0;  // serves the calls above the previous step's, up to this many tokens
  std::string kernel;
  LinearConfig config;  // the layer's config with this step's complete tuning
  std::string origin;   // "tuned bucket 8 (tuning/pocl-cpu.json)", "built-in CPU defaults", ...
  bool forced = false;  // the strategy was named by the caller or FP4CL_LINEAR_KERNEL
};

struct LinearPlan {
  std::vector<LinearPlanStep> steps;  // by increasing last_tokens; the last covers max_tokens
  bool tuned = false;                 // the steps come from the tuning database
};

// `base`: the validated layer config with tuning empty. Throws fp4cl::Error for unknown tuning
// names, an unknown or refusing forced strategy, or a parameter a strategy refuses.
LinearPlan plan_linear_layer(const Context& ctx, const LinearConfig& base, const LinearOptions& options,
                             const LinearKernelRegistry& registry);

}  // namespace fp4cl
