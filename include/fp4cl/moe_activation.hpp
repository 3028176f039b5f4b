// FC1's activation of the MoE layer (MoeConfig::activation), in a header of its own so that the
// scalar reference (host/reference, no OpenCL) can take it too.
#pragma once

namespace fp4cl {

// FC1's activation between the two GEMMs (g, u: a pair's gate and up sums, their factors and
// biases applied; a is then rounded to BF16).
struct MoeActivation {
  enum class Kind {
    swiglu,          // a = silu(g) · u, silu(g) = g / (1 + e^-g)
    swiglu_clamped,  // gpt-oss (vLLM's swigluoai_and_mul): g' = min(g, limit), u' = clamp(u, -limit, limit),
                     // a = g' / (1 + e^(-alpha · g')) · (u' + 1)
  };
  Kind kind = Kind::swiglu;
  float alpha = 1.702f;  // swiglu_clamped: finite and > 0
  float limit = 7.0f;    // swiglu_clamped: finite and > 0
  // gpt-oss's: swiglu_clamped with alpha 1.702 and limit 7.
  static MoeActivation gpt_oss() { return {Kind::swiglu_clamped, 1.702f, 7.0f}; }
};

}  // namespace fp4cl
