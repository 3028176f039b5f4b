// FP32 global scales read from a checkpoint and turned into both directions (FP4.md §3): the
// dequant direction gs_d that dequantization and the W4A4 epilogue multiply by, and the quant
// direction gs_q = 1/gs_d that activation quantization multiplies by. The direction the checkpoint
// stores is kept bit-exact; the other is its IEEE fp32 reciprocal.
#pragma once

#include "fp4cl/quant_config.hpp"
#include "fp4cl/safetensors.hpp"

namespace fp4cl::detail {

struct GlobalScale {
  float dequant = 1.0f;  // gs_d
  float quant = 1.0f;    // gs_q
};

// The F32 scalar `tensor`, stored in direction `stored` (dequant or quant). Throws fp4cl::Error
// naming the tensor and its file when the value is zero, negative, NaN or infinite, or when its
// reciprocal is not a finite positive float (a subnormal whose inverse overflows).
GlobalScale read_global_scale(const TensorView& tensor, ScaleDirection stored);

// The wider of two activation scales: the larger gs_d (larger calibrated amax, nothing clips),
// ties broken by the smaller gs_q. Equals vLLM's max of ModelOpt input_scale and min of
// compressed-tensors input_global_scale, whichever direction was stored.
const GlobalScale& wider(const GlobalScale& a, const GlobalScale& b);

}  // namespace fp4cl::detail
