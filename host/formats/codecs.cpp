// The public scalar codecs: thin wrappers over kernels/common/formats.cl, the definitions the
// OpenCL kernels compile too.
#include "common/formats.cl"

#include "fp4cl/formats.hpp"

namespace fp4cl {

float e2m1_to_float(std::uint8_t code) { return ::e2m1_decode(code); }
std::uint8_t float_to_e2m1(float x) { return static_cast<std::uint8_t>(::e2m1_encode(x)); }

float e4m3_to_float(std::uint8_t byte) { return ::e4m3_decode(byte); }
std::uint8_t float_to_e4m3(float x) { return static_cast<std::uint8_t>(::e4m3_encode(x)); }

float e8m0_to_float(std::uint8_t byte) { return ::e8m0_decode(byte); }
std::uint8_t float_to_e8m0(float x) { return static_cast<std::uint8_t>(::e8m0_encode(x)); }

float bf16_to_float(std::uint16_t bits) { return ::bf16_to_float(bits); }
std::uint16_t float_to_bf16(float x) { return static_cast<std::uint16_t>(::float_to_bf16(x)); }

}  // namespace fp4cl
